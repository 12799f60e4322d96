use crate::cli::{CliError, Ctx};
use crate::cli::{input, progress};
use crate::engine::agents::{self, Start};
use crate::engine::{model, random_u32};
use crate::infra::time::Timestamp;

/// Start a new agent on a goal and watch it work
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The goal, as the agent's first message (`-` reads it from stdin)
    pub message: std::ffi::OsString,
    /// A unique display name (default: a minted two-word name)
    #[arg(long)]
    pub name: Option<String>,
    /// The role to run as
    #[arg(long, default_value = "worker")]
    pub role: String,
    /// The config lineage to follow
    #[arg(long, default_value = "default")]
    pub lineage: String,
    /// Start the agent and return at once (its driver logs to steps/<id>/driver.log)
    #[arg(long)]
    pub detach: bool,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    progress::watch_signals(ctx);
    let message = input::text(&args.message, "the goal")?;
    let ws = ctx.workspace()?;
    let (_, config) = ws.config(&args.lineage)?;
    // A missing key or an unknown role is refused before anything is created (and
    // so is a sandbox this kernel cannot enforce, by the engine).
    model::plan(&config, &args.lineage, &args.role, &ctx.env)?;
    let spawn = Start {
        message: &message,
        name: args.name.as_deref(),
        now: Timestamp::now(),
        random: random_u32(),
        env: &ctx.env,
    };
    let id = agents::create_root(&ws, &args.role, &args.lineage, &spawn)?;
    progress::launch(ctx, &ws, &id, args.detach, true)
}
