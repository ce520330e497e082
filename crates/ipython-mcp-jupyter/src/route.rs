//! Routing of incoming messages to the request that caused them, by `parent_header.msg_id`.
//!
//! One reader task per receiving socket (iopub, shell, control) forwards each message to the
//! channel registered for its parent. Messages nobody waits for (late output after a request
//! was forgotten, start-up noise) are dropped here, so an abandoned request costs nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jupyter_protocol::{JupyterMessage, JupyterMessageContent};
use jupyter_zmq_client::{Connection, RawMessage, RuntimeError};
use tokio::sync::{mpsc, watch};

pub(crate) type SendHalf = jupyter_zmq_client::DealerSendConnection;

/// The channel a message travelled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Shell,
    Control,
    IoPub,
    /// The kernel's requests for input during an execution (`input_request`), and our replies.
    Stdin,
}

impl Channel {
    pub fn name(self) -> &'static str {
        match self {
            Channel::Shell => "shell",
            Channel::Control => "control",
            Channel::IoPub => "iopub",
            Channel::Stdin => "stdin",
        }
    }
}

/// A message delivered to the request that is its parent.
#[derive(Debug)]
pub struct Routed {
    pub channel: Channel,
    pub message: JupyterMessage,
}

#[derive(Default)]
pub(crate) struct Router {
    // std Mutex: held only for a map operation, never across an await.
    pending: Mutex<HashMap<String, mpsc::UnboundedSender<Routed>>>,
    closed: Mutex<bool>,
    welcome: watch::Sender<bool>,
}

impl Router {
    pub(crate) fn register(&self, msg_id: &str) -> mpsc::UnboundedReceiver<Routed> {
        let (sender, receiver) = mpsc::unbounded_channel();
        // After the kernel exited, the sender is dropped at once so the receiver closes.
        if !*self.closed.lock().expect("router lock") {
            self.pending
                .lock()
                .expect("router lock")
                .insert(msg_id.to_owned(), sender);
        }
        receiver
    }

    pub(crate) fn forget(&self, msg_id: &str) {
        self.pending.lock().expect("router lock").remove(msg_id);
    }

    /// Closes every receiver: the kernel is gone and nothing more will arrive.
    pub(crate) fn close_all(&self) {
        *self.closed.lock().expect("router lock") = true;
        self.pending.lock().expect("router lock").clear();
    }

    pub(crate) fn welcome(&self) -> watch::Receiver<bool> {
        self.welcome.subscribe()
    }

    pub(crate) fn deliver(&self, channel: Channel, message: JupyterMessage) {
        if let JupyterMessageContent::IoPubWelcome(_) = message.content {
            self.welcome.send_replace(true);
            return;
        }
        let Some(parent) = message
            .parent_header
            .as_ref()
            .map(|header| header.msg_id.as_str())
        else {
            tracing::trace!(
                channel = channel.name(),
                msg_type = message.header.msg_type,
                "unparented message dropped"
            );
            return;
        };
        let pending = self.pending.lock().expect("router lock");
        match pending.get(parent) {
            Some(sender) => {
                let _ = sender.send(Routed { channel, message });
            }
            None => tracing::trace!(
                channel = channel.name(),
                msg_type = message.header.msg_type,
                "unrouted message dropped"
            ),
        }
    }
}

/// Reads one socket until it fails, delivering each message.
pub(crate) async fn read_loop<S: zeromq::SocketRecv>(
    router: Arc<Router>,
    channel: Channel,
    mut connection: Connection<S>,
) {
    loop {
        match read_lenient(&mut connection).await {
            Ok(message) => router.deliver(channel, message),
            Err(RuntimeError::ZmqError(error)) => {
                tracing::debug!(channel = channel.name(), %error, "socket closed");
                return;
            }
            // A message that fails to verify or parse is lost; say so and keep reading.
            Err(error) => {
                tracing::warn!(channel = channel.name(), %error, "kernel message skipped")
            }
        }
    }
}

/// `Connection::read`, but tolerant of kernels that leave out fields the protocol crate requires
/// (bash_kernel's `kernel_info_reply` has no `language_info.version`): such a message is
/// repaired with empty defaults instead of being dropped, which would leave the launch waiting.
async fn read_lenient<S: zeromq::SocketRecv>(
    connection: &mut Connection<S>,
) -> Result<JupyterMessage, RuntimeError> {
    let raw = RawMessage::from_multipart(connection.socket.recv().await?, &connection.mac)?;
    decode(raw)
}

fn decode(raw: RawMessage) -> Result<JupyterMessage, RuntimeError> {
    if raw.jparts.len() < 4 {
        return Err(RuntimeError::InsufficientMessageParts(raw.jparts.len()));
    }
    let header: jupyter_protocol::Header = serde_json::from_slice(&raw.jparts[0])?;
    let content: serde_json::Value = serde_json::from_slice(&raw.jparts[3])?;
    let content = match JupyterMessageContent::from_type_and_content(&header.msg_type, content) {
        Ok(content) => content,
        Err(error) => {
            // Rare: parse again (no clone on the hot path) and fill what is missing.
            let mut content: serde_json::Value = serde_json::from_slice(&raw.jparts[3])?;
            if !repair(&header.msg_type, &mut content) {
                return Err(RuntimeError::ParseError {
                    msg_type: header.msg_type,
                    source: error,
                });
            }
            JupyterMessageContent::from_type_and_content(&header.msg_type, content).map_err(
                |source| RuntimeError::ParseError {
                    msg_type: header.msg_type.clone(),
                    source,
                },
            )?
        }
    };
    Ok(JupyterMessage {
        zmq_identities: raw.zmq_identities,
        parent_header: serde_json::from_slice(&raw.jparts[1]).ok(),
        metadata: serde_json::from_slice(&raw.jparts[2])?,
        content,
        buffers: raw.jparts.get(4..).map(<[_]>::to_vec).unwrap_or_default(),
        channel: None,
        header,
    })
}

/// Adds the fields a known message type may lack; true when something was added.
fn repair(msg_type: &str, content: &mut serde_json::Value) -> bool {
    if msg_type != "kernel_info_reply" {
        return false;
    }
    let Some(object) = content.as_object_mut() else {
        return false;
    };
    let mut changed = false;
    if !object.contains_key("protocol_version") {
        object.insert("protocol_version".into(), "5.3".into());
        changed = true;
    }
    let info = object
        .entry("language_info")
        .or_insert_with(|| serde_json::json!({}));
    if let Some(info) = info.as_object_mut() {
        for key in ["name", "version"] {
            if !info.contains_key(key) {
                info.insert(key.into(), "".into());
                changed = true;
            }
        }
    }
    changed
}

#[cfg(test)]
mod lenient_tests {
    use super::*;

    #[test]
    fn a_kernel_info_reply_without_a_language_version_is_repaired() {
        let content = serde_json::json!({
            "status": "ok",
            "protocol_version": "5.0",
            "implementation": "bash_kernel",
            "language_info": {"name": "bash", "mimetype": "text/x-sh"},
        });
        let header = serde_json::json!({
            "msg_id": "1", "username": "u", "session": "s", "date": "2026-01-01T00:00:00Z",
            "msg_type": "kernel_info_reply", "version": "5.3",
        });
        let raw = RawMessage {
            zmq_identities: Vec::new(),
            jparts: vec![
                header.to_string().into_bytes().into(),
                b"{}".to_vec().into(),
                b"{}".to_vec().into(),
                content.to_string().into_bytes().into(),
            ],
        };
        let message = decode(raw).expect("repaired");
        let JupyterMessageContent::KernelInfoReply(reply) = message.content else {
            panic!("not a kernel_info_reply");
        };
        assert_eq!(reply.language_info.name, "bash");
        assert_eq!(reply.language_info.version, "");
        assert_eq!(reply.implementation, "bash_kernel");
    }

    #[test]
    fn other_malformed_messages_are_still_errors() {
        let header = serde_json::json!({
            "msg_id": "1", "username": "u", "session": "s", "date": "2026-01-01T00:00:00Z",
            "msg_type": "stream", "version": "5.3",
        });
        let raw = RawMessage {
            zmq_identities: Vec::new(),
            jparts: vec![
                header.to_string().into_bytes().into(),
                b"{}".to_vec().into(),
                b"{}".to_vec().into(),
                b"{\"nonsense\": 1}".to_vec().into(),
            ],
        };
        assert!(decode(raw).is_err());
    }
}
