//! `ipython-mcp-bench spool`: what the spool costs many small writes. Two servers of the same
//! binary, one with the spool (the default) and one without (`max_spool_execution_bytes` 0),
//! each run the same 200,000 `print`s of 99 characters (20 MB, the side-by-side benchmark's
//! `big_output`), interleaved round by round, their order swapped every round; a bare
//! `jupyter_client` loop receiving all of it runs beside them as the floor. Prints the medians
//! and the ratio spool on / spool off (the median of the rounds' ratios), and fails when it
//! exceeds `MAX_SPOOL_RATIO`.
//! The CPU seconds the kernel process spent per run are printed too: on a loaded machine they
//! vary less than the wall times (the spool's work is all in the kernel: its helper writes the
//! files).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::RunningService;
use serde_json::{json, Value};

use crate::percentile::percentile;
use crate::server::{cpu_seconds, serve, Served};

/// Rounds unless the command line gives another number (`ipython-mcp-bench spool 9`).
pub(crate) const SPOOL_ROUNDS: usize = 5;
/// The spool may cost at most this much over a run without it.
pub(crate) const MAX_SPOOL_RATIO: f64 = 1.10;
/// The same code as the side-by-side benchmark's `big_output`.
const PRINTS: &str = "for _ in range(200_000):\n    print('x' * 99)\n";

/// Seconds per run of `PRINTS`, per mode: wall time of the call, and CPU time of the kernel.
pub(crate) struct SpoolCost {
    pub(crate) on: Vec<f64>,
    pub(crate) off: Vec<f64>,
    pub(crate) on_cpu: Vec<f64>,
    pub(crate) off_cpu: Vec<f64>,
    pub(crate) jupyter_client: Vec<f64>,
}

impl SpoolCost {
    /// The median of each round's on / off: the two runs of a round are adjacent, so a drift
    /// in the machine's speed (this one is shared, and its runs spread ±15 %) cancels within
    /// the pair, which a ratio of the two medians does not do.
    pub(crate) fn ratio(&self) -> f64 {
        let ratios: Vec<f64> = self
            .on
            .iter()
            .zip(&self.off)
            .map(|(on, off)| on / off)
            .collect();
        percentile(&ratios, 0.5)
    }
}

pub(crate) fn print_spool(cost: &SpoolCost) {
    println!(
        "200,000 prints of 99 characters (20 MB), {} interleaved rounds:",
        cost.on.len()
    );
    for (name, samples) in [
        ("spool on (default)", &cost.on),
        ("spool off (max_spool_execution_bytes 0)", &cost.off),
        (
            "bare jupyter_client loop, same kernel",
            &cost.jupyter_client,
        ),
    ] {
        println!(
            "  {name:<42} median {:>6.3} s (min {:.3}, max {:.3})",
            percentile(samples, 0.5),
            percentile(samples, 0.0),
            percentile(samples, 1.0)
        );
    }
    println!(
        "ratio spool on / off, median of the rounds' ratios (target <= {MAX_SPOOL_RATIO:.2}): {:.3} (of the medians: {:.3})",
        cost.ratio(),
        percentile(&cost.on, 0.5) / percentile(&cost.off, 0.5)
    );
    println!(
        "kernel CPU per run: spool on median {:.3} s, off {:.3} s, ratio {:.3}",
        percentile(&cost.on_cpu, 0.5),
        percentile(&cost.off_cpu, 0.5),
        percentile(&cost.on_cpu, 0.5) / percentile(&cost.off_cpu, 0.5)
    );
}

pub(crate) async fn bench_spool(
    server_binary: &Path,
    python: &Path,
    rounds: usize,
) -> anyhow::Result<SpoolCost> {
    let python_setting = python.display().to_string();
    let start = |spool_bytes: Option<&'static str>| {
        let mut env = vec![
            (ipython_mcp_config::LOG.env, "warn".to_owned()),
            (ipython_mcp_config::MAX_TIMEOUT.env, "3600".to_owned()),
            (ipython_mcp_config::SPARE_KERNELS.env, "0".to_owned()),
            // Both servers' kernels and the floor's run on the same Python.
            (ipython_mcp_config::PYTHON.env, python_setting.clone()),
        ];
        if let Some(bytes) = spool_bytes {
            env.push((
                ipython_mcp_config::MAX_SPOOL_EXECUTION_BYTES.env,
                bytes.to_owned(),
            ));
        }
        async move { serve(server_binary, &env).await }
    };
    let on = start(None).await?;
    let off = start(Some("0")).await?;
    // Kernel start and one unmeasured run each, so every measured run finds a warm kernel.
    let mut kernel_pids = Vec::new();
    for served in [&on, &off] {
        ready(&served.client).await?;
        prints(&served.client).await?;
        kernel_pids.push(kernel_pid(&served.client).await?);
    }
    let script =
        std::env::temp_dir().join(format!("ipython-mcp-bench-spool-{}.py", std::process::id()));
    std::fs::write(&script, include_str!("jupyter_client_loop.py"))?;
    let mut cost = SpoolCost {
        on: Vec::with_capacity(rounds),
        off: Vec::with_capacity(rounds),
        on_cpu: Vec::with_capacity(rounds),
        off_cpu: Vec::with_capacity(rounds),
        jupyter_client: Vec::with_capacity(rounds),
    };
    for round in 0..rounds {
        // Swapping the order every round spreads a drift in the machine's load over both.
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for spool in order {
            let (served, pid) = if spool {
                (&on, &kernel_pids[0])
            } else {
                (&off, &kernel_pids[1])
            };
            let cpu_before = cpu_seconds(pid);
            let seconds = prints(&served.client).await?;
            let cpu = cpu_seconds(pid) - cpu_before;
            if spool {
                cost.on.push(seconds);
                cost.on_cpu.push(cpu);
            } else {
                cost.off.push(seconds);
                cost.off_cpu.push(cpu);
            }
        }
        cost.jupyter_client
            .push(jupyter_client_prints(python, &script).await?);
    }
    let _ = std::fs::remove_file(&script);
    for Served {
        mut child, client, ..
    } in [on, off]
    {
        let _ = client.cancel().await;
        let _ = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;
    }
    Ok(cost)
}

type Client = RunningService<rmcp::RoleClient, ClientConfig>;

async fn execute(client: &Client, code: &str) -> anyhow::Result<rmcp::model::CallToolResult> {
    let arguments = json!({"code": code, "timeout_seconds": 600})
        .as_object()
        .cloned()
        .expect("object");
    Ok(client
        .peer()
        .call_tool(CallToolRequestParams::new("execute").with_arguments(arguments))
        .await?)
}

/// Waits until the server's kernel has started and answers.
async fn ready(client: &Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let result = execute(client, "pass").await?;
        if result.is_error != Some(true) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("kernel never became ready: {:?}", result.structured_content);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The process id of the server's default kernel, as `kernel_list` gives it.
async fn kernel_pid(client: &Client) -> anyhow::Result<String> {
    let listed = client
        .peer()
        .call_tool(CallToolRequestParams::new("kernel_list"))
        .await?;
    let pid = listed
        .structured_content
        .as_ref()
        .and_then(|listed| listed["kernels"][0]["pid"].as_u64())
        .context("kernel_list gives no kernel pid")?;
    Ok(pid.to_string())
}

/// Seconds one `execute` of `PRINTS` takes, call to answer.
async fn prints(client: &Client) -> anyhow::Result<f64> {
    let started = Instant::now();
    let result = execute(client, PRINTS).await?;
    let seconds = started.elapsed().as_secs_f64();
    if result.is_error == Some(true) {
        bail!("the prints failed: {:?}", result.content);
    }
    Ok(seconds)
}

/// Seconds one run of `PRINTS` takes through `jupyter_client`, on a kernel of its own.
async fn jupyter_client_prints(python: &Path, script: &Path) -> anyhow::Result<f64> {
    let output = tokio::process::Command::new(python)
        .arg(script)
        .args(["1", "0", "pass", PRINTS])
        .stdin(Stdio::null())
        .output()
        .await?;
    if !output.status.success() {
        bail!(
            "jupyter_client loop failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let parsed: Value = serde_json::from_slice(&output.stdout)?;
    let milliseconds = parsed["samples_ms"]
        .get(0)
        .and_then(Value::as_f64)
        .context("no sample")?;
    Ok(milliseconds / 1000.0)
}
