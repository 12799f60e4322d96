use crate::cli::{CliError, Ctx};
use crate::cli::{input, progress};
use engine::agents::ProjectStart;
use engine::agents::{self, Start};
use engine::{ops::project, random_u32, step::model};
use infra::time::Timestamp;

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
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    progress::watch_signals(ctx);
    let message = input::text(&args.message, "the goal")?;
    let ws = ctx.workspace_making()?;
    let fleet = match &args.on {
        Some(name) => Some(engine::fleet::remote::resolve(&ws, Some(name)).map_err(super::sync::error)?),
        None => None,
    };
    let (_, config) = ws.config(&args.lineage)?;
    // A missing key or an unknown role is refused before anything is created (and
    // so is a sandbox this kernel cannot enforce, by the engine).
    model::plan(&config, &args.lineage, &args.role, &ctx.env)?;
    let reasoning = args.choice.reasoning(&config, &args.role)?;
    // Work taken along is the user's own commit, authored as git would author it.
    let author = ws.user_repo()?.and_then(|u| u.identity(&ctx.git_config_files()));
    let start = project::start_point(&ws, args.base.as_deref(), args.with_changes, author.as_ref())?;
    check_copy_ignored(ctx, &ws, &args.copy_ignored)?;
    if let Some((start, left)) = &start {
        say_start(ctx, start, left, args.with_changes);
    }
    let spawn = Start {
        message: &message,
        name: args.name.as_deref(),
        now: Timestamp::now(),
        random: random_u32(),
        env: &ctx.env,
        project: start.as_ref().map(|(s, _)| s),
        model: args.choice.model.as_deref(),
        reasoning: reasoning.as_ref(),
        copy_ignored: &args.copy_ignored,
    };
    let id = agents::create_root(&ws, &args.role, &args.lineage, &spawn)?;
    if let Some(remote) = fleet {
        return hand_over(ctx, &ws, &remote, &id);
    }
    progress::launch(ctx, &ws, &id, args.detach, true)
}

/// `prompt --on`: the agent just made goes to the remote's workers, or (refused there)
/// is removed here.
fn hand_over(
    ctx: &Ctx,
    ws: &engine::store::workspace::Workspace,
    remote: &engine::fleet::remote::Remote,
    id: &domain::id::AgentId,
) -> Result<(), CliError> {
    if let Err(e) = engine::fleet::remote::hand_over(ws, remote, id) {
        agents::discard(ws, id);
        return Err(super::sync::error(e));
    }
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

/// Refuses `--copy-ignored` paths that are not plain relative paths, outside a project,
/// or that cannot be copied (not there, not ignored, a workspace's); says what will be
/// copied.
fn check_copy_ignored(
    ctx: &Ctx,
    ws: &engine::store::workspace::Workspace,
    patterns: &[String],
) -> Result<(), CliError> {
    if patterns.is_empty() {
        return Ok(());
    }
    for pattern in patterns {
        if let Some(problem) = domain::agent::copy_ignored_problem(pattern) {
            return Err(CliError::usage(format!("--copy-ignored `{pattern}` {problem}")));
        }
    }
    let user = ws.user_repo()?.ok_or_else(|| {
        CliError::usage(
            "--copy-ignored copies from your checkout: it is for a project (run offshoot in a git checkout)",
        )
    })?;
    let (chosen, refused) = engine::store::warm::select(&user, patterns)
        .map_err(|e| CliError::runtime(format!("cannot read the ignored files of your checkout: {e}")))?;
    if let Some((path, why)) = refused.first() {
        let listed = user.ignored_paths().unwrap_or_default();
        let shown: Vec<&str> = listed.iter().take(8).map(String::as_str).collect();
        let ignored = if shown.is_empty() { "none".to_owned() } else { shown.join(", ") };
        return Err(CliError::usage(format!("--copy-ignored `{path}` {why}")).hint(format!("ignored there: {ignored}")));
    }
    ctx.out.progress(&format!(
        "· copying {} from your checkout into the agent's directory (never into its history)",
        chosen.join(", ")
    ));
    Ok(())
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
