//! One entry of a kernel network allowlist: a host name, `*.domain` for the names under a
//! domain, or an IP address, each with an optional `:port`. Entries are parsed here, where the
//! list is read, so a bad one is a configuration error naming it; the server's proxy parses the
//! same canonical spelling back (docs/src/sandbox.md, "Network").

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The ports an entry without a port of its own allows: plain HTTP and HTTPS.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// What an allowlist entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// This DNS name exactly (lowercase, without a trailing dot).
    Name(String),
    /// Any name with one label or more before this domain (`*.example.com`: `a.example.com`,
    /// `a.b.example.com`), never the domain itself.
    Subdomains(String),
    /// This address, written as a literal (an IPv4-mapped IPv6 address as its IPv4 address).
    Address(IpAddr),
}

/// One allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    pub host: HostPattern,
    /// The one port it allows; `None`: [`DEFAULT_PORTS`].
    pub port: Option<u16>,
}

impl AllowedHost {
    /// Parses `name`, `*.domain`, `1.2.3.4` or `[::1]`, each optionally followed by `:port`.
    /// The error says what is wrong, without repeating the entry.
    pub fn parse(text: &str) -> Result<Self, String> {
        const HOST: &str = "must be on, off or comma-separated host names (*.example.com for subdomains, an IP address, host:port for a port besides 80 and 443)";
        let (host, port) = if let Some(bracketed) = text.strip_prefix('[') {
            let (inside, rest) = bracketed.split_once(']').ok_or(HOST)?;
            let address: Ipv6Addr = inside.parse().map_err(|_| HOST)?;
            let port = match rest {
                "" => None,
                _ => Some(rest.strip_prefix(':').ok_or(HOST)?),
            };
            (
                HostPattern::Address(IpAddr::V6(address).to_canonical()),
                port,
            )
        } else if let Ok(address) = text.parse::<Ipv6Addr>() {
            (
                HostPattern::Address(IpAddr::V6(address).to_canonical()),
                None,
            )
        } else {
            let (host, port) = match text.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (text, None),
            };
            let pattern = if let Some(domain) = host.strip_prefix("*.") {
                HostPattern::Subdomains(host_name(domain).ok_or(HOST)?)
            } else if let Ok(address) = host.parse::<Ipv4Addr>() {
                HostPattern::Address(IpAddr::V4(address))
            } else {
                HostPattern::Name(host_name(host).ok_or(HOST)?)
            };
            (pattern, port)
        };
        let port = port
            .map(|port| {
                port_number(port)
                    .ok_or("has a bad port: a port is a number from 1 to 65535 (no wildcards)")
            })
            .transpose()?;
        Ok(AllowedHost { host, port })
    }

    /// Whether it lets connections to `port` through.
    pub fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(listed) => listed == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }
}

/// The canonical spelling, which [`AllowedHost::parse`] reads back as the same entry.
impl std::fmt::Display for AllowedHost {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            HostPattern::Name(name) => formatter.write_str(name)?,
            HostPattern::Subdomains(domain) => write!(formatter, "*.{domain}")?,
            HostPattern::Address(IpAddr::V4(address)) => write!(formatter, "{address}")?,
            HostPattern::Address(IpAddr::V6(address)) => write!(formatter, "[{address}]")?,
        }
        match self.port {
            Some(port) => write!(formatter, ":{port}"),
            None => Ok(()),
        }
    }
}

/// A port written as decimal digits alone, 1 to 65535.
pub fn port_number(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|port| *port != 0)
}

/// `text` as a DNS host name in one spelling (lowercase, one trailing dot dropped), or `None`
/// when it is not one: each label 1 to 63 letters, digits or hyphens, not starting or ending
/// with a hyphen, 253 characters in all, and a last label that is not all digits (`127.1` and
/// `1.2.3` are addresses to a resolver, not names).
pub fn host_name(text: &str) -> Option<String> {
    let name = text.strip_suffix('.').unwrap_or(text);
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
        })
        && !name
            .rsplit('.')
            .next()
            .is_some_and(|last| last.bytes().all(|byte| byte.is_ascii_digit()));
    valid.then(|| name.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_to_one_spelling_or_say_what_is_wrong() {
        for (text, canonical) in [
            ("PyPI.org", "pypi.org"),
            ("pypi.org.", "pypi.org"),
            ("*.PythonHosted.org", "*.pythonhosted.org"),
            ("pypi.org:8443", "pypi.org:8443"),
            ("*.example.com:22", "*.example.com:22"),
            ("localhost", "localhost"),
            ("127.0.0.1", "127.0.0.1"),
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("[::1]", "[::1]"),
            ("::1", "[::1]"),
            ("[FD00::1]:8080", "[fd00::1]:8080"),
            ("[::ffff:10.0.0.1]:80", "10.0.0.1:80"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ] {
            let entry = AllowedHost::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"));
            assert_eq!(entry.to_string(), canonical, "{text}");
            assert_eq!(
                AllowedHost::parse(canonical),
                Ok(entry),
                "{canonical} reads back"
            );
        }
        let bad_host = "must be on, off or comma-separated host names";
        let bad_port = "has a bad port";
        for (text, problem) in [
            ("", bad_host),
            ("*.", bad_host),
            ("*", bad_host),
            ("*.*.example.com", bad_host),
            ("a.*.example.com", bad_host),
            ("example..com", bad_host),
            (".example.com", bad_host),
            ("pypi.org..", bad_host),
            ("-x.example.com", bad_host),
            ("user@pypi.org", bad_host),
            ("pypi%2eorg", bad_host),
            ("http://pypi.org", bad_port),
            ("a b", bad_host),
            ("127.1", bad_host),
            ("1.2.3", bad_host),
            ("*.10.0.0.1", bad_host),
            ("[::1", bad_host),
            ("[::1]8080", bad_host),
            ("[fe80::1%eth0]", bad_host),
            ("[example.com]", bad_host),
            ("::1:8080:", bad_host),
            ("pypi.org:", bad_port),
            ("pypi.org:0", bad_port),
            ("pypi.org:65536", bad_port),
            ("pypi.org:*", bad_port),
            ("pypi.org:+443", bad_port),
            ("pypi.org:443:443", bad_port),
            ("[::1]:http", bad_port),
        ] {
            let error = AllowedHost::parse(text).expect_err(text);
            assert!(error.starts_with(problem), "{text}: {error}");
        }
    }

    #[test]
    fn an_entry_without_a_port_allows_http_and_https_alone() {
        let plain = AllowedHost::parse("pypi.org").expect("entry");
        assert!(plain.allows_port(443) && plain.allows_port(80));
        assert!(!plain.allows_port(22) && !plain.allows_port(8443));
        let ported = AllowedHost::parse("pypi.org:8443").expect("entry");
        assert!(ported.allows_port(8443));
        assert!(!ported.allows_port(443) && !ported.allows_port(80));
    }
}
