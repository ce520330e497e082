//! The crate's one error type: failures of the kernel client, never of user code.

/// Failures of the kernel client itself (never of user code).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("could not prepare the kernel's private run directory: {message}")]
    RunDir { message: String },
    #[error("could not start the kernel process {program}: {message}")]
    Spawn { program: String, message: String },
    /// The kernel's sandbox cannot be had (the sandbox fails closed: no kernel starts).
    #[error("{message}")]
    Sandbox { message: String },
    #[error("kernel exited during start-up ({exit}){stderr}")]
    ExitedDuringStartup { exit: String, stderr: String },
    #[error("kernel did not become ready within {seconds:.1}s{stderr}")]
    StartupTimeout { seconds: f64, stderr: String },
    #[error("kernel has exited ({exit})")]
    Exited { exit: String },
    #[error("could not send to the kernel on {channel}: {message}")]
    Send {
        channel: &'static str,
        message: String,
    },
    #[error("cannot reach the Jupyter server at {url}: {message}")]
    Unreachable { url: String, message: String },
    #[error("the Jupyter server at {url} refused the request (HTTP {status}): check its token")]
    Refused { url: String, status: u16 },
    #[error("the Jupyter server has no {what}")]
    RemoteNotFound { what: String },
    #[error("the Jupyter server answered HTTP {status} to {what}: {message}")]
    RemoteStatus {
        what: String,
        status: u16,
        message: String,
    },
    #[error("the Jupyter server did not finish {what} within {seconds:.1}s")]
    RemoteTimeout { what: String, seconds: f64 },
    #[error("the Jupyter server at {url}: {message}")]
    Remote { url: String, message: String },
    #[error("the WebSocket of remote kernel {kernel} failed: {message}")]
    WebSocket { kernel: String, message: String },
}

impl Error {
    /// Whether the Jupyter server refused the request (HTTP 401 or 403).
    pub fn is_refused(&self) -> bool {
        matches!(self, Error::Refused { .. })
    }
}
