use crate::cli::{CliError, Ctx};

/// Serve the Agent Client Protocol on stdin/stdout, for an editor (Zed, JetBrains,
/// Neovim, Emacs) or a harness to drive agents through: a session is an agent
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// What a call that needs a yes does: asks the editor (the default), or deny, fail,
    /// or wait (in `offshoot pending`)
    #[arg(long, value_name = "WHAT", value_parser = crate::cli::input::on_ask)]
    pub(crate) on_ask: Option<domain::question::OnAsk>,
    /// Keep each session's work in its agent's own directory (`offshoot apply` brings
    /// it back) instead of writing it into the project's checkout as it is made
    #[arg(long)]
    pub(crate) copy: bool,
    /// Take a session's cwd that is in no git repository as a project of its own (its
    /// files copied into a git directory beside its workspace; nothing is written in
    /// it until the agent's work lands there), as a benchmark harness's task directory
    #[arg(long)]
    pub(crate) directories: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    // (Its own context: the connection's tasks outlive this borrow.)
    let own = Ctx::from_env(ctx.explicit_workspace().cloned(), false);
    let options = crate::cli::acp::Options { on_ask: args.on_ask, copy: args.copy, directories: args.directories };
    crate::cli::acp::serve(own, options)
}
