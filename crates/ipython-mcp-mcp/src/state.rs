//! What every connection of one server shares: the kernel sessions, their dynamic tools, the
//! notebook workspace and the clients to notify. Each MCP connection's [`IpythonMcp`] holds a
//! clone (HTTP serves many connections, stdio one).
//!
//! [`IpythonMcp`]: crate::IpythonMcp

use std::path::PathBuf;
use std::sync::Arc;

use ipython_mcp_config::Config;
use ipython_mcp_kernel::{KernelManager, ManagerError, SessionHandle};
use ipython_mcp_notebook::Workspace;
use ipython_mcp_output::{Code, ErrorInfo};

use crate::background::Background;
use crate::catalog::Catalog;
use crate::peers::Peers;
use crate::tasks::Tasks;

/// The state one server shares across its connections.
#[derive(Clone)]
pub struct ServerState {
    kernels: KernelManager,
    /// Every session's dynamic tools.
    catalog: Catalog,
    /// One workspace for every connection, so its per-file write locks are shared too.
    notebooks: Arc<NotebookState>,
    peers: Peers,
    /// Background executions answered as MCP tasks.
    tasks: Arc<Tasks>,
    /// Every task this layer spawns, joined at shutdown.
    background: Background,
}

/// How long shutdown waits for background work that must finish (saves), after the sessions.
const BACKGROUND_JOIN: std::time::Duration = std::time::Duration::from_secs(2);

impl ServerState {
    pub fn new(kernels: KernelManager, config: &Config, peers: Peers) -> Self {
        let background = Background::default();
        ServerState {
            catalog: Catalog::new(background.clone()),
            background,
            notebooks: Arc::new(NotebookState::new(
                config.workspace_root.clone(),
                kernels.owner().map(str::to_owned),
            )),
            peers,
            tasks: Arc::new(Tasks::new(config.tools.max_tasks)),
            kernels,
        }
    }

    pub fn kernels(&self) -> &KernelManager {
        &self.kernels
    }

    pub(crate) fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    pub(crate) fn notebooks(&self) -> &NotebookState {
        &self.notebooks
    }

    pub fn peers(&self) -> &Peers {
        &self.peers
    }

    pub(crate) fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// Stops and forgets a started session: its dynamic tools are forgotten before its kernel
    /// goes, so no listing offers a tool of a session being stopped.
    pub(crate) async fn stop_kernel(&self, id: &str) -> Result<SessionHandle, ManagerError> {
        stop(&self.kernels, &self.catalog, id).await
    }

    /// Stops started sessions that stay idle past the idle timeout (see `KernelManager`).
    pub fn spawn_reaper(&self) {
        let catalog = self.catalog.clone();
        self.kernels.spawn_reaper(move |kernels, id| {
            let catalog = catalog.clone();
            async move {
                // Gone already (a kernel_stop got there first): nothing to do.
                let _ = stop(&kernels, &catalog, id.as_str()).await;
            }
        });
    }

    /// Marks every session as shutting down at once (see `KernelManager::begin_shutdown`).
    pub fn begin_shutdown(&self) {
        self.kernels.begin_shutdown();
    }

    /// Shuts every session down (see `KernelManager::shutdown`), then stops and joins the
    /// MCP layer's own tasks (a background notebook run saves what its execution ended with).
    pub async fn shutdown(&self) {
        self.kernels.shutdown().await;
        if !self.background.join(BACKGROUND_JOIN).await {
            tracing::warn!("background work still running at shutdown was abandoned");
        }
    }

    /// Spawns the MCP layer's background work (see `Background`).
    pub(crate) fn background(&self) -> &Background {
        &self.background
    }
}

/// Removes a started session, forgets its dynamic tools, then shuts its kernel down.
async fn stop(
    kernels: &KernelManager,
    catalog: &Catalog,
    id: &str,
) -> Result<SessionHandle, ManagerError> {
    let handle = kernels.remove(id)?;
    catalog.forget_session(id).await;
    handle.shutdown().await;
    Ok(handle)
}

/// The workspace of this server, or why it is unusable; and the configured Jupyter server's
/// notebooks (made at their first use).
pub(crate) struct NotebookState {
    workspace: Result<Arc<Workspace>, String>,
    /// The directory of the Jupyter server that holds these notebooks: the principal's own,
    /// under principals (see `KernelManager::owner`).
    jupyter_area: Option<String>,
    jupyter: std::sync::OnceLock<Arc<ipython_mcp_notebooks::JupyterNotebooks>>,
}

impl NotebookState {
    pub(crate) fn new(root: Option<PathBuf>, jupyter_area: Option<String>) -> NotebookState {
        let root = root.or_else(|| std::env::current_dir().ok());
        let workspace = match root {
            Some(root) => Workspace::new(&root)
                .map(Arc::new)
                .map_err(|error| error.to_string()),
            None => Err("no working directory".to_owned()),
        };
        NotebookState {
            workspace,
            jupyter_area,
            jupyter: std::sync::OnceLock::new(),
        }
    }

    /// The notebooks of `server` (the configured Jupyter server: the same one every call).
    pub(crate) fn jupyter(
        &self,
        server: ipython_mcp_jupyter::remote::Server,
    ) -> Arc<ipython_mcp_notebooks::JupyterNotebooks> {
        Arc::clone(self.jupyter.get_or_init(|| {
            Arc::new(ipython_mcp_notebooks::JupyterNotebooks::new(
                server,
                self.jupyter_area.clone(),
            ))
        }))
    }

    pub(crate) fn workspace(&self) -> Result<&Arc<Workspace>, Box<ErrorInfo>> {
        self.workspace.as_ref().map_err(|problem| {
            Box::new(
                ErrorInfo::new(
                    Code::InvalidConfiguration,
                    format!("the notebook workspace root is unusable: {problem}"),
                )
                .with_hint(format!(
                    "set {} (--{}) to an existing directory",
                    ipython_mcp_config::WORKSPACE_ROOT.env,
                    ipython_mcp_config::WORKSPACE_ROOT.flag
                )),
            )
        })
    }
}
