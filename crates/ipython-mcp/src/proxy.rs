//! The sandboxed kernels' only way out under a network allowlist: an HTTP proxy on loopback
//! (`CONNECT host:port` for TLS, absolute-form requests for plain HTTP) that lets the listed
//! hosts through and refuses the rest with a `403` saying why. The kernels' sandbox lets them
//! connect to its port and nowhere else, and their `HTTP(S)_PROXY` point here
//! (docs/src/sandbox.md). Each distinct allowlist (the server's, a principal's own) has a
//! proxy of its own. It also listens on a Unix socket in the server's private directory: a
//! kernel in a network namespace has no way to the host's loopback, and its launcher forwards
//! the same port inside the namespace to that socket.
//!
//! A listed host is reached on ports 80 and 443 unless its entry names a port; `*.domain`
//! needs a label before the domain. A name is resolved once, and an address that is not public
//! (loopback, private, link-local, …) is reached only when it is listed itself, so a listed
//! name cannot be pointed at a service on the machine or its network; the connection goes to
//! the very address checked.
//!
//! It logs metadata only: the host, the port, and whether it was let through (or why not).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipython_mcp_config::{AllowedHost, HostPattern};

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream, UnixListener};

/// Longest request head read before the request is refused.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// How long a client has to send its request head, and an upstream to accept.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The running proxies' ports, one per distinct allowlist (the server's, and each principal's
/// own): a kernel may connect to its own proxy's port alone, so one principal's kernels never go
/// out through another's list.
static PORTS: std::sync::Mutex<Vec<(Vec<String>, Listening)>> = std::sync::Mutex::new(Vec::new());

/// Where a proxy listens: its loopback port, and its Unix socket where one could be made.
#[derive(Debug, Clone)]
pub struct Listening {
    pub port: u16,
    pub socket: Option<std::path::PathBuf>,
}

/// Where the proxy that lets `hosts` through listens, if one runs.
pub fn port(hosts: &[String]) -> Option<Listening> {
    let key = key(hosts);
    let ports = PORTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    ports
        .iter()
        .find_map(|(listed, listening)| (*listed == key).then(|| listening.clone()))
}

/// Starts the proxy for the configuration's allowlist, if it has one and none runs yet; before
/// any kernel under it starts, its Unix socket in `dir` (the server's private directory). Must
/// be called within the runtime.
pub fn ensure(config: &ipython_mcp_config::Config, dir: &std::path::Path) -> std::io::Result<()> {
    let ipython_mcp_config::SandboxNetwork::Allow(hosts) = &config.sandbox.network else {
        return Ok(());
    };
    let key = key(hosts);
    let mut ports = PORTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !ports.iter().any(|(listed, _)| *listed == key) {
        let listening = start(key.clone(), dir)?;
        ports.push((key, listening));
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

/// Starts a proxy on `127.0.0.1` (an unused port) and on a Unix socket in `dir`, letting
/// `hosts` through; returns where it listens.
fn start(hosts: Vec<String>, dir: &std::path::Path) -> std::io::Result<Listening> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let port = listener.local_addr()?.port();
    let count = hosts.len();
    let list = Arc::new(Allowlist::new(&hosts));
    let socket = dir.join(format!("proxy-{port}.sock"));
    // Left by a server that had the same port before (the directory is ours alone).
    let _ = std::fs::remove_file(&socket);
    let socket = match UnixListener::bind(&socket) {
        Ok(unix) => {
            let list = Arc::clone(&list);
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = unix.accept().await else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let list = Arc::clone(&list);
                    tokio::spawn(async move {
                        if let Err(error) = relay(stream, &list).await {
                            tracing::debug!(%error, "proxy connection ended");
                        }
                    });
                }
            });
            Some(socket)
        }
        Err(error) => {
            tracing::warn!(%error, "the kernel network proxy has no Unix socket: kernels in network namespaces get no network");
            None
        }
    };
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of descriptors, say: try again shortly rather than spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let list = Arc::clone(&list);
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                if let Err(error) = relay(stream, &list).await {
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
    Ok(Listening { port, socket })
}

/// An allowlist as the proxy reads it.
struct Allowlist {
    entries: Vec<AllowedHost>,
    /// The list as configured, for refusals.
    spelled: String,
}

impl Allowlist {
    fn new(hosts: &[String]) -> Self {
        // The configuration parsed and wrote each entry in this spelling; one that does not
        // read back lets nothing through rather than something else.
        let entries = hosts
            .iter()
            .filter_map(|host| AllowedHost::parse(host).ok())
            .collect();
        Allowlist {
            entries,
            spelled: hosts.join(", "),
        }
    }

    /// Whether a request for `host:port` may go on to its addresses: `host` matches an entry
    /// that allows `port`.
    fn check_request(&self, host: &Host, port: u16) -> Result<(), Refusal> {
        let mut matching = self
            .entries
            .iter()
            .filter(|entry| matches(&entry.host, host))
            .peekable();
        if matching.peek().is_none() {
            return Err(Refusal::NotListed);
        }
        if !matching.any(|entry| entry.allows_port(port)) {
            return Err(Refusal::Port);
        }
        Ok(())
    }

    /// Whether the proxy may connect to `address:port`: a public address, or one listed as a
    /// literal with that port (so a listed name that resolves to a local service, by design or
    /// by DNS rebinding, reaches it only if its address is listed as well).
    fn check_address(&self, address: IpAddr, port: u16) -> Result<(), Refusal> {
        let address = address.to_canonical();
        let Some(kind) = not_public(address) else {
            return Ok(());
        };
        let listed = self
            .entries
            .iter()
            .any(|entry| entry.host == HostPattern::Address(address) && entry.allows_port(port));
        if listed {
            Ok(())
        } else {
            Err(Refusal::Private { address, kind })
        }
    }
}

/// Whether `pattern` names `host`. A wildcard needs one label or more before its domain; names
/// never match addresses, nor addresses names.
fn matches(pattern: &HostPattern, host: &Host) -> bool {
    match (pattern, host) {
        (HostPattern::Name(listed), Host::Name(name)) => listed == name,
        (HostPattern::Subdomains(domain), Host::Name(name)) => name
            .strip_suffix(domain.as_str())
            .and_then(|rest| rest.strip_suffix('.'))
            .is_some_and(|labels| !labels.is_empty()),
        (HostPattern::Address(listed), Host::Address(address)) => listed == address,
        _ => false,
    }
}

/// Why a request is refused (`403`).
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    NotListed,
    /// The host is listed, not for this port.
    Port,
    /// It resolves to an address that is not public and not listed.
    Private {
        address: IpAddr,
        kind: &'static str,
    },
}

impl Refusal {
    fn reason(&self, host: &Host, port: u16, list: &Allowlist) -> String {
        match self {
            Refusal::NotListed => format!(
                "{host} is not in the kernels' network allowlist ({}, or the principal's network= in the principals file); the allowed hosts are {}",
                ipython_mcp_config::SANDBOX_NETWORK.env,
                list.spelled
            ),
            Refusal::Port => format!(
                "port {port} is not allowed for {host}: a listed host is reached on ports 80 and 443 unless the list names {host}:{port}"
            ),
            Refusal::Private { address, kind } => format!(
                "{host} resolves to {address}, a {kind} address, which the proxy reaches only if the list names it ({})",
                Host::Address(*address).with_port(port)
            ),
        }
    }

    /// A word for the log.
    fn label(&self) -> &'static str {
        match self {
            Refusal::NotListed => "not listed",
            Refusal::Port => "port not allowed",
            Refusal::Private { .. } => "private address",
        }
    }
}

/// What kind of address `address` (canonical: IPv4-mapped as IPv4) is when a service on the
/// machine or its networks may sit behind it: loopback, private networks, link-local, shared
/// (carrier-grade NAT), multicast, unspecified and the reserved ranges. IPv6 forms that carry
/// an IPv4 address (compatible, NAT64, 6to4) are judged by it. The documentation and
/// benchmarking ranges are let through: they reach nothing local, and some resolvers (fake-IP
/// DNS, sandboxed networks) hand them out for every name.
fn not_public(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(address) => not_public_v4(address),
        IpAddr::V6(address) => {
            let segments = address.segments();
            let embedded = |high: u32, low: u32| {
                let bits =
                    (u32::from(segments[high as usize]) << 16) | u32::from(segments[low as usize]);
                Ipv4Addr::from(bits)
            };
            if address.is_unspecified() {
                Some("unspecified")
            } else if address.is_loopback() {
                Some("loopback")
            } else if segments[..6] == [0; 6] {
                // IPv4-compatible (deprecated): `::a.b.c.d`.
                Some(not_public_v4(embedded(6, 7)).unwrap_or("IPv4-compatible"))
            } else if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                // NAT64: the gateway connects to the IPv4 address it carries.
                not_public_v4(embedded(6, 7))
            } else if segments[0] == 0x2002 {
                // 6to4: the IPv4 address is in the second and third segments.
                not_public_v4(embedded(1, 2))
            } else if segments[0] == 0x64 && segments[1] == 0xff9b && segments[2] == 1 {
                Some("local NAT64")
            } else if segments[..4] == [0x100, 0, 0, 0] {
                Some("discard-only")
            } else if segments[0] & 0xfe00 == 0xfc00 {
                Some("unique local")
            } else if segments[0] & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if segments[0] & 0xffc0 == 0xfec0 {
                Some("site-local")
            } else if segments[0] & 0xff00 == 0xff00 {
                Some("multicast")
            } else {
                None
            }
        }
    }
}

fn not_public_v4(address: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = address.octets();
    match (a, b, c) {
        (0, _, _) => Some("this-network"),
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => Some("private"),
        (100, 64..=127, _) => Some("shared (carrier-grade NAT)"),
        (127, _, _) => Some("loopback"),
        (169, 254, _) => Some("link-local"),
        (192, 0, 0) => Some("protocol-assignment"),
        (224..=239, _, _) => Some("multicast"),
        (240..=255, _, _) => Some("reserved"),
        _ => None,
    }
}

/// A request's host: a DNS name in one spelling, or an address literal.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Name(String),
    Address(IpAddr),
}

impl Host {
    /// `text` as a request names its host: a name, an IPv4 address or a bracketed IPv6 address
    /// (no zone). Anything else (a user part, percent-encoding, an empty label) is `None`.
    fn parse(text: &str) -> Option<Host> {
        if let Some(inside) = text.strip_prefix('[') {
            let address: Ipv6Addr = inside.strip_suffix(']')?.parse().ok()?;
            return Some(Host::Address(IpAddr::V6(address).to_canonical()));
        }
        if let Ok(address) = text.parse::<Ipv4Addr>() {
            return Some(Host::Address(IpAddr::V4(address)));
        }
        ipython_mcp_config::host_name(text).map(Host::Name)
    }

    fn with_port(&self, port: u16) -> String {
        format!("{self}:{port}")
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(name) => formatter.write_str(name),
            Host::Address(IpAddr::V4(address)) => write!(formatter, "{address}"),
            Host::Address(IpAddr::V6(address)) => write!(formatter, "[{address}]"),
        }
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    host: Host,
    port: u16,
    /// `CONNECT`: a tunnel; otherwise the request line to send upstream (origin-form).
    tunnel: bool,
    request_line: String,
}

/// Reads the request head and what follows it in the same reads.
async fn read_head(
    stream: &mut (impl AsyncRead + Unpin),
) -> std::io::Result<Option<(Vec<u8>, usize)>> {
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
    if parts.next().is_some() {
        return None;
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_host_port(uri, 443)?;
        return Some(Target {
            host,
            port,
            tunnel: true,
            request_line: String::new(),
        });
    }
    let rest = uri
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
        .map(|_| &uri[7..])?;
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let path = path.split('#').next().unwrap_or_default();
    let path = match path.strip_prefix('?') {
        Some(_) => format!("/{path}"),
        None if path.is_empty() => "/".to_owned(),
        None => path.to_owned(),
    };
    let (host, port) = split_host_port(authority, 80)?;
    Some(Target {
        host,
        port,
        tunnel: false,
        request_line: format!("{method} {path} {version}"),
    })
}

/// `host[:port]`, the port `default` when none is given. A user part, an empty port or one
/// that is not decimal digits, and a host [`Host::parse`] refuses are `None`.
fn split_host_port(authority: &str, default: u16) -> Option<(Host, u16)> {
    let (host, port) = match authority.rfind([':', ']']) {
        Some(at) if authority.as_bytes()[at] == b':' => (
            &authority[..at],
            ipython_mcp_config::port_number(&authority[at + 1..])?,
        ),
        _ => (authority, default),
    };
    Some((Host::parse(host)?, port))
}

async fn relay(
    mut client: impl AsyncRead + AsyncWrite + Unpin,
    list: &Allowlist,
) -> std::io::Result<()> {
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
            "only CONNECT host:port and absolute http:// requests go through this proxy, their host a DNS name, an IPv4 address or a bracketed IPv6 address (no user part, percent-encoding or empty labels)",
        )
        .await;
    };
    let (host, port) = (&target.host, target.port);
    let refused = |refusal: Refusal| {
        tracing::info!(%host, port, why = refusal.label(), "kernel network: refused");
        refusal.reason(host, port, list)
    };
    if let Err(refusal) = list.check_request(host, port) {
        let reason = refused(refusal);
        return refuse(&mut client, "403 Forbidden", &reason).await;
    }
    // Resolved once: the proxy connects to the very addresses it checked, so a name whose
    // records change between the check and the connection (DNS rebinding) gains nothing.
    let addresses: Vec<SocketAddr> = match host {
        Host::Address(address) => vec![SocketAddr::new(*address, port)],
        Host::Name(name) => {
            match tokio::time::timeout(HEAD_TIMEOUT, tokio::net::lookup_host((name.as_str(), port)))
                .await
            {
                Ok(Ok(addresses)) => addresses.collect(),
                _ => Vec::new(),
            }
        }
    };
    if addresses.is_empty() {
        tracing::info!(%host, port, "kernel network: the host did not resolve");
        let reason = format!("{host} did not resolve to an address");
        return refuse(&mut client, "502 Bad Gateway", &reason).await;
    }
    let mut allowed = Vec::new();
    let mut first_refusal = None;
    for address in addresses {
        match list.check_address(address.ip(), port) {
            Ok(()) => allowed.push(address),
            Err(refusal) => {
                first_refusal.get_or_insert(refusal);
            }
        }
    }
    if allowed.is_empty() {
        let reason = refused(first_refusal.unwrap_or(Refusal::NotListed));
        return refuse(&mut client, "403 Forbidden", &reason).await;
    }
    let mut upstream = None;
    for address in allowed {
        if let Ok(Ok(stream)) =
            tokio::time::timeout(HEAD_TIMEOUT, TcpStream::connect(address)).await
        {
            upstream = Some(stream);
            break;
        }
    }
    let Some(mut upstream) = upstream else {
        return refuse(
            &mut client,
            "502 Bad Gateway",
            "the host did not accept a connection",
        )
        .await;
    };
    tracing::info!(%host, port, "kernel network: let through");
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

async fn refuse(
    client: &mut (impl AsyncWrite + Unpin),
    status: &str,
    reason: &str,
) -> std::io::Result<()> {
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

    fn list(hosts: &[&str]) -> Allowlist {
        let hosts: Vec<String> = hosts
            .iter()
            .map(|host| AllowedHost::parse(host).expect("entry").to_string())
            .collect();
        Allowlist::new(&hosts)
    }

    /// The host and port `authority` names, as a `CONNECT` gives them.
    fn host_port(authority: &str) -> (Host, u16) {
        split_host_port(authority, 443).unwrap_or_else(|| panic!("{authority} parses"))
    }

    #[test]
    fn requests_match_listed_names_wildcards_addresses_and_ports() {
        let hosts = list(&[
            "pypi.org",
            "*.pythonhosted.org",
            "example.com:8443",
            "*.internal.test:22",
            "203.0.113.7",
            "[2001:db8::7]:8080",
        ]);
        use Refusal::{NotListed, Port};
        for (authority, expect) in [
            ("pypi.org:443", Ok(())),
            ("PyPI.org.:443", Ok(())),
            ("pypi.org:80", Ok(())),
            ("pypi.org:22", Err(Port)),
            ("pypi.org:8443", Err(Port)),
            ("files.pythonhosted.org:443", Ok(())),
            ("a.b.pythonhosted.org:443", Ok(())),
            ("pythonhosted.org:443", Err(NotListed)),
            ("evilpythonhosted.org:443", Err(NotListed)),
            ("pypi.org.evil.com:443", Err(NotListed)),
            ("example.com:8443", Ok(())),
            ("example.com:443", Err(Port)),
            ("www.example.com:8443", Err(NotListed)),
            ("git.internal.test:22", Ok(())),
            ("git.internal.test:443", Err(Port)),
            ("203.0.113.7:443", Ok(())),
            ("203.0.113.7:22", Err(Port)),
            ("[::ffff:203.0.113.7]:443", Ok(())),
            ("203.0.113.8:443", Err(NotListed)),
            ("[2001:db8::7]:8080", Ok(())),
            ("[2001:db8::7]:443", Err(Port)),
            ("localhost:443", Err(NotListed)),
        ] {
            let (host, port) = host_port(authority);
            assert_eq!(hosts.check_request(&host, port), expect, "{authority}");
        }
        // Such a name never gets this far (see the next test), and would not match either.
        let domain = HostPattern::Subdomains("pythonhosted.org".into());
        assert!(!matches(&domain, &Host::Name(".pythonhosted.org".into())));
    }

    #[test]
    fn hosts_a_matcher_could_be_tricked_by_are_refused_before_matching() {
        for authority in [
            ".pythonhosted.org:443",
            "..pythonhosted.org:443",
            "a..pythonhosted.org:443",
            "pypi.org..:443",
            "user@pypi.org:443",
            "pypi.org@evil.com:443",
            "pypi.org:443@evil.com:443",
            "pypi%2eorg:443",
            "pypi.org%00.evil.com:443",
            "pypi.org:",
            "pypi.org:0",
            "pypi.org:+443",
            "pypi.org:65536",
            "pypi.org:*",
            "pypi.org :443",
            "[::1:443",
            "::1:443",
            "[fe80::1%25eth0]:443",
            "[pypi.org]:443",
            "127.1:443",
            "2130706433.0:443",
            "*.pythonhosted.org:443",
            "-pypi.org:443",
            ":443",
        ] {
            assert_eq!(split_host_port(authority, 443), None, "{authority}");
        }
    }

    #[test]
    fn addresses_that_are_not_public_are_reached_only_when_listed() {
        let hosts = list(&[
            "localhost:8080",
            "127.0.0.1:8080",
            "[fd00::5]",
            "10.1.2.3:5432",
        ]);
        for (address, port, expect) in [
            // Public.
            ("93.184.216.34", 443, None),
            ("8.8.8.8", 80, None),
            ("[2606:4700::1111]", 443, None),
            ("100.63.255.255", 443, None),
            ("100.128.0.0", 443, None),
            ("172.32.0.1", 443, None),
            ("[2002:5db8:d822::1]", 443, None),
            ("[64:ff9b::5db8:d822]", 443, None),
            // Not local either, and handed out for every name by some resolvers (fake-IP DNS,
            // test networks).
            ("192.0.2.1", 443, None),
            ("203.0.113.80", 443, None),
            ("198.18.0.1", 443, None),
            ("[2001:db8::1]", 443, None),
            // Listed with this port.
            ("127.0.0.1", 8080, None),
            ("[::ffff:127.0.0.1]", 8080, None),
            ("[fd00::5]", 443, None),
            ("10.1.2.3", 5432, None),
            // Not public, not listed (or not with this port).
            ("127.0.0.1", 443, Some("loopback")),
            ("127.0.0.2", 8080, Some("loopback")),
            ("10.1.2.3", 443, Some("private")),
            ("[fd00::5]", 22, Some("unique local")),
            ("0.0.0.0", 80, Some("this-network")),
            ("0.1.2.3", 80, Some("this-network")),
            ("10.0.0.1", 80, Some("private")),
            ("172.16.0.1", 80, Some("private")),
            ("172.31.255.255", 80, Some("private")),
            ("192.168.1.1", 80, Some("private")),
            ("100.64.0.1", 80, Some("shared (carrier-grade NAT)")),
            ("100.127.255.255", 80, Some("shared (carrier-grade NAT)")),
            ("169.254.169.254", 80, Some("link-local")),
            ("192.0.0.1", 80, Some("protocol-assignment")),
            ("224.0.0.1", 80, Some("multicast")),
            ("240.0.0.1", 80, Some("reserved")),
            ("255.255.255.255", 80, Some("reserved")),
            ("[::]", 80, Some("unspecified")),
            ("[::1]", 80, Some("loopback")),
            ("[::ffff:127.0.0.1]", 80, Some("loopback")),
            ("[::ffff:169.254.169.254]", 80, Some("link-local")),
            ("[::ffff:10.0.0.1]", 80, Some("private")),
            ("[::127.0.0.1]", 80, Some("loopback")),
            ("[::5db8:d822]", 80, Some("IPv4-compatible")),
            ("[64:ff9b::7f00:1]", 80, Some("loopback")),
            ("[64:ff9b::a9fe:a9fe]", 80, Some("link-local")),
            ("[64:ff9b:1::1]", 80, Some("local NAT64")),
            ("[2002:7f00:1::1]", 80, Some("loopback")),
            ("[2002:c0a8:101::1]", 80, Some("private")),
            ("[100::1]", 80, Some("discard-only")),
            ("[fc00::1]", 80, Some("unique local")),
            ("[fdff::1]", 80, Some("unique local")),
            ("[fe80::1]", 80, Some("link-local")),
            ("[febf::1]", 80, Some("link-local")),
            ("[fec0::1]", 80, Some("site-local")),
            ("[ff02::1]", 80, Some("multicast")),
        ] {
            let Some((Host::Address(ip), _)) = split_host_port(address, 0) else {
                panic!("{address} is an address");
            };
            let got = match hosts.check_address(ip, port) {
                Ok(()) => None,
                Err(Refusal::Private { kind, .. }) => Some(kind),
                Err(other) => panic!("{address}: {other:?}"),
            };
            assert_eq!(got, expect, "{address} port {port}");
        }
    }

    #[test]
    fn refusals_name_the_host_and_why() {
        let hosts = list(&["pypi.org", "localhost:8080"]);
        let pypi = Host::Name("pypi.org".into());
        assert_eq!(
            Refusal::Port.reason(&pypi, 22, &hosts),
            "port 22 is not allowed for pypi.org: a listed host is reached on ports 80 and 443 unless the list names pypi.org:22"
        );
        let localhost = Host::Name("localhost".into());
        let refusal = hosts
            .check_address("127.0.0.1".parse().expect("ip"), 8080)
            .expect_err("loopback");
        assert_eq!(
            refusal.reason(&localhost, 8080, &hosts),
            "localhost resolves to 127.0.0.1, a loopback address, which the proxy reaches only if the list names it (127.0.0.1:8080)"
        );
        let evil = Host::Name("evil.com".into());
        assert_eq!(
            Refusal::NotListed.reason(&evil, 443, &hosts),
            format!(
                "evil.com is not in the kernels' network allowlist ({}, or the principal's network= in the principals file); the allowed hosts are pypi.org, localhost:8080",
                ipython_mcp_config::SANDBOX_NETWORK.env
            )
        );
    }

    #[test]
    fn request_lines_name_their_target() {
        assert_eq!(
            target("CONNECT files.pythonhosted.org:443 HTTP/1.1"),
            Some(Target {
                host: Host::Name("files.pythonhosted.org".into()),
                port: 443,
                tunnel: true,
                request_line: String::new(),
            })
        );
        assert_eq!(
            target("GET http://Example.com:8080/a?b HTTP/1.1"),
            Some(Target {
                host: Host::Name("example.com".into()),
                port: 8080,
                tunnel: false,
                request_line: "GET /a?b HTTP/1.1".into(),
            })
        );
        for (line, port, request_line) in [
            ("GET http://example.com HTTP/1.1", 80, "GET / HTTP/1.1"),
            ("GET HTTP://example.com?q HTTP/1.1", 80, "GET /?q HTTP/1.1"),
            ("GET http://example.com/p#f HTTP/1.1", 80, "GET /p HTTP/1.1"),
            ("GET http://[::1]:8080/ HTTP/1.1", 8080, "GET / HTTP/1.1"),
        ] {
            let parsed = target(line).unwrap_or_else(|| panic!("{line}"));
            assert_eq!(
                (parsed.port, parsed.request_line.as_str()),
                (port, request_line),
                "{line}"
            );
        }
        // The authority ends where the path or query starts, so what follows never names the
        // host that is checked and connected to.
        assert_eq!(
            target("GET http://evil.com?@pypi.org/ HTTP/1.1").map(|parsed| parsed.host),
            Some(Host::Name("evil.com".into()))
        );
        // A user part never decides the host: such a request is refused.
        for line in [
            "GET http://pypi.org@evil.com/ HTTP/1.1",
            "GET http://pypi.org:22@evil.com/ HTTP/1.1",
            "GET http://.pythonhosted.org/ HTTP/1.1",
            "GET /relative HTTP/1.1",
            "GET ftp://x/ HTTP/1.1",
            "CONNECT pypi.org:443 HTTP/1.1 extra",
        ] {
            assert_eq!(target(line), None, "{line}");
        }
    }
}
