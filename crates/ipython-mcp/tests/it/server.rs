//! End-to-end tests: the built `ipython-mcp` binary, driven over stdio by a real MCP client
//! (rmcp's), against a real ipykernel provisioned by the product itself (the managed default
//! environment, in a cache directory shared by the tests of this run).

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{Family, Flag, Server};

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
            // Short by design (tools_list_fits_its_context_budget), but never a bare label.
            assert!(
                tool.description.as_deref().unwrap_or("").len() >= 90,
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
    // A fifth of the budget keeps the beginning, the rest the end; one marker line between
    // them gives the exact count and the get_output call that pages the middle, and counts
    // against the budget too.
    let execution_id = result.structured["execution_id"].as_str().expect("an id");
    let support::CutStream {
        head,
        marker,
        tail,
        view,
    } = result.cut("stdout");
    assert!(view.chars().count() <= 1000, "{view}");
    let tail_text = tail.strip_suffix('\n').expect("the print's newline");
    assert!(head.bytes().all(|b| b == b'a') && tail_text.bytes().all(|b| b == b'a'));
    assert!((150..=200).contains(&head.len()), "{}", head.len());
    assert!(
        (600..=799).contains(&tail_text.len()),
        "{}",
        tail_text.len()
    );
    let omitted = 20001 - head.len() - tail.len();
    assert_eq!(
        marker,
        format!("[… {omitted} characters omitted; get_output(execution_id=\"{execution_id}\", stream=\"stdout\", start_line=1) pages them …]")
    );
    assert_eq!(result.structured["stdout_omitted_chars"], omitted);
    let support::CutStream {
        head,
        marker,
        tail,
        view,
    } = result.cut("stderr");
    assert!(view.chars().count() <= 1000, "{view}");
    assert!(head.bytes().all(|b| b == b'e') && tail.bytes().all(|b| b == b'e'));
    let omitted = 1500 - head.len() - tail.len();
    assert!(
        marker.starts_with(&format!("[… {omitted} characters omitted")),
        "{marker}"
    );
    assert_eq!(result.structured["stderr_omitted_chars"], omitted);
    assert_eq!(result.structured["truncated"]["stdout"], true);
    assert_eq!(result.structured["truncated"]["stderr"], true);
    assert!(result.text().contains(&marker), "{}", result.text());
    assert!(
        result.text().contains(&format!("read it with get_output(execution_id=\"{execution_id}\", stream=\"stdout\", start_line=N)")),
        "{}",
        result.text()
    );

    // Many small writes and progress bars: the count stays exact, and the cuts fall between
    // lines.
    let result = server
        .call("execute", json!({"code": "for i in range(5000):\n    print(f'line {i:05d}')\nfor i in range(1000):\n    print(f'\\r{i:04d}', end='')\nprint('\\ndone')"}))
        .await;
    let total = 5000 * 11 + 4 + 1 + 5;
    let support::CutStream {
        head,
        marker,
        tail,
        view,
    } = result.cut("stdout");
    assert!(view.chars().count() <= 1000, "{view}");
    assert!(head.starts_with("line 00000\nline 00001\n"), "{view}");
    let head_lines = head.lines().count();
    assert_eq!(head.len(), 11 * head_lines, "whole lines: {head}");
    assert!(tail.starts_with("line 0"), "a whole line: {tail}");
    assert!(tail.ends_with("line 04999\n0999\ndone\n"), "{view}");
    let tail_lines = tail.lines().count();
    let omitted = total - head.len() - tail.len();
    assert!(
        marker.starts_with(&format!(
            "[… {omitted} characters ({} lines) omitted; get_output(",
            5002 - head_lines - tail_lines
        )),
        "{marker}"
    );
    assert!(
        marker.ends_with(&format!("start_line={}) pages them …]", head_lines + 1)),
        "{marker}"
    );
    assert_eq!(result.structured["stdout_omitted_chars"], omitted);
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
    // What is shown, marker included, fits the 8192 characters of max_text_chars; the rest
    // is counted exactly.
    let support::CutStream {
        head, tail, view, ..
    } = result.cut("stdout");
    assert!(view.chars().count() <= 8192, "{}", view.len());
    assert!(head.bytes().all(|b| b == b'x'), "{head}");
    assert_eq!(
        result.structured["stdout_omitted_chars"],
        200_000_000 + 20 * 1_000_000 - head.len() - tail.len()
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
    assert_eq!(
        unknown_field.structured["error"]["code"],
        "invalid_arguments"
    );
    let wrong_type = server.call("execute", json!({"code": 5})).await;
    assert!(wrong_type.is_error);
    assert_eq!(wrong_type.structured["status"], "rejected");
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
    // A long grace costs nothing when the code stops (the stop ends as soon as the kernel is idle
    // again), and keeps a loaded machine's slow stop a cooperative one.
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "60")],
    )
    .await;
    server.call("execute", json!({"code": "kept = 1"})).await;
    let result = server
        .call(
            "execute",
            json!({"code": "import time\npartial = 2\ntime.sleep(600)", "timeout_seconds": 5}),
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
    server.stop().await;

    // Code that never sees the interrupt (SIGINT blocked in the main thread by an earlier cell,
    // so nothing races the deadline): the kernel is killed and replaced after the grace.
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_CHECKPOINT", "off"),
            ("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "1"),
        ],
    )
    .await;
    let armed = server
        .call(
            "execute",
            json!({"code": "kept = 1\nimport signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])\n'armed'"}),
        )
        .await;
    assert_eq!(armed.structured["result"]["text/plain"], "'armed'");
    let result = server
        .call(
            "execute",
            json!({"code": "import time\ntime.sleep(600)", "timeout_seconds": 1.5}),
        )
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
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_CHECKPOINT", "off")]).await;
    let before = server.call("runtime_status", json!({})).await;
    let pid = before.structured["kernel"]["pid"].as_u64().expect("pid");
    let child = server
        .call(
            "execute",
            json!({"code": "import subprocess\nsubprocess.Popen(['sleep', '300']).pid"}),
        )
        .await;
    let orphan = support::host_pid(
        pid,
        child.structured["result"]["text/plain"]
            .as_str()
            .expect("pid")
            .parse()
            .expect("int"),
    );
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
    let replaced = server.call("runtime_status", json!({})).await;
    assert_ne!(replaced.structured["kernel"]["pid"].as_u64(), Some(pid));
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
    let flag = Flag::new();
    let code = format!("{}\n'slept'", flag.wait_code());
    let running =
        tokio::spawn(
            async move { support::call_peer(&client, "execute", json!({"code": code})).await },
        );
    let status = server
        .wait_until(|status| status["operation_active"] == true)
        .await;
    assert_eq!(
        status["state"], "busy",
        "runtime_status answered during the execution"
    );
    flag.set();
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
    let grandchild = support::host_pid(
        pid as u64,
        child.structured["result"]["text/plain"]
            .as_str()
            .expect("pid")
            .parse()
            .expect("int"),
    );
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
        let arguments = json!({"code": "import time\ntime.sleep(600)"})
            .as_object()
            .cloned()
            .expect("object");
        client
            .call_tool(rmcp::model::CallToolRequestParams::new("execute").with_arguments(arguments))
            .await
    });
    // Disconnect once the call is running in the kernel.
    server
        .wait_until(|status| status["operation_active"] == true)
        .await;
    let started = std::time::Instant::now();
    let server_pid = server.pid as i32;
    server.stop().await;
    // Far below the call's sleep; the product's own bound is twice the grace plus 5 s.
    assert!(
        started.elapsed() < Duration::from_secs(45),
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

// It provisions into an empty cache, from PyPI on every run: the `registry` tier.
#[cfg(feature = "registry")]
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
            // Long enough that `busy` below is surely rejected while `queued` still waits.
            ("IPYTHON_MCP_QUEUE_WAIT_TIMEOUT_SECONDS", "5"),
        ],
    )
    .await;
    let spawn = |code: String| {
        let peer = server.client.peer().clone();
        tokio::spawn(
            async move { support::call_peer(&peer, "execute", json!({"code": code})).await },
        )
    };
    // The first cell runs until both rejections have been seen.
    let flag = Flag::new();
    let running = spawn(format!("{}\n'first'", flag.wait_code()));
    server
        .wait_until(|status| status["operation_active"] == true)
        .await;
    let queued = spawn("queued = True".to_owned());
    server.wait_until(|status| status["queue_depth"] == 1).await;
    let busy = server.call("execute", json!({"code": "busy = True"})).await;
    assert_eq!(busy.structured["status"], "rejected");
    assert_eq!(busy.structured["error"]["code"], "runtime_busy");
    let queued = queued.await.expect("join");
    assert_eq!(queued.structured["status"], "rejected");
    assert_eq!(queued.structured["error"]["code"], "queue_timeout");
    flag.set();
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
    // A long grace costs nothing when the code stops, and keeps a slow stop cooperative.
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "60")],
    )
    .await;
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
    let running = send("import time\nprint('armed', flush=True)\ntime.sleep(600)\nafter = 1")
        .await
        .expect("send");
    wait_for_live_output(&server, "armed").await;
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
    let pid = child.id().expect("pid") as i32;
    // Once the server has installed its handler (before that, SIGTERM's default action ends it).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !catches_sigterm(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "no SIGTERM handler installed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("exits")
        .expect("wait");
    assert!(status.success(), "{status}");
}

/// Whether process `pid` has a handler for SIGTERM (`SigCgt` in `/proc/<pid>/status`).
fn catches_sigterm(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let mask = status
                .lines()
                .find_map(|line| line.strip_prefix("SigCgt:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .is_some_and(|mask| mask & (1 << (libc::SIGTERM - 1)) != 0)
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
    // The product's bound is twice the grace plus 5 s; a margin on top for a loaded machine. The
    // cell itself never ends.
    assert!(
        started.elapsed() < Duration::from_secs(30),
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
    let support::CutStream {
        head, tail, view, ..
    } = result.cut("stdout");
    assert!(view.chars().count() <= 8192, "{}", view.len());
    assert_eq!(
        result.structured["stdout_omitted_chars"],
        100_001 - head.len() - tail.len()
    );
    server.stop().await;
}

#[tokio::test]
async fn a_kernel_killed_while_idle_is_replaced_and_the_next_call_is_told() {
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_CHECKPOINT", "off")]).await;
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
            ("IPYTHON_MCP_CHECKPOINT", "off"),
            ("IPYTHON_MCP_SPARE_KERNELS", "1"),
            ("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "0.5"),
        ],
    )
    .await;
    // SIGINT blocked in the main thread by an earlier cell (so nothing races the deadline): the
    // interrupt never reaches the sleeping code.
    let armed = server
        .call(
            "execute",
            json!({"code": "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])\nmarker = 1"}),
        )
        .await;
    assert!(armed.ok(), "{armed:?}");
    let result = server
        .call(
            "execute",
            json!({"code": "import time\ntime.sleep(600)", "timeout_seconds": 1.5}),
        )
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
        &[
            ("IPYTHON_MCP_MAX_PENDING_OPERATIONS", "128"),
            // The last of 100 serialized calls may wait long on a loaded machine.
            ("IPYTHON_MCP_QUEUE_WAIT_TIMEOUT_SECONDS", "600"),
        ],
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
    let kernel_pid = server.call("runtime_status", json!({})).await.structured["kernel"]["pid"]
        .as_u64()
        .expect("pid");
    let grandchild = support::host_pid(kernel_pid, grandchild);
    let status = server
        .wait_until(|status| {
            status["spare_kernel_pids"]
                .as_array()
                .is_some_and(|pids| pids.len() == 1)
        })
        .await;
    // The processes the server started: the watcher's group holds them.
    let kernel = support::launcher_of(status["kernel"]["pid"].as_u64().expect("pid") as i32);
    let spare = support::launcher_of(status["spare_kernel_pids"][0].as_u64().expect("pid") as i32);
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
    // SAFETY: killing our own child process.
    assert_eq!(unsafe { libc::kill(server.pid as i32, libc::SIGKILL) }, 0);
    for group in groups {
        support::wait_until_group_gone(group).await;
    }
    support::wait_until_gone(kernel).await;
    support::wait_until_gone(spare).await;
    // What the kernel started goes too: in its group, or (in namespaces) with the namespace.
    support::wait_until_gone(grandchild).await;
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
    let kernel = support::launcher_of(status["kernel"]["pid"].as_u64().expect("pid") as i32);
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
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_CHECKPOINT", "off")]).await;
    server
        .call("execute", json!({"code": "precious = 1"}))
        .await;
    let status = server.call("runtime_status", json!({})).await.structured;
    let pid = status["kernel"]["pid"].as_u64().expect("pid") as i32;
    // SAFETY: stopping the kernel process our server started (a deadlock would look the same).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // Three missed heartbeats 5 s apart, then a fresh kernel start.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
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
    assert_eq!(
        found.structured["results"][0]["qualified_type"],
        "__main__.Hostile"
    );
    let attribute = server
        .call("inspect", json!({"name": "hostile.anything"}))
        .await;
    assert_eq!(
        attribute.structured["error"]["code"], "execution_error",
        "{:?}",
        attribute.structured
    );
    assert_eq!(attribute.structured["error"]["ename"], "RuntimeError");
    assert_eq!(
        attribute.structured["resolved"], "hostile",
        "what resolved is kept"
    );
    let huge_type = server.call("inspect", json!({"name": "huge"})).await;
    assert_eq!(huge_type.structured["qualified_type"], "builtins.str");
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
    // A long grace costs nothing when the code stops (the stop ends as soon as the kernel is idle
    // again); a short one made a loaded machine's slow stop look like a kill.
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "60")],
    )
    .await;
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
    let running = spawn("import time\ntime.sleep(600)");
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
    server.stop().await;

    // Code that ignores SIGINT: killed after the (short) grace, the kernel replaced.
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_CHECKPOINT", "off"),
            ("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "1"),
        ],
    )
    .await;
    let spawn = |code: &'static str| {
        let peer = server.client.peer().clone();
        tokio::spawn(
            async move { support::call_peer(&peer, "execute", json!({"code": code})).await },
        )
    };
    let stubborn = spawn(
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('armed', flush=True)\nwhile True:\n    pass",
    );
    // Interrupt only once the cell has installed its SIG_IGN handler: a SIGINT before that
    // would (rightly) stop it cooperatively.
    wait_for_live_output(&server, "armed").await;
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

/// Polls `get_output` for the latest execution of `default` until its stdout so far contains
/// `needle` (the execution is still running).
async fn wait_for_live_output(server: &Server, needle: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let output = server.call("get_output", json!({})).await;
        if output.structured["stdout"]
            .as_str()
            .is_some_and(|stdout| stdout.contains(needle))
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{needle:?} never appeared: {:?}",
            output.structured
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A kernel that is slow to begin a request (here: stopped with SIGSTOP for several times the
/// grace period, as a loaded machine might starve it) is interrupted once it begins, and the
/// grace period counts from then: the stop is cooperative and the namespace survives.
#[tokio::test]
async fn an_interrupt_before_the_kernel_begins_waits_for_it_and_stops_it_cooperatively() {
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "10")],
    )
    .await;
    // The first traceback of a kernel imports IPython's formatting machinery; do it now, so
    // the interrupted cell's stop is quick.
    let raised = server.call("execute", json!({"code": "1/0"})).await;
    assert_eq!(
        raised.structured["error"]["ename"], "ZeroDivisionError",
        "{raised:?}"
    );
    let pid = server
        .call(
            "execute",
            json!({"code": "kept = 1\nimport os\nos.getpid()"}),
        )
        .await
        .structured["result"]["text/plain"]
        .as_str()
        .expect("pid")
        .parse()
        .expect("a pid");
    let kernel_pid = server.call("runtime_status", json!({})).await.structured["kernel"]["pid"]
        .as_u64()
        .expect("pid");
    let pid = support::host_pid(kernel_pid, pid).to_string();
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{name} {pid}");
    };
    signal("STOP");
    let peer = server.client.peer().clone();
    let running = tokio::spawn(async move {
        support::call_peer(
            &peer,
            "execute",
            json!({"code": "import time\ntime.sleep(60)"}),
        )
        .await
    });
    server
        .wait_until(|status| status["operation_active"] == true)
        .await;
    let peer = server.client.peer().clone();
    let interrupt =
        tokio::spawn(async move { support::call_peer(&peer, "interrupt", json!({})).await });
    // The stimulus, not a wait for an event: the kernel stays stopped twice the grace period
    // counted from the interrupt call (and well inside the wait for a kernel to begin the
    // request, which is bounded like a kernel start: 120 s in the tests).
    tokio::time::sleep(Duration::from_secs(20)).await;
    signal("CONT");
    let stopped = interrupt.await.expect("join");
    let call = running.await.expect("join");
    assert_eq!(
        stopped.structured["interruption"], "cooperative",
        "{:?}\nthe call: {:?}",
        stopped.structured, call.structured
    );
    assert_eq!(stopped.structured["namespace"], "preserved");
    assert_eq!(stopped.structured["epoch"], 0);
    assert_eq!(
        call.structured["status"], "cancelled",
        "{:?}",
        call.structured
    );
    assert_eq!(call.structured["runtime"]["interruption"], "cooperative");
    assert_eq!(
        server
            .call("execute", json!({"code": "kept"}))
            .await
            .structured["result"]["text/plain"],
        "1"
    );
    server.stop().await;
}

#[tokio::test]
async fn doctor_finds_python_runs_a_round_trip_and_says_so() {
    let doctor = |env: &[(&str, &str)]| {
        let mut command = support::command(env);
        command.arg("doctor").stdin(std::process::Stdio::null());
        async move { command.output().await.expect("run doctor") }
    };
    // With a network allowlist, the kernel it checks has the allowlist (through the proxy),
    // not the network taken away.
    let (output, allowlisted) = tokio::join!(
        doctor(&[]),
        doctor(&[("IPYTHON_MCP_SANDBOX_NETWORK", "pypi.org")])
    );
    let allowlisted = String::from_utf8_lossy(&allowlisted.stdout);
    assert!(
        allowlisted.contains("network allowlist (pypi.org)") && allowlisted.contains("all good"),
        "{allowlisted}"
    );
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

/// The report alone by default (the server's info lines interleaved with it made it hard to
/// read); `--verbose` brings them back.
#[tokio::test]
async fn doctor_prints_its_report_without_log_lines_unless_asked() {
    let doctor = |verbose: bool| {
        let mut command = support::command(&[]);
        command
            .env_remove("IPYTHON_MCP_LOG")
            .arg("doctor")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if verbose {
            command.arg("--verbose");
        }
        async move { command.output().await.expect("run doctor") }
    };
    let quiet = doctor(false).await;
    let stderr = String::from_utf8_lossy(&quiet.stderr);
    let stdout = String::from_utf8_lossy(&quiet.stdout);
    assert!(quiet.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("all good"), "{stdout}");
    assert!(
        !stderr.contains(" INFO "),
        "log lines without asking:\n{stderr}"
    );
    assert!(!stdout.contains(" INFO "), "{stdout}");

    let verbose = doctor(true).await;
    let stderr = String::from_utf8_lossy(&verbose.stderr);
    assert!(verbose.status.success(), "{stderr}");
    assert!(
        stderr.contains(" INFO "),
        "--verbose shows the logs:\n{stderr}"
    );
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

/// Nobody waits for a background execute, so the queue-wait limit (for callers that wait) does
/// not apply to it: jobs queued behind a long one run in order when their turn comes.
#[tokio::test]
async fn background_jobs_queued_behind_a_long_one_run_in_order_instead_of_timing_out() {
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_QUEUE_WAIT_TIMEOUT_SECONDS", "1"),
            ("IPYTHON_MCP_MAX_PENDING_OPERATIONS", "2"),
        ],
    )
    .await;
    assert!(server
        .call("execute", json!({"code": "order = []"}))
        .await
        .ok());
    let flag = Flag::new();
    let mut ids = Vec::new();
    for job in 1..=3 {
        let wait = if job == 1 {
            flag.wait_code()
        } else {
            String::new()
        };
        let code = format!("order.append({job})\nprint('job {job}')\n{wait}");
        let started = server
            .call("execute", json!({"code": code, "background": true}))
            .await;
        assert_eq!(started.structured["status"], "pending", "{started:?}");
        ids.push(
            started.structured["execution_id"]
                .as_str()
                .expect("id")
                .to_owned(),
        );
        if job == 1 {
            server
                .wait_until(|status| status["operation_active"] == true)
                .await;
        }
    }
    server.wait_until(|status| status["queue_depth"] == 2).await;
    // The pending bound still holds for background work.
    let refused = server
        .call(
            "execute",
            json!({"code": "order.append(4)", "background": true}),
        )
        .await;
    assert_eq!(
        refused.structured["error"]["code"], "runtime_busy",
        "{refused:?}"
    );
    // The stimulus: the queued jobs wait three times the queue-wait limit.
    tokio::time::sleep(Duration::from_secs(3)).await;
    flag.set();
    for (index, id) in ids.iter().enumerate() {
        let output = server
            .call(
                "get_output",
                json!({"execution_id": id, "wait_seconds": 120}),
            )
            .await;
        assert_eq!(output.structured["status"], "ok", "{output:?}");
        assert_eq!(
            output.structured["stdout"],
            format!("job {}\n", index + 1),
            "{output:?}"
        );
    }
    let order = server.call("execute", json!({"code": "order"})).await;
    assert_eq!(order.structured["result"]["text/plain"], "[1, 2, 3]");
    server.stop().await;
}

/// A call whose kernel was replaced reports the epoch the session is in when it returns, so
/// `namespace: reset` and the new epoch arrive together.
#[tokio::test]
async fn a_reset_reports_the_epoch_the_session_is_in_now() {
    let server = Server::start(Family::Handshake, &[]).await;
    let died = server
        .call("execute", json!({"code": "import os\nos._exit(1)"}))
        .await;
    assert_eq!(died.structured["error"]["code"], "kernel_died", "{died:?}");
    assert_eq!(died.structured["runtime"]["namespace"], "reset");
    assert_eq!(died.structured["runtime"]["epoch"], 1, "{died:?}");
    let status = server.call("runtime_status", json!({})).await;
    assert_eq!(status.structured["epoch"], 1);
    server.stop().await;
}

/// On SIGTERM nobody cancelled anything: a queued call ends `runtime_closed` (it never ran)
/// and the running one says the server shut down while it ran.
#[tokio::test]
async fn sigterm_ends_queued_and_running_calls_runtime_closed_not_cancelled() {
    let server = Server::start(Family::Handshake, &[]).await;
    let flag = Flag::new();
    let spawn = |code: String| {
        let peer = server.client.peer().clone();
        tokio::spawn(
            async move { support::call_peer(&peer, "execute", json!({"code": code})).await },
        )
    };
    let running = spawn(flag.wait_code());
    server
        .wait_until(|status| status["operation_active"] == true)
        .await;
    let queued = spawn("queued = 1".to_owned());
    server.wait_until(|status| status["queue_depth"] == 1).await;
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(server.pid as i32, libc::SIGTERM) }, 0);
    let queued = queued.await.expect("join");
    assert_eq!(
        queued.structured["error"]["code"], "runtime_closed",
        "{queued:?}"
    );
    assert_eq!(queued.structured["status"], "rejected", "{queued:?}");
    let running = running.await.expect("join");
    assert_eq!(
        running.structured["error"]["code"], "runtime_closed",
        "{running:?}"
    );
    assert!(
        running.structured["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("shut down while this was running")),
        "{running:?}"
    );
    server.wait_exit(Duration::from_secs(60)).await;
}

/// Sessions shut down together: eight kernels whose code ignores the interrupt cost one grace
/// period on SIGTERM, not eight, and no kernel outlives the server.
#[tokio::test]
async fn sigterm_with_eight_busy_kernels_stops_them_together() {
    let grace = 4;
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_MAX_KERNELS", "8"),
            ("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "4"),
        ],
    )
    .await;
    let status = server.call("runtime_status", json!({})).await;
    let python = status.structured["kernel"]["python"]
        .as_str()
        .expect("python")
        .to_owned();
    let mut kernels = vec!["default".to_owned()];
    for index in 1..8 {
        let name = format!("busy{index}");
        let started = server
            .call("kernel_start", json!({"spec": python, "kernel": name}))
            .await;
        assert!(started.ok(), "{started:?}");
        kernels.push(name);
    }
    let mut pids = Vec::new();
    for kernel in &kernels {
        // SIGINT blocked, then a long sleep: only the kill after the grace ends it.
        let armed = server
            .call(
                "execute",
                json!({"kernel": kernel, "code": "import os, signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])\nos.getpid()"}),
            )
            .await;
        let pid: i32 = armed.structured["result"]["text/plain"]
            .as_str()
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("pid: {armed:?}"));
        let kernel_pid = server
            .call("runtime_status", json!({"kernel": kernel}))
            .await
            .structured["kernel"]["pid"]
            .as_u64()
            .expect("pid");
        pids.push(support::host_pid(kernel_pid, pid));
        let started = server
            .call(
                "execute",
                json!({"kernel": kernel, "code": "import time\ntime.sleep(600)", "background": true}),
            )
            .await;
        assert_eq!(started.structured["status"], "pending", "{started:?}");
    }
    for kernel in &kernels {
        server
            .wait_until_in(kernel, |status| status["operation_active"] == true)
            .await;
    }
    let started = std::time::Instant::now();
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(server.pid as i32, libc::SIGTERM) }, 0);
    server.wait_exit(Duration::from_secs(120)).await;
    let took = started.elapsed();
    // One after another this is at least 8 × 4 s; together, one grace plus the kills, with a
    // wide margin for a loaded machine (the benchmark measures it).
    assert!(
        took < Duration::from_secs(8 * grace - 4),
        "SIGTERM with 8 busy kernels took {took:?}"
    );
    for pid in pids {
        support::wait_until_gone(pid).await;
    }
}

#[tokio::test]
async fn trace_logs_carry_no_code_arguments_results_outputs_or_secrets() {
    let (server, stderr) = Server::start_logged(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_LOG", "trace"),
            (
                "IPYTHON_MCP_ENVIRONMENT_VARIABLES",
                r#"{"LOG_TEST_SECRET": "secret-value-7d1f"}"#,
            ),
        ],
    )
    .await;
    let code = "marker_a1 = 'in-code-b2'\nprint('printed-c3')\nimport os\ndef shout(text: str) -> str:\n    return text.upper() + '-returned-f6'\nos.environ['LOG_TEST_SECRET']";
    let ran = server.call("execute", json!({ "code": code })).await;
    assert_eq!(
        ran.structured["result"]["text/plain"], "'secret-value-7d1f'",
        "{:?}",
        ran.structured
    );
    let raised = server
        .call("execute", json!({"code": "raise ValueError('raised-d4')"}))
        .await;
    assert_eq!(raised.structured["error"]["ename"], "ValueError");
    let called = server
        .call(
            "call_function",
            json!({"name": "shout", "arguments": {"text": "argument-e5"}}),
        )
        .await;
    assert_eq!(called.structured["result"], "ARGUMENT-E5-returned-f6");
    let inspected = server.call("inspect", json!({"name": "marker_a1"})).await;
    assert_eq!(inspected.structured["representation"], "'in-code-b2'");
    let refused = server
        .call_raw(
            "execute",
            json!({"code": "never-run-g7", "timeout_seconds": "soon-h8"}),
        )
        .await;
    assert!(refused.is_error);
    let missing = server
        .call_raw("notebook_read", json!({"path": "missing-i9.ipynb"}))
        .await;
    assert!(missing.is_error);
    server.stop().await;
    let logged = stderr.lock().expect("stderr lock").clone();
    assert!(
        logged.contains("DEBUG") && logged.contains("tool call"),
        "trace logging was on: {logged}"
    );
    for value in [
        "marker_a1",
        "in-code-b2",
        "printed-c3",
        "raised-d4",
        "argument-e5",
        "ARGUMENT-E5",
        "returned-f6",
        "never-run-g7",
        "soon-h8",
        "missing-i9",
        "secret-value-7d1f",
        "Traceback",
    ] {
        assert!(
            !logged.contains(value),
            "{value:?} reached stderr:\n{logged}"
        );
    }
}

/// JSON types a property schema admits (`$ref`s into `defs` and `anyOf`/`oneOf` followed);
/// None when it admits anything.
fn admitted_types(schema: &Value, defs: &Value) -> Option<Vec<String>> {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference.trim_start_matches("#/$defs/");
        return admitted_types(&defs[name], defs);
    }
    if let Some(types) = schema.get("type") {
        return Some(match types {
            Value::String(one) => vec![one.clone()],
            Value::Array(many) => many
                .iter()
                .filter_map(|one| one.as_str().map(str::to_owned))
                .collect(),
            _ => return None,
        });
    }
    if schema.get("enum").is_some() || schema.get("const").is_some() {
        return Some(vec!["string".to_owned()]);
    }
    let branches = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))?
        .as_array()?;
    let mut all = Vec::new();
    for branch in branches {
        all.extend(admitted_types(branch, defs)?);
    }
    Some(all)
}

/// Values of the wrong JSON type for a property that admits `types`: strings that spell no
/// boolean or number first (a string that does spell one is taken as that value), then one
/// of each other type.
fn wrong_values(types: &[String]) -> Vec<Value> {
    let admits = |name: &str| {
        types.iter().any(|one| {
            one == name
                || (name == "integer" && one == "number")
                || (name == "number" && one == "integer")
        })
    };
    let mut values = Vec::new();
    if admits("boolean") && !admits("string") {
        values.push(json!("yes"));
    }
    if (admits("number") || admits("integer")) && !admits("string") {
        values.push(json!("five"));
    }
    for (name, value) in [
        ("string", json!(12345)),
        ("boolean", json!({"x": 1})),
        ("array", json!("a")),
        ("object", json!([1])),
        ("number", json!(true)),
        ("integer", json!(1.5)),
    ] {
        if admits(name) && values.len() < 3 {
            let value_type = match &value {
                Value::String(_) => "string",
                Value::Number(n) if n.is_f64() => "number",
                Value::Number(_) => "integer",
                Value::Bool(_) => "boolean",
                Value::Array(_) => "array",
                _ => "object",
            };
            if !admits(value_type) {
                values.push(value);
            }
        }
    }
    values
}

#[tokio::test]
async fn wrong_missing_or_unknown_arguments_get_a_structured_invalid_arguments_from_every_tool() {
    let server = Server::start(Family::Handshake, &[]).await;
    let tools = server.client.list_all_tools().await.expect("tools/list");
    let mut checked = 0;
    let check = |tool: &str, arguments: &Value, reply: &support::ToolResult, field: &str| {
        assert!(reply.is_error, "{tool} {arguments}: {reply:?}");
        assert_eq!(reply.structured["ok"], false, "{tool} {arguments}");
        assert_eq!(
            reply.structured["error"]["code"], "invalid_arguments",
            "{tool} {arguments}: {:?}",
            reply.structured
        );
        let message = reply.structured["error"]["message"]
            .as_str()
            .expect("message");
        assert!(
            message.contains(&format!("`{field}`")),
            "{tool} {arguments}: the message names {field}: {message}"
        );
        assert!(
            reply.text().contains(message),
            "{tool}: the text says it too"
        );
    };
    for tool in &tools {
        let name = tool.name.as_ref();
        let schema = Value::Object((*tool.input_schema).clone());
        let defs = schema.get("$defs").cloned().unwrap_or(Value::Null);
        let properties = schema["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (property, property_schema) in &properties {
            let Some(types) = admitted_types(property_schema, &defs) else {
                continue;
            };
            for wrong in wrong_values(&types) {
                let arguments = json!({ property.clone(): wrong });
                let reply = server.call(name, arguments.clone()).await;
                check(name, &arguments, &reply, property);
                checked += 1;
            }
        }
        let unknown = json!({"no_such_argument": 1});
        let reply = server.call(name, unknown.clone()).await;
        check(name, &unknown, &reply, "no_such_argument");
        if let Some(required) = schema["required"].as_array().and_then(|r| r.first()) {
            let required = required.as_str().expect("name");
            let reply = server.call(name, json!({})).await;
            check(name, &json!({}), &reply, required);
        }
    }
    assert!(checked > 60, "every parameter was tried: {checked}");
    // Nothing ran: a refused execute leaves no trace and no execution count.
    let refused = server
        .call(
            "execute",
            json!({"code": "ran = 1", "timeout_seconds": "5 s"}),
        )
        .await;
    assert_eq!(refused.structured["status"], "rejected");
    let refused = server
        .call("execute", json!({"code": "ran = 1", "background": "True"}))
        .await;
    assert_eq!(refused.structured["error"]["code"], "invalid_arguments");
    let check_ran = server
        .call("execute", json!({"code": "'ran' in globals()"}))
        .await;
    assert_eq!(check_ran.structured["result"]["text/plain"], "False");
    assert_eq!(check_ran.structured["execution_count"], 1);
    server.stop().await;
}

/// Claude Code sends booleans, numbers and arrays as JSON strings: each is taken as the value
/// it spells when the tool declares that type, and means what the plain value would.
#[tokio::test]
async fn arguments_sent_as_strings_are_taken_when_they_spell_the_declared_type() {
    let server = Server::start(Family::Handshake, &[]).await;
    let set = server
        .call(
            "execute",
            json!({"code": "x = 41\ny = 1", "timeout_seconds": "20", "background": "false"}),
        )
        .await;
    assert!(set.ok(), "{:?}", set.structured);
    assert_eq!(set.structured["status"], "ok");
    let background = server
        .call("execute", json!({"code": "x + 1", "background": "true"}))
        .await;
    assert_eq!(
        background.structured["status"], "pending",
        "{:?}",
        background.structured
    );
    let id = background.structured["execution_id"].clone();
    let finished = server
        .call(
            "get_output",
            json!({"execution_id": id, "wait_seconds": "60"}),
        )
        .await;
    assert_eq!(
        finished.structured["finished"], true,
        "{:?}",
        finished.structured
    );
    assert_eq!(finished.structured["result"]["text/plain"], "42");
    let removed = server
        .call("remove", json!({"names": "[\"y\", \"nope\"]"}))
        .await;
    assert_eq!(
        removed.structured["removed"],
        json!(["y"]),
        "{:?}",
        removed.structured
    );
    assert_eq!(removed.structured["unknown"], json!(["nope"]));
    let found = server
        .call(
            "search",
            json!({"query": "x", "exact": "true", "limit": "1"}),
        )
        .await;
    assert!(found.ok(), "{:?}", found.structured);
    assert_eq!(found.structured["results"][0]["name"], "x");
    // A string parameter keeps the string, even one that spells a number.
    let code = server.call("execute", json!({"code": "7"})).await;
    assert_eq!(code.structured["result"]["text/plain"], "7");
    server.stop().await;
}

#[tokio::test]
async fn inspect_of_an_object_whose_repr_or_docstring_raises_is_an_error_not_a_placeholder() {
    let server = Server::start(Family::Handshake, &[]).await;
    let code = "class Hostile:\n    def __repr__(self):\n        raise RuntimeError('no repr')\n    @property\n    def __doc__(self):\n        raise RuntimeError('no doc')\nhostile = Hostile()";
    assert!(server.call("execute", json!({"code": code})).await.ok());
    let inspected = server.call("inspect", json!({"name": "hostile"})).await;
    assert!(inspected.is_error, "{:?}", inspected.structured);
    let structured = &inspected.structured;
    assert_eq!(structured["ok"], false);
    assert_eq!(
        structured["error"]["code"], "execution_error",
        "{structured}"
    );
    assert_eq!(structured["error"]["ename"], "RuntimeError");
    let message = structured["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("documentation, representation of 'hostile'"),
        "{message}"
    );
    // What could be worked out is kept; what raised is absent, not a placeholder.
    assert_eq!(structured["qualified_type"], "__main__.Hostile");
    assert_eq!(structured["module"], "__main__");
    assert_eq!(structured["kind"], "variable");
    assert_eq!(structured["callable"], false);
    assert!(structured.get("representation").is_none(), "{structured}");
    assert!(structured.get("documentation").is_none(), "{structured}");
    assert_eq!(
        structured["truncated"],
        json!({"qualified_type": false, "signature": false, "module": false, "documentation": false, "representation": false})
    );
    let plain = server
        .call("inspect", json!({"name": "hostile.__class__"}))
        .await;
    assert!(plain.ok(), "{:?}", plain.structured);
    assert_eq!(plain.structured["qualified_type"], "builtins.type");
    server.stop().await;
}

/// A namespace call stopped by its deadline is a timeout, not the function raising
/// KeyboardInterrupt; namespace and dynamic-tool results carry execute's `runtime`, so the
/// agent knows its state survived.
#[tokio::test]
async fn a_namespace_call_that_hits_its_deadline_is_a_timeout_and_says_the_state_survived() {
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_OPERATION_TIMEOUT_SECONDS", "3"),
            // A long grace costs nothing when the function stops, and keeps the stop cooperative.
            ("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "60"),
        ],
    )
    .await;
    let code = "import time\nkept = 1\ndef slow():\n    time.sleep(600)\ndef quick() -> int:\n    \"\"\"Answer one.\"\"\"\n    return 1";
    assert!(server.call("execute", json!({"code": code})).await.ok());
    let quick = server.call("call_function", json!({"name": "quick"})).await;
    assert!(quick.ok(), "{quick:?}");
    assert_eq!(quick.structured["runtime"]["epoch"], 0, "{quick:?}");
    assert!(quick.structured["runtime"]["run_ms"].is_u64(), "{quick:?}");
    let slow = server.call("call_function", json!({"name": "slow"})).await;
    assert_eq!(slow.structured["ok"], false, "{slow:?}");
    assert_eq!(
        slow.structured["error"]["code"], "operation_timeout",
        "{slow:?}"
    );
    assert_eq!(slow.structured["runtime"]["interruption"], "cooperative");
    assert_eq!(slow.structured["runtime"]["namespace"], "preserved");
    let listed = server.call("list", json!({})).await;
    assert_eq!(listed.structured["runtime"]["epoch"], 0, "{listed:?}");
    let registered = server.call("register_tool", json!({"name": "quick"})).await;
    assert!(registered.ok(), "{registered:?}");
    let called = server.call("quick", json!({})).await;
    assert!(called.ok(), "{called:?}");
    assert_eq!(called.structured["result"], 1);
    assert_eq!(called.structured["runtime"]["epoch"], 0, "{called:?}");
    let kept = server.call("execute", json!({"code": "kept"})).await;
    assert_eq!(kept.structured["result"]["text/plain"], "1");
    server.stop().await;
}
