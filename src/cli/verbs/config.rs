use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::cli::{CliError, Ctx};
use domain::config::{Config, FILE};
use engine::store::workspace::{Workspace, WorkspaceError};
use infra::process::{self, Group, Spec};

/// Show, edit, set or validate the config (each change is a commit on its lineage)
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Args {
    /// Print offshoot.toml at the lineage tip
    Show(Lineage),
    /// Edit a file of the config tree in $EDITOR (offshoot.toml unless a path is given,
    /// e.g. `souls/reviewer.md`, made if new) and commit the result if the config is valid
    Edit {
        /// The file, relative to the config tree
        path: Option<String>,
        #[command(flatten)]
        lineage: Lineage,
        /// Edit your template (the files every new workspace's config starts from)
        /// instead of a lineage
        #[arg(long)]
        template: bool,
    },
    /// Set dotted keys (e.g. `providers.anthropic.base_url URL`) and commit them as one change
    Set {
        /// KEY VALUE pairs; a value is TOML (`42`, `true`, `["a"]`) if it parses, else a string
        #[arg(num_args = 2.., value_names = ["KEY", "VALUE"], required = true, allow_negative_numbers = true)]
        pairs: Vec<String>,
        #[command(flatten)]
        lineage: Lineage,
    },
    /// Remove dotted keys (e.g. `budgets.max_cost_usd`), leaving what their defaults say,
    /// and commit that as one change
    Unset {
        /// The keys
        #[arg(value_name = "KEY", required = true)]
        keys: Vec<String>,
        #[command(flatten)]
        lineage: Lineage,
    },
    /// List the hooks and rules your project's files carry (`.claude/settings.json`,
    /// `.offshoot/offshoot.toml`) and whether you trust them as they are: only trusted
    /// content runs, and a file changed since needs trust again
    Trust {
        /// Trust them as they are now (with the files their hooks run)
        #[arg(long)]
        accept: bool,
    },
    /// Bring the hooks and permission rules of a Claude Code `settings.json` into the
    /// lineage's config, after its own, as one commit (checked like `config set`)
    Import {
        /// The settings file (`~/.claude/settings.json`, a project's `.claude/settings.json`)
        file: PathBuf,
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
pub(crate) struct Lineage {
    /// The config lineage
    #[arg(long, default_value = "default")]
    pub(crate) lineage: String,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    if let Args::Edit { path, template, .. } = args {
        let file = path.as_deref().unwrap_or(FILE);
        // The template is edited when asked, and when it is what stands in the way: a
        // broken one makes no workspace, so there is no lineage to edit yet.
        if *template || (ctx.existing_workspace()?.is_none() && ctx.template().is_err()) {
            return edit_template(ctx, file);
        }
    }
    // Changing the config makes the workspace if need be; reading it never does.
    let ws = match args {
        Args::Show(_) | Args::Validate { .. } | Args::Trust { .. } => ctx.workspace()?,
        Args::Edit { .. } | Args::Set { .. } | Args::Unset { .. } | Args::Import { .. } => ctx.workspace_making()?,
    };
    match args {
        Args::Show(l) => {
            let tip = ws.config_tip(&l.lineage)?;
            let text = ws.config_text_at(tip)?;
            if !ctx.out.json {
                ctx.out.stream(&text);
                return Ok(());
            }
            // As JSON: the TOML's tables and values (even when a rule is broken).
            let config: toml::Table = toml::from_str(&text)
                .map_err(|e| CliError::usage(format!("{FILE} at config/{} is not TOML: {e}", l.lineage)))?;
            ctx.out.event(&json!({"lineage": l.lineage, "commit": tip.to_string(), "config": config}));
            Ok(())
        }
        Args::Edit { path, lineage, .. } => edit(ctx, &ws, &lineage.lineage, path.as_deref().unwrap_or(FILE)),
        Args::Trust { accept } => trust(ctx, &ws, *accept),
        Args::Import { file, lineage } => import(ctx, &ws, file, &lineage.lineage),
        Args::Set { pairs, lineage } => {
            if pairs.len() % 2 != 0 {
                return Err(CliError::usage("`config set` takes KEY VALUE pairs; the last key has no value"));
            }
            let pairs: Vec<(&str, &str)> = pairs.chunks(2).map(|p| (p[0].as_str(), p[1].as_str())).collect();
            let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
            let set = ws
                .set_config_keys(&lineage.lineage, &pairs, &format!("config: set {}", keys.join(", ")))
                .map_err(unchanged)?;
            for role in &set.souls_added {
                ctx.out.progress(&format!(
                    "· new role `{role}` got the worker's soul as souls/{role}.md (`offshoot config edit souls/{role}.md` changes it)"
                ));
            }
            let souls: Vec<String> = set.souls_added.iter().map(|r| format!("souls/{r}.md")).collect();
            said_committed(ctx, &lineage.lineage, set.commit, &souls);
            Ok(())
        }
        Args::Unset { keys, lineage } => {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let set = ws
                .unset_config_keys(&lineage.lineage, &keys, &format!("config: unset {}", keys.join(", ")))
                .map_err(unchanged)?;
            said_committed(ctx, &lineage.lineage, set.commit, &[]);
            Ok(())
        }
        Args::Validate { file, lineage } => {
            let (subject, checked) = match file {
                Some(path) => {
                    let text = std::fs::read_to_string(path)
                        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?;
                    let tip = ws.config_tip(&lineage.lineage)?;
                    let has = |p: &str| ws.config_file(tip, p).ok().flatten().is_some();
                    let checked = Config::parse(&text, &has).map(|_| ()).map_err(|e| {
                        let message = format!("{}: {e}", path.display());
                        (Some(e), CliError::usage(message))
                    });
                    (path.display().to_string(), checked)
                }
                None => {
                    let checked = ws.config(&lineage.lineage).map(|_| ()).map_err(|e| match e {
                        WorkspaceError::Config(c) => (Some(c.clone()), WorkspaceError::Config(c).into()),
                        other => (None, other.into()),
                    });
                    (format!("config lineage `{}`", lineage.lineage), checked)
                }
            };
            match checked {
                Ok(()) if ctx.out.json => ctx.out.event(&json!({"valid": true, "checked": subject})),
                Ok(()) => ctx.out.progress(&format!("· {subject} is valid")),
                // A config that breaks a rule is the answer, not a failure to answer.
                Err((Some(broken), err)) => {
                    if ctx.out.json {
                        ctx.out.event(&json!({"valid": false, "checked": subject, "error": broken,
                            "message": err.message()}));
                        ctx.out.ended();
                    }
                    return Err(err);
                }
                Err((None, err)) => return Err(err),
            }
            Ok(())
        }
    }
}

/// Prints the commit (or that nothing changed); with `--json`, one object saying so and
/// which soul files were added.
fn said_committed(ctx: &Ctx, lineage: &str, commit: Option<infra::git::CommitId>, added: &[String]) {
    if ctx.out.json {
        let commit = commit.map(|c| c.to_string());
        ctx.out.event(&json!({"lineage": lineage, "commit": commit, "changed": commit.is_some(), "added": added}));
        return;
    }
    match commit {
        Some(commit) => {
            let short = &commit.to_string()[..12];
            ctx.out.progress(&format!(
                "· committed {short} to config/{lineage}; running agents follow it at their next step"
            ));
        }
        None => ctx.out.progress("· nothing changed; nothing was committed"),
    }
}

/// Refuses a path that is not inside the config tree.
fn inside_tree(file: &str) -> Result<(), CliError> {
    if file.is_empty() || file.starts_with('/') || file.split('/').any(|p| p == ".." || p.is_empty()) {
        return Err(CliError::usage(format!(
            "`{file}` is not a path inside the config tree (e.g. `souls/reviewer.md`)"
        )));
    }
    Ok(())
}

/// Opens `path` in the user's editor and waits for it.
fn run_editor(ctx: &Ctx, path: &Path) -> Result<(), CliError> {
    let editor = ctx.env.get("VISUAL").or(ctx.env.get("EDITOR")).unwrap_or("vi").to_owned();
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
    match status.success() {
        true => Ok(()),
        false => Err(CliError::runtime(format!("editor `{editor}` ended with {status}; nothing was committed"))),
    }
}

/// `config edit --template`: a file of the user's template, in place (it is the user's
/// own file, not a commit), made from the embedded default if new; checked after.
fn edit_template(ctx: &Ctx, file: &str) -> Result<(), CliError> {
    inside_tree(file)?;
    let path = ctx.template_dir().join(file);
    if !path.is_file() {
        let default = engine::store::workspace::template_files(None)?
            .into_iter()
            .find(|(p, _)| p == file)
            .map(|(_, b)| b)
            .unwrap_or_default();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| CliError::runtime(format!("cannot make {}: {e}", dir.display())))?;
        }
        std::fs::write(&path, default)
            .map_err(|e| CliError::runtime(format!("cannot write {}: {e}", path.display())))?;
    }
    ctx.out.progress(&format!("· editing your template: {}", path.display()));
    run_editor(ctx, &path)?;
    ctx.template()?;
    ctx.out.progress("· your template is valid; new workspaces start from it");
    Ok(())
}

fn edit(ctx: &Ctx, ws: &Workspace, lineage: &str, file: &str) -> Result<(), CliError> {
    inside_tree(file)?;
    let tip = ws.config_tip(lineage)?;
    let before = ws.config_file(tip, file)?.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    // An edit that could not be committed waits here for the next `config edit`.
    let path = ws.layout.root().join("tmp").join(format!("config-edit-{lineage}-{}", file.replace('/', "--")));
    let resumed = path.is_file();
    if resumed {
        ctx.out.progress(&format!(
            "· opening your earlier edit that was not committed ({}; delete it to start over)",
            path.display()
        ));
    } else {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| CliError::runtime(format!("cannot make {}: {e}", dir.display())))?;
        }
        std::fs::write(&path, &before)
            .map_err(|e| CliError::runtime(format!("cannot write {}: {e}", path.display())))?;
    }
    let again = if file == FILE { String::new() } else { format!(" {file}") };
    // The generic "config edit opens it" hint would point at the tip, not at the kept text.
    let keep = |mut e: CliError| {
        e.hints.clear();
        e.hint(format!(
            "your text is kept in {}; `offshoot config edit{again}` opens it again to fix (delete the file to discard it)",
            path.display()
        ))
    };
    run_editor(ctx, &path).map_err(keep)?;
    let after = std::fs::read_to_string(&path)
        .map_err(|e| CliError::runtime(format!("cannot read {}: {e}", path.display())))?;
    let committed =
        ws.commit_config(lineage, &vec![(file.to_owned(), after.into_bytes())], &format!("config: edit {file}"));
    match committed {
        Ok(None) if ws.config_at(tip).is_err() => {
            // Saved unchanged, and the tip itself is broken (by hand): say so.
            let broken = ws.config_at(tip).err().map(|e| e.to_string()).unwrap_or_default();
            Err(keep(CliError::usage(format!("nothing changed, and the config is still not valid: {broken}"))))
        }
        Ok(commit) => {
            let _ = std::fs::remove_file(&path);
            said_committed(ctx, lineage, commit, &[]);
            Ok(())
        }
        Err(e) => Err(keep(e.into())),
    }
}

/// A refused change's error: the tip is as it was, nothing to fix there.
fn unchanged(e: WorkspaceError) -> CliError {
    let mut err = CliError::from(e);
    if err.exit_code() == 2 {
        err.hints = vec!["nothing was committed; the config is as it was".into()];
    }
    err
}

/// `config trust`: the project's files that carry hooks or rules, and trusting them.
fn trust(ctx: &Ctx, ws: &engine::store::workspace::Workspace, accept: bool) -> Result<(), CliError> {
    use engine::store::trust::{self, Standing};
    let files = trust::found(ws);
    if files.is_empty() {
        ctx.out
            .line("no project file here carries hooks or rules (`.claude/settings.json`, `.offshoot/offshoot.toml`)");
        return Ok(());
    }
    for file in &files {
        let trusted = accept && file.carried.is_ok() && file.standing != Standing::Trusted;
        if trusted {
            trust::trust(ws, file)
                .map_err(|e| CliError::runtime(format!("cannot keep the trust of {}: {e}", file.path)))?;
        }
        if ctx.out.json {
            let standing = if trusted { Standing::Trusted } else { file.standing };
            let problem = file.carried.as_ref().err();
            ctx.out.event(&json!({"file": file, "standing": standing, "problem": problem}));
            continue;
        }
        let standing = match (trusted, file.standing) {
            (true, _) => "trusted now, as it is".to_owned(),
            (_, Standing::Trusted) => "trusted as it is".to_owned(),
            (_, Standing::Changed) => "changed since you trusted it: does not run".to_owned(),
            (_, Standing::New) => "not trusted: does not run".to_owned(),
        };
        ctx.out.line(&format!("{}  {standing}", file.path));
        match &file.carried {
            Err(problem) => ctx.out.line(&format!("  does not read: {problem}")),
            Ok(c) => {
                // Every command and rule whole and escaped: what is trusted is what is shown.
                let literal = crate::cli::out::literal;
                for (event, commands) in c.hooks.keys().map(|e| (e, domain::hooks::commands_of(&c.hooks, e))) {
                    for command in commands {
                        ctx.out.line(&format!("  hook {event}: {}", literal(command)));
                    }
                }
                let p = &c.permissions;
                for (word, list) in [("deny", &p.deny), ("ask", &p.ask), ("allow", &p.allow)] {
                    if !list.is_empty() {
                        let rules: Vec<String> = list.iter().map(|r| literal(r)).collect();
                        ctx.out.line(&format!("  {word}: {}", rules.join(", ")));
                    }
                }
                if !file.named.is_empty() {
                    let named: Vec<String> = file.named.iter().map(|n| crate::cli::out::literal(n)).collect();
                    ctx.out.line(&format!("  runs: {}", named.join(", ")));
                }
            }
        }
    }
    if !accept && files.iter().any(|f| f.standing != Standing::Trusted) {
        ctx.out.progress("· `offshoot config trust --accept` trusts them as they are now");
    }
    Ok(())
}

/// `config import`: a Claude Code settings file's hooks and rules, after the lineage's own.
fn import(ctx: &Ctx, ws: &engine::store::workspace::Workspace, file: &Path, lineage: &str) -> Result<(), CliError> {
    let bytes = std::fs::read(file).map_err(|e| CliError::usage(format!("cannot read {}: {e}", file.display())))?;
    let shown = file.display().to_string();
    let carried = domain::trust::read(&format!("{shown}.json"), &bytes).map_err(CliError::usage)?;
    let (_, config) = ws.config(lineage)?;
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (event, groups) in &carried.hooks {
        let mut all = config.hooks.get(event).cloned().unwrap_or_default();
        let new: Vec<_> = groups.iter().filter(|g| !all.contains(g)).cloned().collect();
        if new.is_empty() {
            continue;
        }
        all.extend(new);
        let value =
            toml::Value::try_from(&all).map_err(|e| CliError::runtime(format!("cannot write the hooks: {e}")))?;
        pairs.push((format!("hooks.{event}"), value.to_string()));
    }
    let (mine, theirs) = (&config.permissions, &carried.permissions);
    for (word, have, add) in
        [("allow", &mine.allow, &theirs.allow), ("ask", &mine.ask, &theirs.ask), ("deny", &mine.deny, &theirs.deny)]
    {
        if add.iter().all(|r| have.contains(r)) {
            continue;
        }
        let mut all = have.clone();
        all.extend(add.iter().filter(|r| !have.contains(r)).cloned());
        pairs.push((
            format!("permissions.{word}"),
            toml::Value::try_from(&all).map(|v| v.to_string()).unwrap_or_default(),
        ));
    }
    if pairs.is_empty() {
        ctx.out.line(&format!("{shown} adds no hook or rule the lineage does not have already"));
        return Ok(());
    }
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let set = ws
        .set_config_keys(lineage, &pairs, &format!("config: import hooks and rules of {shown}"))
        .map_err(unchanged)?;
    said_committed(ctx, lineage, set.commit, &[]);
    Ok(())
}
