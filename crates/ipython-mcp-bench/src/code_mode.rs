//! `ipython-mcp-bench code-mode [CALLS]`: what a call to an upstream MCP server costs from
//! kernel code. An upstream written with the official Python SDK (stdio) has a `noop` tool;
//! kernel code calls it `CALLS` times through `mcp_servers` (kernel → stdin channel → server →
//! upstream and back), timing each call in the kernel; then the SDK's own client calls it as
//! many times over stdio, timing each the same way. Prints p50 and p99 of both and the
//! difference: what the bridge adds to the upstream's own round trip. Also the characters a
//! model reads for one task both ways: the upstream's tool definitions plus a 200-row result
//! when it calls the tool itself, against the code and the filtered answer in code mode.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use rmcp::model::CallToolRequestParams;
use serde_json::{json, Value};

use crate::server::{serve, Served};

/// Calls unless the command line gives another number (after as many warm-up calls).
pub(crate) const CODE_MODE_CALLS: usize = 300;

const UPSTREAM: &str = r#"
import json
from mcp.server import MCPServer

server = MCPServer("bench")

@server.tool(structured_output=False)
def noop() -> str:
    """Does nothing."""
    return "ok"

@server.tool()
def list_orders(customer: str, status: str = "any") -> dict[str, object]:
    """Orders of a customer: id, status, total, items, and the shipping address."""
    rows = [{"id": 1000 + n, "status": ["open", "shipped", "returned"][n % 3], "total": round(10 + n * 3.7, 2),
             "items": n % 5 + 1, "address": "%d Long Street, Springfield" % n} for n in range(200)]
    return {"customer": customer, "orders": rows}

server.run()
"#;

/// Times `calls` calls of `noop` after as many warm-up calls: `call()` is the call.
const TIMING: &str = r#"
import time
def timed(call, calls):
    for _ in range(calls):
        call()
    samples = []
    for _ in range(calls):
        began = time.perf_counter()
        call()
        samples.append((time.perf_counter() - began) * 1000)
    samples.sort()
    return samples[len(samples) // 2], samples[min(len(samples) - 1, int(len(samples) * 0.99))]
"#;

/// The SDK's client over stdio, timed like the kernel's calls.
const DIRECT: &str = r#"
import asyncio, os, sys, time
from mcp import Client
from mcp.client.stdio import StdioServerParameters

async def main(python, script, calls):
    params = StdioServerParameters(command=python, args=[script], env={"PYTHONPATH": os.environ["PYTHONPATH"]})
    async with Client(params, mode="auto") as client:
        for _ in range(calls):
            await client.call_tool("noop", {})
        samples = []
        for _ in range(calls):
            began = time.perf_counter()
            await client.call_tool("noop", {})
            samples.append((time.perf_counter() - began) * 1000)
        samples.sort()
        print(samples[len(samples) // 2], samples[min(len(samples) - 1, int(len(samples) * 0.99))])
        tools = await client.list_tools()
        orders = await client.call_tool("list_orders", {"customer": "acme"})
        definitions = sum(len(t.model_dump_json(by_alias=True, exclude_none=True)) for t in tools.tools)
        print(definitions, len(orders.content[0].text))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"#;

/// What the agent writes in code mode for the same task, and reads back.
const TASK: &str = "import mcp_servers\norders = mcp_servers.bench.list_orders('acme')['orders']\nreturned = [o for o in orders if o['status'] == 'returned']\nlen(returned), round(sum(o['total'] for o in returned), 2)";

pub(crate) async fn bench_code_mode(
    server_binary: &Path,
    python: &Path,
    calls: usize,
) -> anyhow::Result<()> {
    let sdk = sdk(python)?;
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("upstream.py");
    std::fs::write(&script, UPSTREAM)?;
    let config = dir.path().join("upstreams.json");
    let upstream_env = json!({"PYTHONPATH": sdk});
    std::fs::write(
        &config,
        json!({"mcpServers": {"bench": {"command": python, "args": [&script], "env": upstream_env}}})
            .to_string(),
    )?;
    let env = vec![
        (ipython_mcp_config::LOG.env, "warn".to_owned()),
        (ipython_mcp_config::PYTHON.env, python.display().to_string()),
        (
            ipython_mcp_config::UPSTREAM_SERVERS.env,
            config.display().to_string(),
        ),
        (
            ipython_mcp_config::STRUCTURED_OUTPUT.env,
            "always".to_owned(),
        ),
    ];
    let Served {
        client, mut child, ..
    } = serve(server_binary, &env).await?;
    let code =
        format!("{TIMING}\nimport mcp_servers\nprint(*timed(mcp_servers.bench.noop, {calls}))");
    let timed = execute(&client, &code).await?;
    let through: Vec<f64> = timed["stdout"]
        .as_str()
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|figure| figure.parse().ok())
        .collect();
    let task = execute(&client, TASK).await?;
    let _ = client.cancel().await;
    let _ = child.kill().await;
    let direct = tokio::process::Command::new(python)
        .arg("-c")
        .arg(DIRECT)
        .arg(python)
        .arg(&script)
        .arg(calls.to_string())
        .env("PYTHONPATH", &sdk)
        .output()
        .await?;
    if !direct.status.success() {
        bail!(
            "the SDK client failed: {}",
            String::from_utf8_lossy(&direct.stderr)
        );
    }
    let direct = String::from_utf8_lossy(&direct.stdout);
    let figures: Vec<f64> = direct
        .split_whitespace()
        .filter_map(|figure| figure.parse().ok())
        .collect();
    let [through_p50, through_p99] =
        <[f64; 2]>::try_from(through.as_slice()).context("the kernel's timing")?;
    let [direct_p50, direct_p99, definitions, result] =
        <[f64; 4]>::try_from(figures.as_slice()).context("the SDK client's timing")?;
    println!("code mode, {calls} calls of a no-op upstream tool over stdio (after as many warm-up calls):");
    println!(
        "  from kernel code (mcp_servers)  p50 {through_p50:>7.3} ms   p99 {through_p99:>7.3} ms"
    );
    println!(
        "  the SDK's own client            p50 {direct_p50:>7.3} ms   p99 {direct_p99:>7.3} ms"
    );
    println!(
        "  added by the bridge             p50 {:>7.3} ms   p99 {:>7.3} ms",
        through_p50 - direct_p50,
        through_p99 - direct_p99
    );
    // What the model reads for "how many of acme's orders were returned, and their total":
    // calling the upstream's tool itself, the tools' definitions plus the whole result; in
    // code mode, the code it writes and the answer.
    let answer = task["result"]["text/plain"].as_str().unwrap_or_default();
    let code_mode = TASK.len() + answer.len();
    println!(
        "  one task's characters the model reads: direct {} (definitions {definitions}, result {result}); code mode {code_mode} (code {}, answer {answer:?}): {:.1}x fewer",
        definitions + result,
        TASK.len(),
        (definitions + result) / code_mode as f64
    );
    Ok(())
}

/// The Python SDK, installed once beside the benchmark's cache.
fn sdk(python: &Path) -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("IPYTHON_MCP_BENCH_SDK") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::temp_dir().join("ipython-mcp-bench-sdk"),
    };
    if !dir.join("mcp").is_dir() {
        let status = std::process::Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "-q",
                "--target",
            ])
            .arg(&dir)
            .arg("mcp==2.3.0")
            .status()?;
        if !status.success() {
            bail!("installing the MCP Python SDK failed");
        }
    }
    Ok(dir)
}

async fn execute(
    client: &rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig>,
    code: &str,
) -> anyhow::Result<Value> {
    let arguments = json!({"code": code, "timeout_seconds": 600});
    let result = client
        .call_tool(
            CallToolRequestParams::new("execute")
                .with_arguments(arguments.as_object().cloned().unwrap_or_default()),
        )
        .await?;
    let structured = result.structured_content.unwrap_or_default();
    if structured["ok"] != true {
        bail!("execute failed: {structured}");
    }
    Ok(structured)
}
