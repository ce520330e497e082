//! Named environments through the real binary: a kernel pinned to its environment, with the
//! configured variables set before preloads; a failing install that leaves the session
//! `unavailable` with a bounded, redacted error naming the phase while the server keeps
//! answering; configuration errors that stop the server before anything is created.

use crate::support;

use std::path::Path;

use serde_json::json;
use support::{Family, Server};

/// Entries of a workspace other than lock files, sorted.
fn workspace_entries(workspace: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(workspace) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .map(|entry| {
            entry
                .expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| !name.ends_with(".lock"))
        .collect();
    names.sort();
    names
}

/// Shared by every run, like the managed default environment: the first run creates the
/// environment (~20 s), later runs reuse it.
fn shared_workspace() -> String {
    format!("{}/ipython-mcp-named", env!("CARGO_TARGET_TMPDIR"))
}

#[tokio::test]
async fn a_kernel_runs_in_its_named_environment_with_variables_set_before_preloads() {
    let library = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        library.path().join("modeprobe.py"),
        "import os\nMODE_AT_IMPORT = os.environ.get('TASK_MODE')\n",
    )
    .expect("write module");
    let workspace = shared_workspace();
    let library_path = library.path().display().to_string();
    let server = Server::start_unready(
        Family::Handshake,
        &[
            ("IPYTHON_MCP_ENVIRONMENT_WORKSPACE", &workspace),
            ("IPYTHON_MCP_ACTIVE_ENVIRONMENT", "e2e-six-1.16"),
            (
                "IPYTHON_MCP_ENVIRONMENT_REQUIREMENTS",
                r#"["Six == 1.16.0"]"#,
            ),
            (
                "IPYTHON_MCP_ENVIRONMENT_VARIABLES",
                r#"{"TASK_MODE": "offline-mode-7"}"#,
            ),
            ("IPYTHON_MCP_LIBRARY_PATHS", &library_path),
            ("IPYTHON_MCP_PRELOAD_MODULES", "modeprobe"),
        ],
    )
    .await;
    let status = server.wait_settled().await;
    assert_eq!(status["state"], "ready", "{status}");
    assert_eq!(status["environment"]["source"], "named_environment");
    eprintln!(
        "named environment ready: created {}, {:.2} s",
        status["environment"]["created"],
        status["environment"]["elapsed_seconds"]
            .as_f64()
            .unwrap_or_default()
    );
    let python = format!("{workspace}/e2e-six-1.16/bin/python");
    assert_eq!(status["kernel"]["python"], python.as_str());
    assert!(
        !status.to_string().contains("offline-mode-7"),
        "status never shows variable values: {status}"
    );

    let result = server
        .call(
            "execute",
            json!({"code": "import six, sys\nprint(six.__version__, modeprobe.MODE_AT_IMPORT, sys.prefix != sys.base_prefix)"}),
        )
        .await;
    assert!(result.ok(), "{:?}", result.structured);
    assert_eq!(
        result.structured["stdout"].as_str().map(str::trim),
        Some("1.16.0 offline-mode-7 True")
    );
    server.stop().await;
    assert!(workspace_entries(Path::new(&workspace)).contains(&"e2e-six-1.16".to_owned()));
    assert!(
        !workspace_entries(Path::new(&workspace))
            .iter()
            .any(|name| name.starts_with(".ipython-mcp-tmp-")),
        "no temp dir left"
    );
}

#[tokio::test]
async fn a_failing_install_leaves_the_session_unavailable_with_a_bounded_redacted_error() {
    let workspace = tempfile::tempdir().expect("tempdir");
    let workspace_path = workspace.path().display().to_string();
    // The token appears twice: as URL credentials, and in the path where only the variable
    // redaction can catch it. Nothing listens on port 9, so pip fails after its retries.
    let requirements = json!([
        "private-pkg @ https://alice:pw-in-url@127.0.0.1:9/tok3n-s3cret/private_pkg-1.0.tar.gz"
    ])
    .to_string();
    let max_text_chars = 400;
    let server = Server::start_unready(
        Family::Modern,
        &[
            ("IPYTHON_MCP_ENVIRONMENT_WORKSPACE", &workspace_path),
            ("IPYTHON_MCP_ACTIVE_ENVIRONMENT", "broken"),
            ("IPYTHON_MCP_ENVIRONMENT_REQUIREMENTS", &requirements),
            (
                "IPYTHON_MCP_ENVIRONMENT_VARIABLES",
                r#"{"API_TOKEN": "tok3n-s3cret"}"#,
            ),
            ("IPYTHON_MCP_MAX_TEXT_CHARS", &max_text_chars.to_string()),
        ],
    )
    .await;
    let status = server.wait_settled().await;
    assert_eq!(status["state"], "unavailable", "{status}");
    assert_eq!(status["environment"]["phase"], "failed");
    assert_eq!(status["environment"]["failed_phase"], "install");
    let message = status["error"]["message"].as_str().expect("message");
    assert!(
        message.starts_with("environment install phase failed: installing the requirements"),
        "{message}"
    );
    assert!(message.chars().count() <= max_text_chars, "{message}");
    for secret in ["tok3n-s3cret", "pw-in-url", "alice"] {
        assert!(!status.to_string().contains(secret), "{secret} in {status}");
    }
    assert!(message.contains("***"), "{message}");

    let result = server.call("execute", json!({"code": "1"})).await;
    assert!(result.is_error);
    assert_eq!(result.structured["error"]["code"], "runtime_unavailable");
    let text = result.structured.to_string();
    for secret in ["tok3n-s3cret", "pw-in-url", "alice"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    // The server keeps answering; a restart cannot fix the configuration, so the session stays
    // unavailable with the same error; the failure left nothing in the workspace.
    let restarted = server.call_raw("kernel_restart", json!({})).await;
    assert!(
        !restarted.text().contains("tok3n-s3cret"),
        "{:?}",
        restarted
    );
    let again = server.call("runtime_status", json!({})).await;
    assert_eq!(again.structured["state"], "unavailable", "{:?}", again);
    assert_eq!(again.structured["error"], status["error"]);
    assert_eq!(workspace_entries(workspace.path()), Vec::<String>::new());
    server.stop().await;
}

#[test]
fn invalid_environment_settings_stop_the_server_with_one_line_before_creating_anything() {
    let workspace = tempfile::tempdir().expect("tempdir");
    let inside_project = std::env::current_dir()
        .expect("cwd")
        .join("named-envs")
        .display()
        .to_string();
    let absolute = workspace.path().display().to_string();
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[
                ("IPYTHON_MCP_ENVIRONMENT_WORKSPACE", &inside_project),
                ("IPYTHON_MCP_ACTIVE_ENVIRONMENT", "a"),
            ],
            "IPYTHON_MCP_ENVIRONMENT_WORKSPACE",
        ),
        (
            &[
                ("IPYTHON_MCP_ENVIRONMENT_WORKSPACE", &absolute),
                ("IPYTHON_MCP_ACTIVE_ENVIRONMENT", "../up"),
            ],
            "IPYTHON_MCP_ACTIVE_ENVIRONMENT",
        ),
        (
            &[
                ("IPYTHON_MCP_ENVIRONMENT_WORKSPACE", &absolute),
                ("IPYTHON_MCP_ACTIVE_ENVIRONMENT", "a"),
                ("IPYTHON_MCP_ENVIRONMENT_REQUIREMENTS", r#"["-r reqs.txt"]"#),
            ],
            "IPYTHON_MCP_ENVIRONMENT_REQUIREMENTS",
        ),
        (
            &[("IPYTHON_MCP_ENVIRONMENT_VARIABLES", r#"{"A": 1}"#)],
            "IPYTHON_MCP_ENVIRONMENT_VARIABLES",
        ),
    ];
    for (env, setting) in cases {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ipython-mcp"));
        command.stdin(std::process::Stdio::null());
        for (key, value) in *env {
            command.env(key, value);
        }
        let output = command.output().expect("run");
        assert_eq!(output.status.code(), Some(2), "{env:?}");
        assert!(output.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(setting), "{stderr}");
    }
    assert_eq!(
        workspace_entries(workspace.path()),
        Vec::<String>::new(),
        "nothing created"
    );
    assert!(!Path::new(&inside_project).exists());
}

/// A fake `uv` on PATH whose install runs until the test releases it and then fails: the phase
/// and a moving elapsed time are visible in runtime_status while it runs.
#[tokio::test]
async fn a_long_install_shows_its_phase_and_elapsed_time_in_runtime_status() {
    use std::os::unix::fs::PermissionsExt as _;

    let root = tempfile::tempdir().expect("tempdir");
    let bin = root.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let uv = bin.join("uv");
    let release = root.path().join("release");
    // The install waits for the release file (at most two minutes, so a failed test leaves
    // nothing behind for long), then fails.
    std::fs::write(
        &uv,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n  venv) for dir; do :; done; exec python3 -m venv --without-pip \"$dir\";;\n  pip) echo 'Resolving dependencies'; waited=0; while [ ! -e '{}' ] && [ $waited -lt 2400 ]; do sleep 0.05; waited=$((waited + 1)); done; echo 'error: the index is down' >&2; exit 1;;\nesac\n",
            release.display()
        ),
    )
    .expect("write uv");
    std::fs::set_permissions(&uv, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let workspace = root.path().join("workspace").display().to_string();
    let server = Server::start_unready(
        Family::Handshake,
        &[
            ("PATH", &path),
            ("IPYTHON_MCP_ENVIRONMENT_WORKSPACE", &workspace),
            ("IPYTHON_MCP_ACTIVE_ENVIRONMENT", "slow"),
        ],
    )
    .await;
    let installing = |status: &serde_json::Value| {
        status["environment"]["phase"] == "installing" && status["environment"]["tool"] == "uv"
    };
    let first = server.wait_until(installing).await;
    let first_elapsed = first["environment"]["elapsed_seconds"]
        .as_f64()
        .expect("elapsed");
    let later = server
        .wait_until(|status| {
            installing(status)
                && status["environment"]["elapsed_seconds"]
                    .as_f64()
                    .is_some_and(|elapsed| elapsed >= first_elapsed + 1.5)
        })
        .await;
    assert_eq!(later["state"], "starting");
    std::fs::write(&release, "").expect("release the install");
    let status = server.wait_settled().await;
    assert_eq!(status["state"], "unavailable");
    assert_eq!(status["environment"]["failed_phase"], "install");
    let message = status["error"]["message"].as_str().expect("message");
    assert!(message.ends_with("error: the index is down"), "{message}");
    assert_eq!(
        workspace_entries(Path::new(&workspace)),
        Vec::<String>::new()
    );
    server.stop().await;
}
