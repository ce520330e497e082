#![allow(clippy::print_stdout)] // a benchmark report is its stdout

//! `ipython-mcp-bench`: one run that measures, on the same Python environment,
//!
//! (a) `execute` of `x = x + 1` through the full MCP stdio stack (release server binary, rmcp client);
//! (b) the same round trip through our own kernel client (`ipython-mcp-jupyter`), no MCP and no
//!     session layer: our floor; (b2) through the session layer (helper, bounding), no MCP;
//! (c) the same loop with Python's `jupyter_client` against an identically started kernel;
//! (d) the server's RSS when idle and its peak while the kernel prints 200 MB;
//! (e) how long replacing a dead kernel takes, with a warm spare and without one, and the time
//!     from the deadline to a usable kernel after a hang that ignores interrupts;
//! (f) the time from process start to the `initialize` answer, for the release binary and, when
//!     `IPYTHON_MCP_BENCH_INSTALLED` holds a command line (`uvx --from dist/….whl ipython-mcp`,
//!     or a wheel's installed entry point), for that too;
//! (g) the server's RSS after 32 executions that each display 20 one-MiB images (retained
//!     output lives in the spool, not in memory); `ipython-mcp-bench retained` runs only this;
//! (h) the time from SIGTERM to the server's exit, and to the last kernel process gone, with 8
//!     kernels each running a cell that ignores SIGINT; `ipython-mcp-bench sigterm` runs only this;
//! (i) the time the server takes to fit a 4 MB PNG into the default image bound (decode,
//!     resize, re-encode); `ipython-mcp-bench images` runs only this;
//!
//! `ipython-mcp-bench execute` runs only (a) and the namespace calls, against the server in
//! `IPYTHON_MCP_BENCH_SERVER` when it is set (to compare builds in interleaved runs).
//!
//! and prints p50/p99 and the ratios a/b and a/c. Figures are medians of one run on a noisy
//! machine; compare ratios, not absolute numbers.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use ipython_mcp_jupyter::protocol::{
    ExecuteRequest, ExecutionState, JupyterMessage, JupyterMessageContent,
};
use ipython_mcp_jupyter::{Channel, Kernel, LaunchSpec};
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
use serde_json::{json, Value};

const CALLS: usize = 500;
const WARMUP: usize = 30;
const SETUP: &str = "x = 0";
const LOOP: &str = "x = x + 1";
const FLOOD: &str = "import sys\nsys.stdout.write('x' * 100_000_000)\nfor _ in range(100):\n    print('y' * 999_999)";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("images") {
        print_image_fit(&bench_image_fit().await?);
        return Ok(());
    }
    // `IPYTHON_MCP_BENCH_SERVER` measures another build of the server with this same client,
    // so two versions can be compared in interleaved runs.
    let server_binary = match std::env::var_os("IPYTHON_MCP_BENCH_SERVER") {
        Some(path) => PathBuf::from(path),
        None => sibling_binary("ipython-mcp")?,
    };
    match std::env::args().nth(1).as_deref() {
        Some("execute") => {
            let (mcp, _, namespace) = bench_mcp(&server_binary).await?;
            for (name, samples) in [
                ("(a) MCP stdio execute", &mcp),
                ("inspect", &namespace.inspect),
                ("call_function", &namespace.call),
                ("dynamic tool call", &namespace.dynamic_call),
            ] {
                println!("{name:<24} p50 {:>7.3} ms", percentile(samples, 0.50));
            }
            return Ok(());
        }
        Some("retained") => {
            print_retained(&bench_retained(&server_binary).await?);
            return Ok(());
        }
        Some("sigterm") => {
            print_sigterm(&bench_sigterm(&server_binary).await?);
            return Ok(());
        }
        _ => {}
    }
    let python = resolve_python().await?;
    println!(
        "ipython-mcp benchmark: {CALLS} calls after {WARMUP} warm-up calls each; python {}",
        python.display()
    );

    let (mcp, rss, namespace) = bench_mcp(&server_binary).await?;
    let raw = bench_raw_client(&python).await?;
    let session = bench_session(&python).await?;
    let python_floor = bench_jupyter_client(&python).await?;
    let with_spare = bench_replacement(&server_binary, 1).await?;
    let without_spare = bench_replacement(&server_binary, 0).await?;
    let mut startup = vec![(
        "release binary".to_owned(),
        bench_startup(&[server_binary.display().to_string()]).await?,
    )];
    if let Ok(installed) = std::env::var("IPYTHON_MCP_BENCH_INSTALLED") {
        let argv: Vec<String> = installed.split_whitespace().map(str::to_owned).collect();
        startup.push((installed.clone(), bench_startup(&argv).await?));
    }
    let retained = bench_retained(&server_binary).await?;
    let sigterm = bench_sigterm(&server_binary).await?;
    let image_fit = bench_image_fit().await?;

    println!();
    println!(
        "{:<58} {:>9} {:>9}",
        "round trip of `x = x + 1` (reply + idle)", "p50 ms", "p99 ms"
    );
    for (name, samples) in [
        ("(a) MCP stdio: rmcp client -> ipython-mcp -> kernel", &mcp),
        ("(b) our kernel client (ipython-mcp-jupyter), no MCP", &raw),
        (
            "(b2) our session layer (helper + bounding), no MCP",
            &session,
        ),
        (
            "(c) Python jupyter_client, same kernel flags",
            &python_floor,
        ),
        (
            "inspect `f` through MCP (helper comm RPC)",
            &namespace.inspect,
        ),
        ("call_function `f(x=1)` through MCP", &namespace.call),
        (
            "dynamic tool call `tool_0(x=1)` (100 registered)",
            &namespace.dynamic_call,
        ),
        ("tools/list with 100 dynamic tools", &namespace.list_100),
    ] {
        println!(
            "{name:<58} {:>9.3} {:>9.3}",
            percentile(samples, 0.50),
            percentile(samples, 0.99)
        );
    }
    let (a, b, b2, c) = (
        percentile(&mcp, 0.5),
        percentile(&raw, 0.5),
        percentile(&session, 0.5),
        percentile(&python_floor, 0.5),
    );
    println!();
    println!(
        "ratio a/b  (MCP stack vs our bare client, target <= 1.2): {:.2}",
        a / b
    );
    println!(
        "ratio a/b2 (MCP layer alone):                             {:.2}",
        a / b2
    );
    println!(
        "ratio a/c  (MCP stack vs bare jupyter_client, target <= 1.0): {:.2}",
        a / c
    );
    println!();
    println!(
        "server RSS idle:                       {:>6.1} MiB (target <= 20)",
        rss.idle_kib as f64 / 1024.0
    );
    println!(
        "server peak RSS during a 200 MB print: {:>6.1} MiB (growth {:.1} MiB, target <= 16)",
        rss.peak_kib as f64 / 1024.0,
        (rss.peak_kib.saturating_sub(rss.idle_kib)) as f64 / 1024.0
    );
    println!(
        "flood execute took {:.2} s; omitted chars reported: {}",
        rss.flood_seconds, rss.flood_omitted
    );
    println!();
    println!("kernel replacement after os._exit (replacement_startup_seconds, {REPLACEMENTS} kills each):");
    println!(
        "  with a warm spare:  p50 {:>9.3} ms, max {:>9.3} ms",
        percentile(&with_spare.died, 0.5),
        percentile(&with_spare.died, 1.0)
    );
    println!(
        "  without a spare:    p50 {:>9.3} ms, max {:>9.3} ms",
        percentile(&without_spare.died, 0.5),
        percentile(&without_spare.died, 1.0)
    );
    println!("process start -> `initialize` answered ({STARTS} starts each):");
    for (name, samples) in &startup {
        println!(
            "  {name:<40} p50 {:>9.3} ms, max {:>9.3} ms",
            percentile(samples, 0.5),
            percentile(samples, 1.0)
        );
    }
    println!("after a hang that ignores SIGINT, deadline -> usable kernel, beyond the {HANG_GRACE_SECONDS} s grace (target < 100 ms with a spare):");
    println!(
        "  with a warm spare:  p50 {:>9.3} ms, max {:>9.3} ms",
        percentile(&with_spare.hung, 0.5),
        percentile(&with_spare.hung, 1.0)
    );
    println!(
        "  without a spare:    p50 {:>9.3} ms, max {:>9.3} ms",
        percentile(&without_spare.hung, 0.5),
        percentile(&without_spare.hung, 1.0)
    );
    print_retained(&retained);
    print_sigterm(&sigterm);
    print_image_fit(&image_fit);
    Ok(())
}

const IMAGE_FIT_RUNS: usize = 5;

/// Fitting one large PNG into the default image bound, as the server does it.
struct ImageFit {
    original_bytes: usize,
    original_size: (u32, u32),
    fitted_bytes: usize,
    fitted_size: (u32, u32),
    fitted_mime: &'static str,
    seconds: Vec<f64>,
}

fn print_image_fit(fit: &ImageFit) {
    println!();
    println!(
        "fitting a {:.1} MB PNG ({}x{}, noise) into {} bytes: median {:.0} ms over {IMAGE_FIT_RUNS} runs (min {:.0}, max {:.0}) -> {} {}x{}, {} bytes",
        fit.original_bytes as f64 / 1e6,
        fit.original_size.0,
        fit.original_size.1,
        ipython_mcp_config::OutputLimits::default().max_image_bytes,
        percentile(&fit.seconds, 0.5) * 1000.0,
        percentile(&fit.seconds, 0.0) * 1000.0,
        percentile(&fit.seconds, 1.0) * 1000.0,
        fit.fitted_mime,
        fit.fitted_size.0,
        fit.fitted_size.1,
        fit.fitted_bytes,
    );
}

/// A 4 MB PNG of random pixels (the worst case: nothing compresses), fitted into the default
/// `MAX_IMAGE_BYTES` by the server's own code, on a blocking thread as the server runs it.
async fn bench_image_fit() -> anyhow::Result<ImageFit> {
    tokio::task::spawn_blocking(|| {
        let side = 1160;
        let mut seed: u32 = 0x9e37_79b9;
        let pixels = image::RgbImage::from_fn(side, side, |_, _| {
            let mut channel = || {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                (seed >> 24) as u8
            };
            image::Rgb([channel(), channel(), channel()])
        });
        let mut raw = std::io::Cursor::new(Vec::new());
        image::DynamicImage::ImageRgb8(pixels).write_to(&mut raw, image::ImageFormat::Png)?;
        let raw = raw.into_inner();
        let max_bytes = ipython_mcp_config::OutputLimits::default().max_image_bytes;
        let mut seconds = Vec::new();
        let mut fitted = None;
        for _ in 0..IMAGE_FIT_RUNS {
            let started = Instant::now();
            let result = ipython_mcp_kernel::raster::fit(&raw, "image/png", max_bytes, true)?;
            seconds.push(started.elapsed().as_secs_f64());
            fitted = Some(result);
        }
        let fitted = fitted.context("no run")?;
        Ok(ImageFit {
            original_bytes: raw.len(),
            original_size: (side, side),
            fitted_bytes: fitted.bytes.len(),
            fitted_size: fitted.size,
            fitted_mime: fitted.mime,
            seconds,
        })
    })
    .await?
}

fn print_retained(retained: &Retained) {
    println!();
    println!(
        "server RSS after {RETAINED_EXECUTIONS} executions x {RETAINED_IMAGES} one-MiB images: {:>6.1} MiB (idle before {:.1} MiB, peak {:.1} MiB, target <= 128); {:.2} s per execution",
        retained.after_kib as f64 / 1024.0,
        retained.idle_kib as f64 / 1024.0,
        retained.peak_kib as f64 / 1024.0,
        retained.seconds_per_execution,
    );
}

const RETAINED_EXECUTIONS: usize = 32;
const RETAINED_IMAGES: usize = 20;

/// Server memory around executions whose displays are big images.
struct Retained {
    idle_kib: u64,
    after_kib: u64,
    peak_kib: u64,
    seconds_per_execution: f64,
}

/// Runs 32 executions that each display 20 one-MiB images (just within `MAX_IMAGE_BYTES`, so
/// every one is kept), then reads the server's RSS: all 32 stay retained for get_output.
async fn bench_retained(server_binary: &Path) -> anyhow::Result<Retained> {
    let Served {
        mut child,
        pid,
        client,
    } = serve(
        server_binary,
        &[
            ("IPYTHON_MCP_LOG", "warn".to_owned()),
            ("IPYTHON_MCP_SPARE_KERNELS", "0".to_owned()),
        ],
    )
    .await?;
    let call = |code: String| {
        let arguments = json!({"code": code, "timeout_seconds": 300})
            .as_object()
            .cloned()
            .expect("object");
        client
            .peer()
            .call_tool(CallToolRequestParams::new("execute").with_arguments(arguments))
    };
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let result =
            call("import base64, os\nfrom IPython.display import display".to_owned()).await?;
        if result.is_error != Some(true) {
            break;
        }
        if Instant::now() > deadline {
            bail!("kernel never became ready: {:?}", result.structured_content);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let idle_kib = proc_status_kib(pid, "VmRSS:");
    let code = format!(
        "for _ in range({RETAINED_IMAGES}):\n    display({{'image/png': base64.b64encode(os.urandom((1 << 20) - 2)).decode(), 'text/plain': '<image>'}}, raw=True)"
    );
    // In the background: one such result (28 MB of base64) is more than rmcp's stdio
    // transport reads in one line (16 MiB), and retention is what is measured here.
    let started = Instant::now();
    for _ in 0..RETAINED_EXECUTIONS {
        let arguments = json!({"code": code, "background": true, "timeout_seconds": 300})
            .as_object()
            .cloned()
            .expect("object");
        let result = client
            .peer()
            .call_tool(CallToolRequestParams::new("execute").with_arguments(arguments))
            .await?;
        if result.is_error == Some(true) {
            bail!("execute was refused: {:?}", result.structured_content);
        }
    }
    loop {
        let status = client
            .peer()
            .call_tool(CallToolRequestParams::new("runtime_status"))
            .await?
            .structured_content
            .unwrap_or_default();
        if status["queue_depth"] == 0 && status["operation_active"] == false {
            break;
        }
        if started.elapsed() > Duration::from_secs(1800) {
            bail!("the executions never finished: {status}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let seconds_per_execution = started.elapsed().as_secs_f64() / RETAINED_EXECUTIONS as f64;
    let after_kib = proc_status_kib(pid, "VmRSS:");
    let peak_kib = proc_status_kib(pid, "VmHWM:");
    // Every execution is still remembered (for get_output).
    let kernels = client
        .peer()
        .call_tool(CallToolRequestParams::new("kernel_list"))
        .await?
        .structured_content
        .unwrap_or_default();
    let remembered = kernels["kernels"][0]["executions"]
        .as_array()
        .map_or(0, Vec::len);
    if remembered < RETAINED_EXECUTIONS {
        bail!("only {remembered} executions are remembered: {kernels}");
    }
    client.cancel().await?;
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    Ok(Retained {
        idle_kib,
        after_kib,
        peak_kib,
        seconds_per_execution,
    })
}

const SIGTERM_KERNELS: usize = 8;
const SIGTERM_GRACE_SECONDS: u64 = 2;

/// Shutdown of a server whose kernels are all stuck in code that ignores SIGINT.
struct Sigterm {
    exit_seconds: f64,
    kernels_gone_seconds: f64,
}

fn print_sigterm(sigterm: &Sigterm) {
    println!();
    println!(
        "SIGTERM with {SIGTERM_KERNELS} kernels in cells that ignore SIGINT ({SIGTERM_GRACE_SECONDS} s grace): server exit {:.2} s, last kernel gone {:.2} s (target <= grace + 5 s)",
        sigterm.exit_seconds, sigterm.kernels_gone_seconds,
    );
}

/// Starts 8 kernels, blocks SIGINT in each and leaves a long sleep running in the background
/// on all of them, then sends SIGTERM: shutdown interrupts every session together, waits one
/// grace period and kills the kernels that did not stop.
async fn bench_sigterm(server_binary: &Path) -> anyhow::Result<Sigterm> {
    let Served {
        mut child,
        pid,
        client,
    } = serve(
        server_binary,
        &[
            ("IPYTHON_MCP_LOG", "warn".to_owned()),
            ("IPYTHON_MCP_SPARE_KERNELS", "0".to_owned()),
            ("IPYTHON_MCP_MAX_KERNELS", SIGTERM_KERNELS.to_string()),
            (
                "IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS",
                SIGTERM_GRACE_SECONDS.to_string(),
            ),
            (
                "IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS",
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

/// A server started by the benchmark, with an rmcp client connected over its stdio.
struct Served {
    child: tokio::process::Child,
    pid: u32,
    client: rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
}

/// Starts the server binary with `env` and completes the MCP handshake.
async fn serve(server_binary: &Path, env: &[(&str, String)]) -> anyhow::Result<Served> {
    let mut child = tokio::process::Command::new(server_binary)
        .envs(env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().context("pid")?;
    let transport = (
        child.stdout.take().context("stdout")?,
        child.stdin.take().context("stdin")?,
    );
    let client = ClientConfig::default()
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await?;
    Ok(Served { child, pid, client })
}

fn sibling_binary(name: &str) -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let path = me.with_file_name(name);
    if !path.exists() {
        bail!(
            "{} not found: build it first with `cargo build --release`",
            path.display()
        );
    }
    Ok(path)
}

async fn resolve_python() -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
    let cache_dir = match std::env::var_os("IPYTHON_MCP_CACHE_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => ipython_mcp_env::default_cache_dir(home.as_deref(), xdg.as_deref())
            .context("no cache dir")?,
    };
    let resolver = ipython_mcp_env::Resolver {
        explicit_python: std::env::var_os("IPYTHON_MCP_PYTHON").map(PathBuf::from),
        virtual_env: std::env::var_os("VIRTUAL_ENV").map(PathBuf::from),
        working_dir: std::env::current_dir()?,
        path_var: std::env::var_os("PATH"),
        cache_dir,
        install_timeout: Duration::from_secs(600),
        named: None,
    };
    Ok(resolver.resolve(&|_| {}).await?.executable)
}

fn percentile(samples: &[f64], quantile: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * quantile).round() as usize]
}

struct Rss {
    idle_kib: u64,
    peak_kib: u64,
    flood_seconds: f64,
    flood_omitted: u64,
}

const STARTS: usize = 10;

/// Milliseconds from spawning `argv` to the answer to `initialize`, over `STARTS` starts (after
/// one unmeasured start, which fills caches such as uv's).
async fn bench_startup(argv: &[String]) -> anyhow::Result<Vec<f64>> {
    let (program, args) = argv.split_first().context("empty command")?;
    let mut samples = Vec::with_capacity(STARTS);
    for round in 0..=STARTS {
        let started = Instant::now();
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .env("IPYTHON_MCP_LOG", "warn")
            .env("IPYTHON_MCP_SPARE_KERNELS", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let transport = (
            child.stdout.take().context("stdout")?,
            child.stdin.take().context("stdin")?,
        );
        let client = ClientConfig::default()
            .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
            .await?;
        if round > 0 {
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        let _ = client.cancel().await;
        let _ = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;
    }
    Ok(samples)
}

/// A field of /proc/<pid>/status in KiB (Linux only; 0 elsewhere, where RSS is not measured).
#[cfg(not(target_os = "linux"))]
fn proc_status_kib(_pid: u32, _field: &str) -> u64 {
    0
}

#[cfg(target_os = "linux")]
fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Namespace tool round trips through MCP, in milliseconds.
struct NamespaceTimes {
    inspect: Vec<f64>,
    call: Vec<f64>,
    dynamic_call: Vec<f64>,
    list_100: Vec<f64>,
}

async fn bench_mcp(server_binary: &Path) -> anyhow::Result<(Vec<f64>, Rss, NamespaceTimes)> {
    let Served {
        mut child,
        pid,
        client,
    } = serve(
        server_binary,
        &[
            ("IPYTHON_MCP_LOG", "warn".to_owned()),
            ("IPYTHON_MCP_MAX_TIMEOUT_SECONDS", "3600".to_owned()),
        ],
    )
    .await?;
    let call = |code: &str, timeout: f64| {
        let arguments = json!({"code": code, "timeout_seconds": timeout})
            .as_object()
            .cloned()
            .expect("object");
        client
            .peer()
            .call_tool(CallToolRequestParams::new("execute").with_arguments(arguments))
    };
    // Wait for the kernel (the first call queues behind start-up).
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let result = call(SETUP, 30.0).await?;
        if result.is_error != Some(true) {
            break;
        }
        if Instant::now() > deadline {
            bail!("kernel never became ready: {:?}", result.structured_content);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for _ in 0..WARMUP {
        call(LOOP, 30.0).await?;
    }
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        let result = call(LOOP, 30.0).await?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        if result.is_error == Some(true) {
            bail!("execute failed: {:?}", result.structured_content);
        }
    }
    call("def f(x: int = 0) -> int:\n    return x + 1", 30.0).await?;
    let mut namespace = NamespaceTimes {
        inspect: Vec::with_capacity(CALLS),
        call: Vec::with_capacity(CALLS),
        dynamic_call: Vec::with_capacity(CALLS),
        list_100: Vec::with_capacity(CALLS),
    };
    for (tool, arguments, samples) in [
        ("inspect", json!({"name": "f"}), &mut namespace.inspect),
        (
            "call_function",
            json!({"name": "f", "arguments": {"x": 1}}),
            &mut namespace.call,
        ),
    ] {
        let arguments = arguments.as_object().cloned().expect("object");
        for round in 0..WARMUP + CALLS {
            let started = Instant::now();
            let result = client
                .peer()
                .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments.clone()))
                .await?;
            if result.is_error == Some(true) {
                bail!("{tool} failed: {:?}", result.structured_content);
            }
            if round >= WARMUP {
                samples.push(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }
    // 100 dynamic tools: one call of the first, and tools/list with all of them.
    call(
        "for _i in range(100):\n    exec(f'def tool_{_i}(x: int = 0, label: str = \"\") -> int:\\n    return x + {_i}')",
        30.0,
    )
    .await?;
    for index in 0..100 {
        let arguments = json!({"name": format!("tool_{index}")})
            .as_object()
            .cloned()
            .expect("object");
        let result = client
            .peer()
            .call_tool(CallToolRequestParams::new("register_tool").with_arguments(arguments))
            .await?;
        if result.is_error == Some(true) {
            bail!("register_tool failed: {:?}", result.structured_content);
        }
    }
    let arguments = json!({"x": 1}).as_object().cloned().expect("object");
    for round in 0..WARMUP + CALLS {
        let started = Instant::now();
        let result = client
            .peer()
            .call_tool(CallToolRequestParams::new("tool_0").with_arguments(arguments.clone()))
            .await?;
        if result.is_error == Some(true) {
            bail!("dynamic call failed: {:?}", result.structured_content);
        }
        if round >= WARMUP {
            namespace
                .dynamic_call
                .push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    for round in 0..WARMUP + CALLS / 5 {
        let started = Instant::now();
        let tools = client.peer().list_all_tools().await?;
        if tools.len() < 100 {
            bail!("tools/list returned {} tools", tools.len());
        }
        if round >= WARMUP {
            namespace
                .list_100
                .push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    call("%reset_selective -f tool_", 30.0).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_kib = proc_status_kib(pid, "VmRSS:");
    let started = Instant::now();
    let flood = call(FLOOD, 600.0).await?;
    let flood_seconds = started.elapsed().as_secs_f64();
    let flood_omitted = flood
        .structured_content
        .as_ref()
        .and_then(|value| value.get("stdout_omitted_chars"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let peak_kib = proc_status_kib(pid, "VmHWM:");
    client.cancel().await?;
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    Ok((
        samples,
        Rss {
            idle_kib,
            peak_kib,
            flood_seconds,
            flood_omitted,
        },
        namespace,
    ))
}

const REPLACEMENTS: usize = 5;
const HANG_TIMEOUT_SECONDS: f64 = 0.5;
const HANG_GRACE_SECONDS: f64 = 0.5;
const HANG: &str =
    "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass";

/// Recovery figures in milliseconds.
struct Recovery {
    /// `replacement_startup_seconds` after `os._exit`.
    died: Vec<f64>,
    /// Wall time of a hung call minus its timeout and the grace period: kill + replacement.
    hung: Vec<f64>,
}

/// Kills the kernel with `os._exit` a few times and collects the server's own measurement of
/// each replacement (`runtime_status.replacement_startup_seconds`), in milliseconds.
async fn bench_replacement(server_binary: &Path, spares: usize) -> anyhow::Result<Recovery> {
    let Served {
        mut child,
        pid: _,
        client,
    } = serve(
        server_binary,
        &[
            ("IPYTHON_MCP_LOG", "error".to_owned()),
            ("IPYTHON_MCP_SPARE_KERNELS", spares.to_string()),
            (
                "IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS",
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

async fn bench_raw_client(python: &Path) -> anyhow::Result<Vec<f64>> {
    let spec = LaunchSpec {
        python: python.to_owned(),
        env: Vec::new(),
        working_dir: None,
        interrupt_mode: Default::default(),
        argv: None,
        kernel_name: None,
    };
    let kernel = Kernel::launch(&spec, Duration::from_secs(30)).await?;
    let run = |code: &'static str| async {
        let request = JupyterMessage::new(
            ExecuteRequest {
                code: code.to_owned(),
                silent: false,
                store_history: true,
                user_expressions: None,
                allow_stdin: false,
                stop_on_error: false,
            },
            None,
        );
        let (msg_id, mut receiver) = kernel.request(Channel::Shell, request).await?;
        let (mut reply, mut idle) = (false, false);
        while !(reply && idle) {
            let routed = receiver.recv().await.context("kernel exited")?;
            match routed.message.content {
                JupyterMessageContent::ExecuteReply(_) => reply = true,
                JupyterMessageContent::Status(status)
                    if status.execution_state == ExecutionState::Idle =>
                {
                    idle = true
                }
                _ => {}
            }
        }
        kernel.forget(&msg_id);
        anyhow::Ok(())
    };
    run(SETUP).await?;
    for _ in 0..WARMUP {
        run(LOOP).await?;
    }
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        run(LOOP).await?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    kernel.shutdown(Duration::from_secs(2)).await;
    Ok(samples)
}

async fn bench_session(python: &Path) -> anyhow::Result<Vec<f64>> {
    let config = ipython_mcp_config::Config::default();
    let options = ipython_mcp_kernel::SessionOptions {
        kernel_id: "bench".to_owned(),
        limits: config.limits,
        timeouts: config.timeouts,
        max_json_items: config.limits.max_results,
        max_pending: config.queue.max_pending,
        queue_wait_timeout: Duration::from_secs(120),
        spare_kernels: 0,
        namespace: Default::default(),
        resolver: ipython_mcp_env::Resolver {
            explicit_python: Some(python.to_owned()),
            virtual_env: None,
            working_dir: std::env::current_dir()?,
            path_var: std::env::var_os("PATH"),
            cache_dir: std::env::temp_dir(),
            install_timeout: Duration::from_secs(60),
            named: None,
        },
        spool: Default::default(),
        kernel_spec: None,
        working_dir: None,
    };
    let session = ipython_mcp_kernel::SessionHandle::start(options);
    let run = |code: &str| {
        session.execute(ipython_mcp_kernel::ExecuteArgs {
            code: code.to_owned(),
            ..Default::default()
        })
    };
    let first = run(SETUP).await;
    if !first.ok {
        bail!("session failed: {:?}", first.error);
    }
    for _ in 0..WARMUP {
        run(LOOP).await;
    }
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        run(LOOP).await;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    session.shutdown().await;
    Ok(samples)
}

async fn bench_jupyter_client(python: &Path) -> anyhow::Result<Vec<f64>> {
    let script = std::env::temp_dir().join(format!("ipython-mcp-bench-{}.py", std::process::id()));
    std::fs::write(&script, include_str!("jupyter_client_loop.py"))?;
    let output = tokio::process::Command::new(python)
        .arg(&script)
        .args([
            CALLS.to_string(),
            WARMUP.to_string(),
            SETUP.to_owned(),
            LOOP.to_owned(),
        ])
        .stdin(Stdio::null())
        .output()
        .await?;
    let _ = std::fs::remove_file(&script);
    if !output.status.success() {
        bail!(
            "jupyter_client loop failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let parsed: Value = serde_json::from_slice(&output.stdout)?;
    Ok(parsed["samples_ms"]
        .as_array()
        .context("samples")?
        .iter()
        .filter_map(Value::as_f64)
        .collect())
}
