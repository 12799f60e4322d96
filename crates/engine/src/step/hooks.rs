//! Running the user's hooks (`[[hooks.<Event>]]`) as Claude Code runs its own: `sh -c`
//! with the event as JSON on stdin, in the agent's directory; exit 0 goes on (a JSON
//! answer on stdout may decide), exit 2 blocks and hands stderr to the model, anything
//! else — another exit code, a timeout, an answer that does not read — is a failure,
//! which refuses the call for `PreToolUse` unless the hook says `fail_closed = false`.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use domain::config::Config;
use domain::hooks;
use infra::process::{self, Ended, Exit, Group, Io, Limits, Spec};

/// What one hook said.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Ran {
    pub event: String,
    pub command: String,
    pub outcome: Outcome,
    /// Its words for the model (a block's reason, context it adds).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub said: String,
}

/// What a hook decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Outcome {
    /// No decision (exit 0, or a failure of a hook that does not fail closed).
    Pass,
    Allow,
    Block,
    Ask,
    /// A failure of a hook that fails closed.
    Failed,
}

impl Outcome {
    /// The outcome as its record says it.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Allow => "allow",
            Outcome::Block => "block",
            Outcome::Ask => "ask",
            Outcome::Failed => "failed",
        }
    }
}

/// What is sent with every event: who, where, and what.
pub(crate) struct Who<'a> {
    pub agent: &'a str,
    pub parent: Option<&'a str>,
    /// Its permission mode (sent as Claude Code's nearest: `plan`, `default`,
    /// `acceptEdits`, `bypassPermissions`).
    pub mode: domain::config::Mode,
    pub cwd: &'a Path,
    /// The agent's directory: its transcript is `.offshoot/messages` there.
    pub dir: &'a Path,
    /// Where hooks run: the workspace's root, which no agent writes.
    pub workspace: &'a Path,
    pub env: &'a [(String, String)],
    /// The jail hooks run in, if any: the agent's own, while it works in place (its
    /// work lands in the checkout a hook may run files of, so a hook runs no more
    /// than the agent could).
    pub jail: Option<&'a infra::sandbox::Jail>,
}

/// Runs the hooks of `config` at `event` (for a call of `tool` with `input`, when the
/// event has one), in order, stopping at the first that blocks.
pub(crate) fn run(
    config: &Config,
    event: &str,
    tool: Option<(&str, &Value, &str)>,
    extra: Value,
    who: &Who,
) -> Vec<Ran> {
    let planned = hooks::planned(&config.hooks, event, tool.map(|(name, _, _)| name));
    if planned.is_empty() {
        return Vec::new();
    }
    let mut payload = json!({
        "session_id": who.agent,
        "transcript_path": who.dir.join(domain::agent::MESSAGES).display().to_string(),
        "cwd": who.cwd.display().to_string(),
        "hook_event_name": event,
        "permission_mode": claude_mode(who.mode),
        "offshoot_mode": who.mode.word(),
        "agent_id": who.agent,
        "parent_id": who.parent,
        "branch": format!("agents/{}", who.agent),
    });
    if let Some((name, input, id)) = tool {
        payload["tool_name"] = hooks::claude_name(name).into();
        payload["tool_input"] = claude_input(input, who.cwd);
        payload["tool_use_id"] = id.into();
    }
    if let (Value::Object(p), Value::Object(more)) = (&mut payload, extra) {
        p.extend(more);
    }
    let stdin = payload.to_string();
    let mut said = Vec::new();
    for hook in planned {
        let ran = one(event, &hook, stdin.as_bytes(), who);
        // (Every hook runs until one blocks: a deny after an ask still wins.)
        let stop = ran.outcome == Outcome::Block;
        said.push(ran);
        if stop {
            break;
        }
    }
    said
}

/// Claude Code's permission mode nearest to `mode`.
fn claude_mode(mode: domain::config::Mode) -> &'static str {
    use domain::config::Mode;
    match mode {
        Mode::ReadOnly => "plan",
        Mode::Ask => "default",
        Mode::WorkspaceWrite => "acceptEdits",
        Mode::Full => "bypassPermissions",
    }
}

/// A tool's input as Claude Code's guards read it: its path also as an absolute
/// `file_path` — always the one the tool reads, whatever `file_path` the model sent.
fn claude_input(input: &Value, cwd: &Path) -> Value {
    let mut input = input.clone();
    if let Value::Object(fields) = &mut input {
        fields.remove("file_path");
        if let Some(path) = fields.get("path").and_then(Value::as_str).map(str::to_owned) {
            fields.insert("file_path".into(), cwd.join(path).display().to_string().into());
        }
    }
    input
}

fn one(event: &str, hook: &hooks::Planned, stdin: &[u8], who: &Who) -> Ran {
    let args = [OsStr::new("-c"), OsStr::new(&hook.command)];
    let spec = Spec {
        program: Path::new("/bin/sh"),
        args: &args,
        // Not in the agent's directory: a relative path the command names must never
        // find a file the model wrote (the payload's `cwd` says where the agent is) —
        // unless it runs in the agent's jail, where it can do no more than the agent.
        cwd: if who.jail.is_some() { who.dir } else { who.workspace },
        env: who.env,
        group: Group::Own,
        stdin: Some(stdin),
        sandbox: who.jail.map(infra::sandbox::Jail::helper),
        pgid_record: None,
    };
    let limits = Limits {
        head: 64 * 1024,
        tail: 4 * 1024,
        record_max: 0,
        timeout: Some(Duration::from_secs(hook.timeout_secs)),
        idle: None,
    };
    let ran = |outcome, said: String| Ran { event: event.to_owned(), command: hook.command.clone(), outcome, said };
    let failed = |why: String| match hook.fail_closed {
        true => ran(Outcome::Failed, why),
        false => ran(Outcome::Pass, why),
    };
    let finished = match process::run(&spec, &limits, Io::default()) {
        Ok(f) => f,
        Err(e) => return failed(format!("it could not start: {e}")),
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_owned();
    let (stdout, stderr) = (text(&finished.stdout.head), text(&finished.stderr.head));
    if finished.ended == Ended::TimedOut {
        return failed(format!("it ran past its timeout of {} s", hook.timeout_secs));
    }
    match finished.exit {
        Exit::Code(2) => ran(Outcome::Block, if stderr.is_empty() { "blocked by a hook".to_owned() } else { stderr }),
        // (Plain words on stdout are Claude Code's transcript notes: no answer. What
        // looks like JSON and does not read is a broken answer.)
        // (For `UserPromptSubmit` they are context for the model, as in Claude Code.)
        Exit::Code(0) if !stdout.starts_with('{') => {
            ran(Outcome::Pass, if event == "UserPromptSubmit" { stdout } else { String::new() })
        }
        Exit::Code(0) => match serde_json::from_str::<Value>(&stdout) {
            Ok(answer) => answered(&answer, ran).unwrap_or_else(&failed),
            Err(_) => failed(format!("its answer is not JSON: {}", first_line(&stdout))),
        },
        exit => failed(format!(
            "it ended ({exit}){}",
            if stderr.is_empty() { String::new() } else { format!(": {}", first_line(&stderr)) }
        )),
    }
}

/// A hook's JSON answer: Claude Code's `hookSpecificOutput.permissionDecision`, its
/// older `decision`, `continue: false`, and context it adds.
/// An answer offshoot cannot carry out (a rewritten input, a decision it does not know)
/// is a failure: a guard is never taken to say more than it did.
fn answered(answer: &Value, ran: impl Fn(Outcome, String) -> Ran) -> Result<Ran, String> {
    let specific = &answer["hookSpecificOutput"];
    let words = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    if answer["continue"] == false {
        return Ok(ran(Outcome::Block, words(&answer["stopReason"])));
    }
    if !specific["updatedInput"].is_null() {
        return Err("it asks to change the call's input, which offshoot does not do".to_owned());
    }
    // (`PermissionRequest` answers in `decision.behavior`.)
    let decision = specific["permissionDecision"]
        .as_str()
        .or(specific["decision"]["behavior"].as_str())
        .or(answer["decision"].as_str());
    Ok(match decision {
        Some("deny" | "block") => {
            let mut reason = words(&specific["permissionDecisionReason"]);
            if reason.is_empty() {
                reason = words(&specific["decision"]["message"]);
            }
            ran(Outcome::Block, if reason.is_empty() { words(&answer["reason"]) } else { reason })
        }
        Some("ask") => ran(Outcome::Ask, words(&specific["permissionDecisionReason"])),
        Some("allow" | "approve") => ran(Outcome::Allow, String::new()),
        Some(other) => return Err(format!("its decision `{other}` is none offshoot knows")),
        None => ran(Outcome::Pass, words(&specific["additionalContext"])),
    })
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().chars().take(200).collect()
}
