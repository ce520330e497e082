//! The resolution order and the managed-environment machinery, driven by fake interpreters and a
//! fake `uv` (small shell scripts), so they run in milliseconds and need no Python or network.
//! `tests/it/provision.rs` does the same against the real `python3` and PyPI.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipython_mcp_env::{Error, Phase, PythonEnvironment, PythonSource, Resolver};
use tempfile::TempDir;

/// A scratch directory with a working dir, a cache dir and a PATH of fake tools.
struct Scene {
    root: TempDir,
}

impl Scene {
    fn new() -> Scene {
        let scene = Scene {
            root: tempfile::tempdir().expect("tempdir"),
        };
        for dir in ["work", "cache", "bin"] {
            fs::create_dir(scene.path(dir)).expect("mkdir");
        }
        scene
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.path().join(relative)
    }

    fn resolver(&self) -> Resolver {
        Resolver {
            explicit_python: None,
            virtual_env: None,
            working_dir: self.path("work"),
            path_var: Some(OsString::from(self.path("bin"))),
            cache_dir: self.path("cache"),
            install_timeout: Duration::from_secs(60),
            named: None,
            confinement: Default::default(),
        }
    }

    fn envs(&self) -> PathBuf {
        self.path("cache/envs")
    }

    /// Names in `cache/envs` other than lock files.
    fn env_entries(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(self.envs()) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .map(|entry| {
                entry
                    .expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|name| !name.ends_with(".lock"))
            .collect();
        names.sort();
        names
    }

    /// A fake uv that logs its arguments and builds a fake venv whose python gains ipykernel
    /// once `pip install` ran.
    fn fake_uv(&self) {
        self.fake_uv_creating(":");
    }

    /// `fake_uv` whose `venv` waits for `release` to exist before it creates anything (and
    /// fails if it never does, within a minute), so that concurrent calls overlap for sure.
    fn fake_uv_waiting_for(&self, release: &Path) {
        self.fake_uv_creating(&format!(
            "waited=0; while [ ! -e '{}' ]; do [ $waited -lt 1200 ] || exit 1; sleep 0.05; waited=$((waited + 1)); done",
            release.display()
        ));
    }

    /// `fake_uv`, running the shell command `first` before `venv` creates the environment.
    fn fake_uv_creating(&self, first: &str) {
        let log = self.path("uv.log");
        let python = fake_python_script("3.11.7", "\"$(dirname \"$0\")/../installed\"");
        let script = format!(
            r##"#!/bin/sh
echo "$@" >> '{log}'
case "$1" in
  venv)
    {first}
    for dir; do :; done
    mkdir -p "$dir/bin"
    cat > "$dir/bin/python" <<'PYTHON'
{python}PYTHON
    chmod +x "$dir/bin/python"
    echo "#!$dir/bin/python" > "$dir/bin/ipython"
    ;;
  pip)
    touch "$(dirname "$(dirname "$4")")/installed"
    ;;
esac
"##,
            log = log.display(),
        );
        write_executable(&self.path("bin/uv"), &script);
    }
}

/// A shell script answering the probe like Python would. It reports ipykernel when the file
/// named by `ipykernel_if` (a shell word) exists; "true" always, "false" never.
fn fake_python_script(version: &str, ipykernel_if: &str) -> String {
    format!(
        r#"#!/bin/sh
if [ -e {ipykernel_if} ]; then
  echo "IPYTHON_MCP_PROBE {{\"python\": \"{version}\", \"executable\": \"$0\", \"ipykernel\": \"7.0.1\"}}"
else
  echo "IPYTHON_MCP_PROBE {{\"python\": \"{version}\", \"executable\": \"$0\", \"ipykernel\": null, \"ipykernel_error\": \"ModuleNotFoundError: No module named 'ipykernel'\"}}"
fi
"#
    )
}

fn fake_python(path: &Path, has_ipykernel: bool) -> PathBuf {
    let condition = if has_ipykernel {
        "/"
    } else {
        "/nonexistent/ipython-mcp"
    };
    write_executable(path, &fake_python_script("3.11.7", condition));
    path.to_owned()
}

fn write_executable(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("has parent")).expect("mkdir");
    fs::write(path, text).expect("write script");
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Resolves while recording the phases reported.
async fn resolve(resolver: &Resolver) -> (Result<PythonEnvironment, Error>, Vec<Phase>) {
    let phases = Mutex::new(Vec::new());
    let record = |phase| phases.lock().expect("not poisoned").push(phase);
    let result = resolver.resolve(&record).await;
    (result, phases.into_inner().expect("not poisoned"))
}

fn creating_phases(tool: &str, installer: &str) -> Vec<Phase> {
    vec![
        Phase::Probing,
        Phase::Locking,
        Phase::Creating {
            tool: tool.to_owned(),
        },
        Phase::Installing {
            tool: installer.to_owned(),
        },
        Phase::Verifying,
        Phase::Ready,
    ]
}

#[tokio::test]
async fn explicit_python_wins_over_every_venv() {
    let scene = Scene::new();
    let explicit = fake_python(&scene.path("chosen/python"), true);
    fake_python(&scene.path("active/bin/python"), true);
    fake_python(&scene.path("work/.venv/bin/python"), true);
    fake_python(&scene.path("bin/python3"), true);
    let resolver = Resolver {
        explicit_python: Some(explicit.clone()),
        virtual_env: Some(scene.path("active")),
        ..scene.resolver()
    };
    let (result, phases) = resolve(&resolver).await;
    let env = result.expect("resolves");
    assert_eq!(
        (env.executable, env.source),
        (explicit, PythonSource::Explicit)
    );
    assert_eq!(
        (env.python_version.as_str(), env.ipykernel_version.as_str()),
        ("3.11.7", "7.0.1")
    );
    assert!(!env.created);
    assert_eq!(phases, [Phase::Probing, Phase::Ready]);
}

#[tokio::test]
async fn explicit_python_without_ipykernel_is_an_error_not_a_fallback() {
    let scene = Scene::new();
    let explicit = fake_python(&scene.path("chosen/python"), false);
    fake_python(&scene.path("bin/python3"), true);
    let resolver = Resolver {
        explicit_python: Some(explicit.clone()),
        ..scene.resolver()
    };
    let error = resolve(&resolver).await.0.expect_err("must not fall back");
    assert!(matches!(error, Error::MissingIpykernel { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains(&format!(
            "`{} -m pip install ipykernel`",
            explicit.display()
        )),
        "{message}"
    );
}

#[tokio::test]
async fn explicit_python_that_does_not_exist_is_a_probe_error() {
    let scene = Scene::new();
    let resolver = Resolver {
        explicit_python: Some(PathBuf::from("/nonexistent/ipython-mcp/python")),
        ..scene.resolver()
    };
    let error = resolve(&resolver).await.0.expect_err("missing interpreter");
    assert!(matches!(error, Error::Probe { .. }), "{error:?}");
    assert!(error
        .to_string()
        .starts_with("probing python interpreter /nonexistent/ipython-mcp/python failed: "));
}

#[tokio::test]
async fn explicit_bare_name_is_looked_up_on_path() {
    let scene = Scene::new();
    let on_path = fake_python(&scene.path("bin/python3.11"), true);
    let resolver = Resolver {
        explicit_python: Some(PathBuf::from("python3.11")),
        ..scene.resolver()
    };
    let env = resolve(&resolver).await.0.expect("resolves");
    assert_eq!(
        (env.executable, env.source),
        (on_path, PythonSource::Explicit)
    );
}

#[tokio::test]
async fn active_virtualenv_beats_working_dir_venv_and_path() {
    let scene = Scene::new();
    let active = fake_python(&scene.path("active/bin/python"), true);
    fake_python(&scene.path("work/.venv/bin/python"), true);
    fake_python(&scene.path("bin/python3"), true);
    let resolver = Resolver {
        virtual_env: Some(scene.path("active")),
        ..scene.resolver()
    };
    let env = resolve(&resolver).await.0.expect("resolves");
    assert_eq!(
        (env.executable, env.source),
        (active, PythonSource::ActiveVirtualenv)
    );
}

#[tokio::test]
async fn venvs_without_ipykernel_are_skipped() {
    let scene = Scene::new();
    fake_python(&scene.path("active/bin/python"), false);
    let project = fake_python(&scene.path("work/.venv/bin/python"), true);
    fake_python(&scene.path("bin/python3"), true);
    let resolver = Resolver {
        virtual_env: Some(scene.path("active")),
        ..scene.resolver()
    };
    let env = resolve(&resolver).await.0.expect("resolves");
    assert_eq!(
        (env.executable, env.source),
        (project, PythonSource::WorkingDirVenv)
    );

    fake_python(&scene.path("work/.venv/bin/python"), false);
    let env = resolve(&resolver).await.0.expect("resolves");
    assert_eq!(env.source, PythonSource::SystemPython);
}

#[tokio::test]
async fn system_python_with_ipykernel_is_used_by_its_real_path() {
    let scene = Scene::new();
    let real = fake_python(&scene.path("versions/3.11.7/bin/python3"), true);
    // A shim, like pyenv's: the probe reports the interpreter it really ran.
    write_executable(
        &scene.path("bin/python3"),
        &format!("#!/bin/sh\nexec '{}' \"$@\"\n", real.display()),
    );
    let env = resolve(&scene.resolver()).await.0.expect("resolves");
    assert_eq!(
        (env.executable, env.source),
        (real, PythonSource::SystemPython)
    );
    assert!(!scene.envs().exists(), "nothing is provisioned");
}

#[tokio::test]
async fn no_python3_on_path_says_how_to_fix_it() {
    let scene = Scene::new();
    let error = resolve(&scene.resolver()).await.0.expect_err("no python");
    assert!(matches!(error, Error::NoPython), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("install Python 3") && message.contains("IPYTHON_MCP_PYTHON"),
        "{message}"
    );
    let resolver = Resolver {
        path_var: None,
        ..scene.resolver()
    };
    assert!(matches!(resolve(&resolver).await.0, Err(Error::NoPython)));
}

#[tokio::test]
async fn managed_environment_is_created_with_uv_then_reused() {
    let scene = Scene::new();
    fake_python(&scene.path("bin/python3"), false);
    scene.fake_uv();
    let resolver = scene.resolver();

    let (result, phases) = resolve(&resolver).await;
    let env = result.expect("provisions");
    let target = scene.path("cache/envs/default-py3.11");
    assert_eq!(env.executable, target.join("bin/python"));
    assert_eq!(env.source, PythonSource::ManagedDefault);
    assert!(env.created);
    assert!(env.provision_seconds.is_some());
    assert_eq!(phases, creating_phases("uv", "uv"));

    let base = scene.path("bin/python3");
    let log = fs::read_to_string(scene.path("uv.log")).expect("uv ran");
    let mut calls = log.lines();
    let venv_call = calls.next().expect("uv venv");
    assert!(
        venv_call.starts_with(&format!(
            "venv --seed --prompt ipython-mcp --python {} ",
            base.display()
        )),
        "{venv_call}"
    );
    let tmp = venv_call.rsplit(' ').next().expect("venv dir");
    assert!(
        tmp.starts_with(&format!("{}/.tmp-", scene.envs().display())),
        "{tmp}"
    );
    assert_eq!(
        calls.next(),
        Some(
            format!("pip install --python {tmp}/bin/python ipykernel>=6.29,<8 cloudpickle>=3,<4")
                .as_str()
        )
    );
    assert_eq!(calls.next(), None);

    let metadata: serde_json::Value =
        serde_json::from_slice(&fs::read(target.join("ipython-mcp-env.json")).expect("metadata"))
            .expect("metadata is JSON");
    assert_eq!(metadata["tool"], "uv");
    assert_eq!(metadata["python_version"], "3.11.7");
    assert_eq!(metadata["ipykernel_version"], "7.0.1");
    // Script shebangs follow the rename.
    let ipython = fs::read_to_string(target.join("bin/ipython")).expect("script");
    assert_eq!(ipython.trim(), format!("#!{}/bin/python", target.display()));
    assert_eq!(scene.env_entries(), ["default-py3.11"]);

    let (result, phases) = resolve(&resolver).await;
    let again = result.expect("reuses");
    assert_eq!(again.executable, env.executable);
    assert!(!again.created);
    assert_eq!(again.provision_seconds, None);
    assert_eq!(phases, [Phase::Probing, Phase::Ready]);
    assert_eq!(
        fs::read_to_string(scene.path("uv.log")).expect("log"),
        log,
        "no installer on reuse"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_resolves_build_once() {
    let scene = Scene::new();
    fake_python(&scene.path("bin/python3"), false);
    // The build waits until all three resolves are at the lock: they certainly overlap, and
    // the two that did not build must have waited for the one that did.
    let release = scene.path("release");
    scene.fake_uv_waiting_for(&release);
    let resolver = scene.resolver();
    let locking = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let resolver = resolver.clone();
            let locking = Arc::clone(&locking);
            let release = release.clone();
            tokio::spawn(async move {
                let phases = Mutex::new(Vec::new());
                let record = |phase: Phase| {
                    if phase == Phase::Locking && locking.fetch_add(1, Ordering::SeqCst) == 2 {
                        fs::write(&release, "").expect("release the build");
                    }
                    phases.lock().expect("not poisoned").push(phase);
                };
                let result = resolver.resolve(&record).await;
                (result, phases.into_inner().expect("not poisoned"))
            })
        })
        .collect();
    let mut created = 0;
    for task in tasks {
        let (result, phases) = task.await.expect("task");
        let env = result.expect("resolves");
        assert_eq!(
            env.executable,
            scene.path("cache/envs/default-py3.11/bin/python")
        );
        if env.created {
            created += 1;
            assert_eq!(phases, creating_phases("uv", "uv"));
        } else {
            assert_eq!(phases, [Phase::Probing, Phase::Locking, Phase::Ready]);
        }
    }
    assert_eq!(created, 1);
    let log = fs::read_to_string(scene.path("uv.log")).expect("uv ran");
    assert_eq!(log.lines().count(), 2, "one venv and one install:\n{log}");
    assert_eq!(scene.env_entries(), ["default-py3.11"]);
}

#[tokio::test]
async fn broken_environment_and_stale_temps_are_replaced() {
    let scene = Scene::new();
    fake_python(&scene.path("bin/python3"), false);
    scene.fake_uv();
    let target = scene.path("cache/envs/default-py3.11");
    // A half-deleted environment: no metadata, and its python is gone.
    fs::create_dir_all(target.join("lib")).expect("mkdir");
    fs::write(target.join("lib/leftover"), "x").expect("write");
    let stale = scene.path("cache/envs/.tmp-crashed");
    let fresh = scene.path("cache/envs/.tmp-building");
    fs::create_dir_all(stale.join("venv")).expect("mkdir");
    fs::create_dir_all(&fresh).expect("mkdir");
    let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(7200);
    fs::File::open(&stale)
        .and_then(|dir| dir.set_modified(two_hours_ago))
        .expect("set mtime");

    let env = resolve(&scene.resolver()).await.0.expect("rebuilds");
    assert!(env.created);
    assert!(!target.join("lib/leftover").exists());
    assert!(target.join("ipython-mcp-env.json").exists());
    // A young temp dir may belong to a live build of another Python version: kept.
    assert_eq!(scene.env_entries(), [".tmp-building", "default-py3.11"]);
}

#[tokio::test]
async fn an_installer_failure_is_short_and_leaves_nothing_behind() {
    let scene = Scene::new();
    fake_python(&scene.path("bin/python3"), false);
    let noise = "\\033[2mResolving dependencies\\033[0m ".repeat(400);
    write_executable(
        &scene.path("bin/uv"),
        &format!(
            "#!/bin/sh\nfor dir; do :; done; mkdir -p \"$dir/bin\"; touch \"$dir/bin/python\"\nprintf '{noise}\\n' >&2\nprintf '\\033[31merror\\033[0m: no network\\n' >&2\nexit 2\n"
        ),
    );
    let (result, phases) = resolve(&scene.resolver()).await;
    let error = result.expect_err("uv fails");
    assert!(
        matches!(error, Error::Create { ref tool, .. } if tool == "uv"),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.starts_with("creating the managed environment with uv failed: exit status: 2: …"),
        "{message}"
    );
    assert!(message.ends_with("error: no network"), "{message}");
    assert!(!message.contains('\u{1b}'));
    assert!(
        message.chars().count() < 2100,
        "{} chars",
        message.chars().count()
    );
    assert_eq!(
        phases.last(),
        Some(&Phase::Creating {
            tool: "uv".to_owned()
        })
    );
    assert!(scene.env_entries().is_empty(), "{:?}", scene.env_entries());
}

#[tokio::test]
async fn a_hung_installer_is_killed_at_the_install_timeout() {
    let scene = Scene::new();
    fake_python(&scene.path("bin/python3"), false);
    write_executable(
        &scene.path("bin/uv"),
        "#!/bin/sh\ncase \"$1\" in venv) for dir; do :; done; mkdir -p \"$dir/bin\";; pip) echo Downloading ipykernel; sleep 60;; esac\n",
    );
    // Long enough that the quick steps before the install fit in it on a loaded machine.
    let resolver = Resolver {
        install_timeout: Duration::from_secs(3),
        ..scene.resolver()
    };
    let started = Instant::now();
    let error = resolve(&resolver).await.0.expect_err("times out");
    // Killed near the timeout, not after the installer's own 60 s.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        error.to_string(),
        "provisioning the managed environment timed out after 3 s while installing ipykernel and cloudpickle with uv (Downloading ipykernel)"
    );
    assert!(scene.env_entries().is_empty(), "{:?}", scene.env_entries());
}

fn named(scene: &Scene, name: &str, requirements: &[&str]) -> Resolver {
    named_from(scene, name, requirements, None)
}

fn named_from(
    scene: &Scene,
    name: &str,
    requirements: &[&str],
    python: Option<PathBuf>,
) -> Resolver {
    Resolver {
        named: Some(ipython_mcp_env::NamedEnvironment {
            workspace: scene.path("workspace"),
            name: name.to_owned(),
            requirements: requirements.iter().map(|r| (*r).to_owned()).collect(),
            python,
        }),
        ..scene.resolver()
    }
}

fn workspace_entries(scene: &Scene) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(scene.path("workspace"))
        .expect("workspace exists")
        .map(|entry| {
            entry
                .expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| !name.ends_with(".lock"))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_named_environment_is_built_from_its_python_with_its_requirements() {
    let scene = Scene::new();
    scene.fake_uv();
    // The base needs no ipykernel: the environment gets its own.
    let chosen = fake_python(&scene.path("chosen/python"), false);
    let resolver = named_from(&scene, "proj", &["six==1.16.0"], Some(chosen.clone()));
    let (result, phases) = resolve(&resolver).await;
    let env = result.expect("created");
    assert!(env.created);
    assert_eq!(env.source, PythonSource::NamedEnvironment);
    assert_eq!(env.executable, scene.path("workspace/proj/bin/python"));
    let mut expected = creating_phases("uv", "uv");
    expected.insert(1, Phase::Validating);
    assert_eq!(phases, expected);
    let log = fs::read_to_string(scene.path("uv.log")).expect("uv log");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(
        lines[0].starts_with(&format!(
            "venv --seed --prompt proj --python {} {}/.ipython-mcp-tmp-",
            chosen.display(),
            scene.path("workspace").display()
        )),
        "{log}"
    );
    assert!(
        lines[1].ends_with(" six==1.16.0 ipykernel>=6.29,<8"),
        "{log}"
    );
    assert_eq!(workspace_entries(&scene), ["proj"]);
    assert!(
        !scene.envs().exists(),
        "the default environment is not built"
    );

    // Reused without the installer.
    let (again, phases) = resolve(&resolver).await;
    assert!(!again.expect("reused").created);
    assert_eq!(phases, [Phase::Probing, Phase::Validating, Phase::Ready]);
    assert_eq!(
        fs::read_to_string(scene.path("uv.log")).expect("uv log"),
        log
    );

    // Another Python minor version is a mismatch, whatever the requirements.
    write_executable(
        &scene.path("py312/python"),
        &fake_python_script("3.12.1", "/"),
    );
    let (result, _) = resolve(&named_from(
        &scene,
        "proj",
        &["six==1.16.0"],
        Some(scene.path("py312/python")),
    ))
    .await;
    let error = result.expect_err("python differs");
    assert_eq!(error.phase(), "verify");
    let message = error.to_string();
    assert!(
        message.contains("was created for Python 3.11 with requirements fingerprint ")
            && message.contains("this server wants Python 3.12 with requirements fingerprint "),
        "{message}"
    );
    assert_eq!(workspace_entries(&scene), ["proj"]);
}

#[tokio::test]
async fn a_foreign_directory_is_refused_and_only_our_stale_temps_are_cleaned() {
    let scene = Scene::new();
    scene.fake_uv();
    fake_python(&scene.path("bin/python3"), false);
    let workspace = scene.path("workspace");
    fs::create_dir_all(workspace.join("theirs")).expect("mkdir");
    fs::write(workspace.join("theirs/notes.txt"), "mine").expect("write");
    let (result, _) = resolve(&named(&scene, "theirs", &[])).await;
    let error = result.expect_err("not ours");
    assert!(matches!(error, Error::Unusable { .. }), "{error:?}");
    assert_eq!(error.phase(), "verify");
    assert!(
        error
            .to_string()
            .contains("it was not created by ipython-mcp"),
        "{error}"
    );
    assert_eq!(
        fs::read_to_string(workspace.join("theirs/notes.txt")).expect("untouched"),
        "mine"
    );

    let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(2 * 3600);
    for stale in [".ipython-mcp-tmp-crashed", ".tmp-theirs"] {
        fs::create_dir(workspace.join(stale)).expect("mkdir");
        fs::File::open(workspace.join(stale))
            .and_then(|dir| dir.set_modified(two_hours_ago))
            .expect("set mtime");
    }
    let (result, _) = resolve(&named(&scene, "fresh", &[])).await;
    assert!(result.expect("created").created);
    assert_eq!(
        workspace_entries(&scene),
        [".tmp-theirs", "fresh", "theirs"]
    );
}

#[tokio::test]
async fn a_hung_install_of_a_named_environment_times_out_in_the_install_phase() {
    let scene = Scene::new();
    fake_python(&scene.path("bin/python3"), false);
    write_executable(
        &scene.path("bin/uv"),
        "#!/bin/sh\ncase \"$1\" in venv) for dir; do :; done; mkdir -p \"$dir/bin\";; pip) echo Downloading six; sleep 60;; esac\n",
    );
    // Long enough that the quick steps before the install fit in it on a loaded machine.
    let resolver = Resolver {
        install_timeout: Duration::from_secs(3),
        ..named(&scene, "slow", &["six==1.16.0"])
    };
    let error = resolve(&resolver).await.0.expect_err("times out");
    assert_eq!(error.phase(), "install");
    assert_eq!(
        error.to_string(),
        "provisioning the environment \"slow\" timed out after 3 s while installing the requirements and ipykernel with uv (Downloading six)"
    );
    assert_eq!(workspace_entries(&scene), Vec::<String>::new());
}

#[tokio::test]
async fn an_explicit_interpreter_wins_over_a_named_environment() {
    // As `kernel_start` with an interpreter path does on a server with a named environment.
    let scene = Scene::new();
    scene.fake_uv();
    let explicit = fake_python(&scene.path("project/.venv/bin/python"), true);
    let resolver = Resolver {
        explicit_python: Some(explicit.clone()),
        ..named(&scene, "proj", &["six==1.16.0"])
    };
    let (result, phases) = resolve(&resolver).await;
    let env = result.expect("explicit");
    assert_eq!(env.source, PythonSource::Explicit);
    assert_eq!(env.executable, explicit);
    assert_eq!(phases, [Phase::Probing, Phase::Ready]);
    assert!(!scene.path("workspace").exists(), "nothing created");
}
