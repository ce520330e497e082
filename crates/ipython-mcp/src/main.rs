//! `ipython-mcp`: an MCP server that gives AI agents live, persistent Python (see the library).

fn main() -> std::process::ExitCode {
    ipython_mcp::main()
}
