//! The core tools, always offered: `execute`, `interrupt`, `kernel_restart` and
//! `runtime_status`.

use std::time::Duration;

use ipython_mcp_kernel::{ExecuteArgs, SessionHandle};
use ipython_mcp_output::{Code, ErrorInfo, ExecutionOutput};
use rmcp::handler::server::tool::schema_for_output;
use rmcp::model::{CallToolResponse, CallToolResult, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, RoleServer};
use serde::Deserialize;

use crate::argument::Parameters;
use crate::error::ToolResult;
use crate::handler::IpythonMcp;
use crate::render;
use crate::results::{InterruptResult, StatusResult};
use crate::surface;
use ipython_mcp_kernel::MAX_CODE_BYTES;

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

/// Arguments of `kernel_restart`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartParams {
    /// Session id (default `default`).
    #[serde(default)]
    pub kernel: Option<String>,
    /// Or the session of this notebook path.
    #[serde(default)]
    pub notebook: Option<String>,
    /// Load the last checkpoint (names as of the last completed cell); default false: empty.
    #[serde(default)]
    pub restore: bool,
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

impl IpythonMcp {
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
            tool = surface::EXECUTE.name,
            kernel = session.kernel_id(),
            status = ?output.status,
            task = true,
            "tool call"
        );
        if output.status != ipython_mcp_output::ExecutionStatus::Pending {
            // Refused at admission (busy, closed, unavailable): nothing to poll.
            return rmcp::model::CallToolResponse::Complete(render::execution(&output));
        }
        let task = self
            .state
            .tasks()
            .insert(output.execution_id.as_str(), cancel);
        rmcp::model::CallToolResponse::Task(rmcp::model::CreateTaskResult::new(task))
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

#[tool_router(router = core_router, vis = "pub(crate)")]
impl IpythonMcp {
    #[tool(
        name = "execute",
        description = "Run Python (IPython syntax) in a persistent kernel; state persists across calls. Returns stdout/stderr (start and end kept, exact omitted counts), displays (images as image content), the last value, the error and its traceback, and whether state was reset. Long jobs: background=true returns an execution_id at once, for get_output.",
        output_schema = schema_for_output::<ExecutionOutput>(),
        annotations(title = "Execute Python", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true)
    )]
    async fn execute(
        &self,
        Parameters(params): Parameters<ExecuteParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        if params.background && Self::tasks_client(&context) {
            return Ok(self.execute_as_task(params, &context));
        }
        let request_id = render::request_id(&context.id);
        let (session, timeout) = match self.execute_session(&params, &request_id) {
            Ok(admissible) => admissible,
            Err(rejected) => return Ok((*rejected).into()),
        };
        let started = std::time::Instant::now();
        // Progress, when the client sent a token: the latest output line, at most once a second.
        let progress = context.meta.get_progress_token().map(|token| {
            let (sender, mut receiver) =
                tokio::sync::mpsc::unbounded_channel::<ipython_mcp_kernel::Progress>();
            let peer = context.peer.clone();
            self.state().background().spawn(async move {
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
            tool = surface::EXECUTE.name,
            kernel = session.kernel_id(),
            status = ?output.status,
            ms = started.elapsed().as_millis() as u64,
            "tool call"
        );
        Ok(render::execution(&output).into())
    }

    #[tool(
        name = "interrupt",
        description = "Stop the running code (hung, slow) and wait: namespace `preserved`, or if it ignored SIGINT (kernel replaced) `restored` from the last checkpoint (`reset` without one). Its call gets operation_cancelled; queued calls stay.",
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
            tool = surface::INTERRUPT.name,
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
        description = "Replace the kernel after calls queued before it: names (unless `restore` loads the last checkpoint), dynamic tools gone, count from 1, `epoch` + 1. Recovers an `unavailable` session; reset keeps the process.",
        output_schema = schema_for_output::<StatusResult>(),
        annotations(title = "Restart the kernel", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn kernel_restart(&self, Parameters(params): Parameters<RestartParams>) -> ToolResult {
        let session = self
            .session_for_notebook(params.kernel.as_deref(), params.notebook.as_deref())
            .await?;
        let restarted = session.restart(params.restore).await;
        tracing::info!(
            tool = surface::KERNEL_RESTART.name,
            kernel = session.kernel_id(),
            ok = restarted.is_ok(),
            "tool call"
        );
        let status = crate::error::status(restarted?);
        let ok = status.state == ipython_mcp_kernel::SessionState::Ready;
        Ok(render::status(&StatusResult { ok, status }))
    }

    #[tool(
        name = "runtime_status",
        description = "A session's state, epoch, queue, last interruption, kernel (pid, Python, cwd), environment setup, namespace checkpoint, and why it is unavailable. Answers at once, even while code runs.",
        output_schema = schema_for_output::<StatusResult>(),
        annotations(title = "Runtime status", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn runtime_status(&self, Parameters(params): Parameters<StatusParams>) -> ToolResult {
        let session = self
            .session_for_notebook(params.kernel.as_deref(), params.notebook.as_deref())
            .await?;
        Ok(render::status(&StatusResult {
            ok: true,
            status: crate::error::status(session.status_refreshed().await),
        }))
    }
}
