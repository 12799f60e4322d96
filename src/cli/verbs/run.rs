use crate::cli::progress;
use crate::cli::{CliError, Ctx};
use crate::engine::agents;

/// Drive an agent until nothing is due (settles interrupted calls, delivers its inbox)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's id or name
    #[arg(add = crate::cli::complete::agents_completer())]
    pub agent: String,
    /// Started by another offshoot process (the agent runtime): output goes to the
    /// agent's driver.log, so the agents below it are not followed (each has its own)
    #[arg(long, hide = true)]
    pub launched: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    progress::watch_signals(ctx);
    let ws = ctx.workspace()?;
    let id = agents::resolve(&ws, &args.agent)?;
    if args.launched { progress::attach_launched(ctx, &ws, &id) } else { progress::attach(ctx, &ws, &id, false) }
}
