//! Kernel sessions: the owner task of each kernel, its admission queue and deadlines, and the
//! Python helper installed into every kernel. What becomes of an execution's messages (bounded
//! collection, the spool, the executions store) is `ipython_mcp_output`'s.
//!
//! Invariants:
//! - Only a session's actor touches its kernel (process and sockets).
//! - Output is bounded where it is collected (`ipython_mcp_output::collect`), and inside the
//!   kernel by the helper, so memory per execution does not grow with what user code prints.
//! - An operation either runs exactly once or not at all, and its result says which.
//! - A refusal is a typed [`SessionError`] and names no tool: the MCP crate words it for the
//!   agent, here through the [`Wording`] it sets in [`SessionOptions`].
//! - It re-exports nothing of the crates below it: users take the result vocabulary from
//!   `ipython_mcp_output` and Jupyter's from `ipython_mcp_jupyter`.
//! - Every task a session or the manager spawns is tracked (`ipython_mcp_jupyter::task::Tasks`) and joined by its
//!   shutdown, within its bound.

pub mod manager;

/// Largest code one execution accepts, in bytes (`execute`, a notebook's run).
pub const MAX_CODE_BYTES: usize = 1024 * 1024;

mod session;
/// The bundled Python helper (installed by every Python session).
pub use session::helper;
mod status;

pub use manager::{KernelManager, Listing, ManagerError, SessionId, StartSpec};
pub use session::error::{
    Behind, PanickedCall, ServerFailure, SessionError, StartFailure, Wording,
};
/// Scripted fake kernels for other crates' tests (the `test-support` feature; never in a
/// release build).
#[cfg(feature = "test-support")]
pub use session::fake::{FakeBehaviour, FakeKernels};
pub use session::handle::{Interrupted, SessionHandle};
pub use session::{
    CodeMode, ExecuteArgs, HelperCall, HelperOutput, Outcome, Progress, RemoteKernel,
    SessionOptions, UpstreamProgress,
};
pub use status::{
    EnvironmentStatus, KernelDescription, MemoryEnforcement, MemoryStatus, RemoteDescription,
    RuntimeStatus, SandboxStatus, SessionState, UpstreamStatus,
};
