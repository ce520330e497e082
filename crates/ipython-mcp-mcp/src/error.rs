//! The one place errors become what agents see.
//!
//! Tool bodies return [`ToolResult`] and use `?`: every typed error of the crates below
//! (`ManagerError`, the notebook crate's `Error`, an [`ErrorInfo`] built on the spot) converts
//! into a [`ToolError`], and rmcp turns that into the tool's structured error result
//! (`{"ok": false, "error"}` with `isError: true`) through [`IntoCallToolResult`]. The code an
//! agent sees is a [`Code`]; its standard hint comes with it.

use ipython_mcp_kernel::kernelspec;
use ipython_mcp_kernel::{Code, ErrorInfo, ManagerError, SessionId};
use rmcp::handler::server::tool::IntoCallToolResult;
use rmcp::model::{CallToolResponse, CallToolResult};

use crate::render;

/// A tool call that failed before it produced its normal result.
#[derive(Debug, Clone)]
pub(crate) struct ToolError(Box<ErrorInfo>);

/// What a tool body returns.
pub(crate) type ToolResult = Result<CallToolResult, ToolError>;

impl ToolError {
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        ToolError(Box::new(ErrorInfo::new(code, message)))
    }

    /// An `invalid_arguments` error: the call was refused and nothing ran.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        ToolError::new(Code::InvalidArguments, message)
    }

    pub(crate) fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.0.hint = Some(hint.into());
        self
    }

    /// The error as data (the json-lines protocol sends it as it is).
    pub(crate) fn into_info(self) -> ErrorInfo {
        *self.0
    }

    /// The tool result an agent sees.
    pub(crate) fn into_result(self) -> CallToolResult {
        render::request_error(&self.0)
    }
}

impl From<ErrorInfo> for ToolError {
    fn from(info: ErrorInfo) -> Self {
        ToolError(Box::new(info))
    }
}

impl From<Box<ErrorInfo>> for ToolError {
    fn from(info: Box<ErrorInfo>) -> Self {
        ToolError(info)
    }
}

impl From<ManagerError> for ToolError {
    fn from(error: ManagerError) -> Self {
        ToolError::from(manager_error(&error))
    }
}

/// A kernel manager error as the agent sees it, with what to do next.
pub(crate) fn manager_error(error: &ManagerError) -> ErrorInfo {
    let message = error.to_string();
    let hint = match error {
        ManagerError::Internal { .. } => return ErrorInfo::new(Code::InternalError, message),
        ManagerError::LimitReached { .. } => {
            return ErrorInfo::new(Code::LimitExceeded, message).with_hint(format!(
                "kernel_stop one you no longer need ({} raises the limit)",
                ipython_mcp_config::MAX_KERNELS.env
            ))
        }
        ManagerError::IdTaken { .. } => Some("pick another id, or kernel_stop it first".to_owned()),
        ManagerError::NotFound { running, .. } => Some(format!(
            "running sessions: {} (kernel_list shows them; kernel_start starts one)",
            running
                .iter()
                .map(SessionId::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        )),
        ManagerError::DefaultIsPermanent => Some(
            "use kernel_restart for a fresh kernel, or reset to clear its names".to_owned(),
        ),
        ManagerError::Venv(kernelspec::VenvError::NoIpykernel { .. }) => Some(
            "install it there (`<venv>/bin/python -m pip install ipykernel`, or `uv pip install ipykernel`) and call kernel_start again".to_owned(),
        ),
        ManagerError::Venv(kernelspec::VenvError::NoVenv { .. }) => Some(
            "pass the project directory that holds .venv, or the venv itself; kernel_discover lists what it finds".to_owned(),
        ),
        ManagerError::UnknownKernelspec { known, .. } => Some(format!(
            "known kernelspecs: {}; or pass venv:/path/to/project or an interpreter path",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )),
        _ => None,
    };
    let info = ErrorInfo::new(Code::InvalidArguments, message);
    match hint {
        Some(hint) => info.with_hint(hint),
        None => info,
    }
}

/// An `ipython-mcp-notebook` error as the agent sees it.
pub(crate) fn notebook_error(error: &ipython_mcp_notebook::Error) -> ErrorInfo {
    ErrorInfo::new(
        notebook_code(error),
        ipython_mcp_text::shorten(&error.to_string(), 1000),
    )
}

/// The code of an `ipython-mcp-notebook` error, by variant: a new variant does not compile
/// until it is mapped here (`every_notebook_error_has_a_known_code` checks that the mapping
/// agrees with the names the notebook crate gives its errors).
pub(crate) fn notebook_code(error: &ipython_mcp_notebook::Error) -> Code {
    use ipython_mcp_notebook::Error;
    match error {
        Error::InvalidPath { .. } => Code::InvalidPath,
        Error::NotFound { .. } => Code::NotebookNotFound,
        Error::AlreadyExists { .. } => Code::NotebookExists,
        Error::RevisionConflict { .. } => Code::RevisionConflict,
        Error::InvalidNotebook { .. } => Code::InvalidNotebook,
        Error::CellNotFound { .. } => Code::CellNotFound,
        Error::InvalidArguments { .. } => Code::InvalidArguments,
        Error::Io { .. } => Code::IoError,
    }
}

impl From<ipython_mcp_notebook::Error> for ToolError {
    fn from(error: ipython_mcp_notebook::Error) -> Self {
        ToolError::from(notebook_error(&error))
    }
}

impl IntoCallToolResult for ToolError {
    fn into_call_tool_result(self) -> Result<CallToolResponse, rmcp::ErrorData> {
        Ok(self.into_result().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_notebook_error_has_a_known_code() {
        use ipython_mcp_notebook::Error;
        let text = || "x".to_owned();
        for error in [
            Error::InvalidPath {
                path: text(),
                reason: text(),
            },
            Error::NotFound { path: text() },
            Error::AlreadyExists { path: text() },
            Error::RevisionConflict {
                path: text(),
                expected: text(),
                actual: text(),
            },
            Error::InvalidNotebook {
                path: text(),
                problem: text(),
            },
            Error::CellNotFound {
                reference: text(),
                cells: 0,
            },
            Error::InvalidArguments { message: text() },
            Error::Io {
                path: text(),
                message: text(),
            },
        ] {
            assert!(Code::from_wire(error.code()).is_some(), "{error:?}");
            assert_eq!(notebook_code(&error).as_str(), error.code());
        }
    }
}
