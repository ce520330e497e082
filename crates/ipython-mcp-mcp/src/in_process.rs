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
            ..FakeKernels::session_options("default")
        };
        let manager = KernelManager::with_fake_kernels(options, KernelLimits::default(), &kernels);
        let config = Config {
            structured_output: shape,
            ..Config::default()
        };
        let state = ServerState::new(manager, &config, Peers::default());
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
    let state = ServerState::new(manager, &config, Peers::default());
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
