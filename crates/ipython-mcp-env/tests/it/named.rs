//! Named environments against the real `python3`, real `venv`/`pip` (or `uv`) and real PyPI.
//!
//! Slow (each creation installs ipykernel, ~20 s), so one test creates two environments that
//! pin conflicting versions of `six` and checks concurrency, reuse, mismatch and isolation
//! against them in turn; another checks failing installs. Without `python3` these tests skip
//! with a printed reason, except in CI (`ci::on_ci`), where they fail.

use crate::ci;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ipython_mcp_env::{
    fingerprint, Error, NamedEnvironment, Phase, PythonEnvironment, PythonSource, Resolver,
};

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

fn resolver(root: &Path, name: &str, requirements: &[&str]) -> Resolver {
    let project = root.join("project");
    std::fs::create_dir_all(&project).expect("mkdir project");
    Resolver {
        explicit_python: None,
        virtual_env: None,
        working_dir: project,
        path_var: std::env::var_os("PATH"),
        cache_dir: root.join("cache"),
        install_timeout: Duration::from_secs(600),
        named: Some(NamedEnvironment {
            workspace: root.join("workspace"),
            name: name.to_owned(),
            requirements: requirements.iter().map(|r| (*r).to_owned()).collect(),
            python: None,
        }),
        confinement: Default::default(),
    }
}

async fn resolve(resolver: &Resolver) -> (Result<PythonEnvironment, Error>, Vec<Phase>) {
    let phases = Mutex::new(Vec::new());
    let record = |phase| phases.lock().expect("not poisoned").push(phase);
    let result = resolver.resolve(&record).await;
    (result, phases.into_inner().expect("not poisoned"))
}

/// Everything in the workspace except lock files, sorted.
fn workspace_entries(root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root.join("workspace")) else {
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

/// What the environment's own interpreter says: `six.__version__` and `sys.prefix`.
fn six_in(executable: &Path) -> String {
    let output = std::process::Command::new(executable)
        .args([
            "-c",
            "import six, sys; print(six.__version__, sys.prefix == sys.base_prefix)",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("python runs");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .expect("utf-8")
        .trim()
        .to_owned()
}

fn metadata(executable: &Path) -> serde_json::Value {
    let env = executable.parent().and_then(Path::parent).expect("env dir");
    serde_json::from_slice(&std::fs::read(env.join("ipython-mcp-env.json")).expect("metadata"))
        .expect("metadata is JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn named_environments_pin_their_own_versions_and_are_reused_without_reinstalling() {
    let Some(_) = real_python3() else {
        return;
    };
    let root = tempfile::tempdir().expect("tempdir");
    let root = root.path();
    let new = resolver(root, "six-new", &["six==1.16.0"]);

    // Two servers start at once with the same environment: one creates it, the other waits
    // on the lock and reuses it.
    let started = Instant::now();
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let resolver = new.clone();
            tokio::spawn(async move { resolve(&resolver).await })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        let (result, phases) = task.await.expect("task");
        let env = result.unwrap_or_else(|err| panic!("creating six-new failed: {err}"));
        results.push((env, phases));
    }
    let creation = started.elapsed();
    let creators: Vec<_> = results.iter().filter(|(env, _)| env.created).collect();
    assert_eq!(creators.len(), 1, "exactly one start creates: {results:?}");
    let executable = root.join("workspace/six-new/bin/python");
    for (env, phases) in &results {
        assert_eq!(env.executable, executable);
        assert_eq!(env.source, PythonSource::NamedEnvironment);
        assert!(phases.contains(&Phase::Validating), "{phases:?}");
        if env.created {
            assert!(
                phases
                    .iter()
                    .any(|phase| matches!(phase, Phase::Installing { .. })),
                "{phases:?}"
            );
        }
    }
    assert_eq!(workspace_entries(root), ["six-new"], "no temp dir left");
    assert_eq!(six_in(&executable), "1.16.0 False");
    let cfg = std::fs::read_to_string(root.join("workspace/six-new/pyvenv.cfg")).expect("cfg");
    assert!(
        cfg.contains("include-system-site-packages = false"),
        "{cfg}"
    );
    let recorded = metadata(&executable);
    assert_eq!(recorded["kind"], "named");
    assert_eq!(recorded["name"], "six-new");
    assert_eq!(
        recorded["requirements_fingerprint"].as_str(),
        Some(fingerprint(&["six==1.16.0".to_owned()]).as_str())
    );
    assert_eq!(
        recorded["python_major_minor"].as_str(),
        results[0]
            .0
            .python_version
            .rsplit_once('.')
            .map(|(major_minor, _)| major_minor)
    );

    // A later start reuses it: validation and one probe, no lock, no installer.
    let metadata_before =
        std::fs::read(root.join("workspace/six-new/ipython-mcp-env.json")).expect("metadata");
    let started = Instant::now();
    let (reused, phases) = resolve(&new).await;
    let reuse = started.elapsed();
    let reused = reused.expect("reuses");
    assert!(!reused.created);
    assert_eq!(reused.executable, executable);
    assert_eq!(phases, [Phase::Probing, Phase::Validating, Phase::Ready]);

    // Same name, different requirements: refused, and the environment is left as it was.
    let (mismatch, _) = resolve(&resolver(root, "six-new", &["six==1.15.0"])).await;
    let error = mismatch.expect_err("fingerprint differs");
    assert!(matches!(error, Error::Mismatch { .. }), "{error:?}");
    assert_eq!(error.phase(), "verify");
    let message = error.to_string();
    assert!(
        message.contains("a different dependency set needs a new name")
            && message.contains("IPYTHON_MCP_ACTIVE_ENVIRONMENT"),
        "{message}"
    );
    assert_eq!(
        std::fs::read(root.join("workspace/six-new/ipython-mcp-env.json")).expect("metadata"),
        metadata_before
    );
    assert_eq!(six_in(&executable), "1.16.0 False");

    // A second environment pins the conflicting version; each imports its own.
    let (old, _) = resolve(&resolver(root, "six-old", &["six==1.15.0"])).await;
    let old = old.unwrap_or_else(|err| panic!("creating six-old failed: {err}"));
    assert!(old.created);
    assert_eq!(six_in(&old.executable), "1.15.0 False");
    assert_eq!(six_in(&executable), "1.16.0 False");
    assert_eq!(workspace_entries(root), ["six-new", "six-old"]);

    eprintln!(
        "named environment: creation {:.1} s (two concurrent starts, by {}), reuse {:.3} s",
        creation.as_secs_f64(),
        recorded["tool"],
        reuse.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_install_names_its_phase_masks_credentials_and_leaves_nothing_behind() {
    let Some(_) = real_python3() else {
        return;
    };
    let root = tempfile::tempdir().expect("tempdir");
    let root = root.path();

    // A requirement that does not exist on the index.
    let missing = "ipython-mcp-no-such-package-4b1d==1.0";
    let (result, phases) = resolve(&resolver(root, "missing", &[missing])).await;
    let error = result.expect_err("no such package");
    assert!(matches!(error, Error::Install { .. }), "{error:?}");
    assert_eq!(error.phase(), "install");
    assert!(
        phases
            .iter()
            .any(|phase| matches!(phase, Phase::Installing { .. })),
        "{phases:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("ipython-mcp-no-such-package-4b1d"),
        "{message}"
    );
    assert!(message.chars().count() < 2500, "bounded: {message}");
    assert_eq!(workspace_entries(root), Vec::<String>::new());

    // A private URL with credentials (nothing listens on port 9): they never reach the error.
    let private = "private-pkg @ https://alice:tok3n-s3cret@127.0.0.1:9/private_pkg-1.0.tar.gz";
    let (result, _) = resolve(&resolver(root, "private", &[private])).await;
    let error = result.expect_err("unreachable");
    assert_eq!(error.phase(), "install", "{error}");
    let message = error.to_string();
    assert!(!message.contains("tok3n-s3cret"), "{message}");
    assert!(!message.contains("alice"), "{message}");
    assert_eq!(workspace_entries(root), Vec::<String>::new());
}
