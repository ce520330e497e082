//! `ipython-mcp-bench soak [--seconds N] [--seed S]`: a chaos soak, bounded in count and time,
//! on loopback only. Two servers of the binary under test (one over Streamable HTTP with three
//! client lanes, one over stdio with one), each lane on a kernel of its own, run a mixed
//! workload from a seeded pseudo-random schedule: trivial executes, output floods, images,
//! background jobs, namespace tools, dynamic tool calls, notebook edits and executions; and
//! faults at random moments, each on the lane's own kernel: SIGKILL, SIGSTOP past the
//! deadline, a memory blow-up past the limit, `interrupt`, an MCP cancellation, an HTTP client
//! dropped mid-call, `kernel_restart`. The stdio client declares the MCP tasks extension: its
//! background runs are tasks, some cancellations `tasks/cancel`.
//!
//! Then it drains and checks: every call answered exactly once (JSON-RPC ids counted below
//! the client, `ledger.rs`; a cancelled request may go unanswered) with a status that matches
//! what was done to it; every background job's output readable, and its task's result while
//! the server remembers it (exactly the latest `MAX_TASKS`, older ones unknown); notebook files
//! parse at every sample and hold every acknowledged cell; spool directories within their
//! bound; no kernel process outliving its session, nor the server; no temporary file left
//! behind; the servers' RSS, file descriptors and threads flat (least-squares slopes reported;
//! only gross growth fails, the machine is noisy). Any failure exits non-zero after the summary.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientConfig,
    GetTaskParams, GetTaskResult, TaskPayload, TaskStatus,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _, Peer, RunningService};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::RoleClient;
use serde_json::{json, Value};

use crate::ledger::{Counted, Ledger, Replies};
use crate::principals::{random_token, start, HttpServer};
use crate::python::resolve_python_in;
use crate::server::proc_status_kib;

/// Bound on any one call: the longest deadline a call here asks for (20 s) plus the grace,
/// a kernel replacement on two loaded cores (startup bound 30 s) and a large margin.
const CALL_TIMEOUT: Duration = Duration::from_secs(180);
const OPERATION_TIMEOUT_SECONDS: u64 = 20;
const GRACE_SECONDS: u64 = 1;
/// Kernel start bound; also how long an interrupt waits for a kernel to begin its request.
const STARTUP_SECONDS: u64 = 30;
const MEMORY_LIMIT: &str = "300MiB";
const SPOOL_BYTES: u64 = 8 << 20;
const SPOOL_EXECUTION_BYTES: u64 = 4 << 20;
/// A spool's bound per session: its limit, plus the executions being written (both streams).
const SPOOL_BOUND: u64 = SPOOL_BYTES + 2 * SPOOL_EXECUTION_BYTES;
/// HTTP lanes (the first on the `default` kernel, the others on started ones) and stdio lanes.
const HTTP_LANES: usize = 3;
const STDIO_LANES: usize = 1;
/// Gross growth only: the machine is shared and small.
const MAX_FD_GROWTH: f64 = 50.0;
const MAX_RSS_GROWTH_KIB: f64 = 512.0 * 1024.0;
/// MCP tasks each server remembers (`IPYTHON_MCP_MAX_TASKS`): small, so that a short run
/// crosses the bound and the soak sees the oldest forgotten.
const MAX_TASKS: usize = 4;

/// A tiny xorshift64*: the schedule is a function of the seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What every lane counts and finds.
#[derive(Default)]
struct Stats {
    calls: BTreeMap<String, u64>,
    faults: BTreeMap<&'static str, u64>,
    statuses: BTreeMap<String, u64>,
    failures: Vec<String>,
    /// Background jobs by how they read back.
    jobs: BTreeMap<&'static str, u64>,
    /// MCP tasks by how `tasks/get` answered them at the end.
    tasks: BTreeMap<&'static str, u64>,
    /// Kernel processes seen, by pid and start time (so a reused pid is not taken for one).
    kernels: HashSet<(u32, u64)>,
}

type Shared = Arc<Mutex<Stats>>;

fn with<T>(stats: &Shared, write: impl FnOnce(&mut Stats) -> T) -> T {
    write(
        &mut stats
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    )
}

/// A tool's answer, as far as the soak reads it.
struct Answer {
    is_error: bool,
    structured: Value,
}

impl Answer {
    /// `ok`, `pending`, or the error's code.
    fn outcome(&self) -> String {
        if self.is_error {
            return self.structured["error"]["code"]
                .as_str()
                .unwrap_or("error")
                .to_owned();
        }
        match self.structured["status"].as_str() {
            Some("error") => self.structured["error"]["code"]
                .as_str()
                .unwrap_or("error")
                .to_owned(),
            Some(status) => status.to_owned(),
            None => "ok".to_owned(),
        }
    }
}

fn answer_of(result: CallToolResult) -> Answer {
    let text: String = result
        .content
        .iter()
        .filter_map(|block| block.as_text())
        .map(|text| text.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    Answer {
        is_error: result.is_error == Some(true),
        structured: result
            .structured_content
            .unwrap_or_else(|| json!({ "text": text })),
    }
}

/// How a lane reaches its server.
#[derive(Clone)]
enum Via {
    Http { url: String, token: String },
    Stdio,
}

struct Job {
    execution_id: String,
    marker: String,
    /// The lane's executions before it: a kernel remembers only its latest
    /// `ipython_mcp_output::MAX_RECORDS` (32).
    executions_before: u64,
}

/// Executions after a job within which its record must still be there (32, with a margin for
/// calls that make records without an `execute`).
const RECORD_WINDOW: u64 = 16;

struct Lane {
    name: String,
    peer: Peer<RoleClient>,
    /// `None`: the `default` kernel.
    kernel: Option<String>,
    via: Via,
    notebook: String,
    rng: Rng,
    stats: Shared,
    jobs: Vec<Job>,
    inserted: Vec<String>,
    faults: u64,
    serial: u64,
    /// `execute` calls on the lane's kernel.
    executions: AtomicU64,
    /// Whether the lane's client declared the MCP tasks extension: its background runs are
    /// tasks, and some cancellations are `tasks/cancel`.
    tasks: bool,
    /// Every task the lane's server made for it, oldest first.
    task_ids: Vec<String>,
}

/// One call, bounded; `None` when it was not answered (recorded as a failure).
async fn call_on(
    peer: &Peer<RoleClient>,
    stats: &Shared,
    lane: &str,
    tool: &str,
    arguments: Value,
) -> Option<Answer> {
    let arguments = arguments.as_object().cloned().unwrap_or_default();
    with(stats, |stats| {
        *stats.calls.entry(tool.to_owned()).or_default() += 1
    });
    let request = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    match tokio::time::timeout(CALL_TIMEOUT, peer.call_tool(request)).await {
        Err(_) => {
            with(stats, |stats| {
                stats.failures.push(format!(
                    "{lane}: {tool} never answered (within {CALL_TIMEOUT:?})"
                ))
            });
            None
        }
        Ok(Err(error)) => {
            with(stats, |stats| {
                stats
                    .failures
                    .push(format!("{lane}: {tool}: protocol error {error}"))
            });
            None
        }
        Ok(Ok(result)) => {
            let answer = answer_of(result);
            with(stats, |stats| {
                *stats
                    .statuses
                    .entry(format!("{tool}: {}", answer.outcome()))
                    .or_default() += 1
            });
            Some(answer)
        }
    }
}

impl Lane {
    /// A lane named `name`, its notebook `<name>.ipynb`, with nothing done yet.
    fn new(
        name: String,
        peer: Peer<RoleClient>,
        kernel: Option<String>,
        via: Via,
        rng: Rng,
        stats: &Shared,
        tasks: bool,
    ) -> Lane {
        Lane {
            notebook: format!("{name}.ipynb"),
            name,
            peer,
            kernel,
            via,
            rng,
            stats: Arc::clone(stats),
            jobs: Vec::new(),
            inserted: Vec::new(),
            faults: 0,
            serial: 0,
            executions: AtomicU64::new(0),
            tasks,
            task_ids: Vec::new(),
        }
    }

    fn with_kernel(&self, mut arguments: Value) -> Value {
        if let Some(kernel) = &self.kernel {
            arguments["kernel"] = json!(kernel);
        }
        arguments
    }

    async fn call(&self, tool: &str, arguments: Value) -> Option<Answer> {
        call_on(&self.peer, &self.stats, &self.name, tool, arguments).await
    }

    fn fail(&self, message: String) {
        with(&self.stats, |stats| {
            stats.failures.push(format!("{}: {message}", self.name))
        });
    }

    /// Fails unless `answer` came and its outcome is one of `allowed`.
    fn expect(&self, what: &str, answer: &Option<Answer>, allowed: &[&str]) -> bool {
        match answer {
            None => false,
            Some(answer) => {
                let outcome = answer.outcome();
                if allowed.contains(&outcome.as_str()) {
                    true
                } else {
                    let detail: String = answer.structured.to_string().chars().take(300).collect();
                    // Where the time went (queue wait, run), which the cut above may lose.
                    let runtime = &answer.structured["runtime"];
                    self.fail(format!(
                        "{what}: {outcome}, expected {allowed:?}: {detail} (runtime {runtime})"
                    ));
                    false
                }
            }
        }
    }

    async fn execute(&self, code: &str, extra: Value) -> Option<Answer> {
        self.executions.fetch_add(1, Ordering::Relaxed);
        let mut arguments = self.with_kernel(json!({ "code": code }));
        if let Value::Object(extra) = extra {
            for (key, value) in extra {
                arguments[key] = value;
            }
        }
        self.call("execute", arguments).await
    }

    fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    async fn status(&self) -> Option<Value> {
        let status = self
            .call("runtime_status", self.with_kernel(json!({})))
            .await?;
        note_kernels(&self.stats, &status.structured);
        Some(status.structured)
    }

    async fn kernel_pid(&self) -> Option<u32> {
        let status = self.status().await?;
        status["kernel"]["pid"].as_u64().map(|pid| pid as u32)
    }

    /// Until the lane's kernel runs a call (so a fault lands on it), at most 30 s.
    async fn wait_active(&self) -> bool {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            match self.status().await {
                Some(status) if status["operation_active"] == true => return true,
                Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                None => return false,
            }
        }
        self.fail("the call never became active".to_owned());
        false
    }

    /// A trivial execute that must succeed; it also waits out background jobs before a fault.
    async fn trivial(&mut self) -> bool {
        let n = self.next_serial();
        let answer = self
            .execute(&format!("x_{n} = {n}\nx_{n}"), json!({}))
            .await;
        if !self.expect("trivial execute", &answer, &["ok"]) {
            return false;
        }
        let value = &answer.as_ref().expect("answered").structured["result"]["text/plain"];
        if value != &json!(n.to_string()) {
            self.fail(format!("trivial execute of {n} answered {value}"));
            return false;
        }
        true
    }

    async fn step(&mut self) {
        let roll = self.rng.below(100);
        let began = Instant::now();
        self.act(roll).await;
        let took = began.elapsed();
        if took > Duration::from_secs(30) {
            println!(
                "{}: step {roll} took {:.1} s",
                self.name,
                took.as_secs_f64()
            );
        }
    }

    async fn act(&mut self, roll: u64) {
        match roll {
            0..=29 => {
                self.trivial().await;
            }
            30..=35 => {
                let answer = self
                    .execute("for i in range(600000):\n    print(i)", json!({}))
                    .await;
                self.expect("flood", &answer, &["ok"]);
            }
            36..=41 => {
                let answer = self.execute(IMAGE, json!({})).await;
                self.expect("image", &answer, &["ok"]);
            }
            42..=49 => {
                let n = self.next_serial();
                let marker = format!("job-{}-{n}", self.name);
                let code = format!(
                    "import time\ntime.sleep({:.2})\nprint('{marker}')",
                    self.rng.below(80) as f64 / 100.0
                );
                if let Some(execution_id) = self.start_background(&code).await {
                    self.jobs.push(Job {
                        execution_id,
                        marker,
                        executions_before: self.executions.load(Ordering::Relaxed),
                    });
                }
            }
            50..=57 => self.namespace().await,
            58..=62 => self.dynamic().await,
            63..=72 => self.notebook().await,
            73..=77 => {
                self.status().await;
            }
            _ => self.fault().await,
        }
    }

    async fn namespace(&mut self) {
        let answer = self
            .execute("def soak_double(x):\n    return x * 2", json!({}))
            .await;
        if !self.expect("define", &answer, &["ok"]) {
            return;
        }
        let called = self
            .call(
                "call_function",
                self.with_kernel(json!({"name": "soak_double", "arguments": {"x": 21}})),
            )
            .await;
        if self.expect("call_function", &called, &["ok"]) {
            let structured = &called.expect("answered").structured;
            if !structured["result"].to_string().contains("42") {
                self.fail(format!("call_function answered {structured}"));
            }
        }
        let inspected = self
            .call("inspect", self.with_kernel(json!({"name": "soak_double"})))
            .await;
        self.expect("inspect", &inspected, &["ok"]);
        let listed = self.call("list", self.with_kernel(json!({}))).await;
        self.expect("list", &listed, &["ok"]);
    }

    async fn dynamic(&mut self) {
        let function = format!("soak_tool_{}", self.name);
        let answer = self
            .execute(
                &format!(
                    "def {function}(x: int) -> int:\n    \"\"\"Triples x.\"\"\"\n    return x * 3"
                ),
                json!({}),
            )
            .await;
        if !self.expect("define tool", &answer, &["ok"]) {
            return;
        }
        let registered = self
            .call("register_tool", self.with_kernel(json!({"name": function})))
            .await;
        if !self.expect("register_tool", &registered, &["ok"]) {
            return;
        }
        let called = self.call(&function, json!({"x": 5})).await;
        if self.expect("dynamic tool call", &called, &["ok"]) {
            let structured = &called.expect("answered").structured;
            if !structured.to_string().contains("15") {
                self.fail(format!("dynamic tool answered {structured}"));
            }
        }
    }

    async fn notebook(&mut self) {
        let n = self.next_serial();
        let inserted = self
            .call(
                "notebook_edit",
                json!({"path": self.notebook, "action": "insert", "source": format!("z = {n}\nz")}),
            )
            .await;
        if !self.expect("notebook insert", &inserted, &["ok"]) {
            return;
        }
        let structured = &inserted.expect("answered").structured;
        let Some(id) = structured["cell"]["id"].as_str() else {
            self.fail(format!("insert without a cell id: {structured}"));
            return;
        };
        let id = id.to_owned();
        self.inserted.push(id.clone());
        if self.rng.below(3) == 0 {
            let ran = self
                .call(
                    "notebook_execute_cell",
                    json!({"path": self.notebook, "cell_id": id}),
                )
                .await;
            if self.expect("notebook_execute_cell", &ran, &["ok"]) {
                let value = &ran.expect("answered").structured["result"]["text/plain"];
                if value != &json!(n.to_string()) {
                    self.fail(format!("notebook cell {n} answered {value}"));
                }
            }
        }
    }

    async fn fault(&mut self) {
        // Background jobs first: a fault must land on the call made for it.
        if !self.trivial().await {
            return;
        }
        let kind = self.pick_fault();
        let began = Instant::now();
        with(&self.stats, |stats| {
            *stats.faults.entry(kind).or_default() += 1
        });
        self.faults += 1;
        match kind {
            "sigkill" => self.sigkill_fault().await,
            "sigstop" => self.sigstop_fault().await,
            "memory" => {
                let answer = self
                    .execute(
                        "import time\nb = bytearray(600 * 2**20)\ntime.sleep(15)",
                        json!({}),
                    )
                    .await;
                self.expect("memory blow-up", &answer, &["out_of_memory"]);
            }
            "interrupt" => self.interrupt_fault().await,
            "cancel" if self.tasks && self.rng.below(2) == 0 => self.cancel_task().await,
            "cancel" => self.cancel_fault().await,
            "disconnect" => {
                if !self.disconnect_fault().await {
                    return;
                }
            }
            _ => {
                let answer = self
                    .call("kernel_restart", self.with_kernel(json!({})))
                    .await;
                self.expect("kernel_restart", &answer, &["ok"]);
            }
        }
        let faulted = began.elapsed();
        // The lane goes on, on a usable kernel.
        self.trivial().await;
        if began.elapsed() > Duration::from_secs(30) {
            println!(
                "{}: fault {kind} took {:.1} s, {:.1} s more to the next answer",
                self.name,
                faulted.as_secs_f64(),
                (began.elapsed() - faulted).as_secs_f64()
            );
        }
    }

    /// The next fault, at random among those the lane's transport allows (a client dropped
    /// mid-call is a second one, which only the HTTP server can take).
    fn pick_fault(&mut self) -> &'static str {
        let kinds: &[&'static str] = match self.via {
            Via::Http { .. } => &[
                "sigkill",
                "sigstop",
                "memory",
                "interrupt",
                "cancel",
                "disconnect",
                "restart",
            ],
            Via::Stdio => &[
                "sigkill",
                "sigstop",
                "memory",
                "interrupt",
                "cancel",
                "restart",
            ],
        };
        kinds[self.rng.below(kinds.len() as u64) as usize]
    }

    /// SIGKILL of the kernel while it runs a cell: the call answers `kernel_died` and says the
    /// namespace was reset.
    async fn sigkill_fault(&self) {
        let running = self.running("import time\ntime.sleep(15)", json!({}));
        let killer = async {
            if self.wait_active().await {
                if let Some(pid) = self.kernel_pid().await {
                    signal(pid, "KILL");
                }
            }
        };
        let (answer, ()) = tokio::join!(running, killer);
        self.expect("execute under SIGKILL", &answer, &["kernel_died"]);
        if let Some(answer) = &answer {
            // Reset, or back from the session's checkpoint (never preserved: it was killed).
            let namespace = &answer.structured["runtime"]["namespace"];
            if namespace != "reset" && namespace != "restored" {
                self.fail(format!(
                    "after SIGKILL the namespace is neither reset nor restored: {}",
                    answer.structured["runtime"]
                ));
            }
        }
    }

    /// SIGSTOP of the kernel while it runs a cell with a short deadline: the call ends in a
    /// timeout or a replacement (a stopped kernel is continued afterwards).
    async fn sigstop_fault(&self) {
        // Stopped while it runs the cell, so the interrupt is delivered at the deadline
        // and the grace ends in a replacement. (Stopped before it begins a request, the
        // interrupt would wait up to the kernel startup bound: by design, see run.rs.)
        let running = self.running("import time\ntime.sleep(15)", json!({"timeout_seconds": 3}));
        let stopper = async {
            if self.wait_active().await {
                if let Some(pid) = self.kernel_pid().await {
                    signal(pid, "STOP");
                    return Some(pid);
                }
            }
            None
        };
        let (answer, stopped) = tokio::join!(running, stopper);
        if let Some(pid) = stopped {
            signal(pid, "CONT");
        }
        self.expect(
            "execute on a stopped kernel",
            &answer,
            &["operation_timeout", "kernel_died"],
        );
    }

    /// `interrupt` while a cell runs: the cell ends with an error or as cancelled.
    async fn interrupt_fault(&self) {
        let running = self.running("import time\ntime.sleep(15)", json!({}));
        let interrupter = async {
            if self.wait_active().await {
                let answer = self.call("interrupt", self.with_kernel(json!({}))).await;
                self.expect("interrupt", &answer, &["ok"]);
            }
        };
        let (answer, ()) = tokio::join!(running, interrupter);
        self.expect(
            "interrupted execute",
            &answer,
            &["execution_error", "operation_cancelled"],
        );
    }

    /// An MCP cancellation: the call's future is dropped once the kernel runs it. The
    /// call's answer, if one comes first, is a failure.
    async fn cancel_fault(&self) {
        // call_tool sends notifications/cancelled when its future is dropped.
        let arguments = self.with_kernel(json!({"code": "import time\ntime.sleep(10)"}));
        let request = CallToolRequestParams::new("execute")
            .with_arguments(arguments.as_object().cloned().unwrap_or_default());
        with(&self.stats, |stats| {
            *stats.calls.entry("execute".to_owned()).or_default() += 1
        });
        self.executions.fetch_add(1, Ordering::Relaxed);
        let peer = self.peer.clone();
        let cancelled = tokio::select! {
            answered = peer.call_tool(request) => Some(answered),
            _ = self.wait_active() => None,
        };
        if let Some(answered) = cancelled {
            self.fail(format!(
                "the call to cancel ended first: {:?}",
                answered.map(|result| answer_of(result).outcome())
            ));
        }
    }

    /// A second HTTP client that drops mid-call. `false` when it could not connect (a
    /// failure recorded here), and the lane skips its after-fault check.
    async fn disconnect_fault(&self) -> bool {
        let Via::Http { url, token } = self.via.clone() else {
            return false;
        };
        let client = match connect_http(&url, &token, None).await {
            Ok(client) => client,
            Err(error) => {
                self.fail(format!("a second HTTP client did not connect: {error:#}"));
                return false;
            }
        };
        let peer = client.peer().clone();
        let request = CallToolRequestParams::new("execute").with_arguments(
            self.with_kernel(json!({"code": "import time\ntime.sleep(5)"}))
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        self.executions.fetch_add(1, Ordering::Relaxed);
        let call = tokio::spawn(async move { peer.call_tool(request).await });
        self.wait_active().await;
        call.abort();
        drop(client);
        true
    }

    /// Starts `code` in the background; its execution id (a tasks lane's task id).
    async fn start_background(&mut self, code: &str) -> Option<String> {
        let arguments = self.with_kernel(json!({"code": code, "background": true}));
        self.executions.fetch_add(1, Ordering::Relaxed);
        if !self.tasks {
            let answer = self.call("execute", arguments).await;
            if !self.expect("background job", &answer, &["pending", "ok"]) {
                return None;
            }
            let structured = &answer.expect("answered").structured;
            let id = structured["execution_id"].as_str().map(str::to_owned);
            if id.is_none() {
                self.fail(format!("background job without an id: {structured}"));
            }
            return id;
        }
        with(&self.stats, |stats| {
            *stats.calls.entry("execute".to_owned()).or_default() += 1
        });
        let request = CallToolRequestParams::new("execute")
            .with_arguments(arguments.as_object().cloned().unwrap_or_default());
        let answered = tokio::time::timeout(CALL_TIMEOUT, self.peer.call_tool_once(request)).await;
        let outcome = match answered {
            Err(_) => {
                self.fail(format!(
                    "background task never answered (within {CALL_TIMEOUT:?})"
                ));
                return None;
            }
            Ok(Err(error)) => {
                self.fail(format!("background task: protocol error {error}"));
                return None;
            }
            Ok(Ok(CallToolResponse::Task(created))) => {
                let id = created.task.task_id;
                self.task_ids.push(id.clone());
                Ok(id)
            }
            Ok(Ok(CallToolResponse::Complete(result))) => Err(answer_of(result).outcome()),
            Ok(Ok(_)) => Err("input required".to_owned()),
        };
        let status = match &outcome {
            Ok(_) => "task".to_owned(),
            Err(outcome) => outcome.clone(),
        };
        with(&self.stats, |stats| {
            *stats
                .statuses
                .entry(format!("execute: {status}"))
                .or_default() += 1
        });
        match outcome {
            Ok(id) => Some(id),
            Err(outcome) => {
                self.fail(format!(
                    "a tasks client's background execute answered {outcome}, not a task"
                ));
                None
            }
        }
    }

    /// `tasks/get` of `id` until it is no longer working (at most the call bound): its last
    /// answer, `None` (recorded as a failure) if none came.
    async fn task_end(&self, id: &str) -> Option<GetTaskResult> {
        let until = Instant::now() + CALL_TIMEOUT;
        loop {
            let polled = tokio::time::timeout(
                CALL_TIMEOUT,
                self.peer.get_task(GetTaskParams::new(id.to_owned())),
            )
            .await;
            match polled {
                Ok(Ok(got)) if got.task.task.status != TaskStatus::Working => return Some(got),
                Ok(Ok(_)) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Ok(Ok(_)) => {
                    self.fail(format!("task {id} still working after {CALL_TIMEOUT:?}"));
                    return None;
                }
                Ok(Err(error)) => {
                    self.fail(format!("tasks/get of {id}: {error}"));
                    return None;
                }
                Err(_) => {
                    self.fail(format!("tasks/get of {id} never answered"));
                    return None;
                }
            }
        }
    }

    /// A running background task cancelled with `tasks/cancel`: it ends `cancelled`.
    async fn cancel_task(&mut self) {
        let Some(id) = self.start_background("import time\ntime.sleep(10)").await else {
            return;
        };
        if !self.wait_active().await {
            return;
        }
        let cancelled = tokio::time::timeout(
            CALL_TIMEOUT,
            self.peer.cancel_task(CancelTaskParams::new(id.clone())),
        )
        .await;
        if !matches!(cancelled, Ok(Ok(()))) {
            self.fail(format!("tasks/cancel of {id} failed: {cancelled:?}"));
            return;
        }
        if let Some(ended) = self.task_end(&id).await {
            if ended.task.task.status == TaskStatus::Cancelled {
                with(&self.stats, |stats| {
                    *stats
                        .tasks
                        .entry("task cancelled by tasks/cancel")
                        .or_default() += 1
                });
            } else {
                self.fail(format!(
                    "a cancelled task ended {:?}",
                    ended.task.task.status
                ));
            }
        }
    }

    /// A background job's task (on a tasks lane, while the server still remembers it): it
    /// ends `completed` with the job's output, or `failed` once its kernel forgot it.
    async fn read_task(&self, job: &Job, within_window: bool) {
        let remembered = self.task_ids.len().saturating_sub(MAX_TASKS);
        if !self.task_ids[remembered..].contains(&job.execution_id) {
            return; // past the bound: see `check_task_bound`
        }
        let Some(ended) = self.task_end(&job.execution_id).await else {
            return;
        };
        let kind = match (&ended.task.task.status, &ended.task.payload) {
            (TaskStatus::Completed, TaskPayload::Completed { result })
                if result["structuredContent"]["stdout"]
                    .as_str()
                    .is_some_and(|stdout| stdout.contains(&job.marker)) =>
            {
                "task completed with its output"
            }
            (TaskStatus::Failed, _) if !within_window => "task failed: its execution aged out",
            (status, payload) => {
                let detail: String = format!("{payload:?}").chars().take(300).collect();
                self.fail(format!(
                    "task {} ({}) ended {status:?}: {detail}",
                    job.execution_id, job.marker
                ));
                return;
            }
        };
        with(&self.stats, |stats| {
            *stats.tasks.entry(kind).or_default() += 1
        });
    }

    /// The server remembers exactly the latest `MAX_TASKS` of the lane's tasks: `tasks/get`
    /// answers those and calls every older one unknown.
    async fn check_task_bound(&self) {
        let remembered = self.task_ids.len().saturating_sub(MAX_TASKS);
        for (index, id) in self.task_ids.iter().enumerate() {
            let got = tokio::time::timeout(
                CALL_TIMEOUT,
                self.peer.get_task(GetTaskParams::new(id.clone())),
            )
            .await;
            let kind = match (index >= remembered, got) {
                (true, Ok(Ok(_))) => "task remembered (within the bound)",
                (false, Ok(Err(error))) if error.to_string().contains("unknown task") => {
                    "task forgotten (past the bound)"
                }
                (expected, got) => {
                    self.fail(format!(
                        "task {index} of {} (remembered: {expected}) answered {got:?}",
                        self.task_ids.len()
                    ));
                    continue;
                }
            };
            with(&self.stats, |stats| {
                *stats.tasks.entry(kind).or_default() += 1
            });
        }
    }

    fn running(
        &self,
        code: &str,
        extra: Value,
    ) -> impl std::future::Future<Output = Option<Answer>> + '_ {
        let code = code.to_owned();
        async move { self.execute(&code, extra).await }
    }

    /// Every background job's output, read back (and a tasks lane's task bound checked).
    async fn drain(&mut self) {
        if self.tasks {
            // Reading makes no task, so this holds for the reads below as well.
            self.check_task_bound().await;
        }
        let jobs = std::mem::take(&mut self.jobs);
        for job in jobs {
            let answer = self
                .call(
                    "get_output",
                    self.with_kernel(json!({"execution_id": job.execution_id, "wait_seconds": 30})),
                )
                .await;
            let Some(answer) = answer else { continue };
            let text = answer.structured.to_string();
            let within_window =
                self.executions.load(Ordering::Relaxed) - job.executions_before <= RECORD_WINDOW;
            if self.tasks {
                self.read_task(&job, within_window).await;
            }
            if !within_window {
                // Aged out, or not yet: either answer is true.
                let outcome = answer.outcome();
                let kind = if outcome == "ok" && text.contains(&job.marker) {
                    "background job read back (past the window)"
                } else if outcome == "invalid_arguments" {
                    "background job aged out"
                } else {
                    self.fail(format!("background job past the window answered {outcome}"));
                    continue;
                };
                with(&self.stats, |stats| {
                    *stats.jobs.entry(kind).or_default() += 1
                });
            } else {
                if answer.outcome() != "ok" || !text.contains(&job.marker) {
                    let detail: String = text.chars().take(300).collect();
                    self.fail(format!(
                        "background job {} ({}) read back as {}: {detail}",
                        job.execution_id,
                        job.marker,
                        answer.outcome()
                    ));
                } else {
                    with(&self.stats, |stats| {
                        *stats.jobs.entry("background job read back").or_default() += 1
                    });
                }
            }
        }
    }
}

/// Displays a 64x64 PNG of random pixels, made without Pillow.
const IMAGE: &str = r#"import os, struct, zlib
from IPython.display import Image, display
def _chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
_rows = b''.join(b'\x00' + os.urandom(64 * 3) for _ in range(64))
_png = (b'\x89PNG\r\n\x1a\n' + _chunk(b'IHDR', struct.pack('>IIBBBBB', 64, 64, 8, 2, 0, 0, 0))
        + _chunk(b'IDAT', zlib.compress(_rows)) + _chunk(b'IEND', b''))
display(Image(data=_png))"#;

fn signal(pid: u32, name: &str) {
    let _ = std::process::Command::new("kill")
        .args(["-s", name, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// A process's start time (field 22 of /proc/<pid>/stat), while it lives and is no zombie.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

fn alive(kernel: (u32, u64)) -> bool {
    start_time(kernel.0) == Some(kernel.1)
}

/// Notes the kernel and spare pids in a `runtime_status` answer.
fn note_kernels(stats: &Shared, status: &Value) -> Vec<(u32, u64)> {
    let mut pids: Vec<u64> = status["kernel"]["pid"].as_u64().into_iter().collect();
    if let Some(spares) = status["spare_kernel_pids"].as_array() {
        pids.extend(spares.iter().filter_map(Value::as_u64));
    }
    let kernels: Vec<(u32, u64)> = pids
        .into_iter()
        .filter_map(|pid| Some((pid as u32, start_time(pid as u32)?)))
        .collect();
    with(stats, |stats| stats.kernels.extend(kernels.iter().copied()));
    kernels
}

async fn connect_http(
    url: &str,
    token: &str,
    ledger: Option<Arc<Mutex<Ledger>>>,
) -> anyhow::Result<RunningService<RoleClient, ClientConfig>> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token.to_owned());
    let transport = StreamableHttpClientTransport::from_config(config);
    let initialize = async {
        match ledger {
            Some(ledger) => {
                ClientConfig::default()
                    .serve_with_lifecycle(
                        Counted {
                            inner: transport,
                            ledger,
                        },
                        ClientLifecycleMode::Initialize,
                    )
                    .await
            }
            None => {
                ClientConfig::default()
                    .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
                    .await
            }
        }
    };
    Ok(tokio::time::timeout(Duration::from_secs(60), initialize)
        .await
        .context("initialize timed out")??)
}

/// One sample of a server process.
#[derive(Clone, Copy)]
struct Sample {
    minutes: f64,
    rss_kib: f64,
    fds: f64,
    threads: f64,
}

fn sample(pid: u32, minutes: f64) -> Option<Sample> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    let threads = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))?
        .trim()
        .parse::<f64>()
        .ok()?;
    Some(Sample {
        minutes,
        rss_kib: proc_status_kib(pid, "VmRSS:") as f64,
        fds: fds as f64,
        threads,
    })
}

/// Least-squares slope of `value` over `minutes`.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let covariance: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let variance: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if variance == 0.0 {
        0.0
    } else {
        covariance / variance
    }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Where the server given `tmp` as its temp directory makes its private directory (its
/// `XDG_RUNTIME_DIR`): a sibling, since one inside the temp directory is passed over.
fn private_base(tmp: &Path) -> PathBuf {
    tmp.with_file_name("run")
}

/// Bytes under each `ipython-mcp-spool-*` directory of the server given `tmp`, in its private
/// directory or (without one) in `tmp`.
fn spool_bytes(tmp: &Path) -> HashMap<PathBuf, u64> {
    // The session's namespace checkpoint sits in its spool directory, under a bound of its own.
    fn size(path: &Path) -> u64 {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => std::fs::read_dir(path)
                .map(|entries| {
                    entries
                        .flatten()
                        .filter(|entry| entry.file_name() != "checkpoint")
                        .map(|entry| size(&entry.path()))
                        .sum()
                })
                .unwrap_or(0),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        }
    }
    fn spools(dir: &Path, found: &mut HashMap<PathBuf, u64>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                continue;
            }
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with("ipython-mcp-spool-")
            {
                found.insert(path.clone(), size(&path));
            } else {
                spools(&path, found);
            }
        }
    }
    let mut found = HashMap::new();
    spools(tmp, &mut found);
    spools(&private_base(tmp), &mut found);
    found
}

/// Temporary files the server's atomic writes might leave: `.ipython-mcp-*.tmp` and
/// `.ipython-mcp-tmp-*`, anywhere under `dir`.
fn leftover_temporaries(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if (name.starts_with(".ipython-mcp-") && name.ends_with(".tmp"))
            || name.starts_with(".ipython-mcp-tmp-")
        {
            found.push(path.clone());
        }
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            found.extend(leftover_temporaries(&path));
        }
    }
    found
}

/// Cell ids of a notebook file, or why it does not parse.
fn notebook_cell_ids(path: &Path) -> Result<HashSet<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|error| error.to_string())?;
    let notebook: Value = serde_json::from_str(&text).map_err(|error| error.to_string())?;
    let cells = notebook["cells"].as_array().ok_or("no cells array")?;
    Ok(cells
        .iter()
        .filter_map(|cell| cell["id"].as_str().map(str::to_owned))
        .collect())
}

/// The managed environment the tests provision, when this binary runs from their target dir.
fn default_cache_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let target = exe.parent()?.parent()?;
    let cache = target.join("tmp").join("ipython-mcp-cache");
    cache.is_dir().then_some(cache)
}

pub(crate) async fn soak(server_binary: &Path, seconds: u64, seed: u64) -> anyhow::Result<()> {
    // The tests' managed environment when none is configured (the servers get its Python).
    let cache_dir = match std::env::var_os(ipython_mcp_config::CACHE_DIR.env) {
        Some(_) => None,
        None => default_cache_dir(),
    };
    let python = resolve_python_in(cache_dir).await?;
    println!(
        "ipython-mcp soak: {seconds} s of load, seed {seed}, {HTTP_LANES} HTTP lanes and {STDIO_LANES} stdio lane; python {}",
        python.display()
    );
    let whole = Duration::from_secs(seconds) + Duration::from_secs(900);
    tokio::time::timeout(whole, run(server_binary, &python, seconds, seed))
        .await
        .with_context(|| format!("the soak did not finish within {whole:?}"))?
}

async fn run(server_binary: &Path, python: &Path, seconds: u64, seed: u64) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let workspace = dir.path().join("workspace");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&workspace)?;
    std::fs::create_dir(&tmp)?;
    std::fs::create_dir(private_base(&tmp))?;
    let token = random_token()?;
    let env = server_env(python, &workspace, &tmp, &token);
    let stats: Shared = Arc::default();

    let mut http = start(server_binary, &env).await?;
    let (mut stdio_child, stdio_pid, stdio_service, stdio_ledger) =
        start_stdio(server_binary, &env).await?;

    let mut ledgers = vec![stdio_ledger];
    let (mut lanes, http_clients) = open_lanes(
        &http.url,
        &token,
        stdio_service.peer(),
        seed,
        &stats,
        &mut ledgers,
    )
    .await?;
    prepare_lanes(&mut lanes, python).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let notebooks: Vec<PathBuf> = lanes
        .iter()
        .map(|lane| workspace.join(&lane.notebook))
        .collect();
    let monitor = spawn_monitor(
        Arc::clone(&stop),
        Arc::clone(&stats),
        tmp.clone(),
        notebooks,
        [http.pid, stdio_pid],
        started,
    );

    let lanes = run_load(lanes, seconds).await?;
    let load_seconds = started.elapsed().as_secs_f64();
    let seen = check_replaced_kernels(&lanes, &stats).await;

    stop.store(true, Ordering::Relaxed);
    let (samples, spool_max) = monitor.await?;
    let spool_end: u64 = spool_bytes(&tmp).values().sum();

    // Stop both servers; every kernel they had must go with them.
    let replies = stop_servers(
        http_clients,
        stdio_service,
        &ledgers,
        &mut http,
        &mut stdio_child,
    )
    .await;
    let survivors = wait_gone(&seen, Duration::from_secs(30)).await;
    let ending = Ending {
        load_seconds,
        replies,
        seen,
        survivors,
        spool_max,
        spool_end,
        spool_left: spool_bytes(&tmp),
        temporaries: leftover_temporaries(&workspace),
    };

    let mut failures = with(&stats, |stats| std::mem::take(&mut stats.failures));
    check_notebooks(&lanes, &workspace, &mut failures);
    ending.check_leftovers(&mut failures);
    let trends = check_growth(&samples, load_seconds, &mut failures);

    let stats = with(&stats, std::mem::take);
    print_summary(seconds, &stats, &ending, &trends);
    if !failures.is_empty() {
        println!();
        println!("{} failures:", failures.len());
        for failure in failures.iter().take(40) {
            println!("  {failure}");
        }
        bail!("the soak failed ({} failures, above)", failures.len());
    }
    println!("soak passed");
    Ok(())
}

/// Both servers' environment: quiet logs, the soak's Python and workspace, every output and
/// its spool kept, small bounds (memory, deadlines, spool, remembered tasks) that the faults
/// and the load cross, the temporary files under `tmp`, and the HTTP server's token.
fn server_env(
    python: &Path,
    workspace: &Path,
    tmp: &Path,
    token: &str,
) -> Vec<(&'static str, String)> {
    vec![
        // Quiet unless the caller asks for the servers' logs (`IPYTHON_MCP_LOG=debug`).
        (
            ipython_mcp_config::LOG.env,
            std::env::var(ipython_mcp_config::LOG.env).unwrap_or_else(|_| "error".to_owned()),
        ),
        (ipython_mcp_config::PYTHON.env, python.display().to_string()),
        (
            ipython_mcp_config::WORKSPACE_ROOT.env,
            workspace.display().to_string(),
        ),
        (
            ipython_mcp_config::STRUCTURED_OUTPUT.env,
            "always".to_owned(),
        ),
        (
            ipython_mcp_config::KERNEL_MEMORY_LIMIT.env,
            MEMORY_LIMIT.to_owned(),
        ),
        (
            ipython_mcp_config::KERNEL_MEMORY_ENFORCEMENT.env,
            "watchdog".to_owned(),
        ),
        (
            ipython_mcp_config::OPERATION_TIMEOUT.env,
            OPERATION_TIMEOUT_SECONDS.to_string(),
        ),
        (
            ipython_mcp_config::INTERRUPTION_GRACE.env,
            GRACE_SECONDS.to_string(),
        ),
        (
            ipython_mcp_config::WORKER_STARTUP_TIMEOUT.env,
            STARTUP_SECONDS.to_string(),
        ),
        (ipython_mcp_config::QUEUE_WAIT_TIMEOUT.env, "120".to_owned()),
        (
            ipython_mcp_config::MAX_SPOOL_BYTES.env,
            SPOOL_BYTES.to_string(),
        ),
        (
            ipython_mcp_config::MAX_SPOOL_EXECUTION_BYTES.env,
            SPOOL_EXECUTION_BYTES.to_string(),
        ),
        (ipython_mcp_config::MAX_KERNELS.env, "16".to_owned()),
        (ipython_mcp_config::MAX_TASKS.env, MAX_TASKS.to_string()),
        ("TMPDIR", tmp.display().to_string()),
        // The server's private directory (spools) beside it, where `spool_bytes` looks.
        ("XDG_RUNTIME_DIR", private_base(tmp).display().to_string()),
        (ipython_mcp_config::HTTP_TOKEN.env, token.to_owned()),
    ]
}

/// Connects the HTTP lanes' clients, each counting its JSON-RPC ids in a ledger of its own
/// (added to `ledgers`), and makes every lane with a schedule drawn from `seed`: the lanes,
/// and the HTTP clients to close at the end.
async fn open_lanes(
    url: &str,
    token: &str,
    stdio_peer: &Peer<RoleClient>,
    seed: u64,
    stats: &Shared,
    ledgers: &mut Vec<Arc<Mutex<Ledger>>>,
) -> anyhow::Result<(Vec<Lane>, Vec<RunningService<RoleClient, ClientConfig>>)> {
    let mut http_clients = Vec::new();
    let mut lanes = Vec::new();
    let mut rng = Rng::new(seed);
    for index in 0..HTTP_LANES {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let client = connect_http(url, token, Some(Arc::clone(&ledger))).await?;
        ledgers.push(ledger);
        lanes.push(Lane::new(
            format!("http{index}"),
            client.peer().clone(),
            (index > 0).then(|| format!("k{index}")),
            Via::Http {
                url: url.to_owned(),
                token: token.to_owned(),
            },
            Rng::new(rng.next()),
            stats,
            false,
        ));
        http_clients.push(client);
    }
    for index in 0..STDIO_LANES {
        lanes.push(Lane::new(
            format!("stdio{index}"),
            stdio_peer.clone(),
            (index > 0).then(|| format!("k{index}")),
            Via::Stdio,
            Rng::new(rng.next()),
            stats,
            // The stdio server's only client: every task it remembers is this lane's.
            true,
        ));
    }
    Ok((lanes, http_clients))
}

/// Before the clock starts: every lane's kernel started and notebook created, then on each a
/// first execute that must succeed (and on a tasks lane, more tasks than the server remembers).
async fn prepare_lanes(lanes: &mut [Lane], python: &Path) -> anyhow::Result<()> {
    // Kernels and notebooks first, for every lane.
    for lane in lanes.iter() {
        let status = lane
            .call("runtime_status", json!({}))
            .await
            .context("runtime_status")?;
        let spec = status.structured["kernel"]["python"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| python.display().to_string());
        if let Some(kernel) = &lane.kernel {
            let started = lane
                .call("kernel_start", json!({"spec": spec, "kernel": kernel}))
                .await;
            if !lane.expect("kernel_start", &started, &["ok"]) {
                bail!("{}: kernel_start failed", lane.name);
            }
        }
        let created = lane
            .call("notebook_create", json!({"path": lane.notebook}))
            .await;
        if !lane.expect("notebook_create", &created, &["ok"]) {
            bail!("{}: notebook_create failed", lane.name);
        }
    }
    for lane in lanes.iter_mut() {
        if !lane.trivial().await {
            bail!("{}: the first execute failed", lane.name);
        }
        // More tasks than the server remembers before the clock starts, so that even a short
        // run sees the oldest forgotten and the latest answered.
        if lane.tasks {
            for _ in 0..=MAX_TASKS {
                let n = lane.next_serial();
                let marker = format!("job-{}-{n}", lane.name);
                if let Some(execution_id) =
                    lane.start_background(&format!("print('{marker}')")).await
                {
                    lane.jobs.push(Job {
                        execution_id,
                        marker,
                        executions_before: lane.executions.load(Ordering::Relaxed),
                    });
                }
            }
        }
    }
    Ok(())
}

/// What the monitor gathered: each server's samples, and each spool directory's peak size.
type Monitored = (Vec<Vec<Sample>>, HashMap<PathBuf, u64>);

/// The monitor: every second until `stop`, a sample of each server in `pids` from /proc, the
/// size of every spool directory under `tmp`, and a parse of every notebook file (a failure
/// if one does not parse mid-run).
fn spawn_monitor(
    stop: Arc<AtomicBool>,
    stats: Shared,
    tmp: PathBuf,
    notebooks: Vec<PathBuf>,
    pids: [u32; 2],
    started: Instant,
) -> tokio::task::JoinHandle<Monitored> {
    tokio::spawn(async move {
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); pids.len()];
        let mut spool_max: HashMap<PathBuf, u64> = HashMap::new();
        while !stop.load(Ordering::Relaxed) {
            let minutes = started.elapsed().as_secs_f64() / 60.0;
            for (index, pid) in pids.iter().enumerate() {
                if let Some(sample) = sample(*pid, minutes) {
                    samples[index].push(sample);
                }
            }
            for (path, bytes) in spool_bytes(&tmp) {
                let max = spool_max.entry(path).or_default();
                *max = (*max).max(bytes);
            }
            for path in &notebooks {
                if let Err(error) = notebook_cell_ids(path) {
                    with(&stats, |stats| {
                        stats
                            .failures
                            .push(format!("{} did not parse mid-run: {error}", path.display()))
                    });
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        (samples, spool_max)
    })
}

/// The load: every lane steps through its schedule for `seconds`, each in a task of its own,
/// then drains. The lanes, once all are done.
async fn run_load(lanes: Vec<Lane>, seconds: u64) -> anyhow::Result<Vec<Lane>> {
    let load_end = Instant::now() + Duration::from_secs(seconds);
    let mut running = tokio::task::JoinSet::new();
    for mut lane in lanes {
        running.spawn(async move {
            while Instant::now() < load_end {
                lane.step().await;
            }
            let stepped = load_end.elapsed().as_secs_f64();
            lane.drain().await;
            println!(
                "{}: last step done {stepped:.1} s after the load, drained {:.1} s after",
                lane.name,
                load_end.elapsed().as_secs_f64()
            );
            lane
        });
    }
    let mut lanes = Vec::new();
    while let Some(joined) = running.join_next().await {
        lanes.push(joined?);
    }
    Ok(lanes)
}

/// Replaced kernels must be gone while their sessions go on: only current ones may live.
/// Records each replaced kernel still running as a failure; every kernel seen in the run.
async fn check_replaced_kernels(lanes: &[Lane], stats: &Shared) -> Vec<(u32, u64)> {
    let mut current = HashSet::new();
    for lane in lanes {
        if let Some(status) = lane
            .call("runtime_status", lane.with_kernel(json!({})))
            .await
        {
            current.extend(note_kernels(stats, &status.structured));
        }
        if let Some(status) = lane
            .call("runtime_status", json!({"notebook": lane.notebook}))
            .await
        {
            current.extend(note_kernels(stats, &status.structured));
        }
    }
    let seen: Vec<(u32, u64)> = with(stats, |stats| stats.kernels.iter().copied().collect());
    let replaced: Vec<(u32, u64)> = seen
        .iter()
        .copied()
        .filter(|kernel| !current.contains(kernel))
        .collect();
    let lingering = wait_gone(&replaced, Duration::from_secs(30)).await;
    for kernel in &lingering {
        with(stats, |stats| {
            stats
                .failures
                .push(format!("replaced kernel {} still runs", kernel.0))
        });
    }
    seen
}

/// Closes every client, counts the replies their ledgers saw, then stops both servers, each
/// with a bounded wait.
async fn stop_servers(
    http_clients: Vec<RunningService<RoleClient, ClientConfig>>,
    stdio_service: RunningService<RoleClient, ClientConfig>,
    ledgers: &[Arc<Mutex<Ledger>>],
    http: &mut HttpServer,
    stdio_child: &mut tokio::process::Child,
) -> Replies {
    let mut replies = Replies::default();
    for client in http_clients {
        let _ = tokio::time::timeout(Duration::from_secs(10), client.cancel()).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), stdio_service.cancel()).await;
    for ledger in ledgers {
        replies += ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .replies();
    }
    stop_server(http).await;
    let _ = tokio::time::timeout(Duration::from_secs(30), stdio_child.wait()).await;
    replies
}

/// What the soak found once the load ended and both servers stopped.
struct Ending {
    /// Seconds from the start of the clock to every lane drained.
    load_seconds: f64,
    replies: Replies,
    /// Every kernel process seen in the run.
    seen: Vec<(u32, u64)>,
    /// Kernel processes still alive after their server stopped.
    survivors: Vec<(u32, u64)>,
    /// Each spool directory's peak size during the run.
    spool_max: HashMap<PathBuf, u64>,
    /// Spool bytes when the load ended.
    spool_end: u64,
    /// Spool directories still there after the servers stopped.
    spool_left: HashMap<PathBuf, u64>,
    /// Temporary files left in the workspace.
    temporaries: Vec<PathBuf>,
}

impl Ending {
    /// The largest any one spool directory grew.
    fn spool_peak(&self) -> u64 {
        self.spool_max.values().copied().max().unwrap_or(0)
    }

    /// Fails on anything the run left behind or lost: unanswered or duplicated replies,
    /// kernels, spool directories and temporary files outliving the servers, and a spool past
    /// its bound.
    fn check_leftovers(&self, failures: &mut Vec<String>) {
        let replies = &self.replies;
        if replies.lost > 0 || replies.duplicated > 0 {
            failures.push(format!(
                "{} of {} requests unanswered, {} answers duplicated or unsolicited",
                replies.lost, replies.requests, replies.duplicated
            ));
        }
        for kernel in &self.survivors {
            failures.push(format!("kernel {} outlived its server", kernel.0));
        }
        if !self.spool_left.is_empty() {
            failures.push(format!(
                "{} spool directories left behind",
                self.spool_left.len()
            ));
        }
        for path in &self.temporaries {
            failures.push(format!("temporary file left behind: {}", path.display()));
        }
        let spool_peak = self.spool_peak();
        if spool_peak > SPOOL_BOUND {
            failures.push(format!(
                "a spool held {spool_peak} bytes (bound {SPOOL_BOUND})"
            ));
        }
    }
}

/// Notebook files: parse, and hold every cell the agent was told was inserted.
fn check_notebooks(lanes: &[Lane], workspace: &Path, failures: &mut Vec<String>) {
    for lane in lanes {
        match notebook_cell_ids(&workspace.join(&lane.notebook)) {
            Ok(ids) => {
                let missing = lane.inserted.iter().filter(|id| !ids.contains(*id)).count();
                if missing > 0 {
                    failures.push(format!(
                        "{} lacks {missing} of {} acknowledged cells",
                        lane.notebook,
                        lane.inserted.len()
                    ));
                }
            }
            Err(error) => failures.push(format!("{} does not parse: {error}", lane.notebook)),
        }
    }
}

/// A server's resource trend over the steady part of the run.
struct Trend {
    name: &'static str,
    /// Least-squares slopes per minute.
    rss: f64,
    fds: f64,
    threads: f64,
    /// Samples in the steady part.
    samples: usize,
    /// The last sample.
    end: Option<Sample>,
}

/// Growth, after a warm-up of a fifth of the run (at least 10 s): gross growth of a server's
/// open files, threads or RSS is a failure. Each server's trend, for the report.
fn check_growth(
    samples: &[Vec<Sample>],
    load_seconds: f64,
    failures: &mut Vec<String>,
) -> Vec<Trend> {
    let warm = (load_seconds / 5.0).max(10.0) / 60.0;
    let mut trends = Vec::new();
    for (name, samples) in ["http", "stdio"].into_iter().zip(samples) {
        let steady: Vec<Sample> = samples
            .iter()
            .copied()
            .filter(|sample| sample.minutes >= warm)
            .collect();
        let series = |value: fn(&Sample) -> f64| -> Vec<(f64, f64)> {
            steady.iter().map(|s| (s.minutes, value(s))).collect()
        };
        let rss = slope(&series(|s| s.rss_kib));
        let fds = slope(&series(|s| s.fds));
        let threads = slope(&series(|s| s.threads));
        let head = steady.len().min(10);
        let first = |value: fn(&Sample) -> f64| {
            median(&mut steady[..head].iter().map(value).collect::<Vec<_>>())
        };
        let last = |value: fn(&Sample) -> f64| {
            median(
                &mut steady[steady.len() - head..]
                    .iter()
                    .map(value)
                    .collect::<Vec<_>>(),
            )
        };
        if head > 0 {
            let fd_growth = last(|s| s.fds) - first(|s| s.fds);
            if fd_growth > MAX_FD_GROWTH {
                failures.push(format!(
                    "{name} server: open files grew by {fd_growth:.0} (more than {MAX_FD_GROWTH})"
                ));
            }
            let (threads_first, threads_last) = (first(|s| s.threads), last(|s| s.threads));
            if threads_last > 2.0 * threads_first + 4.0 {
                failures.push(format!(
                    "{name} server: threads grew from {threads_first:.0} to {threads_last:.0}"
                ));
            }
            let rss_growth = last(|s| s.rss_kib) - first(|s| s.rss_kib);
            if rss_growth > MAX_RSS_GROWTH_KIB {
                failures.push(format!(
                    "{name} server: RSS grew by {:.0} MiB",
                    rss_growth / 1024.0
                ));
            }
        }
        trends.push(Trend {
            name,
            rss,
            fds,
            threads,
            samples: steady.len(),
            end: steady.last().copied(),
        });
    }
    trends
}

/// The report: calls, faults, background jobs, tasks and statuses counted; requests and
/// replies; kernels seen; each server's trend; the spool.
fn print_summary(seconds: u64, stats: &Stats, ending: &Ending, trends: &[Trend]) {
    let Ending {
        load_seconds,
        replies,
        seen,
        spool_end,
        ..
    } = ending;
    println!();
    println!("{seconds} s of load, {load_seconds:.0} s to drained; calls by tool:");
    let total: u64 = stats.calls.values().sum();
    for (tool, count) in &stats.calls {
        println!("  {tool:<28} {count:>6}");
    }
    println!("  {:<28} {total:>6}", "total");
    println!("faults injected:");
    for (kind, count) in &stats.faults {
        println!("  {kind:<28} {count:>6}");
    }
    println!("background jobs:");
    for (kind, count) in &stats.jobs {
        println!("  {kind:<44} {count:>6}");
    }
    println!("MCP tasks (the stdio client's; the server remembers {MAX_TASKS}):");
    for (kind, count) in &stats.tasks {
        println!("  {kind:<44} {count:>6}");
    }
    println!("statuses seen:");
    for (status, count) in &stats.statuses {
        println!("  {status:<40} {count:>6}");
    }
    println!(
        "JSON-RPC requests {}, unanswered {}, duplicated {}; kernel processes seen {}",
        replies.requests,
        replies.lost,
        replies.duplicated,
        seen.len()
    );
    for trend in trends {
        let Trend {
            name,
            rss,
            fds,
            threads,
            samples: count,
            end,
        } = trend;
        let end = end.map_or(String::new(), |s| {
            format!(
                " (end: RSS {:.1} MiB, {} fds, {} threads)",
                s.rss_kib / 1024.0,
                s.fds,
                s.threads
            )
        });
        println!(
            "{name} server slopes over {count} samples: RSS {rss:+.0} KiB/min, fds {fds:+.2}/min, threads {threads:+.2}/min{end}"
        );
    }
    println!(
        "spool: peak {:.1} MiB in one session (bound {:.1} MiB), {:.1} MiB at the end of load",
        ending.spool_peak() as f64 / 1048576.0,
        SPOOL_BOUND as f64 / 1048576.0,
        *spool_end as f64 / 1048576.0
    );
}

type StdioServer = (
    tokio::process::Child,
    u32,
    RunningService<RoleClient, ClientConfig>,
    Arc<Mutex<Ledger>>,
);

async fn start_stdio(server_binary: &Path, env: &[(&str, String)]) -> anyhow::Result<StdioServer> {
    let mut child = tokio::process::Command::new(server_binary)
        .envs(env.iter().map(|(key, value)| (key, value)))
        .env_remove(ipython_mcp_config::HTTP_TOKEN.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().context("pid")?;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let transport = Counted {
        inner: AsyncRwTransport::new_client(
            child.stdout.take().context("stdout")?,
            child.stdin.take().context("stdin")?,
        ),
        ledger: Arc::clone(&ledger),
    };
    // It declares the MCP tasks extension (see `Lane::tasks`).
    let mut config = ClientConfig::default();
    config.capabilities.extensions = Some(
        [(
            rmcp::model::TASKS_EXTENSION_ID.to_owned(),
            rmcp::model::JsonObject::new(),
        )]
        .into(),
    );
    let service = tokio::time::timeout(
        Duration::from_secs(60),
        config.serve_with_lifecycle(transport, ClientLifecycleMode::Initialize),
    )
    .await
    .context("initialize timed out")??;
    Ok((child, pid, service, ledger))
}

async fn stop_server(server: &mut HttpServer) {
    signal(server.pid, "TERM");
    let _ = tokio::time::timeout(Duration::from_secs(30), server.child.wait()).await;
}

/// The kernels of `kernels` still alive after `within`.
async fn wait_gone(kernels: &[(u32, u64)], within: Duration) -> Vec<(u32, u64)> {
    let until = Instant::now() + within;
    loop {
        let alive: Vec<(u32, u64)> = kernels.iter().copied().filter(|k| alive(*k)).collect();
        if alive.is_empty() || Instant::now() >= until {
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_a_function_of_the_seed() {
        let draw = |seed| {
            let mut rng = Rng::new(seed);
            (0..8).map(|_| rng.below(100)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert!(draw(0).iter().any(|n| *n != 0));
    }

    #[test]
    fn slope_is_least_squares_per_minute() {
        assert_eq!(slope(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]), 2.0);
        assert_eq!(slope(&[(1.0, 4.0)]), 0.0);
        assert_eq!(slope(&[(1.0, 4.0), (1.0, 5.0)]), 0.0);
    }

    #[test]
    fn leftover_temporaries_are_found_at_any_depth() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("sub")).expect("sub");
        std::fs::write(dir.path().join("kept.ipynb"), "{}").expect("write");
        std::fs::write(dir.path().join("sub/.ipython-mcp-abc.tmp"), "").expect("write");
        let found = leftover_temporaries(dir.path());
        assert_eq!(found, [dir.path().join("sub/.ipython-mcp-abc.tmp")]);
    }
}
