//! The managed default environment: `<cache>/envs/default-py<major>.<minor>`, a virtualenv with
//! ipykernel that we create on first use and reuse after.
//!
//! Invariants:
//! - The final directory only ever appears by `rename(2)` of a finished, verified build that
//!   already holds its metadata file, so a reader never sees a half-built environment.
//! - Check-and-create runs under an exclusive `flock` on `<cache>/envs/default-py3.X.lock`; a
//!   process that waited for it re-checks first and reuses what the holder built.
//! - Every build happens in its own `<cache>/envs/.tmp-<random>` directory, removed on every
//!   failure path (an explicit removal, and `TempDir`'s drop if the future is cancelled).
//! - Broken environments are moved into a temp directory before being deleted, so a crash half
//!   way through leaves only a `.tmp-*` directory that a later holder of the lock cleans up.
//! - Only proof removes an environment: bad metadata, or a probe that ran to its end and failed.
//!   A probe that timed out (a busy machine) fails this resolve and leaves the directory alone.

use std::ffi::OsStr;
use std::io::{self, Write as _};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tempfile::TempDir;
use tokio::process::Command;

use crate::confine::{Confinement, Purpose};
use crate::error::Error;
use crate::phase::Phase;
use crate::probe::{self, Report};
use crate::process::{self, Failure};
use crate::{lock, lookup};

/// The metadata file written into a finished environment; without a valid one it is broken.
pub(crate) const METADATA_FILE: &str = "ipython-mcp-env.json";

/// What we install; the bounds match what the kernel helper supports.
pub(crate) const IPYKERNEL_REQUIREMENT: &str = "ipykernel>=6.29,<8";

/// What the helper's checkpoints pickle with in the managed environment, so that functions,
/// classes and lambdas defined in cells survive a kernel's death (pure Python, ~30 kB).
const CLOUDPICKLE_REQUIREMENT: &str = "cloudpickle>=3,<4";

/// Prefix of build and removal directories inside `<cache>/envs`.
const TEMP_PREFIX: &str = ".tmp-";

/// Temp directories older than this (or twice the install timeout, if longer) are leftovers of
/// a crashed process; a live build is always younger because it is bounded by the timeout.
pub(crate) const STALE_TEMP_AGE: Duration = Duration::from_secs(60 * 60);

/// How much longer than the install timeout a waiter gives the holder of the lock, which also
/// probes before it builds.
pub(crate) const LOCK_MARGIN: Duration = Duration::from_secs(30);

/// Files larger than this in `bin/` are not scripts and are left alone by relocation.
const LARGEST_SCRIPT: u64 = 1024 * 1024;

/// 2: the managed environment has cloudpickle too (one of format 1 is rebuilt).
const METADATA_FORMAT: u32 = 2;

/// The prompt `bin/activate` shows; it would otherwise be the build directory's name.
const PROMPT: &str = "ipython-mcp";

/// The interpreter the managed environment is built from.
pub(crate) struct Base {
    pub(crate) python: PathBuf,
    pub(crate) major_minor: String,
}

/// The managed environment's interpreter and what it reported.
pub(crate) struct Provisioned {
    pub(crate) executable: PathBuf,
    pub(crate) report: Report,
    /// `Some(seconds)` when this call built it.
    pub(crate) provision_seconds: Option<f64>,
}

/// What to build: shared by the managed default environment and named environments.
pub(crate) struct Recipe<'a> {
    /// For messages: "the managed environment" or "the environment \"name\"".
    pub(crate) label: String,
    /// For messages: what is installed ("ipykernel", "the requirements and ipykernel").
    pub(crate) packages: &'a str,
    /// Everything passed to the installer, ipykernel included.
    pub(crate) requirements: Vec<String>,
    /// The prompt `bin/activate` shows.
    pub(crate) prompt: &'a str,
    /// Prefix of the build directory, inside the target's parent.
    pub(crate) temp_prefix: &'a str,
    /// The metadata file's content, from the verified probe and the installer used.
    pub(crate) metadata: &'a (dyn Fn(&Report, &str, &str) -> serde_json::Value + Send + Sync),
}

pub(crate) struct Provisioner<'a> {
    pub(crate) cache_dir: &'a Path,
    pub(crate) path_var: Option<&'a OsStr>,
    pub(crate) install_timeout: Duration,
    /// How long an interpreter may take to answer the probe (`probe::PROBE_TIMEOUT`).
    pub(crate) probe_timeout: Duration,
    /// What the probes and installers run under.
    pub(crate) confinement: &'a Confinement,
    pub(crate) progress: &'a (dyn Fn(Phase) + Send + Sync),
}

#[derive(Serialize, Deserialize)]
struct Metadata {
    format: u32,
    python_version: String,
    ipykernel_version: String,
    tool: String,
    created_unix: u64,
}

/// The state of `default-py3.X`.
enum Check {
    Absent,
    Broken(String),
    /// Its interpreter did not answer the probe in time: neither ready nor proven broken.
    Unanswered(String),
    Ready(Report),
}

/// What builds the environment: `uv` when it is on PATH (much faster), else venv and pip.
enum Tool {
    Uv(PathBuf),
    Pip,
}

impl Tool {
    fn creator(&self) -> &'static str {
        match self {
            Tool::Uv(_) => "uv",
            Tool::Pip => "venv",
        }
    }

    fn installer(&self) -> &'static str {
        match self {
            Tool::Uv(_) => "uv",
            Tool::Pip => "pip",
        }
    }
}

impl Provisioner<'_> {
    /// Returns the ready managed environment for `base`, creating it if needed.
    pub(crate) async fn ensure(&self, base: &Base) -> Result<Provisioned, Error> {
        let envs = self.cache_dir.join("envs");
        let name = format!("default-py{}", base.major_minor);
        let target = envs.join(&name);
        let executable = target.join("bin").join("python");
        let reuse = |report| Provisioned {
            executable: executable.clone(),
            report,
            provision_seconds: None,
        };

        // Fast path without the lock: the directory only appears complete (see invariants).
        if let Check::Ready(report) = check(&target, self.probe_timeout, self.confinement).await {
            return Ok(reuse(report));
        }

        tokio::fs::create_dir_all(&envs)
            .await
            .map_err(io_error("creating the cache directory", &envs))?;
        (self.progress)(Phase::Locking);
        let lock_path = envs.join(format!("{name}.lock"));
        let _held = lock::acquire(&lock_path, self.install_timeout + LOCK_MARGIN).await?;

        match check(&target, self.probe_timeout, self.confinement).await {
            Check::Ready(report) => {
                tracing::debug!(path = %target.display(), "managed environment built by another process");
                return Ok(reuse(report));
            }
            Check::Broken(reason) => {
                tracing::warn!(path = %target.display(), %reason, "rebuilding broken managed environment");
                remove_broken(&envs, &target).await?;
            }
            Check::Unanswered(reason) => {
                tracing::warn!(path = %target.display(), %reason, "managed environment did not answer its probe; left as it is");
                return Err(Error::Probe {
                    python: executable,
                    detail: format!(
                        "{reason}; the managed environment was left as it is (a busy machine can be this slow: try again)"
                    ),
                });
            }
            Check::Absent => {}
        }
        clean_stale_temps(
            &envs,
            TEMP_PREFIX,
            STALE_TEMP_AGE.max(self.install_timeout * 2),
        )
        .await;

        let started = Instant::now();
        let metadata = |report: &Report, ipykernel_version: &str, tool: &str| {
            serde_json::to_value(Metadata {
                format: METADATA_FORMAT,
                python_version: report.python_version.clone(),
                ipykernel_version: ipykernel_version.to_owned(),
                tool: tool.to_owned(),
                created_unix: unix_now(),
            })
            .expect("metadata serialises")
        };
        let recipe = Recipe {
            label: "the managed environment".to_owned(),
            packages: "ipykernel and cloudpickle",
            requirements: vec![
                IPYKERNEL_REQUIREMENT.to_owned(),
                CLOUDPICKLE_REQUIREMENT.to_owned(),
            ],
            prompt: PROMPT,
            temp_prefix: TEMP_PREFIX,
            metadata: &metadata,
        };
        let report = self.build(base, &envs, &target, &recipe).await?;
        let seconds = started.elapsed().as_secs_f64();
        tracing::info!(path = %target.display(), seconds, "created managed environment");
        Ok(Provisioned {
            executable,
            report,
            provision_seconds: Some(seconds),
        })
    }

    /// Builds into a fresh temp directory in `envs` and renames the result to `target`.
    pub(crate) async fn build(
        &self,
        base: &Base,
        envs: &Path,
        target: &Path,
        recipe: &Recipe<'_>,
    ) -> Result<Report, Error> {
        let temp = temp_dir_in(envs, recipe.temp_prefix).await?;
        let result = self
            .build_in(base, envs, &temp.path().join("venv"), target, recipe)
            .await;
        // Empty after a successful rename; a partial environment otherwise.
        discard(temp).await;
        result
    }

    /// Creates the environment in `venv`, installs the recipe's requirements, verifies it and
    /// writes its metadata, then moves it to `target`; creating and installing share one
    /// install timeout.
    async fn build_in(
        &self,
        base: &Base,
        envs: &Path,
        venv: &Path,
        target: &Path,
        recipe: &Recipe<'_>,
    ) -> Result<Report, Error> {
        let deadline = Instant::now() + self.install_timeout;
        let tool = match lookup::find("uv", self.path_var).await {
            Some(uv) => Tool::Uv(uv),
            None => Tool::Pip,
        };
        let venv_python = venv.join("bin").join("python");
        self.create_venv(&tool, base, envs, venv, deadline, recipe)
            .await?;
        self.install(&tool, (envs, venv), &venv_python, deadline, recipe)
            .await?;
        let report = self.verify(&tool, venv, &venv_python, recipe).await?;
        move_into_place(venv, target).await?;
        Ok(report)
    }

    /// Creates the bare virtualenv in `venv` from the base interpreter.
    async fn create_venv(
        &self,
        tool: &Tool,
        base: &Base,
        envs: &Path,
        venv: &Path,
        deadline: Instant,
        recipe: &Recipe<'_>,
    ) -> Result<(), Error> {
        (self.progress)(Phase::Creating {
            tool: tool.creator().to_owned(),
        });
        let mut create = match tool {
            // --seed puts pip in the environment, so `%pip install` works in the kernel.
            Tool::Uv(uv) => command(
                uv,
                ["venv", "--seed", "--prompt", recipe.prompt, "--python"],
            ),
            Tool::Pip => command(&base.python, ["-m", "venv", "--prompt", recipe.prompt]),
        };
        match tool {
            Tool::Uv(_) => create.arg(&base.python).arg(venv),
            Tool::Pip => create.arg(venv),
        };
        let creating = format!("creating the environment with {}", tool.creator());
        self.step(
            create,
            (envs, venv),
            deadline,
            recipe,
            ("create", &creating),
            |detail| Error::Create {
                environment: recipe.label.clone(),
                tool: tool.creator().to_owned(),
                detail,
            },
        )
        .await
    }

    /// Installs the recipe's requirements (ipykernel included) into the environment whose
    /// interpreter is `venv_python`.
    async fn install(
        &self,
        tool: &Tool,
        (envs, venv): (&Path, &Path),
        venv_python: &Path,
        deadline: Instant,
        recipe: &Recipe<'_>,
    ) -> Result<(), Error> {
        (self.progress)(Phase::Installing {
            tool: tool.installer().to_owned(),
        });
        let mut install = match tool {
            Tool::Uv(uv) => command(uv, ["pip", "install", "--python"]),
            Tool::Pip => command(
                venv_python,
                [
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "--no-input",
                    "-q",
                ],
            ),
        };
        if let Tool::Uv(_) = tool {
            install.arg(venv_python);
        }
        install.args(&recipe.requirements);
        let installing = format!("installing {} with {}", recipe.packages, tool.installer());
        self.step(
            install,
            (envs, venv),
            deadline,
            recipe,
            ("install", &installing),
            |detail| Error::Install {
                environment: recipe.label.clone(),
                packages: recipe.packages.to_owned(),
                tool: tool.installer().to_owned(),
                detail,
            },
        )
        .await
    }

    /// Probes the new environment and, once it imports ipykernel, writes its metadata file:
    /// the metadata is what marks an environment as finished, so it comes last.
    async fn verify(
        &self,
        tool: &Tool,
        venv: &Path,
        venv_python: &Path,
        recipe: &Recipe<'_>,
    ) -> Result<Report, Error> {
        (self.progress)(Phase::Verifying);
        let verify_error = |detail| Error::Verify {
            environment: recipe.label.clone(),
            path: venv.to_owned(),
            detail,
        };
        let report = probe::probe(venv_python, None, self.probe_timeout, self.confinement)
            .await
            .map_err(|failure| verify_error(failure.detail))?;
        let ipykernel_version = match &report.ipykernel {
            Ok(version) => version.clone(),
            Err(reason) => {
                return Err(verify_error(format!(
                    "ipykernel cannot be imported: {reason}"
                )))
            }
        };
        let metadata = (recipe.metadata)(&report, &ipykernel_version, tool.installer());
        let metadata_path = venv.join(METADATA_FILE);
        let bytes = serde_json::to_vec_pretty(&metadata).expect("metadata serialises");
        tokio::fs::write(&metadata_path, bytes)
            .await
            .map_err(io_error("writing", &metadata_path))?;
        Ok(report)
    }

    /// Runs one installer step within what is left of the install timeout.
    async fn step(
        &self,
        mut command: Command,
        (envs, venv): (&Path, &Path),
        deadline: Instant,
        recipe: &Recipe<'_>,
        (phase, doing): (&'static str, &str),
        failed: impl FnOnce(String) -> Error,
    ) -> Result<(), Error> {
        // A stable directory we own: a project's uv.toml must not shape a shared environment.
        command.current_dir(envs);
        let timed_out = |output: String| Error::Timeout {
            environment: recipe.label.clone(),
            phase,
            doing: doing.to_owned(),
            seconds: self.install_timeout.as_secs(),
            detail: if output.is_empty() {
                "no output".to_owned()
            } else {
                output
            },
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(timed_out(String::new()));
        }
        let program = command.as_std().get_program().to_owned();
        // The build directory the environment is made in, which exists before it does.
        let purpose = Purpose::Install {
            dir: venv.parent().unwrap_or(venv).to_owned(),
        };
        match process::run_confined(command, remaining, self.confinement, purpose).await {
            Ok(finished) if finished.status.success() => Ok(()),
            Ok(finished) => Err(failed(finished.failure_detail())),
            Err(Failure::Spawn(reason)) => Err(failed(format!(
                "could not start {}: {reason}",
                Path::new(&program).display()
            ))),
            Err(Failure::Confine(reason)) => Err(failed(format!(
                "could not confine {}: {reason}",
                Path::new(&program).display()
            ))),
            Err(Failure::TimedOut(output)) => Err(timed_out(output)),
        }
    }
}

/// Moves the finished environment from `venv` to `target`, first rewriting the build
/// directory's path in its scripts to the final one (file work, on the blocking pool).
async fn move_into_place(venv: &Path, target: &Path) -> Result<(), Error> {
    let (from, to) = (venv.to_owned(), target.to_owned());
    tokio::task::spawn_blocking(move || relocate(&from, &to))
        .await
        .map_err(|err| io::Error::other(err.to_string()))
        .and_then(|result| result)
        .map_err(io_error("rewriting script paths in", venv))?;
    tokio::fs::rename(venv, target)
        .await
        .map_err(io_error("moving the new environment to", target))
}

fn command<const N: usize>(program: &Path, args: [&str; N]) -> Command {
    let mut command = Command::new(program);
    command.args(args);
    command
}

pub(crate) fn io_error<'a>(
    action: &'a str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> Error + 'a {
    move |err| Error::Io {
        action: action.to_owned(),
        path: path.to_owned(),
        detail: err.to_string(),
    }
}

/// The largest metadata file read.
const MAX_METADATA_BYTES: u64 = 1024 * 1024;

/// The environment's metadata file, on the blocking pool. Kernels may write their environment
/// (`%pip`), so it is read as an untrusted file: no link followed, no FIFO or device opened, at
/// most `MAX_METADATA_BYTES`.
pub(crate) async fn read_metadata(target: &Path) -> io::Result<Vec<u8>> {
    let target = target.to_owned();
    tokio::task::spawn_blocking(move || {
        ipython_mcp_untrusted::read(&target, Path::new(METADATA_FILE), MAX_METADATA_BYTES).map_err(
            |error| {
                if error.is_not_found() {
                    io::Error::new(io::ErrorKind::NotFound, error.to_string())
                } else {
                    io::Error::other(error.to_string())
                }
            },
        )
    })
    .await
    .map_err(io::Error::other)?
}

/// Valid metadata and an interpreter that imports ipykernel (one probe, no installer).
async fn check(target: &Path, probe_timeout: Duration, confinement: &Confinement) -> Check {
    let metadata = match read_metadata(target).await {
        Ok(bytes) => bytes,
        Err(_) if tokio::fs::symlink_metadata(target).await.is_err() => return Check::Absent,
        Err(err) => return Check::Broken(format!("no metadata file: {err}")),
    };
    if !metadata_is_valid(&metadata) {
        return Check::Broken("invalid metadata file".to_owned());
    }
    match probe::environment(target, probe_timeout, confinement).await {
        Ok(report) => match &report.ipykernel {
            Ok(_) => Check::Ready(report),
            Err(reason) => Check::Broken(format!("ipykernel cannot be imported: {reason}")),
        },
        Err(failure) if failure.timed_out => Check::Unanswered(failure.detail),
        Err(failure) => Check::Broken(format!("its python does not run: {failure}")),
    }
}

fn metadata_is_valid(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Metadata>(bytes).is_ok_and(|metadata| {
        metadata.format == METADATA_FORMAT
            && !metadata.python_version.is_empty()
            && !metadata.ipykernel_version.is_empty()
            && !metadata.tool.is_empty()
    })
}

/// Moves a broken environment out of the way atomically, then deletes it.
async fn remove_broken(envs: &Path, target: &Path) -> Result<(), Error> {
    let temp = temp_dir_in(envs, TEMP_PREFIX).await?;
    let moved = tokio::fs::rename(target, temp.path().join("broken")).await;
    discard(temp).await;
    moved.map_err(io_error("removing the broken environment", target))
}

/// A fresh `<prefix>*` temp directory in `envs`, made off the runtime threads (the cache may
/// be on a slow network home).
async fn temp_dir_in(envs: &Path, prefix: &str) -> Result<TempDir, Error> {
    let (dir, prefix) = (envs.to_owned(), prefix.to_owned());
    tokio::task::spawn_blocking(move || tempfile::Builder::new().prefix(&prefix).tempdir_in(&dir))
        .await
        .map_err(io::Error::other)
        .and_then(|made| made)
        .map_err(io_error("creating a temporary directory in", envs))
}

/// Deletes a temp directory off the runtime threads (a venv holds thousands of files).
pub(crate) async fn discard(temp: TempDir) {
    let path = temp.path().to_owned();
    let removed = tokio::task::spawn_blocking(move || temp.close()).await;
    if !matches!(removed, Ok(Ok(()))) {
        tracing::warn!(path = %path.display(), "could not remove temporary directory");
    }
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// Removes `<prefix>*` leftovers of crashed processes. Best effort: failures are only logged.
pub(crate) async fn clean_stale_temps(envs: &Path, prefix: &'static str, max_age: Duration) {
    let envs = envs.to_owned();
    let cleaned = tokio::task::spawn_blocking(move || -> io::Result<()> {
        let now = SystemTime::now();
        for entry in std::fs::read_dir(&envs)? {
            let entry = entry?;
            let Ok(modified) = entry.metadata().and_then(|metadata| metadata.modified()) else {
                continue;
            };
            if is_stale_temp(&entry.file_name(), prefix, modified, now, max_age) {
                tracing::info!(path = %entry.path().display(), "removing stale temporary directory");
                if let Err(err) = std::fs::remove_dir_all(entry.path()) {
                    tracing::warn!(path = %entry.path().display(), %err, "could not remove stale directory");
                }
            }
        }
        Ok(())
    })
    .await;
    if !matches!(cleaned, Ok(Ok(()))) {
        tracing::warn!("could not scan for stale temporary directories");
    }
}

fn is_stale_temp(
    name: &OsStr,
    prefix: &str,
    modified: SystemTime,
    now: SystemTime,
    max_age: Duration,
) -> bool {
    name.as_bytes().starts_with(prefix.as_bytes())
        && now.duration_since(modified).is_ok_and(|age| age > max_age)
}

/// Rewrites the build directory's path to the final one in scripts and `pyvenv.cfg`.
///
/// Installers write absolute paths into console-script shebangs and activate scripts; without
/// this, `bin/pip` or `bin/activate` of the renamed environment would point at the deleted temp
/// directory. The interpreter itself needs no help: it finds its prefix from where it runs.
///
/// The build directory is in the cache, which kernels may write: no link in it is followed
/// (interpreters in bin/ are symlinks to the base Python, left as they are), and only regular
/// files are read and written.
fn relocate(from: &Path, to: &Path) -> io::Result<()> {
    let (from_bytes, to_bytes) = (from.as_os_str().as_bytes(), to.as_os_str().as_bytes());
    let mut files = vec![PathBuf::from("pyvenv.cfg")];
    for entry in std::fs::read_dir(from.join("bin"))? {
        files.push(Path::new("bin").join(entry?.file_name()));
    }
    for file in files {
        let Ok(metadata) = std::fs::symlink_metadata(from.join(&file)) else {
            continue;
        };
        if !metadata.is_file() || metadata.len() > LARGEST_SCRIPT {
            continue;
        }
        let text =
            ipython_mcp_untrusted::read(from, &file, LARGEST_SCRIPT).map_err(io::Error::other)?;
        if let Some(rewritten) = replace_all(&text, from_bytes, to_bytes) {
            ipython_mcp_untrusted::overwrite(from, &file)
                .map_err(io::Error::other)?
                .write_all(&rewritten)?;
        }
    }
    Ok(())
}

/// `text` with every `from` replaced by `to`; `None` if nothing changed or it looks binary.
fn replace_all(text: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    if from.is_empty() || text.contains(&0) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.windows(from.len()).position(|window| window == from) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(to);
        rest = &rest[at + from.len()..];
        changed = true;
    }
    out.extend_from_slice(rest);
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn only_old_temp_directories_are_stale() {
        let now = SystemTime::now();
        let old = now - 2 * HOUR;
        let young = now - Duration::from_secs(60);
        assert!(is_stale_temp(
            OsStr::new(".tmp-abc123"),
            TEMP_PREFIX,
            old,
            now,
            HOUR
        ));
        assert!(!is_stale_temp(
            OsStr::new(".tmp-abc123"),
            TEMP_PREFIX,
            young,
            now,
            HOUR
        ));
        assert!(!is_stale_temp(
            OsStr::new("default-py3.11"),
            TEMP_PREFIX,
            old,
            now,
            HOUR
        ));
        assert!(!is_stale_temp(
            OsStr::new("default-py3.11.lock"),
            TEMP_PREFIX,
            old,
            now,
            HOUR
        ));
        // A clock that went backwards makes nothing stale.
        assert!(!is_stale_temp(
            OsStr::new(".tmp-abc123"),
            TEMP_PREFIX,
            now + HOUR,
            now,
            HOUR
        ));
    }

    #[tokio::test]
    async fn stale_temps_are_removed_and_everything_else_kept() {
        let envs = tempfile::tempdir().expect("tempdir");
        let stale = envs.path().join(".tmp-stale");
        let fresh = envs.path().join(".tmp-fresh");
        let env = envs.path().join("default-py3.11");
        for dir in [&stale, &fresh, &env] {
            fs::create_dir_all(dir.join("venv/bin")).expect("mkdir");
        }
        let two_hours_ago = SystemTime::now() - 2 * HOUR;
        for dir in [&stale, &env] {
            fs::File::open(dir)
                .and_then(|file| file.set_modified(two_hours_ago))
                .expect("set mtime");
        }
        clean_stale_temps(envs.path(), TEMP_PREFIX, HOUR).await;
        assert!(!stale.exists());
        assert!(fresh.exists());
        assert!(env.exists());
    }

    #[test]
    fn metadata_must_be_complete() {
        let good = br#"{"format":2,"python_version":"3.11.7","ipykernel_version":"7.1.0","tool":"pip","created_unix":1}"#;
        assert!(metadata_is_valid(good));
        assert!(!metadata_is_valid(b""));
        assert!(!metadata_is_valid(b"{}"));
        // An environment of an older format (without cloudpickle) is rebuilt.
        assert!(!metadata_is_valid(
            br#"{"format":1,"python_version":"3.11.7","ipykernel_version":"7.1.0","tool":"pip","created_unix":1}"#
        ));
        assert!(!metadata_is_valid(
            br#"{"format":2,"python_version":"3.11.7","ipykernel_version":"","tool":"pip","created_unix":1}"#
        ));
    }

    #[tokio::test]
    async fn a_missing_directory_is_absent_and_one_without_metadata_is_broken() {
        let envs = tempfile::tempdir().expect("tempdir");
        let target = envs.path().join("default-py3.11");
        assert!(matches!(
            check(&target, probe::PROBE_TIMEOUT, &Confinement::default()).await,
            Check::Absent
        ));
        fs::create_dir(&target).expect("mkdir");
        assert!(matches!(
            check(&target, probe::PROBE_TIMEOUT, &Confinement::default()).await,
            Check::Broken(_)
        ));
        fs::write(target.join(METADATA_FILE), "{").expect("write");
        assert!(matches!(
            check(&target, probe::PROBE_TIMEOUT, &Confinement::default()).await,
            Check::Broken(_)
        ));
    }

    /// The managed environment of a fake base Python, whose own `bin/python` is `script`.
    fn fake_environment(cache: &Path, script: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let target = cache.join("envs/default-py3.11");
        fs::create_dir_all(target.join("bin")).expect("mkdir");
        let python = target.join("bin/python");
        fs::write(&python, script).expect("write");
        fs::set_permissions(&python, fs::Permissions::from_mode(0o755)).expect("chmod");
        let metadata = br#"{"format":2,"python_version":"3.11.7","ipykernel_version":"7.1.0","tool":"pip","created_unix":1}"#;
        fs::write(target.join(METADATA_FILE), metadata).expect("write");
        target
    }

    async fn ensure_probing_for(
        cache: &Path,
        probe_timeout: Duration,
    ) -> Result<Provisioned, Error> {
        ensure_confined(cache, probe_timeout, &Confinement::default()).await
    }

    async fn ensure_confined(
        cache: &Path,
        probe_timeout: Duration,
        confinement: &Confinement,
    ) -> Result<Provisioned, Error> {
        let provisioner = Provisioner {
            cache_dir: cache,
            path_var: None,
            install_timeout: Duration::from_secs(600),
            probe_timeout,
            confinement,
            progress: &|_| {},
        };
        // Nothing can be built from this base: a rebuild fails at once, after any removal.
        let base = Base {
            python: PathBuf::from("/nonexistent/ipython-mcp/python3"),
            major_minor: "3.11".to_owned(),
        };
        provisioner.ensure(&base).await
    }

    #[tokio::test]
    async fn an_environment_whose_python_is_too_slow_to_answer_is_left_alone() {
        let cache = tempfile::tempdir().expect("tempdir");
        let target = fake_environment(cache.path(), "#!/bin/sh\nexec sleep 600\n");
        // Short probes: this python never answers, however long it is given.
        let error = match ensure_probing_for(cache.path(), Duration::from_millis(300)).await {
            Err(error) => error,
            Ok(_) => panic!("a python that never answers is not ready"),
        };
        assert!(matches!(error, Error::Probe { .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.contains("timed out"), "{message}");
        assert!(message.contains("left as it is"), "{message}");
        assert!(target.join("bin/python").is_file(), "not deleted");
        assert!(target.join(METADATA_FILE).is_file(), "not deleted");
        let mut entries: Vec<String> = fs::read_dir(cache.path().join("envs"))
            .expect("read_dir")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        entries.sort();
        assert_eq!(
            entries,
            ["default-py3.11", "default-py3.11.lock"],
            "no rebuild began"
        );
    }

    #[tokio::test]
    async fn an_environment_whose_python_ran_and_failed_is_removed_for_a_rebuild() {
        let cache = tempfile::tempdir().expect("tempdir");
        let target = fake_environment(cache.path(), "#!/bin/sh\nexit 1\n");
        let error = match ensure_probing_for(cache.path(), probe::PROBE_TIMEOUT).await {
            Err(error) => error,
            Ok(_) => panic!("a python that fails is not ready"),
        };
        // Removed, then the rebuild from the missing base failed.
        assert!(matches!(error, Error::Create { .. }), "{error:?}");
        assert!(!target.exists(), "a proven-broken environment is removed");
    }

    /// Readies every child as `Marks` says, and records what each was for.
    struct Marks {
        refuse: bool,
        seen: std::sync::Mutex<Vec<crate::confine::Purpose>>,
    }

    impl crate::confine::Confine for Marks {
        fn confine(
            &self,
            command: &mut std::process::Command,
            purpose: &crate::confine::Purpose,
        ) -> Result<crate::confine::Guard, String> {
            self.seen.lock().expect("lock").push(purpose.clone());
            if self.refuse {
                return Err("no sandbox here".to_owned());
            }
            command.env("IPYTHON_MCP_TEST_CONFINED", "1");
            Ok(Box::new(()))
        }
    }

    fn marks(refuse: bool) -> (std::sync::Arc<Marks>, Confinement) {
        let marks = std::sync::Arc::new(Marks {
            refuse,
            seen: std::sync::Mutex::new(Vec::new()),
        });
        let confinement = Confinement::new(marks.clone());
        (marks, confinement)
    }

    /// The environment's own interpreter (which a kernel can replace) runs confined: it sees
    /// what the confinement set up, and the confinement knew it was a probe of that python.
    #[tokio::test]
    async fn a_managed_environments_probe_runs_confined() {
        let cache = tempfile::tempdir().expect("tempdir");
        let report = r#"echo 'IPYTHON_MCP_PROBE {"python": "3.11.7", "ipykernel": "7.1.0"}'"#;
        let target = fake_environment(
            cache.path(),
            &format!(
                "#!/bin/sh
[ \"$IPYTHON_MCP_TEST_CONFINED\" = 1 ] || exit 1
{report}
"
            ),
        );
        let (marks, confinement) = marks(false);
        let provisioned =
            match ensure_confined(cache.path(), probe::PROBE_TIMEOUT, &confinement).await {
                Ok(provisioned) => provisioned,
                Err(error) => panic!("the confined probe answers: {error}"),
            };
        assert_eq!(provisioned.report.python_version, "3.11.7");
        let python = target.join("bin/python");
        assert_eq!(
            marks.seen.lock().expect("lock").as_slice(),
            [crate::confine::Purpose::Probe {
                python,
                working_dir: None
            }]
        );
    }

    /// A probe that could not be confined never ran: it proves nothing, so the environment is
    /// left as it is, and its interpreter was not run unconfined instead.
    #[tokio::test]
    async fn a_probe_that_cannot_be_confined_runs_nothing_and_deletes_nothing() {
        let cache = tempfile::tempdir().expect("tempdir");
        let ran = cache.path().join("ran");
        let target = fake_environment(
            cache.path(),
            &format!(
                "#!/bin/sh
touch '{}'
exit 1
",
                ran.display()
            ),
        );
        let (_, confinement) = marks(true);
        let error = match ensure_confined(cache.path(), probe::PROBE_TIMEOUT, &confinement).await {
            Err(error) => error,
            Ok(_) => panic!("an unconfined probe is no answer"),
        };
        assert!(matches!(error, Error::Probe { .. }), "{error:?}");
        assert!(error.to_string().contains("no sandbox here"), "{error}");
        assert!(!ran.exists(), "the interpreter ran unconfined");
        assert!(target.join("bin/python").is_file(), "not deleted");
    }

    #[tokio::test]
    async fn a_broken_environment_is_removed_without_leaving_temps() {
        let envs = tempfile::tempdir().expect("tempdir");
        let target = envs.path().join("default-py3.11");
        fs::create_dir_all(target.join("lib/python3.11/site-packages")).expect("mkdir");
        remove_broken(envs.path(), &target).await.expect("removed");
        let left: Vec<_> = fs::read_dir(envs.path()).expect("read_dir").collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn relocation_rewrites_scripts_but_not_links_or_binaries() {
        let root = tempfile::tempdir().expect("tempdir");
        let from = root.path().join(".tmp-x/venv");
        let to = root.path().join("default-py3.11");
        let bin = from.join("bin");
        fs::create_dir_all(&bin).expect("mkdir");
        let shebang = format!("#!{}/bin/python\nimport pip\n", from.display());
        fs::write(bin.join("pip"), &shebang).expect("write");
        fs::write(
            bin.join("activate"),
            format!("VIRTUAL_ENV='{}'\n", from.display()),
        )
        .expect("write");
        fs::write(
            from.join("pyvenv.cfg"),
            format!(
                "home = /usr/bin\ncommand = python -m venv {}\n",
                from.display()
            ),
        )
        .expect("write");
        let binary = [b"\0ELF".as_slice(), from.as_os_str().as_bytes()].concat();
        fs::write(bin.join("python3.11"), &binary).expect("write");
        std::os::unix::fs::symlink(bin.join("pip"), bin.join("pip3")).expect("symlink");

        relocate(&from, &to).expect("relocate");

        let read = |name: &str| fs::read_to_string(bin.join(name)).expect("read");
        assert_eq!(
            read("pip"),
            format!("#!{}/bin/python\nimport pip\n", to.display())
        );
        assert_eq!(
            read("activate"),
            format!("VIRTUAL_ENV='{}'\n", to.display())
        );
        assert!(fs::read_to_string(from.join("pyvenv.cfg"))
            .expect("read")
            .ends_with(&format!("venv {}\n", to.display())));
        assert_eq!(fs::read(bin.join("python3.11")).expect("read"), binary);
        assert!(fs::symlink_metadata(bin.join("pip3"))
            .expect("lstat")
            .is_symlink());
    }

    #[test]
    fn replace_all_replaces_every_occurrence() {
        assert_eq!(
            replace_all(b"a/x/b/x", b"/x", b"/yy"),
            Some(b"a/yy/b/yy".to_vec())
        );
        assert_eq!(replace_all(b"nothing", b"/x", b"/y"), None);
        assert_eq!(replace_all(b"bin\0/x", b"/x", b"/y"), None);
    }
}
