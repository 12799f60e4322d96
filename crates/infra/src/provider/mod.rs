//! Canonical model requests, content blocks, stream events and usage, and one thin
//! adapter per wire protocol. Each HTTP adapter is a pair of pure parts (encode a
//! request; decode a stream) over the shared transport in `transport`.

pub mod anthropic;
pub mod command;
pub mod openai_chat;
pub mod openai_responses;
pub mod replay;
pub mod sse;
pub mod transport;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One piece of message content, in our own terms (the transcript stores these).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
        /// OpenAI Responses: the message's `phase` (`commentary`, `final_answer`), sent
        /// back with it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phase: Option<String>,
    },
    ToolUse {
        id: String,
        name: String,
        /// The arguments; a JSON string when the model sent text that is not JSON.
        input: Value,
        /// The arguments' text exactly as the model wrote it (Chat Completions and
        /// Responses send it back so, spacing and key order included).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<String>,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        /// Images the tool returned (an MCP server's), sent with the result where the
        /// provider takes them (Anthropic, Responses) or right after it (Chat Completions).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<Picture>,
    },
    /// Anthropic extended thinking (the signature must be sent back untouched), or a
    /// Chat Completions model's reasoning text (`field` names the field it came in, to
    /// be sent back in: DeepSeek's thinking mode needs its `reasoning_content`).
    Thinking {
        thinking: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        field: Option<String>,
    },
    RedactedThinking {
        data: String,
    },
    /// An OpenAI Responses reasoning item, kept whole (its opaque content included).
    Reasoning {
        item: Value,
    },
    Image {
        media_type: String,
        data: String,
    },
    /// An Anthropic content block of a type this version does not know (a server tool's
    /// call or result, a `compaction` block), kept whole and sent back as it came.
    Opaque {
        block: Value,
    },
}

/// An image, base64-encoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Picture {
    pub media_type: String,
    pub data: String,
}

impl Picture {
    /// As a `data:` URL (OpenAI's form).
    pub(crate) fn url(&self) -> String {
        format!("data:{};base64,{}", self.media_type, self.data)
    }
}

impl Block {
    pub fn text(text: impl Into<String>) -> Block {
        Block::Text { text: text.into(), phase: None }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

/// One wire message: consecutive same-side transcript entries merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// The canonical request: what context assembly makes and every adapter encodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub model: String,
    pub max_output_tokens: u32,
    pub system: String,
    pub tools: Vec<ToolSpec>,
    pub messages: Vec<Message>,
    /// How much the model may think first, as its role asks (left out when it asks nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Reasoning>,
}

/// A role's setting for the model's thinking before it answers, in the terms of its
/// provider (the config checks the pairing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reasoning {
    /// Anthropic's extended thinking: at most this many tokens of it.
    ThinkingBudget(u32),
    /// OpenAI's reasoning effort: `minimal`, `low`, `medium` or `high`.
    Effort(String),
}

/// Token counts as the provider reported them; absent counters stay absent.
/// `input` counts every prompt token, cached ones included; `cache_read` and
/// `cache_write` are the parts of `input` served from or written to the cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<u64>,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    EndTurn,
    ToolUse,
    /// Cut off by the output limit: refused, never executed.
    MaxTokens,
    /// The model declined (Anthropic's `refusal` stop, a Chat or Responses refusal):
    /// what it said is the answer's text.
    Refusal,
    Other(String),
}

/// One complete model output: what the transcript's assistant entry holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Output {
    pub content: Vec<Block>,
    #[serde(default)]
    pub usage: Usage,
    pub stop: Stop,
    /// The model that answered, as the provider named it (it may differ from the one
    /// asked for: a dated version of an alias); `None` when the provider did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_model: Option<String>,
}

impl Output {
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|b| match b {
            Block::ToolUse { id, name, input, .. } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }

    pub fn text(&self) -> String {
        let parts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|b| match b {
                Block::Text { text, .. } if !text.is_empty() => Some(text.as_str()),
                _ => None,
            })
            .collect();
        // Separate blocks (or Responses messages) are separate paragraphs.
        parts.join("\n\n")
    }
}

/// What a decoder reports as the stream arrives.
#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    Text(String),
    Thinking(String),
    ToolCall { name: String },
}

/// A stream decoder: fed SSE events in order, then finished into one output.
pub trait Decoder {
    /// Consumes one event; returns the live deltas it carried.
    fn feed(&mut self, event: &sse::Event) -> Result<Vec<Delta>, StreamError>;
    /// Whether the stream has delivered its terminal event.
    fn is_done(&self) -> bool;
    fn finish(self: Box<Self>) -> Result<Output, StreamError>;
}

/// The provider said something went wrong inside an otherwise healthy stream.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StreamError {
    #[error("provider reported `{kind}`: {message}")]
    Reported { kind: String, message: String, retryable: bool },
    #[error("malformed stream: {0}")]
    Malformed(String),
    #[error("stream ended before the response was complete")]
    Incomplete,
    /// An answer with a success status whose body held no event at all (a proxy's page,
    /// a base_url that is not the API's): its content type and how it begins.
    #[error("the provider answered {status} but not with a stream of events (content type `{content_type}`): {head}")]
    NotAStream { status: u16, content_type: String, head: String },
}

impl StreamError {
    pub(crate) fn retryable(&self) -> bool {
        match self {
            StreamError::Reported { retryable, .. } => *retryable,
            StreamError::Malformed(_) => false,
            StreamError::Incomplete => true,
            StreamError::NotAStream { .. } => false,
        }
    }
}

/// Which wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    Anthropic,
    OpenaiChat,
    OpenaiResponses,
    Replay,
    Command,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Anthropic => "anthropic",
            Protocol::OpenaiChat => "openai-chat",
            Protocol::OpenaiResponses => "openai-responses",
            Protocol::Replay => "replay",
            Protocol::Command => "command",
        }
    }
}

/// An encoded HTTP request body plus the protocol-specific path and headers.
pub struct WireRequest {
    pub path: &'static str,
    pub(crate) headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The SHA-256 of a request body, in hex: what a step record keeps of what it sent.
pub fn digest(body: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, body).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses a tool call's argument text, keeping non-JSON text as a JSON string.
pub(crate) fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// The argument text to send back for a tool call's input.
pub(crate) fn arguments_text(input: &Value) -> String {
    match input {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// Parses a JSON event payload, naming the stream on failure.
fn json(data: &str) -> Result<Value, StreamError> {
    serde_json::from_str(data).map_err(|e| StreamError::Malformed(format!("{e}: {data}")))
}

fn u64_at(v: &Value, pointer: &str) -> Option<u64> {
    v.pointer(pointer).and_then(Value::as_u64)
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outputs_text_blocks_are_separate_paragraphs() {
        let out = Output {
            content: vec![
                Block::text("First message."),
                Block::Thinking { thinking: "hm".into(), signature: None, field: None },
                Block::text(""),
                Block::text("Second message."),
            ],
            usage: Usage::default(),
            stop: Stop::EndTurn,
            response_model: None,
        };
        assert_eq!(out.text(), "First message.\n\nSecond message.");
    }
}
