//! Running a short-lived child (probe, venv creation, installer) with its output captured.
//!
//! Invariants: stdin is null and stdout/stderr are piped, never inherited (the server's stdout is
//! the MCP stream); the child runs in its own session (no controlling terminal) and process
//! group, and that group is killed when the deadline passes or the caller's future is dropped,
//! so no installer outlives its request.

use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::task::JoinHandle;

use crate::confine::{Confinement, Purpose};
use crate::excerpt::{excerpt, EXCERPT_CHARS};

/// How much of each stream is kept in memory; only the tail matters for error messages.
const KEEP_BYTES: usize = 64 * 1024;

/// How long to wait for the pipes to drain after the process group was killed.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(2);

/// A child that ran to completion (whatever its exit status).
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
}

impl Finished {
    /// "exit status: 1: <output tail>", for error messages.
    pub(crate) fn failure_detail(&self) -> String {
        let output = excerpt(&self.stdout, &self.stderr, EXCERPT_CHARS);
        if output.is_empty() {
            format!("{} (no output)", self.status)
        } else {
            format!("{}: {output}", self.status)
        }
    }
}

/// Why a child did not run to completion.
pub(crate) enum Failure {
    /// It could not be started at all (missing, not executable …).
    Spawn(String),
    /// The deadline passed; the process group was killed. Holds the output tail so far.
    TimedOut(String),
    /// It was not started: the sandbox it must run under could not be readied. Says nothing of
    /// the interpreter.
    Confine(String),
}

/// Runs `command` as [`run`] does, confined for `purpose` (see `confine.rs`).
pub(crate) async fn run_confined(
    command: Command,
    timeout: Duration,
    confinement: &Confinement,
    purpose: Purpose,
) -> Result<Finished, Failure> {
    let (command, guard) = confinement
        .apply(command, purpose)
        .await
        .map_err(Failure::Confine)?;
    let finished = run(command, timeout).await;
    // The child has exited (or its group was killed): what confined it may go.
    drop(guard);
    finished
}

/// Runs `command` to completion or until `timeout`, capturing both output streams.
pub(crate) async fn run(mut command: Command, timeout: Duration) -> Result<Finished, Failure> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // A session of its own, so a group too (killed as one below), and no controlling terminal:
    // a probe or installer may run code a kernel planted, which must not type into the
    // user's terminal.
    // SAFETY: the closure runs in the forked child before exec and only calls setsid, which is
    // async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|err| Failure::Spawn(err.to_string()))?;
    // Declared after `child` so it is dropped first: the group is killed while the leader is
    // not yet reaped, which keeps its id from being reused under us.
    let mut group = ProcessGroup(child.id());
    let mut stdout = tokio::spawn(read_tail(child.stdout.take()));
    let mut stderr = tokio::spawn(read_tail(child.stderr.take()));

    let completed = tokio::time::timeout(timeout, async {
        let status = child.wait().await;
        let stdout = (&mut stdout).await;
        let stderr = (&mut stderr).await;
        (status, stdout, stderr)
    })
    .await;
    match completed {
        Ok((status, stdout, stderr)) => {
            group.disarm();
            let status = status.map_err(|err| Failure::Spawn(err.to_string()))?;
            Ok(Finished {
                status,
                stdout: stdout.unwrap_or_default(),
                stderr: stderr.unwrap_or_default(),
            })
        }
        Err(_elapsed) => {
            group.kill();
            let _ = child.start_kill();
            let _ = tokio::time::timeout(DRAIN_AFTER_KILL, child.wait()).await;
            let stdout = drain(stdout).await;
            let stderr = drain(stderr).await;
            Err(Failure::TimedOut(excerpt(&stdout, &stderr, EXCERPT_CHARS)))
        }
    }
}

/// Reads a stream to its end, keeping only the last [`KEEP_BYTES`].
async fn read_tail(stream: Option<impl AsyncRead + Unpin>) -> Vec<u8> {
    let mut kept = Vec::new();
    let Some(mut stream) = stream else {
        return kept;
    };
    let mut chunk = [0_u8; 8192];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                kept.extend_from_slice(&chunk[..n]);
                if kept.len() > KEEP_BYTES {
                    kept.drain(..kept.len() - KEEP_BYTES);
                }
            }
        }
    }
}

/// What a reader collected, waiting briefly for the pipe to close after a kill.
async fn drain(mut reader: JoinHandle<Vec<u8>>) -> Vec<u8> {
    match tokio::time::timeout(DRAIN_AFTER_KILL, &mut reader).await {
        Ok(Ok(bytes)) => bytes,
        _ => {
            reader.abort();
            Vec::new()
        }
    }
}

/// Kills the child's whole process group (installers spawn helpers) unless disarmed.
struct ProcessGroup(Option<u32>);

impl ProcessGroup {
    fn disarm(&mut self) {
        self.0 = None;
    }

    fn kill(&mut self) {
        if let Some(pgid) = self
            .0
            .take()
            .and_then(|pid| libc::pid_t::try_from(pid).ok())
        {
            // SAFETY: kill(2) has no memory-safety preconditions. The group id is the pid of our
            // own child, which has not been reaped yet, so it still names that group.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn sh(script: &str) -> Command {
        let mut command = Command::new("/bin/sh");
        command.arg("-c").arg(script);
        command
    }

    #[tokio::test]
    async fn output_is_captured_not_inherited() {
        let finished = run(
            sh("echo out; echo err >&2; exit 3"),
            Duration::from_secs(10),
        )
        .await
        .ok()
        .expect("sh runs");
        assert_eq!(finished.status.code(), Some(3));
        assert_eq!(finished.stdout, b"out\n");
        assert_eq!(finished.stderr, b"err\n");
        assert_eq!(finished.failure_detail(), "exit status: 3: out\nerr");
    }

    #[tokio::test]
    async fn stdin_is_null() {
        let finished = run(sh("cat; echo end"), Duration::from_secs(10))
            .await
            .ok()
            .expect("sh runs");
        assert_eq!(finished.stdout, b"end\n");
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group_and_keeps_the_output() {
        let started = Instant::now();
        // The grandchild holds the pipes open; only a group kill ends it.
        let script = "echo started; sleep 600 & sleep 600; echo never";
        // Long enough for /bin/sh to start and echo on a loaded machine; the bound only shows
        // that nobody waited for the sleeps.
        match run(sh(script), Duration::from_secs(3)).await {
            Err(Failure::TimedOut(output)) => assert_eq!(output, "started"),
            _ => panic!("expected a timeout"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_failure() {
        let command = Command::new("/nonexistent/ipython-mcp/python");
        assert!(matches!(
            run(command, Duration::from_secs(1)).await,
            Err(Failure::Spawn(_))
        ));
    }

    #[tokio::test]
    async fn only_the_tail_of_a_flood_is_kept() {
        let finished = run(
            sh("i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done"),
            Duration::from_secs(30),
        )
        .await
        .ok()
        .expect("sh runs");
        assert_eq!(finished.stdout.len(), KEEP_BYTES);
        assert!(finished.stdout.ends_with(b"line-19999\n"));
    }
}
