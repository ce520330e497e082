//! The numeric bounds of a server: output, deadlines, queues, kernels, the spool and dynamic
//! tools. Their defaults are [`SETTINGS`](crate::SETTINGS)' default texts parsed, so
//! `Default` is implemented beside the parser, in `config.rs`.

use std::time::Duration;

/// Bounds on everything that crosses from a kernel to an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    pub max_text_chars: usize,
    /// Of `max_text_chars`, the percentage that keeps the beginning of a longer stream.
    pub text_head_percent: usize,
    pub max_traceback_chars: usize,
    pub max_repr_chars: usize,
    pub max_results: usize,
    pub max_display_items: usize,
    pub max_json_depth: usize,
    pub max_image_bytes: usize,
    pub max_reply_bytes: usize,
}

impl OutputLimits {
    /// Characters of a longer stdout or stderr kept from its beginning; the rest of
    /// `max_text_chars` keeps its end.
    pub fn text_head_chars(&self) -> usize {
        self.head_chars(self.max_text_chars)
    }

    /// Of a `budget` of characters for a longer text, how many keep its beginning.
    pub fn head_chars(&self, budget: usize) -> usize {
        budget / 100 * self.text_head_percent + budget % 100 * self.text_head_percent / 100
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

/// Admission limits of each session's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    pub max_pending: usize,
    pub queue_wait: Duration,
}

/// Checkpoints of a local kernel's namespace, restored into a replacement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    pub enabled: bool,
    /// Bytes of pickled values a session's checkpoint keeps.
    pub max_bytes: u64,
}

/// How many warm spare kernels a session keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spares(pub usize);

/// Limits of the kernels toolset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelLimits {
    /// Sessions at once, `default` included.
    pub max_kernels: usize,
    /// Idle time after which a started (non-default) session is stopped.
    pub idle_timeout: Duration,
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

/// What clients may make the server hold: dynamic tools, and MCP tasks to remember.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    pub max_name_chars: usize,
    pub max_description_chars: usize,
    pub max_tools: usize,
    /// MCP tasks remembered at once (the oldest forgotten first).
    pub max_tasks: usize,
}

/// The memory limit of each local kernel's process tree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelMemory {
    /// Bytes; `None`: no limit.
    pub limit_bytes: Option<u64>,
    /// Enforce it with the watchdog even where a cgroup could be made.
    pub watchdog_only: bool,
}

/// How much a local kernel may do (see the sandbox crate for what enforces it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    WorkspaceWrite,
    ReadOnly,
    Off,
}

/// Where sandboxed kernels may connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxNetwork {
    On,
    Off,
    /// Only these host names (`*.example.com` for its subdomains), through the server's proxy.
    Allow(Vec<String>),
}

impl SandboxNetwork {
    /// Whether it confines the kernels at all (and so needs the sandbox).
    pub fn confines(&self) -> bool {
        !matches!(self, SandboxNetwork::On)
    }
}

/// The kernels' OS sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub mode: SandboxMode,
    /// Where kernels may connect.
    pub network: SandboxNetwork,
    /// Most tasks a kernel's tree may have at once.
    pub max_processes: u64,
    /// Whether kernels run in namespaces of their own where the system allows them.
    pub namespaces: bool,
    /// True when the mode was set, not defaulted: a system that cannot enforce it then
    /// refuses to start kernels (the default runs unsandboxed there and says so).
    pub explicit: bool,
    /// Denied to reads besides the defaults.
    pub read_deny: Vec<std::path::PathBuf>,
    /// Writable besides the defaults.
    pub write: Vec<std::path::PathBuf>,
}
