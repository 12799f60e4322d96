//! The CPU time a process has used, from /proc.

use std::process::Command;

/// CPU time (user + system) of process `pid`, in seconds.
pub fn seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let fields: Vec<&str> = stat.rsplit_once(')').expect("stat").1.split_whitespace().collect();
    let ticks = fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    let hz: f64 = String::from_utf8_lossy(&Command::new("getconf").arg("CLK_TCK").output().expect("getconf").stdout)
        .trim()
        .parse()
        .unwrap_or(100.0);
    ticks as f64 / hz
}
