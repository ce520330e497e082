//! The session's spool writer: every file operation on a session's spool (stream appends,
//! the output log, `view.json`, size listings, deletions, removing the directory) goes through
//! one first-in-first-out queue per session and runs on tokio's blocking pool, one batch at a
//! time. So a slow disk (an NFS home, a full or throttled volume) holds up only that session's
//! spool, never the async threads that serve every session and the MCP answers, and appends to
//! a file keep their order.
//!
//! Memory stays bounded whatever the kernel prints: bytes wait in one buffer per session, at
//! most `MAX_BACKLOG_BYTES` not yet written; an append that does not fit is refused and its
//! bytes are counted as not kept (the caller's `dropped_bytes`), exactly like bytes past the
//! per-execution bound. The session never waits for the disk while code runs.
//!
//! Appending costs the async side a copy into a reused buffer and, when the queue was empty, a
//! wake-up: no allocation per chunk once the buffers have grown, no system call of its own.

use std::fs::File;
use std::io::Write as _;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, Notify};

/// Bytes of stream output and log lines a session holds while they wait for the disk.
pub(crate) const MAX_BACKLOG_BYTES: usize = 8 * 1024 * 1024;

/// The capacity of a batch buffer kept for the next batch.
const KEPT_BUFFER_BYTES: usize = 1024 * 1024;

/// A session's spool queue (cheap to clone); its worker ends once `SpoolQueue::close` was
/// called and everything queued before has run. Opaque outside this crate: a session's tests
/// hold it only to stall it (`tests::stall`, with the `test-support` feature).
#[derive(Clone)]
pub struct SpoolQueue {
    shared: Arc<QueueShared>,
    /// The worker, until `SpoolQueue::join` waits for it. Not aborted when the last clone goes:
    /// the directory's removal, queued by the last owner, still has to run.
    worker: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

/// A file the queue appends to, created on the first append (0600, never overwriting what
/// is there) and reopened for appending after a release.
pub(crate) struct SpoolFile {
    path: PathBuf,
    /// Bytes accepted for it that the disk refused (a write or open failed).
    lost: AtomicU64,
    /// Set once the worker created it (only the worker touches it).
    created: std::sync::atomic::AtomicBool,
}

impl SpoolFile {
    pub(crate) fn new(path: PathBuf) -> Arc<SpoolFile> {
        Arc::new(SpoolFile {
            path,
            lost: AtomicU64::new(0),
            created: std::sync::atomic::AtomicBool::new(false),
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
        let worker = tokio::spawn(work(Arc::clone(&shared)));
        SpoolQueue {
            shared,
            worker: Arc::new(Mutex::new(Some(worker))),
        }
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

    /// Whether `close` was called (nothing queued from then on runs).
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Closes the queue and waits up to `bound` for its worker to run what was queued and end.
    /// Past the bound (a hung disk) the worker is aborted, and false returned: the batch on the
    /// disk now finishes on its blocking thread, the rest is dropped.
    pub(crate) async fn join(&self, bound: std::time::Duration) -> bool {
        self.close();
        let worker = self
            .worker
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let deadline = tokio::time::Instant::now() + bound;
        ipython_mcp_jupyter::task::join("spool queue", worker.into_iter().collect(), deadline).await
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
        let runner = Arc::clone(&shared);
        let ran = tokio::task::spawn_blocking(move || {
            files.run(&mut batch, &runner);
            (batch, files)
        })
        .await;
        match ran {
            Ok((mut batch, returned)) => {
                files = returned;
                batch.jobs.clear();
                batch.bytes.clear();
                // A burst's buffer is not kept for an idle session (it is reallocated once a
                // batch, never once a chunk).
                if batch.bytes.capacity() > KEPT_BUFFER_BYTES {
                    batch.bytes = Vec::new();
                }
                spare = batch;
            }
            // Only a runtime shutting down cancels a blocking task: nothing more will run.
            Err(error) if error.is_cancelled() => {
                tracing::debug!("spool queue stopped by the runtime's shutdown");
                return;
            }
            Err(error) => {
                // A job panicked: the rest of its batch is gone (its bytes too: the backlog
                // is recounted from what is queued now); later jobs still run.
                tracing::warn!(%error, "a spool job failed");
                files = OpenFiles::default();
                let mut pending = shared
                    .pending
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                pending.backlog = pending.bytes.len();
            }
        }
    }
}

/// The worker's open file handles (a handful: the files of the running execution).
#[derive(Default)]
struct OpenFiles {
    open: Vec<(Arc<SpoolFile>, Option<File>)>,
}

impl OpenFiles {
    /// Runs a batch in order. Written bytes leave the backlog before any later job runs, so a
    /// job sees the room its predecessors' writes made.
    fn run(&mut self, batch: &mut Batch, shared: &QueueShared) {
        let mut written = 0;
        let release = |written: &mut usize| {
            if *written > 0 {
                shared
                    .pending
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .backlog -= std::mem::take(written);
            }
        };
        for job in batch.jobs.drain(..) {
            match job {
                Job::Append { file, range } => {
                    written += range.len();
                    self.append(&file, &batch.bytes[range]);
                }
                Job::Release(file) => self.open.retain(|(open, _)| !Arc::ptr_eq(open, &file)),
                Job::Run(job) => {
                    release(&mut written);
                    job();
                }
            }
        }
        release(&mut written);
    }

    fn append(&mut self, file: &Arc<SpoolFile>, data: &[u8]) {
        let position = match self
            .open
            .iter()
            .position(|(open, _)| Arc::ptr_eq(open, file))
        {
            Some(position) => position,
            None => {
                self.open.push((Arc::clone(file), open(file)));
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

fn open(file: &SpoolFile) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let opened = if file.created.load(Ordering::Relaxed) {
        // Reopened: the kernel may have replaced it since (a link to a file of the user's, a
        // FIFO); appended to only if it is still a regular file, no link followed.
        let (dir, name) = ipython_mcp_untrusted::split(&file.path);
        ipython_mcp_untrusted::append(dir, name).ok()
    } else {
        // `create_new` (O_EXCL) never follows a link either.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&file.path)
            .ok()
    };
    if opened.is_some() {
        file.created.store(true, Ordering::Relaxed);
    }
    opened
}

/// The unit tests, and (with the `test-support` feature) [`tests::stall`] for the sessions'
/// tests, which need a hung disk too.
#[cfg(any(test, feature = "test-support"))]
pub mod tests {
    use super::*;

    /// Blocks the queue's worker, as a write to a hung disk would, until the returned sender
    /// sends (or is dropped); returns once the worker is blocked.
    pub async fn stall(queue: &SpoolQueue) -> std::sync::mpsc::Sender<()> {
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let (entered, blocked) = oneshot::channel();
        queue.run(move || {
            let _ = entered.send(());
            let _ = gate.recv();
        });
        blocked.await.expect("the worker runs the stall");
        release
    }

    #[cfg(test)]
    fn size(path: PathBuf) -> impl FnOnce() -> u64 + Send + 'static {
        move || std::fs::metadata(path).map_or(0, |meta| meta.len())
    }

    #[tokio::test]
    async fn appends_reach_the_disk_in_order_before_a_later_job_runs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let queue = SpoolQueue::start();
        let first = SpoolFile::new(dir.path().join("first"));
        let second = SpoolFile::new(dir.path().join("second"));
        let mut expected = Vec::new();
        for n in 0..2000 {
            let chunk = format!("line {n}\n");
            assert!(queue.append(&first, chunk.as_bytes()));
            expected.extend_from_slice(chunk.as_bytes());
            if n % 7 == 0 {
                assert!(queue.append(&second, b"x"));
            }
            if n == 1000 {
                queue.release(&first); // reopened (never truncated) by the next append
                tokio::task::yield_now().await;
            }
        }
        let path = dir.path().join("first");
        let written = queue
            .ask(move || std::fs::read(path).expect("read"))
            .await
            .expect("the job ran");
        assert_eq!(written, expected);
        let second_size = queue.ask(size(dir.path().join("second"))).await;
        assert_eq!(second_size, Some(2000_u64.div_ceil(7)));
        assert_eq!((first.lost(), second.lost()), (0, 0));
    }

    #[tokio::test]
    async fn a_stalled_disk_bounds_the_backlog_and_refuses_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let queue = SpoolQueue::start();
        let file = SpoolFile::new(dir.path().join("stream"));
        let release = stall(&queue).await;
        let chunk = vec![b'x'; 64 * 1024];
        let mut accepted = 0;
        // Twice the backlog is offered while nothing reaches the disk.
        for _ in 0..2 * MAX_BACKLOG_BYTES / chunk.len() {
            if queue.append(&file, &chunk) {
                accepted += chunk.len();
            }
        }
        assert_eq!(accepted, MAX_BACKLOG_BYTES, "the backlog is the bound");
        release.send(()).expect("the stall waits");
        let written = queue.ask(size(dir.path().join("stream"))).await;
        assert_eq!(written, Some(MAX_BACKLOG_BYTES as u64));
        assert!(
            queue.append(&file, &chunk),
            "room again once the disk caught up"
        );
    }

    #[tokio::test]
    async fn bytes_the_disk_refuses_are_counted_as_lost() {
        let dir = tempfile::tempdir().expect("tempdir");
        let queue = SpoolQueue::start();
        let nowhere = SpoolFile::new(dir.path().join("missing-dir/stream"));
        assert!(queue.append(&nowhere, b"abc"));
        assert!(queue.append(&nowhere, b"de"));
        queue.ask(|| ()).await.expect("ran");
        assert_eq!(nowhere.lost(), 5);
    }

    #[tokio::test]
    async fn a_closed_queue_runs_what_was_queued_and_nothing_after() {
        let dir = tempfile::tempdir().expect("tempdir");
        let queue = SpoolQueue::start();
        let file = SpoolFile::new(dir.path().join("stream"));
        let release = stall(&queue).await;
        assert!(queue.append(&file, b"kept"));
        let answer = queue.ask(|| 42);
        queue.close();
        assert!(!queue.append(&file, b"refused"));
        let never = queue.ask(|| 0);
        release.send(()).expect("the stall waits");
        assert_eq!(answer.await, Some(42));
        assert_eq!(never.await, None, "a job after close never runs");
        let written = std::fs::read(dir.path().join("stream")).expect("read");
        assert_eq!(written, b"kept");
    }

    #[tokio::test]
    async fn join_writes_what_was_queued_then_the_worker_is_gone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let queue = SpoolQueue::start();
        let file = SpoolFile::new(dir.path().join("stream"));
        assert!(queue.append(&file, b"kept"));
        assert!(
            queue.join(std::time::Duration::from_secs(60)).await,
            "ended by itself"
        );
        assert_eq!(
            std::fs::read(dir.path().join("stream")).expect("read"),
            b"kept"
        );
        assert!(!queue.append(&file, b"refused"));
        let metrics = tokio::runtime::Handle::current().metrics();
        assert_eq!(metrics.num_alive_tasks(), 0, "the worker was joined");
    }

    #[tokio::test]
    async fn a_stalled_worker_is_aborted_at_the_join_bound() {
        let queue = SpoolQueue::start();
        let release = stall(&queue).await;
        // The disk never answers within the bound: the join gives up on the worker.
        assert!(!queue.join(std::time::Duration::from_millis(50)).await);
        let metrics = tokio::runtime::Handle::current().metrics();
        assert_eq!(metrics.num_alive_tasks(), 0, "the worker was aborted");
        drop(release);
    }
}
