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
mod dynamic;
mod error;
pub mod fixtures;
mod kernels;
mod namespace;
mod notebooks;
mod peers;
mod render;
mod schema;
mod server;
mod state;
mod tasks;
mod wire;

pub use fixtures::Fixtures;
pub use ipython_mcp_kernel::{KernelManager, SessionId, StartSpec};
pub use notebooks::serve_json_lines;
pub use peers::Peers;
pub use server::{IpythonMcp, MAX_CODE_BYTES};
pub use state::ServerState;
