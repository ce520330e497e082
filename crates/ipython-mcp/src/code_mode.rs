//! Code mode's glue: the configured upstream MCP servers (`ipython-mcp-upstream`) as the
//! sessions' [`CodeMode`], one set of connections per server or principal.

use std::sync::Arc;

use std::future::Future;
use std::pin::Pin;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
use ipython_mcp_kernel::CodeMode;

#[derive(Debug)]
struct Upstreams(Arc<ipython_mcp_upstream::Upstreams>);

impl CodeMode for Upstreams {
    fn names(&self) -> Vec<String> {
        self.0.names()
    }

    fn answer(
        &self,
        request: serde_json::Value,
        progress: ipython_mcp_kernel::UpstreamProgress,
    ) -> BoxFuture<serde_json::Value> {
        let upstreams = Arc::clone(&self.0);
        Box::pin(async move { upstreams.answer(&request, Some(progress)).await })
    }

    fn status(&self) -> Vec<ipython_mcp_kernel::UpstreamStatus> {
        self.0
            .status()
            .into_iter()
            .map(|status| ipython_mcp_kernel::UpstreamStatus {
                name: status.name,
                transport: status.transport.to_owned(),
                state: status.state.to_owned(),
                error: status.error,
                tools: status.tools,
            })
            .collect()
    }
}

/// The upstream servers of the configuration's file, connected at first use; `None` without
/// one. Each call makes a set of its own (a principal's connections are theirs alone).
pub(crate) fn upstreams(
    config: &ipython_mcp_config::Config,
) -> anyhow::Result<Option<Arc<dyn CodeMode>>> {
    let Some(path) = &config.upstream_servers else {
        return Ok(None);
    };
    let upstreams = ipython_mcp_upstream::Upstreams::load(path).map_err(|error| {
        anyhow::anyhow!(
            "invalid configuration: {} (--{}): {error}",
            ipython_mcp_config::UPSTREAM_SERVERS.env,
            ipython_mcp_config::UPSTREAM_SERVERS.flag
        )
    })?;
    // An upstream that ignores the end of its stdin would otherwise outlive a killed server;
    // one that kept the server's controlling terminal could type into the user's shell.
    let upstreams = upstreams.with_child_setup(|command| {
        #[cfg(target_os = "linux")]
        ipython_mcp_jupyter::die_with_parent(command);
        ipython_mcp_jupyter::new_session(command);
    });
    Ok(Some(Arc::new(Upstreams(Arc::new(upstreams)))))
}
