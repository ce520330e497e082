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
