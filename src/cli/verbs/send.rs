use crate::cli::{CliError, Ctx};
use crate::cli::{input, progress};
use crate::engine::agents;
use crate::engine::runtime::Woken;

/// Send a message to an agent and wake it (a finished agent continues its branch)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's id or name
    #[arg(add = crate::cli::complete::agents_completer())]
    pub agent: String,
    /// The message (`-` reads it from stdin)
    pub message: std::ffi::OsString,
    /// Deposit and wake the agent, then return at once
    #[arg(long)]
    pub detach: bool,
    /// The model to use in place of the role's, from this message on (recorded in the
    /// agent's tree as `.offshoot/model`)
    #[arg(long, value_parser = crate::cli::input::model_name)]
    pub model: Option<String>,
    /// Anthropic's extended thinking for this agent: at most N tokens of it before each
    /// answer (in place of its role's `thinking_budget`)
    #[arg(long, value_name = "N", conflicts_with = "effort")]
    pub thinking: Option<u32>,
    /// OpenAI's reasoning effort for this agent: minimal, low, medium or high (in place of
    /// its role's `reasoning_effort`)
    #[arg(long, value_name = "EFFORT")]
    pub effort: Option<String>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    progress::watch_signals(ctx);
    let message = input::text(&args.message, "the message")?;
    if message.trim().is_empty() {
        return Err(CliError::usage("the message is empty"));
    }
    let ws = ctx.workspace()?;
    let id = agents::resolve(&ws, &args.agent)?;
    let rt = ctx.runtime(&ws);
    let facts = crate::engine::snapshot::read_facts(
        &ws.repo,
        ws.repo
            .branch_tip(&id.branch())
            .map_err(crate::engine::agents::AgentError::from)?
            .ok_or_else(|| CliError::from(crate::engine::agents::AgentError::Unknown(id.to_string())))?,
    )
    .map_err(crate::engine::agents::AgentError::from)?;
    let (_, config) = ws.config(&facts.lineage)?;
    let reasoning = input::reasoning(&config, &facts.role, args.thinking, args.effort.as_deref())?;
    rt.deposit_choosing(&id, "user", &message, args.model.as_deref(), reasoning.as_ref())?;
    if !args.detach {
        // Drives here, or finds the driver that holds the agent and leaves it the message.
        return progress::attach(ctx, &ws, &id, false);
    }
    let woken = rt.wake(&id)?;
    if ctx.out.json {
        let driver = if matches!(woken, Woken::Running) { "running" } else { "started" };
        ctx.out.event(&serde_json::json!({"type": "sent", "agent": id.as_str(), "driver": driver}));
        return Ok(());
    }
    match woken {
        Woken::Running => ctx.out.progress(&format!("· delivered to `{id}`; its running driver will pick it up")),
        Woken::Launched(_) => ctx.out.progress(&format!("· delivered to `{id}`; a driver started")),
    }
    Ok(())
}
