//! What agents and users read, pinned as reviewed snapshots: every tool's name, description,
//! input and output schema as `tools/list` gives them, and `--help`. A change to any of it
//! fails here until the new snapshot is accepted (`INSTA_UPDATE=always cargo test -p
//! ipython-mcp --features e2e --test it surface`, then review the diff of `tests/it/snapshots/`
//! like code).

use crate::support;

use support::{Family, Server};

/// The default result shape, which is what agents read.
const AUTO: (&str, &str) = ("IPYTHON_MCP_STRUCTURED_OUTPUT", "auto");

#[tokio::test]
async fn tools_list_is_the_reviewed_surface() {
    // No kernel is needed to list the built-in tools (dynamic ones need a registration).
    let server = Server::start_unready(Family::Handshake, &[AUTO]).await;
    let tools = server.client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "tools/list is in name order");
    for tool in &tools {
        assert!(
            tool.description
                .as_deref()
                .is_some_and(|text| !text.is_empty()),
            "{} has a description",
            tool.name
        );
        let properties = tool
            .input_schema
            .get("properties")
            .and_then(|p| p.as_object());
        for (field, schema) in properties.into_iter().flatten() {
            // A wrapped doc comment would reach the model as a stray line break.
            assert!(
                schema
                    .get("description")
                    .and_then(|d| d.as_str())
                    .is_some_and(|d| !d.is_empty() && !d.contains('\n')),
                "{}.{field} has a one-line description",
                tool.name
            );
        }
    }
    insta::assert_json_snapshot!("tools_list", tools);
    server.stop().await;
}

/// What the default `tools/list` costs: in all, and the part a model reads in every
/// conversation (each tool's name, description and input schema). docs/src/tools.md, "What the
/// tool list costs", gives the figures per toolset.
#[tokio::test]
async fn tools_list_fits_its_context_budget() {
    const MAX_TOTAL_BYTES: usize = 45 * 1024;
    const MAX_MODEL_FACING_BYTES: usize = 15 * 1024;
    let server = Server::start_unready(Family::Handshake, &[AUTO]).await;
    let tools = server.client.list_all_tools().await.expect("tools/list");
    server.stop().await;
    let total = serde_json::to_vec(&serde_json::json!({ "tools": tools }))
        .expect("serialize")
        .len();
    let model_facing: usize = tools
        .iter()
        .map(|tool| {
            serde_json::to_vec(&serde_json::json!({
                "name": tool.name,
                "description": tool.description,
                "inputSchema": tool.input_schema,
            }))
            .expect("serialize")
            .len()
        })
        .sum();
    // The test's report (shown with --nocapture), not server output.
    eprintln!(
        "tools/list: {} tools, {total} bytes in all, {model_facing} bytes model-facing",
        tools.len()
    );
    assert!(total <= MAX_TOTAL_BYTES, "tools/list is {total} bytes");
    assert!(
        model_facing <= MAX_MODEL_FACING_BYTES,
        "the model-facing part of tools/list is {model_facing} bytes"
    );
}

#[test]
fn help_is_the_reviewed_text() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ipython-mcp"))
        .arg("--help")
        .env_clear()
        .output()
        .expect("run --help");
    assert!(output.status.success(), "{output:?}");
    assert!(output.stderr.is_empty(), "{output:?}");
    insta::assert_snapshot!("help", String::from_utf8(output.stdout).expect("utf-8"));
}
