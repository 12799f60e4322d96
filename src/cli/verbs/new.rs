use std::path::PathBuf;

use crate::cli::{CliError, Ctx};
use engine::store::workspace::Workspace;

/// Create a workspace (a bare repository with the default config)
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where to create it (must not exist or be empty; default: the default workspace)
    pub(crate) path: Option<PathBuf>,
    /// Make it a project workspace: agents start from this git repository's HEAD and
    /// give their work back to it (`diff`, `export`, `apply`)
    #[arg(long, value_name = "DIR")]
    pub(crate) project: Option<PathBuf>,
    /// Make it a copy of what a remote holds (its agents, config lineages and step
    /// records), with the remote as `origin`: a workspace for `offshoot worker`, or to
    /// inspect a fleet's agents from
    #[arg(long, value_name = "URL", conflicts_with = "project")]
    pub(crate) from: Option<String>,
    /// With `--from`: run the remote's config lineages as pushed, its providers, MCP
    /// servers, tool environment and sandbox included (by default those are yours)
    #[arg(long, requires = "from")]
    pub(crate) trust_config: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let path =
        args.path.clone().or_else(|| ctx.explicit_workspace().cloned()).unwrap_or_else(|| ctx.default_workspace());
    let path = crate::cli::ctx::real(path);
    if let Some(url) = &args.from {
        return from_remote(ctx, &path, url, args.trust_config);
    }
    if let Some(refused) = taken(ctx, &path, args.path.is_none() && ctx.explicit_workspace().is_none()) {
        return Err(refused);
    }
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

/// Why `path` cannot become a new workspace (a file, a workspace already, a directory
/// with things in it), said with what to do instead; `default`: it is the default one.
fn taken(ctx: &Ctx, path: &std::path::Path, default: bool) -> Option<CliError> {
    let shown = path.display();
    if path.exists() && !path.is_dir() {
        return Some(CliError::usage(format!("`{shown}` is a file")).hint("give a new or empty directory"));
    }
    if ctx.looks_made(path) {
        let ls = if default { "`offshoot ls`".to_owned() } else { format!("`offshoot -w {shown} ls`") };
        return Some(
            CliError::usage(format!("there is a workspace at {shown} already"))
                .hint(format!("{ls} lists its agents; `offshoot new DIR` makes another elsewhere")),
        );
    }
    None
}

/// `new --from <url>`: a workspace holding what the remote holds, refused with nothing
/// left behind when the remote cannot be read or holds no config lineage.
fn from_remote(ctx: &Ctx, path: &std::path::Path, url: &str, trust: bool) -> Result<(), CliError> {
    let template = ctx.template_config()?;
    if let Some(problem) = super::remote::url_problem(url) {
        return Err(CliError::usage(format!("remote URL `{url}` {problem}")));
    }
    if std::fs::read_dir(path).is_ok_and(|mut d| d.next().is_some()) {
        return Err(CliError::usage(format!("{} exists and is not empty", path.display())));
    }
    if let Some(what) = infra::git::remote::unsupported(url) {
        let url = infra::git::remote::shown_url(url);
        return Err(super::sync::error(engine::fleet::remote::RemoteError::Unsupported {
            name: "origin".into(),
            url,
            what,
        }));
    }
    let existed = path.exists();
    let made = (|| -> Result<(Workspace, engine::fleet::remote::Pulled), CliError> {
        let ws = Workspace::create_bare(path)?;
        let git = |e: infra::git::GitError| CliError::runtime_from(e);
        ws.repo.add_remote("origin", url).map_err(git)?;
        let remote = engine::fleet::remote::Remote { name: "origin".into(), url: url.to_owned() };
        let config = engine::fleet::remote::ConfigFrom { template: &template, trust };
        let pulled = engine::fleet::remote::pull(&ws, &remote, true, config).map_err(super::sync::error)?;
        if ws.repo.branches("config/").map_err(git)?.is_empty() {
            return Err(CliError::runtime(format!("`{url}` holds no config lineage: nothing could run here"))
                .hint("`offshoot push` from a workspace sends its config lineages with its agents"));
        }
        Ok((ws, pulled))
    })();
    let (ws, pulled) = match made {
        Ok(made) => made,
        Err(e) => {
            engine::store::workspace::unmake(path, existed);
            return Err(e);
        }
    };
    super::sync::report_pulled(ctx, "origin", &pulled, trust);
    if ctx.out.json {
        ctx.out.event(&serde_json::json!({"workspace": ws.layout.root().display().to_string()}));
        return Ok(());
    }
    ctx.out.line(&ws.layout.root().display().to_string());
    ctx.out.progress(&format!(
        "· made from `{url}` (remote `origin`); `offshoot -w {} ls` lists its agents",
        path.display()
    ));
    Ok(())
}
