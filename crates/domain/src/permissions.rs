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
    let tool = tool.strip_suffix("__*").unwrap_or(tool);
    if !known {
        let ours: Vec<&str> = grant::TOOLS.iter().map(|t| t.name).collect();
        return Err(format!(
            "`{text}` names no tool offshoot has (tools: {}, and mcp__<server>__<tool>)",
            ours.join(", ")
        ));
    }
    if pattern.is_some() && tool.starts_with("mcp__") {
        return Err(format!(
            "`{text}`: an MCP tool's rule names the tool alone (`mcp__<server>` names all of a server's)"
        ));
    }
    if pattern.is_some() && !PATTERNED.contains(&tool) {
        return Err(format!(
            "`{text}`: a rule on `{tool}` names the tool alone (patterns are for bash and the file tools)"
        ));
    }
    Ok(Rule { tool: tool.to_owned(), pattern, text: trimmed.to_owned() })
}

/// The first rule of `permissions` that breaks, as (its key, what is wrong).
pub fn check(permissions: &Permissions) -> Option<(&'static str, String)> {
    lists(permissions).into_iter().find_map(|(key, _, list)| list.iter().find_map(|r| parse(r).err()).map(|e| (key, e)))
}

/// The first deny or ask rule of `parent` that `child` lacks (held as a deny, or in
/// the same list): a child's role never holds more than its parent's.
pub fn lacking<'a>(parent: &'a Permissions, child: &Permissions) -> Option<&'a str> {
    let (deny, ask) = (&child.deny, &child.ask);
    let denied = parent.deny.iter().find(|r| !deny.contains(r));
    denied.or_else(|| parent.ask.iter().find(|r| !ask.contains(r) && !deny.contains(r))).map(String::as_str)
}

fn lists(p: &Permissions) -> [(&'static str, Verdict, &Vec<String>); 3] {
    [("deny", Verdict::Deny, &p.deny), ("ask", Verdict::Ask, &p.ask), ("allow", Verdict::Allow, &p.allow)]
}

/// The tools whose rules may carry a pattern.
const PATTERNED: [&str; 7] = ["bash", "read_file", "write_file", "edit_file", "apply_patch", "grep", "glob"];

/// The tools a rule on `tool` covers, as Claude Code's `Read` and `Edit` rules cover
/// every tool that reads or edits files.
fn family(tool: &str) -> &[&str] {
    match tool {
        "read_file" => &["read_file", "grep", "glob"],
        "edit_file" => &["edit_file", "write_file", "apply_patch"],
        _ => &[],
    }
}

/// Whether a rule on `rule_tool` covers a call of `tool`: the tool itself, its family,
/// and for `mcp__<server>` every tool of that server.
fn covers(rule_tool: &str, tool: &str) -> bool {
    if rule_tool == tool || family(rule_tool).contains(&tool) {
        return true;
    }
    let server = rule_tool.strip_prefix("mcp__").filter(|rest| !rest.contains("__"));
    server.is_some_and(|server| {
        tool.strip_prefix("mcp__").and_then(|t| t.strip_prefix(server)).is_some_and(|t| t.starts_with("__"))
    })
}

/// Where a call's paths are read from: the agent's directory, where the call runs, and
/// the user's home (for `~/` patterns), all absolute.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub root: &'a str,
    pub cwd: &'a str,
    pub home: Option<&'a str>,
}

/// What the rules of `sets` (each with the key it is written under) decide for a call
/// of `tool` with `input` made at `place`: the strongest verdict of a rule that names
/// the call, if any. A deny that does not read (never so in a validated config) denies.
pub fn decide(sets: &[(&str, &Permissions)], tool: &str, input: &Value, place: &Place) -> Option<Decision> {
    let mut found: Option<Decision> = None;
    for (at, permissions) in sets {
        for (key, verdict, list) in lists(permissions) {
            for text in list {
                let named = match parse(text) {
                    Ok(rule) => covers(&rule.tool, tool) && names(&rule, tool, input, verdict, place),
                    Err(_) => verdict == Verdict::Deny,
                };
                if named && found.as_ref().is_none_or(|f| verdict > f.verdict) {
                    found = Some(Decision { verdict, rule: text.trim().to_owned(), key: format!("{at}{key}") });
                }
            }
        }
    }
    found
}

/// Whether `rule` names a call of `tool` with `input`. A command is split at its
/// separators (`;`, `&&`, `||`, `|`, `&`, line breaks, `$(`, backquotes, braces) and each
/// part read as the command it runs (quotes, assignments, `env`/`exec`/`timeout`-like
/// wrappers and a program's directory left out): a deny or ask names it when any part
/// matches, an allow only when every part does, so `x && FOO=1 /usr/bin/git "push"` is no
/// way around `deny: bash(git push:*)`, nor is `allow: bash(ls:*)` one for `ls; rm`. A
/// path is read as the tool reads it — from where the call runs, `..` resolved — and
/// compared relative to the agent's directory, or whole for an absolute or `~/` pattern.
fn names(rule: &Rule, tool: &str, input: &Value, verdict: Verdict, place: &Place) -> bool {
    let Some(pattern) = &rule.pattern else { return true };
    let text = |field: &str| input.get(field).and_then(Value::as_str).unwrap_or_default().to_owned();
    let targets: Vec<String> = match tool {
        // (An allow names a command only as it is written: a disguise — an assignment,
        // a wrapper, a program's path — is not what the allow said.)
        "bash" if verdict == Verdict::Allow => written_parts(&text("command")),
        "bash" => command_parts(&text("command")),
        "apply_patch" => patch_paths(&text("patch")),
        "grep" | "glob" if text("path").is_empty() => vec![".".to_owned()],
        _ => vec![text("path")],
    };
    if targets.is_empty() {
        return false;
    }
    let one = |target: &String| match tool {
        "bash" => command_matches(pattern, target),
        _ => path_matches(pattern, target, place),
    };
    match verdict {
        Verdict::Allow => targets.iter().all(one),
        Verdict::Ask | Verdict::Deny => targets.iter().any(one),
    }
}

/// Whether the rules read `command` exactly as it is written: one simple command, its
/// program named without a path, nothing (quotes, assignments, wrappers, keywords) left
/// out — so a rule naming it names nothing else.
pub fn plain_command(command: &str) -> bool {
    let words = command.split_whitespace().collect::<Vec<_>>().join(" ");
    let parts = command_parts(command);
    parts.len() == 1 && parts[0] == words && !words.split(' ').next().is_some_and(|p| p.contains('/'))
}

/// A command line's simple commands, each as the command it runs.
fn command_parts(command: &str) -> Vec<String> {
    split_parts(command).iter().map(|p| run_by(p)).filter(|p| !p.is_empty()).collect()
}

/// A command line's simple commands as written (blanks made single spaces), but those
/// that are only keywords (`then`, `fi`, `done`).
fn written_parts(command: &str) -> Vec<String> {
    let words = |p: &String| p.split_whitespace().collect::<Vec<_>>().join(" ");
    split_parts(command).iter().filter(|p| !run_by(p).is_empty()).map(words).collect()
}

/// A command line cut at its separators.
fn split_parts(command: &str) -> Vec<String> {
    let mut parts = vec![command.replace("\\\n", "")];
    for separator in ["&&", "||", ";", "|", "&", "\n", "$(", "`", "(", ")", "{", "}"] {
        parts = parts.iter().flat_map(|p| p.split(separator).map(str::to_owned).collect::<Vec<_>>()).collect();
    }
    parts
}

/// The command a simple command runs: its words without quotes or escapes, leading
/// keywords, variable assignments and wrappers (with their options) left out, the
/// program by its name.
fn run_by(part: &str) -> String {
    const KEYWORDS: [&str; 16] = [
        "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "case", "esac", "!", "time", "in",
        "coproc",
    ];
    const WRAPPERS: [&str; 9] = ["env", "command", "exec", "nice", "nohup", "timeout", "stdbuf", "builtin", "sudo"];
    let plain: String = part.chars().filter(|c| !matches!(c, '"' | '\'' | '\\')).collect();
    let mut words: Vec<&str> = plain.split_whitespace().collect();
    let mut wrapped = false;
    while let Some(first) = words.first() {
        let assignment = first.split_once('=').is_some_and(|(name, _)| !name.is_empty() && !name.contains('/'));
        let option = wrapped
            && (first.starts_with('-')
                || first.chars().all(|c| c.is_ascii_digit() || c == '.' || c == 's' || c == 'm'));
        if KEYWORDS.contains(first) || assignment || option {
            words.remove(0);
        } else if WRAPPERS.contains(first) {
            wrapped = true;
            words.remove(0);
        } else {
            break;
        }
    }
    if let Some(program) = words.first_mut() {
        *program = program.rsplit('/').next().unwrap_or(program);
    }
    words.join(" ")
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

/// A path pattern against a path the model gave, the path read as the tool reads it.
/// `//x` and `/x` are absolute, `~/x` in the user's home; anything else is relative to
/// the agent's directory (`./` left off) and names only paths inside it.
fn path_matches(pattern: &str, path: &str, place: &Place) -> bool {
    let absolute = |p: &str| -> Option<String> {
        let p = p.trim();
        if let Some(rest) = p.strip_prefix("~/") {
            return place.home.map(|home| format!("{home}/{rest}"));
        }
        Some(if p.starts_with('/') { p.to_owned() } else { format!("{}/{p}", place.cwd) })
    };
    let Some(full) = absolute(path).map(|p| lexical(&p)) else { return false };
    let pattern = pattern.trim();
    if pattern.starts_with('/') || pattern.starts_with("~/") {
        let written = if pattern.starts_with("~/") {
            pattern.to_owned()
        } else {
            format!("/{}", pattern.trim_start_matches('/'))
        };
        return absolute(&written).is_some_and(|pattern| glob::matches(&pattern, &full));
    }
    let root = lexical(place.root);
    let inside =
        if full == root { Some(".".to_owned()) } else { full.strip_prefix(&format!("{root}/")).map(str::to_owned) };
    let Some(relative) = inside else { return false };
    let pattern = pattern.trim_start_matches("./");
    glob::matches(if pattern.is_empty() { "." } else { pattern }, &relative)
}

/// `path` with `.` and `..` resolved by their names (as the tool resolves them; a link
/// on the way is the sandbox's to contain).
fn lexical(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
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

    const PLACE: Place = Place { root: "/ws/agents/a", cwd: "/ws/agents/a", home: Some("/home/u") };

    fn verdict(p: &Permissions, tool: &str, input: Value) -> Option<Verdict> {
        decide(&[("permissions.", p)], tool, &input, &PLACE).map(|d| d.verdict)
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
            ("dispatch(reviewer)", "names the tool alone"),
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
        for disguised in [
            "{ git push; }",
            "if true; then git push; fi",
            "! git push",
            "FOO=1 git push",
            "env -i git push",
            "timeout 5 git push",
            "/usr/bin/git push",
            "git \"push\"",
            "\\git push",
            "git \\\npush",
        ] {
            assert_eq!(verdict(&deny, "bash", json!({"command": disguised})), Some(Verdict::Deny), "{disguised}");
        }
        let allow = rules(&["bash(ls:*)"], &[], &[]);
        assert_eq!(verdict(&allow, "bash", json!({"command": "ls -la; rm -rf x"})), None, "every part must be allowed");
        // An allow names a command as written: a disguise is not what it said.
        let exact = rules(&["bash(make test)"], &[], &[]);
        assert_eq!(verdict(&exact, "bash", json!({"command": "make  test"})), Some(Verdict::Allow));
        for disguised in ["LD_PRELOAD=./x.so make test", "env PATH=. make test", "./make test", "/tmp/x/make test"] {
            assert_eq!(verdict(&exact, "bash", json!({"command": disguised})), None, "{disguised}");
        }
        let broken = Permissions { deny: vec!["Bash(".into()], ..Permissions::default() };
        assert_eq!(
            verdict(&broken, "read_file", json!({"path": "a"})),
            Some(Verdict::Deny),
            "a deny that does not read"
        );
    }

    #[test]
    fn a_path_is_read_as_the_tool_reads_it_and_rules_cover_their_family() {
        let p =
            rules(&[], &[], &["Read(./.env)", "Read(secrets/**)", "Read(~/.ssh/**)", "Edit(//etc/**)", "mcp__github"]);
        for (tool, input) in [
            ("read_file", json!({"path": "sub/../.env"})),
            ("read_file", json!({"path": "/ws/agents/a/.env"})),
            ("read_file", json!({"path": "/home/u/.ssh/id_ed25519"})),
            ("read_file", json!({"path": "~/.ssh/id_ed25519"})),
            ("grep", json!({"pattern": ".", "path": "secrets"})),
            ("glob", json!({"pattern": "*", "path": "secrets/deep"})),
            ("write_file", json!({"path": "/etc/passwd"})),
            ("mcp__github__create_issue", json!({})),
        ] {
            assert_eq!(verdict(&p, tool, input.clone()), Some(Verdict::Deny), "{tool} {input}");
        }
        assert_eq!(verdict(&p, "read_file", json!({"path": "src/.env.example"})), None);
        assert_eq!(verdict(&p, "mcp__gitlab__x", json!({})), None);
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
