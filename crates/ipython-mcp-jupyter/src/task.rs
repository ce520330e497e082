//! Joining the tasks something owns, within a bound: a kernel's socket readers and process
//! watchers here, a session's spool worker in the output crate ([`join`]), and every task a
//! session, the kernel manager or the MCP layer spawns ([`Tasks`]). A task still running at the
//! deadline is aborted rather than waited for, so a shutdown never hangs on one.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

/// How long an aborted task is given to go: it ends at its next await, so this is only ever
/// reached by a task stuck in blocking code.
const ABORTED_WAIT: Duration = Duration::from_secs(1);

/// Waits for `tasks` until `deadline`, then aborts the ones still running (logged at debug,
/// naming `owner`) and waits briefly for them to go. True when every task ended by itself.
/// Dropping the wait half-way aborts what is left, so no task outlives its join.
pub async fn join(owner: &'static str, tasks: Vec<JoinHandle<()>>, deadline: Instant) -> bool {
    let mut tasks = AbortOnDrop(tasks);
    let mut aborted = 0;
    for task in &mut tasks.0 {
        if tokio::time::timeout_at(deadline, &mut *task).await.is_err() {
            task.abort();
            let _ = tokio::time::timeout(ABORTED_WAIT, &mut *task).await;
            aborted += 1;
        }
    }
    if aborted > 0 {
        tracing::debug!(
            owner,
            aborted,
            "tasks still running at the shutdown bound were aborted"
        );
    }
    aborted == 0
}

/// The tasks something owns (a session's actor, warm spares starting and background waits; the
/// manager's idle reaper; the MCP layer's background work): every one is tracked, `join` waits
/// for them within its bound and aborts the ones still running then, and dropping the owner
/// aborts what is left, so no task outlives what owns it.
#[derive(Default)]
pub struct Tasks {
    tracker: TaskTracker,
    /// To abort what is left; finished tasks are pruned at each spawn.
    running: Mutex<Vec<AbortHandle>>,
}

impl Tasks {
    /// Spawns `task`, tracked.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
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
    pub async fn join(&self, owner: &str, deadline: Instant) -> bool {
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

    /// Whether every task has ended.
    pub fn is_empty(&self) -> bool {
        self.tracker.is_empty()
    }

    /// Tasks not yet ended.
    pub fn len(&self) -> usize {
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

/// Aborts its tasks when dropped (a no-op for the ones that ended).
struct AbortOnDrop(Vec<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_past_the_deadline_is_aborted_and_gone() {
        let finishing = tokio::spawn(async {});
        let hung = tokio::spawn(std::future::pending::<()>());
        let deadline = Instant::now() + Duration::from_millis(50);
        assert!(!join("test", vec![finishing, hung], deadline).await);
        let metrics = tokio::runtime::Handle::current().metrics();
        assert_eq!(metrics.num_alive_tasks(), 0, "the hung task was aborted");
        let later = Instant::now() + Duration::from_secs(60);
        assert!(join("test", vec![tokio::spawn(async {})], later).await);
    }

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
