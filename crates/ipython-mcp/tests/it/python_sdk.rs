//! Interop: the official Python MCP SDK (`mcp` from PyPI) drives the real binary over stdio and
//! over HTTP, once per protocol family (`legacy` = initialize handshake, `auto` = 2026-07-28
//! discover).
//! The SDK validates `structuredContent` against each tool's `outputSchema`, so this also
//! checks that our results match the schemas we advertise: in the `always` result shape over
//! stdio, in the default `auto` shape over HTTP.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncBufReadExt as _;

fn target_tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// The managed Python (provisioned through the product's own path) with the SDK installed
/// beside it.
async fn python_with_sdk() -> (PathBuf, PathBuf) {
    support::python_with("mcp==2.3.0", "mcp", "mcp-sdk-deps").await
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python_sdk_client.py")
}

#[tokio::test]
async fn the_python_sdk_client_works_in_both_protocol_families() {
    let (python, deps) = python_with_sdk().await;
    let output = Command::new(&python)
        .arg(script())
        .arg(env!("CARGO_BIN_EXE_ipython-mcp"))
        .env("PYTHONPATH", &deps)
        .env(
            "IPYTHON_MCP_CACHE_DIR",
            target_tmp().join("ipython-mcp-cache"),
        )
        .env("IPYTHON_MCP_STRUCTURED_OUTPUT", "always")
        .output()
        .expect("run the SDK client");
    for run in check_output(&output) {
        check_run(&run, Shape::Always);
    }
}

#[tokio::test]
async fn the_python_sdk_client_works_over_http_in_both_protocol_families() {
    const TOKEN: &str = "python-sdk-token-0123456789";
    let (python, deps) = python_with_sdk().await;
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_ipython-mcp"))
        .args(["--transport", "http", "--port", "0"])
        .env(
            "IPYTHON_MCP_CACHE_DIR",
            target_tmp().join("ipython-mcp-cache"),
        )
        .env("IPYTHON_MCP_LOG", "warn")
        .env("IPYTHON_MCP_SPARE_KERNELS", "0")
        .env("IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS", "120")
        .env("IPYTHON_MCP_HTTP_TOKEN", TOKEN)
        // The fixtures add the hook that broadcasts tools/list_changed.
        .env("IPYTHON_MCP_TEST_MODE", "fixtures")
        .env_remove("VIRTUAL_ENV")
        .env_remove("IPYTHON_MCP_PYTHON")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let mut lines = tokio::io::BufReader::new(server.stderr.take().expect("stderr")).lines();
    let url = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("URL printed at once")
            .expect("read")
            .expect("server running");
        if let Some(url) = line.strip_prefix("ipython-mcp: serving MCP over HTTP at ") {
            break url.trim().to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let client = tokio::process::Command::new(&python)
        .arg(script())
        .args(["--http", &url, TOKEN])
        .env("PYTHONPATH", &deps)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(900), client)
        .await
        .expect("the SDK client finishes")
        .expect("run the SDK client");
    for run in check_output(&output) {
        check_run(&run, Shape::Auto);
        assert_eq!(run["fixtures_listed"], true, "{run}");
        assert_eq!(run["list_changed"], true, "tools/list_changed heard: {run}");
        assert_eq!(run["refused_without_token"], true, "{run}");
    }
    let pid = server.id().expect("pid") as i32;
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    // The server drains connections for up to 3 s, then shuts its sessions down (each bounded).
    let status = tokio::time::timeout(Duration::from_secs(60), server.wait())
        .await
        .expect("exit after SIGTERM")
        .expect("wait");
    assert!(status.success());
}

fn check_output(output: &std::process::Output) -> Vec<Value> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "SDK client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let runs: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("json line"))
        .collect();
    assert_eq!(runs.len(), 2);
    for (run, protocol) in runs.iter().zip(["2025-11-25", "2026-07-28"]) {
        assert_eq!(run["protocol"], protocol, "{run}");
    }
    runs
}

/// The result shape the server was started with (`IPYTHON_MCP_STRUCTURED_OUTPUT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Auto,
    Always,
}

fn text(seen: &Value) -> &str {
    seen["text"].as_str().expect("text")
}

fn check_run(run: &Value, shape: Shape) {
    assert_eq!(run["tools"], serde_json::json!(support::TOOLS), "{run}");
    assert_eq!(run["schema_errors"], serde_json::json!([]), "{run}");
    // Wrong types (booleans and numbers as strings too), unknown and missing fields.
    assert_eq!(run["bad_arguments"], serde_json::json!([]), "{run}");
    assert!(
        run["bad_argument_calls"].as_u64().expect("count") > 100,
        "{run}"
    );
    let image_tools = [
        "execute",
        "get_output",
        "notebook_execute",
        "notebook_execute_cell",
    ];
    let without_schema: &[&str] = match shape {
        Shape::Auto => &image_tools,
        Shape::Always => &[],
    };
    assert_eq!(
        run["without_output_schema"],
        serde_json::json!(without_schema),
        "{run}"
    );
    assert_eq!(run["state"], "ready");
    let (first, failed) = (&run["first"], &run["failed"]);
    assert_eq!(first["is_error"], false, "{run}");
    assert!(text(first).contains("hello"), "{run}");
    assert_eq!(failed["is_error"], true, "{run}");
    match shape {
        Shape::Always => {
            assert_eq!(first["structured"]["result"]["text/plain"], "42");
            assert_eq!(first["structured"]["stdout"], "hello\n");
            assert_eq!(failed["structured"]["error"]["code"], "execution_error");
            assert_eq!(failed["structured"]["error"]["ename"], "ValueError");
        }
        Shape::Auto => {
            assert!(first["structured"].is_null(), "{run}");
            assert!(text(first).contains("--- stdout ---\nhello\n"), "{run}");
            assert!(text(first).contains("--- result ---\n42"), "{run}");
            assert!(failed["structured"].is_null(), "{run}");
            assert!(
                text(failed).contains("--- error: ValueError: nope ---"),
                "{run}"
            );
        }
    }
    // About one notification a second while the cell runs (so at most one per started second
    // of its measured run time), each carrying the latest output line.
    let progress = run["progress"].as_array().expect("progress");
    let run_ms = run["progress_run_ms"].as_u64().expect("run_ms");
    let most = usize::try_from(run_ms / 1000 + 1).expect("small");
    assert!(
        (1..=most).contains(&progress.len()),
        "{} notifications in {run_ms} ms: {progress:?}",
        progress.len()
    );
    let messages: Vec<&str> = progress
        .iter()
        .map(|update| update["message"].as_str().expect("message"))
        .collect();
    assert!(
        messages.iter().any(|message| message.starts_with("step ")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .all(|message| *message == "running, no output yet"
                || message
                    .strip_prefix("step ")
                    .is_some_and(|n| n.parse::<u32>().is_ok_and(|n| n < 5))),
        "{messages:?}"
    );
    let values: Vec<f64> = progress
        .iter()
        .filter_map(|update| update["progress"].as_f64())
        .collect();
    assert!(
        values.windows(2).all(|pair| pair[0] < pair[1]),
        "progress increases: {values:?}"
    );
    let namespace = &run["namespace"];
    assert_eq!(
        namespace["list"][0]["structured"]["functions"][0]["name"], "double",
        "{run}"
    );
    assert_eq!(
        namespace["search"][0]["structured"]["results"][0]["name"],
        "table"
    );
    assert_eq!(
        namespace["inspect"][0]["structured"]["signature"],
        "(v: int) -> int"
    );
    assert_eq!(namespace["call_function"][0]["structured"]["result"], 42);
    assert_eq!(namespace["call_function"][1]["is_error"], true);
    assert_eq!(
        namespace["call_function"][1]["structured"]["error"]["code"],
        "invalid_arguments"
    );
    assert_eq!(
        namespace["reload"][0]["structured"]["results"][1]["error"]["code"],
        "module_not_found"
    );
    assert_eq!(
        namespace["remove"][0]["structured"]["refused"],
        serde_json::json!(["_x"])
    );
    assert_eq!(
        namespace["reset"][0]["structured"]["removed"],
        serde_json::json!(["double", "i", "time", "x"])
    );
    match shape {
        Shape::Always => {
            let background = &namespace["execute"][0]["structured"];
            assert_eq!(background["status"], "pending", "{run}");
            let finished = &namespace["get_output"][0]["structured"];
            assert_eq!(finished["finished"], true, "{run}");
            assert_eq!(finished["stdout"], "row 0\nrow 1\nrow 2\n");
            let page = &namespace["get_output"][1]["structured"]["page"];
            assert_eq!(page["total_matches"], 2, "{run}");
            assert_eq!(page["lines"][0]["line"], 2);
        }
        Shape::Auto => {
            let background = text(&namespace["execute"][0]);
            assert!(background.starts_with("[pending]"), "{run}");
            assert!(
                background.contains("still running as execution_id"),
                "{run}"
            );
            let finished = text(&namespace["get_output"][0]);
            assert!(finished.starts_with("[ok]"), "{run}");
            assert!(finished.contains("row 0\nrow 1\nrow 2\n"), "{run}");
            let page = text(&namespace["get_output"][1]);
            assert!(page.contains("lines matching /row [12]/: 2 of"), "{run}");
            assert!(page.contains("     2: row 1"), "{run}");
        }
    }
    assert_eq!(
        namespace["kernel_list"][0]["structured"]["kernels"][0]["kernel"],
        "default"
    );
    assert_eq!(namespace["kernel_discover"][0]["is_error"], false);
    assert_eq!(
        namespace["kernel_start"][0]["structured"]["kernel"], "second",
        "{run}"
    );
    assert_eq!(namespace["kernel_start"][0]["structured"]["ok"], true);
    assert_eq!(namespace["kernel_stop"][0]["structured"]["state"], "closed");
    let registration = &namespace["register_tool"][0]["structured"]["registration"];
    assert_eq!(registration["tool_name"], "triple", "{run}");
    assert_eq!(namespace["triple"][0]["structured"]["result"], 42, "{run}");
    assert_eq!(namespace["triple"][1]["is_error"], true);
    assert_eq!(
        namespace["triple"][1]["structured"]["error"]["code"],
        "invalid_arguments"
    );
    assert_eq!(
        namespace["unregister_tool"][0]["structured"]["refused"],
        serde_json::json!(["execute"])
    );
    assert!(
        !run["listed_after"]
            .as_array()
            .expect("tools")
            .iter()
            .any(|tool| tool == "triple"),
        "{run}"
    );
}
