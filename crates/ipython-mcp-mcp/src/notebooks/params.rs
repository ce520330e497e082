//! The notebook tools' arguments: what an agent may send, with the descriptions its schema shows.

use ipython_mcp_notebook::{CellType, NewCell};
use rmcp::schemars;
use serde::Deserialize;
use serde_json::{Map, Value};

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

impl From<CellInput> for NewCell {
    fn from(cell: CellInput) -> NewCell {
        NewCell {
            cell_type: cell.cell_type.unwrap_or(CellType::Code),
            source: cell.source,
            metadata: cell.metadata.unwrap_or_default(),
        }
    }
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
