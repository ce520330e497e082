//! The kernel crate's integration tests, in one test binary (built and linked once).

#[path = "../../../ipython-mcp-env/tests/ci/mod.rs"]
mod ci;

// The scripted fake kernels are the `test-support` feature's; `cargo test --workspace` has it
// (the MCP crate's tests enable it), `cargo test -p ipython-mcp-kernel` alone does not.
#[cfg(feature = "test-support")]
mod fake_kernels;
mod python_helper;

#[cfg(not(feature = "test-support"))]
#[test]
fn the_fake_kernel_tests_run_with_the_test_support_feature() {
    ci::skip_outside_ci("the fake-kernel tests need `--features test-support`");
}
