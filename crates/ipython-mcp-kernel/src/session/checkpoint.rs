//! What `runtime_status` says of the session's namespace checkpoint, read from the files the
//! helper writes (its `checkpoint.py`: `manifest.json`, and `failure.json` while the latest
//! attempt failed). Read again only when they change, so a status stays cheap.

use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::Value;

use crate::status::CheckpointStatus;
use ipython_mcp_output::LostName;

/// The checkpoint's directory in the session's spool directory.
pub(super) const CHECKPOINT_DIR: &str = "checkpoint";

/// Lost names listed in the status; the rest are counted in `lost_names`.
const LOST_SHOWN: usize = 20;
/// Longest reason kept.
const REASON_CHARS: usize = 200;

/// The files as last read, and what they said.
#[derive(Default)]
pub(super) struct Cache(Mutex<Option<(Stamp, CheckpointStatus)>>);

/// What identifies a version of the two files.
type Stamp = [Option<(SystemTime, u64)>; 2];

impl Cache {
    /// The status of the checkpoint in `dir` (re-read only if its files changed).
    pub(super) fn status(&self, dir: &Path) -> CheckpointStatus {
        let (manifest, failure) = (dir.join("manifest.json"), dir.join("failure.json"));
        let stamp = [stamp(&manifest), stamp(&failure)];
        let mut cached = self.0.lock().expect("checkpoint cache lock");
        if let Some((seen, status)) = cached.as_ref() {
            if *seen == stamp {
                return status.clone();
            }
        }
        let status = read(&manifest, &failure);
        *cached = Some((stamp, status.clone()));
        status
    }
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

fn json(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn read(manifest: &Path, failure: &Path) -> CheckpointStatus {
    let manifest = json(manifest).unwrap_or(Value::Null);
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
        failure: json(failure).map(|failure| {
            let after = failure
                .get("execution_count")
                .and_then(Value::as_u64)
                .map(|count| format!("after execution {count}: "))
                .unwrap_or_default();
            format!("{after}{}", text(failure.get("reason")))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_follows_the_files_and_is_read_again_only_when_they_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Cache::default();
        let empty = cache.status(dir.path());
        assert!(!empty.taken && empty.names == 0 && empty.failure.is_none());
        std::fs::write(
            dir.path().join("manifest.json"),
            r#"{"format": 1, "execution_count": 3, "variables": {"x": {"blob": "a", "bytes": 5}}, "modules": {"np": "numpy"}, "lost": [{"name": "gen", "reason": "TypeError: no"}], "bytes": 5}"#,
        )
        .expect("manifest");
        let taken = cache.status(dir.path());
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
        std::fs::write(
            dir.path().join("failure.json"),
            r#"{"execution_count": 4, "reason": "OSError: disk full"}"#,
        )
        .expect("failure");
        let failed = cache.status(dir.path());
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
}
