use clap::Parser;

fn main() {
    // The sandbox helper runs before anything else, in a process of its own.
    let mut args = std::env::args_os().skip(1);
    match args.next() {
        Some(a) if a == offshoot::infra::sandbox::helper::ARG => offshoot::infra::sandbox::helper::main(args.collect()),
        // Reads an agent's objects, inside its sandbox, for the harness to publish.
        Some(a) if a == offshoot::infra::git::publish::ARG => {
            offshoot::infra::git::publish::export_main(args.collect())
        }
        _ => {}
    }
    // Nothing this process holds (the API keys in its environment and memory) may be
    // read by another process of the same user, nor land in a core file.
    offshoot::infra::process::harden_self();
    offshoot::cli::complete::answer_if_asked();
    let cli = offshoot::cli::Cli::parse();
    std::process::exit(offshoot::cli::run(cli));
}
