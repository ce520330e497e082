//! Linux: Landlock rules built in the server from the policy (see the crate's documentation
//! for how a deny list becomes allow rules), a seccomp program compiled in the server, and
//! the few raw system calls the forked child makes to apply them.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

use crate::{Error, KernelDirs, Mode, Network, Policy, Report};

/// The Landlock ABI the rules are written for (file rights up to `IOCTL_DEV`); a newer
/// kernel enforces them as they are, an older one the rights it knows.
const RULES_ABI: ABI = ABI::V5;

/// Devices every process writes (and a terminal's ioctls).
const WRITABLE_DEVICES: [&str; 9] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
];

/// System calls a kernel never needs, refused with `EPERM`: tracing and reading other
/// processes, mounting, BPF, kernel keyrings, modules, namespaces, handle-based opens (an
/// old container escape), `perf_event_open`, `userfaultfd`, rebooting and swap.
const DENIED_CALLS: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_bpf,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_keyctl,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_open_by_handle_at,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    // Its operations (sockets among them) run past seccomp filters.
    libc::SYS_io_uring_setup,
];

/// `IPPROTO_MPTCP`, not in every libc.
const IPPROTO_MPTCP: u64 = 262;

/// What the child applies to itself.
pub(crate) struct Rules {
    /// The Landlock ruleset, every rule but the child's own `/proc` entry added.
    ruleset: OwnedFd,
    /// The rights on the child's `/proc/<pid>`.
    own_proc: u64,
    seccomp: BpfProgram,
    /// The kernel's pids group, joined before the rules close `/sys` (kept, and removed, with
    /// the prepared sandbox).
    tasks: Option<crate::tasks::TaskBound>,
}

/// `struct landlock_path_beneath_attr` (packed, as the kernel declares it).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const LANDLOCK_RULE_PATH_BENEATH: libc::c_long = 1;
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_long = 1;

impl Rules {
    /// # Safety
    ///
    /// See `Prepared::apply_in_child`: async-signal-safe calls only.
    pub(crate) unsafe fn apply(&self) -> std::io::Result<()> {
        // SAFETY: open, write, close, prctl and syscall on memory that outlives the calls.
        unsafe {
            let own = libc::open(c"/proc/self".as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
            if own < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let attr = PathBeneathAttr {
                allowed_access: self.own_proc,
                parent_fd: own,
            };
            let added = libc::syscall(
                libc::SYS_landlock_add_rule,
                self.ruleset.as_raw_fd(),
                LANDLOCK_RULE_PATH_BENEATH,
                &attr as *const PathBeneathAttr,
                0,
            );
            let error = std::io::Error::last_os_error();
            libc::close(own);
            if added != 0 {
                return Err(error);
            }
            if let Some(tasks) = &self.tasks {
                let fd = libc::open(tasks.procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0" is the writing process itself.
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                let error = std::io::Error::last_os_error();
                libc::close(fd);
                if written != 1 {
                    return Err(error);
                }
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::syscall(
                libc::SYS_landlock_restrict_self,
                self.ruleset.as_raw_fd(),
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        seccompiler::apply_filter(&self.seccomp).map_err(|_| std::io::Error::last_os_error())
    }
}

/// The Landlock ABI this kernel has (0: none).
fn landlock_abi() -> i64 {
    // SAFETY: a version query: no pointer is read.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    abi.max(0)
}

pub(crate) fn prepare(policy: &Policy, dirs: &KernelDirs) -> Result<(Rules, Report), Error> {
    let abi = landlock_abi();
    if abi < 1 {
        return Err(Error::Unenforceable {
            mode: policy.mode.name(),
            why: "this Linux kernel has no Landlock (5.13 or later, with landlock among its security modules)".to_owned(),
        });
    }
    let rules_error = |error: landlock::RulesetError| Error::Rules(error.to_string());
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(RULES_ABI))
        .map_err(rules_error)?;
    let mut mechanisms = vec![format!("landlock v{abi}")];
    if abi >= 6 {
        ruleset = ruleset
            .scope(Scope::Signal | Scope::AbstractUnixSocket)
            .map_err(rules_error)?;
        mechanisms.push("landlock scopes (signals, abstract sockets)".to_owned());
    }
    if policy.network != Network::On {
        if abi < 4 {
            return Err(Error::Unenforceable {
                mode: policy.mode.name(),
                why: format!("turning the network off needs Landlock ABI 4 (Linux 6.7); this kernel has {abi}"),
            });
        }
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(rules_error)?;
        mechanisms.push("landlock network (TCP)".to_owned());
    }
    let mut created = ruleset.create().map_err(rules_error)?;
    if let Network::Proxy { port, .. } = &policy.network {
        // The proxy's port on any address: the kernel's only way out.
        created = created
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .map_err(rules_error)?;
    }
    let temp = resolved(&policy.temp);
    let private = policy.private.as_deref().map(resolved);
    let mut limits = Vec::new();
    // The private directory inside the temp directory could only be denied by taking the
    // temp directory's new entries away from the kernel: left readable, and said.
    let denied: Vec<PathBuf> = policy
        .denied()
        .iter()
        .map(|path| resolved(path))
        .filter(|path| {
            let shared = Some(path) == private.as_ref() && path.starts_with(&temp);
            if shared {
                limits.push(format!(
                    "kernels can read each other's run directories: the server's private directory {} is inside the temp directory (set XDG_RUNTIME_DIR, or let /var/tmp or HOME hold it)",
                    path.display()
                ));
            }
            !shared
        })
        .collect();
    let writable: Vec<PathBuf> = policy
        .writable(dirs)
        .iter()
        .filter(|dir| dir.exists())
        .map(|dir| resolved(dir))
        .collect();
    let mut plan = Plan {
        denied: &denied,
        grants: Vec::new(),
        limits,
    };
    plan.allow(Path::new("/"), read_access(), Pass::Read);
    for dir in &writable {
        plan.allow(dir, AccessFs::from_all(RULES_ABI), Pass::Write);
    }
    if policy.mode == Mode::WorkspaceWrite || policy.mode == Mode::ReadOnly {
        for device in WRITABLE_DEVICES {
            plan.grants
                .push((PathBuf::from(device), AccessFs::from_all(RULES_ABI)));
        }
    }
    // Its own entries in the denied private directory: a rule on a directory holds below it
    // whatever its parents' rules are.
    for dir in policy.own(dirs) {
        plan.grants
            .push((resolved(&dir), AccessFs::from_all(RULES_ABI)));
    }
    let ruleset = add_grants(created, &plan.grants)?;
    let Some(ruleset) = Option::<OwnedFd>::from(ruleset) else {
        return Err(Error::Unenforceable {
            mode: policy.mode.name(),
            why: "Landlock refused the ruleset".to_owned(),
        });
    };
    let seccomp = seccomp_program(&policy.network)?;
    mechanisms.extend(["seccomp".to_owned(), "no_new_privs".to_owned()]);
    let mut limits = plan.limits;
    let tasks = match policy.max_processes.map(crate::tasks::bound) {
        Some(Ok(bound)) => {
            mechanisms.push(bound.mechanism.clone());
            Some(bound)
        }
        Some(Err(why)) => {
            limits.push(format!("no bound on the kernel's processes: {why}"));
            None
        }
        None => None,
    };
    let rules = Rules {
        ruleset,
        own_proc: (read_access() | AccessFs::WriteFile).bits(),
        seccomp,
        tasks,
    };
    let report = Report {
        mode: policy.mode,
        network: policy.network.clone(),
        enforced: true,
        mechanisms,
        why_not: None,
        limits,
    };
    Ok((rules, report))
}

fn read_access() -> BitFlags<AccessFs> {
    AccessFs::from_read(RULES_ABI)
}

fn add_grants(
    mut ruleset: RulesetCreated,
    grants: &[(PathBuf, BitFlags<AccessFs>)],
) -> Result<RulesetCreated, Error> {
    for (path, access) in grants {
        // Gone since it was listed, or unopenable (a socket's path): nothing to allow.
        let Ok(fd) = PathFd::new(path) else {
            continue;
        };
        let access = match std::fs::metadata(path) {
            Ok(metadata) if metadata.is_dir() => *access,
            Ok(_) => *access & AccessFs::from_file(RULES_ABI),
            Err(_) => continue,
        };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|error| Error::Rules(format!("{}: {error}", path.display())))?;
    }
    Ok(ruleset)
}

fn seccomp_program(network: &Network) -> Result<BpfProgram, Error> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED_CALLS
        .iter()
        .map(|call| (*call, Vec::new()))
        .collect();
    if *network != Network::On {
        rules.extend(offline_rules()?);
    }
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|_| Error::Rules(format!("no seccomp for {}", std::env::consts::ARCH)))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|error| Error::Rules(error.to_string()))?;
    filter
        .try_into()
        .map_err(|error: seccompiler::BackendError| Error::Rules(error.to_string()))
}

/// Without network: every IP socket but TCP's (whose connects and binds Landlock rules),
/// packet sockets, and TCP Fast Open's connect inside `sendto`/`sendmsg`.
fn offline_rules() -> Result<Vec<(i64, Vec<SeccompRule>)>, Error> {
    let condition = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
            .map_err(|error| Error::Rules(error.to_string()))
    };
    let rule = |conditions: Vec<SeccompCondition>| {
        SeccompRule::new(conditions).map_err(|error| Error::Rules(error.to_string()))
    };
    let mut socket = vec![rule(vec![condition(
        0,
        SeccompCmpOp::Eq,
        libc::AF_PACKET as u64,
    )?])?];
    for domain in [libc::AF_INET, libc::AF_INET6] {
        let domain = condition(0, SeccompCmpOp::Eq, domain as u64)?;
        // The type's low bits (flags such as SOCK_CLOEXEC are above them).
        for kind in [
            libc::SOCK_DGRAM,
            libc::SOCK_RAW,
            libc::SOCK_RDM,
            libc::SOCK_SEQPACKET,
            // SOCK_PACKET, the old packet socket (libc deprecates its name).
            10,
        ] {
            socket.push(rule(vec![
                domain.clone(),
                condition(1, SeccompCmpOp::MaskedEq(0xf), kind as u64)?,
            ])?);
        }
        for protocol in [libc::IPPROTO_SCTP as u64, IPPROTO_MPTCP] {
            socket.push(rule(vec![
                domain.clone(),
                condition(2, SeccompCmpOp::Eq, protocol)?,
            ])?);
        }
    }
    let fast_open = libc::MSG_FASTOPEN as u64;
    Ok(vec![
        (libc::SYS_socket, socket),
        (
            libc::SYS_sendto,
            vec![rule(vec![condition(
                3,
                SeccompCmpOp::MaskedEq(fast_open),
                fast_open,
            )?])?],
        ),
        (
            libc::SYS_sendmsg,
            vec![rule(vec![condition(
                2,
                SeccompCmpOp::MaskedEq(fast_open),
                fast_open,
            )?])?],
        ),
    ])
}

/// `path` with its symbolic links resolved as far as it exists (a denied path made later is
/// then compared where it will be).
fn resolved(path: &Path) -> PathBuf {
    let mut existing = path.to_owned();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |path, part| path.join(part));
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_owned());
                existing = parent.to_owned();
            }
            _ => return lexical(path),
        }
    }
}

fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Read,
    Write,
}

/// The rules a policy becomes: each directory holding a denied path is split into its
/// entries.
struct Plan<'a> {
    denied: &'a [PathBuf],
    grants: Vec<(PathBuf, BitFlags<AccessFs>)>,
    limits: Vec<String>,
}

impl Plan<'_> {
    fn allow(&mut self, dir: &Path, access: BitFlags<AccessFs>, pass: Pass) {
        if self.denied.iter().any(|denied| dir.starts_with(denied)) {
            self.limits.push(format!(
                "{} is not writable: it is a denied path or inside one",
                dir.display()
            ));
            return;
        }
        let proc = Path::new("/proc");
        // `/proc` is always split for reading: a process's entry only for itself (the child
        // adds its own).
        let is_proc = dir == proc && pass == Pass::Read;
        let holds_split = self
            .denied
            .iter()
            .any(|denied| denied.starts_with(dir) && denied != dir)
            || (pass == Pass::Read && proc.starts_with(dir) && dir != proc);
        if !holds_split && !is_proc {
            self.grants.push((dir.to_owned(), access));
            return;
        }
        match pass {
            // Names may be listed (not read) below a split directory.
            Pass::Read => self.grants.push((dir.to_owned(), AccessFs::ReadDir.into())),
            Pass::Write => self.limits.push(format!(
                "nothing new can be made directly in {} (it holds a denied path); its entries are writable",
                dir.display()
            )),
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if is_proc && !system_proc_entry(&name) {
                continue;
            }
            let path = dir.join(&name);
            // A link is allowed where it leads: never to a denied path or above one.
            let target = path.canonicalize().unwrap_or_else(|_| path.clone());
            if self.denied.iter().any(|denied| target.starts_with(denied)) {
                continue;
            }
            if target != path && self.denied.iter().any(|denied| denied.starts_with(&target)) {
                continue;
            }
            self.allow(&path, access, pass);
        }
    }
}

/// Whether a `/proc` entry is the system's (`cpuinfo`, `sys`, …) rather than a process's
/// (`1234`, `self`, `thread-self`).
fn system_proc_entry(name: &OsStr) -> bool {
    let name = name.to_string_lossy();
    !(name.bytes().all(|byte| byte.is_ascii_digit()) || name == "self" || name == "thread-self")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted(plan: &Plan<'_>, path: &Path) -> Option<BitFlags<AccessFs>> {
        plan.grants
            .iter()
            .find(|(granted, _)| granted == path)
            .map(|(_, access)| *access)
    }

    #[test]
    fn a_directory_holding_a_denied_path_is_split_into_its_other_entries() {
        let home = tempfile::tempdir().expect("tempdir");
        let home = home.path().canonicalize().expect("canonical");
        for dir in [".ssh", "project", ".config/gcloud", ".config/other"] {
            std::fs::create_dir_all(home.join(dir)).expect("mkdir");
        }
        std::fs::write(home.join("notes.txt"), "x").expect("write");
        std::os::unix::fs::symlink(home.join(".ssh"), home.join("keys")).expect("symlink");
        let denied = vec![home.join(".ssh"), home.join(".config/gcloud")];
        let mut plan = Plan {
            denied: &denied,
            grants: Vec::new(),
            limits: Vec::new(),
        };
        plan.allow(&home, read_access(), Pass::Read);
        assert_eq!(granted(&plan, &home), Some(AccessFs::ReadDir.into()));
        assert_eq!(granted(&plan, &home.join("project")), Some(read_access()));
        assert_eq!(granted(&plan, &home.join("notes.txt")), Some(read_access()));
        assert_eq!(
            granted(&plan, &home.join(".config/other")),
            Some(read_access())
        );
        for hidden in [".ssh", ".config/gcloud", "keys"] {
            assert_eq!(granted(&plan, &home.join(hidden)), None, "{hidden}");
        }
    }

    #[test]
    fn a_writable_directory_holding_a_denied_path_says_what_it_cannot_do() {
        let home = tempfile::tempdir().expect("tempdir");
        let home = home.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(home.join(".aws")).expect("mkdir");
        std::fs::create_dir_all(home.join("work")).expect("mkdir");
        let denied = vec![home.join(".aws")];
        let mut plan = Plan {
            denied: &denied,
            grants: Vec::new(),
            limits: Vec::new(),
        };
        plan.allow(&home, AccessFs::from_all(RULES_ABI), Pass::Write);
        assert_eq!(granted(&plan, &home), None);
        assert_eq!(
            granted(&plan, &home.join("work")),
            Some(AccessFs::from_all(RULES_ABI))
        );
        assert_eq!(plan.limits.len(), 1, "{:?}", plan.limits);
        plan.allow(
            &home.join(".aws"),
            AccessFs::from_all(RULES_ABI),
            Pass::Write,
        );
        assert_eq!(granted(&plan, &home.join(".aws")), None);
    }

    #[test]
    fn proc_keeps_the_system_entries_and_no_process_entry() {
        assert!(system_proc_entry(OsStr::new("cpuinfo")));
        assert!(system_proc_entry(OsStr::new("sys")));
        for process in ["1", "4242", "self", "thread-self"] {
            assert!(!system_proc_entry(OsStr::new(process)), "{process}");
        }
    }

    #[test]
    fn a_denied_path_not_made_yet_is_compared_where_it_will_be() {
        let home = tempfile::tempdir().expect("tempdir");
        let real = home.path().canonicalize().expect("canonical");
        assert_eq!(
            resolved(&home.path().join(".kube/config")),
            real.join(".kube/config")
        );
    }

    #[test]
    fn the_seccomp_program_compiles_for_this_machine() {
        let online = seccomp_program(&Network::On).expect("compiles");
        let offline = seccomp_program(&Network::Off).expect("compiles");
        assert!(!online.is_empty());
        assert!(offline.len() > online.len());
    }
}
