//! MCP Tasks over stdio, for clients that declare the extension and those that do not.

use crate::support;

use serde_json::json;
use support::{Family, Server};

#[tokio::test]
async fn a_tasks_client_gets_background_executions_as_tasks_in_both_protocol_families() {
    for family in [Family::Handshake, Family::Modern] {
        let server = Server::start_with_tasks(family, &[]).await;
        support::tasks_follow_background_executions(server.client.peer()).await;
        server.stop().await;
    }
}

#[tokio::test]
async fn a_client_without_the_tasks_extension_gets_a_pending_result() {
    let server = Server::start(Family::Modern, &[]).await;
    let pending = server
        .call("execute", json!({"code": "6 * 7", "background": true}))
        .await;
    assert_eq!(
        pending.structured["status"], "pending",
        "{:?}",
        pending.structured
    );
    let id = pending.structured["execution_id"].clone();
    let finished = server
        .call(
            "get_output",
            json!({"execution_id": id, "wait_seconds": 120}),
        )
        .await;
    assert_eq!(finished.structured["result"]["text/plain"], "42");
    let refused = server
        .client
        .peer()
        .get_task(rmcp::model::GetTaskParams::new(id.as_str().expect("id")))
        .await
        .expect_err("tasks/get needs the extension");
    assert!(!refused.to_string().is_empty());
    server.stop().await;
}

/// Polls `tasks/get` until the task leaves `working` (a notebook run also saves after its
/// execution ends). Bounded well above any save.
async fn settled(peer: &rmcp::Peer<rmcp::RoleClient>, id: &str) -> rmcp::model::GetTaskResult {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let got = peer
            .get_task(rmcp::model::GetTaskParams::new(id))
            .await
            .expect("tasks/get");
        if got.task.task.status != rmcp::model::TaskStatus::Working {
            return got;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still working: {got:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn background_notebook_runs_are_tasks_for_a_tasks_client_and_pending_for_others() {
    use rmcp::model::{CallToolRequestParams, CallToolResponse, TaskPayload, TaskStatus};
    let root = tempfile::tempdir().expect("workspace");
    let env = [(
        "IPYTHON_MCP_WORKSPACE_ROOT",
        root.path().to_str().expect("utf-8"),
    )];
    let server = Server::start_with_tasks(Family::Modern, &env).await;
    let created = server
        .call(
            "notebook_create",
            json!({"path": "t.ipynb", "cells": [{"source": "print('cell'); 6 * 7"}]}),
        )
        .await;
    assert!(created.ok(), "{created:?}");
    for (tool, arguments) in [
        (
            "notebook_execute",
            json!({"path": "t.ipynb", "code": "print('new'); 2 + 2", "background": true}),
        ),
        (
            "notebook_execute_cell",
            json!({"path": "t.ipynb", "index": 0, "background": true}),
        ),
    ] {
        let request = CallToolRequestParams::new(tool)
            .with_arguments(arguments.as_object().cloned().expect("object"));
        let task = match server
            .client
            .peer()
            .call_tool_once(request)
            .await
            .expect("tools/call")
        {
            CallToolResponse::Task(created) => created.task,
            other => panic!("{tool}: a task, not {other:?}"),
        };
        // The task id is the execution id.
        let output = server
            .call(
                "get_output",
                json!({"execution_id": task.task_id, "wait_seconds": 120}),
            )
            .await;
        assert_eq!(
            output.structured["finished"], true,
            "{:?}",
            output.structured
        );
        let done = settled(server.client.peer(), &task.task_id).await;
        assert_eq!(done.task.task.status, TaskStatus::Completed, "{done:?}");
        let TaskPayload::Completed { result } = &done.task.payload else {
            panic!("a result: {done:?}")
        };
        let structured = &result["structuredContent"];
        assert_eq!(structured["saved"], true, "{tool}: {result:?}");
        assert_eq!(structured["execution_id"], task.task_id.as_str());
        assert!(structured["revision"].is_string(), "{result:?}");
    }
    let read = server
        .call(
            "notebook_read",
            json!({"path": "t.ipynb", "include_outputs": true}),
        )
        .await;
    let cells = read.structured["cells"].as_array().expect("cells").clone();
    assert_eq!(cells.len(), 2, "{:?}", read.structured);
    for cell in &cells {
        assert!(
            cell["execution_count"].is_number(),
            "saved with its count: {cell}"
        );
    }
    server.stop().await;

    // Without the extension, the same call answers pending and saves when it ends.
    let server = Server::start(Family::Modern, &env).await;
    let pending = server
        .call(
            "notebook_execute",
            json!({"path": "t.ipynb", "code": "'third'", "background": true}),
        )
        .await;
    assert_eq!(
        pending.structured["status"], "pending",
        "{:?}",
        pending.structured
    );
    assert_eq!(pending.structured["saved"], false);
    let id = pending.structured["execution_id"].clone();
    let finished = server
        .call(
            "get_output",
            json!({"execution_id": id, "wait_seconds": 120}),
        )
        .await;
    assert_eq!(finished.structured["result"]["text/plain"], "'third'");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let read = server
            .call("notebook_read", json!({"path": "t.ipynb"}))
            .await;
        if read.structured["cells"].as_array().map(Vec::len) == Some(3) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never saved: {read:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    server.stop().await;
}

/// The server remembers the latest `IPYTHON_MCP_MAX_TASKS` tasks: an older one is an unknown
/// task to `tasks/get` and `tasks/cancel`, while its output stays readable with `get_output`.
#[tokio::test]
async fn tasks_past_the_configured_bound_are_forgotten_oldest_first() {
    use rmcp::model::{CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams};
    let server = Server::start_with_tasks(Family::Modern, &[("IPYTHON_MCP_MAX_TASKS", "2")]).await;
    let peer = server.client.peer();
    let mut ids = Vec::new();
    for n in 0..3 {
        let arguments = json!({"code": format!("print('run {n}')"), "background": true});
        let request = CallToolRequestParams::new("execute")
            .with_arguments(arguments.as_object().cloned().expect("object"));
        match peer.call_tool_once(request).await.expect("tools/call") {
            CallToolResponse::Task(created) => ids.push(created.task.task_id),
            other => panic!("a task, not {other:?}"),
        }
    }
    for id in &ids[1..] {
        let got = settled(peer, id).await;
        assert_eq!(got.task.task.status, rmcp::model::TaskStatus::Completed);
    }
    let forgotten = peer
        .get_task(GetTaskParams::new(ids[0].clone()))
        .await
        .expect_err("the oldest task is forgotten");
    assert!(
        forgotten.to_string().contains("unknown task"),
        "{forgotten}"
    );
    let cancel = peer
        .cancel_task(CancelTaskParams::new(ids[0].clone()))
        .await
        .expect_err("a forgotten task cannot be cancelled");
    assert!(cancel.to_string().contains("unknown task"), "{cancel}");
    // The execution itself is the kernel's to keep (its latest 32): still readable.
    let output = server
        .call(
            "get_output",
            json!({"execution_id": ids[0], "wait_seconds": 120}),
        )
        .await;
    assert_eq!(
        output.structured["stdout"], "run 0\n",
        "{:?}",
        output.structured
    );
    server.stop().await;
}
