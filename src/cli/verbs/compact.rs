use serde_json::json;

use crate::cli::{CliError, Ctx};
use crate::engine::compaction::{self, CompactionError};

/// Start a compaction of an agent now: a compactor forks its history (less the last
/// `keep_recent_steps` steps), writes a summary and nominates files; the agent lands
/// it at its next step boundary
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's id or name (default: the agent whose directory you are in)
    #[arg(add = crate::cli::complete::agents_completer())]
    pub agent: Option<String>,
    /// What the summary should keep above all (added to the compactor's goal)
    #[arg(long)]
    pub focus: Option<String>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = ctx.agent_named(&ws, args.agent.as_deref())?;
    let started = compaction::start(&ws, &ctx.runtime(&ws), &id, args.focus.as_deref(), &ctx.env)?;
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

impl From<CompactionError> for CliError {
    fn from(e: CompactionError) -> Self {
        match e {
            CompactionError::Agent(a) => a.into(),
            CompactionError::Workspace(w) => w.into(),
            CompactionError::InFlight { ref compactor, .. } => CliError::usage(e.to_string()).hint(format!(
                "`offshoot tree` shows how it is doing; `offshoot stop {compactor}` ends it without landing"
            )),
            CompactionError::Busy { ref agent, .. } => {
                CliError::usage(e.to_string()).hint(format!("`offshoot stop {agent}` first, or wait until it is done"))
            }
            CompactionError::OfCompactor(_)
            | CompactionError::Nothing { .. }
            | CompactionError::NoLanding { .. }
            | CompactionError::Undone { .. }
            | CompactionError::Unknown(_) => CliError::usage(e.to_string()),
            _ => CliError::runtime(e.to_string()),
        }
    }
}
