//! The `offshoot` binary as the tests and benchmarks run it: nothing of the user's
//! environment but `PATH` (no git identity or config, no API key), its home at `home`.

use std::path::Path;
use std::process::Command;

/// `offshoot` with a clean environment, its home (and offshoot's) at `home`, run in `dir`.
pub fn offshoot(home: &Path, dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_offshoot"));
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("OFFSHOOT_HOME", home)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .current_dir(dir);
    c
}
