//! The MCP surface of ipython-mcp: tool definitions (names, descriptions, schemas,
//! annotations), argument checks, and rendering of session results into `CallToolResult`s.
//!
//! Invariants:
//! - This is the only crate that knows MCP (rmcp).
//! - Every tool result carries `structuredContent` matching its `outputSchema`, a short text
//!   block for clients that only read text, and `isError` exactly when `ok` is false.
//! - Internal errors become a stable `code` and a useful message here, in one place.

mod apps;
mod argument;
mod background;
mod catalog;
mod dynamic;
mod error;
mod execute;
#[cfg(feature = "test-fixtures")]
pub mod fixtures;
/// Built without the `test-fixtures` feature (every release build): no fixture is compiled in,
/// and the binary's test mode refuses to start.
#[cfg(not(feature = "test-fixtures"))]
pub mod fixtures {
    /// Whether the conformance fixtures are compiled into this build.
    pub const COMPILED: bool = false;

    /// The product as it is: a build without fixtures cannot enter the test mode.
    pub fn wrap(product: crate::IpythonMcp) -> crate::IpythonMcp {
        product
    }
}
mod handler;
#[cfg(test)]
mod in_process;
mod kernels;
mod namespace;
mod notebooks;
mod peers;
mod principals;
mod render;
mod results;
mod schema;
mod scopes;
mod server;
mod state;
mod surface;
mod tasks;

pub use error::{notebooks_error, session_error, status as runtime_status, WORDING};
pub use handler::IpythonMcp;
pub use ipython_mcp_kernel::{KernelManager, SessionId, StartSpec};
pub use notebooks::{
    CloseResult, ExecuteCellParams, NotebookExecuteParams, NotebookExecuteResult, PathParams,
};
pub use peers::Peers;
pub use principals::{Caller, Principals, StateFactory};
pub use scopes::{required_scopes, SCOPES};
pub use server::Blueprint;
pub use state::ServerState;
