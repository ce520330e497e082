//! The notebook tools on a workspace of their own (a temporary directory): files are created,
//! read and edited there, never outside it; revisions guard every change; runs save their
//! outputs into the file (on the fake kernels, which the notebook's session runs on too).

use std::collections::BTreeSet;
use std::path::Path;

use super::*;

/// A server whose workspace is `root`.
async fn server_in(root: &Path, shape: StructuredOutput) -> Connected {
    Setup::new(shape).workspace(root).start().await
}

/// Creates `path` with code cells of `sources`; returns its revision.
async fn create(server: &Connected, path: &str, sources: &[&str]) -> String {
    let cells: Vec<Value> = sources
        .iter()
        .map(|source| json!({"source": source}))
        .collect();
    let result = server
        .call("notebook_create", json!({"path": path, "cells": cells}))
        .await;
    assert_eq!(result.is_error, Some(false), "{result:?}");
    structured(&result)["revision"]
        .as_str()
        .expect("a revision")
        .to_owned()
}

async fn read(server: &Connected, arguments: Value) -> Value {
    let result = server.call("notebook_read", arguments.clone()).await;
    assert_eq!(result.is_error, Some(false), "{arguments}: {result:?}");
    structured(&result).clone()
}

fn sources(read: &Value) -> Vec<String> {
    read["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|cell| cell["source"].as_str().expect("a source").to_owned())
        .collect()
}

#[tokio::test]
async fn create_then_read_round_trips_the_cells() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    let created = server
        .call(
            "notebook_create",
            json!({"path": "analysis.ipynb", "cells": [
                {"source": "import math"},
                {"cell_type": "markdown", "source": "# Results"},
                {"source": "math.pi", "metadata": {"tags": ["show"]}},
            ]}),
        )
        .await;
    let created = structured(&created);
    assert_eq!(created["path"], "analysis.ipynb");
    assert_eq!(created["uri"], "notebook:///analysis.ipynb");
    assert_eq!(created["cell_count"], 3);
    let notebook = read(&server, json!({"path": "analysis.ipynb"})).await;
    assert_eq!(sources(&notebook), ["import math", "# Results", "math.pi"]);
    let kinds: Vec<&Value> = notebook["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|cell| &cell["cell_type"])
        .collect();
    assert_eq!(kinds, [&json!("code"), &json!("markdown"), &json!("code")]);
    assert_eq!(notebook["cells"][2]["metadata"], json!({"tags": ["show"]}));
    assert_eq!(notebook["metadata"]["kernelspec"]["name"], "python3");
    assert_eq!(
        (&notebook["nbformat"], &notebook["nbformat_minor"]),
        (&json!(4), &json!(5))
    );
    // Every cell has an id (nbformat 4.5), each its own.
    let ids: BTreeSet<&str> = notebook["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|cell| cell["id"].as_str().expect("an id"))
        .collect();
    assert_eq!(ids.len(), 3);
    // On disk: a notebook Jupyter reads.
    let file: Value = serde_json::from_slice(
        &std::fs::read(root.path().join("analysis.ipynb")).expect("the file"),
    )
    .expect("JSON");
    assert_eq!(file["cells"][1]["source"], json!(["# Results"]));
}

#[tokio::test]
async fn create_read_and_revision_agree_on_the_revision_and_the_size() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    let revision = create(&server, "n.ipynb", &["a = 1"]).await;
    assert_eq!(revision.len(), 64, "a SHA-256: {revision}");
    let notebook = read(&server, json!({"path": "n.ipynb"})).await;
    assert_eq!(notebook["revision"], revision.as_str());
    let checked = server
        .call("notebook_revision", json!({"path": "n.ipynb"}))
        .await;
    let checked = structured(&checked);
    assert_eq!(checked["revision"], revision.as_str());
    let size = std::fs::metadata(root.path().join("n.ipynb"))
        .expect("the file")
        .len();
    assert_eq!(checked["bytes"], size);
}

#[tokio::test]
async fn create_refuses_an_existing_notebook_unless_overwrite_at_its_revision() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    let revision = create(&server, "n.ipynb", &["first = 1"]).await;
    let before = std::fs::read(root.path().join("n.ipynb")).expect("the file");
    for (arguments, code) in [
        (json!({"path": "n.ipynb"}), "notebook_exists"),
        (
            json!({"path": "n.ipynb", "overwrite": true, "expected_revision": "0".repeat(64)}),
            "revision_conflict",
        ),
    ] {
        let result = server.call("notebook_create", arguments.clone()).await;
        assert_eq!(error_code("notebook_create", &arguments, &result), code);
        assert_eq!(
            std::fs::read(root.path().join("n.ipynb")).expect("the file"),
            before,
            "unchanged after {arguments}"
        );
    }
    let replaced = server
        .call(
            "notebook_create",
            json!({"path": "n.ipynb", "overwrite": true, "expected_revision": revision,
                   "cells": [{"source": "second = 2"}]}),
        )
        .await;
    assert_eq!(replaced.is_error, Some(false), "{replaced:?}");
    let notebook = read(&server, json!({"path": "n.ipynb"})).await;
    assert_eq!(sources(&notebook), ["second = 2"]);
}

#[tokio::test]
async fn an_edit_at_a_stale_revision_is_a_conflict_and_changes_nothing() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    let stale = create(&server, "n.ipynb", &["a = 1"]).await;
    let edited = server
        .call(
            "notebook_edit",
            json!({"path": "n.ipynb", "action": "insert", "source": "b = 2",
                   "expected_revision": stale}),
        )
        .await;
    let current = structured(&edited)["revision"]
        .as_str()
        .expect("revision")
        .to_owned();
    assert_ne!(current, stale);
    let before = std::fs::read(root.path().join("n.ipynb")).expect("the file");
    let arguments = json!({"path": "n.ipynb", "action": "delete", "index": 0,
                           "expected_revision": stale});
    let result = server.call("notebook_edit", arguments.clone()).await;
    assert_eq!(
        error_code("notebook_edit", &arguments, &result),
        "revision_conflict"
    );
    let refused = &structured(&result)["error"];
    let message = refused["message"].as_str().unwrap_or("");
    assert!(
        message.contains(&stale) && message.contains(&current),
        "both revisions named: {message}"
    );
    assert!(
        refused["hint"]
            .as_str()
            .is_some_and(|hint| hint.contains("nothing was changed")),
        "{refused}"
    );
    assert_eq!(
        std::fs::read(root.path().join("n.ipynb")).expect("the file"),
        before
    );
}

#[tokio::test]
async fn edits_insert_update_move_and_delete_cells_by_stable_ids() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    create(&server, "n.ipynb", &["a = 1", "b = 2"]).await;
    let edit = |arguments: Value| {
        let server = &server;
        async move {
            let result = server.call("notebook_edit", arguments.clone()).await;
            assert_eq!(result.is_error, Some(false), "{arguments}: {result:?}");
            structured(&result).clone()
        }
    };
    let inserted = edit(json!({"path": "n.ipynb", "action": "insert", "index": 0,
                               "source": "# Title", "cell_type": "markdown"}))
    .await;
    assert_eq!(inserted["cell_count"], 3);
    assert_eq!(inserted["cell"]["index"], 0);
    assert_eq!(inserted["cell"]["cell_type"], "markdown");
    let title = inserted["cell"]["id"].as_str().expect("an id").to_owned();
    let notebook = read(&server, json!({"path": "n.ipynb"})).await;
    let b = notebook["cells"][2]["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    edit(json!({"path": "n.ipynb", "action": "update", "cell_id": b, "source": "b = 20"})).await;
    let moved = edit(
        json!({"path": "n.ipynb", "action": "move", "cell_id": title,
                            "to_index": 2}),
    )
    .await;
    assert_eq!(moved["cell"]["index"], 2);
    assert_eq!(
        moved["cell"]["id"],
        title.as_str(),
        "the id moves with the cell"
    );
    let notebook = read(&server, json!({"path": "n.ipynb"})).await;
    assert_eq!(sources(&notebook), ["a = 1", "b = 20", "# Title"]);
    assert_eq!(notebook["cells"][1]["id"], b.as_str());
    let deleted = edit(json!({"path": "n.ipynb", "action": "delete", "cell_id": b})).await;
    assert_eq!(deleted["cell_count"], 2);
    let notebook = read(&server, json!({"path": "n.ipynb"})).await;
    assert_eq!(sources(&notebook), ["a = 1", "# Title"]);
}

#[tokio::test]
async fn an_edit_refuses_fields_its_action_does_not_take_and_needs_its_own() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    create(&server, "n.ipynb", &["a = 1"]).await;
    let before = std::fs::read(root.path().join("n.ipynb")).expect("the file");
    for (arguments, code, message) in [
        (
            json!({"action": "delete", "index": 0, "source": "x"}),
            "invalid_arguments",
            "source not used by action delete",
        ),
        (
            json!({"action": "insert"}),
            "invalid_arguments",
            "action insert needs source",
        ),
        (
            json!({"action": "update", "index": 0}),
            "invalid_arguments",
            "action update needs source, metadata and/or cell_type",
        ),
        (
            json!({"action": "move", "index": 0}),
            "invalid_arguments",
            "action move needs to_index",
        ),
        (
            json!({"action": "set_metadata", "index": 0}),
            "invalid_arguments",
            "action set_metadata needs metadata",
        ),
        (
            json!({"action": "delete"}),
            "invalid_arguments",
            "give the cell's cell_id or its index",
        ),
        (
            json!({"action": "delete", "index": 0, "cell_id": "x"}),
            "invalid_arguments",
            "give either cell_id or index, not both",
        ),
        (
            json!({"action": "delete", "index": 7}),
            "cell_not_found",
            "no cell at index 7 in a notebook of 1 cells",
        ),
    ] {
        let mut arguments = arguments;
        arguments["path"] = json!("n.ipynb");
        let result = server.call("notebook_edit", arguments.clone()).await;
        assert_eq!(error_code("notebook_edit", &arguments, &result), code);
        assert_eq!(structured(&result)["error"]["message"], message);
    }
    assert_eq!(
        std::fs::read(root.path().join("n.ipynb")).expect("the file"),
        before
    );
}

#[tokio::test]
async fn paths_outside_the_workspace_are_refused_by_every_notebook_tool() {
    let top = workspace();
    let root = top.path().join("workspace");
    std::fs::create_dir(&root).expect("the workspace");
    let server = server_in(&root, StructuredOutput::Always).await;
    let outside = top.path().join("escape.ipynb");
    let absolute = outside.display().to_string();
    for path in [
        "../escape.ipynb",
        absolute.as_str(),
        "sub/../../escape.ipynb",
        "./n.ipynb",
        "notes.txt",
        "",
    ] {
        for (tool, mut arguments) in [
            ("notebook_create", json!({})),
            ("notebook_read", json!({})),
            ("notebook_revision", json!({})),
            (
                "notebook_edit",
                json!({"action": "insert", "source": "x = 1"}),
            ),
            ("notebook_execute", json!({"code": "x = 1"})),
            ("notebook_execute_cell", json!({"index": 0})),
            ("notebook_session", json!({})),
            ("notebook_session_close", json!({})),
        ] {
            arguments["path"] = json!(path);
            let result = server.call(tool, arguments.clone()).await;
            assert_eq!(error_code(tool, &arguments, &result), "invalid_path");
        }
    }
    assert!(!outside.exists());
    assert_eq!(std::fs::read_dir(&root).expect("read").count(), 0);
    assert_eq!(
        server.kernels.launches(),
        1,
        "no notebook session was started"
    );
}

#[tokio::test]
async fn a_symlink_out_of_the_workspace_is_refused() {
    let top = workspace();
    let root = top.path().join("workspace");
    let elsewhere = top.path().join("elsewhere");
    std::fs::create_dir(&root).expect("the workspace");
    std::fs::create_dir(&elsewhere).expect("another directory");
    std::os::unix::fs::symlink(&elsewhere, root.join("link")).expect("a symlink");
    let server = server_in(&root, StructuredOutput::Always).await;
    let arguments = json!({"path": "link/escape.ipynb"});
    let result = server.call("notebook_create", arguments.clone()).await;
    assert_eq!(
        error_code("notebook_create", &arguments, &result),
        "invalid_path"
    );
    assert!(
        text(&result)
            .contains("\"link\" is a symlink (the server follows no symlink in the workspace)"),
        "{}",
        text(&result)
    );
    assert_eq!(std::fs::read_dir(&elsewhere).expect("read").count(), 0);
}

#[tokio::test]
async fn a_missing_notebook_is_not_found_and_a_missing_directory_is_a_bad_path() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    for tool in ["notebook_read", "notebook_revision"] {
        let arguments = json!({"path": "missing.ipynb"});
        let result = server.call(tool, arguments.clone()).await;
        assert_eq!(error_code(tool, &arguments, &result), "notebook_not_found");
        assert_eq!(
            structured(&result)["error"]["hint"],
            "notebook_create makes a new notebook"
        );
    }
    let arguments = json!({"path": "sub/n.ipynb"});
    let result = server.call("notebook_create", arguments.clone()).await;
    assert_eq!(
        error_code("notebook_create", &arguments, &result),
        "invalid_path"
    );
    assert!(text(&result).contains("its directory does not exist in the workspace"));
}

#[tokio::test]
async fn a_file_that_is_not_a_notebook_is_invalid_notebook() {
    let root = workspace();
    std::fs::write(root.path().join("broken.ipynb"), "not json").expect("write");
    std::fs::write(
        root.path().join("old.ipynb"),
        r#"{"nbformat": 3, "cells": []}"#,
    )
    .expect("write");
    let server = server_in(root.path(), StructuredOutput::Always).await;
    for path in ["broken.ipynb", "old.ipynb"] {
        let arguments = json!({ "path": path });
        let result = server.call("notebook_read", arguments.clone()).await;
        assert_eq!(
            error_code("notebook_read", &arguments, &result),
            "invalid_notebook"
        );
    }
    assert_eq!(
        std::fs::read_to_string(root.path().join("broken.ipynb")).expect("read"),
        "not json"
    );
}

#[tokio::test]
async fn a_jupyter_path_needs_a_jupyter_server() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    let arguments = json!({"path": "jupyter:shared/n.ipynb"});
    let result = server.call("notebook_read", arguments.clone()).await;
    assert_eq!(
        error_code("notebook_read", &arguments, &result),
        "invalid_configuration"
    );
    let hint = structured(&result)["error"]["hint"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(hint.contains(ipython_mcp_config::JUPYTER_URL.env), "{hint}");
}

#[tokio::test]
async fn an_unusable_workspace_root_is_a_configuration_error_for_notebooks_only() {
    let top = workspace();
    let server = server_in(&top.path().join("missing"), StructuredOutput::Always).await;
    let arguments = json!({"path": "n.ipynb"});
    let result = server.call("notebook_create", arguments.clone()).await;
    assert_eq!(
        error_code("notebook_create", &arguments, &result),
        "invalid_configuration"
    );
    let hint = structured(&result)["error"]["hint"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        hint.contains(ipython_mcp_config::WORKSPACE_ROOT.env),
        "{hint}"
    );
    // The rest of the server works.
    let ran = server.call("execute", json!({"code": "x = 1"})).await;
    assert_eq!(ran.is_error, Some(false));
}

#[tokio::test]
async fn read_pages_cells_and_says_where_to_continue() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    create(&server, "n.ipynb", &["c0", "c1", "c2", "c3", "c4"]).await;
    let first = read(&server, json!({"path": "n.ipynb", "max_cells": 2})).await;
    assert_eq!(sources(&first), ["c0", "c1"]);
    assert_eq!(first["next_index"], 2);
    assert_eq!(first["cell_count"], 5);
    let last = read(
        &server,
        json!({"path": "n.ipynb", "max_cells": 2, "start_index": 4}),
    )
    .await;
    assert_eq!(sources(&last), ["c4"]);
    assert_eq!(last["next_index"], Value::Null);
    for (arguments, message) in [
        (
            json!({"path": "n.ipynb", "max_cells": 0}),
            "max_cells must be between 1 and 1000, got 0",
        ),
        (
            json!({"path": "n.ipynb", "max_cells": 1001}),
            "max_cells must be between 1 and 1000, got 1001",
        ),
    ] {
        let result = server.call("notebook_read", arguments.clone()).await;
        assert_eq!(
            error_code("notebook_read", &arguments, &result),
            "invalid_arguments"
        );
        assert_eq!(structured(&result)["error"]["message"], message);
    }
}

#[tokio::test]
async fn read_gives_one_cell_by_id_or_by_index() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    create(&server, "n.ipynb", &["c0", "c1", "c2"]).await;
    let whole = read(&server, json!({"path": "n.ipynb"})).await;
    let id = whole["cells"][2]["id"].as_str().expect("an id").to_owned();
    let by_id = read(&server, json!({"path": "n.ipynb", "cell_id": id})).await;
    assert_eq!(sources(&by_id), ["c2"]);
    let by_index = read(&server, json!({"path": "n.ipynb", "index": 1})).await;
    assert_eq!(sources(&by_index), ["c1"]);
    let arguments = json!({"path": "n.ipynb", "cell_id": "nope"});
    let result = server.call("notebook_read", arguments.clone()).await;
    assert_eq!(
        error_code("notebook_read", &arguments, &result),
        "cell_not_found"
    );
}

#[tokio::test]
async fn notebook_execute_saves_a_new_cell_with_its_output() {
    for shape in SHAPES {
        let root = workspace();
        let server = server_in(root.path(), shape).await;
        let before = create(&server, "n.ipynb", &["a = 1"]).await;
        let result = server
            .call(
                "notebook_execute",
                json!({"path": "n.ipynb", "code": "q = 1"}),
            )
            .await;
        assert_eq!(result.is_error, Some(false), "{result:?}");
        let shown = text(&result);
        assert!(
            shown.starts_with("[ok] Out[1]\n--- stdout ---\nq = 1\n")
                && shown.contains("[saved in cell 1 (id "),
            "{shown}"
        );
        if shape == StructuredOutput::Always {
            let run = structured(&result);
            assert_eq!(run["saved"], true);
            assert_eq!(run["session_started"], true);
            assert_eq!(run["kernel"], "nb-n");
            assert_eq!(run["cell"]["index"], 1);
            assert_ne!(run["revision"], before.as_str());
        } else {
            assert!(result.structured_content.is_none(), "a tool that runs code");
        }
        let notebook = read(&server, json!({"path": "n.ipynb", "include_outputs": true})).await;
        assert_eq!(sources(&notebook), ["a = 1", "q = 1"]);
        let cell = &notebook["cells"][1];
        assert_eq!(cell["execution_count"], 1);
        assert_eq!(
            cell["outputs"],
            json!([{"output_type": "stream", "name": "stdout", "text": "q = 1\n",
                    "text_omitted_chars": 0}]),
            "{cell}"
        );
        // The notebook's own session ran it, not the default one.
        assert_eq!(server.kernels.launches(), 2);
        assert!(
            server.ran_nothing().await,
            "the default session ran nothing"
        );
    }
}

#[tokio::test]
async fn notebook_execute_without_persist_runs_and_leaves_the_file_alone() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    let revision = create(&server, "n.ipynb", &["a = 1"]).await;
    let before = std::fs::read(root.path().join("n.ipynb")).expect("the file");
    let result = server
        .call(
            "notebook_execute",
            json!({"path": "n.ipynb", "code": "peek = 1", "persist": false}),
        )
        .await;
    let run = structured(&result);
    assert_eq!(run["stdout"], "peek = 1\n");
    assert_eq!(run["saved"], false);
    assert_eq!(run["revision"], revision.as_str());
    assert_eq!(
        std::fs::read(root.path().join("n.ipynb")).expect("the file"),
        before
    );
}

#[tokio::test]
async fn notebook_execute_cell_saves_the_outputs_into_that_cell() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    create(&server, "n.ipynb", &["first = 1", "second = 2"]).await;
    let result = server
        .call(
            "notebook_execute_cell",
            json!({"path": "n.ipynb", "index": 1}),
        )
        .await;
    let run = structured(&result);
    assert_eq!(run["stdout"], "second = 2\n");
    assert_eq!(run["saved"], true);
    let notebook = read(&server, json!({"path": "n.ipynb", "include_outputs": true})).await;
    assert_eq!(notebook["cell_count"], 2, "no cell added");
    assert_eq!(notebook["cells"][0]["outputs"], json!([]));
    assert_eq!(notebook["cells"][1]["execution_count"], 1);
    assert_eq!(notebook["cells"][1]["outputs"][0]["text"], "second = 2\n");
}

#[tokio::test]
async fn only_code_cells_run() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    server
        .call(
            "notebook_create",
            json!({"path": "n.ipynb", "cells": [{"cell_type": "markdown", "source": "# T"}]}),
        )
        .await;
    let arguments = json!({"path": "n.ipynb", "index": 0});
    let result = server
        .call("notebook_execute_cell", arguments.clone())
        .await;
    assert_eq!(
        error_code("notebook_execute_cell", &arguments, &result),
        "invalid_arguments"
    );
    assert_eq!(
        structured(&result)["error"]["message"],
        "cell 0 is a markdown cell; only code cells run"
    );
    assert_eq!(server.kernels.launches(), 1, "no session was started");
}

#[tokio::test]
async fn a_run_at_a_stale_revision_or_past_the_end_runs_nothing() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    create(&server, "n.ipynb", &["a = 1"]).await;
    let before = std::fs::read(root.path().join("n.ipynb")).expect("the file");
    for (tool, arguments, code) in [
        (
            "notebook_execute",
            json!({"path": "n.ipynb", "code": "x = 1", "expected_revision": "0".repeat(64)}),
            "revision_conflict",
        ),
        (
            "notebook_execute_cell",
            json!({"path": "n.ipynb", "index": 0, "expected_revision": "0".repeat(64)}),
            "revision_conflict",
        ),
        (
            "notebook_execute",
            json!({"path": "n.ipynb", "code": "x = 1", "index": 5}),
            "invalid_arguments",
        ),
        (
            "notebook_execute",
            json!({"path": "n.ipynb", "code": "x = 1", "timeout_seconds": 0}),
            "invalid_arguments",
        ),
        (
            "notebook_execute",
            json!({"path": "n.ipynb", "code": "#".repeat(ipython_mcp_kernel::MAX_CODE_BYTES + 1)}),
            "invalid_arguments",
        ),
    ] {
        let result = server.call(tool, arguments.clone()).await;
        assert_eq!(error_code(tool, &json!(tool), &result), code);
    }
    assert_eq!(server.kernels.launches(), 1, "no session was started");
    assert_eq!(
        std::fs::read(root.path().join("n.ipynb")).expect("the file"),
        before
    );
}

#[tokio::test]
async fn an_exception_is_saved_as_the_cells_error_output() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    create(&server, "n.ipynb", &[]).await;
    let result = server
        .call(
            "notebook_execute",
            json!({"path": "n.ipynb", "code": "raise KeyError('k')"}),
        )
        .await;
    assert_eq!(result.is_error, Some(true));
    let run = structured(&result);
    assert_eq!(run["error"]["code"], "execution_error");
    assert_eq!(run["saved"], true, "a failed run is saved too");
    let notebook = read(&server, json!({"path": "n.ipynb", "include_outputs": true})).await;
    let output = &notebook["cells"][0]["outputs"][0];
    assert_eq!(output["output_type"], "error");
    assert_eq!(output["ename"], "KeyError");
    assert_eq!(output["evalue"], "k");
}

#[tokio::test]
async fn a_notebook_session_starts_once_and_closing_it_stops_it() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    create(&server, "n.ipynb", &["a = 1"]).await;
    let first = server
        .call("notebook_session", json!({"path": "n.ipynb"}))
        .await;
    let first = structured(&first);
    assert_eq!(first["kernel"], "nb-n");
    assert_eq!(first["started"], true);
    let again = server
        .call("notebook_session", json!({"path": "n.ipynb"}))
        .await;
    assert_eq!(structured(&again)["started"], false);
    assert_eq!(server.kernels.launches(), 2, "one session for the notebook");
    // Its session answers for the notebook.
    let status = server
        .call("runtime_status", json!({"notebook": "n.ipynb"}))
        .await;
    assert_eq!(structured(&status)["kernel_id"], "nb-n");
    let closed = server
        .call("notebook_session_close", json!({"path": "n.ipynb"}))
        .await;
    let closed = structured(&closed);
    assert_eq!(
        (&closed["kernel"], &closed["stopped"]),
        (&json!("nb-n"), &json!(true))
    );
    let status = server
        .call("runtime_status", json!({"notebook": "n.ipynb"}))
        .await;
    assert_eq!(
        error_code("runtime_status", &json!({}), &status),
        "invalid_arguments"
    );
    let listed = server.call("kernel_list", json!({})).await;
    assert_eq!(
        structured(&listed)["kernels"].as_array().map(Vec::len),
        Some(1)
    );
}

#[tokio::test]
async fn a_notebook_bound_to_the_default_session_runs_there_and_closing_keeps_it() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    create(&server, "n.ipynb", &["a = 1"]).await;
    let bound = server
        .call(
            "notebook_session",
            json!({"path": "n.ipynb", "kernel": "default"}),
        )
        .await;
    assert_eq!(structured(&bound)["kernel"], "default", "{bound:?}");
    let run = server
        .call(
            "notebook_execute",
            json!({"path": "n.ipynb", "code": "shared = 1"}),
        )
        .await;
    assert_eq!(structured(&run)["kernel"], "default");
    assert_eq!(structured(&run)["session_started"], false);
    assert_eq!(server.kernels.launches(), 1);
    let closed = server
        .call("notebook_session_close", json!({"path": "n.ipynb"}))
        .await;
    assert_eq!(structured(&closed)["stopped"], false, "default stays");
    let next = server.call("execute", json!({"code": "y = 2"})).await;
    assert_eq!(structured(&next)["execution_count"], 2, "the same kernel");
}

#[tokio::test]
async fn a_percent_script_round_trips() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Always).await;
    let created = server
        .call(
            "notebook_create",
            json!({"path": "script.py", "cells": [
                {"source": "import os"},
                {"cell_type": "markdown", "source": "Notes"},
            ]}),
        )
        .await;
    assert_eq!(created.is_error, Some(false), "{created:?}");
    let file = std::fs::read_to_string(root.path().join("script.py")).expect("the file");
    assert!(file.contains("# %%\nimport os"), "{file}");
    assert!(file.contains("# %% [markdown]\n# Notes"), "{file}");
    let notebook = read(&server, json!({"path": "script.py"})).await;
    assert_eq!(sources(&notebook), ["import os", "Notes"]);
    assert_eq!(notebook["cells"][1]["cell_type"], "markdown");
}

#[tokio::test]
async fn notebook_files_answer_structured_in_auto_and_runs_answer_text() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Auto).await;
    create(&server, "n.ipynb", &["a = 1"]).await;
    for (tool, arguments) in [
        ("notebook_read", json!({"path": "n.ipynb"})),
        ("notebook_revision", json!({"path": "n.ipynb"})),
        (
            "notebook_edit",
            json!({"path": "n.ipynb", "action": "clear_outputs"}),
        ),
        ("notebook_session", json!({"path": "n.ipynb"})),
    ] {
        let result = server.call(tool, arguments).await;
        assert_eq!(structured(&result)["ok"], true, "{tool}");
        assert!(
            text(&result).starts_with(&format!("[{tool}] ok\n")),
            "{tool}: {}",
            text(&result)
        );
    }
    for (tool, arguments) in [
        (
            "notebook_execute",
            json!({"path": "n.ipynb", "code": "b = 2"}),
        ),
        (
            "notebook_execute_cell",
            json!({"path": "n.ipynb", "index": 0}),
        ),
    ] {
        let result = server.call(tool, arguments).await;
        assert!(result.structured_content.is_none(), "{tool}: {result:?}");
        assert!(text(&result).contains("[saved in cell "), "{tool}");
    }
}

#[tokio::test]
async fn the_text_of_a_notebook_run() {
    let root = workspace();
    let server = server_in(root.path(), StructuredOutput::Auto).await;
    create(&server, "n.ipynb", &["a = 1"]).await;
    let result = server
        .call(
            "notebook_execute",
            json!({"path": "n.ipynb", "code": "b = 2"}),
        )
        .await;
    let shown = text(&result);
    insta::with_settings!({filters => snapshot_filters()}, {
        insta::assert_snapshot!(shown);
    });
}
