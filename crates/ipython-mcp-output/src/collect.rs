//! Folds the messages of one execution into a bounded [`ExecutionOutput`](crate::ExecutionOutput).
//!
//! Output is bounded as it arrives: streams go into [`TerminalSink`]s, display items are capped
//! by count and normalized, so what the server holds per execution does not grow with what the
//! kernel prints. When the bundled helper is present its end-of-execution report is the
//! authority for stream text and omitted counts (it saw every character, including the ones it
//! never sent).

use ipython_mcp_config::OutputLimits;
use ipython_mcp_jupyter::protocol::{
    CommMsg, ExecuteReply, ExecuteResult, ExecutionState, JupyterMessageContent, ReplyStatus,
    Stdio, StreamContent, UpdateDisplayData,
};
use ipython_mcp_jupyter::{Channel, Routed};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::bound::{self, JsonLimits, MAX_FIT_PENDING_BYTES};
use crate::output::{media_map, Code, DisplayItem, ErrorInfo, Truncated, Withheld};
use crate::payload;
use crate::terminal::{Kept, PagerCall, TerminalSink};

/// Characters of the latest output line kept for progress notifications.
const LATEST_LINE_CHARS: usize = 200;

/// The helper's end-of-execution report (see the kernel crate's
/// `python/ipython_mcp_helper/installation.py`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct HelperReport {
    pub stdout: StreamReport,
    pub stderr: StreamReport,
    #[serde(default)]
    pub display_omitted: u64,
    /// Per stream: bytes written to the spool and bytes beyond its bound.
    #[serde(default)]
    pub spool: std::collections::BTreeMap<String, SpoolCount>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct SpoolCount {
    #[serde(default)]
    pub dropped_bytes: u64,
}

/// One stream's kept view, as the helper's sink made it (see `terminal::Kept`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct StreamReport {
    pub text: String,
    #[serde(default)]
    pub tail: String,
    pub omitted_chars: u64,
    #[serde(default)]
    pub omitted_lines: u64,
    #[serde(default)]
    pub first_omitted_line: u64,
}

impl StreamReport {
    /// The report's view, held to the server's own bound as well.
    fn kept(self, limit: usize) -> Kept {
        let mut head = self.text;
        let mut tail = self.tail;
        let mut extra = ipython_mcp_text::truncate(&mut head, limit);
        extra += ipython_mcp_text::truncate_front(&mut tail, limit - head.chars().count());
        let omitted_chars = self.omitted_chars + extra;
        Kept {
            head,
            tail,
            omitted_chars,
            omitted_lines: self.omitted_lines,
            first_omitted_line: if omitted_chars > 0 {
                self.first_omitted_line.max(1)
            } else {
                0
            },
        }
    }
}

/// The kernel's `execute_reply`, reduced to what we use.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: ReplyStatus,
    pub execution_count: Option<u64>,
}

/// One execution's (or helper call's) messages, folded as they arrive into bounded parts.
#[derive(Clone)]
pub struct Collector {
    limits: OutputLimits,
    /// How a marker words the paging call (its length counts against the bound).
    pager: Option<PagerCall>,
    json: JsonLimits,
    helper_comm: Option<String>,
    stdout: TerminalSink,
    stderr: TerminalSink,
    displays: Vec<(Option<String>, DisplayItem)>,
    display_omitted: u64,
    displays_truncated: bool,
    pending_clear: bool,
    result: Option<Map<String, Value>>,
    /// The result's `ipython_mcp` notes (its other metadata is not returned).
    result_notes: Option<Value>,
    result_truncated: bool,
    /// Decoded bytes of oversized images this execution may still keep for downscaling.
    fit_room: usize,
    error: Option<(String, String, Vec<String>)>,
    report: Option<HelperReport>,
    pub(crate) reply: Option<Reply>,
    pub idle: bool,
    /// For helper calls: the request id whose comm reply completes the operation, and the reply.
    helper_request: Option<String>,
    helper_reply: Option<Value>,
    /// The kernel has begun running the request (its SIGINT handler is armed).
    started: bool,
    /// The latest non-empty line of stream output, bounded, for progress notifications.
    latest_line: Option<String>,
}

/// The collected parts, bounded.
pub struct Collected {
    pub stdout: Kept,
    pub stderr: Kept,
    pub display_data: Vec<DisplayItem>,
    pub display_omitted: u64,
    pub result: Option<Map<String, Value>>,
    pub result_metadata: Map<String, Value>,
    pub error: Option<ErrorInfo>,
    pub truncated: Truncated,
    pub reply: Option<Reply>,
    pub helper_reply: Option<Value>,
    /// Display payloads left out of the reply (see `payload`).
    pub withheld: Vec<Withheld>,
    /// Bytes the kernel could not keep in the spool (its per-execution bound).
    pub spool_dropped: u64,
}

impl Collector {
    /// A collector bounding by `limits` (JSON payloads to `max_items` items), trusting the
    /// end-of-execution report only from the helper's comm `helper_comm`; a stream's marker
    /// leaves room for `pager`'s paging call.
    pub fn new(
        limits: OutputLimits,
        max_items: usize,
        helper_comm: Option<String>,
        pager: Option<PagerCall>,
    ) -> Self {
        Collector {
            limits,
            pager,
            json: JsonLimits {
                max_depth: limits.max_json_depth,
                max_items,
                max_chars: limits.max_text_chars,
            },
            helper_comm,
            stdout: TerminalSink::new(limits.max_text_chars, limits.text_head_chars()),
            stderr: TerminalSink::new(limits.max_text_chars, limits.text_head_chars()),
            displays: Vec::new(),
            display_omitted: 0,
            displays_truncated: false,
            pending_clear: false,
            result: None,
            result_notes: None,
            result_truncated: false,
            fit_room: MAX_FIT_PENDING_BYTES,
            error: None,
            report: None,
            reply: None,
            idle: false,
            helper_request: None,
            helper_reply: None,
            started: false,
            latest_line: None,
        }
    }

    /// The latest non-empty line printed so far (bounded), if any.
    pub fn latest_line(&self) -> Option<&str> {
        self.latest_line.as_deref()
    }

    /// True once the kernel has begun running the request: `execute_input` for an execute,
    /// `busy` for a helper call (comm messages have no execute_input).
    pub fn started(&self) -> bool {
        self.started
    }

    /// Makes the helper's comm reply to `request_id` (not an `execute_reply`) complete this
    /// operation.
    pub fn expect_helper_reply(&mut self, request_id: String) {
        self.helper_request = Some(request_id);
    }

    /// True once the operation's reply (execute_reply, or the helper's reply) has arrived.
    pub fn replied(&self) -> bool {
        match self.helper_request {
            Some(_) => self.helper_reply.is_some(),
            None => self.reply.is_some(),
        }
    }

    /// True once both the reply and the final `idle` have arrived (in either order).
    pub fn done(&self) -> bool {
        self.replied() && self.idle
    }

    /// Folds in one message routed to this execution (iopub or its reply).
    pub fn absorb(&mut self, routed: Routed) {
        let channel = routed.channel;
        match routed.message.content {
            JupyterMessageContent::ExecuteReply(reply) if channel == Channel::Shell => {
                self.absorb_reply(reply)
            }
            JupyterMessageContent::Status(status)
                if status.execution_state == ExecutionState::Idle =>
            {
                self.idle = true
            }
            JupyterMessageContent::Status(status)
                if status.execution_state == ExecutionState::Busy =>
            {
                self.started |= self.helper_request.is_some();
            }
            JupyterMessageContent::ExecuteInput(_) => self.started = true,
            JupyterMessageContent::StreamContent(stream) => self.absorb_stream(stream),
            JupyterMessageContent::DisplayData(display) => {
                self.apply_pending_clear();
                let display_id = display.transient.and_then(|transient| transient.display_id);
                self.push_display(display_id, media_map(&display.data), display.metadata);
            }
            JupyterMessageContent::UpdateDisplayData(update) => self.absorb_update(update),
            JupyterMessageContent::ExecuteResult(result) => self.absorb_result(result),
            JupyterMessageContent::ErrorOutput(error) => {
                self.apply_pending_clear();
                self.error = Some((error.ename, error.evalue, error.traceback));
            }
            JupyterMessageContent::ClearOutput(clear) => {
                if clear.wait {
                    self.pending_clear = true;
                } else {
                    self.clear();
                }
            }
            JupyterMessageContent::CommMsg(comm) => self.absorb_comm(comm),
            _ => {}
        }
    }

    /// Records the `execute_reply`, and the error it carries unless one was already recorded.
    fn absorb_reply(&mut self, reply: ExecuteReply) {
        if let Some(error) = &reply.error {
            if self.error.is_none() {
                self.error = Some((
                    error.ename.clone(),
                    error.evalue.clone(),
                    error.traceback.clone(),
                ));
            }
        }
        // IPython counts from 1; a kernel that omits the count (aborted requests)
        // deserializes as 0, which means "none".
        let count = reply.execution_count.0 as u64;
        self.reply = Some(Reply {
            status: reply.status,
            execution_count: (count > 0).then_some(count),
        });
    }

    /// Writes stream text into its sink, and remembers its latest non-empty line (bounded and
    /// without ANSI codes) for progress notifications.
    fn absorb_stream(&mut self, stream: StreamContent) {
        self.apply_pending_clear();
        if let Some(line) = stream
            .text
            .rsplit(['\n', '\r'])
            .map(str::trim)
            .find(|line| !line.is_empty())
        {
            let mut line = bound::strip_ansi(line);
            ipython_mcp_text::truncate(&mut line, LATEST_LINE_CHARS);
            self.latest_line = Some(line);
        }
        match stream.name {
            Stdio::Stdout => self.stdout.write(&stream.text),
            Stdio::Stderr => self.stderr.write(&stream.text),
        }
    }

    /// Replaces every output with the update's display id, as in Jupyter front ends; an
    /// update nobody shows changes nothing (not even a truncation flag).
    fn absorb_update(&mut self, update: UpdateDisplayData) {
        let Some(display_id) = update.transient.display_id else {
            return;
        };
        if self
            .displays
            .iter()
            .any(|(id, _)| id.as_deref() == Some(&display_id))
        {
            let item = self.bounded_item(media_map(&update.data), update.metadata);
            for slot in self
                .displays
                .iter_mut()
                .filter(|(id, _)| id.as_deref() == Some(&display_id))
            {
                slot.1 = item.clone();
            }
        }
    }

    /// Keeps the `execute_result`, bounded, and its `ipython_mcp` notes (the only metadata
    /// returned for it).
    fn absorb_result(&mut self, result: ExecuteResult) {
        self.apply_pending_clear();
        let mut data = media_map(&result.data);
        let mut metadata = result.metadata;
        self.result_truncated |= bound::bound_bundle(
            &mut data,
            &mut metadata,
            self.json,
            self.limits.max_image_bytes,
            &mut self.fit_room,
        );
        self.result = Some(data);
        self.result_notes = metadata.remove("ipython_mcp");
    }

    /// Takes from the helper's comm the reply that completes a helper call, or its
    /// end-of-execution report; comm messages from anyone else are ignored, since only the
    /// helper is trusted to speak for the execution.
    fn absorb_comm(&mut self, comm: CommMsg) {
        if Some(&comm.comm_id.0) != self.helper_comm.as_ref() {
            return;
        }
        if self.helper_request.is_some()
            && comm.data.get("id").and_then(Value::as_str) == self.helper_request.as_deref()
        {
            self.helper_reply = Some(Value::Object(comm.data));
        } else if comm.data.get("event").and_then(Value::as_str) == Some("execution_report") {
            match serde_json::from_value::<HelperReport>(Value::Object(comm.data)) {
                Ok(report) => self.report = Some(report),
                Err(error) => tracing::warn!(%error, "malformed helper report ignored"),
            }
        }
    }

    fn apply_pending_clear(&mut self) {
        if std::mem::take(&mut self.pending_clear) {
            self.clear();
        }
    }

    fn clear(&mut self) {
        self.pending_clear = false;
        self.stdout.clear();
        self.stderr.clear();
        self.displays.clear();
        self.display_omitted = 0;
        self.displays_truncated = false;
    }

    fn bounded_item(
        &mut self,
        mut data: Map<String, Value>,
        mut metadata: Map<String, Value>,
    ) -> DisplayItem {
        self.displays_truncated |= bound::bound_bundle(
            &mut data,
            &mut metadata,
            self.json,
            self.limits.max_image_bytes,
            &mut self.fit_room,
        );
        DisplayItem { data, metadata }
    }

    fn push_display(
        &mut self,
        display_id: Option<String>,
        data: Map<String, Value>,
        metadata: Map<String, Value>,
    ) {
        if self.displays.len() >= self.limits.max_display_items {
            self.display_omitted += 1;
            return;
        }
        let item = self.bounded_item(data, metadata);
        self.displays.push((display_id, item));
    }

    /// What has been collected so far, leaving the collector as it is, as a reply may show it
    /// (no image is downscaled before the end; see `payload`).
    pub fn snapshot(&self) -> Collected {
        let mut collected = self.clone().finish();
        let settled = payload::settle_live(&mut collected.display_data, self.budget());
        collected.truncated.display_data |= settled.displays_cut;
        collected.withheld = settled.withheld;
        collected
    }

    /// The bounds `payload::settle` applies to this execution's displays.
    pub fn budget(&self) -> payload::Budget {
        payload::Budget {
            max_image_bytes: self.limits.max_image_bytes,
            max_reply_bytes: self.limits.max_reply_bytes,
        }
    }

    /// The collected parts, bounded; images are still as they came (see [`Collected::settle`]).
    pub fn finish(self) -> Collected {
        let mut truncated = Truncated {
            display_data: self.displays_truncated,
            result: self.result_truncated,
            ..Default::default()
        };
        let spool_dropped = self.report.as_ref().map_or(0, |report| {
            report.spool.values().map(|count| count.dropped_bytes).sum()
        });
        let limit = self.limits.max_text_chars;
        let (stdout, stderr, kernel_display_omitted) = match self.report {
            // The helper saw every character; its view is already bounded by the same limits.
            Some(report) => (
                report.stdout.kept(limit),
                report.stderr.kept(limit),
                report.display_omitted,
            ),
            None => (self.stdout.kept(), self.stderr.kept(), 0),
        };
        // The marker counts against the bound too: what an agent reads fits it.
        let (stdout, stderr) = (
            stdout.within(limit, self.pager),
            stderr.within(limit, self.pager),
        );
        truncated.stdout = stdout.omitted_chars > 0;
        truncated.stderr = stderr.omitted_chars > 0;
        let cut_at =
            |kept: &Kept| (kept.omitted_chars > 0).then(|| kept.head.chars().count() as u64);
        truncated.stdout_cut_at = cut_at(&stdout);
        truncated.stderr_cut_at = cut_at(&stderr);
        let display_omitted = self.display_omitted + kernel_display_omitted;
        let error = self.error.map(|(ename, evalue, traceback)| {
            let (traceback, cut) =
                bound::bound_traceback(&traceback, self.limits.max_traceback_chars);
            truncated.traceback = cut;
            let mut evalue = bound::strip_ansi(&evalue);
            ipython_mcp_text::truncate(&mut evalue, self.limits.max_text_chars);
            let mut message = format!("{ename}: {evalue}");
            ipython_mcp_text::truncate(&mut message, self.limits.max_text_chars);
            ErrorInfo {
                ename: Some(ename),
                evalue: Some(evalue),
                traceback: Some(traceback),
                ..ErrorInfo::new(Code::ExecutionError, message)
            }
        });
        Collected {
            stdout,
            stderr,
            display_data: self.displays.into_iter().map(|(_, item)| item).collect(),
            display_omitted,
            result: self.result,
            result_metadata: match self.result_notes {
                Some(notes) => Map::from_iter([("ipython_mcp".to_owned(), notes)]),
                None => Map::new(),
            },
            withheld: Vec::new(),
            error,
            truncated,
            reply: self.reply,
            helper_reply: self.helper_reply,
            spool_dropped,
        }
    }
}

impl Collected {
    /// Downscales oversized images and withholds what exceeds the reply budget (blocking: see
    /// `payload::settle`).
    pub fn settle(&mut self, budget: payload::Budget, spool: Option<&mut payload::SpoolFiles>) {
        let settled = payload::settle(
            &mut self.display_data,
            self.result.as_mut(),
            &mut self.result_metadata,
            budget,
            spool,
        );
        self.truncated.display_data |= settled.displays_cut;
        self.truncated.result |= settled.result_cut;
        self.withheld = settled.withheld;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ipython_mcp_jupyter::protocol::{
        ClearOutput, CommId, CommMsg, DisplayData, ErrorOutput, ExecuteReply, ExecuteResult,
        ExecutionCount, JupyterMessage, Media, ReplyError, Status, StreamContent, Transient,
        UpdateDisplayData,
    };
    use serde_json::json;

    const HELPER: &str = "helper-comm";

    /// Small limits so every bound is reachable with short inputs.
    const LIMITS: OutputLimits = OutputLimits {
        max_text_chars: 10,
        text_head_percent: 100,
        max_traceback_chars: 100,
        max_repr_chars: 100,
        max_results: 100,
        max_display_items: 2,
        max_json_depth: 3,
        max_image_bytes: 100,
        max_reply_bytes: 10_000,
    };

    fn routed(channel: Channel, content: impl Into<JupyterMessageContent>) -> Routed {
        Routed {
            channel,
            message: JupyterMessage::new(content, None),
        }
    }

    fn iopub(content: impl Into<JupyterMessageContent>) -> Routed {
        routed(Channel::IoPub, content)
    }

    pub(crate) fn stream(name: Stdio, text: &str) -> Routed {
        iopub(StreamContent {
            name,
            text: text.to_owned(),
        })
    }

    fn out(text: &str) -> Routed {
        stream(Stdio::Stdout, text)
    }

    fn err(text: &str) -> Routed {
        stream(Stdio::Stderr, text)
    }

    fn media(bundle: Value) -> Media {
        serde_json::from_value(bundle).expect("a valid mime bundle")
    }

    fn display(bundle: Value, display_id: Option<&str>) -> Routed {
        let transient = display_id.map(|id| Transient {
            display_id: Some(id.to_owned()),
        });
        iopub(DisplayData {
            data: media(bundle),
            metadata: Map::new(),
            transient,
        })
    }

    fn text(plain: &str) -> Routed {
        display(json!({"text/plain": plain}), None)
    }

    fn clear(wait: bool) -> Routed {
        iopub(ClearOutput { wait })
    }

    fn comm(comm_id: &str, data: Value) -> Routed {
        let Value::Object(data) = data else {
            panic!("comm data must be an object")
        };
        iopub(CommMsg {
            comm_id: CommId(comm_id.to_owned()),
            data,
        })
    }

    fn report(stdout: (&str, u64), stderr: (&str, u64), display_omitted: u64) -> Value {
        json!({
            "event": "execution_report",
            "stdout": {"text": stdout.0, "omitted_chars": stdout.1},
            "stderr": {"text": stderr.0, "omitted_chars": stderr.1},
            "display_count": 0,
            "display_omitted": display_omitted,
            "raw_chars": {"stdout": 0, "stderr": 0},
        })
    }

    /// The display item a `text/plain` display becomes.
    fn item(plain: &str) -> Value {
        json!({"data": {"text/plain": plain}, "metadata": {}})
    }

    fn collect(messages: Vec<Routed>) -> Collected {
        let mut collector = Collector::new(LIMITS, 4, Some(HELPER.to_owned()), None);
        for message in messages {
            collector.absorb(message);
        }
        collector.finish()
    }

    fn summary(collected: Collected) -> Value {
        json!({
            "stdout": collected.stdout.head,
            "stderr": collected.stderr.head,
            "stdout_tail": collected.stdout.tail,
            "stdout_omitted_chars": collected.stdout.omitted_chars,
            "stderr_omitted_chars": collected.stderr.omitted_chars,
            "display_data": collected.display_data,
            "display_omitted": collected.display_omitted,
            "result": collected.result,
            "error": collected.error,
            "truncated": collected.truncated,
            "reply": collected.reply.map(|reply| json!({"status": reply.status, "execution_count": reply.execution_count})),
        })
    }

    /// Runs `messages` through a collector and compares the fields named in `expect` (only
    /// those, so each case states what it is about).
    fn check(messages: Vec<Routed>, expect: Value) {
        let actual = summary(collect(messages));
        for (field, want) in expect.as_object().expect("expect is an object") {
            let got = actual
                .get(field)
                .unwrap_or_else(|| panic!("unknown field {field}"));
            assert_eq!(got, want, "field {field} of {actual:#}");
        }
    }

    /// The flags with `fields` set; a cut stream is named with where it was cut
    /// (`"stdout@10"`).
    fn truncated(fields: &[&str]) -> Value {
        let mut flags = json!({"stdout": false, "stderr": false, "display_data": false, "result": false, "traceback": false});
        for field in fields {
            let (field, cut_at) = match field.split_once('@') {
                Some((stream, at)) => (stream, Some(at.parse::<u64>().unwrap())),
                None => (*field, None),
            };
            flags[field] = Value::Bool(true);
            if let Some(at) = cut_at {
                flags[format!("{field}_cut_at")] = at.into();
            }
        }
        flags
    }

    #[test]
    fn done_needs_the_shell_reply_and_idle_in_either_order() {
        let check_done = |messages: Vec<Routed>, expect: &[bool]| {
            let mut collector = Collector::new(LIMITS, 4, None, None);
            let states: Vec<bool> = messages
                .into_iter()
                .map(|message| {
                    collector.absorb(message);
                    collector.done()
                })
                .collect();
            assert_eq!(states, expect);
        };
        let reply = || {
            routed(
                Channel::Shell,
                ExecuteReply {
                    execution_count: ExecutionCount::new(7),
                    ..Default::default()
                },
            )
        };
        check_done(
            vec![
                iopub(Status::busy()),
                out("x"),
                reply(),
                iopub(Status::idle()),
            ],
            &[false, false, false, true],
        );
        check_done(vec![iopub(Status::idle()), reply()], &[false, true]);
        // An execute_reply that did not come on shell is not the reply.
        check_done(
            vec![iopub(ExecuteReply::default()), iopub(Status::idle())],
            &[false, false],
        );
        check(
            vec![reply(), iopub(Status::idle())],
            json!({"reply": {"status": "ok", "execution_count": 7}, "error": null}),
        );
    }

    #[test]
    fn streams_are_bounded_with_exact_omitted_counts() {
        check(
            vec![
                out("hello "),
                err("50%\r"),
                out("world, again\n"),
                err("100%\n"),
            ],
            json!({
                "stdout": "hello worl", "stdout_omitted_chars": 9,
                "stderr": "100%\n", "stderr_omitted_chars": 0,
                "truncated": truncated(&["stdout@10"]),
            }),
        );
        check(
            vec![err("0123456789ab\ncd")],
            json!({"stderr": "0123456789", "stderr_omitted_chars": 5, "truncated": truncated(&["stderr@10"])}),
        );
        check(
            vec![],
            json!({"stdout": "", "stderr": "", "display_data": [], "result": null, "error": null, "reply": null, "truncated": truncated(&[])}),
        );
    }

    #[test]
    fn long_streams_keep_a_head_and_a_tail() {
        let limits = OutputLimits {
            max_text_chars: 20,
            text_head_percent: 35,
            ..LIMITS
        };
        let mut collector = Collector::new(limits, 4, None, None);
        for line in 0..1000 {
            collector.absorb(out(&format!("step {line}\n")));
        }
        let collected = collector.finish();
        let stdout = &collected.stdout;
        assert_eq!(
            (stdout.head.as_str(), stdout.tail.as_str()),
            ("step 0\n", "step 999\n")
        );
        assert_eq!(stdout.omitted_lines, 998);
        assert!(collected.truncated.stdout);
        // The helper's report carries the same view; the server holds it to its own bound.
        let report = json!({
            "event": "execution_report",
            "stdout": {"text": "0123456789", "tail": "abcdefghijklmnopq", "omitted_chars": 50, "omitted_lines": 4, "first_omitted_line": 2},
            "stderr": {"text": "", "omitted_chars": 0},
            "display_omitted": 0,
        });
        let mut collector = Collector::new(limits, 4, Some(HELPER.to_owned()), None);
        collector.absorb(comm(HELPER, report));
        let collected = collector.finish();
        assert_eq!(
            collected.stdout,
            Kept {
                head: "0123456789".into(),
                tail: "hijklmnopq".into(),
                omitted_chars: 57,
                omitted_lines: 4,
                first_omitted_line: 2,
            }
        );
        assert_eq!(collected.stderr, Kept::default());
    }

    #[test]
    fn clear_output_is_immediate_unless_it_waits() {
        // Immediate: streams, displays and the display count go at once.
        check(
            vec![
                out("old\n"),
                err("e"),
                text("a"),
                text("b"),
                text("c"),
                clear(false),
                out("new"),
            ],
            json!({"stdout": "new", "stderr": "", "display_data": [], "display_omitted": 0}),
        );
        check(
            vec![text("a"), clear(false), text("b")],
            json!({"display_data": [item("b")]}),
        );
        // wait=True with nothing after it: the old output stays.
        check(
            vec![out("old"), text("a"), clear(true)],
            json!({"stdout": "old", "display_data": [item("a")]}),
        );
        // wait=True is applied at the next output, a stream or a display.
        check(
            vec![out("old"), err("e"), text("a"), clear(true), out("new")],
            json!({"stdout": "new", "stderr": "", "display_data": []}),
        );
        check(
            vec![
                out("old"),
                text("a"),
                text("b"),
                text("c"),
                clear(true),
                text("d"),
            ],
            json!({"stdout": "", "display_data": [item("d")], "display_omitted": 0}),
        );
        // ...and only once.
        check(
            vec![out("old"), clear(true), out("a"), out("b")],
            json!({"stdout": "ab"}),
        );
        // A clear also forgets an earlier truncation of displays.
        check(
            vec![
                display(json!({"text/plain": "long long text"}), None),
                clear(false),
                text("a"),
            ],
            json!({"display_data": [item("a")], "truncated": truncated(&[])}),
        );
    }

    #[test]
    fn displays_are_capped_and_counted() {
        check(
            vec![text("a"), text("b"), text("c"), text("d")],
            json!({"display_data": [item("a"), item("b")], "display_omitted": 2, "truncated": truncated(&[])}),
        );
        check(
            vec![display(json!({"text/plain": "0123456789abc"}), None)],
            json!({"display_data": [item("0123456789")], "truncated": truncated(&["display_data"])}),
        );
    }

    #[test]
    fn update_display_data_replaces_the_item_with_that_display_id() {
        let update = |plain: &str, display_id: &str| {
            iopub(UpdateDisplayData::new(
                media(json!({"text/plain": plain})),
                display_id,
            ))
        };
        check(
            vec![
                display(json!({"text/plain": "a"}), Some("d1")),
                display(json!({"text/plain": "b"}), Some("d2")),
                update("a2", "d1"),
                update("a3", "d1"),
                update("z", "unknown"),
            ],
            json!({"display_data": [item("a3"), item("b")], "display_omitted": 0}),
        );
        // Every output showing that display_id is updated.
        check(
            vec![
                display(json!({"text/plain": "a"}), Some("d1")),
                display(json!({"text/plain": "a"}), Some("d1")),
                update("a2", "d1"),
            ],
            json!({"display_data": [item("a2"), item("a2")]}),
        );
        // An update is not a new output: it neither applies a pending clear nor counts.
        check(
            vec![
                display(json!({"text/plain": "a"}), Some("d1")),
                clear(true),
                update("a2", "d1"),
            ],
            json!({"display_data": [item("a2")]}),
        );
    }

    #[test]
    fn a_large_image_is_removed_with_a_note() {
        let small = "A".repeat(100); // 75 bytes decoded
        check(
            vec![display(
                json!({"image/gif": "A".repeat(400), "text/plain": "<Figure>"}),
                None,
            )],
            json!({
                "display_data": [{
                    "data": {"text/plain": "<Figure>"},
                    "metadata": {"ipython_mcp": {"omitted_images": {"image/gif": 300}}},
                }],
                "truncated": truncated(&["display_data"]),
            }),
        );
        check(
            vec![display(
                json!({"image/png": small, "text/plain": "<Figure>"}),
                None,
            )],
            json!({"display_data": [{"data": {"image/png": small, "text/plain": "<Figure>"}, "metadata": {}}], "truncated": truncated(&[])}),
        );
    }

    #[test]
    fn execute_result_is_bounded_and_flagged() {
        let result =
            |bundle: Value| iopub(ExecuteResult::new(ExecutionCount::new(3), media(bundle)));
        check(
            vec![result(
                json!({"text/plain": "x".repeat(25), "application/json": {"a": {"b": {"c": {"d": 1}}}}}),
            )],
            json!({
                "result": {"text/plain": "xxxxxxxxxx", "application/json": {"a": {"b": {"c": "…"}}}},
                "truncated": truncated(&["result"]),
            }),
        );
        check(
            vec![result(json!({"text/plain": "42"}))],
            json!({"result": {"text/plain": "42"}, "truncated": truncated(&[])}),
        );
        check(
            vec![result(
                json!({"image/gif": "A".repeat(400), "text/plain": "<Figure>"}),
            )],
            json!({"result": {"text/plain": "<Figure>"}, "truncated": truncated(&["result"])}),
        );
    }

    #[test]
    fn an_oversized_png_is_downscaled_at_the_end_and_its_original_spooled() {
        use base64::Engine as _;
        let engine = base64::engine::general_purpose::STANDARD;
        let raw = crate::raster::tests::noisy_png(40, 20);
        let limits = OutputLimits {
            max_image_bytes: raw.len() / 3,
            ..LIMITS
        };
        let mut collector = Collector::new(limits, 4, Some(HELPER.to_owned()), None);
        collector.absorb(display(
            json!({"image/png": engine.encode(&raw), "text/plain": "<Figure>"}),
            None,
        ));
        collector.absorb(display(json!({"image/png": "A".repeat(4000)}), None));
        // A reader of the running execution sees neither (nothing is decoded before the end).
        let live = collector.snapshot();
        assert!(live
            .display_data
            .iter()
            .all(|item| !item.data.contains_key("image/png")));
        let dir = tempfile::tempdir().expect("temp dir");
        let mut spool = payload::SpoolFiles::new(dir.path(), "msg");
        let budget = collector.budget();
        let mut collected = collector.finish();
        collected.settle(budget, Some(&mut spool));
        let shown = &collected.display_data[0];
        let png = engine
            .decode(shown.data["image/png"].as_str().expect("a PNG"))
            .expect("base64");
        assert!(png.len() <= raw.len() / 3);
        let note = &shown.metadata["ipython_mcp"]["downscaled_images"]["image/png"];
        assert_eq!(note["original_size"], json!([40, 20]));
        assert_eq!(note["original_bytes"], raw.len());
        let original = note["original_path"].as_str().expect("original path");
        assert_eq!(std::fs::read(original).expect("the original"), raw);
        // The undecodable one is omitted with the reason, never passed on.
        let broken = &collected.display_data[1];
        assert!(broken.data.is_empty());
        let ours = &broken.metadata["ipython_mcp"];
        assert_eq!(ours["omitted_images"]["image/png"], 3000);
        assert!(
            ours["image_errors"]["image/png"]
                .as_str()
                .is_some_and(|error| error.contains("not a decodable image/png")),
            "{ours}"
        );
        assert!(collected.truncated.display_data);
    }

    #[test]
    fn displays_past_the_reply_budget_are_withheld_to_the_spool_and_listed() {
        let payload = "A".repeat(40); // 30 decoded bytes each: under the image bound
        let limits = OutputLimits {
            max_display_items: 10,
            max_text_chars: 10_000,
            max_reply_bytes: 4 * 1024,
            ..LIMITS
        };
        let mut collector = Collector::new(limits, 4, Some(HELPER.to_owned()), None);
        let html = "<td>x</td>".repeat(300); // 3000 bytes: one fits, the second does not
        for _ in 0..3 {
            collector.absorb(display(
                json!({"text/html": html, "text/plain": "<table>", "image/png": payload}),
                None,
            ));
        }
        let live = collector.snapshot();
        assert_eq!(live.withheld.len(), 2, "{:?}", live.withheld);
        assert!(live.withheld.iter().all(|item| item.path.is_none()));
        let dir = tempfile::tempdir().expect("temp dir");
        let mut spool = payload::SpoolFiles::new(dir.path(), "msg");
        let budget = collector.budget();
        let mut collected = collector.finish();
        collected.settle(budget, Some(&mut spool));
        assert_eq!(collected.display_data[0].data["text/html"], html.as_str());
        let withheld: Vec<_> = collected
            .withheld
            .iter()
            .map(|item| (item.display, item.mime.as_str(), item.bytes))
            .collect();
        assert_eq!(
            withheld,
            [(Some(1), "text/html", 3000), (Some(2), "text/html", 3000)]
        );
        for (index, item) in collected.withheld.iter().enumerate() {
            let path = item.path.as_deref().expect("spooled");
            assert_eq!(std::fs::read_to_string(path).expect("the payload"), html);
            // What is small stays in the reply.
            assert_eq!(
                collected.display_data[index + 1].data["text/plain"],
                "<table>"
            );
        }
        assert!(collected.truncated.display_data);
    }

    #[test]
    fn error_is_stripped_of_ansi_and_bounded() {
        let error = |ename: &str, evalue: &str, traceback: Vec<String>| {
            iopub(ErrorOutput {
                ename: ename.to_owned(),
                evalue: evalue.to_owned(),
                traceback,
            })
        };
        check(
            vec![error(
                "E",
                "\u{1b}[31mbad\u{1b}[0m",
                vec!["\u{1b}[0;31mTraceback\u{1b}[0m".into(), "E: bad".into()],
            )],
            json!({
                "error": {"code": "execution_error", "message": "E: bad", "ename": "E", "evalue": "bad", "traceback": "Traceback\nE: bad"},
                "truncated": truncated(&[]),
            }),
        );
        // The evalue and the message are cut to max_text_chars.
        check(
            vec![error("ValueError", &"x".repeat(30), vec![])],
            json!({"error": {"code": "execution_error", "message": "ValueError", "ename": "ValueError", "evalue": "xxxxxxxxxx", "traceback": ""}}),
        );

        let frames: Vec<String> = (0..50)
            .map(|index| format!("\u{1b}[1mframe {index:02}\u{1b}[0m"))
            .collect();
        let collected = collect(vec![error("E", "bad", frames)]);
        assert!(collected.truncated.traceback);
        let traceback = collected
            .error
            .and_then(|error| error.traceback)
            .expect("a traceback");
        assert!(
            traceback.chars().count() <= LIMITS.max_traceback_chars,
            "{traceback}"
        );
        assert!(
            traceback.starts_with("frame 00") && traceback.ends_with("frame 49"),
            "{traceback}"
        );
        assert!(!traceback.contains('\u{1b}'));
    }

    #[test]
    fn the_reply_error_is_used_only_without_an_iopub_error() {
        let reply = |ename: &str| {
            let error = ReplyError {
                ename: ename.to_owned(),
                evalue: "boom".to_owned(),
                traceback: vec!["tb".to_owned()],
            };
            routed(
                Channel::Shell,
                ExecuteReply {
                    status: ReplyStatus::Error,
                    error: Some(Box::new(error)),
                    ..Default::default()
                },
            )
        };
        let iopub_error = iopub(ErrorOutput {
            ename: "KeyError".to_owned(),
            evalue: "k".to_owned(),
            traceback: vec![],
        });
        check(
            vec![reply("RuntimeError")],
            json!({"error": {"code": "execution_error", "message": "RuntimeErr", "ename": "RuntimeError", "evalue": "boom", "traceback": "tb"}, "reply": {"status": "error", "execution_count": null}}),
        );
        check(
            vec![iopub_error, reply("RuntimeError")],
            json!({"error": {"code": "execution_error", "message": "KeyError: ", "ename": "KeyError", "evalue": "k", "traceback": ""}}),
        );
    }

    #[test]
    fn the_helper_report_overrides_stream_text_and_counts() {
        let before = || {
            vec![
                out("kernel out"),
                err("kernel err"),
                text("a"),
                text("b"),
                text("c"),
            ]
        };
        let with = |extra: Routed| before().into_iter().chain([extra]).collect::<Vec<_>>();
        check(
            with(comm(HELPER, report(("0123456789abc", 90), ("", 0), 5))),
            json!({
                "stdout": "0123456789", "stdout_omitted_chars": 93,
                "stderr": "", "stderr_omitted_chars": 0,
                "display_data": [item("a"), item("b")], "display_omitted": 6,
                "truncated": truncated(&["stdout@10"]),
            }),
        );
        // Not the helper's report: another comm, another event, a malformed report.
        let kernel_view = json!({"stdout": "kernel out", "stderr": "kernel err", "stdout_omitted_chars": 0, "display_omitted": 1});
        check(
            with(comm("other-comm", report(("report", 0), ("", 0), 5))),
            kernel_view.clone(),
        );
        check(
            with(comm(HELPER, json!({"event": "ready", "version": "1"}))),
            kernel_view.clone(),
        );
        check(
            with(comm(
                HELPER,
                json!({"event": "execution_report", "stdout": {"text": "report"}}),
            )),
            kernel_view,
        );
        // Without a helper comm no report is trusted.
        let mut collector = Collector::new(LIMITS, 4, None, None);
        collector.absorb(out("kernel"));
        collector.absorb(comm(HELPER, report(("report", 0), ("", 0), 5)));
        let collected = collector.finish();
        assert_eq!(
            (collected.stdout.head.as_str(), collected.display_omitted),
            ("kernel", 0)
        );
    }
}
