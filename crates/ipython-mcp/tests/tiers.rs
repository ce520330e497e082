//! The fast tier's check on the others: this crate's end-to-end tests (`tests/it`) build only
//! with the `e2e` feature, those that install from registries with `registry`
//! (CONTRIBUTING.md, "Tests"), so a CI run without them fails here instead of passing without
//! them. (A binary of its own: `tests/it` is the tier it checks for.)

#[path = "../../ipython-mcp-env/tests/ci/mod.rs"]
#[allow(dead_code)] // only its tier check
mod ci;

#[test]
fn ci_builds_every_test_tier() {
    ci::require_every_tier_on_ci(cfg!(feature = "e2e"), cfg!(feature = "registry"));
}
