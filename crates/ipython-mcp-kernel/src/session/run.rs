//! One operation's wait as a state machine: from the moment its request is sent until the
//! reply and `idle` are in, the deadline has run out and the interrupt's grace with it, the
//! kernel died, or the caller stopped it.
//!
//! Pure: no I/O and no clock; the time comes with each event. [`Run::step`] takes one
//! [`Event`] and says what to do ([`Action`]); the actor's loop (`operation.rs`) only waits for
//! the next event ([`Run::timer`] names the one timer it arms) and performs the actions. The
//! transitions are tested as a table below.
//!
//! The interrupt, once a cause is decided: its delivery waits for the kernel to begin the
//! request (ipykernel ignores SIGINT until then; bounded like a kernel start), and the grace
//! period counts from delivery, so a kernel slow to begin on a busy machine is never taken for
//! one that ignored SIGINT. Until the kernel sends anything after it, the interrupt is sent once
//! more (see [`RESEND_AFTER`]).

use std::time::Duration;

use tokio::time::Instant;

use super::outcome::{Cause, Death, End};

/// How long a kernel that said nothing since an interrupt gets before it is sent once more.
/// IPython swallows a `KeyboardInterrupt` that lands in its pre-run callbacks (between
/// `execute_input` and the user's code, where an interrupt held until the kernel begins is
/// delivered) and then runs the cell; a second SIGINT, as a person at JupyterLab would send,
/// stops the code instead of the grace period ending in a kill that loses the namespace.
pub(super) const RESEND_AFTER: Duration = Duration::from_secs(1);

/// How long to wait for `idle` once the reply is in (or for the reply once the kernel is
/// idle). Both normally arrive together; this only bounds a lost message, so it is generous:
/// iopub can lag the shell reply by seconds on a loaded machine, and ending early would cut the
/// output's tail. A kernel idle with no reply by then dropped the request: ipykernel does when
/// a SIGINT lands in its handler outside the user's code (ours, or a stray one: a cancellation
/// that raced the end of the call before, someone else's interrupt).
pub(super) const IDLE_AFTER_REPLY: Duration = Duration::from_secs(5);

/// What the collector has seen of the request so far (each fact stays true once true).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Seen {
    /// The kernel began the request (`execute_input`, or output of it).
    pub(super) started: bool,
    /// The reply is in (the helper's, for a helper call).
    pub(super) replied: bool,
    /// The kernel went `idle` after it.
    pub(super) idle: bool,
    /// The reply and `idle` are both in, in either order: the request is over.
    pub(super) done: bool,
}

/// Which timer the run waits on; [`Run::timer`] names the one due first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// The operation's deadline, counted from dispatch.
    Deadline,
    /// The bound on waiting for the kernel to begin before a held interrupt goes anyway.
    BeginWait,
    /// The moment to send an interrupt the kernel said nothing after once more.
    Resend,
    /// The end of the interrupt's grace period: the kernel did not stop.
    Grace,
    /// The bound on waiting for `idle` after the reply (or the reply after `idle`).
    Drain,
}

/// What happens to a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Event {
    /// The request is sent; its receiver is open.
    Sent,
    /// The request could not be sent: the kernel is gone (why, for the message).
    SendFailed(Death),
    /// A message of the request arrived; what the collector has seen after it.
    Message(Seen),
    /// The request's receiver closed: the kernel exited (its exit, for the message).
    KernelExited(Death),
    /// The interrupt asked for by [`Action::Interrupt`] has been delivered.
    InterruptSent,
    /// The timer [`Run::timer`] named went off.
    Elapsed(Timer),
    /// The operation is to stop: a client's cancellation, an `interrupt` call, shutdown.
    Stop(Cause),
}

/// What the loop must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// Interrupt the kernel, then report [`Event::InterruptSent`].
    Interrupt,
    /// Stop waiting: the run ended so ([`Run::cause`] says why it was interrupted, if it was).
    /// A `Killed` or `Died` end is the decision's to act on (kill and replace the kernel).
    Finish(End),
}

/// Where a run's interrupt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Interrupt {
    /// None decided.
    None,
    /// Decided, held until the kernel begins the request (at most `until`).
    Held { until: Instant },
    /// Being delivered (the grace counts from its delivery).
    Sending,
    /// Sent; the kernel has until `grace_until` to stop, then it is killed. Until the kernel
    /// sends anything, the interrupt is sent once more at `resend_at`.
    Delivered {
        grace_until: Instant,
        resend_at: Option<Instant>,
    },
}

/// Where a run is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Phase {
    /// The request is being sent (even the send is bounded by the deadline: a kernel that
    /// stopped reading its socket must not hold the session).
    Sending,
    Waiting,
    Ended(End),
}

/// One operation's wait (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Run {
    pub(super) deadline: Instant,
    /// How long an interrupted kernel gets to stop.
    pub(super) grace: Duration,
    /// How long a held interrupt waits for the kernel to begin.
    pub(super) begin_wait: Duration,
    pub(super) phase: Phase,
    /// Why the operation was interrupted, if it was; the first cause wins.
    pub(super) cause: Option<Cause>,
    pub(super) interrupt: Interrupt,
    /// Once the reply is in (or an interrupted kernel is idle), the rest is awaited until
    /// this; never the deadline, so code that has finished is never interrupted for it.
    pub(super) drain_until: Option<Instant>,
    pub(super) seen: Seen,
}

impl Run {
    pub(super) fn new(deadline: Instant, grace: Duration, begin_wait: Duration) -> Run {
        Run {
            deadline,
            grace,
            begin_wait,
            phase: Phase::Sending,
            cause: None,
            interrupt: Interrupt::None,
            drain_until: None,
            seen: Seen::default(),
        }
    }

    /// Why the operation was interrupted, if it was.
    pub(super) fn cause(&self) -> Option<Cause> {
        self.cause
    }

    /// Whether a stop would do anything: not once a cause is decided (the first wins), nor
    /// once the reply is in (the code is over, and a SIGINT now would land in whatever the
    /// kernel does next: the rest of this request's handler, where ipykernel drops the reply).
    pub(super) fn stoppable(&self) -> bool {
        self.cause.is_none() && !self.seen.replied
    }

    /// How the run ended, once it has.
    pub(super) fn ended(&self) -> Option<&End> {
        match &self.phase {
            Phase::Ended(end) => Some(end),
            Phase::Sending | Phase::Waiting => None,
        }
    }

    /// The moment the loop must wake (as [`Event::Elapsed`]) if nothing happens before.
    pub(super) fn timer(&self) -> (Instant, Timer) {
        if let Some(until) = self.drain_until {
            return (until, Timer::Drain);
        }
        match self.interrupt {
            Interrupt::None | Interrupt::Sending => (self.deadline, Timer::Deadline),
            Interrupt::Held { until } => (until, Timer::BeginWait),
            Interrupt::Delivered {
                grace_until,
                resend_at: Some(at),
            } if at <= grace_until => (at, Timer::Resend),
            Interrupt::Delivered { grace_until, .. } => (grace_until, Timer::Grace),
        }
    }

    /// Takes one event at `now`; returns what to do, in order.
    pub(super) fn step(&mut self, now: Instant, event: Event) -> Vec<Action> {
        let mut actions = Vec::new();
        match (&self.phase, event) {
            (Phase::Ended(_), _) => return actions,
            (Phase::Sending, Event::Sent) => self.phase = Phase::Waiting,
            (_, Event::SendFailed(exit) | Event::KernelExited(exit)) => {
                return self.finish(End::Died(exit));
            }
            (Phase::Sending, Event::Elapsed(_)) => {
                self.cause = Some(Cause::Deadline);
                return self.finish(End::Killed);
            }
            (_, Event::Message(seen)) => {
                self.seen = seen;
                // The kernel is answering after the interrupt: no second one.
                self.heard();
            }
            (_, Event::InterruptSent) => {
                if self.interrupt == Interrupt::Sending {
                    self.interrupt = Interrupt::Delivered {
                        grace_until: now + self.grace,
                        resend_at: Some(now + RESEND_AFTER.min(self.grace / 2)),
                    };
                }
            }
            (_, Event::Elapsed(timer)) => actions = self.elapsed(now, timer),
            (_, Event::Stop(cause)) => actions = self.stop(now, cause),
            (_, Event::Sent) => {}
        }
        if self.phase == Phase::Waiting {
            actions.extend(self.settle(now));
        }
        actions
    }

    fn elapsed(&mut self, now: Instant, timer: Timer) -> Vec<Action> {
        match timer {
            Timer::Drain if !self.seen.replied && self.cause.is_none() => {
                self.finish(End::Unanswered)
            }
            Timer::Drain => self.finish(End::Completed),
            Timer::Deadline => self.stop(now, Cause::Deadline),
            // The kernel never said it began: interrupt it anyway (some kernels announce
            // nothing), with the full grace from now.
            Timer::BeginWait => self.deliver(),
            Timer::Resend => {
                self.heard();
                vec![Action::Interrupt]
            }
            Timer::Grace => self.finish(End::Killed),
        }
    }

    fn stop(&mut self, now: Instant, cause: Cause) -> Vec<Action> {
        if !self.stoppable() {
            return Vec::new();
        }
        self.cause = Some(cause);
        // Shutting down, the kernel goes away whatever it does: no waiting for it to begin,
        // only the grace to stop.
        if cause == Cause::Closing || self.seen.started {
            self.deliver()
        } else {
            self.interrupt = Interrupt::Held {
                until: now + self.begin_wait,
            };
            Vec::new()
        }
    }

    /// What follows from what has been seen, after any event.
    fn settle(&mut self, now: Instant) -> Vec<Action> {
        if self.seen.done {
            return self.finish(End::Completed);
        }
        let mut actions = Vec::new();
        if matches!(self.interrupt, Interrupt::Held { .. }) && self.seen.started {
            actions = self.deliver();
        }
        // A kernel can also end a request with `idle` and no reply (ipykernel drops the reply
        // when a SIGINT lands in its handler outside the user's code): wait for a lagging reply
        // as for a lagging `idle`, not until the deadline.
        if self.drain_until.is_none() && (self.seen.replied || self.seen.idle) {
            self.drain_until = Some(now + IDLE_AFTER_REPLY);
        }
        actions
    }

    fn deliver(&mut self) -> Vec<Action> {
        self.interrupt = Interrupt::Sending;
        vec![Action::Interrupt]
    }

    /// The kernel sent something since the interrupt (or it was sent again): no more resends.
    fn heard(&mut self) {
        if let Interrupt::Delivered { resend_at, .. } = &mut self.interrupt {
            *resend_at = None;
        }
    }

    fn finish(&mut self, end: End) -> Vec<Action> {
        self.phase = Phase::Ended(end.clone());
        vec![Action::Finish(end)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use Cause::{Cancelled, Closing, Deadline, Interrupted};

    const DEADLINE: u64 = 10_000;
    const GRACE: u64 = 5_000;
    const BEGIN_WAIT: u64 = 60_000;
    const RESEND: u64 = 1_000;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    fn seen(started: bool, replied: bool, idle: bool) -> Seen {
        Seen {
            started,
            replied,
            idle,
            done: replied && idle,
        }
    }

    /// The states of the table, for a run dispatched at `base` with the deadline, grace and
    /// begin wait above (in ms).
    struct States {
        base: Instant,
    }

    impl States {
        fn at(&self, millis: u64) -> Instant {
            self.base + ms(millis)
        }

        fn sending(&self) -> Run {
            Run::new(self.at(DEADLINE), ms(GRACE), ms(BEGIN_WAIT))
        }

        fn waiting(&self) -> Run {
            Run {
                phase: Phase::Waiting,
                ..self.sending()
            }
        }

        /// The kernel began the request.
        fn begun(&self) -> Run {
            Run {
                seen: seen(true, false, false),
                ..self.waiting()
            }
        }

        /// `cause` decided and held until the kernel begins; decided at `at`.
        fn held(&self, cause: Cause, at: u64) -> Run {
            Run {
                cause: Some(cause),
                interrupt: Interrupt::Held {
                    until: self.at(at + BEGIN_WAIT),
                },
                ..self.waiting()
            }
        }

        /// Interrupted at the deadline: resent a second later unless heard, killed after
        /// the grace.
        fn delivered(&self) -> Run {
            Run {
                interrupt: Interrupt::Delivered {
                    grace_until: self.at(DEADLINE + GRACE),
                    resend_at: Some(self.at(DEADLINE + RESEND)),
                },
                ..delivering(Deadline, &self.begun())
            }
        }

        /// As `delivered`, the kernel heard from (or the interrupt sent again).
        fn heard(&self) -> Run {
            Run {
                interrupt: Interrupt::Delivered {
                    grace_until: self.at(DEADLINE + GRACE),
                    resend_at: None,
                },
                ..self.delivered()
            }
        }

        /// `run` having seen `seen`, its drain armed at `at`.
        fn draining(&self, run: &Run, seen: Seen, at: u64) -> Run {
            Run {
                seen,
                drain_until: Some(self.at(at) + IDLE_AFTER_REPLY),
                ..run.clone()
            }
        }
    }

    fn delivering(cause: Cause, run: &Run) -> Run {
        Run {
            cause: Some(cause),
            interrupt: Interrupt::Sending,
            ..run.clone()
        }
    }

    fn with_seen(run: &Run, seen: Seen) -> Run {
        Run {
            seen,
            ..run.clone()
        }
    }

    fn ended(run: &Run, end: End) -> Run {
        Run {
            phase: Phase::Ended(end),
            ..run.clone()
        }
    }

    fn exit() -> Death {
        Death::from("killed by SIGKILL (signal 9)".to_owned())
    }

    fn died(run: &Run) -> Run {
        ended(run, End::Died(exit()))
    }

    /// One row: a state, an event at `at` ms from dispatch, then the state and the actions.
    struct Row(&'static str, Run, u64, Event, Run, Vec<Action>);

    fn rows(s: &States) -> Vec<Row> {
        use Event::{Elapsed, InterruptSent, KernelExited, Message, SendFailed, Sent, Stop};
        let (sending, waiting, begun) = (s.sending(), s.waiting(), s.begun());
        let (delivered, heard) = (s.delivered(), s.heard());
        let replied = seen(true, true, false);
        let idle = seen(true, false, true);
        let both = seen(true, true, true);
        let none = Vec::new;
        let interrupt = || vec![Action::Interrupt];
        let finish = |end: End| vec![Action::Finish(end)];
        let (completed, killed) = (|| End::Completed, || End::Killed);
        #[rustfmt::skip]
        let table = vec![
            // Sending.
            Row("sent", sending.clone(), 0, Sent, waiting.clone(), none()),
            Row("send failed", sending.clone(), 0, SendFailed(exit()), died(&sending), finish(End::Died(exit()))),
            Row("deadline while sending", sending.clone(), DEADLINE, Elapsed(Timer::Deadline), ended(&Run { cause: Some(Deadline), ..sending.clone() }, killed()), finish(killed())),
            // Running to the end by itself, reply and idle in either order.
            Row("begun", waiting.clone(), 5, Message(seen(true, false, false)), begun.clone(), none()),
            Row("reply before idle: drain", begun.clone(), 20, Message(replied), s.draining(&begun, replied, 20), none()),
            Row("then idle: completed", s.draining(&begun, replied, 20), 21, Message(both), ended(&s.draining(&begun, both, 20), completed()), finish(completed())),
            Row("idle lost: completed at the drain bound", s.draining(&begun, replied, 20), 5_020, Elapsed(Timer::Drain), ended(&s.draining(&begun, replied, 20), completed()), finish(completed())),
            Row("idle before reply: drain", begun.clone(), 20, Message(idle), s.draining(&begun, idle, 20), none()),
            Row("then the reply: completed", s.draining(&begun, idle, 20), 21, Message(both), ended(&s.draining(&begun, both, 20), completed()), finish(completed())),
            Row("no reply by the drain bound: unanswered", s.draining(&begun, idle, 20), 5_020, Elapsed(Timer::Drain), ended(&s.draining(&begun, idle, 20), End::Unanswered), finish(End::Unanswered)),
            Row("idle without a reply, before the kernel began: drain", waiting.clone(), 20, Message(seen(false, false, true)), s.draining(&waiting, seen(false, false, true), 20), none()),
            // Deadline → interrupt → grace → kill.
            Row("deadline: interrupt", begun.clone(), DEADLINE, Elapsed(Timer::Deadline), delivering(Deadline, &begun), interrupt()),
            Row("delivered: grace and resend armed", delivering(Deadline, &begun), DEADLINE, InterruptSent, delivered.clone(), none()),
            Row("grace expired: killed", heard.clone(), DEADLINE + GRACE, Elapsed(Timer::Grace), ended(&heard, killed()), finish(killed())),
            // An interrupt lost, then repeated.
            Row("kernel silent: interrupt once more", delivered.clone(), DEADLINE + RESEND, Elapsed(Timer::Resend), heard.clone(), interrupt()),
            Row("resend delivered: same grace", heard.clone(), DEADLINE + RESEND, InterruptSent, heard.clone(), none()),
            Row("kernel heard: no resend", delivered.clone(), DEADLINE + 10, Message(seen(true, false, false)), heard.clone(), none()),
            Row("stopped, error reply and idle: completed", heard.clone(), DEADLINE + 20, Message(both), ended(&with_seen(&heard, both), completed()), finish(completed())),
            Row("stopped, idle without a reply: drain", heard.clone(), DEADLINE + 20, Message(idle), s.draining(&heard, idle, DEADLINE + 20), none()),
            Row("interrupt lands after idle: drain", with_seen(&delivering(Deadline, &begun), idle), DEADLINE, InterruptSent, s.draining(&delivered, idle, DEADLINE), none()),
            // Held until the kernel begins.
            Row("deadline before the kernel began: held", waiting.clone(), DEADLINE, Elapsed(Timer::Deadline), s.held(Deadline, DEADLINE), none()),
            Row("held, the kernel begins: interrupt", s.held(Deadline, DEADLINE), DEADLINE + 50, Message(seen(true, false, false)), delivering(Deadline, &begun), interrupt()),
            Row("held past the begin wait: interrupt anyway", s.held(Deadline, DEADLINE), DEADLINE + BEGIN_WAIT, Elapsed(Timer::BeginWait), delivering(Deadline, &waiting), interrupt()),
            // Cancellation, an interrupt call, shutdown.
            Row("cancelled: interrupt", begun.clone(), 30, Stop(Cancelled), delivering(Cancelled, &begun), interrupt()),
            Row("interrupt call before the kernel began: held", waiting.clone(), 30, Stop(Interrupted), s.held(Interrupted, 30), none()),
            Row("shutdown: no waiting for the kernel to begin", waiting.clone(), 30, Stop(Closing), delivering(Closing, &waiting), interrupt()),
            Row("the first cause wins", delivered.clone(), DEADLINE + 10, Stop(Cancelled), delivered.clone(), none()),
            Row("cancelled after the reply: no interrupt", s.draining(&begun, replied, 20), 30, Stop(Cancelled), s.draining(&begun, replied, 20), none()),
            Row("interrupt call after the reply: no interrupt", s.draining(&begun, replied, 20), 30, Stop(Interrupted), s.draining(&begun, replied, 20), none()),
            Row("shutdown after the reply: no interrupt", s.draining(&begun, replied, 20), 30, Stop(Closing), s.draining(&begun, replied, 20), none()),
            Row("interrupted, idle without a reply: completed at the drain bound", s.draining(&heard, idle, DEADLINE + 20), DEADLINE + 5_020, Elapsed(Timer::Drain), ended(&s.draining(&heard, idle, DEADLINE + 20), completed()), finish(completed())),
            // Kernel death.
            Row("kernel died mid-run", begun.clone(), 50, KernelExited(exit()), died(&begun), finish(End::Died(exit()))),
            Row("kernel died in the grace", heard.clone(), DEADLINE + 100, KernelExited(exit()), died(&heard), finish(End::Died(exit()))),
            // Over.
            Row("nothing after the end", died(&begun), 60, Message(both), died(&begun), none()),
        ];
        table
    }

    #[test]
    fn every_step_is_as_the_table_says() {
        let states = States {
            base: Instant::now(),
        };
        for Row(name, mut run, at, event, expect, actions) in rows(&states) {
            let done = run.step(states.at(at), event);
            assert_eq!(run, expect, "{name}: state");
            assert_eq!(done, actions, "{name}: actions");
        }
    }

    #[test]
    fn the_timer_is_the_next_thing_the_run_waits_for() {
        let states = States {
            base: Instant::now(),
        };
        let at = |millis| states.at(millis);
        let mut run = states.sending();
        assert_eq!(run.timer(), (at(DEADLINE), Timer::Deadline));
        run.step(at(0), Event::Sent);
        run.step(at(5), Event::Message(seen(true, false, false)));
        assert_eq!(run.timer(), (at(DEADLINE), Timer::Deadline));
        run.step(at(DEADLINE), Event::Elapsed(Timer::Deadline));
        run.step(at(DEADLINE), Event::InterruptSent);
        assert_eq!(run.timer(), (at(DEADLINE + RESEND), Timer::Resend));
        run.step(at(DEADLINE + RESEND), Event::Elapsed(Timer::Resend));
        assert_eq!(run.timer(), (at(DEADLINE + GRACE), Timer::Grace));
        run.step(
            at(DEADLINE + 1_100),
            Event::Message(seen(true, false, true)),
        );
        let drain = at(DEADLINE + 1_100) + IDLE_AFTER_REPLY;
        assert_eq!(run.timer(), (drain, Timer::Drain));
        // Held: the begin wait. With no grace at all, the resend still comes before the kill.
        let mut run = Run::new(at(DEADLINE), Duration::ZERO, ms(BEGIN_WAIT));
        run.step(at(0), Event::Sent);
        run.step(at(30), Event::Stop(Interrupted));
        assert_eq!(run.timer(), (at(30 + BEGIN_WAIT), Timer::BeginWait));
        run.step(at(40), Event::Stop(Closing));
        run.step(at(30 + BEGIN_WAIT), Event::Elapsed(Timer::BeginWait));
        run.step(at(30 + BEGIN_WAIT), Event::InterruptSent);
        assert_eq!(run.timer(), (at(30 + BEGIN_WAIT), Timer::Resend));
    }
}
