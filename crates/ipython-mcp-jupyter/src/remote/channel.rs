//! One remote kernel's channels over a WebSocket: the same promises as the ZeroMQ [`Kernel`]
//! (route by parent `msg_id`, close every receiver once the kernel is gone), with the REST API
//! for what a WebSocket cannot do (interrupt, delete, restart).
//!
//! One task owns the socket. It writes what `request` queues and routes what arrives. When
//! the socket drops it reconnects with the same Jupyter session id (the server replays the
//! output it buffered meanwhile), so a call in flight survives a short outage; past the
//! bound, or when the server no longer knows the kernel (404), or says it died or restarted,
//! the kernel counts as exited.
//!
//! [`Kernel`]: crate::Kernel

use std::sync::Arc;
use std::time::Duration;

use async_tungstenite::tungstenite::client::IntoClientRequest as _;
use async_tungstenite::tungstenite::http::HeaderValue;
use async_tungstenite::tungstenite::Message;
use futures_util::StreamExt as _;
use jupyter_protocol::{JupyterMessage, JupyterMessageContent, KernelInfoReply, KernelInfoRequest};
use jupyter_websocket_client::binary_protocol::{
    deserialize_v1, serialize_v1, KERNEL_WEBSOCKET_PROTOCOL,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::Server;
use crate::error::Error;
use crate::launch::KernelExit;
use crate::route::{Channel, Routed, Router};

/// How long a dropped WebSocket may take to come back before the kernel counts as lost.
const RECONNECT_BOUND: Duration = Duration::from_secs(10);

pub(super) type Socket =
    async_tungstenite::WebSocketStream<async_tungstenite::tokio::ClientStream<QuickAck>>;

/// The kernel socket's TCP stream, acknowledging what arrives at once. Jupyter Server leaves
/// Nagle's algorithm on for its WebSockets, so each of the several small messages an execute
/// sends back waits for our ACK of the previous one, which the kernel delays by ~40 ms:
/// measured here as ~45 ms added to every execute. Linux's TCP_QUICKACK (re-armed after each
/// read, as the kernel clears it) removes the wait; elsewhere this is a plain stream.
pub struct QuickAck(tokio::net::TcpStream);

impl QuickAck {
    fn arm(&self) {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd as _;
            let on: libc::c_int = 1;
            // SAFETY: setsockopt on a socket we own, with a pointer to a live c_int and its
            // size; failure only leaves delayed ACKs on.
            unsafe {
                libc::setsockopt(
                    self.0.as_raw_fd(),
                    libc::IPPROTO_TCP,
                    libc::TCP_QUICKACK,
                    std::ptr::addr_of!(on).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
    }
}

impl tokio::io::AsyncRead for QuickAck {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let polled = std::pin::Pin::new(&mut self.0).poll_read(cx, buf);
        if polled.is_ready() {
            self.arm();
        }
        polled
    }
}

impl tokio::io::AsyncWrite for QuickAck {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// A message on its way to the socket.
struct Outgoing {
    channel: Channel,
    message: JupyterMessage,
}

/// A kernel on a Jupyter server, reached over its WebSocket.
pub struct RemoteKernel {
    server: Server,
    id: String,
    owned: bool,
    router: Arc<Router>,
    outgoing: mpsc::UnboundedSender<Outgoing>,
    exit: watch::Receiver<Option<KernelExit>>,
    exit_sender: Arc<watch::Sender<Option<KernelExit>>>,
    /// The socket's task (`run`). Ours alone: `detach` aborts it (its reconnect loop would
    /// otherwise run on for up to `RECONNECT_BOUND`), `kill` and `shutdown` then join it, and a
    /// drop aborts it.
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    session_id: String,
    info: Box<KernelInfoReply>,
    // Serializes liveness probes: one at a time is enough.
    heartbeat: tokio::sync::Mutex<()>,
    /// Set once we deleted it (a kernel we started): nothing more to clean up on the server.
    deleted: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for RemoteKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteKernel")
            .field("server", &self.server.url().as_str())
            .field("id", &self.id)
            .field("owned", &self.owned)
            .finish()
    }
}

/// Whether the socket speaks the v1 binary framing or JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Binary,
    Json,
}

pub(super) async fn connect(
    server: Server,
    id: String,
    owned: bool,
    startup_timeout: Duration,
) -> Result<RemoteKernel, Error> {
    let deadline = Instant::now() + startup_timeout;
    let session_id = uuid::Uuid::new_v4().to_string();
    let (socket, framing) = tokio::time::timeout_at(deadline, open(&server, &id, &session_id))
        .await
        .map_err(|_| Error::RemoteTimeout {
            what: format!("connecting to kernel {id}"),
            seconds: startup_timeout.as_secs_f64(),
        })??;
    let router = Arc::new(Router::default());
    let (outgoing, queue) = mpsc::unbounded_channel();
    let (exit_sender, exit) = watch::channel(None);
    let exit_sender = Arc::new(exit_sender);
    let task = tokio::spawn(run(
        server.clone(),
        id.clone(),
        session_id.clone(),
        socket,
        framing,
        queue,
        Arc::clone(&router),
        Arc::clone(&exit_sender),
    ));
    let mut kernel = RemoteKernel {
        server,
        id,
        owned,
        router,
        outgoing,
        exit,
        exit_sender,
        task: std::sync::Mutex::new(Some(task)),
        session_id,
        info: Box::new(empty_info()),
        heartbeat: tokio::sync::Mutex::new(()),
        deleted: std::sync::atomic::AtomicBool::new(false),
    };
    // Ready once it answers kernel_info (re-asked each second, as a kernel still starting on the
    // server may miss the first request).
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(Error::RemoteTimeout {
                what: format!("kernel {} to answer", kernel.id),
                seconds: startup_timeout.as_secs_f64(),
            });
        }
        match kernel
            .kernel_info(remaining.min(Duration::from_secs(1)))
            .await
        {
            Ok(Some(info)) => {
                kernel.info = Box::new(info);
                return Ok(kernel);
            }
            Ok(None) => {}
            Err(error) => return Err(error),
        }
    }
}

/// Opens the WebSocket, asking for the v1 binary framing (JSON when the server does not offer
/// it), with the token in the Authorization header.
async fn open(server: &Server, id: &str, session_id: &str) -> Result<(Socket, Framing), Error> {
    let url = server.websocket_url(id, session_id)?;
    let (socket, protocol) = open_url(
        server,
        &url,
        Some(KERNEL_WEBSOCKET_PROTOCOL),
        &format!("the WebSocket of kernel {id}"),
        &format!("kernel {id}"),
    )
    .await
    .map_err(|error| match error {
        Error::Remote { message, .. } => Error::WebSocket {
            kernel: id.to_owned(),
            message,
        },
        other => other,
    })?;
    let framing = match protocol.as_deref() {
        Some(KERNEL_WEBSOCKET_PROTOCOL) => Framing::Binary,
        _ => Framing::Json,
    };
    Ok((socket, framing))
}

/// Opens a WebSocket to `url` (a `ws`/`wss` URL under the server's base), offering
/// `subprotocol` if any, with the token in the Authorization header (never in the URL), over
/// the server's rustls configuration, bounded by its timeout. Returns the socket and the
/// subprotocol the server chose. `what` names the connection in a timeout, `missing` what a
/// 404 means; other failures are [`Error::Remote`].
pub(super) async fn open_url(
    server: &Server,
    url: &url::Url,
    subprotocol: Option<&'static str>,
    what: &str,
    missing: &str,
) -> Result<(Socket, Option<String>), Error> {
    let failed = |message: String| Error::Remote {
        url: server.url().to_string(),
        message,
    };
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|error| failed(error.to_string()))?;
    let headers = request.headers_mut();
    if let Some(subprotocol) = subprotocol {
        headers.insert(
            "Sec-WebSocket-Protocol",
            HeaderValue::from_static(subprotocol),
        );
    }
    if let Some(token) = &server.inner.token {
        let value = HeaderValue::from_str(&format!("token {token}"))
            .map_err(|_| failed("the token cannot go in a header".to_owned()))?;
        headers.insert("Authorization", value);
    }
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(&server.inner.tls));
    let host = match url.host() {
        Some(url::Host::Domain(name)) => name.to_owned(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        None => return Err(failed("the URL has no host".to_owned())),
    };
    let port = url.port_or_known_default().unwrap_or(80);
    let connecting = async {
        let socket = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(async_tungstenite::tungstenite::Error::Io)?;
        // Each message is written as soon as it is ready: with Nagle's algorithm a small
        // request waits for the peer's delayed ACK, about 40 ms per execute.
        socket
            .set_nodelay(true)
            .map_err(async_tungstenite::tungstenite::Error::Io)?;
        let socket = QuickAck(socket);
        socket.arm();
        async_tungstenite::tokio::client_async_tls_with_connector(request, socket, Some(connector))
            .await
    };
    let (socket, response) = tokio::time::timeout(server.inner.timeout, connecting)
        .await
        .map_err(|_| Error::RemoteTimeout {
            what: what.to_owned(),
            seconds: server.inner.timeout.as_secs_f64(),
        })?
        .map_err(|error| {
            use async_tungstenite::tungstenite::Error as WsError;
            match error {
                WsError::Http(response) => match response.status().as_u16() {
                    401 | 403 => Error::Refused {
                        url: server.url().to_string(),
                        status: response.status().as_u16(),
                    },
                    404 => Error::RemoteNotFound {
                        what: missing.to_owned(),
                    },
                    status => failed(format!("the server answered {status}")),
                },
                other => failed(other.to_string()),
            }
        })?;
    let protocol = response
        .headers()
        .get("Sec-WebSocket-Protocol")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    Ok((socket, protocol))
}

/// The socket's owner: writes queued messages, routes incoming ones, reconnects after a drop,
/// and marks the kernel exited when it is gone.
#[allow(clippy::too_many_arguments)]
async fn run(
    server: Server,
    id: String,
    session_id: String,
    mut socket: Socket,
    mut framing: Framing,
    mut queue: mpsc::UnboundedReceiver<Outgoing>,
    router: Arc<Router>,
    exit: Arc<watch::Sender<Option<KernelExit>>>,
) {
    let ended = loop {
        // Serve this socket until it drops (or the kernel is reported gone).
        let dropped = loop {
            tokio::select! {
                incoming = socket.next() => match incoming {
                    Some(Ok(Message::Text(text))) => {
                        if let Some(gone) = deliver_json(&router, text.as_str()) { break Err(gone); }
                    }
                    Some(Ok(Message::Binary(data))) => {
                        if let Some(gone) = deliver_binary(&router, &data) { break Err(gone); }
                    }
                    Some(Ok(Message::Close(_))) | None => break Ok("the WebSocket closed".to_owned()),
                    Some(Ok(_)) => {}
                    Some(Err(error)) => break Ok(format!("the WebSocket failed: {error}")),
                },
                outgoing = queue.recv() => match outgoing {
                    Some(outgoing) => {
                        if let Err(error) = send(&mut socket, framing, outgoing).await {
                            break Ok(format!("sending failed: {error}"));
                        }
                    }
                    // The RemoteKernel was dropped (its drop aborts this task, so this is only
                    // a fallback): close politely and stop.
                    None => {
                        let _ = tokio::time::timeout(Duration::from_secs(1), socket.close(None)).await;
                        return;
                    }
                },
            }
        };
        let reason = match dropped {
            Err(gone) => break gone,
            Ok(reason) => reason,
        };
        tracing::debug!(kernel = %id, %reason, "kernel WebSocket dropped; reconnecting");
        // Queued messages wait in the channel meanwhile; the server replays what the kernel
        // sent while we were away (same session id).
        match reconnect(&server, &id, &session_id).await {
            Ok((fresh, fresh_framing)) => {
                socket = fresh;
                framing = fresh_framing;
            }
            Err(gone) => break gone,
        }
    };
    tracing::debug!(kernel = %id, reason = %ended, "remote kernel gone");
    exit.send_replace(Some(KernelExit::Unknown(ended)));
    router.close_all();
}

/// Tries to reopen the socket within [`RECONNECT_BOUND`]; `Err` says why the kernel is gone.
async fn reconnect(
    server: &Server,
    id: &str,
    session_id: &str,
) -> Result<(Socket, Framing), String> {
    let deadline = Instant::now() + RECONNECT_BOUND;
    let mut pause = Duration::from_millis(50);
    loop {
        // Still there? A kernel deleted or culled on the server is gone for good.
        match tokio::time::timeout_at(deadline, server.kernel(id)).await {
            Ok(Err(Error::RemoteNotFound { .. })) => {
                return Err("the Jupyter server no longer has this kernel".to_owned())
            }
            Ok(Ok(info)) if info.execution_state.as_deref() == Some("dead") => {
                return Err("the Jupyter server reports the kernel dead".to_owned())
            }
            _ => {}
        }
        if let Ok(Ok(opened)) =
            tokio::time::timeout_at(deadline, open(server, id, session_id)).await
        {
            return Ok(opened);
        }
        if Instant::now() + pause >= deadline {
            return Err(format!(
                "the WebSocket dropped and did not come back within {}s",
                RECONNECT_BOUND.as_secs()
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

async fn send(socket: &mut Socket, framing: Framing, outgoing: Outgoing) -> Result<(), String> {
    let Outgoing {
        channel,
        mut message,
    } = outgoing;
    let frame = match framing {
        Framing::Binary => Message::Binary(
            serialize_v1(&message, channel.name())
                .map_err(|error| error.to_string())?
                .into(),
        ),
        Framing::Json => {
            message.channel = Some(match channel {
                Channel::Control => jupyter_protocol::Channel::Control,
                Channel::Stdin => jupyter_protocol::Channel::Stdin,
                _ => jupyter_protocol::Channel::Shell,
            });
            Message::Text(
                serde_json::to_string(&message)
                    .map_err(|error| error.to_string())?
                    .into(),
            )
        }
    };
    socket.send(frame).await.map_err(|error| error.to_string())
}

fn channel_named(name: &str) -> Option<Channel> {
    match name {
        "shell" => Some(Channel::Shell),
        "control" => Some(Channel::Control),
        "iopub" => Some(Channel::IoPub),
        "stdin" => Some(Channel::Stdin),
        _ => None,
    }
}

fn deliver_binary(router: &Router, data: &[u8]) -> Option<String> {
    match deserialize_v1(data) {
        Ok((channel, message)) => deliver(router, channel_named(&channel)?, message),
        Err(error) => {
            tracing::warn!(%error, "kernel message skipped");
            None
        }
    }
}

fn deliver_json(router: &Router, text: &str) -> Option<String> {
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(error) => {
            tracing::warn!(%error, "kernel message skipped");
            return None;
        }
    };
    let channel = channel_named(value.get("channel")?.as_str()?)?;
    match JupyterMessage::from_value(value) {
        Ok(message) => deliver(router, channel, message),
        Err(error) => {
            tracing::warn!(%error, "kernel message skipped");
            None
        }
    }
}

/// Routes one message; `Some(reason)` when it says the kernel process is gone. The server
/// announces a kernel that died (and was restarted, empty) or could not be restarted with an
/// unparented iopub status: the namespace our session knew is gone either way.
fn deliver(router: &Router, channel: Channel, message: JupyterMessage) -> Option<String> {
    if let JupyterMessageContent::Status(status) = &message.content {
        let state = serde_json::to_value(&status.execution_state).unwrap_or_default();
        if let Some(state @ ("restarting" | "dead" | "autorestarting")) = state.as_str() {
            return Some(format!("the Jupyter server reports the kernel {state}"));
        }
    }
    router.deliver(channel, message);
    None
}

fn empty_info() -> KernelInfoReply {
    serde_json::from_value(serde_json::json!({
        "status": "ok",
        "protocol_version": "5.3",
        "implementation": "",
        "implementation_version": "",
        "language_info": {"name": "", "version": ""},
        "banner": "",
        "help_links": [],
    }))
    .expect("a complete kernel_info_reply")
}

impl RemoteKernel {
    /// The kernel's id on the server.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The server it runs on.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// Whether we started it (killing deletes it) or attached to it.
    pub fn owned(&self) -> bool {
        self.owned
    }

    /// The kernel's `kernel_info_reply`.
    pub fn info(&self) -> &KernelInfoReply {
        &self.info
    }

    /// Becomes `Some` once the kernel is gone (deleted, dead, or unreachable past the bound).
    pub fn exit_watch(&self) -> watch::Receiver<Option<KernelExit>> {
        self.exit.clone()
    }

    /// Registers interest in everything parented by `message`, then sends it.
    pub async fn request(
        &self,
        channel: Channel,
        message: JupyterMessage,
    ) -> Result<(String, mpsc::UnboundedReceiver<Routed>), Error> {
        if let Some(exit) = self.exit.borrow().clone() {
            return Err(Error::Exited {
                exit: exit.to_string(),
            });
        }
        let mut message = crate::kernel::prepare(message);
        message.header.session = self.session_id.clone();
        let msg_id = message.header.msg_id.clone();
        let receiver = self.router.register(&msg_id);
        if channel == Channel::IoPub || self.outgoing.send(Outgoing { channel, message }).is_err() {
            self.router.forget(&msg_id);
            return Err(Error::Send {
                channel: channel.name(),
                message: "the kernel's WebSocket is closed".to_owned(),
            });
        }
        Ok((msg_id, receiver))
    }

    /// Stops routing messages of `msg_id`.
    pub fn forget(&self, msg_id: &str) {
        self.router.forget(msg_id);
    }

    /// Interrupts through the server's REST API (bounded); the server signals or messages the
    /// kernel as its spec says.
    pub async fn interrupt(&self) {
        if let Err(error) = self.server.interrupt_kernel(&self.id).await {
            tracing::warn!(kernel = %self.id, %error, "remote interrupt failed");
        }
    }

    /// Asks the server about the kernel: `false` if it did not answer within `timeout`. One it
    /// deleted (culled, or shut down from JupyterLab) or reports dead is gone at once, since
    /// the server does not always close the socket of a kernel it deleted. The server, not a
    /// message to the kernel: a kernel_info round trip would count as activity and keep the
    /// server's idle culler from ever reclaiming a kernel we merely hold.
    pub async fn heartbeat(&self, timeout: Duration) -> bool {
        let Ok(_probe) = self.heartbeat.try_lock() else {
            return false;
        };
        match tokio::time::timeout(timeout, self.server.kernel(&self.id)).await {
            Ok(Ok(info)) if info.execution_state.as_deref() == Some("dead") => {
                self.detach("the Jupyter server reports the kernel dead");
                false
            }
            Ok(Ok(_)) => true,
            Ok(Err(Error::RemoteNotFound { .. })) => {
                self.detach("the Jupyter server no longer has this kernel");
                false
            }
            _ => false,
        }
    }

    async fn kernel_info(&self, timeout: Duration) -> Result<Option<KernelInfoReply>, Error> {
        let request = JupyterMessage::new(KernelInfoRequest {}, None);
        let (msg_id, mut receiver) = self.request(Channel::Shell, request).await?;
        let waited = tokio::time::timeout(timeout, async {
            while let Some(routed) = receiver.recv().await {
                if let JupyterMessageContent::KernelInfoReply(info) = routed.message.content {
                    return Some(*info);
                }
            }
            None
        })
        .await;
        self.forget(&msg_id);
        match waited {
            Ok(Some(info)) => Ok(Some(info)),
            Ok(None) => Err(Error::Exited {
                exit: self
                    .exit
                    .borrow()
                    .as_ref()
                    .map_or("gone".to_owned(), ToString::to_string),
            }),
            Err(_) => Ok(None),
        }
    }

    /// Ends the kernel: a kernel we started is deleted on the server (even once it counts as
    /// gone for us: the server may have restarted it empty after its process died, and it
    /// must not stay behind); one we attached to is restarted in place while it still runs
    /// (its process ends and a fresh one takes the same id: the only way to stop code that
    /// ignores interrupts without taking the kernel from its owner). Bounded.
    pub async fn kill(&self) {
        if self.owned {
            self.delete().await;
        } else if self.exit.borrow().is_none() {
            if let Err(error) = self
                .server
                .restart_kernel(&self.id, self.server.inner.timeout)
                .await
            {
                tracing::warn!(kernel = %self.id, %error, "remote restart failed");
            }
        }
        self.detach("killed");
        self.join().await;
    }

    /// A kernel we started is deleted (the server shuts it down and kills it); from one we
    /// attached to we only detach, leaving it running for its owner.
    pub async fn shutdown(&self, _grace: Duration) {
        if self.owned {
            self.delete().await;
        }
        self.detach(if self.owned { "shut down" } else { "detached" });
        self.join().await;
    }

    /// Waits for the socket's task, aborted by `detach`: it ends at its next await.
    async fn join(&self) {
        let task = self.lock_task().take();
        let deadline = Instant::now() + Duration::from_secs(1);
        crate::task::join("remote kernel socket", task.into_iter().collect(), deadline).await;
    }

    fn lock_task(&self) -> std::sync::MutexGuard<'_, Option<tokio::task::JoinHandle<()>>> {
        self.task
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Deletes our kernel on the server, once.
    async fn delete(&self) {
        if self.deleted.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        // A kernel the server is restarting (its process died) refuses deletion with a 500
        // until the restart is over: retried, within the server's call bound.
        let deadline = Instant::now() + self.server.inner.timeout;
        loop {
            match self.server.delete_kernel(&self.id).await {
                Err(Error::RemoteStatus { status: 500.., .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => {
                    tracing::warn!(kernel = %self.id, %error, "remote delete failed");
                    return;
                }
                Ok(()) => return,
            }
        }
    }

    /// Closes our connection and marks the kernel gone for us (keeping the first reason).
    fn detach(&self, why: &str) {
        if let Some(task) = self.lock_task().as_ref() {
            task.abort();
        }
        self.exit_sender.send_if_modified(|exit| {
            if exit.is_none() {
                *exit = Some(KernelExit::Unknown(why.to_owned()));
                true
            } else {
                false
            }
        });
        self.router.close_all();
    }
}

impl Drop for RemoteKernel {
    fn drop(&mut self) {
        if let Some(task) = self.lock_task().as_ref() {
            task.abort();
        }
        // A kernel we started and never shut down is deleted, so it cannot outlive us on the
        // server. That request is the one task left to run on its own: a drop cannot wait.
        if self.owned && !self.deleted.load(std::sync::atomic::Ordering::Acquire) {
            let server = self.server.clone();
            let id = self.id.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = server.delete_kernel(&id).await;
                });
            }
        }
    }
}
