//! A scripted fake kernel behind the transport seam: the tests below drive a real actor
//! through it with paused time (deadlines, interrupts, the grace period, kills, replacements
//! and the queue, each in milliseconds of real time), and, under the `test-support` feature,
//! other crates' tests run whole sessions on it ([`FakeKernels`]) with no kernel process.
//! What a real ipykernel does is pinned by the integration tests; these pin what the actor does
//! with it.

// Without the feature, only the tests here use it: its public API goes unused.
#![cfg_attr(not(feature = "test-support"), allow(dead_code))]

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
use super::error::StartFailure;
use super::handle::SessionHandle;
use super::transport::{KernelTransport, Launcher, Running};
use super::*;
use crate::status::KernelDescription;

/// What a fake kernel does with an execute request, chosen by its code (see [`FakeKernels`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeBehaviour {
    /// Prints `stdout`, then replies `ok` and goes idle, `after` from the start.
    Finish { after: Duration, stdout: String },
    /// Replies with an error (`ename: evalue`, as user code raising) and goes idle.
    Raise { ename: String, evalue: String },
    /// Runs until an interrupt arrives, then stops (`KeyboardInterrupt`) `after` later.
    StopOnInterrupt { after: Duration },
    /// Loses the first interrupt (as IPython does with one that lands in its pre-run
    /// callbacks), then stops at once on the next.
    StopOnSecondInterrupt,
    /// Runs forever, ignoring interrupts: only a kill ends it.
    IgnoreInterrupt,
    /// The process dies `after` from the start.
    Die { after: Duration },
    /// Goes `idle` without a reply, as ipykernel does when a SIGINT nobody meant for this
    /// request lands in its handler outside the code.
    DropRequest,
    /// Replies `ok` at once and goes `idle` only `after` that (iopub lagging the shell).
    LateIdle { after: Duration },
}

impl FakeBehaviour {
    /// What code nobody scripted does, by a few conventions that read like the Python they
    /// stand for: `raise Name('text')` raises; code that sets `SIG_IGN` ignores interrupts;
    /// `while True` or `time.sleep` runs until interrupted; `os._exit` kills the kernel;
    /// anything else prints its own text and finishes at once.
    pub fn of(code: &str) -> FakeBehaviour {
        let code = code.trim();
        if let Some(raised) = code.strip_prefix("raise ") {
            let (ename, rest) = raised.split_once('(').unwrap_or((raised, ""));
            let evalue = rest
                .trim_end_matches(')')
                .trim_matches(|c| c == '\'' || c == '"');
            FakeBehaviour::Raise {
                ename: ename.trim().to_owned(),
                evalue: evalue.to_owned(),
            }
        } else if code.contains("SIG_IGN") {
            FakeBehaviour::IgnoreInterrupt
        } else if code.contains("while True") || code.contains("time.sleep") {
            FakeBehaviour::StopOnInterrupt {
                after: Duration::ZERO,
            }
        } else if code.contains("os._exit") {
            FakeBehaviour::Die {
                after: Duration::ZERO,
            }
        } else {
            FakeBehaviour::Finish {
                after: Duration::ZERO,
                stdout: if code.is_empty() {
                    String::new()
                } else {
                    format!("{code}\n")
                },
            }
        }
    }
}

/// The script: code → behaviour; other code as [`FakeBehaviour::of`] says.
#[derive(Debug, Clone, Default)]
struct Script(HashMap<String, FakeBehaviour>);

impl Script {
    fn with(mut self, code: &str, behaviour: FakeBehaviour) -> Script {
        self.0.insert(code.to_owned(), behaviour);
        self
    }

    fn behaviour(&self, code: &str) -> FakeBehaviour {
        self.0
            .get(code)
            .cloned()
            .unwrap_or_else(|| FakeBehaviour::of(code))
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

/// Scripted stand-ins for kernels, for tests of code above the session (the MCP surface):
/// sessions started on them run whole (admission, deadlines, interrupts, replacement) in
/// milliseconds with no process. Each execute does what its code is scripted to do
/// ([`FakeKernels::with`]), else what [`FakeBehaviour::of`] says; helper calls (namespace
/// tools) are not served (the kernels have no helper). Clones share their counts.
///
/// ```text
/// let kernels = FakeKernels::new();
/// let manager = KernelManager::with_fake_kernels(
///     FakeKernels::session_options("default"), KernelLimits::default(), &kernels);
/// let output = manager.get(None)?.execute(ExecuteArgs { code: "x = 1".into(), ..Default::default() }).await;
/// assert_eq!(output.stdout, "x = 1\n");
/// ```
#[derive(Debug, Clone)]
pub struct FakeKernels {
    script: Script,
    events: Arc<Events>,
    /// How long each launch takes, and whether dropping one in flight is clean.
    launch: LaunchLike,
}

#[derive(Debug, Clone, Copy)]
struct LaunchLike {
    delay: Duration,
    cancellable: bool,
}

impl Default for LaunchLike {
    fn default() -> Self {
        LaunchLike {
            delay: Duration::ZERO,
            cancellable: true,
        }
    }
}

impl Default for FakeKernels {
    fn default() -> Self {
        FakeKernels::new()
    }
}

impl FakeKernels {
    pub fn new() -> FakeKernels {
        FakeKernels {
            script: Script::default(),
            events: Events::new(),
            launch: LaunchLike::default(),
        }
    }

    /// Makes each launch take `delay` and, unless `cancellable`, be a start that dropping
    /// could leave behind (as on a Jupyter server).
    pub fn launching(mut self, delay: Duration, cancellable: bool) -> FakeKernels {
        self.launch = LaunchLike { delay, cancellable };
        self
    }

    /// Makes `code` do `behaviour` in sessions started after this.
    pub fn with(mut self, code: &str, behaviour: FakeBehaviour) -> FakeKernels {
        self.script = self.script.with(code, behaviour);
        self
    }

    /// Options for a session on fake kernels: the defaults, no spares, no spool on disk.
    pub fn session_options(kernel_id: &str) -> SessionOptions {
        SessionOptions {
            kernel_id: kernel_id.to_owned(),
            limits: OutputLimits::default(),
            timeouts: Timeouts::default(),
            max_json_items: 100,
            max_pending: 32,
            queue_wait_timeout: Duration::from_secs(30),
            spare_kernels: 0,
            namespace: Default::default(),
            resolver: Resolver {
                explicit_python: None,
                virtual_env: None,
                working_dir: std::env::temp_dir(),
                path_var: None,
                cache_dir: std::env::temp_dir(),
                install_timeout: Duration::from_secs(1),
                named: None,
                confinement: Default::default(),
            },
            spool: SpoolLimits {
                max_execution_bytes: 0,
                max_total_bytes: 1,
                ..SpoolLimits::default()
            },
            kernel_spec: None,
            working_dir: None,
            jupyter: None,
            remote: None,
            owner: None,
            wording: Wording::PLAIN,
            memory: Default::default(),
            sandbox: None,
            private_dir: std::env::temp_dir(),
            checkpoint_max_bytes: None,
            notice: None,
            code_mode: None,
        }
    }

    /// Kernels launched so far (the first of each session, then each replacement).
    pub fn launches(&self) -> usize {
        *self.events.launches.borrow()
    }

    /// Interrupts delivered to the kernels so far.
    pub fn interrupts(&self) -> usize {
        *self.events.interrupts.borrow()
    }

    /// Kernels killed or shut down so far.
    pub fn kills(&self) -> usize {
        *self.events.kills.borrow()
    }

    /// Waits until `count` launches have begun in all.
    pub async fn launched(&self, count: usize) {
        let mut launches = self.events.launches.subscribe();
        let _ = launches.wait_for(|launches| *launches >= count).await;
    }

    /// Waits until the kernels have begun `count` requests in all (to interrupt or cancel
    /// one that is running, without sleeping).
    pub async fn started(&self, count: usize) {
        let mut started = self.events.started.subscribe();
        let _ = started.wait_for(|started| *started >= count).await;
    }

    fn launcher(&self) -> Arc<FakeLauncher> {
        Arc::new(FakeLauncher {
            script: Arc::new(self.script.clone()),
            events: Arc::clone(&self.events),
            launch: self.launch,
        })
    }
}

impl SessionHandle {
    /// Starts a session whose kernels are `kernels`' scripted fakes; returns at once, as
    /// [`SessionHandle::start`] does (`options.jupyter`, `remote` and the resolver are unused).
    pub fn start_fake(options: SessionOptions, kernels: &FakeKernels) -> SessionHandle {
        let (handle, commands) = SessionHandle::detached(options);
        let launcher = kernels.launcher();
        let shared = Arc::clone(&handle.shared);
        handle
            .shared
            .tasks
            .spawn(supervise(shared, commands, launcher));
        handle
    }
}

struct FakeLauncher {
    script: Arc<Script>,
    events: Arc<Events>,
    launch: LaunchLike,
}

impl Launcher for FakeLauncher {
    fn provision(&self) -> BoxFuture<'_, Result<(), StartFailure>> {
        Box::pin(async { Ok(()) })
    }

    fn launch(&self) -> BoxFuture<'static, Result<Running, StartFailure>> {
        let (script, events) = (Arc::clone(&self.script), Arc::clone(&self.events));
        let delay = self.launch.delay;
        Box::pin(async move {
            let mut pid = 0;
            events.launches.send_modify(|launches| {
                *launches += 1;
                pid = 1000 + *launches as u32;
            });
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
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
                checkpoints: false,
                code_mode: false,
                description: fake_description(pid),
            })
        })
    }

    fn cancellable(&self) -> bool {
        self.launch.cancellable
    }
}

fn fake_description(pid: u32) -> KernelDescription {
    KernelDescription {
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
        sandbox: None,
    }
}

struct FakeKernel {
    script: Arc<Script>,
    events: Arc<Events>,
    exit: Arc<watch::Sender<Option<KernelExit>>>,
    /// Interrupts delivered to this kernel.
    interrupted: watch::Sender<u64>,
    /// The tasks playing requests; aborting one drops its sender, closing the receiver, as the
    /// real router does when the process exits. A kill aborts and joins them, a drop aborts them.
    running: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    executions: Mutex<usize>,
}

fn iopub(content: impl Into<JupyterMessageContent>) -> Routed {
    Routed {
        channel: Channel::IoPub,
        message: JupyterMessage::new(content, None),
    }
}

/// The execute_reply: `ok`, or the error `(ename, evalue)`.
fn reply(count: usize, error: Option<(String, String)>) -> Routed {
    let content = ExecuteReply {
        status: if error.is_some() {
            ReplyStatus::Error
        } else {
            ReplyStatus::Ok
        },
        execution_count: ExecutionCount(count),
        error: error.map(|(ename, evalue)| {
            Box::new(ReplyError {
                traceback: vec![format!("{ename}: {evalue}")],
                ename,
                evalue,
            })
        }),
        ..Default::default()
    };
    Routed {
        channel: Channel::Shell,
        message: JupyterMessage::new(content, None),
    }
}

fn keyboard_interrupt() -> Option<(String, String)> {
    Some(("KeyboardInterrupt".to_owned(), String::new()))
}

/// Plays one request as `behaviour` says: `busy`, `execute_input`, what the code does, then the
/// reply and `idle` (unless the kernel dies first).
async fn play(
    behaviour: FakeBehaviour,
    code: String,
    count: usize,
    sender: mpsc::UnboundedSender<Routed>,
    mut interrupted: watch::Receiver<u64>,
    events: Arc<Events>,
    exit: Arc<watch::Sender<Option<KernelExit>>>,
) {
    let begun = Instant::now();
    let _ = sender.send(iopub(Status::busy()));
    let _ = sender.send(iopub(ExecuteInput {
        code,
        execution_count: ExecutionCount(count),
    }));
    events.started.send_modify(|started| *started += 1);
    let error = match behaviour {
        FakeBehaviour::Finish { after, stdout } => {
            tokio::time::sleep_until(begun + after).await;
            if !stdout.is_empty() {
                let _ = sender.send(iopub(StreamContent {
                    name: Stdio::Stdout,
                    text: stdout,
                }));
            }
            None
        }
        FakeBehaviour::Raise { ename, evalue } => Some((ename, evalue)),
        FakeBehaviour::StopOnInterrupt { after } => {
            let _ = interrupted.changed().await;
            tokio::time::sleep(after).await;
            keyboard_interrupt()
        }
        FakeBehaviour::StopOnSecondInterrupt => {
            let base = *interrupted.borrow_and_update();
            let _ = interrupted.wait_for(|count| *count >= base + 2).await;
            keyboard_interrupt()
        }
        FakeBehaviour::IgnoreInterrupt => std::future::pending().await,
        FakeBehaviour::Die { after } => {
            tokio::time::sleep_until(begun + after).await;
            exit.send_replace(Some(KernelExit::Signal(libc_sigkill())));
            return; // the sender goes with the task: the receiver closes
        }
        FakeBehaviour::DropRequest => {
            let _ = sender.send(iopub(Status::idle()));
            // The kernel lives on: its router keeps the request's channel open.
            return std::future::pending().await;
        }
        FakeBehaviour::LateIdle { after } => {
            let _ = sender.send(reply(count, None));
            tokio::time::sleep(after).await;
            let _ = sender.send(iopub(Status::idle()));
            return;
        }
    };
    let _ = sender.send(reply(count, error));
    let _ = sender.send(iopub(Status::idle()));
}

impl FakeKernel {
    /// Marks the kernel exited and aborts its requests' tasks; returns them, to be joined.
    fn gone(&self, exit: KernelExit) -> Vec<tokio::task::JoinHandle<()>> {
        self.exit.send_if_modified(|current| {
            let first = current.is_none();
            if first {
                *current = Some(exit);
            }
            first
        });
        let tasks = std::mem::take(&mut *self.running.lock().expect("running lock"));
        for task in &tasks {
            task.abort();
        }
        tasks
    }
}

impl Drop for FakeKernel {
    fn drop(&mut self) {
        for task in self.running.get_mut().expect("running lock").iter() {
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
            let interrupted = self.interrupted.subscribe();
            let (events, exit) = (Arc::clone(&self.events), Arc::clone(&self.exit));
            let code = request.code.clone();
            let task = tokio::spawn(play(
                behaviour,
                code,
                count,
                sender,
                interrupted,
                events,
                exit,
            ));
            let mut running = self.running.lock().expect("running lock");
            running.retain(|task| !task.is_finished());
            running.push(task);
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
            for task in self.gone(KernelExit::Signal(libc_sigkill())) {
                let _ = task.await; // aborted: it ends at once
            }
        })
    }

    fn shutdown(&self, _grace: Duration) -> BoxFuture<'_, ()> {
        self.kill()
    }
}

fn libc_sigkill() -> i32 {
    9
}

#[cfg(test)]
mod tests {
    use super::super::handle::Interrupted;
    use super::FakeBehaviour as Behaviour;
    use super::*;
    use crate::status::SessionState;
    use ipython_mcp_output::output::{Code, ExecutionStatus, Interruption, NamespaceOutcome};

    const LOOP: &str = "while True: pass";
    const HANG: &str = "signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(1e9)";
    const CRASH: &str = "os.kill(os.getpid(), 9)";
    const PRINT: &str = "print('hello')";

    /// A session whose actor runs on fake kernels following `script`.
    fn session(script: Script) -> (SessionHandle, Arc<Events>) {
        let options = crate::session::tests::options(4, Duration::from_secs(600));
        let kernels = FakeKernels {
            script,
            events: Events::new(),
            launch: LaunchLike::default(),
        };
        (SessionHandle::start_fake(options, &kernels), kernels.events)
    }

    /// Runs `code` (60 s deadline) on its own task; the token cancels it as a client would.
    fn cancellable(
        handle: &SessionHandle,
        code: &'static str,
    ) -> (tokio::task::JoinHandle<ExecutionOutput>, CancellationToken) {
        let cancel = CancellationToken::new();
        let running = tokio::spawn({
            let (handle, cancel) = (handle.clone(), cancel.clone());
            async move {
                let args = ExecuteArgs {
                    cancel,
                    ..run(code, Duration::from_secs(60))
                };
                handle.execute(args).await
            }
        });
        (running, cancel)
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
        let (running, cancel) = cancellable(&handle, LOOP);
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
    async fn a_request_the_kernel_drops_ends_soon_after_idle_not_at_the_deadline() {
        const DROPPED: &str = "dropped = 1";
        let script = Script::default().with(DROPPED, Behaviour::DropRequest);
        let (handle, events) = session(script);
        let output = handle.execute(run(DROPPED, Duration::from_secs(600))).await;
        assert_eq!(output.status, ExecutionStatus::Cancelled, "{output:?}");
        assert_eq!(code(&output), Some(Code::OperationCancelled));
        let message = output.error.as_ref().map(|error| error.message.as_str());
        assert!(
            message.is_some_and(|message| message.contains("dropped this request")),
            "{message:?}"
        );
        assert_eq!(output.runtime.namespace, Some(NamespaceOutcome::Preserved));
        // The drain bound after idle, not the 600 s deadline; and no interrupt of ours.
        assert!(output.runtime.run_ms < 60_000, "{:?}", output.runtime);
        assert_eq!(*events.interrupts.borrow(), 0);
        assert_eq!(*events.launches.borrow(), 1);
        let next = handle.execute(run(PRINT, Duration::from_secs(1))).await;
        assert!(next.ok, "{next:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancellation_after_the_reply_sends_no_interrupt() {
        // The reply is in, `idle` lags: a cancellation now must not interrupt, or the SIGINT
        // would land in whatever the kernel runs next.
        const LATE: &str = "late = 1";
        let script = Script::default().with(
            LATE,
            Behaviour::LateIdle {
                after: Duration::from_secs(2),
            },
        );
        let (handle, events) = session(script);
        let (running, cancel) = cancellable(&handle, LATE);
        reached(&events.started, 1).await;
        // Paused time moves only once every task waits: the reply has been taken by then.
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
        let output = running.await.expect("join");
        assert!(output.ok, "{output:?}");
        assert_eq!(output.status, ExecutionStatus::Ok);
        assert_eq!(output.runtime.interruption, None, "{output:?}");
        assert_eq!(*events.interrupts.borrow(), 0);
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
            Some("the kernel process died during execution (killed by SIGKILL (signal 9))")
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
                    stdout: "hello\n".into(),
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
