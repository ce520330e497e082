//! The validated configuration of one server process, assembled from every setting's parser.

use std::path::PathBuf;

use crate::environment::{self, NamedEnvironment};
use crate::error::Error;
use crate::jupyter::{self, JupyterServer};
use crate::limits::{
    Checkpoint, KernelLimits, KernelMemory, OutputLimits, QueueLimits, Sandbox, SandboxMode,
    SandboxNetwork, Spares, SpoolBounds, Timeouts, ToolLimits,
};
use crate::namespace::{namespace, Namespace};
use crate::parse::{
    byte_size, existing_directory, non_negative_int, path, percent, positive_int, seconds,
};
use crate::settings::*;
use crate::surface::{structured_output, StructuredOutput, Toolsets};
use crate::transport::{http, transport, Http, Transport};

/// The validated configuration of one server process.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub limits: OutputLimits,
    pub timeouts: Timeouts,
    pub queue: QueueLimits,
    pub spares: Spares,
    pub checkpoint: Checkpoint,
    pub kernels: KernelLimits,
    pub memory: KernelMemory,
    /// The kernels' OS sandbox.
    pub sandbox: Sandbox,
    pub spool: SpoolBounds,
    pub tools: ToolLimits,
    pub namespace: Namespace,
    /// Explicit interpreter for the default kernel (`--python`). `None` when a named
    /// environment is configured: `--python` is then the interpreter it is made from.
    pub python: Option<PathBuf>,
    /// The named environment the kernels run in, if configured.
    pub environment: Option<NamedEnvironment>,
    /// What the default session runs (`--kernel`): a local spec or a `jupyter:`/
    /// `jupyter-kernel:` one; `None`: the Python found as `python` says.
    pub kernel: Option<String>,
    /// The Jupyter server remote specs run on, if configured.
    pub jupyter: Option<JupyterServer>,
    /// Root of the notebook workspace; `None` means the working directory, resolved by the
    /// caller (it must exist: checked when the server starts).
    pub workspace_root: Option<PathBuf>,
    /// The groups of tools offered.
    pub toolsets: Toolsets,
    /// Which results carry `structuredContent`.
    pub structured_output: StructuredOutput,
    /// Cache directory override; `None` means the platform default, resolved by the caller.
    pub cache_dir: Option<PathBuf>,
    /// The `mcpServers` files of code mode's upstream servers, in order (a server named in a
    /// later one replaces the one of that name in an earlier one); empty: no code mode.
    pub upstream_servers: Vec<PathBuf>,
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

// The types' defaults are the defaults of SETTINGS parsed, so they are made here, by the
// parser, rather than beside the types.
impl Default for OutputLimits {
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().limits
    }
}

impl Default for Timeouts {
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().timeouts
    }
}

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

impl Default for KernelLimits {
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().kernels
    }
}

impl Default for SpoolBounds {
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().spool
    }
}

impl Default for ToolLimits {
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().tools
    }
}

impl Default for Http {
    /// The defaults of [`SETTINGS`].
    fn default() -> Self {
        Config::default().http
    }
}

impl Config {
    /// Checks every raw value and applies defaults.
    pub fn from_raw(raw: &RawConfig) -> Result<Config, Error> {
        // The settings are checked in this order, so that of several bad ones the same one is
        // reported every time.
        let limits = output_limits(raw)?;
        let timeouts = timeouts(raw)?;
        let queue = QueueLimits {
            max_pending: positive_int(raw, MAX_PENDING_OPERATIONS)?,
            queue_wait: seconds(raw, QUEUE_WAIT_TIMEOUT)?,
        };
        let (python, environment) = python_and_environment(raw)?;
        let jupyter = jupyter::jupyter(raw)?;
        let kernel = jupyter::kernel(raw, jupyter.as_ref())?;
        Ok(Config {
            limits,
            timeouts,
            queue,
            spares: Spares(non_negative_int(raw, SPARE_KERNELS)?),
            checkpoint: checkpoint(raw)?,
            kernels: KernelLimits {
                max_kernels: positive_int(raw, MAX_KERNELS)?,
                idle_timeout: seconds(raw, KERNEL_IDLE_TIMEOUT)?,
            },
            memory: kernel_memory(raw)?,
            sandbox: sandbox(raw)?,
            spool: spool_bounds(raw)?,
            tools: tool_limits(raw)?,
            namespace: namespace(raw)?,
            python,
            environment,
            kernel,
            jupyter,
            workspace_root: existing_directory(raw, WORKSPACE_ROOT)?,
            toolsets: Toolsets::parse(raw.get(TOOLSETS).unwrap_or(TOOLSETS.default)).map_err(
                |problem| Error::Invalid {
                    env: TOOLSETS.env,
                    flag: TOOLSETS.flag,
                    problem,
                },
            )?,
            structured_output: structured_output(raw)?,
            cache_dir: path(raw, CACHE_DIR)?,
            upstream_servers: upstream_files(raw)?,
            log: log_filter(raw)?,
            transport: transport(raw)?,
            http: http(raw)?,
        })
    }
}

/// Code mode's upstream files, separated by ':' as in `PATH` (empty entries skipped); a value
/// that names none is refused. Whether each file is there and valid is checked when the server
/// reads them, at start.
fn upstream_files(raw: &RawConfig) -> Result<Vec<PathBuf>, Error> {
    let Some(value) = path(raw, UPSTREAM_SERVERS)? else {
        return Ok(Vec::new());
    };
    let files: Vec<PathBuf> = std::env::split_paths(&value)
        .filter(|file| !file.as_os_str().is_empty())
        .collect();
    if files.is_empty() {
        return Err(Error::Empty {
            env: UPSTREAM_SERVERS.env,
            flag: UPSTREAM_SERVERS.flag,
        });
    }
    Ok(files)
}

/// The bounds on what one execution's reply may carry.
fn output_limits(raw: &RawConfig) -> Result<OutputLimits, Error> {
    Ok(OutputLimits {
        max_text_chars: positive_int(raw, MAX_TEXT_CHARS)?,
        text_head_percent: percent(raw, TEXT_HEAD_PERCENT)?,
        max_traceback_chars: positive_int(raw, MAX_TRACEBACK_CHARS)?,
        max_repr_chars: positive_int(raw, MAX_REPR_CHARS)?,
        max_results: positive_int(raw, MAX_RESULTS)?,
        max_display_items: positive_int(raw, MAX_DISPLAY_ITEMS)?,
        max_json_depth: positive_int(raw, MAX_JSON_DEPTH)?,
        max_image_bytes: positive_int(raw, MAX_IMAGE_BYTES)?,
        max_reply_bytes: positive_int(raw, MAX_REPLY_BYTES)?,
    })
}

/// The timeouts, checked to agree with each other: a call may not be given a default longer
/// than the most any call may ask for.
fn timeouts(raw: &RawConfig) -> Result<Timeouts, Error> {
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
    Ok(timeouts)
}

/// The explicit interpreter and the named environment. With a named environment, --python
/// chooses the interpreter that environment is made from; the kernel runs in the environment.
fn python_and_environment(
    raw: &RawConfig,
) -> Result<(Option<PathBuf>, Option<NamedEnvironment>), Error> {
    let mut python = path(raw, PYTHON)?;
    let mut environment = environment::named(raw)?;
    if let Some(named) = &mut environment {
        named.python = python.take();
    }
    Ok((python, environment))
}

impl Config {
    /// The files holding this server's secrets (tokens, principals): no sandboxed kernel
    /// reads them.
    pub fn secret_files(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        if let crate::transport::TokenSource::File(file)
        | crate::transport::TokenSource::Principals(file) = &self.http.token
        {
            files.push(file.clone());
        }
        if let Some(JupyterServer {
            token: crate::jupyter::JupyterToken::File(file),
            ..
        }) = &self.jupyter
        {
            files.push(file.clone());
        }
        // Code mode's upstream servers: their env and headers are credentials.
        files.extend(self.upstream_servers.iter().cloned());
        files
    }
}

/// The sandbox where nothing is set: enforced where the system can (Linux), else off.
const DEFAULT_SANDBOX: SandboxMode = if cfg!(target_os = "linux") {
    SandboxMode::WorkspaceWrite
} else {
    SandboxMode::Off
};

/// The kernels' sandbox: its mode (and whether it was asked for) and the extra paths.
fn sandbox(raw: &RawConfig) -> Result<Sandbox, Error> {
    let invalid = |setting: Setting, problem: String| Error::Invalid {
        env: setting.env,
        flag: setting.flag,
        problem,
    };
    let (mode, explicit) = match raw.get(SANDBOX).map(str::trim) {
        None => (DEFAULT_SANDBOX, false),
        Some("workspace-write") => (SandboxMode::WorkspaceWrite, true),
        Some("read-only") => (SandboxMode::ReadOnly, true),
        Some("off") => (SandboxMode::Off, true),
        Some(other) => {
            return Err(invalid(
                SANDBOX,
                format!(
                    "must be workspace-write, read-only or off, got {:?}",
                    crate::parse::bounded(other)
                ),
            ))
        }
    };
    let paths = |setting: Setting| -> Result<Vec<PathBuf>, Error> {
        let Some(text) = raw.get(setting) else {
            return Ok(Vec::new());
        };
        text.split(':')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                let path = PathBuf::from(entry);
                if path.is_absolute() {
                    Ok(path)
                } else {
                    Err(invalid(
                        setting,
                        format!(
                            "must be absolute paths separated by ':', got {:?}",
                            crate::parse::bounded(entry)
                        ),
                    ))
                }
            })
            .collect()
    };
    let network = sandbox_network(raw.get(SANDBOX_NETWORK).unwrap_or(SANDBOX_NETWORK.default))
        .map_err(|problem| invalid(SANDBOX_NETWORK, problem))?;
    if network.confines() && mode == SandboxMode::Off {
        return Err(invalid(
            SANDBOX_NETWORK,
            format!(
                "confining the network needs the sandbox: {} is off",
                SANDBOX.env
            ),
        ));
    }
    Ok(Sandbox {
        mode,
        network,
        max_processes: positive_int(raw, SANDBOX_MAX_PROCESSES)? as u64,
        namespaces: match raw
            .get(SANDBOX_NAMESPACES)
            .unwrap_or(SANDBOX_NAMESPACES.default)
            .trim()
        {
            "auto" => true,
            "off" => false,
            other => {
                return Err(invalid(
                    SANDBOX_NAMESPACES,
                    format!(
                        "must be auto or off, got {:?}",
                        crate::parse::bounded(other)
                    ),
                ))
            }
        },
        explicit,
        read_deny: paths(SANDBOX_READ_DENY)?,
        write: paths(SANDBOX_WRITE)?,
    })
}

/// `on`, `off`, or a comma-separated allowlist of host names, `*.domain`s and IP addresses,
/// each with an optional `:port` (see [`crate::AllowedHost`]), kept in their canonical spelling.
pub(crate) fn sandbox_network(text: &str) -> Result<SandboxNetwork, String> {
    match text.trim() {
        "on" => return Ok(SandboxNetwork::On),
        "off" => return Ok(SandboxNetwork::Off),
        _ => {}
    }
    let mut hosts = Vec::new();
    for host in text
        .split(',')
        .map(str::trim)
        .filter(|host| !host.is_empty())
    {
        let entry = crate::AllowedHost::parse(host)
            .map_err(|problem| format!("{problem}, got {:?}", crate::parse::bounded(host)))?;
        hosts.push(entry.to_string());
    }
    if hosts.is_empty() {
        return Err("must be on, off or comma-separated host names".to_owned());
    }
    Ok(SandboxNetwork::Allow(hosts))
}

/// Whether namespaces are checkpointed, and the bound on a session's checkpoint.
fn checkpoint(raw: &RawConfig) -> Result<Checkpoint, Error> {
    let enabled = match raw.get(CHECKPOINT).unwrap_or(CHECKPOINT.default).trim() {
        "on" => true,
        "off" => false,
        other => {
            return Err(Error::Invalid {
                env: CHECKPOINT.env,
                flag: CHECKPOINT.flag,
                problem: format!("must be on or off, got {:?}", crate::parse::bounded(other)),
            })
        }
    };
    Ok(Checkpoint {
        enabled,
        max_bytes: positive_int(raw, CHECKPOINT_MAX_BYTES)? as u64,
    })
}

/// The kernels' memory limit and how it is enforced (`watchdog`: by the watchdog alone).
fn kernel_memory(raw: &RawConfig) -> Result<KernelMemory, Error> {
    Ok(KernelMemory {
        limit_bytes: byte_size(raw, KERNEL_MEMORY_LIMIT, 128 << 20)?,
        watchdog_only: match raw
            .get(KERNEL_MEMORY_ENFORCEMENT)
            .unwrap_or(KERNEL_MEMORY_ENFORCEMENT.default)
            .trim()
        {
            "auto" => false,
            "watchdog" => true,
            other => {
                return Err(Error::Invalid {
                    env: KERNEL_MEMORY_ENFORCEMENT.env,
                    flag: KERNEL_MEMORY_ENFORCEMENT.flag,
                    problem: format!(
                        "must be auto or watchdog, got {:?}",
                        crate::parse::bounded(other)
                    ),
                })
            }
        },
    })
}

/// The bounds on spooled output: per stream per execution, per session, and what finished
/// output is kept in memory.
fn spool_bounds(raw: &RawConfig) -> Result<SpoolBounds, Error> {
    Ok(SpoolBounds {
        max_execution_bytes: non_negative_int(raw, MAX_SPOOL_EXECUTION_BYTES)? as u64,
        max_total_bytes: positive_int(raw, MAX_SPOOL_BYTES)? as u64,
        max_retained_bytes: positive_int(raw, MAX_RETAINED_OUTPUT_BYTES)? as u64,
        max_server_retained_bytes: positive_int(raw, MAX_SERVER_RETAINED_OUTPUT_BYTES)? as u64,
    })
}

/// What clients may make the server hold: dynamic tools, and MCP tasks to remember.
fn tool_limits(raw: &RawConfig) -> Result<ToolLimits, Error> {
    Ok(ToolLimits {
        max_name_chars: positive_int(raw, MAX_TOOL_NAME_CHARS)?,
        max_description_chars: positive_int(raw, MAX_TOOL_DESCRIPTION_CHARS)?,
        max_tools: positive_int(raw, MAX_DYNAMIC_TOOLS)?,
        max_tasks: positive_int(raw, MAX_TASKS)?,
    })
}

/// The log filter directive, which may not be empty.
fn log_filter(raw: &RawConfig) -> Result<String, Error> {
    match raw.get(LOG).unwrap_or(LOG.default).trim() {
        "" => Err(Error::Empty {
            env: LOG.env,
            flag: LOG.flag,
        }),
        value => Ok(value.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::transport::TokenSource;

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
    fn the_network_is_on_off_or_a_list_of_host_names() {
        assert_eq!(sandbox_network("on"), Ok(SandboxNetwork::On));
        assert_eq!(sandbox_network(" off "), Ok(SandboxNetwork::Off));
        assert_eq!(
            sandbox_network("PyPI.org, *.pythonhosted.org,"),
            Ok(SandboxNetwork::Allow(vec![
                "pypi.org".into(),
                "*.pythonhosted.org".into()
            ]))
        );
        assert_eq!(
            sandbox_network("pypi.org:8443,127.0.0.1:9000,[::1]"),
            Ok(SandboxNetwork::Allow(vec![
                "pypi.org:8443".into(),
                "127.0.0.1:9000".into(),
                "[::1]".into()
            ]))
        );
        let raw = RawConfig::default().with(SANDBOX_NETWORK, "pypi.org,pypi.org:22x");
        let error = Config::from_raw(&raw).expect_err("a bad port").to_string();
        assert!(
            error.contains("IPYTHON_MCP_SANDBOX_NETWORK")
                && error.contains("has a bad port")
                && error.contains("\"pypi.org:22x\""),
            "{error}"
        );
        for bad in [
            "",
            ",",
            "http://pypi.org",
            "pypi.org:0",
            "pypi.org:*",
            "a b",
            "*.",
            "-x.y z",
        ] {
            assert!(sandbox_network(bad).is_err(), "{bad:?}");
        }
        let raw = RawConfig::default()
            .with(SANDBOX, "off")
            .with(SANDBOX_NETWORK, "pypi.org");
        assert!(Config::from_raw(&raw).is_err(), "a list needs the sandbox");
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
            // Set at all, a mode is explicit (it fails closed), unlike the default.
            SANDBOX.name,
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

    /// The configuration table (docs/src/configuration.md) must list every setting with its flag
    /// and default, and every jupymcp flag with the settings it sets.
    #[test]
    fn readme_documents_every_setting() {
        let table = include_str!("../../../docs/src/configuration.md");
        for setting in SETTINGS {
            let row = table
                .lines()
                .find(|line| line.starts_with(&format!("| `{}` |", setting.env)))
                .unwrap_or_else(|| {
                    panic!("docs/src/configuration.md has no row for {}", setting.env)
                });
            assert!(row.contains(&format!("`--{}`", setting.flag)), "{row}");
            let default = setting.default.split(' ').next().unwrap_or_default();
            assert!(
                row.contains(default),
                "{row} shows the default {}",
                setting.default
            );
        }
        for compat in JUPYMCP_FLAGS {
            let row = table
                .lines()
                .find(|line| line.starts_with(&format!("| `--{}` |", compat.flag)))
                .unwrap_or_else(|| {
                    panic!("docs/src/configuration.md has no row for --{}", compat.flag)
                });
            for setting in compat.settings {
                assert!(row.contains(&format!("`--{}`", setting.flag)), "{row}");
            }
        }
    }

    #[test]
    fn the_kernel_memory_limit_takes_bytes_or_binary_units() {
        let limit = |value: &str| {
            Config::from_raw(&RawConfig::default().with(KERNEL_MEMORY_LIMIT, value))
                .map(|config| config.memory.limit_bytes)
                .map_err(|error| error.to_string())
        };
        assert_eq!(Config::default().memory, KernelMemory::default());
        assert_eq!(limit("512MiB"), Ok(Some(512 << 20)));
        assert_eq!(limit(" 4 GiB "), Ok(Some(4 << 30)));
        assert_eq!(limit("1.5gib"), Ok(Some(3 << 29)));
        assert_eq!(limit("1073741824"), Ok(Some(1 << 30)));
        assert_eq!(limit("none"), Ok(None));
        assert_eq!(
            limit("lots").unwrap_err(),
            "invalid configuration: IPYTHON_MCP_KERNEL_MEMORY_LIMIT (--kernel-memory-limit): must be a size in bytes, e.g. 536870912, 512MiB or 4GiB, got \"lots\""
        );
        assert!(limit("64MiB").unwrap_err().contains("at least 128 MiB"));
        assert!(limit("-1").is_err() && limit("4GB").is_err());
        let enforcement = |value: &str| {
            Config::from_raw(&RawConfig::default().with(KERNEL_MEMORY_ENFORCEMENT, value))
                .map(|config| config.memory.watchdog_only)
                .map_err(|error| error.to_string())
        };
        assert_eq!(enforcement("watchdog"), Ok(true));
        assert_eq!(enforcement("auto"), Ok(false));
        assert!(enforcement("cgroup").is_err());
    }

    #[test]
    fn structured_output_is_auto_unless_always_is_asked_for() {
        let parse =
            |value: &str| Config::from_raw(&RawConfig::default().with(STRUCTURED_OUTPUT, value));
        assert_eq!(Config::default().structured_output, StructuredOutput::Auto);
        assert_eq!(
            parse(" always ").expect("valid").structured_output,
            StructuredOutput::Always
        );
        let error = parse("never").expect_err("refused").to_string();
        assert_eq!(
            error,
            "invalid configuration: IPYTHON_MCP_STRUCTURED_OUTPUT (--structured-output): must be auto or always, got \"never\""
        );
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
    fn the_text_head_share_is_a_percentage() {
        let raw = |v: &str| RawConfig::default().with(TEXT_HEAD_PERCENT, v);
        for bad in ["101", "-1", "20%", "0.5", ""] {
            check(
                raw(bad),
                Err(&format!("invalid configuration: IPYTHON_MCP_TEXT_HEAD_PERCENT (--text-head-percent): must be a whole number from 0 to 100, got {bad:?}")),
            );
        }
        let head = |percent: &str, max: &str| {
            let raw = raw(percent).with(MAX_TEXT_CHARS, max);
            check(raw, Ok(())).map(|config| config.limits.text_head_chars())
        };
        assert_eq!(head("20", "8192"), Some(1638));
        assert_eq!(head("0", "8192"), Some(0));
        assert_eq!(head("100", "8192"), Some(8192));
        assert_eq!(head("33", "10"), Some(3));
        let huge = usize::MAX.to_string();
        assert_eq!(head("100", &huge), Some(usize::MAX));
        assert_eq!(OutputLimits::default().text_head_percent, 20);
    }

    #[test]
    fn several_upstream_files_are_separated_as_in_path_and_all_are_secret() {
        let raw = |v: &str| RawConfig::default().with(UPSTREAM_SERVERS, v);
        let config = check(raw("/etc/mcp.json::/home/me/.mcp.json"), Ok(())).expect("valid");
        let files = [
            PathBuf::from("/etc/mcp.json"),
            PathBuf::from("/home/me/.mcp.json"),
        ];
        assert_eq!(config.upstream_servers, files);
        assert!(files
            .iter()
            .all(|file| config.secret_files().contains(file)));
        let one = check(raw("mcp.json"), Ok(())).expect("valid");
        assert_eq!(one.upstream_servers, [PathBuf::from("mcp.json")]);
        let none = check(RawConfig::default(), Ok(())).expect("valid");
        assert!(none.upstream_servers.is_empty());
        for empty in ["", " ", ":", "::"] {
            check(raw(empty), Err("invalid configuration: IPYTHON_MCP_UPSTREAM_SERVERS (--upstream-servers) must not be empty"));
        }
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
        let jupymcp_spelling = RawConfig::default()
            .with(TRANSPORT, "streamable-http")
            .with(HTTP_TOKEN, "0123456789abcdef");
        assert_eq!(
            check(jupymcp_spelling, Ok(())).map(|config| config.transport),
            Some(Transport::Http)
        );
        assert!(config.http.host.is_loopback());
        assert!(matches!(config.http.token, TokenSource::Given(_)));
        assert!(
            !format!("{config:?}").contains("0123456789abcdef"),
            "the token never reaches Debug"
        );
        let bad = |raw: RawConfig, message: &str| check(raw, Err(message));
        bad(
            RawConfig::default().with(TRANSPORT, "sse"),
            "invalid configuration: IPYTHON_MCP_TRANSPORT (--transport): must be stdio or http (also spelled streamable-http), got \"sse\"",
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
