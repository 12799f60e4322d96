use std::path::PathBuf;

use serde_json::json;

use crate::cli::{CliError, Ctx};
use engine::fleet::bundle::{self, BundleError};

/// Write an agent, the agents below it and the config it ran on to one file (no
/// secret goes in); `offshoot replay <file>` makes a workspace of it anywhere
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The agent's id or name
    #[arg(add = crate::cli::complete::agents_completer())]
    pub(crate) agent: String,
    /// The file to write (it must not exist)
    pub(crate) file: PathBuf,
    /// Also bundle the agent it was forked from
    #[arg(long)]
    pub(crate) with_origin: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = ctx.agent_named(&ws, Some(&args.agent))?;
    let made = bundle::make(&ws, &id, args.with_origin, &ctx.env, &args.file).map_err(error)?;
    let m = &made.manifest;
    if ctx.out.json {
        ctx.out.event(&json!({"type": "bundled", "file": args.file, "agents": m.agents, "lineages": m.lineages,
            "records": made.records, "bytes": made.bytes, "secrets_looked_for": m.secrets_looked_for}));
        return Ok(());
    }
    ctx.out.progress(&format!(
        "· bundled {} ({}), config lineage {}, {}: {} ({:.1} MiB)",
        infra::words::count(m.agents.len() as u64, "agent", "agents"),
        m.agents.join(", "),
        m.lineages.join(", "),
        infra::words::count(made.records as u64, "record or message file", "record and message files"),
        args.file.display(),
        made.bytes as f64 / 1_048_576.0
    ));
    let looked = if m.secrets_looked_for.is_empty() {
        "no secret is set here to look for".to_owned()
    } else {
        format!(
            "the values of {} were looked for in every object, record and message, and are not there",
            m.secrets_looked_for.join(", ")
        )
    };
    ctx.out.progress(&format!("· no secret in it: keys are never recorded; {looked}"));
    Ok(())
}

pub(crate) fn error(e: BundleError) -> CliError {
    match e {
        BundleError::Unknown(_) | BundleError::Exists(_) | BundleError::Secret { .. } | BundleError::Corrupt { .. } => {
            CliError::usage_from(e)
        }
        other => CliError::runtime_from(other),
    }
}
