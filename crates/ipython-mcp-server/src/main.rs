//! `ipython-mcp-server`: the `ipython-mcp` program under the name of its PyPI distribution.
//!
//! maturin's `bin` bindings name a wheel's scripts after its binaries, and `uvx NAME` runs the
//! script called NAME of the distribution called NAME. The distribution cannot be called
//! `ipython-mcp` (another project holds that name on PyPI), so the wheel is built from this
//! crate, whose one binary is named after the distribution.

fn main() -> std::process::ExitCode {
    ipython_mcp::main()
}
