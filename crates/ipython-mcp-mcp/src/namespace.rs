//! The namespace tools: list, search, inspect, call_function, reload, remove, reset.
//!
//! Each is one helper RPC through the session queue (so it is serialized with executions and
//! bounded by the same deadline and recovery rules). The helper's JSON is checked against the
//! typed results below, which also generate the advertised output schemas, so what an agent
//! gets always matches what `tools/list` promised.

use crate::argument::Parameters;
use ipython_mcp_kernel::{HelperCall, HelperOutput, Outcome};
use ipython_mcp_output::{Code, ErrorInfo};
use rmcp::handler::server::tool::schema_for_output;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, RoleServer};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::{ToolError, ToolResult};
use crate::handler::IpythonMcp;
use crate::render;
use crate::surface::{self, ToolSpec};

/// Largest list of names or modules one call accepts.
const MAX_NAMES: usize = 1000;
/// Largest name or query accepted, in characters.
const MAX_NAME_CHARS: usize = 512;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelParams {
    /// Session id (default `default`).
    #[serde(default)]
    pub kernel: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// Text to find in names.
    pub query: String,
    /// Whole-name matches only.
    #[serde(default)]
    pub exact: bool,
    /// Most results (default: the server's max).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Session id (default `default`).
    #[serde(default)]
    pub kernel: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NameParams {
    /// Name or dotted attribute path.
    pub name: String,
    /// Session id (default `default`).
    #[serde(default)]
    pub kernel: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallParams {
    /// Callable name or dotted path.
    pub name: String,
    /// Keyword arguments (default: none, a call with no arguments).
    #[serde(default)]
    pub arguments: Option<serde_json::Map<String, Value>>,
    /// Session id (default `default`).
    #[serde(default)]
    pub kernel: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModulesParams {
    /// Imported module names.
    pub modules: Vec<String>,
    /// Session id (default `default`).
    #[serde(default)]
    pub kernel: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NamesParams {
    /// Top-level names.
    pub names: Vec<String>,
    /// Session id (default `default`).
    #[serde(default)]
    pub kernel: Option<String>,
}

/// Per-field truncation flags of a listed function.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FunctionTruncated {
    pub signature: bool,
    pub module: bool,
    pub doc: bool,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FunctionInfo {
    pub name: String,
    /// `function`, `class` or `callable`.
    pub kind: String,
    pub signature: String,
    pub module: Option<String>,
    /// First paragraph of the docstring, bounded.
    pub doc: String,
    pub truncated: FunctionTruncated,
}

/// Result of `list`.
#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ListResult {
    #[serde(default)]
    pub ok: bool,
    /// Visible callables, sorted by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub functions: Option<Vec<FunctionInfo>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// True when more callables exist than were returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SearchTruncated {
    pub qualified_type: bool,
    pub module: bool,
    pub representation: bool,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SearchHit {
    pub name: String,
    /// `function`, `class`, `module` or `variable`.
    pub kind: String,
    /// Module-qualified (`builtins.int`).
    pub qualified_type: String,
    pub module: Option<String>,
    /// Bounded `repr()`.
    pub representation: String,
    pub truncated: SearchTruncated,
}

/// Result of `search`.
#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SearchResult {
    #[serde(default)]
    pub ok: bool,
    /// Exact-name matches first, then by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<Vec<SearchHit>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InspectTruncated {
    pub qualified_type: bool,
    pub signature: bool,
    pub module: bool,
    pub documentation: bool,
    pub representation: bool,
}

/// Result of `inspect`.
#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InspectResult {
    #[serde(default)]
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// On a path that broke (`a.b.c` where `b` raised or is missing): the part that resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Module-qualified (`builtins.int`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qualified_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callable: Option<bool>,
    /// Null when the object has no signature (not callable, or one `inspect` cannot read).
    #[serde(default)]
    pub signature: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub representation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<InspectTruncated>,
    /// Null when nothing failed.
    #[serde(default)]
    pub error: Option<ErrorInfo>,
}

/// Result of `call_function`.
#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CallResult {
    #[serde(default)]
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The return value as JSON (bounded in depth, items and characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// True when the result was cut to fit the bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReloadItem {
    pub module: String,
    pub ok: bool,
    /// Namespace names that now point at the reloaded module or its reloaded attributes.
    #[serde(default)]
    pub rebound: Vec<String>,
    #[serde(default)]
    pub error: Option<Value>,
}

/// Result of `reload`.
#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReloadResult {
    /// True when every module reloaded.
    #[serde(default)]
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<Vec<ReloadItem>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

/// Result of `remove`.
#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RemoveResult {
    #[serde(default)]
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<Vec<String>>,
    /// Protected names (leading `_`, IPython's bindings, configured modules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

/// Result of `reset`.
#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResetResult {
    #[serde(default)]
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<Vec<String>>,
    /// Unchanged by reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_count: Option<u64>,
    /// Dynamic tools of this kernel that reset unregistered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_dropped: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

fn check_length(what: &str, text: &str) -> Result<(), ToolError> {
    if text.chars().count() > MAX_NAME_CHARS {
        return Err(ToolError::invalid(format!(
            "{what} is longer than {MAX_NAME_CHARS} characters"
        )));
    }
    Ok(())
}

fn check_names(what: &str, items: &[String]) -> Result<(), ToolError> {
    if items.len() > MAX_NAMES {
        return Err(ToolError::invalid(format!(
            "at most {MAX_NAMES} {what} per call, got {}",
            items.len()
        )));
    }
    items.iter().try_for_each(|item| check_length(what, item))
}

impl IpythonMcp {
    /// One helper call: checks the kernel argument, queues the call, types the reply.
    async fn namespace_call<T: Serialize + DeserializeOwned + Default>(
        &self,
        tool: &'static ToolSpec,
        kernel: Option<&str>,
        params: Value,
        context: &RequestContext<RoleServer>,
        extra: impl FnOnce(&mut Value),
    ) -> CallToolResult {
        let session = match self.session(kernel) {
            Ok(session) => session,
            Err(error) => return error.into_result(),
        };
        let call = HelperCall {
            // The helper's methods are named as the tools that call them.
            method: tool.name.to_owned(),
            params,
            timeout: None,
            request_id: render::request_id(&context.id),
            cancel: context.ct.clone(),
        };
        let started = std::time::Instant::now();
        let output = session.helper(call).await;
        tracing::info!(
            tool = tool.name,
            kernel = session.kernel_id(),
            outcome = output.outcome.kind(),
            ms = started.elapsed().as_millis() as u64,
            "tool call"
        );
        typed::<T>(tool, output, extra)
    }
}

/// A namespace tool's result schema plus the `runtime` every namespace result carries.
fn with_runtime(
    schema: std::sync::Arc<rmcp::model::JsonObject>,
) -> std::sync::Arc<rmcp::model::JsonObject> {
    let mut schema = (*schema).clone();
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.insert(
            "runtime".into(),
            json!({"type": "object", "description": "How the call ran, as in execute: epoch, interruption, namespace (preserved/restored/reset/unknown), queue_wait_ms, run_ms."}),
        );
    }
    std::sync::Arc::new(schema)
}

/// Checks the helper's reply against the advertised result type and renders it. A failed
/// call keeps what the helper worked out before failing (its partial result) beside the
/// error; `ok` (and so `isError`) is what the result says after `extra` had its say.
fn typed<T: Serialize + DeserializeOwned + Default>(
    tool: &ToolSpec,
    output: HelperOutput,
    extra: impl FnOnce(&mut Value),
) -> CallToolResult {
    let mut result = match output.outcome {
        Outcome::Answered(result) if result.is_object() => result,
        other => {
            let (partial, error) = match other {
                Outcome::Raised { error, partial } => (partial, error),
                Outcome::Failed(error) => (None, error),
                // Not an object: the helper broke its contract, a bug on one side, never
                // "user code raised".
                Outcome::Answered(_) => (
                    None,
                    ErrorInfo::new(
                        Code::InternalError,
                        format!(
                            "the kernel helper answered {} without a result object",
                            tool.name
                        ),
                    ),
                ),
            };
            let mut result = partial
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}));
            result["error"] = json!(error);
            result
        }
    };
    let failed = result.get("error").is_some_and(|error| !error.is_null());
    result["ok"] = Value::Bool(!failed);
    extra(&mut result);
    let mut value = match serde_json::from_value::<T>(result) {
        Ok(typed) => serde_json::to_value(typed).unwrap_or(Value::Null),
        Err(error) => {
            tracing::error!(tool = tool.name, %error, "helper reply does not match the result schema");
            let error = ErrorInfo::new(
                Code::InternalError,
                format!(
                    "the kernel helper answered {} in an unexpected shape",
                    tool.name
                ),
            );
            json!({"ok": false, "error": error})
        }
    };
    let ok = value.get("ok") == Some(&Value::Bool(true));
    // Whether the kernel's state survived the call, exactly as execute reports it.
    if let (Some(object), Ok(runtime)) =
        (value.as_object_mut(), serde_json::to_value(&output.runtime))
    {
        object.insert("runtime".into(), runtime);
    }
    render::namespace(tool.name, value, ok)
}

#[tool_router(router = namespace_router, vis = "pub(crate)")]
impl IpythonMcp {
    #[tool(
        name = "list",
        description = "Callables at the top level of the namespace, sorted: signature, module, first docstring paragraph. Read-only; search also finds variables, inspect goes deep.",
        output_schema = with_runtime(schema_for_output::<ListResult>()),
        annotations(title = "List callables", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list(
        &self,
        Parameters(params): Parameters<KernelParams>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        Ok(self
            .namespace_call::<ListResult>(
                surface::LIST,
                params.kernel.as_deref(),
                json!({}),
                &context,
                |_| {},
            )
            .await)
    }

    #[tool(
        name = "search",
        description = "Find top-level names (variables, callables, modules) containing `query`, case-insensitive: kind, type, module, bounded repr. Read-only; beats dir(); in depth: inspect.",
        output_schema = with_runtime(schema_for_output::<SearchResult>()),
        annotations(title = "Search the namespace", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn search(
        &self,
        Parameters(params): Parameters<SearchParams>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        check_length("query", &params.query)?;
        let body = json!({"query": params.query, "exact": params.exact, "limit": params.limit});
        Ok(self
            .namespace_call::<SearchResult>(
                surface::SEARCH,
                params.kernel.as_deref(),
                body,
                &context,
                |_| {},
            )
            .await)
    }

    #[tool(
        name = "inspect",
        description = "One object by name or dotted path (`df.columns`), never evaluated: kind, qualified type, callable, signature, module, docs, bounded repr. Read-only; use it to learn a signature.",
        output_schema = with_runtime(schema_for_output::<InspectResult>()),
        annotations(title = "Inspect an object", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn inspect(
        &self,
        Parameters(params): Parameters<NameParams>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        check_length("name", &params.name)?;
        Ok(self
            .namespace_call::<InspectResult>(
                surface::INSPECT,
                params.kernel.as_deref(),
                json!({"name": params.name}),
                &context,
                |_| {},
            )
            .await)
    }

    #[tool(
        name = "call_function",
        description = "Call a live callable once with JSON keyword `arguments`, simpler than execute for a value: returns it as bounded JSON, or result_not_json. invalid_arguments means nothing ran.",
        output_schema = with_runtime(schema_for_output::<CallResult>()),
        annotations(title = "Call a function", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true)
    )]
    async fn call_function(
        &self,
        Parameters(params): Parameters<CallParams>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        check_length("name", &params.name)?;
        let name = params.name.clone();
        let body = json!({"name": params.name, "arguments": params.arguments.unwrap_or_default()});
        Ok(self
            .namespace_call::<CallResult>(
                surface::CALL_FUNCTION,
                params.kernel.as_deref(),
                body,
                &context,
                move |result| {
                    if let Some(object) = result.as_object_mut() {
                        object.entry("name").or_insert(Value::String(name));
                    }
                },
            )
            .await)
    }

    #[tool(
        name = "reload",
        description = "Reload imported modules after editing their files, and rebind names taken from them (`from m import f`). Per module: rebound names, or an error (a syntax error keeps the old module).",
        output_schema = with_runtime(schema_for_output::<ReloadResult>()),
        annotations(title = "Reload modules", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = true)
    )]
    async fn reload(
        &self,
        Parameters(params): Parameters<ModulesParams>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        check_names("modules", &params.modules)?;
        Ok(self
            .namespace_call::<ReloadResult>(
                surface::RELOAD,
                params.kernel.as_deref(),
                json!({"modules": params.modules}),
                &context,
                |result| {
                    let all_ok =
                        result
                            .get("results")
                            .and_then(Value::as_array)
                            .is_some_and(|items| {
                                items.iter().all(|item| {
                                    item.get("ok").and_then(Value::as_bool) == Some(true)
                                })
                            });
                    if let Some(object) = result.as_object_mut() {
                        object.insert("ok".into(), Value::Bool(all_ok));
                    }
                },
            )
            .await)
    }

    #[tool(
        name = "remove",
        description = "Delete top-level names (reset deletes all of yours). Answers removed, refused (`_`-prefixed, In/Out/get_ipython/exit/quit/open, configured modules), unknown.",
        output_schema = with_runtime(schema_for_output::<RemoveResult>()),
        annotations(title = "Remove names", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn remove(
        &self,
        Parameters(params): Parameters<NamesParams>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        check_names("names", &params.names)?;
        Ok(self
            .namespace_call::<RemoveResult>(
                surface::REMOVE,
                params.kernel.as_deref(),
                json!({"names": params.names}),
                &context,
                |_| {},
            )
            .await)
    }

    #[tool(
        name = "reset",
        description = "Delete every name you created, in place, unlike kernel_restart: protected names stay, configured modules re-imported, this kernel's dynamic tools dropped, execution count kept.",
        output_schema = with_runtime(schema_for_output::<ResetResult>()),
        annotations(title = "Reset the namespace", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn reset(
        &self,
        Parameters(params): Parameters<KernelParams>,
        context: RequestContext<RoleServer>,
    ) -> ToolResult {
        let result = self
            .namespace_call::<ResetResult>(
                surface::RESET,
                params.kernel.as_deref(),
                json!({}),
                &context,
                |_| {},
            )
            .await;
        if result.is_error != Some(true) {
            // The helper dropped this kernel's catalog; so does the server's view of it.
            let kernel = params
                .kernel
                .as_deref()
                .unwrap_or(ipython_mcp_kernel::SessionId::DEFAULT);
            self.catalog().drop_session(kernel, self.peers()).await;
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use ipython_mcp_output::RuntimeInfo;

    use super::*;

    fn code_of(answer: Value) -> Value {
        let output = HelperOutput {
            outcome: Outcome::Answered(answer),
            runtime: RuntimeInfo::unadmitted("r"),
        };
        let result = typed::<ListResult>(surface::LIST, output, |_| {});
        assert_eq!(result.is_error, Some(true));
        result.structured_content.expect("structured")["error"]["code"].clone()
    }

    #[test]
    fn a_helper_reply_of_the_wrong_shape_is_an_internal_error_not_user_code_raising() {
        assert_eq!(code_of(json!([1, 2])), "internal_error");
        assert_eq!(
            code_of(json!({"functions": "not a list"})),
            "internal_error"
        );
    }
}
