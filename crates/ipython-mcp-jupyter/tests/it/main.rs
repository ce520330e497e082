//! The jupyter crate's integration tests, in one test binary. `kernel` runs real kernels, the
//! `e2e` tier (CONTRIBUTING.md, "Tests").

#[path = "../../../ipython-mcp-env/tests/ci/mod.rs"]
#[allow(dead_code)] // only its tier check
mod ci;

#[cfg(feature = "e2e")]
mod kernel;

/// Under CI, the tiers above were built (see `ci::require_every_tier_on_ci`).
#[test]
fn ci_builds_every_test_tier() {
    ci::require_every_tier_on_ci(cfg!(feature = "e2e"), cfg!(feature = "registry"));
}
