//! Results: when an agent's final response is owed to someone, and to whom.
//!
//! A final response replies to the *last prompter* — the sender of the newest
//! delivered message that is neither the agent itself nor a return from its own
//! child — nobody if that is the user (the answer is in the agent's own transcript),
//! the parent if no prompt survives. And a prompt is answered once: a final response
//! replies only if the window since the agent's previous terminal response holds
//! something that asks — a message from someone else, or a return from its own
//! child. A reply from a foreign agent asks nothing; neither does a note the agent
//! sent itself. An agent that has never answered always owes.

use super::inbox::Header;
use super::transcript::Entry;

/// Where a final response goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Nothing asked since the last answer, or the asker is the user.
    Nobody,
    /// Deposit the answer with this agent.
    To(String),
}

/// Whether `sender` is a direct child of `me` (`me.N`).
pub fn is_child(me: &str, sender: &str) -> bool {
    sender.strip_prefix(me).and_then(|rest| rest.strip_prefix('.')).is_some_and(|n| !n.contains('.'))
}

/// What the agent `me` (with `parent`, if a child) owes for the final response that
/// ends `entries`.
pub fn reply(entries: &[Entry], me: &str, parent: Option<&str>) -> Reply {
    let Some((last, before)) = entries.split_last() else { return Reply::Nobody };
    if !is_terminal(last) {
        return Reply::Nobody;
    }
    let previous = before.iter().rposition(is_terminal);
    let window = &before[previous.map_or(0, |p| p + 1)..];
    let asks = previous.is_none() || window.iter().any(|e| message_asks(e, me));
    if !asks {
        return Reply::Nobody;
    }
    let prompter = before.iter().rev().find_map(|e| match e {
        // (A hook's message sent it back to work: the one to answer is who asked before.)
        Entry::Message { sender, text, .. }
            if sender != me && sender != crate::hooks::SENDER && !(is_child(me, sender) && is_result(text)) =>
        {
            Some(sender.as_str())
        }
        _ => None,
    });
    match (prompter, parent) {
        (Some("user"), _) => Reply::Nobody,
        (Some(sender), _) => Reply::To(sender.to_owned()),
        (None, Some(parent)) => Reply::To(parent.to_owned()),
        (None, None) => Reply::Nobody,
    }
}

/// A model output with no tool calls: the end of a turn.
fn is_terminal(entry: &Entry) -> bool {
    matches!(entry, Entry::Output { output, .. } if output.tool_uses().next().is_none())
}

/// Whether a delivered message asks for an answer.
fn message_asks(entry: &Entry, me: &str) -> bool {
    let Entry::Message { sender, text, .. } = entry else { return false };
    if sender == me {
        return false;
    }
    if is_result(text) {
        return is_child(me, sender);
    }
    true
}

fn is_result(text: &str) -> bool {
    Header::parse(text).is_some_and(|h| h.epitaph.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use infra::provider::{Block, Output, Stop, Usage};
    use pretty_assertions::assert_eq;

    fn message(n: u32, from: &str, epitaph: Option<&str>) -> Entry {
        let mut text = format!("---\nfrom: {from}\nat: 2026-11-30T00:00:00Z\n");
        if let Some(e) = epitaph {
            text.push_str(&format!("epitaph: {e}\nterminal: abc\n"));
        }
        text.push_str("---\nbody");
        Entry::Message { number: n, sender: from.into(), text }
    }

    fn answer(n: u32) -> Entry {
        let output = Output {
            content: vec![Block::text("done")],
            usage: Usage::default(),
            stop: Stop::EndTurn,
            response_model: None,
        };
        Entry::Output { number: n, model: "m".into(), output }
    }

    #[test]
    fn a_child_answers_its_parent_and_a_root_answers_no_one() {
        let child = [message(1, "p", None), answer(2)];
        assert_eq!(reply(&child, "p.1", Some("p")), Reply::To("p".into()));
        let root = [message(1, "user", None), answer(2)];
        assert_eq!(reply(&root, "r", None), Reply::Nobody);
    }

    #[test]
    fn a_prompt_is_answered_once() {
        // A child told its parent; the parent answered: that answer asks nothing more.
        let child = [message(1, "p", None), answer(2), message(3, "p", Some("final-response")), answer(4)];
        assert_eq!(reply(&child, "p.1", Some("p")), Reply::Nobody);
        // A note to itself asks nothing.
        let noted = [message(1, "user", None), answer(2), message(3, "r", None), answer(4)];
        assert_eq!(reply(&noted, "r", None), Reply::Nobody);
        // A new message from someone else asks again, and is answered.
        let asked = [message(1, "p", None), answer(2), message(3, "x", None), answer(4)];
        assert_eq!(reply(&asked, "p.1", Some("p")), Reply::To("x".into()));
    }

    #[test]
    fn a_return_from_a_child_asks_but_is_not_the_prompter() {
        // The parent was prompted by the user, dispatched, got its child's result.
        let parent = [message(1, "user", None), answer(2), message(3, "p.1", Some("final-response")), answer(4)];
        assert_eq!(reply(&parent, "p", None), Reply::Nobody);
        // Prompted by another agent: the answer goes there, after the child's return.
        let asked = [message(1, "q", None), answer(2), message(3, "p.1", Some("final-response")), answer(4)];
        assert_eq!(reply(&asked, "p", None), Reply::To("q".into()));
        assert!(is_child("p", "p.1") && !is_child("p", "p.1.2") && !is_child("p", "pq.1"));
    }
}
