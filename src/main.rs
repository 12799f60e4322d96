use clap::Parser;

fn main() {
    offshoot::cli::complete::answer_if_asked();
    let cli = offshoot::cli::Cli::parse();
    std::process::exit(offshoot::cli::run(cli));
}
