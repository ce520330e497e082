//! The crate's one error type: failures to reach, join or write the live document.

use std::time::Duration;

/// Why a live-document operation failed. No variant means "maybe": an edit that returned
/// `Ok` reached the server.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CollabError {
    /// The Jupyter server has no real-time collaboration extension (its session endpoint
    /// is missing).
    #[error("the Jupyter server does not offer real-time collaboration")]
    NotCollaborative,
    /// The server has no such file.
    #[error("the Jupyter server has no file {path}")]
    NotFound { path: String },
    /// The server refused our credentials.
    #[error("the Jupyter server refused the request (HTTP {status}): check its token")]
    Refused { status: u16 },
    /// Something did not happen in time.
    #[error("{what} did not happen within {:.1}s", .after.as_secs_f64())]
    Timeout { what: String, after: Duration },
    /// The room's connection is gone (its reason); an edit attempted now, or in flight when
    /// it went, may not have reached the document.
    #[error("the live document is closed: {why}")]
    Closed { why: String },
    /// The server sent something we cannot read, or refused an update.
    #[error("the live document's protocol failed: {message}")]
    Protocol { message: String },
    /// The edit itself cannot be expressed (a cell without an id, an unknown cell).
    #[error("invalid edit: {message}")]
    Invalid { message: String },
    /// Any other failure of the Jupyter server's API.
    #[error(transparent)]
    Server(#[from] ipython_mcp_jupyter::Error),
}

impl CollabError {
    /// The error of a failed call to the server, with its 404 and refusals typed.
    pub(crate) fn from_server(error: ipython_mcp_jupyter::Error, path: &str) -> CollabError {
        match error {
            ipython_mcp_jupyter::Error::Refused { status, .. } => CollabError::Refused { status },
            ipython_mcp_jupyter::Error::RemoteNotFound { .. } => CollabError::NotFound {
                path: path.to_owned(),
            },
            other => CollabError::Server(other),
        }
    }
}
