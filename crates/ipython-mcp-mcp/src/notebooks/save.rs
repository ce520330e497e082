//! A notebook run's result for the agent: run in the notebook's session (see
//! `ipython_mcp_notebooks::Run`), in the background as an MCP task when asked, saved, and
//! rendered as `execute`'s result plus where the outputs went.

use std::time::Duration;

use ipython_mcp_kernel::SessionHandle;
use ipython_mcp_notebooks::{NotebookSession, Run};
use ipython_mcp_output::{ExecutionOutput, ExecutionStatus};
use rmcp::model::{CallToolResponse, CallToolResult, CreateTaskResult};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::{Map, Value};

use super::views::NotebookExecuteResult;
use super::ToolError;
use crate::handler::IpythonMcp;
use crate::render;
use crate::surface::ToolSpec;

impl IpythonMcp {
    /// The session a tool names by `kernel` id or by `notebook` path (at most one of them;
    /// neither: `default`).
    pub(crate) async fn session_for_notebook(
        &self,
        kernel: Option<&str>,
        notebook: Option<&str>,
    ) -> Result<SessionHandle, ToolError> {
        let Some(notebook) = notebook else {
            return self.session(kernel);
        };
        if kernel.is_some() {
            return Err(ToolError::invalid(
                "give either kernel or notebook, not both",
            ));
        }
        Ok(self.notebooks().session(notebook).await?)
    }

    /// Runs a notebook's code in its session and saves the outcome, expecting the file's
    /// revision from before the run, so a change made meanwhile is a conflict (reported in
    /// `save_error`, the outputs still returned). In the `background` the call answers
    /// `pending` once the execution is admitted; the save happens when it ends, and the final
    /// result is kept for `tasks/get` (see tasks.rs), and a tasks client is answered with the
    /// task.
    pub(super) async fn run_and_save(
        &self,
        tool: &'static ToolSpec,
        mut run: Run,
        background: bool,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ToolError> {
        let NotebookSession {
            id: kernel,
            handle: session,
            started,
        } = self.notebooks().session_for(&run).await?;
        let done = Done {
            tool,
            kernel: kernel.into(),
            started,
            began: std::time::Instant::now(),
        };
        if !background {
            let output = self
                .notebooks()
                .execute(
                    &mut run,
                    &session,
                    render::request_id(&context.id),
                    context.ct.clone(),
                )
                .await?;
            return Ok(self.finish(run, &session, output, done).await.into());
        }
        // Nobody waits: the call's cancellation does not apply, tasks/cancel does.
        let cancel = tokio_util::sync::CancellationToken::new();
        let pending = self.start_background(
            &session,
            run.code().to_owned(),
            run.timeout(),
            render::request_id(&context.id),
            cancel.clone(),
        );
        if pending.status != ExecutionStatus::Pending {
            // Refused at admission: answered now, nothing to save.
            return Ok(self.finish(run, &session, pending, done).await.into());
        }
        let id = pending.execution_id.as_str().to_owned();
        let result = NotebookExecuteResult {
            output: pending.clone(),
            path: run.path().relative.clone(),
            kernel: done.kernel.clone(),
            session_started: started,
            saved: false,
            revision: None,
            cell: None,
            save_error: None,
        };
        let (slot, task) = self.state().tasks().insert_notebook(&id, cancel);
        let server = self.clone();
        let background_session = session.clone();
        self.state().background().spawn_to_finish(async move {
            let Some(output) = finished(&background_session, &id).await else {
                return;
            };
            let result = server.finish(run, &background_session, output, done).await;
            slot.set(result);
        });
        if Self::tasks_client(context) {
            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
        }
        Ok(render_result(
            &pending,
            &result,
            "\n[running; saved in the notebook when it ends]",
        )
        .into())
    }

    /// Saves a finished execution as `run` says and renders the tool's result: the output as
    /// the agent sees it, ending with a line that says where it was saved, or why not.
    async fn finish(
        &self,
        run: Run,
        session: &SessionHandle,
        output: ExecutionOutput,
        done: Done,
    ) -> CallToolResult {
        let path = run.path().relative.clone();
        let saved = self.notebooks().save(run, session, &output).await;
        let result = NotebookExecuteResult::of_run(output, path, done.kernel, done.started, saved);
        let output = &result.output;
        tracing::info!(
            tool = done.tool.name,
            kernel = %result.kernel,
            status = ?output.status,
            saved = result.saved,
            ms = done.began.elapsed().as_millis() as u64,
            "tool call"
        );
        let text = match (&result.save_error, &result.cell) {
            (Some(error), _) => format!("\n[not saved: {} — {}]", error.code, error.message),
            (None, Some(cell)) => format!(
                "\n[saved in cell {} (id {}); revision {}]",
                cell.index,
                cell.id.as_deref().unwrap_or("-"),
                result.revision.as_deref().unwrap_or("-")
            ),
            (None, None) => String::new(),
        };
        render_result(output, &result, &text)
    }
}

/// Who ran a notebook run, in which session, since when: for its result and log line.
struct Done {
    tool: &'static ToolSpec,
    kernel: String,
    started: bool,
    began: std::time::Instant,
}

/// The final output of execution `id`, once it has ended; `None` if the session forgot it.
async fn finished(session: &SessionHandle, id: &str) -> Option<ExecutionOutput> {
    loop {
        let output = session.output(Some(id), Duration::from_secs(3600)).await?;
        if output.status != ExecutionStatus::Pending {
            return Some(output);
        }
    }
}

/// A notebook run's result: the execution's fields and the notebook's.
fn render_result(
    output: &ExecutionOutput,
    result: &NotebookExecuteResult,
    text: &str,
) -> CallToolResult {
    let mut extra = Map::new();
    let full = serde_json::to_value(result).unwrap_or_default();
    for key in [
        "path",
        "kernel",
        "session_started",
        "saved",
        "revision",
        "cell",
        "save_error",
    ] {
        extra.insert(key.into(), full.get(key).cloned().unwrap_or(Value::Null));
    }
    extra.insert("ok".into(), output.ok.into());
    render::execution_with(output, extra, text.to_owned())
}
