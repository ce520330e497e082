//! What an OAuth access token must grant for each request (docs/src/http.md, "OAuth for
//! teams"): checked by the HTTP transport before the request reaches MCP.

use crate::surface::Access;

/// What an OAuth access token must grant (its `scope`) for a request: `execute` for anything
/// that reaches a kernel or reveals one (code, namespaces, kernels, dynamic tools, outputs,
/// tasks, the kernels resource), `notebooks:read` and `notebooks:write` for notebook files.
/// Writing a `.py` (percent) notebook needs `execute` too: it is a Python module in the
/// workspace, which the principal's kernels can import. Listing tools or resources needs none.
/// `message` is one JSON-RPC message.
pub fn required_scopes(message: &serde_json::Value) -> Vec<&'static str> {
    const EXECUTE: &str = "execute";
    const READ: &str = "notebooks:read";
    const WRITE: &str = "notebooks:write";
    let params = &message["params"];
    match message["method"].as_str().unwrap_or_default() {
        "tools/call" => {
            let tool = crate::surface::spec(params["name"].as_str().unwrap_or_default());
            // A dynamic tool (no row) reaches a kernel too.
            match tool.map_or(Access::Execute, |spec| spec.access) {
                Access::Execute => vec![EXECUTE],
                Access::ReadNotebook => vec![READ],
                Access::WriteNotebook if is_python_file(&params["arguments"]["path"]) => {
                    vec![WRITE, EXECUTE]
                }
                Access::WriteNotebook => vec![WRITE],
                Access::RunNotebook => vec![WRITE, EXECUTE],
            }
        }
        "resources/read" => match params["uri"].as_str().unwrap_or_default() {
            uri if uri.starts_with("notebook:") => vec![READ],
            // An execution's output; the output view's page itself is static.
            uri if uri.starts_with(crate::apps::EXECUTION_PREFIX) => vec![EXECUTE],
            // The caller's kernel sessions and the notebooks bound to them.
            crate::notebooks::KERNELS_URI => vec![EXECUTE],
            _ => Vec::new(),
        },
        method if method.starts_with("tasks/") => vec![EXECUTE],
        _ => Vec::new(),
    }
}

/// Whether a notebook path argument names a Python file (what is not a string names nothing:
/// the tool refuses it). Case-blind, as some file systems are.
fn is_python_file(path: &serde_json::Value) -> bool {
    path.as_str()
        .is_some_and(|path| path.trim_end().to_ascii_lowercase().ends_with(".py"))
}

/// Every scope [`required_scopes`] can ask for, as the protected resource metadata lists them.
pub const SCOPES: [&str; 3] = ["execute", "notebooks:read", "notebooks:write"];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn code_needs_execute_and_notebook_files_their_own_scopes() {
        let call = |name: &str| {
            required_scopes(&json!({"method": "tools/call", "params": {"name": name}}))
        };
        assert_eq!(call("execute"), ["execute"]);
        assert_eq!(call("some_dynamic_tool"), ["execute"]);
        assert_eq!(call("notebook_read"), ["notebooks:read"]);
        assert_eq!(call("notebook_edit"), ["notebooks:write"]);
        assert_eq!(call("notebook_execute"), ["notebooks:write", "execute"]);
        let write = |name: &str, path: &str| {
            required_scopes(
                &json!({"method": "tools/call", "params": {"name": name, "arguments": {"path": path}}}),
            )
        };
        assert_eq!(write("notebook_create", "a.ipynb"), ["notebooks:write"]);
        for python in ["ipykernel_launcher.py", "pkg/pandas.py", "X.PY", "a.py "] {
            assert_eq!(
                write("notebook_create", python),
                ["notebooks:write", "execute"]
            );
            assert_eq!(
                write("notebook_edit", python),
                ["notebooks:write", "execute"]
            );
        }
        let read = |uri: &str| {
            required_scopes(&json!({"method": "resources/read", "params": {"uri": uri}}))
        };
        assert_eq!(read("notebook:///a.ipynb"), ["notebooks:read"]);
        let execution = format!("{}abc", crate::apps::EXECUTION_PREFIX);
        assert_eq!(read(&execution), ["execute"]);
        assert!(read(crate::apps::VIEW_URI).is_empty());
        assert_eq!(read("ipython-mcp://kernels"), ["execute"]);
        assert!(read("ipython-mcp://capabilities").is_empty());
        assert!(required_scopes(&json!({"method": "tools/list"})).is_empty());
        assert_eq!(
            required_scopes(&json!({"method": "tasks/get"})),
            ["execute"]
        );
        for scope in ["execute", "notebooks:read", "notebooks:write"] {
            assert!(SCOPES.contains(&scope));
        }
    }
}
