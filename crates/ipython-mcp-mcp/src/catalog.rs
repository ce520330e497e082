//! Dynamic tools: live Python callables published as MCP tools.
//!
//! The registry of record lives in each kernel (the helper's catalog: schemas, fingerprints,
//! liveness against the current binding). The server keeps a snapshot per session so
//! `tools/list` can merge dynamic tools with the stable ones, and reconciles it on the session's
//! queue before answering (bounded: a busy kernel gets [`RECONCILE_WAIT`], then the last
//! snapshot is served and the reconciliation finishes in the background). At most one
//! reconciliation per session is pending, in the session's reserved slot: later lists join it,
//! so no number of lists takes a queue slot from the user. Every change of the
//! listed set bumps a server-wide `revision` and sends `notifications/tools/list_changed` to every
//! client. A kernel replacement (epoch change), `reset` and `kernel_stop` drop that session's
//! tools.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use ipython_mcp_kernel::{HelperCall, HelperOutput, Outcome, SessionHandle};
use ipython_mcp_output::{Code, ErrorInfo, RuntimeInfo};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::background::Background;
use crate::peers::Peers;

/// How long `tools/list` waits for a busy kernel to reconcile its tools, counted from the
/// start of the reconciliation it joins.
pub const RECONCILE_WAIT: Duration = Duration::from_secs(2);

/// One published tool, as the server last saw it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Registration {
    /// The MCP tool name.
    pub tool_name: String,
    /// The kernel's top-level callable behind it.
    pub name: String,
    pub description: String,
    /// The JSON Schema of its arguments, generated from the signature.
    pub input_schema: JsonObject,
    /// SHA-256 (hex) of `input_schema` as sorted-key compact JSON.
    pub fingerprint: String,
    /// The kernel session it lives in.
    pub kernel: String,
    /// The catalog revision after this registration.
    pub revision: u64,
}

#[derive(Debug, Clone)]
struct Entry {
    registration: Registration,
    epoch: u64,
    live: bool,
}

/// The server's view of every session's dynamic tools.
#[derive(Clone)]
pub struct Catalog {
    inner: Arc<Mutex<State>>,
    background: Background,
}

#[derive(Default)]
struct State {
    revision: u64,
    tools: BTreeMap<String, Entry>,
    /// Sessions whose epoch is watched (their tools go when their kernel is replaced).
    watched: std::collections::HashSet<String>,
    /// The clients to notify, for changes that happen outside a tool call (the idle reaper).
    peers: Option<Peers>,
    /// The reconciliation pending per session: when it started, and its answer once it has one.
    reconciling: HashMap<String, Pending>,
}

#[derive(Clone)]
struct Pending {
    started: Instant,
    answered: watch::Receiver<Option<bool>>,
}

/// What the helper's `tool_catalog` answers per tool.
#[derive(Debug, Deserialize)]
struct CatalogTool {
    tool_name: String,
    live: bool,
}

#[derive(Debug, Deserialize)]
struct CatalogReply {
    tools: Vec<CatalogTool>,
}

impl Catalog {
    /// An empty catalog whose watches and reconciliations run on `background`.
    pub(crate) fn new(background: Background) -> Catalog {
        Catalog {
            inner: Arc::default(),
            background,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// Dynamic tool names held by sessions other than `kernel`.
    pub fn names_outside(&self, kernel: &str) -> Vec<String> {
        self.lock()
            .tools
            .values()
            .filter(|entry| entry.registration.kernel != kernel)
            .map(|entry| entry.registration.tool_name.clone())
            .collect()
    }

    /// The session a tool lives in.
    pub fn kernel_of(&self, tool_name: &str) -> Option<String> {
        self.lock()
            .tools
            .get(tool_name)
            .map(|entry| entry.registration.kernel.clone())
    }

    pub fn kernels(&self) -> Vec<String> {
        let mut kernels: Vec<String> = self
            .lock()
            .tools
            .values()
            .map(|entry| entry.registration.kernel.clone())
            .collect();
        kernels.sort();
        kernels.dedup();
        kernels
    }

    /// The live tools, as MCP tools.
    pub fn listed(&self) -> Vec<Tool> {
        self.lock()
            .tools
            .values()
            .filter(|entry| entry.live)
            .map(|entry| to_tool(&entry.registration))
            .collect()
    }

    pub fn get_tool(&self, name: &str) -> Option<Tool> {
        self.lock()
            .tools
            .get(name)
            .filter(|entry| entry.live)
            .map(|entry| to_tool(&entry.registration))
    }

    /// Records a registration; returns it with the new revision.
    pub async fn insert(
        &self,
        mut registration: Registration,
        session: &SessionHandle,
        peers: &Peers,
    ) -> Registration {
        let epoch = session.status().epoch;
        let watch = {
            let mut state = self.lock();
            state.peers.get_or_insert_with(|| peers.clone());
            state.revision += 1;
            registration.revision = state.revision;
            state.tools.insert(
                registration.tool_name.clone(),
                Entry {
                    registration: registration.clone(),
                    epoch,
                    live: true,
                },
            );
            state.watched.insert(registration.kernel.clone())
        };
        if watch {
            self.watch_epoch(
                session.clone(),
                registration.kernel.clone(),
                epoch,
                peers.clone(),
            );
        }
        peers.notify_tool_list_changed().await;
        registration
    }

    /// Drops tools by name; returns the ones that were there.
    pub async fn remove(&self, names: &[String], peers: &Peers) -> Vec<String> {
        let removed: Vec<String> = {
            let mut state = self.lock();
            let removed: Vec<String> = names
                .iter()
                .filter(|name| state.tools.remove(name.as_str()).is_some())
                .cloned()
                .collect();
            if !removed.is_empty() {
                state.revision += 1;
            }
            removed
        };
        if !removed.is_empty() {
            peers.notify_tool_list_changed().await;
        }
        removed
    }

    /// Drops every tool of a session (reset, replacement, stop); notifies when any were listed.
    pub async fn drop_session(&self, kernel: &str, peers: &Peers) -> usize {
        let dropped = {
            let mut state = self.lock();
            let before = state.tools.len();
            state
                .tools
                .retain(|_, entry| entry.registration.kernel != kernel);
            let dropped = before - state.tools.len();
            if dropped > 0 {
                state.revision += 1;
            }
            dropped
        };
        if dropped > 0 {
            tracing::info!(kernel, dropped, "dynamic tools dropped");
            peers.notify_tool_list_changed().await;
        }
        dropped
    }

    /// Drops a session's tools when the session itself goes (stopped, or reaped when idle),
    /// notifying the clients the catalog knows.
    pub async fn forget_session(&self, kernel: &str) {
        let peers = self.lock().peers.clone();
        if let Some(peers) = peers {
            self.drop_session(kernel, &peers).await;
        }
    }

    /// Drops a session's tools as soon as its kernel is replaced.
    fn watch_epoch(&self, session: SessionHandle, kernel: String, epoch: u64, peers: Peers) {
        let catalog = self.clone();
        let mut epochs = session.subscribe_epoch();
        drop(session);
        self.background.spawn(async move {
            let changed = epochs.wait_for(|current| *current != epoch).await.is_ok();
            catalog.lock().watched.remove(&kernel);
            if changed {
                catalog.drop_session(&kernel, &peers).await;
            }
        });
    }

    /// Brings a session's snapshot up to date: joins the reconciliation pending for it, or
    /// starts one, and waits for its answer until `wait` after it started (`None`: until it
    /// answers). The work runs detached, so a caller that stops waiting leaves it to finish and
    /// the next caller joins it. Returns false when the kernel did not answer in time.
    pub async fn reconcile(
        &self,
        kernel: &str,
        session: &SessionHandle,
        peers: &Peers,
        wait: Option<Duration>,
    ) -> bool {
        let Pending {
            started,
            mut answered,
        } = {
            let mut state = self.lock();
            match state.reconciling.get(kernel) {
                // A closed channel is one whose task died: start afresh.
                Some(pending) if pending.answered.has_changed().is_ok() => pending.clone(),
                _ => {
                    let (sender, receiver) = watch::channel(None);
                    let pending = Pending {
                        started: Instant::now(),
                        answered: receiver,
                    };
                    state.reconciling.insert(kernel.to_owned(), pending.clone());
                    let (catalog, kernel, session, peers) = (
                        self.clone(),
                        kernel.to_owned(),
                        session.clone(),
                        peers.clone(),
                    );
                    self.background.spawn(async move {
                        let answered = catalog.reconcile_now(&kernel, &session, &peers).await;
                        catalog.lock().reconciling.remove(&kernel);
                        sender.send_replace(Some(answered));
                    });
                    pending
                }
            }
        };
        let answer = answered.wait_for(Option::is_some);
        let answer = match wait.and_then(|wait| started.checked_add(wait)) {
            Some(deadline) => match tokio::time::timeout_at(deadline, answer).await {
                Ok(answer) => answer.map(|answer| *answer),
                Err(_) => return false,
            },
            None => answer.await.map(|answer| *answer),
        };
        answer.ok().flatten().unwrap_or(false)
    }

    /// Asks a session's helper which of its tools are live, on its queue (in the reserved
    /// slot, never a user's); updates the snapshot and notifies when the listed set changed.
    /// Returns false when it did not answer.
    async fn reconcile_now(&self, kernel: &str, session: &SessionHandle, peers: &Peers) -> bool {
        let epoch = session.status().epoch;
        let stale_epoch = self
            .lock()
            .tools
            .values()
            .any(|entry| entry.registration.kernel == kernel && entry.epoch != epoch);
        if stale_epoch {
            self.drop_session(kernel, peers).await;
            return true;
        }
        let output = session
            .helper_reserved(HelperCall {
                method: "tool_catalog".to_owned(),
                params: serde_json::json!({}),
                timeout: None,
                request_id: "tools/list".to_owned(),
                cancel: Default::default(),
            })
            .await;
        if output.runtime.epoch != epoch {
            self.drop_session(kernel, peers).await;
            return true;
        }
        let Some(reply) = output
            .outcome
            .answer()
            .and_then(|result| serde_json::from_value::<CatalogReply>(result.clone()).ok())
        else {
            if output
                .outcome
                .error()
                .is_some_and(|error| error.code == Code::UnsupportedKernel)
            {
                self.drop_session(kernel, peers).await;
            }
            return false;
        };
        let changed = {
            let mut state = self.lock();
            let live: BTreeMap<&str, bool> = reply
                .tools
                .iter()
                .map(|tool| (tool.tool_name.as_str(), tool.live))
                .collect();
            let mut changed = false;
            state.tools.retain(|name, entry| {
                if entry.registration.kernel != kernel {
                    return true;
                }
                match live.get(name.as_str()) {
                    Some(now) => {
                        changed |= entry.live != *now;
                        entry.live = *now;
                        true
                    }
                    None => {
                        changed |= entry.live;
                        false
                    }
                }
            });
            if changed {
                state.revision += 1;
            }
            changed
        };
        if changed {
            peers.notify_tool_list_changed().await;
        }
        true
    }
}

/// The structured result of a dynamic tool call (its advertised output schema).
#[derive(Debug, Serialize, JsonSchema)]
pub struct DynamicCallResult {
    pub ok: bool,
    pub tool_name: String,
    /// What the function returned, as JSON (bounded like call_function's results).
    pub result: Option<Value>,
    /// True when the result was cut to fit the bounds.
    pub truncated: bool,
    /// `stale_registration`, `invalid_arguments`, `result_not_json`, `execution_error`, …
    pub error: Option<ErrorInfo>,
    /// How the call ran, as in execute (epoch, interruption, namespace, queue_wait_ms, run_ms);
    /// absent when it never reached a kernel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeInfo>,
}

impl DynamicCallResult {
    pub fn from_output(tool_name: &str, output: HelperOutput) -> Self {
        let ok = output.outcome.answer().is_some();
        let error = output.outcome.error().cloned();
        let result = match output.outcome {
            Outcome::Answered(result) => result,
            Outcome::Raised { partial, .. } => partial.unwrap_or(Value::Null),
            Outcome::Failed(_) => Value::Null,
        };
        DynamicCallResult {
            ok,
            tool_name: tool_name.to_owned(),
            truncated: result
                .get("truncated")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            result: ok.then(|| result.get("result").cloned().unwrap_or(Value::Null)),
            error,
            runtime: Some(output.runtime),
        }
    }
}

fn to_tool(registration: &Registration) -> Tool {
    let output_schema = rmcp::handler::server::tool::schema_for_output::<DynamicCallResult>();
    Tool::new(
        registration.tool_name.clone(),
        registration.description.clone(),
        Arc::new(registration.input_schema.clone()),
    )
    .with_raw_output_schema(output_schema)
    .with_annotations(
        ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(true),
    )
}
