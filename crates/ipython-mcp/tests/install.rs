//! Installing the server the way users do (README, "Install"): a wheel built by maturin from
//! this checkout, installed into a fresh virtual environment and run by `uvx`, each entry point
//! driven through an MCP `execute` round trip and `doctor`; and the crates packaged for
//! crates.io. maturin and uv come from PyPI into `target/tmp`, never into the kernel's
//! environment.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use support::{Family, Server};

/// Every crate `cargo install ipython-mcp` needs, in the order cargo publishes them.
const PUBLISHED: [&str; 7] = [
    "ipython-mcp-config",
    "ipython-mcp-notebook",
    "ipython-mcp-env",
    "ipython-mcp-jupyter",
    "ipython-mcp-kernel",
    "ipython-mcp-mcp",
    "ipython-mcp",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(command: &mut Command) -> String {
    let output = command.output().expect("spawn");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    stdout + &stderr
}

/// The wheel, built once per run from the dev profile without debug info, in a target
/// directory of its own: building in `target/debug` would replace the binary that other test
/// binaries are starting at the same time. The first test to need it builds it, the other
/// waits.
async fn wheel() -> PathBuf {
    static WHEEL: tokio::sync::OnceCell<PathBuf> = tokio::sync::OnceCell::const_new();
    WHEEL.get_or_init(build_wheel).await.clone()
}

async fn build_wheel() -> PathBuf {
    let (_, maturin) = support::python_with("maturin==1.16.0", "maturin", "install-maturin").await;
    let dist = Path::new(env!("CARGO_TARGET_TMPDIR")).join("install/dist");
    let _ = std::fs::remove_dir_all(&dist);
    run(Command::new(maturin.join("bin/maturin"))
        .args(["build", "--profile", "dev", "--locked", "--out"])
        .arg(&dist)
        .current_dir(workspace_root())
        .env("CARGO", env!("CARGO"))
        .env(
            "CARGO_TARGET_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("install/target"),
        )
        .env("CARGO_PROFILE_DEV_DEBUG", "0"));
    let wheels: Vec<PathBuf> = std::fs::read_dir(&dist)
        .expect("dist")
        .map(|entry| entry.expect("entry").path())
        .collect();
    assert_eq!(wheels.len(), 1, "{wheels:?}");
    let name = wheels[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // One wheel per platform, not per Python version: no libpython, no ABI tag.
    assert!(
        name.starts_with(&format!(
            "ipython_mcp-{}-py3-none-",
            env!("CARGO_PKG_VERSION")
        )),
        "{name}"
    );
    wheels[0].clone()
}

/// `execute` through the server that `command` starts, then a clean exit.
async fn round_trip(command: tokio::process::Command) {
    let server = Server::start_command(Family::Handshake, command).await;
    let status = server.wait_settled().await;
    assert_eq!(status["state"], "ready", "{status}");
    let result = server
        .call("execute", json!({"code": "import sys\n6 * 7"}))
        .await;
    assert!(result.ok(), "{result:?}");
    assert_eq!(result.structured["result"]["text/plain"], "42");
    server.stop().await;
}

fn doctor(command: &mut Command) {
    let output = run(command
        .arg("doctor")
        .env("IPYTHON_MCP_CACHE_DIR", support::cache_dir())
        .env_remove("VIRTUAL_ENV")
        .env_remove("IPYTHON_MCP_PYTHON"));
    assert!(output.contains("round trip:      ok"), "{output}");
    assert!(output.contains("all good"), "{output}");
}

#[tokio::test]
async fn the_wheel_installs_and_serves_mcp_from_a_venv_and_from_uvx() {
    let wheel = wheel().await;
    let python = support::provisioned_python().await;
    let (_, uv) = support::python_with("uv==0.13.8", "uv", "install-uv").await;
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("install");

    // pip into a fresh virtual environment, from the wheel alone (it has no dependencies).
    let venv = work.join("venv");
    let _ = std::fs::remove_dir_all(&venv);
    run(Command::new(&python).args(["-m", "venv"]).arg(&venv));
    run(Command::new(venv.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
        ])
        .arg(&wheel));
    let entry_point = venv.join("bin/ipython-mcp");
    round_trip(support::command_for(&entry_point, &[], &[])).await;
    doctor(&mut Command::new(&entry_point));

    // `uvx --from <wheel> ipython-mcp`, offline: nothing but the wheel is needed.
    let uv_cache = work.join("uv-cache");
    let uvx_args = [
        "--offline",
        "--python",
        python.to_str().expect("utf-8 path"),
        "--from",
        wheel.to_str().expect("utf-8 path"),
        "ipython-mcp",
    ];
    let uv_cache_str = uv_cache.to_str().expect("utf-8 path");
    let uvx = uv.join("bin/uvx");
    // The first run installs the wheel into uv's cache, which takes longer than the handshake
    // bound; clients see that once, as here.
    let version = run(Command::new(&uvx)
        .args(uvx_args)
        .arg("--version")
        .env("UV_CACHE_DIR", uv_cache_str));
    assert!(version.contains(env!("CARGO_PKG_VERSION")), "{version}");
    round_trip(support::command_for(
        &uvx,
        &uvx_args,
        &[("UV_CACHE_DIR", uv_cache_str)],
    ))
    .await;
    doctor(
        Command::new(&uvx)
            .args(uvx_args)
            .env("UV_CACHE_DIR", uv_cache_str),
    );
}

#[tokio::test]
async fn pipx_puts_ipython_mcp_on_path() {
    let wheel = wheel().await;
    let (python, pipx) = support::python_with("pipx==1.18.4", "pipx", "install-pipx").await;
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("install/pipx");
    let _ = std::fs::remove_dir_all(&home);
    let bin = home.join("bin");
    run(Command::new(&python)
        .args(["-m", "pipx", "install"])
        .arg(&wheel)
        .env("PYTHONPATH", &pipx)
        .env("PIPX_HOME", home.join("home"))
        .env("PIPX_BIN_DIR", &bin)
        .env("PIPX_MAN_DIR", home.join("man"))
        .env("PIPX_DEFAULT_PYTHON", &python));
    doctor(&mut Command::new(bin.join("ipython-mcp")));
}

#[test]
fn the_workspace_packages_for_crates_io() {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("publish");
    // `--no-verify`: verifying would build the whole workspace a second time from the packaged
    // sources; packaging still checks the metadata and resolves every dependency, the path
    // ones by version, against the crates.io index.
    let output = run(Command::new(env!("CARGO"))
        .args([
            "publish",
            "--workspace",
            "--dry-run",
            "--no-verify",
            "--allow-dirty",
            "--locked",
        ])
        .current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", &target)
        .env("CARGO_TERM_COLOR", "never"));
    for name in PUBLISHED {
        let packaged = format!("Packaging {name} v{}", env!("CARGO_PKG_VERSION"));
        assert!(output.contains(&packaged), "{name} not packaged:\n{output}");
    }
    assert!(!output.contains("Packaging ipython-mcp-bench"), "{output}");
}
