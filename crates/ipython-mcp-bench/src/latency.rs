//! Latency benchmarks: trivial executes and namespace calls through MCP, and the same loop through our kernel client, a session, and jupyter_client.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use ipython_mcp_jupyter::protocol::{
    ExecuteRequest, ExecutionState, JupyterMessage, JupyterMessageContent,
};
use ipython_mcp_jupyter::{Channel, Kernel, LaunchSpec};
use rmcp::model::{CallToolRequestParams, ClientConfig};
use serde_json::{json, Value};

use crate::server::{proc_status_kib, serve, Served};

pub(crate) const CALLS: usize = 500;
pub(crate) const WARMUP: usize = 30;
pub(crate) const SETUP: &str = "x = 0";
pub(crate) const LOOP: &str = "x = x + 1";
const FLOOD: &str = "import sys\nsys.stdout.write('x' * 100_000_000)\nfor _ in range(100):\n    print('y' * 999_999)";

pub(crate) struct Rss {
    pub(crate) idle_kib: u64,
    pub(crate) peak_kib: u64,
    pub(crate) flood_seconds: f64,
    pub(crate) flood_omitted: u64,
}

/// Namespace tool round trips through MCP, in milliseconds.
pub(crate) struct NamespaceTimes {
    pub(crate) inspect: Vec<f64>,
    pub(crate) call: Vec<f64>,
    pub(crate) dynamic_call: Vec<f64>,
    pub(crate) list_100: Vec<f64>,
}

pub(crate) async fn bench_mcp(
    server_binary: &Path,
) -> anyhow::Result<(Vec<f64>, Rss, NamespaceTimes)> {
    let Served {
        mut child,
        pid,
        client,
    } = serve(
        server_binary,
        &[
            (ipython_mcp_config::LOG.env, "warn".to_owned()),
            (ipython_mcp_config::MAX_TIMEOUT.env, "3600".to_owned()),
        ],
    )
    .await?;
    let call = |code: &str, timeout: f64| {
        let arguments = json!({"code": code, "timeout_seconds": timeout})
            .as_object()
            .cloned()
            .expect("object");
        client
            .peer()
            .call_tool(CallToolRequestParams::new("execute").with_arguments(arguments))
    };
    let samples = execute_samples(&client).await?;
    call("def f(x: int = 0) -> int:\n    return x + 1", 30.0).await?;
    let mut namespace = NamespaceTimes {
        inspect: Vec::with_capacity(CALLS),
        call: Vec::with_capacity(CALLS),
        dynamic_call: Vec::with_capacity(CALLS),
        list_100: Vec::with_capacity(CALLS),
    };
    for (tool, arguments, samples) in [
        ("inspect", json!({"name": "f"}), &mut namespace.inspect),
        (
            "call_function",
            json!({"name": "f", "arguments": {"x": 1}}),
            &mut namespace.call,
        ),
    ] {
        let arguments = arguments.as_object().cloned().expect("object");
        for round in 0..WARMUP + CALLS {
            let started = Instant::now();
            let result = client
                .peer()
                .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments.clone()))
                .await?;
            if result.is_error == Some(true) {
                bail!("{tool} failed: {:?}", result.structured_content);
            }
            if round >= WARMUP {
                samples.push(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }
    // 100 dynamic tools: one call of the first, and tools/list with all of them.
    call(
        "for _i in range(100):\n    exec(f'def tool_{_i}(x: int = 0, label: str = \"\") -> int:\\n    return x + {_i}')",
        30.0,
    )
    .await?;
    for index in 0..100 {
        let arguments = json!({"name": format!("tool_{index}")})
            .as_object()
            .cloned()
            .expect("object");
        let result = client
            .peer()
            .call_tool(CallToolRequestParams::new("register_tool").with_arguments(arguments))
            .await?;
        if result.is_error == Some(true) {
            bail!("register_tool failed: {:?}", result.structured_content);
        }
    }
    let arguments = json!({"x": 1}).as_object().cloned().expect("object");
    for round in 0..WARMUP + CALLS {
        let started = Instant::now();
        let result = client
            .peer()
            .call_tool(CallToolRequestParams::new("tool_0").with_arguments(arguments.clone()))
            .await?;
        if result.is_error == Some(true) {
            bail!("dynamic call failed: {:?}", result.structured_content);
        }
        if round >= WARMUP {
            namespace
                .dynamic_call
                .push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    for round in 0..WARMUP + CALLS / 5 {
        let started = Instant::now();
        let tools = client.peer().list_all_tools().await?;
        if tools.len() < 100 {
            bail!("tools/list returned {} tools", tools.len());
        }
        if round >= WARMUP {
            namespace
                .list_100
                .push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    call("%reset_selective -f tool_", 30.0).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_kib = proc_status_kib(pid, "VmRSS:");
    let started = Instant::now();
    let flood = call(FLOOD, 600.0).await?;
    let flood_seconds = started.elapsed().as_secs_f64();
    // In the default result shape the count is in the text's marker: "[… N characters".
    let flood_omitted = flood
        .content
        .iter()
        .filter_map(|block| block.as_text())
        .find_map(|text| {
            let count = text.text.split("[… ").nth(1)?.split(' ').next()?;
            count.parse::<u64>().ok()
        })
        .unwrap_or(0);
    let peak_kib = proc_status_kib(pid, "VmHWM:");
    client.cancel().await?;
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    Ok((
        samples,
        Rss {
            idle_kib,
            peak_kib,
            flood_seconds,
            flood_omitted,
        },
        namespace,
    ))
}

/// `execute` of [`LOOP`] through `client`, in ms: [`SETUP`] until the default session answers
/// (the first call queues behind its start), [`WARMUP`] unmeasured calls, then [`CALLS`].
pub(crate) async fn execute_samples(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
) -> anyhow::Result<Vec<f64>> {
    let call = |code: &str| {
        let arguments = json!({"code": code, "timeout_seconds": 30})
            .as_object()
            .cloned()
            .expect("object");
        client
            .peer()
            .call_tool(CallToolRequestParams::new("execute").with_arguments(arguments))
    };
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let result = call(SETUP).await?;
        if result.is_error != Some(true) {
            break;
        }
        if Instant::now() > deadline {
            bail!("kernel never became ready: {:?}", result.structured_content);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for _ in 0..WARMUP {
        call(LOOP).await?;
    }
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        let result = call(LOOP).await?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        if result.is_error == Some(true) {
            bail!("execute failed: {:?}", result.structured_content);
        }
    }
    Ok(samples)
}

pub(crate) async fn bench_raw_client(python: &Path) -> anyhow::Result<Vec<f64>> {
    let spec = LaunchSpec {
        python: python.to_owned(),
        env: Vec::new(),
        working_dir: None,
        interrupt_mode: Default::default(),
        argv: None,
        kernel_name: None,
        memory: Default::default(),
        sandbox: None,
        run_dir_in: std::env::temp_dir(),
        own_dirs: Vec::new(),
    };
    let kernel = Kernel::launch(&spec, Duration::from_secs(30)).await?;
    let samples = timed_loop(|code| async {
        let (msg_id, mut receiver) = kernel
            .request(Channel::Shell, execute_request(code))
            .await?;
        let waited = until_reply_and_idle(&mut receiver).await;
        kernel.forget(&msg_id);
        waited
    })
    .await;
    kernel.shutdown(Duration::from_secs(2)).await;
    samples
}

/// `run` of [`SETUP`], [`WARMUP`] unmeasured loops, then [`CALLS`] measured ones (ms).
pub(crate) async fn timed_loop<F, Fut>(run: F) -> anyhow::Result<Vec<f64>>
where
    F: Fn(&'static str) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    run(SETUP).await?;
    for _ in 0..WARMUP {
        run(LOOP).await?;
    }
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        run(LOOP).await?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(samples)
}

/// Reads a request's messages until its reply and the kernel's `idle` are both in.
pub(crate) async fn until_reply_and_idle(
    receiver: &mut tokio::sync::mpsc::UnboundedReceiver<ipython_mcp_jupyter::Routed>,
) -> anyhow::Result<()> {
    let (mut reply, mut idle) = (false, false);
    while !(reply && idle) {
        let routed = receiver.recv().await.context("the kernel is gone")?;
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
    Ok(())
}

/// An `execute_request` for `code`, as a frontend sends it.
pub(crate) fn execute_request(code: &str) -> JupyterMessage {
    JupyterMessage::new(
        ExecuteRequest {
            code: code.to_owned(),
            silent: false,
            store_history: true,
            user_expressions: None,
            allow_stdin: false,
            stop_on_error: false,
        },
        None,
    )
}

pub(crate) async fn bench_session(python: &Path) -> anyhow::Result<Vec<f64>> {
    let config = ipython_mcp_config::Config::default();
    let options = ipython_mcp_kernel::SessionOptions {
        kernel_id: "bench".to_owned(),
        limits: config.limits,
        timeouts: config.timeouts,
        max_json_items: config.limits.max_results,
        max_pending: config.queue.max_pending,
        queue_wait_timeout: Duration::from_secs(120),
        spare_kernels: 0,
        namespace: Default::default(),
        resolver: ipython_mcp_env::Resolver {
            explicit_python: Some(python.to_owned()),
            virtual_env: None,
            working_dir: std::env::current_dir()?,
            path_var: std::env::var_os("PATH"),
            cache_dir: std::env::temp_dir(),
            install_timeout: Duration::from_secs(60),
            named: None,
            confinement: Default::default(),
        },
        spool: Default::default(),
        kernel_spec: None,
        working_dir: None,
        jupyter: None,
        remote: None,
        owner: None,
        // The session alone, timed without the MCP layer: its errors need no agent hints.
        wording: ipython_mcp_kernel::Wording::PLAIN,
        memory: Default::default(),
        sandbox: None,
        private_dir: std::env::temp_dir(),
        checkpoint_max_bytes: None,
        notice: None,
        code_mode: None,
    };
    let session = ipython_mcp_kernel::SessionHandle::start(options);
    let run = |code: &str| {
        session.execute(ipython_mcp_kernel::ExecuteArgs {
            code: code.to_owned(),
            ..Default::default()
        })
    };
    let first = run(SETUP).await;
    if !first.ok {
        bail!("session failed: {:?}", first.error);
    }
    for _ in 0..WARMUP {
        run(LOOP).await;
    }
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        run(LOOP).await;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    session.shutdown().await;
    Ok(samples)
}

pub(crate) async fn bench_jupyter_client(python: &Path) -> anyhow::Result<Vec<f64>> {
    let script = std::env::temp_dir().join(format!("ipython-mcp-bench-{}.py", std::process::id()));
    std::fs::write(&script, include_str!("jupyter_client_loop.py"))?;
    let output = tokio::process::Command::new(python)
        .arg(&script)
        .args([
            CALLS.to_string(),
            WARMUP.to_string(),
            SETUP.to_owned(),
            LOOP.to_owned(),
        ])
        .stdin(Stdio::null())
        .output()
        .await?;
    let _ = std::fs::remove_file(&script);
    if !output.status.success() {
        bail!(
            "jupyter_client loop failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let parsed: Value = serde_json::from_slice(&output.stdout)?;
    Ok(parsed["samples_ms"]
        .as_array()
        .context("samples")?
        .iter()
        .filter_map(Value::as_f64)
        .collect())
}
