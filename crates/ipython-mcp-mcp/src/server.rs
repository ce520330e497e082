//! The rmcp server handler and the tools it serves.

use std::sync::Arc;
use std::time::Duration;

use crate::argument::Parameters;
use ipython_mcp_config::Config;
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
    /// Python source to run, exactly as in a notebook cell (IPython syntax: magics like
    /// `%timeit` and `!ls` work). The value of a final expression is returned in `result`.
    pub code: String,
    /// Kernel session id; omit for the `default` session.
    #[serde(default)]
    pub kernel: Option<String>,
    /// Deadline in seconds, counted from when the code starts running (queue time excluded).
    /// Defaults to the server's operation timeout (30 s unless configured); at most the
    /// server's max timeout. On expiry the kernel is interrupted; if it does not stop within
    /// the grace period it is replaced and the namespace is lost (see `runtime.namespace`).
    /// With `background`, the default is the server's max timeout (1 hour unless configured).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Return at once with `status: pending` and an `execution_id` instead of waiting: for
    /// training loops, downloads and anything longer than a few seconds. The code runs and its
    /// output is collected as usual; poll it with get_output (which can also wait), stop it
    /// with interrupt. Later calls to this kernel queue behind it.
    #[serde(default)]
    pub background: bool,
}

/// Arguments of `runtime_status`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusParams {
    /// Kernel session id; omit for the `default` session.
    #[serde(default)]
    pub kernel: Option<String>,
    /// Or a notebook path (relative to the workspace root): the session that runs that
    /// notebook's cells. Exclusive with `kernel`.
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
            tool_router: Self::offered_tools(&config.toolsets),
            config,
        }
    }

    /// The built-in tools, less the toolsets the configuration leaves out.
    fn offered_tools(toolsets: &ipython_mcp_config::Toolsets) -> ToolRouter<IpythonMcp> {
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
            if let Some(schema) = &route.attr.output_schema {
                route.attr.output_schema = Some(Arc::new(render::admitting_failure(schema)));
            }
        }
        router
    }

    /// The names of every built-in tool, offered or not (never available to dynamic tools).
    pub(crate) fn stable_tool_names(&self) -> Vec<String> {
        static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        NAMES
            .get_or_init(|| {
                Self::offered_tools(&ipython_mcp_config::Toolsets::default())
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
        description = "Run Python code in a persistent IPython kernel and return its output. \
Variables, functions, classes and imports persist between calls, so build state step by step \
instead of re-running everything. Returns stdout/stderr (bounded: the first and last characters are kept \
and `*_omitted_chars` says exactly how much was cut), rich displays (images come back as image \
content), the final expression's value in `result`, and on failure a structured `error` \
(`execution_error` with ename/evalue/traceback when your code raised). `ok` is false when the \
code raised or did not finish; `runtime.namespace` then tells whether your variables survived \
(`preserved`) or the kernel was replaced (`reset`: re-run your setup). Prefer printing summaries \
(df.head(), len(x)) over whole objects. If your client sends a progress token, you get a progress \
notification with the latest output line about once a second while the code runs. Use runtime_status to \
check on the kernel without running code, interrupt to stop it. For anything longer than a few seconds \
(training, downloads, big loops) pass background=true: it returns at once with an execution_id, and get_output \
reads the output so far or waits for the end. Long output is kept in full on disk; get_output pages or greps it.",
        output_schema = schema_for_output::<crate::wire::ExecutionOutputSchema>(),
        annotations(title = "Execute Python", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true)
    )]
    async fn execute(
        &self,
        Parameters(params): Parameters<ExecuteParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let request_id = render::request_id(&context.id);
        let session = match self.kernels().get(params.kernel.as_deref()) {
            Ok(session) => session,
            Err(error) => {
                return Ok(render::rejected_execute(
                    request_id,
                    crate::error::manager_error(&error),
                ))
            }
        };
        let timeout = match self.check_execute(&params) {
            Ok(timeout) => timeout,
            Err(error) => return Ok(render::rejected_execute(request_id, *error)),
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
            let args = ExecuteArgs {
                // The call returns now: neither its cancellation nor its progress token applies.
                cancel: Default::default(),
                progress: None,
                timeout: args.timeout.or(Some(self.config.timeouts.max_operation)),
                ..args
            };
            session.execute_background(args)
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
        description = "Stop the code running in a kernel right now, like Jupyter's interrupt button, and wait until it has stopped. Use it when an execute or call_function is taking too long (from another client, or when your client cannot cancel). The kernel gets SIGINT; code that stops keeps the namespace (`namespace: preserved`); code that ignores it is killed after the grace period and the kernel replaced (`reset`). The interrupted call itself answers `operation_cancelled`. Queued calls are not touched. Does nothing when the kernel is idle (`interrupted: false`).",
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
        description = "Restart a kernel: replace it with a fresh one (a warm spare when ready, so it takes milliseconds) after the calls queued before it. Every variable, import and function is gone afterwards, the execution count starts over, the configured preloads and aliases are back, and `epoch` advances. Use it to start clean or to recover an `unavailable` session; use reset to clear names without a new process, and interrupt to stop running code. Returns the session's status after the restart.",
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
        description = "Report the state of a kernel session without running code or waiting in its \
queue (safe to call while an execute is running): state (starting/ready/busy/recovering/unavailable/closed), \
epoch (advances each time the kernel is replaced), queue depth, the latest interruption and namespace \
outcome, the kernel process (pid, Python, ipykernel, working directory), provisioning progress of the Python environment, \
and the error that made it unavailable. Never returns code, arguments or values. Call it when execute \
answers runtime_unavailable or seems slow, or to learn which Python you are running.",
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

#[tool_handler(router = self.tool_router)]
impl ServerHandler for IpythonMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_resources()
                .enable_tools()
                .enable_tool_list_changed()
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
        tools.extend(self.state.catalog().listed());
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
                answered => answered,
            };
        }
        Ok(rmcp::model::CallToolResponse::Complete(
            self.call_dynamic(request, context).await?,
        ))
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.tool_router
            .get(name)
            .cloned()
            .or_else(|| self.state.catalog().get_tool(name))
    }

    async fn list_resources(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, rmcp::ErrorData> {
        Ok(rmcp::model::ListResourcesResult::with_all_items(
            self.notebook_resources().await,
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, rmcp::ErrorData> {
        Ok(rmcp::model::ListResourceTemplatesResult::with_all_items(
            self.notebook_resource_templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, rmcp::ErrorData> {
        let contents = self.read_notebook_resource(&request.uri).await?;
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
