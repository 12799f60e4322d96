#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]

//! Eval runs in parallel: a one-task suite run once with `--jobs 1`, then RUNS times with
//! `--jobs JOBS`, against the scripted model answering after LATENCY_MS (a model's
//! latency). Every run is what `offshoot eval run` makes of it: a fresh workspace, the
//! agent as a real `offshoot prompt` process, the check in the agent's sandbox. Reports
//! both wall times and how close the second is to RUNS / JOBS of the first.
//!
//! Run: `cargo bench --bench eval -- [RUNS] [JOBS] [LATENCY_MS]` (default 20 8 2000).

#[path = "../tests/cli/support/server.rs"]
mod server;

use std::path::Path;
use std::time::{Duration, Instant};

use server::Server;

fn eval(home: &Path, suite: &Path, config: &Path, runs: u64, jobs: u64, out: &Path) -> f64 {
    let started = Instant::now();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_offshoot"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("OFFSHOOT_HOME", home)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("ANTHROPIC_API_KEY", "bench-key")
        .current_dir(home)
        .args(["eval", "run", "--suite"])
        .arg(suite)
        .arg("--config")
        .arg(config)
        .args(["--runs", &runs.to_string(), "--jobs", &jobs.to_string(), "--out"])
        .arg(out)
        .output()
        .expect("offshoot");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out).expect("report")).expect("json");
    assert_eq!(report["total"]["passed"].as_u64(), Some(runs), "every run passes: {}", report["total"]);
    started.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let arg = |i: usize, default: u64| args.get(i).copied().unwrap_or(default);
    let (runs, jobs, latency_ms) = (arg(0, 20), arg(1, 8), arg(2, 2000));
    let server = Server::start_with(false);
    server.latency(Duration::from_millis(latency_ms));
    server.endless_text("done");
    let root = std::env::temp_dir().join(format!("offshoot-bench-eval-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (suite, home) = (root.join("suite"), root.join("home"));
    std::fs::create_dir_all(suite.join("answer")).expect("suite");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(suite.join("answer/prompt.md"), "Say done.\n").expect("prompt");
    let check = suite.join("answer/check");
    std::fs::write(&check, "#!/bin/sh\ntest -d .offshoot\n").expect("check");
    std::fs::set_permissions(&check, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let config = root.join("bench.toml");
    std::fs::write(&config, format!("[providers.anthropic]\nbase_url = \"{}\"\n", server.url())).expect("config");

    let one = eval(&home, &suite, &config, 1, 1, &root.join("one.json"));
    let many = eval(&home, &suite, &config, runs, jobs, &root.join("many.json"));
    let ideal = one * runs as f64 / jobs as f64;
    let waves = one * runs.div_ceil(jobs) as f64;
    println!("eval: a one-task suite, {latency_ms} ms model latency, one model call a run");
    println!("one run, --jobs 1:            {one:.2} s");
    println!("{runs} runs, --jobs {jobs}:          {many:.2} s");
    println!("{runs}/{jobs} of one run:            {ideal:.2} s  (ratio {:.2})", many / ideal);
    println!("{} waves of {jobs} runs:          {waves:.2} s  (ratio {:.2})", runs.div_ceil(jobs), many / waves);
    let _ = std::fs::remove_dir_all(&root);
}
