//! From two snapshots of a notebook (before and after our edit) to the smallest set of
//! changes keyed by cell id, and from a cell's source before, now and after to one splice.
//!
//! Pure: no document, no I/O. The changes are applied to the live document later (edit.rs),
//! which may have moved on since `before` (a person typing): so nothing here is an index into
//! the live document, only ids and, for placement, the order of `after`.

use std::collections::{HashMap, HashSet};

use serde_json::{Map as JsonMap, Value};

use crate::error::CollabError;

/// What to change in the live document.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Edit {
    /// Keys of the notebook's metadata: set (`Some`) or removed (`None`).
    pub notebook_metadata: Vec<(String, Option<Value>)>,
    /// `nbformat` / `nbformat_minor`, when they changed.
    pub format: Vec<(&'static str, Value)>,
    /// Changes inside cells that stay, by id.
    pub cells: Vec<(String, CellChange)>,
    /// Cells to delete, by id.
    pub deleted: Vec<String>,
    /// Cells to (re)place, in the order of `after`: new ones, moved ones, replaced ones.
    pub placed: Vec<Placement>,
    /// The ids of `after`, in order: a placed cell goes after the nearest one before it that
    /// the live document still has.
    pub order: Vec<String>,
}

impl Edit {
    pub fn is_empty(&self) -> bool {
        self.notebook_metadata.is_empty()
            && self.format.is_empty()
            && self.cells.is_empty()
            && self.deleted.is_empty()
            && self.placed.is_empty()
    }
}

/// One change inside a cell.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CellChange {
    /// The source went from `before` to `after` (a splice against the live text).
    Source { before: String, after: String },
    /// A key of the cell's metadata: set or removed.
    Metadata { key: String, value: Option<Value> },
    /// The whole outputs array.
    Outputs(Value),
    /// Any other field (`execution_count`, `attachments`, unknown ones): set or removed.
    Field { key: String, value: Option<Value> },
}

/// A cell to put at its place in `after`'s order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Placement {
    /// A new cell (its full JSON).
    Insert {
        position: usize,
        cell: JsonMap<String, Value>,
    },
    /// An existing cell moved: deleted and re-inserted with its live content, as
    /// jupyter_ydoc's `YNotebook.set` moves cells (Yjs 13 has no move).
    Move { position: usize, id: String },
    /// An existing cell whose type changed, or that gained a key JupyterLab only observes
    /// on a new cell (`source`, `metadata`, `outputs`): replaced by its `after` JSON, in
    /// place, as jupyter_ydoc does.
    Replace {
        position: usize,
        cell: JsonMap<String, Value>,
    },
}

/// Keys JupyterLab binds observers to when it creates a cell's model: a cell gaining one
/// must be re-created for the frontend to see it.
const NESTED: [&str; 3] = ["source", "metadata", "outputs"];

/// The change from `before` to `after`.
pub(crate) fn diff(before: &Value, after: &Value) -> Result<Edit, CollabError> {
    let before_cells = cells_of(before, "before")?;
    let after_cells = cells_of(after, "after")?;
    let mut edit = Edit::default();

    // Notebook level.
    let empty = JsonMap::new();
    let metadata_before = before
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let metadata_after = after
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    edit.notebook_metadata = map_changes(metadata_before, metadata_after);
    for key in ["nbformat", "nbformat_minor"] {
        if let Some(value) = after.get(key) {
            if before.get(key) != Some(value) {
                edit.format.push((key, value.clone()));
            }
        }
    }

    // Cells that stay, by id.
    let before_by_id: HashMap<&str, (usize, &JsonMap<String, Value>)> = before_cells
        .iter()
        .enumerate()
        .map(|(index, (id, cell))| (id.as_str(), (index, *cell)))
        .collect();
    let after_ids: HashSet<&str> = after_cells.iter().map(|(id, _)| id.as_str()).collect();
    edit.deleted = before_cells
        .iter()
        .filter(|(id, _)| !after_ids.contains(id.as_str()))
        .map(|(id, _)| id.clone())
        .collect();

    // Which kept cells stay where they are: the longest run of them whose order `after`
    // keeps; the others move.
    let kept_positions: Vec<usize> = after_cells
        .iter()
        .filter_map(|(id, _)| before_by_id.get(id.as_str()).map(|(index, _)| *index))
        .collect();
    let in_place: HashSet<usize> = longest_increasing(&kept_positions).into_iter().collect();

    for (position, (id, cell)) in after_cells.iter().enumerate() {
        edit.order.push(id.clone());
        let Some((index, old)) = before_by_id.get(id.as_str()) else {
            edit.placed.push(Placement::Insert {
                position,
                cell: (*cell).clone(),
            });
            continue;
        };
        if needs_replacing(old, cell) {
            edit.placed.push(Placement::Replace {
                position,
                cell: (*cell).clone(),
            });
            continue;
        }
        for change in cell_changes(old, cell) {
            edit.cells.push((id.clone(), change));
        }
        if !in_place.contains(index) {
            edit.placed.push(Placement::Move {
                position,
                id: id.clone(),
            });
        }
    }
    Ok(edit)
}

/// A cell of a snapshot and its id.
type IdentifiedCell<'a> = (String, &'a JsonMap<String, Value>);

/// The cells of a notebook snapshot with their ids. Every cell needs a unique id: changes
/// are keyed by it.
fn cells_of<'a>(notebook: &'a Value, which: &str) -> Result<Vec<IdentifiedCell<'a>>, CollabError> {
    let cells = notebook
        .get("cells")
        .and_then(Value::as_array)
        .ok_or_else(|| CollabError::Invalid {
            message: format!("the {which} notebook has no cells array"),
        })?;
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(cells.len());
    for (index, cell) in cells.iter().enumerate() {
        let cell = cell.as_object().ok_or_else(|| CollabError::Invalid {
            message: format!("cell {index} of the {which} notebook is not an object"),
        })?;
        let id = cell
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| CollabError::Invalid {
                message: format!("cell {index} of the {which} notebook has no id"),
            })?;
        if !seen.insert(id) {
            return Err(CollabError::Invalid {
                message: format!("cell id {id:?} appears twice in the {which} notebook"),
            });
        }
        out.push((id.to_owned(), cell));
    }
    Ok(out)
}

fn needs_replacing(old: &JsonMap<String, Value>, new: &JsonMap<String, Value>) -> bool {
    old.get("cell_type") != new.get("cell_type")
        || NESTED
            .iter()
            .any(|key| new.contains_key(*key) && !old.contains_key(*key))
}

/// The changes inside one kept cell (same type).
fn cell_changes(old: &JsonMap<String, Value>, new: &JsonMap<String, Value>) -> Vec<CellChange> {
    let mut changes = Vec::new();
    let keys: Vec<&String> = {
        let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
        keys.sort();
        keys.dedup();
        keys
    };
    for key in keys {
        let (before, after) = (old.get(key.as_str()), new.get(key.as_str()));
        if before == after || key == "id" {
            continue;
        }
        match key.as_str() {
            "source" => {
                let before = before.map(crate::layout::source_text).unwrap_or_default();
                let after = after.map(crate::layout::source_text).unwrap_or_default();
                if before != after {
                    changes.push(CellChange::Source { before, after });
                }
            }
            "metadata" => {
                let empty = JsonMap::new();
                let before = before.and_then(Value::as_object).unwrap_or(&empty);
                let after = after.and_then(Value::as_object).unwrap_or(&empty);
                changes.extend(
                    map_changes(before, after)
                        .into_iter()
                        .map(|(key, value)| CellChange::Metadata { key, value }),
                );
            }
            "outputs" => changes.push(CellChange::Outputs(
                after.cloned().unwrap_or_else(|| Value::Array(Vec::new())),
            )),
            _ => changes.push(CellChange::Field {
                key: key.clone(),
                value: after.cloned(),
            }),
        }
    }
    changes
}

/// The keys of a map that changed: set or removed, in key order.
fn map_changes(
    before: &JsonMap<String, Value>,
    after: &JsonMap<String, Value>,
) -> Vec<(String, Option<Value>)> {
    let mut changes: Vec<(String, Option<Value>)> = after
        .iter()
        .filter(|(key, value)| before.get(key.as_str()) != Some(*value))
        .map(|(key, value)| (key.clone(), Some(value.clone())))
        .collect();
    changes.extend(
        before
            .keys()
            .filter(|key| !after.contains_key(key.as_str()))
            .map(|key| (key.clone(), None)),
    );
    changes.sort_by(|left, right| left.0.cmp(&right.0));
    changes
}

/// The values of the longest strictly increasing subsequence of `values` (distinct).
fn longest_increasing(values: &[usize]) -> Vec<usize> {
    // Patience sorting: `tails[k]` is the index of the smallest tail of a run of length k+1.
    let mut tails: Vec<usize> = Vec::new();
    let mut previous: Vec<Option<usize>> = vec![None; values.len()];
    for (index, value) in values.iter().enumerate() {
        let at = tails.partition_point(|&tail| values[tail] < *value);
        previous[index] = at.checked_sub(1).map(|before| tails[before]);
        if at == tails.len() {
            tails.push(index);
        } else {
            tails[at] = index;
        }
    }
    let mut run = Vec::with_capacity(tails.len());
    let mut cursor = tails.last().copied();
    while let Some(index) = cursor {
        run.push(values[index]);
        cursor = previous[index];
    }
    run.reverse();
    run
}

/// One splice turning the live text into ours: `(start, removed, inserted)`, in bytes of
/// `live` (on character boundaries).
///
/// Ours is the common prefix and suffix of `before` and `after`. If someone changed the text
/// meanwhile (`live` is not `before`), their change is found the same way (`before` to
/// `live`); when it lies wholly before or after ours, ours is shifted past it, so both
/// survive. When the two overlap, the splice goes from the live text to ours: ours wins in
/// that part of that cell.
pub(crate) fn splice(before: &str, live: &str, after: &str) -> (usize, usize, String) {
    let (prefix, suffix) = common_ends(before, after);
    let our_end = before.len() - suffix;
    let inserted = &after[prefix..after.len() - suffix];
    let (their_start, their_suffix) = common_ends(before, live);
    let their_end = before.len() - their_suffix;
    let their_inserted = live.len() - their_start - their_suffix;
    if their_end <= prefix {
        // Theirs is before ours (or there is none): ours moves by what theirs added.
        let start = prefix + their_inserted - (their_end - their_start);
        return (start, our_end - prefix, inserted.to_owned());
    }
    if their_start >= our_end {
        return (prefix, our_end - prefix, inserted.to_owned());
    }
    let (prefix, suffix) = common_ends(live, after);
    (
        prefix,
        live.len() - suffix - prefix,
        after[prefix..after.len() - suffix].to_owned(),
    )
}

/// The byte lengths of the longest common prefix and suffix of `left` and `right`, on
/// character boundaries and not overlapping in either string.
fn common_ends(left: &str, right: &str) -> (usize, usize) {
    let prefix: usize = left
        .chars()
        .zip(right.chars())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a.len_utf8())
        .sum();
    let limit = left.len().min(right.len()) - prefix;
    let suffix: usize = left[prefix..]
        .chars()
        .rev()
        .zip(right[prefix..].chars().rev())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a.len_utf8())
        .scan(0, |total, len| {
            *total += len;
            (*total <= limit).then_some(len)
        })
        .sum();
    (prefix, suffix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn code(id: &str, source: &str) -> Value {
        json!({"id": id, "cell_type": "code", "source": source, "metadata": {},
               "execution_count": null, "outputs": []})
    }

    fn notebook(cells: Vec<Value>) -> Value {
        json!({"cells": cells, "metadata": {"kernelspec": {"name": "python3"}},
               "nbformat": 4, "nbformat_minor": 5})
    }

    fn check(before: Vec<Value>, after: Vec<Value>, expected: Edit) {
        let edit = diff(&notebook(before), &notebook(after)).expect("diff");
        assert_eq!(edit, expected);
    }

    fn order(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| (*id).to_owned()).collect()
    }

    #[test]
    fn an_unchanged_notebook_is_an_empty_edit() {
        let cells = vec![code("a", "1"), code("b", "2")];
        let edit = diff(&notebook(cells.clone()), &notebook(cells)).expect("diff");
        assert!(edit.is_empty());
    }

    #[test]
    fn a_source_change_touches_only_its_cell() {
        check(
            vec![code("a", "x = 1"), code("b", "y")],
            vec![code("a", "x = 2"), code("b", "y")],
            Edit {
                cells: vec![(
                    "a".into(),
                    CellChange::Source {
                        before: "x = 1".into(),
                        after: "x = 2".into(),
                    },
                )],
                order: order(&["a", "b"]),
                ..Edit::default()
            },
        );
    }

    #[test]
    fn insert_and_delete_are_keyed_by_id() {
        let new = code("n", "new");
        check(
            vec![code("a", "1"), code("b", "2"), code("c", "3")],
            vec![code("a", "1"), new.clone(), code("c", "3")],
            Edit {
                deleted: vec!["b".into()],
                placed: vec![Placement::Insert {
                    position: 1,
                    cell: new.as_object().expect("object").clone(),
                }],
                order: order(&["a", "n", "c"]),
                ..Edit::default()
            },
        );
    }

    #[test]
    fn a_move_moves_only_the_cell_that_moved() {
        check(
            vec![
                code("a", "1"),
                code("b", "2"),
                code("c", "3"),
                code("d", "4"),
            ],
            vec![
                code("b", "2"),
                code("c", "3"),
                code("a", "1"),
                code("d", "4"),
            ],
            Edit {
                placed: vec![Placement::Move {
                    position: 2,
                    id: "a".into(),
                }],
                order: order(&["b", "c", "a", "d"]),
                ..Edit::default()
            },
        );
    }

    #[test]
    fn metadata_outputs_and_counts_are_per_key() {
        let mut after = code("a", "1");
        after["metadata"] = json!({"tags": ["x"]});
        after["execution_count"] = json!(4);
        after["outputs"] = json!([{"output_type": "stream", "name": "stdout", "text": "hi\n"}]);
        let mut after_notebook = notebook(vec![after]);
        after_notebook["metadata"]["language_info"] = json!({"name": "python"});
        let edit = diff(&notebook(vec![code("a", "1")]), &after_notebook).expect("diff");
        assert_eq!(
            edit.notebook_metadata,
            vec![("language_info".to_owned(), Some(json!({"name": "python"})))]
        );
        assert_eq!(
            edit.cells,
            vec![
                (
                    "a".into(),
                    CellChange::Field {
                        key: "execution_count".into(),
                        value: Some(json!(4))
                    }
                ),
                (
                    "a".into(),
                    CellChange::Metadata {
                        key: "tags".into(),
                        value: Some(json!(["x"]))
                    }
                ),
                (
                    "a".into(),
                    CellChange::Outputs(
                        json!([{"output_type": "stream", "name": "stdout", "text": "hi\n"}])
                    )
                ),
            ]
        );
    }

    #[test]
    fn a_type_change_replaces_the_cell_in_place() {
        let markdown = json!({"id": "a", "cell_type": "markdown", "source": "1", "metadata": {}});
        check(
            vec![code("a", "1")],
            vec![markdown.clone()],
            Edit {
                placed: vec![Placement::Replace {
                    position: 0,
                    cell: markdown.as_object().expect("object").clone(),
                }],
                order: order(&["a"]),
                ..Edit::default()
            },
        );
    }

    #[test]
    fn cells_without_ids_or_with_twice_the_same_are_refused() {
        let no_id = json!({"cell_type": "code", "source": ""});
        assert!(matches!(
            diff(&notebook(vec![]), &notebook(vec![no_id])),
            Err(CollabError::Invalid { .. })
        ));
        assert!(matches!(
            diff(
                &notebook(vec![]),
                &notebook(vec![code("a", ""), code("a", "")])
            ),
            Err(CollabError::Invalid { .. })
        ));
    }

    #[test]
    fn the_longest_increasing_run_stays() {
        assert_eq!(longest_increasing(&[1, 2, 0, 3]), vec![1, 2, 3]);
        assert_eq!(longest_increasing(&[3, 2, 1]).len(), 1);
        assert_eq!(longest_increasing(&[]), Vec::<usize>::new());
    }

    #[test]
    fn splices_are_the_smallest_and_keep_concurrent_edits_elsewhere() {
        let check = |before: &str, live: &str, after: &str, expected: (usize, usize, &str)| {
            let (start, removed, inserted) = splice(before, live, after);
            assert_eq!((start, removed, inserted.as_str()), expected);
            let mut result = live.to_owned();
            result.replace_range(start..start + removed, &inserted);
            result
        };
        assert_eq!(check("abc", "abc", "abXc", (2, 0, "X")), "abXc");
        assert_eq!(check("aaa", "aaa", "aa", (2, 1, "")), "aa");
        assert_eq!(check("héllo", "héllo", "hallo", (1, 2, "a")), "hallo");
        // Their edit before ours survives, and one after it.
        assert_eq!(
            check(
                "x = 1\ny = 2",
                "# t\nx = 1\ny = 2",
                "x = 1\ny = 3",
                (14, 1, "3")
            ),
            "# t\nx = 1\ny = 3"
        );
        assert_eq!(
            check("a\nb\nc", "a\nb\ncc", "A\nb\nc", (0, 1, "A")),
            "A\nb\ncc"
        );
        // Their edit inside ours: ours wins in that cell.
        assert_eq!(check("abc", "aZc", "aYc", (1, 1, "Y")), "aYc");
    }
}
