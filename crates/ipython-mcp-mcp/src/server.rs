//! The rmcp server handler and the tools it serves.

use std::sync::Arc;
use std::time::Duration;

use crate::argument::Parameters;
use ipython_mcp_config::{Config, StructuredOutput};
use ipython_mcp_kernel::{Code, ErrorInfo, ExecuteArgs, RuntimeStatus, SessionHandle};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::schema_for_output;
use rmcp::model::SubscriptionFilter;
use rmcp::model::{
    CallToolResult, Implementation, ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{schemars, tool, tool_handler, tool_router, RoleServer, ServerHandler};
use serde::{Deserialize, Serialize};

use crate::error::{ToolError, ToolResult};
use crate::peers::Peers;
use crate::render;
use crate::schema;
use crate::state::ServerState;

/// The toolset a built-in tool belongs to (`None`: a core tool, always offered).
fn toolset_of(tool: &str) -> Option<&'static str> {
    match tool {
        "list" | "search" | "inspect" | "call_function" | "reload" | "remove" | "reset" => {
            Some("namespace")
        }
        "kernel_discover" | "kernel_start" | "kernel_list" | "kernel_stop" => Some("kernels"),
        "register_tool" | "unregister_tool" => Some("dynamic"),
        name if name.starts_with("notebook_") => Some("notebooks"),
        _ => None,
    }
}

/// Largest `code` accepted by `execute`, in bytes.
pub const MAX_CODE_BYTES: usize = 1024 * 1024;

/// Arguments of `execute`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteParams {
    /// Python source, as in a notebook cell.
    pub code: String,
    /// Session id (default `default`).
    #[serde(default)]
    pub kernel: Option<String>,
    /// Run deadline (s), then interrupt (default 30; background: the max).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Return at once with an execution_id; the code keeps running.
    #[serde(default)]
    pub background: bool,
}

/// Arguments of `runtime_status`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusParams {
    /// Session id (default `default`).
    #[serde(default)]
    pub kernel: Option<String>,
    /// Or the session of this notebook path.
    #[serde(default)]
    pub notebook: Option<String>,
}

/// The result of `runtime_status`: the session's status fields at the top level, plus `ok`.
/// (An invalid request, such as an unknown kernel, answers `{"ok": false, "error": …}` with
/// `isError` set instead.)
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct StatusResult {
    /// True: the status below describes the requested session.
    pub ok: bool,
    #[serde(flatten)]
    #[schemars(with = "crate::wire::RuntimeStatusSchema")]
    pub status: RuntimeStatus,
}

/// The result of `interrupt`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct InterruptResult {
    pub ok: bool,
    /// True when an operation was running and has now ended because of this interrupt.
    pub interrupted: bool,
    /// What happened to the running code: `cooperative` (it stopped) or `terminated` (the
    /// kernel was killed and replaced); null when nothing was running.
    #[schemars(with = "Option<crate::wire::InterruptionSchema>")]
    pub interruption: Option<ipython_mcp_kernel::Interruption>,
    /// `preserved`, `reset` or `unknown`; null when nothing was running.
    #[schemars(with = "Option<crate::wire::NamespaceOutcomeSchema>")]
    pub namespace: Option<ipython_mcp_kernel::NamespaceOutcome>,
    /// The session's state and epoch after the interrupt.
    #[schemars(with = "crate::wire::SessionStateSchema")]
    pub state: ipython_mcp_kernel::SessionState,
    pub epoch: u64,
    /// Calls still waiting in the queue (an interrupt does not remove them).
    pub queue_depth: usize,
}

/// The ipython-mcp server: one instance per MCP connection, sharing the server's state.
#[derive(Clone)]
pub struct IpythonMcp {
    state: ServerState,
    config: Arc<Config>,
    tool_router: ToolRouter<IpythonMcp>,
}

impl IpythonMcp {
    /// A handler for one connection; `state` is shared by every connection.
    pub fn new(state: ServerState, config: Arc<Config>) -> Self {
        IpythonMcp {
            state,
            tool_router: Self::offered_tools(&config.toolsets, config.structured_output),
            config,
        }
    }

    /// The built-in tools, less the toolsets the configuration leaves out, with the output
    /// schemas `structured_output` calls for.
    fn offered_tools(
        toolsets: &ipython_mcp_config::Toolsets,
        structured_output: StructuredOutput,
    ) -> ToolRouter<IpythonMcp> {
        let mut router = Self::tool_router()
            + Self::namespace_router()
            + Self::kernels_router()
            + Self::dynamic_router()
            + Self::notebooks_router();
        let names: Vec<String> = router
            .list_all()
            .into_iter()
            .map(|tool| tool.name.into_owned())
            .collect();
        for name in names {
            let offered = match toolset_of(&name) {
                Some("namespace") => toolsets.namespace,
                Some("kernels") => toolsets.kernels,
                Some("dynamic") => toolsets.dynamic,
                Some("notebooks") => toolsets.notebooks,
                _ => true,
            };
            if !offered {
                router.remove_route(&name);
            }
        }
        for route in router.map.values_mut() {
            route.attr.input_schema = Arc::new(schema::compact(
                &route.attr.input_schema,
                schema::Side::Input,
            ));
            let image_tool = render::IMAGE_TOOLS.contains(&route.attr.name.as_ref());
            route.attr.output_schema = match (&route.attr.output_schema, structured_output) {
                (Some(_), StructuredOutput::Auto) if image_tool => None,
                (Some(output), _) => {
                    let mut output = render::admitting_failure(output);
                    if structured_output == StructuredOutput::Auto {
                        render::compact_schema(&mut output);
                    }
                    Some(Arc::new(schema::compact(&output, schema::Side::Output)))
                }
                (None, _) => None,
            };
        }
        crate::apps::link_tools(&mut router);
        router
    }

    /// The names of every built-in tool, offered or not (never available to dynamic tools).
    pub(crate) fn stable_tool_names(&self) -> Vec<String> {
        static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        NAMES
            .get_or_init(|| {
                Self::offered_tools(
                    &ipython_mcp_config::Toolsets::default(),
                    StructuredOutput::default(),
                )
                .list_all()
                .into_iter()
                .map(|tool| tool.name.into_owned())
                .collect()
            })
            .clone()
    }

    /// Brings every session's dynamic tools up to date (on each session's queue), waiting at
    /// most `RECONCILE_WAIT` from the start of each session's pending reconciliation; what does
    /// not answer in time keeps its last snapshot and finishes in the background.
    async fn reconcile_dynamic(&self) {
        let catalog = self.state.catalog().clone();
        let kernels = catalog.kernels();
        if kernels.is_empty() {
            return;
        }
        let mut tasks = tokio::task::JoinSet::new();
        for kernel in kernels {
            let catalog = catalog.clone();
            let peers = self.state.peers().clone();
            match self.kernels().get(Some(&kernel)) {
                Ok(session) => {
                    let wait = Some(crate::dynamic::RECONCILE_WAIT);
                    tasks.spawn(
                        async move { catalog.reconcile(&kernel, &session, &peers, wait).await },
                    );
                }
                // Stopped (or reaped): its tools are gone.
                Err(_) => {
                    catalog.drop_session(&kernel, &peers).await;
                }
            }
        }
        // Each wait is bounded by the reconciliation it joined, which goes on without us.
        while tasks.join_next().await.is_some() {}
    }

    pub(crate) fn kernels(&self) -> &ipython_mcp_kernel::KernelManager {
        self.state.kernels()
    }

    pub(crate) fn catalog(&self) -> &crate::dynamic::Catalog {
        self.state.catalog()
    }

    pub(crate) fn state(&self) -> &ServerState {
        &self.state
    }

    pub(crate) fn notebook_state(&self) -> &crate::notebooks::NotebookState {
        self.state.notebooks()
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// Every connected client, for `notifications/tools/list_changed`.
    pub fn peers(&self) -> &Peers {
        self.state.peers()
    }

    /// The session a tool call names, or the result that refuses the call.
    /// The session `kernel` names (`default` when omitted).
    pub(crate) fn session(&self, kernel: Option<&str>) -> Result<SessionHandle, ToolError> {
        Ok(self.kernels().get(kernel)?)
    }

    /// Arguments sent as JSON strings where the tool's schema declares another type become
    /// that type (see `schema::coerce`); the log names the fields, never their values.
    fn coerce_arguments(&self, request: &mut rmcp::model::CallToolRequestParams) {
        let Some(arguments) = request.arguments.as_mut() else {
            return;
        };
        let changed = match self.tool_router.get(&request.name) {
            Some(tool) => schema::coerce(arguments, &tool.input_schema),
            None => match self.state.catalog().get_tool(&request.name) {
                Some(tool) => schema::coerce(arguments, &tool.input_schema),
                None => return,
            },
        };
        if !changed.is_empty() {
            tracing::debug!(tool = %request.name, fields = ?changed, "arguments sent as strings coerced");
        }
    }

    /// An execute task's state, read from its execution's record (`None`: forgotten).
    fn execution_payload(
        &self,
        output: Option<ipython_mcp_kernel::ExecutionOutput>,
        cancelled: impl Fn(&ipython_mcp_kernel::ExecutionOutput) -> bool,
    ) -> rmcp::model::TaskPayload {
        use rmcp::model::TaskPayload;
        match output {
            None => TaskPayload::Failed {
                error: crate::tasks::object(rmcp::ErrorData::resource_not_found(
                    "the execution is no longer kept: its kernel was stopped, or has run many executions since",
                    None,
                )),
            },
            Some(output) if output.status == ipython_mcp_kernel::ExecutionStatus::Pending => {
                TaskPayload::Working
            }
            Some(output) if cancelled(&output) => TaskPayload::Cancelled,
            Some(output) => TaskPayload::Completed {
                result: crate::tasks::object(self.shaped(render::execution(&output), true)),
            },
        }
    }

    /// A background notebook run's `pending` answer as the task the run registered (a result
    /// that is not one stays as it is).
    fn as_task(&self, result: CallToolResult) -> rmcp::model::CallToolResponse {
        let structured = result.structured_content.as_ref();
        let pending = structured.is_some_and(|value| value["status"] == "pending");
        let id = structured.and_then(|value| value["execution_id"].as_str());
        match id
            .filter(|_| pending)
            .and_then(|id| self.state.tasks().seed(id))
        {
            Some(task) => {
                rmcp::model::CallToolResponse::Task(rmcp::model::CreateTaskResult::new(task))
            }
            None => rmcp::model::CallToolResponse::Complete(result),
        }
    }

    /// The session an `execute` runs in and its deadline, or the result that refuses it.
    fn execute_session(
        &self,
        params: &ExecuteParams,
        request_id: &str,
    ) -> Result<(SessionHandle, Option<Duration>), Box<CallToolResult>> {
        let rejected = |error| Box::new(render::rejected_execute(request_id.to_owned(), error));
        let session = self
            .kernels()
            .get(params.kernel.as_deref())
            .map_err(|error| rejected(crate::error::manager_error(&error)))?;
        let timeout = self
            .check_execute(params)
            .map_err(|error| rejected(*error))?;
        Ok((session, timeout))
    }

    /// Starts `code` with nobody waiting (a background execute or notebook run): its deadline
    /// defaults to the server's max timeout, and only `cancel` stops it early.
    pub(crate) fn start_background(
        &self,
        session: &SessionHandle,
        code: String,
        timeout: Option<Duration>,
        request_id: String,
        cancel: tokio_util::sync::CancellationToken,
    ) -> ipython_mcp_kernel::ExecutionOutput {
        session.execute_background(ExecuteArgs {
            code,
            timeout: timeout.or(Some(self.config.timeouts.max_operation)),
            request_id,
            cancel,
            progress: None,
        })
    }

    /// A background `execute` for a client that declared the tasks extension: the execution
    /// is started as `execute` would start it and answered as a task named by its
    /// `execution_id`, cancelled through `tasks/cancel` (see tasks.rs).
    fn execute_as_task(
        &self,
        params: ExecuteParams,
        context: &RequestContext<RoleServer>,
    ) -> rmcp::model::CallToolResponse {
        let request_id = render::request_id(&context.id);
        let (session, timeout) = match self.execute_session(&params, &request_id) {
            Ok(admissible) => admissible,
            Err(rejected) => return rmcp::model::CallToolResponse::Complete(*rejected),
        };
        let cancel = tokio_util::sync::CancellationToken::new();
        let output =
            self.start_background(&session, params.code, timeout, request_id, cancel.clone());
        tracing::info!(
            tool = "execute",
            kernel = session.kernel_id(),
            status = ?output.status,
            task = true,
            "tool call"
        );
        if output.status != ipython_mcp_kernel::ExecutionStatus::Pending {
            // Refused at admission (busy, closed, unavailable): nothing to poll.
            return rmcp::model::CallToolResponse::Complete(render::execution(&output));
        }
        let task = self
            .state
            .tasks()
            .insert(output.execution_id.as_str(), cancel);
        rmcp::model::CallToolResponse::Task(rmcp::model::CreateTaskResult::new(task))
    }

    /// Answers a `tools/call` before `shaped` gives the result its shape (built-in tools
    /// through the router, `execute` with `background` as a task for a tasks client, the rest
    /// through the dynamic catalog).
    async fn answer_call(
        &self,
        mut request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        self.coerce_arguments(&mut request);
        let tasks_client = context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks());
        if request.name == "execute" && self.tool_router.has_route("execute") && tasks_client {
            let arguments =
                serde_json::Value::Object(request.arguments.clone().unwrap_or_default());
            // Arguments that do not parse take the usual path to their invalid_arguments result.
            if let Ok(params) = crate::argument::parse::<ExecuteParams>(arguments) {
                if params.background {
                    return Ok(self.execute_as_task(params, &context));
                }
            }
        }
        if self.tool_router.has_route(&request.name) {
            let tool = request.name.to_string();
            let request_id = render::request_id(&context.id);
            let call = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
            return match self.tool_router.call(call).await {
                Err(error) => match crate::argument::rejected(&error) {
                    Some(problem) => {
                        tracing::info!(tool, ok = false, "tool call refused: invalid arguments");
                        Ok(render::invalid_arguments(&tool, request_id, problem).into())
                    }
                    None => Err(error),
                },
                Ok(rmcp::model::CallToolResponse::Complete(result))
                    if tasks_client && tool.starts_with("notebook_execute") =>
                {
                    Ok(self.as_task(result))
                }
                answered => answered,
            };
        }
        Ok(rmcp::model::CallToolResponse::Complete(
            self.call_dynamic(request, context).await?,
        ))
    }

    /// A dynamic tool with the output schema the configuration's shape calls for (built-in
    /// tools get theirs once, in `offered_tools`).
    fn shaped_tool(&self, mut tool: rmcp::model::Tool) -> rmcp::model::Tool {
        // Every dynamic tool declares the same output schema: it is compacted once, not at
        // every listing of every tool.
        type Schema = Arc<rmcp::model::JsonObject>;
        static COMPACTED: std::sync::OnceLock<(Schema, Schema)> = std::sync::OnceLock::new();
        let compact = |schema: &rmcp::model::JsonObject| {
            let mut compacted = schema.clone();
            render::compact_schema(&mut compacted);
            Arc::new(compacted)
        };
        if self.config.structured_output == StructuredOutput::Auto {
            if let Some(schema) = tool.output_schema.as_mut() {
                let (original, compacted) =
                    COMPACTED.get_or_init(|| (Arc::clone(schema), compact(schema)));
                *schema = if original == schema {
                    Arc::clone(compacted)
                } else {
                    compact(schema)
                };
            }
        }
        tool
    }

    /// A result in the shape the configuration asks for (see `render::shaped`).
    pub(crate) fn shaped(&self, result: CallToolResult, image_tool: bool) -> CallToolResult {
        render::shaped(result, image_tool, self.config.structured_output)
    }

    fn check_execute(&self, params: &ExecuteParams) -> Result<Option<Duration>, Box<ErrorInfo>> {
        if params.code.len() > MAX_CODE_BYTES {
            return Err(Box::new(
                ErrorInfo::new(
                    Code::InvalidArguments,
                    format!(
                        "code is {} bytes; the limit is {MAX_CODE_BYTES} bytes",
                        params.code.len()
                    ),
                )
                .with_hint(
                    "write large data to a file and read it from Python instead of inlining it",
                ),
            ));
        }
        let max = self.config.timeouts.max_operation;
        match params.timeout_seconds {
            None => Ok(None),
            Some(seconds)
                if seconds.is_finite() && seconds > 0.0 && seconds <= max.as_secs_f64() =>
            {
                Ok(Some(Duration::from_secs_f64(seconds)))
            }
            Some(seconds) => Err(Box::new(ErrorInfo::new(
                Code::InvalidArguments,
                format!(
                    "timeout_seconds must be a positive number of seconds up to {}, got {seconds}",
                    max.as_secs_f64()
                ),
            ))),
        }
    }
}

#[tool_router]
impl IpythonMcp {
    #[tool(
        name = "execute",
        description = "Run Python (IPython syntax) in a persistent kernel; state persists across calls. Returns stdout/stderr (start and end kept, exact omitted counts), displays (images as image content), the last value, the error and its traceback, and whether state was reset. Long jobs: background=true returns an execution_id at once, for get_output.",
        output_schema = schema_for_output::<crate::wire::ExecutionOutputSchema>(),
        annotations(title = "Execute Python", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true)
    )]
    async fn execute(
        &self,
        Parameters(params): Parameters<ExecuteParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let request_id = render::request_id(&context.id);
        let (session, timeout) = match self.execute_session(&params, &request_id) {
            Ok(admissible) => admissible,
            Err(rejected) => return Ok(*rejected),
        };
        let started = std::time::Instant::now();
        // Progress, when the client sent a token: the latest output line, at most once a second.
        let progress = context.meta.get_progress_token().map(|token| {
            let (sender, mut receiver) =
                tokio::sync::mpsc::unbounded_channel::<ipython_mcp_kernel::Progress>();
            let peer = context.peer.clone();
            tokio::spawn(async move {
                while let Some(update) = receiver.recv().await {
                    let notification =
                        ProgressNotificationParam::new(token.clone(), update.elapsed_seconds)
                            .with_message(update.message);
                    if peer.notify_progress(notification).await.is_err() {
                        break;
                    }
                }
            });
            sender
        });
        // rmcp cancels this token on notifications/cancelled and when the transport closes.
        let args = ExecuteArgs {
            code: params.code,
            timeout,
            request_id,
            cancel: context.ct.clone(),
            progress,
        };
        let output = if params.background {
            // The call returns now: neither its cancellation nor its progress token applies.
            self.start_background(
                &session,
                args.code,
                args.timeout,
                args.request_id,
                Default::default(),
            )
        } else {
            session.execute(args).await
        };
        tracing::info!(
            tool = "execute",
            kernel = session.kernel_id(),
            status = ?output.status,
            ms = started.elapsed().as_millis() as u64,
            "tool call"
        );
        Ok(render::execution(&output))
    }

    #[tool(
        name = "interrupt",
        description = "Stop the running code (hung, slow) and wait: namespace `preserved`, or `reset` if it ignored SIGINT (kernel replaced). Its call gets operation_cancelled; queued calls stay.",
        output_schema = schema_for_output::<InterruptResult>(),
        annotations(title = "Interrupt the kernel", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn interrupt(&self, Parameters(params): Parameters<StatusParams>) -> ToolResult {
        let session = self
            .session_for_notebook(params.kernel.as_deref(), params.notebook.as_deref())
            .await?;
        let ipython_mcp_kernel::Interrupted {
            interrupted,
            status,
        } = session.interrupt().await;
        tracing::info!(
            tool = "interrupt",
            kernel = session.kernel_id(),
            interrupted,
            "tool call"
        );
        let result = InterruptResult {
            ok: true,
            interrupted,
            interruption: if interrupted {
                status.latest_interruption_kind
            } else {
                None
            },
            namespace: if interrupted {
                status.latest_namespace_outcome
            } else {
                None
            },
            state: status.state,
            epoch: status.epoch,
            queue_depth: status.queue_depth,
        };
        Ok(render::interrupt(&result))
    }

    #[tool(
        name = "kernel_restart",
        description = "Replace the kernel after calls queued before it: names, dynamic tools gone, count from 1, `epoch` + 1. Recovers an `unavailable` session; reset keeps the process.",
        output_schema = schema_for_output::<StatusResult>(),
        annotations(title = "Restart the kernel", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn kernel_restart(&self, Parameters(params): Parameters<StatusParams>) -> ToolResult {
        let session = self
            .session_for_notebook(params.kernel.as_deref(), params.notebook.as_deref())
            .await?;
        let restarted = session.restart().await;
        tracing::info!(
            tool = "kernel_restart",
            kernel = session.kernel_id(),
            ok = restarted.is_ok(),
            "tool call"
        );
        let status = restarted?;
        let ok = status.state == ipython_mcp_kernel::SessionState::Ready;
        Ok(render::status(&StatusResult { ok, status }))
    }

    #[tool(
        name = "runtime_status",
        description = "A session's state, epoch, queue, last interruption, kernel (pid, Python, cwd), environment setup, and why it is unavailable. Answers at once, even while code runs.",
        output_schema = schema_for_output::<StatusResult>(),
        annotations(title = "Runtime status", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn runtime_status(&self, Parameters(params): Parameters<StatusParams>) -> ToolResult {
        let session = self
            .session_for_notebook(params.kernel.as_deref(), params.notebook.as_deref())
            .await?;
        Ok(render::status(&StatusResult {
            ok: true,
            status: session.status(),
        }))
    }
}

/// A `tasks/*` request naming no task this server remembers (invalid params, as the tasks
/// extension asks).
fn unknown_task(id: &str) -> rmcp::ErrorData {
    rmcp::ErrorData::invalid_params(format!("unknown task {:?}", render::shorten(id, 64)), None)
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for IpythonMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_resources()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_tasks()
                .build(),
        )
            .with_server_info(Implementation::new("ipython-mcp", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Live, persistent Python in a real IPython kernel. Use `execute` to run code; state \
persists across calls. Output is bounded; results say exactly what was omitted. Use `runtime_status` \
to check the kernel without running code. This is not a sandbox: code runs with the user's permissions.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        self.reconcile_dynamic().await;
        let mut tools = self.tool_router.list_all();
        tools.extend(
            self.state
                .catalog()
                .listed()
                .into_iter()
                .map(|tool| self.shaped_tool(tool)),
        );
        let modern = context
            .protocol_version()
            .is_some_and(|version| version >= rmcp::model::ProtocolVersion::V_2026_07_28);
        Ok(rmcp::model::ListToolsResult {
            result_type: Some(rmcp::model::ResultType::COMPLETE),
            tools,
            meta: None,
            next_cursor: None,
            // Dynamic tools come and go: clients must not cache the list.
            ttl_ms: modern.then_some(0),
            cache_scope: modern.then_some(rmcp::model::CacheScope::Public),
        })
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let image_tool = render::IMAGE_TOOLS.contains(&request.name.as_ref());
        Ok(match self.answer_call(request, context).await? {
            rmcp::model::CallToolResponse::Complete(result) => {
                rmcp::model::CallToolResponse::Complete(self.shaped(result, image_tool))
            }
            task => task,
        })
    }
    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, rmcp::ErrorData> {
        use rmcp::model::TaskPayload;
        let id = request.task_id;
        let remembered = self
            .state
            .tasks()
            .get(&id)
            .ok_or_else(|| unknown_task(&id))?;
        let output = match self.kernels().find_execution(&id) {
            Some(session) => session.output(Some(&id), Duration::ZERO).await,
            None => None,
        };
        let cancelled = |output: &ipython_mcp_kernel::ExecutionOutput| {
            output.status == ipython_mcp_kernel::ExecutionStatus::Cancelled
                && remembered.cancel.is_cancelled()
        };
        // A notebook run has ended once its save has: until then it is working.
        let notebook = remembered.outcome.as_ref().map(crate::tasks::Outcome::get);
        let payload = match (output, notebook) {
            (Some(output), Some(Some(_))) if cancelled(&output) => TaskPayload::Cancelled,
            (_, Some(Some(result))) => TaskPayload::Completed {
                result: crate::tasks::object(self.shaped(result, true)),
            },
            (Some(_), Some(None)) => TaskPayload::Working,
            (output, _) => self.execution_payload(output, cancelled),
        };
        Ok(rmcp::model::GetTaskResult::new(crate::tasks::detailed(
            &id,
            remembered.created_at,
            payload,
        )))
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        let remembered = self
            .state
            .tasks()
            .get(&request.task_id)
            .ok_or_else(|| unknown_task(&request.task_id))?;
        // As a client's notifications/cancelled would: withdrawn while queued, interrupted
        // while running, nothing once finished.
        remembered.cancel.cancel();
        tracing::info!(task = true, "task cancel requested");
        Ok(())
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.tool_router.get(name).cloned().or_else(|| {
            self.state
                .catalog()
                .get_tool(name)
                .map(|tool| self.shaped_tool(tool))
        })
    }

    async fn list_resources(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, rmcp::ErrorData> {
        let mut resources = self.notebook_resources().await;
        resources.extend(crate::apps::resources());
        Ok(rmcp::model::ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, rmcp::ErrorData> {
        let mut templates = self.notebook_resource_templates();
        templates.extend(crate::apps::resource_templates());
        Ok(rmcp::model::ListResourceTemplatesResult::with_all_items(
            templates,
        ))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, rmcp::ErrorData> {
        let contents = match crate::apps::read(self, &request.uri).await {
            Some(read) => read?,
            None => self.read_notebook_resource(&request.uri).await?,
        };
        Ok(rmcp::model::ReadResourceResult::new(vec![contents]).into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.state.peers().add_legacy(context.peer);
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // rmcp intersects this with what was requested and what get_info advertises.
        Some(requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), rmcp::ErrorData> {
        let sink = context.sink().clone();
        self.state.peers().add_sink(sink.clone());
        context.cancelled().await;
        self.state.peers().remove_sink(&sink);
        Ok(())
    }
}
