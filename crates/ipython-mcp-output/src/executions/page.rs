//! Paging a spooled stream for `get_output`.

use std::io::Read as _;

use super::*;

/// Reads one page of a spooled stream (blocking: run it off the async threads). A line longer
/// than a whole page keeps its first `head_chars` characters and its end, as execute's streams
/// do; a line that only lacks the room left starts the next page. At most `max_bytes` of the
/// file are read (the spool's per-stream bound: the kernel writes the file, and could make it
/// any size). A missing file is an empty stream; anything but a regular file there (the kernel
/// may have put a link, a FIFO or a device in its place) is refused, naming it.
pub fn read_page(
    path: Option<&Path>,
    request: &PageRequest,
    complete: bool,
    head_chars: usize,
    max_bytes: u64,
) -> Result<Page, PageError> {
    let mut page = Page {
        stream: request.stream,
        pattern: request
            .pattern
            .as_ref()
            .map(|pattern| pattern.as_str().to_owned()),
        lines: Vec::new(),
        total_lines: 0,
        total_matches: request.pattern.as_ref().map(|_| 0),
        next_line: None,
        truncated: false,
        complete,
    };
    let Some(path) = path else {
        return Ok(page);
    };
    let (dir, name) = ipython_mcp_untrusted::split(path);
    let file = match ipython_mcp_untrusted::open(dir, name) {
        Ok(file) => file,
        Err(error) if error.is_not_found() => return Ok(page),
        Err(error) => return Err(PageError::unreadable(&error)),
    };
    // A negative start counts from the end, which needs the line count first.
    let start = if request.start_line < 0 {
        let total = count_lines((&file).take(max_bytes));
        if std::io::Seek::rewind(&mut &file).is_err() {
            return Ok(page);
        }
        (total + 1)
            .saturating_sub(request.start_line.unsigned_abs())
            .max(1)
    } else {
        (request.start_line as u64).max(1)
    };
    let mut reader = BufReader::with_capacity(256 * 1024, file.take(max_bytes));
    let mut budget = request.max_chars;
    let mut buffer = Vec::new();
    let mut number = 0u64;
    loop {
        buffer.clear();
        match reader.read_until(b'\n', &mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        number += 1;
        if number < start {
            continue;
        }
        let full = page.lines.len() >= request.max_lines || budget == 0;
        if full && page.next_line.is_some() && request.pattern.is_none() {
            continue; // only counting lines now
        }
        let text = rendered_line(&buffer);
        if let Some(pattern) = &request.pattern {
            if !pattern.is_match(&text) {
                continue;
            }
            if let Some(matches) = page.total_matches.as_mut() {
                *matches += 1;
            }
        }
        if full {
            page.next_line.get_or_insert(number);
            continue;
        }
        let mut text = text.into_owned();
        let chars = text.chars().count();
        if chars > budget {
            if !page.lines.is_empty() {
                page.next_line.get_or_insert(number);
                budget = 0;
                continue;
            }
            let kept = crate::terminal::Kept::of(&text, budget, head_chars);
            text = kept.render(request.stream.suffix(), None);
            page.truncated = true;
        }
        budget -= chars.min(budget);
        page.lines.push(PageLine { line: number, text });
    }
    page.total_lines = number;
    Ok(page)
}

/// Lines in the file from its current position (a last line without its newline counts).
pub(super) fn count_lines(file: impl std::io::Read) -> u64 {
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let mut count = 0u64;
    let mut ended_with_newline = true;
    loop {
        let buffer = match reader.fill_buf() {
            Ok([]) | Err(_) => break,
            Ok(buffer) => buffer,
        };
        count += buffer.iter().filter(|byte| **byte == b'\n').count() as u64;
        ended_with_newline = buffer.last() == Some(&b'\n');
        let length = buffer.len();
        reader.consume(length);
    }
    if !ended_with_newline {
        count += 1; // a last line without its newline yet
    }
    count
}

/// A spooled line as a terminal shows it: without its newline, carriage-return overwrites
/// (progress bars) resolved to the last non-empty segment, invalid UTF-8 replaced.
pub(super) fn rendered_line(raw: &[u8]) -> std::borrow::Cow<'_, str> {
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    let shown = raw
        .rsplit(|byte| *byte == b'\r')
        .find(|segment| !segment.is_empty())
        .unwrap_or(raw);
    String::from_utf8_lossy(shown)
}
