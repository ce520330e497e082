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

/// CPU seconds (user and system, all threads) the process `pid` ("self" for this one) has used
/// (Linux only; 0 elsewhere). /proc counts in USER_HZ ticks, 100 a second on every Linux ABI.
#[cfg(not(target_os = "linux"))]
pub(crate) fn cpu_seconds(_pid: &str) -> f64 {
    0.0
}

#[cfg(target_os = "linux")]
pub(crate) fn cpu_seconds(pid: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| cpu_ticks(&stat))
        .map_or(0.0, |ticks| ticks as f64 / 100.0)
}

/// utime + stime from a /proc/<pid>/stat line.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn cpu_ticks(stat: &str) -> Option<u64> {
    // After the command name (in parentheses, which may hold spaces and parentheses) come the
    // state (field 3) and, eleven fields on, utime and stime (fields 14 and 15).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |index: usize| fields.get(index)?.parse::<u64>().ok();
    Some(ticks(11)? + ticks(12)?)
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

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_ticks_are_utime_plus_stime_whatever_the_command_name() {
        let stat =
            "4242 (ipython (mcp) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 17 0 0 20 0 3 0";
        assert_eq!(super::cpu_ticks(stat), Some(267));
        assert_eq!(super::cpu_ticks("4242 (short) S 1"), None);
    }
}
