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

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipython_mcp_config::{OutputLimits, Timeouts};
use ipython_mcp_env::{Phase, PythonEnvironment, Resolver};
use ipython_mcp_jupyter::protocol::{CommId, CommMsg, ExecuteRequest, JupyterMessage, ReplyStatus};
use ipython_mcp_jupyter::{Channel, Kernel, LaunchSpec};
use tokio::sync::{mpsc, oneshot, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::collect::Collector;
use crate::executions::{Executions, Page, PageRequest, Record, SpoolLimits, SpoolWriter};
use crate::helper;
use crate::output::{
    Code, ErrorInfo, ExecutionOutput, ExecutionStatus, Interruption, NamespaceOutcome, RuntimeInfo,
};
use crate::payload::SpoolFiles;
use crate::status::{EnvironmentStatus, KernelDescription, RuntimeStatus, SessionState};

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
    pub kernel_spec: Option<crate::kernelspec::KernelSpec>,
    /// Where kernels start; `None`: the server's working directory.
    pub working_dir: Option<std::path::PathBuf>,
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

/// The public side of a session.
#[derive(Clone)]
pub struct SessionHandle {
    shared: Arc<Shared>,
    inbox: mpsc::UnboundedSender<Command>,
}

struct Shared {
    options: SessionOptions,
    executions: Executions,
    status: Mutex<RuntimeStatus>,
    queue_depth: AtomicUsize,
    capacity: Arc<Semaphore>,
    /// One slot beside the `max_pending` ones, for the server's own bookkeeping calls.
    reserved: Arc<Semaphore>,
    admission: Mutex<()>,
    next_seq: AtomicU64,
    shutdown: CancellationToken,
    /// The admission sequence of the operation running now, if any; `interrupt()` reads it
    /// and names its target under this lock, so an interrupt meant for an operation that just
    /// ended can never hit the next one.
    active: Mutex<Option<u64>>,
    /// The sequence `interrupt()` last aimed at; the operation with that sequence takes the
    /// interrupt path.
    interrupts: watch::Sender<Option<u64>>,
    /// Bumped each time an operation ends, so `interrupt()` can wait for the one it stopped.
    operations_done: watch::Sender<u64>,
    /// Becomes true once the actor has stopped its kernel.
    finished: watch::Sender<bool>,
    /// The epoch, for watchers of kernel replacement (dynamic tools die with their kernel).
    epoch: watch::Sender<u64>,
    /// How many times the actor has panicked; a caller whose reply was dropped waits for this
    /// to pass the count it saw at admission (or for shutdown) to know which happened.
    failures: watch::Sender<u64>,
    /// True from an actor's panic until `kernel_restart` replaces it.
    failed: AtomicBool,
}

enum Command {
    Execute {
        ticket: Arc<Ticket>,
        args: ExecuteArgs,
        helper: Option<HelperRequest>,
        /// Executes are remembered for `get_output`; helper calls are not.
        record: Option<Arc<Record>>,
        reply: oneshot::Sender<Outcome>,
    },
    /// Replace the kernel with a fresh one (a promoted spare), in queue order.
    Restart {
        reply: oneshot::Sender<RuntimeStatus>,
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

/// What a helper call returned: its `result`, or a structured error (from the helper, or from
/// the session: busy, timed out, kernel died…).
#[derive(Debug, Clone)]
pub struct HelperOutput {
    pub ok: bool,
    pub result: Option<serde_json::Value>,
    pub error: Option<ErrorInfo>,
    pub runtime: RuntimeInfo,
}

#[derive(Debug, Clone)]
struct HelperRequest {
    method: String,
    params: serde_json::Value,
}

/// An operation's output, plus the helper's reply for helper calls.
type Outcome = (ExecutionOutput, Option<serde_json::Value>);

/// A request handed to the actor, whose caller has not yet got its answer.
struct Admitted {
    ticket: Arc<Ticket>,
    args: ExecuteArgs,
    record: Option<Arc<Record>>,
    result: oneshot::Receiver<Outcome>,
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
    execution_id: String,
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

impl SessionHandle {
    /// Creates the session and starts its kernel in the background; returns at once.
    pub fn start(options: SessionOptions) -> SessionHandle {
        let (handle, commands) = SessionHandle::detached(options);
        tokio::spawn(supervise(Arc::clone(&handle.shared), commands));
        handle
    }

    /// The handle and the inbox an actor would serve (tests drive the inbox by hand).
    fn detached(options: SessionOptions) -> (SessionHandle, mpsc::UnboundedReceiver<Command>) {
        // Unbounded: admission is bounded by the permits, not by the channel.
        let (inbox, commands) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            status: Mutex::new(RuntimeStatus::starting(&options.kernel_id)),
            capacity: Arc::new(Semaphore::new(options.max_pending.max(1))),
            reserved: Arc::new(Semaphore::new(1)),
            admission: Mutex::new(()),
            executions: Executions::new(options.spool),
            options,
            queue_depth: AtomicUsize::new(0),
            next_seq: AtomicU64::new(1),
            shutdown: CancellationToken::new(),
            active: Mutex::new(None),
            interrupts: watch::channel(None).0,
            operations_done: watch::channel(0).0,
            finished: watch::channel(false).0,
            epoch: watch::channel(0).0,
            failures: watch::channel(0).0,
            failed: AtomicBool::new(false),
        });
        (SessionHandle { shared, inbox }, commands)
    }

    pub fn kernel_id(&self) -> &str {
        &self.shared.options.kernel_id
    }

    /// The session's status, answered without queueing.
    pub fn status(&self) -> RuntimeStatus {
        let mut status = self.shared.status.lock().expect("status lock").clone();
        status.queue_depth = self.shared.queue_depth.load(Ordering::Acquire);
        status
    }

    /// Runs code in the kernel, waiting in the admission queue first.
    pub async fn execute(&self, args: ExecuteArgs) -> ExecutionOutput {
        self.submit(args, None, Slot::User).await.0
    }

    /// Calls a method of the kernel's helper module, queued and bounded like an execute.
    pub async fn helper(&self, call: HelperCall) -> HelperOutput {
        self.helper_in(call, Slot::User).await
    }

    /// A helper call for the server's own bookkeeping (the dynamic-tool catalog check behind
    /// `tools/list`): queued in order with the user's work, but in the session's one reserved
    /// slot, so it never takes a `max_pending` slot from a user. While one is pending, another
    /// answers `runtime_busy` at once.
    pub async fn helper_reserved(&self, call: HelperCall) -> HelperOutput {
        self.helper_in(call, Slot::Reserved).await
    }

    async fn helper_in(&self, call: HelperCall, slot: Slot) -> HelperOutput {
        let args = ExecuteArgs {
            timeout: call.timeout,
            request_id: call.request_id,
            cancel: call.cancel,
            ..Default::default()
        };
        let request = HelperRequest {
            method: call.method,
            params: call.params,
        };
        let (output, reply) = self.submit(args, Some(request), slot).await;
        helper_output(output, reply)
    }

    async fn submit(
        &self,
        args: ExecuteArgs,
        helper: Option<HelperRequest>,
        slot: Slot,
    ) -> Outcome {
        match self.admit(args, helper, slot) {
            Ok(admitted) => {
                self.wait(admitted, Some(self.shared.options.queue_wait_timeout))
                    .await
            }
            Err(outcome) => *outcome,
        }
    }

    /// Starts an execute and returns at once with `status: pending` and its `execution_id`;
    /// the execution is queued and run as usual, and `output` reads it. A request the queue
    /// refuses (busy, closed, unavailable) is answered at once instead. Nobody waits for it, so
    /// the queue-wait limit does not apply: it runs when its turn comes (it still holds one of
    /// the `max_pending` slots until then).
    pub fn execute_background(&self, args: ExecuteArgs) -> ExecutionOutput {
        match self.admit(args, None, Slot::User) {
            Ok(admitted) => {
                let record = admitted.record.clone();
                let session = self.clone();
                tokio::spawn(async move { session.wait(admitted, None).await });
                let record = record.expect("every execute has a record");
                record.view()
            }
            Err(outcome) => outcome.0,
        }
    }

    /// Numbers the request, takes a queue slot and hands it to the actor; or answers at once.
    fn admit(
        &self,
        args: ExecuteArgs,
        helper: Option<HelperRequest>,
        slot: Slot,
    ) -> Result<Admitted, Box<Outcome>> {
        // Numbering and enqueueing happen under one lock, so admission order is sequence order
        // even for concurrent callers. Nothing awaits while it is held.
        let admission = self.shared.admission.lock().expect("admission lock");
        let seq = self.shared.next_seq.fetch_add(1, Ordering::AcqRel);
        let execution_id = uuid::Uuid::new_v4().to_string();
        // Executes are remembered (get_output); helper calls are not.
        let record = helper.is_none().then(|| {
            self.shared
                .executions
                .register(execution_id.clone(), seq, args.request_id.clone())
        });
        let ticket = Arc::new(Ticket {
            seq,
            execution_id,
            enqueued_at: Instant::now(),
            state: AtomicU8::new(QUEUED),
            dispatched: Notify::new(),
            permit: Mutex::new(None),
            cancel: args.cancel.clone(),
        });
        let status = self.status();
        match status.state {
            SessionState::Closed => {
                return Err(Box::new(self.not_run(
                    &ticket,
                    &args,
                    record.as_deref(),
                    closed_error(),
                )))
            }
            SessionState::Unavailable => {
                let error = if self.shared.failed.load(Ordering::Acquire) {
                    failed_error("nothing ran")
                } else {
                    unavailable_error(&status)
                };
                return Err(Box::new(self.not_run(
                    &ticket,
                    &args,
                    record.as_deref(),
                    error,
                )));
            }
            _ => {}
        }
        let slots = match slot {
            Slot::User => &self.shared.capacity,
            Slot::Reserved => &self.shared.reserved,
        };
        let Ok(permit) = Arc::clone(slots).try_acquire_owned() else {
            let error = match slot {
                Slot::User => ErrorInfo::new(
                    Code::RuntimeBusy,
                    format!(
                        "{} operations are already waiting for this kernel",
                        self.shared.options.max_pending
                    ),
                )
                .with_hint("wait for earlier calls to finish, or check runtime_status"),
                Slot::Reserved => ErrorInfo::new(
                    Code::RuntimeBusy,
                    "a bookkeeping call is already waiting for this kernel",
                ),
            };
            return Err(Box::new(self.not_run(
                &ticket,
                &args,
                record.as_deref(),
                error,
            )));
        };
        *ticket.permit.lock().expect("permit lock") = Some(permit);
        self.shared.queue_depth.fetch_add(1, Ordering::AcqRel);
        let (reply, result) = oneshot::channel();
        let command = Command::Execute {
            ticket: Arc::clone(&ticket),
            args: args.clone(),
            helper,
            record: record.clone(),
            reply,
        };
        if self.inbox.send(command).is_err() {
            ticket.abandon(&self.shared);
            return Err(Box::new(self.not_run(
                &ticket,
                &args,
                record.as_deref(),
                closed_error(),
            )));
        }
        let failures_seen = *self.shared.failures.borrow();
        drop(admission);
        Ok(Admitted {
            ticket,
            args,
            record,
            result,
            failures_seen,
        })
    }

    /// Waits for an admitted request's dispatch (bounded by `queue_wait` when a caller waits)
    /// and its outcome.
    async fn wait(&self, admitted: Admitted, queue_wait: Option<Duration>) -> Outcome {
        let Admitted {
            ticket,
            args,
            record,
            mut result,
            failures_seen,
        } = admitted;
        let record = record.as_deref();
        let queue_wait_limit = queue_wait.unwrap_or(Duration::MAX);
        tokio::select! {
            biased;
            _ = ticket.dispatched.notified() => {}
            // Answered without being dispatched: the session closed, or its actor failed.
            answered = &mut result => {
                return match answered {
                    Ok(output) => output,
                    Err(_) => self.lost(&ticket, &args, record, failures_seen).await,
                };
            }
            _ = args.cancel.cancelled() => {
                if ticket.abandon(&self.shared) {
                    // A server that is shutting down cancels every request it holds (the
                    // transport closed, or a signal): nobody cancelled this one.
                    if self.shared.shutdown.is_cancelled() {
                        return self.not_run(&ticket, &args, record, closed_error());
                    }
                    let error = ErrorInfo::new(Code::OperationCancelled, "cancelled by the client while queued; nothing ran");
                    let mut outcome = self.not_run(&ticket, &args, None, error);
                    outcome.0.status = ExecutionStatus::Cancelled;
                    if let Some(record) = record {
                        record.finish(&outcome.0);
                    }
                    return outcome;
                }
            }
            _ = tokio::time::sleep(queue_wait_limit), if queue_wait.is_some() => {
                let queue_wait = queue_wait_limit;
                if ticket.abandon(&self.shared) {
                    let status = self.status();
                    let error = if status.state == SessionState::Starting {
                        let phase = status.environment.as_ref().map_or("starting the kernel".to_owned(), |environment| {
                            format!("Python environment {} for {:.0}s", environment.phase, environment.elapsed_seconds)
                        });
                        ErrorInfo::new(
                            Code::QueueTimeout,
                            format!("waited {:.1}s for the kernel to start ({phase}); nothing ran", queue_wait.as_secs_f64()),
                        )
                        .with_hint("the first start creates a Python environment and can take a minute; retry shortly, or watch runtime_status")
                    } else {
                        ErrorInfo::new(
                            Code::QueueTimeout,
                            format!("waited {:.1}s in the queue behind earlier operations; nothing ran", queue_wait.as_secs_f64()),
                        )
                        .with_hint("the kernel is busy with earlier work; check runtime_status")
                    };
                    return self.not_run(&ticket, &args, record, error);
                }
            }
        }
        match result.await {
            Ok(output) => output,
            Err(_) => self.lost(&ticket, &args, record, failures_seen).await,
        }
    }

    /// The answer to a request whose reply the actor dropped: the session is shutting down, or
    /// the actor panicked (`supervise` then counts a failure, at once).
    async fn lost(
        &self,
        ticket: &Ticket,
        args: &ExecuteArgs,
        record: Option<&Record>,
        failures_seen: u64,
    ) -> Outcome {
        // Still queued (it was in the actor's hands when it panicked): free its slot.
        ticket.abandon(&self.shared);
        let ran = ticket.state.load(Ordering::Acquire) == DISPATCHED;
        let mut failures = self.shared.failures.subscribe();
        let failed = tokio::select! {
            biased;
            _ = self.shared.shutdown.cancelled() => false,
            counted = failures.wait_for(|count| *count > failures_seen) => counted.is_ok(),
        };
        if !failed {
            return self.not_run(ticket, args, record, closed_error());
        }
        if !ran {
            return self.not_run(ticket, args, record, failed_error("nothing ran"));
        }
        let mut outcome = self.not_run(
            ticket,
            args,
            None,
            failed_error(
                "this call was running: its kernel was stopped and every variable is gone",
            ),
        );
        outcome.0.status = ExecutionStatus::Error;
        outcome.0.runtime.interruption = Some(Interruption::Terminated);
        outcome.0.runtime.namespace = Some(NamespaceOutcome::Reset);
        if let Some(record) = record {
            record.finish(&outcome.0);
        }
        outcome
    }

    /// The outcome of a request that never ran; recorded for `get_output` too.
    fn not_run(
        &self,
        ticket: &Ticket,
        args: &ExecuteArgs,
        record: Option<&Record>,
        error: ErrorInfo,
    ) -> Outcome {
        let status = self.status();
        let output = ExecutionOutput::not_run(
            ticket.execution_id.clone(),
            RuntimeInfo {
                request_id: args.request_id.clone(),
                admission_seq: ticket.seq,
                epoch: status.epoch,
                queue_wait_ms: ticket.enqueued_at.elapsed().as_millis() as u64,
                run_ms: 0,
                interruption: None,
                namespace: None,
            },
            error,
        );
        if let Some(record) = record {
            record.finish(&output);
        }
        (output, None)
    }

    /// An execution's output: final, or what has arrived so far (`status: pending`) after
    /// waiting up to `wait` for it to finish. `None` picks the latest execution. Returns
    /// `None` when this session does not remember it.
    pub async fn output(
        &self,
        execution_id: Option<&str>,
        wait: Duration,
    ) -> Option<ExecutionOutput> {
        let record = match execution_id {
            Some(id) => self.shared.executions.find(id)?,
            None => self.shared.executions.latest()?,
        };
        if !wait.is_zero() {
            record.wait(wait).await;
        }
        // Both read files (a spilled view, the spool's sizes): off the async threads. The
        // summary is read for a running execution, and for a finished one whose output was cut
        // but whose answer went out without it (the disk was too slow then).
        let dir = self.shared.executions.spool_dir();
        tokio::task::spawn_blocking(move || {
            let mut output = record.view();
            let cut = output.stdout_omitted_chars > 0 || output.stderr_omitted_chars > 0;
            if let (None, Some(dir)) = (&output.spool, dir) {
                if cut || !record.is_finished() {
                    output.spool = Some(crate::executions::spool_info(&dir, &record));
                }
            }
            output
        })
        .await
        .ok()
    }

    /// Changes each time the kernel is replaced (the epoch advances); closes with the session.
    pub fn subscribe_epoch(&self) -> watch::Receiver<u64> {
        self.shared.epoch.subscribe()
    }

    /// True when this session remembers the execution.
    pub fn knows(&self, execution_id: &str) -> bool {
        self.shared.executions.find(execution_id).is_some()
    }

    /// The ids of the executions this session remembers, newest first.
    pub fn execution_ids(&self) -> Vec<String> {
        self.shared.executions.ids()
    }

    /// One page of an execution's full stdout or stderr from the spool.
    pub async fn page(
        &self,
        execution_id: Option<&str>,
        request: PageRequest,
    ) -> Option<Result<Page, ErrorInfo>> {
        let record = match execution_id {
            Some(id) => self.shared.executions.find(id)?,
            None => self.shared.executions.latest()?,
        };
        let path = match self.shared.executions.stream_path(&record, request.stream) {
            Ok(path) => path,
            Err(error) => return Some(Err(*error)),
        };
        let complete = record.is_finished() && record.spool_written();
        let page = tokio::task::spawn_blocking(move || {
            crate::executions::read_page(path.as_deref(), &request, complete)
        })
        .await;
        Some(page.map_err(|error| ErrorInfo::new(Code::InternalError, error.to_string())))
    }

    /// A finished execution's outputs as a notebook saves them: everything the kernel
    /// produced, unbounded but for `max_bytes` (see `transcript`). `None` when the session has
    /// no full record of it (unknown, spool off or evicted): only the bounded view is left.
    pub async fn saved_outputs(
        &self,
        execution_id: &str,
        execution_count: Option<u64>,
        max_bytes: u64,
    ) -> Option<crate::SavedOutputs> {
        let record = self.shared.executions.find(execution_id)?;
        let (dir, msg_id) = self.shared.executions.transcript_source(&record)?;
        tokio::task::spawn_blocking(move || {
            crate::transcript::replay(&dir, &msg_id, execution_count, max_bytes)
        })
        .await
        .ok()
    }

    /// Replaces the kernel with a fresh one (promoting a warm spare when one is ready) after
    /// the operations queued before it; every name is gone afterwards and the epoch advances.
    pub async fn restart(&self) -> Result<RuntimeStatus, ErrorInfo> {
        match self.status().state {
            SessionState::Closed => return Err(closed_error()),
            SessionState::Starting => {
                return Err(ErrorInfo::new(
                    Code::RuntimeUnavailable,
                    "the kernel is still starting; nothing to restart yet",
                ))
            }
            _ => {}
        }
        let (reply, result) = oneshot::channel();
        self.inbox
            .send(Command::Restart { reply })
            .map_err(|_| closed_error())?;
        let bound =
            self.shared.options.queue_wait_timeout + self.shared.options.timeouts.kernel_startup;
        match tokio::time::timeout(bound, result).await {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(_)) => Err(closed_error()),
            Err(_) => Err(ErrorInfo::new(
                Code::QueueTimeout,
                "the restart waited too long behind earlier operations",
            )
            .with_hint("interrupt the running code first, then restart")),
        }
    }

    /// Interrupts the operation running now (queued ones are untouched) and waits until it has
    /// ended — stopped cooperatively, or its kernel replaced after the grace period. Returns the
    /// status afterwards, and whether anything was running.
    pub async fn interrupt(&self) -> (bool, RuntimeStatus) {
        let mut done = self.shared.operations_done.subscribe();
        done.mark_unchanged();
        {
            let active = self.shared.active.lock().expect("active lock");
            let Some(seq) = *active else {
                return (false, self.status());
            };
            self.shared.interrupts.send_replace(Some(seq));
        }
        // Waiting for the kernel to begin (bounded like a kernel start), the grace, a
        // replacement's start.
        let bound = self.shared.options.timeouts.kernel_startup * 2
            + self.shared.options.timeouts.interruption_grace
            + Duration::from_secs(2);
        let _ = tokio::time::timeout(bound, done.changed()).await;
        (true, self.status())
    }

    /// Makes the session's actor panic when it reaches this in its queue. Only the test mode
    /// calls it (a fixture tool), to check that a panicking actor is supervised.
    #[doc(hidden)]
    pub fn inject_panic(&self) -> bool {
        self.inbox.send(Command::Panic).is_ok()
    }

    /// Starts `shutdown` without waiting for it: from here on, requests the server itself
    /// cancels (its transport closing) end `runtime_closed`, not as cancelled by the client.
    pub fn begin_shutdown(&self) {
        self.shared.shutdown.cancel();
    }

    /// Stops admission, ends queued requests with `runtime_closed`, interrupts active work and
    /// terminates the kernel. Safe to call more than once.
    pub async fn shutdown(&self) {
        self.shared.shutdown.cancel();
        let mut finished = self.shared.finished.subscribe();
        let bound = self.shared.options.timeouts.interruption_grace * 2 + Duration::from_secs(5);
        let _ = tokio::time::timeout(bound, finished.wait_for(|finished| *finished)).await;
    }
}

/// Turns an operation's outcome into a helper call's: the helper's own reply when it answered,
/// the session's error otherwise (busy, timeout, kernel died…).
fn helper_output(output: ExecutionOutput, reply: Option<serde_json::Value>) -> HelperOutput {
    let runtime = output.runtime.clone();
    // Stopped by its deadline, a cancellation or shutdown: the session's error says so (the
    // helper would only report the KeyboardInterrupt it was stopped with).
    let reply = match output.status {
        ExecutionStatus::Timeout | ExecutionStatus::Cancelled if output.error.is_some() => None,
        _ => reply,
    };
    match reply {
        Some(reply) if reply.get("ok").and_then(serde_json::Value::as_bool) == Some(true) => {
            HelperOutput {
                ok: true,
                result: reply.get("result").cloned(),
                error: None,
                runtime,
            }
        }
        Some(reply) => {
            let error = reply.get("error").cloned().unwrap_or_default();
            let text = |key: &str| {
                error
                    .get(key)
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned)
            };
            // A code the server does not know means the helper and server disagree: a bug.
            let code = match text("code") {
                None => Code::ExecutionError,
                Some(wire) => Code::from_wire(&wire).unwrap_or(Code::InternalError),
            };
            let mut info = ErrorInfo::new(
                code,
                text("message").unwrap_or_else(|| "the helper reported an error".to_owned()),
            );
            info.ename = text("ename");
            info.evalue = text("evalue");
            // The helper sends traceback entries (already ANSI-free and bounded); join them.
            info.traceback = match error.get("traceback") {
                Some(serde_json::Value::Array(entries)) => Some(
                    entries
                        .iter()
                        .filter_map(serde_json::Value::as_str)
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
                _ => text("traceback"),
            };
            HelperOutput {
                ok: false,
                // What the helper worked out before it failed (e.g. the fields of an
                // `inspect` whose repr raised), kept beside the error.
                result: reply.get("result").cloned(),
                error: Some(info),
                runtime,
            }
        }
        None => {
            let error = output.error.unwrap_or_else(|| {
                ErrorInfo::new(Code::ExecutionError, "the helper did not answer")
            });
            HelperOutput {
                ok: false,
                result: None,
                error: Some(error),
                runtime,
            }
        }
    }
}

fn closed_error() -> ErrorInfo {
    ErrorInfo::new(
        Code::RuntimeClosed,
        "the server is shutting down; nothing ran",
    )
}

fn closing_error() -> ErrorInfo {
    ErrorInfo::new(
        Code::RuntimeClosed,
        "the server shut down while this was running; it was interrupted",
    )
}

/// What every call gets after the actor panicked, until `kernel_restart`.
fn failed_error(what_happened: &str) -> ErrorInfo {
    ErrorInfo::new(
        Code::RuntimeUnavailable,
        format!("an internal error stopped this kernel session; {what_happened}"),
    )
    .with_hint(
        "call kernel_restart for this kernel: it starts a fresh one (earlier variables are gone)",
    )
}

fn unavailable_error(status: &RuntimeStatus) -> ErrorInfo {
    let reason = status
        .error
        .as_ref()
        .map_or("the kernel could not be started".to_owned(), |error| {
            error.message.clone()
        });
    ErrorInfo::new(Code::RuntimeUnavailable, format!("the kernel is unavailable: {reason}"))
        .with_hint("see runtime_status for details; fix the cause (e.g. set IPYTHON_MCP_PYTHON) and restart the server")
}

/// The running kernel and what we know about it.
struct Running {
    kernel: Kernel,
    helper_comm: Option<String>,
    description: KernelDescription,
}

/// A spare kernel being prepared (or ready) in the background.
type Spare = tokio::task::JoinHandle<Result<Running, ErrorInfo>>;

struct Actor {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedReceiver<Command>,
    environment: Option<PythonEnvironment>,
    kernel: Option<Running>,
    spares: std::collections::VecDeque<Spare>,
    epoch: u64,
    /// Set when the kernel was replaced between calls (it died while idle): the next call's
    /// result says so, since nothing else would tell the agent its state is gone.
    unreported_reset: Option<String>,
    /// The last answer's spool work outlasted its wait: the disk is behind, so answers wait
    /// only briefly until spool work finishes within that again.
    spool_lagging: bool,
}

/// Runs the session's actor and outlives it: the inbox lives here, so when the actor panics,
/// `fail` can answer every caller and wait for `kernel_restart`, which starts a fresh actor on
/// the same inbox. Without this, a panic would drop the inbox and leave callers told the server
/// is shutting down.
async fn supervise(shared: Arc<Shared>, commands: mpsc::UnboundedReceiver<Command>) {
    use futures_util::FutureExt as _;
    let mut actor = Actor::new(Arc::clone(&shared), commands);
    let mut restart = None;
    loop {
        // The actor's state is thrown away after a panic (only its inbox, environment and epoch
        // are kept, and its kernels are killed), so nothing observes it half-updated.
        let ran = std::panic::AssertUnwindSafe(actor.run(restart.take()))
            .catch_unwind()
            .await;
        if ran.is_ok() {
            return; // closed
        }
        tracing::error!(kernel_id = %shared.options.kernel_id, "session actor panicked; the session is unavailable until kernel_restart");
        match actor.fail().await {
            Some(reply) => {
                actor = actor.respawn();
                restart = Some(reply);
            }
            None => {
                actor.close().await;
                return;
            }
        }
    }
}

impl Actor {
    fn new(shared: Arc<Shared>, commands: mpsc::UnboundedReceiver<Command>) -> Actor {
        Actor {
            shared,
            commands,
            environment: None,
            kernel: None,
            spares: std::collections::VecDeque::new(),
            epoch: 0,
            unreported_reset: None,
            spool_lagging: false,
        }
    }

    /// After a panic: kills the kernels, marks the session unavailable, answers every caller
    /// (the dropped replies of the operation it was running, and every queued one) and waits
    /// for a restart, which it returns; `None` when the session closes first.
    async fn fail(&mut self) -> Option<oneshot::Sender<RuntimeStatus>> {
        // A panic while a lock was held must not turn every later call into a panic too.
        self.shared.status.clear_poison();
        self.shared.active.clear_poison();
        self.shared.admission.clear_poison();
        *self.shared.active.lock().expect("active lock") = None;
        self.shared.failed.store(true, Ordering::Release);
        // Its kernel is gone, as in a replacement: the epoch advances (which also unlists its
        // dynamic tools), and again when a restart brings a new one.
        self.epoch += 1;
        let epoch = self.epoch;
        self.update(|status| {
            status.state = SessionState::Unavailable;
            status.epoch = epoch;
            status.kernel = None;
            status.operation_active = false;
            status.latest_interruption_kind = None;
            status.latest_namespace_outcome = Some(NamespaceOutcome::Reset);
            status.error = Some(failed_error("calls fail until it is restarted"));
        });
        self.shared.epoch.send_replace(epoch);
        // Wakes the callers whose replies the panic dropped (see `SessionHandle::lost`).
        self.shared.failures.send_modify(|count| *count += 1);
        self.shared.operations_done.send_modify(|done| *done += 1);
        if let Some(running) = self.kernel.take() {
            running.kernel.kill().await;
        }
        self.drop_spares().await;
        let shutdown = self.shared.shutdown.clone();
        loop {
            let command = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return None,
                command = self.commands.recv() => command,
            };
            match command {
                Some(Command::Execute {
                    ticket,
                    args,
                    record,
                    reply,
                    ..
                }) => {
                    self.refuse(
                        &ticket,
                        &args,
                        record.as_deref(),
                        reply,
                        failed_error("nothing ran"),
                    );
                }
                Some(Command::Restart { reply }) => return Some(reply),
                Some(Command::Panic) => {}
                None => return None,
            }
        }
    }

    /// A fresh actor on the same inbox, for `kernel_restart` after a panic: the environment is
    /// kept (no new provisioning), and it starts its kernel in the next epoch.
    fn respawn(self) -> Actor {
        let mut actor = Actor::new(Arc::clone(&self.shared), self.commands);
        actor.environment = self.environment;
        actor.epoch = self.epoch;
        actor
    }

    /// Starts the kernel and serves the inbox until shutdown. `restart` is set for a respawned
    /// actor: the restart it answers once its kernel is up, in a new epoch.
    async fn run(&mut self, restart: Option<oneshot::Sender<RuntimeStatus>>) {
        let shutdown = self.shared.shutdown.clone();
        if restart.is_some() {
            self.epoch += 1;
            let epoch = self.epoch;
            self.update(|status| {
                status.state = SessionState::Recovering;
                status.epoch = epoch;
                status.error = None;
                status.latest_interruption_kind = None;
                status.latest_namespace_outcome = Some(NamespaceOutcome::Reset);
            });
            self.shared.epoch.send_replace(epoch);
            self.shared.failed.store(false, Ordering::Release);
        }
        // The spool directory first: the helper is told where it is (a respawned actor finds
        // it open already).
        tokio::select! {
            () = self.shared.executions.open() => {}
            _ = shutdown.cancelled() => {}
        }
        if self.environment.is_none() {
            self.environment = tokio::select! {
                environment = self.provision() => environment,
                _ = shutdown.cancelled() => None,
            };
        }
        if let Some(environment) = self.environment.clone() {
            let started = Instant::now();
            let launched = tokio::select! {
                launched = prepare(Arc::clone(&self.shared), environment) => Some(launched),
                _ = shutdown.cancelled() => None,
            };
            match launched {
                Some(Ok(running)) => {
                    let elapsed = started.elapsed().as_secs_f64();
                    self.adopt(running);
                    self.update(|status| {
                        status.state = SessionState::Ready;
                        status.startup_seconds = Some(elapsed);
                        status.error = None;
                    });
                    self.refill_spares();
                }
                Some(Err(error)) => self.set_unavailable(error),
                None => {}
            }
        }
        if let Some(reply) = restart {
            let _ = reply.send(self.shared.status.lock().expect("status lock").clone());
        }
        if !shutdown.is_cancelled() {
            self.serve().await;
        }
        self.close().await;
    }

    async fn serve(&mut self) {
        let shutdown = self.shared.shutdown.clone();
        let mut heartbeat = tokio::time::interval(HEARTBEAT_INTERVAL);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut missed_heartbeats = 0;
        loop {
            let exit = self
                .kernel
                .as_ref()
                .map(|running| running.kernel.exit_watch());
            // Biased: once shutdown starts, nothing more is dispatched.
            let command = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                // A kernel that dies while idle is replaced at once, not on the next call.
                _ = kernel_exit(exit) => {
                    let exit = self.kernel.as_ref().and_then(|running| running.kernel.exit_watch().borrow().clone());
                    let detail = exit.map_or("it exited".to_owned(), |exit| exit.to_string());
                    tracing::warn!(%detail, "kernel died while idle; replacing it");
                    self.replace().await;
                    self.update(|status| {
                        status.latest_interruption_kind = None;
                        status.latest_namespace_outcome = Some(NamespaceOutcome::Reset);
                    });
                    self.unreported_reset = Some(format!(
                        "the kernel died between calls ({detail}) and was replaced before this one: earlier variables, imports and functions are gone"
                    ));
                    continue;
                }
                // An idle kernel that stops answering heartbeats (stopped, deadlocked in C) is
                // replaced too; a busy one is governed by its operation's deadline instead.
                _ = heartbeat.tick(), if self.kernel.is_some() => {
                    let alive = match &self.kernel {
                        Some(running) => running.kernel.heartbeat(HEARTBEAT_TIMEOUT).await,
                        None => true,
                    };
                    missed_heartbeats = if alive { 0 } else { missed_heartbeats + 1 };
                    if missed_heartbeats >= HEARTBEAT_MISSES {
                        missed_heartbeats = 0;
                        tracing::warn!(misses = HEARTBEAT_MISSES, "idle kernel stopped answering heartbeats; replacing it");
                        self.replace().await;
                        self.update(|status| {
                            status.latest_interruption_kind = Some(Interruption::Terminated);
                            status.latest_namespace_outcome = Some(NamespaceOutcome::Reset);
                        });
                        self.unreported_reset = Some(
                            "the kernel stopped answering heartbeats between calls and was replaced before this one: earlier variables, imports and functions are gone".to_owned(),
                        );
                    }
                    continue;
                }
                command = self.commands.recv() => command,
            };
            let (ticket, args, helper, record, reply) = match command {
                Some(Command::Execute {
                    ticket,
                    args,
                    helper,
                    record,
                    reply,
                }) => (ticket, args, helper, record, reply),
                Some(Command::Restart { reply }) => {
                    if shutdown.is_cancelled() {
                        return;
                    }
                    self.replace().await;
                    self.update(|status| {
                        status.latest_interruption_kind = None;
                        status.latest_namespace_outcome = Some(NamespaceOutcome::Reset);
                    });
                    // The caller asked for it: no need to tell the next call.
                    self.unreported_reset = None;
                    let _ = reply.send(self.shared.status.lock().expect("status lock").clone());
                    continue;
                }
                Some(Command::Panic) => panic!("panic requested by the test mode"),
                None => return,
            };
            if shutdown.is_cancelled() {
                return;
            }
            if !ticket.dispatch(&self.shared) {
                continue; // abandoned: its caller already answered queue_timeout or cancelled
            }
            let (mut output, helper_reply) = self
                .execute(&ticket, &args, helper.as_ref(), record.as_ref())
                .await;
            if let Some(notice) = self.unreported_reset.take() {
                output
                    .runtime
                    .namespace
                    .get_or_insert(NamespaceOutcome::Reset);
                output.notice = Some(notice);
            }
            // Recorded before the caller hears, so a caller that stopped waiting loses nothing.
            if let Some(record) = &record {
                record.finish(&output);
                // Then, on the spool queue and before the answer too: the upkeep (retention,
                // large parts to disk) and the server's own spool writes of this execution (a
                // page read after the answer sees everything), then the spool summary. A disk
                // slower than the bound delays only this answer, by at most the bound; pages
                // then say `complete: false` until the writes land.
                let wait = if self.spool_lagging {
                    SPOOL_LAGGING_WAIT
                } else {
                    SPOOL_FLUSH_WAIT
                };
                let settled = tokio::select! {
                    settled = tokio::time::timeout(wait, self.shared.executions.settle(record)) => settled.ok(),
                    _ = shutdown.cancelled() => None,
                };
                self.spool_lagging = settled.is_none() && !shutdown.is_cancelled();
                let omitted = output.stdout_omitted_chars > 0 || output.stderr_omitted_chars > 0;
                match settled {
                    Some(Some(info)) if omitted => {
                        record.set_spool(info.clone());
                        output.spool = Some(info);
                    }
                    Some(_) => {}
                    // At shutdown nobody reads the spool again: not worth a warning.
                    None if shutdown.is_cancelled() => {}
                    None => {
                        tracing::warn!(kernel_id = %self.shared.options.kernel_id, "spool work still pending when answering");
                    }
                }
            }
            let _ = reply.send((output, helper_reply));
            self.shared.operations_done.send_modify(|done| *done += 1);
        }
    }

    /// Makes `running` the session's kernel.
    fn adopt(&mut self, running: Running) {
        let description = running.description.clone();
        self.kernel = Some(running);
        self.update(|status| status.kernel = Some(description));
    }

    /// Starts background preparation of spares until `spare_kernels` are ready or in flight.
    fn refill_spares(&mut self) {
        let Some(environment) = &self.environment else {
            return;
        };
        while self.spares.len() < self.shared.options.spare_kernels
            && !self.shared.shutdown.is_cancelled()
        {
            let shared = Arc::clone(&self.shared);
            let environment = environment.clone();
            self.spares.push_back(tokio::spawn(async move {
                let spare = prepare(Arc::clone(&shared), environment).await;
                if let Ok(running) = &spare {
                    shared
                        .status
                        .lock()
                        .expect("status lock")
                        .spare_kernel_pids
                        .push(running.kernel.pid());
                }
                spare
            }));
        }
    }

    /// A ready (or soon ready) spare, if any survives.
    async fn take_spare(&mut self) -> Option<Running> {
        while let Some(spare) = self.spares.pop_front() {
            if let Ok(Ok(running)) = spare.await {
                let pid = running.kernel.pid();
                self.update(|status| {
                    status
                        .spare_kernel_pids
                        .retain(|spare_pid| *spare_pid != pid)
                });
                if running.kernel.exit_watch().borrow().is_none() {
                    return Some(running);
                }
            }
        }
        None
    }

    async fn provision(&mut self) -> Option<PythonEnvironment> {
        let started = std::time::Instant::now();
        let shared = Arc::clone(&self.shared);
        let progress = move |phase: Phase| {
            let (name, tool) = phase_name(&phase);
            let mut status = shared.status.lock().expect("status lock");
            status.environment = Some(EnvironmentStatus {
                phase: name.to_owned(),
                elapsed_seconds: started.elapsed().as_secs_f64(),
                source: None,
                tool,
                created: false,
                failed_phase: None,
            });
        };
        // Elapsed time keeps moving in runtime_status during a long install.
        let resolving = self.shared.options.resolver.resolve(&progress);
        tokio::pin!(resolving);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let resolved = loop {
            tokio::select! {
                resolved = &mut resolving => break resolved,
                _ = tick.tick() => self.update(|status| {
                    if let Some(environment) = &mut status.environment {
                        environment.elapsed_seconds = started.elapsed().as_secs_f64();
                    }
                }),
            }
        };
        match resolved {
            Ok(environment) => {
                self.update(|status| {
                    status.environment = Some(EnvironmentStatus {
                        phase: "ready".to_owned(),
                        elapsed_seconds: started.elapsed().as_secs_f64(),
                        source: serde_json::to_value(environment.source)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned)),
                        tool: status.environment.as_ref().and_then(|e| e.tool.clone()),
                        created: environment.created,
                        failed_phase: None,
                    });
                });
                tracing::info!(python = %environment.executable.display(), created = environment.created, "python environment ready");
                Some(environment)
            }
            Err(error) => {
                let phase = error.phase();
                self.update(|status| {
                    if let Some(environment) = &mut status.environment {
                        environment.phase = "failed".to_owned();
                        environment.failed_phase = Some(phase.to_owned());
                        environment.elapsed_seconds = started.elapsed().as_secs_f64();
                    }
                });
                let message = format!("environment {phase} phase failed: {error}");
                self.set_unavailable(ErrorInfo::new(Code::RuntimeUnavailable, message));
                let logged = self
                    .shared
                    .status
                    .lock()
                    .expect("status lock")
                    .error
                    .as_ref()
                    .map(|error| error.message.clone());
                tracing::error!(
                    phase,
                    error = logged.unwrap_or_default(),
                    "python environment unavailable"
                );
                None
            }
        }
    }

    /// The one place an unavailable session's error is stored: configured variable values and
    /// URL credentials are masked, and the message is bounded by `max_text_chars`.
    fn set_unavailable(&self, mut error: ErrorInfo) {
        let options = &self.shared.options;
        let redactor = options.namespace.variables.redactor();
        error.message = crate::bound::bound_message(
            &redactor.redact(&error.message),
            options.limits.max_text_chars,
        );
        self.update(|status| {
            status.state = SessionState::Unavailable;
            status.kernel = None;
            status.error = Some(error);
        });
    }

    fn update(&self, change: impl FnOnce(&mut RuntimeStatus)) {
        change(&mut self.shared.status.lock().expect("status lock"));
    }

    async fn execute(
        &mut self,
        ticket: &Ticket,
        args: &ExecuteArgs,
        helper: Option<&HelperRequest>,
        record: Option<&Arc<Record>>,
    ) -> Outcome {
        let options = self.shared.options.clone();
        let queue_wait_ms = ticket.enqueued_at.elapsed().as_millis() as u64;
        let runtime = |epoch: u64, run_ms: u64| RuntimeInfo {
            request_id: args.request_id.clone(),
            admission_seq: ticket.seq,
            epoch,
            queue_wait_ms,
            run_ms,
            interruption: None,
            namespace: None,
        };
        let Some(running) = &self.kernel else {
            let status = self.shared.status.lock().expect("status lock").clone();
            return (
                ExecutionOutput::not_run(
                    ticket.execution_id.clone(),
                    runtime(self.epoch, 0),
                    unavailable_error(&status),
                ),
                None,
            );
        };
        // Helper calls travel as a comm message to the helper; the reply is matched by id.
        let helper_message = match (helper, &running.helper_comm) {
            (None, _) => None,
            (Some(helper), Some(comm_id)) => {
                let request_id = uuid::Uuid::new_v4().to_string();
                let mut data = serde_json::Map::new();
                data.insert("id".into(), request_id.clone().into());
                data.insert("method".into(), helper.method.clone().into());
                data.insert("params".into(), helper.params.clone());
                let message = JupyterMessage::new(
                    CommMsg {
                        comm_id: CommId(comm_id.clone()),
                        data,
                    },
                    None,
                );
                Some((request_id, message))
            }
            (Some(_), None) => {
                let error = ErrorInfo::new(Code::UnsupportedKernel, "this kernel has no ipython-mcp helper (not a Python kernel); only execute works here");
                return (
                    ExecutionOutput::not_run(
                        ticket.execution_id.clone(),
                        runtime(self.epoch, 0),
                        error,
                    ),
                    None,
                );
            }
        };
        // Subscribed before the operation is visible as active, so an interrupt() aimed at it
        // is always seen.
        let mut interrupts = self.shared.interrupts.subscribe();
        let seq = ticket.seq;
        *self.shared.active.lock().expect("active lock") = Some(seq);
        self.update(|status| {
            status.state = SessionState::Busy;
            status.operation_active = true;
        });
        let started = Instant::now();
        let timeout = args.timeout.unwrap_or(options.timeouts.operation);
        let deadline = started + timeout;
        let collector = Arc::new(Mutex::new(Collector::new(
            options.limits,
            options.max_json_items,
            running.helper_comm.clone(),
        )));
        // A reader (get_output) may look at the collector while messages arrive.
        let request = match helper_message {
            Some((request_id, message)) => {
                locked(&collector).expect_helper_reply(request_id);
                message
            }
            None => JupyterMessage::new(
                ExecuteRequest {
                    code: args.code.clone(),
                    silent: false,
                    store_history: true,
                    user_expressions: None,
                    allow_stdin: false,
                    // One request at a time anyway; never abort what a later caller queued.
                    stop_on_error: false,
                },
                None,
            ),
        };
        let shutdown = self.shared.shutdown.clone();
        // Why the operation was interrupted, if it was; the first cause wins.
        let mut cause: Option<Cause> = None;
        let mut ended = End::Completed;
        // The execute_request's msg_id when this execution has spool files (names them).
        let mut spooled_as: Option<String> = None;
        // Even the send is bounded: a kernel that stopped reading its socket must not hold us.
        match tokio::time::timeout_at(deadline, running.kernel.request(Channel::Shell, request))
            .await
        {
            Err(_) => {
                cause = Some(Cause::Deadline);
                ended = End::Killed;
            }
            Ok(Err(error)) => ended = End::Died(error.to_string()),
            Ok(Ok((msg_id, mut receiver))) => {
                if let Some(record) = record {
                    record.dispatched(&msg_id, self.epoch, Arc::clone(&collector));
                    spooled_as = Some(msg_id.clone());
                }
                // The helper spools its kernel's streams itself; other kernels' output is
                // spooled here as it arrives.
                let mut spool_writer = match (&running.helper_comm, record) {
                    (None, Some(record)) => {
                        SpoolWriter::new(&self.shared.executions, record, &msg_id)
                    }
                    _ => None,
                };
                // The interrupt, once a cause is decided: its delivery waits for the kernel to
                // begin the request (ipykernel ignores SIGINT until then; bounded like a kernel
                // start), and the grace period counts from delivery, so a kernel slow to begin
                // on a busy machine is never taken for one that ignored SIGINT.
                let mut interrupt = InterruptState::Idle;
                let mut start_wait_over = false;
                // After the reply, `idle` normally follows at once; if it was lost, do not wait
                // for the deadline (and never interrupt code that has finished).
                let mut idle_deadline: Option<Instant> = None;
                let mut progress_tick =
                    tokio::time::interval_at(started + PROGRESS_INTERVAL, PROGRESS_INTERVAL);
                loop {
                    if locked(&collector).done() {
                        break;
                    }
                    if matches!(interrupt, InterruptState::Pending { .. })
                        && (start_wait_over || locked(&collector).started())
                    {
                        running.kernel.interrupt().await;
                        interrupt = InterruptState::delivered(options.timeouts.interruption_grace);
                    }
                    if idle_deadline.is_none() {
                        let collected = locked(&collector);
                        // An interrupted kernel can also end a request with `idle` and no reply
                        // (ipykernel drops the reply when the interrupt lands between its
                        // handler's start and the user's code): it has stopped all the same.
                        let stopped =
                            matches!(interrupt, InterruptState::Delivered { .. }) && collected.idle;
                        if collected.replied() || stopped {
                            idle_deadline = Some(Instant::now() + IDLE_AFTER_REPLY);
                        }
                    }
                    let wake = idle_deadline.or(interrupt.wake()).unwrap_or(deadline);
                    let interrupt_cause = tokio::select! {
                        routed = receiver.recv() => match routed {
                            Some(routed) => {
                                if let Some(writer) = spool_writer.as_mut() {
                                    writer.absorb(&routed);
                                }
                                locked(&collector).absorb(routed);
                                None
                            }
                            None => {
                                let exit = running.kernel.exit_watch().borrow().as_ref().map_or("kernel exited".to_owned(), ToString::to_string);
                                ended = End::Died(exit);
                                break;
                            }
                        },
                        _ = tokio::time::sleep_until(wake) => {
                            if idle_deadline.is_some() {
                                break; // the kernel is idle again: the request is finished
                            }
                            match interrupt {
                                InterruptState::Idle => Some(Cause::Deadline),
                                InterruptState::Pending { .. } => {
                                    // The kernel never said it began: interrupt it anyway (some
                                    // kernels announce nothing), with the full grace from now.
                                    start_wait_over = true;
                                    None
                                }
                                InterruptState::Delivered { .. } => {
                                    ended = End::Killed;
                                    break;
                                }
                            }
                        },
                        _ = progress_tick.tick(), if args.progress.is_some() => {
                            if let Some(progress) = &args.progress {
                                let message = locked(&collector).latest_line().map_or_else(|| "running, no output yet".to_owned(), str::to_owned);
                                let _ = progress.send(Progress { elapsed_seconds: started.elapsed().as_secs_f64(), message });
                            }
                            None
                        }
                        // Shutdown also cancels every request: that is not the client's doing.
                        _ = ticket.cancel.cancelled(), if cause.is_none() => Some(if shutdown.is_cancelled() { Cause::Closing } else { Cause::Cancelled }),
                        _ = interrupts.wait_for(|target| *target == Some(seq)), if cause.is_none() => Some(Cause::Interrupted),
                        _ = shutdown.cancelled(), if cause.is_none() => Some(Cause::Closing),
                    };
                    if let (Some(new_cause), None) = (interrupt_cause, cause) {
                        cause = Some(new_cause);
                        // Shutting down, the kernel goes away whatever it does: no waiting for
                        // it to begin, only the grace to stop.
                        interrupt = if new_cause == Cause::Closing || locked(&collector).started() {
                            running.kernel.interrupt().await;
                            InterruptState::delivered(options.timeouts.interruption_grace)
                        } else {
                            InterruptState::Pending {
                                until: Instant::now() + options.timeouts.kernel_startup,
                            }
                        };
                    }
                }
                if let (Some(record), Some(writer)) = (record, spool_writer) {
                    writer.finish(Arc::clone(record));
                }
                running.kernel.forget(&msg_id);
            }
        }
        let run_ms = started.elapsed().as_millis() as u64;
        let (finished, budget) = {
            let collector = locked(&collector);
            (collector.clone().finish(), collector.budget())
        };
        let mut spool_files = spooled_as.and_then(|msg_id| {
            let (dir, _) = self.shared.executions.spool()?;
            Some(SpoolFiles::new(dir, &msg_id))
        });
        // Downscaling decodes and encodes images and writes their originals: never on the
        // async threads (and nothing to do without displays or a result).
        let collected = if finished.display_data.is_empty() && finished.result.is_none() {
            finished
        } else {
            match tokio::task::spawn_blocking(move || {
                let mut finished = finished;
                finished.settle(budget, spool_files.as_mut());
                finished
            })
            .await
            {
                Ok(collected) => collected,
                // Only a panic gets here (each image is decoded under catch_unwind): answer with
                // what arrived, no image over the bound, rather than lose the execution.
                Err(error) => {
                    tracing::error!(%error, "settling an execution's displays failed");
                    locked(&collector).snapshot()
                }
            }
        };
        if let Some(record) = record {
            record.add_spool_dropped(collected.spool_dropped);
        }
        let helper_reply = collected.helper_reply.clone();
        // A helper call finished by itself only if the helper says it succeeded: its error reply
        // to an interrupt (KeyboardInterrupt) is the interrupt's doing, not the function's.
        let helper_succeeded = helper_reply
            .as_ref()
            .and_then(|reply| reply.get("ok"))
            .and_then(serde_json::Value::as_bool)
            == Some(true);
        let finished_ok = helper_succeeded
            || matches!(
                collected.reply.as_ref().map(|reply| &reply.status),
                Some(ReplyStatus::Ok)
            );
        let mut status = if finished_ok {
            ExecutionStatus::Ok
        } else {
            ExecutionStatus::Error
        };
        let mut error = collected.error.clone();
        let mut interruption = cause.map(|_| Interruption::Cooperative);
        let mut namespace = None;
        match (&ended, cause) {
            (End::Completed, None) => {}
            // The code finished by itself before the interrupt could matter.
            (End::Completed, Some(_)) if finished_ok => {
                namespace = Some(NamespaceOutcome::Preserved)
            }
            (End::Completed, Some(cause)) => {
                // Cooperative stop: confirm the kernel still answers before promising anything.
                let healthy = running.kernel.heartbeat(COOPERATIVE_HEARTBEAT).await;
                namespace = Some(if healthy {
                    NamespaceOutcome::Preserved
                } else {
                    NamespaceOutcome::Unknown
                });
                let kept = "the namespace was preserved: anything defined before the interrupt is still there";
                (status, error) = match cause {
                    Cause::Deadline => (
                        ExecutionStatus::Timeout,
                        Some(
                            ErrorInfo::new(
                                Code::OperationTimeout,
                                format!(
                                    "execution exceeded its {:.1}s deadline and was interrupted",
                                    timeout.as_secs_f64()
                                ),
                            )
                            .with_hint(kept),
                        ),
                    ),
                    Cause::Cancelled => (
                        ExecutionStatus::Cancelled,
                        Some(
                            ErrorInfo::new(
                                Code::OperationCancelled,
                                "cancelled by the client; the kernel was interrupted",
                            )
                            .with_hint(kept),
                        ),
                    ),
                    Cause::Interrupted => (
                        ExecutionStatus::Cancelled,
                        Some(
                            ErrorInfo::new(
                                Code::OperationCancelled,
                                "stopped by an interrupt call",
                            )
                            .with_hint(kept),
                        ),
                    ),
                    Cause::Closing => (ExecutionStatus::Cancelled, Some(closing_error())),
                };
            }
            (End::Killed, Some(Cause::Closing)) => {
                // Shutting down: the kernel is stopped by close(), never replaced.
                status = ExecutionStatus::Cancelled;
                interruption = Some(Interruption::Terminated);
                namespace = Some(NamespaceOutcome::Reset);
                error = Some(closing_error());
            }
            (End::Killed, cause) | (End::Died(_), cause) => {
                let died = matches!(ended, End::Died(_));
                let replaced = self.replace().await;
                let hint = if replaced {
                    "a fresh kernel replaced it: every variable, import and function is gone; re-run your setup"
                } else if shutdown.is_cancelled() {
                    "the server is shutting down"
                } else {
                    "no replacement kernel could be started; see runtime_status"
                };
                namespace = Some(NamespaceOutcome::Reset);
                let grace = options.timeouts.interruption_grace.as_secs_f64();
                let (code, message) = match (&ended, cause) {
                    (End::Died(exit), _) => (Code::KernelDied, format!("the kernel process died during execution ({exit})")),
                    (_, Some(Cause::Cancelled)) => (
                        Code::OperationCancelled,
                        format!("cancelled by the client; the code did not stop within {grace:.1}s of an interrupt, so the kernel was killed"),
                    ),
                    (_, Some(Cause::Interrupted)) => (
                        Code::OperationCancelled,
                        format!("stopped by an interrupt call; the code did not stop within {grace:.1}s, so the kernel was killed"),
                    ),
                    _ => (
                        Code::OperationTimeout,
                        format!(
                            "execution exceeded its {:.1}s deadline and did not stop within {grace:.1}s of an interrupt; the kernel was killed",
                            timeout.as_secs_f64()
                        ),
                    ),
                };
                status = match (died, cause) {
                    (true, _) => ExecutionStatus::Error,
                    (false, Some(Cause::Cancelled | Cause::Interrupted)) => {
                        ExecutionStatus::Cancelled
                    }
                    _ => ExecutionStatus::Timeout,
                };
                if !died {
                    interruption = Some(Interruption::Terminated);
                }
                error = Some(ErrorInfo::new(code, message).with_hint(hint));
            }
        }
        *self.shared.active.lock().expect("active lock") = None;
        self.update(|status_record| {
            if status_record.state == SessionState::Busy {
                status_record.state = SessionState::Ready;
            }
            status_record.operation_active = false;
            if interruption.is_some() || namespace.is_some() {
                status_record.latest_interruption_kind = interruption;
                status_record.latest_namespace_outcome = namespace;
            }
        });
        let ok = status == ExecutionStatus::Ok && error.is_none();
        let output = ExecutionOutput {
            ok,
            status,
            execution_count: collected
                .reply
                .as_ref()
                .and_then(|reply| reply.execution_count),
            stdout: collected.stdout,
            stderr: collected.stderr,
            stdout_omitted_chars: collected.stdout_omitted_chars,
            stderr_omitted_chars: collected.stderr_omitted_chars,
            display_data: collected.display_data,
            display_omitted: collected.display_omitted,
            result: collected.result,
            result_metadata: (!collected.result_metadata.is_empty())
                .then_some(collected.result_metadata),
            withheld: collected.withheld,
            error,
            truncated: collected.truncated,
            execution_id: ticket.execution_id.clone(),
            runtime: RuntimeInfo {
                interruption,
                namespace,
                // The epoch the session is in now: after a replacement, the new one, so the
                // reply itself shows the change (`namespace: reset`).
                ..runtime(self.epoch, run_ms)
            },
            notice: None,
            spool: None,
        };
        (output, helper_reply)
    }

    /// Kills the current kernel and promotes a spare (or starts a fresh kernel); the epoch
    /// advances either way.
    async fn replace(&mut self) -> bool {
        self.update(|status| status.state = SessionState::Recovering);
        if let Some(running) = self.kernel.take() {
            running.kernel.kill().await;
        }
        self.epoch += 1;
        let epoch = self.epoch;
        self.update(|status| {
            status.epoch = epoch;
            status.kernel = None;
        });
        self.shared.epoch.send_replace(epoch);
        let Some(environment) = self.environment.clone() else {
            // No Python environment (provisioning failed): nothing can start, so the session
            // stays unavailable with the provisioning error instead of `recovering` forever.
            self.update(|status| status.state = SessionState::Unavailable);
            return false;
        };
        if self.shared.shutdown.is_cancelled() {
            return false;
        }
        let started = Instant::now();
        let shutdown = self.shared.shutdown.clone();
        let launched = tokio::select! {
            launched = async {
                match self.take_spare().await {
                    Some(running) => Ok(running),
                    None => prepare(Arc::clone(&self.shared), environment).await,
                }
            } => launched,
            _ = shutdown.cancelled() => return false,
        };
        match launched {
            Ok(running) => {
                self.adopt(running);
                let elapsed = started.elapsed().as_secs_f64();
                tracing::info!(
                    epoch,
                    elapsed_ms = (elapsed * 1000.0) as u64,
                    "kernel replaced"
                );
                self.update(|status| {
                    status.state = SessionState::Ready;
                    status.replacement_startup_seconds = Some(elapsed);
                    status.error = None;
                });
                self.refill_spares();
                true
            }
            Err(error) => {
                let redactor = self.shared.options.namespace.variables.redactor();
                tracing::error!(message = %redactor.redact(&error.message), "kernel replacement failed");
                self.set_unavailable(error);
                false
            }
        }
    }

    /// Answers a queued request that will never run (unless its caller already gave up), and
    /// records it for `get_output`.
    fn refuse(
        &self,
        ticket: &Ticket,
        args: &ExecuteArgs,
        record: Option<&Record>,
        reply: oneshot::Sender<Outcome>,
        error: ErrorInfo,
    ) {
        if !ticket.abandon(&self.shared) {
            return;
        }
        let runtime = RuntimeInfo {
            request_id: args.request_id.clone(),
            admission_seq: ticket.seq,
            epoch: self.epoch,
            queue_wait_ms: ticket.enqueued_at.elapsed().as_millis() as u64,
            run_ms: 0,
            interruption: None,
            namespace: None,
        };
        let output = ExecutionOutput::not_run(ticket.execution_id.clone(), runtime, error);
        if let Some(record) = record {
            record.finish(&output);
        }
        let _ = reply.send((output, None));
    }

    /// Spares never ran user code: a kill is enough. One still starting is aborted, which
    /// drops its launch and kills its process.
    async fn drop_spares(&mut self) {
        while let Some(spare) = self.spares.pop_front() {
            spare.abort();
            if let Ok(Ok(running)) = spare.await {
                running.kernel.kill().await;
            }
        }
        self.update(|status| status.spare_kernel_pids.clear());
    }

    async fn close(&mut self) {
        self.update(|status| {
            status.state = SessionState::Closed;
            status.operation_active = false;
        });
        self.commands.close();
        while let Ok(command) = self.commands.try_recv() {
            let Command::Execute {
                ticket,
                args,
                record,
                reply,
                ..
            } = command
            else {
                continue;
            };
            self.refuse(&ticket, &args, record.as_deref(), reply, closed_error());
        }
        if let Some(running) = self.kernel.take() {
            running
                .kernel
                .shutdown(
                    self.shared
                        .options
                        .timeouts
                        .interruption_grace
                        .min(Duration::from_secs(2)),
                )
                .await;
        }
        self.drop_spares().await;
        self.shared.finished.send_replace(true);
        tracing::debug!(kernel_id = %self.shared.options.kernel_id, "session closed");
    }
}

/// Starts a kernel and installs the helper; touches no session state, so spares use it too.
async fn prepare(
    shared: Arc<Shared>,
    environment: PythonEnvironment,
) -> Result<Running, ErrorInfo> {
    let options = &shared.options;
    // Our own ipykernel launch by default. A kernelspec is launched with exactly its argv, env
    // and interrupt mode (the launcher adds our ipykernel options only where the argv runs
    // ipykernel); an ipykernel spec gets the helper, any other kernel none.
    let (spec, with_helper, spec_name) = match &options.kernel_spec {
        None => (
            LaunchSpec {
                python: environment.executable.clone(),
                env: Vec::new(),
                working_dir: options.working_dir.clone(),
                interrupt_mode: Default::default(),
                argv: None,
                kernel_name: None,
            },
            true,
            "python3".to_owned(),
        ),
        Some(kernel_spec) => {
            let command = kernel_spec.command(&environment.executable, &environment.python_version);
            let spec = LaunchSpec {
                python: std::path::PathBuf::from(&command[0]),
                env: kernel_spec
                    .environment()
                    .into_iter()
                    .map(|(key, value)| (key.into(), value.into()))
                    .collect(),
                working_dir: options.working_dir.clone(),
                interrupt_mode: kernel_spec.interrupt_mode,
                argv: Some(command),
                kernel_name: Some(kernel_spec.name.clone()),
            };
            (spec, kernel_spec.is_ipykernel(), kernel_spec.name.clone())
        }
    };
    let started = Instant::now();
    let spec = with_variables(spec, &options.namespace.variables);
    let kernel = Kernel::launch(&spec, options.timeouts.kernel_startup)
        .await
        .map_err(|error| ErrorInfo::new(Code::RuntimeUnavailable, error.to_string()))?;
    let remaining = options
        .timeouts
        .kernel_startup
        .saturating_sub(started.elapsed())
        .max(Duration::from_secs(1));
    let spool = shared.executions.spool();
    let helper_comm = if !with_helper {
        None
    } else {
        Some(
            match helper::install(
                &kernel,
                &options.limits,
                &options.namespace,
                spool,
                remaining,
            )
            .await
            {
                Ok(comm) => comm,
                Err(error @ helper::InstallError::Namespace { .. }) => {
                    kernel.shutdown(Duration::from_millis(200)).await;
                    let error = ErrorInfo::new(Code::RuntimeUnavailable, error.to_string())
                .with_hint("check IPYTHON_MCP_LIBRARY_PATHS, IPYTHON_MCP_PRELOAD_MODULES and IPYTHON_MCP_MODULE_ALIASES, then restart the server");
                    return Err(error);
                }
                Err(error) => {
                    let message = format!("{error}; kernel stderr: {}", kernel.stderr_tail());
                    kernel.shutdown(Duration::from_millis(200)).await;
                    return Err(ErrorInfo::new(Code::RuntimeUnavailable, message));
                }
            },
        )
    };
    let info = kernel.info();
    let description = KernelDescription {
        pid: kernel.pid(),
        python: spec.python.display().to_string(),
        language: info.language_info.name.clone(),
        python_version: info.language_info.version.clone(),
        ipykernel_version: if options.kernel_spec.is_none() {
            environment.ipykernel_version.clone()
        } else {
            String::new()
        },
        implementation: format!("{} {}", info.implementation, info.implementation_version),
        spec: spec_name,
        helper: helper_comm.is_some(),
        working_dir: match &spec.working_dir {
            Some(dir) => dir.display().to_string(),
            None => std::env::current_dir()
                .map(|dir| dir.display().to_string())
                .unwrap_or_default(),
        },
    };
    tracing::debug!(
        pid = description.pid,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "kernel prepared"
    );
    Ok(Running {
        kernel,
        helper_comm,
        description,
    })
}

/// The collector, locked (a panic elsewhere cannot leave it inconsistent).
fn locked(collector: &Mutex<Collector>) -> std::sync::MutexGuard<'_, Collector> {
    collector
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Resolves when the watched kernel has exited; never, when there is no kernel.
async fn kernel_exit(exit: Option<watch::Receiver<Option<ipython_mcp_jupyter::KernelExit>>>) {
    match exit {
        Some(mut exit) => {
            let _ = exit.wait_for(Option::is_some).await;
        }
        None => std::future::pending().await,
    }
}

/// Idle kernels are pinged this often; `HEARTBEAT_MISSES` missed pings in a row replace them.
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(2);
const HEARTBEAT_MISSES: u32 = 3;

/// The heartbeat that confirms a cooperatively stopped kernel still answers before its
/// namespace is called preserved; ipykernel answers it from a thread of its own, so only a
/// stalled machine makes it slow.
const COOPERATIVE_HEARTBEAT: Duration = Duration::from_secs(5);

/// Progress notifications are sent at most this often.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// How long to wait for `idle` once the reply is in (or for the reply once an interrupted
/// kernel is idle). Both normally arrive together; this only bounds a lost message, so it is
/// generous: iopub can lag the shell reply by seconds on a loaded machine, and ending early
/// would cut the output's tail.
const IDLE_AFTER_REPLY: Duration = Duration::from_secs(5);

/// How long an answer waits for the spool work of its execution (upkeep, the server's own
/// writes for kernels without the helper, the summary); a slower disk delays only this
/// session's answer, by at most this, and its pages say `complete: false` until the writes land.
const SPOOL_FLUSH_WAIT: Duration = Duration::from_secs(5);

/// The wait instead, while the disk is known to be behind (so a hung disk costs one answer
/// the full wait, not every answer).
const SPOOL_LAGGING_WAIT: Duration = Duration::from_millis(200);

/// Where an operation's interrupt is.
#[derive(Debug, Clone, Copy)]
enum InterruptState {
    /// None decided.
    Idle,
    /// Decided, held until the kernel begins the request (at most `until`).
    Pending { until: Instant },
    /// Sent; the kernel has until `grace_until` to stop, then it is killed.
    Delivered { grace_until: Instant },
}

impl InterruptState {
    fn delivered(grace: Duration) -> Self {
        Self::Delivered {
            grace_until: Instant::now() + grace,
        }
    }

    /// The next moment the interrupt itself needs the loop to act, if any.
    fn wake(self) -> Option<Instant> {
        match self {
            Self::Idle => None,
            Self::Pending { until } => Some(until),
            Self::Delivered { grace_until } => Some(grace_until),
        }
    }
}

/// How the wait for an operation ended.
enum End {
    /// Reply and idle arrived (possibly after an interrupt).
    Completed,
    /// It did not stop within the grace period after an interrupt.
    Killed,
    /// The kernel process exited.
    Died(String),
}

/// Why an operation was interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Deadline,
    Cancelled,
    /// An `interrupt` call, from any client.
    Interrupted,
    Closing,
}

/// Configured variables go into the kernel process's environment (after a kernelspec's own),
/// so they exist before the helper adds library paths and imports preloads.
fn with_variables(mut spec: LaunchSpec, variables: &ipython_mcp_config::Variables) -> LaunchSpec {
    spec.env.extend(
        variables
            .iter()
            .map(|(name, value)| (name.into(), value.into())),
    );
    spec
}

fn phase_name(phase: &Phase) -> (&'static str, Option<String>) {
    match phase {
        Phase::Probing => ("probing", None),
        Phase::Validating => ("validating", None),
        Phase::Locking => ("locking", None),
        Phase::Creating { tool } => ("creating", Some(tool.clone())),
        Phase::Installing { tool } => ("installing", Some(tool.clone())),
        Phase::Verifying => ("verifying", None),
        Phase::Ready => ("ready", None),
        #[allow(unreachable_patterns)]
        _ => ("working", None),
    }
}

#[cfg(test)]
mod tests {
    //! Admission logic with paused time and no kernel: the test plays the actor.
    use super::*;

    fn options(max_pending: usize, queue_wait: Duration) -> SessionOptions {
        SessionOptions {
            kernel_id: "test".into(),
            limits: OutputLimits::default(),
            timeouts: Timeouts::default(),
            max_json_items: 100,
            max_pending,
            queue_wait_timeout: queue_wait,
            spare_kernels: 0,
            namespace: Default::default(),
            resolver: Resolver {
                explicit_python: None,
                virtual_env: None,
                working_dir: std::env::temp_dir(),
                path_var: None,
                cache_dir: std::env::temp_dir(),
                install_timeout: Duration::from_secs(1),
                named: None,
            },
            spool: SpoolLimits {
                max_execution_bytes: 0,
                max_total_bytes: 1,
                ..SpoolLimits::default()
            },
            kernel_spec: None,
            working_dir: None,
        }
    }

    fn args(code: &str, cancel: &CancellationToken) -> ExecuteArgs {
        ExecuteArgs {
            code: code.into(),
            request_id: code.into(),
            cancel: cancel.clone(),
            ..Default::default()
        }
    }

    fn code(output: &ExecutionOutput) -> Option<&str> {
        output.error.as_ref().map(|error| error.code.as_str())
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_nobody_dispatches_times_out_and_frees_its_slot() {
        let (handle, _inbox) = SessionHandle::detached(options(1, Duration::from_secs(30)));
        let started = Instant::now();
        let output = handle
            .execute(args("x = 1", &CancellationToken::new()))
            .await;
        assert_eq!(code(&output), Some("queue_timeout"));
        assert_eq!(output.status, ExecutionStatus::Rejected);
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(30),
            "exactly the queue wait"
        );
        assert!(output
            .error
            .as_ref()
            .is_some_and(|error| error.message.contains("for the kernel to start")));
        assert_eq!(handle.status().queue_depth, 0);
        // The slot is free again: the next request is admitted (and times out in turn).
        let output = handle
            .execute(args("x = 2", &CancellationToken::new()))
            .await;
        assert_eq!(code(&output), Some("queue_timeout"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_background_request_waits_for_its_turn_past_the_queue_wait() {
        let (handle, _inbox) = SessionHandle::detached(options(1, Duration::from_secs(30)));
        let output = handle.execute_background(args("x = 1", &CancellationToken::new()));
        assert_eq!(output.status, ExecutionStatus::Pending);
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert_eq!(
            handle.status().queue_depth,
            1,
            "still queued, not timed out"
        );
        let latest = handle.output(None, Duration::ZERO).await.expect("recorded");
        assert_eq!(latest.status, ExecutionStatus::Pending);
        // Its slot is still held: the pending bound applies to background work too.
        let refused = handle.execute_background(args("x = 2", &CancellationToken::new()));
        assert_eq!(code(&refused), Some("runtime_busy"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_interrupt_never_reaches_the_next_operation() {
        let (handle, _inbox) = SessionHandle::detached(options(1, Duration::from_secs(30)));
        let mut targets = handle.shared.interrupts.subscribe();
        *handle.shared.active.lock().expect("active") = Some(1);
        let interrupting = tokio::spawn({
            let handle = handle.clone();
            async move { handle.interrupt().await }
        });
        targets
            .wait_for(|target| *target == Some(1))
            .await
            .expect("aimed");
        // Operation 1 ends and operation 2 begins before the interrupt lands anywhere.
        *handle.shared.active.lock().expect("active") = None;
        handle.shared.operations_done.send_modify(|done| *done += 1);
        *handle.shared.active.lock().expect("active") = Some(2);
        let (interrupted, _) = interrupting.await.expect("join");
        assert!(interrupted);
        assert_eq!(*targets.borrow(), Some(1), "operation 2 is not the target");
        // An interrupt issued now is for operation 2.
        let interrupting = tokio::spawn({
            let handle = handle.clone();
            async move { handle.interrupt().await }
        });
        targets
            .wait_for(|target| *target == Some(2))
            .await
            .expect("aimed at 2");
        *handle.shared.active.lock().expect("active") = None;
        handle.shared.operations_done.send_modify(|done| *done += 1);
        assert!(interrupting.await.expect("join").0);
        // Nothing active: nothing to interrupt.
        assert!(!handle.interrupt().await.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_is_busy_and_cancellation_withdraws() {
        let (handle, mut inbox) = SessionHandle::detached(options(2, Duration::from_secs(30)));
        let first_cancel = CancellationToken::new();
        let first = tokio::spawn({
            let (handle, cancel) = (handle.clone(), first_cancel.clone());
            async move { handle.execute(args("first", &cancel)).await }
        });
        let second = tokio::spawn({
            let handle = handle.clone();
            async move {
                handle
                    .execute(args("second", &CancellationToken::new()))
                    .await
            }
        });
        while handle.status().queue_depth < 2 {
            tokio::task::yield_now().await;
        }
        let busy = handle
            .execute(args("third", &CancellationToken::new()))
            .await;
        assert_eq!(code(&busy), Some("runtime_busy"));

        first_cancel.cancel();
        let first = first.await.expect("join");
        assert_eq!(code(&first), Some("operation_cancelled"));
        assert_eq!(first.status, ExecutionStatus::Cancelled);
        assert_eq!(handle.status().queue_depth, 1);

        // Play the actor: the withdrawn ticket cannot be dispatched; the second can.
        let Some(Command::Execute { ticket, .. }) = inbox.recv().await else {
            panic!("first command")
        };
        assert!(
            !ticket.dispatch(&handle.shared),
            "an abandoned ticket is never dispatched"
        );
        let Some(Command::Execute {
            ticket,
            args,
            reply,
            ..
        }) = inbox.recv().await
        else {
            panic!("second command")
        };
        assert_eq!(args.code, "second");
        assert!(ticket.dispatch(&handle.shared));
        assert!(
            !ticket.abandon(&handle.shared),
            "a dispatched ticket cannot be abandoned"
        );
        let runtime = RuntimeInfo {
            request_id: args.request_id,
            admission_seq: ticket.seq,
            epoch: 0,
            queue_wait_ms: 0,
            run_ms: 0,
            interruption: None,
            namespace: None,
        };
        let mut done = ExecutionOutput::not_run(
            ticket.execution_id.clone(),
            runtime,
            ErrorInfo::new(Code::InternalError, "unused"),
        );
        done.error = None;
        done.ok = true;
        reply.send((done, None)).expect("caller waits");
        let second = second.await.expect("join");
        assert!(second.ok);
        assert_eq!(
            second.runtime.admission_seq, 2,
            "sequence numbers follow admission order"
        );
        assert_eq!(handle.status().queue_depth, 0);
    }

    fn spawn_execute(
        handle: &SessionHandle,
        code: &'static str,
    ) -> tokio::task::JoinHandle<ExecutionOutput> {
        let handle = handle.clone();
        tokio::spawn(async move { handle.execute(args(code, &CancellationToken::new())).await })
    }

    async fn until_queued(handle: &SessionHandle, depth: usize) {
        while handle.status().queue_depth < depth {
            tokio::task::yield_now().await;
        }
    }

    fn helper_call(method: &str) -> HelperCall {
        HelperCall {
            method: method.into(),
            params: serde_json::json!({}),
            timeout: None,
            request_id: method.into(),
            cancel: CancellationToken::new(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_bookkeeping_call_takes_the_reserved_slot_never_a_users() {
        let (handle, _inbox) = SessionHandle::detached(options(2, Duration::from_secs(30)));
        let _first = spawn_execute(&handle, "first");
        let reserved = tokio::spawn({
            let handle = handle.clone();
            async move { handle.helper_reserved(helper_call("tool_catalog")).await }
        });
        until_queued(&handle, 2).await;
        // The reserved slot is taken: a second bookkeeping call is refused at once…
        let refused = handle.helper_reserved(helper_call("tool_catalog")).await;
        assert_eq!(
            refused.error.map(|error| error.code.as_str()),
            Some("runtime_busy")
        );
        assert!(!reserved.is_finished());
        // …while the user still has both of the `max_pending` slots: one is free.
        let _second = spawn_execute(&handle, "second");
        until_queued(&handle, 3).await;
        let busy = handle
            .execute(args("third", &CancellationToken::new()))
            .await;
        assert_eq!(code(&busy), Some("runtime_busy"));
        assert_eq!(
            handle.status().queue_depth,
            3,
            "the users' two and the reserved one"
        );
        // A bookkeeping call that gives up frees the reserved slot for the next.
        let gave_up = reserved.await.expect("join");
        assert_eq!(
            gave_up.error.map(|error| error.code.as_str()),
            Some("queue_timeout")
        );
        assert_eq!(handle.status().queue_depth, 0);
    }

    /// A session whose Python cannot be found: its actor runs with no kernel.
    fn kernelless(max_pending: usize) -> SessionOptions {
        let mut options = options(max_pending, Duration::from_secs(30));
        options.resolver.explicit_python = Some(std::env::temp_dir().join("no-such-python-here"));
        options
    }

    #[tokio::test]
    async fn a_panicking_actor_answers_its_queue_unavailable_and_restart_respawns_it() {
        let (handle, commands) = SessionHandle::detached(kernelless(4));
        // Queued before the actor starts: the panic, then a call behind it.
        assert!(handle.inject_panic());
        let queued = spawn_execute(&handle, "queued");
        until_queued(&handle, 1).await;
        tokio::spawn(supervise(Arc::clone(&handle.shared), commands));
        let queued = queued.await.expect("join");
        assert_eq!(code(&queued), Some("runtime_unavailable"));
        assert_eq!(queued.status, ExecutionStatus::Rejected);
        let message = &queued.error.as_ref().expect("error").message;
        assert!(message.contains("an internal error stopped"), "{message}");
        let status = handle.status();
        assert_eq!(status.state, SessionState::Unavailable);
        assert_eq!(status.queue_depth, 0);
        assert_eq!(
            status.error,
            Some(failed_error("calls fail until it is restarted"))
        );
        let refused = handle
            .execute(args("after", &CancellationToken::new()))
            .await;
        assert_eq!(refused.error, Some(failed_error("nothing ran")));
        // The restart starts a fresh actor in a new epoch; this one cannot find its Python
        // either, so the session is unavailable for that reason now, not for the panic.
        assert_eq!(status.epoch, 1, "its kernel is gone");
        let restarted = handle.restart().await.expect("restart answered");
        assert_eq!(restarted.epoch, 2);
        assert_eq!(restarted.state, SessionState::Unavailable);
        let reason = restarted.error.expect("reason").message;
        assert!(!reason.contains("internal error"), "{reason}");
        let refused = handle
            .execute(args("later", &CancellationToken::new()))
            .await;
        assert_ne!(refused.error, Some(failed_error("nothing ran")));
        handle.shutdown().await;
        assert_eq!(handle.status().state, SessionState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_running_when_the_actor_panics_is_told_so_and_its_record_finished() {
        let (handle, mut inbox) = SessionHandle::detached(options(1, Duration::from_secs(30)));
        let caller = spawn_execute(&handle, "running");
        let Some(Command::Execute { ticket, reply, .. }) = inbox.recv().await else {
            panic!("command")
        };
        assert!(ticket.dispatch(&handle.shared));
        // What a panic does to it: the reply is dropped, then the supervisor counts a failure.
        drop(reply);
        tokio::task::yield_now().await;
        handle.shared.failures.send_modify(|count| *count += 1);
        let output = caller.await.expect("join");
        assert_eq!(code(&output), Some("runtime_unavailable"));
        assert_eq!(output.status, ExecutionStatus::Error);
        assert_eq!(output.runtime.namespace, Some(NamespaceOutcome::Reset));
        assert_eq!(output.runtime.interruption, Some(Interruption::Terminated));
        let recorded = handle.output(None, Duration::ZERO).await.expect("recorded");
        assert_eq!(recorded.status, ExecutionStatus::Error, "get_output agrees");
    }

    #[tokio::test(start_paused = true)]
    async fn a_dispatched_request_outlives_the_queue_wait() {
        let (handle, mut inbox) = SessionHandle::detached(options(1, Duration::from_secs(1)));
        let caller = tokio::spawn({
            let handle = handle.clone();
            async move {
                handle
                    .execute(args("slow", &CancellationToken::new()))
                    .await
            }
        });
        let Some(Command::Execute {
            ticket,
            args,
            reply,
            ..
        }) = inbox.recv().await
        else {
            panic!("command")
        };
        assert!(ticket.dispatch(&handle.shared));
        // Running for longer than the queue wait is fine: the deadline, not the queue, bounds it.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let runtime = RuntimeInfo {
            request_id: args.request_id,
            admission_seq: ticket.seq,
            epoch: 0,
            queue_wait_ms: 0,
            run_ms: 10_000,
            interruption: None,
            namespace: None,
        };
        let mut done = ExecutionOutput::not_run(
            ticket.execution_id.clone(),
            runtime,
            ErrorInfo::new(Code::InternalError, "unused"),
        );
        done.error = None;
        done.ok = true;
        reply.send((done, None)).expect("caller waits");
        assert!(caller.await.expect("join").ok);
    }

    /// A real kernel's session: the Python the integration tests provision into the target
    /// directory (this test binary is `target/<profile>/deps/<name>`), found or provisioned
    /// the product's own way.
    fn kernel_options(kernel_id: &str) -> SessionOptions {
        let exe = std::env::current_exe().expect("the test binary's path");
        let target_tmp = exe.ancestors().nth(3).expect("the target dir").join("tmp");
        SessionOptions {
            kernel_id: kernel_id.into(),
            queue_wait_timeout: Duration::from_secs(600),
            resolver: Resolver {
                working_dir: target_tmp.clone(),
                path_var: std::env::var_os("PATH"),
                cache_dir: target_tmp.join("ipython-mcp-cache"),
                install_timeout: Duration::from_secs(600),
                ..options(4, Duration::ZERO).resolver
            },
            spool: SpoolLimits::default(),
            ..options(4, Duration::ZERO)
        }
    }

    async fn ready(session: &SessionHandle) {
        let deadline = Instant::now() + Duration::from_secs(900);
        let mut done = session.status().state;
        while done != SessionState::Ready {
            assert!(
                !matches!(done, SessionState::Unavailable | SessionState::Closed),
                "{:?}",
                session.status()
            );
            assert!(
                Instant::now() < deadline,
                "no kernel: {:?}",
                session.status()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            done = session.status().state;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_spool_disk_stalls_neither_status_nor_another_session() {
        let stalled = SessionHandle::start(kernel_options("stalled"));
        let other = SessionHandle::start(kernel_options("other"));
        ready(&stalled).await;
        ready(&other).await;
        let cancel = CancellationToken::new();
        let release = crate::spool::tests::stall(stalled.shared.executions.queue()).await;
        // Cut output: its answer wants the spool's summary, which waits for the stalled disk.
        let cut = tokio::spawn({
            let stalled = stalled.clone();
            let args = args("print('x' * 100_000)", &cancel);
            async move { stalled.execute(args).await }
        });
        for n in 0..3 {
            let answered = tokio::time::timeout(
                Duration::from_secs(120),
                other.execute(args(&format!("{n} + 1"), &cancel)),
            )
            .await
            .expect("another session answers while this one's spool is stalled");
            assert!(answered.ok, "{answered:?}");
            assert_eq!(
                answered
                    .result
                    .as_ref()
                    .map(|result| result["text/plain"].clone()),
                Some(serde_json::json!((n + 1).to_string()))
            );
            // Its status is a snapshot: answered, and it still says the session works.
            let state = stalled.status().state;
            assert!(
                matches!(state, SessionState::Busy | SessionState::Ready),
                "{state:?}"
            );
        }
        // The stalled session answers too, once its wait for the disk is over, without the
        // summary it could not read.
        let output = tokio::time::timeout(SPOOL_FLUSH_WAIT + Duration::from_secs(120), cut)
            .await
            .expect("the answer does not wait for the disk past its bound")
            .expect("the execute task");
        assert!(output.ok, "{output:?}");
        assert!(output.stdout_omitted_chars > 0, "{output:?}");
        assert_eq!(output.spool, None);
        // And so does its next call, the disk still stalled.
        let next = tokio::time::timeout(
            Duration::from_secs(120),
            stalled.execute(args("2 * 21", &cancel)),
        )
        .await
        .expect("the next call is answered while the spool is still stalled");
        assert_eq!(
            next.result
                .as_ref()
                .map(|result| result["text/plain"].clone()),
            Some(serde_json::json!("42"))
        );
        // Nothing is lost: once the disk is back, the summary and the whole stream are there.
        release.send(()).expect("the stall waits");
        let id = output.execution_id.clone();
        let later = stalled
            .output(Some(&id), Duration::ZERO)
            .await
            .expect("remembered");
        assert_eq!(later.spool.map(|spool| spool.stdout_bytes), Some(100_001));
        let request = PageRequest {
            stream: crate::StreamName::Stdout,
            start_line: 1,
            max_lines: 10,
            pattern: None,
            max_chars: 1_000_000,
        };
        let page = stalled
            .page(Some(&id), request)
            .await
            .expect("remembered")
            .expect("a page");
        assert_eq!(page.lines.len(), 1, "{:?}", page.total_lines);
        assert_eq!(page.lines[0].text.len(), 100_000);
        assert!(page.complete);
        stalled.shutdown().await;
        other.shutdown().await;
    }
}
