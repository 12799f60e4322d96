use crate::cli::{CliError, Ctx};
use engine::ops::project;

/// Put an agent's work on a branch of your repository (its commits plus one of its
/// uncommitted work); your HEAD, index, working tree and other branches stay as they are
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) agent: crate::cli::input::AgentArg,
    /// The branch to create or fast-forward (default: offshoot/<name>)
    #[arg(long)]
    pub(crate) branch: Option<String>,
    /// Move the branch even when the work does not build on it
    #[arg(long)]
    pub(crate) force: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = args.agent.resolve(ctx, &ws)?;
    let author = ws.user_repo()?.and_then(|u| u.identity(&ctx.git_config_files()));
    let done = project::export(&ws, &id, args.branch.as_deref(), args.force, author.as_ref())?;
    let branch = &done.branch;
    if ctx.out.json {
        ctx.out.event(&serde_json::json!({"agent": id.as_str(), "branch": branch, "commit": done.commit.to_string(),
            "previous": done.previous.map(|p| p.to_string()), "uncommitted": done.uncommitted,
            "base": done.base.to_string()}));
        return Ok(());
    }
    ctx.out.line(&done.commit.to_string());
    let what = match done.previous {
        None => format!("created `{branch}`"),
        Some(p) if p == done.commit => format!("`{branch}` is already there"),
        Some(_) if args.force => format!("moved `{branch}`"),
        Some(_) => format!("fast-forwarded `{branch}`"),
    };
    let extra = if done.uncommitted { " (with one commit of its uncommitted work)" } else { "" };
    ctx.out.progress(&format!("· {what} at {}{extra}", &done.commit.to_string()[..12]));
    ctx.out.progress(&format!(
        "· review: `git log -p {}..{branch}`; take it: `git merge {branch}`",
        &done.base.to_string()[..12]
    ));
    Ok(())
}
