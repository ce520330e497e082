//! How MCP clients reach the server: the transport, and the HTTP transport's address, bearer
//! token and allowed origins and hosts.

use std::path::PathBuf;

use crate::error::Error;
use crate::parse::{bounded, path};
use crate::settings::*;

/// How MCP clients reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// One client, over the server's stdin and stdout (the client starts the server).
    Stdio,
    /// Streamable HTTP at `/mcp`, any number of clients, bearer token required.
    Http,
    /// Not MCP: the json-lines desktop protocol on stdin and stdout. Chosen by `--json-lines`
    /// (as in jupymcp), never by `IPYTHON_MCP_TRANSPORT`.
    JsonLines,
}

/// A bearer token. Its `Debug` never shows the value, so it cannot reach a log by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// The least a configured token may have: short tokens are guessable.
    pub const MIN_CHARS: usize = 16;

    /// Checks a token given by the user (flag, variable or file).
    pub fn parse(text: &str) -> Result<Token, String> {
        let text = text.trim();
        if text.chars().count() < Self::MIN_CHARS {
            return Err(format!(
                "must be at least {} characters (it has {})",
                Self::MIN_CHARS,
                text.chars().count()
            ));
        }
        if !text.chars().all(|c| c.is_ascii_graphic()) {
            return Err("must be printable ASCII without spaces".to_owned());
        }
        Ok(Token(text.to_owned()))
    }

    /// Checks a token another server issued (a Jupyter server's): any length, since its
    /// strength is that server's business, but printable ASCII without spaces, as it goes in
    /// an HTTP header. The message never repeats the value.
    pub fn parse_issued(text: &str) -> Result<Token, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("must not be empty".to_owned());
        }
        if !text.chars().all(|c| c.is_ascii_graphic()) {
            return Err("must be printable ASCII without spaces".to_owned());
        }
        Ok(Token(text.to_owned()))
    }

    /// A token the server made itself from random bytes.
    pub fn generated(random: &[u8; 32]) -> Token {
        Token(random.iter().map(|byte| format!("{byte:02x}")).collect())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Token(<redacted>)")
    }
}

/// Where the bearer token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `IPYTHON_MCP_HTTP_TOKEN` / `--http-token`.
    Given(Token),
    /// `IPYTHON_MCP_HTTP_TOKEN_FILE`: read (and checked with [`Token::parse`]) by the binary.
    File(PathBuf),
    /// `IPYTHON_MCP_HTTP_PRINCIPALS_FILE`: one token per principal, each principal with its
    /// own sessions (read and checked by the binary, and re-read on SIGHUP).
    Principals(PathBuf),
    /// None of these: the server generates one and prints it once.
    Generate,
}

/// Settings of the HTTP transport (unused over stdio).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http {
    pub host: std::net::IpAddr,
    pub port: u16,
    pub token: TokenSource,
    /// Browser origins allowed (an `Origin` header must match one; requests without `Origin`,
    /// i.e. not from a browser, are not affected).
    pub allowed_origins: Vec<String>,
    /// Accepted `Host` header values (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    pub allow_remote: bool,
    /// OAuth 2.1 access tokens accepted as well (`None`: bearer tokens of our own only).
    pub oauth: Option<OAuth>,
}

/// An OAuth 2.1 authorization server whose JWT access tokens the HTTP transport accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuth {
    /// The issuer (`iss`), whose metadata names its keys.
    pub issuer: url::Url,
    /// This server as a resource (RFC 8707/9728): the audience tokens must name.
    pub resource: url::Url,
    /// The claim that names the principal.
    pub principal_claim: String,
    /// How many principals of access tokens (not of the principals file) are served at once.
    pub max_principals: usize,
}

impl Http {
    /// Origins allowed when none are configured: pages served from this machine.
    pub const LOOPBACK_ORIGINS: [&'static str; 6] = [
        "http://localhost:*",
        "http://127.0.0.1:*",
        "http://[::1]:*",
        "https://localhost:*",
        "https://127.0.0.1:*",
        "https://[::1]:*",
    ];
    /// Host names always accepted in the `Host` header.
    pub const LOOPBACK_HOSTS: [&'static str; 3] = ["localhost", "127.0.0.1", "::1"];
}

pub(crate) fn transport(raw: &RawConfig) -> Result<Transport, Error> {
    match raw.get(TRANSPORT).unwrap_or(TRANSPORT.default).trim() {
        "stdio" => Ok(Transport::Stdio),
        // jupymcp's name for the same transport, so its users keep their command line.
        "http" | "streamable-http" => Ok(Transport::Http),
        other => Err(Error::Invalid {
            env: TRANSPORT.env,
            flag: TRANSPORT.flag,
            problem: format!(
                "must be stdio or http (also spelled streamable-http), got {:?}",
                bounded(other)
            ),
        }),
    }
}

pub(crate) fn http(raw: &RawConfig) -> Result<Http, Error> {
    let allow_remote = allow_remote(raw)?;
    let host = host(raw, allow_remote)?;
    let port = raw.get(PORT).unwrap_or(PORT.default).trim();
    let port = port.parse::<u16>().map_err(|_| {
        invalid(
            PORT,
            format!("must be a TCP port (0 to 65535), got {:?}", bounded(port)),
        )
    })?;
    let token = token_source(raw)?;
    let allowed_origins = allowed_origins(raw)?;
    let mut allowed_hosts = Http::LOOPBACK_HOSTS.map(str::to_owned).to_vec();
    if !host.is_loopback() && !host.is_unspecified() {
        allowed_hosts.push(host.to_string());
    }
    allowed_hosts.extend(list(raw.get(HTTP_ALLOWED_HOSTS)));
    let oauth = oauth(raw)?;
    if oauth.is_some() {
        if let Some(setting) = [HTTP_TOKEN, HTTP_TOKEN_FILE]
            .into_iter()
            .find(|setting| raw.get(*setting).is_some())
        {
            return Err(invalid(
                setting,
                format!(
                    "one token for everyone cannot go with {}: give each person a principal ({}) or a token from the issuer",
                    HTTP_OAUTH_ISSUER.env, HTTP_PRINCIPALS_FILE.env
                ),
            ));
        }
    }
    Ok(Http {
        host,
        port,
        token,
        allowed_origins,
        allowed_hosts,
        allow_remote,
        oauth,
    })
}

/// The error for a bad value of `setting`.
fn invalid(setting: Setting, problem: String) -> Error {
    Error::Invalid {
        env: setting.env,
        flag: setting.flag,
        problem,
    }
}

/// Whether the listener may bind an address other machines can reach.
fn allow_remote(raw: &RawConfig) -> Result<bool, Error> {
    match raw.get(ALLOW_REMOTE).unwrap_or(ALLOW_REMOTE.default).trim() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        other => Err(invalid(
            ALLOW_REMOTE,
            format!("must be true or false, got {:?}", bounded(other)),
        )),
    }
}

/// The address to listen on (brackets around an IPv6 address allowed); one other machines
/// could reach needs `allow_remote`, so that exposing the kernels is never an accident.
fn host(raw: &RawConfig, allow_remote: bool) -> Result<std::net::IpAddr, Error> {
    let host = match raw.get(HOST).unwrap_or(HOST.default).trim() {
        "localhost" => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        text => text
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .map_err(|_| {
                invalid(
                    HOST,
                    format!(
                        "must be an IP address such as 127.0.0.1 or ::1, got {:?}",
                        bounded(text)
                    ),
                )
            })?,
    };
    if !host.is_loopback() && !allow_remote {
        return Err(invalid(
            HOST,
            format!(
                "{host} is not a loopback address; other machines could connect, so this needs --allow-remote ({}=true)",
                ALLOW_REMOTE.env
            ),
        ));
    }
    Ok(host)
}

/// The browser origins allowed: the loopback ones when none are given, else the given ones,
/// each of which must look like an origin (or be `null`).
fn allowed_origins(raw: &RawConfig) -> Result<Vec<String>, Error> {
    let Some(given) = raw.get(HTTP_ALLOWED_ORIGINS) else {
        return Ok(Http::LOOPBACK_ORIGINS.map(str::to_owned).to_vec());
    };
    let origins = list(Some(given));
    if let Some(bad) = origins
        .iter()
        .find(|origin| !(origin.contains("://") || origin.as_str() == "null"))
    {
        return Err(invalid(
            HTTP_ALLOWED_ORIGINS,
            format!(
                "{:?} is not an origin like http://localhost:3000",
                bounded(bad)
            ),
        ));
    }
    Ok(origins)
}

/// The non-empty items of a comma-separated list, trimmed.
fn list(text: Option<&str>) -> Vec<String> {
    text.into_iter()
        .flat_map(|text| text.split(','))
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Where the bearer tokens come from: at most one of the three settings.
fn token_source(raw: &RawConfig) -> Result<TokenSource, Error> {
    let given: Vec<Setting> = [HTTP_TOKEN, HTTP_TOKEN_FILE, HTTP_PRINCIPALS_FILE]
        .into_iter()
        .filter(|setting| raw.get(*setting).is_some())
        .collect();
    if let [first, second, ..] = given[..] {
        return Err(Error::Invalid {
            env: first.env,
            flag: first.flag,
            problem: format!("set either it or {}, not both", second.env),
        });
    }
    if let Some(text) = raw.get(HTTP_TOKEN) {
        return Token::parse(text)
            .map(TokenSource::Given)
            .map_err(|problem| Error::Invalid {
                env: HTTP_TOKEN.env,
                flag: HTTP_TOKEN.flag,
                problem,
            });
    }
    if let Some(file) = path(raw, HTTP_TOKEN_FILE)? {
        return Ok(TokenSource::File(file));
    }
    if let Some(file) = path(raw, HTTP_PRINCIPALS_FILE)? {
        return Ok(TokenSource::Principals(file));
    }
    Ok(TokenSource::Generate)
}

/// The OAuth settings: the issuer and the resource together, or neither.
fn oauth(raw: &RawConfig) -> Result<Option<OAuth>, Error> {
    let url = |setting: Setting| -> Result<Option<url::Url>, Error> {
        let Some(text) = raw.get(setting).map(str::trim) else {
            return Ok(None);
        };
        let url = url::Url::parse(text).map_err(|error| {
            invalid(
                setting,
                format!("{:?} is not a URL ({error})", bounded(text)),
            )
        })?;
        if !matches!(url.scheme(), "http" | "https")
            || url.host().is_none()
            || !url.username().is_empty()
            || url.password().is_some()
            || url.query().is_some()
            || url.fragment().is_some()
        {
            return Err(invalid(
                setting,
                format!(
                    "{:?} must be an http:// or https:// URL with a host, without credentials, query or fragment",
                    bounded(text)
                ),
            ));
        }
        Ok(Some(url))
    };
    let (issuer, resource) = match (url(HTTP_OAUTH_ISSUER)?, url(HTTP_OAUTH_RESOURCE)?) {
        (None, None) => return Ok(None),
        (Some(issuer), Some(resource)) => (issuer, resource),
        (Some(_), None) => {
            return Err(invalid(
                HTTP_OAUTH_ISSUER,
                format!(
                    "needs {} too: this server's URL, which its access tokens must name as their audience",
                    HTTP_OAUTH_RESOURCE.env
                ),
            ))
        }
        (None, Some(_)) => {
            return Err(invalid(
                HTTP_OAUTH_RESOURCE,
                format!("is only used with {}", HTTP_OAUTH_ISSUER.env),
            ))
        }
    };
    let claim = raw
        .get(HTTP_OAUTH_PRINCIPAL_CLAIM)
        .unwrap_or(HTTP_OAUTH_PRINCIPAL_CLAIM.default)
        .trim();
    if claim.is_empty() || !claim.chars().all(|c| c.is_ascii_graphic()) {
        return Err(invalid(
            HTTP_OAUTH_PRINCIPAL_CLAIM,
            format!("must be a claim name, got {:?}", bounded(claim)),
        ));
    }
    Ok(Some(OAuth {
        issuer,
        resource,
        principal_claim: claim.to_owned(),
        max_principals: crate::parse::positive_int(raw, HTTP_OAUTH_MAX_PRINCIPALS)?,
    }))
}

#[cfg(test)]
mod tests {
    use crate::{Config, TokenSource};

    use super::*;

    #[test]
    fn an_issuer_needs_its_resource_and_excludes_the_single_token() {
        let issuer = "https://login.example.org/realms/lab";
        let resource = "https://gpu.example.org/mcp";
        let config = Config::from_raw(
            &RawConfig::default()
                .with(HTTP_OAUTH_ISSUER, issuer)
                .with(HTTP_OAUTH_RESOURCE, resource),
        )
        .expect("valid");
        let oauth = config.http.oauth.expect("oauth");
        assert_eq!(oauth.issuer.as_str(), issuer);
        assert_eq!(oauth.resource.as_str(), resource);
        assert_eq!(oauth.principal_claim, "sub");
        assert_eq!(oauth.max_principals, 64);
        assert_eq!(config.http.token, TokenSource::Generate);

        let refused = |raw: RawConfig, setting: Setting, problem: &str| {
            let error = Config::from_raw(&raw).expect_err(problem).to_string();
            assert!(error.contains(setting.env), "{error}");
            assert!(error.contains(problem), "{error}");
        };
        refused(
            RawConfig::default().with(HTTP_OAUTH_ISSUER, issuer),
            HTTP_OAUTH_ISSUER,
            HTTP_OAUTH_RESOURCE.env,
        );
        refused(
            RawConfig::default().with(HTTP_OAUTH_RESOURCE, resource),
            HTTP_OAUTH_RESOURCE,
            "only used with",
        );
        refused(
            RawConfig::default()
                .with(HTTP_OAUTH_ISSUER, "https://user:secret@login.example.org")
                .with(HTTP_OAUTH_RESOURCE, resource),
            HTTP_OAUTH_ISSUER,
            "without credentials",
        );
        refused(
            RawConfig::default()
                .with(HTTP_OAUTH_ISSUER, issuer)
                .with(HTTP_OAUTH_RESOURCE, resource)
                .with(HTTP_TOKEN, "a-token-of-16-chars-or-more"),
            HTTP_TOKEN,
            "cannot go with",
        );
        refused(
            RawConfig::default()
                .with(HTTP_PRINCIPALS_FILE, "/etc/principals")
                .with(HTTP_TOKEN_FILE, "/etc/token"),
            HTTP_TOKEN_FILE,
            "not both",
        );
    }
}
