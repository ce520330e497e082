//! Folds the messages of one execution into a bounded [`ExecutionOutput`].
//!
//! Output is bounded as it arrives: streams go into [`TerminalSink`]s, display items are capped
//! by count and normalized, so what the server holds per execution does not grow with what the
//! kernel prints. When the bundled helper is present its end-of-execution report is the
//! authority for stream text and omitted counts (it saw every character, including the ones it
//! never sent).

use ipython_mcp_config::OutputLimits;
use ipython_mcp_jupyter::protocol::{ExecutionState, JupyterMessageContent, ReplyStatus, Stdio};
use ipython_mcp_jupyter::{Channel, Routed};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::bound::{self, JsonLimits};
use crate::output::{DisplayItem, ErrorInfo, Truncated};
use crate::sink::TerminalSink;

/// The helper's end-of-execution report (see `python/ipython_mcp_helper.py`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct HelperReport {
    pub stdout: StreamReport,
    pub stderr: StreamReport,
    #[serde(default)]
    pub display_omitted: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct StreamReport {
    pub text: String,
    pub omitted_chars: u64,
}

/// The kernel's `execute_reply`, reduced to what we use.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub status: ReplyStatus,
    pub execution_count: Option<u64>,
}

pub(crate) struct Collector {
    limits: OutputLimits,
    json: JsonLimits,
    helper_comm: Option<String>,
    stdout: TerminalSink,
    stderr: TerminalSink,
    displays: Vec<(Option<String>, DisplayItem)>,
    display_omitted: u64,
    displays_truncated: bool,
    pending_clear: bool,
    result: Option<Map<String, Value>>,
    result_truncated: bool,
    error: Option<(String, String, Vec<String>)>,
    report: Option<HelperReport>,
    pub(crate) reply: Option<Reply>,
    pub(crate) idle: bool,
}

/// The collected parts, bounded.
pub(crate) struct Collected {
    pub stdout: String,
    pub stderr: String,
    pub stdout_omitted_chars: u64,
    pub stderr_omitted_chars: u64,
    pub display_data: Vec<DisplayItem>,
    pub display_omitted: u64,
    pub result: Option<Map<String, Value>>,
    pub error: Option<ErrorInfo>,
    pub truncated: Truncated,
    pub reply: Option<Reply>,
}

impl Collector {
    pub(crate) fn new(limits: OutputLimits, max_items: usize, helper_comm: Option<String>) -> Self {
        Collector {
            limits,
            json: JsonLimits { max_depth: limits.max_json_depth, max_items, max_chars: limits.max_text_chars },
            helper_comm,
            stdout: TerminalSink::new(limits.max_text_chars),
            stderr: TerminalSink::new(limits.max_text_chars),
            displays: Vec::new(),
            display_omitted: 0,
            displays_truncated: false,
            pending_clear: false,
            result: None,
            result_truncated: false,
            error: None,
            report: None,
            reply: None,
            idle: false,
        }
    }

    /// True once both the reply and the final `idle` have arrived (in either order).
    pub(crate) fn done(&self) -> bool {
        self.reply.is_some() && self.idle
    }

    pub(crate) fn absorb(&mut self, routed: Routed) {
        let channel = routed.channel;
        match routed.message.content {
            JupyterMessageContent::ExecuteReply(reply) if channel == Channel::Shell => {
                if let Some(error) = &reply.error {
                    if self.error.is_none() {
                        self.error = Some((error.ename.clone(), error.evalue.clone(), error.traceback.clone()));
                    }
                }
                self.reply = Some(Reply { status: reply.status, execution_count: Some(reply.execution_count.0 as u64) });
            }
            JupyterMessageContent::Status(status) if status.execution_state == ExecutionState::Idle => self.idle = true,
            JupyterMessageContent::StreamContent(stream) => {
                self.apply_pending_clear();
                match stream.name {
                    Stdio::Stdout => self.stdout.write(&stream.text),
                    Stdio::Stderr => self.stderr.write(&stream.text),
                }
            }
            JupyterMessageContent::DisplayData(display) => {
                self.apply_pending_clear();
                let display_id = display.transient.and_then(|transient| transient.display_id);
                self.push_display(display_id, media_map(&display.data), display.metadata);
            }
            JupyterMessageContent::UpdateDisplayData(update) => {
                if let Some(display_id) = update.transient.display_id {
                    let data = media_map(&update.data);
                    let item = self.bounded_item(data, update.metadata);
                    if let Some(slot) = self.displays.iter_mut().find(|(id, _)| id.as_deref() == Some(&display_id)) {
                        slot.1 = item;
                    }
                }
            }
            JupyterMessageContent::ExecuteResult(result) => {
                let mut data = media_map(&result.data);
                let mut metadata = result.metadata;
                self.result_truncated |= bound::bound_bundle(&mut data, &mut metadata, self.json, self.limits.max_image_bytes);
                self.result = Some(data);
            }
            JupyterMessageContent::ErrorOutput(error) => {
                self.error = Some((error.ename, error.evalue, error.traceback));
            }
            JupyterMessageContent::ClearOutput(clear) => {
                if clear.wait {
                    self.pending_clear = true;
                } else {
                    self.clear();
                }
            }
            JupyterMessageContent::CommMsg(comm)
                if Some(&comm.comm_id.0) == self.helper_comm.as_ref()
                    && comm.data.get("event").and_then(Value::as_str) == Some("execution_report") =>
            {
                match serde_json::from_value::<HelperReport>(Value::Object(comm.data)) {
                    Ok(report) => self.report = Some(report),
                    Err(error) => tracing::warn!(%error, "malformed helper report ignored"),
                }
            }
            _ => {}
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

    fn bounded_item(&mut self, mut data: Map<String, Value>, mut metadata: Map<String, Value>) -> DisplayItem {
        self.displays_truncated |= bound::bound_bundle(&mut data, &mut metadata, self.json, self.limits.max_image_bytes);
        DisplayItem { data, metadata }
    }

    fn push_display(&mut self, display_id: Option<String>, data: Map<String, Value>, metadata: Map<String, Value>) {
        if self.displays.len() >= self.limits.max_display_items {
            self.display_omitted += 1;
            return;
        }
        let item = self.bounded_item(data, metadata);
        self.displays.push((display_id, item));
    }

    pub(crate) fn finish(self) -> Collected {
        let mut truncated = Truncated { display_data: self.displays_truncated, result: self.result_truncated, ..Default::default() };
        let (stdout, stdout_omitted_chars, stderr, stderr_omitted_chars, kernel_display_omitted) = match self.report {
            // The helper saw every character; its text is already bounded by the same limit.
            Some(report) => {
                let mut stdout = report.stdout.text;
                let mut stderr = report.stderr.text;
                let stdout_extra = cut_count(&mut stdout, self.limits.max_text_chars);
                let stderr_extra = cut_count(&mut stderr, self.limits.max_text_chars);
                (
                    stdout,
                    report.stdout.omitted_chars + stdout_extra,
                    stderr,
                    report.stderr.omitted_chars + stderr_extra,
                    report.display_omitted,
                )
            }
            None => (self.stdout.text(), self.stdout.omitted(), self.stderr.text(), self.stderr.omitted(), 0),
        };
        truncated.stdout = stdout_omitted_chars > 0;
        truncated.stderr = stderr_omitted_chars > 0;
        let display_omitted = self.display_omitted + kernel_display_omitted;
        let error = self.error.map(|(ename, evalue, traceback)| {
            let (traceback, cut) = bound::bound_traceback(&traceback, self.limits.max_traceback_chars);
            truncated.traceback = cut;
            let mut evalue = bound::strip_ansi(&evalue);
            bound::truncate_chars(&mut evalue, self.limits.max_text_chars);
            let mut message = format!("{ename}: {evalue}");
            bound::truncate_chars(&mut message, self.limits.max_text_chars);
            ErrorInfo {
                code: "execution_error".to_owned(),
                message,
                ename: Some(ename),
                evalue: Some(evalue),
                traceback: Some(traceback),
                hint: None,
            }
        });
        Collected {
            stdout,
            stderr,
            stdout_omitted_chars,
            stderr_omitted_chars,
            display_data: self.displays.into_iter().map(|(_, item)| item).collect(),
            display_omitted,
            result: self.result,
            error,
            truncated,
            reply: self.reply,
        }
    }
}

/// Cuts to `max` characters and returns how many were cut.
fn cut_count(text: &mut String, max: usize) -> u64 {
    let before = text.chars().count();
    if before <= max {
        return 0;
    }
    bound::truncate_chars(text, max);
    (before - max) as u64
}

fn media_map(media: &ipython_mcp_jupyter::protocol::Media) -> Map<String, Value> {
    match serde_json::to_value(media) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}
