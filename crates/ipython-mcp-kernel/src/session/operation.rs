//! Running one operation: the request, the wait (the `run` state machine, driven here: this
//! loop only waits for the next event and does what the machine says), cancellation, progress,
//! and the output the caller gets.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipython_mcp_jupyter::protocol::{
    CommId, CommMsg, ExecuteRequest, InputReply, JupyterMessage, JupyterMessageContent, ReplyStatus,
};
use ipython_mcp_jupyter::{Channel, Routed};
use tokio::time::Instant;

use super::actor::Actor;
use super::outcome::{self, Cause, Checked, Death, Decision, End, Ending, FollowUp};
use super::run::{Action, Event, Run, Seen, Timer};
use super::transport::{KernelTransport, Running};
use super::*;
use crate::status::SessionState;
use ipython_mcp_output::collect::{Collected, Collector};
use ipython_mcp_output::executions::SpoolWriter;
use ipython_mcp_output::output::ExecutionStatus;
use ipython_mcp_output::payload::SpoolFiles;
use ipython_mcp_output::Pager;

/// One dispatched operation, as the steps of running it share it.
struct Operation<'a> {
    ticket: &'a Ticket,
    args: &'a ExecuteArgs,
    record: Option<&'a Arc<Record>>,
    /// A reader (get_output) may look at the collector while messages arrive.
    collector: Arc<Mutex<Collector>>,
    started: Instant,
    timeout: Duration,
}

/// The runtime facts of an answer; `epoch` is the session's when it is answered.
fn runtime_info(
    ticket: &Ticket,
    args: &ExecuteArgs,
    queue_wait_ms: u64,
    epoch: u64,
    run_ms: u64,
) -> RuntimeInfo {
    RuntimeInfo {
        request_id: args.request_id.clone(),
        admission_seq: ticket.seq,
        epoch,
        queue_wait_ms,
        run_ms,
        interruption: None,
        namespace: None,
        restore: None,
    }
}

impl Actor {
    pub(super) async fn execute(
        &mut self,
        ticket: &Ticket,
        args: &ExecuteArgs,
        helper: Option<&HelperRequest>,
        record: Option<&Arc<Record>>,
    ) -> Ended {
        let queue_wait_ms = ticket.enqueued_at.elapsed().as_millis() as u64;
        let not_run = |epoch, error: SessionError| {
            let runtime = runtime_info(ticket, args, queue_wait_ms, epoch, 0);
            let error = self.shared.worded(&error);
            (
                ExecutionOutput::not_run(ticket.execution_id.clone(), runtime, error),
                None,
            )
        };
        let Some(running) = &self.kernel else {
            let status = self.shared.status.lock().expect("status lock").clone();
            return not_run(self.epoch, unavailable(&status));
        };
        // Stdin is code mode's channel: open when the kernel has the `mcp_servers` module.
        let allow_stdin = running.code_mode;
        let (message, helper_request) =
            match request_message(args, helper, running.helper_comm.as_deref(), allow_stdin) {
                Ok(request) => request,
                Err(error) => return not_run(self.epoch, error),
            };
        let mut interrupts = self.shared.active.begin(ticket.seq);
        self.update(|status| {
            status.state = SessionState::Busy;
            status.operation_active = true;
        });
        let options = &self.shared.options;
        let mut collector = Collector::new(
            options.limits,
            options.max_json_items,
            running.helper_comm.clone(),
            options.wording.pager,
        );
        if let Some(request_id) = helper_request {
            collector.expect_helper_reply(request_id);
        }
        let operation = Operation {
            ticket,
            args,
            record,
            collector: Arc::new(Mutex::new(collector)),
            started: Instant::now(),
            timeout: args.timeout.unwrap_or(options.timeouts.operation),
        };
        tracing::debug!(
            seq = ticket.seq,
            queue_wait_ms,
            timeout_ms = operation.timeout.as_millis() as u64,
            "operation dispatched"
        );
        let mut run = Run::new(
            operation.started + operation.timeout,
            options.timeouts.interruption_grace,
            options.timeouts.kernel_startup,
        );
        let spooled_as = self
            .wait(running, message, &mut run, &operation, &mut interrupts)
            .await;
        let end = run
            .ended()
            .cloned()
            .expect("the wait returns once the run ended");
        let run_ms = operation.started.elapsed().as_millis() as u64;
        let collected = self.collected(&operation, spooled_as.as_deref()).await;
        let decision = self
            .conclude(&operation, end, run.cause(), &collected)
            .await;
        self.ended(&decision);
        let runtime = runtime_info(ticket, args, queue_wait_ms, self.epoch, run_ms);
        // The marker between a stream's head and tail names the call that pages the middle,
        // when the full stream is on disk.
        let pager = self
            .shared
            .options
            .wording
            .pager
            .filter(|_| spooled_as.is_some() && self.shared.executions.spool().is_some())
            .map(|call| Pager {
                call,
                execution_id: ticket.execution_id.as_str(),
            });
        output(collected, decision, runtime, ticket, pager)
    }

    /// Nothing runs any more: the status says so, and what the operation did to the kernel.
    fn ended(&self, decision: &Decision) {
        self.shared.active.end();
        self.update(|status| {
            if status.state == SessionState::Busy {
                status.state = SessionState::Ready;
            }
            status.operation_active = false;
            if decision.interruption.is_some() || decision.namespace.is_some() {
                status.latest_interruption_kind = decision.interruption;
                status.latest_namespace_outcome = decision.namespace;
                if decision.namespace != Some(ipython_mcp_output::NamespaceOutcome::Restored) {
                    status.latest_restore = None;
                }
            }
        });
    }

    /// Sends the request and drives the run until it ends; returns the msg_id the execution's
    /// spool files are named by, if it has any.
    async fn wait(
        &self,
        running: &Running,
        message: JupyterMessage,
        run: &mut Run,
        operation: &Operation<'_>,
        interrupts: &mut watch::Receiver<Option<u64>>,
    ) -> Option<String> {
        let request = running.kernel.request(Channel::Shell, message);
        let (msg_id, mut receiver) = match tokio::time::timeout_at(run.deadline, request).await {
            Ok(Ok(sent)) => sent,
            Ok(Err(error)) => {
                // The process's exit says more than the failed send, when it is known.
                let death = death_of(running.kernel.as_ref())
                    .unwrap_or_else(|| Death::from(error.to_string()));
                run.step(Instant::now(), Event::SendFailed(death));
                return None;
            }
            Err(_) => {
                run.step(Instant::now(), Event::Elapsed(Timer::Deadline));
                return None;
            }
        };
        run.step(Instant::now(), Event::Sent);
        let mut spooled_as = None;
        let mut spool_writer = None;
        if let Some(record) = operation.record {
            let pager = self
                .shared
                .executions
                .spool()
                .and(self.shared.options.wording.pager);
            let collector = Arc::clone(&operation.collector);
            record.dispatched(&msg_id, self.epoch, collector, pager);
            spooled_as = Some(msg_id.clone());
            // A local helper spools its kernel's streams itself; other kernels' output
            // (remote ones included: their helper cannot reach our disk) is spooled here as
            // it arrives.
            if !running.helper_spools {
                spool_writer = SpoolWriter::new(&self.shared.executions, record, &msg_id)
                    .map(|writer| writer.with_helper_comm(running.helper_comm.clone()));
            }
        }
        self.drive(
            run,
            running,
            &mut receiver,
            spool_writer.as_mut(),
            operation,
            interrupts,
        )
        .await;
        if let (Some(record), Some(writer)) = (operation.record, spool_writer) {
            writer.finish(Arc::clone(record));
        }
        running.kernel.forget(&msg_id);
        spooled_as
    }

    /// The loop: waits for the next event (a message, the run's timer, a stop) and performs
    /// what the run asks, until it ends. Progress goes out on the side.
    async fn drive(
        &self,
        run: &mut Run,
        running: &Running,
        receiver: &mut tokio::sync::mpsc::UnboundedReceiver<Routed>,
        mut spool_writer: Option<&mut SpoolWriter>,
        operation: &Operation<'_>,
        interrupts: &mut watch::Receiver<Option<u64>>,
    ) {
        let shutdown = &self.shared.shutdown;
        let (seq, cancel) = (operation.ticket.seq, &operation.ticket.cancel);
        let mut progress_tick =
            tokio::time::interval_at(operation.started + PROGRESS_INTERVAL, PROGRESS_INTERVAL);
        let mut asked = Asked::default();
        while run.ended().is_none() {
            let (wake, timer) = run.timer();
            // Once a cause is decided, later ones change nothing (the first wins); once the
            // reply is in, nothing is stopped.
            let stoppable = run.stoppable();
            let woke = tokio::select! {
                routed = receiver.recv() => match routed {
                    Some(routed) if routed.channel == Channel::Stdin => Woke::Input(Box::new(routed.message)),
                    Some(routed) => {
                        if let Some(writer) = spool_writer.as_deref_mut() {
                            writer.absorb(&routed);
                        }
                        let mut collector = locked(&operation.collector);
                        collector.absorb(routed);
                        Woke::Event(Event::Message(seen(&collector)))
                    }
                    None => Woke::Event(Event::KernelExited(
                        death_of(running.kernel.as_ref())
                            .unwrap_or_else(|| Death::from("kernel exited".to_owned())),
                    )),
                },
                answer = async { asked.pending.as_mut().expect("guarded").1.as_mut().await }, if asked.pending.is_some() => {
                    Woke::Answered(answer)
                }
                () = tokio::time::sleep_until(wake) => Woke::Event(Event::Elapsed(timer)),
                _ = progress_tick.tick(), if operation.args.progress.is_some() => {
                    report_progress(operation, asked.progress_line());
                    continue;
                }
                // Shutdown also cancels every request: that is not the client's doing.
                () = cancel.cancelled(), if stoppable => {
                    Woke::Event(Event::Stop(if shutdown.is_cancelled() { Cause::Closing } else { Cause::Cancelled }))
                }
                _ = interrupts.wait_for(|target| *target == Some(seq)), if stoppable => {
                    Woke::Event(Event::Stop(Cause::Interrupted))
                }
                () = shutdown.cancelled(), if stoppable => Woke::Event(Event::Stop(Cause::Closing)),
            };
            let event = match woke {
                Woke::Event(event) => event,
                Woke::Input(request) => {
                    asked.pending = self.input_requested(running, *request, asked.sink()).await;
                    continue;
                }
                Woke::Answered(answer) => {
                    let (request, _) = asked.pending.take().expect("answered");
                    answer_input(running, &request, answer.to_string()).await;
                    continue;
                }
            };
            trace_event(operation, &event);
            if matches!(event, Event::Stop(_) | Event::Elapsed(Timer::Deadline))
                && asked.pending.take().is_some()
            {
                tracing::debug!(seq, "code-mode call cancelled with its operation");
            }
            perform(run, event, running.kernel.as_ref()).await;
        }
        tracing::debug!(
            seq,
            at_ms = operation.started.elapsed().as_millis() as u64,
            end = ?run.ended(),
            cause = ?run.cause(),
            seen = ?run.seen,
            "operation ended"
        );
    }

    /// The collector's final output, its payloads settled: images over the bound downscaled,
    /// payloads past the reply budget withheld to the spool.
    async fn collected(&self, operation: &Operation<'_>, spooled_as: Option<&str>) -> Collected {
        let (finished, budget) = {
            let collector = locked(&operation.collector);
            (collector.clone().finish(), collector.budget())
        };
        let mut spool_files = spooled_as.and_then(|msg_id| {
            let (dir, _) = self.shared.executions.spool()?;
            Some(SpoolFiles::new(dir, msg_id))
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
                    locked(&operation.collector).snapshot()
                }
            }
        };
        if let Some(record) = operation.record {
            record.add_spool_dropped(collected.spool_dropped);
        }
        collected
    }

    /// The end-of-operation decision, after the one step with the kernel it needs.
    async fn conclude(
        &mut self,
        operation: &Operation<'_>,
        end: End,
        cause: Option<Cause>,
        collected: &Collected,
    ) -> Decision {
        // A helper call finished by itself only if the helper says it succeeded: its error reply
        // to an interrupt (KeyboardInterrupt) is the interrupt's doing, not the function's.
        let helper_succeeded = collected
            .helper_reply
            .as_ref()
            .and_then(|reply| reply.get("ok"))
            .and_then(serde_json::Value::as_bool)
            == Some(true);
        let finished_ok = helper_succeeded
            || matches!(
                collected.reply.as_ref().map(|reply| &reply.status),
                Some(ReplyStatus::Ok)
            );
        // Confirming a cooperative stop or replacing the kernel is the only I/O the decision
        // needs; which one is itself part of the decision.
        let checked = match outcome::follow_up(&end, cause, finished_ok) {
            FollowUp::None => Checked::Nothing,
            FollowUp::ConfirmHealth => Checked::Healthy(match &self.kernel {
                Some(running) => running.kernel.heartbeat(COOPERATIVE_HEARTBEAT).await,
                None => false,
            }),
            FollowUp::KillAndReplace => self.replace_and_restore().await,
        };
        outcome::decide(&Ending {
            end,
            cause,
            finished_ok,
            reported_error: collected.error.clone(),
            timeout: operation.timeout,
            grace: self.shared.options.timeouts.interruption_grace,
            checked,
            shutting_down: self.shared.shutdown.is_cancelled(),
        })
    }
}

/// Does what the run asks after `event` (an interrupt reports its delivery back to it).
async fn perform(run: &mut Run, event: Event, kernel: &dyn KernelTransport) {
    let mut actions = VecDeque::from(run.step(Instant::now(), event));
    while let Some(action) = actions.pop_front() {
        match action {
            Action::Interrupt => {
                tracing::debug!(interrupt = ?run.interrupt, "interrupting the kernel");
                kernel.interrupt().await;
                actions.extend(run.step(Instant::now(), Event::InterruptSent));
            }
            // The caller's loop sees the run ended.
            Action::Finish(_) => {}
        }
    }
}

/// What woke the operation's loop.
enum Woke {
    Event(Event),
    /// The kernel asks for input (code mode).
    Input(Box<JupyterMessage>),
    /// The answer to the code-mode request it waits on.
    Answered(serde_json::Value),
}

/// What the kernel's `mcp_servers` module puts before its request (JSON) in an `input_request`
/// prompt (see the helper's `code_mode.py`).
const CODE_MODE_PROMPT: &str = "\u{1}ipython-mcp code mode\u{1}";

impl Actor {
    /// An `input_request` of the running execution: a code-mode request starts its answer;
    /// anything else (code mode is the only reason we allow stdin) is answered empty at once,
    /// so the kernel never waits on us.
    async fn input_requested(
        &self,
        running: &Running,
        request: JupyterMessage,
        progress: super::UpstreamProgress,
    ) -> Option<(
        JupyterMessage,
        futures_util::future::BoxFuture<'static, serde_json::Value>,
    )> {
        let prompt = match &request.content {
            JupyterMessageContent::InputRequest(input) => input.prompt.as_str(),
            _ => return None,
        };
        let asked = prompt
            .strip_prefix(CODE_MODE_PROMPT)
            .and_then(|json| serde_json::from_str::<serde_json::Value>(json).ok());
        match (asked, &self.shared.options.code_mode) {
            (Some(asked), Some(code_mode)) => {
                tracing::debug!(op = ?asked.get("op"), server = ?asked.get("server"), "code-mode request");
                let answer = code_mode.answer(asked, progress);
                Some((request, answer))
            }
            _ => {
                answer_input(running, &request, String::new()).await;
                None
            }
        }
    }
}

/// Sends the `input_reply` to `request` (bounded: a kernel that stopped reading is the run's
/// to judge).
async fn answer_input(running: &Running, request: &JupyterMessage, value: String) {
    let reply = JupyterMessage::new(
        InputReply {
            value,
            status: ReplyStatus::Ok,
            error: None,
        },
        Some(request),
    );
    let sent = tokio::time::timeout(
        Duration::from_secs(5),
        running.kernel.request(Channel::Stdin, reply),
    )
    .await;
    if let Ok(Ok((msg_id, _))) = sent {
        running.kernel.forget(&msg_id);
    }
}

/// The request to send: an execute_request, or for a helper call a comm message to the helper
/// (its reply is matched by the id returned beside it).
fn request_message(
    args: &ExecuteArgs,
    helper: Option<&HelperRequest>,
    helper_comm: Option<&str>,
    allow_stdin: bool,
) -> Result<(JupyterMessage, Option<String>), SessionError> {
    match (helper, helper_comm) {
        (None, _) => Ok((
            JupyterMessage::new(
                ExecuteRequest {
                    code: args.code.clone(),
                    silent: false,
                    store_history: true,
                    user_expressions: None,
                    allow_stdin,
                    // One request at a time anyway; never abort what a later caller queued.
                    stop_on_error: false,
                },
                None,
            ),
            None,
        )),
        (Some(helper), Some(comm_id)) => {
            let request_id = uuid::Uuid::new_v4().to_string();
            let mut data = serde_json::Map::new();
            data.insert("id".into(), request_id.clone().into());
            data.insert("method".into(), helper.method.clone().into());
            data.insert("params".into(), helper.params.clone());
            let comm_id = CommId(comm_id.to_owned());
            let message = JupyterMessage::new(CommMsg { comm_id, data }, None);
            Ok((message, Some(request_id)))
        }
        (Some(_), None) => Err(SessionError::NoHelper),
    }
}

/// What the collector has seen, as the run needs it.
fn seen(collector: &Collector) -> Seen {
    Seen {
        started: collector.started(),
        replied: collector.replied(),
        idle: collector.idle,
        done: collector.done(),
    }
}

/// How the kernel died, once its exit is known.
fn death_of(kernel: &dyn KernelTransport) -> Option<Death> {
    kernel.exit_watch().borrow().as_ref().map(Death::from)
}

/// Sends the latest line of output as progress (at most once a second), or what the upstream
/// of a code-mode call in flight last reported.
fn report_progress(operation: &Operation<'_>, upstream: Option<String>) {
    if let Some(progress) = &operation.args.progress {
        let message = upstream.unwrap_or_else(|| {
            locked(&operation.collector)
                .latest_line()
                .map_or_else(|| "running, no output yet".to_owned(), str::to_owned)
        });
        let elapsed_seconds = operation.started.elapsed().as_secs_f64();
        let _ = progress.send(Progress {
            elapsed_seconds,
            message,
        });
    }
}

/// The caller's answer, from the collected output and the decision.
fn output(
    collected: Collected,
    decision: Decision,
    runtime: RuntimeInfo,
    ticket: &Ticket,
    pager: Option<Pager<'_>>,
) -> Ended {
    let Decision {
        status,
        error,
        interruption,
        namespace,
    } = decision;
    let helper_reply = collected.helper_reply.clone();
    let ok = status == ExecutionStatus::Ok && error.is_none();
    let (stdout_omitted_chars, stderr_omitted_chars) = (
        collected.stdout.omitted_chars,
        collected.stderr.omitted_chars,
    );
    let (stdout, stdout_cut) = collected.stdout.printed("stdout", pager);
    let (stderr, stderr_cut) = collected.stderr.printed("stderr", pager);
    let output = ExecutionOutput {
        ok,
        status,
        execution_count: collected
            .reply
            .as_ref()
            .and_then(|reply| reply.execution_count),
        stdout,
        stderr,
        stdout_omitted_chars,
        stderr_omitted_chars,
        stdout_cut,
        stderr_cut,
        display_data: collected.display_data,
        display_omitted: collected.display_omitted,
        result: collected.result,
        result_metadata: (!collected.result_metadata.is_empty())
            .then_some(collected.result_metadata),
        withheld: collected.withheld,
        error,
        truncated: collected.truncated,
        execution_id: ticket.execution_id.clone(),
        // The epoch the session is in now: after a replacement, the new one, so the reply
        // itself shows the change (`namespace: reset`).
        runtime: RuntimeInfo {
            interruption,
            namespace,
            ..runtime
        },
        notice: None,
        spool: None,
    };
    (output, helper_reply)
}

/// The collector, locked (a panic elsewhere cannot leave it inconsistent).
pub(super) fn locked(collector: &Mutex<Collector>) -> std::sync::MutexGuard<'_, Collector> {
    collector
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The heartbeat that confirms a cooperatively stopped kernel still answers before its
/// namespace is called preserved; ipykernel answers it from a thread of its own, so only a
/// stalled machine makes it slow.
pub(super) const COOPERATIVE_HEARTBEAT: Duration = Duration::from_secs(5);

/// Progress notifications are sent at most this often.
pub(super) const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// The code-mode request the kernel waits on (its `input_request`) and our answer in the
/// making: dropped, which cancels it upstream, once the operation is stopped. With what the
/// upstream of that request last reported, which progress says while it runs.
#[derive(Default)]
struct Asked {
    pending: Option<(
        JupyterMessage,
        futures_util::future::BoxFuture<'static, serde_json::Value>,
    )>,
    progress: Arc<Mutex<Option<String>>>,
}

impl Asked {
    /// What the upstream of the pending request last reported.
    fn progress_line(&self) -> Option<String> {
        self.pending
            .is_some()
            .then(|| self.progress.lock().ok().and_then(|line| line.clone()))
            .flatten()
    }

    /// Where a new request's upstream reports its progress (nothing reported yet).
    fn sink(&self) -> super::UpstreamProgress {
        *self
            .progress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        let sink = Arc::clone(&self.progress);
        Arc::new(move |line| {
            *sink.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(line);
        })
    }
}

/// Metadata only (which event, when after dispatch): a slow or stopped call is explained by
/// these lines. Messages are many, so they are traced only.
fn trace_event(operation: &Operation<'_>, event: &Event) {
    let (seq, at_ms) = (
        operation.ticket.seq,
        operation.started.elapsed().as_millis() as u64,
    );
    if let Event::Message(_) = event {
        tracing::trace!(seq, at_ms, ?event, "operation event");
    } else {
        tracing::debug!(seq, at_ms, ?event, "operation event");
    }
}
