#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]

//! The step-loop benchmark: an N-step tool loop (each step one `bash` `echo`)
//! against the scripted Anthropic server with zero model latency, driven in-process
//! through the same code as `offshoot run`. Reports the harness's time per step, the
//! floor for the same work without git (the HTTP round trip of the same request, the
//! tool's process, the record files; each measured between two of the harness's
//! steps, so both meet the disk in the same state), overhead at the start and end of
//! the conversation, and peak memory.
//!
//! The floor's tool process runs as the harness runs it: in the agent's sandbox
//! (the same jail, through the sandbox helper), so the overhead is the harness's own;
//! `OFFSHOOT_BENCH_FLOOR=plain` runs it unconfined instead (the sandbox's cost then
//! counts as overhead; `cargo bench --bench sandbox` measures it alone).
//!
//! Run: `cargo bench --bench step_loop -- [STEPS]` (default 1000); with
//! `OFFSHOOT_BENCH_BUDGETS=1` every whole-tree budget is set (and never reached); with
//! `OFFSHOOT_BENCH_HOOK=1` a `PreToolUse` hook (`/bin/true`) runs before every call.

#[path = "support/clock.rs"]
mod clock;
#[path = "support/disk.rs"]
mod disk;
#[path = "support/median.rs"]
mod median;
#[path = "support/memory.rs"]
mod memory;
#[path = "../tests/cli/support/server.rs"]
mod server;

use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use clock::Clock;
use disk::file_creation_micros;
use domain::id::AgentId;
use engine::Env;
use engine::agents::containment::{self, Site};
use engine::agents::runtime::Runtime;
use engine::agents::{self, Start};
use engine::step::driver;
use engine::step::events::{Event, Observer};
use engine::store::workspace::{Workspace, set_key, template_files};
use infra::process::{self, Group, Io, Limits, Spec};
use infra::provider::{Request, anthropic};
use infra::sandbox::{self, Jail};
use infra::time::Timestamp;
use median::median_ms;
use server::{Server, Turn};

fn mean_ms(d: &[Duration]) -> f64 {
    d.iter().map(Duration::as_secs_f64).sum::<f64>() * 1000.0 / d.len().max(1) as f64
}

fn main() {
    let steps: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1000);
    let base = std::env::var_os("OFFSHOOT_BENCH_DIR").map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("offshoot-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);

    let server = Server::start_with(false);
    let mut turns: Vec<Turn> = (1..=steps).map(|i| Turn::bash(&format!("call_{i}"), "echo step")).collect();
    turns.push(Turn::text("done"));
    server.push_turns(turns);

    let mut files = template_files(None).expect("template");
    for (path, bytes) in files.iter_mut() {
        if path == "offshoot.toml" {
            let mut text = set_key(&String::from_utf8_lossy(bytes), "providers.anthropic.base_url", &server.url())
                .expect("set key");
            // Every whole-tree budget set and never reached: the checks run at each step.
            if std::env::var_os("OFFSHOOT_BENCH_BUDGETS").is_some() {
                for (key, value) in [
                    ("budgets.max_steps", "1000000000"),
                    ("budgets.max_tokens", "1000000000000"),
                    ("budgets.max_cost_usd", "1000000"),
                    ("budgets.max_wall_seconds", "1000000000"),
                ] {
                    text = set_key(&text, key, value).expect("set key");
                }
            }
            // One `PreToolUse` hook on every call (`/bin/true`): what a hook costs a step.
            if std::env::var_os("OFFSHOOT_BENCH_HOOK").is_some() {
                text = set_key(&text, "hooks.PreToolUse", r#"[{ matcher = "Bash", command = "/bin/true" }]"#)
                    .expect("set key");
            }
            *bytes = text.into_bytes();
        }
    }
    let create_us = file_creation_micros(&root.join("probe"), 200);
    let ws = Workspace::create(&root.join("ws"), &files).expect("workspace");
    let env = Env::new([("ANTHROPIC_API_KEY".to_owned(), "bench".to_owned())]);
    let spawn = Start {
        message: "Run echo steps.",
        name: Some("Bench"),
        now: Timestamp::now(),
        random: 12345,
        env: &env,
        project: None,
        model: None,
        reasoning: None,
        copy_ignored: &[],
        mode: None,
        on_ask: None,
    };
    let id = agents::create_root(&ws, "worker", "default", &spawn).expect("agent");
    let rss_before = memory::own_peak_rss_kib();

    // The floor of step n runs at the start of step n + 1, between two steps of the
    // harness: both meet the disk in the same state (on ext4 what a new file costs
    // drifts for minutes after a mass deletion).
    let floor_server = Server::start_with(false);
    let plain = std::env::var("OFFSHOOT_BENCH_FLOOR").is_ok_and(|v| v == "plain");
    let jail = (!plain).then(|| jail_of(&ws, &id));
    let mut clock = Interleaved::new(&ws, &id, &floor_server, steps, jail);
    let started = Instant::now();
    // The driver runs in this process; the runtime's binary is only for launches.
    let runtime = Runtime::new(ws.layout.clone(), env!("CARGO_BIN_EXE_offshoot").into(), env, Default::default());
    driver::run(&ws, &runtime, &id, &mut clock).expect("run");
    let total = started.elapsed() - clock.floor.iter().sum::<Duration>();
    let rss_after = memory::own_peak_rss_kib();
    // A driver that starts with nothing due: it opens the directory (checking
    // `.offshoot/` against the tip, every transcript entry hashed) and lets go.
    let restart = Instant::now();
    driver::run(&ws, &runtime, &id, &mut Clock { starts: Vec::new() }).expect("rerun");
    let restart = restart.elapsed();
    let per_step = clock.harness();
    let window = 50.min(steps / 2).max(1);
    let (h_first, h_last) = (median_ms(&per_step[..window]), median_ms(&per_step[per_step.len() - window..]));
    let floor = &clock.floor;
    let (f_first, f_last) = (median_ms(&floor[..window]), median_ms(&floor[floor.len() - window..]));
    let (h_all, f_all) = (mean_ms(&per_step), mean_ms(floor));
    // What was sent, as the step's record keeps it (its size and digest; the request
    // itself is assembled again from the commit and the config).
    let size = |n: usize| {
        engine::ops::inspect::step_meta(&ws, &id, n as u32).ok().and_then(|m| m.sent).map(|s| s.bytes).unwrap_or(0)
    };

    println!(
        "step loop: {steps} steps of one `bash echo` each, scripted Anthropic server on loopback, zero model latency"
    );
    println!("directory: {} (creating one new file there costs {create_us:.0} µs)", base.display());
    println!(
        "the floor's tool process: {}",
        if plain {
            "unconfined (OFFSHOOT_BENCH_FLOOR=plain)"
        } else {
            "in the agent's sandbox, as the harness runs it"
        }
    );
    println!("total wall time: {:.2} s", total.as_secs_f64());
    println!("{:<28} {:>13} {:>13} {:>15} {:>7}", "", "harness/step", "floor/step", "overhead/step", "ratio");
    let row = |label: String, h: f64, f: f64| {
        println!("{label:<28} {h:>10.2} ms {f:>10.2} ms {:>12.2} ms {:>6.2}x", h - f, h / f);
    };
    row("all steps (mean)".into(), h_all, f_all);
    row(format!("steps 1-{window} (median)"), h_first, f_first);
    row(format!("steps {}-{steps} (median)", steps - window + 1), h_last, f_last);
    println!(
        "request sent: step 1 {} bytes, step {steps} {} bytes (not stored: assembled again on demand)",
        size(1),
        size(steps)
    );
    // `show --step N --request` for the first and the last: the body assembled again
    // from the (folded) record must be the one whose digest the call kept.
    for n in [1, steps] {
        let resent = engine::ops::inspect::resend(&ws, &id, n as u32).expect("resend");
        assert_eq!(resent.matches, Some(true), "step {n}: the request assembled again differs from what was sent");
    }
    println!("show --step 1 and --step {steps} --request: the bodies sent, byte for byte (their SHA-256 as recorded)");
    println!("steps/ on disk after the run: {:.1} MiB", tree_bytes(&ws.layout.steps(&id)) as f64 / 1048576.0);
    println!(
        "repo.git on disk after the run: {:.1} MiB",
        tree_bytes(&ws.layout.root().join("repo.git")) as f64 / 1048576.0
    );
    // The whole workspace but the floor's own records, as `du` counts it (blocks).
    let _ = std::fs::remove_dir_all(ws.layout.root().join("floor"));
    let mut parts: Vec<(String, u64)> = std::fs::read_dir(ws.layout.root())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), tree_blocks(&e.path())))
        .filter(|(_, b)| *b >= 1 << 20)
        .collect();
    parts.sort_by_key(|p| std::cmp::Reverse(p.1));
    let parts: Vec<String> = parts.iter().map(|(n, b)| format!("{n} {:.1}", *b as f64 / 1048576.0)).collect();
    println!(
        "the workspace on disk after the run (du, no gc): {:.1} MiB ({} MiB)",
        tree_blocks(ws.layout.root()) as f64 / 1048576.0,
        parts.join(", ")
    );
    let (extended, pairs) = prefix_stability(&ws, &id, steps);
    println!(
        "prefix stability: {extended} of {pairs} consecutive requests ({:.1}%) extend the one before byte for byte (system, tools, every earlier message; `cache_control` marks, outside the cache key, left out)",
        100.0 * extended as f64 / pairs.max(1) as f64
    );
    println!(
        "a driver starting with nothing due after the run ({} transcript entries): {:.1} ms",
        2 * steps + 2,
        restart.as_secs_f64() * 1000.0
    );
    println!(
        "peak RSS of the bench process (driver and server): {rss_before} KiB before the run, {rss_after} KiB after"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// Times the harness's steps and, between them, the floor: the same work without git
/// or the harness. For each step, POST that step's recorded request to a second
/// server and read the stream, run the tool's process, and write the same new files
/// the harness writes outside git (the step record with its tool record, and the two
/// transcript entries).
struct Interleaved<'a> {
    ws: &'a Workspace,
    id: &'a AgentId,
    server: &'a Server,
    agent: ureq::Agent,
    scratch: std::path::PathBuf,
    /// The agent's jail, for the floor's tool process (none: unconfined).
    jail: Option<Jail>,
    /// When each step started (after the floor run at its start) and when the floor
    /// run at its start began.
    started: Vec<Instant>,
    paused: Vec<Instant>,
    floor: Vec<Duration>,
    /// Reads the transcript for the requests the floor sends again, each entry once.
    loader: engine::store::snapshot::Loader,
}

impl<'a> Interleaved<'a> {
    fn new(
        ws: &'a Workspace,
        id: &'a AgentId,
        server: &'a Server,
        steps: usize,
        jail: Option<Jail>,
    ) -> Interleaved<'a> {
        let scratch = ws.layout.root().join("floor");
        std::fs::create_dir_all(&scratch).expect("scratch");
        Interleaved {
            ws,
            id,
            server,
            agent: ureq::Agent::config_builder().http_status_as_error(false).build().into(),
            scratch,
            jail,
            started: Vec::with_capacity(steps + 1),
            paused: Vec::with_capacity(steps + 1),
            floor: Vec::with_capacity(steps),
            loader: Default::default(),
        }
    }

    /// The harness's time for each step but the last: from its start to the pause
    /// at the start of the next.
    fn harness(&self) -> Vec<Duration> {
        self.started.iter().zip(self.paused.iter().skip(1)).map(|(s, p)| *p - *s).collect()
    }

    fn floor_step(&mut self, n: usize) -> Duration {
        // The floor still writes the request as a step record once held it whole.
        let request =
            engine::ops::inspect::reassemble_with(self.ws, self.id, n as u32, &mut self.loader).expect("request");
        let recorded = serde_json::to_vec(&request).expect("json");
        let wire = anthropic::encode(&request, Some("bench"));
        self.server.push(server::Reply::Turn(Turn::bash("call_floor", "echo step")));
        let t = Instant::now();
        let response = self
            .agent
            .post(format!("{}{}", self.server.url(), wire.path))
            .header("content-type", "application/json")
            .send(&wire.body[..])
            .expect("post");
        let mut body = Vec::new();
        response.into_body().into_reader().read_to_end(&mut body).expect("read");
        let tool = self.tool();
        let dir = self.scratch.join(format!("{n:04}"));
        let tool_dir = dir.join("tools").join("call_floor");
        std::fs::create_dir_all(&tool_dir).expect("step dirs");
        write(&dir.join("request.json"), &recorded);
        write(&dir.join("response.ndjson"), &body);
        write(&dir.join("meta.json"), b"{\"outcome\":\"ok\"}");
        write(&tool_dir.join("input.json"), b"{\"command\":\"echo step\"}");
        write(&tool_dir.join("output.json"), &tool.stdout);
        write(&self.scratch.join(format!("{:04}-model.json", 2 * n)), &body[..body.len().min(512)]);
        write(&self.scratch.join(format!("{:04}-tool.json", 2 * n + 1)), &tool.stdout);
        t.elapsed()
    }
}

impl Interleaved<'_> {
    /// The tool's process, as the harness starts it: `sh -c "echo step"`, in the
    /// agent's jail unless the floor is plain. Returns its stdout.
    fn tool(&self) -> ToolOut {
        let Some(jail) = &self.jail else {
            return ToolOut { stdout: Command::new("sh").args(["-c", "echo step"]).output().expect("sh").stdout };
        };
        let args = [OsStr::new("-c"), OsStr::new("echo step")];
        let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        let spec = Spec {
            program: Path::new("/bin/sh"),
            args: &args,
            cwd: &self.scratch,
            env: &env,
            group: Group::Own,
            stdin: None,
            sandbox: Some(jail.helper()),
            pgid_record: None,
        };
        let limits = Limits { head: 2048, tail: 2048, record_max: 0, timeout: None, idle: None };
        let done = process::run(&spec, &limits, Io::default()).expect("tool");
        ToolOut { stdout: done.stdout.head }
    }
}

struct ToolOut {
    stdout: Vec<u8>,
}

/// The jail the harness runs agent `id`'s commands in (its role's confinement on
/// this machine).
fn jail_of(ws: &Workspace, id: &AgentId) -> Jail {
    let (_, config) = ws.config("default").expect("config");
    let role = config.role("worker").expect("worker");
    let workspace = std::fs::canonicalize(ws.layout.root()).expect("workspace");
    let own = std::fs::canonicalize(ws.layout.worktree(id)).expect("agent directory");
    let site = Site { layout: &ws.layout, workspace: &workspace, id, own: &own, others: None };
    let stores = containment::credential_stores(&config, role, &Default::default());
    let mut c = containment::confinement(&site, role, &stores).expect("a sandboxed role");
    // (The agent's directories its rules name, as its driver has made them by then.)
    for dir in c.read_write.iter().chain([&ws.layout.steps(id)]) {
        std::fs::create_dir_all(dir).expect("a directory of the agent's");
    }
    // The floor writes its records beside the workspace's.
    std::fs::create_dir_all(workspace.join("floor")).expect("floor");
    c.read_write.push(workspace.join("floor"));
    let helper = Path::new(env!("CARGO_BIN_EXE_offshoot"));
    let support = sandbox::probe(helper);
    Jail {
        helper: helper.to_owned(),
        rules: sandbox::rules(&c, sandbox::abi(None), support.namespaces.is_ok()).expect("rules"),
        namespaces: support.namespaces.is_ok(),
        network: c.network,
        processes: c.processes,
        file_bytes: c.file_bytes,
        read_only_but: (support.namespaces.is_ok() && support.read_only).then(|| c.read_write.clone()),
    }
}

impl Observer for Interleaved<'_> {
    fn event(&mut self, event: Event<'_>) {
        if let Event::StepStarted { step, .. } = event {
            self.paused.push(Instant::now());
            if step > 1 {
                let d = self.floor_step(step as usize - 1);
                self.floor.push(d);
            }
            self.started.push(Instant::now());
        }
    }
}

/// How many consecutive requests, as sent on the wire, extend the one before: the same
/// system prompt and tools, and every earlier message byte for byte (what a provider's
/// prompt cache needs). Returns (extending, pairs).
fn prefix_stability(ws: &Workspace, id: &AgentId, steps: usize) -> (usize, usize) {
    let wire = |n: usize| -> Option<serde_json::Value> {
        let request: Request = engine::ops::inspect::reassemble(ws, id, n as u32).ok()?;
        let mut body: serde_json::Value =
            serde_json::from_slice(&anthropic::encode(&request, Some("bench")).body).ok()?;
        // The cache key excludes `cache_control`, which moves to the newest blocks.
        strip(&mut body, "cache_control");
        Some(body)
    };
    let mut extended = 0;
    let mut pairs = 0;
    let mut before = wire(1);
    for n in 2..=steps {
        let now = wire(n);
        if let (Some(a), Some(b)) = (&before, &now) {
            pairs += 1;
            let messages = |v: &serde_json::Value| v["messages"].as_array().cloned().unwrap_or_default();
            let (ma, mb) = (messages(a), messages(b));
            let same = a["system"] == b["system"]
                && a["tools"] == b["tools"]
                && ma.len() <= mb.len()
                && ma.iter().zip(&mb).all(|(x, y)| x == y);
            if same {
                extended += 1;
            }
        }
        before = now;
    }
    (extended, pairs)
}

/// Removes every field named `key`, at any depth.
fn strip(value: &mut serde_json::Value, key: &str) {
    match value {
        serde_json::Value::Object(map) => {
            map.remove(key);
            map.values_mut().for_each(|v| strip(v, key));
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| strip(v, key)),
        _ => {}
    }
}

/// The bytes of every file below `dir`.
/// The disk blocks used below `dir`, in bytes (what `du` counts).
fn tree_blocks(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = std::fs::symlink_metadata(dir).map(|m| m.blocks() * 512).unwrap_or(0);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        match entry.file_type() {
            Ok(t) if t.is_dir() => total += tree_blocks(&entry.path()),
            Ok(_) => total += entry.metadata().map(|m| m.blocks() * 512).unwrap_or(0),
            Err(_) => {}
        }
    }
    total
}

fn tree_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        match entry.file_type() {
            Ok(t) if t.is_dir() => total += tree_bytes(&entry.path()),
            Ok(_) => total += entry.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => {}
        }
    }
    total
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("write");
}
