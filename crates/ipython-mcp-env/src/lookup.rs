//! Finding executables on a PATH string handed in by the caller (the library never reads the
//! process environment, so tests and the server decide what is searched).

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The first executable regular file called `name` in the directories of `path_var`.
///
/// Empty and relative entries are skipped: they mean "the current directory", which would make
/// the result depend on where the server happened to be started.
pub(crate) fn find_executable(name: &str, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let path_var = path_var?;
    std::env::split_paths(path_var)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable_file(candidate))
}

/// Whether `path` (after following symlinks) is a regular file with an execute bit set.
pub(crate) fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path)
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// [`find_executable`] on the blocking pool: PATH directories may sit on a slow network volume.
pub(crate) async fn find(name: &str, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let (name, path_var) = (name.to_owned(), path_var.map(OsStr::to_owned));
    tokio::task::spawn_blocking(move || find_executable(&name, path_var.as_deref()))
        .await
        .ok()
        .flatten()
}

/// [`is_executable_file`] on the blocking pool.
pub(crate) async fn is_executable(path: &Path) -> bool {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || is_executable_file(&path))
        .await
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::fs;

    fn make(dir: &Path, name: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, "#!/bin/sh\n").expect("write test file");
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod test file");
        path
    }

    fn path_var(dirs: &[&Path]) -> OsString {
        std::env::join_paths(dirs).expect("test paths contain no ':'")
    }

    #[test]
    fn first_executable_match_wins() {
        let first = tempfile::tempdir().expect("tempdir");
        let second = tempfile::tempdir().expect("tempdir");
        make(first.path(), "python3", 0o644); // not executable: skipped
        let expected = make(second.path(), "python3", 0o755);
        make(second.path(), "uv", 0o755);
        let path = path_var(&[first.path(), second.path()]);
        assert_eq!(find_executable("python3", Some(&path)), Some(expected));
    }

    #[test]
    fn directories_missing_entries_and_no_path_find_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir(dir.path().join("python3")).expect("mkdir");
        let path = path_var(&[dir.path(), Path::new("/nonexistent/ipython-mcp")]);
        assert_eq!(find_executable("python3", Some(&path)), None);
        assert_eq!(find_executable("python3", None), None);
        assert_eq!(find_executable("python3", Some(OsStr::new(""))), None);
    }

    #[test]
    fn relative_and_empty_entries_are_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        make(dir.path(), "python3", 0o755);
        // "." and "" both mean the current directory to a shell; we never search it.
        assert_eq!(find_executable("python3", Some(OsStr::new(".::bin"))), None);
    }

    #[test]
    fn symlinks_to_executables_are_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = make(dir.path(), "python3.11", 0o755);
        let bin = dir.path().join("bin");
        fs::create_dir(&bin).expect("mkdir");
        std::os::unix::fs::symlink(&target, bin.join("python3")).expect("symlink");
        let path = path_var(&[&bin]);
        assert_eq!(
            find_executable("python3", Some(&path)),
            Some(bin.join("python3"))
        );
    }
}
