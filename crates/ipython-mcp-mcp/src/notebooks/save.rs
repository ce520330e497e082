//! Running code for a notebook: the notebook's kernel session (bound or started) and saving an
//! execution's outputs into the file.

use std::time::Duration;

use ipython_mcp_kernel::{ExecuteArgs, SessionHandle};
use ipython_mcp_notebook::{CellRef, CellType, NewCell, Notebook, NotebookPath, Output};
use ipython_mcp_output::{
    Code, ErrorInfo, ExecutionOutput, ExecutionStatus, PageRequest, StreamName,
};

use ipython_mcp_notebooks::Store;
use rmcp::model::{CallToolResponse, CallToolResult, CreateTaskResult};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::{Map, Value};

use super::views::{summary, NotebookExecuteResult};
use super::ToolError;
use crate::handler::IpythonMcp;
use crate::render;
use ipython_mcp_jupyter::kernelspec;
use ipython_mcp_kernel::{ManagerError, RemoteKernel, SessionId, StartSpec};

/// Characters of each stream an execution saves in the notebook (read back from the spool);
/// the agent still gets only `max_text_chars`.
const MAX_SAVED_STREAM_CHARS: usize = 1 << 20;

/// Bytes of outputs one cell saves in the notebook (everything the kernel produced, up to
/// this); what does not fit is named in a note. The agent still gets the bounded view.
const MAX_SAVED_CELL_BYTES: u64 = 64 << 20;

/// Writes an execution's saved outputs (and its execution count) into the notebook; returns
/// the cell's index.
pub(super) type SaveCell = Box<
    dyn FnOnce(&mut Notebook, Option<u64>, &[Output]) -> Result<usize, ipython_mcp_notebook::Error>
        + Send,
>;

/// Code to run for a notebook, and where its outputs go.
pub(crate) struct Run {
    pub(super) tool: &'static str,
    pub(super) store: Store,
    pub(super) path: NotebookPath,
    /// The file's revision when it was read for this run: the save expects it.
    pub(super) revision: String,
    /// The notebook's `metadata.kernelspec` name, for a session it has yet to start.
    pub(super) kernel_name: Option<String>,
    pub(super) code: String,
    pub(super) timeout: Option<Duration>,
    /// How the outputs are saved; `None` runs without touching the file.
    pub(super) save: Option<SaveCell>,
    /// Where the saved outputs go: an existing cell, or a new one.
    pub(super) target: Target,
    /// Answer once the execution is admitted, and save when it ends.
    pub(super) background: bool,
    /// Ran in a live document (`run_live`): saved without a revision check.
    pub(super) live: bool,
}

/// The cell a run's outputs are saved in.
pub(crate) enum Target {
    /// An existing cell, by id when it has one.
    Cell(Option<String>),
    /// A new code cell holding the run's code, at this index (`None`: at the end).
    New(Option<usize>),
}

/// What an execution saves in the notebook, as Jupyter would: streams, displays, the result
/// and the error. Streams longer than what the agent got have been filled in from the spool
/// (`with_full_streams`); what is still missing is named in a last line.
fn saved_outputs(output: &ExecutionOutput) -> Vec<Output> {
    let mut outputs = Vec::new();
    for (name, text, omitted) in [
        ("stdout", output.stdout_view(), output.stdout_omitted_chars),
        ("stderr", output.stderr_view(), output.stderr_omitted_chars),
    ] {
        if text.is_empty() && omitted == 0 {
            continue;
        }
        let mut text = text.into_owned();
        if omitted > 0 {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!(
                "[ipython-mcp: about {omitted} more characters of {name} not saved; get_output with execution_id {} pages the full text while the kernel keeps it]\n",
                output.execution_id
            ));
        }
        outputs.push(Output::Stream {
            name: name.to_owned(),
            text,
        });
    }
    for item in &output.display_data {
        outputs.push(Output::DisplayData {
            data: item.data.clone(),
            metadata: item.metadata.clone(),
        });
    }
    if let Some(result) = &output.result {
        outputs.push(Output::ExecuteResult {
            execution_count: output.execution_count,
            data: result.clone(),
            metadata: Map::new(),
        });
    }
    if let Some(error) = &output.error {
        outputs.push(Output::Error {
            ename: error
                .ename
                .clone()
                .unwrap_or_else(|| error.code.to_string()),
            evalue: error
                .evalue
                .clone()
                .unwrap_or_else(|| error.message.clone()),
            traceback: error
                .traceback
                .as_deref()
                .map(|traceback| traceback.lines().map(str::to_owned).collect())
                .unwrap_or_default(),
        });
    }
    outputs
}

/// The execution's output with its streams as complete as the spool has them (up to
/// `MAX_SAVED_STREAM_CHARS` each), for saving; unchanged when nothing was cut or the spool is
/// unavailable.
async fn with_full_streams(session: &SessionHandle, output: &ExecutionOutput) -> ExecutionOutput {
    let mut full = output.clone();
    let dropped = output
        .spool
        .as_ref()
        .is_some_and(|spool| spool.dropped_bytes > 0);
    for stream in [StreamName::Stdout, StreamName::Stderr] {
        let (text, omitted, cut) = match stream {
            StreamName::Stdout => (
                &mut full.stdout,
                &mut full.stdout_omitted_chars,
                &mut full.stdout_cut,
            ),
            StreamName::Stderr => (
                &mut full.stderr,
                &mut full.stderr_omitted_chars,
                &mut full.stderr_cut,
            ),
        };
        if *omitted == 0 {
            continue;
        }
        let request = PageRequest {
            stream,
            start_line: 1,
            max_lines: usize::MAX,
            pattern: None,
            max_chars: MAX_SAVED_STREAM_CHARS,
        };
        let Some(Ok(page)) = session
            .page(Some(output.execution_id.as_str()), request)
            .await
        else {
            continue;
        };
        if page.lines.is_empty() {
            continue;
        }
        let total = text.chars().count() as u64 + *omitted;
        let mut saved = String::new();
        for line in &page.lines {
            saved.push_str(&line.text);
            saved.push('\n');
        }
        let complete = page.next_line.is_none() && !page.truncated && !dropped;
        *omitted = if complete {
            0
        } else {
            total.saturating_sub(saved.chars().count() as u64).max(1)
        };
        *text = saved;
        // The page starts at the stream's beginning: what was cut from the middle is in it.
        *cut = None;
    }
    full
}

/// What an execution saves in its cell: everything the kernel produced, from the session's
/// output log, within `MAX_SAVED_CELL_BYTES` (a last stream output names what did not fit);
/// without a log (the spool is off or was evicted), the bounded view with full streams.
async fn outputs_to_save(session: &SessionHandle, output: &ExecutionOutput) -> Vec<Output> {
    let Some(saved) = session
        .saved_outputs(
            output.execution_id.as_str(),
            output.execution_count,
            MAX_SAVED_CELL_BYTES,
        )
        .await
    else {
        return saved_outputs(&with_full_streams(session, output).await);
    };
    let mut outputs: Vec<Output> = saved
        .outputs
        .into_iter()
        .filter_map(|output| match output {
            Value::Object(map) => Some(Output::Raw(map)),
            _ => None,
        })
        .collect();
    let spool_dropped = output.spool.as_ref().map_or(0, |spool| spool.dropped_bytes);
    if saved.omitted_outputs > 0
        || saved.spool_incomplete
        || saved.kernel_withheld
        || spool_dropped > 0
    {
        let mut note = String::from("[ipython-mcp: this cell's outputs are incomplete:");
        if saved.omitted_outputs > 0 {
            note.push_str(&format!(
                " {} outputs or parts ({} bytes) were left out to keep the cell within {} MiB;",
                saved.omitted_outputs,
                saved.omitted_bytes,
                MAX_SAVED_CELL_BYTES >> 20
            ));
        }
        if saved.spool_incomplete || spool_dropped > 0 {
            note.push_str(&format!(
                " the kernel produced more than the output spool keeps per execution ({});",
                ipython_mcp_config::MAX_SPOOL_EXECUTION_BYTES.env
            ));
        }
        if saved.kernel_withheld {
            note.push_str(&format!(
                " the remote kernel sent only part of its output (displays past {}, stream text past what it forwards per execution);",
                ipython_mcp_config::MAX_DISPLAY_ITEMS.env
            ));
        }
        note.push_str(&format!(
            " get_output with execution_id {} pages the streams while the kernel keeps them]\n",
            output.execution_id
        ));
        outputs.push(Output::Stream {
            name: "stderr".to_owned(),
            text: note,
        });
    }
    outputs
}

/// The session that runs a notebook's cells.
pub(super) struct NotebookSession {
    pub(super) id: SessionId,
    pub(super) handle: SessionHandle,
    /// True when this call started it.
    pub(super) started: bool,
}

impl NotebookSession {
    fn found(id: SessionId, handle: SessionHandle) -> Self {
        NotebookSession {
            id,
            handle,
            started: false,
        }
    }
}

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
        let (_store, path) = self.notebook_path(notebook).await?;
        match self.kernels().notebook_session(&path.absolute) {
            Some((_, handle)) => Ok(handle),
            None => Err(ToolError::invalid(format!(
                "notebook {:?} has no kernel session",
                path.relative
            ))
            .with_hint("notebook_execute, notebook_execute_cell or notebook_session starts one")),
        }
    }

    /// The session of a notebook: its bound one, or a new one started from its kernelspec.
    /// `python3` (and a notebook without a kernelspec) runs where the default session does
    /// (`--kernel`, a `jupyter:<name>` spec included; see `StartSpec::followed_by_notebooks`);
    /// any other name must be a registered kernelspec.
    pub(super) async fn session_of(
        &self,
        path: &NotebookPath,
        kernel_name: Option<String>,
    ) -> Result<NotebookSession, ToolError> {
        let sessions = self.kernels();
        if let Some((id, handle)) = sessions.notebook_session(&path.absolute) {
            return Ok(NotebookSession::found(id, handle));
        }
        let spec = self.notebook_spec(path, kernel_name).await?;
        let stem = path
            .relative
            .rsplit('/')
            .next()
            .unwrap_or("notebook")
            .trim_end_matches(".ipynb");
        let base: String = stem
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .take(40)
            .collect();
        let base = format!("nb-{base}");
        let mut last_error = None;
        for attempt in 1..=20 {
            let id = if attempt == 1 {
                base.clone()
            } else {
                format!("{base}-{attempt}")
            };
            // As in Jupyter, a notebook's kernel starts in the notebook's directory, so its
            // relative paths mean what they mean beside the file (a kernel on the Jupyter
            // server starts where the server decides).
            let directory = match path.server_path() {
                Some(_) => None,
                None => path.absolute.parent().map(std::path::Path::to_owned),
            };
            match sessions.start(
                &format!("notebook {}", path.relative),
                spec.clone(),
                Some(&id),
                directory,
            ) {
                Ok((id, handle)) => {
                    sessions.bind_notebook(path.absolute.clone(), id.clone());
                    tracing::info!(kernel = %id, "notebook session started");
                    return Ok(NotebookSession {
                        id,
                        handle,
                        started: true,
                    });
                }
                Err(error @ ManagerError::IdTaken { .. }) => {
                    // A concurrent first run of the same notebook may have just started and
                    // bound its session under this id: use that one.
                    if let Some((id, handle)) = sessions.notebook_session(&path.absolute) {
                        return Ok(NotebookSession::found(id, handle));
                    }
                    last_error = Some(error);
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(last_error.map_or_else(
            || ErrorInfo::new(Code::InternalError, "no free session id").into(),
            ToolError::from,
        ))
    }

    /// How a notebook's kernel starts: a notebook on the Jupyter server runs there, in the
    /// kernel of the server's own session for it (the one a person's JupyterLab runs it in),
    /// else in a new one of its kernelspec; a local notebook naming the generic `python3` runs
    /// in a kernel like the default session's, found exactly as for it; any other name is a
    /// registered kernelspec.
    async fn notebook_spec(
        &self,
        path: &NotebookPath,
        kernel_name: Option<String>,
    ) -> Result<StartSpec, ToolError> {
        let name = kernel_name.unwrap_or_else(|| kernelspec::PYTHON3.to_owned());
        let found = match path.server_path() {
            Some(server_path) => {
                let remote = match self.server_kernel_of(server_path).await {
                    Some(id) => RemoteKernel::Attach { id },
                    None => RemoteKernel::Start { name },
                };
                if ipython_mcp_config::is_remote_name(match &remote {
                    RemoteKernel::Start { name } => name,
                    RemoteKernel::Attach { id } | RemoteKernel::Foreign { id } => id,
                }) {
                    Ok(StartSpec::Remote(remote))
                } else {
                    Err((
                        ManagerError::InvalidRemote {
                            spec: remote.to_string(),
                        },
                        remote.to_string(),
                    ))
                }
            }
            None if name == kernelspec::PYTHON3 => Ok(StartSpec::Default),
            None => {
                let (sessions, spec_name) = (self.kernels().clone(), name.clone());
                tokio::task::spawn_blocking(move || sessions.parse_spec(&spec_name))
                    .await
                    .unwrap_or(Err(ManagerError::Internal {
                        what: "kernelspec lookup failed",
                    }))
                    .map_err(|error| (error, name))
            }
        };
        found.map_err(|(error, spec)| {
            let error = crate::error::manager_error(&error);
            ErrorInfo {
                message: format!(
                    "cannot start the notebook's kernel {:?}: {}",
                    ipython_mcp_text::shorten(&spec, 64),
                    error.message
                ),
                ..error
            }
            .into()
        })
    }

    /// The kernel of the Jupyter server's session for notebook `server_path`, if it has one.
    /// A server without sessions, or one that fails to list them, has none to offer: the
    /// notebook then gets a kernel of its own.
    async fn server_kernel_of(&self, server_path: &str) -> Option<String> {
        let server = self.kernels().jupyter()?;
        match server.sessions().await {
            Ok(sessions) => sessions
                .into_iter()
                .find(|session| session.path.trim_start_matches('/') == server_path)
                .map(|session| session.kernel_id),
            Err(error) => {
                tracing::debug!(error = %error, "the Jupyter server's sessions are not listed");
                None
            }
        }
    }

    /// Runs a notebook's code in its session and saves the outcome with `run.save`, expecting
    /// the file's revision from before the run, so a change made meanwhile is a conflict
    /// (reported in `save_error`, the outputs still returned). In the background the call
    /// answers `pending` once the execution is admitted; the save happens when it ends, and the
    /// final result is kept for `tasks/get` (see tasks.rs), and a tasks client is answered
    /// with the task.
    pub(super) async fn run_and_save(
        &self,
        mut run: Run,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ToolError> {
        let NotebookSession {
            id: kernel,
            handle: session,
            started,
        } = self.session_of(&run.path, run.kernel_name.clone()).await?;
        let kernel = String::from(kernel);
        let began = std::time::Instant::now();
        if let (Store::Jupyter(jupyter), Some(_), false) = (&run.store, &run.save, run.background) {
            if let Some(room) = jupyter.room(&run.path).await? {
                let output = self.run_live(&mut run, &room, &session, context).await?;
                return Ok(self
                    .finish(run, &session, output, kernel, started, began)
                    .await
                    .into());
            }
        }
        if !run.background {
            let args = ExecuteArgs {
                code: run.code.clone(),
                timeout: run.timeout,
                request_id: render::request_id(&context.id),
                cancel: context.ct.clone(),
                progress: None,
            };
            let output = session.execute(args).await;
            return Ok(self
                .finish(run, &session, output, kernel, started, began)
                .await
                .into());
        }
        // Nobody waits: the call's cancellation does not apply, tasks/cancel does.
        let cancel = tokio_util::sync::CancellationToken::new();
        let pending = self.start_background(
            &session,
            run.code.clone(),
            run.timeout,
            render::request_id(&context.id),
            cancel.clone(),
        );
        if pending.status != ExecutionStatus::Pending {
            // Refused at admission: answered now, nothing to save.
            return Ok(self
                .finish(run, &session, pending, kernel, started, began)
                .await
                .into());
        }
        let id = pending.execution_id.as_str().to_owned();
        let relative = run.path.relative.clone();
        let (slot, task) = self.state().tasks().insert_notebook(&id, cancel);
        let server = self.clone();
        let (background_session, background_kernel) = (session.clone(), kernel.clone());
        self.state().background().spawn_to_finish(async move {
            let Some(output) = finished(&background_session, &id).await else {
                return;
            };
            let result = server
                .finish(
                    run,
                    &background_session,
                    output,
                    background_kernel,
                    started,
                    began,
                )
                .await;
            slot.set(result);
        });
        let result = NotebookExecuteResult {
            output: pending.clone(),
            path: relative,
            kernel,
            session_started: started,
            saved: false,
            revision: None,
            cell: None,
            save_error: None,
        };
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

    /// Runs `run` in a notebook's live document (a `jupyter:` notebook on a server that
    /// collaborates) so a person with it open watches the cell run: a new cell is inserted
    /// first, the cell is marked running, and its outputs and execution count are written
    /// into the document as they arrive. Returns the final output; `finish` then saves it
    /// like any run's (by cell id, merged with whatever the person changed meanwhile).
    async fn run_live(
        &self,
        run: &mut Run,
        room: &ipython_mcp_collab::Room,
        session: &SessionHandle,
        context: &RequestContext<RoleServer>,
    ) -> Result<ExecutionOutput, ToolError> {
        let cell_id = match &run.target {
            Target::Cell(Some(id)) => id.clone(),
            Target::Cell(None) => {
                return Err(ToolError::invalid(
                    "the cell has no id in the live document",
                ))
            }
            Target::New(index) => {
                let (code, index) = (run.code.clone(), *index);
                let inserted = run
                    .store
                    .mutate(&run.path, None, move |notebook| {
                        let cell = NewCell {
                            cell_type: CellType::Code,
                            source: code,
                            metadata: Map::new(),
                        };
                        notebook.insert(index, cell).map(|(_, id)| id)
                    })
                    .await?;
                inserted.value
            }
        };
        // From here on the cell is found by its id, wherever the person moved it.
        let target = CellRef::Id(cell_id.clone());
        run.target = Target::Cell(Some(cell_id.clone()));
        run.save = Some(Box::new(move |notebook, execution_count, outputs| {
            let index = notebook.locate(&target)?;
            notebook.set_outputs(index, execution_count, outputs);
            Ok(index)
        }));
        run.live = true;
        let mut streaming = room.set_execution_state(&cell_id, true).await.is_ok();
        let pending = session.execute_background(ExecuteArgs {
            code: run.code.clone(),
            timeout: run.timeout,
            request_id: render::request_id(&context.id),
            cancel: context.ct.clone(),
            progress: None,
        });
        let mut output = pending;
        let mut shown = Vec::new();
        while output.status == ExecutionStatus::Pending {
            let id = output.execution_id.as_str().to_owned();
            let Some(now) = session.output(Some(&id), LIVE_OUTPUT_INTERVAL).await else {
                break;
            };
            output = now;
            if streaming && output.status == ExecutionStatus::Pending {
                let outputs: Vec<Value> = outputs_to_save(session, &output)
                    .await
                    .iter()
                    .map(Output::to_json)
                    .collect();
                if outputs != shown {
                    let count = output.execution_count.and_then(|n| i64::try_from(n).ok());
                    // A document that stops taking outputs is left alone until the end: the
                    // final save says whether the outputs reached it.
                    streaming = room.set_outputs(&cell_id, count, &outputs).await.is_ok();
                    shown = outputs;
                }
            }
        }
        if streaming {
            let _ = room.set_execution_state(&cell_id, false).await;
        }
        Ok(output)
    }

    /// Runs `run` to its end in the notebook's session (never in the background), saves it as
    /// `run` says, and returns the result as data: the json-lines protocol's `execute` and
    /// `execute_cell`, which have no MCP request (`request_id` and `cancel` stand for it).
    pub(crate) async fn run_and_save_result(
        &self,
        run: Run,
        request_id: String,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<NotebookExecuteResult, ToolError> {
        let NotebookSession {
            id: kernel,
            handle: session,
            started,
        } = self.session_of(&run.path, run.kernel_name.clone()).await?;
        let began = std::time::Instant::now();
        let args = ExecuteArgs {
            code: run.code.clone(),
            timeout: run.timeout,
            request_id,
            cancel,
            progress: None,
        };
        let output = session.execute(args).await;
        let (result, _, _) = self
            .save_outcome(run, &session, output, kernel.into(), started, began)
            .await;
        Ok(result)
    }

    /// Saves a finished execution as `run` says and renders the tool's result.
    async fn finish(
        &self,
        run: Run,
        session: &SessionHandle,
        output: ExecutionOutput,
        kernel: String,
        started: bool,
        began: std::time::Instant,
    ) -> CallToolResult {
        let (result, output, text) = self
            .save_outcome(run, session, output, kernel, started, began)
            .await;
        render_result(&output, &result, &text)
    }

    /// Saves a finished execution as `run` says: the result, the output as the agent sees it,
    /// and the line the text block ends with.
    async fn save_outcome(
        &self,
        run: Run,
        session: &SessionHandle,
        mut output: ExecutionOutput,
        kernel: String,
        started: bool,
        began: std::time::Instant,
    ) -> (NotebookExecuteResult, ExecutionOutput, String) {
        let Run {
            tool,
            store,
            path,
            revision,
            save,
            live,
            ..
        } = run;
        // A live document merges: the outputs go into the cell (found by id) whatever else
        // changed during the run.
        let expected = (!live).then(|| revision.clone());
        let mut result = NotebookExecuteResult {
            output: output.clone(),
            path: path.relative.clone(),
            kernel,
            session_started: started,
            saved: false,
            revision: Some(revision.clone()),
            cell: None,
            save_error: None,
        };
        if let (Some(save), true) = (save, output.status != ExecutionStatus::Rejected) {
            let outputs = outputs_to_save(session, &output).await;
            let execution_count = output.execution_count;
            let saved = store
                .mutate(&path, expected, move |notebook| {
                    let index = save(notebook, execution_count, &outputs)?;
                    Ok(summary(notebook, index))
                })
                .await
                .map_err(|error| crate::error::store_error(&error));
            match saved {
                Ok(mutated) => {
                    result.saved = true;
                    result.revision = Some(mutated.revision);
                    result.cell = Some(mutated.value.in_format(mutated.path.format));
                }
                Err(error) => {
                    // A failure like any other (in `error`), unless the code itself failed;
                    // `save_error` says why the file was not written either way.
                    if output.error.is_none() {
                        output.error = Some(error.clone());
                        result.output.error = Some(error.clone());
                    }
                    result.save_error = Some(error);
                    output.ok = false;
                    result.output.ok = false;
                }
            }
        }
        tracing::info!(
            tool,
            kernel = %result.kernel,
            status = ?output.status,
            saved = result.saved,
            ms = began.elapsed().as_millis() as u64,
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
        (result, output, text)
    }
}

/// How often a live run's outputs are written into the document while it runs.
const LIVE_OUTPUT_INTERVAL: Duration = Duration::from_millis(250);

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

#[cfg(test)]
mod tests {
    use super::*;
    use ipython_mcp_output::{DisplayItem, RuntimeInfo};
    use serde_json::json;

    fn output() -> ExecutionOutput {
        let runtime = RuntimeInfo {
            request_id: "1".into(),
            admission_seq: 1,
            epoch: 0,
            queue_wait_ms: 0,
            run_ms: 1,
            interruption: None,
            namespace: None,
        };
        let mut output = ExecutionOutput::pending("e1".into(), runtime);
        output.status = ExecutionStatus::Ok;
        output
    }

    #[test]
    fn outputs_are_saved_in_jupyter_order_with_a_note_for_what_is_missing() {
        let mut run = output();
        run.execution_count = Some(7);
        run.stdout = "a\nb".into();
        run.stdout_omitted_chars = 10;
        run.stderr = "warn\n".into();
        run.display_data = vec![DisplayItem {
            data: json!({"text/plain": "<Figure>"})
                .as_object()
                .cloned()
                .expect("object"),
            metadata: Map::new(),
        }];
        run.result = json!({"text/plain": "42"}).as_object().cloned();
        run.error = Some(ErrorInfo {
            ename: Some("ValueError".into()),
            evalue: Some("boom".into()),
            traceback: Some("line 1\nline 2".into()),
            ..ErrorInfo::new(Code::ExecutionError, "ValueError: boom")
        });
        let saved = saved_outputs(&run);
        assert_eq!(saved.len(), 5);
        match &saved[0] {
            Output::Stream { name, text } => {
                assert_eq!(name, "stdout");
                assert!(text.starts_with("a\nb\n[ipython-mcp: about 10 more characters of stdout not saved; get_output with execution_id e1"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            saved[1],
            Output::Stream {
                name: "stderr".into(),
                text: "warn\n".into()
            }
        );
        assert!(matches!(saved[2], Output::DisplayData { .. }));
        assert!(matches!(
            saved[3],
            Output::ExecuteResult {
                execution_count: Some(7),
                ..
            }
        ));
        assert_eq!(
            saved[4],
            Output::Error {
                ename: "ValueError".into(),
                evalue: "boom".into(),
                traceback: vec!["line 1".into(), "line 2".into()]
            }
        );
    }
}
