//! The kernel sessions a server holds, by [`SessionId`]: `default` (started with the server)
//! and the ones started later, bounded by `max_kernels`; started sessions idle for longer than
//! the idle timeout are stopped by a reaper task. Notebook files are bound to the session that
//! runs their cells here too, so a stopped session's bindings go with it.
//!
//! What the MCP layer keeps beside each session (its dynamic tools) is not known here: removing
//! a session ([`KernelManager::remove`]) and shutting its kernel down are two steps, so the
//! caller can forget its own state in between, and the reaper stops sessions through a
//! function the caller gives it.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use ipython_mcp_config::KernelLimits;
use ipython_mcp_jupyter::kernelspec::{self, KernelSpec, VenvError};
use tokio::time::Instant;

use crate::session::handle::SessionHandle;
use crate::session::{RemoteKernel, SessionOptions};
use crate::status::SessionState;

/// Longest session id.
const MAX_ID_CHARS: usize = 64;

/// A session's id: `default`, one given to `kernel_start` (letters, digits, `_`, `-`, `.`,
/// starting with a letter or digit, at most 64 characters), or a generated `k<n>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    /// The id of the session started with the server.
    pub const DEFAULT: &'static str = "default";

    /// `id`, if it is a valid session id.
    pub fn parse(id: &str) -> Result<SessionId, ManagerError> {
        let valid = !id.is_empty()
            && id.chars().count() <= MAX_ID_CHARS
            && id.starts_with(|c: char| c.is_ascii_alphanumeric())
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if valid {
            Ok(SessionId(id.to_owned()))
        } else {
            Err(ManagerError::InvalidId { id: id.to_owned() })
        }
    }

    /// The `default` session's id.
    pub fn default_session() -> SessionId {
        SessionId(Self::DEFAULT.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_default(&self) -> bool {
        self.0 == Self::DEFAULT
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::borrow::Borrow<str> for SessionId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<SessionId> for String {
    fn from(id: SessionId) -> String {
        id.0
    }
}

/// How a session starts its kernels.
#[derive(Debug, Clone, PartialEq)]
pub enum StartSpec {
    /// Like the `default` session: the configured interpreter or environment, found the same
    /// way (used for notebooks whose kernelspec is the generic `python3`).
    Default,
    /// `venv:/path` or an interpreter path: ipykernel with that Python; a venv's kernels
    /// start in its project.
    Python {
        python: PathBuf,
        project: Option<PathBuf>,
    },
    /// A registered kernelspec.
    KernelSpec(KernelSpec),
    /// A kernel on the configured Jupyter server: `jupyter:<name>` starts one,
    /// `jupyter-kernel:<id>` attaches to a running one.
    Remote(RemoteKernel),
}

impl StartSpec {
    /// Turns a spec's text (`venv:/path`, an absolute interpreter path, or a kernelspec name
    /// found with `python`'s data directories) into how to start a session. Reads files
    /// (kernelspecs, venvs): call it from a blocking thread.
    pub fn parse(spec: &str, python: Option<&Path>) -> Result<StartSpec, ManagerError> {
        let spec = spec.trim();
        use ipython_mcp_config::{REMOTE_ATTACH, REMOTE_START};
        for (prefix, attach) in [(REMOTE_START, false), (REMOTE_ATTACH, true)] {
            if let Some(name) = spec.strip_prefix(prefix) {
                if !ipython_mcp_config::is_remote_name(name) {
                    return Err(ManagerError::InvalidRemote {
                        spec: spec.to_owned(),
                    });
                }
                let name = name.to_owned();
                return Ok(StartSpec::Remote(if attach {
                    RemoteKernel::Attach { id: name }
                } else {
                    RemoteKernel::Start { name }
                }));
            }
        }
        if let Some(path) = spec.strip_prefix("venv:") {
            let venv = kernelspec::venv_python(Path::new(path))?;
            return Ok(StartSpec::Python {
                python: venv.python,
                project: Some(venv.project),
            });
        }
        if spec.contains('/') {
            let path = Path::new(spec);
            if !path.is_absolute() || !path.is_file() {
                return Err(ManagerError::NotAnInterpreter {
                    spec: spec.to_owned(),
                });
            }
            return Ok(StartSpec::Python {
                python: path.to_owned(),
                project: None,
            });
        }
        let specs = kernelspec::discover(&kernelspec::data_dirs(python));
        match specs.iter().find(|candidate| candidate.name == spec) {
            Some(found) => Ok(StartSpec::KernelSpec(found.clone())),
            None => Err(ManagerError::UnknownKernelspec {
                name: spec.to_owned(),
                known: specs.into_iter().map(|spec| spec.name).collect(),
            }),
        }
    }

    /// What `StartSpec::Default` (a notebook whose kernelspec is the generic `python3`) starts
    /// when the `default` session was given this spec (`--kernel`): the same Python, locally or
    /// on the Jupyter server. `None` when a Python notebook should not follow it: a kernelspec
    /// of another language, or an attached `jupyter-kernel:<id>`, which is one person's kernel
    /// (each notebook would share its namespace with `default` and with every other notebook).
    fn followed_by_notebooks(&self) -> Option<StartSpec> {
        match self {
            StartSpec::Default | StartSpec::Python { .. } => Some(self.clone()),
            StartSpec::KernelSpec(spec) if spec.is_ipykernel() => Some(self.clone()),
            StartSpec::KernelSpec(_) => None,
            StartSpec::Remote(RemoteKernel::Start { .. }) => Some(self.clone()),
            StartSpec::Remote(RemoteKernel::Attach { .. } | RemoteKernel::Foreign { .. }) => None,
        }
    }

    /// Makes `options` (a copy of the default session's) start kernels this way.
    pub fn apply(self, options: &mut SessionOptions) {
        match self {
            StartSpec::Default => {}
            StartSpec::Python { python, .. } => {
                options.resolver.explicit_python = Some(python);
                options.kernel_spec = None;
            }
            StartSpec::KernelSpec(kernel_spec) => options.kernel_spec = Some(kernel_spec),
            StartSpec::Remote(kernel) => {
                // A spare of an attached kernel would be a second connection to the same
                // kernel, no spare at all: replacing it means restarting it in place.
                if matches!(
                    kernel,
                    RemoteKernel::Attach { .. } | RemoteKernel::Foreign { .. }
                ) {
                    options.spare_kernels = 0;
                }
                options.remote = Some(kernel);
            }
        }
    }

    /// Where the session's kernels start unless the caller names a directory: the project
    /// directory of a venv or of a kernelspec installed in one; otherwise the server's.
    pub fn project(&self) -> Option<&Path> {
        match self {
            StartSpec::Default => None,
            StartSpec::Python { project, .. } => project.as_deref(),
            StartSpec::KernelSpec(spec) => spec.project.as_deref(),
            StartSpec::Remote(_) => None,
        }
    }
}

/// Why the manager did not do what was asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ManagerError {
    #[error("this server cannot start more kernels")]
    Disabled,
    #[error(
        "kernel id {:?} must be 1-{MAX_ID_CHARS} letters, digits, '_', '-' or '.', starting with a letter or digit",
        ipython_mcp_text::shorten(.id, 80)
    )]
    InvalidId { id: String },
    #[error("a kernel session named {:?} is already running", .id.as_str())]
    IdTaken { id: SessionId },
    #[error("{running} kernel sessions are running; the limit is {max}")]
    LimitReached { running: usize, max: usize },
    #[error("no kernel session named {:?}", ipython_mcp_text::shorten(.id, 64))]
    NotFound {
        id: String,
        /// The sessions that are running, for the agent's next try.
        running: Vec<SessionId>,
    },
    #[error("the default session cannot be stopped")]
    DefaultIsPermanent,
    #[error("{:?} is not an absolute path to a Python interpreter", .spec)]
    NotAnInterpreter { spec: String },
    #[error(transparent)]
    Venv(#[from] VenvError),
    /// A task the manager ran on the blocking pool did not finish (it panicked).
    #[error("{what}")]
    Internal { what: &'static str },
    #[error("{:?} must name a kernelspec or kernel id after the prefix (letters, digits, '.', '_', '-')", ipython_mcp_text::shorten(.spec, 80))]
    InvalidRemote { spec: String },
    #[error("{:?} needs a Jupyter server: set {} (and its token) and restart", ipython_mcp_text::shorten(.spec, 80), ipython_mcp_config::JUPYTER_URL.env)]
    NoJupyterServer { spec: String },
    #[error("no kernelspec named {:?}", ipython_mcp_text::shorten(.name, 64))]
    UnknownKernelspec {
        name: String,
        /// The kernelspecs that exist.
        known: Vec<String>,
    },
}

/// One running session, as [`KernelManager::all`] lists it.
#[derive(Clone)]
pub struct Listing {
    pub id: SessionId,
    /// What the session was started from (`default` for the default session).
    pub spec: String,
    pub handle: SessionHandle,
    /// Since a tool call last named it or it last worked.
    pub idle: Duration,
}

/// The kernel sessions, shared by every connection.
#[derive(Clone)]
pub struct KernelManager {
    inner: Arc<Inner>,
}

struct Inner {
    entries: Mutex<BTreeMap<SessionId, Entry>>,
    /// Options of the `default` session: started sessions copy them, with their own kernel.
    template: Option<SessionOptions>,
    /// What `StartSpec::Default` starts: the `default` session's own spec (`--kernel`) where
    /// notebooks follow it (see `StartSpec::followed_by_notebooks`).
    default_spec: StartSpec,
    limits: KernelLimits,
    /// Starts a session's actor and kernels: `SessionHandle::start`, or (for other crates'
    /// tests, under the `test-support` feature) one on scripted fake kernels.
    starter: Starter,
    next_id: std::sync::atomic::AtomicU64,
    /// The `default` session's options when it starts at its first use rather than with the
    /// manager (see [`KernelManager::with_lazy_default`]).
    lazy_default: Option<SessionOptions>,
    /// Said with the lazy `default`'s first result (see [`KernelManager::note_lost_state`]).
    default_notice: Mutex<Option<String>>,
    /// The idle reaper: `stopping` ends its loop, `shutdown` joins it, a drop aborts it.
    tasks: ipython_mcp_jupyter::task::Tasks,
    stopping: tokio_util::sync::CancellationToken,
}

/// How the manager starts a session from its options.
pub(crate) type Starter = Arc<dyn Fn(SessionOptions) -> SessionHandle + Send + Sync>;

#[derive(Clone)]
struct Entry {
    handle: SessionHandle,
    spec: String,
    last_used: Instant,
}

impl KernelManager {
    /// Code mode's upstream servers as the sessions share them (the `default` session's
    /// options); empty without code mode.
    pub fn upstream_servers(&self) -> Vec<crate::status::UpstreamStatus> {
        self.inner
            .template
            .as_ref()
            .and_then(|template| template.code_mode.as_ref())
            .map(|code_mode| code_mode.status())
            .unwrap_or_default()
    }

    /// `default` only and no way to start more (tests, embedding).
    pub fn new(default: SessionHandle) -> Self {
        Self::build(
            Some(default),
            None,
            StartSpec::Default,
            KernelLimits::default(),
        )
    }

    /// Sessions that can start more like `template` (the default session's options, before
    /// `default_spec`, the `--kernel` the `default` session was started with, if any).
    pub fn with_template(
        default: SessionHandle,
        template: SessionOptions,
        default_spec: Option<StartSpec>,
        limits: KernelLimits,
    ) -> Self {
        Self::templated(Some(default), template, default_spec, limits)
    }

    /// As [`KernelManager::with_template`], but the `default` session (from `default`, its
    /// options) starts only when a call first names it, so that a caller who never runs code
    /// never costs a kernel process. Its place counts against `max_kernels` all along.
    pub fn with_lazy_default(
        default: SessionOptions,
        template: SessionOptions,
        default_spec: Option<StartSpec>,
        limits: KernelLimits,
    ) -> Self {
        let mut manager = Self::templated(None, template, default_spec, limits);
        Arc::get_mut(&mut manager.inner)
            .expect("a manager just built has one owner")
            .lazy_default = Some(default);
        manager
    }

    /// A manager over `template`, whose `StartSpec::Default` is `default_spec` where notebooks
    /// follow it (see `StartSpec::followed_by_notebooks`).
    fn templated(
        default: Option<SessionHandle>,
        template: SessionOptions,
        default_spec: Option<StartSpec>,
        limits: KernelLimits,
    ) -> Self {
        let default_spec = default_spec
            .and_then(|spec| spec.followed_by_notebooks())
            .unwrap_or(StartSpec::Default);
        Self::build(default, Some(template), default_spec, limits)
    }

    /// As [`KernelManager::with_template`] (no `--kernel`), its sessions started by `starter`.
    #[cfg(feature = "test-support")]
    pub(crate) fn with_starter(
        default: SessionHandle,
        template: SessionOptions,
        limits: KernelLimits,
        starter: Starter,
    ) -> Self {
        let mut manager = Self::build(Some(default), Some(template), StartSpec::Default, limits);
        Arc::get_mut(&mut manager.inner)
            .expect("a manager just built has one owner")
            .starter = starter;
        manager
    }

    fn build(
        default: Option<SessionHandle>,
        template: Option<SessionOptions>,
        default_spec: StartSpec,
        limits: KernelLimits,
    ) -> Self {
        let mut entries = BTreeMap::new();
        if let Some(default) = default {
            entries.insert(
                SessionId::default_session(),
                Entry {
                    handle: default,
                    spec: SessionId::DEFAULT.to_owned(),
                    last_used: Instant::now(),
                },
            );
        }
        KernelManager {
            inner: Arc::new(Inner {
                entries: Mutex::new(entries),
                template,
                default_spec,
                limits,
                starter: Arc::new(SessionHandle::start),
                next_id: std::sync::atomic::AtomicU64::new(1),
                lazy_default: None,
                default_notice: Mutex::default(),
                tasks: ipython_mcp_jupyter::task::Tasks::default(),
                stopping: tokio_util::sync::CancellationToken::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<SessionId, Entry>> {
        self.inner
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The session `kernel` names (`None`: default), marked as used now. A lazy `default`
    /// starts now (in the background, like any start).
    pub fn get(&self, kernel: Option<&str>) -> Result<SessionHandle, ManagerError> {
        let id = kernel.unwrap_or(SessionId::DEFAULT);
        let mut entries = self.lock();
        if let Some(entry) = entries.get_mut(id) {
            entry.last_used = Instant::now();
            return Ok(entry.handle.clone());
        }
        match (&self.inner.lazy_default, id == SessionId::DEFAULT) {
            (Some(options), true) if !self.inner.stopping.is_cancelled() => {
                let mut options = options.clone();
                options.notice = self
                    .inner
                    .default_notice
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .take();
                let handle = (self.inner.starter)(options);
                tracing::info!("default kernel session started at its first use");
                entries.insert(
                    SessionId::default_session(),
                    Entry {
                        handle: handle.clone(),
                        spec: SessionId::DEFAULT.to_owned(),
                        last_used: Instant::now(),
                    },
                );
                Ok(handle)
            }
            _ => Err(not_found(id, &entries)),
        }
    }

    /// Tells the first call of the lazy `default` why its namespace is new: the caller had
    /// another, now gone (`notice` says how).
    pub fn note_lost_state(&self, notice: String) {
        *self
            .inner
            .default_notice
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(notice);
    }

    /// Sessions running, with the place a lazy `default` not started yet keeps.
    fn places_taken(&self, entries: &BTreeMap<SessionId, Entry>) -> usize {
        let reserved =
            self.inner.lazy_default.is_some() && !entries.contains_key(SessionId::DEFAULT);
        entries.len() + usize::from(reserved)
    }

    /// Every session, by id.
    pub fn all(&self) -> Vec<Listing> {
        self.lock()
            .iter()
            .map(|(id, entry)| Listing {
                id: id.clone(),
                spec: entry.spec.clone(),
                handle: entry.handle.clone(),
                idle: entry.last_used.elapsed(),
            })
            .collect()
    }

    /// The session that remembers an execution.
    pub fn find_execution(&self, execution_id: &str) -> Option<SessionHandle> {
        self.lock()
            .values()
            .find(|entry| entry.handle.knows(execution_id))
            .map(|entry| entry.handle.clone())
    }

    pub fn limits(&self) -> KernelLimits {
        self.inner.limits
    }

    /// The Python the default session's kernels use (for kernelspec `python` and discovery).
    /// `None` for a remote kernel: its interpreter is a path on the Jupyter server's machine.
    pub fn default_python(&self) -> Option<PathBuf> {
        let entries = self.lock();
        let status = entries.get(SessionId::DEFAULT)?.handle.status();
        status
            .kernel
            .filter(|kernel| kernel.remote.is_none() && !kernel.python.is_empty())
            .map(|kernel| PathBuf::from(kernel.python))
    }

    /// Turns a start request's `spec` text (`venv:/path`, an interpreter path, or a
    /// kernelspec name) into how to start the session. Reads files (kernelspecs, venvs): call
    /// it from a blocking thread.
    pub fn parse_spec(&self, spec: &str) -> Result<StartSpec, ManagerError> {
        let parsed = StartSpec::parse(spec, self.default_python().as_deref())?;
        let configured = self
            .inner
            .template
            .as_ref()
            .is_some_and(|template| template.jupyter.is_some());
        if matches!(parsed, StartSpec::Remote(_)) && !configured {
            return Err(ManagerError::NoJupyterServer {
                spec: spec.trim().to_owned(),
            });
        }
        Ok(parsed)
    }

    /// The principal these sessions serve, when the server has several (their kernels are
    /// started as theirs; see `SessionOptions::owner`).
    pub fn owner(&self) -> Option<&str> {
        self.inner
            .template
            .as_ref()
            .and_then(|template| template.owner.as_deref())
    }

    /// Starts a session (in the background; it is `starting` until its kernel is ready), its
    /// kernels in `working_dir`, else in the spec's project, else in the template's directory
    /// (a principal's workspace), else in the server's directory.
    pub fn start(
        &self,
        spec_text: &str,
        spec: StartSpec,
        id: Option<&str>,
        working_dir: Option<PathBuf>,
    ) -> Result<(SessionId, SessionHandle), ManagerError> {
        let Some(template) = &self.inner.template else {
            return Err(ManagerError::Disabled);
        };
        let id = id.map(SessionId::parse).transpose()?;
        let mut entries = self.lock();
        let id = match id {
            Some(id) => id,
            None => loop {
                let n = self
                    .inner
                    .next_id
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let candidate = SessionId(format!("k{n}"));
                if !entries.contains_key(&candidate) {
                    break candidate;
                }
            },
        };
        if entries.contains_key(&id) {
            return Err(ManagerError::IdTaken { id });
        }
        let max = self.inner.limits.max_kernels;
        let taken = self.places_taken(&entries);
        if taken >= max {
            return Err(ManagerError::LimitReached {
                running: taken,
                max,
            });
        }
        let spec = match spec {
            StartSpec::Default => self.inner.default_spec.clone(),
            spec => spec,
        };
        let mut options = template.clone();
        options.kernel_id = id.to_string();
        options.working_dir = working_dir
            .or_else(|| spec.project().map(Path::to_owned))
            .or_else(|| template.working_dir.clone());
        spec.apply(&mut options);
        let handle = (self.inner.starter)(options);
        entries.insert(
            id.clone(),
            Entry {
                handle: handle.clone(),
                spec: spec_text.to_owned(),
                last_used: Instant::now(),
            },
        );
        Ok((id, handle))
    }

    /// Forgets a started session without stopping it: the caller drops what it keeps for
    /// the session, then calls [`SessionHandle::shutdown`] on the returned handle.
    pub fn remove(&self, id: &str) -> Result<SessionHandle, ManagerError> {
        if id == SessionId::DEFAULT {
            return Err(ManagerError::DefaultIsPermanent);
        }
        let mut entries = self.lock();
        entries
            .remove(id)
            .map(|entry| entry.handle)
            .ok_or_else(|| not_found(id, &entries))
    }

    /// Marks every session as shutting down at once (no waiting), before the transport cancels
    /// the requests it holds; `shutdown` finishes the job.
    pub fn begin_shutdown(&self) {
        for entry in self.lock().values() {
            entry.handle.begin_shutdown();
        }
    }

    /// Shuts every session down, all at once: each is bounded on its own, so the whole takes
    /// as long as the slowest one rather than their sum. The reaper stops too: it starts no
    /// more stops, and one it is making (a session's own bounded shutdown) is joined beside
    /// the others, within the same bound.
    pub async fn shutdown(&self) {
        self.inner.stopping.cancel();
        let mut stopping = tokio::task::JoinSet::new();
        let mut bound = Duration::ZERO;
        for entry in self.lock().values() {
            let handle = entry.handle.clone();
            bound = bound.max(handle.shutdown_bound());
            stopping.spawn(async move { handle.shutdown().await });
        }
        let sessions = async { while stopping.join_next().await.is_some() {} };
        let reaper = self.inner.tasks.join("idle reaper", Instant::now() + bound);
        tokio::join!(sessions, reaper);
    }

    /// Stops started sessions idle for longer than the idle timeout with `stop` (given this
    /// manager, so it holds no reference that would keep it alive), until the manager is
    /// dropped. A session counts as idle when nothing runs or waits in it and no
    /// caller named it for that long.
    pub fn spawn_reaper<F, Fut>(&self, stop: F)
    where
        F: Fn(KernelManager, SessionId) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let timeout = self.inner.limits.idle_timeout;
        let period = (timeout / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
        let stopping = self.inner.stopping.clone();
        // Ends at `shutdown` (after a stop it is making) or once the manager is gone.
        self.inner.tasks.spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopping.cancelled() => return,
                }
                let Some(inner) = weak.upgrade() else { return };
                let manager = KernelManager { inner };
                let idle: Vec<SessionId> = manager
                    .lock()
                    .iter_mut()
                    .filter(|(id, _)| !id.is_default())
                    .filter_map(|(id, entry)| {
                        let status = entry.handle.status();
                        let working = status.operation_active || status.queue_depth > 0;
                        if working {
                            entry.last_used = Instant::now();
                        }
                        (!working
                            && status.state != SessionState::Starting
                            && entry.last_used.elapsed() >= timeout)
                            .then(|| id.clone())
                    })
                    .collect();
                for id in idle {
                    tracing::info!(kernel = %id, idle_seconds = timeout.as_secs(), "stopping idle kernel session");
                    stop(manager.clone(), id).await;
                }
            }
        });
    }
}

/// The error for a session id that is not running, listing the ones that are.
fn not_found(id: &str, entries: &BTreeMap<SessionId, Entry>) -> ManagerError {
    ManagerError::NotFound {
        id: id.to_owned(),
        running: entries.keys().cloned().collect(),
    }
}

#[cfg(feature = "test-support")]
impl KernelManager {
    /// A manager whose `default` session and started ones (copies of `template`) all run on
    /// `kernels`; the start spec's kernel choice is ignored.
    pub fn with_fake_kernels(
        template: SessionOptions,
        limits: ipython_mcp_config::KernelLimits,
        kernels: &crate::session::fake::FakeKernels,
    ) -> KernelManager {
        let default = SessionOptions {
            kernel_id: SessionId::DEFAULT.to_owned(),
            ..template.clone()
        };
        let default = SessionHandle::start_fake(default, kernels);
        let kernels = kernels.clone();
        let starter =
            std::sync::Arc::new(move |options| SessionHandle::start_fake(options, &kernels));
        KernelManager::with_starter(default, template, limits, starter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_checked_once() {
        for good in ["default", "k1", "my-kernel_2.x", &"a".repeat(64)] {
            assert_eq!(SessionId::parse(good).unwrap().as_str(), good);
        }
        for bad in ["", "-x", ".x", "a b", "a/b", "ä", &"a".repeat(65)] {
            assert!(
                matches!(SessionId::parse(bad), Err(ManagerError::InvalidId { .. })),
                "{bad:?}"
            );
        }
        assert!(SessionId::default_session().is_default());
        assert!(!SessionId::parse("k1").unwrap().is_default());
    }

    #[test]
    fn python_notebooks_follow_the_default_kernel_unless_it_is_an_attached_one() {
        let python = StartSpec::Python {
            python: PathBuf::from("/opt/py/bin/python"),
            project: None,
        };
        let started = StartSpec::Remote(RemoteKernel::Start {
            name: "python3".to_owned(),
        });
        let attached = StartSpec::Remote(RemoteKernel::Attach {
            id: "0f3e".to_owned(),
        });
        assert_eq!(python.followed_by_notebooks(), Some(python.clone()));
        assert_eq!(started.followed_by_notebooks(), Some(started.clone()));
        assert_eq!(attached.followed_by_notebooks(), None);
    }
}
