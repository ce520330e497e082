//! The sandboxed kernels' only way out under a network allowlist: an HTTP proxy on loopback
//! (`CONNECT host:port` for TLS, absolute-form requests for plain HTTP) that lets the listed
//! host names through and refuses the rest with a `403` saying why. The kernels' sandbox lets
//! them connect to its port and nowhere else, and their `HTTP(S)_PROXY` point here
//! (docs/src/sandbox.md). Each distinct allowlist (the server's, a principal's own) has a
//! proxy of its own.
//!
//! It logs metadata only: the host, the port, and whether it was let through.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// Longest request head read before the request is refused.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// How long a client has to send its request head, and an upstream to accept.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The running proxies' ports, one per distinct allowlist (the server's, and each principal's
/// own): a kernel may connect to its own proxy's port alone, so one principal's kernels never go
/// out through another's list.
static PORTS: std::sync::Mutex<Vec<(Vec<String>, u16)>> = std::sync::Mutex::new(Vec::new());

/// The port of the proxy that lets `hosts` through, if one runs.
pub fn port(hosts: &[String]) -> Option<u16> {
    let key = key(hosts);
    let ports = PORTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    ports
        .iter()
        .find_map(|(listed, port)| (*listed == key).then_some(*port))
}

/// Starts the proxy for the configuration's allowlist, if it has one and none runs yet; before
/// any kernel under it starts. Must be called within the runtime.
pub fn ensure(config: &ipython_mcp_config::Config) -> std::io::Result<()> {
    let ipython_mcp_config::SandboxNetwork::Allow(hosts) = &config.sandbox.network else {
        return Ok(());
    };
    let key = key(hosts);
    let mut ports = PORTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !ports.iter().any(|(listed, _)| *listed == key) {
        let port = start(key.clone())?;
        ports.push((key, port));
    }
    Ok(())
}

/// An allowlist in one spelling: the same hosts in any order share a proxy.
fn key(hosts: &[String]) -> Vec<String> {
    let mut key = hosts.to_vec();
    key.sort();
    key.dedup();
    key
}

/// Starts a proxy on `127.0.0.1` (an unused port), letting `hosts` through; returns its port.
fn start(hosts: Vec<String>) -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let port = listener.local_addr()?.port();
    let count = hosts.len();
    let hosts = Arc::new(hosts);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of descriptors, say: try again shortly rather than spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let hosts = Arc::clone(&hosts);
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                if let Err(error) = relay(stream, &hosts).await {
                    tracing::debug!(%error, "proxy connection ended");
                }
            });
        }
    });
    tracing::info!(
        port,
        hosts = count,
        "kernel network proxy listening on loopback"
    );
    Ok(port)
}

/// Whether `host` is let through: listed exactly, or under a listed `*.domain`.
pub fn allowed(hosts: &[String], host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    hosts.iter().any(|entry| match entry.strip_prefix("*.") {
        Some(domain) => host
            .strip_suffix(domain)
            .is_some_and(|rest| rest.ends_with('.')),
        None => *entry == host,
    })
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    host: String,
    port: u16,
    /// `CONNECT`: a tunnel; otherwise the request line to send upstream (origin-form).
    tunnel: bool,
    request_line: String,
}

/// Reads the request head and what follows it in the same reads.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<(Vec<u8>, usize)>> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            return Ok(Some((buffer, end + 4)));
        }
        if buffer.len() > MAX_HEAD_BYTES {
            return Ok(None);
        }
    }
}

/// The target of a request line (`CONNECT host:443 HTTP/1.1`, `GET http://host/path HTTP/1.1`).
fn target(line: &str) -> Option<Target> {
    let mut parts = line.split(' ');
    let (method, uri, version) = (parts.next()?, parts.next()?, parts.next()?);
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_host_port(uri, 443)?;
        return Some(Target {
            host,
            port,
            tunnel: true,
            request_line: String::new(),
        });
    }
    let rest = uri.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let (host, port) = split_host_port(authority, 80)?;
    Some(Target {
        host,
        port,
        tunnel: false,
        request_line: format!("{method} {path} {version}"),
    })
}

fn split_host_port(authority: &str, default: u16) -> Option<(String, u16)> {
    let authority = authority.rsplit('@').next()?;
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(']') || host.ends_with(']') => {
            (host, port.parse().ok()?)
        }
        _ => (authority, default),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port))
}

async fn relay(mut client: TcpStream, hosts: &[String]) -> std::io::Result<()> {
    let Ok(Ok(Some((buffer, head_end)))) =
        tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await
    else {
        return refuse(
            &mut client,
            "400 Bad Request",
            "the request head is missing or too long",
        )
        .await;
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let Some(target) = head.lines().next().and_then(target) else {
        return refuse(
            &mut client,
            "400 Bad Request",
            "only CONNECT and absolute http:// requests go through this proxy",
        )
        .await;
    };
    if !allowed(hosts, &target.host) {
        tracing::info!(host = %target.host, port = target.port, "kernel network: refused");
        let reason = format!(
            "{} is not in the kernels' network allowlist ({}, or the principal's network= in the principals file); the allowed hosts are {}",
            target.host,
            ipython_mcp_config::SANDBOX_NETWORK.env,
            hosts.join(", ")
        );
        return refuse(&mut client, "403 Forbidden", &reason).await;
    }
    let upstream = tokio::time::timeout(
        HEAD_TIMEOUT,
        TcpStream::connect((target.host.as_str(), target.port)),
    )
    .await;
    let Ok(Ok(mut upstream)) = upstream else {
        return refuse(
            &mut client,
            "502 Bad Gateway",
            "the host did not accept a connection",
        )
        .await;
    };
    tracing::info!(host = %target.host, port = target.port, "kernel network: let through");
    if target.tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await?;
    } else {
        // The request in origin form, its other header lines as they came.
        let rest_of_head = head.split_once("\r\n").map_or("", |(_, rest)| rest);
        upstream
            .write_all(format!("{}\r\n{rest_of_head}", target.request_line).as_bytes())
            .await?;
    }
    upstream.write_all(&buffer[head_end..]).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

async fn refuse(client: &mut TcpStream, status: &str, reason: &str) -> std::io::Result<()> {
    let body = format!("ipython-mcp: {reason}\n");
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(response.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_let_through_exactly_or_under_a_listed_domain() {
        let hosts = vec!["pypi.org".to_owned(), "*.pythonhosted.org".to_owned()];
        assert!(allowed(&hosts, "pypi.org"));
        assert!(allowed(&hosts, "PyPI.org."));
        assert!(allowed(&hosts, "files.pythonhosted.org"));
        assert!(!allowed(&hosts, "pythonhosted.org"));
        assert!(!allowed(&hosts, "evilpythonhosted.org"));
        assert!(!allowed(&hosts, "pypi.org.evil.com"));
        assert!(!allowed(&hosts, "example.com"));
    }

    #[test]
    fn request_lines_name_their_target() {
        assert_eq!(
            target("CONNECT files.pythonhosted.org:443 HTTP/1.1"),
            Some(Target {
                host: "files.pythonhosted.org".into(),
                port: 443,
                tunnel: true,
                request_line: String::new(),
            })
        );
        assert_eq!(
            target("GET http://Example.com:8080/a?b HTTP/1.1"),
            Some(Target {
                host: "example.com".into(),
                port: 8080,
                tunnel: false,
                request_line: "GET /a?b HTTP/1.1".into(),
            })
        );
        let bare = target("GET http://example.com HTTP/1.1").expect("target");
        assert_eq!(
            (bare.port, bare.request_line.as_str()),
            (80, "GET / HTTP/1.1")
        );
        // A user part never decides the host.
        assert_eq!(
            target("GET http://pypi.org@evil.com/ HTTP/1.1").map(|t| t.host),
            Some("evil.com".into())
        );
        assert_eq!(target("GET /relative HTTP/1.1"), None);
        assert_eq!(target("GET ftp://x/ HTTP/1.1"), None);
    }
}
