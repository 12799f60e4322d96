//! Plays recorded model outputs: the output for a request is the recording's entry
//! at the number of assistant messages the request already holds. Honest about
//! being a recording: nothing is generated.

use super::transport::{AttemptRecord, CallError, Observer};
use super::{Block, Delta, Output, Request, Role, sse};

/// Parses a recording (one canonical output per line, blank lines ignored).
pub fn parse(recording: &str) -> Result<Vec<Output>, String> {
    recording
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

pub fn call(outputs: &[Output], req: &Request, observer: &mut dyn Observer) -> Result<Output, CallError> {
    let index = req.messages.iter().filter(|m| m.role == Role::Assistant).count();
    observer.attempt_started(1);
    let Some(output) = outputs.get(index) else {
        return Err(CallError::Other(format!(
            "the recording holds {} outputs and this request needs output {}",
            outputs.len(),
            index + 1
        )));
    };
    let line = serde_json::to_string(output).map_err(|e| CallError::Other(e.to_string()))?;
    observer.raw(1, &sse::Event { event: "replay".into(), data: line });
    for block in &output.content {
        match block {
            Block::Text { text } => observer.delta(&Delta::Text(text.clone())),
            Block::ToolUse { name, .. } => observer.delta(&Delta::ToolCall { name: name.clone() }),
            _ => {}
        }
    }
    observer.attempt_ended(&AttemptRecord { attempt: 1, status: None, error: None, retry_after_ms: None, millis: 0 });
    Ok(output.clone())
}
