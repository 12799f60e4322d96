//! What offshoot's records and transcript entries are as ACP session updates: one
//! mapping, shared by a live turn (events files) and `session/load` (the transcript).

use std::path::PathBuf;

use agent_client_protocol::v1::schema::{
    CompactionStatus, CompactionUpdate, ContentBlock, ContentChunk, Diff, SessionUpdate, TextContent, ToolCall,
    ToolCallContent, ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use serde_json::Value;

use domain::transcript::Entry;
use engine::step::events::Record;
use infra::provider::Block;

/// What the agent says, thinks and calls in `record`, as its session shows it;
/// `streamed` is the text streamed since its last whole text (which says only the rest).
pub(super) fn of_record(record: &Record, streamed: &mut String) -> Option<SessionUpdate> {
    match record {
        Record::TextDelta { text } => {
            streamed.push_str(text);
            Some(said(text))
        }
        Record::ThinkingDelta { text } => Some(thought(text)),
        Record::Text { text } => {
            let rest = text.strip_prefix(streamed.as_str()).unwrap_or(text).to_owned();
            streamed.clear();
            (!rest.is_empty()).then(|| said(&rest))
        }
        Record::ToolCall { tool_use_id, name, input } => Some(call(tool_use_id, name, input)),
        Record::ToolResult { tool_use_id, is_error, summary, output, .. } => {
            Some(result(tool_use_id, *is_error, if output.is_empty() { summary } else { output }))
        }
        _ => None,
    }
}

/// A chunk of text the agent says.
pub(super) fn said(text: &str) -> SessionUpdate {
    SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(text))))
}

/// A chunk of the model's thinking (what a provider returned of it).
pub(super) fn thought(text: &str) -> SessionUpdate {
    SessionUpdate::AgentThoughtChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(text))))
}

/// A chunk of text the user said.
pub(super) fn heard(text: &str) -> SessionUpdate {
    SessionUpdate::UserMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(text))))
}

/// A call the model made, as the editor shows it: its kind, a title, the paths it
/// names and, for a file edit, the change as a diff.
pub(super) fn call(id: &str, name: &str, input: &Value) -> SessionUpdate {
    let title = format!("{name}: {}", crate::cli::out::call_gist(input));
    let mut call = ToolCall::new(id.to_owned(), title)
        .kind(kind(name))
        .status(ToolCallStatus::InProgress)
        .raw_input(input.clone());
    if let Some(path) = input.get("path").and_then(Value::as_str) {
        call = call.locations(vec![ToolCallLocation::new(PathBuf::from(path))]);
        if let Some(diff) = diff(name, path, input) {
            call = call.content(vec![ToolCallContent::Diff(diff)]);
        }
    }
    SessionUpdate::ToolCall(call)
}

/// A call's end: completed or failed, with what it gave back.
pub(super) fn result(id: &str, failed: bool, output: &str) -> SessionUpdate {
    let status = if failed { ToolCallStatus::Failed } else { ToolCallStatus::Completed };
    let text = ToolCallContent::from(ContentBlock::Text(TextContent::new(output)));
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        id.to_owned(),
        ToolCallUpdateFields::new().status(status).content(vec![text]),
    ))
}

/// The kind of offshoot's tools (a server's tools are `other`).
fn kind(name: &str) -> ToolKind {
    match name {
        "read_file" => ToolKind::Read,
        "write_file" | "edit_file" | "apply_patch" => ToolKind::Edit,
        "bash" => ToolKind::Execute,
        "grep" | "glob" => ToolKind::Search,
        "cd" => ToolKind::Move,
        _ => ToolKind::Other,
    }
}

/// A file tool's change as a diff: a new file's whole text, an edit's old and new text.
fn diff(name: &str, path: &str, input: &Value) -> Option<Diff> {
    let text = |key: &str| input.get(key).and_then(Value::as_str).map(str::to_owned);
    match name {
        "write_file" => Some(Diff::new(PathBuf::from(path), text("content")?)),
        "edit_file" => Some(Diff::new(PathBuf::from(path), text("new_string")?).old_text(text("old_string"))),
        _ => None,
    }
}

/// A compaction of `agent` as the editor shows it (to a client that said it takes them):
/// its compactor is its id; it is in progress once started, completed with the summary
/// it landed, failed with why when it landed nothing.
pub(super) fn compaction(
    ws: &engine::store::workspace::Workspace,
    agent: &str,
    outcome: &str,
    compactor: &str,
    note: &str,
) -> Option<SessionUpdate> {
    let update = match outcome {
        "started" => CompactionUpdate::new(compactor.to_owned(), CompactionStatus::InProgress),
        "landed" => {
            let id = domain::id::AgentId::parse(agent).ok()?;
            let landed = engine::step::compaction::landed(ws, &id).ok()?;
            let summary = landed.into_iter().rev().find(|l| l.landing.compactor == compactor)?.summary;
            CompactionUpdate::new(compactor.to_owned(), CompactionStatus::Completed)
                .summary(vec![ContentBlock::Text(TextContent::new(summary))])
        }
        // (A compaction that never started has no compactor to name it.)
        "declined" if !compactor.is_empty() => {
            CompactionUpdate::new(compactor.to_owned(), CompactionStatus::Failed).error(note.to_owned())
        }
        _ => return None,
    };
    Some(SessionUpdate::CompactionUpdate(update))
}

/// An agent's transcript as the updates a client replays it from: what the user (and
/// other senders) said, what the agent said, its calls and their results.
pub(super) fn replay(entries: &[Entry]) -> Vec<SessionUpdate> {
    let mut out = Vec::new();
    for entry in entries {
        match entry {
            Entry::Message { sender, text, .. } => match sender.as_str() {
                "user" => out.push(heard(text)),
                _ => out.push(heard(&format!("[message from {sender}]\n{text}"))),
            },
            Entry::Output { output, .. } => {
                for block in &output.content {
                    match block {
                        Block::Text { text, .. } if !text.is_empty() => out.push(said(text)),
                        Block::Thinking { thinking, .. } if !thinking.is_empty() => out.push(thought(thinking)),
                        Block::ToolUse { id, name, input, .. } => out.push(call(id, name, input)),
                        _ => {}
                    }
                }
            }
            Entry::ToolResult { block: Block::ToolResult { tool_use_id, content, is_error, .. }, .. } => {
                out.push(result(tool_use_id, *is_error, content));
            }
            Entry::ToolResult { .. } => {}
        }
    }
    out
}
