//! `ipython-mcp doctor`: find or provision Python, start a kernel, run a round trip, and print
//! what was found with timings. For people; output goes to stderr-free stdout as plain text.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ipython_mcp_config::Config;
use ipython_mcp_kernel::{ExecuteArgs, RuntimeStatus, SessionHandle, SessionState};

pub async fn run(config: Config) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ipython-mcp {} doctor", env!("CARGO_PKG_VERSION"))?;
    // Under an allowlist the kernel's way out is the proxy: without it running, the kernel
    // would be given no network at all, and the report would say so.
    crate::proxy::ensure(&config, &crate::serve::private_dir())?;
    let options = crate::serve::session_options(&config, "doctor")?;
    writeln!(
        out,
        "cache dir:       {}",
        options.resolver.cache_dir.display()
    )?;
    if let Some(named) = &options.resolver.named {
        writeln!(out, "named env:       {}", named.path().display())?;
    }
    let started = Instant::now();
    let session = SessionHandle::start(options);
    let status = settle(&mut out, &session, started).await?;
    if let Some(error) = &status.error {
        writeln!(out, "FAILED:          {error}")?;
        session.shutdown().await;
        return Ok(ExitCode::FAILURE);
    }
    let ready = started.elapsed();
    describe(&mut out, &status)?;
    writeln!(
        out,
        "ready after:     {:.0} ms",
        ready.as_secs_f64() * 1000.0
    )?;
    let Some((mut samples, last)) = round_trips(&mut out, &session).await? else {
        session.shutdown().await;
        return Ok(ExitCode::FAILURE);
    };
    samples.sort();
    writeln!(
        out,
        "round trip:      ok (x = {}), p50 {:.2} ms over {} calls",
        last.unwrap_or_default(),
        samples[samples.len() / 2].as_secs_f64() * 1000.0,
        samples.len()
    )?;
    session.shutdown().await;
    writeln!(out, "all good")?;
    Ok(ExitCode::SUCCESS)
}

/// Waits until the session has left `Starting`, printing each environment phase as it is
/// reached: provisioning may take a while on first use, and silence would look like a hang.
async fn settle(
    out: &mut impl Write,
    session: &SessionHandle,
    started: Instant,
) -> std::io::Result<RuntimeStatus> {
    let mut last_phase = String::new();
    loop {
        let status = session.status();
        if let Some(environment) = &status.environment {
            if environment.phase != last_phase {
                writeln!(
                    out,
                    "environment:     {} ({:.1}s)",
                    environment.phase,
                    started.elapsed().as_secs_f64()
                )?;
                last_phase = environment.phase.clone();
            }
        }
        if !matches!(status.state, SessionState::Starting) {
            return Ok(status);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Prints where the Python came from, the kernel that runs it, and how long it took to start.
fn describe(out: &mut impl Write, status: &RuntimeStatus) -> std::io::Result<()> {
    if let Some(environment) = &status.environment {
        writeln!(
            out,
            "python source:   {}{}",
            environment.source.as_deref().unwrap_or("?"),
            if environment.created {
                " (created now)"
            } else {
                ""
            }
        )?;
    }
    if let Some(kernel) = &status.kernel {
        writeln!(
            out,
            "python:          {} ({})",
            kernel.python, kernel.python_version
        )?;
        writeln!(out, "ipykernel:       {}", kernel.ipykernel_version)?;
        writeln!(
            out,
            "kernel:          pid {}, {}",
            kernel.pid.map_or("-".to_owned(), |pid| pid.to_string()),
            kernel.implementation
        )?;
        if let Some(sandbox) = &kernel.sandbox {
            writeln!(out, "sandbox:         {}", sandbox_line(sandbox))?;
        }
    }
    if let Some(seconds) = status.startup_seconds {
        writeln!(out, "kernel start:    {:.0} ms", seconds * 1000.0)?;
    }
    Ok(())
}

/// The sandbox in one line: its mode and network, and what enforces it or why nothing does.
fn sandbox_line(sandbox: &ipython_mcp_kernel::SandboxStatus) -> String {
    let network = if sandbox.hosts.is_empty() {
        format!("network {}", sandbox.network)
    } else {
        format!("network {} ({})", sandbox.network, sandbox.hosts.join(", "))
    };
    // Which design is in force: namespaces lead the mechanisms, or a limit says why not.
    let design = sandbox
        .limits
        .iter()
        .find(|limit| limit.starts_with("Landlock and seccomp alone"))
        .map(|limit| format!(" ({limit})"))
        .unwrap_or_default();
    match (sandbox.enforced, &sandbox.why_not) {
        (true, _) => format!(
            "{}, {network}, enforced by {}{design}",
            sandbox.mode,
            sandbox.mechanisms.join(", ")
        ),
        (false, Some(why)) => format!("{}, NOT enforced: {why}", sandbox.mode),
        (false, None) => format!("{} (kernels run unconfined)", sandbox.mode),
    }
}

/// Runs 20 small executions that build on each other (so the namespace is seen to persist),
/// timing each; returns the timings and the last result's text, or `None` after printing why
/// one failed.
async fn round_trips(
    out: &mut impl Write,
    session: &SessionHandle,
) -> std::io::Result<Option<(Vec<Duration>, Option<String>)>> {
    let mut samples = Vec::new();
    let mut last = None;
    for round in 0..20 {
        let code = if round == 0 {
            "x = 0".to_owned()
        } else {
            "x = x + 1; x".to_owned()
        };
        let begun = Instant::now();
        let output = session
            .execute(ExecuteArgs {
                code,
                request_id: format!("doctor-{round}"),
                ..Default::default()
            })
            .await;
        samples.push(begun.elapsed());
        if !output.ok {
            writeln!(
                out,
                "FAILED:          round trip: {:?}",
                output.error.map(|error| error.message)
            )?;
            return Ok(None);
        }
        last = output.result.and_then(|result| {
            result
                .get("text/plain")
                .and_then(|value| value.as_str())
                .map(str::to_owned)
        });
    }
    Ok(Some((samples, last)))
}
