//! The binary's integration tests, in one test binary: built and linked once (every module
//! used to be a binary of its own, each compiling the shared support code again). Each module
//! is one area; `support` drives the real binary over MCP.

#[path = "../../../ipython-mcp-env/tests/ci/mod.rs"]
mod ci;
mod support;

#[cfg(feature = "registry")]
mod apps;
mod checkpoint;
mod code_mode;
mod collab;
#[cfg(feature = "registry")]
mod conformance;
mod dynamic;
mod environments;
mod http;
#[cfg(feature = "registry")]
mod install;
mod json_lines;
mod jupyter_live;
mod jupyter_notebooks;
mod kernels;
mod launch;
mod memory;
mod model_view;
mod namespaces;
mod notebooks;
mod notebooks_sdk;
mod oauth;
mod planted;
mod principals;
mod python_sdk;
mod remote;
mod retained;
mod sandbox;
mod server;
mod surface;
mod tasks;
