//! Reading and writing notebook files: revisions (SHA-256 of the bytes), optimistic
//! concurrency, atomic replacement that keeps the file's permissions.

use std::os::fd::{AsFd as _, OwnedFd};

use sha2::{Digest, Sha256};

use crate::directory::{self, Contents, TempFile};
use crate::error::Error;
use crate::model::Notebook;
use crate::path::{Format, NotebookPath, Workspace};

/// A notebook as read, with the revision of the bytes it came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub notebook: Notebook,
    pub revision: String,
    /// Size of the file.
    pub bytes: usize,
}

/// What [`Workspace::mutate`] wrote.
#[derive(Debug, Clone)]
pub struct Mutated<T> {
    /// The checked path of the file.
    pub path: NotebookPath,
    /// What the change returned.
    pub value: T,
    /// The file's revision after the write.
    pub revision: String,
    /// Cells in the notebook after the change.
    pub cell_count: usize,
}

/// The revision of some file bytes: lowercase hex SHA-256.
pub fn revision_of(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn io_error(path: &NotebookPath, error: std::io::Error) -> Error {
    if error.kind() == std::io::ErrorKind::NotFound {
        Error::NotFound {
            path: path.relative.clone(),
        }
    } else {
        Error::Io {
            path: path.relative.clone(),
            message: error.to_string(),
        }
    }
}

/// The notebook's file as it is now, read in its directory's descriptor (`None`: no file).
fn current(
    directory: &OwnedFd,
    name: &str,
    path: &NotebookPath,
) -> Result<Option<Contents>, Error> {
    directory::read_file(directory.as_fd(), name, &path.relative)
}

fn not_found(path: &NotebookPath) -> Error {
    Error::NotFound {
        path: path.relative.clone(),
    }
}

fn parse(path: &NotebookPath, bytes: &[u8]) -> Result<Notebook, Error> {
    let parsed = match path.format {
        Format::Ipynb => Notebook::parse(bytes),
        Format::Percent => std::str::from_utf8(bytes)
            .map_err(|_| "the script is not UTF-8".to_owned())
            .and_then(crate::percent::parse_percent),
    };
    parsed.map_err(|problem| Error::InvalidNotebook {
        path: path.relative.clone(),
        problem,
    })
}

/// The file bytes of a notebook in the path's format.
pub fn encode(path: &NotebookPath, notebook: &Notebook) -> Vec<u8> {
    match path.format {
        Format::Ipynb => notebook.to_bytes(),
        Format::Percent => crate::percent::to_percent(notebook).into_bytes(),
    }
}

fn check_revision(path: &NotebookPath, expected: Option<&str>, actual: &str) -> Result<(), Error> {
    match expected {
        Some(expected) if !expected.eq_ignore_ascii_case(actual) => Err(Error::RevisionConflict {
            path: path.relative.clone(),
            expected: expected.to_owned(),
            actual: actual.to_owned(),
        }),
        _ => Ok(()),
    }
}

impl Workspace {
    /// The bytes of a notebook file, read by descriptor beneath the root (a regular file of
    /// at most [`MAX_NOTEBOOK_BYTES`](crate::MAX_NOTEBOOK_BYTES), no symlink on the way).
    fn read_bytes(&self, path: &NotebookPath) -> Result<Vec<u8>, Error> {
        let (directory, name) = self.open_parent(path)?;
        match current(&directory, name, path)? {
            Some(contents) => Ok(contents.bytes),
            None => Err(not_found(path)),
        }
    }

    /// The size of a notebook file in bytes, from its `fstat` (opened as a read opens it).
    pub fn size(&self, path: &NotebookPath) -> Result<u64, Error> {
        let (directory, name) = self.open_parent(path)?;
        directory::file_size(directory.as_fd(), name, &path.relative)?
            .ok_or_else(|| not_found(path))
    }

    /// Reads and parses a notebook.
    pub fn read(&self, path: &NotebookPath) -> Result<Loaded, Error> {
        let mut release = ReleaseAfter(0);
        let bytes = self.read_bytes(path)?;
        release.0 = bytes.len();
        Ok(Loaded {
            notebook: parse(path, &bytes)?,
            revision: revision_of(&bytes),
            bytes: bytes.len(),
        })
    }

    /// The current revision of a notebook file and its size in bytes (without parsing it).
    pub fn revision_and_size(&self, path: &NotebookPath) -> Result<(String, usize), Error> {
        let bytes = self.read_bytes(path)?;
        Ok((revision_of(&bytes), bytes.len()))
    }

    /// The current revision of a notebook file (without parsing it).
    pub fn revision(&self, path: &NotebookPath) -> Result<String, Error> {
        Ok(revision_of(&self.read_bytes(path)?))
    }

    /// Writes a new notebook. Without `overwrite`, an existing file is an error; with it, the
    /// file is replaced (when `expected_revision` is given, only if it still has it).
    pub fn create(
        &self,
        path: &NotebookPath,
        notebook: &Notebook,
        overwrite: bool,
        expected_revision: Option<&str>,
    ) -> Result<String, Error> {
        let lock = self.lock_for(&path.absolute);
        let _guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let bytes = encode(path, notebook);
        let (directory, name) = self.open_parent(path)?;
        if overwrite {
            let current = current(&directory, name, path)?
                .map(|contents| (revision_of(&contents.bytes), contents.mode));
            if let (Some(expected), Some((current, _))) = (expected_revision, &current) {
                check_revision(path, Some(expected), current)?;
            }
            write_atomic(&directory, name, path, &bytes, current)?;
        } else {
            write_new(&directory, name, path, &bytes)?;
        }
        Ok(revision_of(&bytes))
    }

    /// Resolves `relative`, reads and parses the notebook, and checks that the file is at
    /// `expected_revision` when one is given: what a run needs before it starts. The check
    /// comes after the read, so a missing or unreadable file is reported as such first.
    pub fn load(
        &self,
        relative: &str,
        expected_revision: Option<&str>,
    ) -> Result<(NotebookPath, Loaded), Error> {
        let path = self.resolve(relative)?;
        let loaded = self.read(&path)?;
        check_revision(&path, expected_revision, &loaded.revision)?;
        Ok((path, loaded))
    }

    /// The one read-modify-write of a notebook file, for every edit and every save of
    /// outputs: resolve `relative` in the workspace, take the file's lock, read it and check
    /// it is at `expected_revision` (when given), apply `change` to the notebook (ids
    /// ensured), write it atomically and return the new revision with what `change`
    /// returned. When any step fails nothing is written: the file stays byte for byte as it
    /// was (see `update`).
    pub fn mutate<T>(
        &self,
        relative: &str,
        expected_revision: Option<&str>,
        change: impl FnOnce(&mut Notebook) -> Result<T, Error>,
    ) -> Result<Mutated<T>, Error> {
        let path = self.resolve(relative)?;
        let ((value, cell_count), revision) =
            self.update(&path, expected_revision, |notebook| {
                let value = change(notebook)?;
                Ok((value, notebook.cells().len()))
            })?;
        Ok(Mutated {
            path,
            value,
            revision,
            cell_count,
        })
    }

    /// Read, change, write on a checked path, under the file's lock: `change` gets the
    /// notebook (with ids ensured) and its result is returned with the new revision. Fails
    /// with `RevisionConflict`, writing nothing, when the file is not at `expected_revision`
    /// (if given) when read, or changed by anyone before the replacement. A `change` that
    /// fails writes nothing either.
    fn update<T>(
        &self,
        path: &NotebookPath,
        expected_revision: Option<&str>,
        change: impl FnOnce(&mut Notebook) -> Result<T, Error>,
    ) -> Result<(T, String), Error> {
        // Declared first, dropped last: after every buffer below.
        let mut release = ReleaseAfter(0);
        let lock = self.lock_for(&path.absolute);
        let _guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // One descriptor of the directory for the read, the temp file and the rename.
        let (directory, name) = self.open_parent(path)?;
        let Contents { bytes, mode } =
            current(&directory, name, path)?.ok_or_else(|| not_found(path))?;
        release.0 = bytes.len();
        let revision = revision_of(&bytes);
        check_revision(path, expected_revision, &revision)?;
        let mut notebook = parse(path, &bytes)?;
        notebook.ensure_ids();
        let result = change(&mut notebook)?;
        let new_bytes = encode(path, &notebook);
        write_atomic(&directory, name, path, &new_bytes, Some((revision, mode)))?;
        Ok((result, revision_of(&new_bytes)))
    }
}

/// Notebooks at least this large give the memory their operation freed back to the system.
const RELEASE_AFTER_BYTES: usize = 1 << 20;

/// Hands the heap's free memory back to the system when dropped after an operation on a
/// notebook of `.0` bytes, if that is large. An edit holds the file several times over at once
/// (its bytes, the parsed notebook, the new bytes, the re-read before the rename), and glibc
/// keeps freed memory in its per-thread arenas: without this an 8 MB notebook left the server
/// at about 110 MiB resident for good. `malloc_trim` takes milliseconds, on the blocking
/// thread the operation ran on, and only after a notebook of a mebibyte or more.
struct ReleaseAfter(usize);

impl Drop for ReleaseAfter {
    fn drop(&mut self) {
        if self.0 >= RELEASE_AFTER_BYTES {
            release_free_memory();
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_memory() {
    // SAFETY: malloc_trim only returns free heap pages to the system; it touches no memory
    // in use and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_memory() {}

/// Creates the file `name` in `directory`, which must not exist yet: temp file, fsync, then a
/// rename that fails if the name was taken meanwhile.
fn write_new(
    directory: &OwnedFd,
    name: &str,
    path: &NotebookPath,
    bytes: &[u8],
) -> Result<(), Error> {
    let temp = TempFile::write(directory.as_fd(), bytes, directory::new_file_mode())
        .map_err(|error| io_error(path, error))?;
    match temp.create(name) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(Error::AlreadyExists {
                path: path.relative.clone(),
            })
        }
        Err(error) => return Err(io_error(path, error)),
    }
    directory::sync(directory.as_fd());
    Ok(())
}

/// Replaces the file `name` in `directory` atomically. `expected` is the revision the file
/// must still have right before the rename, with the permissions it keeps (`None`: it must
/// not exist).
fn write_atomic(
    directory: &OwnedFd,
    name: &str,
    path: &NotebookPath,
    bytes: &[u8],
    expected: Option<(String, rustix::fs::Mode)>,
) -> Result<(), Error> {
    let mode = expected
        .as_ref()
        .map_or_else(directory::new_file_mode, |(_, mode)| *mode);
    let temp =
        TempFile::write(directory.as_fd(), bytes, mode).map_err(|error| io_error(path, error))?;
    // The last check before the rename: another process may have written meanwhile. (What
    // remains is the window between this read and the rename, microseconds.)
    match (current(directory, name, path)?, expected) {
        (Some(current), Some((expected, _))) => {
            check_revision(path, Some(&expected), &revision_of(&current.bytes))?
        }
        (Some(current), None) => {
            return Err(Error::RevisionConflict {
                path: path.relative.clone(),
                expected: "(no file)".to_owned(),
                actual: revision_of(&current.bytes),
            })
        }
        (None, Some((expected, _))) => {
            return Err(Error::RevisionConflict {
                path: path.relative.clone(),
                expected,
                actual: "(deleted)".to_owned(),
            })
        }
        (None, None) => {}
    }
    temp.replace(name).map_err(|error| io_error(path, error))?;
    directory::sync(directory.as_fd());
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::model::{CellType, NewCell};

    fn setup() -> (tempfile::TempDir, Workspace, NotebookPath) {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = Workspace::new(dir.path()).expect("workspace");
        let path = workspace.resolve("n.ipynb").expect("path");
        (dir, workspace, path)
    }

    fn markdown(text: &str) -> NewCell {
        NewCell {
            cell_type: CellType::Markdown,
            source: text.to_owned(),
            metadata: Default::default(),
        }
    }

    #[test]
    fn create_refuses_to_clobber_and_update_changes_revision() {
        let (_dir, workspace, path) = setup();
        let notebook = Notebook::new("python3", "Python 3", "python");
        let first = workspace
            .create(&path, &notebook, false, None)
            .expect("create");
        let error = workspace
            .create(&path, &notebook, false, None)
            .expect_err("exists");
        assert_eq!(error.code(), "notebook_exists");
        assert_eq!(workspace.revision(&path).expect("revision"), first);
        let ((), second) = workspace
            .update(&path, Some(&first), |notebook| {
                notebook.insert(None, markdown("# hi")).map(|_| ())
            })
            .expect("update");
        assert_ne!(first, second);
        assert_eq!(workspace.revision(&path).expect("revision"), second);
    }

    #[test]
    fn a_stale_revision_changes_nothing() {
        let (_dir, workspace, path) = setup();
        let notebook = Notebook::new("python3", "Python 3", "python");
        let first = workspace
            .create(&path, &notebook, false, None)
            .expect("create");
        let ((), _second) = workspace
            .update(&path, None, |notebook| {
                notebook.insert(None, markdown("a")).map(|_| ())
            })
            .expect("update");
        let before = std::fs::read(&path.absolute).expect("read");
        let error = workspace
            .update(&path, Some(&first), |notebook| {
                notebook.insert(None, markdown("b")).map(|_| ())
            })
            .expect_err("stale");
        assert_eq!(error.code(), "revision_conflict");
        assert_eq!(std::fs::read(&path.absolute).expect("read"), before);
        // A failing change writes nothing either.
        let error = workspace
            .update(&path, None, |notebook| {
                notebook.locate(&crate::model::CellRef::Index(9))
            })
            .expect_err("no cell");
        assert_eq!(error.code(), "cell_not_found");
        assert_eq!(std::fs::read(&path.absolute).expect("read"), before);
    }

    #[test]
    fn a_write_by_someone_else_during_the_change_is_a_conflict() {
        let (_dir, workspace, path) = setup();
        let notebook = Notebook::new("python3", "Python 3", "python");
        workspace
            .create(&path, &notebook, false, None)
            .expect("create");
        let error = workspace
            .update(&path, None, |notebook| {
                // Another process rewrites the file while we are editing.
                let mut other = notebook.clone();
                other.insert(None, markdown("theirs")).expect("insert");
                std::fs::write(&path.absolute, other.to_bytes()).expect("write");
                notebook.insert(None, markdown("ours")).map(|_| ())
            })
            .expect_err("conflict");
        assert_eq!(error.code(), "revision_conflict");
        let text = std::fs::read_to_string(&path.absolute).expect("read");
        assert!(text.contains("theirs") && !text.contains("ours"));
    }

    /// The workspace's files and their bytes, temp files included.
    fn files(dir: &tempfile::TempDir) -> Vec<(std::ffi::OsString, Vec<u8>)> {
        let mut files: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .map(|entry| {
                let entry = entry.expect("entry");
                (
                    entry.file_name(),
                    std::fs::read(entry.path()).expect("read"),
                )
            })
            .collect();
        files.sort();
        files
    }

    fn created(workspace: &Workspace, path: &NotebookPath) -> String {
        let notebook = Notebook::new("python3", "Python 3", "python");
        workspace
            .create(path, &notebook, false, None)
            .expect("create")
    }

    #[test]
    fn mutate_writes_the_change_and_returns_the_new_revision() {
        let (dir, workspace, path) = setup();
        let first = created(&workspace, &path);
        let mutated = workspace
            .mutate("n.ipynb", Some(&first), |notebook| {
                notebook
                    .insert(None, markdown("# hi"))
                    .map(|(index, _)| index)
            })
            .expect("mutate");
        assert_eq!(mutated.value, 0);
        assert_eq!(mutated.cell_count, 1);
        assert_eq!(mutated.path, path);
        assert_ne!(mutated.revision, first);
        let bytes = std::fs::read(&path.absolute).expect("read");
        assert_eq!(mutated.revision, revision_of(&bytes));
        let loaded = workspace.read(&path).expect("read back");
        assert_eq!(joined_source(&loaded.notebook, 0), "# hi");
        assert_eq!(
            files(&dir).len(),
            1,
            "no temp file is left beside the notebook"
        );
    }

    #[test]
    fn mutate_at_a_stale_revision_is_a_conflict_and_writes_nothing() {
        let (dir, workspace, path) = setup();
        let first = created(&workspace, &path);
        workspace
            .mutate("n.ipynb", None, |notebook| {
                notebook.insert(None, markdown("a")).map(|_| ())
            })
            .expect("mutate");
        let before = files(&dir);
        let mut called = false;
        let error = workspace
            .mutate("n.ipynb", Some(&first), |_| {
                called = true;
                Ok(())
            })
            .expect_err("stale");
        assert_eq!(error.code(), "revision_conflict");
        assert!(!called, "the change is not applied to a stale notebook");
        assert_eq!(files(&dir), before);
    }

    #[test]
    fn mutate_of_a_missing_file_or_a_bad_path_creates_nothing() {
        let (dir, workspace, _path) = setup();
        let error = workspace
            .mutate("absent.ipynb", None, |_| Ok(()))
            .expect_err("missing");
        assert_eq!(error.code(), "notebook_not_found");
        let error = workspace
            .mutate("../outside.ipynb", None, |_| Ok(()))
            .expect_err("outside");
        assert_eq!(error.code(), "invalid_path");
        assert!(files(&dir).is_empty(), "{:?}", files(&dir));
    }

    #[test]
    fn a_failing_mutation_leaves_the_file_byte_identical() {
        let (dir, workspace, path) = setup();
        created(&workspace, &path);
        // An older notebook without ids: a write would add them, so any write would show.
        std::fs::write(
            &path.absolute,
            br#"{"cells": [{"cell_type": "markdown", "metadata": {}, "source": "x"}], "metadata": {}, "nbformat": 4, "nbformat_minor": 4}"#,
        )
        .expect("write");
        let before = files(&dir);
        let error = workspace
            .mutate("n.ipynb", None, |notebook| {
                notebook.delete(0);
                notebook.locate(&crate::model::CellRef::Id("gone".into()))
            })
            .expect_err("no cell");
        assert_eq!(error.code(), "cell_not_found");
        assert_eq!(files(&dir), before);
    }

    #[test]
    fn load_checks_the_revision_after_reading() {
        let (_dir, workspace, path) = setup();
        let first = created(&workspace, &path);
        let (loaded_path, loaded) = workspace.load("n.ipynb", Some(&first)).expect("load");
        assert_eq!((loaded_path, loaded.revision), (path.clone(), first));
        let error = workspace.load("n.ipynb", Some("0000")).expect_err("stale");
        assert_eq!(error.code(), "revision_conflict");
        let error = workspace
            .load("absent.ipynb", Some("0000"))
            .expect_err("missing");
        assert_eq!(error.code(), "notebook_not_found");
    }

    fn joined_source(notebook: &Notebook, index: usize) -> String {
        crate::model::joined_text(notebook.cells()[index].get("source"))
    }

    #[test]
    fn writes_keep_permissions_and_leave_no_temp_files() {
        let (dir, workspace, path) = setup();
        let notebook = Notebook::new("python3", "Python 3", "python");
        workspace
            .create(&path, &notebook, false, None)
            .expect("create");
        std::fs::set_permissions(&path.absolute, std::fs::Permissions::from_mode(0o640))
            .expect("chmod");
        workspace
            .update(&path, None, |notebook| {
                notebook.insert(None, markdown("x")).map(|_| ())
            })
            .expect("update");
        let mode = std::fs::metadata(&path.absolute)
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("n.ipynb")]);
    }

    /// A workspace `root/` with `sub/`, and a directory `outside/` beside it.
    fn beside_outside() -> (tempfile::TempDir, Workspace, std::path::PathBuf) {
        let top = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(top.path().join("root/sub")).expect("mkdir");
        std::fs::create_dir(top.path().join("outside")).expect("mkdir");
        let workspace = Workspace::new(&top.path().join("root")).expect("workspace");
        let outside = top.path().join("outside");
        (top, workspace, outside)
    }

    /// What a kernel does between the server's check and its write: `sub` moved aside and a
    /// symlink to `outside` put in its place.
    fn swap_for_symlink(workspace: &Workspace, outside: &std::path::Path) {
        let root = workspace.root();
        std::fs::rename(root.join("sub"), root.join("moved")).expect("rename");
        std::os::unix::fs::symlink(outside, root.join("sub")).expect("symlink");
    }

    fn listing(directory: &std::path::Path) -> Vec<std::ffi::OsString> {
        let mut names: Vec<_> = std::fs::read_dir(directory)
            .expect("ls")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_after_resolve_gets_no_write_outside() {
        let notebook = Notebook::new("python3", "Python 3", "python");
        // A create, a create that overwrites, and an edit: each resolved, then swapped.
        for (index, step) in ["create", "overwrite", "mutate"].into_iter().enumerate() {
            let (_top, workspace, outside) = beside_outside();
            let path = workspace.resolve("sub/n.py").expect("path");
            if step != "create" {
                created(&workspace, &path);
            }
            swap_for_symlink(&workspace, &outside);
            let result = match step {
                "create" => workspace.create(&path, &notebook, false, None).map(drop),
                "overwrite" => workspace.create(&path, &notebook, true, None).map(drop),
                _ => workspace
                    .update(&path, None, |notebook| {
                        notebook.insert(None, markdown("x")).map(drop)
                    })
                    .map(drop),
            };
            let error = result.expect_err(step);
            assert_eq!(error.code(), "invalid_path", "{step}: {error}");
            assert!(
                error.to_string().contains("\"sub\" is a symlink"),
                "{step}: {error}"
            );
            assert!(
                listing(&outside).is_empty(),
                "{step}: {:?}",
                listing(&outside)
            );
            let kept: &[&str] = if index == 0 { &[] } else { &["n.py"] };
            assert_eq!(
                listing(&workspace.root().join("moved")),
                kept.iter()
                    .map(std::ffi::OsString::from)
                    .collect::<Vec<_>>(),
                "{step}"
            );
        }
    }

    #[test]
    fn a_fifo_or_a_huge_file_planted_as_the_notebook_is_an_error_not_a_hang() {
        let (dir, workspace, path) = setup();
        crate::directory::tests::make_fifo(&path.absolute);
        let error = workspace.read(&path).expect_err("a FIFO");
        assert_eq!(error.code(), "invalid_path", "{error}");
        assert!(error.to_string().contains("it is a FIFO"), "{error}");
        let error = workspace
            .update(&path, None, |_| Ok(()))
            .expect_err("a FIFO");
        assert!(error.to_string().contains("it is a FIFO"), "{error}");
        let error = workspace
            .create(
                &path,
                &Notebook::new("python3", "Python 3", "python"),
                true,
                None,
            )
            .expect_err("a FIFO");
        assert!(error.to_string().contains("it is a FIFO"), "{error}");
        std::fs::remove_file(&path.absolute).expect("rm");
        // Sparse: the size is what counts, and nothing that large is read.
        let huge = std::fs::File::create(&path.absolute).expect("create");
        huge.set_len(crate::MAX_NOTEBOOK_BYTES + 1)
            .expect("set_len");
        let error = workspace.read(&path).expect_err("too large");
        assert_eq!(error.code(), "invalid_notebook", "{error}");
        assert!(error.to_string().contains("more than the"), "{error}");
        assert_eq!(
            workspace.size(&path).expect("size"),
            crate::MAX_NOTEBOOK_BYTES + 1
        );
        assert_eq!(
            listing(dir.path()),
            vec![std::ffi::OsString::from("n.ipynb")]
        );
    }
}
