//! Real provisioning: the `python3` on PATH, real `venv`/`pip` (or `uv`) and real PyPI.
//!
//! Slow (one ipykernel install, ~20–60 s), so one test builds the managed environment once and
//! checks creation, concurrency, reuse and `.venv` preference against it in turn. Without
//! `python3` these tests skip with a printed reason, except in CI (`ci::on_ci`), where they fail.
//!
//! The interpreters under test are "bare" venvs made from the real `python3` (no pip, no
//! ipykernel), so the tests behave the same on a machine whose system Python has ipykernel.

use crate::ci;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ipython_mcp_env::{Error, Phase, PythonEnvironment, PythonSource, Resolver};

/// The real `python3` on PATH, or `None` (with a printed reason) when absent outside CI.
fn real_python3() -> Option<PathBuf> {
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path_var)
        .map(|dir| dir.join("python3"))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        ci::skip_outside_ci("python3 is not on PATH; these tests need a real Python 3");
    }
    found
}

/// A venv without pip or ipykernel; returns its directory (which holds `bin/python3`).
fn bare_venv(python3: &Path, root: &Path) -> PathBuf {
    let venv = root.join("bare");
    let status = std::process::Command::new(python3)
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("python3 -m venv runs");
    assert!(
        status.success(),
        "python3 -m venv --without-pip failed: {status}"
    );
    venv
}

/// `bin` first, then the real PATH (so `uv` is used when the machine has it).
fn path_with(bin: &Path) -> OsString {
    let real = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(bin.to_owned()).chain(std::env::split_paths(&real));
    std::env::join_paths(dirs).expect("PATH entries contain no ':'")
}

async fn resolve(resolver: &Resolver) -> (Result<PythonEnvironment, Error>, Vec<Phase>) {
    let phases = Mutex::new(Vec::new());
    let record = |phase| phases.lock().expect("not poisoned").push(phase);
    let result = resolver.resolve(&record).await;
    (result, phases.into_inner().expect("not poisoned"))
}

fn temp_entries(envs: &Path) -> Vec<String> {
    std::fs::read_dir(envs)
        .expect("envs exists")
        .map(|entry| {
            entry
                .expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.starts_with(".tmp-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn managed_environment_is_built_once_reused_and_a_project_venv_preferred() {
    let Some(python3) = real_python3() else {
        return;
    };
    let root = tempfile::tempdir().expect("tempdir");
    let bare = bare_venv(&python3, root.path());
    let cache = root.path().join("cache");
    let work = root.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    let resolver = Resolver {
        explicit_python: None,
        virtual_env: None,
        working_dir: work,
        path_var: Some(path_with(&bare.join("bin"))),
        cache_dir: cache.clone(),
        install_timeout: Duration::from_secs(600),
        named: None,
        confinement: Default::default(),
    };

    // (a) + (b): two servers start at once on an empty cache; one builds, the other waits.
    let started = Instant::now();
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let resolver = resolver.clone();
            tokio::spawn(async move { resolve(&resolver).await })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        let (result, phases) = task.await.expect("task");
        results.push((
            result.unwrap_or_else(|err| panic!("provisioning failed: {err}")),
            phases,
        ));
    }
    let fresh = started.elapsed();
    let envs = cache.join("envs");
    let executable = results[0].0.executable.clone();
    let target = executable
        .parent()
        .and_then(Path::parent)
        .expect("<env>/bin/python")
        .to_owned();
    assert_eq!(target.parent(), Some(envs.as_path()));
    assert!(target
        .file_name()
        .expect("name")
        .to_string_lossy()
        .starts_with("default-py3."));
    let creators: Vec<_> = results.iter().filter(|(env, _)| env.created).collect();
    assert_eq!(creators.len(), 1, "exactly one resolve builds: {results:?}");
    for (env, phases) in &results {
        assert_eq!(env.executable, executable);
        assert_eq!(env.source, PythonSource::ManagedDefault);
        assert!(env.ipykernel_version.starts_with('6') || env.ipykernel_version.starts_with('7'));
        let expected_len = if env.created { 6 } else { 3 };
        assert_eq!(phases.len(), expected_len, "{phases:?}");
    }
    assert_eq!(temp_entries(&envs), Vec::<String>::new());
    let metadata: serde_json::Value = serde_json::from_slice(
        &std::fs::read(target.join("ipython-mcp-env.json")).expect("metadata"),
    )
    .expect("metadata is JSON");
    assert_eq!(
        metadata["ipykernel_version"].as_str(),
        Some(results[0].0.ipykernel_version.as_str())
    );
    // Console scripts were rewritten to the final location and work there.
    for entry in std::fs::read_dir(target.join("bin")).expect("bin") {
        let path = entry.expect("entry").path();
        if let Ok(text) = std::fs::read_to_string(&path) {
            assert!(
                !text.contains(".tmp-"),
                "{} still names the build dir",
                path.display()
            );
        }
    }
    let pip = std::process::Command::new(target.join("bin/pip"))
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("bin/pip runs");
    assert!(pip.status.success(), "{pip:?}");

    // (a) again: a later start reuses it with one probe and no installer.
    let started = Instant::now();
    let (reused, phases) = resolve(&resolver).await;
    let reuse = started.elapsed();
    let reused = reused.expect("reuses");
    assert_eq!(reused.executable, executable);
    assert!(!reused.created);
    assert_eq!(phases, [Phase::Probing, Phase::Ready]);

    // (d): a project `.venv` with ipykernel wins over the managed environment.
    let project = root.path().join("project");
    std::fs::create_dir(&project).expect("mkdir");
    std::os::unix::fs::symlink(&target, project.join(".venv")).expect("symlink");
    let (found, _) = resolve(&Resolver {
        working_dir: project.clone(),
        ..resolver.clone()
    })
    .await;
    let found = found.expect("finds the project venv");
    assert_eq!(found.source, PythonSource::WorkingDirVenv);
    assert_eq!(found.executable, project.join(".venv/bin/python"));
    assert!(!found.created);

    eprintln!(
        "managed environment: fresh provision {:.1} s (by {}), reuse {:.2} s",
        fresh.as_secs_f64(),
        metadata["tool"],
        reuse.as_secs_f64()
    );
}

#[tokio::test]
async fn explicit_interpreter_without_ipykernel_says_how_to_install_it() {
    let Some(python3) = real_python3() else {
        return;
    };
    let root = tempfile::tempdir().expect("tempdir");
    let python = bare_venv(&python3, root.path()).join("bin/python");
    let resolver = Resolver {
        explicit_python: Some(python.clone()),
        virtual_env: None,
        working_dir: root.path().to_owned(),
        path_var: std::env::var_os("PATH"),
        cache_dir: root.path().join("cache"),
        install_timeout: Duration::from_secs(600),
        named: None,
        confinement: Default::default(),
    };
    let error = resolve(&resolver)
        .await
        .0
        .expect_err("bare venv has no ipykernel");
    assert!(matches!(error, Error::MissingIpykernel { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!(
            "python interpreter {0} cannot import ipykernel (ModuleNotFoundError: No module named \
             'ipykernel'); install it with `{0} -m pip install ipykernel`",
            python.display()
        )
    );
    assert!(
        !root.path().join("cache").exists(),
        "an explicit interpreter never provisions"
    );
}
