//! The transcript: immutable numbered entries under `.offshoot/messages/`.
//!
//! An entry's file name decides its side: `NNNN-<sender>.md` is a delivered message
//! (user side, the whole file is its text), `NNNN-tool.json` one tool result (tool
//! side), any other `NNNN-<model>.json` one model output (assistant side). Numbers
//! are one counter per agent, compared numerically, never stored.

use std::collections::HashSet;

use infra::provider::{Block, Message, Output, Role};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    User,
    Assistant,
    Tool,
}

/// One transcript entry, parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Message { number: u32, sender: String, text: String },
    Output { number: u32, model: String, output: Output },
    ToolResult { number: u32, block: Block },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranscriptError {
    #[error("transcript entry `{0}` is not named `NNNN-<origin>.md|json`")]
    BadName(String),
    #[error("transcript entry `{name}` does not parse: {reason}")]
    BadContent { name: String, reason: String },
}

/// The name's parts: number, origin, side.
pub fn parse_name(name: &str) -> Result<(u32, &str, Side), TranscriptError> {
    let bad = || TranscriptError::BadName(name.to_owned());
    let (stem, side_ext) = if let Some(stem) = name.strip_suffix(".md") {
        (stem, Side::User)
    } else if let Some(stem) = name.strip_suffix(".json") {
        (stem, Side::Assistant)
    } else {
        return Err(bad());
    };
    let (digits, origin) = stem.split_once('-').ok_or_else(bad)?;
    if digits.len() < 4 || !digits.bytes().all(|b| b.is_ascii_digit()) || origin.is_empty() {
        return Err(bad());
    }
    let number = digits.parse().map_err(|_| bad())?;
    let side = if side_ext == Side::Assistant && origin == "tool" { Side::Tool } else { side_ext };
    Ok((number, origin, side))
}

pub fn entry_name(number: u32, origin: &str, side: Side) -> String {
    let ext = if side == Side::User { "md" } else { "json" };
    format!("{number:04}-{origin}.{ext}")
}

/// A model id made safe as a file-name origin (`tool` is reserved).
pub fn model_origin(model: &str) -> String {
    let clean: String = model
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect();
    let clean = clean.trim_matches('.').to_owned();
    if clean.is_empty() || clean == "tool" { format!("model-{clean}") } else { clean }
}

impl Entry {
    pub fn parse(name: &str, bytes: &[u8]) -> Result<Entry, TranscriptError> {
        let (number, origin, side) = parse_name(name)?;
        let bad = |reason: String| TranscriptError::BadContent { name: name.to_owned(), reason };
        Ok(match side {
            Side::User => Entry::Message {
                number,
                sender: origin.to_owned(),
                text: String::from_utf8(bytes.to_vec()).map_err(|e| bad(e.to_string()))?,
            },
            Side::Assistant => Entry::Output {
                number,
                model: origin.to_owned(),
                output: serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?,
            },
            Side::Tool => {
                let block: Block = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
                if !matches!(block, Block::ToolResult { .. }) {
                    return Err(bad("a tool entry must hold one tool_result block".into()));
                }
                Entry::ToolResult { number, block }
            }
        })
    }

    pub fn number(&self) -> u32 {
        match self {
            Entry::Message { number, .. } | Entry::Output { number, .. } | Entry::ToolResult { number, .. } => *number,
        }
    }

    pub fn side(&self) -> Side {
        match self {
            Entry::Message { .. } => Side::User,
            Entry::Output { .. } => Side::Assistant,
            Entry::ToolResult { .. } => Side::Tool,
        }
    }

    fn blocks(&self) -> Vec<Block> {
        match self {
            Entry::Message { text, .. } => vec![Block::text(text.clone())],
            Entry::Output { output, .. } => output.content.clone(),
            Entry::ToolResult { block, .. } => vec![block.clone()],
        }
    }
}

/// The next free entry number after `numbers`.
pub fn next_number(numbers: impl IntoIterator<Item = u32>) -> u32 {
    numbers.into_iter().max().unwrap_or(0) + 1
}

/// Entries (in numeric order) as wire messages, same-role neighbours merged.
pub(crate) fn to_messages(entries: &[Entry]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    for e in entries {
        let role = if e.side() == Side::Assistant { Role::Assistant } else { Role::User };
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(e.blocks()),
            _ => out.push(Message { role, content: e.blocks() }),
        }
    }
    out
}

/// Whether a model call is due: the last entry is user or tool side.
pub fn warrants_call(entries: &[Entry]) -> bool {
    entries.last().is_some_and(|e| e.side() != Side::Assistant)
}

/// The tool calls of the last model output that have no result after it, in order.
pub fn unanswered_calls(entries: &[Entry]) -> Vec<(String, String)> {
    let Some(pos) = entries.iter().rposition(|e| e.side() == Side::Assistant) else {
        return Vec::new();
    };
    let answered: HashSet<&str> = entries[pos + 1..]
        .iter()
        .filter_map(|e| match e {
            Entry::ToolResult { block: Block::ToolResult { tool_use_id, .. }, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })
        .collect();
    match &entries[pos] {
        Entry::Output { output, .. } => output
            .tool_uses()
            .filter(|(id, _, _)| !answered.contains(id))
            .map(|(id, name, _)| (id.to_owned(), name.to_owned()))
            .collect(),
        _ => Vec::new(),
    }
}

/// What makes a transcript invalid on the wire, in words: a tool call answered twice,
/// a result for no pending call, an entry between a model output's calls and their
/// results, or duplicate entry numbers. Calls of the last output still waiting for
/// results are not a fault (a driver settles them); `unanswered_calls` names them.
pub fn wire_faults(entries: &[Entry]) -> Vec<String> {
    let mut faults = Vec::new();
    let mut seen_numbers = HashSet::new();
    let mut pending: Vec<String> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    for entry in entries {
        let n = entry.number();
        if !seen_numbers.insert(n) {
            faults.push(format!("entry number {n:04} is used twice"));
        }
        match entry {
            Entry::ToolResult { block: Block::ToolResult { tool_use_id, .. }, .. } => {
                if let Some(at) = pending.iter().position(|p| p == tool_use_id) {
                    pending.remove(at);
                    answered.insert(tool_use_id.clone());
                } else if answered.contains(tool_use_id) {
                    faults.push(format!("entry {n:04} answers call `{tool_use_id}` a second time"));
                } else {
                    faults.push(format!("entry {n:04} answers call `{tool_use_id}`, which no model output made"));
                }
            }
            Entry::ToolResult { .. } => faults.push(format!("entry {n:04} is a tool result without a call id")),
            other if !pending.is_empty() => {
                faults.push(format!(
                    "entry {n:04} comes between a model output and the results of its calls ({})",
                    pending.join(", ")
                ));
                pending.clear();
                if let Entry::Output { output, .. } = other {
                    pending = output.tool_uses().map(|(id, _, _)| id.to_owned()).collect();
                }
            }
            Entry::Output { output, .. } => pending = output.tool_uses().map(|(id, _, _)| id.to_owned()).collect(),
            Entry::Message { .. } => {}
        }
    }
    faults
}

/// Where an inherited transcript must be cut so no tool call is left unpaired:
/// the index of the last model output if its calls lack results, else the length.
pub fn paired_len(entries: &[Entry]) -> usize {
    if unanswered_calls(entries).is_empty() {
        return entries.len();
    }
    entries.iter().rposition(|e| e.side() == Side::Assistant).unwrap_or(entries.len())
}

/// The text of the last model output, if the transcript ends in one.
pub fn final_text(entries: &[Entry]) -> Option<String> {
    match entries.last() {
        Some(Entry::Output { output, .. }) => Some(output.text()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infra::provider::{Stop, Usage};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn call(n: u32, ids: &[&str]) -> Entry {
        let content = ids
            .iter()
            .map(|id| Block::ToolUse {
                id: (*id).into(),
                name: "bash".into(),
                input: json!({"command": "true"}),
                arguments: None,
            })
            .collect();
        Entry::Output {
            number: n,
            model: "m".into(),
            output: Output { content, usage: Usage::default(), stop: Stop::ToolUse, response_model: None },
        }
    }

    fn result(n: u32, id: &str) -> Entry {
        Entry::ToolResult {
            number: n,
            block: Block::ToolResult {
                tool_use_id: id.into(),
                content: "ok".into(),
                is_error: false,
                images: Vec::new(),
            },
        }
    }

    fn user(n: u32) -> Entry {
        Entry::Message { number: n, sender: "user".into(), text: "hi".into() }
    }

    #[test]
    fn wire_faults_name_every_way_a_transcript_breaks_the_wire() {
        let good = [user(1), call(2, &["a", "b"]), result(3, "b"), result(4, "a"), user(5), call(6, &["c"])];
        assert_eq!(wire_faults(&good), Vec::<String>::new(), "a trailing call waits for its driver");
        let twice = [user(1), call(2, &["a"]), result(3, "a"), result(4, "a")];
        assert_eq!(wire_faults(&twice), ["entry 0004 answers call `a` a second time"]);
        let stray = [user(1), result(2, "z")];
        assert_eq!(wire_faults(&stray), ["entry 0002 answers call `z`, which no model output made"]);
        let between = [user(1), call(2, &["a"]), user(3), result(4, "a")];
        let faults = wire_faults(&between);
        assert_eq!(faults[0], "entry 0003 comes between a model output and the results of its calls (a)");
        let numbers = [user(1), user(1)];
        assert_eq!(wire_faults(&numbers), ["entry number 0001 is used twice"]);
    }

    #[test]
    fn names_decide_sides() {
        assert_eq!(parse_name("0001-user.md"), Ok((1, "user", Side::User)));
        assert_eq!(parse_name("0002-claude-sonnet-4-5.json"), Ok((2, "claude-sonnet-4-5", Side::Assistant)));
        assert_eq!(parse_name("10000-tool.json"), Ok((10000, "tool", Side::Tool)));
        assert!(parse_name("1-user.md").is_err());
        assert!(parse_name("0001.md").is_err());
        assert_eq!(entry_name(3, "tool", Side::Tool), "0003-tool.json");
        assert_eq!(model_origin("anthropic/claude:3"), "anthropic_claude_3");
        assert_eq!(model_origin("tool"), "model-tool");
    }

    #[test]
    fn unanswered_calls_and_cuts() {
        let t = vec![user(1), call(2, &["a", "b"]), result(3, "a")];
        assert_eq!(unanswered_calls(&t), vec![("b".to_owned(), "bash".to_owned())]);
        assert_eq!(paired_len(&t), 1);
        let done = vec![user(1), call(2, &["a"]), result(3, "a")];
        assert!(unanswered_calls(&done).is_empty());
        assert_eq!(paired_len(&done), 3);
        assert!(warrants_call(&done));
        assert!(!warrants_call(&done[..2]));
    }

    #[test]
    fn tool_and_user_sides_merge_into_one_user_message() {
        let t = vec![user(1), call(2, &["a"]), result(3, "a"), user(4)];
        let m = to_messages(&t);
        assert_eq!(m.len(), 3);
        assert_eq!(m[2].role, Role::User);
        assert_eq!(m[2].content.len(), 2);
    }
}
