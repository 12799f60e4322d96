use std::io::IsTerminal;

use crate::cli::{CliError, Ctx};
use engine::ops::project;

/// Show an agent's change to the project against where it started, committed with its
/// git or not, as a unified diff
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) agent: crate::cli::input::AgentArg,
    /// Only the files changed and the lines added and removed
    #[arg(long)]
    pub(crate) stat: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = args.agent.resolve(ctx, &ws)?;
    let text = project::diff(&ws, &id, args.stat)?;
    if ctx.out.json {
        ctx.out.event(&serde_json::json!({"agent": id.as_str(), "diff": text}));
        return Ok(());
    }
    if text.is_empty() {
        ctx.out.progress(&format!("· `{id}` has changed nothing"));
        return Ok(());
    }
    let colour = std::io::stdout().is_terminal() && ctx.env.get("NO_COLOR").is_none();
    if !colour || args.stat {
        ctx.out.stream(&text);
        return Ok(());
    }
    for line in text.lines() {
        let code = match line.as_bytes().first() {
            _ if line.starts_with("+++") || line.starts_with("---") || line.starts_with("diff ") => "1",
            Some(b'+') => "32",
            Some(b'-') => "31",
            Some(b'@') => "36",
            _ => "",
        };
        if code.is_empty() {
            ctx.out.stream(&format!("{line}\n"));
        } else {
            ctx.out.styled_line(code, line);
        }
    }
    Ok(())
}
