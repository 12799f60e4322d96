use clap::CommandFactory;

use crate::cli::{Cli, CliError, Ctx};

/// Print a shell completion script
#[derive(Debug, clap::Args)]
pub struct Args {
    pub shell: clap_complete::Shell,
}

pub fn run(_ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let mut cmd = Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "offshoot", &mut std::io::stdout());
    Ok(())
}
