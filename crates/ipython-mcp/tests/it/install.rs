//! Installing the server the way users do (README, "Install" and "Connect your client"): a
//! wheel built by maturin from this checkout, offered under its PyPI name
//! (`ipython-mcp-server`) from a local directory instead of the index, installed with uv into a
//! fresh virtual environment, run through the very command the README gives every client
//! (`uvx ipython-mcp-server`) and installed with pipx, each entry point driven through an MCP
//! `execute` round trip and `doctor`; and the crates packaged for crates.io. maturin and uv come
//! from PyPI into `target/tmp`, never into the kernel's environment.

use crate::support;

// The one definition of "running in CI" for every test binary of the workspace.
use crate::ci;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use support::{Family, Server};

/// The distribution's name on PyPI, and the name of the wheel's one executable.
const DISTRIBUTION: &str = "ipython-mcp-server";

/// Every crate `cargo install ipython-mcp` needs, in the order cargo publishes them.
const PUBLISHED: [&str; 9] = [
    "ipython-mcp-config",
    "ipython-mcp-upstream",
    "ipython-mcp-notebook",
    "ipython-mcp-env",
    "ipython-mcp-jupyter",
    "ipython-mcp-kernel",
    "ipython-mcp-notebooks",
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

/// The wheel of these sources, built from the dev profile without debug info. Every install
/// test of this run shares it, and so does every later run until the sources change: it is
/// kept in `target/tmp/install/wheel/<key>`, keyed on what goes into it (`sources_key`). It is
/// built beside that and renamed into place whole, so a directory of that name always holds
/// one complete wheel; two test processes that both find none both build (cargo's lock on the
/// target directory makes the second build a relink) and the first rename wins.
async fn wheel() -> PathBuf {
    static WHEEL: tokio::sync::OnceCell<PathBuf> = tokio::sync::OnceCell::const_new();
    WHEEL.get_or_init(built_wheel).await.clone()
}

/// The pinned maturin, from PyPI into `target/tmp`.
const MATURIN: &str = "maturin==1.16.0";

async fn built_wheel() -> PathBuf {
    let (_, maturin) = support::python_with(MATURIN, "maturin", "install-maturin").await;
    tokio::task::spawn_blocking(move || {
        let wheels = Path::new(env!("CARGO_TARGET_TMPDIR")).join("install/wheel");
        std::fs::create_dir_all(&wheels).expect("create the wheel directory");
        let key = sources_key();
        let dist = wheels.join(&key);
        if !dist.is_dir() {
            let partial = wheels.join(format!(".{key}.{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&partial);
            build_wheel(&maturin, &partial);
            if std::fs::rename(&partial, &dist).is_err() {
                // Another process's build of the same sources got there first.
                assert!(dist.is_dir(), "the wheel is in neither place");
                std::fs::remove_dir_all(&partial).expect("remove the second build");
            }
            // Wheels of other sources go: only the current one is kept.
            for entry in std::fs::read_dir(&wheels).expect("the wheel directory") {
                let path = entry.expect("entry").path();
                let name = path.file_name().expect("a name").to_string_lossy();
                if name != key && !name.starts_with('.') {
                    std::fs::remove_dir_all(&path).expect("remove an older wheel");
                }
            }
        }
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
                "ipython_mcp_server-{}-py3-none-",
                env!("CARGO_PKG_VERSION")
            )),
            "{name}"
        );
        wheels[0].clone()
    })
    .await
    .expect("the wheel")
}

/// Builds the wheel into `dist` (which then holds it alone). In the suite's own target
/// directory and profile: the dependencies `cargo test` built are reused, so the wheel costs
/// the workspace's own crates (in the release feature set) instead of a second cold build.
/// (Its binary is `ipython-mcp-server`, so the `ipython-mcp` other tests start is untouched.)
fn build_wheel(maturin: &Path, dist: &Path) {
    let mut maturin = Command::new(maturin.join("bin/maturin"));
    // Not the variables cargo gives this test process about its own package: build scripts
    // (ring's, through cc) rerun when one of them differs from the build `cargo test` made,
    // and the dependencies both builds share would be compiled again, here and in the next
    // `cargo test`.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || [
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "OUT_DIR",
            ]
            .contains(&name.as_ref())
        {
            maturin.env_remove(name.as_ref());
        }
    }
    run(maturin
        .args(["build", "--profile", "dev", "--locked", "--out"])
        .arg(dist)
        .current_dir(workspace_root())
        .env("CARGO", env!("CARGO"))
        .env(
            "CARGO_TARGET_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR"))
                .parent()
                .expect("the target directory"),
        ));
}

/// A digest of everything the wheel is made of: the workspace's manifests and lock file,
/// `pyproject.toml`, README.md (the distribution's description), every file under `crates/`
/// and `docs/src/` (the binary embeds chapters of the documentation), the toolchain and the
/// maturin release. Paths count too, so a renamed file is a change.
fn sources_key() -> String {
    let root = workspace_root();
    let mut files: Vec<PathBuf> = ["Cargo.toml", "Cargo.lock", "pyproject.toml", "README.md"]
        .iter()
        .map(|name| root.join(name))
        .collect();
    for dir in ["crates", "docs/src"] {
        files_under(&root.join(dir), &mut files);
    }
    files.sort();
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    let mut add = |bytes: &[u8]| {
        digest.update(&(bytes.len() as u64).to_le_bytes());
        digest.update(bytes);
    };
    for file in &files {
        let relative = file.strip_prefix(&root).expect("under the workspace");
        add(relative.to_string_lossy().as_bytes());
        add(&std::fs::read(file).unwrap_or_else(|err| panic!("read {}: {err}", file.display())));
    }
    add(run(Command::new("rustc").arg("-vV")).as_bytes());
    add(MATURIN.as_bytes());
    digest
        .finish()
        .as_ref()
        .iter()
        .take(16)
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn files_under(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|err| panic!("{}: {err}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files_under(&path, found);
        } else {
            found.push(path);
        }
    }
}

/// Environment variables that make uv find the distribution by name in `dist` (the built
/// wheel) instead of on PyPI, and nothing else: so the commands users type, unchanged, install
/// this checkout's wheel.
fn local_index(dist: &Path, python: &Path, uv_cache: &Path) -> Vec<(String, String)> {
    let text = |path: &Path| path.to_str().expect("utf-8 path").to_owned();
    vec![
        ("UV_OFFLINE".into(), "1".into()),
        ("UV_NO_INDEX".into(), "1".into()),
        ("UV_FIND_LINKS".into(), text(dist)),
        ("UV_PYTHON".into(), text(python)),
        ("UV_CACHE_DIR".into(), text(uv_cache)),
    ]
}

/// The command every client snippet of the README starts the server with (Claude Code's and
/// Codex's `mcp add … -- COMMAND`, the JSON of Claude Desktop, Cursor and VS Code), checked to
/// be one and the same.
fn readme_client_command() -> Vec<String> {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README");
    let section = readme
        .split("\n## Connect your client\n")
        .nth(1)
        .expect("a \"Connect your client\" section")
        .split("\n## ")
        .next()
        .expect("section text");
    let mut commands: Vec<(String, Vec<String>)> = Vec::new();
    for line in section.lines() {
        if let Some((client, command)) = line.split_once(" -- ") {
            if client.contains(" mcp add ") {
                let words = command.split_whitespace().map(str::to_owned).collect();
                commands.push((line.to_owned(), words));
            }
        }
    }
    for block in section.split("```json\n").skip(1) {
        let text = block.split("```").next().expect("block");
        let config: serde_json::Value = serde_json::from_str(text).expect("the snippet is JSON");
        let servers = config
            .get("mcpServers")
            .or_else(|| config.get("servers"))
            .expect("mcpServers or servers");
        let server = &servers["ipython"];
        let mut words = vec![server["command"].as_str().expect("command").to_owned()];
        words.extend(
            server["args"]
                .as_array()
                .expect("args")
                .iter()
                .map(|arg| arg.as_str().expect("string arg").to_owned()),
        );
        commands.push((text.to_owned(), words));
    }
    // Two `mcp add` lines for each of Claude Code and Codex, and the two JSON snippets.
    assert_eq!(commands.len(), 6, "{commands:#?}");
    let first = commands[0].1.clone();
    for (snippet, command) in &commands {
        assert_eq!(command, &first, "the README's clients disagree:\n{snippet}");
    }
    assert_eq!(first, ["uvx", DISTRIBUTION]);
    // The install section's first commands name the same distribution.
    assert!(
        readme.contains(&format!("\nuvx {DISTRIBUTION} ")),
        "README, Install: uvx {DISTRIBUTION}"
    );
    assert!(
        readme.contains(&format!("\npipx install {DISTRIBUTION} ")),
        "README, Install: pipx install {DISTRIBUTION}"
    );
    first
}

/// `execute` through the server that `command` starts, then a clean exit.
async fn round_trip(command: tokio::process::Command) {
    let server = Server::start_command(Family::Handshake, command).await;
    let status = server.wait_settled().await;
    assert_eq!(status["state"], "ready", "{status}");
    // What the model reads, in either result shape (the README's command runs the default).
    let result = server
        .call_raw("execute", json!({"code": "import sys\n6 * 7"}))
        .await;
    assert!(!result.is_error, "{result:?}");
    assert!(result.text().contains("--- result ---\n42"), "{result:?}");
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
async fn the_readme_command_installs_the_wheel_by_its_pypi_name_and_serves_mcp() {
    let readme_command = readme_client_command();
    let wheel = wheel().await;
    let dist = wheel.parent().expect("dist").to_owned();
    let python = support::provisioned_python().await;
    let (_, uv) = support::python_with("uv==0.13.8", "uv", "install-uv").await;
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("install");
    // A fresh cache: uv would take a wheel of the same name and version it cached in an
    // earlier run (an older build of this checkout) over the one just built. The wheel has no
    // dependencies, so nothing else is needed offline.
    let uv_cache = work.join("uv-cache");
    let _ = std::fs::remove_dir_all(&uv_cache);
    let index = local_index(&dist, &python, &uv_cache);
    // `uvx` on PATH first, as the README's command expects it there.
    let path = format!(
        "{}:{}",
        uv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );

    // uv into a fresh virtual environment, by name: the one executable is named after the
    // distribution.
    let venv = work.join("venv");
    let _ = std::fs::remove_dir_all(&venv);
    run(Command::new(uv.join("bin/uv"))
        .args(["venv", "-q"])
        .arg(&venv)
        .envs(index.clone()));
    run(Command::new(uv.join("bin/uv"))
        .args(["pip", "install", "-q", "--python"])
        .arg(venv.join("bin/python"))
        .arg(DISTRIBUTION)
        .envs(index.clone()));
    let entry_point = venv.join("bin").join(DISTRIBUTION);
    assert!(
        !venv.join("bin/ipython-mcp").exists(),
        "one executable per wheel"
    );
    let mut command = support::command_for(&entry_point, &[], &[]);
    command.envs(index.clone());
    round_trip(command).await;
    doctor(&mut Command::new(&entry_point));

    // The README's command for every client, word for word: `uvx ipython-mcp-server`.
    let (program, args) = readme_command.split_first().expect("a command");
    let readme = |extra: &[&str]| {
        let mut command = Command::new(program);
        command
            .args(args)
            .args(extra)
            .envs(index.clone())
            .env("PATH", &path);
        command
    };
    // The first run installs the wheel into uv's cache, which takes longer than the handshake
    // bound; clients see that once, as here.
    let version = run(&mut readme(&["--version"]));
    assert!(version.contains(env!("CARGO_PKG_VERSION")), "{version}");
    let mut command = tokio::process::Command::from(readme(&[]));
    command
        .env("IPYTHON_MCP_CACHE_DIR", support::cache_dir())
        .env("IPYTHON_MCP_LOG", "warn")
        .env("IPYTHON_MCP_SPARE_KERNELS", "0")
        .env("IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS", "120")
        .env_remove("VIRTUAL_ENV")
        .env_remove("IPYTHON_MCP_PYTHON")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    round_trip(command).await;
    doctor(&mut readme(&[]));
}

#[tokio::test]
async fn pipx_installs_the_distribution_by_name_and_puts_its_command_on_path() {
    let wheel = wheel().await;
    let dist = wheel.parent().expect("dist").to_owned();
    let (python, pipx) = support::python_with("pipx==1.18.4", "pipx", "install-pipx").await;
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("install/pipx");
    let _ = std::fs::remove_dir_all(&home);
    let bin = home.join("bin");
    // `pipx install ipython-mcp-server`, as the README says, with the local wheel offered
    // beside the index (pipx upgrades its own pip from PyPI first, with the same pip options, so
    // the index cannot be turned off). The installed version must be this checkout's.
    run(Command::new(&python)
        .args(["-m", "pipx", "install", DISTRIBUTION])
        .env("PIP_FIND_LINKS", &dist)
        .env("PYTHONPATH", &pipx)
        .env("PIPX_HOME", home.join("home"))
        .env("PIPX_BIN_DIR", &bin)
        .env("PIPX_MAN_DIR", home.join("man"))
        .env("PIPX_DEFAULT_PYTHON", &python));
    let version = run(Command::new(bin.join(DISTRIBUTION)).arg("--version"));
    assert!(version.contains(env!("CARGO_PKG_VERSION")), "{version}");
    doctor(&mut Command::new(bin.join(DISTRIBUTION)));
}

/// The MCP Bundle tooling, pinned in `tests/mcpb/package.json`, installed with npm into
/// `target/tmp/mcpb` once; `None` (skip) only outside CI when npm is missing.
fn install_mcpb() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcpb");
    let wanted = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcpb/package.json"),
    )
    .expect("package.json");
    let ready = |dir: &Path| dir.join("node_modules/.bin/mcpb").exists();
    ci::npm_install(
        &dir,
        &wanted,
        &[],
        "the MCP Bundle check (validate, pack)",
        ready,
    )
    .then_some(dir)
}

/// The Claude Desktop extension: `mcpb/manifest.json` with the wheel's executable, assembled by
/// the release workflow's `mcpb/build.py`, validated and packed by the `mcpb` CLI; then unpacked and
/// started the way Claude Desktop starts it (the command and environment that `mcpb`'s own
/// `getMcpConfigForManifest` makes of the manifest and the user's settings), for an MCP round
/// trip that shows the settings arrived.
#[tokio::test]
async fn the_claude_desktop_bundle_validates_packs_and_serves_with_its_user_settings() {
    let Some(mcpb) = install_mcpb() else { return };
    let wheel = wheel().await;
    let python = support::provisioned_python().await;
    let root = workspace_root();
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("mcpb/manifest.json")).expect("manifest"),
    )
    .expect("manifest JSON");
    assert_eq!(manifest["version"], env!("CARGO_PKG_VERSION"));
    // Every variable the bundle sets is a setting.
    for name in manifest["server"]["mcp_config"]["env"]
        .as_object()
        .expect("env")
        .keys()
    {
        assert!(
            ipython_mcp_config::SETTINGS
                .iter()
                .any(|setting| setting.env == name),
            "{name} is not a setting"
        );
    }

    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("install/bundle");
    let _ = std::fs::remove_dir_all(&work);
    // The release workflow's script: manifest plus the wheel's executable, `mcpb validate`,
    // `mcpb pack`.
    let cli = mcpb.join("node_modules/.bin/mcpb");
    let built = run(Command::new(&python)
        .arg(root.join("mcpb/build.py"))
        .arg(wheel.parent().expect("dist"))
        .arg(&work)
        .arg(&cli));
    assert!(built.contains("validation passes"), "{built}");
    let packed = PathBuf::from(
        built
            .lines()
            .find_map(|line| line.strip_prefix("bundle: "))
            .unwrap_or_else(|| panic!("a bundle:\n{built}")),
    );
    assert!(
        packed.file_name().is_some_and(|name| name
            .to_string_lossy()
            .starts_with(&format!("ipython-mcp-{}-", env!("CARGO_PKG_VERSION")))),
        "{}",
        packed.display()
    );
    let unpacked = work.join("unpacked");
    run(Command::new(&cli).arg("unpack").arg(&packed).arg(&unpacked));

    // What Claude Desktop runs for a user who set the timeout and the workspace folder and left
    // the rest alone (the unset ones arrive as `${user_config.…}` placeholders).
    let home = work.join("home");
    std::fs::create_dir_all(&home).expect("mkdir home");
    let script = r#"
import { readFileSync } from "node:fs";
import { getMcpConfigForManifest } from "@anthropic-ai/mcpb";
const [dir, home] = process.argv.slice(1);
const manifest = JSON.parse(readFileSync(dir + "/manifest.json", "utf8"));
const config = await getMcpConfigForManifest({
  manifest, extensionPath: dir, systemDirs: { HOME: home }, pathSeparator: "/",
  userConfig: { operation_timeout_seconds: 45, workspace_root: home },
});
console.log(JSON.stringify(config));
"#;
    let config = run(Command::new("node")
        .args(["--input-type=module", "-e", script])
        .arg(&unpacked)
        .arg(&home)
        .current_dir(&mcpb));
    let config: serde_json::Value =
        serde_json::from_str(config.lines().next().expect("a line")).expect("config JSON");
    let program = PathBuf::from(config["command"].as_str().expect("command"));
    assert!(program.starts_with(&unpacked), "{config}");
    let mut command = support::command_for(&program, &[], &[]);
    for (key, value) in config["env"].as_object().expect("env") {
        command.env(key, value.as_str().expect("string value"));
    }
    let server = Server::start_command(Family::Handshake, command).await;
    let capabilities = server
        .client
        .peer()
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "ipython-mcp://capabilities",
        ))
        .await
        .expect("capabilities");
    let rmcp::model::ResourceContents::TextResourceContents { text, .. } =
        &capabilities.contents[0]
    else {
        panic!("text contents: {capabilities:?}")
    };
    let capabilities: serde_json::Value = serde_json::from_str(text).expect("JSON");
    assert_eq!(capabilities["limits"]["operation_timeout_seconds"], 45.0);
    assert_eq!(
        capabilities["notebooks"]["workspace_root"],
        home.canonicalize().expect("home").display().to_string()
    );
    let status = server.wait_settled().await;
    assert_eq!(status["state"], "ready", "{status}");
    let result = server.call("execute", json!({"code": "6 * 7"})).await;
    assert!(result.ok(), "{result:?}");
    server.stop().await;
}

/// `server.json`, the entry for the official MCP Registry: valid against the registry's
/// published schema (vendored in `schemas/`), and naming what this checkout ships.
#[tokio::test]
async fn the_mcp_registry_entry_matches_its_schema_and_the_packages_we_ship() {
    let root = workspace_root();
    let text = std::fs::read_to_string(root.join("server.json")).expect("server.json");
    let entry: serde_json::Value = serde_json::from_str(&text).expect("server.json is JSON");
    support::assert_matches_schema(&root.join("schemas/server.schema.json"), &entry).await;
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("schemas/server.schema.json")).expect("schema"),
    )
    .expect("schema JSON");
    assert_eq!(entry["$schema"], schema["$id"], "the vendored schema");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(entry["version"], version);
    let packages = entry["packages"].as_array().expect("packages");
    let package = |registry: &str| {
        packages
            .iter()
            .find(|package| package["registryType"] == registry)
            .unwrap_or_else(|| panic!("a {registry} package"))
    };
    let pypi = package("pypi");
    assert_eq!(pypi["identifier"], DISTRIBUTION);
    assert_eq!(pypi["version"], version);
    let pyproject = std::fs::read_to_string(root.join("pyproject.toml")).expect("pyproject");
    assert!(
        pyproject.contains(&format!("\nname = \"{DISTRIBUTION}\"\n")),
        "pyproject.toml names the distribution {DISTRIBUTION}"
    );
    let cargo = package("cargo");
    assert_eq!(cargo["identifier"], "ipython-mcp");
    assert_eq!(cargo["version"], version);
    // Every variable offered is a setting, with the setting's default.
    for variable in pypi["environmentVariables"].as_array().expect("variables") {
        let name = variable["name"].as_str().expect("name");
        let setting = ipython_mcp_config::SETTINGS
            .iter()
            .find(|setting| setting.env == name)
            .unwrap_or_else(|| panic!("{name} is not a setting"));
        if let Some(default) = variable["default"].as_str() {
            assert_eq!(default, setting.default, "{name}");
        }
    }
    // The registry accepts a PyPI package only if its description (our README) names the
    // server.
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
    let name = entry["name"].as_str().expect("name");
    assert!(
        readme.contains(&format!("mcp-name: {name}")),
        "README.md carries mcp-name: {name}"
    );
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
    // Not published: the benchmark, and the wheel's crate (the same program as `ipython-mcp`).
    assert!(!output.contains("Packaging ipython-mcp-bench"), "{output}");
    assert!(!output.contains("Packaging ipython-mcp-server"), "{output}");
}
