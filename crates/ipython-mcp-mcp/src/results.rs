//! The results of the core tools that report a session's state (`runtime_status`,
//! `kernel_restart`, `interrupt`), shared by the tools that build them and `render`, which
//! writes their text.

use ipython_mcp_kernel::{RuntimeStatus, SessionState};
use ipython_mcp_output::{ErrorInfo, Interruption, NamespaceOutcome};
use rmcp::schemars;
use serde::Serialize;

/// The result of `runtime_status`: the session's status fields at the top level, plus `ok`.
/// (An invalid request, such as an unknown kernel, answers `{"ok": false, "error": …}` with
/// `isError` set instead.)
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct StatusResult {
    /// True: the status below describes the requested session.
    pub ok: bool,
    #[serde(flatten)]
    pub status: RuntimeStatus<ErrorInfo>,
}

/// The result of `interrupt`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct InterruptResult {
    pub ok: bool,
    /// True when an operation was running and has now ended because of this interrupt.
    pub interrupted: bool,
    /// What happened to the running code: `cooperative` (it stopped) or `terminated` (the
    /// kernel was killed and replaced); null when nothing was running.
    pub interruption: Option<Interruption>,
    /// `preserved`, `restored`, `reset` or `unknown`; null when nothing was running.
    pub namespace: Option<NamespaceOutcome>,
    /// The session's state and epoch after the interrupt.
    pub state: SessionState,
    pub epoch: u64,
    /// Calls still waiting in the queue (an interrupt does not remove them).
    pub queue_depth: usize,
}
