//! Running code for a notebook and saving what it produced into the file, as Jupyter would:
//! a new code cell (`code_run`) or an existing one re-run (`cell_run`), executed in the
//! notebook's session, live in the document a person has open when the Jupyter server
//! collaborates, then saved against the revision read before the run.

use std::time::Duration;

use ipython_mcp_collab::Room;
use ipython_mcp_kernel::{ExecuteArgs, SessionHandle, MAX_CODE_BYTES};
use ipython_mcp_notebook::{
    cell_id, joined_text, CellRef, CellType, Format, NewCell, Notebook, NotebookPath, Output,
};
use ipython_mcp_output::{ExecutionOutput, ExecutionStatus, PageRequest, StreamName};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::service::{Notebooks, Pager};
use crate::store::Store;
use crate::Error;

/// Characters of each stream an execution saves in the notebook (read back from the spool);
/// the agent still gets only `max_text_chars`.
const MAX_SAVED_STREAM_CHARS: usize = 1 << 20;

/// Bytes of outputs one cell saves in the notebook (everything the kernel produced, up to
/// this); what does not fit is named in a note. The agent still gets the bounded view.
const MAX_SAVED_CELL_BYTES: u64 = 64 << 20;

/// How often a live run's outputs are written into the document while it runs.
const LIVE_OUTPUT_INTERVAL: Duration = Duration::from_millis(250);

/// Writes an execution's saved outputs (and its execution count) into the notebook; returns
/// the cell's index.
type SaveCell = Box<
    dyn FnOnce(&mut Notebook, Option<u64>, &[Output]) -> Result<usize, ipython_mcp_notebook::Error>
        + Send
        + Sync,
>;

/// New code to run in a notebook, saved as a new code cell with its outputs.
pub struct CodeRequest {
    /// The notebook, as an agent gives it (workspace-relative, or `jupyter:<path>`).
    pub path: String,
    pub code: String,
    /// Where the new cell goes (`None`: at the end).
    pub index: Option<usize>,
    /// False: run only, nothing is written.
    pub persist: bool,
    pub expected_revision: Option<String>,
    pub timeout_seconds: Option<f64>,
}

/// A notebook's code cell to run again, its outputs replaced by the new ones.
pub struct CellRequest {
    pub path: String,
    pub cell: CellRef,
    pub expected_revision: Option<String>,
    pub timeout_seconds: Option<f64>,
}

/// Code to run for a notebook, and where its outputs go: built by [`Notebooks::code_run`] or
/// [`Notebooks::cell_run`], run by [`Notebooks::execute`] (or in the background by the
/// caller), saved by [`Notebooks::save`].
pub struct Run {
    store: Store,
    path: NotebookPath,
    /// The file's revision when it was read for this run: the save expects it.
    revision: String,
    /// The notebook's `metadata.kernelspec` name, for a session it has yet to start.
    kernel_name: Option<String>,
    code: String,
    timeout: Option<Duration>,
    /// How the outputs are saved; `None` runs without touching the file.
    save: Option<SaveCell>,
    /// Where the saved outputs go: an existing cell, or a new one.
    target: Target,
    /// Ran in a live document: saved without a revision check (the outputs go into the cell,
    /// found by id, whatever else changed meanwhile).
    live: bool,
}

/// The cell a run's outputs are saved in.
enum Target {
    /// An existing cell, by id when it has one.
    Cell(Option<String>),
    /// A new code cell holding the run's code, at this index (`None`: at the end).
    New(Option<usize>),
}

impl Run {
    pub fn path(&self) -> &NotebookPath {
        &self.path
    }

    pub fn code(&self) -> &str {
        &self.code
    }

    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The file's revision before the run.
    pub fn revision(&self) -> &str {
        &self.revision
    }
}

/// What became of a run's save.
pub struct Saved {
    /// The file's revision after saving (the one before, when nothing was saved).
    pub revision: String,
    /// The cell that holds the outputs, when they were written.
    pub cell: Option<SavedCell>,
    /// Why they were not written (a `revision_conflict`: the file changed meanwhile).
    pub error: Option<Error>,
}

/// The cell a run saved into.
pub struct SavedCell {
    pub index: usize,
    pub id: Option<String>,
    pub cell_type: String,
    /// The file's format (a percent script's cells have no stored ids).
    pub format: Format,
}

impl Notebooks {
    /// The checked timeout of a run: positive, up to the server's longest operation.
    fn timeout(&self, seconds: Option<f64>) -> Result<Option<Duration>, Error> {
        let max = self.max_timeout;
        match seconds {
            None => Ok(None),
            Some(seconds)
                if seconds.is_finite() && seconds > 0.0 && seconds <= max.as_secs_f64() =>
            {
                Ok(Some(Duration::from_secs_f64(seconds)))
            }
            Some(seconds) => Err(Error::Invalid(format!(
                "timeout_seconds must be a positive number of seconds up to {}, got {seconds}",
                max.as_secs_f64()
            ))),
        }
    }

    /// A run of new code, saved (unless `persist` is false) as a new code cell with its
    /// outputs.
    pub async fn code_run(&self, request: CodeRequest) -> Result<Run, Error> {
        if request.code.len() > MAX_CODE_BYTES {
            return Err(Error::Invalid(format!(
                "code is {} bytes; the limit is {MAX_CODE_BYTES} bytes",
                request.code.len()
            )));
        }
        let timeout = self.timeout(request.timeout_seconds)?;
        let (store, path, loaded) = self
            .load(&request.path, request.expected_revision.as_deref())
            .await?;
        let length = loaded.notebook.cells().len();
        if let Some(index) = request.index.filter(|index| *index > length) {
            return Err(Error::Invalid(format!(
                "index {index} is past the end (the notebook has {length} cells)"
            )));
        }
        let save = request.persist.then(|| {
            let (code, position) = (request.code.clone(), request.index);
            let save: SaveCell = Box::new(move |notebook, execution_count, outputs| {
                let (index, _) = notebook.insert(position, code_cell(code))?;
                notebook.set_outputs(index, execution_count, outputs);
                Ok(index)
            });
            save
        });
        Ok(Run {
            store,
            path,
            kernel_name: loaded.notebook.kernel_name().map(str::to_owned),
            revision: loaded.revision,
            code: request.code,
            timeout,
            save,
            target: Target::New(request.index),
            live: false,
        })
    }

    /// A run of an existing code cell, its outputs saved back into it.
    pub async fn cell_run(&self, request: CellRequest) -> Result<Run, Error> {
        let timeout = self.timeout(request.timeout_seconds)?;
        let (store, path, loaded) = self
            .load(&request.path, request.expected_revision.as_deref())
            .await?;
        let index = loaded.notebook.locate(&request.cell)?;
        let cell = &loaded.notebook.cells()[index];
        let cell_type = cell.get("cell_type").and_then(Value::as_str);
        if cell_type != Some("code") {
            return Err(Error::Invalid(format!(
                "cell {index} is a {} cell; only code cells run",
                cell_type.unwrap_or("?")
            )));
        }
        let code = joined_text(cell.get("source"));
        // Found again by id after the run when it has one (ids are assigned on the first
        // write of an older notebook; its index is then still valid, the revision being
        // unchanged).
        let id = cell_id(cell).map(str::to_owned);
        let target = match &id {
            Some(id) => CellRef::Id(id.clone()),
            None => CellRef::Index(index),
        };
        let save: SaveCell = Box::new(move |notebook, execution_count, outputs| {
            let index = notebook.locate(&target)?;
            notebook.set_outputs(index, execution_count, outputs);
            Ok(index)
        });
        Ok(Run {
            store,
            path,
            kernel_name: loaded.notebook.kernel_name().map(str::to_owned),
            revision: loaded.revision,
            code,
            timeout,
            save: Some(save),
            target: Target::Cell(id),
            live: false,
        })
    }

    /// The session that runs `run`: the notebook's bound one, or a new one from its
    /// kernelspec.
    pub async fn session_for(&self, run: &Run) -> Result<crate::NotebookSession, Error> {
        self.session_of(&run.path, run.kernel_name.clone()).await
    }

    /// Runs `run` to its end in `session`: in the notebook's live document when it has one
    /// and the run saves (a person with it open watches the cell run), else as any
    /// execution. `request_id` and `cancel` are the caller's request's.
    pub async fn execute(
        &self,
        run: &mut Run,
        session: &SessionHandle,
        request_id: String,
        cancel: CancellationToken,
    ) -> Result<ExecutionOutput, Error> {
        let args = ExecuteArgs {
            code: run.code.clone(),
            timeout: run.timeout,
            request_id,
            cancel,
            progress: None,
        };
        if let (Store::Jupyter(jupyter), Some(_)) = (&run.store, &run.save) {
            if let Some(room) = jupyter.room(&run.path).await? {
                return run_live(run, &room, session, args, self.pager).await;
            }
        }
        Ok(session.execute(args).await)
    }

    /// Saves a finished execution as `run` says: into its cell, expecting the revision from
    /// before the run, so a change made meanwhile is a conflict (in [`Saved::error`]).
    /// Nothing is saved for a run that does not save or an execution refused at admission.
    pub async fn save(&self, run: Run, session: &SessionHandle, output: &ExecutionOutput) -> Saved {
        let Run {
            store,
            path,
            revision,
            save,
            live,
            ..
        } = run;
        let unsaved = |error| Saved {
            revision: revision.clone(),
            cell: None,
            error,
        };
        let Some(save) = save.filter(|_| output.status != ExecutionStatus::Rejected) else {
            return unsaved(None);
        };
        let outputs = outputs_to_save(session, output, self.pager).await;
        let execution_count = output.execution_count;
        let expected = (!live).then(|| revision.clone());
        let saved = store
            .mutate(&path, expected, move |notebook| {
                let index = save(notebook, execution_count, &outputs)?;
                let cell = &notebook.cells()[index];
                Ok((
                    index,
                    cell_id(cell).map(str::to_owned),
                    cell.get("cell_type")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                ))
            })
            .await;
        match saved {
            Ok(mutated) => {
                let (index, id, cell_type) = mutated.value;
                Saved {
                    revision: mutated.revision,
                    cell: Some(SavedCell {
                        index,
                        id,
                        cell_type,
                        format: mutated.path.format,
                    }),
                    error: None,
                }
            }
            Err(error) => unsaved(Some(error)),
        }
    }
}

fn code_cell(source: String) -> NewCell {
    NewCell {
        cell_type: CellType::Code,
        source,
        metadata: Map::new(),
    }
}

/// Runs `run` in a notebook's live document (a `jupyter:` notebook on a server that
/// collaborates) so a person with it open watches the cell run: a new cell is inserted
/// first, the cell is marked running, and its outputs and execution count are written into
/// the document as they arrive. Returns the final output; the save then writes it like any
/// run's (by cell id, merged with whatever the person changed meanwhile).
async fn run_live(
    run: &mut Run,
    room: &Room,
    session: &SessionHandle,
    args: ExecuteArgs,
    pager: Pager,
) -> Result<ExecutionOutput, Error> {
    let cell_id = match &run.target {
        Target::Cell(Some(id)) => id.clone(),
        Target::Cell(None) => {
            return Err(Error::Invalid(
                "the cell has no id in the live document".to_owned(),
            ))
        }
        Target::New(index) => {
            let (code, index) = (run.code.clone(), *index);
            let inserted = run
                .store
                .mutate(&run.path, None, move |notebook| {
                    notebook.insert(index, code_cell(code)).map(|(_, id)| id)
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
    let mut output = session.execute_background(args);
    let mut shown = Vec::new();
    while output.status == ExecutionStatus::Pending {
        let id = output.execution_id.as_str().to_owned();
        let Some(now) = session.output(Some(&id), LIVE_OUTPUT_INTERVAL).await else {
            break;
        };
        output = now;
        if streaming && output.status == ExecutionStatus::Pending {
            let outputs: Vec<Value> = outputs_to_save(session, &output, pager)
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

/// What an execution saves in the notebook, as Jupyter would: streams, displays, the result
/// and the error. Streams longer than what the agent got have been filled in from the spool
/// (`with_full_streams`); what is still missing is named in a last line.
fn saved_outputs(output: &ExecutionOutput, pager: Pager) -> Vec<Output> {
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
                "[ipython-mcp: about {omitted} more characters of {name} not saved; {} pages the full text while the kernel keeps it]\n",
                pager(output.execution_id.as_str())
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
async fn outputs_to_save(
    session: &SessionHandle,
    output: &ExecutionOutput,
    pager: Pager,
) -> Vec<Output> {
    let Some(saved) = session
        .saved_outputs(
            output.execution_id.as_str(),
            output.execution_count,
            MAX_SAVED_CELL_BYTES,
        )
        .await
    else {
        return saved_outputs(&with_full_streams(session, output).await, pager);
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
            " {} pages the streams while the kernel keeps them]\n",
            pager(output.execution_id.as_str())
        ));
        outputs.push(Output::Stream {
            name: "stderr".to_owned(),
            text: note,
        });
    }
    outputs
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipython_mcp_output::{Code, DisplayItem, ErrorInfo, RuntimeInfo};
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
            restore: None,
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
        let saved = saved_outputs(&run, |id| format!("paging({id})"));
        assert_eq!(saved.len(), 5);
        match &saved[0] {
            Output::Stream { name, text } => {
                assert_eq!(name, "stdout");
                assert!(text.starts_with("a\nb\n[ipython-mcp: about 10 more characters of stdout not saved; paging(e1) pages the full text"), "{text}");
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
