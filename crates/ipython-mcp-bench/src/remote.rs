//! `ipython-mcp-bench remote`: `execute` of `x = x + 1` on a kernel of a Jupyter Server on
//! loopback beside the same loop on a local kernel, in interleaved rounds of one run, through
//! the full MCP stack and through the bare kernel clients (what the Jupyter server's own relay
//! costs, which no client can take back).
//!
//! The server is `jupyter_server` from PyPI, installed beside the benchmark's Python (the same
//! interpreter runs the local kernels and the server's `python3` kernels), or the one at
//! `IPYTHON_MCP_BENCH_JUPYTER_URL` with `IPYTHON_MCP_BENCH_JUPYTER_TOKEN`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use ipython_mcp_jupyter::Channel;
use serde_json::Value;

use crate::latency::{
    bench_raw_client, execute_request, execute_samples, timed_loop, until_reply_and_idle, CALLS,
    WARMUP,
};
use crate::percentile::percentile;
use crate::python::resolve_python;
use crate::server::{serve, Served};

use ipython_mcp_jupyter::remote::{RemoteKernel, Server};

/// The jupyter_server release measured against (the one the tests run against).
const JUPYTER_SERVER: &str = "jupyter_server==2.21.1";
const ROUNDS: usize = 3;

/// A Jupyter server the benchmark started; killed (with its kernels) on drop.
struct Started {
    child: std::process::Child,
    dir: PathBuf,
}

impl Drop for Started {
    fn drop(&mut self) {
        // Its process group: the server and the kernels it started.
        let _ = std::process::Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) async fn bench_remote(server_binary: &Path) -> anyhow::Result<()> {
    let python = resolve_python().await?;
    let (url, token, _started) = match std::env::var("IPYTHON_MCP_BENCH_JUPYTER_URL") {
        Ok(url) => (
            url,
            std::env::var("IPYTHON_MCP_BENCH_JUPYTER_TOKEN").unwrap_or_default(),
            None,
        ),
        Err(_) => {
            let (url, token, started) = start_jupyter_server(&python).await?;
            (url, token, Some(started))
        }
    };
    println!(
        "ipython-mcp remote benchmark: {ROUNDS} interleaved rounds of {CALLS} calls after {WARMUP} warm-up calls; python {}; Jupyter server {url}",
        python.display()
    );
    let local_env = vec![
        (ipython_mcp_config::LOG.env, "warn".to_owned()),
        (ipython_mcp_config::PYTHON.env, python.display().to_string()),
        (ipython_mcp_config::SPARE_KERNELS.env, "0".to_owned()),
    ];
    let mut remote_env = local_env.clone();
    remote_env.extend([
        (ipython_mcp_config::JUPYTER_URL.env, url.clone()),
        (ipython_mcp_config::JUPYTER_TOKEN.env, token.clone()),
        (ipython_mcp_config::KERNEL.env, "jupyter:python3".to_owned()),
    ]);
    let server = Server::new(
        url::Url::parse(&url)?,
        Some(token.clone()).filter(|token| !token.is_empty()),
        Duration::from_secs(30),
    )?;
    let (mut local, mut remote, mut raw_local, mut raw_remote) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let samples = [
            mcp_execute(server_binary, &local_env).await?,
            mcp_execute(server_binary, &remote_env).await?,
            bench_raw_client(&python).await?,
            raw_remote_client(&server).await?,
        ];
        println!(
            "round {round}: p50 MCP local {:.3} ms, MCP remote {:.3} ms, bare local {:.3} ms, bare remote {:.3} ms",
            percentile(&samples[0], 0.5),
            percentile(&samples[1], 0.5),
            percentile(&samples[2], 0.5),
            percentile(&samples[3], 0.5),
        );
        let [a, b, c, d] = samples;
        local.extend(a);
        remote.extend(b);
        raw_local.extend(c);
        raw_remote.extend(d);
    }
    println!();
    println!(
        "{:<58} {:>9} {:>9}",
        "round trip of `x = x + 1` (reply + idle), all rounds", "p50 ms", "p99 ms"
    );
    for (name, samples) in [
        ("MCP stdio execute, local kernel", &local),
        ("MCP stdio execute, kernel on the Jupyter server", &remote),
        ("bare client, local kernel (ZeroMQ)", &raw_local),
        (
            "bare client, kernel on the Jupyter server (WebSocket)",
            &raw_remote,
        ),
    ] {
        println!(
            "{name:<58} {:>9.3} {:>9.3}",
            percentile(samples, 0.50),
            percentile(samples, 0.99)
        );
    }
    let over = percentile(&remote, 0.5) - percentile(&local, 0.5);
    let relay = percentile(&raw_remote, 0.5) - percentile(&raw_local, 0.5);
    println!();
    println!("remote p50 - local p50 through MCP (target <= 1.5 ms): {over:+.3} ms");
    println!("of which the Jupyter server's relay (bare remote - bare local): {relay:+.3} ms");
    Ok(())
}

/// `execute` p50 samples through a server started with `env`, once its default session is
/// ready.
async fn mcp_execute(server_binary: &Path, env: &[(&str, String)]) -> anyhow::Result<Vec<f64>> {
    let Served {
        mut child, client, ..
    } = serve(server_binary, env).await?;
    let samples = execute_samples(&client).await?;
    client.cancel().await?;
    let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    Ok(samples)
}

/// The loop through our WebSocket kernel client alone, on a kernel it starts and deletes.
async fn raw_remote_client(server: &Server) -> anyhow::Result<Vec<f64>> {
    let started = server
        .start_kernel(
            ipython_mcp_jupyter::kernelspec::PYTHON3,
            &[],
            Duration::from_secs(120),
        )
        .await?;
    let kernel = server
        .connect(&started.id, true, Duration::from_secs(120))
        .await?;
    let measured = remote_loop(&kernel).await;
    kernel.shutdown(Duration::from_secs(2)).await;
    measured
}

async fn remote_loop(kernel: &RemoteKernel) -> anyhow::Result<Vec<f64>> {
    let run = |code: &'static str| async move {
        let (msg_id, mut receiver) = kernel
            .request(Channel::Shell, execute_request(code))
            .await?;
        let waited = until_reply_and_idle(&mut receiver).await;
        kernel.forget(&msg_id);
        waited
    };
    // As the server's sessions do for kernels they start: IPython history in batches, not one
    // SQLite write per cell, so that this loop measures the relay alone.
    run("get_ipython().history_manager.db_cache_size = 1000").await?;
    timed_loop(run).await
}

/// Starts `jupyter_server` (installed with pip beside `python` on first use) on a free loopback
/// port with a fresh token; ready once its API answers.
async fn start_jupyter_server(python: &Path) -> anyhow::Result<(String, String, Started)> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
    let cache = ipython_mcp_env::default_cache_dir(home.as_deref(), xdg.as_deref())
        .context("no cache dir")?;
    let deps = cache.join("bench-jupyter-server");
    if !deps.join("jupyter_server").is_dir() {
        let status = std::process::Command::new(python)
            .args(["-m", "pip", "install", "--disable-pip-version-check"])
            .args(["--no-input", "-q", "--target"])
            .arg(&deps)
            .arg(JUPYTER_SERVER)
            .status()?;
        if !status.success() {
            bail!("installing {JUPYTER_SERVER} failed");
        }
    }
    let dir =
        std::env::temp_dir().join(format!("ipython-mcp-bench-jupyter-{}", std::process::id()));
    for sub in ["runtime", "config", "data", "root"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    let token = format!("bench{}", std::process::id());
    use std::os::unix::process::CommandExt as _;
    let child = std::process::Command::new(python)
        .args([
            "-m",
            "jupyter_server",
            "--allow-root",
            "--ServerApp.ip=127.0.0.1",
        ])
        .args(["--ServerApp.port=0", "--ServerApp.open_browser=False"])
        .arg(format!("--IdentityProvider.token={token}"))
        .arg(format!(
            "--ServerApp.root_dir={}",
            dir.join("root").display()
        ))
        .env("PYTHONPATH", &deps)
        .env("JUPYTER_RUNTIME_DIR", dir.join("runtime"))
        .env("JUPYTER_CONFIG_DIR", dir.join("config"))
        .env("JUPYTER_DATA_DIR", dir.join("data"))
        .env("JUPYTER_PLATFORM_DIRS", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    let mut started = Started { child, dir };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = started.child.try_wait()? {
            bail!("jupyter server exited: {status}");
        }
        if let Some(url) = runtime_url(&started.dir.join("runtime")) {
            let server = Server::new(
                url::Url::parse(&url)?,
                Some(token.clone()),
                Duration::from_secs(5),
            )?;
            if server.kernelspecs().await.is_ok() {
                return Ok((url, token, started));
            }
        }
        if Instant::now() > deadline {
            bail!("jupyter server not ready within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The URL the server wrote to its runtime file, once it has.
fn runtime_url(runtime: &Path) -> Option<String> {
    std::fs::read_dir(runtime)
        .ok()?
        .flatten()
        .find_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !(name.starts_with("jpserver-") && name.ends_with(".json")) {
                return None;
            }
            let info: Value =
                serde_json::from_str(&std::fs::read_to_string(entry.path()).ok()?).ok()?;
            info["url"].as_str().map(str::to_owned)
        })
}
