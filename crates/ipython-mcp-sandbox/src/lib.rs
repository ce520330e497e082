//! The OS sandbox of a local kernel and of every process it starts.
//!
//! A [`Policy`] says what a kernel may read and write; [`Policy::prepare`] turns it, in the
//! server, into what the child applies to itself between `fork` and `exec`
//! ([`Prepared::apply_in_child`]), and a [`Report`] of what is enforced and why not. On Linux:
//!
//! - Landlock file rules. Landlock only allows, so a deny list is built by allowing every
//!   other entry: each directory on the way to a denied path is "split", its entries allowed
//!   one by one. An entry made later directly in a split directory is therefore out of reach,
//!   and nothing new can be made directly in a split writable directory (its entries can).
//!   `/proc` is split too: its own entry (added by the child, the only one that knows its
//!   pid) and the system's files, no other process's.
//! - A seccomp filter against what a kernel never needs (`ptrace`, `mount`, `bpf`, keyrings,
//!   module loading, namespaces), under `no_new_privs`; Landlock's signal scope where the
//!   kernel has it (ABI 6), so kernel code cannot signal the server.
//! - The server's private directory (every local kernel's run directory, with its signing
//!   key, and output spool) is denied; each kernel is given back its own entries
//!   ([`KernelDirs::own`]), so no kernel can read another's key and drive it.
//! - Without network: Landlock lets the kernel bind and connect nowhere over TCP (ABI 4; its
//!   channels are Unix sockets); the seccomp filter refuses every other IP socket (datagrams,
//!   raw, SCTP, MPTCP), packet sockets, TCP Fast Open (a connect inside `sendto`) and
//!   `io_uring` (which would make sockets past the filter).
//! - A `pids` cgroup of its own against fork bombs (`tasks.rs`; `RLIMIT_NPROC` would not bind
//!   root), where one can be made; otherwise the report says so.
//!
//! On macOS the same policy is a Seatbelt profile the kernel runs under
//! (`/usr/bin/sandbox-exec -p`, [`Prepared::command_prefix`]): files and network, not yet the
//! process-level rules. Elsewhere nothing is enforced and the report says so.

#[cfg(target_os = "linux")]
mod launcher;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod namespaces;
mod policy;
// Built everywhere so its profile text is tested everywhere; used on macOS.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
mod seatbelt;
#[cfg(target_os = "linux")]
mod tasks;

#[cfg(target_os = "linux")]
pub use launcher::launch;
#[cfg(target_os = "linux")]
pub use namespaces::{use_launcher, LAUNCHER_ARGUMENT};
pub use policy::{KernelDirs, Mode, Network, Policy, DEFAULT_DENIED_UNDER_HOME};

/// What a kernel's sandbox enforces, as `runtime_status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub mode: Mode,
    pub network: Network,
    /// True when the mode's rules are in force.
    pub enforced: bool,
    /// What enforces them (`landlock v7`, `seccomp`, `no_new_privs`, …).
    pub mechanisms: Vec<String>,
    /// Why nothing is enforced, when it is not.
    pub why_not: Option<String>,
    /// What the rules cannot do here (a denied path inside a writable directory the rules
    /// had to split, …).
    pub limits: Vec<String>,
}

impl Report {
    fn off() -> Report {
        Report {
            mode: Mode::Off,
            network: Network::On,
            enforced: false,
            mechanisms: Vec::new(),
            why_not: None,
            limits: Vec::new(),
        }
    }

    fn unenforced(mode: Mode, why: String) -> Report {
        Report {
            mode,
            network: Network::On,
            enforced: false,
            mechanisms: Vec::new(),
            why_not: Some(why),
            limits: Vec::new(),
        }
    }
}

/// Why a sandbox cannot be prepared.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The mode was asked for and this system cannot enforce it (the sandbox fails closed).
    #[error("the {mode} sandbox cannot be enforced here: {why}")]
    Unenforceable { mode: &'static str, why: String },
    /// Building the rules failed.
    #[error("the sandbox's rules could not be built: {0}")]
    Rules(String),
}

/// A policy made ready for one kernel: the child applies it to itself. Keep it while the
/// kernel runs: dropping it removes the kernel's pids group.
pub struct Prepared {
    #[cfg(target_os = "linux")]
    linux: Option<linux::Rules>,
    /// A program (and its arguments) the kernel's command runs under.
    prefix: Option<Vec<String>>,
    /// Variables the kernel's command is given (the namespaces' plan, the kernel's `TMPDIR`).
    env: Vec<(&'static str, std::ffi::OsString)>,
    report: Report,
}

impl Prepared {
    /// What is enforced.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// Adds what the rules cannot do for this kernel, found by the launcher.
    pub fn add_limit(&mut self, limit: String) {
        self.report.limits.push(limit);
    }

    /// The program, with its arguments, the kernel's command must run under (macOS:
    /// `sandbox-exec -p PROFILE`); `None`: the command runs as it is.
    pub fn command_prefix(&self) -> Option<&[String]> {
        self.prefix.as_deref()
    }

    /// Whether the kernel runs in namespaces of its own: no other kernel sees its run
    /// directory at all.
    pub fn namespaced(&self) -> bool {
        self.env.iter().any(|(name, _)| {
            #[cfg(target_os = "linux")]
            return *name == namespaces::PLAN_VARIABLE;
            #[cfg(not(target_os = "linux"))]
            return {
                let _ = name;
                false
            };
        })
    }

    /// Variables the kernel's command must be given, over the policy's own
    /// ([`Policy::kernel_env`]).
    pub fn command_env(&self) -> &[(&'static str, std::ffi::OsString)] {
        &self.env
    }

    /// Applies the sandbox to the calling process: call it in the forked child, before exec.
    ///
    /// # Safety
    ///
    /// Only async-signal-safe calls are made (open, close, prctl, setrlimit and the Landlock
    /// and seccomp system calls on memory prepared before the fork), so it may run in a child
    /// forked from a multithreaded process.
    pub unsafe fn apply_in_child(&self) -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        if let Some(rules) = &self.linux {
            // SAFETY: the caller's contract, passed on.
            return unsafe { rules.apply() };
        }
        Ok(())
    }
}

impl Prepared {
    /// Makes `command`'s child apply this sandbox to itself before it execs, after the
    /// `pre_exec` steps given before this one; the child keeps its own reference, so the
    /// caller keeps `self` only for as long as the sandbox's cgroup must live.
    pub fn confine(self: &std::sync::Arc<Self>, command: &mut std::process::Command) {
        use std::os::unix::process::CommandExt as _;
        let prepared = std::sync::Arc::clone(self);
        // SAFETY: `apply_in_child` makes only async-signal-safe calls on memory prepared
        // before the fork (its contract).
        unsafe {
            command.pre_exec(move || prepared.apply_in_child());
        }
    }
}

impl Policy {
    /// Prepares the policy for a kernel with `dirs` (reads the file system: call it from a
    /// blocking thread). A mode set explicitly that this system cannot enforce is an error; the
    /// default mode then runs unsandboxed, and the report says why.
    pub fn prepare(&self, dirs: &KernelDirs) -> Result<Prepared, Error> {
        if self.mode == Mode::Off {
            return Ok(Prepared::unsandboxed(Report::off()));
        }
        self.settle(self.prepare_here(dirs))
    }

    /// What an attempt to prepare the sandbox comes to: an explicit mode (and a network turned
    /// off, which is always asked for) fails closed; the default runs unsandboxed, saying why.
    fn settle(&self, attempt: Result<Prepared, Error>) -> Result<Prepared, Error> {
        match attempt {
            Ok(prepared) => Ok(prepared),
            Err(Error::Unenforceable { why, .. })
                if !self.explicit && self.network == Network::On =>
            {
                Ok(Prepared::unsandboxed(Report::unenforced(self.mode, why)))
            }
            Err(error) => Err(error),
        }
    }

    /// Linux: namespaces with Landlock and seccomp inside them where this system lets a
    /// process make user namespaces; else Landlock and seccomp alone, and the report says why.
    #[cfg(target_os = "linux")]
    fn prepare_here(&self, dirs: &KernelDirs) -> Result<Prepared, Error> {
        self.make_kernel_dirs();
        let launcher = if self.namespaces {
            namespaces::available()
        } else {
            Err("turned off in the configuration (sandbox namespaces: off)".to_owned())
        };
        let (rules, mut report) = linux::prepare(self, dirs, launcher.is_ok())?;
        let launcher = match launcher {
            Ok(launcher) => launcher,
            Err(why) => {
                report.limits.push(format!(
                    "Landlock and seccomp alone, without namespaces: {why}"
                ));
                return Ok(Prepared {
                    linux: Some(rules),
                    prefix: None,
                    env: Vec::new(),
                    report,
                });
            }
        };
        let (mut plan, limits) = namespaces::plan(self, dirs, linux::resolved);
        plan.landlock = Some(rules.ruleset_fd());
        report.limits.extend(limits);
        let network = if plan.network == namespaces::NetworkPlan::Host {
            ""
        } else {
            ", network"
        };
        report
            .mechanisms
            .insert(0, format!("namespaces (user, mount, pid, ipc{network})"));
        Ok(Prepared {
            linux: Some(rules),
            prefix: Some(vec![
                launcher.to_string_lossy().into_owned(),
                LAUNCHER_ARGUMENT.to_owned(),
            ]),
            env: if plan.private_temp {
                vec![
                    (namespaces::PLAN_VARIABLE, plan.encode()),
                    ("TMPDIR", "/tmp".into()),
                ]
            } else {
                vec![(namespaces::PLAN_VARIABLE, plan.encode())]
            },
            report,
        })
    }

    #[cfg(not(target_os = "linux"))]
    fn prepare_here(&self, dirs: &KernelDirs) -> Result<Prepared, Error> {
        if cfg!(target_os = "macos") && std::path::Path::new(seatbelt::SANDBOX_EXEC).exists() {
            return Ok(self.seatbelt(dirs));
        }
        Err(Error::Unenforceable {
            mode: self.mode.name(),
            why: format!("no sandbox is built for {} yet", std::env::consts::OS),
        })
    }

    /// The policy as a Seatbelt profile the kernel runs under.
    #[cfg_attr(target_os = "linux", allow(dead_code))]
    fn seatbelt(&self, dirs: &KernelDirs) -> Prepared {
        self.make_kernel_dirs();
        let profile = seatbelt::profile(self, dirs);
        Prepared {
            #[cfg(target_os = "linux")]
            linux: None,
            prefix: Some(vec![
                seatbelt::SANDBOX_EXEC.to_owned(),
                "-p".to_owned(),
                profile,
            ]),
            env: Vec::new(),
            report: Report {
                mode: self.mode,
                network: self.network.clone(),
                enforced: true,
                mechanisms: vec!["seatbelt (sandbox-exec)".to_owned()],
                why_not: None,
                limits: vec![
                    "on macOS only files and the network are confined: other processes, signals and the process count are not".to_owned(),
                ],
            },
        }
    }
}

impl Prepared {
    fn unsandboxed(report: Report) -> Prepared {
        Prepared {
            #[cfg(target_os = "linux")]
            linux: None,
            prefix: None,
            env: Vec::new(),
            report,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(explicit: bool, network: Network) -> Policy {
        Policy {
            mode: Mode::WorkspaceWrite,
            network,
            explicit,
            home: None,
            read_deny: Vec::new(),
            write: Vec::new(),
            workspace: None,
            temp: std::env::temp_dir(),
            max_processes: None,
            namespaces: true,
            private_temp: false,
            private: None,
            state: None,
        }
    }

    fn unenforceable() -> Result<Prepared, Error> {
        Err(Error::Unenforceable {
            mode: "workspace-write",
            why: "no Landlock here".to_owned(),
        })
    }

    #[test]
    fn an_explicit_mode_fails_closed_and_the_default_says_why_it_is_not_enforced() {
        let explicit = policy(true, Network::On).settle(unenforceable());
        assert!(matches!(explicit, Err(Error::Unenforceable { .. })));
        let offline = policy(false, Network::Off).settle(unenforceable());
        assert!(matches!(offline, Err(Error::Unenforceable { .. })));
        let default = policy(false, Network::On)
            .settle(unenforceable())
            .expect("the default runs");
        assert!(!default.report().enforced);
        assert_eq!(
            default.report().why_not.as_deref(),
            Some("no Landlock here")
        );
        assert_eq!(default.report().mode, Mode::WorkspaceWrite);
    }

    #[test]
    fn the_seatbelt_form_runs_the_kernel_under_sandbox_exec() {
        let prepared = policy(true, Network::Off).seatbelt(&KernelDirs::default());
        let prefix = prepared.command_prefix().expect("a prefix");
        assert_eq!(prefix[..2], ["/usr/bin/sandbox-exec", "-p"]);
        assert!(prefix[2].starts_with("(version 1)"));
        assert!(prepared.report().enforced);
    }

    #[test]
    fn off_prepares_nothing() {
        let mut off = policy(true, Network::On);
        off.mode = Mode::Off;
        let prepared = off.prepare(&KernelDirs::default()).expect("off");
        assert_eq!(prepared.report().mode, Mode::Off);
        assert!(!prepared.report().enforced);
        // SAFETY: nothing is applied for `off`.
        unsafe { prepared.apply_in_child() }.expect("nothing to apply");
    }
}
