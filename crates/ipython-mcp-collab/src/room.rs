//! One notebook's live document: the handle ([`Room`]) and the task that owns its WebSocket.
//!
//! The document (a yrs `Doc`) is shared: callers read it and write their edits into it in
//! short transactions (never across an await), and the task applies the server's updates.
//! Everything sent goes through the task, in the order it was written.
//!
//! Acknowledgement: after an update the task sends a sync step 1, and the server's sync
//! step 2 answers it. jupyter_server_ydoc handles one client's messages in order (a queue
//! per WebSocket, served by one loop), so that answer comes after the update was applied to
//! the server's document. Answers come back in the order of the steps 1, so a FIFO of
//! waiters matches them. The room never sends a step 2 unasked.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt as _;
use ipython_mcp_jupyter::remote::tungstenite::protocol::frame::coding::CloseCode;
use ipython_mcp_jupyter::remote::tungstenite::protocol::CloseFrame;
use ipython_mcp_jupyter::remote::tungstenite::Message;
use ipython_mcp_jupyter::remote::{Method, Server, WebSocket};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use yrs::sync::{Awareness, SyncMessage};
use yrs::updates::decoder::Decode as _;
use yrs::{Doc, ReadTxn as _, Transact as _, TransactionMut, Update};

use crate::error::CollabError;
use crate::layout::{self, Roots};
use crate::wire::{self, Incoming};
use crate::{diff, edit};

/// How often our awareness state is renewed: other clients drop a state not renewed for
/// 30 s (y-protocols' `outdatedTimeout`), and renew their own every 15 s.
const AWARENESS_RENEWAL: Duration = Duration::from_secs(15);

/// How long leaving (awareness removal, close handshake) may take before the task is
/// aborted.
const CLOSE_BOUND: Duration = Duration::from_secs(5);

/// What a person sees of the agent in JupyterLab's collaborator list and cursors.
fn agent_awareness() -> Value {
    serde_json::json!({
        "user": {
            "username": "ipython-mcp",
            "name": "ipython-mcp (agent)",
            "display_name": "ipython-mcp (agent)",
            "initials": "AI",
            "color": "var(--jp-collaborator-color7)",
            "avatar_url": null
        }
    })
}

/// One notebook's live document, synced with the server. Cheap to clone; the room stays
/// open until [`Room::close`] or until the last clone is dropped (which aborts its task).
#[derive(Clone)]
pub struct Room {
    shared: Arc<Shared>,
}

struct Shared {
    path: String,
    doc: Doc,
    roots: Roots,
    commands: mpsc::UnboundedSender<Command>,
    /// Held while an edit is written and queued, so updates leave in the order they were
    /// made (yrs would integrate them in any order, but the acknowledgement order is ours).
    writing: Mutex<()>,
    ended: watch::Receiver<Option<Ended>>,
    task: Mutex<Option<JoinHandle<()>>>,
    timeout: Duration,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}

impl std::fmt::Debug for Room {
    // Metadata only: never the document's content.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("path", &self.shared.path)
            .field("closed", &self.closed())
            .finish()
    }
}

/// Why the room ended, and the WebSocket close code if the server sent one.
#[derive(Debug, Clone)]
struct Ended {
    code: Option<u16>,
    why: String,
}

enum Command {
    /// Send `update` (unless empty), then a sync step 1 whose answer acknowledges it.
    Write {
        update: Vec<u8>,
        ack: oneshot::Sender<Result<(), CollabError>>,
    },
    /// Leave the room.
    Close,
}

/// The origin of our own transactions (observers could tell them from the server's).
const ORIGIN: &str = "ipython-mcp";

impl Room {
    /// Joins the live document of the notebook at `path` (relative to the server's root):
    /// asks the collaboration extension for the document's session, opens its room's
    /// WebSocket, and syncs (sync step 1 and 2) until the local copy holds the server's
    /// document. Bounded by `timeout`, which also bounds each later acknowledgement.
    pub async fn open(server: &Server, path: &str, timeout: Duration) -> Result<Room, CollabError> {
        let deadline = Instant::now() + timeout;
        let (file_id, session_id) = document_session(server, path, deadline, timeout).await?;
        let room_path = format!(
            "api/collaboration/room/json:notebook:{}?sessionId={}",
            encode_component(&file_id),
            encode_component(&session_id)
        );
        let socket = tokio::time::timeout_at(
            deadline,
            server.websocket(&room_path, "the document's room"),
        )
        .await
        .map_err(|_| timed_out("connecting to the document's room", timeout))?
        .map_err(|error| CollabError::from_server(error, path))?;

        let room = Room::start(path, socket, file_id, timeout)?;
        // The first step 1 (empty update) is answered with the server's whole document.
        let synced = room.send(Vec::new(), deadline, "the document's first sync");
        match synced.await {
            Ok(()) => Ok(room),
            Err(error) => {
                let code = room
                    .shared
                    .ended
                    .borrow()
                    .as_ref()
                    .and_then(|ended| ended.code);
                room.close().await;
                Err(match code {
                    Some(4404) => CollabError::NotFound {
                        path: path.to_owned(),
                    },
                    _ => error,
                })
            }
        }
    }

    /// The room over a connected `socket`, with its task serving it; not yet synced.
    fn start(
        path: &str,
        socket: WebSocket,
        file_id: String,
        timeout: Duration,
    ) -> Result<Room, CollabError> {
        let doc = Doc::new();
        let roots = Roots::of(&doc);
        let mut awareness = Awareness::new(doc.clone());
        awareness
            .set_local_state(agent_awareness())
            .map_err(|error| CollabError::Protocol {
                message: format!("cannot set the awareness state: {error}"),
            })?;
        let (commands, inbox) = mpsc::unbounded_channel();
        let (ended_sender, ended) = watch::channel(None);
        let task = tokio::spawn(run(Actor {
            socket,
            doc: doc.clone(),
            awareness,
            inbox,
            pending: VecDeque::new(),
            ended: ended_sender,
            file_id: file_id.clone(),
        }));
        let room = Room {
            shared: Arc::new(Shared {
                path: path.to_owned(),
                doc,
                roots,
                commands,
                writing: Mutex::new(()),
                ended,
                task: Mutex::new(Some(task)),
                timeout,
            }),
        };
        tracing::debug!(file_id = %file_id, "joining a live document");
        Ok(room)
    }

    /// The document now, as nbformat 4 JSON, as jupyter_ydoc's `YNotebook.get()` renders it.
    pub fn notebook(&self) -> Result<Value, CollabError> {
        let txn = self.shared.doc.transact();
        Ok(layout::notebook(&self.shared.roots, &txn))
    }

    /// Writes the change from `before` (a snapshot from [`Room::notebook`]) to `after` (the
    /// same notebook after our edit) as the smallest changes keyed by cell id: inserted,
    /// deleted and moved cells, a splice of each changed source, changed metadata keys,
    /// outputs, execution counts and other fields. Cells we did not change are not written,
    /// so a person's concurrent edits elsewhere survive. Returns once the server has the
    /// edit (acknowledged), bounded by the room's timeout.
    pub async fn apply(&self, before: &Value, after: &Value) -> Result<(), CollabError> {
        let edit = diff::diff(before, after)?;
        if edit.is_empty() {
            return Ok(());
        }
        let roots = self.shared.roots.clone();
        self.write(move |txn| {
            edit::apply(txn, &roots, &edit);
            Ok(())
        })
        .await
    }

    /// Replaces the outputs and execution count of the code cell `cell_id` (outputs
    /// streaming in while it runs). Acknowledged like [`Room::apply`].
    pub async fn set_outputs(
        &self,
        cell_id: &str,
        execution_count: Option<i64>,
        outputs: &[Value],
    ) -> Result<(), CollabError> {
        let roots = self.shared.roots.clone();
        let outputs = Value::Array(outputs.to_vec());
        self.write(move |txn| {
            let cell = code_cell(&roots, txn, cell_id)?;
            edit::set_outputs(txn, &cell, &outputs);
            yrs::Map::insert(
                &cell,
                txn,
                "execution_count",
                layout::any_of(&execution_count.map_or(Value::Null, Value::from)),
            );
            Ok(())
        })
        .await
    }

    /// Marks the code cell `cell_id` running or idle (jupyter_ydoc's `execution_state`,
    /// which JupyterLab shows as the cell's `[*]`). Acknowledged like [`Room::apply`].
    pub async fn set_execution_state(
        &self,
        cell_id: &str,
        running: bool,
    ) -> Result<(), CollabError> {
        let roots = self.shared.roots.clone();
        self.write(move |txn| {
            let cell = code_cell(&roots, txn, cell_id)?;
            let state = if running { "running" } else { "idle" };
            yrs::Map::insert(&cell, txn, layout::EXECUTION_STATE, state);
            Ok(())
        })
        .await
    }

    /// Why the room is no longer usable (its WebSocket closed, the server gone), if it is not.
    pub fn closed(&self) -> Option<String> {
        self.shared
            .ended
            .borrow()
            .as_ref()
            .map(|ended| ended.why.clone())
    }

    /// Leaves the room (our awareness state removed, the WebSocket closed) and joins its
    /// task, within a bound. Other clones of this handle see the room closed.
    pub async fn close(self) {
        let _ = self.shared.commands.send(Command::Close);
        let task = self
            .shared
            .task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(task) = task {
            ipython_mcp_jupyter::task::join(
                "live document",
                vec![task],
                Instant::now() + CLOSE_BOUND,
            )
            .await;
        }
    }

    /// Writes `change` into the document in one transaction and sends it, then waits for
    /// the server's acknowledgement. `change` refuses (Err) before writing anything.
    async fn write(
        &self,
        change: impl FnOnce(&mut TransactionMut) -> Result<(), CollabError>,
    ) -> Result<(), CollabError> {
        if let Some(why) = self.closed() {
            return Err(CollabError::Closed { why });
        }
        let deadline = Instant::now() + self.shared.timeout;
        let acknowledged = {
            let _order = self
                .shared
                .writing
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let update = {
                let mut txn = self.shared.doc.transact_mut_with(ORIGIN);
                change(&mut txn)?;
                txn.encode_update_v1()
            };
            self.send(update, deadline, "the server's acknowledgement of the edit")
        };
        acknowledged.await
    }

    /// Queues `update` and its step 1; the future waits for the answer until `deadline`.
    fn send(
        &self,
        update: Vec<u8>,
        deadline: Instant,
        what: &'static str,
    ) -> impl std::future::Future<Output = Result<(), CollabError>> + 'static {
        let (ack, answer) = oneshot::channel();
        // The first sync carries no edit: its failure says only why the room ended.
        let caveat = if update.is_empty() {
            ""
        } else {
            "; the edit may not have reached the document"
        };
        let queued = self.shared.commands.send(Command::Write { update, ack });
        let ended = self.shared.ended.clone();
        let timeout = self.shared.timeout;
        async move {
            let closed = || CollabError::Closed {
                why: format!(
                    "{}{caveat}",
                    ended
                        .borrow()
                        .as_ref()
                        .map_or("the room's task ended", |ended| ended.why.as_str())
                ),
            };
            if queued.is_err() {
                return Err(closed());
            }
            match tokio::time::timeout_at(deadline, answer).await {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => Err(closed()),
                Err(_) => Err(CollabError::Timeout {
                    what: format!("{what}{caveat}"),
                    after: timeout,
                }),
            }
        }
    }
}

/// The live code cell `id`, or why an output cannot go there.
fn code_cell(roots: &Roots, txn: &TransactionMut, id: &str) -> Result<yrs::MapRef, CollabError> {
    let (_, cell) = layout::find_cell(roots, txn, id).ok_or_else(|| CollabError::Invalid {
        message: format!("the live document has no cell {id:?}"),
    })?;
    match yrs::Map::get(&cell, txn, "cell_type") {
        Some(yrs::Out::Any(yrs::Any::String(kind))) if &*kind == "code" => Ok(cell),
        _ => Err(CollabError::Invalid {
            message: format!("cell {id:?} is not a code cell"),
        }),
    }
}

/// The error for a step of [`Room::open`] that did not finish within its `timeout`.
fn timed_out(what: &str, timeout: Duration) -> CollabError {
    CollabError::Timeout {
        what: what.to_owned(),
        after: timeout,
    }
}

/// Asks the collaboration extension for the document session of the notebook at `path`, and
/// returns its file id and session id.
async fn document_session(
    server: &Server,
    path: &str,
    deadline: Instant,
    timeout: Duration,
) -> Result<(String, String), CollabError> {
    let session_path = format!("api/collaboration/session/{}", encode_path(path));
    let session = tokio::time::timeout_at(
        deadline,
        server.call_json(
            Method::PUT,
            &session_path,
            Some(serde_json::json!({"format": "json", "type": "notebook"})),
            "the document session",
        ),
    )
    .await
    .map_err(|_| timed_out("opening the document session", timeout))?;
    let session = match session {
        Ok(session) => session,
        Err(ipython_mcp_jupyter::Error::RemoteNotFound { .. }) => {
            // The extension answers 404 for a missing file; a server without it
            // answers 404 for the endpoint. The contents API tells which.
            return Err(missing(server, path, deadline).await);
        }
        Err(error) => return Err(CollabError::from_server(error, path)),
    };
    let field = |name: &str| {
        session
            .get(name)
            .and_then(Value::as_str)
            .filter(|value| !value.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| CollabError::Protocol {
                message: format!("the document session has no {name}"),
            })
    };
    Ok((field("fileId")?, field("sessionId")?))
}

/// Tells a missing file from a server without the extension (both answer 404).
async fn missing(server: &Server, path: &str, deadline: Instant) -> CollabError {
    let contents = format!("api/contents/{}?content=0", encode_path(path));
    match tokio::time::timeout_at(
        deadline,
        server.call_json(Method::GET, &contents, None, "the file"),
    )
    .await
    {
        Ok(Ok(_)) => CollabError::NotCollaborative,
        Ok(Err(ipython_mcp_jupyter::Error::RemoteNotFound { .. })) => CollabError::NotFound {
            path: path.to_owned(),
        },
        Ok(Err(error)) => CollabError::from_server(error, path),
        Err(_) => CollabError::NotCollaborative,
    }
}

/// The task's state: the socket, the document, and the waiters for acknowledgements.
struct Actor {
    socket: WebSocket,
    doc: Doc,
    awareness: Awareness,
    inbox: mpsc::UnboundedReceiver<Command>,
    /// Waiters for the answers to our steps 1, oldest first; `true` once the server said its
    /// update conflicted (jupyter_server_ydoc's RAW `conflict`, sent before that answer).
    pending: VecDeque<(oneshot::Sender<Result<(), CollabError>>, bool)>,
    ended: watch::Sender<Option<Ended>>,
    file_id: String,
}

async fn run(mut actor: Actor) {
    let ended = actor.serve().await;
    tracing::debug!(file_id = %actor.file_id, code = ?ended.code, why = %ended.why, "left a live document");
    // Said before the waiters hear of it: a waiter's caller reads why (the close code) from
    // `ended` (a missing file's 4404 is `NotFound` to `Room::open`).
    let why = ended.why.clone();
    actor.ended.send_replace(Some(ended));
    for (waiter, _) in actor.pending.drain(..) {
        let _ = waiter.send(Err(CollabError::Closed {
            why: format!("{why}; the edit may not have reached the document"),
        }));
    }
}

impl Actor {
    /// Serves the room until it ends, and says why.
    async fn serve(&mut self) -> Ended {
        if let Err(ended) = self.send_awareness().await {
            return ended;
        }
        let mut renewal =
            tokio::time::interval_at(Instant::now() + AWARENESS_RENEWAL, AWARENESS_RENEWAL);
        loop {
            tokio::select! {
                command = self.inbox.recv() => match command {
                    Some(Command::Write { update, ack }) => {
                        if let Err(ended) = self.write(update).await {
                            let _ = ack.send(Err(CollabError::Closed {
                                why: format!("{}; the edit may not have reached the document", ended.why),
                            }));
                            return ended;
                        }
                        self.pending.push_back((ack, false));
                    }
                    Some(Command::Close) | None => return self.leave().await,
                },
                message = self.socket.next() => match message {
                    Some(Ok(Message::Binary(bytes))) => {
                        if let Err(ended) = self.receive(&bytes).await {
                            return ended;
                        }
                    }
                    Some(Ok(Message::Close(frame))) => return closed_by_server(frame),
                    // Pings are answered by the WebSocket layer; text frames are not part of
                    // the protocol.
                    Some(Ok(_)) => {}
                    Some(Err(error)) => return Ended {
                        code: None,
                        why: format!("the connection to the server was lost: {error}"),
                    },
                    None => return Ended {
                        code: None,
                        why: "the server closed the connection".to_owned(),
                    },
                },
                _ = renewal.tick() => {
                    if let Err(ended) = self.renew_awareness().await {
                        return ended;
                    }
                }
            }
        }
    }

    async fn write(&mut self, update: Vec<u8>) -> Result<(), Ended> {
        if !update.is_empty() {
            self.send(wire::update(update)).await?;
        }
        let state = self.doc.transact().state_vector();
        self.send(wire::sync_step1(state)).await
    }

    async fn receive(&mut self, bytes: &[u8]) -> Result<(), Ended> {
        let message = match wire::decode(bytes) {
            Ok(message) => message,
            Err(error) => {
                tracing::debug!(file_id = %self.file_id, %error, "an unreadable message from the room was ignored");
                return Ok(());
            }
        };
        match message {
            Incoming::Sync(SyncMessage::SyncStep1(state)) => {
                let answer = self.doc.transact().encode_state_as_update_v1(&state);
                self.send(wire::sync_step2(answer)).await?;
            }
            Incoming::Sync(SyncMessage::SyncStep2(update)) => {
                let applied = self.integrate(&update);
                if let Some((waiter, conflicted)) = self.pending.pop_front() {
                    let result = match (applied, conflicted) {
                        (Err(message), _) => Err(CollabError::Protocol { message }),
                        (Ok(()), true) => Err(CollabError::Protocol {
                            message: "the server could not apply the edit (a conflict with its copy of the document)".to_owned(),
                        }),
                        (Ok(()), false) => Ok(()),
                    };
                    let _ = waiter.send(result);
                }
            }
            Incoming::Sync(SyncMessage::Update(update)) => {
                if let Err(message) = self.integrate(&update) {
                    tracing::debug!(file_id = %self.file_id, %message, "an update from the room was not applied");
                }
            }
            Incoming::Awareness(update) => {
                // Others' presence: kept for completeness, never needed to edit.
                let _ = self.awareness.apply_update(update);
            }
            Incoming::Raw(kind) => {
                tracing::debug!(file_id = %self.file_id, kind = ?kind, "a notice from the room");
                if kind.as_deref() == Some("conflict") {
                    if let Some(front) = self.pending.front_mut() {
                        front.1 = true;
                    }
                }
            }
            Incoming::Unknown(tag) => {
                tracing::debug!(file_id = %self.file_id, tag, "a message of unknown type from the room was ignored");
            }
        }
        Ok(())
    }

    fn integrate(&self, update: &[u8]) -> Result<(), String> {
        let update =
            Update::decode_v1(update).map_err(|error| format!("unreadable update: {error}"))?;
        self.doc
            .transact_mut()
            .apply_update(update)
            .map_err(|error| format!("the server's update does not apply: {error}"))
    }

    async fn send_awareness(&mut self) -> Result<(), Ended> {
        let client = self.doc.client_id();
        match self.awareness.update_with_clients([client]) {
            Ok(update) => self.send(wire::awareness(update)).await,
            Err(_) => Ok(()),
        }
    }

    async fn renew_awareness(&mut self) -> Result<(), Ended> {
        // Setting the same state again bumps its clock, which is what renews it.
        let _ = self.awareness.set_local_state(agent_awareness());
        self.send_awareness().await
    }

    /// Says goodbye (our awareness state removed, so the person's list drops us at once)
    /// and closes the WebSocket.
    async fn leave(&mut self) -> Ended {
        self.awareness.clean_local_state();
        let _ = self.send_awareness().await;
        let _ = self
            .socket
            .close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            }))
            .await;
        Ended {
            code: None,
            why: "the room was closed by this client".to_owned(),
        }
    }

    async fn send(&mut self, bytes: Vec<u8>) -> Result<(), Ended> {
        self.socket
            .send(Message::Binary(bytes.into()))
            .await
            .map_err(|error| Ended {
                code: None,
                why: format!("the connection to the server was lost: {error}"),
            })
    }
}

/// The reason in a close frame from the room: jupyter_server_ydoc sends a JSON payload with
/// a `reason` (an expired session: `sessionId` no longer the server's after a restart) or a
/// plain text; only that reason is kept.
fn closed_by_server(frame: Option<CloseFrame>) -> Ended {
    let Some(frame) = frame else {
        return Ended {
            code: None,
            why: "the server closed the room".to_owned(),
        };
    };
    let code = u16::from(frame.code);
    let reason = serde_json::from_str::<Value>(&frame.reason)
        .ok()
        .and_then(|payload| payload.get("reason")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| frame.reason.to_string());
    let why = match (code, reason.is_empty()) {
        (4404, _) => "the server has no such file".to_owned(),
        (_, true) => format!("the server closed the room (code {code})"),
        (_, false) => format!("the server closed the room (code {code}): {reason}"),
    };
    Ended {
        code: Some(code),
        why,
    }
}

/// A notebook path for a URL path: each segment percent-encoded, `/` kept.
fn encode_path(path: &str) -> String {
    path.trim_start_matches('/')
        .split('/')
        .map(encode_component)
        .collect::<Vec<_>>()
        .join("/")
}

/// Percent-encodes all but RFC 3986's unreserved characters.
fn encode_component(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_encoded_per_segment() {
        assert_eq!(encode_path("/a b/c#?.ipynb"), "a%20b/c%23%3F.ipynb");
        assert_eq!(encode_component("json:notebook"), "json%3Anotebook");
    }

    #[test]
    fn a_close_frame_keeps_only_its_reason() {
        let frame = CloseFrame {
            code: CloseCode::from(1003),
            reason: r#"{"reason":"Session expired","sessionId":"x","reloadable":true}"#.into(),
        };
        let ended = closed_by_server(Some(frame));
        assert_eq!(ended.code, Some(1003));
        assert_eq!(
            ended.why,
            "the server closed the room (code 1003): Session expired"
        );
    }
}
