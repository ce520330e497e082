//! The Python environment the benchmark's kernels run on.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

pub(crate) async fn resolve_python() -> anyhow::Result<PathBuf> {
    resolve_python_in(None).await
}

/// As [`resolve_python`], with `cache_dir` in place of the configured one when given.
pub(crate) async fn resolve_python_in(cache_dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
    let cache_dir = match cache_dir
        .or_else(|| std::env::var_os(ipython_mcp_config::CACHE_DIR.env).map(PathBuf::from))
    {
        Some(dir) => dir,
        None => ipython_mcp_env::default_cache_dir(home.as_deref(), xdg.as_deref())
            .context("no cache dir")?,
    };
    let resolver = ipython_mcp_env::Resolver {
        explicit_python: std::env::var_os(ipython_mcp_config::PYTHON.env).map(PathBuf::from),
        virtual_env: std::env::var_os("VIRTUAL_ENV").map(PathBuf::from),
        working_dir: std::env::current_dir()?,
        path_var: std::env::var_os("PATH"),
        cache_dir,
        install_timeout: Duration::from_secs(600),
        named: None,
        confinement: Default::default(),
    };
    Ok(resolver.resolve(&|_| {}).await?.executable)
}
