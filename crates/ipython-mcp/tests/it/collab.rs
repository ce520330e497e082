//! The live-document client (ipython-mcp-collab) against a real Jupyter server with
//! jupyter-collaboration, and a scripted person in the same room (tests/collab_person.py,
//! pycrdt + jupyter_ydoc, the model JupyterLab mirrors). Every wait is for an event, with a
//! generous deadline; no timing is asserted.

use crate::support;

use std::time::{Duration, Instant};

use ipython_mcp_collab::{CollabError, Room};
use serde_json::{json, Value};
use support::collab::CollabServer;

/// Deadlines for events, generous for a loaded two-core machine.
const WITHIN: Duration = Duration::from_secs(60);
/// The server saves a changed document after its save delay (1 s by default).
const SAVED_WITHIN: Duration = Duration::from_secs(120);

fn code(id: &str, source: &str) -> Value {
    json!({"id": id, "cell_type": "code", "source": source, "metadata": {},
           "execution_count": null, "outputs": []})
}

fn markdown(id: &str, source: &str) -> Value {
    json!({"id": id, "cell_type": "markdown", "source": source, "metadata": {}})
}

fn notebook(cells: Vec<Value>) -> Value {
    json!({
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5
    })
}

fn ids(notebook: &Value) -> Vec<String> {
    notebook["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|cell| cell["id"].as_str().expect("id").to_owned())
        .collect()
}

fn cell<'a>(notebook: &'a Value, id: &str) -> &'a Value {
    notebook["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .find(|cell| cell["id"] == id)
        .unwrap_or_else(|| panic!("no cell {id} in {notebook}"))
}

async fn open(server: &CollabServer, path: &str) -> Room {
    Room::open(&server.client(), path, WITHIN)
        .await
        .expect("open the room")
}

/// Waits until the room's document satisfies `predicate`.
async fn room_until(room: &Room, predicate: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WITHIN;
    loop {
        let current = room.notebook().expect("notebook");
        if predicate(&current) {
            return current;
        }
        assert!(Instant::now() < deadline, "never happened: {current}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notebook_saved_through_the_contents_api_opens_and_reads_as_jupyter_ydoc_renders_it() {
    let server = CollabServer::start().await;
    let saved = notebook(vec![
        code("c1", "x = 1\nprint(x)"),
        markdown("m1", "# Title"),
    ]);
    server.put_notebook("read.ipynb", &saved).await;

    let room = open(&server, "read.ipynb").await;
    let live = room.notebook().expect("notebook");
    assert_eq!(ids(&live), ["c1", "m1"]);
    assert_eq!(cell(&live, "c1")["source"], "x = 1\nprint(x)");
    assert_eq!(cell(&live, "m1")["cell_type"], "markdown");
    assert_eq!(live["nbformat"], 4);
    assert_eq!(live["nbformat_minor"], 5);
    assert_eq!(live["metadata"]["kernelspec"]["name"], "python3");

    // The same document as the person (jupyter_ydoc's YNotebook.get()) reads it, and they
    // see the agent among the collaborators.
    let mut person = server.person("read.ipynb").await;
    assert_eq!(person.read().await, live);
    person
        .wait_for(
            "any(s.get('user', {}).get('name') == 'ipython-mcp (agent)' for s in awareness)",
            WITHIN,
        )
        .await;
    assert_eq!(room.closed(), None);

    // A missing file is not found.
    let missing = Room::open(&server.client(), "nope.ipynb", WITHIN).await;
    assert!(
        matches!(missing, Err(CollabError::NotFound { .. })),
        "{missing:?}"
    );
    // Leaving removes the agent from the person's collaborators at once.
    room.close().await;
    person
        .wait_for(
            "not any(s.get('user', {}).get('name') == 'ipython-mcp (agent)' for s in awareness)",
            WITHIN,
        )
        .await;
    person.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_insert_update_move_and_delete_reach_the_person() {
    let server = CollabServer::start().await;
    server
        .put_notebook(
            "agent.ipynb",
            &notebook(vec![
                code("a", "a = 1"),
                code("b", "b = 2"),
                code("c", "c = 3"),
            ]),
        )
        .await;
    let room = open(&server, "agent.ipynb").await;
    let mut person = server.person("agent.ipynb").await;

    // Insert after a, and change b's source.
    let before = room.notebook().expect("notebook");
    let mut after = before.clone();
    after["cells"]
        .as_array_mut()
        .expect("cells")
        .insert(1, code("n", "new = 0"));
    after["cells"][2]["source"] = json!("b = 20");
    after["cells"][2]["metadata"] = json!({"tags": ["edited"]});
    room.apply(&before, &after).await.expect("apply");
    // Acknowledged: the person, who syncs through the same server, gets it.
    let seen = person
        .wait_for(
            "[c['id'] for c in nb['cells']] == ['a', 'n', 'b', 'c'] and cells['b']['source'] == 'b = 20'",
            WITHIN,
        )
        .await;
    assert_eq!(cell(&seen, "b")["metadata"], json!({"tags": ["edited"]}));
    assert_eq!(cell(&seen, "n")["source"], "new = 0");
    assert_eq!(room.notebook().expect("notebook"), seen);

    // Move c to the top, delete a.
    let before = room.notebook().expect("notebook");
    let mut after = before.clone();
    let cells = after["cells"].as_array_mut().expect("cells");
    let moved = cells.remove(3);
    cells.insert(0, moved);
    cells.retain(|cell| cell["id"] != "a");
    room.apply(&before, &after).await.expect("apply");
    let seen = person
        .wait_for("[c['id'] for c in nb['cells']] == ['c', 'n', 'b']", WITHIN)
        .await;
    assert_eq!(cell(&seen, "c")["source"], "c = 3");

    // A type change (the cell re-created in place, as jupyter_ydoc does) and notebook
    // metadata.
    let before = room.notebook().expect("notebook");
    let mut after = before.clone();
    after["cells"][1] = markdown("n", "*now markdown*");
    after["metadata"]["language_info"] = json!({"name": "python"});
    room.apply(&before, &after).await.expect("apply");
    let seen = person
        .wait_for(
            "cells['n']['cell_type'] == 'markdown' and nb['metadata'].get('language_info') == {'name': 'python'}",
            WITHIN,
        )
        .await;
    assert_eq!(ids(&seen), ["c", "n", "b"]);
    assert_eq!(cell(&seen, "n")["source"], "*now markdown*");

    // The latency from calling apply to the person seeing the change, over 20 edits.
    let mut latencies = Vec::new();
    for round in 0..20 {
        let before = room.notebook().expect("notebook");
        let mut after = before.clone();
        after["cells"][0]["source"] = json!(format!("c = {round}"));
        let started = Instant::now();
        room.apply(&before, &after).await.expect("apply");
        person
            .wait_for(&format!("cells['c']['source'] == 'c = {round}'"), WITHIN)
            .await;
        latencies.push(started.elapsed());
    }
    latencies.sort();
    eprintln!(
        "latency from apply to the person seeing it: median {:?} (min {:?}, max {:?}, 20 edits)",
        latencies[10], latencies[0], latencies[19]
    );
    person.close().await;
    room.close().await;
    // The room handled every message of ours without an error.
    assert!(!server.log().contains("Traceback"), "{}", server.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_persons_edits_reach_the_agent_and_concurrent_edits_of_other_cells_both_stay_on_disk() {
    let server = CollabServer::start().await;
    server
        .put_notebook(
            "both.ipynb",
            &notebook(vec![code("a", "a = 1"), code("b", "b = 1")]),
        )
        .await;
    let room = open(&server, "both.ipynb").await;
    let mut person = server.person("both.ipynb").await;

    // The person types in a and adds a cell; the agent sees both.
    person
        .ok(json!({"cmd": "set_source", "id": "a", "source": "a = 1  # person"}))
        .await;
    person
        .ok(json!({"cmd": "insert_cell", "index": 2, "cell": markdown("p", "person's notes")}))
        .await;
    let live = room_until(&room, |nb| {
        ids(nb) == ["a", "b", "p"] && cell(nb, "a")["source"] == "a = 1  # person"
    })
    .await;
    assert_eq!(cell(&live, "p")["source"], "person's notes");

    // Concurrent: the agent edits b from a snapshot taken before the person's next edit of a.
    let before = room.notebook().expect("notebook");
    person
        .ok(json!({"cmd": "set_source", "id": "a", "source": "a = 2  # person"}))
        .await;
    let mut after = before.clone();
    after["cells"][1]["source"] = json!("b = 2  # agent");
    room.apply(&before, &after).await.expect("apply");

    let expr =
        "cells['a']['source'] == 'a = 2  # person' and cells['b']['source'] == 'b = 2  # agent'";
    person.wait_for(expr, WITHIN).await;
    room_until(&room, |nb| {
        cell(nb, "a")["source"] == "a = 2  # person" && cell(nb, "b")["source"] == "b = 2  # agent"
    })
    .await;

    // The server saves the merged document to the file.
    let on_disk = server
        .wait_on_disk("both.ipynb", SAVED_WITHIN, |nb| {
            let source = |id: &str| {
                nb["cells"]
                    .as_array()
                    .and_then(|cells| cells.iter().find(|cell| cell["id"] == id))
                    .map(|cell| super_source(&cell["source"]))
            };
            source("a").as_deref() == Some("a = 2  # person")
                && source("b").as_deref() == Some("b = 2  # agent")
                && source("p").as_deref() == Some("person's notes")
        })
        .await;
    assert_eq!(on_disk["nbformat"], 4);
    person.close().await;
    room.close().await;
}

/// nbformat's source on disk: a string or a list of lines.
fn super_source(source: &Value) -> String {
    match source {
        Value::Array(lines) => lines.iter().filter_map(Value::as_str).collect(),
        other => other.as_str().unwrap_or_default().to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_set_while_a_cell_runs_reach_the_person() {
    let server = CollabServer::start().await;
    server
        .put_notebook("run.ipynb", &notebook(vec![code("r", "print('hi')")]))
        .await;
    let room = open(&server, "run.ipynb").await;
    let mut person = server.person("run.ipynb").await;

    room.set_execution_state("r", true).await.expect("running");
    let stream = json!({"output_type": "stream", "name": "stdout", "text": "hi\n"});
    room.set_outputs("r", None, std::slice::from_ref(&stream))
        .await
        .expect("outputs");
    let seen = person
        .wait_for(
            "cells['r']['outputs'] and cells['r']['outputs'][0]['text'] == 'hi\\n'",
            WITHIN,
        )
        .await;
    assert_eq!(cell(&seen, "r")["execution_count"], Value::Null);

    let result = json!({"output_type": "execute_result", "execution_count": 7, "metadata": {},
                        "data": {"text/plain": "42"}});
    room.set_outputs("r", Some(7), &[stream, result.clone()])
        .await
        .expect("outputs");
    room.set_execution_state("r", false).await.expect("idle");
    let seen = person
        .wait_for(
            "cells['r']['execution_count'] == 7 and len(cells['r']['outputs']) == 2",
            WITHIN,
        )
        .await;
    assert_eq!(cell(&seen, "r")["outputs"][1], result);

    // A cell that is not there, or not code, is refused before anything is written.
    let missing = room.set_outputs("zz", None, &[]).await;
    assert!(
        matches!(missing, Err(CollabError::Invalid { .. })),
        "{missing:?}"
    );
    assert!(!server.log().contains("Traceback"), "{}", server.log());
    server
        .wait_on_disk("run.ipynb", SAVED_WITHIN, |nb| {
            nb["cells"][0]["execution_count"] == 7
        })
        .await;
    person.close().await;
    room.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_collaboration_is_not_collaborative() {
    let server = support::JupyterServer::start().await;
    let (status, created) = server
        .post("api/contents", json!({"type": "notebook"}))
        .await;
    assert_eq!(status, 201, "{created}");
    let path = created["path"].as_str().expect("path");
    let client = ipython_mcp_jupyter::remote::Server::new(
        url::Url::parse(&server.url).expect("url"),
        Some(server.token.clone()),
        WITHIN,
    )
    .expect("client");
    let opened = Room::open(&client, path, WITHIN).await;
    assert!(
        matches!(opened, Err(CollabError::NotCollaborative)),
        "{opened:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_closes_the_room_and_an_edit_fails_never_succeeds() {
    let mut server = CollabServer::start().await;
    server
        .put_notebook("gone.ipynb", &notebook(vec![code("g", "g = 1")]))
        .await;
    let room = open(&server, "gone.ipynb").await;
    let before = room.notebook().expect("notebook");
    server.kill();

    let mut after = before.clone();
    after["cells"][0]["source"] = json!("g = 2");
    let edit = room.apply(&before, &after).await;
    assert!(
        matches!(
            edit,
            Err(CollabError::Closed { .. } | CollabError::Timeout { .. })
        ),
        "{edit:?}"
    );
    // And the room says why, once its task has seen the connection go.
    let deadline = Instant::now() + WITHIN;
    while room.closed().is_none() {
        assert!(Instant::now() < deadline, "the room never noticed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let again = room.apply(&before, &after).await;
    assert!(
        matches!(again, Err(CollabError::Closed { .. })),
        "{again:?}"
    );
    room.close().await;
}
