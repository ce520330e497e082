//! jupyter_ydoc's notebook layout (`YNotebook`, document version 2.0.0), read and written.
//!
//! The shared document has three roots:
//! - `cells`: an Array of Maps, one per cell, with `id`, `cell_type`, `source` (a Text),
//!   `metadata` (a Map whose values are plain JSON), `execution_count` and `outputs` (an Array
//!   of Maps, a stream output's `text` being a Text) for code cells, `execution_state`
//!   (`"idle"`/`"running"`, never written to the file), and `attachments` when present;
//! - `meta`: a Map with `nbformat`, `nbformat_minor` and `metadata` (a Map, or plain JSON
//!   when an older client wrote it);
//! - `state`: the room's own flags (`dirty`, `path`, `document_id`), never ours to write.
//!
//! Reading follows `YNotebook.get()`: `execution_state` dropped, integral numbers as integers
//! (Yjs stores every number as a float), cell ids stripped for nbformat 4.0–4.4, empty
//! `attachments` of raw and markdown cells dropped, exact duplicate cells skipped.
//! Writing follows `YNotebook.create_ycell`: nested types for `source`, `metadata`,
//! `outputs` (and each output, and a stream's `text`), `execution_state` `"idle"` for a new
//! code cell.

use std::sync::Arc;

use serde_json::{Map as JsonMap, Value};
use yrs::types::ToJson as _;
use yrs::{
    Any, Array as _, ArrayPrelim, ArrayRef, Doc, In, Map as _, MapPrelim, MapRef, Out, ReadTxn,
    TextPrelim,
};

/// The root array of cells.
pub(crate) const CELLS: &str = "cells";
/// The root map of notebook-level fields.
pub(crate) const META: &str = "meta";
/// The key of a cell's execution state (not part of nbformat).
pub(crate) const EXECUTION_STATE: &str = "execution_state";

/// The shared roots of a notebook document.
#[derive(Clone)]
pub(crate) struct Roots {
    pub cells: ArrayRef,
    pub meta: MapRef,
}

impl Roots {
    /// The roots, created (empty) if the document has none yet: a root type exists in every
    /// Yjs document by name, so this writes nothing.
    pub fn of(doc: &Doc) -> Roots {
        Roots {
            cells: doc.get_or_insert_array(CELLS),
            meta: doc.get_or_insert_map(META),
        }
    }
}

/// The notebook as `YNotebook.get()` renders it.
pub(crate) fn notebook<T: ReadTxn>(roots: &Roots, txn: &T) -> Value {
    let meta = match json_of(roots.meta.to_json(txn)) {
        Value::Object(meta) => meta,
        _ => JsonMap::new(),
    };
    let nbformat = meta.get("nbformat").and_then(Value::as_i64).unwrap_or(0);
    let nbformat_minor = meta
        .get("nbformat_minor")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut cells: Vec<Value> = Vec::new();
    // Exact duplicates (same id, same content) are skipped, as jupyter_ydoc does; a
    // duplicate id with other content is kept as it is (jupyter_ydoc renames it in the
    // shared document, a write we leave to the server).
    let mut seen: Vec<(String, usize)> = Vec::new();
    for index in 0..roots.cells.len(txn) {
        let Some(Out::YMap(cell)) = roots.cells.get(txn, index) else {
            continue;
        };
        let cell = cell_json(&cell, txn, nbformat, nbformat_minor);
        if let Some(id) = cell.get("id").and_then(Value::as_str) {
            if seen
                .iter()
                .any(|(seen_id, at)| seen_id == id && cells[*at] == cell)
            {
                continue;
            }
            seen.push((id.to_owned(), cells.len()));
        }
        cells.push(cell);
    }
    let mut notebook = JsonMap::new();
    notebook.insert("cells".to_owned(), Value::Array(cells));
    notebook.insert(
        "metadata".to_owned(),
        meta.get("metadata")
            .cloned()
            .unwrap_or_else(|| Value::Object(JsonMap::new())),
    );
    notebook.insert("nbformat".to_owned(), Value::from(nbformat));
    notebook.insert("nbformat_minor".to_owned(), Value::from(nbformat_minor));
    Value::Object(notebook)
}

/// One cell as `YNotebook._cell_to_py` renders it.
fn cell_json<T: ReadTxn>(cell: &MapRef, txn: &T, nbformat: i64, nbformat_minor: i64) -> Value {
    let Value::Object(mut cell) = json_of(cell.to_json(txn)) else {
        return Value::Object(JsonMap::new());
    };
    cell.remove(EXECUTION_STATE);
    if nbformat == 4 && nbformat_minor <= 4 {
        cell.remove("id");
    }
    let text_cell = matches!(
        cell.get("cell_type").and_then(Value::as_str),
        Some("raw" | "markdown")
    );
    let empty_attachments = match cell.get("attachments") {
        Some(Value::Object(map)) => map.is_empty(),
        Some(Value::Null) => true,
        _ => false,
    };
    if text_cell && empty_attachments {
        cell.remove("attachments");
    }
    Value::Object(cell)
}

/// The raw JSON of a live cell (every key, `execution_state` included), for a cell moved
/// by delete and re-insert.
pub(crate) fn raw_cell_json<T: ReadTxn>(cell: &MapRef, txn: &T) -> Value {
    json_of(cell.to_json(txn))
}

/// The index and map of the first cell with `id` in the live document.
pub(crate) fn find_cell<T: ReadTxn>(roots: &Roots, txn: &T, id: &str) -> Option<(u32, MapRef)> {
    (0..roots.cells.len(txn)).find_map(|index| match roots.cells.get(txn, index) {
        Some(Out::YMap(cell)) if cell_id(&cell, txn).as_deref() == Some(id) => Some((index, cell)),
        _ => None,
    })
}

/// The ids of the live cells, in order.
pub(crate) fn cell_ids<T: ReadTxn>(roots: &Roots, txn: &T) -> Vec<Option<String>> {
    (0..roots.cells.len(txn))
        .map(|index| match roots.cells.get(txn, index) {
            Some(Out::YMap(cell)) => cell_id(&cell, txn),
            _ => None,
        })
        .collect()
}

fn cell_id<T: ReadTxn>(cell: &MapRef, txn: &T) -> Option<String> {
    match cell.get(txn, "id") {
        Some(Out::Any(Any::String(id))) => Some(id.to_string()),
        _ => None,
    }
}

/// A new cell's shared map, as `YNotebook.create_ycell` builds it (the JSON's `id` kept; the
/// caller checked there is one). `keep_state`: the cell's own `execution_state` (a move)
/// rather than a new code cell's `"idle"`.
pub(crate) fn cell_prelim(cell: &JsonMap<String, Value>, keep_state: bool) -> MapPrelim {
    let mut prelim = MapPrelim::default();
    for (key, value) in cell {
        let input = match key.as_str() {
            "source" => In::Text(TextPrelim::new(source_text(value)).into()),
            "metadata" => In::Map(map_prelim(value)),
            "outputs" => In::Array(outputs_prelim(value)),
            EXECUTION_STATE if !keep_state => continue,
            _ => In::Any(any_of(value)),
        };
        prelim.insert(Arc::from(key.as_str()), input);
    }
    if !cell.contains_key("source") {
        prelim.insert(Arc::from("source"), In::Text(TextPrelim::new("").into()));
    }
    if !cell.contains_key("metadata") {
        prelim.insert(Arc::from("metadata"), In::Map(MapPrelim::default()));
    }
    let code = cell.get("cell_type").and_then(Value::as_str) == Some("code");
    if code {
        if !cell.contains_key("outputs") {
            prelim.insert(Arc::from("outputs"), In::Array(ArrayPrelim::default()));
        }
        if !keep_state || !cell.contains_key(EXECUTION_STATE) {
            prelim.insert(Arc::from(EXECUTION_STATE), In::Any(Any::from("idle")));
        }
    }
    prelim
}

/// A cell's source as one string (nbformat also allows a list of lines).
pub(crate) fn source_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(lines) => lines.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}

/// A Map of plain JSON values (a JSON object; anything else gives an empty map).
pub(crate) fn map_prelim(value: &Value) -> MapPrelim {
    match value {
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| (key.as_str(), In::Any(any_of(value))))
            .collect(),
        _ => MapPrelim::default(),
    }
}

/// The outputs as jupyter_ydoc stores them: each a Map, a stream's `text` a Text.
pub(crate) fn outputs_prelim(value: &Value) -> ArrayPrelim {
    let outputs = value.as_array().map(Vec::as_slice).unwrap_or_default();
    outputs
        .iter()
        .map(|output| In::Map(output_prelim(output)))
        .collect()
}

fn output_prelim(output: &Value) -> MapPrelim {
    let Value::Object(output) = output else {
        return MapPrelim::default();
    };
    let stream = output.get("output_type").and_then(Value::as_str) == Some("stream");
    output
        .iter()
        .map(|(key, value)| {
            let input = if stream && key == "text" {
                In::Text(TextPrelim::new(source_text(value)).into())
            } else {
                In::Any(any_of(value))
            };
            (key.as_str(), input)
        })
        .collect()
}

/// JSON as a Yjs value. Integers stay integers within JavaScript's safe range (Yjs encodes
/// them as varints, as JupyterLab does); others are floats.
pub(crate) fn any_of(value: &Value) -> Any {
    match value {
        Value::Null => Any::Null,
        Value::Bool(flag) => Any::Bool(*flag),
        Value::Number(number) => match number.as_i64() {
            Some(int) if int.unsigned_abs() <= yrs::any::Number::I64_MAX_SAFE_INTEGER as u64 => {
                Any::Number(yrs::any::Number::Int(int))
            }
            _ => Any::Number(yrs::any::Number::Float(number.as_f64().unwrap_or(f64::NAN))),
        },
        Value::String(text) => Any::String(Arc::from(text.as_str())),
        Value::Array(items) => Any::Array(items.iter().map(any_of).collect()),
        Value::Object(map) => Any::Map(Arc::new(
            map.iter()
                .map(|(key, value)| (key.clone(), any_of(value)))
                .collect(),
        )),
    }
}

/// A Yjs value as JSON, integral floats as integers (jupyter_ydoc's `cast_all`), binary as
/// an array of bytes, `undefined` as null.
pub(crate) fn json_of(any: Any) -> Value {
    match any {
        Any::Null | Any::Undefined => Value::Null,
        Any::Bool(flag) => Value::Bool(flag),
        Any::Number(yrs::any::Number::Int(int)) => Value::from(int),
        Any::Number(yrs::any::Number::Float(float)) => float_json(float),
        Any::String(text) => Value::String(text.to_string()),
        Any::Buffer(bytes) => Value::Array(bytes.iter().map(|byte| Value::from(*byte)).collect()),
        Any::Array(items) => Value::Array(items.iter().cloned().map(json_of).collect()),
        Any::Map(map) => Value::Object(
            map.iter()
                .map(|(key, value)| (key.clone(), json_of(value.clone())))
                .collect(),
        ),
    }
}

fn float_json(float: f64) -> Value {
    // Python's int(x) == x test: only finite, integral values, and only where i64 holds them.
    if float.is_finite() && float.fract() == 0.0 && float.abs() < 9.2e18 {
        Value::from(float as i64)
    } else {
        serde_json::Number::from_f64(float)
            .map(Value::Number)
            .unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use yrs::Transact as _;

    #[test]
    fn a_written_cell_reads_back_as_jupyter_ydoc_renders_it() {
        let doc = Doc::new();
        let roots = Roots::of(&doc);
        let cell = json!({
            "id": "a", "cell_type": "code", "source": ["x = 1\n", "x"],
            "metadata": {"tags": ["t"], "n": 2.5}, "execution_count": 3,
            "outputs": [
                {"output_type": "stream", "name": "stdout", "text": ["1\n", "2\n"]},
                {"output_type": "execute_result", "execution_count": 3, "metadata": {},
                 "data": {"text/plain": "1"}}
            ]
        });
        {
            let mut txn = doc.transact_mut();
            roots.meta.insert(&mut txn, "nbformat", 4);
            roots.meta.insert(&mut txn, "nbformat_minor", 5.0);
            roots.meta.insert(
                &mut txn,
                "metadata",
                map_prelim(&json!({"kernelspec": {"name": "p"}})),
            );
            roots.cells.push_back(
                &mut txn,
                cell_prelim(cell.as_object().expect("object"), false),
            );
            let markdown =
                json!({"id": "b", "cell_type": "markdown", "source": "# t", "attachments": {}});
            roots.cells.push_back(
                &mut txn,
                cell_prelim(markdown.as_object().expect("object"), false),
            );
        }
        let txn = doc.transact();
        let (_, live) = find_cell(&roots, &txn, "a").expect("cell a");
        assert_eq!(
            live.get(&txn, EXECUTION_STATE),
            Some(Out::Any(Any::from("idle")))
        );
        assert_eq!(
            notebook(&roots, &txn),
            json!({
                "cells": [
                    {"id": "a", "cell_type": "code", "source": "x = 1\nx",
                     "metadata": {"tags": ["t"], "n": 2.5}, "execution_count": 3,
                     "outputs": [
                        {"output_type": "stream", "name": "stdout", "text": "1\n2\n"},
                        {"output_type": "execute_result", "execution_count": 3, "metadata": {},
                         "data": {"text/plain": "1"}}
                     ]},
                    {"id": "b", "cell_type": "markdown", "source": "# t", "metadata": {}}
                ],
                "metadata": {"kernelspec": {"name": "p"}},
                "nbformat": 4,
                "nbformat_minor": 5
            })
        );
    }

    #[test]
    fn numbers_round_trip_as_python_reads_them() {
        for (value, back) in [
            (json!(1), json!(1)),
            (json!(-7), json!(-7)),
            (json!(2.5), json!(2.5)),
            (json!(3.0), json!(3)),
            (json!(1e300), json!(1e300)),
            (json!(u64::MAX), json!(18446744073709551615.0_f64)),
        ] {
            assert_eq!(json_of(any_of(&value)), back, "{value}");
        }
    }

    #[test]
    fn old_formats_lose_cell_ids_and_exact_duplicates_are_skipped() {
        for (minor, expected) in [
            (
                4,
                json!([
                    {"cell_type": "raw", "source": "r", "metadata": {}},
                    {"cell_type": "raw", "source": "r", "metadata": {}}
                ]),
            ),
            (
                5,
                json!([{"id": "a", "cell_type": "raw", "source": "r", "metadata": {}}]),
            ),
        ] {
            let doc = Doc::new();
            let roots = Roots::of(&doc);
            {
                let mut txn = doc.transact_mut();
                roots.meta.insert(&mut txn, "nbformat", 4);
                roots.meta.insert(&mut txn, "nbformat_minor", minor);
                let cell = json!({"id": "a", "cell_type": "raw", "source": "r", "metadata": {}});
                for _ in 0..2 {
                    roots.cells.push_back(
                        &mut txn,
                        cell_prelim(cell.as_object().expect("object"), false),
                    );
                }
            }
            let txn = doc.transact();
            assert_eq!(notebook(&roots, &txn)["cells"], expected, "minor {minor}");
        }
    }
}
