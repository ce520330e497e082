//! A live-document client for Jupyter's real-time collaboration (jupyter-collaboration's
//! server extension, `jupyter_server_ydoc`): join the shared document of a notebook that a
//! person may have open in JupyterLab, read it, and write edits into it as one more CRDT
//! collaborator, so their concurrent edits and ours merge instead of overwriting each other.
//!
//! [`Room::open`] asks the extension for the document's session (`PUT
//! api/collaboration/session/<path>`), opens the room's WebSocket
//! (`api/collaboration/room/json:notebook:<fileId>?sessionId=…`) and syncs a local yrs
//! document with the y-sync protocol; a task then keeps applying the server's updates.
//! [`Room::apply`] turns a before/after pair of notebook JSON snapshots into the smallest
//! Y operations keyed by cell id (diff.rs, pure) and writes them (edit.rs). The document
//! layout is jupyter_ydoc's `YNotebook` (layout.rs).
//!
//! Invariants:
//! - An edit that returns `Ok` is in the server's document: the server answered the sync
//!   step 1 sent after it, and it handles one client's messages in order. A timeout or a
//!   closed room is an error that says the edit may not have arrived, never a success.
//! - Only the cells, keys and text ranges an edit changed are written; a person's
//!   concurrent edits elsewhere survive the merge.
//! - Nothing fails half-way through a write: every refusal comes before the transaction
//!   changes anything.
//! - The token goes only in an `Authorization` header (the jupyter crate's WebSocket and
//!   REST calls); logs carry ids, sizes and reasons, never cell contents.
//! - The room's task is joined by [`Room::close`] (bounded) and aborted when the last
//!   handle is dropped.
//! - No error text names an MCP tool or gives advice: that is the MCP crate's wording.
//!
//! Not done: reconnecting after the WebSocket drops (the room reports [`Room::closed`];
//! open a new one), documents other than notebooks, notebooks without cell ids (nbformat
//! before 4.5) for [`Room::apply`].

mod diff;
mod edit;
mod error;
mod layout;
mod room;
mod wire;

pub use error::CollabError;
pub use room::Room;
