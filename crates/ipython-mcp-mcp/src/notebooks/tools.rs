//! The notebook tools: argument checks and the calls that do the work, each body one `?`
//! chain whose refusal `answer` turns into the tool's result.

use crate::error::ToolResult;
use ipython_mcp_jupyter::kernelspec;
use ipython_mcp_notebook::{uri_for_path, CellType, NewCell, Notebook};
use ipython_mcp_output::ErrorInfo;
use rmcp::handler::server::tool::schema_for_output;
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, RoleServer};
use serde_json::{Map, Value};

use super::params::{
    CreateParams, EditAction, EditParams, ExecuteCellParams, NotebookExecuteParams, PathParams,
    ReadParams, SessionParams,
};
use super::views::{
    read_result, summary, CellSummary, CloseResult, NotebookExecuteResult, ReadResult, ReadScope,
    RevisionResult, SessionResult, WriteResult,
};
use super::{
    cell_ref, optional_cell_ref, structured, ToolError, DEFAULT_READ_CELLS, MAX_READ_CELLS,
};
use crate::argument::Parameters;
use crate::handler::IpythonMcp;
use crate::surface::{
    NOTEBOOK_CREATE, NOTEBOOK_EDIT, NOTEBOOK_EXECUTE, NOTEBOOK_EXECUTE_CELL, NOTEBOOK_READ,
    NOTEBOOK_REVISION, NOTEBOOK_SESSION, NOTEBOOK_SESSION_CLOSE,
};
use ipython_mcp_notebooks::Store;

#[tool_router(router = notebooks_router, vis = "pub(crate)")]
impl IpythonMcp {
    #[tool(
        name = "notebook_create",
        description = "Create a notebook (.ipynb, nbformat 4.5; .py: jupytext percent script) with optional cells; to edit: notebook_edit. An existing file is notebook_exists unless `overwrite`. Returns the revision.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Create a notebook", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn notebook_create(&self, Parameters(params): Parameters<CreateParams>) -> ToolResult {
        let (store, path) = self.notebook_path(&params.path).await?;
        let kernel_name = params
            .kernel_name
            .unwrap_or_else(|| kernelspec::PYTHON3.to_owned());
        let display_name = params.display_name.unwrap_or_else(|| {
            if kernel_name == kernelspec::PYTHON3 {
                "Python 3".to_owned()
            } else {
                kernel_name.clone()
            }
        });
        let language = params.language.unwrap_or_else(|| "python".to_owned());
        let mut notebook = Notebook::new(&kernel_name, &display_name, &language);
        for cell in params.cells {
            notebook.insert(None, cell.into())?;
        }
        let cell_count = notebook.cells().len();
        let relative = path.relative.clone();
        let revision = store
            .create(&path, notebook, params.overwrite, params.expected_revision)
            .await?;
        tracing::info!(tool = NOTEBOOK_CREATE.name, "tool call");
        Ok(structured(
            NOTEBOOK_CREATE,
            &WriteResult {
                ok: true,
                uri: uri_for_path(&relative),
                path: relative,
                revision,
                cell_count,
                cell: None,
            },
        ))
    }

    #[tool(
        name = "notebook_read",
        description = "A notebook as data: revision, metadata, cells (index, id, type, source, metadata, execution count; bounded outputs with include_outputs). One cell by cell_id or index, or a page from start_index (continue at `next_index`). Read-only.",
        output_schema = schema_for_output::<ReadResult>(),
        annotations(title = "Read a notebook", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_read(&self, Parameters(params): Parameters<ReadParams>) -> ToolResult {
        let only = optional_cell_ref(params.cell_id, params.index)?;
        let max_cells = params.max_cells.unwrap_or(DEFAULT_READ_CELLS);
        if max_cells == 0 || max_cells > MAX_READ_CELLS {
            return Err(ToolError::invalid(format!(
                "max_cells must be between 1 and {MAX_READ_CELLS}, got {max_cells}"
            )));
        }
        let (_store, path, loaded) = self.load(&params.path, None).await?;
        let scope = ReadScope {
            only,
            start_index: params.start_index.unwrap_or(0),
            max_cells,
            include_outputs: params.include_outputs,
        };
        let read = read_result(path.relative, loaded, &scope, &self.config().limits)?;
        tracing::info!(
            tool = NOTEBOOK_READ.name,
            cells = read.cells.len(),
            "tool call"
        );
        Ok(structured(NOTEBOOK_READ, &read))
    }

    #[tool(
        name = "notebook_revision",
        description = "A notebook's revision (SHA-256 of its bytes) and size, without parsing it: cheap change check.",
        output_schema = schema_for_output::<RevisionResult>(),
        annotations(title = "Notebook revision", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_revision(&self, Parameters(params): Parameters<PathParams>) -> ToolResult {
        let (store, path) = self.notebook_path(&params.path).await?;
        let relative = path.relative.clone();
        let (revision, bytes) = store.revision_and_size(&path).await?;
        Ok(structured(
            NOTEBOOK_REVISION,
            &RevisionResult {
                ok: true,
                uri: uri_for_path(&relative),
                path: relative,
                revision,
                bytes,
            },
        ))
    }

    #[tool(
        name = "notebook_edit",
        description = "Edit a notebook without running code: insert, update, delete or move a cell, clear outputs, set metadata. Cell ids are stable. Atomic; with expected_revision, a changed file is revision_conflict. Returns revision, cell_count, the cell.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Edit a notebook", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn notebook_edit(&self, Parameters(params): Parameters<EditParams>) -> ToolResult {
        let change = edit_of(&mut EditFields::from(&params), params.action)?;
        self.edit(NOTEBOOK_EDIT, params.path, params.expected_revision, change)
            .await
    }

    #[tool(
        name = "notebook_execute_cell",
        description = "Run a code cell in the notebook's session (started if none) and save its outputs; new code: notebook_execute. Returns what execute does, plus the save (revision); file changed meanwhile: not saved.",
        output_schema = schema_for_output::<NotebookExecuteResult>(),
        annotations(title = "Execute a notebook cell", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true)
    )]
    async fn notebook_execute_cell(
        &self,
        Parameters(params): Parameters<ExecuteCellParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ToolError> {
        let background = params.background;
        let run = self.notebooks().cell_run(params.request()?).await?;
        self.run_and_save(NOTEBOOK_EXECUTE_CELL, run, background, &context)
            .await
    }

    #[tool(
        name = "notebook_execute",
        description = "Run code in the notebook's session and save it as a new code cell with outputs. Returns what execute does, plus the new cell and revision; file changed meanwhile: not saved. To re-run a cell: notebook_execute_cell.",
        output_schema = schema_for_output::<NotebookExecuteResult>(),
        annotations(title = "Execute code in a notebook", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true)
    )]
    async fn notebook_execute(
        &self,
        Parameters(params): Parameters<NotebookExecuteParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ToolError> {
        let background = params.background;
        let run = self.notebooks().code_run(params.request()).await?;
        self.run_and_save(NOTEBOOK_EXECUTE, run, background, &context)
            .await
    }

    #[tool(
        name = "notebook_session",
        description = "The session running a notebook's cells, started from its kernelspec if it has none. With `kernel`, binds the notebook to that session (shared variables). Its id works with interrupt, kernel_restart, runtime_status.",
        output_schema = schema_for_output::<SessionResult>(),
        annotations(title = "Notebook session", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_session(&self, Parameters(params): Parameters<SessionParams>) -> ToolResult {
        let notebooks = self.notebooks();
        let (path, kernel, handle, started) = match params.kernel {
            Some(kernel) => {
                let (_store, path) = notebooks.locate(&params.path).await?;
                let handle = notebooks.bind(&path, &kernel)?;
                (path, kernel, handle, false)
            }
            None => {
                let (_store, path, loaded) = notebooks.load(&params.path, None).await?;
                let kernel_name = loaded.notebook.kernel_name().map(str::to_owned);
                let session = notebooks.session_of(&path, kernel_name).await?;
                (path, session.id.into(), session.handle, session.started)
            }
        };
        let shared_with = notebooks
            .bound_to(&kernel)
            .into_iter()
            .filter(|other| *other != path.absolute)
            .map(|other| notebooks.shown(&other))
            .collect();
        tracing::info!(tool = NOTEBOOK_SESSION.name, kernel = %kernel, started, "tool call");
        Ok(structured(
            NOTEBOOK_SESSION,
            &SessionResult {
                ok: true,
                path: path.relative,
                kernel,
                started,
                shared_with,
                status: crate::error::status(handle.status()),
            },
        ))
    }

    #[tool(
        name = "notebook_session_close",
        description = "Release a notebook's session; it stops (variables gone) unless another notebook uses it or it is `default`.",
        output_schema = schema_for_output::<CloseResult>(),
        annotations(title = "Close a notebook session", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_session_close(
        &self,
        Parameters(params): Parameters<PathParams>,
    ) -> ToolResult {
        let closed = self.close_notebook_session(&params.path).await?;
        tracing::info!(
            tool = NOTEBOOK_SESSION_CLOSE.name,
            stopped = closed.stopped,
            "tool call"
        );
        Ok(structured(NOTEBOOK_SESSION_CLOSE, &closed))
    }
}

impl IpythonMcp {
    /// `notebook_session_close` for the json-lines protocol's `close`: the same result, or
    /// the same error.
    pub async fn close_notebook(&self, path: &str) -> Result<CloseResult, ErrorInfo> {
        self.close_notebook_session(path)
            .await
            .map_err(ToolError::into_info)
    }

    /// Releases a notebook's session, stopping it unless another notebook uses it or it is
    /// `default` (`notebook_session_close`, json-lines `close`).
    async fn close_notebook_session(&self, path: &str) -> Result<CloseResult, ToolError> {
        let (store, path) = self.notebooks().locate(path).await?;
        if let Store::Jupyter(notebooks) = &store {
            // The agent leaves the notebook's live document too (the person sees it go).
            notebooks.leave(&path).await;
        }
        let released = self.notebooks().unbind(&path);
        let mut stopped = false;
        if let Some((kernel, others)) = &released {
            if others.is_empty() && !kernel.is_default() {
                stopped = self.state().stop_kernel(kernel.as_str()).await.is_ok();
                if stopped {
                    self.catalog()
                        .drop_session(kernel.as_str(), self.peers())
                        .await;
                }
            }
        }
        Ok(CloseResult {
            ok: true,
            path: path.relative,
            kernel: released.map(|(kernel, _)| kernel.into()),
            stopped,
        })
    }
}

/// One `notebook_edit` change, run under the workspace's read-modify-write.
type Change = Box<
    dyn FnOnce(&mut Notebook) -> Result<Option<CellSummary>, ipython_mcp_notebook::Error> + Send,
>;

/// The optional fields of a `notebook_edit` call, taken one by one as the action uses them;
/// whatever is left over does not apply to the action and is refused.
struct EditFields {
    cell_id: Option<String>,
    index: Option<usize>,
    source: Option<String>,
    cell_type: Option<CellType>,
    metadata: Option<Map<String, Value>>,
    to_index: Option<usize>,
}

impl From<&EditParams> for EditFields {
    fn from(params: &EditParams) -> EditFields {
        EditFields {
            cell_id: params.cell_id.clone(),
            index: params.index,
            source: params.source.clone(),
            cell_type: params.cell_type,
            metadata: params.metadata.clone(),
            to_index: params.to_index,
        }
    }
}

impl EditFields {
    /// Refuses any field the action did not take.
    fn rest(&self, action: EditAction) -> Result<(), ToolError> {
        let given: Vec<&str> = [
            ("cell_id", self.cell_id.is_some()),
            ("index", self.index.is_some()),
            ("source", self.source.is_some()),
            ("cell_type", self.cell_type.is_some()),
            ("metadata", self.metadata.is_some()),
            ("to_index", self.to_index.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect();
        match given.as_slice() {
            [] => Ok(()),
            fields => Err(ToolError::invalid(format!(
                "{} not used by action {}",
                fields.join(", "),
                action.name()
            ))),
        }
    }
}

/// The change `action` makes, or why the call's fields do not fit it (nothing is touched).
fn edit_of(fields: &mut EditFields, action: EditAction) -> Result<Change, ToolError> {
    let change: Change = match action {
        EditAction::Insert => {
            let Some(source) = fields.source.take() else {
                return Err(ToolError::invalid("action insert needs source"));
            };
            let cell = NewCell {
                cell_type: fields.cell_type.take().unwrap_or(CellType::Code),
                source,
                metadata: fields.metadata.take().unwrap_or_default(),
            };
            let index = fields.index.take();
            Box::new(move |notebook: &mut Notebook| {
                let (index, _) = notebook.insert(index, cell)?;
                Ok(Some(summary(notebook, index)))
            })
        }
        EditAction::Update => {
            let reference = cell_ref(fields.cell_id.take(), fields.index.take())?;
            let (source, metadata, cell_type) = (
                fields.source.take(),
                fields.metadata.take(),
                fields.cell_type.take(),
            );
            if source.is_none() && metadata.is_none() && cell_type.is_none() {
                return Err(ToolError::invalid(
                    "action update needs source, metadata and/or cell_type",
                ));
            }
            Box::new(move |notebook: &mut Notebook| {
                let index = notebook.locate(&reference)?;
                notebook.update(index, source, metadata, cell_type);
                Ok(Some(summary(notebook, index)))
            })
        }
        EditAction::Delete => {
            let reference = cell_ref(fields.cell_id.take(), fields.index.take())?;
            Box::new(move |notebook: &mut Notebook| {
                let index = notebook.locate(&reference)?;
                let cell = summary(notebook, index);
                notebook.delete(index);
                Ok(Some(cell))
            })
        }
        EditAction::Move => {
            let reference = cell_ref(fields.cell_id.take(), fields.index.take())?;
            let Some(to) = fields.to_index.take() else {
                return Err(ToolError::invalid("action move needs to_index"));
            };
            Box::new(move |notebook: &mut Notebook| {
                let from = notebook.locate(&reference)?;
                notebook.move_cell(from, to)?;
                Ok(Some(summary(notebook, to)))
            })
        }
        EditAction::ClearOutputs => {
            let reference = optional_cell_ref(fields.cell_id.take(), fields.index.take())?;
            Box::new(move |notebook: &mut Notebook| match reference {
                Some(reference) => {
                    let index = notebook.locate(&reference)?;
                    notebook.clear_outputs(index);
                    Ok(Some(summary(notebook, index)))
                }
                None => {
                    for index in 0..notebook.cells().len() {
                        notebook.clear_outputs(index);
                    }
                    Ok(None)
                }
            })
        }
        EditAction::SetMetadata => {
            let reference = optional_cell_ref(fields.cell_id.take(), fields.index.take())?;
            let Some(metadata) = fields.metadata.take() else {
                return Err(ToolError::invalid("action set_metadata needs metadata"));
            };
            Box::new(move |notebook: &mut Notebook| match reference {
                Some(reference) => {
                    let index = notebook.locate(&reference)?;
                    notebook.set_cell_metadata(index, metadata);
                    Ok(Some(summary(notebook, index)))
                }
                None => {
                    notebook.set_metadata(metadata);
                    Ok(None)
                }
            })
        }
    };
    fields.rest(action)?;
    Ok(change)
}
