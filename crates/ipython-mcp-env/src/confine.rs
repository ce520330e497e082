//! Confining the children that run an interpreter or installer from a place a kernel can
//! write: a kernel may plant a `.pth` file in its own environment's site-packages (writable by
//! design, for `%pip`), rewrite a package, or replace `.venv/bin/python` with a script, and
//! any of those runs in the next probe or install. So each such child runs under the kernels'
//! sandbox, which the caller knows and this crate does not: it only asks a [`Confine`] to ready
//! the command, and keeps what it returns alive until the child is gone.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::process::Command;

/// What a confined child is for; the confinement decides what each may touch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Asking `python` what it is (it imports ipykernel from its environment), from
    /// `working_dir` when given: it runs as a kernel on that interpreter would.
    Probe {
        python: PathBuf,
        working_dir: Option<PathBuf>,
    },
    /// Creating an environment in the build directory `dir` and installing into it: it writes
    /// there (and in its own caches) and downloads from the package index.
    Install { dir: PathBuf },
}

/// Whatever must live while a confined child runs (a process-count group, say).
pub type Guard = Box<dyn std::any::Any + Send>;

/// Readies a command to run confined.
pub trait Confine: Send + Sync + 'static {
    /// Makes `command` start confined for `purpose`, or says why it cannot (then the child is
    /// not started: nothing a kernel could have written runs unconfined). Blocking: it may read
    /// the file system; [`Confinement`] calls it off the async threads.
    fn confine(
        &self,
        command: &mut std::process::Command,
        purpose: &Purpose,
    ) -> Result<Guard, String>;
}

/// The confinement every probe and installer gets: none unless the caller gives one (a server
/// whose kernels run unsandboxed has nothing to confine them to).
#[derive(Clone, Default)]
pub struct Confinement(Option<Arc<dyn Confine>>);

impl Confinement {
    /// Children confined by `confine`.
    pub fn new(confine: Arc<dyn Confine>) -> Confinement {
        Confinement(Some(confine))
    }

    /// Whether children are confined.
    pub fn is_confined(&self) -> bool {
        self.0.is_some()
    }

    /// `command`, readied to run confined for `purpose`, and what must live until its child
    /// has exited.
    pub(crate) async fn apply(
        &self,
        mut command: Command,
        purpose: Purpose,
    ) -> Result<(Command, Option<Guard>), String> {
        let Some(confine) = self.0.clone() else {
            return Ok((command, None));
        };
        tokio::task::spawn_blocking(move || {
            let guard = confine.confine(command.as_std_mut(), &purpose)?;
            Ok((command, Some(guard)))
        })
        .await
        .map_err(|error| format!("readying the sandbox failed: {error}"))?
    }
}

impl std::fmt::Debug for Confinement {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(if self.0.is_some() {
            "Confinement(confined)"
        } else {
            "Confinement(none)"
        })
    }
}
