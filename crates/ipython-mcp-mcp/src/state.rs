//! What every connection of one server shares: the kernel sessions, their dynamic tools, the
//! notebook workspace and the clients to notify. Each MCP connection's [`IpythonMcp`] holds a
//! clone (HTTP serves many connections, stdio one).
//!
//! [`IpythonMcp`]: crate::IpythonMcp

use std::sync::Arc;

use ipython_mcp_config::Config;
use ipython_mcp_kernel::{KernelManager, ManagerError, SessionHandle};
use ipython_mcp_notebooks::Notebooks;

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
    /// One set of notebooks for every connection, so the workspace's per-file write locks
    /// and the notebooks' sessions are shared too.
    notebooks: Arc<Notebooks>,
    peers: Peers,
    /// The configured Jupyter server (remote kernels are listed and checked with it).
    jupyter: Option<ipython_mcp_jupyter::remote::Server>,
    /// Background executions answered as MCP tasks.
    tasks: Arc<Tasks>,
    /// Every task this layer spawns, joined at shutdown.
    background: Background,
}

/// How long shutdown waits for background work that must finish (saves), after the sessions.
const BACKGROUND_JOIN: std::time::Duration = std::time::Duration::from_secs(2);

impl ServerState {
    /// The state over `kernels`, with the notebooks of the configured workspace and of
    /// `jupyter`, the configured Jupyter server (the client the kernels use too).
    pub fn new(
        kernels: KernelManager,
        config: &Config,
        peers: Peers,
        jupyter: Option<ipython_mcp_jupyter::remote::Server>,
    ) -> Self {
        let background = Background::default();
        ServerState {
            catalog: Catalog::new(background.clone()),
            background,
            notebooks: Arc::new(Notebooks::new(
                kernels.clone(),
                config.workspace_root.clone(),
                jupyter.clone(),
                config.timeouts.max_operation,
                crate::error::saved_output_pager,
            )),
            jupyter,
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

    /// The notebooks, their sessions and runs (the json-lines protocol uses them too).
    pub fn notebooks(&self) -> &Notebooks {
        &self.notebooks
    }

    /// The configured Jupyter server, if any.
    pub(crate) fn jupyter(&self) -> Option<&ipython_mcp_jupyter::remote::Server> {
        self.jupyter.as_ref()
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
