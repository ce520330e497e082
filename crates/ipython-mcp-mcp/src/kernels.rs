//! The kernels toolset and `get_output`: discovering kernelspecs and project venvs,
//! starting, listing and stopping sessions, and reading (or paging through) the output of
//! executions that are still running or whose caller stopped waiting.

use std::path::PathBuf;
use std::time::Duration;

use crate::argument::Parameters;
use ipython_mcp_jupyter::kernelspec;
use ipython_mcp_kernel::{RuntimeStatus, SessionState};
use ipython_mcp_output::{Code, ErrorInfo, ExecutionOutput, Page, PageRequest, StreamName};
use rmcp::handler::server::tool::schema_for_output;
use rmcp::model::CallToolResult;
use rmcp::{schemars, tool, tool_router};
use serde::{Deserialize, Serialize};

use crate::error::{ToolError, ToolResult};
use crate::handler::IpythonMcp;
use crate::render;
use crate::surface::{ToolSpec, KERNEL_DISCOVER, KERNEL_LIST, KERNEL_START, KERNEL_STOP};
use ipython_mcp_kernel::{Listing, StartSpec};

/// Longest `wait_seconds` of one `get_output` call.
const MAX_WAIT_SECONDS: f64 = 300.0;
/// Default and largest page of `get_output`.
const DEFAULT_LINES: usize = 200;
const MAX_LINES: usize = 5000;
/// Longest `pattern`.
const MAX_PATTERN_CHARS: usize = 1000;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetOutputParams {
    /// From execute; default: the latest of `kernel`.
    #[serde(default)]
    pub execution_id: Option<String>,
    /// Session id (default `default`).
    #[serde(default)]
    pub kernel: Option<String>,
    /// Wait up to this long (max 300) for the end.
    #[serde(default)]
    pub wait_seconds: Option<f64>,
    /// Page this stream's full text.
    #[serde(default)]
    pub stream: Option<StreamName>,
    /// First line, 1-based; negative counts from the end.
    #[serde(default)]
    pub start_line: Option<i64>,
    /// Lines per page (default 200, max 5000).
    #[serde(default)]
    pub max_lines: Option<usize>,
    /// Regex: only matching lines, numbered.
    #[serde(default)]
    pub pattern: Option<String>,
}

/// The result of `get_output`: the execution's output (same fields as execute), plus a page of
/// its full output when one was asked for.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct GetOutputResult {
    #[serde(flatten)]
    pub output: ExecutionOutput,
    /// False while it is still queued or running (`status: pending`).
    pub finished: bool,
    /// The kernel session it runs in.
    pub kernel: String,
    /// The requested page of the full stdout/stderr.
    pub page: Option<Page>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscoverParams {
    /// Absolute directory to scan for `.venv`/`venv`.
    #[serde(default)]
    pub directory: Option<String>,
}

/// One registered kernelspec.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct KernelSpecInfo {
    /// What kernel_start accepts as `spec`.
    pub name: String,
    pub display_name: String,
    pub language: String,
    /// True for Python (ipykernel) kernels: every tool works. Other languages support
    /// execute, get_output, interrupt and runtime_status only.
    pub helper_tools: bool,
    pub resource_dir: String,
}

/// A Python virtualenv with ipykernel, found under a directory.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct VenvKernel {
    /// What `kernel_start` accepts: `venv:<project dir>`.
    pub name: String,
    /// The project directory holding the venv.
    pub project: String,
    pub python: String,
    /// `python3.X` from the venv's `lib/` directory.
    pub python_version: Option<String>,
}

impl From<kernelspec::VenvKernel> for VenvKernel {
    fn from(venv: kernelspec::VenvKernel) -> Self {
        VenvKernel {
            name: venv.name,
            project: venv.project,
            python: venv.python,
            python_version: venv.python_version,
        }
    }
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct DiscoverResult {
    pub ok: bool,
    pub kernelspecs: Vec<KernelSpecInfo>,
    /// Virtualenvs with ipykernel under `directory`.
    pub venvs: Vec<VenvKernel>,
    /// The directories searched for kernelspecs.
    pub searched: Vec<String>,
    /// The configured Jupyter server's kernelspecs and running kernels (null when none is
    /// configured).
    pub remote: Option<RemoteDiscovery>,
}

/// What the Jupyter server offers.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct RemoteDiscovery {
    /// The server's URL.
    pub server: String,
    pub kernelspecs: Vec<RemoteSpec>,
    /// Running kernels: attaching shares the kernel (and its namespace) with whoever uses it.
    pub kernels: Vec<RemoteKernelEntry>,
    /// Why the server could not be listed.
    pub error: Option<String>,
}

/// A kernelspec on the Jupyter server.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct RemoteSpec {
    /// What kernel_start accepts: `jupyter:<name>` (a new kernel on the server).
    pub name: String,
    pub display_name: String,
    pub language: String,
}

/// A kernel running on the Jupyter server.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct RemoteKernelEntry {
    /// What kernel_start accepts: `jupyter-kernel:<id>` (attach; kernel_stop detaches).
    pub name: String,
    /// Its kernelspec.
    pub kernelspec: String,
    /// `idle`, `busy`, `starting`, … as the server says.
    pub execution_state: Option<String>,
    pub last_activity: Option<String>,
    pub connections: Option<u64>,
    /// The notebook it runs, when the server knows.
    pub notebook_path: Option<String>,
}

/// Lists the Jupyter server's kernelspecs, kernels and their notebooks (each call bounded).
/// Which of the Jupyter server's kernels a caller may see and attach to. Without principals,
/// every one (a person's included). Under principals, a principal's own only: those their
/// sessions run, and those the server's sessions run for notebooks in their area (their
/// directory there, e.g. a notebook they opened in JupyterLab); another principal's kernel is
/// answered exactly like one that does not exist.
pub(crate) struct RemoteOwnership {
    /// `None`: no principals, everything is visible.
    area: Option<String>,
    /// Kernel ids the caller's own sessions run.
    own: std::collections::HashSet<String>,
}

impl RemoteOwnership {
    pub(crate) fn of(caller: &IpythonMcp) -> RemoteOwnership {
        let kernels = caller.kernels();
        let area = kernels.owner().map(str::to_owned);
        let own = kernels
            .all()
            .into_iter()
            .filter_map(|listing| listing.handle.status().kernel?.remote)
            .map(|remote| remote.kernel_id)
            .collect();
        RemoteOwnership { area, own }
    }

    /// A notebook session path as the caller names it (inside their area), or `None` when it
    /// is outside the area.
    fn notebook<'a>(&self, path: &'a str) -> Option<&'a str> {
        let path = path.trim_start_matches('/');
        match &self.area {
            None => Some(path),
            Some(area) => path.strip_prefix(area.as_str())?.strip_prefix('/'),
        }
    }

    /// Whether the caller may see and attach to kernel `id`, given the server's sessions.
    fn allows(&self, id: &str, sessions: &[ipython_mcp_jupyter::remote::RemoteSession]) -> bool {
        self.area.is_none()
            || self.own.contains(id)
            || sessions
                .iter()
                .any(|session| session.kernel_id == id && self.notebook(&session.path).is_some())
    }

    /// `spec` with an attach to a kernel the caller may not use turned into one that fails
    /// as for an unknown id (the server's sessions are asked only then).
    pub(crate) async fn check(
        &self,
        server: Option<&ipython_mcp_jupyter::remote::Server>,
        spec: StartSpec,
    ) -> StartSpec {
        use ipython_mcp_kernel::RemoteKernel;
        let StartSpec::Remote(RemoteKernel::Attach { id }) = spec else {
            return spec;
        };
        if self.area.is_none() || self.own.contains(&id) {
            return StartSpec::Remote(RemoteKernel::Attach { id });
        }
        let sessions = match server {
            Some(server) => server.sessions().await.unwrap_or_default(),
            None => Vec::new(),
        };
        if self.allows(&id, &sessions) {
            StartSpec::Remote(RemoteKernel::Attach { id })
        } else {
            StartSpec::Remote(RemoteKernel::Foreign { id })
        }
    }
}

async fn discover_remote(
    server: &ipython_mcp_jupyter::remote::Server,
    ownership: &RemoteOwnership,
) -> RemoteDiscovery {
    let (specs, kernels, sessions) =
        tokio::join!(server.kernelspecs(), server.kernels(), server.sessions());
    // A Kernel Gateway refuses to list its kernels and sessions (403) unless configured to,
    // while it accepts the same token for everything else: once the kernelspecs came back, a
    // refused listing means the server does not show its kernels, not a wrong token.
    let unlisted = |refused: bool| specs.is_ok() && refused;
    let kernels = match kernels {
        Err(error) if unlisted(error.is_refused()) => Ok(Vec::new()),
        other => other,
    };
    let sessions = match sessions {
        Err(error) if unlisted(error.is_refused()) => Ok(Vec::new()),
        other => other,
    };
    let error = [
        specs.as_ref().err(),
        kernels.as_ref().err(),
        sessions.as_ref().err(),
    ]
    .into_iter()
    .flatten()
    .next()
    .map(|error| ipython_mcp_text::shorten(&error.to_string(), 500));
    let sessions = sessions.unwrap_or_default();
    RemoteDiscovery {
        server: server.url().to_string(),
        kernelspecs: specs
            .unwrap_or_default()
            .into_iter()
            .map(|spec| RemoteSpec {
                name: format!("jupyter:{}", spec.name),
                display_name: spec.display_name,
                language: spec.language,
            })
            .collect(),
        kernels: kernels
            .unwrap_or_default()
            .into_iter()
            .filter(|kernel| ownership.allows(&kernel.id, &sessions))
            .map(|kernel| RemoteKernelEntry {
                notebook_path: sessions
                    .iter()
                    .find(|session| session.kernel_id == kernel.id)
                    .and_then(|session| ownership.notebook(&session.path))
                    .map(str::to_owned),
                name: ipython_mcp_kernel::RemoteKernel::Attach { id: kernel.id }.to_string(),
                kernelspec: kernel.name,
                execution_state: kernel.execution_state,
                last_activity: kernel.last_activity,
                connections: kernel.connections,
            })
            .collect(),
        error,
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartParams {
    /// Kernelspec name, `venv:/abs/project`, a Python path with ipykernel, or on the Jupyter server `jupyter:<name>` (new) / `jupyter-kernel:<id>` (attach).
    pub spec: String,
    /// Session id to use (default `k1`, `k2`…).
    #[serde(default)]
    pub kernel: Option<String>,
    /// Working directory.
    #[serde(default)]
    pub cwd: Option<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct StartResult {
    pub ok: bool,
    /// The new session id: pass it as `kernel` to the other tools.
    pub kernel: String,
    /// The session's status once its kernel is ready (or why it is not).
    pub status: RuntimeStatus<ErrorInfo>,
    /// Why the kernel is not ready, where every failed tool puts it; null when it is.
    pub error: Option<ErrorInfo>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopParams {
    /// Session id.
    pub kernel: String,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct StopResult {
    pub ok: bool,
    pub kernel: String,
    /// `closed` once stopped.
    pub state: SessionState,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct KernelEntry {
    pub kernel: String,
    /// What it was started from (`default` for the server's own).
    pub spec: String,
    pub state: SessionState,
    pub epoch: u64,
    /// Null for a kernel on a Jupyter server.
    pub pid: Option<u32>,
    /// Where a remote kernel lives: the server, its kernel id, whether attached.
    pub remote: Option<ipython_mcp_kernel::RemoteDescription>,
    pub language: Option<String>,
    /// The kernel's working directory.
    pub working_dir: Option<String>,
    pub operation_active: bool,
    pub queue_depth: usize,
    /// Seconds since a tool call last used it.
    pub idle_seconds: f64,
    /// Recent execution ids (newest first), for get_output.
    pub executions: Vec<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct KernelListResult {
    pub ok: bool,
    pub kernels: Vec<KernelEntry>,
    pub max_kernels: usize,
    /// Started sessions idle this long are stopped.
    pub idle_timeout_seconds: f64,
}

/// `kernel_start`'s `cwd`: an existing directory, relative to the server's working directory,
/// made absolute with links resolved.
fn working_dir(cwd: &str) -> Result<PathBuf, Box<ErrorInfo>> {
    let refuse = |why: &str| {
        Box::new(ErrorInfo::new(
            Code::InvalidArguments,
            format!("cwd {:?} {why}", ipython_mcp_text::shorten(cwd, 200)),
        ))
    };
    if cwd.trim().is_empty() {
        return Err(refuse("is empty"));
    }
    match std::fs::canonicalize(cwd) {
        Ok(path) if path.is_dir() => Ok(path),
        Ok(_) => Err(refuse("is not a directory")),
        Err(error) => Err(refuse(&format!("cannot be used: {error}"))),
    }
}

fn structured<T: Serialize>(tool: &ToolSpec, value: &T, ok: bool) -> CallToolResult {
    render::namespace(
        tool.name,
        serde_json::to_value(value).unwrap_or_default(),
        ok,
    )
}

impl IpythonMcp {
    fn page_request(
        &self,
        params: &GetOutputParams,
    ) -> Result<Option<PageRequest>, Box<ErrorInfo>> {
        if params.stream.is_none() && params.start_line.is_none() && params.pattern.is_none() {
            if params.max_lines.is_some() {
                return Err(Box::new(ErrorInfo::new(
                    Code::InvalidArguments,
                    "max_lines needs stream, start_line or pattern",
                )));
            }
            return Ok(None);
        }
        let pattern = match &params.pattern {
            None => None,
            Some(pattern) if pattern.chars().count() > MAX_PATTERN_CHARS => {
                return Err(Box::new(ErrorInfo::new(
                    Code::InvalidArguments,
                    format!("pattern is longer than {MAX_PATTERN_CHARS} characters"),
                )))
            }
            Some(pattern) => Some(
                regex::RegexBuilder::new(pattern)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|error| {
                        Box::new(ErrorInfo::new(
                            Code::InvalidArguments,
                            format!(
                                "pattern is not a valid regular expression: {}",
                                ipython_mcp_text::shorten(&error.to_string(), 500)
                            ),
                        ))
                    })?,
            ),
        };
        let max_lines = params.max_lines.unwrap_or(DEFAULT_LINES);
        if max_lines == 0 || max_lines > MAX_LINES {
            return Err(Box::new(ErrorInfo::new(
                Code::InvalidArguments,
                format!("max_lines must be between 1 and {MAX_LINES}, got {max_lines}"),
            )));
        }
        if params.start_line == Some(0) {
            return Err(Box::new(ErrorInfo::new(
                Code::InvalidArguments,
                "start_line is 1-based (or negative to count from the end); 0 is not a line",
            )));
        }
        Ok(Some(PageRequest {
            stream: params.stream.unwrap_or(StreamName::Stdout),
            start_line: params.start_line.unwrap_or(1),
            max_lines,
            pattern,
            max_chars: self.config().limits.max_text_chars,
        }))
    }
}

#[tool_router(router = kernels_router, vis = "pub(crate)")]
impl IpythonMcp {
    #[tool(
        name = "get_output",
        description = "Get an execution's output (default: the latest), e.g. a background one, as execute gives it and whether it finished; can wait. Pages full stdout/stderr on disk by line or `pattern`. Never queues.",
        output_schema = schema_for_output::<GetOutputResult>(),
        annotations(title = "Get execution output", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn get_output(&self, Parameters(params): Parameters<GetOutputParams>) -> ToolResult {
        let wait = match params.wait_seconds {
            None => Duration::ZERO,
            Some(seconds) if seconds.is_finite() && (0.0..=MAX_WAIT_SECONDS).contains(&seconds) => {
                Duration::from_secs_f64(seconds)
            }
            Some(seconds) => {
                return Err(ToolError::invalid(format!(
                    "wait_seconds must be between 0 and {MAX_WAIT_SECONDS}, got {seconds}"
                )))
            }
        };
        let page_request = self.page_request(&params)?;
        let session = match &params.execution_id {
            Some(id) => self.kernels().find_execution(id).ok_or_else(|| {
                ToolError::invalid(format!(
                    "no execution with id {:?}",
                    ipython_mcp_text::shorten(id, 64)
                ))
                .with_hint(format!(
                    "each kernel remembers its latest {} executions (kernel_list shows their ids); a stopped kernel forgets its executions",
                    ipython_mcp_output::MAX_RECORDS
                ))
            })?,
            None => self.session(params.kernel.as_deref())?,
        };
        let execution_id = params.execution_id.as_deref();
        let Some(output) = session.output(execution_id, wait).await else {
            return Err(ToolError::invalid(format!(
                "kernel {:?} has run nothing yet",
                session.kernel_id()
            )));
        };
        let page = match page_request {
            None => None,
            Some(request) => session
                .page(Some(output.execution_id.as_str()), request)
                .await
                .transpose()?,
        };
        let finished = output.status != ipython_mcp_output::ExecutionStatus::Pending;
        let extra_text = page.as_ref().map(render::page_text).unwrap_or_default();
        // The fields GetOutputResult adds to the execution's own (its schema describes both).
        let mut extra = serde_json::Map::new();
        extra.insert("finished".into(), finished.into());
        extra.insert("kernel".into(), session.kernel_id().into());
        extra.insert(
            "page".into(),
            serde_json::to_value(&page).unwrap_or_default(),
        );
        Ok(render::execution_with(&output, extra, extra_text))
    }

    #[tool(
        name = "kernel_discover",
        description = "What kernel_start can start: Jupyter kernelspecs (name, language, helper support), with `directory` ipykernel virtualenvs in it or one level down (`venv:/path`), and under `remote` the Jupyter server's kernelspecs (`jupyter:<name>`) and running kernels (`jupyter-kernel:<id>`, e.g. a person's). Read-only.",
        output_schema = schema_for_output::<DiscoverResult>(),
        annotations(title = "Discover kernels", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn kernel_discover(&self, Parameters(params): Parameters<DiscoverParams>) -> ToolResult {
        let python = self.kernels().default_python();
        let found = tokio::task::spawn_blocking(move || {
            let directory = match params.directory.as_deref().map(PathBuf::from) {
                Some(path) if !path.is_absolute() || !path.is_dir() => {
                    return Err(Box::new(ErrorInfo::new(
                        Code::InvalidArguments,
                        format!(
                            "directory {:?} is not an absolute path to a directory",
                            path.display().to_string()
                        ),
                    )))
                }
                other => other,
            };
            let dirs = kernelspec::data_dirs(python.as_deref());
            let specs = kernelspec::discover(&dirs);
            let venvs = directory
                .as_deref()
                .map(kernelspec::discover_venvs)
                .unwrap_or_default();
            Ok((dirs, specs, venvs))
        })
        .await
        .unwrap_or_else(|_| {
            Err(Box::new(ErrorInfo::new(
                Code::InternalError,
                "discovery failed",
            )))
        });
        let (dirs, specs, venvs) = found?;
        let remote = match self.state().jupyter() {
            Some(server) => Some(discover_remote(server, &RemoteOwnership::of(self)).await),
            None => None,
        };
        let result = DiscoverResult {
            remote,
            ok: true,
            kernelspecs: specs
                .into_iter()
                .map(|spec| KernelSpecInfo {
                    helper_tools: spec.is_ipykernel(),
                    name: spec.name,
                    display_name: spec.display_name,
                    language: spec.language,
                    resource_dir: spec.resource_dir.display().to_string(),
                })
                .collect(),
            venvs: venvs.into_iter().map(VenvKernel::from).collect(),
            searched: dirs
                .iter()
                .map(|dir| dir.join("kernels").display().to_string())
                .collect(),
        };
        Ok(structured(KERNEL_DISCOVER, &result, true))
    }

    #[tool(
        name = "kernel_start",
        description = "Start a kernel session (specs: kernel_discover) and wait until ready; pass its id as `kernel` to other tools. Each has its own kernel, namespace and queue; stops after 15 min idle.",
        output_schema = schema_for_output::<StartResult>(),
        annotations(title = "Start a kernel", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn kernel_start(&self, Parameters(params): Parameters<StartParams>) -> ToolResult {
        let sessions = self.kernels();
        // Kernelspecs, venvs and the cwd are files: read them off the async threads.
        let parsing = sessions.clone();
        let (spec_text, cwd) = (params.spec.clone(), params.cwd.clone());
        let parsed = tokio::task::spawn_blocking(move || {
            let cwd = cwd.as_deref().map(working_dir).transpose()?;
            Ok::<_, ToolError>((parsing.parse_spec(&spec_text)?, cwd))
        })
        .await
        .unwrap_or_else(|_| {
            Err(ToolError::new(
                Code::InternalError,
                "kernelspec lookup failed",
            ))
        });
        let (spec, cwd) = parsed?;
        let spec = RemoteOwnership::of(self)
            .check(self.state().jupyter(), spec)
            .await;
        let language_hint = match &spec {
            StartSpec::KernelSpec(spec) => spec.language.clone(),
            StartSpec::Python { .. } | StartSpec::Default => "python".to_owned(),
            StartSpec::Remote(_) => "remote".to_owned(),
        };
        let (id, session) =
            sessions.start(params.spec.trim(), spec, params.kernel.as_deref(), cwd)?;
        let bound = self.config().timeouts.kernel_startup + self.config().timeouts.provision;
        let deadline = tokio::time::Instant::now() + bound;
        while session.status().state == SessionState::Starting
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Idle time counts from now, not from the start request (a slow start is not idleness).
        let _ = sessions.get(Some(id.as_str()));
        let status = crate::error::status(session.status());
        let ok = matches!(status.state, SessionState::Ready | SessionState::Busy);
        tracing::info!(tool = KERNEL_START.name, kernel = %id, language = %language_hint, ok, "tool call");
        let error = (!ok).then(|| {
            status.error.clone().unwrap_or_else(|| {
                ErrorInfo::new(
                    Code::RuntimeUnavailable,
                    format!(
                        "the kernel was not ready within {:.0} s",
                        bound.as_secs_f64()
                    ),
                )
            })
        });
        Ok(structured(
            KERNEL_START,
            &StartResult {
                ok,
                kernel: id.into(),
                status,
                error,
            },
            ok,
        ))
    }

    #[tool(
        name = "kernel_list",
        description = "Running sessions (ids for `kernel`): spec, state, pid, language, cwd, where it runs, idle time, recent executions.",
        output_schema = schema_for_output::<KernelListResult>(),
        annotations(title = "List kernels", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn kernel_list(&self, Parameters(_params): Parameters<ListParams>) -> ToolResult {
        let sessions = self.kernels();
        let kernels = sessions
            .all()
            .into_iter()
            .map(
                |Listing {
                     id,
                     spec,
                     handle,
                     idle,
                 }| {
                    let status = handle.status();
                    KernelEntry {
                        kernel: id.into(),
                        spec,
                        state: status.state,
                        epoch: status.epoch,
                        pid: status.kernel.as_ref().and_then(|kernel| kernel.pid),
                        remote: status
                            .kernel
                            .as_ref()
                            .and_then(|kernel| kernel.remote.clone()),
                        language: status.kernel.as_ref().map(|kernel| kernel.language.clone()),
                        working_dir: status
                            .kernel
                            .as_ref()
                            .map(|kernel| kernel.working_dir.clone()),
                        operation_active: status.operation_active,
                        queue_depth: status.queue_depth,
                        idle_seconds: idle.as_secs_f64(),
                        executions: handle
                            .execution_ids()
                            .into_iter()
                            .map(String::from)
                            .collect(),
                    }
                },
            )
            .collect();
        let limits = sessions.limits();
        Ok(structured(
            KERNEL_LIST,
            &KernelListResult {
                ok: true,
                kernels,
                max_kernels: limits.max_kernels,
                idle_timeout_seconds: limits.idle_timeout.as_secs_f64(),
            },
            true,
        ))
    }

    #[tool(
        name = "kernel_stop",
        description = "Stop a session started with kernel_start: running code interrupted, queued calls runtime_closed, namespace gone; a `jupyter-kernel:` session only detaches. Not `default`.",
        output_schema = schema_for_output::<StopResult>(),
        annotations(title = "Stop a kernel", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn kernel_stop(&self, Parameters(params): Parameters<StopParams>) -> ToolResult {
        let handle = self.state().stop_kernel(&params.kernel).await?;
        tracing::info!(tool = KERNEL_STOP.name, kernel = %params.kernel, "tool call");
        self.catalog()
            .drop_session(&params.kernel, self.peers())
            .await;
        Ok(structured(
            KERNEL_STOP,
            &StopResult {
                ok: true,
                kernel: params.kernel,
                state: handle.status().state,
            },
            true,
        ))
    }
}
