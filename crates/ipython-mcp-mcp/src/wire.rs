//! The JSON schemas of the kernel crate's result types, as agents read them in `tools/list`.
//!
//! The kernel crate serializes its results but knows nothing of MCP, so it derives no schemas.
//! Each type here mirrors one kernel type for schemars' remote derive: same fields, same serde
//! attributes, same doc comments (they become the schema's descriptions), and, through
//! `remote`, the kernel type's name for its definition. MCP structs holding a kernel type say
//! `#[schemars(with = "wire::…Schema")]`. The mirrors are never built; the tests below serialize
//! every kernel type and compare it with its mirror's schema, so a field added on one side only
//! fails them.

// Only the schemas derived from these types are used, never a value.
#![allow(dead_code)]

use schemars::JsonSchema;
use serde_json::{Map, Value};

/// How an execution ended.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::ExecutionStatus")]
#[serde(rename_all = "snake_case")]
pub(crate) enum ExecutionStatusSchema {
    Ok,
    Error,
    Timeout,
    Cancelled,
    Pending,
    Rejected,
}

/// What happened to the kernel when an operation was interrupted.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::Interruption")]
#[serde(rename_all = "snake_case")]
pub(crate) enum InterruptionSchema {
    /// The kernel stopped the operation itself after SIGINT.
    Cooperative,
    /// The kernel was killed and replaced.
    Terminated,
}

/// The state of the user's namespace after an interrupted or failed operation.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::NamespaceOutcome")]
#[serde(rename_all = "snake_case")]
pub(crate) enum NamespaceOutcomeSchema {
    /// Everything defined before (and during) the operation is still there.
    Preserved,
    /// The kernel was replaced: user names are gone.
    Reset,
    /// The server cannot tell.
    Unknown,
}

/// A structured failure, as the README lists them.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::ErrorInfo")]
pub(crate) struct ErrorInfoSchema {
    // A string in the schema: the closed list lives in the README, not in every tools/list.
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

/// One rich display: a mime bundle and its metadata.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::DisplayItem")]
pub(crate) struct DisplayItemSchema {
    pub data: Map<String, Value>,
    pub metadata: Map<String, Value>,
}

/// Per-field truncation flags.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::Truncated")]
pub(crate) struct TruncatedSchema {
    pub stdout: bool,
    pub stderr: bool,
    pub display_data: bool,
    pub result: bool,
    pub traceback: bool,
}

/// Where and how an operation ran.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::RuntimeInfo")]
pub(crate) struct RuntimeInfoSchema {
    pub request_id: String,
    pub admission_seq: u64,
    pub epoch: u64,
    pub queue_wait_ms: u64,
    pub run_ms: u64,
    pub interruption: Option<InterruptionSchema>,
    pub namespace: Option<NamespaceOutcomeSchema>,
}

/// A display payload left out of the reply to keep it within its byte budget.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::Withheld")]
pub(crate) struct WithheldSchema {
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
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::SpoolInfo")]
pub(crate) struct SpoolInfoSchema {
    /// Bytes of stdout kept on disk.
    pub stdout_bytes: u64,
    /// Bytes of stderr kept on disk.
    pub stderr_bytes: u64,
    /// Bytes beyond the per-execution spool bound that were not kept.
    pub dropped_bytes: u64,
    /// True once the files were deleted to keep the spool within its total bound.
    pub evicted: bool,
}

/// The bounded result of one `execute`.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::ExecutionOutput")]
pub(crate) struct ExecutionOutputSchema {
    pub ok: bool,
    pub status: ExecutionStatusSchema,
    pub execution_count: Option<u64>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_omitted_chars: u64,
    pub stderr_omitted_chars: u64,
    pub display_data: Vec<DisplayItemSchema>,
    pub display_omitted: u64,
    pub result: Option<Map<String, Value>>,
    /// What the server did to the result's images (`ipython_mcp.downscaled_images` …), when
    /// it did anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_metadata: Option<Map<String, Value>>,
    /// Display payloads left out to keep the reply within its byte budget, each in the spool.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<WithheldSchema>,
    pub error: Option<ErrorInfoSchema>,
    pub truncated: TruncatedSchema,
    pub execution_id: String,
    pub runtime: RuntimeInfoSchema,
    /// Something the agent must know that happened outside this call (e.g. the kernel died
    /// while idle and was replaced before it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// Present when stdout or stderr was cut: how much of the full text is on disk, to page
    /// or search with `get_output`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spool: Option<SpoolInfoSchema>,
}

/// Which output stream.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::StreamName")]
#[serde(rename_all = "snake_case")]
pub(crate) enum StreamNameSchema {
    Stdout,
    Stderr,
}

/// One page of a spooled stream.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::Page")]
pub(crate) struct PageSchema {
    pub stream: StreamNameSchema,
    /// The regular expression lines were filtered by, if any.
    pub pattern: Option<String>,
    /// The returned lines, in order, with their 1-based line numbers.
    pub lines: Vec<PageLineSchema>,
    /// Lines in the stream so far (a running execution may add more).
    pub total_lines: u64,
    /// With a pattern: how many lines matched in the whole stream.
    pub total_matches: Option<u64>,
    /// Where to continue (`start_line` of the next call), or null at the end.
    pub next_line: Option<u64>,
    /// True when a line was cut to fit the character bound.
    pub truncated: bool,
    /// False while more lines may come: the execution still runs, or its output is still being
    /// written to disk.
    pub complete: bool,
}

#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::PageLine")]
pub(crate) struct PageLineSchema {
    pub line: u64,
    pub text: String,
}

/// Life stage of a session.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::SessionState")]
#[serde(rename_all = "snake_case")]
pub(crate) enum SessionStateSchema {
    Starting,
    Ready,
    Busy,
    Recovering,
    Unavailable,
    Closed,
}

/// The kernel process behind a session.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::KernelDescription")]
pub(crate) struct KernelDescriptionSchema {
    /// Null for a kernel on a Jupyter server.
    pub pid: Option<u32>,
    /// Where a remote kernel lives (null for a local one).
    #[schemars(with = "Option<RemoteDescriptionSchema>")]
    pub remote: Option<ipython_mcp_kernel::RemoteDescription>,
    /// The interpreter (or, for a non-Python kernelspec, the program) running the kernel.
    pub python: String,
    /// The kernel's language (`python`, `bash`, …).
    pub language: String,
    /// The language version the kernel reports.
    pub python_version: String,
    pub ipykernel_version: String,
    pub implementation: String,
    pub spec: String,
    pub helper: bool,
    /// The kernel's working directory at start.
    pub working_dir: String,
}

/// A kernel on a Jupyter server.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::RemoteDescription")]
pub(crate) struct RemoteDescriptionSchema {
    /// The server's base URL.
    pub server: String,
    /// The kernel's id on the server.
    pub kernel_id: String,
    /// Attached to a kernel someone else started: stopping detaches, leaving it running.
    pub attached: bool,
}

/// Where the kernel's Python comes from, and provisioning progress.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::EnvironmentStatus")]
pub(crate) struct EnvironmentStatusSchema {
    /// `probing`, `validating`, `locking`, `creating`, `installing`, `verifying`, `ready`, or
    /// `failed`.
    pub phase: String,
    pub elapsed_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// True when this start created the environment.
    pub created: bool,
    /// When `phase` is `failed`: which one (`validate`, `create`, `install`, `verify`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_phase: Option<String>,
}

/// What `runtime_status` returns for one session.
#[derive(JsonSchema)]
#[schemars(remote = "ipython_mcp_kernel::RuntimeStatus")]
pub(crate) struct RuntimeStatusSchema {
    pub kernel_id: String,
    pub state: SessionStateSchema,
    pub epoch: u64,
    pub queue_depth: usize,
    pub operation_active: bool,
    pub latest_interruption_kind: Option<InterruptionSchema>,
    pub latest_namespace_outcome: Option<NamespaceOutcomeSchema>,
    pub startup_seconds: Option<f64>,
    /// Seconds the latest replacement took (a promoted spare takes milliseconds).
    pub replacement_startup_seconds: Option<f64>,
    pub kernel: Option<KernelDescriptionSchema>,
    /// Process ids of warm spare kernels ready to replace this one.
    pub spare_kernel_pids: Vec<u32>,
    pub environment: Option<EnvironmentStatusSchema>,
    pub error: Option<ErrorInfoSchema>,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use ipython_mcp_kernel::{
        Code, DisplayItem, EnvironmentStatus, ErrorInfo, ExecutionOutput, ExecutionStatus,
        Interruption, KernelDescription, NamespaceOutcome, Page, PageLine, RuntimeInfo,
        RuntimeStatus, SessionState, SpoolInfo, StreamName, Truncated, Withheld,
    };
    use rmcp::handler::server::tool::schema_for_output;
    use schemars::JsonSchema;
    use serde::Serialize;
    use serde_json::{json, Map, Value};

    use super::*;

    /// How a value is compared with its schema. A `Full` value (every option set, every list
    /// non-empty) serializes every field, so its keys must be exactly the schema's properties;
    /// a `Bare` one (every option unset, every list empty) serializes only the fields that are
    /// always there, so its keys must be exactly the schema's required ones.
    #[derive(Clone, Copy, Debug)]
    enum Filled {
        Full,
        Bare,
    }

    /// The schema `tools/list` would serve for `S`, and `value` as the kernel serializes it.
    fn served<S: JsonSchema + 'static>(value: &impl Serialize) -> (Map<String, Value>, Value) {
        let schema = schema_for_output::<S>().as_ref().clone();
        let value = serde_json::to_value(value).expect("kernel results serialize");
        (schema, value)
    }

    /// Checks `value` against `schema` through every nested object and list.
    fn check(value: &Value, schema: &Map<String, Value>, filled: Filled) {
        let root = Value::Object(schema.clone());
        let defs = schema
            .get("$defs")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        walk(value, &root, &defs, filled, "$");
    }

    /// Checks `value` against the definition `name` in `S`'s schema: for the nested types the
    /// values above only serialize fully, as an option's or a list's content.
    fn check_definition<S: JsonSchema + 'static>(
        value: &impl Serialize,
        name: &str,
        filled: Filled,
    ) {
        let (schema, value) = served::<S>(value);
        let defs = schema
            .get("$defs")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let definition = defs
            .get(name)
            .unwrap_or_else(|| panic!("no definition `{name}`"));
        walk(&value, definition, &defs, filled, name);
    }

    /// `schema` with `$ref`s followed and `anyOf`/`oneOf` spread into their branches.
    fn branches<'a>(schema: &'a Value, defs: &'a Map<String, Value>) -> Vec<&'a Value> {
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            let name = reference
                .strip_prefix("#/$defs/")
                .expect("references point into $defs");
            let target = defs.get(name).expect("every referenced definition exists");
            return branches(target, defs);
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alternatives) = schema.get(key).and_then(Value::as_array) {
                return alternatives
                    .iter()
                    .flat_map(|b| branches(b, defs))
                    .collect();
            }
        }
        vec![schema]
    }

    fn admits_type(schema: &Value, value: &Value) -> bool {
        let name = match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_f64() => "number",
            Value::Number(_) => "integer",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        let admitted =
            |declared: &str| declared == name || (declared == "number" && name == "integer");
        match schema.get("type") {
            None => true,
            Some(Value::String(declared)) => admitted(declared),
            Some(Value::Array(declared)) => declared.iter().filter_map(Value::as_str).any(admitted),
            Some(_) => false,
        }
    }

    fn walk(value: &Value, schema: &Value, defs: &Map<String, Value>, filled: Filled, at: &str) {
        let candidates = branches(schema, defs);
        let fitting: Vec<&Value> = candidates
            .iter()
            .copied()
            .filter(|branch| admits_type(branch, value))
            .collect();
        assert!(!fitting.is_empty(), "{at}: the schema admits no {value}");
        match value {
            Value::Object(fields) => {
                let Some(properties) = fitting
                    .iter()
                    .find_map(|branch| branch.get("properties").and_then(Value::as_object))
                else {
                    // A free-form map (a mime bundle, metadata): nothing to compare.
                    return;
                };
                let keys: BTreeSet<&str> = fields.keys().map(String::as_str).collect();
                let expected: BTreeSet<&str> = match filled {
                    Filled::Full => properties.keys().map(String::as_str).collect(),
                    Filled::Bare => fitting
                        .iter()
                        .find_map(|branch| branch.get("required").and_then(Value::as_array))
                        .map(|required| required.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default(),
                };
                assert_eq!(
                    keys, expected,
                    "{at}: serialized fields vs. schema ({filled:?})"
                );
                for (key, field) in fields {
                    walk(
                        field,
                        &properties[key],
                        defs,
                        filled,
                        &format!("{at}.{key}"),
                    );
                }
            }
            Value::Array(items) => {
                let item_schema = fitting
                    .iter()
                    .find_map(|branch| branch.get("items"))
                    .unwrap_or_else(|| panic!("{at}: a list without an item schema"));
                for (index, item) in items.iter().enumerate() {
                    walk(item, item_schema, defs, filled, &format!("{at}[{index}]"));
                }
            }
            Value::String(_) => {
                let choices = string_choices(&fitting);
                if let Some(choices) = choices {
                    assert!(
                        choices.contains(value),
                        "{at}: {value} is not one of {choices:?}"
                    );
                }
            }
            _ => {}
        }
    }

    /// The values a string must be one of, or none when any string will do.
    fn string_choices(branches: &[&Value]) -> Option<Vec<Value>> {
        let mut choices = Vec::new();
        for branch in branches {
            if let Some(constant) = branch.get("const") {
                choices.push(constant.clone());
            } else if let Some(listed) = branch.get("enum").and_then(Value::as_array) {
                choices.extend(listed.iter().cloned());
            } else {
                return None;
            }
        }
        Some(choices)
    }

    /// Every variant of a kernel enum, with an exhaustive match so that a variant added to the
    /// kernel fails to compile here until it is listed (and so checked against its mirror).
    macro_rules! every {
        ($ty:ident: $($variant:ident),+ $(,)?) => {{
            let _exhaustive = |value: $ty| match value {
                $($ty::$variant)|+ => (),
            };
            vec![$($ty::$variant),+]
        }};
    }

    /// The mirror of an enum lists exactly the names its kernel enum serializes to.
    fn check_enum<T: Serialize>(variants: Vec<T>, schema: &Map<String, Value>, name: &str) {
        let defs = schema.get("$defs").and_then(Value::as_object);
        let definition = defs
            .and_then(|defs| defs.get(name))
            .unwrap_or_else(|| panic!("no definition `{name}`"));
        let no_defs = Map::new();
        let spread = branches(definition, defs.unwrap_or(&no_defs));
        let listed: BTreeSet<String> = string_choices(&spread)
            .unwrap_or_else(|| panic!("`{name}` lists no names"))
            .iter()
            .map(|v| v.as_str().expect("names are strings").to_owned())
            .collect();
        let serialized: BTreeSet<String> = variants
            .iter()
            .map(
                |v| match serde_json::to_value(v).expect("enums serialize") {
                    Value::String(name) => name,
                    other => panic!("`{name}` serialized to {other}"),
                },
            )
            .collect();
        assert_eq!(serialized, listed, "`{name}`: kernel variants vs. schema");
    }

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!("an object literal"),
        }
    }

    fn full_error() -> ErrorInfo {
        ErrorInfo {
            ename: Some("ValueError".into()),
            evalue: Some("bad".into()),
            traceback: Some("Traceback …".into()),
            hint: Some("try again".into()),
            ..ErrorInfo::new(Code::ALL[0], "failed")
        }
    }

    fn execution_output(filled: Filled) -> ExecutionOutput {
        let full = matches!(filled, Filled::Full);
        ExecutionOutput {
            ok: true,
            status: ExecutionStatus::Ok,
            execution_count: full.then_some(1),
            stdout: "out".into(),
            stderr: "err".into(),
            stdout_omitted_chars: 1,
            stderr_omitted_chars: 2,
            display_data: if full {
                vec![DisplayItem {
                    data: object(json!({"text/plain": "x"})),
                    metadata: object(json!({"isolated": true})),
                }]
            } else {
                Vec::new()
            },
            display_omitted: 3,
            result: full.then_some(object(json!({"text/plain": "1"}))),
            result_metadata: full.then_some(object(json!({"ipython_mcp.downscaled_images": 1}))),
            withheld: if full {
                vec![Withheld {
                    display: Some(0),
                    mime: "image/png".into(),
                    bytes: 4,
                    path: Some("/spool/x.png".into()),
                }]
            } else {
                Vec::new()
            },
            error: full.then(full_error),
            truncated: Truncated::default(),
            execution_id: "e-1".into(),
            runtime: RuntimeInfo {
                request_id: "r-1".into(),
                admission_seq: 5,
                epoch: 6,
                queue_wait_ms: 7,
                run_ms: 8,
                interruption: full.then_some(Interruption::Cooperative),
                namespace: full.then_some(NamespaceOutcome::Preserved),
            },
            notice: full.then_some("replaced".into()),
            spool: full.then_some(SpoolInfo {
                stdout_bytes: 9,
                stderr_bytes: 10,
                dropped_bytes: 11,
                evicted: true,
            }),
        }
    }

    fn runtime_status(filled: Filled) -> RuntimeStatus {
        let full = matches!(filled, Filled::Full);
        RuntimeStatus {
            kernel_id: "default".into(),
            state: SessionState::Ready,
            epoch: 1,
            queue_depth: 2,
            operation_active: false,
            latest_interruption_kind: full.then_some(Interruption::Terminated),
            latest_namespace_outcome: full.then_some(NamespaceOutcome::Reset),
            startup_seconds: full.then_some(1.5),
            replacement_startup_seconds: full.then_some(0.25),
            kernel: full.then(|| KernelDescription {
                pid: Some(42),
                remote: Some(ipython_mcp_kernel::RemoteDescription {
                    server: "https://hub.example/user/ana/".into(),
                    kernel_id: "6f1c".into(),
                    attached: true,
                }),
                python: "/usr/bin/python3".into(),
                language: "python".into(),
                python_version: "3.12".into(),
                ipykernel_version: "6.29".into(),
                implementation: "cpython".into(),
                spec: "python3".into(),
                helper: true,
                working_dir: "/work".into(),
            }),
            spare_kernel_pids: if full { vec![43] } else { Vec::new() },
            environment: full.then(|| EnvironmentStatus {
                phase: "failed".into(),
                elapsed_seconds: 0.5,
                source: Some("venv".into()),
                tool: Some("uv".into()),
                created: true,
                failed_phase: Some("install".into()),
            }),
            error: full.then(full_error),
        }
    }

    fn page(filled: Filled) -> Page {
        let full = matches!(filled, Filled::Full);
        Page {
            stream: StreamName::Stdout,
            pattern: full.then(|| "loss".into()),
            lines: if full {
                vec![PageLine {
                    line: 1,
                    text: "loss: 0.1".into(),
                }]
            } else {
                Vec::new()
            },
            total_lines: 1,
            total_matches: full.then_some(1),
            next_line: full.then_some(2),
            truncated: false,
            complete: true,
        }
    }

    #[test]
    fn every_mirror_has_the_fields_its_kernel_type_serializes() {
        for filled in [Filled::Full, Filled::Bare] {
            let (schema, value) = served::<ExecutionOutputSchema>(&execution_output(filled));
            check(&value, &schema, filled);
            let (schema, value) = served::<RuntimeStatusSchema>(&runtime_status(filled));
            check(&value, &schema, filled);
            let (schema, value) = served::<PageSchema>(&page(filled));
            check(&value, &schema, filled);
        }
        let bare_error = ErrorInfo {
            hint: None,
            ..ErrorInfo::new(Code::ALL[0], "failed")
        };
        check_definition::<ExecutionOutputSchema>(&bare_error, "ErrorInfo", Filled::Bare);
        let bare_withheld = Withheld {
            display: None,
            mime: "image/png".into(),
            bytes: 1,
            path: None,
        };
        check_definition::<ExecutionOutputSchema>(&bare_withheld, "Withheld", Filled::Bare);
        let bare_environment = EnvironmentStatus {
            phase: "probing".into(),
            elapsed_seconds: 0.0,
            source: None,
            tool: None,
            created: false,
            failed_phase: None,
        };
        check_definition::<RuntimeStatusSchema>(
            &bare_environment,
            "EnvironmentStatus",
            Filled::Bare,
        );
    }

    #[test]
    fn every_mirror_enum_lists_the_names_its_kernel_enum_serializes() {
        let execution = schema_for_output::<ExecutionOutputSchema>();
        check_enum(
            every!(ExecutionStatus: Ok, Error, Timeout, Cancelled, Pending, Rejected),
            &execution,
            "ExecutionStatus",
        );
        check_enum(
            every!(Interruption: Cooperative, Terminated),
            &execution,
            "Interruption",
        );
        check_enum(
            every!(NamespaceOutcome: Preserved, Reset, Unknown),
            &execution,
            "NamespaceOutcome",
        );
        check_enum(
            every!(SessionState: Starting, Ready, Busy, Recovering, Unavailable, Closed),
            &schema_for_output::<RuntimeStatusSchema>(),
            "SessionState",
        );
        check_enum(
            every!(StreamName: Stdout, Stderr),
            &schema_for_output::<PageSchema>(),
            "StreamName",
        );
    }

    /// The definitions keep the kernel types' names, which `tools/list` has always shown.
    #[test]
    fn mirrors_are_named_after_their_kernel_types() {
        let execution = schema_for_output::<ExecutionOutputSchema>();
        let defs: BTreeSet<&str> = execution["$defs"]
            .as_object()
            .expect("nested types are definitions")
            .keys()
            .map(String::as_str)
            .collect();
        for name in [
            "DisplayItem",
            "ErrorInfo",
            "ExecutionStatus",
            "Interruption",
            "NamespaceOutcome",
            "RuntimeInfo",
            "SpoolInfo",
            "Truncated",
            "Withheld",
        ] {
            assert!(defs.contains(name), "no definition `{name}` in {defs:?}");
        }
    }
}
