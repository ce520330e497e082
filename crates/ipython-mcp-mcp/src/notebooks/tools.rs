//! The notebook tools: argument checks and the calls that do the work, each body one `?`
//! chain whose refusal `answer` turns into the tool's result.

use crate::error::ToolResult;
use ipython_mcp_kernel::SessionId;
use ipython_mcp_notebook::{
    cell_id, joined_text, uri_for_path, CellRef, CellType, NewCell, Notebook,
};
use rmcp::handler::server::tool::schema_for_output;
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, RoleServer};
use serde_json::{Map, Value};

use super::params::{
    CellParams, ClearParams, CreateParams, ExecuteCellParams, InsertParams, MetadataParams,
    MoveParams, NotebookExecuteParams, PathParams, ReadParams, SessionParams, UpdateParams,
};
use super::save::{Run, SaveCell};
use super::views::{
    cell_type_of, read_result, shown, summary, CloseResult, NotebookExecuteResult, ReadResult,
    ReadScope, RevisionResult, SessionResult, WriteResult,
};
use super::{
    cell_ref, optional_cell_ref, structured, ToolError, DEFAULT_READ_CELLS, MAX_READ_CELLS,
};
use crate::argument::Parameters;
use crate::server::{IpythonMcp, MAX_CODE_BYTES};

#[tool_router(router = notebooks_router, vis = "pub(crate)")]
impl IpythonMcp {
    #[tool(
        name = "notebook_create",
        description = "Create a Jupyter notebook (.ipynb, nbformat 4.5; or a jupytext py:percent script when the path ends in .py: sources and metadata, no outputs) at a path relative to the workspace root, optionally with initial cells, and return its revision. The kernel it records (`kernel_name`, default python3) is the kernel its cells run in. Fails with notebook_exists if the file exists, unless `overwrite` (then `expected_revision` guards the replaced file). Use notebook_insert_cell to add cells to an existing notebook.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Create a notebook", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn notebook_create(&self, Parameters(params): Parameters<CreateParams>) -> ToolResult {
        let (workspace, path) = self.notebook_path(&params.path).await?;
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
            notebook.insert(None, cell.into())?;
        }
        let cell_count = notebook.cells().len();
        let relative = path.relative.clone();
        let (overwrite, expected) = (params.overwrite, params.expected_revision);
        let revision = Self::blocking(move || {
            workspace.create(&path, &notebook, overwrite, expected.as_deref())
        })
        .await?;
        tracing::info!(tool = "notebook_create", "tool call");
        Ok(structured(
            "notebook_create",
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
        description = "Read a notebook as structured data: its revision (pass it as expected_revision to later edits), metadata (kernelspec …), and its cells with index, stable id, type, source, metadata and execution count; saved outputs too with include_outputs (text bounded, images described rather than returned). Give cell_id or index to read one cell; otherwise cells from start_index, at most max_cells and bounded in characters — continue from `next_index`. Read-only.",
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
        let (_workspace, path, loaded) = self.load(&params.path, None).await?;
        let scope = ReadScope {
            only,
            start_index: params.start_index.unwrap_or(0),
            max_cells,
            include_outputs: params.include_outputs,
        };
        let read = read_result(path.relative, loaded, &scope, &self.config().limits)?;
        tracing::info!(
            tool = "notebook_read",
            cells = read.cells.len(),
            "tool call"
        );
        Ok(structured("notebook_read", &read))
    }

    #[tool(
        name = "notebook_revision",
        description = "Return a notebook's current revision (SHA-256 of the file's bytes) without reading its cells: cheap, to check whether it changed since you read it or to get an expected_revision for an edit. Read-only; works on any file size, and on a file another program is editing.",
        output_schema = schema_for_output::<RevisionResult>(),
        annotations(title = "Notebook revision", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_revision(&self, Parameters(params): Parameters<PathParams>) -> ToolResult {
        let (workspace, path) = self.notebook_path(&params.path).await?;
        let relative = path.relative.clone();
        let (revision, bytes) = Self::blocking(move || workspace.revision_and_size(&path)).await?;
        Ok(structured(
            "notebook_revision",
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
        name = "notebook_insert_cell",
        description = "Add a cell (code by default, or markdown/raw) to a notebook: at `index` (0-based; later cells move down) or appended when index is omitted. The new cell gets a stable id, returned with the new revision. Does not run it: notebook_execute_cell runs an existing cell, notebook_execute runs code and saves it as a new cell in one step.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Insert a cell", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn notebook_insert_cell(
        &self,
        Parameters(params): Parameters<InsertParams>,
    ) -> ToolResult {
        let cell = NewCell {
            cell_type: params.cell_type.unwrap_or(CellType::Code),
            source: params.source,
            metadata: params.metadata.unwrap_or_default(),
        };
        let index = params.index;
        let change = move |notebook: &mut Notebook| {
            let (index, _) = notebook.insert(index, cell)?;
            Ok(Some(summary(notebook, index)))
        };
        self.edit(
            "notebook_insert_cell",
            params.path,
            params.expected_revision,
            change,
        )
        .await
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
    ) -> ToolResult {
        let reference = cell_ref(params.cell_id, params.index)?;
        if params.source.is_none() && params.metadata.is_none() && params.cell_type.is_none() {
            return Err(ToolError::invalid(
                "give source, metadata and/or cell_type to change",
            ));
        }
        let (source, metadata, cell_type) = (params.source, params.metadata, params.cell_type);
        let change = move |notebook: &mut Notebook| {
            let index = notebook.locate(&reference)?;
            notebook.update(index, source, metadata, cell_type);
            Ok(Some(summary(notebook, index)))
        };
        self.edit(
            "notebook_update_cell",
            params.path,
            params.expected_revision,
            change,
        )
        .await
    }

    #[tool(
        name = "notebook_delete_cell",
        description = "Delete one cell (by cell_id or index) from a notebook; later cells move up. Returns the new revision and the deleted cell's id and type. Cannot be undone except by re-inserting the cell (which gets a new id). To empty a cell's outputs but keep it, use notebook_clear_outputs instead.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Delete a cell", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn notebook_delete_cell(&self, Parameters(params): Parameters<CellParams>) -> ToolResult {
        let reference = cell_ref(params.cell_id, params.index)?;
        let change = move |notebook: &mut Notebook| {
            let index = notebook.locate(&reference)?;
            let cell = summary(notebook, index);
            notebook.delete(index);
            Ok(Some(cell))
        };
        self.edit(
            "notebook_delete_cell",
            params.path,
            params.expected_revision,
            change,
        )
        .await
    }

    #[tool(
        name = "notebook_move_cell",
        description = "Move one cell (by cell_id or index) so that it ends up at `to_index`; its id, source and outputs go with it, and the cells in between shift by one. Use it to reorder a notebook without deleting and re-inserting cells (which would give them new ids). Returns the new revision and the cell's new index.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Move a cell", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_move_cell(&self, Parameters(params): Parameters<MoveParams>) -> ToolResult {
        let reference = cell_ref(params.cell_id, params.index)?;
        let to = params.to_index;
        let change = move |notebook: &mut Notebook| {
            let from = notebook.locate(&reference)?;
            notebook.move_cell(from, to)?;
            Ok(Some(summary(notebook, to)))
        };
        self.edit(
            "notebook_move_cell",
            params.path,
            params.expected_revision,
            change,
        )
        .await
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
    ) -> ToolResult {
        let reference = optional_cell_ref(params.cell_id, params.index)?;
        let change = move |notebook: &mut Notebook| match reference {
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
        };
        self.edit(
            "notebook_clear_outputs",
            params.path,
            params.expected_revision,
            change,
        )
        .await
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
    ) -> ToolResult {
        let reference = optional_cell_ref(params.cell_id, params.index)?;
        let metadata = params.metadata;
        let change = move |notebook: &mut Notebook| match reference {
            Some(reference) => {
                let index = notebook.locate(&reference)?;
                notebook.set_cell_metadata(index, metadata);
                Ok(Some(summary(notebook, index)))
            }
            None => {
                notebook.set_metadata(metadata);
                Ok(None)
            }
        };
        self.edit(
            "notebook_set_metadata",
            params.path,
            params.expected_revision,
            change,
        )
        .await
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
    ) -> ToolResult {
        let reference = cell_ref(params.cell_id, params.index)?;
        let timeout = self.check_timeout(params.timeout_seconds)?;
        let (workspace, path, loaded) = self.load(&params.path, params.expected_revision).await?;
        let index = loaded.notebook.locate(&reference)?;
        let cell = &loaded.notebook.cells()[index];
        if cell_type_of(cell) != "code" {
            return Err(ToolError::invalid(format!(
                "cell {index} is a {} cell; only code cells run",
                cell.get("cell_type").and_then(Value::as_str).unwrap_or("?")
            )));
        }
        let code = joined_text(cell.get("source"));
        // Found again by id after the run when it has one (ids are assigned on the first
        // write of an older notebook; its index is then still valid, the revision being
        // unchanged).
        let target = match cell_id(cell) {
            Some(id) => CellRef::Id(id.to_owned()),
            None => CellRef::Index(index),
        };
        let save: SaveCell = Box::new(move |notebook, execution_count, outputs| {
            let index = notebook.locate(&target)?;
            notebook.set_outputs(index, execution_count, outputs);
            Ok(index)
        });
        let run = Run {
            tool: "notebook_execute_cell",
            workspace,
            path,
            kernel_name: loaded.notebook.kernel_name().map(str::to_owned),
            revision: loaded.revision,
            code,
            timeout,
            save: Some(save),
        };
        self.run_and_save(run, &context).await
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
    ) -> ToolResult {
        if params.code.len() > MAX_CODE_BYTES {
            return Err(ToolError::invalid(format!(
                "code is {} bytes; the limit is {MAX_CODE_BYTES} bytes",
                params.code.len()
            )));
        }
        let timeout = self.check_timeout(params.timeout_seconds)?;
        let (workspace, path, loaded) = self.load(&params.path, params.expected_revision).await?;
        let length = loaded.notebook.cells().len();
        if let Some(index) = params.index.filter(|index| *index > length) {
            return Err(ToolError::invalid(format!(
                "index {index} is past the end (the notebook has {length} cells)"
            )));
        }
        let save = params.persist.then(|| {
            let (code, position) = (params.code.clone(), params.index);
            let save: SaveCell = Box::new(move |notebook, execution_count, outputs| {
                let cell = NewCell {
                    cell_type: CellType::Code,
                    source: code,
                    metadata: Map::new(),
                };
                let (index, _) = notebook.insert(position, cell)?;
                notebook.set_outputs(index, execution_count, outputs);
                Ok(index)
            });
            save
        });
        let run = Run {
            tool: "notebook_execute",
            workspace,
            path,
            kernel_name: loaded.notebook.kernel_name().map(str::to_owned),
            revision: loaded.revision,
            code: params.code,
            timeout,
            save,
        };
        self.run_and_save(run, &context).await
    }

    #[tool(
        name = "notebook_session",
        description = "Get the kernel session that runs a notebook's cells, starting it if it has none (from the notebook's metadata.kernelspec: python3 runs on the server's Python, other names must be registered kernelspecs). Each notebook gets its own session by default, reused by every notebook_execute(_cell). Pass `kernel` to bind the notebook to an existing session instead, e.g. another notebook's, to share variables. The returned `kernel` id works with interrupt, kernel_restart and runtime_status; notebook_session_close releases it.",
        output_schema = schema_for_output::<SessionResult>(),
        annotations(title = "Notebook session", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn notebook_session(&self, Parameters(params): Parameters<SessionParams>) -> ToolResult {
        let (workspace, path, kernel, handle, started) = match params.kernel {
            Some(kernel) => {
                let (workspace, path) = self.notebook_path(&params.path).await?;
                let handle = self.kernels().get(Some(&kernel))?;
                self.kernels()
                    .bind_notebook(path.absolute.clone(), SessionId::parse(&kernel)?);
                (workspace, path, kernel, handle, false)
            }
            None => {
                let (workspace, path, loaded) = self.load(&params.path, None).await?;
                let kernel_name = loaded.notebook.kernel_name().map(str::to_owned);
                let session = self.session_of(&path, kernel_name).await?;
                (
                    workspace,
                    path,
                    session.id.into(),
                    session.handle,
                    session.started,
                )
            }
        };
        let shared_with = self
            .kernels()
            .notebooks_of(&kernel)
            .into_iter()
            .filter(|other| *other != path.absolute)
            .map(|other| shown(workspace.root(), &other))
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
    ) -> ToolResult {
        let (_workspace, path) = self.notebook_path(&params.path).await?;
        let released = self.kernels().unbind_notebook(&path.absolute);
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
        tracing::info!(tool = "notebook_session_close", stopped, "tool call");
        Ok(structured(
            "notebook_session_close",
            &CloseResult {
                ok: true,
                path: path.relative,
                kernel: released.map(|(kernel, _)| kernel.into()),
                stopped,
            },
        ))
    }
}
