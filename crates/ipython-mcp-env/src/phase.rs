//! The phases a resolution reports while it works, so a caller can show what a slow
//! provisioning is doing.

use serde::Serialize;

/// Progress of [`Resolver::resolve`](crate::Resolver::resolve), for a status field while the
/// managed environment builds.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    /// Checking candidate interpreters.
    Probing,
    /// Checking the named environment's workspace and metadata.
    Validating,
    /// Waiting for the lock on the managed environment (another process may be building it).
    Locking,
    /// Creating the virtualenv (`tool` is `uv` or `venv`).
    Creating { tool: String },
    /// Installing ipykernel (`tool` is `uv` or `pip`).
    Installing { tool: String },
    /// Checking that the new environment imports ipykernel.
    Verifying,
    /// An interpreter was found; [`Resolver::resolve`](crate::Resolver::resolve) is about to
    /// return it.
    Ready,
}
