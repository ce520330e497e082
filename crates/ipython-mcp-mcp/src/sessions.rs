//! The kernel sessions the server holds, by id: `default` (started with the server) and the
//! ones `kernel_start` adds, bounded by `max_kernels`; started sessions idle for longer than
//! the idle timeout are stopped by a reaper task.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use ipython_mcp_config::KernelLimits;
use ipython_mcp_kernel::kernelspec::{self, KernelSpec};
use ipython_mcp_kernel::{Code, ErrorInfo, SessionHandle, SessionOptions, SessionState};
use tokio::time::Instant;

use crate::dynamic::Catalog;
use crate::render;

/// Longest session id.
const MAX_ID_CHARS: usize = 64;

/// The kernel sessions, shared by every connection.
#[derive(Clone)]
pub struct Sessions {
    inner: Arc<Inner>,
}

struct Inner {
    entries: Mutex<BTreeMap<String, Entry>>,
    /// Options of the `default` session: started sessions copy them, with their own kernel.
    template: Option<SessionOptions>,
    limits: KernelLimits,
    next_id: std::sync::atomic::AtomicU64,
    /// Every session's dynamic tools.
    catalog: Catalog,
    /// Notebook file (canonical path) → the session that runs its cells.
    notebooks: Mutex<BTreeMap<PathBuf, String>>,
    /// The notebook workspace (root and per-file write locks), shared by every connection.
    notebook_state: std::sync::OnceLock<Arc<crate::notebooks::NotebookState>>,
}

#[derive(Clone)]
struct Entry {
    handle: SessionHandle,
    /// What `kernel_start` was given (`default` for the default session).
    spec: String,
    last_used: Instant,
}

/// How `kernel_start` starts a session, from its `spec` argument.
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
}

impl StartSpec {
    /// Where the session's kernels start unless `kernel_start` names a `cwd`: the project
    /// directory of a venv or of a kernelspec installed in one; otherwise the server's.
    pub fn project(&self) -> Option<&Path> {
        match self {
            StartSpec::Default => None,
            StartSpec::Python { project, .. } => project.as_deref(),
            StartSpec::KernelSpec(spec) => spec.project.as_deref(),
        }
    }
}

impl Sessions {
    /// The id of the session started with the server.
    pub const DEFAULT: &'static str = "default";

    /// Sessions with `default` only and no way to start more (tests, embedding).
    pub fn new(default: SessionHandle) -> Self {
        Self::build(default, None, KernelLimits::default())
    }

    /// Sessions that can start more like `template` (the default session's options).
    pub fn with_template(
        default: SessionHandle,
        template: SessionOptions,
        limits: KernelLimits,
    ) -> Self {
        Self::build(default, Some(template), limits)
    }

    fn build(
        default: SessionHandle,
        template: Option<SessionOptions>,
        limits: KernelLimits,
    ) -> Self {
        let mut entries = BTreeMap::new();
        entries.insert(
            Self::DEFAULT.to_owned(),
            Entry {
                handle: default,
                spec: Self::DEFAULT.to_owned(),
                last_used: Instant::now(),
            },
        );
        Sessions {
            inner: Arc::new(Inner {
                entries: Mutex::new(entries),
                template,
                limits,
                next_id: std::sync::atomic::AtomicU64::new(1),
                catalog: Catalog::default(),
                notebooks: Mutex::default(),
                notebook_state: std::sync::OnceLock::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.inner
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The session `kernel` names (`None`: default), marked as used now.
    pub fn get(&self, kernel: Option<&str>) -> Result<SessionHandle, Box<ErrorInfo>> {
        let id = kernel.unwrap_or(Self::DEFAULT);
        let mut entries = self.lock();
        match entries.get_mut(id) {
            Some(entry) => {
                entry.last_used = Instant::now();
                Ok(entry.handle.clone())
            }
            None => Err(unknown_session(id, &entries)),
        }
    }

    /// Every session, by id.
    pub fn all(&self) -> Vec<(String, String, SessionHandle, Duration)> {
        self.lock()
            .iter()
            .map(|(id, entry)| {
                (
                    id.clone(),
                    entry.spec.clone(),
                    entry.handle.clone(),
                    entry.last_used.elapsed(),
                )
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

    /// The dynamic tools of every session.
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    pub fn limits(&self) -> KernelLimits {
        self.inner.limits
    }

    /// The Python the default session's kernels use (for kernelspec `python` and discovery).
    pub fn default_python(&self) -> Option<PathBuf> {
        let entries = self.lock();
        let status = entries.get(Self::DEFAULT)?.handle.status();
        status.kernel.map(|kernel| PathBuf::from(kernel.python))
    }

    /// Turns `kernel_start`'s `spec` into how to start the session. Reads files (kernelspecs,
    /// venvs): call it from a blocking thread.
    pub fn parse_spec(&self, spec: &str) -> Result<StartSpec, Box<ErrorInfo>> {
        let spec = spec.trim();
        if let Some(path) = spec.strip_prefix("venv:") {
            return kernelspec::venv_python(Path::new(path))
                .map(|venv| StartSpec::Python {
                    python: venv.python,
                    project: Some(venv.project),
                })
                .map_err(|error| Box::new(crate::error::venv_error(&error)));
        }
        if spec.contains('/') {
            let path = Path::new(spec);
            if !path.is_absolute() || !path.is_file() {
                return Err(Box::new(ErrorInfo::new(
                    Code::InvalidArguments,
                    format!("{spec:?} is not an absolute path to a Python interpreter"),
                )));
            }
            return Ok(StartSpec::Python {
                python: path.to_owned(),
                project: None,
            });
        }
        let python = self.default_python();
        let specs = kernelspec::discover(&kernelspec::data_dirs(python.as_deref()));
        match specs.iter().find(|candidate| candidate.name == spec) {
            Some(found) => Ok(StartSpec::KernelSpec(found.clone())),
            None => {
                Err(Box::new(
                    ErrorInfo::new(
                        Code::InvalidArguments,
                        format!("no kernelspec named {:?}", render::shorten(spec, 64)),
                    )
                    .with_hint(format!(
                    "known kernelspecs: {}; or pass venv:/path/to/project or an interpreter path",
                    if specs.is_empty() {
                        "none".to_owned()
                    } else {
                        specs.iter().map(|spec| spec.name.clone()).collect::<Vec<_>>().join(", ")
                    }
                )),
                ))
            }
        }
    }

    /// Starts a session (in the background; it is `starting` until its kernel is ready), its
    /// kernels in `working_dir`, else in the spec's project, else in the server's directory.
    pub fn start(
        &self,
        spec_text: &str,
        spec: StartSpec,
        id: Option<&str>,
        working_dir: Option<PathBuf>,
    ) -> Result<(String, SessionHandle), StartError> {
        let Some(template) = &self.inner.template else {
            return Err(StartError::Disabled);
        };
        if let Some(id) = id {
            check_id(id)?;
        }
        let mut entries = self.lock();
        let id = match id {
            Some(id) => id.to_owned(),
            None => loop {
                let n = self
                    .inner
                    .next_id
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let candidate = format!("k{n}");
                if !entries.contains_key(&candidate) {
                    break candidate;
                }
            },
        };
        if entries.contains_key(&id) {
            return Err(StartError::IdTaken { id });
        }
        let max = self.inner.limits.max_kernels;
        if entries.len() >= max {
            return Err(StartError::LimitReached {
                running: entries.len(),
                max,
            });
        }
        let mut options = template.clone();
        options.kernel_id = id.clone();
        options.working_dir = working_dir.or_else(|| spec.project().map(Path::to_owned));
        match spec {
            StartSpec::Default => {}
            StartSpec::Python { python, .. } => {
                options.resolver.explicit_python = Some(python);
                options.kernel_spec = None;
            }
            StartSpec::KernelSpec(kernel_spec) => options.kernel_spec = Some(kernel_spec),
        }
        let handle = SessionHandle::start(options);
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

    /// The notebook workspace, made by `make` on first use and shared after.
    pub(crate) fn notebook_state(
        &self,
        make: impl FnOnce() -> crate::notebooks::NotebookState,
    ) -> Arc<crate::notebooks::NotebookState> {
        Arc::clone(self.inner.notebook_state.get_or_init(|| Arc::new(make())))
    }

    fn notebook_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<PathBuf, String>> {
        self.inner
            .notebooks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The session bound to a notebook file, if it is still running.
    pub fn notebook_session(&self, notebook: &Path) -> Option<(String, SessionHandle)> {
        let id = self.notebook_lock().get(notebook).cloned()?;
        match self.get(Some(&id)) {
            Ok(handle) => Some((id, handle)),
            Err(_) => {
                // Stopped (kernel_stop or the idle reaper): forget the binding.
                self.notebook_lock().remove(notebook);
                None
            }
        }
    }

    /// Binds a notebook file to a session (replacing an earlier binding).
    pub fn bind_notebook(&self, notebook: PathBuf, id: String) {
        self.notebook_lock().insert(notebook, id);
    }

    /// Forgets a notebook's binding; returns the session id and the notebooks still bound to it.
    pub fn unbind_notebook(&self, notebook: &Path) -> Option<(String, Vec<PathBuf>)> {
        let mut bindings = self.notebook_lock();
        let id = bindings.remove(notebook)?;
        let others = bindings
            .iter()
            .filter(|(_, bound)| **bound == id)
            .map(|(path, _)| path.clone())
            .collect();
        Some((id, others))
    }

    /// The notebooks bound to a session.
    pub fn notebooks_of(&self, id: &str) -> Vec<PathBuf> {
        self.notebook_lock()
            .iter()
            .filter(|(_, bound)| bound.as_str() == id)
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// Stops and forgets a started session.
    pub async fn stop(&self, id: &str) -> Result<SessionHandle, Box<ErrorInfo>> {
        if id == Self::DEFAULT {
            return Err(Box::new(
                ErrorInfo::new(
                    Code::InvalidArguments,
                    "the default session cannot be stopped",
                )
                .with_hint("use kernel_restart for a fresh kernel, or reset to clear its names"),
            ));
        }
        let removed = {
            let mut entries = self.lock();
            entries
                .remove(id)
                .ok_or_else(|| unknown_session(id, &entries))?
        };
        self.inner.catalog.forget_session(id).await;
        removed.handle.shutdown().await;
        Ok(removed.handle)
    }

    /// Marks every session as shutting down at once (no waiting), before the transport cancels
    /// the requests it holds; `shutdown` finishes the job.
    pub fn begin_shutdown(&self) {
        for entry in self.lock().values() {
            entry.handle.begin_shutdown();
        }
    }

    /// Shuts every session down, all at once: each is bounded on its own, so the whole takes
    /// as long as the slowest one rather than their sum.
    pub async fn shutdown(&self) {
        let mut stopping = tokio::task::JoinSet::new();
        for entry in self.lock().values() {
            let handle = entry.handle.clone();
            stopping.spawn(async move { handle.shutdown().await });
        }
        while stopping.join_next().await.is_some() {}
    }

    /// Stops started sessions idle for longer than the idle timeout, until the sessions are
    /// dropped. A session counts as idle when nothing runs or waits in it and no tool call
    /// named it for that long.
    pub fn spawn_reaper(&self) {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let timeout = self.inner.limits.idle_timeout;
        let period = (timeout / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let sessions = Sessions { inner };
                let idle: Vec<String> = sessions
                    .lock()
                    .iter_mut()
                    .filter(|(id, _)| id.as_str() != Self::DEFAULT)
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
                    let _ = sessions.stop(&id).await;
                }
            }
        });
    }
}

/// The error for a session id that is not running, listing the ones that are.
fn unknown_session(id: &str, entries: &BTreeMap<String, Entry>) -> Box<ErrorInfo> {
    Box::new(
        ErrorInfo::new(
            Code::InvalidArguments,
            format!("no kernel session named {:?}", render::shorten(id, 64)),
        )
        .with_hint(format!(
            "running sessions: {} (kernel_list shows them; kernel_start starts one)",
            entries.keys().cloned().collect::<Vec<_>>().join(", ")
        )),
    )
}

fn check_id(id: &str) -> Result<(), StartError> {
    let valid = !id.is_empty()
        && id.chars().count() <= MAX_ID_CHARS
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
    if valid {
        Ok(())
    } else {
        Err(StartError::InvalidId { id: id.to_owned() })
    }
}

/// Why [`Sessions::start`] started nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    #[error("this server cannot start more kernels")]
    Disabled,
    #[error(
        "kernel id {:?} must be 1-{MAX_ID_CHARS} letters, digits, '_', '-' or '.', starting with a letter or digit",
        render::shorten(.id, 80)
    )]
    InvalidId { id: String },
    #[error("a kernel session named {id:?} is already running")]
    IdTaken { id: String },
    #[error("{running} kernel sessions are running; the limit is {max}")]
    LimitReached { running: usize, max: usize },
}

impl From<StartError> for ErrorInfo {
    fn from(error: StartError) -> Self {
        let message = error.to_string();
        match error {
            StartError::Disabled | StartError::InvalidId { .. } => {
                ErrorInfo::new(Code::InvalidArguments, message)
            }
            StartError::IdTaken { .. } => ErrorInfo::new(Code::InvalidArguments, message)
                .with_hint("pick another id, or kernel_stop it first"),
            StartError::LimitReached { .. } => ErrorInfo::new(Code::LimitExceeded, message)
                .with_hint(
                    "kernel_stop one you no longer need (IPYTHON_MCP_MAX_KERNELS raises the limit)",
                ),
        }
    }
}
