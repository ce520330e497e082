//! The executions a session remembers, so `get_output` can answer for work whose caller stopped
//! waiting (or never waited: `background`), and the on-disk spool of their full output.
//!
//! Each `execute` gets a [`Record`] at admission. While it runs, the record shares the live
//! [`Collector`], so a reader sees what has arrived so far; when it ends, the actor stores the
//! final output there before answering the caller, so nothing is lost if the caller is gone.
//!
//! The spool: the full stdout and stderr of each execution, at most `max_execution_bytes` per
//! stream, in a private (0700) temp directory per session that is removed when the session
//! closes. The Python helper writes it inside the kernel (the server only ever receives the
//! bounded part); for kernels without the helper the collector's [`SpoolWriter`] writes what
//! arrives. Older executions are forgotten first: at most [`MAX_RECORDS`] records, and spool
//! files are deleted oldest first while the total exceeds `max_total_bytes`.
//!
//! Retained output is bounded in bytes, not only in count: a finished execution's displays and
//! result (images, large payloads) larger than [`SPILL_BYTES`] move to `<msg_id>.view.json` in
//! the spool and are read back when asked for, so memory holds little more than the bounded
//! text; what is still held counts against a per-session and a server-wide budget, and the
//! oldest finished executions are forgotten while either is exceeded (the newest of a session
//! is always kept).

use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ipython_mcp_jupyter::protocol::{JupyterMessageContent, Stdio};
use ipython_mcp_jupyter::Routed;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::collect::Collector;
use crate::output::{ExecutionId, ExecutionOutput, RuntimeInfo, SpoolInfo};
use crate::spool::{SpoolFile, SpoolQueue};
use crate::terminal::{Pager, PagerCall};
use crate::transcript::LogWriter;

mod page;
mod record;
mod writer;

pub use self::page::*;
pub use self::record::*;
pub use self::writer::*;

/// Executions remembered per session (their final output and spool files).
pub const MAX_RECORDS: usize = 32;

/// Displays and result of a finished execution larger than this (serialized) are kept in the
/// spool rather than in memory.
pub const SPILL_BYTES: usize = 16 * 1024;

/// Bytes of finished executions' output held in memory by every session of this process.
static SERVER_RETAINED: AtomicU64 = AtomicU64::new(0);

/// Bounds of the output spool and of retained output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolLimits {
    /// Bytes kept per stream per execution (0 disables the spool).
    pub max_execution_bytes: u64,
    /// Bytes kept across all executions of a session; the oldest are deleted first.
    pub max_total_bytes: u64,
    /// Bytes of finished executions' output a session holds in memory.
    pub max_retained_bytes: u64,
    /// Bytes of finished executions' output all sessions together hold in memory.
    pub max_server_retained_bytes: u64,
}

impl Default for SpoolLimits {
    fn default() -> Self {
        SpoolLimits {
            max_execution_bytes: 256 * 1024 * 1024,
            max_total_bytes: 1024 * 1024 * 1024,
            max_retained_bytes: 64 * 1024 * 1024,
            max_server_retained_bytes: 256 * 1024 * 1024,
        }
    }
}

/// Why an execution's full stream cannot be paged: only its bounded output is left.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// Its spool file is not one the server reads: a link, a FIFO, a device in its place
    /// (the kernel writes the spool and may have put it there), or it could not be read.
    #[error(
        "this execution's full output cannot be read: {reason}; only the bounded output is left"
    )]
    Unreadable { reason: String },
    #[error(
        "the output spool is disabled on this server ({}=0), so only the bounded output is available",
        ipython_mcp_config::MAX_SPOOL_EXECUTION_BYTES.env
    )]
    SpoolOff,
    #[error("this execution's full output was deleted to keep the spool within its bound; only the bounded output is left")]
    Evicted,
}

impl PageError {
    fn unreadable(error: &ipython_mcp_untrusted::Error) -> PageError {
        PageError::Unreadable {
            reason: error.to_string(),
        }
    }
}

/// Which output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum StreamName {
    Stdout,
    Stderr,
}

impl StreamName {
    fn index(self) -> usize {
        match self {
            StreamName::Stdout => 0,
            StreamName::Stderr => 1,
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            StreamName::Stdout => "stdout",
            StreamName::Stderr => "stderr",
        }
    }
}

/// One page of a spooled stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Page {
    pub stream: StreamName,
    /// The regular expression lines were filtered by, if any.
    pub pattern: Option<String>,
    /// The returned lines, in order, with their 1-based line numbers.
    pub lines: Vec<PageLine>,
    /// Lines in the stream so far (a running execution may add more).
    pub total_lines: u64,
    /// With a pattern: how many lines matched in the whole stream.
    pub total_matches: Option<u64>,
    /// Where to continue (`start_line` of the next call), or null at the end.
    pub next_line: Option<u64>,
    /// True when a line was cut to fit the character bound.
    pub truncated: bool,
    /// False while more lines may come: the execution still runs, or its output is still being
    /// written to disk.
    pub complete: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PageLine {
    pub line: u64,
    pub text: String,
}

/// What to read from a spooled stream.
#[derive(Debug, Clone)]
pub struct PageRequest {
    pub stream: StreamName,
    /// 1-based first line; negative counts from the end (-20: the last 20 lines).
    pub start_line: i64,
    pub max_lines: usize,
    pub pattern: Option<regex::Regex>,
    /// Characters of line text returned in total.
    pub max_chars: usize,
}

/// The executions of one session.
pub struct Executions {
    /// The spool directory, once [`Executions::open`] made it (never, with the spool off).
    dir: OnceLock<tempfile::TempDir>,
    /// Where the spool directory is made.
    parent: PathBuf,
    limits: SpoolLimits,
    records: Records,
    /// Every file operation on the spool, in order, off the async threads (see `spool`).
    queue: SpoolQueue,
    /// Upkeep waiting on the queue: at most one is queued at a time, whatever the disk's speed.
    upkeep: Arc<Upkeep>,
}

type Records = Arc<Mutex<VecDeque<Arc<Record>>>>;

#[derive(Default)]
struct Upkeep {
    /// An upkeep job is queued and has not started.
    queued: std::sync::atomic::AtomicBool,
    /// The msg_ids of forgotten executions whose spool files are still to be deleted.
    forgotten: Mutex<Vec<String>>,
}

impl Executions {
    /// Needs a tokio runtime (the spool queue's worker).
    pub fn new(limits: SpoolLimits, parent: PathBuf) -> Self {
        Executions {
            dir: OnceLock::new(),
            parent,
            limits,
            records: Arc::default(),
            queue: SpoolQueue::start(),
            upkeep: Arc::default(),
        }
    }

    /// Creates the spool directory (on the blocking pool), unless the spool is off; called by
    /// the actor before its first kernel starts, since the helper writes there.
    pub async fn open(&self) {
        if self.limits.max_execution_bytes == 0 || self.dir.get().is_some() {
            return;
        }
        // tempfile creates the directory 0700.
        let parent = self.parent.clone();
        let created = tokio::task::spawn_blocking(move || {
            tempfile::Builder::new()
                .prefix("ipython-mcp-spool-")
                .tempdir_in(parent)
        })
        .await;
        match created {
            Ok(Ok(dir)) => {
                let _ = self.dir.set(dir);
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "no output spool: full output will not be pageable");
            }
            Err(error) => {
                tracing::warn!(%error, "no output spool: full output will not be pageable");
            }
        }
    }

    fn dir(&self) -> Option<&Path> {
        self.dir.get().map(tempfile::TempDir::path)
    }

    /// The spool directory and the per-stream bound, when the spool is on.
    pub fn spool(&self) -> Option<(&Path, u64)> {
        self.dir().map(|dir| (dir, self.limits.max_execution_bytes))
    }

    /// Ends the spool's worker with its session: what was queued is written (within `bound`,
    /// past which the worker is aborted) and nothing more is. The directory stays for readers
    /// of finished executions (a notebook saved after the session stopped) until the drop.
    pub async fn close(&self, bound: Duration) {
        self.queue.join(bound).await;
    }

    /// The session's spool queue.
    pub fn queue(&self) -> &SpoolQueue {
        &self.queue
    }

    /// Remembers a newly admitted execution, forgetting the oldest finished ones past
    /// [`MAX_RECORDS`].
    pub fn register(&self, execution_id: ExecutionId, seq: u64, request_id: String) -> Arc<Record> {
        let record = Arc::new(Record {
            execution_id,
            seq,
            request_id,
            enqueued_at: Instant::now(),
            state: Mutex::new(RecordState::default()),
            done: watch::channel(false).0,
        });
        let mut records = lock(&self.records);
        records.push_back(Arc::clone(&record));
        // Forget the oldest finished executions beyond the bound (running ones stay). Runs
        // under the admission lock, so the files are deleted by the upkeep, not here.
        let mut forgot = false;
        while records.len() > MAX_RECORDS {
            let Some(position) = records.iter().position(|record| record.is_finished()) else {
                break;
            };
            if let Some(old) = records.remove(position) {
                old.release();
                if let Some(msg_id) = old.state().msg_id.clone() {
                    lock(&self.upkeep.forgotten).push(msg_id);
                    forgot = true;
                }
            }
        }
        drop(records);
        if forgot {
            self.maintain();
        }
        record
    }

    /// Queues the upkeep after an execution ended: settle finished outputs (large parts to
    /// `view.json`), keep retained output within its budgets and the spool within its total
    /// bound (see the module docs). Returns at once; the work runs on the spool queue.
    /// Coalesced: while one upkeep waits for the queue, later calls add nothing.
    pub(crate) fn maintain(&self) {
        if self.upkeep.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let dir = self.dir().map(Path::to_owned);
        let limits = self.limits;
        let records = Arc::clone(&self.records);
        let upkeep = Arc::clone(&self.upkeep);
        self.queue.run(move || {
            upkeep.queued.store(false, Ordering::Release);
            let forgotten = std::mem::take(&mut *lock(&upkeep.forgotten));
            if let Some(dir) = dir.as_deref() {
                for msg_id in forgotten {
                    delete_prefixed(dir, &msg_id);
                }
            }
            enforce_total(dir.as_deref(), limits, &records);
        });
    }

    /// After an execution ended: queues the upkeep (`Executions::maintain`) and waits for
    /// it and for `record`'s own spool writes, then reads its spool summary; `None` when the
    /// spool is off or the queue is gone.
    pub async fn settle(&self, record: &Arc<Record>) -> Option<SpoolInfo> {
        self.maintain();
        let dir = self.dir().map(Path::to_owned);
        let record = Arc::clone(record);
        self.queue
            .ask(move || dir.map(|dir| spool_info(&dir, &record)))
            .await
            .flatten()
    }

    /// The remembered execution with this id.
    pub fn find(&self, execution_id: &str) -> Option<Arc<Record>> {
        lock(&self.records)
            .iter()
            .find(|record| record.execution_id == *execution_id)
            .cloned()
    }

    /// The most recently admitted execution.
    pub fn latest(&self) -> Option<Arc<Record>> {
        lock(&self.records).back().cloned()
    }

    /// The ids of the remembered executions, newest first.
    pub fn ids(&self) -> Vec<ExecutionId> {
        lock(&self.records)
            .iter()
            .rev()
            .map(|record| record.execution_id.clone())
            .collect()
    }

    /// The spool directory when the spool is on (for [`spool_info`] off the async threads).
    pub fn spool_dir(&self) -> Option<PathBuf> {
        self.dir().map(Path::to_owned)
    }

    /// The path of a record's spooled stream, or why there is none.
    pub fn stream_path(
        &self,
        record: &Record,
        stream: StreamName,
    ) -> Result<Option<PathBuf>, PageError> {
        if self.dir().is_none() {
            return Err(PageError::SpoolOff);
        }
        let state = record.state();
        if state.evicted {
            return Err(PageError::Evicted);
        }
        Ok(self
            .dir()
            .zip(state.msg_id.as_deref())
            .map(|(dir, msg_id)| stream_path(dir, msg_id, stream)))
    }

    /// A record's outputs as a notebook saves them, from its output log (None when it has none
    /// to read). Read on the spool queue, after everything queued before: for a kernel without
    /// the helper the server writes the log from iopub through that queue, and a read beside
    /// it could miss the execution's last outputs.
    pub async fn saved_outputs(
        &self,
        record: &Record,
        execution_count: Option<u64>,
        max_bytes: u64,
    ) -> Option<crate::SavedOutputs> {
        let (dir, msg_id) = self.transcript_source(record)?;
        // The log is kept within the per-execution bound, plus the one line that says the
        // rest was omitted.
        let max_log_bytes = self.limits.max_execution_bytes.saturating_add(1024);
        self.queue
            .ask(move || {
                crate::transcript::replay(&dir, &msg_id, execution_count, max_bytes, max_log_bytes)
            })
            .await
    }

    /// Where a record's output log is (the spool dir and its msg_id), or None when it has none
    /// to read: the spool is off, the execution never ran, or its files were evicted.
    fn transcript_source(&self, record: &Record) -> Option<(PathBuf, String)> {
        let dir = self.dir()?;
        let state = record.state();
        if state.evicted {
            return None;
        }
        Some((dir.to_owned(), state.msg_id.clone()?))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn stream_path(dir: &Path, msg_id: &str, stream: StreamName) -> PathBuf {
    dir.join(format!("{msg_id}.{}", stream.suffix()))
}

/// Forgets a record: deletes its spool files and releases its share of the retained bytes.
/// Blocking: runs on the spool queue.
fn forget(dir: Option<&Path>, record: &Record) {
    record.release();
    if let Some(dir) = dir {
        delete_files(dir, record);
    }
}

/// Moves large displays and results of finished executions to the spool, then forgets the
/// oldest finished executions while this session or the server holds more than its budget
/// (the newest record always stays). Blocking: runs on the spool queue.
fn enforce_retained(dir: Option<&Path>, limits: SpoolLimits, held: &Mutex<VecDeque<Arc<Record>>>) {
    let records: Vec<Arc<Record>> = lock(held).iter().cloned().collect();
    for record in records.iter().filter(|record| record.is_finished()) {
        record.settle(dir);
    }
    loop {
        let session_bytes: u64 = lock(held)
            .iter()
            .map(|record| record.state().retained_bytes)
            .sum();
        if session_bytes <= limits.max_retained_bytes
            && SERVER_RETAINED.load(Ordering::Relaxed) <= limits.max_server_retained_bytes
        {
            break;
        }
        let mut records = lock(held);
        let newest = records.len().saturating_sub(1);
        let Some(position) = records
            .iter()
            .position(|record| record.is_finished() && record.state().retained_bytes > 0)
            .filter(|position| *position < newest)
        else {
            break;
        };
        let Some(old) = records.remove(position) else {
            break;
        };
        drop(records);
        forget(dir, &old);
    }
}

/// Keeps retained output within its budgets, then deletes the oldest spool files while the
/// total exceeds its bound. Blocking: runs on the spool queue.
fn enforce_total(dir: Option<&Path>, limits: SpoolLimits, held: &Mutex<VecDeque<Arc<Record>>>) {
    enforce_retained(dir, limits, held);
    let Some(dir) = dir else {
        return;
    };
    let records: Vec<Arc<Record>> = lock(held).iter().cloned().collect();
    // One listing for every record: files are named `<msg_id>.<something>`.
    let mut by_msg_id: std::collections::HashMap<String, u64> = Default::default();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let msg_id = name.split_once('.').map_or(&*name, |(msg_id, _)| msg_id);
            let size = entry.metadata().map_or(0, |meta| meta.len());
            *by_msg_id.entry(msg_id.to_owned()).or_default() += size;
        }
    }
    let sizes: Vec<u64> = records
        .iter()
        .map(|record| {
            let msg_id = record.state().msg_id.clone();
            msg_id
                .and_then(|id| by_msg_id.get(&id).copied())
                .unwrap_or(0)
        })
        .collect();
    let mut total: u64 = sizes.iter().sum();
    for (record, size) in records.iter().zip(sizes) {
        if total <= limits.max_total_bytes {
            break;
        }
        if size > 0 && record.is_finished() {
            delete_files(dir, record);
            total -= size;
        }
    }
}

/// Every spool file of a record (its streams, log, view and originals of downscaled images):
/// all are named `<msg_id>.<something>`. Blocking.
fn files(dir: &Path, record: &Record) -> Vec<(PathBuf, u64)> {
    let Some(msg_id) = record.state().msg_id.clone() else {
        return Vec::new();
    };
    prefixed(dir, &msg_id)
}

/// The files named `<msg_id>.<something>` and their sizes. Blocking.
fn prefixed(dir: &Path, msg_id: &str) -> Vec<(PathBuf, u64)> {
    let prefix = format!("{msg_id}.");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
        .map(|entry| {
            let size = entry.metadata().map_or(0, |meta| meta.len());
            (entry.path(), size)
        })
        .collect()
}

/// Deletes a record's spool files. Blocking.
fn delete_files(dir: &Path, record: &Record) {
    record.state().evicted = true;
    for (path, _) in files(dir, record) {
        let _ = std::fs::remove_file(path);
    }
}

/// Deletes the files named `<msg_id>.<something>`. Blocking.
fn delete_prefixed(dir: &Path, msg_id: &str) {
    for (path, _) in prefixed(dir, msg_id) {
        let _ = std::fs::remove_file(path);
    }
}

/// Bytes on disk of a record's stdout and stderr files. Blocking.
fn stream_sizes(dir: &Path, record: &Record) -> [u64; 2] {
    let msg_id = record.state().msg_id.clone();
    let mut sizes = [0; 2];
    for (path, size) in files(dir, record) {
        for stream in [StreamName::Stdout, StreamName::Stderr] {
            if msg_id
                .as_deref()
                .map(|id| stream_path(dir, id, stream))
                .as_deref()
                == Some(path.as_path())
            {
                sizes[stream.index()] = size;
            }
        }
    }
    sizes
}

/// The spool summary for a record. Blocking.
pub fn spool_info(dir: &Path, record: &Record) -> SpoolInfo {
    let sizes = stream_sizes(dir, record);
    let state = record.state();
    SpoolInfo {
        stdout_bytes: sizes[0],
        stderr_bytes: sizes[1],
        dropped_bytes: state.spool_dropped,
        evicted: state.evicted,
    }
}

impl Drop for Executions {
    fn drop(&mut self) {
        for record in lock(&self.records).iter() {
            record.release();
        }
        // The directory goes after every queued write (removed on the blocking pool). Should
        // the runtime be gone, dropping the queued job removes it right away.
        if let Some(dir) = self.dir.take() {
            if self.queue.is_closed() {
                // Closed with its session (`close`): its worker is gone and nothing is written
                // any more, so the blocking pool removes it (a slow disk stalls no async thread).
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => drop(runtime.spawn_blocking(move || drop(dir))),
                    Err(_) => drop(dir),
                }
            } else {
                self.queue.run(move || drop(dir));
            }
        }
        self.queue.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(start_line: i64, max_lines: usize, pattern: Option<&str>) -> PageRequest {
        PageRequest {
            stream: StreamName::Stdout,
            start_line,
            max_lines,
            pattern: pattern.map(|pattern| regex::Regex::new(pattern).unwrap()),
            max_chars: 1000,
        }
    }

    fn spooled(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file
    }

    fn numbers(page: &Page) -> Vec<u64> {
        page.lines.iter().map(|line| line.line).collect()
    }

    #[test]
    fn pages_by_line_range_and_counts_every_line() {
        let text: String = (1..=10).map(|n| format!("line {n}\n")).collect();
        let file = spooled(&text);
        let page =
            read_page(Some(file.path()), &request(3, 4, None), true, 2, u64::MAX).expect("a page");
        assert_eq!(numbers(&page), vec![3, 4, 5, 6]);
        assert_eq!(page.lines[0].text, "line 3");
        assert_eq!((page.total_lines, page.next_line), (10, Some(7)));
        let last = read_page(Some(file.path()), &request(-2, 10, None), true, 2, u64::MAX)
            .expect("a page");
        assert_eq!(numbers(&last), vec![9, 10]);
        assert_eq!(last.next_line, None);
    }

    #[test]
    fn filters_by_pattern_and_counts_matches() {
        let text: String = (1..=100)
            .map(|n| format!("step {n} loss {}\n", n % 7))
            .collect();
        let file = spooled(&text);
        let page = read_page(
            Some(file.path()),
            &request(1, 3, Some(r"loss 0$")),
            true,
            2,
            u64::MAX,
        )
        .expect("a page");
        assert_eq!(numbers(&page), vec![7, 14, 21]);
        assert_eq!(page.total_matches, Some(14));
        assert_eq!(page.next_line, Some(28));
        assert_eq!(page.total_lines, 100);
    }

    #[test]
    fn progress_bars_show_their_last_state_and_a_partial_line_counts() {
        let file = spooled("10%\r50%\r100%\ndone\r\nhalf a line");
        let page = read_page(Some(file.path()), &request(1, 10, None), false, 2, u64::MAX)
            .expect("a page");
        let texts: Vec<&str> = page.lines.iter().map(|line| line.text.as_str()).collect();
        assert_eq!(texts, vec!["100%", "done", "half a line"]);
        assert!(!page.complete);
        let last = read_page(
            Some(file.path()),
            &request(-1, 10, None),
            false,
            2,
            u64::MAX,
        )
        .expect("a page");
        assert_eq!(numbers(&last), vec![3]);
    }

    #[test]
    fn the_character_bound_ends_a_page_and_cuts_only_a_line_longer_than_a_page() {
        let file = spooled("aaaaaaaaaa\nbbbbbbbbbb\n0123456789abcdefghij\ncccc\n");
        let mut small = request(1, 10, None);
        small.max_chars = 15;
        // The second line does not fit what is left: the next page starts with it.
        let page = read_page(Some(file.path()), &small, true, 2, u64::MAX).expect("a page");
        assert_eq!(page.lines.len(), 1);
        assert!(!page.truncated);
        assert_eq!(page.next_line, Some(2));
        // A line longer than a whole page keeps its beginning and its end.
        small.start_line = 3;
        let page = read_page(Some(file.path()), &small, true, 2, u64::MAX).expect("a page");
        assert_eq!(
            page.lines[0].text,
            "01\n[… 5 characters omitted …]\n789abcdefghij"
        );
        assert!(page.truncated);
        assert_eq!(page.next_line, Some(4));
    }

    #[tokio::test]
    async fn a_stream_faster_than_the_disk_is_cut_cleanly_and_counted() {
        let executions = Executions::new(SpoolLimits::default(), std::env::temp_dir());
        executions.open().await;
        let record = executions.register(ExecutionId::generate(), 1, "r".into());
        let collector = Collector::new(Default::default(), 10, None, None);
        record.dispatched("m", 0, Arc::new(Mutex::new(collector)), None);
        let release = crate::spool::tests::stall(executions.queue()).await;
        let mut writer = SpoolWriter::new(&executions, &record, "m").expect("spool on");
        let chunk = "y".repeat(1 << 20);
        let offered = 12 * chunk.len() as u64;
        for _ in 0..12 {
            writer.absorb(&crate::collect::tests::stream(Stdio::Stdout, &chunk));
        }
        writer.absorb(&crate::collect::tests::stream(Stdio::Stderr, "tail\n"));
        writer.finish(Arc::clone(&record));
        assert!(!record.spool_written(), "the disk has not caught up");
        release.send(()).expect("the stall waits");
        let info = executions.settle(&record).await.expect("spool on");
        assert!(record.spool_written());
        // What the backlog held is on disk, a whole prefix without holes; the rest is counted.
        assert!(
            info.stdout_bytes >= (crate::spool::MAX_BACKLOG_BYTES - chunk.len()) as u64,
            "{info:?}"
        );
        assert_eq!(info.stdout_bytes % chunk.len() as u64, 0, "{info:?}");
        assert_eq!(info.stdout_bytes + info.dropped_bytes, offered, "{info:?}");
        assert_eq!(info.stderr_bytes, 5, "{info:?}");
        let dir = executions.spool_dir().expect("dir");
        let log = std::fs::read_to_string(crate::transcript::log_path(&dir, "m")).expect("log");
        assert!(log.contains(r#""name":"stderr""#), "{log}");
    }

    #[test]
    fn a_link_fifo_or_oversized_spool_file_is_refused_or_read_only_to_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let secret = spooled("SECRET\n");
        std::os::unix::fs::symlink(secret.path(), dir.path().join("m.stdout")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("z.stdout")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(dir.path().join("f.stdout"))
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        for (name, expected) in [
            ("m.stdout", "symbolic link"),
            ("z.stdout", "symbolic link"),
            ("f.stdout", "not a regular file (a FIFO)"),
        ] {
            let path = dir.path().join(name);
            let refused = read_page(Some(&path), &request(-5, 10, None), true, 2, 1 << 20)
                .expect_err("refused");
            let message = refused.to_string();
            assert!(
                message.contains(expected) && message.contains(name),
                "{message}"
            );
            assert!(!message.contains("SECRET"));
        }
        let big = spooled(&"line\n".repeat(1000));
        let page =
            read_page(Some(big.path()), &request(-1, 10, None), true, 2, 50).expect("a page");
        assert_eq!(
            (page.total_lines, numbers(&page)),
            (10, vec![10]),
            "only the bound is read"
        );
    }

    #[test]
    fn a_missing_file_is_an_empty_stream() {
        let page = read_page(None, &request(1, 10, None), true, 2, u64::MAX).expect("a page");
        assert_eq!((page.lines.len(), page.total_lines), (0, 0));
    }
}
