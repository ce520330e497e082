//! The server's own background work (a background notebook run's save, dynamic-tool
//! reconciliation and epoch watches, progress forwarding): every task is spawned through
//! [`Background`], so shutdown stops the ones that only wait and joins them all.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ipython_mcp_jupyter::task::Tasks;
use tokio_util::sync::CancellationToken;

/// Tracks the tasks the MCP layer spawns. Clones share the tasks.
#[derive(Clone, Default)]
pub(crate) struct Background {
    tasks: Arc<Tasks>,
    stopping: CancellationToken,
}

impl Background {
    /// Spawns work that may be abandoned at shutdown (it only waits or forwards).
    pub(crate) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        let stopping = self.stopping.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = stopping.cancelled() => {}
                _ = work => {}
            }
        });
    }

    /// Spawns work that shutdown waits for (within its bound) instead of stopping, such as
    /// saving a finished run into its notebook.
    pub(crate) fn spawn_to_finish(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(work);
    }

    /// Stops what may be abandoned, then waits at most `bound` for the rest and aborts what
    /// is still running then; false when something was.
    pub(crate) async fn join(&self, bound: Duration) -> bool {
        self.stopping.cancel();
        let deadline = tokio::time::Instant::now() + bound;
        self.tasks.join("the MCP layer", deadline).await
    }

    /// Tasks still tracked.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tasks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shutdown_stops_waiters_and_joins_work_that_must_finish() {
        let background = Background::default();
        background.spawn(std::future::pending());
        let (done, finished) = tokio::sync::oneshot::channel();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        background.spawn_to_finish(async move {
            let _ = released.await;
            let _ = done.send(());
        });
        assert_eq!(background.len(), 2);
        let joining = tokio::spawn({
            let background = background.clone();
            async move { background.join(Duration::from_secs(60)).await }
        });
        release.send(()).expect("the save waits");
        assert!(joining.await.expect("join"), "everything was joined");
        finished.await.expect("the work that must finish finished");
        assert_eq!(background.len(), 0);
    }
}
