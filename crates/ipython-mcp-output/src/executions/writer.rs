//! The server-side spool writer, for kernels without the helper.

use super::*;

/// Writes stream output and the output log (see `transcript`) to the spool on the server
/// side, for kernels without the helper, through the session's spool queue: the actor only
/// copies bytes into the queue's buffer. A stream whose bytes the queue refuses (its backlog
/// is full: the disk is behind) keeps nothing more for this execution, so the file has no
/// holes; what is not kept counts in `dropped`.
pub struct SpoolWriter {
    pub(super) queue: SpoolQueue,
    log: LogWriter,
    files: [Arc<SpoolFile>; 2],
    /// Bytes queued per stream (the offsets the log's stream markers name).
    queued: [u64; 2],
    refused: [bool; 2],
    limit: u64,
    pub(crate) dropped: u64,
    /// The helper's comm, for a kernel whose helper bounds output but spools nothing (a remote
    /// one): its end-of-execution report means it kept some output back.
    helper_comm: Option<String>,
}

impl SpoolWriter {
    /// A writer for `record`'s execution `msg_id`; the record counts as being written until
    /// [`SpoolWriter::finish`] has run on the queue.
    pub fn new(executions: &Executions, record: &Record, msg_id: &str) -> Option<Self> {
        let (dir, limit) = executions.spool()?;
        record.state().spool_writing = true;
        Some(SpoolWriter {
            queue: executions.queue().clone(),
            log: LogWriter::new(dir, msg_id, limit),
            files: [StreamName::Stdout, StreamName::Stderr]
                .map(|stream| SpoolFile::new(stream_path(dir, msg_id, stream))),
            queued: [0; 2],
            refused: [false; 2],
            limit,
            dropped: 0,
            helper_comm: None,
        })
    }

    /// The comm of the kernel's helper, when it has one that does not spool.
    pub fn with_helper_comm(mut self, comm: Option<String>) -> Self {
        self.helper_comm = comm;
        self
    }

    /// Queues what `routed` adds to the streams and the output log.
    pub fn absorb(&mut self, routed: &Routed) {
        if let JupyterMessageContent::CommMsg(comm) = &routed.message.content {
            // The helper reports at the end of an execution only when it held output back.
            let report = comm.data.get("event").and_then(serde_json::Value::as_str)
                == Some("execution_report");
            if report && self.helper_comm.as_deref() == Some(comm.comm_id.0.as_str()) {
                self.log.withheld(&self.queue);
            }
            return;
        }
        self.log.absorb(routed, self.queued, &self.queue);
        let JupyterMessageContent::StreamContent(stream) = &routed.message.content else {
            return;
        };
        let index = match stream.name {
            Stdio::Stdout => 0,
            Stdio::Stderr => 1,
        };
        let data = stream.text.as_bytes();
        let room = if self.refused[index] {
            0
        } else {
            self.limit.saturating_sub(self.queued[index]) as usize
        };
        let kept = &data[..data.len().min(room)];
        self.dropped += (data.len() - kept.len()) as u64;
        if kept.is_empty() {
            return;
        }
        if self.queue.append(&self.files[index], kept) {
            self.queued[index] += kept.len() as u64;
        } else {
            self.refused[index] = true;
            self.dropped += kept.len() as u64;
        }
    }

    /// Counts in `record` what was not kept; once the queue has written everything, closes the
    /// files, adds what the disk refused and marks its spool complete.
    pub fn finish(self, record: Arc<Record>) {
        let files = [
            Arc::clone(&self.files[0]),
            Arc::clone(&self.files[1]),
            Arc::clone(self.log.file()),
        ];
        for file in &files {
            self.queue.release(file);
        }
        record.add_spool_dropped(self.dropped);
        self.queue.run(move || {
            let lost: u64 = files.iter().map(|file| file.lost()).sum();
            let mut state = record.state();
            state.spool_dropped += lost;
            state.spool_writing = false;
        });
    }
}
