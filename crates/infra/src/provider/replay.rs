//! Plays recorded model outputs. The output for a request is the one after the last
//! recorded output the request's history holds (by its first tool call's id, or its
//! text), so a history shortened by a compaction goes on where it was; with none yet,
//! the entry at the number of assistant messages since the agent's goal was given to it
//! (its system prompt's `<goal>`, delivered as a message: a compactor's inherited
//! history comes before its goal and is not counted). Honest about being a recording:
//! nothing is generated.

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

/// Which recorded output answers `req` (see the module's description).
fn next_index(outputs: &[Output], req: &Request) -> usize {
    let said: Vec<&Block> =
        req.messages.iter().filter(|m| m.role == Role::Assistant).flat_map(|m| m.content.iter()).collect();
    let held = |o: &Output| match o.content.iter().find_map(|b| match b {
        Block::ToolUse { id, .. } => Some(id),
        _ => None,
    }) {
        Some(id) => said.iter().any(|b| matches!(b, Block::ToolUse { id: seen, .. } if seen == id)),
        None => o.content.iter().any(|b| said.contains(&b)),
    };
    match outputs.iter().rposition(held) {
        Some(i) => i + 1,
        None => outputs_since_goal(req),
    }
}

/// The assistant messages after the first message that gives the goal of the
/// request's system prompt (a delivered message ends with its body), all of them when
/// none does.
fn outputs_since_goal(req: &Request) -> usize {
    let goal = req.system.split_once("<goal>\n").and_then(|(_, rest)| rest.split_once("\n</goal>")).map(|(g, _)| g);
    let gives_goal = |m: &super::Message| {
        m.role == Role::User
            && m.content.iter().any(
                |b| matches!(b, Block::Text { text, .. } if goal.is_some_and(|g| text.trim_end().ends_with(g.trim_end()))),
            )
    };
    let from = req.messages.iter().position(gives_goal).unwrap_or(0);
    req.messages[from..].iter().filter(|m| m.role == Role::Assistant).count()
}

pub fn call(outputs: &[Output], req: &Request, observer: &mut dyn Observer) -> Result<Output, CallError> {
    let index = next_index(outputs, req);
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
            Block::Text { text, .. } => observer.delta(&Delta::Text(text.clone())),
            Block::ToolUse { name, .. } => observer.delta(&Delta::ToolCall { name: name.clone() }),
            _ => {}
        }
    }
    observer.attempt_ended(&AttemptRecord { attempt: 1, status: None, error: None, retry_after_ms: None, millis: 0 });
    Ok(output.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Message, Output};

    fn user(text: &str) -> Message {
        Message { role: Role::User, content: vec![Block::text(text)] }
    }

    fn assistant() -> Message {
        Message { role: Role::Assistant, content: vec![Block::text("ok")] }
    }

    fn request(goal: &str, messages: Vec<Message>) -> Request {
        Request {
            model: "m".into(),
            max_output_tokens: 10,
            system: format!("<goal>\n{goal}\n</goal>\n\nsoul"),
            tools: vec![],
            messages,
            reasoning: None,
        }
    }

    #[test]
    fn a_history_shortened_by_a_compaction_goes_on_after_the_last_output_it_holds() {
        let call = |id: &str| Output {
            content: vec![Block::ToolUse {
                id: id.into(),
                name: "bash".into(),
                input: serde_json::json!({}),
                arguments: None,
            }],
            usage: Default::default(),
            stop: crate::provider::Stop::ToolUse,
            response_model: None,
        };
        let outputs = [call("a"), call("b"), call("c"), call("d")];
        let with = |ids: &[&str]| {
            let mut messages = vec![user("from: user\n---\nDo it.")];
            for id in ids {
                messages.push(Message { role: Role::Assistant, content: call(id).content });
                messages.push(user("result"));
            }
            request("Do it.", messages)
        };
        assert_eq!(next_index(&outputs, &with(&[])), 0);
        assert_eq!(next_index(&outputs, &with(&["a", "b"])), 2);
        // `a` and `b` were compacted away; `c` is still there.
        assert_eq!(next_index(&outputs, &with(&["c"])), 3);
    }

    #[test]
    fn outputs_are_counted_from_where_the_goal_was_given() {
        // An agent's own conversation: everything counts.
        let own = request("Do it.", vec![user("from: user\n---\nDo it."), assistant(), user("more"), assistant()]);
        assert_eq!(outputs_since_goal(&own), 2);
        // A compactor: the inherited history before its goal does not.
        let inherited = vec![user("from: user\n---\nDo it."), assistant(), assistant(), user("from: p\n---\nCompact.")];
        assert_eq!(outputs_since_goal(&request("Compact.", inherited.clone())), 0);
        let mut later = inherited;
        later.push(assistant());
        assert_eq!(outputs_since_goal(&request("Compact.", later)), 1);
    }
}
