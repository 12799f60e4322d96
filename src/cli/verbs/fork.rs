use crate::cli::{CliError, Ctx};
use crate::cli::{input, progress};
use engine::agents::{self, Start};
use engine::random_u32;
use infra::time::Timestamp;

/// Start a new agent that continues any commit of any agent, with a new message
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The commit to continue from: an agent id or name, `agents/<id>`, a sha, or git's
    /// `PeachHollow~2` (two commits back: commits, not steps; `--step` counts steps)
    #[arg(long)]
    pub(crate) from: String,
    /// Continue from before this step of the agent `--from` names (the commit its request
    /// was made from; steps as `show --step N` numbers them)
    #[arg(long)]
    pub(crate) step: Option<u32>,
    /// The new message (`-` reads it from stdin)
    pub(crate) message: std::ffi::OsString,
    /// A unique display name for the new agent
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Start the agent and return at once
    #[arg(long)]
    pub(crate) detach: bool,
    #[command(flatten)]
    pub(crate) choice: crate::cli::input::Choice,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    progress::watch_signals(ctx);
    let message = input::text(&args.message, "the message")?;
    let ws = ctx.workspace()?;
    // An agent id or name stands for its branch (`PeachHollow~2` works too); with
    // `--step N`, the commit step N of that agent was asked from.
    let from = match args.step {
        None => agents::revision(&ws, &args.from)?,
        Some(step) => {
            let id = agents::resolve(&ws, &args.from)?;
            let meta = engine::ops::inspect::step_meta(&ws, &id, step)?;
            if meta.commit.is_empty() {
                return Err(CliError::usage(format!("step {step} of `{id}` does not record where it began")));
            }
            meta.commit
        }
    };
    // (Thinking asked for is checked against the role the fork runs as: its source's.)
    let reasoning = match args.choice.asks_thinking() {
        true => {
            let facts = agents::facts_of(&ws, &from)?;
            args.choice.reasoning(&ws.config(&facts.lineage)?.1, &facts.role)?
        }
        false => None,
    };
    let spawn = Start {
        message: &message,
        name: args.name.as_deref(),
        now: Timestamp::now(),
        random: random_u32(),
        env: &ctx.env,
        project: None,
        model: args.choice.model.as_deref(),
        reasoning: reasoning.as_ref(),
        copy_ignored: &[],
        mode: None,
        on_ask: Some(super::prompt::on_ask_default(args.detach)),
    };
    let id = agents::fork(&ws, &from, &spawn)?;
    progress::launch(ctx, &ws, &id, args.detach, false)
}
