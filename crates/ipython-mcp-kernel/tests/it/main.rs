//! The kernel crate's integration tests, in one test binary (built and linked once).

#[path = "../../../ipython-mcp-env/tests/ci/mod.rs"]
mod ci;

// The scripted fake kernels are the `test-support` feature's; `cargo test --workspace` has it
// (the MCP crate's tests enable it), `cargo test -p ipython-mcp-kernel` alone does not.
#[cfg(feature = "test-support")]
mod fake_kernels;
// The helper's pytest suite runs real kernels: the `e2e` tier (CONTRIBUTING.md, "Tests").
#[cfg(feature = "e2e")]
mod python_helper;

#[cfg(not(feature = "test-support"))]
#[test]
fn the_fake_kernel_tests_run_with_the_test_support_feature() {
    ci::skip_outside_ci("the fake-kernel tests need `--features test-support`");
}

/// Under CI, the tiers above were built (see `ci::require_every_tier_on_ci`).
#[test]
fn ci_builds_every_test_tier() {
    ci::require_every_tier_on_ci(cfg!(feature = "e2e"), cfg!(feature = "registry"));
}
