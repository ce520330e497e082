//! The dynamic-tool tools: `register_tool` and `unregister_tool`, and the call of a published
//! tool. What is published, and how it is kept current, is the [`Catalog`](crate::catalog::Catalog)'s.

use std::collections::BTreeMap;

use ipython_mcp_kernel::HelperCall;
use ipython_mcp_output::{Code, ErrorInfo};
use rmcp::model::JsonObject;
use serde::{Deserialize, Serialize};

use crate::catalog::{DynamicCallResult, Registration};
use crate::error::{ToolError, ToolResult};
use crate::handler::IpythonMcp;
use crate::surface::{self, REGISTER_TOOL, TOOLS, UNREGISTER_TOOL};

/// Arguments of `register_tool`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterParams {
    /// Top-level function or class.
    pub name: String,
    /// Tool name (default `name`).
    #[serde(default)]
    pub tool_name: Option<String>,
    /// Default: the docstring's first paragraph.
    #[serde(default)]
    pub description: Option<String>,
    /// Session id (default `default`).
    #[serde(default)]
    pub kernel: Option<String>,
}

/// The result of `register_tool`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct RegisterResult {
    pub ok: bool,
    pub registration: Option<Registration>,
    /// `unsupported_signature`, `registration_conflict`, `invalid_name`, `protected_name`,
    /// `name_not_found`, `not_callable`, `limit_exceeded`, …
    pub error: Option<ErrorInfo>,
}

/// Arguments of `unregister_tool`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnregisterParams {
    /// Tool names.
    pub names: Vec<String>,
}

/// The result of `unregister_tool`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct UnregisterResult {
    pub ok: bool,
    /// Removed now (sorted).
    pub unregistered: Vec<String>,
    /// Not dynamic tools (already gone, never registered); nothing to do.
    pub unknown: Vec<String>,
    /// Built-in tools, which cannot be removed.
    pub refused: Vec<String>,
    /// The catalog revision afterwards.
    pub revision: u64,
}

#[derive(Deserialize)]
struct HelperRegistration {
    tool_name: String,
    name: String,
    description: String,
    input_schema: JsonObject,
    fingerprint: String,
}

/// Largest name or description accepted before it reaches the kernel.
const MAX_ARGUMENT_CHARS: usize = 65_536;

/// Refuses a name, tool name or description over [`MAX_ARGUMENT_CHARS`] before any of it
/// reaches the kernel.
fn check_argument_lengths(params: &RegisterParams) -> Result<(), ToolError> {
    let too_long = [
        Some(&params.name),
        params.tool_name.as_ref(),
        params.description.as_ref(),
    ]
    .into_iter()
    .flatten()
    .any(|text| text.chars().count() > MAX_ARGUMENT_CHARS);
    if too_long {
        return Err(ToolError::from(ErrorInfo::new(
            Code::InvalidArguments,
            format!(
                "name, tool_name and description are limited to {MAX_ARGUMENT_CHARS} characters"
            ),
        )));
    }
    Ok(())
}

impl HelperRegistration {
    /// The catalog entry for this answer, on `kernel`; the catalog assigns the revision.
    fn into_registration(self, kernel: String) -> Registration {
        Registration {
            tool_name: self.tool_name,
            name: self.name,
            description: self.description,
            input_schema: self.input_schema,
            fingerprint: self.fingerprint,
            kernel,
            revision: 0,
        }
    }
}

#[rmcp::tool_router(router = dynamic_router, vis = "pub(crate)")]
impl IpythonMcp {
    #[rmcp::tool(
        name = "register_tool",
        description = "Publish a top-level function or class as an MCP tool, its input schema from the annotations (str, int, float, bool, None, list/dict[str, T], unions, Literal; JSON defaults). Calls run the live function; a signature change, reset or restart unpublishes it (stale_registration).",
        output_schema = rmcp::handler::server::tool::schema_for_output::<RegisterResult>(),
        annotations(title = "Register a dynamic tool", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn register_tool(
        &self,
        crate::argument::Parameters(params): crate::argument::Parameters<RegisterParams>,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> ToolResult {
        check_argument_lengths(&params)?;
        let session = self.session(params.kernel.as_deref())?;
        let kernel = session.kernel_id().to_owned();
        let catalog = self.catalog();
        let helper_params = self.register_helper_params(&params, &kernel)?;
        let output = session
            .helper(HelperCall {
                method: "register_tool".to_owned(),
                params: helper_params,
                timeout: None,
                request_id: crate::render::request_id(&context.id),
                cancel: context.ct.clone(),
            })
            .await;
        let registration = output
            .outcome
            .answer()
            .and_then(|result| result.get("registration").cloned())
            .and_then(|value| serde_json::from_value::<HelperRegistration>(value).ok());
        let Some(registration) = registration else {
            tracing::info!(tool = REGISTER_TOOL.name, kernel = %kernel, ok = false, "tool call");
            return Err(ToolError::from(
                output.outcome.error().cloned().unwrap_or_else(|| {
                    ErrorInfo::new(
                        Code::InternalError,
                        "the kernel helper answered register_tool in an unexpected shape",
                    )
                }),
            ));
        };
        let registration = catalog
            .insert(
                registration.into_registration(kernel.clone()),
                &session,
                self.peers(),
            )
            .await;
        tracing::info!(tool = REGISTER_TOOL.name, kernel = %kernel, ok = true, revision = registration.revision, "tool call");
        let result = RegisterResult {
            ok: true,
            registration: Some(registration),
            error: None,
        };
        Ok(crate::render::namespace(
            REGISTER_TOOL.name,
            serde_json::to_value(&result).unwrap_or_default(),
            true,
        ))
    }

    #[rmcp::tool(
        name = "unregister_tool",
        description = "Remove dynamic tools by name (the functions stay). Idempotent: answers `unregistered`, `unknown`, `refused` (built-ins) and the catalog `revision`.",
        output_schema = rmcp::handler::server::tool::schema_for_output::<UnregisterResult>(),
        annotations(title = "Unregister dynamic tools", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn unregister_tool(
        &self,
        crate::argument::Parameters(params): crate::argument::Parameters<UnregisterParams>,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> crate::error::ToolResult {
        if params.names.len() > 1000 || params.names.iter().any(|name| name.chars().count() > 512) {
            return Err(crate::error::ToolError::invalid(
                "at most 1000 names of at most 512 characters",
            ));
        }
        let catalog = self.catalog();
        let mut names: Vec<String> = params.names.clone();
        names.sort();
        names.dedup();
        let mut refused = Vec::new();
        let mut unknown = Vec::new();
        let mut by_kernel: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for name in names {
            if surface::spec(&name).is_some() {
                refused.push(name);
            } else if let Some(kernel) = catalog.kernel_of(&name) {
                by_kernel.entry(kernel).or_default().push(name);
            } else {
                unknown.push(name);
            }
        }
        let mut unregistered = Vec::new();
        for (kernel, names) in by_kernel {
            // The kernel forgets them on its queue; the server's view drops them either way
            // (a kernel that is gone or busy has nothing that could still be listed).
            if let Ok(session) = self.kernels().get(Some(&kernel)) {
                let _ = session
                    .helper(HelperCall {
                        method: "unregister_tool".to_owned(),
                        params: serde_json::json!({"names": names}),
                        timeout: None,
                        request_id: crate::render::request_id(&context.id),
                        cancel: context.ct.clone(),
                    })
                    .await;
            }
            unregistered.extend(catalog.remove(&names, self.peers()).await);
        }
        unregistered.sort();
        let result = UnregisterResult {
            ok: true,
            unregistered,
            unknown,
            refused,
            revision: catalog.revision(),
        };
        tracing::info!(
            tool = UNREGISTER_TOOL.name,
            removed = result.unregistered.len(),
            "tool call"
        );
        Ok(crate::render::namespace(
            UNREGISTER_TOOL.name,
            serde_json::to_value(&result).unwrap_or_default(),
            true,
        ))
    }
}

impl IpythonMcp {
    /// The helper's `register_tool` parameters: the names the new tool must not take (the
    /// stable tools and other kernels' dynamic ones) and the configured limits. Other kernels'
    /// tools count against `max_tools` here; the helper counts the kernel's own against the
    /// room left. Fails with `limit_exceeded` when no room is left.
    fn register_helper_params(
        &self,
        params: &RegisterParams,
        kernel: &str,
    ) -> Result<serde_json::Value, ToolError> {
        let limits = self.config().tools;
        let mut reserved: Vec<String> = TOOLS.iter().map(|tool| tool.name.to_owned()).collect();
        let elsewhere = self.catalog().names_outside(kernel);
        reserved.extend(elsewhere.iter().cloned());
        let room = limits.max_tools.saturating_sub(elsewhere.len());
        if room == 0 {
            return Err(ToolError::from(
                ErrorInfo::new(
                    Code::LimitExceeded,
                    format!(
                        "{} dynamic tools are registered; the limit is {}",
                        elsewhere.len(),
                        limits.max_tools
                    ),
                )
                .with_hint("unregister_tool one you no longer need"),
            ));
        }
        let mut helper_params = serde_json::json!({
            "name": params.name,
            "reserved_names": reserved,
            "max_tool_name_chars": limits.max_name_chars,
            "max_tool_description_chars": limits.max_description_chars,
            "max_dynamic_tools": room,
        });
        if let Some(tool_name) = &params.tool_name {
            helper_params["tool_name"] = tool_name.clone().into();
        }
        if let Some(description) = &params.description {
            helper_params["description"] = description.clone().into();
        }
        Ok(helper_params)
    }
}

impl IpythonMcp {
    /// A call of a dynamic tool: revalidated and run by the helper, on the session's queue.
    pub(crate) async fn call_dynamic(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResult, rmcp::ErrorData> {
        let tool_name = request.name.to_string();
        let catalog = self.catalog();
        let Some(kernel) = catalog.kernel_of(&tool_name) else {
            return Err(rmcp::ErrorData::invalid_params(
                format!(
                    "tool not found: {}",
                    ipython_mcp_text::shorten(&tool_name, 64)
                ),
                None,
            ));
        };
        let session = match self.kernels().get(Some(&kernel)) {
            Ok(session) => session,
            Err(_) => {
                catalog.drop_session(&kernel, self.peers()).await;
                return Err(rmcp::ErrorData::invalid_params(
                    format!("tool not found: {tool_name} (its kernel was stopped)"),
                    None,
                ));
            }
        };
        let epoch = session.status().epoch;
        let started = std::time::Instant::now();
        let output = session
            .helper(HelperCall {
                method: "call_tool".to_owned(),
                params: serde_json::json!({
                    "tool_name": tool_name,
                    "arguments": request.arguments.clone().unwrap_or_default(),
                }),
                timeout: None,
                request_id: crate::render::request_id(&context.id),
                cancel: context.ct.clone(),
            })
            .await;
        let mut result = DynamicCallResult::from_output(&tool_name, output);
        let replaced = session.status().epoch != epoch;
        if let Some(error) = &mut result.error {
            // A replaced kernel has no registrations: say why, and unlist them.
            if replaced {
                *error = ErrorInfo::new(
                    Code::StaleRegistration,
                    format!("the kernel behind {tool_name:?} was replaced, and its dynamic tools with it"),
                )
                .with_hint("define the function again and call register_tool");
            }
            if error.code == Code::StaleRegistration {
                if replaced {
                    catalog.drop_session(&kernel, self.peers()).await;
                } else {
                    catalog
                        .reconcile(&kernel, &session, self.peers(), None)
                        .await;
                }
            }
        }
        tracing::info!(tool = %tool_name, kernel = %kernel, dynamic = true, ok = result.ok, ms = started.elapsed().as_millis() as u64, "tool call");
        let ok = result.ok;
        Ok(crate::render::namespace(
            &tool_name,
            serde_json::to_value(&result).unwrap_or_default(),
            ok,
        ))
    }
}
