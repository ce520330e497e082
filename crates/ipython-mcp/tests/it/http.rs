//! `--transport http` end to end: the real binary on 127.0.0.1 with port 0, real HTTP, rmcp's
//! client in both protocol families, and raw requests for what a well-behaved client never
//! sends (no token, a wrong one, a foreign Host or Origin).

use crate::support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{ClientConfig, ProtocolVersion, ServerNotification, SubscriptionFilter};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt as _, NotificationContext, RunningService,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient};
use serde_json::json;
use support::{call_peer, client_config, Family};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};

const TOKEN: &str = "test-token-0123456789abcdef";

/// The stable tools, as over stdio: HTTP serves the same surface.
use support::TOOLS;

fn command(env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ipython-mcp"));
    command
        .args(["--transport", "http", "--port", "0"])
        .args(args)
        .env("IPYTHON_MCP_CACHE_DIR", support::cache_dir())
        .env("IPYTHON_MCP_LOG", "warn")
        .env("IPYTHON_MCP_SPARE_KERNELS", "0")
        // A kernel start on a loaded 2-core machine can exceed the 10 s default.
        .env("IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS", "120")
        // These tests read typed results (see support::command_for).
        .env("IPYTHON_MCP_STRUCTURED_OUTPUT", "always")
        .env_remove("VIRTUAL_ENV")
        .env_remove("IPYTHON_MCP_PYTHON")
        .env_remove("IPYTHON_MCP_HTTP_TOKEN")
        .env_remove("IPYTHON_MCP_HTTP_TOKEN_FILE")
        .env_remove("IPYTHON_MCP_TEST_MODE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

struct HttpServer {
    child: Child,
    url: String,
    address: SocketAddr,
    /// The token the server printed, when it generated one.
    printed_token: Option<String>,
    /// Everything the server wrote to stderr so far.
    stderr: Arc<Mutex<Vec<String>>>,
}

impl HttpServer {
    /// Starts the server and waits for the line with its URL (the kernel starts in the
    /// background; tools wait for it).
    async fn start(env: &[(&str, &str)]) -> HttpServer {
        let mut child = command(env, &[]).spawn().expect("spawn ipython-mcp");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut url = None;
        let mut printed_token = None;
        let deadline = Instant::now() + Duration::from_secs(60);
        while url.is_none() || (printed_token.is_none() && !has_token(env)) {
            let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
                .await
                .expect("the server prints its URL at once")
                .expect("read stderr")
                .expect("server exited before printing its URL");
            if let Some(rest) = line.strip_prefix("ipython-mcp: serving MCP over HTTP at ") {
                url = Some(rest.trim().to_owned());
            }
            if let Some(rest) = line.split("'Authorization: Bearer ").nth(1) {
                printed_token = rest.split('\'').next().map(str::to_owned);
            }
            stderr.lock().expect("lock").push(line);
        }
        let kept = Arc::clone(&stderr);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("server: {line}");
                kept.lock().expect("lock").push(line);
            }
        });
        let url = url.expect("url");
        let address = url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .parse()
            .expect("socket address in the URL");
        HttpServer {
            child,
            url,
            address,
            printed_token,
            stderr,
        }
    }

    async fn connect(
        &self,
        family: Family,
        token: Option<&str>,
    ) -> RunningService<RoleClient, ClientConfig> {
        self.connect_with(family, token, client_config(family))
            .await
    }

    async fn connect_with<H: ClientHandler>(
        &self,
        family: Family,
        token: Option<&str>,
        handler: H,
    ) -> RunningService<RoleClient, H> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url.clone());
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        ipython_mcp_upstream::install_crypto_provider();
        let transport = StreamableHttpClientTransport::from_config(config);
        let lifecycle = match family {
            Family::Handshake => ClientLifecycleMode::Initialize,
            Family::Modern => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        };
        tokio::time::timeout(
            Duration::from_secs(60),
            handler.serve_with_lifecycle(transport, lifecycle),
        )
        .await
        .expect("connect in time")
        .expect("connect")
    }

    fn stderr(&self) -> String {
        self.stderr.lock().expect("lock").join("\n")
    }

    /// SIGTERM, then the exit status (bounded).
    async fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("pid") as i32;
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .expect("the server exits promptly after SIGTERM")
            .expect("wait")
    }
}

fn has_token(env: &[(&str, &str)]) -> bool {
    env.iter().any(|(key, value)| {
        *key == "IPYTHON_MCP_HTTP_TOKEN"
            || *key == "IPYTHON_MCP_HTTP_TOKEN_FILE"
            || (*key == "IPYTHON_MCP_TEST_MODE" && *value == "conformance")
    })
}

/// Waits until the default kernel has started (provisioning on a fresh machine takes a while).
async fn wait_ready(client: &RunningService<RoleClient, impl ClientHandler>) {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let status = call_peer(client.peer(), "runtime_status", json!({})).await;
        if status.structured["state"] != "starting" {
            assert_eq!(
                status.structured["state"], "ready",
                "{:?}",
                status.structured
            );
            return;
        }
        assert!(Instant::now() < deadline, "kernel still starting");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn execute(
    client: &RunningService<RoleClient, impl ClientHandler>,
    code: &str,
) -> support::ToolResult {
    call_peer(client.peer(), "execute", json!({ "code": code })).await
}

fn result_text(result: &support::ToolResult) -> String {
    result.structured["result"]["text/plain"]
        .as_str()
        .unwrap_or_else(|| panic!("a result: {:?}", result.structured))
        .to_owned()
}

/// One raw HTTP/1.1 POST of an `initialize` to `/mcp` (or `path`); returns the status code and
/// the response head.
async fn raw_post(address: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}
    })
    .to_string();
    let (status, head, _stream) = raw_request(address, "POST", path, headers, &body).await;
    (status, head)
}

/// The `Mcp-Session-Id` a raw response head carries.
fn session_id(head: &str) -> String {
    head.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .expect("a session id")
}

/// One raw HTTP/1.1 request; returns the status, the response head and the open connection
/// (positioned at the body).
async fn raw_request(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, tokio::net::TcpStream) {
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str(&format!("Host: {address}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut byte))
            .await
            .expect("response in time")
            .expect("read");
        if read == 0 {
            break;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {head:?}"));
    (status, head, stream)
}

#[tokio::test]
async fn both_protocol_families_share_the_default_kernel_over_http() {
    let server = HttpServer::start(&[("IPYTHON_MCP_HTTP_TOKEN", TOKEN)]).await;
    assert!(
        server.printed_token.is_none(),
        "a configured token is never printed"
    );
    assert!(!server.stderr().contains(TOKEN));
    let handshake = server.connect(Family::Handshake, Some(TOKEN)).await;
    let modern = server.connect(Family::Modern, Some(TOKEN)).await;
    assert_eq!(
        handshake
            .peer()
            .peer_info()
            .map(|info| info.protocol_version.to_string()),
        Some("2025-11-25".to_owned())
    );
    for client in [&handshake, &modern] {
        let mut names: Vec<String> = client
            .peer()
            .list_all_tools()
            .await
            .expect("tools/list")
            .into_iter()
            .map(|tool| tool.name.to_string())
            .collect();
        names.sort();
        assert_eq!(
            names, TOOLS,
            "the same tools as over stdio, no test fixtures"
        );
    }
    wait_ready(&handshake).await;

    let started = Instant::now();
    let defined = execute(&handshake, "shared = 41").await;
    assert!(defined.ok(), "{:?}", defined.structured);
    let environment = execute(
        &handshake,
        "import os\nstr(os.environ.get('IPYTHON_MCP_HTTP_TOKEN'))",
    )
    .await;
    assert_eq!(
        result_text(&environment),
        "'None'",
        "kernels do not inherit the token"
    );
    let seen = execute(&modern, "shared + 1").await;
    assert_eq!(
        result_text(&seen),
        "42",
        "a modern client sees a handshake client's names"
    );
    execute(&modern, "from_modern = 'yes'").await;
    let back = execute(&handshake, "from_modern").await;
    assert_eq!(result_text(&back), "'yes'");
    eprintln!(
        "four execute round trips over HTTP: {:?}",
        started.elapsed()
    );

    // Round-trip latency of a trivial call over HTTP (both families).
    for (name, client) in [("handshake", &handshake), ("2026-07-28", &modern)] {
        let mut times = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            call_peer(client.peer(), "runtime_status", json!({})).await;
            times.push(started.elapsed());
        }
        times.sort();
        eprintln!(
            "runtime_status over HTTP ({name}): p50 {:?}, max {:?}",
            times[10], times[19]
        );
    }

    let status = server.terminate().await;
    assert!(status.success(), "exit status {status}");
}

#[tokio::test]
async fn a_tasks_client_gets_background_executions_as_tasks_over_http() {
    let server = HttpServer::start(&[("IPYTHON_MCP_HTTP_TOKEN", TOKEN)]).await;
    for family in [Family::Handshake, Family::Modern] {
        let mut config = client_config(family);
        config.capabilities = rmcp::model::ClientCapabilities::builder()
            .enable_tasks()
            .build();
        let client = server.connect_with(family, Some(TOKEN), config).await;
        wait_ready(&client).await;
        support::tasks_follow_background_executions(client.peer()).await;
        let _ = client.cancel().await;
    }
    let status = server.terminate().await;
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn the_capabilities_resource_says_the_transport_is_http_over_http() {
    let server = HttpServer::start(&[("IPYTHON_MCP_HTTP_TOKEN", TOKEN)]).await;
    for family in [Family::Handshake, Family::Modern] {
        let client = server.connect(family, Some(TOKEN)).await;
        let read = client
            .peer()
            .read_resource(rmcp::model::ReadResourceRequestParams::new(
                "ipython-mcp://capabilities",
            ))
            .await
            .expect("read the capabilities");
        let text = match &read.contents[0] {
            rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
            other => panic!("text contents: {other:?}"),
        };
        let capabilities: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(capabilities["transport"]["active"], "http", "{family:?}");
        assert_eq!(
            capabilities["transport"]["supported"],
            json!(["stdio", "http", "json-lines"])
        );
    }
    let status = server.terminate().await;
    assert!(status.success(), "exit status {status}");
}

#[tokio::test]
async fn requests_without_the_right_token_or_from_a_foreign_host_or_origin_are_refused() {
    let server = HttpServer::start(&[]).await;
    let token = server
        .printed_token
        .clone()
        .expect("a generated token is printed");
    assert_eq!(token.len(), 64, "256 random bits, hex");
    let bearer = format!("Bearer {token}");
    let address = server.address;

    let (status, head) = raw_post(address, "/mcp", &[]).await;
    assert_eq!(status, 401, "no token: {head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{head}"
    );
    let wrong = format!("Bearer {}x", &token[..63]);
    assert_eq!(
        raw_post(address, "/mcp", &[("Authorization", &wrong)])
            .await
            .0,
        401,
        "wrong token"
    );
    let prefix = format!("Bearer {}", &token[..32]);
    assert_eq!(
        raw_post(address, "/mcp", &[("Authorization", &prefix)])
            .await
            .0,
        401,
        "a prefix"
    );
    let basic = format!("Basic {token}");
    assert_eq!(
        raw_post(address, "/mcp", &[("Authorization", &basic)])
            .await
            .0,
        401,
        "not bearer"
    );
    assert_eq!(
        raw_post(address, "/elsewhere", &[]).await.0,
        401,
        "every path needs the token"
    );

    let (status, head) = raw_post(address, "/mcp", &[("Authorization", &bearer)]).await;
    assert_eq!(status, 200, "{head}");
    let lowercase_scheme = format!("bearer {token}");
    assert_eq!(
        raw_post(address, "/mcp", &[("Authorization", &lowercase_scheme)])
            .await
            .0,
        200
    );
    let localhost = format!("localhost:{}", address.port());
    assert_eq!(
        raw_post(
            address,
            "/mcp",
            &[("Authorization", &bearer), ("Host", &localhost)]
        )
        .await
        .0,
        200
    );
    assert_eq!(
        raw_post(
            address,
            "/mcp",
            &[("Authorization", &bearer), ("Host", "evil.example")]
        )
        .await
        .0,
        403,
        "DNS rebinding: a foreign Host"
    );
    assert_eq!(
        raw_post(
            address,
            "/mcp",
            &[("Authorization", &bearer), ("Host", "evil.example:80")]
        )
        .await
        .0,
        403
    );
    assert_eq!(
        raw_post(
            address,
            "/mcp",
            &[
                ("Authorization", &bearer),
                ("Origin", "http://evil.example")
            ]
        )
        .await
        .0,
        403,
        "a page on another origin"
    );
    assert_eq!(
        raw_post(
            address,
            "/mcp",
            &[
                ("Authorization", &bearer),
                ("Origin", "http://localhost:3000")
            ]
        )
        .await
        .0,
        200,
        "a page on this machine"
    );

    // Real clients: none without the token, the right one with it.
    ipython_mcp_upstream::install_crypto_provider();
    let refused = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(server.url.clone()),
    );
    let attempt = tokio::time::timeout(
        Duration::from_secs(60),
        client_config(Family::Handshake)
            .serve_with_lifecycle(refused, ClientLifecycleMode::Initialize),
    )
    .await
    .expect("refused at once");
    assert!(
        attempt.is_err(),
        "a client without the token cannot connect"
    );
    let client = server.connect(Family::Modern, Some(&token)).await;
    call_peer(client.peer(), "runtime_status", json!({})).await;
    drop(client);

    let stderr = server.stderr();
    let status = server.terminate().await;
    assert!(status.success());
    assert_eq!(
        stderr.matches(&token).count(),
        1,
        "the token is printed exactly once:\n{stderr}"
    );
}

#[tokio::test]
async fn configuration_mistakes_stop_the_server_with_one_line() {
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str], &'a str);
    let cases: [Case; 5] = [
        (&[], &["--host", "0.0.0.0"], "needs --allow-remote"),
        (
            &[("IPYTHON_MCP_HTTP_TOKEN", "short")],
            &[],
            "at least 16 characters",
        ),
        (
            &[("IPYTHON_MCP_HTTP_TOKEN_FILE", "/nonexistent/token")],
            &[],
            "cannot read /nonexistent/token",
        ),
        (
            &[("IPYTHON_MCP_TEST_MODE", "yes")],
            &[],
            "IPYTHON_MCP_TEST_MODE",
        ),
        (
            &[("IPYTHON_MCP_TEST_MODE", "conformance")],
            &["--host", "0.0.0.0", "--allow-remote"],
            "refuses non-loopback",
        ),
    ];
    for (env, args, expect) in cases {
        let output = tokio::time::timeout(Duration::from_secs(60), command(env, args).output())
            .await
            .expect("exits at once")
            .expect("run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{env:?} {args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(expect), "{stderr}");
    }

    // A port already taken: one line, exit 1 (not a bad setting); the server closes the kernel
    // it had begun to start before it gives up.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("address").port().to_string();
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        Command::new(env!("CARGO_BIN_EXE_ipython-mcp"))
            .args(["--transport", "http", "--port", &port])
            .env("IPYTHON_MCP_HTTP_TOKEN", TOKEN)
            .env("IPYTHON_MCP_CACHE_DIR", support::cache_dir())
            .env("IPYTHON_MCP_SPARE_KERNELS", "0")
            // A kernel start on a loaded 2-core machine can exceed the 10 s default.
            .env("IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS", "120")
            .env("IPYTHON_MCP_LOG", "warn")
            .output(),
    )
    .await
    .expect("exits at once")
    .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot listen on 127.0.0.1:"), "{stderr}");

    // A token file works, and its token is never printed.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{TOKEN}\n")).expect("write token");
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    let server =
        HttpServer::start(&[("IPYTHON_MCP_HTTP_TOKEN_FILE", file.to_str().expect("utf-8"))]).await;
    let (status, _) = raw_post(
        server.address,
        "/mcp",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
    )
    .await;
    assert_eq!(status, 200);
    assert!(!server.stderr().contains(TOKEN));
    assert!(
        server
            .stderr()
            .contains("can be read by other users; chmod 600 it"),
        "{}",
        server.stderr()
    );
    assert!(server.terminate().await.success());
}

/// Counts `notifications/tools/list_changed` on a handshake-era connection.
#[derive(Clone)]
struct ListChangedCounter {
    count: Arc<AtomicUsize>,
    changed: Arc<tokio::sync::Notify>,
}

impl ClientHandler for ListChangedCounter {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
        self.changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        client_config(Family::Handshake)
    }
}

#[tokio::test]
async fn tools_list_changed_reaches_every_connected_client_in_both_families() {
    let server = HttpServer::start(&[
        ("IPYTHON_MCP_HTTP_TOKEN", TOKEN),
        ("IPYTHON_MCP_TEST_MODE", "fixtures"),
    ])
    .await;
    assert!(
        server.stderr().contains("TEST MODE"),
        "the test mode says so at start: {}",
        server.stderr()
    );
    let counters: Vec<ListChangedCounter> = (0..2)
        .map(|_| ListChangedCounter {
            count: Arc::new(AtomicUsize::new(0)),
            changed: Arc::new(tokio::sync::Notify::new()),
        })
        .collect();
    let mut legacy = Vec::new();
    for counter in &counters {
        legacy.push(
            server
                .connect_with(Family::Handshake, Some(TOKEN), counter.clone())
                .await,
        );
    }
    let mut listeners = Vec::new();
    let mut modern = Vec::new();
    for _ in 0..2 {
        let client = server.connect(Family::Modern, Some(TOKEN)).await;
        let subscription = client
            .peer()
            .listen(SubscriptionFilter::builder().tools_list_changed().build())
            .await
            .expect("subscriptions/listen");
        listeners.push(subscription);
        modern.push(client);
    }

    // rmcp acknowledges a subscription before the server's handler registers it: wait until
    // all four clients are registered.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let counted = call_peer(legacy[0].peer(), "test_count_clients", json!({})).await;
        if counted.text() == "4 client(s)" {
            break;
        }
        assert!(Instant::now() < deadline, "{}", counted.text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Fired from a 2026-07-28 client, then from a handshake one: everyone hears both.
    for round in 1..=2 {
        let trigger = if round == 1 {
            modern[0].peer()
        } else {
            legacy[0].peer()
        };
        let fired = call_peer(trigger, "test_trigger_tool_change", json!({})).await;
        assert!(!fired.is_error, "{:?}", fired.content);
        assert!(
            fired.text().contains("notified 4 client(s)"),
            "{}",
            fired.text()
        );
        for counter in &counters {
            let deadline = Instant::now() + Duration::from_secs(60);
            while counter.count.load(Ordering::SeqCst) < round {
                assert!(
                    Instant::now() < deadline,
                    "a handshake client missed list_changed"
                );
                let _ =
                    tokio::time::timeout(Duration::from_millis(100), counter.changed.notified())
                        .await;
            }
        }
        for subscription in &mut listeners {
            let notification = tokio::time::timeout(Duration::from_secs(60), subscription.next())
                .await
                .expect("a 2026-07-28 listener hears list_changed")
                .expect("subscription alive")
                .expect("a notification");
            assert!(
                matches!(
                    notification,
                    ServerNotification::ToolListChangedNotification(_)
                ),
                "{notification:?}"
            );
        }
    }

    // A client that leaves is dropped from the list; the others still hear it.
    let gone = legacy.pop().expect("client");
    gone.cancel().await.expect("close");
    let fired = call_peer(modern[1].peer(), "test_trigger_tool_change", json!({})).await;
    assert!(!fired.is_error);
    let deadline = Instant::now() + Duration::from_secs(60);
    while counters[0].count.load(Ordering::SeqCst) < 3 {
        assert!(
            Instant::now() < deadline,
            "the remaining handshake client missed list_changed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for subscription in &mut listeners {
        tokio::time::timeout(Duration::from_secs(60), subscription.next())
            .await
            .expect("still delivered")
            .expect("alive");
    }
    assert!(server.terminate().await.success());
}

#[tokio::test]
async fn a_client_that_disconnects_mid_call_does_not_disturb_the_others() {
    // A cooperative stop ends as soon as the kernel answers, so a long grace costs nothing and a
    // slow machine cannot turn the abandoned cell's stop into a kill (which would lose `kept`).
    let server = HttpServer::start(&[
        ("IPYTHON_MCP_HTTP_TOKEN", TOKEN),
        ("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "60"),
    ])
    .await;
    let stayer = server.connect(Family::Modern, Some(TOKEN)).await;
    let other = server.connect(Family::Handshake, Some(TOKEN)).await;
    wait_ready(&stayer).await;
    assert!(execute(&stayer, "kept = 6").await.ok());

    for family in [Family::Handshake, Family::Modern] {
        let leaver = server.connect(family, Some(TOKEN)).await;
        let peer = leaver.peer().clone();
        let call = tokio::spawn(async move {
            // Its own deadline is far off: only the disconnect can stop it in time.
            let arguments = json!({"code": "import time\ntime.sleep(600)", "timeout_seconds": 600});
            let arguments = arguments.as_object().cloned().expect("object");
            peer.call_tool(
                rmcp::model::CallToolRequestParams::new("execute").with_arguments(arguments),
            )
            .await
        });
        // Wait until the leaver's cell is running, then drop the connection under it.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = call_peer(stayer.peer(), "runtime_status", json!({})).await;
            if status.structured["operation_active"] == true {
                break;
            }
            assert!(Instant::now() < deadline, "the long cell never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = Instant::now();
        call.abort();
        drop(leaver);

        // The other clients carry on at once, with their names intact.
        let (first, second) =
            tokio::join!(execute(&stayer, "kept * 7"), execute(&other, "kept + 36"));
        assert_eq!(result_text(&first), "42", "{:?}", first.structured);
        assert_eq!(result_text(&second), "42");
        let waited = left.elapsed();
        eprintln!("{family:?} client left mid-call; the others were answered after {waited:?}");
        assert!(
            waited < Duration::from_secs(120),
            "the abandoned cell was stopped, not waited for ({waited:?})"
        );
    }

    // A handshake client that dies without closing its session (no DELETE, no cancel): its
    // TCP connections just drop (raw requests, so nothing is sent on its behalf). The MCP spec
    // says a dropped stream is not a cancellation (the client may resume), so its call runs on
    // within its deadline; the others queue behind it and are answered right after, correctly.
    let bearer = format!("Bearer {TOKEN}");
    let (status, head) = raw_post(server.address, "/mcp", &[("Authorization", &bearer)]).await;
    assert_eq!(status, 200, "{head}");
    let session = session_id(&head);
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    raw_request(server.address, "POST", "/mcp", &headers, &initialized).await;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "execute", "arguments": {"code": "import time\ntime.sleep(3)"}}})
    .to_string();
    let (status, head, stream) = raw_request(server.address, "POST", "/mcp", &headers, &call).await;
    assert_eq!(status, 200, "{head}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while call_peer(stayer.peer(), "runtime_status", json!({}))
        .await
        .structured["operation_active"]
        != true
    {
        assert!(Instant::now() < deadline, "the long cell never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left = Instant::now();
    drop(stream);
    let answer = execute(&stayer, "kept * 7").await;
    assert_eq!(result_text(&answer), "42", "{:?}", answer.structured);
    let waited = left.elapsed();
    eprintln!(
        "a crashed handshake client's call ran out; the others were answered after {waited:?}"
    );
    assert!(waited < Duration::from_secs(60), "{waited:?}");
    assert!(server.terminate().await.success());
}

/// A session's `DELETE` answers 204 (the official Python SDK warns on anything but 200 or 204,
/// at every close) and the session is gone after it.
#[tokio::test]
async fn closing_a_session_answers_no_content_and_forgets_it() {
    let server = HttpServer::start(&[("IPYTHON_MCP_HTTP_TOKEN", TOKEN)]).await;
    let bearer = format!("Bearer {TOKEN}");
    let (status, head) = raw_post(server.address, "/mcp", &[("Authorization", &bearer)]).await;
    assert_eq!(status, 200, "{head}");
    let session = session_id(&head);
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let (status, head, _) = raw_request(server.address, "DELETE", "/mcp", &headers, "").await;
    assert_eq!(status, 204, "{head}");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let (status, head, _) =
        raw_request(server.address, "POST", "/mcp", &headers, &initialized).await;
    assert_eq!(status, 404, "the closed session is gone: {head}");
    assert!(server.terminate().await.success());
}

#[tokio::test]
async fn sigterm_closes_the_streams_and_the_kernels() {
    let server = HttpServer::start(&[("IPYTHON_MCP_HTTP_TOKEN", TOKEN)]).await;
    let client = server.connect(Family::Handshake, Some(TOKEN)).await;
    wait_ready(&client).await;
    let status = call_peer(client.peer(), "runtime_status", json!({})).await;
    let kernel_pid = status.structured["kernel"]["pid"]
        .as_i64()
        .expect("kernel pid") as i32;

    // A raw handshake-era session with its standalone SSE stream open.
    let bearer = format!("Bearer {TOKEN}");
    let (status, head) = raw_post(server.address, "/mcp", &[("Authorization", &bearer)]).await;
    assert_eq!(status, 200, "{head}");
    let session = session_id(&head);
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let (status, head, _) =
        raw_request(server.address, "POST", "/mcp", &headers, &initialized).await;
    assert_eq!(status, 202, "{head}");
    let (status, head, mut stream) = raw_request(server.address, "GET", "/mcp", &headers, "").await;
    assert_eq!(status, 200, "{head}");

    // And a call in flight when the signal comes.
    let peer = client.peer().clone();
    let _running = tokio::spawn(async move {
        let arguments = json!({"code": "import time\ntime.sleep(30)"})
            .as_object()
            .cloned()
            .expect("object");
        peer.call_tool(rmcp::model::CallToolRequestParams::new("execute").with_arguments(arguments))
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while call_peer(client.peer(), "runtime_status", json!({}))
        .await
        .structured["operation_active"]
        != true
    {
        assert!(Instant::now() < deadline, "the cell never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let started = Instant::now();
    let exit = server.terminate().await;
    assert!(exit.success(), "exit status {exit}");
    eprintln!(
        "SIGTERM to exit, with a cell running: {:?}",
        started.elapsed()
    );
    support::wait_until_gone(kernel_pid).await;
    // The SSE stream was closed, not left hanging.
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut rest))
        .await
        .expect("the stream ends with the server")
        .ok();
}

#[tokio::test]
async fn a_non_loopback_listener_needs_allow_remote_and_still_needs_the_token() {
    // Refused without the flag (see configuration_mistakes_…); with it, the server starts, and
    // the token and the Host check still apply. Only loopback traffic is sent.
    let mut child = command(
        &[("IPYTHON_MCP_HTTP_TOKEN", TOKEN)],
        &["--host", "0.0.0.0", "--allow-remote"],
    )
    .spawn()
    .expect("spawn");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let url = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("URL printed at once")
            .expect("read")
            .expect("server running");
        if let Some(url) = line.strip_prefix("ipython-mcp: serving MCP over HTTP at ") {
            break url.trim().to_owned();
        }
    };
    let every_interface: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .expect("address");
    assert!(every_interface.ip().is_unspecified(), "{url}");
    let address = SocketAddr::from(([127, 0, 0, 1], every_interface.port()));
    let bearer = format!("Bearer {TOKEN}");
    assert_eq!(
        raw_post(address, "/mcp", &[]).await.0,
        401,
        "still no entry without the token"
    );
    assert_eq!(
        raw_post(address, "/mcp", &[("Authorization", &bearer)])
            .await
            .0,
        200
    );
    let unknown_name = format!("0.0.0.0:{}", address.port());
    assert_eq!(
        raw_post(
            address,
            "/mcp",
            &[("Authorization", &bearer), ("Host", &unknown_name)]
        )
        .await
        .0,
        403,
        "a Host that is not allowed"
    );
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(child.id().expect("pid") as i32, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("exit")
        .expect("wait");
    assert!(status.success());
}
