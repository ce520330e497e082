//! The session's spool writer: every file operation on a session's spool (stream appends,
//! the output log, `view.json`, size listings, deletions, removing the directory) goes through
//! one first-in-first-out queue per session and runs on tokio's blocking pool, one batch at a
//! time. So a slow disk (an NFS home, a full or throttled volume) holds up only that session's
//! spool, never the async threads that serve every session and the MCP answers, and appends to
//! a file keep their order.
//!
//! Memory stays bounded whatever the kernel prints: bytes wait in one buffer per session, at
//! most [`MAX_BACKLOG_BYTES`] not yet written; an append that does not fit is refused and its
//! bytes are counted as not kept (the caller's `dropped_bytes`), exactly like bytes past the
//! per-execution bound. The session never waits for the disk while code runs.
//!
//! Appending costs the async side a copy into a reused buffer and, when the queue was empty, a
//! wake-up: no allocation per chunk once the buffers have grown, no system call of its own.

use std::fs::File;
use std::io::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, Notify};

/// Bytes of stream output and log lines a session holds while they wait for the disk.
pub(crate) const MAX_BACKLOG_BYTES: usize = 8 * 1024 * 1024;

/// A session's spool queue (cheap to clone); its worker ends once [`SpoolQueue::close`] was
/// called and everything queued before has run.
#[derive(Clone)]
pub(crate) struct SpoolQueue {
    shared: Arc<QueueShared>,
}

/// A file the queue appends to, created on the first append (0600, never overwriting).
pub(crate) struct SpoolFile {
    path: PathBuf,
    /// Bytes accepted for it that the disk refused (a write or open failed).
    lost: AtomicU64,
}

impl SpoolFile {
    pub(crate) fn new(path: PathBuf) -> Arc<SpoolFile> {
        Arc::new(SpoolFile {
            path,
            lost: AtomicU64::new(0),
        })
    }

    /// Bytes that were accepted but could not be written.
    pub(crate) fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

struct QueueShared {
    pending: Mutex<Batch>,
    wake: Notify,
}

#[derive(Default)]
struct Batch {
    jobs: Vec<Job>,
    /// The bytes of this batch's appends.
    bytes: Vec<u8>,
    /// Bytes queued or being written (this batch's and the one on the disk now).
    backlog: usize,
    closed: bool,
}

enum Job {
    Append {
        file: Arc<SpoolFile>,
        range: Range<usize>,
    },
    /// Closes the handle of a file nobody appends to any more.
    Release(Arc<SpoolFile>),
    Run(Box<dyn FnOnce() + Send>),
}

impl SpoolQueue {
    /// A queue and its worker task (needs a tokio runtime).
    pub(crate) fn start() -> SpoolQueue {
        let shared = Arc::new(QueueShared {
            pending: Mutex::new(Batch::default()),
            wake: Notify::new(),
        });
        tokio::spawn(work(Arc::clone(&shared)));
        SpoolQueue { shared }
    }

    /// Queues `data` for the end of `file`; false (nothing queued) when the backlog is full.
    pub(crate) fn append(&self, file: &Arc<SpoolFile>, data: &[u8]) -> bool {
        let mut pending = self.lock();
        if pending.closed || pending.backlog + data.len() > MAX_BACKLOG_BYTES {
            return false;
        }
        let start = pending.bytes.len();
        pending.bytes.extend_from_slice(data);
        pending.backlog += data.len();
        let range = start..pending.bytes.len();
        self.push(
            pending,
            Job::Append {
                file: Arc::clone(file),
                range,
            },
        );
        true
    }

    /// Closes `file`'s handle once its queued appends are written.
    pub(crate) fn release(&self, file: &Arc<SpoolFile>) {
        let pending = self.lock();
        self.push(pending, Job::Release(Arc::clone(file)));
    }

    /// Runs `job` on the blocking pool after everything queued before it.
    pub(crate) fn run(&self, job: impl FnOnce() + Send + 'static) {
        let pending = self.lock();
        self.push(pending, Job::Run(Box::new(job)));
    }

    /// Runs `job` after everything queued before it; resolves to its value (or `None` if the
    /// queue closed or the job panicked).
    pub(crate) fn ask<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> impl std::future::Future<Output = Option<T>> {
        let (sender, receiver) = oneshot::channel();
        self.run(move || {
            let _ = sender.send(job());
        });
        async move { receiver.await.ok() }
    }

    /// Lets the worker end once everything queued so far has run; later jobs are dropped
    /// without running.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.shared.wake.notify_one();
    }

    fn push(&self, mut pending: std::sync::MutexGuard<'_, Batch>, job: Job) {
        if pending.closed {
            return;
        }
        let was_empty = pending.jobs.is_empty();
        pending.jobs.push(job);
        drop(pending);
        // The worker drains everything queued when it wakes, so one wake-up per batch is
        // enough (a permit is stored if it is busy).
        if was_empty {
            self.shared.wake.notify_one();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Batch> {
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The worker: takes whatever is queued and runs it on the blocking pool, batch after batch.
/// The two batches' buffers are swapped back and forth, so they are allocated once.
async fn work(shared: Arc<QueueShared>) {
    let mut spare = Batch::default();
    let mut files = OpenFiles::default();
    loop {
        let taken = {
            let mut pending = shared
                .pending
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if pending.jobs.is_empty() {
                if pending.closed {
                    return;
                }
                None
            } else {
                std::mem::swap(&mut pending.jobs, &mut spare.jobs);
                std::mem::swap(&mut pending.bytes, &mut spare.bytes);
                Some(std::mem::take(&mut spare))
            }
        };
        let Some(mut batch) = taken else {
            shared.wake.notified().await;
            continue;
        };
        let bytes = batch.bytes.len();
        let ran = tokio::task::spawn_blocking(move || {
            files.run(&mut batch);
            (batch, files)
        })
        .await;
        match ran {
            Ok((mut batch, returned)) => {
                files = returned;
                batch.jobs.clear();
                batch.bytes.clear();
                spare = batch;
            }
            Err(error) => {
                // A job panicked: its batch is gone; later jobs still run.
                tracing::warn!(%error, "a spool job failed");
                files = OpenFiles::default();
            }
        }
        shared
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .backlog -= bytes;
    }
}

/// The worker's open file handles (a handful: the files of the running execution).
#[derive(Default)]
struct OpenFiles {
    open: Vec<(Arc<SpoolFile>, Option<File>)>,
}

impl OpenFiles {
    fn run(&mut self, batch: &mut Batch) {
        for job in batch.jobs.drain(..) {
            match job {
                Job::Append { file, range } => self.append(&file, &batch.bytes[range]),
                Job::Release(file) => self.open.retain(|(open, _)| !Arc::ptr_eq(open, &file)),
                Job::Run(job) => job(),
            }
        }
    }

    fn append(&mut self, file: &Arc<SpoolFile>, data: &[u8]) {
        let position = match self
            .open
            .iter()
            .position(|(open, _)| Arc::ptr_eq(open, file))
        {
            Some(position) => position,
            None => {
                self.open.push((Arc::clone(file), create(&file.path)));
                self.open.len() - 1
            }
        };
        let written = match &mut self.open[position].1 {
            Some(handle) => handle.write_all(data).is_ok(),
            None => false,
        };
        if !written {
            file.lost.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
    }
}

fn create(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .ok()
}
