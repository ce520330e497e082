//! Interop: the official Python MCP SDK (`mcp` from PyPI) calls every notebook tool of the real
//! binary, once per protocol family; the SDK validates each `structuredContent` against the
//! tool's `outputSchema`, so the schemas we advertise are the shapes we send.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn target_tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

#[tokio::test]
async fn the_python_sdk_validates_every_notebook_tool_result() {
    let cache = target_tmp().join("ipython-mcp-cache");
    // Its own directory: the SDK test of the other suites may pin another version.
    let (python, deps) = support::python_with("mcp==2.3.0", "mcp", "notebooks-sdk-deps").await;
    let workspace = tempfile::tempdir().expect("workspace root");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/notebooks_sdk_client.py");
    let output = Command::new(&python)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_ipython-mcp"))
        .env("PYTHONPATH", &deps)
        .env("IPYTHON_MCP_CACHE_DIR", &cache)
        .env("IPYTHON_MCP_WORKSPACE_ROOT", workspace.path())
        // Typed results for every tool, each checked against its schema by the SDK.
        .env("IPYTHON_MCP_STRUCTURED_OUTPUT", "always")
        .output()
        .expect("run the SDK client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "SDK client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let runs: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("json line"))
        .collect();
    assert_eq!(runs.len(), 2);
    for run in &runs {
        let calls = &run["calls"];
        let executed = &calls["notebook_execute_cell"][0];
        assert_eq!(executed["is_error"], false, "{run}");
        assert_eq!(executed["structured"]["result"]["text/plain"], "2");
        assert_eq!(executed["structured"]["saved"], true);
        assert_eq!(calls["notebook_execute"][0]["structured"]["stdout"], "nb\n");
        let read = &calls["notebook_read"][0]["structured"];
        assert_eq!(read["cell_count"], 3, "{run}");
        assert_eq!(
            read["cells"][1]["metadata"]["tags"],
            serde_json::json!(["t"])
        );
        assert_eq!(
            calls["notebook_read"][1]["structured"]["error"]["code"],
            "invalid_path"
        );
        let coerced = &calls["notebook_read"][2];
        assert_eq!(coerced["is_error"], false, "{run}");
        assert_eq!(
            coerced["structured"]["cells"].as_array().map(Vec::len),
            Some(1),
            "{run}"
        );
        assert_eq!(coerced["structured"]["next_index"], 1, "{run}");
        assert_eq!(
            calls["runtime_status"][0]["structured"]["kernel_id"],
            calls["notebook_session"][0]["structured"]["kernel"]
        );
        assert_eq!(
            calls["notebook_session_close"][0]["structured"]["stopped"],
            true
        );
        for tool in ["notebook_create", "notebook_revision", "notebook_session"] {
            assert_eq!(calls[tool][0]["is_error"], false, "{tool}: {run}");
        }
        let edits = calls["notebook_edit"].as_array().expect("edits");
        assert_eq!(edits.len(), 6, "{run}");
        for edit in edits {
            assert_eq!(edit["is_error"], false, "{edit}: {run}");
        }
    }
}
