//! The table of settings: each declared once, with its variable, flag, default and help.

use std::path::PathBuf;

/// One documented setting: its name, environment variable, flag and default.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Setting key, used in error messages and docs.
    pub name: &'static str,
    /// Environment variable that sets it.
    pub env: &'static str,
    /// Long command-line flag that sets it (without the leading `--`).
    pub flag: &'static str,
    /// The default as text, exactly as docs/src/configuration.md shows it.
    pub default: &'static str,
    /// How the command line takes it.
    pub kind: Kind,
    /// What `--help` calls its value (`N`, `SECONDS`, `stdio|http`, …).
    pub value_name: &'static str,
    /// One line for `--help` and docs/src/configuration.md.
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
    TEXT_HEAD_PERCENT = ("text_head_percent", "IPYTHON_MCP_TEXT_HEAD_PERCENT", "text-head-percent", "20", Value, "PERCENT",
        "Share of max_text_chars that keeps the beginning of a longer stdout or stderr; the rest keeps its end");
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
    CHECKPOINT = ("checkpoint", "IPYTHON_MCP_CHECKPOINT", "checkpoint", "on", Value, "on|off",
        "on: after each execution a local kernel's namespace is checkpointed off the reply's path (values that pickle, imported modules), and a kernel that dies or is killed comes back with it (runtime.namespace restored); off: a replacement starts empty");
    CHECKPOINT_MAX_BYTES = ("checkpoint_max_bytes", "IPYTHON_MCP_CHECKPOINT_MAX_BYTES", "checkpoint-max-bytes", "1073741824", Value, "BYTES",
        "Bytes of pickled values a session's checkpoint keeps on disk; a value past it is not kept, and named as lost when the namespace is restored");
    PROVISION_TIMEOUT = ("provision_timeout_seconds", "IPYTHON_MCP_PROVISION_TIMEOUT_SECONDS", "provision-timeout-seconds", "600", Value, "SECONDS",
        "Bound on creating a managed environment (the default one, or a named one with its requirements)");
    MAX_KERNELS = ("max_kernels", "IPYTHON_MCP_MAX_KERNELS", "max-kernels", "8", Value, "N",
        "Kernel sessions that may run at once, `default` included (kernel_start refuses more)");
    KERNEL_IDLE_TIMEOUT = ("kernel_idle_timeout_seconds", "IPYTHON_MCP_KERNEL_IDLE_TIMEOUT_SECONDS", "kernel-idle-timeout-seconds", "900", Value, "SECONDS",
        "Idle time after which a started (non-default) kernel session is stopped");
    KERNEL_MEMORY_LIMIT = ("kernel_memory_limit", "IPYTHON_MCP_KERNEL_MEMORY_LIMIT", "kernel-memory-limit", "none", Value, "BYTES",
        "Memory a local kernel's processes may use together (bytes, or with KiB, MiB, GiB or TiB, e.g. 4GiB; at least 128MiB): past it the kernel is killed and replaced and the running call gets out_of_memory; remote kernels are bounded by their server");
    SANDBOX = ("sandbox", "IPYTHON_MCP_SANDBOX", "sandbox", "workspace-write on Linux, else off", Value, "workspace-write|read-only|off",
        "The OS sandbox of every local kernel and what it starts: workspace-write (reads all but secret locations, writes the workspace, the temp directory and the kernel's own directories), read-only (writes only the temp directory) or off; set explicitly, a system that cannot enforce it refuses to start kernels");
    SANDBOX_NETWORK = ("sandbox_network", "IPYTHON_MCP_SANDBOX_NETWORK", "sandbox-network", "on", Value, "on|off|HOSTS",
        "Where sandboxed kernels connect: on; off (no TCP connection and no datagram leaves the kernel; its channel to the server keeps working); or comma-separated host names (*.example.com for subdomains), IP addresses and host:port entries reached only through the server's HTTP proxy (ports 80 and 443 unless an entry names one); off and a list fail closed where they cannot be enforced");
    SANDBOX_MAX_PROCESSES = ("sandbox_max_processes", "IPYTHON_MCP_SANDBOX_MAX_PROCESSES", "sandbox-max-processes", "16384", Value, "N",
        "Most processes and threads a sandboxed kernel and what it starts may have at once (a pids cgroup of its own, where one can be made): a fork bomb stops there");
    SANDBOX_NAMESPACES = ("sandbox_namespaces", "IPYTHON_MCP_SANDBOX_NAMESPACES", "sandbox-namespaces", "auto", Value, "auto|off",
        "auto: on Linux each sandboxed kernel runs in user, mount, PID and IPC namespaces of its own (and a network namespace unless the network is on), with Landlock and seccomp inside, where the system allows unprivileged user namespaces; off: Landlock and seccomp alone");
    SANDBOX_READ_DENY = ("sandbox_read_deny", "IPYTHON_MCP_SANDBOX_READ_DENY", "sandbox-read-deny", "none", Value, "PATHS",
        "Colon-separated absolute paths a sandboxed kernel may not read, besides ~/.ssh, ~/.aws, ~/.gnupg and the other secret locations under HOME and the server's own secret files");
    SANDBOX_WRITE = ("sandbox_write", "IPYTHON_MCP_SANDBOX_WRITE", "sandbox-write", "none", Value, "PATHS",
        "Colon-separated absolute paths a kernel may write under workspace-write, besides the workspace, the temp directory and its own directories");
    KERNEL_MEMORY_ENFORCEMENT = ("kernel_memory_enforcement", "IPYTHON_MCP_KERNEL_MEMORY_ENFORCEMENT", "kernel-memory-enforcement", "auto", Value, "auto|watchdog",
        "How the kernel memory limit is enforced: auto (a cgroup v2 group per kernel where the server may make one, else the watchdog) or watchdog (the server samples the kernel tree's resident memory and kills it past the limit)");
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
    MAX_TASKS = ("max_tasks", "IPYTHON_MCP_MAX_TASKS", "max-tasks", "1024", Value, "N",
        "MCP tasks remembered for tasks/get and tasks/cancel, across all clients; the oldest are forgotten first");
    PYTHON = ("python", "IPYTHON_MCP_PYTHON", "python", "found (see README)", Value, "PATH",
        "Python interpreter for the default kernel; it must have ipykernel");
    KERNEL = ("kernel", "IPYTHON_MCP_KERNEL", "kernel", "none", Value, "SPEC",
        "What the default session runs: a kernelspec name, venv:/path, an interpreter path, jupyter:<name> (a new kernel on the Jupyter server) or jupyter-kernel:<id> (attach to a running one)");
    JUPYTER_URL = ("jupyter_url", "IPYTHON_MCP_JUPYTER_URL", "jupyter-url", "none", Value, "URL",
        "Base URL of a Jupyter Server, JupyterHub single-user server (https://hub/user/NAME/) or Kernel/Enterprise Gateway, for jupyter: and jupyter-kernel: specs");
    JUPYTER_TOKEN = ("jupyter_token", "IPYTHON_MCP_JUPYTER_TOKEN", "jupyter-token", "none", Secret, "TOKEN",
        "API token of the Jupyter server, sent only in the Authorization header");
    JUPYTER_TOKEN_FILE = ("jupyter_token_file", "IPYTHON_MCP_JUPYTER_TOKEN_FILE", "jupyter-token-file", "none", Value, "PATH",
        "File whose first line is the Jupyter server's token (keeps it out of the environment and the process list)");
    LIBRARY_PATHS = ("library_paths", "IPYTHON_MCP_LIBRARY_PATHS", "library-paths", "none", Value, "DIRS",
        "Trusted library directories (absolute, separated by ':') prepended to the kernel's sys.path");
    UPSTREAM_SERVERS = ("upstream_servers", "IPYTHON_MCP_UPSTREAM_SERVERS", "upstream-servers", "none", Value, "PATHS",
        "mcpServers files (Claude Desktop's format), separated by ':', a later file's server replacing an earlier one of the same name: those MCP servers become the kernels' mcp_servers module (code mode); their env and headers stay in the server");
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
    STRUCTURED_OUTPUT = ("structured_output", "IPYTHON_MCP_STRUCTURED_OUTPUT", "structured-output", "auto", Value, "auto|always",
        "auto: tools whose results can carry images (execute, get_output, notebook_execute, notebook_execute_cell) answer with text and images only, which every client shows its model; always: every tool declares an output schema and returns structuredContent, for programs that read typed results");
    WORKSPACE_ROOT = ("workspace_root", "IPYTHON_MCP_WORKSPACE_ROOT", "workspace-root", "the working directory", Value, "DIR",
        "Directory every notebook path is relative to; notebook tools never read or write outside it");
    CACHE_DIR = ("cache_dir", "IPYTHON_MCP_CACHE_DIR", "cache-dir", "$XDG_CACHE_HOME/ipython-mcp or ~/.cache/ipython-mcp", Value, "DIR",
        "Where the managed default environment lives");
    LOG = ("log", "IPYTHON_MCP_LOG", "log", "info", Value, "FILTER",
        "Log filter for stderr (tracing EnvFilter syntax, e.g. info or ipython_mcp_kernel=debug)");
    TRANSPORT = ("transport", "IPYTHON_MCP_TRANSPORT", "transport", "stdio", Value, "stdio|http",
        "How clients connect: stdio (the client starts the server) or http (Streamable HTTP at /mcp, bearer token required; also spelled streamable-http, as jupymcp does)");
    HOST = ("host", "IPYTHON_MCP_HOST", "host", "127.0.0.1", Value, "ADDRESS",
        "Address the HTTP transport listens on; a non-loopback address also needs --allow-remote");
    PORT = ("port", "IPYTHON_MCP_PORT", "port", "8765", Value, "PORT",
        "TCP port of the HTTP transport (0 picks a free port; the URL is printed at start)");
    HTTP_TOKEN = ("http_token", "IPYTHON_MCP_HTTP_TOKEN", "http-token", "generated", Secret, "TOKEN",
        "Bearer token every HTTP request must carry (at least 16 characters, no spaces); without it or a token file, one is generated and printed to stderr");
    HTTP_TOKEN_FILE = ("http_token_file", "IPYTHON_MCP_HTTP_TOKEN_FILE", "http-token-file", "none", Value, "PATH",
        "File whose first line is the bearer token (keeps it out of the environment and the process list)");
    HTTP_PRINCIPALS_FILE = ("http_principals_file", "IPYTHON_MCP_HTTP_PRINCIPALS_FILE", "http-principals-file", "none", Value, "PATH",
        "File of principals, one per line: NAME TOKEN (or NAME sha256:HEX) [max_kernels=N] [max_pending_operations=N]; each gets their own kernels, tools and notebooks; re-read on SIGHUP");
    HTTP_OAUTH_ISSUER = ("http_oauth_issuer", "IPYTHON_MCP_HTTP_OAUTH_ISSUER", "http-oauth-issuer", "none", Value, "URL",
        "OAuth 2.1 authorization server whose JWT access tokens are accepted (keys from its JWKS); each token's principal claim names a principal; needs --http-oauth-resource");
    HTTP_OAUTH_RESOURCE = ("http_oauth_resource", "IPYTHON_MCP_HTTP_OAUTH_RESOURCE", "http-oauth-resource", "none", Value, "URL",
        "This server's URL as clients reach it (e.g. https://gpu.example.org/mcp): access tokens must name it as their audience");
    HTTP_OAUTH_PRINCIPAL_CLAIM = ("http_oauth_principal_claim", "IPYTHON_MCP_HTTP_OAUTH_PRINCIPAL_CLAIM", "http-oauth-principal-claim", "sub", Value, "CLAIM",
        "The access token claim that names the principal (letters, digits, _ - . @)");
    HTTP_OAUTH_MAX_PRINCIPALS = ("http_oauth_max_principals", "IPYTHON_MCP_HTTP_OAUTH_MAX_PRINCIPALS", "http-oauth-max-principals", "64", Value, "N",
        "Access-token principals (not in the principals file) served at once; the next is refused (403) until one has been idle past the kernel idle timeout, which gives their kernels back");
    HTTP_ALLOWED_ORIGINS = ("http_allowed_origins", "IPYTHON_MCP_HTTP_ALLOWED_ORIGINS", "http-allowed-origins", "loopback", Value, "ORIGINS",
        "Comma-separated browser origins allowed to call the HTTP transport (scheme://host:port, :* for any port); requests from other origins get 403; the default allows http(s)://localhost, 127.0.0.1 and [::1] on any port");
    HTTP_ALLOWED_HOSTS = ("http_allowed_hosts", "IPYTHON_MCP_HTTP_ALLOWED_HOSTS", "http-allowed-hosts", "loopback", Value, "HOSTS",
        "Comma-separated extra Host header values accepted (host or host:port), for a server reached by name; localhost, 127.0.0.1, ::1 and the --host address are always accepted");
    ALLOW_REMOTE = ("allow_remote", "IPYTHON_MCP_ALLOW_REMOTE", "allow-remote", "false", Switch, "true|false",
        "Allow --host to be a non-loopback address, so other machines can connect (the token is still required)");
}

/// A flag of jupymcp's command line that sets some of our settings, so a jupymcp user can
/// swap the command in a client's configuration and keep the flags. Not a setting of its own
/// (no variable): a setting's own flag or variable, when given, wins over it.
#[derive(Debug, Clone, Copy)]
pub struct CompatFlag {
    /// Long flag (without the leading `--`).
    pub flag: &'static str,
    /// What `--help` calls its value.
    pub value_name: &'static str,
    /// The settings it sets, each to the value given.
    pub settings: &'static [Setting],
    /// One line for `--help` and docs/src/configuration.md: what it maps to and how its meaning differs.
    pub help: &'static str,
}

/// jupymcp's flags that are not already ours under the same name (`--max-kernels`,
/// `--workspace-root` and `--transport` are; `--transport` also takes jupymcp's
/// `streamable-http`).
pub const JUPYMCP_FLAGS: &[CompatFlag] = &[
    CompatFlag {
        flag: "default-timeout",
        value_name: "SECONDS",
        settings: &[OPERATION_TIMEOUT],
        help: "jupymcp's flag for --operation-timeout-seconds (jupymcp's default is 120 s, ours 30 s); the deadline counts from dispatch, and a cell that outlives it is interrupted, then its kernel replaced",
    },
    CompatFlag {
        flag: "max-timeout",
        value_name: "SECONDS",
        settings: &[MAX_TIMEOUT],
        help: "jupymcp's flag for --max-timeout-seconds (same meaning: the largest timeout a call may ask for)",
    },
    CompatFlag {
        flag: "max-output-bytes",
        value_name: "BYTES",
        settings: &[MAX_TEXT_CHARS, MAX_REPLY_BYTES],
        help: "jupymcp's cap on one execution's captured output; here it sets --max-text-chars (kept of each of stdout and stderr, counted in characters) and --max-reply-bytes (display payloads per reply); what is cut is counted and stays readable with get_output",
    },
    CompatFlag {
        flag: "max-output-blocks",
        value_name: "N",
        settings: &[MAX_DISPLAY_ITEMS],
        help: "jupymcp's cap on captured output blocks; here it sets --max-display-items (rich display items per execution; stdout and stderr are bounded by characters, not blocks)",
    },
    CompatFlag {
        flag: "idle-timeout",
        value_name: "SECONDS",
        settings: &[KERNEL_IDLE_TIMEOUT],
        help: "jupymcp's flag for --kernel-idle-timeout-seconds: a started kernel session (a notebook's included) idle this long is stopped; the default session never is",
    },
];

/// Raw, unvalidated values as the user gave them (flag or environment variable), by setting.
///
/// A setting not given has no value: its default from [`SETTINGS`] applies.
#[derive(Debug, Clone, Default)]
pub struct RawConfig {
    pub(crate) values: std::collections::BTreeMap<&'static str, String>,
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
