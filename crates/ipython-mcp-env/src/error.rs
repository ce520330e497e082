use std::path::PathBuf;

/// Why no Python interpreter with ipykernel could be found or provisioned.
///
/// Every message names the phase that failed and is short enough for a status field: child
/// output is reduced to its last ~2000 characters with terminal escapes removed. The enum is
/// `Clone` (it stores strings, not `io::Error`) so a server can keep it and report it again.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The interpreter could not be run, or it did not answer the probe as expected.
    #[error("probing python interpreter {} failed: {detail}", .python.display())]
    Probe { python: PathBuf, detail: String },

    /// The explicitly chosen interpreter runs but cannot import ipykernel.
    #[error(
        "python interpreter {} cannot import ipykernel ({detail}); install it with `{} -m pip install ipykernel`",
        .python.display(),
        .python.display()
    )]
    MissingIpykernel { python: PathBuf, detail: String },

    /// No `python3` on PATH, so there is nothing to build the managed environment from.
    #[error(
        "no python3 found on PATH to create the managed environment; install Python 3 or set IPYTHON_MCP_PYTHON to an interpreter that has ipykernel"
    )]
    NoPython,

    /// A filesystem step of provisioning failed (`action` reads as a verb phrase).
    #[error("{action} {} failed: {detail}", .path.display())]
    Io {
        action: String,
        path: PathBuf,
        detail: String,
    },

    /// The provisioning lock could not be opened or taken.
    #[error("locking {} failed: {detail}", .path.display())]
    Lock { path: PathBuf, detail: String },

    /// Another process held the provisioning lock for longer than it may take to provision.
    #[error(
        "timed out after {seconds} s waiting for the lock {}; another ipython-mcp process may be stuck provisioning the managed environment",
        .path.display()
    )]
    LockTimeout { path: PathBuf, seconds: u64 },

    /// Creating the virtual environment (with `uv venv` or `python -m venv`) failed.
    #[error("creating the managed environment with {tool} failed: {detail}")]
    Create { tool: String, detail: String },

    /// Installing ipykernel into the new environment failed.
    #[error("installing ipykernel into the managed environment with {tool} failed: {detail}")]
    Install { tool: String, detail: String },

    /// The new environment was built but its interpreter cannot import ipykernel.
    #[error("verifying the new managed environment at {} failed: {detail}", .path.display())]
    Verify { path: PathBuf, detail: String },

    /// Provisioning took longer than the install timeout; `detail` is the output so far.
    #[error(
        "provisioning the managed environment timed out after {seconds} s while {phase} ({detail})"
    )]
    Timeout {
        phase: String,
        seconds: u64,
        detail: String,
    },
}
