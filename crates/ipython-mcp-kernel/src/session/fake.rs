//! A scripted fake kernel behind the transport seam, and tests that drive a real actor through
//! it with paused time: deadlines, interrupts, the grace period, kills, replacements and the
//! queue, each in milliseconds of real time. What a real ipykernel does is pinned by the
//! integration tests; these pin what the actor does with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use ipython_mcp_jupyter::protocol::{
    ExecuteInput, ExecuteReply, ExecutionCount, JupyterMessage, JupyterMessageContent, ReplyError,
    ReplyStatus, Status, Stdio, StreamContent,
};
use ipython_mcp_jupyter::{Channel, KernelExit, Routed};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::actor::supervise;
use super::transport::{KernelTransport, Launcher, Running};
use super::*;
use crate::output::{ExecutionStatus, Interruption, NamespaceOutcome};
use crate::status::{KernelDescription, SessionState};

/// What the fake kernel does with an execute request, chosen by its code.
#[derive(Debug, Clone)]
enum Behaviour {
    /// Prints `stdout`, then replies `ok` and goes idle, `after` from the start.
    Finish {
        after: Duration,
        stdout: &'static str,
    },
    /// Runs until an interrupt arrives, then stops (`KeyboardInterrupt`) `after` later.
    StopOnInterrupt { after: Duration },
    /// Loses the first interrupt (as IPython does with one that lands in its pre-run
    /// callbacks), then stops at once on the next.
    StopOnSecondInterrupt,
    /// Runs forever, ignoring interrupts: only a kill ends it.
    IgnoreInterrupt,
    /// The process dies `after` from the start.
    Die { after: Duration },
}

/// The script: code → behaviour; any other code prints nothing and finishes at once.
#[derive(Debug, Default)]
struct Script(HashMap<&'static str, Behaviour>);

impl Script {
    fn with(mut self, code: &'static str, behaviour: Behaviour) -> Script {
        self.0.insert(code, behaviour);
        self
    }

    fn behaviour(&self, code: &str) -> Behaviour {
        self.0.get(code).cloned().unwrap_or(Behaviour::Finish {
            after: Duration::ZERO,
            stdout: "",
        })
    }
}

/// What happened to the fake kernels, for the tests to wait on and check.
#[derive(Debug)]
struct Events {
    /// Kernels launched (the first, then each replacement).
    launches: watch::Sender<usize>,
    /// Requests the kernels have begun running (`execute_input` sent).
    started: watch::Sender<usize>,
    /// Interrupts delivered to any kernel.
    interrupts: watch::Sender<usize>,
    /// Kernels killed or shut down.
    kills: watch::Sender<usize>,
}

impl Events {
    fn new() -> Arc<Events> {
        Arc::new(Events {
            launches: watch::channel(0).0,
            started: watch::channel(0).0,
            interrupts: watch::channel(0).0,
            kills: watch::channel(0).0,
        })
    }
}

struct FakeLauncher {
    script: Arc<Script>,
    events: Arc<Events>,
}

impl Launcher for FakeLauncher {
    fn provision(&self) -> BoxFuture<'_, Result<(), ErrorInfo>> {
        Box::pin(async { Ok(()) })
    }

    fn launch(&self) -> BoxFuture<'static, Result<Running, ErrorInfo>> {
        let (script, events) = (Arc::clone(&self.script), Arc::clone(&self.events));
        Box::pin(async move {
            let mut pid = 0;
            events.launches.send_modify(|launches| {
                *launches += 1;
                pid = 1000 + *launches as u32;
            });
            let kernel = FakeKernel {
                script,
                events,
                exit: Arc::new(watch::channel(None).0),
                interrupted: watch::channel(0).0,
                running: Mutex::new(Vec::new()),
                executions: Mutex::new(0),
            };
            Ok(Running {
                kernel: Box::new(kernel),
                helper_comm: None,
                helper_spools: false,
                description: KernelDescription {
                    pid: Some(pid),
                    remote: None,
                    python: "fake".into(),
                    language: "python".into(),
                    python_version: "3".into(),
                    ipykernel_version: String::new(),
                    implementation: "fake".into(),
                    spec: "fake".into(),
                    helper: false,
                    working_dir: String::new(),
                },
            })
        })
    }
}

struct FakeKernel {
    script: Arc<Script>,
    events: Arc<Events>,
    exit: Arc<watch::Sender<Option<KernelExit>>>,
    /// Interrupts delivered to this kernel.
    interrupted: watch::Sender<u64>,
    /// The tasks playing requests; aborting one drops its sender, closing the receiver, as the
    /// real router does when the process exits.
    running: Mutex<Vec<tokio::task::AbortHandle>>,
    executions: Mutex<usize>,
}

fn iopub(content: impl Into<JupyterMessageContent>) -> Routed {
    Routed {
        channel: Channel::IoPub,
        message: JupyterMessage::new(content, None),
    }
}

fn reply(count: usize, error: Option<&str>) -> Routed {
    let content = ExecuteReply {
        status: if error.is_some() {
            ReplyStatus::Error
        } else {
            ReplyStatus::Ok
        },
        execution_count: ExecutionCount(count),
        error: error.map(|ename| {
            Box::new(ReplyError {
                ename: ename.into(),
                evalue: String::new(),
                traceback: vec![ename.into()],
            })
        }),
        ..Default::default()
    };
    Routed {
        channel: Channel::Shell,
        message: JupyterMessage::new(content, None),
    }
}

impl FakeKernel {
    fn gone(&self, exit: KernelExit) {
        self.exit.send_if_modified(|current| {
            let first = current.is_none();
            if first {
                *current = Some(exit);
            }
            first
        });
        for task in self.running.lock().expect("running lock").drain(..) {
            task.abort();
        }
    }
}

impl KernelTransport for FakeKernel {
    fn request(
        &self,
        _channel: Channel,
        message: JupyterMessage,
    ) -> BoxFuture<'_, Result<(String, mpsc::UnboundedReceiver<Routed>), ipython_mcp_jupyter::Error>>
    {
        Box::pin(async move {
            if let Some(exit) = self.exit.borrow().clone() {
                return Err(ipython_mcp_jupyter::Error::Exited {
                    exit: exit.to_string(),
                });
            }
            let JupyterMessageContent::ExecuteRequest(request) = &message.content else {
                panic!("the fake kernel only runs execute requests")
            };
            let behaviour = self.script.behaviour(&request.code);
            let count = {
                let mut executions = self.executions.lock().expect("executions lock");
                *executions += 1;
                *executions
            };
            let (sender, receiver) = mpsc::unbounded_channel();
            // Subscribed before the request is visible as begun, so no interrupt is missed.
            let mut interrupted = self.interrupted.subscribe();
            let (events, exit) = (Arc::clone(&self.events), Arc::clone(&self.exit));
            let code = request.code.clone();
            let task = tokio::spawn(async move {
                let begun = Instant::now();
                let _ = sender.send(iopub(Status::busy()));
                let _ = sender.send(iopub(ExecuteInput {
                    code,
                    execution_count: ExecutionCount(count),
                }));
                events.started.send_modify(|started| *started += 1);
                let error = match behaviour {
                    Behaviour::Finish { after, stdout } => {
                        tokio::time::sleep_until(begun + after).await;
                        if !stdout.is_empty() {
                            let _ = sender.send(iopub(StreamContent {
                                name: Stdio::Stdout,
                                text: stdout.into(),
                            }));
                        }
                        None
                    }
                    Behaviour::StopOnInterrupt { after } => {
                        let _ = interrupted.changed().await;
                        tokio::time::sleep(after).await;
                        Some("KeyboardInterrupt")
                    }
                    Behaviour::StopOnSecondInterrupt => {
                        let base = *interrupted.borrow_and_update();
                        let _ = interrupted.wait_for(|count| *count >= base + 2).await;
                        Some("KeyboardInterrupt")
                    }
                    Behaviour::IgnoreInterrupt => std::future::pending().await,
                    Behaviour::Die { after } => {
                        tokio::time::sleep_until(begun + after).await;
                        exit.send_replace(Some(KernelExit::Signal(libc_sigkill())));
                        return; // the sender goes with the task: the receiver closes
                    }
                };
                let _ = sender.send(reply(count, error));
                let _ = sender.send(iopub(Status::idle()));
            });
            self.running
                .lock()
                .expect("running lock")
                .push(task.abort_handle());
            Ok((message.header.msg_id.clone(), receiver))
        })
    }

    fn forget(&self, _msg_id: &str) {}

    fn interrupt(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {
            self.events.interrupts.send_modify(|count| *count += 1);
            self.interrupted.send_modify(|count| *count += 1);
        })
    }

    fn heartbeat(&self, _timeout: Duration) -> BoxFuture<'_, bool> {
        Box::pin(async { self.exit.borrow().is_none() })
    }

    fn exit_watch(&self) -> watch::Receiver<Option<KernelExit>> {
        self.exit.subscribe()
    }

    fn kill(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {
            self.events.kills.send_modify(|count| *count += 1);
            self.gone(KernelExit::Signal(libc_sigkill()));
        })
    }

    fn shutdown(&self, _grace: Duration) -> BoxFuture<'_, ()> {
        self.kill()
    }
}

fn libc_sigkill() -> i32 {
    9
}

mod tests {
    use super::*;

    const LOOP: &str = "while True: pass";
    const HANG: &str = "signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(1e9)";
    const CRASH: &str = "os.kill(os.getpid(), 9)";
    const PRINT: &str = "print('hello')";

    /// A session whose actor runs on fake kernels following `script`.
    fn session(script: Script) -> (SessionHandle, Arc<Events>) {
        let options = crate::session::tests::options(4, Duration::from_secs(600));
        let (handle, commands) = SessionHandle::detached(options);
        let events = Events::new();
        let launcher = Arc::new(FakeLauncher {
            script: Arc::new(script),
            events: Arc::clone(&events),
        });
        tokio::spawn(supervise(Arc::clone(&handle.shared), commands, launcher));
        (handle, events)
    }

    fn run(code: &str, timeout: Duration) -> ExecuteArgs {
        ExecuteArgs {
            code: code.into(),
            timeout: Some(timeout),
            request_id: code.into(),
            ..Default::default()
        }
    }

    fn code(output: &ExecutionOutput) -> Option<Code> {
        output.error.as_ref().map(|error| error.code)
    }

    async fn reached(events: &watch::Sender<usize>, count: usize) {
        events
            .subscribe()
            .wait_for(|seen| *seen >= count)
            .await
            .expect("the events outlive the test");
    }

    fn grace() -> Duration {
        Timeouts::default().interruption_grace
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_interrupts_and_a_cooperative_kernel_keeps_its_namespace() {
        let script = Script::default().with(
            LOOP,
            Behaviour::StopOnInterrupt {
                after: Duration::from_millis(100),
            },
        );
        let (handle, events) = session(script);
        let output = handle.execute(run(LOOP, Duration::from_secs(1))).await;
        assert_eq!(output.status, ExecutionStatus::Timeout, "{output:?}");
        assert_eq!(code(&output), Some(Code::OperationTimeout));
        assert_eq!(output.runtime.interruption, Some(Interruption::Cooperative));
        assert_eq!(output.runtime.namespace, Some(NamespaceOutcome::Preserved));
        assert_eq!(output.runtime.epoch, 0);
        // The deadline, then the kernel's own 100 ms to stop (the clock is paused: exact).
        assert!(
            (1100..1100 + 50).contains(&output.runtime.run_ms),
            "{}",
            output.runtime.run_ms
        );
        assert_eq!(*events.interrupts.borrow(), 1);
        assert_eq!(*events.launches.borrow(), 1, "never replaced");
        let status = handle.status();
        assert_eq!(status.state, SessionState::Ready);
        assert_eq!(
            status.latest_interruption_kind,
            Some(Interruption::Cooperative)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_interrupt_the_kernel_lost_is_sent_once_more_and_the_stop_stays_cooperative() {
        let script = Script::default().with(LOOP, Behaviour::StopOnSecondInterrupt);
        let (handle, events) = session(script);
        let output = handle.execute(run(LOOP, Duration::from_secs(1))).await;
        assert_eq!(output.status, ExecutionStatus::Timeout, "{output:?}");
        assert_eq!(output.runtime.interruption, Some(Interruption::Cooperative));
        assert_eq!(output.runtime.namespace, Some(NamespaceOutcome::Preserved));
        assert_eq!(*events.interrupts.borrow(), 2);
        assert_eq!(*events.kills.borrow(), 0);
        assert_eq!(*events.launches.borrow(), 1, "never replaced");
        // The deadline, then the pause before the second interrupt (paused clock: exact).
        let resent = 1000 + Duration::from_secs(1).min(grace() / 2).as_millis() as u64;
        assert!(
            (resent..resent + 50).contains(&output.runtime.run_ms),
            "{}",
            output.runtime.run_ms
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_on_a_kernel_that_ignores_sigint_kills_and_replaces_it() {
        let script = Script::default().with(HANG, Behaviour::IgnoreInterrupt);
        let (handle, events) = session(script);
        let output = handle.execute(run(HANG, Duration::from_secs(1))).await;
        assert_eq!(output.status, ExecutionStatus::Timeout, "{output:?}");
        assert_eq!(code(&output), Some(Code::OperationTimeout));
        assert_eq!(output.runtime.interruption, Some(Interruption::Terminated));
        assert_eq!(output.runtime.namespace, Some(NamespaceOutcome::Reset));
        assert_eq!(output.runtime.epoch, 1, "the answer reports the new epoch");
        let hint = output.error.as_ref().and_then(|error| error.hint.clone());
        assert!(
            hint.as_deref()
                .is_some_and(|hint| hint.contains("a fresh kernel replaced it")),
            "{hint:?}"
        );
        // The deadline, then the whole grace period after the interrupt.
        let killed_after = Duration::from_secs(1) + grace();
        assert!(
            output.runtime.run_ms >= killed_after.as_millis() as u64,
            "{}",
            output.runtime.run_ms
        );
        // Sent once more a second after the first (the kernel said nothing), then killed.
        assert_eq!(*events.interrupts.borrow(), 2);
        assert_eq!(*events.kills.borrow(), 1);
        assert_eq!(*events.launches.borrow(), 2, "replaced once");
        assert_eq!(*handle.subscribe_epoch().borrow(), 1);
        assert_eq!(handle.status().state, SessionState::Ready);
        // The replacement runs the next call.
        let next = handle.execute(run(PRINT, Duration::from_secs(1))).await;
        assert!(next.ok, "{next:?}");
        assert_eq!(next.runtime.epoch, 1);
        assert_eq!(next.runtime.namespace, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_cancellation_interrupts_the_running_code() {
        let script = Script::default().with(
            LOOP,
            Behaviour::StopOnInterrupt {
                after: Duration::from_millis(10),
            },
        );
        let (handle, events) = session(script);
        let cancel = CancellationToken::new();
        let running = tokio::spawn({
            let (handle, cancel) = (handle.clone(), cancel.clone());
            async move {
                let args = ExecuteArgs {
                    cancel,
                    ..run(LOOP, Duration::from_secs(60))
                };
                handle.execute(args).await
            }
        });
        reached(&events.started, 1).await;
        cancel.cancel();
        let output = running.await.expect("join");
        assert_eq!(output.status, ExecutionStatus::Cancelled, "{output:?}");
        assert_eq!(code(&output), Some(Code::OperationCancelled));
        assert_eq!(
            output.error.as_ref().map(|error| error.message.as_str()),
            Some("cancelled by the client; the kernel was interrupted")
        );
        assert_eq!(output.runtime.interruption, Some(Interruption::Cooperative));
        assert_eq!(output.runtime.namespace, Some(NamespaceOutcome::Preserved));
        assert!(output.runtime.run_ms < 60_000, "long before the deadline");
        assert_eq!(*events.interrupts.borrow(), 1);
        assert_eq!(*events.launches.borrow(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_interrupt_call_stops_the_running_operation_and_waits_for_it() {
        let script = Script::default().with(
            LOOP,
            Behaviour::StopOnInterrupt {
                after: Duration::from_millis(10),
            },
        );
        let (handle, events) = session(script);
        let running = tokio::spawn({
            let handle = handle.clone();
            async move { handle.execute(run(LOOP, Duration::from_secs(60))).await }
        });
        reached(&events.started, 1).await;
        let Interrupted {
            interrupted,
            status,
        } = handle.interrupt().await;
        assert!(interrupted);
        // `interrupt` returns once the operation has ended.
        assert!(!status.operation_active, "{status:?}");
        assert_eq!(
            status.latest_interruption_kind,
            Some(Interruption::Cooperative)
        );
        let output = running.await.expect("join");
        assert_eq!(output.status, ExecutionStatus::Cancelled, "{output:?}");
        assert_eq!(
            output.error.as_ref().map(|error| error.message.as_str()),
            Some("stopped by an interrupt call")
        );
        assert_eq!(output.runtime.namespace, Some(NamespaceOutcome::Preserved));
        assert_eq!(*events.interrupts.borrow(), 1);
        // Nothing runs now: nothing to interrupt, and no interrupt reaches the kernel.
        assert!(!handle.interrupt().await.interrupted);
        assert_eq!(*events.interrupts.borrow(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_kernel_that_dies_mid_execution_is_reported_and_replaced() {
        let script = Script::default().with(
            CRASH,
            Behaviour::Die {
                after: Duration::from_millis(50),
            },
        );
        let (handle, events) = session(script);
        let output = handle.execute(run(CRASH, Duration::from_secs(30))).await;
        assert_eq!(output.status, ExecutionStatus::Error, "{output:?}");
        assert_eq!(code(&output), Some(Code::KernelDied));
        assert_eq!(
            output.error.as_ref().map(|error| error.message.as_str()),
            Some("the kernel process died during execution (killed by signal 9)")
        );
        assert_eq!(output.runtime.interruption, None, "nobody interrupted it");
        assert_eq!(output.runtime.namespace, Some(NamespaceOutcome::Reset));
        assert_eq!(output.runtime.epoch, 1);
        assert_eq!(*events.interrupts.borrow(), 0);
        assert_eq!(*events.launches.borrow(), 2);
        let next = handle.execute(run(PRINT, Duration::from_secs(1))).await;
        assert!(next.ok, "{next:?}");
        assert_eq!(next.runtime.epoch, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_queued_behind_a_hung_one_runs_on_the_replacement() {
        let script = Script::default()
            .with(HANG, Behaviour::IgnoreInterrupt)
            .with(
                PRINT,
                Behaviour::Finish {
                    after: Duration::from_millis(10),
                    stdout: "hello\n",
                },
            );
        let (handle, events) = session(script);
        let hung = tokio::spawn({
            let handle = handle.clone();
            async move { handle.execute(run(HANG, Duration::from_secs(1))).await }
        });
        reached(&events.started, 1).await;
        let queued = tokio::spawn({
            let handle = handle.clone();
            async move { handle.execute(run(PRINT, Duration::from_secs(1))).await }
        });
        while handle.status().queue_depth < 1 {
            tokio::task::yield_now().await;
        }
        let hung = hung.await.expect("join");
        assert_eq!(hung.status, ExecutionStatus::Timeout, "{hung:?}");
        assert_eq!(hung.runtime.namespace, Some(NamespaceOutcome::Reset));
        assert_eq!(hung.runtime.admission_seq, 1);
        let queued = queued.await.expect("join");
        assert!(queued.ok, "{queued:?}");
        assert_eq!(queued.stdout, "hello\n");
        assert_eq!(queued.runtime.admission_seq, 2);
        assert_eq!(queued.runtime.epoch, 1, "it ran on the replacement");
        // It waited for the deadline and the grace of the one before it; its own deadline
        // started only at dispatch.
        let behind = Duration::from_secs(1) + grace();
        assert!(
            queued.runtime.queue_wait_ms >= behind.as_millis() as u64,
            "{}",
            queued.runtime.queue_wait_ms
        );
        assert!(queued.runtime.run_ms < 1000, "{}", queued.runtime.run_ms);
        assert_eq!(*events.launches.borrow(), 2);
        assert_eq!(handle.status().queue_depth, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_during_a_hung_operation_ends_it_closed_without_a_replacement() {
        let script = Script::default().with(HANG, Behaviour::IgnoreInterrupt);
        let (handle, events) = session(script);
        let hung = tokio::spawn({
            let handle = handle.clone();
            async move { handle.execute(run(HANG, Duration::from_secs(600))).await }
        });
        reached(&events.started, 1).await;
        handle.shutdown().await;
        let hung = hung.await.expect("join");
        assert_eq!(hung.status, ExecutionStatus::Cancelled, "{hung:?}");
        assert_eq!(code(&hung), Some(Code::RuntimeClosed));
        assert_eq!(hung.runtime.interruption, Some(Interruption::Terminated));
        assert_eq!(hung.runtime.namespace, Some(NamespaceOutcome::Reset));
        assert_eq!(
            *events.launches.borrow(),
            1,
            "never replaced while shutting down"
        );
        assert_eq!(handle.status().state, SessionState::Closed);
    }
}
