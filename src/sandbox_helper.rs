//! `offshoot-sandbox`: the sandbox helper alone, installed beside `offshoot`. It does
//! what `offshoot __sandbox …` does (see `infra::sandbox::helper`), from a binary that
//! holds nothing else: a command's start pays the loading of a small program, not the
//! relocation of the whole harness (about a millisecond a command on this machine).
//! The driver uses it when it stands beside its own binary, and itself otherwise.

use std::io::Write;

fn main() {
    let mut args = std::env::args_os().skip(1);
    match args.next() {
        Some(a) if a == infra::sandbox::helper::ARG => infra::sandbox::helper::main(args.collect()),
        _ => {
            let said = format!(
                "offshoot-sandbox: run by offshoot only, as `offshoot-sandbox {} …`\n",
                infra::sandbox::helper::ARG
            );
            let _ = std::io::stderr().write_all(said.as_bytes());
            std::process::exit(2);
        }
    }
}
