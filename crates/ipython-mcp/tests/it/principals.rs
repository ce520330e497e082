//! One server, many people: the real binary over HTTP with a principals file, driven by the
//! official Python MCP SDK as two principals (one per protocol family) and a second client of
//! one of them. What one principal defines, starts, registers or writes, the other neither
//! sees nor reaches; SIGHUP re-reads the file (a rotated token ends the sessions opened with
//! the old one, a removed principal is refused and their kernels stop); no token ever reaches
//! the logs.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::sync::watch;

const ALICE: &str = "alice-token-0123456789abcdef";
const ALICE_ROTATED: &str = "alice-rotated-9876543210fedcba";
const CAROL: &str = "carol-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef";

fn sha256_hex(token: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn write_principals(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write the principals file");
    let private = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600);
    std::fs::set_permissions(path, private).expect("chmod 600");
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/principals_client.py")
}

/// Every line the server wrote to stderr so far, shared with the test as it grows.
struct Stderr {
    lines: watch::Receiver<Vec<String>>,
}

impl Stderr {
    fn follow(stderr: tokio::process::ChildStderr) -> Stderr {
        let (sender, lines) = watch::channel(Vec::new());
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                sender.send_modify(|lines| lines.push(line));
            }
        });
        Stderr { lines }
    }

    /// Waits for a line containing `needle` (bounded: the test fails, never hangs) and
    /// returns it.
    async fn wait_for(&mut self, needle: &str) -> String {
        let found = tokio::time::timeout(
            Duration::from_secs(120),
            self.lines
                .wait_for(|lines| lines.iter().any(|line| line.contains(needle))),
        )
        .await
        .unwrap_or_else(|_| panic!("the server never wrote {needle:?}"))
        .expect("stderr followed");
        found
            .iter()
            .find(|line| line.contains(needle))
            .cloned()
            .expect("found")
    }

    fn all(&self) -> String {
        self.lines.borrow().join("\n")
    }
}

fn is_error(seen: &Value) -> bool {
    seen["is_error"] == true
}

fn text(seen: &Value) -> &str {
    seen["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn principals_each_get_their_own_kernels_tools_and_notebooks() {
    let (python, deps) = support::python_with("mcp==2.3.0", "mcp", "mcp-sdk-deps").await;
    let home = tempfile::tempdir().expect("tempdir");
    let workspace = home.path().join("workspace");
    std::fs::create_dir(&workspace).expect("workspace");
    let file = home.path().join("principals");
    write_principals(
        &file,
        &format!(
            "# the team\nalice {ALICE}\nbob sha256:{} max_kernels=1\n",
            sha256_hex(BOB)
        ),
    );
    let mut command = principals_command(&file, &workspace);
    command.env("IPYTHON_MCP_LOG", "debug");
    let (mut server, mut stderr, url) = serve(command).await;

    // The script's flag file, where a principal's kernel can see it (not the temp directory:
    // a principal's kernels have a `/tmp` of their own).
    let flags = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("flags");
    let mut client = tokio::process::Command::new(&python)
        .env("PRINCIPALS_FLAG_DIR", flags.path())
        .arg(script())
        .args([&url, ALICE, BOB])
        .arg(&python)
        .env("PYTHONPATH", &deps)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run the SDK client");
    let mut stdin = client.stdin.take().expect("stdin");
    let mut out = tokio::io::BufReader::new(client.stdout.take().expect("stdout")).lines();
    let mut phase = async || -> Value {
        let line = tokio::time::timeout(Duration::from_secs(600), out.next_line())
            .await
            .expect("the SDK client reports")
            .expect("read")
            .expect("the SDK client printed a phase");
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}"))
    };
    let before = phase().await;
    assert_eq!(before["phase"], "before_reload", "{before}");

    // Each principal has its own `default`.
    assert!(
        text(&before["alice_defines"]).contains("alice-only"),
        "{before}"
    );
    assert!(text(&before["bob_looks"]).contains("absent"), "{before}");
    // No token, and not even the principals file's path, reaches a kernel's environment.
    assert!(
        text(&before["kernel_env_leaks"]).ends_with("[]"),
        "{}",
        before["kernel_env_leaks"]
    );
    // Kernels: alice's are hers alone; another principal's is answered like no kernel.
    assert!(!is_error(&before["alice_start"]), "{before}");
    assert!(text(&before["alice_list"]).contains("ak"), "{before}");
    let bob_list = before["bob_list"]["structured"].to_string();
    assert!(
        !bob_list.contains("\"ak\""),
        "bob sees alice's kernel: {bob_list}"
    );
    assert!(
        !before["bob_status"].to_string().contains("\"ak\""),
        "{before}"
    );
    for (theirs, nobodys) in [
        ("bob_uses_alices_kernel", "bob_uses_no_kernel"),
        ("bob_stops_alices_kernel", "bob_stops_no_kernel"),
    ] {
        assert!(is_error(&before[theirs]), "{theirs}: {before}");
        let theirs_seen = before[theirs]
            .to_string()
            .replace("\\\"ak\\\"", "\\\"zz\\\"");
        let theirs_seen = theirs_seen.replace("'ak'", "'zz'").replace(" ak", " zz");
        assert_eq!(
            theirs_seen,
            before[nobodys].to_string(),
            "another principal's kernel must be answered exactly like none"
        );
    }
    // Quotas from the file: bob may have one kernel (his default).
    assert!(is_error(&before["bob_start"]), "{before}");
    assert_eq!(
        before["bob_start"]["structured"]["error"]["code"], "limit_exceeded",
        "{before}"
    );
    // Dynamic tools: alice's, announced to her clients only.
    assert!(!is_error(&before["alice_registers"]), "{before}");
    assert_eq!(before["alice_heard_list_changed"], true, "{before}");
    assert_eq!(before["bob_heard_list_changed"], false, "{before}");
    let has = |key: &str, tool: &str| {
        before[key]
            .as_array()
            .expect("tool names")
            .iter()
            .any(|name| name == tool)
    };
    assert!(
        has("alice_tools", "shout") && !has("bob_tools", "shout"),
        "{before}"
    );
    assert!(text(&before["alice_calls"]).contains("HI"), "{before}");
    let unknown = |seen: &Value, tool: &str| seen.to_string().replace(tool, "TOOL");
    assert_eq!(
        unknown(&before["bob_calls"], "shout"),
        unknown(&before["bob_calls_unknown"], "nothing_here"),
        "another principal's tool must be answered exactly like none"
    );
    // Notebooks: a directory each under the workspace root.
    assert!(!is_error(&before["alice_creates"]), "{before}");
    assert!(workspace.join("alice/mine.ipynb").is_file());
    assert!(!workspace.join("bob/mine.ipynb").exists());
    assert!(is_error(&before["bob_reads_alices"]), "{before}");
    assert_eq!(
        before["bob_reads_alices"]["structured"]["error"]["code"],
        before["bob_reads_none"]["structured"]["error"]["code"],
        "{before}"
    );
    assert!(is_error(&before["bob_climbs"]), "{before}");
    // Alice's kernel hanging, then dying, disturbs none of bob's calls.
    assert!(
        text(&before["bob_while_alice_hangs"]).contains("42"),
        "{before}"
    );
    assert!(
        text(&before["alice_still_running"]).contains("still running"),
        "{before}"
    );
    assert!(
        text(&before["alice_released"]).contains("released"),
        "{before}"
    );
    assert!(is_error(&before["alice_dies"]), "{before}");
    assert!(
        text(&before["bob_after_alice_died"]).contains("42"),
        "{before}"
    );
    assert!(!is_error(&before["alice_keeps"]), "{before}");
    // Background executions: another principal's is answered like none.
    let id = before["alice_execution_id"].as_str().expect("id");
    let other = before["bob_reads_no_execution_id"].as_str().expect("id");
    assert!(is_error(&before["bob_reads_alices_execution"]), "{before}");
    assert_eq!(
        before["bob_reads_alices_execution"]
            .to_string()
            .replace(id, "ID"),
        before["bob_reads_no_execution"]
            .to_string()
            .replace(other, "ID"),
        "another principal's execution must be answered exactly like none"
    );
    // MCP sessions: another principal's is answered like one that does not exist.
    assert_eq!(before["bob_names_alices_session"], 404, "{before}");
    assert_eq!(before["bob_names_no_session"], 404, "{before}");
    assert_eq!(before["alice_names_her_session"], 200, "{before}");
    assert_eq!(before["wrong_token_refused"], true, "{before}");
    assert_eq!(before["no_token_refused"], true, "{before}");

    // SIGHUP: alice's token rotates, bob leaves.
    write_principals(&file, &format!("alice {ALICE_ROTATED}\n"));
    let pid = server.id().expect("pid") as i32;
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGHUP) };
    stderr.wait_for("principals file reloaded").await;
    stdin
        .write_all(format!("{ALICE_ROTATED} {BOB}\n").as_bytes())
        .await
        .expect("tell the client");
    stdin.flush().await.expect("flush");
    let after = phase().await;
    assert_eq!(after["phase"], "after_reload", "{after}");
    assert_eq!(after["alice_old_raw_session"], 404, "{after}");
    assert_eq!(after["old_alice_session_works"], false, "{after}");
    assert_eq!(after["old_alice_token_refused"], true, "{after}");
    assert_eq!(after["bob_refused"], true, "{after}");
    // A rotated token keeps the principal: alice's kernel and its variables are still there.
    assert!(
        text(&after["alice_keeps_her_state"]).contains("alice-kept"),
        "{after}"
    );
    stderr
        .wait_for("principal removed: closing their sessions")
        .await;
    let status = tokio::time::timeout(Duration::from_secs(600), client.wait())
        .await
        .expect("the SDK client ends")
        .expect("wait");
    assert!(status.success(), "the SDK client failed");

    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(60), server.wait())
        .await
        .expect("exit after SIGTERM")
        .expect("wait");
    assert!(status.success());
    let logs = stderr.all();
    for secret in [
        ALICE,
        ALICE_ROTATED,
        BOB,
        &sha256_hex(BOB),
        &sha256_hex(ALICE),
    ] {
        assert!(!logs.contains(secret), "a token reached the logs");
    }
    // Every call's log lines name the principal.
    let calls: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("tool call"))
        .collect();
    assert!(!calls.is_empty(), "no call was logged:\n{logs}");
    for line in calls {
        assert!(
            line.contains("principal{name=alice}") || line.contains("principal{name=bob}"),
            "a call logged without its principal: {line}"
        );
    }
}

/// Starts the server with this principals file (and this single token, if any), expecting it
/// to refuse at once.
fn refused_start(file: &Path, token: Option<&str>) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ipython-mcp"));
    command
        .args(["--transport", "http", "--port", "0"])
        .env("IPYTHON_MCP_HTTP_PRINCIPALS_FILE", file)
        .env("IPYTHON_MCP_CACHE_DIR", support::cache_dir())
        .env_remove("IPYTHON_MCP_HTTP_TOKEN")
        .stdin(Stdio::null());
    if let Some(token) = token {
        command.env("IPYTHON_MCP_HTTP_TOKEN", token);
    }
    command.output().expect("run")
}

#[test]
fn a_bad_principals_file_stops_the_server_with_one_line_naming_the_line() {
    let home = tempfile::tempdir().expect("tempdir");
    let file = home.path().join("principals");
    let cases = [
        (
            format!("alice {ALICE}\nbob bobtooshort\n"),
            "line 2",
            "at least 16",
        ),
        (
            format!("alice {ALICE}\nalice {BOB}\n"),
            "line 2",
            "named twice",
        ),
        (
            format!("alice {ALICE}\nALICE {BOB}\n"),
            "line 2",
            "differ only in case",
        ),
        ("ali/ce x\n".to_owned(), "line 1", "letters, digits"),
        ("# nobody\n".to_owned(), "", "names no principal"),
    ];
    for (text, line, problem) in cases {
        write_principals(&file, &text);
        let output = refused_start(&file, None);
        assert_eq!(output.status.code(), Some(2), "{text}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {stderr}");
        assert!(
            lines[0].contains("IPYTHON_MCP_HTTP_PRINCIPALS_FILE"),
            "{stderr}"
        );
        assert!(lines[0].contains(&file.display().to_string()), "{stderr}");
        assert!(
            lines[0].contains(line) && lines[0].contains(problem),
            "{stderr}"
        );
        assert!(
            !stderr.contains(ALICE) && !stderr.contains(BOB) && !stderr.contains("bobtooshort"),
            "a token reached stderr: {stderr}"
        );
    }
    // One token source at a time.
    write_principals(&file, &format!("alice {ALICE}\n"));
    let output = refused_start(&file, Some(BOB));
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not both"), "{stderr}");
    assert!(!stderr.contains(BOB), "{stderr}");
}

/// An rmcp client of the server at `url` with this bearer token.
async fn connect(
    url: &str,
    token: &str,
    family: support::Family,
) -> rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig> {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token);
    ipython_mcp_upstream::install_crypto_provider();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
    let lifecycle = match family {
        support::Family::Handshake => ClientLifecycleMode::Initialize,
        support::Family::Modern => ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        },
    };
    tokio::time::timeout(
        Duration::from_secs(60),
        support::client_config(family).serve_with_lifecycle(transport, lifecycle),
    )
    .await
    .expect("connect in time")
    .expect("connect")
}

/// With `IPYTHON_MCP_KERNEL=jupyter:…`, every principal's kernels run on the gateway, each
/// started with its principal's name as `KERNEL_USERNAME`, and kept apart there as locally.
#[tokio::test]
async fn principals_kernels_on_a_kernel_gateway_are_tagged_and_kept_apart() {
    use serde_json::json;
    use support::{call_peer, Family};
    let gateway = support::KernelGateway::start().await;
    let home = tempfile::tempdir().expect("tempdir");
    let file = home.path().join("principals");
    write_principals(&file, &format!("alice {ALICE}\nbob {BOB}\n"));
    let mut command = principals_command(&file, home.path());
    command
        .env("IPYTHON_MCP_KERNEL", "jupyter:python3")
        .env("IPYTHON_MCP_STRUCTURED_OUTPUT", "always")
        .env("IPYTHON_MCP_LOG", "info");
    for (key, value) in gateway.env() {
        command.env(key, value);
    }
    let (mut server, _stderr, url) = serve(command).await;
    let alice = connect(&url, ALICE, Family::Handshake).await;
    let bob = connect(&url, BOB, Family::Modern).await;
    for client in [&alice, &bob] {
        // Each principal's default kernel starts on the gateway at their first request.
        let ready = tokio::time::timeout(Duration::from_secs(300), async {
            loop {
                let status = call_peer(client.peer(), "runtime_status", json!({})).await;
                if status.structured["state"] != "starting" {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("the default kernel starts");
        assert_eq!(
            ready.structured["state"],
            "ready",
            "{ready:?}\n{}",
            gateway.log()
        );
    }
    let tagged =
        "import os\n(os.environ.get('KERNEL_USERNAME'), globals().get('secret', 'absent'))";
    let defined = call_peer(alice.peer(), "execute", json!({"code": "secret = 'a'"})).await;
    assert!(!defined.is_error, "{defined:?}\n{}", gateway.log());
    let seen_by_alice = call_peer(alice.peer(), "execute", json!({ "code": tagged })).await;
    let seen_by_bob = call_peer(bob.peer(), "execute", json!({ "code": tagged })).await;
    assert_eq!(
        seen_by_alice.structured["result"]["text/plain"], "('alice', 'a')",
        "{seen_by_alice:?}"
    );
    assert_eq!(
        seen_by_bob.structured["result"]["text/plain"], "('bob', 'absent')",
        "{seen_by_bob:?}"
    );
    let alice_status = call_peer(alice.peer(), "runtime_status", json!({})).await;
    let bob_status = call_peer(bob.peer(), "runtime_status", json!({})).await;
    let remote_id = |status: &support::ToolResult| {
        status.structured["kernel"]["remote"]["kernel_id"]
            .as_str()
            .unwrap_or_else(|| panic!("a remote kernel: {status:?}"))
            .to_owned()
    };
    assert_ne!(remote_id(&alice_status), remote_id(&bob_status));
    alice.cancel().await.expect("close alice");
    bob.cancel().await.expect("close bob");
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(server.id().expect("pid") as i32, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(60), server.wait())
        .await
        .expect("exit after SIGTERM")
        .expect("wait");
    assert!(status.success());
}

/// What a kernel of the server sees of the server's own process: `/proc/<pid>/environ` and
/// `/proc/<pid>/cmdline`, each as text or `unreadable`.
fn reads_of_the_server(pid: u32) -> String {
    format!(
        "import os\nfor name in ('environ', 'cmdline'):\n    try:\n        print(name, open(f'/proc/{pid}/{{name}}', 'rb').read().decode('utf-8', 'replace').replace('\\0', ' '))\n    except OSError as error:\n        print(name, 'unreadable', error.errno)\n"
    )
}

/// Under principals with a Jupyter server: another principal's remote kernels are neither
/// listed nor attachable (answered exactly like an id that does not exist), `jupyter:`
/// notebooks live in each principal's directory there and no path leaves it, a principal
/// workspace the server did not make is refused, a kernel never runs a module planted in its
/// workspace at start, and no kernel reads the server's secrets from its `/proc` entries.
#[tokio::test]
async fn principals_keep_remote_kernels_notebooks_workspaces_and_secrets_apart() {
    use rmcp::model::ReadResourceRequestParams;
    use serde_json::json;
    use support::{call_peer, Family};
    let jupyter = support::JupyterServer::start().await;
    let home = tempfile::tempdir().expect("tempdir");
    let root = home.path().join("workspaces");
    std::fs::create_dir(&root).expect("root");
    // A directory that happens to have a principal's name: never taken as carol's.
    std::fs::create_dir(root.join("carol")).expect("carol's lookalike");
    std::fs::write(root.join("carol/project.txt"), "not carol's").expect("write");
    let file = home.path().join("principals");
    let carol = "carol-token-0123456789abcdef";
    write_principals(&file, &format!("alice {ALICE}\nbob {BOB}\ncarol {carol}\n"));
    let mut command = principals_command(&file, &root);
    command
        // The Jupyter token both as a flag and in the environment: neither may reach a kernel.
        .args(["--jupyter-token", &jupyter.token])
        .env("IPYTHON_MCP_JUPYTER_URL", &jupyter.url)
        .env("IPYTHON_MCP_JUPYTER_TOKEN", &jupyter.token)
        .env("IPYTHON_MCP_STRUCTURED_OUTPUT", "always")
        .env("IPYTHON_MCP_LOG", "info")
        .env("IPYTHON_MCP_QUEUE_WAIT_TIMEOUT_SECONDS", "300");
    let (mut server, stderr, url) = serve(command).await;
    let server_pid = server.id().expect("pid");
    let alice = connect(&url, ALICE, Family::Handshake).await;
    let bob = connect(&url, BOB, Family::Modern).await;

    // Bob's kernel and notebook on the Jupyter server.
    let started = call_peer(
        bob.peer(),
        "kernel_start",
        json!({"spec": "jupyter:python3", "kernel": "remote"}),
    )
    .await;
    assert!(started.ok(), "{started:?}\n{}", jupyter.log());
    let bobs_kernel = started.structured["status"]["kernel"]["remote"]["kernel_id"]
        .as_str()
        .expect("bob's kernel id")
        .to_owned();
    let defined = call_peer(
        bob.peer(),
        "execute",
        json!({"kernel": "remote", "code": "secret = 'bob-only'"}),
    )
    .await;
    assert!(defined.ok(), "{defined:?}");
    let created = call_peer(
        bob.peer(),
        "notebook_create",
        json!({"path": "jupyter:private.ipynb"}),
    )
    .await;
    assert!(created.ok(), "{created:?}");
    assert!(jupyter.root().join("bob/private.ipynb").is_file());
    assert!(!jupyter.root().join("private.ipynb").exists());

    // Alice's own: a notebook in her directory, a person's kernel for it, a kernel she starts.
    let mine = call_peer(
        alice.peer(),
        "notebook_create",
        json!({"path": "jupyter:mine.ipynb"}),
    )
    .await;
    assert!(mine.ok(), "{mine:?}");
    assert!(jupyter.root().join("alice/mine.ipynb").is_file());
    let (status, person) = jupyter
        .post(
            "api/sessions",
            json!({"path": "alice/mine.ipynb", "type": "notebook", "name": "mine.ipynb", "kernel": {"name": "python3"}}),
        )
        .await;
    assert_eq!(status, 201, "{person}");
    let persons_kernel = person["kernel"]["id"].as_str().expect("id").to_owned();

    // Discovery: each sees only their own kernels.
    let kernels_seen = |discovered: &support::ToolResult| -> Vec<String> {
        discovered.structured["remote"]["kernels"]
            .as_array()
            .unwrap_or_else(|| panic!("remote kernels: {discovered:?}"))
            .iter()
            .map(|kernel| kernel["name"].as_str().expect("name").to_owned())
            .collect()
    };
    let by_alice = call_peer(alice.peer(), "kernel_discover", json!({})).await;
    let by_bob = call_peer(bob.peer(), "kernel_discover", json!({})).await;
    let (alice_sees, bob_sees) = (kernels_seen(&by_alice), kernels_seen(&by_bob));
    let bobs_spec = format!("jupyter-kernel:{bobs_kernel}");
    let persons_spec = format!("jupyter-kernel:{persons_kernel}");
    assert!(!alice_sees.contains(&bobs_spec), "{alice_sees:?}");
    assert!(alice_sees.contains(&persons_spec), "{alice_sees:?}");
    assert!(bob_sees.contains(&bobs_spec), "{bob_sees:?}");
    assert!(!bob_sees.contains(&persons_spec), "{bob_sees:?}");
    let listed = by_alice.structured["remote"]["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .find(|kernel| kernel["name"] == persons_spec.as_str())
        .expect("the person's kernel")
        .clone();
    assert_eq!(listed["notebook_path"], "mine.ipynb", "{listed}");

    // Attaching to bob's kernel is answered exactly like attaching to none.
    let nobodys = "0c0ffee0-0000-4000-8000-000000000000";
    let theirs = call_peer(
        alice.peer(),
        "kernel_start",
        json!({ "spec": bobs_spec, "kernel": "theirs" }),
    )
    .await;
    let none = call_peer(
        alice.peer(),
        "kernel_start",
        json!({ "spec": format!("jupyter-kernel:{nobodys}"), "kernel": "none" }),
    )
    .await;
    assert!(!theirs.ok() && !none.ok(), "{theirs:?}\n{none:?}");
    assert_eq!(
        theirs.structured["error"]
            .to_string()
            .replace(&bobs_kernel, "ID")
            .replace("theirs", "K"),
        none.structured["error"]
            .to_string()
            .replace(nobodys, "ID")
            .replace("none", "K"),
        "another principal's kernel must be answered exactly like none"
    );
    for kernel in ["theirs", "none"] {
        let peeked = call_peer(
            alice.peer(),
            "execute",
            json!({"kernel": kernel, "code": "globals().get('secret', 'absent')"}),
        )
        .await;
        assert!(!peeked.text().contains("bob-only"), "{peeked:?}");
    }
    // Her own person's kernel: attachable.
    let attached = call_peer(
        alice.peer(),
        "kernel_start",
        json!({ "spec": persons_spec, "kernel": "person" }),
    )
    .await;
    assert!(attached.ok(), "{attached:?}");

    // Notebooks: bob's is nowhere in alice's reach, by tool, resource or listing.
    let read = |path: &str| {
        call_peer(
            alice.peer(),
            "notebook_read",
            json!({ "path": path.to_owned() }),
        )
    };
    let bobs_read = read("jupyter:private.ipynb").await;
    let nothing_read = read("jupyter:nothing.ipynb").await;
    assert_eq!(
        bobs_read.structured["error"]["code"], "notebook_not_found",
        "{bobs_read:?}"
    );
    assert_eq!(
        bobs_read.structured["error"]["code"],
        nothing_read.structured["error"]["code"]
    );
    let climbed = read("jupyter:../bob/private.ipynb").await;
    assert_eq!(
        climbed.structured["error"]["code"], "invalid_path",
        "{climbed:?}"
    );
    let edited = call_peer(
        alice.peer(),
        "notebook_edit",
        json!({"path": "jupyter:private.ipynb", "action": "insert", "source": "alice-was-here"}),
    )
    .await;
    assert!(edited.is_error, "{edited:?}");
    assert!(!jupyter.root().join("alice/private.ipynb").exists());
    let bobs_notebook =
        std::fs::read_to_string(jupyter.root().join("bob/private.ipynb")).expect("bob's notebook");
    assert!(!bobs_notebook.contains("alice-was-here"), "{bobs_notebook}");
    let resource = alice
        .peer()
        .read_resource(ReadResourceRequestParams::new(
            "notebook:///jupyter%3Aprivate.ipynb",
        ))
        .await;
    assert!(resource.is_err(), "{resource:?}");
    let listed: Vec<String> = alice
        .peer()
        .list_all_resources()
        .await
        .expect("resources")
        .into_iter()
        .map(|resource| resource.uri.clone())
        .collect();
    assert!(
        listed.iter().any(|uri| uri.contains("mine.ipynb")),
        "{listed:?}"
    );
    assert!(
        !listed.iter().any(|uri| uri.contains("private")),
        "{listed:?}"
    );

    // A workspace the server did not make is refused, and nothing is written in it.
    let carol_client = connect(&url, carol, Family::Handshake).await;
    let refused = carol_client
        .peer()
        .call_tool(
            rmcp::model::CallToolRequestParams::new("notebook_create").with_arguments(
                json!({"path": "c.ipynb"})
                    .as_object()
                    .cloned()
                    .expect("object"),
            ),
        )
        .await;
    let refused = format!("{refused:?}");
    assert!(
        refused.contains("was not made by this server for carol"),
        "{refused}"
    );
    let left: Vec<_> = std::fs::read_dir(root.join("carol"))
        .expect("carol's lookalike")
        .flatten()
        .map(|entry| entry.file_name())
        .collect();
    assert_eq!(left, ["project.txt"], "the lookalike was touched");
    assert!(root.join("alice/.ipython-mcp-principal").is_file());

    // Modules planted in alice's workspace never run when her kernels start.
    let alice_dir = root.join("alice");
    for module in ["ipykernel_launcher", "ipykernel"] {
        std::fs::write(
            alice_dir.join(format!("{module}.py")),
            format!(
                "open({:?}, 'w').write('ran')\n",
                alice_dir
                    .join(format!("{module}.ran"))
                    .display()
                    .to_string()
            ),
        )
        .expect("plant");
    }
    // Her default kernel's first start (it starts at her first call that runs code), then a
    // restart: both in the workspace.
    let works = call_peer(alice.peer(), "execute", json!({"code": "6 * 7"})).await;
    assert!(works.ok(), "{works:?}");
    let restarted = call_peer(alice.peer(), "kernel_restart", json!({})).await;
    assert!(!restarted.is_error, "{restarted:?}");
    let works = call_peer(alice.peer(), "execute", json!({"code": "6 * 7"})).await;
    assert!(works.ok(), "{works:?}");
    assert!(works.text().contains("42"), "{works:?}");
    for module in ["ipykernel_launcher", "ipykernel"] {
        assert!(
            !alice_dir.join(format!("{module}.ran")).exists(),
            "{module}.py in the workspace ran at kernel start"
        );
    }

    // No secret of the server is readable from a kernel: not its environment, not its /proc.
    let seen = call_peer(
        alice.peer(),
        "execute",
        json!({ "code": reads_of_the_server(server_pid) }),
    )
    .await;
    let seen = seen.text();
    assert!(!seen.contains(&jupyter.token), "{seen}");
    assert!(!seen.contains(ALICE) && !seen.contains(BOB), "{seen}");
    for name in ["environ", "cmdline"] {
        let line = seen
            .lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_else(|| panic!("{name}: {seen}"));
        // Either unreadable (not root), or read and masked: the right process was read.
        assert!(
            line.contains("unreadable") || line.contains("********"),
            "{line}"
        );
    }

    alice.cancel().await.expect("close alice");
    bob.cancel().await.expect("close bob");
    carol_client.cancel().await.expect("close carol");
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(server_pid as i32, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(60), server.wait())
        .await
        .expect("exit after SIGTERM")
        .expect("wait");
    assert!(status.success());
    assert!(
        !stderr.all().contains(&jupyter.token),
        "a token reached the logs"
    );
}

/// Under the sandbox a principal's kernels write only their own directory, not another
/// principal's nor the principals file; and the file gives one principal a stricter sandbox.
#[tokio::test]
async fn principals_kernels_write_only_their_own_directory_under_their_own_sandbox() {
    use serde_json::json;
    use support::{call_peer, Family};
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let root = home.path().join("workspaces");
    std::fs::create_dir(&root).expect("root");
    let file = home.path().join("principals");
    let intern = "intern-token-0123456789abcdef";
    write_principals(
        &file,
        &format!("alice {ALICE}\nbob {BOB}\nintern {intern} sandbox=read-only network=off\n"),
    );
    let (mut server, _stderr, url) = sandboxed_server(&file, &root).await;
    let alice = connect(&url, ALICE, Family::Modern).await;
    let bob = connect(&url, BOB, Family::Modern).await;
    let intern_client = connect(&url, intern, Family::Modern).await;
    let run = stdout_of;
    // Bob's directory exists once bob has run something.
    run(bob.peer(), "open('mine.txt', 'w').write('bob')").await;
    let bobs = root.join("bob/mine.txt");
    assert!(bobs.exists(), "bob writes his own directory");
    let attempt = |path: &Path, mode: &str| {
        format!(
            "try:\n    f = open({:?}, '{mode}')\n    f.read() if '{mode}' == 'r' else f.write('x')\n    print('allowed')\nexcept OSError as e:\n    print('denied', type(e).__name__)\n",
            path.to_str().expect("utf-8"),
        )
    };
    let alices = run(
        alice.peer(),
        "open('mine.txt', 'w').write('alice'); print('ok')",
    )
    .await;
    assert_eq!(alices, "ok\n");
    for (target, what) in [
        (root.join("bob/planted.txt"), "w"),
        (bobs.clone(), "a"),
        (file.clone(), "r"),
    ] {
        let printed = run(alice.peer(), &attempt(&target, what)).await;
        assert!(
            printed.starts_with("denied"),
            "{}: {printed}",
            target.display()
        );
    }
    assert_eq!(std::fs::read_to_string(&bobs).expect("bob's file"), "bob");
    assert!(!root.join("bob/planted.txt").exists());
    // Nor can alice's code take bob's kernel's signing key (with it, it could run code in his
    // kernel over its sockets), or write his run directory or output spool. (Landlock lets
    // names be listed below a directory holding a denied path: she may see their names.)
    let list = call_peer(bob.peer(), "kernel_list", json!({})).await;
    let bob_pid = list.structured["kernels"][0]["pid"].as_i64().expect("pid") as i32;
    let bob_run = support::kernel_run_dir(bob_pid);
    let private = bob_run.parent().expect("private directory").to_owned();
    assert!(
        !private.starts_with(std::env::temp_dir()),
        "the private directory {} is outside the temp directory",
        private.display()
    );
    // Bob's spool: the one holding what bob printed (long enough to be cut, so spooled).
    run(bob.peer(), "print('BOB-SPOOLED ' * 20000)").await;
    let bob_spooled = support::spool_dirs(&private)
        .into_iter()
        .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
        .map(|file| file.path())
        .find(|file| {
            std::fs::read(file)
                .is_ok_and(|bytes| bytes.windows(11).any(|window| window == b"BOB-SPOOLED"))
        })
        .expect("bob's output in a spool in the private directory");
    let bob_spool = bob_spooled.parent().expect("spool").to_owned();
    for (target, what) in [
        (bob_run.join("kernel.json"), "r"),
        (bob_spooled.clone(), "r"),
        (bob_run.join("planted"), "w"),
        (bob_spool.join("planted"), "w"),
    ] {
        let printed = run(alice.peer(), &attempt(&target, what)).await;
        assert!(
            printed.starts_with("denied"),
            "{}: {printed}",
            target.display()
        );
    }
    assert!(!bob_run.join("planted").exists() && !bob_spool.join("planted").exists());
    // Her code can connect to his kernel's sockets (Landlock does not govern that), but his
    // kernel takes connections from the server alone: each is closed before a greeting, so
    // she cannot subscribe to his output.
    let probe = format!(
        "import socket\nfor n in range(1, 6):\n    s = socket.socket(socket.AF_UNIX)\n    s.settimeout(60)\n    try:\n        s.connect({:?} + str(n))\n        s.sendall(bytes([0xff] + [0] * 8 + [0x7f, 3]))\n        print(n, 'greeted' if s.recv(64) else 'closed')\n    except OSError as e:\n        print(n, 'refused', type(e).__name__)\n",
        format!("{}/k-", bob_run.display())
    );
    let probed = run(alice.peer(), &probe).await;
    assert_eq!(probed.lines().count(), 5, "{probed}");
    assert!(!probed.contains("greeted"), "{probed}");
    // A kernel alice starts in bob's directory runs there, and still writes only hers.
    let status = call_peer(alice.peer(), "runtime_status", json!({})).await;
    let python = status.structured["kernel"]["python"]
        .as_str()
        .expect("python")
        .to_owned();
    let started = call_peer(
        alice.peer(),
        "kernel_start",
        json!({"spec": python, "kernel": "there", "cwd": root.join("bob")}),
    )
    .await;
    assert!(started.ok(), "{started:?}");
    let planted = call_peer(
        alice.peer(),
        "execute",
        json!({"kernel": "there", "code": attempt(&root.join("bob/planted.txt"), "w")}),
    )
    .await;
    assert!(
        planted.structured["stdout"]
            .as_str()
            .is_some_and(|out| out.starts_with("denied")),
        "{planted:?}"
    );
    assert!(!root.join("bob/planted.txt").exists());

    // The intern: read-only and no network, as the file says (their kernel starts at their
    // first call).
    let printed = run(
        intern_client.peer(),
        &attempt(&root.join("intern/notes.txt"), "w"),
    )
    .await;
    assert!(printed.starts_with("denied"), "{printed}");
    let status = call_peer(intern_client.peer(), "runtime_status", json!({})).await;
    let sandbox = &status.structured["kernel"]["sandbox"];
    assert_eq!(sandbox["mode"], "read-only", "{status:?}");
    assert_eq!(sandbox["network"], "off", "{status:?}");
    // Their IPython directory is their own, in the private directory: not the shared temp
    // directory, where any kernel could plant a startup file that theirs would run.
    let ipython_dir = run(
        intern_client.peer(),
        "import os; print(os.environ['IPYTHONDIR'])",
    )
    .await;
    let ipython_dir = PathBuf::from(ipython_dir.trim_end());
    assert!(
        ipython_dir.starts_with(&private),
        "{}",
        ipython_dir.display()
    );
    let startup = ipython_dir.join("profile_default/startup/00-planted.py");
    let printed = run(alice.peer(), &attempt(&startup, "w")).await;
    assert!(printed.starts_with("denied"), "{printed}");
    assert!(!startup.exists());
    server.start_kill().ok();
}

/// A principal's kernels write nothing another principal's kernels read: each principal's
/// kernels have a `/tmp` of their own (where bob keeps a pickle his kernel loads; alice's
/// "replacing" it writes her own), and a read-only principal's cannot write the server's shared
/// temp directory; their own `tempfile` calls work.
#[tokio::test]
async fn a_read_only_principal_writes_nothing_in_the_shared_temp_directory() {
    use support::Family;
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let root = home.path().join("workspaces");
    std::fs::create_dir(&root).expect("root");
    let file = home.path().join("principals");
    write_principals(
        &file,
        &format!("alice {ALICE} sandbox=read-only\nbob {BOB}\n"),
    );
    let mut command = principals_command(&file, &root);
    command
        .env("IPYTHON_MCP_SANDBOX", "workspace-write")
        .env("IPYTHON_MCP_STRUCTURED_OUTPUT", "always")
        .env("IPYTHON_MCP_LOG", "warn")
        .envs(support::temp_and_private(home.path()));
    let (mut server, _stderr, url) = serve(command).await;
    let shared = home.path().join("tmp");
    let alice = connect(&url, ALICE, Family::Modern).await;
    let bob = connect(&url, BOB, Family::Modern).await;
    let run = stdout_of;
    let shared_literal = format!("{:?}", shared.to_str().expect("utf-8"));
    // Bob's kernel keeps a pickle in its temp directory: a `/tmp` of his own principal's.
    let printed = run(
        bob.peer(),
        "import pickle, tempfile\nprint(tempfile.gettempdir())\npickle.dump('bob', open('/tmp/bob_cache.pkl', 'wb'))",
    )
    .await;
    assert_eq!(printed, "/tmp\n");
    // Alice's kernel tries to replace it where bob's kernel keeps it, to plant one in the
    // server's shared temp directory, and to move one over bob's.
    let attack = format!(
        r#"import os, pickle, tempfile
def attempt(label, action):
    try:
        action()
        print(label, 'done')
    except OSError as e:
        print(label, 'denied', type(e).__name__)
attempt('replace', lambda: pickle.dump('alice', open('/tmp/bob_cache.pkl', 'wb')))
attempt('plant', lambda: open(os.path.join({shared_literal}, 'alice.pkl'), 'wb').write(b'x'))
fd, own = tempfile.mkstemp()
os.write(fd, pickle.dumps('alice'))
os.close(fd)
attempt('rename', lambda: os.rename(own, '/tmp/bob_cache.pkl'))
print('own', own.startswith('/tmp/'))
"#
    );
    let printed = run(alice.peer(), &attack).await;
    // What alice replaces is her own `/tmp`'s file; the shared one is read-only to her.
    assert_eq!(
        printed,
        "replace done\nplant denied OSError\nrename done\nown True\n"
    );
    // Bob's kernel loads his own pickle, and finds nothing planted.
    let printed = run(
        bob.peer(),
        &format!(
            "import os, pickle\nprint(pickle.load(open('/tmp/bob_cache.pkl', 'rb')), os.path.exists(os.path.join({shared_literal}, 'alice.pkl')))"
        ),
    )
    .await;
    assert_eq!(printed, "bob False\n");
    drop((alice, bob));
    let _ = server.kill().await;
}

/// A principal may have their own code-mode upstreams: their kernels get `mcp_servers`, another
/// principal's do not, and no principal's kernel reads the file that holds the credentials.
/// Two principals naming the same file still have connections of their own.
#[tokio::test]
async fn a_principal_s_own_upstream_servers_are_theirs_alone() {
    use crate::code_mode::{Upstream, SECRET};
    use support::Family;
    let upstream = Upstream::new().await;
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let root = home.path().join("workspaces");
    std::fs::create_dir(&root).expect("root");
    let file = home.path().join("principals");
    let upstreams = upstream.config.to_str().expect("utf-8").to_owned();
    write_principals(
        &file,
        &format!("alice {ALICE} upstream_servers={upstreams}\nbob {BOB}\ncarol {CAROL} upstream_servers={upstreams}\n"),
    );
    let (mut server, _stderr, url) = sandboxed_server(&file, &root).await;
    let alice = connect(&url, ALICE, Family::Modern).await;
    let bob = connect(&url, BOB, Family::Modern).await;
    let carol = connect(&url, CAROL, Family::Modern).await;
    let run = stdout_of;
    // Denied, or (the file is in the host's temp directory, and a principal's kernel has a
    // `/tmp` of its own) not there at all.
    let read = format!(
        "try:\n    open({upstreams:?}).read()\n    print('read')\nexcept (PermissionError, FileNotFoundError):\n    print('denied')\n"
    );
    let alices = run(
        alice.peer(),
        &format!(
            "import mcp_servers\nprint(mcp_servers.weather_api.token() == {SECRET:?})\n{read}"
        ),
    )
    .await;
    assert_eq!(alices, "True\ndenied\n");
    let bobs = run(
        bob.peer(),
        &format!("try:\n    import mcp_servers\n    print('has it')\nexcept ImportError:\n    print('none')\n{read}"),
    )
    .await;
    assert_eq!(bobs, "none\ndenied\n");
    let pid = "import mcp_servers\nprint(mcp_servers.weather_api.pid())";
    let (alices, carols) = (run(alice.peer(), pid).await, run(carol.peer(), pid).await);
    assert_ne!(alices, carols, "an upstream process each");
    drop((alice, bob, carol));
    let _ = server.kill().await;
}

/// The server over HTTP for the principals in `file`, their workspaces under `root`, no spare
/// kernels, none of this process's token, Python or upstreams settings; each test adds its own.
fn principals_command(file: &Path, root: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_ipython-mcp"));
    command
        .args(["--transport", "http", "--port", "0"])
        .env("IPYTHON_MCP_HTTP_PRINCIPALS_FILE", file)
        .env("IPYTHON_MCP_WORKSPACE_ROOT", root)
        .env("IPYTHON_MCP_CACHE_DIR", support::cache_dir())
        .env("IPYTHON_MCP_SPARE_KERNELS", "0")
        .env("IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS", "120")
        .env_remove("IPYTHON_MCP_HTTP_TOKEN")
        .env_remove("IPYTHON_MCP_UPSTREAM_SERVERS")
        .env_remove("VIRTUAL_ENV")
        .env_remove("IPYTHON_MCP_PYTHON")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Starts `command`; the server, its stderr (kept open) and the URL it serves at.
async fn serve(mut command: tokio::process::Command) -> (tokio::process::Child, Stderr, String) {
    let mut server = command.spawn().expect("spawn");
    let mut stderr = Stderr::follow(server.stderr.take().expect("stderr"));
    let url = stderr
        .wait_for("ipython-mcp: serving MCP over HTTP at ")
        .await
        .split("at ")
        .last()
        .expect("url")
        .trim()
        .to_owned();
    (server, stderr, url)
}

/// A server for the principals in `file` whose kernels are in the `workspace-write` sandbox.
async fn sandboxed_server(file: &Path, root: &Path) -> (tokio::process::Child, Stderr, String) {
    let mut command = principals_command(file, root);
    command
        .env("IPYTHON_MCP_SANDBOX", "workspace-write")
        .env("IPYTHON_MCP_STRUCTURED_OUTPUT", "always")
        .env("IPYTHON_MCP_LOG", "warn");
    serve(command).await
}

/// What `code` prints, run by `peer` (which must succeed).
async fn stdout_of(peer: &rmcp::Peer<rmcp::RoleClient>, code: &str) -> String {
    let result = support::call_peer(peer, "execute", serde_json::json!({ "code": code })).await;
    assert!(result.ok(), "{code}: {result:?}");
    result.structured["stdout"]
        .as_str()
        .expect("stdout")
        .to_owned()
}

/// Each principal's `network=` allowlist is theirs: their kernels go out through a proxy of
/// their own that lets their hosts through, and cannot use another principal's proxy.
#[tokio::test]
async fn principals_reach_only_the_hosts_their_own_allowlist_names() {
    use support::Family;
    let port = crate::sandbox::hello_server().await;
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let root = home.path().join("workspaces");
    std::fs::create_dir(&root).expect("root");
    let file = home.path().join("principals");
    // A name that resolves to a loopback address is reached only when that address is listed
    // too: alice lists the name and the address, bob the address alone.
    write_principals(
        &file,
        &format!(
            "alice {ALICE} network=localhost:{port},127.0.0.1:{port}\nbob {BOB} network=127.0.0.1:{port}\n"
        ),
    );
    let (mut server, _stderr, url) = sandboxed_server(&file, &root).await;
    let alice = connect(&url, ALICE, Family::Modern).await;
    let bob = connect(&url, BOB, Family::Modern).await;
    let run = stdout_of;
    let fetch = |host: &str| {
        format!(
            "import urllib.request, urllib.error\ntry:\n    print('body', urllib.request.urlopen('http://{host}:{port}/x', timeout=60).read().decode())\nexcept urllib.error.HTTPError as e:\n    print('refused', e.code)\n"
        )
    };
    // The same loopback server, by the name alice lists and bob does not.
    assert_eq!(run(alice.peer(), &fetch("localhost")).await, "body hello\n");
    assert_eq!(run(bob.peer(), &fetch("127.0.0.1")).await, "body hello\n");
    assert_eq!(run(bob.peer(), &fetch("localhost")).await, "refused 403\n");
    // Bob's code goes around his proxy to alice's, whose list has the name his lacks: his
    // kernel may connect to his own proxy's port alone.
    let alices_proxy = run(alice.peer(), "import os; print(os.environ['HTTP_PROXY'])").await;
    let bobs_proxy = run(bob.peer(), "import os; print(os.environ['HTTP_PROXY'])").await;
    assert_ne!(alices_proxy, bobs_proxy, "a proxy each");
    let through_alices = format!(
        "import urllib.request, urllib.error\nopener = urllib.request.build_opener(urllib.request.ProxyHandler({{'http': {:?}}}))\ntry:\n    print('body', opener.open('http://localhost:{port}/x', timeout=60).read().decode())\nexcept urllib.error.HTTPError as e:\n    print('refused', e.code)\nexcept OSError as e:\n    print('denied', type(e).__name__)\n",
        alices_proxy.trim_end()
    );
    let printed = run(bob.peer(), &through_alices).await;
    assert!(printed.starts_with("denied"), "{printed}");
    drop((alice, bob));
    let _ = server.kill().await;
}
