//! Remote kernels and the settings that choose the default session's kernel: configuration
//! mistakes, `--kernel` for local specs, and sessions on a real Jupyter Server started here on
//! loopback.

mod support;

use serde_json::json;
use support::{Family, Server};

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
async fn settled(server: &Server, kernel: &str) -> serde_json::Value {
    server
        .wait_until_in(kernel, |status| status["state"] != "starting")
        .await
}

#[tokio::test]
async fn a_remote_default_session_executes_and_serves_namespace_tools() {
    let jupyter = support::JupyterServer::start().await;
    let mut env: Vec<(&str, String)> = jupyter.env();
    env.push(("IPYTHON_MCP_KERNEL", "jupyter:python3".to_owned()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = Server::start_unready(Family::Handshake, &env).await;
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
    server.stop().await;
    // A kernel the session started is deleted with it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while jupyter.kernel_ids().await.contains(&kernel_id) {
        assert!(
            std::time::Instant::now() < deadline,
            "kernel {kernel_id} left running"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
