use crate::cli::{CliError, Ctx};
use engine::ops::project;

/// Write an agent's change into your working tree as uncommitted changes (merged with
/// yours line by line); when it does not apply cleanly nothing changes
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The agent's id or name (default: the agent whose directory you are in)
    #[arg(add = crate::cli::complete::agents_completer())]
    pub(crate) agent: Option<String>,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = ctx.agent_named(&ws, args.agent.as_deref())?;
    let written = project::apply(&ws, &id)?;
    if ctx.out.json {
        ctx.out.event(&serde_json::json!({"agent": id.as_str(), "written": written}));
        return Ok(());
    }
    if written.is_empty() {
        ctx.out.progress("· nothing to apply: your working tree already has the agent's change");
        return Ok(());
    }
    for path in &written {
        ctx.out.line(path);
    }
    let s = if written.len() == 1 { "" } else { "s" };
    ctx.out.progress(&format!("· applied {} file{s} as uncommitted changes; `git diff` shows them", written.len()));
    Ok(())
}
