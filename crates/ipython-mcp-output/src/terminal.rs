//! A bounded model of one output stream as a Jupyter front end renders it.
//!
//! The same model runs inside the kernel (the bundled helper's `TerminalSink`, in the kernel
//! crate's `python/ipython_mcp_helper/sink.py`) so that a 200 MB print never crosses the wire;
//! this Rust copy bounds what the server holds when a kernel has no helper or the helper's
//! report is missing. Both are checked against the same cases (`python/tests/sink_cases.json`,
//! beside the helper).
//!
//! Semantics are Jupyter's `fixCarriageReturn`: `\n` commits the current line; `\r` moves the
//! cursor to column 0 and later characters overwrite; `\r\n` is a newline. A rendering longer
//! than the limit keeps its first and its last characters, cut at line boundaries when one is
//! near (see [`Kept`]). Memory is O(limit) whatever is written, and the omitted counts are exact.

use std::collections::VecDeque;

use crate::output::{join_at_marker, Cut};

/// Words the call that reads a stream's omitted middle back from the spool, for the marker
/// between head and tail. The layer that names the tools supplies it (this crate knows none);
/// without one, the marker only counts what was omitted.
pub type PagerCall = fn(&Paging<'_>) -> String;

/// Where an omitted middle can be read back from: the execution, its stream, and the 1-based
/// line of the whole stream the omitted part starts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paging<'a> {
    pub execution_id: &'a str,
    pub stream: &'a str,
    pub start_line: u64,
}

/// The paging call of one execution's streams, for [`Kept::render`].
#[derive(Clone, Copy)]
pub struct Pager<'a> {
    pub call: PagerCall,
    pub execution_id: &'a str,
}

/// What is kept of one stream's rendering.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    /// The whole rendering when nothing is omitted, else its beginning.
    pub head: String,
    /// The end of the rendering (empty when nothing is omitted).
    pub tail: String,
    /// Rendered characters between `head` and `tail`.
    pub omitted_chars: u64,
    /// Newlines among them.
    pub omitted_lines: u64,
    /// The 1-based number, in the execution's whole stream, of the line the omitted part
    /// starts in (0 when nothing is omitted).
    pub first_omitted_line: u64,
}

impl Kept {
    /// The view of a complete text (a saved output, a traceback) that the sink would keep.
    pub fn of(text: &str, limit: usize, head: usize) -> Kept {
        let mut sink = TerminalSink::new(limit, head);
        sink.write(text);
        sink.kept()
    }

    /// The same view cut further, if need be, so that its rendering with the marker (and
    /// `call`'s paging call for an execution id) fits `limit` characters: the head loses its
    /// end and the tail its beginning, in proportion, and the counts grow by exactly what they
    /// lose. A limit under twice the marker's length is left as it is: cutting nearly all the
    /// text to make room for the marker would leave the reader nothing but the marker.
    pub fn within(mut self, limit: usize, call: Option<PagerCall>) -> Kept {
        // An execution id is a UUID: its marker is the longest one a result shows.
        const EXECUTION_ID: &str = "00000000-0000-0000-0000-000000000000";
        // Counts only grow as text is cut, so each pass asks for a little more than the excess.
        for _ in 0..4 {
            if self.omitted_chars == 0 {
                return self;
            }
            let pager = call.map(|call| Pager {
                call,
                execution_id: EXECUTION_ID,
            });
            let shown = self.render("stdout", pager).chars().count();
            let text = self.head.chars().count() + self.tail.chars().count();
            if shown <= limit || 2 * (shown - text) > limit {
                return self;
            }
            self.cut(shown - limit + 4);
        }
        self
    }

    /// Moves `chars` more characters (or all there are) from the kept text into the omitted
    /// part.
    fn cut(&mut self, chars: usize) {
        let head_chars = self.head.chars().count();
        let tail_chars = self.tail.chars().count();
        let kept = head_chars + tail_chars;
        if kept == 0 {
            return;
        }
        let chars = chars.min(kept);
        let mut from_head = (chars * head_chars).div_ceil(kept).min(head_chars);
        let mut from_tail = (chars - from_head).min(tail_chars);
        // Whole lines where a boundary is near, as the sink keeps them: the head ends a line
        // and the tail starts one, unless that would halve what is left of either.
        let head_left = &self.head[..byte_offset(&self.head, (head_chars - from_head) as u64)];
        if let Some(newline) = head_left.rfind('\n') {
            let whole = head_left[..newline].chars().count() + 1;
            if 2 * whole >= head_left.chars().count() {
                from_head = head_chars - whole;
            }
        }
        let tail_left = &self.tail[byte_offset(&self.tail, from_tail as u64)..];
        let starts_a_line =
            from_tail == 0 || self.tail[..self.tail.len() - tail_left.len()].ends_with('\n');
        if !starts_a_line {
            if let Some(newline) = tail_left.find('\n') {
                let partial = tail_left[..newline].chars().count() + 1;
                if 2 * partial <= tail_left.chars().count() {
                    from_tail += partial;
                }
            }
        }
        let head_cut = self
            .head
            .split_off(byte_offset(&self.head, (head_chars - from_head) as u64));
        let tail_rest = self
            .tail
            .split_off(byte_offset(&self.tail, from_tail as u64));
        let tail_cut = std::mem::replace(&mut self.tail, tail_rest);
        let head_lines = head_cut.matches('\n').count() as u64;
        self.omitted_chars += (from_head + from_tail) as u64;
        self.omitted_lines += head_lines + tail_cut.matches('\n').count() as u64;
        self.first_omitted_line -= head_lines;
    }

    /// The text an agent reads: the head, one marker line with the exact counts and, when the
    /// full stream is kept on disk (`pager`), the call that pages the middle, then the tail.
    pub fn render(&self, stream: &str, pager: Option<Pager<'_>>) -> String {
        match self.marker(stream, pager) {
            None => {
                let mut text = self.head.clone();
                text.push_str(&self.tail);
                text
            }
            Some(marker) => join_at_marker(&self.head, &marker, &self.tail),
        }
    }

    /// What a result holds of the stream: the characters printed (head then tail) and, when
    /// the middle was cut, where, with the marker the text view shows there.
    pub fn printed(self, stream: &str, pager: Option<Pager<'_>>) -> (String, Option<Cut>) {
        let marker = self.marker(stream, pager);
        let at = self.head.len();
        let mut text = self.head;
        text.push_str(&self.tail);
        (text, marker.map(|marker| Cut { at, marker }))
    }

    /// The line that stands for the omitted middle (`None` when nothing is omitted): the exact
    /// counts and, with a `pager`, the call that pages it.
    pub fn marker(&self, stream: &str, pager: Option<Pager<'_>>) -> Option<String> {
        if self.omitted_chars == 0 {
            return None;
        }
        // A cut inside one long line omits no line: saying "(0 lines)" would only puzzle.
        let mut marker = match self.omitted_lines {
            0 => format!("[… {} characters omitted", self.omitted_chars),
            1 => format!("[… {} characters (1 line) omitted", self.omitted_chars),
            lines => format!(
                "[… {} characters ({lines} lines) omitted",
                self.omitted_chars
            ),
        };
        if let Some(Pager { call, execution_id }) = pager {
            marker.push_str("; ");
            marker.push_str(&call(&Paging {
                execution_id,
                stream,
                start_line: self.first_omitted_line,
            }));
        }
        marker.push_str(" …]");
        Some(marker)
    }
}

/// Keeps the first `limit` characters of the rendered stream and its last `limit - head`, and
/// counts the rest exactly.
#[derive(Debug, Clone)]
pub struct TerminalSink {
    limit: usize,
    /// Characters of a too-long rendering shown from its beginning.
    head_limit: usize,
    /// Characters kept from the end: the tail shown, and one more (does the tail start a line).
    tail_room: usize,
    /// Committed text kept (at most `limit` characters).
    head: String,
    head_chars: usize,
    /// Characters of all committed lines, newlines included.
    committed_total: u64,
    /// The current line's stored prefix (at most the room left after `head`).
    line: Vec<char>,
    line_len: u64,
    cursor: u64,
    /// The last `tail_room` characters of the committed lines.
    tail: VecDeque<char>,
    /// The current line's last columns (at most `tail_room`), ending at `line_len`.
    tail_line: VecDeque<char>,
    newlines: u64,
    /// Newlines before the latest `clear`: line numbers count the whole stream.
    lines_before: u64,
}

impl TerminalSink {
    /// `head` (at most `limit`) characters of a longer rendering keep its beginning, the rest of
    /// `limit` its end.
    pub fn new(limit: usize, head: usize) -> Self {
        let head_limit = head.min(limit);
        TerminalSink {
            limit,
            head_limit,
            tail_room: limit - head_limit + 1,
            head: String::new(),
            head_chars: 0,
            committed_total: 0,
            line: Vec::new(),
            line_len: 0,
            cursor: 0,
            tail: VecDeque::new(),
            tail_line: VecDeque::new(),
            newlines: 0,
            lines_before: 0,
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

    /// Forgets what is shown, as `clear_output` does in a front end; line numbers go on.
    pub fn clear(&mut self) {
        let lines_before = self.lines_before + self.newlines;
        *self = TerminalSink::new(self.limit, self.head_limit);
        self.lines_before = lines_before;
    }

    /// The kept view (see [`Kept`]).
    pub fn kept(&self) -> Kept {
        let mut whole = String::with_capacity(self.head.len() + self.line.len());
        whole.push_str(&self.head);
        whole.extend(self.line.iter());
        let total = self.committed_total + self.line_len;
        if total <= self.limit as u64 {
            return Kept {
                head: whole,
                ..Kept::default()
            };
        }
        let head = ipython_mcp_text::cut(&whole, self.head_limit)
            .kept
            .to_owned();
        let ending: Vec<char> = self
            .tail
            .iter()
            .chain(self.tail_line.iter())
            .copied()
            .collect();
        let before_tail: String = ending[ending.len().saturating_sub(self.tail_room)..]
            .iter()
            .collect();
        let (head, tail) = keep(head, &before_tail, self.tail_room - 1);
        let head_lines = head.matches('\n').count() as u64;
        let tail_lines = tail.matches('\n').count() as u64;
        Kept {
            omitted_chars: total - (head.chars().count() + tail.chars().count()) as u64,
            omitted_lines: self.newlines - head_lines - tail_lines,
            first_omitted_line: self.lines_before + head_lines + 1,
            head,
            tail,
        }
    }

    fn room(&self) -> usize {
        self.limit - self.head_chars
    }

    /// Writes text without control characters at the cursor, overwriting.
    fn put(&mut self, segment: &str) {
        if segment.is_empty() {
            return;
        }
        self.put_tail(segment);
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

    /// Keeps the current line's last `tail_room` columns up to date (before `put` moves on).
    fn put_tail(&mut self, segment: &str) {
        if self.tail_room <= 1 {
            return;
        }
        let mut length = self.line_len;
        for (column, character) in (self.cursor..).zip(segment.chars()) {
            if column < length {
                let start = length - self.tail_line.len() as u64;
                if column >= start {
                    self.tail_line[(column - start) as usize] = character;
                }
            } else {
                self.tail_line.push_back(character);
                if self.tail_line.len() > self.tail_room {
                    self.tail_line.pop_front();
                }
                length += 1;
            }
        }
    }

    fn newline(&mut self) {
        self.head_chars += self.line.len();
        self.head.extend(self.line.drain(..));
        if self.head_chars < self.limit {
            self.head.push('\n');
            self.head_chars += 1;
        }
        if self.tail_room > 1 {
            self.tail.extend(self.tail_line.drain(..));
            self.tail.push_back('\n');
            let excess = self.tail.len().saturating_sub(self.tail_room);
            self.tail.drain(..excess);
        }
        self.newlines += 1;
        self.committed_total += self.line_len + 1;
        self.line_len = 0;
        self.cursor = 0;
    }
}

/// The head and the tail shown of a rendering too long to show whole. `head` is its first
/// characters; `before_tail` its last `tail_room + 1` (fewer when it is shorter). A cut falls at
/// a line boundary when one is near: the head ends after its last newline, and the tail starts
/// after its first one, unless that would lose more than half of either.
fn keep(mut head: String, before_tail: &str, tail_room: usize) -> (String, String) {
    if let Some(newline) = head.rfind('\n') {
        let kept = head[..newline].chars().count() + 1;
        if 2 * kept >= head.chars().count() {
            head.truncate(newline + 1);
        }
    }
    if tail_room == 0 {
        return (head, String::new());
    }
    let length = before_tail.chars().count();
    let mut tail =
        &before_tail[byte_offset(before_tail, length.saturating_sub(tail_room) as u64)..];
    let starts_a_line = length <= tail_room || before_tail.starts_with('\n');
    if !starts_a_line {
        if let Some(newline) = tail.find('\n') {
            if 2 * (tail[..newline].chars().count() + 1) <= tail_room {
                tail = &tail[newline + 1..];
            }
        }
    }
    (head, tail.to_owned())
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

    /// The paging call as the MCP layer words it, for the marker's length and text.
    fn get_output(paging: &Paging<'_>) -> String {
        format!(
            "get_output(execution_id=\"{}\", stream=\"{}\", start_line={}) pages them",
            paging.execution_id, paging.stream, paging.start_line
        )
    }

    fn pager(execution_id: &str) -> Pager<'_> {
        Pager {
            call: get_output,
            execution_id,
        }
    }

    fn check(limit: usize, writes: &[&str], text: &str, omitted: u64) {
        let mut sink = TerminalSink::new(limit, limit);
        for write in writes {
            sink.write(write);
        }
        let kept = sink.kept();
        assert_eq!(
            (kept.head.as_str(), kept.omitted_chars),
            (text, omitted),
            "writes {writes:?}"
        );
    }

    #[test]
    fn keeps_a_prefix_and_counts_the_rest() {
        check(5, &["hello world"], "hello", 6);
        check(5, &["hi\n", "there\n"], "hi\n", 6);
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
        let fixture: serde_json::Value = serde_json::from_str(include_str!(
            "../../ipython-mcp-kernel/python/tests/sink_cases.json"
        ))
        .expect("valid fixture");
        let cases = fixture["cases"].as_array().expect("cases");
        assert!(cases.len() >= 25);
        for case in cases {
            let name = case["name"].as_str().expect("name");
            let mut sink = TerminalSink::new(
                case["limit"].as_u64().expect("limit") as usize,
                case["head_chars"].as_u64().expect("head_chars") as usize,
            );
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
            let kept = sink.kept();
            let expected = (
                case["head"].as_str().expect("head"),
                case["tail"].as_str().expect("tail"),
                case["omitted"].as_u64().expect("omitted"),
                case["omitted_lines"].as_u64().expect("omitted_lines"),
            );
            assert_eq!(
                (
                    kept.head.as_str(),
                    kept.tail.as_str(),
                    kept.omitted_chars,
                    kept.omitted_lines
                ),
                expected,
                "case {name}"
            );
        }
    }

    #[test]
    fn clear_forgets_everything_but_line_numbers() {
        let mut sink = TerminalSink::new(3, 3);
        sink.write("abcdef");
        sink.clear();
        sink.write("z");
        assert_eq!(sink.kept().head, "z");
        let mut sink = TerminalSink::new(10, 4);
        sink.write("a\nb\n");
        sink.clear();
        for line in 3..10 {
            sink.write(&format!("{line}\n"));
        }
        let kept = sink.kept();
        assert_eq!(
            (kept.head.as_str(), kept.tail.as_str()),
            ("3\n4\n", "7\n8\n9\n")
        );
        assert_eq!(
            (
                kept.omitted_chars,
                kept.omitted_lines,
                kept.first_omitted_line
            ),
            (4, 2, 5)
        );
    }

    #[test]
    fn a_hundred_thousand_lines_keep_their_first_and_last_lines() {
        let mut sink = TerminalSink::new(8192, 1638);
        let text: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
        sink.write(&text);
        let kept = sink.kept();
        assert!(kept.head.starts_with("line 0\nline 1\n") && kept.head.ends_with('\n'));
        assert!(kept.tail.ends_with("line 99998\nline 99999\n"));
        assert!(
            kept.tail.starts_with("line "),
            "whole lines: {:?}",
            &kept.tail[..20]
        );
        let (head_lines, tail_lines) = (kept.head.lines().count(), kept.tail.lines().count());
        assert_eq!(
            kept.omitted_chars as usize,
            text.len() - kept.head.len() - kept.tail.len()
        );
        assert_eq!(
            kept.omitted_lines as usize,
            100_000 - head_lines - tail_lines
        );
        assert_eq!(kept.first_omitted_line as usize, head_lines + 1);
        let shown = kept.render("stdout", Some(pager("abc")));
        let marker = format!(
            "[… {} characters ({} lines) omitted; get_output(execution_id=\"abc\", stream=\"stdout\", start_line={}) pages them …]",
            kept.omitted_chars, kept.omitted_lines, kept.first_omitted_line
        );
        assert_eq!(shown, format!("{}{marker}\n{}", kept.head, kept.tail));
        assert!(kept.head.len() + kept.tail.len() <= 8192);
    }

    #[test]
    fn what_is_stored_stays_within_the_limit_whatever_is_written() {
        let mut sink = TerminalSink::new(100, 20);
        for round in 0..2_000 {
            sink.write(&"y".repeat(1_000));
            sink.write("\r");
            sink.write(&"z".repeat(500));
            sink.write(if round % 2 == 0 { "\n" } else { "\r\n" });
            sink.write(&"w".repeat(300));
            let stored = sink.head.chars().count() + sink.line.len();
            assert!(stored <= 100);
            assert!(sink.tail.len() <= 81 && sink.tail_line.len() <= 81);
        }
        let kept = sink.kept();
        assert_eq!(
            (kept.head.as_str(), kept.tail.as_str()),
            ("z".repeat(20).as_str(), "w".repeat(80).as_str())
        );
        assert_eq!(kept.omitted_chars, 1_001 + 1_999 * 1_301 + 300 - 100);
        assert_eq!(kept.omitted_lines, 2_000);
    }

    #[test]
    fn the_rendering_with_its_marker_fits_the_limit_and_the_counts_stay_exact() {
        let text: String = (0..500).map(|line| format!("line {line} é\n")).collect();
        let total_chars = text.chars().count() as u64;
        for (limit, head) in [(1_000, 200), (1_000, 0), (1_000, 1_000), (600, 300)] {
            let kept = Kept::of(&text, limit, head).within(limit, Some(get_output));
            let shown = kept.render(
                "stdout",
                Some(pager("00000000-0000-0000-0000-000000000000")),
            );
            assert!(shown.chars().count() <= limit, "{limit}/{head}: {shown}");
            assert_eq!(
                kept.head.chars().count() as u64
                    + kept.omitted_chars
                    + kept.tail.chars().count() as u64,
                total_chars
            );
            let head_lines = kept.head.matches('\n').count() as u64;
            assert_eq!(
                head_lines + kept.omitted_lines + kept.tail.matches('\n').count() as u64,
                500
            );
            assert_eq!(kept.first_omitted_line, head_lines + 1);
            assert!(text.starts_with(&kept.head) && text.ends_with(&kept.tail));
        }
        // Nothing omitted: nothing to make room for. A tiny limit keeps its text.
        let short = Kept::of("abc\n", 1_000, 200);
        assert_eq!(short.clone().within(1_000, Some(get_output)), short);
        let tiny = Kept::of(&text, 20, 10);
        assert_eq!(tiny.clone().within(20, Some(get_output)), tiny);
    }

    #[test]
    fn the_marker_stands_on_its_own_line() {
        let kept = Kept {
            head: "ab".into(),
            tail: "yz".into(),
            omitted_chars: 7,
            omitted_lines: 0,
            first_omitted_line: 1,
        };
        assert_eq!(
            kept.render("stderr", None),
            "ab\n[… 7 characters omitted …]\nyz"
        );
        let whole = Kept {
            head: "all".into(),
            ..Kept::default()
        };
        assert_eq!(whole.render("stdout", Some(pager("id"))), "all");
    }

    #[test]
    fn a_result_holds_only_what_was_printed_and_the_view_adds_the_marker() {
        let text: String = (0..40).map(|line| format!("line {line}\n")).collect();
        let kept = Kept::of(&text, 60, 30);
        let (omitted, lines) = (kept.omitted_chars, kept.omitted_lines);
        let rendered = kept.render("stdout", Some(pager("e1")));
        let (printed, cut) = kept.printed("stdout", Some(pager("e1")));
        let cut = cut.expect("the middle was cut");
        // Data only: every character was printed, and the counts add up to what was.
        assert!(!printed.contains('…'), "{printed}");
        assert_eq!(
            printed.chars().count() as u64 + omitted,
            text.chars().count() as u64
        );
        assert!(text.starts_with(&printed[..cut.at]) && text.ends_with(&printed[cut.at..]));
        assert!(lines > 1);
        assert!(cut.marker.starts_with(&format!(
            "[… {omitted} characters ({lines} lines) omitted; "
        )));
        // The text view, rebuilt from the result, is the rendering.
        let output = crate::ExecutionOutput {
            stdout: printed,
            stdout_cut: Some(cut),
            ..crate::ExecutionOutput::pending(
                crate::ExecutionId::generate(),
                crate::RuntimeInfo::unadmitted("r"),
            )
        };
        assert_eq!(output.stdout_view(), rendered);
        // One whole line omitted says so in the singular; nothing cut, no marker.
        let one = Kept {
            head: "a\n".into(),
            tail: "c\n".into(),
            omitted_chars: 2,
            omitted_lines: 1,
            first_omitted_line: 2,
        };
        assert_eq!(
            one.render("stdout", None),
            "a\n[… 2 characters (1 line) omitted …]\nc\n"
        );
        let whole = Kept {
            head: "all".into(),
            ..Kept::default()
        };
        assert_eq!(whole.printed("stdout", None), ("all".to_owned(), None));
    }
}
