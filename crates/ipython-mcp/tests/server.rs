//! End-to-end tests: the built `ipython-mcp` binary, driven over stdio by a real MCP client
//! (rmcp's), against a real ipykernel provisioned by the product itself (the managed default
//! environment, in a cache directory shared by the tests of this run).

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{Family, Server};

#[tokio::test]
async fn tools_are_listed_with_schemas_and_annotations() {
    for family in [Family::Handshake, Family::Modern] {
        let server = Server::start(family, &[]).await;
        let tools = server.client.list_all_tools().await.expect("tools/list");
        let mut names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
        names.sort_unstable();
        assert_eq!(names, support::TOOLS, "{family:?}");
        for tool in &tools {
            assert!(
                tool.output_schema.is_some(),
                "{} has an outputSchema",
                tool.name
            );
            assert!(tool.annotations.is_some(), "{} has annotations", tool.name);
            assert!(
                tool.description.as_deref().unwrap_or("").len() > 200,
                "{} is described for agents",
                tool.name
            );
            // A tool without parameters (kernel_list) may have no properties at all.
            let properties = tool
                .input_schema
                .get("properties")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            for (name, schema) in &properties {
                assert!(
                    schema.get("description").is_some(),
                    "{}.{name} is described",
                    tool.name
                );
            }
        }
        let execute = server.call("execute", json!({"code": "40 + 2"})).await;
        assert_eq!(
            execute.structured["result"]["text/plain"], "42",
            "{family:?}"
        );
        server.stop().await;
    }
}

#[tokio::test]
async fn state_persists_across_calls() {
    let server = Server::start(Family::Handshake, &[]).await;
    let first = server
        .call(
            "execute",
            json!({"code": "x = 41\ndef inc(v):\n    return v + 1"}),
        )
        .await;
    assert!(first.ok(), "{first:?}");
    let second = server.call("execute", json!({"code": "inc(x)"})).await;
    assert!(second.ok(), "{second:?}");
    assert_eq!(second.structured["result"]["text/plain"], "42");
    let first_count = first.structured["execution_count"].as_u64().expect("count");
    assert_eq!(
        second.structured["execution_count"].as_u64(),
        Some(first_count + 1)
    );
    assert!(
        second.text().contains("42"),
        "the text block carries the result: {}",
        second.text()
    );
    server.stop().await;
}

#[tokio::test]
async fn an_exception_is_a_structured_error() {
    let server = Server::start(Family::Handshake, &[]).await;
    let result = server
        .call("execute", json!({"code": "print('before')\n1/0"}))
        .await;
    assert!(result.is_error, "isError is set when ok is false");
    assert_eq!(result.structured["ok"], false);
    assert_eq!(result.structured["status"], "error");
    assert_eq!(result.structured["stdout"], "before\n");
    let error = &result.structured["error"];
    assert_eq!(error["code"], "execution_error");
    assert_eq!(error["ename"], "ZeroDivisionError");
    assert_eq!(error["evalue"], "division by zero");
    let traceback = error["traceback"].as_str().expect("traceback");
    assert!(traceback.contains("ZeroDivisionError"), "{traceback}");
    assert!(
        !traceback.contains('\u{1b}'),
        "no ANSI escapes: {traceback:?}"
    );
    // The kernel is fine afterwards.
    let after = server
        .call("execute", json!({"code": "'still here'"}))
        .await;
    assert!(after.ok());
    server.stop().await;
}

#[tokio::test]
async fn truncation_counts_are_exact() {
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_MAX_TEXT_CHARS", "1000")]).await;
    let result = server
        .call(
            "execute",
            json!({"code": "import sys\nprint('a' * 20000)\nsys.stderr.write('e' * 1500)"}),
        )
        .await;
    assert!(result.ok(), "{result:?}");
    let stdout = result.structured["stdout"].as_str().expect("stdout");
    assert_eq!(stdout, "a".repeat(1000));
    assert_eq!(result.structured["stdout_omitted_chars"], 20001 - 1000);
    assert_eq!(
        result.structured["stderr"].as_str().map(str::len),
        Some(1000)
    );
    assert_eq!(result.structured["stderr_omitted_chars"], 500);
    assert_eq!(result.structured["truncated"]["stdout"], true);
    assert_eq!(result.structured["truncated"]["stderr"], true);
    assert!(
        result
            .text()
            .contains("19001 more characters of stdout omitted"),
        "{}",
        result.text()
    );

    // Many small writes and progress bars: the count stays exact.
    let result = server
        .call("execute", json!({"code": "for i in range(5000):\n    print(f'line {i:05d}')\nfor i in range(1000):\n    print(f'\\r{i:04d}', end='')\nprint('\\ndone')"}))
        .await;
    let total = 5000 * 11 + 4 + 1 + 5;
    let stdout = result.structured["stdout"].as_str().expect("stdout");
    assert_eq!(stdout.len(), 1000);
    assert!(stdout.starts_with("line 00000\nline 00001\n"));
    assert_eq!(result.structured["stdout_omitted_chars"], total - 1000);
    server.stop().await;
}

#[tokio::test]
async fn carriage_returns_and_clear_output_are_applied() {
    let server = Server::start(Family::Handshake, &[]).await;
    let code = "import sys, time\nfor i in range(200):\n    sys.stdout.write(f'\\rprogress {i:3d}%')\nprint()\nprint('done')";
    let result = server.call("execute", json!({"code": code})).await;
    assert_eq!(result.structured["stdout"], "progress 199%\ndone\n");
    assert_eq!(result.structured["stdout_omitted_chars"], 0);

    let code = "from IPython.display import clear_output, display\nprint('old')\ndisplay('shown')\nclear_output()\nprint('new')";
    let result = server.call("execute", json!({"code": code})).await;
    assert_eq!(result.structured["stdout"], "new\n");
    assert_eq!(result.structured["display_data"], json!([]));

    let code = "from IPython.display import clear_output\nfor i in range(3):\n    clear_output(wait=True)\n    print(f'step {i}')";
    let result = server.call("execute", json!({"code": code})).await;
    assert_eq!(result.structured["stdout"], "step 2\n");
    server.stop().await;
}

#[tokio::test]
async fn a_png_display_arrives_as_image_content() {
    let server = Server::start(Family::Modern, &[]).await;
    let code = r#"
import struct, zlib
from IPython.display import Image, display
def chunk(kind, body):
    return struct.pack('>I', len(body)) + kind + body + struct.pack('>I', zlib.crc32(kind + body) & 0xffffffff)
w, h = 4, 3
raw = b''.join(b'\x00' + b'\xff\x00\x00' * w for _ in range(h))
png = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')
display(Image(data=png))
len(png)
"#;
    let result = server.call("execute", json!({"code": code})).await;
    assert!(result.ok(), "{result:?}");
    let images = result.images();
    assert_eq!(images.len(), 1, "one image block");
    assert_eq!(images[0].0, "image/png");
    let expected_len: usize = result.structured["result"]["text/plain"]
        .as_str()
        .expect("len")
        .parse()
        .expect("int");
    assert_eq!(images[0].1.len(), expected_len);
    assert!(images[0].1.starts_with(b"\x89PNG\r\n\x1a\n"));
    let reference = result.structured["display_data"][0]["data"]["image/png"]
        .as_str()
        .expect("reference");
    assert!(
        reference.contains("returned as MCP image content #1"),
        "{reference}"
    );

    let svg = r#"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>"#;
    let code = format!("from IPython.display import SVG, display\ndisplay(SVG({svg:?}))");
    let result = server.call("execute", json!({"code": code})).await;
    let images = result.images();
    assert_eq!(images.len(), 1, "{result:?}");
    assert_eq!(images[0].0, "image/svg+xml");
    assert_eq!(String::from_utf8_lossy(&images[0].1), svg);
    server.stop().await;
}

#[tokio::test]
async fn huge_output_keeps_server_memory_bounded() {
    let server = Server::start(Family::Handshake, &[]).await;
    server.call("execute", json!({"code": "1"})).await;
    let before = server.peak_rss_kib();
    let result = server
        .call("execute", json!({"code": "import sys\nsys.stdout.write('x' * 200_000_000)\nfor _ in range(20):\n    print('y' * 999_999)", "timeout_seconds": 120}))
        .await;
    assert!(result.ok(), "{result:?}");
    assert_eq!(
        result.structured["stdout_omitted_chars"],
        200_000_000 + 20 * 1_000_000 - 8192
    );
    // VmHWM is max(recorded high-water mark, current RSS), and the kernel updates the mark
    // lazily, so a later reading can be lower than an earlier one.
    let growth_mib = server.peak_rss_kib().saturating_sub(before) / 1024;
    assert!(
        growth_mib <= 16,
        "server peak RSS grew by {growth_mib} MiB while the kernel printed 220 MB"
    );
    // A huge final value and a huge exception message are bounded too.
    let result = server
        .call("execute", json!({"code": "'z' * 50_000_000"}))
        .await;
    assert_eq!(result.structured["truncated"]["result"], true);
    assert!(
        result.structured["result"]["text/plain"]
            .as_str()
            .expect("text")
            .len()
            <= 8192
    );
    // VmHWM is max(recorded high-water mark, current RSS), and the kernel updates the mark
    // lazily, so a later reading can be lower than an earlier one.
    let growth_mib = server.peak_rss_kib().saturating_sub(before) / 1024;
    assert!(growth_mib <= 16, "server peak RSS grew by {growth_mib} MiB");
    server.stop().await;
}

#[tokio::test]
async fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let server = Server::start(Family::Handshake, &[]).await;
    server
        .call("execute", json!({"code": "marker = 'kept'"}))
        .await;
    let unknown_field = server
        .call_raw("execute", json!({"code": "1", "bogus": true}))
        .await;
    assert!(unknown_field.is_error);
    assert!(
        unknown_field.text().contains("bogus"),
        "{}",
        unknown_field.text()
    );
    let wrong_type = server.call_raw("execute", json!({"code": 5})).await;
    assert!(wrong_type.is_error);
    let huge = server
        .call(
            "execute",
            json!({"code": format!("# {}", "x".repeat(10 * 1024 * 1024))}),
        )
        .await;
    assert!(huge.is_error);
    assert_eq!(huge.structured["error"]["code"], "invalid_arguments");
    assert_eq!(huge.structured["status"], "rejected");
    let bad_timeout = server
        .call("execute", json!({"code": "1", "timeout_seconds": -1}))
        .await;
    assert_eq!(bad_timeout.structured["error"]["code"], "invalid_arguments");
    let unknown_kernel = server
        .call("execute", json!({"code": "1", "kernel": "nope"}))
        .await;
    assert_eq!(
        unknown_kernel.structured["error"]["code"],
        "invalid_arguments"
    );
    let status = server
        .call("runtime_status", json!({"kernel": "nope"}))
        .await;
    assert!(status.is_error);
    // Nothing ran: the execution count did not move and state is intact.
    let check = server.call("execute", json!({"code": "marker"})).await;
    assert_eq!(check.structured["result"]["text/plain"], "'kept'");
    assert_eq!(check.structured["execution_count"], 2);
    server.stop().await;
}

#[tokio::test]
async fn output_that_is_not_valid_utf8_is_replaced_not_lost() {
    let server = Server::start(Family::Handshake, &[]).await;
    let code = "import os, sys\nprint('lone \\ud800 surrogate')\nsys.stdout.flush()\nos.write(1, b'raw \\xff\\xfe bytes\\n')\n'after'";
    let result = server
        .call("execute", json!({"code": code, "timeout_seconds": 10}))
        .await;
    assert!(result.ok(), "{result:?}");
    let stdout = result.structured["stdout"].as_str().expect("stdout");
    assert!(stdout.contains("lone"), "{stdout:?}");
    assert!(stdout.contains("surrogate"), "{stdout:?}");
    assert_eq!(result.structured["result"]["text/plain"], "'after'");
    server.stop().await;
}

#[tokio::test]
async fn timeouts_interrupt_and_preserve_or_replace_the_kernel() {
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "1")],
    )
    .await;
    server.call("execute", json!({"code": "kept = 1"})).await;
    let result = server
        .call(
            "execute",
            json!({"code": "import time\npartial = 2\ntime.sleep(30)", "timeout_seconds": 1.5}),
        )
        .await;
    assert_eq!(result.structured["status"], "timeout");
    assert_eq!(result.structured["error"]["code"], "operation_timeout");
    assert_eq!(result.structured["runtime"]["interruption"], "cooperative");
    assert_eq!(result.structured["runtime"]["namespace"], "preserved");
    let check = server
        .call("execute", json!({"code": "kept + partial"}))
        .await;
    assert_eq!(check.structured["result"]["text/plain"], "3");

    // A loop that ignores KeyboardInterrupt: the kernel is killed and replaced.
    let code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass";
    let result = server
        .call("execute", json!({"code": code, "timeout_seconds": 1.5}))
        .await;
    assert_eq!(result.structured["status"], "timeout");
    assert_eq!(result.structured["runtime"]["interruption"], "terminated");
    assert_eq!(result.structured["runtime"]["namespace"], "reset");
    let status = server.call("runtime_status", json!({})).await;
    assert_eq!(status.structured["epoch"], 1);
    assert_eq!(status.structured["state"], "ready");
    let check = server
        .call("execute", json!({"code": "'kept' in globals()"}))
        .await;
    assert_eq!(check.structured["result"]["text/plain"], "False");
    assert_eq!(check.structured["runtime"]["epoch"], 1);
    server.stop().await;
}

#[tokio::test]
async fn a_dying_kernel_is_reported_and_replaced() {
    let server = Server::start(Family::Handshake, &[]).await;
    let before = server.call("runtime_status", json!({})).await;
    let pid = before.structured["kernel"]["pid"].as_u64().expect("pid");
    let child = server
        .call(
            "execute",
            json!({"code": "import subprocess\nsubprocess.Popen(['sleep', '300']).pid"}),
        )
        .await;
    let orphan: i32 = child.structured["result"]["text/plain"]
        .as_str()
        .expect("pid")
        .parse()
        .expect("int");
    let result = server
        .call("execute", json!({"code": "import os\nos._exit(3)"}))
        .await;
    assert!(result.is_error);
    assert_eq!(result.structured["error"]["code"], "kernel_died");
    // What the dead kernel started dies with it.
    support::wait_until_gone(orphan).await;
    assert_eq!(result.structured["runtime"]["namespace"], "reset");
    let after = server
        .call("execute", json!({"code": "import os\nos.getpid()"}))
        .await;
    assert!(after.ok(), "{after:?}");
    assert_ne!(
        after.structured["result"]["text/plain"]
            .as_str()
            .and_then(|p| p.parse::<u64>().ok()),
        Some(pid)
    );
    server.stop().await;
}

#[tokio::test]
async fn runtime_status_describes_the_kernel() {
    let server = Server::start(Family::Modern, &[]).await;
    let status = server.call("runtime_status", json!({})).await;
    assert!(status.ok());
    let status = &status.structured;
    assert_eq!(status["state"], "ready");
    assert_eq!(status["epoch"], 0);
    assert_eq!(status["queue_depth"], 0);
    assert_eq!(status["operation_active"], false);
    assert!(status["kernel"]["python_version"]
        .as_str()
        .expect("version")
        .starts_with('3'));
    assert!(status["kernel"]["ipykernel_version"].as_str().is_some());
    assert_eq!(status["environment"]["phase"], "ready");
    server.stop().await;
}

#[tokio::test]
async fn status_is_answered_while_code_runs() {
    let server = Server::start(Family::Handshake, &[]).await;
    let client = server.client.peer().clone();
    let running = tokio::spawn(async move {
        support::call_peer(
            &client,
            "execute",
            json!({"code": "import time\ntime.sleep(3)\n'slept'"}),
        )
        .await
    });
    let mut saw_busy = false;
    for _ in 0..100 {
        let status = server.call("runtime_status", json!({})).await;
        if status.structured["operation_active"] == true {
            assert_eq!(status.structured["state"], "busy");
            saw_busy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(saw_busy, "runtime_status answered during the execution");
    let finished = running.await.expect("join");
    assert_eq!(finished.structured["result"]["text/plain"], "'slept'");
    server.stop().await;
}

#[tokio::test]
async fn stdout_carries_only_json_rpc() {
    let lines = support::raw_session(&[
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "execute", "arguments": {"code": "import os, sys\nprint('to stdout')\nos.write(1, b'fd one\\n')\nos.system('echo from a subprocess')\nsys.__stdout__.write('dunder\\n')"}}}),
    ])
    .await;
    assert!(lines.len() >= 2, "{lines:?}");
    for line in &lines {
        let message: Value = serde_json::from_str(line)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {line:?}"));
        assert_eq!(message["jsonrpc"], "2.0", "{line}");
    }
    let reply: Value = serde_json::from_str(lines.last().expect("reply")).expect("json");
    assert_eq!(reply["id"], 2);
    assert!(reply["result"]["structuredContent"]["stdout"]
        .as_str()
        .expect("stdout")
        .contains("to stdout"));
}

#[tokio::test]
async fn closing_stdin_leaves_no_kernel_behind() {
    let server = Server::start(Family::Handshake, &[]).await;
    let status = server.call("runtime_status", json!({})).await;
    let pid = status.structured["kernel"]["pid"].as_u64().expect("pid") as i32;
    // A grandchild started by user code dies with the kernel's process group.
    let child = server
        .call(
            "execute",
            json!({"code": "import subprocess\np = subprocess.Popen(['sleep', '300'])\np.pid"}),
        )
        .await;
    let grandchild: i32 = child.structured["result"]["text/plain"]
        .as_str()
        .expect("pid")
        .parse()
        .expect("int");
    let server_pid = server.pid;
    server.stop().await;
    support::wait_until_gone(server_pid as i32).await;
    support::wait_until_gone(pid).await;
    support::wait_until_gone(grandchild).await;
}

#[tokio::test]
async fn an_unusable_python_makes_the_runtime_unavailable_not_the_server() {
    let server = Server::start_unready(
        Family::Handshake,
        &[("IPYTHON_MCP_PYTHON", "/nonexistent/python3")],
    )
    .await;
    let status = server.wait_settled().await;
    assert_eq!(status["state"], "unavailable");
    let message = status["error"]["message"].as_str().expect("message");
    assert!(message.contains("/nonexistent/python3"), "{message}");
    let result = server.call("execute", json!({"code": "1"})).await;
    assert!(result.is_error);
    assert_eq!(result.structured["error"]["code"], "runtime_unavailable");
    assert!(result.structured["error"]["message"]
        .as_str()
        .expect("message")
        .contains("/nonexistent/python3"));
    server.stop().await;
}

#[test]
fn invalid_configuration_stops_with_one_line_and_status_2() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ipython-mcp"))
        .env("IPYTHON_MCP_MAX_TEXT_CHARS", "0")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("IPYTHON_MCP_MAX_TEXT_CHARS"), "{stderr}");
}

#[tokio::test]
async fn a_client_that_disconnects_mid_call_leaves_nothing_behind() {
    let server = Server::start(Family::Handshake, &[]).await;
    let status = server.call("runtime_status", json!({})).await;
    let kernel_pid = status.structured["kernel"]["pid"].as_u64().expect("pid") as i32;
    let client = server.client.peer().clone();
    let call = tokio::spawn(async move {
        let arguments = json!({"code": "import time\ntime.sleep(60)"})
            .as_object()
            .cloned()
            .expect("object");
        client
            .call_tool(rmcp::model::CallToolRequestParams::new("execute").with_arguments(arguments))
            .await
    });
    // Disconnect once the call is running in the kernel.
    for _ in 0..200 {
        let status = server.call("runtime_status", json!({})).await;
        if status.structured["operation_active"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = std::time::Instant::now();
    let server_pid = server.pid as i32;
    server.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "shutdown took {:?}",
        started.elapsed()
    );
    assert!(
        call.await.expect("join").is_err(),
        "the abandoned call ends with a transport error"
    );
    support::wait_until_gone(server_pid).await;
    support::wait_until_gone(kernel_pid).await;
}

#[tokio::test]
async fn sigterm_shuts_down_cleanly() {
    let server = Server::start(Family::Handshake, &[]).await;
    let status = server.call("runtime_status", json!({})).await;
    let kernel_pid = status.structured["kernel"]["pid"].as_u64().expect("pid") as i32;
    let server_pid = server.pid as i32;
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(server_pid, libc::SIGTERM) }, 0);
    server.wait_exit(Duration::from_secs(10)).await;
    support::wait_until_gone(kernel_pid).await;
}

#[tokio::test]
async fn a_first_start_provisions_python_in_the_background() {
    // A bare python3 (a venv without ipykernel) first on PATH, and an empty cache: the server must
    // answer MCP at once, show provisioning in runtime_status, then run code.
    let scratch = tempfile::tempdir().expect("tempdir");
    let bare = scratch.path().join("bare");
    let status = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&bare)
        .status()
        .expect("python3");
    assert!(status.success());
    let path = format!(
        "{}:{}",
        bare.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let cache = scratch.path().join("cache");
    let server = Server::start_unready(
        Family::Handshake,
        &[
            ("PATH", path.as_str()),
            ("IPYTHON_MCP_CACHE_DIR", cache.to_str().expect("utf-8")),
        ],
    )
    .await;
    let early = server.call("runtime_status", json!({})).await;
    assert_eq!(
        early.structured["state"], "starting",
        "{:?}",
        early.structured
    );
    let mut phases = std::collections::BTreeSet::new();
    let settled = loop {
        let status = server
            .call("runtime_status", json!({}))
            .await
            .structured
            .clone();
        if let Some(phase) = status["environment"]["phase"].as_str() {
            phases.insert(phase.to_owned());
        }
        if status["state"] != "starting" {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(settled["state"], "ready", "{settled}");
    assert_eq!(settled["environment"]["source"], "managed_default");
    assert_eq!(settled["environment"]["created"], true);
    assert!(
        phases.contains("installing"),
        "provisioning progress was visible: {phases:?}"
    );
    let result = server
        .call(
            "execute",
            json!({"code": "import ipykernel, sys\nsys.prefix"}),
        )
        .await;
    assert!(result.ok(), "{result:?}");
    assert!(result.structured["result"]["text/plain"]
        .as_str()
        .expect("prefix")
        .contains("default-py"));
    assert!(std::fs::read_dir(cache.join("envs"))
        .expect("envs")
        .all(|entry| {
            !entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .starts_with(".tmp")
        }));
    server.stop().await;
}

#[tokio::test]
async fn a_full_or_slow_queue_rejects_without_running_code() {
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_MAX_PENDING_OPERATIONS", "1"),
            ("IPYTHON_MCP_QUEUE_WAIT_TIMEOUT_SECONDS", "1"),
        ],
    )
    .await;
    let spawn = |code: &'static str| {
        let peer = server.client.peer().clone();
        tokio::spawn(
            async move { support::call_peer(&peer, "execute", json!({"code": code})).await },
        )
    };
    let running = spawn("import time\ntime.sleep(5)\n'first'");
    server
        .wait_until(|status| status["operation_active"] == true)
        .await;
    let queued = spawn("queued = True");
    server.wait_until(|status| status["queue_depth"] == 1).await;
    let busy = server.call("execute", json!({"code": "busy = True"})).await;
    assert_eq!(busy.structured["status"], "rejected");
    assert_eq!(busy.structured["error"]["code"], "runtime_busy");
    let queued = queued.await.expect("join");
    assert_eq!(queued.structured["status"], "rejected");
    assert_eq!(queued.structured["error"]["code"], "queue_timeout");
    let first = running.await.expect("join");
    assert_eq!(first.structured["result"]["text/plain"], "'first'");
    let count = first.structured["execution_count"].as_u64().expect("count");
    let check = server
        .call(
            "execute",
            json!({"code": "('queued' in globals(), 'busy' in globals())"}),
        )
        .await;
    assert_eq!(check.structured["result"]["text/plain"], "(False, False)");
    assert_eq!(
        check.structured["execution_count"].as_u64(),
        Some(count + 1),
        "rejected calls did not bump the count"
    );
    server.stop().await;
}

#[tokio::test]
async fn mcp_cancellation_withdraws_queued_calls_and_interrupts_running_ones() {
    use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, Request};
    use rmcp::service::PeerRequestOptions;
    let server = Server::start(Family::Handshake, &[]).await;
    let peer = server.client.peer().clone();
    let send = |code: &str| {
        let arguments = json!({"code": code}).as_object().cloned().expect("object");
        let request: CallToolRequest =
            Request::new(CallToolRequestParams::new("execute").with_arguments(arguments));
        peer.send_cancellable_request(
            ClientRequest::CallToolRequest(request),
            PeerRequestOptions::no_options(),
        )
    };
    server.call("execute", json!({"code": "before = 1"})).await;
    let running = send("import time\ntime.sleep(20)\nafter = 1")
        .await
        .expect("send");
    server
        .wait_until(|status| status["operation_active"] == true)
        .await;
    let queued = send("queued_ran = 1").await.expect("send");
    server.wait_until(|status| status["queue_depth"] == 1).await;

    // The queued call is withdrawn: its slot frees at once and its code never runs.
    queued
        .cancel(Some("changed my mind".into()))
        .await
        .expect("cancel");
    server.wait_until(|status| status["queue_depth"] == 0).await;
    // The running call is interrupted through the timeout path; the namespace survives.
    running
        .cancel(Some("too slow".into()))
        .await
        .expect("cancel");
    let status = server
        .wait_until(|status| status["operation_active"] == false)
        .await;
    assert_eq!(
        status["latest_interruption_kind"], "cooperative",
        "{status}"
    );
    assert_eq!(status["latest_namespace_outcome"], "preserved");
    let check = server.call("execute", json!({"code": "('before' in globals(), 'after' in globals(), 'queued_ran' in globals())"})).await;
    assert_eq!(
        check.structured["result"]["text/plain"],
        "(True, False, False)"
    );
    server.stop().await;
}

#[tokio::test]
async fn runtime_status_is_flat_and_rejects_unknown_kernels() {
    let server = Server::start(Family::Handshake, &[]).await;
    let status = server.call("runtime_status", json!({})).await;
    assert_eq!(status.structured["ok"], true);
    assert_eq!(status.structured["kernel_id"], "default");
    let unknown = server
        .call("runtime_status", json!({"kernel": "other"}))
        .await;
    assert!(unknown.is_error);
    assert_eq!(unknown.structured["ok"], false);
    assert_eq!(unknown.structured["error"]["code"], "invalid_arguments");
    server.stop().await;
}

#[tokio::test]
async fn signals_are_honoured_before_any_client_speaks() {
    let mut child = support::command(&[]).spawn().expect("spawn");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = child.id().expect("pid") as i32;
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits")
        .expect("wait");
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn shutdown_during_a_cell_that_ignores_interrupts_is_bounded() {
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "0.5")],
    )
    .await;
    let status = server.call("runtime_status", json!({})).await;
    let kernel_pid = status.structured["kernel"]["pid"].as_u64().expect("pid") as i32;
    let peer = server.client.peer().clone();
    let code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass";
    let call = tokio::spawn(async move {
        let arguments = json!({"code": code}).as_object().cloned().expect("object");
        peer.call_tool(rmcp::model::CallToolRequestParams::new("execute").with_arguments(arguments))
            .await
    });
    server
        .wait_until(|status| status["operation_active"] == true)
        .await;
    let started = std::time::Instant::now();
    server.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "shutdown took {:?}",
        started.elapsed()
    );
    let _ = call.await;
    support::wait_until_gone(kernel_pid).await;
}

#[tokio::test]
async fn a_warm_spare_replaces_a_dead_kernel() {
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_SPARE_KERNELS", "1")]).await;
    let status = server
        .wait_until(|status| {
            status["spare_kernel_pids"]
                .as_array()
                .is_some_and(|pids| pids.len() == 1)
        })
        .await;
    let spare = status["spare_kernel_pids"][0].clone();
    let old = status["kernel"]["pid"].clone();
    let result = server
        .call("execute", json!({"code": "import os\nos._exit(1)"}))
        .await;
    assert_eq!(result.structured["error"]["code"], "kernel_died");
    let status = server.call("runtime_status", json!({})).await.structured;
    assert_eq!(
        status["kernel"]["pid"], spare,
        "the spare was promoted: {status}"
    );
    assert_ne!(status["kernel"]["pid"], old);
    assert_eq!(status["epoch"], 1);
    assert!(
        status["replacement_startup_seconds"].as_f64().is_some(),
        "{status}"
    );
    // A new spare is prepared in the background.
    let status = server
        .wait_until(|status| {
            status["spare_kernel_pids"]
                .as_array()
                .is_some_and(|pids| pids.len() == 1)
        })
        .await;
    assert_ne!(status["spare_kernel_pids"][0], spare);
    // The promoted kernel has the helper: output is still bounded in the kernel.
    let result = server
        .call("execute", json!({"code": "print('x' * 100_000)"}))
        .await;
    assert_eq!(result.structured["stdout_omitted_chars"], 100_001 - 8192);
    server.stop().await;
}

#[tokio::test]
async fn a_kernel_killed_while_idle_is_replaced_and_the_next_call_is_told() {
    let server = Server::start(Family::Handshake, &[]).await;
    server
        .call("execute", json!({"code": "precious = 1"}))
        .await;
    let status = server.call("runtime_status", json!({})).await.structured;
    let pid = status["kernel"]["pid"].as_u64().expect("pid") as i32;
    // SAFETY: killing the kernel process our server started, as the OOM killer would.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let status = server
        .wait_until(|status| status["epoch"] == 1 && status["state"] == "ready")
        .await;
    assert_eq!(status["latest_namespace_outcome"], "reset");
    let result = server
        .call("execute", json!({"code": "'precious' in globals()"}))
        .await;
    assert!(result.ok(), "{result:?}");
    assert_eq!(result.structured["result"]["text/plain"], "False");
    assert_eq!(result.structured["runtime"]["namespace"], "reset");
    assert!(result.structured["notice"]
        .as_str()
        .expect("notice")
        .contains("died between calls"));
    assert!(result.text().contains("notice"), "{}", result.text());
    // Only the first call after the replacement carries the notice.
    let again = server.call("execute", json!({"code": "1"})).await;
    assert!(again.structured.get("notice").is_none());
    server.stop().await;
}

#[tokio::test]
async fn hangs_that_ignore_interrupts_and_crashes_are_recovered() {
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_SPARE_KERNELS", "1"),
            ("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "0.5"),
        ],
    )
    .await;
    // SIGINT blocked in the main thread: the interrupt is never delivered.
    let code = "import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])\nmarker = 1\ntime.sleep(60)";
    let result = server
        .call("execute", json!({"code": code, "timeout_seconds": 1.5}))
        .await;
    assert_eq!(
        result.structured["status"], "timeout",
        "{:?}",
        result.structured
    );
    assert_eq!(result.structured["runtime"]["interruption"], "terminated");
    assert_eq!(result.structured["runtime"]["namespace"], "reset");
    assert_eq!(
        server.call("runtime_status", json!({})).await.structured["epoch"],
        1
    );
    // A segfault in C code.
    let result = server
        .call(
            "execute",
            json!({"code": "import ctypes\nctypes.string_at(0)"}),
        )
        .await;
    assert_eq!(
        result.structured["error"]["code"], "kernel_died",
        "{:?}",
        result.structured
    );
    assert!(
        result.structured["error"]["message"]
            .as_str()
            .expect("message")
            .contains("signal 11"),
        "{:?}",
        result.structured
    );
    let status = server.call("runtime_status", json!({})).await.structured;
    assert_eq!(status["epoch"], 2);
    assert_eq!(status["state"], "ready");
    let check = server
        .call("execute", json!({"code": "'marker' in globals()"}))
        .await;
    assert_eq!(check.structured["result"]["text/plain"], "False");
    server.stop().await;
}

#[tokio::test]
async fn a_hundred_concurrent_calls_are_answered_once_in_fifo_order() {
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_MAX_PENDING_OPERATIONS", "128")],
    )
    .await;
    server.call("execute", json!({"code": "order = []"})).await;
    let calls: Vec<_> = (0..100)
        .map(|index| {
            let peer = server.client.peer().clone();
            tokio::spawn(async move {
                (
                    index,
                    support::call_peer(
                        &peer,
                        "execute",
                        json!({"code": format!("order.append({index})")}),
                    )
                    .await,
                )
            })
        })
        .collect();
    let mut by_seq = Vec::new();
    for call in calls {
        let (index, result) = call.await.expect("join");
        assert!(result.ok(), "{result:?}");
        by_seq.push((
            result.structured["runtime"]["admission_seq"]
                .as_u64()
                .expect("seq"),
            index,
        ));
    }
    by_seq.sort();
    let seqs: std::collections::BTreeSet<u64> = by_seq.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs.len(), 100, "every call got its own admission sequence");
    let admitted: Vec<i64> = by_seq.iter().map(|(_, index)| *index).collect();
    let ran = server.call("execute", json!({"code": "order"})).await;
    let ran: Vec<i64> = serde_json::from_str(
        ran.structured["result"]["text/plain"]
            .as_str()
            .expect("list"),
    )
    .expect("json list");
    assert_eq!(
        ran, admitted,
        "the kernel ran them in admission order, each exactly once"
    );
    server.stop().await;
}

#[tokio::test]
async fn shutdown_with_work_queued_leaves_no_process_or_run_dir() {
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_SPARE_KERNELS", "1")]).await;
    let status = server
        .wait_until(|status| {
            status["spare_kernel_pids"]
                .as_array()
                .is_some_and(|pids| pids.len() == 1)
        })
        .await;
    let kernel = status["kernel"]["pid"].as_u64().expect("pid") as i32;
    let spare = status["spare_kernel_pids"][0].as_u64().expect("pid") as i32;
    let run_dir = support::kernel_run_dir(kernel);
    assert!(run_dir.exists());
    let spawn = |code: &'static str| {
        let peer = server.client.peer().clone();
        tokio::spawn(async move {
            let arguments = json!({"code": code}).as_object().cloned().expect("object");
            let _ = peer
                .call_tool(
                    rmcp::model::CallToolRequestParams::new("execute").with_arguments(arguments),
                )
                .await;
        });
    };
    spawn("import time\ntime.sleep(30)");
    server
        .wait_until(|status| status["operation_active"] == true)
        .await;
    spawn("queued = 1");
    spawn("queued = 2");
    server.wait_until(|status| status["queue_depth"] == 2).await;
    server.stop().await;
    support::wait_until_gone(kernel).await;
    support::wait_until_gone(spare).await;
    assert!(
        !run_dir.exists(),
        "the kernel's private run directory is removed"
    );
}

#[tokio::test]
async fn a_killed_server_takes_its_kernels_with_it() {
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_SPARE_KERNELS", "1")]).await;
    let status = server
        .wait_until(|status| {
            status["spare_kernel_pids"]
                .as_array()
                .is_some_and(|pids| pids.len() == 1)
        })
        .await;
    let kernel = status["kernel"]["pid"].as_u64().expect("pid") as i32;
    let spare = status["spare_kernel_pids"][0].as_u64().expect("pid") as i32;
    // SAFETY: killing our own child process.
    assert_eq!(unsafe { libc::kill(server.pid as i32, libc::SIGKILL) }, 0);
    support::wait_until_gone(kernel).await;
    support::wait_until_gone(spare).await;
}

/// The portable pipe watch (what systems without Linux's parent-death signal use), selected by
/// the hidden test variable: a SIGKILLed server takes its kernels, their process groups and
/// what user code started in them.
#[tokio::test]
async fn a_killed_server_takes_its_kernel_groups_with_it_under_the_pipe_watch() {
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_SPARE_KERNELS", "1"),
            ("IPYTHON_MCP_TEST_DEATH_WATCH", "pipe"),
        ],
    )
    .await;
    let result = server
        .call(
            "execute",
            json!({"code": "import subprocess\nchild = subprocess.Popen(['sleep', '300'])\nchild.pid"}),
        )
        .await;
    assert!(result.ok(), "{result:?}");
    let grandchild: i32 = result.structured["result"]["text/plain"]
        .as_str()
        .and_then(|text| text.parse().ok())
        .expect("the sleep's pid");
    let status = server
        .wait_until(|status| {
            status["spare_kernel_pids"]
                .as_array()
                .is_some_and(|pids| pids.len() == 1)
        })
        .await;
    let kernel = status["kernel"]["pid"].as_u64().expect("pid") as i32;
    let spare = status["spare_kernel_pids"][0].as_u64().expect("pid") as i32;
    let groups: Vec<i32> = [kernel, spare]
        .iter()
        // SAFETY: getpgid(2) has no memory-safety preconditions.
        .map(|pid| unsafe { libc::getpgid(*pid) })
        .collect();
    for (pid, group) in [kernel, spare].iter().zip(&groups) {
        assert!(*group > 0, "getpgid({pid})");
        // The watcher leads the group, so the kernel does not: the pipe watch is in use.
        assert_ne!(group, pid, "kernel {pid} leads its own group");
        assert!(
            support::group_members(*group).contains(group),
            "the watcher {group} is alive in its group"
        );
    }
    assert!(support::group_members(groups[0]).contains(&grandchild));
    // SAFETY: killing our own child process.
    assert_eq!(unsafe { libc::kill(server.pid as i32, libc::SIGKILL) }, 0);
    for group in groups {
        support::wait_until_group_gone(group).await;
    }
    support::wait_until_gone(kernel).await;
    support::wait_until_gone(spare).await;
    support::wait_until_gone(grandchild).await;
}

/// Under the pipe watch, a server that exits normally leaves no watcher behind.
#[tokio::test]
async fn a_server_that_exits_leaves_no_watcher_under_the_pipe_watch() {
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_TEST_DEATH_WATCH", "pipe")],
    )
    .await;
    let status = server.call("runtime_status", json!({})).await.structured;
    let kernel = status["kernel"]["pid"].as_u64().expect("pid") as i32;
    // SAFETY: getpgid(2) has no memory-safety preconditions.
    let group = unsafe { libc::getpgid(kernel) };
    assert!(
        group > 0 && group != kernel,
        "group {group} of kernel {kernel}"
    );
    server.stop().await;
    support::wait_until_group_gone(group).await;
}

#[tokio::test]
async fn an_idle_kernel_that_stops_answering_heartbeats_is_replaced() {
    let server = Server::start(Family::Handshake, &[]).await;
    server
        .call("execute", json!({"code": "precious = 1"}))
        .await;
    let status = server.call("runtime_status", json!({})).await.structured;
    let pid = status["kernel"]["pid"].as_u64().expect("pid") as i32;
    // SAFETY: stopping the kernel process our server started (a deadlock would look the same).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        let status = server.call("runtime_status", json!({})).await.structured;
        if status["epoch"] == 1 && status["state"] == "ready" {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never replaced: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status["latest_namespace_outcome"], "reset");
    support::wait_until_gone(pid).await;
    let result = server
        .call("execute", json!({"code": "'precious' in globals()"}))
        .await;
    assert_eq!(result.structured["result"]["text/plain"], "False");
    assert!(result.structured["notice"]
        .as_str()
        .expect("notice")
        .contains("heartbeats"));
    server.stop().await;
}

/// A trusted library directory with one module, for the namespace tests.
fn library() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = "\"\"\"Helpers for agents.\"\"\"\n\ndef scale(values: list, factor: float = 2.0) -> list:\n    \"\"\"Multiply every value.\n\n    Long details here.\"\"\"\n    return [v * factor for v in values]\n";
    std::fs::write(dir.path().join("agentlib.py"), source).expect("write");
    dir
}

#[tokio::test]
async fn namespace_tools_look_around_call_and_clean_up() {
    let lib = library();
    let paths = lib.path().display().to_string();
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_LIBRARY_PATHS", paths.as_str()),
            ("IPYTHON_MCP_PRELOAD_MODULES", "agentlib"),
            ("IPYTHON_MCP_MODULE_ALIASES", r#"{"json": "js"}"#),
        ],
    )
    .await;
    let setup = "import math\ndata = {'a': [1, 2, 3]}\ndef area(r: float) -> float:\n    \"\"\"Area of a circle.\"\"\"\n    return math.pi * r * r\nclass Box:\n    pass\ndef boom():\n    raise ValueError('no')\ndef obj():\n    return object()";
    assert!(server.call("execute", json!({"code": setup})).await.ok());
    let count = server
        .call("execute", json!({"code": "1"}))
        .await
        .structured["execution_count"]
        .as_u64()
        .expect("count");

    let listed = server.call("list", json!({})).await;
    assert!(listed.ok(), "{listed:?}");
    let names: Vec<&str> = listed.structured["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["Box", "area", "boom", "obj"],
        "sorted, user callables only"
    );
    let area = &listed.structured["functions"][1];
    assert_eq!(area["signature"], "(r: float) -> float");
    assert_eq!(area["doc"], "Area of a circle.");

    let found = server.call("search", json!({"query": "DAT"})).await;
    assert_eq!(
        found.structured["results"][0]["name"], "data",
        "{:?}",
        found.structured
    );
    assert_eq!(found.structured["results"][0]["kind"], "variable");
    assert_eq!(
        found.structured["results"][0]["representation"],
        "{'a': [1, 2, 3]}"
    );
    let exact = server
        .call("search", json!({"query": "math", "exact": true}))
        .await;
    assert_eq!(exact.structured["results"][0]["kind"], "module");

    let inspected = server
        .call("inspect", json!({"name": "agentlib.scale"}))
        .await;
    assert!(inspected.ok(), "{inspected:?}");
    assert_eq!(inspected.structured["callable"], true);
    assert!(inspected.structured["documentation"]
        .as_str()
        .expect("doc")
        .contains("Multiply every value."));
    let missing = server
        .call("inspect", json!({"name": "agentlib.nope"}))
        .await;
    assert!(missing.is_error);
    assert_eq!(missing.structured["error"]["code"], "name_not_found");
    let bad = server.call("inspect", json!({"name": "data['a']"})).await;
    assert_eq!(bad.structured["error"]["code"], "invalid_name");

    let called = server
        .call(
            "call_function",
            json!({"name": "agentlib.scale", "arguments": {"values": [1, 2], "factor": 3}}),
        )
        .await;
    assert!(called.ok(), "{called:?}");
    assert_eq!(called.structured["result"], json!([3, 6]));
    assert_eq!(called.structured["name"], "agentlib.scale");
    let aliased = server
        .call(
            "call_function",
            json!({"name": "js.dumps", "arguments": {"obj": [1]}}),
        )
        .await;
    assert_eq!(aliased.structured["result"], "[1]");
    for (arguments, name, code) in [
        (json!({"r": 1, "extra": 2}), "area", "invalid_arguments"),
        (json!({}), "boom", "execution_error"),
        (json!({}), "obj", "result_not_json"),
        (json!({}), "data", "not_callable"),
        (json!({}), "nowhere", "name_not_found"),
    ] {
        let result = server
            .call(
                "call_function",
                json!({"name": name, "arguments": arguments}),
            )
            .await;
        assert!(result.is_error, "{name}");
        assert_eq!(
            result.structured["error"]["code"], code,
            "{name}: {:?}",
            result.structured
        );
    }
    let raised = server.call("call_function", json!({"name": "boom"})).await;
    assert_eq!(raised.structured["error"]["ename"], "ValueError");
    assert!(raised.structured["error"]["traceback"]
        .as_str()
        .expect("traceback")
        .contains("ValueError"));

    let removed = server
        .call(
            "remove",
            json!({"names": ["data", "data", "js", "_private", "ghost", "In"]}),
        )
        .await;
    assert_eq!(removed.structured["removed"], json!(["data"]));
    assert_eq!(
        removed.structured["refused"],
        json!(["In", "_private", "js"])
    );
    assert_eq!(removed.structured["unknown"], json!(["ghost"]));
    let again = server.call("remove", json!({"names": ["data"]})).await;
    assert_eq!(again.structured["removed"], json!([]));

    let reset = server.call("reset", json!({})).await;
    assert!(reset.ok(), "{reset:?}");
    assert_eq!(
        reset.structured["removed"],
        json!(["Box", "area", "boom", "math", "obj"])
    );
    assert_eq!(reset.structured["execution_count"], count);
    assert_eq!(
        server.call("reset", json!({})).await.structured["removed"],
        json!([])
    );
    let kept = server
        .call(
            "execute",
            json!({"code": "(js.__name__, agentlib.__name__, 'area' in globals())"}),
        )
        .await;
    assert_eq!(
        kept.structured["result"]["text/plain"],
        "('json', 'agentlib', False)"
    );
    assert_eq!(
        kept.structured["execution_count"],
        count + 1,
        "reset kept the execution count"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_build_import_edit_reload_loop_works() {
    let lib = tempfile::tempdir().expect("tempdir");
    let module = lib.path().join("workmod.py");
    std::fs::write(&module, "def f():\n    return 1\n").expect("write");
    let paths = lib.path().display().to_string();
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_LIBRARY_PATHS", paths.as_str())],
    )
    .await;
    assert!(server
        .call(
            "execute",
            json!({"code": "import workmod\nfrom workmod import f"})
        )
        .await
        .ok());
    std::fs::write(&module, "def f():\n    return 2\n").expect("edit");
    let reloaded = server
        .call("reload", json!({"modules": ["workmod", "never_imported"]}))
        .await;
    let results = reloaded.structured["results"].as_array().expect("results");
    assert_eq!(results[0]["module"], "workmod");
    assert_eq!(results[0]["ok"], true, "{:?}", reloaded.structured);
    assert_eq!(results[0]["rebound"], json!(["f", "workmod"]));
    assert_eq!(results[1]["error"]["code"], "module_not_found");
    assert_eq!(
        reloaded.structured["ok"], false,
        "not every module reloaded"
    );
    assert_eq!(
        server
            .call("call_function", json!({"name": "f"}))
            .await
            .structured["result"],
        2
    );
    std::fs::write(&module, "def f(:\n").expect("break");
    let broken = server.call("reload", json!({"modules": ["workmod"]})).await;
    assert_eq!(broken.structured["results"][0]["ok"], false);
    assert_eq!(
        broken.structured["results"][0]["error"]["code"],
        "execution_error"
    );
    assert_eq!(
        server
            .call("call_function", json!({"name": "f"}))
            .await
            .structured["result"],
        2,
        "the old binding stays usable"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_replacement_kernel_gets_the_configured_modules_back() {
    let lib = library();
    let paths = lib.path().display().to_string();
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_LIBRARY_PATHS", paths.as_str()),
            ("IPYTHON_MCP_PRELOAD_MODULES", "agentlib"),
            ("IPYTHON_MCP_MODULE_ALIASES", r#"{"json": "js"}"#),
            ("IPYTHON_MCP_SPARE_KERNELS", "1"),
        ],
    )
    .await;
    let result = server
        .call("execute", json!({"code": "import os\nos._exit(1)"}))
        .await;
    assert_eq!(result.structured["error"]["code"], "kernel_died");
    let check = server
        .call(
            "execute",
            json!({"code": "(js.dumps([1]), agentlib.scale([1]))"}),
        )
        .await;
    assert_eq!(
        check.structured["result"]["text/plain"], "('[1]', [2.0])",
        "{:?}",
        check.structured
    );
    server.stop().await;
}

#[tokio::test]
async fn a_preload_that_fails_makes_the_runtime_unavailable_with_the_reason() {
    let server = Server::start_unready(
        Family::Handshake,
        &[("IPYTHON_MCP_PRELOAD_MODULES", "surely_not_a_module_xyz")],
    )
    .await;
    let status = server.wait_settled().await;
    assert_eq!(status["state"], "unavailable");
    let message = status["error"]["message"].as_str().expect("message");
    assert!(message.contains("surely_not_a_module_xyz"), "{message}");
    let listed = server.call("list", json!({})).await;
    assert_eq!(listed.structured["error"]["code"], "runtime_unavailable");
    server.stop().await;
}

#[tokio::test]
async fn hostile_and_huge_objects_give_bounded_structured_answers() {
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_MAX_REPR_CHARS", "50")]).await;
    let code = "class Hostile:\n    def __repr__(self):\n        raise RuntimeError('no repr')\n    def __getattr__(self, name):\n        raise RuntimeError('no ' + name)\n    @property\n    def __doc__(self):\n        raise RuntimeError('no doc')\nhostile = Hostile()\nhuge = 'x' * 1_000_000\ndef big():\n    return list(range(10_000))";
    assert!(server.call("execute", json!({"code": code})).await.ok());
    let found = server
        .call("search", json!({"query": "hostile", "exact": true}))
        .await;
    assert!(found.ok(), "{:?}", found.structured);
    assert!(found.structured["results"][0]["representation"]
        .as_str()
        .expect("repr")
        .contains("repr failed"));
    let inspected = server.call("inspect", json!({"name": "hostile"})).await;
    assert!(inspected.ok(), "{:?}", inspected.structured);
    let attribute = server
        .call("inspect", json!({"name": "hostile.anything"}))
        .await;
    assert_eq!(
        attribute.structured["error"]["code"], "execution_error",
        "{:?}",
        attribute.structured
    );
    assert_eq!(attribute.structured["error"]["ename"], "RuntimeError");
    let huge = server.call("inspect", json!({"name": "huge"})).await;
    assert_eq!(huge.structured["truncated"]["representation"], true);
    assert!(
        huge.structured["representation"]
            .as_str()
            .expect("repr")
            .chars()
            .count()
            <= 50
    );
    let big = server.call("call_function", json!({"name": "big"})).await;
    assert!(big.ok(), "{:?}", big.structured);
    assert_eq!(big.structured["truncated"], true);
    assert_eq!(
        big.structured["result"].as_array().map(Vec::len),
        Some(100),
        "bounded by max_results"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_missing_library_dir_makes_the_runtime_unavailable_with_the_reason() {
    let server = Server::start_unready(
        Family::Handshake,
        &[("IPYTHON_MCP_LIBRARY_PATHS", "/nonexistent/agent-libs")],
    )
    .await;
    let status = server.wait_settled().await;
    assert_eq!(status["state"], "unavailable");
    let message = status["error"]["message"].as_str().expect("message");
    assert!(message.contains("/nonexistent/agent-libs"), "{message}");
    server.stop().await;
}

#[tokio::test]
async fn interrupt_stops_running_code_and_reports_the_namespace() {
    // The default 2 s grace: on a loaded machine (the whole suite runs kernels in parallel on 2
    // cores) half a second was sometimes too little for a cooperative stop to be seen as one.
    let server = Server::start(Family::Handshake, &[]).await;
    let idle = server.call("interrupt", json!({})).await;
    assert!(idle.ok(), "{idle:?}");
    assert_eq!(idle.structured["interrupted"], false);

    let spawn = |code: &'static str| {
        let peer = server.client.peer().clone();
        tokio::spawn(
            async move { support::call_peer(&peer, "execute", json!({"code": code})).await },
        )
    };
    assert!(server
        .call("execute", json!({"code": "before = 1"}))
        .await
        .ok());
    let running = spawn("import time\ntime.sleep(30)");
    server
        .wait_until(|status| status["operation_active"] == true)
        .await;
    let stopped = server.call("interrupt", json!({})).await;
    assert_eq!(
        stopped.structured["interrupted"], true,
        "{:?}",
        stopped.structured
    );
    assert_eq!(stopped.structured["interruption"], "cooperative");
    assert_eq!(stopped.structured["namespace"], "preserved");
    let call = running.await.expect("join");
    assert_eq!(call.structured["status"], "cancelled");
    assert_eq!(call.structured["error"]["code"], "operation_cancelled");
    assert_eq!(
        server
            .call("execute", json!({"code": "before"}))
            .await
            .structured["result"]["text/plain"],
        "1"
    );

    let stubborn =
        spawn("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass");
    server
        .wait_until(|status| status["operation_active"] == true)
        .await;
    // Give the cell time to install its SIG_IGN handler: a SIGINT before that would (rightly)
    // stop it cooperatively.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = server.call("interrupt", json!({})).await;
    assert_eq!(
        killed.structured["interruption"], "terminated",
        "{:?}",
        killed.structured
    );
    assert_eq!(killed.structured["namespace"], "reset");
    assert_eq!(killed.structured["epoch"], 1);
    assert_eq!(
        stubborn.await.expect("join").structured["runtime"]["interruption"],
        "terminated"
    );
    // The next call is not affected by the earlier interrupts.
    let after = server
        .call(
            "execute",
            json!({"code": "import time\ntime.sleep(0.3)\n'fine'"}),
        )
        .await;
    assert_eq!(after.structured["result"]["text/plain"], "'fine'");
    server.stop().await;
}

#[tokio::test]
async fn doctor_finds_python_runs_a_round_trip_and_says_so() {
    let output = support::command(&[])
        .arg("doctor")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run doctor");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "python:",
        "ipykernel:",
        "kernel start:",
        "round trip:      ok (x = 19)",
        "all good",
    ] {
        assert!(
            stdout.contains(line),
            "doctor output lacks {line:?}:\n{stdout}"
        );
    }
}

#[tokio::test]
async fn kernel_restart_gives_a_fresh_kernel_with_the_configured_modules() {
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_SPARE_KERNELS", "1"),
            ("IPYTHON_MCP_MODULE_ALIASES", r#"{"json": "js"}"#),
        ],
    )
    .await;
    server.call("execute", json!({"code": "x = 1"})).await;
    let before = server
        .wait_until(|status| {
            status["spare_kernel_pids"]
                .as_array()
                .is_some_and(|pids| pids.len() == 1)
        })
        .await;
    let restarted = server.call("kernel_restart", json!({})).await;
    assert!(restarted.ok(), "{:?}", restarted.structured);
    assert_eq!(restarted.structured["epoch"], 1);
    assert_eq!(restarted.structured["state"], "ready");
    assert_eq!(
        restarted.structured["kernel"]["pid"], before["spare_kernel_pids"][0],
        "the spare was promoted"
    );
    assert_eq!(restarted.structured["latest_namespace_outcome"], "reset");
    let check = server
        .call(
            "execute",
            json!({"code": "('x' in globals(), js.__name__)"}),
        )
        .await;
    assert_eq!(check.structured["result"]["text/plain"], "(False, 'json')");
    assert_eq!(
        check.structured["execution_count"], 1,
        "a fresh kernel counts from 1"
    );
    assert!(
        check.structured.get("notice").is_none(),
        "the caller asked for the restart: no notice"
    );
    let unknown = server
        .call("kernel_restart", json!({"kernel": "nope"}))
        .await;
    assert_eq!(unknown.structured["error"]["code"], "invalid_arguments");
    server.stop().await;
}

#[tokio::test]
async fn toolsets_choose_which_tools_are_offered() {
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_TOOLSETS", "namespace")]).await;
    let mut names: Vec<String> = server
        .client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|tool| tool.name.into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "call_function",
            "execute",
            "get_output",
            "inspect",
            "interrupt",
            "kernel_restart",
            "list",
            "reload",
            "remove",
            "reset",
            "runtime_status",
            "search"
        ]
    );
    // A tool of a toolset left out is not there at all.
    let missing = server
        .client
        .peer()
        .call_tool(
            rmcp::model::CallToolRequestParams::new("kernel_list")
                .with_arguments(serde_json::Map::new()),
        )
        .await;
    assert!(missing.is_err(), "{missing:?}");
    let ran = server.call("execute", json!({"code": "6 * 7"})).await;
    assert_eq!(ran.structured["result"]["text/plain"], "42");
    server.stop().await;
}
