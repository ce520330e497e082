//! Code mode: other MCP servers ("upstreams") as Python APIs inside the kernel.
//!
//! The server is their MCP client. A kernel's `mcp_servers` module asks through its
//! execution's stdin channel (an `input_request` the session answers, see the kernel crate),
//! and [`Upstreams::answer`] answers: the tools of a server, or the result of a call. The
//! configuration (an `mcpServers` file as Claude Desktop, Claude Code and Cursor write it, or VS
//! Code's `servers`) stays here:
//! its `env` and `headers` never reach a kernel.
//!
//! Connections are made at first use, one per server for everyone who shares this
//! [`Upstreams`] (a principal has their own), and made again once when a call finds the old
//! one closed (a child process that died, a dropped HTTP session). A call whose future is
//! dropped (the execution was interrupted, timed out or cancelled) is cancelled upstream with
//! `notifications/cancelled`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CancelledNotificationParam, ClientRequest, ServerResult, Tool,
};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{Peer, RoleClient, ServiceExt as _};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

mod https;
pub use https::install_crypto_provider;

/// How long connecting to an upstream (starting its process, `initialize`, `tools/list`) may
/// take.
const CONNECT_BOUND: Duration = Duration::from_secs(60);

/// How long closing one upstream's connection may take when the server stops.
const CLOSE_BOUND: Duration = Duration::from_secs(5);

/// Why the upstream file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not an mcpServers file: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path} is not an mcpServers file: it has neither \"mcpServers\" (Claude Desktop, Claude Code, Cursor) nor \"servers\" (VS Code)")]
    NoServers { path: PathBuf },
    #[error("{path}: server {name:?}: {reason}")]
    Server {
        path: PathBuf,
        name: String,
        reason: String,
    },
}

/// The file: `{"mcpServers": {"NAME": {...}}}` (Claude Desktop, Claude Code's `.mcp.json`,
/// Cursor) or `{"servers": {"NAME": {...}}}` (VS Code's `mcp.json`); both may be present.
#[derive(Deserialize)]
struct File {
    #[serde(rename = "mcpServers")]
    mcp_servers: Option<BTreeMap<String, Entry>>,
    servers: Option<BTreeMap<String, Entry>>,
}

/// One server as the file describes it: a command to start (stdio) or a URL (streamable
/// HTTP), and its `type` if it says (`stdio`, `http`, or `sse`, the older HTTP+SSE transport).
/// Other keys (`disabled`, a client's own) are ignored.
#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "type")]
    kind: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// How to reach one upstream.
#[derive(Clone)]
enum Spec {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    Http {
        url: String,
        headers: HashMap<http::HeaderName, http::HeaderValue>,
    },
    /// A server over a transport code mode cannot speak: every use says why.
    Unsupported {
        transport: &'static str,
        reason: String,
    },
}

// By hand: the environment and headers hold credentials, never logged.
impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Spec::Stdio { command, .. } => write!(f, "stdio {command:?}"),
            Spec::Http { .. } => f.write_str("streamable HTTP"),
            Spec::Unsupported { transport, .. } => write!(f, "unsupported {transport}"),
        }
    }
}

impl Spec {
    /// The server `entry` describes, `${VAR}` and `${VAR:-default}` in its command, args, env,
    /// url and headers expanded from `environment` (the server's own, as Claude Code does).
    fn of(entry: Entry, environment: &dyn Fn(&str) -> Option<String>) -> Result<Spec, String> {
        let expand = |field: &str, text: String| {
            expand(&text, environment).map_err(|reason| format!("{field}: {reason}"))
        };
        let command = entry
            .command
            .map(|command| expand("command", command))
            .transpose()?;
        let url = entry.url.map(|url| expand("url", url)).transpose()?;
        let args = entry
            .args
            .into_iter()
            .map(|arg| expand("args", arg))
            .collect::<Result<Vec<_>, _>>()?;
        let env = entry
            .env
            .into_iter()
            .map(|(key, value)| Ok((key.clone(), expand(&format!("env {key}"), value)?)))
            .collect::<Result<BTreeMap<_, _>, String>>()?;
        let headers = entry
            .headers
            .into_iter()
            .map(|(key, value)| Ok((key.clone(), expand(&format!("header {key}"), value)?)))
            .collect::<Result<BTreeMap<_, _>, String>>()?;
        match (entry.kind.as_deref(), &command, &url) {
            (None, ..) => {}
            (Some("stdio"), _, None) => {}
            (Some("http" | "streamable-http" | "streamableHttp"), None, _) => {}
            (Some("sse"), None, Some(_)) => {
                return Ok(Spec::Unsupported {
                    transport: "sse",
                    reason: "it is configured with the older HTTP+SSE transport (\"type\": \"sse\"), which code mode's MCP client does not speak; if the server also offers streamable HTTP (often at a URL ending in /mcp), configure that URL with \"type\": \"http\"".to_owned(),
                });
            }
            (
                Some(kind @ ("stdio" | "http" | "streamable-http" | "streamableHttp" | "sse")),
                ..,
            ) => {
                let wants = if kind == "stdio" {
                    "a command and no url"
                } else {
                    "a url and no command"
                };
                return Err(format!("type {kind:?} needs {wants}"));
            }
            (Some(kind), ..) => {
                return Err(format!("unknown type {kind:?} (known: stdio, http, sse)"))
            }
        }
        match (command, url) {
            (Some(command), None) => Ok(Spec::Stdio {
                command,
                args,
                env,
                cwd: entry.cwd,
            }),
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err("url must be http:// or https://".to_owned());
                }
                let mut parsed = HashMap::new();
                for (name, value) in headers {
                    let name = http::HeaderName::try_from(name.as_str())
                        .map_err(|_| format!("{name:?} is not a header name"))?;
                    let value = http::HeaderValue::try_from(value.as_str())
                        .map_err(|_| format!("the value of header {name} is not valid"))?;
                    parsed.insert(name, value);
                }
                Ok(Spec::Http {
                    url,
                    headers: parsed,
                })
            }
            (Some(_), Some(_)) => Err("has both command and url".to_owned()),
            (None, None) => Err("has neither command nor url".to_owned()),
        }
    }

    fn transport(&self) -> &'static str {
        match self {
            Spec::Stdio { .. } => "stdio",
            Spec::Http { .. } => "http",
            Spec::Unsupported { transport, .. } => transport,
        }
    }
}

/// `text` with `${NAME}` replaced by the variable's value and `${NAME:-default}` by its value,
/// or `default` when it is unset or empty (as in a shell); `${env:NAME}` is VS Code's spelling
/// of `${NAME}`. A variable that is unset without a default is refused, naming it; so is VS
/// Code's `${input:…}` (a prompt of VS Code's own). Anything else is left as written.
fn expand(text: &str, environment: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut expanded = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        expanded.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            expanded.push_str(&rest[start..]);
            return Ok(expanded);
        };
        let inside = &after[..end];
        let (name, default) = match inside.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inside, None),
        };
        if inside.starts_with("input:") {
            return Err(format!(
                "${{{inside}}} is a VS Code prompt, which only VS Code can answer: write the value, or ${{VARIABLE}} to take it from the environment"
            ));
        }
        let name = name.strip_prefix("env:").unwrap_or(name);
        let is_name = name
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !is_name {
            expanded.push_str(&rest[start..start + 2 + end + 1]);
        } else {
            match (environment(name).filter(|value| !value.is_empty() || default.is_none()), default) {
                (Some(value), _) => expanded.push_str(&value),
                (None, Some(default)) => expanded.push_str(default),
                (None, None) => {
                    return Err(format!(
                        "the environment variable {name} is not set (write ${{{name}:-DEFAULT}} for a default)"
                    ))
                }
            }
        }
        rest = &after[end + 1..];
    }
    expanded.push_str(rest);
    Ok(expanded)
}

/// What `runtime_status` and the capabilities resource say of one upstream.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Status {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// `not_started`, `connected` or `failed`.
    pub state: &'static str,
    /// Why it failed, while it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How many tools it has, once connected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<usize>,
}

/// Where a call's progress goes: one line per notification.
pub type Progress = Arc<dyn Fn(String) + Send + Sync>;

/// Our client side of one upstream: it hands each call's progress notifications to the call's
/// [`Progress`] (by the progress token rmcp gives every request), and refuses sampling and
/// elicitation with a reason (we advertise neither; a server may ask anyway).
#[derive(Clone, Default)]
struct Handler {
    calls: Arc<Mutex<HashMap<rmcp::model::ProgressToken, Progress>>>,
}

/// Why an upstream's sampling request is refused: its tool was called by kernel code, and no
/// model is behind that call.
pub const NO_SAMPLING: &str = "ipython-mcp code mode does not offer sampling: this tool was called from kernel code, with no model to ask; call a tool that does not need sampling, or call this server directly from the MCP client";
/// Why an upstream's elicitation request is refused: no person watches a call from kernel code.
pub const NO_ELICITATION: &str = "ipython-mcp code mode does not offer elicitation: this tool was called from kernel code, with no person to ask; pass what it needs as arguments, or call this server directly from the MCP client";

/// The error for a request code mode does not offer, with the reason.
fn not_offered(reason: &'static str) -> rmcp::ErrorData {
    rmcp::ErrorData::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, reason, None)
}

impl rmcp::ClientHandler for Handler {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::default(),
            rmcp::model::Implementation::new("ipython-mcp", env!("CARGO_PKG_VERSION")),
        )
    }

    // rmcp marks sampling deprecated, but an upstream may still ask for it.
    #[allow(deprecated)]
    async fn create_message(
        &self,
        _params: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        tracing::debug!("upstream asked for sampling: refused");
        Err(not_offered(NO_SAMPLING))
    }

    async fn create_elicitation(
        &self,
        _params: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        tracing::debug!("upstream asked for elicitation: refused");
        Err(not_offered(NO_ELICITATION))
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let sink = self
            .calls
            .lock()
            .expect("progress lock")
            .get(&params.progress_token)
            .cloned();
        if let Some(sink) = sink {
            let amount = match params.total {
                Some(total) => format!("{}/{total}", params.progress),
                None => params.progress.to_string(),
            };
            sink(match params.message {
                Some(message) => format!("{message} ({amount})"),
                None => amount,
            });
        }
    }
}

/// A live connection and the tools it listed.
struct Connection {
    service: RunningService<RoleClient, Handler>,
    handler: Handler,
    tools: Arc<Vec<Tool>>,
    /// What [`ChildSetup`] gave for a stdio upstream's process: dropped after the service
    /// (fields drop in order), so what ends the process's group comes after the process.
    _child: Option<ChildGuard>,
}

/// Kept as long as an upstream's process may run; dropping it ends that process and all it
/// started (see [`Upstreams::with_child_setup`]).
pub type ChildGuard = Box<dyn Send + Sync>;

/// Prepares an upstream's process before it is spawned, or says why it cannot be started;
/// what it gives is kept with the connection (see [`Upstreams::with_child_setup`]).
pub type ChildSetup =
    Arc<dyn Fn(&mut tokio::process::Command) -> Result<ChildGuard, String> + Send + Sync>;

struct Upstream {
    spec: Spec,
    child_setup: Option<ChildSetup>,
    /// Held while connecting, so concurrent first uses connect once.
    connection: tokio::sync::Mutex<Option<Connection>>,
    status: Mutex<(&'static str, Option<String>, Option<usize>)>,
}

/// The upstream servers of one server (or one principal).
pub struct Upstreams {
    servers: BTreeMap<String, Arc<Upstream>>,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams")
            .field("servers", &self.servers.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Tools as the kernel's module reads them.
fn described(tools: &[Tool]) -> Vec<Value> {
    tools
        .iter()
        .map(|tool| {
            json!({
                "name": tool.name,
                "description": tool.description,
                "inputSchema": tool.input_schema,
            })
        })
        .collect()
}

/// An error an answer carries to the kernel: `kind` is what the module raises on.
fn refused(kind: &str, message: impl Into<String>) -> Value {
    json!({"ok": false, "kind": kind, "error": message.into()})
}

impl Upstreams {
    /// Reads `mcpServers` files, in order: a server named in a later file replaces the one of
    /// that name in an earlier one. Every file must be there and valid; nothing is started yet.
    pub fn load<P: AsRef<Path>>(paths: &[P]) -> Result<Upstreams, LoadError> {
        let environment = |name: &str| std::env::var(name).ok();
        let mut servers = BTreeMap::new();
        for path in paths {
            servers.extend(Self::read(path.as_ref(), &environment)?);
        }
        Ok(Upstreams { servers })
    }

    /// The servers of one file.
    fn read(
        path: &Path,
        environment: &dyn Fn(&str) -> Option<String>,
    ) -> Result<BTreeMap<String, Arc<Upstream>>, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })?;
        let file: File = serde_json::from_str(&text).map_err(|source| LoadError::Parse {
            path: path.to_owned(),
            source,
        })?;
        if file.mcp_servers.is_none() && file.servers.is_none() {
            return Err(LoadError::NoServers {
                path: path.to_owned(),
            });
        }
        let mut servers = BTreeMap::new();
        let entries = file.mcp_servers.into_iter().chain(file.servers).flatten();
        for (name, entry) in entries {
            let refused = |reason| LoadError::Server {
                path: path.to_owned(),
                name: name.clone(),
                reason,
            };
            if servers.contains_key(&name) {
                return Err(refused(
                    "is named both in \"mcpServers\" and in \"servers\"".to_owned(),
                ));
            }
            let spec = Spec::of(entry, environment).map_err(refused)?;
            let status = match &spec {
                Spec::Unsupported { reason, .. } => ("failed", Some(reason.clone()), None),
                _ => ("not_started", None, None),
            };
            servers.insert(
                name,
                Arc::new(Upstream {
                    spec,
                    child_setup: None,
                    connection: tokio::sync::Mutex::new(None),
                    status: Mutex::new(status),
                }),
            );
        }
        Ok(servers)
    }

    /// Runs `setup` on every upstream process's command before it is spawned, and keeps what
    /// it gives as long as the connection: the server makes each upstream's process group end
    /// with it (however it dies) this way. Right after [`Upstreams::load`], before any use
    /// shares them.
    pub fn with_child_setup(mut self, setup: ChildSetup) -> Upstreams {
        for upstream in self.servers.values_mut() {
            Arc::get_mut(upstream)
                .expect("with_child_setup comes before any use")
                .child_setup = Some(Arc::clone(&setup));
        }
        self
    }

    /// The configured servers' names.
    pub fn names(&self) -> Vec<String> {
        self.servers.keys().cloned().collect()
    }

    /// Each upstream's state now.
    pub fn status(&self) -> Vec<Status> {
        self.servers
            .iter()
            .map(|(name, upstream)| {
                let (state, error, tools) = upstream.status.lock().expect("status lock").clone();
                Status {
                    name: name.clone(),
                    transport: upstream.spec.transport(),
                    state,
                    error,
                    tools,
                }
            })
            .collect()
    }

    /// Answers one request of the kernel's `mcp_servers` module:
    /// `{"op": "tools", "server"}` → `{"ok": true, "tools": [{name, description, inputSchema}]}`;
    /// `{"op": "call", "server", "tool", "arguments"}` → `{"ok": true, "result": CallToolResult}`;
    /// `{"op": "catalog"}` → `{"ok": true, "servers": {NAME: {"tools": […]} | {"error"}}}`, every
    /// server at once (connected concurrently; one that fails does not hide the others).
    /// Failures are `{"ok": false, "kind", "error"}`. Dropping the future cancels a call.
    pub async fn answer(&self, request: &Value, progress: Option<Progress>) -> Value {
        let op = request
            .get("op")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if op == "catalog" {
            return self.catalog().await;
        }
        let Some(name) = request.get("server").and_then(Value::as_str) else {
            return refused("invalid", "the request names no server");
        };
        let Some(upstream) = self.servers.get(name) else {
            return refused(
                "unknown_server",
                format!(
                    "no upstream server {name:?}; configured: {}",
                    self.names().join(", ")
                ),
            );
        };
        match op {
            "tools" => match upstream.tools(name).await {
                Ok(tools) => json!({"ok": true, "tools": described(&tools)}),
                Err(error) => refused("connect", error),
            },
            "call" => {
                let Some(tool) = request.get("tool").and_then(Value::as_str) else {
                    return refused("invalid", "the request names no tool");
                };
                let arguments = match request.get("arguments") {
                    None | Some(Value::Null) => None,
                    Some(Value::Object(arguments)) => Some(arguments.clone()),
                    Some(_) => return refused("invalid", "arguments must be an object"),
                };
                upstream.call(name, tool, arguments, progress).await
            }
            _ => refused("invalid", format!("unknown op {op:?}")),
        }
    }

    /// Every server's tools, or why it has none.
    async fn catalog(&self) -> Value {
        let listed = futures_util::future::join_all(self.servers.iter().map(
            |(name, upstream)| async move {
                let entry = match upstream.tools(name).await {
                    Ok(tools) => json!({"tools": described(&tools)}),
                    Err(error) => json!({"error": error}),
                };
                (name.clone(), entry)
            },
        ))
        .await;
        json!({"ok": true, "servers": listed.into_iter().collect::<serde_json::Map<_, _>>()})
    }

    /// Closes every connection, all at once: a stdio upstream gets the end of its stdin, then
    /// (rmcp's shutdown, if it is still running) SIGTERM, then SIGKILL; then what
    /// [`ChildSetup`] gave is dropped, which ends whatever the process left behind. Each is
    /// bounded by [`CLOSE_BOUND`], after which it is dropped as it is.
    pub async fn close(&self) {
        futures_util::future::join_all(self.servers.values().map(|upstream| async move {
            if let Some(mut connection) = upstream.connection.lock().await.take() {
                let _ = connection.service.close_with_timeout(CLOSE_BOUND).await;
            }
        }))
        .await;
    }
}

impl Upstream {
    fn set_status(&self, state: &'static str, error: Option<String>, tools: Option<usize>) {
        *self.status.lock().expect("status lock") = (state, error, tools);
    }

    /// The peer of a live connection, connecting first if there is none (or it closed).
    async fn peer(&self, name: &str) -> Result<Live, String> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            // A child that exited (or a dropped HTTP session) closes the transport.
            if !connection.service.is_closed() && !connection.service.is_transport_closed() {
                return Ok(Live::of(connection));
            }
            tracing::info!(
                upstream = name,
                "upstream connection closed; connecting again"
            );
        }
        *slot = None;
        match tokio::time::timeout(CONNECT_BOUND, self.connect()).await {
            Ok(Ok(connection)) => {
                let found = Live::of(&connection);
                self.set_status("connected", None, Some(connection.tools.len()));
                tracing::info!(
                    upstream = name,
                    tools = connection.tools.len(),
                    "upstream connected"
                );
                *slot = Some(connection);
                Ok(found)
            }
            Ok(Err(error)) => {
                let error = format!("connecting to upstream {name:?} failed: {error}");
                self.set_status("failed", Some(error.clone()), None);
                Err(error)
            }
            Err(_) => {
                let error = format!(
                    "upstream {name:?} did not connect within {}s",
                    CONNECT_BOUND.as_secs()
                );
                self.set_status("failed", Some(error.clone()), None);
                Err(error)
            }
        }
    }

    async fn connect(&self) -> Result<Connection, String> {
        let handler = Handler::default();
        let mut child = None;
        let service = match &self.spec {
            Spec::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut command = tokio::process::Command::new(command);
                // Killed with its connection, even when the runtime is shutting down (rmcp's
                // own cleanup is a task that may not run then).
                command.args(args).envs(env).kill_on_drop(true);
                if let Some(cwd) = cwd {
                    command.current_dir(cwd);
                }
                if let Some(setup) = &self.child_setup {
                    child = Some(setup(&mut command)?);
                }
                // Its stderr is its own business: never mixed into ours (our stderr is our log).
                let (transport, _) = TokioChildProcess::builder(command)
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .map_err(|error| error.to_string())?;
                handler
                    .clone()
                    .serve(transport)
                    .await
                    .map_err(|error| error.to_string())?
            }
            Spec::Unsupported { reason, .. } => return Err(reason.clone()),
            Spec::Http { url, headers } => {
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(headers.clone());
                let transport =
                    StreamableHttpClientTransport::with_client(https::client(url)?, config);
                handler
                    .clone()
                    .serve(transport)
                    .await
                    .map_err(|error| https::failure(url, &error))?
            }
        };
        let tools = service
            .peer()
            .list_all_tools()
            .await
            .map_err(|error| format!("tools/list: {error}"))?;
        Ok(Connection {
            service,
            handler,
            tools: Arc::new(tools),
            _child: child,
        })
    }

    async fn tools(&self, name: &str) -> Result<Arc<Vec<Tool>>, String> {
        self.peer(name).await.map(|live| live.tools)
    }

    /// One `tools/call`: once more on a fresh connection when the connection closed under it
    /// (an upstream process that died since the last call is seen only when the call is
    /// written to it; one that dies while handling the call gets it again).
    async fn call(
        &self,
        name: &str,
        tool: &str,
        arguments: Option<serde_json::Map<String, Value>>,
        progress: Option<Progress>,
    ) -> Value {
        for attempt in 0..2 {
            let Live {
                peer,
                tools,
                handler,
            } = match self.peer(name).await {
                Ok(found) => found,
                Err(error) => return refused("connect", error),
            };
            if !tools.iter().any(|known| known.name == tool) {
                return refused(
                    "unknown_tool",
                    format!(
                        "upstream {name:?} has no tool {tool:?}; it has: {}",
                        tools
                            .iter()
                            .map(|tool| tool.name.as_ref())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
            let mut params = CallToolRequestParams::new(tool.to_owned());
            if let Some(arguments) = arguments.clone() {
                params = params.with_arguments(arguments);
            }
            let request = ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
            let handle = match peer
                .send_cancellable_request(request, PeerRequestOptions::no_options())
                .await
            {
                Ok(handle) => handle,
                Err(error) if attempt == 0 => {
                    tracing::info!(upstream = name, %error, "upstream call not sent; connecting again");
                    continue;
                }
                Err(error) => return refused("call", error.to_string()),
            };
            if let Some(progress) = &progress {
                handler
                    .calls
                    .lock()
                    .expect("progress lock")
                    .insert(handle.progress_token.clone(), Arc::clone(progress));
            }
            let mut guard = CancelOnDrop {
                peer: peer.clone(),
                id: Some(handle.id.clone()),
                progress: Some((handler.clone(), handle.progress_token.clone())),
            };
            let response = handle.await_response().await;
            guard.id = None;
            drop(guard);
            if attempt == 0 && matches!(response, Err(rmcp::ServiceError::TransportClosed)) {
                tracing::info!(
                    upstream = name,
                    "upstream connection closed during a call; connecting again"
                );
                continue;
            }
            return match response {
                Ok(ServerResult::CallToolResult(result)) => json!({"ok": true, "result": result}),
                Ok(other) => refused("call", format!("unexpected answer: {other:?}")),
                // The upstream answered the call with a protocol error: its words, plainly.
                Err(rmcp::ServiceError::McpError(error)) => refused(
                    "call",
                    format!(
                        "upstream {name:?} answered with an error ({}): {}",
                        error.code.0, error.message
                    ),
                ),
                Err(error) => refused("call", error.to_string()),
            };
        }
        refused("call", "unreachable")
    }
}

/// What a call needs of a live connection.
struct Live {
    peer: Peer<RoleClient>,
    tools: Arc<Vec<Tool>>,
    handler: Handler,
}

impl Live {
    fn of(connection: &Connection) -> Live {
        Live {
            peer: connection.service.peer().clone(),
            tools: Arc::clone(&connection.tools),
            handler: connection.handler.clone(),
        }
    }
}

/// Sends `notifications/cancelled` for a request whose caller stopped waiting, and stops
/// routing its progress either way.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<rmcp::model::RequestId>,
    progress: Option<(Handler, rmcp::model::ProgressToken)>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some((handler, token)) = self.progress.take() {
            handler.calls.lock().expect("progress lock").remove(&token);
        }
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        let cancelled = CancelledNotificationParam::new(
            Some(id),
            Some("the execution that made the call was stopped".to_owned()),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer.notify_cancelled(cancelled).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Upstreams, LoadError> {
        let file = tempfile::NamedTempFile::new().expect("file");
        std::fs::write(file.path(), text).expect("write");
        Upstreams::load(&[file.path()])
    }

    #[test]
    fn the_claude_desktop_format_loads_and_nothing_starts() {
        let upstreams = load(
            r#"{"mcpServers": {
                "files": {"command": "npx", "args": ["-y", "x"], "env": {"TOKEN": "s3cret"}},
                "web": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer s3cret"}}
            }}"#,
        )
        .expect("loads");
        assert_eq!(upstreams.names(), ["files", "web"]);
        let status = upstreams.status();
        assert_eq!(status[0].state, "not_started");
        assert_eq!(status[1].transport, "http");
        // Credentials are never shown.
        assert!(!format!("{upstreams:?} {:?}", upstreams.servers["files"].spec).contains("s3cret"));
    }

    #[test]
    fn a_later_file_replaces_a_server_of_the_same_name_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path
        };
        let user = write(
            "user.json",
            r#"{"mcpServers": {"files": {"command": "npx"}, "web": {"url": "http://one/mcp"}}}"#,
        );
        let project = write(
            "project.json",
            r#"{"servers": {"web": {"command": "uvx"}, "docs": {"url": "https://docs/mcp"}}}"#,
        );
        let upstreams = Upstreams::load(&[&user, &project]).expect("loads");
        assert_eq!(upstreams.names(), ["docs", "files", "web"]);
        let spec = |name: &str| format!("{:?}", upstreams.servers[name].spec);
        assert_eq!(
            (spec("files"), spec("web"), spec("docs")),
            (
                "stdio \"npx\"".to_owned(),
                "stdio \"uvx\"".to_owned(),
                "streamable HTTP".to_owned()
            )
        );
        // The other order: the first file's `web` wins.
        let upstreams = Upstreams::load(&[&project, &user]).expect("loads");
        assert_eq!(
            format!("{:?}", upstreams.servers["web"].spec),
            "streamable HTTP"
        );

        let missing = dir.path().join("missing.json");
        let error = Upstreams::load(&[&user, &missing]).expect_err("refused");
        assert!(
            matches!(&error, LoadError::Read { path, .. } if path == &missing),
            "{error}"
        );
        assert!(error.to_string().contains("missing.json"), "{error}");
        let bad = write("bad.json", r#"{"mcpServers": {"x": {}}}"#);
        let error = Upstreams::load(&[&bad, &user]).expect_err("refused");
        assert!(
            matches!(&error, LoadError::Server { path, name, .. } if path == &bad && name == "x"),
            "{error}"
        );
        let broken = write("broken.json", "{");
        let error = Upstreams::load(&[&user, &broken]).expect_err("refused");
        assert!(
            matches!(&error, LoadError::Parse { path, .. } if path == &broken),
            "{error}"
        );
        assert!(Upstreams::load::<&Path>(&[])
            .expect("none")
            .names()
            .is_empty());
    }

    #[test]
    fn a_bad_file_says_what_is_wrong() {
        for (text, expected) in [
            ("{}", "not an mcpServers file"),
            (r#"{"mcpServers": {"a": {}}}"#, "neither command nor url"),
            (
                r#"{"mcpServers": {"a": {"command": "x", "url": "http://h"}}}"#,
                "both",
            ),
            (
                r#"{"mcpServers": {"a": {"url": "ftp://h"}}}"#,
                "http:// or https://",
            ),
            (
                r#"{"mcpServers": {"a": {"url": "http://h", "headers": {"a b": "c"}}}}"#,
                "not a header name",
            ),
        ] {
            let error = load(text).expect_err("refused").to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn variables_expand_with_defaults_and_a_missing_one_is_named() {
        let environment = |name: &str| match name {
            "HOST" => Some("example.com".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        for (text, expected) in [
            ("https://${HOST}/mcp", "https://example.com/mcp"),
            ("${PORT:-8080}", "8080"),
            ("${HOST:-other}", "example.com"),
            ("${EMPTY:-fallback}", "fallback"),
            ("${EMPTY}", ""),
            ("${env:HOST}", "example.com"),
            ("$HOST ${not a name} ${", "$HOST ${not a name} ${"),
            ("Bearer ${HOST}${HOST}", "Bearer example.comexample.com"),
        ] {
            assert_eq!(
                expand(text, &environment).as_deref(),
                Ok(expected),
                "{text}"
            );
        }
        let missing = expand("${TOKEN}", &environment).expect_err("refused");
        assert!(missing.contains("TOKEN is not set"), "{missing}");
        let prompt = expand("${input:token}", &environment).expect_err("refused");
        assert!(prompt.contains("VS Code"), "{prompt}");
    }

    #[test]
    fn the_vs_code_form_types_and_expanded_fields_load() {
        let environment = |name: &str| (name == "GH").then(|| "ghp_x".to_owned());
        let entry = |text: &str| serde_json::from_str::<Entry>(text).expect("entry");
        let Spec::Stdio { command, args, env, .. } = Spec::of(
            entry(r#"{"type": "stdio", "command": "${BIN:-npx}", "args": ["-y", "${GH}"], "env": {"T": "${GH}"}}"#),
            &environment,
        )
        .expect("stdio") else {
            panic!("not stdio")
        };
        assert_eq!(
            (command.as_str(), &args[..], env["T"].as_str()),
            ("npx", &["-y".to_owned(), "ghp_x".to_owned()][..], "ghp_x")
        );
        let Spec::Http { url, headers } = Spec::of(
            entry(r#"{"type": "http", "url": "https://h/${GH}", "headers": {"Authorization": "Bearer ${GH}"}}"#),
            &environment,
        )
        .expect("http") else {
            panic!("not http")
        };
        assert_eq!(url, "https://h/ghp_x");
        assert_eq!(headers[&http::header::AUTHORIZATION], "Bearer ghp_x");
        let spec = Spec::of(
            entry(r#"{"type": "sse", "url": "https://h/sse"}"#),
            &environment,
        )
        .expect("sse loads");
        assert!(matches!(&spec, Spec::Unsupported { reason, .. } if reason.contains("HTTP+SSE")));
        assert_eq!(spec.transport(), "sse");
        for (text, expected) in [
            (
                r#"{"type": "stdio", "url": "https://h"}"#,
                "needs a command",
            ),
            (r#"{"type": "http", "command": "x"}"#, "needs a url"),
            (r#"{"type": "websocket", "url": "wss://h"}"#, "unknown type"),
            (
                r#"{"command": "x", "env": {"T": "${NOPE}"}}"#,
                "env T: the environment variable NOPE",
            ),
        ] {
            let error = Spec::of(entry(text), &environment).expect_err("refused");
            assert!(error.contains(expected), "{text}: {error}");
        }

        let upstreams = load(
            r#"{"servers": {"code": {"type": "stdio", "command": "x"}, "old": {"type": "sse", "url": "http://h/sse"}},
                "inputs": []}"#,
        )
        .expect("VS Code's form loads");
        let status = upstreams.status();
        assert_eq!(
            (status[0].name.as_str(), status[0].state),
            ("code", "not_started")
        );
        assert_eq!((status[1].transport, status[1].state), ("sse", "failed"));
        let twice =
            load(r#"{"mcpServers": {"a": {"command": "x"}}, "servers": {"a": {"command": "y"}}}"#)
                .expect_err("refused")
                .to_string();
        assert!(twice.contains("both"), "{twice}");
    }

    #[tokio::test]
    async fn unknown_servers_and_bad_requests_are_refused_with_what_exists() {
        let upstreams = load(r#"{"mcpServers": {"one": {"command": "true"}}}"#).expect("loads");
        let answer = upstreams
            .answer(&json!({"op": "tools", "server": "two"}), None)
            .await;
        assert_eq!(answer["kind"], "unknown_server");
        assert!(answer["error"]
            .as_str()
            .unwrap()
            .contains("configured: one"));
        let answer = upstreams
            .answer(&json!({"op": "call", "server": "one"}), None)
            .await;
        assert_eq!(answer["kind"], "invalid");
        let answer = upstreams
            .answer(&json!({"op": "nope", "server": "one"}), None)
            .await;
        assert_eq!(answer["kind"], "invalid");
    }

    #[tokio::test]
    async fn the_catalog_says_why_a_server_has_no_tools() {
        // `true` exits at once: no MCP server there.
        let upstreams = load(r#"{"mcpServers": {"gone": {"command": "true"}}}"#).expect("loads");
        let answer = upstreams.answer(&json!({"op": "catalog"}), None).await;
        assert_eq!(answer["ok"], true, "{answer}");
        assert!(answer["servers"]["gone"]["error"].is_string(), "{answer}");
    }
}
