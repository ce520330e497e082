//! MCP Tasks (the `io.modelcontextprotocol/tasks` extension): a background `execute`,
//! `notebook_execute` or `notebook_execute_cell` for a client that declared the extension
//! answers with a task instead of a `pending` result.
//!
//! A task *is* its execution: the task id is the `execution_id`, its state is the execution's
//! record (what `get_output` reads), and `tasks/get` renders the same structured result
//! `execute` would have returned. The only thing kept here is what the record does not hold:
//! when the task was created and the cancellation token `tasks/cancel` fires, which interrupts
//! the execution exactly as an MCP cancellation of a waiting `execute` does. A notebook run
//! also keeps its final result here, saved or not, since the record holds only the execution.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use rmcp::model::{CallToolResult, DetailedTask, JsonObject, Task, TaskPayload, TaskStatus};
use tokio_util::sync::CancellationToken;

/// How often a client should poll `tasks/get`, in milliseconds.
const POLL_INTERVAL_MS: u64 = 1_000;

/// The tasks remembered, at most `limit` (`IPYTHON_MCP_MAX_TASKS`); the oldest is forgotten
/// first. Each kernel keeps only its recent executions anyway, and a task whose execution is
/// forgotten reports `failed`.
pub(crate) struct Tasks {
    inner: Mutex<Inner>,
    limit: usize,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Insertion order, for forgetting the oldest.
    order: VecDeque<String>,
}

#[derive(Clone)]
struct Entry {
    created_at: String,
    cancel: CancellationToken,
    /// A notebook run's final result (saved or not), which the execution's record does not
    /// hold; `None` for an `execute`.
    outcome: Option<Outcome>,
}

/// Where a background notebook run leaves its final result.
#[derive(Clone, Default)]
pub(crate) struct Outcome(Arc<Mutex<Option<CallToolResult>>>);

impl Outcome {
    pub fn set(&self, result: CallToolResult) {
        *self.0.lock().expect("outcome lock") = Some(result);
    }

    pub fn get(&self) -> Option<CallToolResult> {
        self.0.lock().expect("outcome lock").clone()
    }
}

/// What `tasks/get` needs of a remembered task.
pub(crate) struct Remembered {
    pub created_at: String,
    pub cancel: CancellationToken,
    pub outcome: Option<Outcome>,
}

impl Tasks {
    pub fn new(limit: usize) -> Tasks {
        Tasks {
            inner: Mutex::default(),
            limit: limit.max(1),
        }
    }

    /// Remembers the task of execution `id` (cancelled through `cancel`) and returns its seed
    /// state for the `CreateTaskResult`.
    pub fn insert(&self, id: &str, cancel: CancellationToken) -> Task {
        self.remember(id, cancel, None)
    }

    /// Remembers a background notebook run of execution `id`; its final result goes in the
    /// returned slot. The task's seed state comes with it, for a tasks client's answer.
    pub fn insert_notebook(&self, id: &str, cancel: CancellationToken) -> (Outcome, Task) {
        let outcome = Outcome::default();
        let task = self.remember(id, cancel, Some(outcome.clone()));
        (outcome, task)
    }

    fn remember(&self, id: &str, cancel: CancellationToken, outcome: Option<Outcome>) -> Task {
        let now = rmcp::task_manager::current_timestamp();
        let mut inner = self.inner.lock().expect("tasks lock");
        while inner.order.len() >= self.limit {
            if let Some(oldest) = inner.order.pop_front() {
                inner.entries.remove(&oldest);
            }
        }
        inner.order.push_back(id.to_owned());
        inner.entries.insert(
            id.to_owned(),
            Entry {
                created_at: now.clone(),
                cancel,
                outcome,
            },
        );
        task(id, TaskStatus::Working, now)
    }

    pub fn get(&self, id: &str) -> Option<Remembered> {
        let inner = self.inner.lock().expect("tasks lock");
        inner.entries.get(id).map(|entry| Remembered {
            created_at: entry.created_at.clone(),
            cancel: entry.cancel.clone(),
            outcome: entry.outcome.clone(),
        })
    }
}

/// A task's state as `tasks/get` reports it.
pub(crate) fn detailed(id: &str, created_at: String, payload: TaskPayload) -> DetailedTask {
    let mut task = task(id, payload.status(), created_at);
    task.last_updated_at = rmcp::task_manager::current_timestamp();
    DetailedTask::new(task, payload)
}

fn task(id: &str, status: TaskStatus, created_at: String) -> Task {
    let mut task = Task::new(id, status, created_at.clone(), created_at);
    // Kept as long as its kernel keeps the execution; there is no deadline to advertise.
    task.ttl_ms = None;
    task.poll_interval_ms = Some(POLL_INTERVAL_MS);
    task
}

/// A value as the JSON object a task payload carries.
pub(crate) fn object(value: impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::Tasks;
    use tokio_util::sync::CancellationToken;

    #[test]
    fn the_oldest_task_is_forgotten_first() {
        const MAX_TASKS: usize = 1024;
        let tasks = Tasks::new(MAX_TASKS);
        for index in 0..=MAX_TASKS {
            let task = tasks.insert(&format!("t{index}"), CancellationToken::new());
            assert_eq!(task.task_id, format!("t{index}"));
        }
        assert!(tasks.get("t0").is_none(), "the first is gone");
        assert!(tasks.get("t1").is_some());
        assert!(tasks.get(&format!("t{MAX_TASKS}")).is_some());
    }
}
