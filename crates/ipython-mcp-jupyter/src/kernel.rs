//! A running kernel over ZeroMQ: connecting to a spawned kernel process, the start-up
//! handshake, requests and their routes, interrupt, heartbeat and shutdown.

use std::sync::Arc;
use std::time::Duration;

use jupyter_protocol::{
    ConnectionInfo, JupyterMessage, JupyterMessageContent, KernelInfoReply, KernelInfoRequest,
};
use jupyter_zmq_client as jzc;
use tokio::sync::{mpsc, watch, Mutex};
use tokio::time::Instant;

use crate::error::Error;
use crate::launch::{self, InterruptMode, KernelExit, LaunchSpec, Process};
use crate::route::{self, Channel, Routed, Router};

/// A running kernel and its connections.
///
/// Sending takes `&self` (each channel's send half sits behind its own lock) so a session can
/// send a control-channel message while a shell request is in flight.
pub struct Kernel {
    inner: Arc<launch::Process>,
    router: Arc<route::Router>,
    shell: Mutex<route::SendHalf>,
    control: Mutex<route::SendHalf>,
    stdin: Mutex<route::SendHalf>,
    // `None` after a failed ping: a REQ socket whose request timed out cannot send again, so
    // the next ping connects a fresh one.
    heartbeat: Mutex<Option<jupyter_zmq_client::ClientHeartbeatConnection>>,
    connection: jupyter_protocol::ConnectionInfo,
    /// One per socket. A dead kernel's sockets never report an error, so the readers never end
    /// by themselves: `kill` aborts and joins them, a drop aborts them.
    readers: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
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
        let started = Instant::now();
        let deadline = started + startup_timeout;
        let (process, connection, router) = launch::spawn(spec).await?;
        let pid = process.pid;
        let connected = connect_and_handshake(
            spec,
            &connection,
            &process,
            Arc::clone(&router),
            deadline,
            startup_timeout,
        )
        .await;
        match connected {
            Ok(kernel) => {
                process.find_namespaced_kernel();
                tracing::debug!(
                    pid,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "kernel ready"
                );
                Ok(kernel)
            }
            Err(error) => {
                process.kill_group();
                Err(error)
            }
        }
    }

    /// The process id of the kernel: the process signals reach (in namespaces, the kernel
    /// itself, not its launcher).
    pub fn pid(&self) -> u32 {
        self.inner
            .kernel_pid
            .get()
            .copied()
            .unwrap_or(self.inner.pid)
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

    /// The kernel tree's memory meter (current, peak, limit).
    /// What the kernel's sandbox enforces; `None`: it runs without one.
    pub fn sandbox(&self) -> Option<&ipython_mcp_sandbox::Report> {
        self.inner
            .sandbox
            .as_deref()
            .map(ipython_mcp_sandbox::Prepared::report)
    }

    pub fn memory(&self) -> Arc<crate::memory::Meter> {
        Arc::clone(&self.inner.meter)
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
            Channel::Stdin => &self.stdin,
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

    /// Kills the process group with SIGKILL and waits until the process is reaped and the
    /// kernel's tasks have ended (all within one bound).
    pub async fn kill(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        self.inner.kill_group();
        let mut exit = self.exit_watch();
        let _ = tokio::time::timeout_at(deadline, exit.wait_for(Option::is_some)).await;
        let readers = std::mem::take(
            &mut *self
                .readers
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for reader in &readers {
            reader.abort();
        }
        crate::task::join("kernel readers", readers, deadline).await;
        self.inner.join(deadline).await;
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
        let readers = self
            .readers
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for reader in readers.iter() {
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

/// The five client sockets of one kernel, connected.
struct Sockets {
    iopub: jzc::ClientIoPubConnection,
    shell: jzc::ClientShellConnection,
    control: jzc::ClientControlConnection,
    stdin: jzc::ClientStdinConnection,
    heartbeat: jzc::ClientHeartbeatConnection,
}

/// Connects to the started kernel process and waits until it is ready (see [`Kernel::launch`]).
async fn connect_and_handshake(
    spec: &LaunchSpec,
    connection: &ConnectionInfo,
    process: &Arc<Process>,
    router: Arc<Router>,
    deadline: Instant,
    startup_timeout: Duration,
) -> Result<Kernel, Error> {
    let session_id = uuid::Uuid::new_v4().to_string();
    let sockets =
        connect_sockets(connection, process, &session_id, deadline, startup_timeout).await?;
    let welcome = router.welcome();
    let kernel = assemble(spec, connection, process, router, session_id, sockets);
    wait_until_ready(kernel, welcome, process, deadline, startup_timeout).await
}

/// Connects the iopub, shell, control and heartbeat sockets at once, until `deadline` or the
/// kernel's exit, whichever comes first.
async fn connect_sockets(
    connection: &ConnectionInfo,
    process: &Process,
    session_id: &str,
    deadline: Instant,
    startup_timeout: Duration,
) -> Result<Sockets, Error> {
    let identity = jzc::peer_identity_for_session(session_id).map_err(|error| Error::Send {
        channel: "shell",
        message: error.to_string(),
    })?;
    let startup_error = |process: &Process| startup_failure(process, startup_timeout);

    // Each attempt builds a fresh socket and is capped at 25 ms: zeromq's own backoff starts at
    // 50 ms and doubles, which alone added ~120 ms to a cold start.
    // Stdin shares the shell socket's identity: the kernel routes an `input_request` to the
    // client whose shell request is running.
    let (iopub, shell, control, stdin, heartbeat) = tokio::select! {
        sockets = async {
            tokio::join!(
                retry(deadline, || jzc::create_client_iopub_connection(connection, "", session_id)),
                retry(deadline, || jzc::create_client_shell_connection_with_identity(connection, session_id, identity.clone())),
                retry(deadline, || jzc::create_client_control_connection(connection, session_id)),
                retry(deadline, || jzc::create_client_stdin_connection_with_identity(connection, session_id, identity.clone())),
                retry(deadline, || jzc::create_client_heartbeat_connection(connection)),
            )
        } => sockets,
        _ = exited(process) => return Err(startup_error(process)),
    };
    let (Some(iopub), Some(shell), Some(control), Some(stdin), Some(heartbeat)) =
        (iopub, shell, control, stdin, heartbeat)
    else {
        return Err(startup_error(process));
    };
    Ok(Sockets {
        iopub,
        shell,
        control,
        stdin,
        heartbeat,
    })
}

/// The kernel over connected sockets, with a reader task per receiving socket routing what
/// arrives; its `info` is still unset.
fn assemble(
    spec: &LaunchSpec,
    connection: &ConnectionInfo,
    process: &Arc<Process>,
    router: Arc<Router>,
    session_id: String,
    sockets: Sockets,
) -> Kernel {
    let Sockets {
        iopub,
        shell,
        control,
        stdin,
        heartbeat,
    } = sockets;
    // Owned by the Kernel (see `Kernel::readers`): a failed handshake drops it, which aborts them.
    let (shell_send, shell_recv) = shell.split();
    let (control_send, control_recv) = control.split();
    let (stdin_send, stdin_recv) = stdin.split();
    let readers = vec![
        tokio::spawn(route::read_loop(Arc::clone(&router), Channel::IoPub, iopub)),
        tokio::spawn(route::read_loop(
            Arc::clone(&router),
            Channel::Shell,
            shell_recv,
        )),
        tokio::spawn(route::read_loop(
            Arc::clone(&router),
            Channel::Control,
            control_recv,
        )),
        tokio::spawn(route::read_loop(
            Arc::clone(&router),
            Channel::Stdin,
            stdin_recv,
        )),
    ];

    Kernel {
        inner: Arc::clone(process),
        router,
        shell: tokio::sync::Mutex::new(shell_send),
        control: tokio::sync::Mutex::new(control_send),
        stdin: tokio::sync::Mutex::new(stdin_send),
        heartbeat: tokio::sync::Mutex::new(Some(heartbeat)),
        interrupt_mode: spec.interrupt_mode,
        connection: connection.clone(),
        readers: std::sync::Mutex::new(readers),
        session_id,
        info: None,
    }
}

/// Asks for `kernel_info` until the kernel is ready, and returns it with its info set.
///
/// Ready means: kernel_info_reply on shell, and proof that our iopub subscription is live
/// (JEP 65 welcome, or iopub status parented by our request). Requests are re-sent like
/// jupyter_client does, since a kernel that is still starting may miss the first one.
async fn wait_until_ready(
    mut kernel: Kernel,
    mut welcome: watch::Receiver<bool>,
    process: &Process,
    deadline: Instant,
    startup_timeout: Duration,
) -> Result<Kernel, Error> {
    let startup_error = |process: &Process| startup_failure(process, startup_timeout);
    loop {
        let request = JupyterMessage::new(KernelInfoRequest {}, None);
        let (msg_id, mut receiver) = kernel.request(Channel::Shell, request).await?;
        let attempt_end = (Instant::now() + Duration::from_secs(1)).min(deadline);
        let mut reply = None;
        let mut iopub_live = *welcome.borrow();
        loop {
            if reply.is_some() && iopub_live {
                break;
            }
            tokio::select! {
                routed = receiver.recv() => match routed {
                    Some(routed) => match routed.message.content {
                        JupyterMessageContent::KernelInfoReply(info) => reply = Some(info),
                        JupyterMessageContent::Status(_) if routed.channel == Channel::IoPub => iopub_live = true,
                        _ => {}
                    },
                    None => {
                        kernel.forget(&msg_id);
                        return Err(startup_error(process));
                    }
                },
                _ = welcome.changed() => iopub_live = iopub_live || *welcome.borrow(),
                _ = tokio::time::sleep_until(attempt_end) => break,
            }
        }
        kernel.forget(&msg_id);
        if let (Some(info), true) = (reply.take(), iopub_live) {
            kernel.info = Some(info);
            return Ok(kernel);
        }
        if Instant::now() >= deadline {
            return Err(startup_error(process));
        }
    }
}

/// The error for a start-up that did not finish: the process exited, or time ran out.
fn startup_failure(process: &Process, startup_timeout: Duration) -> Error {
    let stderr = process.stderr_tail();
    let stderr = if stderr.is_empty() {
        String::new()
    } else {
        format!("; kernel stderr: {}", last_chars(&stderr, 1500))
    };
    match process.exit.borrow().clone() {
        Some(exit) => Error::ExitedDuringStartup {
            exit: exit.to_string(),
            stderr,
        },
        None => Error::StartupTimeout {
            seconds: startup_timeout.as_secs_f64(),
            stderr,
        },
    }
}

fn last_chars(text: &str, max: usize) -> &str {
    let count = text.chars().count();
    if count <= max {
        return text;
    }
    let skip = text
        .char_indices()
        .nth(count - max)
        .map_or(0, |(index, _)| index);
    &text[skip..]
}

async fn exited(process: &Process) {
    let mut exit = process.exit.clone();
    let _ = exit.wait_for(Option::is_some).await;
}

async fn retry<T, F, Fut>(deadline: Instant, mut connect: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = jzc::Result<T>>,
{
    while Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(25), connect()).await {
            Ok(Ok(connection)) => return Some(connection),
            Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(_) => {}
        }
    }
    None
}
