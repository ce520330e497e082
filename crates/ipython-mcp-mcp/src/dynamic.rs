//! Dynamic tools: live Python callables published as MCP tools.
//!
//! The registry of record lives in each kernel (the helper's catalog: schemas, fingerprints,
//! liveness against the current binding). The server keeps a snapshot per session so
//! `tools/list` can merge dynamic tools with the stable ones, and reconciles it on the session's
//! queue before answering (bounded: a busy kernel gets [`RECONCILE_WAIT`], then the last
//! snapshot is served and the reconciliation finishes in the background). At most one
//! reconciliation per session is pending, in the session's reserved slot: later lists join it,
//! so no number of lists takes a queue slot from the user. Every change of the
//! listed set bumps a server-wide `revision` and sends `notifications/tools/list_changed` to every
//! client. A kernel replacement (epoch change), `reset` and `kernel_stop` drop that session's
//! tools.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use ipython_mcp_kernel::{
    Code, ErrorInfo, HelperCall, HelperOutput, Outcome, RuntimeInfo, SessionHandle,
};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::peers::Peers;

/// How long `tools/list` waits for a busy kernel to reconcile its tools, counted from the
/// start of the reconciliation it joins.
pub const RECONCILE_WAIT: Duration = Duration::from_secs(2);

/// One published tool, as the server last saw it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Registration {
    /// The MCP tool name.
    pub tool_name: String,
    /// The kernel's top-level callable behind it.
    pub name: String,
    pub description: String,
    /// The JSON Schema of its arguments, generated from the signature.
    pub input_schema: JsonObject,
    /// SHA-256 (hex) of `input_schema` as sorted-key compact JSON.
    pub fingerprint: String,
    /// The kernel session it lives in.
    pub kernel: String,
    /// The catalog revision after this registration.
    pub revision: u64,
}

#[derive(Debug, Clone)]
struct Entry {
    registration: Registration,
    epoch: u64,
    live: bool,
}

/// The server's view of every session's dynamic tools.
#[derive(Clone, Default)]
pub struct Catalog {
    inner: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    revision: u64,
    tools: BTreeMap<String, Entry>,
    /// Sessions whose epoch is watched (their tools go when their kernel is replaced).
    watched: std::collections::HashSet<String>,
    /// The clients to notify, for changes that happen outside a tool call (the idle reaper).
    peers: Option<Peers>,
    /// The reconciliation pending per session: when it started, and its answer once it has one.
    reconciling: HashMap<String, Pending>,
}

#[derive(Clone)]
struct Pending {
    started: Instant,
    answered: watch::Receiver<Option<bool>>,
}

/// What the helper's `tool_catalog` answers per tool.
#[derive(Debug, Deserialize)]
struct CatalogTool {
    tool_name: String,
    live: bool,
}

#[derive(Debug, Deserialize)]
struct CatalogReply {
    tools: Vec<CatalogTool>,
}

impl Catalog {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// Dynamic tool names held by sessions other than `kernel`.
    pub fn names_outside(&self, kernel: &str) -> Vec<String> {
        self.lock()
            .tools
            .values()
            .filter(|entry| entry.registration.kernel != kernel)
            .map(|entry| entry.registration.tool_name.clone())
            .collect()
    }

    /// The session a tool lives in.
    pub fn kernel_of(&self, tool_name: &str) -> Option<String> {
        self.lock()
            .tools
            .get(tool_name)
            .map(|entry| entry.registration.kernel.clone())
    }

    pub fn kernels(&self) -> Vec<String> {
        let mut kernels: Vec<String> = self
            .lock()
            .tools
            .values()
            .map(|entry| entry.registration.kernel.clone())
            .collect();
        kernels.sort();
        kernels.dedup();
        kernels
    }

    /// The live tools, as MCP tools.
    pub fn listed(&self) -> Vec<Tool> {
        self.lock()
            .tools
            .values()
            .filter(|entry| entry.live)
            .map(|entry| to_tool(&entry.registration))
            .collect()
    }

    pub fn get_tool(&self, name: &str) -> Option<Tool> {
        self.lock()
            .tools
            .get(name)
            .filter(|entry| entry.live)
            .map(|entry| to_tool(&entry.registration))
    }

    /// Records a registration; returns it with the new revision.
    pub async fn insert(
        &self,
        mut registration: Registration,
        session: &SessionHandle,
        peers: &Peers,
    ) -> Registration {
        let epoch = session.status().epoch;
        let watch = {
            let mut state = self.lock();
            state.peers.get_or_insert_with(|| peers.clone());
            state.revision += 1;
            registration.revision = state.revision;
            state.tools.insert(
                registration.tool_name.clone(),
                Entry {
                    registration: registration.clone(),
                    epoch,
                    live: true,
                },
            );
            state.watched.insert(registration.kernel.clone())
        };
        if watch {
            self.watch_epoch(
                session.clone(),
                registration.kernel.clone(),
                epoch,
                peers.clone(),
            );
        }
        peers.notify_tool_list_changed().await;
        registration
    }

    /// Drops tools by name; returns the ones that were there.
    pub async fn remove(&self, names: &[String], peers: &Peers) -> Vec<String> {
        let removed: Vec<String> = {
            let mut state = self.lock();
            let removed: Vec<String> = names
                .iter()
                .filter(|name| state.tools.remove(name.as_str()).is_some())
                .cloned()
                .collect();
            if !removed.is_empty() {
                state.revision += 1;
            }
            removed
        };
        if !removed.is_empty() {
            peers.notify_tool_list_changed().await;
        }
        removed
    }

    /// Drops every tool of a session (reset, replacement, stop); notifies when any were listed.
    pub async fn drop_session(&self, kernel: &str, peers: &Peers) -> usize {
        let dropped = {
            let mut state = self.lock();
            let before = state.tools.len();
            state
                .tools
                .retain(|_, entry| entry.registration.kernel != kernel);
            let dropped = before - state.tools.len();
            if dropped > 0 {
                state.revision += 1;
            }
            dropped
        };
        if dropped > 0 {
            tracing::info!(kernel, dropped, "dynamic tools dropped");
            peers.notify_tool_list_changed().await;
        }
        dropped
    }

    /// Drops a session's tools when the session itself goes (stopped, or reaped when idle),
    /// notifying the clients the catalog knows.
    pub async fn forget_session(&self, kernel: &str) {
        let peers = self.lock().peers.clone();
        if let Some(peers) = peers {
            self.drop_session(kernel, &peers).await;
        }
    }

    /// Drops a session's tools as soon as its kernel is replaced.
    fn watch_epoch(&self, session: SessionHandle, kernel: String, epoch: u64, peers: Peers) {
        let catalog = self.clone();
        let mut epochs = session.subscribe_epoch();
        drop(session);
        tokio::spawn(async move {
            let changed = epochs.wait_for(|current| *current != epoch).await.is_ok();
            catalog.lock().watched.remove(&kernel);
            if changed {
                catalog.drop_session(&kernel, &peers).await;
            }
        });
    }

    /// Brings a session's snapshot up to date: joins the reconciliation pending for it, or
    /// starts one, and waits for its answer until `wait` after it started (`None`: until it
    /// answers). The work runs detached, so a caller that stops waiting leaves it to finish and
    /// the next caller joins it. Returns false when the kernel did not answer in time.
    pub async fn reconcile(
        &self,
        kernel: &str,
        session: &SessionHandle,
        peers: &Peers,
        wait: Option<Duration>,
    ) -> bool {
        let Pending {
            started,
            mut answered,
        } = {
            let mut state = self.lock();
            match state.reconciling.get(kernel) {
                // A closed channel is one whose task died: start afresh.
                Some(pending) if pending.answered.has_changed().is_ok() => pending.clone(),
                _ => {
                    let (sender, receiver) = watch::channel(None);
                    let pending = Pending {
                        started: Instant::now(),
                        answered: receiver,
                    };
                    state.reconciling.insert(kernel.to_owned(), pending.clone());
                    let (catalog, kernel, session, peers) = (
                        self.clone(),
                        kernel.to_owned(),
                        session.clone(),
                        peers.clone(),
                    );
                    tokio::spawn(async move {
                        let answered = catalog.reconcile_now(&kernel, &session, &peers).await;
                        catalog.lock().reconciling.remove(&kernel);
                        sender.send_replace(Some(answered));
                    });
                    pending
                }
            }
        };
        let answer = answered.wait_for(Option::is_some);
        let answer = match wait.and_then(|wait| started.checked_add(wait)) {
            Some(deadline) => match tokio::time::timeout_at(deadline, answer).await {
                Ok(answer) => answer.map(|answer| *answer),
                Err(_) => return false,
            },
            None => answer.await.map(|answer| *answer),
        };
        answer.ok().flatten().unwrap_or(false)
    }

    /// Asks a session's helper which of its tools are live, on its queue (in the reserved
    /// slot, never a user's); updates the snapshot and notifies when the listed set changed.
    /// Returns false when it did not answer.
    async fn reconcile_now(&self, kernel: &str, session: &SessionHandle, peers: &Peers) -> bool {
        let epoch = session.status().epoch;
        let stale_epoch = self
            .lock()
            .tools
            .values()
            .any(|entry| entry.registration.kernel == kernel && entry.epoch != epoch);
        if stale_epoch {
            self.drop_session(kernel, peers).await;
            return true;
        }
        let output = session
            .helper_reserved(HelperCall {
                method: "tool_catalog".to_owned(),
                params: serde_json::json!({}),
                timeout: None,
                request_id: "tools/list".to_owned(),
                cancel: Default::default(),
            })
            .await;
        if output.runtime.epoch != epoch {
            self.drop_session(kernel, peers).await;
            return true;
        }
        let Some(reply) = output
            .outcome
            .answer()
            .and_then(|result| serde_json::from_value::<CatalogReply>(result.clone()).ok())
        else {
            if output
                .outcome
                .error()
                .is_some_and(|error| error.code == Code::UnsupportedKernel)
            {
                self.drop_session(kernel, peers).await;
            }
            return false;
        };
        let changed = {
            let mut state = self.lock();
            let live: BTreeMap<&str, bool> = reply
                .tools
                .iter()
                .map(|tool| (tool.tool_name.as_str(), tool.live))
                .collect();
            let mut changed = false;
            state.tools.retain(|name, entry| {
                if entry.registration.kernel != kernel {
                    return true;
                }
                match live.get(name.as_str()) {
                    Some(now) => {
                        changed |= entry.live != *now;
                        entry.live = *now;
                        true
                    }
                    None => {
                        changed |= entry.live;
                        false
                    }
                }
            });
            if changed {
                state.revision += 1;
            }
            changed
        };
        if changed {
            peers.notify_tool_list_changed().await;
        }
        true
    }
}

/// The structured result of a dynamic tool call (its advertised output schema).
#[derive(Debug, Serialize, JsonSchema)]
pub struct DynamicCallResult {
    pub ok: bool,
    pub tool_name: String,
    /// What the function returned, as JSON (bounded like call_function's results).
    pub result: Option<Value>,
    /// True when the result was cut to fit the bounds.
    pub truncated: bool,
    /// `stale_registration`, `invalid_arguments`, `result_not_json`, `execution_error`, …
    #[schemars(with = "Option<crate::wire::ErrorInfoSchema>")]
    pub error: Option<ErrorInfo>,
    /// How the call ran, as in execute (epoch, interruption, namespace, queue_wait_ms, run_ms);
    /// absent when it never reached a kernel.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::wire::RuntimeInfoSchema>")]
    pub runtime: Option<RuntimeInfo>,
}

impl DynamicCallResult {
    pub fn from_output(tool_name: &str, output: HelperOutput) -> Self {
        let ok = output.outcome.answer().is_some();
        let error = output.outcome.error().cloned();
        let result = match output.outcome {
            Outcome::Answered(result) => result,
            Outcome::Raised { partial, .. } => partial.unwrap_or(Value::Null),
            Outcome::Failed(_) => Value::Null,
        };
        DynamicCallResult {
            ok,
            tool_name: tool_name.to_owned(),
            truncated: result
                .get("truncated")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            result: ok.then(|| result.get("result").cloned().unwrap_or(Value::Null)),
            error,
            runtime: Some(output.runtime),
        }
    }
}

fn to_tool(registration: &Registration) -> Tool {
    let output_schema = rmcp::handler::server::tool::schema_for_output::<DynamicCallResult>();
    Tool::new(
        registration.tool_name.clone(),
        registration.description.clone(),
        Arc::new(registration.input_schema.clone()),
    )
    .with_raw_output_schema(output_schema)
    .with_annotations(
        ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(true),
    )
}

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
    #[schemars(with = "Option<crate::wire::ErrorInfoSchema>")]
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

#[rmcp::tool_router(router = dynamic_router, vis = "pub(crate)")]
impl crate::server::IpythonMcp {
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
    ) -> Result<rmcp::model::CallToolResult, rmcp::ErrorData> {
        let refuse = |error: ErrorInfo| {
            let result = RegisterResult {
                ok: false,
                registration: None,
                error: Some(error),
            };
            crate::render::namespace(
                "register_tool",
                serde_json::to_value(&result).unwrap_or_default(),
                false,
            )
        };
        let too_long = [
            Some(&params.name),
            params.tool_name.as_ref(),
            params.description.as_ref(),
        ]
        .into_iter()
        .flatten()
        .any(|text| text.chars().count() > MAX_ARGUMENT_CHARS);
        if too_long {
            return Ok(refuse(ErrorInfo::new(
                Code::InvalidArguments,
                format!("name, tool_name and description are limited to {MAX_ARGUMENT_CHARS} characters"),
            )));
        }
        let session = match self.session(params.kernel.as_deref()) {
            Ok(session) => session,
            Err(error) => return Ok(error.into_result()),
        };
        let kernel = session.kernel_id().to_owned();
        let catalog = self.catalog();
        let limits = self.config().tools;
        let mut reserved: Vec<String> = self.stable_tool_names();
        let elsewhere = catalog.names_outside(&kernel);
        reserved.extend(elsewhere.iter().cloned());
        let room = limits.max_tools.saturating_sub(elsewhere.len());
        if room == 0 {
            return Ok(refuse(
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
            tracing::info!(tool = "register_tool", kernel = %kernel, ok = false, "tool call");
            return Ok(refuse(output.outcome.error().cloned().unwrap_or_else(
                || {
                    ErrorInfo::new(
                        Code::ExecutionError,
                        "the kernel helper answered in an unexpected shape",
                    )
                },
            )));
        };
        let registration = catalog
            .insert(
                Registration {
                    tool_name: registration.tool_name,
                    name: registration.name,
                    description: registration.description,
                    input_schema: registration.input_schema,
                    fingerprint: registration.fingerprint,
                    kernel: kernel.clone(),
                    revision: 0,
                },
                &session,
                self.peers(),
            )
            .await;
        tracing::info!(tool = "register_tool", kernel = %kernel, ok = true, revision = registration.revision, "tool call");
        let result = RegisterResult {
            ok: true,
            registration: Some(registration),
            error: None,
        };
        Ok(crate::render::namespace(
            "register_tool",
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
        let stable = self.stable_tool_names();
        let mut names: Vec<String> = params.names.clone();
        names.sort();
        names.dedup();
        let mut refused = Vec::new();
        let mut unknown = Vec::new();
        let mut by_kernel: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for name in names {
            if stable.contains(&name) {
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
            tool = "unregister_tool",
            removed = result.unregistered.len(),
            "tool call"
        );
        Ok(crate::render::namespace(
            "unregister_tool",
            serde_json::to_value(&result).unwrap_or_default(),
            true,
        ))
    }
}

impl crate::server::IpythonMcp {
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
                format!("tool not found: {}", crate::render::shorten(&tool_name, 64)),
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
