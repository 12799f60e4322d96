#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]

//! What a person waits for when looking: `offshoot ls` and `offshoot tree` on a
//! workspace of 1,000 agents (10 roots × 99 children, made with their dispatch commits
//! and goals deposited, not run), and the cold start of `offshoot --version`. Each is the real release
//! binary as a process, run several times; the median is reported.
//!
//! Run: `cargo bench --bench inspect -- [AGENTS]` (default 1000).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use engine::Env;
use engine::agents::{self, Child, Start};
use engine::store::workspace::{Workspace, template_files};
use infra::time::Timestamp;

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

fn time(bin: &Path, args: &[&str], runs: usize) -> f64 {
    let mut took = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let out = Command::new(bin).args(args).output().expect("run offshoot");
        took.push(t.elapsed());
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    median(took)
}

fn main() {
    let total: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1000);
    let base = std::env::var_os("OFFSHOOT_BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("offshoot-bench-inspect-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let ws_path = root.join("ws");
    let ws = Workspace::create(&ws_path, &template_files(None).expect("template")).expect("workspace");
    let env = Env::new([("ANTHROPIC_API_KEY".to_owned(), "bench".to_owned())]);
    let roots = 10.min(total);
    let per_root = total / roots - 1;
    let t = Instant::now();
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
        let parent = agents::create_root(&ws, "worker", "default", &spawn).expect("root");
        for c in 0..per_root {
            let child = Child {
                role: "worker",
                goal: &format!("task {c} of root {r}"),
                name: None,
                from: None,
                now: Timestamp::now(),
                random: (r * 1000 + c) as u32,
                env: &env,
                compactor: false,
                key: None,
            };
            agents::create_child(&ws, &parent, &child).expect("child");
        }
    }
    let made = t.elapsed();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_offshoot"));
    let w = ws_path.to_str().expect("utf-8");
    let count = Command::new(&bin).args(["-w", w, "ls"]).output().expect("ls").stdout;
    let agents = String::from_utf8_lossy(&count).lines().count().saturating_sub(1);
    println!(
        "inspect: a workspace of {agents} agents ({roots} roots × {per_root} children), made in {:.1} s",
        made.as_secs_f64()
    );
    println!("directory: {}", base.display());
    println!("`offshoot ls`:        {:>7.1} ms (median of 5; target ≤ 100 ms)", time(&bin, &["-w", w, "ls"], 5));
    println!("`offshoot ls --json`: {:>7.1} ms (median of 5)", time(&bin, &["-w", w, "--json", "ls"], 5));
    println!("`offshoot tree`:      {:>7.1} ms (median of 5; target ≤ 100 ms)", time(&bin, &["-w", w, "tree"], 5));
    println!("`offshoot --version`: {:>7.1} ms (median of 20; cold start)", time(&bin, &["--version"], 20));
    let _ = std::fs::remove_dir_all(&root);
}
