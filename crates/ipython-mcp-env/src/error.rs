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
        "no python3 found on PATH to create the managed environment; install Python 3 or set {python} to an interpreter that has ipykernel",
        python = ipython_mcp_config::PYTHON.env
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
    /// `environment` reads "the managed environment" or "the environment \"name\"".
    #[error("creating {environment} with {tool} failed: {detail}")]
    Create {
        environment: String,
        tool: String,
        detail: String,
    },

    /// Installing ipykernel (and a named environment's requirements) failed.
    #[error("installing {packages} into {environment} with {tool} failed: {detail}")]
    Install {
        environment: String,
        packages: String,
        tool: String,
        detail: String,
    },

    /// The new environment was built but its interpreter cannot import ipykernel.
    #[error("verifying {environment} at {} failed: {detail}", .path.display())]
    Verify {
        environment: String,
        path: PathBuf,
        detail: String,
    },

    /// Provisioning took longer than the install timeout; `detail` is the output so far.
    /// `phase` is the short phase name ([`Error::phase`]), `doing` what was running.
    #[error("provisioning {environment} timed out after {seconds} s while {doing} ({detail})")]
    Timeout {
        environment: String,
        phase: &'static str,
        doing: String,
        seconds: u64,
        detail: String,
    },

    /// The named environment's workspace is unusable (found when preparing, not configuring:
    /// it does not exist and cannot be created, or resolves into the project through a link).
    #[error("the workspace {} of environment {name:?} is unusable: {detail}", .workspace.display())]
    Workspace {
        name: String,
        workspace: PathBuf,
        detail: String,
    },

    /// The named environment exists but was made for another Python or dependency set.
    /// `recorded` and `wanted` read "Python 3.11 with requirements fingerprint 1a2b…".
    #[error(
        "environment {name:?} at {} was created for {recorded}, but this server wants {wanted}; a different dependency set needs a new name: choose another {active} (or delete the directory)",
        .path.display(),
        active = ipython_mcp_config::ACTIVE_ENVIRONMENT.env
    )]
    Mismatch {
        name: String,
        path: PathBuf,
        recorded: String,
        wanted: String,
    },

    /// The named environment's directory exists but is not a usable ipython-mcp environment
    /// (no valid metadata, or its interpreter no longer runs). It is never deleted for you.
    #[error(
        "environment {name:?} at {} cannot be reused: {detail}; choose another {active} (or delete the directory)",
        .path.display(),
        active = ipython_mcp_config::ACTIVE_ENVIRONMENT.env
    )]
    Unusable {
        name: String,
        path: PathBuf,
        detail: String,
    },
}

impl Error {
    /// The phase that failed: `validate`, `create`, `install` or `verify` (the kernel session
    /// adds `preload`).
    pub fn phase(&self) -> &'static str {
        match self {
            Error::Probe { .. }
            | Error::MissingIpykernel { .. }
            | Error::NoPython
            | Error::Workspace { .. } => "validate",
            Error::Io { .. }
            | Error::Lock { .. }
            | Error::LockTimeout { .. }
            | Error::Create { .. } => "create",
            Error::Install { .. } => "install",
            Error::Verify { .. } | Error::Mismatch { .. } | Error::Unusable { .. } => "verify",
            Error::Timeout { phase, .. } => phase,
        }
    }

    /// The same error with URL credentials masked in every text it carries.
    pub(crate) fn without_url_credentials(self) -> Error {
        let mask = |text: String| ipython_mcp_config::Redactor::default().redact(&text);
        match self {
            Error::Probe { python, detail } => Error::Probe {
                python,
                detail: mask(detail),
            },
            Error::MissingIpykernel { python, detail } => Error::MissingIpykernel {
                python,
                detail: mask(detail),
            },
            Error::Io {
                action,
                path,
                detail,
            } => Error::Io {
                action,
                path,
                detail: mask(detail),
            },
            Error::Create {
                environment,
                tool,
                detail,
            } => Error::Create {
                environment,
                tool,
                detail: mask(detail),
            },
            Error::Install {
                environment,
                packages,
                tool,
                detail,
            } => Error::Install {
                environment,
                packages,
                tool,
                detail: mask(detail),
            },
            Error::Verify {
                environment,
                path,
                detail,
            } => Error::Verify {
                environment,
                path,
                detail: mask(detail),
            },
            Error::Timeout {
                environment,
                phase,
                doing,
                seconds,
                detail,
            } => Error::Timeout {
                environment,
                phase,
                doing,
                seconds,
                detail: mask(detail),
            },
            Error::Unusable { name, path, detail } => Error::Unusable {
                name,
                path,
                detail: mask(detail),
            },
            other => other,
        }
    }
}
