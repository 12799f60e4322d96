use crate::cli::{CliError, Ctx};

/// Print a shell completion script (verbs, flags, and the agents of the workspace)
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    pub(crate) shell: clap_complete::Shell,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    if ctx.out.json {
        return Err(CliError::usage("`completions` prints a shell script; `--json` does not apply to it"));
    }
    let shell = args.shell.to_string();
    crate::cli::complete::registration(&shell, &mut std::io::stdout())
        .map_err(|e| CliError::runtime(format!("cannot write the {shell} completion script: {e}")))
}
