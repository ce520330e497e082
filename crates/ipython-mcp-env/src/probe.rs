//! Asking an interpreter what it is and whether it can import ipykernel.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tokio::process::Command;

use crate::confine::{Confinement, Purpose};
use crate::excerpt::{excerpt, EXCERPT_CHARS};
use crate::process::{self, Failure};

/// How long a probe may take. Importing ipykernel pulls in IPython, zmq and tornado, which can
/// take a few seconds on a cold disk and many more on a machine busy starting other kernels.
/// A probe that runs out of time proves nothing about the interpreter (see `ProbeFailure`).
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Marks the line we parse, so a noisy `sitecustomize` cannot confuse the probe.
const MARKER: &str = "IPYTHON_MCP_PROBE ";

/// Prints one marked JSON line. It reports a missing or broken ipykernel instead of failing, so
/// the same probe also tells us the version of a base interpreter.
const SCRIPT: &str = r#"
import json, platform, sys
report = {"python": platform.python_version(), "executable": sys.executable}
try:
    import ipykernel
    report["ipykernel"] = str(ipykernel.__version__)
except Exception as error:
    report["ipykernel"] = None
    report["ipykernel_error"] = (type(error).__name__ + ": " + str(error))[:500]
sys.stdout.write("IPYTHON_MCP_PROBE " + json.dumps(report) + "\n")
sys.stdout.flush()
"#;

/// What an interpreter said about itself.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Report {
    /// `platform.python_version()`, e.g. `3.11.7`.
    pub(crate) python_version: String,
    /// `sys.executable`; may be empty in embedded interpreters.
    pub(crate) executable: PathBuf,
    /// The ipykernel version, or why it could not be imported.
    pub(crate) ipykernel: Result<String, String>,
}

impl Report {
    /// `3.11` from `3.11.7`, checked to be two numbers so it is safe in a directory name.
    pub(crate) fn major_minor(&self) -> Option<String> {
        let mut parts = self.python_version.split('.');
        let major = parts.next()?;
        let minor = parts.next()?;
        let numeric = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        (numeric(major) && numeric(minor)).then(|| format!("{major}.{minor}"))
    }
}

#[derive(Deserialize)]
struct Wire {
    python: String,
    executable: Option<String>,
    ipykernel: Option<String>,
    ipykernel_error: Option<String>,
}

/// Why a probe gave no report.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ProbeFailure {
    /// A short reason, for messages.
    pub(crate) detail: String,
    /// The interpreter did not answer within `PROBE_TIMEOUT` (or could not be confined, so
    /// never ran). On a loaded machine that says nothing about it, so nothing may be deleted
    /// for it: only a probe that ran to its end (and failed, or reported no ipykernel) proves
    /// an environment broken.
    pub(crate) timed_out: bool,
}

impl ProbeFailure {
    fn failed(detail: String) -> ProbeFailure {
        ProbeFailure {
            detail,
            timed_out: false,
        }
    }
}

impl std::fmt::Display for ProbeFailure {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.detail)
    }
}

/// Runs the probe with `python`, in `working_dir` when given (where the kernel will run, so a
/// pyenv `.python-version` there picks the same interpreter), for at most `timeout`
/// (`PROBE_TIMEOUT` outside tests), confined as a kernel on it would be: the interpreter and
/// everything it imports may have been written by a kernel.
pub(crate) async fn probe(
    python: &Path,
    working_dir: Option<&Path>,
    timeout: Duration,
    confinement: &Confinement,
) -> Result<Report, ProbeFailure> {
    let mut command = Command::new(python);
    command.arg("-c").arg(SCRIPT);
    let mut probed_in = None;
    if let Some(dir) = working_dir {
        if tokio::fs::metadata(dir)
            .await
            .is_ok_and(|metadata| metadata.is_dir())
        {
            command.current_dir(dir);
            probed_in = Some(dir.to_owned());
        }
    }
    let purpose = Purpose::Probe {
        python: python.to_owned(),
        working_dir: probed_in,
    };
    let finished = match process::run_confined(command, timeout, confinement, purpose).await {
        Ok(finished) => finished,
        Err(Failure::Spawn(reason)) => return Err(ProbeFailure::failed(reason)),
        // Nothing ran, so nothing is proven: like a timeout, it may delete nothing.
        Err(Failure::Confine(reason)) => {
            return Err(ProbeFailure {
                detail: format!("not probed: {reason}"),
                timed_out: true,
            })
        }
        Err(Failure::TimedOut(output)) => {
            let seconds = timeout.as_secs_f64();
            return Err(ProbeFailure {
                detail: if output.is_empty() {
                    format!("timed out after {seconds} s")
                } else {
                    format!("timed out after {seconds} s: {output}")
                },
                timed_out: true,
            });
        }
    };
    if !finished.status.success() {
        return Err(ProbeFailure::failed(finished.failure_detail()));
    }
    parse(&finished.stdout).ok_or_else(|| {
        let output = excerpt(&finished.stdout, &finished.stderr, EXCERPT_CHARS);
        ProbeFailure::failed(format!("unexpected probe output: {output}"))
    })
}

/// Probes the interpreter of the environment at `target` (`bin/python`).
pub(crate) async fn environment(
    target: &Path,
    timeout: Duration,
    confinement: &Confinement,
) -> Result<Report, ProbeFailure> {
    probe(
        &target.join("bin").join("python"),
        None,
        timeout,
        confinement,
    )
    .await
}

/// Parses the last marked line of the probe's stdout.
pub(crate) fn parse(stdout: &[u8]) -> Option<Report> {
    let stdout = String::from_utf8_lossy(stdout);
    let line = stdout
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix(MARKER))?;
    let wire: Wire = serde_json::from_str(line).ok()?;
    if wire.python.is_empty() {
        return None;
    }
    let ipykernel = match wire.ipykernel {
        Some(version) if !version.is_empty() => Ok(version),
        _ => Err(wire
            .ipykernel_error
            .unwrap_or_else(|| "ipykernel did not report a version".to_owned())),
    };
    Some(Report {
        python_version: wire.python,
        executable: PathBuf::from(wire.executable.unwrap_or_default()),
        ipykernel,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_with_ipykernel() {
        let out = b"IPYTHON_MCP_PROBE {\"python\": \"3.12.1\", \"executable\": \"/v/bin/python\", \"ipykernel\": \"6.29.5\"}\n";
        let report = parse(out).expect("parses");
        assert_eq!(report.python_version, "3.12.1");
        assert_eq!(report.executable, PathBuf::from("/v/bin/python"));
        assert_eq!(report.ipykernel, Ok("6.29.5".to_owned()));
        assert_eq!(report.major_minor().as_deref(), Some("3.12"));
    }

    #[test]
    fn a_python_without_ipykernel() {
        let out = b"IPYTHON_MCP_PROBE {\"python\": \"3.11.7\", \"executable\": \"/usr/bin/python3\", \"ipykernel\": null, \"ipykernel_error\": \"ModuleNotFoundError: No module named 'ipykernel'\"}\n";
        let report = parse(out).expect("parses");
        assert_eq!(
            report.ipykernel,
            Err("ModuleNotFoundError: No module named 'ipykernel'".to_owned())
        );
    }

    #[test]
    fn noise_around_the_marked_line_is_ignored() {
        let out = b"hello from sitecustomize\nIPYTHON_MCP_PROBE {\"python\": \"3.13.0rc1\", \"executable\": \"\", \"ipykernel\": \"7.0.1\"}\ntrailing\n";
        let report = parse(out).expect("parses");
        assert_eq!(report.executable, PathBuf::new());
        assert_eq!(report.major_minor().as_deref(), Some("3.13"));
    }

    #[test]
    fn garbage_is_not_a_report() {
        assert_eq!(parse(b""), None);
        assert_eq!(parse(b"Python 3.11.7\n"), None);
        assert_eq!(parse(b"IPYTHON_MCP_PROBE {not json}\n"), None);
        assert_eq!(parse(b"IPYTHON_MCP_PROBE {\"python\": \"\"}\n"), None);
    }

    #[test]
    fn only_numeric_versions_name_a_directory() {
        let report = |version: &str| Report {
            python_version: version.to_owned(),
            executable: PathBuf::new(),
            ipykernel: Err(String::new()),
        };
        assert_eq!(report("3.9.18").major_minor().as_deref(), Some("3.9"));
        assert_eq!(report("3").major_minor(), None);
        assert_eq!(report("3./../x").major_minor(), None);
        assert_eq!(report("3.1x.0").major_minor(), None);
    }

    #[test]
    fn the_script_prints_the_marker_it_is_parsed_by() {
        assert!(SCRIPT.contains(MARKER));
    }
}
