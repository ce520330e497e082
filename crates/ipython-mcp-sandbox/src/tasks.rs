//! The bound on a kernel's processes (and threads) against fork bombs: a `pids` cgroup of its
//! own, joined by the child before exec. `RLIMIT_NPROC` would count every process of the user
//! and does not bind root at all, so the cgroup is the only bound that holds for everyone; where
//! none can be made the report says so.
//!
//! Both cgroup layouts are found from `/proc/self/cgroup` and `/proc/self/mountinfo`: v2 (the
//! server's group, when `pids` is enabled for its children) and v1's `pids` hierarchy (hybrid
//! hosts).

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A kernel's `pids` group; removed when dropped (once its processes are gone).
pub(crate) struct TaskBound {
    dir: PathBuf,
    /// `<dir>/cgroup.procs`, for the child's write.
    pub(crate) procs: CString,
    /// How it was made, for the report (`pids.max 16384 (cgroup v1)`).
    pub(crate) mechanism: String,
}

impl Drop for TaskBound {
    fn drop(&mut self) {
        // Fails while a process the kernel left behind is still in it: left for the OS.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Makes a group bounding its members to `max` tasks, or says why none can be made.
pub(crate) fn bound(max: u64) -> Result<TaskBound, String> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|error| format!("cannot read /proc/self/cgroup: {error}"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|error| format!("cannot read /proc/self/mountinfo: {error}"))?;
    let (parent, version) = pids_parent(&own, &mountinfo)?;
    sweep(&parent);
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = parent.join(format!(
        "{PREFIX}{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir(&dir)
        .map_err(|error| format!("cannot make a pids group in {}: {error}", parent.display()))?;
    let made = TaskBound {
        procs: CString::new(
            dir.join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .map_err(|_| "the group's path holds a NUL byte".to_owned())?,
        dir,
        mechanism: format!("pids.max {max} (cgroup {version})"),
    };
    std::fs::write(made.dir.join("pids.max"), max.to_string())
        .map_err(|error| format!("cannot set pids.max: {error}"))?;
    Ok(made)
}

/// The name of every kernel's group: `<prefix><server pid>-<n>`.
const PREFIX: &str = "ipython-mcp-kernel-tasks-";

/// Removes the empty groups of servers that are gone (a server killed outright cannot remove
/// its own): a group whose server pid no longer runs.
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            // Fails while processes remain in it: left for the next sweep.
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// The directory kernel groups go in, and the cgroup version.
fn pids_parent(own: &str, mountinfo: &str) -> Result<(PathBuf, &'static str), String> {
    // v1 (a hybrid host): the `pids` hierarchy, where this process is.
    for line in own.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next(), fields.next(), fields.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        if controllers.split(',').any(|name| name == "pids") {
            let mount = mount_point(mountinfo, |fstype, options| {
                fstype == "cgroup" && options.split(',').any(|option| option == "pids")
            })
            .ok_or("the cgroup v1 pids hierarchy is not mounted")?;
            return Ok((join(&mount, path), "v1"));
        }
    }
    // v2: the server's own group, when its children may have the pids controller.
    let path = own
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or("no cgroup v2 group and no v1 pids hierarchy")?;
    let mount = mount_point(mountinfo, |fstype, _| fstype == "cgroup2")
        .ok_or("cgroup v2 is not mounted")?;
    let dir = join(&mount, path);
    let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    if !enabled.split_whitespace().any(|name| name == "pids")
        && std::fs::write(dir.join("cgroup.subtree_control"), "+pids").is_err()
    {
        return Err(format!(
            "the pids controller cannot be enabled for the children of {}",
            dir.display()
        ));
    }
    Ok((dir, "v2"))
}

/// The mount point of the first mount whose type and super options `matches`.
fn mount_point(mountinfo: &str, matches: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let point = before.split(' ').nth(4)?;
        let mut after = after.split(' ');
        let (fstype, _source, options) = (after.next()?, after.next()?, after.next()?);
        matches(fstype, options).then(|| PathBuf::from(point))
    })
}

fn join(mount: &Path, path: &str) -> PathBuf {
    mount.join(path.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn a_hybrid_host_bounds_tasks_in_the_v1_pids_hierarchy() {
        let own = "8:pids:/session-1\n4:memory:/x\n0::/\n";
        assert_eq!(
            pids_parent(own, MOUNTINFO),
            Ok((PathBuf::from("/sys/fs/cgroup/pids/session-1"), "v1"))
        );
    }

    #[test]
    fn mount_points_are_found_by_type_and_options() {
        assert_eq!(
            mount_point(MOUNTINFO, |fstype, _| fstype == "cgroup2"),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            mount_point(MOUNTINFO, |fstype, options| fstype == "cgroup"
                && options.split(',').any(|option| option == "cpu")),
            None
        );
    }
}
