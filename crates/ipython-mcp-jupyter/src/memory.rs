//! A local kernel's memory: its limit, enforced by a cgroup v2 child group where the server may
//! create one and otherwise by a watchdog on the kernel tree's resident memory; a meter of its
//! current and peak use; and the evidence of what killed a kernel that died.
//!
//! The cgroup path: the kernel joins its own group (`memory.max` = the limit, `memory.oom.group`
//! so the whole tree goes, `memory.swap.max` = 0 so it cannot page instead) before it execs, so
//! nothing it allocates is ever outside the group; the kernel's OOM killer then acts at the
//! limit and counts `oom_kill` in `memory.events`, which is the certain evidence. Creating such
//! a group needs the memory controller in the subtree of the server's own cgroup: it is used
//! when already delegated, or when the server may enable it there (cgroup v2 forbids
//! controllers beside processes: its group is the root, or the server is alone in it and first
//! moves itself into a leaf, `ipython-mcp-server`). It never moves another process.
//! Elsewhere (cgroup v1 or hybrid hosts, containers without delegation, macOS) the watchdog
//! samples the resident memory of the kernel and its descendants every [`SAMPLE_INTERVAL`] and
//! kills the process group past the limit.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// How often the kernel tree's memory is sampled (for the watchdog, and for the meter).
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(150);

/// A SIGKILL the server did not send counts as likely the system's out-of-memory killer when
/// the kernel's peak reached this share of its limit ...
const NEAR_LIMIT: f64 = 0.9;
/// ... or, without a limit, this share of the machine's memory.
const NEAR_MACHINE: f64 = 0.5;

/// What the server was asked to do about kernels' memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryPolicy {
    /// The limit of each kernel's tree, in bytes; `None`: no limit (memory is still metered).
    pub limit_bytes: Option<u64>,
    /// How the limit is enforced.
    pub enforcement: Enforcement,
}

/// How a limit may be enforced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Enforcement {
    /// A cgroup where the server may create one, else the watchdog.
    #[default]
    Auto,
    /// Always the watchdog.
    Watchdog,
}

/// What enforces a kernel's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforcer {
    /// The kernel's own cgroup v2 group (`memory.max`).
    Cgroup,
    /// The server's watchdog on the tree's resident memory.
    Watchdog,
}

/// A kernel's memory as last sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryReading {
    pub current_bytes: u64,
    pub peak_bytes: u64,
    pub limit_bytes: Option<u64>,
    /// What enforces the limit; `None` without one.
    pub enforcer: Option<Enforcer>,
}

/// Who killed the kernel, when the server knows it did.
const KILLED_BY_NOBODY: u8 = 0;
const KILLED_BY_SERVER: u8 = 1;
const KILLED_BY_WATCHDOG: u8 = 2;

/// One kernel's meter, shared by its sampler, its exit watch and whoever reads the status.
#[derive(Debug)]
pub struct Meter {
    current: AtomicU64,
    peak: AtomicU64,
    limit: Option<u64>,
    enforcer: Option<Enforcer>,
    killed_by: AtomicU8,
}

impl Meter {
    pub(crate) fn new(limit: Option<u64>, enforcer: Option<Enforcer>) -> Meter {
        Meter {
            current: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            limit,
            enforcer,
            killed_by: AtomicU8::new(KILLED_BY_NOBODY),
        }
    }

    pub(crate) fn record(&self, current: u64) {
        self.current.store(current, Ordering::Relaxed);
        self.peak.fetch_max(current, Ordering::Relaxed);
    }

    /// The latest sample, the peak so far and the limit.
    pub fn reading(&self) -> MemoryReading {
        MemoryReading {
            current_bytes: self.current.load(Ordering::Relaxed),
            peak_bytes: self.peak.load(Ordering::Relaxed),
            limit_bytes: self.limit,
            enforcer: self.enforcer,
        }
    }

    /// The server is about to kill the kernel (replacement, shutdown): its SIGKILL is no
    /// evidence of memory pressure. The watchdog's own kill is kept as such.
    pub(crate) fn killed_by_server(&self) {
        let _ = self.killed_by.compare_exchange(
            KILLED_BY_NOBODY,
            KILLED_BY_SERVER,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    fn killed_by_watchdog(&self) {
        self.killed_by.store(KILLED_BY_WATCHDOG, Ordering::SeqCst);
    }
}

/// Why a kernel's SIGKILL counts as out of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryBound {
    /// Its configured limit.
    Limit,
    /// The machine's memory (no limit configured).
    Machine,
}

/// Renders bytes for people: `300.0 MiB`, `2.50 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let bytes = bytes as f64;
    if bytes >= 1024.0 * MIB {
        format!("{:.2} GiB", bytes / (1024.0 * MIB))
    } else {
        format!("{:.1} MiB", bytes / MIB)
    }
}

/// The name of a signal, for messages (`SIGKILL`); `None` for one we do not name.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGALRM => "SIGALRM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        libc::SIGTRAP => "SIGTRAP",
        _ => return None,
    })
}

/// The evidence the exit watch reads once the kernel has exited, and what it concludes from a
/// SIGKILL: certain (the watchdog's kill, the cgroup's `oom_kill`), likely (near a bound, told
/// as likely), or nothing about memory.
pub(crate) enum Verdict {
    /// Killed for exceeding its limit: certain.
    OutOfMemory {
        limit_bytes: u64,
        peak_bytes: u64,
        enforcer: Enforcer,
    },
    /// A SIGKILL nobody here sent, with the tree's peak near a bound.
    Likely {
        peak_bytes: u64,
        bound_bytes: u64,
        bound: MemoryBound,
    },
    /// No evidence of memory pressure.
    None,
}

/// What killed a kernel that ended by SIGKILL, as precisely as the evidence allows.
pub(crate) fn judge(meter: &Meter, group: Option<&Group>) -> Verdict {
    let mut peak = meter.peak.load(Ordering::Relaxed);
    let by = meter.killed_by.load(Ordering::SeqCst);
    if let (Some(limit), KILLED_BY_WATCHDOG) = (meter.limit, by) {
        return Verdict::OutOfMemory {
            limit_bytes: limit,
            peak_bytes: peak,
            enforcer: Enforcer::Watchdog,
        };
    }
    if by == KILLED_BY_SERVER {
        return Verdict::None;
    }
    if let Some(group) = group {
        peak = peak.max(group.peak().unwrap_or(0));
        if group.oom_kills() > 0 {
            return Verdict::OutOfMemory {
                limit_bytes: group.limit,
                peak_bytes: peak,
                enforcer: Enforcer::Cgroup,
            };
        }
    }
    likely(peak, meter.limit, machine_memory())
}

/// The "likely" rule alone (pure, for the tests): near the limit, or without one near the
/// machine's memory.
fn likely(peak: u64, limit: Option<u64>, machine: Option<u64>) -> Verdict {
    let (bound_bytes, bound, share) = match (limit, machine) {
        (Some(limit), _) => (limit, MemoryBound::Limit, NEAR_LIMIT),
        (None, Some(machine)) => (machine, MemoryBound::Machine, NEAR_MACHINE),
        (None, None) => return Verdict::None,
    };
    if peak > 0 && peak as f64 >= bound_bytes as f64 * share {
        Verdict::Likely {
            peak_bytes: peak,
            bound_bytes,
            bound,
        }
    } else {
        Verdict::None
    }
}

/// Samples the kernel tree's memory into `meter` until `exit` says the kernel is gone; with
/// the watchdog in charge, kills the process `group` once the tree exceeds the limit.
pub(crate) async fn sample(
    pid: u32,
    process_group: u32,
    meter: std::sync::Arc<Meter>,
    cgroup: Option<PathBuf>,
    mut exit: tokio::sync::watch::Receiver<Option<crate::KernelExit>>,
) {
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = exit.wait_for(Option::is_some) => return,
            _ = tick.tick() => {}
        }
        // A few small /proc reads: cheap enough for the async threads.
        let current = match &cgroup {
            Some(dir) => read_number(&dir.join("memory.current")),
            None => tree_resident_bytes(pid),
        };
        let Some(current) = current else { continue };
        meter.record(current);
        if let (Some(limit), Some(Enforcer::Watchdog)) = (meter.limit, meter.enforcer) {
            if current > limit && exit.borrow().is_none() {
                meter.killed_by_watchdog();
                tracing::warn!(
                    pid,
                    current,
                    limit,
                    "kernel exceeded its memory limit; killing it"
                );
                // SAFETY: killpg(2) has no memory-safety preconditions; the kernel has not been
                // reaped (no exit yet), so its group still exists and holds only its tree.
                unsafe { libc::killpg(process_group as libc::pid_t, libc::SIGKILL) };
                return;
            }
        }
    }
}

/// Resident bytes of `pid` and all its descendants (Linux: `/proc/<pid>/task/*/children`;
/// `statm` for `pid`, and for a descendant only its private pages (`smaps_rollup`): a forked
/// child maps its parent's pages too, and counting those twice would kill a kernel using half
/// its limit as soon as it forks (a namespace checkpoint's writer, a `multiprocessing` worker).
#[cfg(target_os = "linux")]
pub(crate) fn tree_resident_bytes(pid: u32) -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let mut total = 0u64;
    let mut stack = vec![pid];
    let mut seen = 0usize;
    let mut root_read = false;
    while let Some(next) = stack.pop() {
        seen += 1;
        if seen > 4096 {
            break; // a fork bomb: what was counted is already plenty
        }
        let private = (next != pid).then(|| private_bytes(next)).flatten();
        if let Some(private) = private {
            total += private;
        } else {
            let statm = std::fs::read_to_string(format!("/proc/{next}/statm"));
            if let Some(resident) = statm
                .ok()
                .and_then(|text| text.split_whitespace().nth(1)?.parse::<u64>().ok())
            {
                total += resident * page;
                root_read |= next == pid;
            }
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{next}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            if let Ok(children) = std::fs::read_to_string(task.path().join("children")) {
                stack.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    root_read.then_some(total)
}

/// The pages only `pid` maps (`Private_Clean` + `Private_Dirty` of `smaps_rollup`, in kB).
#[cfg(target_os = "linux")]
fn private_bytes(pid: u32) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let mut kib = 0u64;
    let mut found = false;
    for line in rollup.lines() {
        if let Some(rest) = line
            .strip_prefix("Private_Clean:")
            .or_else(|| line.strip_prefix("Private_Dirty:"))
        {
            kib += rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()?;
            found = true;
        }
    }
    found.then_some(kib * 1024)
}

/// Resident bytes of `pid` and all its descendants (macOS: `proc_listchildpids`,
/// `proc_pidinfo`).
#[cfg(target_os = "macos")]
pub(crate) fn tree_resident_bytes(pid: u32) -> Option<u64> {
    let resident = |pid: libc::c_int| -> Option<u64> {
        let mut info: libc::proc_taskinfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::proc_taskinfo>() as libc::c_int;
        // SAFETY: the buffer is a proc_taskinfo of the size given.
        let read = unsafe {
            libc::proc_pidinfo(
                pid,
                libc::PROC_PIDTASKINFO,
                0,
                (&mut info as *mut libc::proc_taskinfo).cast(),
                size,
            )
        };
        (read == size).then_some(info.pti_resident_size)
    };
    let total_root = resident(pid as libc::c_int)?;
    let mut total = total_root;
    let mut stack = vec![pid as libc::c_int];
    let mut seen = 0usize;
    while let Some(next) = stack.pop() {
        seen += 1;
        if seen > 4096 {
            break;
        }
        let mut children = vec![0 as libc::c_int; 256];
        let bytes = (children.len() * std::mem::size_of::<libc::c_int>()) as libc::c_int;
        // SAFETY: the buffer holds `bytes` bytes of pids.
        let count = unsafe { libc::proc_listchildpids(next, children.as_mut_ptr().cast(), bytes) };
        for &child in children.iter().take(count.max(0) as usize) {
            if child > 0 {
                total += resident(child).unwrap_or(0);
                stack.push(child);
            }
        }
    }
    Some(total)
}

/// Elsewhere the tree is not metered (and the watchdog cannot enforce a limit).
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub(crate) fn tree_resident_bytes(_pid: u32) -> Option<u64> {
    None
}

/// The machine's physical memory, if known.
pub(crate) fn machine_memory() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
    #[cfg(target_os = "macos")]
    {
        let mut bytes: u64 = 0;
        let mut size = std::mem::size_of::<u64>();
        // SAFETY: the name is NUL-terminated and the buffer is a u64 of the size given.
        let read = unsafe {
            libc::sysctlbyname(
                c"hw.memsize".as_ptr(),
                (&mut bytes as *mut u64).cast(),
                &mut size,
                std::ptr::null_mut(),
                0,
            )
        };
        (read == 0).then_some(bytes)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    None
}

fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A kernel's own cgroup v2 group, removed once the kernel has ended.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) dir: PathBuf,
    limit: u64,
}

impl Group {
    /// The group's `cgroup.procs`, for the child to write itself into before it execs.
    pub(crate) fn procs(&self) -> std::ffi::CString {
        use std::os::unix::ffi::OsStrExt as _;
        std::ffi::CString::new(self.dir.join("cgroup.procs").as_os_str().as_bytes())
            .expect("a path read from the system has no NUL byte")
    }

    /// The group's peak (`memory.peak`, Linux 5.19 and later).
    fn peak(&self) -> Option<u64> {
        read_number(&self.dir.join("memory.peak"))
    }

    /// How many processes the kernel's OOM killer killed in the group.
    fn oom_kills(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("memory.events"))
            .ok()
            .and_then(|events| oom_kills(&events))
            .unwrap_or(0)
    }

    /// Removes the group once it is empty (its processes are killed but may take a moment to
    /// be gone), giving up after about a second; blocking.
    pub(crate) fn remove(&self) {
        for _ in 0..50 {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        tracing::warn!(dir = %self.dir.display(), "could not remove the kernel's cgroup");
    }
}

fn oom_kills(events: &str) -> Option<u64> {
    events
        .lines()
        .find_map(|line| line.strip_prefix("oom_kill "))
        .and_then(|count| count.trim().parse().ok())
}

/// Where kernel groups are made (the server's own cgroup, with the memory controller enabled
/// for its children), or why there is no such place; probed once.
pub fn cgroup_parent() -> Result<&'static Path, &'static str> {
    static PARENT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PARENT.get_or_init(probe_cgroup_parent) {
        Ok(path) => Ok(path),
        Err(why) => Err(why),
    }
}

fn probe_cgroup_parent() -> Result<PathBuf, String> {
    if !cfg!(target_os = "linux") {
        return Err("cgroups exist only on Linux".to_owned());
    }
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|error| format!("cannot read /proc/self/cgroup: {error}"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|error| format!("cannot read /proc/self/mountinfo: {error}"))?;
    let dir = own_cgroup_dir(&own, &mountinfo)?;
    let controllers = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    if !controllers.split_whitespace().any(|name| name == "memory") {
        return Err(format!(
            "the memory controller is not available in the server's cgroup v2 group {} (a cgroup v1 or hybrid host, or not delegated)",
            dir.display()
        ));
    }
    let subtree = dir.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&subtree).unwrap_or_default();
    if !enabled.split_whitespace().any(|name| name == "memory")
        && std::fs::write(&subtree, "+memory").is_err()
    {
        // cgroup v2 allows controllers for children only in a group that holds no process.
        // Alone in its group (a service, a container's only process), the server moves itself
        // into a leaf of it and tries again; beside other processes it never moves anything.
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        let alone = procs
            .split_whitespace()
            .eq([std::process::id().to_string().as_str()]);
        if !alone {
            return Err(format!(
                "cannot enable the memory controller for the children of {}: cgroup v2 allows it only in a group that holds no process, and the server shares its group with other processes",
                dir.display()
            ));
        }
        let leaf = dir.join("ipython-mcp-server");
        let moved = match std::fs::create_dir(&leaf) {
            Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => Err(error),
            _ => std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string()),
        }
        .and_then(|()| std::fs::write(&subtree, "+memory"));
        if let Err(error) = moved {
            return Err(format!(
                "cannot enable the memory controller for the children of {} after moving the server into {} ({error})",
                dir.display(),
                leaf.display()
            ));
        }
        tracing::info!(leaf = %leaf.display(), "moved the server into a leaf of its cgroup to give kernels their own groups");
    }
    Ok(dir)
}

/// The directory of the server's cgroup v2 group, from `/proc/self/cgroup` and the cgroup2
/// mount in `/proc/self/mountinfo` (pure, for the tests).
fn own_cgroup_dir(cgroup: &str, mountinfo: &str) -> Result<PathBuf, String> {
    let relative = cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or("the server is in no cgroup v2 group")?;
    // mountinfo: id parent dev root mount_point options [optional…] - fstype source super
    let mount = mountinfo
        .lines()
        .find_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            (after.split_whitespace().next()? == "cgroup2")
                .then(|| before.split_whitespace().nth(4).map(PathBuf::from))?
        })
        .ok_or("no cgroup2 file system is mounted")?;
    let dir = mount.join(relative.trim().trim_start_matches('/'));
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(format!(
            "the server's cgroup v2 group {} is not visible",
            dir.display()
        ))
    }
}

/// Makes a kernel's group under `parent` with `limit`; blocking.
pub(crate) fn create_group(parent: &Path, limit: u64) -> std::io::Result<Group> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "ipython-mcp-kernel-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let dir = parent.join(name);
    std::fs::create_dir(&dir)?;
    let group = Group { dir, limit };
    let configured = std::fs::write(group.dir.join("memory.max"), limit.to_string()).map(|()| {
        // Older kernels lack these: the limit holds without them.
        let _ = std::fs::write(group.dir.join("memory.oom.group"), "1");
        let _ = std::fs::write(group.dir.join("memory.swap.max"), "0");
    });
    match configured {
        Ok(()) => Ok(group),
        Err(error) => {
            let _ = std::fs::remove_dir(&group.dir);
            Err(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_likely_rule_needs_a_peak_near_the_limit_or_the_machine() {
        let gib = 1u64 << 30;
        let verdict = |peak, limit, machine| match likely(peak, limit, machine) {
            Verdict::Likely { bound, .. } => Some(bound),
            _ => None,
        };
        assert_eq!(verdict(gib, Some(gib), None), Some(MemoryBound::Limit));
        assert_eq!(verdict(gib / 2, Some(gib), Some(gib)), None);
        assert_eq!(
            verdict(9 * gib, None, Some(16 * gib)),
            Some(MemoryBound::Machine)
        );
        assert_eq!(verdict(gib, None, Some(16 * gib)), None);
        assert_eq!(verdict(gib, None, None), None);
        assert_eq!(verdict(0, Some(1), None), None);
    }

    #[test]
    fn only_the_watchdog_s_own_kill_is_certain_and_the_server_s_kill_is_no_evidence() {
        let limit = 300 << 20;
        let verdict = |killed: fn(&Meter)| {
            let meter = Meter::new(Some(limit), Some(Enforcer::Watchdog));
            meter.record(limit + 1);
            killed(&meter);
            judge(&meter, None)
        };
        assert!(matches!(
            verdict(Meter::killed_by_watchdog),
            Verdict::OutOfMemory {
                enforcer: Enforcer::Watchdog,
                ..
            }
        ));
        assert!(matches!(verdict(Meter::killed_by_server), Verdict::None));
        // The server's kill after the watchdog's does not undo it.
        assert!(matches!(
            verdict(|meter| {
                meter.killed_by_watchdog();
                meter.killed_by_server();
            }),
            Verdict::OutOfMemory { .. }
        ));
        // Nobody here killed it, and it was at its limit: likely, not certain.
        assert!(matches!(verdict(|_| {}), Verdict::Likely { .. }));
    }

    #[test]
    fn the_own_group_is_found_from_proc() {
        let mountinfo = "24 30 0:22 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw\n";
        let root = own_cgroup_dir("0::/\n", mountinfo).expect("the root exists");
        assert_eq!(root, PathBuf::from("/sys/fs/cgroup"));
        assert!(own_cgroup_dir("4:memory:/x\n", mountinfo)
            .unwrap_err()
            .contains("no cgroup v2"));
        assert!(
            own_cgroup_dir("0::/\n", "24 30 0:22 / /sys rw - sysfs sysfs rw\n")
                .unwrap_err()
                .contains("no cgroup2")
        );
        assert_eq!(
            oom_kills("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"),
            Some(1)
        );
    }

    #[test]
    fn signals_and_sizes_are_named() {
        assert_eq!(signal_name(libc::SIGKILL), Some("SIGKILL"));
        assert_eq!(signal_name(libc::SIGSEGV), Some("SIGSEGV"));
        assert_eq!(human_bytes(300 << 20), "300.0 MiB");
        assert_eq!(human_bytes(5 << 29), "2.50 GiB");
    }

    /// A forked child's pages shared with its parent are counted once.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_forked_childs_shared_pages_are_counted_once() {
        use std::io::BufRead as _;
        use std::os::unix::process::CommandExt as _;
        let mut python = std::process::Command::new("python3")
            .args([
                "-c",
                "import os, sys, time\nb = bytearray(200 * 2**20)\nfor i in range(0, len(b), 4096): b[i] = 1\nif os.fork() == 0:\n    time.sleep(600)\n    os._exit(0)\nprint('forked', flush=True)\ntime.sleep(600)",
            ])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("python3");
        let mut line = String::new();
        std::io::BufReader::new(python.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read");
        assert_eq!(line.trim(), "forked");
        let tree = tree_resident_bytes(python.id()).expect("metered");
        // SAFETY: killpg(2) on our own child's group: the parent and its forked child.
        unsafe {
            libc::killpg(python.id() as libc::pid_t, libc::SIGKILL);
        }
        let _ = python.wait();
        assert!(
            (200 << 20..300 << 20).contains(&tree),
            "200 MiB shared by parent and child, metered as {} MiB",
            tree >> 20
        );
    }

    #[test]
    fn this_process_tree_is_metered() {
        let resident = tree_resident_bytes(std::process::id());
        if cfg!(any(target_os = "linux", target_os = "macos")) {
            assert!(resident.is_some_and(|bytes| bytes > 0), "{resident:?}");
        }
    }
}
