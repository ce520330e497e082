//! The kernel transport seam: everything the session actor asks of "a kernel", and of whatever
//! starts kernels for it. The actor holds a `Box<dyn KernelTransport>` per kernel and one
//! `Arc<dyn Launcher>`; it never names ZeroMQ, a process or a Python environment.
//!
//! Implementations: a local ipykernel over ZeroMQ ([`ipython_mcp_jupyter::Kernel`], started by
//! `prepare::Local`), a kernel on a Jupyter server (WebSocket for the channels, the REST API to
//! start, interrupt and delete it: [`RemoteKernel`], started by `remote::Remote`), and the
//! scripted fake (`fake.rs`). Each method below states its promise; every one is bounded.

use std::time::Duration;

use futures_util::future::BoxFuture;
use ipython_mcp_jupyter::protocol::JupyterMessage;
use ipython_mcp_jupyter::remote::RemoteKernel;
use std::sync::Arc;

use ipython_mcp_jupyter::{Channel, Kernel, KernelExit, Routed};
use tokio::sync::{mpsc, watch};

use super::error::StartFailure;
use crate::status::KernelDescription;

/// A kernel a [`Launcher`] started, and what the session knows about it: the transport it is
/// driven through, the helper's comm (when the helper is installed) and what runtime_status
/// shows of it.
pub(super) struct Running {
    pub(super) kernel: Box<dyn KernelTransport>,
    pub(super) helper_comm: Option<String>,
    /// The helper writes the full streams to the spool itself (a local kernel's helper, which
    /// shares our filesystem); otherwise the session spools what arrives.
    pub(super) helper_spools: bool,
    /// The helper checkpoints the namespace (see the guide's "Checkpoints"), so a replacement
    /// loads it.
    pub(super) checkpoints: bool,
    /// The helper offers the `mcp_servers` module, so stdin is open for its requests (see the
    /// guide's "Code mode"); never in a person's attached kernel.
    pub(super) code_mode: bool,
    pub(super) description: KernelDescription,
}

/// One running kernel, as the actor uses it. Implementations must be cheap to call from the
/// actor's loop: every method is bounded (none waits on a kernel that stopped answering for
/// longer than its own documented bound).
pub(crate) trait KernelTransport: Send + Sync {
    /// Registers interest in everything parented by `message`, then sends it on shell or
    /// control. The receiver yields the reply and every iopub message of that parent, in
    /// arrival order per channel, and closes when the kernel exits (so no caller waits on a
    /// dead kernel) or after [`KernelTransport::forget`]. Returns the message's id.
    fn request(
        &self,
        channel: Channel,
        message: JupyterMessage,
    ) -> BoxFuture<'_, Result<(String, mpsc::UnboundedReceiver<Routed>), ipython_mcp_jupyter::Error>>;

    /// Stops routing messages of `msg_id`; late ones are dropped.
    fn forget(&self, msg_id: &str);

    /// Interrupts what the kernel is running, the way its kernelspec's `interrupt_mode` says
    /// (SIGINT, or an `interrupt_request` on control). Bounded; whether the kernel stops is
    /// the caller's grace period to judge.
    fn interrupt(&self) -> BoxFuture<'_, ()>;

    /// One liveness round trip: `false` if the kernel did not answer within `timeout`.
    fn heartbeat(&self, timeout: Duration) -> BoxFuture<'_, bool>;

    /// Becomes `Some` once the kernel is gone (process exit, or the server lost it).
    fn exit_watch(&self) -> watch::Receiver<Option<KernelExit>>;

    /// The kernel tree's memory meter: a local kernel's; `None` for one the server does not
    /// run itself (its memory is its server's business).
    fn memory(&self) -> Option<Arc<ipython_mcp_jupyter::MemoryMeter>> {
        None
    }

    /// Ends the kernel at once (and whatever it started) and waits, bounded, until it is gone.
    fn kill(&self) -> BoxFuture<'_, ()>;

    /// Asks the kernel to shut down, waits up to `grace`, then kills it.
    fn shutdown(&self, grace: Duration) -> BoxFuture<'_, ()>;
}

/// Where a session's kernels come from.
pub(crate) trait Launcher: Send + Sync {
    /// Makes starting kernels possible: for local kernels, finding or provisioning the Python
    /// environment (reporting its phases in the session's status). The actor calls it until it
    /// succeeds once; an error leaves the session unavailable with that error.
    fn provision(&self) -> BoxFuture<'_, Result<(), StartFailure>>;

    /// Starts one kernel, ready for requests: connected, answering, the helper installed where
    /// it applies. Touches no session state, so spares are started the same way in the
    /// background. Its `KernelDescription` is what runtime_status shows.
    fn launch(&self) -> BoxFuture<'static, Result<Running, StartFailure>>;

    /// Whether dropping a launch in flight leaves nothing behind. True for a local kernel
    /// (its process dies with the dropped launch); false on a Jupyter server, where a start
    /// request in flight may make a kernel whose id we would never learn.
    fn cancellable(&self) -> bool {
        true
    }
}

/// A kernel on a Jupyter server: each method is the jupyter crate's own (REST for interrupt
/// and kill, the WebSocket for the rest).
impl KernelTransport for RemoteKernel {
    fn request(
        &self,
        channel: Channel,
        message: JupyterMessage,
    ) -> BoxFuture<'_, Result<(String, mpsc::UnboundedReceiver<Routed>), ipython_mcp_jupyter::Error>>
    {
        Box::pin(RemoteKernel::request(self, channel, message))
    }

    fn forget(&self, msg_id: &str) {
        RemoteKernel::forget(self, msg_id);
    }

    fn interrupt(&self) -> BoxFuture<'_, ()> {
        Box::pin(RemoteKernel::interrupt(self))
    }

    fn heartbeat(&self, timeout: Duration) -> BoxFuture<'_, bool> {
        Box::pin(RemoteKernel::heartbeat(self, timeout))
    }

    fn exit_watch(&self) -> watch::Receiver<Option<KernelExit>> {
        RemoteKernel::exit_watch(self)
    }

    fn kill(&self) -> BoxFuture<'_, ()> {
        Box::pin(RemoteKernel::kill(self))
    }

    fn shutdown(&self, grace: Duration) -> BoxFuture<'_, ()> {
        Box::pin(RemoteKernel::shutdown(self, grace))
    }
}

/// The local ZeroMQ kernel: each method is the jupyter crate's own.
impl KernelTransport for Kernel {
    fn request(
        &self,
        channel: Channel,
        message: JupyterMessage,
    ) -> BoxFuture<'_, Result<(String, mpsc::UnboundedReceiver<Routed>), ipython_mcp_jupyter::Error>>
    {
        Box::pin(Kernel::request(self, channel, message))
    }

    fn forget(&self, msg_id: &str) {
        Kernel::forget(self, msg_id);
    }

    fn interrupt(&self) -> BoxFuture<'_, ()> {
        Box::pin(Kernel::interrupt(self))
    }

    fn heartbeat(&self, timeout: Duration) -> BoxFuture<'_, bool> {
        Box::pin(Kernel::heartbeat(self, timeout))
    }

    fn exit_watch(&self) -> watch::Receiver<Option<KernelExit>> {
        Kernel::exit_watch(self)
    }

    fn memory(&self) -> Option<Arc<ipython_mcp_jupyter::MemoryMeter>> {
        Some(Kernel::memory(self))
    }

    fn kill(&self) -> BoxFuture<'_, ()> {
        Box::pin(Kernel::kill(self))
    }

    fn shutdown(&self, grace: Duration) -> BoxFuture<'_, ()> {
        Box::pin(Kernel::shutdown(self, grace))
    }
}
