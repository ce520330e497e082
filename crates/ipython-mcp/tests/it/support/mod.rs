//! The test harness: spawn the real binary, connect rmcp's client over its stdio.

#![allow(dead_code)]

pub mod collab;

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use rmcp::model::{CallToolRequestParams, ClientConfig, ContentBlock, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _, Peer, RunningService};
use rmcp::RoleClient;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};

/// Every built-in tool, sorted: what `tools/list` shows with no dynamic tools registered (over
/// stdio and HTTP alike, fixtures excluded).
pub const TOOLS: [&str; 26] = [
    "call_function",
    "execute",
    "get_output",
    "inspect",
    "interrupt",
    "kernel_discover",
    "kernel_list",
    "kernel_restart",
    "kernel_start",
    "kernel_stop",
    "list",
    "notebook_create",
    "notebook_edit",
    "notebook_execute",
    "notebook_execute_cell",
    "notebook_read",
    "notebook_revision",
    "notebook_session",
    "notebook_session_close",
    "register_tool",
    "reload",
    "remove",
    "reset",
    "runtime_status",
    "search",
    "unregister_tool",
];

/// Which MCP protocol family the client speaks.
#[derive(Debug, Clone, Copy)]
pub enum Family {
    /// `initialize` handshake, protocol 2025-11-25.
    Handshake,
    /// No handshake (`server/discover`), protocol 2026-07-28.
    Modern,
}

/// The cache directory shared by every test of this run: the first server to start provisions
/// the managed default environment (under a lock), the rest reuse it.
pub fn cache_dir() -> String {
    format!("{}/ipython-mcp-cache", env!("CARGO_TARGET_TMPDIR"))
}

pub fn command(extra_env: &[(&str, &str)]) -> Command {
    command_for(
        std::path::Path::new(env!("CARGO_BIN_EXE_ipython-mcp")),
        &[],
        extra_env,
    )
}

/// Like `command`, for another way of starting the server (an installed entry point, `uvx`).
pub fn command_for(
    program: &std::path::Path,
    args: &[&str],
    extra_env: &[(&str, &str)],
) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .env("IPYTHON_MCP_CACHE_DIR", cache_dir())
        .env("IPYTHON_MCP_LOG", "warn")
        // Most tests need no spare kernel; the ones about replacement turn it on.
        .env("IPYTHON_MCP_SPARE_KERNELS", "0")
        // A kernel start on a loaded 2-core machine can exceed the 10 s default; tests about the
        // startup bound set their own.
        .env("IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS", "120")
        // Most tests read typed results; the ones about what a model reads (tests/it/model_view.rs,
        // the surface) ask for the default shape, `auto`.
        .env("IPYTHON_MCP_STRUCTURED_OUTPUT", "always")
        .env_remove("VIRTUAL_ENV")
        .env_remove("IPYTHON_MCP_PYTHON")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for (key, value) in extra_env {
        command.env(key, value);
    }
    command
}

/// A cut stream of a result, as structured content and the text view hold it.
#[derive(Debug)]
pub struct CutStream {
    /// What structured content keeps of the beginning: only characters the code printed.
    pub head: String,
    /// The line the text view shows between head and tail.
    pub marker: String,
    /// What structured content keeps of the end.
    pub tail: String,
    /// The stream as the model reads it: head, the marker on its own line, tail.
    pub view: String,
}

impl ToolResult {
    /// `stream` ("stdout" or "stderr") of a result whose middle was cut. Structured content
    /// holds only printed characters, cut where `truncated.<stream>_cut_at` says; the text
    /// view holds the same characters with the marker on a line of its own at the cut.
    pub fn cut(&self, stream: &str) -> CutStream {
        let structured = &self.structured;
        let printed = structured[stream].as_str().expect("the stream");
        assert!(
            !printed.contains("[… "),
            "{stream} holds a marker: {printed}"
        );
        let at = structured["truncated"][format!("{stream}_cut_at")]
            .as_u64()
            .unwrap_or_else(|| panic!("no {stream}_cut_at: {structured}"))
            as usize;
        let split = printed
            .char_indices()
            .nth(at)
            .map_or(printed.len(), |(index, _)| index);
        let (head, tail) = printed.split_at(split);
        let text = self.text();
        let heading = format!("--- {stream} ---\n");
        let section = &text[text.find(&heading).expect("the stream's section") + heading.len()..];
        let start = section.find("[… ").expect("a marker in the text view");
        let end = start + section[start..].find(" …]").expect("the marker's end") + " …]".len();
        let marker = &section[start..end];
        let mut view = head.to_owned();
        if !view.is_empty() && !view.ends_with('\n') {
            view.push('\n');
        }
        view.push_str(marker);
        if !tail.is_empty() {
            view.push('\n');
            view.push_str(tail);
        }
        assert!(
            section.starts_with(&view),
            "the text view is not the printed text with the marker at the cut:\n{section}"
        );
        CutStream {
            head: head.to_owned(),
            marker: marker.to_owned(),
            tail: tail.to_owned(),
            view,
        }
    }
}

pub struct Server {
    pub client: RunningService<RoleClient, ClientConfig>,
    pub pid: u32,
    child: Child,
}

/// A tool result, split into the parts tests look at.
#[derive(Debug)]
pub struct ToolResult {
    pub structured: Value,
    pub is_error: bool,
    pub content: Vec<ContentBlock>,
}

impl ToolResult {
    pub fn ok(&self) -> bool {
        !self.is_error && self.structured["ok"] == true
    }

    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|content| match content {
                ContentBlock::Text(text) => Some(text.text.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn images(&self) -> Vec<(String, Vec<u8>)> {
        self.content
            .iter()
            .filter_map(|content| match content {
                ContentBlock::Image(image) => Some((
                    image.mime_type.clone(),
                    base64::engine::general_purpose::STANDARD
                        .decode(&image.data)
                        .expect("valid base64"),
                )),
                _ => None,
            })
            .collect()
    }
}

impl Server {
    /// Starts a server and waits until its default kernel is ready.
    pub async fn start(family: Family, extra_env: &[(&str, &str)]) -> Server {
        let server = Server::start_unready(family, extra_env).await;
        let status = server.wait_settled().await;
        assert_eq!(status["state"], "ready", "kernel did not start: {status}");
        server
    }

    /// Starts a server without waiting for its kernel.
    pub async fn start_unready(family: Family, extra_env: &[(&str, &str)]) -> Server {
        Server::spawn(command(extra_env), family).await
    }

    /// Starts a server (waiting for its kernel) whose stderr is collected into the returned
    /// buffer instead of being inherited.
    pub async fn start_logged(
        family: Family,
        extra_env: &[(&str, &str)],
    ) -> (Server, std::sync::Arc<std::sync::Mutex<String>>) {
        let mut command = command(extra_env);
        command.stderr(Stdio::piped());
        let mut server = Server::spawn(command, family).await;
        let stderr = server.child.stderr.take().expect("stderr");
        let collected = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = std::sync::Arc::clone(&collected);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut text = sink.lock().expect("stderr lock");
                text.push_str(&line);
                text.push('\n');
            }
        });
        let status = server.wait_settled().await;
        assert_eq!(status["state"], "ready", "kernel did not start: {status}");
        (server, collected)
    }

    /// Connects to the server that `command` starts (see `command_for`), without waiting for
    /// its kernel.
    pub async fn start_command(family: Family, command: Command) -> Server {
        Server::spawn(command, family).await
    }

    /// Starts a server (waiting for its kernel) with a client that declares the MCP tasks
    /// extension.
    pub async fn start_with_tasks(family: Family, extra_env: &[(&str, &str)]) -> Server {
        let mut info = client_config(family);
        info.capabilities = rmcp::model::ClientCapabilities::builder()
            .enable_tasks()
            .build();
        let server = Server::spawn_as(command(extra_env), family, info).await;
        let status = server.wait_settled().await;
        assert_eq!(status["state"], "ready", "kernel did not start: {status}");
        server
    }

    async fn spawn(command: Command, family: Family) -> Server {
        Server::spawn_as(command, family, client_config(family)).await
    }

    async fn spawn_as(mut command: Command, family: Family, info: ClientConfig) -> Server {
        let mut child = command.spawn().expect("spawn ipython-mcp");
        let pid = child.id().expect("pid");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take().expect("stdin");
        let lifecycle = match family {
            Family::Handshake => ClientLifecycleMode::Initialize,
            Family::Modern => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        };
        // A generous bound: that the handshake never waits for the kernel is shown by
        // `a_first_start_provisions_python_in_the_background` (state `starting` after it).
        let client = tokio::time::timeout(
            Duration::from_secs(60),
            info.serve_with_lifecycle((stdout, stdin), lifecycle),
        )
        .await
        .expect("the MCP handshake never waits for the kernel")
        .expect("connect");
        Server { client, pid, child }
    }

    /// Polls runtime_status until the default session leaves `starting` (provisioning on a
    /// fresh machine takes a while).
    pub async fn wait_settled(&self) -> Value {
        let deadline = Instant::now() + Duration::from_secs(900);
        loop {
            let status = self.call("runtime_status", json!({})).await;
            let status = status.structured.clone();
            if status["state"] != "starting" {
                return status;
            }
            assert!(Instant::now() < deadline, "kernel still starting: {status}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls runtime_status until `predicate` holds for the default session's status.
    /// The bound is above any kernel start the product allows (the tests' startup timeout).
    pub async fn wait_until(&self, predicate: impl Fn(&Value) -> bool) -> Value {
        self.wait_until_in("default", predicate).await
    }

    /// Like `wait_until`, for the status of kernel session `kernel`.
    pub async fn wait_until_in(&self, kernel: &str, predicate: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let status = self
                .call("runtime_status", json!({"kernel": kernel}))
                .await
                .structured
                .clone();
            if predicate(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "condition never held: {status}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn call(&self, tool: &str, arguments: Value) -> ToolResult {
        let result = call_peer(self.client.peer(), tool, arguments).await;
        assert!(
            result.structured.is_object(),
            "{tool} returned structuredContent: {result:?}"
        );
        result
    }

    /// Like `call`, for requests rmcp itself rejects (no structuredContent then).
    pub async fn call_raw(&self, tool: &str, arguments: Value) -> ToolResult {
        call_peer(self.client.peer(), tool, arguments).await
    }

    /// Peak resident set size of the server process, in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).expect("proc status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }

    /// Waits for the server to exit by itself and checks it exited cleanly.
    pub async fn wait_exit(mut self, within: Duration) {
        let status = tokio::time::timeout(within, self.child.wait()).await;
        let status = status.expect("server exits in time").expect("wait");
        assert!(status.success(), "server exit status {status}");
    }

    /// Closes stdin (as a client does) and waits for the server to exit on its own.
    pub async fn stop(mut self) {
        let _ = self.client.cancel().await;
        // Above the product's shutdown bound (sessions stop together, each within twice the grace
        // and 5 s), with a margin for a loaded machine.
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await;
        let status = status
            .expect("server exits after stdin closes")
            .expect("wait");
        assert!(status.success(), "server exit status {status}");
    }
}

/// What a client of `family` says of itself.
pub fn client_config(family: Family) -> ClientConfig {
    match family {
        Family::Handshake => {
            ClientConfig::default().with_protocol_version(ProtocolVersion::V_2025_11_25)
        }
        Family::Modern => ClientConfig::default(),
    }
}

/// A background execute, as a client that declared the MCP tasks extension sees it: a task
/// named by the execution id, working until the code ends, then completed with `execute`'s own
/// result; `tasks/cancel` interrupts like a cancellation and keeps the namespace.
pub async fn tasks_follow_background_executions(peer: &Peer<RoleClient>) {
    use rmcp::model::{CallToolResponse, CancelTaskParams, GetTaskParams, TaskStatus};
    let flag = tempfile::NamedTempFile::new().expect("flag file");
    let flag_path = flag.path().display().to_string();
    std::fs::remove_file(flag.path()).expect("remove the flag");
    let code = format!(
        "import os, time\nwhile not os.path.exists({flag_path:?}):\n    time.sleep(0.01)\nprint('done')\n6 * 7"
    );
    let started = |code: &str| {
        let arguments = json!({"code": code, "background": true});
        let request = CallToolRequestParams::new("execute")
            .with_arguments(arguments.as_object().cloned().expect("object"));
        let peer = peer.clone();
        async move {
            match peer.call_tool_once(request).await.expect("tools/call") {
                CallToolResponse::Task(created) => created.task,
                other => panic!("a task, not {other:?}"),
            }
        }
    };
    let task = started(&code).await;
    assert_eq!(task.status, TaskStatus::Working);
    let working = peer
        .get_task(GetTaskParams::new(task.task_id.clone()))
        .await
        .expect("tasks/get");
    assert_eq!(working.task.task.status, TaskStatus::Working, "{working:?}");
    // The task id is the execution id: get_output reads the same execution.
    let running = call_peer(peer, "get_output", json!({"execution_id": task.task_id})).await;
    assert_eq!(
        running.structured["finished"], false,
        "{:?}",
        running.structured
    );
    std::fs::write(&flag_path, "").expect("raise the flag");
    let finished = call_peer(
        peer,
        "get_output",
        json!({"execution_id": task.task_id, "wait_seconds": 120}),
    )
    .await;
    assert_eq!(
        finished.structured["finished"], true,
        "{:?}",
        finished.structured
    );
    let completed = peer
        .get_task(GetTaskParams::new(task.task_id.clone()))
        .await
        .expect("tasks/get");
    assert_eq!(completed.task.task.status, TaskStatus::Completed);
    let rmcp::model::TaskPayload::Completed { result } = &completed.task.payload else {
        panic!("a result: {completed:?}")
    };
    let structured = &result["structuredContent"];
    assert_eq!(structured["ok"], true, "{result:?}");
    assert_eq!(structured["stdout"], "done\n");
    assert_eq!(structured["result"]["text/plain"], "42");
    assert_eq!(structured["execution_id"], task.task_id.as_str());
    assert_eq!(result["isError"], false);

    // tasks/cancel interrupts the running code as a cancellation does.
    let hang = started("import time\nstate = 'kept'\ntime.sleep(600)").await;
    let cancelled_id = hang.task_id.clone();
    peer.cancel_task(CancelTaskParams::new(cancelled_id.clone()))
        .await
        .expect("tasks/cancel");
    let stopped = call_peer(
        peer,
        "get_output",
        json!({"execution_id": cancelled_id, "wait_seconds": 120}),
    )
    .await;
    assert_eq!(
        stopped.structured["finished"], true,
        "{:?}",
        stopped.structured
    );
    assert_eq!(
        stopped.structured["status"], "cancelled",
        "{:?}",
        stopped.structured
    );
    let cancelled = peer
        .get_task(GetTaskParams::new(cancelled_id))
        .await
        .expect("tasks/get");
    assert_eq!(
        cancelled.task.task.status,
        TaskStatus::Cancelled,
        "{cancelled:?}"
    );
    let next = call_peer(peer, "execute", json!({"code": "6 * 7"})).await;
    assert_eq!(
        next.structured["result"]["text/plain"], "42",
        "{:?}",
        next.structured
    );

    // A task this server never made is invalid params.
    let unknown = peer
        .get_task(GetTaskParams::new("no-such-task"))
        .await
        .expect_err("unknown task");
    assert!(unknown.to_string().contains("unknown task"), "{unknown}");
    // Without background there is no task: the result comes back as always.
    let plain = call_peer(peer, "execute", json!({"code": "1 + 1"})).await;
    assert_eq!(plain.structured["result"]["text/plain"], "2");
}

pub async fn call_peer(peer: &Peer<RoleClient>, tool: &str, arguments: Value) -> ToolResult {
    let arguments = arguments.as_object().cloned().expect("arguments object");
    let result = peer
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|error| panic!("{tool} failed at the protocol level: {error}"));
    ToolResult {
        structured: result.structured_content.clone().unwrap_or(Value::Null),
        is_error: result.is_error == Some(true),
        content: result.content.to_vec(),
    }
}

/// Writes raw JSON-RPC lines to a fresh server, closes stdin after the last reply, and returns
/// every line the server wrote to stdout.
pub async fn raw_session(messages: &[Value]) -> Vec<String> {
    let mut child = command(&[]).spawn().expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut lines = Vec::new();
    let wanted = messages
        .iter()
        .filter(|message| message.get("id").is_some())
        .count();
    for message in messages {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .expect("write");
    }
    stdin.flush().await.expect("flush");
    let mut replies = 0;
    while replies < wanted {
        let line = tokio::time::timeout(Duration::from_secs(900), stdout.next_line())
            .await
            .expect("reply in time")
            .expect("read")
            .expect("server closed stdout early");
        if serde_json::from_str::<Value>(&line)
            .map(|value| value.get("id").is_some())
            .unwrap_or(false)
        {
            replies += 1;
        }
        lines.push(line);
    }
    drop(stdin);
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(Duration::from_secs(10), stdout.next_line()).await
    {
        lines.push(line);
    }
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("exit")
        .expect("wait");
    assert!(status.success());
    lines
}

/// Waits until no process with `pid` exists (reaped or never ours).
pub async fn wait_until_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| {
                !stat
                    .split(") ")
                    .nth(1)
                    .is_some_and(|rest| rest.starts_with('Z'))
            })
            .unwrap_or(false);
        if !alive {
            return;
        }
        assert!(Instant::now() < deadline, "process {pid} is still alive");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The live (not zombie) processes of process group `group`, from /proc.
pub fn group_members(group: i32) -> Vec<i32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command's closing parenthesis: state, ppid, pgrp, …
        let fields: Vec<&str> = stat
            .rsplit_once(") ")
            .map(|(_, rest)| rest.split(' ').collect())
            .unwrap_or_default();
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == group.to_string() {
            members.push(pid);
        }
    }
    members
}

/// Waits until process group `group` has no live member.
pub async fn wait_until_group_gone(group: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let members = group_members(group);
        if members.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process group {group} still has {members:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server's temp and private directories in one test directory: `TMPDIR` and
/// `XDG_RUNTIME_DIR` (where the server makes its private directory, with kernels' run
/// directories and output spools) beside each other, so [`spool_dirs`] finds its spools.
pub fn temp_and_private(root: &std::path::Path) -> [(&'static str, String); 2] {
    let tmp = root.join("tmp");
    let run = root.join("run");
    for dir in [&tmp, &run] {
        std::fs::create_dir_all(dir).expect("test directory");
    }
    [
        ("TMPDIR", tmp.display().to_string()),
        ("XDG_RUNTIME_DIR", run.display().to_string()),
    ]
}

/// The host's pid of the process a kernel's code numbers `pid` (`os.getpid()`, a `Popen`'s
/// `pid`): a kernel in namespaces numbers processes in its own PID namespace. Found among the
/// descendants of `kernel` (the kernel's pid in `runtime_status`), by the last field of their
/// `NSpid` (a process outside namespaces has one field: its pid).
pub fn host_pid(kernel: u64, pid: i32) -> i32 {
    let mut queue = vec![kernel as i32];
    while let Some(next) = queue.pop() {
        let status = std::fs::read_to_string(format!("/proc/{next}/status")).unwrap_or_default();
        let numbers: Vec<i32> = status
            .lines()
            .find_map(|line| line.strip_prefix("NSpid:"))
            .map(|fields| {
                fields
                    .split_whitespace()
                    .filter_map(|field| field.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if numbers.last() == Some(&pid) {
            return numbers[0];
        }
        for task in std::fs::read_dir(format!("/proc/{next}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            queue.extend(
                children
                    .split_whitespace()
                    .filter_map(|child| child.parse::<i32>().ok()),
            );
        }
    }
    panic!("no process the kernel {kernel} numbers {pid}")
}

/// The process the server started for the kernel whose pid `runtime_status` reports: the kernel
/// itself, or (in namespaces, where the kernel is the second process of its PID namespace) the
/// sandbox's launcher, its parent's parent.
pub fn launcher_of(kernel: i32) -> i32 {
    let field = |pid: i32, name: &str| -> String {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|line| line.strip_prefix(name).map(|rest| rest.trim().to_owned()))
            .unwrap_or_default()
    };
    if field(kernel, "NSpid:").split_whitespace().count() < 2 {
        return kernel;
    }
    let parent = |pid: i32| field(pid, "PPid:").parse::<i32>().expect("a parent");
    parent(parent(kernel))
}

/// Every output spool directory (`ipython-mcp-spool-*`) anywhere under `root`.
pub fn spool_dirs(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let path = entry.path();
        if !path.is_dir() || path.is_symlink() {
            continue;
        }
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("ipython-mcp-spool-")
        {
            found.push(path);
        } else {
            found.extend(spool_dirs(&path));
        }
    }
    found
}

/// The private run directory of a kernel, read from its command line (`-f <dir>/kernel.json`).
pub fn kernel_run_dir(pid: i32) -> std::path::PathBuf {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
    let args: Vec<String> = cmdline
        .split(|byte| *byte == 0)
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect();
    let file = args
        .iter()
        .skip_while(|arg| arg.as_str() != "-f")
        .nth(1)
        .expect("-f connection file");
    std::path::Path::new(file)
        .parent()
        .expect("run dir")
        .to_owned()
}

/// The Python the product provisions (its managed default environment, shared by every test of
/// this run in `target/tmp/ipython-mcp-cache`).
/// A reqwest client. reqwest is built with TLS but without a crypto provider of its own (the
/// server's upstream client brings ring, see crates/ipython-mcp-upstream/src/https.rs), so a
/// client built before a process-wide provider is installed panics: this installs it first.
pub fn http_client() -> reqwest::Client {
    ipython_mcp_upstream::install_crypto_provider();
    reqwest::Client::new()
}

pub async fn provisioned_python() -> std::path::PathBuf {
    let target_tmp = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let resolver = ipython_mcp_env::Resolver {
        explicit_python: None,
        virtual_env: None,
        working_dir: target_tmp.clone(),
        path_var: std::env::var_os("PATH"),
        cache_dir: target_tmp.join("ipython-mcp-cache"),
        install_timeout: Duration::from_secs(600),
        named: None,
        confinement: Default::default(),
    };
    resolver
        .resolve(&|_| {})
        .await
        .expect("provisioned python")
        .executable
}

/// The provisioned Python, with `requirement` installed (`pip install --target`, once) into
/// `target/tmp/<directory>`, importable as `module` through PYTHONPATH. Returns both paths.
/// Never installs into the environment itself.
pub async fn python_with(
    requirement: &str,
    module: &str,
    directory: &str,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let python = provisioned_python().await;
    let deps = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(directory);
    // Tests of one binary run in parallel: one installs, the others wait for it.
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _installing = INSTALL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !deps.join(module).is_dir() {
        let status = std::process::Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "-q",
                "--target",
            ])
            .arg(&deps)
            .arg(requirement)
            .status()
            .expect("pip");
        assert!(status.success(), "installing {requirement} failed");
    }
    (python, deps)
}

/// A file a cell waits for, so the test decides when the cell ends (instead of a sleep that a
/// loaded machine can outlast). `set` creates it; the directory goes with the value.
pub struct Flag {
    dir: tempfile::TempDir,
}

impl Flag {
    pub fn new() -> Flag {
        Flag {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// The file whose existence is the flag.
    pub fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("flag")
    }

    /// Python that blocks until the flag is set (at most 10 minutes).
    pub fn wait_code(&self) -> String {
        format!(
            "import os as _os, time as _time\n_deadline = _time.monotonic() + 600\nwhile not _os.path.exists({:?}) and _time.monotonic() < _deadline:\n    _time.sleep(0.02)",
            self.path().display().to_string()
        )
    }

    pub fn set(&self) {
        std::fs::write(self.path(), b"").expect("set flag");
    }
}

/// A real Jupyter Server (jupyter_server from PyPI, installed beside the provisioned Python
/// like the tests' other Python packages) on a free loopback port, with token auth and its
/// own temporary config, data, runtime and root directories. Killed (with its kernels) on drop.
pub struct JupyterServer {
    child: std::process::Child,
    pub url: String,
    pub token: String,
    dir: tempfile::TempDir,
}

/// The jupyter_server release the tests run against.
pub const JUPYTER_SERVER: &str = "jupyter_server==2.21.1";

impl JupyterServer {
    pub async fn start() -> JupyterServer {
        let (python, deps) =
            python_with(JUPYTER_SERVER, "jupyter_server", "jupyter-server-deps").await;
        let dir = tempfile::tempdir().expect("tempdir");
        for sub in ["runtime", "config", "data", "root", "tmp"] {
            std::fs::create_dir(dir.path().join(sub)).expect("mkdir");
        }
        let token = format!("tok{}", uuid_like());
        let log = std::fs::File::create(dir.path().join("server.log")).expect("log");
        use std::os::unix::process::CommandExt as _;
        let child = std::process::Command::new(&python)
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
                dir.path().join("root").display()
            ))
            .env("PYTHONPATH", &deps)
            .env("JUPYTER_RUNTIME_DIR", dir.path().join("runtime"))
            // Its kernels' temp directory, where they keep their sessions' checkpoints.
            .env("TMPDIR", dir.path().join("tmp"))
            .env("JUPYTER_CONFIG_DIR", dir.path().join("config"))
            .env("JUPYTER_DATA_DIR", dir.path().join("data"))
            .env("JUPYTER_PLATFORM_DIRS", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start jupyter server");
        let mut server = JupyterServer {
            child,
            url: String::new(),
            token,
            dir,
        };
        // Ready when it has written its runtime file (with the port it bound) and its API
        // answers with the token.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            assert!(
                server.child.try_wait().expect("wait").is_none(),
                "jupyter server exited: {}",
                server.log()
            );
            if server.url.is_empty() {
                if let Some(url) = server.runtime_url() {
                    server.url = url;
                }
            }
            if !server.url.is_empty() && server.answers().await {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "jupyter server not ready: {}",
                server.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn runtime_url(&self) -> Option<String> {
        let runtime = self.dir.path().join("runtime");
        for entry in std::fs::read_dir(runtime).ok()?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("jpserver-") && name.ends_with(".json") {
                let text = std::fs::read_to_string(entry.path()).ok()?;
                let info: Value = serde_json::from_str(&text).ok()?;
                return info["url"].as_str().map(str::to_owned);
            }
        }
        None
    }

    /// Whether `api/status` answers 200 with the token (a refused connection is a no: the
    /// runtime file may be written before the socket listens).
    async fn answers(&self) -> bool {
        let response = http_client()
            .get(format!("{}api/status", self.url))
            .header("Authorization", format!("token {}", self.token))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        matches!(response, Ok(response) if response.status().as_u16() == 200)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// The directory the server serves its contents from.
    pub fn root(&self) -> std::path::PathBuf {
        self.dir.path().join("root")
    }

    /// Its kernels' temp directory.
    pub fn temp(&self) -> std::path::PathBuf {
        self.dir.path().join("tmp")
    }

    /// The environment that points the server under test at this Jupyter server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("IPYTHON_MCP_JUPYTER_URL", self.url.clone()),
            ("IPYTHON_MCP_JUPYTER_TOKEN", self.token.clone()),
        ]
    }

    async fn http(&self, method: reqwest::Method, path: &str) -> (u16, Value) {
        let response = http_client()
            .request(method, format!("{}{path}", self.url))
            .header("Authorization", format!("token {}", self.token))
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .expect("jupyter server request");
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// `GET <path>` with the token: status and JSON body.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.http(reqwest::Method::GET, path).await
    }

    /// `POST <path>` with the token and an empty JSON body.
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = http_client()
            .post(format!("{}{path}", self.url))
            .header("Authorization", format!("token {}", self.token))
            .json(&body)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .expect("jupyter server request");
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// `DELETE <path>` with the token: the status.
    pub async fn delete(&self, path: &str) -> u16 {
        self.http(reqwest::Method::DELETE, path).await.0
    }

    /// The ids of the kernels running on the server.
    pub async fn kernel_ids(&self) -> Vec<String> {
        let (status, kernels) = self.get("api/kernels").await;
        assert_eq!(status, 200, "{kernels}");
        kernels
            .as_array()
            .expect("kernel list")
            .iter()
            .filter_map(|kernel| kernel["id"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for JupyterServer {
    fn drop(&mut self) {
        // The server and the kernels it started share its process group.
        // SAFETY: killpg(2) on the group of our own child.
        unsafe { libc::killpg(self.child.id() as i32, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

fn uuid_like() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("random");
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A loopback TCP proxy in front of a server, that can drop every connection it carries at
/// once (a network blip) and keeps accepting new ones.
pub struct Proxy {
    pub url: String,
    cut: tokio::sync::watch::Sender<u64>,
    down: Arc<std::sync::atomic::AtomicBool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Proxies `http://host:port/` (the base URL of the server behind it).
    pub async fn start(target_url: &str) -> Proxy {
        let target = target_url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let url = format!("http://{}/", listener.local_addr().expect("address"));
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cuts = cut.clone();
        let refusing = down.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if refusing.load(std::sync::atomic::Ordering::SeqCst) {
                    continue;
                }
                let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let mut cut = cuts.subscribe();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Proxy {
            url,
            cut,
            down,
            accepting,
        }
    }

    /// Drops every connection open now.
    pub fn cut(&self) {
        self.cut.send_modify(|count| *count += 1);
    }

    /// Drops every connection open now and refuses new ones until [`Proxy::up`].
    pub fn down(&self) {
        self.down.store(true, std::sync::atomic::Ordering::SeqCst);
        self.cut();
    }

    /// Accepts connections again after [`Proxy::down`].
    pub fn up(&self) {
        self.down.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// A real Jupyter Kernel Gateway (jupyter-kernel-gateway from PyPI, installed beside the
/// provisioned Python like the tests' other Python packages) on a free loopback port, with
/// token auth and its own temporary config, data and runtime directories. Its python3
/// kernelspec is the provisioned environment's (which has ipykernel). Killed (with its
/// kernels) on drop.
pub struct KernelGateway {
    child: std::process::Child,
    pub url: String,
    pub token: String,
    dir: tempfile::TempDir,
}

/// The jupyter-kernel-gateway release the tests run against.
pub const KERNEL_GATEWAY: &str = "jupyter-kernel-gateway==3.0.1";

impl KernelGateway {
    pub async fn start() -> KernelGateway {
        let (python, deps) =
            python_with(KERNEL_GATEWAY, "kernel_gateway", "kernel-gateway-deps").await;
        let token = format!("tok{}", uuid_like());
        // The gateway logs the port it was given, not the one it bound, so the port is chosen
        // here; another process may take it in between, so a start that cannot bind retries
        // with a new one.
        for _attempt in 0..5 {
            let dir = tempfile::tempdir().expect("tempdir");
            for sub in ["runtime", "config", "data"] {
                std::fs::create_dir(dir.path().join(sub)).expect("mkdir");
            }
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("free port")
                .port();
            let log = std::fs::File::create(dir.path().join("gateway.log")).expect("log");
            use std::os::unix::process::CommandExt as _;
            let child = std::process::Command::new(&python)
                .args(["-m", "kernel_gateway", "--KernelGatewayApp.ip=127.0.0.1"])
                .arg(format!("--KernelGatewayApp.port={port}"))
                .arg("--KernelGatewayApp.port_retries=0")
                .arg(format!("--KernelGatewayApp.auth_token={token}"))
                .env("PYTHONPATH", &deps)
                .env("JUPYTER_RUNTIME_DIR", dir.path().join("runtime"))
                .env("JUPYTER_CONFIG_DIR", dir.path().join("config"))
                .env("JUPYTER_DATA_DIR", dir.path().join("data"))
                .env("JUPYTER_PLATFORM_DIRS", "1")
                // Its defaults, whatever the environment running the tests says.
                .env_remove("KG_AUTH_TOKEN")
                .env_remove("KG_LIST_KERNELS")
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .process_group(0)
                .spawn()
                .expect("start kernel gateway");
            // Owned at once, so a failed wait below still kills it.
            let mut gateway = KernelGateway {
                child,
                url: format!("http://127.0.0.1:{port}/"),
                token: token.clone(),
                dir,
            };
            // Ready when its API answers with the token.
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                if gateway.child.try_wait().expect("wait").is_some() {
                    let log = gateway.log();
                    assert!(
                        log.contains("already in use"),
                        "kernel gateway exited: {log}"
                    );
                    break;
                }
                if status_of(&gateway.url, &token, "api/kernelspecs").await == Some(200) {
                    return gateway;
                }
                assert!(
                    Instant::now() < deadline,
                    "kernel gateway not ready: {}",
                    gateway.log()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        panic!("kernel gateway found no free port");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("gateway.log")).unwrap_or_default()
    }

    /// The environment that points the server under test at this gateway.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("IPYTHON_MCP_JUPYTER_URL", self.url.clone()),
            ("IPYTHON_MCP_JUPYTER_TOKEN", self.token.clone()),
        ]
    }

    /// `GET <path>` with the token: the status.
    pub async fn get(&self, path: &str) -> u16 {
        status_of(&self.url, &self.token, path)
            .await
            .expect("kernel gateway request")
    }
}

/// The status `GET <url><path>` answers with `token`; `None` when nothing answers (a refused
/// connection while the gateway starts).
async fn status_of(url: &str, token: &str, path: &str) -> Option<u16> {
    http_client()
        .get(format!("{url}{path}"))
        .header("Authorization", format!("token {token}"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()
        .map(|response| response.status().as_u16())
}

impl Drop for KernelGateway {
    fn drop(&mut self) {
        // The gateway and the kernels it started share its process group.
        // SAFETY: killpg(2) on the group of our own child.
        unsafe { libc::killpg(self.child.id() as i32, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// The jsonschema release the tests validate documents with.
pub const JSONSCHEMA: &str = "jsonschema==4.26.0";

/// Checks `instance` against the JSON Schema in `schema` (a file) with Python's `jsonschema`
/// (from PyPI into `target/tmp`, beside the provisioned Python), and panics with every error
/// it finds.
pub async fn assert_matches_schema(schema: &std::path::Path, instance: &Value) {
    let (python, deps) = python_with(JSONSCHEMA, "jsonschema", "jsonschema-deps").await;
    let instance_file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(instance_file.path(), instance.to_string()).expect("write instance");
    let script = r#"
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
instance = json.load(open(sys.argv[2]))
cls = jsonschema.validators.validator_for(schema)
cls.check_schema(schema)
errors = sorted(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(instance), key=str)
for error in errors:
    print("/".join(map(str, error.absolute_path)) or "(root)", ":", error.message)
sys.exit(1 if errors else 0)
"#;
    let output = std::process::Command::new(python)
        .args(["-c", script])
        .arg(schema)
        .arg(instance_file.path())
        .env("PYTHONPATH", deps)
        .output()
        .expect("run jsonschema");
    assert!(
        output.status.success(),
        "{} does not match {}:\n{}{}",
        instance,
        schema.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
