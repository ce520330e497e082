//! Interop: the official Python MCP SDK (`mcp` from PyPI) drives the real binary over stdio,
//! once per protocol family (`legacy` = initialize handshake, `auto` = 2026-07-28 discover).
//! The SDK validates `structuredContent` against each tool's `outputSchema`, so this also
//! checks that our results match the schemas we advertise.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

fn target_tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

#[tokio::test]
async fn the_python_sdk_client_works_in_both_protocol_families() {
    let cache = target_tmp().join("ipython-mcp-cache");
    let resolver = ipython_mcp_env::Resolver {
        explicit_python: None,
        virtual_env: None,
        working_dir: target_tmp(),
        path_var: std::env::var_os("PATH"),
        cache_dir: cache.clone(),
        install_timeout: Duration::from_secs(600),
        named: None,
    };
    let python = resolver
        .resolve(&|_| {})
        .await
        .expect("provisioned python")
        .executable;
    let deps = target_tmp().join("mcp-sdk-deps");
    if !deps.join("mcp").is_dir() {
        let status = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "-q",
                "--target",
            ])
            .arg(&deps)
            .arg("mcp==2.3.0")
            .status()
            .expect("pip");
        assert!(status.success(), "installing the Python MCP SDK failed");
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python_sdk_client.py");
    let output = Command::new(&python)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_ipython-mcp"))
        .env("PYTHONPATH", &deps)
        .env("IPYTHON_MCP_CACHE_DIR", &cache)
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
    for (run, protocol) in runs.iter().zip(["2025-11-25", "2026-07-28"]) {
        assert_eq!(run["protocol"], protocol, "{run}");
        assert_eq!(
            run["tools"],
            serde_json::json!([
                "call_function",
                "execute",
                "get_output",
                "inspect",
                "interrupt",
                "kernel_discover",
                "kernel_list",
                "kernel_restart",
                "kernel_start",
                "kernel_stop",
                "list",
                "notebook_clear_outputs",
                "notebook_create",
                "notebook_delete_cell",
                "notebook_execute",
                "notebook_execute_cell",
                "notebook_insert_cell",
                "notebook_move_cell",
                "notebook_read",
                "notebook_revision",
                "notebook_session",
                "notebook_session_close",
                "notebook_set_metadata",
                "notebook_update_cell",
                "register_tool",
                "reload",
                "remove",
                "reset",
                "runtime_status",
                "search",
                "unregister_tool"
            ]),
            "{run}"
        );
        assert_eq!(run["output_schemas"], true);
        assert_eq!(run["state"], "ready");
        assert_eq!(run["result"], "42");
        assert_eq!(run["stdout"], "hello\n");
        assert_eq!(run["first_is_error"], false);
        assert!(
            run["text"][0].as_str().expect("text").contains("hello"),
            "{run}"
        );
        assert_eq!(run["failed_is_error"], true);
        assert_eq!(run["failed_code"], "execution_error");
        assert_eq!(run["failed_ename"], "ValueError");
        let progress = run["progress"].as_array().expect("progress");
        assert!(
            (2..=4).contains(&progress.len()),
            "about one notification a second: {progress:?}"
        );
        assert!(
            progress.iter().all(|update| update["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("step "))),
            "{progress:?}"
        );
        let values: Vec<f64> = progress
            .iter()
            .filter_map(|update| update["progress"].as_f64())
            .collect();
        assert!(
            values.windows(2).all(|pair| pair[0] < pair[1]),
            "progress increases: {values:?}"
        );
        let namespace = &run["namespace"];
        assert_eq!(
            namespace["list"][0]["structured"]["functions"][0]["name"], "double",
            "{run}"
        );
        assert_eq!(
            namespace["search"][0]["structured"]["results"][0]["name"],
            "table"
        );
        assert_eq!(
            namespace["inspect"][0]["structured"]["signature"],
            "(v: int) -> int"
        );
        assert_eq!(namespace["call_function"][0]["structured"]["result"], 42);
        assert_eq!(namespace["call_function"][1]["is_error"], true);
        assert_eq!(
            namespace["call_function"][1]["structured"]["error"]["code"],
            "invalid_arguments"
        );
        assert_eq!(
            namespace["reload"][0]["structured"]["results"][1]["error"]["code"],
            "module_not_found"
        );
        assert_eq!(
            namespace["remove"][0]["structured"]["refused"],
            serde_json::json!(["_x"])
        );
        assert_eq!(
            namespace["reset"][0]["structured"]["removed"],
            serde_json::json!(["double", "i", "time", "x"])
        );
        let background = &namespace["execute"][0]["structured"];
        assert_eq!(background["status"], "pending", "{run}");
        let finished = &namespace["get_output"][0]["structured"];
        assert_eq!(finished["finished"], true, "{run}");
        assert_eq!(finished["stdout"], "row 0\nrow 1\nrow 2\n");
        let page = &namespace["get_output"][1]["structured"]["page"];
        assert_eq!(page["total_matches"], 2, "{run}");
        assert_eq!(page["lines"][0]["line"], 2);
        assert_eq!(
            namespace["kernel_list"][0]["structured"]["kernels"][0]["kernel"],
            "default"
        );
        assert_eq!(namespace["kernel_discover"][0]["is_error"], false);
        assert_eq!(
            namespace["kernel_start"][0]["structured"]["kernel"], "second",
            "{run}"
        );
        assert_eq!(namespace["kernel_start"][0]["structured"]["ok"], true);
        assert_eq!(namespace["kernel_stop"][0]["structured"]["state"], "closed");
    }
}
