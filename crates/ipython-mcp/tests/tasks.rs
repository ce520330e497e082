//! MCP Tasks over stdio, for clients that declare the extension and those that do not.

mod support;

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
