//! What `runtime_status` says of the session's namespace checkpoint, read from the files the
//! helper writes (its `checkpoint.py`: `manifest.json`, and `failure.json` while the latest
//! attempt failed). Read again only when they change, so a status stays cheap.
//!
//! The kernel writes these files, so they are read as untrusted ones (`ipython_mcp_untrusted`:
//! no link followed, nothing but a regular file opened, at most `MAX_FILE_BYTES`), and never on
//! the caller's thread: [`Cache::refresh`] reads them on the blocking pool, one read at a time
//! per session, and waits for it at most `READ_BOUND`; every status in between shows the last
//! value read ([`Cache::last`]). A slow or hostile file delays only the call that asked.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::sync::watch;

use crate::status::{CheckpointStatus, CheckpointTracking};
use ipython_mcp_output::LostName;

/// The checkpoint's directory in the session's spool directory.
pub(super) const CHECKPOINT_DIR: &str = "checkpoint";

const MANIFEST: &str = "manifest.json";
const FAILURE: &str = "failure.json";

/// Lost names listed in the status; the rest are counted in `lost_names`.
const LOST_SHOWN: usize = 20;
/// Longest reason kept.
const REASON_CHARS: usize = 200;
/// The largest manifest or failure file read (a manifest names each variable once).
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// How long a status waits for the files to be read; past it, it shows what was read before.
const READ_BOUND: Duration = Duration::from_secs(2);

/// The files as last read, and what they said.
#[derive(Default)]
pub(super) struct Cache(Arc<Inner>);

#[derive(Default)]
struct Inner {
    state: Mutex<State>,
    /// Bumped each time a read ends.
    reads: watch::Sender<u64>,
}

#[derive(Default)]
struct State {
    seen: Option<(Stamp, CheckpointStatus)>,
    /// A read is under way on the blocking pool.
    reading: bool,
}

/// What identifies a version of the two files.
type Stamp = [Option<(SystemTime, u64)>; 2];

impl Cache {
    /// The status as last read (nothing read yet: no checkpoint taken). No file I/O.
    pub(super) fn last(&self) -> CheckpointStatus {
        self.lock()
            .seen
            .as_ref()
            .map(|(_, status)| status.clone())
            .unwrap_or_default()
    }

    /// Reads the files in `dir` again on the blocking pool (joining a read under way) and
    /// waits for it, at most `READ_BOUND`.
    pub(super) async fn refresh(&self, dir: PathBuf) {
        let mut reads = self.0.reads.subscribe();
        let start = !std::mem::replace(&mut self.lock().reading, true);
        if start {
            let inner = Arc::clone(&self.0);
            // Not joined: it ends once the disk answers; `reading` keeps it to one a session.
            drop(tokio::task::spawn_blocking(move || {
                let seen = inner.lock().seen.as_ref().map(|(stamp, _)| *stamp);
                let read = read_if_changed(&dir, seen);
                let mut state = inner.lock();
                if let Some(read) = read {
                    state.seen = Some(read);
                }
                state.reading = false;
                drop(state);
                inner.reads.send_modify(|count| *count += 1);
            }));
        }
        let _ = tokio::time::timeout(READ_BOUND, reads.changed()).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock()
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The stamp and status of the files in `dir`, or `None` when their stamp is still `seen`.
/// Blocking.
fn read_if_changed(dir: &Path, seen: Option<Stamp>) -> Option<(Stamp, CheckpointStatus)> {
    let manifest = open(dir, MANIFEST);
    let failure = open(dir, FAILURE);
    let stamp = [stamp(&manifest), stamp(&failure)];
    if seen == Some(stamp) && manifest.is_ok() && failure.is_ok() {
        return None;
    }
    Some((stamp, read(manifest, failure)))
}

/// A file of the checkpoint, opened as an untrusted one; `Ok(None)`: there is none.
type Opened = Result<Option<std::fs::File>, ipython_mcp_untrusted::Error>;

fn open(dir: &Path, name: &str) -> Opened {
    match ipython_mcp_untrusted::open(dir, Path::new(name)) {
        Ok(file) => Ok(Some(file)),
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(error),
    }
}

fn stamp(opened: &Opened) -> Option<(SystemTime, u64)> {
    let meta = opened.as_ref().ok()?.as_ref()?.metadata().ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// The JSON in an opened file; a file that could not be opened or read is the reason why.
fn json(opened: Opened) -> Result<Option<Value>, String> {
    use std::io::Read as _;
    let Some(file) = opened.map_err(|error| error.to_string())? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| error.to_string())?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "a checkpoint file is larger than {MAX_FILE_BYTES} bytes"
        ));
    }
    Ok(serde_json::from_slice(&bytes).ok())
}

fn read(manifest: Opened, failure: Opened) -> CheckpointStatus {
    // A file that is not one the server reads (a link, a FIFO in its place) is said as the
    // failure it is; the checkpoint is then not taken as far as the status knows.
    let (manifest, refused) = match json(manifest) {
        Ok(manifest) => (manifest.unwrap_or(Value::Null), None),
        Err(reason) => (Value::Null, Some(reason)),
    };
    let failure = match json(failure) {
        Ok(failure) => failure,
        Err(reason) => Some(serde_json::json!({ "reason": reason })),
    };
    let count = |key: &str| {
        manifest
            .get(key)
            .and_then(Value::as_object)
            .map_or(0, |map| map.len())
    };
    let lost = manifest
        .get("lost")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let text = |value: Option<&Value>| {
        ipython_mcp_text::shorten(
            value.and_then(Value::as_str).unwrap_or_default(),
            REASON_CHARS,
        )
    };
    CheckpointStatus {
        taken: !manifest.is_null(),
        execution_count: manifest.get("execution_count").and_then(Value::as_u64),
        names: count("variables") + count("modules"),
        bytes: manifest.get("bytes").and_then(Value::as_u64).unwrap_or(0),
        lost_names: lost.len(),
        lost: lost
            .iter()
            .take(LOST_SHOWN)
            .map(|lost| LostName {
                name: text(lost.get("name")),
                reason: text(lost.get("reason")),
            })
            .collect(),
        failure: refused
            .map(|reason| ipython_mcp_text::shorten(&reason, REASON_CHARS))
            .or_else(|| {
                failure.map(|failure| {
                    let after = failure
                        .get("execution_count")
                        .and_then(Value::as_u64)
                        .map(|count| format!("after execution {count}: "))
                        .unwrap_or_default();
                    format!("{after}{}", text(failure.get("reason")))
                })
            }),
        bytes_written: manifest.get("written").and_then(Value::as_u64).unwrap_or(0),
        values_reused: manifest
            .get("reused")
            .and_then(Value::as_u64)
            .map_or(0, |reused| usize::try_from(reused).unwrap_or(usize::MAX)),
        tracking: match manifest.get("tracking").and_then(Value::as_str) {
            Some("hash") => Some(CheckpointTracking::Hash),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_status_follows_the_files_and_is_read_again_only_when_they_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Cache::default();
        cache.refresh(dir.path().to_owned()).await;
        let empty = cache.last();
        assert!(!empty.taken && empty.names == 0 && empty.failure.is_none());
        std::fs::write(
            dir.path().join("manifest.json"),
            r#"{"format": 2, "execution_count": 3, "variables": {"x": {"blob": "a", "bytes": 5}}, "modules": {"np": "numpy"}, "lost": [{"name": "gen", "reason": "TypeError: no"}], "bytes": 5, "written": 300, "reused": 1, "tracking": "hash"}"#,
        )
        .expect("manifest");
        assert!(!cache.last().taken, "nothing is read but by a refresh");
        cache.refresh(dir.path().to_owned()).await;
        let taken = cache.last();
        assert!(taken.taken);
        assert_eq!(
            (
                taken.execution_count,
                taken.names,
                taken.bytes,
                taken.lost_names
            ),
            (Some(3), 2, 5, 1)
        );
        assert_eq!(taken.lost[0].name, "gen");
        assert_eq!(
            (taken.bytes_written, taken.values_reused, taken.tracking),
            (300, 1, Some(CheckpointTracking::Hash))
        );
        std::fs::write(
            dir.path().join("failure.json"),
            r#"{"execution_count": 4, "reason": "OSError: disk full"}"#,
        )
        .expect("failure");
        cache.refresh(dir.path().to_owned()).await;
        let failed = cache.last();
        assert_eq!(
            failed.failure.as_deref(),
            Some("after execution 4: OSError: disk full")
        );
        assert_eq!(
            failed.execution_count,
            Some(3),
            "the previous one stays current"
        );
    }

    #[tokio::test]
    async fn a_fifo_or_a_link_in_place_of_the_manifest_is_said_and_blocks_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secret = dir.path().join("secret");
        std::fs::write(&secret, r#"{"format": 1, "execution_count": 99}"#).expect("secret");
        let made = std::process::Command::new("mkfifo")
            .arg(dir.path().join("manifest.json"))
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        let cache = Cache::default();
        cache.refresh(dir.path().to_owned()).await;
        let status = cache.last();
        assert!(!status.taken, "{status:?}");
        let failure = status.failure.expect("the refusal is said");
        assert!(failure.contains("not a regular file (a FIFO)"), "{failure}");
        std::fs::remove_file(dir.path().join("manifest.json")).expect("rm");
        std::os::unix::fs::symlink(&secret, dir.path().join("manifest.json")).expect("symlink");
        cache.refresh(dir.path().to_owned()).await;
        let status = cache.last();
        assert_eq!(status.execution_count, None, "{status:?}");
        assert!(
            status
                .failure
                .as_deref()
                .is_some_and(|failure| failure.contains("symbolic link")),
            "{status:?}"
        );
    }
}
