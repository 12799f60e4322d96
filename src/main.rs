use clap::Parser;

fn main() {
    // The sandbox helper runs before anything else, in a process of its own.
    let mut args = std::env::args_os().skip(1);
    if args.next().is_some_and(|a| a == offshoot::infra::sandbox::helper::ARG) {
        offshoot::infra::sandbox::helper::main(args.collect());
    }
    // Nothing this process holds (the API keys in its environment and memory) may be
    // read by another process of the same user, nor land in a core file.
    offshoot::infra::process::harden_self();
    offshoot::cli::complete::answer_if_asked();
    let cli = offshoot::cli::Cli::parse();
    std::process::exit(offshoot::cli::run(cli));
}
