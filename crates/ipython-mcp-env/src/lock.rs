//! An exclusive `flock(2)` on a lock file, taken by polling so that waiting stays cancellable
//! and never blocks a runtime thread.
//!
//! `flock` locks belong to an open file description, so two opens in one process exclude each
//! other just as two processes do, and the kernel drops the lock if the holder dies. The file is
//! opened close-on-exec (Rust's default), so installers we spawn do not inherit the lock.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;

const FIRST_RETRY: Duration = Duration::from_millis(25);
const LONGEST_RETRY: Duration = Duration::from_millis(500);

/// Holds the lock until dropped (closing the file releases it).
#[derive(Debug)]
pub(crate) struct Held {
    _file: File,
}

/// Takes the lock on `path` (created if missing), waiting at most `wait`. The open and every
/// attempt run on the blocking pool: the cache (and so the lock) may be on a network home,
/// where even a non-blocking `flock` can take a while.
pub(crate) async fn acquire(path: &Path, wait: Duration) -> Result<Held, Error> {
    let lock_error = |err: io::Error| Error::Lock {
        path: path.to_owned(),
        detail: err.to_string(),
    };
    let owned = path.to_owned();
    let mut file = off_thread(move || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(owned)
    })
    .await
    .map_err(lock_error)?;
    let deadline = Instant::now() + wait;
    let mut retry = FIRST_RETRY;
    loop {
        let (taken, returned) = off_thread(move || {
            let taken = try_lock(&file);
            Ok((taken, file))
        })
        .await
        .map_err(lock_error)?;
        file = returned;
        if taken.map_err(lock_error)? {
            return Ok(Held { _file: file });
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::LockTimeout {
                path: path.to_owned(),
                seconds: wait.as_secs(),
            });
        }
        tokio::time::sleep(retry.min(deadline - now)).await;
        retry = (retry * 2).min(LONGEST_RETRY);
    }
}

async fn off_thread<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(io::Error::other)
        .and_then(|done| done)
}

/// `Ok(true)` if we now hold the lock, `Ok(false)` if someone else does.
fn try_lock(file: &File) -> io::Result<bool> {
    loop {
        // SAFETY: flock(2) only reads the descriptor, which `file` keeps open for this call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_held_lock_excludes_a_second_holder_until_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("default-py3.11.lock");
        let first = acquire(&path, Duration::ZERO).await.expect("free lock");
        let second = acquire(&path, Duration::from_millis(100)).await;
        assert!(
            matches!(second, Err(Error::LockTimeout { .. })),
            "{second:?}"
        );
        drop(first);
        acquire(&path, Duration::ZERO).await.expect("released lock");
    }

    #[tokio::test]
    async fn a_waiter_gets_the_lock_when_it_is_released() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("default-py3.11.lock");
        let first = acquire(&path, Duration::ZERO).await.expect("free lock");
        let waiter = tokio::spawn({
            let path = path.clone();
            async move { acquire(&path, Duration::from_secs(10)).await }
        });
        tokio::task::yield_now().await;
        drop(first);
        waiter
            .await
            .expect("waiter task")
            .expect("lock after release");
    }

    #[tokio::test]
    async fn an_unopenable_lock_file_is_a_lock_error() {
        let path = Path::new("/nonexistent/ipython-mcp/default-py3.11.lock");
        let result = acquire(path, Duration::ZERO).await;
        assert!(matches!(result, Err(Error::Lock { .. })), "{result:?}");
    }
}
