//! One server's (or one principal's) notebooks: where a path lives, which kernel session runs
//! a notebook, and starting one from the notebook's kernelspec.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ipython_mcp_jupyter::kernelspec;
use ipython_mcp_jupyter::remote::Server;
use ipython_mcp_kernel::{
    KernelManager, ManagerError, RemoteKernel, SessionHandle, SessionId, StartSpec,
};
use ipython_mcp_notebook::{Loaded, NotebookPath, Workspace, JUPYTER_PREFIX};

use crate::bindings::Bindings;
use crate::store::{blocking, JupyterNotebooks, Store};
use crate::Error;

/// The notebooks of one set of kernel sessions: the workspace, the configured Jupyter
/// server's notebooks, and which session runs which notebook. Shared by every connection of
/// the server (or of one principal), so the workspace's per-file write locks are shared too.
pub struct Notebooks {
    kernels: KernelManager,
    workspace: Result<Arc<Workspace>, String>,
    jupyter: Option<Arc<JupyterNotebooks>>,
    bindings: Bindings,
    /// The longest `timeout_seconds` a run may ask for.
    pub(crate) max_timeout: Duration,
    /// How a note saved with incomplete outputs names the call that pages the rest.
    pub(crate) pager: Pager,
}

/// The call that pages execution `id`'s streams, as a saved note names it (the layer above
/// knows its tools: `get_output with execution_id …`).
pub type Pager = fn(&str) -> String;

/// The session that runs a notebook's cells.
pub struct NotebookSession {
    pub id: SessionId,
    pub handle: SessionHandle,
    /// True when this call started it (a fresh namespace).
    pub started: bool,
}

impl NotebookSession {
    fn found(id: SessionId, handle: SessionHandle) -> Self {
        NotebookSession {
            id,
            handle,
            started: false,
        }
    }
}

/// How many ids (`nb-<stem>`, `nb-<stem>-2`, …) a new notebook session tries.
const SESSION_ID_ATTEMPTS: usize = 20;

impl Notebooks {
    /// The notebooks under `root` (the server's directory when `None`) and, with `jupyter`,
    /// the Jupyter server's; their sessions are `kernels`' (a principal's notebooks on the
    /// Jupyter server live in a directory named after them: `kernels.owner()`). Runs take at
    /// most `max_timeout`; a note on outputs not saved names the call `pager` gives.
    pub fn new(
        kernels: KernelManager,
        root: Option<PathBuf>,
        jupyter: Option<Server>,
        max_timeout: Duration,
        pager: Pager,
    ) -> Notebooks {
        let root = root.or_else(|| std::env::current_dir().ok());
        let workspace = match root {
            Some(root) => Workspace::new(&root)
                .map(Arc::new)
                .map_err(|error| error.to_string()),
            None => Err("no working directory".to_owned()),
        };
        let area = kernels.owner().map(str::to_owned);
        Notebooks {
            jupyter: jupyter.map(|server| Arc::new(JupyterNotebooks::new(server, area))),
            kernels,
            workspace,
            bindings: Bindings::default(),
            max_timeout,
            pager,
        }
    }

    /// The sessions these notebooks run in.
    pub fn kernels(&self) -> &KernelManager {
        &self.kernels
    }

    pub fn workspace(&self) -> Result<&Arc<Workspace>, Error> {
        self.workspace.as_ref().map_err(|problem| Error::Workspace {
            problem: problem.clone(),
        })
    }

    /// The configured Jupyter server's notebooks, if one is configured.
    pub fn jupyter(&self) -> Option<&Arc<JupyterNotebooks>> {
        self.jupyter.as_ref()
    }

    /// Where `path` lives and the checked path: a `jupyter:` path on the configured Jupyter
    /// server, anything else in the workspace (resolving reads the file system: on the
    /// blocking pool).
    pub async fn locate(&self, path: &str) -> Result<(Store, NotebookPath), Error> {
        if let Some(server_path) = path.strip_prefix(JUPYTER_PREFIX) {
            // Checked before anything else, as a workspace path is.
            NotebookPath::jupyter(server_path)?;
            let Some(notebooks) = &self.jupyter else {
                return Err(Error::NoJupyterServer {
                    path: path.to_owned(),
                });
            };
            let checked = NotebookPath::jupyter_in(server_path, notebooks.area())?;
            return Ok((Store::Jupyter(Arc::clone(notebooks)), checked));
        }
        let workspace = Arc::clone(self.workspace()?);
        let (resolver, path) = (Arc::clone(&workspace), path.to_owned());
        let resolved = blocking(move || resolver.resolve(&path)).await?;
        Ok((Store::Local(workspace), resolved))
    }

    /// Where `path` lives, the checked path and the notebook, checked against
    /// `expected_revision` when one is given.
    pub async fn load(
        &self,
        path: &str,
        expected_revision: Option<&str>,
    ) -> Result<(Store, NotebookPath, Loaded), Error> {
        let (store, path) = self.locate(path).await?;
        let loaded = store.load(&path, expected_revision).await?;
        Ok((store, path, loaded))
    }

    /// The session bound to a notebook, if it still runs (a binding to one that stopped, by a
    /// caller or the idle reaper, is forgotten).
    pub fn bound(&self, path: &NotebookPath) -> Option<(SessionId, SessionHandle)> {
        let id = self.bindings.get(&path.absolute)?;
        match self.kernels.get(Some(id.as_str())) {
            Ok(handle) => Some((id, handle)),
            Err(_) => {
                self.bindings.forget(&path.absolute, &id);
                None
            }
        }
    }

    /// The session bound to the notebook at `path` (as an agent gives it), or why there is
    /// none.
    pub async fn session(&self, path: &str) -> Result<SessionHandle, Error> {
        let (_store, path) = self.locate(path).await?;
        match self.bound(&path) {
            Some((_, handle)) => Ok(handle),
            None => Err(Error::NoSession {
                path: path.relative,
            }),
        }
    }

    /// Binds a notebook to the running session `kernel` (replacing an earlier binding).
    pub fn bind(&self, path: &NotebookPath, kernel: &str) -> Result<SessionHandle, Error> {
        let handle = self.kernels.get(Some(kernel))?;
        self.bindings
            .bind(path.absolute.clone(), SessionId::parse(kernel)?);
        Ok(handle)
    }

    /// Forgets a notebook's binding; returns its session and the notebooks still bound to it.
    pub fn unbind(&self, path: &NotebookPath) -> Option<(SessionId, Vec<PathBuf>)> {
        self.bindings.unbind(&path.absolute)
    }

    /// The notebooks bound to session `id` (absolute paths; see [`Notebooks::shown`]).
    pub fn bound_to(&self, id: &str) -> Vec<PathBuf> {
        self.bindings.of(id)
    }

    /// A bound notebook's path as an agent knows it: relative to the workspace root (outside
    /// it, as is; a `jupyter:` notebook's key is its agent-facing path already).
    pub fn shown(&self, path: &Path) -> String {
        self.workspace
            .as_ref()
            .ok()
            .and_then(|workspace| path.strip_prefix(workspace.root()).ok())
            .map(|relative| relative.display().to_string())
            .unwrap_or_else(|| path.display().to_string())
    }

    /// The session of a notebook: its bound one, or a new one started from its kernelspec
    /// (`kernel_name`, the notebook's `metadata.kernelspec.name`). `python3` (and a notebook
    /// without a kernelspec) runs where the default session does (`--kernel`, a
    /// `jupyter:<name>` spec included; see `StartSpec::followed_by_notebooks`); any other name
    /// must be a registered kernelspec.
    pub async fn session_of(
        &self,
        path: &NotebookPath,
        kernel_name: Option<String>,
    ) -> Result<NotebookSession, Error> {
        if let Some((id, handle)) = self.bound(path) {
            return Ok(NotebookSession::found(id, handle));
        }
        let spec = self.spec_of(path, kernel_name).await?;
        let base = format!("nb-{}", id_stem(&path.relative));
        // As in Jupyter, a notebook's kernel starts in the notebook's directory, so its
        // relative paths mean what they mean beside the file (a kernel on the Jupyter server
        // starts where the server decides).
        let directory = match path.server_path() {
            Some(_) => None,
            None => path.absolute.parent().map(Path::to_owned),
        };
        let mut last_error = None;
        for attempt in 1..=SESSION_ID_ATTEMPTS {
            let id = match attempt {
                1 => base.clone(),
                n => format!("{base}-{n}"),
            };
            let started = self.kernels.start(
                &format!("notebook {}", path.relative),
                spec.clone(),
                Some(&id),
                directory.clone(),
            );
            match started {
                Ok((id, handle)) => {
                    self.bindings.bind(path.absolute.clone(), id.clone());
                    tracing::info!(kernel = %id, "notebook session started");
                    return Ok(NotebookSession {
                        id,
                        handle,
                        started: true,
                    });
                }
                Err(error @ ManagerError::IdTaken { .. }) => {
                    // A concurrent first run of the same notebook may have just started and
                    // bound its session under this id: use that one.
                    if let Some((id, handle)) = self.bound(path) {
                        return Ok(NotebookSession::found(id, handle));
                    }
                    last_error = Some(error);
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(Error::Kernel(last_error.unwrap_or(
            ManagerError::Internal {
                what: "no free session id",
            },
        )))
    }

    /// How a notebook's kernel starts: a notebook on the Jupyter server runs there, in the
    /// kernel of the server's own session for it (the one a person's JupyterLab runs it in),
    /// else in a new one of its kernelspec; a local notebook naming the generic `python3` runs
    /// in a kernel like the default session's, found exactly as for it; any other name is a
    /// registered kernelspec.
    async fn spec_of(
        &self,
        path: &NotebookPath,
        kernel_name: Option<String>,
    ) -> Result<StartSpec, Error> {
        let name = kernel_name.unwrap_or_else(|| kernelspec::PYTHON3.to_owned());
        if let Some(server_path) = path.server_path() {
            let remote = match self.server_kernel_of(server_path).await {
                Some(id) => RemoteKernel::Attach { id },
                None => RemoteKernel::Start { name },
            };
            if !ipython_mcp_config::is_remote_name(remote.target()) {
                let spec = remote.to_string();
                return Err(Error::KernelStart {
                    error: ManagerError::InvalidRemote { spec: spec.clone() },
                    spec,
                });
            }
            return Ok(StartSpec::Remote(remote));
        }
        if name == kernelspec::PYTHON3 {
            return Ok(StartSpec::Default);
        }
        let (kernels, spec_name) = (self.kernels.clone(), name.clone());
        tokio::task::spawn_blocking(move || kernels.parse_spec(&spec_name))
            .await
            .unwrap_or(Err(ManagerError::Internal {
                what: "kernelspec lookup failed",
            }))
            .map_err(|error| Error::KernelStart { spec: name, error })
    }

    /// The kernel of the Jupyter server's session for notebook `server_path`, if it has one.
    /// A server without sessions, or one that fails to list them, has none to offer: the
    /// notebook then gets a kernel of its own.
    async fn server_kernel_of(&self, server_path: &str) -> Option<String> {
        let server = self.jupyter.as_ref()?.server();
        match server.sessions().await {
            Ok(sessions) => sessions
                .into_iter()
                .find(|session| session.path.trim_start_matches('/') == server_path)
                .map(|session| session.kernel_id),
            Err(error) => {
                tracing::debug!(error = %error, "the Jupyter server's sessions are not listed");
                None
            }
        }
    }
}

/// A notebook session id's stem from the notebook's name: at most 40 letters, digits, `-`
/// and `_`, anything else as `-`.
fn id_stem(relative: &str) -> String {
    let stem = relative
        .rsplit('/')
        .next()
        .unwrap_or("notebook")
        .trim_end_matches(".ipynb");
    stem.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_id_stem_is_the_file_name_made_safe() {
        assert_eq!(id_stem("a/b/My Notebook.ipynb"), "My-Notebook");
        assert_eq!(id_stem("jupyter:x/ü.ipynb"), "-");
        assert_eq!(id_stem(&format!("{}.ipynb", "n".repeat(60))).len(), 40);
    }
}
