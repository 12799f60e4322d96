use clap::CommandFactory;

use crate::cli::{Cli, CliError, Ctx};

/// Print a shell completion script
#[derive(Debug, clap::Args)]
pub struct Args {
    pub shell: clap_complete::Shell,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    if ctx.out.json {
        return Err(CliError::usage("`completions` prints a shell script; `--json` does not apply to it"));
    }
    let mut cmd = Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "offshoot", &mut std::io::stdout());
    Ok(())
}
