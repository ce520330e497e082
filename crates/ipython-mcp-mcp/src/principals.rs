//! Principals: one server, many people. Over HTTP with a principals file, every principal gets
//! a server of their own (an [`IpythonMcp`] over its own [`ServerState`]: kernels, dynamic
//! tools, notebook workspace, tasks, clients to notify), made at their first request.
//!
//! Ownership is checked on every call, from the credentials of that call's HTTP request (the
//! transport's authentication puts a [`Caller`] into the request's extensions), never from a
//! protocol session: handshake-era clients and stateless 2026-07-28 clients get the same
//! isolation, and a session id of another principal's names nothing here, since each
//! principal's state only holds its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ipython_mcp_config::PrincipalName;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, GetTaskResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerConfig, SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tracing::Instrument as _;

use crate::handler::IpythonMcp;
use crate::server::Blueprint;
use crate::state::ServerState;

/// Who sent an HTTP request, as the transport's authentication established it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub principal: PrincipalName,
}

/// Makes a principal's state at their first request, with the settings it was made from
/// (their own kernel manager, workspace and quotas: the binary knows how).
pub type StateFactory = dyn Fn(&PrincipalName) -> Result<(ServerState, Arc<ipython_mcp_config::Config>), String>
    + Send
    + Sync
    + 'static;

/// Every principal's server, made on first use. Cloning shares them.
#[derive(Clone)]
pub struct Principals {
    inner: Arc<Inner>,
}

struct Inner {
    /// The built-in tools and configuration every principal's server shares.
    blueprint: Blueprint,
    make: Box<StateFactory>,
    servers: Mutex<HashMap<PrincipalName, Served>>,
    /// Principals let go while idle with kernels, and for how long they had been idle: their
    /// next kernel's first result says their earlier namespace is gone.
    let_go: Mutex<HashMap<PrincipalName, std::time::Duration>>,
}

/// Principals remembered as let go with kernels; past it the memory starts afresh (those
/// forgotten are told nothing when they come back).
const MAX_LET_GO: usize = 4096;

/// A principal's server and how busy it is.
struct Served {
    server: IpythonMcp,
    /// Requests of theirs being handled now.
    in_flight: usize,
    /// When their last request ended (or their first began).
    last_active: std::time::Instant,
}

/// A principal's request being handled: while it lives the principal is not idle.
struct Busy {
    inner: Arc<Inner>,
    principal: PrincipalName,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut servers = lock(&self.inner);
        if let Some(served) = servers.get_mut(&self.principal) {
            served.in_flight = served.in_flight.saturating_sub(1);
            served.last_active = std::time::Instant::now();
        }
    }
}

fn lock(inner: &Inner) -> std::sync::MutexGuard<'_, HashMap<PrincipalName, Served>> {
    // Inserts, removes and counter updates are single map operations: a panic cannot leave
    // it half-done.
    inner
        .servers
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Principals {
    pub fn new(blueprint: Blueprint, make: Box<StateFactory>) -> Principals {
        Principals {
            inner: Arc::new(Inner {
                blueprint,
                make,
                servers: Mutex::default(),
                let_go: Mutex::default(),
            }),
        }
    }

    /// The principal's server, made now if this is their first request, and the mark that
    /// they are busy until the request ends. The factory may refuse (a principal removed from
    /// the file since the request was let in): then no state is made.
    fn server(&self, principal: &PrincipalName) -> Result<(IpythonMcp, Busy), ErrorData> {
        // Made only once the principal is counted busy (its drop takes the lock).
        let busy = || Busy {
            inner: Arc::clone(&self.inner),
            principal: principal.clone(),
        };
        let mut servers = self.lock();
        if let Some(served) = servers.get_mut(principal) {
            served.in_flight += 1;
            return Ok((served.server.clone(), busy()));
        }
        let server = self.make(principal).map_err(|problem| {
            tracing::error!(%principal, %problem, "cannot make the principal's sessions");
            ErrorData::internal_error(format!("cannot start your sessions: {problem}"), None)
        })?;
        servers.insert(
            principal.clone(),
            Served {
                server: server.clone(),
                in_flight: 1,
                last_active: std::time::Instant::now(),
            },
        );
        tracing::info!(%principal, "first request of a principal: sessions made");
        Ok((server, busy()))
    }

    /// A principal's server, new (the caller holds the servers' lock). One let go while idle
    /// with kernels hears at their next kernel's first result that their namespace is new.
    fn make(&self, principal: &PrincipalName) -> Result<IpythonMcp, String> {
        let (state, config) = (self.inner.make)(principal)?;
        let let_go = self
            .inner
            .let_go
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(principal);
        if let Some(idle) = let_go {
            state.kernels().note_lost_state(format!(
                "your kernels were stopped after {} s idle, and this one is new: earlier variables, imports and functions are gone",
                idle.as_secs()
            ));
        }
        state.spawn_reaper();
        Ok(self.inner.blueprint.server_with(state, config))
    }

    /// The server of the request's caller. A request that reached a handler without a caller
    /// passed no authentication, which the transport never lets happen.
    fn of(
        &self,
        extensions: &rmcp::model::Extensions,
    ) -> Result<(IpythonMcp, Caller, Busy), ErrorData> {
        let caller = extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
            .ok_or_else(|| {
                ErrorData::internal_error("request without an authenticated principal", None)
            })?;
        let (server, busy) = self.server(&caller.principal)?;
        Ok((server, caller, busy))
    }

    /// Whether the principal has a server now, else whether one may be made for them: fewer
    /// than `max` of the principals `counted` names have one. Checked and made under one lock,
    /// so concurrent newcomers cannot overshoot `max`. `Err`: the server could not be made.
    pub fn admit(
        &self,
        principal: &PrincipalName,
        max: usize,
        counted: impl Fn(&PrincipalName) -> bool,
    ) -> Result<bool, String> {
        let mut servers = self.lock();
        if servers.contains_key(principal) {
            return Ok(true);
        }
        if servers.keys().filter(|name| counted(name)).count() >= max {
            return Ok(false);
        }
        let server = self.make(principal)?;
        servers.insert(
            principal.clone(),
            Served {
                server,
                in_flight: 0,
                last_active: std::time::Instant::now(),
            },
        );
        tracing::info!(%principal, "first request of a principal: sessions made");
        Ok(true)
    }

    /// Forgets the principals `eligible` names that have been idle for `timeout`: no request
    /// of theirs for that long, none in flight, nothing running or queued in their kernels.
    /// Their sessions shut down and their kernels stop; a later request starts afresh. Returns
    /// how many were forgotten.
    pub async fn forget_idle(
        &self,
        timeout: std::time::Duration,
        eligible: impl Fn(&PrincipalName) -> bool,
    ) -> usize {
        let idle: Vec<(PrincipalName, IpythonMcp)> = {
            let mut servers = self.lock();
            let names: Vec<PrincipalName> = servers
                .iter()
                .filter(|(name, served)| {
                    eligible(name)
                        && served.in_flight == 0
                        && served.last_active.elapsed() >= timeout
                        && !served.server.state().kernels().all().iter().any(|listing| {
                            let status = listing.handle.status();
                            status.operation_active || status.queue_depth > 0
                        })
                })
                .map(|(name, _)| name.clone())
                .collect();
            names
                .into_iter()
                .filter_map(|name| servers.remove(&name).map(|served| (name, served.server)))
                .collect()
        };
        let forgotten = idle.len();
        for (principal, server) in idle {
            let kernels = server.state().kernels().all().len();
            tracing::info!(%principal, kernels, idle_seconds = timeout.as_secs(), "principal idle: their sessions closed, their kernels given back");
            if kernels > 0 {
                let mut let_go = self
                    .inner
                    .let_go
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if let_go.len() >= MAX_LET_GO {
                    let_go.clear();
                }
                let_go.insert(principal, timeout);
            }
            server.state().shutdown().await;
        }
        forgotten
    }

    /// Forgets a principal (removed from the file): their sessions shut down, their kernels
    /// stop. A later request of the same name starts afresh.
    pub async fn remove(&self, principal: &PrincipalName) {
        let removed = self.lock().remove(principal);
        if let Some(served) = removed {
            tracing::info!(%principal, "principal removed: closing their sessions");
            served.server.state().shutdown().await;
        }
    }

    /// Shuts every principal's sessions down, together.
    pub async fn shutdown(&self) {
        let servers: Vec<IpythonMcp> = self
            .lock()
            .drain()
            .map(|(_, served)| served.server)
            .collect();
        let mut closing = tokio::task::JoinSet::new();
        for server in servers {
            closing.spawn(async move { server.state().shutdown().await });
        }
        while closing.join_next().await.is_some() {}
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PrincipalName, Served>> {
        lock(&self.inner)
    }
}

/// Every log line of a call names its principal (metadata only).
fn span(caller: &Caller) -> tracing::Span {
    tracing::info_span!("principal", name = %caller.principal)
}

impl ServerHandler for Principals {
    fn get_info(&self) -> ServerConfig {
        IpythonMcp::info()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let (server, caller, _busy) = self.of(&context.extensions)?;
        server
            .list_tools(request, context)
            .instrument(span(&caller))
            .await
    }

    /// Built-in tools only: without a request there is no caller, and a dynamic tool belongs
    /// to one principal.
    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.blueprint.built_in_tool(name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (server, caller, _busy) = self.of(&context.extensions)?;
        server
            .call_tool(request, context)
            .instrument(span(&caller))
            .await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let (server, caller, _busy) = self.of(&context.extensions)?;
        server
            .get_task(request, context)
            .instrument(span(&caller))
            .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (server, caller, _busy) = self.of(&context.extensions)?;
        server
            .cancel_task(request, context)
            .instrument(span(&caller))
            .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let (server, caller, _busy) = self.of(&context.extensions)?;
        server
            .list_resources(request, context)
            .instrument(span(&caller))
            .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let (server, caller, _busy) = self.of(&context.extensions)?;
        server
            .list_resource_templates(request, context)
            .instrument(span(&caller))
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let (server, caller, _busy) = self.of(&context.extensions)?;
        server
            .read_resource(request, context)
            .instrument(span(&caller))
            .await
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        match self.of(&context.extensions) {
            Ok((server, caller, _busy)) => {
                server
                    .on_initialized(context)
                    .instrument(span(&caller))
                    .await
            }
            Err(error) => tracing::warn!(%error.message, "initialized without a principal"),
        }
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // As every principal's server does: whatever was asked (rmcp intersects it with what
        // get_info advertises).
        Some(requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        // A standing subscription is not work: it keeps no principal from going idle.
        let (server, caller, busy) = self.of(&context.request_context().extensions)?;
        drop(busy);
        server.listen(context).instrument(span(&caller)).await
    }
}
