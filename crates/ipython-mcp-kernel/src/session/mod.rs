//! One kernel session: a [`SessionHandle`] (cheap to clone, async methods) and the private
//! actor that owns the kernel process, runs operations one at a time in admission order,
//! enforces deadlines and replaces the kernel when it dies or will not stop.
//!
//! Admission: a request must take one of `max_pending` permits (the active operation holds
//! none), so a full queue answers `runtime_busy` at once. Each request carries a ticket that
//! moves from queued to dispatched or abandoned exactly once, and whoever moves it releases its
//! permit: a caller that waited longer than `queue_wait_timeout` (or was cancelled) abandons its
//! ticket, gets `queue_timeout` (or `operation_cancelled`) and frees its slot at once; the actor
//! skips abandoned tickets. Neither runs code. The deadline starts at dispatch. The server's
//! own bookkeeping calls (`helper_reserved`) take the one reserved slot instead, never a
//! user's.
//!
//! Supervision: the actor runs inside `supervise`, which owns the inbox. If the actor panics,
//! its kernels are killed, the session turns `unavailable` (every caller, running or queued, is
//! answered so) and stays so until `kernel_restart` starts a fresh actor and kernel on the same
//! inbox, in a new epoch.
//!
//! Files by concern: `handle` (the public handle, admission and waiting), `actor` (the owner
//! task: its inbox, supervision, kernel replacement and spares), `operation` (running one
//! operation: the request, the loop that feeds `run` its events and performs its actions, the
//! output), `run` (an operation's wait as a pure state machine: deadline, interrupt, grace,
//! cancellation), `outcome` (the end-of-operation decision, a pure function), `prepare`
//! (starting a local kernel and installing the helper), `remote` (kernels on a Jupyter server),
//! `transport` (the seam between the actor and a kernel: `KernelTransport`, `Launcher`,
//! `Running`), `error` (why a call was refused or failed, typed), `fake` (a scripted fake kernel behind that seam, for tests here and, under the
//! `test-support` feature, for other crates' tests).

mod actor;
mod checkpoint;
mod confine;
pub mod error;
#[cfg(any(test, feature = "test-support"))]
pub(crate) mod fake;
pub(crate) mod handle;
pub mod helper;
mod operation;
mod outcome;
mod prepare;
mod remote;
mod run;
#[cfg(test)]
mod tests;
mod transport;

pub(crate) use transport::KernelTransport;

use transport::Launcher;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipython_mcp_config::{OutputLimits, Timeouts};
use ipython_mcp_env::Resolver;
use tokio::sync::{mpsc, oneshot, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::status::RuntimeStatus;
use error::{PanickedCall, SessionError, Wording};
use ipython_mcp_output::executions::{Executions, Record, SpoolLimits};
use ipython_mcp_output::output::{ErrorInfo, ExecutionId, ExecutionOutput, RuntimeInfo};

/// Everything a session needs to start and run kernels.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub kernel_id: String,
    pub limits: OutputLimits,
    pub timeouts: Timeouts,
    /// Items kept per JSON array/object in displays and results.
    pub max_json_items: usize,
    pub max_pending: usize,
    pub queue_wait_timeout: Duration,
    /// Warm spare kernels kept ready for replacements (0 disables).
    pub spare_kernels: usize,
    /// Library paths, preloads and aliases every kernel gets.
    pub namespace: ipython_mcp_config::Namespace,
    pub resolver: Resolver,
    /// Bounds of the on-disk spool of full output.
    pub spool: SpoolLimits,
    /// A kernelspec to start instead of our ipykernel launch (`kernel_start` with a spec name).
    pub kernel_spec: Option<ipython_mcp_jupyter::kernelspec::KernelSpec>,
    /// Where kernels start; `None`: the server's working directory.
    pub working_dir: Option<std::path::PathBuf>,
    /// The configured Jupyter server, for remote sessions.
    pub jupyter: Option<ipython_mcp_jupyter::remote::Server>,
    /// Run the kernels on `jupyter` instead of locally.
    pub remote: Option<RemoteKernel>,
    /// The principal the session serves, if the server has several: a gateway that starts
    /// the kernel is told it as `KERNEL_USERNAME` (Enterprise Gateway runs and labels the
    /// kernel as that user; Kernel Gateway passes it to the kernel's environment).
    pub owner: Option<String>,
    /// The memory limit of each local kernel's process tree, and how it is enforced (remote
    /// kernels: their server's business).
    pub memory: ipython_mcp_jupyter::MemoryPolicy,
    /// The OS sandbox of each local kernel (remote kernels: their server's business); `None`:
    /// none.
    pub sandbox: Option<std::sync::Arc<ipython_mcp_sandbox::Policy>>,
    /// Checkpoints of a local kernel's namespace after each execution, restored into a
    /// replacement the session did not ask for: the bound in bytes; `None`: off.
    pub checkpoint_max_bytes: Option<u64>,
    /// The server's private directory: local kernels' run directories and the session's
    /// output spool are made in it (the sandbox keeps each kernel out of the others').
    pub private_dir: std::path::PathBuf,
    /// How the answers the session records itself are worded for the agent (the MCP crate's
    /// `error::WORDING`; [`Wording::PLAIN`] without it).
    pub wording: Wording,
    /// Why this new session's namespace is not the one its caller had (their kernels were
    /// stopped while they were idle): said with the first call's result, which reports the
    /// namespace `reset`, as a replacement between calls is.
    pub notice: Option<String>,
    /// Other MCP servers, as the `mcp_servers` module of the kernels with the helper calls
    /// them (code mode); `None`: none configured.
    pub code_mode: Option<std::sync::Arc<dyn CodeMode>>,
}

/// Where a code-mode call's progress goes: the latest line the upstream reported.
pub type UpstreamProgress = std::sync::Arc<dyn Fn(String) + Send + Sync>;

/// Other MCP servers as the kernel's `mcp_servers` module calls them (see the guide's "Code
/// mode"). The module asks during an execution, on its stdin channel; the session answers.
pub trait CodeMode: Send + Sync + std::fmt::Debug {
    /// The servers' names: the module lists them before anything connects.
    fn names(&self) -> Vec<String>;
    /// The answer to one request of the module. Dropping the future (the execution was
    /// stopped) must cancel what it started. `progress` takes what the upstream reports of
    /// the call meanwhile (one line), for the execution's progress.
    fn answer(
        &self,
        request: serde_json::Value,
        progress: UpstreamProgress,
    ) -> futures_util::future::BoxFuture<'static, serde_json::Value>;
    /// Each server's state now, for `runtime_status`.
    fn status(&self) -> Vec<crate::status::UpstreamStatus>;
}

impl SessionOptions {
    /// The upstream servers the kernels' `mcp_servers` module offers (none without code mode).
    fn mcp_servers(&self) -> Vec<String> {
        self.code_mode
            .as_ref()
            .map(|code_mode| code_mode.names())
            .unwrap_or_default()
    }
}

/// Which kernel a remote session runs on the Jupyter server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteKernel {
    /// A new kernel from the server's kernelspec `name` (`jupyter:<name>`); deleted when the
    /// session stops.
    Start { name: String },
    /// A kernel already running there (`jupyter-kernel:<id>`), e.g. one a person uses in
    /// JupyterLab: shared, and left running when the session stops.
    Attach { id: String },
    /// `jupyter-kernel:<id>` naming a kernel the caller may not attach to (another
    /// principal's): the session fails to start exactly as for an id the server does not know.
    Foreign { id: String },
}

impl RemoteKernel {
    /// What the spec names on the server: the kernelspec name, or the kernel id.
    pub fn target(&self) -> &str {
        match self {
            RemoteKernel::Start { name } => name,
            RemoteKernel::Attach { id } | RemoteKernel::Foreign { id } => id,
        }
    }
}

/// The spec's text, as an agent passes it to `kernel_start` (`jupyter:<name>`,
/// `jupyter-kernel:<id>`).
impl std::fmt::Display for RemoteKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use ipython_mcp_config::{REMOTE_ATTACH, REMOTE_START};
        match self {
            RemoteKernel::Start { name } => write!(f, "{REMOTE_START}{name}"),
            RemoteKernel::Attach { id } | RemoteKernel::Foreign { id } => {
                write!(f, "{REMOTE_ATTACH}{id}")
            }
        }
    }
}

/// A progress update for a running execution (at most one a second).
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Seconds since the code started running.
    pub elapsed_seconds: f64,
    /// The latest line of output, or a note that it is still running.
    pub message: String,
}

/// One `execute` request.
#[derive(Debug, Clone, Default)]
pub struct ExecuteArgs {
    pub code: String,
    /// Deadline from dispatch; `None` uses the configured default.
    pub timeout: Option<Duration>,
    /// Correlates logs with the MCP request.
    pub request_id: String,
    /// Cancelled when the client cancels the request: a queued request is withdrawn, a running
    /// one is interrupted (the timeout path).
    pub cancel: CancellationToken,
    /// Where to send progress while the code runs (when the client asked for progress).
    pub progress: Option<mpsc::UnboundedSender<Progress>>,
}

struct Shared {
    options: SessionOptions,
    executions: Executions,
    status: Mutex<RuntimeStatus>,
    /// The current kernel's memory meter (a local kernel's), read into each status.
    memory: Mutex<Option<Arc<ipython_mcp_jupyter::MemoryMeter>>>,
    queue_depth: AtomicUsize,
    capacity: Arc<Semaphore>,
    /// One slot beside the `max_pending` ones, for the server's own bookkeeping calls.
    reserved: Arc<Semaphore>,
    admission: Mutex<()>,
    next_seq: AtomicU64,
    shutdown: CancellationToken,
    /// The operation running now, for `interrupt()`, which does not queue.
    active: ActiveOperation,
    /// Becomes true once the actor has stopped its kernel.
    finished: watch::Sender<bool>,
    /// The epoch, for watchers of kernel replacement (dynamic tools die with their kernel).
    epoch: watch::Sender<u64>,
    /// How many times the actor has panicked; a caller whose reply was dropped waits for this
    /// to pass the count it saw at admission (or for shutdown) to know which happened.
    failures: watch::Sender<u64>,
    /// True from an actor's panic until `kernel_restart` replaces it.
    failed: AtomicBool,
    /// Every task of the session: its actor (in `supervise`), spares starting, background
    /// executions' waits. They end once the actor has closed; `shutdown` joins them.
    tasks: ipython_mcp_jupyter::task::Tasks,
    /// The namespace checkpoint's files as last read.
    checkpoint: checkpoint::Cache,
    /// Where the remote kernels this session starts keep its checkpoint, relative to their
    /// machine's temp directory (the helper's `checkpoint.resolve`): the same for all of them,
    /// so a replacement on the same server finds it.
    remote_checkpoint: String,
}

impl Shared {
    /// The session's status now, with its kernel's memory as last sampled and its checkpoint
    /// as last read (no file I/O: callers hold locks and run on the async threads).
    fn status_now(&self) -> RuntimeStatus {
        let mut status = self.status.lock().expect("status lock").clone();
        status.queue_depth = self.queue_depth.load(Ordering::Acquire);
        if let Some(meter) = self.memory.lock().expect("memory lock").as_ref() {
            status.memory = Some(crate::status::MemoryStatus::from(meter.reading()));
        }
        if let Some(code_mode) = &self.options.code_mode {
            status.upstream_servers = code_mode.status();
        }
        status.checkpoint = self
            .local_checkpoint_dir(&status)
            .map(|_| self.checkpoint.last());
        status
    }

    /// The session's status with its checkpoint's files read again first (on the blocking
    /// pool, waiting a bounded time: see `checkpoint`).
    async fn status_refreshed(&self) -> RuntimeStatus {
        if let Some(dir) = self.local_checkpoint_dir(&self.status_now()) {
            self.checkpoint.refresh(dir).await;
        }
        self.status_now()
    }

    /// Where a local kernel's checkpoint is (a remote one is not checkpointed here).
    fn local_checkpoint_dir(&self, status: &RuntimeStatus) -> Option<std::path::PathBuf> {
        let local = status
            .kernel
            .as_ref()
            .is_some_and(|kernel| kernel.remote.is_none() && kernel.helper);
        self.checkpoint_dir().filter(|_| local)
    }

    /// Where the session's checkpoint is, with checkpoints on.
    fn checkpoint_dir(&self) -> Option<std::path::PathBuf> {
        self.options.checkpoint_max_bytes?;
        let (spool, _) = self.executions.spool()?;
        Some(spool.join(checkpoint::CHECKPOINT_DIR))
    }
}

/// The operation running now, as the handle's `interrupt()` sees it: that call goes around
/// the inbox (the actor is busy running the very operation it stops), so this is the one piece
/// of an operation's state other tasks share. The rest of its wait is the actor's own (`run`).
struct ActiveOperation {
    /// The admission sequence of the operation running now, if any; `interrupt()` reads it
    /// and names its target under this lock, so an interrupt meant for an operation that just
    /// ended can never hit the next one.
    seq: Mutex<Option<u64>>,
    /// The sequence `interrupt()` last aimed at; the operation with that sequence takes the
    /// interrupt path.
    target: watch::Sender<Option<u64>>,
    /// Bumped each time an operation is answered, so `interrupt()` can wait for the one it
    /// stopped.
    answered: watch::Sender<u64>,
}

impl ActiveOperation {
    fn new() -> ActiveOperation {
        ActiveOperation {
            seq: Mutex::new(None),
            target: watch::channel(None).0,
            answered: watch::channel(0).0,
        }
    }

    /// Marks operation `seq` as running. The receiver is subscribed before the operation is
    /// visible as active, so an `interrupt()` aimed at it is always seen.
    fn begin(&self, seq: u64) -> watch::Receiver<Option<u64>> {
        let target = self.target.subscribe();
        *self.seq.lock().expect("active lock") = Some(seq);
        target
    }

    /// Nothing runs any more (its caller is answered next).
    fn end(&self) {
        *self.seq.lock().expect("active lock") = None;
    }

    /// The operation's caller has its answer (or lost it to a panic).
    fn answered(&self) {
        self.answered.send_modify(|answered| *answered += 1);
    }

    /// Aims an interrupt at the operation running now, if any; the receiver changes once it
    /// is answered.
    fn aim(&self) -> Option<watch::Receiver<u64>> {
        let mut answered = self.answered.subscribe();
        answered.mark_unchanged();
        let active = self.seq.lock().expect("active lock");
        let seq = (*active)?;
        self.target.send_replace(Some(seq));
        Some(answered)
    }
}

enum Command {
    Execute {
        ticket: Arc<Ticket>,
        args: ExecuteArgs,
        helper: Option<HelperRequest>,
        /// Executes are remembered for `get_output`; helper calls are not.
        record: Option<Arc<Record>>,
        reply: oneshot::Sender<Ended>,
    },
    /// Replace the kernel with a fresh one (a promoted spare), in queue order.
    Restart {
        reply: oneshot::Sender<RuntimeStatus>,
        /// Load the session's checkpoint into the new kernel.
        restore: bool,
    },
    /// Makes the actor panic when it gets here (the test mode's trigger; see `inject_panic`).
    Panic,
}

/// Which slots a request may take: a user's (`max_pending`), or the one reserved for the
/// server's bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    User,
    Reserved,
}

/// A call into the kernel's helper module (namespace tools), queued like an execute.
#[derive(Debug, Clone)]
pub struct HelperCall {
    pub method: String,
    pub params: serde_json::Value,
    /// Deadline from dispatch; `None` uses the configured default.
    pub timeout: Option<Duration>,
    pub request_id: String,
    pub cancel: CancellationToken,
}

/// What a helper call returned: how it ended, and what happened to the kernel meanwhile.
#[derive(Debug, Clone)]
pub struct HelperOutput {
    pub outcome: Outcome,
    pub runtime: RuntimeInfo,
}

/// How a call into the kernel ended. "The user's code or the request was wrong" and "the
/// machinery failed" are different variants, so neither passes for the other: only `Failed`
/// says the call did not complete (and `runtime` says whether the namespace survived).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The helper answered.
    Answered(serde_json::Value),
    /// The helper answered with an error: user code raised (`execution_error`), or the
    /// request did not fit the namespace (a missing name, arguments that do not bind). The
    /// kernel is as it was. `partial` is what the helper worked out before the error.
    Raised {
        error: ErrorInfo,
        partial: Option<serde_json::Value>,
    },
    /// No answer: the call was refused, ran out of time, was cancelled, or its kernel died or
    /// was unavailable.
    Failed(ErrorInfo),
}

impl Outcome {
    /// The answer, if the helper gave one.
    pub fn answer(&self) -> Option<&serde_json::Value> {
        match self {
            Outcome::Answered(answer) => Some(answer),
            Outcome::Raised { .. } | Outcome::Failed(_) => None,
        }
    }

    /// The error, if there was one.
    pub fn error(&self) -> Option<&ErrorInfo> {
        match self {
            Outcome::Answered(_) => None,
            Outcome::Raised { error, .. } | Outcome::Failed(error) => Some(error),
        }
    }

    /// A name for logs: `answered`, `raised` or `failed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Answered(_) => "answered",
            Outcome::Raised { .. } => "raised",
            Outcome::Failed(_) => "failed",
        }
    }
}

#[derive(Debug, Clone)]
struct HelperRequest {
    method: String,
    params: serde_json::Value,
}

/// An operation's output, plus the helper's reply for helper calls.
type Ended = (ExecutionOutput, Option<serde_json::Value>);

/// A request handed to the actor, whose caller has not yet got its answer.
struct Admitted {
    ticket: Arc<Ticket>,
    args: ExecuteArgs,
    record: Option<Arc<Record>>,
    result: oneshot::Receiver<Ended>,
    /// `Shared::failures` when it was admitted.
    failures_seen: u64,
}

const QUEUED: u8 = 0;
const DISPATCHED: u8 = 1;
const ABANDONED: u8 = 2;

/// A queued request's admission record; it leaves the queued state exactly once, and whoever
/// moves it out releases its queue slot.
struct Ticket {
    seq: u64,
    execution_id: ExecutionId,
    enqueued_at: Instant,
    state: AtomicU8,
    dispatched: Notify,
    permit: Mutex<Option<OwnedSemaphorePermit>>,
    cancel: CancellationToken,
}

impl Ticket {
    fn dispatch(&self, shared: &Shared) -> bool {
        let won = self
            .state
            .compare_exchange(QUEUED, DISPATCHED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if won {
            self.leave_queue(shared);
            self.dispatched.notify_one();
        }
        won
    }

    fn abandon(&self, shared: &Shared) -> bool {
        let won = self
            .state
            .compare_exchange(QUEUED, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if won {
            self.leave_queue(shared);
        }
        won
    }

    fn leave_queue(&self, shared: &Shared) {
        shared.queue_depth.fetch_sub(1, Ordering::AcqRel);
        drop(self.permit.lock().expect("permit lock").take());
    }
}

impl Shared {
    /// A session error as the agent reads it in an answer the session records itself.
    fn worded(&self, error: &SessionError) -> ErrorInfo {
        (self.options.wording.error)(error)
    }
}

/// What every call gets after the actor panicked, until it is restarted.
fn panicked(call: PanickedCall) -> SessionError {
    SessionError::Panicked { call }
}

/// The refusal of a call on a session whose kernel could not start, with the cause its
/// status keeps.
fn unavailable(status: &RuntimeStatus) -> SessionError {
    let cause = match &status.error {
        Some(SessionError::StartFailed(cause)) => Some(cause.clone()),
        _ => None,
    };
    SessionError::Unavailable { cause }
}

/// A start failure as the session stores and shows it: configured variable values and URL
/// credentials masked, each text bounded by `max_text_chars`.
fn shown(options: &SessionOptions, failure: error::StartFailure) -> error::StartFailure {
    let redactor = options.namespace.variables.redactor();
    failure.shown(&redactor, options.limits.max_text_chars)
}
