//! A Jupyter-protocol kernel client: launch a kernel process, connect its five channels, route
//! replies and iopub messages to the request that caused them, interrupt, shut down, and notice
//! when the process dies.
//!
//! This crate knows nothing of MCP, queues or sessions. It is built on the runtimed crates
//! (`jupyter-zmq-client` for sockets and signing, `jupyter-protocol` for message types) and adds
//! what they leave to the caller: the launcher, the connect-with-retry loop, the router and the
//! child watch.
//!
//! Invariants:
//! - The connection file is private (0600) inside a private (0700) directory that also holds
//!   the IPC socket files; the directory is removed when the [`Kernel`] is dropped.
//! - The kernel runs in its own process group, dies with the server even when the server is
//!   SIGKILLed (Linux's parent-death signal; elsewhere, or after [`use_pipe_death_watch`], a
//!   watcher that kills the group when a pipe from the server closes), and never inherits our
//!   stdio (stdout is the MCP stream).
//! - Every shutdown is a `shutdown_request`, a bounded wait, then a kill of the process group.
//! - A request's receiver yields messages until the kernel exits; after that it is closed, so
//!   no caller waits on a dead kernel.
//! - A kernel's tasks (socket readers, the process's watchers, a remote kernel's socket task)
//!   are its own: aborted when it is dropped, joined ([`task::join`]) when it is killed or
//!   shut down.

mod error;
mod kernel;
pub mod kernelspec;
mod launch;
pub mod memory;
pub mod private_dir;
pub mod remote;
mod route;
pub mod task;

pub use error::Error;
pub use jupyter_protocol as protocol;
pub use kernel::Kernel;
pub use launch::{
    runs_ipykernel, use_pipe_death_watch, GroupWatch, InterruptMode, KernelExit, LaunchSpec,
    IPYKERNEL_OPTIONS,
};
pub use memory::{
    Enforcement, Enforcer, MemoryBound, MemoryPolicy, MemoryReading, Meter as MemoryMeter,
};
pub use route::{Channel, Routed};
