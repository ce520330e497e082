//! Kernel sessions: the owner task of each kernel, its admission queue and deadlines, bounded
//! output collection, and the Python helper installed into every kernel.
//!
//! Invariants:
//! - Only a session's actor touches its kernel (process and sockets).
//! - Output is bounded where it is collected ([`collect`]), and inside the kernel by the helper,
//!   so memory per execution does not grow with what user code prints.
//! - An operation either runs exactly once or not at all, and its result says which.

mod bound;
mod collect;
mod executions;
pub mod helper;
// Kernelspec discovery lives with the rest of Jupyter's conventions; re-exported for the MCP crate.
pub use ipython_mcp_jupyter::kernelspec;
/// The Jupyter server client, for building `SessionOptions::jupyter`.
pub use ipython_mcp_jupyter::remote;
pub mod manager;
mod output;
mod payload;
pub mod raster;
pub mod rich;
mod session;
mod sink;
mod spool;
mod status;
mod transcript;

/// How kernels die with a server that is killed (see `ipython_mcp_jupyter`).
pub use ipython_mcp_jupyter::use_pipe_death_watch;

pub use bound::{base64_decoded_len, BINARY_IMAGE_TYPES, SVG_TYPE};
pub use executions::{
    Page, PageLine, PageRequest, SpoolInfo, SpoolLimits, StreamName, MAX_RECORDS,
};
pub use manager::{KernelManager, Listing, ManagerError, SessionId, StartSpec};
pub use output::{
    Code, DisplayItem, ErrorInfo, ExecutionId, ExecutionOutput, ExecutionStatus, Interruption,
    NamespaceOutcome, RuntimeInfo, Truncated,
};
pub use payload::Withheld;
pub use session::{
    ExecuteArgs, HelperCall, HelperOutput, Interrupted, Outcome, Progress, RemoteKernel,
    SessionHandle, SessionOptions,
};
/// Scripted fake kernels for other crates' tests (the `test-support` feature; never in a
/// release build).
#[cfg(feature = "test-support")]
pub use session::{FakeBehaviour, FakeKernels};
pub use sink::{Kept, TerminalSink};
pub use status::{
    EnvironmentStatus, KernelDescription, RemoteDescription, RuntimeStatus, SessionState,
};
pub use tokio_util::sync::CancellationToken;
pub use transcript::SavedOutputs;
