//! `jupyter:` notebooks on a real Jupyter Server without the collaboration extension, started
//! here on loopback: every notebook tool through its contents API, with the revision checks
//! local notebooks have, the notebook's code run in a kernel on that server, the resources.

use crate::support;

use serde_json::{json, Value};
use support::{Family, JupyterServer, Server};

async fn server_for(jupyter: &JupyterServer) -> Server {
    let env = jupyter.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Server::start_unready(Family::Handshake, &env).await
}

fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A multi-line string of a notebook file: one string, or the list of lines Jupyter writes.
fn joined(value: &Value) -> String {
    match value {
        Value::Array(lines) => lines.iter().filter_map(Value::as_str).collect(),
        other => other.as_str().unwrap_or_default().to_owned(),
    }
}

fn code(result: &support::ToolResult) -> &str {
    result.structured["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn jupyter_notebooks_are_created_read_edited_and_run_on_the_server() {
    let jupyter = JupyterServer::start().await;
    std::fs::create_dir(jupyter.root().join("work")).expect("mkdir");
    let file = jupyter.root().join("work").join("analysis.ipynb");
    let server = server_for(&jupyter).await;
    let path = "jupyter:work/analysis.ipynb";

    let created = server
        .call(
            "notebook_create",
            json!({"path": path, "cells": [{"cell_type": "markdown", "source": "# Notes"}]}),
        )
        .await;
    assert!(created.ok(), "{created:?}\n{}", jupyter.log());
    assert_eq!(created.structured["path"], path);
    assert_eq!(
        created.structured["uri"],
        "notebook:///jupyter%3Awork/analysis.ipynb"
    );
    // The revision is the SHA-256 of the file's bytes, as for a local notebook.
    let bytes = std::fs::read(&file).expect("the server wrote the file");
    assert_eq!(created.structured["revision"], sha256_hex(&bytes).as_str());
    let on_disk: Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(joined(&on_disk["cells"][0]["source"]), "# Notes");

    let again = server.call("notebook_create", json!({"path": path})).await;
    assert_eq!(code(&again), "notebook_exists", "{again:?}");

    let edited = server
        .call(
            "notebook_edit",
            json!({"path": path, "action": "insert", "cell_type": "code", "source": "x = 6 * 7",
                   "expected_revision": created.structured["revision"]}),
        )
        .await;
    assert!(edited.ok(), "{edited:?}");
    assert_eq!(edited.structured["cell_count"], 2);
    let revision = edited.structured["revision"].as_str().expect("revision");
    let revised = server
        .call("notebook_revision", json!({"path": path}))
        .await;
    assert_eq!(revised.structured["revision"], revision, "{revised:?}");

    let read = server.call("notebook_read", json!({"path": path})).await;
    assert!(read.ok(), "{read:?}");
    assert_eq!(read.structured["revision"], revision);
    let cells = read.structured["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2);
    assert_eq!(cells[1]["source"], "x = 6 * 7");
    // The server's per-session `trusted` flag is not part of the notebook.
    assert!(cells[1]["metadata"].get("trusted").is_none(), "{read:?}");

    // The cell runs in a kernel on the Jupyter server, and its outputs are saved there.
    let before = jupyter.kernel_ids().await;
    let ran = server
        .call(
            "notebook_execute",
            json!({"path": path, "code": "import os\nprint(x if 'x' in dir() else 'fresh', os.getpid())"}),
        )
        .await;
    assert!(ran.ok(), "{ran:?}\n{}", jupyter.log());
    assert_eq!(ran.structured["saved"], true, "{ran:?}");
    let kernel = ran.structured["kernel"]
        .as_str()
        .expect("kernel")
        .to_owned();
    let status = server
        .call("runtime_status", json!({"kernel": kernel}))
        .await;
    let remote_id = status.structured["kernel"]["remote"]["kernel_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a kernel on the server: {status:?}"))
        .to_owned();
    assert!(!before.contains(&remote_id));
    assert!(jupyter.kernel_ids().await.contains(&remote_id));
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).expect("file")).expect("JSON");
    let last = &saved["cells"][2];
    assert_eq!(last["cell_type"], "code");
    let text = joined(&last["outputs"][0]["text"]);
    assert!(text.starts_with("fresh "), "{saved}");
    assert_eq!(
        ran.structured["revision"],
        sha256_hex(&std::fs::read(&file).expect("file")).as_str()
    );

    // The notebook is a resource too.
    let listed = server
        .client
        .list_all_resources()
        .await
        .expect("resources/list");
    let uri = "notebook:///jupyter%3Awork/analysis.ipynb";
    assert!(
        listed.iter().any(|resource| resource.uri == uri),
        "{listed:?}"
    );
    let contents = server
        .client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
        .await
        .expect("resources/read");
    let text = match &contents.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("{other:?}"),
    };
    let notebook: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(notebook["cells"].as_array().map(Vec::len), Some(3));
    server.stop().await;
}

#[tokio::test]
async fn a_change_on_the_server_since_the_read_is_a_conflict_and_nothing_is_overwritten() {
    let jupyter = JupyterServer::start().await;
    let file = jupyter.root().join("shared.ipynb");
    let server = server_for(&jupyter).await;
    let path = "jupyter:shared.ipynb";
    let created = server
        .call(
            "notebook_create",
            json!({"path": path, "cells": [{"cell_type": "code", "source": "a = 1"}]}),
        )
        .await;
    assert!(created.ok(), "{created:?}");
    let revision = created.structured["revision"].clone();

    // A person saves the notebook in JupyterLab meanwhile.
    let mut theirs: Value =
        serde_json::from_slice(&std::fs::read(&file).expect("file")).expect("JSON");
    theirs["cells"][0]["source"] = json!("a = 2  # theirs");
    let their_bytes = serde_json::to_vec_pretty(&theirs).expect("encode");
    std::fs::write(&file, &their_bytes).expect("their save");

    for (tool, arguments) in [
        (
            "notebook_edit",
            json!({"path": path, "action": "update", "index": 0, "source": "a = 3",
                   "expected_revision": revision}),
        ),
        (
            "notebook_execute_cell",
            json!({"path": path, "index": 0, "expected_revision": revision}),
        ),
        (
            "notebook_create",
            json!({"path": path, "overwrite": true, "expected_revision": revision}),
        ),
    ] {
        let refused = server.call(tool, arguments).await;
        assert_eq!(code(&refused), "revision_conflict", "{tool}: {refused:?}");
        assert_eq!(
            std::fs::read(&file).expect("file"),
            their_bytes,
            "{tool} wrote nothing"
        );
    }
    // Read again: their change is there, and an edit on the new revision goes through.
    let read = server.call("notebook_read", json!({"path": path})).await;
    assert_eq!(read.structured["cells"][0]["source"], "a = 2  # theirs");
    let edited = server
        .call(
            "notebook_edit",
            json!({"path": path, "action": "insert", "source": "b = 1",
                   "expected_revision": read.structured["revision"]}),
        )
        .await;
    assert!(edited.ok(), "{edited:?}");
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).expect("file")).expect("JSON");
    assert_eq!(joined(&saved["cells"][0]["source"]), "a = 2  # theirs");
    assert_eq!(saved["cells"].as_array().map(Vec::len), Some(2));
    server.stop().await;
}

#[tokio::test]
async fn jupyter_paths_are_confined_and_need_a_configured_server() {
    let jupyter = JupyterServer::start().await;
    let server = server_for(&jupyter).await;
    for bad in [
        "jupyter:../outside.ipynb",
        "jupyter:/etc/x.ipynb",
        "jupyter:a//b.ipynb",
        "jupyter:script.py",
        "jupyter:",
    ] {
        let refused = server.call("notebook_read", json!({"path": bad})).await;
        assert_eq!(code(&refused), "invalid_path", "{bad}: {refused:?}");
    }
    let missing = server
        .call(
            "notebook_read",
            json!({"path": "jupyter:nothing-here.ipynb"}),
        )
        .await;
    assert_eq!(code(&missing), "notebook_not_found", "{missing:?}");
    server.stop().await;

    // Without a Jupyter server, a `jupyter:` path is not taken for a local file.
    let local = Server::start_unready(Family::Handshake, &[]).await;
    let refused = local
        .call("notebook_create", json!({"path": "jupyter:a.ipynb"}))
        .await;
    assert_eq!(code(&refused), "invalid_configuration", "{refused:?}");
    local.stop().await;
}

#[tokio::test]
async fn a_notebook_the_person_runs_uses_their_kernel() {
    let jupyter = JupyterServer::start().await;
    let server = server_for(&jupyter).await;
    let created = server
        .call("notebook_create", json!({"path": "jupyter:theirs.ipynb"}))
        .await;
    assert!(created.ok(), "{created:?}");
    // JupyterLab opened it: the server has a session with a kernel for the path.
    let (status, session) = jupyter
        .post(
            "api/sessions",
            json!({"path": "theirs.ipynb", "type": "notebook", "kernel": {"name": "python3"}}),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    let their_kernel = session["kernel"]["id"].as_str().expect("id").to_owned();
    let ran = server
        .call(
            "notebook_execute",
            json!({"path": "jupyter:theirs.ipynb", "code": "shared = 'from the agent'"}),
        )
        .await;
    assert!(ran.ok(), "{ran:?}");
    let kernel = ran.structured["kernel"].as_str().expect("kernel");
    let status = server
        .call("runtime_status", json!({"kernel": kernel}))
        .await;
    assert_eq!(
        status.structured["kernel"]["remote"]["kernel_id"], their_kernel,
        "{status:?}"
    );
    assert_eq!(status.structured["kernel"]["remote"]["attached"], true);
    server.stop().await;
    // Their kernel is theirs: it outlives the agent's server.
    assert!(jupyter.kernel_ids().await.contains(&their_kernel));
}
