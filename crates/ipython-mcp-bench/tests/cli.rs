//! The benchmark's command line. (Being an integration test, this also makes `cargo test` build
//! the benchmark binary with the rest of the suite, so CI's soak runs it without a build of its
//! own.)

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ipython-mcp-bench"))
        .args(args)
        .output()
        .expect("run the benchmark")
}

#[test]
fn a_mistyped_subcommand_is_refused_with_the_usage_instead_of_starting_the_full_run() {
    let output = bench(&["sandbx"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unknown subcommand \"sandbx\"") && stderr.contains("sandbox [ROUNDS]"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "{output:?}");
}

#[test]
fn help_prints_every_subcommand() {
    let output = bench(&["--help"]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    for subcommand in [
        "execute",
        "soak [--seconds N]",
        "code-mode [CALLS]",
        "images",
    ] {
        assert!(stdout.contains(subcommand), "{subcommand}: {stdout}");
    }
}

#[test]
fn a_bad_soak_argument_is_refused_before_anything_starts() {
    let output = bench(&["soak", "--seconds", "soon"]);
    assert!(!output.status.success(), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("takes a whole number"), "{stderr}");
}
