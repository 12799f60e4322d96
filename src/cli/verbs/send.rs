use crate::cli::progress;
use crate::cli::{CliError, Ctx};
use crate::domain::inbox::Deposit;
use crate::engine::{agents, inbox};
use crate::infra::lock::LockGuard;
use crate::infra::time::Timestamp;

/// Send a message to an agent and wake it (a finished agent continues its branch)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's id or name
    pub agent: String,
    pub message: String,
    /// Deposit and wake the agent, then return at once
    #[arg(long)]
    pub detach: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    if args.message.trim().is_empty() {
        return Err(CliError::usage("the message is empty"));
    }
    let ws = ctx.workspace()?;
    let id = agents::resolve(&ws, &args.agent)?;
    inbox::deposit(&ws.layout, &id, &Deposit::new("user", Timestamp::now(), &args.message))
        .map_err(|e| CliError::runtime(e.to_string()))?;
    let busy = LockGuard::is_held(&ws.layout.lock(&id)).unwrap_or(false);
    if args.detach || busy {
        if !busy {
            progress::spawn_detached(ctx, &ws, &id)?;
        }
        ctx.out.progress(&format!("· delivered to `{id}`"));
        return Ok(());
    }
    progress::attach(ctx, &ws, &id, false)
}
