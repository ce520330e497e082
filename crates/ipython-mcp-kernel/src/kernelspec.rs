//! Jupyter kernelspecs and project virtualenvs: finding them (`kernel_discover`) and turning a
//! user's choice (`kernel_start`'s `spec`) into how a session starts its kernels.
//!
//! Written here rather than taken from the runtimed crates: their discovery misses venv
//! kernels, shells out to `jupyter --paths` (86 ms) and runs `argv[0] = "python"` from PATH.
//! A kernelspec is a small JSON file; reading the standard
//! directories ourselves is simpler and re-scans cheaply on every call.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ipython_mcp_jupyter::InterruptMode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::output::ErrorInfo;

/// A registered kernelspec (`kernels/<name>/kernel.json`).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelSpec {
    pub name: String,
    pub display_name: String,
    pub language: String,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub interrupt_mode: InterruptMode,
    /// The directory holding kernel.json (`{resource_dir}` in argv).
    pub resource_dir: PathBuf,
}

impl KernelSpec {
    /// True for an ipykernel spec: such kernels get the helper and our launch flags.
    pub fn is_ipykernel(&self) -> bool {
        self.language.eq_ignore_ascii_case("python")
            && self
                .argv
                .iter()
                .any(|arg| arg == "ipykernel_launcher" || arg == "ipykernel")
    }

    /// argv with `{resource_dir}` filled in and a bare `python`/`python3` replaced by
    /// `python` (as jupyter_client substitutes its own interpreter); `{connection_file}` is
    /// left for the launcher.
    pub fn command(&self, python: &Path) -> Vec<String> {
        let resource_dir = self.resource_dir.display().to_string();
        self.argv
            .iter()
            .enumerate()
            .map(|(index, arg)| {
                if index == 0 && matches!(arg.as_str(), "python" | "python3") {
                    python.display().to_string()
                } else {
                    arg.replace("{resource_dir}", &resource_dir)
                }
            })
            .collect()
    }
}

#[derive(Deserialize)]
struct KernelJson {
    argv: Vec<String>,
    #[serde(default)]
    display_name: String,
    #[serde(default)]
    language: String,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    interrupt_mode: Option<String>,
}

/// The directories searched for `kernels/`, in Jupyter's order of precedence: `JUPYTER_PATH`,
/// the user data dir, the prefix of `python` (its environment's kernels), then the system dirs.
pub fn data_dirs(python: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(paths) = std::env::var_os("JUPYTER_PATH") {
        dirs.extend(std::env::split_paths(&paths).filter(|path| path.is_absolute()));
    }
    match std::env::var_os("JUPYTER_DATA_DIR") {
        Some(dir) => dirs.push(PathBuf::from(dir)),
        None => {
            if let Some(data) = std::env::var_os("XDG_DATA_HOME") {
                dirs.push(PathBuf::from(data).join("jupyter"));
            } else if let Some(home) = std::env::var_os("HOME") {
                dirs.push(PathBuf::from(home).join(".local/share/jupyter"));
            }
        }
    }
    // <prefix>/bin/python → <prefix>/share/jupyter
    if let Some(prefix) = python.and_then(Path::parent).and_then(Path::parent) {
        dirs.push(prefix.join("share/jupyter"));
    }
    dirs.push(PathBuf::from("/usr/local/share/jupyter"));
    dirs.push(PathBuf::from("/usr/share/jupyter"));
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|dir| seen.insert(dir.clone()));
    dirs
}

/// Every readable kernelspec under `dirs`; the first directory that has a name wins.
pub fn discover(dirs: &[PathBuf]) -> Vec<KernelSpec> {
    let mut found: BTreeMap<String, KernelSpec> = BTreeMap::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir.join("kernels")) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if found.contains_key(&name) {
                continue;
            }
            if let Some(spec) = read_spec(&name, &entry.path()) {
                found.insert(name, spec);
            }
        }
    }
    found.into_values().collect()
}

fn read_spec(name: &str, dir: &Path) -> Option<KernelSpec> {
    let text = std::fs::read_to_string(dir.join("kernel.json")).ok()?;
    let json: KernelJson = serde_json::from_str(&text).ok()?;
    if json.argv.is_empty() {
        return None;
    }
    Some(KernelSpec {
        name: name.to_owned(),
        display_name: if json.display_name.is_empty() {
            name.to_owned()
        } else {
            json.display_name
        },
        language: json.language,
        argv: json.argv,
        env: json.env,
        interrupt_mode: match json.interrupt_mode.as_deref() {
            Some("message") => InterruptMode::Message,
            _ => InterruptMode::Signal,
        },
        resource_dir: dir.to_owned(),
    })
}

/// A Python virtualenv with ipykernel, found under a directory.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct VenvKernel {
    /// What `kernel_start` accepts: `venv:<project dir>`.
    pub name: String,
    /// The project directory holding the venv.
    pub project: String,
    pub python: String,
    /// `python3.X` from the venv's `lib/` directory.
    pub python_version: Option<String>,
}

/// `.venv` and `venv` directories with ipykernel in `root` and its immediate subdirectories
/// (a workspace of projects). Looks at files only; runs nothing.
pub fn discover_venvs(root: &Path) -> Vec<VenvKernel> {
    let mut projects = vec![root.to_owned()];
    if let Ok(entries) = std::fs::read_dir(root) {
        let mut children: Vec<PathBuf> = entries
            .flatten()
            .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .is_some_and(|name| !name.to_string_lossy().starts_with('.'))
            })
            .collect();
        children.sort();
        projects.extend(children);
    }
    let mut found = Vec::new();
    for project in projects {
        for venv in [".venv", "venv"] {
            let dir = project.join(venv);
            if let Some(version) = ipykernel_site(&dir) {
                found.push(VenvKernel {
                    name: format!("venv:{}", project.display()),
                    project: project.display().to_string(),
                    python: dir.join("bin/python").display().to_string(),
                    python_version: Some(version),
                });
                break;
            }
        }
    }
    found
}

/// The `python3.X` whose site-packages holds ipykernel, if `venv` is a venv that has it.
fn ipykernel_site(venv: &Path) -> Option<String> {
    if !venv.join("pyvenv.cfg").is_file() || !venv.join("bin/python").exists() {
        return None;
    }
    let mut libs: Vec<_> = std::fs::read_dir(venv.join("lib"))
        .ok()?
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("python"))
        .collect();
    libs.sort();
    libs.into_iter().find(|lib| {
        venv.join("lib")
            .join(lib)
            .join("site-packages/ipykernel")
            .is_dir()
    })
}

/// The interpreter a `venv:` spec names: the venv itself, or a project's `.venv` / `venv`.
pub fn venv_python(path: &Path) -> Result<PathBuf, Box<ErrorInfo>> {
    if !path.is_absolute() {
        return Err(Box::new(ErrorInfo::new(
            "invalid_arguments",
            format!(
                "venv path {:?} must be absolute",
                path.display().to_string()
            ),
        )));
    }
    for venv in [path.to_owned(), path.join(".venv"), path.join("venv")] {
        if ipykernel_site(&venv).is_some() {
            return Ok(venv.join("bin/python"));
        }
    }
    let has_venv = [path.to_owned(), path.join(".venv"), path.join("venv")]
        .iter()
        .any(|venv| venv.join("pyvenv.cfg").is_file());
    Err(Box::new(ErrorInfo::new(
        "invalid_arguments",
        if has_venv {
            format!(
                "the virtualenv at {} does not have ipykernel",
                path.display()
            )
        } else {
            format!("no virtualenv (.venv or venv) at {}", path.display())
        },
    )
    .with_hint(if has_venv {
        "install it there (`<venv>/bin/python -m pip install ipykernel`, or `uv pip install ipykernel`) and call kernel_start again"
    } else {
        "pass the project directory that holds .venv, or the venv itself; kernel_discover lists what it finds"
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn reads_specs_and_the_first_directory_wins() {
        let root = tempfile::tempdir().unwrap();
        let first = root.path().join("a");
        let second = root.path().join("b");
        write(
            &first.join("kernels/bash/kernel.json"),
            r#"{"argv": ["python", "-m", "bash_kernel", "-f", "{connection_file}"], "display_name": "Bash", "language": "bash", "interrupt_mode": "message"}"#,
        );
        write(
            &second.join("kernels/bash/kernel.json"),
            r#"{"argv": ["other"], "display_name": "Other", "language": "bash"}"#,
        );
        write(
            &second.join("kernels/py/kernel.json"),
            r#"{"argv": ["/opt/py/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}", "--x={resource_dir}"], "language": "python", "env": {"A": "1"}}"#,
        );
        write(&second.join("kernels/broken/kernel.json"), "{not json");
        let specs = discover(&[first.clone(), second.clone()]);
        let names: Vec<_> = specs.iter().map(|spec| spec.name.as_str()).collect();
        assert_eq!(names, vec!["bash", "py"]);
        let bash = &specs[0];
        assert_eq!(bash.display_name, "Bash");
        assert_eq!(bash.interrupt_mode, InterruptMode::Message);
        assert!(!bash.is_ipykernel());
        assert_eq!(
            bash.command(Path::new("/env/bin/python"))[..3],
            ["/env/bin/python", "-m", "bash_kernel"]
        );
        let py = &specs[1];
        assert!(py.is_ipykernel());
        assert_eq!(py.display_name, "py");
        assert_eq!(py.env.get("A").map(String::as_str), Some("1"));
        let command = py.command(Path::new("/env/bin/python"));
        assert_eq!(command[0], "/opt/py/bin/python");
        assert_eq!(
            command[5],
            format!("--x={}", second.join("kernels/py").display())
        );
    }

    fn fake_venv(dir: &Path, with_ipykernel: bool) {
        write(&dir.join("pyvenv.cfg"), "home = /usr/bin\n");
        write(&dir.join("bin/python"), "");
        let site = dir.join("lib/python3.12/site-packages");
        std::fs::create_dir_all(&site).unwrap();
        if with_ipykernel {
            std::fs::create_dir_all(site.join("ipykernel")).unwrap();
        }
    }

    #[test]
    fn finds_venvs_with_ipykernel_in_a_tree() {
        let root = tempfile::tempdir().unwrap();
        fake_venv(&root.path().join("alpha/.venv"), true);
        fake_venv(&root.path().join("beta/venv"), true);
        fake_venv(&root.path().join("gamma/.venv"), false);
        let found = discover_venvs(root.path());
        let names: Vec<_> = found.iter().map(|venv| venv.name.clone()).collect();
        assert_eq!(
            names,
            vec![
                format!("venv:{}", root.path().join("alpha").display()),
                format!("venv:{}", root.path().join("beta").display()),
            ]
        );
        assert_eq!(found[0].python_version.as_deref(), Some("python3.12"));
        assert_eq!(
            venv_python(&root.path().join("beta")).unwrap(),
            root.path().join("beta/venv/bin/python")
        );
        let error = venv_python(&root.path().join("gamma")).unwrap_err();
        assert!(
            error.message.contains("does not have ipykernel"),
            "{error:?}"
        );
        let error = venv_python(&root.path().join("nothing")).unwrap_err();
        assert!(error.message.contains("no virtualenv"), "{error:?}");
        assert!(venv_python(Path::new("relative")).is_err());
    }
}
