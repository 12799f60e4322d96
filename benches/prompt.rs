#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]
//! A headless `offshoot prompt` as a user, a CI job or an eval runs it: the real binary,
//! STEPS bash steps and an answer against the scripted model server on loopback (no
//! model latency: the harness's own cost is all there is), RUNS times for each count of
//! steps. Per count it reports the whole command, the start-up (the process's start to
//! the model's first request), the time per step at both ends of the conversation (the
//! first and last tenth of its requests), and CPU per step (user and system, of the
//! command and the children it waited for, from `/proc/self/stat`).
//!
//! `OFFSHOOT_BENCH_WRAP` runs one more run of the largest count under a wrapper — e.g.
//! `strace -f -c -o /tmp/prompt.strace` or `perf record -g -o /tmp/prompt.perf --` — its
//! words split at spaces and put before the command.
//!
//! Run: `cargo bench --bench prompt -- [RUNS] [STEPS…]` (default 5, 30 100 1000); under
//! `OFFSHOOT_BENCH_DIR` (tmpfs: `/dev/shm`) instead of the temporary directory.

#[path = "../tests/cli/support/clean.rs"]
mod clean;
#[path = "support/median.rs"]
mod median;
#[path = "support/scripted.rs"]
mod scripted;
#[path = "../tests/cli/support/server.rs"]
mod server;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use server::{Server, Turn};

/// `offshoot` on the bench's workspace.
fn offshoot(root: &Path, wrap: &[String]) -> Command {
    let plain = clean::offshoot(&root.join("home"), root);
    let mut c = match wrap.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(plain.get_program());
            c.env_clear().envs(plain.get_envs().filter_map(|(k, v)| Some((k, v?)))).current_dir(root);
            c
        }
        None => plain,
    };
    c.arg("-w").arg(root.join("ws")).env("ANTHROPIC_API_KEY", "bench-key");
    c
}

/// CPU the process's waited-for children used so far, user and system.
fn children_cpu() -> (Duration, Duration) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // (After the command's name in parentheses: fields 3 on; cutime and cstime are 16, 17.)
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<u64> = rest.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
    // (Clock ticks: 100 a second on Linux.)
    let ticks = |i: usize| Duration::from_millis(fields.get(i - 3).copied().unwrap_or(0) * 10);
    (ticks(16), ticks(17))
}

/// One run's figures.
struct Run {
    whole: Duration,
    startup: Duration,
    first_tenth: Duration,
    last_tenth: Duration,
    user: Duration,
    system: Duration,
}

/// One run of `steps` bash steps and an answer.
fn run(root: &Path, model: &Server, steps: usize, n: usize, wrap: &[String]) -> Run {
    let turns = (0..steps).map(|i| Turn::bash(&format!("b{i}"), "echo step"));
    model.push_turns(turns.chain([Turn::text("done")]));
    let seen = model.requests().len();
    let (user0, system0) = children_cpu();
    let started = Instant::now();
    let out = offshoot(root, wrap).args(["prompt", "--name", &format!("Run{n}"), "work"]).output().expect("prompt");
    let whole = started.elapsed();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (user1, system1) = children_cpu();
    let at: Vec<Instant> = model.requests()[seen..].iter().map(|r| r.at).collect();
    assert_eq!(at.len(), steps + 1, "one request a step and one for the answer");
    let tenth = (steps / 10).max(1);
    Run {
        whole,
        startup: at[0].duration_since(started),
        first_tenth: at[tenth].duration_since(at[0]) / tenth as u32,
        last_tenth: at[steps].duration_since(at[steps - tenth]) / tenth as u32,
        user: user1 - user0,
        system: system1 - system0,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let runs = args.first().copied().unwrap_or(5);
    let counts = if args.len() > 1 { args[1..].to_vec() } else { vec![30, 100, 1000] };
    let wrap: Vec<String> = std::env::var("OFFSHOOT_BENCH_WRAP")
        .map(|w| w.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let base = std::env::var_os("OFFSHOOT_BENCH_DIR").map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("offshoot-bench-prompt-{}", std::process::id()));
    let model = scripted::workspace(&root, &|| offshoot(&root, &[]));
    // (A warm-up run, not counted.)
    run(&root, &model, 5, 0, &[]);
    println!("prompt: a headless `offshoot prompt` of STEPS bash steps and an answer, median of {runs} runs:");
    let mut n = 1;
    for &steps in &counts {
        let mut measured = Vec::new();
        for _ in 0..runs {
            measured.push(run(&root, &model, steps, n, &[]));
            n += 1;
        }
        let of = |f: &dyn Fn(&Run) -> Duration| median::median_ms(&measured.iter().map(f).collect::<Vec<_>>());
        let per_step = |f: &dyn Fn(&Run) -> Duration| of(f) / steps as f64;
        println!(
            "  {steps:>5} steps: whole {:>7.0} ms ({:.2} ms a step); start-up to the first request {:.1} ms; \
             per step first tenth {:.2} ms, last tenth {:.2} ms; CPU a step {:.2} ms user + {:.2} ms system",
            of(&|r| r.whole),
            per_step(&|r| r.whole),
            of(&|r| r.startup),
            of(&|r| r.first_tenth),
            of(&|r| r.last_tenth),
            per_step(&|r| r.user),
            per_step(&|r| r.system),
        );
    }
    if let Some(&steps) = counts.iter().max().filter(|_| !wrap.is_empty()) {
        let wrapped = run(&root, &model, steps, n, &wrap);
        println!("  under `{}`: {steps} steps in {:.0} ms", wrap.join(" "), ms(wrapped.whole));
    }
    let _ = std::fs::remove_dir_all(&root);
}
