//! Where notebooks live, above the file format (`ipython_mcp_notebook`) and below the tools:
//! the local workspace, or a Jupyter server's contents and live documents (`store`). Errors
//! are typed ([`Error`]) and name no tool: the MCP layer words them for agents.

mod error;
mod store;

pub use error::Error;
pub use store::{blocking, JupyterNotebooks, Store};
