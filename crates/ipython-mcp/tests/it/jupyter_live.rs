//! `jupyter:` notebooks live, through the MCP tools: a real Jupyter server with
//! jupyter-collaboration started here on loopback, the server under test editing and running a
//! notebook through its room, and a scripted person (tests/collab_person.py: pycrdt and
//! jupyter_ydoc, the model JupyterLab mirrors) with the same notebook open. Every wait is for
//! an event with a generous deadline; the one figure measured (edit to person) is printed,
//! never asserted.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::collab::CollabServer;
use support::{Family, Flag, Server};

const WITHIN: Duration = Duration::from_secs(60);
/// The Jupyter server saves a changed document after its save delay (1 s by default).
const SAVED_WITHIN: Duration = Duration::from_secs(120);

async fn agent_for(jupyter: &CollabServer) -> Server {
    let env = [
        ("IPYTHON_MCP_JUPYTER_URL", jupyter.url.as_str()),
        ("IPYTHON_MCP_JUPYTER_TOKEN", jupyter.token.as_str()),
    ];
    Server::start_unready(Family::Handshake, &env).await
}

fn code_cell(id: &str, source: &str) -> Value {
    json!({"id": id, "cell_type": "code", "source": source, "metadata": {},
           "execution_count": null, "outputs": []})
}

fn error_code(result: &support::ToolResult) -> &str {
    result.structured["error"]["code"].as_str().unwrap_or("")
}

/// A multi-line string of a notebook file: one string, or Jupyter's list of lines.
fn joined(value: &Value) -> String {
    match value {
        Value::Array(lines) => lines.iter().filter_map(Value::as_str).collect(),
        other => other.as_str().unwrap_or_default().to_owned(),
    }
}

fn ids(notebook: &Value) -> Vec<String> {
    notebook["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|cell| cell["id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn an_agent_edits_and_runs_a_notebook_a_person_has_open() {
    let jupyter = CollabServer::start().await;
    let notebook = json!({
        "cells": [code_cell("theirs", "a = 1"), code_cell("ours", "b = 1")],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5
    });
    jupyter.put_notebook("live.ipynb", &notebook).await;
    let mut person = jupyter.person("live.ipynb").await;
    let agent = agent_for(&jupyter).await;
    let path = "jupyter:live.ipynb";

    // The agent reads the document: the document's ids.
    let read = agent.call("notebook_read", json!({"path": path})).await;
    assert!(read.ok(), "{read:?}\n{}", jupyter.log());
    let cells = read.structured["cells"].as_array().expect("cells");
    assert_eq!(cells[0]["id"], "theirs");
    assert_eq!(cells[1]["id"], "ours");
    let first_revision = read.structured["revision"].clone();
    // The person sees the agent in the room.
    person
        .wait_for(
            "any('ipython-mcp' in str(state) for state in awareness)",
            WITHIN,
        )
        .await;

    // Insert: the person sees the cell without reloading.
    let inserted = agent
        .call(
            "notebook_edit",
            json!({"path": path, "action": "insert", "index": 1, "cell_type": "markdown",
                   "source": "## From the agent"}),
        )
        .await;
    assert!(inserted.ok(), "{inserted:?}");
    let new_id = inserted.structured["cell"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    person
        .wait_for(
            &format!("[c['id'] for c in nb['cells']] == ['theirs', {new_id:?}, 'ours'] and cells[{new_id:?}]['source'] == '## From the agent'"),
            WITHIN,
        )
        .await;

    // Update, twenty times: how long from the agent's call to the person's document.
    let mut latencies = Vec::new();
    for round in 0..20 {
        let source = format!("## From the agent, take {round}");
        let began = Instant::now();
        let updated = agent
            .call(
                "notebook_edit",
                json!({"path": path, "action": "update", "cell_id": new_id, "source": source}),
            )
            .await;
        assert!(updated.ok(), "{updated:?}");
        person
            .wait_for(
                &format!("cells[{new_id:?}]['source'] == {source:?}"),
                WITHIN,
            )
            .await;
        latencies.push(began.elapsed());
    }
    latencies.sort();
    eprintln!(
        "agent edit to the person's document: median {:.1} ms over 20 (min {:.1}, max {:.1})",
        latencies[10].as_secs_f64() * 1000.0,
        latencies[0].as_secs_f64() * 1000.0,
        latencies[19].as_secs_f64() * 1000.0
    );

    // Move and delete.
    let moved = agent
        .call(
            "notebook_edit",
            json!({"path": path, "action": "move", "cell_id": "ours", "to_index": 0}),
        )
        .await;
    assert!(moved.ok(), "{moved:?}");
    person
        .wait_for(
            &format!("[c['id'] for c in nb['cells']] == ['ours', 'theirs', {new_id:?}]"),
            WITHIN,
        )
        .await;
    let deleted = agent
        .call(
            "notebook_edit",
            json!({"path": path, "action": "delete", "cell_id": new_id}),
        )
        .await;
    assert!(deleted.ok(), "{deleted:?}");
    person
        .wait_for(
            "[c['id'] for c in nb['cells']] == ['ours', 'theirs']",
            WITHIN,
        )
        .await;

    // The person's edit is what the agent reads next.
    person
        .ok(json!({"cmd": "set_source", "id": "theirs", "source": "a = 'theirs'"}))
        .await;
    let read = agent
        .call("notebook_read", json!({"path": path, "cell_id": "theirs"}))
        .await;
    assert_eq!(
        read.structured["cells"][0]["source"], "a = 'theirs'",
        "{read:?}"
    );

    // A revision from before the person's edit is a conflict, and nothing changes.
    let stale = agent
        .call(
            "notebook_edit",
            json!({"path": path, "action": "update", "cell_id": "ours", "source": "stale",
                   "expected_revision": first_revision}),
        )
        .await;
    assert_eq!(error_code(&stale), "revision_conflict", "{stale:?}");

    // Concurrent edits to different cells: both kept.
    let (agent_edit, person_edit) = tokio::join!(
        agent.call(
            "notebook_edit",
            json!({"path": path, "action": "update", "cell_id": "ours", "source": "b = 'ours'"}),
        ),
        person.ok(json!({"cmd": "set_source", "id": "theirs", "source": "a = 'theirs, again'"})),
    );
    assert!(agent_edit.ok(), "{agent_edit:?}");
    assert_eq!(person_edit["ok"], true);
    person
        .wait_for(
            "cells['ours']['source'] == \"b = 'ours'\" and cells['theirs']['source'] == \"a = 'theirs, again'\"",
            WITHIN,
        )
        .await;
    let read = agent.call("notebook_read", json!({"path": path})).await;
    let sources: Vec<&str> = read.structured["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .filter_map(|cell| cell["source"].as_str())
        .collect();
    assert_eq!(sources, ["b = 'ours'", "a = 'theirs, again'"], "{read:?}");

    // A run: the person sees the cell's output while it runs, and the count when it ends.
    let flag = Flag::new();
    let running_code = format!(
        "print('first', flush=True)\n{}\nprint('second')",
        flag.wait_code()
    );
    let edited = agent
        .call(
            "notebook_edit",
            json!({"path": path, "action": "update", "cell_id": "ours", "source": running_code}),
        )
        .await;
    assert!(edited.ok(), "{edited:?}");
    let run = agent.call(
        "notebook_execute_cell",
        json!({"path": path, "cell_id": "ours"}),
    );
    let watch = async {
        let during = person
            .wait_for(
                "any('first' in ''.join(o.get('text', '')) for o in cells['ours'].get('outputs', []))",
                WITHIN,
            )
            .await;
        flag.set();
        during
    };
    let (ran, during) = tokio::join!(run, watch);
    assert!(ran.ok(), "{ran:?}\n{}", jupyter.log());
    assert_eq!(ran.structured["saved"], true, "{ran:?}");
    assert!(ran.structured["stdout"]
        .as_str()
        .is_some_and(|out| out.contains("first") && out.contains("second")));
    let ours = during["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .find(|cell| cell["id"] == "ours")
        .expect("ours");
    assert!(
        !joined(&ours["outputs"][0]["text"]).contains("second"),
        "seen mid-run: {ours}"
    );
    person
        .wait_for(
            "'second' in ''.join(''.join(o.get('text', '')) for o in cells['ours']['outputs']) and cells['ours']['execution_count'] is not None",
            WITHIN,
        )
        .await;

    // notebook_execute: a new cell, inserted before it runs, saved with its outputs.
    let fresh = agent
        .call(
            "notebook_execute",
            json!({"path": path, "code": "print(6 * 7)"}),
        )
        .await;
    assert!(fresh.ok(), "{fresh:?}");
    let fresh_id = fresh.structured["cell"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    person
        .wait_for(
            &format!("'42' in ''.join(''.join(o.get('text', '')) for o in cells[{fresh_id:?}]['outputs'])"),
            WITHIN,
        )
        .await;

    // The server saves the document to the file, with both parties' changes.
    let saved = jupyter
        .wait_on_disk("live.ipynb", SAVED_WITHIN, |notebook| {
            let sources: Vec<String> = notebook["cells"]
                .as_array()
                .map(|cells| cells.iter().map(|cell| joined(&cell["source"])).collect())
                .unwrap_or_default();
            sources.len() == 3
                && sources[1] == "a = 'theirs, again'"
                && sources[2] == "print(6 * 7)"
        })
        .await;
    assert_eq!(ids(&saved)[..2], ["ours", "theirs"]);
    person.close().await;
    agent.stop().await;
}

#[tokio::test]
async fn a_room_that_is_gone_is_an_error_never_a_silent_success() {
    let mut jupyter = CollabServer::start().await;
    let notebook = json!({
        "cells": [code_cell("one", "x = 1")],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5
    });
    jupyter.put_notebook("gone.ipynb", &notebook).await;
    let agent = agent_for(&jupyter).await;
    let path = "jupyter:gone.ipynb";
    let read = agent.call("notebook_read", json!({"path": path})).await;
    assert!(read.ok(), "{read:?}");
    // A notebook that does not exist is said to be missing.
    let missing = agent
        .call("notebook_read", json!({"path": "jupyter:nope.ipynb"}))
        .await;
    assert_eq!(error_code(&missing), "notebook_not_found", "{missing:?}");

    // The person deletes a notebook the agent has open: the agent's next edit is refused.
    jupyter.put_notebook("deleted.ipynb", &notebook).await;
    let before = agent
        .call("notebook_read", json!({"path": "jupyter:deleted.ipynb"}))
        .await;
    assert!(before.ok(), "{before:?}");
    let (status, _) = jupyter
        .request(reqwest::Method::DELETE, "api/contents/deleted.ipynb", None)
        .await;
    assert_eq!(status, 204);
    let edit = agent
        .call(
            "notebook_edit",
            json!({"path": "jupyter:deleted.ipynb", "action": "insert", "source": "lost?"}),
        )
        .await;
    assert_eq!(error_code(&edit), "notebook_not_found", "{edit:?}");
    let read = agent
        .call("notebook_read", json!({"path": "jupyter:deleted.ipynb"}))
        .await;
    assert_eq!(error_code(&read), "notebook_not_found", "{read:?}");

    jupyter.kill();
    let edit = agent
        .call(
            "notebook_edit",
            json!({"path": path, "action": "insert", "source": "lost?"}),
        )
        .await;
    assert!(
        !edit.ok(),
        "an edit after the server died is not a success: {edit:?}"
    );
    assert_eq!(error_code(&edit), "io_error", "{edit:?}");
    agent.stop().await;
}
