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

/// The upstream servers of the configuration's files, connected at first use; `None` without
/// any. Each call makes a set of its own (a principal's connections are theirs alone).
pub(crate) fn upstreams(
    config: &ipython_mcp_config::Config,
) -> anyhow::Result<Option<Arc<dyn CodeMode>>> {
    if config.upstream_servers.is_empty() {
        return Ok(None);
    }
    let upstreams =
        ipython_mcp_upstream::Upstreams::load(&config.upstream_servers).map_err(|error| {
            anyhow::anyhow!(
                "invalid configuration: {} (--{}): {error}",
                ipython_mcp_config::UPSTREAM_SERVERS.env,
                ipython_mcp_config::UPSTREAM_SERVERS.flag
            )
        })?;
    // Each upstream's process runs in a process group that ends with the server, however the
    // server ends: a launcher's own child (`npx`'s node, a script's command) that ignores the
    // end of its stdin would otherwise outlive it. It keeps no controlling terminal, through
    // which it could type into the user's shell.
    let upstreams = upstreams.with_child_setup(Arc::new(|command| {
        let watch = ipython_mcp_jupyter::GroupWatch::start().map_err(|error| error.to_string())?;
        watch.join(command);
        Ok(Box::new(watch) as ipython_mcp_upstream::ChildGuard)
    }));
    let upstreams = Arc::new(upstreams);
    let mut opened = OPENED.lock().expect("upstreams lock");
    opened.retain(|known| known.strong_count() > 0);
    opened.push(Arc::downgrade(&upstreams));
    Ok(Some(Arc::new(Upstreams(upstreams))))
}

/// Every set of upstreams made and not yet dropped, for [`close_all`].
static OPENED: std::sync::Mutex<Vec<std::sync::Weak<ipython_mcp_upstream::Upstreams>>> =
    std::sync::Mutex::new(Vec::new());

/// Closes every upstream connection when the server stops, after the sessions: each upstream
/// ends as it would in a client that quits (the end of its stdin, then SIGTERM), and then its
/// process group is killed. A set dropped earlier (a principal removed) ended its groups then.
pub(crate) async fn close_all() {
    let opened: Vec<_> = OPENED
        .lock()
        .expect("upstreams lock")
        .drain(..)
        .filter_map(|known| known.upgrade())
        .collect();
    let mut closing = tokio::task::JoinSet::new();
    for upstreams in opened {
        closing.spawn(async move { upstreams.close().await });
    }
    while closing.join_next().await.is_some() {}
}
