//! The principals file: who may use the HTTP transport, each with a bearer token of their own
//! and, optionally, their own quotas.
//!
//! One principal per line, `NAME TOKEN [setting=N …]`: NAME is letters, digits, `_` or `-`;
//! TOKEN is the bearer token itself (at least [`Token::MIN_CHARS`] printable characters) or
//! `sha256:` and the 64 lowercase hex digits of its SHA-256, so the file need not hold the
//! secret; the optional settings override `max_kernels` and `max_pending_operations` for that
//! principal, `sandbox=workspace-write|read-only|off` and `network=on|off|host,…` its kernels'
//! sandbox, and `upstream_servers=/absolute/path` its own code-mode upstreams file. Blank lines and `#` comments are ignored. A problem names the line, never a token.

use sha2::{Digest as _, Sha256};

use crate::settings::{Setting, MAX_KERNELS, MAX_PENDING_OPERATIONS};
use crate::transport::Token;

/// Longest principal name: it becomes a directory name and appears in every log line.
pub const MAX_PRINCIPAL_NAME_CHARS: usize = 64;

/// Someone the HTTP transport serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: PrincipalName,
    pub credential: Credential,
    pub quotas: Quotas,
}

/// A principal's name: letters, digits, `_` or `-`, so it is safe as a directory name and in
/// a log line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PrincipalName(String);

impl PrincipalName {
    pub fn parse(text: &str) -> Result<PrincipalName, String> {
        if text.is_empty() || text.chars().count() > MAX_PRINCIPAL_NAME_CHARS {
            return Err(format!(
                "a principal's name has 1 to {MAX_PRINCIPAL_NAME_CHARS} characters"
            ));
        }
        if !text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(
                "a principal's name is letters, digits, `_` or `-` (it names a directory)"
                    .to_owned(),
            );
        }
        Ok(PrincipalName(text.to_owned()))
    }

    /// A principal named by an access token's claim, where `.` and `@` are common (an email,
    /// a host-qualified user): allowed too, except first, so the name is never `.` or `..`.
    pub fn from_claim(text: &str) -> Result<PrincipalName, String> {
        let plain: String = text.replace(['.', '@'], "_");
        PrincipalName::parse(&plain)?;
        if text.starts_with('.') {
            return Err("a principal's name does not start with `.`".to_owned());
        }
        Ok(PrincipalName(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PrincipalName {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

/// The SHA-256 of a principal's bearer token. Only the digest is kept, so a token given in
/// the clear is not held in memory past parsing, and its `Debug` shows nothing.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential([u8; 32]);

impl Credential {
    /// The credential a presented bearer token would match.
    pub fn of_token(token: &str) -> Credential {
        Credential(Sha256::digest(token.as_bytes()).into())
    }

    pub fn digest(&self) -> &[u8; 32] {
        &self.0
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Credential(<redacted>)")
    }
}

/// A principal's own bounds; `None` keeps the server-wide setting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quotas {
    pub max_kernels: Option<usize>,
    pub max_pending_operations: Option<usize>,
    /// The kernels' sandbox mode (set here, it is explicit: it fails closed).
    pub sandbox: Option<crate::limits::SandboxMode>,
    /// Whether the kernels reach the network.
    pub network: Option<crate::limits::SandboxNetwork>,
    /// Their own `mcpServers` file for code mode, instead of the server's.
    pub upstream_servers: Option<std::path::PathBuf>,
}

/// The per-principal sandbox words, besides the numeric settings.
const SANDBOX_WORDS: [&str; 3] = ["sandbox", "network", "upstream_servers"];

/// A problem in the principals file, at a line (1-based; 0 for the file as a whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrincipalsError {
    pub line: usize,
    pub problem: String,
}

impl std::fmt::Display for PrincipalsError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            0 => write!(formatter, "{}", self.problem),
            line => write!(formatter, "line {line}: {}", self.problem),
        }
    }
}

/// The settings a principal may override, by their names in the settings table.
const OVERRIDABLE: [Setting; 2] = [MAX_KERNELS, MAX_PENDING_OPERATIONS];

/// Reads the principals file's text: every principal, or the first problem.
pub fn parse_principals(text: &str) -> Result<Vec<Principal>, PrincipalsError> {
    let mut principals: Vec<Principal> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let at = |problem: String| PrincipalsError {
            line: index + 1,
            problem,
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let principal = parse_line(line).map_err(at)?;
        if let Some(known) = principals.iter().find(|known| {
            known
                .name
                .as_str()
                .eq_ignore_ascii_case(principal.name.as_str())
        }) {
            // Names are directories: on a file system that ignores case (macOS, Windows), two
            // names that differ only in case would share one.
            return Err(at(if known.name == principal.name {
                format!("{} is named twice", principal.name)
            } else {
                format!(
                    "{} and {} differ only in case: they would share a directory where case is ignored",
                    known.name, principal.name
                )
            }));
        }
        if let Some(known) = principals
            .iter()
            .find(|known| known.credential == principal.credential)
        {
            return Err(at(format!(
                "{} has the same token as {}: each principal needs its own",
                principal.name, known.name
            )));
        }
        principals.push(principal);
    }
    if principals.is_empty() {
        return Err(PrincipalsError {
            line: 0,
            problem: "names no principal (one per line: NAME TOKEN)".to_owned(),
        });
    }
    Ok(principals)
}

fn parse_line(line: &str) -> Result<Principal, String> {
    let mut words = line.split_whitespace();
    let name = PrincipalName::parse(words.next().unwrap_or_default())?;
    let credential = match words.next() {
        None => return Err(format!("{name} has no token (NAME TOKEN)")),
        Some(word) => credential(word).map_err(|problem| format!("{name}'s token {problem}"))?,
    };
    let mut quotas = Quotas::default();
    for word in words {
        let (key, value) = word.split_once('=').ok_or_else(|| {
            format!("after {name}'s token, only setting=N overrides may follow (one word each)")
        })?;
        if SANDBOX_WORDS.contains(&key) {
            sandbox_word(&mut quotas, &name, key, value)?;
            continue;
        }
        let Some(setting) = OVERRIDABLE.iter().find(|setting| setting.name == key) else {
            let known: Vec<&str> = OVERRIDABLE
                .iter()
                .map(|setting| setting.name)
                .chain(SANDBOX_WORDS)
                .collect();
            return Err(format!(
                "{name}: {:?} cannot be set per principal (these can: {})",
                crate::parse::bounded(key),
                known.join(", ")
            ));
        };
        let number = value
            .parse::<usize>()
            .ok()
            .filter(|number| *number > 0)
            .ok_or_else(|| {
                format!(
                    "{name}: {} must be a positive integer, got {:?}",
                    setting.name,
                    crate::parse::bounded(value)
                )
            })?;
        let slot = if setting.name == MAX_KERNELS.name {
            &mut quotas.max_kernels
        } else {
            &mut quotas.max_pending_operations
        };
        if slot.replace(number).is_some() {
            return Err(format!("{name}: {} is given twice", setting.name));
        }
    }
    if quotas
        .network
        .as_ref()
        .is_some_and(crate::limits::SandboxNetwork::confines)
        && quotas.sandbox == Some(crate::limits::SandboxMode::Off)
    {
        return Err(format!(
            "{name}: network other than on needs the sandbox, and sandbox=off"
        ));
    }
    Ok(Principal {
        name,
        credential,
        quotas,
    })
}

/// `sandbox=MODE`, `network=on|off|HOSTS` or `upstream_servers=PATH` for principal `name`.
fn sandbox_word(
    quotas: &mut Quotas,
    name: &PrincipalName,
    key: &str,
    value: &str,
) -> Result<(), String> {
    use crate::limits::SandboxMode;
    let refused = |allowed: &str| {
        format!(
            "{name}: {key} must be {allowed}, got {:?}",
            crate::parse::bounded(value)
        )
    };
    let twice = |was_set: bool| {
        if was_set {
            Err(format!("{name}: {key} is given twice"))
        } else {
            Ok(())
        }
    };
    if key == "upstream_servers" {
        let path = std::path::PathBuf::from(value);
        if !path.is_absolute() {
            return Err(refused("an absolute path"));
        }
        return twice(quotas.upstream_servers.replace(path).is_some());
    }
    if key == "sandbox" {
        let mode = match value {
            "workspace-write" => SandboxMode::WorkspaceWrite,
            "read-only" => SandboxMode::ReadOnly,
            "off" => SandboxMode::Off,
            _ => return Err(refused("workspace-write, read-only or off")),
        };
        twice(quotas.sandbox.replace(mode).is_some())
    } else {
        // The same words as the server's own setting: on, off, or an allowlist of host names
        // (the principal's kernels get a proxy of their own that lets those through).
        let network = crate::config::sandbox_network(value)
            .map_err(|error| format!("{name}: network {error}"))?;
        twice(quotas.network.replace(network).is_some())
    }
}

/// A token word: `sha256:<64 lowercase hex>` or the token itself. The messages never repeat it.
fn credential(word: &str) -> Result<Credential, String> {
    if let Some(hex) = word.strip_prefix("sha256:") {
        let lower_hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
        if hex.len() != 64 || !hex.chars().all(lower_hex) {
            return Err("after sha256: must be 64 lowercase hex digits".to_owned());
        }
        let mut digest = [0u8; 32];
        for (byte, pair) in digest.iter_mut().zip(hex.as_bytes().chunks(2)) {
            let pair = std::str::from_utf8(pair).unwrap_or_default();
            *byte = u8::from_str_radix(pair, 16).map_err(|_| "is not hex".to_owned())?;
        }
        return Ok(Credential(digest));
    }
    let token = Token::parse(word)?;
    Ok(Credential::of_token(token.expose()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: &str = "alice-token-0123456789";

    fn hex(credential: &Credential) -> String {
        credential
            .digest()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    #[test]
    fn plain_and_hashed_tokens_name_their_principals() {
        let hashed = hex(&Credential::of_token("bob-token-0123456789ab"));
        let text = format!(
            "# the team\n\nalice {ALICE}\n  bob sha256:{hashed} max_kernels=2 max_pending_operations=5\n"
        );
        let principals = parse_principals(&text).expect("parses");
        assert_eq!(principals.len(), 2);
        assert_eq!(principals[0].name.as_str(), "alice");
        assert_eq!(principals[0].credential, Credential::of_token(ALICE));
        assert_eq!(principals[0].quotas, Quotas::default());
        assert_eq!(principals[1].name.as_str(), "bob");
        assert_eq!(
            principals[1].credential,
            Credential::of_token("bob-token-0123456789ab")
        );
        assert_eq!(
            principals[1].quotas,
            Quotas {
                max_kernels: Some(2),
                max_pending_operations: Some(5),
                sandbox: None,
                network: None,
                upstream_servers: None,
            }
        );
    }

    #[test]
    fn a_principal_may_have_their_own_upstream_servers() {
        let text = format!("intern {ALICE} upstream_servers=/etc/ipython-mcp/intern.json\n");
        let principals = parse_principals(&text).expect("parses");
        assert_eq!(
            principals[0].quotas.upstream_servers.as_deref(),
            Some(std::path::Path::new("/etc/ipython-mcp/intern.json"))
        );
        let text = format!("intern {ALICE} upstream_servers=relative.json\n");
        let error = parse_principals(&text).expect_err("refused").to_string();
        assert!(error.contains("must be an absolute path"), "{error}");
    }

    #[test]
    fn a_principal_may_have_its_own_sandbox() {
        let text = format!("intern {ALICE} sandbox=read-only network=off\n");
        let principals = parse_principals(&text).expect("parses");
        assert_eq!(
            principals[0].quotas.sandbox,
            Some(crate::limits::SandboxMode::ReadOnly)
        );
        assert_eq!(
            principals[0].quotas.network,
            Some(crate::limits::SandboxNetwork::Off)
        );
        let text = format!("intern {ALICE} network=PyPI.org,*.pythonhosted.org\n");
        assert_eq!(
            parse_principals(&text).expect("parses")[0].quotas.network,
            Some(crate::limits::SandboxNetwork::Allow(vec![
                "pypi.org".to_owned(),
                "*.pythonhosted.org".to_owned()
            ]))
        );
        for (line, problem) in [
            (
                "sandbox=strict",
                "must be workspace-write, read-only or off",
            ),
            (
                "network=may/be",
                "must be on, off or comma-separated host names",
            ),
            ("network=,", "must be on, off or comma-separated host names"),
            ("sandbox=off network=off", "needs the sandbox"),
            ("sandbox=off network=pypi.org", "needs the sandbox"),
            ("network=on network=off", "given twice"),
        ] {
            let error = parse_principals(&format!("intern {ALICE} {line}")).expect_err("refused");
            assert!(error.problem.contains(problem), "{line}: {error}");
        }
    }

    #[test]
    fn a_bad_line_is_named_and_its_token_never_repeated() {
        let cases = [
            ("alice short-token", 1, "at least 16"),
            ("al/ice {ALICE}", 1, "letters, digits"),
            ("alice", 1, "has no token"),
            ("alice sha256:ABCDEF", 1, "64 lowercase hex"),
            ("alice {ALICE} max_kernels=0", 1, "positive integer"),
            ("alice {ALICE} timeout=3", 1, "cannot be set per principal"),
            ("alice {ALICE} max_kernels", 1, "setting=N"),
            (
                "alice {ALICE} max_kernels=2 max_kernels=3",
                1,
                "given twice",
            ),
            (
                "# c\nalice {ALICE}\nalice other-token-0123456789",
                3,
                "named twice",
            ),
            (
                "alice {ALICE}\nAlice other-token-0123456789",
                2,
                "differ only in case",
            ),
            ("alice {ALICE}\nbob {ALICE}", 2, "same token as alice"),
            ("# nobody\n\n", 0, "names no principal"),
        ];
        for (text, line, problem) in cases {
            let text = text.replace("{ALICE}", ALICE);
            let error = parse_principals(&text).expect_err(&text);
            assert_eq!(error.line, line, "{text}");
            let shown = error.to_string();
            assert!(shown.contains(problem), "{text}: {shown}");
            assert!(!shown.contains(ALICE), "{text}: the token leaked: {shown}");
            assert!(!shown.contains("short-token"), "{shown}");
        }
    }

    #[test]
    fn a_claim_may_name_a_principal_with_dots_and_at_signs_but_never_a_dot_directory() {
        for good in ["alice", "alice@example.org", "a.b-c_d", "0f3a-uuid"] {
            assert_eq!(PrincipalName::from_claim(good).expect(good).as_str(), good);
        }
        for bad in ["", ".", "..", ".hidden", "a/b", "a b", "ü", &"x".repeat(65)] {
            assert!(PrincipalName::from_claim(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_credential_never_shows_in_debug() {
        let principals = parse_principals(&format!("alice {ALICE}")).expect("parses");
        let shown = format!("{principals:?}");
        assert!(!shown.contains(ALICE), "{shown}");
        assert!(!shown.contains(&hex(&principals[0].credential)), "{shown}");
    }
}
