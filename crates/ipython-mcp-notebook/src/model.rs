//! The nbformat 4 model, kept as JSON so unknown fields survive, with the few typed operations
//! the tools need: stable cell ids, cell edits, outputs, and Jupyter's own serialization.
//!
//! Why not the runtimed `nbformat` crate: a typed model re-serializes what it parsed, so a
//! field it does not model (or models differently) is at risk on every write; editing the JSON
//! in place guarantees that whatever we do not touch is written back as it was read.

use std::collections::HashSet;

use serde::Serialize;
use serde_json::{json, Map, Value};

use ipython_mcp_text::shorten;

use crate::error::Error;

/// The minor version written (4.5: the first with cell ids).
pub const NBFORMAT_MINOR: u64 = 5;
/// Longest accepted cell id (nbformat 4.5 schema).
const MAX_ID_CHARS: usize = 64;

/// Which cell: by stable id or by 0-based index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CellRef {
    Id(String),
    Index(usize),
}

impl std::fmt::Display for CellRef {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CellRef::Id(id) => write!(formatter, "with id {:?}", shorten(id, 64)),
            CellRef::Index(index) => write!(formatter, "at index {index}"),
        }
    }
}

/// A cell's type.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CellType {
    Code,
    Markdown,
    Raw,
}

impl CellType {
    pub fn as_str(self) -> &'static str {
        match self {
            CellType::Code => "code",
            CellType::Markdown => "markdown",
            CellType::Raw => "raw",
        }
    }

    fn parse(value: &str) -> Option<CellType> {
        match value {
            "code" => Some(CellType::Code),
            "markdown" => Some(CellType::Markdown),
            "raw" => Some(CellType::Raw),
            _ => None,
        }
    }
}

/// A cell to add.
#[derive(Debug, Clone)]
pub struct NewCell {
    pub cell_type: CellType,
    pub source: String,
    pub metadata: Map<String, Value>,
}

/// One saved output, as Jupyter writes it (nbformat 4 output types).
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Stream {
        name: String,
        text: String,
    },
    DisplayData {
        data: Map<String, Value>,
        metadata: Map<String, Value>,
    },
    ExecuteResult {
        execution_count: Option<u64>,
        data: Map<String, Value>,
        metadata: Map<String, Value>,
    },
    Error {
        ename: String,
        evalue: String,
        traceback: Vec<String>,
    },
    /// An nbformat output object as the kernel's output log rebuilt it, written as it is.
    Raw(Map<String, Value>),
}

impl Output {
    /// The nbformat 4 output object.
    pub fn to_json(&self) -> Value {
        match self {
            Output::Stream { name, text } => {
                json!({"output_type": "stream", "name": name, "text": text})
            }
            Output::DisplayData { data, metadata } => {
                json!({"output_type": "display_data", "data": data, "metadata": metadata})
            }
            Output::ExecuteResult {
                execution_count,
                data,
                metadata,
            } => json!({
                "output_type": "execute_result",
                "execution_count": execution_count,
                "data": data,
                "metadata": metadata,
            }),
            Output::Error {
                ename,
                evalue,
                traceback,
            } => json!({
                "output_type": "error", "ename": ename, "evalue": evalue, "traceback": traceback,
            }),
            Output::Raw(output) => Value::Object(output.clone()),
        }
    }
}

/// An nbformat 4 notebook.
#[derive(Debug, Clone, PartialEq)]
pub struct Notebook {
    root: Map<String, Value>,
}

impl Notebook {
    /// An empty notebook for a kernel (nbformat 4.5).
    pub fn new(kernel_name: &str, display_name: &str, language: &str) -> Notebook {
        let root = json!({
            "cells": [],
            "metadata": {
                "kernelspec": {"display_name": display_name, "language": language, "name": kernel_name},
                "language_info": {"name": language},
            },
            "nbformat": 4,
            "nbformat_minor": NBFORMAT_MINOR,
        });
        let Value::Object(root) = root else {
            unreachable!("a JSON object literal")
        };
        Notebook { root }
    }

    /// Parses and checks the structure the tools rely on (nbformat 4, cells, metadata).
    pub fn parse(bytes: &[u8]) -> Result<Notebook, String> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|error| format!("not JSON: {error}"))?;
        Notebook::from_value(value)
    }

    /// [`Notebook::parse`] for a notebook that is JSON already (a Jupyter server's contents, a
    /// live document).
    pub fn from_value(value: Value) -> Result<Notebook, String> {
        let Value::Object(root) = value else {
            return Err("the top level is not a JSON object".to_owned());
        };
        match root.get("nbformat").and_then(Value::as_u64) {
            Some(4) => {}
            Some(other) => return Err(format!("nbformat {other} is not supported (only 4)")),
            None => return Err("no integer `nbformat` field".to_owned()),
        }
        if root.get("nbformat_minor").and_then(Value::as_u64).is_none() {
            return Err("no integer `nbformat_minor` field".to_owned());
        }
        if !root.get("metadata").is_some_and(Value::is_object) {
            return Err("`metadata` is not an object".to_owned());
        }
        let Some(cells) = root.get("cells").and_then(Value::as_array) else {
            return Err("`cells` is not an array".to_owned());
        };
        for (index, cell) in cells.iter().enumerate() {
            let problem = |what: &str| format!("cell {index}: {what}");
            let Some(cell) = cell.as_object() else {
                return Err(problem("not an object"));
            };
            let kind = cell
                .get("cell_type")
                .and_then(Value::as_str)
                .and_then(CellType::parse)
                .ok_or_else(|| problem("`cell_type` is not code, markdown or raw"))?;
            match cell.get("source") {
                Some(Value::String(_)) => {}
                Some(Value::Array(lines)) if lines.iter().all(Value::is_string) => {}
                _ => return Err(problem("`source` is not a string or a list of strings")),
            }
            if !cell.get("metadata").is_some_and(Value::is_object) {
                return Err(problem("`metadata` is not an object"));
            }
            if kind == CellType::Code && !cell.get("outputs").is_some_and(Value::is_array) {
                return Err(problem("a code cell without an `outputs` list"));
            }
        }
        Ok(Notebook { root })
    }

    /// The file bytes, exactly as Jupyter writes them: keys sorted, one-space indent, non-ASCII
    /// kept, multi-line strings split into lists of lines, a final newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut root = Value::Object(self.root.clone());
        split_multiline(&mut root);
        let root = sorted(root);
        let mut bytes = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
        let mut serializer = serde_json::Serializer::with_formatter(&mut bytes, formatter);
        root.serialize(&mut serializer)
            .expect("a JSON value always serializes");
        bytes.push(b'\n');
        bytes
    }

    /// The notebook as JSON.
    pub fn as_json(&self) -> &Map<String, Value> {
        &self.root
    }

    pub fn nbformat_minor(&self) -> u64 {
        self.root
            .get("nbformat_minor")
            .and_then(Value::as_u64)
            .unwrap_or(0)
    }

    pub fn metadata(&self) -> &Map<String, Value> {
        self.root
            .get("metadata")
            .and_then(Value::as_object)
            .expect("checked by parse")
    }

    pub fn set_metadata(&mut self, metadata: Map<String, Value>) {
        self.root.insert("metadata".into(), Value::Object(metadata));
    }

    /// The kernelspec name in `metadata.kernelspec.name`, if any.
    pub fn kernel_name(&self) -> Option<&str> {
        self.metadata()
            .get("kernelspec")?
            .get("name")?
            .as_str()
            .filter(|name| !name.is_empty())
    }

    pub fn cells(&self) -> &[Value] {
        self.root
            .get("cells")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .expect("checked by parse")
    }

    fn cells_mut(&mut self) -> &mut Vec<Value> {
        self.root
            .get_mut("cells")
            .and_then(Value::as_array_mut)
            .expect("checked by parse")
    }

    fn cell_mut(&mut self, index: usize) -> &mut Map<String, Value> {
        self.cells_mut()[index]
            .as_object_mut()
            .expect("checked by parse")
    }

    /// Brings the notebook to nbformat 4.5 before a write: every cell gets a valid, unique id
    /// (existing valid ids are kept). Returns whether anything changed.
    pub fn ensure_ids(&mut self) -> bool {
        let mut changed = false;
        if self.nbformat_minor() < NBFORMAT_MINOR {
            self.root
                .insert("nbformat_minor".into(), NBFORMAT_MINOR.into());
            changed = true;
        }
        let mut seen = HashSet::new();
        for index in 0..self.cells().len() {
            let existing = cell_id(&self.cells()[index]).map(str::to_owned);
            let keep = existing
                .as_deref()
                .is_some_and(|id| valid_id(id) && !seen.contains(id));
            let id = match existing {
                Some(id) if keep => id,
                _ => {
                    let id = self.fresh_id(&seen);
                    self.cell_mut(index).insert("id".into(), id.clone().into());
                    changed = true;
                    id
                }
            };
            seen.insert(id);
        }
        changed
    }

    /// Gives every cell the id `cell-<index>`: for formats that store no ids (percent
    /// scripts), so that a cell read twice has the same id.
    pub fn positional_ids(&mut self) {
        for index in 0..self.cells().len() {
            self.cell_mut(index)
                .insert("id".into(), format!("cell-{index}").into());
        }
    }

    fn fresh_id(&self, also_taken: &HashSet<String>) -> String {
        loop {
            // nbformat's own generator: 8 hex digits of a random UUID.
            let id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
            let taken = also_taken.contains(&id)
                || self.cells().iter().any(|cell| cell_id(cell) == Some(&id));
            if !taken {
                return id;
            }
        }
    }

    /// The index of the cell `reference` names.
    pub fn locate(&self, reference: &CellRef) -> Result<usize, Error> {
        let cells = self.cells();
        let found = match reference {
            CellRef::Index(index) => (*index < cells.len()).then_some(*index),
            CellRef::Id(id) => cells.iter().position(|cell| cell_id(cell) == Some(id)),
        };
        found.ok_or_else(|| Error::CellNotFound {
            reference: reference.to_string(),
            cells: cells.len(),
        })
    }

    /// Inserts a cell at `index` (`None`: at the end) and returns its index and id.
    pub fn insert(
        &mut self,
        index: Option<usize>,
        cell: NewCell,
    ) -> Result<(usize, String), Error> {
        let length = self.cells().len();
        let index = index.unwrap_or(length);
        if index > length {
            return Err(Error::invalid(format!(
                "index {index} is past the end (the notebook has {length} cells; {length} appends)"
            )));
        }
        let id = self.fresh_id(&HashSet::new());
        let mut value = Map::new();
        value.insert("cell_type".into(), cell.cell_type.as_str().into());
        value.insert("id".into(), id.clone().into());
        value.insert("metadata".into(), Value::Object(cell.metadata));
        value.insert("source".into(), cell.source.into());
        if cell.cell_type == CellType::Code {
            value.insert("execution_count".into(), Value::Null);
            value.insert("outputs".into(), Value::Array(Vec::new()));
        }
        self.cells_mut().insert(index, Value::Object(value));
        Ok((index, id))
    }

    /// Replaces a cell's source, metadata and/or type; its id stays.
    pub fn update(
        &mut self,
        index: usize,
        source: Option<String>,
        metadata: Option<Map<String, Value>>,
        cell_type: Option<CellType>,
    ) {
        let cell = self.cell_mut(index);
        if let Some(source) = source {
            cell.insert("source".into(), source.into());
        }
        if let Some(metadata) = metadata {
            cell.insert("metadata".into(), Value::Object(metadata));
        }
        if let Some(cell_type) = cell_type {
            cell.insert("cell_type".into(), cell_type.as_str().into());
            if cell_type == CellType::Code {
                cell.entry("execution_count").or_insert(Value::Null);
                cell.entry("outputs").or_insert(Value::Array(Vec::new()));
                cell.remove("attachments");
            } else {
                cell.remove("execution_count");
                cell.remove("outputs");
            }
        }
    }

    /// Removes a cell and returns it.
    pub fn delete(&mut self, index: usize) -> Value {
        self.cells_mut().remove(index)
    }

    /// Moves a cell so that it ends up at `to` (an index in the notebook after the move).
    pub fn move_cell(&mut self, from: usize, to: usize) -> Result<(), Error> {
        let length = self.cells().len();
        if to >= length {
            return Err(Error::invalid(format!(
                "to_index {to} is out of range (the notebook has {length} cells)"
            )));
        }
        let cell = self.cells_mut().remove(from);
        self.cells_mut().insert(to, cell);
        Ok(())
    }

    /// Clears a code cell's outputs and execution count; other cells are left alone. Returns
    /// whether it was a code cell.
    pub fn clear_outputs(&mut self, index: usize) -> bool {
        let cell = self.cell_mut(index);
        if cell.get("cell_type").and_then(Value::as_str) != Some("code") {
            return false;
        }
        cell.insert("outputs".into(), Value::Array(Vec::new()));
        cell.insert("execution_count".into(), Value::Null);
        true
    }

    /// Replaces a code cell's outputs and execution count (after running it).
    pub fn set_outputs(&mut self, index: usize, execution_count: Option<u64>, outputs: &[Output]) {
        let cell = self.cell_mut(index);
        cell.insert(
            "outputs".into(),
            Value::Array(outputs.iter().map(Output::to_json).collect()),
        );
        cell.insert("execution_count".into(), execution_count.into());
    }

    /// Replaces one cell's metadata.
    pub fn set_cell_metadata(&mut self, index: usize, metadata: Map<String, Value>) {
        self.cell_mut(index)
            .insert("metadata".into(), Value::Object(metadata));
    }
}

/// A cell's id, if it has a string one.
pub fn cell_id(cell: &Value) -> Option<&str> {
    cell.get("id").and_then(Value::as_str)
}

/// A cell's source as one string (Jupyter stores it as a string or a list of lines).
pub fn joined_text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(lines)) => lines.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_CHARS
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// nbformat's `split_lines` and `strip_transient`, as its writer applies them: multi-line
/// strings become lists of lines (Python's `splitlines(True)`) in sources, attachments, stream
/// text and textual mime data of code cell outputs; transient metadata is dropped.
fn split_multiline(root: &mut Value) {
    if let Some(metadata) = root.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["orig_nbformat", "orig_nbformat_minor", "signature"] {
            metadata.remove(key);
        }
    }
    let Some(cells) = root.get_mut("cells").and_then(Value::as_array_mut) else {
        return;
    };
    for cell in cells {
        if let Some(metadata) = cell.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("trusted");
        }
        if let Some(source) = cell.get_mut("source") {
            split_string(source);
        }
        if let Some(attachments) = cell.get_mut("attachments").and_then(Value::as_object_mut) {
            for bundle in attachments.values_mut() {
                split_bundle(bundle);
            }
        }
        if cell.get("cell_type").and_then(Value::as_str) != Some("code") {
            continue;
        }
        let Some(outputs) = cell.get_mut("outputs").and_then(Value::as_array_mut) else {
            continue;
        };
        for output in outputs {
            match output.get("output_type").and_then(Value::as_str) {
                Some("execute_result" | "display_data") => {
                    if let Some(data) = output.get_mut("data") {
                        split_bundle(data);
                    }
                }
                Some("stream") => {
                    if let Some(text) = output.get_mut("text") {
                        split_string(text);
                    }
                }
                _ => {}
            }
        }
    }
}

fn split_bundle(bundle: &mut Value) {
    let Some(bundle) = bundle.as_object_mut() else {
        return;
    };
    for (mime, value) in bundle.iter_mut() {
        let textual = mime.starts_with("text/")
            || mime == "application/javascript"
            || mime == "image/svg+xml";
        if textual {
            split_string(value);
        }
    }
}

fn split_string(value: &mut Value) {
    if let Value::String(text) = value {
        let lines = python_splitlines(text)
            .into_iter()
            .map(|line| Value::String(line.to_owned()))
            .collect();
        *value = Value::Array(lines);
    }
}

/// Python's `str.splitlines(keepends=True)`: lines end at `\n`, `\r\n`, `\r`, `\v`, `\f`,
/// `\x1c`-`\x1e`, `\x85`, U+2028 and U+2029.
fn python_splitlines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let end = match c {
            '\r' => match chars.peek() {
                Some((next, '\n')) => {
                    let next = *next;
                    chars.next();
                    next + 1
                }
                _ => at + 1,
            },
            '\n' | '\u{b}' | '\u{c}' | '\u{1c}' | '\u{1d}' | '\u{1e}' | '\u{85}' | '\u{2028}'
            | '\u{2029}' => at + c.len_utf8(),
            _ => continue,
        };
        lines.push(&text[start..end]);
        start = end;
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

/// The same value with every object's keys in sorted order (whatever order the map keeps).
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|left, right| left.0.cmp(&right.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(key, value)| (key, sorted(value)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(source: &str) -> NewCell {
        NewCell {
            cell_type: CellType::Code,
            source: source.to_owned(),
            metadata: Map::new(),
        }
    }

    #[test]
    fn writes_like_jupyter() {
        let mut notebook = Notebook::new("python3", "Python 3", "python");
        notebook
            .insert(None, code("a = 1\nprint(a)"))
            .expect("insert");
        let text = String::from_utf8(notebook.to_bytes()).expect("utf-8");
        let id = cell_id(&notebook.cells()[0]).expect("id").to_owned();
        let expected = format!(
            "{{\n \"cells\": [\n  {{\n   \"cell_type\": \"code\",\n   \"execution_count\": null,\n   \"id\": \"{id}\",\n   \"metadata\": {{}},\n   \"outputs\": [],\n   \"source\": [\n    \"a = 1\\n\",\n    \"print(a)\"\n   ]\n  }}\n ],\n \"metadata\": {{\n  \"kernelspec\": {{\n   \"display_name\": \"Python 3\",\n   \"language\": \"python\",\n   \"name\": \"python3\"\n  }},\n  \"language_info\": {{\n   \"name\": \"python\"\n  }}\n }},\n \"nbformat\": 4,\n \"nbformat_minor\": 5\n}}\n"
        );
        assert_eq!(text, expected);
        // Reading it back gives the same notebook (sources joined).
        let again = Notebook::parse(text.as_bytes()).expect("parse");
        assert_eq!(again.to_bytes(), text.as_bytes());
        assert_eq!(
            joined_text(again.cells()[0].get("source")),
            "a = 1\nprint(a)"
        );
    }

    #[test]
    fn unknown_fields_survive_edits() {
        let text = r#"{"cells": [{"cell_type": "markdown", "metadata": {"x-tool": {"k": [1, 2]}}, "source": "hi", "future_field": true}],
            "metadata": {"widgets": {"state": {}}}, "nbformat": 4, "nbformat_minor": 4, "extra": "kept"}"#;
        let mut notebook = Notebook::parse(text.as_bytes()).expect("parse");
        assert!(notebook.ensure_ids());
        notebook.update(0, Some("changed".into()), None, None);
        let json = notebook.as_json();
        assert_eq!(json["extra"], "kept");
        assert_eq!(json["nbformat_minor"], 5);
        assert_eq!(json["metadata"]["widgets"], json!({"state": {}}));
        assert_eq!(json["cells"][0]["future_field"], true);
        assert_eq!(json["cells"][0]["metadata"]["x-tool"]["k"], json!([1, 2]));
        assert!(valid_id(cell_id(&json["cells"][0]).expect("id")));
    }

    #[test]
    fn ids_are_stable_and_duplicates_repaired() {
        let text = r#"{"cells": [
            {"cell_type": "raw", "id": "keep-me", "metadata": {}, "source": ""},
            {"cell_type": "raw", "id": "keep-me", "metadata": {}, "source": ""},
            {"cell_type": "raw", "id": "bad id!", "metadata": {}, "source": ""}],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}"#;
        let mut notebook = Notebook::parse(text.as_bytes()).expect("parse");
        assert!(notebook.ensure_ids());
        let ids: Vec<String> = notebook
            .cells()
            .iter()
            .map(|cell| cell_id(cell).expect("id").to_owned())
            .collect();
        assert_eq!(ids[0], "keep-me");
        assert_ne!(ids[1], "keep-me");
        assert!(valid_id(&ids[2]));
        assert!(!notebook.ensure_ids(), "a second pass changes nothing");
        notebook.move_cell(0, 2).expect("move");
        assert_eq!(
            notebook
                .locate(&CellRef::Id(ids[0].clone()))
                .expect("found"),
            2
        );
        notebook.set_outputs(2, Some(3), &[]);
        assert_eq!(cell_id(&notebook.cells()[2]), Some("keep-me"));
    }

    #[test]
    fn lines_split_like_python() {
        assert_eq!(python_splitlines(""), Vec::<&str>::new());
        assert_eq!(python_splitlines("a\nb"), ["a\n", "b"]);
        assert_eq!(python_splitlines("a\r\nb\rc\n"), ["a\r\n", "b\r", "c\n"]);
        assert_eq!(
            python_splitlines("a\u{2028}b\u{c}"),
            ["a\u{2028}", "b\u{c}"]
        );
    }

    #[test]
    fn refuses_what_is_not_a_notebook() {
        for bad in [
            "[]",
            "{",
            r#"{"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "cells": []}"#,
            r#"{"nbformat": 4, "nbformat_minor": 5, "metadata": {}}"#,
            r#"{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", "metadata": {}, "source": ""}]}"#,
            r#"{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "weird", "metadata": {}, "source": ""}]}"#,
        ] {
            assert!(Notebook::parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn cell_operations_check_their_indices() {
        let mut notebook = Notebook::new("python3", "Python 3", "python");
        assert!(notebook.insert(Some(1), code("x")).is_err());
        notebook.insert(Some(0), code("b")).expect("insert");
        notebook.insert(Some(0), code("a")).expect("insert");
        assert_eq!(joined_text(notebook.cells()[0].get("source")), "a");
        assert!(notebook.move_cell(0, 2).is_err());
        assert!(notebook.locate(&CellRef::Index(2)).is_err());
        notebook.update(0, None, None, Some(CellType::Markdown));
        assert!(notebook.cells()[0].get("outputs").is_none());
        assert!(!notebook.clear_outputs(0));
        assert!(notebook.clear_outputs(1));
    }
}
