//! The output view for clients that render MCP Apps: a `ui://` page the client shows the person
//! beside the result of a tool that runs code, and the execution resource it reads through the
//! client.
//!
//! What the model gets does not change: the tools' `_meta.ui.resourceUri` and the result's
//! `_meta` (which execution to show) are for the client, which does not pass `_meta` on to the
//! model. The page asks for `ipython-mcp://executions/{execution_id}`: everything the kernel
//! produced for that execution, replayed from the session's output log in its spool (full mime
//! bundles, full streams, payloads the reply withheld or downscaled), within `MAX_VIEW_BYTES`.
//! Only executions a session still remembers are served, and only through the session's own
//! record of where its files are: a URI names an execution, never a path.

use std::time::Duration;

use ipython_mcp_kernel::SessionHandle;
use ipython_mcp_output::{ExecutionOutput, ExecutionStatus};
use rmcp::handler::server::tool::ToolRouter;
use rmcp::model::{CallToolResult, MetaObject, Resource, ResourceContents, ResourceTemplate};
use serde_json::{json, Map, Value};

use ipython_mcp_kernel::KernelManager;

/// The output view.
pub(crate) const VIEW_URI: &str = "ui://ipython-mcp/output";
/// What MCP Apps clients render (an HTML page that speaks their postMessage protocol).
pub(crate) const VIEW_MIME: &str = "text/html;profile=mcp-app";
/// One execution's full output, as JSON: this prefix, then the `execution_id`.
pub(crate) const EXECUTION_PREFIX: &str = "ipython-mcp://executions/";
/// The result `_meta` key naming the execution the view shows.
pub(crate) const RESULT_META_KEY: &str = "ipython-mcp/execution";

/// The page: self-contained (no build step, nothing fetched unless a chart needs its library).
const VIEW_HTML: &str = include_str!("apps/output.html");

/// Serialized outputs one execution resource carries; what does not fit is named in it. A
/// resource read crosses the client's JSON-RPC channel in one message.
const MAX_VIEW_BYTES: u64 = 16 << 20;

/// Where the page may load Plotly's and Vega's libraries from, for a chart bundle (the client
/// enforces this as the page's Content-Security-Policy; without a network the page shows the
/// bundle's image or text form instead).
const CHART_ORIGINS: [&str; 2] = ["https://cdn.plot.ly", "https://cdn.jsdelivr.net"];

/// Links the viewed tools to the view; called once where the router is built.
pub(crate) fn link_tools<S>(router: &mut ToolRouter<S>) {
    for (name, route) in router.map.iter_mut() {
        // The tools whose results can carry images are the ones that run code.
        if crate::surface::of_route(name).returns_images {
            let mut meta = route.attr.meta.take().unwrap_or_default();
            meta.0
                .insert("ui".into(), json!({ "resourceUri": VIEW_URI }));
            route.attr.meta = Some(meta);
        }
    }
}

/// `result` with the execution it shows named in its `_meta`, for the view (nothing for a
/// call that never reached a session).
pub(crate) fn linked(mut result: CallToolResult, output: &ExecutionOutput) -> CallToolResult {
    let id = output.execution_id.as_str();
    if !id.is_empty() {
        let mut meta = result.meta.take().unwrap_or_default();
        meta.0.insert(
            RESULT_META_KEY.into(),
            json!({ "id": id, "uri": format!("{EXECUTION_PREFIX}{id}") }),
        );
        result.meta = Some(meta);
    }
    result
}

pub(crate) fn resources() -> Vec<Resource> {
    vec![Resource::new(VIEW_URI, "output-view")
        .with_description("Output view for MCP Apps clients: an execution's full rich output")
        .with_mime_type(VIEW_MIME)]
}

pub(crate) fn resource_templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(format!("{EXECUTION_PREFIX}{{execution_id}}"), "execution")
            .with_description("An execution's full output (every display's mime bundle, the result, the streams) as JSON, while its session remembers it")
            .with_mime_type("application/json"),
    ]
}

/// Reads the view or an execution; `None` when `uri` is neither (another reader's).
pub(crate) async fn read(
    kernels: &KernelManager,
    uri: &str,
) -> Option<Result<ResourceContents, rmcp::ErrorData>> {
    if uri == VIEW_URI {
        return Some(Ok(view()));
    }
    let id = uri.strip_prefix(EXECUTION_PREFIX)?;
    Some(execution(kernels, uri, id).await)
}

fn view() -> ResourceContents {
    let csp = json!({ "resourceDomains": CHART_ORIGINS });
    let mut meta = MetaObject::default();
    meta.0
        .insert("ui".into(), json!({ "csp": csp, "prefersBorder": true }));
    ResourceContents::text(VIEW_HTML, VIEW_URI)
        .with_mime_type(VIEW_MIME)
        .with_meta(meta)
}

async fn execution(
    kernels: &KernelManager,
    uri: &str,
    id: &str,
) -> Result<ResourceContents, rmcp::ErrorData> {
    let not_found = || {
        rmcp::ErrorData::resource_not_found(
            "unknown execution: no session remembers it (each keeps its latest 32)",
            Some(json!({ "uri": ipython_mcp_text::shorten(uri, 200) })),
        )
    };
    let session = kernels.find_execution(id).ok_or_else(not_found)?;
    let output = session
        .output(Some(id), Duration::ZERO)
        .await
        .ok_or_else(not_found)?;
    let body = full_output(&session, &output).await;
    let text = serde_json::to_string(&body)
        .map_err(|error| rmcp::ErrorData::internal_error(error.to_string(), None))?;
    Ok(ResourceContents::text(text, uri).with_mime_type("application/json"))
}

/// Everything the kernel produced for `output`'s execution, from the session's output log once
/// it has finished; the bounded view while it runs, or when the log is gone (spool off or
/// evicted), with `complete: false`.
async fn full_output(session: &SessionHandle, output: &ExecutionOutput) -> Value {
    let id = output.execution_id.as_str();
    let finished = output.status != ExecutionStatus::Pending;
    let saved = if finished {
        session
            .saved_outputs(id, output.execution_count, MAX_VIEW_BYTES)
            .await
    } else {
        None
    };
    let (outputs, omitted, complete) = match saved {
        Some(saved) => {
            let complete =
                saved.omitted_outputs == 0 && !saved.spool_incomplete && !saved.kernel_withheld;
            (saved.outputs, saved.omitted_outputs, complete)
        }
        None => (bounded_outputs(output), 0, false),
    };
    json!({
        "execution_id": id,
        "kernel": session.kernel_id(),
        "status": output.status,
        "execution_count": output.execution_count,
        "outputs": outputs,
        "omitted_outputs": omitted,
        "complete": complete && finished,
    })
}

/// The bounded view as nbformat outputs (what the agent got, images perhaps downscaled).
fn bounded_outputs(output: &ExecutionOutput) -> Vec<Value> {
    let mut outputs = Vec::new();
    for (name, text) in [
        ("stdout", output.stdout_view()),
        ("stderr", output.stderr_view()),
    ] {
        if !text.is_empty() {
            outputs.push(json!({ "output_type": "stream", "name": name, "text": text }));
        }
    }
    for item in &output.display_data {
        outputs.push(json!({
            "output_type": "display_data", "data": item.data, "metadata": item.metadata,
        }));
    }
    if let Some(result) = &output.result {
        outputs.push(json!({
            "output_type": "execute_result", "execution_count": output.execution_count,
            "data": result, "metadata": Map::new(),
        }));
    }
    if let Some(error) = &output.error {
        outputs.push(json!({
            "output_type": "error",
            "ename": error.ename.clone().unwrap_or_else(|| error.code.to_string()),
            "evalue": error.evalue.clone().unwrap_or_else(|| error.message.clone()),
            "traceback": error.traceback.as_deref().map_or_else(Vec::new, |traceback| {
                traceback.lines().map(str::to_owned).collect()
            }),
        }));
    }
    outputs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_speaks_the_mcp_apps_protocol_and_reads_the_execution() {
        for needle in [
            "ui/initialize",
            "ui/notifications/initialized",
            "ui/notifications/tool-result",
            "ui/notifications/size-changed",
            "resources/read",
            RESULT_META_KEY,
        ] {
            assert!(VIEW_HTML.contains(needle), "the page lacks {needle}");
        }
    }

    #[test]
    fn only_a_call_that_reached_a_session_names_its_execution() {
        let runtime = ipython_mcp_output::RuntimeInfo::unadmitted("1");
        let mut output =
            ExecutionOutput::pending(ipython_mcp_output::ExecutionId::unassigned(), runtime);
        assert!(linked(CallToolResult::success(vec![]), &output)
            .meta
            .is_none());
        output.execution_id = ipython_mcp_output::ExecutionId::generate();
        let meta = linked(CallToolResult::success(vec![]), &output)
            .meta
            .expect("meta");
        let named = &meta.0[RESULT_META_KEY];
        assert_eq!(named["id"], output.execution_id.as_str());
        assert_eq!(
            named["uri"],
            format!("{EXECUTION_PREFIX}{}", output.execution_id)
        );
    }
}
