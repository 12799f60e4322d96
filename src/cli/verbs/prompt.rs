use crate::cli::{CliError, Ctx};
use crate::cli::{input, progress};
use engine::agents::ProjectStart;
use engine::ops::prompt::{self, Prompt, PromptError};

/// Start a new agent on a goal and watch it work
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The goal, as the agent's first message (`-` reads it from stdin)
    pub(crate) message: std::ffi::OsString,
    /// A unique display name (default: a minted two-word name)
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// The role to run as
    #[arg(long, default_value = "worker")]
    pub(crate) role: String,
    /// The config lineage to follow
    #[arg(long, default_value = "default")]
    pub(crate) lineage: String,
    /// Start the agent and return at once (its driver logs to steps/<id>/driver.log)
    #[arg(long)]
    pub(crate) detach: bool,
    /// In a project: the commit to start from (default: HEAD)
    #[arg(long, value_name = "REV")]
    pub(crate) base: Option<String>,
    /// In a project: take the uncommitted changes of your working tree along
    #[arg(long)]
    pub(crate) with_changes: bool,
    /// In a project: copy this ignored path of your checkout (`target`, `node_modules`)
    /// into the agent's directory, never into its history (repeatable)
    #[arg(long, value_name = "PATH")]
    pub(crate) copy_ignored: Vec<String>,
    /// Hand the agent to the workers of this remote (`offshoot worker`) instead of
    /// driving it here; `offshoot pull` brings its progress
    #[arg(long, value_name = "REMOTE", conflicts_with_all = ["detach", "copy_ignored"])]
    pub(crate) on: Option<String>,
    #[command(flatten)]
    pub(crate) choice: crate::cli::input::Choice,
    /// The permission mode to run in, in place of the role's: read-only, ask,
    /// workspace-write or full (its children run in it or a stricter one)
    #[arg(long, value_parser = crate::cli::input::mode)]
    pub(crate) mode: Option<domain::config::Mode>,
    /// When a call needs a yes: `wait` for an answer (`offshoot pending`, `approve`),
    /// `deny` it at once, or `fail` the run (default: wait on a terminal, else deny)
    #[arg(long, value_name = "WHAT", value_parser = crate::cli::input::on_ask)]
    pub(crate) on_ask: Option<domain::question::OnAsk>,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    progress::watch_signals(ctx);
    let message = input::text(&args.message, "the goal")?;
    let git_config = ctx.git_config_files();
    let asked = Prompt {
        message: &message,
        name: args.name.as_deref(),
        role: &args.role,
        lineage: &args.lineage,
        base: args.base.as_deref(),
        with_changes: args.with_changes,
        git_config: &git_config,
        copy_ignored: &args.copy_ignored,
        model: args.choice.model.as_deref(),
        reasoning: args.choice.asked(),
        on: args.on.as_deref(),
        env: &ctx.env,
        mode: args.mode,
        on_ask: Some(args.on_ask.unwrap_or_else(|| on_ask_default(args.detach))),
    };
    // A first prompt that would be refused makes no workspace.
    let ws = match ctx.existing_workspace()? {
        Some(ws) => ws,
        None => {
            prompt::check_unmade(&ctx.template()?, ctx.project_here()?.as_ref(), &asked).map_err(error)?;
            ctx.workspace_making()?
        }
    };
    let started = prompt::start(&ws, &asked).map_err(error)?;
    if let Some((start, left)) = &started.start {
        say_start(ctx, start, left, args.with_changes);
    }
    if started.left_out_harness_dir {
        ctx.out.note(
            None,
            "your project's own `.offshoot/` is left out of the agent's tree: only the harness writes there, and nothing in it reaches the model as yours",
        );
    }
    if !started.copied.is_empty() {
        ctx.out.progress(&format!(
            "· copying {} from your checkout into the agent's directory (never into its history)",
            started.copied.join(", ")
        ));
    }
    let id = &started.id;
    let Some(remote) = &started.handed else {
        return progress::launch(ctx, &ws, id, args.detach, true);
    };
    if ctx.out.json {
        ctx.out.event(&serde_json::json!({"type": "handed", "agent": id.as_str(), "remote": remote.name}));
    } else {
        ctx.out.line(id.as_str());
        ctx.out.progress(&format!(
            "· `{id}` is on `{}` for its workers to drive; `offshoot pull {}` brings its progress here",
            remote.name, remote.name
        ));
    }
    Ok(())
}

/// What the user reads when an agent cannot be started.
fn error(e: PromptError) -> CliError {
    match e {
        PromptError::Remote(e) => super::sync::error(e),
        PromptError::Workspace(e) => e.into(),
        PromptError::Model(e) => e.into(),
        PromptError::Project(e) => e.into(),
        PromptError::Agent(e) => e.into(),
        PromptError::Reasoning { ref role, ref asked, ref rule } => {
            let message = format!("{}: {rule} (role `{role}`)", input::Choice::flag(asked));
            CliError::usage_error(message, e)
        }
        PromptError::Unpriced { ref model } => {
            let key = format!("prices.\"{model}\"");
            CliError::usage_from(e).hint(format!(
                "`offshoot config set {key}.input 3 {key}.output 15` prices it (US dollars per million tokens)"
            ))
        }
        PromptError::CopyIgnored { .. } => {
            let message = format!("--copy-ignored {e}");
            CliError::usage_error(message, e)
        }
        PromptError::CopyIgnoredOutsideProject => CliError::usage_error(
            "--copy-ignored copies from your checkout: it is for a project (run offshoot in a git checkout)",
            e,
        ),
        PromptError::CopyIgnoredUnread(_) => CliError::runtime_from(e),
        PromptError::NotCopied { ref ignored, .. } => {
            let shown: Vec<&str> = ignored.iter().take(8).map(String::as_str).collect();
            let listed = if shown.is_empty() { "none".to_owned() } else { shown.join(", ") };
            let message = format!("--copy-ignored {e}");
            CliError::usage_error(message, e).hint(format!("ignored there: {listed}"))
        }
    }
}

/// Says where in the project the agent starts, and which uncommitted changes stay
/// behind (or go along).
fn say_start(ctx: &Ctx, start: &ProjectStart, left: &[String], with_changes: bool) {
    let short = &start.base.to_string()[..12];
    let list = |paths: &[String]| {
        let shown: Vec<&str> = paths.iter().take(5).map(String::as_str).collect();
        let more = if paths.len() > 5 { format!(" and {} more", paths.len() - 5) } else { String::new() };
        format!("{}{more}", shown.join(", "))
    };
    if with_changes && !start.changes.is_empty() {
        let paths: Vec<String> = start.changes.iter().map(|(p, _)| p.clone()).collect();
        ctx.out.note(None, &format!("starting from {short} with your uncommitted changes: {}", list(&paths)));
    } else if !left.is_empty() {
        ctx.out.note(
            None,
            &format!(
                "starting from {short}; your uncommitted changes are not included ({}); `--with-changes` takes them along",
                list(left)
            ),
        );
    }
}

/// What a run does when a call needs a yes, unless told: wait when someone follows it
/// who can answer (a terminal on both ends, the run not detached), else deny at once.
pub(crate) fn on_ask_default(detach: bool) -> domain::question::OnAsk {
    use std::io::IsTerminal;
    match !detach && std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        true => domain::question::OnAsk::Wait,
        false => domain::question::OnAsk::Deny,
    }
}
