use std::io::BufRead;

use crate::cli::follow::{Follower, View};
use crate::cli::{CliError, Ctx};
use engine::agents;

/// Watch an agent and the agents below it live, whoever drives them: each step, call,
/// result and end as it happens; a line typed is sent to the agent as your message.
/// Ctrl-D (or the end of input) leaves; the agents go on
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) agent: crate::cli::input::AgentArg,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = args.agent.resolve(ctx, &ws)?;
    let view = if ctx.out.json { View::Json } else { View::All };
    let follower = Follower::start_with_itself(ws.layout.root(), &id, view);
    let name = agents::name_of(&ws, &id).map(|n| format!(" ({n})")).unwrap_or_default();
    ctx.out.progress(&format!(
        "· attached to `{id}`{name}: its steps show as they happen; a line you type is sent to it; Ctrl-D leaves (it goes on)"
    ));
    let rt = ctx.runtime(&ws);
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        // As `send --detach`: left in its inbox, its driver woken (or started).
        rt.deposit(&id, "user", &line)?;
        rt.wake(&id)?;
        ctx.out.progress(&format!("· sent to `{id}`"));
    }
    follower.finish();
    Ok(())
}
