//! The notebook tools' arguments: what an agent may send, with the descriptions its schema shows.
//! The json-lines protocol takes the same types for its methods that do what a tool does.

use ipython_mcp_notebook::{CellType, NewCell};
use ipython_mcp_notebooks::{CellRequest, CodeRequest};
use ipython_mcp_output::ErrorInfo;
use rmcp::schemars;
use serde::Deserialize;
use serde_json::{Map, Value};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CellInput {
    /// Default `code`.
    #[serde(default)]
    pub cell_type: Option<CellType>,
    /// Text.
    #[serde(default)]
    pub source: String,
    /// Metadata.
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
    /// Workspace-relative `.ipynb` or `.py` path; `jupyter:<path>` on the Jupyter server.
    pub path: String,
    /// Kernelspec cells run in (default `python3`).
    #[serde(default)]
    pub kernel_name: Option<String>,
    /// Kernel display name.
    #[serde(default)]
    pub display_name: Option<String>,
    /// Kernel language (default `python`).
    #[serde(default)]
    pub language: Option<String>,
    /// Initial cells.
    #[serde(default)]
    pub cells: Vec<CellInput>,
    /// Replace an existing file.
    #[serde(default)]
    pub overwrite: bool,
    /// With overwrite: only if the file is at this revision.
    #[serde(default)]
    pub expected_revision: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// Workspace-relative notebook path; `jupyter:<path>` on the Jupyter server.
    pub path: String,
    /// Only this cell.
    #[serde(default)]
    pub cell_id: Option<String>,
    /// Only the cell at this index.
    #[serde(default)]
    pub index: Option<usize>,
    /// Include saved outputs.
    #[serde(default)]
    pub include_outputs: bool,
    /// First cell of the page.
    #[serde(default)]
    pub start_index: Option<usize>,
    /// Cells per page (default 100, max 1000).
    #[serde(default)]
    pub max_cells: Option<usize>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathParams {
    /// Workspace-relative notebook path; `jupyter:<path>` on the Jupyter server.
    pub path: String,
}

/// What `notebook_edit` does to the notebook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EditAction {
    Insert,
    Update,
    Delete,
    Move,
    ClearOutputs,
    SetMetadata,
}

impl EditAction {
    pub fn name(self) -> &'static str {
        match self {
            EditAction::Insert => "insert",
            EditAction::Update => "update",
            EditAction::Delete => "delete",
            EditAction::Move => "move",
            EditAction::ClearOutputs => "clear_outputs",
            EditAction::SetMetadata => "set_metadata",
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditParams {
    /// Workspace-relative notebook path; `jupyter:<path>` on the Jupyter server.
    pub path: String,
    /// insert (at `index`, default end), update, delete, move (to `to_index`), clear_outputs / set_metadata (the cell, else all / the notebook).
    pub action: EditAction,
    /// Target cell's id (or `index`).
    #[serde(default)]
    pub cell_id: Option<String>,
    /// Target cell's 0-based index.
    #[serde(default)]
    pub index: Option<usize>,
    /// Whole new text (insert, update).
    #[serde(default)]
    pub source: Option<String>,
    /// insert (default code), update.
    #[serde(default)]
    pub cell_type: Option<CellType>,
    /// Replaces the cell's (or notebook's) metadata.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// move: the index afterwards.
    #[serde(default)]
    pub to_index: Option<usize>,
    /// Only if the file is at this revision.
    #[serde(default)]
    pub expected_revision: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteCellParams {
    /// Workspace-relative notebook path; `jupyter:<path>` on the Jupyter server.
    pub path: String,
    /// The code cell's id (or `index`).
    #[serde(default)]
    pub cell_id: Option<String>,
    /// The code cell's 0-based index.
    #[serde(default)]
    pub index: Option<usize>,
    /// Seconds from the start of the run (default: the server's).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Run only if the file is at this revision.
    #[serde(default)]
    pub expected_revision: Option<String>,
    /// Return at once with an execution_id (a task, for MCP-tasks clients); saved when done.
    #[serde(default)]
    pub background: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NotebookExecuteParams {
    /// Workspace-relative notebook path; `jupyter:<path>` on the Jupyter server.
    pub path: String,
    /// Code to run.
    pub code: String,
    /// false: only run it.
    #[serde(default = "default_true")]
    pub persist: bool,
    /// The new cell's index (default end).
    #[serde(default)]
    pub index: Option<usize>,
    /// Seconds from the start of the run (default: the server's).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Run only if the file is at this revision.
    #[serde(default)]
    pub expected_revision: Option<String>,
    /// Return at once with an execution_id (a task, for MCP-tasks clients); saved when done.
    #[serde(default)]
    pub background: bool,
}

fn default_true() -> bool {
    true
}

impl ExecuteCellParams {
    /// The run these parameters ask for (how to answer it, `background`, is the caller's); a
    /// cell named both ways, or neither, is refused.
    pub fn request(self) -> Result<CellRequest, Box<ErrorInfo>> {
        let cell = super::cell_ref(self.cell_id, self.index)
            .map_err(|refused| Box::new(refused.into_info()))?;
        Ok(CellRequest {
            cell,
            path: self.path,
            expected_revision: self.expected_revision,
            timeout_seconds: self.timeout_seconds,
        })
    }
}

impl NotebookExecuteParams {
    /// The run these parameters ask for (how to answer it, `background`, is the caller's).
    pub fn request(self) -> CodeRequest {
        CodeRequest {
            path: self.path,
            code: self.code,
            index: self.index,
            persist: self.persist,
            expected_revision: self.expected_revision,
            timeout_seconds: self.timeout_seconds,
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionParams {
    /// Workspace-relative notebook path; `jupyter:<path>` on the Jupyter server.
    pub path: String,
    /// Bind to this existing session.
    #[serde(default)]
    pub kernel: Option<String>,
}
