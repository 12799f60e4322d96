use serde_json::json;

use crate::cli::error::{Kind, keeping, shell};
use crate::cli::{CliError, Ctx};
use engine::step::compaction::{self, CompactionError};

/// Start a compaction of an agent now: a compactor forks its history (less the last
/// `keep_recent_steps` steps), writes a summary and nominates files; the agent lands
/// it at its next step boundary
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) agent: crate::cli::input::AgentArg,
    /// What the summary should keep above all (added to the compactor's goal)
    #[arg(long)]
    pub(crate) focus: Option<String>,
    /// Wait until the agent lands the summary or declines it, and say which (Ctrl-C stops
    /// waiting; the compaction goes on)
    #[arg(long)]
    pub(crate) wait: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = args.agent.resolve(ctx, &ws)?;
    // (Where the agent's events file ends now: its landing or declining comes after.)
    let events = ws.layout.steps(&id).join(engine::step::events::FILE);
    let from = std::fs::metadata(&events).map(|m| m.len()).unwrap_or(0);
    let started = compaction::start(&ws, &ctx.runtime(&ws), &id, args.focus.as_deref(), &ctx.env)?;
    if args.wait {
        return wait(ctx, &ws, &events, from, &id, &started);
    }
    if ctx.out.json {
        let note = format!("started by `offshoot compact` over {} transcript entries", started.entries);
        ctx.out.event(&json!({"type": "compaction", "outcome": "started", "agent": id.as_str(),
            "compactor": started.compactor.as_str(), "note": note, "entries": started.entries}));
        return Ok(());
    }
    ctx.out.line(started.compactor.as_str());
    ctx.out.progress(&format!(
        "· compactor `{}` started for `{id}`; when it answers, `{id}` lands its summary in place of {} transcript entries (`offshoot log {id}` shows it, `offshoot uncompact {id}` undoes it)",
        started.compactor, started.entries
    ));
    Ok(())
}

/// Waits for `id`'s events file (from `from`) to say how the compaction by `started`'s
/// compactor ended, and says it: a landing, or a decline with why.
fn wait(
    ctx: &Ctx,
    ws: &engine::store::workspace::Workspace,
    events: &std::path::Path,
    from: u64,
    id: &domain::id::AgentId,
    started: &compaction::Started,
) -> Result<(), CliError> {
    use engine::step::events::{Line, Record};
    let compactor = started.compactor.to_string();
    if !ctx.out.json {
        ctx.out
            .progress(&format!("· compactor `{compactor}` started for `{id}`; waiting for it to land or be declined"));
    }
    let mut quiet = 0;
    loop {
        let text = std::fs::read(events).unwrap_or_default();
        let fresh = text.get(usize::try_from(from).unwrap_or(0)..).unwrap_or_default();
        for line in fresh.split(|&b| b == b'\n').filter_map(Line::parse) {
            let Record::Compaction { outcome, compactor: by, note } = line.record else { continue };
            if (by != compactor && !by.is_empty()) || !(outcome == "landed" || outcome == "declined") {
                continue;
            }
            if ctx.out.json {
                ctx.out.event(&json!({"type": "compaction", "outcome": outcome, "agent": id.as_str(),
                    "compactor": compactor, "note": note}));
            } else {
                ctx.out.line(&compactor);
                ctx.out.progress(&format!("· compaction of `{id}` {outcome}: {note}"));
            }
            return match outcome.as_str() {
                "landed" => Ok(()),
                _ => Err(CliError::runtime(format!("the compaction of `{id}` was declined: {note}"))),
            };
        }
        // Nothing at work any more (no compaction in flight, neither driver running) and
        // no word of it: it ended some other way (stopped, failed), which `tree` shows.
        let held =
            |agent: &domain::id::AgentId| infra::lock::LockGuard::is_held(&ws.layout.lock(agent)).unwrap_or(true);
        let idle = compaction::in_flight(ws, id).ok().flatten().is_none() && !held(id) && !held(&started.compactor);
        quiet = if idle { quiet + 1 } else { 0 };
        if quiet >= 5 {
            return Err(CliError::runtime(format!("the compaction of `{id}` ended without landing or being declined"))
                .hint(format!("`offshoot tree {id}` shows its compactor `{compactor}`")));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

impl From<CompactionError> for CliError {
    fn from(e: CompactionError) -> Self {
        let e = match e {
            CompactionError::Agent(a) => return a.into(),
            CompactionError::Workspace(w) => return w.into(),
            e => e,
        };
        let shell = match &e {
            CompactionError::InFlight { compactor, .. } => shell(Kind::Usage).hint(format!(
                "`offshoot tree` shows how it is doing; `offshoot stop {compactor}` ends it without landing"
            )),
            CompactionError::Busy { agent, .. } => {
                shell(Kind::Usage).hint(format!("`offshoot stop {agent}` first, or wait until it is done"))
            }
            CompactionError::OfCompactor(_)
            | CompactionError::Nothing { .. }
            | CompactionError::NoLanding { .. }
            | CompactionError::Undone { .. }
            | CompactionError::Unknown(_) => shell(Kind::Usage),
            _ => shell(Kind::Runtime),
        };
        keeping(e, shell)
    }
}
