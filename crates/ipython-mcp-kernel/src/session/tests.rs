//! Admission logic with paused time and no kernel: the test plays the actor.
use super::actor::supervise;
#[cfg(feature = "e2e")]
use super::actor::SPOOL_FLUSH_WAIT;
use super::handle::{Interrupted, SessionHandle};
use super::prepare::Local;
use super::*;
use crate::status::SessionState;
#[cfg(feature = "e2e")]
use ipython_mcp_output::executions::PageRequest;
use ipython_mcp_output::output::{Code, ExecutionStatus, Interruption, NamespaceOutcome};

pub(super) fn options(max_pending: usize, queue_wait: Duration) -> SessionOptions {
    SessionOptions {
        max_pending,
        queue_wait_timeout: queue_wait,
        ..super::fake::FakeKernels::session_options("test")
    }
}

fn args(code: &str, cancel: &CancellationToken) -> ExecuteArgs {
    ExecuteArgs {
        code: code.into(),
        request_id: code.into(),
        cancel: cancel.clone(),
        ..Default::default()
    }
}

fn code(output: &ExecutionOutput) -> Option<&str> {
    output.error.as_ref().map(|error| error.code.as_str())
}

#[tokio::test(start_paused = true)]
async fn a_request_nobody_dispatches_times_out_and_frees_its_slot() {
    let (handle, _inbox) = SessionHandle::detached(options(1, Duration::from_secs(30)));
    let started = Instant::now();
    let output = handle
        .execute(args("x = 1", &CancellationToken::new()))
        .await;
    assert_eq!(code(&output), Some("queue_timeout"));
    assert_eq!(output.status, ExecutionStatus::Rejected);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(30),
        "exactly the queue wait"
    );
    assert!(output
        .error
        .as_ref()
        .is_some_and(|error| error.message.contains("for the kernel to start")));
    assert_eq!(handle.status().queue_depth, 0);
    // The slot is free again: the next request is admitted (and times out in turn).
    let output = handle
        .execute(args("x = 2", &CancellationToken::new()))
        .await;
    assert_eq!(code(&output), Some("queue_timeout"));
}

#[tokio::test(start_paused = true)]
async fn a_background_request_waits_for_its_turn_past_the_queue_wait() {
    let (handle, _inbox) = SessionHandle::detached(options(1, Duration::from_secs(30)));
    let output = handle.execute_background(args("x = 1", &CancellationToken::new()));
    assert_eq!(output.status, ExecutionStatus::Pending);
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(
        handle.status().queue_depth,
        1,
        "still queued, not timed out"
    );
    let latest = handle.output(None, Duration::ZERO).await.expect("recorded");
    assert_eq!(latest.status, ExecutionStatus::Pending);
    // Its slot is still held: the pending bound applies to background work too.
    let refused = handle.execute_background(args("x = 2", &CancellationToken::new()));
    assert_eq!(code(&refused), Some("runtime_busy"));
}

#[tokio::test(start_paused = true)]
async fn a_late_interrupt_never_reaches_the_next_operation() {
    let (handle, _inbox) = SessionHandle::detached(options(1, Duration::from_secs(30)));
    let mut targets = handle.shared.active.target.subscribe();
    *handle.shared.active.seq.lock().expect("active") = Some(1);
    let interrupting = tokio::spawn({
        let handle = handle.clone();
        async move { handle.interrupt().await }
    });
    targets
        .wait_for(|target| *target == Some(1))
        .await
        .expect("aimed");
    // Operation 1 ends and operation 2 begins before the interrupt lands anywhere.
    *handle.shared.active.seq.lock().expect("active") = None;
    handle.shared.active.answered();
    *handle.shared.active.seq.lock().expect("active") = Some(2);
    let Interrupted { interrupted, .. } = interrupting.await.expect("join");
    assert!(interrupted);
    assert_eq!(*targets.borrow(), Some(1), "operation 2 is not the target");
    // An interrupt issued now is for operation 2.
    let interrupting = tokio::spawn({
        let handle = handle.clone();
        async move { handle.interrupt().await }
    });
    targets
        .wait_for(|target| *target == Some(2))
        .await
        .expect("aimed at 2");
    *handle.shared.active.seq.lock().expect("active") = None;
    handle.shared.active.answered();
    assert!(interrupting.await.expect("join").interrupted);
    // Nothing active: nothing to interrupt.
    assert!(!handle.interrupt().await.interrupted);
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_is_busy_and_cancellation_withdraws() {
    let (handle, mut inbox) = SessionHandle::detached(options(2, Duration::from_secs(30)));
    let first_cancel = CancellationToken::new();
    let first = tokio::spawn({
        let (handle, cancel) = (handle.clone(), first_cancel.clone());
        async move { handle.execute(args("first", &cancel)).await }
    });
    let second = tokio::spawn({
        let handle = handle.clone();
        async move {
            handle
                .execute(args("second", &CancellationToken::new()))
                .await
        }
    });
    while handle.status().queue_depth < 2 {
        tokio::task::yield_now().await;
    }
    let busy = handle
        .execute(args("third", &CancellationToken::new()))
        .await;
    assert_eq!(code(&busy), Some("runtime_busy"));

    first_cancel.cancel();
    let first = first.await.expect("join");
    assert_eq!(code(&first), Some("operation_cancelled"));
    assert_eq!(first.status, ExecutionStatus::Cancelled);
    assert_eq!(handle.status().queue_depth, 1);

    // Play the actor: the withdrawn ticket cannot be dispatched; the second can.
    let Some(Command::Execute { ticket, .. }) = inbox.recv().await else {
        panic!("first command")
    };
    assert!(
        !ticket.dispatch(&handle.shared),
        "an abandoned ticket is never dispatched"
    );
    let Some(Command::Execute {
        ticket,
        args,
        reply,
        ..
    }) = inbox.recv().await
    else {
        panic!("second command")
    };
    assert_eq!(args.code, "second");
    assert!(ticket.dispatch(&handle.shared));
    assert!(
        !ticket.abandon(&handle.shared),
        "a dispatched ticket cannot be abandoned"
    );
    let runtime = RuntimeInfo {
        request_id: args.request_id,
        admission_seq: ticket.seq,
        epoch: 0,
        queue_wait_ms: 0,
        run_ms: 0,
        interruption: None,
        namespace: None,
        restore: None,
    };
    let mut done = ExecutionOutput::not_run(
        ticket.execution_id.clone(),
        runtime,
        ErrorInfo::new(Code::InternalError, "unused"),
    );
    done.error = None;
    done.ok = true;
    reply.send((done, None)).expect("caller waits");
    let second = second.await.expect("join");
    assert!(second.ok);
    assert_eq!(
        second.runtime.admission_seq, 2,
        "sequence numbers follow admission order"
    );
    assert_eq!(handle.status().queue_depth, 0);
}

fn spawn_execute(
    handle: &SessionHandle,
    code: &'static str,
) -> tokio::task::JoinHandle<ExecutionOutput> {
    let handle = handle.clone();
    tokio::spawn(async move { handle.execute(args(code, &CancellationToken::new())).await })
}

async fn until_queued(handle: &SessionHandle, depth: usize) {
    while handle.status().queue_depth < depth {
        tokio::task::yield_now().await;
    }
}

fn helper_call(method: &str) -> HelperCall {
    HelperCall {
        method: method.into(),
        params: serde_json::json!({}),
        timeout: None,
        request_id: method.into(),
        cancel: CancellationToken::new(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_bookkeeping_call_takes_the_reserved_slot_never_a_users() {
    let (handle, _inbox) = SessionHandle::detached(options(2, Duration::from_secs(30)));
    let _first = spawn_execute(&handle, "first");
    let reserved = tokio::spawn({
        let handle = handle.clone();
        async move { handle.helper_reserved(helper_call("tool_catalog")).await }
    });
    until_queued(&handle, 2).await;
    // The reserved slot is taken: a second bookkeeping call is refused at once…
    let refused = handle.helper_reserved(helper_call("tool_catalog")).await;
    assert_eq!(
        refused.outcome.error().map(|error| error.code.as_str()),
        Some("runtime_busy")
    );
    assert!(
        matches!(refused.outcome, Outcome::Failed(_)),
        "refusal is not an answer"
    );
    assert!(!reserved.is_finished());
    // …while the user still has both of the `max_pending` slots: one is free.
    let _second = spawn_execute(&handle, "second");
    until_queued(&handle, 3).await;
    let busy = handle
        .execute(args("third", &CancellationToken::new()))
        .await;
    assert_eq!(code(&busy), Some("runtime_busy"));
    assert_eq!(
        handle.status().queue_depth,
        3,
        "the users' two and the reserved one"
    );
    // A bookkeeping call that gives up frees the reserved slot for the next.
    let gave_up = reserved.await.expect("join");
    assert_eq!(
        gave_up.outcome.error().map(|error| error.code.as_str()),
        Some("queue_timeout")
    );
    assert_eq!(handle.status().queue_depth, 0);
}

/// A session whose Python cannot be found: its actor runs with no kernel.
fn kernelless(max_pending: usize) -> SessionOptions {
    let mut options = options(max_pending, Duration::from_secs(30));
    options.resolver.explicit_python = Some(std::env::temp_dir().join("no-such-python-here"));
    options
}

#[tokio::test]
async fn a_panicking_actor_answers_its_queue_unavailable_and_restart_respawns_it() {
    let (handle, commands) = SessionHandle::detached(kernelless(4));
    // Queued before the actor starts: the panic, then a call behind it.
    assert!(handle.inject_panic());
    let queued = spawn_execute(&handle, "queued");
    until_queued(&handle, 1).await;
    let launcher = Arc::new(Local::new(Arc::clone(&handle.shared)));
    tokio::spawn(supervise(Arc::clone(&handle.shared), commands, launcher));
    let queued = queued.await.expect("join");
    assert_eq!(code(&queued), Some("runtime_unavailable"));
    assert_eq!(queued.status, ExecutionStatus::Rejected);
    let message = &queued.error.as_ref().expect("error").message;
    assert!(message.contains("an internal error stopped"), "{message}");
    let status = handle.status();
    assert_eq!(status.state, SessionState::Unavailable);
    assert_eq!(status.queue_depth, 0);
    assert_eq!(status.error, Some(panicked(PanickedCall::NoCall)));
    let refused = handle
        .execute(args("after", &CancellationToken::new()))
        .await;
    assert_eq!(refused.error, Some(panicked(PanickedCall::NotRun).plain()));
    // The restart starts a fresh actor in a new epoch; this one cannot find its Python
    // either, so the session is unavailable for that reason now, not for the panic.
    assert_eq!(status.epoch, 1, "its kernel is gone");
    let restarted = handle.restart(false).await.expect("restart answered");
    assert_eq!(restarted.epoch, 2);
    assert_eq!(restarted.state, SessionState::Unavailable);
    let reason = restarted.error.expect("reason").to_string();
    assert!(!reason.contains("internal error"), "{reason}");
    let refused = handle
        .execute(args("later", &CancellationToken::new()))
        .await;
    assert_ne!(refused.error, Some(panicked(PanickedCall::NotRun).plain()));
    handle.shutdown().await;
    assert_eq!(handle.status().state, SessionState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_call_running_when_the_actor_panics_is_told_so_and_its_record_finished() {
    let (handle, mut inbox) = SessionHandle::detached(options(1, Duration::from_secs(30)));
    let caller = spawn_execute(&handle, "running");
    let Some(Command::Execute { ticket, reply, .. }) = inbox.recv().await else {
        panic!("command")
    };
    assert!(ticket.dispatch(&handle.shared));
    // What a panic does to it: the reply is dropped, then the supervisor counts a failure.
    drop(reply);
    tokio::task::yield_now().await;
    handle.shared.failures.send_modify(|count| *count += 1);
    let output = caller.await.expect("join");
    assert_eq!(code(&output), Some("runtime_unavailable"));
    assert_eq!(output.status, ExecutionStatus::Error);
    assert_eq!(output.runtime.namespace, Some(NamespaceOutcome::Reset));
    assert_eq!(output.runtime.interruption, Some(Interruption::Terminated));
    let recorded = handle.output(None, Duration::ZERO).await.expect("recorded");
    assert_eq!(recorded.status, ExecutionStatus::Error, "get_output agrees");
}

#[tokio::test(start_paused = true)]
async fn a_dispatched_request_outlives_the_queue_wait() {
    let (handle, mut inbox) = SessionHandle::detached(options(1, Duration::from_secs(1)));
    let caller = tokio::spawn({
        let handle = handle.clone();
        async move {
            handle
                .execute(args("slow", &CancellationToken::new()))
                .await
        }
    });
    let Some(Command::Execute {
        ticket,
        args,
        reply,
        ..
    }) = inbox.recv().await
    else {
        panic!("command")
    };
    assert!(ticket.dispatch(&handle.shared));
    // Running for longer than the queue wait is fine: the deadline, not the queue, bounds it.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let runtime = RuntimeInfo {
        request_id: args.request_id,
        admission_seq: ticket.seq,
        epoch: 0,
        queue_wait_ms: 0,
        run_ms: 10_000,
        interruption: None,
        namespace: None,
        restore: None,
    };
    let mut done = ExecutionOutput::not_run(
        ticket.execution_id.clone(),
        runtime,
        ErrorInfo::new(Code::InternalError, "unused"),
    );
    done.error = None;
    done.ok = true;
    reply.send((done, None)).expect("caller waits");
    assert!(caller.await.expect("join").ok);
}

/// A real kernel's session: the Python the integration tests provision into the target
/// directory (this test binary is `target/<profile>/deps/<name>`), found or provisioned
/// the product's own way. Real kernels are the `e2e` test tier (CONTRIBUTING.md, "Tests").
#[cfg(feature = "e2e")]
fn kernel_options(kernel_id: &str) -> SessionOptions {
    let exe = std::env::current_exe().expect("the test binary's path");
    let target_tmp = exe.ancestors().nth(3).expect("the target dir").join("tmp");
    SessionOptions {
        kernel_id: kernel_id.into(),
        queue_wait_timeout: Duration::from_secs(600),
        resolver: Resolver {
            working_dir: target_tmp.clone(),
            path_var: std::env::var_os("PATH"),
            cache_dir: target_tmp.join("ipython-mcp-cache"),
            install_timeout: Duration::from_secs(600),
            ..options(4, Duration::ZERO).resolver
        },
        spool: SpoolLimits::default(),
        ..options(4, Duration::ZERO)
    }
}

#[cfg(feature = "e2e")]
async fn ready(session: &SessionHandle) {
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut done = session.status().state;
    while done != SessionState::Ready {
        assert!(
            !matches!(done, SessionState::Unavailable | SessionState::Closed),
            "{:?}",
            session.status()
        );
        assert!(
            Instant::now() < deadline,
            "no kernel: {:?}",
            session.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        done = session.status().state;
    }
}

#[cfg(feature = "e2e")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_spool_disk_stalls_neither_status_nor_another_session() {
    let stalled = SessionHandle::start(kernel_options("stalled"));
    let other = SessionHandle::start(kernel_options("other"));
    ready(&stalled).await;
    ready(&other).await;
    let cancel = CancellationToken::new();
    let release = ipython_mcp_output::spool::tests::stall(stalled.shared.executions.queue()).await;
    // Cut output: its answer wants the spool's summary, which waits for the stalled disk.
    let cut = tokio::spawn({
        let stalled = stalled.clone();
        let args = args("print('x' * 100_000)", &cancel);
        async move { stalled.execute(args).await }
    });
    for n in 0..3 {
        let answered = tokio::time::timeout(
            Duration::from_secs(120),
            other.execute(args(&format!("{n} + 1"), &cancel)),
        )
        .await
        .expect("another session answers while this one's spool is stalled");
        assert!(answered.ok, "{answered:?}");
        assert_eq!(
            answered
                .result
                .as_ref()
                .map(|result| result["text/plain"].clone()),
            Some(serde_json::json!((n + 1).to_string()))
        );
        // Its status is a snapshot: answered, and it still says the session works.
        let state = stalled.status().state;
        assert!(
            matches!(state, SessionState::Busy | SessionState::Ready),
            "{state:?}"
        );
    }
    // The stalled session answers too, once its wait for the disk is over, without the
    // summary it could not read.
    let output = tokio::time::timeout(SPOOL_FLUSH_WAIT + Duration::from_secs(120), cut)
        .await
        .expect("the answer does not wait for the disk past its bound")
        .expect("the execute task");
    assert!(output.ok, "{output:?}");
    assert!(output.stdout_omitted_chars > 0, "{output:?}");
    assert_eq!(output.spool, None);
    // And so does its next call, the disk still stalled.
    let next = tokio::time::timeout(
        Duration::from_secs(120),
        stalled.execute(args("2 * 21", &cancel)),
    )
    .await
    .expect("the next call is answered while the spool is still stalled");
    assert_eq!(
        next.result
            .as_ref()
            .map(|result| result["text/plain"].clone()),
        Some(serde_json::json!("42"))
    );
    // Nothing is lost: once the disk is back, the summary and the whole stream are there.
    release.send(()).expect("the stall waits");
    let id = output.execution_id.clone();
    let later = stalled
        .output(Some(id.as_str()), Duration::ZERO)
        .await
        .expect("remembered");
    assert_eq!(later.spool.map(|spool| spool.stdout_bytes), Some(100_001));
    let request = PageRequest {
        stream: ipython_mcp_output::StreamName::Stdout,
        start_line: 1,
        max_lines: 10,
        pattern: None,
        max_chars: 1_000_000,
    };
    let page = stalled
        .page(Some(id.as_str()), request)
        .await
        .expect("remembered")
        .expect("a page");
    assert_eq!(page.lines.len(), 1, "{:?}", page.total_lines);
    assert_eq!(page.lines[0].text.len(), 100_000);
    assert!(page.complete);
    stalled.shutdown().await;
    other.shutdown().await;
}

/// A helper call's outcome says which side failed: the helper's error reply is `Raised` (with
/// what it worked out first), no reply or a stopped operation is `Failed`, never the reverse.
/// A helper call's operation that finished `ok` (what the helper replied decides the rest).
fn finished_helper_call() -> ExecutionOutput {
    let runtime = RuntimeInfo {
        request_id: "r".into(),
        admission_seq: 1,
        epoch: 0,
        queue_wait_ms: 0,
        run_ms: 0,
        interruption: None,
        namespace: None,
        restore: None,
    };
    ExecutionOutput {
        ok: true,
        status: ExecutionStatus::Ok,
        error: None,
        ..ExecutionOutput::pending(ExecutionId::generate(), runtime)
    }
}

#[test]
fn helper_outcomes_keep_user_errors_apart_from_failed_calls() {
    let finished = finished_helper_call;
    let answered = handle::helper_output(
        finished(),
        Some(serde_json::json!({"ok": true, "result": {"x": 1}})),
        Wording::PLAIN,
    );
    assert_eq!(
        answered.outcome,
        Outcome::Answered(serde_json::json!({"x": 1}))
    );
    let raised = handle::helper_output(
        finished(),
        Some(serde_json::json!({
            "ok": false,
            "error": {"code": "name_not_found", "message": "no name 'y'"},
            "result": {"resolved": "a"},
        })),
        Wording::PLAIN,
    );
    match &raised.outcome {
        Outcome::Raised { error, partial } => {
            assert_eq!(error.code, Code::NameNotFound);
            assert_eq!(partial, &Some(serde_json::json!({"resolved": "a"})));
        }
        other => panic!("{other:?}"),
    }
    // A code the server does not know is the server's bug, still the helper's answer.
    let unknown = handle::helper_output(
        finished(),
        Some(serde_json::json!({"ok": false, "error": {"code": "no_such", "message": "?"}})),
        Wording::PLAIN,
    );
    assert_eq!(
        unknown.outcome.error().map(|error| error.code),
        Some(Code::InternalError)
    );
    assert_eq!(unknown.outcome.kind(), "raised");
    // A reply of the wrong shape is a bug on one side, never "user code raised".
    for reply in [
        serde_json::json!({"ok": false}),
        serde_json::json!({"ok": false, "error": "boom"}),
        serde_json::json!({"ok": false, "error": {"message": "no code"}}),
        serde_json::json!({"result": 1}),
        serde_json::json!([1, 2]),
    ] {
        let odd = handle::helper_output(finished(), Some(reply.clone()), Wording::PLAIN);
        assert_eq!(
            odd.outcome,
            Outcome::Failed(ErrorInfo::new(
                Code::InternalError,
                "the helper's reply had an unexpected shape"
            )),
            "{reply}"
        );
    }
    // Stopped by its deadline: the session's own error, even if the helper's
    // KeyboardInterrupt reply arrived.
    let mut timed_out = finished();
    timed_out.ok = false;
    timed_out.status = ExecutionStatus::Timeout;
    timed_out.error = Some(ErrorInfo::new(Code::OperationTimeout, "deadline"));
    let failed = handle::helper_output(
        timed_out,
        Some(
            serde_json::json!({"ok": false, "error": {"code": "execution_error", "message": "KeyboardInterrupt"}}),
        ),
        Wording::PLAIN,
    );
    assert_eq!(
        failed.outcome,
        Outcome::Failed(ErrorInfo::new(Code::OperationTimeout, "deadline"))
    );
    assert_eq!(failed.outcome.answer(), None);
    let unanswered = handle::helper_output(finished(), None, Wording::PLAIN);
    assert_eq!(unanswered.outcome.kind(), "failed");
}
