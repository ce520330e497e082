//! Jupyter notebook files for ipython-mcp: synchronous, no kernel I/O.
//!
//! - [`Workspace`] confines every notebook path to one root directory: paths are relative,
//!   made of plain components (no `..`, no `.`, no empty ones), and a symlink may not lead
//!   outside the root. Everything is checked before the file is opened.
//! - [`Notebook`] is an nbformat 4 notebook kept as JSON (`serde_json::Value`), so fields this
//!   crate does not know (widget state, tool metadata, future nbformat fields) survive every
//!   edit unchanged. Cells get nbformat 4.5 ids on the first write and keep them.
//! - A revision is the SHA-256 (hex) of the file's bytes. Every write names the revision it
//!   was computed from and fails with [`Error::RevisionConflict`] — writing nothing — when the
//!   file changed in between. Writes are atomic: a temp file in the same directory, fsync,
//!   rename, fsync of the directory; the file keeps its permissions.
//! - [`Workspace::mutate`] is the one read-modify-write (resolve, lock, read, check the
//!   revision, change, write); every edit and every save of outputs goes through it.
//!
//! Invariants:
//! - No file is read or written before its path was checked against the workspace root.
//! - A failed mutation leaves the file byte for byte as it was.

mod model;
mod path;
mod percent;
mod store;
mod uri;

pub use model::{cell_id, joined_text, CellRef, CellType, NewCell, Notebook, Output};
pub use path::{Format, NotebookPath, Workspace};
pub use percent::{parse_percent, to_percent};
pub use store::{encode, revision_of, Loaded, Mutated};
pub use uri::{path_from_uri, uri_for_path, URI_PREFIX};

/// A notebook operation that could not be done. Each variant has a stable [`Error::code`].
/// Exhaustive on purpose: the MCP crate maps each variant to its code, and a new variant must
/// not compile until it is mapped.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("invalid notebook path {path:?}: {reason}")]
    InvalidPath { path: String, reason: String },
    #[error("notebook {path:?} does not exist")]
    NotFound { path: String },
    #[error("notebook {path:?} already exists")]
    AlreadyExists { path: String },
    #[error("notebook {path:?} changed: expected revision {expected}, the file is at {actual}")]
    RevisionConflict {
        path: String,
        expected: String,
        actual: String,
    },
    #[error("{path:?} is not a valid nbformat 4 notebook: {problem}")]
    InvalidNotebook { path: String, problem: String },
    #[error("no cell {reference} in a notebook of {cells} cells")]
    CellNotFound { reference: String, cells: usize },
    #[error("{message}")]
    InvalidArguments { message: String },
    #[error("i/o error on {path:?}: {message}")]
    Io { path: String, message: String },
}

impl Error {
    /// The stable error code agents see.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidPath { .. } => "invalid_path",
            Error::NotFound { .. } => "notebook_not_found",
            Error::AlreadyExists { .. } => "notebook_exists",
            Error::RevisionConflict { .. } => "revision_conflict",
            Error::InvalidNotebook { .. } => "invalid_notebook",
            Error::CellNotFound { .. } => "cell_not_found",
            Error::InvalidArguments { .. } => "invalid_arguments",
            Error::Io { .. } => "io_error",
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArguments {
            message: message.into(),
        }
    }
}

/// Keeps a user-supplied value short inside an error message.
pub(crate) use ipython_mcp_text::shorten;
