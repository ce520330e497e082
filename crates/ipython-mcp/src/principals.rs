//! The principals file at the HTTP door: who a request is, whose MCP session it names, and
//! what happens when the file changes (SIGHUP).
//!
//! A request acts as the principal whose token it carries ([`Gate::authenticate`]); anything
//! else is 401. The principal goes into the request's extensions as a [`Caller`], which the
//! MCP layer reads on every call (see `ipython_mcp_mcp::Principals`). An MCP session belongs to
//! the principal that opened it: another principal naming it is answered as rmcp answers a
//! session that does not exist. On SIGHUP the file is read again; sessions opened with a token
//! that no longer names the same principal end, and a removed principal's kernels stop.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use ipython_mcp_config::{Credential, Principal, PrincipalName, Quotas};
use ipython_mcp_mcp::{Caller, Principals};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::SessionManager as _;
use subtle::ConstantTimeEq as _;

const SESSION_HEADER: &str = "mcp-session-id";

/// Reads and checks the principals file. The error is one line naming the file and the line,
/// never a token.
pub fn read_file(path: &Path) -> Result<Vec<Principal>, String> {
    let setting = ipython_mcp_config::HTTP_PRINCIPALS_FILE;
    let text = std::fs::read_to_string(path).map_err(|error| {
        format!(
            "invalid configuration: {} (--{}): cannot read {}: {error}",
            setting.env,
            setting.flag,
            path.display()
        )
    })?;
    crate::http::warn_if_readable_by_others(path);
    ipython_mcp_config::parse_principals(&text).map_err(|problem| {
        format!(
            "invalid configuration: {} (--{}): {}: {problem}",
            setting.env,
            setting.flag,
            path.display()
        )
    })
}

/// The principals in force and the MCP sessions each opened.
pub struct Gate {
    file: PathBuf,
    principals: RwLock<Arc<Vec<Principal>>>,
    /// Every open MCP session: who opened it, with which credential.
    sessions: Mutex<HashMap<String, (PrincipalName, Credential)>>,
}

impl Gate {
    pub fn new(file: PathBuf, principals: Vec<Principal>) -> Gate {
        Gate {
            file,
            principals: RwLock::new(Arc::new(principals)),
            sessions: Mutex::default(),
        }
    }

    /// The principal's quotas now (a principal not in the file has none: the server's).
    pub fn quotas(&self, principal: &PrincipalName) -> Quotas {
        self.current()
            .iter()
            .find(|known| &known.name == principal)
            .map(|known| known.quotas)
            .unwrap_or_default()
    }

    /// The principal a bearer token names. Every credential is compared, each in constant
    /// time, so the answer's timing does not tell how close a guess came or whose it was.
    fn principal_of(&self, token: &str) -> Option<(PrincipalName, Credential)> {
        let given = Credential::of_token(token);
        let mut found = None;
        for principal in self.current().iter() {
            if bool::from(principal.credential.digest().ct_eq(given.digest())) {
                found = Some((principal.name.clone(), principal.credential.clone()));
            }
        }
        found
    }

    fn current(&self) -> Arc<Vec<Principal>> {
        Arc::clone(
            &self
                .principals
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, (PrincipalName, Credential)>> {
        // Single map operations: a panic cannot leave the map half-changed.
        self.sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reads the file again (SIGHUP). A file with a problem changes nothing (the problem is
    /// logged, without tokens). Sessions opened with a token that no longer names the same
    /// principal end; a principal no longer in the file has their kernels stopped.
    pub async fn reload(&self, principals: &Principals, http_sessions: &LocalSessionManager) {
        let fresh = match read_file(&self.file) {
            Ok(fresh) => fresh,
            Err(problem) => {
                tracing::warn!(%problem, "SIGHUP: the principals file was not reloaded; the previous principals stay");
                return;
            }
        };
        let removed: Vec<PrincipalName> = self
            .current()
            .iter()
            .filter(|old| !fresh.iter().any(|new| new.name == old.name))
            .map(|old| old.name.clone())
            .collect();
        let still_valid = |(name, credential): &(PrincipalName, Credential)| {
            fresh
                .iter()
                .any(|new| &new.name == name && &new.credential == credential)
        };
        let ended: Vec<String> = {
            let mut sessions = self.sessions();
            let ended = sessions
                .iter()
                .filter(|(_, owner)| !still_valid(owner))
                .map(|(id, _)| id.clone())
                .collect::<Vec<_>>();
            sessions.retain(|id, _| !ended.contains(id));
            ended
        };
        tracing::info!(
            principals = fresh.len(),
            removed = removed.len(),
            sessions_ended = ended.len(),
            "SIGHUP: principals file reloaded"
        );
        *self
            .principals
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(fresh);
        for id in ended {
            if let Err(error) = http_sessions.close_session(&id.into()).await {
                tracing::debug!(%error, "an MCP session had already ended");
            }
        }
        for name in removed {
            principals.remove(&name).await;
        }
    }
}

/// Lets a request through as the principal its bearer token names; refuses a session another
/// principal opened as if it did not exist; remembers the sessions each principal opens.
pub async fn authenticate(
    State(gate): State<Arc<Gate>>,
    mut request: Request,
    next: Next,
) -> Response {
    let given = crate::http::bearer_token(&request);
    let Some((principal, credential)) = given.and_then(|token| gate.principal_of(token)) else {
        return crate::http::unauthorized(&request, given.is_some());
    };
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    if let Some(session) = &session {
        let owner = gate.sessions().get(session).map(|(owner, _)| owner.clone());
        if owner.is_some_and(|owner| owner != principal) {
            tracing::info!(%principal, "HTTP request names another principal's MCP session: 404");
            return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
        }
    }
    let closing = request.method() == Method::DELETE;
    request.extensions_mut().insert(Caller {
        principal: principal.clone(),
    });
    let response = next.run(request).await;
    if let Some(opened) = response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
    {
        gate.sessions()
            .entry(opened.to_owned())
            .or_insert((principal, credential));
    }
    if closing && response.status().is_success() {
        if let Some(session) = session {
            gate.sessions().remove(&session);
        }
    }
    response
}
