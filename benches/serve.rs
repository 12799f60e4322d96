//! `offshoot serve` at scale: a workspace of one root and 999 children (made with their
//! dispatch commits, not run, as the chat_tree bench makes them), 100 of them at work.
//! Their work is written as their drivers write it — lines appended to their events
//! files, each agent's lock held — by this process, so what is measured is the server:
//!
//! - the tree endpoint (`GET /api/agents`, every agent and the questions), median of 10,
//!   at rest and while the hundred write (`ls --json` on the same workspace beside it);
//! - from an events line appended to the moment a client of the event stream has it,
//!   with 1 client and with 20 at once (median and p99 of 200 appends each, one every
//!   20 ms, while the hundred write their own lines too);
//! - the server's CPU while idle (no line written), and its peak memory;
//! - the page usable: from a headless Chromium's navigation to the tree drawn with every
//!   agent and the event stream open, on a server just started (its first tree reads
//!   everything) and again five times (when `.ci/tools` has unpacked the browser);
//! - a real driver's 30-step run against the scripted model server while the hundred
//!   write, with no stream client and with 20 reading every event: what the clients
//!   cost the drivers.
//!
//! `cargo bench --bench serve -- [IDLE SECONDS]` (default 60).

#[path = "../tests/cli/support/browser.rs"]
mod browser;
#[path = "support/cpu.rs"]
mod cpu;
#[path = "support/memory.rs"]
#[allow(dead_code, reason = "this bench reads another process's peak")]
mod memory;
#[path = "../tests/cli/support/server.rs"]
mod model;
#[path = "support/team.rs"]
mod team;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use domain::id::AgentId;
use engine::store::workspace::Workspace;
use infra::lock::LockGuard;

const CHILDREN: usize = 999;
const WORKING: usize = 100;
const PINGS: usize = 200;
const DRIVEN_STEPS: usize = 30;
const DRIVES: usize = 3;
const PAGE_LOADS: usize = 6;

fn append(ws: &Workspace, agent: &AgentId, line: &str) {
    let dir = ws.layout.steps(agent);
    std::fs::create_dir_all(&dir).expect("steps dir");
    let mut file =
        std::fs::OpenOptions::new().create(true).append(true).open(dir.join("events.ndjson")).expect("events file");
    file.write_all(format!("{line}\n").as_bytes()).expect("append");
}

fn get(port: u16, token: &str, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\r\n").expect("send");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("answer");
    answer
}

/// An event-stream client: every data line it reads, with when it read it.
fn client(port: u16, token: &str, seen: mpsc::Sender<(String, Instant)>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(s, "GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\r\n").expect("send");
    std::thread::spawn(move || {
        for line in BufReader::new(s).lines() {
            let Ok(line) = line else { return };
            if let Some(data) = line.strip_prefix("data: ")
                && seen.send((data.to_owned(), Instant::now())).is_err()
            {
                return;
            }
        }
    });
}

/// A stream client that reads every event and keeps none, until the server closes.
fn reader(port: u16, token: &str) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(s, "GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\r\n").expect("send");
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
}

/// `offshoot` on the bench's workspace, as its user runs it.
fn offshoot(ws: &std::path::Path, home: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_offshoot"));
    c.arg("-w")
        .arg(ws)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("OFFSHOOT_HOME", home)
        .env("ANTHROPIC_API_KEY", "bench-key");
    c
}

/// A real agent's run of [`DRIVEN_STEPS`] bash steps and an answer, against `model`: its
/// time, in ms.
fn drive(ws: &std::path::Path, home: &std::path::Path, model: &model::Server, n: usize) -> f64 {
    let steps = (0..DRIVEN_STEPS).map(|i| model::Turn::bash(&format!("b{i}"), "echo step"));
    model.push_turns(steps.chain([model::Turn::text("driven")]));
    let started = Instant::now();
    let out = offshoot(ws, home).args(["prompt", "--name", &format!("Driven{n}"), "work"]).output().expect("prompt");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    started.elapsed().as_secs_f64() * 1000.0
}

/// The page on `url` in headless Chromium, loaded [`PAGE_LOADS`] times: the ms from each
/// navigation to the tree drawn with every agent and the stream open; `None` when
/// `.ci/tools` has not unpacked the browser.
fn page_usable(url: &str, agents: usize) -> Option<Vec<f64>> {
    let browser = browser::unpacked()?;
    let usable = format!(
        "document.querySelectorAll('.agent').length === {agents} && document.querySelector('#status').textContent === 'live'"
    );
    let mut steps = vec![serde_json::json!(["wait", usable, 30])];
    for _ in 1..PAGE_LOADS {
        steps.push(serde_json::json!(["navigate"]));
        steps.push(serde_json::json!(["wait", usable, 30]));
    }
    let seen = browser::browse(&browser, url, serde_json::Value::Array(steps));
    let waits: Vec<&serde_json::Value> = seen.iter().filter(|s| s["step"] == "wait").collect();
    assert!(waits.iter().all(|w| w["value"] == true), "the page never drew the tree: {seen:?}");
    Some(waits.iter().filter_map(|w| w["ms"].as_f64()).collect())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Appends [`PINGS`] lines to `agent`'s file and times each to `clients` clients.
fn pings(ws: &Workspace, agent: &AgentId, port: u16, token: &str, clients: usize) -> (f64, f64) {
    let (tx, rx) = mpsc::channel();
    for _ in 0..clients {
        client(port, token, tx.clone());
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut waits = Vec::new();
    for n in 0..PINGS {
        let marker = format!("ping-{clients}-{n}");
        let sent = Instant::now();
        append(ws, agent, &serde_json::json!({"type": "text", "text": marker, "agent": agent.as_str()}).to_string());
        let mut got = 0;
        while got < clients {
            let (data, at) = rx.recv_timeout(Duration::from_secs(5)).expect("the ping reached the clients");
            if data.contains(&marker) {
                got += 1;
                waits.push(at.duration_since(sent).as_secs_f64() * 1000.0);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    waits.sort_by(f64::total_cmp);
    (percentile(&waits, 0.5), percentile(&waits, 0.99))
}

#[expect(clippy::print_stdout, reason = "a bench reports on stdout")]
fn main() {
    let idle: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(60);
    let base = std::env::var_os("OFFSHOOT_BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let root_dir = base.join(format!("offshoot-bench-serve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root_dir);
    let ws_path = root_dir.join("ws");
    let made = Instant::now();
    let (ws, _, children) = team::make(&ws_path, CHILDREN);
    println!("serve: one root and {CHILDREN} children, made in {:.1} s", made.elapsed().as_secs_f64());
    let working: Vec<AgentId> = children.iter().take(WORKING).cloned().collect();
    let _locks: Vec<LockGuard> =
        working.iter().map(|id| LockGuard::try_acquire(&ws.layout.lock(id)).expect("lock").expect("free")).collect();

    let home = root_dir.join("home");
    // The scripted model server, for the real drivers run at the end.
    let model = model::Server::start();
    for (key, value) in [("providers.anthropic.base_url", model.url()), ("roles.worker.provider", "anthropic".into())] {
        let set = offshoot(&ws_path, &home).args(["config", "set", key, &value]).output().expect("set");
        assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    }
    let mut serve = offshoot(&ws_path, &home)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let mut url = String::new();
    BufReader::new(serve.stdout.take().expect("stdout")).read_line(&mut url).expect("url");
    let (port, token) = url.trim().trim_start_matches("http://127.0.0.1:").split_once("/?token=").expect("url");
    let (port, token): (u16, String) = (port.parse().expect("port"), token.to_owned());
    let pid = serve.id();

    // The page, first on the server just started (its first tree reads everything).
    let url = format!("http://127.0.0.1:{port}/?token={token}");
    match page_usable(&url, CHILDREN + 1) {
        Some(loads) => {
            let mut warm = loads[1..].to_vec();
            warm.sort_by(f64::total_cmp);
            println!(
                "the page usable ({} agents drawn, stream open): first {:.0} ms, then median {:.0} ms, slowest {:.0} ms of {}",
                CHILDREN + 1,
                loads[0],
                percentile(&warm, 0.5),
                warm[warm.len() - 1],
                warm.len()
            );
        }
        None => println!("the page: not measured (run `.ci/tools` to unpack the browser)"),
    }

    let mut tree = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let answer = get(port, &token, "/api/agents");
        tree.push(started.elapsed().as_secs_f64() * 1000.0);
        assert!(answer.starts_with("HTTP/1.1 200"), "{}", &answer[..answer.len().min(300)]);
    }
    tree.sort_by(f64::total_cmp);
    println!("GET /api/agents ({} agents): median {:.1} ms, slowest {:.1} ms", CHILDREN + 1, tree[5], tree[9]);
    // The same agents from `ls --json`, a process each: what the endpoint adds to it.
    let mut ls = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_offshoot"))
            .arg("-w")
            .arg(&ws_path)
            .args(["ls", "--json"])
            .env_clear()
            .env("HOME", &home)
            .env("OFFSHOOT_HOME", &home)
            .output()
            .expect("ls");
        assert!(out.status.success());
        ls.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    ls.sort_by(f64::total_cmp);
    println!("  `offshoot ls --json` on the same workspace: median {:.1} ms", ls[2]);

    // The hundred work: each writes a line every 500 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (stop, ws_path, working) = (stop.clone(), ws_path.clone(), working.clone());
        std::thread::spawn(move || {
            let ws = Workspace::open(&ws_path).expect("workspace");
            while !stop.load(Ordering::Relaxed) {
                let tick = Instant::now();
                for agent in &working {
                    append(
                        &ws,
                        agent,
                        &serde_json::json!({"type": "waiting", "children": 0, "agent": agent.as_str()}).to_string(),
                    );
                }
                std::thread::sleep(Duration::from_millis(500).saturating_sub(tick.elapsed()));
            }
        })
    };
    // The tree again while the hundred write: each asks for what changed since.
    std::thread::sleep(Duration::from_millis(1_000));
    let mut busy = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        assert!(get(port, &token, "/api/agents").starts_with("HTTP/1.1 200"));
        busy.push(started.elapsed().as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(200));
    }
    busy.sort_by(f64::total_cmp);
    println!("GET /api/agents while the hundred write: median {:.1} ms, slowest {:.1} ms", busy[5], busy[9]);
    // A real driver with no stream client, then with 20 reading every event.
    let alone: Vec<f64> = (0..DRIVES).map(|n| drive(&ws_path, &home, &model, n)).collect();
    for _ in 0..20 {
        reader(port, &token);
    }
    std::thread::sleep(Duration::from_millis(300));
    let watched: Vec<f64> = (0..DRIVES).map(|n| drive(&ws_path, &home, &model, DRIVES + n)).collect();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "a driver's {DRIVEN_STEPS} steps, the hundred writing: {:.0} ms with no stream client, {:.0} ms with 20 (medians of {DRIVES}; {alone:.0?} and {watched:.0?})",
        median(alone.clone()),
        median(watched.clone())
    );
    let pinged = &children[WORKING];
    for clients in [1, 20] {
        let (median, p99) = pings(&ws, pinged, port, &token, clients);
        println!(
            "an appended line to {clients} stream client(s), the hundred writing: median {median:.1} ms, p99 {p99:.1} ms"
        );
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().expect("churn");

    std::thread::sleep(Duration::from_secs(1));
    let (before, started) = (cpu::seconds(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(idle));
    let (used, took) = (cpu::seconds(pid) - before, started.elapsed().as_secs_f64());
    println!(
        "idle (the 20 readers' streams open, nothing written): {used:.3} s of CPU over {took:.1} s = {:.3}% of a core",
        100.0 * used / took
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    println!("peak memory of the server: {:.1} MiB", memory::peak_rss_kib(&status) as f64 / 1024.0);
    let _ = serve.kill();
    let _ = serve.wait();
    // (`OFFSHOOT_BENCH_KEEP=1` keeps the workspace, to look into it.)
    match std::env::var_os("OFFSHOOT_BENCH_KEEP") {
        Some(_) => println!("kept: {}", ws_path.display()),
        None => {
            let _ = std::fs::remove_dir_all(&root_dir);
        }
    }
}
