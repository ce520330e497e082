//! What the server knows about each built-in tool beside its route, in one table: the toolset
//! that offers it, what an OAuth token must grant to call it, whether its results carry
//! images, and the shape of its refusals. Each row is a constant (`EXECUTE`, `NOTEBOOK_READ`,
//! …) that the tools pass around as `&'static ToolSpec`; a name a client or the router sends
//! becomes its row in `spec` alone. Every decision about a tool reads its row; nothing else
//! compares tool names. A test checks that the router and the table name the same tools.

use ipython_mcp_config::Toolsets;

/// One built-in tool's traits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ToolSpec {
    pub name: &'static str,
    /// The toolset that offers it (`None`: a core tool, always offered).
    pub toolset: Option<Toolset>,
    /// What an OAuth access token must grant to call it.
    pub access: Access,
    /// It runs code, so its results can carry images. With `StructuredOutput::Auto` it
    /// declares no output schema and answers with its text block and images only: most
    /// clients show the model the JSON of `structuredContent` instead of the text when it is
    /// present, and Codex and opencode then drop the images (docs/src/guide.md, "What the model
    /// reads").
    /// MCP Apps clients show its results in the output view.
    pub returns_images: bool,
    /// Invalid arguments are refused in the shape of an `execute` result (status `rejected`),
    /// not as a bare error.
    pub refused_as_execution: bool,
}

/// A toolset the configuration can leave out (`IPYTHON_MCP_TOOLSETS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Toolset {
    Namespace,
    Kernels,
    Dynamic,
    Notebooks,
}

impl Toolset {
    pub(crate) fn offered(self, toolsets: &Toolsets) -> bool {
        match self {
            Toolset::Namespace => toolsets.namespace,
            Toolset::Kernels => toolsets.kernels,
            Toolset::Dynamic => toolsets.dynamic,
            Toolset::Notebooks => toolsets.notebooks,
        }
    }
}

/// What a call needs of an OAuth access token's scopes (see `scopes.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// It reaches a kernel or reveals one: `execute`.
    Execute,
    /// It reads notebook files: `notebooks:read`.
    ReadNotebook,
    /// It writes notebook files: `notebooks:write`, and `execute` too for a `.py` notebook
    /// (a module the principal's kernels can import).
    WriteNotebook,
    /// It runs a notebook's code and saves the outputs: `notebooks:write` and `execute`.
    RunNotebook,
}

impl ToolSpec {
    const fn core(name: &'static str) -> ToolSpec {
        ToolSpec {
            name,
            toolset: None,
            access: Access::Execute,
            returns_images: false,
            refused_as_execution: false,
        }
    }

    const fn of(toolset: Toolset, name: &'static str) -> ToolSpec {
        ToolSpec {
            toolset: Some(toolset),
            ..ToolSpec::core(name)
        }
    }

    const fn notebook(name: &'static str, access: Access) -> ToolSpec {
        ToolSpec {
            access,
            ..ToolSpec::of(Toolset::Notebooks, name)
        }
    }

    const fn with_images(self) -> ToolSpec {
        ToolSpec {
            returns_images: true,
            ..self
        }
    }

    const fn refused_as_execution(self) -> ToolSpec {
        ToolSpec {
            refused_as_execution: true,
            ..self
        }
    }
}

use Toolset::{Dynamic, Kernels, Namespace};

// One constant per built-in tool: the code names a tool through its row (`surface::EXECUTE`),
// so a tool's name is spelled here and in its `#[tool(name = …)]` attribute only, which
// `every_route_has_exactly_one_spec` holds together.

pub(crate) const EXECUTE: &ToolSpec = &ToolSpec::core("execute")
    .with_images()
    .refused_as_execution();
pub(crate) const GET_OUTPUT: &ToolSpec = &ToolSpec::core("get_output").with_images();
pub(crate) const INTERRUPT: &ToolSpec = &ToolSpec::core("interrupt");
pub(crate) const RUNTIME_STATUS: &ToolSpec = &ToolSpec::core("runtime_status");
pub(crate) const KERNEL_RESTART: &ToolSpec = &ToolSpec::core("kernel_restart");
pub(crate) const LIST: &ToolSpec = &ToolSpec::of(Namespace, "list");
pub(crate) const SEARCH: &ToolSpec = &ToolSpec::of(Namespace, "search");
pub(crate) const INSPECT: &ToolSpec = &ToolSpec::of(Namespace, "inspect");
pub(crate) const CALL_FUNCTION: &ToolSpec = &ToolSpec::of(Namespace, "call_function");
pub(crate) const RELOAD: &ToolSpec = &ToolSpec::of(Namespace, "reload");
pub(crate) const REMOVE: &ToolSpec = &ToolSpec::of(Namespace, "remove");
pub(crate) const RESET: &ToolSpec = &ToolSpec::of(Namespace, "reset");
pub(crate) const KERNEL_DISCOVER: &ToolSpec = &ToolSpec::of(Kernels, "kernel_discover");
pub(crate) const KERNEL_START: &ToolSpec = &ToolSpec::of(Kernels, "kernel_start");
pub(crate) const KERNEL_LIST: &ToolSpec = &ToolSpec::of(Kernels, "kernel_list");
pub(crate) const KERNEL_STOP: &ToolSpec = &ToolSpec::of(Kernels, "kernel_stop");
pub(crate) const REGISTER_TOOL: &ToolSpec = &ToolSpec::of(Dynamic, "register_tool");
pub(crate) const UNREGISTER_TOOL: &ToolSpec = &ToolSpec::of(Dynamic, "unregister_tool");
pub(crate) const NOTEBOOK_READ: &ToolSpec =
    &ToolSpec::notebook("notebook_read", Access::ReadNotebook);
pub(crate) const NOTEBOOK_REVISION: &ToolSpec =
    &ToolSpec::notebook("notebook_revision", Access::ReadNotebook);
pub(crate) const NOTEBOOK_CREATE: &ToolSpec =
    &ToolSpec::notebook("notebook_create", Access::WriteNotebook);
pub(crate) const NOTEBOOK_EDIT: &ToolSpec =
    &ToolSpec::notebook("notebook_edit", Access::WriteNotebook);
pub(crate) const NOTEBOOK_EXECUTE: &ToolSpec =
    &ToolSpec::notebook("notebook_execute", Access::RunNotebook).with_images();
pub(crate) const NOTEBOOK_EXECUTE_CELL: &ToolSpec =
    &ToolSpec::notebook("notebook_execute_cell", Access::RunNotebook).with_images();
pub(crate) const NOTEBOOK_SESSION: &ToolSpec =
    &ToolSpec::notebook("notebook_session", Access::Execute);
pub(crate) const NOTEBOOK_SESSION_CLOSE: &ToolSpec =
    &ToolSpec::notebook("notebook_session_close", Access::Execute);

/// Every built-in tool, once.
pub(crate) const TOOLS: [&ToolSpec; 26] = [
    EXECUTE,
    GET_OUTPUT,
    INTERRUPT,
    RUNTIME_STATUS,
    KERNEL_RESTART,
    LIST,
    SEARCH,
    INSPECT,
    CALL_FUNCTION,
    RELOAD,
    REMOVE,
    RESET,
    KERNEL_DISCOVER,
    KERNEL_START,
    KERNEL_LIST,
    KERNEL_STOP,
    REGISTER_TOOL,
    UNREGISTER_TOOL,
    NOTEBOOK_READ,
    NOTEBOOK_REVISION,
    NOTEBOOK_CREATE,
    NOTEBOOK_EDIT,
    NOTEBOOK_EXECUTE,
    NOTEBOOK_EXECUTE_CELL,
    NOTEBOOK_SESSION,
    NOTEBOOK_SESSION_CLOSE,
];

/// The row of the built-in tool a client or the router names (`None`: a dynamic tool, or no
/// tool). The one place a name becomes a tool: past it, code holds the `&'static ToolSpec`.
pub(crate) fn spec(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().copied().find(|spec| spec.name == name)
}

/// The row of a route of the built-in router.
pub(crate) fn of_route(name: &str) -> &'static ToolSpec {
    spec(name).expect("every route has its row in surface::TOOLS")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::IpythonMcp;

    #[test]
    fn every_route_has_exactly_one_spec() {
        let routes: BTreeSet<String> = IpythonMcp::built_in_tools()
            .list_all()
            .into_iter()
            .map(|tool| tool.name.into_owned())
            .collect();
        let specs: Vec<String> = TOOLS.iter().map(|spec| spec.name.to_owned()).collect();
        let unique: BTreeSet<String> = specs.iter().cloned().collect();
        assert_eq!(unique.len(), specs.len(), "a tool has two rows: {specs:?}");
        assert_eq!(routes, unique, "the router and the table disagree");
    }
}
