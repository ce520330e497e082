//! What agents and users read, pinned as reviewed snapshots: every tool's name, description,
//! input and output schema as `tools/list` gives them, and `--help`. A change to any of it
//! fails here until the new snapshot is accepted (`INSTA_UPDATE=always cargo test -p
//! ipython-mcp --test surface`, then review the diff of `tests/snapshots/` like code).

mod support;

use support::{Family, Server};

#[tokio::test]
async fn tools_list_is_the_reviewed_surface() {
    // No kernel is needed to list the built-in tools (dynamic ones need a registration).
    let server = Server::start_unready(Family::Handshake, &[]).await;
    let tools = server.client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "tools/list is in name order");
    insta::assert_json_snapshot!("tools_list", tools);
    server.stop().await;
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
