//! The notebooks toolset: create, read, edit and execute `.ipynb` files inside the
//! workspace root, with SHA-256 revisions for optimistic concurrency and one kernel session per
//! notebook. File work happens in `ipython-mcp-notebook` (on the blocking pool); this module
//! checks arguments, picks sessions, turns executions into saved outputs and bounds what goes
//! back to the agent.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::argument::Parameters;
use ipython_mcp_kernel::{
    Code, ErrorInfo, ExecuteArgs, ExecutionOutput, ExecutionStatus, PageRequest, RuntimeStatus,
    SessionHandle, StreamName,
};
use ipython_mcp_notebook::{
    cell_id, joined_text, uri_for_path, CellRef, CellType, Format, NewCell, Notebook, NotebookPath,
    Output, Workspace,
};
use rmcp::handler::server::tool::schema_for_output;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::render;
use crate::server::{IpythonMcp, MAX_CODE_BYTES};
use crate::sessions::{StartError, StartSpec};

/// Characters of each stream an execution saves in the notebook (read back from the spool);
/// the agent still gets only `max_text_chars`.
const MAX_SAVED_STREAM_CHARS: usize = 1 << 20;
/// Largest `max_cells` of one `notebook_read`.
const MAX_READ_CELLS: usize = 1000;
const DEFAULT_READ_CELLS: usize = 100;

/// Bytes of outputs one cell saves in the notebook (everything the kernel produced, up to
/// this); what does not fit is named in a note. The agent still gets the bounded view.
const MAX_SAVED_CELL_BYTES: u64 = 64 << 20;

/// Writes an execution's saved outputs (and its execution count) into the notebook; returns
/// the cell's index.
type SaveCell = Box<
    dyn FnOnce(&mut Notebook, Option<u64>, &[Output]) -> Result<usize, ipython_mcp_notebook::Error>
        + Send,
>;

/// The workspace of this server, or why it is unusable.
pub(crate) struct NotebookState {
    workspace: Result<Arc<Workspace>, String>,
}

impl NotebookState {
    pub(crate) fn new(root: Option<PathBuf>) -> NotebookState {
        let root = root.or_else(|| std::env::current_dir().ok());
        let workspace = match root {
            Some(root) => Workspace::new(&root)
                .map(Arc::new)
                .map_err(|error| error.to_string()),
            None => Err("no working directory".to_owned()),
        };
        NotebookState { workspace }
    }

    pub(crate) fn workspace(&self) -> Result<&Arc<Workspace>, Box<ErrorInfo>> {
        self.workspace.as_ref().map_err(|problem| {
            Box::new(
                ErrorInfo::new(
                    Code::InvalidConfiguration,
                    format!("the notebook workspace root is unusable: {problem}"),
                )
                .with_hint(
                    "set IPYTHON_MCP_WORKSPACE_ROOT (--workspace-root) to an existing directory",
                ),
            )
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Parameters

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CellInput {
    /// `code` (default), `markdown` or `raw`.
    #[serde(default)]
    pub cell_type: Option<CellType>,
    /// The cell's text.
    #[serde(default)]
    pub source: String,
    /// The cell's metadata (a JSON object); default `{}`.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    /// Notebook path relative to the workspace root, ending in `.ipynb` (e.g.
    /// `analysis/eda.ipynb`), or in `.py` for a jupytext percent script (sources and metadata
    /// only, no outputs). Its directory must exist; absolute paths and `..` are refused.
    pub path: String,
    /// Kernelspec name recorded in `metadata.kernelspec` (default `python3`); it decides which
    /// kernel runs the notebook's cells (see notebook_session).
    #[serde(default)]
    pub kernel_name: Option<String>,
    /// Display name of that kernel (default: `Python 3` for python3, else the kernel name).
    #[serde(default)]
    pub display_name: Option<String>,
    /// Kernel language (default `python`).
    #[serde(default)]
    pub language: Option<String>,
    /// Cells to start with, in order.
    #[serde(default)]
    pub cells: Vec<CellInput>,
    /// Replace an existing file (default false: an existing file is an error).
    #[serde(default)]
    pub overwrite: bool,
    /// With `overwrite`: replace the file only if it is still at this revision.
    #[serde(default)]
    pub expected_revision: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// Notebook path relative to the workspace root.
    pub path: String,
    /// Read only the cell with this id (exclusive with `index`).
    #[serde(default)]
    pub cell_id: Option<String>,
    /// Read only the cell at this 0-based index (exclusive with `cell_id`).
    #[serde(default)]
    pub index: Option<usize>,
    /// Include saved outputs (bounded; images are described, not returned). Default false.
    #[serde(default)]
    pub include_outputs: bool,
    /// First cell to return when reading the whole notebook (default 0); continue a long
    /// notebook from the previous answer's `next_index`.
    #[serde(default)]
    pub start_index: Option<usize>,
    /// Most cells to return (default 100, max 1000). The answer is also bounded in characters;
    /// `next_index` says where to continue.
    #[serde(default)]
    pub max_cells: Option<usize>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathParams {
    /// Notebook path relative to the workspace root.
    pub path: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InsertParams {
    /// Notebook path relative to the workspace root.
    pub path: String,
    /// `code` (default), `markdown` or `raw`.
    #[serde(default)]
    pub cell_type: Option<CellType>,
    /// The new cell's text.
    pub source: String,
    /// The new cell's metadata (a JSON object); default `{}`.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// 0-based position for the new cell (cells from there on move down); omit to append.
    #[serde(default)]
    pub index: Option<usize>,
    /// Fail with revision_conflict, changing nothing, unless the file is at this revision.
    #[serde(default)]
    pub expected_revision: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateParams {
    /// Notebook path relative to the workspace root.
    pub path: String,
    /// The cell's stable id (give exactly one of `cell_id` and `index`).
    #[serde(default)]
    pub cell_id: Option<String>,
    /// The cell's 0-based index (give exactly one of `cell_id` and `index`).
    #[serde(default)]
    pub index: Option<usize>,
    /// New text of the cell (replaces the whole source); omit to keep it.
    #[serde(default)]
    pub source: Option<String>,
    /// New metadata of the cell (replaces it entirely); omit to keep it.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// New type of the cell; a cell that stops being code loses its outputs.
    #[serde(default)]
    pub cell_type: Option<CellType>,
    /// Fail with revision_conflict, changing nothing, unless the file is at this revision.
    #[serde(default)]
    pub expected_revision: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CellParams {
    /// Notebook path relative to the workspace root.
    pub path: String,
    /// The cell's stable id (give exactly one of `cell_id` and `index`).
    #[serde(default)]
    pub cell_id: Option<String>,
    /// The cell's 0-based index (give exactly one of `cell_id` and `index`).
    #[serde(default)]
    pub index: Option<usize>,
    /// Fail with revision_conflict, changing nothing, unless the file is at this revision.
    #[serde(default)]
    pub expected_revision: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveParams {
    /// Notebook path relative to the workspace root.
    pub path: String,
    /// The cell's stable id (give exactly one of `cell_id` and `index`).
    #[serde(default)]
    pub cell_id: Option<String>,
    /// The cell's 0-based index (give exactly one of `cell_id` and `index`).
    #[serde(default)]
    pub index: Option<usize>,
    /// The index the cell has after the move (0 = first, cell count - 1 = last).
    pub to_index: usize,
    /// Fail with revision_conflict, changing nothing, unless the file is at this revision.
    #[serde(default)]
    pub expected_revision: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClearParams {
    /// Notebook path relative to the workspace root.
    pub path: String,
    /// Clear only the cell with this id; omit both `cell_id` and `index` to clear every cell.
    #[serde(default)]
    pub cell_id: Option<String>,
    /// Clear only the cell at this 0-based index.
    #[serde(default)]
    pub index: Option<usize>,
    /// Fail with revision_conflict, changing nothing, unless the file is at this revision.
    #[serde(default)]
    pub expected_revision: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetadataParams {
    /// Notebook path relative to the workspace root.
    pub path: String,
    /// The new metadata: replaces the notebook's (or the cell's) metadata entirely. Read the
    /// current one with notebook_read first and send it back changed.
    pub metadata: Map<String, Value>,
    /// Set this cell's metadata instead of the notebook's (exclusive with `index`).
    #[serde(default)]
    pub cell_id: Option<String>,
    /// Set the metadata of the cell at this 0-based index instead of the notebook's.
    #[serde(default)]
    pub index: Option<usize>,
    /// Fail with revision_conflict, changing nothing, unless the file is at this revision.
    #[serde(default)]
    pub expected_revision: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteCellParams {
    /// Notebook path relative to the workspace root.
    pub path: String,
    /// The code cell's stable id (give exactly one of `cell_id` and `index`).
    #[serde(default)]
    pub cell_id: Option<String>,
    /// The code cell's 0-based index (give exactly one of `cell_id` and `index`).
    #[serde(default)]
    pub index: Option<usize>,
    /// Deadline in seconds from when the code starts (default: the server's operation
    /// timeout; at most its max timeout). On expiry the kernel is interrupted.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Run only if the file is at this revision. Independently of it, the outputs are saved
    /// only if nobody changed the file while the cell ran.
    #[serde(default)]
    pub expected_revision: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NotebookExecuteParams {
    /// Notebook path relative to the workspace root (the notebook must exist).
    pub path: String,
    /// Code to run in the notebook's kernel (IPython syntax).
    pub code: String,
    /// Save the code and its outputs as a new code cell (default true). False runs it in the
    /// notebook's kernel without touching the file.
    #[serde(default = "default_true")]
    pub persist: bool,
    /// Where to insert the new cell (0-based); omit to append.
    #[serde(default)]
    pub index: Option<usize>,
    /// Deadline in seconds from when the code starts (default: the server's operation timeout).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Run only if the file is at this revision. Independently of it, the cell is saved only
    /// if nobody changed the file while the code ran.
    #[serde(default)]
    pub expected_revision: Option<String>,
}

fn default_true() -> bool {
    true
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionParams {
    /// Notebook path relative to the workspace root.
    pub path: String,
    /// Bind the notebook to this running kernel session (from kernel_list, kernel_start or
    /// another notebook's session) to share one namespace between notebooks. Omit to get the
    /// notebook's own session, started from its `metadata.kernelspec` if it has none.
    #[serde(default)]
    pub kernel: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Results

/// A cell's place in the notebook.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CellSummary {
    pub index: usize,
    /// Stable id (nbformat 4.5). Null only in files older than 4.5 not yet written by us.
    pub id: Option<String>,
    pub cell_type: String,
}

/// The result of a tool that wrote the notebook.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct WriteResult {
    pub ok: bool,
    pub path: String,
    /// `notebook:///…` resource URI of the file.
    pub uri: String,
    /// The file's revision after the write: pass it as `expected_revision` next time.
    pub revision: String,
    pub cell_count: usize,
    /// The cell this call added or changed (null for notebook-wide changes).
    pub cell: Option<CellSummary>,
}

/// The result of `notebook_revision`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct RevisionResult {
    pub ok: bool,
    pub path: String,
    pub uri: String,
    /// SHA-256 (hex) of the file's bytes.
    pub revision: String,
    /// File size in bytes.
    pub bytes: usize,
}

/// One cell as notebook_read returns it.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct CellView {
    pub index: usize,
    pub id: Option<String>,
    pub cell_type: String,
    /// The cell's text, bounded: `source_omitted_chars` more characters were cut.
    pub source: String,
    pub source_omitted_chars: u64,
    /// Null when it was too large (`metadata_omitted` then true).
    pub metadata: Option<Map<String, Value>>,
    pub metadata_omitted: bool,
    /// Code cells only.
    pub execution_count: Option<u64>,
    /// Saved outputs (bounded), when `include_outputs`; null otherwise.
    pub outputs: Option<Vec<Value>>,
    /// How many saved outputs the cell has.
    pub output_count: usize,
}

/// The result of `notebook_read`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ReadResult {
    pub ok: bool,
    pub path: String,
    pub uri: String,
    pub revision: String,
    pub nbformat: u64,
    pub nbformat_minor: u64,
    /// Notebook metadata (kernelspec, language_info, …); null when too large.
    pub metadata: Option<Map<String, Value>>,
    pub metadata_omitted: bool,
    pub cell_count: usize,
    pub cells: Vec<CellView>,
    /// Where to continue (`start_index`) when not every requested cell fitted; null when done.
    pub next_index: Option<usize>,
}

/// The result of notebook_execute_cell and notebook_execute: execute's fields plus where the
/// outputs went.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct NotebookExecuteResult {
    #[serde(flatten)]
    pub output: ExecutionOutput,
    pub path: String,
    /// The kernel session that ran it (usable as `kernel` with interrupt, runtime_status …).
    pub kernel: String,
    /// True when the notebook's session was started by this call (a fresh namespace).
    pub session_started: bool,
    /// True when the outputs (and the new cell) were written to the file.
    pub saved: bool,
    /// The file's revision after saving (the one before, when nothing was saved).
    pub revision: Option<String>,
    /// The executed (or created) cell.
    pub cell: Option<CellSummary>,
    /// Why the outputs were not saved (e.g. `revision_conflict`: the file changed meanwhile).
    pub save_error: Option<ErrorInfo>,
}

/// The result of `notebook_session`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct SessionResult {
    pub ok: bool,
    pub path: String,
    /// The session id: pass it as `kernel` to interrupt, kernel_restart, runtime_status.
    pub kernel: String,
    /// True when this call started the session.
    pub started: bool,
    /// Other notebooks (workspace-relative) bound to the same session.
    pub shared_with: Vec<String>,
    pub status: RuntimeStatus,
}

/// The result of `notebook_session_close`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct CloseResult {
    pub ok: bool,
    pub path: String,
    /// The session the notebook was bound to (null: it had none).
    pub kernel: Option<String>,
    /// True when that session was stopped (no other notebook used it).
    pub stopped: bool,
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn structured<T: Serialize>(tool: &str, value: &T) -> CallToolResult {
    render::namespace(tool, serde_json::to_value(value).unwrap_or_default(), true)
}

/// An `ipython-mcp-notebook` error as the agent sees it.
pub(crate) fn notebook_error(error: &ipython_mcp_notebook::Error) -> ErrorInfo {
    ErrorInfo::new(
        notebook_code(error),
        render::shorten(&error.to_string(), 1000),
    )
}

/// The stable code of an `ipython-mcp-notebook` error (its hint comes with the code).
fn notebook_code(error: &ipython_mcp_notebook::Error) -> Code {
    use ipython_mcp_notebook::Error;
    match error {
        Error::InvalidPath { .. } => Code::InvalidPath,
        Error::NotFound { .. } => Code::NotebookNotFound,
        Error::AlreadyExists { .. } => Code::NotebookExists,
        Error::RevisionConflict { .. } => Code::RevisionConflict,
        Error::InvalidNotebook { .. } => Code::InvalidNotebook,
        Error::CellNotFound { .. } => Code::CellNotFound,
        Error::InvalidArguments { .. } => Code::InvalidArguments,
        Error::Io { .. } => Code::IoError,
        // A variant added to the notebook crate and not mapped here yet.
        _ => Code::InternalError,
    }
}

fn failed(error: &ipython_mcp_notebook::Error) -> CallToolResult {
    render::request_error(&notebook_error(error))
}

fn invalid(message: impl Into<String>) -> CallToolResult {
    render::request_error(&ErrorInfo::new(Code::InvalidArguments, message))
}

/// Exactly one of `cell_id` and `index`.
fn cell_ref(cell_id: Option<String>, index: Option<usize>) -> Result<CellRef, CallToolResult> {
    match (cell_id, index) {
        (Some(id), None) => Ok(CellRef::Id(id)),
        (None, Some(index)) => Ok(CellRef::Index(index)),
        (Some(_), Some(_)) => Err(invalid("give either cell_id or index, not both")),
        (None, None) => Err(invalid("give the cell's cell_id or its index")),
    }
}

/// Zero or one of `cell_id` and `index`.
fn optional_cell_ref(
    cell_id: Option<String>,
    index: Option<usize>,
) -> Result<Option<CellRef>, CallToolResult> {
    match (&cell_id, index) {
        (None, None) => Ok(None),
        _ => cell_ref(cell_id, index).map(Some),
    }
}

/// `summary` for a file of `format`: a percent script stores no ids, so its cells are known by
/// their positional id (`cell-<index>`), the one the next read gives them.
fn summary_in(format: Format, notebook: &Notebook, index: usize) -> CellSummary {
    let mut cell = summary(notebook, index);
    if format == Format::Percent {
        cell.id = Some(format!("cell-{index}"));
    }
    cell
}

fn summary(notebook: &Notebook, index: usize) -> CellSummary {
    let cell = &notebook.cells()[index];
    CellSummary {
        index,
        id: cell_id(cell).map(str::to_owned),
        cell_type: cell
            .get("cell_type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    }
}

/// `text` cut to `max` characters, and how many were cut.
fn bounded(text: &str, max: usize) -> (String, u64) {
    let cut = ipython_mcp_text::cut(text, max);
    (cut.kept.to_owned(), cut.omitted)
}

/// A JSON object kept only if its compact form fits in `max` characters.
fn bounded_object(value: Option<&Value>, max: usize) -> (Option<Map<String, Value>>, bool) {
    match value.and_then(Value::as_object) {
        None => (Some(Map::new()), false),
        Some(map) => {
            let size = serde_json::to_string(map)
                .map(|text| text.len())
                .unwrap_or(0);
            if size <= max {
                (Some(map.clone()), false)
            } else {
                (None, true)
            }
        }
    }
}

/// A saved output, bounded for the agent: text cut, images described, big JSON omitted.
fn output_view(output: &Value, max_chars: usize, max_traceback: usize) -> Value {
    let mut view = Map::new();
    let kind = output
        .get("output_type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    view.insert("output_type".into(), kind.into());
    match kind {
        "stream" => {
            let (text, omitted) = bounded(&joined_text(output.get("text")), max_chars);
            view.insert(
                "name".into(),
                output.get("name").cloned().unwrap_or(Value::Null),
            );
            view.insert("text".into(), text.into());
            view.insert("text_omitted_chars".into(), omitted.into());
        }
        "error" => {
            for key in ["ename", "evalue"] {
                let text = output.get(key).and_then(Value::as_str).unwrap_or_default();
                view.insert(key.into(), bounded(text, max_chars).0.into());
            }
            let lines: Vec<&str> = output
                .get("traceback")
                .and_then(Value::as_array)
                .map(|lines| lines.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let (traceback, omitted) = bounded(&lines.join("\n"), max_traceback);
            view.insert("traceback".into(), traceback.into());
            view.insert("traceback_omitted_chars".into(), omitted.into());
        }
        _ => {
            if let Some(count) = output.get("execution_count") {
                view.insert("execution_count".into(), count.clone());
            }
            let mut data = Map::new();
            if let Some(bundle) = output.get("data").and_then(Value::as_object) {
                for (mime, value) in bundle {
                    let described = if mime.starts_with("image/") && mime != "image/svg+xml" {
                        let size = joined_text(Some(value)).len();
                        Value::String(format!(
                            "<{mime} image, {size} base64 characters, saved in the file>"
                        ))
                    } else if mime == "application/json" || mime.ends_with("+json") {
                        let text = value.to_string();
                        if text.len() <= max_chars {
                            value.clone()
                        } else {
                            Value::String(format!("<{mime}, {} characters, omitted>", text.len()))
                        }
                    } else {
                        let (text, omitted) = bounded(&joined_text(Some(value)), max_chars);
                        if omitted > 0 {
                            Value::String(format!("{text}… [{omitted} more characters]"))
                        } else {
                            Value::String(text)
                        }
                    };
                    data.insert(mime.clone(), described);
                }
            }
            view.insert("data".into(), Value::Object(data));
        }
    }
    Value::Object(view)
}

/// What an execution saves in the notebook, as Jupyter would: streams, displays, the result
/// and the error. Streams longer than what the agent got have been filled in from the spool
/// (`with_full_streams`); what is still missing is named in a last line.
fn saved_outputs(output: &ExecutionOutput) -> Vec<Output> {
    let mut outputs = Vec::new();
    for (name, text, omitted) in [
        ("stdout", &output.stdout, output.stdout_omitted_chars),
        ("stderr", &output.stderr, output.stderr_omitted_chars),
    ] {
        if text.is_empty() && omitted == 0 {
            continue;
        }
        let mut text = text.clone();
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
        let (text, omitted) = match stream {
            StreamName::Stdout => (&mut full.stdout, &mut full.stdout_omitted_chars),
            StreamName::Stderr => (&mut full.stderr, &mut full.stderr_omitted_chars),
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
        let Some(Ok(page)) = session.page(Some(&output.execution_id), request).await else {
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
    }
    full
}

/// What an execution saves in its cell: everything the kernel produced, from the session's
/// output log, within `MAX_SAVED_CELL_BYTES` (a last stream output names what did not fit);
/// without a log (the spool is off or was evicted), the bounded view with full streams.
async fn outputs_to_save(session: &SessionHandle, output: &ExecutionOutput) -> Vec<Output> {
    let Some(saved) = session
        .saved_outputs(
            &output.execution_id,
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
    if saved.omitted_outputs > 0 || saved.spool_incomplete || spool_dropped > 0 {
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
            note.push_str(" the kernel produced more than the output spool keeps per execution (IPYTHON_MCP_MAX_SPOOL_EXECUTION_BYTES);");
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

impl IpythonMcp {
    /// The session a tool names by `kernel` id or by `notebook` path (at most one of them;
    /// neither: `default`).
    pub(crate) async fn session_for_notebook(
        &self,
        kernel: Option<&str>,
        notebook: Option<&str>,
    ) -> Result<SessionHandle, CallToolResult> {
        let Some(notebook) = notebook else {
            return self.session_for(kernel);
        };
        if kernel.is_some() {
            return Err(invalid("give either kernel or notebook, not both"));
        }
        let (_workspace, path) = self.notebook_path(notebook).await?;
        match self.sessions().notebook_session(&path.absolute) {
            Some((_, handle)) => Ok(handle),
            None => Err(render::request_error(
                &ErrorInfo::new(
                    Code::InvalidArguments,
                    format!("notebook {:?} has no kernel session", path.relative),
                )
                .with_hint(
                    "notebook_execute, notebook_execute_cell or notebook_session starts one",
                ),
            )),
        }
    }

    fn workspace(&self) -> Result<Arc<Workspace>, CallToolResult> {
        self.notebook_state()
            .workspace()
            .cloned()
            .map_err(|error| render::request_error(&error))
    }

    /// The workspace and the checked path, or the result refusing the call. Resolving reads
    /// the file system (canonical directories, symlinks): on the blocking pool.
    async fn notebook_path(
        &self,
        path: &str,
    ) -> Result<(Arc<Workspace>, NotebookPath), CallToolResult> {
        let workspace = self.workspace()?;
        let (resolver, path) = (Arc::clone(&workspace), path.to_owned());
        let resolved = Self::blocking(move || resolver.resolve(&path)).await?;
        Ok((workspace, resolved))
    }

    /// Runs file work on the blocking pool.
    async fn blocking<T: Send + 'static>(
        work: impl FnOnce() -> Result<T, ipython_mcp_notebook::Error> + Send + 'static,
    ) -> Result<T, CallToolResult> {
        Self::blocking_info(work)
            .await
            .map_err(|error| render::request_error(&error))
    }

    /// Like `blocking`, with the error as the agent would see it.
    async fn blocking_info<T: Send + 'static>(
        work: impl FnOnce() -> Result<T, ipython_mcp_notebook::Error> + Send + 'static,
    ) -> Result<T, ErrorInfo> {
        match tokio::task::spawn_blocking(work).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(notebook_error(&error)),
            Err(_) => Err(ErrorInfo::new(
                Code::InternalError,
                "the file operation failed",
            )),
        }
    }

    /// A read-modify-write of one notebook, answered as a `WriteResult`.
    async fn edit(
        &self,
        tool: &'static str,
        path: String,
        expected_revision: Option<String>,
        change: impl FnOnce(&mut Notebook) -> Result<Option<usize>, ipython_mcp_notebook::Error>
            + Send
            + 'static,
    ) -> CallToolResult {
        let (workspace, path) = match self.notebook_path(&path).await {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        let relative = path.relative.clone();
        let format = path.format;
        let edited = Self::blocking(move || {
            workspace.update(&path, expected_revision.as_deref(), |notebook| {
                let index = change(notebook)?;
                Ok((
                    index.map(|index| summary_in(format, notebook, index)),
                    notebook.cells().len(),
                ))
            })
        })
        .await;
        match edited {
            Ok(((cell, cell_count), revision)) => {
                tracing::info!(tool, "tool call");
                structured(
                    tool,
                    &WriteResult {
                        ok: true,
                        uri: uri_for_path(&relative),
                        path: relative,
                        revision,
                        cell_count,
                        cell,
                    },
                )
            }
            Err(refused) => refused,
        }
    }

    fn check_timeout(&self, timeout: Option<f64>) -> Result<Option<Duration>, CallToolResult> {
        let max = self.config().timeouts.max_operation;
        match timeout {
            None => Ok(None),
            Some(seconds)
                if seconds.is_finite() && seconds > 0.0 && seconds <= max.as_secs_f64() =>
            {
                Ok(Some(Duration::from_secs_f64(seconds)))
            }
            Some(seconds) => Err(invalid(format!(
                "timeout_seconds must be a positive number of seconds up to {}, got {seconds}",
                max.as_secs_f64()
            ))),
        }
    }

    /// The session of a notebook: its bound one, or a new one started from its kernelspec.
    /// `python3` (and a notebook without a kernelspec) runs on the server's own Python, like
    /// the default session; any other name must be a registered kernelspec.
    async fn session_of(
        &self,
        path: &NotebookPath,
        kernel_name: Option<String>,
    ) -> Result<(String, SessionHandle, bool), CallToolResult> {
        let sessions = self.sessions();
        if let Some((id, handle)) = sessions.notebook_session(&path.absolute) {
            return Ok((id, handle, false));
        }
        let name = kernel_name.unwrap_or_else(|| "python3".to_owned());
        let sessions_for_spec = sessions.clone();
        let spec_name = name.clone();
        let spec = tokio::task::spawn_blocking(move || {
            if spec_name == "python3" {
                // The generic name: the server's own Python, found exactly as for `default`.
                Ok(StartSpec::Default)
            } else {
                sessions_for_spec.parse_spec(&spec_name)
            }
        })
        .await
        .unwrap_or_else(|_| {
            Err(Box::new(ErrorInfo::new(
                Code::InternalError,
                "kernelspec lookup failed",
            )))
        })
        .map_err(|error| {
            render::request_error(&ErrorInfo {
                message: format!(
                    "cannot start the notebook's kernel {:?}: {}",
                    render::shorten(&name, 64),
                    error.message
                ),
                ..*error
            })
        })?;
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
            // relative paths mean what they mean beside the file.
            match sessions.start(
                &format!("notebook {}", path.relative),
                spec.clone(),
                Some(&id),
                path.absolute.parent().map(std::path::Path::to_owned),
            ) {
                Ok((id, handle)) => {
                    sessions.bind_notebook(path.absolute.clone(), id.clone());
                    tracing::info!(kernel = %id, "notebook session started");
                    return Ok((id, handle, true));
                }
                Err(error @ StartError::IdTaken { .. }) => {
                    // A concurrent first run of the same notebook may have just started and
                    // bound its session under this id: use that one.
                    if let Some((id, handle)) = sessions.notebook_session(&path.absolute) {
                        return Ok((id, handle, false));
                    }
                    last_error = Some(error);
                }
                Err(error) => return Err(render::request_error(&error.into())),
            }
        }
        Err(render::request_error(&last_error.map_or_else(
            || ErrorInfo::new(Code::InternalError, "no free session id"),
            ErrorInfo::from,
        )))
    }

    /// Runs code for a notebook and saves the outcome with `save` (given the file's revision
    /// from before the run, so a change made meanwhile is a conflict).
    #[allow(clippy::too_many_arguments)]
    async fn run_and_save(
        &self,
        tool: &'static str,
        path: NotebookPath,
        workspace: Arc<Workspace>,
        revision: String,
        kernel_name: Option<String>,
        code: String,
        timeout: Option<Duration>,
        context: &RequestContext<RoleServer>,
        save: Option<SaveCell>,
    ) -> CallToolResult {
        let (kernel, session, started) = match self.session_of(&path, kernel_name).await {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        let args = ExecuteArgs {
            code,
            timeout,
            request_id: render::request_id(&context.id),
            cancel: context.ct.clone(),
            progress: None,
        };
        let began = std::time::Instant::now();
        let mut output = session.execute(args).await;
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
            let outputs = outputs_to_save(&session, &output).await;
            let execution_count = output.execution_count;
            let format = path.format;
            let saved = Self::blocking_info(move || {
                workspace.update(&path, Some(&revision), |notebook| {
                    let index = save(notebook, execution_count, &outputs)?;
                    Ok(summary_in(format, notebook, index))
                })
            })
            .await;
            match saved {
                Ok((cell, new_revision)) => {
                    result.saved = true;
                    result.revision = Some(new_revision);
                    result.cell = Some(cell);
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
        let mut extra = Map::new();
        let full = serde_json::to_value(&result).unwrap_or_default();
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
        let mut text = String::new();
        match (&result.save_error, &result.cell) {
            (Some(error), _) => text.push_str(&format!(
                "\n[not saved: {} — {}]",
                error.code, error.message
            )),
            (None, Some(cell)) => text.push_str(&format!(
                "\n[saved in cell {} (id {}); revision {}]",
                cell.index,
                cell.id.as_deref().unwrap_or("-"),
                result.revision.as_deref().unwrap_or("-")
            )),
            (None, None) => {}
        }
        render::execution_with(&output, extra, text)
    }
}

// ---------------------------------------------------------------------------------------------
// Tools

#[tool_router(router = notebooks_router, vis = "pub(crate)")]
impl IpythonMcp {
    #[tool(
        name = "notebook_create",
        description = "Create a Jupyter notebook (.ipynb, nbformat 4.5; or a jupytext py:percent script when the path ends in .py: sources and metadata, no outputs) at a path relative to the workspace root, optionally with initial cells, and return its revision. The kernel it records (`kernel_name`, default python3) is the kernel its cells run in. Fails with notebook_exists if the file exists, unless `overwrite` (then `expected_revision` guards the replaced file). Use notebook_insert_cell to add cells to an existing notebook.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Create a notebook", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn notebook_create(
        &self,
        Parameters(params): Parameters<CreateParams>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let (workspace, path) = match self.notebook_path(&params.path).await {
            Ok(found) => found,
            Err(refused) => return Ok(refused),
        };
        let kernel_name = params.kernel_name.unwrap_or_else(|| "python3".to_owned());
        let display_name = params.display_name.unwrap_or_else(|| {
            if kernel_name == "python3" {
                "Python 3".to_owned()
            } else {
                kernel_name.clone()
            }
        });
        let language = params.language.unwrap_or_else(|| "python".to_owned());
        let mut notebook = Notebook::new(&kernel_name, &display_name, &language);
        for cell in params.cells {
            if let Err(error) = notebook.insert(
                None,
                NewCell {
                    cell_type: cell.cell_type.unwrap_or(CellType::Code),
                    source: cell.source,
                    metadata: cell.metadata.unwrap_or_default(),
                },
            ) {
                return Ok(failed(&error));
            }
        }
        let cell_count = notebook.cells().len();
        let relative = path.relative.clone();
        let overwrite = params.overwrite;
        let expected = params.expected_revision;
        let created = Self::blocking(move || {
            workspace.create(&path, &notebook, overwrite, expected.as_deref())
        })
        .await;
        Ok(match created {
            Ok(revision) => {
                tracing::info!(tool = "notebook_create", "tool call");
                structured(
                    "notebook_create",
                    &WriteResult {
                        ok: true,
                        uri: uri_for_path(&relative),
                        path: relative,
                        revision,
                        cell_count,
                        cell: None,
                    },
                )
            }
            Err(refused) => refused,
        })
    }

    #[tool(
        name = "notebook_read",
        description = "Read a notebook as structured data: its revision (pass it as expected_revision to later edits), metadata (kernelspec …), and its cells with index, stable id, type, source, metadata and execution count; saved outputs too with include_outputs (text bounded, images described rather than returned). Give cell_id or index to read one cell; otherwise cells from start_index, at most max_cells and bounded in characters — continue from `next_index`. Read-only.",
        output_schema = schema_for_output::<ReadResult>(),
        annotations(title = "Read a notebook", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_read(
        &self,
        Parameters(params): Parameters<ReadParams>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let only = match optional_cell_ref(params.cell_id, params.index) {
            Ok(only) => only,
            Err(refused) => return Ok(refused),
        };
        let max_cells = params.max_cells.unwrap_or(DEFAULT_READ_CELLS);
        if max_cells == 0 || max_cells > MAX_READ_CELLS {
            return Ok(invalid(format!(
                "max_cells must be between 1 and {MAX_READ_CELLS}, got {max_cells}"
            )));
        }
        let (workspace, path) = match self.notebook_path(&params.path).await {
            Ok(found) => found,
            Err(refused) => return Ok(refused),
        };
        let relative = path.relative.clone();
        let loaded = match Self::blocking(move || workspace.read(&path)).await {
            Ok(loaded) => loaded,
            Err(refused) => return Ok(refused),
        };
        let notebook = &loaded.notebook;
        let limits = self.config().limits;
        let max_chars = limits.max_text_chars;
        let (indices, start) = match &only {
            Some(reference) => match notebook.locate(reference) {
                Ok(index) => (index..index + 1, index),
                Err(error) => return Ok(failed(&error)),
            },
            None => {
                let start = params.start_index.unwrap_or(0).min(notebook.cells().len());
                let end = (start + max_cells).min(notebook.cells().len());
                (start..end, start)
            }
        };
        // The whole answer stays within a few times max_text_chars of text.
        let budget = max_chars.saturating_mul(4);
        let mut used = 0usize;
        let mut cells = Vec::new();
        let mut next_index = None;
        for index in indices.clone() {
            if used >= budget && index > start {
                next_index = Some(index);
                break;
            }
            let cell = &notebook.cells()[index];
            let (source, source_omitted_chars) =
                bounded(&joined_text(cell.get("source")), max_chars);
            let (metadata, metadata_omitted) = bounded_object(cell.get("metadata"), max_chars);
            let saved = cell.get("outputs").and_then(Value::as_array);
            let outputs = params.include_outputs.then(|| {
                saved
                    .map(|outputs| {
                        outputs
                            .iter()
                            .map(|output| {
                                output_view(
                                    output,
                                    limits.max_repr_chars,
                                    limits.max_traceback_chars,
                                )
                            })
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default()
            });
            used += source.len()
                + metadata.as_ref().map_or(0, |metadata| {
                    Value::Object(metadata.clone()).to_string().len()
                })
                + outputs
                    .as_ref()
                    .map(|outputs| outputs.iter().map(|output| output.to_string().len()).sum())
                    .unwrap_or(0);
            cells.push(CellView {
                index,
                id: cell_id(cell).map(str::to_owned),
                cell_type: cell
                    .get("cell_type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                source,
                source_omitted_chars,
                metadata,
                metadata_omitted,
                execution_count: cell.get("execution_count").and_then(Value::as_u64),
                output_count: saved.map_or(0, Vec::len),
                outputs,
            });
        }
        if only.is_none() && next_index.is_none() && indices.end < notebook.cells().len() {
            next_index = Some(indices.end);
        }
        let (metadata, metadata_omitted) =
            bounded_object(Some(&Value::Object(notebook.metadata().clone())), max_chars);
        tracing::info!(tool = "notebook_read", cells = cells.len(), "tool call");
        Ok(structured(
            "notebook_read",
            &ReadResult {
                ok: true,
                uri: uri_for_path(&relative),
                path: relative,
                revision: loaded.revision,
                nbformat: 4,
                nbformat_minor: notebook.nbformat_minor(),
                metadata,
                metadata_omitted,
                cell_count: notebook.cells().len(),
                cells,
                next_index,
            },
        ))
    }

    #[tool(
        name = "notebook_revision",
        description = "Return a notebook's current revision (SHA-256 of the file's bytes) without reading its cells: cheap, to check whether it changed since you read it or to get an expected_revision for an edit. Read-only; works on any file size, and on a file another program is editing.",
        output_schema = schema_for_output::<RevisionResult>(),
        annotations(title = "Notebook revision", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_revision(
        &self,
        Parameters(params): Parameters<PathParams>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let (_workspace, path) = match self.notebook_path(&params.path).await {
            Ok(found) => found,
            Err(refused) => return Ok(refused),
        };
        let relative = path.relative.clone();
        let read = Self::blocking(move || {
            std::fs::read(&path.absolute).map_err(|error| {
                if error.kind() == std::io::ErrorKind::NotFound {
                    ipython_mcp_notebook::Error::NotFound {
                        path: path.relative.clone(),
                    }
                } else {
                    ipython_mcp_notebook::Error::Io {
                        path: path.relative.clone(),
                        message: error.to_string(),
                    }
                }
            })
        })
        .await;
        Ok(match read {
            Ok(bytes) => structured(
                "notebook_revision",
                &RevisionResult {
                    ok: true,
                    uri: uri_for_path(&relative),
                    path: relative,
                    revision: ipython_mcp_notebook::revision_of(&bytes),
                    bytes: bytes.len(),
                },
            ),
            Err(refused) => refused,
        })
    }

    #[tool(
        name = "notebook_insert_cell",
        description = "Add a cell (code by default, or markdown/raw) to a notebook: at `index` (0-based; later cells move down) or appended when index is omitted. The new cell gets a stable id, returned with the new revision. Does not run it: notebook_execute_cell runs an existing cell, notebook_execute runs code and saves it as a new cell in one step.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Insert a cell", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn notebook_insert_cell(
        &self,
        Parameters(params): Parameters<InsertParams>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let cell = NewCell {
            cell_type: params.cell_type.unwrap_or(CellType::Code),
            source: params.source,
            metadata: params.metadata.unwrap_or_default(),
        };
        let index = params.index;
        Ok(self
            .edit(
                "notebook_insert_cell",
                params.path,
                params.expected_revision,
                move |notebook| notebook.insert(index, cell).map(|(index, _)| Some(index)),
            )
            .await)
    }

    #[tool(
        name = "notebook_update_cell",
        description = "Change one cell (by cell_id or index): replace its source, its metadata and/or its type. Its id stays the same; outputs of a code cell are kept (clear them with notebook_clear_outputs, or re-run with notebook_execute_cell). Returns the new revision.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Update a cell", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_update_cell(
        &self,
        Parameters(params): Parameters<UpdateParams>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let reference = match cell_ref(params.cell_id, params.index) {
            Ok(reference) => reference,
            Err(refused) => return Ok(refused),
        };
        if params.source.is_none() && params.metadata.is_none() && params.cell_type.is_none() {
            return Ok(invalid("give source, metadata and/or cell_type to change"));
        }
        let (source, metadata, cell_type) = (params.source, params.metadata, params.cell_type);
        Ok(self
            .edit(
                "notebook_update_cell",
                params.path,
                params.expected_revision,
                move |notebook| {
                    let index = notebook.locate(&reference)?;
                    notebook.update(index, source, metadata, cell_type);
                    Ok(Some(index))
                },
            )
            .await)
    }

    #[tool(
        name = "notebook_delete_cell",
        description = "Delete one cell (by cell_id or index) from a notebook; later cells move up. Returns the new revision and the deleted cell's id and type. Cannot be undone except by re-inserting the cell (which gets a new id). To empty a cell's outputs but keep it, use notebook_clear_outputs instead.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Delete a cell", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn notebook_delete_cell(
        &self,
        Parameters(params): Parameters<CellParams>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let reference = match cell_ref(params.cell_id, params.index) {
            Ok(reference) => reference,
            Err(refused) => return Ok(refused),
        };
        let (workspace, path) = match self.notebook_path(&params.path).await {
            Ok(found) => found,
            Err(refused) => return Ok(refused),
        };
        let relative = path.relative.clone();
        let format = path.format;
        let expected = params.expected_revision;
        let deleted = Self::blocking(move || {
            workspace.update(&path, expected.as_deref(), |notebook| {
                let index = notebook.locate(&reference)?;
                let cell = summary_in(format, notebook, index);
                notebook.delete(index);
                Ok((cell, notebook.cells().len()))
            })
        })
        .await;
        Ok(match deleted {
            Ok(((cell, cell_count), revision)) => structured(
                "notebook_delete_cell",
                &WriteResult {
                    ok: true,
                    uri: uri_for_path(&relative),
                    path: relative,
                    revision,
                    cell_count,
                    cell: Some(cell),
                },
            ),
            Err(refused) => refused,
        })
    }

    #[tool(
        name = "notebook_move_cell",
        description = "Move one cell (by cell_id or index) so that it ends up at `to_index`; its id, source and outputs go with it, and the cells in between shift by one. Use it to reorder a notebook without deleting and re-inserting cells (which would give them new ids). Returns the new revision and the cell's new index.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Move a cell", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_move_cell(
        &self,
        Parameters(params): Parameters<MoveParams>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let reference = match cell_ref(params.cell_id, params.index) {
            Ok(reference) => reference,
            Err(refused) => return Ok(refused),
        };
        let to = params.to_index;
        Ok(self
            .edit(
                "notebook_move_cell",
                params.path,
                params.expected_revision,
                move |notebook| {
                    let from = notebook.locate(&reference)?;
                    notebook.move_cell(from, to)?;
                    Ok(Some(to))
                },
            )
            .await)
    }

    #[tool(
        name = "notebook_clear_outputs",
        description = "Clear saved outputs and execution counts: of one code cell (cell_id or index), or of every code cell when neither is given. Sources, ids and metadata are untouched, and the kernel is not involved (its variables stay). Use it before sharing or committing a notebook, or to drop stale results. Returns the new revision.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Clear outputs", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_clear_outputs(
        &self,
        Parameters(params): Parameters<ClearParams>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let reference = match optional_cell_ref(params.cell_id, params.index) {
            Ok(reference) => reference,
            Err(refused) => return Ok(refused),
        };
        Ok(self
            .edit(
                "notebook_clear_outputs",
                params.path,
                params.expected_revision,
                move |notebook| match reference {
                    Some(reference) => {
                        let index = notebook.locate(&reference)?;
                        notebook.clear_outputs(index);
                        Ok(Some(index))
                    }
                    None => {
                        for index in 0..notebook.cells().len() {
                            notebook.clear_outputs(index);
                        }
                        Ok(None)
                    }
                },
            )
            .await)
    }

    #[tool(
        name = "notebook_set_metadata",
        description = "Replace the metadata of a notebook, or of one cell when cell_id or index is given (tags, collapsed, custom keys …). The object you send replaces the old one entirely: read it with notebook_read, change it, send it back. Changing metadata.kernelspec changes the kernel used by a notebook session started afterwards. Returns the new revision.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Set metadata", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_set_metadata(
        &self,
        Parameters(params): Parameters<MetadataParams>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let reference = match optional_cell_ref(params.cell_id, params.index) {
            Ok(reference) => reference,
            Err(refused) => return Ok(refused),
        };
        let metadata = params.metadata;
        Ok(self
            .edit(
                "notebook_set_metadata",
                params.path,
                params.expected_revision,
                move |notebook| match reference {
                    Some(reference) => {
                        let index = notebook.locate(&reference)?;
                        notebook.set_cell_metadata(index, metadata);
                        Ok(Some(index))
                    }
                    None => {
                        notebook.set_metadata(metadata);
                        Ok(None)
                    }
                },
            )
            .await)
    }

    #[tool(
        name = "notebook_execute_cell",
        description = "Run an existing code cell (by cell_id or index) in the notebook's kernel session and save its outputs in the file like Jupyter does (outputs replaced, execution_count set; the cell keeps its id). Returns the same fields as execute (bounded output, images as image content) plus `saved`, the new `revision` and the session id (`kernel`). The notebook's session is started on first use from its metadata.kernelspec and reused after, so state persists between its cells. If the file changed while the cell ran, the outputs are not saved (`save_error`: revision_conflict) but still returned.",
        output_schema = schema_for_output::<NotebookExecuteResult>(),
        annotations(title = "Execute a notebook cell", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true)
    )]
    async fn notebook_execute_cell(
        &self,
        Parameters(params): Parameters<ExecuteCellParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let reference = match cell_ref(params.cell_id, params.index) {
            Ok(reference) => reference,
            Err(refused) => return Ok(refused),
        };
        let timeout = match self.check_timeout(params.timeout_seconds) {
            Ok(timeout) => timeout,
            Err(refused) => return Ok(refused),
        };
        let (workspace, path) = match self.notebook_path(&params.path).await {
            Ok(found) => found,
            Err(refused) => return Ok(refused),
        };
        let reader = Arc::clone(&workspace);
        let read_path = path.clone();
        let loaded = match Self::blocking(move || reader.read(&read_path)).await {
            Ok(loaded) => loaded,
            Err(refused) => return Ok(refused),
        };
        if let Some(expected) = &params.expected_revision {
            if !expected.eq_ignore_ascii_case(&loaded.revision) {
                return Ok(failed(&ipython_mcp_notebook::Error::RevisionConflict {
                    path: path.relative.clone(),
                    expected: expected.clone(),
                    actual: loaded.revision,
                }));
            }
        }
        let index = match loaded.notebook.locate(&reference) {
            Ok(index) => index,
            Err(error) => return Ok(failed(&error)),
        };
        let cell = &loaded.notebook.cells()[index];
        if cell.get("cell_type").and_then(Value::as_str) != Some("code") {
            return Ok(invalid(format!(
                "cell {index} is a {} cell; only code cells run",
                cell.get("cell_type").and_then(Value::as_str).unwrap_or("?")
            )));
        }
        let code = joined_text(cell.get("source"));
        // Found again by id after the run when it has one (ids are assigned on the first write
        // of an older notebook; its index is then still valid, the revision being unchanged).
        let target = match cell_id(cell) {
            Some(id) => CellRef::Id(id.to_owned()),
            None => CellRef::Index(index),
        };
        let kernel_name = loaded.notebook.kernel_name().map(str::to_owned);
        let save: SaveCell = Box::new(move |notebook, execution_count, outputs| {
            let index = notebook.locate(&target)?;
            notebook.set_outputs(index, execution_count, outputs);
            Ok(index)
        });
        Ok(self
            .run_and_save(
                "notebook_execute_cell",
                path,
                workspace,
                loaded.revision,
                kernel_name,
                code,
                timeout,
                &context,
                Some(save),
            )
            .await)
    }

    #[tool(
        name = "notebook_execute",
        description = "Run code in a notebook's kernel session and save it as a new code cell with its outputs (appended, or at `index`), in one step: the way to grow a notebook while exploring. Returns the same fields as execute plus `saved`, the new `revision`, the new cell's id and index, and the session id. persist=false runs the code in the notebook's session without touching the file (for quick checks). Use notebook_execute_cell to re-run a cell that is already there; use execute for work unrelated to a notebook.",
        output_schema = schema_for_output::<NotebookExecuteResult>(),
        annotations(title = "Execute code in a notebook", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true)
    )]
    async fn notebook_execute(
        &self,
        Parameters(params): Parameters<NotebookExecuteParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        if params.code.len() > MAX_CODE_BYTES {
            return Ok(invalid(format!(
                "code is {} bytes; the limit is {MAX_CODE_BYTES} bytes",
                params.code.len()
            )));
        }
        let timeout = match self.check_timeout(params.timeout_seconds) {
            Ok(timeout) => timeout,
            Err(refused) => return Ok(refused),
        };
        let (workspace, path) = match self.notebook_path(&params.path).await {
            Ok(found) => found,
            Err(refused) => return Ok(refused),
        };
        let reader = Arc::clone(&workspace);
        let read_path = path.clone();
        let loaded = match Self::blocking(move || reader.read(&read_path)).await {
            Ok(loaded) => loaded,
            Err(refused) => return Ok(refused),
        };
        if let Some(expected) = &params.expected_revision {
            if !expected.eq_ignore_ascii_case(&loaded.revision) {
                return Ok(failed(&ipython_mcp_notebook::Error::RevisionConflict {
                    path: path.relative.clone(),
                    expected: expected.clone(),
                    actual: loaded.revision,
                }));
            }
        }
        let length = loaded.notebook.cells().len();
        if let Some(index) = params.index.filter(|index| *index > length) {
            return Ok(invalid(format!(
                "index {index} is past the end (the notebook has {length} cells)"
            )));
        }
        let kernel_name = loaded.notebook.kernel_name().map(str::to_owned);
        let save = params.persist.then(|| {
            let code = params.code.clone();
            let position = params.index;
            let save: SaveCell = Box::new(move |notebook, execution_count, outputs| {
                let (index, _) = notebook.insert(
                    position,
                    NewCell {
                        cell_type: CellType::Code,
                        source: code,
                        metadata: Map::new(),
                    },
                )?;
                notebook.set_outputs(index, execution_count, outputs);
                Ok(index)
            });
            save
        });
        Ok(self
            .run_and_save(
                "notebook_execute",
                path,
                workspace,
                loaded.revision,
                kernel_name,
                params.code,
                timeout,
                &context,
                save,
            )
            .await)
    }

    #[tool(
        name = "notebook_session",
        description = "Get the kernel session that runs a notebook's cells, starting it if it has none (from the notebook's metadata.kernelspec: python3 runs on the server's Python, other names must be registered kernelspecs). Each notebook gets its own session by default, reused by every notebook_execute(_cell). Pass `kernel` to bind the notebook to an existing session instead, e.g. another notebook's, to share variables. The returned `kernel` id works with interrupt, kernel_restart and runtime_status; notebook_session_close releases it.",
        output_schema = schema_for_output::<SessionResult>(),
        annotations(title = "Notebook session", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_session(
        &self,
        Parameters(params): Parameters<SessionParams>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let (workspace, path) = match self.notebook_path(&params.path).await {
            Ok(found) => found,
            Err(refused) => return Ok(refused),
        };
        let (kernel, handle, started) = match params.kernel {
            Some(kernel) => match self.sessions().get(Some(&kernel)) {
                Ok(handle) => {
                    self.sessions()
                        .bind_notebook(path.absolute.clone(), kernel.clone());
                    (kernel, handle, false)
                }
                Err(error) => return Ok(render::request_error(&error)),
            },
            None => {
                let reader = Arc::clone(&workspace);
                let read_path = path.clone();
                let kernel_name = match Self::blocking(move || reader.read(&read_path)).await {
                    Ok(loaded) => loaded.notebook.kernel_name().map(str::to_owned),
                    Err(refused) => return Ok(refused),
                };
                match self.session_of(&path, kernel_name).await {
                    Ok(found) => found,
                    Err(refused) => return Ok(refused),
                }
            }
        };
        let root = workspace.root().to_owned();
        let shared_with = self
            .sessions()
            .notebooks_of(&kernel)
            .into_iter()
            .filter(|other| *other != path.absolute)
            .map(|other| {
                other
                    .strip_prefix(&root)
                    .map(|relative| relative.display().to_string())
                    .unwrap_or_else(|_| other.display().to_string())
            })
            .collect();
        tracing::info!(tool = "notebook_session", kernel = %kernel, started, "tool call");
        Ok(structured(
            "notebook_session",
            &SessionResult {
                ok: true,
                path: path.relative,
                kernel,
                started,
                shared_with,
                status: handle.status(),
            },
        ))
    }

    #[tool(
        name = "notebook_session_close",
        description = "Release a notebook's kernel session: the notebook forgets it, and the session is stopped (its variables gone) unless another notebook still uses it or it is `default`. The next notebook_execute starts a fresh one. The file is not touched.",
        output_schema = schema_for_output::<CloseResult>(),
        annotations(title = "Close a notebook session", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_session_close(
        &self,
        Parameters(params): Parameters<PathParams>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let (_workspace, path) = match self.notebook_path(&params.path).await {
            Ok(found) => found,
            Err(refused) => return Ok(refused),
        };
        let released = self.sessions().unbind_notebook(&path.absolute);
        let mut stopped = false;
        if let Some((kernel, others)) = &released {
            if others.is_empty() && kernel != crate::sessions::Sessions::DEFAULT {
                stopped = self.sessions().stop(kernel).await.is_ok();
                if stopped {
                    self.sessions()
                        .catalog()
                        .drop_session(kernel, self.peers())
                        .await;
                }
            }
        }
        tracing::info!(tool = "notebook_session_close", stopped, "tool call");
        Ok(structured(
            "notebook_session_close",
            &CloseResult {
                ok: true,
                path: path.relative,
                kernel: released.map(|(kernel, _)| kernel),
                stopped,
            },
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Resources

/// The capabilities resource (effective limits, formats, kernels).
pub(crate) const CAPABILITIES_URI: &str = "ipython-mcp://capabilities";
/// Registered kernelspecs.
pub(crate) const KERNELSPECS_URI: &str = "ipython-mcp://kernelspecs";
/// Running kernel sessions and the notebooks bound to them.
pub(crate) const KERNELS_URI: &str = "ipython-mcp://kernels";
/// Largest notebook served as a resource.
const MAX_RESOURCE_BYTES: usize = 64 * 1024 * 1024;
/// Notebooks listed by resources/list (a bounded scan of the workspace).
const MAX_LISTED_NOTEBOOKS: usize = 200;
const MAX_SCAN_DEPTH: usize = 4;
const MAX_SCANNED_ENTRIES: usize = 10_000;

/// Workspace-relative paths of `.ipynb` files: hidden directories skipped, symlinks not
/// followed, bounded in depth, entries and results.
fn scan_notebooks(root: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![(root.to_owned(), 0usize)];
    let mut scanned = 0usize;
    while let Some((directory, depth)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&directory) else {
            continue;
        };
        for entry in entries.flatten() {
            scanned += 1;
            if scanned > MAX_SCANNED_ENTRIES || found.len() >= MAX_LISTED_NOTEBOOKS {
                found.sort();
                return found;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() && depth + 1 < MAX_SCAN_DEPTH {
                pending.push((path, depth + 1));
            } else if kind.is_file() && name.ends_with(".ipynb") {
                if let Ok(relative) = path.strip_prefix(root) {
                    found.push(relative.to_string_lossy().into_owned());
                }
            }
        }
    }
    found.sort();
    found
}

impl IpythonMcp {
    pub(crate) async fn notebook_resources(&self) -> Vec<rmcp::model::Resource> {
        use rmcp::model::Resource;
        let mut resources = vec![
            Resource::new(CAPABILITIES_URI, "capabilities")
                .with_description("Effective limits, timeouts, notebook formats and kernelspecs of this server")
                .with_mime_type("application/json"),
            Resource::new(KERNELSPECS_URI, "kernelspecs")
                .with_description("Registered Jupyter kernelspecs (names usable in a notebook's metadata.kernelspec and kernel_start)")
                .with_mime_type("application/json"),
            Resource::new(KERNELS_URI, "kernels")
                .with_description("Running kernel sessions and the notebooks bound to them")
                .with_mime_type("application/json"),
        ];
        if let Ok(workspace) = self.notebook_state().workspace() {
            let root = workspace.root().to_owned();
            let notebooks = tokio::task::spawn_blocking(move || scan_notebooks(&root))
                .await
                .unwrap_or_default();
            resources.extend(notebooks.into_iter().map(|relative| {
                Resource::new(uri_for_path(&relative), relative)
                    .with_mime_type("application/x-ipynb+json")
            }));
        }
        resources
    }

    pub(crate) fn notebook_resource_templates(&self) -> Vec<rmcp::model::ResourceTemplate> {
        vec![rmcp::model::ResourceTemplate::new("notebook:///{+path}", "notebook")
            .with_description("A notebook file by its workspace-relative path, RFC 3986 percent-encoded per segment (spaces as %20, non-ASCII as UTF-8 escapes)")
            .with_mime_type("application/x-ipynb+json")]
    }

    /// The kernelspecs as JSON, sorted by name.
    async fn kernelspecs_json(&self) -> Value {
        let python = self.sessions().default_python();
        let specs = tokio::task::spawn_blocking(move || {
            let dirs = ipython_mcp_kernel::kernelspec::data_dirs(python.as_deref());
            ipython_mcp_kernel::kernelspec::discover(&dirs)
        })
        .await
        .unwrap_or_default();
        let mut specs: Vec<Value> = specs
            .into_iter()
            .map(|spec| {
                serde_json::json!({
                    "name": spec.name,
                    "display_name": spec.display_name,
                    "language": spec.language,
                })
            })
            .collect();
        specs.sort_by(|left, right| left["name"].as_str().cmp(&right["name"].as_str()));
        Value::Array(specs)
    }

    fn kernels_json(&self) -> Value {
        let root = self
            .notebook_state()
            .workspace()
            .ok()
            .map(|workspace| workspace.root().to_owned());
        let kernels: Vec<Value> = self
            .sessions()
            .all()
            .into_iter()
            .map(|(kernel, spec, handle, idle)| {
                let status = handle.status();
                let notebooks: Vec<String> = self
                    .sessions()
                    .notebooks_of(&kernel)
                    .into_iter()
                    .map(|path| match &root {
                        Some(root) => path
                            .strip_prefix(root)
                            .map(|relative| relative.display().to_string())
                            .unwrap_or_else(|_| path.display().to_string()),
                        None => path.display().to_string(),
                    })
                    .collect();
                serde_json::json!({
                    "kernel": kernel,
                    "spec": spec,
                    "state": status.state,
                    "epoch": status.epoch,
                    "idle_seconds": idle.as_secs_f64(),
                    "notebooks": notebooks,
                })
            })
            .collect();
        Value::Array(kernels)
    }

    async fn capabilities_json(&self) -> Value {
        let config = self.config();
        let limits = config.limits;
        let timeouts = config.timeouts;
        let workspace_root = self
            .notebook_state()
            .workspace()
            .ok()
            .map(|workspace| workspace.root().display().to_string());
        serde_json::json!({
            "schema_version": "1.0",
            "server": {"name": "ipython-mcp", "version": env!("CARGO_PKG_VERSION")},
            "limits": {
                "max_text_chars": limits.max_text_chars,
                "max_traceback_chars": limits.max_traceback_chars,
                "max_repr_chars": limits.max_repr_chars,
                "max_results": limits.max_results,
                "max_display_items": limits.max_display_items,
                "max_json_depth": limits.max_json_depth,
                "max_image_bytes": limits.max_image_bytes,
                "max_reply_bytes": limits.max_reply_bytes,
                "max_code_bytes": MAX_CODE_BYTES,
                "operation_timeout_seconds": timeouts.operation.as_secs_f64(),
                "max_timeout_seconds": timeouts.max_operation.as_secs_f64(),
                "interruption_grace_seconds": timeouts.interruption_grace.as_secs_f64(),
                "queue_wait_timeout_seconds": config.queue.queue_wait.as_secs_f64(),
                "max_pending_operations": config.queue.max_pending,
                "max_kernels": config.kernels.max_kernels,
                "kernel_idle_timeout_seconds": config.kernels.idle_timeout.as_secs_f64(),
                "max_dynamic_tools": config.tools.max_tools,
                "max_notebook_read_cells": MAX_READ_CELLS,
                "max_notebook_resource_bytes": MAX_RESOURCE_BYTES,
            },
            "notebooks": {
                "workspace_root": workspace_root,
                "formats": ["ipynb", "py:percent"],
                "nbformat": "4.5",
                "revision": "sha256 of the file bytes",
            },
            "transport": {
                "active": match config.transport {
                    ipython_mcp_config::Transport::Stdio => "stdio",
                    ipython_mcp_config::Transport::Http => "http",
                },
                "supported": ["stdio", "http"],
            },
            "kernelspecs": self.kernelspecs_json().await,
            "sessions": self.sessions().all().into_iter().map(|(kernel, ..)| kernel).collect::<Vec<_>>(),
        })
    }

    /// `resources/read`.
    pub(crate) async fn read_notebook_resource(
        &self,
        uri: &str,
    ) -> Result<rmcp::model::ResourceContents, rmcp::ErrorData> {
        use rmcp::model::ResourceContents;
        let json_text = |value: Value| {
            ResourceContents::text(
                serde_json::to_string_pretty(&value).unwrap_or_default(),
                uri,
            )
            .with_mime_type("application/json")
        };
        match uri {
            CAPABILITIES_URI => return Ok(json_text(self.capabilities_json().await)),
            KERNELSPECS_URI => return Ok(json_text(self.kernelspecs_json().await)),
            KERNELS_URI => return Ok(json_text(self.kernels_json())),
            _ => {}
        }
        let invalid = |code: Code, message: String| {
            rmcp::ErrorData::invalid_params(
                message.clone(),
                Some(
                    serde_json::json!({"code": code, "message": message, "uri": render::shorten(uri, 200)}),
                ),
            )
        };
        if !uri.starts_with("notebook:") {
            return Err(rmcp::ErrorData::resource_not_found(
                "resource_not_found",
                Some(serde_json::json!({"uri": render::shorten(uri, 200)})),
            ));
        }
        let relative = ipython_mcp_notebook::path_from_uri(uri)
            .map_err(|error| invalid(notebook_code(&error), error.to_string()))?;
        let workspace = self
            .notebook_state()
            .workspace()
            .map_err(|error| invalid(error.code, error.message.clone()))?
            .clone();
        // Resolving reads the file system too: all of it on the blocking pool.
        let read = tokio::task::spawn_blocking(move || {
            let path = workspace.resolve(&relative)?;
            let metadata = std::fs::metadata(&path.absolute).map_err(|_| {
                ipython_mcp_notebook::Error::NotFound {
                    path: path.relative.clone(),
                }
            })?;
            if metadata.len() as usize > MAX_RESOURCE_BYTES {
                return Err(ipython_mcp_notebook::Error::InvalidArguments {
                    message: format!(
                        "the notebook is {} bytes; resources serve at most {MAX_RESOURCE_BYTES} (use notebook_read)",
                        metadata.len()
                    ),
                });
            }
            let loaded = workspace.read(&path)?;
            Ok(String::from_utf8_lossy(&loaded.notebook.to_bytes()).into_owned())
        })
        .await
        .map_err(|_| rmcp::ErrorData::internal_error("reading the notebook failed", None))?;
        match read {
            Ok(text) => {
                Ok(ResourceContents::text(text, uri).with_mime_type("application/x-ipynb+json"))
            }
            Err(ipython_mcp_notebook::Error::NotFound { .. }) => {
                Err(rmcp::ErrorData::resource_not_found(
                    "resource_not_found",
                    Some(serde_json::json!({"uri": render::shorten(uri, 200)})),
                ))
            }
            Err(error) => Err(invalid(notebook_code(&error), error.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipython_mcp_kernel::{DisplayItem, RuntimeInfo};
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

    #[test]
    fn saved_outputs_are_bounded_for_the_agent() {
        let stream =
            json!({"output_type": "stream", "name": "stdout", "text": ["x".repeat(50), "\n"]});
        let view = output_view(&stream, 10, 10);
        assert_eq!(view["text"], "xxxxxxxxxx");
        assert_eq!(view["text_omitted_chars"], 41);
        let display = json!({"output_type": "display_data", "metadata": {}, "data": {
            "image/png": "iVBORw0KGgo=",
            "text/html": ["<b>", "long html here</b>"],
            "application/json": {"big": "y".repeat(100)},
        }});
        let view = output_view(&display, 10, 10);
        assert_eq!(
            view["data"]["image/png"],
            "<image/png image, 12 base64 characters, saved in the file>"
        );
        assert_eq!(
            view["data"]["text/html"],
            "<b>long ht… [11 more characters]"
        );
        assert!(view["data"]["application/json"]
            .as_str()
            .expect("described")
            .starts_with("<application/json"));
        let error = json!({"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["a".repeat(30)]});
        assert_eq!(output_view(&error, 10, 5)["traceback_omitted_chars"], 25);
    }

    #[test]
    fn exactly_one_cell_reference() {
        assert_eq!(
            cell_ref(Some("a".into()), None).ok(),
            Some(CellRef::Id("a".into()))
        );
        assert_eq!(cell_ref(None, Some(3)).ok(), Some(CellRef::Index(3)));
        assert!(cell_ref(Some("a".into()), Some(3)).is_err());
        assert!(cell_ref(None, None).is_err());
        assert_eq!(optional_cell_ref(None, None).ok(), Some(None));
    }
}
