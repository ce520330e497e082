//! Notebook files reached by descriptor, never by path. A kernel may write the workspace, so
//! at any moment it may swap a directory of a notebook path for a symlink (an atomic
//! `renameat2(RENAME_EXCHANGE)`): whatever was checked before, a write that goes by path can
//! then land wherever the symlink points. Here the workspace root is opened once, each
//! directory of a path is opened beneath its parent's descriptor without following a symlink,
//! and the notebook is read, its temp file created, fsynced and renamed, all inside the
//! descriptor of its own directory: no rename of the kernel's can change where the bytes land.
//! A symlink anywhere in the path is refused, and only a regular file of bounded size is read
//! (a FIFO planted as a notebook is an error, not a hang; a huge file is refused, not read).

use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::error::Error;

/// The largest notebook file read, in bytes: far above any notebook a person or an agent
/// edits (a saved cell keeps at most 64 MiB of outputs), and a bound on what a file planted
/// in the workspace can make the server allocate.
pub const MAX_NOTEBOOK_BYTES: u64 = 512 << 20;

/// Prefix and suffix of the temp files written beside a notebook (hidden; a killed write may
/// leave one behind).
const TEMP_PREFIX: &str = ".ipython-mcp-";
const TEMP_SUFFIX: &str = ".tmp";

/// Opens the workspace root (once, for the workspace's life: every path is resolved beneath
/// this descriptor, so even a root renamed later keeps its notebooks where they were).
pub(crate) fn open_root(root: &Path) -> std::io::Result<OwnedFd> {
    rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(std::io::Error::from)
}

/// Opens `name`, one plain component (no `/`, never `.` or `..`), inside `directory` without
/// following a symlink (the untrusted crate's one primitive for it: `openat2` confined beneath
/// the descriptor on Linux, `O_NOFOLLOW` elsewhere).
fn open_in(
    directory: BorrowedFd<'_>,
    name: &str,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    ipython_mcp_untrusted::open_at(directory, Path::new(name), flags, mode)
}

/// Whether `name` in `directory` is a symlink (asked after an open failed, to say why).
fn is_symlink(directory: BorrowedFd<'_>, name: &str) -> bool {
    rustix::fs::statat(directory, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Symlink)
}

/// Whether `name` in `directory` is a directory (asked after an open failed, to say why).
fn is_directory(directory: BorrowedFd<'_>, name: &str) -> bool {
    rustix::fs::statat(directory, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Directory)
}

/// Opens the directories `directories` one by one beneath `root`. `relative` is the notebook
/// path the agent gave, for the error, which names the component that failed.
pub(crate) fn open_directory(
    root: BorrowedFd<'_>,
    directories: &[&str],
    relative: &str,
) -> Result<OwnedFd, Error> {
    let invalid = |reason: String| Error::InvalidPath {
        path: ipython_mcp_text::shorten(relative, 200),
        reason,
    };
    let mut current: Option<OwnedFd> = None;
    for (index, name) in directories.iter().enumerate() {
        let parent = current.as_ref().map_or(root, AsFd::as_fd);
        let shown = || ipython_mcp_text::shorten(&directories[..=index].join("/"), 200);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK;
        match open_in(parent, name, flags, Mode::empty()) {
            Ok(opened) => current = Some(opened),
            Err(Errno::LOOP) => {
                return Err(invalid(format!(
                    "{:?} is a symlink (the server follows no symlink in the workspace)",
                    shown()
                )))
            }
            Err(Errno::NOTDIR) if is_symlink(parent, name) => {
                return Err(invalid(format!(
                    "{:?} is a symlink (the server follows no symlink in the workspace)",
                    shown()
                )))
            }
            Err(Errno::NOTDIR) if is_directory(parent, name) => {
                // Where O_NOFOLLOW refused a symlink as "not a directory", and the kernel
                // swapped a directory back before the question.
                return Err(invalid(format!(
                    "{:?} is a symlink or not a directory (it changed while it was opened)",
                    shown()
                )));
            }
            Err(Errno::NOTDIR) => {
                return Err(invalid(format!("{:?} is not a directory", shown())));
            }
            Err(Errno::NOENT) => {
                return Err(invalid(
                    "its directory does not exist in the workspace (create the directory first)"
                        .to_owned(),
                ))
            }
            Err(Errno::XDEV) => {
                return Err(invalid("it leads outside the workspace root".to_owned()));
            }
            Err(error) => {
                return Err(Error::Io {
                    path: ipython_mcp_text::shorten(relative, 200),
                    message: std::io::Error::from(error).to_string(),
                })
            }
        }
    }
    match current {
        Some(directory) => Ok(directory),
        // The file is in the root itself: a descriptor of its own, so the caller owns one.
        None => root.try_clone_to_owned().map_err(|error| Error::Io {
            path: ipython_mcp_text::shorten(relative, 200),
            message: error.to_string(),
        }),
    }
}

/// What kind of file it is, in words, for a refusal.
fn kind(file_type: FileType) -> &'static str {
    match file_type {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "not a regular file",
    }
}

fn not_regular(relative: &str, file_type: FileType) -> Error {
    Error::InvalidPath {
        path: ipython_mcp_text::shorten(relative, 200),
        reason: format!(
            "it is {}, not a regular file (the server reads and replaces only regular files)",
            kind(file_type)
        ),
    }
}

fn symlink(relative: &str) -> Error {
    Error::InvalidPath {
        path: ipython_mcp_text::shorten(relative, 200),
        reason: "it is a symlink (the server follows no symlink in the workspace)".to_owned(),
    }
}

fn io(relative: &str, error: impl Into<std::io::Error>) -> Error {
    Error::Io {
        path: ipython_mcp_text::shorten(relative, 200),
        message: error.into().to_string(),
    }
}

/// Checks the file `name` in `directory` without opening it: absent, or a regular file
/// (`Ok(false)`/`Ok(true)`); a symlink or anything else is refused.
pub(crate) fn check_file(
    directory: BorrowedFd<'_>,
    name: &str,
    relative: &str,
) -> Result<bool, Error> {
    match rustix::fs::statat(directory, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => Ok(true),
            FileType::Symlink => Err(symlink(relative)),
            other => Err(not_regular(relative, other)),
        },
        Err(Errno::NOENT) => Ok(false),
        Err(error) => Err(io(relative, error)),
    }
}

/// A notebook file as read: its bytes and its permission bits.
#[derive(Debug)]
pub(crate) struct Contents {
    pub bytes: Vec<u8>,
    pub mode: Mode,
}

/// The permission bits a notebook keeps across a replacement (set-id and sticky bits are not
/// carried over).
fn permissions(st_mode: rustix::fs::RawMode) -> Mode {
    Mode::from_raw_mode(st_mode) & (Mode::RWXU | Mode::RWXG | Mode::RWXO)
}

/// The permissions of a new notebook: 0644.
pub(crate) fn new_file_mode() -> Mode {
    Mode::RUSR | Mode::WUSR | Mode::RGRP | Mode::ROTH
}

/// Opens the notebook `name` in `directory` for reading: without following a symlink, without
/// blocking (a FIFO opens at once), and only if `fstat` says it is a regular file. `None`:
/// there is no such file.
fn open_file(
    directory: BorrowedFd<'_>,
    name: &str,
    relative: &str,
) -> Result<Option<(std::fs::File, rustix::fs::Stat)>, Error> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
    let file = match open_in(directory, name, flags, Mode::empty()) {
        Ok(file) => file,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => return Err(symlink(relative)),
        Err(Errno::NOTDIR) if is_symlink(directory, name) => return Err(symlink(relative)),
        Err(error) => return Err(io(relative, error)),
    };
    let stat = rustix::fs::fstat(&file).map_err(|error| io(relative, error))?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(Some((std::fs::File::from(file), stat))),
        other => Err(not_regular(relative, other)),
    }
}

fn too_large(relative: &str, bytes: u64) -> Error {
    Error::InvalidNotebook {
        path: ipython_mcp_text::shorten(relative, 200),
        problem: format!(
            "the file is {bytes} bytes, more than the {MAX_NOTEBOOK_BYTES} bytes a notebook may be"
        ),
    }
}

/// Reads the notebook `name` in `directory` (see [`open_file`]), at most
/// [`MAX_NOTEBOOK_BYTES`]. `None`: there is no such file.
pub(crate) fn read_file(
    directory: BorrowedFd<'_>,
    name: &str,
    relative: &str,
) -> Result<Option<Contents>, Error> {
    let Some((file, stat)) = open_file(directory, name, relative)? else {
        return Ok(None);
    };
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size > MAX_NOTEBOOK_BYTES {
        return Err(too_large(relative, size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    // The size may have grown since the fstat: read one byte past the bound to tell.
    file.take(MAX_NOTEBOOK_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| io(relative, error))?;
    if bytes.len() as u64 > MAX_NOTEBOOK_BYTES {
        return Err(too_large(relative, bytes.len() as u64));
    }
    Ok(Some(Contents {
        bytes,
        mode: permissions(stat.st_mode),
    }))
}

/// The size of the notebook `name` in `directory`, from `fstat` of the file opened as
/// [`read_file`] opens it. `None`: there is no such file.
pub(crate) fn file_size(
    directory: BorrowedFd<'_>,
    name: &str,
    relative: &str,
) -> Result<Option<u64>, Error> {
    Ok(open_file(directory, name, relative)?
        .map(|(_, stat)| u64::try_from(stat.st_size).unwrap_or(0)))
}

/// A fully written, fsynced temp file in a notebook's directory, removed (inside that same
/// descriptor) unless it was renamed over the notebook.
pub(crate) struct TempFile<'a> {
    directory: BorrowedFd<'a>,
    name: String,
    renamed: bool,
}

impl<'a> TempFile<'a> {
    /// Creates the temp file in `directory` (`O_CREAT | O_EXCL | O_NOFOLLOW`, so nothing that
    /// exists, a planted symlink least of all, is ever opened for writing), writes `bytes`,
    /// gives it `mode` and fsyncs it.
    pub(crate) fn write(
        directory: BorrowedFd<'a>,
        bytes: &[u8],
        mode: Mode,
    ) -> std::io::Result<TempFile<'a>> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
        let mut attempts = 0;
        let (file, name) = loop {
            let random = uuid::Uuid::new_v4().simple().to_string();
            let name = format!("{TEMP_PREFIX}{}{TEMP_SUFFIX}", &random[..12]);
            match open_in(directory, &name, flags, Mode::RUSR | Mode::WUSR) {
                Ok(file) => break (file, name),
                Err(Errno::EXIST) if attempts < 16 => attempts += 1,
                Err(error) => return Err(error.into()),
            }
        };
        let temp = TempFile {
            directory,
            name,
            renamed: false,
        };
        let mut file = std::fs::File::from(file);
        file.write_all(bytes)?;
        rustix::fs::fchmod(&file, mode)?;
        file.sync_all()?;
        Ok(temp)
    }

    /// Renames the temp file over `name`, in the same directory descriptor.
    pub(crate) fn replace(mut self, name: &str) -> std::io::Result<()> {
        rustix::fs::renameat(self.directory, &self.name, self.directory, name)?;
        self.renamed = true;
        Ok(())
    }

    /// Renames the temp file to `name`, which must not exist: `ErrorKind::AlreadyExists` if
    /// it does, the file untouched.
    pub(crate) fn create(mut self, name: &str) -> std::io::Result<()> {
        match rustix::fs::renameat_with(
            self.directory,
            &self.name,
            self.directory,
            name,
            RenameFlags::NOREPLACE,
        ) {
            Ok(()) => {
                self.renamed = true;
                return Ok(());
            }
            // A filesystem (or kernel) without the flag: a hard link fails on an existing
            // name just as well; the temp name is then removed by `drop`.
            Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {}
            Err(error) => return Err(error.into()),
        }
        rustix::fs::linkat(
            self.directory,
            &self.name,
            self.directory,
            name,
            AtFlags::empty(),
        )?;
        Ok(())
    }
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = rustix::fs::unlinkat(self.directory, &self.name, AtFlags::empty());
        }
    }
}

/// Makes a rename in `directory` durable. Best effort: some filesystems refuse to fsync a
/// directory.
pub(crate) fn sync(directory: BorrowedFd<'_>) {
    let _ = rustix::fs::fsync(directory);
}

/// Bounds of [`find_notebooks`].
#[derive(Debug, Clone, Copy)]
pub struct Scan {
    /// Directories deep, the root being the first.
    pub max_depth: usize,
    /// Entries looked at in all.
    pub max_entries: usize,
    /// Notebooks found.
    pub max_found: usize,
}

/// Root-relative paths of the `.ipynb` files beneath `root`, sorted: each directory opened
/// beneath its parent's descriptor as every path is (no symlink followed, so a directory
/// swapped for one is skipped, never listed), hidden entries skipped, within `scan`'s bounds.
/// Unreadable directories are skipped: the list is a convenience.
pub(crate) fn find_notebooks(root: BorrowedFd<'_>, scan: Scan) -> Vec<String> {
    let mut found = Vec::new();
    let mut scanned = 0usize;
    let Ok(root) = root.try_clone_to_owned() else {
        return found;
    };
    let mut pending = vec![(root, String::new(), 1usize)];
    while let Some((directory, prefix, depth)) = pending.pop() {
        let Ok(entries) = rustix::fs::Dir::read_from(&directory) else {
            continue;
        };
        for entry in entries.flatten() {
            scanned += 1;
            if scanned > scan.max_entries || found.len() >= scan.max_found {
                found.sort();
                return found;
            }
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let file_type = match entry.file_type() {
                FileType::Unknown => {
                    rustix::fs::statat(&directory, name, AtFlags::SYMLINK_NOFOLLOW)
                        .map_or(FileType::Unknown, |stat| {
                            FileType::from_raw_mode(stat.st_mode)
                        })
                }
                known => known,
            };
            let path = format!("{prefix}{name}");
            if file_type == FileType::Directory && depth < scan.max_depth {
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK;
                if let Ok(child) = open_in(directory.as_fd(), name, flags, Mode::empty()) {
                    pending.push((child, format!("{path}/"), depth + 1));
                }
            } else if file_type == FileType::RegularFile && name.ends_with(".ipynb") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A workspace `root` and a directory `outside` it, siblings in one temp directory.
    fn setup() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let top = tempfile::tempdir().expect("tempdir");
        let root = top.path().join("root");
        let outside = top.path().join("outside");
        std::fs::create_dir_all(root.join("sub")).expect("mkdir");
        std::fs::create_dir(&outside).expect("mkdir");
        (top, root, outside)
    }

    fn names(directory: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(directory)
            .expect("ls")
            .map(|entry| entry.expect("entry").file_name().to_string_lossy().into())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_after_it_was_opened_keeps_the_bytes_inside() {
        let (_top, root, outside) = setup();
        let root_fd = open_root(&root).expect("root");
        let directory = open_directory(root_fd.as_fd(), &["sub"], "sub/n.ipynb").expect("sub");
        // The kernel's move: the directory aside, a symlink to the outside in its place.
        std::fs::rename(root.join("sub"), root.join("moved")).expect("rename");
        std::os::unix::fs::symlink(&outside, root.join("sub")).expect("symlink");
        let temp = TempFile::write(directory.as_fd(), b"new", new_file_mode()).expect("temp");
        temp.create("n.ipynb").expect("create");
        let temp = TempFile::write(directory.as_fd(), b"newer", new_file_mode()).expect("temp");
        temp.replace("n.ipynb").expect("replace");
        sync(directory.as_fd());
        assert_eq!(
            names(&outside),
            Vec::<String>::new(),
            "nothing lands outside"
        );
        assert_eq!(names(&root.join("moved")), vec!["n.ipynb".to_owned()]);
        assert_eq!(
            std::fs::read(root.join("moved/n.ipynb")).expect("read"),
            b"newer"
        );
        // Opening the path anew refuses the symlink.
        let error = open_directory(root_fd.as_fd(), &["sub"], "sub/n.ipynb").expect_err("link");
        assert_eq!(error.code(), "invalid_path");
        assert!(
            error.to_string().contains("\"sub\" is a symlink"),
            "{error}"
        );
    }

    #[test]
    fn listing_skips_symlinks_hidden_entries_and_what_is_too_deep() {
        let (_top, root, outside) = setup();
        std::fs::write(outside.join("elsewhere.ipynb"), "{}").expect("write");
        std::os::unix::fs::symlink(&outside, root.join("link")).expect("symlink");
        std::os::unix::fs::symlink(outside.join("elsewhere.ipynb"), root.join("l.ipynb"))
            .expect("symlink");
        std::fs::create_dir_all(root.join("sub/deeper/deepest")).expect("mkdir");
        std::fs::create_dir(root.join(".hidden")).expect("mkdir");
        for name in [
            "a.ipynb",
            "b.py",
            "sub/c.ipynb",
            "sub/deeper/d.ipynb",
            "sub/deeper/deepest/e.ipynb",
            ".hidden/f.ipynb",
        ] {
            std::fs::write(root.join(name), "{}").expect("write");
        }
        let root_fd = open_root(&root).expect("root");
        let scan = Scan {
            max_depth: 3,
            max_entries: 100,
            max_found: 100,
        };
        assert_eq!(
            find_notebooks(root_fd.as_fd(), scan),
            ["a.ipynb", "sub/c.ipynb", "sub/deeper/d.ipynb"]
        );
        let few = Scan {
            max_found: 1,
            ..scan
        };
        assert_eq!(find_notebooks(root_fd.as_fd(), few).len(), 1);
    }

    #[test]
    fn a_temp_file_never_opens_what_exists_and_is_removed_unless_renamed() {
        let (_top, root, _outside) = setup();
        let root_fd = open_root(&root).expect("root");
        let temp = TempFile::write(root_fd.as_fd(), b"x", new_file_mode()).expect("temp");
        let name = temp.name.clone();
        assert!(name.starts_with(TEMP_PREFIX) && name.ends_with(TEMP_SUFFIX));
        assert_eq!(names(&root), vec![name, "sub".to_owned()]);
        drop(temp);
        assert_eq!(names(&root), vec!["sub".to_owned()]);
        // An existing name is not clobbered by `create`.
        std::fs::write(root.join("n.ipynb"), "old").expect("write");
        let temp = TempFile::write(root_fd.as_fd(), b"x", new_file_mode()).expect("temp");
        let error = temp.create("n.ipynb").expect_err("exists");
        assert_eq!(error.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(root.join("n.ipynb")).expect("read"), b"old");
        assert_eq!(names(&root), vec!["n.ipynb".to_owned(), "sub".to_owned()]);
    }

    #[test]
    fn reads_refuse_symlinks_fifos_and_directories_without_blocking() {
        let (_top, root, outside) = setup();
        std::fs::write(outside.join("secret"), "secret").expect("write");
        std::os::unix::fs::symlink(outside.join("secret"), root.join("link.ipynb"))
            .expect("symlink");
        std::os::unix::fs::symlink("/dev/zero", root.join("zero.ipynb")).expect("symlink");
        make_fifo(&root.join("fifo.ipynb"));
        let root_fd = open_root(&root).expect("root");
        for (name, reason) in [
            ("link.ipynb", "it is a symlink"),
            ("zero.ipynb", "it is a symlink"),
            ("fifo.ipynb", "it is a FIFO, not a regular file"),
            ("sub", "it is a directory, not a regular file"),
        ] {
            let error = read_file(root_fd.as_fd(), name, name).expect_err(name);
            assert_eq!(error.code(), "invalid_path", "{name}: {error}");
            assert!(error.to_string().contains(reason), "{name}: {error}");
            let error = check_file(root_fd.as_fd(), name, name).expect_err(name);
            assert!(error.to_string().contains(reason), "{name}: {error}");
        }
        assert!(read_file(root_fd.as_fd(), "absent.ipynb", "absent.ipynb")
            .expect("absent")
            .is_none());
    }

    /// A FIFO at `path` (as a kernel can make one in its workspace).
    pub(crate) fn make_fifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("run mkfifo");
        assert!(status.success(), "mkfifo {}", path.display());
    }
}
