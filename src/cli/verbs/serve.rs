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
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    // (Its own context: the server's threads outlive this borrow.)
    let own = Ctx::from_env(ctx.explicit_workspace().cloned(), ctx.out.json);
    let options =
        crate::cli::serve::Options { listen: args.listen, print_token: args.token, rotate_token: args.rotate_token };
    crate::cli::serve::run(own, options)
}
