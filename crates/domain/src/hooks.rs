//! Hooks: the user's programs run at events of an agent's life, in Claude Code's wire
//! format (the same JSON on stdin, the same exit codes and JSON answers), so a guard
//! written for Claude Code — or for Codex or goose, which speak it too — runs
//! unchanged. The config's `[[hooks.<Event>]]` is the TOML form of Claude Code's
//! settings: a `matcher` (a regex on the tool's name) and a `command` with a `timeout`,
//! or Claude Code's nested `hooks = [{ type = "command", command = …, timeout = … }]`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The events hooks run at.
pub const EVENTS: [&str; 12] = [
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PreCompact",
    "PostCompact",
    "SubagentStart",
    "SubagentStop",
    "Stop",
    "Notification",
    "SessionEnd",
];

/// The sender of a message a hook left for an agent (a `Stop` hook's reason to go on):
/// the harness's own words, never an agent to answer.
pub const SENDER: &str = "hook";

/// How long a hook may run unless its config says (Claude Code's default).
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;

/// `[hooks]`: each event's groups, in order.
pub type Hooks = BTreeMap<String, Vec<HookGroup>>;

/// One `[[hooks.<Event>]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookGroup {
    /// A regex on the tool's name (ours or Claude Code's: `Bash`, `Edit|Write`);
    /// empty or `*`: every tool. Events without a tool ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    /// The command (run with `sh -c`), in the short form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Seconds it may run (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Claude Code's form: the commands of this matcher.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookCommand>,
    /// For `PreToolUse` and `PermissionRequest`: a hook that fails (another exit
    /// code than 0 or 2, a timeout, an answer that does not read) refuses the call
    /// (`true`, the default) or is passed over (`false`).
    #[serde(default = "yes")]
    pub fail_closed: bool,
}

fn yes() -> bool {
    true
}

/// One command of Claude Code's nested form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookCommand {
    /// Always `command`.
    #[serde(rename = "type", default = "command_type")]
    pub kind: String,
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

fn command_type() -> String {
    "command".to_owned()
}

/// A command to run for an event: what it is and how long it may take.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub command: String,
    pub timeout_secs: u64,
    pub fail_closed: bool,
}

/// The name Claude Code gives our tool `name` (what its guards match and read).
pub fn claude_name(name: &str) -> &str {
    match name {
        "bash" => "Bash",
        "read_file" => "Read",
        "write_file" => "Write",
        "edit_file" => "Edit",
        "grep" => "Grep",
        "glob" => "Glob",
        other => other,
    }
}

/// The commands `hooks` runs at `event` for a call of `tool` (none for an event
/// without a tool), in order.
pub fn planned(hooks: &Hooks, event: &str, tool: Option<&str>) -> Vec<Planned> {
    let Some(groups) = hooks.get(event) else { return Vec::new() };
    let mut out = Vec::new();
    for group in groups {
        if let Some(tool) = tool
            && !matches(group.matcher.as_deref(), tool)
        {
            continue;
        }
        let own = group.command.iter().map(|c| (c.clone(), group.timeout));
        let nested = group.hooks.iter().map(|h| (h.command.clone(), h.timeout.or(group.timeout)));
        for (command, timeout) in own.chain(nested) {
            let timeout_secs = timeout.unwrap_or(DEFAULT_TIMEOUT_SECS);
            out.push(Planned { command, timeout_secs, fail_closed: group.fail_closed });
        }
    }
    out
}

/// Whether `matcher` names `tool` (by our name or Claude Code's), as a whole-name regex.
fn matches(matcher: Option<&str>, tool: &str) -> bool {
    let Some(matcher) = matcher.map(str::trim).filter(|m| !m.is_empty() && *m != "*") else { return true };
    let Ok(re) = regex::Regex::new(&format!("^(?:{matcher})$")) else { return false };
    re.is_match(tool) || re.is_match(claude_name(tool))
}

/// The first thing wrong with `hooks`, as (its key, the rule).
pub fn check(hooks: &Hooks) -> Option<(String, String)> {
    for (event, groups) in hooks {
        if !EVENTS.contains(&event.as_str()) {
            return Some((
                format!("hooks.{event}"),
                format!("`{event}` is no hook event (events: {})", EVENTS.join(", ")),
            ));
        }
        for group in groups {
            let key = format!("hooks.{event}");
            if let Some(m) = &group.matcher
                && let Err(e) = regex::Regex::new(&format!("^(?:{m})$"))
            {
                return Some((
                    key,
                    format!("matcher `{m}` is not a regex: {}", e.to_string().lines().last().unwrap_or("")),
                ));
            }
            if group.command.is_none() && group.hooks.is_empty() {
                return Some((key, "a hook needs a `command`".to_owned()));
            }
            let commands = group.command.iter().chain(group.hooks.iter().map(|h| &h.command));
            if commands.clone().any(|c| c.trim().is_empty()) {
                return Some((key, "a hook's `command` is empty".to_owned()));
            }
            if let Some(h) = group.hooks.iter().find(|h| h.kind != "command") {
                return Some((key, format!("hook type `{}` is not supported; use `command`", h.kind)));
            }
            let timeouts = group.timeout.into_iter().chain(group.hooks.iter().filter_map(|h| h.timeout));
            if timeouts.into_iter().any(|t| t == 0) {
                return Some((key, "a hook's `timeout` must be at least 1 second".to_owned()));
            }
        }
    }
    None
}

/// The program a hook's command starts (its first word), to look for before the
/// config is committed.
pub fn program(command: &str) -> Option<&str> {
    command.split_whitespace().next()
}

/// The commands of `event`'s hooks, in order.
pub fn commands_of<'a>(hooks: &'a Hooks, event: &str) -> Vec<&'a str> {
    let groups = hooks.get(event).map(Vec::as_slice).unwrap_or_default();
    groups
        .iter()
        .flat_map(|g| g.command.iter().map(String::as_str).chain(g.hooks.iter().map(|h| h.command.as_str())))
        .collect()
}

/// Every command of `hooks`.
pub fn commands(hooks: &Hooks) -> impl Iterator<Item = &str> {
    hooks
        .values()
        .flatten()
        .flat_map(|g| g.command.iter().map(String::as_str).chain(g.hooks.iter().map(|h| h.command.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(matcher: Option<&str>, command: &str) -> HookGroup {
        HookGroup {
            matcher: matcher.map(str::to_owned),
            command: Some(command.to_owned()),
            timeout: None,
            hooks: Vec::new(),
            fail_closed: true,
        }
    }

    #[test]
    fn matchers_are_whole_name_regexes_on_ours_and_claude_codes_names() {
        let hooks: Hooks = [("PreToolUse".to_owned(), vec![group(Some("Bash"), "a"), group(Some("Edit|Write"), "b")])]
            .into_iter()
            .collect();
        let run =
            |tool: &str| planned(&hooks, "PreToolUse", Some(tool)).into_iter().map(|p| p.command).collect::<Vec<_>>();
        assert_eq!(run("bash"), ["a"]);
        assert_eq!(run("write_file"), ["b"]);
        assert_eq!(run("read_file"), Vec::<String>::new());
        assert!(planned(&hooks, "PostToolUse", Some("bash")).is_empty());
    }

    #[test]
    fn what_does_not_read_is_named() {
        let bad = |event: &str, g: HookGroup| check(&[(event.to_owned(), vec![g])].into_iter().collect());
        assert!(bad("PreToolUse", group(Some("Bash"), "x")).is_none());
        assert!(bad("BeforeTool", group(None, "x")).expect("event").1.contains("is no hook event"));
        assert!(bad("PreToolUse", group(Some("(Bash"), "x")).expect("regex").1.contains("is not a regex"));
        assert!(bad("PreToolUse", group(None, " ")).expect("empty").1.contains("empty"));
    }
}
