//! Test-only fixtures: the named tools, resources and prompts the official MCP conformance
//! suite (`@modelcontextprotocol/conformance`) calls, plus two hooks for this project's tests:
//! `test_trigger_tool_change` broadcasts `notifications/tools/list_changed` to every connected
//! client (`test_count_clients` says how many that is now: rmcp acknowledges a subscription
//! before the handler registers it, so a test waits for the count before it fires), and
//! `test_panic_session` makes a session's actor panic once it reaches the hook in
//! its queue (to test supervision).
//!
//! The suite is not a black-box test: each scenario calls a fixture by name (a tool that
//! returns an image, one that logs, a prompt with arguments …). [`Fixtures`] wraps the product
//! handler and adds them, so the suite exercises the real transport, session handling and
//! protocol plumbing of the product around them. It is compiled only into test builds (the
//! `test-fixtures` feature) and served only when such a binary runs in its hidden test mode
//! (see ARCHITECTURE.md, "Test mode"); no user setting enables it.

#![allow(deprecated)] // logging, sampling and resources/subscribe are deprecated by SEP-2577.

use std::sync::Arc;

use rmcp::model::{
    AudioContent, CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams,
    CompleteResult, CompletionInfo, ContentBlock, CreateMessageRequestParams, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, ImageContent, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, LoggingLevel, LoggingMessageNotificationParam,
    PaginatedRequestParams, ProgressNotificationParam, Prompt, PromptArgument, PromptMessage,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Reference, Resource,
    ResourceContents, ResourceTemplate, Role, SamplingMessage, ServerCapabilities, ServerConfig,
    SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter, Tool,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};

use crate::handler::IpythonMcp;

/// Whether the conformance fixtures are compiled into this build.
pub const COMPILED: bool = true;

/// The product with the fixtures beside its tools.
pub fn wrap(product: IpythonMcp) -> Fixtures {
    Fixtures::new(product)
}

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg==";
/// An empty 16-bit mono WAV file.
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEARKwAAIhYAQACABAAZGF0YQAAAAA=";

/// The product handler plus the conformance fixtures.
#[derive(Clone)]
pub struct Fixtures {
    product: IpythonMcp,
}

impl Fixtures {
    pub fn new(product: IpythonMcp) -> Self {
        Fixtures { product }
    }

    fn tools() -> Vec<Tool> {
        let empty = || json!({"type": "object", "properties": {}});
        let string_arg = |name: &str, description: &str| {
            json!({
                "type": "object",
                "properties": {name: {"type": "string", "description": description}},
                "required": [name],
            })
        };
        [
            ("test_simple_text", "Returns a text block", empty()),
            ("test_image_content", "Returns a PNG image", empty()),
            ("test_audio_content", "Returns a WAV clip", empty()),
            ("test_embedded_resource", "Returns an embedded text resource", empty()),
            ("test_multiple_content_types", "Returns text, an image and a resource", empty()),
            ("test_tool_with_logging", "Sends three log notifications", empty()),
            ("test_error_handling", "Always answers with isError", empty()),
            ("test_tool_with_progress", "Sends three progress notifications", empty()),
            ("test_sampling", "Asks the client for an LLM completion", string_arg("prompt", "Prompt to send")),
            ("test_elicitation", "Asks the client for user input", string_arg("message", "Message to show")),
            ("test_elicitation_sep1034_defaults", "Elicitation with defaults (SEP-1034)", empty()),
            ("test_elicitation_sep1330_enums", "Elicitation with enum forms (SEP-1330)", empty()),
            (
                "json_schema_2020_12_tool",
                "Input schema using JSON Schema 2020-12 features",
                json!({
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object",
                    "$defs": {"address": {"type": "object", "properties": {
                        "street": {"type": "string"}, "city": {"type": "string"}}}},
                    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
                    "additionalProperties": false,
                }),
            ),
            ("test_reconnection", "Answers after a short pause", empty()),
            (
                "test_trigger_tool_change",
                "Sends notifications/tools/list_changed to every connected client",
                empty(),
            ),
            (
                "test_count_clients",
                "How many clients test_trigger_tool_change would notify now",
                empty(),
            ),
            (
                "test_panic_session",
                "Queues a panic of a kernel session's actor",
                json!({
                    "type": "object",
                    "properties": {"kernel": {"type": "string", "description": "Session id (default: default)"}},
                }),
            ),
        ]
        .into_iter()
        .map(|(name, description, schema)| Tool::new(name, description, Arc::new(object(schema))))
        .collect()
    }

    /// Answers a fixture call, or `None` when `request` names a product tool. Each group of
    /// fixtures leaves names outside it alone, so trying the groups in turn is a dispatch.
    async fn call_fixture(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Option<CallToolResult> {
        let arguments = request.arguments.clone().unwrap_or_default();
        let name = request.name.as_ref();
        if let Some(result) = content_fixture(name, &arguments) {
            return Some(result);
        }
        if let Some(result) = notifying_fixture(name, context).await {
            return Some(result);
        }
        if name == "test_sampling" {
            return Some(sampling_fixture(&arguments, context).await);
        }
        if let Some((message, schema, label)) = elicitation_fixture(name, &arguments) {
            return Some(self.elicit(context, message, schema, label).await);
        }
        self.hook_fixture(name, &arguments).await
    }

    /// The project's own test hooks: the tools-changed broadcast, the client count it would
    /// reach, and the injected actor panic.
    async fn hook_fixture(&self, name: &str, arguments: &JsonObject) -> Option<CallToolResult> {
        Some(match name {
            "test_trigger_tool_change" => {
                let clients = self.product.peers().len();
                self.product.peers().notify_tool_list_changed().await;
                CallToolResult::success(vec![text(&format!(
                    "notified {clients} client(s) that the tool list changed"
                ))])
            }
            "test_count_clients" => {
                let clients = self.product.peers().len();
                CallToolResult::success(vec![text(&format!("{clients} client(s)"))])
            }
            "test_panic_session" => {
                let kernel = arguments.get("kernel").and_then(Value::as_str);
                match self.product.kernels().get(kernel) {
                    Ok(session) if session.inject_panic() => CallToolResult::success(vec![text(
                        "the session's actor panics when it reaches this in its queue",
                    )]),
                    Ok(_) => CallToolResult::error(vec![text("the session's inbox is closed")]),
                    Err(error) => CallToolResult::error(vec![text(&error.to_string())]),
                }
            }
            _ => return None,
        })
    }

    async fn elicit(
        &self,
        context: &RequestContext<RoleServer>,
        message: &str,
        schema: Value,
        label: &str,
    ) -> CallToolResult {
        let schema: ElicitationSchema = match serde_json::from_value(schema) {
            Ok(schema) => schema,
            Err(error) => {
                return CallToolResult::error(vec![ContentBlock::text(format!(
                    "fixture schema rejected by rmcp: {error}"
                ))])
            }
        };
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message.to_owned(),
            requested_schema: schema,
        };
        match context.peer.create_elicitation(params).await {
            Ok(result) => {
                let action = match result.action {
                    ElicitationAction::Accept => "accept",
                    ElicitationAction::Decline => "decline",
                    ElicitationAction::Cancel => "cancel",
                    _ => "unknown",
                };
                CallToolResult::success(vec![ContentBlock::text(format!(
                    "{label}: action={action}, content={}",
                    result
                        .content
                        .map(|content| content.to_string())
                        .unwrap_or_default()
                ))])
            }
            Err(error) => CallToolResult::error(vec![ContentBlock::text(format!(
                "Elicitation error: {error}"
            ))]),
        }
    }
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// A text content block.
fn text(text: &str) -> ContentBlock {
    ContentBlock::text(text.to_owned())
}

/// The short wait between a fixture's notifications, so a client sees them arrive apart.
async fn pause() {
    tokio::time::sleep(std::time::Duration::from_millis(50)).await
}

/// Fixtures that only answer with content (one kind per block, or a mix, or an error result):
/// nothing goes to the client before the answer.
fn content_fixture(name: &str, arguments: &JsonObject) -> Option<CallToolResult> {
    Some(match name {
        "test_simple_text" => {
            CallToolResult::success(vec![text("This is a simple text response for testing.")])
        }
        "test_image_content" => {
            CallToolResult::success(vec![ContentBlock::image(PNG, "image/png")])
        }
        "test_audio_content" => CallToolResult::success(vec![ContentBlock::Audio(
            AudioContent::new(WAV, "audio/wav"),
        )]),
        "test_embedded_resource" => CallToolResult::success(vec![ContentBlock::resource(
            ResourceContents::text(
                "This is an embedded resource content.",
                "test://embedded-resource",
            )
            .with_mime_type("text/plain"),
        )]),
        "test_multiple_content_types" => CallToolResult::success(vec![
            text("Multiple content types test:"),
            ContentBlock::image(PNG, "image/png"),
            ContentBlock::resource(
                ResourceContents::text(
                    r#"{"test":"data","value":123}"#,
                    "test://mixed-content-resource",
                )
                .with_mime_type("application/json"),
            ),
        ]),
        "test_error_handling" => CallToolResult::error(vec![text(
            "This tool intentionally returns an error for testing",
        )]),
        "json_schema_2020_12_tool" => {
            let name = arguments
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("world");
            CallToolResult::success(vec![text(&format!("Hello, {name}!"))])
        }
        _ => return None,
    })
}

/// Fixtures that send notifications (log messages, progress) or take their time before they
/// answer.
async fn notifying_fixture(
    name: &str,
    context: &RequestContext<RoleServer>,
) -> Option<CallToolResult> {
    Some(match name {
        "test_tool_with_logging" => {
            for message in [
                "Tool execution started",
                "Tool processing data",
                "Tool execution completed",
            ] {
                let param =
                    LoggingMessageNotificationParam::new(LoggingLevel::Info, json!(message))
                        .with_logger("ipython-mcp-fixtures");
                context.peer.notify_logging_message(param).await.ok();
                pause().await;
            }
            CallToolResult::success(vec![text("Logging test completed")])
        }
        "test_tool_with_progress" => {
            let token = context.meta.get_progress_token();
            for (progress, message) in [(0.0, "Starting"), (50.0, "Halfway"), (100.0, "Complete")] {
                if let Some(token) = &token {
                    let param = ProgressNotificationParam::new(token.clone(), progress)
                        .with_total(100.0)
                        .with_message(message);
                    context.peer.notify_progress(param).await.ok();
                }
                pause().await;
            }
            CallToolResult::success(vec![text("Progress test completed")])
        }
        "test_reconnection" => {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            CallToolResult::success(vec![text("Reconnection test completed")])
        }
        _ => return None,
    })
}

/// `test_sampling`: asks the client's LLM to complete the `prompt` argument and answers with
/// the first text it returns.
async fn sampling_fixture(
    arguments: &JsonObject,
    context: &RequestContext<RoleServer>,
) -> CallToolResult {
    let prompt = arguments
        .get("prompt")
        .and_then(Value::as_str)
        .unwrap_or("Hello");
    let params = CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], 100);
    match context.peer.create_message(params).await {
        Ok(result) => {
            let answer = result
                .message
                .content
                .first()
                .and_then(|content| content.as_text())
                .map(|content| content.text.clone())
                .unwrap_or_else(|| "No text response".to_owned());
            CallToolResult::success(vec![text(&format!("LLM response: {answer}"))])
        }
        Err(error) => CallToolResult::error(vec![text(&format!("Sampling error: {error}"))]),
    }
}

/// The form an elicitation fixture asks the client to fill in: its message, its schema and the
/// label of the answer; `None` for any other name.
fn elicitation_fixture<'a>(
    name: &str,
    arguments: &'a JsonObject,
) -> Option<(&'a str, Value, &'static str)> {
    Some(match name {
        "test_elicitation" => {
            let message = arguments
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("Please provide your information");
            let schema = json!({
                "type": "object",
                "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"},
                },
                "required": ["username", "email"],
            });
            (message, schema, "User response")
        }
        "test_elicitation_sep1034_defaults" => {
            let schema = json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "User's name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User's age", "default": 30},
                    "score": {"type": "number", "description": "User's score", "default": 95.5},
                    "status": {"type": "string", "description": "User's status",
                               "enum": ["active", "inactive", "pending"], "default": "active"},
                    "verified": {"type": "boolean", "description": "Whether user is verified", "default": true},
                },
            });
            (
                "Please provide values (all have defaults)",
                schema,
                "Elicitation completed",
            )
        }
        "test_elicitation_sep1330_enums" => {
            let titled = |title: &str| {
                json!([
                    {"const": "value1", "title": format!("First {title}")},
                    {"const": "value2", "title": format!("Second {title}")},
                    {"const": "value3", "title": format!("Third {title}")},
                ])
            };
            let schema = json!({
                "type": "object",
                "properties": {
                    "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "oneOf": titled("Option")},
                    "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                                   "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array", "items": {"type": "string",
                                      "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "items": {"anyOf": titled("Choice")}},
                },
            });
            (
                "Test enum schema improvements",
                schema,
                "Enum elicitation completed",
            )
        }
        _ => return None,
    })
}

impl ServerHandler for Fixtures {
    fn get_info(&self) -> ServerConfig {
        let mut info = self.product.get_info();
        info.capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        info
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = self.product.list_tools(request, context).await?.tools;
        tools.extend(Self::tools());
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.product
            .get_tool(name)
            .or_else(|| Self::tools().into_iter().find(|tool| tool.name == name))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match self.call_fixture(&request, &context).await {
            Some(result) => Ok(result.into()),
            None => self.product.call_tool(request, context).await,
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.product.on_initialized(context).await;
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.product.accepted_subscription_filter(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.product.listen(context).await
    }

    async fn set_level(
        &self,
        _request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new("test://static-text", "Static Text Resource")
                .with_description("A static text resource")
                .with_mime_type("text/plain"),
            Resource::new("test://static-binary", "Static Binary Resource")
                .with_description("A static binary resource")
                .with_mime_type("image/png"),
        ]))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("test://template/{id}/data", "Dynamic Resource")
                .with_description("A resource with a parameter")
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.as_str();
        let contents = match uri {
            "test://static-text" => {
                ResourceContents::text("This is the content of the static text resource.", uri)
                    .with_mime_type("text/plain")
            }
            "test://static-binary" => ResourceContents::blob(PNG, uri).with_mime_type("image/png"),
            _ => match uri
                .strip_prefix("test://template/")
                .and_then(|rest| rest.strip_suffix("/data"))
            {
                Some(id) => ResourceContents::text(
                    json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")})
                        .to_string(),
                    uri,
                )
                .with_mime_type("application/json"),
                None => {
                    return Err(ErrorData::resource_not_found(
                        format!("no resource {uri}"),
                        Some(json!({"uri": uri})),
                    ))
                }
            },
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn subscribe(
        &self,
        _request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn unsubscribe(
        &self,
        _request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![
            Prompt::new(
                "test_simple_prompt",
                Some("A prompt without arguments"),
                None,
            ),
            Prompt::new(
                "test_prompt_with_arguments",
                Some("A prompt with arguments"),
                Some(vec![
                    PromptArgument::new("arg1")
                        .with_description("First argument")
                        .with_required(true),
                    PromptArgument::new("arg2")
                        .with_description("Second argument")
                        .with_required(false),
                ]),
            ),
            Prompt::new(
                "test_prompt_with_embedded_resource",
                Some("A prompt with an embedded resource"),
                None,
            ),
            Prompt::new(
                "test_prompt_with_image",
                Some("A prompt with an image"),
                None,
            ),
        ]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let result = match request.name.as_str() {
            "test_simple_prompt" => GetPromptResult::new(vec![PromptMessage::new_text(
                Role::User,
                "This is a simple test prompt.",
            )]),
            "test_prompt_with_arguments" => {
                let arguments = request.arguments.unwrap_or_default();
                let argument = |name: &str| {
                    arguments
                        .get(name)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                GetPromptResult::new(vec![PromptMessage::new_text(
                    Role::User,
                    format!(
                        "Prompt with arguments: arg1='{}', arg2='{}'",
                        argument("arg1"),
                        argument("arg2")
                    ),
                )])
            }
            "test_prompt_with_embedded_resource" => GetPromptResult::new(vec![
                PromptMessage::new_text(Role::User, "Here is a resource:"),
                PromptMessage::new_resource(
                    Role::User,
                    "test://static-text".to_owned(),
                    Some("text/plain".to_owned()),
                    Some("Resource content for prompt".to_owned()),
                    None,
                    None,
                    None,
                ),
            ]),
            "test_prompt_with_image" => GetPromptResult::new(vec![
                PromptMessage::new_text(Role::User, "Here is an image:"),
                PromptMessage::new(
                    Role::User,
                    ContentBlock::Image(ImageContent::new(PNG, "image/png")),
                ),
            ]),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no prompt named {other}"),
                    None,
                ))
            }
        };
        Ok(result.into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let values: Vec<String> = match &request.r#ref {
            Reference::Resource(_) if request.argument.name == "id" => vec!["1", "2", "3"],
            Reference::Prompt(_) if request.argument.name == "name" => {
                vec!["Alice", "Bob", "Charlie"]
            }
            Reference::Prompt(_) if request.argument.name == "style" => {
                vec!["friendly", "formal", "casual"]
            }
            Reference::Prompt(_) => vec!["value"],
            _ => vec![],
        }
        .into_iter()
        .map(str::to_owned)
        .collect();
        let info =
            CompletionInfo::new(values).map_err(|error| ErrorData::internal_error(error, None))?;
        Ok(CompleteResult::new(info))
    }
}
