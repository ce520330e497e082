//! What an execution produced, bounded and ready to serialize: the `execute` result shape
//! (docs/src/tools.md), independent of MCP. The bottom of the crate: every other module takes
//! its vocabulary from here, and this module takes nothing from them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How an execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Interruption {
    /// The kernel stopped the operation itself after SIGINT.
    Cooperative,
    /// The kernel was killed and replaced.
    Terminated,
}

/// The state of the user's namespace after an interrupted or failed operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum NamespaceOutcome {
    /// Everything defined before (and during) the operation is still there.
    Preserved,
    /// The kernel was replaced: user names are gone.
    Reset,
    /// The kernel was replaced, and the namespace as of the last completed execution came back
    /// from its checkpoint (`restored` and `lost` say which names).
    Restored,
    /// The server cannot tell.
    Unknown,
}

/// What came back when a replacement kernel loaded the session's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Restore {
    /// The names restored (variables and imported modules).
    pub restored: Vec<String>,
    /// The names that could not be kept or loaded, and why.
    pub lost: Vec<LostName>,
    /// The execution count the checkpoint was taken after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_count: Option<u64>,
    /// How long loading it took.
    pub restore_ms: u64,
}

/// A name a checkpoint could not bring back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LostName {
    pub name: String,
    pub reason: String,
}

/// An execution's id (a UUID), as `execute` returns it and `get_output` takes it back.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct ExecutionId(String);

impl ExecutionId {
    /// A fresh, unique id.
    pub fn generate() -> ExecutionId {
        ExecutionId(uuid::Uuid::new_v4().to_string())
    }

    /// The id of a call refused before it became an execution (empty on the wire).
    pub fn unassigned() -> ExecutionId {
        ExecutionId(String::new())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An id as text, e.g. one a client sent back; it names an execution only if one has it.
impl From<&str> for ExecutionId {
    fn from(id: &str) -> ExecutionId {
        ExecutionId(id.to_owned())
    }
}

impl From<ExecutionId> for String {
    fn from(id: ExecutionId) -> String {
        id.0
    }
}

impl std::fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for ExecutionId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

/// Declares [`Code`] once: each variant with its wire name.
macro_rules! codes {
    ($($(#[$doc:meta])* $variant:ident = $wire:literal;)*) => {
        /// Every stable error code an agent can see (docs/src/errors.md). Closed: a code is added
        /// here, with its wire name, or it does not exist. What an agent is told to do about
        /// one is the MCP crate's (its `error` module), which knows the tools.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code {
            $($(#[$doc])* $variant,)*
        }

        impl Code {
            /// Every code, in declaration order.
            pub const ALL: &'static [Code] = &[$(Code::$variant),*];

            /// The name agents see in `error.code`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $wire,)*
                }
            }

            /// The code named `wire`, if there is one.
            pub fn from_wire(wire: &str) -> Option<Code> {
                match wire {
                    $($wire => Some(Code::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

codes! {
    /// User code raised (an outcome carried as an error field, not an infrastructure failure).
    ExecutionError = "execution_error";
    OperationTimeout = "operation_timeout";
    OperationCancelled = "operation_cancelled";
    KernelDied = "kernel_died";
    /// The kernel's processes exceeded their memory limit and were killed (a kind of death).
    OutOfMemory = "out_of_memory";
    RuntimeBusy = "runtime_busy";
    QueueTimeout = "queue_timeout";
    RuntimeUnavailable = "runtime_unavailable";
    RuntimeClosed = "runtime_closed";
    InvalidArguments = "invalid_arguments";
    InvalidName = "invalid_name";
    NameNotFound = "name_not_found";
    NotCallable = "not_callable";
    ResultNotJson = "result_not_json";
    ModuleNotFound = "module_not_found";
    ProtectedName = "protected_name";
    RegistrationConflict = "registration_conflict";
    UnsupportedSignature = "unsupported_signature";
    StaleRegistration = "stale_registration";
    LimitExceeded = "limit_exceeded";
    UnsupportedKernel = "unsupported_kernel";
    InvalidPath = "invalid_path";
    NotebookNotFound = "notebook_not_found";
    NotebookExists = "notebook_exists";
    RevisionConflict = "revision_conflict";
    InvalidNotebook = "invalid_notebook";
    CellNotFound = "cell_not_found";
    IoError = "io_error";
    ResourceNotFound = "resource_not_found";
    InvalidConfiguration = "invalid_configuration";
    /// A bug in the server or its kernel helper: the request and its protocol did not match.
    InternalError = "internal_error";
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = String::deserialize(deserializer)?;
        Code::from_wire(&wire)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown error code `{wire}`")))
    }
}

/// A structured failure, as docs/src/errors.md lists them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ErrorInfo {
    // A string in the schema: the closed list of codes lives in docs/src/errors.md, not in every
    // `tools/list`.
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub code: Code,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ename: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evalue: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// With `out_of_memory`: the kernel's memory limit, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// With `out_of_memory`: the most the kernel's processes were seen to use, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<u64>,
}

impl ErrorInfo {
    /// An error with no hint (the MCP crate adds the hints, which name its tools).
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ErrorInfo {
            code,
            message: message.into(),
            ename: None,
            evalue: None,
            traceback: None,
            hint: None,
            limit_bytes: None,
            peak_bytes: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// One rich display: a mime bundle and its metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DisplayItem {
    pub data: Map<String, Value>,
    pub metadata: Map<String, Value>,
}

/// A Jupyter mime bundle as the JSON map a [`DisplayItem`] (or a saved output) carries.
pub(crate) fn media_map(media: &ipython_mcp_jupyter::protocol::Media) -> Map<String, Value> {
    match serde_json::to_value(media) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// A display payload left out of the reply to keep it within its byte budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Withheld {
    /// Index in `display_data`, or none for the `result`.
    pub display: Option<usize>,
    pub mime: String,
    /// Size of the payload (decoded bytes for images).
    pub bytes: u64,
    /// Where it is in the spool; none when there is no spool (or it could not be written), and
    /// while the execution still runs.
    pub path: Option<String>,
}

/// How much of an execution's full output is on disk, for paging with `get_output`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SpoolInfo {
    /// Bytes of stdout kept on disk.
    pub stdout_bytes: u64,
    /// Bytes of stderr kept on disk.
    pub stderr_bytes: u64,
    /// Bytes beyond the per-execution spool bound that were not kept.
    pub dropped_bytes: u64,
    /// True once the files were deleted to keep the spool within its total bound.
    pub evicted: bool,
}

/// Per-field truncation flags.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Truncated {
    pub stdout: bool,
    pub stderr: bool,
    pub display_data: bool,
    pub result: bool,
    pub traceback: bool,
    /// Where the omitted characters were in a cut `stdout`: it holds the first
    /// `stdout_cut_at` characters printed, then the last ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_cut_at: Option<u64>,
    /// The same for `stderr`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_cut_at: Option<u64>,
}

/// Where a stream's kept text was cut (a byte offset into it) and the line the text view
/// shows there. Structured content has only what the code printed, so that a program can
/// count on it; the marker is for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub at: usize,
    pub marker: String,
}

fn stream_view<'a>(text: &'a str, cut: Option<&Cut>) -> std::borrow::Cow<'a, str> {
    match cut {
        Some(Cut { at, marker }) if text.is_char_boundary(*at) => {
            join_at_marker(&text[..*at], marker, &text[*at..]).into()
        }
        _ => text.into(),
    }
}

/// A cut text as an agent reads it: the head, the marker on a line of its own, the tail.
pub fn join_at_marker(head: &str, marker: &str, tail: &str) -> String {
    let mut text = String::with_capacity(head.len() + marker.len() + tail.len() + 2);
    text.push_str(head);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(marker);
    if !tail.is_empty() {
        text.push('\n');
        text.push_str(tail);
    }
    text
}

/// Where and how an operation ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RuntimeInfo {
    pub request_id: String,
    pub admission_seq: u64,
    pub epoch: u64,
    pub queue_wait_ms: u64,
    pub run_ms: u64,
    pub interruption: Option<Interruption>,
    pub namespace: Option<NamespaceOutcome>,
    /// With `namespace: restored`: what came back from the checkpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore: Option<Restore>,
}

impl RuntimeInfo {
    /// An operation's runtime before any session admitted it (refused, or not yet started).
    pub fn unadmitted(request_id: impl Into<String>) -> Self {
        RuntimeInfo {
            request_id: request_id.into(),
            admission_seq: 0,
            epoch: 0,
            queue_wait_ms: 0,
            run_ms: 0,
            interruption: None,
            namespace: None,
            restore: None,
        }
    }
}

/// The bounded result of one `execute`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExecutionOutput {
    pub ok: bool,
    pub status: ExecutionStatus,
    pub execution_count: Option<u64>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_omitted_chars: u64,
    pub stderr_omitted_chars: u64,
    /// Where `stdout` was cut, for the text view's marker.
    #[serde(skip)]
    #[cfg_attr(feature = "schema", schemars(skip))]
    pub stdout_cut: Option<Cut>,
    /// Where `stderr` was cut.
    #[serde(skip)]
    #[cfg_attr(feature = "schema", schemars(skip))]
    pub stderr_cut: Option<Cut>,
    pub display_data: Vec<DisplayItem>,
    pub display_omitted: u64,
    pub result: Option<Map<String, Value>>,
    /// What the server did to the result's images (`ipython_mcp.downscaled_images` …), when
    /// it did anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_metadata: Option<Map<String, Value>>,
    /// Display payloads left out to keep the reply within its byte budget, each in the spool.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<Withheld>,
    pub error: Option<ErrorInfo>,
    pub truncated: Truncated,
    pub execution_id: ExecutionId,
    pub runtime: RuntimeInfo,
    /// Something the agent must know that happened outside this call (e.g. the kernel died
    /// while idle and was replaced before it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// Present when stdout or stderr was cut: how much of the full text is on disk, to page
    /// or search with `get_output`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spool: Option<SpoolInfo>,
}

impl ExecutionOutput {
    /// A result for an operation that never ran (rejected, unavailable, closed).
    pub fn not_run(execution_id: ExecutionId, runtime: RuntimeInfo, error: ErrorInfo) -> Self {
        ExecutionOutput {
            ok: false,
            status: ExecutionStatus::Rejected,
            error: Some(error),
            ..ExecutionOutput::pending(execution_id, runtime)
        }
    }

    /// `stdout` as the text view shows it: the marker line where it was cut.
    pub fn stdout_view(&self) -> std::borrow::Cow<'_, str> {
        stream_view(&self.stdout, self.stdout_cut.as_ref())
    }

    /// `stderr` as the text view shows it.
    pub fn stderr_view(&self) -> std::borrow::Cow<'_, str> {
        stream_view(&self.stderr, self.stderr_cut.as_ref())
    }

    /// An execution that has not finished yet (nothing collected).
    pub fn pending(execution_id: ExecutionId, runtime: RuntimeInfo) -> Self {
        ExecutionOutput {
            ok: true,
            status: ExecutionStatus::Pending,
            execution_count: None,
            stdout: String::new(),
            stderr: String::new(),
            stdout_omitted_chars: 0,
            stderr_omitted_chars: 0,
            stdout_cut: None,
            stderr_cut: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_is_listed_in_the_readme() {
        let errors = include_str!("../../../docs/src/errors.md");
        let start = errors
            .find("Errors carry a")
            .expect("docs/src/errors.md lists the error codes");
        let listing = &errors[start..start + errors[start..].find("\n\n").unwrap()];
        for &code in Code::ALL {
            assert_eq!(Code::from_wire(code.as_str()), Some(code));
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, Value::String(code.as_str().to_owned()));
            assert_eq!(serde_json::from_value::<Code>(json).unwrap(), code);
            assert!(
                listing.contains(&format!("`{code}`")),
                "docs/src/errors.md's error-code list lacks `{code}`"
            );
        }
        // And the list names no code the server does not have.
        let listed = listing
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|word| word.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .filter(|word| word.contains('_') && *word != "code");
        for word in listed {
            assert!(
                Code::from_wire(word).is_some(),
                "docs/src/errors.md lists unknown code `{word}`"
            );
        }
        assert!(serde_json::from_value::<Code>(Value::from("no_such_code")).is_err());
    }
}
