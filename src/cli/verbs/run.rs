use crate::cli::progress;
use crate::cli::{CliError, Ctx};
use crate::engine::agents;

/// Drive an agent until nothing is due (settles interrupted calls, delivers its inbox)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's id or name
    #[arg(add = crate::cli::complete::agents_completer())]
    pub agent: String,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    progress::watch_signals(ctx);
    let ws = ctx.workspace()?;
    let id = agents::resolve(&ws, &args.agent)?;
    progress::attach(ctx, &ws, &id, false)
}
