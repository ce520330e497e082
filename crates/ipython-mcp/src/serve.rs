//! `ipython-mcp` (no subcommand): serve MCP on stdio, or over HTTP (`http.rs`).
//!
//! The default session starts in the background before the transport is served, so the MCP
//! `initialize` handshake never waits for Python. Shutdown (stdin closed, SIGTERM, SIGINT)
//! closes every session: queued calls end `runtime_closed`, kernels are terminated.

use std::process::ExitCode;
use std::sync::Arc;

use ipython_mcp_config::{Config, Transport};
use ipython_mcp_env::Resolver;
use ipython_mcp_kernel::{SessionHandle, SessionOptions};
use ipython_mcp_mcp::{
    fixtures, Blueprint, IpythonMcp, KernelManager, Peers, Principals, ServerState, SessionId,
    StartSpec,
};
use rmcp::ServiceExt as _;
use tokio::signal::unix::{signal, SignalKind};

use crate::test_mode::TestMode;

pub async fn run(
    config: Config,
    credentials: Option<crate::http::Credentials>,
    test_mode: TestMode,
) -> anyhow::Result<ExitCode> {
    crate::proxy::ensure(&config, &private_dir())?;
    let config = Arc::new(config);
    if test_mode != TestMode::Off {
        tracing::warn!(
            mode = ?test_mode,
            token_required = test_mode.requires_token(),
            "TEST MODE ({}): serving conformance fixtures; for the project's tests only, loopback only",
            crate::test_mode::VARIABLE
        );
    }
    if let Some(crate::http::Credentials::Principals { path, principals }) = credentials {
        let default_spec = match default_spec(&config).await? {
            Ok(spec) => spec,
            Err(code) => return Ok(code),
        };
        let oauth = match config.http.oauth.clone() {
            Some(settings) => Some(crate::oauth::Verifier::new(settings)?),
            None => None,
        };
        let gate = Arc::new(crate::principals::Gate::new(
            path,
            principals,
            oauth,
            config.kernels.idle_timeout,
        ));
        let make = principal_factory(Arc::clone(&config), default_spec, Arc::clone(&gate));
        let principals = Principals::new(Blueprint::new(Arc::clone(&config)), make);
        let served = crate::http::Served::PerPrincipal { principals, gate };
        return crate::http::run(config, served, test_mode).await;
    }
    let sessions = match start_sessions(&config).await? {
        Ok(sessions) => sessions,
        Err(code) => return Ok(code),
    };
    if config.transport == Transport::Http {
        let token = match credentials {
            Some(crate::http::Credentials::Token { token, generated }) => Some((token, generated)),
            _ => None,
        };
        let served = crate::http::Served::Shared {
            state: sessions,
            token,
        };
        return crate::http::run(config, served, test_mode).await;
    }
    let product = IpythonMcp::new(sessions.clone(), Arc::clone(&config));
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "serving MCP on stdio");
    if test_mode.fixtures() {
        serve_stdio(fixtures::wrap(product), sessions).await
    } else {
        serve_stdio(product, sessions).await
    }
}

/// The default session (starting in the background) and the state every connection shares;
/// `Err` is the exit status of a configuration error already reported.
async fn start_sessions(config: &Arc<Config>) -> anyhow::Result<Result<ServerState, ExitCode>> {
    let default_spec = match default_spec(config).await? {
        Ok(spec) => spec,
        Err(code) => return Ok(Err(code)),
    };
    let sessions = sessions(
        config,
        default_spec,
        session_options(config, SessionId::DEFAULT)?,
        DefaultStart::Now,
    );
    sessions.spawn_reaper();
    Ok(Ok(sessions))
}

/// The `--kernel` the default session starts with, checked (kernelspecs and venvs are files,
/// read off the async threads); `Err` is the exit status of the error already reported.
pub async fn default_spec(config: &Config) -> anyhow::Result<Result<Option<StartSpec>, ExitCode>> {
    let Some(spec) = config.kernel.clone() else {
        return Ok(Ok(None));
    };
    match tokio::task::spawn_blocking(move || StartSpec::parse(&spec, None)).await? {
        Ok(spec) => Ok(Ok(Some(spec))),
        Err(error) => {
            let setting = ipython_mcp_config::KERNEL;
            eprintln!(
                "ipython-mcp: invalid configuration: {} (--{}): {error}",
                setting.env, setting.flag
            );
            Ok(Err(ExitCode::from(2)))
        }
    }
}

/// When the `default` session starts.
enum DefaultStart {
    /// Now, in the background, so the first call finds it ready.
    Now,
    /// At the first call that needs it (a principal's: one who never runs code costs no
    /// kernel process).
    FirstUse,
}

/// A kernel manager with a `default` session, and the state over it; sessions started later
/// are made from `options`.
fn sessions(
    config: &Config,
    default_spec: Option<StartSpec>,
    options: SessionOptions,
    default: DefaultStart,
) -> ServerState {
    // One client of the Jupyter server for the kernels and the notebooks.
    let jupyter = options.jupyter.clone();
    let mut default_options = options.clone();
    if let Some(spec) = &default_spec {
        spec.clone().apply(&mut default_options);
    }
    let kernels = match default {
        DefaultStart::Now => KernelManager::with_template(
            SessionHandle::start(default_options),
            options,
            default_spec,
            config.kernels,
        ),
        DefaultStart::FirstUse => {
            KernelManager::with_lazy_default(default_options, options, default_spec, config.kernels)
        }
    };
    ServerState::new(kernels, config, Peers::default(), jupyter)
}

/// How a principal's state is made at their first request: only while the gate still admits
/// them (a request let in just before a SIGHUP removed them makes nothing), with their quotas.
fn principal_factory(
    config: Arc<Config>,
    default_spec: Option<StartSpec>,
    gate: Arc<crate::principals::Gate>,
) -> Box<ipython_mcp_mcp::StateFactory> {
    Box::new(move |principal: &ipython_mcp_config::PrincipalName| {
        if !gate.admits(principal) {
            return Err(format!(
                "{principal} is no longer a principal of this server"
            ));
        }
        let quotas = gate.quotas(principal);
        // Every principal's upstreams file holds credentials: no one's kernel reads any.
        let mut config = (*config).clone();
        config.sandbox.read_deny.extend(gate.upstream_files());
        principal_sessions(&config, default_spec.clone(), principal, quotas)
    })
}

/// A principal's own sessions (see `Principals`): the server's settings with the principal's
/// quotas, their notebooks and kernels in their own directory under the workspace root. Their
/// `default` kernel starts at the first call that needs it.
pub fn principal_sessions(
    config: &Config,
    default_spec: Option<StartSpec>,
    principal: &ipython_mcp_config::PrincipalName,
    quotas: ipython_mcp_config::Quotas,
) -> Result<(ServerState, Arc<Config>), String> {
    let root = match &config.workspace_root {
        Some(root) => root.clone(),
        None => {
            std::env::current_dir().map_err(|error| format!("no working directory: {error}"))?
        }
    };
    let workspace = principal_workspace(&root, principal)?;
    let mut config = config.clone();
    config.workspace_root = Some(workspace.clone());
    if let Some(max) = quotas.max_kernels {
        config.kernels.max_kernels = max;
    }
    if let Some(max) = quotas.max_pending_operations {
        config.queue.max_pending = max;
    }
    if let Some(mode) = quotas.sandbox {
        config.sandbox.mode = mode;
        config.sandbox.explicit = true;
    }
    if let Some(network) = quotas.network.clone() {
        config.sandbox.network = network;
    }
    if let Some(file) = quotas.upstream_servers.clone() {
        config.upstream_servers = vec![file];
    }
    if config.sandbox.network.confines()
        && config.sandbox.mode == ipython_mcp_config::SandboxMode::Off
    {
        return Err(format!(
            "{principal}: a network other than on needs the sandbox, which is off for them"
        ));
    }
    // Their own allowlist's proxy, before their first kernel.
    crate::proxy::ensure(&config, &private_dir())
        .map_err(|error| format!("{principal}: the network proxy did not start: {error}"))?;
    let mut options =
        session_options(&config, SessionId::DEFAULT).map_err(|error| format!("{error:#}"))?;
    options.working_dir = Some(workspace);
    options.owner = Some(principal.to_string());
    // Their kernels' own IPython and matplotlib directories (read-only), kept from everyone
    // else's.
    if let Some(policy) = &options.sandbox {
        options.sandbox = Some(Arc::new(ipython_mcp_sandbox::Policy {
            state: Some(private_dir().join(format!("principal-{principal}"))),
            private_temp: true,
            ..(**policy).clone()
        }));
    }
    Ok((
        sessions(&config, default_spec, options, DefaultStart::FirstUse),
        Arc::new(config),
    ))
}

/// The file in a principal's directory that says the server made it for them (it holds their
/// name). A directory without it, or naming someone else, is never taken as theirs: not a
/// project directory that happens to share the name (the server's own working directory can
/// be the root), nor another principal's where the file system ignores case.
pub const PRINCIPAL_MARKER: &str = ".ipython-mcp-principal";

/// `<root>/<principal>`, made now (with its marker, atomically: a directory is renamed into
/// place only once marked) or made by this server for this principal before.
fn principal_workspace(
    root: &std::path::Path,
    principal: &ipython_mcp_config::PrincipalName,
) -> Result<std::path::PathBuf, String> {
    let name = principal.as_str();
    let workspace = root.join(name);
    let shown = workspace.display();
    if std::fs::symlink_metadata(&workspace).is_err() {
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|error| format!("no randomness: {error}"))?;
        let suffix: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
        let making = root.join(format!(".{name}.{suffix}.new"));
        let made = std::fs::create_dir(&making)
            .and_then(|()| std::fs::write(making.join(PRINCIPAL_MARKER), name))
            .and_then(|()| std::fs::rename(&making, &workspace));
        match made {
            Ok(()) => return Ok(workspace),
            Err(error) => {
                let _ = std::fs::remove_dir_all(&making);
                // Another start may have made it meanwhile: checked below like any other.
                if std::fs::symlink_metadata(&workspace).is_err() {
                    return Err(format!("cannot create {shown}: {error}"));
                }
            }
        }
    }
    let is_directory = std::fs::symlink_metadata(&workspace)
        .map(|metadata| metadata.is_dir())
        .unwrap_or(false);
    // The principal's kernels write in their workspace: the marker is read as an untrusted
    // file (no link followed, no FIFO opened, a name's length at most).
    let marked =
        ipython_mcp_untrusted::read(&workspace, std::path::Path::new(PRINCIPAL_MARKER), 4096)
            .is_ok_and(|marker| String::from_utf8_lossy(&marker).trim_end() == name);
    if is_directory && marked {
        return Ok(workspace);
    }
    Err(format!(
        "{shown} exists but was not made by this server for {name} (it is not a directory holding a {PRINCIPAL_MARKER} file that names them); refused, so that no other directory is taken as theirs. If it is theirs, write their name into {shown}/{PRINCIPAL_MARKER}"
    ))
}

/// `--json-lines`: the desktop protocol on stdin and stdout instead of MCP. End of input (or
/// SIGTERM, SIGINT) shuts the sessions down; running executions end `runtime_closed`.
pub async fn run_json_lines(config: Config) -> anyhow::Result<ExitCode> {
    crate::proxy::ensure(&config, &private_dir())?;
    let config = Arc::new(config);
    let sessions = match start_sessions(&config).await? {
        Ok(sessions) => sessions,
        Err(code) => return Ok(code),
    };
    let product = IpythonMcp::new(sessions.clone(), Arc::clone(&config));
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        "serving the json-lines protocol on stdio"
    );
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let on_eof = {
        let sessions = sessions.clone();
        move || sessions.begin_shutdown()
    };
    let served = crate::jsonlines::serve_json_lines(
        product,
        tokio::io::BufReader::new(tokio::io::stdin()),
        tokio::io::stdout(),
        on_eof,
    );
    tokio::select! {
        served = served => {
            if let Err(error) = served {
                tracing::warn!(%error, "json-lines stream failed");
            }
        }
        _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = interrupt.recv() => tracing::info!("SIGINT: shutting down"),
    }
    sessions.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

async fn serve_stdio<S: rmcp::ServerHandler>(
    server: S,
    sessions: ServerState,
) -> anyhow::Result<ExitCode> {
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    // Signals are honoured at every stage, including before a client has finished the
    // handshake (or while nobody writes to stdin at all).
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    // At end of input the sessions start shutting down before rmcp cancels the requests it
    // holds, so those end `runtime_closed` rather than "cancelled by the client".
    let stdin = {
        let sessions = sessions.clone();
        EofSignal::new(stdin, move || sessions.begin_shutdown())
    };
    let running = tokio::select! {
        running = server.serve((stdin, stdout)) => running,
        _ = terminate.recv() => { tracing::info!("SIGTERM: shutting down"); sessions.shutdown().await; return Ok(ExitCode::SUCCESS) }
        _ = interrupt.recv() => { tracing::info!("SIGINT: shutting down"); sessions.shutdown().await; return Ok(ExitCode::SUCCESS) }
    };
    match running {
        Ok(service) => {
            let token = service.cancellation_token();
            // The service stays alive (dropping it would cancel every request at once) while,
            // on a signal, the sessions shut down first with the client still connected: queued
            // calls are answered `runtime_closed` and a running one says it was interrupted;
            // then the transport closes and rmcp drains the last responses.
            let waiting = service.waiting();
            tokio::pin!(waiting);
            let signal = tokio::select! {
                quit = &mut waiting => { tracing::info!(reason = ?quit.ok(), "transport closed"); None }
                _ = terminate.recv() => Some("SIGTERM"),
                _ = interrupt.recv() => Some("SIGINT"),
            };
            if let Some(signal) = signal {
                tracing::info!(signal, "shutting down");
                sessions.shutdown().await;
                token.cancel();
                let _ = waiting.await;
            }
        }
        // A client that closes before initializing is not a server failure.
        Err(error) => tracing::warn!(%error, "MCP session ended during initialization"),
    }
    sessions.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// A reader that calls `on_eof` once, the first time its input ends.
struct EofSignal<R> {
    inner: R,
    on_eof: Option<Box<dyn FnOnce() + Send>>,
}

impl<R> EofSignal<R> {
    fn new(inner: R, on_eof: impl FnOnce() + Send + 'static) -> Self {
        Self {
            inner,
            on_eof: Some(Box::new(on_eof)),
        }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for EofSignal<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let at_end = matches!(polled, std::task::Poll::Ready(Ok(())))
            && buf.filled().len() == before
            && buf.remaining() > 0;
        if at_end {
            if let Some(on_eof) = self.on_eof.take() {
                on_eof();
            }
        }
        polled
    }
}

/// The server's private directory, once [`make_private_dir`] made it.
static PRIVATE_DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Makes the server's private directory, where local kernels' run directories and output
/// spools go (out of the temp directory every kernel writes: see the jupyter crate's
/// `private_dir`). Without one (nowhere writable), they go in the temp directory, as the
/// sandbox's report then says.
pub fn make_private_dir() -> Option<ipython_mcp_jupyter::private_dir::PrivateDir> {
    use ipython_mcp_jupyter::private_dir::{candidate_bases, PrivateDir};
    let var = |name: &str| std::env::var_os(name).map(std::path::PathBuf::from);
    let bases = candidate_bases(
        var("XDG_RUNTIME_DIR").as_deref(),
        var("XDG_STATE_HOME").as_deref(),
        var("HOME").as_deref(),
        &std::env::temp_dir(),
    );
    match PrivateDir::create(&bases) {
        Ok(dir) => {
            tracing::debug!(dir = %dir.path().display(), "private directory");
            let _ = PRIVATE_DIR.set(dir.path().to_owned());
            Some(dir)
        }
        Err(error) => {
            tracing::warn!(%error, "no private directory: kernels' run directories go in the temp directory");
            None
        }
    }
}

/// Where local kernels' run directories and output spools are made.
pub(crate) fn private_dir() -> std::path::PathBuf {
    PRIVATE_DIR
        .get()
        .cloned()
        .unwrap_or_else(std::env::temp_dir)
}

/// The session options every kernel session uses, from the validated configuration.
pub fn session_options(config: &Config, kernel_id: &str) -> anyhow::Result<SessionOptions> {
    Ok(SessionOptions {
        kernel_id: kernel_id.to_owned(),
        limits: config.limits,
        timeouts: config.timeouts,
        max_json_items: config.limits.max_results,
        max_pending: config.queue.max_pending,
        queue_wait_timeout: config.queue.queue_wait,
        spare_kernels: config.spares.0,
        namespace: config.namespace.clone(),
        resolver: resolver(config)?,
        spool: ipython_mcp_output::SpoolLimits {
            max_execution_bytes: config.spool.max_execution_bytes,
            max_total_bytes: config.spool.max_total_bytes,
            max_retained_bytes: config.spool.max_retained_bytes,
            max_server_retained_bytes: config.spool.max_server_retained_bytes,
        },
        kernel_spec: None,
        working_dir: None,
        jupyter: jupyter_server(config)?,
        remote: None,
        owner: None,
        memory: ipython_mcp_jupyter::MemoryPolicy {
            limit_bytes: config.memory.limit_bytes,
            enforcement: if config.memory.watchdog_only {
                ipython_mcp_jupyter::Enforcement::Watchdog
            } else {
                ipython_mcp_jupyter::Enforcement::Auto
            },
        },
        sandbox: sandbox_policy(config),
        private_dir: private_dir(),
        checkpoint_max_bytes: config
            .checkpoint
            .enabled
            .then_some(config.checkpoint.max_bytes),
        // What sessions record themselves (refusals, paging markers) is worded by the MCP
        // crate, which knows the tools.
        wording: ipython_mcp_mcp::WORDING,
        notice: None,
        code_mode: crate::code_mode::upstreams(config)?,
    })
}

/// The local kernels' sandbox, from the configuration; `None` when it is off.
fn sandbox_policy(config: &Config) -> Option<Arc<ipython_mcp_sandbox::Policy>> {
    use ipython_mcp_config::{SandboxMode, SandboxNetwork};
    let mode = match config.sandbox.mode {
        SandboxMode::Off => return None,
        SandboxMode::WorkspaceWrite => ipython_mcp_sandbox::Mode::WorkspaceWrite,
        SandboxMode::ReadOnly => ipython_mcp_sandbox::Mode::ReadOnly,
    };
    let mut read_deny = config.secret_files();
    read_deny.extend(config.sandbox.read_deny.iter().cloned());
    let network = match &config.sandbox.network {
        SandboxNetwork::On => ipython_mcp_sandbox::Network::On,
        SandboxNetwork::Off => ipython_mcp_sandbox::Network::Off,
        SandboxNetwork::Allow(hosts) => match crate::proxy::port(hosts) {
            Some(listening) => ipython_mcp_sandbox::Network::Proxy {
                port: listening.port,
                hosts: hosts.clone(),
                socket: listening.socket,
            },
            // No proxy runs (it could not start): no way out at all, never an open one.
            None => ipython_mcp_sandbox::Network::Off,
        },
    };
    Some(Arc::new(ipython_mcp_sandbox::Policy {
        mode,
        network,
        explicit: config.sandbox.explicit,
        home: std::env::var_os("HOME").map(std::path::PathBuf::from),
        read_deny,
        write: config.sandbox.write.clone(),
        workspace: config
            .workspace_root
            .clone()
            .or_else(|| std::env::current_dir().ok()),
        temp: std::env::temp_dir(),
        max_processes: Some(config.sandbox.max_processes),
        namespaces: config.sandbox.namespaces,
        private_temp: false,
        private: Some(private_dir()),
        state: Some(private_dir().join("kernels")),
    }))
}

/// The configured Jupyter server's client (its token resolved already: see `main`).
fn jupyter_server(config: &Config) -> anyhow::Result<Option<ipython_mcp_jupyter::remote::Server>> {
    let Some(jupyter) = &config.jupyter else {
        return Ok(None);
    };
    let token = match &jupyter.token {
        ipython_mcp_config::JupyterToken::Given(token) => Some(token.expose().to_owned()),
        _ => None,
    };
    // Each REST call is bounded by the kernel start bound (a start is the slowest call).
    let server = ipython_mcp_jupyter::remote::Server::new(
        jupyter.url.clone(),
        token,
        config.timeouts.kernel_startup,
    )?;
    Ok(Some(server))
}

fn resolver(config: &Config) -> anyhow::Result<Resolver> {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let xdg = std::env::var_os("XDG_CACHE_HOME").map(std::path::PathBuf::from);
    let cache_dir = match &config.cache_dir {
        Some(dir) => dir.clone(),
        None => ipython_mcp_env::default_cache_dir(home.as_deref(), xdg.as_deref()).ok_or_else(
            || {
                anyhow::anyhow!(
                    "no cache directory: set HOME or {}",
                    ipython_mcp_config::CACHE_DIR.env
                )
            },
        )?,
    };
    Ok(Resolver {
        explicit_python: config.python.clone(),
        virtual_env: std::env::var_os("VIRTUAL_ENV").map(std::path::PathBuf::from),
        working_dir: std::env::current_dir()?,
        path_var: std::env::var_os("PATH"),
        cache_dir,
        install_timeout: config.timeouts.provision,
        named: config.environment.clone(),
        confinement: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principals_file(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let file = dir.join("principals");
        std::fs::write(&file, text).expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        file
    }

    /// A request let in just before a SIGHUP removed its principal reaches the factory after
    /// the removal: it must make nothing, or the removed principal would have state again.
    #[tokio::test]
    async fn a_principal_removed_on_sighup_gets_no_state_made_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = principals_file(
            dir.path(),
            "alice alice-token-0123456789abcdef\nbob bob-token-0123456789abcdef\n",
        );
        let gate = Arc::new(crate::principals::Gate::new(
            Some(file.clone()),
            crate::principals::read_file(&file).expect("valid"),
            None,
            std::time::Duration::from_secs(900),
        ));
        let config = Arc::new(Config {
            workspace_root: Some(dir.path().to_owned()),
            ..Config::default()
        });
        let make = principal_factory(Arc::clone(&config), None, Arc::clone(&gate));
        let principals = Principals::new(
            Blueprint::new(Arc::clone(&config)),
            principal_factory(Arc::clone(&config), None, Arc::clone(&gate)),
        );
        let bob = ipython_mcp_config::PrincipalName::parse("bob").expect("name");
        let (state, _) = make(&bob).expect("bob is a principal");
        state.shutdown().await;
        principals_file(dir.path(), "alice alice-token-0123456789abcdef\n");
        let sessions =
            rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default();
        gate.reload(&principals, &sessions).await;
        let refused = make(&bob).map(drop).expect_err("bob was removed");
        assert!(refused.contains("no longer a principal"), "{refused}");
        let alice = ipython_mcp_config::PrincipalName::parse("alice").expect("name");
        let (state, _) = make(&alice).expect("alice stays");
        state.shutdown().await;
    }
}
