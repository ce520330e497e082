//! The kernels' sandbox for the children the environment crate starts on their interpreter
//! (its probe, its installers): what a kernel can write, they may run (a `.pth` file in the
//! environment's site-packages, a replaced `.venv/bin/python`), so they run no freer than a
//! kernel would.

use std::sync::Arc;

use ipython_mcp_env::{Confine, Guard, Purpose};
use ipython_mcp_sandbox::{KernelDirs, Mode, Network, Policy};

/// Confines probes and installers to a session's sandbox policy.
pub(super) struct KernelSandbox(pub(super) Arc<Policy>);

impl KernelSandbox {
    /// The policy a child for `purpose` runs under, and its directories. A probe runs exactly
    /// as a kernel on that interpreter would. An installer writes the environment being built
    /// (and nothing else a kernel could not) and reaches the package index, so its network is
    /// open whatever the kernels' is; what it could read is what a kernel can read.
    fn policy_for(&self, purpose: &Purpose) -> (Policy, KernelDirs) {
        match purpose {
            Purpose::Probe {
                python,
                working_dir,
            } => (
                (*self.0).clone(),
                KernelDirs {
                    working_dir: working_dir.clone(),
                    python: Some(python.clone()),
                    own: Vec::new(),
                },
            ),
            Purpose::Install { dir } => {
                let mut policy = (*self.0).clone();
                if policy.mode != Mode::Off {
                    policy.mode = Mode::WorkspaceWrite;
                }
                policy.workspace = None;
                policy.network = Network::On;
                policy.write = vec![dir.clone()];
                (
                    policy,
                    KernelDirs {
                        working_dir: None,
                        python: None,
                        own: Vec::new(),
                    },
                )
            }
        }
    }
}

impl Confine for KernelSandbox {
    fn confine(
        &self,
        command: &mut std::process::Command,
        purpose: &Purpose,
    ) -> Result<Guard, String> {
        let (policy, dirs) = self.policy_for(purpose);
        let prepared = Arc::new(policy.prepare(&dirs).map_err(|error| error.to_string())?);
        if let Some((runner, args)) = prepared.command_prefix().and_then(<[String]>::split_first) {
            // The child runs under another program, which takes it as arguments: the namespaces'
            // launcher (Linux), `sandbox-exec` (macOS).
            let mut wrapped = std::process::Command::new(runner);
            wrapped
                .args(args)
                .arg(command.get_program())
                .args(command.get_args());
            for (key, value) in command.get_envs() {
                match value {
                    Some(value) => wrapped.env(key, value),
                    None => wrapped.env_remove(key),
                };
            }
            if let Some(dir) = command.get_current_dir() {
                wrapped.current_dir(dir);
            }
            *command = wrapped;
        }
        command.envs(
            prepared
                .command_env()
                .iter()
                .map(|(name, value)| (name, value)),
        );
        prepared.confine(command);
        Ok(Box::new(prepared))
    }
}
