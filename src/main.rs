use clap::Parser;

fn main() {
    let cli = offshoot::cli::Cli::parse();
    std::process::exit(offshoot::cli::run(cli));
}
