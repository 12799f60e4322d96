use crate::cli::{CliError, Ctx};
use crate::engine::{agents, driver, inspect};

/// Show one step's record, or the request re-assembled from its commit
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's id or name
    pub agent: String,
    /// The step number (1 is the agent's first model call)
    #[arg(long)]
    pub step: u32,
    /// Print the request re-assembled from the step's recorded commit and config
    #[arg(long)]
    pub request: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = agents::resolve(&ws, &args.agent)?;
    if args.request {
        let request = inspect::reassemble(&ws, &id, args.step)?;
        ctx.out.stream(&String::from_utf8_lossy(&driver::request_json(&request)));
        return Ok(());
    }
    let meta = inspect::step_meta(&ws, &id, args.step)?;
    ctx.out.line(&serde_json::to_string_pretty(&meta).unwrap_or_default());
    Ok(())
}
