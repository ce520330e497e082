//! The bundled Python helper: installed into every Python kernel right after start.
//!
//! The helper is real Python, a package of modules (`python/ipython_mcp_helper/`, with its own
//! pytest tests), embedded here file by file in [`HELPER_MODULES`]. It is installed by one
//! silent execute whose code is a fixed bootstrap: the modules' sources and the configuration
//! travel base64-encoded, so nothing is ever spliced into code as text, and nothing is bound in
//! the user's namespace. After that the server talks to it over a Jupyter comm (target
//! `ipython_mcp`).

use std::time::Duration;

use base64::Engine as _;
use ipython_mcp_config::{Namespace, OutputLimits};
use ipython_mcp_jupyter::protocol::{
    CommId, CommMsg, CommOpen, ExecuteRequest, ExecutionState, JupyterMessage,
    JupyterMessageContent, ReplyStatus,
};
use ipython_mcp_jupyter::Channel;
use ipython_mcp_output::{LostName, Restore};
use serde_json::{json, Value};

use super::KernelTransport;

/// One module of the helper package: `(name, source)`, `__init__` for the package itself.
macro_rules! helper_module {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!("../../python/ipython_mcp_helper/", $name, ".py")),
        )
    };
}

/// The helper package, module by module, in the order the bootstrap executes them: every module
/// after the ones it imports, the package's `__init__` (which imports them all) last. A test
/// checks this table against the directory and that order against the modules' imports.
pub const HELPER_MODULES: &[(&str, &str)] = &[
    helper_module!("bounds"),
    helper_module!("sink"),
    helper_module!("rpc"),
    helper_module!("jsonconv"),
    helper_module!("namespace"),
    helper_module!("tools"),
    helper_module!("checkpoint"),
    helper_module!("code_mode"),
    helper_module!("installation"),
    helper_module!("__init__"),
];

/// The comm target the helper registers.
pub const COMM_TARGET: &str = "ipython_mcp";

/// How many raw characters per stream per execution the kernel still forwards live; past it
/// the helper only counts (its end-of-execution report carries the bounded text).
pub const RAW_FORWARD_CHARS: usize = 65_536;

/// Builds the package in `sys.modules` by hand, as the import system would from files: the
/// package module first (empty, with `__path__`, so relative imports find their parent), then
/// each module of the table executed in its own module object (registered before it runs and
/// bound on the package after, like an import), `__init__` into the package itself. Each
/// module is compiled under its own file name (`<ipython-mcp-helper/sink.py>`), so tracebacks
/// name it. `__spec__` carries the parent package, which is what relative imports read.
const BOOTSTRAP: &str = r#"import base64, importlib.machinery, json, sys, types
package = types.ModuleType("ipython_mcp_helper")
package.__spec__ = importlib.machinery.ModuleSpec(package.__name__, None, origin="<ipython-mcp-helper/__init__.py>", is_package=True)
package.__package__ = package.__name__
package.__path__ = []
package.__file__ = package.__spec__.origin
sys.modules[package.__name__] = package
for name, source in json.loads(base64.b64decode(MODULES_B64).decode("utf-8")):
    if name == "__init__":
        module = package
    else:
        module = types.ModuleType(package.__name__ + "." + name)
        module.__spec__ = importlib.machinery.ModuleSpec(module.__name__, None, origin="<ipython-mcp-helper/%s.py>" % name)
        module.__package__ = package.__name__
        module.__file__ = module.__spec__.origin
        sys.modules[module.__name__] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    if module is not package:
        setattr(package, name, module)
package.install(json.loads(base64.b64decode(CONFIG_B64).decode("utf-8")))
"#;

/// What the helper is set up with besides the output limits and the namespace.
#[derive(Debug, Default, Clone, Copy)]
pub struct Setup<'a> {
    /// Where it writes the full streams (a local kernel's), with the bound in bytes.
    pub spool: Option<(&'a std::path::Path, u64)>,
    /// Where it checkpoints the namespace, with the bound in bytes (a relative directory: on
    /// a remote kernel's own machine).
    pub checkpoint: Option<(&'a std::path::Path, u64)>,
    /// Cells of history written to IPython's database at once (0: IPython's default).
    pub history_batch_cells: u64,
    /// The upstream MCP servers its `mcp_servers` module offers (code mode); empty: none.
    pub mcp_servers: &'a [String],
}

/// The code of the silent install execute.
pub fn install_code(limits: &OutputLimits, namespace: &Namespace, setup: Setup<'_>) -> String {
    let Setup {
        spool,
        checkpoint,
        history_batch_cells,
        mcp_servers,
    } = setup;
    let engine = base64::engine::general_purpose::STANDARD;
    let config = json!({
        "max_text_chars": limits.max_text_chars,
        "text_head_chars": limits.text_head_chars(),
        "max_display_items": limits.max_display_items,
        "max_image_bytes": limits.max_image_bytes,
        "max_traceback_chars": limits.max_traceback_chars,
        // One more than the server keeps, so the server still sees (and flags) the cut.
        "max_string_chars": limits.max_text_chars + 1,
        "raw_forward_chars": RAW_FORWARD_CHARS.max(limits.max_text_chars * 2),
        // Report only when the kernel held output back; otherwise our own sink is exact and a
        // quiet cell costs no extra message.
        "report_always": 0,
        "max_repr_chars": limits.max_repr_chars,
        "max_results": limits.max_results,
        "max_json_depth": limits.max_json_depth,
        // Oversized PNG/JPEG images come through whole: the server downscales them.
        "max_fit_input_bytes": ipython_mcp_output::payload::MAX_FIT_INPUT_BYTES,
        "history_batch_cells": history_batch_cells,
        // Full stream text goes to <spool_dir>/<msg_id>.stdout|stderr (see the `executions` module).
        "spool_dir": spool.map(|(dir, _)| dir.display().to_string()),
        "spool_max_bytes": spool.map_or(0, |(_, max)| max),
        // The namespace is checkpointed there after each cell (see the helper's `checkpoint`).
        "checkpoint_dir": checkpoint.map(|(dir, _)| dir.display().to_string()),
        "checkpoint_max_bytes": checkpoint.map_or(0, |(_, max)| max),
        // Names only: how to reach them stays in the server.
        "mcp_servers": mcp_servers,
        "namespace": {
            "library_paths": namespace.library_paths.iter().map(|path| path.display().to_string()).collect::<Vec<_>>(),
            "preload_modules": namespace.preload_modules,
            "module_aliases": namespace.module_aliases,
        },
    });
    // The bootstrap runs in a fresh globals dict: the user namespace stays untouched.
    format!(
        "exec(compile(__import__('base64').b64decode('{boot}').decode('utf-8'), '<ipython-mcp-boot>', 'exec'), {{'__name__': '__ipython_mcp_boot__', 'MODULES_B64': '{modules}', 'CONFIG_B64': '{config}'}})",
        boot = engine.encode(BOOTSTRAP),
        modules = engine.encode(json!(HELPER_MODULES).to_string()),
        config = engine.encode(config.to_string()),
    )
}

/// Why installing the helper failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum InstallError {
    #[error("helper install raised {ename}: {evalue}")]
    Raised { ename: String, evalue: String },
    #[error("helper did not answer within {seconds:.1}s")]
    Timeout { seconds: f64 },
    #[error("kernel exited while the helper was being installed")]
    KernelExited,
    #[error("preload phase failed: configured modules failed to load: {details}")]
    Namespace { details: String },
    #[error(transparent)]
    Kernel(#[from] ipython_mcp_jupyter::Error),
}

/// The code of the silent execute that sets `variables` in the kernel's `os.environ`: a fixed
/// frame around one base64 payload, so no value is ever spliced into code as text, and nothing
/// is bound in the user's namespace.
pub(crate) fn variables_code(variables: &ipython_mcp_config::Variables) -> String {
    let engine = base64::engine::general_purpose::STANDARD;
    let map: serde_json::Map<String, Value> = variables
        .iter()
        .map(|(name, value)| (name.to_owned(), Value::from(value)))
        .collect();
    format!(
        "__import__('os').environ.update(__import__('json').loads(__import__('base64').b64decode('{}').decode('utf-8')))",
        engine.encode(Value::Object(map).to_string())
    )
}

/// Sets `variables` in a running Python kernel's `os.environ`, for a kernel whose process
/// environment is not ours to give (a remote one): silently (no execution count, no history),
/// and before the helper is installed, so library paths and preloads see them as they would
/// locally.
pub(crate) async fn set_variables(
    kernel: &dyn KernelTransport,
    variables: &ipython_mcp_config::Variables,
    timeout: Duration,
) -> Result<(), InstallError> {
    let waiter = Waiter {
        kernel,
        deadline: tokio::time::Instant::now() + timeout,
        timeout,
    };
    waiter.silent_execute(variables_code(variables)).await
}

/// Installs the helper and opens its comm; returns the comm id and the kernel's facts. It only
/// sends requests and reads their replies, so it works over any kernel transport.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn install(
    kernel: &dyn KernelTransport,
    limits: &OutputLimits,
    namespace: &Namespace,
    setup: Setup<'_>,
    timeout: Duration,
) -> Result<Installed, InstallError> {
    let waiter = Waiter {
        kernel,
        deadline: tokio::time::Instant::now() + timeout,
        timeout,
    };
    waiter
        .silent_execute(install_code(limits, namespace, setup))
        .await?;
    let comm_id = open_comm(&waiter).await?;
    let info = install_info(&waiter, &comm_id).await?;
    // Preloads and aliases that failed to import make the kernel unusable as configured.
    if let Some(details) = namespace_errors(&info) {
        return Err(InstallError::Namespace { details });
    }
    let fact = |key: &str| {
        let text = info
            .get("result")
            .and_then(|result| result.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default();
        ipython_mcp_text::shorten(text, MAX_FACT_CHARS)
    };
    Ok(Installed {
        executable: fact("executable"),
        ipykernel_version: fact("ipykernel"),
        working_dir: fact("working_dir"),
        comm_id,
    })
}

/// Opens the helper's comm and waits for its `ready`; returns the comm's id.
async fn open_comm(waiter: &Waiter<'_>) -> Result<String, InstallError> {
    let comm_id = uuid::Uuid::new_v4().to_string();
    let open = CommOpen {
        comm_id: CommId(comm_id.clone()),
        target_name: COMM_TARGET.to_owned(),
        data: serde_json::Map::new(),
        target_module: None,
    };
    waiter
        .exchange(JupyterMessage::new(open, None), |content| {
            matches!(content, JupyterMessageContent::CommMsg(message)
                if message.comm_id.0 == comm_id && message.data.get("event").and_then(Value::as_str) == Some("ready"))
        })
        .await?;
    Ok(comm_id)
}

/// The helper's `install_info` answer: the kernel's facts and the namespace setup's errors.
async fn install_info(waiter: &Waiter<'_>, comm_id: &str) -> Result<Value, InstallError> {
    call(waiter, comm_id, "install_info").await
}

/// One request to the helper, bounded by `timeout`: its reply, or the helper's refusal as an
/// error named after the method.
async fn request(
    kernel: &dyn KernelTransport,
    comm_id: &str,
    method: &str,
    timeout: Duration,
) -> Result<Value, InstallError> {
    let waiter = Waiter {
        kernel,
        deadline: tokio::time::Instant::now() + timeout,
        timeout,
    };
    let reply = call(&waiter, comm_id, method).await?;
    if reply.get("ok").and_then(Value::as_bool) != Some(true) {
        let message = reply
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("the helper refused")
            .to_owned();
        return Err(InstallError::Raised {
            ename: method.to_owned(),
            evalue: message,
        });
    }
    Ok(reply)
}

/// Deletes the session's checkpoint (the helper's `discard_checkpoint`): a restart that resets
/// must not bring old names back should its kernel die before a checkpoint of its own.
pub(crate) async fn discard_checkpoint(
    kernel: &dyn KernelTransport,
    comm_id: &str,
    timeout: Duration,
) -> Result<(), InstallError> {
    request(kernel, comm_id, "discard_checkpoint", timeout)
        .await
        .map(|_| ())
}

/// Loads the session's checkpoint into a replacement kernel, first thing (the helper's
/// `restore`): what came back; `None` when no checkpoint was taken yet.
pub(crate) async fn restore(
    kernel: &dyn KernelTransport,
    comm_id: &str,
    timeout: Duration,
) -> Result<Option<Restore>, InstallError> {
    let started = std::time::Instant::now();
    let reply = request(kernel, comm_id, "restore", timeout).await?;
    let Some(result) = reply.get("result").filter(|result| !result.is_null()) else {
        return Ok(None);
    };
    let names = |key: &str| -> Vec<Value> {
        result
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let text = |value: &Value| {
        ipython_mcp_text::shorten(value.as_str().unwrap_or_default(), MAX_FACT_CHARS)
    };
    Ok(Some(Restore {
        restored: names("restored").iter().map(text).collect(),
        lost: names("lost")
            .iter()
            .map(|lost| LostName {
                name: text(lost.get("name").unwrap_or(&Value::Null)),
                reason: text(lost.get("reason").unwrap_or(&Value::Null)),
            })
            .collect(),
        execution_count: result.get("execution_count").and_then(Value::as_u64),
        restore_ms: started.elapsed().as_millis() as u64,
    }))
}

/// One request to the helper and its reply (`{"id", "ok", "result" | "error"}`).
async fn call(waiter: &Waiter<'_>, comm_id: &str, method: &str) -> Result<Value, InstallError> {
    let request_id = uuid::Uuid::new_v4().to_string();
    let data = json!({"id": request_id, "method": method, "params": {}});
    let message = CommMsg {
        comm_id: CommId(comm_id.to_owned()),
        data: data.as_object().cloned().unwrap_or_default(),
    };
    let mut info = Value::Null;
    waiter
        .exchange(
            JupyterMessage::new(message, None),
            |content| match content {
                JupyterMessageContent::CommMsg(message)
                    if message.data.get("id").and_then(Value::as_str)
                        == Some(request_id.as_str()) =>
                {
                    info = Value::Object(message.data);
                    true
                }
                _ => false,
            },
        )
        .await?;
    Ok(info)
}

/// The modules the namespace setup could not import, one line, if any.
fn namespace_errors(info: &Value) -> Option<String> {
    let errors = info
        .get("result")
        .and_then(|result| result.get("namespace_errors"))
        .and_then(Value::as_array)
        .filter(|errors| !errors.is_empty())?;
    let details = errors
        .iter()
        .map(|error| {
            let field = |key: &str| {
                error
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned()
            };
            format!(
                "{} ({}: {})",
                field("module"),
                field("code"),
                field("message")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(details)
}

/// The longest kernel fact (a path, a version) kept from the helper's answer.
const MAX_FACT_CHARS: usize = 4096;

/// The helper's comm, and what it found out about its kernel: what `runtime_status` shows of a
/// kernel whose process is not ours (a local one's come from its launch).
#[derive(Debug, Clone)]
pub(crate) struct Installed {
    pub comm_id: String,
    /// The kernel's `sys.executable`.
    pub executable: String,
    pub ipykernel_version: String,
    /// The kernel's working directory when the helper was installed.
    pub working_dir: String,
}

/// Request/reply exchanges during installation, all under one deadline.
struct Waiter<'a> {
    kernel: &'a dyn KernelTransport,
    deadline: tokio::time::Instant,
    timeout: Duration,
}

impl Waiter<'_> {
    /// Runs `code` silently (no execution count, no history, no `execute_input`); an exception
    /// it raises is [`InstallError::Raised`].
    async fn silent_execute(&self, code: String) -> Result<(), InstallError> {
        let request = JupyterMessage::new(
            ExecuteRequest {
                code,
                silent: true,
                store_history: false,
                user_expressions: None,
                allow_stdin: false,
                stop_on_error: false,
            },
            None,
        );
        let mut raised = None;
        self.exchange(request, |content| match content {
            JupyterMessageContent::ExecuteReply(reply) => {
                if let (ReplyStatus::Error, Some(error)) = (&reply.status, &reply.error) {
                    raised.get_or_insert((error.ename.clone(), error.evalue.clone()));
                }
                true
            }
            JupyterMessageContent::ErrorOutput(error) => {
                raised = Some((error.ename, error.evalue));
                false
            }
            _ => false,
        })
        .await?;
        match raised {
            Some((ename, evalue)) => Err(InstallError::Raised { ename, evalue }),
            None => Ok(()),
        }
    }

    /// Sends `request` and feeds its messages to `is_reply` until it has accepted one and the
    /// kernel is idle again.
    async fn exchange(
        &self,
        request: JupyterMessage,
        mut is_reply: impl FnMut(JupyterMessageContent) -> bool,
    ) -> Result<(), InstallError> {
        let (msg_id, mut receiver) = self.kernel.request(Channel::Shell, request).await?;
        let (mut replied, mut idle) = (false, false);
        while !(replied && idle) {
            let routed = match tokio::time::timeout_at(self.deadline, receiver.recv()).await {
                Ok(Some(routed)) => routed,
                Ok(None) => return Err(InstallError::KernelExited),
                Err(_) => {
                    self.kernel.forget(&msg_id);
                    return Err(InstallError::Timeout {
                        seconds: self.timeout.as_secs_f64(),
                    });
                }
            };
            match routed.message.content {
                JupyterMessageContent::Status(status)
                    if status.execution_state == ExecutionState::Idle =>
                {
                    idle = true
                }
                content => replied |= is_reply(content),
            }
        }
        self.kernel.forget(&msg_id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module_source(name: &str) -> &'static str {
        HELPER_MODULES
            .iter()
            .find(|(module, _)| *module == name)
            .map(|(_, source)| *source)
            .unwrap_or_else(|| panic!("no helper module {name}"))
    }

    #[test]
    fn install_code_carries_no_raw_text() {
        let code = install_code(
            &OutputLimits::default(),
            &Namespace::default(),
            Setup::default(),
        );
        // Only the fixed frame and base64 payloads: no quotes or newlines from the source.
        assert!(!code.contains('\n'));
        assert!(code.starts_with("exec(compile(__import__('base64')"));
        assert!(module_source("installation").contains("def install("));
    }

    #[test]
    fn variables_code_carries_no_raw_value() {
        let variables = ipython_mcp_config::Variables::from([("QUOTE", "it's\n'); import x")]);
        let code = variables_code(&variables);
        assert!(!code.contains("QUOTE") && !code.contains("import x") && !code.contains('\n'));
        assert!(code.starts_with("__import__('os').environ.update("));
    }

    #[test]
    fn helper_modules_are_exactly_the_package_directory() {
        let directory =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/ipython_mcp_helper");
        let mut on_disk: Vec<String> = std::fs::read_dir(&directory)
            .expect("the helper package directory exists")
            .map(|entry| entry.expect("readable directory entry").path())
            .filter(|path| path.extension().is_some_and(|extension| extension == "py"))
            .map(|path| {
                let stem = path.file_stem().expect("a .py file has a stem");
                stem.to_string_lossy().into_owned()
            })
            .collect();
        on_disk.sort();
        let mut in_table: Vec<String> = HELPER_MODULES
            .iter()
            .map(|(name, _)| (*name).to_owned())
            .collect();
        in_table.sort();
        assert_eq!(
            in_table, on_disk,
            "HELPER_MODULES must name every .py file of python/ipython_mcp_helper, once"
        );
    }

    #[test]
    fn helper_modules_come_after_the_modules_they_import() {
        let position = |name: &str| {
            HELPER_MODULES
                .iter()
                .position(|(module, _)| *module == name)
        };
        assert_eq!(
            position("__init__"),
            Some(HELPER_MODULES.len() - 1),
            "the package's __init__ imports every module, so it runs last"
        );
        for (index, (name, source)) in HELPER_MODULES.iter().enumerate() {
            for line in source.lines() {
                // `from . import a, b` and `from .a import x`; only top-level imports run
                // while the bootstrap executes the module.
                let imported: Vec<&str> = if let Some(names) = line.strip_prefix("from . import ") {
                    names.split(',').map(str::trim).collect()
                } else if let Some(rest) = line.strip_prefix("from .") {
                    rest.split_whitespace().next().into_iter().collect()
                } else {
                    assert!(
                        !line.trim_start().starts_with("from ."),
                        "{name}: a relative import inside a function bypasses the table's order: {line}"
                    );
                    continue;
                };
                for dependency in imported {
                    let found = position(dependency)
                        .unwrap_or_else(|| panic!("{name} imports {dependency}, not in the table"));
                    assert!(
                        found < index,
                        "{name} imports {dependency}, which the table puts after it"
                    );
                }
            }
        }
    }
}
