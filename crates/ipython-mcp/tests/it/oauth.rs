//! OAuth 2.1 for teams: the real binary accepts JWT access tokens of an issuer the test runs
//! on loopback (its own P-256 key pair, its metadata and JWKS), serves its protected resource
//! metadata, and refuses a wrong audience, an expired token, an unknown key and a missing
//! scope; a key the issuer adds later is fetched when a token first names it.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt as _;

const RESOURCE: &str = "http://ipython-mcp.test/mcp";
const METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";

/// Connects with the Python SDK in each protocol family and prints what `x` holds.
const SDK_CLIENT: &str = r#"
import asyncio, sys
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main(url, token):
    for mode in ("legacy", "auto"):
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=300.0))
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            result = await client.call_tool("execute", {"code": "x"})
            text = "\n".join(block.text for block in result.content if block.type == "text")
            print(mode, text.splitlines()[-1], flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"#;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A signing key of the test's issuer.
struct Key {
    kid: String,
    pair: EcdsaKeyPair,
}

impl Key {
    fn new(kid: &str) -> Key {
        let random = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &random)
            .expect("generate a key");
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &random)
                .expect("key pair");
        Key {
            kid: kid.to_owned(),
            pair,
        }
    }

    /// The public key as a JWK (an uncompressed P-256 point is 0x04, x, y).
    fn jwk(&self) -> Value {
        let point = self.pair.public_key().as_ref();
        json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": self.kid,
            "x": b64(&point[1..33]), "y": b64(&point[33..65]),
        })
    }

    fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": "ES256", "typ": "at+jwt", "kid": self.kid});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let signature = self
            .pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .expect("sign");
        format!("{input}.{}", b64(signature.as_ref()))
    }
}

/// The test's authorization server: metadata (RFC 8414) and a JWKS the test can add keys to.
struct Issuer {
    url: String,
    published: Arc<Mutex<Vec<Value>>>,
    /// How many times the JWKS was fetched.
    fetches: Arc<std::sync::atomic::AtomicUsize>,
}

impl Issuer {
    async fn start() -> Issuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let published: Arc<Mutex<Vec<Value>>> = Arc::default();
        let metadata = json!({"issuer": url, "jwks_uri": format!("{url}/jwks")}).to_string();
        let keys = Arc::clone(&published);
        let fetches: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let counted = Arc::clone(&fetches);
        let app = axum::Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                axum::routing::get(move || std::future::ready(metadata.clone())),
            )
            .route(
                "/jwks",
                axum::routing::get(move || {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let keys = keys.lock().expect("keys").clone();
                    std::future::ready(json!({ "keys": keys }).to_string())
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        Issuer {
            url,
            published,
            fetches,
        }
    }

    fn fetches(&self) -> usize {
        self.fetches.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn publish(&self, key: &Key) {
        self.published.lock().expect("keys").push(key.jwk());
    }

    fn claims(&self, subject: &str, scope: &str) -> Value {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        json!({
            "iss": self.url, "aud": RESOURCE, "sub": subject, "scope": scope,
            "iat": now, "nbf": now - 5, "exp": now + 3600,
        })
    }
}

struct Reply {
    status: u16,
    challenge: String,
    body: String,
}

/// A JSON-RPC message posted to `/mcp` with this token (if any).
async fn post(url: &str, token: Option<&str>, session: Option<&str>, message: Value) -> Reply {
    let mut request = support::http_client()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", "2025-11-25")
        .body(message.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    let response = request.send().await.expect("POST");
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let mut body = response.text().await.expect("body");
    if let Some(session) = session {
        body = format!("session={session}\n{body}");
    }
    Reply {
        status,
        challenge,
        body,
    }
}

/// The `initialize` request of a handshake-era client.
fn initialize() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    })
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}

/// The server under test, accepting `issuer`'s tokens, its logs gathered as they come.
struct Served {
    server: tokio::process::Child,
    url: String,
    logged: Arc<Mutex<String>>,
}

/// Starts the real binary with `issuer` as its OAuth issuer, principals' directories under
/// `root`, and `extra` settings.
async fn serve(issuer: &Issuer, root: &std::path::Path, extra: &[(&str, &str)]) -> Served {
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_ipython-mcp"))
        .args(["--transport", "http", "--port", "0"])
        .env("IPYTHON_MCP_HTTP_OAUTH_ISSUER", &issuer.url)
        .env("IPYTHON_MCP_HTTP_OAUTH_RESOURCE", RESOURCE)
        .env("IPYTHON_MCP_WORKSPACE_ROOT", root)
        .env("IPYTHON_MCP_CACHE_DIR", support::cache_dir())
        .env("IPYTHON_MCP_LOG", "info")
        .env("IPYTHON_MCP_SPARE_KERNELS", "0")
        .env("IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS", "120")
        // A principal's default kernel starts at their first call that runs code, which then
        // waits for it: on a loaded machine that can outlast the default queue wait.
        .env("IPYTHON_MCP_QUEUE_WAIT_TIMEOUT_SECONDS", "300")
        .envs(extra.iter().copied())
        .env_remove("IPYTHON_MCP_HTTP_TOKEN")
        .env_remove("VIRTUAL_ENV")
        .env_remove("IPYTHON_MCP_PYTHON")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let mut lines = tokio::io::BufReader::new(server.stderr.take().expect("stderr")).lines();
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
    let logged = Arc::new(Mutex::new(String::new()));
    tokio::spawn({
        let logged = Arc::clone(&logged);
        async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut logged = logged.lock().expect("log");
                logged.push_str(&line);
                logged.push('\n');
            }
        }
    });
    Served {
        server,
        url,
        logged,
    }
}

/// Opens an MCP session with this token (once the server has room for its principal: a full
/// server makes room as soon as someone is idle); its id.
async fn open_session(url: &str, token: &str) -> String {
    let initialize = initialize();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let reply = post(url, Some(token), None, initialize.clone()).await;
        if reply.status == 403 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        assert_eq!(reply.status, 200, "{}", reply.body);
        let session = reply
            .body
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("session="))
            .expect("a session id")
            .to_owned();
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        post(url, Some(token), Some(&session), initialized).await;
        return session;
    }
}

/// Waits (bounded: the test fails, never hangs) until a log line holds every one of `parts`.
async fn logged_line(logged: &Mutex<String>, parts: &[&str]) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let found = logged
            .lock()
            .expect("log")
            .lines()
            .find(|line| parts.iter().all(|part| line.contains(part)))
            .map(str::to_owned);
        if let Some(line) = found {
            return line;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no log line with {parts:?}:\n{}",
            logged.lock().expect("log")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn access_tokens_of_the_issuer_are_checked_for_key_audience_time_and_scope() {
    let issuer = Issuer::start().await;
    let first = Key::new("k1");
    issuer.publish(&first);
    let home = tempfile::tempdir().expect("tempdir");
    let Served {
        mut server,
        url,
        logged,
    } = serve(&issuer, home.path(), &[]).await;
    let base = url.trim_end_matches("/mcp").to_owned();
    let expected_metadata = format!("http://ipython-mcp.test{METADATA_PATH}");

    // The protected resource metadata, without a token.
    let metadata: Value = support::http_client()
        .get(format!("{base}{METADATA_PATH}"))
        .send()
        .await
        .expect("GET metadata")
        .json()
        .await
        .expect("JSON");
    assert_eq!(metadata["resource"], RESOURCE, "{metadata}");
    assert_eq!(
        metadata["authorization_servers"],
        json!([issuer.url]),
        "{metadata}"
    );
    assert_eq!(
        metadata["scopes_supported"],
        json!(["execute", "notebooks:read", "notebooks:write"]),
        "{metadata}"
    );
    // No token: 401 pointing at the metadata.
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let refused = post(&url, None, None, ping.clone()).await;
    assert_eq!(refused.status, 401);
    assert_eq!(
        refused.challenge,
        format!("Bearer resource_metadata=\"{expected_metadata}\"")
    );

    // A good token: a session, code runs, the notebook lands in the subject's directory.
    let everything = "execute notebooks:read notebooks:write";
    let good = first.sign(&issuer.claims("carol@example.org", everything));
    let session = open_session(&url, &good).await;
    let ran = post(
        &url,
        Some(&good),
        Some(&session),
        call(2, "execute", json!({"code": "x = 41\nx + 1"})),
    )
    .await;
    assert_eq!(ran.status, 200, "{}", ran.body);
    assert!(ran.body.contains("42"), "{}", ran.body);
    let created = post(
        &url,
        Some(&good),
        Some(&session),
        call(3, "notebook_create", json!({"path": "c.ipynb"})),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.body);
    assert!(home.path().join("carol@example.org/c.ipynb").is_file());

    // The official Python SDK client, with the token as its bearer header, in both families.
    let (python, deps) = support::python_with("mcp==2.3.0", "mcp", "mcp-sdk-deps").await;
    let sdk = tokio::process::Command::new(&python)
        .arg("-c")
        .arg(SDK_CLIENT)
        .args([&url, &good])
        .env("PYTHONPATH", &deps)
        .output();
    let sdk = tokio::time::timeout(Duration::from_secs(600), sdk)
        .await
        .expect("the SDK client finishes")
        .expect("run the SDK client");
    let printed = String::from_utf8_lossy(&sdk.stdout);
    assert!(
        sdk.status.success(),
        "{printed}\n{}",
        String::from_utf8_lossy(&sdk.stderr)
    );
    assert_eq!(
        printed.lines().collect::<Vec<_>>(),
        ["legacy 41", "auto 41"],
        "{printed}"
    );

    // Refused: another audience, expired, a key the issuer never published.
    let mut elsewhere = issuer.claims("carol@example.org", everything);
    elsewhere["aud"] = json!("http://another.test/mcp");
    let mut expired = issuer.claims("carol@example.org", everything);
    expired["exp"] = json!(expired["iat"].as_u64().expect("iat") - 3600);
    let stranger = Key::new("k9");
    for (case, token) in [
        ("wrong audience", first.sign(&elsewhere)),
        ("expired", first.sign(&expired)),
        (
            "unknown key",
            stranger.sign(&issuer.claims("carol@example.org", everything)),
        ),
        ("not a JWT", "definitely-not-a-jwt-0123456789".to_owned()),
    ] {
        let refused = post(&url, Some(&token), None, ping.clone()).await;
        assert_eq!(refused.status, 401, "{case}: {}", refused.body);
        assert_eq!(
            refused.challenge,
            format!("Bearer error=\"invalid_token\", resource_metadata=\"{expected_metadata}\""),
            "{case}"
        );
    }

    // A scope short: reading a notebook is allowed, running code is not (403, naming it).
    let reader = first.sign(&issuer.claims("carol@example.org", "notebooks:read"));
    let session = open_session(&url, &reader).await;
    let read = post(
        &url,
        Some(&reader),
        Some(&session),
        call(4, "notebook_read", json!({"path": "c.ipynb"})),
    )
    .await;
    assert_eq!(read.status, 200, "{}", read.body);
    let ran = post(
        &url,
        Some(&reader),
        Some(&session),
        call(5, "execute", json!({"code": "x"})),
    )
    .await;
    assert_eq!(ran.status, 403, "{}", ran.body);
    assert_eq!(
        ran.challenge,
        format!("Bearer error=\"insufficient_scope\", scope=\"execute\", resource_metadata=\"{expected_metadata}\"")
    );
    let edit = call(6, "notebook_edit", json!({"path": "c.ipynb", "edits": []}));
    let refused = post(&url, Some(&reader), Some(&session), edit).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.challenge.contains("scope=\"notebooks:write\""),
        "{}",
        refused.challenge
    );

    // The issuer rotates: a token naming its new key is accepted at once (the keys are
    // fetched again), and the subject's state is the same principal's.
    let second = Key::new("k2");
    issuer.publish(&second);
    let rotated = second.sign(&issuer.claims("carol@example.org", everything));
    let session = open_session(&url, &rotated).await;
    let again = post(
        &url,
        Some(&rotated),
        Some(&session),
        call(7, "execute", json!({"code": "x"})),
    )
    .await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.body.contains("41"), "{}", again.body);

    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(server.id().expect("pid") as i32, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(60), server.wait())
        .await
        .expect("exit after SIGTERM")
        .expect("wait");
    assert!(status.success());
    let logs = logged.lock().expect("log").clone();
    for token in [&good, &reader, &rotated] {
        let signature = token.rsplit('.').next().expect("signature");
        assert!(!logs.contains(signature), "a token reached the logs");
    }
}

/// The reach of a token short of `execute`, and of subjects in number: a token without
/// `execute` reads no kernel listing, writes no Python module and never costs a kernel
/// process; access-token principals are capped, and one idle past the idle timeout gives their
/// kernels and place back; tokens naming made-up keys delay a rotated key by seconds, never
/// lock it out.
#[tokio::test]
async fn tokens_short_of_execute_reach_no_kernel_and_subjects_are_capped() {
    let issuer = Issuer::start().await;
    let first = Key::new("k1");
    issuer.publish(&first);
    let home = tempfile::tempdir().expect("tempdir");
    let Served {
        mut server,
        url,
        logged,
    } = serve(
        &issuer,
        home.path(),
        &[
            ("IPYTHON_MCP_HTTP_OAUTH_MAX_PRINCIPALS", "2"),
            ("IPYTHON_MCP_KERNEL_IDLE_TIMEOUT_SECONDS", "2"),
        ],
    )
    .await;
    let read = |id: u64, uri: &str| json!({"jsonrpc": "2.0", "id": id, "method": "resources/read", "params": {"uri": uri}});

    // No scope at all: the lists and the capabilities, nothing that reveals a kernel.
    let sam = first.sign(&issuer.claims("sam", ""));
    let session = open_session(&url, &sam).await;
    for message in [
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}),
        read(4, "ipython-mcp://capabilities"),
    ] {
        let answered = post(&url, Some(&sam), Some(&session), message.clone()).await;
        assert_eq!(answered.status, 200, "{message}: {}", answered.body);
    }
    let kernels = post(
        &url,
        Some(&sam),
        Some(&session),
        read(5, "ipython-mcp://kernels"),
    )
    .await;
    assert_eq!(kernels.status, 403, "{}", kernels.body);
    assert!(
        kernels.challenge.contains("scope=\"execute\""),
        "{}",
        kernels.challenge
    );

    // Writing notebooks: a `.py` file is a module the principal's kernels import, so it needs
    // `execute` too.
    let wendy = first.sign(&issuer.claims("wendy", "notebooks:read notebooks:write"));
    let session = open_session(&url, &wendy).await;
    let module = post(
        &url,
        Some(&wendy),
        Some(&session),
        call(
            2,
            "notebook_create",
            json!({"path": "ipykernel_launcher.py"}),
        ),
    )
    .await;
    assert_eq!(module.status, 403, "{}", module.body);
    assert!(
        module.challenge.contains("scope=\"execute\""),
        "{}",
        module.challenge
    );
    assert!(!home.path().join("wendy/ipykernel_launcher.py").exists());
    let notebook = post(
        &url,
        Some(&wendy),
        Some(&session),
        call(3, "notebook_create", json!({"path": "w.ipynb"})),
    )
    .await;
    assert_eq!(notebook.status, 200, "{}", notebook.body);
    assert!(home.path().join("wendy/w.ipynb").is_file());

    // Neither cost a kernel: idle, each is forgotten holding none.
    for subject in ["principal=sam", "principal=wendy"] {
        let line = logged_line(&logged, &["principal idle", subject]).await;
        assert!(line.contains("kernels=0"), "{line}");
    }

    // Made-up keys, all at once: the issuer is asked at most once per few seconds, and a key
    // it publishes right after is accepted at the first try.
    let before = issuer.fetches();
    let started = std::time::Instant::now();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let junk: Vec<_> = (0..20)
        .map(|n| {
            let token = Key::new(&format!("made-up-{n}")).sign(&issuer.claims("sam", ""));
            let (url, ping) = (url.clone(), ping.clone());
            tokio::spawn(async move { post(&url, Some(&token), None, ping).await.status })
        })
        .collect();
    for refused in junk {
        assert_eq!(refused.await.expect("junk request"), 401);
    }
    let fetched = issuer.fetches() - before;
    let bound = 2 + started.elapsed().as_secs() as usize / 3;
    assert!(
        fetched <= bound,
        "{fetched} fetches of the keys in {:?}",
        started.elapsed()
    );
    let rotated = Key::new("k2");
    issuer.publish(&rotated);
    let fresh = rotated.sign(&issuer.claims("sam", ""));
    // (Opening a session asserts it is let in at once.)
    let session = open_session(&url, &fresh).await;
    let accepted = post(&url, Some(&fresh), Some(&session), ping).await;
    assert_eq!(accepted.status, 200, "{}", accepted.body);

    // Two principals at once: two busy ones keep a third out until they go idle. The flags
    // are where a principal's kernel can reach them: not the temp directory (it has a `/tmp`
    // of its own); it writes its own in its working directory, its workspace.
    let flags = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("flags");
    let release = flags.path().join("release");
    let busy = |subject: &str| {
        let token = first.sign(&issuer.claims(subject, "execute"));
        let marker = format!("{subject}.started");
        let started = home.path().join(subject).join(&marker);
        let code = format!(
            "import os, time\nopen({marker:?}, 'w').close()\ndeadline = time.time() + 600\nwhile not os.path.exists({release:?}) and time.time() < deadline:\n    time.sleep(0.05)\nprint('released')",
            release = release.display().to_string(),
        );
        let url = url.clone();
        let running = tokio::spawn(async move {
            let session = open_session(&url, &token).await;
            let arguments = json!({"code": code, "timeout_seconds": 900});
            post(
                &url,
                Some(&token),
                Some(&session),
                call(2, "execute", arguments),
            )
            .await
        });
        (started, running)
    };
    let (ann_started, ann) = busy("ann");
    let (ben_started, ben) = busy("ben");
    for started in [&ann_started, &ben_started] {
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        while !started.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{started:?} never ran"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let cy = first.sign(&issuer.claims("cy", "execute"));
    let initialize = initialize();
    let full = post(&url, Some(&cy), None, initialize.clone()).await;
    assert_eq!(full.status, 403, "{}", full.body);
    assert!(
        full.body.contains("IPYTHON_MCP_HTTP_OAUTH_MAX_PRINCIPALS"),
        "{}",
        full.body
    );
    std::fs::write(&release, "").expect("release");
    for running in [ann, ben] {
        let done = running.await.expect("busy principal");
        assert_eq!(done.status, 200, "{}", done.body);
        assert!(done.body.contains("released"), "{}", done.body);
    }
    // Each gives back the kernel their code ran in.
    for subject in ["principal=ann", "principal=ben"] {
        logged_line(&logged, &["principal idle", subject, "kernels=1"]).await;
    }
    let admitted = post(&url, Some(&cy), None, initialize).await;
    assert_eq!(admitted.status, 200, "{}", admitted.body);
    // Back after being let go: the first result says the namespace is new, and why.
    let ann = first.sign(&issuer.claims("ann", "execute"));
    let session = open_session(&url, &ann).await;
    let back = post(
        &url,
        Some(&ann),
        Some(&session),
        call(
            2,
            "execute",
            json!({"code": "globals().get('deadline', 'gone')"}),
        ),
    )
    .await;
    assert_eq!(back.status, 200, "{}", back.body);
    assert!(back.body.contains("'gone'"), "{}", back.body);
    assert!(
        back.body
            .contains("earlier variables, imports and functions are gone"),
        "{}",
        back.body
    );

    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(server.id().expect("pid") as i32, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(60), server.wait())
        .await
        .expect("exit after SIGTERM")
        .expect("wait");
    assert!(status.success());
}
