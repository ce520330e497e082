//! OAuth 2.1 access tokens (the MCP authorization spec, resource-server side): JWTs signed by
//! the configured issuer, whose keys come from the JWKS its metadata names, cached and fetched
//! again when a token names a key the cache does not hold. A token is accepted when its
//! signature, `iss`, `aud` (RFC 8707: it must be for this server), `exp` and `nbf` hold; its
//! principal claim names the principal and its `scope` (or `scp`) what it may do.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use ipython_mcp_config::{OAuth, PrincipalName};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

/// How long fetching the issuer's metadata or keys may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// At most one fetch of the keys per this interval, so tokens naming made-up keys cannot make
/// the server hammer the issuer. A token naming a key the cache lacks waits for the next fetch
/// (at most this long) instead of being refused, and one fetch answers every token that was
/// waiting when it began: junk tokens delay a rotated key by seconds, and never lock it out.
const MIN_FETCH_INTERVAL: Duration = Duration::from_secs(3);

/// Algorithms accepted: asymmetric only, so the issuer's public keys cannot be used as an
/// HMAC secret to forge a token.
const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// A token the issuer vouches for.
#[derive(Debug, Clone)]
pub struct Verified {
    pub principal: PrincipalName,
    pub scopes: BTreeSet<String>,
}

/// Checks access tokens against the issuer's keys.
pub struct Verifier {
    settings: OAuth,
    http: ipython_mcp_jupyter::remote::Server,
    /// Keys by `kid`, with the algorithm each is for when the JWKS says.
    keys: tokio::sync::RwLock<HashMap<String, (DecodingKey, Option<Algorithm>)>>,
    /// When the last fetch of the keys began (none yet: `None`); held while fetching, so one
    /// fetch runs at a time and waiters queue in order.
    fetched: tokio::sync::Mutex<Option<Instant>>,
}

impl Verifier {
    pub fn new(settings: OAuth) -> anyhow::Result<Verifier> {
        // No Jupyter token: this client only ever fetches the issuer's public documents.
        let http =
            ipython_mcp_jupyter::remote::Server::new(settings.issuer.clone(), None, FETCH_TIMEOUT)?;
        Ok(Verifier {
            settings,
            http,
            keys: tokio::sync::RwLock::default(),
            fetched: tokio::sync::Mutex::default(),
        })
    }

    pub fn settings(&self) -> &OAuth {
        &self.settings
    }

    /// The principal and scopes of a valid token; why not otherwise (for the log: never the
    /// token or its claims' values).
    pub async fn verify(&self, token: &str) -> Result<Verified, String> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|error| format!("not a JWT: {error}"))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(format!("algorithm {:?} is not accepted", header.alg));
        }
        let kid = header.kid.clone().unwrap_or_default();
        let (key, algorithm) = self
            .key(&kid)
            .await?
            .ok_or_else(|| "signed with a key the issuer does not publish".to_owned())?;
        if algorithm.is_some_and(|algorithm| algorithm != header.alg) {
            return Err("the token's algorithm is not its key's".to_owned());
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&both_forms(&self.settings.issuer));
        validation.set_audience(&both_forms(&self.settings.resource));
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims =
            jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key, &validation)
                .map_err(|error| format!("rejected: {error}"))?
                .claims;
        let claim = &self.settings.principal_claim;
        let principal = claims
            .get(claim)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("no string claim {claim:?}"))
            .and_then(|value| {
                PrincipalName::from_claim(value).map_err(|problem| {
                    format!("claim {claim:?} cannot name a principal: {problem}")
                })
            })?;
        Ok(Verified {
            principal,
            scopes: scopes(&claims),
        })
    }

    /// The key a token names (`kid`; an empty `kid` stands for the set's only key), fetching
    /// the keys again when it is not known: at once if the last fetch is older than
    /// [`MIN_FETCH_INTERVAL`], else once it is. A fetch that began after this request arrived
    /// already answered it.
    async fn key(&self, kid: &str) -> Result<Option<(DecodingKey, Option<Algorithm>)>, String> {
        if let Some(found) = self.keys.read().await.get(kid) {
            return Ok(Some(found.clone()));
        }
        let arrived = Instant::now();
        let mut fetched = self.fetched.lock().await;
        if fetched.is_some_and(|began| began >= arrived) {
            // Fetched while this request waited its turn: the keys are as fresh as they get.
            return Ok(self.keys.read().await.get(kid).cloned());
        }
        if let Some(began) = *fetched {
            tokio::time::sleep_until((began + MIN_FETCH_INTERVAL).into()).await;
        }
        *fetched = Some(Instant::now());
        let keys = self.fetch_keys().await.inspect_err(|problem| {
            tracing::warn!(%problem, "cannot fetch the OAuth issuer's keys");
        })?;
        tracing::info!(keys = keys.len(), "OAuth issuer's keys fetched");
        let found = keys.get(kid).cloned();
        *self.keys.write().await = keys;
        Ok(found)
    }

    /// The issuer's keys: its metadata (RFC 8414, else OpenID Connect discovery) names its
    /// JWKS. A key that cannot be used (an unknown type) is skipped, not fatal.
    async fn fetch_keys(
        &self,
    ) -> Result<HashMap<String, (DecodingKey, Option<Algorithm>)>, String> {
        let issuer = &self.settings.issuer;
        let mut metadata = None;
        let mut problems = Vec::new();
        for url in metadata_urls(issuer) {
            match self.http.get_document(&url, "the issuer's metadata").await {
                Ok(document) => {
                    metadata = Some(document);
                    break;
                }
                Err(error) => problems.push(error.to_string()),
            }
        }
        let metadata = metadata.ok_or_else(|| problems.join("; "))?;
        let named_issuer = metadata["issuer"].as_str().unwrap_or_default();
        if !both_forms(issuer).iter().any(|form| form == named_issuer) {
            return Err("the issuer's metadata names another issuer".to_owned());
        }
        let jwks_uri = metadata["jwks_uri"]
            .as_str()
            .and_then(|text| url::Url::parse(text).ok())
            .ok_or("the issuer's metadata names no jwks_uri")?;
        let jwks = self
            .http
            .get_document(&jwks_uri, "the issuer's keys")
            .await
            .map_err(|error| error.to_string())?;
        let listed = jwks["keys"].as_array().cloned().unwrap_or_default();
        let usable: HashMap<_, _> = listed
            .iter()
            .filter_map(|key| {
                let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(key.clone()).ok()?;
                let decoding = DecodingKey::from_jwk(&jwk).ok()?;
                let algorithm = jwk
                    .common
                    .key_algorithm
                    .and_then(|algorithm| algorithm.to_string().parse::<Algorithm>().ok());
                Some((
                    jwk.common.key_id.clone().unwrap_or_default(),
                    (decoding, algorithm),
                ))
            })
            .collect();
        if usable.len() == 1 && !usable.contains_key("") {
            // A token without `kid` names the set's only key.
            let only = usable.values().next().cloned();
            return Ok(usable
                .into_iter()
                .chain(only.map(|key| (String::new(), key)))
                .collect());
        }
        Ok(usable)
    }
}

/// A URL as written and with its trailing `/` (the `url` crate adds one to an empty path), so
/// `iss` and `aud` match whichever the issuer wrote.
fn both_forms(url: &url::Url) -> Vec<String> {
    let text = url.as_str();
    let mut forms = vec![text.to_owned()];
    let trimmed = text.trim_end_matches('/');
    if trimmed != text {
        forms.push(trimmed.to_owned());
    }
    forms
}

/// Where the issuer's metadata may be: RFC 8414 (`/.well-known/oauth-authorization-server`
/// inserted before the issuer's path), then OpenID Connect discovery (appended).
fn metadata_urls(issuer: &url::Url) -> Vec<url::Url> {
    let path = issuer.path().trim_end_matches('/');
    let mut urls = Vec::new();
    let mut oauth = issuer.clone();
    oauth.set_path(&format!("/.well-known/oauth-authorization-server{path}"));
    urls.push(oauth);
    let mut openid = issuer.clone();
    openid.set_path(&format!("{path}/.well-known/openid-configuration"));
    urls.push(openid);
    urls
}

/// The scopes a token grants: `scope` (space-separated, RFC 9068) or `scp` (a list or a
/// string, as some issuers write it).
fn scopes(claims: &serde_json::Map<String, Value>) -> BTreeSet<String> {
    let words = |text: &str| {
        text.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let mut granted = BTreeSet::new();
    for claim in ["scope", "scp"] {
        match claims.get(claim) {
            Some(Value::String(text)) => granted.extend(words(text)),
            Some(Value::Array(items)) => {
                granted.extend(items.iter().filter_map(Value::as_str).map(str::to_owned))
            }
            _ => {}
        }
    }
    granted
}

/// Where this server's protected resource metadata is served (RFC 9728: the well-known path
/// inserted before the resource's path), and so what `WWW-Authenticate` points clients at.
pub fn metadata_url(resource: &url::Url) -> url::Url {
    let mut url = resource.clone();
    url.set_path(&format!(
        "/.well-known/oauth-protected-resource{}",
        resource.path().trim_end_matches('/')
    ));
    url
}

/// The protected resource metadata document (RFC 9728).
pub fn metadata(settings: &OAuth) -> Value {
    serde_json::json!({
        "resource": settings.resource.as_str(),
        "authorization_servers": [settings.issuer.as_str().trim_end_matches('/')],
        "scopes_supported": ipython_mcp_mcp::SCOPES,
        "bearer_methods_supported": ["header"],
        "resource_name": "ipython-mcp",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_urls_follow_rfc_8414_then_openid_connect() {
        let plain = url::Url::parse("https://login.example.org").expect("url");
        let shown: Vec<String> = metadata_urls(&plain)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            shown,
            [
                "https://login.example.org/.well-known/oauth-authorization-server",
                "https://login.example.org/.well-known/openid-configuration"
            ]
        );
        let tenant = url::Url::parse("https://login.example.org/tenant1/").expect("url");
        let shown: Vec<String> = metadata_urls(&tenant)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            shown,
            [
                "https://login.example.org/.well-known/oauth-authorization-server/tenant1",
                "https://login.example.org/tenant1/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn the_resource_metadata_sits_before_the_resource_path() {
        let resource = url::Url::parse("https://gpu.example.org/mcp").expect("url");
        assert_eq!(
            metadata_url(&resource).as_str(),
            "https://gpu.example.org/.well-known/oauth-protected-resource/mcp"
        );
        let root = url::Url::parse("http://127.0.0.1:8765").expect("url");
        assert_eq!(
            metadata_url(&root).as_str(),
            "http://127.0.0.1:8765/.well-known/oauth-protected-resource"
        );
    }

    #[test]
    fn scopes_come_from_scope_or_scp() {
        let claims = |value: Value| value.as_object().cloned().expect("object");
        let granted = scopes(&claims(
            serde_json::json!({"scope": "execute notebooks:read"}),
        ));
        assert_eq!(
            granted,
            BTreeSet::from(["execute".to_owned(), "notebooks:read".to_owned()])
        );
        let granted = scopes(&claims(serde_json::json!({"scp": ["notebooks:write"]})));
        assert_eq!(granted, BTreeSet::from(["notebooks:write".to_owned()]));
        assert!(scopes(&claims(serde_json::json!({"sub": "a"}))).is_empty());
    }
}
