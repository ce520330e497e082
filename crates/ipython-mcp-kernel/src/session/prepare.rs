//! The local launcher: finding or provisioning the Python environment, starting an ipykernel
//! and installing the helper into it, for the session's kernel and its spares alike.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use ipython_mcp_env::{Phase, PythonEnvironment};
use ipython_mcp_jupyter::{Kernel, LaunchSpec};
use tokio::time::Instant;

use super::error::StartFailure;
use super::helper;
use super::transport::{Launcher, Running};
use super::Shared;
use crate::status::{EnvironmentStatus, KernelDescription, SandboxStatus};

/// Local ipykernels over ZeroMQ: the Python environment is found or provisioned once, then
/// every kernel is a child process of ours (see `ipython_mcp_jupyter::Kernel`).
pub(super) struct Local {
    shared: Arc<Shared>,
    environment: OnceLock<PythonEnvironment>,
}

impl Local {
    pub(super) fn new(shared: Arc<Shared>) -> Local {
        Local {
            shared,
            environment: OnceLock::new(),
        }
    }

    async fn provision(&self) -> Result<(), StartFailure> {
        let started = std::time::Instant::now();
        let shared = Arc::clone(&self.shared);
        let progress = move |phase: Phase| {
            let (name, tool) = phase_name(&phase);
            let mut status = shared.status.lock().expect("status lock");
            status.environment = Some(EnvironmentStatus {
                phase: name.to_owned(),
                elapsed_seconds: started.elapsed().as_secs_f64(),
                source: None,
                tool,
                created: false,
                failed_phase: None,
            });
        };
        // Every probe and installer runs under the kernels' sandbox: the interpreter, and all
        // it imports, may have been written by a kernel.
        let mut resolver = self.shared.options.resolver.clone();
        if let Some(policy) = &self.shared.options.sandbox {
            if policy.mode != ipython_mcp_sandbox::Mode::Off {
                resolver.confinement = ipython_mcp_env::Confinement::new(Arc::new(
                    super::confine::KernelSandbox(Arc::clone(policy)),
                ));
            }
        }
        // Elapsed time keeps moving in runtime_status during a long install.
        let resolving = resolver.resolve(&progress);
        tokio::pin!(resolving);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let resolved = loop {
            tokio::select! {
                resolved = &mut resolving => break resolved,
                _ = tick.tick() => update(&self.shared, |status| {
                    if let Some(environment) = &mut status.environment {
                        environment.elapsed_seconds = started.elapsed().as_secs_f64();
                    }
                }),
            }
        };
        match resolved {
            Ok(environment) => {
                update(&self.shared, |status| {
                    status.environment = Some(EnvironmentStatus {
                        phase: "ready".to_owned(),
                        elapsed_seconds: started.elapsed().as_secs_f64(),
                        source: serde_json::to_value(environment.source)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned)),
                        tool: status.environment.as_ref().and_then(|e| e.tool.clone()),
                        created: environment.created,
                        failed_phase: None,
                    });
                });
                tracing::info!(python = %environment.executable.display(), created = environment.created, "python environment ready");
                let _ = self.environment.set(environment);
                Ok(())
            }
            Err(error) => {
                let phase = error.phase();
                update(&self.shared, |status| {
                    if let Some(environment) = &mut status.environment {
                        environment.phase = "failed".to_owned();
                        environment.failed_phase = Some(phase.to_owned());
                        environment.elapsed_seconds = started.elapsed().as_secs_f64();
                    }
                });
                let failure = StartFailure::Environment {
                    phase,
                    detail: error.to_string(),
                };
                let shown = super::shown(&self.shared.options, failure.clone()).to_string();
                tracing::error!(phase, error = shown, "python environment unavailable");
                Err(failure)
            }
        }
    }
}

impl Launcher for Local {
    fn provision(&self) -> BoxFuture<'_, Result<(), StartFailure>> {
        Box::pin(Local::provision(self))
    }

    fn launch(&self) -> BoxFuture<'static, Result<Running, StartFailure>> {
        let shared = Arc::clone(&self.shared);
        let environment = self.environment.get().cloned();
        Box::pin(async move {
            match environment {
                Some(environment) => prepare(shared, environment).await,
                None => Err(StartFailure::NoEnvironment),
            }
        })
    }
}

fn update(shared: &Shared, change: impl FnOnce(&mut crate::status::RuntimeStatus)) {
    change(&mut shared.status.lock().expect("status lock"));
}

/// Starts a kernel and installs the helper; touches no session state, so spares use it too.
async fn prepare(
    shared: Arc<Shared>,
    environment: PythonEnvironment,
) -> Result<Running, StartFailure> {
    let options = &shared.options;
    let (spec, with_helper, spec_name) = launch_spec(&shared, &environment);
    let started = Instant::now();
    let spec = with_variables(spec, &options.namespace.variables);
    let kernel = Kernel::launch(&spec, options.timeouts.kernel_startup)
        .await
        .map_err(|error| StartFailure::Launch {
            detail: error.to_string(),
        })?;
    let remaining = options
        .timeouts
        .kernel_startup
        .saturating_sub(started.elapsed())
        .max(Duration::from_secs(1));
    let helper_comm = if with_helper {
        Some(install_helper(&shared, &kernel, remaining).await?)
    } else {
        None
    };
    let description = describe(&kernel, &spec, spec_name, &shared.options, &environment);
    let description = KernelDescription {
        helper: helper_comm.is_some(),
        ..description
    };
    tracing::debug!(
        pid = kernel.pid(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "kernel prepared"
    );
    // The helper checkpoints when it has a place for them (see `install_helper`).
    let checkpoints = helper_comm.is_some()
        && shared.options.checkpoint_max_bytes.is_some()
        && shared.executions.spool().is_some();
    let code_mode = helper_comm.is_some() && !shared.options.mcp_servers().is_empty();
    Ok(Running {
        kernel: Box::new(kernel),
        helper_spools: helper_comm.is_some(),
        checkpoints,
        code_mode,
        helper_comm,
        description,
    })
}

/// How to launch the kernel, whether it gets the helper, and the spec's name. Our own
/// ipykernel launch by default. A kernelspec is launched with exactly its argv, env and
/// interrupt mode (the launcher adds our ipykernel options only where the argv runs
/// ipykernel); an ipykernel spec gets the helper, any other kernel none.
fn launch_spec(shared: &Shared, environment: &PythonEnvironment) -> (LaunchSpec, bool, String) {
    let options = &shared.options;
    let own_dirs: Vec<std::path::PathBuf> = shared
        .executions
        .spool()
        .map(|(dir, _)| dir.to_owned())
        .into_iter()
        .collect();
    match &options.kernel_spec {
        None => (
            LaunchSpec {
                python: environment.executable.clone(),
                env: Vec::new(),
                working_dir: options.working_dir.clone(),
                interrupt_mode: Default::default(),
                argv: None,
                kernel_name: None,
                memory: options.memory,
                sandbox: options.sandbox.clone(),
                run_dir_in: options.private_dir.clone(),
                own_dirs: own_dirs.clone(),
            },
            true,
            "python3".to_owned(),
        ),
        Some(kernel_spec) => {
            let command = kernel_spec.command(&environment.executable, &environment.python_version);
            let spec = LaunchSpec {
                python: std::path::PathBuf::from(&command[0]),
                env: kernel_spec
                    .environment()
                    .into_iter()
                    .map(|(key, value)| (key.into(), value.into()))
                    .collect(),
                working_dir: options.working_dir.clone(),
                interrupt_mode: kernel_spec.interrupt_mode,
                argv: Some(command),
                kernel_name: Some(kernel_spec.name.clone()),
                memory: options.memory,
                sandbox: options.sandbox.clone(),
                run_dir_in: options.private_dir.clone(),
                own_dirs: own_dirs.clone(),
            };
            (spec, kernel_spec.is_ipykernel(), kernel_spec.name.clone())
        }
    }
}

/// Installs the helper into a launched kernel; returns its comm. A failure stops the kernel.
async fn install_helper(
    shared: &Shared,
    kernel: &Kernel,
    remaining: Duration,
) -> Result<String, StartFailure> {
    let options = &shared.options;
    let spool = shared.executions.spool();
    // The checkpoint lives beside the spool, in the session's directory: kept across its
    // kernels, deleted with the session.
    let checkpoint_dir = spool.map(|(dir, _)| dir.join(super::checkpoint::CHECKPOINT_DIR));
    let checkpoint = options
        .checkpoint_max_bytes
        .zip(checkpoint_dir.as_deref())
        .map(|(max, dir)| (dir, max));
    let mcp_servers = options.mcp_servers();
    let setup = helper::Setup {
        spool,
        checkpoint,
        // Local kernels keep history in memory (a launch option).
        history_batch_cells: 0,
        mcp_servers: &mcp_servers,
    };
    match helper::install(
        kernel,
        &options.limits,
        &options.namespace,
        setup,
        remaining,
    )
    .await
    {
        Ok(installed) => Ok(installed.comm_id),
        Err(error @ helper::InstallError::Namespace { .. }) => {
            kernel.shutdown(Duration::from_millis(200)).await;
            Err(StartFailure::Namespace {
                detail: error.to_string(),
            })
        }
        Err(error) => {
            let stderr = kernel.stderr_tail();
            kernel.shutdown(Duration::from_millis(200)).await;
            Err(StartFailure::Helper {
                detail: error.to_string(),
                stderr,
            })
        }
    }
}

/// The kernel as runtime_status shows it (`helper: false` until the caller knows).
fn describe(
    kernel: &Kernel,
    spec: &LaunchSpec,
    spec_name: String,
    options: &super::SessionOptions,
    environment: &PythonEnvironment,
) -> KernelDescription {
    let info = kernel.info();
    KernelDescription {
        pid: Some(kernel.pid()),
        remote: None,
        python: spec.python.display().to_string(),
        language: info.language_info.name.clone(),
        python_version: info.language_info.version.clone(),
        ipykernel_version: if options.kernel_spec.is_none() {
            environment.ipykernel_version.clone()
        } else {
            String::new()
        },
        implementation: format!("{} {}", info.implementation, info.implementation_version),
        spec: spec_name,
        helper: false,
        working_dir: match &spec.working_dir {
            Some(dir) => dir.display().to_string(),
            None => std::env::current_dir()
                .map(|dir| dir.display().to_string())
                .unwrap_or_default(),
        },
        sandbox: Some(SandboxStatus::of(kernel.sandbox())),
    }
}

/// Configured variables go into the kernel process's environment (after a kernelspec's own),
/// so they exist before the helper adds library paths and imports preloads.
pub(super) fn with_variables(
    mut spec: LaunchSpec,
    variables: &ipython_mcp_config::Variables,
) -> LaunchSpec {
    spec.env.extend(
        variables
            .iter()
            .map(|(name, value)| (name.into(), value.into())),
    );
    spec
}

fn phase_name(phase: &Phase) -> (&'static str, Option<String>) {
    match phase {
        Phase::Probing => ("probing", None),
        Phase::Validating => ("validating", None),
        Phase::Locking => ("locking", None),
        Phase::Creating { tool } => ("creating", Some(tool.clone())),
        Phase::Installing { tool } => ("installing", Some(tool.clone())),
        Phase::Verifying => ("verifying", None),
        Phase::Ready => ("ready", None),
        #[allow(unreachable_patterns)]
        _ => ("working", None),
    }
}
