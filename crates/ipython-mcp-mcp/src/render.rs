//! Turning session results into MCP tool results.
//!
//! `structuredContent` carries the full bounded result; image payloads in it are replaced by a
//! short reference because the image itself travels once, as MCP image content. The text block
//! is what text-only clients show the model: the outputs themselves, not a JSON dump.

use base64::Engine as _;
use ipython_mcp_config::StructuredOutput;
use ipython_mcp_output::{
    base64_decoded_len, ErrorInfo, ExecutionId, ExecutionOutput, ExecutionStatus, RuntimeInfo,
    BINARY_IMAGE_TYPES, SVG_TYPE,
};
use rmcp::model::{CallToolResult, ContentBlock as Content, NumberOrString, RequestId};
use serde_json::Value;

use crate::results::{InterruptResult, StatusResult};
use crate::surface::ToolSpec;

pub(crate) fn request_id(id: &RequestId) -> String {
    match id {
        NumberOrString::Number(number) => number.to_string(),
        NumberOrString::String(text) => shorten(text, 64),
    }
}

use ipython_mcp_text::shorten;

/// An `execute` that was refused before reaching a session.
pub(crate) fn rejected_execute(request_id: String, error: ErrorInfo) -> CallToolResult {
    execution(&ExecutionOutput::not_run(
        ExecutionId::unassigned(),
        RuntimeInfo::unadmitted(request_id),
        error,
    ))
}

pub(crate) fn execution(output: &ExecutionOutput) -> CallToolResult {
    execution_with(output, serde_json::Map::new(), String::new())
}

/// An execution's result with extra top-level fields (and text after the output's own).
pub(crate) fn execution_with(
    output: &ExecutionOutput,
    extra: serde_json::Map<String, Value>,
    extra_text: String,
) -> CallToolResult {
    let mut structured = serde_json::to_value(output).unwrap_or(Value::Null);
    if let Some(object) = structured.as_object_mut() {
        object.extend(extra);
    }
    let mut images = Vec::new();
    if let Some(items) = structured
        .get_mut("display_data")
        .and_then(Value::as_array_mut)
    {
        for item in items {
            if let Some(data) = item.get_mut("data") {
                extract_images(data, &mut images);
            }
        }
    }
    if let Some(result) = structured.get_mut("result") {
        extract_images(result, &mut images);
    }
    let mut content = vec![Content::text(execution_text(output) + &extra_text)];
    content.extend(
        images
            .into_iter()
            .map(|(data, mime)| Content::image(data, mime)),
    );
    // The result names its execution for the output view (see apps.rs).
    crate::apps::linked(finish(structured, content, output.ok), output)
}

pub(crate) fn status(result: &StatusResult) -> CallToolResult {
    let structured = serde_json::to_value(result).unwrap_or(Value::Null);
    finish(
        structured,
        vec![Content::text(status_text(result))],
        result.ok,
    )
}

fn status_text(result: &StatusResult) -> String {
    let status = &result.status;
    let mut text = format!(
        "kernel {:?}: {}, epoch {}",
        status.kernel_id,
        wire_name(&status.state),
        status.epoch
    );
    if let Some(kernel) = &status.kernel {
        match (&kernel.remote, kernel.pid) {
            (Some(remote), _) => text.push_str(&format!(
                "; remote kernel {} on {}{}",
                remote.kernel_id,
                remote.server,
                if remote.attached { " (attached)" } else { "" }
            )),
            (None, Some(pid)) => text.push_str(&format!("; pid {pid}")),
            (None, None) => {}
        }
        text.push_str(&format!(
            ", Python {}, ipykernel {}, cwd {}",
            kernel.python_version, kernel.ipykernel_version, kernel.working_dir
        ));
    }
    if status.operation_active || status.queue_depth > 0 {
        text.push_str(&format!(
            "; running: {}, queued: {}",
            status.operation_active, status.queue_depth
        ));
    }
    if let Some(environment) = &status.environment {
        if environment.phase != "ready" {
            text.push_str(&format!(
                "; environment {} ({:.0}s)",
                environment.phase, environment.elapsed_seconds
            ));
        }
    }
    if let Some(error) = &status.error {
        text.push('\n');
        text.push_str(&error_lines(error.code.as_str(), &error.message, None));
    }
    text
}

/// A refusal or failure as the text block names it: `error [code]: message`, then its hint.
fn error_lines(code: &str, message: &str, hint: Option<&str>) -> String {
    match hint {
        Some(hint) => format!("error [{code}]: {message}\nhint: {hint}"),
        None => format!("error [{code}]: {message}"),
    }
}

/// A namespace tool's result: the typed JSON, with a compact text rendering for text-only
/// clients.
pub(crate) fn namespace(tool: &str, structured: Value, ok: bool) -> CallToolResult {
    let mut text = if ok {
        format!("[{tool}] ok")
    } else {
        format!("[{tool}] failed")
    };
    if let Some(error) = structured.get("error").filter(|error| !error.is_null()) {
        let code = error.get("code").and_then(Value::as_str).unwrap_or("error");
        let message = error.get("message").and_then(Value::as_str).unwrap_or("");
        let hint = error.get("hint").and_then(Value::as_str);
        text.push('\n');
        text.push_str(&error_lines(code, message, hint));
    } else {
        // The structured result is already bounded; a compact JSON copy serves text clients.
        let mut body = structured.clone();
        compact(&mut body);
        if let Some(object) = body.as_object_mut() {
            object.remove("ok");
        }
        text.push('\n');
        text.push_str(&shorten(&body.to_string(), 16_384));
    }
    finish(structured, vec![Content::text(text)], ok)
}

pub(crate) fn interrupt(result: &InterruptResult) -> CallToolResult {
    let structured = serde_json::to_value(result).unwrap_or(Value::Null);
    let text = match (result.interrupted, &result.interruption, &result.namespace) {
        (false, _, _) => "nothing was running; the kernel is idle".to_owned(),
        (true, Some(kind), Some(namespace)) => format!(
            "interrupted ({}); namespace {}; epoch {}",
            wire_name(kind),
            wire_name(namespace),
            result.epoch
        ),
        (true, _, _) => "interrupted".to_owned(),
    };
    finish(structured, vec![Content::text(text)], result.ok)
}

/// A result schema that also admits the failure every tool can answer, `{"ok": false,
/// "error": {...}}` (bad arguments, an unknown kernel, a missing notebook…), so that every
/// error result validates against the advertised `outputSchema` too. The success shape keeps
/// its required fields: they move from the root into the first branch of an `anyOf`, and the
/// root keeps `type` and `properties`, which clients read.
pub(crate) fn admitting_failure(schema: &rmcp::model::JsonObject) -> rmcp::model::JsonObject {
    let mut schema = schema.clone();
    let required: Vec<Value> = match schema.get("required").and_then(Value::as_array) {
        Some(required) => required.clone(),
        None => return schema,
    };
    if required
        .iter()
        .all(|field| field == "ok" || field == "error")
    {
        return schema;
    }
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.entry("error").or_insert_with(|| {
            serde_json::json!({
                "type": ["object", "null"],
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                "required": ["code", "message"],
            })
        });
    }
    schema.insert("required".into(), serde_json::json!(["ok"]));
    schema.insert(
        "anyOf".into(),
        serde_json::json!([
            {"required": required},
            {"properties": {"ok": {"const": false}}, "required": ["ok", "error"]},
        ]),
    );
    schema
}

/// A call whose arguments did not deserialize, in the shape of that tool's results.
pub(crate) fn invalid_arguments(
    tool: &ToolSpec,
    request_id: String,
    error: ErrorInfo,
) -> CallToolResult {
    if tool.refused_as_execution {
        rejected_execute(request_id, error)
    } else {
        request_error(&error)
    }
}

/// A request refused before reaching a session (for tools without a richer error shape).
pub(crate) fn request_error(error: &ErrorInfo) -> CallToolResult {
    let structured = serde_json::json!({"ok": false, "error": error});
    let text = error_lines(error.code.as_str(), &error.message, error.hint.as_deref());
    finish(structured, vec![Content::text(text)], false)
}

/// A result in the shape `mode` asks for; `schemaless` says whether its tool declares no
/// output schema (in `Auto`, the tools that run code: see `ToolSpec::returns_images`), or it is
/// the result of a task that runs code.
pub(crate) fn shaped(
    mut result: CallToolResult,
    schemaless: bool,
    mode: StructuredOutput,
) -> CallToolResult {
    match mode {
        StructuredOutput::Always => {}
        StructuredOutput::Auto if schemaless => result.structured_content = None,
        StructuredOutput::Auto => {
            if let Some(structured) = result.structured_content.as_mut() {
                compact(structured);
            }
        }
    }
    result
}

/// An output schema for the `Auto` shape: the fields `compact` may leave out are not required.
pub(crate) fn compact_schema(schema: &mut rmcp::model::JsonObject) {
    fn unrequire(schema: &mut serde_json::Map<String, Value>) {
        if let Some(Value::Array(required)) = schema.get_mut("required") {
            required.retain(|field| !COMPACTED.contains(&field.as_str().unwrap_or_default()));
        }
        if let Some(Value::Array(branches)) = schema.get_mut("anyOf") {
            for branch in branches.iter_mut().filter_map(Value::as_object_mut) {
                unrequire(branch);
            }
        }
        if let Some(Value::Object(properties)) = schema.get_mut("properties") {
            for field in COMPACTED {
                if let Some(Value::Object(inner)) = properties.get_mut(field) {
                    inner.remove("required");
                }
            }
        }
    }
    unrequire(schema);
}

/// The fields `compact` thins out.
const COMPACTED: [&str; 2] = ["runtime", "truncated"];

/// Drops what says nothing to a model from a structured result, in place: false truncation
/// flags (and `truncated` when none is set), and the bookkeeping of `runtime` (sequence
/// numbers, request id, timings), kept only when the call was interrupted, lost its namespace
/// or waited in the queue for more than a second.
pub(crate) fn compact(value: &mut Value) {
    drop_false_flags(value);
    let Some(object) = value.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(runtime)) = object.get_mut("runtime") {
        let queued = runtime
            .get("queue_wait_ms")
            .and_then(Value::as_u64)
            .is_some_and(|ms| ms > QUEUE_WAIT_WORTH_SAYING_MS);
        runtime.retain(|field, value| match field.as_str() {
            "interruption" | "namespace" => !value.is_null(),
            "queue_wait_ms" => queued,
            _ => false,
        });
        if runtime.is_empty() {
            object.remove("runtime");
        }
    }
}

/// Drops false `truncated` flags (and `truncated` when none is set) at every level: list and
/// search entries carry their own.
fn drop_false_flags(value: &mut Value) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(drop_false_flags),
        Value::Object(object) => {
            strip_truncated(object);
            object.values_mut().for_each(drop_false_flags);
        }
        _ => {}
    }
}

fn strip_truncated(object: &mut serde_json::Map<String, Value>) {
    match object.get_mut("truncated") {
        Some(Value::Bool(false)) => {
            object.remove("truncated");
        }
        Some(Value::Object(flags)) => {
            flags.retain(|_, flag| flag != &Value::Bool(false));
            if flags.is_empty() {
                object.remove("truncated");
            }
        }
        _ => {}
    }
}

/// A queue wait shorter than this is not worth a model's attention.
const QUEUE_WAIT_WORTH_SAYING_MS: u64 = 1_000;

fn finish(structured: Value, content: Vec<Content>, ok: bool) -> CallToolResult {
    let mut result = if ok {
        CallToolResult::structured(structured)
    } else {
        CallToolResult::structured_error(structured)
    };
    result.content = content;
    result.is_error = Some(!ok);
    result
}

/// Moves base64 images out of a mime bundle into `images`, leaving a short reference.
fn extract_images(bundle: &mut Value, images: &mut Vec<(String, String)>) {
    let Some(map) = bundle.as_object_mut() else {
        return;
    };
    for mime in BINARY_IMAGE_TYPES {
        if let Some(Value::String(data)) = map.get_mut(*mime) {
            let bytes = base64_decoded_len(data);
            let payload = std::mem::replace(
                data,
                format!(
                    "<{mime}, {bytes} bytes, returned as MCP image content #{}>",
                    images.len() + 1
                ),
            );
            images.push((payload.split_whitespace().collect(), (*mime).to_owned()));
        }
    }
    if let Some(Value::String(svg)) = map.get_mut(SVG_TYPE) {
        let bytes = svg.len();
        let text = std::mem::replace(
            svg,
            format!(
                "<{SVG_TYPE}, {bytes} bytes, returned as MCP image content #{}>",
                images.len() + 1
            ),
        );
        images.push((
            base64::engine::general_purpose::STANDARD.encode(text),
            SVG_TYPE.to_owned(),
        ));
    }
}

/// The text block of an execution's result: what a model reads (in `auto`, all it reads
/// besides the images). Only what says something is written: the outputs, the error with its
/// last frames, and runtime facts when they matter (interrupted, namespace lost, a long queue
/// wait, cut output and where to page it, a background execution's id).
fn execution_text(output: &ExecutionOutput) -> String {
    let mut text = match (output.status, output.execution_count) {
        (ExecutionStatus::Ok, Some(count)) => format!("[ok] Out[{count}]"),
        (status, Some(count)) => format!("[{}] In[{count}]", wire_name(&status)),
        (status, None) => format!("[{}]", wire_name(&status)),
    };
    // A cut stream already carries its marker (the omitted count and where to page it).
    let mut section = |name: &str, body: &str| {
        if !body.is_empty() {
            text.push_str(&format!("\n--- {name} ---\n{body}"));
        }
    };
    section("stdout", &output.stdout_view());
    section("stderr", &output.stderr_view());
    if let Some(result) = &output.result {
        let metadata = output.result_metadata.as_ref();
        match summary_note(metadata) {
            Some(summary) => section("result", &summary),
            None => {
                if let Some(readable) = ipython_mcp_output::rich::readable_text(result) {
                    section("result", readable);
                }
            }
        }
    }
    if let Some(metadata) = &output.result_metadata {
        text.push_str(&image_notes(metadata));
    }
    let displays = output.display_data.len();
    if displays > 0 || output.display_omitted > 0 {
        text.push_str(&format!("\n--- displays: {displays} returned"));
        if output.display_omitted > 0 {
            text.push_str(&format!(", {} omitted", output.display_omitted));
        }
        text.push_str(" ---");
        for item in &output.display_data {
            match summary_note(Some(&item.metadata)) {
                Some(summary) => text.push_str(&format!("\n{summary}")),
                None => {
                    if let Some(readable) = ipython_mcp_output::rich::readable_text(&item.data) {
                        text.push_str(&format!("\n{}", shorten(readable, 500)));
                    }
                }
            }
            text.push_str(&image_notes(&item.metadata));
        }
    }
    if !output.withheld.is_empty() {
        text.push_str(&format!(
            "\n[{} display payloads withheld to keep this reply within {}",
            output.withheld.len(),
            ipython_mcp_config::MAX_REPLY_BYTES.env
        ));
        match output.withheld.iter().find_map(|item| item.path.as_deref()) {
            Some(path) => text.push_str(&format!(
                " (e.g. {path}): read them from the kernel by path, or show fewer per call]"
            )),
            None if output.status == ExecutionStatus::Pending => {
                text.push_str("; they are written to the spool when the execution ends]")
            }
            None => text.push_str(": show fewer per call]"),
        }
    }
    if let Some(error) = &output.error {
        text.push_str(&error_text(error));
    }
    if let Some(notice) = &output.notice {
        text.push_str(&format!("\n[notice: {notice}]"));
    }
    text.push_str(&runtime_facts(&output.runtime));
    if output.status == ExecutionStatus::Pending {
        text.push_str(&format!(
            "\n[still running as execution_id {:?}: call get_output with it (wait_seconds to wait for the end); interrupt stops it]",
            output.execution_id.as_str()
        ));
    }
    if let Some(spool) = &output.spool {
        if spool.evicted {
            text.push_str(
                "\n[the full output was deleted from the spool to keep it within its bound]",
            );
        } else if spool.stdout_bytes + spool.stderr_bytes > 0 {
            text.push_str(&format!(
                "\n[full output kept: stdout {} bytes, stderr {} bytes; read it with get_output(execution_id={:?}, stream=\"stdout\", start_line=N) or search it with pattern=REGEX]",
                spool.stdout_bytes, spool.stderr_bytes, output.execution_id.as_str()
            ));
        }
    }
    text
}

/// A display's summary for the model (see `ipython_mcp_output::rich`), with where its full
/// payload is.
fn summary_note(metadata: Option<&serde_json::Map<String, Value>>) -> Option<String> {
    let summary = metadata?.get("ipython_mcp")?.get("summary")?;
    let mut text = format!("[{}]", summary.get("text")?.as_str()?);
    if let Some(path) = summary.get("path").and_then(Value::as_str) {
        let mime = summary
            .get("mime")
            .and_then(Value::as_str)
            .unwrap_or("payload");
        text.push_str(&format!(" (full {mime}: {path})"));
    }
    Some(text)
}

/// An enum value as results spell it (its serde name), for the text block.
fn wire_name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        _ => String::from("unknown"),
    }
}

/// Characters of a traceback the text block shows: its last frames, where the error is.
const TRACEBACK_TEXT_CHARS: usize = 1_500;

/// An error as the text block shows it: user code's exception as `ename: evalue` and the
/// traceback's last frames; any other error as its code, message and hint.
fn error_text(error: &ErrorInfo) -> String {
    let mut text = match (&error.ename, &error.evalue) {
        (Some(ename), Some(evalue)) if evalue.is_empty() => format!("\n--- error: {ename} ---"),
        (Some(ename), Some(evalue)) => format!("\n--- error: {ename}: {evalue} ---"),
        _ => format!("\n--- error [{}] ---\n{}", error.code, error.message),
    };
    if let Some(traceback) = &error.traceback {
        let frames = last_frames(traceback, error.ename.as_deref(), error.evalue.as_deref());
        if !frames.is_empty() {
            text.push('\n');
            text.push_str(&frames);
        }
    }
    if let Some(hint) = &error.hint {
        text.push_str(&format!("\nhint: {hint}"));
    }
    text
}

/// The end of an IPython traceback without what the header already says: the rule of dashes
/// it opens with and the closing `ename: evalue` line; at most `TRACEBACK_TEXT_CHARS`, cut
/// at a line boundary, with the count of lines left out.
fn last_frames(traceback: &str, ename: Option<&str>, evalue: Option<&str>) -> String {
    let mut lines: Vec<&str> = traceback.lines().collect();
    while lines
        .first()
        .is_some_and(|line| !line.is_empty() && line.chars().all(|c| c == '-'))
    {
        lines.remove(0);
    }
    let closing = match (ename, evalue) {
        (Some(ename), Some(evalue)) if !evalue.is_empty() => Some(format!("{ename}: {evalue}")),
        (Some(ename), _) => Some(ename.to_owned()),
        _ => None,
    };
    while lines
        .last()
        .is_some_and(|line| line.trim().is_empty() || closing.as_deref() == Some(line.trim_end()))
    {
        lines.pop();
    }
    let mut kept = 0;
    let mut chars = 0;
    for line in lines.iter().rev() {
        let length = line.chars().count() + 1;
        if chars + length > TRACEBACK_TEXT_CHARS && kept > 0 {
            break;
        }
        chars += length;
        kept += 1;
    }
    let omitted = lines.len() - kept;
    let mut text = String::new();
    if omitted > 0 {
        text.push_str(&format!(
            "[… {omitted} earlier traceback lines omitted …]\n"
        ));
    }
    text.push_str(&ipython_mcp_text::shorten(
        &lines[omitted..].join("\n"),
        TRACEBACK_TEXT_CHARS,
    ));
    text
}

/// The runtime facts worth a model's attention, each on its own line.
fn runtime_facts(runtime: &RuntimeInfo) -> String {
    use ipython_mcp_output::NamespaceOutcome;
    let mut text = String::new();
    if runtime.queue_wait_ms > QUEUE_WAIT_WORTH_SAYING_MS {
        text.push_str(&format!(
            "\n[waited {:.1} s before running (queued, or the kernel was starting)]",
            runtime.queue_wait_ms as f64 / 1000.0
        ));
    }
    match (&runtime.interruption, &runtime.namespace) {
        (_, Some(NamespaceOutcome::Reset)) => text.push_str(
            "\n[the kernel was replaced: namespace reset, every name defined before is gone; re-run your setup]",
        ),
        (Some(kind), Some(NamespaceOutcome::Preserved)) => text.push_str(&format!(
            "\n[interrupted ({}); namespace preserved]",
            wire_name(kind)
        )),
        (_, Some(NamespaceOutcome::Unknown)) => text.push_str(
            "\n[the namespace may have been lost: check with runtime_status before relying on it]",
        ),
        (_, Some(NamespaceOutcome::Restored)) => {
            text.push('\n');
            text.push_str(&restored_line(runtime.restore.as_ref()));
        }
        _ => {}
    }
    text
}

/// Names listed in the restored line; the rest are counted.
const RESTORED_NAMES_SHOWN: usize = 12;
const LOST_NAMES_SHOWN: usize = 6;
const LOST_REASON_CHARS: usize = 80;

/// One line: the kernel was replaced and what its checkpoint brought back, what it lost.
fn restored_line(restore: Option<&ipython_mcp_output::Restore>) -> String {
    let Some(restore) = restore else {
        return "[the kernel was replaced; the namespace was restored from its checkpoint]"
            .to_owned();
    };
    let listed = |names: Vec<String>, shown: usize| {
        let more = names.len().saturating_sub(shown);
        let mut text = names.into_iter().take(shown).collect::<Vec<_>>().join(", ");
        if more > 0 {
            text.push_str(&format!(", and {more} more"));
        }
        text
    };
    let after = restore
        .execution_count
        .map(|count| format!(" as of execution {count}"))
        .unwrap_or_default();
    let mut line = format!(
        "[the kernel was replaced; namespace restored{after}: {} back ({})",
        restore.restored.len(),
        listed(restore.restored.clone(), RESTORED_NAMES_SHOWN)
    );
    if !restore.lost.is_empty() {
        let lost = restore
            .lost
            .iter()
            .map(|lost| {
                format!(
                    "{} ({})",
                    lost.name,
                    ipython_mcp_text::shorten(&lost.reason, LOST_REASON_CHARS)
                )
            })
            .collect();
        line.push_str(&format!("; lost: {}", listed(lost, LOST_NAMES_SHOWN)));
    }
    line.push(']');
    line
}

/// What the kernel did to a display's images: downscaled (where the original is) or omitted.
fn image_notes(metadata: &serde_json::Map<String, Value>) -> String {
    let mut text = String::new();
    let Some(ours) = metadata.get("ipython_mcp") else {
        return text;
    };
    if let Some(scaled) = ours.get("downscaled_images").and_then(Value::as_object) {
        for (mime, note) in scaled {
            let size = |key: &str| {
                note.get(key)
                    .and_then(Value::as_array)
                    .map(|pair| {
                        pair.iter()
                            .map(|value| value.to_string())
                            .collect::<Vec<_>>()
                            .join("x")
                    })
                    .unwrap_or_default()
            };
            text.push_str(&format!(
                "\n[{mime} downscaled from {} ({} bytes) to {} to fit the image bound",
                size("original_size"),
                note.get("original_bytes")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                size("size"),
            ));
            if let Some(converted) = note.get("mime").and_then(Value::as_str) {
                text.push_str(&format!(" as {converted}"));
            }
            if let Some(path) = note.get("original_path").and_then(Value::as_str) {
                text.push_str(&format!(
                    "; the original is at {path} (e.g. PIL.Image.open it to crop)"
                ));
            }
            text.push(']');
        }
    }
    if let Some(omitted) = ours.get("omitted_images").and_then(Value::as_object) {
        let errors = ours.get("image_errors").and_then(Value::as_object);
        for (mime, bytes) in omitted {
            match errors
                .and_then(|errors| errors.get(mime))
                .and_then(Value::as_str)
            {
                Some(error) => text.push_str(&format!(
                    "\n[{mime} of {bytes} bytes omitted: it could not be downscaled ({error})]"
                )),
                None => text.push_str(&format!(
                    "\n[{mime} of {bytes} bytes omitted: larger than the image bound]"
                )),
            }
        }
    }
    text
}

/// A page of spooled output, for the text block.
pub(crate) fn page_text(page: &ipython_mcp_output::Page) -> String {
    let stream = wire_name(&page.stream);
    let mut text = match (&page.pattern, page.total_matches) {
        (Some(pattern), Some(matches)) => format!(
            "\n--- {stream} lines matching /{pattern}/: {matches} of {} lines ---",
            page.total_lines
        ),
        _ => format!("\n--- {stream}: {} lines so far ---", page.total_lines),
    };
    for line in &page.lines {
        text.push_str(&format!("\n{:>6}: {}", line.line, line.text));
    }
    if let Some(next) = page.next_line {
        text.push_str(&format!("\n[more: start_line={next}]"));
    } else if !page.complete {
        text.push_str("\n[end of what has been written so far; the execution is still running]");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipython_mcp_output::{ExecutionId, RuntimeInfo, SpoolInfo};

    #[test]
    fn the_status_line_keeps_the_session_id_as_it_is_spelled() {
        let status = StatusResult {
            ok: true,
            status: ipython_mcp_kernel::RuntimeStatus::<ErrorInfo>::starting("MyKernel"),
        };
        let result = status_text(&status);
        assert!(
            result.starts_with("kernel \"MyKernel\": starting, epoch 0"),
            "{result}"
        );
    }

    #[test]
    fn the_text_names_the_execution_id_as_a_plain_string() {
        let runtime = RuntimeInfo {
            request_id: "1".into(),
            admission_seq: 1,
            epoch: 0,
            queue_wait_ms: 0,
            run_ms: 0,
            interruption: None,
            namespace: None,
            restore: None,
        };
        let mut output = ExecutionOutput::pending(ExecutionId::from("e-1"), runtime);
        output.spool = Some(SpoolInfo {
            stdout_bytes: 10,
            ..SpoolInfo::default()
        });
        let text = execution_text(&output);
        assert!(
            text.contains("still running as execution_id \"e-1\":"),
            "{text}"
        );
        assert!(
            text.contains("get_output(execution_id=\"e-1\", stream=\"stdout\""),
            "{text}"
        );
    }
}
