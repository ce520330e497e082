//! Remote kernels and the settings that choose the default session's kernel: configuration
//! mistakes, `--kernel` for local specs, and sessions on a real Jupyter Server and a real
//! Jupyter Kernel Gateway started here on loopback.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use rmcp::model::{ClientConfig, ProgressNotificationParam};
use rmcp::service::{NotificationContext, RunningService, ServiceExt as _};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{json, Value};
use support::{Family, JupyterServer, KernelGateway, Server};

/// Runs the server with `env` and stdin closed; returns its exit code and stderr.
fn run_with(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ipython-mcp"));
    command
        .env("IPYTHON_MCP_CACHE_DIR", support::cache_dir())
        .env("IPYTHON_MCP_LOG", "off")
        .stdin(std::process::Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("run");
    assert!(output.stdout.is_empty(), "nothing but JSON-RPC on stdout");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn remote_setting_mistakes_stop_with_one_line_naming_the_setting() {
    let token_file = tempfile::NamedTempFile::new().expect("token file");
    std::fs::write(token_file.path(), "has a space\n").expect("write");
    let token_path = token_file.path().display().to_string();
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[("IPYTHON_MCP_JUPYTER_URL", "ftp://127.0.0.1/")],
            "IPYTHON_MCP_JUPYTER_URL",
        ),
        (
            &[("IPYTHON_MCP_KERNEL", "jupyter:python3")],
            "IPYTHON_MCP_KERNEL",
        ),
        (
            &[("IPYTHON_MCP_KERNEL", "no-such-kernelspec-here")],
            "IPYTHON_MCP_KERNEL",
        ),
        (
            &[
                ("IPYTHON_MCP_JUPYTER_URL", "http://127.0.0.1:1/"),
                ("IPYTHON_MCP_JUPYTER_TOKEN_FILE", "/no/such/token/file"),
            ],
            "IPYTHON_MCP_JUPYTER_TOKEN_FILE",
        ),
        (
            &[
                ("IPYTHON_MCP_JUPYTER_URL", "http://127.0.0.1:1/"),
                ("IPYTHON_MCP_JUPYTER_TOKEN_FILE", &token_path),
            ],
            "IPYTHON_MCP_JUPYTER_TOKEN_FILE",
        ),
    ];
    for (env, setting) in cases {
        let (code, stderr) = run_with(env);
        assert_eq!(code, Some(2), "{env:?}: {stderr}");
        let lines: Vec<&str> = stderr
            .trim()
            .lines()
            .filter(|line| !line.contains("can be read by other users"))
            .collect();
        assert_eq!(lines.len(), 1, "{env:?}: {stderr}");
        assert!(lines[0].contains(setting), "{env:?}: {stderr}");
        assert!(
            !stderr.contains("has a space"),
            "the token is never shown: {stderr}"
        );
    }
}

#[tokio::test]
async fn the_kernel_setting_chooses_the_default_sessions_interpreter() {
    let python = support::provisioned_python().await;
    let python = python.display().to_string();
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_KERNEL", &python)]).await;
    let status = server.call("runtime_status", json!({})).await;
    assert_eq!(status.structured["kernel"]["python"], python.as_str());
    let result = server.call("execute", json!({"code": "6 * 7"})).await;
    assert!(result.ok(), "{result:?}");
    server.stop().await;
}

/// The status of session `kernel` once it left `starting`.
async fn settled(server: &Server, kernel: &str) -> Value {
    server
        .wait_until_in(kernel, |status| status["state"] != "starting")
        .await
}

/// A server whose default session runs `spec` (with `extra` settings) on `jupyter`, not yet
/// waited for.
async fn remote_server(jupyter: &JupyterServer, spec: &str, extra: &[(&str, &str)]) -> Server {
    let mut env: Vec<(&str, String)> = jupyter.env();
    env.push(("IPYTHON_MCP_KERNEL", spec.to_owned()));
    env.extend(extra.iter().map(|(key, value)| (*key, (*value).to_owned())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Server::start_unready(Family::Handshake, &env).await
}

/// The id of the kernel session `kernel` runs on the Jupyter server.
fn remote_id(status: &Value) -> String {
    status["kernel"]["remote"]["kernel_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a remote kernel: {status}"))
        .to_owned()
}

/// Waits until `condition` holds for the Jupyter server's model of kernel `id`.
async fn until_kernel(jupyter: &JupyterServer, id: &str, condition: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, kernel) = jupyter.get(&format!("api/kernels/{id}")).await;
        if condition(&kernel) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the kernel on the server: {kernel}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `condition` holds for the Jupyter server's kernel ids.
async fn until_kernels(jupyter: &JupyterServer, condition: impl Fn(&[String]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ids = jupyter.kernel_ids().await;
        if condition(&ids) {
            return;
        }
        assert!(Instant::now() < deadline, "kernels on the server: {ids:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_remote_default_session_executes_and_serves_namespace_tools() {
    let jupyter = JupyterServer::start().await;
    // Code mode works there too: its requests travel on stdin over the WebSocket.
    let upstream = crate::code_mode::Upstream::new().await;
    let upstreams = upstream.config.display().to_string();
    let server = remote_server(
        &jupyter,
        "jupyter:python3",
        &[("IPYTHON_MCP_UPSTREAM_SERVERS", upstreams.as_str())],
    )
    .await;
    let status = settled(&server, "default").await;
    assert_eq!(status["state"], "ready", "{status}\n{}", jupyter.log());
    let kernel = &status["kernel"];
    assert!(kernel["pid"].is_null(), "{kernel}");
    assert_eq!(kernel["remote"]["server"], jupyter.url.as_str());
    assert_eq!(kernel["remote"]["attached"], false);
    let kernel_id = kernel["remote"]["kernel_id"]
        .as_str()
        .expect("kernel id")
        .to_owned();
    assert!(jupyter.kernel_ids().await.contains(&kernel_id));
    assert!(
        !status.to_string().contains(&jupyter.token),
        "the token is never shown"
    );

    let result = server
        .call(
            "execute",
            json!({"code": "def double(x: int) -> int:\n    return 2 * x\nprint('hi')\n21 * 2"}),
        )
        .await;
    assert!(result.ok(), "{result:?}");
    assert_eq!(result.structured["stdout"], "hi\n");
    assert_eq!(result.structured["result"]["text/plain"], "42");
    let called = server
        .call(
            "call_function",
            json!({"name": "double", "arguments": {"x": 4}}),
        )
        .await;
    assert!(called.ok(), "{called:?}");
    assert_eq!(called.structured["result"], 8);
    let inspected = server.call("inspect", json!({"name": "double"})).await;
    assert!(inspected.ok(), "{inspected:?}");
    let upstream_call = server
        .call(
            "execute",
            json!({"code": "import mcp_servers\nprint(mcp_servers.weather_api.forecast('Oslo', 2))\ntry:\n    mcp_servers.weather_api.fail()\nexcept mcp_servers.ToolError as error:\n    print('ToolError', 'the sky fell' in str(error))"}),
        )
        .await;
    assert_eq!(
        upstream_call.structured["stdout"], "{'city': 'Oslo', 'temps': [20, 21]}\nToolError True\n",
        "{upstream_call:?}"
    );
    server.stop().await;
    // A kernel the session started is deleted with it.
    until_kernels(&jupyter, |ids| !ids.contains(&kernel_id)).await;
}

#[tokio::test]
async fn kernel_discover_lists_the_servers_kernelspecs_and_running_kernels() {
    let jupyter = JupyterServer::start().await;
    // A person's notebook: the server knows its path.
    let (code, session) = jupyter
        .post(
            "api/sessions",
            json!({"path": "analysis.ipynb", "type": "notebook", "kernel": {"name": "python3"}}),
        )
        .await;
    assert_eq!(code, 201, "{session}");
    let kernel_id = session["kernel"]["id"]
        .as_str()
        .expect("kernel id")
        .to_owned();
    let env = jupyter.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = Server::start(Family::Handshake, &env).await;
    let found = server.call("kernel_discover", json!({})).await;
    assert!(found.ok(), "{found:?}");
    let remote = &found.structured["remote"];
    assert_eq!(remote["server"], jupyter.url.as_str());
    assert!(remote["error"].is_null(), "{remote}");
    let spec = remote["kernelspecs"]
        .as_array()
        .expect("specs")
        .iter()
        .find(|spec| spec["name"] == "jupyter:python3")
        .unwrap_or_else(|| panic!("jupyter:python3 listed: {remote}"));
    assert_eq!(spec["language"], "python");
    let kernel = remote["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .find(|kernel| kernel["name"] == format!("jupyter-kernel:{kernel_id}").as_str())
        .unwrap_or_else(|| panic!("the running kernel is listed: {remote}"));
    assert_eq!(kernel["kernelspec"], "python3");
    assert_eq!(kernel["notebook_path"], "analysis.ipynb");
    assert!(kernel["execution_state"].is_string(), "{kernel}");
    assert!(kernel["last_activity"].is_string(), "{kernel}");
    server.stop().await;
}

#[tokio::test]
async fn a_wrong_token_leaves_the_session_unavailable_and_the_server_answering() {
    let jupyter = JupyterServer::start().await;
    let wrong = "not-the-right-token-1234";
    let env = [
        ("IPYTHON_MCP_JUPYTER_URL", jupyter.url.as_str()),
        ("IPYTHON_MCP_JUPYTER_TOKEN", wrong),
        ("IPYTHON_MCP_KERNEL", "jupyter:python3"),
    ];
    let server = Server::start_unready(Family::Handshake, &env).await;
    let status = settled(&server, "default").await;
    assert_eq!(status["state"], "unavailable", "{status}");
    let message = status["error"]["message"].as_str().expect("a reason");
    assert!(
        message.contains("refused") && message.contains("403"),
        "{message}"
    );
    assert!(
        !status.to_string().contains(wrong),
        "the token is never shown"
    );
    let result = server.call("execute", json!({"code": "1"})).await;
    assert_eq!(
        result.structured["error"]["code"], "runtime_unavailable",
        "{result:?}"
    );
    // Everything else still answers, discovery included (with the reason).
    let found = server.call("kernel_discover", json!({})).await;
    let reason = found.structured["remote"]["error"].as_str().expect("error");
    assert!(reason.contains("refused"), "{reason}");
    let listed = server.call("kernel_list", json!({})).await;
    assert!(listed.ok(), "{listed:?}");
    server.stop().await;
}

#[tokio::test]
async fn an_unreachable_server_leaves_the_session_unavailable_with_a_bounded_reason() {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("address")
        .port();
    let url = format!("http://127.0.0.1:{port}/");
    let env = [
        ("IPYTHON_MCP_JUPYTER_URL", url.as_str()),
        ("IPYTHON_MCP_JUPYTER_TOKEN", "whatever-token"),
        ("IPYTHON_MCP_KERNEL", "jupyter:python3"),
    ];
    let server = Server::start_unready(Family::Handshake, &env).await;
    let status = settled(&server, "default").await;
    assert_eq!(status["state"], "unavailable", "{status}");
    let message = status["error"]["message"].as_str().expect("a reason");
    assert!(
        message.contains("cannot reach the Jupyter server"),
        "{message}"
    );
    assert!(message.chars().count() <= 8192, "bounded");
    let started = server
        .call(
            "kernel_start",
            json!({"spec": "jupyter:python3", "kernel": "r"}),
        )
        .await;
    assert_eq!(started.structured["ok"], false, "{started:?}");
    // Where every failed tool puts its error: at the top, the same as the status's.
    assert!(started.is_error, "{started:?}");
    assert_eq!(
        started.structured["error"], started.structured["status"]["error"],
        "{started:?}"
    );
    assert!(
        started.structured["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("cannot reach the Jupyter server")),
        "{started:?}"
    );
    let listed = server.call("kernel_list", json!({})).await;
    assert!(listed.ok(), "{listed:?}");
    server.stop().await;
}

#[tokio::test]
async fn attaching_shares_a_persons_kernel_and_detaching_leaves_it_running() {
    let jupyter = JupyterServer::start().await;
    let (code, kernel) = jupyter
        .post("api/kernels", json!({"name": "python3"}))
        .await;
    assert_eq!(code, 201, "{kernel}");
    let kernel_id = kernel["id"].as_str().expect("id").to_owned();
    // With code mode configured: a person's kernel does not get it (it would open stdin to
    // us, and refuse `input()` in their own cells).
    let upstream = crate::code_mode::Upstream::new().await;
    let mut env = jupyter.env();
    env.push((
        "IPYTHON_MCP_UPSTREAM_SERVERS",
        upstream.config.display().to_string(),
    ));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = Server::start(Family::Handshake, &env).await;
    let spec = format!("jupyter-kernel:{kernel_id}");
    // The person, in their own session of the kernel, makes a variable.
    let person = server
        .call("kernel_start", json!({"spec": spec, "kernel": "person"}))
        .await;
    assert!(person.ok(), "{person:?}");
    let made = server
        .call(
            "execute",
            json!({"code": "shared = 41", "kernel": "person"}),
        )
        .await;
    assert!(made.ok(), "{made:?}");
    // The agent attaches to the same kernel and sees it.
    let agent = server
        .call("kernel_start", json!({"spec": spec, "kernel": "agent"}))
        .await;
    assert!(agent.ok(), "{agent:?}");
    assert_eq!(
        agent.structured["status"]["kernel"]["remote"]["attached"],
        true
    );
    assert!(agent.structured["status"]["kernel"]["pid"].is_null());
    let seen = server
        .call("execute", json!({"code": "shared + 1", "kernel": "agent"}))
        .await;
    assert_eq!(seen.structured["result"]["text/plain"], "42", "{seen:?}");
    let modules = server
        .call(
            "execute",
            json!({"code": "import sys, builtins\n('mcp_servers' in sys.modules, builtins.input.__module__)", "kernel": "agent"}),
        )
        .await;
    assert_eq!(
        modules.structured["result"]["text/plain"], "(False, 'ipykernel.kernelbase')",
        "{modules:?}"
    );
    let listed = server.call("kernel_list", json!({})).await;
    let entry = listed.structured["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .find(|entry| entry["kernel"] == "agent")
        .expect("agent listed")
        .clone();
    assert_eq!(entry["remote"]["kernel_id"], kernel_id.as_str());
    // Detaching leaves it running on the server, namespace and all.
    let stopped = server.call("kernel_stop", json!({"kernel": "agent"})).await;
    assert!(stopped.ok(), "{stopped:?}");
    let (code, _) = jupyter.get(&format!("api/kernels/{kernel_id}")).await;
    assert_eq!(code, 200);
    let still = server
        .call("execute", json!({"code": "shared", "kernel": "person"}))
        .await;
    assert_eq!(still.structured["result"]["text/plain"], "41", "{still:?}");
    server.stop().await;
    let (code, _) = jupyter.get(&format!("api/kernels/{kernel_id}")).await;
    assert_eq!(
        code, 200,
        "server shutdown only detaches from attached kernels"
    );
}

#[tokio::test]
async fn a_remote_kernel_ignoring_sigint_is_replaced_and_reported() {
    let jupyter = JupyterServer::start().await;
    let server = remote_server(
        &jupyter,
        "jupyter:python3",
        &[
            ("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "1"),
            ("IPYTHON_MCP_SPARE_KERNELS", "1"),
            // The replacement starts empty (a restore is tested on its own).
            ("IPYTHON_MCP_CHECKPOINT", "off"),
        ],
    )
    .await;
    let status = settled(&server, "default").await;
    assert_eq!(status["state"], "ready", "{status}");
    let first = remote_id(&status);
    let armed = server
        .call(
            "execute",
            json!({"code": "kept = 1\nimport signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])\n'armed'"}),
        )
        .await;
    assert_eq!(
        armed.structured["result"]["text/plain"], "'armed'",
        "{armed:?}"
    );
    let result = server
        .call(
            "execute",
            json!({"code": "import time\ntime.sleep(600)", "timeout_seconds": 1.5}),
        )
        .await;
    assert_eq!(result.structured["status"], "timeout", "{result:?}");
    assert_eq!(result.structured["runtime"]["interruption"], "terminated");
    assert_eq!(result.structured["runtime"]["namespace"], "reset");
    let status = server.wait_until(|status| status["state"] == "ready").await;
    let second = remote_id(&status);
    assert_ne!(first, second, "a fresh kernel on the server");
    let check = server
        .call("execute", json!({"code": "'kept' in dir()"}))
        .await;
    assert_eq!(
        check.structured["result"]["text/plain"], "False",
        "{check:?}"
    );
    // The stuck kernel is deleted from the server, not left behind.
    until_kernels(&jupyter, |ids| !ids.contains(&first)).await;
    server.stop().await;
}

/// Starts `code` in the background on session `kernel` and returns its execution id once
/// `armed` is in its stdout: the cell is running.
async fn running_armed(server: &Server, kernel: &str, code: &str) -> String {
    let running = server
        .call(
            "execute",
            json!({"kernel": kernel, "code": code, "background": true}),
        )
        .await;
    assert!(running.ok(), "{running:?}");
    let id = running.structured["execution_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let output = server.call("get_output", json!({"execution_id": id})).await;
        if output.structured["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("armed")
        {
            break;
        }
        assert!(Instant::now() < deadline, "{output:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    id
}

#[tokio::test]
async fn interrupt_stops_remote_code_and_keeps_the_namespace() {
    let jupyter = JupyterServer::start().await;
    let server = remote_server(&jupyter, "jupyter:python3", &[]).await;
    assert_eq!(settled(&server, "default").await["state"], "ready");
    let flag = support::Flag::new();
    let code = format!("kept = 5\nprint('armed', flush=True)\n{}", flag.wait_code());
    let id = running_armed(&server, "default", &code).await;
    let stopped = server.call("interrupt", json!({})).await;
    assert_eq!(stopped.structured["interrupted"], true, "{stopped:?}");
    assert_eq!(stopped.structured["interruption"], "cooperative");
    assert_eq!(stopped.structured["namespace"], "preserved");
    let output = server
        .call(
            "get_output",
            json!({"execution_id": id, "wait_seconds": 60}),
        )
        .await;
    assert_eq!(output.structured["finished"], true, "{output:?}");
    assert_eq!(output.structured["status"], "cancelled", "{output:?}");
    assert_eq!(output.structured["runtime"]["interruption"], "cooperative");
    let kept = server.call("execute", json!({"code": "kept"})).await;
    assert_eq!(kept.structured["result"]["text/plain"], "5", "{kept:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_remote_kernel_deleted_behind_our_back_is_detected_and_replaced() {
    let jupyter = JupyterServer::start().await;
    // The replacement starts empty (a restore is tested on its own).
    let server = remote_server(
        &jupyter,
        "jupyter:python3",
        &[("IPYTHON_MCP_CHECKPOINT", "off")],
    )
    .await;
    let status = settled(&server, "default").await;
    assert_eq!(status["state"], "ready", "{status}");
    let first = remote_id(&status);
    let made = server.call("execute", json!({"code": "lost = 1"})).await;
    assert!(made.ok(), "{made:?}");
    assert_eq!(jupyter.delete(&format!("api/kernels/{first}")).await, 204);
    let status = server
        .wait_until(|status| {
            status["state"] == "ready"
                && status["kernel"]["remote"]["kernel_id"]
                    .as_str()
                    .is_some_and(|id| id != first)
        })
        .await;
    assert_eq!(status["latest_namespace_outcome"], "reset");
    let next = server
        .call("execute", json!({"code": "'lost' in dir()"}))
        .await;
    assert_eq!(next.structured["result"]["text/plain"], "False", "{next:?}");
    assert_eq!(next.structured["runtime"]["namespace"], "reset", "{next:?}");
    assert!(
        next.structured["notice"].is_string(),
        "the agent is told: {next:?}"
    );
    // SIGTERM deletes what the server started there (the replacement and its spare).
    // SAFETY: signalling the server process this test started.
    unsafe { libc::kill(server.pid as libc::pid_t, libc::SIGTERM) };
    until_kernels(&jupyter, <[String]>::is_empty).await;
    drop(server);
}

#[tokio::test]
async fn a_websocket_dropped_mid_execution_reconnects_without_failing_the_call() {
    let jupyter = JupyterServer::start().await;
    let proxy = support::Proxy::start(&jupyter.url).await;
    let env = [
        ("IPYTHON_MCP_JUPYTER_URL", proxy.url.as_str()),
        ("IPYTHON_MCP_JUPYTER_TOKEN", jupyter.token.as_str()),
        ("IPYTHON_MCP_KERNEL", "jupyter:python3"),
    ];
    let server = Server::start_unready(Family::Handshake, &env).await;
    let status = settled(&server, "default").await;
    assert_eq!(status["state"], "ready", "{status}");
    let kernel_id = remote_id(&status);
    let flag = support::Flag::new();
    let code = format!(
        "kept = 7\nprint('armed', flush=True)\n{}\nprint('after', flush=True)\n'done'",
        flag.wait_code()
    );
    let id = running_armed(&server, "default", &code).await;
    // The network drops while the cell runs. Once the Jupyter server has seen the drop (it
    // buffers the kernel's messages from then on) the cell finishes while we are away; what
    // the kernel sends before the server notices a drop is lost by the server, not by us.
    proxy.down();
    until_kernel(&jupyter, &kernel_id, |kernel| kernel["connections"] == 0).await;
    flag.set();
    // Back within the reconnect bound (10 s) whether or not the cell has finished by then:
    // either way its output must arrive, replayed or live.
    let away = Instant::now() + Duration::from_secs(5);
    while Instant::now() < away {
        let (_, kernel) = jupyter.get(&format!("api/kernels/{kernel_id}")).await;
        if kernel["execution_state"] == "idle" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.up();
    let output = server
        .call(
            "get_output",
            json!({"execution_id": id, "wait_seconds": 120}),
        )
        .await;
    assert_eq!(output.structured["finished"], true, "{output:?}");
    assert_eq!(output.structured["status"], "ok", "{output:?}");
    assert_eq!(output.structured["stdout"], "armed\nafter\n", "{output:?}");
    assert_eq!(output.structured["result"]["text/plain"], "'done'");
    // Same kernel, same namespace: nothing was replaced.
    let kept = server.call("execute", json!({"code": "kept"})).await;
    assert_eq!(kept.structured["result"]["text/plain"], "7", "{kept:?}");
    let status = server.call("runtime_status", json!({})).await;
    assert_eq!(remote_id(&status.structured), kernel_id);
    assert_eq!(status.structured["epoch"], 0);
    server.stop().await;
}

/// A remote kernel we started is checkpointed on its server's machine, in a private
/// directory under its temp directory: a replacement on that server comes back with the
/// namespace, and so does a restart asked to restore; closing the session deletes it there.
#[tokio::test]
async fn a_remote_kernel_that_dies_mid_call_is_replaced_and_restored_on_its_server() {
    let jupyter = JupyterServer::start().await;
    let server = remote_server(&jupyter, "jupyter:python3", &[]).await;
    let status = settled(&server, "default").await;
    assert_eq!(status["state"], "ready", "{status}");
    let first = remote_id(&status);
    let made = server
        .call(
            "execute",
            json!({"code": "kept = 21\ndef double(n):\n    return 2 * n\ngen = (n for n in 'ab')"}),
        )
        .await;
    assert!(made.ok(), "{made:?}");
    let result = server
        .call(
            "execute",
            json!({"code": "doomed = 1\nimport os\nos._exit(3)"}),
        )
        .await;
    assert!(result.is_error, "{result:?}");
    assert_eq!(
        result.structured["error"]["code"], "kernel_died",
        "{result:?}"
    );
    let runtime = &result.structured["runtime"];
    assert_eq!(runtime["namespace"], "restored", "{result:?}");
    assert_eq!(
        runtime["restore"]["restored"],
        json!(["double", "kept"]),
        "{result:?}"
    );
    assert_eq!(runtime["restore"]["lost"][0]["name"], "gen", "{result:?}");
    let status = server.wait_until(|status| status["state"] == "ready").await;
    assert_ne!(remote_id(&status), first, "a fresh kernel: {status}");
    let after = server
        .call(
            "execute",
            json!({"code": "(double(kept), 'doomed' in dir())"}),
        )
        .await;
    assert_eq!(
        after.structured["result"]["text/plain"], "(42, False)",
        "{after:?}"
    );
    until_kernels(&jupyter, |ids| !ids.contains(&first)).await;

    // Asked for, a restart restores too.
    let restarted = server
        .call("kernel_restart", json!({"restore": true}))
        .await;
    assert_eq!(
        restarted.structured["latest_namespace_outcome"], "restored",
        "{restarted:?}"
    );
    let back = server.call("execute", json!({"code": "kept"})).await;
    assert_eq!(back.structured["result"]["text/plain"], "21", "{back:?}");

    // On the server's machine, in a directory only its user may enter.
    let private = jupyter
        .temp()
        // SAFETY: getuid(2) cannot fail.
        .join(format!("ipython-mcp-{}", unsafe { libc::getuid() }));
    let mode = std::fs::metadata(&private)
        .expect("the private directory")
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o700
    );
    let sessions = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(private.join("checkpoints"))
            .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
            .unwrap_or_default()
    };
    let kept = sessions();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].join("manifest.json").is_file(), "{kept:?}");
    server.stop().await;
    assert_eq!(
        sessions(),
        Vec::<std::path::PathBuf>::new(),
        "deleted with the session"
    );
}

#[tokio::test]
async fn an_attached_kernel_that_disappears_leaves_its_session_unavailable_saying_so() {
    let jupyter = JupyterServer::start().await;
    let (code, kernel) = jupyter
        .post("api/kernels", json!({"name": "python3"}))
        .await;
    assert_eq!(code, 201, "{kernel}");
    let kernel_id = kernel["id"].as_str().expect("id").to_owned();
    let spec = format!("jupyter-kernel:{kernel_id}");
    let server = remote_server(&jupyter, &spec, &[]).await;
    let status = settled(&server, "default").await;
    assert_eq!(status["state"], "ready", "{status}");
    assert_eq!(status["kernel"]["remote"]["attached"], true);
    // Its owner shuts it down.
    assert_eq!(
        jupyter.delete(&format!("api/kernels/{kernel_id}")).await,
        204
    );
    let status = server
        .wait_until(|status| status["state"] == "unavailable")
        .await;
    let message = status["error"]["message"].as_str().expect("a reason");
    assert!(message.contains(&kernel_id), "{message}");
    let result = server.call("execute", json!({"code": "1"})).await;
    assert_eq!(
        result.structured["error"]["code"], "runtime_unavailable",
        "{result:?}"
    );
    server.stop().await;
}

/// Kernel Gateway serves the kernel REST API and channels but, by default, neither lists its
/// kernels nor has notebook sessions: starting, executing, interrupting and stopping need
/// none of that. It reads a start request's `env`, passing `KERNEL_*` names to the kernel's
/// process.
#[tokio::test]
async fn a_kernel_gateway_runs_a_remote_session() {
    let gateway = KernelGateway::start().await;
    let mut env = gateway.env();
    env.push((
        "IPYTHON_MCP_ENVIRONMENT_VARIABLES",
        json!({"KERNEL_MCP_CHECK": "k", "MCP_REMOTE_CHECK": "v"}).to_string(),
    ));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = Server::start(Family::Handshake, &env).await;
    let started = server
        .call(
            "kernel_start",
            json!({"spec": "jupyter:python3", "kernel": "gw"}),
        )
        .await;
    assert!(started.ok(), "{started:?}\n{}", gateway.log());
    let status = &started.structured["status"];
    assert_eq!(status["state"], "ready", "{status}\n{}", gateway.log());
    assert_eq!(status["kernel"]["remote"]["server"], gateway.url.as_str());
    assert_eq!(status["kernel"]["remote"]["attached"], false);
    assert!(status["kernel"]["pid"].is_null(), "{status}");
    let kernel_id = remote_id(status);
    assert_eq!(gateway.get(&format!("api/kernels/{kernel_id}")).await, 200);
    // Discovery lists the kernelspecs; the kernel list the gateway refuses to give is empty,
    // not an error blaming the token.
    let found = server.call("kernel_discover", json!({})).await;
    assert!(found.ok(), "{found:?}");
    let remote = &found.structured["remote"];
    assert!(remote["error"].is_null(), "{remote}");
    assert!(
        remote["kernelspecs"]
            .as_array()
            .expect("specs")
            .iter()
            .any(|spec| spec["name"] == "jupyter:python3"),
        "{remote}"
    );
    assert_eq!(remote["kernels"], json!([]), "{remote}");
    assert!(
        !started.text().contains(&gateway.token),
        "the token is never shown"
    );
    // The gateway started the kernel's process with the `KERNEL_*` variable (and not the
    // other, which it does not allow); the session set both in `os.environ`.
    let variables = server
        .call(
            "execute",
            json!({"kernel": "gw", "code": "import os
started_with = open('/proc/self/environ', 'rb').read().split(b'\\0')
(b'KERNEL_MCP_CHECK=k' in started_with, b'MCP_REMOTE_CHECK=v' in started_with, os.environ['KERNEL_MCP_CHECK'], os.environ['MCP_REMOTE_CHECK'])"}),
        )
        .await;
    assert_eq!(
        variables.structured["result"]["text/plain"], "(True, False, 'k', 'v')",
        "{variables:?}"
    );

    let defined = server
        .call(
            "execute",
            json!({"kernel": "gw", "code": "def double(x: int) -> int:\n    return 2 * x\nbase = 20\nprint('hi')\n21 * 2"}),
        )
        .await;
    assert!(defined.ok(), "{defined:?}");
    assert_eq!(defined.structured["stdout"], "hi\n");
    assert_eq!(defined.structured["result"]["text/plain"], "42");
    let used = server
        .call(
            "execute",
            json!({"kernel": "gw", "code": "double(base) + 1"}),
        )
        .await;
    assert_eq!(used.structured["result"]["text/plain"], "41", "{used:?}");
    let called = server
        .call(
            "call_function",
            json!({"kernel": "gw", "name": "double", "arguments": {"x": 4}}),
        )
        .await;
    assert!(called.ok(), "{called:?}");
    assert_eq!(called.structured["result"], 8);

    let id = running_armed(
        &server,
        "gw",
        "kept = 5\nprint('armed', flush=True)\nimport time\ntime.sleep(600)",
    )
    .await;
    let stopped = server.call("interrupt", json!({"kernel": "gw"})).await;
    assert_eq!(stopped.structured["interrupted"], true, "{stopped:?}");
    assert_eq!(stopped.structured["namespace"], "preserved", "{stopped:?}");
    let output = server
        .call(
            "get_output",
            json!({"execution_id": id, "wait_seconds": 60}),
        )
        .await;
    assert_eq!(output.structured["finished"], true, "{output:?}");
    assert_eq!(output.structured["status"], "cancelled", "{output:?}");
    let kept = server
        .call("execute", json!({"kernel": "gw", "code": "kept + base"}))
        .await;
    assert_eq!(kept.structured["result"]["text/plain"], "25", "{kept:?}");

    // Stopping the session deletes the kernel it started on the gateway.
    let ended = server.call("kernel_stop", json!({"kernel": "gw"})).await;
    assert!(ended.ok(), "{ended:?}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let code = gateway.get(&format!("api/kernels/{kernel_id}")).await;
        if code == 404 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kernel still on the gateway: {code}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
}

/// A client that keeps the progress notifications and counts the `tools/list_changed` ones it
/// hears.
#[derive(Clone, Default)]
pub(crate) struct Watcher {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    list_changes: Arc<AtomicUsize>,
    changed: Arc<tokio::sync::Notify>,
}

impl ClientHandler for Watcher {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().expect("progress lock").push(params);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changes.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    fn get_info(&self) -> ClientConfig {
        support::client_config(Family::Handshake)
    }
}

/// The server under test, driven by a [`Watcher`].
pub(crate) struct Watched {
    client: RunningService<RoleClient, Watcher>,
    watcher: Watcher,
    child: tokio::process::Child,
}

impl Watched {
    pub(crate) async fn start(env: &[(&str, &str)]) -> Watched {
        let mut child = support::command(env).spawn().expect("spawn ipython-mcp");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take().expect("stdin");
        let watcher = Watcher::default();
        let client = tokio::time::timeout(
            Duration::from_secs(60),
            watcher.clone().serve((stdout, stdin)),
        )
        .await
        .expect("the MCP handshake never waits for the kernel")
        .expect("connect");
        Watched {
            client,
            watcher,
            child,
        }
    }

    /// The messages of every progress notification heard so far.
    pub(crate) fn progress_messages(&self) -> Vec<String> {
        self.watcher
            .progress
            .lock()
            .expect("progress lock")
            .iter()
            .filter_map(|update| update.message.clone())
            .collect()
    }

    pub(crate) async fn call(&self, tool: &str, arguments: Value) -> support::ToolResult {
        support::call_peer(self.client.peer(), tool, arguments).await
    }

    /// Polls `runtime_status` of session `kernel` until `predicate` holds.
    async fn status_until(&self, kernel: &str, predicate: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let status = self
                .call("runtime_status", json!({"kernel": kernel}))
                .await
                .structured;
            if predicate(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "condition never held: {status}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn list_changes(&self) -> usize {
        self.watcher.list_changes.load(Ordering::SeqCst)
    }

    /// Waits until more than `seen` `tools/list_changed` notifications have arrived.
    async fn list_changed_after(&self, seen: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while self.list_changes() <= seen {
            let notified = self.watcher.changed.notified();
            if self.list_changes() > seen {
                break;
            }
            assert!(
                tokio::time::timeout_at(deadline, notified).await.is_ok(),
                "no tools/list_changed after {seen}"
            );
        }
    }

    /// Polls `tools/list` until `tool` is listed, or not, as `listed` says (a list answers
    /// from the last snapshot while a kernel's check takes longer than the server waits).
    async fn wait_listed(&self, tool: &str, listed: bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let names: Vec<String> = self
                .client
                .list_all_tools()
                .await
                .expect("tools/list")
                .into_iter()
                .map(|tool| tool.name.into_owned())
                .collect();
            if names.iter().any(|name| name == tool) == listed {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{tool} listed: {}, wanted {listed}: {names:?}",
                !listed
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Closes stdin and waits for the server to exit cleanly.
    pub(crate) async fn stop(mut self) {
        let _ = self.client.cancel().await;
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await;
        let status = status
            .expect("server exits after stdin closes")
            .expect("wait");
        assert!(status.success(), "server exit status {status}");
    }
}

/// A 1x1 PNG.
const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// What the local tests check of every tool, on a remote session: where `runtime_status` says
/// the kernel lives, dynamic tools, images, progress, an execute deadline, the FIFO queue and
/// `kernel_restart` (a new kernel on the server, nothing left behind).
/// Defines `triple` (again) in the default session.
async fn defined_again(server: &Watched) -> bool {
    server
        .call(
            "execute",
            json!({"code": "def triple(v: int) -> int:\n    \"\"\"Three times v.\"\"\"\n    return 3 * v"}),
        )
        .await
        .ok()
}

#[tokio::test]
async fn a_remote_session_keeps_the_local_contract_tool_for_tool() {
    let jupyter = JupyterServer::start().await;
    let mut env: Vec<(&str, String)> = jupyter.env();
    env.push(("IPYTHON_MCP_KERNEL", "jupyter:python3".to_owned()));
    env.push(("IPYTHON_MCP_SPARE_KERNELS", "1".to_owned()));
    // A long grace costs nothing when the code stops, and keeps a loaded machine's slow stop
    // a cooperative one.
    env.push(("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "60".to_owned()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = Watched::start(&env).await;

    // Where the kernel lives.
    let status = server
        .status_until("default", |status| status["state"] != "starting")
        .await;
    assert_eq!(status["state"], "ready", "{status}\n{}", jupyter.log());
    let kernel = &status["kernel"];
    assert!(kernel["pid"].is_null(), "{kernel}");
    assert_eq!(kernel["spec"], "jupyter:python3", "{kernel}");
    assert_eq!(kernel["language"], "python", "{kernel}");
    assert_eq!(kernel["helper"], true, "{kernel}");
    // The server's own interpreter runs its python3 kernelspec; where, the helper says.
    let python = support::provisioned_python().await;
    assert_eq!(kernel["python"], python.display().to_string(), "{kernel}");
    assert!(
        kernel["ipykernel_version"]
            .as_str()
            .is_some_and(|version| !version.is_empty()),
        "{kernel}"
    );
    assert!(
        kernel["working_dir"]
            .as_str()
            .is_some_and(|dir| dir.starts_with('/')),
        "{kernel}"
    );
    assert_eq!(kernel["remote"]["server"], jupyter.url.as_str());
    assert_eq!(kernel["remote"]["attached"], false);
    let first = remote_id(&status);
    assert!(jupyter.kernel_ids().await.contains(&first));
    let listed = server.call("kernel_list", json!({})).await;
    let entry = listed.structured["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .find(|entry| entry["kernel"] == "default")
        .cloned()
        .unwrap_or_else(|| panic!("default listed: {listed:?}"));
    assert_eq!(entry["remote"]["kernel_id"], first.as_str(), "{entry}");

    // Dynamic tools: published to every client, called, withdrawn.
    let defined = server
        .call(
            "execute",
            json!({"code": "def triple(v: int) -> int:\n    \"\"\"Three times v.\"\"\"\n    return 3 * v"}),
        )
        .await;
    assert!(defined.ok(), "{defined:?}");
    let seen = server.list_changes();
    let registered = server
        .call("register_tool", json!({"name": "triple"}))
        .await;
    assert!(registered.ok(), "{registered:?}");
    assert_eq!(registered.structured["registration"]["tool_name"], "triple");
    server.list_changed_after(seen).await;
    server.wait_listed("triple", true).await;
    let called = server.call("triple", json!({"v": 14})).await;
    assert!(called.ok(), "{called:?}");
    assert_eq!(called.structured["result"], 42, "{called:?}");
    let wrong = server.call("triple", json!({"v": "many"})).await;
    assert_eq!(
        wrong.structured["error"]["code"], "invalid_arguments",
        "{wrong:?}"
    );
    let seen = server.list_changes();
    let unregistered = server
        .call("unregister_tool", json!({"names": ["triple"]}))
        .await;
    assert_eq!(
        unregistered.structured["unregistered"],
        json!(["triple"]),
        "{unregistered:?}"
    );
    server.list_changed_after(seen).await;
    server.wait_listed("triple", false).await;

    // The other helper-backed namespace tools, as locally.
    let setup = server
        .call(
            "execute",
            json!({"code": "import json\ndata = {'a': [1, 2]}\ndef area(r: float) -> float:\n    \"\"\"Area of a square-ish thing.\"\"\"\n    return 3 * r * r"}),
        )
        .await;
    assert!(setup.ok(), "{setup:?}");
    let listed = server.call("list", json!({})).await;
    assert!(
        listed.structured["functions"]
            .as_array()
            .expect("functions")
            .iter()
            .any(|function| function["name"] == "area"
                && function["signature"] == "(r: float) -> float"),
        "{listed:?}"
    );
    let found = server.call("search", json!({"query": "DAT"})).await;
    assert_eq!(found.structured["results"][0]["name"], "data", "{found:?}");
    assert_eq!(
        found.structured["results"][0]["representation"], "{'a': [1, 2]}",
        "{found:?}"
    );
    let reloaded = server
        .call("reload", json!({"modules": ["json", "never_imported"]}))
        .await;
    assert_eq!(
        reloaded.structured["results"][0]["ok"], true,
        "{reloaded:?}"
    );
    assert_eq!(
        reloaded.structured["results"][1]["error"]["code"], "module_not_found",
        "{reloaded:?}"
    );
    let removed = server
        .call("remove", json!({"names": ["data", "ghost"]}))
        .await;
    assert_eq!(
        removed.structured["removed"],
        json!(["data"]),
        "{removed:?}"
    );
    assert_eq!(
        removed.structured["unknown"],
        json!(["ghost"]),
        "{removed:?}"
    );
    let reset = server.call("reset", json!({})).await;
    assert!(reset.ok(), "{reset:?}");
    let cleared = reset.structured["removed"].as_array().expect("removed");
    assert!(
        ["area", "json", "triple"]
            .iter()
            .all(|name| cleared.iter().any(|removed| removed == name)),
        "{reset:?}"
    );
    let gone = server
        .call(
            "execute",
            json!({"code": "('area' in globals(), 'data' in globals())"}),
        )
        .await;
    assert_eq!(
        gone.structured["result"]["text/plain"], "(False, False)",
        "{gone:?}"
    );
    // The reset took `triple` too; what follows needs it back.
    assert!(defined_again(&server).await);

    // An image display comes back as image content, byte for byte.
    let shown = server
        .call(
            "execute",
            json!({"code": format!("import base64\nfrom IPython.display import Image, display\ndisplay(Image(data=base64.b64decode('{PNG_BASE64}')))")}),
        )
        .await;
    assert!(shown.ok(), "{shown:?}");
    let png = base64::engine::general_purpose::STANDARD
        .decode(PNG_BASE64)
        .expect("png");
    assert_eq!(
        shown.images(),
        vec![("image/png".to_owned(), png)],
        "{shown:?}"
    );

    // Progress, as locally: about one notification a second while the cell runs (so at most
    // one per started second of its measured run time), each with the latest output line.
    server
        .watcher
        .progress
        .lock()
        .expect("progress lock")
        .clear();
    let slow = server
        .call(
            "execute",
            json!({"code": "import time\nfor i in range(5):\n    print(f'step {i}', flush=True)\n    time.sleep(0.6)"}),
        )
        .await;
    assert!(slow.ok(), "{slow:?}");
    let run_ms = slow.structured["runtime"]["run_ms"]
        .as_u64()
        .expect("run_ms");
    let progress: Vec<ProgressNotificationParam> = {
        let all = server.watcher.progress.lock().expect("progress lock");
        // This call's token is the one whose messages are its output.
        let token = all
            .iter()
            .find(|update| {
                update
                    .message
                    .as_deref()
                    .is_some_and(|message| message.starts_with("step "))
            })
            .map(|update| update.progress_token.clone())
            .unwrap_or_else(|| panic!("progress with the output: {all:?}"));
        all.iter()
            .filter(|update| update.progress_token == token)
            .cloned()
            .collect()
    };
    let most = usize::try_from(run_ms / 1000 + 1).expect("small");
    assert!(
        (1..=most).contains(&progress.len()),
        "{} notifications in {run_ms} ms: {progress:?}",
        progress.len()
    );
    assert!(
        progress.iter().all(
            |update| update.message.as_deref().is_some_and(|message| message
                == "running, no output yet"
                || message
                    .strip_prefix("step ")
                    .is_some_and(|n| n.parse::<u32>().is_ok_and(|n| n < 5)))
        ),
        "{progress:?}"
    );
    assert!(
        progress
            .windows(2)
            .all(|pair| pair[0].progress < pair[1].progress),
        "progress increases: {progress:?}"
    );

    // A deadline interrupts through the server; the namespace survives.
    let timed_out = server
        .call(
            "execute",
            json!({"code": "import time\npartial = 2\ntime.sleep(600)", "timeout_seconds": 2}),
        )
        .await;
    assert_eq!(timed_out.structured["status"], "timeout", "{timed_out:?}");
    assert_eq!(timed_out.structured["error"]["code"], "operation_timeout");
    assert_eq!(
        timed_out.structured["runtime"]["interruption"],
        "cooperative"
    );
    assert_eq!(timed_out.structured["runtime"]["namespace"], "preserved");
    assert!(
        timed_out.structured["runtime"]["run_ms"].as_u64() >= Some(2000),
        "the deadline counts from dispatch: {timed_out:?}"
    );
    let kept = server.call("execute", json!({"code": "partial + 1"})).await;
    assert_eq!(kept.structured["result"]["text/plain"], "3", "{kept:?}");

    // FIFO: a call queued behind a running one waits its turn, then runs.
    let flag = support::Flag::new();
    let spawn = |code: String| {
        let peer = server.client.peer().clone();
        tokio::spawn(
            async move { support::call_peer(&peer, "execute", json!({"code": code})).await },
        )
    };
    let running = spawn(format!(
        "order = []\n{}\norder.append(1)\n'first'",
        flag.wait_code()
    ));
    server
        .status_until("default", |status| status["operation_active"] == true)
        .await;
    let queued = spawn("order.append(2)\norder".to_owned());
    let status = server
        .status_until("default", |status| status["queue_depth"] == 1)
        .await;
    assert_eq!(status["state"], "busy", "{status}");
    flag.set();
    let running = running.await.expect("join");
    let queued = queued.await.expect("join");
    assert_eq!(
        running.structured["result"]["text/plain"], "'first'",
        "{running:?}"
    );
    assert_eq!(
        queued.structured["result"]["text/plain"], "[1, 2]",
        "{queued:?}"
    );
    let seq = |result: &support::ToolResult| {
        result.structured["runtime"]["admission_seq"]
            .as_u64()
            .expect("admission_seq")
    };
    assert!(seq(&queued) > seq(&running), "{queued:?}");
    assert!(
        queued.structured["runtime"]["queue_wait_ms"].as_u64() > Some(0),
        "{queued:?}"
    );

    // kernel_restart: a new kernel on the server, the old one deleted, the namespace and the
    // kernel's tools gone; the spare is replaced too, so two kernels run there, not three.
    let registered = server
        .call("register_tool", json!({"name": "triple"}))
        .await;
    assert!(registered.ok(), "{registered:?}");
    server.wait_listed("triple", true).await;
    let epoch = status["epoch"].as_u64().expect("epoch");
    let restarted = server.call("kernel_restart", json!({})).await;
    assert!(restarted.ok(), "{restarted:?}");
    let after = &restarted.structured;
    assert_eq!(after["epoch"].as_u64(), Some(epoch + 1), "{after}");
    assert_eq!(after["latest_namespace_outcome"], "reset", "{after}");
    assert_eq!(after["kernel"]["remote"]["attached"], false, "{after}");
    assert_eq!(after["kernel"]["spec"], "jupyter:python3", "{after}");
    let second = remote_id(after);
    assert_ne!(second, first, "a fresh kernel on the server");
    let gone = server
        .call(
            "execute",
            json!({"code": "('partial' in dir(), 'triple' in dir())"}),
        )
        .await;
    assert_eq!(
        gone.structured["result"]["text/plain"], "(False, False)",
        "{gone:?}"
    );
    assert_eq!(gone.structured["execution_count"], 1, "{gone:?}");
    server.wait_listed("triple", false).await;
    until_kernels(&jupyter, |ids| {
        ids.len() == 2 && ids.contains(&second) && !ids.contains(&first)
    })
    .await;

    // Stopping deletes the session's kernel and its spare.
    server.stop().await;
    until_kernels(&jupyter, <[String]>::is_empty).await;
}

/// `IPYTHON_MCP_ENVIRONMENT_VARIABLES` reach the kernels a session starts on a Jupyter Server
/// (which ignores a start request's `env`: they are set in `os.environ`, before preloads run,
/// without counting as an execution), never an attached kernel; a notebook follows a
/// `jupyter:` default kernel to the server.
#[tokio::test]
async fn started_remote_kernels_get_the_configured_variables_and_notebooks_follow_them() {
    let jupyter = JupyterServer::start().await;
    // A person's kernel, to attach to.
    let (code, person) = jupyter
        .post("api/kernels", json!({"name": "python3"}))
        .await;
    assert_eq!(code, 201, "{person}");
    let person = person["id"].as_str().expect("id").to_owned();
    // A preload that reads a variable when it is imported.
    let library = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        library.path().join("envcheck.py"),
        "import os\nSEEN = os.environ.get('MCP_REMOTE_CHECK')\n",
    )
    .expect("write module");
    let workspace = tempfile::tempdir().expect("tempdir");
    let variables =
        json!({"MCP_REMOTE_CHECK": "it's \"set\"", "KERNEL_MCP_CHECK": "k"}).to_string();
    let library_path = library.path().display().to_string();
    let root = workspace.path().display().to_string();
    let server = remote_server(
        &jupyter,
        "jupyter:python3",
        &[
            ("IPYTHON_MCP_ENVIRONMENT_VARIABLES", &variables),
            ("IPYTHON_MCP_LIBRARY_PATHS", &library_path),
            ("IPYTHON_MCP_PRELOAD_MODULES", "envcheck"),
            ("IPYTHON_MCP_WORKSPACE_ROOT", &root),
        ],
    )
    .await;
    let status = settled(&server, "default").await;
    assert_eq!(status["state"], "ready", "{status}\n{}", jupyter.log());
    let default_id = remote_id(&status);
    let read =
        "import os\n(os.environ.get('MCP_REMOTE_CHECK'), os.environ.get('KERNEL_MCP_CHECK'))";
    let expected = r#"('it\'s "set"', 'k')"#;
    let seen = server.call("execute", json!({"code": read})).await;
    assert_eq!(
        seen.structured["result"]["text/plain"], expected,
        "{seen:?}"
    );
    assert_eq!(
        seen.structured["execution_count"], 1,
        "setting them is no execution: {seen:?}"
    );
    let preload = server
        .call("execute", json!({"code": "envcheck.SEEN"}))
        .await;
    assert_eq!(
        preload.structured["result"]["text/plain"], r#"'it\'s "set"'"#,
        "set before preloads run: {preload:?}"
    );
    assert!(
        !format!("{status}").contains("it's"),
        "values are never shown: {status}"
    );

    // A person's kernel keeps its own environment.
    let spec = format!("jupyter-kernel:{person}");
    let attached = server
        .call("kernel_start", json!({"spec": spec, "kernel": "person"}))
        .await;
    assert!(attached.ok(), "{attached:?}");
    let theirs = server
        .call("execute", json!({"code": read, "kernel": "person"}))
        .await;
    assert_eq!(
        theirs.structured["result"]["text/plain"], "(None, None)",
        "{theirs:?}"
    );
    // kernel_restart restarts an attached kernel in place: the same kernel on the server, its
    // namespace emptied, its environment still its own.
    let made = server
        .call("execute", json!({"code": "mine = 1", "kernel": "person"}))
        .await;
    assert!(made.ok(), "{made:?}");
    let restarted = server
        .call("kernel_restart", json!({"kernel": "person"}))
        .await;
    assert!(restarted.ok(), "{restarted:?}");
    assert_eq!(remote_id(&restarted.structured), person, "{restarted:?}");
    assert_eq!(restarted.structured["kernel"]["remote"]["attached"], true);
    let after = server
        .call(
            "execute",
            json!({"code": "import os
('mine' in dir(), os.environ.get('MCP_REMOTE_CHECK'))", "kernel": "person"}),
        )
        .await;
    assert_eq!(
        after.structured["result"]["text/plain"], "(False, None)",
        "{after:?}"
    );
    assert!(jupyter.kernel_ids().await.contains(&person));

    // A python3 notebook runs where the default session does: on the server, in a kernel of
    // its own, with the variables.
    let created = server
        .call("notebook_create", json!({"path": "remote.ipynb"}))
        .await;
    assert!(created.ok(), "{created:?}");
    let ran = server
        .call(
            "notebook_execute",
            json!({"path": "remote.ipynb", "code": read}),
        )
        .await;
    assert!(ran.ok(), "{ran:?}");
    assert_eq!(ran.structured["result"]["text/plain"], expected, "{ran:?}");
    assert_eq!(ran.structured["saved"], true, "{ran:?}");
    assert_eq!(ran.structured["session_started"], true, "{ran:?}");
    let notebook = server
        .call("runtime_status", json!({"notebook": "remote.ipynb"}))
        .await;
    let notebook = &notebook.structured;
    assert_eq!(notebook["kernel"]["spec"], "jupyter:python3", "{notebook}");
    assert_eq!(
        notebook["kernel"]["remote"]["attached"], false,
        "{notebook}"
    );
    let notebook_id = remote_id(notebook);
    assert_ne!(notebook_id, default_id, "a kernel of its own");
    assert_ne!(notebook_id, person);
    assert!(jupyter.kernel_ids().await.contains(&notebook_id));
    let saved: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace.path().join("remote.ipynb")).expect("read"),
    )
    .expect("json");
    assert_eq!(
        saved["cells"][0]["outputs"][0]["data"]["text/plain"],
        json!([expected]),
        "{saved}"
    );
    // What a remote kernel keeps back (its helper bounds what it sends, and it has no spool
    // of ours to keep the rest) is named in the saved cell, never lost silently.
    let many = server
        .call(
            "notebook_execute",
            json!({"path": "remote.ipynb", "code": "from IPython.display import display\nfor i in range(25):\n    display(i)\nprint('x' * 100000)"}),
        )
        .await;
    assert!(many.ok(), "{many:?}");
    assert_eq!(many.structured["saved"], true, "{many:?}");
    let saved: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace.path().join("remote.ipynb")).expect("read"),
    )
    .expect("json");
    let outputs = saved["cells"][1]["outputs"].as_array().expect("outputs");
    let note = outputs.last().expect("outputs");
    assert_eq!(note["name"], "stderr", "{note}");
    assert!(
        note["text"]
            .to_string()
            .contains("the remote kernel sent only part of its output"),
        "{note}"
    );
    let closed = server
        .call("notebook_session_close", json!({"path": "remote.ipynb"}))
        .await;
    assert!(closed.ok(), "{closed:?}");
    until_kernels(&jupyter, |ids| !ids.contains(&notebook_id)).await;

    server.stop().await;
    // What the server started is deleted; the person's kernel runs on.
    until_kernels(&jupyter, |ids| ids == [person.clone()]).await;
}
