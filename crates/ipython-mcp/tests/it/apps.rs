//! The output view (MCP Apps) in a real browser: `tests/apps/host.mjs`, a minimal host on the
//! official TypeScript SDK client and Playwright's driver (versions pinned in
//! `tests/apps/package.json`, installed with npm into `target/tmp/apps`), runs one `execute` on
//! the real binary over stdio, shows the tool's `ui://` view in Debian's Chromium (headless),
//! plays the host's side of the protocol and reports what the page shows, and checks every
//! protocol message against the JSON schemas of `@modelcontextprotocol/ext-apps`. The screenshot is
//! left in `target/tmp/apps-output-view.png`.
//!
//! Chromium comes from the machine (`.ci/run` installs Debian's `chromium`); Playwright's own
//! browser download is not used.

// The one definition of "running in CI" for every test binary of the workspace.
use crate::ci;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

/// A cell with a stdout line, an HTML table, a 480×320 PNG of about 400 KB (over the
/// `IPYTHON_MCP_MAX_IMAGE_BYTES` the test sets, so the model gets it downscaled and the view
/// must show the original from the spool), a Plotly figure and a Vega-Lite chart (the host
/// stubs Plotly's library and refuses Vega's, so both of the view's chart paths run). Pure
/// Python (no Pillow in the managed environment).
const CELL: &str = r#"import struct, zlib
from IPython.display import HTML, Image, display
W, H = 480, 320
seed = 12345
rows = []
for y in range(H):
    row = bytearray(b'\x00')
    for x in range(W):
        seed = (seed * 1103515245 + 12345) & 0x7fffffff
        row += bytes((x * 255 // W, y * 255 // H, seed >> 24))
    rows.append(bytes(row))
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
png = (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', W, H, 8, 2, 0, 0, 0))
       + chunk(b'IDAT', zlib.compress(b''.join(rows), 9)) + chunk(b'IEND', b''))
print('hello from the cell')
display(HTML("<table><thead><tr><th>planet</th><th>moons</th></tr></thead>"
             "<tbody><tr><td>Mars</td><td>2</td></tr><tr><td>Jupiter</td><td>95</td></tr></tbody></table>"))
display(Image(data=png))
display({'application/vnd.plotly.v1+json': {'data': [{'type': 'bar', 'x': ['Mars', 'Jupiter'], 'y': [2, 95]}],
                                            'layout': {'title': {'text': 'moons'}}},
         'text/plain': 'a Plotly figure'}, raw=True)
display({'application/vnd.vegalite.v5+json': {'mark': 'bar', 'data': {'values': [{'a': 1}]}},
         'text/plain': 'a Vega-Lite chart'}, raw=True)
len(png)
"#;

const VIEW_URI: &str = "ui://ipython-mcp/output";

fn target_tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// Installs the pinned host dependencies with npm, once, and the current host script each
/// run; `None` (skip) only outside CI when npm is missing.
fn install() -> Option<PathBuf> {
    let dir = target_tmp().join("apps");
    let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps");
    let wanted = std::fs::read_to_string(sources.join("package.json")).expect("package.json");
    let ready = |dir: &Path| {
        [
            "playwright-core",
            "ajv",
            "@modelcontextprotocol/sdk",
            "@modelcontextprotocol/ext-apps",
        ]
        .iter()
        .all(|package| dir.join("node_modules").join(package).exists())
    };
    // The MCP Apps package is here for its JSON schemas only: not its peers (the SDK's next
    // major, zod), which nothing here loads.
    if !ci::npm_install(
        &dir,
        &wanted,
        &["--legacy-peer-deps"],
        "the output view's browser test",
        ready,
    ) {
        return None;
    }
    // Beside its node_modules, where Node resolves its imports.
    std::fs::copy(sources.join("host.mjs"), dir.join("host.mjs")).expect("copy host.mjs");
    Some(dir)
}

/// Debian's Chromium (or `IPYTHON_MCP_TEST_CHROMIUM`); `None` (skip) only outside CI.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("IPYTHON_MCP_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if path.exists() {
        return Some(path);
    }
    ci::skip_outside_ci(&format!(
        "{} not found (apt-get install chromium); the output view's browser test did not run",
        path.display()
    ));
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn the_output_view_shows_a_table_and_a_full_size_image_in_chromium() {
    let Some(chromium) = chromium() else { return };
    let Some(dir) = install() else { return };
    // The managed environment first, so the host's call does not wait for its provisioning.
    support::provisioned_python().await;
    let screenshot = target_tmp().join("apps-output-view.png");
    let _ = std::fs::remove_file(&screenshot);
    let run = tokio::process::Command::new("node")
        .arg(dir.join("host.mjs"))
        .arg(env!("CARGO_BIN_EXE_ipython-mcp"))
        .arg(&screenshot)
        .arg(&chromium)
        .arg(CELL)
        .env("IPYTHON_MCP_CACHE_DIR", support::cache_dir())
        .env("IPYTHON_MCP_LOG", "warn")
        .env("IPYTHON_MCP_SPARE_KERNELS", "0")
        .env("IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS", "120")
        .env("IPYTHON_MCP_MAX_IMAGE_BYTES", "65536")
        .env_remove("VIRTUAL_ENV")
        .env_remove("IPYTHON_MCP_PYTHON")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .output();
    // The host's own bounds (a call, a DOM wait) are shorter; this only stops a hung run.
    let output = tokio::time::timeout(Duration::from_secs(900), run)
        .await
        .expect("the host finishes")
        .expect("run node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the host failed ({}): {stdout}",
        output.status
    );
    let report: Value = serde_json::from_str(stdout.trim()).expect("one JSON report");

    // Every tool whose result carries rich output links the view, and the view is listed.
    for tool in [
        "execute",
        "get_output",
        "notebook_execute",
        "notebook_execute_cell",
    ] {
        assert_eq!(
            report["tools_with_view"][tool], VIEW_URI,
            "{tool}: {report}"
        );
    }
    assert_eq!(
        report["tools_with_view"]
            .as_object()
            .map(|tools| tools.len()),
        Some(4),
        "only the viewed tools: {report}"
    );
    assert_eq!(
        report["listed_view"]["mimeType"],
        "text/html;profile=mcp-app"
    );
    assert_eq!(report["view"]["mimeType"], "text/html;profile=mcp-app");
    assert!(
        report["templates"]
            .as_array()
            .expect("templates")
            .contains(&Value::from("ipython-mcp://executions/{execution_id}")),
        "{report}"
    );

    // The result names its execution for the view; an unknown one is a clear not-found.
    let id = report["result_meta"]["ipython-mcp/execution"]["id"]
        .as_str()
        .expect("the result's _meta names the execution");
    assert_eq!(
        report["result_meta"]["ipython-mcp/execution"]["uri"],
        format!("ipython-mcp://executions/{id}")
    );
    assert_eq!(report["unknown_execution"]["code"], -32002, "{report}");
    assert!(
        report["unknown_execution"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("unknown execution")),
        "{report}"
    );

    // The model got the image downscaled; the page shows the original, at its own size.
    let page = &report["page"];
    let model_image = &report["model_images"][0];
    assert!(
        model_image["width"]
            .as_u64()
            .is_some_and(|width| width < 480),
        "the reply's image was downscaled: {report}"
    );
    assert_eq!(page["image"]["naturalWidth"], 480, "{page}");
    assert_eq!(page["image"]["naturalHeight"], 320, "{page}");
    assert_eq!(page["image"]["width"], 480, "shown at full size: {page}");
    assert_eq!(page["image"]["height"], 320, "shown at full size: {page}");
    let cells: Vec<&str> = page["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(cells, ["planet", "moons", "Mars", "2", "Jupiter", "95"]);
    assert_eq!(page["streams"][0], "hello from the cell\n");
    assert_eq!(page["frame_height"], page["content_height"], "{page}");
    // A Plotly bundle is drawn by the library from the CDN the view's policy names, with the
    // bundle's data; a chart whose library cannot be had shows the bundle's other form.
    assert_eq!(page["plotly"]["traces"], 1, "{page}");
    assert_eq!(page["plotly"]["x"], serde_json::json!(["Mars", "Jupiter"]));
    assert_eq!(page["plotly"]["title"], "moons");
    assert_eq!(page["vega_fallback"], 1, "{page}");

    // What the view sent, the tools' and the view's `_meta.ui` and the tool result the host
    // passed on all fit the MCP Apps reference package's schemas.
    assert_eq!(
        report["protocol"]["violations"],
        serde_json::json!([]),
        "{report}"
    );
    let checked = report["protocol"]["checked"].to_string();
    for kind in [
        "McpUiToolMeta",
        "McpUiResourceMeta",
        "McpUiToolResultNotification",
        "McpUiInitializeRequest",
        "McpUiInitializedNotification",
        "McpUiSizeChangedNotification",
        "resources/read",
    ] {
        assert!(checked.contains(kind), "{kind} checked: {checked}");
    }

    // The page spoke the protocol in order: handshake first, then it read the execution
    // through the host.
    let methods: Vec<&str> = page["app_messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|message| message["method"].as_str())
        .collect();
    assert_eq!(
        methods[..2],
        ["ui/initialize", "ui/notifications/initialized"],
        "{methods:?}"
    );
    assert_eq!(
        page["app_messages"][0]["params"]["protocolVersion"],
        "2026-01-26"
    );
    let reads: Vec<&Value> = page["app_messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|message| message["method"] == "resources/read")
        .collect();
    assert_eq!(reads.len(), 1, "{methods:?}");
    assert_eq!(
        reads[0]["params"]["uri"],
        format!("ipython-mcp://executions/{id}")
    );
    // The screenshot shows them: text where the table is, no white where the image is.
    assert!(
        std::fs::metadata(&screenshot).is_ok_and(|metadata| metadata.len() > 0),
        "a screenshot in {}",
        screenshot.display()
    );
    let painted = &page["painted"];
    assert!(
        painted["table"]["dark"]
            .as_u64()
            .is_some_and(|dark| dark >= 50),
        "the table's text is in the screenshot: {painted}"
    );
    // (Its box may be off by the frame's border: a row and a column of white.)
    let image_white = painted["image"]["white"].as_u64().expect("white");
    assert!(
        painted["image"]["pixels"] == 480 * 320 && image_white * 50 < 480 * 320,
        "the image fills its box in the screenshot: {painted}"
    );
}

/// The execution a tool result names, from its `_meta` (`execute` and `get_output` alike).
async fn call_naming(server: &support::Server, tool: &str, arguments: Value) -> (String, Value) {
    let arguments = arguments.as_object().cloned().expect("arguments object");
    let result = server
        .client
        .peer()
        .call_tool(
            rmcp::model::CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments),
        )
        .await
        .expect("tools/call");
    let meta = result.meta.expect("the result has _meta");
    let id = meta.0["ipython-mcp/execution"]["id"]
        .as_str()
        .expect("it names the execution")
        .to_owned();
    let text = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.clone()))
        .collect::<Vec<_>>()
        .join("\n");
    (id, Value::String(text))
}

async fn read_execution(server: &support::Server, id: &str) -> Value {
    let read = server
        .client
        .peer()
        .read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
            "ipython-mcp://executions/{id}"
        )))
        .await
        .expect("resources/read");
    match &read.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents {
            text, mime_type, ..
        } => {
            assert_eq!(mime_type.as_deref(), Some("application/json"));
            serde_json::from_str(text).expect("JSON")
        }
        other => panic!("text contents: {other:?}"),
    }
}

/// What the view reads, without a browser: the full streams the model got cut (from the spool),
/// an error with its traceback, and, with the spool off, the bounded view marked incomplete.
#[tokio::test]
async fn the_execution_resource_has_the_full_output_the_model_got_cut() {
    let server = support::Server::start(
        support::Family::Handshake,
        &[("IPYTHON_MCP_MAX_TEXT_CHARS", "300")],
    )
    .await;
    let code = "for i in range(400): print(f'line {i:04d}')";
    let (id, text) = call_naming(&server, "execute", serde_json::json!({ "code": code })).await;
    assert!(
        !text.as_str().unwrap_or_default().contains("line 0200"),
        "the model's text is cut: {text}"
    );
    let full = read_execution(&server, &id).await;
    assert_eq!(full["execution_id"], id.as_str());
    assert_eq!(full["status"], "ok");
    assert_eq!(full["complete"], true, "{full}");
    let stdout: String = full["outputs"]
        .as_array()
        .expect("outputs")
        .iter()
        .filter(|output| output["output_type"] == "stream" && output["name"] == "stdout")
        .map(|output| match &output["text"] {
            Value::Array(lines) => lines.iter().filter_map(Value::as_str).collect::<String>(),
            text => text.as_str().unwrap_or_default().to_owned(),
        })
        .collect();
    assert_eq!(stdout.lines().count(), 400, "every line: {full}");
    assert!(stdout.contains("line 0200\n"));

    // get_output names the same execution for the view.
    let (named, _) = call_naming(
        &server,
        "get_output",
        serde_json::json!({ "execution_id": id }),
    )
    .await;
    assert_eq!(named, id);

    let (failed, _) = call_naming(
        &server,
        "execute",
        serde_json::json!({ "code": "def f():\n    raise ValueError('no moons')\nf()" }),
    )
    .await;
    let full = read_execution(&server, &failed).await;
    assert_eq!(full["status"], "error");
    let error = full["outputs"]
        .as_array()
        .expect("outputs")
        .iter()
        .find(|output| output["output_type"] == "error")
        .expect("an error output");
    assert_eq!(error["ename"], "ValueError");
    assert_eq!(error["evalue"], "no moons");
    assert!(error["traceback"]
        .as_array()
        .is_some_and(|lines| !lines.is_empty()));
    server.stop().await;

    let server = support::Server::start(
        support::Family::Handshake,
        &[
            ("IPYTHON_MCP_MAX_TEXT_CHARS", "300"),
            ("IPYTHON_MCP_MAX_SPOOL_EXECUTION_BYTES", "0"),
        ],
    )
    .await;
    let (id, _) = call_naming(&server, "execute", serde_json::json!({ "code": code })).await;
    let view = read_execution(&server, &id).await;
    assert_eq!(
        view["complete"], false,
        "no spool, only the bounded view: {view}"
    );
    assert_eq!(view["outputs"][0]["output_type"], "stream");
    assert!(view["outputs"][0]["text"]
        .as_str()
        .is_some_and(|text| text.contains("line 0000") && !text.contains("line 0200")));
    server.stop().await;
}
