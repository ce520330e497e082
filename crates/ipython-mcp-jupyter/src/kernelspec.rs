//! Jupyter kernelspecs and project virtualenvs: finding them (`kernel_discover`) and turning a
//! user's choice (`kernel_start`'s `spec`) into how a session starts its kernels.
//!
//! Written here rather than taken from the runtimed crates: their discovery misses venv
//! kernels, shells out to `jupyter --paths` (86 ms) and runs `argv[0] = "python"` from PATH.
//! A kernelspec is a small JSON file; reading the standard
//! directories ourselves is simpler and re-scans cheaply on every call. Everything here reads
//! files: callers on an async runtime call it from a blocking thread.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::launch::{runs_ipykernel, InterruptMode};

/// The name Jupyter gives the default Python kernelspec, and what a new notebook names. A
/// notebook that names it runs in a kernel like the default session's, found the same way.
pub const PYTHON3: &str = "python3";

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
    /// The project the spec belongs to: the directory holding the virtualenv it is installed
    /// in (`<project>/<venv>/share/jupyter/kernels/<name>`), where its kernels start.
    pub project: Option<PathBuf>,
}

impl KernelSpec {
    /// True for an ipykernel spec: such kernels get the helper and our ipykernel options.
    pub fn is_ipykernel(&self) -> bool {
        self.language.eq_ignore_ascii_case("python") && runs_ipykernel(&self.argv)
    }

    /// The command line to launch, as jupyter_client's `format_kernel_cmd` makes it:
    /// `{resource_dir}` and `{prefix}` (the kernel Python's environment) filled in, and a bare
    /// `python`, `python3` or `python3.X` program (X the kernel Python's own minor version)
    /// replaced by the kernel Python, as Jupyter replaces it by its own interpreter. Everything
    /// else — wrapper scripts, flags — is kept as it is; `{connection_file}` is left for the
    /// launcher.
    pub fn command(&self, python: &Path, python_version: &str) -> Vec<String> {
        let resource_dir = self.resource_dir.display().to_string();
        // <prefix>/bin/python → <prefix>, as `data_dirs` reads it.
        let prefix = python
            .parent()
            .and_then(Path::parent)
            .map(|prefix| prefix.display().to_string());
        let mut minor = python_version.split('.');
        let bare = match (minor.next(), minor.next()) {
            (Some(major), Some(minor)) => vec![
                "python".to_owned(),
                format!("python{major}"),
                format!("python{major}.{minor}"),
            ],
            _ => vec!["python".to_owned(), "python3".to_owned()],
        };
        self.argv
            .iter()
            .enumerate()
            .map(|(index, arg)| {
                if index == 0 && bare.contains(arg) {
                    return python.display().to_string();
                }
                let arg = arg.replace("{resource_dir}", &resource_dir);
                match &prefix {
                    Some(prefix) => arg.replace("{prefix}", prefix),
                    None => arg,
                }
            })
            .collect()
    }

    /// The spec's `env`, with `$NAME` and `${NAME}` replaced by the server's own variables
    /// (`$$` is a `$`; unknown names stay as written), as jupyter_client substitutes them, so
    /// `"PATH": "/opt/tool/bin:${PATH}"` extends the path instead of replacing it.
    pub fn environment(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .map(|(name, value)| {
                let value = substitute(value, |name| std::env::var(name).ok());
                (name.clone(), value)
            })
            .collect()
    }
}

/// Python's `string.Template.safe_substitute`: `$$`, `$name` and `${name}`, names of ASCII
/// letters, digits and `_` not starting with a digit; anything else is kept as written.
fn substitute(template: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    fn is_name(text: &str) -> bool {
        text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    }
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let (name, consumed) = match after.strip_prefix('{') {
            Some(braced) => match braced.find('}') {
                Some(end) if is_name(&braced[..end]) => (&braced[..end], end + 2),
                _ => ("", 0),
            },
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                if is_name(&after[..end]) {
                    (&after[..end], end)
                } else {
                    ("", 0)
                }
            }
        };
        match (consumed, lookup(name)) {
            (1.., Some(value)) => {
                out.push_str(&value);
                rest = &after[consumed..];
            }
            _ => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
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

/// The largest `kernel.json` read.
const MAX_SPEC_BYTES: u64 = 1024 * 1024;

fn read_spec(name: &str, dir: &Path) -> Option<KernelSpec> {
    // A kernel may write its environment's kernelspecs (`%pip install` does): its
    // `kernel.json` is read as an untrusted file, never through a link, a FIFO or a device.
    let bytes = ipython_mcp_untrusted::read(dir, Path::new("kernel.json"), MAX_SPEC_BYTES)
        .inspect_err(|error| {
            if !error.is_not_found() {
                tracing::debug!(%error, "kernelspec skipped");
            }
        })
        .ok()?;
    let json: KernelJson = serde_json::from_slice(&bytes).ok()?;
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
        project: project_of_spec(dir),
    })
}

/// The directory holding the virtualenv a spec directory is installed in, if it is in one.
fn project_of_spec(spec_dir: &Path) -> Option<PathBuf> {
    let kernels = spec_dir.parent()?;
    let jupyter = kernels.parent()?;
    let share = jupyter.parent()?;
    let venv = share.parent()?;
    let layout = kernels.file_name()? == "kernels"
        && jupyter.file_name()? == "jupyter"
        && share.file_name()? == "share";
    (layout && venv.join("pyvenv.cfg").is_file())
        .then(|| venv.parent().map(Path::to_owned))
        .flatten()
}

/// A Python virtualenv with ipykernel, found under a directory.
#[derive(Debug, Clone, PartialEq)]
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

/// A `venv:` spec's interpreter and project.
#[derive(Debug, Clone, PartialEq)]
pub struct VenvPython {
    pub python: PathBuf,
    /// The directory holding the venv: the one named, or the venv's parent when the venv
    /// itself was named.
    pub project: PathBuf,
}

/// Why a `venv:` spec names no usable interpreter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum VenvError {
    #[error("venv path {path:?} must be absolute")]
    NotAbsolute { path: PathBuf },
    #[error("the virtualenv at {} does not have ipykernel", .path.display())]
    NoIpykernel { path: PathBuf },
    #[error("no virtualenv (.venv or venv) at {}", .path.display())]
    NoVenv { path: PathBuf },
}

/// The interpreter a `venv:` spec names: the venv itself, or a project's `.venv` / `venv`.
pub fn venv_python(path: &Path) -> Result<VenvPython, VenvError> {
    if !path.is_absolute() {
        return Err(VenvError::NotAbsolute {
            path: path.to_owned(),
        });
    }
    for venv in [path.to_owned(), path.join(".venv"), path.join("venv")] {
        if ipykernel_site(&venv).is_some() {
            let project = venv.parent().unwrap_or(&venv).to_owned();
            return Ok(VenvPython {
                python: venv.join("bin/python"),
                project,
            });
        }
    }
    let has_venv = [path.to_owned(), path.join(".venv"), path.join("venv")]
        .iter()
        .any(|venv| venv.join("pyvenv.cfg").is_file());
    let path = path.to_owned();
    Err(if has_venv {
        VenvError::NoIpykernel { path }
    } else {
        VenvError::NoVenv { path }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_kernel_json_that_is_a_link_or_a_fifo_is_skipped_without_blocking() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        let secret = root.path().join("secret.json");
        write(&secret, r#"{"argv": ["leaked"], "display_name": "Secret"}"#);
        std::fs::create_dir_all(data.join("kernels/linked")).unwrap();
        std::os::unix::fs::symlink(&secret, data.join("kernels/linked/kernel.json")).unwrap();
        std::fs::create_dir_all(data.join("kernels/zero")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", data.join("kernels/zero/kernel.json")).unwrap();
        std::fs::create_dir_all(data.join("kernels/fifo")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(data.join("kernels/fifo/kernel.json"))
            .status()
            .unwrap();
        assert!(made.success());
        write(
            &data.join("kernels/plain/kernel.json"),
            r#"{"argv": ["python"], "display_name": "Plain"}"#,
        );
        let names: Vec<_> = discover(&[data])
            .into_iter()
            .map(|spec| spec.name)
            .collect();
        assert_eq!(names, vec!["plain"]);
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
            bash.command(Path::new("/env/bin/python"), "3.11.7")[..3],
            ["/env/bin/python", "-m", "bash_kernel"]
        );
        assert_eq!(bash.project, None);
        let py = &specs[1];
        assert!(py.is_ipykernel());
        assert_eq!(py.display_name, "py");
        assert_eq!(py.env.get("A").map(String::as_str), Some("1"));
        let command = py.command(Path::new("/env/bin/python"), "3.11.7");
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
        let beta = root.path().join("beta");
        assert_eq!(
            venv_python(&beta).unwrap(),
            VenvPython {
                python: beta.join("venv/bin/python"),
                project: beta.clone(),
            }
        );
        // Naming the venv itself: the project is the directory holding it.
        assert_eq!(venv_python(&beta.join("venv")).unwrap().project, beta);
        let error = venv_python(&root.path().join("gamma")).unwrap_err();
        assert!(
            error.to_string().contains("does not have ipykernel"),
            "{error:?}"
        );
        let error = venv_python(&root.path().join("nothing")).unwrap_err();
        assert!(error.to_string().contains("no virtualenv"), "{error:?}");
        assert!(venv_python(Path::new("relative")).is_err());
    }

    fn spec(argv: &[&str]) -> KernelSpec {
        KernelSpec {
            name: "k".into(),
            display_name: "k".into(),
            language: "python".into(),
            argv: argv.iter().map(|arg| (*arg).to_owned()).collect(),
            env: BTreeMap::new(),
            interrupt_mode: InterruptMode::Signal,
            resource_dir: PathBuf::from("/specs/k"),
            project: None,
        }
    }

    #[test]
    fn a_bare_python_becomes_the_kernel_python_and_everything_else_is_kept() {
        let python = Path::new("/env/bin/python");
        for (program, expected) in [
            ("python", "/env/bin/python"),
            ("python3", "/env/bin/python"),
            ("python3.11", "/env/bin/python"),
            // Another version is not ours to replace: PATH finds it, as for Jupyter.
            ("python3.9", "python3.9"),
            ("/usr/bin/python3", "/usr/bin/python3"),
            ("/work/wrap.sh", "/work/wrap.sh"),
        ] {
            let command = spec(&[program, "-X", "{prefix}/x", "--dir={resource_dir}"])
                .command(python, "3.11.7");
            assert_eq!(
                command,
                [expected, "-X", "/env/x", "--dir=/specs/k"],
                "{program}"
            );
        }
        let wrapper = spec(&[
            "conda",
            "run",
            "-n",
            "x",
            "python",
            "-m",
            "ipykernel_launcher",
        ]);
        assert!(wrapper.is_ipykernel());
        assert_eq!(wrapper.command(python, "3.11.7"), wrapper.argv);
        assert!(!spec(&["/opt/start.sh", "{connection_file}"]).is_ipykernel());
    }

    #[test]
    fn env_values_substitute_like_string_template() {
        let lookup = |name: &str| match name {
            "PATH" => Some("/bin".to_owned()),
            "_A1" => Some("a".to_owned()),
            _ => None,
        };
        for (template, expected) in [
            ("/opt/bin:${PATH}", "/opt/bin:/bin"),
            ("$PATH:/x", "/bin:/x"),
            ("$_A1$_A1", "aa"),
            ("$$PATH", "$PATH"),
            ("$UNKNOWN ${UNKNOWN}", "$UNKNOWN ${UNKNOWN}"),
            ("${1X} $1 ${PATH", "${1X} $1 ${PATH"),
            ("cost: 5$", "cost: 5$"),
            ("plain", "plain"),
        ] {
            assert_eq!(substitute(template, lookup), expected, "{template}");
        }
    }

    #[test]
    fn a_spec_installed_in_a_venv_belongs_to_the_project_holding_it() {
        let root = tempfile::tempdir().unwrap();
        let venv = root.path().join("project/.venv");
        fake_venv(&venv, true);
        let data = venv.join("share/jupyter");
        write(
            &data.join("kernels/proj/kernel.json"),
            r#"{"argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"], "language": "python"}"#,
        );
        let other = root.path().join("plain/share/jupyter");
        write(
            &other.join("kernels/other/kernel.json"),
            r#"{"argv": ["python"], "language": "python"}"#,
        );
        let specs = discover(&[data, other]);
        assert_eq!(specs[1].name, "proj");
        assert_eq!(
            specs[1].project.as_deref(),
            Some(root.path().join("project").as_path())
        );
        assert_eq!(specs[0].project, None);
    }
}
