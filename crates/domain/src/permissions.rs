//! Permission rules: `allow`, `ask` and `deny` patterns on a tool and its input, in
//! Claude Code's syntax so users can bring theirs (`bash(cargo test:*)`,
//! `write_file(src/**)`, `Read(./.env)`). Deny beats ask beats allow; a call no rule
//! names is left to its role's sandbox. Pure: the engine asks before a call runs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::glob;
use super::grant;

/// `[permissions]`, and a role's `permissions`: rules by what they decide.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Permissions {
    /// Calls that run without a question (in a mode that would ask).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Calls that need a yes first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ask: Vec<String>,
    /// Calls that never run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

/// What a rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Ask,
    Deny,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        }
    }
}

/// Claude Code's tool names, and ours they stand for.
const ALIASES: [(&str, &str); 6] = [
    ("Bash", "bash"),
    ("Read", "read_file"),
    ("Write", "write_file"),
    ("Edit", "edit_file"),
    ("Grep", "grep"),
    ("Glob", "glob"),
];

/// One rule, parsed: the tool (by our name) and what its input must match.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub tool: String,
    pattern: Option<String>,
    /// The rule as written.
    pub text: String,
}

/// A rule that decided a call: what it decided, the rule, and where it is written
/// (`permissions.deny`, `roles.worker.permissions.ask`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub verdict: Verdict,
    pub rule: String,
    pub key: String,
}

/// Parses `text` (`Tool`, or `Tool(pattern)`); what is wrong with it otherwise.
pub fn parse(text: &str) -> Result<Rule, String> {
    let trimmed = text.trim();
    let (name, pattern) = match trimmed.split_once('(') {
        None => (trimmed, None),
        Some((name, rest)) => {
            let pattern =
                rest.strip_suffix(')').ok_or_else(|| format!("`{text}` opens a `(` it does not close at its end"))?;
            if pattern.trim().is_empty() {
                return Err(format!("`{text}` has an empty pattern: write `{name}` for every call of it"));
            }
            (name, Some(pattern.trim().to_owned()))
        }
    };
    let tool = ALIASES.iter().find(|(alias, _)| *alias == name).map_or(name, |(_, ours)| ours);
    let known = grant::tool(tool).is_some() || (tool.starts_with("mcp__") && tool.len() > "mcp__".len());
    if !known {
        let ours: Vec<&str> = grant::TOOLS.iter().map(|t| t.name).collect();
        return Err(format!(
            "`{text}` names no tool offshoot has (tools: {}, and mcp__<server>__<tool>)",
            ours.join(", ")
        ));
    }
    if pattern.is_some() && tool.starts_with("mcp__") {
        return Err(format!("`{text}`: an MCP tool's rule names the tool alone"));
    }
    Ok(Rule { tool: tool.to_owned(), pattern, text: trimmed.to_owned() })
}

/// The first rule of `permissions` that breaks, as (its key, what is wrong).
pub fn check(permissions: &Permissions) -> Option<(&'static str, String)> {
    lists(permissions).into_iter().find_map(|(key, _, list)| list.iter().find_map(|r| parse(r).err()).map(|e| (key, e)))
}

fn lists(p: &Permissions) -> [(&'static str, Verdict, &Vec<String>); 3] {
    [("deny", Verdict::Deny, &p.deny), ("ask", Verdict::Ask, &p.ask), ("allow", Verdict::Allow, &p.allow)]
}

/// What the rules of `sets` (each with the key it is written under) decide for a call
/// of `tool` with `input`: the strongest verdict of a rule that names the call, if any.
pub fn decide(sets: &[(&str, &Permissions)], tool: &str, input: &Value) -> Option<Decision> {
    let mut found: Option<Decision> = None;
    for (place, permissions) in sets {
        for (key, verdict, list) in lists(permissions) {
            for text in list {
                let Ok(rule) = parse(text) else { continue };
                if rule.tool != tool || !names(&rule, input, verdict) {
                    continue;
                }
                if found.as_ref().is_none_or(|f| verdict > f.verdict) {
                    found = Some(Decision { verdict, rule: rule.text.clone(), key: format!("{place}{key}") });
                }
            }
        }
    }
    found
}

/// Whether `rule` names a call with `input`. A command is split at its separators
/// (`;`, `&&`, `||`, `|`, `&`, line breaks, `$(`, backquotes): a deny or ask names it
/// when any part matches, an allow only when every part does, so `x && git push` is no
/// way around `deny: bash(git push:*)`, nor is `allow: bash(ls:*)` one for `ls; rm`.
fn names(rule: &Rule, input: &Value, verdict: Verdict) -> bool {
    let Some(pattern) = &rule.pattern else { return true };
    let text = |field: &str| input.get(field).and_then(Value::as_str).unwrap_or_default().to_owned();
    let targets: Vec<String> = match rule.tool.as_str() {
        "bash" => command_parts(&text("command")),
        "apply_patch" => patch_paths(&text("patch")),
        "grep" | "glob" if text("path").is_empty() => vec![".".to_owned()],
        _ => vec![text("path")],
    };
    if targets.is_empty() {
        return false;
    }
    let one = |target: &String| match rule.tool.as_str() {
        "bash" => command_matches(pattern, target),
        _ => path_matches(pattern, target),
    };
    match verdict {
        Verdict::Allow => targets.iter().all(one),
        Verdict::Ask | Verdict::Deny => targets.iter().any(one),
    }
}

/// A command line's simple commands, trimmed.
fn command_parts(command: &str) -> Vec<String> {
    let mut parts = vec![command.to_owned()];
    for separator in ["&&", "||", ";", "|", "&", "\n", "$(", "`", "(", ")"] {
        parts = parts.iter().flat_map(|p| p.split(separator).map(str::to_owned).collect::<Vec<_>>()).collect();
    }
    parts.into_iter().map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect()
}

/// `prefix:*` names a command that begins with `prefix` (as a word); otherwise `*`
/// stands for anything and the rest must be the command itself.
fn command_matches(pattern: &str, command: &str) -> bool {
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let command = words(command);
    match pattern.strip_suffix(":*") {
        Some(prefix) => {
            let prefix = words(prefix);
            command == prefix || command.starts_with(&format!("{prefix} "))
        }
        None => wildcard(words(pattern).as_bytes(), command.as_bytes()),
    }
}

fn wildcard(pattern: &[u8], s: &[u8]) -> bool {
    match pattern.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|skip| wildcard(rest, &s[skip..])),
        Some((c, rest)) => s.first() == Some(c) && wildcard(rest, &s[1..]),
    }
}

/// A path pattern against a path the model gave, both relative to the agent's
/// directory (`./` left off); `**` crosses directories, `*` stays within one.
fn path_matches(pattern: &str, path: &str) -> bool {
    let plain = |p: &str| {
        let p = p.trim().trim_start_matches("./");
        if p.is_empty() { ".".to_owned() } else { p.to_owned() }
    };
    glob::matches(&plain(pattern), &plain(path))
}

/// The paths an `apply_patch` patch touches.
fn patch_paths(patch: &str) -> Vec<String> {
    const HEADS: [&str; 4] = ["*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "];
    patch.lines().filter_map(|l| HEADS.iter().find_map(|h| l.strip_prefix(h))).map(|p| p.trim().to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(allow: &[&str], ask: &[&str], deny: &[&str]) -> Permissions {
        let own = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect();
        Permissions { allow: own(allow), ask: own(ask), deny: own(deny) }
    }

    fn verdict(p: &Permissions, tool: &str, input: Value) -> Option<Verdict> {
        decide(&[("permissions.", p)], tool, &input).map(|d| d.verdict)
    }

    #[test]
    fn claude_codes_syntax_and_names_are_read() {
        let rule = parse("Bash(npm run test:*)").expect("a rule");
        assert_eq!(rule.tool, "bash");
        assert_eq!(parse("Read(./.env)").expect("a rule").tool, "read_file");
        assert_eq!(parse("write_file").expect("a rule").tool, "write_file");
        assert!(parse("mcp__github__create_issue").is_ok());
        for (bad, says) in [
            ("Bash(ls", "does not close"),
            ("bash()", "empty pattern"),
            ("Shell(ls)", "names no tool"),
            ("mcp__x__y(a)", "names the tool alone"),
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn deny_beats_ask_beats_allow_and_a_chain_is_no_way_around_a_deny() {
        let p = rules(&["bash(git:*)"], &["bash(git push:*)"], &["bash(git push --force:*)"]);
        assert_eq!(verdict(&p, "bash", json!({"command": "git status"})), Some(Verdict::Allow));
        assert_eq!(verdict(&p, "bash", json!({"command": "git push origin main"})), Some(Verdict::Ask));
        assert_eq!(verdict(&p, "bash", json!({"command": "git  push --force"})), Some(Verdict::Deny));
        let deny = rules(&[], &[], &["bash(git push:*)"]);
        for chained in ["cd x && git push", "true; git push", "echo $(git push)", "ls | git push -q", "a\ngit push"] {
            assert_eq!(verdict(&deny, "bash", json!({"command": chained})), Some(Verdict::Deny), "{chained}");
        }
        assert_eq!(verdict(&deny, "bash", json!({"command": "git pushy"})), None, "a word, not a prefix");
        let allow = rules(&["bash(ls:*)"], &[], &[]);
        assert_eq!(verdict(&allow, "bash", json!({"command": "ls -la; rm -rf x"})), None, "every part must be allowed");
    }

    #[test]
    fn paths_match_as_globs_relative_to_the_agents_directory() {
        let p = rules(&["write_file(src/**)"], &[], &["Read(./.env)", "Edit(**/*.lock)"]);
        assert_eq!(verdict(&p, "write_file", json!({"path": "src/a/b.rs"})), Some(Verdict::Allow));
        assert_eq!(verdict(&p, "write_file", json!({"path": "README.md"})), None);
        assert_eq!(verdict(&p, "read_file", json!({"path": ".env"})), Some(Verdict::Deny));
        assert_eq!(verdict(&p, "read_file", json!({"path": "./.env"})), Some(Verdict::Deny));
        assert_eq!(verdict(&p, "edit_file", json!({"path": "crates/x/Cargo.lock"})), Some(Verdict::Deny));
        let patch = "*** Begin Patch\n*** Add File: src/new.rs\n+x\n*** Update File: .env\n@@\n-a\n+b\n*** End Patch";
        let guard = rules(&[], &[], &["apply_patch(.env)"]);
        assert_eq!(verdict(&guard, "apply_patch", json!({"patch": patch})), Some(Verdict::Deny));
    }
}
