//! The out-of-band view of a session (`runtime_status`). Never holds code, arguments, results
//! or namespace values.

use serde::Serialize;

use crate::session::error::SessionError;
use ipython_mcp_output::output::{Interruption, NamespaceOutcome};

/// Life stage of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    Starting,
    Ready,
    Busy,
    Recovering,
    Unavailable,
    Closed,
}

/// The kernel process behind a session.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct KernelDescription {
    /// The kernel's process id; `None` for a kernel on a Jupyter server (not our process).
    pub pid: Option<u32>,
    /// Where a remote kernel lives; `None` for a local one.
    pub remote: Option<RemoteDescription>,
    /// The interpreter (or, for a non-Python kernelspec, the program) running the kernel.
    pub python: String,
    /// The kernel's language (`python`, `bash`, …).
    pub language: String,
    /// The language version the kernel reports.
    pub python_version: String,
    pub ipykernel_version: String,
    pub implementation: String,
    pub spec: String,
    pub helper: bool,
    /// The kernel's working directory at start.
    pub working_dir: String,
    /// What confines a local kernel; `None` for a remote one (its server's business).
    pub sandbox: Option<SandboxStatus>,
}

/// A local kernel's OS sandbox, as it is in force.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SandboxStatus {
    /// `workspace-write`, `read-only` or `off`.
    pub mode: String,
    /// `on`, `off` or `allowlist`.
    pub network: String,
    /// The hosts an allowlist lets through (through the server's proxy).
    pub hosts: Vec<String>,
    /// True when the mode's rules are in force.
    pub enforced: bool,
    /// What enforces them (`landlock v7`, `seccomp`, `no_new_privs`, …).
    pub mechanisms: Vec<String>,
    /// Why the mode is not enforced, when it is not.
    pub why_not: Option<String>,
    /// What the rules cannot do here.
    pub limits: Vec<String>,
}

impl SandboxStatus {
    /// The status of a kernel with `report` (`None`: started without a sandbox).
    pub fn of(report: Option<&ipython_mcp_sandbox::Report>) -> SandboxStatus {
        match report {
            Some(report) => SandboxStatus {
                mode: report.mode.name().to_owned(),
                network: report.network.name().to_owned(),
                hosts: report.network.hosts().to_vec(),
                enforced: report.enforced,
                mechanisms: report.mechanisms.clone(),
                why_not: report.why_not.clone(),
                limits: report.limits.clone(),
            },
            None => SandboxStatus {
                mode: ipython_mcp_sandbox::Mode::Off.name().to_owned(),
                network: ipython_mcp_sandbox::Network::On.name().to_owned(),
                hosts: Vec::new(),
                enforced: false,
                mechanisms: Vec::new(),
                why_not: None,
                limits: Vec::new(),
            },
        }
    }
}

/// A kernel on a Jupyter server.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RemoteDescription {
    /// The server's base URL (never with credentials).
    pub server: String,
    /// The kernel's id on the server.
    pub kernel_id: String,
    /// True when the session attached to a kernel someone else started: stopping the session
    /// detaches and leaves it running.
    pub attached: bool,
}

/// The session's namespace checkpoint (local kernels with checkpoints on).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CheckpointStatus {
    /// Whether one has been taken yet.
    pub taken: bool,
    /// The execution it was taken after.
    pub execution_count: Option<u64>,
    /// Names kept (variables and imported modules).
    pub names: usize,
    /// Bytes of pickled values kept.
    pub bytes: u64,
    /// Names it could not keep, and why (the first ones; `lost_names` counts them all).
    pub lost: Vec<ipython_mcp_output::LostName>,
    pub lost_names: usize,
    /// Why the latest attempt failed, while it has (the previous checkpoint stays current).
    pub failure: Option<String>,
    /// Bytes the current checkpoint wrote: the values and chunks that changed, and its
    /// manifest.
    pub bytes_written: u64,
    /// Values the current checkpoint took from the one before without writing them again.
    pub values_reused: usize,
    /// How the writer found what changed; `None` before the first checkpoint.
    pub tracking: Option<CheckpointTracking>,
}

/// How a checkpoint's writer finds what changed since the previous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CheckpointTracking {
    /// Every large part of a value is hashed again (CRC-32 of each chunk) by the forked
    /// writer, off the kernel's thread; an unchanged chunk is not written.
    Hash,
}

/// The current kernel's memory: its process tree's resident memory (a cgroup's charge where
/// one enforces the limit), sampled a few times a second. Local kernels only.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MemoryStatus {
    pub current_bytes: u64,
    /// The most this kernel was seen to use since it started.
    pub peak_bytes: u64,
    /// The configured limit; `None`: no limit.
    pub limit_bytes: Option<u64>,
    /// What enforces the limit: `cgroup` or `watchdog`; `None` without a limit.
    pub enforcement: Option<MemoryEnforcement>,
}

/// What enforces a kernel's memory limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum MemoryEnforcement {
    /// The kernel's own cgroup v2 group (`memory.max`).
    Cgroup,
    /// The server's watchdog on the tree's resident memory.
    Watchdog,
}

impl From<ipython_mcp_jupyter::MemoryReading> for MemoryStatus {
    fn from(reading: ipython_mcp_jupyter::MemoryReading) -> MemoryStatus {
        MemoryStatus {
            current_bytes: reading.current_bytes,
            peak_bytes: reading.peak_bytes,
            limit_bytes: reading.limit_bytes,
            enforcement: reading.enforcer.map(|enforcer| match enforcer {
                ipython_mcp_jupyter::Enforcer::Cgroup => MemoryEnforcement::Cgroup,
                ipython_mcp_jupyter::Enforcer::Watchdog => MemoryEnforcement::Watchdog,
            }),
        }
    }
}

/// Where the kernel's Python comes from, and provisioning progress.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EnvironmentStatus {
    /// `probing`, `validating`, `locking`, `creating`, `installing`, `verifying`, `ready`, or
    /// `failed`.
    pub phase: String,
    pub elapsed_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// True when this start created the environment.
    pub created: bool,
    /// When `phase` is `failed`: which one (`validate`, `create`, `install`, `verify`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_phase: Option<String>,
}

/// One upstream MCP server of code mode, as `runtime_status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UpstreamStatus {
    /// Its name in the file (`mcp_servers.<name>`, made an identifier).
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// `not_started` (nothing used it yet), `connected` or `failed`.
    pub state: String,
    /// Why it failed, while it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its tools, once connected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<usize>,
}

/// What `runtime_status` returns for one session. The session keeps its error typed (`E` is
/// [`SessionError`]); the MCP crate words it for the agent (`RuntimeStatus<ErrorInfo>`, which
/// is what serializes) with [`RuntimeStatus::map_error`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "RuntimeStatus"))]
pub struct RuntimeStatus<E = SessionError> {
    pub kernel_id: String,
    pub state: SessionState,
    pub epoch: u64,
    pub queue_depth: usize,
    pub operation_active: bool,
    pub latest_interruption_kind: Option<Interruption>,
    pub latest_namespace_outcome: Option<NamespaceOutcome>,
    /// With `latest_namespace_outcome: restored`: what came back from the checkpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latest_restore: Option<ipython_mcp_output::Restore>,
    /// The namespace checkpoint a replacement would restore (local kernels, checkpoints on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointStatus>,
    pub startup_seconds: Option<f64>,
    /// Seconds the latest replacement took (a promoted spare takes milliseconds).
    pub replacement_startup_seconds: Option<f64>,
    pub kernel: Option<KernelDescription>,
    /// The kernel's memory; `None` for a remote kernel (its server bounds it) or before the
    /// first kernel is up.
    pub memory: Option<MemoryStatus>,
    /// Process ids of warm spare kernels ready to replace this one.
    pub spare_kernel_pids: Vec<u32>,
    pub environment: Option<EnvironmentStatus>,
    /// Why the session is unavailable (its start failed, or its actor panicked).
    pub error: Option<E>,
    /// Code mode's upstream MCP servers (the kernel's `mcp_servers`), shared by the sessions
    /// of a server or principal.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub upstream_servers: Vec<UpstreamStatus>,
}

impl<E> RuntimeStatus<E> {
    /// The same status with its error turned into `F`.
    pub fn map_error<F>(self, word: impl FnOnce(E) -> F) -> RuntimeStatus<F> {
        RuntimeStatus {
            kernel_id: self.kernel_id,
            state: self.state,
            epoch: self.epoch,
            queue_depth: self.queue_depth,
            operation_active: self.operation_active,
            latest_interruption_kind: self.latest_interruption_kind,
            latest_namespace_outcome: self.latest_namespace_outcome,
            latest_restore: self.latest_restore,
            checkpoint: self.checkpoint,
            startup_seconds: self.startup_seconds,
            replacement_startup_seconds: self.replacement_startup_seconds,
            kernel: self.kernel,
            memory: self.memory,
            spare_kernel_pids: self.spare_kernel_pids,
            environment: self.environment,
            error: self.error.map(word),
            upstream_servers: self.upstream_servers,
        }
    }
}

impl<E> RuntimeStatus<E> {
    /// A session's status before its first kernel is up.
    pub fn starting(kernel_id: &str) -> Self {
        RuntimeStatus {
            kernel_id: kernel_id.to_owned(),
            state: SessionState::Starting,
            epoch: 0,
            queue_depth: 0,
            operation_active: false,
            latest_interruption_kind: None,
            latest_namespace_outcome: None,
            latest_restore: None,
            checkpoint: None,
            startup_seconds: None,
            replacement_startup_seconds: None,
            kernel: None,
            memory: None,
            spare_kernel_pids: Vec::new(),
            environment: None,
            error: None,
            upstream_servers: Vec::new(),
        }
    }
}
