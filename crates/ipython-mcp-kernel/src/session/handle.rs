//! The public side of a session: admission, waiting for dispatch and the outcome, and the
//! calls answered without queueing.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch, Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::actor::supervise;
use super::error::Behind;
use super::prepare::Local;
use super::*;
use crate::status::SessionState;
use ipython_mcp_output::executions::{Page, PageRequest};
use ipython_mcp_output::output::{Code, ExecutionStatus, Interruption, NamespaceOutcome};

/// The public side of a session.
#[derive(Clone)]
pub struct SessionHandle {
    pub(super) shared: Arc<Shared>,
    pub(super) inbox: mpsc::UnboundedSender<Command>,
}

impl SessionHandle {
    /// Creates the session and starts its kernel in the background; returns at once.
    pub fn start(options: SessionOptions) -> SessionHandle {
        let (handle, commands) = SessionHandle::detached(options);
        let launcher: Arc<dyn super::Launcher> = match (
            &handle.shared.options.jupyter,
            &handle.shared.options.remote,
        ) {
            (Some(server), Some(kernel)) => Arc::new(super::remote::Remote::new(
                Arc::clone(&handle.shared),
                server.clone(),
                kernel.clone(),
            )),
            _ => Arc::new(Local::new(Arc::clone(&handle.shared))),
        };
        let shared = Arc::clone(&handle.shared);
        handle
            .shared
            .tasks
            .spawn(supervise(shared, commands, launcher));
        handle
    }

    /// The handle and the inbox an actor would serve (tests drive the inbox by hand).
    pub(super) fn detached(
        options: SessionOptions,
    ) -> (SessionHandle, mpsc::UnboundedReceiver<Command>) {
        // Unbounded: admission is bounded by the permits, not by the channel.
        let (inbox, commands) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            status: Mutex::new(RuntimeStatus::starting(&options.kernel_id)),
            memory: Mutex::new(None),
            capacity: Arc::new(Semaphore::new(options.max_pending.max(1))),
            reserved: Arc::new(Semaphore::new(1)),
            admission: Mutex::new(()),
            executions: Executions::new(options.spool, options.private_dir.clone()),
            options,
            queue_depth: AtomicUsize::new(0),
            next_seq: AtomicU64::new(1),
            shutdown: CancellationToken::new(),
            active: ActiveOperation::new(),
            finished: watch::channel(false).0,
            epoch: watch::channel(0).0,
            failures: watch::channel(0).0,
            failed: AtomicBool::new(false),
            tasks: ipython_mcp_jupyter::task::Tasks::default(),
            checkpoint: Default::default(),
            remote_checkpoint: format!("checkpoints/{}", uuid::Uuid::new_v4()),
        });
        (SessionHandle { shared, inbox }, commands)
    }

    pub fn kernel_id(&self) -> &str {
        &self.shared.options.kernel_id
    }

    /// The session's status, answered without queueing; its checkpoint as last read (no
    /// file I/O).
    pub fn status(&self) -> RuntimeStatus {
        self.shared.status_now()
    }

    /// The session's status, answered without queueing, with its checkpoint's files read again
    /// (off the async threads; a file that does not answer delays this call by a bounded
    /// time, and then the status shows what was read before).
    pub async fn status_refreshed(&self) -> RuntimeStatus {
        self.shared.status_refreshed().await
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
        helper_output(output, reply, self.shared.options.wording)
    }

    async fn submit(&self, args: ExecuteArgs, helper: Option<HelperRequest>, slot: Slot) -> Ended {
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
                // Ends once answered, which the actor does before it ends.
                self.shared
                    .tasks
                    .spawn(async move { session.wait(admitted, None).await });
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
    ) -> Result<Admitted, Box<Ended>> {
        // Numbering and enqueueing happen under one lock, so admission order is sequence order
        // even for concurrent callers. Nothing awaits while it is held.
        let admission = self.shared.admission.lock().expect("admission lock");
        let seq = self.shared.next_seq.fetch_add(1, Ordering::AcqRel);
        let execution_id = ExecutionId::generate();
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
        if let Some(error) = self.refusal() {
            return Err(Box::new(self.not_run(
                &ticket,
                &args,
                record.as_deref(),
                error,
            )));
        }
        let slots = match slot {
            Slot::User => &self.shared.capacity,
            Slot::Reserved => &self.shared.reserved,
        };
        let Ok(permit) = Arc::clone(slots).try_acquire_owned() else {
            return Err(Box::new(self.not_run(
                &ticket,
                &args,
                record.as_deref(),
                self.busy_error(slot),
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
                SessionError::Closed,
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

    /// Why the session refuses every request now (closed, or unavailable), if it does.
    fn refusal(&self) -> Option<SessionError> {
        let status = self.status();
        match status.state {
            SessionState::Closed => Some(SessionError::Closed),
            SessionState::Unavailable if self.shared.failed.load(Ordering::Acquire) => {
                Some(panicked(PanickedCall::NotRun))
            }
            SessionState::Unavailable => Some(unavailable(&status)),
            _ => None,
        }
    }

    /// The answer when every slot of `slot`'s kind is taken.
    fn busy_error(&self, slot: Slot) -> SessionError {
        match slot {
            Slot::User => SessionError::Busy {
                waiting: self.shared.options.max_pending,
            },
            Slot::Reserved => SessionError::BookkeepingBusy,
        }
    }

    /// Waits for an admitted request's dispatch (bounded by `queue_wait` when a caller waits)
    /// and its outcome.
    async fn wait(&self, admitted: Admitted, queue_wait: Option<Duration>) -> Ended {
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
                        return self.not_run(&ticket, &args, record, SessionError::Closed);
                    }
                    let error = SessionError::CancelledWhileQueued;
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
                    let behind = match (status.state, &status.environment) {
                        (SessionState::Starting, Some(environment)) => Behind::Environment {
                            phase: environment.phase.clone(),
                            elapsed_seconds: environment.elapsed_seconds,
                        },
                        (SessionState::Starting, None) => Behind::KernelStart,
                        _ => Behind::EarlierOperations,
                    };
                    let error = SessionError::QueueTimeout { waited: queue_wait, behind };
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
    ) -> Ended {
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
            return self.not_run(ticket, args, record, SessionError::Closed);
        }
        if !ran {
            return self.not_run(ticket, args, record, panicked(PanickedCall::NotRun));
        }
        let mut outcome = self.not_run(ticket, args, None, panicked(PanickedCall::WasRunning));
        outcome.0.status = ExecutionStatus::Error;
        outcome.0.runtime.interruption = Some(Interruption::Terminated);
        outcome.0.runtime.namespace = Some(NamespaceOutcome::Reset);
        if let Some(record) = record {
            record.finish(&outcome.0);
        }
        outcome
    }

    /// The outcome of a request that never ran, its error worded for the agent; recorded for
    /// `get_output` too.
    fn not_run(
        &self,
        ticket: &Ticket,
        args: &ExecuteArgs,
        record: Option<&Record>,
        error: SessionError,
    ) -> Ended {
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
                restore: None,
            },
            self.shared.worded(&error),
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
                    output.spool = Some(ipython_mcp_output::executions::spool_info(&dir, &record));
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
    pub fn execution_ids(&self) -> Vec<ExecutionId> {
        self.shared.executions.ids()
    }

    /// One page of an execution's full stdout or stderr from the spool.
    pub async fn page(
        &self,
        execution_id: Option<&str>,
        request: PageRequest,
    ) -> Option<Result<Page, SessionError>> {
        let record = match execution_id {
            Some(id) => self.shared.executions.find(id)?,
            None => self.shared.executions.latest()?,
        };
        let path = match self.shared.executions.stream_path(&record, request.stream) {
            Ok(path) => path,
            Err(error) => return Some(Err(error.into())),
        };
        let complete = record.is_finished() && record.spool_written();
        let head_chars = self.shared.options.limits.head_chars(request.max_chars);
        let max_bytes = self.shared.options.spool.max_execution_bytes;
        let page = tokio::task::spawn_blocking(move || {
            ipython_mcp_output::executions::read_page(
                path.as_deref(),
                &request,
                complete,
                head_chars,
                max_bytes,
            )
        })
        .await;
        Some(match page {
            Ok(page) => page.map_err(SessionError::from),
            Err(error) => Err(SessionError::Internal {
                what: error.to_string(),
            }),
        })
    }

    /// A finished execution's outputs as a notebook saves them: everything the kernel
    /// produced, unbounded but for `max_bytes` (see `transcript`). `None` when the session has
    /// no full record of it (unknown, spool off or evicted): only the bounded view is left.
    pub async fn saved_outputs(
        &self,
        execution_id: &str,
        execution_count: Option<u64>,
        max_bytes: u64,
    ) -> Option<ipython_mcp_output::SavedOutputs> {
        let record = self.shared.executions.find(execution_id)?;
        self.shared
            .executions
            .saved_outputs(&record, execution_count, max_bytes)
            .await
    }

    /// Replaces the kernel with a fresh one (promoting a warm spare when one is ready) after
    /// the operations queued before it; the epoch advances. Every name is gone afterwards,
    /// unless `restore` loads the session's checkpoint (the namespace as of the last completed
    /// execution) into the new kernel.
    pub async fn restart(&self, restore: bool) -> Result<RuntimeStatus, SessionError> {
        match self.status().state {
            SessionState::Closed => return Err(SessionError::Closed),
            SessionState::Starting => return Err(SessionError::RestartWhileStarting),
            _ => {}
        }
        let (reply, result) = oneshot::channel();
        self.inbox
            .send(Command::Restart { reply, restore })
            .map_err(|_| SessionError::Closed)?;
        let startup = self.shared.options.timeouts.kernel_startup;
        let mut bound = self.shared.options.queue_wait_timeout + startup;
        if restore {
            bound += startup.max(super::actor::RESTORE_BOUND);
        }
        match tokio::time::timeout(bound, result).await {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(_)) => Err(SessionError::Closed),
            Err(_) => Err(SessionError::RestartWhileBusy),
        }
    }

    /// Interrupts the operation running now (queued ones are untouched) and waits until it has
    /// ended — stopped cooperatively, or its kernel replaced after the grace period. Returns the
    /// status afterwards, and whether anything was running.
    pub async fn interrupt(&self) -> Interrupted {
        let Some(mut done) = self.shared.active.aim() else {
            return Interrupted {
                interrupted: false,
                status: self.status(),
            };
        };
        // Waiting for the kernel to begin (bounded like a kernel start), the grace, a
        // replacement's start.
        let bound = self.shared.options.timeouts.kernel_startup * 2
            + self.shared.options.timeouts.interruption_grace
            + Duration::from_secs(2);
        let _ = tokio::time::timeout(bound, done.changed()).await;
        Interrupted {
            interrupted: true,
            status: self.status(),
        }
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

    /// Stops admission, ends queued requests with `runtime_closed`, interrupts active work,
    /// terminates the kernel and joins the session's tasks, within `shutdown_bound`: what
    /// still runs then is aborted. Safe to call more than once.
    pub async fn shutdown(&self) {
        self.shared.shutdown.cancel();
        let mut finished = self.shared.finished.subscribe();
        let deadline = Instant::now() + self.shutdown_bound();
        let _ = tokio::time::timeout_at(deadline, finished.wait_for(|finished| *finished)).await;
        self.shared.tasks.join(self.kernel_id(), deadline).await;
    }

    /// How long `shutdown` waits before it aborts what still runs.
    pub(crate) fn shutdown_bound(&self) -> Duration {
        self.shared.options.timeouts.interruption_grace * 2 + Duration::from_secs(5)
    }
}

/// Turns an operation's outcome into a helper call's: the helper's own reply when it answered,
/// the session's error otherwise (busy, timeout, kernel died…), worded by `wording`.
pub(super) fn helper_output(
    output: ExecutionOutput,
    reply: Option<serde_json::Value>,
    wording: Wording,
) -> HelperOutput {
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
                outcome: Outcome::Answered(
                    reply
                        .get("result")
                        .cloned()
                        .unwrap_or(serde_json::Value::Null),
                ),
                runtime,
            }
        }
        // The helper answers `{"ok": false, "error": {"code", "message", …}}` or
        // `{"ok": true, "result"}`; anything else is a bug on one side, not user code raising.
        Some(reply)
            if reply.get("ok") != Some(&serde_json::Value::Bool(false))
                || !reply
                    .get("error")
                    .and_then(|error| error.get("code"))
                    .is_some_and(serde_json::Value::is_string) =>
        {
            HelperOutput {
                outcome: Outcome::Failed((wording.error)(&SessionError::HelperReply)),
                runtime,
            }
        }
        Some(reply) => HelperOutput {
            outcome: raised(&reply),
            runtime,
        },
        None => {
            let error = output
                .error
                .unwrap_or_else(|| (wording.error)(&SessionError::HelperSilent));
            HelperOutput {
                outcome: Outcome::Failed(error),
                runtime,
            }
        }
    }
}

/// A helper's error reply (`{"ok": false, "error": {"code", "message", …}}`) as the outcome.
fn raised(reply: &serde_json::Value) -> Outcome {
    let error = reply.get("error").cloned().unwrap_or_default();
    let text = |key: &str| {
        error
            .get(key)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    // A code the server does not know means the helper and server disagree: a bug.
    let code = text("code")
        .and_then(|wire| Code::from_wire(&wire))
        .unwrap_or(Code::InternalError);
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
    Outcome::Raised {
        error: info,
        // What the helper worked out before it failed (e.g. the fields of an `inspect` whose
        // repr raised), kept beside the error.
        partial: reply.get("result").cloned(),
    }
}

/// What [`SessionHandle::interrupt`] did.
#[derive(Debug, Clone)]
pub struct Interrupted {
    /// Something was running (and has now ended).
    pub interrupted: bool,
    /// The session's status after the interrupt.
    pub status: RuntimeStatus,
}
