//! The server's private directory: where local kernels' run directories (connection file with
//! its signing key, IPC sockets) and output spools live, out of the shared temp directory.
//!
//! Kernels write the temp directory, so anything in it is theirs to read: one kernel could
//! read another's signing key and run code in it, or read its output. The sandbox denies this
//! directory to every kernel and gives each kernel back only its own entries, which it can do
//! only for a directory outside everything kernels may write (a denied path inside a writable
//! one would take the temp directory's new entries away from them; see ARCHITECTURE.md).

use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};

/// One server's private directory (0700), removed when dropped. It holds a lock file the
/// server keeps locked while it lives, so a later server can tell a dead one's leftovers
/// (after a SIGKILL) from a live one's and remove them.
#[derive(Debug)]
pub struct PrivateDir {
    dir: tempfile::TempDir,
    /// Holds the lock; closed (unlocking) after the directory is removed.
    _lock: std::fs::File,
}

const LOCK: &str = "lock";

impl PrivateDir {
    /// Makes the directory in the first of `bases` where that works, removing what dead
    /// servers left there.
    pub fn create(bases: &[Base]) -> std::io::Result<PrivateDir> {
        let mut last = std::io::Error::other("no place for the server's private directory");
        for base in bases {
            match Self::create_in(base) {
                Ok(dir) => return Ok(dir),
                Err(error) => {
                    tracing::debug!(base = %base.path.display(), %error, "no private directory here");
                    last = error;
                }
            }
        }
        Err(last)
    }

    fn create_in(base: &Base) -> std::io::Result<PrivateDir> {
        if base.ours {
            make_ours(&base.path)?;
        }
        sweep(&base.path);
        let dir = tempfile::Builder::new()
            .prefix("ipython-mcp-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(&base.path)?;
        let lock = std::fs::File::create(dir.path().join(LOCK))?;
        if !try_lock(&lock) {
            return Err(std::io::Error::other("cannot lock the private directory"));
        }
        Ok(PrivateDir { dir, _lock: lock })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A directory the private directory may be made in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    pub path: PathBuf,
    /// Ours alone: made 0700 if missing, refused unless we own it and nobody else may enter
    /// (a shared directory such as `/var/tmp` lets anyone make the name first). `false` for
    /// the temp directory itself, shared by design.
    pub ours: bool,
}

/// Longest base: the IPC socket paths below it
/// (`<base>/ipython-mcp-XXXXXX/ipython-mcp-kXXXXXX/k-1`) must stay within the 104 bytes macOS
/// allows a socket path (Linux: 108).
const MAX_BASE_LEN: usize = 56;

/// Where the private directory may go, best first: the user's runtime directory (a private
/// tmpfs on systemd systems), a directory of ours in `/var/tmp`, then the user's state
/// directory. Any inside `temp` (kernels write there) or too long for socket paths is left
/// out; `temp` itself comes last, for a system with none (the sandbox then says kernels can
/// read each other's run directories).
pub fn candidate_bases(
    xdg_runtime_dir: Option<&Path>,
    xdg_state_home: Option<&Path>,
    home: Option<&Path>,
    temp: &Path,
) -> Vec<Base> {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let state = xdg_state_home
        .filter(|dir| dir.is_absolute())
        .map(Path::to_owned)
        .or_else(|| {
            home.filter(|home| home.is_absolute())
                .map(|home| home.join(".local/state"))
        });
    let mut bases: Vec<Base> = [
        xdg_runtime_dir
            .filter(|dir| dir.is_absolute() && dir.is_dir())
            .map(|dir| dir.join("ipython-mcp")),
        Some(PathBuf::from(format!("/var/tmp/ipython-mcp-{uid}"))),
        state.map(|dir| dir.join("ipython-mcp")),
    ]
    .into_iter()
    .flatten()
    .filter(|base| base.as_os_str().len() <= MAX_BASE_LEN && !inside(base, temp))
    .map(|path| Base { path, ours: true })
    .collect();
    bases.push(Base {
        path: temp.to_owned(),
        ours: false,
    });
    bases
}

/// Makes `dir` (0700) if missing; refuses it unless it is a directory we own that nobody
/// else may enter.
fn make_ours(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a private directory of ours",
            dir.display()
        )));
    }
    Ok(())
}

/// Whether `path` is `dir` or inside it, symbolic links resolved as far as they exist.
pub fn inside(path: &Path, dir: &Path) -> bool {
    let real = |path: &Path| {
        path.ancestors()
            .find_map(|existing| {
                let real = existing.canonicalize().ok()?;
                let rest = path.strip_prefix(existing).ok()?;
                Some(real.join(rest))
            })
            .unwrap_or_else(|| path.to_owned())
    };
    real(path).starts_with(real(dir))
}

/// Removes the private directories under `base` whose servers are gone: their lock can be
/// taken. One without a lock file is being made right now, or was left by a crash in that
/// instant; it is left alone.
fn sweep(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("ipython-mcp-") {
            continue;
        }
        let dir = entry.path();
        let Ok(lock) = std::fs::File::open(dir.join(LOCK)) else {
            continue;
        };
        if try_lock(&lock) {
            tracing::debug!(dir = %dir.display(), "removing a dead server's private directory");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// Takes an exclusive lock on `file` without waiting (held until it is closed; the
/// descriptor is close-on-exec, so kernels never hold it).
fn try_lock(file: &std::fs::File) -> bool {
    // SAFETY: flock on a descriptor the File owns.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(bases: &[Base]) -> Vec<PathBuf> {
        bases.iter().map(|base| base.path.clone()).collect()
    }

    #[test]
    fn the_private_directory_is_never_in_the_temp_directory_unless_nothing_else_exists() {
        let temp = tempfile::tempdir().expect("tempdir");
        let runtime = tempfile::tempdir().expect("tempdir");
        let uid = unsafe { libc::geteuid() };
        let var_tmp = PathBuf::from(format!("/var/tmp/ipython-mcp-{uid}"));
        let home = Path::new("/home/u");
        let bases = candidate_bases(
            Some(runtime.path()),
            None,
            Some(home),
            Path::new("/nowhere"),
        );
        assert_eq!(
            paths(&bases),
            vec![
                runtime.path().join("ipython-mcp"),
                var_tmp.clone(),
                home.join(".local/state/ipython-mcp"),
                PathBuf::from("/nowhere"),
            ]
        );
        assert_eq!(
            bases.iter().map(|base| base.ours).collect::<Vec<_>>(),
            [true, true, true, false]
        );
        // A runtime directory and a HOME inside the temp directory are passed over.
        let inner = temp.path().join("run");
        std::fs::create_dir(&inner).expect("mkdir");
        let bases = candidate_bases(
            Some(&inner),
            None,
            Some(&temp.path().join("home")),
            temp.path(),
        );
        assert_eq!(paths(&bases), vec![var_tmp.clone(), temp.path().to_owned()]);
        // The state directory wins over HOME; relative and too long ones are ignored.
        let long = format!("/{}", "d".repeat(MAX_BASE_LEN));
        let bases = candidate_bases(
            Some(Path::new("relative")),
            Some(Path::new("/state")),
            Some(home),
            Path::new("/var"),
        );
        assert_eq!(
            paths(&bases),
            vec![PathBuf::from("/state/ipython-mcp"), PathBuf::from("/var")]
        );
        let bases = candidate_bases(None, Some(Path::new(&long)), None, Path::new("/nowhere"));
        assert_eq!(paths(&bases), vec![var_tmp, PathBuf::from("/nowhere")]);
    }

    #[test]
    fn a_dead_servers_directory_is_swept_and_a_live_ones_kept() {
        let parent = tempfile::tempdir().expect("tempdir");
        let base = Base {
            path: parent.path().join("base"),
            ours: true,
        };
        let live = PrivateDir::create(std::slice::from_ref(&base)).expect("create");
        for dir in [&base.path, &live.path().to_owned()] {
            let meta = std::fs::metadata(dir).expect("stat");
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
                0o700
            );
        }
        // A dead server's: its lock file exists, and nobody holds it.
        let dead = base.path.join("ipython-mcp-dead");
        std::fs::create_dir(&dead).expect("mkdir");
        std::fs::write(dead.join(LOCK), "").expect("lock file");
        std::fs::write(dead.join("kernel.json"), "{}").expect("file");
        // One being made: no lock file yet.
        let making = base.path.join("ipython-mcp-making");
        std::fs::create_dir(&making).expect("mkdir");
        let other = PrivateDir::create(std::slice::from_ref(&base)).expect("create");
        assert!(!dead.exists(), "the dead server's directory is removed");
        assert!(live.path().is_dir(), "the live server's directory is kept");
        assert!(making.is_dir());
        assert_ne!(live.path(), other.path());
        let path = live.path().to_owned();
        drop(live);
        assert!(!path.exists(), "removed when dropped");
    }

    #[test]
    fn a_base_others_may_enter_or_that_cannot_be_made_is_passed_over() {
        use std::os::unix::fs::PermissionsExt as _;
        let parent = tempfile::tempdir().expect("tempdir");
        let file = parent.path().join("a-file");
        std::fs::write(&file, "").expect("write");
        let open = parent.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let last = parent.path().join("last");
        let dir = PrivateDir::create(&[
            Base {
                path: file.join("below"),
                ours: true,
            },
            Base {
                path: open.clone(),
                ours: true,
            },
            Base {
                path: last.clone(),
                ours: true,
            },
        ])
        .expect("the last base");
        assert!(dir.path().starts_with(&last));
        assert_eq!(std::fs::read_dir(&open).expect("read").count(), 0);
    }
}
