//! Running one operation: the request, the deadline, the interrupt and its grace period,
//! cancellation, and the output the caller gets.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipython_mcp_jupyter::protocol::{CommId, CommMsg, ExecuteRequest, JupyterMessage, ReplyStatus};
use ipython_mcp_jupyter::Channel;
use tokio::time::Instant;

use super::actor::Actor;
use super::outcome::{self, Cause, Checked, Decision, End, Ending, FollowUp};
use super::*;
use crate::collect::Collector;
use crate::executions::SpoolWriter;
use crate::output::ExecutionStatus;
use crate::payload::SpoolFiles;
use crate::status::SessionState;

impl Actor {
    pub(super) async fn execute(
        &mut self,
        ticket: &Ticket,
        args: &ExecuteArgs,
        helper: Option<&HelperRequest>,
        record: Option<&Arc<Record>>,
    ) -> Ended {
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
                    let pageable = self.shared.executions.spool().is_some();
                    record.dispatched(&msg_id, self.epoch, Arc::clone(&collector), pageable);
                    spooled_as = Some(msg_id.clone());
                }
                // A local helper spools its kernel's streams itself; other kernels' output
                // (remote ones included: their helper cannot reach our disk) is spooled here as
                // it arrives.
                let mut spool_writer = match (running.helper_spools, record) {
                    (false, Some(record)) => {
                        SpoolWriter::new(&self.shared.executions, record, &msg_id)
                            .map(|writer| writer.with_helper_comm(running.helper_comm.clone()))
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
                    let mut resend = false;
                    let interrupt_cause = tokio::select! {
                        routed = receiver.recv() => match routed {
                            Some(routed) => {
                                // The kernel is answering after the interrupt: no second one.
                                interrupt = interrupt.heard();
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
                                InterruptState::Delivered { resend_at: Some(at), .. }
                                    if Instant::now() >= at =>
                                {
                                    resend = true;
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
                    if resend {
                        running.kernel.interrupt().await;
                        interrupt = interrupt.heard();
                    }
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
        // The marker between a stream's head and tail names the get_output call that pages
        // the middle, when the full stream is on disk.
        let pager = (spooled_as.is_some() && self.shared.executions.spool().is_some())
            .then(|| ticket.execution_id.as_str().to_owned());
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
        // Confirming a cooperative stop or replacing the kernel is the only I/O the decision
        // needs; which one is itself part of the decision.
        let checked = match outcome::follow_up(&ended, cause, finished_ok) {
            FollowUp::None => Checked::Nothing,
            FollowUp::ConfirmHealth => {
                Checked::Healthy(running.kernel.heartbeat(COOPERATIVE_HEARTBEAT).await)
            }
            FollowUp::KillAndReplace => Checked::Replaced(self.replace().await),
        };
        let Decision {
            status,
            error,
            interruption,
            namespace,
        } = outcome::decide(&Ending {
            end: ended,
            cause,
            finished_ok,
            reported_error: collected.error.clone(),
            timeout,
            grace: options.timeouts.interruption_grace,
            checked,
            shutting_down: shutdown.is_cancelled(),
        });
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
            stdout: collected.stdout.render("stdout", pager.as_deref()),
            stderr: collected.stderr.render("stderr", pager.as_deref()),
            stdout_omitted_chars: collected.stdout.omitted_chars,
            stderr_omitted_chars: collected.stderr.omitted_chars,
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

/// How long to wait for `idle` once the reply is in (or for the reply once an interrupted
/// kernel is idle). Both normally arrive together; this only bounds a lost message, so it is
/// generous: iopub can lag the shell reply by seconds on a loaded machine, and ending early
/// would cut the output's tail.
pub(super) const IDLE_AFTER_REPLY: Duration = Duration::from_secs(5);

/// Where an operation's interrupt is.
#[derive(Debug, Clone, Copy)]
pub(super) enum InterruptState {
    /// None decided.
    Idle,
    /// Decided, held until the kernel begins the request (at most `until`).
    Pending { until: Instant },
    /// Sent; the kernel has until `grace_until` to stop, then it is killed. Until the kernel
    /// sends anything, the interrupt is sent once more at `resend_at`.
    Delivered {
        grace_until: Instant,
        resend_at: Option<Instant>,
    },
}

/// How long a kernel that said nothing since an interrupt gets before it is sent once more.
/// IPython swallows a `KeyboardInterrupt` that lands in its pre-run callbacks (between
/// `execute_input` and the user's code, where an interrupt held until the kernel begins is
/// delivered) and then runs the cell; a second SIGINT, as a person at JupyterLab would send,
/// stops the code instead of the grace period ending in a kill that loses the namespace.
const RESEND_AFTER: Duration = Duration::from_secs(1);

impl InterruptState {
    pub(super) fn delivered(grace: Duration) -> Self {
        let now = Instant::now();
        Self::Delivered {
            grace_until: now + grace,
            resend_at: Some(now + RESEND_AFTER.min(grace / 2)),
        }
    }

    /// The kernel sent something since the interrupt (or it was sent again): no more resends.
    pub(super) fn heard(self) -> Self {
        match self {
            Self::Delivered { grace_until, .. } => Self::Delivered {
                grace_until,
                resend_at: None,
            },
            other => other,
        }
    }

    /// The next moment the interrupt itself needs the loop to act, if any.
    pub(super) fn wake(self) -> Option<Instant> {
        match self {
            Self::Idle => None,
            Self::Pending { until } => Some(until),
            Self::Delivered {
                grace_until,
                resend_at,
            } => Some(resend_at.map_or(grace_until, |at| at.min(grace_until))),
        }
    }
}
