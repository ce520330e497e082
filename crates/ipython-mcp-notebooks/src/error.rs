//! What can go wrong where notebooks live, by where it went wrong.

/// A failed read or write of a notebook.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file, its path or its revision (`ipython_mcp_notebook::Error`).
    #[error(transparent)]
    Notebook(#[from] ipython_mcp_notebook::Error),
    /// The Jupyter server's contents API refused or failed, for notebook `path`.
    #[error("notebook {path:?}: {error}")]
    Jupyter {
        path: String,
        error: ipython_mcp_jupyter::Error,
    },
    /// The notebook's live document failed, for notebook `path`.
    #[error("notebook {path:?}: {error}")]
    Collab {
        path: String,
        error: ipython_mcp_collab::CollabError,
    },
    /// The blocking file operation never returned (its thread panicked).
    #[error("the file operation failed")]
    Lost,
}
