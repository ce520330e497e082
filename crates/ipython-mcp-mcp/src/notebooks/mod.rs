//! The notebooks toolset: create, read, edit and execute `.ipynb` files inside the
//! workspace root, with SHA-256 revisions for optimistic concurrency and one kernel session per
//! notebook. Where notebooks live, their sessions, and running and saving cells are
//! `ipython_mcp_notebooks`'; this module checks arguments, answers runs in the background as
//! MCP tasks, and bounds what goes back to the agent.
//!
//! - `params`: the tools' arguments; `views`: the results and what the agent sees of cells and
//!   saved outputs; `save`: a notebook run's result, in the background too; `tools`: the tool
//!   bodies; `resources`: `notebook:///` and the server's JSON resources.
//! - Tool bodies return `ToolResult`: every failure becomes a [`ToolError`] through `?` (the
//!   crate's one conversion point, `error.rs`, which also maps the notebook crate's errors to
//!   codes).

mod params;
mod resources;
mod save;
mod tools;
mod views;

use ipython_mcp_notebook::{uri_for_path, CellRef, Loaded, Notebook, NotebookPath};
use rmcp::model::CallToolResult;
use serde::Serialize;

use crate::error::ToolError;
use crate::handler::IpythonMcp;
use crate::render;
use crate::surface::ToolSpec;
use ipython_mcp_notebooks::Store;
pub use params::{ExecuteCellParams, NotebookExecuteParams, PathParams};
pub(crate) use resources::KERNELS_URI;
use views::{CellSummary, WriteResult};
pub use views::{CloseResult, NotebookExecuteResult};

/// Largest `max_cells` of one `notebook_read`.
const MAX_READ_CELLS: usize = 1000;
const DEFAULT_READ_CELLS: usize = 100;

// ---------------------------------------------------------------------------------------------
// Helpers

fn structured<T: Serialize>(tool: &ToolSpec, value: &T) -> CallToolResult {
    render::namespace(
        tool.name,
        serde_json::to_value(value).unwrap_or_default(),
        true,
    )
}

/// Exactly one of `cell_id` and `index`.
fn cell_ref(cell_id: Option<String>, index: Option<usize>) -> Result<CellRef, ToolError> {
    match (cell_id, index) {
        (Some(id), None) => Ok(CellRef::Id(id)),
        (None, Some(index)) => Ok(CellRef::Index(index)),
        (Some(_), Some(_)) => Err(ToolError::invalid("give either cell_id or index, not both")),
        (None, None) => Err(ToolError::invalid("give the cell's cell_id or its index")),
    }
}

/// Zero or one of `cell_id` and `index`.
fn optional_cell_ref(
    cell_id: Option<String>,
    index: Option<usize>,
) -> Result<Option<CellRef>, ToolError> {
    match (&cell_id, index) {
        (None, None) => Ok(None),
        _ => cell_ref(cell_id, index).map(Some),
    }
}

impl IpythonMcp {
    /// Where `path` lives and the checked path (see `Notebooks::locate`).
    async fn notebook_path(&self, path: &str) -> Result<(Store, NotebookPath), ToolError> {
        Ok(self.notebooks().locate(path).await?)
    }

    /// Where `path` lives, the checked path and the notebook, checked against
    /// `expected_revision` when one is given.
    async fn load(
        &self,
        path: &str,
        expected_revision: Option<String>,
    ) -> Result<(Store, NotebookPath, Loaded), ToolError> {
        Ok(self
            .notebooks()
            .load(path, expected_revision.as_deref())
            .await?)
    }

    /// A read-modify-write of one notebook (`Workspace::mutate`, on the blocking pool),
    /// answered as a `WriteResult` with the cell `change` names.
    async fn edit(
        &self,
        tool: &'static ToolSpec,
        path: String,
        expected_revision: Option<String>,
        change: impl FnOnce(&mut Notebook) -> Result<Option<CellSummary>, ipython_mcp_notebook::Error>
            + Send
            + 'static,
    ) -> Result<CallToolResult, ToolError> {
        let (store, path) = self.notebook_path(&path).await?;
        let mutated = store.mutate(&path, expected_revision, change).await?;
        tracing::info!(tool = tool.name, "tool call");
        let format = mutated.path.format;
        Ok(structured(
            tool,
            &WriteResult {
                ok: true,
                uri: uri_for_path(&mutated.path.relative),
                path: mutated.path.relative,
                revision: mutated.revision,
                cell_count: mutated.cell_count,
                cell: mutated.value.map(|cell| cell.in_format(format)),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
