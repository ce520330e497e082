//! End to end: how `kernel_start` launches kernels — a kernelspec's argv, env and
//! interrupt_mode exactly as registered (wrapper scripts included), and where kernels start
//! (`cwd`, a venv's project directory).

use crate::support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{Family, Server};

/// Writes an executable shell script.
fn script(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Registers a kernelspec `name` under `jupyter/kernels/`.
fn register(jupyter: &Path, name: &str, spec: Value) {
    let dir = jupyter.join("kernels").join(name);
    std::fs::create_dir_all(&dir).expect("spec dir");
    std::fs::write(dir.join("kernel.json"), spec.to_string()).expect("kernel.json");
}

/// The value of a Python expression evaluated in `kernel`, parsed from its JSON text.
async fn evaluate(server: &Server, kernel: &str, expression: &str) -> Value {
    let code = format!("import json as _json\nprint(_json.dumps({expression}))");
    let output = server
        .call("execute", json!({"code": code, "kernel": kernel}))
        .await;
    assert!(output.ok(), "{expression}: {output:?}");
    let stdout = output.structured["stdout"].as_str().expect("stdout");
    serde_json::from_str(stdout.trim()).expect("JSON printed")
}

fn real(path: &Path) -> String {
    std::fs::canonicalize(path)
        .expect("canonical path")
        .display()
        .to_string()
}

#[tokio::test]
async fn a_kernelspec_wrapper_script_runs_with_the_specs_argv_and_env() {
    let python = support::provisioned_python().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let recorded = dir.path().join("argv.txt");
    // A wrapper like `module load` or `conda run`: it sets things up, records how it was
    // called, and execs the real interpreter with its arguments.
    let wrapper = dir.path().join("wrap.sh");
    script(
        &wrapper,
        &format!(
            "#!/bin/sh\nexport WRAPPED_BY=wrapper\nprintf '%s\\n' \"$0\" \"$@\" > '{}'\nexec '{}' \"$@\"\n",
            recorded.display(),
            python.display()
        ),
    );
    let jupyter = dir.path().join("jupyter");
    register(
        &jupyter,
        "wrapped",
        json!({
            "argv": [wrapper, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                     "--InteractiveShell.autocall=1"],
            "display_name": "Wrapped",
            "language": "python",
            "env": {"SPEC_VARIABLE": "from the spec", "SPEC_PATH": "/spec/bin:${PATH}"},
        }),
    );
    let jupyter_path = jupyter.display().to_string();
    let server = Server::start(
        Family::Handshake,
        &[
            ("JUPYTER_PATH", &jupyter_path),
            ("JUPYTER_DATA_DIR", &jupyter_path),
        ],
    )
    .await;
    let started = server
        .call("kernel_start", json!({"spec": "wrapped", "kernel": "w"}))
        .await;
    assert!(started.ok(), "{started:?}");
    let kernel = &started.structured["status"]["kernel"];
    assert_eq!(kernel["python"], wrapper.display().to_string());
    assert_eq!(kernel["helper"], true, "{kernel}");

    // The wrapper ran (its variable is set) with exactly the spec's argv, the connection file
    // substituted, plus our ipykernel options at the end.
    assert_eq!(
        evaluate(&server, "w", "__import__('os').environ.get('WRAPPED_BY')").await,
        "wrapper"
    );
    let connection_file = evaluate(
        &server,
        "w",
        "__import__('ipykernel.connect').connect.get_connection_file()",
    )
    .await;
    let argv: Vec<String> = std::fs::read_to_string(&recorded)
        .expect("the wrapper recorded its argv")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        argv,
        [
            wrapper.display().to_string().as_str(),
            "-m",
            "ipykernel_launcher",
            "-f",
            connection_file.as_str().expect("path"),
            "--InteractiveShell.autocall=1",
            "--HistoryManager.hist_file=:memory:",
            "--InteractiveShell.colors=nocolor",
        ]
    );
    // The spec's own flag reached ipykernel.
    assert_eq!(evaluate(&server, "w", "get_ipython().autocall").await, 1);
    // Its env, with `${PATH}` substituted from the server's environment as Jupyter does.
    let environment = evaluate(
        &server,
        "w",
        "[__import__('os').environ.get(name) for name in ('SPEC_VARIABLE', 'SPEC_PATH')]",
    )
    .await;
    let path = std::env::var("PATH").expect("PATH");
    assert_eq!(
        environment,
        json!(["from the spec", format!("/spec/bin:{path}")])
    );
    // The helper was installed through the kernel's channels: the namespace tools work.
    let listed = server.call("list", json!({"kernel": "w"})).await;
    assert!(listed.ok(), "{listed:?}");
    server.stop().await;
}

/// Polls get_output until the latest execution of `kernel` has printed `needle`.
async fn wait_for_stdout(server: &Server, kernel: &str, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let output = server.call("get_output", json!({"kernel": kernel})).await;
        let stdout = output.structured["stdout"].as_str().unwrap_or("");
        if stdout.contains(needle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{needle:?} never came: {output:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_kernelspec_with_interrupt_mode_message_is_interrupted_by_message() {
    let python = support::provisioned_python().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // The kernel runs under a shell that ignores SIGINT and does not exec: a signal to the
    // process we started would stop nothing, so only an `interrupt_request` (ipykernel then
    // signals its own process group) can stop the running cell.
    let wrapper = dir.path().join("shield.sh");
    script(
        &wrapper,
        &format!("#!/bin/sh\ntrap '' INT\n'{}' \"$@\"\n", python.display()),
    );
    let jupyter = dir.path().join("jupyter");
    register(
        &jupyter,
        "by-message",
        json!({
            "argv": [wrapper, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "By message",
            "language": "python",
            "interrupt_mode": "message",
        }),
    );
    let jupyter_path = jupyter.display().to_string();
    let server = Server::start(
        Family::Handshake,
        &[
            ("JUPYTER_PATH", &jupyter_path),
            ("JUPYTER_DATA_DIR", &jupyter_path),
            // A cooperative stop ends as soon as the kernel answers, so a long grace costs
            // nothing and a slow machine cannot turn it into a kill.
            ("IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "60"),
            // The pids compared below are the host's: the kernel's own PID namespace would
            // number its parent otherwise.
            ("IPYTHON_MCP_SANDBOX_NAMESPACES", "off"),
        ],
    )
    .await;
    let started = server
        .call("kernel_start", json!({"spec": "by-message", "kernel": "m"}))
        .await;
    assert!(started.ok(), "{started:?}");
    // The process the server started (and would signal) is the shell, not the kernel.
    assert_eq!(
        evaluate(&server, "m", "__import__('os').getppid()").await,
        started.structured["status"]["kernel"]["pid"]
    );
    let set = server
        .call("execute", json!({"code": "kept = 42", "kernel": "m"}))
        .await;
    assert!(set.ok(), "{set:?}");
    let sleeping = server
        .call(
            "execute",
            json!({
                "code": "import time\nprint('armed', flush=True)\ntime.sleep(600)",
                "kernel": "m",
                "background": true,
            }),
        )
        .await;
    assert!(sleeping.ok(), "{sleeping:?}");
    wait_for_stdout(&server, "m", "armed").await;
    let stopped = server.call("interrupt", json!({"kernel": "m"})).await;
    assert_eq!(stopped.structured["interrupted"], true, "{stopped:?}");
    assert_eq!(
        stopped.structured["interruption"], "cooperative",
        "{stopped:?}"
    );
    assert_eq!(stopped.structured["namespace"], "preserved");
    let id = sleeping.structured["execution_id"].as_str().expect("id");
    let done = server
        .call(
            "get_output",
            json!({"execution_id": id, "wait_seconds": 60}),
        )
        .await;
    assert_eq!(done.structured["finished"], true, "{done:?}");
    assert_eq!(done.structured["status"], "cancelled", "{done:?}");
    assert_eq!(done.structured["stdout"], "armed\n");
    assert_eq!(evaluate(&server, "m", "kept").await, 42);
    server.stop().await;
}

#[tokio::test]
async fn kernels_start_in_the_venv_project_or_the_cwd_given() {
    let python = support::provisioned_python().await;
    // The provisioned environment is a venv with ipykernel: link it in as a project's `.venv`.
    let venv = python
        .parent()
        .and_then(Path::parent)
        .expect("venv of the provisioned python")
        .to_owned();
    let dir = tempfile::tempdir().expect("tempdir");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).expect("project");
    std::os::unix::fs::symlink(&venv, project.join(".venv")).expect("link .venv");
    let server_dir = dir.path().join("server");
    let sub = server_dir.join("sub");
    std::fs::create_dir_all(&sub).expect("server dir");
    std::fs::write(server_dir.join("file"), "").expect("file");

    // A kernelspec installed in another project's venv (`<venv>/share/jupyter/kernels`), whose
    // bare `python` runs the kernel Python, as Jupyter runs its own.
    let other = dir.path().join("other");
    let other_venv = other.join(".venv");
    std::fs::create_dir_all(&other_venv).expect("other venv");
    std::fs::write(other_venv.join("pyvenv.cfg"), "home = /usr/bin\n").expect("pyvenv.cfg");
    let jupyter = other_venv.join("share/jupyter");
    register(
        &jupyter,
        "other-project",
        json!({
            "argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Other project",
            "language": "python",
        }),
    );
    let jupyter_path = jupyter.display().to_string();
    let mut command = support::command(&[
        ("JUPYTER_PATH", &jupyter_path),
        ("JUPYTER_DATA_DIR", &jupyter_path),
    ]);
    command.current_dir(&server_dir);
    let server = Server::start_command(Family::Modern, command).await;
    assert_eq!(server.wait_settled().await["state"], "ready");
    let getcwd = "__import__('os').getcwd()";
    assert_eq!(
        evaluate(&server, "default", getcwd).await,
        real(&server_dir)
    );

    // `venv:<project>` and `venv:<project>/.venv` both start in the project.
    for (spec, kernel) in [
        (format!("venv:{}", project.display()), "p1"),
        (format!("venv:{}", project.join(".venv").display()), "p2"),
    ] {
        let started = server
            .call("kernel_start", json!({"spec": spec, "kernel": kernel}))
            .await;
        assert!(started.ok(), "{started:?}");
        assert_eq!(
            started.structured["status"]["kernel"]["working_dir"],
            project.display().to_string()
        );
        assert_eq!(
            evaluate(&server, kernel, getcwd).await,
            real(&project),
            "{spec}"
        );
    }

    let started = server
        .call(
            "kernel_start",
            json!({"spec": "other-project", "kernel": "o"}),
        )
        .await;
    assert!(started.ok(), "{started:?}");
    assert_eq!(evaluate(&server, "o", getcwd).await, real(&other));
    assert_eq!(
        evaluate(&server, "o", "__import__('sys').executable").await,
        python.display().to_string()
    );

    // An explicit cwd wins, relative to the server's working directory.
    let started = server
        .call(
            "kernel_start",
            json!({"spec": format!("venv:{}", project.display()), "kernel": "c", "cwd": "sub"}),
        )
        .await;
    assert!(started.ok(), "{started:?}");
    assert_eq!(evaluate(&server, "c", getcwd).await, real(&sub));
    let listed = server.call("kernel_list", json!({})).await;
    let entry = listed.structured["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .find(|kernel| kernel["kernel"] == "c")
        .cloned()
        .expect("c listed");
    assert_eq!(entry["working_dir"], real(&sub));

    // A cwd that is missing or not a directory is refused, and nothing starts.
    let before = server.call("kernel_list", json!({})).await.structured["kernels"].clone();
    for (cwd, needle) in [
        ("no-such-dir", "cannot be used"),
        ("file", "not a directory"),
        ("", "is empty"),
    ] {
        let refused = server
            .call(
                "kernel_start",
                json!({"spec": python, "kernel": "bad", "cwd": cwd}),
            )
            .await;
        assert!(refused.is_error, "{cwd}: {refused:?}");
        assert_eq!(refused.structured["error"]["code"], "invalid_arguments");
        let message = refused.structured["error"]["message"]
            .as_str()
            .unwrap_or("");
        assert!(message.contains(needle), "{cwd}: {message}");
    }
    let after = server.call("kernel_list", json!({})).await.structured["kernels"].clone();
    let names = |kernels: &Value| -> Vec<String> {
        kernels
            .as_array()
            .expect("kernels")
            .iter()
            .filter_map(|kernel| kernel["kernel"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(names(&after), names(&before));
    assert_eq!(names(&after), ["c", "default", "o", "p1", "p2"]);
    server.stop().await;
}
