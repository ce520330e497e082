//! The remote launcher: kernels on a Jupyter server. A `jupyter:<name>` session starts its
//! own kernels there (and deletes them); a `jupyter-kernel:<id>` session attaches to a kernel
//! someone else runs (and leaves it running). The helper is installed through the kernel's
//! own channels, as locally.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use ipython_mcp_jupyter::remote::{RemoteKernel as Connection, Server};
use tokio::time::Instant;

use super::error::StartFailure;
use super::helper;
use super::transport::{Launcher, Running};
use super::{RemoteKernel, Shared};
use crate::status::{KernelDescription, RemoteDescription};

/// How many cells a kernel we started on a Jupyter server keeps before writing its IPython
/// history (it also writes when it exits). Locally the launch puts history in memory; a
/// server's kernelspec decides its kernels' options, so the helper raises the batch instead.
const HISTORY_BATCH_CELLS: u64 = 1000;

pub(super) struct Remote {
    shared: Arc<Shared>,
    server: Server,
    kernel: RemoteKernel,
}

impl Remote {
    pub(super) fn new(shared: Arc<Shared>, server: Server, kernel: RemoteKernel) -> Remote {
        Remote {
            shared,
            server,
            kernel,
        }
    }

    /// Checks that the server answers, accepts the token, and has what the session names.
    async fn provision(&self) -> Result<(), StartFailure> {
        let checked = match &self.kernel {
            RemoteKernel::Start { name } => match self.server.kernelspecs().await {
                Ok(specs) if specs.iter().any(|spec| &spec.name == name) => Ok(()),
                Ok(specs) => Err(StartFailure::NoSuchKernelspec {
                    server: self.server.url().to_string(),
                    name: name.clone(),
                    known: specs.into_iter().map(|spec| spec.name).collect(),
                }),
                Err(error) => Err(StartFailure::server(&error)),
            },
            RemoteKernel::Attach { id } => self
                .server
                .kernel(id)
                .await
                .map(drop)
                .map_err(|error| StartFailure::server(&error)),
            RemoteKernel::Foreign { id } => Err(not_found(id)),
        };
        if let Err(failure) = &checked {
            let shown = super::shown(&self.shared.options, failure.clone()).to_string();
            tracing::error!(error = shown, "remote kernel unavailable");
        }
        checked
    }
}

impl Launcher for Remote {
    fn provision(&self) -> BoxFuture<'_, Result<(), StartFailure>> {
        Box::pin(Remote::provision(self))
    }

    fn launch(&self) -> BoxFuture<'static, Result<Running, StartFailure>> {
        let shared = Arc::clone(&self.shared);
        let server = self.server.clone();
        let kernel = self.kernel.clone();
        Box::pin(async move { prepare(shared, server, kernel).await })
    }

    fn cancellable(&self) -> bool {
        false
    }
}

/// Deletes a kernel we started unless `defuse` is called: a launch abandoned half-way (its
/// future dropped at shutdown, or failed after the start) must not leave it on the server.
struct Started {
    server: Server,
    id: Option<String>,
}

impl Started {
    fn defuse(mut self) {
        self.id = None;
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let server = self.server.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = server.delete_kernel(&id).await;
                });
            }
        }
    }
}

async fn prepare(
    shared: Arc<Shared>,
    server: Server,
    kernel: RemoteKernel,
) -> Result<Running, StartFailure> {
    let options = &shared.options;
    let startup = options.timeouts.kernel_startup;
    let started = Instant::now();
    let (connection, guard, spec) = connect(&shared, &server, &kernel, started).await?;
    // What is left of the start bound, for each step after the connection.
    let remaining = || {
        startup
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(1))
    };
    let python = connection
        .info()
        .language_info
        .name
        .eq_ignore_ascii_case("python");
    // The configured variables belong in the kernels this session starts, as in a local
    // kernel's process environment. A Jupyter Server ignores the start request's `env` (and a
    // gateway passes on only what it allows), so a Python kernel gets them in `os.environ`
    // too, before the helper runs library paths and preloads. An attached kernel is someone
    // else's: its environment is left alone.
    if python && connection.owned() && !options.namespace.variables.is_empty() {
        if let Err(error) =
            helper::set_variables(&connection, &options.namespace.variables, remaining()).await
        {
            discard(&connection).await;
            return Err(StartFailure::RemoteVariables {
                detail: error.to_string(),
            });
        }
    }
    // A kernel we started is checkpointed on its own machine; someone else's is left alone.
    let checkpoints = python && connection.owned() && options.checkpoint_max_bytes.is_some();
    // Code mode too: in a person's kernel it would open stdin to us and take `input()` from
    // their own cells.
    let code_mode = connection.owned() && !options.mcp_servers().is_empty();
    let installed = if python {
        Some(install_helper(&shared, &connection, checkpoints, code_mode, remaining()).await?)
    } else {
        None
    };
    if let Some(guard) = guard {
        guard.defuse();
    }
    let description = describe(&server, &connection, installed.as_ref(), spec);
    let helper_comm = installed.map(|installed| installed.comm_id);
    tracing::debug!(
        kernel = connection.id(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "remote kernel prepared"
    );
    Ok(Running {
        kernel: Box::new(connection),
        checkpoints: checkpoints && helper_comm.is_some(),
        code_mode: helper_comm.is_some() && code_mode,
        helper_comm,
        helper_spools: false,
        description,
    })
}

/// Starts the session's kernel on the server (guarded until it is ready) or attaches to the
/// named one, and connects to it; with the spec as runtime_status names it.
async fn connect(
    shared: &Shared,
    server: &Server,
    kernel: &RemoteKernel,
    started: Instant,
) -> Result<(Connection, Option<Started>, String), StartFailure> {
    let options = &shared.options;
    let startup = options.timeouts.kernel_startup;
    match kernel {
        RemoteKernel::Start { name } => {
            let mut variables: Vec<(&str, &str)> = options.namespace.variables.iter().collect();
            if let Some(owner) = &options.owner {
                variables.push(("KERNEL_USERNAME", owner));
            }
            let info = server
                .start_kernel(name, &variables, startup)
                .await
                .map_err(|error| StartFailure::server(&error))?;
            let guard = Started {
                server: server.clone(),
                id: Some(info.id.clone()),
            };
            let remaining = startup
                .saturating_sub(started.elapsed())
                .max(Duration::from_secs(1));
            let connection = server
                .connect(&info.id, true, remaining)
                .await
                .map_err(|error| StartFailure::server(&error))?;
            Ok((connection, Some(guard), kernel.to_string()))
        }
        RemoteKernel::Attach { id } => {
            let connection = server
                .connect(id, false, startup)
                .await
                .map_err(|error| StartFailure::server(&error))?;
            Ok((connection, None, kernel.to_string()))
        }
        RemoteKernel::Foreign { id } => Err(not_found(id)),
    }
}

/// How the server answers a kernel id it does not know, which is also the answer for one the
/// caller may not attach to (another principal's): the two are indistinguishable.
fn not_found(id: &str) -> StartFailure {
    StartFailure::server(&ipython_mcp_jupyter::Error::RemoteNotFound {
        what: format!("kernel {id}"),
    })
}

/// Installs the helper through the kernel's channels; a failure gives the kernel up.
async fn install_helper(
    shared: &Shared,
    connection: &Connection,
    checkpoints: bool,
    code_mode: bool,
    remaining: Duration,
) -> Result<helper::Installed, StartFailure> {
    let options = &shared.options;
    // A kernel we started writes its history in batches (a person's kernel is left as they
    // configured it): one SQLite write per cell costs more than the whole relay through the
    // server.
    let history_batch_cells = if connection.owned() {
        HISTORY_BATCH_CELLS
    } else {
        0
    };
    // The helper's spool is our disk, which a remote kernel cannot reach: it bounds output
    // in the kernel, and the session spools what arrives.
    let mcp_servers = if code_mode {
        options.mcp_servers()
    } else {
        Vec::new()
    };
    let setup = helper::Setup {
        spool: None,
        // Our disk is out of its reach: the checkpoint stays on the server's machine.
        checkpoint: options
            .checkpoint_max_bytes
            .filter(|_| checkpoints)
            .map(|max| (std::path::Path::new(&shared.remote_checkpoint), max)),
        history_batch_cells,
        mcp_servers: &mcp_servers,
    };
    let installed = helper::install(
        connection,
        &options.limits,
        &options.namespace,
        setup,
        remaining,
    )
    .await;
    match installed {
        Ok(installed) => Ok(installed),
        Err(error) => {
            discard(connection).await;
            Err(StartFailure::RemoteHelper {
                detail: error.to_string(),
            })
        }
    }
}

/// The kernel as runtime_status shows it.
fn describe(
    server: &Server,
    connection: &Connection,
    installed: Option<&helper::Installed>,
    spec: String,
) -> KernelDescription {
    let info = connection.info();
    // Paths on the server's machine, as the helper found them (empty without it).
    let found = |field: fn(&helper::Installed) -> &String| {
        installed.map(field).cloned().unwrap_or_default()
    };
    KernelDescription {
        pid: None,
        remote: Some(RemoteDescription {
            server: server.url().to_string(),
            kernel_id: connection.id().to_owned(),
            attached: !connection.owned(),
        }),
        python: found(|installed| &installed.executable),
        language: info.language_info.name.clone(),
        python_version: info.language_info.version.clone(),
        ipykernel_version: found(|installed| &installed.ipykernel_version),
        implementation: format!("{} {}", info.implementation, info.implementation_version),
        spec,
        helper: installed.is_some(),
        working_dir: found(|installed| &installed.working_dir),
        sandbox: None,
    }
}

/// Gives up a kernel that could not be prepared: ours is deleted, someone else's left alone.
async fn discard(connection: &Connection) {
    connection.shutdown(Duration::from_secs(1)).await;
}
