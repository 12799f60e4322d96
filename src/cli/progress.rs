//! Attaching to a driver: live output of its events (answer on stdout, one line per
//! tool call or step on stderr; JSON events with `--json`), and launching a
//! detached driver.

use std::collections::HashMap;

use serde_json::json;

use domain::id::AgentId;
use engine::agents::budget::Records;
use engine::agents::interrupt::{Disposition, Reason};
use engine::step::driver::{self, RunEnd};
use engine::step::events::{self, Event, Observer};
use engine::store::workspace::Workspace;
use infra::provider::Delta;
use infra::signals;

use super::error::Kind;
use super::follow::{Follower, View};
use super::out::{Out, call_gist};
use super::{CliError, Ctx};

struct Live<'a> {
    ctx: &'a Ctx,
    /// The attached agent's id (every JSON event names its agent).
    agent: String,
    /// Whether the driver did anything (delivered, settled or called the model).
    worked: bool,
    /// What this run's model calls used (the agent's own, from its events).
    spent: Spent,
    /// JSON events of an agent this command just made, held (its `agent` event first)
    /// until its first call succeeds: an agent removed again is never announced.
    held: Option<Vec<serde_json::Value>>,
    /// The follower of the agents below, asked to catch up before a line that follows
    /// from what they wrote.
    passes: Option<super::follow::Passes>,
}

/// The sum of a run's model calls; the cost is known while every call was priced.
#[derive(Default)]
struct Spent {
    /// Agents that made calls (the attached one and those below it).
    agents: u32,
    calls: u32,
    /// Tool calls that began.
    tool_calls: u32,
    input: u64,
    cached: u64,
    output: u64,
    cost_usd: Option<f64>,
    unpriced: bool,
}

impl Spent {
    /// What the tree of `id` spent since `before` (each agent's step count then): the
    /// calls this run made and those of the agents below it meanwhile, from their step
    /// records.
    fn of_tree(ws: &Workspace, id: &AgentId, (records, before): &mut (Records, HashMap<String, usize>)) -> Spent {
        let facts = engine::agents::facts_of(ws, &id.branch()).ok();
        let config = facts.and_then(|f| ws.config(&f.lineage).ok()).map(|(_, c)| c);
        let mut spent = Spent::default();
        // (The records read at the start hold every step finished then: only the run's
        // own are read now.)
        for agent in records.tree(&ws.layout, id) {
            let new = &agent.steps[before.get(&agent.id).copied().unwrap_or(0).min(agent.steps.len())..];
            // (A call that failed every attempt is the error's to tell; one answered by a
            // provider that reports no usage still counts.)
            let answered: Vec<_> = new.iter().filter(|s| s.answered).collect();
            if answered.is_empty() {
                continue;
            }
            spent.agents += 1;
            spent.tool_calls += new.iter().map(|s| s.tool_calls).sum::<u32>();
            for step in answered {
                let price = config.as_ref().and_then(|c| c.prices.get(&step.model));
                spent.add(&step.usage, price.map(|p| domain::budget::cost(&step.usage, p)));
            }
        }
        spent
    }

    /// Each agent's step count in the tree of `id` now.
    fn counts(ws: &Workspace, id: &AgentId) -> (Records, HashMap<String, usize>) {
        let mut records = Records::default();
        let counts = records.tree(&ws.layout, id).into_iter().map(|a| (a.id, a.steps.len())).collect();
        (records, counts)
    }

    /// The totals as fields of a run's `end` event.
    fn fields(&self) -> serde_json::Value {
        // (No call at all cost nothing; a call without a price makes the sum unknown.)
        let cost = if self.unpriced { None } else { Some(domain::budget::usd(self.cost_usd.unwrap_or(0.0))) };
        json!({"agents": self.agents, "steps": self.calls, "tool_calls": self.tool_calls, "input_tokens": self.input,
            "cached_tokens": self.cached, "output_tokens": self.output, "cost_usd": cost})
    }

    fn add(&mut self, usage: &infra::provider::Usage, cost_usd: Option<f64>) {
        self.calls += 1;
        self.input += usage.input.unwrap_or(0);
        self.cached += usage.cache_read.unwrap_or(0);
        self.output += usage.output.unwrap_or(0);
        match cost_usd {
            Some(c) => self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + c),
            None => self.unpriced = true,
        }
    }
}

/// `1,234 in (1,000 cached), 56 out, $0.0041` (the cost left out when unknown).
fn usage_words(input: u64, cached: u64, output: u64, cost_usd: Option<f64>) -> String {
    let cached = if cached > 0 { format!(" ({} cached)", infra::words::thousands(cached)) } else { String::new() };
    let cost = cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default();
    format!("{} in{cached}, {} out{cost}", infra::words::thousands(input), infra::words::thousands(output))
}

impl Live<'_> {
    fn emit(&mut self, value: serde_json::Value) {
        match &mut self.held {
            Some(held) => held.push(value),
            None => self.ctx.out.event(&value),
        }
    }

    /// Sends what was held: the agent is there to stay.
    fn release(&mut self) {
        for value in self.held.take().unwrap_or_default() {
            self.ctx.out.event(&value);
        }
    }

    /// Sends what was held of an agent removed again (its first call failed): the
    /// calls and their failed attempts, naming no agent — there is none, and it was
    /// never announced.
    fn release_unnamed(&mut self) {
        for mut value in self.held.take().unwrap_or_default() {
            if value["type"] == "agent" {
                continue;
            }
            value["agent"] = serde_json::Value::Null;
            self.ctx.out.event(&value);
        }
    }

    /// The line closing a run that called the model: what all its calls used, those of
    /// the agents below it included (`s`).
    fn totals(&self, s: &Spent) {
        if s.calls == 0 || self.ctx.out.json {
            return;
        }
        let cost = if s.unpriced { None } else { s.cost_usd };
        let calls = infra::words::count(s.calls, "model call", "model calls");
        let by = if s.agents > 1 { format!(" by {} agents", s.agents) } else { String::new() };
        let tools = match s.tool_calls {
            0 => String::new(),
            n => format!(" and {}", infra::words::count(n, "tool call", "tool calls")),
        };
        let unpriced = if s.unpriced && s.cost_usd.is_some() { " (some calls unpriced)" } else { "" };
        self.ctx.out.progress(&format!(
            "· total: {calls}{tools}{by}, {}{unpriced}",
            usage_words(s.input, s.cached, s.output, cost)
        ));
    }
}

/// `text` on one line (whitespace runs made one space), cut to `max` characters.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max { format!("{}…", flat.chars().take(max).collect::<String>()) } else { flat }
}

impl Observer for Live<'_> {
    fn event(&mut self, event: Event<'_>) {
        // (A warning or a mended directory before the run is not work done.)
        if !matches!(event, Event::Warning(_) | Event::Repaired(_)) {
            self.worked = true;
        }
        if let Event::Usage { usage, cost_usd, .. } = &event {
            self.spent.add(usage, *cost_usd);
        }
        // A message (and the work merged with it) from an agent below follows from what
        // it wrote: that is shown first — for its answer, down to its run's end.
        if let Some(passes) = &self.passes {
            let below = |agent: &str| agent.starts_with(&format!("{}.", self.agent));
            match &event {
                Event::Delivered { sender, answer: true } if below(sender) => passes.catch_up_to_end_of(sender),
                Event::Transferred { child, .. } | Event::Conflicted { child, .. } => passes.catch_up_to_end_of(child),
                Event::Delivered { sender, .. } if *sender != "user" => passes.catch_up(),
                _ => {}
            }
        }
        if self.ctx.out.json {
            let first_answer = matches!(event, Event::Usage { .. });
            if let Some(v) = events::to_json(&self.agent, &event) {
                self.emit(v);
            }
            if first_answer {
                self.release();
            }
            return;
        }
        let out = &self.ctx.out;
        match event {
            Event::Delta(Delta::Text(text)) => out.narrate(text),
            Event::Delta(_) => {}
            Event::Delivered { sender, .. } if sender != "user" => out.progress(&format!("· message from `{sender}`")),
            Event::Delivered { .. } => {}
            Event::Settled { tool_use_id } => out.progress(&format!("· settled interrupted call {tool_use_id}")),
            Event::StepStarted { step, provider, model, .. } => {
                out.progress(&format!("· step {step} ({provider}/{model})"))
            }
            Event::AttemptFailed { attempt, error, retry_in_ms } => match retry_in_ms {
                Some(ms) => out.progress(&format!("· attempt {attempt} failed: {error}; retrying in {ms} ms")),
                None => out.progress(&format!("· attempt {attempt} failed: {error}")),
            },
            // (Cut to the terminal's width: a line that wraps is two.)
            Event::ToolStarted { name, input, .. } => {
                let room = out.width().saturating_sub(name.chars().count() + 4).max(10);
                out.progress(&format!("→ {name} {}", one_line(&call_gist(input), room)));
            }
            Event::ToolFinished { is_error, summary, .. } => {
                let mark = if is_error { "✗" } else { "←" };
                out.progress(&format!("  {mark} {}", one_line(summary, out.width().saturating_sub(5))));
            }
            Event::Repaired(repair) => out.progress(&format!("· {}", events::repaired(repair))),
            Event::Warning(text) => out.progress(&format!("warning: {text}")),
            Event::Usage { step, usage, cost_usd, .. } => out.progress(&format!(
                "· step {step} done: {}",
                usage_words(
                    usage.input.unwrap_or(0),
                    usage.cache_read.unwrap_or(0),
                    usage.output.unwrap_or(0),
                    cost_usd
                )
            )),
            Event::Transferred { child, files } => {
                let s = if files == 1 { "" } else { "s" };
                out.progress(&format!("· merged {files} changed file{s} from `{child}`"))
            }
            Event::Conflicted { child, files } => out.progress(&format!(
                "· `{child}`'s work conflicts in {}; not merged (marked {})",
                infra::words::count(files as u64, "file", "files"),
                domain::marks::Mark::Conflicted.ref_name(child)
            )),
            Event::Waiting { children } => out.progress(&format!(
                "· waiting for {} below this one",
                infra::words::count(children as u64, "agent", "agents")
            )),
            Event::Compaction { outcome: "started", compactor, note } => {
                out.progress(&format!("· compacting: `{compactor}` started ({note})"))
            }
            Event::Compaction { compactor, note, .. } => out.progress(&format!("· `{compactor}`: {note}")),
        }
    }
}

/// Runs the driver in this process with live output. `fresh` marks an agent this
/// command just created (removed again if its first call fails).
pub(crate) fn attach(ctx: &Ctx, ws: &Workspace, id: &AgentId, fresh: bool) -> Result<(), CliError> {
    attach_holding(ctx, ws, id, fresh, None, true)
}

/// `attach` for a driver the runtime launched: nobody reads its output but its
/// driver.log, so it does not tail the events of every agent below it (with a
/// thousand agents, a thousand drivers listing `steps/` ten times a second took 30%
/// of the machine's CPU in the fleet bench, most of it spinning on that directory's
/// lock).
pub(crate) fn attach_launched(ctx: &Ctx, ws: &Workspace, id: &AgentId) -> Result<(), CliError> {
    attach_holding(ctx, ws, id, false, None, false)
}

/// `attach`, with `announce` (the new agent's JSON `agent` event) held back until the
/// agent's first call succeeds.
fn attach_holding(
    ctx: &Ctx,
    ws: &Workspace,
    id: &AgentId,
    fresh: bool,
    announce: Option<serde_json::Value>,
    follow: bool,
) -> Result<(), CliError> {
    let held = announce.map(|a| vec![a]);
    let mut live = Live { ctx, agent: id.to_string(), worked: false, spent: Spent::default(), held, passes: None };
    let rt = ctx.runtime(ws);
    watch_signals(ctx);
    let _ = ctx.driving.set(id.to_string());
    // The agents below it show as they work: their own lines on a terminal.
    let view = match ctx.out.start_live() {
        Some(multi) => View::Live(multi),
        None if ctx.out.json => View::Json,
        None => View::Lines,
    };
    // (The tree's step counts now: what it spends from here on is this run's.)
    let mut before = follow.then(|| Spent::counts(ws, id));
    let follower = follow.then(|| Follower::start(ws.layout.root(), id, view));
    live.passes = follower.as_ref().map(Follower::passes);
    let result = if fresh { driver::run_fresh(ws, &rt, id, &mut live) } else { driver::run(ws, &rt, id, &mut live) };
    if let Some(follower) = follower {
        follower.finish();
    }
    ctx.out.end_live();
    ctx.out.end_stream();
    let fresh_removed = fresh && ws.repo.branch_tip(&id.branch()).ok().flatten().is_none();
    match fresh_removed {
        false => live.release(),
        true => live.release_unnamed(),
    }
    // The whole tree's, for a command someone watches; a launched driver's own.
    let spent = match &mut before {
        Some(before) if !fresh_removed => Spent::of_tree(ws, id, before),
        _ => std::mem::take(&mut live.spent),
    };
    live.totals(&spent);
    let end = events::Line { record: events::Record::End(driver::end_event(result.as_ref())), agent: id.to_string() };
    let mut end = end.to_value();
    if let (Some(fields), serde_json::Value::Object(end)) = (spent.fields().as_object(), &mut end) {
        end.extend(fields.clone());
    }
    if fresh_removed {
        end["agent"] = serde_json::Value::Null;
    }
    match result {
        Ok(RunEnd::Answered { text, .. }) => {
            if live.worked {
                ctx.out.answer(&text);
            }
            if !live.worked {
                ctx.out.note(
                    Some(id.as_str()),
                    &format!("nothing is due for `{id}`: it has answered and has no new messages"),
                );
            } else if text.trim().is_empty() {
                ctx.out.note(Some(id.as_str()), &format!(
                    "`{id}` answered with no content (an empty answer ends its turn; `offshoot send {id} \"…\"` asks again)"
                ));
            }
            if ctx.out.json {
                ctx.out.event(&end);
            }
            Ok(())
        }
        Ok(RunEnd::Busy) => {
            if ctx.out.json {
                ctx.out.event(&end);
            } else if follow {
                follow_other_driver(ctx, ws, id);
            }
            // (A launched driver that finds another at work leaves at once.)
            Ok(())
        }
        Err(e) => {
            let err = finish_error(e.into(), id, fresh_removed);
            if ctx.out.json {
                end["kept"] = (!fresh_removed).into();
                end["hints"] = err.hints.clone().into();
                let causes = err.causes();
                if !causes.is_empty() {
                    end["causes"] = causes.into();
                }
                ctx.out.event(&end);
                ctx.out.ended();
            }
            Err(err)
        }
    }
}

/// Another process drives `id` (a message left for it is its to deliver): its work is
/// shown as it happens until that driver lets go, or Ctrl-C leaves it working.
fn follow_other_driver(ctx: &Ctx, ws: &Workspace, id: &AgentId) {
    ctx.out.progress(&format!(
        "· `{id}` is being driven by another process: following it until that one stops (Ctrl-C leaves it working)"
    ));
    let view = match ctx.out.start_live() {
        Some(multi) => View::Live(multi),
        None => View::Lines,
    };
    let follower = Follower::start_with_itself(ws.layout.root(), id, view);
    // (A driver lets go of the lock between rounds for a moment: free twice, apart, is
    // let go.)
    let lock = ws.layout.lock(id);
    let held = || infra::lock::LockGuard::is_held(&lock).unwrap_or(false);
    while !ctx.interrupt.requested() {
        if !held() {
            std::thread::sleep(std::time::Duration::from_millis(300));
            if !held() {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    follower.finish();
    ctx.out.end_live();
    match ctx.interrupt.requested() {
        true => ctx.out.progress(&format!("· left `{id}` working (`offshoot attach {id}` follows it again)")),
        false => ctx
            .out
            .progress(&format!("· the other process let go of `{id}` (`offshoot log {id}` shows where it got to)")),
    }
}

/// The hints a driver's error ends with: none naming an agent that was removed again,
/// and how to go on where going on can work.
fn finish_error(mut err: CliError, id: &AgentId, fresh_removed: bool) -> CliError {
    let continues = format!("`offshoot run {id}`");
    if fresh_removed {
        // Nothing of the agent is left for a hint to name.
        err.hints.retain(|h| !h.contains(id.as_str()));
        err.hint("the new agent was removed again: nothing was kept")
    } else if err.kind == Kind::Usage || err.hints.iter().any(|h| h.contains(&continues)) {
        // A bad config or role fails `run` the same way until it is fixed.
        err
    } else {
        err.hint(format!("{continues} continues the agent from where it stopped"))
    }
}

/// Ctrl-C (SIGINT) and `offshoot stop` (SIGTERM) for a command that runs a driver,
/// from its very start (a signal while the agent is being created lets the creation
/// finish, then stops the driver before its first step): the running command is
/// killed and the driver stops at its next safe point; during a model call, or on a
/// second signal, the process ends at once.
pub(crate) fn watch_signals(ctx: &Ctx) {
    let interrupt = ctx.interrupt.clone();
    let driving = ctx.driving.clone();
    let json = ctx.out.json;
    signals::watch(move |signal| {
        let reason = Reason::of_signal(signal);
        let id = driving.get().cloned().unwrap_or_default();
        let code = 128 + signal;
        let continues = if id.is_empty() { String::new() } else { format!("; `offshoot run {id}` continues") };
        let end = |line: String, driver_at_work: bool| {
            // The stop is a stop, not a crash: recorded before the process ends.
            interrupt.exiting(reason, driver_at_work);
            let event = json!({"type": "end", "outcome": "interrupted", "agent": id, "reason": reason.words()});
            Out::from_any_thread(json, &line, &event);
            std::process::exit(code);
        };
        match interrupt.request(reason) {
            Disposition::Handled => Out::from_any_thread(
                json,
                &format!("· {}: stopping at the running call (again to quit at once)", reason.words()),
                &json!({"type": "stopping", "agent": id, "reason": reason.words()}),
            ),
            // Said as any other stop is (`error: agent … was …`, then how to go on).
            Disposition::ExitNow if !id.is_empty() => end(
                format!(
                    "error: agent `{id}` was {} during a model call: that call is not kept, everything before it is\nhint: `offshoot run {id}` continues it",
                    reason.words()
                ),
                false,
            ),
            Disposition::ExitNow => end(format!("· {} during a model call{continues}", reason.words()), false),
            Disposition::Again => end(format!("· {} again: quit at once{continues}", reason.words()), true),
        }
    });
}

/// Follows up the creation of `id`: names it (the first JSON event, or a progress
/// line), then either starts a detached driver and prints the id, or attaches.
pub(crate) fn launch(ctx: &Ctx, ws: &Workspace, id: &AgentId, detach: bool, fresh: bool) -> Result<(), CliError> {
    let name = engine::agents::list(ws)
        .ok()
        .and_then(|l| l.into_iter().find(|l| l.id == *id))
        .and_then(|l| l.facts)
        .and_then(|f| f.name);
    let announce = json!({"type": "agent", "id": id.as_str(), "name": name});
    if !ctx.out.json {
        ctx.out.progress(&format!("· agent {id} ({})", name.unwrap_or_default()));
    } else if detach || !fresh {
        ctx.out.event(&announce);
    }
    if !detach {
        let announce = (ctx.out.json && fresh).then_some(announce);
        return attach_holding(ctx, ws, id, fresh, announce, true);
    }
    ctx.runtime(ws).launch(id)?;
    if !ctx.out.json {
        ctx.out.line(id.as_str());
    }
    Ok(())
}
