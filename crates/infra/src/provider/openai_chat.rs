//! OpenAI Chat Completions (also Ollama, vLLM, llama.cpp, OpenRouter): request
//! encoding and SSE chunk decoding.

use serde_json::{Map, Value, json};

use super::{
    Block, Decoder, Delta, Output, Request, Role, Stop, StreamError, Usage, WireRequest, arguments_text, json, sse,
    str_at, u64_at,
};

pub fn encode(req: &Request, api_key: Option<&str>, max_tokens_field: &str) -> WireRequest {
    WireRequest {
        path: "/chat/completions",
        headers: bearer(api_key),
        body: body(req, max_tokens_field).to_string().into_bytes(),
    }
}

pub(super) fn bearer(api_key: Option<&str>) -> Vec<(String, String)> {
    api_key.map(|k| vec![("authorization".to_owned(), format!("Bearer {k}"))]).unwrap_or_default()
}

pub fn body(req: &Request, max_tokens_field: &str) -> Value {
    let mut messages = vec![json!({"role": "system", "content": req.system})];
    for m in &req.messages {
        match m.role {
            Role::User => user_messages(&m.content, &mut messages),
            Role::Assistant => messages.push(assistant_message(&m.content)),
        }
    }
    let tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}})
        })
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("messages".into(), Value::Array(messages));
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert(max_tokens_field.into(), json!(req.max_output_tokens));
    if let Some(super::Reasoning::Effort(effort)) = &req.reasoning {
        body.insert("reasoning_effort".into(), json!(effort));
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    Value::Object(body)
}

/// Tool results become `tool` messages; the rest of the user side one `user` message.
fn user_messages(content: &[Block], out: &mut Vec<Value>) {
    let mut parts = Vec::new();
    for b in content {
        match b {
            Block::ToolResult { tool_use_id, content, images, .. } => {
                out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}));
                // A tool message holds text only: its images go in the user message after.
                parts.extend(images.iter().map(|p| json!({"type": "image_url", "image_url": {"url": p.url()}})));
            }
            Block::Text { text, .. } => parts.push(json!({"type": "text", "text": text})),
            Block::Image { media_type, data } => parts
                .push(json!({"type": "image_url", "image_url": {"url": format!("data:{media_type};base64,{data}")}})),
            _ => {}
        }
    }
    if parts.len() == 1 && parts[0]["type"] == "text" {
        out.push(json!({"role": "user", "content": parts[0]["text"]}));
    } else if !parts.is_empty() {
        out.push(json!({"role": "user", "content": parts}));
    }
}

/// The assistant's text, its calls with their arguments as the model wrote them, and
/// its reasoning in the field it came in (DeepSeek's thinking mode wants its
/// `reasoning_content` back; OpenAI sends none). `content` is null only beside calls:
/// the API refuses an assistant message with neither.
fn assistant_message(content: &[Block]) -> Value {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut reasoning: Vec<(&str, &str)> = Vec::new();
    for b in content {
        match b {
            Block::Text { text: t, .. } => {
                if !text.is_empty() && !t.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(t);
            }
            Block::ToolUse { id, name, input, arguments } => {
                let arguments = arguments.clone().unwrap_or_else(|| arguments_text(input));
                calls.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}));
            }
            Block::Thinking { thinking, field: Some(field), .. } => reasoning.push((field, thinking)),
            _ => {}
        }
    }
    let content = match (text.is_empty(), calls.is_empty()) {
        (false, _) => json!(text),
        (true, false) => Value::Null,
        (true, true) => json!(""),
    };
    let mut m = json!({"role": "assistant", "content": content});
    for (field, thinking) in reasoning {
        m[field] = json!(thinking);
    }
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls);
    }
    m
}

#[derive(Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

/// Decodes `chat.completion.chunk` events up to `[DONE]`.
#[derive(Default)]
pub struct StreamDecoder {
    text: String,
    reasoning: String,
    /// The field the reasoning came in (`reasoning_content`, or `reasoning`).
    reasoning_field: Option<&'static str>,
    calls: Vec<Call>,
    finish: Option<String>,
    usage: Usage,
    done: bool,
    /// The text is (or holds) a refusal.
    refused: bool,
    model: Option<String>,
}

impl Decoder for StreamDecoder {
    fn feed(&mut self, event: &sse::Event) -> Result<Vec<Delta>, StreamError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(Vec::new());
        }
        let v = json(data)?;
        if let Some(err) = v.get("error") {
            let kind = str_at(err, "/type").or(str_at(err, "/code")).unwrap_or("error").to_owned();
            let message = str_at(err, "/message").unwrap_or("").to_owned();
            let retryable = kind.contains("overloaded") || kind.contains("server_error") || kind.contains("rate_limit");
            return Err(StreamError::Reported { kind, message, retryable });
        }
        if self.model.is_none() {
            self.model = str_at(&v, "/model").filter(|m| !m.is_empty()).map(str::to_owned);
        }
        let mut deltas = Vec::new();
        if let Some(choice) = v.pointer("/choices/0") {
            // A refusal is what the model said: kept as its text.
            for field in ["/delta/content", "/delta/refusal"] {
                if let Some(piece) = str_at(choice, field).filter(|p| !p.is_empty()) {
                    self.refused |= field == "/delta/refusal";
                    self.text.push_str(piece);
                    deltas.push(Delta::Text(piece.to_owned()));
                }
            }
            for field in ["reasoning_content", "reasoning"] {
                if let Some(piece) = str_at(choice, &format!("/delta/{field}")).filter(|p| !p.is_empty()) {
                    self.reasoning.push_str(piece);
                    self.reasoning_field.get_or_insert(field);
                    deltas.push(Delta::Thinking(piece.to_owned()));
                }
            }
            for call in choice.pointer("/delta/tool_calls").and_then(Value::as_array).into_iter().flatten() {
                let index = u64_at(call, "/index").unwrap_or(self.calls.len().saturating_sub(1) as u64) as usize;
                while self.calls.len() <= index {
                    self.calls.push(Call::default());
                }
                let c = &mut self.calls[index];
                if let Some(id) = str_at(call, "/id") {
                    c.id.push_str(id);
                }
                if let Some(name) = str_at(call, "/function/name") {
                    c.name.push_str(name);
                    deltas.push(Delta::ToolCall { name: c.name.clone() });
                }
                if let Some(args) = str_at(call, "/function/arguments") {
                    c.arguments.push_str(args);
                }
            }
            if let Some(reason) = str_at(choice, "/finish_reason") {
                self.finish = Some(reason.to_owned());
            }
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = Usage {
                input: u64_at(u, "/prompt_tokens"),
                output: u64_at(u, "/completion_tokens"),
                cache_read: u64_at(u, "/prompt_tokens_details/cached_tokens"),
                cache_write: None,
                thinking: u64_at(u, "/completion_tokens_details/reasoning_tokens"),
            };
        }
        Ok(deltas)
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn finish(self: Box<Self>) -> Result<Output, StreamError> {
        // Some OpenAI-compatible servers end with `[DONE]` and no finish_reason; the
        // stream is complete, and the calls it carried say why it stopped.
        let finish = match (self.finish, self.done) {
            (Some(finish), _) => finish,
            (None, true) if self.calls.is_empty() => "stop".to_owned(),
            (None, true) => "tool_calls".to_owned(),
            (None, false) => return Err(StreamError::Incomplete),
        };
        let mut content = Vec::new();
        if !self.reasoning.is_empty() {
            let field = self.reasoning_field.map(str::to_owned);
            content.push(Block::Thinking { thinking: self.reasoning, signature: None, field });
        }
        if !self.text.is_empty() {
            content.push(Block::text(self.text));
        }
        for c in self.calls {
            let input = super::parse_arguments(&c.arguments);
            content.push(Block::ToolUse { id: c.id, name: c.name, input, arguments: Some(c.arguments) });
        }
        let stop = match finish.as_str() {
            "stop" if self.refused => Stop::Refusal,
            "stop" => Stop::EndTurn,
            "tool_calls" | "function_call" => Stop::ToolUse,
            "length" => Stop::MaxTokens,
            other => Stop::Other(other.to_owned()),
        };
        Ok(Output { content, usage: self.usage, stop, response_model: self.model })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn decode(events: &[&str]) -> Result<Output, StreamError> {
        let mut d = Box::<StreamDecoder>::default();
        for data in events {
            d.feed(&sse::Event { event: String::new(), data: (*data).to_owned() })?;
        }
        d.finish()
    }

    #[test]
    fn a_stream_ending_in_done_without_finish_reason_is_complete() {
        let out = decode(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]}}]}"#,
            "[DONE]",
        ])
        .expect("complete");
        assert_eq!(out.stop, Stop::ToolUse);
        assert_eq!(out.tool_uses().map(|(id, name, _)| (id, name)).collect::<Vec<_>>(), vec![("c1", "bash")]);
        let cut = decode(&[r#"{"choices":[{"index":0,"delta":{"content":"half"}}]}"#]);
        assert_eq!(cut, Err(StreamError::Incomplete));
    }

    #[test]
    fn a_refusal_is_the_answers_text_and_its_stop() {
        let out = decode(&[
            r#"{"choices":[{"index":0,"delta":{"content":null,"refusal":"I won't"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"refusal":" do that."},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ])
        .expect("complete");
        assert_eq!((out.stop, out.content), (Stop::Refusal, vec![Block::text("I won't do that.")]));
    }
}
