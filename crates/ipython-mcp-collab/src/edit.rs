//! Writing an [`Edit`] into the live document, inside one transaction.
//!
//! Cells are found by id in the document as it is now, not where `before` had them: a
//! person may have moved, added or deleted cells meanwhile. A change to a cell that is gone
//! is dropped (their delete wins); a placed cell goes after the nearest cell before it in
//! `after` that the document still has. Nothing here fails once writing has begun: every
//! check that can refuse an edit happens before (diff.rs), so a transaction is never left
//! half-written and unsent.

use serde_json::{Map as JsonMap, Value};
use yrs::{
    Array as _, GetString as _, Map as _, MapRef, Out, Text as _, TextPrelim, TransactionMut,
};

use crate::diff::{splice, CellChange, Edit, Placement};
use crate::layout::{self, Roots};

pub(crate) fn apply(txn: &mut TransactionMut, roots: &Roots, edit: &Edit) {
    for (key, value) in &edit.notebook_metadata {
        set_in_map(txn, &roots.meta, "metadata", key, value.as_ref());
    }
    for (key, value) in &edit.format {
        roots.meta.insert(txn, *key, layout::any_of(value));
    }
    for (id, change) in &edit.cells {
        let Some((_, cell)) = layout::find_cell(roots, txn, id) else {
            tracing::debug!(cell = %id, "a changed cell is gone from the live document");
            continue;
        };
        change_cell(txn, &cell, change);
    }
    for id in &edit.deleted {
        if let Some((index, _)) = layout::find_cell(roots, txn, id) {
            roots.cells.remove(txn, index);
        }
    }
    // Moved and replaced cells leave first, then every placed cell goes in, in `after`'s
    // order, so each one's anchor is already where it belongs.
    let mut going_in: Vec<(usize, JsonMap<String, Value>, bool)> = Vec::new();
    for placement in &edit.placed {
        match placement {
            Placement::Insert { position, cell } => going_in.push((*position, cell.clone(), false)),
            Placement::Move { position, id } => {
                if let Some((index, cell)) = layout::find_cell(roots, txn, id) {
                    if let Value::Object(cell) = layout::raw_cell_json(&cell, txn) {
                        roots.cells.remove(txn, index);
                        going_in.push((*position, cell, true));
                    }
                }
            }
            Placement::Replace { position, cell } => {
                let id = cell.get("id").and_then(Value::as_str).unwrap_or_default();
                if let Some((index, _)) = layout::find_cell(roots, txn, id) {
                    roots.cells.remove(txn, index);
                    going_in.push((*position, cell.clone(), false));
                }
            }
        }
    }
    going_in.sort_by_key(|(position, _, _)| *position);
    for (position, cell, keep_state) in going_in {
        let live = layout::cell_ids(roots, txn);
        let index = edit.order[..position]
            .iter()
            .rev()
            .find_map(|anchor| {
                live.iter()
                    .position(|id| id.as_deref() == Some(anchor.as_str()))
            })
            .map_or(0, |at| at + 1);
        roots
            .cells
            .insert(txn, index as u32, layout::cell_prelim(&cell, keep_state));
    }
}

fn change_cell(txn: &mut TransactionMut, cell: &MapRef, change: &CellChange) {
    match change {
        CellChange::Source { before, after } => match cell.get(txn, "source") {
            Some(Out::YText(text)) => {
                let live = text.get_string(txn);
                let (start, removed, inserted) = splice(before, &live, after);
                if removed > 0 {
                    text.remove_range(txn, start as u32, removed as u32);
                }
                if !inserted.is_empty() {
                    text.insert(txn, start as u32, &inserted);
                }
            }
            _ => {
                cell.insert(txn, "source", TextPrelim::new(after.as_str()));
            }
        },
        CellChange::Metadata { key, value } => {
            set_in_map(txn, cell, "metadata", key, value.as_ref());
        }
        CellChange::Outputs(outputs) => set_outputs(txn, cell, outputs),
        CellChange::Field { key, value } => match value {
            Some(value) => {
                cell.insert(txn, key.as_str(), layout::any_of(value));
            }
            None => {
                cell.remove(txn, key);
            }
        },
    }
}

/// Replaces a cell's outputs: cleared and refilled in place when they are a shared Array
/// (so a frontend observing it sees the change), a new Array otherwise.
pub(crate) fn set_outputs(txn: &mut TransactionMut, cell: &MapRef, outputs: &Value) {
    match cell.get(txn, "outputs") {
        Some(Out::YArray(array)) => {
            let len = array.len(txn);
            if len > 0 {
                array.remove_range(txn, 0, len);
            }
            for (index, output) in layout::outputs_prelim(outputs).iter().enumerate() {
                array.insert(txn, index as u32, output.clone());
            }
        }
        _ => {
            cell.insert(txn, "outputs", layout::outputs_prelim(outputs));
        }
    }
}

/// Sets or removes `key` in the map under `field` of `parent`: in place when it is a shared
/// Map, else by writing a new Map holding the old plain value with the change.
fn set_in_map(
    txn: &mut TransactionMut,
    parent: &MapRef,
    field: &str,
    key: &str,
    value: Option<&Value>,
) {
    match parent.get(txn, field) {
        Some(Out::YMap(map)) => match value {
            Some(value) => {
                map.insert(txn, key, layout::any_of(value));
            }
            None => {
                map.remove(txn, key);
            }
        },
        other => {
            let mut current = match other {
                Some(Out::Any(any)) => match layout::json_of(any) {
                    Value::Object(map) => map,
                    _ => JsonMap::new(),
                },
                _ => JsonMap::new(),
            };
            match value {
                Some(value) => {
                    current.insert(key.to_owned(), value.clone());
                }
                None => {
                    current.remove(key);
                }
            }
            parent.insert(txn, field, layout::map_prelim(&Value::Object(current)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use yrs::updates::decoder::Decode as _;
    use yrs::{Doc, ReadTxn as _, Transact as _, Update};

    fn code(id: &str, source: &str) -> Value {
        json!({"id": id, "cell_type": "code", "source": source, "metadata": {},
               "execution_count": null, "outputs": []})
    }

    fn notebook(cells: Vec<Value>) -> Value {
        json!({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    }

    fn write(doc: &Doc, before: &Value, after: &Value) {
        let edit = crate::diff::diff(before, after).expect("diff");
        // The roots first: getting them takes a write transaction of its own.
        let roots = Roots::of(doc);
        let mut txn = doc.transact_mut();
        apply(&mut txn, &roots, &edit);
    }

    fn read(doc: &Doc) -> Value {
        let roots = Roots::of(doc);
        let txn = doc.transact();
        layout::notebook(&roots, &txn)
    }

    fn sync(from: &Doc, to: &Doc) {
        let update = from
            .transact()
            .encode_state_as_update_v1(&to.transact().state_vector());
        to.transact_mut()
            .apply_update(Update::decode_v1(&update).expect("update"))
            .expect("apply");
    }

    #[test]
    fn concurrent_edits_of_two_replicas_both_survive() {
        let ours = Doc::new();
        let theirs = Doc::new();
        let start = notebook(vec![code("a", "x = 1"), code("b", "y = 1"), code("c", "z")]);
        write(&ours, &json!({"cells": [], "metadata": {}}), &start);
        sync(&ours, &theirs);
        assert_eq!(read(&theirs), start);

        // They edit b's source and insert a cell at the top; we edit a, move c first and
        // delete nothing of theirs.
        let theirs_after = notebook(vec![
            code("t", "# theirs"),
            code("a", "x = 1"),
            code("b", "y = 1  # person"),
            code("c", "z"),
        ]);
        write(&theirs, &start, &theirs_after);
        let ours_after = notebook(vec![code("c", "z"), code("a", "x = 2"), code("b", "y = 1")]);
        write(&ours, &start, &ours_after);
        sync(&ours, &theirs);
        sync(&theirs, &ours);

        let merged = read(&ours);
        assert_eq!(merged, read(&theirs));
        let sources: Vec<(&str, &str)> = merged["cells"]
            .as_array()
            .expect("cells")
            .iter()
            .map(|cell| {
                (
                    cell["id"].as_str().expect("id"),
                    cell["source"].as_str().expect("source"),
                )
            })
            .collect();
        assert!(sources.contains(&("a", "x = 2")), "{sources:?}");
        assert!(sources.contains(&("b", "y = 1  # person")), "{sources:?}");
        assert!(sources.contains(&("t", "# theirs")), "{sources:?}");
        let position = |id: &str| sources.iter().position(|(cell, _)| *cell == id);
        assert!(position("c") < position("a"), "{sources:?}");
        assert_eq!(sources.len(), 4, "{sources:?}");
    }

    #[test]
    fn a_source_splice_keeps_their_typing_in_the_same_cell() {
        let ours = Doc::new();
        let theirs = Doc::new();
        let start = notebook(vec![code("a", "x = 1\ny = 2")]);
        write(&ours, &json!({"cells": [], "metadata": {}}), &start);
        sync(&ours, &theirs);
        write(
            &theirs,
            &start,
            &notebook(vec![code("a", "# note\nx = 1\ny = 2")]),
        );
        write(&ours, &start, &notebook(vec![code("a", "x = 1\ny = 3")]));
        sync(&ours, &theirs);
        sync(&theirs, &ours);
        assert_eq!(read(&ours)["cells"][0]["source"], "# note\nx = 1\ny = 3");
        assert_eq!(read(&ours), read(&theirs));
    }
}
