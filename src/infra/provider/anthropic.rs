//! The Anthropic Messages API: request encoding (with our cache breakpoints) and
//! SSE stream decoding.

use serde_json::{Map, Value, json};

use super::{
    Block, Decoder, Delta, Output, Request, Role, Stop, StreamError, Usage, WireRequest, json, sse, str_at, u64_at,
};

const API_VERSION: &str = "2023-06-01";

pub fn encode(req: &Request, api_key: Option<&str>) -> WireRequest {
    let mut headers = vec![("anthropic-version".to_owned(), API_VERSION.to_owned())];
    if let Some(key) = api_key {
        headers.push(("x-api-key".to_owned(), key.to_owned()));
    }
    WireRequest { path: "/v1/messages", headers, body: body(req).to_string().into_bytes() }
}

fn cache_mark() -> Value {
    json!({"type": "ephemeral"})
}

/// The wire body. Breakpoints go on the system prompt, the last tool and the last
/// block of the last message, so each request reads the previous one's prefix.
pub fn body(req: &Request) -> Value {
    let mut tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
        .collect();
    if let Some(Value::Object(last)) = tools.last_mut() {
        last.insert("cache_control".into(), cache_mark());
    }
    let mut messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| {
            let role = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            let content: Vec<Value> = m.content.iter().filter_map(block).collect();
            json!({"role": role, "content": content})
        })
        .collect();
    if let Some(Value::Array(content)) = messages.last_mut().and_then(|m| m.get_mut("content"))
        && let Some(Value::Object(last)) = content.last_mut()
    {
        last.insert("cache_control".into(), cache_mark());
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("max_tokens".into(), json!(req.max_output_tokens));
    body.insert("system".into(), json!([{"type": "text", "text": req.system, "cache_control": cache_mark()}]));
    body.insert("messages".into(), Value::Array(messages));
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}

fn block(b: &Block) -> Option<Value> {
    Some(match b {
        Block::Text { text } if text.is_empty() => return None,
        Block::Text { text } => json!({"type": "text", "text": text}),
        Block::ToolUse { id, name, input } => {
            let input = match input {
                Value::Object(_) => input.clone(),
                other => json!({"invalid_json": other}),
            };
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        Block::ToolResult { tool_use_id, content, is_error } => {
            let mut v = json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": content});
            if *is_error {
                v["is_error"] = json!(true);
            }
            v
        }
        Block::Thinking { thinking, signature } => {
            json!({"type": "thinking", "thinking": thinking, "signature": signature.clone().unwrap_or_default()})
        }
        Block::RedactedThinking { data } => json!({"type": "redacted_thinking", "data": data}),
        Block::Image { media_type, data } => {
            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
        }
        Block::Reasoning { .. } => return None,
    })
}

enum Partial {
    Text(String),
    ToolUse { id: String, name: String, json: String },
    Thinking { text: String, signature: Option<String> },
    Redacted(String),
}

/// Decodes `message_start` … `message_stop`.
#[derive(Default)]
pub struct StreamDecoder {
    blocks: Vec<Partial>,
    usage: Usage,
    stop: Option<String>,
    done: bool,
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
            "message_start" => self.read_usage(v.pointer("/message/usage")),
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
                    _ => Partial::Text(str_at(&b, "/text").unwrap_or("").to_owned()),
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
                Partial::Text(text) => Block::Text { text },
                Partial::ToolUse { id, name, json } => {
                    Block::ToolUse { id, name, input: super::parse_arguments(&json) }
                }
                Partial::Thinking { text, signature } => Block::Thinking { thinking: text, signature },
                Partial::Redacted(data) => Block::RedactedThinking { data },
            })
            .collect();
        let stop = match self.stop.as_deref() {
            Some("end_turn") | Some("stop_sequence") => Stop::EndTurn,
            Some("tool_use") => Stop::ToolUse,
            Some("max_tokens") => Stop::MaxTokens,
            Some(other) => Stop::Other(other.to_owned()),
            None => return Err(StreamError::Incomplete),
        };
        Ok(Output { content, usage: self.usage, stop })
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
