//! The end-of-operation decision: from how an operation ended and why it was interrupted, the
//! status, error, interruption and namespace outcome the caller is told.
//!
//! Pure: no I/O, no clock. The one step between "how it ended" and "what the caller hears" that
//! needs the kernel — confirming that a cooperatively stopped kernel still answers, or killing
//! and replacing one that did not stop — is named by [`follow_up`] and performed by the actor,
//! whose result comes back as [`Checked`]. Both are tested as a table below.

use std::time::Duration;

use ipython_mcp_output::output::{
    Code, ErrorInfo, ExecutionStatus, Interruption, NamespaceOutcome,
};

/// A running operation stopped by the server's shutdown.
fn closing_error() -> ErrorInfo {
    ErrorInfo::new(
        Code::RuntimeClosed,
        "the server shut down while this was running; it was interrupted",
    )
}

/// How the wait for an operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum End {
    /// Reply and idle arrived (possibly after an interrupt), or an interrupted kernel went idle.
    Completed,
    /// The kernel went idle without replying, and nobody interrupted it: it dropped the
    /// request (a stray SIGINT in its handler); whether the code ran, or how far, is unknown.
    Unanswered,
    /// It did not stop within the grace period after an interrupt.
    Killed,
    /// The kernel process exited (how, for the message and the code).
    Died(Death),
}

/// How a kernel died, as the caller is told: its exit in words, and the limit and peak when it
/// certainly ran out of memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Death {
    pub(super) exit: String,
    /// `(limit_bytes, peak_bytes)`.
    pub(super) out_of_memory: Option<(u64, u64)>,
}

impl From<&ipython_mcp_jupyter::KernelExit> for Death {
    fn from(exit: &ipython_mcp_jupyter::KernelExit) -> Death {
        Death {
            exit: exit.to_string(),
            out_of_memory: exit.out_of_memory(),
        }
    }
}

impl From<String> for Death {
    /// A death known only by its words (the kernel is gone, how is not known).
    fn from(exit: String) -> Death {
        Death {
            exit,
            out_of_memory: None,
        }
    }
}

/// Why an operation was interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cause {
    Deadline,
    Cancelled,
    /// An `interrupt` call, from any client.
    Interrupted,
    /// The server is shutting down.
    Closing,
}

/// What the actor must find out from the kernel before the decision can be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FollowUp {
    /// Nothing: the decision needs no more facts.
    None,
    /// A cooperative stop: confirm with a heartbeat that the kernel still answers before its
    /// namespace is called preserved.
    ConfirmHealth,
    /// The kernel did not stop, or died: kill it and start (or promote) a replacement.
    KillAndReplace,
}

/// What the follow-up found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Checked {
    Nothing,
    /// The heartbeat after a cooperative stop: answered or not.
    Healthy(bool),
    /// Whether a replacement kernel is running now (with an empty namespace).
    Replaced(bool),
    /// A replacement is running, and the namespace came back from the session's checkpoint.
    Restored,
    /// A replacement is running, but loading the checkpoint failed part-way.
    RestoreFailed,
}

/// Everything the decision depends on, as plain values.
#[derive(Debug, Clone)]
pub(super) struct Ending {
    pub(super) end: End,
    pub(super) cause: Option<Cause>,
    /// The operation finished by itself: an `ok` execute_reply, or a helper reply with `ok`.
    pub(super) finished_ok: bool,
    /// The error the kernel reported (user code raising), if any.
    pub(super) reported_error: Option<ErrorInfo>,
    /// The operation's deadline and the configured grace, for the messages.
    pub(super) timeout: Duration,
    pub(super) grace: Duration,
    /// The result of [`follow_up`]'s step.
    pub(super) checked: Checked,
    pub(super) shutting_down: bool,
}

/// What the caller is told.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Decision {
    pub(super) status: ExecutionStatus,
    pub(super) error: Option<ErrorInfo>,
    pub(super) interruption: Option<Interruption>,
    pub(super) namespace: Option<NamespaceOutcome>,
}

/// Which step the actor takes with the kernel before [`decide`].
pub(super) fn follow_up(end: &End, cause: Option<Cause>, finished_ok: bool) -> FollowUp {
    match (end, cause) {
        (End::Completed, None) => FollowUp::None,
        // The code finished by itself before the interrupt could matter.
        (End::Completed, Some(_)) if finished_ok => FollowUp::None,
        (End::Completed, Some(_)) | (End::Unanswered, _) => FollowUp::ConfirmHealth,
        // Shutting down: the kernel is stopped by the actor's close, never replaced.
        (End::Killed, Some(Cause::Closing)) => FollowUp::None,
        (End::Killed, _) | (End::Died(_), _) => FollowUp::KillAndReplace,
    }
}

/// The end-of-operation decision (see the module's documentation).
pub(super) fn decide(ending: &Ending) -> Decision {
    let Ending {
        end,
        cause,
        finished_ok,
        reported_error,
        timeout,
        grace,
        checked,
        shutting_down,
    } = ending;
    let cause = *cause;
    let mut decision = Decision {
        status: if *finished_ok {
            ExecutionStatus::Ok
        } else {
            ExecutionStatus::Error
        },
        error: reported_error.clone(),
        interruption: cause.map(|_| Interruption::Cooperative),
        namespace: None,
    };
    match follow_up(end, cause, *finished_ok) {
        FollowUp::None => match (end, cause) {
            (End::Completed, None) => {}
            (End::Completed, Some(_)) => decision.namespace = Some(NamespaceOutcome::Preserved),
            // Killed while shutting down.
            _ => {
                decision.status = ExecutionStatus::Cancelled;
                decision.interruption = Some(Interruption::Terminated);
                decision.namespace = Some(NamespaceOutcome::Reset);
                decision.error = Some(closing_error());
            }
        },
        FollowUp::ConfirmHealth => {
            decision.namespace = Some(if *checked == Checked::Healthy(true) {
                NamespaceOutcome::Preserved
            } else {
                NamespaceOutcome::Unknown
            });
            let (status, error) = match cause {
                Some(cause) => stopped(cause, *timeout),
                None => {
                    decision.interruption = Some(Interruption::Cooperative);
                    unanswered()
                }
            };
            decision.status = status;
            decision.error = Some(error);
        }
        FollowUp::KillAndReplace => {
            let died = matches!(end, End::Died(_));
            let hint = match checked {
                Checked::Replaced(true) => {
                    "a fresh kernel replaced it: every variable, import and function is gone; re-run your setup"
                }
                Checked::Restored => {
                    "a fresh kernel replaced it and the namespace as of the last completed execution was restored from its checkpoint (runtime.restore lists the names back and those lost); what this call did is not there"
                }
                Checked::RestoreFailed => {
                    "a fresh kernel replaced it, but loading the namespace's checkpoint failed: check which names are there before relying on them"
                }
                _ if *shutting_down => "the server is shutting down",
                _ => {
                    "no replacement kernel could be started: the session is unavailable, and its status says why"
                }
            };
            decision.namespace = Some(match checked {
                Checked::Restored => NamespaceOutcome::Restored,
                Checked::RestoreFailed => NamespaceOutcome::Unknown,
                _ => NamespaceOutcome::Reset,
            });
            let (code, message) = killed(end, cause, *timeout, *grace);
            let mut error = ErrorInfo::new(code, message).with_hint(hint);
            if let End::Died(Death {
                out_of_memory: Some((limit, peak)),
                ..
            }) = end
            {
                error.limit_bytes = Some(*limit);
                error.peak_bytes = Some(*peak);
                error.hint = Some(format!(
                    "{hint}; the code needed more memory than the kernel may use: work on smaller pieces (chunks, generators, smaller dtypes, del what is no longer needed) or ask the user to raise the limit"
                ));
            }
            decision.status = match (died, cause) {
                (true, _) => ExecutionStatus::Error,
                (false, Some(Cause::Cancelled | Cause::Interrupted)) => ExecutionStatus::Cancelled,
                _ => ExecutionStatus::Timeout,
            };
            if !died {
                decision.interruption = Some(Interruption::Terminated);
            }
            decision.error = Some(error);
        }
    }
    decision
}

/// What the caller of a request the kernel dropped is told (see [`End::Unanswered`]).
fn unanswered() -> (ExecutionStatus, ErrorInfo) {
    (
        ExecutionStatus::Cancelled,
        ErrorInfo::new(
            Code::OperationCancelled,
            "the kernel dropped this request without answering: an interrupt reached it outside the code (someone else's, or a cancellation that raced the end of an earlier call); the code may not have run, or only in part",
        )
        .with_hint("the namespace was preserved: check whether the code's effects are there before running it again"),
    )
}

/// What the caller of an operation that stopped cooperatively is told, by its cause.
fn stopped(cause: Cause, timeout: Duration) -> (ExecutionStatus, ErrorInfo) {
    let kept = "the namespace was preserved: anything defined before the interrupt is still there";
    match cause {
        Cause::Deadline => (
            ExecutionStatus::Timeout,
            ErrorInfo::new(
                Code::OperationTimeout,
                format!(
                    "execution exceeded its {:.1}s deadline and was interrupted",
                    timeout.as_secs_f64()
                ),
            )
            .with_hint(kept),
        ),
        Cause::Cancelled => (
            ExecutionStatus::Cancelled,
            ErrorInfo::new(
                Code::OperationCancelled,
                "cancelled by the client; the kernel was interrupted",
            )
            .with_hint(kept),
        ),
        Cause::Interrupted => (
            ExecutionStatus::Cancelled,
            ErrorInfo::new(Code::OperationCancelled, "stopped by an interrupt call")
                .with_hint(kept),
        ),
        Cause::Closing => (ExecutionStatus::Cancelled, closing_error()),
    }
}

/// The error's code and message for an operation whose kernel was killed or died.
fn killed(end: &End, cause: Option<Cause>, timeout: Duration, grace: Duration) -> (Code, String) {
    let grace = grace.as_secs_f64();
    match (end, cause) {
        (
            End::Died(Death {
                exit,
                out_of_memory: Some(_),
            }),
            _,
        ) => (
            Code::OutOfMemory,
            format!("the kernel ran out of memory during execution ({exit})"),
        ),
        (End::Died(Death { exit, .. }), _) => (
            Code::KernelDied,
            format!("the kernel process died during execution ({exit})"),
        ),
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use Cause::{Cancelled, Closing, Deadline, Interrupted};
    use Checked::{Healthy, Nothing, Replaced, RestoreFailed, Restored};
    use ExecutionStatus as S;
    use Interruption::{Cooperative, Terminated};
    use NamespaceOutcome::{Preserved, Reset, Unknown};
    const RESTORED: &str = "restored from its checkpoint";
    const RESTORE_FAILED: &str = "loading the namespace's checkpoint failed";

    const FRESH: &str = "a fresh kernel replaced it";
    const KEPT: &str = "the namespace was preserved";
    const NO_SPARE: &str = "no replacement kernel could be started";
    const GOING: &str = "the server is shutting down";

    fn died() -> End {
        End::Died(Death::from("killed by SIGKILL (signal 9)".to_owned()))
    }

    /// One row: the inputs, then what the caller must be told.
    struct Row {
        end: End,
        cause: Option<Cause>,
        finished_ok: bool,
        checked: Checked,
        shutting_down: bool,
        follow_up: FollowUp,
        status: ExecutionStatus,
        code: Option<Code>,
        interruption: Option<Interruption>,
        namespace: Option<NamespaceOutcome>,
        /// A fragment of the hint, or `None` for no hint.
        hint: Option<&'static str>,
    }

    #[allow(clippy::too_many_arguments)]
    fn row(
        (end, cause, finished_ok, checked, shutting_down): (
            End,
            Option<Cause>,
            bool,
            Checked,
            bool,
        ),
        follow_up: FollowUp,
        status: ExecutionStatus,
        code: Option<Code>,
        interruption: Option<Interruption>,
        namespace: Option<NamespaceOutcome>,
        hint: Option<&'static str>,
    ) -> Row {
        Row {
            end,
            cause,
            finished_ok,
            checked,
            shutting_down,
            follow_up,
            status,
            code,
            interruption,
            namespace,
            hint,
        }
    }

    /// What the kernel reported when the code did not finish by itself (user code raising, or
    /// the KeyboardInterrupt it was stopped with).
    fn reported(finished_ok: bool) -> Option<ErrorInfo> {
        (!finished_ok).then(|| ErrorInfo::new(Code::ExecutionError, "KeyboardInterrupt"))
    }

    fn ending(row: &Row) -> Ending {
        Ending {
            end: row.end.clone(),
            cause: row.cause,
            finished_ok: row.finished_ok,
            reported_error: reported(row.finished_ok),
            timeout: Duration::from_secs(30),
            grace: Duration::from_secs(3),
            checked: row.checked,
            shutting_down: row.shutting_down,
        }
    }

    #[test]
    fn every_ending_is_decided_as_the_table_says() {
        use FollowUp::{ConfirmHealth, KillAndReplace, None as Done};
        let c = End::Completed;
        let k = End::Killed;
        let exec = Some(Code::ExecutionError);
        let timeout = Some(Code::OperationTimeout);
        let cancelled = Some(Code::OperationCancelled);
        let closed = Some(Code::RuntimeClosed);
        let dead = Some(Code::KernelDied);
        #[rustfmt::skip]
        let table = [
            // Finished with no interrupt: whatever the kernel said.
            row((c.clone(), None, true, Nothing, false), Done, S::Ok, None, None, None, None),
            row((c.clone(), None, false, Nothing, false), Done, S::Error, exec, None, None, None),
            // Finished by itself before the interrupt could matter.
            row((c.clone(), Some(Deadline), true, Nothing, false), Done, S::Ok, None, Some(Cooperative), Some(Preserved), None),
            row((c.clone(), Some(Cancelled), true, Nothing, false), Done, S::Ok, None, Some(Cooperative), Some(Preserved), None),
            row((c.clone(), Some(Interrupted), true, Nothing, false), Done, S::Ok, None, Some(Cooperative), Some(Preserved), None),
            row((c.clone(), Some(Closing), true, Nothing, true), Done, S::Ok, None, Some(Cooperative), Some(Preserved), None),
            // Stopped cooperatively: preserved only if the kernel still answers.
            row((c.clone(), Some(Deadline), false, Healthy(true), false), ConfirmHealth, S::Timeout, timeout, Some(Cooperative), Some(Preserved), Some(KEPT)),
            row((c.clone(), Some(Deadline), false, Healthy(false), false), ConfirmHealth, S::Timeout, timeout, Some(Cooperative), Some(Unknown), Some(KEPT)),
            row((c.clone(), Some(Cancelled), false, Healthy(true), false), ConfirmHealth, S::Cancelled, cancelled, Some(Cooperative), Some(Preserved), Some(KEPT)),
            row((c.clone(), Some(Cancelled), false, Healthy(false), false), ConfirmHealth, S::Cancelled, cancelled, Some(Cooperative), Some(Unknown), Some(KEPT)),
            row((c.clone(), Some(Interrupted), false, Healthy(true), false), ConfirmHealth, S::Cancelled, cancelled, Some(Cooperative), Some(Preserved), Some(KEPT)),
            row((c.clone(), Some(Interrupted), false, Healthy(false), false), ConfirmHealth, S::Cancelled, cancelled, Some(Cooperative), Some(Unknown), Some(KEPT)),
            row((c.clone(), Some(Closing), false, Healthy(true), true), ConfirmHealth, S::Cancelled, closed, Some(Cooperative), Some(Preserved), None),
            row((c.clone(), Some(Closing), false, Healthy(false), true), ConfirmHealth, S::Cancelled, closed, Some(Cooperative), Some(Unknown), None),
            // Did not stop within the grace: killed and replaced.
            row((k.clone(), Some(Deadline), false, Replaced(true), false), KillAndReplace, S::Timeout, timeout, Some(Terminated), Some(Reset), Some(FRESH)),
            row((k.clone(), Some(Deadline), false, Replaced(false), false), KillAndReplace, S::Timeout, timeout, Some(Terminated), Some(Reset), Some(NO_SPARE)),
            row((k.clone(), Some(Deadline), false, Replaced(false), true), KillAndReplace, S::Timeout, timeout, Some(Terminated), Some(Reset), Some(GOING)),
            row((k.clone(), Some(Cancelled), false, Replaced(true), false), KillAndReplace, S::Cancelled, cancelled, Some(Terminated), Some(Reset), Some(FRESH)),
            row((k.clone(), Some(Cancelled), false, Replaced(false), true), KillAndReplace, S::Cancelled, cancelled, Some(Terminated), Some(Reset), Some(GOING)),
            row((k.clone(), Some(Interrupted), false, Replaced(true), false), KillAndReplace, S::Cancelled, cancelled, Some(Terminated), Some(Reset), Some(FRESH)),
            row((k.clone(), Some(Interrupted), false, Replaced(false), false), KillAndReplace, S::Cancelled, cancelled, Some(Terminated), Some(Reset), Some(NO_SPARE)),
            // Replaced with the checkpoint loaded, or a load that failed part-way.
            row((k.clone(), Some(Deadline), false, Restored, false), KillAndReplace, S::Timeout, timeout, Some(Terminated), Some(NamespaceOutcome::Restored), Some(RESTORED)),
            row((k.clone(), Some(Cancelled), false, RestoreFailed, false), KillAndReplace, S::Cancelled, cancelled, Some(Terminated), Some(Unknown), Some(RESTORE_FAILED)),
            row((died(), None, false, Restored, false), KillAndReplace, S::Error, dead, None, Some(NamespaceOutcome::Restored), Some(RESTORED)),
            row((died(), None, false, RestoreFailed, false), KillAndReplace, S::Error, dead, None, Some(Unknown), Some(RESTORE_FAILED)),
            // Dropped by the kernel without a reply, nobody's interrupt: confirmed like a stop.
            row((End::Unanswered, None, false, Healthy(true), false), ConfirmHealth, S::Cancelled, cancelled, Some(Cooperative), Some(Preserved), Some("check whether the code's effects")),
            row((End::Unanswered, None, false, Healthy(false), false), ConfirmHealth, S::Cancelled, cancelled, Some(Cooperative), Some(Unknown), Some("check whether the code's effects")),
            // Shutting down: killed by the close, never replaced.
            row((k.clone(), Some(Closing), false, Nothing, true), Done, S::Cancelled, closed, Some(Terminated), Some(Reset), None),
            // The kernel died: replaced, whatever the cause; an interrupt already sent stays
            // cooperative (the kill was not ours).
            row((died(), None, false, Replaced(true), false), KillAndReplace, S::Error, dead, None, Some(Reset), Some(FRESH)),
            row((died(), None, true, Replaced(true), false), KillAndReplace, S::Error, dead, None, Some(Reset), Some(FRESH)),
            row((died(), None, false, Replaced(false), false), KillAndReplace, S::Error, dead, None, Some(Reset), Some(NO_SPARE)),
            row((died(), Some(Deadline), false, Replaced(true), false), KillAndReplace, S::Error, dead, Some(Cooperative), Some(Reset), Some(FRESH)),
            row((died(), Some(Cancelled), false, Replaced(true), false), KillAndReplace, S::Error, dead, Some(Cooperative), Some(Reset), Some(FRESH)),
            row((died(), Some(Interrupted), false, Replaced(true), false), KillAndReplace, S::Error, dead, Some(Cooperative), Some(Reset), Some(FRESH)),
            row((died(), Some(Closing), false, Replaced(false), true), KillAndReplace, S::Error, dead, Some(Cooperative), Some(Reset), Some(GOING)),
        ];
        for (index, row) in table.iter().enumerate() {
            check(index, row);
        }
    }

    /// One row of the table, checked.
    fn check(index: usize, row: &Row) {
        let at = format!(
            "row {index}: {:?} {:?} ok={} {:?}",
            row.end, row.cause, row.finished_ok, row.checked
        );
        assert_eq!(
            follow_up(&row.end, row.cause, row.finished_ok),
            row.follow_up,
            "{at}"
        );
        let decision = decide(&ending(row));
        assert_eq!(decision.status, row.status, "{at}");
        assert_eq!(
            decision.error.as_ref().map(|error| error.code),
            row.code,
            "{at}"
        );
        assert_eq!(decision.interruption, row.interruption, "{at}");
        assert_eq!(decision.namespace, row.namespace, "{at}");
        let hint = decision.error.as_ref().and_then(|error| error.hint.clone());
        match row.hint {
            Some(fragment) => assert!(
                hint.as_deref().is_some_and(|hint| hint.contains(fragment)),
                "{at}: {hint:?}"
            ),
            None => assert_eq!(hint, None, "{at}: no hint"),
        }
    }

    #[test]
    fn a_certain_memory_death_is_out_of_memory_with_its_limit_and_peak() {
        let oom = ipython_mcp_jupyter::KernelExit::OutOfMemory {
            limit_bytes: 300 << 20,
            peak_bytes: 310 << 20,
            enforcer: ipython_mcp_jupyter::Enforcer::Watchdog,
        };
        let likely = ipython_mcp_jupyter::KernelExit::LikelyOutOfMemory {
            signal: 9,
            peak_bytes: 290 << 20,
            bound_bytes: 300 << 20,
            bound: ipython_mcp_jupyter::MemoryBound::Limit,
        };
        let decided = |exit: &ipython_mcp_jupyter::KernelExit| {
            decide(&Ending {
                end: End::Died(Death::from(exit)),
                cause: None,
                finished_ok: false,
                reported_error: None,
                timeout: Duration::from_secs(1),
                grace: Duration::from_secs(1),
                checked: Replaced(true),
                shutting_down: false,
            })
        };
        let decision = decided(&oom);
        assert_eq!(decision.status, S::Error);
        assert_eq!(decision.namespace, Some(Reset));
        let error = decision.error.expect("an error");
        assert_eq!(error.code, Code::OutOfMemory);
        assert_eq!(
            (error.limit_bytes, error.peak_bytes),
            (Some(300 << 20), Some(310 << 20))
        );
        assert_eq!(
            error.message,
            "the kernel ran out of memory during execution (its processes grew past their 300.0 MiB limit (310.0 MiB seen) and the server's memory watchdog killed them)"
        );
        // Likely is not certain: still a death, said as likely, without the memory fields.
        let error = decided(&likely).error.expect("an error");
        assert_eq!(error.code, Code::KernelDied);
        assert_eq!(error.limit_bytes, None);
        assert_eq!(
            error.message,
            "the kernel process died during execution (killed by SIGKILL (signal 9), likely by the system's out-of-memory killer: its processes had used up to 290.0 MiB of its 300.0 MiB limit)"
        );
    }

    #[test]
    fn messages_name_the_deadline_the_grace_and_the_exit() {
        let decided = |end: End, cause: Option<Cause>, checked: Checked| {
            let ending = Ending {
                end,
                cause,
                finished_ok: false,
                reported_error: reported(false),
                timeout: Duration::from_millis(1500),
                grace: Duration::from_millis(400),
                checked,
                shutting_down: false,
            };
            decide(&ending).error.expect("an error").message
        };
        assert_eq!(
            decided(End::Completed, Some(Deadline), Healthy(true)),
            "execution exceeded its 1.5s deadline and was interrupted"
        );
        assert_eq!(
            decided(End::Killed, Some(Deadline), Replaced(true)),
            "execution exceeded its 1.5s deadline and did not stop within 0.4s of an interrupt; the kernel was killed"
        );
        assert_eq!(
            decided(End::Killed, Some(Cancelled), Replaced(true)),
            "cancelled by the client; the code did not stop within 0.4s of an interrupt, so the kernel was killed"
        );
        assert_eq!(
            decided(End::Killed, Some(Interrupted), Replaced(true)),
            "stopped by an interrupt call; the code did not stop within 0.4s, so the kernel was killed"
        );
        assert_eq!(
            decided(died(), None, Replaced(true)),
            "the kernel process died during execution (killed by SIGKILL (signal 9))"
        );
        assert_eq!(
            decided(End::Completed, Some(Interrupted), Healthy(true)),
            "stopped by an interrupt call"
        );
    }

    /// Over every input, not only those the table lists (the actor never kills without a
    /// cause, for one): an answer is ok exactly when a finished operation says so, the
    /// namespace is reset exactly when the kernel went away and no checkpoint came back, and
    /// an interruption is reported
    /// exactly when there was a cause or a kill.
    #[test]
    fn every_combination_is_consistent() {
        let ends = [End::Completed, End::Unanswered, End::Killed, died()];
        let causes = [
            None,
            Some(Deadline),
            Some(Cancelled),
            Some(Interrupted),
            Some(Closing),
        ];
        let checks = [
            Nothing,
            Healthy(true),
            Healthy(false),
            Replaced(true),
            Replaced(false),
            Restored,
            RestoreFailed,
        ];
        for end in &ends {
            for cause in causes {
                for finished_ok in [false, true] {
                    for checked in checks {
                        for shutting_down in [false, true] {
                            let ending = Ending {
                                end: end.clone(),
                                cause,
                                finished_ok,
                                reported_error: reported(finished_ok),
                                timeout: Duration::from_secs(1),
                                grace: Duration::from_secs(1),
                                checked,
                                shutting_down,
                            };
                            let at = format!("{ending:?}");
                            let decision = decide(&ending);
                            let step = follow_up(end, cause, finished_ok);
                            let gone = step == FollowUp::KillAndReplace
                                || (*end == End::Killed && cause == Some(Closing));
                            // Gone, unless the checkpoint brought it back (or may have).
                            let kept = step == FollowUp::KillAndReplace
                                && matches!(checked, Restored | RestoreFailed);
                            assert_eq!(
                                decision.namespace == Some(Reset),
                                gone && !kept,
                                "{at}: {decision:?}"
                            );
                            let ok = decision.status == S::Ok && decision.error.is_none();
                            assert_eq!(
                                ok,
                                *end == End::Completed && finished_ok,
                                "{at}: {decision:?}"
                            );
                            assert_eq!(
                                decision.interruption.is_some(),
                                // A dropped request was interrupted too, by someone else.
                                cause.is_some() || matches!(end, End::Killed | End::Unanswered),
                                "{at}: {decision:?}"
                            );
                        }
                    }
                }
            }
        }
    }
}
