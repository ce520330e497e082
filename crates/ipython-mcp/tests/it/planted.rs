//! End to end, as an attacker would: kernel code plants a symbolic link, a FIFO or a rewritten
//! file where the server later reads (its own output spool, its checkpoint) and tries to make
//! the server read a secret for it, allocate without bound, block for good, or run a pickle
//! outside what it wrote. Each attempt gets a clear answer, and the server, the session and
//! every other session go on. And what it plants where the server runs an interpreter (its
//! environment, the workspace) runs no freer than the kernel.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{self, Family, Server};

/// How long a call may take here before the server counts as blocked: far above anything
/// these calls need (the checkpoint's files are waited for 2 seconds at most), so only a hang
/// fails it.
const ANSWERED_WITHIN: Duration = Duration::from_secs(120);

/// Python naming the session's spool directory as the helper was told it.
const SPOOL: &str =
    "__import__('sys').modules['ipython_mcp_helper.rpc'].current().config['spool_dir']";

/// Python naming the session's checkpoint directory.
const CHECKPOINT: &str =
    "__import__('sys').modules['ipython_mcp_helper.rpc'].current().checkpointer.directory";

/// A directory for one test outside the system temp directory (which kernels may write, so
/// the sandbox could not deny a secret in it without splitting it).
fn private_dir(name: &str) -> tempfile::TempDir {
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("planted");
    std::fs::create_dir_all(&base).expect("test dir");
    tempfile::Builder::new()
        .prefix(name)
        .tempdir_in(base)
        .expect("tempdir")
}

/// A sandboxed server whose HOME holds a secret the kernel may not read.
struct Sandboxed {
    home: tempfile::TempDir,
    secret: std::path::PathBuf,
    workspace: tempfile::TempDir,
    server: Server,
}

async fn sandboxed_with_a_secret(text: &str) -> Sandboxed {
    if !cfg!(target_os = "linux") {
        panic!("the sandbox tests run on Linux");
    }
    let home = private_dir("home");
    let secret = home.path().join(".ssh/id_ed25519");
    std::fs::create_dir_all(secret.parent().expect("parent")).expect("mkdir");
    std::fs::write(&secret, text).expect("secret");
    let workspace = private_dir("workspace");
    let server = Server::start(
        Family::Modern,
        &[
            ("IPYTHON_MCP_SANDBOX", "workspace-write"),
            ("HOME", home.path().to_str().expect("utf-8")),
            (
                "IPYTHON_MCP_WORKSPACE_ROOT",
                workspace.path().to_str().expect("utf-8"),
            ),
        ],
    )
    .await;
    Sandboxed {
        home,
        secret,
        workspace,
        server,
    }
}

/// A second session, `other`, on the default session's interpreter: what one kernel plants
/// must not stop it.
async fn start_other(server: &Server) {
    let python = server.call("runtime_status", json!({})).await.structured["kernel"]["python"]
        .as_str()
        .expect("python")
        .to_owned();
    let other = answered(
        server,
        "kernel_start",
        json!({"spec": python, "kernel": "other"}),
    )
    .await;
    assert!(other.ok(), "{other:?}");
}

async fn answered(server: &Server, tool: &str, arguments: Value) -> support::ToolResult {
    tokio::time::timeout(ANSWERED_WITHIN, server.call(tool, arguments))
        .await
        .unwrap_or_else(|_| panic!("{tool} got no answer: the server is blocked"))
}

async fn run(server: &Server, code: &str) -> support::ToolResult {
    let result = answered(server, "execute", json!({ "code": code })).await;
    assert!(result.ok(), "{code}\n{result:?}");
    result
}

fn execution_id(result: &support::ToolResult) -> String {
    result.structured["execution_id"]
        .as_str()
        .expect("an execution id")
        .to_owned()
}

/// A session that still works: runs code and answers.
async fn works(server: &Server, kernel: &str) {
    let result = answered(
        server,
        "execute",
        json!({"code": "print(6 * 7)", "kernel": kernel}),
    )
    .await;
    assert_eq!(result.structured["stdout"], "42\n", "{kernel}: {result:?}");
}

/// The kernel replaces the spool files of its earlier executions with a link to a secret of
/// the user's (which the sandbox keeps it from reading itself), a link to `/dev/zero` and a
/// FIFO; paging each answers `io_error` naming what is there, never the secret, and the
/// server neither reads without bound nor blocks: the session, `runtime_status` and another
/// session go on.
#[tokio::test]
async fn get_output_refuses_spool_files_the_kernel_replaced_and_every_session_goes_on() {
    let Sandboxed {
        home: _home,
        secret,
        workspace: _workspace,
        server,
    } = sandboxed_with_a_secret("SECRET KEY\n").await;
    start_other(&server).await;
    let mut planted = Vec::new();
    for kind in ["link", "zero", "fifo"] {
        let printed = run(&server, &format!("print('planted-{kind}')")).await;
        planted.push((kind, execution_id(&printed)));
    }
    // The sandbox keeps the secret from the kernel itself: what follows would be a way around.
    let denied = run(
        &server,
        &format!(
            "try:\n    open({:?}).read()\n    print('read')\nexcept OSError:\n    print('denied')",
            secret.to_str().expect("utf-8")
        ),
    )
    .await;
    assert_eq!(denied.structured["stdout"], "denied\n", "{denied:?}");
    let plant = format!(
        "import os as _os\n_spool = {SPOOL}\n_targets = {{'link': {:?}, 'zero': '/dev/zero'}}\nfor _name in _os.listdir(_spool):\n    if not _name.endswith('.stdout'):\n        continue\n    _path = _os.path.join(_spool, _name)\n    with open(_path) as _file:\n        _text = _file.read()\n    for _kind in ('link', 'zero', 'fifo'):\n        if _text == 'planted-%s\\n' % _kind:\n            _os.remove(_path)\n            if _kind == 'fifo':\n                _os.mkfifo(_path)\n            else:\n                _os.symlink(_targets[_kind], _path)\n            print(_kind)",
        secret.to_str().expect("utf-8")
    );
    let replaced = run(&server, &plant).await;
    let mut kinds: Vec<&str> = replaced.structured["stdout"]
        .as_str()
        .expect("stdout")
        .lines()
        .collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["fifo", "link", "zero"], "{replaced:?}");
    for (kind, id) in &planted {
        let page = answered(
            &server,
            "get_output",
            json!({"execution_id": id, "stream": "stdout", "start_line": 1}),
        )
        .await;
        let error = &page.structured["error"];
        assert_eq!(error["code"], "io_error", "{kind}: {page:?}");
        let message = error["message"].as_str().expect("a message");
        let expected = match *kind {
            "fifo" => "is not a regular file (a FIFO)",
            _ => "is, or passes through, a symbolic link; not followed",
        };
        assert!(
            message.contains(expected) && message.contains(".stdout"),
            "{kind}: {message}"
        );
        assert!(
            !format!("{page:?}").contains("SECRET"),
            "{kind}: the secret leaked: {page:?}"
        );
    }
    let status = answered(&server, "runtime_status", json!({})).await;
    assert_eq!(status.structured["state"], "ready", "{status:?}");
    works(&server, "default").await;
    works(&server, "other").await;
    server.stop().await;
}

/// The kernel replaces its checkpoint's `manifest.json` with a FIFO (and stops checkpointing,
/// so nothing puts a file back): `runtime_status` says the file is refused instead of blocking
/// in `open`, and every session, this one included, goes on answering.
#[tokio::test]
async fn a_fifo_for_a_checkpoint_manifest_blocks_no_call_of_any_session() {
    let server = Server::start(Family::Modern, &[]).await;
    start_other(&server).await;
    run(&server, "x = 1").await;
    server
        .wait_until(|status| status["checkpoint"]["taken"] == true)
        .await;
    let plant = format!(
        "import os as _os, sys as _sys\n_directory = {CHECKPOINT}\n_sys.modules['ipython_mcp_helper.rpc'].current().checkpointer = None\n_manifest = _os.path.join(_directory, 'manifest.json')\n_os.remove(_manifest)\n_os.mkfifo(_manifest)\nprint('planted')"
    );
    let planted = run(&server, &plant).await;
    assert_eq!(planted.structured["stdout"], "planted\n", "{planted:?}");
    for _ in 0..3 {
        let status = answered(&server, "runtime_status", json!({})).await;
        let failure = status.structured["checkpoint"]["failure"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            failure.contains("manifest.json is not a regular file (a FIFO)"),
            "{status:?}"
        );
        let other = answered(&server, "runtime_status", json!({"kernel": "other"})).await;
        assert_eq!(other.structured["state"], "ready", "{other:?}");
        works(&server, "other").await;
        works(&server, "default").await;
    }
    let listed = answered(&server, "kernel_list", json!({})).await;
    assert!(listed.ok(), "{listed:?}");
    server.stop().await;
}

/// The kernel rewrites a checkpoint blob in place (same name, same file) with a pickle whose
/// loading would create a file, then dies: the replacement checks each blob against its
/// content address before unpickling it, so the payload never runs, the name is reported lost
/// with the reason, and the rest comes back.
#[tokio::test]
async fn a_blob_rewritten_in_place_is_not_unpickled_by_the_restore() {
    let server = Server::start(Family::Modern, &[]).await;
    // In the temp directory, which the kernel may write: the payload could create it there.
    let marks = tempfile::tempdir().expect("marks");
    let marker = marks.path().join("payload-ran");
    let probe = marks.path().join("writable");
    run(&server, "x = 1\ny = 'kept'").await;
    server
        .wait_until(|status| status["checkpoint"]["taken"] == true)
        .await;
    let plant = format!(
        "import json as _json, os as _os, pickle as _pickle, struct as _struct\n\
_directory = {CHECKPOINT}\n\
with open(_os.path.join(_directory, 'manifest.json')) as _file:\n    _blob = _json.load(_file)['variables']['x']['blob']\n\
class _Payload:\n    def __reduce__(self):\n        return (__import__('io').open, ({marker:?}, 'w'))\n\
_data = _pickle.dumps(_Payload(), protocol=5)\n\
with open(_os.path.join(_directory, 'objects', _blob), 'r+b') as _file:\n    _file.write(b'IPMCKPT1' + _struct.pack('<QQ', 0, len(_data)) + _data)\n    _file.truncate()\n\
open({probe:?}, 'w').close()\n\
del _Payload\n\
print('planted')",
        marker = marker.to_str().expect("utf-8"),
        probe = probe.to_str().expect("utf-8"),
    );
    let planted = run(&server, &plant).await;
    assert_eq!(planted.structured["stdout"], "planted\n", "{planted:?}");
    assert!(
        probe.exists(),
        "the kernel can write where the payload would"
    );
    let status = server
        .wait_until(|status| status["checkpoint"]["execution_count"] == 2)
        .await;
    let pid = status["kernel"]["pid"].as_i64().expect("pid") as i32;
    // SAFETY: kill(2) on the pid of our own server's kernel.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    support::wait_until_gone(pid).await;
    let replaced = server
        .wait_until(|status| status["epoch"] == 1 && status["state"] == "ready")
        .await;
    let after = run(&server, "print('x' in dir(), y)").await;
    assert_eq!(after.structured["stdout"], "False kept\n", "{after:?}");
    assert!(!marker.exists(), "the rewritten blob's payload ran");
    let restore = &replaced["latest_restore"];
    let lost = restore["lost"].as_array().expect("lost");
    assert!(
        lost.iter().any(|lost| lost["name"] == "x"
            && lost["reason"]
                .as_str()
                .is_some_and(|reason| reason.contains("does not match its content address"))),
        "{restore}"
    );
    assert!(
        restore["restored"]
            .as_array()
            .is_some_and(|names| names.contains(&json!("y"))),
        "{restore}"
    );
    server.stop().await;
}

/// A kernel replaces an interpreter with a script (as it could plant a `.pth` file in its
/// environment: both run whenever the server asks that interpreter what it is). The next
/// `kernel_start` on it probes it: the script runs, but inside the sandbox, so the secret it
/// reaches for stays out of reach; without the probe's confinement it was copied out.
#[tokio::test]
async fn an_interpreter_a_kernel_planted_is_probed_inside_the_sandbox() {
    let Sandboxed {
        home: _home,
        secret,
        workspace,
        server,
    } = sandboxed_with_a_secret("SECRET planted-probe\n").await;
    let venv = workspace.path().join(".venv");
    let planted = venv.join("bin/python");
    let (leak, ran) = (workspace.path().join("leak"), workspace.path().join("ran"));
    // The kernel's own code: it may write the workspace, so it may write this.
    let code = format!(
        "import os, stat, sys\n\
         os.makedirs({bin:?}, exist_ok=True)\n\
         script = '#!/bin/sh\\n' \\\n\
             'cat \"$HOME/.ssh/id_ed25519\" >> {leak} 2>&1\\n' \\\n\
             'echo ran >> {ran}\\n' \\\n\
             'exec ' + sys.executable + ' \"$@\"\\n'\n\
         open({planted:?}, 'w').write(script)\n\
         os.chmod({planted:?}, 0o755)\n\
         print('planted')",
        bin = venv.join("bin").to_str().expect("utf-8"),
        leak = leak.to_str().expect("utf-8"),
        ran = ran.to_str().expect("utf-8"),
        planted = planted.to_str().expect("utf-8"),
    );
    let result = server.call("execute", json!({ "code": code })).await;
    assert!(result.ok(), "{result:?}");
    assert_eq!(result.structured["stdout"], "planted\n", "{result:?}");
    // Reading the secret is denied to the kernel itself.
    let denied = server
        .call(
            "execute",
            json!({ "code": format!("open({:?}).read()", secret.to_str().expect("utf-8")) }),
        )
        .await;
    assert!(
        denied.text().contains("PermissionError"),
        "the kernel reads the secret: {denied:?}"
    );

    let started = server
        .call(
            "kernel_start",
            json!({ "spec": planted.to_str().expect("utf-8"), "kernel": "second" }),
        )
        .await;
    assert!(started.ok(), "{started:?}");
    let marked = std::fs::read_to_string(&ran).unwrap_or_default();
    assert!(marked.contains("ran"), "the planted script was not run");
    let leaked = std::fs::read_to_string(&leak).unwrap_or_default();
    assert!(
        !leaked.contains("SECRET"),
        "the probe ran the planted script unconfined: it read {leaked:?}"
    );
    // The kernel on it works, sandboxed like the first.
    let second = server
        .call(
            "execute",
            json!({ "code": "print(6 * 7)", "kernel": "second" }),
        )
        .await;
    assert!(second.ok(), "{second:?}");
    assert_eq!(second.structured["stdout"], "42\n", "{second:?}");
    server.stop().await;
}
