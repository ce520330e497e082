//! What the server knows about each built-in tool beside its route, in one table: the toolset
//! that offers it, what an OAuth token must grant to call it, whether its results carry
//! images, and the shape of its refusals. Every decision about a tool reads its row; nothing
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
}

use Toolset::{Dynamic, Kernels, Namespace};

/// Every built-in tool, once.
pub(crate) const TOOLS: [ToolSpec; 26] = [
    ToolSpec {
        refused_as_execution: true,
        ..ToolSpec::core("execute").with_images()
    },
    ToolSpec::core("get_output").with_images(),
    ToolSpec::core("interrupt"),
    ToolSpec::core("runtime_status"),
    ToolSpec::core("kernel_restart"),
    ToolSpec::of(Namespace, "list"),
    ToolSpec::of(Namespace, "search"),
    ToolSpec::of(Namespace, "inspect"),
    ToolSpec::of(Namespace, "call_function"),
    ToolSpec::of(Namespace, "reload"),
    ToolSpec::of(Namespace, "remove"),
    ToolSpec::of(Namespace, "reset"),
    ToolSpec::of(Kernels, "kernel_discover"),
    ToolSpec::of(Kernels, "kernel_start"),
    ToolSpec::of(Kernels, "kernel_list"),
    ToolSpec::of(Kernels, "kernel_stop"),
    ToolSpec::of(Dynamic, "register_tool"),
    ToolSpec::of(Dynamic, "unregister_tool"),
    ToolSpec::notebook("notebook_read", Access::ReadNotebook),
    ToolSpec::notebook("notebook_revision", Access::ReadNotebook),
    ToolSpec::notebook("notebook_create", Access::WriteNotebook),
    ToolSpec::notebook("notebook_edit", Access::WriteNotebook),
    ToolSpec::notebook("notebook_execute", Access::RunNotebook).with_images(),
    ToolSpec::notebook("notebook_execute_cell", Access::RunNotebook).with_images(),
    ToolSpec::notebook("notebook_session", Access::Execute),
    ToolSpec::notebook("notebook_session_close", Access::Execute),
];

/// The row of built-in tool `name` (`None`: a dynamic tool, or no tool).
pub(crate) fn spec(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|spec| spec.name == name)
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
