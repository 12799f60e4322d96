//! The OpenAI Responses API: request encoding (stateless: `store: false`, reasoning
//! items sent back whole) and semantic-event stream decoding.

use serde_json::{Map, Value, json};

use super::{
    Block, Decoder, Delta, Output, Request, Role, Stop, StreamError, Usage, WireRequest, arguments_text, json, sse,
    str_at, u64_at,
};

pub fn encode(req: &Request, api_key: Option<&str>) -> WireRequest {
    WireRequest {
        path: "/responses",
        headers: super::openai_chat::bearer(api_key),
        body: body(req).to_string().into_bytes(),
    }
}

pub fn body(req: &Request) -> Value {
    let mut input = Vec::new();
    for m in &req.messages {
        for b in &m.content {
            if let Some(item) = item(m.role, b) {
                input.push(item);
            }
        }
    }
    let tools: Vec<Value> = req
        .tools
        .iter()
        .map(
            |t| json!({"type": "function", "name": t.name, "description": t.description, "parameters": t.input_schema}),
        )
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("instructions".into(), json!(req.system));
    body.insert("input".into(), Value::Array(input));
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("max_output_tokens".into(), json!(req.max_output_tokens));
    body.insert("store".into(), json!(false));
    body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    if let Some(super::Reasoning::Effort(effort)) = &req.reasoning {
        body.insert("reasoning".into(), json!({"effort": effort}));
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}

fn item(role: Role, b: &Block) -> Option<Value> {
    Some(match (role, b) {
        (Role::User, Block::Text { text, .. }) => {
            json!({"role": "user", "content": [{"type": "input_text", "text": text}]})
        }
        (Role::User, Block::Image { media_type, data }) => json!({"role": "user", "content": [
            {"type": "input_image", "image_url": format!("data:{media_type};base64,{data}")}]}),
        (Role::User, Block::ToolResult { tool_use_id, content, images, .. }) if !images.is_empty() => {
            let mut output = vec![json!({"type": "input_text", "text": content})];
            output.extend(images.iter().map(|p| json!({"type": "input_image", "image_url": p.url()})));
            json!({"type": "function_call_output", "call_id": tool_use_id, "output": output})
        }
        (Role::User, Block::ToolResult { tool_use_id, content, .. }) => {
            json!({"type": "function_call_output", "call_id": tool_use_id, "output": content})
        }
        (Role::Assistant, Block::Text { text, phase }) => {
            let mut message = json!({"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": text}]});
            // Models that mark their messages' phase want it back on every one.
            if let Some(phase) = phase {
                message["phase"] = json!(phase);
            }
            message
        }
        (Role::Assistant, Block::ToolUse { id, name, input, arguments }) => {
            let arguments = arguments.clone().unwrap_or_else(|| arguments_text(input));
            json!({"type": "function_call", "call_id": id, "name": name, "arguments": arguments})
        }
        (Role::Assistant, Block::Reasoning { item }) => item.clone(),
        _ => return None,
    })
}

/// Decodes `response.*` events up to `response.completed` (or its failures).
#[derive(Default)]
pub struct StreamDecoder {
    items: Vec<Value>,
    usage: Usage,
    status: Option<String>,
    incomplete_reason: Option<String>,
    done: bool,
    model: Option<String>,
}

impl Decoder for StreamDecoder {
    fn feed(&mut self, event: &sse::Event) -> Result<Vec<Delta>, StreamError> {
        if event.data.is_empty() {
            return Ok(Vec::new());
        }
        let v = json(&event.data)?;
        let kind = str_at(&v, "/type").unwrap_or(event.event.as_str()).to_owned();
        if let Some(model) = str_at(&v, "/response/model") {
            self.model = Some(model.to_owned());
        }
        let mut deltas = Vec::new();
        match kind.as_str() {
            "response.output_text.delta" => deltas.push(Delta::Text(str_at(&v, "/delta").unwrap_or("").to_owned())),
            "response.reasoning_summary_text.delta" => {
                deltas.push(Delta::Thinking(str_at(&v, "/delta").unwrap_or("").to_owned()));
            }
            "response.output_item.added" if str_at(&v, "/item/type") == Some("function_call") => {
                deltas.push(Delta::ToolCall { name: str_at(&v, "/item/name").unwrap_or("").to_owned() });
            }
            "response.output_item.done" => {
                if let Some(item) = v.get("item") {
                    self.items.push(item.clone());
                }
            }
            "response.completed" | "response.incomplete" => {
                let r = v.get("response").cloned().unwrap_or(Value::Null);
                self.status = str_at(&r, "/status").map(str::to_owned);
                self.incomplete_reason = str_at(&r, "/incomplete_details/reason").map(str::to_owned);
                if let Some(u) = r.get("usage").filter(|u| u.is_object()) {
                    self.usage = Usage {
                        input: u64_at(u, "/input_tokens"),
                        output: u64_at(u, "/output_tokens"),
                        cache_read: u64_at(u, "/input_tokens_details/cached_tokens"),
                        cache_write: None,
                        thinking: u64_at(u, "/output_tokens_details/reasoning_tokens"),
                    };
                }
                self.done = true;
            }
            "response.failed" | "error" => {
                let err = v.pointer("/response/error").or(v.get("error")).unwrap_or(&v);
                let code = str_at(err, "/code").or(str_at(err, "/type")).unwrap_or("error").to_owned();
                let message = str_at(err, "/message").unwrap_or("").to_owned();
                let retryable =
                    code.contains("server_error") || code.contains("overloaded") || code.contains("rate_limit");
                return Err(StreamError::Reported { kind: code, message, retryable });
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
        let mut content = Vec::new();
        let mut called = false;
        let mut refused = false;
        for item in self.items {
            match str_at(&item, "/type").unwrap_or("") {
                "message" => {
                    let phase = str_at(&item, "/phase").map(str::to_owned);
                    for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
                        refused |= str_at(part, "/refusal").is_some();
                        let text = str_at(part, "/text").or(str_at(part, "/refusal"));
                        if let Some(text) = text {
                            content.push(Block::Text { text: text.to_owned(), phase: phase.clone() });
                        }
                    }
                }
                "function_call" => {
                    called = true;
                    let arguments = str_at(&item, "/arguments").unwrap_or("").to_owned();
                    content.push(Block::ToolUse {
                        id: str_at(&item, "/call_id").unwrap_or("").to_owned(),
                        name: str_at(&item, "/name").unwrap_or("").to_owned(),
                        input: super::parse_arguments(&arguments),
                        arguments: Some(arguments),
                    });
                }
                "reasoning" => content.push(Block::Reasoning { item }),
                _ => {}
            }
        }
        let stop = match (self.status.as_deref(), self.incomplete_reason.as_deref()) {
            (Some("incomplete"), Some("max_output_tokens")) => Stop::MaxTokens,
            (Some("incomplete"), reason) => Stop::Other(reason.unwrap_or("incomplete").to_owned()),
            _ if called => Stop::ToolUse,
            _ if refused => Stop::Refusal,
            _ => Stop::EndTurn,
        };
        Ok(Output { content, usage: self.usage, stop, response_model: self.model })
    }
}
