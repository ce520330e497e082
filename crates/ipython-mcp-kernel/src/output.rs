//! What an execution produced, bounded and ready to serialize: the `execute` result shape
//! (README, "Tools"), independent of MCP.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How an execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    Ok,
    Error,
    Timeout,
    Cancelled,
    Pending,
    Rejected,
}

/// What happened to the kernel when an operation was interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Interruption {
    /// The kernel stopped the operation itself after SIGINT.
    Cooperative,
    /// The kernel was killed and replaced.
    Terminated,
}

/// The state of the user's namespace after an interrupted or failed operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NamespaceOutcome {
    /// Everything defined before (and during) the operation is still there.
    Preserved,
    /// The kernel was replaced: user names are gone.
    Reset,
    /// The server cannot tell.
    Unknown,
}

/// A structured failure, as the README lists them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorInfo {
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ename: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evalue: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl ErrorInfo {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        ErrorInfo {
            code: code.to_owned(),
            message: message.into(),
            ename: None,
            evalue: None,
            traceback: None,
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// One rich display: a mime bundle and its metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DisplayItem {
    pub data: Map<String, Value>,
    pub metadata: Map<String, Value>,
}

/// Per-field truncation flags.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct Truncated {
    pub stdout: bool,
    pub stderr: bool,
    pub display_data: bool,
    pub result: bool,
    pub traceback: bool,
}

/// Where and how an operation ran.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct RuntimeInfo {
    pub request_id: String,
    pub admission_seq: u64,
    pub epoch: u64,
    pub queue_wait_ms: u64,
    pub run_ms: u64,
    pub interruption: Option<Interruption>,
    pub namespace: Option<NamespaceOutcome>,
}

/// The bounded result of one `execute`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ExecutionOutput {
    pub ok: bool,
    pub status: ExecutionStatus,
    pub execution_count: Option<u64>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_omitted_chars: u64,
    pub stderr_omitted_chars: u64,
    pub display_data: Vec<DisplayItem>,
    pub display_omitted: u64,
    pub result: Option<Map<String, Value>>,
    /// What the server did to the result's images (`ipython_mcp.downscaled_images` …), when
    /// it did anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_metadata: Option<Map<String, Value>>,
    /// Display payloads left out to keep the reply within its byte budget, each in the spool.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<crate::payload::Withheld>,
    pub error: Option<ErrorInfo>,
    pub truncated: Truncated,
    pub execution_id: String,
    pub runtime: RuntimeInfo,
    /// Something the agent must know that happened outside this call (e.g. the kernel died
    /// while idle and was replaced before it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// Present when stdout or stderr was cut: how much of the full text is on disk, to page
    /// or search with `get_output`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spool: Option<crate::executions::SpoolInfo>,
}

impl ExecutionOutput {
    /// A result for an operation that never ran (rejected, unavailable, closed).
    pub fn not_run(execution_id: String, runtime: RuntimeInfo, error: ErrorInfo) -> Self {
        ExecutionOutput {
            ok: false,
            status: ExecutionStatus::Rejected,
            error: Some(error),
            ..ExecutionOutput::pending(execution_id, runtime)
        }
    }

    /// An execution that has not finished yet (nothing collected).
    pub fn pending(execution_id: String, runtime: RuntimeInfo) -> Self {
        ExecutionOutput {
            ok: true,
            status: ExecutionStatus::Pending,
            execution_count: None,
            stdout: String::new(),
            stderr: String::new(),
            stdout_omitted_chars: 0,
            stderr_omitted_chars: 0,
            display_data: Vec::new(),
            display_omitted: 0,
            result: None,
            result_metadata: None,
            withheld: Vec::new(),
            error: None,
            truncated: Truncated::default(),
            execution_id,
            runtime,
            notice: None,
            spool: None,
        }
    }
}
