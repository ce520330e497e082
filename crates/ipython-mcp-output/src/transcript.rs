//! The unbounded record of what one execution produced, for saving into a notebook as Jupyter
//! would have saved it, while the agent only ever receives the bounded view.
//!
//! Next to the streams in the spool, `<msg_id>.outputs` logs every output in arrival order, one
//! JSON object a line: displays, display updates, the result, the error and `clear_output` as
//! the kernel produced them (before any bound), and a stream marker (`{"output_type": "stream",
//! "name", "offset"}`) each time stream output resumes, naming the byte offset in the stream's
//! own spool file, so stream text is not logged twice. The Python helper writes it inside the
//! kernel; for kernels without the helper, `LogWriter` writes it from iopub. A line that no
//! longer fits the spool's per-execution bound is replaced by `{"output_type": "omitted"}`.
//!
//! [`replay`] turns a log into nbformat outputs with the semantics of Jupyter's own client
//! (nbclient): `clear_output` (immediate or at the next output), `update_display_data` of every
//! output with that display id, consecutive writes to one stream in one output, and a budget of
//! bytes per cell with a note naming what did not fit.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ipython_mcp_jupyter::protocol::{JupyterMessageContent, Stdio};
use ipython_mcp_jupyter::Routed;
use serde_json::{json, Value};

use crate::output::media_map;
use crate::spool::{SpoolFile, SpoolQueue};

/// The log of an execution's outputs in the spool directory `dir`.
pub(crate) fn log_path(dir: &Path, msg_id: &str) -> PathBuf {
    dir.join(format!("{msg_id}.outputs"))
}

/// An execution's outputs as a notebook saves them.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedOutputs {
    /// nbformat 4 output objects, in order.
    pub outputs: Vec<Value>,
    /// Outputs (or stream parts) left out because the cell's budget was spent.
    pub omitted_outputs: u64,
    /// Bytes left out: over the budget, or never logged (the spool's own bound).
    pub omitted_bytes: u64,
    /// True when the spool itself lost some of the output (its per-execution bound).
    pub spool_incomplete: bool,
    /// True when the kernel never sent some of its output: a remote kernel's helper bounds
    /// what it sends (there is no spool on its side to keep the rest).
    pub kernel_withheld: bool,
}

/// Replays the log of `msg_id` in `dir` into nbformat outputs, at most about `max_bytes` of
/// serialized output; `execution_count` goes into the `execute_result`. A missing log is an
/// execution that produced no output; at most `max_log_bytes` of it are read (the spool's
/// per-execution bound), and a log or stream file that is not a regular file (the kernel
/// writes them, and may have put a link or a FIFO there) is not read and counts as lost
/// output. Blocking: run it off the async threads.
pub fn replay(
    dir: &Path,
    msg_id: &str,
    execution_count: Option<u64>,
    max_bytes: u64,
    max_log_bytes: u64,
) -> SavedOutputs {
    let (entries, log_read) = read_log(dir, msg_id, max_log_bytes);
    let saved = SavedOutputs {
        outputs: Vec::new(),
        omitted_outputs: 0,
        omitted_bytes: 0,
        spool_incomplete: !log_read,
        kernel_withheld: false,
    };
    let mut replay = Replay {
        dir,
        msg_id,
        execution_count,
        ends: segment_ends(&entries),
        budget: max_bytes,
        display_ids: HashMap::new(),
        clear_pending: false,
        saved,
    };
    for (index, entry) in entries.iter().enumerate() {
        replay.entry(index, entry);
    }
    replay.saved
}

/// The log's entries, one per non-empty line of its first `max_bytes`; a line that is not JSON
/// becomes `null` (and counts as lost output). A missing log has no entries; one that cannot be
/// read has none either, and false says so.
fn read_log(dir: &Path, msg_id: &str, max_bytes: u64) -> (Vec<Value>, bool) {
    let name = format!("{msg_id}.outputs");
    match ipython_mcp_untrusted::open(dir, Path::new(&name)) {
        Ok(file) => {
            let entries = BufReader::new(file.take(max_bytes))
                .split(b'\n')
                .map_while(Result::ok)
                .filter(|line| !line.is_empty())
                .map(|line| serde_json::from_slice(&line).unwrap_or(Value::Null))
                .collect();
            (entries, true)
        }
        Err(error) if error.is_not_found() => (Vec::new(), true),
        Err(error) => {
            tracing::warn!(%error, "an output log was not read");
            (Vec::new(), false)
        }
    }
}

/// Where each stream segment ends, by the index of its marker: at the next marker of the same
/// stream; a segment missing here runs to the end of its spool file.
fn segment_ends(entries: &[Value]) -> HashMap<usize, u64> {
    let mut ends: HashMap<usize, u64> = HashMap::new();
    let mut open: HashMap<String, usize> = HashMap::new();
    for (index, entry) in entries.iter().enumerate() {
        if entry["output_type"] == "stream" {
            let name = entry["name"].as_str().unwrap_or_default().to_owned();
            if let Some(previous) = open.insert(name, index) {
                ends.insert(previous, entry["offset"].as_u64().unwrap_or(0));
            }
        }
    }
    ends
}

/// The state of one replay: the outputs so far, the budget left, and what a later entry may
/// still change (outputs by display id, a `clear_output` waiting for the next output).
struct Replay<'a> {
    dir: &'a Path,
    msg_id: &'a str,
    execution_count: Option<u64>,
    ends: HashMap<usize, u64>,
    budget: u64,
    display_ids: HashMap<String, Vec<usize>>,
    clear_pending: bool,
    saved: SavedOutputs,
}

impl Replay<'_> {
    /// Applies the log entry at `index`.
    fn entry(&mut self, index: usize, entry: &Value) {
        let kind = entry["output_type"].as_str().unwrap_or_default();
        if kind == "omitted" || entry.is_null() {
            self.saved.spool_incomplete = true;
            return;
        }
        match kind {
            "withheld" => self.saved.kernel_withheld = true,
            "clear_output" => {
                if entry["wait"].as_bool().unwrap_or(false) {
                    self.clear_pending = true;
                } else {
                    self.clear_pending = false;
                    self.clear();
                }
            }
            "update_display_data" => self.update_display(entry),
            _ => self.output(index, kind, entry),
        }
    }

    /// Drops every output so far (and the display ids that pointed at them).
    fn clear(&mut self) {
        self.saved.outputs.clear();
        self.display_ids.clear();
    }

    /// Replaces the data and metadata of every output with the update's display id; an update
    /// of an id no output has changes nothing.
    fn update_display(&mut self, entry: &Value) {
        let Some(targets) = display_id(entry).and_then(|id| self.display_ids.get(id)) else {
            return;
        };
        for &target in targets {
            if let Some(output) = self.saved.outputs.get_mut(target) {
                output["data"] = entry["data"].clone();
                output["metadata"] = entry["metadata"].clone();
            }
        }
    }

    /// Adds an output entry of `kind` within the budget, first applying a waiting
    /// `clear_output` (any entry that is not itself a clear or an update counts as the next
    /// output, as in nbclient).
    fn output(&mut self, index: usize, kind: &str, entry: &Value) {
        if std::mem::take(&mut self.clear_pending) {
            self.clear();
        }
        let output = match kind {
            "stream" => {
                self.stream(index, entry);
                return;
            }
            "display_data" => json!({
                "output_type": "display_data",
                "data": entry["data"],
                "metadata": entry["metadata"],
            }),
            "execute_result" => json!({
                "output_type": "execute_result",
                "execution_count": self.execution_count,
                "data": entry["data"],
                "metadata": entry["metadata"],
            }),
            "error" => json!({
                "output_type": "error",
                "ename": entry["ename"],
                "evalue": entry["evalue"],
                "traceback": entry["traceback"],
            }),
            _ => return,
        };
        let size = output.to_string().len() as u64;
        if size > self.budget {
            self.saved.omitted_outputs += 1;
            self.saved.omitted_bytes += size;
            return;
        }
        self.budget -= size;
        if kind == "display_data" {
            if let Some(id) = display_id(entry) {
                self.display_ids
                    .entry(id.to_owned())
                    .or_default()
                    .push(self.saved.outputs.len());
            }
        }
        self.saved.outputs.push(output);
    }

    /// Reads the stream segment the marker at `index` begins, within the budget, and appends
    /// it to the previous output when that is the same stream, as consecutive writes are one
    /// output in a notebook.
    fn stream(&mut self, index: usize, entry: &Value) {
        let name = entry["name"].as_str().unwrap_or("stdout");
        let start = entry["offset"].as_u64().unwrap_or(0);
        let file = format!("{}.{name}", self.msg_id);
        let (text, left_out) = read_segment(
            self.dir,
            Path::new(&file),
            start,
            self.ends.get(&index).copied(),
            self.budget,
        );
        self.saved.omitted_bytes += left_out;
        if left_out > 0 {
            self.saved.omitted_outputs += 1;
        }
        self.budget -= (text.len() as u64).min(self.budget);
        match self.saved.outputs.last_mut() {
            Some(last) if last["output_type"] == "stream" && last["name"] == name => {
                let mut joined = last["text"].as_str().unwrap_or_default().to_owned();
                joined.push_str(&text);
                last["text"] = Value::String(joined);
            }
            _ if text.is_empty() => {}
            // Its text was charged to the budget already.
            _ => self
                .saved
                .outputs
                .push(json!({"output_type": "stream", "name": name, "text": text})),
        }
    }
}

fn display_id(entry: &Value) -> Option<&str> {
    entry["transient"]["display_id"].as_str()
}

/// Up to `budget` bytes of a stream's spool file from `start` to `end` (or its end), as text
/// with carriage-return overwrites applied per line, as a front end shows (and JupyterLab
/// saves) a progress bar; returns it and the bytes left out.
fn read_segment(
    dir: &Path,
    name: &Path,
    start: u64,
    end: Option<u64>,
    budget: u64,
) -> (String, u64) {
    // A stream file that is not a regular file is read as a missing one: nothing (the log's
    // own reading says when it was not read).
    let Ok(mut file) = ipython_mcp_untrusted::open(dir, name) else {
        return (String::new(), 0);
    };
    let size = file.metadata().map_or(0, |meta| meta.len());
    let end = end.unwrap_or(size).min(size);
    let length = end.saturating_sub(start);
    let wanted = length.min(budget);
    let mut raw = Vec::with_capacity(wanted as usize);
    if file.seek(SeekFrom::Start(start)).is_err()
        || (&mut file).take(wanted).read_to_end(&mut raw).is_err()
    {
        return (String::new(), length);
    }
    let mut left_out = length - raw.len() as u64;
    if left_out > 0 {
        // Cut at a character boundary rather than leave half a character.
        let valid = match std::str::from_utf8(&raw) {
            Ok(_) => raw.len(),
            Err(error) => error.valid_up_to(),
        };
        left_out += (raw.len() - valid) as u64;
        raw.truncate(valid);
    }
    (rendered(&String::from_utf8_lossy(&raw)), left_out)
}

/// Each line as a terminal leaves it after `\r` overwrites: its last non-empty segment.
fn rendered(text: &str) -> String {
    if !text.contains('\r') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body.strip_suffix('\r').unwrap_or(body), "\n"),
            None => (line, ""),
        };
        let shown = body
            .rsplit('\r')
            .find(|segment| !segment.is_empty())
            .unwrap_or("");
        out.push_str(shown);
        out.push_str(newline);
    }
    out
}

/// Writes the output log from iopub, for kernels without the helper (which writes its own),
/// through the session's spool queue.
pub(crate) struct LogWriter {
    file: Arc<SpoolFile>,
    written: u64,
    limit: u64,
    full: bool,
    /// The stream (0 stdout, 1 stderr) of the latest logged entry, if it was a stream.
    last_stream: Option<usize>,
}

impl LogWriter {
    pub(crate) fn new(dir: &Path, msg_id: &str, limit: u64) -> Self {
        LogWriter {
            file: SpoolFile::new(log_path(dir, msg_id)),
            written: 0,
            limit,
            full: false,
            last_stream: None,
        }
    }

    /// The log file (to release it, and to read what the disk refused).
    pub(crate) fn file(&self) -> &Arc<SpoolFile> {
        &self.file
    }

    /// Logs `routed` if it is an output; `stream_offsets` are the bytes each stream's spool
    /// file held before this message.
    pub(crate) fn absorb(&mut self, routed: &Routed, stream_offsets: [u64; 2], queue: &SpoolQueue) {
        let entry = match &routed.message.content {
            JupyterMessageContent::StreamContent(stream) => {
                let (index, name) = match stream.name {
                    Stdio::Stdout => (0, "stdout"),
                    Stdio::Stderr => (1, "stderr"),
                };
                if self.last_stream != Some(index) {
                    let offset = stream_offsets[index];
                    self.add(
                        json!({"output_type": "stream", "name": name, "offset": offset}),
                        queue,
                    );
                    self.last_stream = Some(index);
                }
                return;
            }
            JupyterMessageContent::DisplayData(display) => json!({
                "output_type": "display_data",
                "data": media_map(&display.data),
                "metadata": display.metadata,
                "transient": display.transient.as_ref().and_then(|transient| transient.display_id.as_ref()).map_or_else(|| json!({}), |id| json!({"display_id": id})),
            }),
            JupyterMessageContent::UpdateDisplayData(update) => json!({
                "output_type": "update_display_data",
                "data": media_map(&update.data),
                "metadata": update.metadata,
                "transient": update.transient.display_id.as_ref().map_or_else(|| json!({}), |id| json!({"display_id": id})),
            }),
            JupyterMessageContent::ExecuteResult(result) => json!({
                "output_type": "execute_result",
                "data": media_map(&result.data),
                "metadata": result.metadata,
            }),
            JupyterMessageContent::ErrorOutput(error) => json!({
                "output_type": "error",
                "ename": error.ename,
                "evalue": error.evalue,
                "traceback": error.traceback,
            }),
            JupyterMessageContent::ClearOutput(clear) => {
                json!({"output_type": "clear_output", "wait": clear.wait})
            }
            _ => return,
        };
        self.last_stream = None;
        self.add(entry, queue);
    }

    /// Logs that the kernel kept some of this execution's output back (its helper said so in
    /// its report), so a notebook saved from this log says it is incomplete.
    pub(crate) fn withheld(&mut self, queue: &SpoolQueue) {
        self.last_stream = None;
        self.add(json!({"output_type": "withheld"}), queue);
    }

    fn add(&mut self, entry: Value, queue: &SpoolQueue) {
        const OMITTED: &[u8] = b"{\"output_type\":\"omitted\"}\n";
        if self.full {
            return;
        }
        let mut line = entry.to_string().into_bytes();
        line.push(b'\n');
        if self.written + line.len() as u64 > self.limit {
            self.full = true;
            line = OMITTED.to_vec();
        }
        if queue.append(&self.file, &line) {
            self.written += line.len() as u64;
        } else {
            // The disk is behind by the whole backlog: the rest of the log is not kept, which
            // the marker says (when even it fits).
            self.full = true;
            if line != OMITTED && queue.append(&self.file, OMITTED) {
                self.written += OMITTED.len() as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spool(log: &[Value], stdout: &str, stderr: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        for entry in log {
            text.push_str(&entry.to_string());
            text.push('\n');
        }
        std::fs::write(log_path(dir.path(), "m"), text).unwrap();
        std::fs::write(dir.path().join("m.stdout"), stdout).unwrap();
        std::fs::write(dir.path().join("m.stderr"), stderr).unwrap();
        dir
    }

    fn display(text: &str, id: Option<&str>) -> Value {
        json!({"output_type": "display_data", "data": {"text/plain": text}, "metadata": {}, "transient": id.map_or_else(|| json!({}), |id| json!({"display_id": id}))})
    }

    fn stream(name: &str, offset: u64) -> Value {
        json!({"output_type": "stream", "name": name, "offset": offset})
    }

    fn kinds(saved: &SavedOutputs) -> Vec<String> {
        saved
            .outputs
            .iter()
            .map(|output| match output["output_type"].as_str().unwrap() {
                "stream" => format!(
                    "{}:{}",
                    output["name"].as_str().unwrap(),
                    output["text"].as_str().unwrap()
                ),
                "display_data" => {
                    format!("display:{}", output["data"]["text/plain"].as_str().unwrap())
                }
                other => other.to_owned(),
            })
            .collect()
    }

    #[test]
    fn outputs_replay_in_order_with_streams_cut_at_their_markers() {
        let dir = spool(
            &[
                stream("stdout", 0),
                display("a", None),
                stream("stderr", 0),
                stream("stdout", 4),
                json!({"output_type": "execute_result", "data": {"text/plain": "1"}, "metadata": {}}),
                json!({"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["t1", "t2"]}),
            ],
            "one\ntwo 50%\rtwo 100%\n",
            "err\n",
        );
        let saved = replay(dir.path(), "m", Some(7), u64::MAX, u64::MAX);
        assert_eq!(
            kinds(&saved),
            [
                "stdout:one\n",
                "display:a",
                "stderr:err\n",
                "stdout:two 100%\n",
                "execute_result",
                "error"
            ]
        );
        assert_eq!(saved.outputs[4]["execution_count"], 7);
        assert_eq!(saved.outputs[5]["traceback"], json!(["t1", "t2"]));
        assert_eq!(
            (
                saved.omitted_outputs,
                saved.omitted_bytes,
                saved.spool_incomplete
            ),
            (0, 0, false)
        );
    }

    #[test]
    fn clear_output_and_display_updates_follow_jupyter() {
        let update = |text: &str, id: &str| json!({"output_type": "update_display_data", "data": {"text/plain": text}, "metadata": {}, "transient": {"display_id": id}});
        let dir = spool(
            &[
                display("gone", None),
                json!({"output_type": "clear_output", "wait": false}),
                display("a", Some("d")),
                display("b", None),
                display("a", Some("d")),
                update("a2", "d"),
                update("nobody", "x"),
                json!({"output_type": "clear_output", "wait": true}),
                update("still a3", "d"),
            ],
            "",
            "",
        );
        // wait=True with nothing after it keeps the old outputs (updated).
        assert_eq!(
            kinds(&replay(dir.path(), "m", None, u64::MAX, u64::MAX)),
            ["display:still a3", "display:b", "display:still a3"]
        );
        let dir = spool(
            &[
                display("old", Some("d")),
                json!({"output_type": "clear_output", "wait": true}),
                display("new", None),
                update("x", "d"),
            ],
            "",
            "",
        );
        assert_eq!(
            kinds(&replay(dir.path(), "m", None, u64::MAX, u64::MAX)),
            ["display:new"]
        );
    }

    #[test]
    fn the_budget_and_the_spool_bound_are_counted() {
        let dir = spool(
            &[
                display(&"x".repeat(100), None),
                display("small", None),
                stream("stdout", 0),
                json!({"output_type": "omitted"}),
            ],
            &"y".repeat(50),
            "",
        );
        let saved = replay(dir.path(), "m", None, 120, u64::MAX);
        let small = display("small", None).to_string().len() as u64 - 15; // less its transient
        assert_eq!(
            kinds(&saved),
            [
                "display:small".to_owned(),
                "stdout:".to_owned() + &"y".repeat((120 - small) as usize)
            ]
        );
        assert_eq!(
            saved.omitted_outputs, 2,
            "the big display and the stream's rest"
        );
        assert!(saved.spool_incomplete);
        assert!(!saved.kernel_withheld);
        assert!(saved.omitted_bytes >= 100, "{saved:?}");
        // A kernel that kept output back (a remote one's helper said so) is named too.
        let dir = spool(
            &[display("kept", None), json!({"output_type": "withheld"})],
            "",
            "",
        );
        let saved = replay(dir.path(), "m", None, u64::MAX, u64::MAX);
        assert_eq!(kinds(&saved), ["display:kept"]);
        assert!(
            saved.kernel_withheld && !saved.spool_incomplete,
            "{saved:?}"
        );
        // No log at all: nothing was produced.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(
            replay(empty.path(), "m", None, 10, u64::MAX).outputs,
            Vec::<Value>::new()
        );
    }

    #[test]
    fn a_log_or_stream_the_kernel_replaced_with_a_link_is_not_read() {
        let outside = spool(&[display("secret", None)], "SECRET\n", "");
        let dir = spool(
            &[json!({"output_type": "stream", "name": "stdout", "offset": 0})],
            "",
            "",
        );
        std::fs::remove_file(dir.path().join("m.stdout")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("m.stdout"), dir.path().join("m.stdout"))
            .unwrap();
        let saved = replay(dir.path(), "m", None, u64::MAX, u64::MAX);
        assert!(!format!("{saved:?}").contains("SECRET"), "{saved:?}");
        std::fs::remove_file(dir.path().join("m.outputs")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("m.outputs")).unwrap();
        let saved = replay(dir.path(), "m", None, u64::MAX, u64::MAX);
        assert!(
            saved.outputs.is_empty() && saved.spool_incomplete,
            "{saved:?}"
        );
        // A log past its bound is read only that far.
        let long = spool(&[display("a", None), display("b", None)], "", "");
        let first_line = std::fs::read_to_string(long.path().join("m.outputs"))
            .unwrap()
            .find('\n')
            .unwrap() as u64;
        let saved = replay(long.path(), "m", None, u64::MAX, first_line + 1);
        assert_eq!(kinds(&saved), ["display:a"]);
    }
}
