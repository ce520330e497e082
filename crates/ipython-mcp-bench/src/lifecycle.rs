//! Lifecycle benchmarks: SIGTERM with busy kernels, and replacing a kernel that ignores interrupts.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use rmcp::model::CallToolRequestParams;
use serde_json::{json, Value};

use crate::server::{serve, Served};

pub(crate) const SIGTERM_KERNELS: usize = 8;
pub(crate) const SIGTERM_GRACE_SECONDS: u64 = 2;

/// Shutdown of a server whose kernels are all stuck in code that ignores SIGINT.
pub(crate) struct Sigterm {
    pub(crate) exit_seconds: f64,
    pub(crate) kernels_gone_seconds: f64,
}

pub(crate) fn print_sigterm(sigterm: &Sigterm) {
    println!();
    println!(
        "SIGTERM with {SIGTERM_KERNELS} kernels in cells that ignore SIGINT ({SIGTERM_GRACE_SECONDS} s grace): server exit {:.2} s, last kernel gone {:.2} s (target <= grace + 5 s)",
        sigterm.exit_seconds, sigterm.kernels_gone_seconds,
    );
}

/// Starts 8 kernels, blocks SIGINT in each and leaves a long sleep running in the background
/// on all of them, then sends SIGTERM: shutdown interrupts every session together, waits one
/// grace period and kills the kernels that did not stop.
pub(crate) async fn bench_sigterm(server_binary: &Path) -> anyhow::Result<Sigterm> {
    let Served {
        mut child,
        pid,
        client,
    } = serve(
        server_binary,
        &[
            (ipython_mcp_config::LOG.env, "warn".to_owned()),
            (ipython_mcp_config::SPARE_KERNELS.env, "0".to_owned()),
            (
                ipython_mcp_config::MAX_KERNELS.env,
                SIGTERM_KERNELS.to_string(),
            ),
            // The kernels' pids are read from typed results.
            (
                ipython_mcp_config::STRUCTURED_OUTPUT.env,
                "always".to_owned(),
            ),
            (
                ipython_mcp_config::INTERRUPTION_GRACE.env,
                SIGTERM_GRACE_SECONDS.to_string(),
            ),
            (
                ipython_mcp_config::WORKER_STARTUP_TIMEOUT.env,
                "120".to_owned(),
            ),
        ],
    )
    .await?;
    let call = |tool: &'static str, arguments: Value| {
        let arguments = arguments.as_object().cloned().expect("object");
        let client = &client;
        async move {
            let result = client
                .peer()
                .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
                .await?;
            anyhow::Ok((
                result.is_error != Some(true),
                result.structured_content.unwrap_or_default(),
            ))
        }
    };
    let deadline = Instant::now() + Duration::from_secs(900);
    let python = loop {
        let (_, status) = call("runtime_status", json!({})).await?;
        if let Some(python) = status["kernel"]["python"].as_str() {
            if status["state"] == "ready" {
                break python.to_owned();
            }
        }
        if Instant::now() > deadline {
            bail!("the default kernel never became ready: {status}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut kernels = vec!["default".to_owned()];
    for index in 1..SIGTERM_KERNELS {
        let name = format!("busy{index}");
        let (ok, started) = call("kernel_start", json!({"spec": python, "kernel": name})).await?;
        if !ok {
            bail!("kernel_start failed: {started}");
        }
        kernels.push(name);
    }
    let mut kernel_pids = Vec::new();
    for kernel in &kernels {
        let (ok, armed) = call(
            "execute",
            json!({"kernel": kernel, "code": "import os, signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])\nos.getpid()"}),
        )
        .await?;
        let kernel_pid: u32 = armed["result"]["text/plain"]
            .as_str()
            .and_then(|text| text.parse().ok())
            .filter(|_| ok)
            .with_context(|| format!("no kernel pid: {armed}"))?;
        kernel_pids.push(kernel_pid);
        let (ok, started) = call(
            "execute",
            json!({"kernel": kernel, "code": "import time\ntime.sleep(600)", "background": true}),
        )
        .await?;
        if !ok {
            bail!("background execute failed: {started}");
        }
    }
    for kernel in &kernels {
        loop {
            let (_, status) = call("runtime_status", json!({"kernel": kernel})).await?;
            if status["operation_active"] == true {
                break;
            }
            if Instant::now() > deadline {
                bail!("{kernel} never started its cell: {status}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let started = Instant::now();
    let signalled = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    if !signalled.success() {
        bail!("kill -TERM {pid} failed");
    }
    tokio::time::timeout(Duration::from_secs(300), child.wait())
        .await
        .context("the server did not exit within 300 s of SIGTERM")??;
    let exit_seconds = started.elapsed().as_secs_f64();
    while kernel_pids
        .iter()
        .any(|kernel_pid| Path::new(&format!("/proc/{kernel_pid}")).exists())
    {
        if started.elapsed() > Duration::from_secs(300) {
            bail!("kernel processes outlived the server by 300 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(Sigterm {
        exit_seconds,
        kernels_gone_seconds: started.elapsed().as_secs_f64(),
    })
}

pub(crate) const REPLACEMENTS: usize = 5;
pub(crate) const HANG_TIMEOUT_SECONDS: f64 = 0.5;
pub(crate) const HANG_GRACE_SECONDS: f64 = 0.5;
pub(crate) const HANG: &str =
    "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass";

/// Recovery figures in milliseconds.
pub(crate) struct Recovery {
    /// `replacement_startup_seconds` after `os._exit`.
    pub(crate) died: Vec<f64>,
    /// Wall time of a hung call minus its timeout and the grace period: kill + replacement.
    pub(crate) hung: Vec<f64>,
}

/// Kills the kernel with `os._exit` a few times and collects the server's own measurement of
/// each replacement (`runtime_status.replacement_startup_seconds`), in milliseconds.
pub(crate) async fn bench_replacement(
    server_binary: &Path,
    spares: usize,
) -> anyhow::Result<Recovery> {
    let Served {
        mut child,
        pid: _,
        client,
    } = serve(
        server_binary,
        &[
            (ipython_mcp_config::LOG.env, "error".to_owned()),
            (ipython_mcp_config::SPARE_KERNELS.env, spares.to_string()),
            // The recovery is read from the typed result (runtime.interruption).
            (
                ipython_mcp_config::STRUCTURED_OUTPUT.env,
                "always".to_owned(),
            ),
            (
                ipython_mcp_config::INTERRUPTION_GRACE.env,
                HANG_GRACE_SECONDS.to_string(),
            ),
        ],
    )
    .await?;
    let call = |tool: &'static str, arguments: Value| {
        let arguments = arguments.as_object().cloned().expect("object");
        client
            .peer()
            .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
    };
    let status = || async {
        let result = call("runtime_status", json!({})).await?;
        anyhow::Ok(result.structured_content.unwrap_or(Value::Null))
    };
    let settled = |status: &Value| {
        status["state"] == "ready"
            && status["spare_kernel_pids"].as_array().map_or(0, Vec::len) == spares
    };
    let settle = || async {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !settled(&status().await?) {
            if Instant::now() > deadline {
                bail!("session did not settle");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        anyhow::Ok(())
    };
    let mut recovery = Recovery {
        died: Vec::new(),
        hung: Vec::new(),
    };
    for _ in 0..REPLACEMENTS {
        settle().await?;
        call("execute", json!({"code": "import os\nos._exit(1)"})).await?;
        let seconds = status().await?["replacement_startup_seconds"]
            .as_f64()
            .context("replacement time")?;
        recovery.died.push(seconds * 1000.0);
    }
    for _ in 0..REPLACEMENTS {
        settle().await?;
        let started = Instant::now();
        let result = call(
            "execute",
            json!({"code": HANG, "timeout_seconds": HANG_TIMEOUT_SECONDS}),
        )
        .await?;
        let elapsed = started.elapsed().as_secs_f64();
        let interruption = result
            .structured_content
            .as_ref()
            .map(|value| value["runtime"]["interruption"].clone());
        if interruption != Some(json!("terminated")) {
            bail!(
                "the hang was not terminated: {:?}",
                result.structured_content
            );
        }
        recovery
            .hung
            .push((elapsed - HANG_TIMEOUT_SECONDS - HANG_GRACE_SECONDS) * 1000.0);
    }
    client.cancel().await?;
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    Ok(recovery)
}
