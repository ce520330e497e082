//! Redaction of secrets in text an agent or a log will see: the values of configured
//! environment variables, and credentials in URLs (`https://user:token@host` →
//! `https://***@host`).
//!
//! Installer output, preload tracebacks and configuration errors can all echo a secret: a
//! private index URL with a token, or a preloaded module that prints a variable it read.

/// Shown instead of a secret.
pub const MASK: &str = "***";

/// Values shorter than this are not masked: `"1"` or `"on"` would mangle every message they
/// happen to appear in, and are no secret.
pub const MIN_SECRET_CHARS: usize = 4;

/// Masks known secret values and URL credentials. Its `Debug` shows how many secrets it holds,
/// never the secrets.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Redactor {
    /// Longest first, so a secret that contains another is masked whole.
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Redactor {
    /// A redactor for these secret values (short ones are ignored, see [`MIN_SECRET_CHARS`]).
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Redactor {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .filter(|secret| secret.chars().count() >= MIN_SECRET_CHARS)
            .map(str::to_owned)
            .collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Redactor { secrets }
    }

    /// `text` with every secret value and every URL credential replaced by [`MASK`].
    pub fn redact(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), MASK);
            }
        }
        url_credentials(&text)
    }
}

/// `text` with the user-info part of every `scheme://user:password@host` replaced by [`MASK`].
pub fn url_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let authority_start = at + 3;
        out.push_str(&rest[..authority_start]);
        let after = &rest[authority_start..];
        // The authority ends at the path, query, fragment, or anything that cannot be in a URL.
        let end = after
            .find(|c: char| {
                matches!(
                    c,
                    '/' | '?' | '#' | '"' | '\'' | '<' | '>' | '`' | ',' | ';'
                ) || c.is_whitespace()
                    || c.is_control()
            })
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@') {
            Some(user_end) => {
                out.push_str(MASK);
                out.push_str(&authority[user_end..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_credentials_are_masked_and_other_urls_kept() {
        let check = |input: &str, expect: &str| assert_eq!(url_credentials(input), expect);
        check(
            "GET https://alice:s3cret@pypi.example.com/simple/six/ failed",
            "GET https://***@pypi.example.com/simple/six/ failed",
        );
        check(
            "git+https://token@github.com/o/r.git",
            "git+https://***@github.com/o/r.git",
        );
        check("https://pypi.org/simple", "https://pypi.org/simple");
        check("'http://u:p@h:8080'", "'http://***@h:8080'");
        check("a://b@c d://e@f", "a://***@c d://***@f");
        check("no url at all: user@host", "no url at all: user@host");
        check("trailing ://", "trailing ://");
        check("ünïcode https://ü:ö@h/ä", "ünïcode https://***@h/ä");
    }

    #[test]
    fn secret_values_are_masked_longest_first_and_short_ones_ignored() {
        let redactor = Redactor::new(["tok3n", "tok3n-longer", "on"]);
        assert_eq!(
            redactor.redact("tok3n-longer and tok3n, on"),
            "*** and ***, on"
        );
        assert_eq!(format!("{redactor:?}"), "Redactor { secrets: 2 }");
        assert_eq!(Redactor::default().redact("x://u:p@h"), "x://***@h");
    }
}
