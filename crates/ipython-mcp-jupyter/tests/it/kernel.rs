//! The kernel client against a real ipykernel (provisioned by the product's own env crate into
//! the target directory, shared with the other tests of the run).

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::time::Duration;

use ipython_mcp_jupyter::protocol::{
    ExecuteRequest, ExecutionState, JupyterMessage, JupyterMessageContent,
};
use ipython_mcp_jupyter::{Channel, InterruptMode, Kernel, LaunchSpec};

async fn launch() -> Kernel {
    launch_with(InterruptMode::Signal).await
}

async fn launch_with(interrupt_mode: InterruptMode) -> Kernel {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let resolver = ipython_mcp_env::Resolver {
        explicit_python: None,
        virtual_env: None,
        working_dir: tmp.clone(),
        path_var: std::env::var_os("PATH"),
        cache_dir: tmp.join("ipython-mcp-cache"),
        install_timeout: Duration::from_secs(600),
        named: None,
        confinement: Default::default(),
    };
    let python = resolver
        .resolve(&|_| {})
        .await
        .expect("provisioned python")
        .executable;
    Kernel::launch(
        &LaunchSpec {
            python,
            env: Vec::new(),
            working_dir: None,
            interrupt_mode,
            argv: None,
            kernel_name: None,
            memory: Default::default(),
            sandbox: None,
            run_dir_in: std::env::temp_dir(),
            own_dirs: Vec::new(),
        },
        Duration::from_secs(30),
    )
    .await
    .expect("launch")
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

async fn run(kernel: &Kernel, code: &str) -> Vec<String> {
    let request = JupyterMessage::new(
        ExecuteRequest {
            code: code.into(),
            silent: false,
            store_history: true,
            user_expressions: None,
            allow_stdin: false,
            stop_on_error: false,
        },
        None,
    );
    let (msg_id, mut receiver) = kernel.request(Channel::Shell, request).await.expect("send");
    let (mut reply, mut idle, mut types) = (false, false, Vec::new());
    while !(reply && idle) {
        let routed = tokio::time::timeout(Duration::from_secs(60), receiver.recv())
            .await
            .expect("in time")
            .expect("kernel alive");
        types.push(routed.message.header.msg_type.clone());
        match routed.message.content {
            JupyterMessageContent::ExecuteReply(_) => reply = true,
            JupyterMessageContent::Status(status)
                if status.execution_state == ExecutionState::Idle =>
            {
                idle = true
            }
            _ => {}
        }
    }
    kernel.forget(&msg_id);
    types
}

#[tokio::test]
async fn the_kernel_lifecycle_is_private_bounded_and_clean() {
    // A permissive umask must not make the run directory or sockets reachable by others.
    // SAFETY: umask(2) has no memory-safety preconditions (it is process-wide; 0o002 is harmless
    // to the other test in this binary).
    unsafe { libc::umask(0o002) };
    let kernel = launch().await;
    let dir = kernel.run_dir().to_owned();
    assert_eq!(mode(&dir), 0o700, "run dir");
    assert_eq!(mode(&dir.join("kernel.json")), 0o600, "connection file");

    // Messages are routed to their request.
    let types = run(&kernel, "print('hi')").await;
    assert!(types.contains(&"stream".to_owned()), "{types:?}");

    // Heartbeat: a stopped kernel misses it; once resumed it answers again (fresh REQ socket).
    // Bounds where the heartbeat must succeed are generous (a loaded machine); the one that
    // must fail is short, since a stopped process never answers however long we wait.
    assert!(kernel.heartbeat(Duration::from_secs(30)).await);
    let pid = kernel.pid() as i32;
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // kill(2) returns before the stop takes effect: wait until the process is stopped.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        if stat
            .rsplit(") ")
            .next()
            .is_some_and(|rest| rest.starts_with('T'))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the kernel never stopped: {stat}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!kernel.heartbeat(Duration::from_millis(300)).await);
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert!(
        kernel.heartbeat(Duration::from_secs(30)).await,
        "heartbeat recovers after a miss"
    );

    // Interrupt stops a sleeping cell.
    assert!(
        interrupts_a_sleep(&kernel).await,
        "SIGINT raised KeyboardInterrupt"
    );

    // A kernel killed from outside closes pending receivers instead of leaving them waiting.
    let request = JupyterMessage::new(
        ExecuteRequest {
            code: "import time; time.sleep(30)".into(),
            silent: false,
            store_history: true,
            user_expressions: None,
            allow_stdin: false,
            stop_on_error: false,
        },
        None,
    );
    let (_, mut receiver) = kernel.request(Channel::Shell, request).await.expect("send");
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let closed = tokio::time::timeout(Duration::from_secs(30), async {
        while receiver.recv().await.is_some() {}
    })
    .await;
    assert!(closed.is_ok(), "receiver closed after the kernel died");
    assert!(kernel.exit_watch().borrow().is_some());
    drop(kernel);
    // The directory is removed on the blocking pool, so it goes soon after the drop.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while dir.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "run directory removed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The next message routed to `receiver`, within a bound generous for a loaded machine.
async fn next_message(
    receiver: &mut tokio::sync::mpsc::UnboundedReceiver<ipython_mcp_jupyter::Routed>,
    waiting_for: &str,
) -> ipython_mcp_jupyter::Routed {
    tokio::time::timeout(Duration::from_secs(60), receiver.recv())
        .await
        .unwrap_or_else(|_| panic!("no message while waiting for {waiting_for}"))
        .unwrap_or_else(|| panic!("the kernel died while waiting for {waiting_for}"))
}

async fn interrupts_a_sleep(kernel: &Kernel) -> bool {
    let request = JupyterMessage::new(
        ExecuteRequest {
            code: "import time\nprint('armed', flush=True)\ntime.sleep(30)".into(),
            silent: false,
            store_history: true,
            user_expressions: None,
            allow_stdin: false,
            stop_on_error: false,
        },
        None,
    );
    let (msg_id, mut receiver) = kernel.request(Channel::Shell, request).await.expect("send");
    // Interrupt once user code runs (it printed): ipykernel may drop the reply to a SIGINT that
    // lands between the start of its handler and the user code.
    let mut began = false;
    loop {
        match next_message(&mut receiver, "the cell to print 'armed'")
            .await
            .message
            .content
        {
            JupyterMessageContent::ExecuteInput(_) => began = true,
            JupyterMessageContent::StreamContent(stream) if stream.text.contains("armed") => break,
            _ => {}
        }
    }
    assert!(began, "execute_input came before the cell's output");
    kernel.interrupt().await;
    let mut interrupted = false;
    loop {
        match next_message(&mut receiver, "idle after the interrupt")
            .await
            .message
            .content
        {
            JupyterMessageContent::ErrorOutput(error) => {
                interrupted |= error.ename == "KeyboardInterrupt";
            }
            JupyterMessageContent::Status(status)
                if status.execution_state == ExecutionState::Idle =>
            {
                break
            }
            _ => {}
        }
    }
    kernel.forget(&msg_id);
    interrupted
}

#[tokio::test]
async fn message_mode_interrupts_through_the_control_channel() {
    let kernel = launch_with(InterruptMode::Message).await;
    assert!(
        interrupts_a_sleep(&kernel).await,
        "interrupt_request raised KeyboardInterrupt"
    );
    kernel.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn shutdown_is_bounded_and_reaps_the_process() {
    let kernel = launch().await;
    let pid = kernel.pid();
    let started = std::time::Instant::now();
    kernel.shutdown(Duration::from_secs(2)).await;
    // The product bounds this (shutdown_request, the wait, then a kill); the margin is for a
    // loaded machine, the check is that it does not hang.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert!(
        kernel.exit_watch().borrow().is_some(),
        "process {pid} reaped"
    );
}

/// The kernel's tasks (socket readers, the exit watch, the stderr reader) are its own:
/// `shutdown` joins them, so none is left on the runtime afterwards.
#[tokio::test]
async fn shutdown_joins_the_kernels_tasks() {
    let kernel = launch().await;
    let types = run(&kernel, "print('hi')").await;
    assert!(types.contains(&"stream".to_owned()), "{types:?}");
    kernel.shutdown(Duration::from_secs(2)).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    assert_eq!(metrics.num_alive_tasks(), 0, "a task outlived the shutdown");
}
