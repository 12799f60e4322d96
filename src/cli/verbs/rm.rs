use serde_json::json;

use crate::cli::{CliError, Ctx};
use engine::ops::removal::{self, RemovalError};

/// Remove an agent for good: its branch, directory, its git, step records and name
/// (export or apply its work first to keep it); `--tree` removes the agents below it too
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The agent's id or name
    #[arg(add = crate::cli::complete::agents_completer())]
    pub(crate) agent: String,
    /// Also remove every agent below it (required when it has any)
    #[arg(long)]
    pub(crate) tree: bool,
    /// Stop it (and those below) first, if running; without it a running agent is refused
    #[arg(long)]
    pub(crate) stop: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = ctx.agent_named(&ws, Some(&args.agent))?;
    if engine::fleet::remote::handed(&ws, &id) {
        return Err(CliError::usage(format!(
            "agent `{id}` is driven by the workers of a remote: removed here, the next `pull` would bring it back; nothing was removed"
        ))
        .hint("`offshoot stop --on <remote>` stops it there"));
    }
    let gone = removal::remove(&ws, &ctx.runtime(&ws), &id, args.tree, args.stop).map_err(|e| match e {
        RemovalError::Below { .. } => {
            CliError::usage_from(e).hint(format!("`offshoot rm {} --tree` removes them too", args.agent))
        }
        RemovalError::Running { .. } => CliError::usage(format!("{e}; nothing was removed"))
            .hint(format!("`offshoot rm {} --stop` stops it first", args.agent)),
        RemovalError::Left { .. } => {
            CliError::runtime_from(e).hint(format!("`offshoot rm {}` again removes what is left", args.agent))
        }
        RemovalError::Agent(e) => e.into(),
    })?;
    for g in &gone {
        let name = g.name.as_deref().unwrap_or("");
        if ctx.out.json {
            ctx.out.event(&json!({"type": "removed", "agent": g.id.as_str(), "name": g.name, "steps": g.steps}));
        } else {
            ctx.out.progress(&format!(
                "· removed `{name}` ({}): {} steps, its branch and name, its directory and git, its records",
                g.id, g.steps
            ));
        }
    }
    Ok(())
}
