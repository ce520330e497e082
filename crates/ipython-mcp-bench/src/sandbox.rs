//! `ipython-mcp-bench sandbox [ROUNDS]`: what the kernels' sandbox costs. Each round starts
//! three servers of the same binary: sandboxed in namespaces (`workspace-write`, the default
//! design), sandboxed by Landlock and seccomp alone (namespaces `off`), and not sandboxed
//! (`off`), in an order rotated every round; from each it takes the kernel's start
//! (`runtime_status`'s `startup_seconds`, the server's own measurement, which includes preparing
//! the sandbox) and the p50 of `CALLS` small `execute`s. Prints the medians and the medians of
//! the rounds' differences (start) and ratios (execute) against `off`. Then what the network
//! allowlist's proxy adds to one HTTP request from the kernel to a loopback server, in
//! namespaces (through the forwarded port and the proxy's Unix socket) and without.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::RunningService;
use serde_json::json;

use crate::percentile::percentile;
use crate::server::{serve, Served};

/// Rounds unless the command line gives another number.
pub(crate) const SANDBOX_ROUNDS: usize = 5;
/// `execute` calls per server, after as many warm-up calls.
const CALLS: usize = 100;

type Client = RunningService<rmcp::RoleClient, ClientConfig>;

/// One server's figures: its kernel's start and its `execute` p50, in milliseconds.
struct Figures {
    start_ms: f64,
    execute_p50_ms: f64,
}

/// The configurations measured: a name, `IPYTHON_MCP_SANDBOX`, `IPYTHON_MCP_SANDBOX_NAMESPACES`.
const DESIGNS: [(&str, &str, &str); 3] = [
    ("namespaces", "workspace-write", "auto"),
    ("landlock alone", "workspace-write", "off"),
    ("off", "off", "auto"),
];

pub(crate) async fn bench_sandbox(
    server_binary: &Path,
    python: &Path,
    rounds: usize,
) -> anyhow::Result<()> {
    let mut figures: [Vec<Figures>; 3] = Default::default();
    for round in 0..rounds {
        for step in 0..DESIGNS.len() {
            let which = (round + step) % DESIGNS.len();
            let (_, mode, namespaces) = DESIGNS[which];
            figures[which].push(measure(server_binary, python, mode, namespaces).await?);
        }
    }
    let column = |figures: &[Figures], pick: fn(&Figures) -> f64| -> Vec<f64> {
        figures.iter().map(pick).collect()
    };
    println!("kernel sandbox, {rounds} interleaved rounds ({CALLS} execute calls each):");
    for ((name, _, _), figures) in DESIGNS.iter().zip(&figures) {
        println!(
            "  {name:<16} kernel start median {:>7.1} ms   execute p50 median {:>6.3} ms",
            percentile(&column(figures, |f| f.start_ms), 0.5),
            percentile(&column(figures, |f| f.execute_p50_ms), 0.5),
        );
    }
    let off = &figures[2];
    for ((name, _, _), on) in DESIGNS.iter().zip(&figures).take(2) {
        let start_added: Vec<f64> = on
            .iter()
            .zip(off)
            .map(|(on, off)| on.start_ms - off.start_ms)
            .collect();
        let execute_ratio: Vec<f64> = on
            .iter()
            .zip(off)
            .map(|(on, off)| on.execute_p50_ms / off.execute_p50_ms)
            .collect();
        println!(
            "  {name}: added to the kernel's start, median of the rounds: {:+.1} ms; execute p50 ratio / off, median of the rounds: {:.3}",
            percentile(&start_added, 0.5),
            percentile(&execute_ratio, 0.5)
        );
    }
    let [direct, namespaced, landlock] = proxy_latency(server_binary, python).await?;
    println!(
        "  one HTTP request from the kernel to a loopback server, median of {REQUESTS}: direct {direct:.2} ms; through the allowlist proxy in namespaces {namespaced:.2} ms ({:+.2} ms), with Landlock alone {landlock:.2} ms ({:+.2} ms)",
        namespaced - direct,
        landlock - direct
    );
    Ok(())
}

/// HTTP requests per server in `proxy_latency`.
const REQUESTS: usize = 200;

/// The median time of one `urllib` request from the kernel to a loopback HTTP server: with the
/// network on (direct), and with an allowlist (through the server's proxy), in namespaces and
/// without.
async fn proxy_latency(server_binary: &Path, python: &Path) -> anyhow::Result<[f64; 3]> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    let mut medians = Vec::new();
    // A loopback address is reached through the proxy only when listed with its port.
    let listed = format!("localhost:{port},127.0.0.1:{port}");
    for (network, host, namespaces) in [
        ("on", "127.0.0.1", "auto"),
        (listed.as_str(), "localhost", "auto"),
        (listed.as_str(), "localhost", "off"),
    ] {
        let env = vec![
            (
                ipython_mcp_config::SANDBOX_NAMESPACES.env,
                namespaces.to_owned(),
            ),
            (ipython_mcp_config::LOG.env, "warn".to_owned()),
            (ipython_mcp_config::SPARE_KERNELS.env, "0".to_owned()),
            (ipython_mcp_config::PYTHON.env, python.display().to_string()),
            (ipython_mcp_config::SANDBOX_NETWORK.env, network.to_owned()),
            // The printed median is read from the typed result.
            (
                ipython_mcp_config::STRUCTURED_OUTPUT.env,
                "always".to_owned(),
            ),
        ];
        let Served {
            mut child, client, ..
        } = serve(server_binary, &env).await?;
        started(&client).await?;
        let code = format!(
            "import time, urllib.request, statistics\nopener = urllib.request.build_opener()\nurl = 'http://{host}:{port}/'\nfor _ in range(20):\n    opener.open(url).read()\nsamples = []\nfor _ in range({REQUESTS}):\n    t = time.perf_counter(); opener.open(url).read(); samples.append((time.perf_counter() - t) * 1000)\nprint(statistics.median(samples))"
        );
        let arguments = json!({"code": code, "timeout_seconds": 300})
            .as_object()
            .cloned()
            .expect("object");
        let result = client
            .peer()
            .call_tool(CallToolRequestParams::new("execute").with_arguments(arguments))
            .await?;
        let printed = result
            .structured_content
            .as_ref()
            .and_then(|structured| structured["stdout"].as_str())
            .context("the requests printed nothing")?
            .trim()
            .to_owned();
        medians.push(
            printed
                .parse::<f64>()
                .with_context(|| format!("not a number: {printed}"))?,
        );
        let _ = client.cancel().await;
        let _ = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;
    }
    Ok([medians[0], medians[1], medians[2]])
}

/// Starts a server with the sandbox `mode` (and its namespaces `auto` or `off`), waits for its
/// kernel and measures it.
async fn measure(
    server_binary: &Path,
    python: &Path,
    mode: &str,
    namespaces: &str,
) -> anyhow::Result<Figures> {
    let env = vec![
        (
            ipython_mcp_config::SANDBOX_NAMESPACES.env,
            namespaces.to_owned(),
        ),
        (ipython_mcp_config::LOG.env, "warn".to_owned()),
        (ipython_mcp_config::SPARE_KERNELS.env, "0".to_owned()),
        (ipython_mcp_config::PYTHON.env, python.display().to_string()),
        (ipython_mcp_config::SANDBOX.env, mode.to_owned()),
    ];
    let Served {
        mut child, client, ..
    } = serve(server_binary, &env).await?;
    let start_ms = started(&client).await? * 1000.0;
    for _ in 0..CALLS {
        execute(&client).await?;
    }
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let began = Instant::now();
        execute(&client).await?;
        samples.push(began.elapsed().as_secs_f64() * 1000.0);
    }
    let _ = client.cancel().await;
    let _ = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;
    Ok(Figures {
        start_ms,
        execute_p50_ms: percentile(&samples, 0.5),
    })
}

async fn execute(client: &Client) -> anyhow::Result<()> {
    let arguments = json!({"code": "x = 1"})
        .as_object()
        .cloned()
        .expect("object");
    let result = client
        .peer()
        .call_tool(CallToolRequestParams::new("execute").with_arguments(arguments))
        .await?;
    if result.is_error == Some(true) {
        bail!("execute failed: {:?}", result.content);
    }
    Ok(())
}

/// The kernel's start in seconds, once it is ready (`runtime_status.startup_seconds`).
async fn started(client: &Client) -> anyhow::Result<f64> {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let status = client
            .peer()
            .call_tool(CallToolRequestParams::new("runtime_status"))
            .await?;
        let status = status
            .structured_content
            .context("runtime_status has structured content")?;
        if status["state"] == "ready" {
            return status["startup_seconds"]
                .as_f64()
                .context("startup_seconds");
        }
        if status["state"] == "unavailable" || Instant::now() > deadline {
            bail!("the kernel did not start: {status}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
