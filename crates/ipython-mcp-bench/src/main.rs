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
//! `ipython-mcp-bench remote` measures `execute` on a kernel of a Jupyter Server on loopback
//! beside a local one (see `remote.rs`); it is not part of the full run.
//!
//! `ipython-mcp-bench principals` puts 50 concurrent MCP clients over HTTP on one server, as
//! ten principals and as one token, checks that no principal sees another's variables and
//! that every call is answered once, and measures `runtime_status` and `execute` throughput
//! (see `principals.rs`); it is not part of the full run.
//!
//! `ipython-mcp-bench spool [ROUNDS]` runs 200,000 prints of 99 characters on two servers of
//! the same binary, spool on and spool off, interleaved, beside a bare `jupyter_client` loop,
//! and fails when the spool costs more than 10 % (see `spool.rs`); it is not part of the full
//! run.
//!
//! `ipython-mcp-bench sandbox [ROUNDS]` starts servers with the kernels' sandbox on and off,
//! interleaved, and prints what it adds to a kernel's start and to `execute`'s p50 (see
//! `sandbox.rs`); it is not part of the full run.
//!
//! `ipython-mcp-bench checkpoint [ROUNDS]` starts servers with checkpoints of the namespace on
//! and off, interleaved, and prints what they cost `execute`'s p50 and a cell making a 1 GiB
//! buffer, what one trivial cell writes, and how long restoring the buffer takes (see
//! `checkpoint.rs`); it is not part of the full run.
//!
//! `ipython-mcp-bench code-mode [CALLS]` times a no-op upstream MCP tool called from kernel
//! code through `mcp_servers` against the Python SDK's own client, and counts the characters a
//! model reads for one task both ways (see `code_mode.rs`); it is not part of the full run.
//!
//! `ipython-mcp-bench soak [--seconds N] [--seed S]` is a chaos soak: a mixed workload with
//! faults injected at random moments on two servers, then checks that every call was answered
//! once and truthfully and that nothing leaked (see `soak.rs`); it is not part of the full run.
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
use rmcp::model::ClientConfig;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};

mod checkpoint;
mod code_mode;
mod latency;
mod ledger;
mod lifecycle;
mod output;
mod percentile;
mod principals;
mod python;
mod remote;
mod sandbox;
mod server;
mod soak;
mod spool;

use latency::{
    bench_jupyter_client, bench_mcp, bench_raw_client, bench_session, NamespaceTimes, Rss, CALLS,
    WARMUP,
};
use lifecycle::{
    bench_replacement, bench_sigterm, print_sigterm, Recovery, HANG_GRACE_SECONDS, REPLACEMENTS,
};
use output::{bench_image_fit, bench_retained, print_image_fit, print_retained};
use percentile::percentile;
use python::resolve_python;
use server::sibling_binary;

/// The subcommands; none is the full run.
const USAGE: &str = "usage: ipython-mcp-bench [SUBCOMMAND]

  (none)                  the full run: execute round trips, memory, replacement, images
  execute                 execute, inspect, call_function and dynamic tool calls through MCP
  remote                  a kernel on a Jupyter server started on loopback
  principals              fifty HTTP clients as ten principals
  retained                server memory while executions are retained
  spool [ROUNDS]          the output spool's cost
  sandbox [ROUNDS]        kernel start and execute with the sandbox on and off
  checkpoint [ROUNDS]     execute and big cells with namespace checkpoints on and off
  code-mode [CALLS]       an upstream MCP tool called from kernel code, and its token cost
  soak [--seconds N] [--seed N]
                          load with injected faults; fails on any broken promise
  sigterm                 SIGTERM with eight busy kernels
  images                  fitting a large image into the bound";

const SUBCOMMANDS: [&str; 11] = [
    "execute",
    "remote",
    "principals",
    "retained",
    "spool",
    "sandbox",
    "checkpoint",
    "code-mode",
    "soak",
    "sigterm",
    "images",
];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    // reqwest's clients (rmcp's streamable-HTTP transport) need a process-wide rustls provider
    // when the workspace builds reqwest with TLS but no provider (see Cargo.toml).
    let _ = rustls::crypto::ring::default_provider().install_default();
    // A mistyped subcommand must not start the full run, which takes minutes.
    match std::env::args().nth(1).as_deref() {
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            return Ok(());
        }
        Some(other) if !SUBCOMMANDS.contains(&other) => {
            eprintln!("ipython-mcp-bench: unknown subcommand {other:?}\n{USAGE}");
            std::process::exit(2);
        }
        _ => {}
    }
    if std::env::args().nth(1).as_deref() == Some("images") {
        print_image_fit(&bench_image_fit().await?);
        return Ok(());
    }
    // Arguments are checked before anything is looked for or started.
    let soak = match std::env::args().nth(1).as_deref() {
        Some("soak") => Some(soak_arguments(std::env::args().skip(2))?),
        _ => None,
    };
    // `IPYTHON_MCP_BENCH_SERVER` measures another build of the server with this same client,
    // so two versions can be compared in interleaved runs.
    let server_binary = match std::env::var_os("IPYTHON_MCP_BENCH_SERVER") {
        Some(path) => PathBuf::from(path),
        None => sibling_binary("ipython-mcp")?,
    };
    match std::env::args().nth(1).as_deref() {
        Some("execute") => return bench_execute(&server_binary).await,
        Some("remote") => return remote::bench_remote(&server_binary).await,
        Some("principals") => return principals::bench_principals(&server_binary).await,
        Some("retained") => {
            print_retained(&bench_retained(&server_binary).await?);
            return Ok(());
        }
        Some("spool") => return bench_spool(&server_binary).await,
        Some("sandbox") => {
            let rounds = count_argument(sandbox::SANDBOX_ROUNDS, "ROUNDS")?;
            let python = resolve_python().await?;
            return sandbox::bench_sandbox(&server_binary, &python, rounds).await;
        }
        Some("checkpoint") => {
            let rounds = count_argument(checkpoint::CHECKPOINT_ROUNDS, "ROUNDS")?;
            let python = resolve_python().await?;
            return checkpoint::bench_checkpoint(&server_binary, &python, rounds).await;
        }
        Some("code-mode") => {
            let calls = count_argument(code_mode::CODE_MODE_CALLS, "CALLS")?;
            let python = resolve_python().await?;
            return code_mode::bench_code_mode(&server_binary, &python, calls).await;
        }
        Some("soak") => {
            let (seconds, seed) = soak.context("soak arguments")?;
            return soak::soak(&server_binary, seconds, seed).await;
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

    print_round_trips(&mcp, &raw, &session, &python_floor, &namespace);
    print_memory(&rss);
    print_recovery(&with_spare, &without_spare, &startup);
    print_retained(&retained);
    print_sigterm(&sigterm);
    print_image_fit(&image_fit);
    Ok(())
}

/// `ipython-mcp-bench execute`: (a) and the namespace calls alone, p50 only.
async fn bench_execute(server_binary: &Path) -> anyhow::Result<()> {
    let (mcp, _, namespace) = bench_mcp(server_binary).await?;
    for (name, samples) in [
        ("(a) MCP stdio execute", &mcp),
        ("inspect", &namespace.inspect),
        ("call_function", &namespace.call),
        ("dynamic tool call", &namespace.dynamic_call),
    ] {
        println!("{name:<24} p50 {:>7.3} ms", percentile(samples, 0.50));
    }
    Ok(())
}

/// `ipython-mcp-bench spool [ROUNDS]`: the spool's cost over a run without it, failing past
/// [`spool::MAX_SPOOL_RATIO`].
async fn bench_spool(server_binary: &Path) -> anyhow::Result<()> {
    let rounds = count_argument(spool::SPOOL_ROUNDS, "ROUNDS")?;
    if rounds == 0 {
        bail!("ROUNDS is a positive number");
    }
    let python = resolve_python().await?;
    let cost = spool::bench_spool(server_binary, &python, rounds).await?;
    spool::print_spool(&cost);
    if cost.ratio() > spool::MAX_SPOOL_RATIO {
        bail!(
            "the spool costs {:.1} % over a run without it (target <= {:.0} %)",
            (cost.ratio() - 1.0) * 100.0,
            (spool::MAX_SPOOL_RATIO - 1.0) * 100.0
        );
    }
    Ok(())
}

/// The round-trip table of the full run, (a) to (c) and the namespace calls, and the ratios
/// of (a) to the floors.
fn print_round_trips(
    mcp: &[f64],
    raw: &[f64],
    session: &[f64],
    python_floor: &[f64],
    namespace: &NamespaceTimes,
) {
    println!();
    println!(
        "{:<58} {:>9} {:>9}",
        "round trip of `x = x + 1` (reply + idle)", "p50 ms", "p99 ms"
    );
    for (name, samples) in [
        ("(a) MCP stdio: rmcp client -> ipython-mcp -> kernel", mcp),
        ("(b) our kernel client (ipython-mcp-jupyter), no MCP", raw),
        (
            "(b2) our session layer (helper + bounding), no MCP",
            session,
        ),
        ("(c) Python jupyter_client, same kernel flags", python_floor),
        (
            "inspect `f` through MCP (helper comm RPC)",
            &namespace.inspect[..],
        ),
        ("call_function `f(x=1)` through MCP", &namespace.call[..]),
        (
            "dynamic tool call `tool_0(x=1)` (100 registered)",
            &namespace.dynamic_call[..],
        ),
        ("tools/list with 100 dynamic tools", &namespace.list_100[..]),
    ] {
        println!(
            "{name:<58} {:>9.3} {:>9.3}",
            percentile(samples, 0.50),
            percentile(samples, 0.99)
        );
    }
    let (a, b, b2, c) = (
        percentile(mcp, 0.5),
        percentile(raw, 0.5),
        percentile(session, 0.5),
        percentile(python_floor, 0.5),
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
}

/// (d): the server's RSS when idle and at its peak during the 200 MB print.
fn print_memory(rss: &Rss) {
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
}

/// (e) and (f): kernel replacement after a death, startup to `initialize`, and the time to a
/// usable kernel after a hang, with a warm spare and without one.
fn print_recovery(with_spare: &Recovery, without_spare: &Recovery, startup: &[(String, Vec<f64>)]) {
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
    for (name, samples) in startup {
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
}

/// `[--seconds N] [--seed S]` of `soak`: 60 s and seed 1 unless given.
/// The subcommand's count (`ROUNDS`, `CALLS`), or `default` without one.
fn count_argument<T: std::str::FromStr>(default: T, name: &str) -> anyhow::Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    match std::env::args().nth(2) {
        Some(count) => count
            .parse()
            .with_context(|| format!("{name} is a positive number")),
        None => Ok(default),
    }
}

fn soak_arguments(mut args: impl Iterator<Item = String>) -> anyhow::Result<(u64, u64)> {
    let (mut seconds, mut seed) = (60, 1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        let number: u64 = value
            .parse()
            .with_context(|| format!("{flag} takes a whole number, not {value:?}"))?;
        match flag.as_str() {
            "--seconds" if number > 0 => seconds = number,
            "--seed" => seed = number,
            _ => bail!("usage: ipython-mcp-bench soak [--seconds N (> 0)] [--seed S]"),
        }
    }
    Ok((seconds, seed))
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
            .env(ipython_mcp_config::LOG.env, "warn")
            .env(ipython_mcp_config::SPARE_KERNELS.env, "0")
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
