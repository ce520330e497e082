//! `--transport http`: Streamable HTTP at `/mcp` (rmcp's `StreamableHttpService` in axum).
//!
//! Security model, outermost first:
//! 1. The listener binds loopback unless the user passed `--allow-remote` (checked in config).
//! 2. Every request needs `Authorization: Bearer <token>`: the one token ([`bearer`]), or a
//!    principal's from the principals file (`principals::authenticate`), compared in constant
//!    time; anything else is 401, whatever the path.
//! 3. rmcp checks `Host` against the allowed hosts (DNS rebinding) and `Origin` against the
//!    allowed origins (a browser page elsewhere); both answer 403.
//!
//! With one token, every HTTP session's handler shares the one [`ServerState`] (so every
//! client sees the `default` kernel) and its one `Peers` list (so `tools/list_changed`
//! reaches every client of both protocol families). With a principals file, each principal
//! has a state of their own, chosen on every call from that call's credentials.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::serve::ListenerExt as _;
use axum::Router;
use ipython_mcp_config::{Config, Token, TokenSource};
use ipython_mcp_mcp::{fixtures, IpythonMcp, Principals, ServerState};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use subtle::ConstantTimeEq as _;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

use crate::test_mode::TestMode;

/// How long open HTTP connections get to finish after SIGTERM before the process goes on to
/// close its kernels and exit anyway.
const DRAIN: Duration = Duration::from_secs(3);

/// Who may send requests: the holder of one token, or the principals of a file.
pub enum Credentials {
    /// One token (given, from a file, or made up by the server: then it is printed once).
    Token { token: Token, generated: bool },
    /// The principals file, read and checked at start (and again on SIGHUP), or none when
    /// only an OAuth issuer's access tokens are accepted.
    Principals {
        path: Option<std::path::PathBuf>,
        principals: Vec<ipython_mcp_config::Principal>,
    },
}

/// Resolves the bearer tokens before anything starts, so a bad token or principals file is a
/// one-line configuration error (exit 2), like every other bad setting.
pub fn credentials(source: &TokenSource, oauth: bool) -> Result<Credentials, String> {
    match source {
        // The issuer's access tokens are the credentials; no token is made up.
        TokenSource::Generate if oauth => Ok(Credentials::Principals {
            path: None,
            principals: Vec::new(),
        }),
        TokenSource::Given(token) => Ok(Credentials::Token {
            token: token.clone(),
            generated: false,
        }),
        TokenSource::File(path) => Ok(Credentials::Token {
            token: read_token_file(ipython_mcp_config::HTTP_TOKEN_FILE, path, Token::parse)?,
            generated: false,
        }),
        TokenSource::Principals(path) => Ok(Credentials::Principals {
            path: Some(path.clone()),
            principals: crate::principals::read_file(path)?,
        }),
        TokenSource::Generate => {
            let mut random = [0u8; 32];
            getrandom::fill(&mut random)
                .map_err(|error| format!("cannot generate a bearer token: {error}"))?;
            Ok(Credentials::Token {
                token: Token::generated(&random),
                generated: true,
            })
        }
    }
}

/// Reads a token file's first line (checked with `parse`), before anything starts, so a bad
/// file is a one-line configuration error naming `setting`; warns once when others can read it.
pub fn read_token_file(
    setting: ipython_mcp_config::Setting,
    path: &std::path::Path,
    parse: fn(&str) -> Result<Token, String>,
) -> Result<Token, String> {
    let text = crate::bearer::read_secrets(setting, path)?;
    let first_line = text.lines().next().unwrap_or_default();
    parse(first_line).map_err(|problem| {
        format!(
            "invalid configuration: {} (--{}): the token in {} {problem}",
            setting.env,
            setting.flag,
            path.display()
        )
    })
}

/// What the HTTP transport serves.
pub enum Served {
    /// One state every client shares, behind one token (or none, in a test mode that says so).
    Shared {
        state: ServerState,
        token: Option<(Token, bool)>,
    },
    /// A state per principal of the principals file.
    PerPrincipal {
        principals: Principals,
        gate: Arc<crate::principals::Gate>,
    },
}

impl Served {
    /// Closes every session (see `ServerState::shutdown`).
    async fn shutdown(&self) {
        match self {
            Served::Shared { state, .. } => state.shutdown().await,
            Served::PerPrincipal { principals, .. } => principals.shutdown().await,
        }
    }
}

/// Serves MCP over HTTP with the configured address and credentials until SIGTERM, SIGINT or a
/// server failure, then closes every session.
pub async fn run(
    config: Arc<Config>,
    served: Served,
    test_mode: TestMode,
) -> anyhow::Result<ExitCode> {
    let http = &config.http;
    let listener = match tokio::net::TcpListener::bind((http.host, http.port)).await {
        Ok(listener) => listener,
        Err(error) => {
            // The default kernel is already starting: close it before giving up.
            served.shutdown().await;
            let address = SocketAddr::new(http.host, http.port);
            return Err(anyhow::anyhow!("cannot listen on {address}: {error}"));
        }
    };
    let address = listener.local_addr()?;

    let shutdown = CancellationToken::new();
    let service_config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown.child_token())
        .with_allowed_hosts(http.allowed_hosts.clone())
        .with_allowed_origins(http.allowed_origins.clone())
        // An empty origin list rejects every browser origin instead of allowing all.
        .enforce_origin_validation();
    let http_sessions = Arc::new(LocalSessionManager::default());
    let app = match &served {
        Served::Shared { state, token } => shared_app(
            &config,
            state,
            token.as_ref(),
            test_mode,
            Arc::clone(&http_sessions),
            service_config,
        ),
        Served::PerPrincipal { principals, gate } => {
            per_principal_app(principals, gate, Arc::clone(&http_sessions), service_config)
        }
    };
    announce(&config, &served, address);
    serve_until_stopped(listener, app, &config, served, http_sessions, shutdown).await
}

/// Serves `app` until a signal says stop or the server fails, looking after the principals
/// meanwhile (upkeep, and SIGHUP re-reading their file); then closes the sessions and the
/// server, in that order.
async fn serve_until_stopped(
    listener: tokio::net::TcpListener,
    app: Router,
    config: &Config,
    served: Served,
    http_sessions: Arc<LocalSessionManager>,
    shutdown: CancellationToken,
) -> anyhow::Result<ExitCode> {
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut hangup = signal(SignalKind::hangup())?;
    // Small JSON-RPC messages: without TCP_NODELAY, Nagle plus delayed ACKs add milliseconds
    // to every round trip.
    let listener = listener.tap_io(|stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
    });
    let server =
        axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let mut server = tokio::spawn(std::future::IntoFuture::into_future(server));
    // Principals' upkeep (ended MCP sessions, idle access-token principals), at a quarter of
    // the idle timeout.
    let period = (config.kernels.idle_timeout / 4)
        .clamp(Duration::from_millis(250), Duration::from_secs(30));
    let mut upkeep = tokio::time::interval(period);
    upkeep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let failed = loop {
        tokio::select! {
            _ = upkeep.tick() => if let Served::PerPrincipal { principals, gate } = &served {
                gate.upkeep(principals, &http_sessions).await;
            },
            _ = terminate.recv() => { tracing::info!("SIGTERM: shutting down"); break None }
            _ = interrupt.recv() => { tracing::info!("SIGINT: shutting down"); break None }
            _ = hangup.recv() => match &served {
                Served::PerPrincipal { principals, gate } => gate.reload(principals, &http_sessions).await,
                Served::Shared { .. } => tracing::info!("SIGHUP ignored: no principals file to re-read"),
            },
            ended = &mut server => break Some(ended),
        }
    };
    // Close the kernels while clients are still connected, so they hear why: queued calls end
    // runtime_closed, the running one is interrupted, kernels are terminated. Then stop
    // accepting and end every MCP session and stream (rmcp's token).
    served.shutdown().await;
    shutdown.cancel();
    match failed {
        Some(Ok(Ok(()))) => Ok(ExitCode::SUCCESS),
        Some(Ok(Err(error))) => Err(anyhow::anyhow!("HTTP server failed: {error}")),
        Some(Err(error)) => Err(anyhow::anyhow!("HTTP server task failed: {error}")),
        None => {
            if tokio::time::timeout(DRAIN, server).await.is_err() {
                tracing::warn!("HTTP connections still open after {DRAIN:?}; exiting anyway");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The app for one shared state: `/mcp` behind the one token (none only in a test mode that
/// says so), with the test fixtures' tools added when the test mode asks for them.
fn shared_app(
    config: &Arc<Config>,
    state: &ServerState,
    token: Option<&(Token, bool)>,
    test_mode: TestMode,
    http_sessions: Arc<LocalSessionManager>,
    service_config: StreamableHttpServerConfig,
) -> Router {
    // Built once: every session's handler is a clone sharing the state and the router.
    let product = {
        let server = IpythonMcp::new(state.clone(), Arc::clone(config));
        move || server.clone()
    };
    let mcp = if test_mode.fixtures() {
        let product = move || fixtures::wrap(product());
        mcp_router(product, http_sessions, service_config)
    } else {
        mcp_router(product, http_sessions, service_config)
    };
    match token {
        Some((token, _)) => mcp.layer(axum::middleware::from_fn_with_state(
            Arc::new(token.clone()),
            bearer,
        )),
        None => mcp,
    }
}

/// The app for the principals: `/mcp` behind each principal's credentials and, with an
/// OAuth issuer, the protected-resource metadata that names it.
fn per_principal_app(
    principals: &Principals,
    gate: &Arc<crate::principals::Gate>,
    http_sessions: Arc<LocalSessionManager>,
    service_config: StreamableHttpServerConfig,
) -> Router {
    let handler = principals.clone();
    let mcp = mcp_router(move || handler.clone(), http_sessions, service_config).layer(
        axum::middleware::from_fn_with_state(
            (Arc::clone(gate), principals.clone()),
            crate::principals::authenticate,
        ),
    );
    match gate.oauth() {
        Some(oauth) => oauth_metadata(oauth).merge(mcp),
        None => mcp,
    }
}

/// Routes serving the OAuth protected-resource metadata at its URL for this resource and at
/// the well-known root path. The metadata is public: it is how a client without a token
/// finds the issuer.
fn oauth_metadata(oauth: &ipython_mcp_config::OAuth) -> Router {
    let document = crate::oauth::metadata(oauth).to_string();
    let path = crate::oauth::metadata_url(&oauth.resource)
        .path()
        .to_owned();
    let serve = move || {
        let json = [(header::CONTENT_TYPE, "application/json")];
        std::future::ready((json, document.clone()))
    };
    let mut routes = Router::new().route(&path, axum::routing::get(serve.clone()));
    if path != "/.well-known/oauth-protected-resource" {
        routes = routes.route(
            "/.well-known/oauth-protected-resource",
            axum::routing::get(serve),
        );
    }
    routes
}

/// Tells the user where the server listens and what clients must send, and logs the start.
/// Printed (not logged) so that it shows whatever the log filter, and so that the token,
/// which logs must never carry, appears exactly once.
fn announce(config: &Config, served: &Served, address: SocketAddr) {
    let http = &config.http;
    let url = format!("http://{address}/mcp");
    eprintln!("ipython-mcp: serving MCP over HTTP at {url}");
    if http.host.is_unspecified() {
        eprintln!(
            "ipython-mcp: listening on every interface: clients use this machine's name or address instead of {}, and it must be in {}",
            http.host,
            ipython_mcp_config::HTTP_ALLOWED_HOSTS.env
        );
    }
    match served {
        Served::Shared { token: Some((token, true)), .. } => eprintln!(
            "ipython-mcp: clients must send the header 'Authorization: Bearer {}' (generated for this run; set {} or {} to choose one)",
            token.expose(),
            ipython_mcp_config::HTTP_TOKEN.env,
            ipython_mcp_config::HTTP_TOKEN_FILE.env
        ),
        Served::Shared { token: Some(_), .. } => eprintln!("ipython-mcp: clients must send 'Authorization: Bearer <your configured token>'"),
        Served::Shared { token: None, .. } => {}
        Served::PerPrincipal { .. } => eprintln!("ipython-mcp: each principal's clients send 'Authorization: Bearer <their token>' (from the principals file; SIGHUP re-reads it)"),
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        %address,
        remote = http.allow_remote,
        principals = matches!(served, Served::PerPrincipal { .. }),
        "serving MCP over Streamable HTTP"
    );
}

fn mcp_router<S>(
    factory: impl Fn() -> S + Send + Sync + 'static,
    sessions: Arc<LocalSessionManager>,
    config: StreamableHttpServerConfig,
) -> Router
where
    S: rmcp::ServerHandler + Send + 'static,
{
    let service = StreamableHttpService::new(move || Ok(factory()), sessions, config);
    Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::map_response(closed_is_no_content))
}

/// rmcp answers a session's `DELETE` with 202 Accepted; the official Python SDK's client takes
/// only 200 or 204 as success and logs a warning at every close otherwise. 204 is what every
/// client (and the spec's "the session is terminated") reads as done.
async fn closed_is_no_content(method: Method, mut response: Response) -> Response {
    if method == Method::DELETE && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// Lets a request through only with the right bearer token (RFC 6750; the scheme name is
/// case-insensitive). The comparison takes the same time wherever the first difference is.
async fn bearer(State(token): State<Arc<Token>>, request: Request, next: Next) -> Response {
    let given = crate::bearer::token(&request);
    let authorized =
        given.is_some_and(|given| bool::from(given.as_bytes().ct_eq(token.expose().as_bytes())));
    if authorized {
        return next.run(request).await;
    }
    crate::bearer::unauthorized(&request, given.is_some(), None)
}
