//! The MCP surface driven in-process: a real rmcp client talks to [`IpythonMcp`] over an
//! in-memory duplex, and the sessions run on the kernel crate's scripted fake kernels
//! (`test-support`), so protocol behaviour (argument errors, both result shapes, outcomes,
//! deadlines, cancellation, tasks, `list_changed`) is tested in milliseconds without a kernel
//! process. What a real kernel does is pinned by the binary's end-to-end tests.

use std::sync::Arc;
use std::time::Duration;

use ipython_mcp_config::{Config, KernelLimits, StructuredOutput};
use ipython_mcp_kernel::{FakeKernels, KernelManager};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    GetTaskParams, ProtocolVersion, TaskPayload, TaskStatus,
};
use rmcp::service::{NotificationContext, RunningService, ServiceExt as _};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::catalog::Registration;
use crate::handler::IpythonMcp;
use crate::peers::Peers;
use crate::state::ServerState;

// The tests by what they pin, on the harness below: argument errors and coercion, the result
// shapes (with the snapshots), toolsets, refusals, and the notebook tools on a workspace.
mod arguments;
mod notebooks;
mod refusals;
mod shapes;
mod toolsets;

/// A client that counts `notifications/tools/list_changed`.
#[derive(Clone)]
struct Client {
    info: ClientConfig,
    changed: Arc<watch::Sender<usize>>,
}

impl ClientHandler for Client {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.send_modify(|count| *count += 1);
    }

    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }
}

struct Connected {
    client: RunningService<RoleClient, Client>,
    changed: watch::Receiver<usize>,
    kernels: FakeKernels,
    state: ServerState,
}

impl Connected {
    async fn start(shape: StructuredOutput, tasks: bool) -> Connected {
        let kernels = FakeKernels::new();
        // Worded as the binary words its sessions, so refusals carry the hints agents see.
        let options = ipython_mcp_kernel::SessionOptions {
            wording: crate::error::WORDING,
            memory: Default::default(),
            sandbox: None,
            ..FakeKernels::session_options("default")
        };
        let manager = KernelManager::with_fake_kernels(options, KernelLimits::default(), &kernels);
        let config = Config {
            structured_output: shape,
            ..Config::default()
        };
        let state = ServerState::new(manager, &config, Peers::default(), None);
        let server = IpythonMcp::new(state.clone(), Arc::new(config));
        let (server_side, client_side) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            if let Ok(running) = server.serve(tokio::io::split(server_side)).await {
                let _ = running.waiting().await;
            }
        });
        // A handshake-era client: it is told `list_changed` through its peer, kept from
        // `notifications/initialized`.
        let mut info = ClientConfig::default().with_protocol_version(ProtocolVersion::V_2025_11_25);
        if tasks {
            info.capabilities = ClientCapabilities::builder().enable_tasks().build();
        }
        let (changed, receiver) = watch::channel(0);
        let handler = Client {
            info,
            changed: Arc::new(changed),
        };
        let client = handler
            .serve(tokio::io::split(client_side))
            .await
            .expect("the MCP handshake");
        Connected {
            client,
            changed: receiver,
            kernels,
            state,
        }
    }

    async fn respond(&self, tool: &str, arguments: Value) -> CallToolResponse {
        let request = CallToolRequestParams::new(tool.to_owned())
            .with_arguments(arguments.as_object().cloned().expect("an object"));
        self.client
            .peer()
            .call_tool_once(request)
            .await
            .expect("tools/call")
    }

    async fn call(&self, tool: &str, arguments: Value) -> CallToolResult {
        match self.respond(tool, arguments).await {
            CallToolResponse::Complete(result) => result,
            other => panic!("a result, not {other:?}"),
        }
    }

    async fn list_changes(&mut self, count: usize) {
        let waited = self.changed.wait_for(|seen| *seen >= count);
        tokio::time::timeout(Duration::from_secs(30), waited)
            .await
            .expect("list_changed arrives")
            .expect("the client is connected");
    }
}

/// A server set up beyond its shape, for the tests in this module's files: the
/// configuration (toolsets, workspace, limits), the scripted kernels, whether output is
/// spooled, and whether the client declares the tasks extension. The sessions get the
/// configuration's output limits, timeouts and queue bounds, as the binary gives them.
struct Setup {
    config: Config,
    kernels: FakeKernels,
    tasks: bool,
    spool: bool,
}

impl Setup {
    fn new(shape: StructuredOutput) -> Setup {
        Setup {
            config: Config {
                structured_output: shape,
                ..Config::default()
            },
            kernels: FakeKernels::new(),
            tasks: false,
            spool: false,
        }
    }

    /// Notebooks are files under `root` (a test's own temporary directory).
    fn workspace(mut self, root: &std::path::Path) -> Setup {
        self.config.workspace_root = Some(root.to_owned());
        self
    }

    fn toolsets(mut self, toolsets: ipython_mcp_config::Toolsets) -> Setup {
        self.config.toolsets = toolsets;
        self
    }

    /// Streams longer than `chars` are cut (head and tail kept, with a marker).
    fn max_text_chars(mut self, chars: usize) -> Setup {
        self.config.limits.max_text_chars = chars;
        self
    }

    fn script(mut self, code: &str, behaviour: ipython_mcp_kernel::FakeBehaviour) -> Setup {
        self.kernels = self.kernels.with(code, behaviour);
        self
    }

    fn tasks(mut self) -> Setup {
        self.tasks = true;
        self
    }

    /// Output past the bounds is kept on disk (a temporary directory per session), to page
    /// with `get_output`.
    fn spool(mut self) -> Setup {
        self.spool = true;
        self
    }

    async fn start(self) -> Connected {
        let Setup {
            config,
            kernels,
            tasks,
            spool,
        } = self;
        let fake = FakeKernels::session_options("default");
        // As the binary makes them (`serve::session_options`), but for what needs a process.
        let options = ipython_mcp_kernel::SessionOptions {
            wording: crate::error::WORDING,
            memory: Default::default(),
            sandbox: None,
            limits: config.limits,
            timeouts: config.timeouts,
            max_json_items: config.limits.max_results,
            max_pending: config.queue.max_pending,
            queue_wait_timeout: config.queue.queue_wait,
            spool: if spool {
                ipython_mcp_output::SpoolLimits {
                    max_execution_bytes: config.spool.max_execution_bytes,
                    max_total_bytes: config.spool.max_total_bytes,
                    max_retained_bytes: config.spool.max_retained_bytes,
                    max_server_retained_bytes: config.spool.max_server_retained_bytes,
                }
            } else {
                fake.spool
            },
            ..fake
        };
        let manager = KernelManager::with_fake_kernels(options, config.kernels, &kernels);
        let state = ServerState::new(manager, &config, Peers::default(), None);
        let server = IpythonMcp::new(state.clone(), Arc::new(config));
        let (server_side, client_side) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            if let Ok(running) = server.serve(tokio::io::split(server_side)).await {
                let _ = running.waiting().await;
            }
        });
        let mut info = ClientConfig::default().with_protocol_version(ProtocolVersion::V_2025_11_25);
        if tasks {
            info.capabilities = ClientCapabilities::builder().enable_tasks().build();
        }
        let (changed, receiver) = watch::channel(0);
        let handler = Client {
            info,
            changed: Arc::new(changed),
        };
        let client = handler
            .serve(tokio::io::split(client_side))
            .await
            .expect("the MCP handshake");
        Connected {
            client,
            changed: receiver,
            kernels,
            state,
        }
    }
}

impl Connected {
    /// The tools as `tools/list` offers them.
    async fn tools(&self) -> Vec<rmcp::model::Tool> {
        self.client
            .peer()
            .list_all_tools()
            .await
            .expect("tools/list")
    }

    /// Waits until the kernels have begun `count` requests in all.
    async fn started(&self, count: usize) {
        tokio::time::timeout(Duration::from_secs(30), self.kernels.started(count))
            .await
            .expect("the kernels begin the requests");
    }

    /// Whether the default session has run nothing (no execution recorded): what an argument
    /// refusal must leave behind.
    async fn ran_nothing(&self) -> bool {
        let latest = self.call("get_output", json!({})).await;
        text(&latest).contains("has run nothing yet")
    }
}

/// The `code` of an error result as its text block names it (`error [code]`), checked to be
/// the one its `structuredContent` carries where the shape keeps it.
fn error_code(tool: &str, arguments: &Value, result: &CallToolResult) -> String {
    assert_eq!(
        result.is_error,
        Some(true),
        "{tool} {arguments}: {result:?}"
    );
    let shown = text(result);
    let named = regex::Regex::new(r"error \[([a-z_]+)\]").expect("a valid pattern");
    let code = named
        .captures(&shown)
        .map(|found| found[1].to_owned())
        .unwrap_or_else(|| panic!("{tool} {arguments}: the text names no code: {shown}"));
    if let Some(structured) = &result.structured_content {
        assert_eq!(structured["ok"], false, "{tool} {arguments}: {structured}");
        assert_eq!(
            structured["error"]["code"], code,
            "{tool} {arguments}: {structured}"
        );
    }
    code
}

/// Both result shapes, for tests that hold in each.
const SHAPES: [StructuredOutput; 2] = [StructuredOutput::Auto, StructuredOutput::Always];

/// The `structuredContent` of a result that must have one.
fn structured(result: &CallToolResult) -> &Value {
    result
        .structured_content
        .as_ref()
        .unwrap_or_else(|| panic!("structuredContent: {result:?}"))
}

/// The execution id a pending result's text names.
fn pending_id(result: &CallToolResult) -> String {
    let named = regex::Regex::new(r#"still running as execution_id "([^"]+)""#).expect("pattern");
    let shown = text(result);
    named
        .captures(&shown)
        .map(|found| found[1].to_owned())
        .unwrap_or_else(|| panic!("no execution id in {shown}"))
}

/// A temporary notebook workspace.
fn workspace() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// Where `value` does not fit JSON schema `schema`, if anywhere: the keywords the tools'
/// schemas use (type, enum, const, properties, required, items, additionalProperties, anyOf,
/// oneOf, allOf; `$ref` into the root's `$defs`).
fn misfit(value: &Value, schema: &Value, root: &Value, path: &str) -> Option<String> {
    let Some(schema) = schema.as_object() else {
        return None; // `true`, or no schema
    };
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference.trim_start_matches("#/$defs/");
        return misfit(value, &root["$defs"][name], root, path);
    }
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(number) if number.is_i64() || number.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let admits = |name: &Value| name == kind || (name == "number" && kind == "integer");
    match schema.get("type") {
        Some(Value::Array(names)) if !names.iter().any(admits) => {
            return Some(format!("{path}: a {kind}, not one of {names:?}"))
        }
        Some(name @ Value::String(_)) if !admits(name) => {
            return Some(format!("{path}: a {kind}, not {name}"))
        }
        _ => {}
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        if !values.contains(value) {
            return Some(format!("{path}: {value} is not one of {values:?}"));
        }
    }
    if let Some(constant) = schema.get("const") {
        if constant != value {
            return Some(format!("{path}: {value} is not {constant}"));
        }
    }
    if let Some(Value::Array(arms)) = schema.get("allOf") {
        if let Some(problem) = arms.iter().find_map(|arm| misfit(value, arm, root, path)) {
            return Some(problem);
        }
    }
    for keyword in ["anyOf", "oneOf"] {
        if let Some(Value::Array(arms)) = schema.get(keyword) {
            let problems: Vec<String> = arms
                .iter()
                .filter_map(|arm| misfit(value, arm, root, path))
                .collect();
            if problems.len() == arms.len() {
                return Some(format!("{path}: no arm of {keyword} fits: {problems:?}"));
            }
        }
    }
    if let Value::Object(fields) = value {
        let properties = schema.get("properties").and_then(Value::as_object);
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !fields.contains_key(required) {
                return Some(format!("{path}: `{required}` is missing"));
            }
        }
        for (name, field) in fields {
            let inner = format!("{path}.{name}");
            let declared = properties.and_then(|properties| properties.get(name));
            let problem = match (declared, schema.get("additionalProperties")) {
                (Some(declared), _) => misfit(field, declared, root, &inner),
                (None, Some(Value::Bool(false))) => Some(format!("{inner}: not allowed")),
                (None, Some(extra)) => misfit(field, extra, root, &inner),
                (None, None) => None,
            };
            if problem.is_some() {
                return problem;
            }
        }
    }
    if let (Value::Array(items), Some(each)) = (value, schema.get("items")) {
        for (index, item) in items.iter().enumerate() {
            if let Some(problem) = misfit(item, each, root, &format!("{path}[{index}]")) {
                return Some(problem);
            }
        }
    }
    None
}

/// What changes from run to run in the texts and results the snapshots keep: execution ids,
/// revisions, cell ids, timings and request ids.
fn snapshot_filters() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            "[execution-id]",
        ),
        (r"\b[0-9a-f]{64}\b", "[revision]"),
        (r"\(id [0-9a-f]{8}\)", "(id [cell-id])"),
        (r#""(run_ms|queue_wait_ms)": \d+"#, r#""$1": "[ms]""#),
        (r#""request_id": "\d+""#, r#""request_id": "[request]""#),
    ]
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn bad_arguments_are_a_structured_refusal_in_both_shapes() {
    for shape in [StructuredOutput::Auto, StructuredOutput::Always] {
        let server = Connected::start(shape, false).await;
        for arguments in [
            json!({"code": 1}),
            json!({"code": "1", "bogus": true}),
            json!({"code": "1", "background": "maybe"}),
            json!({}),
        ] {
            let result = server.call("execute", arguments.clone()).await;
            assert_eq!(result.is_error, Some(true), "{arguments}: {result:?}");
            assert!(
                text(&result).contains("invalid_arguments"),
                "{arguments}: {}",
                text(&result)
            );
        }
        // Booleans sent as strings (as some clients do) are taken as booleans.
        let coerced = server
            .call("execute", json!({"code": "x = 1", "background": "false"}))
            .await;
        assert_eq!(coerced.is_error, Some(false), "{coerced:?}");
        // Nothing was run by the refusals.
        assert_eq!(server.kernels.launches(), 1);
    }
}

#[tokio::test]
async fn execute_answers_text_alone_in_auto_and_typed_json_in_always() {
    let auto = Connected::start(StructuredOutput::Auto, false).await;
    let result = auto.call("execute", json!({"code": "x = 1"})).await;
    assert_eq!(result.is_error, Some(false));
    assert!(result.structured_content.is_none(), "{result:?}");
    let shown = text(&result);
    assert!(shown.starts_with("[ok]"), "{shown}");
    assert!(shown.contains("x = 1"), "{shown}");

    let always = Connected::start(StructuredOutput::Always, false).await;
    let result = always.call("execute", json!({"code": "x = 1"})).await;
    assert!(text(&result).starts_with("[ok]"));
    let structured = result.structured_content.expect("structuredContent");
    assert_eq!(structured["ok"], true);
    assert_eq!(structured["status"], "ok");
    assert_eq!(structured["stdout"], "x = 1\n");
}

#[tokio::test]
async fn user_code_raising_is_its_outcome_with_the_exception_named() {
    let server = Connected::start(StructuredOutput::Auto, false).await;
    let result = server
        .call("execute", json!({"code": "raise ValueError('bad')"}))
        .await;
    assert_eq!(result.is_error, Some(true));
    let shown = text(&result);
    assert!(shown.starts_with("[error]"), "{shown}");
    assert!(shown.contains("--- error: ValueError: bad ---"), "{shown}");
    // The session is fine: the next call runs.
    let next = server.call("execute", json!({"code": "y = 2"})).await;
    assert_eq!(next.is_error, Some(false), "{next:?}");
}

#[tokio::test]
async fn a_deadline_interrupts_the_run_and_says_the_namespace_survived() {
    let server = Connected::start(StructuredOutput::Always, false).await;
    let result = server
        .call(
            "execute",
            json!({"code": "while True: pass", "timeout_seconds": 0.2}),
        )
        .await;
    let structured = result.structured_content.expect("structuredContent");
    assert_eq!(structured["status"], "timeout", "{structured}");
    assert_eq!(structured["runtime"]["interruption"], "cooperative");
    assert_eq!(structured["runtime"]["namespace"], "preserved");
    // (A kernel silent for a second after an interrupt gets it once more.)
    assert!(server.kernels.interrupts() >= 1);
}

#[tokio::test]
async fn mcp_cancellation_interrupts_the_running_call_and_the_session_goes_on() {
    let server = Connected::start(StructuredOutput::Always, false).await;
    let before = server.call("runtime_status", json!({})).await;
    let epoch = before.structured_content.expect("structuredContent")["epoch"].clone();
    let request = CallToolRequestParams::new("execute").with_arguments(
        json!({"code": "time.sleep(1000)"})
            .as_object()
            .cloned()
            .expect("object"),
    );
    let running = server
        .client
        .peer()
        .send_cancellable_request(
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::Request::new(request)),
            rmcp::service::PeerRequestOptions::no_options(),
        )
        .await
        .expect("sent");
    server.kernels.started(1).await;
    running
        .cancel(Some("changed my mind".into()))
        .await
        .expect("cancel");
    // The interrupt reaches the kernel and the session is ready for the next call, which runs
    // after the cancelled one has ended (one operation at a time).
    let next = server.call("execute", json!({"code": "z = 3"})).await;
    assert_eq!(next.is_error, Some(false), "{next:?}");
    // (A kernel silent for a second after an interrupt gets it once more.)
    assert!(server.kernels.interrupts() >= 1);
    let status = server.call("runtime_status", json!({})).await;
    let status = status.structured_content.expect("structuredContent");
    assert_eq!(status["state"], "ready", "{status}");
    assert_eq!(
        status["epoch"], epoch,
        "the kernel was not replaced: {status}"
    );
}

#[tokio::test]
async fn a_tasks_client_gets_a_background_execute_as_a_task_with_the_text_result() {
    let server = Connected::start(StructuredOutput::Auto, true).await;
    let task = match server
        .respond("execute", json!({"code": "x = 1", "background": true}))
        .await
    {
        CallToolResponse::Task(created) => created.task,
        other => panic!("a task, not {other:?}"),
    };
    let peer = server.client.peer();
    // Polls tasks/get until the execution ends (the fake finishes at once; the bound is
    // for a loaded machine).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let completed = loop {
        let got = peer
            .get_task(GetTaskParams::new(task.task_id.clone()))
            .await
            .expect("tasks/get");
        if got.task.task.status != TaskStatus::Working {
            break got;
        }
        assert!(tokio::time::Instant::now() < deadline, "still working");
        tokio::task::yield_now().await;
    };
    assert_eq!(completed.task.task.status, TaskStatus::Completed);
    let TaskPayload::Completed { result } = &completed.task.payload else {
        panic!("a result: {completed:?}")
    };
    // In `Auto` the task's result has the shape of execute's: text, no structuredContent.
    assert!(result.get("structuredContent").is_none(), "{result:?}");
    assert_eq!(result["isError"], false);
    let shown = result["content"][0]["text"].as_str().expect("text");
    assert!(shown.starts_with("[ok]"), "{shown}");

    // A client without the extension gets the pending result instead.
    let plain = Connected::start(StructuredOutput::Always, false).await;
    let pending = plain
        .call("execute", json!({"code": "x = 1", "background": true}))
        .await;
    let structured = pending.structured_content.expect("structuredContent");
    assert_eq!(structured["status"], "pending", "{structured}");
}

#[tokio::test]
async fn published_tools_are_announced_and_unlisted_when_their_kernel_is_replaced() {
    let mut server = Connected::start(StructuredOutput::Auto, false).await;
    let registration = Registration {
        tool_name: "triple".into(),
        name: "triple".into(),
        description: "x * 3".into(),
        input_schema: json!({"type": "object", "properties": {"x": {"type": "integer"}}})
            .as_object()
            .cloned()
            .expect("object"),
        fingerprint: "f".into(),
        kernel: "default".into(),
        revision: 0,
    };
    // The server registers the client once it has processed `notifications/initialized`,
    // which the handshake does not wait for.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while server.state.peers().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the client was never registered"
        );
        tokio::task::yield_now().await;
    }
    let session = server.state.kernels().get(None).expect("default session");
    server
        .state
        .catalog()
        .insert(registration, &session, server.state.peers())
        .await;
    server.list_changes(1).await;
    let restarted = server.call("kernel_restart", json!({})).await;
    assert_eq!(restarted.is_error, Some(false), "{restarted:?}");
    // The replaced kernel has no registrations: its tools go, and every client is told.
    server.list_changes(2).await;
    assert!(server.state.catalog().get_tool("triple").is_none());
}

/// What a caller lists and reads is theirs (under principals, their dynamic tools and
/// notebooks): a client of the 2026-07-28 family is told to cache none of it in a shared cache.
#[tokio::test]
async fn lists_and_reads_are_marked_private_for_the_modern_family() {
    use rmcp::model::{CacheScope, ReadResourceRequestParams};
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
    let kernels = FakeKernels::new();
    let manager = KernelManager::with_fake_kernels(
        FakeKernels::session_options("default"),
        KernelLimits::default(),
        &kernels,
    );
    let config = Config::default();
    let state = ServerState::new(manager, &config, Peers::default(), None);
    let server = IpythonMcp::new(state.clone(), Arc::new(config));
    let (server_side, client_side) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(tokio::io::split(server_side)).await {
            let _ = running.waiting().await;
        }
    });
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client = ClientConfig::default()
        .serve_with_lifecycle(tokio::io::split(client_side), lifecycle)
        .await
        .expect("discovery");
    let tools = client.peer().list_tools(None).await.expect("tools/list");
    assert_eq!(
        (tools.cache_scope, tools.ttl_ms),
        (Some(CacheScope::Private), Some(0))
    );
    let resources = client
        .peer()
        .list_resources(None)
        .await
        .expect("resources/list");
    assert_eq!(
        (resources.cache_scope, resources.ttl_ms),
        (Some(CacheScope::Private), Some(0))
    );
    let read = client
        .peer()
        .read_resource(ReadResourceRequestParams::new("ipython-mcp://kernels"))
        .await
        .expect("resources/read");
    assert_eq!(
        (read.cache_scope, read.ttl_ms),
        (Some(CacheScope::Private), Some(0))
    );
    client.cancel().await.expect("close");
    state.shutdown().await;
}
