//! The json-lines protocol (`--json-lines`, docs/src/json-lines.md), driven
//! through the real binary by a small client, against a real kernel: every method, a conflict
//! that writes nothing, an interrupt that reaches a running execution, bad lines that are
//! answered and never stop the loop, and a clean exit at end of input.

use crate::support;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// A desktop program's side of the protocol.
struct Client {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// Responses read while waiting for another id.
    early: HashMap<String, Value>,
    next_id: u64,
}

/// Bound on any one response: generous for a loaded 2-core machine (a first kernel start
/// included); the product's own bounds are much lower.
const RESPONSE_BOUND: Duration = Duration::from_secs(180);

impl Client {
    fn start(workspace: &Path) -> Client {
        let root = workspace.to_str().expect("utf-8 path");
        let mut child = support::command(&[("IPYTHON_MCP_WORKSPACE_ROOT", root)])
            .arg("--json-lines")
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take().expect("stdin");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Client {
            child,
            stdin,
            lines,
            early: HashMap::new(),
            next_id: 0,
        }
    }

    async fn send_line(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write");
        self.stdin.flush().await.expect("flush");
    }

    /// Sends a request and returns its id (as the response will carry it).
    async fn send(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        let request = json!({"id": id, "method": method, "params": params});
        self.send_line(&request.to_string()).await;
        id
    }

    /// The response with `id`, however many others come first.
    async fn response(&mut self, id: &Value) -> Value {
        let key = id.to_string();
        loop {
            if let Some(response) = self.early.remove(&key) {
                return response;
            }
            let line = tokio::time::timeout(RESPONSE_BOUND, self.lines.next_line())
                .await
                .expect("a response in time")
                .expect("read")
                .expect("the server is still answering");
            let response: Value = serde_json::from_str(&line)
                .unwrap_or_else(|error| panic!("stdout carries only JSON lines ({error}): {line}"));
            self.early.insert(response["id"].to_string(), response);
        }
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        self.response(&id).await
    }

    /// `result` of a call that must succeed.
    async fn ok(&mut self, method: &str, params: Value) -> Value {
        let response = self.call(method, params).await;
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }
}

fn notebook(sources: &[&str]) -> Value {
    let cells: Vec<Value> = sources
        .iter()
        .map(|source| {
            json!({"cell_type": "code", "source": source, "metadata": {}, "outputs": [], "execution_count": null})
        })
        .collect();
    json!({
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "cells": cells,
    })
}

#[tokio::test]
async fn every_method_round_trips_against_a_real_kernel() {
    let workspace = tempfile::tempdir().expect("tempdir");
    let file = workspace.path().join("a.ipynb");
    let mut client = Client::start(workspace.path());

    let capabilities = client.ok("capabilities", json!({})).await;
    assert_eq!(capabilities["schema_version"], "1.0");
    assert_eq!(capabilities["transport"]["active"], "json-lines");
    let schema =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas/capabilities.schema.json");
    support::assert_matches_schema(&schema, &capabilities).await;
    assert_eq!(
        capabilities["cancellation"]["mcp_request"],
        "interrupts_running_cell"
    );

    // save without a revision: a new file only.
    let saved = client
        .ok(
            "save",
            json!({"path": "a.ipynb", "notebook": notebook(&["x = 20 + 1\nx"])}),
        )
        .await;
    let first_revision = saved["revision"].as_str().expect("revision").to_owned();
    let again = client
        .call(
            "save",
            json!({"path": "a.ipynb", "notebook": notebook(&["y = 1"])}),
        )
        .await;
    assert_eq!(again["error"]["code"], "notebook_exists", "{again}");

    let opened = client.ok("open", json!({"path": "a.ipynb"})).await;
    assert_eq!(opened["revision"], first_revision.as_str());
    assert_eq!(
        opened["notebook"]["cells"][0]["source"],
        json!(["x = 20 + 1\n", "x"])
    );

    // execute_cell: the notebook's own kernel, the outputs saved into the cell.
    let ran = client
        .ok("execute_cell", json!({"path": "a.ipynb", "index": 0}))
        .await;
    assert_eq!(ran["ok"], true, "{ran}");
    assert_eq!(ran["result"]["text/plain"], "21");
    assert_eq!(ran["saved"], true);
    assert!(ran["kernel"].as_str().expect("kernel").starts_with("nb-"));
    let after_run = ran["revision"].as_str().expect("revision").to_owned();
    assert_ne!(after_run, first_revision);

    // execute: new code in the same namespace, kept as a new cell.
    let ran = client
        .ok("execute", json!({"path": "a.ipynb", "code": "x * 2"}))
        .await;
    assert_eq!(ran["result"]["text/plain"], "42", "{ran}");
    assert_eq!(ran["cell"]["index"], 1);
    let current = ran["revision"].as_str().expect("revision").to_owned();

    // A save from the revision opened before the runs is a conflict, and writes nothing.
    let before = std::fs::read(&file).expect("read");
    let conflict = client
        .call(
            "save",
            json!({"path": "a.ipynb", "revision": first_revision, "notebook": notebook(&["lost = 1"])}),
        )
        .await;
    assert_eq!(conflict["error"]["code"], "revision_conflict", "{conflict}");
    assert!(conflict["error"]["message"].is_string());
    assert_eq!(
        std::fs::read(&file).expect("read"),
        before,
        "nothing written"
    );
    let saved = client
        .ok(
            "save",
            json!({"path": "a.ipynb", "revision": current, "notebook": notebook(&["x + 1"])}),
        )
        .await;
    assert_ne!(saved["revision"], current.as_str());

    // Bad lines are answered and the loop goes on.
    client.send_line("not json").await;
    let refused = client.response(&Value::Null).await;
    assert_eq!(refused["error"]["code"], "invalid_arguments", "{refused}");
    let unknown = client.call("frobnicate", json!({})).await;
    assert_eq!(unknown["error"]["code"], "invalid_arguments");
    let wrong = client.call("execute", json!({"path": "a.ipynb"})).await;
    assert_eq!(wrong["error"]["code"], "invalid_arguments", "{wrong}");
    let outside = client.call("open", json!({"path": "../x.ipynb"})).await;
    assert_eq!(outside["error"]["code"], "invalid_path", "{outside}");

    // interrupt reaches a running execution (requests run concurrently).
    let started = workspace.path().join("started");
    let code = format!(
        "import pathlib, time\npathlib.Path({:?}).touch()\nwhile True:\n    time.sleep(0.05)",
        started.display().to_string()
    );
    let running = client
        .send(
            "execute",
            json!({"path": "a.ipynb", "code": code, "persist": false}),
        )
        .await;
    let deadline = tokio::time::Instant::now() + RESPONSE_BOUND;
    while !started.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cell never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let interrupted = client.ok("interrupt", json!({"path": "a.ipynb"})).await;
    assert_eq!(interrupted["interrupted"], true, "{interrupted}");
    let stopped = client.response(&running).await;
    let result = &stopped["result"];
    assert_eq!(result["ok"], false, "{stopped}");
    assert_eq!(result["runtime"]["namespace"], "preserved", "{stopped}");

    // restart: a fresh namespace.
    let restarted = client.ok("restart", json!({"path": "a.ipynb"})).await;
    assert_eq!(restarted["status"]["state"], "ready", "{restarted}");
    let gone = client
        .ok(
            "execute",
            json!({"path": "a.ipynb", "code": "x", "persist": false}),
        )
        .await;
    assert_eq!(gone["error"]["code"], "execution_error", "{gone}");
    assert_eq!(gone["error"]["ename"], "NameError");

    let closed = client.ok("close", json!({"path": "a.ipynb"})).await;
    assert_eq!(closed["stopped"], true, "{closed}");
    let no_session = client.call("interrupt", json!({"path": "a.ipynb"})).await;
    assert_eq!(no_session["error"]["code"], "invalid_arguments");

    // End of input: the server exits cleanly.
    drop(client.stdin);
    let status = tokio::time::timeout(RESPONSE_BOUND, client.child.wait())
        .await
        .expect("exits at end of input")
        .expect("wait");
    assert!(status.success(), "{status}");
    assert!(
        client.lines.next_line().await.expect("read").is_none(),
        "nothing after the last response"
    );
}
