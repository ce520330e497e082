//! What a kernel may read and write, before any OS mechanism: the modes, the deny list and
//! the writable directories.

use std::path::{Path, PathBuf};

/// How much a kernel may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Reads anywhere but the deny list; writes the workspace, the temp directory and what a
    /// kernel needs (its environment, IPython's and matplotlib's directories).
    WorkspaceWrite,
    /// Reads as `WorkspaceWrite`; writes only the temp directory.
    ReadOnly,
    /// No sandbox.
    Off,
}

impl Mode {
    pub const NAMES: [&'static str; 3] = ["workspace-write", "read-only", "off"];

    pub fn parse(text: &str) -> Option<Mode> {
        match text.trim() {
            "workspace-write" => Some(Mode::WorkspaceWrite),
            "read-only" => Some(Mode::ReadOnly),
            "off" => Some(Mode::Off),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::WorkspaceWrite => "workspace-write",
            Mode::ReadOnly => "read-only",
            Mode::Off => "off",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a kernel's code may connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// Anywhere its user can.
    On,
    /// Nowhere: no TCP connection and no datagram leaves the kernel (its channels to the
    /// server are Unix sockets in its run directory, and keep working).
    Off,
    /// Only through the server's HTTP proxy on loopback `port`, which lets `hosts` through;
    /// a kernel in a network namespace reaches it through its Unix `socket`.
    Proxy {
        port: u16,
        hosts: Vec<String>,
        socket: Option<PathBuf>,
    },
}

impl Network {
    pub fn name(&self) -> &'static str {
        match self {
            Network::On => "on",
            Network::Off => "off",
            Network::Proxy { .. } => "allowlist",
        }
    }

    /// The hosts an allowlist lets through (none otherwise).
    pub fn hosts(&self) -> &[String] {
        match self {
            Network::Proxy { hosts, .. } => hosts,
            Network::On | Network::Off => &[],
        }
    }
}

/// Entries whose contents become code run outside the sandbox (a git hook at the next commit,
/// a shell start-up file at the next login, an editor's or agent's settings, direnv's
/// `.envrc`): read-only to kernels wherever the sandbox can say so without taking anything
/// else away, that is inside a writable directory it splits anyway (one holding a denied
/// path, as HOME does). `IPYTHON_MCP_SANDBOX_WRITE` naming one makes it writable.
pub const WRITE_PROTECTED: &[&str] = &[
    ".git",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".cshrc",
    ".tcshrc",
    ".kshrc",
    ".inputrc",
    ".envrc",
    ".vscode",
    ".idea",
    ".mcp.json",
    ".claude",
    ".cursor",
    ".gitconfig",
    ".config",
    ".local",
    ".pythonrc",
    ".pythonstartup",
];

/// Secret locations under HOME no kernel reads: keys, cloud, cluster and package-index
/// credentials, agents' and tools' tokens, keyrings, browser profiles and command histories.
/// docs/src/sandbox.md has them in one table, with what each holds; keep the two in step.
///
/// None is inside a directory kernels write (`.cache`, `.ipython`, …): denying a path there
/// would split that directory, and nothing new could be made directly in it.
pub const DEFAULT_DENIED_UNDER_HOME: &[&str] = &[
    // Keys and signing.
    ".ssh",
    ".gnupg",
    ".password-store",
    ".local/share/keyrings",
    ".config/op",
    // Cloud and cluster credentials.
    ".aws",
    ".azure",
    ".config/gcloud",
    ".oci",
    ".kube",
    ".docker",
    ".config/containers/auth.json",
    ".terraform.d",
    ".vault-token",
    ".s3cfg",
    ".boto",
    ".config/rclone",
    ".config/doctl",
    // Git hosts and git.
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".config/glab-cli",
    // Package indexes.
    ".pypirc",
    ".npmrc",
    ".yarnrc.yml",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".gem/credentials",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    // Databases.
    ".pgpass",
    ".my.cnf",
    // AI agents' tokens and configuration (which holds their MCP servers' keys).
    ".claude/.credentials.json",
    ".claude.json",
    ".codex/auth.json",
    ".config/github-copilot",
    // The X server's cookie: with it a client can type into any window.
    ".Xauthority",
    // Browser and mail profiles (cookies, saved passwords).
    ".mozilla",
    ".thunderbird",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
    // Command histories (pasted tokens, passwords on command lines).
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

/// Variables a sandboxed kernel does not get: they lead to agents that act with the user's
/// keys and sessions (ssh-agent signs with keys the deny list keeps the kernel from, the
/// session bus reaches the keyring's secret service, an X display takes typed keys), or name
/// a Kerberos ticket cache.
pub const AGENT_VARIABLES: &[&str] = &[
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "GNOME_KEYRING_CONTROL",
    "GNOME_KEYRING_PID",
    "DBUS_SESSION_BUS_ADDRESS",
    "KRB5CCNAME",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
];

/// What kernels of one server (or principal) may read and write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub mode: Mode,
    pub network: Network,
    /// True when the mode was set, not defaulted: then a system that cannot enforce it
    /// refuses to start kernels.
    pub explicit: bool,
    /// The kernel's HOME: the default deny list and IPython's and matplotlib's directories
    /// are under it.
    pub home: Option<PathBuf>,
    /// Denied besides the defaults (the server's own configuration and secret files, and
    /// what the user lists).
    pub read_deny: Vec<PathBuf>,
    /// Writable besides the workspace, the temp directory and the kernel's own.
    pub write: Vec<PathBuf>,
    /// The notebook workspace.
    pub workspace: Option<PathBuf>,
    /// The temp directory: writable under `WorkspaceWrite`, and under `ReadOnly` without a
    /// `state` directory.
    pub temp: PathBuf,
    /// The server's private directory (every local kernel's run directory and output spool):
    /// denied, each kernel given back its own entries ([`KernelDirs::own`]). One inside the
    /// temp directory cannot be denied on Linux without taking the temp directory's new
    /// entries away: the report then says kernels can read each other's.
    pub private: Option<PathBuf>,
    /// Under `ReadOnly`, where this policy's kernels keep IPython's and matplotlib's
    /// directories and their temp directory (`TMPDIR`): one per server or principal in the
    /// private directory, writable by these kernels alone (in the shared temp directory one
    /// kernel could plant a startup file that another runs, or a pickle another loads).
    /// `None`: the shared temp directory, writable.
    pub state: Option<PathBuf>,
    /// Most tasks (processes and threads) the kernel and what it starts may have at once, in a
    /// `pids` cgroup of its own; `None`: no bound.
    pub max_processes: Option<u64>,
    /// Whether to run the kernel in namespaces of its own where the system allows them.
    pub namespaces: bool,
    /// In namespaces, a `/tmp` of its own (`<state>/tmp`) instead of the host's: for the
    /// kernels of a principal, which run as the same OS user as everyone else's and would
    /// otherwise share a writable directory. A read-only kernel always has one.
    pub private_temp: bool,
}

/// A kernel's own directories.
#[derive(Debug, Clone, Default)]
pub struct KernelDirs {
    /// Where it starts (a notebook's directory, a project). Not writable for that: a kernel
    /// started elsewhere (`kernel_start`'s `cwd`) writes only where its mode allows.
    pub working_dir: Option<PathBuf>,
    /// Its interpreter: a virtual environment's is writable (`%pip install`).
    pub python: Option<PathBuf>,
    /// Its own entries in the server's private directory (its run directory with its
    /// connection file and sockets, its session's output spool): readable and writable by
    /// it alone.
    pub own: Vec<PathBuf>,
}

impl Policy {
    /// Every denied path: the defaults under HOME, the listed ones, then the server's
    /// private directory.
    pub fn denied(&self) -> Vec<PathBuf> {
        let mut denied: Vec<PathBuf> = match &self.home {
            Some(home) => DEFAULT_DENIED_UNDER_HOME
                .iter()
                .map(|entry| home.join(entry))
                .collect(),
            None => Vec::new(),
        };
        denied.extend(self.read_deny.iter().cloned());
        denied.extend(self.private.iter().cloned());
        denied
    }

    /// The kernel's own directories in the (denied) private directory: its `dirs.own` and,
    /// under `ReadOnly`, the policy's state directory.
    pub fn own(&self, dirs: &KernelDirs) -> Vec<PathBuf> {
        let mut own = dirs.own.clone();
        if self.mode == Mode::ReadOnly {
            own.extend(self.state.iter().cloned());
        }
        own
    }

    /// Every writable directory for a kernel with `dirs` (besides its own, [`Policy::own`]).
    pub fn writable(&self, dirs: &KernelDirs) -> Vec<PathBuf> {
        let mut writable = Vec::new();
        // A read-only kernel with a state directory has its temp directory there.
        if self.mode != Mode::ReadOnly || self.state.is_none() {
            writable.push(self.temp.clone());
        }
        if self.mode == Mode::WorkspaceWrite {
            writable.extend(self.workspace.iter().cloned());
            writable.extend(dirs.python.as_deref().and_then(venv_of));
            if let Some(home) = &self.home {
                for dir in [
                    ".ipython",
                    ".cache",
                    ".config/matplotlib",
                    ".local/share/jupyter",
                ] {
                    writable.push(home.join(dir));
                }
            }
            writable.extend(self.write.iter().cloned());
        }
        writable
    }
}

impl Policy {
    /// Variables the kernel gets: under `ReadOnly` IPython's and matplotlib's directories
    /// move into the policy's own state directory (else the temp directory), and so does its
    /// temp directory.
    /// Under an allowlist, the proxy variables every HTTP client reads point at the server's
    /// proxy, and nothing bypasses it.
    pub fn kernel_env(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        let mut env = Vec::new();
        if self.mode == Mode::ReadOnly {
            let (ipython, matplotlib) = match &self.state {
                Some(state) => (state.join("ipython"), state.join("matplotlib")),
                None => (
                    self.temp.join("ipython-mcp-ipython"),
                    self.temp.join("ipython-mcp-matplotlib"),
                ),
            };
            env.push(("IPYTHONDIR", ipython.into()));
            env.push(("MPLCONFIGDIR", matplotlib.into()));
            if let Some(temp) = self.own_temp() {
                env.push(("TMPDIR", temp.into()));
            }
        }
        if let Network::Proxy { port, .. } = &self.network {
            let url = std::ffi::OsString::from(format!("http://127.0.0.1:{port}"));
            for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
                env.push((name, url.clone()));
            }
            for name in ["NO_PROXY", "no_proxy"] {
                env.push((name, std::ffi::OsString::new()));
            }
        }
        env
    }

    /// Variables the kernel must not inherit from the server ([`AGENT_VARIABLES`]); none
    /// under `Off`.
    pub fn kernel_env_removed(&self) -> &'static [&'static str] {
        match self.mode {
            Mode::Off => &[],
            Mode::WorkspaceWrite | Mode::ReadOnly => AGENT_VARIABLES,
        }
    }

    /// In namespaces, the kernel's own `/tmp` on the host, kept by the server for the policy's
    /// principal, when it has one (a principal's kernels, and read-only ones); else it shares
    /// the host's.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn namespaced_temp(&self) -> Option<PathBuf> {
        let own = self.private_temp || self.mode == Mode::ReadOnly;
        self.state
            .as_ref()
            .filter(|_| own)
            .map(|state| state.join("tmp"))
    }

    /// A read-only kernel's own temp directory, in the policy's state directory.
    fn own_temp(&self) -> Option<PathBuf> {
        match (self.mode, &self.state) {
            (Mode::ReadOnly, Some(state)) => Some(state.join("tmp")),
            _ => None,
        }
    }

    /// Makes the kernel's own directories under HOME that IPython insists on making itself
    /// (a HOME holding a denied path is split: nothing new can be made directly in it).
    #[cfg_attr(not(any(target_os = "linux", target_os = "macos")), allow(dead_code))]
    pub(crate) fn make_kernel_dirs(&self) {
        #[cfg(target_os = "linux")]
        if let Some(temp) = self.namespaced_temp() {
            use std::os::unix::fs::DirBuilderExt as _;
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(temp);
        }
        if let Some(temp) = self.own_temp() {
            use std::os::unix::fs::DirBuilderExt as _;
            // The state directory, and its temp directory in it.
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(temp);
        }
        if self.mode != Mode::WorkspaceWrite {
            return;
        }
        if let Some(home) = self.home.as_deref().filter(|home| home.is_dir()) {
            for dir in KERNEL_DIRS_UNDER_HOME {
                let _ = std::fs::create_dir_all(home.join(dir));
            }
        }
    }
}

/// What a kernel writes under HOME: IPython's profile, caches (pip's, matplotlib's),
/// matplotlib's configuration, Jupyter's data.
const KERNEL_DIRS_UNDER_HOME: [&str; 4] = [
    ".ipython",
    ".cache",
    ".config/matplotlib",
    ".local/share/jupyter",
];

/// The virtual environment an interpreter belongs to (`<venv>/bin/python`, beside
/// `<venv>/pyvenv.cfg`); `None` for a system interpreter, whose prefix stays read-only.
fn venv_of(python: &Path) -> Option<PathBuf> {
    let prefix = python.parent()?.parent()?;
    prefix
        .join("pyvenv.cfg")
        .is_file()
        .then(|| prefix.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(mode: Mode) -> Policy {
        Policy {
            mode,
            network: Network::On,
            explicit: true,
            home: Some("/home/u".into()),
            read_deny: vec!["/etc/ipython-mcp/token".into()],
            write: vec!["/data/out".into()],
            workspace: Some("/work".into()),
            temp: "/tmp".into(),
            max_processes: None,
            namespaces: true,
            private_temp: false,
            private: None,
            state: None,
        }
    }

    #[test]
    fn modes_parse_by_name() {
        for name in Mode::NAMES {
            assert_eq!(Mode::parse(name).map(Mode::name), Some(name));
        }
        assert_eq!(Mode::parse(" off "), Some(Mode::Off));
        assert_eq!(Mode::parse("strict"), None);
    }

    #[test]
    fn the_deny_list_is_the_secrets_under_home_and_the_listed_paths() {
        let denied = policy(Mode::ReadOnly).denied();
        for path in [
            "/home/u/.ssh",
            "/home/u/.config/gcloud",
            "/home/u/.config/git/credentials",
            "/home/u/.claude/.credentials.json",
            "/home/u/.cargo/credentials.toml",
            "/home/u/.bash_history",
            "/home/u/.local/share/keyrings",
            "/home/u/.mozilla",
            "/etc/ipython-mcp/token",
        ] {
            assert!(denied.contains(&PathBuf::from(path)), "{path}");
        }
        // Nothing inside a directory kernels write: it would be split.
        let writable = policy(Mode::WorkspaceWrite).writable(&KernelDirs::default());
        for entry in DEFAULT_DENIED_UNDER_HOME {
            let path = Path::new("/home/u").join(entry);
            assert!(!writable.iter().any(|dir| path.starts_with(dir)), "{entry}");
        }
    }

    #[test]
    fn a_sandboxed_kernel_gets_no_agent_variables() {
        for mode in [Mode::WorkspaceWrite, Mode::ReadOnly] {
            let removed = policy(mode).kernel_env_removed();
            for name in [
                "SSH_AUTH_SOCK",
                "GPG_AGENT_INFO",
                "DBUS_SESSION_BUS_ADDRESS",
            ] {
                assert!(removed.contains(&name), "{mode}: {name}");
            }
        }
        assert!(policy(Mode::Off).kernel_env_removed().is_empty());
    }

    #[test]
    fn a_read_only_kernel_with_a_state_directory_writes_only_there() {
        let state = Policy {
            private: Some("/run/p".into()),
            state: Some("/run/p/principal-a".into()),
            ..policy(Mode::ReadOnly)
        };
        assert!(state.writable(&KernelDirs::default()).is_empty());
        assert!(state
            .kernel_env()
            .contains(&("TMPDIR", "/run/p/principal-a/tmp".into())));
        assert_eq!(
            state.own(&KernelDirs::default()),
            vec![PathBuf::from("/run/p/principal-a")]
        );
        // Under workspace-write the temp directory is the shared one.
        let shared = Policy {
            mode: Mode::WorkspaceWrite,
            ..state.clone()
        };
        assert!(shared
            .writable(&KernelDirs::default())
            .contains(&PathBuf::from("/tmp")));
        assert!(!shared
            .kernel_env()
            .iter()
            .any(|(name, _)| *name == "TMPDIR"));
    }

    #[test]
    fn read_only_writes_only_the_temp_directory() {
        let dirs = KernelDirs {
            working_dir: Some("/work/sub".into()),
            python: None,
            own: Vec::new(),
        };
        assert_eq!(
            policy(Mode::ReadOnly).writable(&dirs),
            vec![PathBuf::from("/tmp")]
        );
        // Its IPython and matplotlib directories: the policy's own, given back in the denied
        // private directory (the temp directory's without one).
        let state = Policy {
            private: Some("/run/p".into()),
            state: Some("/run/p/kernels".into()),
            ..policy(Mode::ReadOnly)
        };
        let env = state.kernel_env();
        assert!(env.contains(&("IPYTHONDIR", "/run/p/kernels/ipython".into())));
        assert!(env.contains(&("MPLCONFIGDIR", "/run/p/kernels/matplotlib".into())));
        assert_eq!(
            state.own(&KernelDirs {
                own: vec!["/run/p/k1".into()],
                ..KernelDirs::default()
            }),
            vec![PathBuf::from("/run/p/k1"), PathBuf::from("/run/p/kernels")]
        );
        assert!(state.denied().contains(&PathBuf::from("/run/p")));
        assert!(policy(Mode::ReadOnly)
            .kernel_env()
            .contains(&("IPYTHONDIR", "/tmp/ipython-mcp-ipython".into())));
        let writable = policy(Mode::WorkspaceWrite).writable(&dirs);
        for dir in ["/tmp", "/work", "/home/u/.ipython", "/data/out"] {
            assert!(
                writable.contains(&PathBuf::from(dir)),
                "{dir}: {writable:?}"
            );
        }
        // Where a kernel starts gives it no writes of its own (another principal's directory).
        let elsewhere = KernelDirs {
            working_dir: Some("/elsewhere".into()),
            python: None,
            own: Vec::new(),
        };
        assert!(!policy(Mode::WorkspaceWrite)
            .writable(&elsewhere)
            .contains(&PathBuf::from("/elsewhere")));
    }

    #[test]
    fn a_virtual_environment_is_writable_and_a_system_python_is_not() {
        let venv = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(venv.path().join("bin")).expect("bin");
        std::fs::write(venv.path().join("pyvenv.cfg"), "home = /usr/bin\n").expect("cfg");
        assert_eq!(
            venv_of(&venv.path().join("bin/python")),
            Some(venv.path().to_owned())
        );
        assert_eq!(venv_of(Path::new("/usr/bin/python3")), None);
    }
}
