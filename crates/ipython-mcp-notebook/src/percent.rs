//! Jupytext's `py:percent` scripts: cells marked by `# %%` lines, Markdown and raw cells as
//! comments, cell metadata as `key=<json>` options on the marker, notebook metadata in a YAML
//! header. Sources and metadata only: a script keeps no outputs, execution counts or cell ids
//! (cells read from a script get positional ids, `cell-<index>`).
//!
//! Written by hand (no YAML or jupytext crate exists to lean on) for the subset jupytext itself
//! writes, and round-trip tested against the jupytext package: the header is a block mapping
//! of scalars and nested mappings (lists and other values written as JSON flow, which is YAML);
//! magics (`%`, `!`, `?`, shell commands like `ls`) in code cells are commented out on write and
//! restored on read, following jupytext's own rules. Like jupytext, a code line that itself
//! starts with `# %%` reads back as a cell marker.

use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};

use crate::model::{CellType, NewCell, Notebook};

/// The jupytext format version written in the header.
const FORMAT_VERSION: &str = "1.3";
/// The jupytext release whose output this module reproduces byte for byte (and the version
/// the header names, as jupytext writes its own).
const JUPYTEXT_VERSION: &str = "1.16.4";

fn magic_regexes() -> &'static [Regex; 5] {
    static REGEXES: OnceLock<[Regex; 5]> = OnceLock::new();
    REGEXES.get_or_init(|| {
        [
            // Line and cell magics, possibly already commented.
            Regex::new(r"^\s*(# |#)*(%|%%|%%%)[a-zA-Z]").expect("valid"),
            // Help and shell escapes.
            Regex::new(r"^\s*(# |#)*\s*(\?|!)\s*[A-Za-z.~$\\/{}]").expect("valid"),
            // `x = %magic` and `x = !cmd`.
            Regex::new(r"^(# |#)*\s*([a-zA-Z_][a-zA-Z_$0-9]*)\s*=\s*(%|%%|%%%|!)[a-zA-Z](.*)")
                .expect("valid"),
            // `name?` help.
            Regex::new(r"^\s*(# )*[^\s]*\?\s*$").expect("valid"),
            // Shell commands IPython runs without `!`.
            Regex::new(
                r"^(# |#)*(cat|cd|cp|mv|rm|rmdir|mkdir|copy|ddir|echo|ls|ldir|ren)($|\s$|\s[^=,])",
            )
            .expect("valid"),
        ]
    })
}

/// jupytext's `is_magic` for Python code in an explicitly marked cell.
fn is_magic(line: &str) -> bool {
    magic_regexes().iter().any(|regex| regex.is_match(line))
}

/// Tracks whether a line starts inside a triple-quoted string (magics there are left alone).
#[derive(Default)]
struct Strings {
    open: Option<&'static str>,
}

impl Strings {
    fn quoted(&self) -> bool {
        self.open.is_some()
    }

    fn read(&mut self, line: &str) {
        let mut rest = line;
        loop {
            match self.open {
                Some(delimiter) => match rest.find(delimiter) {
                    Some(at) => {
                        rest = &rest[at + 3..];
                        self.open = None;
                    }
                    None => return,
                },
                None => {
                    let code = rest.split('#').next().unwrap_or_default();
                    let next = ["\"\"\"", "'''"]
                        .into_iter()
                        .filter_map(|delimiter| code.find(delimiter).map(|at| (at, delimiter)))
                        .min();
                    match next {
                        Some((at, delimiter)) => {
                            rest = &rest[at + 3..];
                            self.open = Some(delimiter);
                        }
                        None => return,
                    }
                }
            }
        }
    }
}

fn lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    text.split('\n').collect()
}

/// A notebook as a percent script.
pub fn to_percent(notebook: &Notebook) -> String {
    let mut header = Map::new();
    if let Some(kernelspec) = notebook.metadata().get("kernelspec") {
        header.insert("kernelspec".into(), kernelspec.clone());
    }
    let mut jupytext = notebook
        .metadata()
        .get("jupytext")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut representation = jupytext
        .get("text_representation")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    representation.insert("extension".into(), ".py".into());
    representation.insert("format_name".into(), "percent".into());
    representation.insert("format_version".into(), FORMAT_VERSION.into());
    representation.insert("jupytext_version".into(), JUPYTEXT_VERSION.into());
    jupytext.insert("text_representation".into(), Value::Object(representation));
    header.insert("jupytext".into(), Value::Object(jupytext));
    let mut header_text = String::from("# ---\n# jupyter:\n");
    yaml_block(&header, 1, &mut header_text);
    header_text.push_str("# ---");
    let header_lines: Vec<String> = header_text.lines().map(str::to_owned).collect();

    let mut texts: Vec<Vec<String>> = Vec::new();
    for cell in notebook.cells() {
        let kind = cell
            .get("cell_type")
            .and_then(Value::as_str)
            .unwrap_or("code");
        let mut marker = String::from("# %%");
        match kind {
            "markdown" => marker.push_str(" [markdown]"),
            "raw" => marker.push_str(" [raw]"),
            _ => {}
        }
        if let Some(metadata) = cell.get("metadata").and_then(Value::as_object) {
            for (key, value) in metadata {
                marker.push_str(&format!(" {key}={}", python_json(value)));
            }
        }
        let mut text = vec![marker];
        let source = crate::model::joined_text(cell.get("source"));
        let mut strings = Strings::default();
        for line in lines(&source) {
            text.push(match kind {
                "code" => {
                    let written = if !strings.quoted() && is_magic(line) {
                        let unindented = line.trim_start();
                        let indent = &line[..line.len() - unindented.len()];
                        format!("{indent}# {unindented}")
                    } else {
                        line.to_owned()
                    };
                    strings.read(line);
                    written
                }
                _ if line.is_empty() => "#".to_owned(),
                _ => format!("# {line}"),
            });
        }
        texts.push(text);
    }
    // Like jupytext: assembled from the end, so each gap follows its PEP 8 rule (two blank
    // lines around functions and classes, one otherwise).
    let mut following: Vec<String> = Vec::new();
    for mut text in texts.into_iter().rev().chain(std::iter::once(header_lines)) {
        let blank = pep8_lines_between_cells(&text, &following);
        text.extend(std::iter::repeat_n(String::new(), blank));
        text.extend(following);
        following = text;
    }
    following.join("\n")
}

fn quoted_flags(lines: &[String]) -> Vec<bool> {
    let mut strings = Strings::default();
    lines
        .iter()
        .map(|line| {
            let quoted = strings.quoted();
            strings.read(line);
            quoted
        })
        .collect()
}

/// jupytext's `next_instruction_is_function_or_class`.
fn next_instruction_is_function_or_class(lines: &[String]) -> bool {
    let quoted = quoted_flags(lines);
    for (index, line) in lines.iter().enumerate() {
        if quoted[index] {
            continue;
        }
        if line.trim().is_empty() {
            if index > 0 && lines[index - 1].trim().is_empty() {
                return false;
            }
            continue;
        }
        if line.starts_with("def ") || line.starts_with("class ") {
            return true;
        }
        if line.starts_with(['#', '@', ' ', ')']) {
            continue;
        }
        return false;
    }
    false
}

/// jupytext's `cell_ends_with_function_or_class`.
fn cell_ends_with_function_or_class(lines: &[String]) -> bool {
    let quoted = quoted_flags(lines);
    let unquoted: Vec<&String> = lines
        .iter()
        .zip(quoted)
        .filter(|(_, quoted)| !quoted)
        .map(|(line, _)| line)
        .rev()
        .collect();
    for (index, line) in unquoted.iter().enumerate() {
        if line.trim().is_empty() {
            if index > 0 && unquoted[index - 1].trim().is_empty() {
                return false;
            }
            continue;
        }
        if line.starts_with(['#', ' ', ')']) {
            continue;
        }
        return line.starts_with("def ") || line.starts_with("class ");
    }
    false
}

/// jupytext's `cell_ends_with_code`.
fn cell_ends_with_code(lines: &[String]) -> bool {
    lines
        .last()
        .is_some_and(|line| !line.trim().is_empty() && !line.starts_with('#'))
}

/// jupytext's `cell_has_code`.
fn cell_has_code(lines: &[String]) -> bool {
    for (index, line) in lines.iter().enumerate() {
        let stripped = line.trim();
        if stripped.starts_with('#') {
            continue;
        }
        if stripped.is_empty() {
            if index > 0 && lines[index - 1].trim().is_empty() {
                return false;
            }
            continue;
        }
        return true;
    }
    false
}

/// jupytext's `pep8_lines_between_cells` for `.py`.
fn pep8_lines_between_cells(previous: &[String], next: &[String]) -> usize {
    if next.is_empty() {
        return 1;
    }
    if previous.is_empty() {
        return 0;
    }
    if cell_ends_with_function_or_class(previous) {
        return if cell_has_code(next) { 2 } else { 1 };
    }
    if cell_ends_with_code(previous) && next_instruction_is_function_or_class(next) {
        return 2;
    }
    1
}

/// JSON with Python's `json.dumps` spacing (`, ` and `: `), as jupytext writes options.
fn python_json(value: &Value) -> String {
    match value {
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(python_json).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(key, value)| format!(
                    "{}: {}",
                    Value::String(key.clone()),
                    python_json(value)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// A YAML block mapping, commented, `depth` levels of two spaces in, as jupytext writes it
/// (PyYAML's `safe_dump`, block style, keys sorted): nested non-empty objects are blocks,
/// strings are plain, single-quoted or double-quoted by PyYAML's rules, other scalars as
/// PyYAML spells them; lists are written as a JSON flow (valid YAML, where PyYAML would write
/// a block list).
fn yaml_block(map: &Map<String, Value>, depth: usize, out: &mut String) {
    for (key, value) in map {
        let indent = "  ".repeat(depth);
        let key_text = yaml_string(key);
        match value {
            Value::Object(inner) if !inner.is_empty() => {
                out.push_str(&format!("# {indent}{key_text}:\n"));
                yaml_block(inner, depth + 1, out);
            }
            Value::Object(_) => out.push_str(&format!("# {indent}{key_text}: {{}}\n")),
            Value::String(text) => {
                out.push_str(&format!("# {indent}{key_text}: {}\n", yaml_string(text)))
            }
            Value::Null => out.push_str(&format!("# {indent}{key_text}: null\n")),
            other => out.push_str(&format!("# {indent}{key_text}: {}\n", python_json(other))),
        }
    }
}

/// A string as PyYAML's emitter writes it (`allow_unicode` off, as jupytext calls it): plain
/// when that reads back as the same string, else single-quoted, else (non-printable or
/// non-ASCII characters, line breaks) double-quoted with escapes.
fn yaml_string(text: &str) -> String {
    let special = text.chars().any(|c| !(' '..='~').contains(&c));
    if special {
        let mut quoted = String::from("\"");
        for c in text.chars() {
            match c {
                '"' => quoted.push_str("\\\""),
                '\\' => quoted.push_str("\\\\"),
                '\0' => quoted.push_str("\\0"),
                '\x07' => quoted.push_str("\\a"),
                '\x08' => quoted.push_str("\\b"),
                '\t' => quoted.push_str("\\t"),
                '\n' => quoted.push_str("\\n"),
                '\x0b' => quoted.push_str("\\v"),
                '\x0c' => quoted.push_str("\\f"),
                '\r' => quoted.push_str("\\r"),
                '\x1b' => quoted.push_str("\\e"),
                '\u{85}' => quoted.push_str("\\N"),
                '\u{a0}' => quoted.push_str("\\_"),
                '\u{2028}' => quoted.push_str("\\L"),
                '\u{2029}' => quoted.push_str("\\P"),
                ' '..='~' => quoted.push(c),
                c if (c as u32) <= 0xff => quoted.push_str(&format!("\\x{:02X}", c as u32)),
                c if (c as u32) <= 0xffff => quoted.push_str(&format!("\\u{:04X}", c as u32)),
                c => quoted.push_str(&format!("\\U{:08X}", c as u32)),
            }
        }
        quoted.push('"');
        return quoted;
    }
    if plain_allowed(text) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "''"))
    }
}

/// PyYAML's `analyze_scalar` (block context) and its resolver: a plain scalar must not start
/// or end with a space, start with an indicator, contain `: ` or ` #`, end with `:`, or read
/// back as anything but a string (numbers, booleans, null, dates, `=`, `<<`).
fn plain_allowed(text: &str) -> bool {
    if text.is_empty() || text.starts_with(' ') || text.ends_with(' ') {
        return false;
    }
    if text.starts_with("---") || text.starts_with("...") {
        return false;
    }
    let chars: Vec<char> = text.chars().collect();
    let first = chars[0];
    let followed_by_space = |index: usize| chars.get(index + 1).is_none_or(|next| *next == ' ');
    if "#,[]{}&*!|>'\"%@`".contains(first) {
        return false;
    }
    if "?:-".contains(first) && followed_by_space(0) {
        return false;
    }
    for (index, &c) in chars.iter().enumerate().skip(1) {
        if c == ':' && followed_by_space(index) {
            return false;
        }
        if c == '#' && chars[index - 1] == ' ' {
            return false;
        }
    }
    static IMPLICIT: OnceLock<Regex> = OnceLock::new();
    let implicit = IMPLICIT.get_or_init(|| {
        Regex::new(concat!(
            r"^(?:",
            r"yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF",
            r"|[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?",
            r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
            r"|[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+",
            r"|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+",
            r"|<<|~|null|Null|NULL|=",
            r"|[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]",
            r"|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?",
            r")$"
        ))
        .expect("a valid regex")
    });
    !implicit.is_match(text)
}

/// Parses the YAML subset of a jupytext header (block mappings of scalars).
fn parse_yaml(header: &[String]) -> Result<Map<String, Value>, String> {
    // (indent, map) stack; the root has indent -1.
    let mut stack: Vec<(isize, String, Map<String, Value>)> = vec![(-1, String::new(), Map::new())];
    for line in header {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let indent = (line.len() - line.trim_start().len()) as isize;
        let content = line.trim();
        let (key, value) = content
            .split_once(':')
            .ok_or_else(|| format!("unsupported YAML line in the header: {content:?}"))?;
        if key.starts_with('-') {
            return Err("block lists in the YAML header are not supported".to_owned());
        }
        let key = yaml_scalar(key.trim())
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("unsupported YAML key {key:?}"))?;
        while stack.last().is_some_and(|(level, _, _)| *level >= indent) {
            let (_, name, map) = stack.pop().expect("non-empty");
            let parent = &mut stack.last_mut().ok_or("bad YAML indentation")?.2;
            parent.insert(name, Value::Object(map));
        }
        let value = value.trim();
        if value.is_empty() {
            stack.push((indent, key, Map::new()));
        } else {
            let parent = &mut stack.last_mut().ok_or("bad YAML indentation")?.2;
            parent.insert(key, yaml_scalar(value));
        }
    }
    while stack.len() > 1 {
        let (_, name, map) = stack.pop().expect("non-empty");
        stack
            .last_mut()
            .expect("root")
            .2
            .insert(name, Value::Object(map));
    }
    Ok(stack.pop().map(|(_, _, map)| map).unwrap_or_default())
}

fn yaml_scalar(text: &str) -> Value {
    if let Some(inner) = text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    {
        return Value::String(yaml_unescape(inner));
    }
    if text == "{}" {
        return Value::Object(Map::new());
    }
    if let Some(inner) = text
        .strip_prefix('\'')
        .and_then(|rest| rest.strip_suffix('\''))
    {
        return Value::String(inner.replace("''", "'"));
    }
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        // YAML reads 1.16.4 as a string and 1.3 as a number; JSON agrees on both.
        return value;
    }
    match text {
        "~" | "Null" | "NULL" => Value::Null,
        "True" | "TRUE" => Value::Bool(true),
        "False" | "FALSE" => Value::Bool(false),
        _ => Value::String(text.to_owned()),
    }
}

/// The escapes of a YAML double-quoted scalar (`\\xXX`, `\\uXXXX`, `\\UXXXXXXXX` and the named
/// ones), as PyYAML writes them.
fn yaml_unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(escape) = chars.next() else { break };
        let hex = |chars: &mut std::str::Chars<'_>, digits: usize| {
            let code: String = chars.by_ref().take(digits).collect();
            u32::from_str_radix(&code, 16)
                .ok()
                .and_then(char::from_u32)
                .unwrap_or('\u{fffd}')
        };
        out.push(match escape {
            '0' => '\0',
            'a' => '\x07',
            'b' => '\x08',
            't' | '\t' => '\t',
            'n' => '\n',
            'v' => '\x0b',
            'f' => '\x0c',
            'r' => '\r',
            'e' => '\x1b',
            ' ' => ' ',
            'N' => '\u{85}',
            '_' => '\u{a0}',
            'L' => '\u{2028}',
            'P' => '\u{2029}',
            'x' => hex(&mut chars, 2),
            'u' => hex(&mut chars, 4),
            'U' => hex(&mut chars, 8),
            other => other,
        });
    }
    out
}

/// Parses `key=<json> key=<json> …`.
fn parse_options(text: &str) -> Option<Map<String, Value>> {
    let mut options = Map::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let equals = rest.find('=')?;
        let key = &rest[..equals];
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        {
            return None;
        }
        let after = &rest[equals + 1..];
        let mut values = serde_json::Deserializer::from_str(after).into_iter::<Value>();
        let value = values.next()?.ok()?;
        let consumed = values.byte_offset();
        options.insert(key.to_owned(), value);
        rest = after[consumed..].trim_start();
    }
    Some(options)
}

/// A marker line's cell type and metadata: `[title] [type] [key=<json> …]`, where whatever is
/// not a type or valid options is the title (kept as metadata `title`, as jupytext does).
fn parse_marker(rest: &str) -> (CellType, Map<String, Value>) {
    let rest = rest.trim();
    let mut kind = CellType::Code;
    let mut title = String::new();
    let mut options = rest;
    for (token, cell_type) in [
        ("[markdown]", CellType::Markdown),
        ("[md]", CellType::Markdown),
        ("[raw]", CellType::Raw),
    ] {
        if let Some(at) = rest.find(token) {
            kind = cell_type;
            title = rest[..at].trim().to_owned();
            options = &rest[at + token.len()..];
            break;
        }
    }
    let mut metadata = match parse_options(options) {
        Some(metadata) => metadata,
        None => {
            title = format!("{title} {}", options.trim()).trim().to_owned();
            Map::new()
        }
    };
    if !title.is_empty() {
        metadata.insert("title".into(), title.into());
    }
    (kind, metadata)
}

/// Reads a percent script.
pub fn parse_percent(text: &str) -> Result<Notebook, String> {
    let all: Vec<&str> = text.lines().collect();
    let mut position = 0;
    let mut metadata = Map::new();
    if all.first().map(|line| line.trim_end()) == Some("# ---") {
        let end = all
            .iter()
            .skip(1)
            .position(|line| line.trim_end() == "# ---")
            .ok_or("the YAML header (# ---) is not closed")?
            + 1;
        let header: Vec<String> = all[1..end]
            .iter()
            .map(|line| {
                line.strip_prefix("# ")
                    .or_else(|| line.strip_prefix('#'))
                    .unwrap_or(line)
                    .to_owned()
            })
            .collect();
        let parsed = parse_yaml(&header)?;
        if let Some(Value::Object(jupyter)) = parsed.get("jupyter") {
            metadata = jupyter.clone();
        }
        position = end + 1;
    }
    // Cells: (type, metadata, lines).
    let mut cells: Vec<(CellType, Map<String, Value>, Vec<&str>)> = Vec::new();
    let mut preamble: Vec<&str> = Vec::new();
    for line in &all[position..] {
        if let Some(rest) = line.strip_prefix("# %%") {
            if rest.is_empty() || rest.starts_with(' ') {
                let (kind, cell_metadata) = parse_marker(rest);
                cells.push((kind, cell_metadata, Vec::new()));
                continue;
            }
        }
        match cells.last_mut() {
            Some((_, _, body)) => body.push(line),
            None => preamble.push(line),
        }
    }
    if preamble.iter().any(|line| !line.trim().is_empty()) {
        cells.insert(0, (CellType::Code, Map::new(), preamble));
    }
    let mut notebook = Notebook::new("python3", "Python 3", "python");
    notebook.set_metadata(metadata);
    for (kind, cell_metadata, mut body) in cells {
        while body.first().is_some_and(|line| line.trim().is_empty()) && kind != CellType::Code {
            body.remove(0);
        }
        while body.last().is_some_and(|line| line.trim().is_empty()) {
            body.pop();
        }
        let source_lines: Vec<String> = match kind {
            CellType::Code => {
                let mut strings = Strings::default();
                body.iter()
                    .map(|line| {
                        let restored = if !strings.quoted() && is_magic(line) {
                            uncomment(line)
                        } else {
                            (*line).to_owned()
                        };
                        strings.read(line);
                        restored
                    })
                    .collect()
            }
            _ => body.iter().map(|line| uncomment(line)).collect(),
        };
        notebook
            .insert(
                None,
                NewCell {
                    cell_type: kind,
                    source: source_lines.join("\n"),
                    metadata: cell_metadata,
                },
            )
            .map_err(|error| error.to_string())?;
    }
    notebook.positional_ids();
    Ok(notebook)
}

/// jupytext's `unesc`: removes one `# ` (or `#`) after the indentation.
fn uncomment(line: &str) -> String {
    let unindented = line.trim_start();
    let indent = &line[..line.len() - unindented.len()];
    if let Some(rest) = unindented.strip_prefix("# ") {
        format!("{indent}{rest}")
    } else if let Some(rest) = unindented.strip_prefix('#') {
        format!("{indent}{rest}")
    } else {
        line.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::joined_text;

    #[test]
    fn round_trips_cells_metadata_and_magics() {
        let mut notebook = Notebook::new("python3", "Python 3", "python");
        let cells = [
            (
                CellType::Code,
                "import os\n%matplotlib inline\nx = 1",
                Map::new(),
            ),
            (CellType::Markdown, "# Title\n\nSome *text*", Map::new()),
            (
                CellType::Code,
                "!ls\ns = \"\"\"\n%not magic inside a string\n\"\"\"\ny = 2",
                serde_json::json!({"tags": ["a", "b"], "k": {"n": 1}})
                    .as_object()
                    .cloned()
                    .expect("object"),
            ),
            (CellType::Raw, "raw text", Map::new()),
        ];
        for (kind, source, metadata) in &cells {
            notebook
                .insert(
                    None,
                    NewCell {
                        cell_type: *kind,
                        source: (*source).to_owned(),
                        metadata: metadata.clone(),
                    },
                )
                .expect("insert");
        }
        let text = to_percent(&notebook);
        assert!(
            text.starts_with("# ---\n# jupyter:\n#   jupytext:\n"),
            "{text}"
        );
        assert!(text.contains("\n# %matplotlib inline\n"), "{text}");
        assert!(text.contains("\n%not magic inside a string\n"), "{text}");
        assert!(
            text.contains("# %% tags=[\"a\", \"b\"] k={\"n\": 1}\n")
                || text.contains("# %% k={\"n\": 1} tags=[\"a\", \"b\"]\n"),
            "{text}"
        );
        let back = parse_percent(&text).expect("parse");
        assert_eq!(back.cells().len(), cells.len());
        for (cell, (kind, source, metadata)) in back.cells().iter().zip(&cells) {
            assert_eq!(cell["cell_type"], kind.as_str());
            assert_eq!(joined_text(cell.get("source")), *source);
            assert_eq!(cell["metadata"], Value::Object(metadata.clone()));
        }
        assert_eq!(back.metadata()["kernelspec"]["name"], "python3");
        assert_eq!(
            back.metadata()["jupytext"]["text_representation"]["format_version"],
            "1.3"
        );
        assert_eq!(crate::model::cell_id(&back.cells()[2]), Some("cell-2"));
        // Writing what was read gives the same script.
        assert_eq!(to_percent(&back), text);
    }

    #[test]
    fn reads_what_jupytext_writes() {
        let text = "# ---\n# jupyter:\n#   jupytext:\n#     text_representation:\n#       extension: .py\n#       format_name: percent\n#       format_version: '1.3'\n#       jupytext_version: 1.16.4\n#   kernelspec:\n#     display_name: Python 3\n#     language: python\n#     name: python3\n# ---\n\n# %%\n# !ls\n  # %timeit 1\n# cd /tmp\n# comment\n\n# %% T [markdown]\n# line\n#\n# end\n\n# %% name=\"x y\"\na = 1\n";
        let notebook = parse_percent(text).expect("parse");
        let metadata = notebook.metadata();
        assert_eq!(metadata["kernelspec"]["display_name"], "Python 3");
        assert_eq!(
            metadata["jupytext"]["text_representation"]["jupytext_version"],
            "1.16.4"
        );
        let cells = notebook.cells();
        assert_eq!(
            joined_text(cells[0].get("source")),
            "!ls\n  %timeit 1\ncd /tmp\n# comment"
        );
        assert_eq!(cells[1]["cell_type"], "markdown");
        assert_eq!(joined_text(cells[1].get("source")), "line\n\nend");
        assert_eq!(cells[1]["metadata"]["title"], "T");
        assert_eq!(cells[2]["metadata"]["name"], "x y");
    }

    #[test]
    fn a_script_without_header_or_first_marker_is_code() {
        let notebook = parse_percent("x = 1\n\n# %%\ny = 2\n").expect("parse");
        assert_eq!(notebook.cells().len(), 2);
        assert_eq!(joined_text(notebook.cells()[0].get("source")), "x = 1");
    }
}
