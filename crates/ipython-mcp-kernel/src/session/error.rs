//! Why a session refused or failed a call, as typed data: which slot was busy, how long a call
//! waited and behind what, why no kernel could start. No hints and no tool names: what an
//! agent is told to do about each is the MCP crate's (its `error` module), which knows the
//! tools. A [`Wording`] carries that module's answers back down for the answers a session
//! records itself (a refused call's output, which `get_output` reads later too).
//!
//! Exhaustive on purpose (no `#[non_exhaustive]`): a new variant does not compile until the
//! MCP crate says what the agent sees for it.

use std::time::Duration;

use ipython_mcp_output::output::{Code, ErrorInfo};
use ipython_mcp_output::{PageError, PagerCall};

/// A call the session refused, or could not complete, for a reason of its own (not the
/// outcome of running code: that is the output's `error`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SessionError {
    /// Every one of the `max_pending` user slots is taken.
    #[error("{waiting} operations are already waiting for this kernel")]
    Busy { waiting: usize },
    /// The one slot for the server's own bookkeeping calls is taken.
    #[error("a bookkeeping call is already waiting for this kernel")]
    BookkeepingBusy,
    /// The call waited `waited` without being dispatched, and gave up; nothing ran.
    #[error("waited {:.1}s {behind}; nothing ran", .waited.as_secs_f64())]
    QueueTimeout { waited: Duration, behind: Behind },
    /// The client cancelled the call while it was queued; nothing ran.
    #[error("cancelled by the client while queued; nothing ran")]
    CancelledWhileQueued,
    /// The server is shutting down; nothing ran.
    #[error("the server is shutting down; nothing ran")]
    Closed,
    /// A restart asked for before the first kernel is up.
    #[error("the kernel is still starting; nothing to restart yet")]
    RestartWhileStarting,
    /// A restart waited its bound behind the operations queued before it (one is running).
    #[error("the restart waited too long behind earlier operations")]
    RestartWhileBusy,
    /// No kernel could be started: what the launcher returns, and what the status shows.
    #[error(transparent)]
    StartFailed(StartFailure),
    /// A call refused because the session has no kernel; `cause` is why its start failed,
    /// when the status still says.
    #[error(
        "the kernel is unavailable: {}",
        .cause.as_ref().map_or("the kernel could not be started".to_owned(), ToString::to_string)
    )]
    Unavailable { cause: Option<StartFailure> },
    /// The session's actor panicked: its kernels were killed, and every call fails until the
    /// session is restarted.
    #[error("an internal error stopped this kernel session; {call}")]
    Panicked { call: PanickedCall },
    /// A helper call on a kernel that has no helper (not a Python kernel).
    #[error("this kernel has no ipython-mcp helper (not a Python kernel)")]
    NoHelper,
    /// The helper answered something that is neither a result nor an error: a bug on one side.
    #[error("the helper's reply had an unexpected shape")]
    HelperReply,
    /// The helper did not answer, and the session had nothing else to say.
    #[error("the helper did not answer")]
    HelperSilent,
    /// An execution's full output cannot be paged.
    #[error(transparent)]
    Unpageable(#[from] PageError),
    /// A task of the session's failed in a way that is a bug (it panicked).
    #[error("{what}")]
    Internal { what: String },
}

/// What a call that timed out in the queue was waiting behind.
#[derive(Debug, Clone, PartialEq)]
pub enum Behind {
    /// Earlier operations held the kernel.
    EarlierOperations,
    /// The first kernel was still starting.
    KernelStart,
    /// The first kernel was waiting for its Python environment, in `phase` for
    /// `elapsed_seconds`.
    Environment { phase: String, elapsed_seconds: f64 },
}

impl std::fmt::Display for Behind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Behind::EarlierOperations => f.write_str("in the queue behind earlier operations"),
            Behind::KernelStart => f.write_str("for the kernel to start (starting the kernel)"),
            Behind::Environment {
                phase,
                elapsed_seconds,
            } => write!(
                f,
                "for the kernel to start (Python environment {phase} for {elapsed_seconds:.0}s)"
            ),
        }
    }
}

/// What an actor's panic meant for the call that hears of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanickedCall {
    /// The call was queued, or came after: nothing ran.
    NotRun,
    /// The call was running: its kernel was killed with the actor.
    WasRunning,
    /// No call: the session's status.
    NoCall,
}

impl std::fmt::Display for PanickedCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PanickedCall::NotRun => "nothing ran",
            PanickedCall::WasRunning => {
                "this call was running: its kernel was stopped and every variable is gone"
            }
            PanickedCall::NoCall => "calls fail until it is restarted",
        })
    }
}

/// Why no kernel could be started. `detail` fields are the lower layer's own text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StartFailure {
    /// No Python with ipykernel could be found or built; `phase` is the one that failed
    /// (`validate`, `create`, `install`, `verify`).
    #[error("environment {phase} phase failed: {detail}")]
    Environment { phase: &'static str, detail: String },
    /// A launch with no environment found (provisioning never succeeded).
    #[error("no Python environment to start a kernel with")]
    NoEnvironment,
    /// The kernel process did not start, or did not answer.
    #[error("{detail}")]
    Launch { detail: String },
    /// The helper could not be installed into a started kernel (stopped again).
    #[error("{detail}; kernel stderr: {stderr}")]
    Helper { detail: String, stderr: String },
    /// The configured library paths, preloads or module aliases failed in the kernel: the
    /// settings to fix are `LIBRARY_PATHS`, `PRELOAD_MODULES` and `MODULE_ALIASES`.
    #[error("{detail}")]
    Namespace { detail: String },
    /// Setting the configured variables in a kernel on the Jupyter server failed.
    #[error(
        "setting {} in the remote kernel failed: {detail}",
        ipython_mcp_config::ENVIRONMENT_VARIABLES.env
    )]
    RemoteVariables { detail: String },
    /// The helper could not be installed into a kernel on the Jupyter server.
    #[error("installing the helper into the remote kernel failed: {detail}")]
    RemoteHelper { detail: String },
    /// The Jupyter server has no kernelspec `name`; `known` are the ones it has.
    #[error(
        "the Jupyter server at {server} has no kernelspec {name:?} (it has: {})",
        .known.join(", ")
    )]
    NoSuchKernelspec {
        server: String,
        name: String,
        known: Vec<String>,
    },
    /// The Jupyter server failed a request, by kind.
    #[error("{detail}")]
    Server { kind: ServerFailure, detail: String },
}

/// How a Jupyter server failed a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerFailure {
    /// It refused the token (`JUPYTER_TOKEN`).
    Unauthorized,
    /// It did not answer at its URL (`JUPYTER_URL`), or not in time.
    Unreachable,
    /// It has no such kernel or kernelspec.
    NotFound,
    /// Anything else it answered.
    Other,
}

impl ServerFailure {
    /// The kind of a jupyter crate error.
    pub(crate) fn of(error: &ipython_mcp_jupyter::Error) -> ServerFailure {
        use ipython_mcp_jupyter::Error;
        match error {
            Error::Refused { .. } => ServerFailure::Unauthorized,
            Error::Unreachable { .. } | Error::RemoteTimeout { .. } => ServerFailure::Unreachable,
            Error::RemoteNotFound { .. } => ServerFailure::NotFound,
            _ => ServerFailure::Other,
        }
    }
}

impl StartFailure {
    /// A Jupyter server's error, by kind.
    pub(crate) fn server(error: &ipython_mcp_jupyter::Error) -> StartFailure {
        StartFailure::Server {
            kind: ServerFailure::of(error),
            detail: error.to_string(),
        }
    }

    /// The failure as the session stores and shows it: every text it carries has configured
    /// variable values and URL credentials masked, and its message fits `max_chars` (its
    /// longest text loses its middle).
    pub(crate) fn shown(self, redactor: &ipython_mcp_config::Redactor, max_chars: usize) -> Self {
        let redacted = self.map_texts(&mut |text| redactor.redact(&text));
        let excess = redacted
            .to_string()
            .chars()
            .count()
            .saturating_sub(max_chars);
        if excess == 0 {
            return redacted;
        }
        let mut longest = 0;
        let redacted = redacted.map_texts(&mut |text| {
            longest = longest.max(text.chars().count());
            text
        });
        let mut cut = false;
        redacted.map_texts(&mut |text| {
            let chars = text.chars().count();
            if cut || chars < longest {
                return text;
            }
            cut = true;
            ipython_mcp_output::bound::bound_message(&text, chars.saturating_sub(excess))
        })
    }

    /// The same failure with each text it carries passed through `change`, in order.
    fn map_texts(self, change: &mut impl FnMut(String) -> String) -> Self {
        match self {
            StartFailure::Environment { phase, detail } => StartFailure::Environment {
                phase,
                detail: change(detail),
            },
            StartFailure::NoEnvironment => StartFailure::NoEnvironment,
            StartFailure::Launch { detail } => StartFailure::Launch {
                detail: change(detail),
            },
            StartFailure::Helper { detail, stderr } => StartFailure::Helper {
                detail: change(detail),
                stderr: change(stderr),
            },
            StartFailure::Namespace { detail } => StartFailure::Namespace {
                detail: change(detail),
            },
            StartFailure::RemoteVariables { detail } => StartFailure::RemoteVariables {
                detail: change(detail),
            },
            StartFailure::RemoteHelper { detail } => StartFailure::RemoteHelper {
                detail: change(detail),
            },
            StartFailure::NoSuchKernelspec {
                server,
                name,
                known,
            } => StartFailure::NoSuchKernelspec {
                server: change(server),
                name: change(name),
                known: known.into_iter().map(&mut *change).collect(),
            },
            StartFailure::Server { kind, detail } => StartFailure::Server {
                kind,
                detail: change(detail),
            },
        }
    }
}

/// How the answers a session records itself are worded for the agent: the layer that knows
/// the tools supplies both (the MCP crate's `error::WORDING`), since a refused call's output
/// and a stream's paging marker are written here, before any caller sees them.
#[derive(Clone, Copy)]
pub struct Wording {
    /// A session error as the agent sees it: code, message and hint.
    pub error: fn(&SessionError) -> ErrorInfo,
    /// The call that pages a stream's omitted middle; `None`: the marker only counts.
    pub pager: Option<PagerCall>,
}

impl Wording {
    /// Without the layer above (the kernel crate's own tests and tools): the error's code and
    /// message, no hint, and markers that name no call.
    pub const PLAIN: Wording = Wording {
        error: SessionError::plain,
        pager: None,
    };
}

impl std::fmt::Debug for Wording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wording")
            .field("pager", &self.pager.is_some())
            .finish_non_exhaustive()
    }
}

impl SessionError {
    /// The code an agent sees for it, by variant.
    pub fn code(&self) -> Code {
        match self {
            SessionError::Busy { .. } | SessionError::BookkeepingBusy => Code::RuntimeBusy,
            SessionError::QueueTimeout { .. } | SessionError::RestartWhileBusy => {
                Code::QueueTimeout
            }
            SessionError::CancelledWhileQueued => Code::OperationCancelled,
            SessionError::Closed => Code::RuntimeClosed,
            SessionError::RestartWhileStarting
            | SessionError::StartFailed(_)
            | SessionError::Unavailable { .. }
            | SessionError::Panicked { .. } => Code::RuntimeUnavailable,
            SessionError::NoHelper => Code::UnsupportedKernel,
            SessionError::HelperReply | SessionError::Internal { .. } => Code::InternalError,
            // The code the server has always answered with: the call did not complete.
            SessionError::HelperSilent => Code::ExecutionError,
            SessionError::Unpageable(PageError::Unreadable { .. }) => Code::IoError,
            SessionError::Unpageable(_) => Code::InvalidArguments,
        }
    }

    /// Its code and message, with no hint ([`Wording::PLAIN`]).
    pub fn plain(&self) -> ErrorInfo {
        ErrorInfo::new(self.code(), self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_start_failure_is_redacted_and_its_message_fits_the_bound() {
        let redactor = ipython_mcp_config::Redactor::new(["tok3n-s3cret"]);
        let failure = StartFailure::Environment {
            phase: "install",
            detail: format!(
                "installing the requirements failed: tok3n-s3cret {} the end",
                "x".repeat(1_000)
            ),
        };
        let shown = failure.shown(&redactor, 120).to_string();
        assert_eq!(shown.chars().count(), 120, "{shown}");
        assert!(
            shown.starts_with("environment install phase failed: installing the requirements"),
            "{shown}"
        );
        assert!(
            shown.ends_with("the end") && !shown.contains("tok3n"),
            "{shown}"
        );
        // Short enough: only redacted.
        let short = StartFailure::Launch {
            detail: "no tok3n-s3cret here".to_owned(),
        };
        let shown = short.shown(&redactor, 120).to_string();
        assert!(
            !shown.contains("tok3n") && shown.starts_with("no "),
            "{shown}"
        );
    }
}
