use crate::cli::{CliError, Ctx};
use crate::cli::{input, progress};
use crate::engine::agents::{self, Start};
use crate::engine::random_u32;
use crate::infra::time::Timestamp;

/// Start a new agent that continues any commit of any agent, with a new message
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The commit to continue from: an agent id or name, `PeachHollow~2`, `agents/<id>`, a sha
    #[arg(long)]
    pub from: String,
    /// The new message (`-` reads it from stdin)
    pub message: std::ffi::OsString,
    /// A unique display name for the new agent
    #[arg(long)]
    pub name: Option<String>,
    /// Start the agent and return at once
    #[arg(long)]
    pub detach: bool,
    /// The model to use in place of the role's (default: the one its origin used) (recorded in the
    /// agent's tree as `.offshoot/model`)
    #[arg(long, value_parser = crate::cli::input::model_name)]
    pub model: Option<String>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    progress::watch_signals(ctx);
    let message = input::text(&args.message, "the message")?;
    let ws = ctx.workspace()?;
    // An agent id or name stands for its branch (`PeachHollow~2` works too).
    let from = agents::revision(&ws, &args.from)?;
    let spawn = Start {
        message: &message,
        name: args.name.as_deref(),
        now: Timestamp::now(),
        random: random_u32(),
        env: &ctx.env,
        project: None,
        model: args.model.as_deref(),
    };
    let id = agents::fork(&ws, &from, &spawn)?;
    progress::launch(ctx, &ws, &id, args.detach, false)
}
