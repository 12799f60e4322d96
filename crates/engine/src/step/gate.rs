//! The gate before a tool call runs: the permission rules and the mode, the user's
//! `PreToolUse` hooks, what the model asks beyond its sandbox (`escalate`), and, for
//! a call that needs a yes, the answer (see `approval`).

use serde_json::{Value, json};

use domain::config::Mode;
use domain::question::{self, Question};
use domain::{grant, permissions};

use crate::step::call::{Call, ToolCallError};
use crate::step::events::Policy;
use crate::step::tools::ToolContext;
use crate::step::{approval, hooks};

/// What came of the gate.
pub(crate) struct Passed {
    /// What the model is told instead of running the call.
    pub(crate) refusal: Option<String>,
    /// What the hooks said.
    pub(crate) heard: Vec<hooks::Ran>,
    /// What a yes lent the call beyond its sandbox.
    pub(crate) lent: Option<question::Escalation>,
    /// Who said yes, when one was needed.
    pub(crate) yes_from: Option<String>,
    /// All of that in short, for traces.
    pub(crate) policy: Policy,
}

/// Takes `call` through the gate; `could_run` says whether a tool would run it at all
/// (hooks are for those), `write_record` keeps what was decided in the call's record.
pub(crate) fn pass(
    call: &Call,
    cx: &ToolContext,
    could_run: bool,
    hooks: &Hooks,
    write_record: &dyn Fn(&str, &Value) -> Result<(), ToolCallError>,
) -> Result<Passed, ToolCallError> {
    let Call { name, input, .. } = *call;
    // The permission rules and the mode first: a call they refuse never runs (and says
    // which rule).
    let decision = decided(cx, name, input);
    if let Some(decision) = &decision {
        write_record("decision.json", &serde_json::to_value(decision).unwrap_or(Value::Null))?;
    }
    let mut refusal = decision.as_ref().and_then(refusal);
    let mut asking = decision.as_ref().filter(|d| d.verdict == permissions::Verdict::Ask).map(|d| Question {
        why: format!("the rule `{}` ({})", d.rule, d.key),
        by_rule: d.key.contains("permissions."),
        ..ask_about(cx, name, input)
    });
    // Then the user's hooks (`PreToolUse`), for a call that could run at all: one that
    // blocks or fails refuses it; one that asks asks; one that allows answers a rule's
    // question.
    let mut heard = Vec::new();
    let escalation = match escalation(cx, name, input) {
        Ok(e) => e,
        Err(e) => {
            refusal = refusal.or(Some(e));
            None
        }
    };
    if refusal.is_none() && could_run {
        heard = hooks.run("PreToolUse", json!({}));
        refusal = heard.iter().find_map(hook_refusal);
        if let Some(ask) = heard.iter().find(|r| r.outcome == hooks::Outcome::Ask) {
            let why = format!(
                "the hook `{}`{}",
                ask.command,
                if ask.said.is_empty() { String::new() } else { format!(" ({})", ask.said) }
            );
            asking = Some(Question { why, ..ask_about(cx, name, input) });
        } else if heard.iter().any(|r| r.outcome == hooks::Outcome::Allow) {
            asking = None;
        }
    }
    if let Some((wanted, reason)) = escalation.filter(|_| refusal.is_none()) {
        let why = format!(
            "it asks to run with {} ({reason})",
            if wanted == question::Escalation::Network { "the network" } else { "no sandbox" }
        );
        let why = match &asking {
            Some(q) => format!("{}, and {why}", q.why),
            None => why,
        };
        asking = Some(Question { why, escalation: Some(wanted), rule: None, ..ask_about(cx, name, input) });
    }
    let (mut lent, mut yes_from) = (None, None);
    let mut policy = Policy {
        rule: decision.map(|d| (d.verdict.word(), d.rule, d.key)),
        hooks: heard
            .iter()
            .filter(|r| r.outcome != hooks::Outcome::Pass)
            .map(|r| (r.outcome.word(), r.command.clone()))
            .collect(),
        ..Policy::default()
    };
    // (A call no tool would run is refused as such, never put to a person.)
    if let Some(question) = asking.filter(|_| refusal.is_none() && could_run) {
        let permission_hooks = || hooks.run("PermissionRequest", json!({}));
        let notify = |message: &str| {
            let extra = json!({"message": message, "notification_type": "permission_prompt"});
            hooks.run_about("Notification", extra, false)
        };
        let mut failed = None;
        let mut note = |file: &str, value: Value| {
            if let Err(e) = write_record(file, &value) {
                failed = Some(e);
            }
        };
        match approval::settle(cx, &question, &permission_hooks, &notify, &mut note) {
            approval::Settled::Yes(by) => (lent, yes_from) = (question.escalation, Some(by)),
            approval::Settled::No(said) => refusal = Some(said),
            approval::Settled::Fail(said) => {
                return Err(ToolCallError::Fatal { name: name.to_owned(), message: said });
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        policy.asked = Some(yes_from.clone());
    }
    // (A call no tool would run never ran, whatever the rules said of it.)
    policy.refused = refusal.is_some() || !could_run;
    Ok(Passed { refusal, heard, lent, yes_from, policy })
}

/// The user's hooks for one call: who it is, where, and with what environment.
pub(crate) struct Hooks<'a> {
    cx: &'a ToolContext<'a>,
    call: &'a Call<'a>,
    env: Vec<(String, String)>,
}

impl<'a> Hooks<'a> {
    pub(crate) fn new(cx: &'a ToolContext<'a>, call: &'a Call<'a>) -> Hooks<'a> {
        Hooks { cx, call, env: hooks_env(cx) }
    }

    /// Runs the hooks of `event` for the call (none without an agent and its config).
    pub(crate) fn run(&self, event: &str, extra: Value) -> Vec<hooks::Ran> {
        self.run_about(event, extra, true)
    }

    /// [`Hooks::run`], with the call's tool in the payload (and matched) or not.
    fn run_about(&self, event: &str, extra: Value, tool: bool) -> Vec<hooks::Ran> {
        let Some(a) = self.cx.agent else { return Vec::new() };
        let Some(config) = a.config else { return Vec::new() };
        let who = hooks::Who {
            agent: &a.facts.id,
            parent: a.facts.parent.as_deref(),
            mode: a.policy.map_or(Mode::WorkspaceWrite, |p| p.mode),
            cwd: &self.cx.env.cwd,
            dir: &self.cx.env.root,
            workspace: a.runtime.layout().root(),
            env: &self.env,
            jail: a.hooks_jail,
        };
        let Call { id, name, input } = *self.call;
        hooks::run(config, event, tool.then_some((name, input, id)), extra, &who)
    }
}

/// What the model is told when a rule refuses a call: which rule, and where it is
/// written (an `ask` is asked, not refused).
fn refusal(decision: &permissions::Decision) -> Option<String> {
    let permissions::Decision { verdict, rule, key } = decision;
    match verdict {
        permissions::Verdict::Deny => Some(format!("refused by the rule `{rule}` ({key}); nothing ran")),
        permissions::Verdict::Allow | permissions::Verdict::Ask => None,
    }
}

/// A question about a call of `name` with `input` in `cx`'s tree, its reason yet to
/// say; with the rule an `--always` would write only when that rule allows exactly
/// this call.
fn ask_about(cx: &ToolContext, name: &str, input: &Value) -> Question {
    let rule = question::rule_for(name, input).filter(|rule| {
        let only = permissions::Permissions { allow: vec![rule.clone()], ..Default::default() };
        let (root, cwd) = (cx.env.root.to_string_lossy(), cx.env.cwd.to_string_lossy());
        let home = cx.agent.and_then(|a| a.runtime.env().get("HOME"));
        let place = permissions::Place { root: &root, cwd: &cwd, home };
        let decided = permissions::decide(&[("always", &only)], name, input, &place);
        decided.is_some_and(|d| d.verdict == permissions::Verdict::Allow)
    });
    Question {
        tool: name.to_owned(),
        input: input.clone(),
        why: String::new(),
        escalation: None,
        rule,
        by_rule: false,
        tree: cx.agent.and_then(|a| a.policy).map(|p| p.root.clone()).unwrap_or_default(),
    }
}

/// What the permission rules of the call's step decide for it, if any names it, and
/// then its mode: `read-only` refuses a file tool's write, `ask` asks before any
/// command or write no rule allows.
fn decided(cx: &ToolContext, name: &str, input: &Value) -> Option<permissions::Decision> {
    let agent = cx.agent?;
    let sets = agent.config?.permissions(&agent.facts.role);
    let sets: Vec<(&str, &permissions::Permissions)> = sets.iter().map(|(k, p)| (k.as_str(), *p)).collect();
    let (root, cwd) = (cx.env.root.to_string_lossy(), cx.env.cwd.to_string_lossy());
    let place = permissions::Place { root: &root, cwd: &cwd, home: agent.runtime.env().get("HOME") };
    let ruled = permissions::decide(&sets, name, input, &place);
    let Some(mode) = agent.policy.map(|p| p.mode) else { return ruled };
    // What writes: a file tool that does, a command, an MCP tool not marked read-only.
    let tool = grant::tool(name);
    let mcp = agent.mcp.filter(|m| m.offers(name).is_some());
    let writes = tool.is_some_and(|t| t.writes) || mcp.is_some_and(|m| !m.read_only(name));
    let by_mode = |verdict| permissions::Decision {
        verdict,
        rule: format!("mode = \"{}\"", mode.word()),
        key: "the agent's permission mode".to_owned(),
    };
    match (mode, &ruled) {
        // (Commands run read-only in their sandbox: `bash` itself may run.)
        (Mode::ReadOnly, _)
            if writes && name != "bash" && ruled.as_ref().is_none_or(|d| d.verdict != permissions::Verdict::Deny) =>
        {
            Some(by_mode(permissions::Verdict::Deny))
        }
        (Mode::Ask, None) if writes => Some(by_mode(permissions::Verdict::Ask)),
        _ => ruled,
    }
}

/// What a `bash` call asks beyond its sandbox (`escalate`, with its `reason`), if
/// anything its sandbox does not already give; what is wrong with the ask otherwise.
fn escalation(cx: &ToolContext, name: &str, input: &Value) -> Result<Option<(question::Escalation, String)>, String> {
    let Some(asked) = input.get("escalate").filter(|_| name == "bash") else { return Ok(None) };
    let wanted = asked
        .as_str()
        .and_then(question::Escalation::parse)
        .ok_or_else(|| format!("`escalate` must be `network` or `unsandboxed`, not {asked}; nothing ran"))?;
    let reason = input.get("reason").and_then(Value::as_str).map(str::trim).unwrap_or_default();
    if reason.is_empty() {
        return Err("`escalate` needs a `reason` saying why this command needs it; nothing ran".to_owned());
    }
    let Some(jail) = &cx.env.commands.sandbox else { return Ok(None) };
    match wanted {
        question::Escalation::Network if jail.network => Ok(None),
        question::Escalation::Network if !jail.can_lend_network() => Err(
            "this machine's sandbox cannot lend the network to one command (it has no user namespaces); nothing ran"
                .to_owned(),
        ),
        _ => Ok(Some((wanted, reason.to_owned()))),
    }
}

/// `cx` with what a yes lent its command: the network, or no sandbox.
pub(crate) fn lend<'a>(cx: &ToolContext<'a>, wanted: question::Escalation) -> ToolContext<'a> {
    let mut env = cx.env.clone();
    match wanted {
        question::Escalation::Network => env.commands.network_lent = true,
        question::Escalation::Unsandboxed => env.commands.sandbox = None,
    }
    ToolContext { env, agent: cx.agent, key: cx.key.clone() }
}

/// What the model is told when a hook refuses a call.
fn hook_refusal(ran: &hooks::Ran) -> Option<String> {
    let hooks::Ran { command, outcome, said, .. } = ran;
    match outcome {
        hooks::Outcome::Block => Some(format!("refused by the hook `{command}`: {said}; nothing ran")),
        hooks::Outcome::Failed => {
            Some(format!("the hook `{command}` failed ({said}), and a failed guard refuses: nothing ran"))
        }
        hooks::Outcome::Pass | hooks::Outcome::Allow | hooks::Outcome::Ask => None,
    }
}

/// [`hook_env`] for a call's hooks, when a hook is configured at all (otherwise no
/// environment is copied: a step without hooks costs nothing more).
fn hooks_env(cx: &ToolContext) -> Vec<(String, String)> {
    let Some(agent) = cx.agent else { return Vec::new() };
    let Some(config) = agent.config.filter(|c| !c.hooks.is_empty()) else { return Vec::new() };
    let marks: Vec<(&str, &str)> = cx.env.commands.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    hook_env(agent.runtime.env(), config, &marks)
}

/// The environment hooks run with: the user's without secrets (what a hook prints
/// reaches the model), plus the agent's marks from `commands` (`OFFSHOOT_AGENT`,
/// `OFFSHOOT_WORKSPACE`: what the next driver kills of a hook its killed predecessor
/// left running, as it does a tool's).
pub(crate) fn hook_env(
    env: &crate::Env,
    config: &domain::config::Config,
    commands: &[(&str, &str)],
) -> Vec<(String, String)> {
    let keys = config.api_key_variables();
    let marks = commands.iter().filter(|(k, _)| matches!(*k, "OFFSHOOT_AGENT" | "OFFSHOOT_WORKSPACE"));
    // (A project's hooks find its checkout as Claude Code's do.)
    let project = config.project.as_ref().map(|p| (domain::trust::PROJECT_DIR_VARIABLE, p.root.as_str()));
    env.vars()
        .filter(|(k, _)| !keys.contains(k) && !domain::tool_env::is_secret_name(k) && !k.starts_with("OFFSHOOT_"))
        .filter(|(k, _)| *k != domain::trust::PROJECT_DIR_VARIABLE)
        .chain(marks.copied())
        .chain(project)
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}
