//! End to end, as an attacker would: what kernel code plants where it may write (its
//! environment, the workspace) runs, when the server runs it, no freer than the kernel.

use std::path::Path;

use crate::support;

use serde_json::json;
use support::{Family, Server};

/// A directory for one test, outside the system temp directory (which kernels may write).
fn private_dir(name: &str) -> tempfile::TempDir {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("planted");
    std::fs::create_dir_all(&base).expect("test dir");
    tempfile::Builder::new()
        .prefix(name)
        .tempdir_in(base)
        .expect("tempdir")
}

/// A kernel replaces an interpreter with a script (as it could plant a `.pth` file in its
/// environment: both run whenever the server asks that interpreter what it is). The next
/// `kernel_start` on it probes it: the script runs, but inside the sandbox, so the secret it
/// reaches for stays out of reach; without the probe's confinement it was copied out.
#[tokio::test]
async fn an_interpreter_a_kernel_planted_is_probed_inside_the_sandbox() {
    if !cfg!(target_os = "linux") {
        panic!("the sandbox tests run on Linux");
    }
    let home = private_dir("home");
    let secret = home.path().join(".ssh/id_ed25519");
    std::fs::create_dir_all(secret.parent().expect("parent")).expect("mkdir");
    std::fs::write(&secret, "SECRET planted-probe\n").expect("write secret");
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
