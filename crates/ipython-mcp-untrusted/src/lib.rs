//! Opening and reading a file a sandboxed kernel could have written: its output spool, its
//! namespace checkpoint, its environment's kernelspecs, the workspace.
//!
//! The server reads such files with its own permissions, outside the kernel's sandbox, so
//! whatever the kernel leaves at a path is a request the server would otherwise carry out for
//! it (a confused deputy): a symbolic link in place of a spool file would have the server read
//! and return any file the user can read, a link to `/dev/zero` would have it read forever and
//! run out of memory, a FIFO would block the reading thread for good. So every such read goes
//! through [`open`] or [`read`], which
//!
//! - resolve the name beneath a directory the server trusts (it made it, or found it) and follow
//!   no symbolic link on the way, the last component included: on Linux with `openat2` and
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`; where it is missing (macOS,
//!   Linux before 5.6, a container whose filter refuses it) one component at a time with
//!   `O_NOFOLLOW`;
//! - open with `O_NONBLOCK` (a FIFO or a device answers at once instead of blocking), `O_NOCTTY`
//!   and `O_CLOEXEC`, then check with `fstat` that what was opened is a regular file, and only
//!   then clear `O_NONBLOCK`;
//! - read at most a stated bound ([`read`]); a file past it is refused, not cut.
//!
//! Anything else is an [`Error`] naming the path. Nothing here blocks on what the kernel
//! planted, but the file is still on a disk that may be slow: callers run these off the async
//! threads.

use std::fs::File;
use std::io::Read as _;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

/// Why a file a kernel could have written was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A symbolic link where the file or a directory on the way to it was expected: never
    /// followed.
    #[error("{} is, or passes through, a symbolic link; not followed", .path.display())]
    Link { path: PathBuf },
    /// Something other than a regular file: a FIFO, a socket, a device, a directory.
    #[error("{} is not a regular file (a {kind})", .path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    /// A regular file larger than the caller's bound.
    #[error("{} is larger than {limit} bytes", .path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    /// A name that would leave the directory it is read from (absolute, or with `..`).
    #[error("{} is not beneath {}", .path.display(), .dir.display())]
    Outside { path: PathBuf, dir: PathBuf },
    /// The file could not be opened or read (missing, no permission, a disk error).
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// True when there is simply no file at the path (a directory on the way missing too).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// The path the error names.
    pub fn path(&self) -> &Path {
        match self {
            Error::Link { path }
            | Error::NotRegular { path, .. }
            | Error::TooLarge { path, .. }
            | Error::Outside { path, .. }
            | Error::Io { path, .. } => path,
        }
    }
}

/// Opens the regular file `name` beneath `dir` for reading, following no symbolic link from
/// `dir` on (`dir` itself is the caller's and is taken as it is). The file is blocking again
/// once checked.
pub fn open(dir: &Path, name: &Path) -> Result<File, Error> {
    open_with(dir, name, OFlags::RDONLY)
}

/// Opens the regular file `name` beneath `dir` to append to it, as [`open`] finds it (never
/// created: a file the server made and a kernel could have replaced since).
pub fn append(dir: &Path, name: &Path) -> Result<File, Error> {
    open_with(dir, name, OFlags::WRONLY | OFlags::APPEND)
}

/// Opens the regular file `name` beneath `dir` to write it anew, as [`open`] finds it (never
/// created; truncated only once it is known to be a regular file).
pub fn overwrite(dir: &Path, name: &Path) -> Result<File, Error> {
    let file = open_with(dir, name, OFlags::WRONLY)?;
    file.set_len(0).map_err(|source| Error::Io {
        path: dir.join(name),
        source,
    })?;
    Ok(file)
}

fn open_with(dir: &Path, name: &Path, access: OFlags) -> Result<File, Error> {
    let path = dir.join(name);
    if name.as_os_str().is_empty()
        || name
            .components()
            .any(|component| !matches!(component, Component::Normal(_) | Component::CurDir))
    {
        return Err(Error::Outside {
            path,
            dir: dir.to_owned(),
        });
    }
    let fd = open_beneath(dir, name, access).map_err(|errno| refusal(&path, dir, errno))?;
    let stat = rustix::fs::fstat(&fd).map_err(|errno| io_error(&path, errno))?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind != FileType::RegularFile {
        return Err(Error::NotRegular {
            path,
            kind: kind_name(kind),
        });
    }
    rustix::fs::fcntl_setfl(&fd, access & OFlags::APPEND)
        .map_err(|errno| io_error(&path, errno))?;
    Ok(File::from(fd))
}

/// The whole regular file `name` beneath `dir` (as [`open`] finds it), at most `limit` bytes: a
/// larger one is refused, also one that grows past the bound while it is read.
pub fn read(dir: &Path, name: &Path, limit: u64) -> Result<Vec<u8>, Error> {
    let file = open(dir, name)?;
    let path = || dir.join(name);
    let size = file
        .metadata()
        .map_err(|source| Error::Io {
            path: path(),
            source,
        })?
        .len();
    if size > limit {
        return Err(Error::TooLarge {
            path: path(),
            limit,
        });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| Error::Io {
            path: path(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(Error::TooLarge {
            path: path(),
            limit,
        });
    }
    Ok(bytes)
}

/// Splits `path` into its directory and its last component, for [`open`] and [`read`] when a
/// caller holds the whole path of a file directly in a directory it trusts.
pub fn split(path: &Path) -> (&Path, &Path) {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => (dir, Path::new(name)),
        _ => (Path::new("."), path),
    }
}

/// The flags every open of the file itself has besides its `access`: no link, no blocking on
/// a FIFO or a device, no controlling terminal gained, not inherited by children.
fn file_flags(access: OFlags) -> OFlags {
    access | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC
}

fn directory_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
}

fn open_beneath(dir: &Path, name: &Path, access: OFlags) -> Result<OwnedFd, Errno> {
    let base = rustix::fs::open(dir, directory_flags(), Mode::empty())?;
    open_at(base.as_fd(), name, file_flags(access), Mode::empty())
}

/// Opens `name` (relative, no `..`) beneath the directory `base` with `flags` (and `mode`, when
/// it creates), following no symbolic link on the way, the last component included: on Linux
/// with `openat2` (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`), elsewhere,
/// or where `openat2` is refused, one component at a time with `O_NOFOLLOW`. A link anywhere
/// is `ELOOP`. The one primitive every server-side open of a kernel-writable place uses.
pub fn open_at(
    base: BorrowedFd<'_>,
    name: &Path,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let flags = flags | OFlags::CLOEXEC;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::fs::ResolveFlags;
        let resolve =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        // Without O_NOFOLLOW: with it, a link opened with O_DIRECTORY is ENOTDIR, not the link
        // it is; RESOLVE_NO_SYMLINKS refuses the last component (ELOOP) all the same.
        match rustix::fs::openat2(base, name, flags - OFlags::NOFOLLOW, mode, resolve) {
            // No openat2 (before Linux 5.6, or a filter that refuses it), or a concurrent
            // rename it would rather not judge: the walk below is as strict.
            Err(Errno::NOSYS | Errno::PERM | Errno::AGAIN) => {}
            opened => return opened,
        }
    }
    component_by_component(base, name, flags, mode)
}

/// Walks `name` from `base` one directory at a time, each opened with `O_NOFOLLOW` (so a link
/// anywhere is refused with `ELOOP`), then opens the last component with `flags` and
/// `O_NOFOLLOW`. Only plain components are taken, so the walk stays beneath `base`.
fn component_by_component(
    base: BorrowedFd<'_>,
    name: &Path,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in name.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            _ => return Err(Errno::XDEV),
        }
    }
    let Some(last) = parts.pop() else {
        return Err(Errno::INVAL);
    };
    let mut current: Option<OwnedFd> = None;
    for part in parts {
        let parent = current.as_ref().map_or(base, AsFd::as_fd);
        let directory = directory_flags() | OFlags::NOFOLLOW | OFlags::NONBLOCK;
        current = Some(
            match rustix::fs::openat(parent, part, directory, Mode::empty()) {
                // Linux answers a link opened as a directory with `O_NOFOLLOW` "not a directory":
                // said as the link it is.
                Err(Errno::NOTDIR) => {
                    let stat =
                        rustix::fs::statat(parent, part, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
                    return Err(match FileType::from_raw_mode(stat.st_mode) {
                        FileType::Symlink => Errno::LOOP,
                        _ => Errno::NOTDIR,
                    });
                }
                opened => opened?,
            },
        );
    }
    let parent = current.as_ref().map_or(base, AsFd::as_fd);
    rustix::fs::openat(parent, last, flags | OFlags::NOFOLLOW, mode)
}

/// An open refused by the kernel, in this crate's terms.
fn refusal(path: &Path, dir: &Path, errno: Errno) -> Error {
    match errno {
        // `O_NOFOLLOW` on a link, or `RESOLVE_NO_SYMLINKS` on one anywhere on the way.
        Errno::LOOP => Error::Link {
            path: path.to_owned(),
        },
        // `RESOLVE_BENEATH`: the name would have left `dir`.
        Errno::XDEV => Error::Outside {
            path: path.to_owned(),
            dir: dir.to_owned(),
        },
        // A component on the way that is not a directory (a file, or a link the walk did not
        // follow on a system that says so this way).
        Errno::NOTDIR => Error::NotRegular {
            path: path.to_owned(),
            kind: "path through something that is not a directory",
        },
        // A socket (or a FIFO opened for writing: never here) cannot be opened at all.
        Errno::NXIO | Errno::OPNOTSUPP => Error::NotRegular {
            path: path.to_owned(),
            kind: "socket",
        },
        errno => io_error(path, errno),
    }
}

fn io_error(path: &Path, errno: Errno) -> Error {
    Error::Io {
        path: path.to_owned(),
        source: std::io::Error::from(errno),
    }
}

/// What a file that is not a regular one is, in words.
pub fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Directory => "directory",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Symlink => "symbolic link",
        _ => "file of an unknown kind",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn check(dir: &Path, name: &str, limit: u64) -> String {
        match read(dir, Path::new(name), limit) {
            Ok(bytes) => format!("ok {}", String::from_utf8_lossy(&bytes)),
            Err(error) => {
                let shown = error.to_string();
                let shown = shown.replace(&dir.display().to_string(), "<dir>");
                format!("refused: {shown}")
            }
        }
    }

    #[test]
    fn regular_files_are_read_and_everything_else_is_refused_naming_the_path() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path();
        let outside = tempfile::tempdir().expect("tempdir");
        let secret = outside.path().join("id_rsa");
        std::fs::write(&secret, "SECRET").expect("secret");
        std::fs::write(dir.join("plain"), "hello").expect("write");
        std::fs::create_dir(dir.join("sub")).expect("mkdir");
        std::fs::write(dir.join("sub/inner"), "inside").expect("write");
        symlink(&secret, dir.join("link")).expect("symlink");
        symlink("/dev/zero", dir.join("zero")).expect("symlink");
        symlink(outside.path(), dir.join("linked-dir")).expect("symlink");
        symlink("plain", dir.join("relative-link")).expect("symlink");
        let made = std::process::Command::new("mkfifo")
            .arg(dir.join("fifo"))
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        let cases = [
            ("plain", 100, "ok hello"),
            ("./sub/inner", 100, "ok inside"),
            ("plain", 4, "refused: <dir>/plain is larger than 4 bytes"),
            (
                "link",
                100,
                "refused: <dir>/link is, or passes through, a symbolic link; not followed",
            ),
            (
                "relative-link",
                100,
                "refused: <dir>/relative-link is, or passes through, a symbolic link; not followed",
            ),
            (
                "zero",
                100,
                "refused: <dir>/zero is, or passes through, a symbolic link; not followed",
            ),
            (
                "linked-dir/id_rsa",
                100,
                "refused: <dir>/linked-dir/id_rsa is, or passes through, a symbolic link; not followed",
            ),
            (
                "fifo",
                100,
                "refused: <dir>/fifo is not a regular file (a FIFO)",
            ),
            ("sub", 100, "refused: <dir>/sub is not a regular file (a directory)"),
            ("../x", 100, "refused: <dir>/../x is not beneath <dir>"),
            ("/etc/passwd", 100, "refused: /etc/passwd is not beneath <dir>"),
            (
                "missing",
                100,
                "refused: cannot read <dir>/missing: No such file or directory (os error 2)",
            ),
        ];
        for (name, limit, expected) in cases {
            assert_eq!(check(dir, name, limit), expected, "{name}");
        }
        assert!(read(dir, Path::new("missing"), 1)
            .expect_err("missing")
            .is_not_found());
    }

    #[test]
    fn the_walk_one_component_at_a_time_refuses_links_too() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path();
        std::fs::create_dir(dir.join("sub")).expect("mkdir");
        std::fs::write(dir.join("sub/inner"), "inside").expect("write");
        symlink(dir.join("sub"), dir.join("linked")).expect("symlink");
        symlink(dir.join("sub/inner"), dir.join("sub/link")).expect("symlink");
        let walk = |name: &str| {
            let base = rustix::fs::open(dir, directory_flags(), Mode::empty()).expect("dir");
            component_by_component(base.as_fd(), Path::new(name), OFlags::RDONLY, Mode::empty())
        };
        assert!(walk("sub/inner").is_ok());
        assert_eq!(walk("linked/inner").err(), Some(Errno::LOOP));
        assert_eq!(walk("sub/link").err(), Some(Errno::LOOP));
    }

    #[test]
    fn overwriting_truncates_a_regular_file_and_never_writes_through_a_link() {
        use std::io::Write as _;
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path();
        std::fs::write(dir.join("script"), "old and long").expect("write");
        std::fs::write(dir.join("target"), "keep").expect("write");
        std::os::unix::fs::symlink(dir.join("target"), dir.join("link")).expect("symlink");
        overwrite(dir, Path::new("script"))
            .expect("a regular file")
            .write_all(b"new")
            .expect("write");
        assert_eq!(std::fs::read(dir.join("script")).expect("read"), b"new");
        assert!(matches!(
            overwrite(dir, Path::new("link")),
            Err(Error::Link { .. })
        ));
        assert_eq!(std::fs::read(dir.join("target")).expect("read"), b"keep");
    }

    #[test]
    fn an_opened_file_reads_normally_once_checked() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::write(root.path().join("f"), "abc").expect("write");
        let mut text = String::new();
        open(root.path(), Path::new("f"))
            .expect("open")
            .read_to_string(&mut text)
            .expect("read");
        assert_eq!(text, "abc");
        let flags = rustix::fs::fcntl_getfl(open(root.path(), Path::new("f")).expect("open"))
            .expect("getfl");
        assert!(!flags.contains(OFlags::NONBLOCK));
        let mut appended = append(root.path(), Path::new("f")).expect("append");
        std::io::Write::write_all(&mut appended, b"def").expect("write");
        assert_eq!(
            std::fs::read(root.path().join("f")).expect("read"),
            b"abcdef"
        );
        symlink(root.path().join("f"), root.path().join("g")).expect("symlink");
        assert!(matches!(
            append(root.path(), Path::new("g")),
            Err(Error::Link { .. })
        ));
        assert_eq!(
            split(Path::new("/a/b/c")),
            (Path::new("/a/b"), Path::new("c"))
        );
    }
}
