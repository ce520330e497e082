//! Tool schemas as agents pay for them, and arguments as clients really send them.
//!
//! An agent reads every tool's input schema in every conversation, so the schemas schemars
//! derives are made compact once, when the router is built: references inlined, `null` arms of
//! optional fields and integer-format noise dropped, one-of-constants written as an `enum`.
//! Output schemas lose their prose too (clients validate with them; docs/src/tools.md documents
//! the fields) but keep every type and every `null` a result can carry, so each result still fits.
//!
//! Some clients send a boolean, number, array or object as a JSON string (`"true"`, `"5"`,
//! `"[\"a\"]"`). [`coerce`] turns such a string into the value it spells when the schema
//! declares that type and not a string, so the call means exactly one thing; anything else is
//! left for the tool's own argument check to refuse.

use rmcp::model::JsonObject;
use serde_json::{Map, Value};

/// Which side of a tool a schema describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// What the agent sends: optional fields are simply optional, prose is kept.
    Input,
    /// What the server answers: every `null` a result can hold is kept, prose is dropped.
    Output,
}

/// `schema` with its references inlined and the noise described in the module docs removed.
pub(crate) fn compact(schema: &JsonObject, side: Side) -> JsonObject {
    let definitions = schema
        .get("$defs")
        .or_else(|| schema.get("definitions"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut root: Map<String, Value> = schema
        .iter()
        .filter(|(key, _)| !matches!(key.as_str(), "$defs" | "definitions" | "$schema"))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    // A recursive definition cannot be inlined; it keeps its `$ref` and stays in `$defs`.
    let mut kept = Map::new();
    let mut stack = Vec::new();
    for value in root.values_mut() {
        inline(value, &definitions, &mut stack, &mut kept);
    }
    let mut root = Value::Object(root);
    tidy(&mut root, side);
    let Value::Object(mut root) = root else {
        unreachable!("tidy keeps an object an object")
    };
    if side == Side::Input {
        // The tool's description says what the arguments are for.
        root.remove("description");
    } else {
        // Results keep their top-level fields' `required` (the success arm of the root's
        // `anyOf`) and two levels of fields; deeper structure and nested `required` lists only
        // restate what docs/src/tools.md documents, in every tool's schema again.
        for value in root
            .get_mut("properties")
            .into_iter()
            .flat_map(|p| p.as_object_mut())
        {
            for field in value.values_mut() {
                drop_nested(field, "required");
                limit_depth(field, OUTPUT_DEPTH - 1);
            }
        }
    }
    if !kept.is_empty() {
        let mut kept = Value::Object(kept);
        tidy(&mut kept, side);
        root.insert("$defs".into(), kept);
    }
    root
}

/// How many levels of fields an output schema describes; deeper objects are just objects.
const OUTPUT_DEPTH: usize = 2;

/// Keeps `levels` levels of `properties` and `items` below `schema`, typed, and drops the rest.
fn limit_depth(schema: &mut Value, levels: usize) {
    let Value::Object(object) = schema else {
        return;
    };
    for keyword in ["properties", "items", "additionalProperties"] {
        if levels == 0 {
            if keyword != "additionalProperties"
                || object.get(keyword).is_some_and(Value::is_object)
            {
                object.remove(keyword);
            }
            continue;
        }
        match object.get_mut(keyword) {
            Some(Value::Object(inner)) if keyword == "properties" => {
                inner
                    .values_mut()
                    .for_each(|field| limit_depth(field, levels - 1));
            }
            Some(inner @ Value::Object(_)) => limit_depth(inner, levels - 1),
            _ => {}
        }
    }
    for keyword in ["anyOf", "oneOf"] {
        if let Some(Value::Array(arms)) = object.get_mut(keyword) {
            arms.iter_mut().for_each(|arm| limit_depth(arm, levels));
        }
    }
}

/// Removes `keyword` from `value` and every schema inside it.
fn drop_nested(value: &mut Value, keyword: &str) {
    match value {
        Value::Object(object) => {
            object.remove(keyword);
            for (key, child) in object.iter_mut() {
                if key == "properties" {
                    for field in child
                        .as_object_mut()
                        .into_iter()
                        .flat_map(|f| f.values_mut())
                    {
                        drop_nested(field, keyword);
                    }
                } else {
                    drop_nested(child, keyword);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| drop_nested(item, keyword)),
        _ => {}
    }
}

/// Replaces every `{"$ref": "#/$defs/X", …}` with definition X (the referring object's own keys
/// win, so a property's description outlives its type's).
fn inline(
    value: &mut Value,
    definitions: &Map<String, Value>,
    stack: &mut Vec<String>,
    kept: &mut Map<String, Value>,
) {
    match value {
        Value::Object(object) => {
            let target = object
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|reference| {
                    reference
                        .strip_prefix("#/$defs/")
                        .or_else(|| reference.strip_prefix("#/definitions/"))
                })
                .map(str::to_owned);
            if let Some(name) = target {
                if let Some(definition) = definitions.get(&name) {
                    if stack.contains(&name) {
                        kept.insert(name.clone(), definition.clone());
                        object.insert("$ref".into(), Value::String(format!("#/$defs/{name}")));
                        return;
                    }
                    let mut replacement = definition.clone();
                    stack.push(name);
                    inline(&mut replacement, definitions, stack, kept);
                    stack.pop();
                    object.remove("$ref");
                    if let Value::Object(mut merged) = replacement {
                        for (key, own) in std::mem::take(object) {
                            merged.insert(key, own);
                        }
                        *object = merged;
                    }
                    return;
                }
            }
            for child in object.values_mut() {
                inline(child, definitions, stack, kept);
            }
        }
        Value::Array(items) => {
            for item in items {
                inline(item, definitions, stack, kept);
            }
        }
        _ => {}
    }
}

/// Drops what carries no meaning for the side, bottom up.
fn tidy(value: &mut Value, side: Side) {
    match value {
        Value::Object(object) => {
            for (key, child) in object.iter_mut() {
                // Under `properties` the keys are field names, not keywords.
                if key == "properties" {
                    if let Value::Object(fields) = child {
                        for field in fields.values_mut() {
                            tidy(field, side);
                        }
                    }
                } else {
                    tidy(child, side);
                }
            }
            tidy_schema(object, side);
        }
        Value::Array(items) => {
            for item in items {
                tidy(item, side);
            }
        }
        _ => {}
    }
}

fn tidy_schema(object: &mut Map<String, Value>, side: Side) {
    object.remove("title");
    object.remove("format");
    if object.get("additionalProperties") == Some(&Value::Bool(true)) {
        object.remove("additionalProperties");
    }
    if object.get("default").is_some_and(Value::is_null) {
        object.remove("default");
    }
    // Unsigned integers: a negative value is refused by name either way.
    if object.get("minimum").and_then(Value::as_u64) == Some(0) {
        object.remove("minimum");
    }
    match side {
        Side::Output => {
            object.remove("description");
            object.remove("examples");
        }
        Side::Input => {
            // Unknown fields are refused by the server with a message naming them.
            if object.get("additionalProperties") == Some(&Value::Bool(false)) {
                object.remove("additionalProperties");
            }
            // An omitted flag is false and an omitted text empty; saying so costs every
            // conversation a few bytes.
            let obvious = |value: &Value| *value == Value::Bool(false) || *value == "";
            if object.get("default").is_some_and(obvious) {
                object.remove("default");
            }
        }
    }
    // `oneOf` of constants (schemars' documented enum variants) is an `enum`.
    if let Some(Value::Array(arms)) = object.get("oneOf") {
        let constants: Option<Vec<Value>> = arms
            .iter()
            .map(|arm| arm.as_object().and_then(|arm| arm.get("const")).cloned())
            .collect();
        if let Some(constants) = constants.filter(|constants| !constants.is_empty()) {
            object.remove("oneOf");
            if let Some(kind) = common_type(&constants) {
                object.insert("type".into(), Value::String(kind.into()));
            }
            object.insert("enum".into(), Value::Array(constants));
        }
    }
    // `anyOf: [X, {"type": "null"}]`: X, optional (input) or with `null` admitted (output).
    let null_arm = |arm: &Value| arm.get("type").and_then(Value::as_str) == Some("null");
    if let Some(Value::Array(arms)) = object.get("anyOf") {
        if arms.len() == 2 && arms.iter().filter(|arm| null_arm(arm)).count() == 1 {
            let other = arms
                .iter()
                .find(|arm| !null_arm(arm))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            if other
                .keys()
                .all(|key| !object.contains_key(key) || key == "description")
            {
                object.remove("anyOf");
                for (key, value) in other {
                    object.entry(key).or_insert(value);
                }
                if side == Side::Output && !admit_null(object) {
                    let arm = std::mem::take(object);
                    object.insert(
                        "anyOf".into(),
                        Value::Array(vec![
                            Value::Object(arm),
                            serde_json::json!({"type": "null"}),
                        ]),
                    );
                }
            }
        }
    }
    if side == Side::Input {
        if let Some(Value::Array(kinds)) = object.get("type") {
            let kinds: Vec<Value> = kinds
                .iter()
                .filter(|kind| *kind != "null")
                .cloned()
                .collect();
            let kinds = match <[Value; 1]>::try_from(kinds) {
                Ok([single]) => single,
                Err(kinds) => Value::Array(kinds),
            };
            object.insert("type".into(), kinds);
        }
    }
}

/// Adds `null` to what `object` admits by its `type` or `enum`; false if it has neither.
fn admit_null(object: &mut Map<String, Value>) -> bool {
    let has_enum = object.contains_key("enum");
    match object.get_mut("type") {
        Some(Value::String(kind)) => {
            let kind = std::mem::take(kind);
            object.insert("type".into(), serde_json::json!([kind, "null"]));
        }
        Some(Value::Array(kinds)) => {
            if !kinds.iter().any(|kind| kind == "null") {
                kinds.push("null".into());
            }
        }
        _ if has_enum => {}
        _ => return false,
    }
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        if !values.contains(&Value::Null) {
            values.push(Value::Null);
        }
    }
    true
}

/// The JSON type all of `values` share, if they share one.
fn common_type(values: &[Value]) -> Option<&'static str> {
    let kinds: Vec<&'static str> = values.iter().map(json_type).collect();
    let first = *kinds.first()?;
    kinds.iter().all(|kind| *kind == first).then_some(first)
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(number) if number.is_i64() || number.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Turns string-encoded arguments into the values they spell where `schema` asks for a
/// non-string type (see the module docs); returns the paths it changed, for the log.
pub(crate) fn coerce(arguments: &mut JsonObject, schema: &JsonObject) -> Vec<String> {
    let mut changed = Vec::new();
    let definitions = schema.get("$defs").and_then(Value::as_object);
    let root = Value::Object(schema.clone());
    for (name, value) in arguments.iter_mut() {
        if let Some(field) = property(&root, name, definitions) {
            coerce_value(value, field, definitions, name, &mut changed);
        }
    }
    changed
}

fn coerce_value(
    value: &mut Value,
    schema: &Value,
    definitions: Option<&Map<String, Value>>,
    path: &str,
    changed: &mut Vec<String>,
) {
    let schema = resolve(schema, definitions);
    if let Value::String(text) = value {
        if let Some(kinds) = allowed_types(schema, definitions) {
            if !kinds.contains(&"string") {
                if let Ok(parsed) = serde_json::from_str::<Value>(text) {
                    if fits(&parsed, &kinds) {
                        *value = parsed;
                        changed.push(path.to_owned());
                    }
                }
            }
        }
    }
    match value {
        Value::Object(fields) => {
            for (name, field) in fields.iter_mut() {
                if let Some(inner) = property(schema, name, definitions) {
                    coerce_value(
                        field,
                        inner,
                        definitions,
                        &format!("{path}.{name}"),
                        changed,
                    );
                }
            }
        }
        Value::Array(items) => {
            if let Some(inner) =
                branch_for(schema, "array", definitions).and_then(|s| s.get("items"))
            {
                for (index, item) in items.iter_mut().enumerate() {
                    coerce_value(
                        item,
                        inner,
                        definitions,
                        &format!("{path}[{index}]"),
                        changed,
                    );
                }
            }
        }
        _ => {}
    }
}

/// The schema of field `name` inside object schema `schema` (its `properties`, else a schema
/// given as `additionalProperties`), looking through a union's one object arm.
fn property<'a>(
    schema: &'a Value,
    name: &str,
    definitions: Option<&'a Map<String, Value>>,
) -> Option<&'a Value> {
    let object = branch_for(schema, "object", definitions)?;
    object
        .get("properties")
        .and_then(|properties| properties.get(name))
        .or_else(|| {
            object
                .get("additionalProperties")
                .filter(|extra| extra.is_object())
        })
}

/// `schema` itself when it can hold a `kind`, else its only `anyOf`/`oneOf` arm that can.
fn branch_for<'a>(
    schema: &'a Value,
    kind: &str,
    definitions: Option<&'a Map<String, Value>>,
) -> Option<&'a Value> {
    let schema = resolve(schema, definitions);
    let admits = |schema: &Value| {
        allowed_types(schema, definitions).is_some_and(|kinds| kinds.contains(&kind))
    };
    if schema.get("anyOf").is_none() && schema.get("oneOf").is_none() {
        return admits(schema).then_some(schema);
    }
    let arms = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)?;
    let mut matching = arms
        .iter()
        .map(|arm| resolve(arm, definitions))
        .filter(|arm| admits(arm));
    match (matching.next(), matching.next()) {
        (Some(arm), None) => Some(arm),
        _ => None,
    }
}

fn resolve<'a>(schema: &'a Value, definitions: Option<&'a Map<String, Value>>) -> &'a Value {
    let target = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|reference| reference.strip_prefix("#/$defs/"))
        .and_then(|name| definitions?.get(name));
    target.unwrap_or(schema)
}

/// The JSON types `schema` admits, or `None` when it does not say (then nothing is coerced).
fn allowed_types(
    schema: &Value,
    definitions: Option<&Map<String, Value>>,
) -> Option<Vec<&'static str>> {
    let schema = resolve(schema, definitions);
    const KINDS: [&str; 7] = [
        "null", "boolean", "integer", "number", "string", "array", "object",
    ];
    let named = |name: &str| KINDS.iter().copied().find(|kind| *kind == name);
    if let Some(kind) = schema.get("type") {
        return match kind {
            Value::String(name) => Some(vec![named(name)?]),
            Value::Array(names) => names.iter().map(|name| named(name.as_str()?)).collect(),
            _ => None,
        };
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        return Some(values.iter().map(json_type).collect());
    }
    if let Some(constant) = schema.get("const") {
        return Some(vec![json_type(constant)]);
    }
    let arms = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)?;
    let mut kinds = Vec::new();
    for arm in arms {
        kinds.extend(allowed_types(arm, definitions)?);
    }
    Some(kinds)
}

fn fits(value: &Value, kinds: &[&str]) -> bool {
    match json_type(value) {
        "integer" => kinds.contains(&"integer") || kinds.contains(&"number"),
        kind => kinds.contains(&kind),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::{coerce, compact, Side};

    fn object(value: Value) -> rmcp::model::JsonObject {
        value.as_object().expect("an object").clone()
    }

    #[test]
    fn input_schemas_lose_references_nulls_and_formats_but_keep_prose() {
        let schema = object(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Params",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "kind": {"anyOf": [{"$ref": "#/$defs/Kind"}, {"type": "null"}], "default": null,
                         "description": "Which kind."},
                "count": {"type": ["integer", "null"], "format": "uint", "minimum": 0,
                          "default": null, "description": "How many."},
                "flag": {"type": "boolean", "default": false}
            },
            "required": [],
            "$defs": {"Kind": {"description": "A kind.", "oneOf": [
                {"const": "a", "description": "first"}, {"const": "b"}]}}
        }));
        assert_eq!(
            Value::Object(compact(&schema, Side::Input)),
            json!({
                "type": "object",
                "properties": {
                    "kind": {"description": "Which kind.", "type": "string", "enum": ["a", "b"]},
                    "count": {"type": "integer", "description": "How many."},
                    "flag": {"type": "boolean"}
                },
                "required": []
            })
        );
    }

    #[test]
    fn output_schemas_keep_every_null_and_drop_prose() {
        let schema = object(json!({
            "type": "object",
            "properties": {
                "state": {"$ref": "#/$defs/State", "description": "The state."},
                "kind": {"anyOf": [{"$ref": "#/$defs/State"}, {"type": "null"}]},
                "count": {"type": ["integer", "null"], "minimum": 0, "format": "uint"},
                "nested": {"anyOf": [{"$ref": "#/$defs/Nested"}, {"type": "null"}]},
                "any": {"anyOf": [{}, {"type": "null"}]}
            },
            "$defs": {
                "State": {"type": "string", "enum": ["on", "off"], "description": "A state."},
                "Nested": {"type": "object", "properties": {"x": {"type": "string",
                           "description": "An x."}}}
            }
        }));
        assert_eq!(
            Value::Object(compact(&schema, Side::Output)),
            json!({
                "type": "object",
                "properties": {
                    "state": {"type": "string", "enum": ["on", "off"]},
                    "kind": {"type": ["string", "null"], "enum": ["on", "off", null]},
                    "count": {"type": ["integer", "null"]},
                    "nested": {"type": ["object", "null"], "properties": {"x": {"type": "string"}}},
                    "any": {"anyOf": [{}, {"type": "null"}]}
                }
            })
        );
    }

    #[test]
    fn recursive_definitions_stay_referenced() {
        let schema = object(json!({
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/Tree"}},
            "$defs": {"Tree": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}}}}
        }));
        let compacted = Value::Object(compact(&schema, Side::Input));
        assert_eq!(
            compacted["properties"]["tree"]["properties"]["children"]["items"],
            json!({"$ref": "#/$defs/Tree"})
        );
        assert!(compacted["$defs"]["Tree"].is_object(), "{compacted}");
    }

    fn coerced(arguments: Value, schema: Value) -> (Value, Vec<String>) {
        let mut arguments = object(arguments);
        let changed = coerce(&mut arguments, &object(schema));
        (Value::Object(arguments), changed)
    }

    #[test]
    fn strings_that_spell_the_declared_type_become_that_type() {
        let schema = json!({"type": "object", "properties": {
            "background": {"type": "boolean"},
            "timeout": {"type": "number"},
            "count": {"type": "integer"},
            "names": {"type": "array", "items": {"type": "string"}},
            "flags": {"type": "array", "items": {"type": "boolean"}},
            "options": {"type": "object", "properties": {"deep": {"type": "boolean"}}},
            "code": {"type": "string"},
            "either": {"type": ["string", "boolean"]},
            "maybe": {"type": ["boolean", "null"]},
            "anything": {}
        }});
        let (arguments, changed) = coerced(
            json!({
                "background": "true", "timeout": "2.5", "count": " 3 ", "names": "[\"a\", \"b\"]",
                "flags": ["false", true], "options": "{\"deep\": \"false\"}", "code": "true",
                "either": "true", "maybe": "false", "anything": "1"
            }),
            schema,
        );
        assert_eq!(
            arguments,
            json!({
                "background": true, "timeout": 2.5, "count": 3, "names": ["a", "b"],
                "flags": [false, true], "options": {"deep": false}, "code": "true",
                "either": "true", "maybe": false, "anything": "1"
            })
        );
        let mut changed = changed;
        changed.sort();
        assert_eq!(
            changed,
            [
                "background",
                "count",
                "flags[0]",
                "maybe",
                "names",
                "options",
                "options.deep",
                "timeout"
            ]
        );
    }

    #[test]
    fn strings_that_do_not_spell_the_declared_type_are_left_for_the_check_to_refuse() {
        let schema = json!({"type": "object", "properties": {
            "background": {"type": "boolean"},
            "count": {"type": "integer"},
            "names": {"type": "array"},
            "kind": {"type": "string", "enum": ["a"]},
            "level": {"enum": [1, 2]}
        }});
        let arguments = json!({
            "background": "yes", "count": "2.5", "names": "{\"a\": 1}", "kind": "1", "level": "x"
        });
        assert_eq!(
            coerced(arguments.clone(), schema.clone()),
            (arguments, vec![])
        );
        // An enum of numbers spelled as a string is a number.
        assert_eq!(
            coerced(json!({"level": "2"}), schema).0,
            json!({"level": 2})
        );
    }
}
