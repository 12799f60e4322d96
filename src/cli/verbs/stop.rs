use std::time::Duration;

use serde_json::json;

use crate::cli::{CliError, Ctx};
use crate::engine::agents;
use crate::engine::runtime::Stopped;

/// How long `stop` waits for the driver to settle and let go.
const PATIENCE: Duration = Duration::from_secs(10);

/// Stop an agent's driver: its running command is killed, the calls it cut short are
/// answered, and it waits for the next message
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's id or name
    pub agent: String,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = agents::resolve(&ws, &args.agent)?;
    let outcome = ctx.runtime(&ws).stop(&id, PATIENCE)?;
    let (state, line) = match outcome {
        Stopped::NotRunning => ("not-running", format!("· `{id}` is not running; nothing to stop")),
        Stopped::Stopped(_) => (
            "stopped",
            format!(
                "· stopped `{id}`; what it was doing is committed and answered; `offshoot run {id}` or a message continues it"
            ),
        ),
        Stopped::Signalled(pid) => {
            return Err(CliError::runtime(format!(
                "asked the driver of `{id}` (pid {pid}) to stop, but it still holds the agent after {} s",
                PATIENCE.as_secs()
            ))
            .hint(format!("`kill -9 {pid}` ends it at once; `offshoot run {id}` then settles what it left")));
        }
    };
    if ctx.out.json {
        ctx.out.event(&json!({"type": "stop", "agent": id.as_str(), "outcome": state}));
    } else {
        ctx.out.progress(&line);
    }
    Ok(())
}
