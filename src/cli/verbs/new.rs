use std::path::PathBuf;

use crate::cli::{CliError, Ctx};
use crate::engine::workspace::Workspace;

/// Create a workspace (a bare repository with the default config)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to create it (must not exist or be empty; default: the default workspace)
    pub path: Option<PathBuf>,
    /// Make it a project workspace: agents start from this git repository's HEAD and
    /// give their work back to it (`diff`, `export`, `apply`)
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let path =
        args.path.clone().or_else(|| ctx.explicit_workspace().cloned()).unwrap_or_else(|| ctx.default_workspace());
    let path = crate::cli::ctx::real(path);
    let ws = match &args.project {
        Some(dir) => {
            let user = crate::cli::ctx::project_at(dir, &[])?
                .ok_or_else(|| CliError::usage(format!("{} is not inside a git repository", dir.display())))?;
            Workspace::create_for_project(&path, &ctx.template()?, &user)?
        }
        None => Workspace::create(&path, &ctx.template()?)?,
    };
    if ctx.out.json {
        ctx.out.event(&serde_json::json!({"workspace": ws.layout.root().display().to_string()}));
        return Ok(());
    }
    ctx.out.line(&ws.layout.root().display().to_string());
    ctx.out.progress(&format!("· created workspace; use it with `offshoot -w {} prompt \"…\"`", path.display()));
    Ok(())
}
