//! What the model of each popular client reads of our results (docs/src/guide.md, "What the model
//! reads"). A client converts a tool result before its model sees it; each rule below is that
//! client's conversion as its source reads (late 2026), applied to real results of the binary
//! in the default shape (`IPYTHON_MCP_STRUCTURED_OUTPUT=auto`). For every tool whose results
//! can carry images, stdout, the value, the error and every image must reach every model, and
//! a trivial call must stay cheap.

use crate::support;

use base64::Engine as _;
use rmcp::model::ContentBlock;
use serde_json::{json, Value};
use support::{call_peer, Family, Server, ToolResult};

/// The clients whose conversions are modelled here.
#[derive(Debug, Clone, Copy)]
enum Client {
    /// With `structuredContent`, the model gets `JSON.stringify(structuredContent)` in place of
    /// every text block, images kept; on `isError`, the content blocks only.
    ClaudeCode,
    /// With `structuredContent`, the model gets only its JSON: text and images dropped.
    Codex,
    /// With `structuredContent`, text blocks are dropped, images kept, the JSON added.
    VsCode,
    /// With `structuredContent`, one text part with its JSON, images dropped; on `isError`, the
    /// joined text only.
    Opencode,
    /// `structuredContent` is ignored; on `isError`, the whole result as JSON text.
    Gemini,
}

const CLIENTS: [Client; 5] = [
    Client::ClaudeCode,
    Client::Codex,
    Client::VsCode,
    Client::Opencode,
    Client::Gemini,
];

/// What one model reads of one result: its text, and the images it is shown.
#[derive(Debug, Default)]
struct ModelView {
    text: String,
    images: Vec<Vec<u8>>,
}

fn texts(result: &ToolResult) -> String {
    result.text()
}

fn images(result: &ToolResult) -> Vec<Vec<u8>> {
    result
        .images()
        .into_iter()
        .map(|(_, bytes)| bytes)
        .collect()
}

/// The whole result as a client would serialize it (`content`, `structuredContent`,
/// `isError`), for Gemini CLI's error path.
fn whole(result: &ToolResult) -> String {
    let content: Vec<Value> = result
        .content
        .iter()
        .map(|block| serde_json::to_value(block).expect("content block serializes"))
        .collect();
    let mut object = json!({"content": content, "isError": result.is_error});
    if !result.structured.is_null() {
        object["structuredContent"] = result.structured.clone();
    }
    object.to_string()
}

fn view(client: Client, result: &ToolResult) -> ModelView {
    let structured = (!result.structured.is_null()).then(|| result.structured.to_string());
    let plain = || ModelView {
        text: texts(result),
        images: images(result),
    };
    match (client, structured) {
        (Client::Gemini, _) if result.is_error => ModelView {
            text: whole(result),
            images: Vec::new(),
        },
        (Client::Gemini, _) | (_, None) => plain(),
        (Client::ClaudeCode, Some(_)) if result.is_error => plain(),
        (Client::ClaudeCode, Some(json)) | (Client::VsCode, Some(json)) => ModelView {
            text: json,
            images: images(result),
        },
        (Client::Opencode, Some(_)) if result.is_error => ModelView {
            text: texts(result),
            images: Vec::new(),
        },
        (Client::Codex, Some(json)) | (Client::Opencode, Some(json)) => ModelView {
            text: json,
            images: Vec::new(),
        },
    }
}

/// The smallest valid PNG (1×1), as a cell displays it.
const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// A cell with everything a model must see: three printed lines, a displayed image and a
/// final value.
fn rich_cell() -> String {
    format!(
        "import base64\nfrom IPython.display import Image, display\n\
         print('alpha-line')\nprint('beta-line')\nprint('gamma-line')\n\
         display(Image(base64.b64decode('{PNG_BASE64}')))\n\
         6 * 7 + 1000"
    )
}

const FAILING_CELL: &str = "def explode():\n    raise ValueError('kaboom-42')\nexplode()";

/// Checks that every client's model reads the rich cell's stdout, value and image.
fn assert_rich_reaches_every_model(tool: &str, result: &ToolResult) {
    let png = base64::engine::general_purpose::STANDARD
        .decode(PNG_BASE64)
        .expect("png");
    assert!(
        result.structured.is_null(),
        "{tool}: no structuredContent in auto"
    );
    for client in CLIENTS {
        let seen = view(client, result);
        for needle in ["alpha-line\nbeta-line\ngamma-line", "1042"] {
            assert!(
                seen.text.contains(needle),
                "{tool} in {client:?}: {needle:?} not in {:?}",
                seen.text
            );
        }
        assert_eq!(seen.images, vec![png.clone()], "{tool} in {client:?}");
    }
}

/// Checks that every client's model reads the failing cell's exception and where it came from.
fn assert_error_reaches_every_model(tool: &str, result: &ToolResult) {
    assert!(result.is_error, "{tool}: {result:?}");
    for client in CLIENTS {
        let seen = view(client, result);
        for needle in ["ValueError", "kaboom-42", "explode()"] {
            assert!(
                seen.text.contains(needle),
                "{tool} in {client:?}: {needle:?} not in {:?}",
                seen.text
            );
        }
    }
}

const AUTO: (&str, &str) = ("IPYTHON_MCP_STRUCTURED_OUTPUT", "auto");

#[tokio::test]
async fn stdout_values_errors_and_images_reach_every_clients_model() {
    let workspace = tempfile::tempdir().expect("workspace");
    let root = workspace.path().to_str().expect("utf-8 path");
    let server = Server::start(
        Family::Handshake,
        &[AUTO, ("IPYTHON_MCP_WORKSPACE_ROOT", root)],
    )
    .await;
    let peer = server.client.peer();
    let tools = server.client.list_all_tools().await.expect("tools/list");
    for tool in &tools {
        let image_tool = [
            "execute",
            "get_output",
            "notebook_execute",
            "notebook_execute_cell",
        ]
        .contains(&tool.name.as_ref());
        assert_eq!(
            tool.output_schema.is_none(),
            image_tool,
            "{}: an output schema exactly when its results carry no images",
            tool.name
        );
    }

    // execute, and get_output of the same execution.
    let executed = call_peer(peer, "execute", json!({"code": rich_cell()})).await;
    assert_rich_reaches_every_model("execute", &executed);
    let background = call_peer(
        peer,
        "execute",
        json!({"code": rich_cell(), "background": true}),
    )
    .await;
    let id = background
        .text()
        .split('"')
        .nth(1)
        .expect("the text names the execution_id")
        .to_owned();
    let output = call_peer(
        peer,
        "get_output",
        json!({"execution_id": id, "wait_seconds": 120}),
    )
    .await;
    assert_rich_reaches_every_model("get_output", &output);
    let failed = call_peer(peer, "execute", json!({"code": FAILING_CELL})).await;
    assert_error_reaches_every_model("execute", &failed);

    // notebook_execute (a new cell) and notebook_execute_cell (an existing one).
    let created = call_peer(
        peer,
        "notebook_create",
        json!({"path": "view.ipynb", "cells": [{"source": rich_cell()}, {"source": FAILING_CELL}]}),
    )
    .await;
    assert!(!created.is_error, "{created:?}");
    let cell = call_peer(
        peer,
        "notebook_execute_cell",
        json!({"path": "view.ipynb", "index": 0, "timeout_seconds": 120}),
    )
    .await;
    assert_rich_reaches_every_model("notebook_execute_cell", &cell);
    let failed_cell = call_peer(
        peer,
        "notebook_execute_cell",
        json!({"path": "view.ipynb", "index": 1}),
    )
    .await;
    assert_error_reaches_every_model("notebook_execute_cell", &failed_cell);
    let appended = call_peer(
        peer,
        "notebook_execute",
        json!({"path": "view.ipynb", "code": rich_cell()}),
    )
    .await;
    assert_rich_reaches_every_model("notebook_execute", &appended);
    let failed_run = call_peer(
        peer,
        "notebook_execute",
        json!({"path": "view.ipynb", "code": FAILING_CELL}),
    )
    .await;
    assert_error_reaches_every_model("notebook_execute", &failed_run);

    // A tool without images keeps its typed result, compact: no bookkeeping a model would
    // pay for in every call.
    let listed = call_peer(peer, "list", json!({})).await;
    assert!(listed.structured.is_object(), "{listed:?}");
    for client in CLIENTS {
        let seen = view(client, &listed).text;
        for noise in [
            "admission_seq",
            "request_id",
            "queue_wait_ms",
            "\"truncated\":false",
        ] {
            assert!(
                !seen.contains(noise),
                "list in {client:?}: {noise} in {seen}"
            );
        }
        assert!(seen.contains("explode"), "list in {client:?}: {seen}");
    }
    server.stop().await;
}

/// The characters each client's model reads for three everyday cells, in both shapes; the
/// trivial call stays within its budget in every client.
#[tokio::test]
async fn a_trivial_call_costs_every_model_at_most_300_characters() {
    const MAX_TRIVIAL_CHARS: usize = 300;
    let cells = [
        ("x + 41", "x = 1"),
        ("3-line print", "print('one')\nprint('two')\nprint('three')"),
        ("cell showing a plot", ""),
    ];
    for shape in ["auto", "always"] {
        let server = Server::start(
            Family::Handshake,
            &[("IPYTHON_MCP_STRUCTURED_OUTPUT", shape)],
        )
        .await;
        let peer = server.client.peer();
        call_peer(peer, "execute", json!({"code": "x = 1"})).await;
        for (name, code) in cells {
            let code = match name {
                "x + 41" => "x + 41".to_owned(),
                "cell showing a plot" => format!(
                    "import base64\nfrom IPython.display import Image, display\ndisplay(Image(base64.b64decode('{PNG_BASE64}')))"
                ),
                _ => code.to_owned(),
            };
            let result = call_peer(peer, "execute", json!({ "code": code })).await;
            assert!(!result.is_error, "{result:?}");
            let sizes: Vec<String> = CLIENTS
                .iter()
                .map(|client| {
                    let seen = view(*client, &result);
                    if shape == "auto" && name == "x + 41" {
                        assert!(seen.text.contains("42"), "{client:?}: {}", seen.text);
                        assert!(
                            seen.text.chars().count() <= MAX_TRIVIAL_CHARS,
                            "{client:?} reads {} characters for x + 41: {}",
                            seen.text.chars().count(),
                            seen.text
                        );
                    }
                    format!(
                        "{client:?} {} chars{}",
                        seen.text.chars().count(),
                        if seen.images.is_empty() {
                            ""
                        } else {
                            " + image"
                        }
                    )
                })
                .collect();
            // The test's report (shown with --nocapture), for the table in docs/src/guide.md.
            eprintln!("{shape}: {name}: {}", sizes.join(", "));
        }
        server.stop().await;
    }
}

/// The text blocks of an image-bearing result carry no structured copy: one text block, then
/// the images, in that order.
#[tokio::test]
async fn an_image_bearing_result_is_one_text_block_then_its_images() {
    let server = Server::start(Family::Modern, &[AUTO]).await;
    let result = call_peer(
        server.client.peer(),
        "execute",
        json!({"code": rich_cell()}),
    )
    .await;
    let kinds: Vec<&str> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(_) => "text",
            ContentBlock::Image(_) => "image",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["text", "image"], "{result:?}");
    server.stop().await;
}

/// A display the model could neither read nor see (HTML, JSON or JavaScript only) reaches it
/// as a short summary naming the spool file that keeps the whole payload.
#[tokio::test]
async fn rich_displays_without_a_readable_form_are_summarized_with_their_spool_file() {
    let server = Server::start(Family::Handshake, &[AUTO]).await;
    let code = r#"from IPython.display import display, HTML
table = '<table><thead><tr><th>city</th><th>sales</th></tr></thead><tbody>' + ''.join(
    f'<tr><td>c{i}</td><td>{i * 10}</td></tr>' for i in range(50)) + '</tbody></table>'
display(HTML(table))
spec = {'title': 'Sales', 'mark': 'bar', 'encoding': {'x': {'field': 'a', 'type': 'nominal'}},
        'data': {'values': [{'a': 'x'}, {'a': 'y'}]}}
display({'application/vnd.vegalite.v5+json': spec, 'text/plain': '<VegaLite 5 object>'}, raw=True)
"#;
    let result = call_peer(server.client.peer(), "execute", json!({ "code": code })).await;
    let text = result.text();
    assert!(!result.is_error, "{text}");
    for client in CLIENTS {
        let seen = view(client, &result).text;
        assert!(
            seen.contains(
                "[HTML table: 50 rows × 2 columns; columns: city, sales; first rows: c0 | 0; c1 | 10; c2 | 20] (full text/html: "
            ),
            "{client:?}: {seen}"
        );
        assert!(
            seen.contains("[Vega-Lite chart \"Sales\": mark bar; x: a (nominal); 2 data rows] (full application/vnd.vegalite.v5+json: "),
            "{client:?}: {seen}"
        );
    }
    // Each summary names the file holding the whole payload.
    let paths: Vec<&str> = text
        .split(": ")
        .filter_map(|part| part.split(')').next())
        .filter(|part| part.starts_with('/') && part.contains(".display-"))
        .collect();
    assert_eq!(paths.len(), 2, "{text}");
    let html = std::fs::read_to_string(paths[0]).expect("the HTML payload");
    assert!(
        html.starts_with("<table>") && html.contains("<td>c49</td>"),
        "{html}"
    );
    let spec: Value =
        serde_json::from_str(&std::fs::read_to_string(paths[1]).expect("the chart payload"))
            .expect("JSON");
    assert_eq!(spec["title"], "Sales");
    server.stop().await;
}

/// A tasks client's completed background `execute` is `execute`'s own result in the same
/// shape: text and images, no structuredContent.
#[tokio::test]
async fn a_completed_task_has_the_shape_of_the_execute_it_ran() {
    use rmcp::model::{CallToolRequestParams, CallToolResponse, GetTaskParams, TaskPayload};
    let server = Server::start_with_tasks(Family::Handshake, &[AUTO]).await;
    let peer = server.client.peer();
    let arguments = json!({"code": rich_cell(), "background": true});
    let request = CallToolRequestParams::new("execute")
        .with_arguments(arguments.as_object().cloned().expect("object"));
    let task = match peer.call_tool_once(request).await.expect("tools/call") {
        CallToolResponse::Task(created) => created.task,
        other => panic!("a task, not {other:?}"),
    };
    // Waits on the execution itself, then reads the task.
    call_peer(
        peer,
        "get_output",
        json!({"execution_id": task.task_id, "wait_seconds": 120}),
    )
    .await;
    let completed = peer
        .get_task(GetTaskParams::new(task.task_id.clone()))
        .await
        .expect("tasks/get");
    let TaskPayload::Completed { result } = &completed.task.payload else {
        panic!("a result: {completed:?}")
    };
    let result: rmcp::model::CallToolResult =
        serde_json::from_value(Value::Object(result.clone())).expect("a tool result");
    assert!(result.structured_content.is_none(), "{result:?}");
    let result = ToolResult {
        structured: Value::Null,
        is_error: result.is_error == Some(true),
        content: result.content.to_vec(),
    };
    assert_rich_reaches_every_model("a task's result", &result);
    server.stop().await;
}
