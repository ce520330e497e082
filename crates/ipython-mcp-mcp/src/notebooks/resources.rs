//! The `notebook:///` resources and the server's JSON resources (capabilities, kernelspecs,
//! kernels).

use ipython_mcp_notebook::{uri_for_path, JUPYTER_PREFIX};
use ipython_mcp_output::Code;
use serde_json::Value;

use super::MAX_READ_CELLS;
use crate::error::{notebook_code, ToolError};
use crate::handler::IpythonMcp;
use ipython_mcp_kernel::MAX_CODE_BYTES;

// ---------------------------------------------------------------------------------------------
// Resources

/// The capabilities resource (effective limits, formats, kernels).
pub(crate) const CAPABILITIES_URI: &str = "ipython-mcp://capabilities";
/// The same object under the URI jupymcp serves it at, for clients written against jupymcp.
pub(crate) const JUPYMCP_CAPABILITIES_URI: &str = "jupymcp://capabilities";
/// Registered kernelspecs.
pub(crate) const KERNELSPECS_URI: &str = "ipython-mcp://kernelspecs";
/// Running kernel sessions and the notebooks bound to them.
pub(crate) const KERNELS_URI: &str = "ipython-mcp://kernels";
/// Largest notebook served as a resource.
const MAX_RESOURCE_BYTES: usize = 64 * 1024 * 1024;
/// Notebooks listed by resources/list (a bounded scan of the workspace).
const MAX_LISTED_NOTEBOOKS: usize = 200;
const MAX_SCAN_DEPTH: usize = 4;
const MAX_SCANNED_ENTRIES: usize = 10_000;

/// The MCP protocol versions and extensions served, as rmcp negotiates them for this handler
/// (asked of it, so the resource cannot drift from what the server answers).
fn protocol_json(server: &IpythonMcp) -> Value {
    use rmcp::ServerHandler as _;
    let versions: Vec<String> = server
        .supported_protocol_versions()
        .iter()
        .map(|version| version.as_str().to_owned())
        .collect();
    let extensions: Vec<String> = server
        .get_info()
        .capabilities
        .extensions
        .map(|extensions| extensions.into_keys().collect())
        .unwrap_or_default();
    serde_json::json!({
        "versions": versions,
        "extensions": extensions,
    })
}

/// What a cancellation does here. Unlike jupymcp's, an MCP cancellation of a running execution
/// does not leave the cell running in the kernel: it stops it.
fn cancellation_json() -> Value {
    serde_json::json!({
        "mcp_request": "interrupts_running_cell",
        "queued_request": "removed_from_queue",
        "description": "notifications/cancelled for a call still waiting in a kernel's queue removes it (nothing runs); for a running execution it interrupts the cell like a timeout does (SIGINT or interrupt_request), and replaces the kernel if the cell does not stop within interruption_grace_seconds; the result's runtime.namespace says whether the namespace was preserved. tasks/cancel does the same for a task. The interrupt tool interrupts explicitly.",
        "json_lines": "no in-flight cancellation: send an interrupt request",
    })
}

impl IpythonMcp {
    pub(crate) async fn notebook_resources(&self) -> Vec<rmcp::model::Resource> {
        use rmcp::model::Resource;
        let mut resources = vec![
            Resource::new(CAPABILITIES_URI, "capabilities")
                .with_description("Effective limits, timeouts, notebook formats and kernelspecs of this server")
                .with_mime_type("application/json"),
            Resource::new(JUPYMCP_CAPABILITIES_URI, "jupymcp-capabilities")
                .with_description("The capabilities resource under jupymcp's URI (the same object)")
                .with_mime_type("application/json"),
            Resource::new(KERNELSPECS_URI, "kernelspecs")
                .with_description("Registered Jupyter kernelspecs (names usable in a notebook's metadata.kernelspec and kernel_start)")
                .with_mime_type("application/json"),
            Resource::new(KERNELS_URI, "kernels")
                .with_description("Running kernel sessions and the notebooks bound to them")
                .with_mime_type("application/json"),
        ];
        if let Ok(workspace) = self.notebooks().workspace() {
            let workspace = workspace.clone();
            let scan = ipython_mcp_notebook::Scan {
                max_depth: MAX_SCAN_DEPTH,
                max_entries: MAX_SCANNED_ENTRIES,
                max_found: MAX_LISTED_NOTEBOOKS,
            };
            let notebooks = tokio::task::spawn_blocking(move || workspace.find_notebooks(scan))
                .await
                .unwrap_or_default();
            resources.extend(notebooks.into_iter().map(|relative| {
                Resource::new(uri_for_path(&relative), relative)
                    .with_mime_type("application/x-ipynb+json")
            }));
        }
        if let Some(notebooks) = self.notebooks().jupyter() {
            // The Jupyter server's notebooks (the caller's area of it) as `jupyter:` paths; a
            // server that does not answer lists none (the list is a convenience; the tools say
            // what failed).
            match notebooks
                .list(MAX_SCAN_DEPTH - 1, MAX_LISTED_NOTEBOOKS)
                .await
            {
                Ok(notebooks) => resources.extend(notebooks.into_iter().map(|server_path| {
                    let relative = format!("{JUPYTER_PREFIX}{server_path}");
                    Resource::new(uri_for_path(&relative), relative)
                        .with_mime_type("application/x-ipynb+json")
                })),
                Err(error) => {
                    tracing::debug!(error = %error, "the Jupyter server's notebooks are not listed")
                }
            }
        }
        resources
    }

    pub(crate) fn notebook_resource_templates(&self) -> Vec<rmcp::model::ResourceTemplate> {
        vec![rmcp::model::ResourceTemplate::new("notebook:///{+path}", "notebook")
            .with_description("A notebook file by its workspace-relative path, RFC 3986 percent-encoded per segment (spaces as %20, non-ASCII as UTF-8 escapes)")
            .with_mime_type("application/x-ipynb+json")]
    }

    /// The kernelspecs as JSON, sorted by name.
    async fn kernelspecs_json(&self) -> Value {
        let python = self.kernels().default_python();
        let specs = tokio::task::spawn_blocking(move || {
            let dirs = ipython_mcp_jupyter::kernelspec::data_dirs(python.as_deref());
            ipython_mcp_jupyter::kernelspec::discover(&dirs)
        })
        .await
        .unwrap_or_default();
        let mut specs: Vec<Value> = specs
            .into_iter()
            .map(|spec| {
                serde_json::json!({
                    "name": spec.name,
                    "display_name": spec.display_name,
                    "language": spec.language,
                })
            })
            .collect();
        specs.sort_by(|left, right| left["name"].as_str().cmp(&right["name"].as_str()));
        Value::Array(specs)
    }

    fn kernels_json(&self) -> Value {
        let kernels: Vec<Value> = self
            .kernels()
            .all()
            .into_iter()
            .map(|listing| {
                let ipython_mcp_kernel::Listing {
                    id: kernel,
                    spec,
                    handle,
                    idle,
                } = listing;
                let status = handle.status();
                let notebooks: Vec<String> = self
                    .notebooks()
                    .bound_to(kernel.as_str())
                    .iter()
                    .map(|path| self.notebooks().shown(path))
                    .collect();
                serde_json::json!({
                    "kernel": kernel,
                    "spec": spec,
                    "state": status.state,
                    "epoch": status.epoch,
                    "idle_seconds": idle.as_secs_f64(),
                    "notebooks": notebooks,
                })
            })
            .collect();
        Value::Array(kernels)
    }

    pub async fn capabilities_json(&self) -> Value {
        let config = self.config();
        let limits = config.limits;
        let timeouts = config.timeouts;
        let workspace_root = self
            .notebooks()
            .workspace()
            .ok()
            .map(|workspace| workspace.root().display().to_string());
        serde_json::json!({
            "schema_version": "1.0",
            "server": {"name": "ipython-mcp", "version": env!("CARGO_PKG_VERSION")},
            "limits": {
                "max_text_chars": limits.max_text_chars,
                "max_traceback_chars": limits.max_traceback_chars,
                "max_repr_chars": limits.max_repr_chars,
                "max_results": limits.max_results,
                "max_display_items": limits.max_display_items,
                "max_json_depth": limits.max_json_depth,
                "max_image_bytes": limits.max_image_bytes,
                "max_reply_bytes": limits.max_reply_bytes,
                "max_code_bytes": MAX_CODE_BYTES,
                "operation_timeout_seconds": timeouts.operation.as_secs_f64(),
                "max_timeout_seconds": timeouts.max_operation.as_secs_f64(),
                "interruption_grace_seconds": timeouts.interruption_grace.as_secs_f64(),
                "queue_wait_timeout_seconds": config.queue.queue_wait.as_secs_f64(),
                "max_pending_operations": config.queue.max_pending,
                "max_kernels": config.kernels.max_kernels,
                "kernel_idle_timeout_seconds": config.kernels.idle_timeout.as_secs_f64(),
                "max_dynamic_tools": config.tools.max_tools,
                "max_tasks": config.tools.max_tasks,
                "max_notebook_read_cells": MAX_READ_CELLS,
                "max_notebook_resource_bytes": MAX_RESOURCE_BYTES,
            },
            "notebooks": {
                "workspace_root": workspace_root,
                "formats": ["ipynb", "py:percent"],
                "nbformat": "4.5",
                "revision": "sha256 of the file bytes",
            },
            "transport": {
                "active": match config.transport {
                    ipython_mcp_config::Transport::Stdio => "stdio",
                    ipython_mcp_config::Transport::Http => "http",
                    ipython_mcp_config::Transport::JsonLines => "json-lines",
                },
                "supported": ["stdio", "http", "json-lines"],
            },
            "sandbox": self.sandbox_json(),
            "upstream_servers": self.kernels().upstream_servers(),
            "protocol": protocol_json(self),
            "cancellation": cancellation_json(),
            "kernelspecs": self.kernelspecs_json().await,
            "sessions": self.kernels().all().into_iter().map(|listing| listing.id.to_string()).collect::<Vec<_>>(),
        })
    }

    /// The configured sandbox, and what the default kernel has in force.
    fn sandbox_json(&self) -> Value {
        use ipython_mcp_config::SandboxMode;
        let sandbox = &self.config().sandbox;
        // Read from the listing: asking for `default` would start a principal's lazy one.
        let in_force = self
            .kernels()
            .all()
            .into_iter()
            .find(|listing| listing.id.is_default())
            .and_then(|listing| listing.handle.status().kernel)
            .and_then(|kernel| kernel.sandbox);
        serde_json::json!({
            "mode": match sandbox.mode {
                SandboxMode::WorkspaceWrite => "workspace-write",
                SandboxMode::ReadOnly => "read-only",
                SandboxMode::Off => "off",
            },
            "network": match &sandbox.network {
                ipython_mcp_config::SandboxNetwork::On => "on",
                ipython_mcp_config::SandboxNetwork::Off => "off",
                ipython_mcp_config::SandboxNetwork::Allow(_) => "allowlist",
            },
            "hosts": match &sandbox.network {
                ipython_mcp_config::SandboxNetwork::Allow(hosts) => hosts.clone(),
                _ => Vec::new(),
            },
            "explicit": sandbox.explicit,
            "enforced": in_force.as_ref().map(|status| status.enforced),
            "mechanisms": in_force.as_ref().map(|status| status.mechanisms.clone()).unwrap_or_default(),
            "why_not": in_force.and_then(|status| status.why_not),
        })
    }

    /// `resources/read`.
    pub(crate) async fn read_notebook_resource(
        &self,
        uri: &str,
    ) -> Result<rmcp::model::ResourceContents, rmcp::ErrorData> {
        use rmcp::model::ResourceContents;
        let json_text = |value: Value| {
            ResourceContents::text(
                serde_json::to_string_pretty(&value).unwrap_or_default(),
                uri,
            )
            .with_mime_type("application/json")
        };
        match uri {
            CAPABILITIES_URI | JUPYMCP_CAPABILITIES_URI => {
                return Ok(json_text(self.capabilities_json().await))
            }
            KERNELSPECS_URI => return Ok(json_text(self.kernelspecs_json().await)),
            KERNELS_URI => return Ok(json_text(self.kernels_json())),
            _ => {}
        }
        let invalid = |code: Code, message: String| {
            rmcp::ErrorData::invalid_params(
                message.clone(),
                Some(
                    serde_json::json!({"code": code, "message": message, "uri": ipython_mcp_text::shorten(uri, 200)}),
                ),
            )
        };
        if !uri.starts_with("notebook:") {
            return Err(rmcp::ErrorData::resource_not_found(
                "resource_not_found",
                Some(serde_json::json!({"uri": ipython_mcp_text::shorten(uri, 200)})),
            ));
        }
        let relative = ipython_mcp_notebook::path_from_uri(uri)
            .map_err(|error| invalid(notebook_code(&error), error.to_string()))?;
        if relative.starts_with(JUPYTER_PREFIX) {
            let read = async {
                let (store, path) = self.notebook_path(&relative).await?;
                store.read(&path).await.map_err(ToolError::from)
            };
            return match read.await.map_err(ToolError::into_info) {
                Ok(loaded) => Ok(ResourceContents::text(
                    String::from_utf8_lossy(&loaded.notebook.to_bytes()).into_owned(),
                    uri,
                )
                .with_mime_type("application/x-ipynb+json")),
                Err(error) if error.code == Code::NotebookNotFound => {
                    Err(rmcp::ErrorData::resource_not_found(
                        "resource_not_found",
                        Some(serde_json::json!({"uri": ipython_mcp_text::shorten(uri, 200)})),
                    ))
                }
                Err(error) => Err(invalid(error.code, error.message)),
            };
        }
        let workspace = self
            .notebooks()
            .workspace()
            .map_err(|error| {
                let error = crate::error::notebooks_error(&error);
                invalid(error.code, error.message)
            })?
            .clone();
        // Resolving reads the file system too: all of it on the blocking pool.
        let read = tokio::task::spawn_blocking(move || {
            let path = workspace.resolve(&relative)?;
            // By descriptor, as every read of a workspace file (a symlink or FIFO planted by a
            // kernel is refused, not followed).
            let size = workspace.size(&path)?;
            if size > MAX_RESOURCE_BYTES as u64 {
                return Err(ipython_mcp_notebook::Error::InvalidArguments {
                    message: format!(
                        "the notebook is {size} bytes; resources serve at most {MAX_RESOURCE_BYTES} (use notebook_read)"
                    ),
                });
            }
            let loaded = workspace.read(&path)?;
            Ok(String::from_utf8_lossy(&loaded.notebook.to_bytes()).into_owned())
        })
        .await
        .map_err(|_| rmcp::ErrorData::internal_error("reading the notebook failed", None))?;
        match read {
            Ok(text) => {
                Ok(ResourceContents::text(text, uri).with_mime_type("application/x-ipynb+json"))
            }
            Err(ipython_mcp_notebook::Error::NotFound { .. }) => {
                Err(rmcp::ErrorData::resource_not_found(
                    "resource_not_found",
                    Some(serde_json::json!({"uri": ipython_mcp_text::shorten(uri, 200)})),
                ))
            }
            Err(error) => Err(invalid(notebook_code(&error), error.to_string())),
        }
    }
}
