//! Deposits racing drivers that start and stop: every message is delivered once, and
//! each sender's in the order it sent them.

use std::time::{Duration, Instant};

use crate::support::workspace::{Dialect, TestWorkspace};

/// How many messages race; `OFFSHOOT_STRESS_SENDS` raises it for a long run.
fn sends() -> usize {
    std::env::var("OFFSHOOT_STRESS_SENDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

#[test]
fn a_thousand_sends_racing_a_driver_are_each_delivered_exactly_once_in_per_sender_order() {
    let (server, t) = TestWorkspace::served("stress-sends", Dialect::Anthropic);
    server.endless_text("noted");
    t.run(&["prompt", "--name", "Busy", "count what you get"]).ok();
    let total = sends();
    let senders = 8;
    let started = Instant::now();
    std::thread::scope(|scope| {
        for s in 0..senders {
            let t = &t;
            scope.spawn(move || {
                for i in (s..total).step_by(senders) {
                    // Each send deposits and wakes: a driver starts when none runs, and
                    // the one that runs picks the message up before it lets go. Uneven
                    // pauses let the driver go quiet and start again, over and over.
                    let run = t.run(&["send", "--detach", "Busy", &format!("message {i}")]);
                    assert_eq!(run.code, 0, "{}", run.stderr);
                    std::thread::sleep(Duration::from_millis((i * 13 % 61) as u64));
                }
            });
        }
    });
    let id = t.only_agent();
    let inbox = t.ws.join("inbox").join(&id);
    let until = Instant::now() + Duration::from_secs(300);
    loop {
        let pending = std::fs::read_dir(&inbox).map(|d| d.count()).unwrap_or(0);
        let state = t.agents()[0]["state"].as_str().unwrap_or_default().to_owned();
        if pending == 0 && state == "done" {
            break;
        }
        assert!(Instant::now() < until, "not quiet after 300 s: {pending} pending, state {state}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = t.run(&["log", "--json", &id]);
    let mut seen = vec![0u32; total];
    let mut order = Vec::new();
    for line in log.ok().lines() {
        let entry: serde_json::Value = serde_json::from_str(line).expect("json");
        if let Some(text) = entry["text"].as_str()
            && let Some(n) = text.rsplit("message ").next().and_then(|n| n.trim().parse::<usize>().ok())
            && text.contains("\nmessage ")
        {
            seen[n] += 1;
            order.push(n);
        }
    }
    let wrong: Vec<(usize, u32)> = seen.iter().enumerate().filter(|(_, c)| **c != 1).map(|(i, c)| (i, *c)).collect();
    assert!(wrong.is_empty(), "delivered other than once (message, times): {wrong:?}");
    // Each sender's messages arrive in the order it sent them (sender s sent s, s+8, …).
    for s in 0..senders {
        let from_s: Vec<usize> = order.iter().copied().filter(|n| n % senders == s).collect();
        assert!(from_s.windows(2).all(|w| w[0] < w[1]), "sender {s}'s messages out of order: {from_s:?}");
    }
    // The driver started and went quiet many times while the sends raced it.
    let runs = server.served();
    assert!(runs >= 5, "only {runs} model calls in {:?}: the race was not exercised", started.elapsed());
}
