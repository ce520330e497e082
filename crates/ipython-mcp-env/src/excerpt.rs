//! Bounding child output for error messages: terminal escapes removed, only the tail kept
//! (installers put the reason for a failure last).

/// How many characters of child output an error message may carry.
pub(crate) const EXCERPT_CHARS: usize = 2000;

/// The readable tail of a child's stdout followed by its stderr, at most `max_chars` long.
pub(crate) fn excerpt(stdout: &[u8], stderr: &[u8], max_chars: usize) -> String {
    let stdout = clean(&String::from_utf8_lossy(stdout));
    let stderr = clean(&String::from_utf8_lossy(stderr));
    let joined = match (stdout.is_empty(), stderr.is_empty()) {
        (true, _) => stderr,
        (false, true) => stdout,
        (false, false) => format!("{stdout}\n{stderr}"),
    };
    ipython_mcp_text::tail(&joined, max_chars)
}

/// Removes ANSI escape sequences and control characters; a bare `\r` (progress bars) becomes a
/// line break so that no state of the line is silently merged with another.
pub(crate) fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                // CSI: parameters and intermediates, then one final byte in @..=~.
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC: up to BEL or ST (ESC \).
                Some(']') => {
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' {
                            break;
                        }
                        if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                            chars.next();
                            break;
                        }
                    }
                }
                // nF escapes (e.g. `ESC ( B`): intermediates in ' '..='/', then a final byte.
                Some(' '..='/') => {
                    for c in chars.by_ref() {
                        if !(' '..='/').contains(&c) {
                            break;
                        }
                    }
                }
                // Any other escape is two characters long.
                _ => {}
            },
            '\r' => {
                if chars.peek() != Some(&'\n') {
                    out.push('\n');
                }
            }
            '\n' | '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_and_cursor_movement_are_removed() {
        let raw = "\u{1b}[1m\u{1b}[31merror\u{1b}[0m: no \u{1b}]8;;http://x\u{7}link\u{1b}]8;;\u{1b}\\ here\u{1b}(B";
        assert_eq!(clean(raw), "error: no link here");
    }

    #[test]
    fn carriage_returns_become_line_breaks_and_controls_vanish() {
        assert_eq!(
            clean("10%\r50%\r100%\r\ndone\u{7}\u{0}\n"),
            "10%\n50%\n100%\ndone"
        );
    }

    #[test]
    fn excerpt_is_bounded_and_prefers_the_end_of_stderr() {
        let stdout = "x".repeat(5000);
        let stderr = format!(
            "{}\n\u{1b}[31mERROR: the real reason\u{1b}[0m\n",
            "y".repeat(5000)
        );
        let text = excerpt(stdout.as_bytes(), stderr.as_bytes(), EXCERPT_CHARS);
        assert_eq!(text.chars().count(), EXCERPT_CHARS);
        assert!(text.starts_with('…'));
        assert!(text.ends_with("ERROR: the real reason"));
    }

    #[test]
    fn excerpt_joins_both_streams_and_tolerates_invalid_utf8() {
        assert_eq!(excerpt(b"out\n", b"", 100), "out");
        assert_eq!(excerpt(b"", b"err", 100), "err");
        assert_eq!(excerpt(b"out", b"err", 100), "out\nerr");
        assert_eq!(excerpt(b"bad \xff byte", b"", 100), "bad \u{fffd} byte");
    }
}
