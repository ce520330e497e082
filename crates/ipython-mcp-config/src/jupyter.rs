//! The Jupyter server whose kernels `jupyter:` and `jupyter-kernel:` specs name, and the
//! default session's kernel choice (`--kernel`).

use std::path::PathBuf;

use crate::error::Error;
use crate::parse::{bounded, path};
use crate::settings::{RawConfig, Setting, JUPYTER_TOKEN, JUPYTER_TOKEN_FILE, JUPYTER_URL, KERNEL};
use crate::transport::Token;

/// A Jupyter Server (or JupyterHub single-user server, Kernel Gateway, Enterprise Gateway).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JupyterServer {
    /// The base URL, ending in `/` so that `api/…` joins under it (a JupyterHub user's server
    /// lives under `/user/NAME/`). It never carries credentials: those are refused.
    pub url: url::Url,
    pub token: JupyterToken,
}

/// Where the Jupyter server's token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JupyterToken {
    /// No token (a server without authentication, e.g. a gateway behind its own proxy).
    None,
    /// `IPYTHON_MCP_JUPYTER_TOKEN` / `--jupyter-token`.
    Given(Token),
    /// `IPYTHON_MCP_JUPYTER_TOKEN_FILE`: read (and checked with [`Token::parse_issued`]) by
    /// the binary before anything starts.
    File(PathBuf),
}

impl JupyterServer {
    /// One line to print at start-up when the token (or the code) would cross the network in
    /// clear: plain `http://` to a host that is not this machine.
    pub fn warning(&self) -> Option<String> {
        let loopback = match self.url.host() {
            Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        };
        (self.url.scheme() == "http" && !loopback).then(|| {
            format!(
                "warning: {} is plain http to another machine: the token and your code travel unencrypted; use https",
                JUPYTER_URL.env
            )
        })
    }
}

fn invalid(setting: Setting, problem: String) -> Error {
    Error::Invalid {
        env: setting.env,
        flag: setting.flag,
        problem,
    }
}

pub(crate) fn jupyter(raw: &RawConfig) -> Result<Option<JupyterServer>, Error> {
    let token = match (raw.get(JUPYTER_TOKEN), raw.get(JUPYTER_TOKEN_FILE)) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                JUPYTER_TOKEN,
                format!("set either it or {}, not both", JUPYTER_TOKEN_FILE.env),
            ))
        }
        (Some(text), None) => JupyterToken::Given(
            Token::parse_issued(text).map_err(|problem| invalid(JUPYTER_TOKEN, problem))?,
        ),
        (None, Some(_)) => match path(raw, JUPYTER_TOKEN_FILE)? {
            Some(file) => JupyterToken::File(file),
            None => JupyterToken::None,
        },
        (None, None) => JupyterToken::None,
    };
    let Some(text) = raw.get(JUPYTER_URL) else {
        if token != JupyterToken::None {
            return Err(invalid(
                JUPYTER_URL,
                "is needed when a Jupyter token is set".to_owned(),
            ));
        }
        return Ok(None);
    };
    let text = text.trim();
    if text.is_empty() {
        return Err(Error::Empty {
            env: JUPYTER_URL.env,
            flag: JUPYTER_URL.flag,
        });
    }
    let shown = || bounded(&crate::redact::url_credentials(text));
    let mut url = url::Url::parse(text)
        .map_err(|error| invalid(JUPYTER_URL, format!("{:?} is not a URL ({error})", shown())))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(invalid(
            JUPYTER_URL,
            format!(
                "{:?} must be an http:// or https:// URL with a host",
                shown()
            ),
        ));
    }
    // Credentials in a URL end up in logs and error messages; the token has its own setting.
    if !url.username().is_empty() || url.password().is_some() || url.query().is_some() {
        return Err(invalid(
            JUPYTER_URL,
            format!(
                "{:?} must carry no credentials or query; give the token with {} or {}",
                shown(),
                JUPYTER_TOKEN.env,
                JUPYTER_TOKEN_FILE.env
            ),
        ));
    }
    url.set_fragment(None);
    // JupyterLab's own pages are not the API root: `…/lab` and `…/tree` address the server.
    let trimmed = url
        .path()
        .trim_end_matches('/')
        .trim_end_matches("/lab")
        .trim_end_matches("/tree")
        .to_owned();
    url.set_path(&format!("{trimmed}/"));
    Ok(Some(JupyterServer { url, token }))
}

/// The default session's spec: syntax only (whether a kernelspec or venv exists is checked
/// when the server starts, where files are read).
pub(crate) fn kernel(
    raw: &RawConfig,
    jupyter: Option<&JupyterServer>,
) -> Result<Option<String>, Error> {
    let Some(text) = raw.get(KERNEL) else {
        return Ok(None);
    };
    let spec = text.trim();
    if spec.is_empty() {
        return Err(Error::Empty {
            env: KERNEL.env,
            flag: KERNEL.flag,
        });
    }
    for prefix in [REMOTE_START, REMOTE_ATTACH] {
        if let Some(name) = spec.strip_prefix(prefix) {
            if jupyter.is_none() {
                return Err(invalid(
                    KERNEL,
                    format!(
                        "{:?} needs {} (the server to run it on)",
                        bounded(spec),
                        JUPYTER_URL.env
                    ),
                ));
            }
            if !is_remote_name(name) {
                return Err(invalid(
                    KERNEL,
                    format!(
                        "{:?} must name a kernelspec or kernel id after {prefix} (letters, digits, '.', '_', '-')",
                        bounded(spec)
                    ),
                ));
            }
        }
    }
    Ok(Some(spec.to_owned()))
}

/// How a kernel spec names a new kernel on the Jupyter server (`jupyter:<kernelspec>`).
pub const REMOTE_START: &str = "jupyter:";
/// How a kernel spec names a kernel already running there (`jupyter-kernel:<id>`).
pub const REMOTE_ATTACH: &str = "jupyter-kernel:";

/// A remote kernelspec name or kernel id: it becomes a URL path segment, so nothing that could
/// change the path.
pub fn is_remote_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && name != "."
        && name != ".."
}

#[cfg(test)]
mod tests {
    use crate::*;

    fn parse(raw: RawConfig) -> Result<Config, String> {
        Config::from_raw(&raw).map_err(|error| error.to_string())
    }

    #[test]
    fn the_jupyter_url_is_a_base_url_without_credentials() {
        let url = |text: &str| {
            parse(RawConfig::default().with(JUPYTER_URL, text))
                .map(|config| config.jupyter.expect("configured").url.to_string())
        };
        assert_eq!(
            url("http://127.0.0.1:8888").unwrap(),
            "http://127.0.0.1:8888/"
        );
        assert_eq!(
            url("https://hub.example/user/ana").unwrap(),
            "https://hub.example/user/ana/"
        );
        assert_eq!(
            url("https://hub.example/user/ana/lab").unwrap(),
            "https://hub.example/user/ana/"
        );
        let error = url("https://me:s3cr3tpass@hub.example/").unwrap_err();
        assert!(error.contains("IPYTHON_MCP_JUPYTER_URL"), "{error}");
        assert!(!error.contains("s3cr3tpass"), "{error}");
        let error = url("http://127.0.0.1:8888/?token=abcdef0123456789").unwrap_err();
        assert!(error.contains("no credentials or query"), "{error}");
        for bad in ["ftp://x/", "not a url", "http://", " "] {
            let error = url(bad).unwrap_err();
            assert!(error.contains("IPYTHON_MCP_JUPYTER_URL"), "{bad}: {error}");
            assert!(!error.contains('\n'));
        }
    }

    #[test]
    fn plain_http_to_another_machine_warns() {
        let warning = |text: &str| {
            parse(RawConfig::default().with(JUPYTER_URL, text))
                .expect("valid")
                .jupyter
                .expect("configured")
                .warning()
        };
        assert_eq!(warning("http://127.0.0.1:8888/"), None);
        assert_eq!(warning("http://localhost:8888/"), None);
        assert_eq!(warning("http://[::1]:8888/"), None);
        assert_eq!(warning("https://hub.example/"), None);
        let line = warning("http://hub.example/").expect("a warning");
        assert!(line.contains("IPYTHON_MCP_JUPYTER_URL") && !line.contains('\n'));
    }

    #[test]
    fn the_jupyter_token_is_checked_and_never_shown() {
        let config = parse(
            RawConfig::default()
                .with(JUPYTER_URL, "http://127.0.0.1:8888")
                .with(JUPYTER_TOKEN, "abc123secret"),
        )
        .expect("valid");
        let jupyter = config.jupyter.as_ref().expect("configured");
        assert!(
            matches!(&jupyter.token, JupyterToken::Given(token) if token.expose() == "abc123secret")
        );
        assert!(!format!("{config:?}").contains("abc123secret"));
        let error = parse(
            RawConfig::default()
                .with(JUPYTER_URL, "http://127.0.0.1:8888")
                .with(JUPYTER_TOKEN, "has space"),
        )
        .unwrap_err();
        assert!(error.contains("IPYTHON_MCP_JUPYTER_TOKEN"), "{error}");
        assert!(!error.contains("has space"), "{error}");
        let error = parse(RawConfig::default().with(JUPYTER_TOKEN, "abc123secret")).unwrap_err();
        assert!(error.contains("IPYTHON_MCP_JUPYTER_URL"), "{error}");
        let error = parse(
            RawConfig::default()
                .with(JUPYTER_URL, "http://127.0.0.1:8888")
                .with(JUPYTER_TOKEN, "abc123secret")
                .with(JUPYTER_TOKEN_FILE, "/tmp/t"),
        )
        .unwrap_err();
        assert!(error.contains("not both"), "{error}");
    }

    #[test]
    fn the_kernel_setting_needs_a_server_for_remote_specs() {
        let kernel = |raw: RawConfig| parse(raw).map(|config| config.kernel);
        assert_eq!(
            kernel(RawConfig::default().with(KERNEL, " python3 ")).unwrap(),
            Some("python3".to_owned())
        );
        let error = kernel(RawConfig::default().with(KERNEL, "jupyter:python3")).unwrap_err();
        assert_eq!(error, "invalid configuration: IPYTHON_MCP_KERNEL (--kernel): \"jupyter:python3\" needs IPYTHON_MCP_JUPYTER_URL (the server to run it on)");
        let remote = RawConfig::default().with(JUPYTER_URL, "http://127.0.0.1:1");
        assert_eq!(
            kernel(remote.clone().with(KERNEL, "jupyter-kernel:6f1c-22")).unwrap(),
            Some("jupyter-kernel:6f1c-22".to_owned())
        );
        for bad in ["jupyter:", "jupyter:../x", "jupyter-kernel:a/b"] {
            let error = kernel(remote.clone().with(KERNEL, bad)).unwrap_err();
            assert!(error.contains("IPYTHON_MCP_KERNEL"), "{error}");
        }
        assert!(kernel(RawConfig::default().with(KERNEL, "  ")).is_err());
    }
}
