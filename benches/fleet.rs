#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]

//! Fleet scale: R roots each dispatch C children at once; every child takes S `bash
//! echo` steps and answers; every model call waits L before it answers (a model's
//! latency). All drivers are the real `offshoot` binary, launched by the runtime.
//! Reports aggregate model calls per second (whole run, and the best 10 s window), and
//! the peaks of the driver processes alive at once: their count, their total
//! proportional memory (PSS, which counts shared pages once), open file descriptors.
//!
//! Run: `cargo bench --bench fleet -- [ROOTS] [CHILDREN] [STEPS] [LATENCY_MS]`
//! (default 10 100 3 2000).

#[path = "../tests/cli/support/server.rs"]
mod server;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use engine::Env;
use engine::agents::runtime::Runtime;
use engine::agents::{self, Start};
use engine::store::workspace::{Workspace, set_key, template_files};
use infra::time::Timestamp;
use serde_json::json;
use server::{Server, Turn};

/// One sample of the drivers alive: (processes, PSS KiB, open fds).
fn sample(ws: &Path) -> (usize, u64, usize) {
    let needle = ws.to_string_lossy().into_owned();
    let (mut procs, mut pss, mut fds) = (0, 0, 0);
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !(cmdline.contains(&needle) && cmdline.contains(" run ")) {
            continue;
        }
        procs += 1;
        let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        pss += rollup
            .lines()
            .find_map(|l| l.strip_prefix("Pss:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        fds += std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
    }
    (procs, pss, fds)
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let arg = |i: usize, default: u64| args.get(i).copied().unwrap_or(default);
    let (roots, children, steps, latency_ms) = (arg(0, 10), arg(1, 100), arg(2, 3) as usize, arg(3, 2000));
    let base = std::env::var_os("OFFSHOOT_BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("offshoot-bench-fleet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);

    let server = Server::start_with(false);
    server.latency(Duration::from_millis(latency_ms));
    server.respond_with(move |text| {
        let outputs = text.matches("\"role\":\"assistant\"").count();
        if text.contains("Your name is Root") {
            if outputs == 0 {
                let calls = (1..=children)
                    .map(|i| {
                        let input = json!({"role": "worker", "goal": format!("task {i}")}).to_string();
                        (format!("d{i}"), "dispatch".to_owned(), input)
                    })
                    .collect();
                return Turn { calls, input_tokens: 100, output_tokens: 20, ..Turn::default() };
            }
            return Turn::text("noted");
        }
        if outputs < steps { Turn::bash(&format!("call_{outputs}"), "echo step") } else { Turn::text("done") }
    });

    let mut files = template_files(None).expect("template");
    for (path, bytes) in files.iter_mut() {
        if path == "offshoot.toml" {
            let mut text = String::from_utf8_lossy(bytes).into_owned();
            text = set_key(&text, "providers.anthropic.base_url", &server.url()).expect("set key");
            *bytes = text.into_bytes();
        }
    }
    let ws_path = root.join("ws");
    let ws = Workspace::create(&ws_path, &files).expect("workspace");
    let env = Env::new([
        ("ANTHROPIC_API_KEY".to_owned(), "bench".to_owned()),
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
    ]);
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_offshoot"));
    let runtime = Runtime::new(ws.layout.clone(), exe, env.clone(), Default::default());

    let done = Arc::new(AtomicBool::new(false));
    let watched = ws_path.clone();
    let stop = done.clone();
    let monitor = std::thread::spawn(move || {
        let (mut peak_procs, mut peak_pss, mut peak_fds) = (0, 0, 0);
        while !stop.load(Ordering::Relaxed) {
            let (p, m, f) = sample(&watched);
            peak_procs = peak_procs.max(p);
            peak_pss = peak_pss.max(m);
            peak_fds = peak_fds.max(f);
            std::thread::sleep(Duration::from_millis(500));
        }
        (peak_procs, peak_pss, peak_fds)
    });

    let started = Instant::now();
    for r in 0..roots {
        let spawn = Start {
            message: "Lead a team.",
            name: Some(&format!("Root{r}")),
            now: Timestamp::now(),
            random: r as u32,
            env: &env,
            project: None,
            model: None,
            reasoning: None,
            copy_ignored: &[],
            mode: None,
            on_ask: None,
        };
        let id = agents::create_root(&ws, "worker", "default", &spawn).expect("root");
        runtime.launch(&id).expect("launch");
    }
    // Until no driver is left for two seconds; the best 10 s window of calls on the way.
    let mut windows: Vec<(Instant, u64)> = Vec::new();
    let mut quiet_since: Option<Instant> = None;
    loop {
        std::thread::sleep(Duration::from_millis(250));
        windows.push((Instant::now(), server.served()));
        let alive = sample(&ws_path).0;
        match (alive, quiet_since) {
            (0, None) => quiet_since = Some(Instant::now()),
            (0, Some(since)) if since.elapsed() >= Duration::from_secs(2) => break,
            (0, Some(_)) => {}
            _ => quiet_since = None,
        }
        assert!(started.elapsed() < Duration::from_secs(1800), "the fleet never went quiet");
    }
    let wall = quiet_since.map_or(started.elapsed(), |q| q - started);
    done.store(true, Ordering::Relaxed);
    let (peak_procs, peak_pss, peak_fds) = monitor.join().unwrap_or((0, 0, 0));
    let calls = server.served();
    let best = windows
        .iter()
        .filter_map(|(t, n)| {
            let later = windows.iter().find(|(u, _)| u.duration_since(*t) >= Duration::from_secs(10))?;
            Some((later.1 - n) as f64 / later.0.duration_since(*t).as_secs_f64())
        })
        .fold(0.0_f64, f64::max);
    let agents = roots * (children + 1);
    println!(
        "fleet: {roots} roots × {children} children ({agents} agents), {steps} `bash echo` steps per child, {latency_ms} ms model latency"
    );
    println!("directory: {}", base.display());
    println!("until quiet: {:.1} s; model calls: {calls}", wall.as_secs_f64());
    println!(
        "aggregate: {:.1} calls/s over the run, {best:.1} calls/s in the best 10 s window",
        calls as f64 / wall.as_secs_f64()
    );
    println!(
        "peaks (sampled every 0.5 s): {peak_procs} driver processes, {:.2} GiB PSS in all, {peak_fds} open fds",
        peak_pss as f64 / 1024.0 / 1024.0
    );
    if std::env::var_os("OFFSHOOT_BENCH_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&root);
    } else {
        println!("kept: {}", ws_path.display());
    }
}
