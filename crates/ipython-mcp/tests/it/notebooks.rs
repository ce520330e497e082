//! End to end: the notebooks toolset through the real binary with real kernels —
//! every tool, path confinement, revisions and conflicts (stale revision, another process
//! writing during an execution), id stability, crash safety of writes, bounded reads of a big
//! notebook, and Jupyter's own `nbformat` validating and round-tripping every file written.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{Family, Server};

/// A fresh workspace root (with a `versions/` dir outside it for validation copies).
struct Workspace {
    dir: tempfile::TempDir,
    saved: usize,
}

impl Workspace {
    fn new() -> Workspace {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("root")).expect("root");
        std::fs::create_dir(dir.path().join("versions")).expect("versions");
        Workspace { dir, saved: 0 }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn env(&self) -> String {
        self.root().display().to_string()
    }

    fn read(&self, relative: &str) -> Vec<u8> {
        std::fs::read(self.root().join(relative)).expect("read notebook")
    }

    fn json(&self, relative: &str) -> Value {
        serde_json::from_slice(&self.read(relative)).expect("notebook JSON")
    }

    /// Keeps a copy of the file as it is now, for nbformat validation at the end.
    fn keep(&mut self, relative: &str) {
        self.saved += 1;
        let copy = self
            .dir
            .path()
            .join("versions")
            .join(format!("{:03}.ipynb", self.saved));
        std::fs::copy(self.root().join(relative), copy).expect("copy");
    }

    fn versions(&self) -> PathBuf {
        self.dir.path().join("versions")
    }
}

fn revision(result: &support::ToolResult) -> String {
    result.structured["revision"]
        .as_str()
        .unwrap_or_else(|| panic!("revision in {result:?}"))
        .to_owned()
}

fn sha256(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The product-provisioned Python with `nbformat` from PyPI importable via PYTHONPATH.
async fn python_with_nbformat() -> (PathBuf, PathBuf) {
    support::python_with("nbformat==5.10.4", "nbformat", "nbformat-deps").await
}

/// Runs `nbformat.validate` on every kept version and checks that Jupyter writes each one back
/// byte for byte as we wrote it.
async fn validate_with_jupyter(versions: &Path) {
    let (python, deps) = python_with_nbformat().await;
    let script = r#"
import glob, json, sys
import nbformat
files = sorted(glob.glob(sys.argv[1] + "/*.ipynb"))
for name in files:
    with open(name, encoding="utf-8") as handle:
        text = handle.read()
    notebook = nbformat.reads(text, as_version=4)
    nbformat.validate(notebook)
    again = nbformat.writes(notebook)
    if not again.endswith("\n"):
        again += "\n"
    print(json.dumps({"file": name, "same": again == text}))
"#;
    let output = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(versions)
        .env("PYTHONPATH", deps)
        .output()
        .expect("python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "nbformat rejected a file:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("json"))
        .collect();
    let expected = std::fs::read_dir(versions).expect("ls").count();
    assert_eq!(lines.len(), expected, "{stdout}");
    for line in lines {
        assert_eq!(line["same"], true, "Jupyter writes it differently: {line}");
    }
}

#[tokio::test]
async fn notebooks_are_edited_executed_and_saved_as_jupyter_would() {
    let mut workspace = Workspace::new();
    let root = workspace.env();
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_WORKSPACE_ROOT", &root)]).await;
    let nb = "analysis.ipynb";

    // Create, with a first cell; a second create is refused.
    let created = server
        .call(
            "notebook_create",
            json!({"path": nb, "cells": [{"cell_type": "markdown", "source": "# Analysis"}]}),
        )
        .await;
    assert!(created.ok(), "{created:?}");
    assert_eq!(created.structured["uri"], "notebook:///analysis.ipynb");
    let first_revision = revision(&created);
    assert_eq!(first_revision, sha256(&workspace.read(nb)));
    workspace.keep(nb);
    let again = server.call("notebook_create", json!({"path": nb})).await;
    assert!(again.is_error);
    assert_eq!(again.structured["error"]["code"], "notebook_exists");

    // Insert a code cell and run it: outputs saved, count set, id kept.
    let inserted = server
        .call(
            "notebook_edit",
            json!({"action": "insert", "path": nb, "source": "x = 21\nprint('hi')\nx * 2", "expected_revision": first_revision}),
        )
        .await;
    assert!(inserted.ok(), "{inserted:?}");
    let code_id = inserted.structured["cell"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(inserted.structured["cell"]["index"], 1);
    workspace.keep(nb);

    let ran = server
        .call(
            "notebook_execute_cell",
            json!({"path": nb, "cell_id": code_id}),
        )
        .await;
    assert!(ran.ok(), "{ran:?}");
    assert_eq!(ran.structured["stdout"], "hi\n");
    assert_eq!(ran.structured["result"]["text/plain"], "42");
    assert_eq!(ran.structured["saved"], true);
    assert_eq!(ran.structured["session_started"], true);
    assert_eq!(ran.structured["cell"]["id"], code_id.as_str());
    let kernel = ran.structured["kernel"]
        .as_str()
        .expect("kernel")
        .to_owned();
    assert_eq!(kernel, "nb-analysis");
    assert_eq!(revision(&ran), sha256(&workspace.read(nb)));
    workspace.keep(nb);
    let file = workspace.json(nb);
    let cell = &file["cells"][1];
    assert_eq!(cell["id"], code_id.as_str());
    assert_eq!(cell["execution_count"], 1);
    assert_eq!(cell["outputs"][0]["output_type"], "stream");
    assert_eq!(cell["outputs"][0]["text"], json!(["hi\n"]));
    assert_eq!(cell["outputs"][1]["output_type"], "execute_result");
    assert_eq!(cell["outputs"][1]["data"]["text/plain"], json!(["42"]));
    assert_eq!(cell["outputs"][1]["execution_count"], 1);

    // Code persisted as new cells: an error, a display with an image.
    let failed = server
        .call(
            "notebook_execute",
            json!({"path": nb, "code": "import sys\nprint(x, file=sys.stderr)\nraise ValueError('boom')"}),
        )
        .await;
    assert!(failed.is_error, "{failed:?}");
    assert_eq!(failed.structured["session_started"], false, "reused");
    assert_eq!(failed.structured["error"]["code"], "execution_error");
    assert_eq!(failed.structured["saved"], true);
    assert_eq!(failed.structured["cell"]["index"], 2);
    workspace.keep(nb);
    let file = workspace.json(nb);
    let outputs = &file["cells"][2]["outputs"];
    assert_eq!(outputs[0]["name"], "stderr");
    assert_eq!(outputs[0]["text"], json!(["21\n"]));
    assert_eq!(outputs[1]["output_type"], "error");
    assert_eq!(outputs[1]["ename"], "ValueError");
    assert_eq!(outputs[1]["evalue"], "boom");

    // A 1x1 PNG displayed: saved in full in the file, described (not returned) by a read.
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    let shown = server
        .call(
            "notebook_execute",
            json!({"path": nb, "code": format!("import base64\nfrom IPython.display import Image, display\ndisplay(Image(data=base64.b64decode('{png}')))")}),
        )
        .await;
    assert!(shown.ok(), "{shown:?}");
    assert_eq!(shown.images().len(), 1, "the agent sees the image");
    workspace.keep(nb);
    let file = workspace.json(nb);
    assert_eq!(
        file["cells"][3]["outputs"][0]["data"]["image/png"]
            .as_str()
            .map(str::trim_end),
        Some(png),
        "saved whole"
    );
    let read = server
        .call(
            "notebook_read",
            json!({"path": nb, "index": 3, "include_outputs": true}),
        )
        .await;
    assert!(read.ok(), "{read:?}");
    let described = read.structured["cells"][0]["outputs"][0]["data"]["image/png"]
        .as_str()
        .expect("described");
    assert!(described.starts_with("<image/png image"), "{described}");

    // persist=false runs in the notebook's kernel without touching the file.
    let before = workspace.read(nb);
    let peek = server
        .call(
            "notebook_execute",
            json!({"path": nb, "code": "x + 1", "persist": false}),
        )
        .await;
    assert_eq!(peek.structured["result"]["text/plain"], "22");
    assert_eq!(peek.structured["saved"], false);
    assert_eq!(workspace.read(nb), before);

    // Long output: the agent gets the bounded head and tail, the file gets all of it (from the
    // spool).
    let long = server
        .call(
            "notebook_execute",
            json!({"path": nb, "code": "for i in range(3000):\n    print(f'line {i:05d}', 'x' * 40)"}),
        )
        .await;
    assert!(long.ok(), "{long:?}");
    assert!(long.structured["stdout_omitted_chars"].as_u64() > Some(100_000));
    let support::CutStream {
        head, tail, view, ..
    } = long.cut("stdout");
    assert!(head.len() + tail.len() <= 8192, "{view}");
    assert!(head.starts_with("line 00000 "), "{view}");
    assert!(
        tail.ends_with(&format!("line 02999 {}\n", "x".repeat(40))),
        "{view}"
    );
    let file = workspace.json(nb);
    let text = file["cells"][4]["outputs"][0]["text"]
        .as_array()
        .expect("lines");
    assert_eq!(text.len(), 3000, "every line saved");
    assert_eq!(text[2999], format!("line 02999 {}\n", "x".repeat(40)));
    workspace.keep(nb);
    let removed = server
        .call(
            "notebook_edit",
            json!({"action": "delete", "path": nb, "index": 4}),
        )
        .await;
    assert!(removed.ok(), "{removed:?}");
    workspace.keep(nb);

    // Ids survive source edits, moves and re-execution.
    let updated = server
        .call(
            "notebook_edit",
            json!({"action": "update", "path": nb, "cell_id": code_id, "source": "x = 50\nx"}),
        )
        .await;
    assert!(updated.ok(), "{updated:?}");
    assert_eq!(updated.structured["cell"]["id"], code_id.as_str());
    workspace.keep(nb);
    let moved = server
        .call(
            "notebook_edit",
            json!({"action": "move", "path": nb, "index": 1, "to_index": 3}),
        )
        .await;
    assert!(moved.ok(), "{moved:?}");
    assert_eq!(moved.structured["cell"]["id"], code_id.as_str());
    assert_eq!(moved.structured["cell"]["index"], 3);
    workspace.keep(nb);
    let rerun = server
        .call("notebook_execute_cell", json!({"path": nb, "index": 3}))
        .await;
    assert_eq!(rerun.structured["result"]["text/plain"], "50");
    assert_eq!(rerun.structured["cell"]["id"], code_id.as_str());
    workspace.keep(nb);
    let one = server
        .call("notebook_read", json!({"path": nb, "cell_id": code_id}))
        .await;
    assert_eq!(one.structured["cells"][0]["index"], 3);
    assert_eq!(one.structured["cells"][0]["source"], "x = 50\nx");
    assert_eq!(one.structured["cells"][0]["outputs"], Value::Null);
    assert_eq!(one.structured["cells"][0]["output_count"], 1);

    // Metadata of a cell and of the notebook.
    let tagged = server
        .call(
            "notebook_edit",
            json!({"action": "set_metadata", "path": nb, "cell_id": code_id, "metadata": {"tags": ["answer"]}}),
        )
        .await;
    assert!(tagged.ok(), "{tagged:?}");
    workspace.keep(nb);
    let mut metadata = workspace.json(nb)["metadata"].clone();
    metadata["x-project"] = json!({"owner": "agent"});
    let set = server
        .call(
            "notebook_edit",
            json!({"action": "set_metadata", "path": nb, "metadata": metadata}),
        )
        .await;
    assert!(set.ok(), "{set:?}");
    workspace.keep(nb);
    let whole = server.call("notebook_read", json!({"path": nb})).await;
    assert_eq!(whole.structured["metadata"]["x-project"]["owner"], "agent");
    assert_eq!(
        whole.structured["cells"][3]["metadata"]["tags"],
        json!(["answer"])
    );
    assert_eq!(whole.structured["cell_count"], 4);
    assert_eq!(whole.structured["next_index"], Value::Null);

    // Clear outputs, delete a cell.
    let cleared = server
        .call(
            "notebook_edit",
            json!({"action": "clear_outputs", "path": nb}),
        )
        .await;
    assert!(cleared.ok(), "{cleared:?}");
    workspace.keep(nb);
    let file = workspace.json(nb);
    for cell in file["cells"].as_array().expect("cells") {
        if cell["cell_type"] == "code" {
            assert_eq!(cell["outputs"], json!([]));
            assert_eq!(cell["execution_count"], Value::Null);
        }
    }
    let deleted = server
        .call(
            "notebook_edit",
            json!({"action": "delete", "path": nb, "index": 1}),
        )
        .await;
    assert!(deleted.ok(), "{deleted:?}");
    assert_eq!(deleted.structured["cell_count"], 3);
    workspace.keep(nb);

    // A stale revision: refused, nothing changed.
    let before = workspace.read(nb);
    for (tool, arguments) in [
        (
            "notebook_edit",
            json!({"action": "insert", "path": nb, "source": "1", "expected_revision": first_revision}),
        ),
        (
            "notebook_edit",
            json!({"action": "update", "path": nb, "index": 0, "source": "1", "expected_revision": first_revision}),
        ),
        (
            "notebook_edit",
            json!({"action": "delete", "path": nb, "index": 0, "expected_revision": first_revision}),
        ),
        (
            "notebook_edit",
            json!({"action": "move", "path": nb, "index": 0, "to_index": 1, "expected_revision": first_revision}),
        ),
        (
            "notebook_edit",
            json!({"action": "clear_outputs", "path": nb, "expected_revision": first_revision}),
        ),
        (
            "notebook_edit",
            json!({"action": "set_metadata", "path": nb, "metadata": {}, "expected_revision": first_revision}),
        ),
        (
            "notebook_execute_cell",
            json!({"path": nb, "cell_id": code_id, "expected_revision": first_revision}),
        ),
        (
            "notebook_execute",
            json!({"path": nb, "code": "y = 1", "expected_revision": first_revision}),
        ),
        (
            "notebook_create",
            json!({"path": nb, "overwrite": true, "expected_revision": first_revision}),
        ),
    ] {
        let refused = server.call(tool, arguments).await;
        assert!(refused.is_error, "{tool}: {refused:?}");
        assert_eq!(
            refused.structured["error"]["code"], "revision_conflict",
            "{tool}: {refused:?}"
        );
        assert_eq!(workspace.read(nb), before, "{tool} changed nothing");
    }
    let check = server
        .call("execute", json!({"code": "'y' in dir()", "kernel": kernel}))
        .await;
    assert_eq!(
        check.structured["result"]["text/plain"], "False",
        "nothing ran"
    );

    // Another process writes the file while a cell runs: the outputs are returned, not saved.
    // The cell runs until the test has written the file (at most five minutes).
    let flags = tempfile::tempdir().expect("tempdir");
    let release = flags.path().join("release");
    let source = format!(
        "import os, time\ndeadline = time.monotonic() + 300\nwhile not os.path.exists({release:?}) and time.monotonic() < deadline:\n    time.sleep(0.05)\nprint('late')"
    );
    let slow = server
        .call(
            "notebook_edit",
            json!({"action": "insert", "path": nb, "source": source}),
        )
        .await;
    let slow_id = slow.structured["cell"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    workspace.keep(nb);
    let peer = server.client.peer().clone();
    let running = tokio::spawn({
        let nb = nb.to_owned();
        async move {
            support::call_peer(
                &peer,
                "notebook_execute_cell",
                json!({"path": nb, "cell_id": slow_id}),
            )
            .await
        }
    });
    server
        .wait_until_in(&kernel, |status| status["operation_active"] == true)
        .await;
    let mut theirs = workspace.json(nb);
    theirs["metadata"]["edited_by"] = json!("someone else");
    let theirs = serde_json::to_vec_pretty(&theirs).expect("json");
    std::fs::write(workspace.root().join(nb), &theirs).expect("write");
    std::fs::write(&release, "").expect("release the cell");
    let late = running.await.expect("join");
    assert!(late.is_error, "{late:?}");
    assert_eq!(
        late.structured["stdout"], "late\n",
        "the output is returned"
    );
    assert_eq!(late.structured["saved"], false);
    assert_eq!(late.structured["save_error"]["code"], "revision_conflict");
    assert_eq!(
        late.structured["error"]["code"], "revision_conflict",
        "a failed save is in `error` like any failure: {late:?}"
    );
    assert_eq!(workspace.read(nb), theirs, "their write stands");

    // Sessions: one per notebook; sharing by id; closing.
    let other = "other.ipynb";
    server.call("notebook_create", json!({"path": other})).await;
    let session = server.call("notebook_session", json!({"path": nb})).await;
    assert!(session.ok(), "{session:?}");
    assert_eq!(session.structured["kernel"], kernel.as_str());
    assert_eq!(session.structured["started"], false);
    let shared = server
        .call("notebook_session", json!({"path": other, "kernel": kernel}))
        .await;
    assert!(shared.ok(), "{shared:?}");
    assert_eq!(shared.structured["shared_with"], json!([nb]));
    let in_other = server
        .call("notebook_execute", json!({"path": other, "code": "x"}))
        .await;
    assert_eq!(
        in_other.structured["result"]["text/plain"], "50",
        "{in_other:?}"
    );
    workspace.keep(other);
    // interrupt, kernel_restart and runtime_status accept the notebook instead of its kernel.
    let status = server
        .call("runtime_status", json!({"notebook": other}))
        .await;
    assert_eq!(
        status.structured["kernel_id"],
        kernel.as_str(),
        "{status:?}"
    );
    let idle = server.call("interrupt", json!({"notebook": nb})).await;
    assert!(idle.ok(), "{idle:?}");
    assert_eq!(idle.structured["interrupted"], false);
    let none = server
        .call("runtime_status", json!({"notebook": "missing.ipynb"}))
        .await;
    assert!(none.is_error, "{none:?}");
    let restarted = server
        .call("kernel_restart", json!({"notebook": other}))
        .await;
    assert!(restarted.ok(), "{restarted:?}");
    let fresh = server
        .call(
            "notebook_execute",
            json!({"path": nb, "code": "'x' in dir()", "persist": false}),
        )
        .await;
    assert_eq!(
        fresh.structured["result"]["text/plain"], "False",
        "restarted"
    );
    let released = server
        .call("notebook_session_close", json!({"path": other}))
        .await;
    assert_eq!(released.structured["stopped"], false, "still used by {nb}");
    let closed = server
        .call("notebook_session_close", json!({"path": nb}))
        .await;
    assert_eq!(closed.structured["kernel"], kernel.as_str());
    assert_eq!(closed.structured["stopped"], true);
    let gone = server
        .call("runtime_status", json!({"kernel": kernel}))
        .await;
    assert!(gone.is_error);
    // A separate notebook gets its own kernel: no shared variables.
    let own = server
        .call(
            "notebook_execute",
            json!({"path": other, "code": "'x' in dir()"}),
        )
        .await;
    assert_eq!(own.structured["session_started"], true);
    assert_eq!(own.structured["kernel"], "nb-other");
    assert_eq!(own.structured["result"]["text/plain"], "False");
    workspace.keep(other);

    server.stop().await;
    validate_with_jupyter(&workspace.versions()).await;
}

#[tokio::test]
async fn a_notebooks_kernel_starts_in_the_notebooks_directory() {
    let workspace = Workspace::new();
    let root = workspace.root();
    std::fs::create_dir_all(root.join("analysis/data")).expect("dirs");
    std::fs::write(root.join("analysis/data/input.csv"), "a,b\n1,2\n").expect("csv");
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_WORKSPACE_ROOT", &workspace.env())],
    )
    .await;
    let created = server
        .call("notebook_create", json!({"path": "analysis/report.ipynb"}))
        .await;
    assert!(created.ok(), "{created:?}");
    let ran = server
        .call(
            "notebook_execute",
            json!({"path": "analysis/report.ipynb", "code": "import os\nprint(os.getcwd())\nprint(open('data/input.csv').read().splitlines()[1])"}),
        )
        .await;
    assert!(ran.ok(), "{ran:?}");
    let expected = root
        .join("analysis")
        .canonicalize()
        .expect("canonical")
        .display()
        .to_string();
    assert_eq!(
        ran.structured["stdout"],
        format!("{expected}\n1,2\n"),
        "{ran:?}"
    );
    // The default session is unaffected: it stays in the server's directory.
    let default = server
        .call("execute", json!({"code": "import os\nos.getcwd()"}))
        .await;
    assert_ne!(
        default.structured["result"]["text/plain"],
        format!("'{expected}'"),
        "{default:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn bad_paths_are_refused_before_any_file_access() {
    let workspace = Workspace::new();
    let root = workspace.root();
    let outside = workspace.dir.path().join("outside");
    std::fs::create_dir(&outside).expect("outside");
    let secret = outside.join("secret.ipynb");
    std::fs::write(&secret, "{\"untouched\": true}").expect("write");
    std::os::unix::fs::symlink(&outside, root.join("escape")).expect("symlink");
    std::os::unix::fs::symlink(&secret, root.join("link.ipynb")).expect("symlink");
    let server = Server::start_unready(
        Family::Modern,
        &[("IPYTHON_MCP_WORKSPACE_ROOT", &workspace.env())],
    )
    .await;
    let bad = [
        secret.display().to_string(),
        "../outside/secret.ipynb".to_owned(),
        "a/../../outside/secret.ipynb".to_owned(),
        "escape/secret.ipynb".to_owned(),
        "escape/new.ipynb".to_owned(),
        "link.ipynb".to_owned(),
        "./x.ipynb".to_owned(),
        "x.txt".to_owned(),
        "".to_owned(),
        "dir//x.ipynb".to_owned(),
        "no-such-dir/x.ipynb".to_owned(),
        "x\u{0}.ipynb".to_owned(),
        "~/x.ipynb".to_owned(),
    ];
    for path in &bad {
        for (tool, arguments) in [
            ("notebook_create", json!({"path": path})),
            ("notebook_read", json!({"path": path})),
            ("notebook_revision", json!({"path": path})),
            (
                "notebook_edit",
                json!({"action": "insert", "path": path, "source": "1"}),
            ),
            (
                "notebook_edit",
                json!({"action": "clear_outputs", "path": path}),
            ),
            (
                "notebook_edit",
                json!({"action": "set_metadata", "path": path, "metadata": {}}),
            ),
            ("notebook_execute", json!({"path": path, "code": "1"})),
            ("notebook_session", json!({"path": path})),
            ("notebook_session_close", json!({"path": path})),
            (
                "notebook_edit",
                json!({"action": "update", "path": path, "index": 0, "source": "1"}),
            ),
            (
                "notebook_edit",
                json!({"action": "delete", "path": path, "index": 0}),
            ),
            (
                "notebook_edit",
                json!({"action": "move", "path": path, "index": 0, "to_index": 0}),
            ),
            ("notebook_execute_cell", json!({"path": path, "index": 0})),
            ("runtime_status", json!({"notebook": path})),
            ("interrupt", json!({"notebook": path})),
            ("kernel_restart", json!({"notebook": path})),
        ] {
            let refused = server.call(tool, arguments).await;
            assert!(refused.is_error, "{tool} {path:?}: {refused:?}");
            assert_eq!(
                refused.structured["error"]["code"], "invalid_path",
                "{tool} {path:?}: {refused:?}"
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(&secret).expect("read"),
        "{\"untouched\": true}"
    );
    let mut left: Vec<String> = std::fs::read_dir(&root)
        .expect("ls")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    left.sort();
    assert_eq!(left, ["escape", "link.ipynb"], "nothing was created");
    assert_eq!(
        std::fs::read_dir(&outside).expect("ls").count(),
        1,
        "nothing was created outside"
    );
    // A missing notebook and a wrong cell reference are distinct errors.
    let missing = server
        .call("notebook_read", json!({"path": "missing.ipynb"}))
        .await;
    assert_eq!(missing.structured["error"]["code"], "notebook_not_found");
    server
        .call("notebook_create", json!({"path": "n.ipynb"}))
        .await;
    let both = server
        .call(
            "notebook_edit",
            json!({"action": "delete", "path": "n.ipynb", "index": 0, "cell_id": "x"}),
        )
        .await;
    assert_eq!(both.structured["error"]["code"], "invalid_arguments");
    let none = server
        .call(
            "notebook_edit",
            json!({"action": "delete", "path": "n.ipynb", "cell_id": "nope"}),
        )
        .await;
    assert_eq!(none.structured["error"]["code"], "cell_not_found");
    server.stop().await;
    let mut workspace = workspace;
    workspace.keep("n.ipynb");
    validate_with_jupyter(&workspace.versions()).await;
}

/// How many `notebook_create` calls race the kernel's swaps.
const RACED_CREATES: usize = 150;

/// Every path under `directory` (recursively, symlinks not followed), relative to it.
fn tree(directory: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![directory.to_owned()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).expect("ls") {
            let entry = entry.expect("entry");
            if entry.file_type().expect("type").is_dir() {
                pending.push(entry.path());
            }
            let relative = entry
                .path()
                .strip_prefix(directory)
                .expect("inside")
                .to_owned();
            found.push(relative.display().to_string());
        }
    }
    found.sort();
    found
}

/// The attack that once put files outside the workspace: kernel code swaps `racews/sub` with a
/// symlink to a directory outside it (`renameat2(RENAME_EXCHANGE)`, in a tight loop, from a
/// background thread) while the agent creates `racews/sub/pwn_N.py` again and again. The server
/// resolves and writes by descriptor beneath the workspace root, so each create either lands in
/// the real directory or is refused as a symlink, and nothing (no notebook, no temp file) ever
/// lands outside, a directory the sandboxed kernel itself cannot write.
#[tokio::test]
async fn a_directory_swapped_for_a_symlink_mid_write_gets_nothing_written_outside() {
    if !cfg!(target_os = "linux") {
        panic!("the race uses renameat2 and the Linux sandbox");
    }
    // Outside the system temp directory, which the kernel may write.
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("notebook-race");
    std::fs::create_dir_all(&base).expect("base");
    let top = tempfile::Builder::new()
        .prefix("race")
        .tempdir_in(&base)
        .expect("tempdir");
    let (root, outside) = (top.path().join("root"), top.path().join("outside"));
    std::fs::create_dir(&root).expect("root");
    std::fs::create_dir(&outside).expect("outside");
    let server = Server::start(
        Family::Modern,
        &[
            ("IPYTHON_MCP_SANDBOX", "workspace-write"),
            ("IPYTHON_MCP_WORKSPACE_ROOT", root.to_str().expect("utf-8")),
        ],
    )
    .await;
    let racews = root.join("racews");
    let swapper = format!(
        r#"
import ctypes, os, threading
_libc = ctypes.CDLL(None, use_errno=True)
os.makedirs({sub:?})
os.symlink({outside:?}, {link:?})
# The sandbox keeps the kernel itself out of that directory.
try:
    open(os.path.join({outside:?}, "probe"), "w")
    print("the kernel can write outside")
except OSError:
    pass
_race = {{"swaps": 0, "stop": threading.Event()}}
def _swap(sub=os.fsencode({sub:?}), link=os.fsencode({link:?})):
    while not _race["stop"].is_set():
        if _libc.renameat2(-100, sub, -100, link, 2) == 0:  # AT_FDCWD, RENAME_EXCHANGE
            _race["swaps"] += 1
threading.Thread(target=_swap, daemon=True).start()
"#,
        sub = racews.join("sub").to_str().expect("utf-8"),
        link = racews.join("link").to_str().expect("utf-8"),
        outside = outside.to_str().expect("utf-8"),
    );
    let started = server.call("execute", json!({ "code": swapper })).await;
    assert!(started.ok(), "{started:?}");
    assert!(
        !started.text().contains("the kernel can write outside"),
        "{started:?}"
    );
    let (mut created, mut refused, mut unexpected) = (Vec::new(), 0usize, Vec::new());
    let racing = Instant::now();
    for index in 0..RACED_CREATES {
        let path = format!("racews/sub/pwn_{index}.py");
        let result = server
            .call("notebook_create", json!({ "path": path }))
            .await;
        if result.ok() {
            created.push(format!("pwn_{index}.py"));
        } else if result.structured["error"]["code"] == "invalid_path"
            && result.text().contains("symlink")
        {
            // The only other outcome: refused, naming the symlink it met.
            refused += 1;
        } else {
            unexpected.push(format!("{path}: {result:?}"));
        }
    }
    let stopped = server
        .call(
            "execute",
            json!({"code": "_race['stop'].set()\nprint(_race['swaps'])"}),
        )
        .await;
    assert!(stopped.ok(), "{stopped:?}");
    let swaps: u64 = stopped.structured["stdout"]
        .as_str()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or_else(|| panic!("swap count in {stopped:?}"));
    server.stop().await;
    eprintln!(
        "{} created, {refused} refused, {swaps} swaps in {:?}",
        created.len(),
        racing.elapsed()
    );
    assert_eq!(
        tree(&outside),
        Vec::<String>::new(),
        "nothing lands outside"
    );
    assert_eq!(
        unexpected,
        Vec::<String>::new(),
        "neither created nor refused"
    );
    assert!(
        swaps > 0 && refused > 0,
        "the race ran: {swaps} swaps, {refused} refused"
    );
    // The real directory is `sub` or `link`, as the last swap left it; it holds every notebook
    // created, and nothing else (no temp file).
    let real = ["sub", "link"]
        .map(|name| racews.join(name))
        .into_iter()
        .find(|path| !path.is_symlink())
        .expect("the real directory");
    created.sort();
    assert_eq!(tree(&real), created, "{refused} refused of {RACED_CREATES}");
}

#[tokio::test]
async fn older_notebooks_get_ids_on_first_write_and_keep_unknown_fields() {
    let mut workspace = Workspace::new();
    let old = json!({
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Old\n", "notebook"]},
            {"cell_type": "code", "execution_count": 3, "metadata": {"custom": {"keep": true}},
             "outputs": [{"output_type": "stream", "name": "stdout", "text": ["kept\n"]}],
             "source": "print('kept')"}
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                     "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2, "version_minor": 0}}},
        "nbformat": 4,
        "nbformat_minor": 2
    });
    std::fs::write(
        workspace.root().join("old.ipynb"),
        serde_json::to_vec(&old).expect("json"),
    )
    .expect("write");
    let server = Server::start_unready(
        Family::Handshake,
        &[("IPYTHON_MCP_WORKSPACE_ROOT", &workspace.env())],
    )
    .await;
    let read = server
        .call(
            "notebook_read",
            json!({"path": "old.ipynb", "include_outputs": true}),
        )
        .await;
    assert!(read.ok(), "{read:?}");
    assert_eq!(read.structured["nbformat_minor"], 2);
    assert_eq!(read.structured["cells"][0]["id"], Value::Null);
    assert_eq!(read.structured["cells"][0]["source"], "# Old\nnotebook");
    assert_eq!(read.structured["cells"][1]["outputs"][0]["text"], "kept\n");

    let updated = server
        .call(
            "notebook_edit",
            json!({"action": "update", "path": "old.ipynb", "index": 0, "source": "# Upgraded"}),
        )
        .await;
    assert!(updated.ok(), "{updated:?}");
    workspace.keep("old.ipynb");
    let file = workspace.json("old.ipynb");
    assert_eq!(file["nbformat_minor"], 5);
    let ids: Vec<String> = file["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|cell| cell["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
    assert_eq!(updated.structured["cell"]["id"], ids[0].as_str());
    assert_eq!(file["metadata"]["widgets"], old["metadata"]["widgets"]);
    assert_eq!(file["cells"][1]["metadata"]["custom"]["keep"], true);
    assert_eq!(file["cells"][1]["outputs"], old["cells"][1]["outputs"]);
    assert_eq!(file["cells"][1]["execution_count"], 3);

    // The ids stay put from now on.
    let moved = server
        .call(
            "notebook_edit",
            json!({"action": "move", "path": "old.ipynb", "cell_id": ids[1], "to_index": 0}),
        )
        .await;
    assert!(moved.ok(), "{moved:?}");
    workspace.keep("old.ipynb");
    let file = workspace.json("old.ipynb");
    assert_eq!(file["cells"][0]["id"], ids[1].as_str());
    assert_eq!(file["cells"][1]["id"], ids[0].as_str());
    server.stop().await;
    validate_with_jupyter(&workspace.versions()).await;
}

/// 200 code cells with 40 KB of output each (about 8 MB).
fn big_notebook() -> Value {
    let cells: Vec<Value> = (0..200)
        .map(|index| {
            json!({
                "cell_type": "code",
                "execution_count": index + 1,
                "id": format!("cell-{index}"),
                "metadata": {},
                "outputs": [{"output_type": "stream", "name": "stdout", "text": format!("{index} {}\n", "y".repeat(40_000))}],
                "source": format!("print({index})\n{}", "# filler\n".repeat(50)),
            })
        })
        .collect();
    json!({
        "cells": cells,
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5
    })
}

#[tokio::test]
async fn a_big_notebook_is_read_within_bounds_page_by_page() {
    let workspace = Workspace::new();
    std::fs::write(
        workspace.root().join("big.ipynb"),
        serde_json::to_vec(&big_notebook()).expect("json"),
    )
    .expect("write");
    let server = Server::start_unready(
        Family::Handshake,
        &[("IPYTHON_MCP_WORKSPACE_ROOT", &workspace.env())],
    )
    .await;
    let mut start = 0;
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = server
            .call(
                "notebook_read",
                json!({"path": "big.ipynb", "include_outputs": true, "start_index": start, "max_cells": 1000}),
            )
            .await;
        assert!(page.ok(), "{page:?}");
        let size = page.structured.to_string().len();
        assert!(size < 80_000, "page of {size} bytes");
        pages += 1;
        for cell in page.structured["cells"].as_array().expect("cells") {
            seen.push(cell["id"].as_str().expect("id").to_owned());
            // max_repr_chars (1024) of the saved text: its beginning and its end, the exact
            // count between them.
            let text = cell["outputs"][0]["text"].as_str().expect("text");
            let (head, rest) = text.split_once("\n[… ").expect("a marker");
            let (count, tail) = rest.split_once(" …]\n").expect("the marker's end");
            assert_eq!(head.chars().count() + tail.chars().count(), 1024, "{text}");
            assert!(
                head.starts_with(&format!("{} yyy", seen.len() - 1)),
                "{text}"
            );
            assert!(tail.ends_with("yyy\n"), "{text}");
            let omitted = cell["outputs"][0]["text_omitted_chars"].as_u64();
            assert!(omitted > Some(38_000));
            assert!(
                count.starts_with(&format!("{} characters", omitted.unwrap_or_default())),
                "{text}"
            );
        }
        match page.structured["next_index"].as_u64() {
            Some(next) => start = next as usize,
            None => break,
        }
    }
    assert!(pages > 1, "bounded pages");
    let expected: Vec<String> = (0..200).map(|index| format!("cell-{index}")).collect();
    assert_eq!(seen, expected, "every cell exactly once");
    server.stop().await;
}

/// A server killed at any moment while writing leaves the old or the new file, never a torn one.
#[tokio::test]
async fn a_killed_write_leaves_the_old_file_intact() {
    let workspace = Workspace::new();
    let path = workspace.root().join("big.ipynb");
    std::fs::write(&path, serde_json::to_vec(&big_notebook()).expect("json")).expect("write");
    let env = [("IPYTHON_MCP_WORKSPACE_ROOT", workspace.env())];
    let env: Vec<(&str, &str)> = env
        .iter()
        .map(|(key, value)| (*key, value.as_str()))
        .collect();
    // How long one insert into this 8 MB notebook takes, end to end.
    let server = Server::start_unready(Family::Handshake, &env).await;
    let started = Instant::now();
    let timed = server
        .call(
            "notebook_edit",
            json!({"action": "insert", "path": "big.ipynb", "source": "timed", "index": 0}),
        )
        .await;
    assert!(timed.ok(), "{timed:?}");
    let write_time = started.elapsed();
    server.stop().await;

    let mut versions = vec![sha256(&std::fs::read(&path).expect("read"))];
    let mut unchanged = 0;
    let mut temp_files_seen = 0;
    // Kills spread from the very start of the call to well past its usual end: before the
    // read, during the edit, during the temp file's write and fsync, around the rename. The last
    // kill comes only after the call returned, so at least one write has completed whatever the
    // machine's speed, and an acknowledged write must have reached the file.
    let kill_after = [0u32, 2, 4, 6, 8, 10, 20, 30]
        .map(Some)
        .into_iter()
        .chain([None]);
    for (step, tenths) in kill_after.enumerate() {
        let server = Server::start_unready(Family::Handshake, &env).await;
        let peer = server.client.peer().clone();
        let mut writing = tokio::spawn(async move {
            let arguments = json!({"action": "insert", "path": "big.ipynb", "source": format!("attempt {step}"), "index": 0});
            let request = rmcp::model::CallToolRequestParams::new("notebook_edit")
                .with_arguments(arguments.as_object().cloned().expect("object"));
            // The server may die under it: then an error is expected.
            peer.call_tool(request)
                .await
                .is_ok_and(|result| result.is_error != Some(true))
        });
        let acknowledged = match tenths {
            Some(tenths) => {
                tokio::time::sleep(write_time * tenths / 10).await;
                None
            }
            None => Some((&mut writing).await.expect("join")),
        };
        // SAFETY: kill(2) on the pid of our own child process.
        unsafe {
            libc::kill(server.pid as i32, libc::SIGKILL);
        }
        if acknowledged.is_none() {
            let _ = writing.await;
        }
        support::wait_until_gone(server.pid as i32).await;
        drop(server);
        if let Some(acknowledged) = acknowledged {
            assert!(acknowledged, "the last insert succeeded before the kill");
        }
        let bytes = std::fs::read(&path).expect("read");
        let parsed: Value = serde_json::from_slice(&bytes).expect("always a whole JSON file");
        let cells = parsed["cells"].as_array().expect("cells").len();
        let current = sha256(&bytes);
        if versions.last() == Some(&current) {
            assert!(acknowledged != Some(true), "an acknowledged write was lost");
            unchanged += 1;
        } else {
            // A completed write: exactly one more cell, on top.
            assert_eq!(cells, 201 + versions.len(), "one cell per completed write");
            assert_eq!(
                parsed["cells"][0]["source"],
                json!([format!("attempt {step}")])
            );
            versions.push(current);
        }
        for entry in std::fs::read_dir(workspace.root()).expect("ls") {
            let name = entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned();
            if name.starts_with(".ipython-mcp-") {
                // A write killed after creating its temp file: remove it for the next round.
                temp_files_seen += 1;
                std::fs::remove_file(workspace.root().join(&name)).expect("remove");
            } else {
                assert_eq!(name, "big.ipynb");
            }
        }
    }
    eprintln!(
        "crash test: one write takes {write_time:?}; {} completed, {unchanged} killed before the rename, {temp_files_seen} of them after the temp file existed",
        versions.len() - 1
    );
    assert!(unchanged > 0, "some kills came before the rename");
    assert!(versions.len() > 1, "some writes completed");
    let mut workspace = workspace;
    workspace.keep("big.ipynb");
    validate_with_jupyter(&workspace.versions()).await;
}

#[tokio::test]
async fn resources_serve_notebooks_by_percent_encoded_uri_and_the_capabilities() {
    let workspace = Workspace::new();
    std::fs::create_dir(workspace.root().join("nested folder")).expect("mkdir");
    for family in [Family::Handshake, Family::Modern] {
        let server =
            Server::start_unready(family, &[("IPYTHON_MCP_WORKSPACE_ROOT", &workspace.env())])
                .await;
        let path = "nested folder/分析.ipynb";
        let uri = "notebook:///nested%20folder/%E5%88%86%E6%9E%90.ipynb";
        if !workspace.root().join(path).exists() {
            let created = server
                .call(
                    "notebook_create",
                    json!({"path": path, "cells": [{"source": "1 + 1"}]}),
                )
                .await;
            assert!(created.ok(), "{created:?}");
            assert_eq!(created.structured["uri"], uri);
        }
        let peer = server.client.peer();
        let resources = peer.list_all_resources().await.expect("resources/list");
        let uris: Vec<&str> = resources
            .iter()
            .map(|resource| resource.uri.as_str())
            .collect();
        for expected in [
            "ipython-mcp://capabilities",
            "ipython-mcp://kernelspecs",
            "ipython-mcp://kernels",
            uri,
        ] {
            assert!(uris.contains(&expected), "{expected} in {uris:?}");
        }
        let templates = peer.list_all_resource_templates().await.expect("templates");
        assert_eq!(templates[0].uri_template, "notebook:///{+path}");

        let text = |result: rmcp::model::ReadResourceResult| match &result.contents[0] {
            rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
            other => panic!("text contents: {other:?}"),
        };
        let read = peer
            .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
            .await
            .expect("read the notebook");
        let notebook: Value = serde_json::from_str(&text(read)).expect("notebook JSON");
        assert_eq!(notebook["cells"][0]["source"], json!(["1 + 1"]));
        assert!(
            text_bytes_eq(&workspace.read(path), &notebook),
            "the file as it is"
        );

        // The kernelspecs listed come from the default kernel's Python once it is known: the
        // two reads compared below must both come after it settled.
        server.wait_settled().await;
        let capabilities = peer
            .read_resource(rmcp::model::ReadResourceRequestParams::new(
                "ipython-mcp://capabilities",
            ))
            .await
            .expect("capabilities");
        let capabilities: Value =
            serde_json::from_str(&text(capabilities)).expect("capabilities JSON");
        assert_eq!(capabilities["schema_version"], "1.0");
        assert_eq!(capabilities["limits"]["max_text_chars"], 8192);
        assert_eq!(
            capabilities["notebooks"]["workspace_root"],
            workspace
                .root()
                .canonicalize()
                .expect("canonical")
                .display()
                .to_string()
        );
        assert!(capabilities["kernelspecs"].is_array());
        assert_eq!(capabilities["transport"]["active"], "stdio");
        // What a cancellation does, and the protocol served (as rmcp negotiates it).
        assert_eq!(
            capabilities["cancellation"]["mcp_request"],
            "interrupts_running_cell"
        );
        let versions = capabilities["protocol"]["versions"]
            .as_array()
            .expect("versions");
        for version in ["2025-11-25", "2026-07-28"] {
            assert!(versions.contains(&json!(version)), "{versions:?}");
        }
        assert!(
            capabilities["protocol"]["extensions"]
                .as_array()
                .expect("extensions")
                .contains(&json!("io.modelcontextprotocol/tasks")),
            "{capabilities}"
        );
        let schema =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas/capabilities.schema.json");
        support::assert_matches_schema(&schema, &capabilities).await;
        // jupymcp's clients find the same object under jupymcp's URI.
        assert!(uris.contains(&"jupymcp://capabilities"), "{uris:?}");
        let jupymcp = peer
            .read_resource(rmcp::model::ReadResourceRequestParams::new(
                "jupymcp://capabilities",
            ))
            .await
            .expect("jupymcp capabilities");
        let jupymcp: Value = serde_json::from_str(&text(jupymcp)).expect("capabilities JSON");
        assert_eq!(jupymcp, capabilities);

        for bad in [
            "notebook:///../outside.ipynb",
            "notebook:///nested%20folder%2F..%2Fx.ipynb",
            "notebook:///x%zz.ipynb",
            "notebook://host/x.ipynb",
            "notebook:///missing.ipynb",
            "ipython-mcp://nothing",
        ] {
            let refused = peer
                .read_resource(rmcp::model::ReadResourceRequestParams::new(bad))
                .await;
            assert!(refused.is_err(), "{bad} is refused");
        }
        server.stop().await;
    }
    let mut workspace = workspace;
    workspace.keep("nested folder/分析.ipynb");
    validate_with_jupyter(&workspace.versions()).await;
}

/// The served text is the file's notebook (same JSON).
fn text_bytes_eq(file: &[u8], served: &Value) -> bool {
    serde_json::from_slice::<Value>(file).expect("file JSON") == *served
}

/// What jupytext makes of a percent script: metadata and cells (type, source, metadata).
async fn jupytext_view(file: &Path) -> Value {
    let (python, deps) =
        support::python_with("jupytext==1.16.4", "jupytext", "jupytext-deps").await;
    let script = r#"
import json, sys
import jupytext
nb = jupytext.read(sys.argv[1])
print(json.dumps({
    "metadata": nb.metadata,
    "cells": [{"cell_type": c.cell_type, "source": c.source, "metadata": c.metadata} for c in nb.cells],
}))
"#;
    let output = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(file)
        .env("PYTHONPATH", deps)
        .output()
        .expect("python");
    assert!(
        output.status.success(),
        "jupytext failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("json")
}

/// Our view of the same cells, through notebook_read.
async fn our_view(server: &Server, path: &str) -> Value {
    let read = server.call("notebook_read", json!({"path": path})).await;
    assert!(read.ok(), "{read:?}");
    let cells: Vec<Value> = read.structured["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|cell| {
            json!({"cell_type": cell["cell_type"], "source": cell["source"], "metadata": cell["metadata"]})
        })
        .collect();
    json!({"metadata": read.structured["metadata"], "cells": cells})
}

#[tokio::test]
async fn percent_scripts_round_trip_with_jupytext() {
    let workspace = Workspace::new();
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_WORKSPACE_ROOT", &workspace.env())],
    )
    .await;
    // Written by us, read by jupytext.
    let created = server
        .call(
            "notebook_create",
            json!({"path": "script.py", "cells": [
                {"source": "import os\n%time x = 1\n!echo hi"},
                {"cell_type": "markdown", "source": "# Title\n\nSome *text*\n  indented"},
                {"source": "def f():\n    return 3", "metadata": {"tags": ["keep"], "k": {"n": 1}}},
                {"cell_type": "raw", "source": "raw text"},
            ]}),
        )
        .await;
    assert!(created.ok(), "{created:?}");
    let ran = server
        .call(
            "notebook_execute",
            json!({"path": "script.py", "code": "y = 2\ny"}),
        )
        .await;
    assert!(ran.ok(), "{ran:?}");
    assert_eq!(ran.structured["result"]["text/plain"], "2");
    assert_eq!(ran.structured["saved"], true);
    assert_eq!(ran.structured["cell"]["id"], "cell-4");
    let text = String::from_utf8(workspace.read("script.py")).expect("utf-8");
    assert!(text.contains("# %%\ny = 2\ny\n"), "{text}");
    assert!(!text.contains("execute_result"), "no outputs in a script");
    let theirs = jupytext_view(&workspace.root().join("script.py")).await;
    let ours = our_view(&server, "script.py").await;
    assert_eq!(
        theirs["cells"], ours["cells"],
        "jupytext reads our script as we do"
    );
    assert_eq!(theirs["metadata"]["kernelspec"]["name"], "python3");

    // Written by jupytext, read by us; our edit, read by jupytext again.
    let (python, deps) =
        support::python_with("jupytext==1.16.4", "jupytext", "jupytext-deps").await;
    let make = r##"
import sys
import jupytext, nbformat
nb = nbformat.v4.new_notebook()
nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
nb.cells = [
    nbformat.v4.new_code_cell("%matplotlib inline\nimport sys\n!ls\n\n\nz = 3"),
    nbformat.v4.new_markdown_cell("# Heading\n\n- item\n#not heading"),
    nbformat.v4.new_code_cell('s = """\n%not a magic\n"""', metadata={"tags": ["a", "b"]}),
    nbformat.v4.new_raw_cell("raw"),
]
jupytext.write(nb, sys.argv[1], fmt="py:percent")
"##;
    let status = Command::new(&python)
        .arg("-c")
        .arg(make)
        .arg(workspace.root().join("theirs.py"))
        .env("PYTHONPATH", &deps)
        .status()
        .expect("python");
    assert!(status.success());
    let theirs = jupytext_view(&workspace.root().join("theirs.py")).await;
    let ours = our_view(&server, "theirs.py").await;
    assert_eq!(
        theirs["cells"], ours["cells"],
        "we read jupytext's script as it does"
    );
    assert_eq!(theirs["metadata"], ours["metadata"]);
    let updated = server
        .call(
            "notebook_edit",
            json!({"action": "update", "path": "theirs.py", "index": 1, "source": "# Changed\n\ntext"}),
        )
        .await;
    assert!(updated.ok(), "{updated:?}");
    let theirs = jupytext_view(&workspace.root().join("theirs.py")).await;
    let ours = our_view(&server, "theirs.py").await;
    assert_eq!(theirs["cells"], ours["cells"]);
    assert_eq!(theirs["cells"][1]["source"], "# Changed\n\ntext");
    assert_eq!(theirs["cells"][2]["metadata"]["tags"], json!(["a", "b"]));
    server.stop().await;
}

#[tokio::test]
async fn a_missing_workspace_root_stops_the_server_at_start_up() {
    let missing = tempfile::tempdir().expect("tempdir").path().join("gone");
    let output = support::command(&[(
        "IPYTHON_MCP_WORKSPACE_ROOT",
        missing.to_str().expect("utf-8"),
    )])
    .stderr(std::process::Stdio::piped())
    .output()
    .await
    .expect("run");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("IPYTHON_MCP_WORKSPACE_ROOT (--workspace-root)"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "nothing on stdout");
}

/// Regression: a python3 notebook run before the default kernel was ready looked for a
/// registered `python3` kernelspec instead of using the server's Python, and failed.
#[tokio::test]
async fn a_notebook_runs_before_the_default_kernel_is_ready() {
    let workspace = Workspace::new();
    let server = Server::start_unready(
        Family::Modern,
        &[("IPYTHON_MCP_WORKSPACE_ROOT", &workspace.env())],
    )
    .await;
    let created = server
        .call("notebook_create", json!({"path": "early.ipynb"}))
        .await;
    assert!(created.ok(), "{created:?}");
    let ran = server
        .call(
            "notebook_execute",
            json!({"path": "early.ipynb", "code": "import sys; sys.version_info[0]"}),
        )
        .await;
    assert!(ran.ok(), "{ran:?}");
    assert_eq!(ran.structured["result"]["text/plain"], "3");
    assert_eq!(ran.structured["kernel"], "nb-early");
    server.stop().await;
}

/// Cells whose outputs the agent's bounded view cuts: a large HTML table (and a result), a
/// Plotly-style JSON bundle (deep and long), 30 displays, streams between displays.
const LOSSLESS_CELLS: [&str; 4] = [
    "from IPython.display import HTML, display\nrows = ''.join('<tr><td>%d</td><td>%s</td></tr>' % (i, 'x' * 20) for i in range(5000))\ndisplay(HTML('<table>' + rows + '</table>'))\nHTML('<p>' + 'y' * 20000 + '</p>')",
    "from IPython.display import display\nfigure = {'data': [{'type': 'scatter', 'x': list(range(500)), 'y': [i * i for i in range(500)], 'marker': {'line': {'color': {'a': {'b': {'c': {'d': 1}}}}}}}], 'layout': {'title': {'text': 'z' * 10000}}}\ndisplay({'application/vnd.plotly.v1+json': figure, 'text/html': '<div>plot</div>', 'text/plain': '<Figure>'}, raw=True)",
    "from IPython.display import HTML, display\nfor i in range(30):\n    display(HTML('<p>%d</p>' % i))",
    "import sys\nprint('before')\nfrom IPython.display import display\ndisplay('between')\nprint('x' * 20000)\nprint('after', file=sys.stderr)",
];

/// Each cell's outputs, execution counts aside, as Jupyter's `nbformat` reads the file.
async fn outputs_of(notebook: &Path) -> Value {
    let (python, deps) = python_with_nbformat().await;
    let script = r#"
import json, sys
import nbformat
nb = nbformat.read(sys.argv[1], as_version=4)
cells = []
for cell in nb.cells:
    outputs = []
    for output in cell.get("outputs", []):
        output.pop("execution_count", None)
        outputs.append(output)
    cells.append(outputs)
print(json.dumps(cells))
"#;
    let output = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(notebook)
        .env("PYTHONPATH", deps)
        .output()
        .expect("python");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("json")
}

#[tokio::test]
async fn saved_outputs_are_what_jupyter_nbconvert_saves_not_the_bounded_view() {
    let mut workspace = Workspace::new();
    let root = workspace.env();
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_WORKSPACE_ROOT", &root)]).await;
    let nb = "lossless.ipynb";
    let cells: Vec<Value> = LOSSLESS_CELLS
        .iter()
        .map(|source| json!({"cell_type": "code", "source": source}))
        .collect();
    let created = server
        .call("notebook_create", json!({"path": nb, "cells": cells}))
        .await;
    assert!(created.ok(), "{created:?}");
    // nbconvert runs the same notebook first, before our run writes outputs into it.
    let theirs_path = workspace.dir.path().join("theirs.ipynb");
    std::fs::copy(workspace.root().join(nb), &theirs_path).expect("copy");
    let (python, deps) =
        support::python_with("nbconvert==7.17.2", "nbconvert", "nbconvert-deps").await;
    let converted = Command::new(&python)
        .args([
            "-m",
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--inplace",
        ])
        .arg(&theirs_path)
        .env("PYTHONPATH", &deps)
        .output()
        .expect("nbconvert");
    assert!(
        converted.status.success(),
        "nbconvert failed: {}",
        String::from_utf8_lossy(&converted.stderr)
    );

    for index in 0..LOSSLESS_CELLS.len() {
        let run = server
            .call("notebook_execute_cell", json!({"path": nb, "index": index}))
            .await;
        assert!(run.ok(), "{run:?}");
        assert_eq!(run.structured["saved"], true, "{run:?}");
        // The agent still gets the bounded view.
        assert!(
            run.structured["display_data"]
                .as_array()
                .expect("displays")
                .len()
                <= 20,
            "{run:?}"
        );
        if index == 2 {
            assert_eq!(run.structured["display_omitted"], 10);
        }
        if index == 0 {
            assert_eq!(run.structured["truncated"]["display_data"], true);
        }
    }
    workspace.keep(nb);
    let ours = outputs_of(&workspace.root().join(nb)).await;
    let theirs = outputs_of(&theirs_path).await;
    for (index, (ours, theirs)) in ours
        .as_array()
        .expect("cells")
        .iter()
        .zip(theirs.as_array().expect("cells"))
        .enumerate()
    {
        // Jupyter may split one stream into several outputs where ipykernel flushed; a front
        // end shows (and JupyterLab saves) them as one.
        assert_eq!(
            merged_streams(ours),
            merged_streams(theirs),
            "cell {index} is saved as nbconvert saves it"
        );
    }
    assert_eq!(ours[2].as_array().expect("outputs").len(), 30);
    validate_with_jupyter(&workspace.versions()).await;
    server.stop().await;
}

/// Outputs with consecutive stream outputs of one stream joined.
fn merged_streams(outputs: &Value) -> Vec<Value> {
    let mut merged: Vec<Value> = Vec::new();
    for output in outputs.as_array().expect("outputs") {
        if let Some(last) = merged.last_mut() {
            if output["output_type"] == "stream"
                && last["output_type"] == "stream"
                && last["name"] == output["name"]
            {
                let text = format!(
                    "{}{}",
                    last["text"].as_str().unwrap_or_default(),
                    output["text"].as_str().unwrap_or_default()
                );
                last["text"] = Value::String(text);
                continue;
            }
        }
        merged.push(output.clone());
    }
    merged
}

#[tokio::test]
async fn an_interrupted_cell_is_saved_with_the_kernels_keyboard_interrupt() {
    let root_dir = Workspace::new();
    let root = root_dir.env();
    let server = Server::start(Family::Handshake, &[("IPYTHON_MCP_WORKSPACE_ROOT", &root)]).await;
    let nb = "stopped.ipynb";
    assert!(server
        .call("notebook_create", json!({"path": nb}))
        .await
        .ok());
    let peer = server.client.peer().clone();
    let running = tokio::spawn(async move {
        support::call_peer(
            &peer,
            "notebook_execute",
            json!({"path": nb, "code": "import time\nprint('started', flush=True)\ntime.sleep(120)"}),
        )
        .await
    });
    // Interrupt once the cell is running (its print has arrived).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = server.call("runtime_status", json!({"notebook": nb})).await;
        let printed = match status.structured["kernel_id"].as_str() {
            Some(kernel) => {
                let output = server.call("get_output", json!({"kernel": kernel})).await;
                output.structured["stdout"] == "started\n"
            }
            None => false,
        };
        if printed {
            break;
        }
        assert!(Instant::now() < deadline, "the cell never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let interrupted = server.call("interrupt", json!({"notebook": nb})).await;
    assert!(interrupted.ok(), "{interrupted:?}");
    let stopped = running.await.expect("join");
    assert_eq!(stopped.structured["saved"], true, "{stopped:?}");
    let saved = root_dir.json(nb);
    let outputs = saved["cells"][0]["outputs"]
        .as_array()
        .expect("outputs")
        .clone();
    let error = outputs
        .iter()
        .find(|output| output["output_type"] == "error")
        .unwrap_or_else(|| panic!("an error output in {outputs:?}"));
    assert_eq!(error["ename"], "KeyboardInterrupt", "{error}");
    let traceback: Vec<&str> = error["traceback"]
        .as_array()
        .expect("traceback")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        traceback
            .iter()
            .any(|line| line.contains("time.sleep(120)")),
        "the kernel's own traceback: {traceback:?}"
    );
    assert!(
        !saved.to_string().contains("operation_cancelled"),
        "no made-up output: {saved}"
    );
    assert_eq!(outputs[0]["text"], json!(["started\n"]));
    server.stop().await;
}

/// What jupytext writes for the notebook it reads from `file` (the header included).
async fn jupytext_rewrite(file: &Path) -> String {
    let (python, deps) =
        support::python_with("jupytext==1.16.4", "jupytext", "jupytext-deps").await;
    let script = "import sys, jupytext\nsys.stdout.write(jupytext.writes(jupytext.read(sys.argv[1]), fmt='py:percent'))";
    let output = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(file)
        .env("PYTHONPATH", deps)
        .output()
        .expect("python");
    assert!(
        output.status.success(),
        "jupytext failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8")
}

#[tokio::test]
async fn percent_scripts_are_written_byte_for_byte_as_jupytext_writes_them() {
    let workspace = Workspace::new();
    let server = Server::start(
        Family::Handshake,
        &[("IPYTHON_MCP_WORKSPACE_ROOT", &workspace.env())],
    )
    .await;
    let created = server
        .call(
            "notebook_create",
            json!({"path": "plain.py", "cells": [
                {"source": "import os\n%time x = 1"},
                {"cell_type": "markdown", "source": "# Title\n\ntext"},
                {"source": "def f():\n    return 3", "metadata": {"tags": ["keep"]}},
            ]}),
        )
        .await;
    assert!(created.ok(), "{created:?}");
    let ours = String::from_utf8(workspace.read("plain.py")).expect("utf-8");
    assert_eq!(
        ours,
        jupytext_rewrite(&workspace.root().join("plain.py")).await
    );

    // Values YAML must quote, and the ones it must not.
    let created = server
        .call(
            "notebook_create",
            json!({"path": "quoted.py", "cells": [{"source": "x = 1"}]}),
        )
        .await;
    assert!(created.ok(), "{created:?}");
    for (index, kernelspec) in [
        json!({"display_name": "weird: name #1", "language": "python", "name": "py-3.11"}),
        json!({"display_name": "3.10", "language": "yes", "name": "-x", "env": {}, "note": "", "x": null}),
        json!({"display_name": "Python 3 (ipykernel) é ✓", "language": "it's", "name": "[a]", "key with space": "0x1F", "when": "2024-01-02"}),
        json!({"display_name": "trailing ", "language": "a,b", "name": "@home", "n": "~", "o": "on", "p": "1e3", "q": "1.5e+3"}),
    ]
    .into_iter()
    .enumerate()
    {
        let set = server
            .call(
                "notebook_edit",
                json!({"action": "set_metadata", "path": "quoted.py", "metadata": {"kernelspec": kernelspec}}),
            )
            .await;
        assert!(set.ok(), "{set:?}");
        let ours = String::from_utf8(workspace.read("quoted.py")).expect("utf-8");
        let quoted = ["display_name: 'weird: name #1'", "display_name: '3.10'", "display_name: \"Python 3 (ipykernel) \\xE9 \\u2713\"", "display_name: 'trailing '"];
        assert!(ours.contains(quoted[index]), "case {index}: {ours}");
        assert_eq!(
            ours,
            jupytext_rewrite(&workspace.root().join("quoted.py")).await,
            "case {index}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn an_oversized_image_is_downscaled_for_the_agent_and_saved_whole_in_the_notebook() {
    use base64::Engine as _;
    let mut workspace = Workspace::new();
    let root = workspace.env();
    let server = Server::start(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_WORKSPACE_ROOT", &root),
            ("IPYTHON_MCP_MAX_IMAGE_BYTES", "100000"),
        ],
    )
    .await;
    let nb = "picture.ipynb";
    let created = server.call("notebook_create", json!({"path": nb})).await;
    assert!(created.ok(), "{created:?}");
    // A valid PNG of random pixels, from the standard library alone.
    let code = "import os, struct, zlib\nfrom IPython.display import Image, display\ndef chunk(kind, data):\n    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff)\nrows = b''.join(b'\\x00' + os.urandom(600 * 3) for _ in range(400))\nraw = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 600, 400, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b'')\ndisplay(Image(data=raw))";
    let shown = server
        .call("notebook_execute", json!({"path": nb, "code": code}))
        .await;
    assert!(shown.ok(), "{shown:?}");
    let images = shown.images();
    assert_eq!(images.len(), 1, "{shown:?}");
    assert!(images[0].1.len() <= 100_000);
    let note = &shown.structured["display_data"][0]["metadata"]["ipython_mcp"]["downscaled_images"]
        ["image/png"];
    let original = std::fs::read(note["original_path"].as_str().expect("original path"))
        .expect("the original in the spool");
    assert!(original.len() > 700_000);
    workspace.keep(nb);
    let file = workspace.json(nb);
    let saved = file["cells"][0]["outputs"][0]["data"]["image/png"]
        .as_str()
        .expect("a PNG saved");
    let saved: String = saved.split_whitespace().collect();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(saved)
            .expect("base64"),
        original,
        "the notebook keeps the original, as Jupyter would"
    );
    server.stop().await;
}

/// `notebook_edit` takes only the fields its action uses: anything else, or a missing one, is
/// `invalid_arguments` naming it, and the file stays byte for byte as it was.
#[tokio::test]
async fn notebook_edit_refuses_fields_its_action_does_not_use() {
    let workspace = Workspace::new();
    let server = Server::start_unready(
        Family::Handshake,
        &[("IPYTHON_MCP_WORKSPACE_ROOT", &workspace.env())],
    )
    .await;
    let created = server
        .call(
            "notebook_create",
            json!({"path": "e.ipynb", "cells": [{"source": "1"}]}),
        )
        .await;
    assert!(created.ok(), "{created:?}");
    let before = std::fs::read(workspace.root().join("e.ipynb")).expect("read");
    for (arguments, named) in [
        (
            json!({"action": "insert", "source": "2", "to_index": 1}),
            "to_index",
        ),
        (
            json!({"action": "insert", "source": "2", "cell_id": "x"}),
            "cell_id",
        ),
        (json!({"action": "insert"}), "source"),
        (json!({"action": "update", "index": 0}), "source"),
        (
            json!({"action": "delete", "index": 0, "source": "x"}),
            "source",
        ),
        (json!({"action": "move", "index": 0}), "to_index"),
        (
            json!({"action": "clear_outputs", "metadata": {}}),
            "metadata",
        ),
        (json!({"action": "set_metadata", "index": 0}), "metadata"),
        (json!({"action": "rename", "index": 0}), "action"),
    ] {
        let mut arguments = arguments;
        arguments["path"] = json!("e.ipynb");
        let refused = server.call("notebook_edit", arguments.clone()).await;
        assert!(refused.is_error, "{arguments}: {refused:?}");
        assert_eq!(
            refused.structured["error"]["code"], "invalid_arguments",
            "{arguments}: {refused:?}"
        );
        let message = refused.structured["error"]["message"]
            .as_str()
            .expect("message");
        assert!(message.contains(named), "{arguments}: {message}");
    }
    let after = std::fs::read(workspace.root().join("e.ipynb")).expect("read");
    assert_eq!(before, after, "nothing was written");
    // The same fields with the action that uses them work.
    let moved = server
        .call(
            "notebook_edit",
            json!({"action": "insert", "path": "e.ipynb", "source": "2", "index": 0}),
        )
        .await;
    assert_eq!(moved.structured["cell"]["index"], 0, "{moved:?}");
    assert_eq!(moved.structured["cell_count"], 2);
    server.stop().await;
}
