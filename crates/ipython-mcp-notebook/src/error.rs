//! The crate's one error type, shared by every module.

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
