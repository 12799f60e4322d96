#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]

//! What `offshoot acp` adds and what it costs idle. On a project of FILES small files
//! (one commit), against the scripted model server: the time from a `session/prompt`
//! (a new session's first, which makes the agent) to the model server's first request,
//! against the same from starting `offshoot prompt` on the same work; then the CPU an
//! `offshoot acp` uses over SECS seconds with a session open and nothing at work.
//!
//! Run: `cargo bench --bench acp -- [FILES] [SECS]` (default 2000 10); under
//! `OFFSHOOT_BENCH_DIR` (tmpfs: `/dev/shm`) instead of the temporary directory.

#[path = "../tests/cli/support/clean.rs"]
mod clean;
#[path = "support/cpu.rs"]
mod cpu;
#[path = "support/disk.rs"]
mod disk;
#[path = "support/git.rs"]
mod git;
#[path = "support/median.rs"]
mod median;
#[path = "../tests/cli/support/server.rs"]
mod server;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use git::git;
use serde_json::{Value, json};
use server::{Server, Turn};

const RUNS: usize = 7;

/// `offshoot` with a clean environment, the workspace `ws` and the bench's key.
fn offshoot(root: &Path, ws: &Path, dir: &Path) -> Command {
    let mut c = clean::offshoot(&root.join("home"), dir);
    c.arg("-w").arg(ws).env("ANTHROPIC_API_KEY", "bench-key");
    c
}

/// A JSON-RPC peer on `offshoot acp`'s stdio: requests written as lines, answers read
/// (notifications passed over).
struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Peer {
    fn start(mut command: Command) -> Peer {
        let mut child =
            command.arg("acp").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("acp");
        let (stdin, stdout) = (child.stdin.take().expect("stdin"), child.stdout.take().expect("stdout"));
        Peer { child, stdin, stdout: BufReader::new(stdout), next: 1 }
    }

    fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next;
        self.next += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").expect("write");
        id
    }

    fn answer(&mut self, id: u64) -> Value {
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).expect("read") > 0, "acp closed its stdout");
            let value: Value = serde_json::from_str(&line).expect("json");
            if value["id"] == id {
                assert!(value.get("error").is_none(), "{value}");
                return value["result"].clone();
            }
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        self.answer(id)
    }
}

/// Waits for the server's request number `n` (from 1); when it came.
fn request_at(server: &Server, n: usize) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(r) = server.requests().get(n - 1) {
            return r.at;
        }
        assert!(Instant::now() < deadline, "no request {n}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let files = args.first().copied().unwrap_or(2000) as usize;
    let secs = args.get(1).copied().unwrap_or(10);
    let base = std::env::var_os("OFFSHOOT_BENCH_DIR").map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("offshoot-bench-acp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    // (On ext4 a new file costs ~10 µs, and up to ~1 ms for minutes after a mass deletion.)
    println!("a new file costs {:.0} µs here", disk::file_creation_micros(&root.join("probe"), 500));
    let repo = root.join("project");
    std::fs::create_dir_all(&repo).expect("repo");
    git(&repo, &["init", "-q", "-b", "main"]);
    for i in 0..files {
        let dir = repo.join(format!("d{:03}", i / 100));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join(format!("f{i}.txt")), format!("file {i}\n")).expect("file");
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "generated"]);
    let ws = root.join("ws");
    let made = clean::offshoot(&root.join("home"), &root)
        .arg("new")
        .arg(&ws)
        .arg("--project")
        .arg(&repo)
        .output()
        .expect("new");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let server = Server::start();
    for (key, value) in [("providers.anthropic.base_url", server.url()), ("roles.worker.provider", "anthropic".into())]
    {
        let set = offshoot(&root, &ws, &root).args(["config", "set", key, &value]).output().expect("set");
        assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    }

    // `offshoot prompt`: from the command's start to the first request.
    let mut prompt_ms = Vec::new();
    for _ in 0..RUNS {
        server.push_turns([Turn::text("done")]);
        let seen = server.requests().len();
        let started = Instant::now();
        let out = offshoot(&root, &ws, &repo).args(["prompt", "hello"]).output().expect("prompt");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        prompt_ms.push(request_at(&server, seen + 1).duration_since(started));
    }

    // `offshoot acp`, initialized once: from `session/prompt` to the first request.
    let mut acp = Peer::start(offshoot(&root, &ws, &repo));
    acp.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}));
    let mut acp_ms = Vec::new();
    let mut last = Value::Null;
    for _ in 0..RUNS {
        server.push_turns([Turn::text("done")]);
        let session = acp.call("session/new", json!({"cwd": repo, "mcpServers": []}))["sessionId"].clone();
        last = session.clone();
        let seen = server.requests().len();
        let started = Instant::now();
        let id =
            acp.send("session/prompt", json!({"sessionId": session, "prompt": [{"type": "text", "text": "hello"}]}));
        acp_ms.push(request_at(&server, seen + 1).duration_since(started));
        acp.answer(id);
    }
    // A later prompt to the last session (working in place), a file of the checkout
    // edited before it as a user would between turns: the edit is taken in first.
    let session = last;
    let mut later_ms = Vec::new();
    for i in 0..RUNS {
        server.push_turns([Turn::text("done")]);
        // (The user reads the answer: the last turn's driver has ended.)
        std::thread::sleep(Duration::from_millis(500));
        std::fs::write(repo.join("d000/f0.txt"), format!("edited {i}\n")).expect("edit");
        let seen = server.requests().len();
        let started = Instant::now();
        let id =
            acp.send("session/prompt", json!({"sessionId": session, "prompt": [{"type": "text", "text": "again"}]}));
        later_ms.push(request_at(&server, seen + 1).duration_since(started));
        acp.answer(id);
    }
    let each =
        |d: &[Duration]| d.iter().map(|d| format!("{:.0}", d.as_secs_f64() * 1000.0)).collect::<Vec<_>>().join(" ");
    println!("  each (ms): acp {}; prompt {}; acp later {}", each(&acp_ms), each(&prompt_ms), each(&later_ms));
    println!(
        "project of {files} files: first model request {:.1} ms after `session/prompt` (acp, median of {RUNS}), {:.1} ms after starting `offshoot prompt`; {:.1} ms after a later prompt with one file edited in the checkout",
        median::median_ms(&acp_ms),
        median::median_ms(&prompt_ms),
        median::median_ms(&later_ms)
    );

    // Idle: the connection open, sessions made and done, nothing at work.
    std::thread::sleep(Duration::from_secs(1));
    let pid = acp.child.id();
    let (before, started) = (cpu::seconds(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(secs));
    let (cpu, took) = (cpu::seconds(pid) - before, started.elapsed());
    println!(
        "idle offshoot acp ({RUNS} sessions open, none at work): {cpu:.3} s of CPU over {:.1} s = {:.3}% of a core",
        took.as_secs_f64(),
        100.0 * cpu / took.as_secs_f64()
    );
    drop(acp.stdin);
    let _ = acp.child.wait();
    let _ = std::fs::remove_dir_all(&root);
}
