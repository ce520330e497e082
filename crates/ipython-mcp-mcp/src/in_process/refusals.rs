//! Refusals past the argument types: values out of range, names of nothing, calls that cannot
//! be served now. Each is a structured error with a stable code and, where it helps, what to
//! do instead; none of them runs code or changes a session.

use super::*;
use ipython_mcp_kernel::MAX_CODE_BYTES;

#[tokio::test]
async fn code_over_max_code_bytes_is_refused_before_it_reaches_the_kernel() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        let code = "x".repeat(MAX_CODE_BYTES + 1);
        let result = server.call("execute", json!({ "code": code })).await;
        assert_eq!(
            error_code("execute", &json!("oversize"), &result),
            "invalid_arguments"
        );
        let shown = text(&result);
        assert!(
            shown.contains(&format!(
                "code is {} bytes; the limit is {MAX_CODE_BYTES} bytes",
                MAX_CODE_BYTES + 1
            )),
            "{}",
            &shown[..shown.len().min(500)]
        );
        assert!(
            shown.contains("hint: write large data to a file and read it from Python"),
            "{shown}"
        );
        assert!(server.ran_nothing().await);
    }
}

#[tokio::test]
async fn code_of_exactly_max_code_bytes_runs() {
    let server = Setup::new(StructuredOutput::Always)
        .max_text_chars(1000)
        .start()
        .await;
    let code = "#".repeat(MAX_CODE_BYTES);
    let result = server.call("execute", json!({ "code": code })).await;
    let output = structured(&result);
    assert_eq!(output["status"], "ok", "{}", output["error"]);
    // The fake prints the code back: the bounded stdout says how much was left out.
    assert_eq!(
        output["stdout_omitted_chars"].as_u64().expect("a count")
            + output["stdout"].as_str().expect("stdout").chars().count() as u64,
        MAX_CODE_BYTES as u64 + 1
    );
}

#[tokio::test]
async fn a_timeout_out_of_range_is_refused_and_nothing_runs() {
    let max = Config::default().timeouts.max_operation.as_secs_f64();
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        for seconds in [
            json!(0),
            json!(-1),
            json!(-0.5),
            json!(max + 1.0),
            json!(1e300),
        ] {
            let arguments = json!({"code": "x = 1", "timeout_seconds": seconds});
            let result = server.call("execute", arguments.clone()).await;
            assert_eq!(
                error_code("execute", &arguments, &result),
                "invalid_arguments"
            );
            let shown = text(&result);
            assert!(
                shown.starts_with("[rejected]\n")
                    && shown.contains(&format!(
                        "timeout_seconds must be a positive number of seconds up to {max}, got"
                    )),
                "{shown}"
            );
            if shape == StructuredOutput::Always {
                assert_eq!(structured(&result)["status"], "rejected");
            }
        }
        assert!(server.ran_nothing().await);
    }
}

#[tokio::test]
async fn the_longest_allowed_timeout_is_accepted() {
    let max = Config::default().timeouts.max_operation.as_secs_f64();
    let server = Setup::new(StructuredOutput::Always).start().await;
    let result = server
        .call("execute", json!({"code": "x = 1", "timeout_seconds": max}))
        .await;
    assert_eq!(structured(&result)["status"], "ok", "{result:?}");
}

#[tokio::test]
async fn an_unknown_kernel_is_refused_naming_the_running_sessions() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        for (tool, arguments) in [
            ("execute", json!({"code": "x = 1", "kernel": "nope"})),
            ("get_output", json!({"kernel": "nope"})),
            ("interrupt", json!({"kernel": "nope"})),
            ("runtime_status", json!({"kernel": "nope"})),
            ("kernel_restart", json!({"kernel": "nope"})),
            ("kernel_stop", json!({"kernel": "nope"})),
            ("list", json!({"kernel": "nope"})),
            ("search", json!({"query": "x", "kernel": "nope"})),
            ("register_tool", json!({"name": "f", "kernel": "nope"})),
        ] {
            let result = server.call(tool, arguments.clone()).await;
            assert_eq!(error_code(tool, &arguments, &result), "invalid_arguments");
            let shown = text(&result);
            assert!(
                shown.contains("no kernel session named \"nope\"")
                    && shown.contains(
                        "hint: running sessions: default (kernel_list shows them; kernel_start starts one)"
                    ),
                "{tool}: {shown}"
            );
        }
        assert!(server.ran_nothing().await);
        assert_eq!(server.kernels.launches(), 1, "nothing restarted");
    }
}

#[tokio::test]
async fn get_output_of_an_unknown_execution_says_where_ids_come_from() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    server.call("execute", json!({"code": "x = 1"})).await;
    let result = server
        .call("get_output", json!({"execution_id": "not-an-execution"}))
        .await;
    let refused = structured(&result);
    assert_eq!(refused["error"]["code"], "invalid_arguments");
    assert_eq!(
        refused["error"]["message"],
        "no execution with id \"not-an-execution\""
    );
    let hint = refused["error"]["hint"].as_str().unwrap_or("");
    assert!(hint.contains("kernel_list shows their ids"), "{hint}");
}

#[tokio::test]
async fn get_output_before_anything_ran_is_refused() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        let result = server.call("get_output", json!({"wait_seconds": 0})).await;
        assert_eq!(
            error_code("get_output", &json!({}), &result),
            "invalid_arguments"
        );
        assert!(
            text(&result).contains("kernel \"default\" has run nothing yet"),
            "{}",
            text(&result)
        );
    }
}

#[tokio::test]
async fn get_output_refuses_a_wait_out_of_range() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    server.call("execute", json!({"code": "x = 1"})).await;
    for seconds in [json!(-1), json!(300.5), json!(1e9)] {
        let arguments = json!({ "wait_seconds": seconds });
        let result = server.call("get_output", arguments.clone()).await;
        assert_eq!(
            error_code("get_output", &arguments, &result),
            "invalid_arguments"
        );
        let message = structured(&result)["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(
            message.starts_with("wait_seconds must be between 0 and 300, got"),
            "{message}"
        );
    }
    let most = server
        .call("get_output", json!({"wait_seconds": 300}))
        .await;
    assert_eq!(most.is_error, Some(false), "the bound itself: {most:?}");
}

#[tokio::test]
async fn get_output_refuses_paging_arguments_that_make_no_page() {
    let server = Setup::new(StructuredOutput::Always).spool().start().await;
    server.call("execute", json!({"code": "x = 1"})).await;
    for (arguments, message) in [
        (
            json!({"max_lines": 3}),
            "max_lines needs stream, start_line or pattern".to_owned(),
        ),
        (
            json!({"stream": "stdout", "max_lines": 0}),
            "max_lines must be between 1 and 5000, got 0".to_owned(),
        ),
        (
            json!({"stream": "stdout", "max_lines": 5001}),
            "max_lines must be between 1 and 5000, got 5001".to_owned(),
        ),
        (
            json!({"stream": "stdout", "start_line": 0}),
            "start_line is 1-based (or negative to count from the end); 0 is not a line".to_owned(),
        ),
        (
            json!({"pattern": "p".repeat(1001)}),
            "pattern is longer than 1000 characters".to_owned(),
        ),
    ] {
        let result = server.call("get_output", arguments.clone()).await;
        assert_eq!(
            error_code("get_output", &arguments, &result),
            "invalid_arguments"
        );
        assert_eq!(structured(&result)["error"]["message"], message);
    }
    let result = server
        .call("get_output", json!({"pattern": "(unclosed"}))
        .await;
    let message = structured(&result)["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        message.starts_with("pattern is not a valid regular expression:"),
        "{message}"
    );
}

#[tokio::test]
async fn paging_without_a_spool_is_refused_saying_why() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    server.call("execute", json!({"code": "x = 1"})).await;
    for arguments in [json!({"stream": "stdout"}), json!({"pattern": "x"})] {
        let result = server.call("get_output", arguments.clone()).await;
        assert_eq!(
            error_code("get_output", &arguments, &result),
            "invalid_arguments"
        );
        let message = structured(&result)["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(
            message.starts_with("the output spool is disabled on this server"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn interrupt_with_nothing_running_sends_no_interrupt() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        server.call("execute", json!({"code": "x = 1"})).await;
        let result = server.call("interrupt", json!({})).await;
        assert_eq!(result.is_error, Some(false));
        assert_eq!(text(&result), "nothing was running; the kernel is idle");
        let answer = structured(&result);
        assert_eq!(answer["interrupted"], false);
        assert_eq!(answer["interruption"], Value::Null);
        assert_eq!(answer["state"], "ready");
        assert_eq!(server.kernels.interrupts(), 0);
    }
}

#[tokio::test]
async fn interrupt_stops_a_background_execution_and_its_output_says_so() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    let started = server
        .call(
            "execute",
            json!({"code": "while True: pass", "background": true}),
        )
        .await;
    let id = pending_id(&started);
    server.started(1).await;
    let result = server.call("interrupt", json!({})).await;
    assert_eq!(
        text(&result),
        "interrupted (cooperative); namespace preserved; epoch 0"
    );
    assert_eq!(structured(&result)["interrupted"], true);
    assert_eq!(server.kernels.interrupts(), 1);
    let output = server
        .call(
            "get_output",
            json!({"execution_id": id, "wait_seconds": 30}),
        )
        .await;
    let output = structured(&output);
    assert_eq!(output["status"], "cancelled", "{output}");
    assert_eq!(output["error"]["code"], "operation_cancelled");
    assert_eq!(output["error"]["message"], "stopped by an interrupt call");
    assert_eq!(output["runtime"]["namespace"], "preserved");
    assert_eq!(server.kernels.launches(), 1, "not replaced");
}

#[tokio::test]
async fn a_full_queue_refuses_with_runtime_busy_and_a_hint() {
    let mut setup = Setup::new(StructuredOutput::Always);
    setup.config.queue.max_pending = 1;
    let server = setup.start().await;
    server
        .call(
            "execute",
            json!({"code": "while True: pass", "background": true}),
        )
        .await;
    server.started(1).await;
    let queued = server
        .call("execute", json!({"code": "x = 1", "background": true}))
        .await;
    assert_eq!(structured(&queued)["status"], "pending");
    for arguments in [
        json!({"code": "x = 2", "background": true}),
        json!({"code": "x = 3"}),
    ] {
        let result = server.call("execute", arguments.clone()).await;
        assert_eq!(error_code("execute", &arguments, &result), "runtime_busy");
        let refused = structured(&result);
        assert_eq!(refused["status"], "rejected");
        assert_eq!(
            refused["error"]["hint"],
            "wait for earlier calls to finish, or check runtime_status"
        );
    }
    let status = server.call("runtime_status", json!({})).await;
    let status = structured(&status);
    assert_eq!(
        (&status["operation_active"], &status["queue_depth"]),
        (&json!(true), &json!(1))
    );
    // Interrupting the running one lets the queued one run.
    server.call("interrupt", json!({})).await;
    let queued = pending_id(&queued);
    let ran = server
        .call(
            "get_output",
            json!({"execution_id": queued, "wait_seconds": 30}),
        )
        .await;
    assert_eq!(structured(&ran)["stdout"], "x = 1\n");
}

#[tokio::test]
async fn the_default_session_cannot_be_stopped() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    let result = server
        .call("kernel_stop", json!({"kernel": "default"}))
        .await;
    let refused = structured(&result);
    assert_eq!(refused["error"]["code"], "invalid_arguments");
    assert_eq!(
        refused["error"]["message"],
        "the default session cannot be stopped"
    );
    assert_eq!(
        refused["error"]["hint"],
        "use kernel_restart for a fresh kernel, or reset to clear its names"
    );
    let status = server.call("runtime_status", json!({})).await;
    assert_eq!(structured(&status)["state"], "ready");
    assert_eq!(server.kernels.kills(), 0);
}

/// An absolute path to a file: what `kernel_start` takes for an interpreter (the fake
/// kernels never run it).
fn interpreter(directory: &tempfile::TempDir) -> String {
    let path = directory.path().join("python3");
    std::fs::write(&path, "").expect("write a stand-in interpreter");
    path.to_str().expect("a UTF-8 path").to_owned()
}

#[tokio::test]
async fn a_stopped_session_refuses_further_calls() {
    let directory = workspace();
    let spec = interpreter(&directory);
    let server = Setup::new(StructuredOutput::Always).start().await;
    let started = server.call("kernel_start", json!({ "spec": spec })).await;
    assert_eq!(structured(&started)["kernel"], "k1", "{started:?}");
    let ran = server
        .call("execute", json!({"code": "x = 1", "kernel": "k1"}))
        .await;
    assert_eq!(structured(&ran)["status"], "ok");
    let stopped = server.call("kernel_stop", json!({"kernel": "k1"})).await;
    assert_eq!(structured(&stopped)["state"], "closed");
    for (tool, arguments) in [
        ("execute", json!({"code": "x = 1", "kernel": "k1"})),
        ("runtime_status", json!({"kernel": "k1"})),
        ("kernel_stop", json!({"kernel": "k1"})),
    ] {
        let result = server.call(tool, arguments.clone()).await;
        assert_eq!(error_code(tool, &arguments, &result), "invalid_arguments");
        assert!(
            text(&result).contains("no kernel session named \"k1\""),
            "{tool}: {}",
            text(&result)
        );
    }
    let listed = server.call("kernel_list", json!({})).await;
    assert_eq!(
        structured(&listed)["kernels"].as_array().map(Vec::len),
        Some(1)
    );
}

#[tokio::test]
async fn kernel_start_refuses_a_taken_id_a_malformed_one_and_one_past_the_limit() {
    let directory = workspace();
    let spec = interpreter(&directory);
    let mut setup = Setup::new(StructuredOutput::Always);
    setup.config.kernels.max_kernels = 2;
    let server = setup.start().await;
    let started = server
        .call("kernel_start", json!({"spec": spec, "kernel": "work"}))
        .await;
    assert_eq!(structured(&started)["ok"], true, "{started:?}");
    for (kernel, code, message) in [
        (
            "work",
            "invalid_arguments",
            "a kernel session named \"work\" is already running",
        ),
        (
            "bad id",
            "invalid_arguments",
            "kernel id \"bad id\" must be 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit",
        ),
        (
            "more",
            "limit_exceeded",
            "2 kernel sessions are running; the limit is 2",
        ),
    ] {
        let arguments = json!({"spec": spec, "kernel": kernel});
        let result = server.call("kernel_start", arguments.clone()).await;
        assert_eq!(error_code("kernel_start", &arguments, &result), code);
        assert_eq!(structured(&result)["error"]["message"], message);
    }
    assert_eq!(server.kernels.launches(), 2, "default and work only");
}

#[tokio::test]
async fn kernel_start_refuses_specs_it_cannot_start() {
    let directory = workspace();
    let missing = directory.path().join("no-python");
    let server = Setup::new(StructuredOutput::Always).start().await;
    for (spec, message) in [
        (
            "no-such-kernelspec-for-tests".to_owned(),
            "no kernelspec named \"no-such-kernelspec-for-tests\"".to_owned(),
        ),
        (
            "relative/python".to_owned(),
            "\"relative/python\" is not an absolute path to a Python interpreter".to_owned(),
        ),
        (
            missing.display().to_string(),
            format!(
                "{:?} is not an absolute path to a Python interpreter",
                missing.display().to_string()
            ),
        ),
    ] {
        let arguments = json!({ "spec": spec });
        let result = server.call("kernel_start", arguments.clone()).await;
        assert_eq!(
            error_code("kernel_start", &arguments, &result),
            "invalid_arguments"
        );
        assert_eq!(structured(&result)["error"]["message"], message.as_str());
    }
    assert_eq!(server.kernels.launches(), 1, "nothing was started");
}

#[tokio::test]
async fn kernel_discover_refuses_a_directory_that_is_not_absolute_or_not_there() {
    let directory = workspace();
    let server = Setup::new(StructuredOutput::Always).start().await;
    let missing = directory.path().join("missing").display().to_string();
    for path in ["relative/dir".to_owned(), missing] {
        let arguments = json!({ "directory": path });
        let result = server.call("kernel_discover", arguments.clone()).await;
        assert_eq!(
            error_code("kernel_discover", &arguments, &result),
            "invalid_arguments"
        );
        assert_eq!(
            structured(&result)["error"]["message"],
            format!("directory {path:?} is not an absolute path to a directory")
        );
    }
    // An empty directory has no virtualenvs in it.
    let arguments = json!({"directory": directory.path().display().to_string()});
    let found = server.call("kernel_discover", arguments).await;
    assert_eq!(structured(&found)["venvs"], json!([]), "{found:?}");
}

#[tokio::test]
async fn namespace_tools_on_a_kernel_without_the_helper_are_unsupported_kernel() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        for (tool, arguments) in [
            ("list", json!({})),
            ("search", json!({"query": "x"})),
            ("inspect", json!({"name": "x"})),
            ("call_function", json!({"name": "f", "arguments": {"a": 1}})),
            ("reload", json!({"modules": ["m"]})),
            ("remove", json!({"names": ["x"]})),
            ("reset", json!({})),
            ("register_tool", json!({"name": "f"})),
        ] {
            let result = server.call(tool, arguments.clone()).await;
            assert_eq!(error_code(tool, &arguments, &result), "unsupported_kernel");
            assert!(
                text(&result).contains("this kernel has no ipython-mcp helper"),
                "{tool}: {}",
                text(&result)
            );
        }
        // The session is untouched: code still runs.
        let next = server.call("execute", json!({"code": "x = 1"})).await;
        assert_eq!(next.is_error, Some(false));
    }
}

#[tokio::test]
async fn namespace_limits_are_checked_before_the_kernel_is_asked() {
    let server = Setup::new(StructuredOutput::Always).start().await;
    let many: Vec<String> = (0..1001).map(|n| format!("n{n}")).collect();
    for (tool, arguments, message) in [
        (
            "search",
            json!({"query": "q".repeat(513)}),
            "query is longer than 512 characters".to_owned(),
        ),
        (
            "inspect",
            json!({"name": "n".repeat(513)}),
            "name is longer than 512 characters".to_owned(),
        ),
        (
            "remove",
            json!({ "names": many }),
            "at most 1000 names per call, got 1001".to_owned(),
        ),
        (
            "reload",
            json!({"modules": ["m".repeat(600)]}),
            "modules is longer than 512 characters".to_owned(),
        ),
    ] {
        let result = server.call(tool, arguments.clone()).await;
        assert_eq!(error_code(tool, &arguments, &result), "invalid_arguments");
        assert_eq!(structured(&result)["error"]["message"], message.as_str());
    }
}

#[tokio::test]
async fn unregister_tool_refuses_built_in_names_and_reports_unknown_ones() {
    for shape in SHAPES {
        let server = Setup::new(shape).start().await;
        let result = server
            .call(
                "unregister_tool",
                json!({"names": ["execute", "notebook_read", "ghost"]}),
            )
            .await;
        assert_eq!(result.is_error, Some(false), "{result:?}");
        let answer = structured(&result);
        assert_eq!(answer["refused"], json!(["execute", "notebook_read"]));
        assert_eq!(answer["unknown"], json!(["ghost"]));
        assert_eq!(answer["unregistered"], json!([]));
        // The built-in tools are all still offered.
        assert_eq!(server.tools().await.len(), crate::surface::TOOLS.len());
    }
}

#[tokio::test]
async fn kernel_and_notebook_together_or_a_notebook_without_a_session_are_refused() {
    let root = workspace();
    let server = Setup::new(StructuredOutput::Always)
        .workspace(root.path())
        .start()
        .await;
    for tool in ["runtime_status", "interrupt", "kernel_restart"] {
        let both = json!({"kernel": "default", "notebook": "n.ipynb"});
        let result = server.call(tool, both.clone()).await;
        assert_eq!(error_code(tool, &both, &result), "invalid_arguments");
        assert_eq!(
            structured(&result)["error"]["message"],
            "give either kernel or notebook, not both"
        );
        let unbound = json!({"notebook": "n.ipynb"});
        let result = server.call(tool, unbound.clone()).await;
        assert_eq!(error_code(tool, &unbound, &result), "invalid_arguments");
        let refused = &structured(&result)["error"];
        assert_eq!(
            refused["message"],
            "notebook \"n.ipynb\" has no kernel session"
        );
        assert_eq!(
            refused["hint"],
            "notebook_execute, notebook_execute_cell or notebook_session starts one"
        );
    }
    assert_eq!(server.kernels.launches(), 1, "nothing restarted");
}
