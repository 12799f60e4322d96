#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]
//! What tracing costs a run. A real `offshoot prompt` of STEPS bash steps and an
//! answer against the scripted model server (no model latency, so the harness's own
//! cost is all there is), RUNS times each way, in turns: traces off; on, sent to a
//! collector on loopback (a sink in this process that reads each request and answers
//! 200, counting what came); and on with the collector down (a port nothing listens on).
//!
//! Run: `cargo bench --bench telemetry -- [STEPS] [RUNS]` (default 30 7); under
//! `OFFSHOOT_BENCH_DIR` (tmpfs: `/dev/shm`) instead of the temporary directory.

#[path = "../tests/cli/support/clean.rs"]
mod clean;
#[path = "support/scripted.rs"]
mod scripted;
#[path = "../tests/cli/support/server.rs"]
mod server;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use server::{Server, Turn};

/// A collector that takes everything: requests and bytes received.
fn sink() -> (u16, Arc<AtomicU64>, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (requests, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (r, b) = (requests.clone(), bytes.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (r, b) = (r.clone(), b.clone());
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    while reader.read_line(&mut line).unwrap_or(0) > 2 {
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        line.clear();
                    }
                    if line.is_empty() {
                        return;
                    }
                    let mut body = vec![0u8; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    r.fetch_add(1, Ordering::Relaxed);
                    b.fetch_add(length as u64, Ordering::Relaxed);
                    let answer = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
                    if reader.get_mut().write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, requests, bytes)
}

/// `offshoot` on the bench's workspace, with `otel` (an endpoint, or none: off).
fn offshoot(root: &Path, otel: Option<&str>) -> Command {
    let mut c = clean::offshoot(&root.join("home"), root);
    c.arg("-w").arg(root.join("ws")).env("ANTHROPIC_API_KEY", "bench-key");
    if let Some(endpoint) = otel {
        c.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
    }
    c
}

/// One run of `steps` bash steps and an answer: the whole command's time, and the
/// time from its first model request to its last (the step loop alone), in ms.
fn run(root: &Path, model: &Server, otel: Option<&str>, steps: usize, n: usize) -> (f64, f64) {
    let turns = (0..steps).map(|i| Turn::bash(&format!("b{i}"), "echo step"));
    model.push_turns(turns.chain([Turn::text("done")]));
    let seen = model.requests().len();
    let started = Instant::now();
    let out = offshoot(root, otel).args(["prompt", "--name", &format!("Run{n}"), "work"]).output().expect("prompt");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let whole = started.elapsed().as_secs_f64() * 1000.0;
    let requests = model.requests();
    let (first, last) = (&requests[seen], &requests[requests.len() - 1]);
    (whole, last.at.duration_since(first.at).as_secs_f64() * 1000.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let steps = args.first().copied().unwrap_or(30);
    let runs = args.get(1).copied().unwrap_or(7);
    let base = std::env::var_os("OFFSHOOT_BENCH_DIR").map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("offshoot-bench-telemetry-{}", std::process::id()));
    let model = scripted::workspace(&root, &|| offshoot(&root, None));
    let (port, requests, bytes) = sink();
    let on = format!("http://127.0.0.1:{port}");
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let down = format!("http://127.0.0.1:{closed}");
    // (A warm-up run each way, not counted.)
    run(&root, &model, None, steps, 0);
    run(&root, &model, Some(&on), steps, 1);
    let mut measured: [(Vec<f64>, Vec<f64>); 3] = Default::default();
    for i in 0..runs {
        for (way, otel) in [None, Some(on.as_str()), Some(down.as_str())].into_iter().enumerate() {
            let (whole, loop_ms) = run(&root, &model, otel, steps, 10 + 3 * i + way);
            measured[way].0.push(whole);
            measured[way].1.push(loop_ms);
        }
    }
    println!("telemetry: a run of {steps} bash steps and an answer, median of {runs} each (ms):");
    let per_step = |way: usize| median(measured[way].1.clone()) / steps as f64;
    for (way, name) in ["traces off", "on, collector on loopback", "on, collector down"].iter().enumerate() {
        println!(
            "  {name:<26} whole run {:>5.0} ({:.0?}); first to last model request {:>5.1} = {:.2} per step",
            median(measured[way].0.clone()),
            measured[way].0,
            median(measured[way].1.clone()),
            per_step(way)
        );
    }
    println!(
        "  per step: {:+.2} ms with traces sent, {:+.2} ms with the collector down",
        per_step(1) - per_step(0),
        per_step(2) - per_step(0)
    );
    println!(
        "  the collector took {} requests, {} bytes",
        requests.load(Ordering::Relaxed),
        bytes.load(Ordering::Relaxed)
    );
    let _ = std::fs::remove_dir_all(&root);
}
