//! The handler every tool runs on: one [`IpythonMcp`] per process, cloned into each MCP
//! connection, holding the server's shared state, its configuration and the router of the
//! built-in tools (composed once, in `server.rs`).

use std::sync::Arc;
use std::time::Duration;

use ipython_mcp_config::Config;
use ipython_mcp_kernel::{ExecuteArgs, SessionHandle};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::CallToolResult;

use crate::catalog::Catalog;
use crate::error::ToolError;
use crate::peers::Peers;
use crate::render;
use crate::state::ServerState;

/// The ipython-mcp server. Cloning is cheap: every connection's clone shares the state and
/// the router.
#[derive(Clone)]
pub struct IpythonMcp {
    pub(crate) state: ServerState,
    pub(crate) config: Arc<Config>,
    pub(crate) tool_router: Arc<ToolRouter<IpythonMcp>>,
}

impl IpythonMcp {
    pub(crate) fn kernels(&self) -> &ipython_mcp_kernel::KernelManager {
        self.state.kernels()
    }

    pub(crate) fn catalog(&self) -> &Catalog {
        self.state.catalog()
    }

    pub(crate) fn state(&self) -> &ServerState {
        &self.state
    }

    /// The notebooks, their sessions and runs.
    pub fn notebooks(&self) -> &ipython_mcp_notebooks::Notebooks {
        self.state.notebooks()
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// Every connected client, for `notifications/tools/list_changed`.
    pub fn peers(&self) -> &Peers {
        self.state.peers()
    }

    /// The session a tool call names, or the result that refuses the call.
    /// The session `kernel` names (`default` when omitted).
    pub(crate) fn session(&self, kernel: Option<&str>) -> Result<SessionHandle, ToolError> {
        Ok(self.kernels().get(kernel)?)
    }

    /// Starts `code` with nobody waiting (a background execute or notebook run): its deadline
    /// defaults to the server's max timeout, and only `cancel` stops it early.
    pub(crate) fn start_background(
        &self,
        session: &SessionHandle,
        code: String,
        timeout: Option<Duration>,
        request_id: String,
        cancel: tokio_util::sync::CancellationToken,
    ) -> ipython_mcp_output::ExecutionOutput {
        session.execute_background(ExecuteArgs {
            code,
            timeout: timeout.or(Some(self.config.timeouts.max_operation)),
            request_id,
            cancel,
            progress: None,
        })
    }

    /// A result in the shape the configuration asks for (see `render::shaped`).
    pub(crate) fn shaped(&self, result: CallToolResult, schemaless: bool) -> CallToolResult {
        render::shaped(result, schemaless, self.config.structured_output)
    }

    /// Whether the client of this request takes a tool's answer as a task.
    pub(crate) fn tasks_client(context: &rmcp::service::RequestContext<rmcp::RoleServer>) -> bool {
        context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks())
    }
}
