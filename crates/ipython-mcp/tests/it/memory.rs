//! End to end: a kernel's memory limit (the watchdog always, the cgroup where this machine
//! allows one) and deaths told by what ended them, against real kernels.

use crate::support;

use serde_json::{json, Value};
use support::{Family, Server};

const MIB: u64 = 1 << 20;

/// Grows a list of filled (so resident) 8 MiB blocks without end: only the limit stops it.
const GROW: &str = "blocks = []\nwhile True:\n    blocks.append(b'x' * (8 * 2**20))";

/// A second kernel with a variable in it, to show a memory kill reaches only its own kernel.
async fn bystander(server: &Server) {
    let status = server.call("runtime_status", json!({})).await;
    let python = status.structured["kernel"]["python"]
        .as_str()
        .expect("python")
        .to_owned();
    let started = server
        .call(
            "kernel_start",
            json!({"spec": python, "kernel": "bystander"}),
        )
        .await;
    assert!(started.ok(), "{started:?}");
    let set = server
        .call(
            "execute",
            json!({"code": "kept = 'still here'", "kernel": "bystander"}),
        )
        .await;
    assert!(set.ok(), "{set:?}");
}

/// Runs `GROW` in the default kernel under a 300 MiB limit enforced by `enforcement` and checks
/// everything the agent sees.
async fn the_limit_ends_the_kernel(server: &Server, enforcement: &str) {
    let limit = 300 * MIB;
    bystander(server).await;
    // Metered before anything runs: the limit, what enforces it, and a sample of the idle kernel.
    let idle = server
        .wait_until(|status| status["memory"]["current_bytes"].as_u64() > Some(0))
        .await;
    assert_eq!(idle["memory"]["limit_bytes"], limit, "{idle}");
    assert_eq!(idle["memory"]["enforcement"], enforcement, "{idle}");
    let epoch = idle["epoch"].as_u64().expect("epoch");

    let result = server.call("execute", json!({"code": GROW})).await;
    assert!(result.is_error, "{result:?}");
    let error = &result.structured["error"];
    assert_eq!(error["code"], "out_of_memory", "{result:?}");
    assert_eq!(error["limit_bytes"], limit, "{error}");
    let peak = error["peak_bytes"].as_u64().expect("peak_bytes");
    // The watchdog sees the tree past the limit before it kills; the cgroup's charge reaches it.
    assert!(peak >= limit - 8 * MIB, "peak {peak} of {limit}: {error}");
    let message = error["message"].as_str().expect("message");
    assert!(message.contains("out of memory"), "{message}");
    assert!(message.contains("300.0 MiB"), "{message}");
    let by = if enforcement == "watchdog" {
        "the server's memory watchdog killed them"
    } else {
        "out-of-memory killer ended them in their cgroup"
    };
    assert!(message.contains(by), "{message}");
    assert!(
        error["hint"]
            .as_str()
            .is_some_and(|hint| hint.contains("re-run your setup")),
        "{error}"
    );
    assert_eq!(result.structured["status"], "error");
    assert_eq!(result.structured["runtime"]["namespace"], "reset");

    // The session goes on, on a fresh kernel with a fresh meter.
    let after = server.call("execute", json!({"code": "1 + 1"})).await;
    assert!(after.ok(), "{after:?}");
    assert_eq!(after.structured["result"]["text/plain"], "2");
    let gone = server.call("execute", json!({"code": "blocks"})).await;
    assert_eq!(gone.structured["error"]["ename"], "NameError", "{gone:?}");
    let status = server
        .wait_until(|status| status["memory"]["current_bytes"].as_u64() > Some(0))
        .await;
    assert!(status["epoch"].as_u64() > Some(epoch), "{status}");
    assert_eq!(status["memory"]["limit_bytes"], limit, "{status}");
    assert!(
        status["memory"]["peak_bytes"].as_u64() < Some(limit / 2),
        "the replacement's own peak: {status}"
    );
    // The other kernel never noticed.
    let kept = server
        .call("execute", json!({"code": "kept", "kernel": "bystander"}))
        .await;
    assert_eq!(
        kept.structured["result"]["text/plain"], "'still here'",
        "{kept:?}"
    );
}

#[tokio::test]
async fn the_watchdog_kills_a_kernel_past_its_limit_and_the_session_goes_on() {
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_CHECKPOINT", "off"),
            ("IPYTHON_MCP_KERNEL_MEMORY_LIMIT", "300MiB"),
            ("IPYTHON_MCP_KERNEL_MEMORY_ENFORCEMENT", "watchdog"),
        ],
    )
    .await;
    the_limit_ends_the_kernel(&server, "watchdog").await;
    server.stop().await;
}

/// The cgroup path runs wherever the server may make a kernel's cgroup; where it may not, the
/// probe says why (printed, and the server must then have taken the watchdog). Never skipped
/// silently: the decision is the same probe the server makes.
#[tokio::test]
async fn a_cgroup_ends_a_kernel_past_its_limit_where_the_machine_allows_one() {
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_CHECKPOINT", "off"),
            ("IPYTHON_MCP_KERNEL_MEMORY_LIMIT", "300MiB"),
        ],
    )
    .await;
    match ipython_mcp_jupyter::memory::cgroup_parent() {
        Ok(parent) => {
            eprintln!("kernel cgroups under {}", parent.display());
            the_limit_ends_the_kernel(&server, "cgroup").await;
            // Each kernel's group goes with it; the live ones remain.
            server.stop().await;
            let left: Vec<_> = std::fs::read_dir(parent)
                .expect("the parent group")
                .flatten()
                .filter(|entry| {
                    entry
                        .file_name()
                        .to_string_lossy()
                        .starts_with("ipython-mcp-kernel-")
                })
                .collect();
            assert!(left.len() <= 8, "{left:?}");
        }
        Err(why) => {
            eprintln!("no kernel cgroup on this machine, so the watchdog enforces limits: {why}");
            let status = server
                .wait_until(|status| status["memory"]["enforcement"] != Value::Null)
                .await;
            assert_eq!(status["memory"]["enforcement"], "watchdog", "{status}");
            server.stop().await;
        }
    }
}

/// Runs `code`, which ends the kernel, and returns the error.
async fn death(server: &Server, code: &str) -> Value {
    let result = server.call("execute", json!({"code": code})).await;
    assert!(result.is_error, "{result:?}");
    assert_eq!(result.structured["runtime"]["namespace"], "reset");
    let error = result.structured["error"].clone();
    // The replacement answers.
    let after = server.call("execute", json!({"code": "1 + 1"})).await;
    assert!(after.ok(), "{after:?}");
    error
}

#[tokio::test]
async fn deaths_are_told_by_what_ended_the_kernel() {
    let limit = 300 * MIB;
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_CHECKPOINT", "off"),
            ("IPYTHON_MCP_KERNEL_MEMORY_LIMIT", "300MiB"),
            ("IPYTHON_MCP_KERNEL_MEMORY_ENFORCEMENT", "watchdog"),
        ],
    )
    .await;

    let exited = death(&server, "import os\nos._exit(3)").await;
    assert_eq!(exited["code"], "kernel_died", "{exited}");
    let message = exited["message"].as_str().expect("message");
    assert!(message.contains("(exited with status 3)"), "{message}");

    let segfault = death(
        &server,
        "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)",
    )
    .await;
    assert_eq!(segfault["code"], "kernel_died", "{segfault}");
    let message = segfault["message"].as_str().expect("message");
    assert!(
        message.contains("killed by SIGSEGV (signal 11)"),
        "{message}"
    );

    // A SIGKILL without memory pressure is only a SIGKILL.
    let killed = death(
        &server,
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
    )
    .await;
    assert_eq!(killed["code"], "kernel_died", "{killed}");
    let message = killed["message"].as_str().expect("message");
    assert!(
        message.contains("(killed by SIGKILL (signal 9))"),
        "{message}"
    );
    assert!(!message.contains("memory"), "{message}");
    assert!(killed.get("limit_bytes").is_none(), "{killed}");

    // A SIGKILL from elsewhere while the kernel is near its limit is likely the system's
    // out-of-memory killer: said as likely, and not `out_of_memory`, which is for certainty.
    let idle = server
        .wait_until(|status| status["memory"]["current_bytes"].as_u64() > Some(0))
        .await;
    let used = idle["memory"]["current_bytes"].as_u64().expect("current");
    let ballast = (limit * 95 / 100).saturating_sub(used);
    let near = server
        .call(
            "execute",
            json!({"code": format!("ballast = b'x' * {ballast}\nlen(ballast)")}),
        )
        .await;
    assert!(near.ok(), "{near:?}");
    server
        .wait_until(|status| status["memory"]["peak_bytes"].as_u64() >= Some(limit * 9 / 10))
        .await;
    let likely = death(
        &server,
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
    )
    .await;
    assert_eq!(likely["code"], "kernel_died", "{likely}");
    let message = likely["message"].as_str().expect("message");
    assert!(
        message.contains("killed by SIGKILL (signal 9), likely by the system's out-of-memory killer: its processes had used up to"),
        "{message}"
    );
    assert!(message.contains("of its 300.0 MiB limit"), "{message}");
    server.stop().await;
}
