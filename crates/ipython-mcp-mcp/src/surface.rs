//! What the server knows about its built-in tools by name: the toolset each belongs to, and
//! which ones run code (their results carry images, and the output view shows them).

/// The toolset a built-in tool belongs to (`None`: a core tool, always offered).
pub(crate) fn toolset_of(tool: &str) -> Option<&'static str> {
    match tool {
        "list" | "search" | "inspect" | "call_function" | "reload" | "remove" | "reset" => {
            Some("namespace")
        }
        "kernel_discover" | "kernel_start" | "kernel_list" | "kernel_stop" => Some("kernels"),
        "register_tool" | "unregister_tool" => Some("dynamic"),
        name if name.starts_with("notebook_") => Some("notebooks"),
        _ => None,
    }
}

/// Tools whose results can carry images. With `StructuredOutput::Auto` they declare no output
/// schema and answer with their text block and images only: most clients show the model the
/// JSON of `structuredContent` instead of the text when it is present, and Codex and opencode
/// then drop the images (docs/src/guide.md, "What the model reads").
pub(crate) const IMAGE_TOOLS: [&str; 4] = [
    "execute",
    "get_output",
    "notebook_execute",
    "notebook_execute_cell",
];
