//! Toolsets: a configuration that leaves a toolset out removes exactly its tools (those of
//! `surface::TOOLS` in that toolset) from `tools/list`, and a call to one of them is a
//! protocol error, as for any tool the server does not have; the core tools stay.

use std::collections::BTreeSet;

use ipython_mcp_config::Toolsets;

use super::*;
use crate::surface::{Toolset, TOOLS};

const EVERY: Toolsets = Toolsets {
    namespace: true,
    kernels: true,
    dynamic: true,
    notebooks: true,
};

const NONE: Toolsets = Toolsets {
    namespace: false,
    kernels: false,
    dynamic: false,
    notebooks: false,
};

/// The names `tools/list` offers on a server with `toolsets`.
async fn offered(toolsets: Toolsets) -> BTreeSet<String> {
    let server = Setup::new(StructuredOutput::Auto)
        .toolsets(toolsets)
        .start()
        .await;
    server
        .tools()
        .await
        .into_iter()
        .map(|tool| tool.name.into_owned())
        .collect()
}

/// The tools of the table in `toolset` (`None`: the core tools).
fn table(toolset: Option<Toolset>) -> BTreeSet<String> {
    TOOLS
        .iter()
        .filter(|spec| spec.toolset == toolset)
        .map(|spec| spec.name.to_owned())
        .collect()
}

/// Checks that leaving `toolset` out (by `without`) removes exactly its tools, which must be
/// `expected`, and that each is then an unknown tool to `tools/call`.
async fn check_without(without: Toolsets, toolset: Toolset, expected: &[&str]) {
    let gone = table(Some(toolset));
    let expected: BTreeSet<String> = expected.iter().map(|name| (*name).to_owned()).collect();
    assert_eq!(gone, expected, "the table's {toolset:?} toolset");
    let all = offered(EVERY).await;
    let left = offered(without).await;
    assert_eq!(
        all.difference(&left).cloned().collect::<BTreeSet<_>>(),
        gone,
        "removed"
    );
    assert!(left.is_subset(&all));
    let server = Setup::new(StructuredOutput::Always)
        .toolsets(without)
        .start()
        .await;
    for tool in &gone {
        assert_unknown(&server, tool).await;
    }
}

/// `tools/call` of `tool` is a JSON-RPC invalid-params error saying the tool is not found.
async fn assert_unknown(server: &Connected, tool: &str) {
    let request =
        CallToolRequestParams::new(tool.to_owned()).with_arguments(serde_json::Map::new());
    match server.client.peer().call_tool_once(request).await {
        Err(rmcp::ServiceError::McpError(error)) => {
            assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{tool}");
            assert_eq!(error.message, format!("tool not found: {tool}"));
        }
        other => panic!("{tool}: a protocol error, not {other:?}"),
    }
}

#[tokio::test]
async fn every_toolset_offers_exactly_the_tools_of_the_table() {
    let all: BTreeSet<String> = TOOLS.iter().map(|spec| spec.name.to_owned()).collect();
    assert_eq!(offered(EVERY).await, all);
    assert_eq!(
        offered(Toolsets::default()).await,
        all,
        "every toolset by default"
    );
}

#[tokio::test]
async fn without_namespace_its_seven_tools_are_gone() {
    let without = Toolsets {
        namespace: false,
        ..EVERY
    };
    let names = [
        "list",
        "search",
        "inspect",
        "call_function",
        "reload",
        "remove",
        "reset",
    ];
    check_without(without, Toolset::Namespace, &names).await;
}

#[tokio::test]
async fn without_kernels_its_four_tools_are_gone_and_get_output_stays() {
    let without = Toolsets {
        kernels: false,
        ..EVERY
    };
    let names = [
        "kernel_discover",
        "kernel_start",
        "kernel_list",
        "kernel_stop",
    ];
    check_without(without, Toolset::Kernels, &names).await;
    // get_output is routed with the kernels toolset but is a core tool: it stays, and works.
    assert!(offered(without).await.contains("get_output"));
    let server = Setup::new(StructuredOutput::Always)
        .toolsets(without)
        .start()
        .await;
    server.call("execute", json!({"code": "x = 1"})).await;
    let latest = server.call("get_output", json!({})).await;
    assert_eq!(structured(&latest)["stdout"], "x = 1\n");
}

#[tokio::test]
async fn without_dynamic_register_and_unregister_are_gone() {
    let without = Toolsets {
        dynamic: false,
        ..EVERY
    };
    check_without(
        without,
        Toolset::Dynamic,
        &["register_tool", "unregister_tool"],
    )
    .await;
}

#[tokio::test]
async fn without_notebooks_the_eight_notebook_tools_are_gone() {
    let without = Toolsets {
        notebooks: false,
        ..EVERY
    };
    let names = [
        "notebook_read",
        "notebook_revision",
        "notebook_create",
        "notebook_edit",
        "notebook_execute",
        "notebook_execute_cell",
        "notebook_session",
        "notebook_session_close",
    ];
    check_without(without, Toolset::Notebooks, &names).await;
}

#[tokio::test]
async fn with_no_toolset_the_five_core_tools_remain_and_work() {
    let core = table(None);
    let expected: BTreeSet<String> = [
        "execute",
        "get_output",
        "interrupt",
        "runtime_status",
        "kernel_restart",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(core, expected);
    assert_eq!(offered(NONE).await, core);
    let server = Setup::new(StructuredOutput::Always)
        .toolsets(NONE)
        .start()
        .await;
    for (tool, arguments) in [
        ("execute", json!({"code": "x = 1"})),
        ("get_output", json!({})),
        ("interrupt", json!({})),
        ("runtime_status", json!({})),
        ("kernel_restart", json!({})),
    ] {
        let result = server.call(tool, arguments).await;
        assert_eq!(result.is_error, Some(false), "{tool}: {result:?}");
    }
}

#[tokio::test]
async fn a_tool_the_server_does_not_have_is_a_protocol_error_in_both_shapes() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        for tool in ["no_such_tool", "Execute", "execute ", ""] {
            assert_unknown(&server, tool).await;
        }
        // Nothing ran, and the server goes on answering.
        assert!(server.ran_nothing().await);
    }
}

#[tokio::test]
async fn an_offered_tool_is_described_alike_whatever_else_is_left_out() {
    let full = Setup::new(StructuredOutput::Always).start().await;
    let bare = Setup::new(StructuredOutput::Always)
        .toolsets(NONE)
        .start()
        .await;
    let full = full.tools().await;
    for tool in bare.tools().await {
        let same = full
            .iter()
            .find(|other| other.name == tool.name)
            .expect("offered with every toolset too");
        assert_eq!(same.input_schema, tool.input_schema, "{}", tool.name);
        assert_eq!(same.output_schema, tool.output_schema, "{}", tool.name);
        assert_eq!(same.description, tool.description, "{}", tool.name);
        assert_eq!(same.annotations, tool.annotations, "{}", tool.name);
    }
}
