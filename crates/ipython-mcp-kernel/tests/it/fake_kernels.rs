//! The `test-support` feature's public API, used as another crate's tests use it: sessions on
//! scripted fake kernels answer ok, error and timeout without a kernel process.

use std::time::Duration;

use ipython_mcp_config::KernelLimits;
use ipython_mcp_kernel::{
    ExecuteArgs, FakeBehaviour, FakeKernels, KernelManager, SessionHandle, StartSpec,
};
use ipython_mcp_output::{Code, ExecutionStatus, Interruption, NamespaceOutcome};

fn run(code: &str, timeout: Duration) -> ExecuteArgs {
    ExecuteArgs {
        code: code.into(),
        timeout: Some(timeout),
        request_id: code.into(),
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_manager_on_fake_kernels_answers_ok_error_and_timeout() {
    let kernels = FakeKernels::new().with(
        "print('hi')",
        FakeBehaviour::Finish {
            after: Duration::from_millis(10),
            stdout: "hi\n".into(),
        },
    );
    let manager = KernelManager::with_fake_kernels(
        FakeKernels::session_options("default"),
        KernelLimits::default(),
        &kernels,
    );
    let session = manager.get(None).expect("the default session");
    let echoed = session.execute(run("x = 1", Duration::from_secs(5))).await;
    assert!(echoed.ok, "{echoed:?}");
    assert_eq!(echoed.stdout, "x = 1\n");
    let scripted = session
        .execute(run("print('hi')", Duration::from_secs(5)))
        .await;
    assert_eq!(scripted.stdout, "hi\n");

    let raised = session
        .execute(run("raise ValueError('bad')", Duration::from_secs(5)))
        .await;
    assert_eq!(raised.status, ExecutionStatus::Error, "{raised:?}");
    let error = raised.error.expect("user code raised");
    assert_eq!(error.code, Code::ExecutionError);
    assert_eq!(
        (error.ename.as_deref(), error.evalue.as_deref()),
        (Some("ValueError"), Some("bad"))
    );

    let hung = session
        .execute(run("while True: pass", Duration::from_secs(1)))
        .await;
    assert_eq!(hung.status, ExecutionStatus::Timeout, "{hung:?}");
    assert_eq!(hung.runtime.interruption, Some(Interruption::Cooperative));
    assert_eq!(hung.runtime.namespace, Some(NamespaceOutcome::Preserved));
    assert_eq!(kernels.interrupts(), 1);

    // Started sessions run on the fakes too.
    let (_, started) = manager
        .start("python3", StartSpec::Default, None, None)
        .expect("started");
    let output = started.execute(run("y = 2", Duration::from_secs(5))).await;
    assert!(output.ok, "{output:?}");
    assert_eq!(kernels.launches(), 2);
    manager.shutdown().await;
    assert_eq!(kernels.kills(), 2, "both kernels shut down");
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_reaches_a_fake_kernel_that_runs_until_interrupted() {
    let kernels = FakeKernels::new();
    let session = SessionHandle::start_fake(FakeKernels::session_options("solo"), &kernels);
    let running = tokio::spawn({
        let session = session.clone();
        async move {
            session
                .execute(run("time.sleep(60)", Duration::from_secs(600)))
                .await
        }
    });
    kernels.started(1).await;
    assert!(session.interrupt().await.interrupted);
    let output = running.await.expect("join");
    assert_eq!(output.status, ExecutionStatus::Cancelled, "{output:?}");
    assert_eq!(output.runtime.namespace, Some(NamespaceOutcome::Preserved));
    session.shutdown().await;
}

/// Every task the manager and its sessions spawn (actors, a spare starting, background
/// executions' waits, spool workers, the kernels' requests, the idle reaper) is joined by
/// `shutdown`: none is left on the runtime once it returns.
#[tokio::test(start_paused = true)]
async fn manager_shutdown_leaves_no_task_running() {
    let kernels = FakeKernels::new();
    let options = ipython_mcp_kernel::SessionOptions {
        spare_kernels: 1,
        ..FakeKernels::session_options("default")
    };
    let manager = KernelManager::with_fake_kernels(options, KernelLimits::default(), &kernels);
    manager.spawn_reaper(|manager, id| async move {
        if let Ok(session) = manager.remove(id.as_str()) {
            session.shutdown().await;
        }
    });
    let session = manager.get(None).expect("the default session");
    // One that only a kill ends, and one queued behind it; nobody waits for either.
    let hung = "signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(1e9)";
    let running = session.execute_background(run(hung, Duration::from_secs(600)));
    let queued = session.execute_background(run("x = 1", Duration::from_secs(600)));
    assert_eq!(running.status, ExecutionStatus::Pending, "{running:?}");
    assert_eq!(queued.status, ExecutionStatus::Pending, "{queued:?}");
    kernels.started(1).await;
    manager
        .start("python3", StartSpec::Default, None, None)
        .expect("started");

    manager.shutdown().await;
    let metrics = tokio::runtime::Handle::current().metrics();
    assert_eq!(metrics.num_alive_tasks(), 0, "a task outlived the shutdown");
}

/// A session closing while its spare is still starting kills that spare: a local start is
/// dropped (its process dies with it); one that dropping could leave behind (a start request
/// in flight to a Jupyter server) is waited for, then killed, never abandoned.
#[tokio::test(start_paused = true)]
async fn a_spare_still_starting_is_never_left_behind_at_close() {
    for (cancellable, kills) in [(true, 1), (false, 2)] {
        let kernels = FakeKernels::new().launching(Duration::from_secs(5), cancellable);
        let options = ipython_mcp_kernel::SessionOptions {
            spare_kernels: 1,
            ..FakeKernels::session_options("default")
        };
        let session = SessionHandle::start_fake(options, &kernels);
        // The session's kernel is up, and the spare's launch has begun.
        kernels.launched(2).await;
        session.shutdown().await;
        assert_eq!(kernels.launches(), 2);
        assert_eq!(
            kernels.kills(),
            kills,
            "cancellable: {cancellable}: the session's kernel, and the spare unless dropped"
        );
    }
}
