use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::cli::{CliError, Ctx};
use crate::domain::config::{Config, FILE};
use crate::engine::workspace::{Workspace, set_key};
use crate::infra::process::{self, Group, Spec};

/// Show, edit, set or validate the config (each change is a commit on its lineage)
#[derive(Debug, clap::Subcommand)]
pub enum Args {
    /// Print offshoot.toml at the lineage tip
    Show(Lineage),
    /// Edit offshoot.toml in $EDITOR and commit the result if it is valid
    Edit(Lineage),
    /// Set dotted keys (e.g. `providers.anthropic.base_url URL`) and commit them as one change
    Set {
        /// KEY VALUE pairs; a value is TOML (`42`, `true`, `["a"]`) if it parses, else a string
        #[arg(num_args = 2.., value_names = ["KEY", "VALUE"], required = true)]
        pairs: Vec<String>,
        #[command(flatten)]
        lineage: Lineage,
    },
    /// Check the lineage's config, or a file, against every rule
    Validate {
        /// A file to check instead of the lineage tip
        #[arg(long)]
        file: Option<PathBuf>,
        #[command(flatten)]
        lineage: Lineage,
    },
}

#[derive(Debug, clap::Args)]
pub struct Lineage {
    /// The config lineage
    #[arg(long, default_value = "default")]
    pub lineage: String,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    match args {
        Args::Show(l) => {
            let tip = ws.config_tip(&l.lineage)?;
            ctx.out.stream(&ws.config_text_at(tip)?);
            Ok(())
        }
        Args::Edit(l) => edit(ctx, &ws, &l.lineage),
        Args::Set { pairs, lineage } => {
            if pairs.len() % 2 != 0 {
                return Err(CliError::usage("`config set` takes KEY VALUE pairs; the last key has no value"));
            }
            let tip = ws.config_tip(&lineage.lineage)?;
            let mut text = ws.config_text_at(tip)?;
            let mut keys = Vec::new();
            for pair in pairs.chunks(2) {
                text = set_key(&text, &pair[0], &pair[1]);
                keys.push(pair[0].as_str());
            }
            commit(ctx, &ws, &lineage.lineage, text, &format!("config: set {}", keys.join(", ")))
        }
        Args::Validate { file, lineage } => match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?;
                let tip = ws.config_tip(&lineage.lineage)?;
                let has = |p: &str| ws.config_file(tip, p).ok().flatten().is_some();
                Config::parse(&text, &has).map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
                ctx.out.progress(&format!("· {} is valid", path.display()));
                Ok(())
            }
            None => {
                ws.config(&lineage.lineage)?;
                ctx.out.progress(&format!("· config lineage `{}` is valid", lineage.lineage));
                Ok(())
            }
        },
    }
}

fn commit(ctx: &Ctx, ws: &Workspace, lineage: &str, text: String, message: &str) -> Result<(), CliError> {
    match ws.commit_config(lineage, &vec![(FILE.to_owned(), text.into_bytes())], message)? {
        Some(commit) => {
            ctx.out.line(&commit.to_string());
            ctx.out.progress(&format!("· committed to config/{lineage}; running agents follow it at their next step"));
        }
        None => ctx.out.progress("· nothing changed; nothing was committed"),
    }
    Ok(())
}

fn edit(ctx: &Ctx, ws: &Workspace, lineage: &str) -> Result<(), CliError> {
    let editor = ctx.env.get("VISUAL").or(ctx.env.get("EDITOR")).unwrap_or("vi").to_owned();
    let tip = ws.config_tip(lineage)?;
    let before = ws.config_text_at(tip)?;
    let path = std::env::temp_dir().join(format!("offshoot-{lineage}-{}.toml", std::process::id()));
    std::fs::write(&path, &before).map_err(|e| CliError::runtime(format!("cannot write {}: {e}", path.display())))?;
    let script = format!("{editor} \"$1\"");
    let args = [OsStr::new("-c"), OsStr::new(&script), OsStr::new("sh"), path.as_os_str()];
    let env: Vec<(String, String)> = ctx.env.vars().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let spec = Spec {
        program: Path::new("/bin/sh"),
        args: &args,
        cwd: &cwd,
        env: &env,
        group: Group::Terminal,
        stdin: None,
        sandbox: None,
        pgid_record: None,
    };
    let status =
        process::run_attached(&spec).map_err(|e| CliError::runtime(format!("cannot start editor `{editor}`: {e}")))?;
    if !status.success() {
        let _ = std::fs::remove_file(&path);
        return Err(CliError::runtime(format!("editor `{editor}` ended with {status}; nothing was committed")));
    }
    let after = std::fs::read_to_string(&path)
        .map_err(|e| CliError::runtime(format!("cannot read {}: {e}", path.display())))?;
    match commit(ctx, ws, lineage, after, "config: edit") {
        Ok(()) => {
            let _ = std::fs::remove_file(&path);
            Ok(())
        }
        Err(e) => {
            Err(e.hint(format!("your edit is kept in {}; fix it and run `offshoot config edit` again", path.display())))
        }
    }
}
