//! Cutting text to a number of characters, written once for every crate.
//!
//! Every bound the server states is in characters (Unicode scalar values), never bytes, and a
//! cut always lands on a character boundary. These shapes cover every use: [`cut`] (the kept
//! part and the exact count left out, for results that report `*_omitted_chars`; [`cut_front`]
//! keeps the end),
//! [`truncate`] (the same, in place; [`truncate_front`] keeps the end instead), [`shorten`] (a
//! value quoted inside a message, marked with `…` when cut) and [`tail`] (the end of a child's
//! output inside a message, where installers put the reason for a failure).

/// `text` cut to at most `max` characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut<'a> {
    /// The first `max` characters (all of `text` when it fits).
    pub kept: &'a str,
    /// How many characters were left out; 0 when nothing was.
    pub omitted: u64,
}

impl Cut<'_> {
    /// True when something was left out.
    pub fn was_cut(&self) -> bool {
        self.omitted > 0
    }
}

/// The first `max` characters of `text` and how many characters follow them.
pub fn cut(text: &str, max: usize) -> Cut<'_> {
    match text.char_indices().nth(max) {
        Some((index, _)) => Cut {
            kept: &text[..index],
            omitted: text[index..].chars().count() as u64,
        },
        None => Cut {
            kept: text,
            omitted: 0,
        },
    }
}

/// The last `max` characters of `text` (in `kept`) and how many characters precede them.
pub fn cut_front(text: &str, max: usize) -> Cut<'_> {
    let length = text.chars().count();
    if length <= max {
        return Cut {
            kept: text,
            omitted: 0,
        };
    }
    let omitted = length - max;
    let start = text
        .char_indices()
        .nth(omitted)
        .map_or(text.len(), |(index, _)| index);
    Cut {
        kept: &text[start..],
        omitted: omitted as u64,
    }
}

/// Cuts `text` to at most `max` characters in place; returns how many characters it removed.
pub fn truncate(text: &mut String, max: usize) -> u64 {
    let Cut { kept, omitted } = cut(text, max);
    let keep = kept.len();
    text.truncate(keep);
    omitted
}

/// Cuts `text` in place to its last `max` characters; returns how many characters it removed
/// from the front.
pub fn truncate_front(text: &mut String, max: usize) -> u64 {
    let Cut { kept, omitted } = cut_front(text, max);
    let start = text.len() - kept.len();
    text.drain(..start);
    omitted
}

/// `text` for quoting inside a message: at most `max` characters, then `…` when it was cut.
pub fn shorten(text: &str, max: usize) -> String {
    let Cut { kept, omitted } = cut(text, max);
    if omitted == 0 {
        kept.to_owned()
    } else {
        format!("{kept}…")
    }
}

/// The end of `text` for a message: at most `max` characters in all, the first of them `…`
/// when the front was cut.
pub fn tail(text: &str, max: usize) -> String {
    let mut kept = text.to_owned();
    if truncate_front(&mut kept, max) == 0 {
        return kept;
    }
    // One character more goes, to make room for the marker.
    truncate_front(&mut kept, max.saturating_sub(1));
    format!("…{kept}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_count_characters_and_land_on_boundaries() {
        assert_eq!(
            cut("héllo", 2),
            Cut {
                kept: "hé",
                omitted: 3
            }
        );
        assert_eq!(
            cut("héllo", 5),
            Cut {
                kept: "héllo",
                omitted: 0
            }
        );
        assert_eq!(
            cut("héllo", 9),
            Cut {
                kept: "héllo",
                omitted: 0
            }
        );
        assert_eq!(
            cut("", 0),
            Cut {
                kept: "",
                omitted: 0
            }
        );
        assert_eq!(
            cut("分析", 0),
            Cut {
                kept: "",
                omitted: 2
            }
        );
        assert!(cut("ab", 1).was_cut());
        assert!(!cut("ab", 2).was_cut());
    }

    #[test]
    fn cut_front_keeps_the_last_characters_and_counts_the_rest() {
        assert_eq!(
            cut_front("héllo", 2),
            Cut {
                kept: "lo",
                omitted: 3
            }
        );
        assert_eq!(
            cut_front("分析", 5),
            Cut {
                kept: "分析",
                omitted: 0
            }
        );
        assert_eq!(cut_front("a€𝄞b", 0).kept, "");
    }

    #[test]
    fn truncate_front_keeps_the_last_characters() {
        let mut text = "a€𝄞b".to_owned();
        assert_eq!(truncate_front(&mut text, 2), 2);
        assert_eq!(text, "𝄞b");
        assert_eq!(truncate_front(&mut text, 5), 0);
        assert_eq!(truncate_front(&mut text, 0), 2);
        assert_eq!(text, "");
    }

    #[test]
    fn truncate_and_shorten_agree_with_cut() {
        let mut text = "👍👍👍 ok".to_owned();
        assert_eq!(truncate(&mut text, 2), 4);
        assert_eq!(text, "👍👍");
        assert_eq!(truncate(&mut text, 2), 0);
        assert_eq!(shorten("abcdef", 3), "abc…");
        assert_eq!(shorten("abc", 3), "abc");
    }

    #[test]
    fn tail_keeps_the_end_and_marks_the_cut() {
        assert_eq!(tail("short", 10), "short");
        assert_eq!(tail("abcdefghij", 10), "abcdefghij");
        assert_eq!(tail("abcdefghijk", 5), "…hijk");
        // Cutting respects character boundaries.
        assert_eq!(tail("ééééé", 3), "…éé");
    }
}
