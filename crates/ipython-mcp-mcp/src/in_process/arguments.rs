//! Arguments as clients send them: whatever does not fit a tool's input schema is refused
//! with a structured `invalid_arguments` error naming the field, in both shapes, and nothing
//! runs; strings that spell a value of the declared type (as some clients send booleans and
//! numbers) are taken as that value.

use super::*;

/// A value of the type `schema` declares (its first enum value, else an empty one).
fn sample(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|values| values.first()) {
        return first.clone();
    }
    match declared_type(schema) {
        Some("boolean") => json!(false),
        Some("integer") => json!(0),
        Some("number") => json!(1.5),
        Some("array") => json!([]),
        Some("object") => json!({}),
        _ => json!("x"),
    }
}

/// A value no field of `schema`'s type accepts, and no coercion turns into one.
fn wrong(schema: &Value) -> Value {
    match declared_type(schema) {
        Some("object") => json!(12345),
        _ => json!({"wrong": "type"}),
    }
}

fn declared_type(schema: &Value) -> Option<&str> {
    match &schema["type"] {
        Value::String(name) => Some(name),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .find(|n| *n != "null"),
        _ => None,
    }
}

/// Every offered tool with its required fields (given sample values) and its properties.
async fn tool_table(server: &Connected) -> Vec<(String, serde_json::Map<String, Value>, Value)> {
    server
        .tools()
        .await
        .into_iter()
        .map(|tool| {
            let schema = Value::Object((*tool.input_schema).clone());
            let mut required = serde_json::Map::new();
            for name in schema["required"].as_array().into_iter().flatten() {
                let name = name.as_str().expect("a field name");
                required.insert(name.to_owned(), sample(&schema["properties"][name]));
            }
            (tool.name.into_owned(), required, schema)
        })
        .collect()
}

/// The message of an `invalid_arguments` refusal, checked to be one in `shape`: `isError`,
/// the code in the text, `structuredContent` in `Always` (and in `Auto` for the tools that do
/// not run code), and the hint that nothing ran.
fn refusal(
    tool: &str,
    arguments: &Value,
    result: &CallToolResult,
    shape: StructuredOutput,
) -> String {
    assert_eq!(error_code(tool, arguments, result), "invalid_arguments");
    let runs_code = crate::surface::spec(tool).is_some_and(|spec| spec.returns_images);
    let keeps_structure = shape == StructuredOutput::Always || !runs_code;
    assert_eq!(
        result.structured_content.is_some(),
        keeps_structure,
        "{shape:?} {tool} {arguments}: {result:?}"
    );
    let shown = text(result);
    assert!(
        shown.contains("hint: nothing ran; check the call against the tool's inputSchema"),
        "{tool} {arguments}: {shown}"
    );
    shown
}

#[tokio::test]
async fn every_required_field_of_every_tool_is_refused_by_name_when_missing() {
    for shape in SHAPES {
        let root = workspace();
        let server = Setup::new(shape).workspace(root.path()).start().await;
        let mut checked = 0;
        for (tool, required, _) in tool_table(&server).await {
            for missing in required.keys() {
                let mut arguments = required.clone();
                arguments.remove(missing);
                let arguments = Value::Object(arguments);
                let result = server.call(&tool, arguments.clone()).await;
                let shown = refusal(&tool, &arguments, &result, shape);
                assert!(
                    shown.contains(&format!("missing field `{missing}`")),
                    "{tool} {arguments}: {shown}"
                );
                checked += 1;
            }
        }
        // execute, search, inspect, call_function, reload, remove, kernel_start, kernel_stop,
        // register_tool, unregister_tool and the notebook tools' paths (and more).
        assert!(checked >= 20, "only {checked} required fields");
        assert!(server.ran_nothing().await);
        assert_eq!(std::fs::read_dir(root.path()).expect("read").count(), 0);
    }
}

#[tokio::test]
async fn an_unknown_field_is_refused_by_name_by_every_tool() {
    for shape in SHAPES {
        let root = workspace();
        let server = Setup::new(shape).workspace(root.path()).start().await;
        let tools = tool_table(&server).await;
        assert_eq!(tools.len(), crate::surface::TOOLS.len());
        for (tool, required, _) in tools {
            let mut arguments = required;
            arguments.insert("bogus_field".into(), json!(true));
            let arguments = Value::Object(arguments);
            let result = server.call(&tool, arguments.clone()).await;
            let shown = refusal(&tool, &arguments, &result, shape);
            assert!(
                shown.contains("unknown field `bogus_field`"),
                "{tool} {arguments}: {shown}"
            );
        }
        assert!(server.ran_nothing().await);
        assert_eq!(server.kernels.launches(), 1, "no session was started");
        assert_eq!(std::fs::read_dir(root.path()).expect("read").count(), 0);
    }
}

#[tokio::test]
async fn a_value_of_the_wrong_type_is_refused_naming_its_field_for_every_property() {
    for shape in SHAPES {
        let root = workspace();
        let server = Setup::new(shape).workspace(root.path()).start().await;
        let mut checked = 0;
        for (tool, required, schema) in tool_table(&server).await {
            let properties = schema["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            for (field, declared) in properties {
                if declared_type(&declared).is_none() {
                    continue;
                }
                let mut arguments = required.clone();
                arguments.insert(field.clone(), wrong(&declared));
                let arguments = Value::Object(arguments);
                let result = server.call(&tool, arguments.clone()).await;
                let shown = refusal(&tool, &arguments, &result, shape);
                assert!(
                    shown.contains(&format!("invalid argument `{field}`")),
                    "{tool} {arguments}: {shown}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 60, "only {checked} properties");
        assert!(server.ran_nothing().await);
        assert_eq!(server.kernels.launches(), 1);
        assert_eq!(std::fs::read_dir(root.path()).expect("read").count(), 0);
    }
}

#[tokio::test]
async fn execute_refuses_bad_arguments_in_the_shape_of_its_result() {
    let always = Setup::new(StructuredOutput::Always).start().await;
    let result = always.call("execute", json!({"code": 1})).await;
    let refused = structured(&result);
    assert_eq!(refused["ok"], false);
    assert_eq!(refused["status"], "rejected");
    assert_eq!(refused["execution_id"], "", "never admitted: no id");
    assert_eq!(refused["execution_count"], Value::Null);
    assert_eq!(refused["runtime"]["admission_seq"], 0);
    assert_eq!(refused["stdout"], "");
    assert_eq!(refused["error"]["code"], "invalid_arguments");
    assert_eq!(
        refused["error"]["message"],
        "invalid argument `code`: invalid type: integer `1`, expected a string"
    );

    let auto = Setup::new(StructuredOutput::Auto).start().await;
    let result = auto.call("execute", json!({"code": 1})).await;
    assert!(result.structured_content.is_none(), "{result:?}");
    assert_eq!(result.content.len(), 1, "one text block");
    assert_eq!(
        text(&result),
        "[rejected]\n--- error [invalid_arguments] ---\n\
         invalid argument `code`: invalid type: integer `1`, expected a string\n\
         hint: nothing ran; check the call against the tool's inputSchema"
    );
}

#[tokio::test]
async fn other_tools_refuse_bad_arguments_as_ok_false_with_the_error_alone() {
    let root = workspace();
    for shape in SHAPES {
        let server = Setup::new(shape).workspace(root.path()).start().await;
        for (tool, arguments) in [
            ("runtime_status", json!({"kernel": 7})),
            (
                "notebook_read",
                json!({"path": "a.ipynb", "index": "first"}),
            ),
            ("kernel_stop", json!({})),
            ("unregister_tool", json!({"names": "execute"})),
        ] {
            let result = server.call(tool, arguments.clone()).await;
            refusal(tool, &arguments, &result, shape);
            let refused = structured(&result);
            let keys: Vec<&String> = refused.as_object().expect("object").keys().collect();
            assert_eq!(keys, ["error", "ok"], "{tool} {arguments}: {refused}");
            assert_eq!(refused["ok"], false);
            assert_eq!(
                refused["error"]["hint"],
                "nothing ran; check the call against the tool's inputSchema"
            );
        }
    }
}

#[tokio::test]
async fn a_call_without_arguments_is_a_call_with_none() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    let peer = server.client.peer();
    let bare = |tool: &'static str| peer.call_tool_once(CallToolRequestParams::new(tool));
    let CallToolResponse::Complete(status) = bare("runtime_status").await.expect("tools/call")
    else {
        panic!("a result")
    };
    assert_eq!(status.is_error, Some(false), "{status:?}");
    assert_eq!(structured(&status)["kernel_id"], "default");
    let CallToolResponse::Complete(execute) = bare("execute").await.expect("tools/call") else {
        panic!("a result")
    };
    assert_eq!(
        structured(&execute)["error"]["message"],
        "invalid arguments: missing field `code`"
    );
    assert!(server.ran_nothing().await);
}

#[tokio::test]
async fn a_huge_bad_value_is_quoted_within_a_bounded_message() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        let arguments = json!({"code": "x = 1", "background": "y".repeat(200_000)});
        let result = server.call("execute", arguments.clone()).await;
        let shown = refusal("execute", &arguments, &result, shape);
        assert!(shown.contains("invalid argument `background`"), "{shown}");
        assert!(shown.len() < 2_000, "{} bytes", shown.len());
    }
}

#[tokio::test]
async fn a_bad_element_deep_in_an_argument_is_named_by_its_path() {
    let root = workspace();
    let server = Setup::new(StructuredOutput::Always)
        .workspace(root.path())
        .start()
        .await;
    for (tool, arguments, path) in [
        ("unregister_tool", json!({"names": ["a", 2]}), "names[1]"),
        ("remove", json!({"names": ["a", "b", null]}), "names[2]"),
        (
            "notebook_create",
            json!({"path": "n.ipynb", "cells": [{"source": "a"}, {"source": 5}]}),
            "cells[1].source",
        ),
        (
            "notebook_create",
            json!({"path": "n.ipynb", "cells": [{"source": "a", "cell_type": "prose"}]}),
            "cells[0].cell_type",
        ),
    ] {
        let result = server.call(tool, arguments.clone()).await;
        let shown = refusal(tool, &arguments, &result, StructuredOutput::Always);
        assert!(
            shown.contains(&format!("invalid argument `{path}`")),
            "{tool} {arguments}: {shown}"
        );
    }
    assert!(!root.path().join("n.ipynb").exists());
}

#[tokio::test]
async fn an_unknown_enum_value_is_refused_listing_the_accepted_ones() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    let result = server
        .call(
            "notebook_edit",
            json!({"path": "a.ipynb", "action": "explode"}),
        )
        .await;
    assert_eq!(
        structured(&result)["error"]["message"],
        "invalid argument `action`: unknown variant `explode`, expected one of `insert`, \
         `update`, `delete`, `move`, `clear_outputs`, `set_metadata`"
    );
    let result = server.call("get_output", json!({"stream": "both"})).await;
    let message = structured(&result)["error"]["message"]
        .as_str()
        .unwrap_or("");
    assert!(
        message.starts_with("invalid argument `stream`: unknown variant `both`, expected")
            && message.contains("`stdout`")
            && message.contains("`stderr`"),
        "{message}"
    );
}

#[tokio::test]
async fn a_negative_count_is_refused_as_not_a_non_negative_integer() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    for (tool, arguments, field) in [
        (
            "notebook_read",
            json!({"path": "a.ipynb", "index": -1}),
            "index",
        ),
        (
            "notebook_read",
            json!({"path": "a.ipynb", "max_cells": -3}),
            "max_cells",
        ),
        (
            "get_output",
            json!({"stream": "stdout", "max_lines": -5}),
            "max_lines",
        ),
        ("search", json!({"query": "x", "limit": -1}), "limit"),
    ] {
        let result = server.call(tool, arguments.clone()).await;
        let message = structured(&result)["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(
            message.starts_with(&format!("invalid argument `{field}`"))
                && message.ends_with("expected a non-negative integer"),
            "{tool} {arguments}: {message}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Coercion: what real clients send as strings.

#[tokio::test]
async fn booleans_sent_as_strings_are_booleans() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        let background = server
            .call("execute", json!({"code": "x = 1", "background": "true"}))
            .await;
        assert_eq!(background.is_error, Some(false), "{background:?}");
        assert!(text(&background).starts_with("[pending]"), "{background:?}");
        let foreground = server
            .call("execute", json!({"code": "y = 2", "background": "false"}))
            .await;
        assert_eq!(foreground.is_error, Some(false), "{foreground:?}");
        let shown = text(&foreground);
        assert!(shown.contains("--- stdout ---\ny = 2\n"), "{shown}");
    }
}

#[tokio::test]
async fn numbers_sent_as_strings_are_numbers() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        for seconds in ["5", "2.5", " 30 ", "1e1"] {
            let result = server
                .call(
                    "execute",
                    json!({"code": "x = 1", "timeout_seconds": seconds}),
                )
                .await;
            assert_eq!(result.is_error, Some(false), "{seconds:?}: {result:?}");
        }
        let started = server
            .call("execute", json!({"code": "z = 3", "background": true}))
            .await;
        let id = pending_id(&started);
        let waited = server
            .call(
                "get_output",
                json!({"execution_id": id, "wait_seconds": "30"}),
            )
            .await;
        assert_eq!(waited.is_error, Some(false), "{waited:?}");
        assert!(text(&waited).contains("z = 3"), "{}", text(&waited));
    }
}

#[tokio::test]
async fn a_number_sent_as_a_string_is_still_range_checked() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        for (seconds, shown) in [("0", "got 0"), ("-1", "got -1"), ("3601", "got 3601")] {
            let arguments = json!({"code": "x = 1", "timeout_seconds": seconds});
            let result = server.call("execute", arguments.clone()).await;
            assert_eq!(
                error_code("execute", &arguments, &result),
                "invalid_arguments"
            );
            let message = text(&result);
            assert!(
                message.contains("timeout_seconds must be a positive number of seconds up to 3600")
                    && message.contains(shown),
                "{message}"
            );
        }
        assert!(server.ran_nothing().await);
    }
}

#[tokio::test]
async fn integers_sent_as_strings_are_integers_but_fractions_are_not() {
    let root = workspace();
    let server = Setup::new(StructuredOutput::Always)
        .workspace(root.path())
        .start()
        .await;
    let created = server
        .call(
            "notebook_create",
            json!({"path": "n.ipynb", "cells": [{"source": "a = 1"}, {"source": "b = 2"}]}),
        )
        .await;
    assert_eq!(created.is_error, Some(false), "{created:?}");
    let page = server
        .call(
            "notebook_read",
            json!({"path": "n.ipynb", "max_cells": "1", "start_index": "0"}),
        )
        .await;
    let page = structured(&page);
    assert_eq!(page["cells"].as_array().map(Vec::len), Some(1), "{page}");
    assert_eq!(page["next_index"], 1);
    for count in ["2.5", "1e3", "one", ""] {
        let arguments = json!({"path": "n.ipynb", "max_cells": count});
        let result = server.call("notebook_read", arguments.clone()).await;
        let shown = refusal(
            "notebook_read",
            &arguments,
            &result,
            StructuredOutput::Always,
        );
        assert!(
            shown.contains("invalid argument `max_cells`: invalid type: string"),
            "{count:?}: {shown}"
        );
    }
}

#[tokio::test]
async fn arrays_and_objects_sent_as_strings_are_parsed() {
    let root = workspace();
    let server = Setup::new(StructuredOutput::Always)
        .workspace(root.path())
        .start()
        .await;
    let unregistered = server
        .call(
            "unregister_tool",
            json!({"names": "[\"execute\", \"ghost\"]"}),
        )
        .await;
    let unregistered = structured(&unregistered);
    assert_eq!(
        unregistered["refused"],
        json!(["execute"]),
        "{unregistered}"
    );
    assert_eq!(unregistered["unknown"], json!(["ghost"]));

    let created = server
        .call(
            "notebook_create",
            json!({"path": "n.ipynb", "cells": "[{\"source\": \"a = 1\"}]"}),
        )
        .await;
    assert_eq!(structured(&created)["cell_count"], 1, "{created:?}");
    let edited = server
        .call(
            "notebook_edit",
            json!({"path": "n.ipynb", "action": "set_metadata", "index": "0",
                   "metadata": "{\"tags\": [\"setup\"]}"}),
        )
        .await;
    assert_eq!(edited.is_error, Some(false), "{edited:?}");
    let read = server
        .call("notebook_read", json!({"path": "n.ipynb"}))
        .await;
    assert_eq!(
        structured(&read)["cells"][0]["metadata"],
        json!({"tags": ["setup"]})
    );

    // A keyword-arguments object sent as a string gets as far as the kernel (which, being a
    // fake, has no helper to call the function with).
    let called = server
        .call(
            "call_function",
            json!({"name": "f", "arguments": "{\"x\": 1}"}),
        )
        .await;
    assert_eq!(
        error_code("call_function", &json!({}), &called),
        "unsupported_kernel"
    );
}

#[tokio::test]
async fn strings_inside_arrays_of_objects_are_coerced_too() {
    let root = workspace();
    let server = Setup::new(StructuredOutput::Always)
        .workspace(root.path())
        .start()
        .await;
    let created = server
        .call(
            "notebook_create",
            json!({"path": "n.ipynb",
                   "cells": [{"source": "a = 1", "metadata": "{\"collapsed\": true}"}]}),
        )
        .await;
    assert_eq!(created.is_error, Some(false), "{created:?}");
    let read = server
        .call("notebook_read", json!({"path": "n.ipynb"}))
        .await;
    assert_eq!(
        structured(&read)["cells"][0]["metadata"],
        json!({"collapsed": true})
    );
}

#[tokio::test]
async fn string_parameters_are_taken_as_written() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    for code in ["5", "true", "[1, 2]", "{\"a\": 1}", "null"] {
        let result = server.call("execute", json!({ "code": code })).await;
        assert_eq!(structured(&result)["stdout"], format!("{code}\n"), "{code}");
    }
    let result = server
        .call("execute", json!({"code": "x = 1", "kernel": "5"}))
        .await;
    assert_eq!(
        structured(&result)["error"]["message"],
        "no kernel session named \"5\""
    );
}

#[tokio::test]
async fn strings_that_spell_no_value_of_the_type_are_refused() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        for (field, value) in [
            ("background", "maybe"),
            ("background", "True"),
            ("background", "1"),
            ("background", "[true]"),
            ("timeout_seconds", "abc"),
            ("timeout_seconds", "5s"),
            ("timeout_seconds", "null"),
            ("timeout_seconds", ""),
            ("timeout_seconds", "true"),
        ] {
            let mut arguments = json!({"code": "x = 1"});
            arguments[field] = json!(value);
            let result = server.call("execute", arguments.clone()).await;
            let shown = refusal("execute", &arguments, &result, shape);
            assert!(
                shown.contains(&format!("invalid argument `{field}`: invalid type: string")),
                "{arguments}: {shown}"
            );
        }
        assert!(server.ran_nothing().await);
    }
}
