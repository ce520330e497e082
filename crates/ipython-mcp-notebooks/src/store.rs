//! Where the notebook tools read and write: the local workspace, or the configured Jupyter
//! server's contents for `jupyter:` paths. Both give the same operations (read with a
//! revision, create, the one read-modify-write) with the same revision semantics, so the tool
//! bodies do not know which one they use.
//!
//! A Jupyter server with real-time collaboration (jupyter-collaboration) gets every read and
//! edit through the notebook's live document (`ipython_mcp_collab::Room`): the agent is one
//! more collaborator beside a person in JupyterLab, its edits merge with theirs, and the
//! revision is the SHA-256 of the document as this server would write it. An edit returns only
//! once the server has it; a room that is gone is an error, never a silent write elsewhere.
//!
//! Without collaboration, the contents API: the revision is the SHA-256 of the file's bytes,
//! as the server computes it (`hash=1`; a server too old to compute it gets the SHA-256 of the
//! notebook as this server would write it). A write checks the revision right before it (the
//! contents API has no conditional write), so only a change in the milliseconds between that
//! check and the write goes unseen; writes of this server to one notebook take turns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ipython_mcp_collab::{CollabError, Room};
use ipython_mcp_jupyter::remote::Server;
use ipython_mcp_notebook::{
    revision_of, Error, Loaded, Mutated, Notebook, NotebookPath, Workspace,
};
use serde_json::Value;

use crate::Error as StoreError;

/// One of the places notebooks live.
#[derive(Clone)]
pub enum Store {
    Local(Arc<Workspace>),
    Jupyter(Arc<JupyterNotebooks>),
}

/// Notebooks in a Jupyter server's contents.
pub struct JupyterNotebooks {
    server: Server,
    /// The directory of the server's root that holds this caller's notebooks (a principal's,
    /// named after them), made at the first write; `None`: the whole root.
    area: Option<String>,
    area_made: tokio::sync::OnceCell<()>,
    /// One lock per notebook, held weakly (as the workspace's file locks): this server's
    /// read-modify-writes of one notebook never interleave.
    locks: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    /// The live documents joined so far, by server path: kept open, so the next read is
    /// local and a person sees the agent in the room.
    rooms: tokio::sync::Mutex<HashMap<String, Room>>,
    /// When the server last said it does not collaborate: not asked again for a while.
    solo_since: Mutex<Option<Instant>>,
}

/// How long joining a room (session, WebSocket, first sync) and each acknowledged edit may
/// take.
const ROOM_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server that does not collaborate is taken at its word.
const SOLO_RECHECK: Duration = Duration::from_secs(60);

impl JupyterNotebooks {
    pub fn new(server: Server, area: Option<String>) -> JupyterNotebooks {
        JupyterNotebooks {
            server,
            area,
            area_made: tokio::sync::OnceCell::new(),
            locks: Mutex::default(),
            rooms: tokio::sync::Mutex::default(),
            solo_since: Mutex::default(),
        }
    }

    /// The notebook's live document when the server collaborates (`None`: it does not).
    /// A room that closed is joined again once; failing that, the error says why.
    pub async fn room(&self, path: &NotebookPath) -> Result<Option<Room>, StoreError> {
        {
            let solo = self
                .solo_since
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if solo.is_some_and(|since| since.elapsed() < SOLO_RECHECK) {
                return Ok(None);
            }
        }
        let server_path = server_path(path);
        let mut rooms = self.rooms.lock().await;
        if let Some(room) = rooms.get(server_path) {
            match room.closed() {
                None => {
                    // A room outlives its file (a person deleted or renamed the notebook):
                    // its document is then no notebook on the server, and edits there would
                    // be lost. One cheap request tells.
                    let exists =
                        self.server
                            .notebook_exists(server_path)
                            .await
                            .map_err(|error| StoreError::Jupyter {
                                path: path.relative.clone(),
                                error,
                            })?;
                    if exists {
                        return Ok(Some(room.clone()));
                    }
                    let room = rooms.remove(server_path);
                    drop(rooms);
                    if let Some(room) = room {
                        room.close().await;
                    }
                    return Err(StoreError::Notebook(Error::NotFound {
                        path: path.relative.clone(),
                    }));
                }
                Some(why) => {
                    tracing::info!(why = %why, "a notebook's live document closed; joining again");
                    rooms.remove(server_path);
                }
            }
        }
        match Room::open(&self.server, server_path, ROOM_TIMEOUT).await {
            Ok(room) => {
                rooms.insert(server_path.to_owned(), room.clone());
                Ok(Some(room))
            }
            Err(CollabError::NotCollaborative) => {
                *self
                    .solo_since
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Instant::now());
                Ok(None)
            }
            Err(error) => Err(StoreError::Collab {
                path: path.relative.clone(),
                error,
            }),
        }
    }

    /// Leaves the notebook's live document, if joined.
    pub async fn leave(&self, path: &NotebookPath) {
        let room = self.rooms.lock().await.remove(server_path(path));
        if let Some(room) = room {
            room.close().await;
        }
    }

    fn lock_for(&self, path: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(lock) = locks.get(path).and_then(Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, lock| lock.strong_count() > 0);
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(path.to_owned(), Arc::downgrade(&lock));
        lock
    }

    async fn read(&self, path: &NotebookPath) -> Result<Loaded, StoreError> {
        match self.room(path).await? {
            Some(room) => live_read(path, &room).map(|(_, loaded)| loaded),
            None => self.read_file(path).await,
        }
    }

    async fn read_file(&self, path: &NotebookPath) -> Result<Loaded, StoreError> {
        let server_path = server_path(path);
        let file = self
            .server
            .get_notebook(server_path, true)
            .await
            .map_err(|error| StoreError::Jupyter {
                path: path.relative.clone(),
                error,
            })?;
        let Some(mut content) = file.content else {
            return Err(StoreError::Notebook(Error::InvalidNotebook {
                path: path.relative.clone(),
                problem: "the server sent no content".to_owned(),
            }));
        };
        strip_transient(&mut content);
        let notebook = Notebook::from_value(content).map_err(|problem| {
            StoreError::Notebook(Error::InvalidNotebook {
                path: path.relative.clone(),
                problem,
            })
        })?;
        let bytes = notebook.to_bytes();
        Ok(Loaded {
            revision: file.hash.unwrap_or_else(|| revision_of(&bytes)),
            bytes: file
                .size
                .and_then(|size| usize::try_from(size).ok())
                .unwrap_or(bytes.len()),
            notebook,
        })
    }

    /// The revision now, or `None` when there is no such notebook.
    async fn current_revision(&self, path: &NotebookPath) -> Result<Option<String>, StoreError> {
        match self.server.get_notebook(server_path(path), false).await {
            Ok(file) => match file.hash {
                Some(hash) => Ok(Some(hash)),
                None => Ok(Some(self.read_file(path).await?.revision)),
            },
            Err(ipython_mcp_jupyter::Error::RemoteNotFound { .. }) => Ok(None),
            Err(error) => Err(StoreError::Jupyter {
                path: path.relative.clone(),
                error,
            }),
        }
    }

    /// The Jupyter server these notebooks are on.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// The caller's area, if any (notebook paths are checked inside it).
    pub fn area(&self) -> Option<&str> {
        self.area.as_deref()
    }

    /// The notebooks of the caller's area (all of the server's without one), as paths in it.
    pub async fn list(
        &self,
        depth: usize,
        limit: usize,
    ) -> Result<Vec<String>, ipython_mcp_jupyter::Error> {
        let dir = self.area.as_deref().unwrap_or_default();
        let listed = self.server.list_notebooks(dir, depth, limit).await?;
        Ok(match &self.area {
            Some(area) => listed
                .into_iter()
                .filter_map(|path| {
                    path.strip_prefix(area.as_str())
                        .and_then(|rest| rest.strip_prefix('/'))
                        .map(str::to_owned)
                })
                .collect(),
            None => listed,
        })
    }

    async fn write(&self, path: &NotebookPath, notebook: &Notebook) -> Result<String, StoreError> {
        if let Some(area) = &self.area {
            self.area_made
                .get_or_try_init(|| self.server.ensure_directory(area))
                .await
                .map_err(|error| StoreError::Jupyter {
                    path: path.relative.clone(),
                    error,
                })?;
        }
        let content = Value::Object(notebook.as_json().clone());
        self.server
            .put_notebook(server_path(path), &content)
            .await
            .map_err(|error| StoreError::Jupyter {
                path: path.relative.clone(),
                error,
            })?;
        // The revision of what the server wrote (its bytes are its own formatting).
        Ok(self
            .current_revision(path)
            .await?
            .unwrap_or_else(|| revision_of(&notebook.to_bytes())))
    }
}

/// The live document as a notebook, with the JSON it came from (the `before` of an edit).
fn live_read(path: &NotebookPath, room: &Room) -> Result<(Value, Loaded), StoreError> {
    let document = room.notebook().map_err(|error| StoreError::Collab {
        path: path.relative.clone(),
        error,
    })?;
    let notebook = Notebook::from_value(document.clone()).map_err(|problem| {
        StoreError::Notebook(Error::InvalidNotebook {
            path: path.relative.clone(),
            problem,
        })
    })?;
    let bytes = notebook.to_bytes();
    Ok((
        document,
        Loaded {
            revision: revision_of(&bytes),
            bytes: bytes.len(),
            notebook,
        },
    ))
}

fn server_path(path: &NotebookPath) -> &str {
    path.server_path().unwrap_or(&path.relative)
}

/// `metadata.trusted` is the server's per-session view of a cell (nbformat drops it on write):
/// not part of the notebook the agent reads.
fn strip_transient(content: &mut Value) {
    if let Some(cells) = content.get_mut("cells").and_then(Value::as_array_mut) {
        for cell in cells {
            if let Some(metadata) = cell.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.remove("trusted");
            }
        }
    }
}

fn conflict(path: &NotebookPath, expected: &str, actual: &str) -> StoreError {
    StoreError::Notebook(Error::RevisionConflict {
        path: path.relative.clone(),
        expected: expected.to_owned(),
        actual: actual.to_owned(),
    })
}

fn check(path: &NotebookPath, expected: Option<&str>, actual: &str) -> Result<(), StoreError> {
    match expected {
        Some(expected) if !expected.eq_ignore_ascii_case(actual) => {
            Err(conflict(path, expected, actual))
        }
        _ => Ok(()),
    }
}

/// Runs file work on the blocking pool.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, StoreError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(StoreError::Notebook(error)),
        Err(_) => Err(StoreError::Lost),
    }
}

impl Store {
    /// Reads and parses a notebook.
    pub async fn read(&self, path: &NotebookPath) -> Result<Loaded, StoreError> {
        match self {
            Store::Local(workspace) => {
                let (workspace, path) = (Arc::clone(workspace), path.clone());
                blocking(move || workspace.read(&path)).await
            }
            Store::Jupyter(jupyter) => jupyter.read(path).await,
        }
    }

    /// Reads a notebook and checks it is at `expected` when given: what a run needs first.
    pub async fn load(
        &self,
        path: &NotebookPath,
        expected: Option<&str>,
    ) -> Result<Loaded, StoreError> {
        let loaded = self.read(path).await?;
        check(path, expected, &loaded.revision)?;
        Ok(loaded)
    }

    /// The revision and size of a notebook, parsed only where the place requires it.
    pub async fn revision_and_size(
        &self,
        path: &NotebookPath,
    ) -> Result<(String, usize), StoreError> {
        match self {
            Store::Local(workspace) => {
                let (workspace, path) = (Arc::clone(workspace), path.clone());
                blocking(move || workspace.revision_and_size(&path)).await
            }
            Store::Jupyter(jupyter) => {
                let loaded = jupyter.read(path).await?;
                Ok((loaded.revision, loaded.bytes))
            }
        }
    }

    /// Writes a new notebook: an existing one is `notebook_exists` unless `overwrite` (then
    /// replaced only if still at `expected`, when given). Returns the new revision.
    pub async fn create(
        &self,
        path: &NotebookPath,
        notebook: Notebook,
        overwrite: bool,
        expected: Option<String>,
    ) -> Result<String, StoreError> {
        match self {
            Store::Local(workspace) => {
                let (workspace, path) = (Arc::clone(workspace), path.clone());
                blocking(move || workspace.create(&path, &notebook, overwrite, expected.as_deref()))
                    .await
            }
            Store::Jupyter(jupyter) => {
                let lock = jupyter.lock_for(&path.relative);
                let _turn = lock.lock().await;
                match jupyter.current_revision(path).await? {
                    Some(_) if !overwrite => {
                        return Err(StoreError::Notebook(Error::AlreadyExists {
                            path: path.relative.clone(),
                        }))
                    }
                    Some(current) => check(path, expected.as_deref(), &current)?,
                    None => {}
                }
                let written = jupyter.write(path, &notebook).await?;
                // With collaboration, revisions are the live document's: the one to edit next.
                match jupyter.room(path).await? {
                    Some(room) => live_read(path, &room).map(|(_, loaded)| loaded.revision),
                    None => Ok(written),
                }
            }
        }
    }

    /// The one read-modify-write: read the notebook, check it is at `expected` (when given),
    /// apply `change` (ids ensured), write it. Nothing is written when a step fails.
    pub async fn mutate<T: Send + 'static>(
        &self,
        path: &NotebookPath,
        expected: Option<String>,
        change: impl FnOnce(&mut Notebook) -> Result<T, Error> + Send + 'static,
    ) -> Result<Mutated<T>, StoreError> {
        match self {
            Store::Local(workspace) => {
                let (workspace, relative) = (Arc::clone(workspace), path.relative.clone());
                blocking(move || workspace.mutate(&relative, expected.as_deref(), change)).await
            }
            Store::Jupyter(jupyter) => {
                let lock = jupyter.lock_for(&path.relative);
                let _turn = lock.lock().await;
                if let Some(room) = jupyter.room(path).await? {
                    return live_mutate(path, &room, expected, change).await;
                }
                let loaded = jupyter.read_file(path).await?;
                check(path, expected.as_deref(), &loaded.revision)?;
                let mut notebook = loaded.notebook;
                notebook.ensure_ids();
                let value = change(&mut notebook).map_err(StoreError::Notebook)?;
                let cell_count = notebook.cells().len();
                // The last check: a person's save since the read is a conflict, not lost.
                if let Some(now) = jupyter.current_revision(path).await? {
                    if !now.eq_ignore_ascii_case(&loaded.revision) {
                        return Err(conflict(path, &loaded.revision, &now));
                    }
                }
                let revision = jupyter.write(path, &notebook).await?;
                Ok(Mutated {
                    path: path.clone(),
                    value,
                    revision,
                    cell_count,
                })
            }
        }
    }
}

/// The read-modify-write of a live document: `change` runs on the document as it is now and
/// only what it changed is written (merged with a person's concurrent edits to anything
/// else). With `expected`, a document changed since the agent read it is a conflict.
async fn live_mutate<T>(
    path: &NotebookPath,
    room: &Room,
    expected: Option<String>,
    change: impl FnOnce(&mut Notebook) -> Result<T, Error>,
) -> Result<Mutated<T>, StoreError> {
    let (before, loaded) = live_read(path, room)?;
    check(path, expected.as_deref(), &loaded.revision)?;
    let mut notebook = loaded.notebook;
    notebook.ensure_ids();
    let value = change(&mut notebook).map_err(StoreError::Notebook)?;
    let cell_count = notebook.cells().len();
    room.apply(&before, &Value::Object(notebook.as_json().clone()))
        .await
        .map_err(|error| StoreError::Collab {
            path: path.relative.clone(),
            error,
        })?;
    // The document now: ours and whatever merged with it meanwhile.
    let (_, after) = live_read(path, room)?;
    Ok(Mutated {
        path: path.clone(),
        value,
        revision: after.revision,
        cell_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_trusted_flag_is_not_part_of_the_notebook() {
        let mut content = serde_json::json!({
            "cells": [{"cell_type": "code", "metadata": {"trusted": true, "tags": ["a"]}}],
        });
        strip_transient(&mut content);
        assert_eq!(
            content["cells"][0]["metadata"],
            serde_json::json!({"tags": ["a"]})
        );
    }
}
