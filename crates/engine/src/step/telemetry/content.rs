//! Content in spans (only when it is asked for): every word through the redactor, each
//! attribute bounded, JSON kept whole.

use infra::provider::{Block, Message, Role};
use infra::redact::Redactor;
use serde_json::{Value, json};

/// The most of one content attribute kept (the first part of it).
pub(super) const CONTENT_MAX: usize = 16 * 1024;

/// The most of one part of a request's message kept (history: the answer and the
/// tool calls' own spans carry theirs whole, to [`CONTENT_MAX`]).
const PART_MAX: usize = 4 * 1024;

/// `text` redacted, then cut to `max` bytes (after: a cut never splits a secret so part
/// of it shows).
pub(super) fn said(redact: &Redactor, text: &str, max: usize) -> String {
    cut(redact.redact(text), max)
}

/// `text` cut to at most `max` bytes, on a character's boundary.
fn cut(mut text: String, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// `value` with every string in it (and every key) redacted, before it is written as
/// JSON: a secret holding a quote or a backslash is written escaped, where the
/// redactor would not know it.
pub(super) fn redacted_json(redact: &Redactor, value: &Value) -> Value {
    match value {
        Value::String(text) => Value::String(redact.redact(text)),
        Value::Array(items) => Value::Array(items.iter().map(|v| redacted_json(redact, v)).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (redact.redact(k), redacted_json(redact, v))).collect())
        }
        other => other.clone(),
    }
}

/// A tool call's input as JSON, redacted and cut to `max` bytes.
pub(super) fn arguments(redact: &Redactor, input: &Value, max: usize) -> String {
    cut(redacted_json(redact, input).to_string(), max)
}

/// A request's system prompt and messages as the conventions write them (JSON:
/// `[{"type": "text", "content"}]`, and `[{"role", "parts"}]` with text, tool call and
/// tool call response parts), every word redacted, each part's words cut to 4 KiB. Of
/// the messages, the latest whole ones that fit in [`CONTENT_MAX`] as written; when the
/// latest alone does not, its first parts that do, and a note of how many were left
/// out — so the attribute is valid JSON and bounded however many calls a step made.
pub(super) fn input_messages(redact: &Redactor, system: &str, messages: &[Message]) -> (String, String) {
    let system = json!([{"type": "text", "content": said(redact, system, CONTENT_MAX)}]).to_string();
    let mut kept: Vec<String> = Vec::new();
    let mut size = 2;
    for message in messages.iter().rev() {
        let parts: Vec<Value> = message.content.iter().filter_map(|block| part(redact, block)).collect();
        let role = match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let whole = json!({"role": role, "parts": parts}).to_string();
        if size + whole.len() < CONTENT_MAX {
            size += whole.len() + 1;
            kept.push(whole);
            continue;
        }
        if kept.is_empty() {
            kept.push(json!({"role": role, "parts": fitting(parts)}).to_string());
        }
        break;
    }
    kept.reverse();
    (system, format!("[{}]", kept.join(",")))
}

/// The first of `parts` that fit in [`CONTENT_MAX`] as written, and a text part saying
/// how many more were left out.
fn fitting(parts: Vec<Value>) -> Vec<Value> {
    let total = parts.len();
    let mut left = CONTENT_MAX - 256;
    let mut fit = Vec::new();
    for part in parts {
        let size = part.to_string().len() + 1;
        if size > left {
            break;
        }
        left -= size;
        fit.push(part);
    }
    let out = total - fit.len();
    if out > 0 {
        fit.push(json!({"type": "text", "content": format!("[{out} more parts of this message left out]")}));
    }
    fit
}

/// One block of a message as a part, or `None` for what the conventions have no part
/// for (thinking, images, opaque blocks).
fn part(redact: &Redactor, block: &Block) -> Option<Value> {
    Some(match block {
        Block::Text { text, .. } => json!({"type": "text", "content": said(redact, text, PART_MAX)}),
        Block::ToolUse { id, name, input, .. } => json!({"type": "tool_call", "id": id,
            "name": redact.redact(name), "arguments": arguments(redact, input, PART_MAX)}),
        Block::ToolResult { tool_use_id, content, .. } => json!({"type": "tool_call_response",
            "id": tool_use_id, "response": said(redact, content, PART_MAX)}),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_with_a_quote_is_redacted_in_a_calls_arguments() {
        let secret = "pa\"ss\\word1234";
        let redact = Redactor::new([("MY_SECRET".to_owned(), secret.to_owned())]);
        let written = arguments(&redact, &json!({"command": format!("echo '{secret}'")}), CONTENT_MAX);
        assert!(!written.contains("word1234"), "{written}");
        assert!(serde_json::from_str::<Value>(&written).is_ok(), "{written}");
    }

    #[test]
    fn a_request_with_many_big_calls_is_bounded_and_whole_json() {
        let calls: Vec<Block> = (0..60)
            .map(|i| Block::ToolResult {
                tool_use_id: format!("c{i}"),
                content: "\"".repeat(20_000),
                is_error: false,
                images: Vec::new(),
            })
            .collect();
        let messages = [
            Message { role: Role::User, content: vec![Block::text("first")] },
            Message { role: Role::User, content: calls },
        ];
        let (_, input) = input_messages(&Redactor::new(Vec::new()), "system", &messages);
        assert!(input.len() <= CONTENT_MAX, "{} bytes", input.len());
        let parsed: Value = serde_json::from_str(&input).expect("whole JSON");
        let parts = parsed[0]["parts"].as_array().expect("parts");
        assert!(parts.last().is_some_and(|p| p["content"].as_str().is_some_and(|c| c.contains("left out"))));
        // Small messages before a big one fit whole, the latest last.
        let messages = [messages[0].clone(), Message { role: Role::Assistant, content: vec![Block::text("second")] }];
        let (_, input) = input_messages(&Redactor::new(Vec::new()), "system", &messages);
        let parsed: Value = serde_json::from_str(&input).expect("whole JSON");
        assert_eq!(
            (parsed[0]["role"].as_str(), parsed[1]["parts"][0]["content"].as_str()),
            (Some("user"), Some("second"))
        );
    }
}
