use crate::cli::{CliError, Ctx};

/// Serve the workspace over HTTP: a web view of every agent (for a browser or a phone)
/// and its API and event stream (docs/serve.md). Every request needs the token, kept in
/// the data root; the URL printed at the start carries it
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The address to listen on (port 0: any free one; another address than loopback
    /// makes the workspace reachable by whoever has the token)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7480")]
    pub(crate) listen: std::net::SocketAddr,
    /// Print the token and exit
    #[arg(long)]
    pub(crate) token: bool,
    /// Replace the token with a new one (the old one no longer opens anything), then serve
    #[arg(long)]
    pub(crate) rotate_token: bool,
    /// Serve every workspace under the data root (`-w` repeated serves those it names)
    #[arg(long)]
    pub(crate) all: bool,
}

/// `workspaces`: every `-w` given (the first is the context's).
pub(crate) fn run(ctx: &Ctx, args: &Args, workspaces: &[std::path::PathBuf]) -> Result<(), CliError> {
    if args.all && !workspaces.is_empty() {
        return Err(CliError::usage("`--all` serves every workspace under the data root; it takes no `-w`"));
    }
    // (Its own context: the server's threads outlive this borrow.)
    let own = Ctx::from_env(ctx.explicit_workspace().cloned(), ctx.out.json);
    let options = crate::cli::serve::Options {
        listen: args.listen,
        print_token: args.token,
        rotate_token: args.rotate_token,
        workspaces: workspaces.to_vec(),
        all: args.all,
    };
    crate::cli::serve::run(own, options)
}
