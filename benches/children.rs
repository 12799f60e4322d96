#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]

//! Many children: a parent dispatches N children in one step; each child takes S
//! `bash echo` steps and answers; the parent gets every result (and any work) and
//! ends. The parent's driver runs in this process, through the same code as `offshoot
//! run`; the children's drivers are the real `offshoot` binary, launched by the
//! runtime. The scripted Anthropic server answers at once. Reports the wall time
//! until the whole tree is quiet and peak memory.
//!
//! Run: `cargo bench --bench children -- [CHILDREN] [STEPS]` (default 100 × 5).

#[path = "support/memory.rs"]
mod memory;
#[path = "../tests/cli/support/server.rs"]
mod server;

use std::time::Instant;

use domain::id::AgentId;
use engine::Env;
use engine::agents::runtime::Runtime;
use engine::agents::{self, Start};
use engine::step::driver;
use engine::step::events::{Event, Observer};
use engine::store::workspace::{Workspace, set_key, template_files};
use infra::time::Timestamp;
use serde_json::json;
use server::{Server, Turn};

struct Quiet;

impl Observer for Quiet {
    fn event(&mut self, _: Event<'_>) {}
}

/// Watches every `offshoot` process while the tree runs and keeps the largest peak
/// RSS seen (VmHWM, KiB). Sampled every 20 ms, so a driver that lives less than that
/// may be missed; with steps to take, none does.
fn watch_drivers(done: std::sync::Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
                if !status.lines().any(|l| l == "Name:\toffshoot") {
                    continue;
                }
                peak = peak.max(memory::peak_rss_kib(&status));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        peak
    })
}

fn main() {
    let numbers: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let children = numbers.first().copied().unwrap_or(100);
    let steps = numbers.get(1).copied().unwrap_or(5);
    let base = std::env::var_os("OFFSHOOT_BENCH_DIR").map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("offshoot-bench-children-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);

    let server = Server::start_with(false);
    let calls = (1..=children)
        .map(|i| {
            (format!("d{i}"), "dispatch".to_owned(), json!({"role": "worker", "goal": format!("task {i}")}).to_string())
        })
        .collect();
    server.push_for("Bench", [Turn { calls, ..Turn::default() }]);
    server.endless_steps(steps);

    let mut files = template_files(None).expect("template");
    for (path, bytes) in files.iter_mut() {
        if path == "offshoot.toml" {
            let mut text = String::from_utf8_lossy(bytes).into_owned();
            text = set_key(&text, "providers.anthropic.base_url", &server.url()).expect("set key");
            text = set_key(&text, "budgets.max_depth", "5").expect("set key");
            *bytes = text.into_bytes();
        }
    }
    let ws = Workspace::create(&root.join("ws"), &files).expect("workspace");
    let env = Env::new([
        ("ANTHROPIC_API_KEY".to_owned(), "bench".to_owned()),
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
    ]);
    let spawn = Start {
        message: "Fan out and collect.",
        name: Some("Bench"),
        now: Timestamp::now(),
        random: 4242,
        env: &env,
        project: None,
        model: None,
        reasoning: None,
        copy_ignored: &[],
        mode: None,
        on_ask: None,
    };
    let id = agents::create_root(&ws, "worker", "default", &spawn).expect("agent");
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_offshoot"));
    let runtime = Runtime::new(ws.layout.clone(), exe, env.clone(), Default::default());

    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = watch_drivers(done.clone());
    let started = Instant::now();
    driver::run(&ws, &runtime, &id, &mut Quiet).expect("run");
    let total = started.elapsed();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let child_peak = watcher.join().unwrap_or(0);
    let results = count_results(&ws, &id, children);

    println!(
        "children: {children} children × {steps} `bash echo` steps each, dispatched in one step, scripted server, zero latency"
    );
    println!("directory: {}", base.display());
    println!("until the whole tree is quiet: {:.2} s", total.as_secs_f64());
    println!("results delivered to the parent: {results} of {children}");
    println!("model calls served: {}", server.served());
    println!(
        "peak RSS: parent process (its driver and the server) {} KiB, largest child driver {child_peak} KiB",
        memory::own_peak_rss_kib()
    );
    if std::env::var_os("OFFSHOOT_BENCH_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
}

/// How many of the parent's children's results reached its transcript.
fn count_results(ws: &Workspace, id: &AgentId, children: usize) -> usize {
    let Some(tip) = ws.repo.branch_tip(&id.branch()).ok().flatten() else { return 0 };
    let listed = ws.repo.list_dir(tip, ".offshoot/messages").unwrap_or_default();
    (1..=children).filter(|i| listed.iter().any(|e| e.name.ends_with(&format!("-{id}.{i}.md")))).count()
}
