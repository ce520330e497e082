//! Starting a kernel process: its private run directory and connection file, the command, the
//! process group and death watch, the stderr tail and the exit watch. Connecting to the started
//! process is `kernel.rs`'s part.
//!
//! By default we launch ipykernel ourselves, as `<python> -m ipykernel_launcher -f <conn.json>`
//! would but with a safe path ([`safe_module`]); a kernelspec's argv is launched as given (the
//! caller fills in what only it knows, like `{resource_dir}`), except that a plain
//! `<python> -m ipykernel_launcher` (or `-m ipykernel`) gets the same safe path. The runtimed
//! crate's kernelspec launcher is not used: it runs `python` from PATH and does not substitute
//! `{resource_dir}`.

use std::ffi::OsString;
use std::fmt;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use jupyter_protocol::connection_info::Transport;
use jupyter_protocol::ConnectionInfo;
use tokio::io::AsyncReadExt as _;
use tokio::sync::watch;

use crate::error::Error;
use crate::memory::{self, Enforcement, Enforcer, MemoryBound, MemoryPolicy, Meter};
use crate::route::Router;

/// How to start a kernel.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    /// The Python interpreter of the default command (it must have ipykernel).
    pub python: PathBuf,
    /// Extra environment variables for the kernel process.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory of the kernel; `None` keeps ours.
    pub working_dir: Option<PathBuf>,
    /// How to interrupt it (a kernelspec's `interrupt_mode`).
    pub interrupt_mode: InterruptMode,
    /// A kernelspec's command line, run exactly as given instead of
    /// `<python> -m ipykernel_launcher`: `{connection_file}` is replaced by the connection
    /// file's path, and [`IPYKERNEL_OPTIONS`] are appended only when it runs ipykernel
    /// ([`runs_ipykernel`]) and does not set them itself.
    pub argv: Option<Vec<String>>,
    /// The connection file's `kernel_name`.
    pub kernel_name: Option<String>,
    /// The memory limit of the kernel's process tree, and how it is enforced.
    pub memory: MemoryPolicy,
    /// The OS sandbox of the kernel and everything it starts; `None`: none.
    pub sandbox: Option<Arc<ipython_mcp_sandbox::Policy>>,
    /// Where the kernel's run directory is made: the server's [`PrivateDir`], which the
    /// sandbox keeps from every other kernel.
    ///
    /// [`PrivateDir`]: crate::private_dir::PrivateDir
    pub run_dir_in: PathBuf,
    /// Directories there that are the kernel's own besides its run directory (its session's
    /// output spool): the sandbox gives them back to it.
    pub own_dirs: Vec<PathBuf>,
}

/// The ipykernel options every ipykernel we start gets. History in memory only: on disk it
/// costs ~17 ms on a third of cells, and `enabled=False` makes ipykernel 7.4 hang at shutdown.
/// No colours: tracebacks reach agents as text.
pub const IPYKERNEL_OPTIONS: [&str; 2] = [
    "--HistoryManager.hist_file=:memory:",
    "--InteractiveShell.colors=nocolor",
];

/// The arguments that make a Python run `module` as `-m module` does, but without the working
/// directory first on `sys.path`. `-m` puts it there, so a file in the kernel's directory named
/// like the module or anything it imports at start (`ipykernel_launcher.py`, `ipykernel.py`)
/// would run instead, in every kernel started there: files the notebook tools can write must
/// not become code. `-P` (Python 3.11+) says the same, but older Pythons refuse it; this works
/// in every version. IPython adds the directory back, after the standard library, once the
/// kernel has started, so a cell can still import the workspace's modules.
///
/// With `guard` (the kernel's IPC endpoint prefix, `ipc://<dir>/k-`) the kernel's channels
/// also accept connections from the server's process alone.
///
/// Landlock cannot keep one kernel from connecting to another's Unix sockets (only the
/// signing key, in the run directory the sandbox denies, keeps it from sending requests), so
/// without this it could subscribe to another kernel's output broadcast. libzmq checks each
/// connecting process's pid (`SO_PEERCRED`) against `ZMQ_IPC_FILTER_PID`, set here on every
/// socket bound to the kernel's own endpoints before it binds. A kernel whose libzmq cannot
/// filter fails to start: a sandbox that cannot keep its promise refuses, as elsewhere.
fn safe_module(module: &str, guard: Option<&str>) -> [String; 2] {
    let path = "import sys;sys.path[:1]=[p for p in sys.path[:1] if p]";
    let run =
        format!("import runpy;runpy.run_module({module:?},run_name='__main__',alter_sys=True)");
    let code = match guard {
        None => format!("{path};{run}"),
        Some(prefix) => {
            let server = std::process::id();
            // A JSON string is a valid Python literal for any path (Rust's `{:?}` is not).
            let prefix = serde_json::to_string(prefix).expect("a string serializes");
            format!(
                "{path}\nimport zmq\n_b=zmq.Socket.bind\ndef _g(s,a,_b=_b):\n if isinstance(a,str) and a.startswith({prefix}):s.setsockopt(zmq.IPC_FILTER_PID,{server})\n return _b(s,a)\nzmq.Socket.bind=_g\ndel _g,_b\n{run}"
            )
        }
    };
    ["-c".to_owned(), code]
}

/// A kernelspec's command line with a plain `<python> -m ipykernel_launcher …` (or
/// `-m ipykernel`) run with a safe path instead ([`safe_module`]); any other as given (a
/// wrapper script may not take `-c`).
fn with_safe_path(argv: &[String], guard: Option<&str>) -> Vec<String> {
    let is_python = |program: &str| {
        std::path::Path::new(program)
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| name.starts_with("python"))
    };
    match argv {
        [python, flag, module, rest @ ..]
            if is_python(python)
                && flag == "-m"
                && matches!(module.as_str(), "ipykernel_launcher" | "ipykernel") =>
        {
            let mut safe = vec![python.clone()];
            safe.extend(safe_module(module, guard));
            safe.extend(rest.iter().cloned());
            safe
        }
        _ => argv.to_vec(),
    }
}

/// Whether a command line runs ipykernel, so that it takes ipykernel's options: it has
/// `-m ipykernel_launcher` (or `-m ipykernel`) anywhere, which covers wrappers such as
/// `conda run … python -m ipykernel_launcher`, or its program is an `ipykernel` script.
/// A command that hides ipykernel inside (`sh -c "…"`, a script with fixed arguments) does not,
/// and gets nothing appended.
pub fn runs_ipykernel(argv: &[String]) -> bool {
    let program_is_ipykernel = argv.first().is_some_and(|program| {
        std::path::Path::new(program)
            .file_name()
            .is_some_and(|name| name == "ipykernel" || name == "ipykernel_launcher")
    });
    program_is_ipykernel
        || argv.windows(2).any(|pair| {
            pair[0] == "-m" && matches!(pair[1].as_str(), "ipykernel_launcher" | "ipykernel")
        })
}

/// The options of [`IPYKERNEL_OPTIONS`] that `argv` does not set itself (a kernelspec's own
/// `--HistoryManager.hist_file=…` wins).
fn missing_ipykernel_options(argv: &[String]) -> impl Iterator<Item = &'static str> + '_ {
    IPYKERNEL_OPTIONS.into_iter().filter(move |option| {
        let name = option.split('=').next().unwrap_or(option);
        !argv.iter().any(|arg| {
            arg == name
                || arg
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('='))
        })
    })
}

/// How a kernel is interrupted, as its kernelspec's `interrupt_mode` says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InterruptMode {
    /// SIGINT to the kernel process (Jupyter's default).
    #[default]
    Signal,
    /// An `interrupt_request` on the control channel.
    Message,
}

/// How a kernel process ended, as precisely as the evidence allows: a memory verdict is
/// certain only when the server's watchdog killed the kernel or its cgroup counted an
/// `oom_kill`; a SIGKILL near a bound is told as likely, never as fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelExit {
    /// It exited by itself (`sys.exit`, `os._exit`, a crash that exits) with this status.
    Code(i32),
    /// A signal ended it (no evidence of memory pressure, or the server sent it).
    Signal(i32),
    /// Killed for exceeding its memory limit: by the watchdog, or its cgroup's OOM killer.
    OutOfMemory {
        limit_bytes: u64,
        peak_bytes: u64,
        enforcer: Enforcer,
    },
    /// A `signal` (SIGKILL) the server did not send, while the tree's peak was near `bound`:
    /// likely the system's out-of-memory killer, but not known.
    LikelyOutOfMemory {
        signal: i32,
        peak_bytes: u64,
        bound_bytes: u64,
        bound: MemoryBound,
    },
    /// We could not wait for the process (it is gone either way).
    Unknown(String),
}

impl KernelExit {
    /// The limit and the peak, when the kernel certainly ran out of memory.
    pub fn out_of_memory(&self) -> Option<(u64, u64)> {
        match self {
            KernelExit::OutOfMemory {
                limit_bytes,
                peak_bytes,
                ..
            } => Some((*limit_bytes, *peak_bytes)),
            _ => None,
        }
    }
}

/// `killed by SIGSEGV (signal 11)`, or by number alone for a signal we do not name.
struct Killed(i32);

impl fmt::Display for Killed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match memory::signal_name(self.0) {
            Some(name) => write!(f, "killed by {name} (signal {})", self.0),
            None => write!(f, "killed by signal {}", self.0),
        }
    }
}

impl fmt::Display for KernelExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use memory::human_bytes as human;
        match self {
            KernelExit::Code(code) => write!(f, "exited with status {code}"),
            KernelExit::Signal(signal) => Killed(*signal).fmt(f),
            KernelExit::OutOfMemory {
                limit_bytes,
                peak_bytes,
                enforcer: Enforcer::Watchdog,
            } => write!(
                f,
                "its processes grew past their {} limit ({} seen) and the server's memory watchdog killed them",
                human(*limit_bytes),
                human(*peak_bytes)
            ),
            KernelExit::OutOfMemory {
                limit_bytes,
                peak_bytes,
                enforcer: Enforcer::Cgroup,
            } => write!(
                f,
                "its processes reached their {} limit ({} seen) and the system's out-of-memory killer ended them in their cgroup",
                human(*limit_bytes),
                human(*peak_bytes)
            ),
            KernelExit::LikelyOutOfMemory {
                signal,
                peak_bytes,
                bound_bytes,
                bound,
            } => {
                let bound = match bound {
                    MemoryBound::Limit => format!("its {} limit", human(*bound_bytes)),
                    MemoryBound::Machine => format!("the machine's {}", human(*bound_bytes)),
                };
                write!(
                    f,
                    "{}, likely by the system's out-of-memory killer: its processes had used up to {} of {bound}",
                    Killed(*signal),
                    human(*peak_bytes)
                )
            }
            KernelExit::Unknown(message) => write!(f, "unknown exit: {message}"),
        }
    }
}

impl From<ExitStatus> for KernelExit {
    fn from(status: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt as _;
        match (status.code(), status.signal()) {
            (Some(code), _) => KernelExit::Code(code),
            (None, Some(signal)) => KernelExit::Signal(signal),
            (None, None) => KernelExit::Unknown(status.to_string()),
        }
    }
}

/// Whether kernels die with the server through the pipe watch rather than Linux's
/// parent-death signal: always off Linux, where there is no such signal.
static PIPE_DEATH_WATCH: AtomicBool = AtomicBool::new(!cfg!(target_os = "linux"));

/// Makes every kernel launched from now on die with the server through the portable pipe
/// watch, which other Unix systems always use, instead of Linux's parent-death signal. For the
/// project's tests on Linux, so that the fallback runs where CI runs.
pub fn use_pipe_death_watch() {
    PIPE_DEATH_WATCH.store(true, Ordering::SeqCst);
}

/// The watcher of the pipe watch: a shell whose stdin is a pipe only the server can write to.
/// `read` returns at end of file, which comes when the server's end closes — when the server
/// exits, however it dies (SIGKILL included) — and then it kills its process group, which
/// holds the kernel and whatever the kernel forked.
const WATCHER_SCRIPT: &str = "read -r line; kill -s KILL 0";

/// The kernel process and its private directory.
pub(crate) struct Process {
    pub(crate) pid: u32,
    /// The kernel's own pid, when it runs under the sandbox's namespaces launcher (`pid` is
    /// the launcher's, which passes signals on): reported, so that every signal a person sends
    /// it (SIGSTOP too, which no process can pass on) reaches the kernel. Set once the kernel
    /// answers.
    pub(crate) kernel_pid: std::sync::OnceLock<u32>,
    /// The process group to kill: the kernel's own, or the watcher's under the pipe watch.
    group: u32,
    // Dropping it closes the pipe, and the watcher kills the group (a backstop behind
    // `kill_group`).
    _death_watch: Option<tokio::process::ChildStdin>,
    pub(crate) exit: watch::Receiver<Option<KernelExit>>,
    /// The tree's memory, as sampled.
    pub(crate) meter: Arc<Meter>,
    /// The kernel's sandbox, kept while it runs (dropping it removes the kernel's pids
    /// group); `None`: it has none.
    pub(crate) sandbox: Option<Arc<ipython_mcp_sandbox::Prepared>>,
    stderr_tail: Arc<Mutex<Tail>>,
    // Removed on drop (on the blocking pool): connection file and IPC socket files live here.
    // `None` only while dropping.
    pub(crate) run_dir: Option<tempfile::TempDir>,
    /// The exit watch and (under the pipe watch) the watcher's reaper: they end with the
    /// process group. `join` waits for them, a drop aborts them.
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Reads stderr into the tail until end of file, which a process that left the group can
    /// hold off for ever: `join` stops it, a drop aborts it.
    stderr_reader: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Process {
    pub(crate) fn signal(&self, signal: libc::c_int) {
        if self.exit.borrow().is_none() {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is our child, not yet
            // reaped (exit is None), so it cannot have been recycled.
            unsafe { libc::kill(self.pid as libc::pid_t, signal) };
        }
    }

    pub(crate) fn kill_group(&self) {
        if self.exit.borrow().is_none() {
            self.meter.killed_by_server();
            // SAFETY: as above; the group holds the kernel (and the watcher under the pipe
            // watch), so it still exists and this reaches anything the kernel forked too.
            unsafe { libc::killpg(self.group as libc::pid_t, libc::SIGKILL) };
        }
    }

    pub(crate) fn stderr_tail(&self) -> String {
        self.stderr_tail.lock().expect("tail lock").text()
    }

    /// After a kill: waits until `deadline` for the tasks that end with the process group,
    /// aborting them then, and stops the stderr reader (nothing it could still read is needed).
    pub(crate) async fn join(&self, deadline: tokio::time::Instant) {
        let mut tasks = std::mem::take(&mut *self.tasks.lock().expect("tasks lock"));
        if let Some(reader) = self.stderr_reader.lock().expect("reader lock").take() {
            reader.abort();
            tasks.push(reader);
        }
        crate::task::join("kernel process", tasks, deadline).await;
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Backstop for every path that drops a kernel without shutting it down, including a
        // launch abandoned half-way (its future dropped during shutdown).
        self.kill_group();
        let tasks = self.tasks.get_mut().expect("tasks lock");
        let reader = self.stderr_reader.get_mut().expect("reader lock");
        for task in tasks.iter().chain(reader.iter()) {
            task.abort();
        }
        // Removing the directory is file work: off the async threads when a runtime is there.
        // Should the pool be gone (the runtime shutting down), the task is dropped, and dropping
        // it removes the directory right here.
        if let Some(run_dir) = self.run_dir.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(move || drop(run_dir))),
                Err(_) => drop(run_dir),
            }
        }
    }
}

impl Process {
    /// Under the namespaces' launcher, finds the kernel: the only child of the launcher's only
    /// child (the PID namespace's first process), as the host numbers it.
    pub(crate) fn find_namespaced_kernel(&self) {
        if !self
            .sandbox
            .as_ref()
            .is_some_and(|prepared| prepared.namespaced())
        {
            return;
        }
        let first_child = |pid: u32| -> Option<u32> {
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .ok()?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        if let Some(kernel) = first_child(self.pid).and_then(first_child) {
            let _ = self.kernel_pid.set(kernel);
        }
    }
}

/// The last few KiB a process wrote to stderr.
#[derive(Default)]
struct Tail {
    bytes: Vec<u8>,
}

impl Tail {
    const MAX: usize = 4096;

    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > Self::MAX {
            let cut = self.bytes.len() - Self::MAX;
            self.bytes.drain(..cut);
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).trim().to_owned()
    }
}

/// Starts the kernel process (and, under the pipe watch, its watcher) with its run directory,
/// the stderr tail and the exit watch; connecting to it is [`Kernel::launch`]'s part.
///
/// [`Kernel::launch`]: crate::Kernel::launch
pub(crate) async fn spawn(
    spec: &LaunchSpec,
) -> Result<(Arc<Process>, ConnectionInfo, Arc<Router>), Error> {
    let (run_dir, connection, connection_file) = make_run_dir(spec).await?;
    let mut sandbox = sandbox(spec, run_dir.path()).await?;
    let prefix = sandbox
        .as_ref()
        .and_then(ipython_mcp_sandbox::Prepared::command_prefix)
        .unwrap_or_default()
        .to_vec();
    // A sandboxed kernel's channels take connections from the server alone ([`safe_module`]);
    // on macOS the Seatbelt profile keeps other kernels off its sockets instead, and in
    // namespaces no other kernel sees its run directory (nor could the server's pid be
    // checked: it is outside the kernel's PID namespace).
    let guard = sandbox
        .as_ref()
        .filter(|prepared| {
            cfg!(target_os = "linux") && prepared.report().enforced && !prepared.namespaced()
        })
        .map(|_| format!("ipc://{}-", connection.ip));
    let (program, mut command, guarded) =
        kernel_command(spec, &connection_file, &prefix, guard.as_deref());
    if let (Some(prepared), Some(_), false) = (sandbox.as_mut(), &guard, guarded) {
        prepared.add_limit(
            "other kernels can connect to this one's channels and read its output: its command is not a plain `python -m ipykernel_launcher`, so they could not be restricted to the server".to_owned(),
        );
    }
    let sandbox = sandbox.map(Arc::new);
    // Started first and leading the group the kernel joins, so no moment exists when the
    // kernel runs and nothing would kill it if the server died.
    let death_watch = if PIPE_DEATH_WATCH.load(Ordering::SeqCst) {
        Some(spawn_watcher()?)
    } else {
        None
    };
    isolate(
        &mut command,
        spec,
        death_watch.as_ref().map(|(pid, _, _)| *pid),
    );
    #[cfg(target_os = "linux")]
    if death_watch.is_none() {
        die_with_parent(&mut command);
    }
    // The kernel's own cgroup, where one may be made: the child writes itself into it before
    // it execs (async-signal-safe open/write/close), so none of its memory is ever charged
    // outside the group, which writing the pid after the spawn could not promise.
    let group = match spec.memory {
        MemoryPolicy {
            limit_bytes: Some(limit),
            enforcement: Enforcement::Auto,
        } => kernel_group(limit).await,
        _ => None,
    };
    if let Some(group) = &group {
        join_group_before_exec(&mut command, group);
    }
    let enforcer = match (spec.memory.limit_bytes, &group) {
        (None, _) => None,
        (Some(_), Some(_)) => Some(Enforcer::Cgroup),
        (Some(_), None) => Some(Enforcer::Watchdog),
    };
    let meter = Arc::new(Meter::new(spec.memory.limit_bytes, enforcer));
    // Last: the child joins its cgroup before the sandbox closes /sys to it.
    if let Some(prepared) = &sandbox {
        apply_sandbox_before_exec(&mut command, Arc::clone(prepared));
    }
    if let Some(policy) = &spec.sandbox {
        command.envs(policy.kernel_env());
        if let Some(prepared) = &sandbox {
            command.envs(
                prepared
                    .command_env()
                    .iter()
                    .map(|(name, value)| (name, value)),
            );
        }
        // Agents' sockets (ssh-agent, the session bus) would act for the kernel with what the
        // sandbox keeps from it: gone from an enforced sandbox's kernel, given or inherited.
        if sandbox
            .as_ref()
            .is_some_and(|prepared| prepared.report().enforced)
        {
            for name in policy.kernel_env_removed() {
                command.env_remove(name);
            }
        }
    }
    let spawned = command.spawn();
    if let (Err(_), Some(group)) = (&spawned, &group) {
        group.remove();
    }
    let child = spawned.map_err(|error| Error::Spawn {
        program,
        message: error.to_string(),
    })?;
    let (process, router) = supervise(child, death_watch, group, meter, run_dir, sandbox);
    Ok((process, connection, router))
}

/// The kernel's sandbox made ready for its directories (on the blocking pool: it reads the
/// file system), or why it cannot be had.
async fn sandbox(
    spec: &LaunchSpec,
    run_dir: &std::path::Path,
) -> Result<Option<ipython_mcp_sandbox::Prepared>, Error> {
    let Some(policy) = spec.sandbox.clone() else {
        return Ok(None);
    };
    let mut own = vec![run_dir.to_owned()];
    own.extend(spec.own_dirs.iter().cloned());
    let dirs = ipython_mcp_sandbox::KernelDirs {
        working_dir: spec.working_dir.clone(),
        python: Some(spec.python.clone()),
        own,
    };
    tokio::task::spawn_blocking(move || policy.prepare(&dirs))
        .await
        .unwrap_or_else(|_| {
            Err(ipython_mcp_sandbox::Error::Rules(
                "preparing the sandbox failed".to_owned(),
            ))
        })
        .map(Some)
        .map_err(|error| Error::Sandbox {
            message: error.to_string(),
        })
}

/// Makes the child apply the sandbox to itself, after every other step before exec.
fn apply_sandbox_before_exec(
    command: &mut tokio::process::Command,
    prepared: Arc<ipython_mcp_sandbox::Prepared>,
) {
    // SAFETY: `apply_in_child` makes only async-signal-safe calls on memory prepared before
    // the fork (its contract).
    unsafe {
        command.pre_exec(move || prepared.apply_in_child());
    }
}

/// The record of a just-spawned kernel and the tasks it keeps: the stderr reader, the memory
/// sampler, the exit watch and, under the pipe watch, the watcher's reaper. Also returns the
/// router, which the exit watch closes once the kernel is gone.
fn supervise(
    mut child: tokio::process::Child,
    death_watch: Option<(u32, tokio::process::ChildStdin, tokio::task::JoinHandle<()>)>,
    group: Option<memory::Group>,
    meter: Arc<Meter>,
    run_dir: tempfile::TempDir,
    sandbox: Option<Arc<ipython_mcp_sandbox::Prepared>>,
) -> (Arc<Process>, Arc<Router>) {
    let pid = child.id().expect("a just-spawned child has a pid");
    let (process_group, death_watch, watcher_reaper) = match death_watch {
        Some((watcher, pipe, reaper)) => (watcher, Some(pipe), Some(reaper)),
        None => (pid, None, None),
    };

    // Each task the process needs is kept in `Process`, which stops them.
    let mut tasks = Vec::from_iter(watcher_reaper);
    let stderr_tail = Arc::new(Mutex::new(Tail::default()));
    let stderr_reader = child
        .stderr
        .take()
        .map(|stderr| read_stderr(stderr, Arc::clone(&stderr_tail)));

    let router = Arc::new(Router::default());
    let (exit_sender, exit) = watch::channel(None);
    tasks.push(tokio::spawn(memory::sample(
        pid,
        process_group,
        Arc::clone(&meter),
        group.as_ref().map(|group| group.dir.clone()),
        exit.clone(),
    )));
    tasks.push(tokio::spawn(watch_exit(
        child,
        pid,
        process_group,
        group,
        Arc::clone(&meter),
        Arc::clone(&router),
        exit_sender,
    )));
    let process = Arc::new(Process {
        pid,
        kernel_pid: std::sync::OnceLock::new(),
        group: process_group,
        _death_watch: death_watch,
        exit,
        meter,
        sandbox,
        stderr_tail,
        run_dir: Some(run_dir),
        tasks: Mutex::new(tasks),
        stderr_reader: Mutex::new(stderr_reader),
    });
    (process, router)
}

/// The kernel's run directory, connection and connection file, made on the blocking pool: a
/// slow temp volume must not stall the async threads that serve every other session.
async fn make_run_dir(
    spec: &LaunchSpec,
) -> Result<(tempfile::TempDir, ConnectionInfo, PathBuf), Error> {
    let kernel_name = spec
        .kernel_name
        .clone()
        .unwrap_or_else(|| "python3".to_owned());
    let parent = spec.run_dir_in.clone();
    tokio::task::spawn_blocking(move || create_run_dir(kernel_name, &parent))
        .await
        .map_err(|error| Error::RunDir {
            message: error.to_string(),
        })?
        .map_err(|error| Error::RunDir {
            message: error.to_string(),
        })
}

/// The kernel's command line and the program it runs (named in a spawn error): the
/// kernelspec's argv when there is one, else ipykernel under our Python, with a safe path.
fn kernel_command(
    spec: &LaunchSpec,
    connection_file: &std::path::Path,
    prefix: &[String],
    guard: Option<&str>,
) -> (String, tokio::process::Command, bool) {
    let mut guarded = guard.is_some();
    let (program, args): (OsString, Vec<OsString>) = match &spec.argv {
        Some(argv) if !argv.is_empty() => {
            let file = connection_file.display().to_string();
            let safe = with_safe_path(argv, guard);
            guarded &= safe != argv.as_slice();
            let mut args: Vec<OsString> = safe[1..]
                .iter()
                .map(|arg| arg.replace("{connection_file}", &file).into())
                .collect();
            if runs_ipykernel(argv) {
                args.extend(missing_ipykernel_options(argv).map(OsString::from));
            }
            (argv[0].clone().into(), args)
        }
        _ => {
            let mut args: Vec<OsString> = safe_module("ipykernel_launcher", guard)
                .into_iter()
                .map(OsString::from)
                .collect();
            args.push("-f".into());
            args.push(connection_file.into());
            args.extend(IPYKERNEL_OPTIONS.iter().map(OsString::from));
            (spec.python.clone().into_os_string(), args)
        }
    };
    // A sandbox that runs the kernel under another program (macOS: sandbox-exec) goes first.
    let mut command = match prefix.split_first() {
        Some((runner, runner_args)) => {
            let mut command = tokio::process::Command::new(runner);
            command.args(runner_args).arg(&program);
            command
        }
        None => tokio::process::Command::new(&program),
    };
    command.args(args);
    (program.to_string_lossy().into_owned(), command, guarded)
}

/// Gives the kernel its environment and working directory, keeps its stdio off ours (only
/// stderr is read, for the tail), and takes the server's controlling terminal from it: it
/// leads a session and process group of its own, or (under the pipe watch) joins the
/// watcher's group, so that one kill reaches everything it forks.
///
/// A process that keeps the terminal can open `/dev/tty` and type into the user's shell
/// (`TIOCSTI`). A process cannot join a group of another session, so under the pipe watch the
/// kernel stays in the server's session, joins the watcher's group and gives the terminal up
/// (`TIOCNOTTY`): without being a session leader it can never take it back.
fn isolate(command: &mut tokio::process::Command, spec: &LaunchSpec, watcher: Option<u32>) {
    command
        .env("PYDEVD_DISABLE_FILE_VALIDATION", "1")
        .envs(spec.env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match watcher {
        Some(pid) => {
            command.process_group(pid as libc::pid_t);
            leave_terminal(command);
        }
        // `setsid` makes it the leader of a new group too, with its pid as the group's id
        // (and a group leader could not call it: no `process_group(0)` here).
        None => new_session(command),
    }
    if let Some(dir) = &spec.working_dir {
        command.current_dir(dir);
    }
}

/// Makes a kernel lead a new session, and so a new process group, without a controlling
/// terminal: it cannot open `/dev/tty` and type into the user's shell. Not for a command given
/// a process group of its own (a group leader cannot start a session).
fn new_session(command: &mut tokio::process::Command) {
    // SAFETY: the closure runs in the forked child before exec and only calls setsid, which is
    // async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes a child give up its controlling terminal, where it has one, while staying in its
/// session.
fn leave_terminal(command: &mut tokio::process::Command) {
    // SAFETY: the closure runs in the forked child before exec and only calls
    // async-signal-safe functions (open, ioctl, close) on a static path.
    unsafe {
        command.pre_exec(|| {
            let fd = libc::open(
                c"/dev/tty".as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            // No controlling terminal (ENXIO), or none we may open: nothing to give up.
            if fd < 0 {
                return Ok(());
            }
            let given_up = libc::ioctl(fd, libc::TIOCNOTTY);
            let error = std::io::Error::last_os_error();
            libc::close(fd);
            if given_up != 0 {
                return Err(error);
            }
            Ok(())
        });
    }
}

/// Makes a kernel die with the server, however the server dies (a SIGKILL runs none of its
/// cleanup), through Linux's parent-death signal.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut tokio::process::Command) {
    let parent_pid = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and only calls
    // async-signal-safe functions (prctl, getppid, _exit).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody would signal us.
            if libc::getppid() != parent_pid {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Makes the child write itself into `group` before it execs.
fn join_group_before_exec(command: &mut tokio::process::Command, group: &memory::Group) {
    let procs = group.procs();
    // SAFETY: the closure runs in the forked child before exec and only calls
    // async-signal-safe functions (open, write, close) on memory prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
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
            Ok(())
        });
    }
}

/// Reads the kernel's stderr into `tail` until end of file.
fn read_stderr(
    mut stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<Tail>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 8192];
        while let Ok(read) = stderr.read(&mut buffer).await {
            if read == 0 {
                break;
            }
            tail.lock().expect("tail lock").push(&buffer[..read]);
        }
    })
}

/// Waits for the kernel to exit, then kills what it left in its process group, removes its
/// cgroup, and publishes how it ended.
async fn watch_exit(
    mut child: tokio::process::Child,
    pid: u32,
    process_group: u32,
    group: Option<memory::Group>,
    meter: Arc<Meter>,
    router: Arc<Router>,
    exit_sender: watch::Sender<Option<KernelExit>>,
) {
    let status = match child.wait().await {
        Ok(status) => explain(KernelExit::from(status), &meter, group.as_ref()),
        Err(error) => KernelExit::Unknown(error.to_string()),
    };
    // The kernel may have left children behind (subprocesses of user code) in its
    // process group. The group id cannot be reused while members remain, so this
    // reaches exactly them (and the watcher, under the pipe watch).
    // SAFETY: killpg(2) has no memory-safety preconditions.
    unsafe { libc::killpg(process_group as libc::pid_t, libc::SIGKILL) };
    if let Some(group) = group {
        drop(tokio::task::spawn_blocking(move || group.remove()));
    }
    tracing::debug!(pid, %status, "kernel process exited");
    // Order matters: mark the exit first so new requests fail, then close receivers.
    exit_sender.send_replace(Some(status));
    router.close_all();
}

/// A kernel's cgroup with `limit`, where the server may make one; otherwise `None` (the
/// watchdog enforces the limit), and the reason is logged once.
async fn kernel_group(limit: u64) -> Option<memory::Group> {
    let parent = match memory::cgroup_parent() {
        Ok(parent) => parent,
        Err(why) => {
            static TOLD: std::sync::Once = std::sync::Once::new();
            TOLD.call_once(|| tracing::info!(%why, "no cgroup for kernels: their memory limit is enforced by the watchdog"));
            return None;
        }
    };
    match tokio::task::spawn_blocking(move || memory::create_group(parent, limit)).await {
        Ok(Ok(group)) => Some(group),
        Ok(Err(error)) => {
            tracing::warn!(%error, "could not make the kernel's cgroup; the watchdog enforces its memory limit");
            None
        }
        Err(_) => None,
    }
}

/// How the kernel ended, with what the memory evidence says of a SIGKILL.
fn explain(exit: KernelExit, meter: &Meter, group: Option<&memory::Group>) -> KernelExit {
    match exit {
        KernelExit::Signal(libc::SIGKILL) => match memory::judge(meter, group) {
            memory::Verdict::OutOfMemory {
                limit_bytes,
                peak_bytes,
                enforcer,
            } => KernelExit::OutOfMemory {
                limit_bytes,
                peak_bytes,
                enforcer,
            },
            memory::Verdict::Likely {
                peak_bytes,
                bound_bytes,
                bound,
            } => KernelExit::LikelyOutOfMemory {
                signal: libc::SIGKILL,
                peak_bytes,
                bound_bytes,
                bound,
            },
            memory::Verdict::None => exit,
        },
        exit => exit,
    }
}

/// Starts the pipe watch's watcher as the leader of a new process group, its stdin the pipe's
/// read end (the write end, in `stdin`, is the server's alone: Rust makes every pipe
/// close-on-exec, so no other child inherits it). `what` names it in errors.
fn start_watcher(what: &str) -> Result<tokio::process::Child, Error> {
    tokio::process::Command::new("/bin/sh")
        .args(["-c", WATCHER_SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|error| Error::Spawn {
            program: format!("/bin/sh ({what} watcher)"),
            message: error.to_string(),
        })
}

/// Starts the pipe watch's watcher for a kernel; returns its pid, the pipe's write end, which
/// must stay open as long as the kernel may live, and its reaper.
fn spawn_watcher() -> Result<(u32, tokio::process::ChildStdin, tokio::task::JoinHandle<()>), Error>
{
    let mut watcher = start_watcher("kernel")?;
    let pid = watcher.id().expect("a just-spawned child has a pid");
    let pipe = watcher.stdin.take().ok_or_else(|| Error::Spawn {
        program: "/bin/sh (kernel watcher)".to_owned(),
        message: "no stdin pipe".to_owned(),
    })?;
    // Reaps it once its group is killed; not kill_on_drop, since outliving a dropped runtime
    // to kill the group is its whole point (should the reaper be aborted, tokio reaps it).
    let reaper = tokio::spawn(async move {
        let _ = watcher.wait().await;
    });
    Ok((pid, pipe, reaper))
}

/// A process group that ends with the server, for a child that is not a kernel (an upstream
/// MCP server): the pipe watch's watcher leads it, and the commands [`join`](Self::join)ed to
/// it run in it with everything they start. However the server ends (a SIGKILL included) the
/// watcher reads the end of its pipe and kills the group; dropping this kills it at once.
///
/// Linux's parent-death signal would reach the direct child alone: a launcher's own child
/// (`npx`'s node, a shell script's command) that ignores the end of its input would live on.
/// Starts within a Tokio runtime (its process driver).
pub struct GroupWatch {
    /// Never waited for before the group is killed: while it is not reaped its pid, the
    /// group's id, cannot name another process or group, so the kill reaches this group only.
    watcher: tokio::process::Child,
    /// The pipe's write end: closing it (the server ending) makes the watcher kill the group.
    _pipe: tokio::process::ChildStdin,
}

impl GroupWatch {
    pub fn start() -> Result<GroupWatch, Error> {
        let mut watcher = start_watcher("process group")?;
        let pipe = watcher.stdin.take().ok_or_else(|| Error::Spawn {
            program: "/bin/sh (process group watcher)".to_owned(),
            message: "no stdin pipe".to_owned(),
        })?;
        Ok(GroupWatch {
            watcher,
            _pipe: pipe,
        })
    }

    /// Makes `command`'s process join the group before it execs and give up the server's
    /// controlling terminal: it stays in the server's session (a process cannot join a group
    /// of another), but without leading it can never take a terminal back, so it cannot type
    /// into the user's shell.
    pub fn join(&self, command: &mut tokio::process::Command) {
        let group = self
            .watcher
            .id()
            .expect("a watcher not yet waited for has a pid");
        command.process_group(group as libc::pid_t);
        leave_terminal(command);
    }
}

impl Drop for GroupWatch {
    fn drop(&mut self) {
        if let Some(group) = self.watcher.id() {
            // SAFETY: killpg(2) has no memory-safety preconditions; the group's id is the
            // watcher's pid, not yet reaped, so it names this group alone.
            unsafe { libc::killpg(group as libc::pid_t, libc::SIGKILL) };
        }
        // Dropping the child (not kill_on_drop) leaves its reaping to Tokio.
    }
}

/// The kernel's private run directory and its connection file (blocking).
fn create_run_dir(
    kernel_name: String,
    parent: &std::path::Path,
) -> std::io::Result<(tempfile::TempDir, ConnectionInfo, std::path::PathBuf)> {
    // Explicitly 0700: tempfile otherwise follows the umask, and anyone who can reach the IPC
    // sockets could read the kernel's output.
    let run_dir = tempfile::Builder::new()
        .prefix("ipython-mcp-k")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir_in(parent)?;
    let connection = ConnectionInfo {
        transport: Transport::IPC,
        // IPC endpoints are `ipc://{ip}-{port}`: five socket files inside the private dir.
        ip: run_dir.path().join("k").display().to_string(),
        shell_port: 1,
        iopub_port: 2,
        stdin_port: 3,
        control_port: 4,
        hb_port: 5,
        signature_scheme: "hmac-sha256".to_owned(),
        key: uuid::Uuid::new_v4().simple().to_string(),
        kernel_name: Some(kernel_name),
    };
    let connection_file = run_dir.path().join("kernel.json");
    write_private(&connection_file, &connection)?;
    Ok((run_dir, connection, connection_file))
}

/// Writes the connection file readable by us alone. Not fsynced: the kernel reads it through
/// the page cache, and the file is worthless after a crash (its kernel is gone with us), so a
/// sync would only wait for the disk.
fn write_private(path: &std::path::Path, connection: &ConnectionInfo) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(connection)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<String> {
        args.iter().map(|arg| (*arg).to_owned()).collect()
    }

    /// The guarded prologue is valid Python whatever the run directory's path holds.
    #[test]
    fn the_guarded_prologue_compiles_for_any_path() {
        use std::io::Write as _;
        let [flag, code] = safe_module("ipykernel_launcher", Some("ipc:///tmp/a\"b\\c\u{7f}é/k-"));
        assert_eq!(flag, "-c");
        assert!(code.contains("IPC_FILTER_PID"), "{code}");
        let mut python = std::process::Command::new("python3")
            .args([
                "-c",
                "import sys; compile(sys.stdin.read(), '<prologue>', 'exec')",
            ])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        python
            .stdin
            .take()
            .expect("stdin")
            .write_all(code.as_bytes())
            .expect("write");
        assert!(python.wait().expect("wait").success(), "{code}");
    }

    #[test]
    fn a_plain_ipykernel_command_runs_with_a_safe_path_and_others_as_given() {
        let plain = argv(&[
            "/p/python",
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
        ]);
        let safe = with_safe_path(&plain, None);
        assert_eq!(safe[0], "/p/python");
        assert_eq!(safe[1], "-c");
        assert!(
            safe[2].starts_with("import sys;sys.path[:1]=[p for p in sys.path[:1] if p];"),
            "{}",
            safe[2]
        );
        assert!(
            safe[2].contains("run_module(\"ipykernel_launcher\""),
            "{}",
            safe[2]
        );
        assert_eq!(safe[3..], plain[3..]);
        for other in [
            &["conda", "run", "python", "-m", "ipykernel", "-f", "c"][..],
            &["python", "-m", "bash_kernel", "-f", "c"],
            &["/opt/bin/ipykernel", "-f", "c"],
            &["/opt/wrap.sh", "-m", "ipykernel_launcher", "-f", "c"],
        ] {
            assert_eq!(with_safe_path(&argv(other), None), argv(other), "{other:?}");
        }
    }

    #[test]
    fn ipykernel_options_go_only_to_commands_that_run_ipykernel() {
        for (command, runs) in [
            (
                &[
                    "/p/bin/python",
                    "-m",
                    "ipykernel_launcher",
                    "-f",
                    "{connection_file}",
                ][..],
                true,
            ),
            (
                &[
                    "conda",
                    "run",
                    "-n",
                    "x",
                    "python",
                    "-m",
                    "ipykernel",
                    "-f",
                    "c",
                ],
                true,
            ),
            (&["/opt/bin/ipykernel", "-f", "c"], true),
            (&["python", "-m", "bash_kernel", "-f", "c"], false),
            (
                &["sh", "-c", "exec python -m ipykernel_launcher -f c"],
                false,
            ),
            (&["/opt/start-kernel.sh", "{connection_file}"], false),
        ] {
            assert_eq!(runs_ipykernel(&argv(command)), runs, "{command:?}");
        }
        let own = argv(&[
            "python",
            "-m",
            "ipykernel",
            "--HistoryManager.hist_file=/tmp/h.db",
        ]);
        assert_eq!(
            missing_ipykernel_options(&own).collect::<Vec<_>>(),
            ["--InteractiveShell.colors=nocolor"]
        );
        let none = argv(&[
            "python",
            "-m",
            "ipykernel",
            "--HistoryManager.hist_file_x=1",
        ]);
        assert_eq!(missing_ipykernel_options(&none).count(), 2);
    }
}
