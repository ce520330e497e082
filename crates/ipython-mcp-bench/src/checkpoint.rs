//! `ipython-mcp-bench checkpoint [ROUNDS]`: what checkpoints of the namespace cost. Each round
//! starts two servers of the same binary, checkpoints on and off, in an order swapped every
//! round, and takes from each: the p50 of `CALLS` `execute`s of `x = x + 1`, how long a cell
//! that creates a `BIG_BYTES` buffer takes to return, and how long a trivial cell sent right
//! after it takes (with checkpoints it waits for the writer of the big one: the cost a fast
//! next call pays); medians of `BIG_CELLS`. On the server with checkpoints it also
//! takes what one trivial cell writes to disk (the new manifest and the changed value), and how
//! long a replacement takes to load the checkpoint holding the big buffer (`restore_ms`, the
//! server's own measurement) after the kernel is killed. Then a cell that changes 1 MiB of the
//! big buffer in place, and a trivial cell sent right after it; with checkpoints, what the
//! checkpoint of such a cell wrote (`runtime_status.checkpoint.bytes_written`, once it is
//! current). Prints medians, and the medians of the rounds' ratios.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::RunningService;
use serde_json::{json, Value};

use crate::percentile::percentile;
use crate::server::{serve, Served};

/// Rounds unless the command line gives another number.
pub(crate) const CHECKPOINT_ROUNDS: usize = 3;
/// `execute` calls per server, after as many warm-up calls.
const CALLS: usize = 100;
/// The big cell's buffer: 1 GiB, as large a value as a session's checkpoint keeps by default
/// (its bound is raised for it).
const BIG_BYTES: u64 = 1 << 30;
/// Big cells per server (each followed by a trivial one).
const BIG_CELLS: usize = 3;

type Client = RunningService<rmcp::RoleClient, ClientConfig>;

#[derive(Default)]
struct Figures {
    execute_p50_ms: f64,
    big_cell_ms: f64,
    /// A trivial cell sent as soon as the big one returned.
    next_cell_ms: f64,
    /// With checkpoints: bytes one trivial cell adds to the checkpoint directory.
    trivial_cell_bytes: Option<u64>,
    /// With checkpoints: the replacement's load of the big buffer's checkpoint.
    restore_ms: Option<f64>,
    /// A trivial cell sent as soon as a cell that changed 1 MiB of the big buffer returned.
    after_change_ms: f64,
    /// With checkpoints: bytes the checkpoint of a cell changing 1 MiB of the big buffer wrote.
    change_bytes: Option<u64>,
}

/// Changes 1 MiB in the middle of the big buffer, in place, to bytes never seen before (equal
/// chunks are stored once: the same bytes again would write nothing).
const CHANGE: &str = "big[1 << 29 : (1 << 29) + (1 << 20)] = __import__('os').urandom(1 << 20)";

pub(crate) async fn bench_checkpoint(
    server_binary: &Path,
    python: &Path,
    rounds: usize,
) -> anyhow::Result<()> {
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for checkpoints in order {
            let figures = measure(server_binary, python, checkpoints).await?;
            if checkpoints {
                on.push(figures);
            } else {
                off.push(figures);
            }
        }
    }
    let median = |figures: &[Figures], pick: fn(&Figures) -> f64| {
        percentile(&figures.iter().map(pick).collect::<Vec<_>>(), 0.5)
    };
    println!(
        "namespace checkpoints, {rounds} interleaved rounds ({CALLS} execute calls of `x = x + 1` each; a cell making a {} MiB buffer):",
        BIG_BYTES >> 20
    );
    for (name, figures) in [("on", &on), ("off", &off)] {
        println!(
            "  {name:<4} execute p50 median {:>6.3} ms   big cell median {:>8.1} ms   next cell median {:>8.1} ms",
            median(figures, |f| f.execute_p50_ms),
            median(figures, |f| f.big_cell_ms),
            median(figures, |f| f.next_cell_ms),
        );
    }
    let ratio = |pick: fn(&Figures) -> f64| {
        let ratios: Vec<f64> = on
            .iter()
            .zip(&off)
            .map(|(on, off)| pick(on) / pick(off))
            .collect();
        percentile(&ratios, 0.5)
    };
    println!(
        "  on / off, median of the rounds: execute p50 {:.3}, big cell {:.3}, trivial cell after it {:.3}, trivial cell after 1 MiB changed {:.3}",
        ratio(|f| f.execute_p50_ms),
        ratio(|f| f.big_cell_ms),
        ratio(|f| f.next_cell_ms),
        ratio(|f| f.after_change_ms)
    );
    for (name, figures) in [("on", &on), ("off", &off)] {
        println!(
            "  {name:<4} trivial cell after 1 MiB changed median {:>8.1} ms",
            median(figures, |f| f.after_change_ms),
        );
    }
    let changes: Vec<f64> = on
        .iter()
        .filter_map(|f| f.change_bytes)
        .map(|b| b as f64)
        .collect();
    println!(
        "  written by the checkpoint of a cell changing 1 MiB of the {} MiB buffer: median {:.0} bytes",
        BIG_BYTES >> 20,
        percentile(&changes, 0.5)
    );
    let written: Vec<f64> = on
        .iter()
        .filter_map(|f| f.trivial_cell_bytes)
        .map(|b| b as f64)
        .collect();
    let restores: Vec<f64> = on.iter().filter_map(|f| f.restore_ms).collect();
    println!(
        "  disk written per trivial cell: {:.0} bytes; restoring the {} MiB checkpoint: median {:.0} ms",
        percentile(&written, 0.5),
        BIG_BYTES >> 20,
        percentile(&restores, 0.5)
    );
    Ok(())
}

async fn measure(
    server_binary: &Path,
    python: &Path,
    checkpoints: bool,
) -> anyhow::Result<Figures> {
    // The server's private directory (with the checkpoint) where this bench can find it: its
    // runtime directory, beside (never inside) the temp directory it gives the server.
    let root = tempfile::tempdir()?;
    let (temp, private) = (root.path().join("tmp"), root.path().join("run"));
    std::fs::create_dir(&temp)?;
    std::fs::create_dir(&private)?;
    let env = vec![
        (ipython_mcp_config::LOG.env, "warn".to_owned()),
        (ipython_mcp_config::SPARE_KERNELS.env, "1".to_owned()),
        (ipython_mcp_config::PYTHON.env, python.display().to_string()),
        (
            ipython_mcp_config::CHECKPOINT.env,
            if checkpoints { "on" } else { "off" }.to_owned(),
        ),
        (
            ipython_mcp_config::CHECKPOINT_MAX_BYTES.env,
            (2 * BIG_BYTES).to_string(),
        ),
        ("XDG_RUNTIME_DIR", private.display().to_string()),
        ("TMPDIR", temp.display().to_string()),
        (
            ipython_mcp_config::STRUCTURED_OUTPUT.env,
            "always".to_owned(),
        ),
    ];
    let Served {
        mut child, client, ..
    } = serve(server_binary, &env).await?;
    execute(&client, "x = 0", 600).await?;
    for _ in 0..CALLS {
        execute(&client, "x = x + 1", 60).await?;
    }
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let began = Instant::now();
        execute(&client, "x = x + 1", 60).await?;
        samples.push(began.elapsed().as_secs_f64() * 1000.0);
    }
    let mut figures = Figures {
        execute_p50_ms: percentile(&samples, 0.5),
        ..Figures::default()
    };
    if checkpoints {
        // The next cell waits for the last checkpoint: the directory is settled after it.
        execute(&client, "pass", 60).await?;
        let before = checkpoint_files(&private);
        execute(&client, "x = x + 1", 60).await?;
        execute(&client, "pass", 60).await?;
        figures.trivial_cell_bytes = Some(written_by_one_cell(&private, before));
    }
    let (mut big, mut next) = (Vec::new(), Vec::new());
    for cell in 0..BIG_CELLS {
        // A different value each time: content-addressed, an equal one would not be written.
        let code = format!("big = bytearray({BIG_BYTES})\nbig[0] = {}", cell + 1);
        let began = Instant::now();
        execute(&client, &code, 600).await?;
        big.push(began.elapsed().as_secs_f64() * 1000.0);
        let began = Instant::now();
        execute(&client, "pass", 600).await?;
        next.push(began.elapsed().as_secs_f64() * 1000.0);
    }
    figures.big_cell_ms = percentile(&big, 0.5);
    figures.next_cell_ms = percentile(&next, 0.5);
    let mut after_change = Vec::new();
    for _ in 0..BIG_CELLS {
        if checkpoints {
            // The big cells' writers are done: the trivial cell meets only the change's.
            settle(&client).await?;
        }
        execute(&client, CHANGE, 600).await?;
        let began = Instant::now();
        execute(&client, "pass", 600).await?;
        after_change.push(began.elapsed().as_secs_f64() * 1000.0);
    }
    figures.after_change_ms = percentile(&after_change, 0.5);
    if checkpoints {
        settle(&client).await?;
        let changed = call(&client, CHANGE, 600).await?;
        let count = changed["execution_count"].as_u64();
        let checkpoint = wait_for_checkpoint(&client, count).await?;
        figures.change_bytes = checkpoint["bytes_written"].as_u64();
    }
    if checkpoints {
        let died = call(&client, "import os\nos._exit(1)", 600).await?;
        let restore = &died["runtime"]["restore"];
        if restore["restored"]
            .as_array()
            .is_none_or(|names| !names.iter().any(|name| name == "big"))
        {
            bail!("the big buffer was not restored: {}", died["runtime"]);
        }
        figures.restore_ms = restore["restore_ms"].as_f64();
    }
    let _ = client.cancel().await;
    let _ = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;
    Ok(figures)
}

/// The checkpoint directories under `root`, with each file's size.
fn checkpoint_files(root: &Path) -> Vec<(PathBuf, u64)> {
    fn walk(dir: &Path, inside: bool, found: &mut Vec<(PathBuf, u64)>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let here = inside || entry.file_name() == "checkpoint";
            if kind.is_dir() {
                walk(&path, here, found);
            } else if inside {
                let size = entry.metadata().map(|meta| meta.len()).unwrap_or(0);
                found.push((path, size));
            }
        }
    }
    let mut found = Vec::new();
    walk(root, false, &mut found);
    found
}

/// What one cell wrote: the manifest (rewritten each time) and every file new since `before`.
fn written_by_one_cell(root: &Path, before: Vec<(PathBuf, u64)>) -> u64 {
    checkpoint_files(root)
        .into_iter()
        .filter(|(path, _)| {
            path.file_name().is_some_and(|name| name == "manifest.json")
                || !before.iter().any(|(old, _)| old == path)
        })
        .map(|(_, size)| size)
        .sum()
}

/// Runs a trivial cell and waits until its checkpoint is current: every writer before it is
/// done.
async fn settle(client: &Client) -> anyhow::Result<()> {
    let result = call(client, "pass", 600).await?;
    wait_for_checkpoint(client, result["execution_count"].as_u64()).await?;
    Ok(())
}

/// `runtime_status.checkpoint` once the checkpoint after execution `count` is current.
async fn wait_for_checkpoint(client: &Client, count: Option<u64>) -> anyhow::Result<Value> {
    let count = count.context("execute answers its execution_count")?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let status = client
            .peer()
            .call_tool(CallToolRequestParams::new("runtime_status"))
            .await?
            .structured_content
            .context("runtime_status has structured content")?;
        let checkpoint = &status["checkpoint"];
        if checkpoint["execution_count"].as_u64() >= Some(count) {
            return Ok(checkpoint.clone());
        }
        if Instant::now() > deadline {
            bail!("the checkpoint after execution {count} never became current: {checkpoint}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn execute(client: &Client, code: &str, timeout_seconds: u64) -> anyhow::Result<()> {
    let result = call(client, code, timeout_seconds).await?;
    if result["ok"] != true {
        bail!("{code}: {result}");
    }
    Ok(())
}

/// An `execute`, answered; its structured content.
async fn call(client: &Client, code: &str, timeout_seconds: u64) -> anyhow::Result<Value> {
    let arguments = json!({"code": code, "timeout_seconds": timeout_seconds})
        .as_object()
        .cloned()
        .expect("object");
    let result = client
        .peer()
        .call_tool(CallToolRequestParams::new("execute").with_arguments(arguments))
        .await?;
    result
        .structured_content
        .context("execute has structured content (structured output is always on here)")
}
