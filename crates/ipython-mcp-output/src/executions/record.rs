//! One execution's record: its live collector while it runs, its final output after, and
//! where its large parts went.

use super::*;

/// One execution: admitted, running, or finished.
pub struct Record {
    pub(crate) execution_id: ExecutionId,
    pub(crate) seq: u64,
    pub(crate) request_id: String,
    pub(crate) enqueued_at: Instant,
    pub(super) state: Mutex<RecordState>,
    pub(super) done: watch::Sender<bool>,
}

#[derive(Default)]
pub(super) struct RecordState {
    /// The execute_request's msg_id (names its spool files).
    pub(super) msg_id: Option<String>,
    pub(super) dispatched_at: Option<Instant>,
    pub(super) epoch: u64,
    pub(super) live: Option<Arc<Mutex<Collector>>>,
    /// Its full streams go to the spool, where the call this words pages them.
    pub(super) pager: Option<PagerCall>,
    pub(super) output: Option<ExecutionOutput>,
    pub(super) spool_dropped: u64,
    pub(super) evicted: bool,
    /// Set once the finished output was accounted (and its large parts spilled).
    pub(super) settled: bool,
    /// Where the displays and result of the finished output were moved, how many displays,
    /// and the bytes written (the most read back: the kernel can write the spool too).
    pub(super) spilled: Option<(PathBuf, usize, u64)>,
    /// Bytes of the finished output held in memory (counted in `SERVER_RETAINED`).
    pub(super) retained_bytes: u64,
    /// The server's spool writes for it are not all on disk yet.
    pub(super) spool_writing: bool,
}

/// The parts of a finished output that may move to the spool, as written.
#[derive(Serialize)]
pub(super) struct SpilledRef<'a> {
    pub(super) display_data: &'a [crate::output::DisplayItem],
    pub(super) result: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

/// The parts of a finished output that may move to the spool, as read back.
#[derive(serde::Deserialize)]
pub(super) struct Spilled {
    pub(super) display_data: Vec<crate::output::DisplayItem>,
    pub(super) result: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Record {
    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, RecordState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// True once its final output is stored.
    pub fn is_finished(&self) -> bool {
        *self.done.borrow()
    }

    /// The actor started running it: `msg_id` names its spool files, `collector` is live, and
    /// `pager` words the call that pages its streams when they go to the spool.
    pub fn dispatched(
        &self,
        msg_id: &str,
        epoch: u64,
        collector: Arc<Mutex<Collector>>,
        pager: Option<PagerCall>,
    ) {
        let mut state = self.state();
        state.pager = pager;
        state.msg_id = Some(msg_id.to_owned());
        state.dispatched_at = Some(Instant::now());
        state.epoch = epoch;
        state.live = Some(collector);
    }

    /// Counts `bytes` of its streams the spool did not keep.
    pub fn add_spool_dropped(&self, bytes: u64) {
        self.state().spool_dropped += bytes;
    }

    /// Adds the spool summary to the stored output.
    pub fn set_spool(&self, info: SpoolInfo) {
        if let Some(output) = self.state().output.as_mut() {
            output.spool = Some(info);
        }
    }

    /// False while the server still writes its streams to the spool (kernels without the
    /// helper): a page read then may grow.
    pub fn spool_written(&self) -> bool {
        !self.state().spool_writing
    }

    /// Stores the final output (the first one wins) and wakes every waiter.
    pub fn finish(&self, output: &ExecutionOutput) {
        {
            let mut state = self.state();
            if state.output.is_none() {
                state.output = Some(output.clone());
            }
            state.live = None;
        }
        self.done.send_replace(true);
    }

    /// Gives back its share of the retained bytes, for good (a record being forgotten).
    pub(super) fn release(&self) {
        let mut state = self.state();
        state.settled = true;
        let bytes = std::mem::take(&mut state.retained_bytes);
        SERVER_RETAINED.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Accounts the finished output once: moves its displays and result to `<msg_id>.view.json`
    /// in `dir` when they are large (and the spool is on), and records the bytes left in memory.
    /// Blocking (runs on the spool queue). The state is not locked during the write, and the
    /// output leaves memory only once its file is complete, so a reader always sees all of it.
    pub(super) fn settle(&self, dir: Option<&Path>) {
        let (msg_id, bytes) = {
            let state = self.state();
            let Some(output) = state.output.as_ref().filter(|_| !state.settled) else {
                return;
            };
            let payload = SpilledRef {
                display_data: &output.display_data,
                result: output.result.as_ref(),
            };
            (
                state.msg_id.clone(),
                serde_json::to_vec(&payload).unwrap_or_default(),
            )
        };
        let mut spilled = None;
        if let (Some(dir), Some(msg_id), true) = (dir, msg_id, bytes.len() > SPILL_BYTES) {
            use std::os::unix::fs::OpenOptionsExt as _;
            let path = dir.join(format!("{msg_id}.view.json"));
            let written = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .and_then(|mut file| file.write_all(&bytes));
            match written {
                Ok(()) => spilled = Some((path, bytes.len() as u64)),
                Err(error) => tracing::warn!(%error, "retained output stays in memory"),
            }
        }
        let mut state = self.state();
        if state.settled {
            return; // forgotten meanwhile
        }
        state.settled = true;
        let state = &mut *state;
        let Some(output) = state.output.as_mut() else {
            return;
        };
        if let Some((path, bytes)) = spilled {
            state.spilled = Some((path, output.display_data.len(), bytes));
            output.display_data = Vec::new();
            output.result = None;
        }
        let retained = serde_json::to_vec(&*output).map_or(0, |json| json.len() as u64);
        state.retained_bytes = retained;
        SERVER_RETAINED.fetch_add(retained, Ordering::Relaxed);
    }

    /// Waits until it has finished, at most `wait`.
    pub async fn wait(&self, wait: Duration) {
        let mut done = self.done.subscribe();
        let _ = tokio::time::timeout(wait, done.wait_for(|done| *done)).await;
    }

    /// The final output (its spilled parts read back from the spool: blocking), or what has
    /// arrived so far (`status: pending`).
    pub fn view(&self) -> ExecutionOutput {
        let state = self.state();
        if let Some(output) = &state.output {
            let mut output = output.clone();
            if let Some((path, displays, bytes)) = state.spilled.clone() {
                drop(state);
                // Read as the untrusted file it is (the kernel writes in the spool and may
                // have replaced it), and no more than was written.
                let (dir, name) = ipython_mcp_untrusted::split(&path);
                let read = match ipython_mcp_untrusted::read(dir, name, bytes) {
                    Ok(read) => Some(read),
                    Err(error) if error.is_not_found() => None,
                    Err(error) => {
                        tracing::warn!(%error, "a spilled output was not read back");
                        None
                    }
                };
                let read = read.and_then(|bytes| serde_json::from_slice::<Spilled>(&bytes).ok());
                match read {
                    Some(spilled) => {
                        output.display_data = spilled.display_data;
                        output.result = spilled.result;
                    }
                    // Deleted to keep the spool within its bound, or replaced: say what is gone.
                    None => {
                        output.display_omitted += displays as u64;
                        output.truncated.display_data = true;
                        output.truncated.result = true;
                    }
                }
            }
            return output;
        }
        let queue_wait = state
            .dispatched_at
            .map_or_else(|| self.enqueued_at.elapsed(), |at| at - self.enqueued_at);
        let run = state
            .dispatched_at
            .map_or(Duration::ZERO, |at| at.elapsed());
        let runtime = RuntimeInfo {
            request_id: self.request_id.clone(),
            admission_seq: self.seq,
            epoch: state.epoch,
            queue_wait_ms: queue_wait.as_millis() as u64,
            run_ms: run.as_millis() as u64,
            interruption: None,
            namespace: None,
            restore: None,
        };
        let mut output = ExecutionOutput::pending(self.execution_id.clone(), runtime);
        if let Some(live) = &state.live {
            let collected = live
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .snapshot();
            let pager = state.pager.map(|call| Pager {
                call,
                execution_id: self.execution_id.as_str(),
            });
            output.stdout_omitted_chars = collected.stdout.omitted_chars;
            output.stderr_omitted_chars = collected.stderr.omitted_chars;
            (output.stdout, output.stdout_cut) = collected.stdout.printed("stdout", pager);
            (output.stderr, output.stderr_cut) = collected.stderr.printed("stderr", pager);
            output.display_data = collected.display_data;
            output.display_omitted = collected.display_omitted;
            output.withheld = collected.withheld;
            output.truncated = collected.truncated;
        }
        output
    }
}
