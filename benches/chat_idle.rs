//! What an idle chat costs: `offshoot chat` in a pseudo-terminal of 120x40, waiting for
//! input with no agent at work, its CPU time read from /proc over a stretch of idling.
//!
//! `cargo bench --bench chat_idle -- 20` idles 20 s (default 10).

#[path = "support/cpu.rs"]
mod cpu;
#[path = "../tests/cli/support/pty.rs"]
#[allow(dead_code, reason = "the tests' terminal, of which this bench needs less")]
mod pty;

use std::process::Command;
use std::time::{Duration, Instant};

#[expect(clippy::print_stdout, reason = "a bench reports on stdout")]
fn main() {
    let secs: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(10);
    let root = std::env::temp_dir().join(format!("offshoot-bench-chat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let exe = env!("CARGO_BIN_EXE_offshoot");
    let ws = root.join("ws");
    let made = Command::new(exe).arg("new").arg(&ws).env("OFFSHOOT_HOME", root.join("home")).output().expect("new");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let mut command = Command::new(exe);
    command
        .arg("-w")
        .arg(&ws)
        .arg("chat")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", root.join("home"))
        .env("OFFSHOOT_HOME", root.join("home"))
        .env("TERM", "xterm-256color");
    let mut chat = pty::Pty::spawn(command, 120, 40);
    chat.wait_for("type a goal");
    std::thread::sleep(Duration::from_secs(1));
    let pid = chat.child.id();
    let (before, started) = (cpu::seconds(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(secs));
    let (cpu, took) = (cpu::seconds(pid) - before, started.elapsed());
    println!(
        "idle chat (120x40, no agent at work): {cpu:.3} s of CPU over {:.1} s = {:.3}% of a core",
        took.as_secs_f64(),
        100.0 * cpu / took.as_secs_f64()
    );
    // Lines into the scrollback: `/help`'s, from Enter to the last of them on the screen.
    let mut took = Vec::new();
    for _ in 0..5 {
        let from = chat.raw().len();
        let at = Instant::now();
        chat.type_in("/help\r");
        while !String::from_utf8_lossy(&chat.raw()[from..]).contains("stopped)") {
            assert!(at.elapsed() < Duration::from_secs(20), "/help never shown");
            std::thread::sleep(Duration::from_millis(1));
        }
        took.push(at.elapsed());
    }
    took.sort();
    println!("`/help` (16 lines into the scrollback) shown in {:.1} ms (median of 5)", took[2].as_secs_f64() * 1000.0);
    chat.type_in("\x04");
    let _ = chat.child.wait();
    let _ = std::fs::remove_dir_all(&root);
}
