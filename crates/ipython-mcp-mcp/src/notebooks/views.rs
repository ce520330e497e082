//! What the agent sees of a notebook: the tools' results, cells and saved outputs, bounded.

use ipython_mcp_kernel::RuntimeStatus;
use ipython_mcp_output::{ErrorInfo, ExecutionOutput, Kept};
use ipython_mcp_text::{cut, Cut};

use ipython_mcp_config::OutputLimits;
use ipython_mcp_notebook::{cell_id, joined_text, uri_for_path, CellRef, Format, Loaded, Notebook};
use rmcp::schemars;
use serde::Serialize;
use serde_json::{Map, Value};

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
    pub status: RuntimeStatus<ErrorInfo>,
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

impl NotebookExecuteResult {
    /// The result of a finished run of notebook `path` in session `kernel` (`started` by it),
    /// saved as `saved` says. A failed save is a failure like any other (`ok` false, in
    /// `error` unless the code itself failed); `save_error` says why the file was not written.
    pub fn of_run(
        mut output: ExecutionOutput,
        path: String,
        kernel: String,
        started: bool,
        saved: ipython_mcp_notebooks::Saved,
    ) -> NotebookExecuteResult {
        let save_error = saved.error.as_ref().map(crate::error::notebooks_error);
        if let Some(error) = &save_error {
            if output.error.is_none() {
                output.error = Some(error.clone());
            }
            output.ok = false;
        }
        NotebookExecuteResult {
            output,
            path,
            kernel,
            session_started: started,
            saved: saved.cell.is_some(),
            revision: Some(saved.revision),
            cell: saved.cell.map(CellSummary::from),
            save_error,
        }
    }
}

impl From<ipython_mcp_notebooks::SavedCell> for CellSummary {
    fn from(cell: ipython_mcp_notebooks::SavedCell) -> CellSummary {
        CellSummary {
            index: cell.index,
            id: cell.id,
            cell_type: cell.cell_type,
        }
        .in_format(cell.format)
    }
}

impl CellSummary {
    /// The summary as an agent knows the cell in a file of `format`: a percent script stores
    /// no ids, so its cells are known by their positional id (`cell-<index>`), the one the
    /// next read gives them.
    pub(super) fn in_format(mut self, format: Format) -> CellSummary {
        if format == Format::Percent {
            self.id = Some(format!("cell-{}", self.index));
        }
        self
    }
}

/// A cell's `cell_type` (empty when the file has none).
pub(super) fn cell_type_of(cell: &Value) -> &str {
    cell.get("cell_type")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The place, id and type of the cell at `index`.
pub(super) fn summary(notebook: &Notebook, index: usize) -> CellSummary {
    let cell = &notebook.cells()[index];
    CellSummary {
        index,
        id: cell_id(cell).map(str::to_owned),
        cell_type: cell_type_of(cell).to_owned(),
    }
}

/// Which cells `notebook_read` returns.
pub(super) struct ReadScope {
    /// One cell; `None`: up to `max_cells` cells from `start_index`.
    pub(super) only: Option<CellRef>,
    pub(super) start_index: usize,
    pub(super) max_cells: usize,
    pub(super) include_outputs: bool,
}

/// The answer of `notebook_read`: the cells of `scope`, each bounded by `max_text_chars`
/// (saved outputs by the repr and traceback bounds), the whole within a few times
/// `max_text_chars` of text, `next_index` saying where to continue.
pub(super) fn read_result(
    relative: String,
    loaded: Loaded,
    scope: &ReadScope,
    limits: &OutputLimits,
) -> Result<ReadResult, ipython_mcp_notebook::Error> {
    let notebook = &loaded.notebook;
    let max_chars = limits.max_text_chars;
    let indices = match &scope.only {
        Some(reference) => {
            let index = notebook.locate(reference)?;
            index..index + 1
        }
        None => {
            let start = scope.start_index.min(notebook.cells().len());
            start..(start + scope.max_cells).min(notebook.cells().len())
        }
    };
    let budget = max_chars.saturating_mul(4);
    let mut used = 0usize;
    let mut cells = Vec::new();
    let mut next_index = None;
    for index in indices.clone() {
        if used >= budget && index > indices.start {
            next_index = Some(index);
            break;
        }
        let cell = cell_view(
            &notebook.cells()[index],
            index,
            scope.include_outputs,
            limits,
        );
        used += cell.source.len()
            + cell.metadata.as_ref().map_or(0, |metadata| {
                Value::Object(metadata.clone()).to_string().len()
            })
            + cell
                .outputs
                .as_ref()
                .map(|outputs| outputs.iter().map(|output| output.to_string().len()).sum())
                .unwrap_or(0);
        cells.push(cell);
    }
    if scope.only.is_none() && next_index.is_none() && indices.end < notebook.cells().len() {
        next_index = Some(indices.end);
    }
    let (metadata, metadata_omitted) =
        bounded_object(Some(&Value::Object(notebook.metadata().clone())), max_chars);
    Ok(ReadResult {
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
    })
}

/// One cell as `notebook_read` shows it.
fn cell_view(cell: &Value, index: usize, include_outputs: bool, limits: &OutputLimits) -> CellView {
    let max_chars = limits.max_text_chars;
    let source = joined_text(cell.get("source"));
    let Cut {
        kept: source,
        omitted: source_omitted_chars,
    } = cut(&source, max_chars);
    let (metadata, metadata_omitted) = bounded_object(cell.get("metadata"), max_chars);
    let saved = cell.get("outputs").and_then(Value::as_array);
    let outputs = include_outputs.then(|| {
        saved
            .map(|outputs| {
                outputs
                    .iter()
                    .map(|output| output_view(output, limits))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    });
    CellView {
        index,
        id: cell_id(cell).map(str::to_owned),
        cell_type: cell_type_of(cell).to_owned(),
        source: source.to_owned(),
        source_omitted_chars,
        metadata,
        metadata_omitted,
        execution_count: cell.get("execution_count").and_then(Value::as_u64),
        output_count: saved.map_or(0, Vec::len),
        outputs,
    }
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

/// A saved output, bounded for the agent: stream text keeps its beginning and its end as
/// execute's does, a traceback its last frames; images described, big JSON omitted.
fn output_view(output: &Value, limits: &OutputLimits) -> Value {
    let (max_chars, max_traceback) = (limits.max_repr_chars, limits.max_traceback_chars);
    let mut view = Map::new();
    let kind = output
        .get("output_type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    view.insert("output_type".into(), kind.into());
    match kind {
        "stream" => {
            let name = output.get("name").and_then(Value::as_str).unwrap_or("");
            let kept = Kept::of(
                &joined_text(output.get("text")),
                max_chars,
                limits.head_chars(max_chars),
            );
            view.insert(
                "name".into(),
                output.get("name").cloned().unwrap_or(Value::Null),
            );
            view.insert("text".into(), kept.render(name, None).into());
            view.insert("text_omitted_chars".into(), kept.omitted_chars.into());
        }
        "error" => {
            for key in ["ename", "evalue"] {
                let text = output.get(key).and_then(Value::as_str).unwrap_or_default();
                view.insert(key.into(), cut(text, max_chars).kept.into());
            }
            let lines: Vec<&str> = output
                .get("traceback")
                .and_then(Value::as_array)
                .map(|lines| lines.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            // The raising frame and the exception line are at the end: most of it is kept.
            let kept = Kept::of(&lines.join("\n"), max_traceback, max_traceback / 4);
            view.insert("traceback".into(), kept.render("traceback", None).into());
            view.insert("traceback_omitted_chars".into(), kept.omitted_chars.into());
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
                        let text = joined_text(Some(value));
                        let Cut {
                            kept: text,
                            omitted,
                        } = cut(&text, max_chars);
                        if omitted > 0 {
                            Value::String(format!("{text}… [{omitted} more characters]"))
                        } else {
                            Value::String(text.to_owned())
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_percent_scripts_cells_are_known_by_their_positional_id() {
        let cell = CellSummary {
            index: 3,
            id: Some("abc".into()),
            cell_type: "code".into(),
        };
        assert_eq!(
            cell.clone().in_format(Format::Ipynb).id.as_deref(),
            Some("abc")
        );
        assert_eq!(
            cell.in_format(Format::Percent).id.as_deref(),
            Some("cell-3")
        );
    }

    #[test]
    fn saved_outputs_are_bounded_for_the_agent() {
        let stream =
            json!({"output_type": "stream", "name": "stdout", "text": ["x".repeat(50), "\n"]});
        let limits = OutputLimits {
            max_repr_chars: 10,
            max_traceback_chars: 20,
            ..OutputLimits::default()
        };
        let view = output_view(&stream, &limits);
        assert_eq!(view["text"], "xx\n[… 41 characters omitted …]\nxxxxxxx\n");
        assert_eq!(view["text_omitted_chars"], 41);
        let lines: Vec<String> = (0..20).map(|line| format!("{line:02}\n")).collect();
        let stream = json!({"output_type": "stream", "name": "stdout", "text": lines});
        let view = output_view(&stream, &limits);
        assert_eq!(
            view["text"],
            "00\n[… 52 characters (18 lines) omitted …]\n18\n19\n"
        );
        let display = json!({"output_type": "display_data", "metadata": {}, "data": {
            "image/png": "iVBORw0KGgo=",
            "text/html": ["<b>", "long html here</b>"],
            "application/json": {"big": "y".repeat(100)},
        }});
        let view = output_view(&display, &limits);
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
        let frames: Vec<String> = (0..10).map(|frame| format!("frame {frame}")).collect();
        let error =
            json!({"output_type": "error", "ename": "E", "evalue": "v", "traceback": frames});
        let view = output_view(&error, &limits);
        assert_eq!(view["traceback_omitted_chars"], 59);
        assert_eq!(
            view["traceback"],
            "frame\n[… 59 characters (8 lines) omitted …]\nframe 8\nframe 9"
        );
    }
}
