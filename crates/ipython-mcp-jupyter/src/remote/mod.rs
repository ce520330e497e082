//! Kernels on a Jupyter Server (or a JupyterHub single-user server, a Kernel Gateway, an
//! Enterprise Gateway): its REST API to list, start, interrupt and delete kernels, and one
//! WebSocket per kernel for its channels ([`RemoteKernel`]); notebooks in its contents
//! (`contents`).
//!
//! Built on hyper's client (REST) and async-tungstenite (WebSocket), both over rustls with the
//! ring provider and the platform's certificate verifier, and on `jupyter-websocket-client` for
//! the kernel WebSocket protocols (the v1 binary framing, and JSON). That crate's own
//! `connect_to_kernel` is not used: it puts the token in the URL's query (where proxies and
//! server logs keep it), and it connects `wss://` without any root certificates, so no `https`
//! server would verify. reqwest is not used either: its rustls without aws-lc (a second crypto
//! library, with a C build) panics in every other reqwest client of the process unless a
//! process-wide provider is installed first.
//!
//! Invariants:
//! - The token travels only in an `Authorization: token …` header, never in a URL, and no
//!   `Debug` or error shows it.
//! - Every REST call and every connection attempt is bounded by a timeout.

mod channel;
mod contents;

/// The WebSocket types, for a caller of [`Server::websocket`].
pub use async_tungstenite::tungstenite;
pub use channel::{QuickAck, RemoteKernel};
pub use contents::ContentsNotebook;
pub use hyper::Method;

/// A WebSocket opened by [`Server::websocket`]: a `Stream` of messages and a `Sink` for them.
pub type WebSocket = channel::Socket;

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::error::Error;

/// A Jupyter server's address and credentials, and the HTTP client that talks to it. Cheap to
/// clone (shared inside).
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

type HttpClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    http_body_util::Full<bytes::Bytes>,
>;

struct Inner {
    /// Ends in `/`, so `api/…` joins under it.
    base: url::Url,
    token: Option<String>,
    http: HttpClient,
    tls: Arc<rustls::ClientConfig>,
    timeout: Duration,
}

impl std::fmt::Debug for Server {
    // The token never appears: only the URL (which carries no credentials).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("url", &self.inner.base.as_str())
            .field("token", &self.inner.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// A kernelspec the server offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteKernelSpec {
    pub name: String,
    pub display_name: String,
    pub language: String,
}

/// A kernel running on the server, as `/api/kernels` describes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RemoteKernelInfo {
    pub id: String,
    /// Its kernelspec's name.
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub last_activity: Option<String>,
    #[serde(default)]
    pub execution_state: Option<String>,
    #[serde(default)]
    pub connections: Option<u64>,
}

/// A notebook (or console) session of the server: which kernel runs which document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSession {
    pub path: String,
    pub kernel_id: String,
}

#[derive(Deserialize)]
struct SpecsReply {
    #[serde(default)]
    kernelspecs: std::collections::BTreeMap<String, SpecEntry>,
}

#[derive(Deserialize)]
struct SpecEntry {
    #[serde(default)]
    name: String,
    #[serde(default)]
    spec: SpecBody,
}

#[derive(Deserialize, Default)]
struct SpecBody {
    #[serde(default)]
    display_name: String,
    #[serde(default)]
    language: String,
}

#[derive(Deserialize)]
struct SessionReply {
    #[serde(default)]
    path: String,
    kernel: Option<SessionKernel>,
}

#[derive(Deserialize)]
struct SessionKernel {
    id: String,
}

impl Server {
    /// A client for the server at `base` (an `http` or `https` URL, credentials elsewhere).
    /// `timeout` bounds each REST call.
    pub fn new(base: url::Url, token: Option<String>, timeout: Duration) -> Result<Server, Error> {
        let mut base = base;
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let tls = tls_config()?;
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.enforce_http(false);
        // Small requests go out at once (interrupts are latency-bound).
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let http =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector);
        Ok(Server {
            inner: Arc::new(Inner {
                base,
                token: token.filter(|token| !token.is_empty()),
                http,
                tls,
                timeout,
            }),
        })
    }

    /// GETs the JSON document at `url` (absolute), bounded like every call. For documents
    /// besides the Jupyter API's (an OAuth issuer's metadata and keys): use a `Server` made
    /// without a token, so no Jupyter token goes to another host.
    pub async fn get_document(
        &self,
        url: &url::Url,
        what: &str,
    ) -> Result<serde_json::Value, Error> {
        self.get_json(url.as_str(), what).await
    }

    /// The server's base URL (never with credentials).
    pub fn url(&self) -> &url::Url {
        &self.inner.base
    }

    /// The kernelspecs the server offers, by name.
    pub async fn kernelspecs(&self) -> Result<Vec<RemoteKernelSpec>, Error> {
        let reply: SpecsReply = self
            .get_json("api/kernelspecs", "the kernelspec list")
            .await?;
        Ok(reply
            .kernelspecs
            .into_iter()
            .map(|(key, entry)| RemoteKernelSpec {
                name: if entry.name.is_empty() {
                    key
                } else {
                    entry.name
                },
                display_name: entry.spec.display_name,
                language: entry.spec.language,
            })
            .collect())
    }

    /// The kernels running on the server.
    pub async fn kernels(&self) -> Result<Vec<RemoteKernelInfo>, Error> {
        self.get_json("api/kernels", "the kernel list").await
    }

    /// The server's notebook sessions (which document each kernel runs). Gateways have no
    /// sessions API: an empty list then.
    pub async fn sessions(&self) -> Result<Vec<RemoteSession>, Error> {
        match self
            .get_json::<Vec<SessionReply>>("api/sessions", "the session list")
            .await
        {
            Ok(sessions) => Ok(sessions
                .into_iter()
                .filter_map(|session| {
                    session.kernel.map(|kernel| RemoteSession {
                        path: session.path,
                        kernel_id: kernel.id,
                    })
                })
                .collect()),
            Err(Error::RemoteNotFound { .. }) => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    /// One kernel; [`Error::RemoteNotFound`] when the server does not know it (any more).
    pub async fn kernel(&self, id: &str) -> Result<RemoteKernelInfo, Error> {
        check_id(id)?;
        self.get_json(&format!("api/kernels/{id}"), &format!("kernel {id}"))
            .await
    }

    /// Starts a kernel from the server's kernelspec `name`, bounded by `timeout` (a start can
    /// take longer than other calls). `env` goes in the request's `env` field when it is not
    /// empty: gateways (Kernel Gateway, Enterprise Gateway) pass the `KERNEL_*` names and the
    /// ones their configuration allows to the kernel's process; Jupyter Server ignores it.
    pub async fn start_kernel(
        &self,
        name: &str,
        env: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<RemoteKernelInfo, Error> {
        check_id(name)?;
        let what = format!("starting a {name} kernel");
        let body = start_body(name, env);
        let reply = self
            .call(Method::POST, "api/kernels", Some(body), &what, timeout)
            .await?;
        self.parse(&reply, &what)
    }

    /// Deletes (shuts down) a kernel; a kernel already gone is not an error.
    pub async fn delete_kernel(&self, id: &str) -> Result<(), Error> {
        check_id(id)?;
        let what = format!("deleting kernel {id}");
        match self
            .call(
                Method::DELETE,
                &format!("api/kernels/{id}"),
                None,
                &what,
                self.inner.timeout,
            )
            .await
        {
            Ok(_) | Err(Error::RemoteNotFound { .. }) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Asks the server to interrupt a kernel (it signals or messages it, as its spec says).
    pub async fn interrupt_kernel(&self, id: &str) -> Result<(), Error> {
        check_id(id)?;
        let path = format!("api/kernels/{id}/interrupt");
        let what = format!("interrupting kernel {id}");
        self.call(Method::POST, &path, None, &what, self.inner.timeout)
            .await
            .map(drop)
    }

    /// Asks the server to restart a kernel in place (same id, fresh process and namespace).
    pub async fn restart_kernel(&self, id: &str, timeout: Duration) -> Result<(), Error> {
        check_id(id)?;
        let path = format!("api/kernels/{id}/restart");
        let what = format!("restarting kernel {id}");
        self.call(Method::POST, &path, None, &what, timeout)
            .await
            .map(drop)
    }

    /// Connects to kernel `id`'s channels and waits until it answers `kernel_info_request`.
    /// `owned`: the kernel was started by us, so killing it deletes it; otherwise (a kernel
    /// someone else started) killing restarts it in place and shutting down only detaches.
    pub async fn connect(
        &self,
        id: &str,
        owned: bool,
        startup_timeout: Duration,
    ) -> Result<RemoteKernel, Error> {
        check_id(id)?;
        channel::connect(self.clone(), id.to_owned(), owned, startup_timeout).await
    }

    /// One JSON REST call under the base (`path` relative to it, e.g. `api/…`, already
    /// percent-encoded), with the token in its header, bounded like every call: the JSON body
    /// of a 2xx answer (`null` when empty), or the typed error (404: [`Error::RemoteNotFound`]
    /// naming `what`).
    pub async fn call_json(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        what: &str,
    ) -> Result<serde_json::Value, Error> {
        let reply = self
            .call(method, path, body, what, self.inner.timeout)
            .await?;
        if reply.iter().all(u8::is_ascii_whitespace) {
            return Ok(serde_json::Value::Null);
        }
        self.parse(&reply, what)
    }

    /// Opens a WebSocket to `path` under the base (`api/…`, already percent-encoded; the
    /// query may carry identifiers, never credentials: the token goes in the `Authorization`
    /// header), bounded by the call timeout. `what` names it in errors.
    pub async fn websocket(&self, path: &str, what: &str) -> Result<WebSocket, Error> {
        let mut url = self.inner.base.join(path).map_err(|error| Error::Remote {
            url: self.inner.base.to_string(),
            message: format!("cannot form the URL of {what}: {error}"),
        })?;
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        url.set_scheme(scheme).map_err(|()| Error::Remote {
            url: self.inner.base.to_string(),
            message: format!("cannot form the WebSocket URL of {what}"),
        })?;
        let (socket, _protocol) = channel::open_url(self, &url, None, what, what).await?;
        Ok(socket)
    }

    /// One REST call, bounded by `timeout`: the body of a 2xx answer, or the typed error.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        what: &str,
        timeout: Duration,
    ) -> Result<bytes::Bytes, Error> {
        use http_body_util::BodyExt as _;
        let url = self.inner.base.to_string();
        let target = self.inner.base.join(path).map_err(|error| Error::Remote {
            url: url.clone(),
            message: format!("cannot form the URL of {path}: {error}"),
        })?;
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(target.as_str())
            .header(hyper::header::ACCEPT, "application/json");
        if let Some(token) = &self.inner.token {
            request = request.header(hyper::header::AUTHORIZATION, format!("token {token}"));
        }
        let body = match body {
            Some(body) => {
                request = request.header(hyper::header::CONTENT_TYPE, "application/json");
                bytes::Bytes::from(body.to_string())
            }
            None => bytes::Bytes::new(),
        };
        let request = request
            .body(http_body_util::Full::new(body))
            .map_err(|error| Error::Remote {
                url: url.clone(),
                message: format!("cannot form the request for {what}: {error}"),
            })?;
        let exchange = async {
            let response =
                self.inner
                    .http
                    .request(request)
                    .await
                    .map_err(|error| Error::Unreachable {
                        url: url.clone(),
                        message: error_chain(&error),
                    })?;
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|error| Error::Unreachable {
                    url: url.clone(),
                    message: error_chain(&error),
                })?
                .to_bytes();
            Ok::<_, Error>((status, body))
        };
        let (status, body) = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| Error::RemoteTimeout {
                what: what.to_owned(),
                seconds: timeout.as_secs_f64(),
            })??;
        match status {
            200..=299 => Ok(body),
            401 | 403 => Err(Error::Refused { url, status }),
            404 => Err(Error::RemoteNotFound {
                what: what.to_owned(),
            }),
            code => Err(Error::RemoteStatus {
                what: what.to_owned(),
                status: code,
                message: ipython_mcp_text::shorten(String::from_utf8_lossy(&body).trim(), 300),
            }),
        }
    }

    fn parse<T: serde::de::DeserializeOwned>(&self, body: &[u8], what: &str) -> Result<T, Error> {
        serde_json::from_slice(body).map_err(|error| Error::Remote {
            url: self.inner.base.to_string(),
            message: format!("unexpected answer to {what}: {error}"),
        })
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
    ) -> Result<T, Error> {
        let body = self
            .call(Method::GET, path, None, what, self.inner.timeout)
            .await?;
        self.parse(&body, what)
    }

    fn websocket_url(&self, id: &str, session_id: &str) -> Result<url::Url, Error> {
        let mut url = self
            .inner
            .base
            .join(&format!("api/kernels/{id}/channels"))
            .map_err(|error| Error::Remote {
                url: self.inner.base.to_string(),
                message: format!("cannot form the kernel's WebSocket URL: {error}"),
            })?;
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        url.set_scheme(scheme).map_err(|()| Error::Remote {
            url: self.inner.base.to_string(),
            message: "cannot form the kernel's WebSocket URL".to_owned(),
        })?;
        // The session id makes a reconnect the same client, so the server replays the output
        // it buffered meanwhile.
        url.query_pairs_mut().append_pair("session_id", session_id);
        Ok(url)
    }
}

/// The body of `POST api/kernels`. A gateway given `env` starts the kernel with only `PATH`,
/// the variables it allows through and the ones sent, instead of its own environment: so
/// `env` is left out when there is nothing to send, and a server not configured with
/// variables keeps starting kernels as any plain client would.
fn start_body(name: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let mut body = serde_json::json!({ "name": name });
    if !env.is_empty() {
        let env: serde_json::Map<String, serde_json::Value> = env
            .iter()
            .map(|(key, value)| ((*key).to_owned(), serde_json::Value::from(*value)))
            .collect();
        body["env"] = serde_json::Value::Object(env);
    }
    body
}

/// Kernel ids and kernelspec names go into URL paths: nothing that could change the path.
fn check_id(id: &str) -> Result<(), Error> {
    let valid = !id.is_empty()
        && id.len() <= 128
        && id != "."
        && id != ".."
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if valid {
        Ok(())
    } else {
        Err(Error::RemoteNotFound {
            what: format!(
                "kernel or kernelspec {:?}",
                ipython_mcp_text::shorten(id.trim(), 80)
            ),
        })
    }
}

/// rustls with the ring provider (already built for ZeroMQ signing) and the platform's
/// certificate verifier, for REST and WebSocket alike.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, Error> {
    use rustls_platform_verifier::BuilderVerifierExt as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_platform_verifier())
        .map_err(|error| Error::Remote {
            url: String::new(),
            message: format!("cannot set up TLS: {error}"),
        })?
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// An error and its causes on one line (the top-level message alone says little).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    ipython_mcp_text::shorten(text.trim(), 500)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_join_under_the_base_and_never_carry_the_token() {
        let server = Server::new(
            url::Url::parse("https://hub.example/user/ana").expect("url"),
            Some("s3cr3t-token".to_owned()),
            Duration::from_secs(5),
        )
        .expect("client");
        assert_eq!(server.url().as_str(), "https://hub.example/user/ana/");
        let ws = server.websocket_url("abc-1", "sess").expect("url");
        assert_eq!(
            ws.as_str(),
            "wss://hub.example/user/ana/api/kernels/abc-1/channels?session_id=sess"
        );
        assert!(!format!("{server:?}").contains("s3cr3t"));
        assert!(check_id("../x").is_err());
        assert!(check_id("a/b").is_err());
        assert!(check_id("0f3e-aa_1.x").is_ok());
    }

    #[test]
    fn a_start_request_carries_env_only_when_there_is_some() {
        assert_eq!(
            start_body("python3", &[]),
            serde_json::json!({"name": "python3"})
        );
        assert_eq!(
            start_body("python3", &[("KERNEL_USERNAME", "ana"), ("MODE", "x")]),
            serde_json::json!({"name": "python3", "env": {"KERNEL_USERNAME": "ana", "MODE": "x"}})
        );
    }
}
