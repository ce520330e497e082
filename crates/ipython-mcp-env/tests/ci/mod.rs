//! Whether the tests run in CI, where nothing may be skipped. Shared by the test binaries that
//! need something from the machine (`python3`, npm), including the binary crate's.

/// True when `CI` is set to anything but empty, `false` or `0`: CI systems set `true`, `1` or
/// their own name, and a skip that only `CI=true` prevents would pass silently under the others.
pub fn on_ci() -> bool {
    std::env::var_os("CI").is_some_and(|value| {
        let value = value.to_string_lossy().trim().to_ascii_lowercase();
        !matches!(value.as_str(), "" | "false" | "0")
    })
}

/// Skips (prints why) outside CI; fails under CI, where a missing tool is a broken machine.
pub fn skip_outside_ci(reason: &str) {
    assert!(
        !on_ci(),
        "{reason} (and CI is set, so this test may not skip)"
    );
    eprintln!("SKIPPED: {reason}");
}

/// Fails under CI when this build left out a test tier: the end-to-end tests and those that
/// install from registries build only with the `e2e` and `registry` features (CONTRIBUTING.md,
/// "Tests"), and a CI run without them would pass having run neither. `e2e` and `registry` are
/// the calling crate's `cfg!(feature = …)`.
#[allow(dead_code)] // the binary crate checks from `tests/tiers.rs`, not from `tests/it`
pub fn require_every_tier_on_ci(e2e: bool, registry: bool) {
    if !on_ci() {
        return;
    }
    let missing: Vec<&str> = [("e2e", e2e), ("registry", registry)]
        .into_iter()
        .filter_map(|(tier, built)| (!built).then_some(tier))
        .collect();
    assert!(
        missing.is_empty(),
        "CI is set but this build leaves out the {} test tier(s) of {}: CI runs every tier, \
         `cargo test --workspace --features e2e,registry`",
        missing.join(" and "),
        env!("CARGO_PKG_NAME"),
    );
}

/// Installs `package_json` (its text) into `dir` with npm, unless an earlier run installed
/// exactly it and `ready` holds; `false` (skipped) only outside CI when npm is missing.
/// `extra` goes to `npm install`; `what` names the tools for messages.
#[allow(dead_code)] // not every test binary that includes this module installs npm tools
pub fn npm_install(
    dir: &std::path::Path,
    package_json: &str,
    extra: &[&str],
    what: &str,
    ready: impl Fn(&std::path::Path) -> bool,
) -> bool {
    let installed = dir.join("package.json");
    if std::fs::read_to_string(&installed).ok().as_deref() == Some(package_json) && ready(dir) {
        return true;
    }
    let npm_found = std::process::Command::new("npm")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !npm_found {
        skip_outside_ci(&format!("npm not found; {what} did not run"));
        return false;
    }
    std::fs::create_dir_all(dir).expect("create the npm directory");
    std::fs::write(&installed, package_json).expect("write package.json");
    let status = std::process::Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--no-package-lock",
            "--loglevel=error",
        ])
        .args(extra)
        .current_dir(dir)
        .status()
        .expect("run npm");
    assert!(status.success(), "npm install for {what} failed");
    assert!(ready(dir), "npm installed {what} incompletely");
    true
}
