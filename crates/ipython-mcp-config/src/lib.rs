//! Validated configuration for ipython-mcp.
//!
//! Configuration arrives in two stages. The binary collects raw strings (from clap flags, each
//! backed by an `IPYTHON_MCP_*` environment variable) into a [`RawConfig`]; [`Config::from_raw`]
//! turns them into typed, checked values or one [`Error`] that names the setting. Nothing below
//! the binary sees clap, and nothing here touches tokio or the process environment, so every
//! rule is a plain unit test.
//!
//! The table of settings ([`SETTINGS`]) is the single place a setting is declared: the CLI is
//! built from it, [`RawConfig`] is keyed by it, the typed defaults are its default texts parsed
//! like given values, and the README table and the error messages name what it names.

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
    /// How the command line takes it.
    pub kind: Kind,
    /// What `--help` calls its value (`N`, `SECONDS`, `stdio|http`, …).
    pub value_name: &'static str,
    /// One line for `--help` and the README.
    pub help: &'static str,
}

/// How a setting appears on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `--flag VALUE`.
    Value,
    /// `--flag VALUE`, and `--help` never shows the variable's value (tokens, requirements).
    Secret,
    /// `--flag` alone means true; `--flag false` is allowed too.
    Switch,
}

macro_rules! settings {
    ($($ident:ident = ($name:literal, $env:literal, $flag:literal, $default:literal, $kind:ident, $value_name:literal, $help:literal);)*) => {
        /// Every setting, in documentation order.
        pub const SETTINGS: &[Setting] = &[$($ident),*];
        $(
            #[doc = $help]
            pub const $ident: Setting = Setting {
                name: $name,
                env: $env,
                flag: $flag,
                default: $default,
                kind: Kind::$kind,
                value_name: $value_name,
                help: $help,
            };
        )*
    };
}

settings! {
    MAX_TEXT_CHARS = ("max_text_chars", "IPYTHON_MCP_MAX_TEXT_CHARS", "max-text-chars", "8192", Value, "N",
        "Characters of stdout and of stderr kept per execution; the rest is counted, not returned");
    MAX_TRACEBACK_CHARS = ("max_traceback_chars", "IPYTHON_MCP_MAX_TRACEBACK_CHARS", "max-traceback-chars", "4096", Value, "N",
        "Characters of an error traceback returned (ANSI escapes stripped)");
    MAX_REPR_CHARS = ("max_repr_chars", "IPYTHON_MCP_MAX_REPR_CHARS", "max-repr-chars", "1024", Value, "N",
        "Characters of a representation, signature or docstring returned by list, search and inspect");
    MAX_RESULTS = ("max_results", "IPYTHON_MCP_MAX_RESULTS", "max-results", "100", Value, "N",
        "Items kept per JSON array or object in displays and results");
    MAX_DISPLAY_ITEMS = ("max_display_items", "IPYTHON_MCP_MAX_DISPLAY_ITEMS", "max-display-items", "20", Value, "N",
        "Rich display items kept per execution; later ones are counted in display_omitted");
    MAX_JSON_DEPTH = ("max_json_depth", "IPYTHON_MCP_MAX_JSON_DEPTH", "max-json-depth", "6", Value, "N",
        "Nesting depth kept in JSON payloads of displays and results");
    MAX_IMAGE_BYTES = ("max_image_bytes", "IPYTHON_MCP_MAX_IMAGE_BYTES", "max-image-bytes", "1048576", Value, "BYTES",
        "Largest image (decoded bytes) returned as MCP image content; larger PNG and JPEG images are downscaled to fit");
    MAX_REPLY_BYTES = ("max_reply_bytes", "IPYTHON_MCP_MAX_REPLY_BYTES", "max-reply-bytes", "8388608", Value, "BYTES",
        "Bytes of display payloads (images, HTML, JSON) in one reply; the rest stay in the spool, listed with their paths");
    OPERATION_TIMEOUT = ("operation_timeout_seconds", "IPYTHON_MCP_OPERATION_TIMEOUT_SECONDS", "operation-timeout-seconds", "30", Value, "SECONDS",
        "Default deadline of one operation, counted from dispatch (queue time excluded)");
    MAX_TIMEOUT = ("max_timeout_seconds", "IPYTHON_MCP_MAX_TIMEOUT_SECONDS", "max-timeout-seconds", "3600", Value, "SECONDS",
        "Largest timeout_seconds an execute call may ask for");
    INTERRUPTION_GRACE = ("interruption_grace_seconds", "IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS", "interruption-grace-seconds", "2", Value, "SECONDS",
        "How long an interrupted operation may take to stop before its kernel is replaced");
    WORKER_STARTUP_TIMEOUT = ("worker_startup_timeout_seconds", "IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS", "worker-startup-timeout-seconds", "10", Value, "SECONDS",
        "Bound on starting one kernel (process spawn to a ready helper)");
    MAX_PENDING_OPERATIONS = ("max_pending_operations", "IPYTHON_MCP_MAX_PENDING_OPERATIONS", "max-pending-operations", "32", Value, "N",
        "Operations that may wait for a busy kernel (the running one not counted); more get runtime_busy");
    QUEUE_WAIT_TIMEOUT = ("queue_wait_timeout_seconds", "IPYTHON_MCP_QUEUE_WAIT_TIMEOUT_SECONDS", "queue-wait-timeout-seconds", "30", Value, "SECONDS",
        "How long an operation may wait in the queue before it gets queue_timeout (nothing runs)");
    SPARE_KERNELS = ("spare_kernels", "IPYTHON_MCP_SPARE_KERNELS", "spare-kernels", "1", Value, "N",
        "Warm spare kernels kept ready per session so a replacement costs milliseconds (0 disables)");
    PROVISION_TIMEOUT = ("provision_timeout_seconds", "IPYTHON_MCP_PROVISION_TIMEOUT_SECONDS", "provision-timeout-seconds", "600", Value, "SECONDS",
        "Bound on creating a managed environment (the default one, or a named one with its requirements)");
    MAX_KERNELS = ("max_kernels", "IPYTHON_MCP_MAX_KERNELS", "max-kernels", "8", Value, "N",
        "Kernel sessions that may run at once, `default` included (kernel_start refuses more)");
    KERNEL_IDLE_TIMEOUT = ("kernel_idle_timeout_seconds", "IPYTHON_MCP_KERNEL_IDLE_TIMEOUT_SECONDS", "kernel-idle-timeout-seconds", "900", Value, "SECONDS",
        "Idle time after which a started (non-default) kernel session is stopped");
    MAX_SPOOL_EXECUTION_BYTES = ("max_spool_execution_bytes", "IPYTHON_MCP_MAX_SPOOL_EXECUTION_BYTES", "max-spool-execution-bytes", "268435456", Value, "BYTES",
        "Bytes of each stream of each execution kept on disk for get_output paging (0 disables the spool)");
    MAX_SPOOL_BYTES = ("max_spool_bytes", "IPYTHON_MCP_MAX_SPOOL_BYTES", "max-spool-bytes", "1073741824", Value, "BYTES",
        "Bytes of spooled output kept per kernel session; the oldest executions' files are deleted first");
    MAX_RETAINED_OUTPUT_BYTES = ("max_retained_output_bytes", "IPYTHON_MCP_MAX_RETAINED_OUTPUT_BYTES", "max-retained-output-bytes", "67108864", Value, "BYTES",
        "Bytes of finished executions' output a kernel session keeps in memory for get_output (large displays live in the spool); the oldest are forgotten first");
    MAX_SERVER_RETAINED_OUTPUT_BYTES = ("max_server_retained_output_bytes", "IPYTHON_MCP_MAX_SERVER_RETAINED_OUTPUT_BYTES", "max-server-retained-output-bytes", "268435456", Value, "BYTES",
        "Bytes of finished executions' output all kernel sessions together keep in memory; the oldest are forgotten first");
    MAX_TOOL_NAME_CHARS = ("max_tool_name_chars", "IPYTHON_MCP_MAX_TOOL_NAME_CHARS", "max-tool-name-chars", "64", Value, "N",
        "Longest name of a dynamic tool");
    MAX_TOOL_DESCRIPTION_CHARS = ("max_tool_description_chars", "IPYTHON_MCP_MAX_TOOL_DESCRIPTION_CHARS", "max-tool-description-chars", "1024", Value, "N",
        "Longest description of a dynamic tool");
    MAX_DYNAMIC_TOOLS = ("max_dynamic_tools", "IPYTHON_MCP_MAX_DYNAMIC_TOOLS", "max-dynamic-tools", "100", Value, "N",
        "Dynamic tools registered at once, across all kernels");
    PYTHON = ("python", "IPYTHON_MCP_PYTHON", "python", "found (see README)", Value, "PATH",
        "Python interpreter for the default kernel; it must have ipykernel");
    LIBRARY_PATHS = ("library_paths", "IPYTHON_MCP_LIBRARY_PATHS", "library-paths", "none", Value, "DIRS",
        "Trusted library directories (absolute, separated by ':') prepended to the kernel's sys.path");
    PRELOAD_MODULES = ("preload_modules", "IPYTHON_MCP_PRELOAD_MODULES", "preload-modules", "none", Value, "MODULES",
        "Comma-separated modules imported into every kernel at start (and after every reset or replacement)");
    MODULE_ALIASES = ("module_aliases", "IPYTHON_MCP_MODULE_ALIASES", "module-aliases", "none", Value, "JSON",
        "JSON object mapping modules to the names they are bound to, e.g. {\"numpy\": \"np\"}");
    ENVIRONMENT_WORKSPACE = ("environment_workspace", "IPYTHON_MCP_ENVIRONMENT_WORKSPACE", "environment-workspace", "none", Value, "DIR",
        "Absolute directory outside the project where named environments live (needs IPYTHON_MCP_ACTIVE_ENVIRONMENT)");
    ACTIVE_ENVIRONMENT = ("active_environment", "IPYTHON_MCP_ACTIVE_ENVIRONMENT", "active-environment", "none", Value, "NAME",
        "Named environment the kernels run in (letters, digits, '.', '_', '-'), created in the workspace on first use and reused after");
    ENVIRONMENT_REQUIREMENTS = ("environment_requirements", "IPYTHON_MCP_ENVIRONMENT_REQUIREMENTS", "environment-requirements", "none", Secret, "JSON",
        "JSON array of PEP 508 requirements installed into the active environment, e.g. [\"six==1.16.0\"]");
    ENVIRONMENT_VARIABLES = ("environment_variables", "IPYTHON_MCP_ENVIRONMENT_VARIABLES", "environment-variables", "none", Secret, "JSON",
        "JSON object of environment variables set in every kernel before preloads, e.g. {\"TASK_MODE\": \"offline\"}");
    TOOLSETS = ("toolsets", "IPYTHON_MCP_TOOLSETS", "toolsets", "all", Value, "SETS",
        "Comma-separated groups of tools to offer besides the core ones: namespace, kernels, dynamic, notebooks (or all)");
    WORKSPACE_ROOT = ("workspace_root", "IPYTHON_MCP_WORKSPACE_ROOT", "workspace-root", "the working directory", Value, "DIR",
        "Directory every notebook path is relative to; notebook tools never read or write outside it");
    CACHE_DIR = ("cache_dir", "IPYTHON_MCP_CACHE_DIR", "cache-dir", "$XDG_CACHE_HOME/ipython-mcp or ~/.cache/ipython-mcp", Value, "DIR",
        "Where the managed default environment lives");
    LOG = ("log", "IPYTHON_MCP_LOG", "log", "info", Value, "FILTER",
        "Log filter for stderr (tracing EnvFilter syntax, e.g. info or ipython_mcp_kernel=debug)");
    TRANSPORT = ("transport", "IPYTHON_MCP_TRANSPORT", "transport", "stdio", Value, "stdio|http",
        "How clients connect: stdio (the client starts the server) or http (Streamable HTTP at /mcp)");
    HOST = ("host", "IPYTHON_MCP_HOST", "host", "127.0.0.1", Value, "ADDRESS",
        "Address the HTTP transport listens on; a non-loopback address also needs --allow-remote");
    PORT = ("port", "IPYTHON_MCP_PORT", "port", "8765", Value, "PORT",
        "TCP port of the HTTP transport (0 picks a free port; the URL is printed at start)");
    HTTP_TOKEN = ("http_token", "IPYTHON_MCP_HTTP_TOKEN", "http-token", "generated", Secret, "TOKEN",
        "Bearer token every HTTP request must carry (at least 16 characters, no spaces); without it or a token file, one is generated and printed to stderr");
    HTTP_TOKEN_FILE = ("http_token_file", "IPYTHON_MCP_HTTP_TOKEN_FILE", "http-token-file", "none", Value, "PATH",
        "File whose first line is the bearer token (keeps it out of the environment and the process list)");
    HTTP_ALLOWED_ORIGINS = ("http_allowed_origins", "IPYTHON_MCP_HTTP_ALLOWED_ORIGINS", "http-allowed-origins", "loopback", Value, "ORIGINS",
        "Comma-separated browser origins allowed to call the HTTP transport (scheme://host:port, :* for any port); requests from other origins get 403; the default allows http(s)://localhost, 127.0.0.1 and [::1] on any port");
    HTTP_ALLOWED_HOSTS = ("http_allowed_hosts", "IPYTHON_MCP_HTTP_ALLOWED_HOSTS", "http-allowed-hosts", "loopback", Value, "HOSTS",
        "Comma-separated extra Host header values accepted (host or host:port), for a server reached by name; localhost, 127.0.0.1, ::1 and the --host address are always accepted");
    ALLOW_REMOTE = ("allow_remote", "IPYTHON_MCP_ALLOW_REMOTE", "allow-remote", "false", Switch, "true|false",
        "Allow --host to be a non-loopback address, so other machines can connect (the token is still required)");
}

/// Raw, unvalidated values as the user gave them (flag or environment variable), by setting.
///
/// A setting not given has no value: its default from [`SETTINGS`] applies.
#[derive(Debug, Clone, Default)]
pub struct RawConfig {
    values: std::collections::BTreeMap<&'static str, String>,
    /// Not a setting: the server's working directory (the project). When given, the
    /// environment workspace must lie outside it.
    pub working_dir: Option<PathBuf>,
}

impl RawConfig {
    /// Records the value given for `setting`.
    pub fn set(&mut self, setting: Setting, value: impl Into<String>) {
        self.values.insert(setting.name, value.into());
    }

    /// `self` with the value of `setting` given.
    pub fn with(mut self, setting: Setting, value: impl Into<String>) -> RawConfig {
        self.set(setting, value);
        self
    }

    /// The value given for `setting`, if any.
    pub fn get(&self, setting: Setting) -> Option<&str> {
        self.values.get(setting.name).map(String::as_str)
    }
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
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().limits
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
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().timeouts
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
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().spares
    }
}

impl Default for QueueLimits {
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().queue
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
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().kernels
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
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().spool
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
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().tools
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
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().http
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
    /// The defaults of [`SETTINGS`], parsed as if every setting had been given its default.
    fn default() -> Self {
        Config::from_raw(&RawConfig::default()).expect("the defaults in SETTINGS are valid")
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
        let limits = OutputLimits {
            max_text_chars: positive_int(raw, MAX_TEXT_CHARS)?,
            max_traceback_chars: positive_int(raw, MAX_TRACEBACK_CHARS)?,
            max_repr_chars: positive_int(raw, MAX_REPR_CHARS)?,
            max_results: positive_int(raw, MAX_RESULTS)?,
            max_display_items: positive_int(raw, MAX_DISPLAY_ITEMS)?,
            max_json_depth: positive_int(raw, MAX_JSON_DEPTH)?,
            max_image_bytes: positive_int(raw, MAX_IMAGE_BYTES)?,
            max_reply_bytes: positive_int(raw, MAX_REPLY_BYTES)?,
        };
        let timeouts = Timeouts {
            operation: seconds(raw, OPERATION_TIMEOUT)?,
            max_operation: seconds(raw, MAX_TIMEOUT)?,
            interruption_grace: seconds(raw, INTERRUPTION_GRACE)?,
            kernel_startup: seconds(raw, WORKER_STARTUP_TIMEOUT)?,
            provision: seconds(raw, PROVISION_TIMEOUT)?,
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
            max_pending: positive_int(raw, MAX_PENDING_OPERATIONS)?,
            queue_wait: seconds(raw, QUEUE_WAIT_TIMEOUT)?,
        };
        // With a named environment, --python chooses the interpreter that environment is made
        // from; the kernel runs in the environment.
        let mut python = path(raw, PYTHON)?;
        let mut environment = environment::named(raw)?;
        if let Some(named) = &mut environment {
            named.python = python.take();
        }
        Ok(Config {
            limits,
            timeouts,
            queue,
            spares: Spares(non_negative_int(raw, SPARE_KERNELS)?),
            kernels: KernelLimits {
                max_kernels: positive_int(raw, MAX_KERNELS)?,
                idle_timeout: seconds(raw, KERNEL_IDLE_TIMEOUT)?,
            },
            spool: SpoolBounds {
                max_execution_bytes: non_negative_int(raw, MAX_SPOOL_EXECUTION_BYTES)? as u64,
                max_total_bytes: positive_int(raw, MAX_SPOOL_BYTES)? as u64,
                max_retained_bytes: positive_int(raw, MAX_RETAINED_OUTPUT_BYTES)? as u64,
                max_server_retained_bytes: positive_int(raw, MAX_SERVER_RETAINED_OUTPUT_BYTES)?
                    as u64,
            },
            tools: ToolLimits {
                max_name_chars: positive_int(raw, MAX_TOOL_NAME_CHARS)?,
                max_description_chars: positive_int(raw, MAX_TOOL_DESCRIPTION_CHARS)?,
                max_tools: positive_int(raw, MAX_DYNAMIC_TOOLS)?,
            },
            namespace: namespace(raw)?,
            python,
            environment,
            workspace_root: existing_directory(raw, WORKSPACE_ROOT)?,
            toolsets: Toolsets::parse(raw.get(TOOLSETS).unwrap_or(TOOLSETS.default)).map_err(
                |problem| Error::Invalid {
                    env: TOOLSETS.env,
                    flag: TOOLSETS.flag,
                    problem,
                },
            )?,
            cache_dir: path(raw, CACHE_DIR)?,
            log: match raw.get(LOG).unwrap_or(LOG.default).trim() {
                "" => {
                    return Err(Error::Empty {
                        env: LOG.env,
                        flag: LOG.flag,
                    })
                }
                value => value.to_owned(),
            },
            transport: transport(raw)?,
            http: http(raw)?,
        })
    }
}

fn transport(raw: &RawConfig) -> Result<Transport, Error> {
    match raw.get(TRANSPORT).unwrap_or(TRANSPORT.default).trim() {
        "stdio" => Ok(Transport::Stdio),
        "http" => Ok(Transport::Http),
        other => Err(Error::Invalid {
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
    let allow_remote = match raw.get(ALLOW_REMOTE).unwrap_or(ALLOW_REMOTE.default).trim() {
        "true" | "1" | "yes" => true,
        "false" | "0" | "no" => false,
        other => {
            return Err(invalid(
                ALLOW_REMOTE,
                format!("must be true or false, got {:?}", bounded(other)),
            ))
        }
    };
    let host = match raw.get(HOST).unwrap_or(HOST.default).trim() {
        "localhost" => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        text => text
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
    let port = raw.get(PORT).unwrap_or(PORT.default).trim();
    let port = port.parse::<u16>().map_err(|_| {
        invalid(
            PORT,
            format!("must be a TCP port (0 to 65535), got {:?}", bounded(port)),
        )
    })?;
    let token = match (raw.get(HTTP_TOKEN), raw.get(HTTP_TOKEN_FILE)) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                HTTP_TOKEN,
                format!("set either it or {}, not both", HTTP_TOKEN_FILE.env),
            ))
        }
        (Some(text), None) => {
            TokenSource::Given(Token::parse(text).map_err(|problem| invalid(HTTP_TOKEN, problem))?)
        }
        (None, Some(_)) => match path(raw, HTTP_TOKEN_FILE)? {
            Some(file) => TokenSource::File(file),
            None => TokenSource::Generate,
        },
        (None, None) => TokenSource::Generate,
    };
    let list = |text: Option<&str>| -> Vec<String> {
        text.into_iter()
            .flat_map(|text| text.split(','))
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let allowed_origins = match raw.get(HTTP_ALLOWED_ORIGINS) {
        None => Http::LOOPBACK_ORIGINS.map(str::to_owned).to_vec(),
        Some(given) => {
            let origins = list(Some(given));
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
    let mut allowed_hosts = Http::LOOPBACK_HOSTS.map(str::to_owned).to_vec();
    if !host.is_loopback() && !host.is_unspecified() {
        allowed_hosts.push(host.to_string());
    }
    allowed_hosts.extend(list(raw.get(HTTP_ALLOWED_HOSTS)));
    Ok(Http {
        host,
        port,
        token,
        allowed_origins,
        allowed_hosts,
        allow_remote,
    })
}

/// The value given for `setting`, or its default from [`SETTINGS`].
fn given_or_default(raw: &RawConfig, setting: Setting) -> &str {
    raw.get(setting).unwrap_or(setting.default)
}

fn positive_int(raw: &RawConfig, setting: Setting) -> Result<usize, Error> {
    let value = given_or_default(raw, setting);
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
    if let Some(paths) = raw.get(LIBRARY_PATHS) {
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
    if let Some(modules) = raw.get(PRELOAD_MODULES) {
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
    if let Some(aliases) = raw.get(MODULE_ALIASES) {
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
fn non_negative_int(raw: &RawConfig, setting: Setting) -> Result<usize, Error> {
    let value = given_or_default(raw, setting);
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
fn seconds(raw: &RawConfig, setting: Setting) -> Result<Duration, Error> {
    let value = given_or_default(raw, setting);
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

/// A path setting; its table default is prose ("none", "found (see README)"), never a path.
fn path(raw: &RawConfig, setting: Setting) -> Result<Option<PathBuf>, Error> {
    match raw.get(setting) {
        None => Ok(None),
        Some(value) if value.trim().is_empty() => Err(Error::Empty {
            env: setting.env,
            flag: setting.flag,
        }),
        Some(value) => Ok(Some(PathBuf::from(value))),
    }
}

/// A path that must name an existing directory (checked once, at start-up).
fn existing_directory(raw: &RawConfig, setting: Setting) -> Result<Option<PathBuf>, Error> {
    let found = path(raw, setting)?;
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
    ipython_mcp_text::shorten(value, 64)
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
        let defaults = check(RawConfig::default(), Ok(())).expect("valid");
        // Defaults that describe what happens rather than give a value.
        let prose = [
            PYTHON.name,
            WORKSPACE_ROOT.name,
            CACHE_DIR.name,
            HTTP_TOKEN.name,
            HTTP_ALLOWED_ORIGINS.name,
            HTTP_ALLOWED_HOSTS.name,
        ];
        for setting in SETTINGS {
            assert!(setting.env.starts_with("IPYTHON_MCP_"), "{}", setting.env);
            assert_eq!(
                setting.env,
                format!("IPYTHON_MCP_{}", setting.name.to_uppercase())
            );
            assert_eq!(setting.flag, setting.name.replace('_', "-"));
            if setting.default == "none" || prose.contains(&setting.name) {
                continue;
            }
            // Giving the documented default is the same as giving nothing.
            let given = check(RawConfig::default().with(*setting, setting.default), Ok(()))
                .expect("the documented default is a valid value");
            assert_eq!(given, defaults, "{}", setting.env);
        }
        assert_eq!(defaults.limits.max_text_chars, 8192);
        assert_eq!(defaults.limits.max_reply_bytes, 8 * 1024 * 1024);
        assert_eq!(defaults.timeouts.operation, Duration::from_secs(30));
        assert_eq!(defaults.http.port, 8765);
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
        let parse = |value: &str| Config::from_raw(&RawConfig::default().with(TOOLSETS, value));
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
        let raw = |value: &str| RawConfig::default().with(WORKSPACE_ROOT, value);
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
        let raw = |v: &str| RawConfig::default().with(MAX_TEXT_CHARS, v);
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
        let raw = |v: &str| RawConfig::default().with(OPERATION_TIMEOUT, v);
        for bad in ["0", "-1", "inf", "NaN", "1e400", "soon", ""] {
            let message = format!("invalid configuration: IPYTHON_MCP_OPERATION_TIMEOUT_SECONDS (--operation-timeout-seconds) must be a positive, finite number of seconds, got {bad:?}");
            check(raw(bad), Err(&message));
        }
        let config = check(raw("0.25"), Ok(())).expect("valid");
        assert_eq!(config.timeouts.operation, Duration::from_millis(250));
    }

    #[test]
    fn max_timeout_cannot_be_below_the_default_timeout() {
        let raw = RawConfig::default()
            .with(OPERATION_TIMEOUT, "60")
            .with(MAX_TIMEOUT, "10");
        check(raw, Err("invalid configuration: IPYTHON_MCP_MAX_TIMEOUT_SECONDS (--max-timeout-seconds) is 10s, below IPYTHON_MCP_OPERATION_TIMEOUT_SECONDS (60s)"));
    }

    #[test]
    fn long_bad_values_are_shortened() {
        let raw = RawConfig::default().with(MAX_DISPLAY_ITEMS, "x".repeat(10_000));
        let error = Config::from_raw(&raw).expect_err("invalid");
        assert!(error.to_string().len() < 250);
    }

    #[test]
    fn namespace_settings_are_parsed_and_checked() {
        let raw = RawConfig::default()
            .with(LIBRARY_PATHS, "/opt/lib: /srv/agent-libs")
            .with(PRELOAD_MODULES, "math, json,my_lib.sub")
            .with(MODULE_ALIASES, r#"{"numpy": "np", "pandas": "pd"}"#);
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
            RawConfig::default().with(LIBRARY_PATHS, "relative/lib"),
            "invalid configuration: IPYTHON_MCP_LIBRARY_PATHS (--library-paths): \"relative/lib\" is not an absolute path",
        );
        bad(
            RawConfig::default().with(PRELOAD_MODULES, "os;rm"),
            "invalid configuration: IPYTHON_MCP_PRELOAD_MODULES (--preload-modules): \"os;rm\" is not a module name",
        );
        bad(
            RawConfig::default().with(MODULE_ALIASES, "[1]"),
            "invalid configuration: IPYTHON_MCP_MODULE_ALIASES (--module-aliases): must be a JSON object like {\"numpy\": \"np\"}",
        );
        bad(
            RawConfig::default().with(MODULE_ALIASES, r#"{"numpy": "n p"}"#),
            "invalid configuration: IPYTHON_MCP_MODULE_ALIASES (--module-aliases): \"n p\" is not a usable name (an identifier not starting with _)",
        );
    }

    #[test]
    fn spare_kernels_may_be_zero() {
        let raw = |v: &str| RawConfig::default().with(SPARE_KERNELS, v);
        assert_eq!(check(raw("0"), Ok(())).map(|c| c.spares), Some(Spares(0)));
        assert_eq!(check(raw("2"), Ok(())).map(|c| c.spares), Some(Spares(2)));
        check(raw("-1"), Err("invalid configuration: IPYTHON_MCP_SPARE_KERNELS (--spare-kernels) must be a whole number (0 or more), got \"-1\""));
    }

    #[test]
    fn http_settings_are_checked() {
        let config = check(
            RawConfig::default()
                .with(TRANSPORT, "http")
                .with(PORT, "0")
                .with(HTTP_TOKEN, "0123456789abcdef"),
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
            RawConfig::default().with(TRANSPORT, "sse"),
            "invalid configuration: IPYTHON_MCP_TRANSPORT (--transport): must be stdio or http, got \"sse\"",
        );
        bad(
            RawConfig::default().with(HOST, "0.0.0.0"),
            "invalid configuration: IPYTHON_MCP_HOST (--host): 0.0.0.0 is not a loopback address; other machines could connect, so this needs --allow-remote (IPYTHON_MCP_ALLOW_REMOTE=true)",
        );
        bad(
            RawConfig::default().with(PORT, "70000"),
            "invalid configuration: IPYTHON_MCP_PORT (--port): must be a TCP port (0 to 65535), got \"70000\"",
        );
        bad(
            RawConfig::default().with(HTTP_TOKEN, "short"),
            "invalid configuration: IPYTHON_MCP_HTTP_TOKEN (--http-token): must be at least 16 characters (it has 5)",
        );
        bad(
            RawConfig::default().with(HTTP_ALLOWED_ORIGINS, "localhost:3000"),
            "invalid configuration: IPYTHON_MCP_HTTP_ALLOWED_ORIGINS (--http-allowed-origins): \"localhost:3000\" is not an origin like http://localhost:3000",
        );
        let remote = check(
            RawConfig::default()
                .with(HOST, "192.0.2.7")
                .with(ALLOW_REMOTE, "true")
                .with(HTTP_ALLOWED_HOSTS, "box.example, box.example:8765"),
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
            RawConfig::default().with(PYTHON, "  "),
            Err("invalid configuration: IPYTHON_MCP_PYTHON (--python) must not be empty"),
        );
    }
}
