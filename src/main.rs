//! offshoot: a git-backed harness for LLM agents. Every agent is a branch with its
//! own worktree, every model step a commit, the conversation a directory of
//! numbered files. Four layers, arrows pointing down, each a crate but this one:
//! `cli` (talks to humans, here) → `engine` (moves agents) → `domain` (what things
//! are) → `infra` (talks to the world).

use clap::Parser;

mod cli;

fn main() {
    // The sandbox helper runs before anything else, in a process of its own.
    let mut args = std::env::args_os().skip(1);
    match args.next() {
        Some(a) if a == infra::sandbox::helper::ARG => infra::sandbox::helper::main(args.collect()),
        // Reads an agent's objects, inside its sandbox, for the harness to publish.
        Some(a) if a == infra::git::publish::ARG => infra::git::publish::export_main(args.collect()),
        _ => {}
    }
    // Nothing this process holds (the API keys in its environment and memory) may be
    // read by another process of the same user, nor land in a core file.
    infra::process::harden_self();
    cli::complete::answer_if_asked();
    let cli = cli::Cli::parse();
    std::process::exit(cli::run(cli));
}
