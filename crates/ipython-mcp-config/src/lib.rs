//! Validated configuration for ipython-mcp.
//!
//! Configuration arrives in two stages. The binary collects raw strings (from clap flags, each
//! backed by an `IPYTHON_MCP_*` environment variable) into a [`RawConfig`]; [`Config::from_raw`]
//! turns them into typed, checked values or one [`Error`] that names the setting. Nothing below
//! the binary sees clap, and nothing here touches tokio or the process environment, so every
//! rule is a plain unit test.
//!
//! The table of settings ([`SETTINGS`]) is the single source of names, variables and defaults:
//! the CLI, the README table and the error messages all come from it.

mod environment;
mod redact;

use std::path::PathBuf;
use std::time::Duration;

pub use environment::{NamedEnvironment, Variables, MAX_REQUIREMENTS, MAX_REQUIREMENT_CHARS};
pub use redact::Redactor;

/// One documented setting: its name, environment variable, flag and default.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Setting key, used in error messages and docs.
    pub name: &'static str,
    /// Environment variable that sets it.
    pub env: &'static str,
    /// Long command-line flag that sets it (without the leading `--`).
    pub flag: &'static str,
    /// The default as text, exactly as the README shows it.
    pub default: &'static str,
    /// One line for `--help` and the README.
    pub help: &'static str,
}

macro_rules! settings {
    ($($ident:ident = ($name:literal, $env:literal, $flag:literal, $default:literal, $help:literal);)*) => {
        /// Every setting, in documentation order.
        pub const SETTINGS: &[Setting] = &[$($ident),*];
        $(
            #[doc = $help]
            pub const $ident: Setting = Setting { name: $name, env: $env, flag: $flag, default: $default, help: $help };
        )*
    };
}

settings! {
    MAX_TEXT_CHARS = ("max_text_chars", "IPYTHON_MCP_MAX_TEXT_CHARS", "max-text-chars", "8192",
        "Characters of stdout and of stderr kept per execution; the rest is counted, not returned");
    MAX_TRACEBACK_CHARS = ("max_traceback_chars", "IPYTHON_MCP_MAX_TRACEBACK_CHARS", "max-traceback-chars", "4096",
        "Characters of an error traceback returned (ANSI escapes stripped)");
    MAX_REPR_CHARS = ("max_repr_chars", "IPYTHON_MCP_MAX_REPR_CHARS", "max-repr-chars", "1024",
        "Characters of a representation, signature or docstring returned by list, search and inspect");
    MAX_RESULTS = ("max_results", "IPYTHON_MCP_MAX_RESULTS", "max-results", "100",
        "Items kept per JSON array or object in displays and results");
    MAX_DISPLAY_ITEMS = ("max_display_items", "IPYTHON_MCP_MAX_DISPLAY_ITEMS", "max-display-items", "20",
        "Rich display items kept per execution; later ones are counted in display_omitted");
    MAX_JSON_DEPTH = ("max_json_depth", "IPYTHON_MCP_MAX_JSON_DEPTH", "max-json-depth", "6",
        "Nesting depth kept in JSON payloads of displays and results");
    MAX_IMAGE_BYTES = ("max_image_bytes", "IPYTHON_MCP_MAX_IMAGE_BYTES", "max-image-bytes", "1048576",
        "Largest image (decoded bytes) returned as MCP image content; larger PNG and JPEG images are downscaled to fit");
    MAX_REPLY_BYTES = ("max_reply_bytes", "IPYTHON_MCP_MAX_REPLY_BYTES", "max-reply-bytes", "8388608",
        "Bytes of display payloads (images, HTML, JSON) in one reply; the rest stay in the spool, listed with their paths");
    OPERATION_TIMEOUT = ("operation_timeout_seconds", "IPYTHON_MCP_OPERATION_TIMEOUT_SECONDS", "operation-timeout-seconds", "30",
        "Default deadline of one operation, counted from dispatch (queue time excluded)");
    MAX_TIMEOUT = ("max_timeout_seconds", "IPYTHON_MCP_MAX_TIMEOUT_SECONDS", "max-timeout-seconds", "3600",
        "Largest timeout_seconds an execute call may ask for");
    INTERRUPTION_GRACE = ("interruption_grace_seconds", "IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "interruption-grace-seconds", "2",
        "How long an interrupted operation may take to stop before its kernel is replaced");
    WORKER_STARTUP_TIMEOUT = ("worker_startup_timeout_seconds", "IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS", "worker-startup-timeout-seconds", "10",
        "Bound on starting one kernel (process spawn to a ready helper)");
    MAX_PENDING_OPERATIONS = ("max_pending_operations", "IPYTHON_MCP_MAX_PENDING_OPERATIONS", "max-pending-operations", "32",
        "Operations that may wait for a busy kernel (the running one not counted); more get runtime_busy");
    QUEUE_WAIT_TIMEOUT = ("queue_wait_timeout_seconds", "IPYTHON_MCP_QUEUE_WAIT_TIMEOUT_SECONDS", "queue-wait-timeout-seconds", "30",
        "How long an operation may wait in the queue before it gets queue_timeout (nothing runs)");
    SPARE_KERNELS = ("spare_kernels", "IPYTHON_MCP_SPARE_KERNELS", "spare-kernels", "1",
        "Warm spare kernels kept ready per session so a replacement costs milliseconds (0 disables)");
    PROVISION_TIMEOUT = ("provision_timeout_seconds", "IPYTHON_MCP_PROVISION_TIMEOUT_SECONDS", "provision-timeout-seconds", "600",
        "Bound on creating a managed environment (the default one, or a named one with its requirements)");
    MAX_KERNELS = ("max_kernels", "IPYTHON_MCP_MAX_KERNELS", "max-kernels", "8",
        "Kernel sessions that may run at once, `default` included (kernel_start refuses more)");
    KERNEL_IDLE_TIMEOUT = ("kernel_idle_timeout_seconds", "IPYTHON_MCP_KERNEL_IDLE_TIMEOUT_SECONDS", "kernel-idle-timeout-seconds", "900",
        "Idle time after which a started (non-default) kernel session is stopped");
    MAX_SPOOL_EXECUTION_BYTES = ("max_spool_execution_bytes", "IPYTHON_MCP_MAX_SPOOL_EXECUTION_BYTES", "max-spool-execution-bytes", "268435456",
        "Bytes of each stream of each execution kept on disk for get_output paging (0 disables the spool)");
    MAX_SPOOL_BYTES = ("max_spool_bytes", "IPYTHON_MCP_MAX_SPOOL_BYTES", "max-spool-bytes", "1073741824",
        "Bytes of spooled output kept per kernel session; the oldest executions' files are deleted first");
    MAX_RETAINED_OUTPUT_BYTES = ("max_retained_output_bytes", "IPYTHON_MCP_MAX_RETAINED_OUTPUT_BYTES", "max-retained-output-bytes", "67108864",
        "Bytes of finished executions' output a kernel session keeps in memory for get_output (large displays live in the spool); the oldest are forgotten first");
    MAX_SERVER_RETAINED_OUTPUT_BYTES = ("max_server_retained_output_bytes", "IPYTHON_MCP_MAX_SERVER_RETAINED_OUTPUT_BYTES", "max-server-retained-output-bytes", "268435456",
        "Bytes of finished executions' output all kernel sessions together keep in memory; the oldest are forgotten first");
    MAX_TOOL_NAME_CHARS = ("max_tool_name_chars", "IPYTHON_MCP_MAX_TOOL_NAME_CHARS", "max-tool-name-chars", "64",
        "Longest name of a dynamic tool");
    MAX_TOOL_DESCRIPTION_CHARS = ("max_tool_description_chars", "IPYTHON_MCP_MAX_TOOL_DESCRIPTION_CHARS", "max-tool-description-chars", "1024",
        "Longest description of a dynamic tool");
    MAX_DYNAMIC_TOOLS = ("max_dynamic_tools", "IPYTHON_MCP_MAX_DYNAMIC_TOOLS", "max-dynamic-tools", "100",
        "Dynamic tools registered at once, across all kernels");
    PYTHON = ("python", "IPYTHON_MCP_PYTHON", "python", "found (see README)",
        "Python interpreter for the default kernel; it must have ipykernel");
    LIBRARY_PATHS = ("library_paths", "IPYTHON_MCP_LIBRARY_PATHS", "library-paths", "none",
        "Trusted library directories (absolute, separated by ':') prepended to the kernel's sys.path");
    PRELOAD_MODULES = ("preload_modules", "IPYTHON_MCP_PRELOAD_MODULES", "preload-modules", "none",
        "Comma-separated modules imported into every kernel at start (and after every reset or replacement)");
    MODULE_ALIASES = ("module_aliases", "IPYTHON_MCP_MODULE_ALIASES", "module-aliases", "none",
        "JSON object mapping modules to the names they are bound to, e.g. {\"numpy\": \"np\"}");
    ENVIRONMENT_WORKSPACE = ("environment_workspace", "IPYTHON_MCP_ENVIRONMENT_WORKSPACE", "environment-workspace", "none",
        "Absolute directory outside the project where named environments live (needs IPYTHON_MCP_ACTIVE_ENVIRONMENT)");
    ACTIVE_ENVIRONMENT = ("active_environment", "IPYTHON_MCP_ACTIVE_ENVIRONMENT", "active-environment", "none",
        "Named environment the kernels run in (letters, digits, '.', '_', '-'), created in the workspace on first use and reused after");
    ENVIRONMENT_REQUIREMENTS = ("environment_requirements", "IPYTHON_MCP_ENVIRONMENT_REQUIREMENTS", "environment-requirements", "none",
        "JSON array of PEP 508 requirements installed into the active environment, e.g. [\"six==1.16.0\"]");
    ENVIRONMENT_VARIABLES = ("environment_variables", "IPYTHON_MCP_ENVIRONMENT_VARIABLES", "environment-variables", "none",
        "JSON object of environment variables set in every kernel before preloads, e.g. {\"TASK_MODE\": \"offline\"}");
    TOOLSETS = ("toolsets", "IPYTHON_MCP_TOOLSETS", "toolsets", "all",
        "Comma-separated groups of tools to offer besides the core ones: namespace, kernels, dynamic, notebooks (or all)");
    WORKSPACE_ROOT = ("workspace_root", "IPYTHON_MCP_WORKSPACE_ROOT", "workspace-root", "the working directory",
        "Directory every notebook path is relative to; notebook tools never read or write outside it");
    CACHE_DIR = ("cache_dir", "IPYTHON_MCP_CACHE_DIR", "cache-dir", "$XDG_CACHE_HOME/ipython-mcp or ~/.cache/ipython-mcp",
        "Where the managed default environment lives");
    LOG = ("log", "IPYTHON_MCP_LOG", "log", "info",
        "Log filter for stderr (tracing EnvFilter syntax, e.g. info or ipython_mcp_kernel=debug)");
    TRANSPORT = ("transport", "IPYTHON_MCP_TRANSPORT", "transport", "stdio",
        "How clients connect: stdio (the client starts the server) or http (Streamable HTTP at /mcp)");
    HOST = ("host", "IPYTHON_MCP_HOST", "host", "127.0.0.1",
        "Address the HTTP transport listens on; a non-loopback address also needs --allow-remote");
    PORT = ("port", "IPYTHON_MCP_PORT", "port", "8765",
        "TCP port of the HTTP transport (0 picks a free port; the URL is printed at start)");
    HTTP_TOKEN = ("http_token", "IPYTHON_MCP_HTTP_TOKEN", "http-token", "generated",
        "Bearer token every HTTP request must carry (at least 16 characters, no spaces); without it or a token file, one is generated and printed to stderr");
    HTTP_TOKEN_FILE = ("http_token_file", "IPYTHON_MCP_HTTP_TOKEN_FILE", "http-token-file", "none",
        "File whose first line is the bearer token (keeps it out of the environment and the process list)");
    HTTP_ALLOWED_ORIGINS = ("http_allowed_origins", "IPYTHON_MCP_HTTP_ALLOWED_ORIGINS", "http-allowed-origins", "loopback",
        "Comma-separated browser origins allowed to call the HTTP transport (scheme://host:port, :* for any port); requests from other origins get 403; the default allows http(s)://localhost, 127.0.0.1 and [::1] on any port");
    HTTP_ALLOWED_HOSTS = ("http_allowed_hosts", "IPYTHON_MCP_HTTP_ALLOWED_HOSTS", "http-allowed-hosts", "loopback",
        "Comma-separated extra Host header values accepted (host or host:port), for a server reached by name; localhost, 127.0.0.1, ::1 and the --host address are always accepted");
    ALLOW_REMOTE = ("allow_remote", "IPYTHON_MCP_ALLOW_REMOTE", "allow-remote", "false",
        "Allow --host to be a non-loopback address, so other machines can connect (the token is still required)");
}

/// Raw, unvalidated values as the user gave them (flag or environment variable).
///
/// `None` means "not given": the documented default applies.
#[derive(Debug, Clone, Default)]
pub struct RawConfig {
    pub max_text_chars: Option<String>,
    pub max_traceback_chars: Option<String>,
    pub max_repr_chars: Option<String>,
    pub max_results: Option<String>,
    pub max_display_items: Option<String>,
    pub max_json_depth: Option<String>,
    pub max_image_bytes: Option<String>,
    pub max_reply_bytes: Option<String>,
    pub operation_timeout_seconds: Option<String>,
    pub max_timeout_seconds: Option<String>,
    pub interruption_grace_seconds: Option<String>,
    pub worker_startup_timeout_seconds: Option<String>,
    pub max_pending_operations: Option<String>,
    pub spare_kernels: Option<String>,
    pub queue_wait_timeout_seconds: Option<String>,
    pub provision_timeout_seconds: Option<String>,
    pub max_kernels: Option<String>,
    pub kernel_idle_timeout_seconds: Option<String>,
    pub max_spool_execution_bytes: Option<String>,
    pub max_spool_bytes: Option<String>,
    pub max_retained_output_bytes: Option<String>,
    pub max_server_retained_output_bytes: Option<String>,
    pub max_tool_name_chars: Option<String>,
    pub max_tool_description_chars: Option<String>,
    pub max_dynamic_tools: Option<String>,
    pub python: Option<String>,
    pub library_paths: Option<String>,
    pub preload_modules: Option<String>,
    pub module_aliases: Option<String>,
    pub environment_workspace: Option<String>,
    pub active_environment: Option<String>,
    pub environment_requirements: Option<String>,
    pub environment_variables: Option<String>,
    pub workspace_root: Option<String>,
    pub toolsets: Option<String>,
    pub cache_dir: Option<String>,
    pub log: Option<String>,
    /// Not a setting: the server's working directory (the project). When given, the
    /// environment workspace must lie outside it.
    pub working_dir: Option<PathBuf>,
    pub transport: Option<String>,
    pub host: Option<String>,
    pub port: Option<String>,
    pub http_token: Option<String>,
    pub http_token_file: Option<String>,
    pub http_allowed_origins: Option<String>,
    pub http_allowed_hosts: Option<String>,
    pub allow_remote: Option<String>,
}

/// Bounds on everything that crosses from a kernel to an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    pub max_text_chars: usize,
    pub max_traceback_chars: usize,
    pub max_repr_chars: usize,
    pub max_results: usize,
    pub max_display_items: usize,
    pub max_json_depth: usize,
    pub max_image_bytes: usize,
    pub max_reply_bytes: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits {
            max_text_chars: 8192,
            max_traceback_chars: 4096,
            max_repr_chars: 1024,
            max_results: 100,
            max_display_items: 20,
            max_json_depth: 6,
            max_image_bytes: 1_048_576,
            max_reply_bytes: 8 * 1024 * 1024,
        }
    }
}

/// Deadlines of the session's operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub operation: Duration,
    pub max_operation: Duration,
    pub interruption_grace: Duration,
    pub kernel_startup: Duration,
    pub provision: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            operation: Duration::from_secs(30),
            max_operation: Duration::from_secs(3600),
            interruption_grace: Duration::from_secs(2),
            kernel_startup: Duration::from_secs(10),
            provision: Duration::from_secs(600),
        }
    }
}

/// Admission limits of each session's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    pub max_pending: usize,
    pub queue_wait: Duration,
}

/// How many warm spare kernels a session keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spares(pub usize);

impl Default for Spares {
    fn default() -> Self {
        Spares(1)
    }
}

impl Default for QueueLimits {
    fn default() -> Self {
        QueueLimits {
            max_pending: 32,
            queue_wait: Duration::from_secs(30),
        }
    }
}

/// Limits of the kernels toolset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelLimits {
    /// Sessions at once, `default` included.
    pub max_kernels: usize,
    /// Idle time after which a started (non-default) session is stopped.
    pub idle_timeout: Duration,
}

impl Default for KernelLimits {
    fn default() -> Self {
        KernelLimits {
            max_kernels: 8,
            idle_timeout: Duration::from_secs(900),
        }
    }
}

/// Bounds of the on-disk spool of full stream output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolBounds {
    /// Bytes per stream per execution; 0 disables the spool.
    pub max_execution_bytes: u64,
    /// Bytes per session.
    pub max_total_bytes: u64,
    /// Bytes of finished output a session keeps in memory.
    pub max_retained_bytes: u64,
    /// Bytes of finished output all sessions keep in memory.
    pub max_server_retained_bytes: u64,
}

impl Default for SpoolBounds {
    fn default() -> Self {
        SpoolBounds {
            max_execution_bytes: 256 * 1024 * 1024,
            max_total_bytes: 1024 * 1024 * 1024,
            max_retained_bytes: 64 * 1024 * 1024,
            max_server_retained_bytes: 256 * 1024 * 1024,
        }
    }
}

/// Which groups of tools are offered besides the core ones (`execute`, `get_output`,
/// `interrupt`, `runtime_status`, `kernel_restart`): fewer tools cost an agent less context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Toolsets {
    /// list, search, inspect, call_function, reload, remove, reset.
    pub namespace: bool,
    /// kernel_discover, kernel_start, kernel_list, kernel_stop.
    pub kernels: bool,
    /// register_tool, unregister_tool.
    pub dynamic: bool,
    /// notebook_*.
    pub notebooks: bool,
}

impl Default for Toolsets {
    fn default() -> Self {
        Toolsets {
            namespace: true,
            kernels: true,
            dynamic: true,
            notebooks: true,
        }
    }
}

impl Toolsets {
    /// The toolset names, as the setting spells them.
    pub const NAMES: [&'static str; 4] = ["namespace", "kernels", "dynamic", "notebooks"];

    fn parse(raw: &str) -> Result<Toolsets, String> {
        let mut sets = Toolsets {
            namespace: false,
            kernels: false,
            dynamic: false,
            notebooks: false,
        };
        let mut any = false;
        for name in raw
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
        {
            any = true;
            match name {
                "all" => sets = Toolsets::default(),
                "namespace" => sets.namespace = true,
                "kernels" => sets.kernels = true,
                "dynamic" => sets.dynamic = true,
                "notebooks" => sets.notebooks = true,
                other => {
                    return Err(format!(
                        "unknown toolset {:?}; choose from all, {}",
                        bounded(other),
                        Self::NAMES.join(", ")
                    ))
                }
            }
        }
        if !any {
            return Err("must name at least one toolset (or all)".to_owned());
        }
        Ok(sets)
    }
}

/// Limits of dynamic tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    pub max_name_chars: usize,
    pub max_description_chars: usize,
    pub max_tools: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            max_name_chars: 64,
            max_description_chars: 1024,
            max_tools: 100,
        }
    }
}

/// What every kernel gets at start, after a reset and after a replacement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Namespace {
    /// Trusted directories prepended to `sys.path`.
    pub library_paths: Vec<PathBuf>,
    /// Modules imported and bound under their top-level name.
    pub preload_modules: Vec<String>,
    /// Module → the name it is bound to.
    pub module_aliases: std::collections::BTreeMap<String, String>,
    /// Environment variables set in the kernel process, so they exist before preloads run.
    pub variables: Variables,
}

/// How MCP clients reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// One client, over the server's stdin and stdout (the client starts the server).
    Stdio,
    /// Streamable HTTP at `/mcp`, any number of clients, bearer token required.
    Http,
}

/// A bearer token. Its `Debug` never shows the value, so it cannot reach a log by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// The least a configured token may have: short tokens are guessable.
    pub const MIN_CHARS: usize = 16;

    /// Checks a token given by the user (flag, variable or file).
    pub fn parse(text: &str) -> Result<Token, String> {
        let text = text.trim();
        if text.chars().count() < Self::MIN_CHARS {
            return Err(format!(
                "must be at least {} characters (it has {})",
                Self::MIN_CHARS,
                text.chars().count()
            ));
        }
        if !text.chars().all(|c| c.is_ascii_graphic()) {
            return Err("must be printable ASCII without spaces".to_owned());
        }
        Ok(Token(text.to_owned()))
    }

    /// A token the server made itself from random bytes.
    pub fn generated(random: &[u8; 32]) -> Token {
        Token(random.iter().map(|byte| format!("{byte:02x}")).collect())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Token(<redacted>)")
    }
}

/// Where the bearer token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `IPYTHON_MCP_HTTP_TOKEN` / `--http-token`.
    Given(Token),
    /// `IPYTHON_MCP_HTTP_TOKEN_FILE`: read (and checked with [`Token::parse`]) by the binary.
    File(PathBuf),
    /// Neither: the server generates one and prints it once.
    Generate,
}

/// Settings of the HTTP transport (unused over stdio).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http {
    pub host: std::net::IpAddr,
    pub port: u16,
    pub token: TokenSource,
    /// Browser origins allowed (an `Origin` header must match one; requests without `Origin`,
    /// i.e. not from a browser, are not affected).
    pub allowed_origins: Vec<String>,
    /// Accepted `Host` header values (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    pub allow_remote: bool,
}

impl Http {
    /// Origins allowed when none are configured: pages served from this machine.
    pub const LOOPBACK_ORIGINS: [&'static str; 6] = [
        "http://localhost:*",
        "http://127.0.0.1:*",
        "http://[::1]:*",
        "https://localhost:*",
        "https://127.0.0.1:*",
        "https://[::1]:*",
    ];
    /// Host names always accepted in the `Host` header.
    pub const LOOPBACK_HOSTS: [&'static str; 3] = ["localhost", "127.0.0.1", "::1"];
}

impl Default for Http {
    fn default() -> Self {
        Http {
            host: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            port: 8765,
            token: TokenSource::Generate,
            allowed_origins: Http::LOOPBACK_ORIGINS.map(str::to_owned).to_vec(),
            allowed_hosts: Http::LOOPBACK_HOSTS.map(str::to_owned).to_vec(),
            allow_remote: false,
        }
    }
}

/// The validated configuration of one server process.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub limits: OutputLimits,
    pub timeouts: Timeouts,
    pub queue: QueueLimits,
    pub spares: Spares,
    pub kernels: KernelLimits,
    pub spool: SpoolBounds,
    pub tools: ToolLimits,
    pub namespace: Namespace,
    /// Explicit interpreter for the default kernel (`--python`). `None` when a named
    /// environment is configured: `--python` is then the interpreter it is made from.
    pub python: Option<PathBuf>,
    /// The named environment the kernels run in, if configured.
    pub environment: Option<NamedEnvironment>,
    /// Root of the notebook workspace; `None` means the working directory, resolved by the
    /// caller (it must exist: checked when the server starts).
    pub workspace_root: Option<PathBuf>,
    /// The groups of tools offered.
    pub toolsets: Toolsets,
    /// Cache directory override; `None` means the platform default, resolved by the caller.
    pub cache_dir: Option<PathBuf>,
    /// Log filter directive for stderr.
    pub log: String,
    pub transport: Transport,
    pub http: Http,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            limits: OutputLimits::default(),
            timeouts: Timeouts::default(),
            queue: QueueLimits::default(),
            spares: Spares::default(),
            kernels: KernelLimits::default(),
            spool: SpoolBounds::default(),
            tools: ToolLimits::default(),
            namespace: Namespace::default(),
            python: None,
            environment: None,
            workspace_root: None,
            toolsets: Toolsets::default(),
            cache_dir: None,
            log: "info".to_owned(),
            transport: Transport::Stdio,
            http: Http::default(),
        }
    }
}

/// A setting that failed validation; the message is one line naming the setting.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("invalid configuration: {env} (--{flag}) must be a positive integer, got {value:?}")]
    NotPositiveInteger {
        env: &'static str,
        flag: &'static str,
        value: String,
    },
    #[error(
        "invalid configuration: {env} (--{flag}) must be a whole number (0 or more), got {value:?}"
    )]
    NotNonNegativeInteger {
        env: &'static str,
        flag: &'static str,
        value: String,
    },
    #[error("invalid configuration: {env} (--{flag}) must be a positive, finite number of seconds, got {value:?}")]
    NotPositiveSeconds {
        env: &'static str,
        flag: &'static str,
        value: String,
    },
    #[error("invalid configuration: {env} (--{flag}) must not be empty")]
    Empty {
        env: &'static str,
        flag: &'static str,
    },
    #[error("invalid configuration: {env} (--{flag}): {problem}")]
    Invalid {
        env: &'static str,
        flag: &'static str,
        problem: String,
    },
    #[error("invalid configuration: {env} (--{flag}) is {value}s, below {other_env} ({other}s)")]
    BelowOther {
        env: &'static str,
        flag: &'static str,
        value: f64,
        other_env: &'static str,
        other: f64,
    },
}

impl Config {
    /// Checks every raw value and applies defaults.
    pub fn from_raw(raw: &RawConfig) -> Result<Config, Error> {
        let defaults = Config::default();
        let limits = OutputLimits {
            max_text_chars: positive_int(
                MAX_TEXT_CHARS,
                &raw.max_text_chars,
                defaults.limits.max_text_chars,
            )?,
            max_traceback_chars: positive_int(
                MAX_TRACEBACK_CHARS,
                &raw.max_traceback_chars,
                defaults.limits.max_traceback_chars,
            )?,
            max_repr_chars: positive_int(
                MAX_REPR_CHARS,
                &raw.max_repr_chars,
                defaults.limits.max_repr_chars,
            )?,
            max_results: positive_int(MAX_RESULTS, &raw.max_results, defaults.limits.max_results)?,
            max_display_items: positive_int(
                MAX_DISPLAY_ITEMS,
                &raw.max_display_items,
                defaults.limits.max_display_items,
            )?,
            max_json_depth: positive_int(
                MAX_JSON_DEPTH,
                &raw.max_json_depth,
                defaults.limits.max_json_depth,
            )?,
            max_image_bytes: positive_int(
                MAX_IMAGE_BYTES,
                &raw.max_image_bytes,
                defaults.limits.max_image_bytes,
            )?,
            max_reply_bytes: positive_int(
                MAX_REPLY_BYTES,
                &raw.max_reply_bytes,
                defaults.limits.max_reply_bytes,
            )?,
        };
        let timeouts = Timeouts {
            operation: seconds(
                OPERATION_TIMEOUT,
                &raw.operation_timeout_seconds,
                defaults.timeouts.operation,
            )?,
            max_operation: seconds(
                MAX_TIMEOUT,
                &raw.max_timeout_seconds,
                defaults.timeouts.max_operation,
            )?,
            interruption_grace: seconds(
                INTERRUPTION_GRACE,
                &raw.interruption_grace_seconds,
                defaults.timeouts.interruption_grace,
            )?,
            kernel_startup: seconds(
                WORKER_STARTUP_TIMEOUT,
                &raw.worker_startup_timeout_seconds,
                defaults.timeouts.kernel_startup,
            )?,
            provision: seconds(
                PROVISION_TIMEOUT,
                &raw.provision_timeout_seconds,
                defaults.timeouts.provision,
            )?,
        };
        if timeouts.max_operation < timeouts.operation {
            return Err(Error::BelowOther {
                env: MAX_TIMEOUT.env,
                flag: MAX_TIMEOUT.flag,
                value: timeouts.max_operation.as_secs_f64(),
                other_env: OPERATION_TIMEOUT.env,
                other: timeouts.operation.as_secs_f64(),
            });
        }
        let queue = QueueLimits {
            max_pending: positive_int(
                MAX_PENDING_OPERATIONS,
                &raw.max_pending_operations,
                defaults.queue.max_pending,
            )?,
            queue_wait: seconds(
                QUEUE_WAIT_TIMEOUT,
                &raw.queue_wait_timeout_seconds,
                defaults.queue.queue_wait,
            )?,
        };
        // With a named environment, --python chooses the interpreter that environment is made
        // from; the kernel runs in the environment.
        let mut python = path(PYTHON, &raw.python)?;
        let mut environment = environment::named(raw)?;
        if let Some(named) = &mut environment {
            named.python = python.take();
        }
        Ok(Config {
            limits,
            timeouts,
            queue,
            spares: Spares(non_negative_int(
                SPARE_KERNELS,
                &raw.spare_kernels,
                defaults.spares.0,
            )?),
            kernels: KernelLimits {
                max_kernels: positive_int(
                    MAX_KERNELS,
                    &raw.max_kernels,
                    defaults.kernels.max_kernels,
                )?,
                idle_timeout: seconds(
                    KERNEL_IDLE_TIMEOUT,
                    &raw.kernel_idle_timeout_seconds,
                    defaults.kernels.idle_timeout,
                )?,
            },
            spool: SpoolBounds {
                max_execution_bytes: non_negative_int(
                    MAX_SPOOL_EXECUTION_BYTES,
                    &raw.max_spool_execution_bytes,
                    defaults.spool.max_execution_bytes as usize,
                )? as u64,
                max_total_bytes: positive_int(
                    MAX_SPOOL_BYTES,
                    &raw.max_spool_bytes,
                    defaults.spool.max_total_bytes as usize,
                )? as u64,
                max_retained_bytes: positive_int(
                    MAX_RETAINED_OUTPUT_BYTES,
                    &raw.max_retained_output_bytes,
                    defaults.spool.max_retained_bytes as usize,
                )? as u64,
                max_server_retained_bytes: positive_int(
                    MAX_SERVER_RETAINED_OUTPUT_BYTES,
                    &raw.max_server_retained_output_bytes,
                    defaults.spool.max_server_retained_bytes as usize,
                )? as u64,
            },
            tools: ToolLimits {
                max_name_chars: positive_int(
                    MAX_TOOL_NAME_CHARS,
                    &raw.max_tool_name_chars,
                    defaults.tools.max_name_chars,
                )?,
                max_description_chars: positive_int(
                    MAX_TOOL_DESCRIPTION_CHARS,
                    &raw.max_tool_description_chars,
                    defaults.tools.max_description_chars,
                )?,
                max_tools: positive_int(
                    MAX_DYNAMIC_TOOLS,
                    &raw.max_dynamic_tools,
                    defaults.tools.max_tools,
                )?,
            },
            namespace: namespace(raw)?,
            python,
            environment,
            workspace_root: existing_directory(WORKSPACE_ROOT, &raw.workspace_root)?,
            toolsets: match &raw.toolsets {
                None => Toolsets::default(),
                Some(value) => Toolsets::parse(value).map_err(|problem| Error::Invalid {
                    env: TOOLSETS.env,
                    flag: TOOLSETS.flag,
                    problem,
                })?,
            },
            cache_dir: path(CACHE_DIR, &raw.cache_dir)?,
            log: match &raw.log {
                Some(value) if value.trim().is_empty() => {
                    return Err(Error::Empty {
                        env: LOG.env,
                        flag: LOG.flag,
                    })
                }
                Some(value) => value.trim().to_owned(),
                None => defaults.log,
            },
            transport: transport(&raw.transport)?,
            http: http(raw)?,
        })
    }
}

fn transport(raw: &Option<String>) -> Result<Transport, Error> {
    match raw.as_deref().map(str::trim) {
        None | Some("stdio") => Ok(Transport::Stdio),
        Some("http") => Ok(Transport::Http),
        Some(other) => Err(Error::Invalid {
            env: TRANSPORT.env,
            flag: TRANSPORT.flag,
            problem: format!("must be stdio or http, got {:?}", bounded(other)),
        }),
    }
}

fn http(raw: &RawConfig) -> Result<Http, Error> {
    let invalid = |setting: Setting, problem: String| Error::Invalid {
        env: setting.env,
        flag: setting.flag,
        problem,
    };
    let defaults = Http::default();
    let allow_remote = match raw.allow_remote.as_deref().map(str::trim) {
        None => false,
        Some("true" | "1" | "yes") => true,
        Some("false" | "0" | "no") => false,
        Some(other) => {
            return Err(invalid(
                ALLOW_REMOTE,
                format!("must be true or false, got {:?}", bounded(other)),
            ))
        }
    };
    let host = match raw.host.as_deref().map(str::trim) {
        None => defaults.host,
        Some("localhost") => defaults.host,
        Some(text) => text
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .map_err(|_| {
                invalid(
                    HOST,
                    format!(
                        "must be an IP address such as 127.0.0.1 or ::1, got {:?}",
                        bounded(text)
                    ),
                )
            })?,
    };
    if !host.is_loopback() && !allow_remote {
        return Err(invalid(
            HOST,
            format!(
                "{host} is not a loopback address; other machines could connect, so this needs --allow-remote ({}=true)",
                ALLOW_REMOTE.env
            ),
        ));
    }
    let port = match raw.port.as_deref().map(str::trim) {
        None => defaults.port,
        Some(text) => text.parse::<u16>().map_err(|_| {
            invalid(
                PORT,
                format!("must be a TCP port (0 to 65535), got {:?}", bounded(text)),
            )
        })?,
    };
    let token = match (&raw.http_token, &raw.http_token_file) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                HTTP_TOKEN,
                format!("set either it or {}, not both", HTTP_TOKEN_FILE.env),
            ))
        }
        (Some(text), None) => {
            TokenSource::Given(Token::parse(text).map_err(|problem| invalid(HTTP_TOKEN, problem))?)
        }
        (None, Some(file)) => match path(HTTP_TOKEN_FILE, &Some(file.clone()))? {
            Some(file) => TokenSource::File(file),
            None => TokenSource::Generate,
        },
        (None, None) => TokenSource::Generate,
    };
    let list = |text: &Option<String>| -> Vec<String> {
        text.iter()
            .flat_map(|text| text.split(','))
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let allowed_origins = match &raw.http_allowed_origins {
        None => defaults.allowed_origins,
        Some(_) => {
            let origins = list(&raw.http_allowed_origins);
            if let Some(bad) = origins
                .iter()
                .find(|origin| !(origin.contains("://") || origin.as_str() == "null"))
            {
                return Err(invalid(
                    HTTP_ALLOWED_ORIGINS,
                    format!(
                        "{:?} is not an origin like http://localhost:3000",
                        bounded(bad)
                    ),
                ));
            }
            origins
        }
    };
    let mut allowed_hosts = defaults.allowed_hosts;
    if !host.is_loopback() && !host.is_unspecified() {
        allowed_hosts.push(host.to_string());
    }
    allowed_hosts.extend(list(&raw.http_allowed_hosts));
    Ok(Http {
        host,
        port,
        token,
        allowed_origins,
        allowed_hosts,
        allow_remote,
    })
}

fn positive_int(setting: Setting, raw: &Option<String>, default: usize) -> Result<usize, Error> {
    let Some(value) = raw else { return Ok(default) };
    match value.trim().parse::<usize>() {
        Ok(parsed) if parsed > 0 => Ok(parsed),
        _ => Err(Error::NotPositiveInteger {
            env: setting.env,
            flag: setting.flag,
            value: bounded(value),
        }),
    }
}

/// Library paths, preloads and aliases: syntax only (the kernel reports what fails to import).
fn namespace(raw: &RawConfig) -> Result<Namespace, Error> {
    let invalid = |setting: Setting, problem: String| Error::Invalid {
        env: setting.env,
        flag: setting.flag,
        problem,
    };
    let mut result = Namespace::default();
    if let Some(paths) = &raw.library_paths {
        for path in paths
            .split(':')
            .map(str::trim)
            .filter(|path| !path.is_empty())
        {
            if !path.starts_with('/') {
                return Err(invalid(
                    LIBRARY_PATHS,
                    format!("{:?} is not an absolute path", bounded(path)),
                ));
            }
            result.library_paths.push(PathBuf::from(path));
        }
    }
    if let Some(modules) = &raw.preload_modules {
        for module in modules
            .split(',')
            .map(str::trim)
            .filter(|module| !module.is_empty())
        {
            if !is_module_name(module) {
                return Err(invalid(
                    PRELOAD_MODULES,
                    format!("{:?} is not a module name", bounded(module)),
                ));
            }
            result.preload_modules.push(module.to_owned());
        }
    }
    if let Some(aliases) = &raw.module_aliases {
        let parsed: serde_json::Value = serde_json::from_str(aliases)
            .map_err(|error| invalid(MODULE_ALIASES, format!("not JSON ({error})")))?;
        let serde_json::Value::Object(map) = parsed else {
            return Err(invalid(
                MODULE_ALIASES,
                "must be a JSON object like {\"numpy\": \"np\"}".to_owned(),
            ));
        };
        for (module, binding) in map {
            let Some(binding) = binding.as_str() else {
                return Err(invalid(
                    MODULE_ALIASES,
                    format!("the alias of {:?} must be a string", bounded(&module)),
                ));
            };
            if !is_module_name(&module) {
                return Err(invalid(
                    MODULE_ALIASES,
                    format!("{:?} is not a module name", bounded(&module)),
                ));
            }
            if !is_identifier(binding) || binding.starts_with('_') {
                return Err(invalid(
                    MODULE_ALIASES,
                    format!(
                        "{:?} is not a usable name (an identifier not starting with _)",
                        bounded(binding)
                    ),
                ));
            }
            result.module_aliases.insert(module, binding.to_owned());
        }
    }
    result.variables = environment::variables(raw)?;
    Ok(result)
}

fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|first| first == '_' || first.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

fn is_module_name(text: &str) -> bool {
    text.split('.').all(is_identifier)
}

/// For counts where zero means "off".
fn non_negative_int(
    setting: Setting,
    raw: &Option<String>,
    default: usize,
) -> Result<usize, Error> {
    let Some(value) = raw else { return Ok(default) };
    value
        .trim()
        .parse::<usize>()
        .map_err(|_| Error::NotNonNegativeInteger {
            env: setting.env,
            flag: setting.flag,
            value: bounded(value),
        })
}

/// Seconds may be fractional ("0.5"); they must be positive, finite and fit a `Duration`.
fn seconds(setting: Setting, raw: &Option<String>, default: Duration) -> Result<Duration, Error> {
    let Some(value) = raw else { return Ok(default) };
    let error = || Error::NotPositiveSeconds {
        env: setting.env,
        flag: setting.flag,
        value: bounded(value),
    };
    let parsed: f64 = value.trim().parse().map_err(|_| error())?;
    if !(parsed.is_finite() && parsed > 0.0) {
        return Err(error());
    }
    Duration::try_from_secs_f64(parsed).map_err(|_| error())
}

fn path(setting: Setting, raw: &Option<String>) -> Result<Option<PathBuf>, Error> {
    match raw {
        None => Ok(None),
        Some(value) if value.trim().is_empty() => Err(Error::Empty {
            env: setting.env,
            flag: setting.flag,
        }),
        Some(value) => Ok(Some(PathBuf::from(value))),
    }
}

/// A path that must name an existing directory (checked once, at start-up).
fn existing_directory(setting: Setting, raw: &Option<String>) -> Result<Option<PathBuf>, Error> {
    let found = path(setting, raw)?;
    match &found {
        Some(directory) if !directory.is_dir() => Err(Error::Invalid {
            env: setting.env,
            flag: setting.flag,
            problem: format!(
                "{:?} is not an existing directory",
                bounded(&directory.display().to_string())
            ),
        }),
        _ => Ok(found),
    }
}

/// Keeps a bad value short in the one-line error.
pub(crate) fn bounded(value: &str) -> String {
    const MAX: usize = 64;
    match value.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &value[..cut]),
        None => value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: RawConfig, expect: Result<(), &str>) -> Option<Config> {
        match (Config::from_raw(&raw), expect) {
            (Ok(config), Ok(())) => Some(config),
            (Err(error), Err(message)) => {
                assert_eq!(error.to_string(), message);
                assert!(!error.to_string().contains('\n'), "one line");
                None
            }
            (got, want) => panic!("got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn defaults_match_the_documented_table() {
        let config = check(RawConfig::default(), Ok(())).expect("valid");
        assert_eq!(config, Config::default());
        for setting in SETTINGS {
            assert!(setting.env.starts_with("IPYTHON_MCP_"), "{}", setting.env);
            assert_eq!(
                setting.env,
                format!("IPYTHON_MCP_{}", setting.name.to_uppercase())
            );
            assert_eq!(setting.flag, setting.name.replace('_', "-"));
        }
        assert_eq!(
            MAX_TEXT_CHARS.default,
            config.limits.max_text_chars.to_string()
        );
        assert_eq!(
            MAX_IMAGE_BYTES.default,
            config.limits.max_image_bytes.to_string()
        );
        assert_eq!(
            MAX_REPLY_BYTES.default,
            config.limits.max_reply_bytes.to_string()
        );
        assert_eq!(
            OPERATION_TIMEOUT.default,
            config.timeouts.operation.as_secs().to_string()
        );
    }

    /// The README's configuration table must list every setting with its flag and default.
    #[test]
    fn readme_documents_every_setting() {
        let readme = include_str!("../../../README.md");
        for setting in SETTINGS {
            let row = readme
                .lines()
                .find(|line| line.starts_with(&format!("| `{}` |", setting.env)))
                .unwrap_or_else(|| panic!("README has no row for {}", setting.env));
            assert!(row.contains(&format!("`--{}`", setting.flag)), "{row}");
            let default = setting.default.split(' ').next().unwrap_or_default();
            assert!(
                row.contains(default),
                "{row} shows the default {}",
                setting.default
            );
        }
    }

    #[test]
    fn toolsets_are_named_groups_and_unknown_ones_are_refused() {
        let parse = |value: &str| {
            Config::from_raw(&RawConfig {
                toolsets: Some(value.into()),
                ..Default::default()
            })
        };
        let only = parse(" namespace, dynamic ").expect("valid").toolsets;
        assert!(only.namespace && only.dynamic && !only.kernels && !only.notebooks);
        assert_eq!(parse("all").expect("valid").toolsets, Toolsets::default());
        for bad in ["", " , ", "namespace,bogus"] {
            let error = parse(bad).expect_err(bad).to_string();
            assert!(error.contains("IPYTHON_MCP_TOOLSETS"), "{error}");
        }
    }

    #[test]
    fn the_workspace_root_must_be_an_existing_directory() {
        let raw = |value: &str| RawConfig {
            workspace_root: Some(value.into()),
            ..Default::default()
        };
        let config = check(raw("/"), Ok(())).expect("valid");
        assert_eq!(config.workspace_root, Some(PathBuf::from("/")));
        check(
            raw("/no/such/dir"),
            Err("invalid configuration: IPYTHON_MCP_WORKSPACE_ROOT (--workspace-root): \"/no/such/dir\" is not an existing directory"),
        );
        check(
            raw(" "),
            Err("invalid configuration: IPYTHON_MCP_WORKSPACE_ROOT (--workspace-root) must not be empty"),
        );
    }

    #[test]
    fn numbers_must_be_positive() {
        let raw = |v: &str| RawConfig {
            max_text_chars: Some(v.into()),
            ..Default::default()
        };
        let msg = |v: &str| {
            format!("invalid configuration: IPYTHON_MCP_MAX_TEXT_CHARS (--max-text-chars) must be a positive integer, got {v:?}")
        };
        check(raw("0"), Err(&msg("0")));
        check(raw("-5"), Err(&msg("-5")));
        check(raw("abc"), Err(&msg("abc")));
        check(raw("1.5"), Err(&msg("1.5")));
        assert_eq!(
            check(raw(" 100 "), Ok(())).map(|c| c.limits.max_text_chars),
            Some(100)
        );
    }

    #[test]
    fn timeouts_must_be_positive_and_finite() {
        let raw = |v: &str| RawConfig {
            operation_timeout_seconds: Some(v.into()),
            ..Default::default()
        };
        for bad in ["0", "-1", "inf", "NaN", "1e400", "soon", ""] {
            let message = format!("invalid configuration: IPYTHON_MCP_OPERATION_TIMEOUT_SECONDS (--operation-timeout-seconds) must be a positive, finite number of seconds, got {bad:?}");
            check(raw(bad), Err(&message));
        }
        let config = check(raw("0.25"), Ok(())).expect("valid");
        assert_eq!(config.timeouts.operation, Duration::from_millis(250));
    }

    #[test]
    fn max_timeout_cannot_be_below_the_default_timeout() {
        let raw = RawConfig {
            operation_timeout_seconds: Some("60".into()),
            max_timeout_seconds: Some("10".into()),
            ..Default::default()
        };
        check(raw, Err("invalid configuration: IPYTHON_MCP_MAX_TIMEOUT_SECONDS (--max-timeout-seconds) is 10s, below IPYTHON_MCP_OPERATION_TIMEOUT_SECONDS (60s)"));
    }

    #[test]
    fn long_bad_values_are_shortened() {
        let raw = RawConfig {
            max_display_items: Some("x".repeat(10_000)),
            ..Default::default()
        };
        let error = Config::from_raw(&raw).expect_err("invalid");
        assert!(error.to_string().len() < 250);
    }

    #[test]
    fn namespace_settings_are_parsed_and_checked() {
        let raw = RawConfig {
            library_paths: Some("/opt/lib: /srv/agent-libs".into()),
            preload_modules: Some("math, json,my_lib.sub".into()),
            module_aliases: Some(r#"{"numpy": "np", "pandas": "pd"}"#.into()),
            ..Default::default()
        };
        let config = check(raw, Ok(())).expect("valid");
        assert_eq!(
            config.namespace.library_paths,
            [PathBuf::from("/opt/lib"), PathBuf::from("/srv/agent-libs")]
        );
        assert_eq!(
            config.namespace.preload_modules,
            ["math", "json", "my_lib.sub"]
        );
        assert_eq!(
            config
                .namespace
                .module_aliases
                .get("numpy")
                .map(String::as_str),
            Some("np")
        );
        let bad = |raw: RawConfig, message: &str| check(raw, Err(message));
        bad(
            RawConfig { library_paths: Some("relative/lib".into()), ..Default::default() },
            "invalid configuration: IPYTHON_MCP_LIBRARY_PATHS (--library-paths): \"relative/lib\" is not an absolute path",
        );
        bad(
            RawConfig { preload_modules: Some("os;rm".into()), ..Default::default() },
            "invalid configuration: IPYTHON_MCP_PRELOAD_MODULES (--preload-modules): \"os;rm\" is not a module name",
        );
        bad(
            RawConfig { module_aliases: Some("[1]".into()), ..Default::default() },
            "invalid configuration: IPYTHON_MCP_MODULE_ALIASES (--module-aliases): must be a JSON object like {\"numpy\": \"np\"}",
        );
        bad(
            RawConfig { module_aliases: Some(r#"{"numpy": "n p"}"#.into()), ..Default::default() },
            "invalid configuration: IPYTHON_MCP_MODULE_ALIASES (--module-aliases): \"n p\" is not a usable name (an identifier not starting with _)",
        );
    }

    #[test]
    fn spare_kernels_may_be_zero() {
        let raw = |v: &str| RawConfig {
            spare_kernels: Some(v.into()),
            ..Default::default()
        };
        assert_eq!(check(raw("0"), Ok(())).map(|c| c.spares), Some(Spares(0)));
        assert_eq!(check(raw("2"), Ok(())).map(|c| c.spares), Some(Spares(2)));
        check(raw("-1"), Err("invalid configuration: IPYTHON_MCP_SPARE_KERNELS (--spare-kernels) must be a whole number (0 or more), got \"-1\""));
    }

    #[test]
    fn http_settings_are_checked() {
        let config = check(
            RawConfig {
                transport: Some("http".into()),
                port: Some("0".into()),
                http_token: Some("0123456789abcdef".into()),
                ..Default::default()
            },
            Ok(()),
        )
        .expect("valid");
        assert_eq!(config.transport, Transport::Http);
        assert_eq!(config.http.port, 0);
        assert!(config.http.host.is_loopback());
        assert!(matches!(config.http.token, TokenSource::Given(_)));
        assert!(
            !format!("{config:?}").contains("0123456789abcdef"),
            "the token never reaches Debug"
        );
        let bad = |raw: RawConfig, message: &str| check(raw, Err(message));
        bad(
            RawConfig { transport: Some("sse".into()), ..Default::default() },
            "invalid configuration: IPYTHON_MCP_TRANSPORT (--transport): must be stdio or http, got \"sse\"",
        );
        bad(
            RawConfig { host: Some("0.0.0.0".into()), ..Default::default() },
            "invalid configuration: IPYTHON_MCP_HOST (--host): 0.0.0.0 is not a loopback address; other machines could connect, so this needs --allow-remote (IPYTHON_MCP_ALLOW_REMOTE=true)",
        );
        bad(
            RawConfig { port: Some("70000".into()), ..Default::default() },
            "invalid configuration: IPYTHON_MCP_PORT (--port): must be a TCP port (0 to 65535), got \"70000\"",
        );
        bad(
            RawConfig { http_token: Some("short".into()), ..Default::default() },
            "invalid configuration: IPYTHON_MCP_HTTP_TOKEN (--http-token): must be at least 16 characters (it has 5)",
        );
        bad(
            RawConfig { http_allowed_origins: Some("localhost:3000".into()), ..Default::default() },
            "invalid configuration: IPYTHON_MCP_HTTP_ALLOWED_ORIGINS (--http-allowed-origins): \"localhost:3000\" is not an origin like http://localhost:3000",
        );
        let remote = check(
            RawConfig {
                host: Some("192.0.2.7".into()),
                allow_remote: Some("true".into()),
                http_allowed_hosts: Some("box.example, box.example:8765".into()),
                ..Default::default()
            },
            Ok(()),
        )
        .expect("valid");
        assert_eq!(
            remote.http.allowed_hosts,
            [
                "localhost",
                "127.0.0.1",
                "::1",
                "192.0.2.7",
                "box.example",
                "box.example:8765"
            ]
        );
    }

    #[test]
    fn empty_paths_are_rejected() {
        check(
            RawConfig {
                python: Some("  ".into()),
                ..Default::default()
            },
            Err("invalid configuration: IPYTHON_MCP_PYTHON (--python) must not be empty"),
        );
    }
}
