//! Command-line interface: every setting is a flag backed by an `IPYTHON_MCP_*` variable.
//! Values arrive as text and are validated by `ipython_mcp_config`, so a bad value is reported
//! in one line naming the setting.

use clap::{Parser, Subcommand};
use ipython_mcp_config::{Config, RawConfig};

#[derive(Debug, Parser)]
#[command(
    name = "ipython-mcp",
    version,
    about = "An MCP server that gives AI agents live, persistent Python in a real IPython kernel.",
    long_about = "An MCP server that gives AI agents live, persistent Python in a real IPython kernel.\n\nWithout a subcommand it serves MCP on stdio (point your MCP client at this binary), or with --transport http on http://127.0.0.1:8765/mcp behind a bearer token."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Characters of stdout and of stderr kept per execution [default: 8192]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_TEXT_CHARS",
        global = true,
        value_name = "N"
    )]
    max_text_chars: Option<String>,
    /// Characters of an error traceback returned [default: 4096]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_TRACEBACK_CHARS",
        global = true,
        value_name = "N"
    )]
    max_traceback_chars: Option<String>,
    /// Characters of a representation, signature or docstring in namespace results [default: 1024]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_REPR_CHARS",
        global = true,
        value_name = "N"
    )]
    max_repr_chars: Option<String>,
    /// Items kept per JSON array/object in displays and results [default: 100]
    #[arg(long, env = "IPYTHON_MCP_MAX_RESULTS", global = true, value_name = "N")]
    max_results: Option<String>,
    /// Rich display items kept per execution [default: 20]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_DISPLAY_ITEMS",
        global = true,
        value_name = "N"
    )]
    max_display_items: Option<String>,
    /// Nesting depth kept in JSON payloads [default: 6]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_JSON_DEPTH",
        global = true,
        value_name = "N"
    )]
    max_json_depth: Option<String>,
    /// Largest image (decoded bytes) returned as image content [default: 1048576]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_IMAGE_BYTES",
        global = true,
        value_name = "N"
    )]
    max_image_bytes: Option<String>,
    /// Bytes of display payloads in one reply; the rest stay in the spool [default: 8388608]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_REPLY_BYTES",
        global = true,
        value_name = "N"
    )]
    max_reply_bytes: Option<String>,
    /// Default deadline of one operation, from dispatch [default: 30]
    #[arg(
        long,
        env = "IPYTHON_MCP_OPERATION_TIMEOUT_SECONDS",
        global = true,
        value_name = "SECONDS"
    )]
    operation_timeout_seconds: Option<String>,
    /// Largest timeout_seconds an execute call may ask for [default: 3600]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_TIMEOUT_SECONDS",
        global = true,
        value_name = "SECONDS"
    )]
    max_timeout_seconds: Option<String>,
    /// How long an interrupted operation may take to stop before the kernel is replaced [default: 2]
    #[arg(
        long,
        env = "IPYTHON_MCP_INTERRUPTION_GRACE_SECONDS",
        global = true,
        value_name = "SECONDS"
    )]
    interruption_grace_seconds: Option<String>,
    /// Bound on starting one kernel [default: 10]
    #[arg(
        long,
        env = "IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS",
        global = true,
        value_name = "SECONDS"
    )]
    worker_startup_timeout_seconds: Option<String>,
    /// Operations that may wait for a busy kernel; more are rejected with runtime_busy [default: 32]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_PENDING_OPERATIONS",
        global = true,
        value_name = "N"
    )]
    max_pending_operations: Option<String>,
    /// How long an operation may wait in the queue before queue_timeout [default: 30]
    #[arg(
        long,
        env = "IPYTHON_MCP_QUEUE_WAIT_TIMEOUT_SECONDS",
        global = true,
        value_name = "SECONDS"
    )]
    queue_wait_timeout_seconds: Option<String>,
    /// Warm spare kernels kept ready so a replacement costs milliseconds; 0 disables [default: 1]
    #[arg(
        long,
        env = "IPYTHON_MCP_SPARE_KERNELS",
        global = true,
        value_name = "N"
    )]
    spare_kernels: Option<String>,
    /// Bound on creating a managed environment (default or named) [default: 600]
    #[arg(
        long,
        env = "IPYTHON_MCP_PROVISION_TIMEOUT_SECONDS",
        global = true,
        value_name = "SECONDS"
    )]
    provision_timeout_seconds: Option<String>,
    /// Kernel sessions that may run at once, default included (kernel_start refuses more) [default: 8]
    #[arg(long, env = "IPYTHON_MCP_MAX_KERNELS", global = true, value_name = "N")]
    max_kernels: Option<String>,
    /// Idle time after which a started (non-default) kernel session is stopped [default: 900]
    #[arg(
        long,
        env = "IPYTHON_MCP_KERNEL_IDLE_TIMEOUT_SECONDS",
        global = true,
        value_name = "SECONDS"
    )]
    kernel_idle_timeout_seconds: Option<String>,
    /// Bytes of each stream of each execution kept on disk for get_output paging (0 disables the spool) [default: 268435456]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_SPOOL_EXECUTION_BYTES",
        global = true,
        value_name = "BYTES"
    )]
    max_spool_execution_bytes: Option<String>,
    /// Bytes of spooled output kept per kernel session; the oldest executions' files are deleted first [default: 1073741824]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_SPOOL_BYTES",
        global = true,
        value_name = "BYTES"
    )]
    max_spool_bytes: Option<String>,
    /// Bytes of finished executions' output a kernel session keeps in memory for get_output (large displays live in the spool); the oldest are forgotten first [default: 67108864]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_RETAINED_OUTPUT_BYTES",
        global = true,
        value_name = "BYTES"
    )]
    max_retained_output_bytes: Option<String>,
    /// Bytes of finished executions' output all kernel sessions together keep in memory; the oldest are forgotten first [default: 268435456]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_SERVER_RETAINED_OUTPUT_BYTES",
        global = true,
        value_name = "BYTES"
    )]
    max_server_retained_output_bytes: Option<String>,
    /// Longest name of a dynamic tool [default: 64]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_TOOL_NAME_CHARS",
        global = true,
        value_name = "N"
    )]
    max_tool_name_chars: Option<String>,
    /// Longest description of a dynamic tool [default: 1024]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_TOOL_DESCRIPTION_CHARS",
        global = true,
        value_name = "N"
    )]
    max_tool_description_chars: Option<String>,
    /// Dynamic tools registered at once, across all kernels [default: 100]
    #[arg(
        long,
        env = "IPYTHON_MCP_MAX_DYNAMIC_TOOLS",
        global = true,
        value_name = "N"
    )]
    max_dynamic_tools: Option<String>,
    /// Python interpreter for the default kernel (must have ipykernel) [default: found, see README]
    #[arg(long, env = "IPYTHON_MCP_PYTHON", global = true, value_name = "PATH")]
    python: Option<String>,
    /// Trusted library directories (absolute, ':'-separated) prepended to the kernel's sys.path
    #[arg(
        long,
        env = "IPYTHON_MCP_LIBRARY_PATHS",
        global = true,
        value_name = "DIRS"
    )]
    library_paths: Option<String>,
    /// Comma-separated modules imported into every kernel at start
    #[arg(
        long,
        env = "IPYTHON_MCP_PRELOAD_MODULES",
        global = true,
        value_name = "MODULES"
    )]
    preload_modules: Option<String>,
    /// JSON object of module -> binding, e.g. {"numpy": "np"}
    #[arg(
        long,
        env = "IPYTHON_MCP_MODULE_ALIASES",
        global = true,
        value_name = "JSON"
    )]
    module_aliases: Option<String>,
    /// Absolute directory outside the project where named environments live
    #[arg(
        long,
        env = "IPYTHON_MCP_ENVIRONMENT_WORKSPACE",
        global = true,
        value_name = "DIR"
    )]
    environment_workspace: Option<String>,
    /// Named environment every kernel runs in, created in the workspace on first use
    #[arg(
        long,
        env = "IPYTHON_MCP_ACTIVE_ENVIRONMENT",
        global = true,
        value_name = "NAME"
    )]
    active_environment: Option<String>,
    /// JSON array of PEP 508 requirements for the active environment, e.g. ["six==1.16.0"]
    #[arg(
        long,
        env = "IPYTHON_MCP_ENVIRONMENT_REQUIREMENTS",
        global = true,
        value_name = "JSON",
        hide_env_values = true
    )]
    environment_requirements: Option<String>,
    /// JSON object of environment variables set in every kernel before preloads
    #[arg(
        long,
        env = "IPYTHON_MCP_ENVIRONMENT_VARIABLES",
        global = true,
        value_name = "JSON",
        hide_env_values = true
    )]
    environment_variables: Option<String>,
    /// Directory every notebook path is relative to [default: the working directory]
    #[arg(
        long,
        env = "IPYTHON_MCP_WORKSPACE_ROOT",
        global = true,
        value_name = "DIR"
    )]
    workspace_root: Option<String>,
    /// Groups of tools to offer besides the core ones: namespace, kernels, dynamic, notebooks (comma-separated) [default: all]
    #[arg(long, env = "IPYTHON_MCP_TOOLSETS", global = true, value_name = "SETS")]
    toolsets: Option<String>,
    /// Where the managed default environment lives [default: $XDG_CACHE_HOME/ipython-mcp or ~/.cache/ipython-mcp]
    #[arg(long, env = "IPYTHON_MCP_CACHE_DIR", global = true, value_name = "DIR")]
    cache_dir: Option<String>,
    /// Log filter for stderr, e.g. info or debug [default: info]
    #[arg(long, env = "IPYTHON_MCP_LOG", global = true, value_name = "FILTER")]
    log: Option<String>,
    /// How clients connect: stdio, or http (Streamable HTTP at /mcp, bearer token required) [default: stdio]
    #[arg(long, env = "IPYTHON_MCP_TRANSPORT", value_name = "stdio|http")]
    transport: Option<String>,
    /// Address the HTTP transport listens on; a non-loopback one also needs --allow-remote [default: 127.0.0.1]
    #[arg(long, env = "IPYTHON_MCP_HOST", value_name = "ADDRESS")]
    host: Option<String>,
    /// TCP port of the HTTP transport; 0 picks a free one (the URL is printed at start) [default: 8765]
    #[arg(long, env = "IPYTHON_MCP_PORT", value_name = "PORT")]
    port: Option<String>,
    /// Bearer token HTTP clients must send (at least 16 characters) [default: generated and printed to stderr]
    #[arg(
        long,
        env = "IPYTHON_MCP_HTTP_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    http_token: Option<String>,
    /// File whose first line is the bearer token
    #[arg(long, env = "IPYTHON_MCP_HTTP_TOKEN_FILE", value_name = "PATH")]
    http_token_file: Option<String>,
    /// Comma-separated browser origins allowed (scheme://host:port, :* for any port) [default: localhost, 127.0.0.1 and [::1], any port]
    #[arg(long, env = "IPYTHON_MCP_HTTP_ALLOWED_ORIGINS", value_name = "ORIGINS")]
    http_allowed_origins: Option<String>,
    /// Comma-separated extra Host header values accepted (loopback names and --host always are)
    #[arg(long, env = "IPYTHON_MCP_HTTP_ALLOWED_HOSTS", value_name = "HOSTS")]
    http_allowed_hosts: Option<String>,
    /// Allow a non-loopback --host, so other machines can connect (the token is still required)
    #[arg(
        long,
        env = "IPYTHON_MCP_ALLOW_REMOTE",
        value_name = "true|false",
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    allow_remote: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Find (or provision) Python, start a kernel, run a round trip, and print what was found
    /// and how long each step took.
    Doctor,
}

impl Cli {
    pub fn config(&self) -> Result<Config, ipython_mcp_config::Error> {
        Config::from_raw(&RawConfig {
            max_text_chars: self.max_text_chars.clone(),
            max_traceback_chars: self.max_traceback_chars.clone(),
            max_repr_chars: self.max_repr_chars.clone(),
            max_results: self.max_results.clone(),
            max_display_items: self.max_display_items.clone(),
            max_json_depth: self.max_json_depth.clone(),
            max_image_bytes: self.max_image_bytes.clone(),
            max_reply_bytes: self.max_reply_bytes.clone(),
            operation_timeout_seconds: self.operation_timeout_seconds.clone(),
            max_timeout_seconds: self.max_timeout_seconds.clone(),
            interruption_grace_seconds: self.interruption_grace_seconds.clone(),
            worker_startup_timeout_seconds: self.worker_startup_timeout_seconds.clone(),
            max_pending_operations: self.max_pending_operations.clone(),
            queue_wait_timeout_seconds: self.queue_wait_timeout_seconds.clone(),
            spare_kernels: self.spare_kernels.clone(),
            provision_timeout_seconds: self.provision_timeout_seconds.clone(),
            max_kernels: self.max_kernels.clone(),
            kernel_idle_timeout_seconds: self.kernel_idle_timeout_seconds.clone(),
            max_spool_execution_bytes: self.max_spool_execution_bytes.clone(),
            max_spool_bytes: self.max_spool_bytes.clone(),
            max_retained_output_bytes: self.max_retained_output_bytes.clone(),
            max_server_retained_output_bytes: self.max_server_retained_output_bytes.clone(),
            max_tool_name_chars: self.max_tool_name_chars.clone(),
            max_tool_description_chars: self.max_tool_description_chars.clone(),
            max_dynamic_tools: self.max_dynamic_tools.clone(),
            python: self.python.clone(),
            library_paths: self.library_paths.clone(),
            preload_modules: self.preload_modules.clone(),
            module_aliases: self.module_aliases.clone(),
            environment_workspace: self.environment_workspace.clone(),
            active_environment: self.active_environment.clone(),
            environment_requirements: self.environment_requirements.clone(),
            environment_variables: self.environment_variables.clone(),
            workspace_root: self.workspace_root.clone(),
            toolsets: self.toolsets.clone(),
            cache_dir: self.cache_dir.clone(),
            log: self.log.clone(),
            working_dir: std::env::current_dir().ok(),
            transport: self.transport.clone(),
            host: self.host.clone(),
            port: self.port.clone(),
            http_token: self.http_token.clone(),
            http_token_file: self.http_token_file.clone(),
            http_allowed_origins: self.http_allowed_origins.clone(),
            http_allowed_hosts: self.http_allowed_hosts.clone(),
            allow_remote: self.allow_remote.clone(),
        })
    }
}
