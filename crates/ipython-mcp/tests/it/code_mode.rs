//! Code mode: an upstream MCP server (written with the official Python SDK, over stdio) as the
//! kernel's `mcp_servers` module, called through the server, which keeps its credentials.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{self, Family, Server, ToolResult};

/// The upstream: structured and text results, a failing tool, its own secret, a slow tool
/// that notes when it starts and when it is cancelled, tools that ask for sampling and
/// elicitation, and its pid.
const UPSTREAM: &str = r#"
import os, anyio
from pydantic import BaseModel
from mcp import types
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("weather")
LOG = os.environ["UPSTREAM_LOG"]

def note(line):
    with open(LOG, "a") as file:
        file.write(line + "\n")

@server.tool()
def forecast(city: str, days: int = 1) -> dict[str, object]:
    """The forecast for a city, day by day."""
    return {"city": city, "temps": [20 + day for day in range(days)]}

@server.tool(structured_output=False)
def token() -> str:
    """The token this server was given."""
    return os.environ.get("UPSTREAM_TOKEN", "missing")

@server.tool(structured_output=False)
def fail() -> str:
    """Always fails."""
    raise ToolError("the sky fell")

@server.tool(structured_output=False)
def pid() -> str:
    """This server's process id."""
    return str(os.getpid())

@server.tool(structured_output=False)
async def slow(seconds: float) -> str:
    """Sleeps."""
    note("started")
    try:
        await anyio.sleep(seconds)
    except BaseException:
        note("cancelled")
        raise
    return "slept"

class Name(BaseModel):
    name: str

@server.tool(structured_output=False)
async def summarize(ctx: Context) -> str:
    """Asks the client's model (sampling)."""
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text="hi"))
    await ctx.session.create_message([message], max_tokens=5, related_request_id=ctx.request_id)
    return "sampled"

@server.tool(structured_output=False)
async def ask_name(ctx: Context) -> str:
    """Asks the person (elicitation)."""
    answer = await ctx.elicit("Your name?", Name)
    return "answered " + answer.action

@server.tool(structured_output=False)
async def steps(ctx: Context) -> str:
    """Reports progress, then waits for its go-ahead."""
    await ctx.report_progress(1, 2, "fetched page 1")
    while not os.path.exists(LOG + ".go"):
        await anyio.sleep(0.02)
    return "stepped"

server.run()
# One that ignores the end of its stdin, as some do: it runs on unless something kills it.
if os.environ.get("UPSTREAM_LINGER"):
    import time
    time.sleep(600)
"#;

pub(crate) const SECRET: &str = "s3cret-upstream-token";

/// A launcher as `npx`, `uvx` or a wrapper script is: a shell that runs the upstream as its
/// child (no `exec`) and starts beside it a process of its own ([`LINGERER`]).
const LAUNCHER: &str = r#"#!/bin/sh
"$1" "$(dirname "$0")/linger.py" </dev/null >/dev/null 2>&1 &
"$1" "$2"
"#;

/// A launcher's child that outlives the end of its input, hangups, SIGTERM and SIGINT: only a
/// SIGKILL ends it (or the 300 s it waits, should a test fail). Writes its pid once it ignores
/// them.
const LINGERER: &str = r#"
import os, signal, time
for number in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
    signal.signal(number, signal.SIG_IGN)
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "linger.pid")
with open(path + ".part", "w") as file:
    file.write(str(os.getpid()))
os.replace(path + ".part", path)
time.sleep(300)
"#;

/// An upstreams file naming the upstream above as `weather-api`, in a directory of its own.
pub(crate) struct Upstream {
    dir: tempfile::TempDir,
    pub(crate) config: PathBuf,
}

impl Upstream {
    pub(crate) async fn new() -> Upstream {
        Upstream::with_env(&[]).await
    }

    /// With `extra` in the upstream's environment.
    async fn with_env(extra: &[(&str, &str)]) -> Upstream {
        let (python, deps) = support::python_with("mcp==2.3.0", "mcp", "mcp-sdk-deps").await;
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("weather.py");
        std::fs::write(&script, UPSTREAM).expect("script");
        let config = dir.path().join("upstreams.json");
        let mut env = json!({
            "PYTHONPATH": deps,
            "UPSTREAM_TOKEN": SECRET,
            "UPSTREAM_LOG": dir.path().join("log"),
        });
        for (key, value) in extra {
            env[*key] = json!(value);
        }
        let file = json!({"mcpServers": {"weather-api": {
            "command": python,
            "args": [script],
            "env": env,
        }}});
        std::fs::write(&config, file.to_string()).expect("config");
        Upstream { dir, config }
    }

    /// Started through [`LAUNCHER`], whose other child lingers.
    async fn launched() -> Upstream {
        use std::os::unix::fs::PermissionsExt as _;
        let upstream = Upstream::new().await;
        let launcher = upstream.dir.path().join("launch.sh");
        std::fs::write(&launcher, LAUNCHER).expect("launcher");
        std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755))
            .expect("executable");
        std::fs::write(upstream.dir.path().join("linger.py"), LINGERER).expect("lingerer");
        let mut file: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&upstream.config).expect("config"))
                .expect("json");
        let server = &mut file["mcpServers"]["weather-api"];
        let python = server["command"].take();
        let script = server["args"][0].take();
        server["command"] = json!(launcher);
        server["args"] = json!([python, script]);
        std::fs::write(&upstream.config, file.to_string()).expect("config");
        upstream
    }

    /// The pid of the launcher's lingering child, once it has written it.
    async fn lingerer(&self) -> i32 {
        let path = self.dir.path().join("linger.pid");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(pid) = std::fs::read_to_string(&path) {
                return pid.trim().parse().expect("a pid");
            }
            assert!(Instant::now() < deadline, "the lingerer wrote no pid");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    async fn until_logged(&self, line: &str) {
        self.until_logged_times(line, 1).await;
    }

    /// Until `line` is in the log `times` times.
    async fn until_logged_times(&self, line: &str, times: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.log().lines().filter(|logged| *logged == line).count() < times {
            assert!(
                Instant::now() < deadline,
                "{line:?} not {times} times in {:?}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn run(server: &Server, code: &str) -> ToolResult {
    let result = server.call("execute", json!({ "code": code })).await;
    assert!(result.ok(), "{code}: {result:?}");
    result
}

fn stdout(result: &ToolResult) -> &str {
    result.structured["stdout"].as_str().unwrap_or_default()
}

async fn server_with(upstream: &Upstream) -> Server {
    let config = upstream.config.display().to_string();
    Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_UPSTREAM_SERVERS", config.as_str())],
    )
    .await
}

/// Tools are functions with signatures and docstrings; results come back as Python objects;
/// errors and unknown names raise; search finds tools; none of it is a tool of ours.
#[tokio::test]
async fn an_upstream_server_is_a_python_module_in_the_kernel() {
    let upstream = Upstream::new().await;
    let server = server_with(&upstream).await;
    // Nothing connects before a kernel uses it.
    let status = server.call("runtime_status", json!({})).await.structured;
    assert_eq!(
        status["upstream_servers"],
        json!([{"name": "weather-api", "transport": "stdio", "state": "not_started"}]),
        "{status}"
    );
    let called = run(
        &server,
        "import inspect, mcp_servers\n\
         w = mcp_servers.weather_api\n\
         print(w.forecast('Paris', 2))\n\
         print(w.forecast(city='Oslo'))\n\
         print(inspect.signature(w.forecast))\n\
         print(w.forecast.__doc__.splitlines()[0])\n\
         print(repr(w.token()))\n\
         try:\n    w.fail()\nexcept mcp_servers.ToolError as error:\n    print('ToolError', 'the sky fell' in str(error))\n\
         for name in ('mcp_servers.nowhere', 'w.nothing'):\n    try:\n        eval(name)\n    except AttributeError as error:\n        print('AttributeError', error)\n\
         print(mcp_servers.search('city'))\n\
         print('weather_api' in dir(mcp_servers))\n\
         for ask in (w.summarize, w.ask_name):\n    try:\n        ask()\n    except mcp_servers.UpstreamError as error:\n        print('UpstreamError', str(error).startswith('upstream \"weather-api\" answered with an error (-32601): ipython-mcp code mode does not offer'), 'kernel code' in str(error))",
    )
    .await;
    let lines: Vec<&str> = stdout(&called).lines().collect();
    assert_eq!(
        lines,
        [
            "{'city': 'Paris', 'temps': [20, 21]}",
            "{'city': 'Oslo', 'temps': [20]}",
            "(city: str, days: int = 1)",
            "The forecast for a city, day by day.",
            &format!("'{SECRET}'"),
            "ToolError True",
            "AttributeError no upstream MCP server 'nowhere'; configured: weather_api",
            "AttributeError upstream 'weather-api' has no tool 'nothing'; it has: ask_name, fail, forecast, pid, slow, steps, summarize, token",
            "weather_api.forecast(city: str, days: int = 1) - The forecast for a city, day by day.",
            "True",
            // Sampling and elicitation are refused with the reason, which reaches the code.
            "UpstreamError True True",
            "UpstreamError True True",
        ],
        "{called:?}"
    );
    let status = server.call("runtime_status", json!({})).await.structured;
    assert_eq!(
        status["upstream_servers"],
        json!([{"name": "weather-api", "transport": "stdio", "state": "connected", "tools": 8}]),
        "{status}"
    );
    // The capabilities resource lists them too, as its schema says.
    let read = server
        .client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "ipython-mcp://capabilities",
        ))
        .await
        .expect("read the capabilities");
    let rmcp::model::ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else {
        panic!("text contents: {read:?}");
    };
    let capabilities: serde_json::Value = serde_json::from_str(text).expect("JSON");
    assert_eq!(capabilities["upstream_servers"], status["upstream_servers"]);
    let schema = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../schemas/capabilities.schema.json");
    support::assert_matches_schema(&schema, &capabilities).await;
    // The upstream's tools are not ours.
    let tools = server.client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(names, support::TOOLS);
    server.stop().await;
}

/// The upstream's credentials stay in the server: not in the kernel's environment, and the
/// files that hold them are out of the sandboxed kernel's reach (two here: the later one's
/// server replaces the earlier one's of the same name). An upstream process dies with the
/// server, even one that ignores the end of its stdin and a server killed outright.
#[tokio::test]
async fn the_upstream_s_credentials_never_reach_the_kernel() {
    let upstream = Upstream::with_env(&[("UPSTREAM_LINGER", "1")]).await;
    let base_dir = tempfile::tempdir().expect("tempdir");
    let base = base_dir.path().join("user.json");
    let replaced = json!({"mcpServers": {"weather-api": {"command": "/nonexistent/upstream"}}});
    std::fs::write(&base, replaced.to_string()).expect("base file");
    let files = format!("{}:{}", base.display(), upstream.config.display());
    // Calls do not use the kernel's network: they work with it off.
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_UPSTREAM_SERVERS", files.as_str()),
            ("IPYTHON_MCP_SANDBOX_NETWORK", "off"),
        ],
    )
    .await;
    let code = format!(
        "import os, mcp_servers\n\
         print(mcp_servers.weather_api.token() == {SECRET:?})\n\
         print({SECRET:?} in repr(dict(os.environ)), {SECRET:?} in open('/proc/self/environ', errors='replace').read())\n\
         for path in ({base:?}, {config:?}):\n    try:\n        open(path).read()\n        print('read')\n    except PermissionError:\n        print('denied')",
        base = base.display().to_string(),
        config = upstream.config.display().to_string()
    );
    let checked = run(&server, &code).await;
    assert_eq!(
        stdout(&checked),
        "True\nFalse False\ndenied\ndenied\n",
        "{checked:?}"
    );
    let pid = run(&server, "print(mcp_servers.weather_api.pid())").await;
    let pid: i32 = stdout(&pid).trim().parse().expect("a pid");
    // It runs in a process group of its own, which the server's death watch leads, and has
    // no controlling terminal (none it could type into the user's shell through).
    // SAFETY: getpgid has no memory-safety preconditions.
    let group = unsafe { libc::getpgid(pid) };
    assert!(
        group > 0 && group != pid && group != unsafe { libc::getpgid(server.pid as i32) },
        "the upstream's group {group}"
    );
    assert_eq!(controlling_terminal(pid), 0, "the upstream has no terminal");
    // SAFETY: kill(2) on the server this test started.
    unsafe {
        libc::kill(server.pid as i32, libc::SIGKILL);
    }
    support::wait_until_gone(pid).await;
}

/// The device number of a process's controlling terminal, 0 for none (`tty_nr` in
/// `/proc/PID/stat`).
fn controlling_terminal(pid: i32) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after_name = stat.rsplit_once(") ").expect("stat's fields").1;
    // Fields 3 on: state, ppid, pgrp, session, tty_nr.
    after_name
        .split_whitespace()
        .nth(4)
        .and_then(|field| field.parse().ok())
        .expect("tty_nr")
}

/// An upstream started through a launcher (as under `npx`, `uvx` or a wrapper script) whose
/// own other child ignores the end of its input, hangups and SIGTERM: nothing of it is left
/// when the server stops, nor when the server is killed outright (its cleanup never runs).
#[tokio::test]
async fn an_upstream_launcher_s_children_end_with_the_server() {
    let (stopped, killed) = tokio::join!(Upstream::launched(), Upstream::launched());
    let (stopping, killing) = tokio::join!(server_with(&stopped), server_with(&killed));
    let code = "import mcp_servers\nprint(mcp_servers.weather_api.pid())";
    let (first, second) = tokio::join!(run(&stopping, code), run(&killing, code));
    let parse = |result: &ToolResult| -> i32 { stdout(result).trim().parse().expect("a pid") };
    let upstreams = [parse(&first), parse(&second)];
    let lingerers = [stopped.lingerer().await, killed.lingerer().await];
    for (upstream, lingerer) in upstreams.iter().zip(&lingerers) {
        // SAFETY: getpgid has no memory-safety preconditions.
        let groups = unsafe { (libc::getpgid(*upstream), libc::getpgid(*lingerer)) };
        assert_eq!(
            groups.0, groups.1,
            "the launcher's children share its group"
        );
        assert!(groups.0 > 0, "both run");
    }
    stopping.stop().await;
    // SAFETY: kill(2) on the server this test started.
    unsafe {
        libc::kill(killing.pid as i32, libc::SIGKILL);
    }
    for pid in upstreams.into_iter().chain(lingerers) {
        support::wait_until_gone(pid).await;
    }
}

/// An interrupt, a timeout or an MCP cancellation during a long upstream call ends the
/// execution promptly and cancels the call upstream; an upstream process that died between
/// calls is started again by the next call.
#[tokio::test]
async fn an_interrupt_a_timeout_or_a_cancellation_cancels_the_upstream_call() {
    let upstream = Upstream::new().await;
    let server = server_with(&upstream).await;
    let first = run(
        &server,
        "import mcp_servers\nprint(mcp_servers.weather_api.pid())",
    )
    .await;
    let pid: i32 = stdout(&first).trim().parse().expect("a pid");
    let running = server
        .call(
            "execute",
            json!({"code": "mcp_servers.weather_api.slow(60)", "background": true}),
        )
        .await;
    let id = running.structured["execution_id"]
        .as_str()
        .expect("id")
        .to_owned();
    upstream.until_logged("started").await;
    let interrupted = server.call("interrupt", json!({})).await;
    assert!(interrupted.ok(), "{interrupted:?}");
    let output = server
        .call(
            "get_output",
            json!({"execution_id": id, "wait_seconds": 60}),
        )
        .await;
    assert_eq!(output.structured["status"], "cancelled", "{output:?}");
    assert_eq!(output.structured["runtime"]["namespace"], "preserved");
    upstream.until_logged("cancelled").await;

    // The execution's deadline is the call's (10 s: far more than the call takes to reach the
    // upstream, which is connected already).
    let timed_out = server
        .call(
            "execute",
            json!({"code": "mcp_servers.weather_api.slow(60)", "timeout_seconds": 10}),
        )
        .await;
    assert_eq!(timed_out.structured["status"], "timeout", "{timed_out:?}");
    assert_eq!(timed_out.structured["runtime"]["namespace"], "preserved");
    upstream.until_logged_times("started", 2).await;
    upstream.until_logged_times("cancelled", 2).await;

    // The client withdraws the execute request (notifications/cancelled).
    let arguments = json!({"code": "mcp_servers.weather_api.slow(60)"})
        .as_object()
        .cloned()
        .expect("object");
    let request: rmcp::model::CallToolRequest = rmcp::model::Request::new(
        rmcp::model::CallToolRequestParams::new("execute").with_arguments(arguments),
    );
    let cancellable = server
        .client
        .peer()
        .send_cancellable_request(
            rmcp::model::ClientRequest::CallToolRequest(request),
            rmcp::service::PeerRequestOptions::no_options(),
        )
        .await
        .expect("send");
    upstream.until_logged_times("started", 3).await;
    cancellable
        .cancel(Some("not needed".into()))
        .await
        .expect("cancel");
    let status = server
        .wait_until(|status| status["operation_active"] == false)
        .await;
    assert_eq!(status["latest_namespace_outcome"], "preserved", "{status}");
    upstream.until_logged_times("cancelled", 3).await;

    // SAFETY: kill(2) on the upstream process our server started for this test.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    support::wait_until_gone(pid).await;
    let again = run(&server, "print(mcp_servers.weather_api.pid())").await;
    let second: i32 = stdout(&again).trim().parse().expect("a pid");
    assert_ne!(second, pid, "a new upstream process");
    // The upstream ends with the server.
    server.stop().await;
    support::wait_until_gone(second).await;
}

/// What the files must be, said at start.
#[tokio::test]
async fn a_bad_upstream_file_stops_the_server_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("upstreams.json");
    std::fs::write(&file, r#"{"mcpServers": {"x": {}}}"#).expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ipython-mcp"))
        .env("IPYTHON_MCP_UPSTREAM_SERVERS", &file)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("IPYTHON_MCP_UPSTREAM_SERVERS")
            && stderr.contains("neither command nor url"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "nothing but JSON-RPC on stdout");
    // Of several files, a missing one is named.
    let good = dir.path().join("good.json");
    std::fs::write(&good, r#"{"mcpServers": {"x": {"command": "x"}}}"#).expect("write");
    let missing = dir.path().join("missing.json");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ipython-mcp"))
        .env(
            "IPYTHON_MCP_UPSTREAM_SERVERS",
            format!("{}:{}", good.display(), missing.display()),
        )
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains(&format!("cannot read {}", missing.display())),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "nothing but JSON-RPC on stdout");
}

/// An upstream over streamable HTTP that wants a bearer token: the configured header reaches
/// it (and only it: the kernel never sees it); a wrong one leaves the upstream `failed`, said
/// in the status and raised in the kernel.
const HTTP_UPSTREAM: &str = r#"
import os, socket, uvicorn
from mcp.server import MCPServer

server = MCPServer("remote")

@server.tool(structured_output=False)
def hello(name: str) -> str:
    """Greets."""
    return "hello " + name

app = server.streamable_http_app()
expected = ("Bearer " + os.environ["UPSTREAM_BEARER"]).encode()

async def guarded(scope, receive, send):
    if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
        await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"unauthorized"})
        return
    await app(scope, receive, send)

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
print(sock.getsockname()[1], flush=True)
uvicorn.Server(uvicorn.Config(guarded, log_level="warning")).run(sockets=[sock])
"#;

#[tokio::test]
async fn an_upstream_over_http_gets_its_bearer_header() {
    use tokio::io::AsyncBufReadExt as _;
    let (python, deps) = support::python_with("mcp==2.3.0", "mcp", "mcp-sdk-deps").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("remote.py");
    std::fs::write(&script, HTTP_UPSTREAM).expect("script");
    let mut upstream = tokio::process::Command::new(&python)
        .arg(&script)
        .env("PYTHONPATH", &deps)
        .env("UPSTREAM_BEARER", SECRET)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("upstream");
    let mut lines = tokio::io::BufReader::new(upstream.stdout.take().expect("stdout")).lines();
    let port = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
        .await
        .expect("the upstream's port in time")
        .expect("read")
        .expect("a port");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let config = dir.path().join("upstreams.json");
    let file = json!({"mcpServers": {
        "remote": {"type": "http", "url": url, "headers": {"Authorization": format!("Bearer {SECRET}")}},
        "wrong": {"url": url, "headers": {"Authorization": "Bearer nope"}},
    }});
    std::fs::write(&config, file.to_string()).expect("config");
    let config = config.display().to_string();
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_UPSTREAM_SERVERS", config.as_str())],
    )
    .await;
    let called = run(
        &server,
        "import mcp_servers\nprint(mcp_servers.remote.hello('agent'))\ntry:\n    mcp_servers.wrong.hello\nexcept mcp_servers.UpstreamError as error:\n    print('UpstreamError')\nprint(mcp_servers.search('hello'))",
    )
    .await;
    // Search lists what it can reach, and says which server it cannot.
    let lines: Vec<&str> = stdout(&called).lines().collect();
    assert_eq!(
        lines[..3],
        [
            "hello agent",
            "UpstreamError",
            "remote.hello(name: str) - Greets."
        ],
        "{called:?}"
    );
    assert!(
        lines[3].starts_with("wrong: unavailable - ") && !lines[3].contains(SECRET),
        "{called:?}"
    );
    let status = server.call("runtime_status", json!({})).await.structured;
    let upstreams = &status["upstream_servers"];
    assert_eq!(upstreams[0]["state"], "connected", "{status}");
    assert_eq!(upstreams[0]["transport"], "http", "{status}");
    assert_eq!(upstreams[1]["state"], "failed", "{status}");
    assert!(
        upstreams[1]["error"]
            .as_str()
            .is_some_and(|error| error.contains("wrong") && !error.contains(SECRET)),
        "{status}"
    );
    server.stop().await;
    let _ = upstream.kill().await;
}

/// What the upstream reports of a call in flight is the execution's progress.
#[tokio::test]
async fn an_upstream_s_progress_is_the_execution_s_progress() {
    let upstream = Upstream::new().await;
    let config = upstream.config.display().to_string();
    let server =
        crate::remote::Watched::start(&[("IPYTHON_MCP_UPSTREAM_SERVERS", config.as_str())]).await;
    let go = upstream.dir.path().join("log.go");
    let calling = server.call(
        "execute",
        json!({"code": "import mcp_servers\nmcp_servers.weather_api.steps()"}),
    );
    let watching = async {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let seen = server.progress_messages();
            if seen.iter().any(|message| message == "fetched page 1 (1/2)") {
                break;
            }
            assert!(Instant::now() < deadline, "progress seen: {seen:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        std::fs::write(&go, b"").expect("go");
    };
    let (called, ()) = tokio::join!(calling, watching);
    assert_eq!(
        called.structured["result"]["text/plain"], "'stepped'",
        "{called:?}"
    );
    server.stop().await;
}

/// An upstream over HTTPS, its certificate (for 127.0.0.1 only) issued by a CA made here; a
/// second CA that issued nothing. Writes both CAs' certificates into the directory given, then
/// prints its port.
const HTTPS_UPSTREAM: &str = r#"
import datetime, ipaddress, os, socket, sys, uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from mcp.server import MCPServer

server = MCPServer("secure")

@server.tool(structured_output=False)
def hello(name: str) -> str:
    """Greets."""
    return "hello " + name

out = sys.argv[1]
now = datetime.datetime.now(datetime.timezone.utc)

def certificate(subject, key, issuer, issuer_key, ca, names=()):
    builder = (x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
    else:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(names)), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())

def pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM)

ca_key, other_key, leaf_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
ca = certificate("test CA", ca_key, "test CA", ca_key, True)
other = certificate("other CA", other_key, "other CA", other_key, True)
leaf = certificate("127.0.0.1", leaf_key, "test CA", ca_key, False, [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
with open(os.path.join(out, "leaf.pem"), "wb") as file:
    file.write(pem(leaf) + pem(ca))
with open(os.path.join(out, "leaf.key"), "wb") as file:
    file.write(leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
with open(os.path.join(out, "ca.pem"), "wb") as file:
    file.write(pem(ca))
with open(os.path.join(out, "other-ca.pem"), "wb") as file:
    file.write(pem(other))

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
print(sock.getsockname()[1], flush=True)
config = uvicorn.Config(server.streamable_http_app(), log_level="warning",
    ssl_certfile=os.path.join(out, "leaf.pem"), ssl_keyfile=os.path.join(out, "leaf.key"))
uvicorn.Server(config).run(sockets=[sock])
"#;

/// An upstream over HTTPS whose CA is named by `SSL_CERT_FILE` is called from kernel code; one
/// whose certificate is not trusted, or names another host, raises `UpstreamError` saying the
/// host and why.
#[tokio::test]
async fn an_upstream_over_https_is_verified_against_the_platform_and_ssl_cert_file() {
    use tokio::io::AsyncBufReadExt as _;
    let (python, deps) = support::python_with("mcp==2.3.0", "mcp", "mcp-sdk-deps").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("secure.py");
    std::fs::write(&script, HTTPS_UPSTREAM).expect("script");
    let mut upstream = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(dir.path())
        .env("PYTHONPATH", &deps)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("upstream");
    let mut lines = tokio::io::BufReader::new(upstream.stdout.take().expect("stdout")).lines();
    let port = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
        .await
        .expect("the upstream's port in time")
        .expect("read")
        .expect("a port");
    let config = dir.path().join("upstreams.json");
    let file = json!({"mcpServers": {
        "secure": {"type": "http", "url": format!("https://127.0.0.1:{port}/mcp")},
        "misnamed": {"type": "http", "url": format!("https://localhost:{port}/mcp")},
    }});
    std::fs::write(&config, file.to_string()).expect("config");
    let config = config.display().to_string();
    let ca = dir.path().join("ca.pem").display().to_string();
    // The other CA: trusted roots beside the platform's, none of which issued the upstream's.
    let other_ca = dir.path().join("other-ca.pem").display().to_string();
    let start = |ca: String| {
        let mut command = support::command(&[
            ("IPYTHON_MCP_UPSTREAM_SERVERS", config.as_str()),
            ("SSL_CERT_FILE", ca.as_str()),
        ]);
        command.env_remove("SSL_CERT_DIR");
        async {
            let server = Server::start_command(Family::Handshake, command).await;
            let status = server.wait_settled().await;
            assert_eq!(status["state"], "ready", "kernel did not start: {status}");
            server
        }
    };
    let (trusting, distrusting) = tokio::join!(start(ca), start(other_ca));
    let code = "import mcp_servers\nfor server in (mcp_servers.secure, mcp_servers.misnamed):\n    try:\n        print(server.hello('tls'))\n    except mcp_servers.UpstreamError as error:\n        print('UpstreamError:', error)";
    let (trusted, distrusted) = tokio::join!(run(&trusting, code), run(&distrusting, code));
    let trusted: Vec<&str> = stdout(&trusted).lines().collect();
    assert_eq!(trusted[0], "hello tls", "{trusted:?}");
    assert!(
        trusted[1].starts_with("UpstreamError:")
            && trusted[1].contains("TLS certificate of localhost")
            && trusted[1].contains("not valid for this host name"),
        "{trusted:?}"
    );
    let distrusted: Vec<&str> = stdout(&distrusted).lines().collect();
    assert!(
        distrusted[0].starts_with("UpstreamError:")
            && distrusted[0].contains("TLS certificate of 127.0.0.1")
            && distrusted[0].contains("not issued by a trusted certificate authority"),
        "{distrusted:?}"
    );
    let status = distrusting
        .call("runtime_status", json!({}))
        .await
        .structured;
    assert_eq!(status["upstream_servers"][1]["state"], "failed", "{status}");
    tokio::join!(trusting.stop(), distrusting.stop());
    let _ = upstream.kill().await;
}

/// VS Code's form of the file (`servers`, `type`), its command, env and args taken from the
/// server's environment (`${VAR}`, `${VAR:-default}`), is the kernel's module; a server of the
/// older HTTP+SSE transport raises `UpstreamError` saying so.
#[tokio::test]
async fn the_vs_code_form_with_variables_from_the_environment_is_the_module() {
    let (python, deps) = support::python_with("mcp==2.3.0", "mcp", "mcp-sdk-deps").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("weather.py");
    std::fs::write(&script, UPSTREAM).expect("script");
    let config = dir.path().join("mcp.json");
    let file = json!({
        "inputs": [],
        "servers": {
            "weather-api": {
                "type": "stdio",
                "command": "${CODE_MODE_PYTHON}",
                "args": ["${CODE_MODE_DIR}/weather.py"],
                "env": {
                    "PYTHONPATH": "${CODE_MODE_DEPS}",
                    "UPSTREAM_TOKEN": "${CODE_MODE_TOKEN:-unset}-${CODE_MODE_SUFFIX:-default}",
                    "UPSTREAM_LOG": "${CODE_MODE_DIR}/log",
                },
            },
            "legacy": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
        },
    });
    std::fs::write(&config, file.to_string()).expect("config");
    let (config, python, deps, dir_text) = (
        config.display().to_string(),
        python.display().to_string(),
        deps.display().to_string(),
        dir.path().display().to_string(),
    );
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_UPSTREAM_SERVERS", config.as_str()),
            ("CODE_MODE_PYTHON", python.as_str()),
            ("CODE_MODE_DEPS", deps.as_str()),
            ("CODE_MODE_DIR", dir_text.as_str()),
            ("CODE_MODE_TOKEN", SECRET),
        ],
    )
    .await;
    let called = run(
        &server,
        "import mcp_servers\nprint(mcp_servers.weather_api.token())\ntry:\n    mcp_servers.legacy.anything\nexcept mcp_servers.UpstreamError as error:\n    print('UpstreamError:', error)",
    )
    .await;
    let lines: Vec<&str> = stdout(&called).lines().collect();
    assert_eq!(lines[0], format!("{SECRET}-default"), "{called:?}");
    assert!(
        lines[1].starts_with("UpstreamError:") && lines[1].contains("HTTP+SSE"),
        "{called:?}"
    );
    let status = server.call("runtime_status", json!({})).await.structured;
    let upstreams = &status["upstream_servers"];
    assert_eq!(
        (&upstreams[0]["name"], &upstreams[0]["transport"]),
        (&json!("legacy"), &json!("sse")),
        "{status}"
    );
    assert_eq!(upstreams[1]["state"], "connected", "{status}");
    server.stop().await;
}
