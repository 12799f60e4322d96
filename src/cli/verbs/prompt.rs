use crate::cli::error::sandbox_hint;
use crate::cli::progress;
use crate::cli::{CliError, Ctx};
use crate::engine::agents::{self, Start};
use crate::engine::{containment, model, random_u32};
use crate::infra::time::Timestamp;

/// Start a new agent on a goal and watch it work
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The goal, as the agent's first message
    pub message: String,
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
    let ws = ctx.workspace()?;
    let (_, config) = ws.config(&args.lineage)?;
    // A missing key, an unknown role or a sandbox this kernel cannot enforce is
    // refused before anything is created.
    model::plan(&config, &args.lineage, &args.role, &ctx.env)?;
    if let Some(role) = config.role(&args.role) {
        containment::check(role, &ctx.env).map_err(|e| {
            CliError::usage(format!("role `{}` cannot run its tools: {e}; nothing was created", args.role))
                .hint(sandbox_hint(&args.role))
        })?;
    }
    let spawn =
        Start { message: &args.message, name: args.name.as_deref(), now: Timestamp::now(), random: random_u32() };
    let id = agents::create_root(&ws, &args.role, &args.lineage, &spawn)?;
    progress::launch(ctx, &ws, &id, args.detach, true)
}
