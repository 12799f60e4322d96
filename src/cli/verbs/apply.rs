use crate::cli::{CliError, Ctx};
use engine::ops::project;

/// Write an agent's change into your working tree as uncommitted changes (merged with
/// yours line by line); when it does not apply cleanly nothing changes
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) agent: crate::cli::input::AgentArg,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = args.agent.resolve(ctx, &ws)?;
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
