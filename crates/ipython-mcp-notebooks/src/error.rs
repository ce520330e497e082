//! What can go wrong where notebooks live and when they run, by where it went wrong.

use ipython_mcp_kernel::ManagerError;

/// A failed read, write or run of a notebook.
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
    /// The request itself is wrong (a bad timeout, a cell that is not code, …); nothing was
    /// read or run.
    #[error("{0}")]
    Invalid(String),
    /// The workspace root cannot be used (it does not exist, or is not a directory).
    #[error("the notebook workspace root is unusable: {problem}")]
    Workspace { problem: String },
    /// A `jupyter:` path, and no Jupyter server is configured.
    #[error("{path:?} names a notebook on a Jupyter server, and none is configured")]
    NoJupyterServer { path: String },
    /// The notebook has no session bound to it (nothing has run it yet, or it was closed).
    #[error("notebook {path:?} has no kernel session")]
    NoSession { path: String },
    /// The sessions refused (an unknown kernel to bind to, the session limit, …).
    #[error(transparent)]
    Kernel(#[from] ManagerError),
    /// The notebook's kernel, from `spec` (its kernelspec, or the Jupyter server's kernel),
    /// cannot be started.
    #[error("cannot start the notebook's kernel {:?}: {error}", ipython_mcp_text::shorten(.spec, 64))]
    KernelStart { spec: String, error: ManagerError },
}
