//! The one place errors become what agents see: the crates below raise typed errors and name no
//! tool; the hints here, which do, turn them into a code, a message and what to do next.
//!
//! Tool bodies return [`ToolResult`] and use `?`: every typed error of the crates below
//! (`SessionError`, `ManagerError`, the notebook crate's `Error`, an [`ErrorInfo`] built on
//! the spot) converts into a [`ToolError`], and rmcp turns that into the tool's structured
//! error result (`{"ok": false, "error"}` with `isError: true`) through
//! [`IntoCallToolResult`]. A session's status carries its error typed; [`status`] words it
//! where a result shows the status. What a session records itself before any tool sees it (a
//! refused call's output, a stream's paging marker) it words with [`WORDING`], set in the
//! options of every session the server starts.

use ipython_mcp_jupyter::kernelspec;
use ipython_mcp_kernel::{
    Behind, ManagerError, RuntimeStatus, ServerFailure, SessionError, SessionId, StartFailure,
    Wording,
};
use ipython_mcp_output::{Code, ErrorInfo, Paging};
use rmcp::handler::server::tool::IntoCallToolResult;
use rmcp::model::{CallToolResponse, CallToolResult};

use crate::render;

/// A tool call that failed before it produced its normal result.
#[derive(Debug, Clone)]
pub(crate) struct ToolError(Box<ErrorInfo>);

/// What a tool body returns.
pub(crate) type ToolResult = Result<CallToolResult, ToolError>;

impl ToolError {
    /// An error with `code`'s standard hint, if it has one.
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        ToolError(Box::new(with_standard_hint(ErrorInfo::new(code, message))))
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

impl From<SessionError> for ToolError {
    fn from(error: SessionError) -> Self {
        ToolError::from(session_error(&error))
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

/// A Jupyter server's failure to read or write notebook `path` (a `jupyter:` path) as the
/// agent sees it: a missing notebook is `notebook_not_found`, a refused token is a
/// configuration problem, anything else an I/O error that says what the server did.
pub(crate) fn jupyter_notebook_error(path: &str, error: &ipython_mcp_jupyter::Error) -> ErrorInfo {
    use ipython_mcp_jupyter::Error as Jupyter;
    match error {
        Jupyter::RemoteNotFound { .. } => {
            notebook_error(&ipython_mcp_notebook::Error::NotFound {
                path: path.to_owned(),
            })
            .with_hint("notebook_create makes a new notebook; a directory must exist on the Jupyter server first")
        }
        Jupyter::Refused { .. } => ErrorInfo::new(
            Code::InvalidConfiguration,
            ipython_mcp_text::shorten(&error.to_string(), 1000),
        )
        .with_hint(format!(
            "set {} to a token the Jupyter server accepts",
            ipython_mcp_config::JUPYTER_TOKEN.env
        )),
        _ => ErrorInfo::new(
            Code::IoError,
            ipython_mcp_text::shorten(&format!("notebook {path:?}: {error}"), 1000),
        )
        .with_hint("nothing was changed unless the message says so; read the notebook again before retrying an edit"),
    }
}

/// A failure of a `jupyter:` notebook's live document (the collaboration room) as the agent
/// sees it. An edit that timed out or met a closed room may or may not be in the document:
/// the message says so, and the hint says how to find out.
pub(crate) fn collab_error(path: &str, error: &ipython_mcp_collab::CollabError) -> ErrorInfo {
    use ipython_mcp_collab::CollabError as Collab;
    let message = ipython_mcp_text::shorten(&format!("notebook {path:?}: {error}"), 1000);
    match error {
        Collab::NotFound { .. } => notebook_error(&ipython_mcp_notebook::Error::NotFound {
            path: path.to_owned(),
        }),
        Collab::Refused { .. } => ErrorInfo::new(Code::InvalidConfiguration, message).with_hint(
            format!(
                "set {} to a token the Jupyter server accepts",
                ipython_mcp_config::JUPYTER_TOKEN.env
            ),
        ),
        Collab::Invalid { .. } => ErrorInfo::new(Code::InvalidArguments, message)
            .with_hint("notebook_read shows the document as it is now"),
        Collab::Timeout { .. } | Collab::Closed { .. } => ErrorInfo::new(
            Code::IoError,
            format!("{message}; an edit in flight may or may not have reached the document"),
        )
        .with_hint("notebook_read shows whether it did (the next call joins the document again); then redo what is missing"),
        _ => ErrorInfo::new(Code::IoError, message)
            .with_hint("nothing was changed; notebook_read shows the document as it is now"),
    }
}

/// An `ipython-mcp-notebook` error as the agent sees it.
pub(crate) fn notebook_error(error: &ipython_mcp_notebook::Error) -> ErrorInfo {
    with_standard_hint(ErrorInfo::new(
        notebook_code(error),
        ipython_mcp_text::shorten(&error.to_string(), 1000),
    ))
}

/// `info` with its code's standard hint, if it has one and no other.
fn with_standard_hint(mut info: ErrorInfo) -> ErrorInfo {
    if info.hint.is_none() {
        info.hint = standard_hint(info.code).map(str::to_owned);
    }
    info
}

/// What an agent can do about an error of `code` when that does not depend on the call (a
/// site that knows better gives its own hint). Every code is listed, so a new one is decided
/// here.
fn standard_hint(code: Code) -> Option<&'static str> {
    match code {
        Code::InvalidPath => Some(
            "give a path relative to the workspace root, with '/' separators, ending in .ipynb (or .py for a percent script), without '..' and through no symlink",
        ),
        Code::NotebookNotFound => Some("notebook_create makes a new notebook"),
        Code::RevisionConflict => Some(
            "the file changed since you read it (another tool call, an editor, another process); nothing was changed: read it again, redo your change on the new content and pass the new revision",
        ),
        Code::CellNotFound => Some("notebook_read lists the cells with their ids and indices"),
        Code::ExecutionError
        | Code::OperationTimeout
        | Code::OperationCancelled
        | Code::KernelDied
        | Code::OutOfMemory
        | Code::RuntimeBusy
        | Code::QueueTimeout
        | Code::RuntimeUnavailable
        | Code::RuntimeClosed
        | Code::InvalidArguments
        | Code::InvalidName
        | Code::NameNotFound
        | Code::NotCallable
        | Code::ResultNotJson
        | Code::ModuleNotFound
        | Code::ProtectedName
        | Code::RegistrationConflict
        | Code::UnsupportedSignature
        | Code::StaleRegistration
        | Code::LimitExceeded
        | Code::UnsupportedKernel
        | Code::NotebookExists
        | Code::InvalidNotebook
        | Code::IoError
        | Code::ResourceNotFound
        | Code::InvalidConfiguration
        | Code::InternalError => None,
    }
}

/// How every session words what it records itself: refused calls by [`session_error`],
/// stream markers by [`page_call`]. The binary sets it in the options of each session it
/// starts (a session without it still works, with plain messages and no hints).
pub const WORDING: Wording = Wording {
    error: session_error,
    pager: Some(page_call),
};

/// The `get_output` call that pages a stream's omitted middle, as its marker names it.
fn page_call(paging: &Paging<'_>) -> String {
    format!(
        "get_output(execution_id=\"{}\", stream=\"{}\", start_line={}) pages them",
        paging.execution_id, paging.stream, paging.start_line
    )
}

/// The call a note in a notebook names for outputs that were not saved with the cell.
pub(crate) fn saved_output_pager(execution_id: &str) -> String {
    format!("get_output with execution_id {execution_id}")
}

/// A session's status as results show it: its error worded for the agent.
pub fn status(status: RuntimeStatus) -> RuntimeStatus<ErrorInfo> {
    status.map_error(|error| session_error(&error))
}

/// A kernel session's error as the agent sees it: the code its variant has, its message, and
/// what to do next.
pub fn session_error(error: &SessionError) -> ErrorInfo {
    let message = match error {
        // Only the helper's calls fail here; the tool that needs no helper still works.
        SessionError::NoHelper => format!("{error}; only execute works here"),
        _ => error.to_string(),
    };
    let info = ErrorInfo::new(error.code(), message);
    match session_hint(error) {
        Some(hint) => info.with_hint(hint),
        None => info,
    }
}

/// What to do about a session's error, by variant.
fn session_hint(error: &SessionError) -> Option<String> {
    let hint = match error {
        SessionError::Busy { .. } => "wait for earlier calls to finish, or check runtime_status",
        SessionError::QueueTimeout {
            behind: Behind::EarlierOperations,
            ..
        } => "the kernel is busy with earlier work; check runtime_status",
        SessionError::QueueTimeout {
            behind: Behind::KernelStart | Behind::Environment { .. },
            ..
        } => "the first start creates a Python environment and can take a minute; retry shortly, or watch runtime_status",
        SessionError::RestartWhileBusy => "interrupt the running code first, then restart",
        SessionError::StartFailed(cause) => return start_hint(cause),
        SessionError::Unavailable { .. } => {
            return Some(format!(
                "see runtime_status for details; fix the cause (e.g. set {}) and restart the server",
                ipython_mcp_config::PYTHON.env
            ))
        }
        SessionError::Panicked { .. } => {
            "call kernel_restart for this kernel: it starts a fresh one (earlier variables are gone)"
        }
        SessionError::BookkeepingBusy
        | SessionError::CancelledWhileQueued
        | SessionError::Closed
        | SessionError::RestartWhileStarting
        | SessionError::NoHelper
        | SessionError::HelperReply
        | SessionError::HelperSilent
        | SessionError::Unpageable(_)
        | SessionError::Internal { .. } => return None,
    };
    Some(hint.to_owned())
}

/// What to check when no kernel could be started, by cause.
fn start_hint(cause: &StartFailure) -> Option<String> {
    match cause {
        StartFailure::Namespace { .. } => Some(format!(
            "check {}, {} and {}, then restart the server",
            ipython_mcp_config::LIBRARY_PATHS.env,
            ipython_mcp_config::PRELOAD_MODULES.env,
            ipython_mcp_config::MODULE_ALIASES.env
        )),
        StartFailure::Server { kind, .. } => Some(match kind {
            ServerFailure::Unauthorized => format!(
                "check {} (or its file), then call kernel_restart",
                ipython_mcp_config::JUPYTER_TOKEN.env
            ),
            ServerFailure::Unreachable => format!(
                "check that the Jupyter server runs at {}, then call kernel_restart",
                ipython_mcp_config::JUPYTER_URL.env
            ),
            ServerFailure::NotFound => {
                "kernel_discover lists the server's kernelspecs and running kernels".to_owned()
            }
            ServerFailure::Other => "see runtime_status; kernel_restart tries again".to_owned(),
        }),
        StartFailure::Environment { .. }
        | StartFailure::NoEnvironment
        | StartFailure::Launch { .. }
        | StartFailure::Helper { .. }
        | StartFailure::RemoteVariables { .. }
        | StartFailure::RemoteHelper { .. }
        | StartFailure::NoSuchKernelspec { .. } => None,
    }
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

/// A notebook operation failed: worded by where (the file, the contents API, the live
/// document, the sessions). The json-lines protocol answers with the same words.
pub fn notebooks_error(error: &ipython_mcp_notebooks::Error) -> ErrorInfo {
    use ipython_mcp_notebooks::Error as Store;
    let message = error.to_string();
    match error {
        Store::Notebook(error) => notebook_error(error),
        Store::Jupyter { path, error } => jupyter_notebook_error(path, error),
        Store::Collab { path, error } => collab_error(path, error),
        Store::Lost => ErrorInfo::new(Code::InternalError, message),
        Store::Invalid(_) => ErrorInfo::new(Code::InvalidArguments, message),
        Store::Workspace { .. } => {
            ErrorInfo::new(Code::InvalidConfiguration, message).with_hint(format!(
                "set {} (--{}) to an existing directory",
                ipython_mcp_config::WORKSPACE_ROOT.env,
                ipython_mcp_config::WORKSPACE_ROOT.flag
            ))
        }
        Store::NoJupyterServer { .. } => ErrorInfo::new(Code::InvalidConfiguration, message)
            .with_hint(format!(
                "set {} (and {}) to the server's URL, or give a path in the workspace",
                ipython_mcp_config::JUPYTER_URL.env,
                ipython_mcp_config::JUPYTER_TOKEN.env
            )),
        Store::NoSession { .. } => ErrorInfo::new(Code::InvalidArguments, message)
            .with_hint("notebook_execute, notebook_execute_cell or notebook_session starts one"),
        Store::Kernel(error) => manager_error(error),
        Store::KernelStart { error: cause, .. } => ErrorInfo {
            message,
            ..manager_error(cause)
        },
    }
}

impl From<ipython_mcp_notebooks::Error> for ToolError {
    fn from(error: ipython_mcp_notebooks::Error) -> Self {
        ToolError::from(notebooks_error(&error))
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
    use std::path::{Path, PathBuf};

    #[test]
    fn a_code_brings_its_standard_hint_and_a_site_can_override_it() {
        let conflict = ToolError::new(Code::RevisionConflict, "changed").into_info();
        assert_eq!(
            conflict.hint.as_deref(),
            standard_hint(Code::RevisionConflict)
        );
        assert!(conflict.hint.is_some());
        let busy = ToolError::new(Code::RuntimeBusy, "busy");
        assert_eq!(busy.clone().into_info().hint, None);
        assert_eq!(
            busy.with_hint("wait").into_info().hint.as_deref(),
            Some("wait")
        );
    }

    /// The Rust files under `dir`, but for test modules in files of their own (`tests.rs`).
    fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read a source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|extension| extension == "rs")
                && path.file_name() != Some("tests.rs".as_ref())
            {
                found.push(path);
            }
        }
    }

    /// The string literals of Rust source `text` (their text as written, with the line each
    /// starts on), outside comments and the item each `#[cfg(test)]` guards.
    fn string_literals(text: &str) -> Vec<(usize, String)> {
        let chars: Vec<char> = text.chars().collect();
        let mut literals = Vec::new();
        let (mut at, mut line) = (0, 1);
        // After `#[cfg(test)]`: the depth of braces in the guarded item, which ends at its
        // block's `}` or, with none, at its `;`.
        let mut test_item: Option<usize> = None;
        while at < chars.len() {
            let rest = &chars[at..];
            let starts = |prefix: &str| rest.iter().copied().take(prefix.len()).eq(prefix.chars());
            if starts("//") {
                while at < chars.len() && chars[at] != '\n' {
                    at += 1;
                }
                continue;
            }
            if starts("/*") {
                let mut depth = 0;
                while at < chars.len() {
                    let rest = &chars[at..];
                    if rest.starts_with(&['/', '*']) {
                        depth += 1;
                        at += 2;
                    } else if rest.starts_with(&['*', '/']) {
                        depth -= 1;
                        at += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        line += usize::from(chars[at] == '\n');
                        at += 1;
                    }
                }
                continue;
            }
            if starts("#[cfg(test)]") {
                test_item = Some(0);
                at += "#[cfg(test)]".len();
                continue;
            }
            // A char literal ('"' among them), or a lifetime.
            if chars[at] == '\'' {
                at += match (rest.get(1), rest.get(2)) {
                    (Some('\\'), _) => rest[2..]
                        .iter()
                        .position(|c| *c == '\'')
                        .map_or(1, |end| end + 3),
                    (Some(_), Some('\'')) => 3,
                    _ => 1,
                };
                continue;
            }
            if let Some((open, raw, hashes)) = string_start(&chars, at) {
                let start_line = line;
                let mut end = open + 1;
                let mut literal = String::new();
                while let Some(&c) = chars.get(end) {
                    if !raw && c == '\\' {
                        literal.push(c);
                        literal.extend(chars.get(end + 1));
                        line += usize::from(chars.get(end + 1) == Some(&'\n'));
                        end += 2;
                        continue;
                    }
                    if c == '"' && (0..hashes).all(|n| chars.get(end + 1 + n) == Some(&'#')) {
                        end += 1 + hashes;
                        break;
                    }
                    line += usize::from(c == '\n');
                    literal.push(c);
                    end += 1;
                }
                if test_item.is_none() {
                    literals.push((start_line, literal));
                }
                at = end;
                continue;
            }
            match (chars[at], test_item) {
                ('\n', _) => line += 1,
                ('{', Some(depth)) => test_item = Some(depth + 1),
                ('}', Some(1)) | (';', Some(0)) => test_item = None,
                ('}', Some(depth)) => test_item = Some(depth.saturating_sub(1)),
                _ => {}
            }
            at += 1;
        }
        literals
    }

    /// Where a string literal opens at `at` (`"`, `b"`, `r"`, `r#"`, `br#"` …): the index of
    /// its quote, whether it is raw, and how many `#`s close it.
    fn string_start(chars: &[char], at: usize) -> Option<(usize, bool, usize)> {
        let in_word = |c: &char| c.is_alphanumeric() || *c == '_';
        if at > 0 && in_word(&chars[at - 1]) {
            return None;
        }
        let mut open = at + usize::from(chars[at] == 'b');
        let raw = chars.get(open) == Some(&'r');
        open += usize::from(raw);
        let hashes = chars[open.min(chars.len())..]
            .iter()
            .take_while(|c| **c == '#')
            .count();
        if hashes > 0 && !raw {
            return None;
        }
        open += hashes;
        (chars.get(open) == Some(&'"')).then_some((open, raw, hashes))
    }

    /// Where `literal` names the tool `name`: a name with `_` anywhere as a whole word; a
    /// one-word name (`reset`, `execute`, also plain English and Jupyter's words) only where
    /// it is written as a tool, `` `reset` `` or `reset(`.
    fn names_tool(literal: &str, name: &str) -> bool {
        let word = |at: usize, len: usize| {
            let before = literal[..at].chars().next_back();
            let after = literal[at + len..].chars().next();
            let part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            (!part(before) && !part(after), before, after)
        };
        literal.match_indices(name).any(|(at, _)| {
            let (whole, before, after) = word(at, name.len());
            whole && (name.contains('_') || before == Some('`') || after == Some('('))
        })
    }

    #[test]
    fn the_scan_sees_strings_and_skips_comments_chars_and_test_items() {
        let source = r##"
            // "kernel_restart" in a comment
            /* "kernel_restart" /* nested */ */
            const QUOTE: char = '"'; fn f<'a>(x: &'a str) {}
            const A: &str = "see runtime_status";
            const B: &str = r#"call "get_output(" now"#;
            #[cfg(test)]
            mod tests { const C: &str = "kernel_list"; fn g() { let _ = "{"; } }
            const D: &str = "the interrupt call\" reset; execute_request";
        "##;
        let literals = string_literals(source);
        let named = |name: &str| {
            literals
                .iter()
                .filter(|(_, text)| names_tool(text, name))
                .map(|(line, _)| *line)
                .collect::<Vec<_>>()
        };
        assert_eq!(named("runtime_status"), [5]);
        assert_eq!(named("get_output"), [6]);
        assert!(named("kernel_restart").is_empty() && named("kernel_list").is_empty());
        assert!(
            named("interrupt").is_empty()
                && named("reset").is_empty()
                && named("execute").is_empty()
        );
        assert_eq!(literals.last().map(|(line, _)| *line), Some(9));
    }

    /// Only this crate names its tools: the crates below raise typed errors and leave hints
    /// (and the paging call a marker names) to this module, so a renamed tool cannot leave a
    /// message below pointing at one that no longer exists.
    #[test]
    fn the_crates_below_name_no_tool_in_their_text() {
        let tools: Vec<String> = crate::handler::IpythonMcp::built_in_tools()
            .list_all()
            .into_iter()
            .map(|tool| tool.name.into_owned())
            .collect();
        assert!(
            tools.len() > 20,
            "the built-in tools were not found: {tools:?}"
        );
        let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the crates directory");
        // Every crate but this one, those above it (the binaries, the benchmark) and config,
        // whose settings table is the `--help` and docs/src/configuration.md text for people,
        // which may say what a setting does to a tool.
        let skipped = [
            "ipython-mcp-mcp",
            "ipython-mcp",
            "ipython-mcp-server",
            "ipython-mcp-bench",
            "ipython-mcp-config",
        ];
        let mut files = Vec::new();
        for entry in std::fs::read_dir(crates).expect("read crates/") {
            let path = entry.expect("a crate").path();
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or("");
            if !skipped.contains(&name) && path.join("src").is_dir() {
                sources(&path.join("src"), &mut files);
            }
        }
        assert!(files.len() > 30, "the sources were not found: {files:?}");
        let mut named = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).expect("read a source file");
            for (line, literal) in string_literals(&text) {
                for tool in tools.iter().filter(|tool| names_tool(&literal, tool)) {
                    named.push(format!("{}:{line}: `{tool}`", file.display()));
                }
            }
        }
        assert!(
            named.is_empty(),
            "tool names belong in crates/ipython-mcp-mcp/src/error.rs (hints) only:\n{}",
            named.join("\n")
        );
    }

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
