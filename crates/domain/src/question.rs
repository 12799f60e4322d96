//! Questions for a person: a call a rule, a mode or a hook wants a yes for, or one the
//! model asks to run beyond its sandbox, and how each is answered. Pure: the engine
//! keeps them in the workspace's queue (`queue/`), out of every agent's reach.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a run does when a call needs a yes (`--on-ask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnAsk {
    /// Refuse the call at once, saying no one is here to answer (a headless run's default).
    Deny,
    /// End the run with an error naming the question.
    Fail,
    /// Wait for an answer from the queue (`offshoot approve`, the chat).
    Wait,
}

impl OnAsk {
    pub const ALL: [OnAsk; 3] = [OnAsk::Deny, OnAsk::Fail, OnAsk::Wait];

    pub fn word(self) -> &'static str {
        match self {
            OnAsk::Deny => "deny",
            OnAsk::Fail => "fail",
            OnAsk::Wait => "wait",
        }
    }

    pub fn parse(text: &str) -> Option<OnAsk> {
        OnAsk::ALL.into_iter().find(|o| o.word() == text.trim())
    }
}

/// How an agent's run asks: its mode, what it does when a call needs a yes, and the
/// top of its tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub mode: crate::config::Mode,
    pub on_ask: OnAsk,
    pub root: String,
}

/// The harness files of how a new root asks: its mode and its run's `--on-ask`, one word
/// each, those given.
pub fn run_files(mode: Option<crate::config::Mode>, on_ask: Option<OnAsk>) -> Vec<(&'static str, Vec<u8>)> {
    let words = [(crate::agent::MODE, mode.map(|m| m.word())), (crate::agent::ON_ASK, on_ask.map(|o| o.word()))];
    words.into_iter().filter_map(|(path, word)| Some((path, format!("{}\n", word?).into_bytes()))).collect()
}

/// What a call beyond the sandbox needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Escalation {
    /// The network, for this command.
    Network,
    /// No sandbox at all, for this command.
    Unsandboxed,
}

impl Escalation {
    pub const ALL: [Escalation; 2] = [Escalation::Network, Escalation::Unsandboxed];

    pub fn word(self) -> &'static str {
        match self {
            Escalation::Network => "network",
            Escalation::Unsandboxed => "unsandboxed",
        }
    }

    pub fn parse(text: &str) -> Option<Escalation> {
        Escalation::ALL.into_iter().find(|e| e.word() == text)
    }
}

/// One question: what would run, and why it needs a yes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    pub tool: String,
    pub input: Value,
    /// Why it asks, in words: the rule (`bash(git push:*)` in `permissions.ask`), the
    /// mode, the hook, or the model's stated reason for an escalation.
    pub why: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<Escalation>,
    /// The rule an `--always` yes would write (`bash(cargo build)`), if one can say it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// An ask rule asked it: an allow rule would not answer it (asks beat allows).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_rule: bool,
    /// The top of the asker's tree: askers of one call are one question only within
    /// one tree (the same words run elsewhere are another call).
    #[serde(default)]
    pub tree: String,
}

impl Question {
    /// What makes two questions the same one (ten children asking for the same thing
    /// wait on one): the tree, the tool, its input and the escalation, not who asks or
    /// why.
    pub fn sameness(&self) -> String {
        let input = serde_json::to_string(&self.input).unwrap_or_default();
        let escalation = self.escalation.map_or("", Escalation::word);
        format!("{}\n{}\n{input}\n{escalation}", self.tree, self.tool)
    }

    /// A short stable name for [`Question::sameness`], for file names.
    pub fn stem(&self) -> String {
        format!("{:08x}", crate::id::fnv1a(self.sameness().as_bytes()) as u32)
    }
}

/// Who waits on a question: an agent's call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiter {
    pub agent: String,
    /// Its branch (display name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The top of its tree (the agent a person started): what `--for-tree` covers.
    pub root: String,
    /// The call's key (see `toolcall::key`): a call run again after a crash finds its
    /// place among the waiters.
    pub call: String,
    pub at: String,
}

impl Waiter {
    /// The waiter's file name: one per call.
    pub fn file(&self) -> String {
        format!("{:016x}", crate::id::fnv1a(format!("{}\n{}", self.agent, self.call).as_bytes()))
    }
}

/// How far a yes reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// The calls that wait on it now.
    Once,
    /// Those, and the same call from any agent of their trees from now on.
    ForTree,
    /// Those, and a rule in the config (the user's lineage) from now on.
    Always,
}

/// An answer to a question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub yes: bool,
    pub scope: Scope,
    /// Who answered: `user`, or an agent whose rules answered for its subtree.
    pub by: String,
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Answer {
    /// What the model is told of a no.
    pub fn refusal(&self, question: &str) -> String {
        let reason = self.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
        format!("{} said no to this call (question {question}){reason}; nothing ran", self.by)
    }
}

/// The rule an `--always` yes would write for a call of `tool` with `input`: the exact
/// command, or the exact path, as an allow rule; `None` when no rule can say exactly
/// that (a glob or a prefix mark in it would name more), or for a tool a rule names
/// alone. The caller checks that the rule allows the call itself.
pub fn rule_for(tool: &str, input: &Value) -> Option<String> {
    let plain = |s: &&str| !s.contains([')', '\n', '*', '?', '[', ']', '{', '}']) && !s.ends_with(":");
    let text = |k: &str| input.get(k).and_then(Value::as_str).filter(plain);
    let rule = match tool {
        "bash" => format!("bash({})", text("command").filter(|c| crate::permissions::plain_command(c))?),
        "write_file" | "edit_file" | "read_file" => format!("{tool}({})", text("path")?),
        "apply_patch" | "grep" | "glob" => return None,
        _ => tool.to_owned(),
    };
    crate::permissions::parse(&rule).ok().map(|r| r.text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ten_askers_of_one_call_ask_one_question_and_a_rule_says_it_exactly() {
        let ask = |why: &str| Question {
            tool: "bash".into(),
            input: json!({"command": "cargo fetch"}),
            why: why.into(),
            escalation: Some(Escalation::Network),
            rule: None,
            by_rule: false,
            tree: "t1".into(),
        };
        assert_eq!(ask("one").stem(), ask("another reason").stem());
        assert_ne!(Question { tree: "t2".into(), ..ask("one") }.sameness(), ask("one").sameness());
        assert_eq!(rule_for("bash", &json!({"command": "rm -f build/*.o"})), None);
        for wider in [
            "FOO=1 make test",
            "env make test",
            "./make test",
            "/usr/bin/make",
            "make && cargo test",
            "git commit -m \"x\"",
        ] {
            assert_eq!(rule_for("bash", &json!({"command": wider})), None, "{wider}");
        }
        assert_eq!(rule_for("bash", &json!({"command": "make test"})).as_deref(), Some("bash(make test)"));
        assert_eq!(rule_for("write_file", &json!({"path": "**"})), None);
        let local = Question { escalation: None, ..ask("one") };
        assert_ne!(local.stem(), ask("one").stem());
        assert_eq!(
            rule_for("bash", &json!({"command": "git push origin main"})).as_deref(),
            Some("bash(git push origin main)")
        );
        assert_eq!(rule_for("bash", &json!({"command": "echo (x)"})), None);
        assert_eq!(rule_for("write_file", &json!({"path": "src/a.rs"})).as_deref(), Some("write_file(src/a.rs)"));
        assert_eq!(OnAsk::parse("wait"), Some(OnAsk::Wait));
        assert_eq!(OnAsk::parse("maybe"), None);
    }
}
