//! The rmcp server handler: the built-in tools' router, composed once per process, and the
//! requests that are not a single tool's (listing, dispatch, tasks, resources, subscriptions).

use std::sync::Arc;
use std::time::Duration;

use ipython_mcp_config::{Config, StructuredOutput};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::SubscriptionFilter;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{tool_handler, RoleServer, ServerHandler};

use crate::handler::IpythonMcp;
use crate::render;
use crate::schema;
use crate::state::ServerState;
use crate::surface;

/// What every server of one process shares, made once from the configuration: the built-in
/// tools' router and the configuration. Each [`IpythonMcp`] is one of these over a state.
#[derive(Clone)]
pub struct Blueprint {
    config: Arc<Config>,
    tool_router: Arc<ToolRouter<IpythonMcp>>,
}

impl Blueprint {
    pub fn new(config: Arc<Config>) -> Blueprint {
        Blueprint {
            tool_router: Arc::new(IpythonMcp::offered_tools(
                &config.toolsets,
                config.structured_output,
            )),
            config,
        }
    }

    /// A server over `state`, sharing this blueprint's router.
    pub fn server(&self, state: ServerState) -> IpythonMcp {
        self.server_with(state, Arc::clone(&self.config))
    }

    /// A server over `state` whose settings are `config` (a principal's: their quotas and
    /// workspace), sharing this blueprint's router, which no setting it may change affects.
    pub fn server_with(&self, state: ServerState, config: Arc<Config>) -> IpythonMcp {
        IpythonMcp {
            state,
            tool_router: Arc::clone(&self.tool_router),
            config,
        }
    }

    /// A built-in tool as offered (a dynamic tool needs its owner's state).
    pub(crate) fn built_in_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.tool_router.get(name).cloned()
    }
}

impl IpythonMcp {
    /// The server; built once per process, and cloned into each connection (HTTP serves many,
    /// stdio one), which shares `state`.
    pub fn new(state: ServerState, config: Arc<Config>) -> Self {
        Blueprint::new(config).server(state)
    }

    /// Every built-in tool, whatever the configuration offers.
    pub(crate) fn built_in_tools() -> ToolRouter<IpythonMcp> {
        Self::core_router()
            + Self::namespace_router()
            + Self::kernels_router()
            + Self::dynamic_router()
            + Self::notebooks_router()
    }

    /// The built-in tools, less the toolsets the configuration leaves out, with the output
    /// schemas `structured_output` calls for.
    fn offered_tools(
        toolsets: &ipython_mcp_config::Toolsets,
        structured_output: StructuredOutput,
    ) -> ToolRouter<IpythonMcp> {
        let mut router = Self::built_in_tools();
        let names: Vec<String> = router
            .list_all()
            .into_iter()
            .map(|tool| tool.name.into_owned())
            .collect();
        for name in names {
            let spec = surface::of_route(&name);
            if !spec.toolset.is_none_or(|toolset| toolset.offered(toolsets)) {
                router.remove_route(&name);
            }
        }
        for route in router.map.values_mut() {
            route.attr.input_schema = Arc::new(schema::compact(
                &route.attr.input_schema,
                schema::Side::Input,
            ));
            let image_tool = surface::of_route(&route.attr.name).returns_images;
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
                    let wait = Some(crate::catalog::RECONCILE_WAIT);
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
        output: Option<ipython_mcp_output::ExecutionOutput>,
        cancelled: impl Fn(&ipython_mcp_output::ExecutionOutput) -> bool,
    ) -> rmcp::model::TaskPayload {
        use rmcp::model::TaskPayload;
        match output {
            None => TaskPayload::Failed {
                error: crate::tasks::object(rmcp::ErrorData::resource_not_found(
                    "the execution is no longer kept: its kernel was stopped, or has run many executions since",
                    None,
                )),
            },
            Some(output) if output.status == ipython_mcp_output::ExecutionStatus::Pending => {
                TaskPayload::Working
            }
            Some(output) if cancelled(&output) => TaskPayload::Cancelled,
            Some(output) => TaskPayload::Completed {
                result: crate::tasks::object(self.shaped(render::execution(&output), true)),
            },
        }
    }

    /// Answers a `tools/call` before `shaped` gives the result its shape (built-in tools
    /// through the router, the rest through the dynamic catalog). A tool that runs code in the
    /// background answers a tasks client with its task itself.
    async fn answer_call(
        &self,
        mut request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        self.coerce_arguments(&mut request);
        if self.tool_router.has_route(&request.name) {
            let tool = surface::of_route(&request.name);
            let request_id = render::request_id(&context.id);
            let call = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
            return match self.tool_router.call(call).await {
                Err(error) => match crate::argument::rejected(&error) {
                    Some(problem) => {
                        tracing::info!(
                            tool = tool.name,
                            ok = false,
                            "tool call refused: invalid arguments"
                        );
                        Ok(render::invalid_arguments(tool, request_id, problem).into())
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
}

/// A `tasks/*` request naming no task this server remembers (invalid params, as the tasks
/// extension asks).
fn unknown_task(id: &str) -> rmcp::ErrorData {
    rmcp::ErrorData::invalid_params(
        format!("unknown task {:?}", ipython_mcp_text::shorten(id, 64)),
        None,
    )
}

impl IpythonMcp {
    /// What `initialize` (and `server/discover`) answers: the same for every principal.
    pub(crate) fn info() -> ServerConfig {
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
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for IpythonMcp {
    fn get_info(&self) -> ServerConfig {
        IpythonMcp::info()
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
        let modern = is_modern(&context);
        Ok(rmcp::model::ListToolsResult {
            result_type: Some(rmcp::model::ResultType::COMPLETE),
            tools,
            meta: None,
            next_cursor: None,
            // Dynamic tools come and go: clients must not cache the list. It is also this
            // caller's own (their dynamic tools, under principals): no shared cache may keep it.
            ttl_ms: modern.then_some(0),
            cache_scope: modern.then_some(rmcp::model::CacheScope::Private),
        })
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        // A tool that declares no output schema (in `Auto`, those that run code) answers
        // without structuredContent; dynamic tools all declare one.
        let schemaless = self
            .tool_router
            .get(&request.name)
            .is_some_and(|tool| tool.output_schema.is_none());
        Ok(match self.answer_call(request, context).await? {
            rmcp::model::CallToolResponse::Complete(result) => {
                rmcp::model::CallToolResponse::Complete(self.shaped(result, schemaless))
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
        let cancelled = |output: &ipython_mcp_output::ExecutionOutput| {
            output.status == ipython_mcp_output::ExecutionStatus::Cancelled
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
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, rmcp::ErrorData> {
        let mut resources = self.notebook_resources().await;
        resources.extend(crate::apps::resources());
        let mut listed = rmcp::model::ListResourcesResult::with_all_items(resources);
        // The caller's own notebooks (a principal's, under principals): fresh each time, and
        // for no shared cache.
        if is_modern(&context) {
            listed.ttl_ms = Some(0);
            listed.cache_scope = Some(rmcp::model::CacheScope::Private);
        }
        Ok(listed)
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
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, rmcp::ErrorData> {
        let contents = match crate::apps::read(self.kernels(), &request.uri).await {
            Some(read) => read?,
            None => self.read_notebook_resource(&request.uri).await?,
        };
        let mut read = rmcp::model::ReadResourceResult::new(vec![contents]);
        // A notebook, the caller's kernels or an execution's output: theirs alone.
        if is_modern(&context) {
            read.ttl_ms = Some(0);
            read.cache_scope = Some(rmcp::model::CacheScope::Private);
        }
        Ok(read.into())
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

/// Whether the request's protocol has results that say how long and by whom they may be
/// cached (the 2026-07-28 family).
fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| version >= rmcp::model::ProtocolVersion::V_2026_07_28)
}
