//! What the MCP surface offers an agent: the toolsets, and which results carry
//! `structuredContent`.

use crate::error::Error;
use crate::parse::bounded;
use crate::settings::{RawConfig, STRUCTURED_OUTPUT};

/// Which groups of tools are offered besides the core ones (`execute`, `get_output`,
/// `interrupt`, `runtime_status`, `kernel_restart`): fewer tools cost an agent less context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Toolsets {
    /// list, search, inspect, call_function, reload, remove, reset.
    pub namespace: bool,
    /// kernel_discover, kernel_start, kernel_list, kernel_stop.
    pub kernels: bool,
    /// register_tool, unregister_tool.
    pub dynamic: bool,
    /// notebook_*.
    pub notebooks: bool,
}

impl Default for Toolsets {
    fn default() -> Self {
        Toolsets {
            namespace: true,
            kernels: true,
            dynamic: true,
            notebooks: true,
        }
    }
}

impl Toolsets {
    /// The toolset names, as the setting spells them.
    pub const NAMES: [&'static str; 4] = ["namespace", "kernels", "dynamic", "notebooks"];

    pub(crate) fn parse(raw: &str) -> Result<Toolsets, String> {
        let mut sets = Toolsets {
            namespace: false,
            kernels: false,
            dynamic: false,
            notebooks: false,
        };
        let mut any = false;
        for name in raw
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
        {
            any = true;
            match name {
                "all" => sets = Toolsets::default(),
                "namespace" => sets.namespace = true,
                "kernels" => sets.kernels = true,
                "dynamic" => sets.dynamic = true,
                "notebooks" => sets.notebooks = true,
                other => {
                    return Err(format!(
                        "unknown toolset {:?}; choose from all, {}",
                        bounded(other),
                        Self::NAMES.join(", ")
                    ))
                }
            }
        }
        if !any {
            return Err("must name at least one toolset (or all)".to_owned());
        }
        Ok(sets)
    }
}

/// Which tool results carry `structuredContent` (docs/src/guide.md, "What the model reads").
///
/// Most clients show their model the JSON of `structuredContent` instead of the text blocks
/// when it is present, and some then drop the images: so tools whose results can carry images
/// answer with text and images only unless typed results are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StructuredOutput {
    /// Image-bearing tools: no output schema, a text block written for the model and the
    /// images. Every other tool: a compact `structuredContent` with its schema.
    #[default]
    Auto,
    /// Every tool declares its output schema and returns its full `structuredContent`.
    Always,
}

pub(crate) fn structured_output(raw: &RawConfig) -> Result<StructuredOutput, Error> {
    match raw
        .get(STRUCTURED_OUTPUT)
        .unwrap_or(STRUCTURED_OUTPUT.default)
        .trim()
    {
        "auto" => Ok(StructuredOutput::Auto),
        "always" => Ok(StructuredOutput::Always),
        other => Err(Error::Invalid {
            env: STRUCTURED_OUTPUT.env,
            flag: STRUCTURED_OUTPUT.flag,
            problem: format!("must be auto or always, got {:?}", bounded(other)),
        }),
    }
}
