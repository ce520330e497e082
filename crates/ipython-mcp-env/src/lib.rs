//! Finding, or provisioning, the Python interpreter that the kernel will run on: one that can
//! import ipykernel.
//!
//! [`Resolver::resolve`] tries, in order:
//! 1. the explicit interpreter (`--python` / `IPYTHON_MCP_PYTHON`), used as is; if it cannot
//!    import ipykernel that is an error saying how to install it, never a silent fallback;
//! 2. the active virtualenv (`$VIRTUAL_ENV/bin/python`), if it has ipykernel;
//! 3. `.venv/bin/python` in the working directory, if it has ipykernel;
//! 4. `python3` on PATH, if it has ipykernel;
//! 5. the **managed default environment** `<cache>/envs/default-py<major>.<minor>`, built from
//!    that `python3` on first use (with `uv` when it is on PATH, else `python -m venv` and pip)
//!    and reused after with a single probe.
//!
//! A configured **named environment** (`<workspace>/<name>`, see `named.rs`) replaces rules
//! 2–5 (an explicit interpreter still wins, e.g. for `kernel_start` with an
//! interpreter path): it is created from its own configured interpreter, else from `python3`
//! on PATH, with the configured requirements plus ipykernel, and reused when its recorded
//! Python version and requirements fingerprint match.
//!
//! "Has ipykernel" means a probe — `python -c <script>` printing one JSON line with the Python
//! version, the ipykernel version and `sys.executable` — succeeded within `probe::PROBE_TIMEOUT`.
//!
//! This crate knows nothing of MCP, Jupyter messaging or sessions. It reads no environment
//! variables itself: the caller passes `$VIRTUAL_ENV`, `$PATH` and the cache directory in.
//!
//! Invariants:
//! - **Children never inherit our stdio.** Every child (probe, `uv`, `venv`, `pip`) gets a null
//!   stdin and piped stdout/stderr, because the server's stdout is the MCP protocol stream. Each
//!   runs in its own session and process group, killed on timeout or when the caller drops the
//!   future.
//! - **Creation is atomic.** The managed environment is built in `<cache>/envs/.tmp-<random>`,
//!   verified, given its metadata file, then renamed into place; a directory without valid
//!   metadata, or whose interpreter no longer imports ipykernel, is broken and is rebuilt.
//!   Temp directories are removed on every failure path.
//! - **Creation is locked.** Check-and-create runs under an exclusive `flock` on
//!   `<cache>/envs/default-py3.X.lock`, so concurrent servers (or tests) build it once; the
//!   others wait, then reuse it.
//! - **Failures are short.** [`Error`] messages name the phase and carry at most the last ~2000
//!   characters of child output, without terminal escapes, fit for a status field.

mod confine;
mod error;
mod excerpt;
mod lock;
mod lookup;
mod managed;
mod named;
mod phase;
mod probe;
mod process;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

pub use confine::{Confine, Confinement, Guard, Purpose};
pub use error::Error;
pub use ipython_mcp_config::NamedEnvironment;
pub use named::fingerprint;
pub use phase::Phase;

/// Where to look for an interpreter, and where to build one if none is found.
#[derive(Clone, Debug)]
pub struct Resolver {
    /// An interpreter chosen by the user; a bare name (`python3.12`) is looked up on PATH.
    pub explicit_python: Option<PathBuf>,
    /// The active virtualenv (`$VIRTUAL_ENV`), if any.
    pub virtual_env: Option<PathBuf>,
    /// The project directory, searched for `.venv`; probes run here, as the kernel will.
    pub working_dir: PathBuf,
    /// The `$PATH` to search for `python3` and `uv`.
    pub path_var: Option<OsString>,
    /// The per-user cache directory; managed environments live in its `envs/`.
    pub cache_dir: PathBuf,
    /// The bound on building the managed environment (creation, install and verification).
    pub install_timeout: Duration,
    /// The named environment to use instead of rules 2–5, if configured.
    pub named: Option<NamedEnvironment>,
    /// What every probe and installer runs under: the interpreters they run, and what those
    /// import, may have been written by a kernel (`confine.rs`).
    pub confinement: Confinement,
}

/// Which rule of the resolution order produced the interpreter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PythonSource {
    Explicit,
    ActiveVirtualenv,
    WorkingDirVenv,
    SystemPython,
    ManagedDefault,
    NamedEnvironment,
}

/// An interpreter known to import ipykernel.
#[derive(Clone, Debug, Serialize)]
pub struct PythonEnvironment {
    /// The interpreter to launch the kernel with.
    pub executable: PathBuf,
    pub source: PythonSource,
    pub python_version: String,
    pub ipykernel_version: String,
    /// Whether this call provisioned the environment.
    pub created: bool,
    /// How long provisioning took, when `created`.
    pub provision_seconds: Option<f64>,
}

impl Resolver {
    /// Finds an interpreter that imports ipykernel, provisioning the managed environment if
    /// nothing else qualifies. `progress` is called on each phase change.
    pub async fn resolve(
        &self,
        progress: &(dyn Fn(Phase) + Send + Sync),
    ) -> Result<PythonEnvironment, Error> {
        progress(Phase::Probing);
        let environment = match (&self.explicit_python, &self.named) {
            (None, Some(named)) => self.named(named, progress).await,
            _ => self.find_or_provision(progress).await,
        }
        // Installer output can echo a private index URL with its token.
        .map_err(Error::without_url_credentials)?;
        tracing::info!(
            executable = %environment.executable.display(),
            source = ?environment.source,
            python = %environment.python_version,
            ipykernel = %environment.ipykernel_version,
            created = environment.created,
            "python environment resolved"
        );
        progress(Phase::Ready);
        Ok(environment)
    }

    async fn find_or_provision(
        &self,
        progress: &(dyn Fn(Phase) + Send + Sync),
    ) -> Result<PythonEnvironment, Error> {
        if let Some(explicit) = &self.explicit_python {
            return self.explicit(explicit).await;
        }

        let venvs = [
            (PythonSource::ActiveVirtualenv, self.virtual_env.as_deref()),
            (
                PythonSource::WorkingDirVenv,
                Some(&*self.working_dir.join(".venv")),
            ),
        ];
        for (source, venv) in venvs {
            let Some(python) = venv.map(|venv| venv.join("bin").join("python")) else {
                continue;
            };
            if !lookup::is_executable(&python).await {
                continue;
            }
            match self.probe(&python).await {
                Ok(report) => match report.ipykernel {
                    Ok(ipykernel) => {
                        return Ok(found(python, source, report.python_version, ipykernel))
                    }
                    Err(reason) => {
                        tracing::info!(python = %python.display(), %reason, "virtualenv lacks ipykernel, skipped");
                    }
                },
                Err(reason) => {
                    tracing::warn!(python = %python.display(), %reason, "virtualenv python does not run, skipped");
                }
            }
        }

        let path_var = self.path_var.as_deref();
        let system = lookup::find("python3", path_var)
            .await
            .ok_or(Error::NoPython)?;
        let report = self.probe(&system).await.map_err(|failure| Error::Probe {
            python: system.clone(),
            detail: failure.detail,
        })?;
        // sys.executable rather than the PATH entry: it skips shims (pyenv, asdf) that might
        // pick another interpreter in another directory.
        let real =
            if report.executable.is_absolute() && lookup::is_executable(&report.executable).await {
                report.executable.clone()
            } else {
                system
            };
        if let Ok(ipykernel) = &report.ipykernel {
            let ipykernel = ipykernel.clone();
            return Ok(found(
                real,
                PythonSource::SystemPython,
                report.python_version,
                ipykernel,
            ));
        }

        let major_minor = report.major_minor().ok_or_else(|| Error::Probe {
            python: real.clone(),
            detail: format!("unrecognised python version {:?}", report.python_version),
        })?;
        let provisioner = managed::Provisioner {
            cache_dir: &self.cache_dir,
            path_var,
            install_timeout: self.install_timeout,
            probe_timeout: probe::PROBE_TIMEOUT,
            confinement: &self.confinement,
            progress,
        };
        let provisioned = provisioner
            .ensure(&managed::Base {
                python: real,
                major_minor,
            })
            .await?;
        let report = provisioned.report;
        Ok(PythonEnvironment {
            executable: provisioned.executable,
            source: PythonSource::ManagedDefault,
            python_version: report.python_version,
            // `ensure` only returns environments whose probe found ipykernel.
            ipykernel_version: report.ipykernel.unwrap_or_default(),
            created: provisioned.provision_seconds.is_some(),
            provision_seconds: provisioned.provision_seconds,
        })
    }

    /// The named environment, built from its configured interpreter or else `python3` on PATH.
    async fn named(
        &self,
        named: &NamedEnvironment,
        progress: &(dyn Fn(Phase) + Send + Sync),
    ) -> Result<PythonEnvironment, Error> {
        let path_var = self.path_var.as_deref();
        let base = match &named.python {
            Some(python) => self.lookup(python).await?,
            None => lookup::find("python3", path_var)
                .await
                .ok_or(Error::NoPython)?,
        };
        let report = self.probe(&base).await.map_err(|failure| Error::Probe {
            python: base.clone(),
            detail: failure.detail,
        })?;
        let real =
            if report.executable.is_absolute() && lookup::is_executable(&report.executable).await {
                report.executable.clone()
            } else {
                base
            };
        let major_minor = report.major_minor().ok_or_else(|| Error::Probe {
            python: real.clone(),
            detail: format!("unrecognised python version {:?}", report.python_version),
        })?;
        let provisioner = managed::Provisioner {
            cache_dir: &self.cache_dir,
            path_var,
            install_timeout: self.install_timeout,
            probe_timeout: probe::PROBE_TIMEOUT,
            confinement: &self.confinement,
            progress,
        };
        let base = managed::Base {
            python: real,
            major_minor,
        };
        let provisioned = named::ensure(&provisioner, named, &base, &self.working_dir).await?;
        let report = provisioned.report;
        Ok(PythonEnvironment {
            executable: provisioned.executable,
            source: PythonSource::NamedEnvironment,
            python_version: report.python_version,
            ipykernel_version: report.ipykernel.unwrap_or_default(),
            created: provisioned.provision_seconds.is_some(),
            provision_seconds: provisioned.provision_seconds,
        })
    }

    /// A bare name (`python3.12`) is looked up on PATH; a path is used as given.
    async fn lookup(&self, explicit: &Path) -> Result<PathBuf, Error> {
        match explicit.to_str() {
            Some(name) if !name.contains('/') => lookup::find(name, self.path_var.as_deref())
                .await
                .ok_or_else(|| Error::Probe {
                    python: explicit.to_owned(),
                    detail: "not found on PATH".to_owned(),
                }),
            _ => Ok(explicit.to_owned()),
        }
    }

    /// The explicit interpreter must work as given: falling back would hide the user's mistake.
    async fn explicit(&self, explicit: &Path) -> Result<PythonEnvironment, Error> {
        let python = self.lookup(explicit).await?;
        let report = self.probe(&python).await.map_err(|failure| Error::Probe {
            python: python.clone(),
            detail: failure.detail,
        })?;
        match report.ipykernel {
            Ok(ipykernel) => Ok(found(
                python,
                PythonSource::Explicit,
                report.python_version,
                ipykernel,
            )),
            Err(detail) => Err(Error::MissingIpykernel { python, detail }),
        }
    }

    async fn probe(&self, python: &Path) -> Result<probe::Report, probe::ProbeFailure> {
        probe::probe(
            python,
            Some(&self.working_dir),
            probe::PROBE_TIMEOUT,
            &self.confinement,
        )
        .await
    }
}

fn found(
    executable: PathBuf,
    source: PythonSource,
    python_version: String,
    ipykernel_version: String,
) -> PythonEnvironment {
    PythonEnvironment {
        executable,
        source,
        python_version,
        ipykernel_version,
        created: false,
        provision_seconds: None,
    }
}

/// The per-user cache directory: `$XDG_CACHE_HOME/ipython-mcp`, else `~/.cache/ipython-mcp`.
///
/// Relative or empty values are ignored, as the XDG base directory specification requires.
pub fn default_cache_dir(home: Option<&Path>, xdg_cache_home: Option<&Path>) -> Option<PathBuf> {
    let absolute = |path: &&Path| path.is_absolute();
    if let Some(xdg) = xdg_cache_home.filter(absolute) {
        return Some(xdg.join("ipython-mcp"));
    }
    home.filter(absolute)
        .map(|home| home.join(".cache").join("ipython-mcp"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_dir_prefers_xdg_then_home() {
        let home = Path::new("/home/ada");
        let xdg = Path::new("/var/cache/ada");
        assert_eq!(
            default_cache_dir(Some(home), Some(xdg)),
            Some(PathBuf::from("/var/cache/ada/ipython-mcp"))
        );
        assert_eq!(
            default_cache_dir(Some(home), None),
            Some(PathBuf::from("/home/ada/.cache/ipython-mcp"))
        );
        assert_eq!(default_cache_dir(None, None), None);
    }

    #[test]
    fn relative_or_empty_cache_locations_are_ignored() {
        let home = Path::new("/home/ada");
        assert_eq!(
            default_cache_dir(Some(home), Some(Path::new("cache"))),
            Some(PathBuf::from("/home/ada/.cache/ipython-mcp"))
        );
        assert_eq!(
            default_cache_dir(Some(home), Some(Path::new(""))),
            Some(PathBuf::from("/home/ada/.cache/ipython-mcp"))
        );
        assert_eq!(default_cache_dir(Some(Path::new("ada")), None), None);
    }

    #[test]
    fn phases_and_sources_serialise_as_documented() {
        let creating = Phase::Creating {
            tool: "uv".to_owned(),
        };
        assert_eq!(
            serde_json::to_value(&creating).expect("serialises"),
            serde_json::json!({"phase": "creating", "tool": "uv"})
        );
        assert_eq!(
            serde_json::to_value(Phase::Ready).expect("serialises"),
            serde_json::json!({"phase": "ready"})
        );
        assert_eq!(
            serde_json::to_value(PythonSource::ManagedDefault).expect("serialises"),
            serde_json::json!("managed_default")
        );
    }

    #[test]
    fn errors_are_clone_send_and_lowercase() {
        fn assert_traits<T: Clone + Send + Sync + 'static>() {}
        assert_traits::<Error>();
        let error = Error::MissingIpykernel {
            python: PathBuf::from("/usr/bin/python3"),
            detail: "ModuleNotFoundError: No module named 'ipykernel'".to_owned(),
        };
        assert_eq!(
            error.to_string(),
            "python interpreter /usr/bin/python3 cannot import ipykernel (ModuleNotFoundError: No \
             module named 'ipykernel'); install it with `/usr/bin/python3 -m pip install ipykernel`"
        );
    }
}
