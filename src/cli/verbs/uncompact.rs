use serde_json::json;

use crate::cli::{CliError, Ctx};
use engine::agents;
use engine::step::compaction;

/// Undo a landed compaction: what it removed comes back as a new commit (the summary
/// stays)
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The agent's id or name
    #[arg(add = crate::cli::complete::agents_completer())]
    pub(crate) agent: String,
    /// Which compaction (1 is the first); the last when left out
    pub(crate) number: Option<u32>,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = agents::resolve(&ws, &args.agent)?;
    let (landing, restored) = compaction::uncompact(&ws, &id, args.number)?;
    if ctx.out.json {
        ctx.out.event(&json!({"type": "uncompacted", "agent": id.as_str(), "number": landing.number,
            "restored": restored}));
    } else {
        ctx.out.progress(&format!(
            "· compaction {} of `{id}` undone: {restored} files back (its summary {} stays)",
            landing.number, landing.summary
        ));
    }
    Ok(())
}
