//! The OpenAI chat-completions wire format as lathe sends and reads it.
//!
//! Requests are built from the conversation ([`crate::model::Message`]) by
//! borrowing, so nothing is copied per request beyond the serialized bytes.
//! Text-only messages go out with a plain string `content` (some servers'
//! chat templates fail on content arrays); an answer's reasoning goes back
//! in the field the server used for it, for the answers the model's
//! `reasoning_history` names.
//! Response chunks are decoded leniently: every field is optional, unknown
//! fields are ignored, and the same type reads a streamed `chat.completion.chunk`
//! (`delta`) and a whole `chat.completion` (`message`), because some servers
//! ignore `stream: true`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{MaxTokensField, ModelConfig, ReasoningHistory};
use crate::model::{Message, ReasoningField, ToolDefinition, UserPart};

/// The request body of `POST /chat/completions`.
#[derive(Debug, Serialize)]
pub struct ChatRequest<'a> {
    model: &'a str,
    messages: WireMessages<'a>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools: &'a [ToolDefinition],
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    #[serde(flatten)]
    extra: &'a serde_json::Map<String, Value>,
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

impl<'a> ChatRequest<'a> {
    /// Builds the request for `model` over the system prompt, the conversation and the tools.
    pub fn new(
        model: &'a ModelConfig,
        system_prompt: &'a str,
        messages: &'a [Message],
        tools: &'a [ToolDefinition],
        include_usage: bool,
    ) -> Self {
        let sent = reasoning_sent(messages, model.reasoning_history);
        // An answer that called tools without reasoning still carries the
        // field (empty): DeepSeek refuses a tool-call answer without it.
        let field = messages.iter().rev().find_map(|m| match m {
            Message::Assistant { reasoning_field, .. } => *reasoning_field,
            Message::User { .. } | Message::Tool { .. } => None,
        });
        let wire = WireMessages { system_prompt, messages, sent, field };
        let (max_tokens, max_completion_tokens) = match model.max_tokens_field {
            MaxTokensField::MaxTokens => (model.max_output_tokens, None),
            MaxTokensField::MaxCompletionTokens => (None, model.max_output_tokens),
        };
        ChatRequest {
            model: &model.model,
            messages: wire,
            tools,
            stream: true,
            stream_options: include_usage.then_some(StreamOptions { include_usage: true }),
            max_tokens,
            max_completion_tokens,
            temperature: model.temperature,
            reasoning_effort: model.reasoning_effort.as_deref(),
            extra: &model.extra_body,
        }
    }
}

/// The request's `messages`: the system prompt, then the conversation,
/// each message serialised from the one it borrows as it is written. No
/// vector of wire messages is built: the conversation grows with the
/// session, and a vector of its size per request (175 KB at 1,000 turns)
/// raised the allocator's high-water mark turn after turn.
/// A tool definition in the wire's function-tool shape:
/// `{"type":"function","function":{"name":…,"description":…,"parameters":…}}`.
/// (Also what a turn's size estimate counts, `crate::agent::estimate_tokens`.)
impl Serialize for ToolDefinition {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Function<'a> {
            name: &'a str,
            description: &'a str,
            parameters: &'a Value,
        }
        #[derive(Serialize)]
        struct FunctionTool<'a> {
            r#type: &'static str,
            function: Function<'a>,
        }
        let function = Function { name: self.name(), description: self.description(), parameters: self.parameters() };
        FunctionTool { r#type: "function", function }.serialize(serializer)
    }
}

#[derive(Debug)]
struct WireMessages<'a> {
    system_prompt: &'a str,
    messages: &'a [Message],
    /// For each message, whether its reasoning goes back ([`reasoning_sent`]).
    sent: Vec<bool>,
    /// The field the latest answer's reasoning came in.
    field: Option<ReasoningField>,
}

impl Serialize for WireMessages<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let system = std::iter::once(WireMessage::System { content: self.system_prompt });
        let conversation =
            self.messages.iter().zip(&self.sent).map(|(message, &send)| WireMessage::new(message, send, self.field));
        serializer.collect_seq(system.chain(conversation))
    }
}

#[derive(Debug, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        // `null` (not absent, not "") when the message only calls tools: that
        // is what OpenAI itself returns, so every compatible server accepts it.
        content: Option<std::borrow::Cow<'a, str>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_details: Option<&'a Value>,
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

/// A user message's content: a plain string when it is all text (the form
/// every server accepts), else an array of parts.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(std::borrow::Cow<'a, str>),
    Parts(Vec<WirePart<'a>>),
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Debug, Serialize)]
struct ImageUrl {
    url: String,
}

#[derive(Debug, Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    r#type: &'static str,
    function: WireFunction<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// For each message, whether its reasoning goes back to the model.
fn reasoning_sent(messages: &[Message], history: ReasoningHistory) -> Vec<bool> {
    let mut sent = vec![false; messages.len()];
    match history {
        ReasoningHistory::Off => {}
        ReasoningHistory::All => sent.fill(true),
        ReasoningHistory::Auto => {
            // Exchange by exchange (the messages after a user message, up
            // to the next): all of them when the model called tools in it.
            let mut start = 0;
            while start < messages.len() {
                let end = messages[start + 1..]
                    .iter()
                    .position(|m| matches!(m, Message::User { .. }))
                    .map_or(messages.len(), |at| start + 1 + at);
                let called = messages[start..end]
                    .iter()
                    .any(|m| matches!(m, Message::Assistant { tool_calls, .. } if !tool_calls.is_empty()));
                sent[start..end].fill(called);
                start = end;
            }
        }
    }
    sent
}

impl<'a> WireMessage<'a> {
    /// `message` on the wire, with its reasoning when `send_reasoning`: in
    /// the field it came in, or for an answer that called tools without
    /// any, empty in `latest_field` (where the conversation's latest came).
    fn new(message: &'a Message, send_reasoning: bool, latest_field: Option<ReasoningField>) -> Self {
        match message {
            Message::User { parts } => {
                let all_text = parts.iter().all(|p| matches!(p, UserPart::Text { .. }));
                let content = if all_text {
                    let mut texts = parts.iter().filter_map(|p| match p {
                        UserPart::Text { text } => Some(text.as_str()),
                        UserPart::Image { .. } => None,
                    });
                    match (texts.next(), texts.next()) {
                        (None, _) => UserContent::Text("".into()),
                        (Some(only), None) => UserContent::Text(only.into()),
                        (Some(_), Some(_)) => UserContent::Text(
                            parts
                                .iter()
                                .filter_map(|p| match p {
                                    UserPart::Text { text } => Some(text.as_str()),
                                    UserPart::Image { .. } => None,
                                })
                                .collect::<Vec<_>>()
                                .join("\n\n")
                                .into(),
                        ),
                    }
                } else {
                    UserContent::Parts(
                        parts
                            .iter()
                            .map(|part| match part {
                                UserPart::Text { text } => WirePart::Text { text },
                                UserPart::Image { mime_type, data } => WirePart::ImageUrl {
                                    image_url: ImageUrl { url: format!("data:{mime_type};base64,{data}") },
                                },
                            })
                            .collect(),
                    )
                };
                WireMessage::User { content }
            }
            Message::Assistant {
                text,
                tool_calls,
                interrupted,
                reasoning: reasoning_text,
                reasoning_field,
                reasoning_details,
            } => {
                let (mut reasoning_content, mut reasoning, mut details) = (None, None, None);
                if send_reasoning {
                    match (reasoning_details, reasoning_field.or(latest_field.filter(|_| !tool_calls.is_empty()))) {
                        (Some(verbatim), _) => details = Some(&**verbatim),
                        (None, Some(ReasoningField::ReasoningContent)) => {
                            reasoning_content = Some(reasoning_text.as_str())
                        }
                        (None, Some(ReasoningField::Reasoning)) => reasoning = Some(reasoning_text.as_str()),
                        (None, None) => {}
                    }
                }
                WireMessage::Assistant {
                    content: if *interrupted {
                        // The model must know its last answer was cut off, or it will
                        // carry on as if the user had read all of it.
                        Some(format!("{text}\n\n[This response was interrupted by the user.]").into())
                    } else if text.is_empty() && !tool_calls.is_empty() {
                        None
                    } else {
                        Some(text.as_str().into())
                    },
                    reasoning_content,
                    reasoning,
                    reasoning_details: details,
                    tool_calls: tool_calls
                        .iter()
                        .map(|call| WireToolCall {
                            id: &call.id,
                            r#type: "function",
                            function: WireFunction { name: &call.name, arguments: &call.arguments },
                        })
                        .collect(),
                }
            }
            Message::Tool { tool_call_id, content } => WireMessage::Tool { tool_call_id, content },
        }
    }
}

/// One streamed chunk (or a whole non-streamed completion).
#[derive(Debug, Default, Deserialize)]
pub struct ChatChunk {
    /// The choices; lathe reads index 0.
    #[serde(default, deserialize_with = "null_as_default")]
    pub choices: Vec<ChunkChoice>,
    /// Token usage, usually on the last chunk.
    #[serde(default)]
    pub usage: Option<WireUsage>,
    /// An error reported inside the stream (OpenRouter and others do this).
    #[serde(default)]
    pub error: Option<Value>,
}

/// One choice of a chunk.
#[derive(Debug, Default, Deserialize)]
pub struct ChunkChoice {
    /// The choice index.
    #[serde(default)]
    pub index: u32,
    /// The increment (streaming).
    #[serde(default)]
    pub delta: Option<Delta>,
    /// The whole message (a non-streamed answer).
    #[serde(default)]
    pub message: Option<Delta>,
    /// Why generation stopped, on the last chunk.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// The increment of a message.
#[derive(Debug, Default, Deserialize)]
pub struct Delta {
    /// Answer text.
    #[serde(default)]
    pub content: Option<String>,
    /// Reasoning text, as DeepSeek, vLLM, llama.cpp and LM Studio name it.
    #[serde(default)]
    pub reasoning_content: Option<String>,
    /// Reasoning text, as OpenRouter and Ollama name it.
    #[serde(default)]
    pub reasoning: Option<String>,
    /// OpenRouter's structured reasoning (text, summaries, encrypted
    /// blocks), streamed as pieces of an array to be sent back verbatim.
    #[serde(default, deserialize_with = "null_as_default")]
    pub reasoning_details: Vec<Value>,
    /// A refusal (OpenAI structured refusals).
    #[serde(default)]
    pub refusal: Option<String>,
    /// Tool-call fragments.
    #[serde(default, deserialize_with = "null_as_default")]
    pub tool_calls: Vec<ToolCallDelta>,
}

/// A fragment of one tool call.
#[derive(Debug, Default, Deserialize)]
pub struct ToolCallDelta {
    /// Which call this fragment belongs to; some servers omit it.
    #[serde(default)]
    pub index: Option<u32>,
    /// The call id, on the first fragment.
    #[serde(default)]
    pub id: Option<String>,
    /// Name and argument fragments.
    #[serde(default)]
    pub function: Option<FunctionDelta>,
}

/// Name and arguments fragments of a tool call.
#[derive(Debug, Default, Deserialize)]
pub struct FunctionDelta {
    /// The function name, on the first fragment.
    #[serde(default)]
    pub name: Option<String>,
    /// A piece of the JSON arguments. Some servers send an object instead of a string.
    #[serde(default)]
    pub arguments: Option<Value>,
}

/// Token usage as servers report it.
#[derive(Debug, Default, Clone, Copy, Deserialize, PartialEq)]
pub struct WireUsage {
    /// Tokens in the prompt.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Tokens generated.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Their sum, when given.
    #[serde(default)]
    pub total_tokens: Option<u64>,
    /// What the request cost, when the server says (OpenRouter's `usage.cost`, in credits of one US dollar).
    #[serde(default, deserialize_with = "lenient_cost")]
    pub cost: Option<f64>,
}

/// A cost that is a finite number of 0 or more; anything else (a string, a
/// negative number) is no cost rather than a failed stream.
fn lenient_cost<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(value.as_f64().filter(|cost| cost.is_finite() && *cost >= 0.0))
}

fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tools go out in exactly the function-tool shape (field names and
    /// order), whichever module made the definition.
    #[test]
    fn a_tool_definition_is_sent_as_a_function_tool() {
        let tool = ToolDefinition::function("read_file", "Reads a file.", serde_json::json!({"type": "object"}));
        assert_eq!(
            serde_json::to_string(&tool).unwrap(),
            r#"{"type":"function","function":{"name":"read_file","description":"Reads a file.","parameters":{"type":"object"}}}"#
        );
    }
}
