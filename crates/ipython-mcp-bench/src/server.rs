//! The server under measurement: starting it with an MCP client attached, finding its
//! binary, and reading its memory use.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{bail, Context as _};
use rmcp::model::ClientConfig;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};

/// A server started by the benchmark, with an rmcp client connected over its stdio.
pub(crate) struct Served {
    pub(crate) child: tokio::process::Child,
    pub(crate) pid: u32,
    pub(crate) client: rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
}

/// Starts the server binary with `env` and completes the MCP handshake.
pub(crate) async fn serve(server_binary: &Path, env: &[(&str, String)]) -> anyhow::Result<Served> {
    let mut child = tokio::process::Command::new(server_binary)
        .envs(env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().context("pid")?;
    let transport = (
        child.stdout.take().context("stdout")?,
        child.stdin.take().context("stdin")?,
    );
    let client = ClientConfig::default()
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await?;
    Ok(Served { child, pid, client })
}

pub(crate) fn sibling_binary(name: &str) -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let path = me.with_file_name(name);
    if !path.exists() {
        bail!(
            "{} not found: build it first with `cargo build --release`",
            path.display()
        );
    }
    Ok(path)
}

/// A field of /proc/<pid>/status in KiB (Linux only; 0 elsewhere, where RSS is not measured).
#[cfg(not(target_os = "linux"))]
pub(crate) fn proc_status_kib(_pid: u32, _field: &str) -> u64 {
    0
}

#[cfg(target_os = "linux")]
pub(crate) fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
