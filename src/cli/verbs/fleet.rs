use crate::cli::{CliError, Ctx};
use engine::fleet::remote;

/// What a remote's fleet holds: its queue and how long the oldest has waited, its claims
/// and the workers holding them (`--json` for an autoscaler)
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Args {
    /// Look at the remote once: trees, agents, the queue, claims and workers
    Status {
        /// The remote (default: the only one, or `origin`)
        remote: Option<String>,
    },
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let Args::Status { remote: name } = args;
    let ws = ctx.workspace()?;
    let remote = remote::resolve(&ws, name.as_deref()).map_err(super::sync::error)?;
    let status = remote::status(&ws, &remote).map_err(super::sync::error)?;
    if ctx.out.json {
        ctx.out.event(&serde_json::to_value(&status).unwrap_or_default());
        return Ok(());
    }
    let oldest = match status.oldest_waiting_secs {
        Some(secs) => format!(", the oldest for {secs} s"),
        None => String::new(),
    };
    ctx.out.line(&format!(
        "{}: {} tree(s) handed to the fleet, {} agent(s); {} waiting for a worker{oldest}; {} claimed",
        status.remote, status.trees, status.agents, status.waiting, status.claimed
    ));
    for w in &status.workers {
        ctx.out.line(&format!("  worker `{}`: {} claim(s)", w.name, w.claims));
    }
    Ok(())
}
