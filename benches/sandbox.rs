#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]

//! What the sandbox costs per command: the same `sh -c true` started through
//! `infra::process` unconfined, and through the sandbox helper with namespaces
//! (network on; network off, which adds a network namespace and the seccomp
//! filter) and without them (the fallback). The Landlock ruleset is built once, as
//! a driver does; its building is timed on its own.
//!
//! Run: `cargo bench --bench sandbox -- [COMMANDS]` (default 500 of each, interleaved).

#[path = "support/median.rs"]
mod median;

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use infra::process::{self, Group, Io, Limits, Spec};
use infra::sandbox::{self, Confinement, Jail};
use median::median_ms;

fn main() {
    let n: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(500);
    let root = std::env::temp_dir().join(format!("offshoot-bench-sandbox-{}", std::process::id()));
    let own = root.join("ws/agents/a");
    std::fs::create_dir_all(&own).expect("dirs");
    let abi = sandbox::abi(None);
    let helper = Path::new(env!("CARGO_BIN_EXE_offshoot"));
    let support = sandbox::probe(helper);
    let confinement = |network: bool| Confinement {
        read_write: vec![own.clone()],
        read: Vec::new(),
        hidden: vec![root.join("ws")],
        network,
        processes: 1024,
        file_bytes: 1 << 30,
    };
    let built = Instant::now();
    let rules = sandbox::rules(&confinement(true), abi, false).expect("rules");
    let ruleset_ms = built.elapsed().as_secs_f64() * 1000.0;
    let jail = |network: bool, namespaces: bool| Jail {
        helper: helper.to_owned(),
        rules: sandbox::rules(&confinement(network), abi, namespaces).expect("rules"),
        namespaces,
        network,
        processes: 1024,
        file_bytes: 1 << 30,
        read_only_but: (namespaces && support.read_only).then(|| vec![own.clone()]),
    };
    drop(rules);
    let kinds: Vec<(&str, Option<Jail>)> = vec![
        ("unconfined", None),
        ("sandboxed, network on", Some(jail(true, true))),
        ("sandboxed, network off", Some(jail(false, true))),
        ("sandboxed without namespaces", Some(jail(true, false))),
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); kinds.len()];
    let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
    let args = [OsStr::new("-c"), OsStr::new("true")];
    let limits = Limits { head: 1024, tail: 1024, record_max: 0, timeout: Some(Duration::from_secs(10)), idle: None };
    for _ in 0..n {
        for (i, (_, jail)) in kinds.iter().enumerate() {
            let spec = Spec {
                program: Path::new("/bin/sh"),
                args: &args,
                cwd: &own,
                env: &env,
                group: Group::Own,
                stdin: None,
                sandbox: jail.as_ref().map(infra::sandbox::Jail::helper),
                pgid_record: None,
            };
            let started = Instant::now();
            let done = process::run(&spec, &limits, Io::default()).expect("run");
            times[i].push(started.elapsed());
            assert!(done.exit.success(), "{}", String::from_utf8_lossy(&done.stderr.head));
        }
    }
    println!("sandbox: {n} runs of `sh -c true` each way, interleaved; this machine: Landlock ABI {abi}, {support:?}");
    println!("opening the Landlock rules (once per driver and confinement): {ruleset_ms:.2} ms");
    let base = median_ms(&times[0]);
    println!("{:<32} {:>12} {:>12}", "", "median/cmd", "over plain");
    for ((name, _), t) in kinds.iter().zip(&times) {
        let m = median_ms(t);
        println!("{name:<32} {m:>9.2} ms {:>9.2} ms", m - base);
    }
    let _ = std::fs::remove_dir_all(&root);
}
