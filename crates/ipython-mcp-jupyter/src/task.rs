//! Joining the tasks something owns, within a bound: a kernel's socket readers and process
//! watchers here, a session's spool worker in the output crate. A task still running at the
//! deadline is aborted rather than waited for, so a shutdown never hangs on one.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

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
}
