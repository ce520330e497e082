//! The json-lines protocol (`--json-lines`) for trusted local desktop programs: one JSON
//! request per line in, one JSON response per line out, correlated by `id`. Requests run
//! concurrently (an `interrupt` reaches a running `execute`), so responses may come out of
//! order.
//!
//! Every method is a notebook operation the MCP tools also do, through the same code
//! (`ipython_mcp_notebooks`): paths checked by the workspace, the notebook's own kernel
//! session, the same bounded execution result, the same revisions and conflicts, errors with
//! the same codes and words (`ipython_mcp_mcp::notebooks_error`). Nothing here speaks MCP.
//!
//! ```text
//! → {"id": 1, "method": "open", "params": {"path": "a.ipynb"}}
//! ← {"id": 1, "result": {"path": "a.ipynb", "revision": "…", "notebook": {…}}}
//! → {"id": 2, "method": "save", "params": {"path": "a.ipynb", "revision": "…", "notebook": {…}}}
//! ← {"id": 2, "error": {"code": "revision_conflict", "message": "…", "hint": "…"}}
//! ```

use std::sync::Arc;

use ipython_mcp_kernel::SessionError;
use ipython_mcp_mcp::{
    notebooks_error, ExecuteCellParams, IpythonMcp, NotebookExecuteParams, NotebookExecuteResult,
    PathParams,
};
use ipython_mcp_notebook::Notebook;
use ipython_mcp_notebooks::{NotebookSession, Notebooks, Run};
use ipython_mcp_output::{Code, ErrorInfo};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

/// Longest request line: a whole notebook travels in `save`, and resources serve notebooks up
/// to this size too. A longer line is answered with an error and skipped.
const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Requests running at once; the next line is read when one finishes (the desktop program
/// waits, nothing is dropped).
const MAX_IN_FLIGHT: usize = 64;

/// Serves the protocol until `input` ends, then calls `on_eof` (the caller starts shutting the
/// sessions down, so running executions end) and returns once every response is written.
pub async fn serve_json_lines<R, W>(
    server: IpythonMcp,
    input: R,
    output: W,
    on_eof: impl FnOnce(),
) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (responses, mut outbox) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(response) = outbox.recv().await {
            let mut line = serde_json::to_vec(&response).unwrap_or_default();
            line.push(b'\n');
            output.write_all(&line).await?;
            output.flush().await?;
        }
        Ok::<(), std::io::Error>(())
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut running = tokio::task::JoinSet::new();
    let mut reader = LineReader::new(input);
    loop {
        let line = match reader.next().await? {
            Line::End => break,
            Line::TooLong => {
                let error = ErrorInfo::new(
                    Code::InvalidArguments,
                    format!("the request line is longer than {MAX_LINE_BYTES} bytes"),
                );
                let _ = responses.send(error_response(Value::Null, error));
                continue;
            }
            Line::Text(line) => line,
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let request = match parse_request(&line) {
            Ok(request) => request,
            Err(mut refused) => {
                let id = std::mem::take(&mut refused.id);
                let _ = responses.send(error_response(id, refused.error()));
                continue;
            }
        };
        let permit = Arc::clone(&slots)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let (server, responses) = (server.clone(), responses.clone());
        running.spawn(async move {
            let Request { id, method, params } = request;
            let answer = match Method::parse(&method, params) {
                Ok(parsed) => call(&server, parsed).await,
                Err(error) => Err(error),
            };
            tracing::info!(method = %method, ok = answer.is_ok(), "json-lines request");
            let response = match answer {
                Ok(result) => json!({"id": id, "result": result}),
                Err(error) => error_response(id, *error),
            };
            let _ = responses.send(response);
            drop(permit);
        });
    }
    on_eof();
    while running.join_next().await.is_some() {}
    drop(responses);
    writer.await.unwrap_or(Ok(()))
}

struct Request {
    id: Value,
    method: String,
    params: Value,
}

/// A line that is not a request: its `id` (when it had one) and why.
struct Refused {
    id: Value,
    message: String,
}

impl Refused {
    fn error(self) -> ErrorInfo {
        ErrorInfo::new(Code::InvalidArguments, self.message)
            .with_hint("send one JSON object per line: {\"id\": …, \"method\": …, \"params\": {…}}")
    }
}

/// A request line, or why it is refused.
fn parse_request(line: &[u8]) -> Result<Request, Refused> {
    let invalid = |id: Value, message: String| Err(Refused { id, message });
    let text = match std::str::from_utf8(line) {
        Ok(text) => text,
        Err(_) => return invalid(Value::Null, "the request line is not UTF-8".to_owned()),
    };
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(error) => return invalid(Value::Null, format!("the request is not JSON: {error}")),
    };
    let Value::Object(mut object) = value else {
        return invalid(Value::Null, "the request is not a JSON object".to_owned());
    };
    let id = object.remove("id").unwrap_or(Value::Null);
    if !matches!(id, Value::Null | Value::String(_) | Value::Number(_)) {
        return invalid(Value::Null, "id must be a string or a number".to_owned());
    }
    let method = match object.remove("method") {
        Some(Value::String(method)) => method,
        _ => return invalid(id, "method must be a string".to_owned()),
    };
    let params = object
        .remove("params")
        .unwrap_or_else(|| Value::Object(Default::default()));
    if !params.is_object() {
        return invalid(id, "params must be a JSON object".to_owned());
    }
    if let Some(key) = object.keys().next() {
        return invalid(id, format!("unknown field {key:?}"));
    }
    Ok(Request { id, method, params })
}

fn error_response(id: Value, error: ErrorInfo) -> Value {
    json!({"id": id, "error": error})
}

/// A request's method and its parameters, in the order docs/src/json-lines.md documents
/// them. Those that do what a notebook tool does take that tool's parameters.
#[derive(Debug, Deserialize)]
#[serde(tag = "method", content = "params", rename_all = "snake_case")]
enum Method {
    Capabilities(EmptyParams),
    Open(PathParams),
    Save(SaveParams),
    /// `notebook_execute`'s parameters.
    Execute(NotebookExecuteParams),
    /// `notebook_execute_cell`'s parameters.
    ExecuteCell(ExecuteCellParams),
    Interrupt(PathParams),
    Restart(PathParams),
    Close(PathParams),
}

impl Method {
    /// Method `name` with `params`, or why not: no such method, or parameters it does not take.
    fn parse(name: &str, params: Value) -> Result<Method, Box<ErrorInfo>> {
        let names = method_names();
        if !names.contains(&name) {
            return Err(Box::new(
                ErrorInfo::new(
                    Code::InvalidArguments,
                    format!("unknown method {:?}", ipython_mcp_text::shorten(name, 64)),
                )
                .with_hint(format!("the methods are {}", names.join(", "))),
            ));
        }
        serde_json::from_value(json!({"method": name, "params": params})).map_err(|error| {
            Box::new(ErrorInfo::new(
                Code::InvalidArguments,
                format!("invalid params for {name}: {error}"),
            ))
        })
    }
}

/// The methods' names, as `Method`'s derived `Deserialize` spells them, so that the enum is
/// the one list of them. serde hands them only to an error type's `unknown_variant`: this
/// asks the enum for a method it does not have, with an error type that keeps them.
fn method_names() -> &'static [&'static str] {
    #[derive(Debug)]
    struct Names(&'static [&'static str]);
    impl std::fmt::Display for Names {
        fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(formatter, "the methods are {:?}", self.0)
        }
    }
    impl std::error::Error for Names {}
    impl serde::de::Error for Names {
        fn custom<T: std::fmt::Display>(_: T) -> Self {
            Names(&[])
        }
        fn unknown_variant(_: &str, expected: &'static [&'static str]) -> Self {
            Names(expected)
        }
    }
    let probe = serde::de::value::MapDeserializer::<_, Names>::new(std::iter::once(("method", "")));
    match Method::deserialize(probe) {
        Err(Names(names)) => names,
        Ok(_) => &[],
    }
}

/// `save`'s parameters: the whole notebook, and the revision it was opened at.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SaveParams {
    path: String,
    notebook: Value,
    /// The revision `open` (or the last `save`) returned; without it the file must not exist.
    #[serde(default)]
    revision: Option<String>,
}

/// One request's result, or the error it is answered with.
async fn call(server: &IpythonMcp, method: Method) -> Result<Value, Box<ErrorInfo>> {
    let notebooks = server.notebooks();
    match method {
        Method::Capabilities(EmptyParams {}) => Ok(server.capabilities_json().await),
        Method::Open(PathParams { path }) => open(notebooks, &path).await,
        Method::Save(params) => save(notebooks, params).await,
        Method::Execute(params) => {
            refuse_background(params.background)?;
            let run = notebooks.code_run(params.request()).await.map_err(worded)?;
            run_to_end(server, run).await
        }
        Method::ExecuteCell(params) => {
            refuse_background(params.background)?;
            let run = notebooks
                .cell_run(params.request()?)
                .await
                .map_err(worded)?;
            run_to_end(server, run).await
        }
        Method::Interrupt(PathParams { path }) => {
            let session = notebooks.session(&path).await.map_err(worded)?;
            let interrupted = session.interrupt().await;
            Ok(json!({
                "path": path,
                "kernel": session.kernel_id(),
                "interrupted": interrupted.interrupted,
                "status": ipython_mcp_mcp::runtime_status(interrupted.status),
            }))
        }
        Method::Restart(PathParams { path }) => {
            let session = notebooks.session(&path).await.map_err(worded)?;
            let status = session
                .restart(false)
                .await
                .map_err(|error: SessionError| ipython_mcp_mcp::session_error(&error))?;
            Ok(json!({
                "path": path,
                "kernel": session.kernel_id(),
                "status": ipython_mcp_mcp::runtime_status(status),
            }))
        }
        Method::Close(PathParams { path }) => to_value(&server.close_notebook(&path).await?),
    }
}

/// `open`: the notebook and its revision.
async fn open(notebooks: &Notebooks, path: &str) -> Result<Value, Box<ErrorInfo>> {
    let (_store, path, loaded) = notebooks.load(path, None).await.map_err(worded)?;
    let notebook: Value = serde_json::from_slice(&loaded.notebook.to_bytes())
        .map_err(|_| ErrorInfo::new(Code::InternalError, "the notebook could not be encoded"))?;
    Ok(json!({
        "path": path.relative,
        "revision": loaded.revision,
        "notebook": notebook,
    }))
}

/// `save`: with a revision, replaces the file only if it still has it (nothing is written
/// otherwise); without one, a new file only.
async fn save(notebooks: &Notebooks, params: SaveParams) -> Result<Value, Box<ErrorInfo>> {
    let SaveParams {
        path,
        notebook,
        revision,
    } = params;
    let bytes = serde_json::to_vec(&notebook).unwrap_or_default();
    let notebook = Notebook::parse(&bytes).map_err(|problem| {
        ErrorInfo::new(
            Code::InvalidArguments,
            format!("params.notebook is not a valid notebook: {problem}"),
        )
    })?;
    let (store, path) = notebooks.locate(&path).await.map_err(worded)?;
    let relative = path.relative.clone();
    let revision = store
        .create(&path, notebook, revision.is_some(), revision)
        .await
        .map_err(worded)?;
    Ok(json!({"path": relative, "revision": revision}))
}

/// Runs `run` to its end in the notebook's session (the protocol has no background: an
/// execution is answered when it ends) and saves it: `notebook_execute`'s result.
async fn run_to_end(server: &IpythonMcp, mut run: Run) -> Result<Value, Box<ErrorInfo>> {
    let notebooks = server.notebooks();
    let NotebookSession {
        id: kernel,
        handle: session,
        started,
    } = notebooks.session_for(&run).await.map_err(worded)?;
    let output = notebooks
        .execute(
            &mut run,
            &session,
            "json-lines".to_owned(),
            CancellationToken::new(),
        )
        .await
        .map_err(worded)?;
    let path = run.path().relative.clone();
    let saved = notebooks.save(run, &session, &output).await;
    to_value(&NotebookExecuteResult::of_run(
        output,
        path,
        kernel.into(),
        started,
        saved,
    ))
}

fn worded(error: ipython_mcp_notebooks::Error) -> ErrorInfo {
    notebooks_error(&error)
}

/// The protocol has no `get_output`: an execution is answered when it ends.
fn refuse_background(background: bool) -> Result<(), Box<ErrorInfo>> {
    if background {
        return Err(Box::new(ErrorInfo::new(
            Code::InvalidArguments,
            "background is not supported over json-lines; every execution is answered when it ends (send interrupt to stop one)",
        )));
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyParams {}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, Box<ErrorInfo>> {
    serde_json::to_value(value).map_err(|_| {
        Box::new(ErrorInfo::new(
            Code::InternalError,
            "the result could not be serialized",
        ))
    })
}

/// A line, or why there is none.
enum Line {
    Text(Vec<u8>),
    /// Longer than `MAX_LINE_BYTES`; skipped up to its end.
    TooLong,
    End,
}

/// Reads lines of at most `MAX_LINE_BYTES` without holding more than that: a longer one is
/// skipped to its newline and reported, and the next line is read as usual.
struct LineReader<R> {
    input: R,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    fn new(input: R) -> Self {
        LineReader { input }
    }

    async fn next(&mut self) -> std::io::Result<Line> {
        let mut line = Vec::new();
        let mut too_long = false;
        loop {
            let buffer = self.input.fill_buf().await?;
            if buffer.is_empty() {
                return Ok(match (too_long, line.is_empty()) {
                    (true, _) => Line::TooLong,
                    (false, true) => Line::End,
                    (false, false) => Line::Text(line),
                });
            }
            let (chunk, found_newline) = match buffer.iter().position(|byte| *byte == b'\n') {
                Some(at) => (&buffer[..at], true),
                None => (buffer, false),
            };
            if !too_long {
                if line.len() + chunk.len() > MAX_LINE_BYTES {
                    too_long = true;
                    line = Vec::new();
                } else {
                    line.extend_from_slice(chunk);
                }
            }
            let used = chunk.len() + usize::from(found_newline);
            self.input.consume(used);
            if found_newline {
                return Ok(if too_long {
                    Line::TooLong
                } else {
                    Line::Text(line)
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_are_refused_with_their_id_when_they_have_one() {
        for (line, id, message) in [
            ("{", Value::Null, "not JSON"),
            ("[1]", Value::Null, "not a JSON object"),
            ("{\"id\": {}}", Value::Null, "id must be"),
            ("{\"id\": 7}", json!(7), "method must be a string"),
            (
                "{\"id\": \"a\", \"method\": \"open\", \"params\": 3}",
                json!("a"),
                "params must be",
            ),
            (
                "{\"id\": 1, \"method\": \"open\", \"extra\": 1}",
                json!(1),
                "unknown field",
            ),
        ] {
            let Err(refused) = parse_request(line.as_bytes()) else {
                panic!("{line} is refused")
            };
            assert_eq!(refused.id, id, "{line}");
            let error = refused.error();
            assert_eq!(error.code, Code::InvalidArguments);
            assert!(error.message.contains(message), "{line}: {}", error.message);
        }
        let Err(refused) = parse_request(b"\xff\n") else {
            panic!("invalid UTF-8 is refused")
        };
        assert!(refused.message.contains("UTF-8"));
    }

    #[test]
    fn methods_are_the_enum_and_take_the_notebook_tools_parameters() {
        let error = |name: &str, params: Value| Method::parse(name, params).expect_err("refused");
        let unknown = error("frobnicate", json!({}));
        assert_eq!(unknown.code, Code::InvalidArguments);
        assert_eq!(unknown.message, "unknown method \"frobnicate\"");
        assert_eq!(
            unknown.hint.as_deref(),
            Some("the methods are capabilities, open, save, execute, execute_cell, interrupt, restart, close")
        );
        let long = error(&"m".repeat(10_000), json!({}));
        assert!(long.message.chars().count() < 100, "{}", long.message);
        let missing = error("execute", json!({"path": "a.ipynb"}));
        assert_eq!(
            missing.message,
            "invalid params for execute: missing field `code`"
        );
        assert_eq!(missing.hint, None);
        let extra = error("capabilities", json!({"x": 1}));
        assert!(extra
            .message
            .starts_with("invalid params for capabilities: unknown field `x`"));

        let Ok(Method::Execute(params)) =
            Method::parse("execute", json!({"path": "a.ipynb", "code": "1"}))
        else {
            panic!("execute takes notebook_execute's parameters")
        };
        assert!(params.persist, "persist defaults to true");
        assert!(!params.background);
        let Ok(Method::ExecuteCell(params)) = Method::parse(
            "execute_cell",
            json!({"path": "a.ipynb", "cell_id": "c", "index": 0}),
        ) else {
            panic!("execute_cell takes notebook_execute_cell's parameters")
        };
        let Err(both) = params.request() else {
            panic!("a cell named both ways is refused")
        };
        assert_eq!(both.message, "give either cell_id or index, not both");
        assert!(matches!(
            Method::parse("close", json!({"path": "a.ipynb"})),
            Ok(Method::Close(PathParams { path })) if path == "a.ipynb"
        ));
    }

    #[tokio::test]
    async fn an_overlong_line_is_skipped_and_the_next_one_read() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 10];
        input.extend_from_slice(b"\n{\"ok\": 1}\nlast");
        let mut reader = LineReader::new(std::io::Cursor::new(input));
        assert!(matches!(reader.next().await.expect("read"), Line::TooLong));
        assert!(
            matches!(reader.next().await.expect("read"), Line::Text(line) if line == b"{\"ok\": 1}")
        );
        assert!(matches!(reader.next().await.expect("read"), Line::Text(line) if line == b"last"));
        assert!(matches!(reader.next().await.expect("read"), Line::End));
    }
}
