//! The notebooks toolset: create, read, edit and execute `.ipynb` files inside the
//! workspace root, with SHA-256 revisions for optimistic concurrency and one kernel session per
//! notebook. File work happens in `ipython-mcp-notebook` (on the blocking pool); this module
//! checks arguments, picks sessions, turns executions into saved outputs and bounds what goes
//! back to the agent.
//!
//! - `params`: the tools' arguments; `views`: the results and what the agent sees of cells and
//!   saved outputs; `save`: a notebook's kernel session and saving an execution's outputs;
//!   `tools`: the tool bodies; `resources`: `notebook:///` and the server's JSON resources;
//!   `jsonlines`: the same operations for desktop programs, one JSON request per line.
//! - Tool bodies return `ToolResult`: every failure becomes a [`ToolError`] through `?` (the
//!   crate's one conversion point, `error.rs`, which also maps the notebook crate's errors to
//!   codes).

mod jsonlines;
mod params;
mod resources;
mod save;
mod tools;
mod views;

use std::sync::Arc;
use std::time::Duration;

use ipython_mcp_notebook::{
    uri_for_path, CellRef, Loaded, Notebook, NotebookPath, Workspace, JUPYTER_PREFIX,
};
use ipython_mcp_output::Code;
use rmcp::model::CallToolResult;
use serde::Serialize;

use crate::error::{notebook_error, ToolError};
use crate::handler::IpythonMcp;
use crate::render;
use ipython_mcp_notebooks::{self as store, Store};
pub use jsonlines::serve_json_lines;
pub(crate) use resources::KERNELS_URI;
use views::{CellSummary, WriteResult};

/// Largest `max_cells` of one `notebook_read`.
const MAX_READ_CELLS: usize = 1000;
const DEFAULT_READ_CELLS: usize = 100;

// ---------------------------------------------------------------------------------------------
// Helpers

fn structured<T: Serialize>(tool: &str, value: &T) -> CallToolResult {
    render::namespace(tool, serde_json::to_value(value).unwrap_or_default(), true)
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
    fn workspace(&self) -> Result<Arc<Workspace>, ToolError> {
        Ok(self.notebook_state().workspace()?.clone())
    }

    /// Where `path` lives and the checked path: a `jupyter:` path on the configured Jupyter
    /// server, anything else in the workspace (resolving reads the file system: on the
    /// blocking pool).
    async fn notebook_path(&self, path: &str) -> Result<(Store, NotebookPath), ToolError> {
        if let Some(server_path) = path.strip_prefix(JUPYTER_PREFIX) {
            // Checked before anything else, as a workspace path is.
            NotebookPath::jupyter(server_path).map_err(|e| notebook_error(&e))?;
            let Some(server) = self.kernels().jupyter() else {
                return Err(ToolError::new(
                    Code::InvalidConfiguration,
                    format!(
                        "{path:?} names a notebook on a Jupyter server, and none is configured"
                    ),
                )
                .with_hint(format!(
                    "set {} (and {}) to the server's URL, or give a path in the workspace",
                    ipython_mcp_config::JUPYTER_URL.env,
                    ipython_mcp_config::JUPYTER_TOKEN.env
                )));
            };
            let notebooks = self.notebook_state().jupyter(server);
            let checked = NotebookPath::jupyter_in(server_path, notebooks.area())
                .map_err(|e| notebook_error(&e))?;
            return Ok((Store::Jupyter(notebooks), checked));
        }
        let workspace = self.workspace()?;
        let (resolver, path) = (Arc::clone(&workspace), path.to_owned());
        let resolved = store::blocking(move || resolver.resolve(&path)).await?;
        Ok((Store::Local(workspace), resolved))
    }

    /// Where `path` lives, the checked path and the notebook, checked against
    /// `expected_revision` when one is given.
    async fn load(
        &self,
        path: &str,
        expected_revision: Option<String>,
    ) -> Result<(Store, NotebookPath, Loaded), ToolError> {
        let (store, path) = self.notebook_path(path).await?;
        let loaded = store.load(&path, expected_revision.as_deref()).await?;
        Ok((store, path, loaded))
    }

    /// A read-modify-write of one notebook (`Workspace::mutate`, on the blocking pool),
    /// answered as a `WriteResult` with the cell `change` names.
    async fn edit(
        &self,
        tool: &'static str,
        path: String,
        expected_revision: Option<String>,
        change: impl FnOnce(&mut Notebook) -> Result<Option<CellSummary>, ipython_mcp_notebook::Error>
            + Send
            + 'static,
    ) -> Result<CallToolResult, ToolError> {
        let (store, path) = self.notebook_path(&path).await?;
        let mutated = store.mutate(&path, expected_revision, change).await?;
        tracing::info!(tool, "tool call");
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

    fn check_timeout(&self, timeout: Option<f64>) -> Result<Option<Duration>, ToolError> {
        let max = self.config().timeouts.max_operation;
        match timeout {
            None => Ok(None),
            Some(seconds)
                if seconds.is_finite() && seconds > 0.0 && seconds <= max.as_secs_f64() =>
            {
                Ok(Some(Duration::from_secs_f64(seconds)))
            }
            Some(seconds) => Err(ToolError::invalid(format!(
                "timeout_seconds must be a positive number of seconds up to {}, got {seconds}",
                max.as_secs_f64()
            ))),
        }
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
