#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]

//! Project mode on a large repository: for each size (files in a generated repository,
//! 100 per directory, one commit), the time to start an agent on it (workspace link,
//! dispatch commit, the directory's checkout) and the time of a step whose `bash`
//! changes one file, against the same step in an empty directory. Also what copying the
//! base's objects into the workspace would cost (a local `git fetch`), the alternative
//! to reading them through alternates.
//!
//! Run: `cargo bench --bench project -- [FILES...]` (default 5000 50000).

#[path = "support/clock.rs"]
mod clock;
#[path = "support/disk.rs"]
mod disk;
#[path = "support/git.rs"]
mod git;
#[path = "support/median.rs"]
mod median;
#[path = "../tests/cli/support/server.rs"]
mod server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clock::Clock;
use disk::file_creation_micros;
use engine::Env;
use engine::agents::runtime::Runtime;
use engine::agents::{self, Start};
use engine::ops::project;
use engine::step::driver;
use engine::store::workspace::{Workspace, set_key, template_files};
use git::git;
use infra::git::UserRepo;
use infra::time::Timestamp;
use median::median_ms;
use server::{Server, Turn};

const STEPS: usize = 20;

/// A repository of `files` small text files, 100 per directory, in one commit.
fn generate(dir: &Path, files: usize) {
    std::fs::create_dir_all(dir).expect("repo");
    git(dir, &["init", "-q", "-b", "main"]);
    for i in 0..files {
        let sub = dir.join(format!("d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&sub).expect("dir");
        }
        std::fs::write(sub.join(format!("f{i}.txt")), format!("file {i}\nsome content of a source file\n")).expect("f");
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "generated"]);
}

fn config(server: &Server) -> Vec<(String, Vec<u8>)> {
    let mut files = template_files(None).expect("template");
    for (path, bytes) in files.iter_mut() {
        if path == "offshoot.toml" {
            let text = set_key(&String::from_utf8_lossy(bytes), "providers.anthropic.base_url", &server.url())
                .expect("set key");
            *bytes = text.into_bytes();
        }
    }
    files
}

/// Starts an agent in `ws` (from `repo` when given) and runs `STEPS` one-file bash
/// steps: (start time, median step time).
fn run(ws: &Workspace, server: &Server, repo: Option<&Path>) -> (Duration, f64) {
    let mut turns: Vec<Turn> =
        (1..=STEPS).map(|i| Turn::bash(&format!("call_{i}"), "mkdir -p d0000 && echo x >> d0000/f0.txt")).collect();
    turns.push(Turn::text("done"));
    server.push_turns(turns);
    let env = Env::new([("ANTHROPIC_API_KEY".to_owned(), "bench".to_owned())]);
    let t = Instant::now();
    let start = repo.map(|_| project::start_point(ws, None, false, None).expect("start point").expect("a project").0);
    let spawn = Start {
        message: "Change one file.",
        name: Some("Bench"),
        now: Timestamp::now(),
        random: 777,
        env: &env,
        project: start.as_ref(),
        model: None,
        reasoning: None,
        copy_ignored: &[],
        mode: None,
        on_ask: None,
    };
    let id = agents::create_root(ws, "worker", "default", &spawn).expect("agent");
    let started = t.elapsed();
    let runtime = Runtime::new(ws.layout.clone(), env!("CARGO_BIN_EXE_offshoot").into(), env, Default::default());
    let mut clock = Clock { starts: Vec::new() };
    driver::run(ws, &runtime, &id, &mut clock).expect("run");
    let steps: Vec<Duration> = clock.starts.windows(2).map(|w| w[1] - w[0]).collect();
    if repo.is_some() {
        // The agent's own first `git status` after the run, then a second one.
        for label in ["first", "second"] {
            let t = Instant::now();
            let o = Command::new("git")
                .current_dir(ws.layout.worktree(&id))
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .args(["status", "--porcelain"])
                .output()
                .expect("git status");
            assert!(o.status.success());
            println!("  the agent's {label} `git status`: {:.0} ms", t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    (started, median_ms(&steps))
}

fn du_kib(path: &Path) -> u64 {
    let out = Command::new("du").args(["-sk"]).arg(path).output().expect("du");
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![5_000, 50_000] } else { sizes };
    let base = std::env::var_os("OFFSHOOT_BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("offshoot-bench-project-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let server = Server::start_with(false);
    let files = config(&server);

    let plain = Workspace::create(&root.join("plain"), &files).expect("workspace");
    let (_, empty_step) = run(&plain, &server, None);
    println!("project mode: {STEPS} steps of `bash` changing one file, scripted server, zero model latency");
    println!(
        "directory: {} (creating one new file there costs {:.0} µs)",
        base.display(),
        file_creation_micros(&root.join("probe"), 2000)
    );
    println!("step in an empty directory (no project): {empty_step:.1} ms (median)");
    println!(
        "{:>8} {:>12} {:>12} {:>14} {:>16} {:>12}",
        "files", "start agent", "step", "step overhead", "fetch instead", "fetched size"
    );
    for n in sizes {
        let repo = root.join(format!("repo-{n}"));
        generate(&repo, n);
        let user = UserRepo::open(&repo).expect("user repo");
        let t = Instant::now();
        let ws = Workspace::create_for_project(&root.join(format!("ws-{n}")), &files, &user).expect("project ws");
        let link = t.elapsed();
        let (start, step) = run(&ws, &server, Some(&repo));
        // The alternative to alternates: the base's objects copied by a local fetch.
        let copy = root.join(format!("copy-{n}.git"));
        git(&root, &["init", "-q", "--bare", copy.to_str().expect("utf-8")]);
        let t = Instant::now();
        git(&copy, &["fetch", "-q", "--no-tags", repo.to_str().expect("utf-8"), "main"]);
        let fetch = t.elapsed();
        println!(
            "{n:>8} {:>9.2} s {step:>9.1} ms {:>11.1} ms {:>13.2} s {:>9} KiB",
            (link + start).as_secs_f64(),
            step - empty_step,
            fetch.as_secs_f64(),
            du_kib(&copy.join("objects"))
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}
