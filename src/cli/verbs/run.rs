use crate::cli::progress;
use crate::cli::{CliError, Ctx};

/// Drive an agent until nothing is due (settles interrupted calls, delivers its inbox)
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) agent: crate::cli::input::AgentArg,
    /// Started by another offshoot process (the agent runtime): output goes to the
    /// agent's driver.log, so the agents below it are not followed (each has its own)
    #[arg(long, hide = true)]
    pub(crate) launched: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    progress::watch_signals(ctx);
    let ws = ctx.workspace()?;
    let id = args.agent.resolve(ctx, &ws)?;
    if !args.launched && engine::fleet::remote::handed(&ws, &id) {
        return Err(CliError::usage(format!("agent `{id}` is driven by the workers of a remote, not here"))
            .hint("`offshoot pull` brings its progress; `offshoot send --on <remote>` sends it a message"));
    }
    if args.launched { progress::attach_launched(ctx, &ws, &id) } else { progress::attach(ctx, &ws, &id, false) }
}
