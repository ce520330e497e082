//! Workspace confinement: turning an agent's relative notebook path into a file inside the
//! workspace root, or refusing it before anything is opened.

use std::collections::HashMap;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use ipython_mcp_text::shorten;

use crate::directory;
use crate::error::Error;

/// Longest accepted notebook path, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;

/// The directory every notebook path is relative to.
#[derive(Debug)]
pub struct Workspace {
    /// Canonical (symlinks resolved, absolute).
    root: PathBuf,
    /// The root, opened once: every notebook path is opened beneath this descriptor.
    root_fd: OwnedFd,
    /// One lock per notebook file: writers in this process take turns, so two tool calls never
    /// interleave a read-modify-write of the same file. Other processes are caught by the
    /// revision check instead. Held weakly: an entry lives only while some call holds or
    /// waits for its lock, so the map is bounded by the calls in flight, not by every file
    /// ever touched.
    locks: Mutex<HashMap<PathBuf, Weak<Mutex<()>>>>,
}

/// How a notebook is stored, from its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `.ipynb`: nbformat 4 JSON, outputs included.
    Ipynb,
    /// `.py`: a jupytext `py:percent` script (sources and metadata, no outputs or ids).
    Percent,
}

/// What a notebook path on the configured Jupyter server starts with: `jupyter:work/a.ipynb`
/// is `work/a.ipynb` in that server's contents, not a local file.
pub const JUPYTER_PREFIX: &str = "jupyter:";

/// A checked notebook path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotebookPath {
    /// As the agent gave it (already normalized: plain components joined by `/`), with
    /// [`JUPYTER_PREFIX`] for a notebook on the Jupyter server.
    pub relative: String,
    /// The file's path: the root joined with `relative` (which crosses no symlink when it was
    /// resolved). It names the file (bindings, a kernel's working directory); reads and writes
    /// never go by it, but by descriptor from the root. For a notebook on the Jupyter server,
    /// `relative` (never a file of this machine; it only names the notebook).
    pub absolute: PathBuf,
    pub format: Format,
    /// For a notebook on the Jupyter server, its path in the server's contents: `relative`
    /// without the prefix, inside the caller's area when it has one (a principal's directory).
    server: Option<String>,
}

impl NotebookPath {
    /// A notebook in the Jupyter server's contents, `server_path` checked as a workspace path
    /// is (relative, plain components, no `..`): the server confines it to its root. Only
    /// `.ipynb` (the contents API keeps other files as plain text).
    pub fn jupyter(server_path: &str) -> Result<NotebookPath, Error> {
        NotebookPath::jupyter_in(server_path, None)
    }

    /// As [`NotebookPath::jupyter`], inside `area` (a directory name of the server's root,
    /// e.g. a principal's): the agent's path is relative to it, and no path leaves it.
    pub fn jupyter_in(server_path: &str, area: Option<&str>) -> Result<NotebookPath, Error> {
        let shown = || shorten(&format!("{JUPYTER_PREFIX}{server_path}"), 200);
        let components = check_syntax(server_path).map_err(|reason| Error::InvalidPath {
            path: shown(),
            reason,
        })?;
        if !server_path.ends_with(".ipynb") {
            return Err(Error::InvalidPath {
                path: shown(),
                reason: "a notebook on the Jupyter server must end in '.ipynb'".to_owned(),
            });
        }
        let inside = components.join("/");
        let server = match area {
            Some(area) => format!("{area}/{inside}"),
            None => inside.clone(),
        };
        let relative = format!("{JUPYTER_PREFIX}{inside}");
        Ok(NotebookPath {
            absolute: PathBuf::from(&relative),
            relative,
            format: Format::Ipynb,
            server: Some(server),
        })
    }

    /// The path in the Jupyter server's contents, for a notebook there.
    pub fn server_path(&self) -> Option<&str> {
        self.server.as_deref()
    }
}

impl Workspace {
    /// A workspace rooted at `root`, which must be an existing directory.
    pub fn new(root: &Path) -> Result<Workspace, Error> {
        let canonical = root.canonicalize().map_err(|error| Error::Io {
            path: root.display().to_string(),
            message: error.to_string(),
        })?;
        if !canonical.is_dir() {
            return Err(Error::InvalidPath {
                path: root.display().to_string(),
                reason: "the workspace root is not a directory".to_owned(),
            });
        }
        let root_fd = directory::open_root(&canonical).map_err(|error| Error::Io {
            path: root.display().to_string(),
            message: error.to_string(),
        })?;
        Ok(Workspace {
            root: canonical,
            root_fd,
            locks: Mutex::default(),
        })
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Checks `relative` and finds the file it names. The file need not exist, but its
    /// directory must. Every component is opened beneath the root without following a
    /// symlink: a symlink anywhere in the path (even one that stays inside), a component that
    /// is not a directory, or a file that is not a regular one is refused. Writes check again
    /// by descriptor (see `directory.rs`), so a path swapped after this check is refused then.
    pub fn resolve(&self, relative: &str) -> Result<NotebookPath, Error> {
        let invalid = |reason: String| Error::InvalidPath {
            path: shorten(relative, 200),
            reason,
        };
        let components = check_syntax(relative).map_err(invalid)?;
        let (file_name, directories) = components.split_last().expect("at least one component");
        let directory = directory::open_directory(self.root_fd.as_fd(), directories, relative)?;
        directory::check_file(directory.as_fd(), file_name, relative)?;
        let format = if file_name.ends_with(".py") {
            Format::Percent
        } else {
            Format::Ipynb
        };
        let mut absolute = self.root.clone();
        absolute.extend(&components);
        Ok(NotebookPath {
            relative: components.join("/"),
            absolute,
            format,
            server: None,
        })
    }

    /// The directory of a checked workspace path, opened anew beneath the root by descriptor
    /// (whatever it was when the path was resolved), and the file's name in it.
    pub(crate) fn open_parent<'path>(
        &self,
        path: &'path NotebookPath,
    ) -> Result<(OwnedFd, &'path str), Error> {
        if path.server.is_some() {
            return Err(Error::InvalidPath {
                path: shorten(&path.relative, 200),
                reason: "a notebook on the Jupyter server is not a workspace file".to_owned(),
            });
        }
        let components: Vec<&str> = path.relative.split('/').collect();
        let (file_name, directories) = components.split_last().expect("split yields one item");
        let directory =
            directory::open_directory(self.root_fd.as_fd(), directories, &path.relative)?;
        Ok((directory, file_name))
    }

    /// Root-relative paths of the workspace's `.ipynb` files, sorted, found by descriptor
    /// within `scan`'s bounds: no symlink followed, hidden entries skipped.
    pub fn find_notebooks(&self, scan: directory::Scan) -> Vec<String> {
        directory::find_notebooks(self.root_fd.as_fd(), scan)
    }

    /// The lock of one notebook file (see `locks`).
    pub(crate) fn lock_for(&self, path: &Path) -> Arc<Mutex<()>> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(lock) = locks.get(path).and_then(Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, lock| lock.strong_count() > 0);
        let lock = Arc::new(Mutex::new(()));
        locks.insert(path.to_owned(), Arc::downgrade(&lock));
        lock
    }

    /// How many file locks the workspace keeps (for tests).
    #[cfg(test)]
    fn lock_entries(&self) -> usize {
        self.locks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }
}

/// The plain components of a relative notebook path, or why it is refused.
fn check_syntax(relative: &str) -> Result<Vec<&str>, String> {
    if relative.is_empty() {
        return Err("the path is empty".to_owned());
    }
    if relative.len() > MAX_PATH_BYTES {
        return Err(format!("the path is longer than {MAX_PATH_BYTES} bytes"));
    }
    if relative.chars().any(char::is_control) {
        return Err("the path contains control characters".to_owned());
    }
    if relative.starts_with('/') || relative.starts_with('~') {
        return Err(
            "absolute paths are not accepted; give a path relative to the workspace root"
                .to_owned(),
        );
    }
    if relative.contains('\\') {
        return Err("use '/' to separate directories, not '\\'".to_owned());
    }
    let components: Vec<&str> = relative.split('/').collect();
    for component in &components {
        match *component {
            "" => return Err("the path has an empty component ('//' or a trailing '/')".to_owned()),
            "." | ".." => return Err("'.' and '..' components are not accepted".to_owned()),
            _ => {}
        }
    }
    let file_name = components.last().expect("split yields one item");
    match file_name
        .strip_suffix(".ipynb")
        .or_else(|| file_name.strip_suffix(".py"))
    {
        Some(stem) if !stem.is_empty() => Ok(components),
        _ => Err(
            "a notebook path must end in '.ipynb' (or '.py' for a jupytext percent script)"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = Workspace::new(dir.path()).expect("workspace");
        (dir, workspace)
    }

    #[test]
    fn plain_relative_paths_resolve_inside_the_root() {
        let (dir, workspace) = workspace();
        std::fs::create_dir(dir.path().join("sub dir")).expect("mkdir");
        let path = workspace.resolve("sub dir/分析.ipynb").expect("valid");
        assert_eq!(path.relative, "sub dir/分析.ipynb");
        assert_eq!(
            path.absolute,
            workspace.root().join("sub dir").join("分析.ipynb")
        );
    }

    #[test]
    fn malformed_and_escaping_paths_are_refused() {
        let (_dir, workspace) = workspace();
        for bad in [
            "",
            "/etc/passwd.ipynb",
            "~/x.ipynb",
            "../x.ipynb",
            "a/../x.ipynb",
            "./x.ipynb",
            "a//x.ipynb",
            "x.ipynb/",
            "x.txt",
            ".ipynb",
            "a\\x.ipynb",
            "x\0.ipynb",
            "line\nbreak.ipynb",
            "missing/x.ipynb",
        ] {
            let error = workspace.resolve(bad).expect_err(bad);
            assert_eq!(error.code(), "invalid_path", "{bad:?}: {error}");
        }
        let long = format!("{}.ipynb", "a".repeat(MAX_PATH_BYTES));
        assert!(workspace.resolve(&long).is_err());
    }

    #[test]
    fn jupyter_paths_are_checked_like_workspace_paths() {
        let path = NotebookPath::jupyter("work/分析.ipynb").expect("valid");
        assert_eq!(path.relative, "jupyter:work/分析.ipynb");
        assert_eq!(path.server_path(), Some("work/分析.ipynb"));
        // In an area: the agent's path is the same, the server's inside the area.
        let path = NotebookPath::jupyter_in("work/a.ipynb", Some("alice")).expect("valid");
        assert_eq!(path.relative, "jupyter:work/a.ipynb");
        assert_eq!(path.server_path(), Some("alice/work/a.ipynb"));
        assert!(NotebookPath::jupyter_in("../bob/a.ipynb", Some("alice")).is_err());
        for bad in ["", "../x.ipynb", "/x.ipynb", "a//x.ipynb", "x.py", "x.txt"] {
            let error = NotebookPath::jupyter(bad).expect_err(bad);
            assert_eq!(error.code(), "invalid_path", "{bad:?}: {error}");
            assert!(error.to_string().contains("jupyter:"), "{error}");
        }
    }

    #[test]
    fn symlinks_are_refused_wherever_they_lead_and_only_regular_files_pass() {
        let (dir, workspace) = workspace();
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("x.ipynb"), "{}").expect("write");
        std::fs::create_dir(dir.path().join("real")).expect("mkdir");
        std::fs::write(dir.path().join("real/x.ipynb"), "{}").expect("write");
        let link = |target: &Path, name: &str| {
            std::os::unix::fs::symlink(target, dir.path().join(name)).expect("symlink")
        };
        link(outside.path(), "out");
        link(&dir.path().join("real"), "in");
        link(&outside.path().join("x.ipynb"), "out.ipynb");
        link(&dir.path().join("real/x.ipynb"), "in.ipynb");
        std::fs::write(dir.path().join("plain"), "").expect("write");
        crate::directory::tests::make_fifo(&dir.path().join("fifo.ipynb"));
        for (path, reason) in [
            // A symlinked directory on the way, whether it leads out or stays inside.
            ("out/x.ipynb", "\"out\" is a symlink"),
            ("in/x.ipynb", "\"in\" is a symlink"),
            ("out/new.ipynb", "\"out\" is a symlink"),
            // The file itself a symlink, out or in.
            ("out.ipynb", "it is a symlink"),
            ("in.ipynb", "it is a symlink"),
            ("plain/x.ipynb", "\"plain\" is not a directory"),
            ("fifo.ipynb", "it is a FIFO, not a regular file"),
            ("real", "must end in '.ipynb'"),
        ] {
            let error = workspace.resolve(path).expect_err(path);
            assert_eq!(error.code(), "invalid_path", "{path}: {error}");
            assert!(error.to_string().contains(reason), "{path}: {error}");
            assert!(error.to_string().contains(path), "{path}: {error}");
        }
        let real = workspace.resolve("real/x.ipynb").expect("a plain path");
        assert_eq!(real.absolute, workspace.root().join("real/x.ipynb"));
        assert_eq!(
            std::fs::read_to_string(outside.path().join("x.ipynb")).expect("read"),
            "{}"
        );
    }

    #[test]
    fn file_locks_are_kept_only_while_held() {
        let (dir, workspace) = workspace();
        let first = workspace.lock_for(&dir.path().join("a.ipynb"));
        let again = workspace.lock_for(&dir.path().join("a.ipynb"));
        assert!(Arc::ptr_eq(&first, &again), "one lock per file while held");
        drop((first, again));
        for index in 0..1000 {
            let lock = workspace.lock_for(&dir.path().join(format!("n{index}.ipynb")));
            let _guard = lock.lock().expect("lock");
        }
        assert!(
            workspace.lock_entries() <= 1,
            "{} entries after 1000 files",
            workspace.lock_entries()
        );
    }
}
