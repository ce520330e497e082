//! `ipython-mcp`: an MCP server that gives AI agents live, persistent Python.

mod cli;
mod doctor;
mod logging;
mod serve;

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let config = match cli.config() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("ipython-mcp: {error}");
            return ExitCode::from(2);
        }
    };
    logging::init(&config.log);
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
        match cli.command {
            Some(cli::Command::Doctor) => doctor::run(config).await,
            None => serve::run(config).await,
        }
    });
    // Kernels and their tasks are already closed; don't wait on a blocked stdin read.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("ipython-mcp: {error:#}");
            ExitCode::FAILURE
        }
    }
}
