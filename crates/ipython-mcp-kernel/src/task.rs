//! The tasks a session (its actor, warm spares starting, background executions' waits) or the
//! manager (the idle reaper) spawns: every one is tracked, shutdown joins them within its bound
//! and aborts the ones still running then, and dropping the owner aborts what is left, so no
//! task outlives what owns it.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

/// How long aborted tasks are given to go: each ends at its next await, so this is only ever
/// reached by a task stuck in blocking code.
const ABORTED_WAIT: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(crate) struct Tasks {
    tracker: TaskTracker,
    /// To abort what is left; finished tasks are pruned at each spawn.
    running: Mutex<Vec<AbortHandle>>,
}

impl Tasks {
    /// Spawns `task`, tracked.
    pub(crate) fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = self.tracker.spawn(task);
        let mut running = self.lock();
        running.retain(|task| !task.is_finished());
        running.push(handle.abort_handle());
        handle
    }

    /// Waits until `deadline` for every task, those spawned meanwhile too, then aborts the ones
    /// still running (logged at debug, naming `owner`) and waits briefly for them to go. True
    /// when every task ended by itself. Concurrent callers all wait.
    pub(crate) async fn join(&self, owner: &str, deadline: Instant) -> bool {
        self.tracker.close();
        if tokio::time::timeout_at(deadline, self.tracker.wait())
            .await
            .is_ok()
        {
            return true;
        }
        tracing::debug!(
            owner,
            tasks = self.tracker.len(),
            "tasks still running at the shutdown bound were aborted"
        );
        self.abort();
        let _ = tokio::time::timeout(ABORTED_WAIT, self.tracker.wait()).await;
        false
    }

    /// Tasks not yet ended.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tracker.len()
    }

    fn abort(&self) {
        for task in self.lock().drain(..) {
            task.abort();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<AbortHandle>> {
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_join_waits_for_tasks_and_aborts_them_at_the_deadline() {
        let tasks = Tasks::default();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn(async move {
            let _ = released.await;
        });
        release.send(()).expect("the task waits");
        let deadline = Instant::now() + Duration::from_secs(60);
        assert!(tasks.join("test", deadline).await, "it ended by itself");
        assert_eq!(tasks.len(), 0);

        // Spawned after a join (the tracker is closed): still tracked, and joined by the next.
        tasks.spawn(std::future::pending::<()>());
        let deadline = Instant::now() + Duration::from_secs(5);
        assert!(
            !tasks.join("test", deadline).await,
            "aborted at the deadline"
        );
        assert_eq!(tasks.len(), 0);
        let metrics = tokio::runtime::Handle::current().metrics();
        assert_eq!(metrics.num_alive_tasks(), 0);
    }
}
