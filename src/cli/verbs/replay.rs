use std::path::PathBuf;

use serde_json::json;

use crate::cli::{CliError, Ctx};
use engine::fleet::bundle;

/// Make a workspace from a bundle (`offshoot bundle`): its agents can be inspected
/// (`log`, `show --request`, `tree`) and driven further (`send`, `run`) with your keys
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The bundle file
    pub(crate) file: PathBuf,
    /// Where to make the workspace (default: a new one under the data root's
    /// `workspaces/`, named after the bundle)
    #[arg(long, value_name = "DIR")]
    pub(crate) into: Option<PathBuf>,
    /// Run the bundle's config lineages as they were bundled, their providers, MCP
    /// servers, tool environment and sandbox included (by default those are yours, and
    /// what differed is said)
    #[arg(long)]
    pub(crate) trust_config: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    if !args.file.is_file() {
        return Err(CliError::usage(format!("{}: there is no such file", args.file.display())));
    }
    let dest = match &args.into {
        Some(dir) => dir.clone(),
        None => fresh_place(ctx, &args.file),
    };
    let mine = ctx.template_config()?;
    let replayed = bundle::replay(&args.file, &dest, &mine, args.trust_config).map_err(super::bundle::error)?;
    let m = &replayed.manifest;
    let root = replayed.workspace.layout.root().to_owned();
    if ctx.out.json {
        let said = if args.trust_config { "config_taken" } else { "config_kept" };
        let config: Vec<serde_json::Value> =
            replayed.config.iter().map(|(l, keys)| json!({"lineage": l, "settings": keys})).collect();
        ctx.out.event(&json!({"type": "replayed", "workspace": root, "agent": m.agent, "agents": m.agents,
            "lineages": m.lineages, "made_by": m.made_by, said: config}));
        return Ok(());
    }
    super::sync::say_config(ctx, "the bundle", &replayed.config, args.trust_config);
    ctx.out.line(&root.display().to_string());
    // The bundle's words are someone else's: no control characters reach the terminal.
    let made_by: String = m.made_by.chars().filter(|c| !c.is_control()).take(80).collect();
    ctx.out.progress(&format!(
        "· {} from {} ({}); e.g. `offshoot -w {} log {}`, then `send` or `run` to go on with your keys",
        infra::words::count(m.agents.len() as u64, "agent", "agents"),
        args.file.display(),
        made_by,
        root.display(),
        m.agent
    ));
    Ok(())
}

/// `<data root>/workspaces/replay-<file stem>[-N]`, the first that does not exist.
fn fresh_place(ctx: &Ctx, file: &std::path::Path) -> PathBuf {
    let stem: String = file
        .file_stem()
        .map(|s| {
            s.to_string_lossy().chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).collect()
        })
        .unwrap_or_else(|| "bundle".into());
    let base = ctx.data_root.join("workspaces");
    (1..)
        .map(|n| base.join(if n == 1 { format!("replay-{stem}") } else { format!("replay-{stem}-{n}") }))
        .find(|p| std::fs::symlink_metadata(p).is_err())
        .unwrap_or_else(|| base.join("replay"))
}
