//! Routing of incoming messages to the request that caused them, by `parent_header.msg_id`.
//!
//! One reader task per receiving socket (iopub, shell, control) forwards each message to the
//! channel registered for its parent. Messages nobody waits for (late output after a request
//! was forgotten, start-up noise) are dropped here, so an abandoned request costs nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jupyter_protocol::{JupyterMessage, JupyterMessageContent};
use jupyter_zmq_client::{Connection, RuntimeError};
use tokio::sync::{mpsc, watch};

pub(crate) type SendHalf = jupyter_zmq_client::DealerSendConnection;

/// The channel a message travelled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Shell,
    Control,
    IoPub,
}

impl Channel {
    pub fn name(self) -> &'static str {
        match self {
            Channel::Shell => "shell",
            Channel::Control => "control",
            Channel::IoPub => "iopub",
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

    fn deliver(&self, channel: Channel, message: JupyterMessage) {
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
        match connection.read().await {
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
