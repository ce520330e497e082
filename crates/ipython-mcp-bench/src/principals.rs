//! `ipython-mcp-bench principals`: fifty concurrent MCP clients over Streamable HTTP against
//! one release server, first as ten principals of five clients each (a principals file), then
//! as fifty clients of one token, for comparison. Each client marks its principal's kernel and
//! checks that it sees only its own principal's marks; then all fifty call `runtime_status`
//! (no kernel involved: the HTTP and MCP layers' throughput) and `execute` of `1 + 1` (bound by
//! the kernels, which run one cell at a time: ten of them against one). Every JSON-RPC
//! request is counted against its responses below the rmcp client (ledger.rs), and every
//! `execute` reply's execution count must be new to its kernel. A leak, a lost or duplicated
//! reply, or any failed call fails the run, after the table is printed.
//!
//! Everything is bounded: each call, the wait for the kernels, each layout's whole run. The
//! server listens on loopback, on a port of its choosing, with its files in a temporary
//! directory.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, JsonObject};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _, Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::RoleClient;
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::task::JoinSet;

use crate::ledger::{Counted, Ledger, Replies};
use crate::percentile::percentile;
use crate::python::resolve_python;
use crate::server::{cpu_seconds, proc_status_kib};

const CLIENTS: usize = 50;
const PRINCIPALS: usize = 10;
const STATUS_CALLS: usize = 200;
const EXECUTE_CALLS: usize = 100;
const WARMUP_CALLS: usize = 20;
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The Python is resolved before the server starts, so this bounds kernel starts alone; ten at
/// once on two busy cores take a while.
const READY_TIMEOUT: Duration = Duration::from_secs(300);
const LAYOUT_TIMEOUT: Duration = Duration::from_secs(1200);
/// Above `CLIENTS`: with one token, all fifty clients' `execute`s wait for the one kernel,
/// and the default (32) would refuse some of them `runtime_busy` instead of queueing them.
const MAX_PENDING: usize = 64;

/// Who the fifty clients are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// A principals file of [`PRINCIPALS`], five clients each.
    Principals,
    /// One token (`IPYTHON_MCP_HTTP_TOKEN`): one server state, one `default` kernel.
    OneToken,
}

impl Layout {
    fn principals(self) -> usize {
        match self {
            Layout::Principals => PRINCIPALS,
            Layout::OneToken => 1,
        }
    }

    fn heading(self) -> String {
        match self {
            Layout::Principals => format!("{PRINCIPALS} principals x {}", CLIENTS / PRINCIPALS),
            Layout::OneToken => format!("1 token x {CLIENTS}"),
        }
    }
}

/// A principal's name, a Python identifier too (it names the marks).
fn principal_name(index: usize) -> String {
    format!("p{index:02}")
}

/// The variable client `client` defines in its principal's kernel.
fn mark(principal: &str, client: usize) -> String {
    format!("mark_{principal}_c{client:02}")
}

/// One client's calls of one phase.
#[derive(Debug, Default)]
struct Calls {
    samples_ms: Vec<f64>,
    errors: Vec<String>,
    /// Another principal's marks seen.
    leaks: Vec<String>,
    /// `execute` replies' execution counts, which must never repeat within one kernel.
    execution_counts: Vec<u64>,
    started: Option<Instant>,
    finished: Option<Instant>,
}

/// Latency percentiles and the rate over all clients of one phase.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Throughput {
    calls: usize,
    p50_ms: f64,
    p99_ms: f64,
    per_second: f64,
}

/// Percentiles over every client's samples; the rate is all calls over the time from the
/// first client's start to the last one's end.
fn throughput(phase: &[Calls]) -> Throughput {
    let samples: Vec<f64> = phase
        .iter()
        .flat_map(|calls| calls.samples_ms.iter().copied())
        .collect();
    let first = phase.iter().filter_map(|calls| calls.started).min();
    let last = phase.iter().filter_map(|calls| calls.finished).max();
    let seconds = match (first, last) {
        (Some(first), Some(last)) => last.duration_since(first).as_secs_f64(),
        _ => 0.0,
    };
    if samples.is_empty() || seconds <= 0.0 {
        return Throughput {
            calls: samples.len(),
            p50_ms: f64::NAN,
            p99_ms: f64::NAN,
            per_second: f64::NAN,
        };
    }
    Throughput {
        calls: samples.len(),
        p50_ms: percentile(&samples, 0.50),
        p99_ms: percentile(&samples, 0.99),
        per_second: samples.len() as f64 / seconds,
    }
}

/// The text blocks of a result, joined.
fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text())
        .map(|text| text.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// From an `execute` result's text, `[ok] Out[N]` …: N.
fn execution_count(text: &str) -> Option<u64> {
    text.strip_prefix("[ok] Out[")?
        .split(']')
        .next()?
        .parse()
        .ok()
}

/// The value section of an `execute` result's text (the repr of the cell's value).
fn result_section(text: &str) -> Option<&str> {
    let (_, after) = text.split_once("--- result ---\n")?;
    Some(after.split("\n--- ").next().unwrap_or(after).trim())
}

/// The marks a check cell listed: the repr of `'|'.join(sorted(...))`.
fn listed_marks(text: &str) -> Option<Vec<String>> {
    let listed = result_section(text)?.trim_matches('\'');
    Some(
        listed
            .split('|')
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

/// The marks of another principal among `listed`: each one a leak.
fn foreign_marks(principal: &str, listed: &[String]) -> Vec<String> {
    let own = format!("mark_{principal}_");
    listed
        .iter()
        .filter(|name| !name.starts_with(&own))
        .cloned()
        .collect()
}

/// How many of `counts` repeat an earlier one (a cell answered twice, or a reply meant for
/// another call).
fn repeated(counts: &[u64]) -> usize {
    let mut sorted = counts.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).filter(|pair| pair[0] == pair[1]).count()
}

/// What one layout measured and found.
#[derive(Debug)]
struct Figures {
    layout: Layout,
    status: Throughput,
    execute: Throughput,
    leaks: Vec<String>,
    replies: Replies,
    repeated_counts: usize,
    errors: Vec<String>,
    peak_rss_kib: u64,
    /// CPU µs per `runtime_status` call (warm-up included): the server's, the clients'.
    status_cpu_us: (f64, f64),
}

impl Figures {
    fn failed(&self) -> bool {
        !self.leaks.is_empty()
            || self.replies.lost > 0
            || self.replies.duplicated > 0
            || self.repeated_counts > 0
            || !self.errors.is_empty()
    }
}

pub(crate) async fn bench_principals(server_binary: &Path) -> anyhow::Result<()> {
    let python = resolve_python().await?;
    println!(
        "ipython-mcp HTTP load: {CLIENTS} concurrent MCP clients (rmcp, Streamable HTTP, handshake sessions) on loopback; per client {STATUS_CALLS} runtime_status and {EXECUTE_CALLS} execute `1 + 1` after {WARMUP_CALLS} warm-up calls each; python {}",
        python.display()
    );
    let mut all = Vec::new();
    for layout in [Layout::Principals, Layout::OneToken] {
        let figures =
            tokio::time::timeout(LAYOUT_TIMEOUT, run_layout(server_binary, &python, layout))
                .await
                .with_context(|| {
                    format!(
                        "{} did not finish within {LAYOUT_TIMEOUT:?}",
                        layout.heading()
                    )
                })??;
        all.push(figures);
    }
    print_figures(&all);
    if all.iter().any(Figures::failed) {
        for figures in &all {
            for error in figures.errors.iter().take(5) {
                eprintln!("{}: {error}", figures.layout.heading());
            }
            for leak in figures.leaks.iter().take(5) {
                eprintln!("{}: leak: {leak}", figures.layout.heading());
            }
        }
        bail!("the run failed: a leak, a lost or duplicated reply, or an error (above)");
    }
    Ok(())
}

fn print_figures(all: &[Figures]) {
    let row = |name: &str, cell: &dyn Fn(&Figures) -> String| {
        let cells: String = all.iter().map(|f| format!(" {:>20}", cell(f))).collect();
        println!("{name:<34}{cells}");
    };
    println!();
    row("", &|f| f.layout.heading());
    type Phase = fn(&Figures) -> Throughput;
    let phases: [(&str, Phase); 2] = [
        ("runtime_status", |f| f.status),
        ("execute `1 + 1`", |f| f.execute),
    ];
    for (tool, figures) in phases {
        row(&format!("{tool} req/s"), &|f| {
            format!("{:.0}", figures(f).per_second)
        });
        row(&format!("{tool} p50 ms"), &|f| {
            format!("{:.2}", figures(f).p50_ms)
        });
        row(&format!("{tool} p99 ms"), &|f| {
            format!("{:.2}", figures(f).p99_ms)
        });
    }
    row("runtime_status CPU us, server", &|f| {
        format!("{:.0}", f.status_cpu_us.0)
    });
    row("runtime_status CPU us, clients", &|f| {
        format!("{:.0}", f.status_cpu_us.1)
    });
    row("another principal's marks seen", &|f| {
        f.leaks.len().to_string()
    });
    row("JSON-RPC requests", &|f| f.replies.requests.to_string());
    row("replies lost / duplicated", &|f| {
        format!("{} / {}", f.replies.lost, f.replies.duplicated)
    });
    row("repeated execution counts", &|f| {
        f.repeated_counts.to_string()
    });
    row("failed calls", &|f| f.errors.len().to_string());
    row("server peak RSS MiB", &|f| {
        format!("{:.1}", f.peak_rss_kib as f64 / 1024.0)
    });
}

/// The server under load, killed on drop if it was not stopped.
pub(crate) struct HttpServer {
    pub(crate) child: tokio::process::Child,
    pub(crate) pid: u32,
    pub(crate) url: String,
}

/// A connected client and what it is.
struct Client {
    index: usize,
    principal: String,
    service: RunningService<RoleClient, ClientConfig>,
    ledger: Arc<Mutex<Ledger>>,
}

async fn run_layout(
    server_binary: &Path,
    python: &Path,
    layout: Layout,
) -> anyhow::Result<Figures> {
    let dir = tempfile::tempdir()?;
    let workspace = dir.path().join("workspace");
    std::fs::create_dir(&workspace)?;
    let tokens: Vec<String> = (0..layout.principals())
        .map(|_| random_token())
        .collect::<anyhow::Result<_>>()?;
    let env = layout_env(dir.path(), &workspace, python, layout, &tokens)?;
    let server = start(server_binary, &env).await?;

    let clients = connect(&server.url, layout, &tokens).await?;
    let peers: Vec<Peer<RoleClient>> = clients
        .iter()
        .map(|client| client.service.peer().clone())
        .collect();
    wait_ready(&peers).await?;

    // Marks: every client defines its own, then (all defined) lists what it sees.
    let defined = each(&clients, define_mark).await?;
    let checked = each(&clients, list_marks).await?;

    // CPU per call tells which side bounds the rate: the server, or this process's fifty
    // clients on the same cores.
    let cpu_before = (cpu_seconds(&server.pid.to_string()), cpu_seconds("self"));
    let status_arguments = JsonObject::new();
    let status = phase(&clients, "runtime_status", &status_arguments, STATUS_CALLS).await?;
    let status_calls = (CLIENTS * (WARMUP_CALLS + STATUS_CALLS)) as f64;
    let status_cpu_us = (
        (cpu_seconds(&server.pid.to_string()) - cpu_before.0) / status_calls * 1e6,
        (cpu_seconds("self") - cpu_before.1) / status_calls * 1e6,
    );
    let execute = phase(
        &clients,
        "execute",
        &execute_arguments("1 + 1"),
        EXECUTE_CALLS,
    )
    .await?;
    // Execution counts by kernel (one per principal), from every `execute` reply.
    let mut counts: HashMap<&str, Vec<u64>> = HashMap::new();
    let mut errors = Vec::new();
    let mut leaks = Vec::new();
    for phase in [&defined, &checked, &status, &execute] {
        for (client, calls) in clients.iter().zip(phase) {
            counts
                .entry(&client.principal)
                .or_default()
                .extend(&calls.execution_counts);
            errors.extend(calls.errors.iter().cloned());
            leaks.extend(calls.leaks.iter().cloned());
        }
    }
    let peak_rss_kib = proc_status_kib(server.pid, "VmHWM:");

    let mut replies = Replies::default();
    for client in &clients {
        replies += client
            .ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .replies();
    }
    let repeated_counts = counts.values().map(|counts| repeated(counts)).sum();
    stop(server, clients).await;
    Ok(Figures {
        layout,
        status: throughput(&status),
        execute: throughput(&execute),
        leaks,
        replies,
        repeated_counts,
        errors,
        peak_rss_kib,
        status_cpu_us,
    })
}

/// The server's environment for `layout`: quiet, no spare kernels, files under `workspace`,
/// and the layout's credentials (a principals file written into `dir`, or the one token).
fn layout_env(
    dir: &Path,
    workspace: &Path,
    python: &Path,
    layout: Layout,
    tokens: &[String],
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let mut env = vec![
        (ipython_mcp_config::LOG.env, "warn".to_owned()),
        (ipython_mcp_config::PYTHON.env, python.display().to_string()),
        (ipython_mcp_config::SPARE_KERNELS.env, "0".to_owned()),
        (
            ipython_mcp_config::WORKSPACE_ROOT.env,
            workspace.display().to_string(),
        ),
        (
            ipython_mcp_config::MAX_PENDING_OPERATIONS.env,
            MAX_PENDING.to_string(),
        ),
        (
            ipython_mcp_config::WORKER_STARTUP_TIMEOUT.env,
            "120".to_owned(),
        ),
    ];
    match layout {
        Layout::Principals => {
            let file = dir.join("principals");
            let lines: String = tokens
                .iter()
                .enumerate()
                .map(|(index, token)| format!("{} {token}\n", principal_name(index)))
                .collect();
            write_private(&file, &lines)?;
            env.push((
                ipython_mcp_config::HTTP_PRINCIPALS_FILE.env,
                file.display().to_string(),
            ));
        }
        Layout::OneToken => env.push((ipython_mcp_config::HTTP_TOKEN.env, tokens[0].clone())),
    }
    Ok(env)
}

/// A client's mark: a variable named for it and its principal, in its principal's kernel.
async fn define_mark(who: Who, peer: Peer<RoleClient>) -> Calls {
    let code = format!("{} = '{}'", mark(&who.principal, who.index), who.principal);
    let mut calls = Calls::default();
    match call(&peer, "execute", &execute_arguments(&code)).await {
        Ok(result) => calls
            .execution_counts
            .extend(execution_count(&text_of(&result))),
        Err(error) => calls.errors.push(error),
    }
    calls
}

/// Lists the marks a client sees (once every client has defined its own): another
/// principal's is a leak, and it must see all of its own principal's.
async fn list_marks(who: Who, peer: Peer<RoleClient>) -> Calls {
    let code = "'|'.join(sorted(k for k in globals() if k.startswith('mark_')))";
    let mut calls = Calls::default();
    match call(&peer, "execute", &execute_arguments(code)).await {
        Ok(result) => {
            let text = text_of(&result);
            calls.execution_counts.extend(execution_count(&text));
            match listed_marks(&text) {
                Some(listed) => {
                    let foreign = foreign_marks(&who.principal, &listed);
                    let own = listed.len() - foreign.len();
                    calls.leaks.extend(
                        foreign
                            .into_iter()
                            .map(|name| format!("a client of {} sees {name}", who.principal)),
                    );
                    // Fewer would mean clients of one principal do not share a kernel.
                    if own != who.siblings {
                        calls.errors.push(format!(
                            "a client of {} sees {own} of its principal's {} marks",
                            who.principal, who.siblings
                        ));
                    }
                }
                None => calls.errors.push(format!("no marks listed: {text:?}")),
            }
        }
        Err(error) => calls.errors.push(error),
    }
    calls
}

/// 32 random bytes in hex: a bearer token well past the 16-character minimum.
pub(crate) fn random_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|error| anyhow::anyhow!("random token: {error}"))?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// Writes a file only its owner can read, as the server asks of a principals file.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, "")?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    std::fs::write(path, text)?;
    Ok(())
}

/// Starts the server on a loopback port of its choosing and reads its URL from stderr; later
/// lines (warnings) are passed on.
pub(crate) async fn start(
    server_binary: &Path,
    env: &[(&str, String)],
) -> anyhow::Result<HttpServer> {
    let mut command = tokio::process::Command::new(server_binary);
    for name in [
        ipython_mcp_config::HTTP_TOKEN.env,
        ipython_mcp_config::HTTP_TOKEN_FILE.env,
        ipython_mcp_config::HTTP_PRINCIPALS_FILE.env,
    ] {
        command.env_remove(name);
    }
    let mut child = command
        .args(["--transport", "http", "--host", "127.0.0.1", "--port", "0"])
        .envs(env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().context("pid")?;
    let mut lines = BufReader::new(child.stderr.take().context("stderr")?).lines();
    let url = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await? {
            if let Some(url) = line.strip_prefix("ipython-mcp: serving MCP over HTTP at ") {
                return Ok(url.trim().to_owned());
            }
            eprintln!("server: {line}");
        }
        bail!("the server exited before serving")
    })
    .await
    .context("the server did not print its URL within 60 s")??;
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("server: {line}");
        }
    });
    Ok(HttpServer { child, pid, url })
}

/// Opens every client at once, client `index` acting for principal `index / (CLIENTS /
/// principals)`.
async fn connect(url: &str, layout: Layout, tokens: &[String]) -> anyhow::Result<Vec<Client>> {
    let per_principal = CLIENTS / layout.principals();
    let mut connecting = JoinSet::new();
    for index in 0..CLIENTS {
        let principal = index / per_principal;
        let config = StreamableHttpClientTransportConfig::with_uri(url)
            .auth_header(tokens[principal].clone());
        connecting.spawn(async move {
            let ledger = Arc::new(Mutex::new(Ledger::default()));
            let transport = Counted {
                inner: StreamableHttpClientTransport::from_config(config),
                ledger: Arc::clone(&ledger),
            };
            let service = tokio::time::timeout(
                CALL_TIMEOUT,
                ClientConfig::default()
                    .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize),
            )
            .await
            .context("initialize timed out")??;
            anyhow::Ok(Client {
                index,
                principal: principal_name(principal),
                service,
                ledger,
            })
        });
    }
    let mut clients = Vec::with_capacity(CLIENTS);
    while let Some(joined) = connecting.join_next().await {
        clients.push(joined??);
    }
    clients.sort_by_key(|client| client.index);
    Ok(clients)
}

/// Until every client's `runtime_status` says its default kernel has started (a principal's
/// starts at their first request) and is ready.
async fn wait_ready(peers: &[Peer<RoleClient>]) -> anyhow::Result<()> {
    let mut waiting = JoinSet::new();
    for peer in peers {
        let peer = peer.clone();
        waiting.spawn(async move {
            loop {
                let status = call(&peer, "runtime_status", &JsonObject::new())
                    .await
                    .map_err(anyhow::Error::msg)?;
                let state = status
                    .structured_content
                    .as_ref()
                    .and_then(|content| content["state"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                match state.as_str() {
                    "starting" => tokio::time::sleep(Duration::from_millis(100)).await,
                    "ready" => return anyhow::Ok(()),
                    other => bail!("the default kernel is {other:?}, not ready"),
                }
            }
        });
    }
    tokio::time::timeout(READY_TIMEOUT, async {
        while let Some(joined) = waiting.join_next().await {
            joined??;
        }
        anyhow::Ok(())
    })
    .await
    .with_context(|| format!("the kernels were not ready within {READY_TIMEOUT:?}"))?
}

/// A client as its work sees it.
struct Who {
    principal: String,
    index: usize,
    /// Clients of its principal, itself included.
    siblings: usize,
}

/// Runs `work` for every client at once (each in a task of its own) and returns their calls
/// in client order.
async fn each<F, Fut>(clients: &[Client], work: F) -> anyhow::Result<Vec<Calls>>
where
    F: Fn(Who, Peer<RoleClient>) -> Fut,
    Fut: std::future::Future<Output = Calls> + Send + 'static,
{
    let mut running = JoinSet::new();
    for client in clients {
        let siblings = clients
            .iter()
            .filter(|other| other.principal == client.principal)
            .count();
        let who = Who {
            principal: client.principal.clone(),
            index: client.index,
            siblings,
        };
        let work = work(who, client.service.peer().clone());
        let index = client.index;
        running.spawn(async move { (index, work.await) });
    }
    let mut done = Vec::with_capacity(clients.len());
    while let Some(joined) = running.join_next().await {
        done.push(joined?);
    }
    done.sort_by_key(|(index, _)| *index);
    Ok(done.into_iter().map(|(_, calls)| calls).collect())
}

/// [`WARMUP_CALLS`] of `tool` from every client, then (all warmed up) `calls` measured ones.
async fn phase(
    clients: &[Client],
    tool: &'static str,
    arguments: &JsonObject,
    calls: usize,
) -> anyhow::Result<Vec<Calls>> {
    let warmed = each(clients, |_, peer| {
        let arguments = arguments.clone();
        async move { timed(&peer, tool, &arguments, WARMUP_CALLS).await }
    })
    .await?;
    let mut measured = each(clients, |_, peer| {
        let arguments = arguments.clone();
        async move { timed(&peer, tool, &arguments, calls).await }
    })
    .await?;
    // Warm-up calls are not timed, but their failures and execution counts still count.
    for (measured, warmed) in measured.iter_mut().zip(warmed) {
        measured.errors.extend(warmed.errors);
        measured.execution_counts.extend(warmed.execution_counts);
    }
    Ok(measured)
}

/// `calls` calls of `tool`, one after another, each timed; an `execute` must answer `2`.
async fn timed(
    peer: &Peer<RoleClient>,
    tool: &'static str,
    arguments: &JsonObject,
    calls: usize,
) -> Calls {
    let mut timed = Calls {
        samples_ms: Vec::with_capacity(calls),
        started: Some(Instant::now()),
        ..Calls::default()
    };
    for _ in 0..calls {
        let started = Instant::now();
        let answered = call(peer, tool, arguments).await;
        timed
            .samples_ms
            .push(started.elapsed().as_secs_f64() * 1000.0);
        match answered {
            Ok(result) if tool == "execute" => {
                let text = text_of(&result);
                match (execution_count(&text), result_section(&text)) {
                    (Some(count), Some("2")) => timed.execution_counts.push(count),
                    _ => timed.errors.push(format!("execute answered {text:?}")),
                }
            }
            Ok(_) => {}
            Err(error) => timed.errors.push(error),
        }
    }
    timed.finished = Some(Instant::now());
    timed
}

fn execute_arguments(code: &str) -> JsonObject {
    json!({"code": code, "timeout_seconds": 30})
        .as_object()
        .cloned()
        .expect("an object literal")
}

/// One tool call, bounded; a protocol error, a timeout and a tool's error result all fail it.
async fn call(
    peer: &Peer<RoleClient>,
    tool: &'static str,
    arguments: &JsonObject,
) -> Result<CallToolResult, String> {
    let request = CallToolRequestParams::new(tool).with_arguments(arguments.clone());
    match tokio::time::timeout(CALL_TIMEOUT, peer.call_tool(request)).await {
        Err(_) => Err(format!("{tool}: no reply within {CALL_TIMEOUT:?}")),
        Ok(Err(error)) => Err(format!("{tool}: {error}")),
        Ok(Ok(result)) if result.is_error == Some(true) => {
            Err(format!("{tool} failed: {}", text_of(&result)))
        }
        Ok(Ok(result)) => Ok(result),
    }
}

/// Closes every client, then SIGTERM and a bounded wait for the server (killed on drop past
/// it).
async fn stop(mut server: HttpServer, clients: Vec<Client>) {
    let mut closing = JoinSet::new();
    for client in clients {
        closing.spawn(tokio::time::timeout(
            Duration::from_secs(10),
            client.service.cancel(),
        ));
    }
    while closing.join_next().await.is_some() {}
    let _ = std::process::Command::new("kill")
        .args(["-s", "TERM", &server.pid.to_string()])
        .status();
    let _ = tokio::time::timeout(Duration::from_secs(30), server.child.wait()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execute_text_gives_its_count_and_value() {
        let text = "[ok] Out[17]\n--- result ---\n2";
        assert_eq!(execution_count(text), Some(17));
        assert_eq!(result_section(text), Some("2"));
        assert_eq!(execution_count("[error] In[3]\n--- stderr ---\nx"), None);
        assert_eq!(result_section("[ok] Out[1]\n--- stdout ---\nhi"), None);
        assert_eq!(
            result_section("[ok] Out[2]\n--- result ---\n2\n--- displays: 1 returned ---"),
            Some("2")
        );
    }

    #[test]
    fn a_mark_of_another_principal_is_a_leak() {
        let text = "[ok] Out[3]\n--- result ---\n'mark_p01_c05|mark_p01_c06|mark_p02_c10'";
        let listed = listed_marks(text).expect("listed");
        assert_eq!(listed.len(), 3);
        assert_eq!(foreign_marks("p01", &listed), ["mark_p02_c10"]);
        assert!(foreign_marks("p02", &listed[2..]).is_empty());
        // A prefix of another name is not the name: p1 is not p10.
        assert_eq!(
            foreign_marks("p1", &["mark_p10_c00".to_owned()]),
            ["mark_p10_c00"]
        );
        assert_eq!(
            listed_marks("[ok] Out[4]\n--- result ---\n''"),
            Some(vec![])
        );
        assert_eq!(mark(&principal_name(3), 7), "mark_p03_c07");
    }

    #[test]
    fn repeated_execution_counts_are_counted() {
        assert_eq!(repeated(&[]), 0);
        assert_eq!(repeated(&[3, 1, 2]), 0);
        assert_eq!(repeated(&[5, 1, 5, 5, 2]), 2);
    }

    #[test]
    fn throughput_is_all_calls_over_first_start_to_last_end() {
        let zero = Instant::now();
        let at = |ms: u64| Some(zero + Duration::from_millis(ms));
        let phase = [
            Calls {
                samples_ms: vec![1.0, 2.0, 3.0],
                started: at(0),
                finished: at(500),
                ..Calls::default()
            },
            Calls {
                samples_ms: vec![4.0],
                started: at(100),
                finished: at(2000),
                ..Calls::default()
            },
        ];
        let figures = throughput(&phase);
        assert_eq!(figures.calls, 4);
        assert_eq!(figures.per_second, 2.0);
        assert_eq!(figures.p50_ms, 3.0);
        assert_eq!(figures.p99_ms, 4.0);
        assert!(throughput(&[]).per_second.is_nan());
    }
}
