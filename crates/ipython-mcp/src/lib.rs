//! `ipython-mcp`: an MCP server that gives AI agents live, persistent Python.
//!
//! The whole program is this library's [`main`], so that more than one executable can be built
//! from it: `ipython-mcp` (this crate's, what `cargo install ipython-mcp` installs) and
//! `ipython-mcp-server` (the `ipython-mcp-server` crate's, the one executable of the PyPI wheel,
//! named after the distribution so that `uvx ipython-mcp-server` runs it).

mod bearer;
mod cli;
mod code_mode;
mod doctor;
mod http;
mod jsonlines;
mod logging;
mod oauth;
mod principals;
mod proxy;
mod secrets;
mod serve;
mod test_mode;

use std::process::ExitCode;

/// The kernels' sandbox launcher (the first process of each kernel, started by this server),
/// when this process is one: it must run before anything else, single-threaded. Otherwise
/// notes this executable as the launcher kernels start under.
fn sandbox_launcher() -> Option<ExitCode> {
    #[cfg(target_os = "linux")]
    {
        let mut args = std::env::args_os().skip(1);
        if args.next().as_deref()
            == Some(std::ffi::OsStr::new(ipython_mcp_sandbox::LAUNCHER_ARGUMENT))
        {
            return Some(ipython_mcp_sandbox::launch(args.collect()));
        }
        if let Ok(executable) = std::env::current_exe() {
            ipython_mcp_sandbox::use_launcher(executable);
        }
    }
    None
}

/// Parses the command line and runs what it asks for: the MCP server or `doctor`.
pub fn main() -> ExitCode {
    if let Some(launched) = sandbox_launcher() {
        return launched;
    }
    // Every reqwest client of ours brings its own TLS configuration; this keeps one that does
    // not (`reqwest::Client::new()`) from panicking for want of a crypto provider.
    ipython_mcp_upstream::install_crypto_provider();
    let cli = cli::Cli::parse();
    let mut config = match cli.config() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("ipython-mcp: {error}");
            return ExitCode::from(2);
        }
    };
    // The tokens have been read: out of the environment kernels inherit, and out of what
    // kernel code could read of this process (still single-threaded here, before the runtime
    // starts; see secrets.rs).
    secrets::conceal(&config);
    if let Some(jupyter) = &mut config.jupyter {
        if let ipython_mcp_config::JupyterToken::File(path) = &jupyter.token {
            let setting = ipython_mcp_config::JUPYTER_TOKEN_FILE;
            match http::read_token_file(setting, path, ipython_mcp_config::Token::parse_issued) {
                Ok(token) => jupyter.token = ipython_mcp_config::JupyterToken::Given(token),
                Err(error) => {
                    eprintln!("ipython-mcp: {error}");
                    return ExitCode::from(2);
                }
            }
        }
        if let Some(warning) = jupyter.warning() {
            eprintln!("ipython-mcp: {warning}");
        }
    }
    if cli.json_lines {
        config.transport = ipython_mcp_config::Transport::JsonLines;
    }
    let test_mode = match test_mode::TestMode::from_env(&config) {
        Ok(mode) => mode,
        Err(error) => {
            eprintln!("ipython-mcp: {error}");
            return ExitCode::from(2);
        }
    };
    match test_mode::pipe_death_watch_from_env() {
        Ok(true) => ipython_mcp_jupyter::use_pipe_death_watch(),
        Ok(false) => {}
        Err(error) => {
            eprintln!("ipython-mcp: {error}");
            return ExitCode::from(2);
        }
    }
    // Resolved before anything starts: a bad token file is a configuration error.
    let credentials = match (config.transport, &cli.command) {
        (ipython_mcp_config::Transport::Http, None) if test_mode.requires_token() => {
            match http::credentials(&config.http.token, config.http.oauth.is_some()) {
                Ok(credentials) => Some(credentials),
                Err(error) => {
                    eprintln!("ipython-mcp: {error}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => None,
    };
    logging::init(cli.log_filter(&config));
    // Held until the process ends, then removed (after every kernel is gone).
    let private_dir = serve::make_private_dir();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("ipython-mcp: could not start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        let result = match cli.command {
            Some(cli::Command::Doctor { .. }) => doctor::run(config).await,
            None if config.transport == ipython_mcp_config::Transport::JsonLines => {
                serve::run_json_lines(config).await
            }
            None => serve::run(config, credentials, test_mode).await,
        };
        // The sessions are closed: no kernel calls an upstream any more.
        code_mode::close_all().await;
        result
    });
    // Kernels and their tasks are already closed; don't wait on a blocked stdin read.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    drop(private_dir);
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("ipython-mcp: {error:#}");
            ExitCode::FAILURE
        }
    }
}
