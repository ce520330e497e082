//! Notebooks above the file format (`ipython_mcp_notebook`) and below the tools:
//!
//! - `store`: where a notebook lives, the local workspace or a Jupyter server's contents and
//!   live documents, with one revision-checked read-modify-write.
//! - `service`: one server's (or principal's) [`Notebooks`]: paths to places, and which kernel
//!   session runs which notebook (`bindings`), started from the notebook's kernelspec.
//! - `run`: running code for a notebook and saving its outputs into the file, live in the
//!   document a person has open when the Jupyter server collaborates.
//!
//! Errors are typed ([`Error`]) and name no tool: the MCP layer words them for agents, and the
//! json-lines protocol through the same words.

mod bindings;
mod error;
mod run;
mod service;
mod store;

pub use error::Error;
pub use run::{CellRequest, CodeRequest, Run, Saved, SavedCell};
pub use service::{NotebookSession, Notebooks, Pager};
pub use store::{blocking, JupyterNotebooks, Store};
