//! The Anthropic Messages API: request encoding (with our cache breakpoints) and
//! SSE stream decoding.

use serde::Serialize;
use serde_json::Value;

use super::{
    Block, Decoder, Delta, Output, Request, Role, Stop, StreamError, Usage, WireRequest, json, sse, str_at, u64_at,
};

const API_VERSION: &str = "2023-06-01";

pub fn encode(req: &Request, api_key: Option<&str>) -> WireRequest {
    let mut headers = vec![("anthropic-version".to_owned(), API_VERSION.to_owned())];
    if let Some(key) = api_key {
        headers.push(("x-api-key".to_owned(), key.to_owned()));
    }
    WireRequest { path: "/v1/messages", headers, body: serde_json::to_vec(&body(req)).unwrap_or_default() }
}

/// The wire body, borrowing from the request (it is serialised once per step and
/// grows with the conversation). The four breakpoints go on the system prompt, the
/// last tool, the last block of the last message and the last block of the user
/// message before it, so each request reads the previous one's prefix from the cache.
pub fn body(req: &Request) -> Body<'_> {
    let mut tools: Vec<WireTool<'_>> = req
        .tools
        .iter()
        .map(|t| WireTool {
            name: &t.name,
            description: &t.description,
            input_schema: &t.input_schema,
            cache_control: None,
        })
        .collect();
    if let Some(last) = tools.last_mut() {
        last.cache_control = Some(Ephemeral::MARK);
    }
    let mut messages: Vec<WireMessage<'_>> = req
        .messages
        .iter()
        .map(|m| WireMessage {
            role: match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            },
            content: m.content.iter().filter_map(block).map(|block| WireBlock { block, cache_control: None }).collect(),
        })
        .collect();
    // A sliding anchor on the last message, and a fallback on the user message before
    // it, so a cached prefix stays within the provider's lookback if one write is lost.
    // The cache key excludes cache_control, so moving them costs no cache hits.
    let users: Vec<usize> = (0..messages.len()).filter(|&i| messages[i].role == "user").collect();
    let anchors = [messages.len().checked_sub(1), users.iter().rev().nth(1).copied()];
    for i in anchors.into_iter().flatten() {
        if let Some(last) = messages[i].content.last_mut() {
            last.cache_control = Some(Ephemeral::MARK);
        }
    }
    Body {
        model: &req.model,
        max_tokens: req.max_output_tokens,
        system: [SystemBlock { kind: "text", text: &req.system, cache_control: Ephemeral::MARK }],
        messages,
        tools,
        thinking: match &req.reasoning {
            Some(super::Reasoning::ThinkingBudget(budget)) => {
                Some(Thinking { kind: "enabled", budget_tokens: *budget })
            }
            _ => None,
        },
        stream: true,
    }
}

#[derive(Serialize)]
struct Thinking {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u32,
}

#[derive(Serialize)]
pub struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    system: [SystemBlock<'a>; 1],
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    stream: bool,
}

#[derive(Serialize, Clone, Copy)]
struct Ephemeral {
    #[serde(rename = "type")]
    kind: &'static str,
}

impl Ephemeral {
    const MARK: Ephemeral = Ephemeral { kind: "ephemeral" };
}

#[derive(Serialize)]
struct SystemBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    cache_control: Ephemeral,
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<Ephemeral>,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<WireBlock<'a>>,
}

#[derive(Serialize)]
struct WireBlock<'a> {
    #[serde(flatten)]
    block: Content<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<Ephemeral>,
}

/// A block we know, or one we kept whole because we did not.
#[derive(Serialize)]
#[serde(untagged)]
enum Content<'a> {
    Known(BlockRef<'a>),
    Opaque(&'a Value),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockRef<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: ToolInput<'a>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ResultContent<'a>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    Image {
        source: ImageSource<'a>,
    },
}

/// A tool result's content: its text alone, or the text and the images it returned.
#[derive(Serialize)]
#[serde(untagged)]
enum ResultContent<'a> {
    Text(&'a str),
    Blocks(Vec<BlockRef<'a>>),
}

/// Anthropic requires an object; arguments that were not JSON go back wrapped.
#[derive(Serialize)]
#[serde(untagged)]
enum ToolInput<'a> {
    Object(&'a Value),
    Invalid { invalid_json: &'a Value },
}

#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

fn block(b: &Block) -> Option<Content<'_>> {
    Some(Content::Known(match b {
        Block::Text { text, .. } if text.is_empty() => return None,
        Block::Text { text, .. } => BlockRef::Text { text },
        Block::ToolUse { id, name, input, .. } => BlockRef::ToolUse {
            id,
            name,
            input: if input.is_object() {
                ToolInput::Object(input)
            } else {
                ToolInput::Invalid { invalid_json: input }
            },
        },
        Block::ToolResult { tool_use_id, content, is_error, images } => {
            let content = match images.is_empty() {
                true => ResultContent::Text(content),
                false => ResultContent::Blocks(
                    std::iter::once(BlockRef::Text { text: content })
                        .chain(images.iter().map(|p| BlockRef::Image {
                            source: ImageSource { kind: "base64", media_type: &p.media_type, data: &p.data },
                        }))
                        .collect(),
                ),
            };
            BlockRef::ToolResult { tool_use_id, content, is_error: *is_error }
        }
        // Thinking from another provider carries no signature; Anthropic refuses it.
        Block::Thinking { signature: None, .. } => return None,
        Block::Thinking { thinking, signature: Some(signature), .. } => BlockRef::Thinking { thinking, signature },
        Block::RedactedThinking { data } => BlockRef::RedactedThinking { data },
        Block::Image { media_type, data } => {
            BlockRef::Image { source: ImageSource { kind: "base64", media_type, data } }
        }
        Block::Opaque { block } => return Some(Content::Opaque(block)),
        Block::Reasoning { .. } => return None,
    }))
}

enum Partial {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    Thinking {
        text: String,
        signature: Option<String>,
    },
    Redacted(String),
    /// A block of a type we do not know: its start, with its deltas' text fields
    /// appended and any `input_json_delta` pieces gathered for its `input`.
    Opaque {
        block: Value,
        json: String,
    },
}

/// Decodes `message_start` … `message_stop`.
#[derive(Default)]
pub struct StreamDecoder {
    blocks: Vec<Partial>,
    usage: Usage,
    stop: Option<String>,
    done: bool,
    model: Option<String>,
}

impl Decoder for StreamDecoder {
    fn feed(&mut self, event: &sse::Event) -> Result<Vec<Delta>, StreamError> {
        if event.data.is_empty() {
            return Ok(Vec::new());
        }
        let v = json(&event.data)?;
        let kind = str_at(&v, "/type").unwrap_or(event.event.as_str());
        let mut deltas = Vec::new();
        match kind {
            "message_start" => {
                self.model = str_at(&v, "/message/model").map(str::to_owned);
                self.read_usage(v.pointer("/message/usage"));
            }
            "content_block_start" => {
                let b = v.get("content_block").cloned().unwrap_or(Value::Null);
                let partial = match str_at(&b, "/type").unwrap_or("") {
                    "tool_use" => {
                        let name = str_at(&b, "/name").unwrap_or("").to_owned();
                        deltas.push(Delta::ToolCall { name: name.clone() });
                        Partial::ToolUse { id: str_at(&b, "/id").unwrap_or("").to_owned(), name, json: String::new() }
                    }
                    "thinking" => Partial::Thinking {
                        text: str_at(&b, "/thinking").unwrap_or("").to_owned(),
                        signature: str_at(&b, "/signature").filter(|s| !s.is_empty()).map(str::to_owned),
                    },
                    "redacted_thinking" => Partial::Redacted(str_at(&b, "/data").unwrap_or("").to_owned()),
                    "text" => Partial::Text(str_at(&b, "/text").unwrap_or("").to_owned()),
                    _ => Partial::Opaque { block: b, json: String::new() },
                };
                self.blocks.push(partial);
            }
            "content_block_delta" => {
                let d = v.get("delta").cloned().unwrap_or(Value::Null);
                let index = u64_at(&v, "/index").unwrap_or(0) as usize;
                let Some(partial) = self.blocks.get_mut(index) else {
                    return Err(StreamError::Malformed(format!("delta for unknown block {index}")));
                };
                match (partial, str_at(&d, "/type").unwrap_or("")) {
                    (Partial::Text(text), "text_delta") => {
                        let piece = str_at(&d, "/text").unwrap_or("");
                        text.push_str(piece);
                        deltas.push(Delta::Text(piece.to_owned()));
                    }
                    (Partial::ToolUse { json, .. }, "input_json_delta") => {
                        json.push_str(str_at(&d, "/partial_json").unwrap_or(""));
                    }
                    (Partial::Thinking { text, .. }, "thinking_delta") => {
                        let piece = str_at(&d, "/thinking").unwrap_or("");
                        text.push_str(piece);
                        deltas.push(Delta::Thinking(piece.to_owned()));
                    }
                    (Partial::Thinking { signature, .. }, "signature_delta") => {
                        let s = signature.get_or_insert_with(String::new);
                        s.push_str(str_at(&d, "/signature").unwrap_or(""));
                    }
                    (Partial::Opaque { json, .. }, "input_json_delta") => {
                        json.push_str(str_at(&d, "/partial_json").unwrap_or(""));
                    }
                    (Partial::Opaque { block, .. }, _) => extend_opaque(block, &d),
                    (_, other) => {
                        return Err(StreamError::Malformed(format!("delta `{other}` does not fit block {index}")));
                    }
                }
            }
            "message_delta" => {
                if let Some(reason) = str_at(&v, "/delta/stop_reason") {
                    self.stop = Some(reason.to_owned());
                }
                self.read_usage(v.get("usage"));
            }
            "message_stop" => self.done = true,
            "error" => {
                let kind = str_at(&v, "/error/type").unwrap_or("error").to_owned();
                let retryable = matches!(kind.as_str(), "overloaded_error" | "api_error" | "rate_limit_error");
                let message = str_at(&v, "/error/message").unwrap_or("").to_owned();
                return Err(StreamError::Reported { kind, message, retryable });
            }
            _ => {}
        }
        Ok(deltas)
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish(self: Box<Self>) -> Result<Output, StreamError> {
        if !self.done {
            return Err(StreamError::Incomplete);
        }
        let content = self
            .blocks
            .into_iter()
            .map(|p| match p {
                Partial::Text(text) => Block::text(text),
                Partial::ToolUse { id, name, json } => {
                    Block::ToolUse { id, name, input: super::parse_arguments(&json), arguments: None }
                }
                Partial::Thinking { text, signature } => Block::Thinking { thinking: text, signature, field: None },
                Partial::Redacted(data) => Block::RedactedThinking { data },
                Partial::Opaque { mut block, json } => {
                    if !json.is_empty() {
                        block["input"] = super::parse_arguments(&json);
                    }
                    Block::Opaque { block }
                }
            })
            .collect();
        let stop = match self.stop.as_deref() {
            Some("end_turn") | Some("stop_sequence") => Stop::EndTurn,
            Some("tool_use") => Stop::ToolUse,
            Some("max_tokens") => Stop::MaxTokens,
            Some("refusal") => Stop::Refusal,
            Some(other) => Stop::Other(other.to_owned()),
            None => return Err(StreamError::Incomplete),
        };
        Ok(Output { content, usage: self.usage, stop, response_model: self.model })
    }
}

/// Applies a delta to a block we keep whole: each of its text fields is appended to
/// the block's field of that name (a `compaction_delta`'s `content`, say), anything else
/// replaces it.
fn extend_opaque(block: &mut Value, delta: &Value) {
    let Some(fields) = delta.as_object() else { return };
    for (key, value) in fields.iter().filter(|(k, _)| k.as_str() != "type") {
        match (block.get_mut(key), value) {
            (Some(Value::String(have)), Value::String(more)) => have.push_str(more),
            _ => block[key.as_str()] = value.clone(),
        }
    }
}

impl StreamDecoder {
    fn read_usage(&mut self, usage: Option<&Value>) {
        let Some(u) = usage else { return };
        let fresh = u64_at(u, "/input_tokens");
        let write = u64_at(u, "/cache_creation_input_tokens");
        let read = u64_at(u, "/cache_read_input_tokens");
        if fresh.is_some() || write.is_some() || read.is_some() {
            self.usage.input = Some(fresh.unwrap_or(0) + write.unwrap_or(0) + read.unwrap_or(0));
            self.usage.cache_write = write.or(self.usage.cache_write);
            self.usage.cache_read = read.or(self.usage.cache_read);
        }
        if let Some(out) = u64_at(u, "/output_tokens") {
            self.usage.output = Some(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Message, ToolSpec};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn encodes_breakpoints_thinking_and_invalid_arguments() {
        let req = Request {
            model: "m".into(),
            max_output_tokens: 10,
            system: "sys".into(),
            tools: vec![ToolSpec {
                name: "bash".into(),
                description: "d".into(),
                input_schema: json!({"type": "object"}),
            }],
            messages: vec![
                Message { role: Role::User, content: vec![Block::text("hi")] },
                Message {
                    role: Role::Assistant,
                    content: vec![
                        Block::Thinking { thinking: "hm".into(), signature: Some("sig".into()), field: None },
                        Block::ToolUse { id: "t1".into(), name: "bash".into(), input: json!("{oops"), arguments: None },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![Block::ToolResult {
                        tool_use_id: "t1".into(),
                        content: "bad".into(),
                        images: Vec::new(),
                        is_error: true,
                    }],
                },
            ],
            reasoning: None,
        };
        let wire: Value = serde_json::from_slice(&encode(&req, Some("k")).body).expect("json");
        assert_eq!(
            wire,
            json!({
                "model": "m", "max_tokens": 10, "stream": true,
                "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
                "tools": [{"name": "bash", "description": "d", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "hm", "signature": "sig"},
                        {"type": "tool_use", "id": "t1", "name": "bash", "input": {"invalid_json": "{oops"}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "bad", "is_error": true,
                        "cache_control": {"type": "ephemeral"}}]}
                ]
            })
        );
    }
}
