//! The launcher: the server's executable in its `__sandbox` mode, the kernel's first process.
//! It reads a [`Plan`], and then:
//!
//! 1. enters new user, mount, IPC and PID namespaces (and a network namespace unless the
//!    kernel has the host's network), mapping the user to itself;
//! 2. captures every mount source (a detached clone, so no later mount hides one), makes the
//!    whole tree read-only and puts the plan's mounts over it;
//! 3. forks the PID namespace's first process, which mounts `/proc`, brings loopback up (and
//!    forwards the proxy's port to its Unix socket) and forks the kernel, in a session of its
//!    own;
//! 4. stays outside as the process the server started: it passes on the signals the server
//!    sends (an interrupt is a SIGINT to this pid) and ends as soon as the kernel does, the
//!    same way (the same exit status, or killed by the same signal), which is what the server
//!    reports.
//!
//! The first process outlives the kernel: when the kernel ends, or the launcher does (killed,
//! or the server gone), it kills the kernel's process group and waits for whatever left it (a
//! checkpoint's writer, which a replacement waits for) before it ends, and the namespace with
//! it. That is the server's own rule for a kernel's leftovers, kept inside the namespace.
//!
//! The kernel itself drops every capability, gets `no_new_privs`, the Landlock ruleset the
//! server built (inherited by number) with the rules for `/tmp`, `/dev/shm` and `/proc`
//! added, and the seccomp filter, then execs its command.
//!
//! Each process here is single-threaded when it forks (the proxy's forwarding threads start
//! after the kernel's fork), so allocating in the children is safe.

use std::convert::Infallible;
use std::ffi::{CString, OsString};
use std::io::{Read as _, Write as _};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::namespaces::{Mount, NetworkPlan, Plan, PLAN_VARIABLE};

/// The exit status of a launcher that could not start the kernel (its stderr says why).
const LAUNCH_FAILED: u8 = 121;

/// Signals passed on to the kernel: what the server, or a person, sends a kernel's pid.
const FORWARDED: [libc::c_int; 7] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

/// Where the forwarded signals go (0: nowhere yet).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

/// The first process's signal that the launcher ended (its parent-death signal).
fn launcher_ended() -> libc::c_int {
    libc::SIGRTMIN() + 1
}

/// Runs the launcher for `command` (the arguments after `__sandbox`): never returns when the
/// kernel starts; otherwise says why on stderr and returns the status to exit with.
pub fn launch(command: Vec<OsString>) -> std::process::ExitCode {
    match run(command) {
        Ok(never) => match never {},
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "ipython-mcp sandbox: {error}");
            std::process::ExitCode::from(LAUNCH_FAILED)
        }
    }
}

fn run(command: Vec<OsString>) -> Result<Infallible, String> {
    let text = std::env::var(PLAN_VARIABLE)
        .map_err(|_| format!("no plan in {PLAN_VARIABLE}: this mode is the server's own"))?;
    std::env::remove_var(PLAN_VARIABLE);
    let plan = Plan::decode(&text)?;
    if command.is_empty() {
        return Err("no command to run".to_owned());
    }
    enter(&plan)?;
    let sources = capture(&plan)?;
    // Opened before its directory is covered, and reached through this descriptor.
    let proxy = match &plan.network {
        NetworkPlan::Proxy { socket, .. } => Some(OwnedFd::from(
            std::fs::File::options()
                .read(true)
                .custom_flags(libc::O_PATH)
                .open(socket)
                .map_err(|error| format!("the proxy's socket {}: {error}", socket.display()))?,
        )),
        _ => None,
    };
    mount_all(&plan, sources)?;
    // The working directory was resolved before the mounts, on the tree now read-only under
    // them: resolved again, it is the writable directory bound there (or `/` when a cover
    // hides it).
    if let Ok(cwd) = std::env::current_dir() {
        if std::env::set_current_dir(&cwd).is_err() {
            let _ = std::env::set_current_dir("/");
        }
    }
    let (status_read, status_write) = pipe()?;
    let (alive_read, alive_write) = pipe()?;
    // SAFETY: single-threaded here; the child continues with its own copies.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
        0 => {
            drop(status_read);
            drop(alive_write);
            Err(first_process(
                &plan,
                command,
                proxy,
                status_write,
                alive_read,
            ))
        }
        child => {
            drop(status_write);
            // Held open until this process ends: the first process watches for its end.
            std::mem::forget(alive_write);
            drop(alive_read);
            monitor(child, status_read)
        }
    }
}

/// Enters the namespaces and maps the user (and group) to itself.
fn enter(plan: &Plan) -> Result<(), String> {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut flags =
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWPID;
    if plan.network != NetworkPlan::Host {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare takes flags only.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(format!(
            "cannot make user namespaces: {} (unprivileged user namespaces are off, or refused to this process)",
            std::io::Error::last_os_error()
        ));
    }
    // Without it a process could drop a group it was given to get past a file's mode.
    match std::fs::write("/proc/self/setgroups", "deny") {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("/proc/self/setgroups: {error}"))
        }
        _ => {}
    }
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))
        .map_err(|error| format!("/proc/self/uid_map: {error}"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))
        .map_err(|error| format!("/proc/self/gid_map: {error}"))?;
    // Nothing made here reaches the host; the host's later mounts still show here.
    sys_mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_SLAVE,
        None,
    )
}

/// What each mount of the plan puts in place, captured before any is made.
enum Source {
    /// A detached clone of a bind's source (or of the unreadable file, for a covered file), and
    /// whether it is a directory (known now: its path may be hidden by then).
    Tree(OwnedFd, bool),
    /// Nothing to capture (made at its turn).
    None,
}

fn capture(plan: &Plan) -> Result<Vec<Source>, String> {
    let covers_files = plan
        .mounts
        .iter()
        .any(|mount| matches!(mount, Mount::CoverFile { .. }));
    let unreadable = if covers_files {
        Some(unreadable_file()?)
    } else {
        None
    };
    plan.mounts
        .iter()
        .map(|mount| match mount {
            Mount::Bind {
                source, writable, ..
            } => {
                let tree = clone_tree(source)?;
                if !*writable {
                    set_read_only(Some(&tree), None, true)
                        .map_err(|error| format!("{}: {error}", source.display()))?;
                }
                Ok(Source::Tree(tree, source.is_dir()))
            }
            Mount::CoverFile { .. } => {
                let (tmpfs, name) = unreadable.as_ref().expect("made above");
                Ok(Source::Tree(clone_tree_at(tmpfs.as_raw_fd(), name)?, false))
            }
            _ => Ok(Source::None),
        })
        .collect()
}

fn mount_all(plan: &Plan, sources: Vec<Source>) -> Result<(), String> {
    let mut covers = Vec::new();
    // A cover that the kernel's own directories go inside lets the kernel pass (never list);
    // any other lets nothing in, so what was there is denied as Landlock would deny it.
    let passage = |cover: &Path| {
        plan.mounts.iter().any(|mount| {
            matches!(mount, Mount::Bind { target, .. } if target.starts_with(cover) && target != cover)
        })
    };
    for (mount, source) in plan.mounts.iter().zip(sources) {
        // A denied path out of sight here (under the host's `/tmp`, which the kernel's own
        // replaces) has nothing to cover; nor has a link (what it leads to is covered where
        // that is, if denied).
        if let Mount::CoverDir { target } | Mount::CoverFile { target } = mount {
            if !target
                .symlink_metadata()
                .is_ok_and(|metadata| !metadata.file_type().is_symlink())
            {
                continue;
            }
        }
        let made = match (mount, source) {
            (Mount::ReadOnlyRoot, _) => set_read_only(None, Some(Path::new("/")), true),
            (Mount::Bind { target, .. }, Source::Tree(tree, directory)) => {
                make_target(target, directory)?;
                attach(tree, target)
            }
            (Mount::CoverFile { target }, Source::Tree(tree, _)) => attach(tree, target),
            (Mount::CoverDir { target }, _) => {
                covers.push(target.as_path());
                let mode = if passage(target) { "0711" } else { "0000" };
                tmpfs(target, &format!("mode={mode},size=64k"))
            }
            (Mount::Tmpfs { target }, _) => tmpfs(target, "mode=1777"),
            // In the PID namespace's first process: its `/proc`.
            (Mount::Proc, _) => Ok(()),
            (mount, Source::None) => unreachable!("{mount:?} was captured"),
        };
        made.map_err(|error| format!("{}: {error}", mount_name(mount)))?;
    }
    for cover in covers {
        set_read_only(None, Some(cover), false).map_err(|error| {
            format!("making the cover of {} read-only: {error}", cover.display())
        })?;
    }
    Ok(())
}

fn mount_name(mount: &Mount) -> String {
    match mount {
        Mount::ReadOnlyRoot => "making / read-only".to_owned(),
        Mount::Bind { target, .. } => format!("binding {}", target.display()),
        Mount::CoverDir { target } | Mount::CoverFile { target } => {
            format!("covering {}", target.display())
        }
        Mount::Tmpfs { target } => format!("a tmpfs on {}", target.display()),
        Mount::Proc => "/proc".to_owned(),
    }
}

/// Makes a mount point that is missing (under the kernel's own `/tmp`, or in a cover).
fn make_target(target: &Path, directory: bool) -> Result<(), String> {
    if target.symlink_metadata().is_ok() {
        return Ok(());
    }
    let made = if directory {
        std::fs::create_dir_all(target)
    } else {
        target
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::File::create(target).map(drop))
    };
    made.map_err(|error| format!("making the mount point {}: {error}", target.display()))
}

/// The first process of the PID namespace: its `/proc` and network, then the kernel, then the
/// reaping until the kernel ends. Returns only what went wrong before the kernel started.
fn first_process(
    plan: &Plan,
    command: Vec<OsString>,
    proxy: Option<OwnedFd>,
    status: OwnedFd,
    alive: OwnedFd,
) -> String {
    let prepared = (|| {
        die_with_launcher(&alive)?;
        if plan.mounts.contains(&Mount::Proc) {
            sys_mount(
                Some("proc"),
                Path::new("/proc"),
                Some("proc"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                None,
            )
            .map_err(|error| format!("mounting /proc: {error}"))?;
        }
        if plan.network != NetworkPlan::Host {
            loopback_up()?;
        }
        let listener = match (&plan.network, proxy) {
            (NetworkPlan::Proxy { port, .. }, Some(proxy)) => {
                let listener = std::net::TcpListener::bind(("127.0.0.1", *port))
                    .map_err(|error| format!("the proxy's port {port} inside: {error}"))?;
                Some((listener, proxy))
            }
            _ => None,
        };
        Ok::<_, String>(listener)
    })();
    let listener = match prepared {
        Ok(listener) => listener,
        Err(error) => return error,
    };
    forward_signals();
    // SAFETY: single-threaded here (the forwarding threads start below).
    let kernel = unsafe { libc::fork() };
    match kernel {
        -1 => return format!("fork: {}", std::io::Error::last_os_error()),
        0 => {
            drop(status);
            drop(listener);
            return match kernel_process(plan, command) {
                Ok(never) => match never {},
                Err(error) => error,
            };
        }
        _ => FORWARD_TO.store(kernel, Ordering::SeqCst),
    }
    // Out of the launcher's process group, which the server kills when the kernel ends: this
    // process waits for what the kernel left outside its own group.
    // SAFETY: setpgid and sigaction on plain values; the handler only calls kill.
    unsafe {
        libc::setpgid(0, 0);
        let mut action = std::mem::zeroed::<libc::sigaction>();
        action.sa_sigaction = end_the_kernel as extern "C" fn(libc::c_int) as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(launcher_ended(), &action, std::ptr::null_mut());
    }
    if let Some((listener, proxy)) = listener {
        std::thread::spawn(move || forward_proxy(listener, proxy));
    }
    let mut status = Some(std::fs::File::from(status));
    loop {
        let mut raw = 0;
        // SAFETY: waitpid writes the status into `raw`.
        let reaped = unsafe { libc::waitpid(-1, &mut raw, 0) };
        if reaped == kernel {
            if let Some(mut status) = status.take() {
                let _ = status.write_all(&raw.to_ne_bytes());
            }
            end_the_kernel(libc::SIGKILL);
            // Its pid may be another process's from now on.
            FORWARD_TO.store(0, Ordering::SeqCst);
        }
        if reaped < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // Nothing left: ending here ends the namespace.
            // SAFETY: _exit ends this process.
            unsafe { libc::_exit(0) };
        }
    }
}

/// Kills the kernel and its process group (what it started and did not move out of it).
extern "C" fn end_the_kernel(_signal: libc::c_int) {
    let kernel = FORWARD_TO.load(Ordering::SeqCst);
    if kernel > 0 {
        // SAFETY: kill is async-signal-safe; the group is the kernel's own session's.
        unsafe {
            libc::kill(-kernel, libc::SIGKILL);
            libc::kill(kernel, libc::SIGKILL);
        }
    }
}

/// Sets the parent-death signal (the launcher's end ends the kernel: [`end_the_kernel`]) and
/// checks that the launcher did not end before.
fn die_with_launcher(alive: &OwnedFd) -> Result<(), String> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, launcher_ended()) } != 0 {
        return Err(format!(
            "PR_SET_PDEATHSIG: {}",
            std::io::Error::last_os_error()
        ));
    }
    let mut poll = libc::pollfd {
        fd: alive.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, no wait.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    if ready != 0 {
        return Err("the launcher ended".to_owned());
    }
    Ok(())
}

/// The kernel: no capability, `no_new_privs`, Landlock and seccomp, then its command.
fn kernel_process(plan: &Plan, command: Vec<OsString>) -> Result<Infallible, String> {
    // SAFETY: restoring the default disposition of the forwarded signals, and the mask.
    unsafe {
        for signal in FORWARDED {
            libc::signal(signal, libc::SIG_DFL);
        }
        let mut none = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
    if plan.probe {
        // SAFETY: the probe ends here, with success.
        unsafe { libc::_exit(0) };
    }
    // A session (and process group) of its own, which the first process kills when the kernel
    // ends; no controlling terminal.
    // SAFETY: setsid takes no arguments.
    if unsafe { libc::setsid() } < 0 {
        return Err(format!("setsid: {}", std::io::Error::last_os_error()));
    }
    drop_capabilities()?;
    crate::linux::confine_inside(plan.landlock, plan.private_temp, plan.offline_sockets)?;
    let mut command = command.into_iter();
    let program = command.next().expect("checked: a command");
    let error = std::os::unix::process::CommandExt::exec(
        std::process::Command::new(&program).args(command),
    );
    Err(format!("{}: {error}", Path::new(&program).display()))
}

/// Drops every capability the namespace gave (the bounding set first, which needs one).
fn drop_capabilities() -> Result<(), String> {
    for capability in 0..64 {
        // SAFETY: prctl with integer arguments; EINVAL past the last capability.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) };
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let data = [Data::default(); 2];
    // SAFETY: capset reads one header and two data structures.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        return Err(format!("capset: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The launcher outside: passes signals on to the first process (which passes them to the
/// kernel) and ends as soon as the kernel ends, as it ended.
fn monitor(first: libc::pid_t, status: OwnedFd) -> ! {
    FORWARD_TO.store(first, Ordering::SeqCst);
    forward_signals();
    let mut bytes = [0u8; 4];
    // The kernel's end, which the first process tells as soon as it reaps the kernel.
    if std::fs::File::from(status).read_exact(&mut bytes).is_ok() {
        end_as(i32::from_ne_bytes(bytes));
    }
    // The first process ended without telling (killed, say): as it ended.
    let mut raw_first = 0;
    loop {
        // SAFETY: waitpid writes the status into `raw_first`.
        let reaped = unsafe { libc::waitpid(first, &mut raw_first, 0) };
        if reaped == first {
            end_as(raw_first);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            end_as(libc::W_EXITCODE(i32::from(LAUNCH_FAILED), 0));
        }
    }
}

/// Ends this process as `status` says: the same exit code, or killed by the same signal.
fn end_as(status: libc::c_int) -> ! {
    // SAFETY: signal, setrlimit, raise and _exit on plain values.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(signal, libc::SIG_DFL);
            let mut only = std::mem::zeroed::<libc::sigset_t>();
            libc::sigemptyset(&mut only);
            libc::sigaddset(&mut only, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
            libc::raise(signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}

extern "C" fn pass_on(signal: libc::c_int) {
    let target = FORWARD_TO.load(Ordering::SeqCst);
    if target > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(target, signal) };
    }
}

fn forward_signals() {
    for signal in FORWARDED {
        // SAFETY: a handler that only calls kill; SA_RESTART keeps the waits going.
        unsafe {
            let mut action = std::mem::zeroed::<libc::sigaction>();
            action.sa_sigaction = pass_on as extern "C" fn(libc::c_int) as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Brings the namespace's loopback interface up.
fn loopback_up() -> Result<(), String> {
    let socket = std::net::UdpSocket::bind(("127.0.0.1", 0));
    // Binding fails while `lo` is down; any datagram socket does for the ioctl.
    let fd = match socket {
        Ok(socket) => OwnedFd::from(socket),
        Err(_) => {
            // SAFETY: socket takes integers and returns a new descriptor or -1.
            let raw =
                unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
            if raw < 0 {
                return Err(format!(
                    "a socket for loopback: {}",
                    std::io::Error::last_os_error()
                ));
            }
            // SAFETY: a descriptor just made and owned by nobody else.
            unsafe { OwnedFd::from_raw_fd(raw) }
        }
    };
    // SAFETY: an ifreq naming `lo`, read and written by SIOCSIFFLAGS only.
    unsafe {
        let mut request = std::mem::zeroed::<libc::ifreq>();
        for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *slot = *byte as libc::c_char;
        }
        request.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(fd.as_raw_fd(), libc::SIOCSIFFLAGS as _, &request) != 0 {
            return Err(format!(
                "bringing loopback up: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// Forwards each connection to the proxy's port inside to the proxy's Unix socket outside
/// (reached through the descriptor opened before its directory was covered).
fn forward_proxy(listener: std::net::TcpListener, proxy: OwnedFd) {
    let path = format!("/proc/self/fd/{}", proxy.as_raw_fd());
    for client in listener.incoming() {
        let Ok(client) = client else {
            continue;
        };
        let path = path.clone();
        std::thread::spawn(move || {
            let Ok(upstream) = std::os::unix::net::UnixStream::connect(&path) else {
                return;
            };
            let (Ok(mut client_in), Ok(mut upstream_out)) =
                (client.try_clone(), upstream.try_clone())
            else {
                return;
            };
            let up = std::thread::spawn(move || {
                let _ = std::io::copy(&mut client_in, &mut upstream_out);
                let _ = upstream_out.shutdown(std::net::Shutdown::Write);
            });
            let (mut upstream_in, mut client_out) = (upstream, client);
            let _ = std::io::copy(&mut upstream_in, &mut client_out);
            let _ = client_out.shutdown(std::net::Shutdown::Write);
            let _ = up.join();
        });
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both were just made and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{} holds a NUL byte", path.display()))
}

/// What covers a denied file: an empty file no one may read or write (mode 0: the kernel
/// has no capability to override it), in a detached tmpfs of its own; and its name there.
fn unreadable_file() -> Result<(OwnedFd, &'static Path), String> {
    let failed = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: fsopen, fsconfig and fsmount on the name and descriptors given; each new
    // descriptor is owned at once.
    let tmpfs = unsafe {
        let context = libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), libc::FSOPEN_CLOEXEC);
        if context < 0 {
            return Err(failed("fsopen tmpfs"));
        }
        let context = OwnedFd::from_raw_fd(context as RawFd);
        let created = libc::syscall(
            libc::SYS_fsconfig,
            context.as_raw_fd(),
            libc::FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        );
        if created != 0 {
            return Err(failed("fsconfig tmpfs"));
        }
        let mounted = libc::syscall(
            libc::SYS_fsmount,
            context.as_raw_fd(),
            libc::FSMOUNT_CLOEXEC,
            0,
        );
        if mounted < 0 {
            return Err(failed("fsmount tmpfs"));
        }
        OwnedFd::from_raw_fd(mounted as RawFd)
    };
    // SAFETY: openat on the tmpfs's root, a static name, mode 0.
    let file = unsafe {
        libc::openat(
            tmpfs.as_raw_fd(),
            c"denied".as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0,
        )
    };
    if file < 0 {
        return Err(failed("the cover file"));
    }
    // SAFETY: a descriptor just made: closed at once.
    unsafe { libc::close(file) };
    Ok((tmpfs, Path::new("denied")))
}

/// A detached, recursive clone of the mount tree at `path`.
fn clone_tree(path: &Path) -> Result<OwnedFd, String> {
    clone_tree_at(libc::AT_FDCWD, path)
}

/// A detached, recursive clone of the mount tree at `path` from `dir`.
fn clone_tree_at(dir: RawFd, path: &Path) -> Result<OwnedFd, String> {
    let name = c_path(path)?;
    // SAFETY: open_tree reads the path and returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            dir,
            name.as_ptr(),
            libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_RECURSIVE as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(format!(
            "cloning {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a descriptor just made and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Puts a detached tree at `target`.
fn attach(tree: OwnedFd, target: &Path) -> std::io::Result<()> {
    let target = c_path(target).map_err(std::io::Error::other)?;
    // SAFETY: move_mount reads the empty path and the target's.
    let moved = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if moved != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes a mount read-only: a detached `tree`, or the mount at `path`; with what lies below it
/// when `recursive`.
fn set_read_only(
    tree: Option<&OwnedFd>,
    path: Option<&Path>,
    recursive: bool,
) -> std::io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let (fd, name, mut flags) = match (tree, path) {
        (Some(tree), _) => (tree.as_raw_fd(), CString::default(), libc::AT_EMPTY_PATH),
        (None, Some(path)) => (
            libc::AT_FDCWD,
            c_path(path).map_err(std::io::Error::other)?,
            0,
        ),
        (None, None) => return Ok(()),
    };
    if recursive {
        flags |= libc::AT_RECURSIVE;
    }
    // SAFETY: mount_setattr reads the path and `attr` of the size given.
    let set = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            name.as_ptr(),
            flags as libc::c_uint,
            &attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if set != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn tmpfs(target: &Path, options: &str) -> std::io::Result<()> {
    sys_mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(options),
    )
    .map_err(std::io::Error::other)
}

fn sys_mount(
    source: Option<&str>,
    target: &Path,
    kind: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    let text = |text: Option<&str>| text.map(|text| CString::new(text).expect("no NUL"));
    let (source, kind, data) = (text(source), text(kind), text(data));
    let target = c_path(target)?;
    let pointer =
        |text: &Option<CString>| text.as_ref().map_or(std::ptr::null(), |text| text.as_ptr());
    // SAFETY: mount reads the strings given (or null).
    let mounted = unsafe {
        libc::mount(
            pointer(&source),
            target.as_ptr(),
            pointer(&kind),
            flags,
            pointer(&data).cast(),
        )
    };
    if mounted != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(())
}
