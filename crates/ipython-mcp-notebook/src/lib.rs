//! Jupyter notebook files for ipython-mcp: synchronous, no kernel I/O.
//!
//! - [`Workspace`] confines every notebook path to one root directory: paths are relative,
//!   made of plain components (no `..`, no `.`, no empty ones), and no symlink is followed.
//!   Files are reached by descriptor from the root, never by path (`directory.rs`), so no
//!   rename by a kernel that writes the workspace can move where a read or write lands.
//! - [`Notebook`] is an nbformat 4 notebook kept as JSON (`serde_json::Value`), so fields this
//!   crate does not know (widget state, tool metadata, future nbformat fields) survive every
//!   edit unchanged. Cells get nbformat 4.5 ids on the first write and keep them.
//! - A revision is the SHA-256 (hex) of the file's bytes. Every write names the revision it
//!   was computed from and fails with [`Error::RevisionConflict`] — writing nothing — when the
//!   file changed in between. Writes are atomic: a temp file in the same directory
//!   descriptor, fsync, rename, fsync of the directory; the file keeps its permissions.
//! - [`Workspace::mutate`] is the one read-modify-write (resolve, lock, read, check the
//!   revision, change, write); every edit and every save of outputs goes through it.
//!
//! Invariants:
//! - No file is read or written before its path was checked against the workspace root, and
//!   every read and write opens the path anew beneath the root's descriptor.
//! - A failed mutation leaves the file byte for byte as it was.

mod directory;
mod error;
mod model;
mod path;
mod percent;
mod store;
mod uri;

pub use directory::{Scan, MAX_NOTEBOOK_BYTES};
pub use error::Error;
pub use model::{cell_id, joined_text, CellRef, CellType, NewCell, Notebook, Output};
pub use path::{Format, NotebookPath, Workspace, JUPYTER_PREFIX};
pub use percent::{parse_percent, to_percent};
pub use store::{encode, revision_of, Loaded, Mutated};
pub use uri::{path_from_uri, uri_for_path, URI_PREFIX};
