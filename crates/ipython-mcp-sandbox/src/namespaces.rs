//! Linux, first layer: each kernel in user, mount, PID and IPC namespaces of its own, and a
//! network namespace unless the network is `on`.
//!
//! The server cannot make a PID namespace for a child it starts through `fork`/`exec` (the
//! namespace is the next child's, not the caller's), so a kernel runs under a launcher: the
//! server's own executable in its `__sandbox` mode ([`launch`], `launcher.rs`). The server
//! describes the kernel's file system as a [`Plan`] of mounts, made here from the policy; the
//! launcher enters the namespaces, makes the mounts and starts the kernel as the second process
//! of its PID namespace, with Landlock and seccomp applied on top (the second layer, whose
//! Landlock ruleset the server built and the launcher inherits).
//!
//! Denied paths are covered (an empty read-only tmpfs over a directory, an unreadable empty
//! file over a file) instead of being left out by splitting their parents, so nothing around them changes;
//! `/tmp` is the kernel's own (a directory of the server's for its principal) and `/dev/shm` an
//! empty tmpfs; `/proc` shows the kernel's own processes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::policy::WRITE_PROTECTED;
#[cfg(test)]
use crate::Mode;
use crate::{KernelDirs, Network, Policy};

/// The argument that puts the server's executable in its launcher mode.
pub const LAUNCHER_ARGUMENT: &str = "__sandbox";

/// The environment variable the launcher reads its plan from (and removes).
pub(crate) const PLAN_VARIABLE: &str = "IPYTHON_MCP_SANDBOX_PLAN";

/// The executable that runs [`launch`] when given [`LAUNCHER_ARGUMENT`]: set once by the
/// server's `main`. A library user that never sets it (the project's in-process tests) gets the
/// Landlock-only design, and the report says why.
static LAUNCHER: OnceLock<PathBuf> = OnceLock::new();

/// Makes kernels start under `executable`'s launcher mode (the server's own binary, whose `main`
/// hands [`LAUNCHER_ARGUMENT`] to [`launch`]).
pub fn use_launcher(executable: PathBuf) {
    let _ = LAUNCHER.set(executable);
}

/// What the launcher does, in order: the mounts, the network, and the kernel's second layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Plan {
    /// Mounts made in this order (a parent before what lies below it).
    pub mounts: Vec<Mount>,
    pub network: NetworkPlan,
    /// The Landlock ruleset (built by the server, inherited by number): the launcher adds the
    /// rules for what only exists inside (`/tmp`, `/dev/shm`, `/proc`) and restricts the
    /// kernel with it. `None`: this kernel has no Landlock.
    pub landlock: Option<i32>,
    /// `/tmp` is the kernel's own (bound from the server's directory for its principal).
    pub private_temp: bool,
    /// Seccomp: refuse the sockets a kernel without network never needs.
    pub offline_sockets: bool,
    /// Only check that all this can be done here: end before running the command.
    pub probe: bool,
}

/// One mount of the plan. Sources are captured (cloned) before any mount is made, so a mount
/// over a parent never hides where a later one comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Mount {
    /// The whole tree read-only: first, before anything is put over it.
    ReadOnlyRoot,
    /// `source` at `target`, writable or read-only (a directory or a file).
    Bind {
        source: PathBuf,
        target: PathBuf,
        writable: bool,
    },
    /// A denied directory: an empty tmpfs, read-only once what goes inside it is in place.
    CoverDir { target: PathBuf },
    /// A denied file: an empty file no one may read or write over it.
    CoverFile { target: PathBuf },
    /// An empty, writable tmpfs (`/dev/shm`, or `/tmp` when the server keeps no directory).
    Tmpfs { target: PathBuf },
    /// The PID namespace's own `/proc`.
    Proc,
}

impl Mount {
    fn target(&self) -> &Path {
        match self {
            Mount::ReadOnlyRoot => Path::new("/"),
            Mount::Proc => Path::new("/proc"),
            Mount::Bind { target, .. }
            | Mount::CoverDir { target }
            | Mount::CoverFile { target }
            | Mount::Tmpfs { target } => target,
        }
    }
}

/// The kernel's network inside its namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum NetworkPlan {
    /// The host's network (no network namespace).
    Host,
    /// Loopback alone.
    Loopback,
    /// Loopback, and `127.0.0.1:port` forwarded to the proxy's Unix socket.
    Proxy { port: u16, socket: PathBuf },
}

/// The plan for a kernel with `dirs` under `policy`, given the paths `resolved` as the server
/// sees them; the limits it leaves.
pub(crate) fn plan(
    policy: &Policy,
    dirs: &KernelDirs,
    resolve: impl Fn(&Path) -> PathBuf,
) -> (Plan, Vec<String>) {
    let mut limits = Vec::new();
    let denied: Vec<PathBuf> = policy.denied().iter().map(|path| resolve(path)).collect();
    let is_denied = |path: &Path| denied.iter().any(|denied| path.starts_with(denied));
    let mut mounts = vec![Mount::ReadOnlyRoot];
    let mut later = Vec::new();
    let own_temp = policy.namespaced_temp();
    if let Some(source) = &own_temp {
        later.push(Mount::Bind {
            source: source.clone(),
            target: "/tmp".into(),
            writable: true,
        });
    }
    if Path::new("/dev/shm").is_dir() {
        later.push(Mount::Tmpfs {
            target: "/dev/shm".into(),
        });
    }
    let host_temp = resolve(&policy.temp);
    for dir in policy.writable(dirs) {
        // The kernel's own `/tmp` stands for the host's temp directory.
        if own_temp.is_some() && (dir == policy.temp || resolve(&dir) == host_temp) {
            continue;
        }
        let dir = resolve(&dir);
        if !dir.exists() {
            continue;
        }
        if is_denied(&dir) {
            limits.push(format!(
                "{} is not writable: it is a denied path or inside one",
                dir.display()
            ));
            continue;
        }
        let mut kept_read_only = Vec::new();
        for name in WRITE_PROTECTED {
            let entry = dir.join(name);
            // A link is left as it is: what it leads to is protected where that lies.
            let plain = entry
                .symlink_metadata()
                .is_ok_and(|metadata| !metadata.file_type().is_symlink());
            if plain && !policy.write.iter().any(|listed| resolve(listed) == entry) {
                kept_read_only.push(*name);
                later.push(Mount::Bind {
                    source: entry.clone(),
                    target: entry,
                    writable: false,
                });
            }
        }
        if !kept_read_only.is_empty() {
            kept_read_only.sort_unstable();
            limits.push(format!(
                "{} in {} are read-only: what they hold runs outside the sandbox",
                kept_read_only.join(", "),
                dir.display()
            ));
        }
        later.push(Mount::Bind {
            source: dir.clone(),
            target: dir,
            writable: true,
        });
    }
    for path in &denied {
        match path.symlink_metadata() {
            Ok(metadata) if metadata.is_dir() => later.push(Mount::CoverDir {
                target: path.clone(),
            }),
            Ok(_) => later.push(Mount::CoverFile {
                target: path.clone(),
            }),
            // Not there when the kernel starts: the second layer keeps it from the kernel
            // should it appear, except inside a writable directory, which is granted whole.
            Err(_) => {}
        }
    }
    for dir in policy.own(dirs) {
        let dir = resolve(&dir);
        later.push(Mount::Bind {
            source: dir.clone(),
            target: dir,
            writable: true,
        });
    }
    later.push(Mount::Proc);
    // A parent before what lies below it; for one target, in the order listed above (a
    // protected entry's own bind before the writable directory's would be hidden by it, so
    // those are listed first and the directory, shallower, goes first anyway).
    later.sort_by_key(|mount| mount.target().components().count());
    mounts.extend(later);
    let network = match &policy.network {
        Network::On => NetworkPlan::Host,
        Network::Off => NetworkPlan::Loopback,
        Network::Proxy {
            port,
            socket: Some(socket),
            ..
        } => NetworkPlan::Proxy {
            port: *port,
            socket: socket.clone(),
        },
        // No socket to reach the proxy through: nothing leaves.
        Network::Proxy { socket: None, .. } => {
            limits.push("the network proxy has no socket: the kernel has no network".to_owned());
            NetworkPlan::Loopback
        }
    };
    let plan = Plan {
        mounts,
        private_temp: own_temp.is_some(),
        offline_sockets: network != NetworkPlan::Host,
        network,
        landlock: None,
        probe: false,
    };
    (plan, limits)
}

impl Plan {
    /// The plan in the form the launcher reads.
    pub(crate) fn encode(&self) -> OsString {
        serde_json::to_string(self)
            .expect("a plan serializes")
            .into()
    }

    pub(crate) fn decode(text: &str) -> Result<Plan, String> {
        serde_json::from_str(text)
            .map_err(|error| format!("the sandbox plan is unreadable: {error}"))
    }
}

/// Whether kernels can run in namespaces here, and through which launcher: checked once, by
/// running the launcher's own probe (the same calls a kernel's start makes, ending before the
/// command runs).
pub(crate) fn available() -> Result<PathBuf, String> {
    static CHECKED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let launcher = LAUNCHER.get().ok_or_else(|| {
                "this program starts no sandbox launcher (a library use)".to_owned()
            })?;
            probe(launcher).map(|()| launcher.clone())
        })
        .clone()
}

fn probe(launcher: &Path) -> Result<(), String> {
    let plan = Plan {
        mounts: vec![
            Mount::ReadOnlyRoot,
            Mount::Tmpfs {
                target: "/tmp".into(),
            },
            Mount::Proc,
        ],
        network: NetworkPlan::Loopback,
        landlock: None,
        private_temp: false,
        offline_sockets: true,
        probe: true,
    };
    let output = std::process::Command::new(launcher)
        .arg(LAUNCHER_ARGUMENT)
        .arg("true")
        .env(PLAN_VARIABLE, plan.encode())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .output()
        .map_err(|error| format!("the sandbox launcher did not start: {error}"))?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    let said = said.trim();
    Err(if said.is_empty() {
        format!("the namespaces' probe ended with {}", output.status)
    } else {
        said.strip_prefix("ipython-mcp sandbox: ")
            .unwrap_or(said)
            .to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(home: &Path, workspace: &Path, state: &Path) -> Policy {
        Policy {
            mode: Mode::WorkspaceWrite,
            network: Network::Off,
            explicit: true,
            home: Some(home.to_owned()),
            read_deny: vec![workspace.join("upstreams.json")],
            write: Vec::new(),
            workspace: Some(workspace.to_owned()),
            temp: "/tmp".into(),
            max_processes: None,
            namespaces: true,
            private_temp: true,
            private: Some(state.parent().expect("parent").to_owned()),
            state: Some(state.to_owned()),
        }
    }

    fn position(plan: &Plan, wanted: impl Fn(&Mount) -> bool) -> usize {
        plan.mounts
            .iter()
            .position(wanted)
            .unwrap_or_else(|| panic!("not in {:#?}", plan.mounts))
    }

    #[test]
    fn denied_paths_are_covered_and_the_kernels_own_directories_go_back_on_top() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path().canonicalize().expect("canonical");
        let (home, workspace, private) =
            (root.join("home"), root.join("work"), root.join("private"));
        for dir in [
            home.join(".ssh"),
            workspace.join(".git/hooks"),
            private.join("kernels"),
        ] {
            std::fs::create_dir_all(dir).expect("mkdir");
        }
        std::fs::write(workspace.join("upstreams.json"), "{}").expect("write");
        std::fs::write(home.join(".netrc"), "x").expect("write");
        let run = private.join("run-1");
        std::fs::create_dir(&run).expect("mkdir");
        let policy = policy(&home, &workspace, &private.join("kernels"));
        let dirs = KernelDirs {
            working_dir: None,
            python: None,
            own: vec![run.clone()],
        };
        let (plan, limits) = super::plan(&policy, &dirs, |path| path.to_owned());
        assert_eq!(
            limits,
            [format!(
                ".git in {} are read-only: what they hold runs outside the sandbox",
                workspace.display()
            )]
        );
        assert_eq!(plan.mounts[0], Mount::ReadOnlyRoot);
        let cover_ssh = position(&plan, |mount| {
            *mount
                == Mount::CoverDir {
                    target: home.join(".ssh"),
                }
        });
        let cover_file = position(&plan, |mount| {
            *mount
                == Mount::CoverFile {
                    target: workspace.join("upstreams.json"),
                }
        });
        let workspace_bind = position(
            &plan,
            |mount| matches!(mount, Mount::Bind { target, writable: true, .. } if *target == workspace),
        );
        let hooks = position(
            &plan,
            |mount| matches!(mount, Mount::Bind { target, writable: false, .. } if *target == workspace.join(".git")),
        );
        let cover_private = position(&plan, |mount| {
            *mount
                == Mount::CoverDir {
                    target: private.clone(),
                }
        });
        let run_bind = position(
            &plan,
            |mount| matches!(mount, Mount::Bind { target, writable: true, .. } if *target == run),
        );
        assert!(cover_ssh > 0);
        assert!(workspace_bind < cover_file, "the cover goes over the bind");
        assert!(
            workspace_bind < hooks,
            "the protected entry goes over the bind"
        );
        assert!(
            cover_private < run_bind,
            "its own run directory goes over the cover"
        );
        assert!(plan.mounts.contains(&Mount::CoverFile {
            target: home.join(".netrc")
        }));
        assert!(plan.mounts.contains(&Mount::Bind {
            source: private.join("kernels/tmp"),
            target: "/tmp".into(),
            writable: true
        }));
        let host_temp = Mount::Bind {
            source: "/tmp".into(),
            target: "/tmp".into(),
            writable: true,
        };
        assert!(
            !plan.mounts.contains(&host_temp),
            "a principal's kernel has its own"
        );
        // A kernel of the server's own user shares the host's.
        let shared = Policy {
            private_temp: false,
            ..policy.clone()
        };
        let (shared, _) = super::plan(&shared, &dirs, |path| path.to_owned());
        assert!(shared.mounts.contains(&host_temp), "{:#?}", shared.mounts);
        assert!(!shared.private_temp);
        assert_eq!(plan.network, NetworkPlan::Loopback);
        assert!(plan.offline_sockets);
    }

    #[test]
    fn a_plan_reads_back_as_it_was_written() {
        let plan = Plan {
            mounts: vec![
                Mount::ReadOnlyRoot,
                Mount::CoverDir {
                    target: "/home/u/.ssh".into(),
                },
                Mount::Proc,
            ],
            network: NetworkPlan::Proxy {
                port: 8080,
                socket: "/run/p/proxy.sock".into(),
            },
            landlock: Some(7),
            private_temp: true,
            offline_sockets: true,
            probe: false,
        };
        let text = plan.encode();
        assert_eq!(Plan::decode(text.to_str().expect("utf-8")), Ok(plan));
        assert!(Plan::decode("{\"mounts\": 1}").is_err());
    }
}
