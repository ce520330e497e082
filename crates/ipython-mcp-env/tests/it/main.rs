//! The environment crate's integration tests, in one test binary (built and linked once).
//! `resolution` (fake interpreters and installers) is the fast tier; `named` and `provision`
//! install from PyPI on every run, the `registry` tier (CONTRIBUTING.md, "Tests").

#[path = "../ci/mod.rs"]
mod ci;

#[cfg(feature = "registry")]
mod named;
#[cfg(feature = "registry")]
mod provision;
mod resolution;

/// Under CI, the tiers above were built (see `ci::require_every_tier_on_ci`).
#[test]
fn ci_builds_every_test_tier() {
    ci::require_every_tier_on_ci(cfg!(feature = "e2e"), cfg!(feature = "registry"));
}
