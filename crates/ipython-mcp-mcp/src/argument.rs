//! Tool arguments: bad input is answered, never run.
//!
//! [`Parameters`] replaces rmcp's extractor of the same name (the `#[tool]` macro finds the
//! input schema by that name). It deserializes with the path of the value that failed, so a
//! wrong type, a missing field or an unknown one becomes an `invalid_arguments` error that
//! names the field and says what was expected. rmcp would answer those with a bare text line
//! and no `structuredContent`; this extractor hands the error back as a JSON-RPC error carrying
//! an `invalid_arguments` [`ErrorInfo`], which `call_tool` turns into the tool's own structured result
//! ([`IpythonMcp::invalid_arguments`](crate::handler::IpythonMcp)).

use ipython_mcp_output::{Code, ErrorInfo};
use rmcp::handler::server::common::FromContextPart;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::schemars::{self, JsonSchema};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Longest message about one bad argument: serde quotes the offending value, which may be
/// megabytes.
const MAX_MESSAGE_CHARS: usize = 500;

/// A tool's typed arguments (see the module documentation).
pub struct Parameters<P>(pub P);

impl<P: JsonSchema> JsonSchema for Parameters<P> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        P::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        P::json_schema(generator)
    }
}

impl<S, P: DeserializeOwned> FromContextPart<ToolCallContext<'_, S>> for Parameters<P> {
    fn from_context_part(context: &mut ToolCallContext<'_, S>) -> Result<Self, rmcp::ErrorData> {
        let arguments = context.arguments.take().unwrap_or_default();
        parse(Value::Object(arguments))
            .map(Parameters)
            .map_err(|error| {
                rmcp::ErrorData::invalid_params(
                    error.message.clone(),
                    serde_json::to_value(error).ok(),
                )
            })
    }
}

/// The problem a [`Parameters`] extractor rejected a call for, if that is what `error` is.
pub(crate) fn rejected(error: &rmcp::ErrorData) -> Option<ErrorInfo> {
    if error.code != rmcp::model::ErrorCode::INVALID_PARAMS {
        return None;
    }
    let info: ErrorInfo = serde_json::from_value(error.data.clone()?).ok()?;
    (info.code == Code::InvalidArguments).then_some(info)
}

/// Deserializes `arguments` as `P`, or says which field is wrong and what was expected.
pub(crate) fn parse<P: DeserializeOwned>(arguments: Value) -> Result<P, Box<ErrorInfo>> {
    serde_path_to_error::deserialize(arguments).map_err(|error| {
        let path = error.path().to_string();
        let problem = plain_types(&error.into_inner().to_string());
        let message = if path == "." || problem.starts_with("unknown field") {
            // serde's own text names a missing or an unknown field.
            format!("invalid arguments: {problem}")
        } else {
            format!("invalid argument `{path}`: {problem}")
        };
        Box::new(
            ErrorInfo::new(
                Code::InvalidArguments,
                ipython_mcp_text::shorten(&message, MAX_MESSAGE_CHARS),
            )
            .with_hint("nothing ran; check the call against the tool's inputSchema"),
        )
    })
}

/// serde names Rust types (`expected u32`); agents think in JSON types.
fn plain_types(message: &str) -> String {
    let mut text = message.to_owned();
    for (rust, json) in [
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("expected usize", "expected a non-negative integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected u16", "expected a non-negative integer"),
        ("expected u8", "expected a non-negative integer"),
        ("expected i64", "expected an integer"),
        ("expected i32", "expected an integer"),
        ("expected a sequence", "expected an array"),
        ("expected a map", "expected an object"),
    ] {
        text = text.replace(rust, json);
    }
    text
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Example {
        code: String,
        #[serde(default)]
        timeout_seconds: Option<f64>,
        #[serde(default)]
        background: bool,
        #[serde(default)]
        names: Vec<String>,
    }

    fn message(arguments: serde_json::Value) -> String {
        super::parse::<Example>(arguments)
            .expect_err("rejected")
            .message
    }

    #[test]
    fn each_problem_names_the_field_and_what_was_expected() {
        assert_eq!(
            message(json!({"code": "1", "background": "true"})),
            "invalid argument `background`: invalid type: string \"true\", expected a boolean"
        );
        assert_eq!(
            message(json!({"code": "1", "timeout_seconds": "5"})),
            "invalid argument `timeout_seconds`: invalid type: string \"5\", expected a number"
        );
        assert_eq!(
            message(json!({"code": "1", "names": ["a", 2]})),
            "invalid argument `names[1]`: invalid type: integer `2`, expected a string"
        );
        assert_eq!(
            message(json!({"timeout_seconds": 1})),
            "invalid arguments: missing field `code`"
        );
        assert!(message(json!({"code": "1", "bogus": 1}))
            .starts_with("invalid arguments: unknown field `bogus`, expected one of `code`"));
        let huge = message(json!({"code": 1, "background": "x".repeat(100_000)}));
        assert!(huge.chars().count() <= 501, "{}", huge.len());
    }
}
