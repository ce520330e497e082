//! A bounded model of one output stream as a Jupyter front end renders it.
//!
//! The same model runs inside the kernel (the bundled helper's `TerminalSink`, in
//! `python/ipython_mcp_helper/sink.py`) so that a 200 MB print never crosses the wire; this Rust copy bounds
//! what the server holds when a kernel has no helper or the helper's report is missing. Both are
//! checked against the same cases (`python/tests/sink_cases.json`).
//!
//! Semantics are Jupyter's `fixCarriageReturn`: `\n` commits the current line; `\r` moves the
//! cursor to column 0 and later characters overwrite; `\r\n` is a newline. Memory is O(limit)
//! whatever is written, and the omitted count is exact.

/// Keeps the first `limit` characters of the rendered stream and counts the rest exactly.
#[derive(Debug, Clone)]
pub struct TerminalSink {
    limit: usize,
    /// Committed text kept (at most `limit` characters).
    head: String,
    head_chars: usize,
    /// Characters of all committed lines, newlines included.
    committed_total: u64,
    /// The current line's stored prefix (at most the room left after `head`).
    line: Vec<char>,
    line_len: u64,
    cursor: u64,
}

impl TerminalSink {
    pub fn new(limit: usize) -> Self {
        TerminalSink {
            limit,
            head: String::new(),
            head_chars: 0,
            committed_total: 0,
            line: Vec::new(),
            line_len: 0,
            cursor: 0,
        }
    }

    pub fn write(&mut self, text: &str) {
        let mut rest = text;
        while !rest.is_empty() {
            match rest.find(['\r', '\n']) {
                Some(index) => {
                    self.put(&rest[..index]);
                    if rest.as_bytes()[index] == b'\n' {
                        self.newline();
                    } else {
                        self.cursor = 0;
                    }
                    rest = &rest[index + 1..];
                }
                None => {
                    self.put(rest);
                    rest = "";
                }
            }
        }
    }

    /// Forgets everything, as `clear_output` does in a front end.
    pub fn clear(&mut self) {
        *self = TerminalSink::new(self.limit);
    }

    /// The first `limit` characters of the rendered text.
    pub fn text(&self) -> String {
        let mut text = String::with_capacity(self.head.len() + self.line.len());
        text.push_str(&self.head);
        text.extend(self.line.iter());
        text
    }

    /// Rendered characters not included in [`TerminalSink::text`].
    pub fn omitted(&self) -> u64 {
        self.committed_total + self.line_len - (self.head_chars + self.line.len()) as u64
    }

    fn room(&self) -> usize {
        self.limit - self.head_chars
    }

    /// Writes text without control characters at the cursor, overwriting.
    fn put(&mut self, segment: &str) {
        if segment.is_empty() {
            return;
        }
        let room = self.room() as u64;
        let cursor = self.cursor;
        let mut written = 0u64;
        if cursor < room {
            // The stored prefix always covers min(line_len, room) characters, so it reaches the
            // cursor here; characters past the room are only counted.
            for (position, character) in (cursor as usize..room as usize).zip(segment.chars()) {
                if position < self.line.len() {
                    self.line[position] = character;
                } else {
                    self.line.push(character);
                }
                written += 1;
            }
        }
        let length = if written as usize == segment.len() {
            written
        } else {
            written + segment[byte_offset(segment, written)..].chars().count() as u64
        };
        self.cursor = cursor + length;
        self.line_len = self.line_len.max(self.cursor);
    }

    fn newline(&mut self) {
        self.head_chars += self.line.len();
        self.head.extend(self.line.drain(..));
        if self.head_chars < self.limit {
            self.head.push('\n');
            self.head_chars += 1;
        }
        self.committed_total += self.line_len + 1;
        self.line_len = 0;
        self.cursor = 0;
    }
}

/// Byte offset of the `chars`-th character of `text`.
fn byte_offset(text: &str, chars: u64) -> usize {
    text.char_indices()
        .nth(chars as usize)
        .map_or(text.len(), |(index, _)| index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(limit: usize, writes: &[&str], text: &str, omitted: u64) {
        let mut sink = TerminalSink::new(limit);
        for write in writes {
            sink.write(write);
        }
        assert_eq!(
            (sink.text().as_str(), sink.omitted()),
            (text, omitted),
            "writes {writes:?}"
        );
    }

    #[test]
    fn keeps_a_prefix_and_counts_the_rest() {
        check(5, &["hello world"], "hello", 6);
        check(5, &["hi\n", "there\n"], "hi\nth", 4);
        check(100, &["a\r\nb"], "a\nb", 0);
        check(100, &["a\r", "\nb"], "a\nb", 0);
    }

    #[test]
    fn carriage_return_overwrites() {
        check(100, &["abcdef\rXY"], "XYcdef", 0);
        check(
            100,
            &["10%\r", "20%\r", "30%\n", "done\n"],
            "30%\ndone\n",
            0,
        );
        check(4, &["abcdef\rXY"], "XYcd", 2);
    }

    /// The cases the Python helper's sink is tested with: both implementations must agree.
    #[test]
    fn matches_the_python_helper_on_the_shared_cases() {
        let fixture: serde_json::Value =
            serde_json::from_str(include_str!("../python/tests/sink_cases.json"))
                .expect("valid fixture");
        let cases = fixture["cases"].as_array().expect("cases");
        assert!(cases.len() >= 25);
        for case in cases {
            let name = case["name"].as_str().expect("name");
            let mut sink = TerminalSink::new(case["limit"].as_u64().expect("limit") as usize);
            let clear_after: Vec<u64> = case
                .get("clear_after")
                .and_then(|v| v.as_array())
                .map_or(Vec::new(), |list| {
                    list.iter().filter_map(serde_json::Value::as_u64).collect()
                });
            for (index, write) in case["writes"]
                .as_array()
                .expect("writes")
                .iter()
                .enumerate()
            {
                match write {
                    serde_json::Value::String(text) => sink.write(text),
                    repeat => {
                        let pair = repeat["repeat"].as_array().expect("repeat pair");
                        let text = pair[0].as_str().expect("text");
                        for _ in 0..pair[1].as_u64().expect("count") {
                            sink.write(text);
                        }
                    }
                }
                if clear_after.contains(&(index as u64)) {
                    sink.clear();
                }
            }
            assert_eq!(
                sink.text(),
                case["text"].as_str().expect("text"),
                "case {name}"
            );
            assert_eq!(
                sink.omitted(),
                case["omitted"].as_u64().expect("omitted"),
                "case {name}"
            );
        }
    }

    #[test]
    fn clear_forgets_everything() {
        let mut sink = TerminalSink::new(3);
        sink.write("abcdef");
        sink.clear();
        sink.write("z");
        assert_eq!((sink.text().as_str(), sink.omitted()), ("z", 0));
    }
}
