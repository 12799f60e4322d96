//! `.offshoot/agent.toml`: the immutable facts of an agent, written at dispatch.

use serde::{Deserialize, Serialize};

use infra::git::{CommitId, Position};

/// Paths of the agent's own files inside its tree.
pub const DIR: &str = ".offshoot";
pub const FACTS: &str = ".offshoot/agent.toml";
pub const GOAL: &str = ".offshoot/goal.md";
pub const SOUL: &str = ".offshoot/soul.md";
pub const TOOLS: &str = ".offshoot/tools";
pub const MESSAGES: &str = ".offshoot/messages";
pub const SUMMARIES: &str = ".offshoot/summary";
pub const SKILLS: &str = ".offshoot/skills";
/// Where the agent's own git stood at this commit (branch and head).
pub const GIT: &str = ".offshoot/git";
/// The model the user chose for the agent (`--model`, the chat's `/model`), used in
/// place of its role's from then on: written in the commit that delivers the message
/// that chose it. Forks keep it; children and compactors never inherit it (their roles
/// choose). The agent cannot change it: `.offshoot/` is the harness's.
pub const MODEL: &str = ".offshoot/model";

/// The permission mode the user ran the agent in (`--mode`), in place of its role's:
/// one word, written in its first commit. Its children run in it or a stricter one.
pub const MODE: &str = ".offshoot/mode";

/// What its run does when a call needs a yes (`--on-ask`: `deny`, `fail`, `wait`), one
/// word written in its first commit; an agent without one follows its nearest
/// ancestor's, and `deny` when none has one.
pub const ON_ASK: &str = ".offshoot/on-ask";

/// What the user asked of the agent's thinking (`--thinking`, `--effort`), in place of its
/// role's, written like `MODEL` (one line: `thinking_budget N` or `reasoning_effort E`).
pub const REASONING: &str = ".offshoot/reasoning";

/// The one line `REASONING` holds, and a message's `reasoning:` header carries.
pub fn reasoning_text(reasoning: &infra::provider::Reasoning) -> String {
    use infra::provider::Reasoning;
    match reasoning {
        Reasoning::ThinkingBudget(budget) => format!("thinking_budget {budget}"),
        Reasoning::Effort(effort) => format!("reasoning_effort {effort}"),
    }
}

/// Reads [`reasoning_text`]'s line back; `None` if it is not one.
pub fn parse_reasoning(text: &str) -> Option<infra::provider::Reasoning> {
    use infra::provider::Reasoning;
    match text.trim().split_once(' ')? {
        ("thinking_budget", n) => n.parse().ok().map(Reasoning::ThinkingBudget),
        ("reasoning_effort", e) if !e.is_empty() && e.chars().all(|c| c.is_ascii_lowercase()) => {
            Some(Reasoning::Effort(e.to_owned()))
        }
        _ => None,
    }
}

/// Whether `model` can be a model's name: 1 to 200 characters of letters, digits and
/// `._:/@+-` (e.g. `claude-sonnet-4-5`, `gpt-4.1`, `qwen2.5:7b`, `meta-llama/Llama-3-70b`).
pub fn check_model(model: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._:/@+-".contains(c);
    if model.is_empty() || model.len() > 200 || !model.chars().all(allowed) {
        return Err(format!("`{}` is not a model name: 1 to 200 letters, digits and `._:/@+-`", model.escape_debug()));
    }
    Ok(())
}

/// `.offshoot/git`'s text for a position: `branch <name>` or `detached`, then
/// `head <oid>` unless the branch is unborn.
pub fn position_text(position: &Position) -> String {
    let mut text = match &position.branch {
        Some(branch) => format!("branch {branch}\n"),
        None => "detached\n".to_owned(),
    };
    if let Some(head) = position.head {
        text.push_str(&format!("head {head}\n"));
    }
    text
}

/// Reads `.offshoot/git`'s text; `None` if it is not one.
pub fn parse_position(text: &str) -> Option<Position> {
    let mut lines = text.lines();
    let branch = match lines.next()? {
        "detached" => None,
        line => Some(line.strip_prefix("branch ")?.to_owned()),
    };
    let head = match lines.next() {
        Some(line) => Some(CommitId::from_str(line.strip_prefix("head ")?).ok()?),
        None => None,
    };
    Some(Position { branch, head })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFacts {
    pub id: String,
    pub role: String,
    pub lineage: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub created: String,
    /// The commit a `fork` continued from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
    /// In project mode, the commit of the user's repository its tree started from (a
    /// root's; children and forks keep their origin's): what `diff`, `export` and
    /// `apply` measure the agent's change against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Ignored paths of the user's checkout copied into its directory whenever it is
    /// made (`prompt --copy-ignored`; its role's `copy_ignored` add to them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copy_ignored: Vec<String>,
}

/// What is wrong with `path` as a path of the user's checkout to copy into an agent's
/// directory (`copy_ignored`), if anything: a plain relative path — no globs, no `.`,
/// `..` or empty components, nothing `.gitignore` reads specially (the path is also the
/// rule that keeps the copy out of the agent's history), not `.git` or `.offshoot`.
pub fn copy_ignored_problem(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("is empty");
    }
    if path.starts_with('/') {
        return Some("must be relative to the project's root (no leading `/`)");
    }
    if path.contains(['*', '?', '[', ']', '\\']) || path.starts_with(['!', '#']) || path.trim_end() != path {
        return Some("must be a plain path: no `*`, `?`, `[`, `]` or `\\`, no leading `!` or `#`, no trailing space");
    }
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    if parts.iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
        return Some("must be plain path components (no `.`, `..` or `//`)");
    }
    if parts.iter().any(|p| *p == ".git" || *p == DIR) {
        return Some("may not name `.git` or `.offshoot`");
    }
    None
}

impl AgentFacts {
    /// The agent's branch in the shared project repository: its name (its id for an
    /// agent from before every agent had one). The only shared branch it publishes.
    pub fn project_branch(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.id.clone())
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    pub fn parse(text: &str) -> Result<AgentFacts, String> {
        toml::from_str(text).map_err(|e| e.message().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_read_back_as_written() {
        let head = CommitId::from_str("4b825dc642cb6eb9a060e54bf8d69288fbee4904").ok();
        for position in [
            Position { branch: Some("PeachHollow".into()), head },
            Position { branch: Some("orphan".into()), head: None },
            Position { branch: None, head },
        ] {
            assert_eq!(parse_position(&position_text(&position)), Some(position));
        }
        assert_eq!(
            position_text(&Position { branch: Some("A".into()), head }),
            "branch A\nhead 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n"
        );
        assert_eq!(parse_position("garbage"), None);
    }
}
