//! Runs the Python helper's own pytest suite (`python/tests`) as part of `cargo test`, with the
//! interpreter the product provisions (the managed default environment, shared with the other
//! tests of this run) and pytest installed beside it in the target directory, never into it.
//! The suite's kernels install the helper with the server's own install code (bootstrap and
//! embedded package), which this test writes to a file for them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn target_tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

async fn provisioned_python() -> PathBuf {
    let resolver = ipython_mcp_env::Resolver {
        explicit_python: None,
        virtual_env: None,
        working_dir: target_tmp(),
        path_var: std::env::var_os("PATH"),
        cache_dir: target_tmp().join("ipython-mcp-cache"),
        install_timeout: Duration::from_secs(600),
        named: None,
        confinement: Default::default(),
    };
    resolver
        .resolve(&|_| {})
        .await
        .expect("the product provisions a Python with ipykernel")
        .executable
}

fn ensure_pytest(python: &Path, deps: &Path) {
    if deps.join("pytest").is_dir() {
        return;
    }
    let status = Command::new(python)
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "-q",
            "--target",
        ])
        .arg(deps)
        .args(["pytest>=7"])
        .status()
        .expect("run pip");
    assert!(status.success(), "installing pytest failed");
}

#[tokio::test]
async fn python_helper_pytest_suite_passes() {
    let python = provisioned_python().await;
    let deps = target_tmp().join("pytest-deps");
    ensure_pytest(&python, &deps);
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/tests");
    let install_code = tempfile::NamedTempFile::new_in(target_tmp()).expect("create a temp file");
    let code = ipython_mcp_kernel::helper::install_code(
        &ipython_mcp_config::OutputLimits::default(),
        &ipython_mcp_config::Namespace::default(),
        ipython_mcp_kernel::helper::Setup::default(),
    );
    std::fs::write(install_code.path(), code).expect("write the install code");
    let output = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(&tests)
        .env("PYTHONPATH", &deps)
        // Read by tests/harness.py: the kernel tests install the helper exactly as the server does.
        .env("IPYTHON_MCP_HELPER_INSTALL_CODE", install_code.path())
        // Under this test the kernel tests must run, not skip.
        .env("CI", "true")
        .output()
        .expect("run pytest");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "pytest failed:\n{stdout}\n{stderr}"
    );
    let summary = stdout
        .lines()
        .rev()
        .find(|line| line.contains(" passed"))
        .unwrap_or_default();
    assert!(!summary.contains("skipped"), "nothing may skip: {summary}");
    eprintln!("pytest: {summary}");
}
