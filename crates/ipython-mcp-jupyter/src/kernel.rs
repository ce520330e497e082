//! A Jupyter-protocol kernel client: launch a kernel process, connect its five channels, route
//! replies and iopub messages to the request that caused them, interrupt, shut down, and notice
//! when the process dies.
//!
//! This crate knows nothing of MCP, queues or sessions. It is built on the runtimed crates
//! (`jupyter-zmq-client` for sockets and signing, `jupyter-protocol` for message types) and adds
//! what they leave to the caller: the launcher, the connect-with-retry loop, the router and the
//! child watch.
//!
//! Invariants:
//! - The connection file is private (0600) inside a private (0700) directory that also holds
//!   the IPC socket files; the directory is removed when the [`Kernel`] is dropped.
//! - The kernel runs in its own process group, dies with the server even when the server is
//!   SIGKILLed (Linux's parent-death signal; elsewhere, or after [`use_pipe_death_watch`], a
//!   watcher that kills the group when a pipe from the server closes), and never inherits our
//!   stdio (stdout is the MCP stream).
//! - Every shutdown is a `shutdown_request`, a bounded wait, then a kill of the process group.
//! - A request's receiver yields messages until the kernel exits; after that it is closed, so
//!   no caller waits on a dead kernel.

pub mod kernelspec;
mod launch;
pub mod remote;
mod route;

pub use jupyter_protocol as protocol;
pub use launch::{
    runs_ipykernel, use_pipe_death_watch, InterruptMode, KernelExit, LaunchSpec, IPYKERNEL_OPTIONS,
};
pub use route::{Channel, Routed};

use std::sync::Arc;
use std::time::Duration;

use jupyter_protocol::{JupyterMessage, KernelInfoReply};
use tokio::sync::{mpsc, watch, Mutex};

/// Failures of the kernel client itself (never of user code).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("could not prepare the kernel's private run directory: {message}")]
    RunDir { message: String },
    #[error("could not start the kernel process {program}: {message}")]
    Spawn { program: String, message: String },
    #[error("kernel exited during start-up ({exit}){stderr}")]
    ExitedDuringStartup { exit: String, stderr: String },
    #[error("kernel did not become ready within {seconds:.1}s{stderr}")]
    StartupTimeout { seconds: f64, stderr: String },
    #[error("kernel has exited ({exit})")]
    Exited { exit: String },
    #[error("could not send to the kernel on {channel}: {message}")]
    Send {
        channel: &'static str,
        message: String,
    },
    #[error("cannot reach the Jupyter server at {url}: {message}")]
    Unreachable { url: String, message: String },
    #[error("the Jupyter server at {url} refused the request (HTTP {status}): check its token")]
    Refused { url: String, status: u16 },
    #[error("the Jupyter server has no {what}")]
    RemoteNotFound { what: String },
    #[error("the Jupyter server answered HTTP {status} to {what}: {message}")]
    RemoteStatus {
        what: String,
        status: u16,
        message: String,
    },
    #[error("the Jupyter server did not finish {what} within {seconds:.1}s")]
    RemoteTimeout { what: String, seconds: f64 },
    #[error("the Jupyter server at {url}: {message}")]
    Remote { url: String, message: String },
    #[error("the WebSocket of remote kernel {kernel} failed: {message}")]
    WebSocket { kernel: String, message: String },
}

impl Error {
    /// Whether the Jupyter server refused the request (HTTP 401 or 403).
    pub fn is_refused(&self) -> bool {
        matches!(self, Error::Refused { .. })
    }
}

/// A running kernel and its connections.
///
/// Sending takes `&self` (each channel's send half sits behind its own lock) so a session can
/// send a control-channel message while a shell request is in flight.
pub struct Kernel {
    inner: Arc<launch::Process>,
    router: Arc<route::Router>,
    shell: Mutex<route::SendHalf>,
    control: Mutex<route::SendHalf>,
    // `None` after a failed ping: a REQ socket whose request timed out cannot send again, so
    // the next ping connects a fresh one.
    heartbeat: Mutex<Option<jupyter_zmq_client::ClientHeartbeatConnection>>,
    connection: jupyter_protocol::ConnectionInfo,
    readers: Vec<tokio::task::AbortHandle>,
    interrupt_mode: InterruptMode,
    session_id: String,
    info: Option<Box<KernelInfoReply>>,
}

impl std::fmt::Debug for Kernel {
    // The HMAC key never appears in logs: only the pid and session id are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("pid", &self.inner.pid)
            .field("session", &self.session_id)
            .finish()
    }
}

impl Kernel {
    /// Starts a kernel and waits until it answers `kernel_info_request` and iopub is subscribed.
    pub async fn launch(spec: &LaunchSpec, startup_timeout: Duration) -> Result<Kernel, Error> {
        launch::launch(spec, startup_timeout).await
    }

    /// The process id of the kernel (also its process group id).
    pub fn pid(&self) -> u32 {
        self.inner.pid
    }

    /// The private directory holding the connection file and IPC sockets (removed on drop).
    pub fn run_dir(&self) -> &std::path::Path {
        self.inner
            .run_dir
            .as_ref()
            .expect("the run directory lives as long as its process")
            .path()
    }

    /// The kernel's `kernel_info_reply`.
    pub fn info(&self) -> &KernelInfoReply {
        self.info
            .as_deref()
            .expect("set by launch before the kernel is returned")
    }

    /// Watches the kernel process; the value becomes `Some` once it has exited.
    pub fn exit_watch(&self) -> watch::Receiver<Option<KernelExit>> {
        self.inner.exit.clone()
    }

    /// Registers interest in everything parented by `message`, then sends it.
    ///
    /// The receiver yields the reply (shell/control) and every iopub message whose parent is
    /// this request, in arrival order per channel. It closes when the kernel exits or the
    /// caller calls [`Kernel::forget`].
    pub async fn request(
        &self,
        channel: Channel,
        message: JupyterMessage,
    ) -> Result<(String, mpsc::UnboundedReceiver<Routed>), Error> {
        let msg_id = message.header.msg_id.clone();
        let receiver = self.router.register(&msg_id);
        if let Err(error) = self.send(channel, message).await {
            self.router.forget(&msg_id);
            return Err(error);
        }
        Ok((msg_id, receiver))
    }

    /// Sends without registering a route (for fire-and-forget messages).
    pub async fn send(&self, channel: Channel, message: JupyterMessage) -> Result<(), Error> {
        if let Some(exit) = self.inner.exit.borrow().clone() {
            return Err(Error::Exited {
                exit: exit.to_string(),
            });
        }
        let message = prepare(message);
        let half = match channel {
            Channel::Shell => &self.shell,
            Channel::Control => &self.control,
            Channel::IoPub => {
                return Err(Error::Send {
                    channel: "iopub",
                    message: "iopub is receive-only".into(),
                })
            }
        };
        half.lock()
            .await
            .send(message)
            .await
            .map_err(|error| Error::Send {
                channel: channel.name(),
                message: error.to_string(),
            })
    }

    /// Stops routing messages of `msg_id` (late ones are dropped).
    pub fn forget(&self, msg_id: &str) {
        self.router.forget(msg_id);
    }

    /// Interrupts what the kernel is running: SIGINT, or an `interrupt_request` on control for
    /// kernels whose spec says `interrupt_mode: message` (bounded; a kernel that cannot take
    /// the request is handled by the caller's grace period).
    pub async fn interrupt(&self) {
        match self.interrupt_mode {
            InterruptMode::Signal => self.inner.signal(libc::SIGINT),
            InterruptMode::Message => {
                let request = JupyterMessage::new(jupyter_protocol::InterruptRequest {}, None);
                let _ = tokio::time::timeout(
                    Duration::from_secs(1),
                    self.send(Channel::Control, request),
                )
                .await;
            }
        }
    }

    /// One heartbeat round trip; `false` if the kernel did not answer in time.
    pub async fn heartbeat(&self, timeout: Duration) -> bool {
        let Ok(mut slot) = self.heartbeat.try_lock() else {
            return false;
        };
        // A fresh socket may not have finished its handshake when the first ping goes out
        // ("not connected to peers"), so errors are retried until the timeout.
        let ping = async {
            loop {
                if slot.is_none() {
                    *slot =
                        jupyter_zmq_client::create_client_heartbeat_connection(&self.connection)
                            .await
                            .ok();
                }
                if let Some(socket) = slot.as_mut() {
                    if socket.single_heartbeat().await.is_ok() {
                        return;
                    }
                    *slot = None;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let answered = tokio::time::timeout(timeout, ping).await.is_ok();
        if !answered {
            *slot = None;
        }
        answered
    }

    /// Asks the kernel to shut down, waits up to `grace`, then kills its process group.
    ///
    /// Always ends with the process reaped: ipykernel can hang after `shutdown_reply`,
    /// so the kill is not optional.
    pub async fn shutdown(&self, grace: Duration) {
        let mut exit = self.exit_watch();
        if exit.borrow().is_none() {
            let request =
                JupyterMessage::new(jupyter_protocol::ShutdownRequest { restart: false }, None);
            let sent = tokio::time::timeout(grace, self.send(Channel::Control, request)).await;
            if matches!(sent, Ok(Ok(()))) {
                let _ = tokio::time::timeout(grace, exit.wait_for(Option::is_some)).await;
            }
        }
        self.kill().await;
    }

    /// Kills the process group with SIGKILL and waits until the process is reaped.
    pub async fn kill(&self) {
        self.inner.kill_group();
        let mut exit = self.exit_watch();
        let _ = tokio::time::timeout(Duration::from_secs(5), exit.wait_for(Option::is_some)).await;
    }

    /// The kernel's most recent stderr lines (bounded), for error messages.
    pub fn stderr_tail(&self) -> String {
        self.inner.stderr_tail()
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // Backstop: a kernel must never outlive its handle, nor its reader tasks.
        self.inner.kill_group();
        for reader in &self.readers {
            reader.abort();
        }
    }
}

/// Stamps our identity on an outgoing message.
pub(crate) fn prepare(mut message: JupyterMessage) -> JupyterMessage {
    message.header.username = "ipython-mcp".to_owned();
    message.header.version = "5.4".to_owned();
    message
}
