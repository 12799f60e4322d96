#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]

//! Scale-out: AGENTS agents handed over (`prompt --on`) to a shared remote (`git daemon`
//! on loopback) are driven by 1, 2 and 3 workers — separate workspaces on this machine
//! standing in for machines, each `offshoot worker` driving up to PER_WORKER agents at
//! once; every agent makes one model call, answered after LATENCY_MS. For each worker
//! count: the wall time until every agent is done on the remote (no message waiting, no
//! claim held), throughput, scaling against one worker, and the claim conflict rate
//! (claims another worker moved first, of all claim attempts). Then: two workers, one
//! killed with -9 (its drivers too: its machine gone) while it holds agents, and the time
//! until the other has taken over every one, with leases of LEASE_MS.
//!
//! Run: `cargo bench --bench scale_out -- [AGENTS] [LATENCY_MS] [PER_WORKER] [LEASE_MS]
//! [MODE] [WORKERS] [HISTORY] [STEPS]` (default 300 2000 100 5000 0 3 0 10). MODE 0
//! measures 1 to WORKERS workers and the take-over, 1 the take-over only, 2 the workers
//! only, 3 agents of STEPS steps here against the same on one worker. With
//! HISTORY, one worker then drives the same agents on a remote that also holds HISTORY
//! finished agents (copies, under new ids, of the refs of those the one-worker run
//! finished, their objects reached through `objects/info/alternates`), and `prompt --on`
//! is timed there. For the
//! take-over the model answers after 60 s, so the killed worker's agents are all
//! mid-call when it dies. Each worker's own CPU (user + system, from `/proc`) is
//! reported per agent; its drivers' and the daemon's are not in it. With
//! `OFFSHOOT_BENCH_HANDED=<dir>`, the handed-over remote is kept there by size and used
//! again by later runs (which then skip the hand-overs).

#[path = "../tests/cli/support/clean.rs"]
mod clean;
#[path = "../tests/cli/support/daemon.rs"]
mod daemon;
#[path = "../tests/cli/support/server.rs"]
mod server;

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use daemon::Daemon;
use server::Server;

struct Bench {
    root: PathBuf,
    served: PathBuf,
    home: PathBuf,
    daemon: Daemon,
}

impl Bench {
    fn command(&self) -> Command {
        let mut c = clean::offshoot(&self.home, &self.root);
        c.env("ANTHROPIC_API_KEY", "bench-key");
        c
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self.command().args(args).output().expect("offshoot");
        assert!(out.status.success(), "offshoot {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn git(&self, repo: &str, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(self.served.join(repo))
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A copy of the remote the agents were handed to, for one measurement.
    fn fresh_remote(&self, name: &str) -> String {
        let status = Command::new("cp")
            .arg("-a")
            .arg(self.served.join("handed.git"))
            .arg(self.served.join(name))
            .status()
            .expect("cp");
        assert!(status.success());
        self.daemon.url(name)
    }

    /// A worker's workspace made from `url`.
    fn workspace(&self, name: &str, url: &str) -> PathBuf {
        let ws = self.root.join(name);
        self.run(&["new", "--from", url, ws.to_str().expect("utf-8")]);
        ws
    }

    fn worker(&self, ws: &Path, name: &str, per_worker: u64, lease_ms: u64) -> Child {
        self.command()
            .arg("-w")
            .arg(ws)
            .args(["--json", "worker", "--name", name, "--interval-ms", "200"])
            .args(["--max-agents", &per_worker.to_string(), "--lease-ms", &lease_ms.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("worker")
    }

    /// One worker `name` (a workspace of its own made from `url`) driving remote `repo`
    /// until it settles: the wall time, the worker's CPU seconds, and its events.
    fn one_worker(
        &self,
        repo: &str,
        url: &str,
        name: &str,
        per_worker: u64,
    ) -> (f64, f64, std::sync::mpsc::Receiver<(Instant, serde_json::Value)>) {
        let ws = self.workspace(&format!("{name}-w"), url);
        let started = Instant::now();
        let mut child = self.worker(&ws, name, per_worker, 30_000);
        let stream = events(&mut child);
        std::thread::sleep(Duration::from_millis(500));
        while !self.settled(repo) {
            assert!(started.elapsed() < Duration::from_secs(1800), "worker {name} never finished on {repo}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let wall = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(child.id());
        stop(child);
        (wall, cpu, stream)
    }

    /// Whether the remote has no message waiting and no claim held.
    fn settled(&self, repo: &str) -> bool {
        self.git(repo, &["for-each-ref", "--count=1", "refs/offshoot/inbox/", "refs/offshoot/claims/"])
            .trim()
            .is_empty()
    }
}

/// A worker's events, read as it prints them, each with when it came.
fn events(child: &mut Child) -> std::sync::mpsc::Receiver<(Instant, serde_json::Value)> {
    let (send, events) = std::sync::mpsc::channel();
    let out = child.stdout.take().expect("stdout");
    // (OFFSHOOT_BENCH_EVENTS=<file>: every worker's events, each after the milliseconds
    // since the first, appended there for a closer look.)
    let log = std::env::var_os("OFFSHOOT_BENCH_EVENTS")
        .and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok().map(std::sync::Mutex::new));
    let pid = child.id();
    std::thread::spawn(move || {
        let start = Instant::now();
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(log) = &log
                && let Ok(mut file) = log.lock()
            {
                let _ = writeln!(file, "{pid} {} {line}", start.elapsed().as_millis());
            }
            if let Ok(value) = serde_json::from_str(&line) {
                let _ = send.send((Instant::now(), value));
            }
        }
    });
    events
}

/// MODE 3: `agents` agents of `steps` steps each (a `bash echo` a step, then an answer)
/// run here, all at once (`prompt --detach`), then the same handed to one worker: the
/// wall time of each, and what a step costs beyond the model's latency.
fn steps_here_and_on_a_worker(bench: &Bench, laptop: &str, agents: u64, steps: u64, latency_ms: u64, per_worker: u64) {
    let calls = (steps + 1) as f64;
    let all_done = |prefix: &str| {
        let listed = bench.run(&["-w", laptop, "ls", "--json"]);
        let mine: Vec<serde_json::Value> = listed
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|a| a["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
            .collect();
        mine.len() as u64 == agents && mine.iter().all(|a| a["state"] == "done")
    };
    let started = Instant::now();
    for n in 0..agents {
        bench.run(&["-w", laptop, "prompt", "--detach", "--name", &format!("Here{n}"), "Go."]);
    }
    while !all_done("Here") {
        assert!(started.elapsed() < Duration::from_secs(600), "the agents here never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    let here = started.elapsed().as_secs_f64();
    for n in 0..agents {
        bench.run(&["-w", laptop, "prompt", "--on", "origin", "--name", &format!("There{n}"), "Go."]);
    }
    let url = bench.fresh_remote("steps.git");
    let (there, cpu, _) = bench.one_worker("steps.git", &url, "s0", per_worker);
    let latency = latency_ms as f64 / 1000.0;
    let (over_here, over_there) = (here / calls - latency, there / calls - latency);
    println!("scale_out steps: {agents} agents x {steps} steps (+ the answer), model latency {latency_ms} ms");
    println!("here:        {here:.2} s wall, {:.0} ms a step beyond the model", over_here * 1000.0);
    println!(
        "on a worker: {there:.2} s wall, {:.0} ms a step beyond the model ({:.2}x here); worker CPU {:.1} ms a step",
        over_there * 1000.0,
        over_there / over_here.max(1e-9),
        cpu * 1000.0 / (agents as f64 * calls)
    );
}

/// `history.git`: the agents handed over, waiting, beside `history` finished ones made of
/// the refs of those `run-1.git` finished (its objects shared), each under a new id.
fn with_history(bench: &Bench, history: u64) -> String {
    let url = bench.fresh_remote("history.git");
    let done = bench.served.join("run-1.git");
    let alternates = bench.served.join("history.git/objects/info/alternates");
    std::fs::write(&alternates, format!("{}\n", done.join("objects").display())).expect("alternates");
    let listed = bench.git("run-1.git", &["for-each-ref", "--format=%(objectname) %(refname)"]);
    let refs: Vec<(&str, &str)> = listed.lines().filter_map(|l| l.split_once(' ')).collect();
    let ids: Vec<&str> = refs.iter().filter_map(|(_, n)| n.strip_prefix("refs/heads/agents/")).collect();
    // Each finished agent's refs (its id their last part), and its project branch by name.
    let names: std::collections::HashMap<&str, &str> = refs
        .iter()
        .filter_map(|(oid, n)| Some((n.strip_prefix("refs/offshoot/names/")?, *oid)))
        .filter_map(|(name, oid)| {
            let id = bench.git("run-1.git", &["cat-file", "-p", oid]);
            let id = ids.iter().find(|i| **i == id.trim())?;
            Some((*id, name))
        })
        .collect();
    let mut script = String::new();
    for n in 0..history {
        let id = ids[n as usize % ids.len()];
        let new = format!("hist{n:06}");
        for (oid, name) in &refs {
            if name.rsplit('/').next() == Some(id) && !name.starts_with("refs/offshoot/names/") {
                script.push_str(&format!("create {}{new} {oid}\n", &name[..name.len() - id.len()]));
            }
        }
        if let Some((oid, _)) =
            names.get(id).and_then(|name| refs.iter().find(|(_, r)| *r == format!("refs/project/heads/{name}")))
        {
            script.push_str(&format!("create refs/project/heads/Hist{n:06} {oid}\n"));
        }
    }
    let mut child = Command::new("git")
        .arg("--git-dir")
        .arg(bench.served.join("history.git"))
        .args(["update-ref", "--stdin"])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(Stdio::piped())
        .spawn()
        .expect("git");
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), script.as_bytes()).expect("refs");
    assert!(child.wait().expect("git").success());
    bench.git("history.git", &["pack-refs", "--all"]);
    let count = bench.git("history.git", &["for-each-ref", "--format=x"]).lines().count();
    println!();
    println!("history.git: {count} refs ({history} finished agents added)");
    url
}

/// The CPU time process `pid` has used so far (user + system), in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    // (Clock ticks at the kernel's USER_HZ, 100 on Linux.)
    ticks as f64 / 100.0
}

fn stop(mut child: Child) {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let arg = |i: usize, default: u64| args.get(i).copied().unwrap_or(default);
    let (agents, latency_ms, per_worker, lease_ms) = (arg(0, 300), arg(1, 2000), arg(2, 100), arg(3, 5000));
    let (takeover_only, no_takeover, most_workers, history) = (arg(4, 0) == 1, arg(4, 0) == 2, arg(5, 3), arg(6, 0));
    let server = Server::start_with(false);
    server.latency(Duration::from_millis(latency_ms));
    if arg(4, 0) != 3 {
        server.endless_text("done");
    }
    let base = std::env::var_os("OFFSHOOT_BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("offshoot-bench-scale-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (served, home) = (root.join("served"), root.join("home"));
    std::fs::create_dir_all(&served).expect("served");
    std::fs::create_dir_all(&home).expect("home");
    let init = Command::new("git").arg("init").arg("-q").arg("--bare").arg(served.join("handed.git")).status();
    assert!(init.expect("git").success());
    let daemon = Daemon::start(&served);
    let bench = Bench { root: root.clone(), served, home, daemon };

    // The laptop: its config on the remote, then every agent handed over.
    let laptop = root.join("laptop");
    let laptop_arg = laptop.to_str().expect("utf-8").to_owned();
    bench.run(&["new", &laptop_arg]);
    let set = |key: &str, value: &str| bench.run(&["-w", &laptop_arg, "config", "set", key, value]);
    set("providers.anthropic.base_url", &server.url());
    set("roles.worker.provider", "anthropic");
    // The workers' own providers (a worker runs every config from the remote with its
    // template's): the laptop's, pointing at the scripted server.
    let config = Command::new("git")
        .arg("--git-dir")
        .arg(laptop.join("repo.git"))
        .args(["show", "config/default:offshoot.toml"])
        .output()
        .expect("git");
    std::fs::create_dir_all(bench.home.join("template")).expect("template");
    std::fs::write(bench.home.join("template/offshoot.toml"), &config.stdout).expect("template");
    bench.run(&["-w", &laptop_arg, "remote", "add", "origin", &bench.daemon.url("handed.git")]);
    bench.run(&["-w", &laptop_arg, "push"]);
    if arg(4, 0) == 3 {
        server.endless_steps(arg(7, 10) as usize);
        steps_here_and_on_a_worker(&bench, &laptop_arg, agents, arg(7, 10), latency_ms, per_worker);
        drop(bench);
        let _ = std::fs::remove_dir_all(&root);
        return;
    }
    let started = Instant::now();
    // (OFFSHOOT_BENCH_HANDED: a directory keeping the handed-over remote of each size, to
    // measure the workers again without handing over again; the figure is then the first's.)
    let cache =
        std::env::var_os("OFFSHOOT_BENCH_HANDED").map(|d| PathBuf::from(d).join(format!("handed-{agents}.git")));
    let copy = |from: &Path, to: &Path| {
        let _ = std::fs::remove_dir_all(to);
        assert!(Command::new("cp").arg("-a").arg(from).arg(to).status().expect("cp").success());
    };
    match &cache {
        Some(kept) if kept.exists() && !takeover_only => copy(kept, &bench.served.join("handed.git")),
        _ => {
            for n in (0..agents).filter(|_| !takeover_only) {
                bench.run(&[
                    "-w",
                    &laptop_arg,
                    "prompt",
                    "--on",
                    "origin",
                    "--name",
                    &format!("Agent{n}"),
                    "Say done.",
                ]);
            }
            if let Some(kept) = cache.as_ref().filter(|_| !takeover_only) {
                copy(&bench.served.join("handed.git"), kept);
            }
        }
    }
    let handing = started.elapsed().as_secs_f64();
    println!("scale_out: {agents} agents, model latency {latency_ms} ms, up to {per_worker} agents per worker");
    println!("handing over: {handing:.1} s ({:.0} ms per `prompt --on`)", handing * 1000.0 / agents as f64);
    println!();
    println!("workers  wall s  agents/s  vs 1 worker  claims  conflicts  conflict rate  worker CPU/agent (each)");

    let mut one = None;
    for workers in (1..=most_workers).filter(|_| !takeover_only) {
        let repo = format!("run-{workers}.git");
        let url = bench.fresh_remote(&repo);
        let spaces: Vec<PathBuf> = (0..workers).map(|w| bench.workspace(&format!("w{workers}-{w}"), &url)).collect();
        let started = Instant::now();
        let mut children: Vec<Child> =
            spaces.iter().enumerate().map(|(i, ws)| bench.worker(ws, &format!("w{i}"), per_worker, 30_000)).collect();
        let streams: Vec<_> = children.iter_mut().map(events).collect();
        // Settled once a claim has been made and none is held, nor any message waiting.
        std::thread::sleep(Duration::from_millis(500));
        while !bench.settled(&repo) {
            assert!(started.elapsed() < Duration::from_secs(1800), "{workers} workers never finished");
            std::thread::sleep(Duration::from_millis(250));
        }
        let wall = started.elapsed().as_secs_f64();
        let cpu: Vec<f64> = children.iter().map(|c| cpu_seconds(c.id())).collect();
        children.into_iter().for_each(stop);
        let (mut claims, mut conflicts) = (0, 0);
        for stream in streams {
            for (_, event) in stream.try_iter() {
                if event["type"] == "tally" {
                    claims += event["tally"]["claimed"].as_u64().unwrap_or(0);
                    conflicts += event["tally"]["conflicts"].as_u64().unwrap_or(0);
                }
            }
        }
        let throughput = agents as f64 / wall;
        let base = *one.get_or_insert(throughput);
        let rate = conflicts as f64 / (claims + conflicts).max(1) as f64;
        let per_agent: Vec<String> = cpu.iter().map(|s| format!("{:.1} ms", s * 1000.0 / agents as f64)).collect();
        println!(
            "{workers:>7}  {wall:>6.1}  {throughput:>8.2}  {:>10.2}x  {claims:>6}  {conflicts:>9}  {:>12.1}%  {}",
            throughput / base,
            rate * 100.0,
            per_agent.join(", ")
        );
    }
    if history > 0 && !takeover_only {
        let url = with_history(&bench, history);
        let (wall, cpu, stream) = bench.one_worker("history.git", &url, "h0", per_worker);
        let claims: u64 = stream
            .try_iter()
            .filter(|(_, e)| e["type"] == "tally")
            .map(|(_, e)| e["tally"]["claimed"].as_u64().unwrap_or(0))
            .sum();
        println!();
        println!(
            "with {history} finished agents on the remote: {wall:.1} s, {:.2} agents/s, {claims} claims, worker CPU {:.1} ms per agent",
            agents as f64 / wall,
            cpu * 1000.0 / agents as f64
        );
        if cache.is_some() {
            // (The laptop did not make the kept remote: its config there is another's.)
            println!("`prompt --on` there: not timed (a kept remote, OFFSHOOT_BENCH_HANDED)");
            drop(bench);
            let _ = std::fs::remove_dir_all(&root);
            return;
        }
        bench.run(&["-w", &laptop_arg, "remote", "add", "hist", &url]);
        bench.run(&["-w", &laptop_arg, "push", "hist"]);
        let mut times: Vec<f64> = (0..5)
            .map(|n| {
                let at = Instant::now();
                bench.run(&["-w", &laptop_arg, "prompt", "--on", "hist", "--name", &format!("Late{n}"), "Say done."]);
                at.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!("`prompt --on` there: median {:.0} ms (of 5: {:.0}–{:.0} ms)", times[2], times[0], times[4]);
    }
    if no_takeover {
        drop(bench);
        let _ = std::fs::remove_dir_all(&root);
        return;
    }

    // Take-over: a worker's machine dies while it holds agents, all in a model call.
    server.latency(Duration::from_secs(60));
    // A remote of its own holding as many agents as the dying worker will drive.
    let repo = "takeover.git";
    let held_target = per_worker.min(20);
    let init = Command::new("git").arg("init").arg("-q").arg("--bare").arg(bench.served.join(repo)).status();
    assert!(init.expect("git").success());
    let url = bench.daemon.url(repo);
    bench.run(&["-w", &laptop_arg, "remote", "add", "take", &url]);
    bench.run(&["-w", &laptop_arg, "push", "take"]);
    for n in 0..held_target {
        bench.run(&["-w", &laptop_arg, "prompt", "--on", "take", "--name", &format!("Held{n}"), "Say done."]);
    }
    let (a, b) = (bench.workspace("take-a", &url), bench.workspace("take-b", &url));
    let mut dying = bench.worker(&a, "dying", held_target, lease_ms);
    // (Its agents stay claimed: each waits a minute for its model.)
    let dying_events = events(&mut dying);
    let mut held = std::collections::BTreeSet::new();
    while held.len() < held_target as usize {
        let (_, event) = dying_events.recv_timeout(Duration::from_secs(60)).expect("the first worker claims");
        match event["type"].as_str() {
            Some("claimed") => held.insert(event["agent"].as_str().unwrap_or("").to_owned()),
            Some("released") => held.remove(event["agent"].as_str().unwrap_or("")),
            _ => false,
        };
    }
    let mut survivor = bench.worker(&b, "survivor", held_target, lease_ms);
    let survivor_events = events(&mut survivor);
    std::thread::sleep(Duration::from_millis(300));
    for (_, event) in dying_events.try_iter() {
        match event["type"].as_str() {
            Some("claimed") => held.insert(event["agent"].as_str().unwrap_or("").to_owned()),
            Some("released") => held.remove(event["agent"].as_str().unwrap_or("")),
            _ => false,
        };
    }
    let killed = Instant::now();
    let _ = Command::new("kill").args(["-KILL", &dying.id().to_string()]).status();
    let _ = dying.wait();
    for lock in std::fs::read_dir(a.join("locks")).into_iter().flatten().flatten() {
        if let Some(pid) =
            std::fs::read_to_string(lock.path()).ok().and_then(|t| t.split_whitespace().next()?.parse::<u32>().ok())
        {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pid}")]).status();
        }
    }
    let (mut first, mut last, mut taken) = (None, None, 0);
    while taken < held.len() {
        let Ok((at, event)) = survivor_events.recv_timeout(Duration::from_secs(120)) else { break };
        if event["type"] == "claimed"
            && event["took_over"] == true
            && held.contains(event["agent"].as_str().unwrap_or(""))
        {
            let after = at.duration_since(killed).as_secs_f64();
            first.get_or_insert(after);
            last = Some(after);
            taken += 1;
        }
    }
    stop(survivor);
    println!();
    println!(
        "take-over, lease {lease_ms} ms: the killed worker held {} agents; the other took over {taken}: the first after {:.2} s, the last after {:.2} s",
        held.len(),
        first.unwrap_or(f64::NAN),
        last.unwrap_or(f64::NAN)
    );
    drop(bench);
    let _ = std::fs::remove_dir_all(&root);
}
