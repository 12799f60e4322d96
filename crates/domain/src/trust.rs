//! Hooks and rules a project carries (`.claude/settings.json`, `.offshoot/offshoot.toml`
//! in the user's checkout): a repository cannot grant itself anything, so they count only
//! once the user trusted that exact content (`offshoot config trust`). Pure: what such a
//! file says, and which files of the project its hooks run (their content is trusted
//! with it).

use serde::Deserialize;

use crate::hooks::{self, Hooks};
use crate::permissions::{self, Permissions};

/// The files of a project that may carry hooks and rules, relative to its checkout.
pub const FILES: [&str; 2] = [".claude/settings.json", ".offshoot/offshoot.toml"];

/// The variable a project's hooks find the checkout by (Claude Code's name).
pub const PROJECT_DIR_VARIABLE: &str = "CLAUDE_PROJECT_DIR";

/// What a project file says: its hooks and its rules (anything else in it is not ours).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Carried {
    #[serde(default)]
    pub hooks: Hooks,
    #[serde(default)]
    pub permissions: Permissions,
}

/// Claude Code's `permissions` carries more than rules (`defaultMode`,
/// `additionalDirectories`): only the rules are read.
#[derive(Deserialize)]
struct ClaudePermissions {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    ask: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
}

#[derive(Deserialize)]
struct Settings {
    #[serde(default)]
    hooks: Hooks,
    #[serde(default)]
    permissions: Option<ClaudePermissions>,
}

/// Reads project file `path` (one of [`FILES`]); what is wrong with it otherwise.
pub fn read(path: &str, bytes: &[u8]) -> Result<Carried, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| format!("{path} is not UTF-8"))?;
    let carried = if path.ends_with(".json") {
        let s: Settings = serde_json::from_str(text).map_err(|e| format!("{path} does not read: {e}"))?;
        let p = match s.permissions {
            None => Permissions::default(),
            Some(p) => {
                let read = |list: Vec<String>| list.iter().map(|r| claude_rule(path, r)).collect::<Result<Vec<_>, _>>();
                Permissions { allow: read(p.allow)?, ask: read(p.ask)?, deny: read(p.deny)? }
            }
        };
        Carried { hooks: s.hooks, permissions: p }
    } else {
        // (The TOML form: only `[hooks]` and `[permissions]` are read.)
        let table: toml::Table = toml::from_str(text).map_err(|e| format!("{path} does not read: {e}"))?;
        let part = |key: &str| table.get(key).cloned().unwrap_or(toml::Value::Table(Default::default()));
        Carried {
            hooks: part("hooks").try_into().map_err(|e| format!("{path}: `hooks` does not read: {e}"))?,
            permissions: part("permissions")
                .try_into()
                .map_err(|e| format!("{path}: `permissions` does not read: {e}"))?,
        }
    };
    if let Some((key, problem)) = hooks::check(&carried.hooks) {
        return Err(format!("{path}: `{key}`: {problem}"));
    }
    if let Some((key, problem)) = permissions::check(&carried.permissions) {
        return Err(format!("{path}: `permissions.{key}`: {problem}"));
    }
    Ok(carried)
}

/// A rule of Claude Code's settings as offshoot reads the same thing: a file pattern
/// without a `/` matches at any depth there (gitignore's way), so it is `**/…` here; one
/// starting with a single `/` is relative to the settings file there, which offshoot
/// cannot say, so it is refused rather than read as an absolute path.
fn claude_rule(path: &str, text: &str) -> Result<String, String> {
    let rule = permissions::parse(text).map_err(|e| format!("{path}: {e}"))?;
    let Some(pattern) = text.trim().strip_suffix(')').and_then(|t| t.split_once('(')).map(|(_, p)| p.trim()) else {
        return Ok(text.trim().to_owned());
    };
    if rule.tool == "bash" {
        return Ok(text.trim().to_owned());
    }
    let name = &text.trim()[..text.trim().len() - pattern.len() - 2];
    if pattern.starts_with('/') && !pattern.starts_with("//") {
        return Err(format!(
            "{path}: `{text}` starts its path with one `/`, which Claude Code reads from the settings file: write `//…` for an absolute path, or `./…` for one in the agent's directory"
        ));
    }
    if !pattern.contains('/') && !pattern.starts_with('~') {
        return Ok(format!("{name}(**/{pattern})"));
    }
    Ok(text.trim().to_owned())
}

/// The files inside the checkout at `root` that the hooks' commands name (by an absolute
/// path under it, or through `$CLAUDE_PROJECT_DIR`): trusting the hooks trusts them as
/// they are, so a script changed later needs trust again.
pub fn named_files(hooks: &Hooks, root: &str) -> Vec<String> {
    let mut named = Vec::new();
    for groups in hooks.values() {
        for group in groups {
            let commands = group.command.iter().chain(group.hooks.iter().map(|h| &h.command));
            for command in commands {
                for word in command.split_whitespace() {
                    // (Quotes are the shell's: `"$CLAUDE_PROJECT_DIR"/x.sh` names x.sh.)
                    let word = word.replace(['"', '\''], "");
                    let word = word
                        .replace(&format!("${{{PROJECT_DIR_VARIABLE}}}"), root)
                        .replace(&format!("${PROJECT_DIR_VARIABLE}"), root);
                    if let Some(inside) = word.strip_prefix(root).and_then(|r| r.strip_prefix('/'))
                        && !inside.split('/').any(|c| c == ".." || c.is_empty())
                        && !named.contains(&inside.to_owned())
                    {
                        named.push(inside.to_owned());
                    }
                }
            }
        }
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_code_settings_give_their_hooks_and_rules_and_name_their_scripts() {
        let json = br#"{
            "model": "whatever",
            "permissions": {"allow": ["Bash(npm test:*)"], "deny": ["Read(./.env)"], "defaultMode": "acceptEdits"},
            "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/guard.sh", "timeout": 5}
            ]}]}
        }"#;
        let carried = read(".claude/settings.json", json).expect("reads");
        assert_eq!(carried.permissions.deny, vec!["Read(./.env)".to_owned()]);
        let any_depth = read(".claude/settings.json", br#"{"permissions": {"deny": ["Read(.env)", "Bash(rm:*)"]}}"#);
        assert_eq!(
            any_depth.expect("reads").permissions.deny,
            vec!["Read(**/.env)".to_owned(), "Bash(rm:*)".to_owned()]
        );
        let rooted = read(".claude/settings.json", br#"{"permissions": {"deny": ["Read(/secrets/**)"]}}"#);
        assert!(rooted.expect_err("refused").contains("reads from the settings file"));
        assert_eq!(carried.hooks["PreToolUse"].len(), 1);
        assert_eq!(named_files(&carried.hooks, "/home/u/p"), vec![".claude/hooks/guard.sh".to_owned()]);
        let toml = b"[permissions]\ndeny = [\"Bash(git push:*)\"]\n[[hooks.Stop]]\ncommand = \"/bin/true\"\n[roles.x]\nmodel = \"m\"\n";
        let carried = read(".offshoot/offshoot.toml", toml).expect("reads");
        assert_eq!(carried.hooks["Stop"][0].command.as_deref(), Some("/bin/true"));
        let bad = read(".claude/settings.json", br#"{"hooks": {"Whenever": []}}"#).expect_err("refused");
        assert!(bad.contains("`Whenever` is no hook event"), "{bad}");
        assert!(read(".claude/settings.json", br#"{"permissions": {"deny": ["Shell(x)"]}}"#).is_err());
    }
}
