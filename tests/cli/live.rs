//! Watching an agent live, whoever drives it: `log --follow`.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::server::Turn;
use crate::support::wait::wait_for;
use crate::support::workspace::{Dialect, TestWorkspace};

#[test]
fn log_follow_shows_each_step_of_a_detached_driver_within_200_ms_of_its_commit() {
    let (server, t) = TestWorkspace::served("live-follow", Dialect::Anthropic);
    // Each answer takes a while: the steps are apart, and each commit can be timed by
    // the request the driver sends right after it.
    server.latency(Duration::from_millis(400));
    server.push_for("Watched", [Turn::bash("s1", "echo one"), Turn::bash("s2", "echo two"), Turn::text("all watched")]);
    let id = t.run(&["prompt", "--detach", "--name", "Watched", "be watched"]).ok().trim().to_owned();
    let mut follower =
        t.command().args(["log", "--follow", &id]).stdout(Stdio::piped()).spawn().expect("spawn the follower");
    let stdout = follower.stdout.take().expect("stdout");
    // Each entry header as it arrives, with when.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(number) = line.strip_prefix("── ").and_then(|rest| rest.get(..4)) {
                let _ = tx.send((number.to_owned(), Instant::now()));
            }
        }
    });
    wait_for("the agent to finish", || t.agents()[0]["state"] == "done");
    let mut seen = Vec::new();
    while let Ok(got) = rx.recv_timeout(Duration::from_millis(500)) {
        seen.push(got);
    }
    let _ = follower.kill();
    let _ = follower.wait();
    let numbers: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(numbers, ["0001", "0002", "0003", "0004", "0005", "0006"], "each entry once, in order");
    // A tool result is committed just before the request that carries it: shown
    // within 200 ms of it.
    let requests = server.requests();
    for (entry, request) in [("0003", 1), ("0005", 2)] {
        let shown = seen.iter().find(|(n, _)| n == entry).expect("shown").1;
        let sent = requests[request].at;
        let late = shown.saturating_duration_since(sent);
        assert!(late < Duration::from_millis(200), "entry {entry} shown {late:?} after its commit");
    }
}

#[test]
fn attach_shows_a_detached_agent_live_and_sends_what_is_typed() {
    use std::io::Write;
    let (server, t) = TestWorkspace::served("live-attach", Dialect::Anthropic);
    server.latency(Duration::from_millis(400));
    server.push_for("Shown", [Turn::bash("s1", "echo one"), Turn::bash("s2", "echo two"), Turn::text("shown twice")]);
    let id = t.run(&["prompt", "--detach", "--name", "Shown", "be shown"]).ok().trim().to_owned();
    let mut attached = t
        .command()
        .args(["attach", "Shown"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn attach");
    let stdout = attached.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send((line, Instant::now()));
        }
    });
    wait_for("the agent to finish", || t.agents()[0]["state"] == "done");
    // A line typed goes to the agent as the user's message.
    server.latency(Duration::ZERO);
    server.push_for("Shown", [Turn::text("heard you")]);
    let mut stdin = attached.stdin.take().expect("stdin");
    writeln!(stdin, "one more thing").expect("type");
    wait_for("the message to reach the model", || {
        server.requests().last().is_some_and(|r| r.body.to_string().contains("one more thing"))
    });
    // (Its run's end is logged before its driver lets go: done means it is on file.)
    wait_for("the answer", || t.run(&["log", &id]).stdout.contains("heard you") && t.agents()[0]["state"] == "done");
    drop(stdin);
    let out = attached.wait_with_output().expect("attach ends at the end of its input");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut lines = Vec::new();
    while let Ok(got) = rx.recv_timeout(Duration::from_millis(300)) {
        lines.push(got);
    }
    let text: Vec<&str> = lines.iter().map(|(l, _)| l.as_str()).collect();
    let prefix = format!("  [{id} Shown] ");
    for want in ["→ bash echo two", "← exit code 0", "answered: shown twice", "answered: heard you"] {
        assert!(text.iter().any(|l| *l == format!("{prefix}{want}")), "no `{want}` in {text:#?}");
    }
    // The second call's result shows before the request that carries it was sent, or
    // within 200 ms of it.
    let requests = server.requests();
    let shown = lines.iter().rev().find(|(l, _)| l.ends_with("← exit code 0")).map(|(_, at)| *at).expect("shown");
    let late = shown.saturating_duration_since(requests[2].at);
    assert!(late < Duration::from_millis(200), "shown {late:?} after");
}
