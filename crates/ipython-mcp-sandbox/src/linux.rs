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

use crate::policy::WRITE_PROTECTED;
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

/// `ioctl` requests refused with `EPERM`: typing into a terminal's input (`TIOCSTI`: a kernel
/// holding the user's terminal could run a command in their shell) and the Linux console's
/// grab bag (`TIOCLINUX`, which can paste the console's selection as input).
// The request type is `c_ulong` in glibc's declarations and `c_int` in musl's.
#[allow(clippy::unnecessary_cast)]
const DENIED_IOCTLS: [u64; 2] = [libc::TIOCSTI as u64, libc::TIOCLINUX as u64];

/// `clone` flags that make a namespace, refused as `unshare` is. `CLONE_NEWTIME` is not among
/// them: `clone` takes it from `clone3` and `unshare` only (in `clone` that bit is part of the
/// exit signal).
const NAMESPACE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

/// Socket families a kernel without network keeps: Unix sockets (its channels), IP (whose
/// TCP Landlock rules and whose rest the filter refuses) and netlink's routing protocol, which
/// the C library reads interface addresses through (`getaddrinfo`, `if_nameindex`). Every
/// other family (`AF_VSOCK` to the host of a virtual machine, Bluetooth, CAN, TIPC, RDS,
/// `AF_ALG`, …) is refused.
const OFFLINE_FAMILIES: [i32; 4] = [
    libc::AF_UNIX,
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
];

/// What the child applies to itself.
pub(crate) struct Rules {
    /// The Landlock ruleset, every rule but the child's own `/proc` entry added.
    ruleset: OwnedFd,
    /// The rights on the child's `/proc/<pid>`.
    own_proc: u64,
    /// The filter that answers `EPERM` ([`seccomp_program`]).
    seccomp: BpfProgram,
    /// The filter that answers `clone3` with `ENOSYS` ([`clone3_program`]).
    clone3: BpfProgram,
    /// The kernel's pids group, joined before the rules close `/sys` (kept, and removed, with
    /// the prepared sandbox).
    tasks: Option<crate::tasks::TaskBound>,
    /// The kernel runs under the namespaces' launcher, which applies the rest inside them:
    /// the child only joins the pids group and keeps the ruleset open across `exec`.
    namespaced: bool,
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
        if self.namespaced {
            // SAFETY: as below; fcntl on a descriptor this process holds.
            unsafe {
                self.join_tasks()?;
                if libc::fcntl(self.ruleset.as_raw_fd(), libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            return Ok(());
        }
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
            self.join_tasks()?;
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
        for program in [&self.seccomp, &self.clone3] {
            seccompiler::apply_filter(program).map_err(|_| std::io::Error::last_os_error())?;
        }
        Ok(())
    }
}

impl Rules {
    /// Writes the calling process into the kernel's pids group, if it has one.
    ///
    /// # Safety
    ///
    /// Async-signal-safe: open, write and close on a path prepared before the fork.
    unsafe fn join_tasks(&self) -> std::io::Result<()> {
        let Some(tasks) = &self.tasks else {
            return Ok(());
        };
        // SAFETY: the caller's contract.
        unsafe {
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
        Ok(())
    }

    /// The ruleset's descriptor, which a namespaced kernel's launcher inherits.
    pub(crate) fn ruleset_fd(&self) -> i32 {
        self.ruleset.as_raw_fd()
    }
}

/// The second layer, applied by the namespaces' launcher in the kernel's process: the
/// server's Landlock ruleset (descriptor `landlock`), given the paths that exist only inside
/// (`/dev/shm`, the namespace's `/proc`, and `/tmp` when it is the kernel's own), then seccomp;
/// `offline`: the network is not the host's.
pub(crate) fn confine_inside(
    landlock: Option<i32>,
    private_temp: bool,
    offline: bool,
) -> Result<(), String> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(format!("no_new_privs: {}", std::io::Error::last_os_error()));
    }
    if let Some(ruleset) = landlock {
        let all = AccessFs::from_all(RULES_ABI).bits();
        let temp = if private_temp { "/tmp" } else { "/dev/shm" };
        for (path, access) in [
            (temp, all),
            ("/dev/shm", all),
            ("/proc", (read_access() | AccessFs::WriteFile).bits()),
        ] {
            let Ok(dir) = std::fs::File::open(path) else {
                continue;
            };
            let attr = PathBeneathAttr {
                allowed_access: access,
                parent_fd: dir.as_raw_fd(),
            };
            // SAFETY: the attribute outlives the call; `ruleset` is the inherited ruleset.
            let added = unsafe {
                libc::syscall(
                    libc::SYS_landlock_add_rule,
                    ruleset,
                    LANDLOCK_RULE_PATH_BENEATH,
                    &attr as *const PathBeneathAttr,
                    0,
                )
            };
            if added != 0 {
                return Err(format!(
                    "landlock rule for {path}: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
        // SAFETY: restricts this process with the inherited ruleset.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0) } != 0 {
            return Err(format!("landlock: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: the ruleset is no longer needed, and the kernel must not keep it.
        unsafe { libc::close(ruleset) };
    }
    let network = if offline { Network::Off } else { Network::On };
    let seccomp = seccomp_program(&network).map_err(|error| error.to_string())?;
    let clone3 = clone3_program().map_err(|error| error.to_string())?;
    for program in [&seccomp, &clone3] {
        seccompiler::apply_filter(program).map_err(|error| format!("seccomp: {error}"))?;
    }
    Ok(())
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

/// The rules for a kernel with `dirs`; `namespaced`: the kernel runs in namespaces, whose
/// mounts cover the denied paths, so no writable directory is split.
pub(crate) fn prepare(
    policy: &Policy,
    dirs: &KernelDirs,
    namespaced: bool,
) -> Result<(Rules, Report), Error> {
    let (created, mut mechanisms) = ruleset(policy)?;
    let (grants, mut limits) = grants(policy, dirs, namespaced);
    let ruleset = add_grants(created, &grants)?;
    let Some(ruleset) = Option::<OwnedFd>::from(ruleset) else {
        return Err(Error::Unenforceable {
            mode: policy.mode.name(),
            why: "Landlock refused the ruleset".to_owned(),
        });
    };
    let seccomp = seccomp_program(&policy.network)?;
    let clone3 = clone3_program()?;
    mechanisms.extend(["seccomp".to_owned(), "no_new_privs".to_owned()]);
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
        clone3,
        tasks,
        namespaced,
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

/// The Landlock ruleset this system can enforce for `policy` (file rules, scopes, TCP rules
/// and the proxy's port), before any path is granted, and the mechanisms it amounts to.
fn ruleset(policy: &Policy) -> Result<(RulesetCreated, Vec<String>), Error> {
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
    Ok((created, mechanisms))
}

/// The paths `policy` grants a kernel with `dirs`: everything readable but the denied paths
/// (their parents split), the writable directories, the devices, and its own entries in the
/// private directory; and what that cannot do, as limits.
///
/// In namespaces the writable directories are granted whole (the mounts cover what is denied
/// in them and keep protected entries read-only), and neither `/proc` nor the temp directory
/// is granted here: the launcher grants the namespace's own.
fn grants(
    policy: &Policy,
    dirs: &KernelDirs,
    namespaced: bool,
) -> (Vec<(PathBuf, BitFlags<AccessFs>)>, Vec<String>) {
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
        .filter(|dir| {
            let own_temp = namespaced && policy.namespaced_temp().is_some();
            dir.exists() && !(own_temp && **dir == policy.temp)
        })
        .map(|dir| resolved(dir))
        .collect();
    let mut plan = Plan {
        denied: &denied,
        grants: Vec::new(),
        limits,
        namespaced,
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
    (plan.grants, plan.limits)
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

/// The filter that answers `EPERM` to [`DENIED_CALLS`], [`DENIED_IOCTLS`], `clone` with
/// [`NAMESPACE_FLAGS`] and, without network, [`offline_rules`].
fn seccomp_program(network: &Network) -> Result<BpfProgram, Error> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED_CALLS
        .iter()
        .map(|call| (*call, Vec::new()))
        .collect();
    // The request is an `unsigned int`: its low 32 bits are all the kernel reads, and all the
    // filter compares.
    let ioctl = DENIED_IOCTLS
        .iter()
        .map(|request| rule(vec![condition(1, SeccompCmpOp::Eq, *request)?]))
        .collect::<Result<_, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctl);
    // Its flags are its first argument on the architectures built for (x86_64, aarch64).
    let clone = NAMESPACE_FLAGS
        .iter()
        .map(|flag| rule(vec![condition(0, SeccompCmpOp::MaskedEq(*flag), *flag)?]))
        .collect::<Result<_, _>>()?;
    rules.insert(libc::SYS_clone, clone);
    if *network != Network::On {
        rules.extend(offline_rules()?);
    }
    compile(rules, libc::EPERM)
}

/// The filter that answers `clone3` with `ENOSYS`. Its flags are in a structure in memory,
/// which a filter cannot read, so namespace flags could not be told from a thread's: the C
/// library takes `ENOSYS` as a kernel without `clone3` and falls back to `clone`, whose flags
/// [`seccomp_program`] reads. A filter has one answer, hence a second filter.
fn clone3_program() -> Result<BpfProgram, Error> {
    compile(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        libc::ENOSYS,
    )
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, Error> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|_| Error::Rules(format!("no seccomp for {}", std::env::consts::ARCH)))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )
    .map_err(|error| Error::Rules(error.to_string()))?;
    filter
        .try_into()
        .map_err(|error: seccompiler::BackendError| Error::Rules(error.to_string()))
}

/// A comparison of a system call's argument `arg` (its low 32 bits) with `value`.
fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, Error> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
        .map_err(|error| Error::Rules(error.to_string()))
}

/// A rule that holds when all its `conditions` do.
fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, Error> {
    SeccompRule::new(conditions).map_err(|error| Error::Rules(error.to_string()))
}

/// Without network: every socket family but [`OFFLINE_FAMILIES`] (packet sockets among them),
/// netlink but its routing protocol, every IP socket but TCP's (whose connects and binds
/// Landlock rules), and TCP Fast Open's connect inside `sendto`/`sendmsg`.
fn offline_rules() -> Result<Vec<(i64, Vec<SeccompRule>)>, Error> {
    let other_family = OFFLINE_FAMILIES
        .iter()
        .map(|family| condition(0, SeccompCmpOp::Ne, *family as u64))
        .collect::<Result<Vec<_>, _>>()?;
    let mut socket = vec![
        rule(other_family.clone())?,
        rule(vec![
            condition(0, SeccompCmpOp::Eq, libc::AF_NETLINK as u64)?,
            condition(2, SeccompCmpOp::Ne, libc::NETLINK_ROUTE as u64)?,
        ])?,
    ];
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
        // A pair of another family's sockets loads and reaches its code as `socket` would.
        (
            libc::SYS_socketpair,
            vec![rule(vec![condition(
                0,
                SeccompCmpOp::Ne,
                libc::AF_UNIX as u64,
            )?])?],
        ),
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
pub(crate) fn resolved(path: &Path) -> PathBuf {
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
/// entries (for reading only, in namespaces).
struct Plan<'a> {
    denied: &'a [PathBuf],
    grants: Vec<(PathBuf, BitFlags<AccessFs>)>,
    limits: Vec<String>,
    namespaced: bool,
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
        // adds its own). In namespaces it is the namespace's own, granted by the launcher.
        let split_proc = pass == Pass::Read && !self.namespaced;
        let is_proc = dir == proc && split_proc;
        let holds_split = (self
            .denied
            .iter()
            .any(|denied| denied.starts_with(dir) && denied != dir)
            && !(self.namespaced && pass == Pass::Write))
            || (split_proc && proc.starts_with(dir) && dir != proc);
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
        let mut kept_read_only = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            if is_proc && !system_proc_entry(&name) {
                continue;
            }
            // Split anyway, so keeping these read-only takes nothing else away.
            if pass == Pass::Write && WRITE_PROTECTED.iter().any(|protected| name == *protected) {
                kept_read_only.push(name.to_string_lossy().into_owned());
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
        if !kept_read_only.is_empty() {
            kept_read_only.sort();
            self.limits.push(format!(
                "{} in {} are read-only: what they hold runs outside the sandbox",
                kept_read_only.join(", "),
                dir.display()
            ));
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
            namespaced: false,
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

    /// A writable HOME is split for its secrets anyway: its shell start-up files, `.git` and
    /// editor and agent settings stay readable and become read-only; a directory not split
    /// keeps them writable (protecting them there would take its new entries away).
    #[test]
    fn a_split_writable_directory_keeps_what_runs_outside_the_sandbox_read_only() {
        let home = tempfile::tempdir().expect("tempdir");
        let home = home.path().canonicalize().expect("canonical");
        for dir in [".ssh", ".git/hooks", ".vscode", "work/.git/hooks"] {
            std::fs::create_dir_all(home.join(dir)).expect("mkdir");
        }
        for file in [".bashrc", ".profile", ".envrc", "notes.txt"] {
            std::fs::write(home.join(file), "x").expect("write");
        }
        let denied = vec![home.join(".ssh")];
        let mut plan = Plan {
            denied: &denied,
            grants: Vec::new(),
            limits: Vec::new(),
            namespaced: false,
        };
        plan.allow(&home, read_access(), Pass::Read);
        plan.allow(&home, AccessFs::from_all(RULES_ABI), Pass::Write);
        let all = AccessFs::from_all(RULES_ABI);
        let writable = |path: &str| {
            plan.grants
                .iter()
                .any(|(granted, access)| granted == &home.join(path) && *access == all)
        };
        for protected in [".bashrc", ".profile", ".envrc", ".git", ".vscode"] {
            assert!(!writable(protected), "{protected} is writable");
            assert_eq!(
                granted(&plan, &home.join(protected)),
                Some(read_access()),
                "{protected} stays readable"
            );
        }
        assert!(writable("notes.txt"));
        assert!(
            writable("work"),
            "a directory not split keeps its .git writable"
        );
        let said = plan.limits.join("\n");
        assert!(
            said.contains(".bashrc, .envrc, .git, .profile, .vscode in"),
            "{said}"
        );
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
            namespaced: false,
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

    /// The default deny list splits HOME, `.config`, `.local/share`, `.cargo`, … but leaves
    /// the directories kernels write whole: new files can be made directly in them.
    #[test]
    fn the_default_deny_list_leaves_the_kernels_writable_home_directories_whole() {
        let home = tempfile::tempdir().expect("tempdir");
        let home = home.path().canonicalize().expect("canonical");
        for dir in [
            ".cache/pip",
            ".ipython/profile_default",
            ".config/matplotlib",
            ".config/git",
            ".local/share/jupyter",
            ".local/share/fish",
            ".local/share/keyrings",
            ".local/bin",
            ".cargo/bin",
            ".claude/projects",
        ] {
            std::fs::create_dir_all(home.join(dir)).expect("mkdir");
        }
        for file in [
            ".config/git/credentials",
            ".config/git/config",
            ".local/share/fish/fish_history",
            ".cargo/credentials.toml",
            ".cargo/config.toml",
            ".claude/.credentials.json",
            ".claude/settings.json",
            ".bash_history",
            ".bashrc",
        ] {
            std::fs::write(home.join(file), "x").expect("write");
        }
        let policy = Policy {
            mode: Mode::WorkspaceWrite,
            network: Network::On,
            explicit: true,
            home: Some(home.clone()),
            read_deny: Vec::new(),
            write: Vec::new(),
            workspace: None,
            temp: std::env::temp_dir(),
            max_processes: None,
            namespaces: true,
            private_temp: false,
            private: None,
            state: None,
        };
        let denied = policy.denied();
        let mut plan = Plan {
            denied: &denied,
            grants: Vec::new(),
            limits: Vec::new(),
            namespaced: false,
        };
        plan.allow(Path::new(&home), read_access(), Pass::Read);
        for dir in policy.writable(&KernelDirs::default()) {
            if dir.starts_with(&home) {
                plan.allow(&dir, AccessFs::from_all(RULES_ABI), Pass::Write);
            }
        }
        assert!(plan.limits.is_empty(), "{:?}", plan.limits);
        // Rules on one path add up.
        let all_granted = |path: &Path| {
            plan.grants
                .iter()
                .filter(|(granted, _)| granted == path)
                .fold(BitFlags::<AccessFs>::empty(), |all, (_, access)| {
                    all | *access
                })
        };
        for dir in [
            ".cache",
            ".ipython",
            ".config/matplotlib",
            ".local/share/jupyter",
        ] {
            assert_eq!(
                all_granted(&home.join(dir)),
                AccessFs::from_all(RULES_ABI),
                "{dir}"
            );
        }
        for readable in [
            ".config/git/config",
            ".cargo/config.toml",
            ".cargo/bin",
            ".claude/settings.json",
            ".claude/projects",
            ".local/bin",
            ".bashrc",
        ] {
            assert_eq!(
                granted(&plan, &home.join(readable)),
                Some(read_access()),
                "{readable}"
            );
        }
        for secret in [
            ".config/git/credentials",
            ".local/share/fish/fish_history",
            ".local/share/keyrings",
            ".cargo/credentials.toml",
            ".claude/.credentials.json",
            ".bash_history",
        ] {
            assert_eq!(granted(&plan, &home.join(secret)), None, "{secret}");
        }
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

    /// The `errno` of `call` made in a child that applied `programs` first (0: it worked).
    fn errno_under(programs: &[&BpfProgram], call: fn() -> libc::c_long) -> i32 {
        // SAFETY: the child makes only system calls (no allocation, no lock) and `_exit`s.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork");
            if pid == 0 {
                for program in programs {
                    if seccompiler::apply_filter(program).is_err() {
                        libc::_exit(255);
                    }
                }
                let code = if call() < 0 {
                    *libc::__errno_location()
                } else {
                    0
                };
                libc::_exit(code);
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            assert!(libc::WIFEXITED(status), "the child ended by a signal");
            let code = libc::WEXITSTATUS(status);
            assert_ne!(code, 255, "the filter was not applied");
            code
        }
    }

    fn tiocsti() -> libc::c_long {
        let byte = b'x';
        // SAFETY: an ioctl on a descriptor that is not open: nothing is read or written.
        unsafe { libc::ioctl(-1, libc::TIOCSTI, &byte) as libc::c_long }
    }

    fn tiocgwinsz() -> libc::c_long {
        let mut size = std::mem::MaybeUninit::<libc::winsize>::uninit();
        // SAFETY: as above; the kernel would write a `winsize`.
        unsafe { libc::ioctl(-1, libc::TIOCGWINSZ, size.as_mut_ptr()) as libc::c_long }
    }

    fn clone_new_user() -> libc::c_long {
        // CLONE_FS with CLONE_NEWUSER is invalid (EINVAL): without the filter no child is made.
        let flags = (libc::CLONE_NEWUSER | libc::CLONE_FS) as libc::c_ulong;
        // SAFETY: a clone the kernel refuses before it makes a process.
        unsafe { libc::syscall(libc::SYS_clone, flags, 0, 0, 0, 0) }
    }

    fn clone3_empty() -> libc::c_long {
        // SAFETY: a clone3 with no arguments structure: refused before anything is made.
        unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) }
    }

    fn socket_of(family: i32, kind: i32, protocol: i32) -> libc::c_long {
        // SAFETY: socket and close have no memory-safety preconditions.
        unsafe {
            let fd = libc::socket(family, kind | libc::SOCK_CLOEXEC, protocol);
            if fd >= 0 {
                libc::close(fd);
            }
            fd as libc::c_long
        }
    }

    #[test]
    fn the_filter_refuses_typing_into_a_terminal_and_namespaced_clones() {
        let online = seccomp_program(&Network::On).expect("compiles");
        let clone3 = clone3_program().expect("compiles");
        let filtered = [&online, &clone3];
        // Without the filter each call fails otherwise: the filter, not the call, refuses.
        assert_eq!(errno_under(&[], tiocsti), libc::EBADF);
        assert_eq!(errno_under(&filtered, tiocsti), libc::EPERM);
        assert_eq!(errno_under(&filtered, tiocgwinsz), libc::EBADF);
        assert_eq!(errno_under(&[], clone_new_user), libc::EINVAL);
        assert_eq!(errno_under(&filtered, clone_new_user), libc::EPERM);
        assert_ne!(errno_under(&[], clone3_empty), libc::ENOSYS);
        assert_eq!(errno_under(&filtered, clone3_empty), libc::ENOSYS);
    }

    #[test]
    fn without_network_only_unix_ip_and_routing_netlink_sockets_are_made() {
        let offline = seccomp_program(&Network::Off).expect("compiles");
        let online = seccomp_program(&Network::On).expect("compiles");
        fn vsock() -> libc::c_long {
            socket_of(libc::AF_VSOCK, libc::SOCK_STREAM, 0)
        }
        fn alg() -> libc::c_long {
            socket_of(libc::AF_ALG, libc::SOCK_SEQPACKET, 0)
        }
        fn packet() -> libc::c_long {
            socket_of(libc::AF_PACKET, libc::SOCK_RAW, 0)
        }
        fn diag() -> libc::c_long {
            socket_of(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_SOCK_DIAG)
        }
        fn route() -> libc::c_long {
            socket_of(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE)
        }
        fn unix() -> libc::c_long {
            socket_of(libc::AF_UNIX, libc::SOCK_STREAM, 0)
        }
        fn tcp() -> libc::c_long {
            socket_of(libc::AF_INET6, libc::SOCK_STREAM, 0)
        }
        fn pair() -> libc::c_long {
            let mut fds = [0; 2];
            // SAFETY: socketpair writes two descriptors into `fds`.
            unsafe {
                libc::socketpair(libc::AF_TIPC, libc::SOCK_STREAM, 0, fds.as_mut_ptr())
                    as libc::c_long
            }
        }
        for call in [vsock, alg, packet, diag, pair] {
            assert_eq!(errno_under(&[&offline], call), libc::EPERM);
        }
        // With the network on they are the OS's business (a packet socket needs CAP_NET_RAW).
        for call in [vsock, alg, diag, pair] {
            assert_ne!(errno_under(&[&online], call), libc::EPERM);
        }
        for call in [route, unix, tcp] {
            assert_eq!(errno_under(&[&offline], call), 0);
        }
    }

    #[test]
    fn the_seccomp_program_compiles_for_this_machine() {
        let online = seccomp_program(&Network::On).expect("compiles");
        let offline = seccomp_program(&Network::Off).expect("compiles");
        assert!(!online.is_empty());
        assert!(offline.len() > online.len());
    }
}
