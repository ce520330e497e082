//! End to end: dynamic tools through the real binary — register a live function, see
//! it in tools/list with its generated schema, call it, watch it go stale, and get
//! `notifications/tools/list_changed` in both protocol families.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ClientConfig, ProtocolVersion, SubscriptionFilter};
use rmcp::service::{NotificationContext, RunningService, ServiceExt as _};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{json, Value};
use support::{Family, Server};

/// A handshake-era client that counts tools/list_changed notifications.
#[derive(Clone)]
struct Counting {
    changed: Arc<AtomicUsize>,
    signal: Arc<tokio::sync::Notify>,
}

impl ClientHandler for Counting {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.fetch_add(1, Ordering::SeqCst);
        self.signal.notify_waiters();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::default().with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

struct Legacy {
    client: RunningService<RoleClient, Counting>,
    counter: Counting,
    _child: tokio::process::Child,
}

impl Legacy {
    async fn start() -> Legacy {
        let mut child = support::command(&[]).spawn().expect("spawn");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take().expect("stdin");
        let counter = Counting {
            changed: Arc::default(),
            signal: Arc::default(),
        };
        let client = counter
            .clone()
            .serve((stdout, stdin))
            .await
            .expect("connect");
        let legacy = Legacy {
            client,
            counter,
            _child: child,
        };
        // Wait for the kernel (provisioning on a fresh machine takes a while).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(900);
        loop {
            let status = legacy.call("runtime_status", json!({})).await.structured;
            if status["state"] != "starting" {
                assert_eq!(status["state"], "ready", "kernel did not start: {status}");
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "kernel still starting: {status}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        legacy
    }

    async fn call(&self, tool: &str, arguments: Value) -> support::ToolResult {
        support::call_peer(self.client.peer(), tool, arguments).await
    }

    fn changes(&self) -> usize {
        self.counter.changed.load(Ordering::SeqCst)
    }

    /// Waits until more than `seen` notifications have arrived.
    async fn changed_after(&self, seen: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while self.changes() <= seen {
            let notified = self.counter.signal.notified();
            if self.changes() > seen {
                break;
            }
            assert!(
                tokio::time::timeout_at(deadline, notified).await.is_ok(),
                "no tools/list_changed after {seen}"
            );
        }
    }

    async fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .client
            .list_all_tools()
            .await
            .expect("tools/list")
            .into_iter()
            .map(|tool| tool.name.into_owned())
            .collect();
        names.sort();
        names
    }

    /// Polls tools/list until `tool` is listed (or not, as `listed` says): a list answers from
    /// the last snapshot when a kernel's reconcile takes longer than the server waits for it.
    async fn wait_listed(&self, tool: &str, listed: bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let names = self.tool_names().await;
            if names.iter().any(|name| name == tool) == listed {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{tool} listed is never {listed}: {names:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

const DEFINITIONS: &str = r#"
from typing import Literal, Optional
calls = []
def summarize(values: list[float], label: str = "total", scale: Optional[float] = None,
              mode: Literal["sum", "mean"] = "sum", tags: tuple[str, int] = ("a", 1),
              unique: set[int] = frozenset(), weights: dict[str, float] = {}, flag: bool = False) -> dict:
    """Summarize numbers.

    More detail that is not part of the description."""
    calls.append(1)
    total = sum(values) if mode == "sum" else sum(values) / len(values)
    return {"label": label, "value": total * (scale or 1), "unique": sorted(unique), "tags": list(tags)}
"#;

fn sha256_hex(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[tokio::test]
async fn a_registered_function_is_listed_called_and_goes_stale() {
    let server = Legacy::start().await;
    let defined = server.call("execute", json!({"code": DEFINITIONS})).await;
    assert!(defined.ok(), "{defined:?}");
    let before = server.changes();
    let registered = server
        .call("register_tool", json!({"name": "summarize"}))
        .await;
    assert!(registered.ok(), "{registered:?}");
    let registration = &registered.structured["registration"];
    assert_eq!(registration["tool_name"], "summarize");
    assert_eq!(registration["description"], "Summarize numbers.");
    let schema = registration["input_schema"].clone();
    assert_eq!(
        schema,
        json!({
            "type": "object",
            "properties": {
                "values": {"type": "array", "items": {"type": "number"}},
                "label": {"type": "string", "default": "total"},
                "scale": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": null},
                "mode": {"enum": ["sum", "mean"], "default": "sum"},
                "tags": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                         "items": false, "minItems": 2, "maxItems": 2, "default": ["a", 1]},
                "unique": {"type": "array", "items": {"type": "integer"}, "uniqueItems": true, "default": []},
                "weights": {"type": "object", "additionalProperties": {"type": "number"}, "default": {}},
                "flag": {"type": "boolean", "default": false},
            },
            "required": ["values"],
            "additionalProperties": false,
        })
    );
    // The fingerprint, recomputed here: SHA-256 of the sorted-key compact JSON.
    let canonical = serde_json::to_string(&schema).expect("json");
    assert_eq!(
        registration["fingerprint"],
        sha256_hex(canonical.as_bytes())
    );
    let first_revision = registration["revision"].as_u64().expect("revision");
    server.changed_after(before).await;

    // Listed with exactly that schema.
    let tools = server.client.list_all_tools().await.expect("tools/list");
    let listed = tools
        .iter()
        .find(|tool| tool.name == "summarize")
        .expect("listed");
    assert_eq!(Value::Object((*listed.input_schema).clone()), schema);
    assert!(listed.output_schema.is_some());

    // Called like a built-in tool; sets and tuples arrive converted.
    let called = server
        .call(
            "summarize",
            json!({"values": [1, 2, 3.5], "unique": [3, 1], "scale": 2, "tags": ["b", 2]}),
        )
        .await;
    assert!(called.ok(), "{called:?}");
    assert_eq!(
        called.structured["result"],
        json!({"label": "total", "value": 13.0, "unique": [1, 3], "tags": ["b", 2]})
    );
    let count = server.call("execute", json!({"code": "len(calls)"})).await;
    assert_eq!(
        count.structured["result"]["text/plain"], "1",
        "invoked exactly once"
    );
    // Arguments sent as JSON strings (as Claude Code sends them) are taken as what they spell
    // where the generated schema declares that type.
    let coerced = server
        .call(
            "summarize",
            json!({"values": "[1, 2]", "scale": "2", "flag": "true", "label": "3"}),
        )
        .await;
    assert!(coerced.ok(), "{coerced:?}");
    assert_eq!(coerced.structured["result"]["value"], 6.0);
    assert_eq!(
        coerced.structured["result"]["label"], "3",
        "a string stays a string"
    );
    let bad = server.call("summarize", json!({"values": "nope"})).await;
    assert!(bad.is_error);
    assert_eq!(bad.structured["error"]["code"], "invalid_arguments");
    let unknown_key = server
        .call("summarize", json!({"values": [1], "extra": 1}))
        .await;
    assert_eq!(unknown_key.structured["error"]["code"], "invalid_arguments");

    // A body-only redefinition keeps it working through the live binding.
    let body = DEFINITIONS.replace("total * (scale or 1)", "total * (scale or 1) + 1000");
    server.call("execute", json!({"code": body})).await;
    let called = server.call("summarize", json!({"values": [1]})).await;
    assert_eq!(called.structured["result"]["value"], 1001.0, "{called:?}");
    assert!(server.tool_names().await.contains(&"summarize".to_owned()));

    // A signature change makes it stale: unlisted (clients told), calls refused.
    let seen = server.changes();
    server
        .call(
            "execute",
            json!({"code": "def summarize(values: list[float], extra: int = 0) -> float:\n    return sum(values)"}),
        )
        .await;
    server.wait_listed("summarize", false).await;
    server.changed_after(seen).await;
    let stale = server.call("summarize", json!({"values": [1]})).await;
    assert_eq!(
        stale.structured["error"]["code"], "stale_registration",
        "{stale:?}"
    );

    // Registering again renews it, with a new fingerprint and a later revision.
    let again = server
        .call("register_tool", json!({"name": "summarize"}))
        .await;
    assert!(again.ok(), "{again:?}");
    assert_ne!(
        again.structured["registration"]["fingerprint"],
        registration["fingerprint"]
    );
    assert!(
        again.structured["registration"]["revision"]
            .as_u64()
            .expect("revision")
            > first_revision
    );
    let called = server
        .call("summarize", json!({"values": [1, 2], "extra": 1}))
        .await;
    assert_eq!(called.structured["result"], 3.0);

    // Deleting the backing name invalidates it.
    let seen = server.changes();
    server.call("remove", json!({"names": ["summarize"]})).await;
    server.wait_listed("summarize", false).await;
    server.changed_after(seen).await;

    // Rejections change nothing.
    server
        .call(
            "execute",
            json!({"code": "def ok(x: int) -> int:\n    return x\ndef untyped(x):\n    return x\nasync def coro(x: int):\n    return x\n_hidden = ok"}),
        )
        .await;
    for (arguments, code) in [
        (json!({"name": "untyped"}), "unsupported_signature"),
        (json!({"name": "coro"}), "unsupported_signature"),
        (json!({"name": "_hidden"}), "protected_name"),
        (json!({"name": "ghost"}), "name_not_found"),
        (
            json!({"name": "ok", "tool_name": "execute"}),
            "registration_conflict",
        ),
        (json!({"name": "ok", "tool_name": "9bad"}), "invalid_name"),
        (json!({"name": "ok", "kernel": "nope"}), "invalid_arguments"),
    ] {
        let refused = server.call("register_tool", arguments.clone()).await;
        assert!(refused.is_error, "{arguments}");
        assert_eq!(
            refused.structured["error"]["code"], code,
            "{arguments}: {refused:?}"
        );
    }
    let untyped = server
        .call("register_tool", json!({"name": "untyped"}))
        .await;
    assert!(
        untyped.structured["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("'x'"),
        "names the parameter: {untyped:?}"
    );
    let registered = server
        .call(
            "register_tool",
            json!({"name": "ok", "tool_name": "echo-int"}),
        )
        .await;
    assert!(registered.ok());
    let twice = server
        .call("register_tool", json!({"name": "ok", "tool_name": "other"}))
        .await;
    assert_eq!(twice.structured["error"]["code"], "registration_conflict");

    // unregister_tool: idempotent, and it cannot touch a built-in tool.
    let seen = server.changes();
    let removed = server
        .call(
            "unregister_tool",
            json!({"names": ["echo-int", "execute", "never"]}),
        )
        .await;
    assert_eq!(removed.structured["unregistered"], json!(["echo-int"]));
    assert_eq!(removed.structured["refused"], json!(["execute"]));
    assert_eq!(removed.structured["unknown"], json!(["never"]));
    server.changed_after(seen).await;
    let again = server
        .call("unregister_tool", json!({"names": ["echo-int"]}))
        .await;
    assert_eq!(again.structured["unknown"], json!(["echo-int"]));
    assert!(server.tool_names().await.contains(&"execute".to_owned()));

    // reset drops the catalog; so does a kernel restart.
    server.call("register_tool", json!({"name": "ok"})).await;
    let seen = server.changes();
    let reset = server.call("reset", json!({})).await;
    // `ok`, and the stale `summarize` registration (stale entries stay until renewed or reset).
    assert_eq!(reset.structured["tools_dropped"], 2, "{reset:?}");
    server.changed_after(seen).await;
    assert!(!server.tool_names().await.contains(&"ok".to_owned()));
    server
        .call(
            "execute",
            json!({"code": "def ok(x: int) -> int:\n    return x"}),
        )
        .await;
    server.call("register_tool", json!({"name": "ok"})).await;
    let seen = server.changes();
    server.call("kernel_restart", json!({})).await;
    server.changed_after(seen).await;
    assert!(!server.tool_names().await.contains(&"ok".to_owned()));
    let gone = server
        .client
        .peer()
        .call_tool(
            CallToolRequestParams::new("ok")
                .with_arguments(json!({"x": 1}).as_object().cloned().expect("object")),
        )
        .await;
    assert!(
        gone.is_err(),
        "an unknown tool is a protocol error: {gone:?}"
    );
    let _ = server.client.cancel().await;
}

#[tokio::test]
async fn the_catalog_is_bounded_and_modern_clients_hear_changes_by_subscription() {
    let server = Server::start(Family::Modern, &[("IPYTHON_MCP_MAX_DYNAMIC_TOOLS", "3")]).await;
    let mut subscription = server
        .client
        .peer()
        .listen(SubscriptionFilter::builder().tools_list_changed().build())
        .await
        .expect("subscriptions/listen");
    server
        .call(
            "execute",
            json!({"code": "def f1(a: int) -> int: return a\ndef f2(a: int) -> int: return a\ndef f3(a: int) -> int: return a\ndef f4(a: int) -> int: return a"}),
        )
        .await;
    let mut revisions = Vec::new();
    for name in ["f1", "f2", "f3"] {
        let registered = server.call("register_tool", json!({"name": name})).await;
        assert!(registered.ok(), "{registered:?}");
        revisions.push(
            registered.structured["registration"]["revision"]
                .as_u64()
                .expect("revision"),
        );
        let notification = tokio::time::timeout(Duration::from_secs(60), subscription.next())
            .await
            .expect("a notification in time")
            .expect("subscription open")
            .expect("a notification");
        assert!(
            matches!(
                notification,
                rmcp::model::ServerNotification::ToolListChangedNotification(_)
            ),
            "{notification:?}"
        );
    }
    assert!(
        revisions.windows(2).all(|pair| pair[0] < pair[1]),
        "{revisions:?}"
    );
    let full = server.call("register_tool", json!({"name": "f4"})).await;
    assert_eq!(
        full.structured["error"]["code"], "limit_exceeded",
        "{full:?}"
    );
    let listed = server.client.list_all_tools().await.expect("tools/list");
    let dynamic: Vec<&str> = listed
        .iter()
        .map(|tool| tool.name.as_ref())
        .filter(|name| name.starts_with('f'))
        .collect();
    assert_eq!(dynamic, vec!["f1", "f2", "f3"]);
    let called = server.call("f2", json!({"a": 7})).await;
    assert_eq!(called.structured["result"], 7);
    server.stop().await;
}

#[tokio::test]
async fn a_reaped_kernel_takes_its_tools_with_it_and_clients_hear_it() {
    let server = Server::start(
        Family::Modern,
        &[("IPYTHON_MCP_KERNEL_IDLE_TIMEOUT_SECONDS", "3")],
    )
    .await;
    let status = server.call("runtime_status", json!({})).await;
    let python = status.structured["kernel"]["python"]
        .as_str()
        .expect("python")
        .to_owned();
    let started = server
        .call("kernel_start", json!({"spec": python, "kernel": "side"}))
        .await;
    assert!(started.ok(), "{started:?}");
    server
        .call(
            "execute",
            json!({"code": "def side_tool(a: int) -> int: return a", "kernel": "side"}),
        )
        .await;
    let mut subscription = server
        .client
        .peer()
        .listen(SubscriptionFilter::builder().tools_list_changed().build())
        .await
        .expect("subscriptions/listen");
    let registered = server
        .call(
            "register_tool",
            json!({"name": "side_tool", "kernel": "side"}),
        )
        .await;
    assert!(registered.ok(), "{registered:?}");
    next_notification(&mut subscription).await;
    // Nobody touches `side`: the reaper stops it, and clients are told without asking.
    next_notification(&mut subscription).await;
    let list = server.call("kernel_list", json!({})).await;
    assert_eq!(
        list.structured["kernels"]
            .as_array()
            .expect("kernels")
            .len(),
        1
    );
    let listed = server.client.list_all_tools().await.expect("tools/list");
    assert!(!listed.iter().any(|tool| tool.name == "side_tool"));
    server.stop().await;
}

async fn next_notification(subscription: &mut rmcp::service::Subscription) {
    tokio::time::timeout(Duration::from_secs(60), subscription.next())
        .await
        .expect("a notification in time")
        .expect("subscription open")
        .expect("a notification");
}

/// tools/list on a busy kernel with dynamic tools coalesces its catalog checks into one, which
/// waits in the session's reserved slot rather than a user's: 200 lists during a long job keep
/// serving the snapshot, the queue holds at most that one check beside the user's calls, and
/// the user's next execute is admitted (queued, not runtime_busy) and runs once the job ends.
#[tokio::test]
async fn two_hundred_tool_lists_during_a_long_job_leave_the_queue_to_the_user() {
    // A queue wait longer than the test, so the one pending check stays queued throughout.
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_QUEUE_WAIT_TIMEOUT_SECONDS", "600")],
    )
    .await;
    let defined = server
        .call(
            "execute",
            json!({"code": "def ping() -> str:\n    return 'pong'"}),
        )
        .await;
    assert!(defined.ok(), "{defined:?}");
    let registered = server.call("register_tool", json!({"name": "ping"})).await;
    assert!(registered.ok(), "{registered:?}");

    let flag = support::Flag::new();
    let spawn_execute = |code: String| {
        let peer = server.client.peer().clone();
        tokio::spawn(
            async move { support::call_peer(&peer, "execute", json!({"code": code})).await },
        )
    };
    let job = spawn_execute(flag.wait_code());
    server
        .wait_until(|status| status["operation_active"] == true)
        .await;

    // Watch the queue depth while the lists run: nothing but the one check may join the job.
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = tokio::spawn({
        let peer = server.client.peer().clone();
        let watching = Arc::clone(&watching);
        async move {
            let mut deepest = 0;
            while watching.load(Ordering::SeqCst) {
                let status = support::call_peer(&peer, "runtime_status", json!({})).await;
                deepest = deepest.max(status.structured["queue_depth"].as_u64().expect("depth"));
            }
            deepest
        }
    });
    let mut lists = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let peer = server.client.peer().clone();
        lists.spawn(async move { peer.list_all_tools().await.expect("tools/list") });
    }
    while let Some(tools) = lists.join_next().await {
        let tools = tools.expect("join");
        assert!(
            tools.iter().any(|tool| tool.name == "ping"),
            "the snapshot still lists the tool"
        );
    }
    watching.store(false, Ordering::SeqCst);
    let deepest = watcher.await.expect("join");
    assert!(
        deepest <= 1,
        "queue depth reached {deepest} with no user call queued"
    );
    let status = server.call("runtime_status", json!({})).await.structured;
    assert_eq!(status["queue_depth"], 1, "one pending check: {status}");

    let next = spawn_execute("ping()".to_owned());
    let status = server.wait_until(|status| status["queue_depth"] != 1).await;
    assert_eq!(status["queue_depth"], 2, "the execute is queued: {status}");
    assert!(!next.is_finished(), "it waits for the job, not refused");
    flag.set();
    let job = job.await.expect("join");
    assert!(job.ok(), "{job:?}");
    let next = next.await.expect("join");
    assert!(next.ok(), "{next:?}");
    assert!(next.text().contains("pong"), "{next:?}");
    let status = server.wait_until(|status| status["queue_depth"] == 0).await;
    assert_eq!(status["state"], "ready", "{status}");
    // The check ran after the job: the tool is still live, and still listed.
    let tools = server.client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|tool| tool.name == "ping"), "{tools:?}");
}
