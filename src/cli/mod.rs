//! Talks to humans: parses the command line, builds the one `Ctx`, runs one verb
//! (one file each under `verbs/`), and maps errors to words and exit codes. The
//! only layer that reads environment variables.

pub(crate) mod acp;
pub(crate) mod chat;
pub(crate) mod complete;
pub(crate) mod ctx;
pub(crate) mod error;
pub(crate) mod follow;
pub(crate) mod input;
pub(crate) mod out;
pub(crate) mod progress;
pub(crate) mod serve;
pub(crate) mod verbs;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub(crate) use ctx::Ctx;
pub(crate) use error::CliError;

/// offshoot: a git-backed harness for LLM agents.
///
/// Every agent is a git branch with its own worktree, every model step a commit.
#[derive(Debug, Parser)]
#[command(name = "offshoot", version)]
pub(crate) struct Cli {
    /// The workspace directory (default: `OFFSHOOT_WORKSPACE`, else the default
    /// workspace under the data root, created on first use)
    // (The variable is read by hand: clap's `env` shows the option in every usage line
    // as if it were required.)
    #[arg(short = 'w', long, global = true, action = clap::ArgAction::Append)]
    pub(crate) workspace: Vec<PathBuf>,
    /// Print one JSON event or object per line on stdout
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// With no verb: chat with the most recent root agent instead of starting a new one
    #[arg(short = 'c', long = "continue")]
    pub(crate) resume: bool,
    #[command(subcommand)]
    pub(crate) verb: Option<Verb>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Verb {
    Chat(ChatArgs),
    New(verbs::new::Args),
    Prompt(verbs::prompt::Args),
    Send(verbs::send::Args),
    Run(verbs::run::Args),
    Fork(verbs::fork::Args),
    Dispatch(verbs::dispatch::Args),
    Ls(verbs::ls::Args),
    Tree(verbs::tree::Args),
    Log(verbs::log::Args),
    Attach(verbs::attach::Args),
    Show(verbs::show::Args),
    Stop(verbs::stop::Args),
    Pending(verbs::pending::Args),
    Approve(verbs::pending::ApproveArgs),
    Deny(verbs::pending::DenyArgs),
    Rm(verbs::rm::Args),
    Gc(verbs::gc::Args),
    Bundle(verbs::bundle::Args),
    Replay(verbs::replay::Args),
    #[command(subcommand)]
    Eval(verbs::eval::Args),
    #[command(subcommand)]
    Remote(verbs::remote::Args),
    Push(verbs::sync::PushArgs),
    Pull(verbs::sync::PullArgs),
    Worker(verbs::worker::Args),
    #[command(subcommand)]
    Fleet(verbs::fleet::Args),
    Diff(verbs::diff::Args),
    Export(verbs::export::Args),
    Apply(verbs::apply::Args),
    Compact(verbs::compact::Args),
    Uncompact(verbs::uncompact::Args),
    Scan(verbs::scan::Args),
    Doctor(verbs::doctor::Args),
    #[command(subcommand)]
    Config(verbs::config::Args),
    #[command(subcommand)]
    Mcp(verbs::mcp::Args),
    Tool(verbs::tool::Args),
    Demo(verbs::demo::Args),
    Completions(verbs::completions::Args),
    Acp(verbs::acp::Args),
    Serve(verbs::serve::Args),
}

/// Chat with an agent on this terminal: the first message starts a root agent (in the
/// project's workspace inside a repository); with an agent, continue it. `offshoot` with
/// no verb on a terminal does the same
#[derive(Debug, clap::Args)]
pub(crate) struct ChatArgs {
    /// The agent to chat with (id or name); a new one at your first message if left out
    #[arg(add = complete::agents_completer())]
    pub(crate) agent: Option<String>,
    /// The model to use in place of the role's, from your next message on (`/model`
    /// in the chat)
    #[arg(long, value_parser = crate::cli::input::model_name)]
    pub(crate) model: Option<String>,
    /// In a project: a new agent takes the uncommitted changes of your working tree
    /// along (`/with-changes` in the chat)
    #[arg(long)]
    pub(crate) with_changes: bool,
    /// The permission mode a new agent runs in, in place of its role's: read-only, ask,
    /// workspace-write or full
    #[arg(long, value_parser = crate::cli::input::mode)]
    pub(crate) mode: Option<domain::config::Mode>,
}

/// Runs the parsed command line; returns the exit code.
pub(crate) fn run(cli: Cli) -> i32 {
    let workspace = cli.workspace.first().cloned().or_else(complete::workspace_from_env);
    let ctx = Ctx::from_env(workspace, cli.json);
    if let Some(problem) = ctx.roots_problem() {
        return finish(&ctx, Err(problem), false);
    }
    // Every `-w` of the line, wherever it is.
    let workspaces = complete::workspaces_in(std::env::args_os().skip(1).collect());
    if workspaces.len().max(cli.workspace.len()) > 1 && !matches!(cli.verb, Some(Verb::Serve(_))) {
        let e = CliError::usage("`-w` names one workspace here; only `offshoot serve` takes several")
            .hint("give `-w` once, or serve them all with `offshoot serve -w A -w B` (or `--all`)");
        return finish(&ctx, Err(e), false);
    }
    let Some(verb) = &cli.verb else {
        // No verb: the chat on a terminal, else the help (as for a script).
        if chat::possible() && !ctx.out.json {
            let latest = if cli.resume { chat::latest_root(&ctx) } else { Ok(None) };
            let result = latest.and_then(|agent| chat::run(&ctx, agent.as_deref(), None, false, None));
            return finish(&ctx, result, false);
        }
        let _ = <Cli as clap::CommandFactory>::command().print_help();
        return 2;
    };
    let result = match verb {
        Verb::Chat(args) => chat::run(&ctx, args.agent.as_deref(), args.model.clone(), args.with_changes, args.mode),
        Verb::New(args) => verbs::new::run(&ctx, args),
        Verb::Prompt(args) => verbs::prompt::run(&ctx, args),
        Verb::Send(args) => verbs::send::run(&ctx, args),
        Verb::Run(args) => verbs::run::run(&ctx, args),
        Verb::Fork(args) => verbs::fork::run(&ctx, args),
        Verb::Dispatch(args) => verbs::dispatch::run(&ctx, args),
        Verb::Ls(args) => verbs::ls::run(&ctx, args),
        Verb::Tree(args) => verbs::tree::run(&ctx, args),
        Verb::Log(args) => verbs::log::run(&ctx, args),
        Verb::Attach(args) => verbs::attach::run(&ctx, args),
        Verb::Show(args) => verbs::show::run(&ctx, args),
        Verb::Stop(args) => verbs::stop::run(&ctx, args),
        Verb::Pending(args) => verbs::pending::run(&ctx, args),
        Verb::Approve(args) => verbs::pending::approve(&ctx, args),
        Verb::Deny(args) => verbs::pending::deny(&ctx, args),
        Verb::Diff(args) => verbs::diff::run(&ctx, args),
        Verb::Export(args) => verbs::export::run(&ctx, args),
        Verb::Apply(args) => verbs::apply::run(&ctx, args),
        Verb::Compact(args) => verbs::compact::run(&ctx, args),
        Verb::Uncompact(args) => verbs::uncompact::run(&ctx, args),
        Verb::Scan(args) => verbs::scan::run(&ctx, args),
        Verb::Doctor(args) => verbs::doctor::run(&ctx, args),
        Verb::Config(args) => verbs::config::run(&ctx, args),
        Verb::Mcp(args) => verbs::mcp::run(&ctx, args),
        Verb::Rm(args) => verbs::rm::run(&ctx, args),
        Verb::Gc(args) => verbs::gc::run(&ctx, args),
        Verb::Bundle(args) => verbs::bundle::run(&ctx, args),
        Verb::Replay(args) => verbs::replay::run(&ctx, args),
        Verb::Eval(args) => verbs::eval::run(&ctx, args),
        Verb::Remote(args) => verbs::remote::run(&ctx, args),
        Verb::Push(args) => verbs::sync::push(&ctx, args),
        Verb::Pull(args) => verbs::sync::pull(&ctx, args),
        Verb::Worker(args) => verbs::worker::run(&ctx, args),
        Verb::Fleet(args) => verbs::fleet::run(&ctx, args),
        Verb::Tool(args) => verbs::tool::run(&ctx, args),
        Verb::Demo(args) => verbs::demo::run(&ctx, args),
        Verb::Completions(args) => verbs::completions::run(&ctx, args),
        Verb::Acp(args) => verbs::acp::run(&ctx, args),
        Verb::Serve(args) => verbs::serve::run(&ctx, args, &workspaces),
    };
    let runs = matches!(verb, Verb::Prompt(_) | Verb::Send(_) | Verb::Run(_) | Verb::Fork(_) | Verb::Demo(_));
    finish(&ctx, result, runs)
}

/// The exit code of a verb's `result`, its error said first.
fn finish(ctx: &Ctx, result: Result<(), CliError>, runs: bool) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => {
            ctx.out.error(&e, runs);
            e.exit_code()
        }
    }
}
