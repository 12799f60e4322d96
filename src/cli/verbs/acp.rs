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
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    // (Its own context: the connection's tasks outlive this borrow.)
    let own = Ctx::from_env(ctx.explicit_workspace().cloned(), false);
    crate::cli::acp::serve(own, args.on_ask, args.copy)
}
