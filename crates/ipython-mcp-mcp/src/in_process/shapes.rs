//! What a client (and the model) receives in each shape: in `Auto`, tools that run code answer
//! with their text block (and images) alone, the others with a compacted `structuredContent`;
//! in `Always`, every result carries the full typed JSON. Every structured result fits its
//! tool's `outputSchema`, and `isError` is set exactly when `ok` is false. The snapshots keep
//! `tools/list` (names and annotations) and the texts of the common outcomes.

use ipython_mcp_kernel::FakeBehaviour;

use super::*;

/// A thousand characters of output, one line: cut at any small `max_text_chars`.
const LONG: &str = "long_output";

fn long_line() -> FakeBehaviour {
    FakeBehaviour::Finish {
        after: Duration::ZERO,
        stdout: format!("{}\n", "y".repeat(1000)),
    }
}

/// Fifty numbered lines.
const LINES: &str = "many_lines";

fn numbered_lines() -> FakeBehaviour {
    FakeBehaviour::Finish {
        after: Duration::ZERO,
        stdout: (1..=50).map(|n| format!("line {n}\n")).collect(),
    }
}

/// What follows `--- stdout ---` in an execution's text, up to the next section or note.
fn stdout_section(shown: &str) -> &str {
    let after = shown
        .split_once("--- stdout ---\n")
        .map_or("", |(_, rest)| rest);
    let section = after.split("\n--- ").next().unwrap_or("");
    section.split("\n\n[").next().unwrap_or("")
}

#[tokio::test]
async fn execute_in_auto_answers_with_one_text_block_and_no_structure() {
    let server = Setup::new(StructuredOutput::Auto).start().await;
    let result = server.call("execute", json!({"code": "x = 1"})).await;
    assert_eq!(result.is_error, Some(false));
    assert!(result.structured_content.is_none(), "{result:?}");
    assert_eq!(result.content.len(), 1);
    assert_eq!(text(&result), "[ok] Out[1]\n--- stdout ---\nx = 1\n");
}

#[tokio::test]
async fn execute_in_always_carries_the_whole_typed_result() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    let result = server.call("execute", json!({"code": "x = 1"})).await;
    let output = structured(&result);
    assert_eq!(output["ok"], true);
    assert_eq!(output["status"], "ok");
    assert_eq!(output["execution_count"], 1);
    assert_eq!(output["stdout"], "x = 1\n");
    assert_eq!(output["stderr"], "");
    assert_eq!(output["error"], Value::Null);
    assert_eq!(output["runtime"]["admission_seq"], 1);
    assert_eq!(output["runtime"]["epoch"], 0);
    assert_eq!(
        output["truncated"],
        json!({"stdout": false, "stderr": false, "display_data": false, "result": false,
               "traceback": false})
    );
    let id = output["execution_id"].as_str().expect("an id");
    assert_eq!(id.len(), 36, "a UUID: {id}");
    // The text block is the same as in `Auto`.
    assert_eq!(text(&result), "[ok] Out[1]\n--- stdout ---\nx = 1\n");
}

#[tokio::test]
async fn a_cut_stdout_has_its_marker_in_the_text_and_none_in_structured_stdout() {
    // (Room is kept for the longer marker that names the paging call, which a server with a
    // spool shows: bounds under twice its length are not cut further.)
    let server = Setup::new(StructuredOutput::Always)
        .max_text_chars(400)
        .script(LONG, long_line())
        .start()
        .await;
    let result = server.call("execute", json!({ "code": LONG })).await;
    let output = structured(&result);
    let stdout = output["stdout"].as_str().expect("stdout");
    let omitted = output["stdout_omitted_chars"].as_u64().expect("a count");
    let cut_at = output["truncated"]["stdout_cut_at"]
        .as_u64()
        .expect("stdout_cut_at") as usize;
    assert_eq!(output["truncated"]["stdout"], true);
    // Nothing is lost from the count: what is kept and what is omitted make what was printed.
    assert_eq!(stdout.chars().count() as u64 + omitted, 1001);
    // Structured stdout is only what the code printed: head and tail, no marker.
    assert!(stdout.chars().all(|c| c == 'y' || c == '\n'), "{stdout}");
    let (head, tail) = stdout.split_at(cut_at);
    let shown = text(&result);
    let section = stdout_section(&shown);
    let marker = format!("[… {omitted} characters omitted …]");
    assert_eq!(section, format!("{head}\n{marker}\n{tail}"), "{shown}");
    // What the model reads of the stream fits the bound, marker included.
    assert!(
        section.trim_end().chars().count() <= 400,
        "{} chars",
        section.chars().count()
    );
}

#[tokio::test]
async fn a_cut_stdout_in_auto_shows_the_marker_and_the_counts_stay_out_of_sight() {
    let server = Setup::new(StructuredOutput::Auto)
        .max_text_chars(200)
        .script(LONG, long_line())
        .start()
        .await;
    let result = server.call("execute", json!({ "code": LONG })).await;
    assert!(result.structured_content.is_none());
    let shown = text(&result);
    assert!(
        shown.starts_with("[ok] Out[1]\n--- stdout ---\ny"),
        "{shown}"
    );
    assert!(
        regex::Regex::new(r"\n\[… \d+ characters omitted …\]\ny")
            .expect("pattern")
            .is_match(&shown),
        "{shown}"
    );
}

#[tokio::test]
async fn a_spooled_stdout_is_paged_and_searched_by_get_output() {
    for shape in SHAPES {
        let server = Setup::new(shape)
            .max_text_chars(300)
            .spool()
            .script(LINES, numbered_lines())
            .start()
            .await;
        let result = server.call("execute", json!({ "code": LINES })).await;
        let shown = text(&result);
        assert!(
            shown.contains("pages them …]")
                && shown.contains("[full output kept: stdout 391 bytes"),
            "{shown}"
        );
        assert!(stdout_section(&shown).chars().count() <= 300, "{shown}");
        let page = server
            .call(
                "get_output",
                json!({"stream": "stdout", "start_line": 45, "max_lines": 3}),
            )
            .await;
        let paged = text(&page);
        assert!(
            paged.ends_with(
                "\n--- stdout: 50 lines so far ---\n    45: line 45\n    46: line 46\n    47: line 47\n[more: start_line=48]"
            ),
            "{paged}"
        );
        let found = server
            .call("get_output", json!({"pattern": "^line 4[0-2]$"}))
            .await;
        let found_text = text(&found);
        assert!(
            found_text.ends_with(
                "\n--- stdout lines matching /^line 4[0-2]$/: 3 of 50 lines ---\n    40: line 40\n    41: line 41\n    42: line 42"
            ),
            "{found_text}"
        );
        if shape == StructuredOutput::Always {
            let page = &structured(&page)["page"];
            assert_eq!(page["total_lines"], 50);
            assert_eq!(page["next_line"], 48);
            assert_eq!(page["lines"][0], json!({"line": 45, "text": "line 45"}));
            assert_eq!(structured(&found)["page"]["total_matches"], 3);
        } else {
            assert!(page.structured_content.is_none());
        }
    }
}

#[tokio::test]
async fn a_background_execute_is_pending_with_its_id_and_get_output_waits_for_its_end() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        let started = server
            .call("execute", json!({"code": "w = 4", "background": true}))
            .await;
        assert_eq!(started.is_error, Some(false));
        let id = pending_id(&started);
        assert!(
            text(&started).starts_with("[pending]\n[still running as execution_id"),
            "{}",
            text(&started)
        );
        if shape == StructuredOutput::Always {
            assert_eq!(structured(&started)["status"], "pending");
            assert_eq!(structured(&started)["execution_id"], id.as_str());
        }
        let waited = server
            .call(
                "get_output",
                json!({"execution_id": id, "wait_seconds": 30}),
            )
            .await;
        assert_eq!(waited.is_error, Some(false), "{waited:?}");
        assert_eq!(text(&waited), "[ok] Out[1]\n--- stdout ---\nw = 4\n");
        match shape {
            StructuredOutput::Auto => assert!(waited.structured_content.is_none()),
            StructuredOutput::Always => {
                let output = structured(&waited);
                assert_eq!(output["finished"], true);
                assert_eq!(output["kernel"], "default");
                assert_eq!(output["page"], Value::Null);
                assert_eq!(output["execution_id"], id.as_str());
            }
        }
    }
}

#[tokio::test]
async fn user_code_raising_is_an_execution_error_naming_the_exception() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        let result = server
            .call("execute", json!({"code": "raise KeyError('missing')"}))
            .await;
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            text(&result),
            "[error] In[1]\n--- error: KeyError: missing ---"
        );
        if shape == StructuredOutput::Always {
            let output = structured(&result);
            assert_eq!(output["ok"], false);
            assert_eq!(output["status"], "error");
            assert_eq!(output["error"]["code"], "execution_error");
            assert_eq!(output["error"]["ename"], "KeyError");
            assert_eq!(output["error"]["evalue"], "missing");
            assert_eq!(output["error"]["traceback"], "KeyError: missing");
        }
    }
}

#[tokio::test]
async fn a_timeout_names_its_deadline_the_interruption_and_the_namespace() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        let result = server
            .call(
                "execute",
                json!({"code": "time.sleep(100)", "timeout_seconds": 0.1}),
            )
            .await;
        assert_eq!(result.is_error, Some(true));
        let shown = text(&result);
        assert!(shown.starts_with("[timeout] In[1]\n--- error [operation_timeout] ---\nexecution exceeded its 0.1s deadline and was interrupted"), "{shown}");
        assert!(
            shown.ends_with("\n[interrupted (cooperative); namespace preserved]"),
            "{shown}"
        );
        if shape == StructuredOutput::Always {
            let output = structured(&result);
            assert_eq!(output["status"], "timeout");
            assert_eq!(output["runtime"]["interruption"], "cooperative");
            assert_eq!(output["runtime"]["namespace"], "preserved");
            assert!(
                output["runtime"]["run_ms"].as_u64() >= Some(100),
                "{output}"
            );
        }
    }
}

#[tokio::test]
async fn is_error_is_set_exactly_when_ok_is_false() {
    let root = workspace();
    let server = Setup::new(StructuredOutput::Always)
        .workspace(root.path())
        .start()
        .await;
    let mut seen = (0, 0);
    for (tool, arguments) in calls_of_every_kind() {
        let result = server.call(tool, arguments.clone()).await;
        let ok = structured(&result)["ok"].as_bool().expect("ok");
        assert_eq!(result.is_error, Some(!ok), "{tool} {arguments}: {result:?}");
        if ok {
            seen.0 += 1;
        } else {
            seen.1 += 1;
        }
    }
    assert!(seen.0 >= 8 && seen.1 >= 8, "{seen:?}");
}

/// Calls of most tools, answered and refused, in an order that works on a fresh server with
/// a workspace (the notebook `n.ipynb` is created on the way).
fn calls_of_every_kind() -> Vec<(&'static str, Value)> {
    vec![
        ("execute", json!({"code": "x = 1"})),
        ("execute", json!({"code": "raise ValueError('v')"})),
        ("execute", json!({"code": "x = 1", "timeout_seconds": 0})),
        ("execute", json!({"code": "x = 1", "kernel": "nope"})),
        ("execute", json!({"code": "x = 2", "background": true})),
        ("get_output", json!({"wait_seconds": 30})),
        ("get_output", json!({"execution_id": "nope"})),
        ("interrupt", json!({})),
        ("runtime_status", json!({})),
        ("runtime_status", json!({"kernel": "nope"})),
        ("list", json!({})),
        ("search", json!({"query": "x"})),
        ("inspect", json!({"name": "x"})),
        ("kernel_list", json!({})),
        ("kernel_stop", json!({"kernel": "default"})),
        ("unregister_tool", json!({"names": ["ghost"]})),
        ("register_tool", json!({"name": "f"})),
        (
            "notebook_create",
            json!({"path": "n.ipynb", "cells": [{"source": "a = 1"}]}),
        ),
        ("notebook_create", json!({"path": "n.ipynb"})),
        (
            "notebook_read",
            json!({"path": "n.ipynb", "include_outputs": true}),
        ),
        ("notebook_read", json!({"path": "../n.ipynb"})),
        ("notebook_revision", json!({"path": "n.ipynb"})),
        (
            "notebook_edit",
            json!({"path": "n.ipynb", "action": "insert", "source": "b = 2"}),
        ),
        (
            "notebook_execute",
            json!({"path": "n.ipynb", "code": "c = 3"}),
        ),
        (
            "notebook_execute_cell",
            json!({"path": "n.ipynb", "index": 0}),
        ),
        (
            "notebook_execute_cell",
            json!({"path": "n.ipynb", "index": 9}),
        ),
        ("notebook_session", json!({"path": "n.ipynb"})),
        ("notebook_session_close", json!({"path": "n.ipynb"})),
        ("kernel_restart", json!({})),
    ]
}

#[tokio::test]
async fn every_structured_result_fits_its_tools_output_schema() {
    for shape in SHAPES {
        let root = workspace();
        let server = Setup::new(shape).workspace(root.path()).start().await;
        let schemas: std::collections::HashMap<String, Value> = server
            .tools()
            .await
            .into_iter()
            .filter_map(|tool| {
                let schema = tool.output_schema.map(|s| Value::Object((*s).clone()))?;
                Some((tool.name.into_owned(), schema))
            })
            .collect();
        let mut checked = 0;
        for (tool, arguments) in calls_of_every_kind() {
            let result = server.call(tool, arguments.clone()).await;
            match (schemas.get(tool), &result.structured_content) {
                (Some(schema), Some(value)) => {
                    if let Some(problem) = misfit(value, schema, schema, "$") {
                        panic!("{shape:?} {tool} {arguments}: {problem}\n{value}");
                    }
                    checked += 1;
                }
                // A tool without an output schema answers without structuredContent.
                (None, None) => {}
                (schema, value) => panic!(
                    "{shape:?} {tool} {arguments}: schema {:?}, structured {value:?}",
                    schema.is_some()
                ),
            }
        }
        // In `Auto` the tools that run code answer without structuredContent.
        let least = match shape {
            StructuredOutput::Auto => 15,
            StructuredOutput::Always => 25,
        };
        assert!(checked >= least, "{shape:?}: only {checked} checked");
    }
}

#[tokio::test]
async fn every_output_schema_admits_the_failure_every_tool_can_answer() {
    let failure = json!({"ok": false, "error": {"code": "invalid_arguments", "message": "m"}});
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        for tool in server.tools().await {
            let Some(schema) = tool.output_schema else {
                continue;
            };
            let schema = Value::Object((*schema).clone());
            assert_eq!(
                misfit(&failure, &schema, &schema, "$"),
                None,
                "{shape:?} {}",
                tool.name
            );
            // And the success shape is still required: an empty success does not fit.
            if schema.get("anyOf").is_some() {
                assert!(
                    misfit(&json!({"ok": true}), &schema, &schema, "$").is_some(),
                    "{shape:?} {}",
                    tool.name
                );
            }
        }
    }
}

#[tokio::test]
async fn tools_that_run_code_declare_no_output_schema_in_auto_and_every_tool_does_in_always() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        let tools = server.tools().await;
        assert_eq!(tools.len(), crate::surface::TOOLS.len());
        for tool in tools {
            let spec = crate::surface::spec(&tool.name).expect("a built-in tool");
            let declared = tool.output_schema.is_some();
            let expected = shape == StructuredOutput::Always || !spec.returns_images;
            assert_eq!(declared, expected, "{shape:?} {}", tool.name);
        }
    }
}

#[tokio::test]
async fn auto_leaves_the_runtime_bookkeeping_out_of_structured_results() {
    let auto = Setup::new(StructuredOutput::Auto).start().await;
    let listed = auto.call("list", json!({})).await;
    let listed = structured(&listed);
    assert_eq!(listed["error"]["code"], "unsupported_kernel");
    assert!(listed.get("runtime").is_none(), "{listed}");

    let always = Setup::new(StructuredOutput::Always).start().await;
    let listed = always.call("list", json!({})).await;
    let runtime = &structured(&listed)["runtime"];
    assert_eq!(runtime["epoch"], 0, "{runtime}");
    assert!(runtime["admission_seq"].is_u64(), "{runtime}");
}

#[tokio::test]
async fn a_tasks_client_in_always_gets_the_structured_result_through_the_task() {
    let server = Setup::new(StructuredOutput::Always).tasks().start().await;
    let task = match server
        .respond("execute", json!({"code": "t = 1", "background": true}))
        .await
    {
        CallToolResponse::Task(created) => created.task,
        other => panic!("a task, not {other:?}"),
    };
    // The task is named by its execution: get_output waits for it on the server's side.
    let waited = server
        .call(
            "get_output",
            json!({"execution_id": task.task_id, "wait_seconds": 30}),
        )
        .await;
    assert_eq!(structured(&waited)["finished"], true);
    let got = server
        .client
        .peer()
        .get_task(GetTaskParams::new(task.task_id.clone()))
        .await
        .expect("tasks/get");
    assert_eq!(got.task.task.status, TaskStatus::Completed);
    let TaskPayload::Completed { result } = &got.task.payload else {
        panic!("a result: {got:?}")
    };
    assert_eq!(result["isError"], false);
    assert_eq!(result["structuredContent"]["status"], "ok", "{result:?}");
    assert_eq!(result["structuredContent"]["stdout"], "t = 1\n");
}

#[tokio::test]
async fn a_tasks_client_gets_a_foreground_execute_as_a_plain_result() {
    let server = Setup::new(StructuredOutput::Auto).tasks().start().await;
    match server.respond("execute", json!({"code": "f = 1"})).await {
        CallToolResponse::Complete(result) => {
            assert_eq!(text(&result), "[ok] Out[1]\n--- stdout ---\nf = 1\n")
        }
        other => panic!("a result, not {other:?}"),
    }
}

#[tokio::test]
async fn runtime_status_says_the_same_in_its_text_and_its_structure() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        let result = server.call("runtime_status", json!({})).await;
        assert_eq!(result.is_error, Some(false));
        assert!(
            text(&result).starts_with("kernel \"default\": ready, epoch 0; pid 1001"),
            "{}",
            text(&result)
        );
        // Not a tool that runs code: structured in both shapes.
        let status = structured(&result);
        assert_eq!(status["ok"], true);
        assert_eq!(status["state"], "ready");
        assert_eq!(status["epoch"], 0);
        assert_eq!(status["kernel"]["pid"], 1001);
    }
}

#[tokio::test]
async fn kernel_restart_replaces_the_kernel_and_counting_starts_again() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    server.call("execute", json!({"code": "x = 1"})).await;
    let restarted = server.call("kernel_restart", json!({})).await;
    assert_eq!(restarted.is_error, Some(false), "{restarted:?}");
    assert!(
        text(&restarted).starts_with("kernel \"default\": ready, epoch 1"),
        "{}",
        text(&restarted)
    );
    let status = structured(&restarted);
    assert_eq!(status["epoch"], 1);
    assert_eq!(status["latest_namespace_outcome"], "reset");
    assert_eq!(server.kernels.launches(), 2);
    let next = server.call("execute", json!({"code": "y = 2"})).await;
    assert_eq!(structured(&next)["execution_count"], 1);
    assert_eq!(structured(&next)["runtime"]["epoch"], 1);
}

// ---------------------------------------------------------------------------------------------
// Snapshots: what agents read, with what changes from run to run filtered out.

/// `tools/list` as agents see it, less the schemas and descriptions: names, annotations,
/// required arguments, and whether an output schema is declared.
async fn tools_listing(shape: StructuredOutput) -> Value {
    let server = Setup::new(shape).start().await;
    let mut tools = server.tools().await;
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    Value::Array(
        tools
            .into_iter()
            .map(|tool| {
                json!({
                    "name": tool.name,
                    "annotations": tool.annotations,
                    "required": tool.input_schema.get("required").cloned().unwrap_or(json!([])),
                    "output_schema": tool.output_schema.is_some(),
                })
            })
            .collect(),
    )
}

#[tokio::test]
async fn tools_list_in_auto() {
    insta::assert_json_snapshot!(tools_listing(StructuredOutput::Auto).await);
}

#[tokio::test]
async fn tools_list_in_always() {
    insta::assert_json_snapshot!(tools_listing(StructuredOutput::Always).await);
}

/// The text of `execute` with `arguments`, on a server whose streams are cut at 300
/// characters and spooled.
async fn execute_text(arguments: Value) -> String {
    let server = Setup::new(StructuredOutput::Auto)
        .max_text_chars(300)
        .spool()
        .script(LINES, numbered_lines())
        .script(
            "print('hello')",
            FakeBehaviour::Finish {
                after: Duration::ZERO,
                stdout: "hello\n".into(),
            },
        )
        .start()
        .await;
    text(&server.call("execute", arguments).await)
}

#[tokio::test]
async fn the_text_of_an_execute_that_printed() {
    let shown = execute_text(json!({"code": "print('hello')"})).await;
    insta::with_settings!({filters => snapshot_filters()}, {
        insta::assert_snapshot!(shown);
    });
}

#[tokio::test]
async fn the_text_of_an_execute_that_raised() {
    let shown = execute_text(json!({"code": "raise ZeroDivisionError('division by zero')"})).await;
    insta::with_settings!({filters => snapshot_filters()}, {
        insta::assert_snapshot!(shown);
    });
}

#[tokio::test]
async fn the_text_of_a_timeout() {
    let shown = execute_text(json!({"code": "while True: pass", "timeout_seconds": 0.1})).await;
    insta::with_settings!({filters => snapshot_filters()}, {
        insta::assert_snapshot!(shown);
    });
}

#[tokio::test]
async fn the_text_of_a_background_execute() {
    let shown = execute_text(json!({"code": "x = 1", "background": true})).await;
    insta::with_settings!({filters => snapshot_filters()}, {
        insta::assert_snapshot!(shown);
    });
}

#[tokio::test]
async fn the_text_of_a_cut_and_spooled_stdout() {
    let shown = execute_text(json!({ "code": LINES })).await;
    insta::with_settings!({filters => snapshot_filters()}, {
        insta::assert_snapshot!(shown);
    });
}

#[tokio::test]
async fn the_structured_result_of_an_execute_that_raised() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    let result = server
        .call("execute", json!({"code": "raise ValueError('bad value')"}))
        .await;
    let output = structured(&result).clone();
    insta::with_settings!({filters => snapshot_filters()}, {
        insta::assert_json_snapshot!(output);
    });
}

#[tokio::test]
async fn the_structured_refusal_of_an_execute() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    let result = server
        .call(
            "execute",
            json!({"code": "x = 1", "timeout_seconds": "soon"}),
        )
        .await;
    let output = structured(&result).clone();
    insta::with_settings!({filters => snapshot_filters()}, {
        insta::assert_json_snapshot!(output);
    });
}
