//! The session's owner task: it serves the inbox in admission order, keeps the kernel and its
//! warm spares, replaces a kernel that dies or stops answering, and is supervised so that a
//! panic marks the session unavailable instead of taking the server down.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::error::StartFailure;
use super::outcome::Checked;
use super::transport::{Launcher, Running};
use super::*;
use crate::status::SessionState;
use ipython_mcp_output::output::{Interruption, NamespaceOutcome, Restore};

/// How long a closing session waits for a spare still starting on a Jupyter server, so that
/// it can delete it (its start request cannot be taken back).
const SPARE_SETTLE_WAIT: Duration = Duration::from_secs(10);

/// How long deleting the session's checkpoint may take (a restart, a remote session's close).
const DISCARD_BOUND: Duration = Duration::from_secs(2);

/// The least time a checkpoint gets to load into a replacement.
pub(super) const RESTORE_BOUND: Duration = Duration::from_secs(120);

/// What the next call is told of a replacement between calls.
fn replaced_between_calls(checked: Checked) -> &'static str {
    match checked {
        Checked::Restored => {
            "the namespace as of the last completed execution was restored from its checkpoint (runtime.restore lists the names back and those lost)"
        }
        Checked::RestoreFailed => {
            "loading the namespace's checkpoint failed part-way: check which names are there before relying on them"
        }
        _ => "earlier variables, imports and functions are gone",
    }
}

/// A spare kernel being prepared (or ready) in the background, a task of the session's.
pub(super) type Spare = tokio::task::JoinHandle<Result<Running, StartFailure>>;

pub(super) struct Actor {
    pub(super) shared: Arc<Shared>,
    pub(super) commands: mpsc::UnboundedReceiver<Command>,
    /// Starts kernels (see `transport`); `provisioned` once its provisioning succeeded.
    pub(super) launcher: Arc<dyn Launcher>,
    pub(super) provisioned: bool,
    pub(super) kernel: Option<Running>,
    pub(super) spares: std::collections::VecDeque<Spare>,
    pub(super) epoch: u64,
    /// Set when the kernel was replaced between calls (it died while idle): the next call's
    /// result says so, since nothing else would tell the agent its state is gone.
    pub(super) unreported_reset: Option<String>,
    /// The last answer's spool work outlasted its wait: the disk is behind, so answers wait
    /// only briefly until spool work finishes within that again.
    pub(super) spool_lagging: bool,
    /// What the latest replacement brought back from the checkpoint, until the result that
    /// reports the replacement carries it.
    pub(super) restored: Option<Restore>,
}

/// Runs the session's actor and outlives it: the inbox lives here, so when the actor panics,
/// `fail` can answer every caller and wait for `kernel_restart`, which starts a fresh actor on
/// the same inbox. Without this, a panic would drop the inbox and leave callers told the server
/// is shutting down.
pub(super) async fn supervise(
    shared: Arc<Shared>,
    commands: mpsc::UnboundedReceiver<Command>,
    launcher: Arc<dyn Launcher>,
) {
    use futures_util::FutureExt as _;
    let mut actor = Actor::new(Arc::clone(&shared), commands, launcher);
    let mut restart = None;
    loop {
        // The actor's state is thrown away after a panic (only its inbox, launcher and epoch
        // are kept, and its kernels are killed), so nothing observes it half-updated.
        let ran = std::panic::AssertUnwindSafe(actor.run(restart.take()))
            .catch_unwind()
            .await;
        if ran.is_ok() {
            return; // closed
        }
        tracing::error!(kernel_id = %shared.options.kernel_id, "session actor panicked; the session is unavailable until it is restarted");
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
    pub(super) fn new(
        shared: Arc<Shared>,
        commands: mpsc::UnboundedReceiver<Command>,
        launcher: Arc<dyn Launcher>,
    ) -> Actor {
        let unreported_reset = shared.options.notice.clone();
        Actor {
            shared,
            commands,
            launcher,
            provisioned: false,
            kernel: None,
            spares: std::collections::VecDeque::new(),
            epoch: 0,
            unreported_reset,
            spool_lagging: false,
            restored: None,
        }
    }

    /// After a panic: kills the kernels, marks the session unavailable, answers every caller
    /// (the dropped replies of the operation it was running, and every queued one) and waits
    /// for a restart, which it returns; `None` when the session closes first.
    pub(super) async fn fail(&mut self) -> Option<oneshot::Sender<RuntimeStatus>> {
        // A panic while a lock was held must not turn every later call into a panic too.
        self.shared.status.clear_poison();
        self.shared.active.seq.clear_poison();
        self.shared.admission.clear_poison();
        self.shared.active.end();
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
            status.latest_restore = None;
            status.error = Some(panicked(PanickedCall::NoCall));
        });
        self.shared.epoch.send_replace(epoch);
        // Wakes the callers whose replies the panic dropped (see `SessionHandle::lost`).
        self.shared.failures.send_modify(|count| *count += 1);
        self.shared.active.answered();
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
                        panicked(PanickedCall::NotRun),
                    );
                }
                Some(Command::Restart { reply, .. }) => return Some(reply),
                Some(Command::Panic) => {}
                None => return None,
            }
        }
    }

    /// A fresh actor on the same inbox, for `kernel_restart` after a panic: the launcher is
    /// kept, provisioned as it was (no new provisioning), and it starts its kernel in the next epoch.
    pub(super) fn respawn(self) -> Actor {
        let mut actor = Actor::new(Arc::clone(&self.shared), self.commands, self.launcher);
        actor.provisioned = self.provisioned;
        actor.epoch = self.epoch;
        actor
    }

    /// Starts the kernel and serves the inbox until shutdown. `restart` is set for a respawned
    /// actor: the restart it answers once its kernel is up, in a new epoch.
    pub(super) async fn run(&mut self, restart: Option<oneshot::Sender<RuntimeStatus>>) {
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
                status.latest_restore = None;
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
        if !self.provisioned {
            let provisioned = tokio::select! {
                provisioned = self.launcher.provision() => Some(provisioned),
                _ = shutdown.cancelled() => None,
            };
            match provisioned {
                Some(Ok(())) => self.provisioned = true,
                Some(Err(error)) => self.set_unavailable(error),
                None => {}
            }
        }
        if self.provisioned {
            let started = Instant::now();
            let launched = tokio::select! {
                launched = self.launcher.launch() => Some(launched),
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
            let _ = reply.send(self.shared.status_now());
        }
        if !shutdown.is_cancelled() {
            self.serve().await;
        }
        self.close().await;
    }

    pub(super) async fn serve(&mut self) {
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
                    self.replace_dead_kernel().await;
                    continue;
                }
                // An idle kernel that stops answering heartbeats (stopped, deadlocked in C) is
                // replaced too; a busy one is governed by its operation's deadline instead.
                _ = heartbeat.tick(), if self.kernel.is_some() => {
                    self.check_heartbeat(&mut missed_heartbeats).await;
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
                Some(Command::Restart { reply, restore }) => {
                    if shutdown.is_cancelled() {
                        return;
                    }
                    self.restart(reply, restore).await;
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
                let outcome = match &self.restored {
                    Some(_) => NamespaceOutcome::Restored,
                    None => NamespaceOutcome::Reset,
                };
                output.runtime.namespace.get_or_insert(outcome);
                output.notice = Some(notice);
            }
            if output.runtime.namespace == Some(NamespaceOutcome::Restored) {
                output.runtime.restore = self.restored.take();
            }
            // Recorded before the caller hears, so a caller that stopped waiting loses nothing.
            if let Some(record) = &record {
                record.finish(&output);
                self.settle_spool(record, &mut output).await;
            }
            let _ = reply.send((output, helper_reply));
            self.shared.active.answered();
        }
    }

    /// The kernel died while idle: it is replaced now, and the next call is told.
    async fn replace_dead_kernel(&mut self) {
        let exit = self
            .kernel
            .as_ref()
            .and_then(|running| running.kernel.exit_watch().borrow().clone());
        let detail = exit.map_or("it exited".to_owned(), |exit| exit.to_string());
        tracing::warn!(%detail, "kernel died while idle; replacing it");
        let checked = self.replace_and_restore().await;
        self.update(|status| status.latest_interruption_kind = None);
        self.unreported_reset = Some(format!(
            "the kernel died between calls ({detail}) and was replaced before this one: {}",
            replaced_between_calls(checked)
        ));
    }

    /// One heartbeat of the idle kernel; `HEARTBEAT_MISSES` missed in a row replace it.
    async fn check_heartbeat(&mut self, missed_heartbeats: &mut u32) {
        let alive = match &self.kernel {
            Some(running) => running.kernel.heartbeat(HEARTBEAT_TIMEOUT).await,
            None => true,
        };
        *missed_heartbeats = if alive { 0 } else { *missed_heartbeats + 1 };
        if *missed_heartbeats < HEARTBEAT_MISSES {
            return;
        }
        *missed_heartbeats = 0;
        tracing::warn!(
            misses = HEARTBEAT_MISSES,
            "idle kernel stopped answering heartbeats; replacing it"
        );
        let checked = self.replace_and_restore().await;
        self.update(|status| status.latest_interruption_kind = Some(Interruption::Terminated));
        self.unreported_reset = Some(format!(
            "the kernel stopped answering heartbeats between calls and was replaced before this one: {}",
            replaced_between_calls(checked)
        ));
    }

    /// `kernel_restart`, in queue order: a fresh kernel, and the status after it.
    async fn restart(&mut self, reply: oneshot::Sender<RuntimeStatus>, restore: bool) {
        if restore {
            self.replace_and_restore().await;
            // The caller reads what came back in the status this answers with.
            self.restored = None;
        } else {
            self.replace().await;
            self.restored = None;
            self.discard_checkpoint().await;
            self.set_namespace(NamespaceOutcome::Reset);
        }
        self.update(|status| status.latest_interruption_kind = None);
        // The caller asked for it: no need to tell the next call.
        self.unreported_reset = None;
        let _ = reply.send(self.shared.status_now());
    }

    /// Before the answer, on the spool queue: the upkeep (retention, large parts to disk) and
    /// the server's own spool writes of this execution (a page read after the answer sees
    /// everything), then the spool summary. A disk slower than the bound delays only this
    /// answer, by at most the bound; pages then say `complete: false` until the writes land.
    async fn settle_spool(&mut self, record: &Arc<Record>, output: &mut ExecutionOutput) {
        let shutdown = &self.shared.shutdown;
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

    /// Makes `running` the session's kernel.
    pub(super) fn adopt(&mut self, running: Running) {
        let description = running.description.clone();
        *self.shared.memory.lock().expect("memory lock") = running.kernel.memory();
        self.kernel = Some(running);
        self.update(|status| status.kernel = Some(description));
    }

    /// Starts background preparation of spares until `spare_kernels` are ready or in flight.
    pub(super) fn refill_spares(&mut self) {
        if !self.provisioned {
            return;
        }
        while self.spares.len() < self.shared.options.spare_kernels
            && !self.shared.shutdown.is_cancelled()
        {
            let shared = Arc::clone(&self.shared);
            let launching = self.launcher.launch();
            // Awaited when promoted, aborted and awaited by `drop_spares` otherwise.
            self.spares.push_back(self.shared.tasks.spawn(async move {
                let spare = launching.await;
                if let Some(pid) = spare
                    .as_ref()
                    .ok()
                    .and_then(|running| running.description.pid)
                {
                    shared
                        .status
                        .lock()
                        .expect("status lock")
                        .spare_kernel_pids
                        .push(pid);
                }
                spare
            }));
        }
    }

    /// A ready (or soon ready) spare, if any survives.
    pub(super) async fn take_spare(&mut self) -> Option<Running> {
        while let Some(spare) = self.spares.pop_front() {
            if let Ok(Ok(running)) = spare.await {
                if let Some(pid) = running.description.pid {
                    self.update(|status| {
                        status
                            .spare_kernel_pids
                            .retain(|spare_pid| *spare_pid != pid)
                    });
                }
                if running.kernel.exit_watch().borrow().is_none() {
                    return Some(running);
                }
            }
        }
        None
    }

    /// The one place an unavailable session's error is stored: configured variable values and
    /// URL credentials are masked, and each text is bounded by `max_text_chars`.
    pub(super) fn set_unavailable(&self, failure: StartFailure) {
        let failure = shown(&self.shared.options, failure);
        self.update(|status| {
            status.state = SessionState::Unavailable;
            status.kernel = None;
            status.error = Some(SessionError::StartFailed(failure));
        });
    }

    pub(super) fn update(&self, change: impl FnOnce(&mut RuntimeStatus)) {
        change(&mut self.shared.status.lock().expect("status lock"));
    }
}

impl Actor {
    /// Kills the current kernel and promotes a spare (or starts a fresh kernel); the epoch
    /// advances either way.
    pub(super) async fn replace(&mut self) -> bool {
        let replaced = self.replace_kernel().await;
        if replaced {
            self.update(|status| status.state = SessionState::Ready);
        }
        replaced
    }

    /// [`Actor::replace`], leaving the session `recovering` for what follows (a restore).
    async fn replace_kernel(&mut self) -> bool {
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
        if !self.provisioned {
            // Provisioning failed (no Python environment): nothing can start, so the session
            // stays unavailable with the provisioning error instead of `recovering` forever.
            self.update(|status| status.state = SessionState::Unavailable);
            return false;
        }
        if self.shared.shutdown.is_cancelled() {
            return false;
        }
        let started = Instant::now();
        let shutdown = self.shared.shutdown.clone();
        let launched = tokio::select! {
            launched = async {
                match self.take_spare().await {
                    Some(running) => Ok(running),
                    None => self.launcher.launch().await,
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
                    status.replacement_startup_seconds = Some(elapsed);
                    status.error = None;
                });
                self.refill_spares();
                true
            }
            Err(failure) => {
                let message = shown(&self.shared.options, failure.clone()).to_string();
                tracing::error!(%message, "kernel replacement failed");
                self.set_unavailable(failure);
                false
            }
        }
    }

    /// Replaces the kernel as [`Actor::replace`] does, then, with checkpoints on, loads the
    /// session's checkpoint into the new one before anything else runs there. What it comes
    /// to, for the decision; the status says it too, and `restored` keeps what came back for
    /// the result that reports the replacement.
    pub(super) async fn replace_and_restore(&mut self) -> Checked {
        self.restored = None;
        if !self.replace_kernel().await {
            self.set_namespace(NamespaceOutcome::Reset);
            return Checked::Replaced(false);
        }
        // `recovering` until the checkpoint is loaded: a call admitted meanwhile waits for it.
        let restored = self.restore().await;
        self.update(|status| status.state = SessionState::Ready);
        let checked = match restored {
            Ok(Some(restore)) => {
                tracing::info!(
                    restored = restore.restored.len(),
                    lost = restore.lost.len(),
                    restore_ms = restore.restore_ms,
                    "namespace restored from the checkpoint"
                );
                self.restored = Some(restore);
                Checked::Restored
            }
            Ok(None) => Checked::Replaced(true),
            Err(error) => {
                tracing::warn!(%error, "restoring the checkpoint failed");
                Checked::RestoreFailed
            }
        };
        self.set_namespace(match checked {
            Checked::Restored => NamespaceOutcome::Restored,
            Checked::RestoreFailed => NamespaceOutcome::Unknown,
            _ => NamespaceOutcome::Reset,
        });
        checked
    }

    /// The session's checkpoint loaded into the current kernel; `None`: checkpoints are off,
    /// the kernel has no helper, or no checkpoint was taken yet.
    async fn restore(&self) -> Result<Option<Restore>, helper::InstallError> {
        let options = &self.shared.options;
        let Some(running) = &self.kernel else {
            return Ok(None);
        };
        let (Some(comm_id), true) = (running.helper_comm.as_deref(), running.checkpoints) else {
            return Ok(None);
        };
        // Loading is reading the disk and unpickling: bounded like a start, with room for a
        // large checkpoint.
        let bound = options.timeouts.kernel_startup.max(RESTORE_BOUND);
        helper::restore(&*running.kernel, comm_id, bound).await
    }

    /// Deletes the session's checkpoint through the current kernel's helper, within a short
    /// bound; a failure is logged (the next checkpoint replaces it anyway).
    async fn discard_checkpoint(&self) {
        let Some(running) = &self.kernel else {
            return;
        };
        let (Some(comm_id), true) = (running.helper_comm.as_deref(), running.checkpoints) else {
            return;
        };
        if let Err(error) =
            helper::discard_checkpoint(&*running.kernel, comm_id, DISCARD_BOUND).await
        {
            tracing::warn!(%error, "deleting the namespace checkpoint failed");
        }
    }

    fn set_namespace(&self, outcome: NamespaceOutcome) {
        let restore = self.restored.clone();
        self.update(|status| {
            status.latest_namespace_outcome = Some(outcome);
            status.latest_restore = restore;
        });
    }

    /// Answers a queued request that will never run (unless its caller already gave up), and
    /// records it for `get_output`.
    pub(super) fn refuse(
        &self,
        ticket: &Ticket,
        args: &ExecuteArgs,
        record: Option<&Record>,
        reply: oneshot::Sender<Ended>,
        error: SessionError,
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
            restore: None,
        };
        let output = ExecutionOutput::not_run(
            ticket.execution_id.clone(),
            runtime,
            self.shared.worded(&error),
        );
        if let Some(record) = record {
            record.finish(&output);
        }
        let _ = reply.send((output, None));
    }

    /// Spares never ran user code: a kill is enough. One still starting is aborted, which
    /// drops its launch and kills its process; where that could leave a kernel behind (a
    /// start request in flight to a Jupyter server), it is waited for, within
    /// [`SPARE_SETTLE_WAIT`], and then deleted.
    pub(super) async fn drop_spares(&mut self) {
        let cancellable = self.launcher.cancellable();
        while let Some(mut spare) = self.spares.pop_front() {
            let settled = if cancellable {
                spare.abort();
                spare.await
            } else {
                match tokio::time::timeout(SPARE_SETTLE_WAIT, &mut spare).await {
                    Ok(settled) => settled,
                    Err(_) => {
                        tracing::warn!(
                            "a spare kernel still starting on the Jupyter server was abandoned"
                        );
                        spare.abort();
                        spare.await
                    }
                }
            };
            if let Ok(Ok(running)) = settled {
                running.kernel.kill().await;
            }
        }
        self.update(|status| status.spare_kernel_pids.clear());
    }

    pub(super) async fn close(&mut self) {
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
            self.refuse(
                &ticket,
                &args,
                record.as_deref(),
                reply,
                SessionError::Closed,
            );
        }
        // A remote kernel's checkpoint is on its server's machine: deleted with the session
        // there too (a local one goes with the session's directory).
        if self
            .kernel
            .as_ref()
            .is_some_and(|running| running.description.remote.is_some())
        {
            self.discard_checkpoint().await;
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
        // Nothing queues spool work once the actor is gone: its worker can end now.
        self.shared.executions.close(SPOOL_FLUSH_WAIT).await;
        self.shared.finished.send_replace(true);
        tracing::debug!(kernel_id = %self.shared.options.kernel_id, "session closed");
    }
}

/// Resolves when the watched kernel has exited; never, when there is no kernel.
pub(super) async fn kernel_exit(
    exit: Option<watch::Receiver<Option<ipython_mcp_jupyter::KernelExit>>>,
) {
    match exit {
        Some(mut exit) => {
            let _ = exit.wait_for(Option::is_some).await;
        }
        None => std::future::pending().await,
    }
}

/// Idle kernels are pinged this often; `HEARTBEAT_MISSES` missed pings in a row replace them.
pub(super) const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
pub(super) const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(2);
pub(super) const HEARTBEAT_MISSES: u32 = 3;

/// How long an answer waits for the spool work of its execution (upkeep, the server's own
/// writes for kernels without the helper, the summary); a slower disk delays only this
/// session's answer, by at most this, and its pages say `complete: false` until the writes land.
pub(super) const SPOOL_FLUSH_WAIT: Duration = Duration::from_secs(5);

/// The wait instead, while the disk is known to be behind (so a hung disk costs one answer
/// the full wait, not every answer).
pub(super) const SPOOL_LAGGING_WAIT: Duration = Duration::from_millis(200);
