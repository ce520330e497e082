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
    let text = crate::bearer::read_secrets(setting, path)?;
    ipython_mcp_config::parse_principals(&text).map_err(|problem| {
        format!(
            "invalid configuration: {} (--{}): {}: {problem}",
            setting.env,
            setting.flag,
            path.display()
        )
    })
}

/// Who opened an MCP session: the principal, and the file's credential they used (none for
/// an OAuth token, which is checked again on every request anyway).
type Opener = (PrincipalName, Option<Credential>);

/// The principals in force and the MCP sessions each opened.
pub struct Gate {
    /// The principals file, if there is one (there may be only an OAuth issuer).
    file: Option<PathBuf>,
    principals: RwLock<Arc<Vec<Principal>>>,
    oauth: Option<crate::oauth::Verifier>,
    /// Every open MCP session: who opened it.
    sessions: Mutex<HashMap<String, Opener>>,
    /// How long a principal of an access token may stay idle before their state is dropped
    /// (the kernel idle timeout).
    idle_timeout: std::time::Duration,
}

/// A request's principal, and what its token lets it do (`None`: everything; a token of the
/// principals file).
struct Admitted {
    principal: PrincipalName,
    credential: Option<Credential>,
    scopes: Option<std::collections::BTreeSet<String>>,
}

impl Gate {
    pub fn new(
        file: Option<PathBuf>,
        principals: Vec<Principal>,
        oauth: Option<crate::oauth::Verifier>,
        idle_timeout: std::time::Duration,
    ) -> Gate {
        Gate {
            file,
            principals: RwLock::new(Arc::new(principals)),
            oauth,
            sessions: Mutex::default(),
            idle_timeout,
        }
    }

    /// Whether a principal may have state made for them now: one of the file's, or any
    /// subject while an issuer's tokens are accepted (each is verified on every request). A
    /// request let in just before a SIGHUP removed its principal finds this false, so the
    /// removal is final: nothing of theirs is made again.
    pub fn admits(&self, principal: &PrincipalName) -> bool {
        self.oauth.is_some() || self.in_file(principal)
    }

    /// Whether the principals file names `principal` (as loaded now).
    fn in_file(&self, principal: &PrincipalName) -> bool {
        self.current().iter().any(|known| &known.name == principal)
    }

    /// Periodic upkeep: forgets MCP sessions rmcp has ended (expired idle ones included), and
    /// drops the state of access-token principals idle past the idle timeout, which gives
    /// their kernels back and their place under the cap.
    pub async fn upkeep(&self, principals: &Principals, http_sessions: &LocalSessionManager) {
        let open: std::collections::HashSet<String> = http_sessions
            .sessions
            .read()
            .await
            .keys()
            .map(ToString::to_string)
            .collect();
        let pruned = {
            let mut sessions = self.sessions();
            let before = sessions.len();
            sessions.retain(|id, _| open.contains(id));
            before - sessions.len()
        };
        if pruned > 0 {
            tracing::debug!(pruned, "ended MCP sessions forgotten");
        }
        if self.oauth.is_some() {
            principals
                .forget_idle(self.idle_timeout, |name| !self.in_file(name))
                .await;
        }
    }

    /// Lets an access-token principal in if they are served already or there is room for
    /// them under `IPYTHON_MCP_HTTP_OAUTH_MAX_PRINCIPALS` (idle ones are dropped first to make
    /// room); `false`: the server is full.
    async fn room_for(&self, principal: &PrincipalName, principals: &Principals) -> bool {
        let Some(oauth) = self.oauth() else {
            return true;
        };
        if self.in_file(principal) {
            return true;
        }
        let counted = |name: &PrincipalName| !self.in_file(name);
        let mut admitted = principals.admit(principal, oauth.max_principals, counted);
        if matches!(admitted, Ok(false))
            && principals.forget_idle(self.idle_timeout, counted).await > 0
        {
            admitted = principals.admit(principal, oauth.max_principals, counted);
        }
        match admitted {
            Ok(room) => room,
            Err(problem) => {
                // The MCP layer meets the same problem and answers it as an error.
                tracing::debug!(%principal, %problem, "principal's state not made at the door");
                true
            }
        }
    }

    /// The OAuth settings, when access tokens of an issuer are accepted.
    pub fn oauth(&self) -> Option<&ipython_mcp_config::OAuth> {
        self.oauth.as_ref().map(crate::oauth::Verifier::settings)
    }

    /// Who a bearer token is: a principal of the file, else the subject of an access token
    /// the issuer signed. `Err` says why not (for the log, never the token).
    async fn admit(&self, token: &str) -> Result<Admitted, String> {
        if let Some((principal, credential)) = self.principal_of(token) {
            return Ok(Admitted {
                principal,
                credential: Some(credential),
                scopes: None,
            });
        }
        let Some(verifier) = &self.oauth else {
            return Err("not a principal's token".to_owned());
        };
        let verified = verifier.verify(token).await?;
        Ok(Admitted {
            principal: verified.principal,
            credential: None,
            scopes: Some(verified.scopes),
        })
    }

    /// The principal's quotas now (a principal not in the file has none: the server's).
    /// Every principal's own code-mode upstreams file.
    pub fn upstream_files(&self) -> Vec<PathBuf> {
        self.current()
            .iter()
            .filter_map(|known| known.quotas.upstream_servers.clone())
            .collect()
    }

    pub fn quotas(&self, principal: &PrincipalName) -> Quotas {
        self.current()
            .iter()
            .find(|known| &known.name == principal)
            .map(|known| known.quotas.clone())
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

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Opener>> {
        // Single map operations: a panic cannot leave the map half-changed.
        self.sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reads the file again (SIGHUP). A file with a problem changes nothing (the problem is
    /// logged, without tokens). Sessions opened with a token that no longer names the same
    /// principal end; a principal no longer in the file has their kernels stopped.
    pub async fn reload(&self, principals: &Principals, http_sessions: &LocalSessionManager) {
        let Some(file) = &self.file else {
            tracing::info!("SIGHUP ignored: no principals file to re-read");
            return;
        };
        let fresh = match read_file(file) {
            Ok(fresh) => fresh,
            Err(problem) => {
                tracing::warn!(%problem, "SIGHUP: the principals file was not reloaded; the previous principals stay");
                return;
            }
        };
        // With an issuer, a name gone from the file may still be a token's subject: its
        // kernels stay, and only the sessions opened with the file's token end.
        let removed: Vec<PrincipalName> = self
            .current()
            .iter()
            .filter(|old| self.oauth.is_none() && !fresh.iter().any(|new| new.name == old.name))
            .map(|old| old.name.clone())
            .collect();
        let still_valid = |(name, credential): &Opener| match credential {
            Some(credential) => fresh
                .iter()
                .any(|new| &new.name == name && &new.credential == credential),
            None => true,
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

/// Lets a request through as the principal its bearer token names, if the token grants what
/// the request needs; refuses a session another principal opened as if it did not exist;
/// remembers the sessions each principal opens.
pub async fn authenticate(
    State((gate, principals)): State<(Arc<Gate>, Principals)>,
    request: Request,
    next: Next,
) -> Response {
    let given = crate::bearer::token(&request).map(str::to_owned);
    let admitted = match &given {
        Some(token) => gate.admit(token).await,
        None => Err("no token".to_owned()),
    };
    let admitted = match admitted {
        Ok(admitted) => admitted,
        Err(reason) => {
            tracing::debug!(%reason, "bearer token refused");
            return crate::bearer::unauthorized(&request, given.is_some(), gate.oauth());
        }
    };
    let mut request = match &admitted.scopes {
        Some(granted) => match scoped(request, granted, gate.oauth()).await {
            Ok(request) => request,
            Err(refused) => return refused,
        },
        None => request,
    };
    let principal = admitted.principal;
    if admitted.credential.is_none() && !gate.room_for(&principal, &principals).await {
        let max = gate.oauth().map_or(0, |oauth| oauth.max_principals);
        tracing::warn!(
            max,
            "HTTP request of a new access-token principal refused: 403, the server is full"
        );
        return (
            StatusCode::FORBIDDEN,
            format!(
                "403 Forbidden: this server serves at most {max} access-token principals at once ({}), and none is idle; try again later\n",
                ipython_mcp_config::HTTP_OAUTH_MAX_PRINCIPALS.env
            ),
        )
            .into_response();
    }
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
            .or_insert((principal, admitted.credential));
    }
    if closing && response.status().is_success() {
        if let Some(session) = session {
            gate.sessions().remove(&session);
        }
    }
    response
}

/// Largest request body read to find what an OAuth-scoped request asks for (a cell's code is
/// at most 1 MiB; JSON escaping can multiply it).
const MAX_SCOPED_BODY: usize = 16 * 1024 * 1024;

/// The request again if its token's scopes grant what its JSON-RPC message needs, else the
/// `403 insufficient_scope` answer (RFC 6750) naming the missing scopes.
async fn scoped(
    request: Request,
    granted: &std::collections::BTreeSet<String>,
    oauth: Option<&ipython_mcp_config::OAuth>,
) -> Result<Request, Response> {
    if request.method() != Method::POST {
        return Ok(request);
    }
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_SCOPED_BODY)
        .await
        .map_err(|_| (StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response())?;
    let messages = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Array(batch)) => batch,
        Ok(message) => vec![message],
        // Not JSON: rmcp answers that; it needs no scope to be refused.
        Err(_) => Vec::new(),
    };
    let missing: std::collections::BTreeSet<&str> = messages
        .iter()
        .flat_map(ipython_mcp_mcp::required_scopes)
        .filter(|scope| !granted.contains(*scope))
        .collect();
    if !missing.is_empty() {
        let scope = missing.into_iter().collect::<Vec<_>>().join(" ");
        tracing::info!(%scope, "HTTP request refused: 403 insufficient_scope");
        let mut challenge = format!("Bearer error=\"insufficient_scope\", scope=\"{scope}\"");
        if let Some(oauth) = oauth {
            challenge.push_str(&format!(
                ", resource_metadata=\"{}\"",
                crate::oauth::metadata_url(&oauth.resource)
            ));
        }
        return Err((
            StatusCode::FORBIDDEN,
            [(axum::http::header::WWW_AUTHENTICATE, challenge)],
            format!("403 Forbidden: the access token lacks the scope {scope}\n"),
        )
            .into_response());
    }
    Ok(Request::from_parts(parts, axum::body::Body::from(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rmcp ends idle MCP sessions by itself: the map of who opened which must not keep them.
    #[tokio::test]
    async fn upkeep_forgets_sessions_rmcp_has_ended() {
        let gate = Gate::new(None, Vec::new(), None, std::time::Duration::from_secs(900));
        let alice = PrincipalName::parse("alice").expect("name");
        for n in 0..100 {
            gate.sessions()
                .insert(format!("ended-{n}"), (alice.clone(), None));
        }
        let config = Arc::new(ipython_mcp_config::Config::default());
        let principals = Principals::new(
            ipython_mcp_mcp::Blueprint::new(config),
            Box::new(|_: &PrincipalName| Err("no state in this test".to_owned())),
        );
        gate.upkeep(&principals, &LocalSessionManager::default())
            .await;
        assert!(gate.sessions().is_empty());
    }
}
