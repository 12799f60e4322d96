//! Crash fuzzing: a parent and two children work (dispatch, tools, a message, results,
//! a compaction every two steps) while drivers are killed with SIGKILL at random moments; then the workspace is
//! recovered with `scan` and `run`, and must hold: every agent done, `doctor` clean,
//! each child's result delivered to the parent (none lost, none twice: each names the
//! child's commit it answers from), a message at most once (exactly once when the
//! child's call says it was sent), the parent's final answer.
//!
//! Tree scenarios: a root dispatches ten children in one step, each runs two steps,
//! and kills land from the first moment — in the dispatching step, in children, in the
//! root while results come in. Then every child must exist once, have run its steps and
//! have its result reach the root once, and the root's transcript must answer each
//! dispatch with the child's id.
//!
//! CI runs a short variant; the long one is
//! `OFFSHOOT_FUZZ_KILLS=500 cargo test --release --test cli fuzz -- --nocapture`
//! (`OFFSHOOT_FUZZ_SEED` replays a run).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::server::{Server, Turn};
use crate::support::workspace::{Dialect, TestWorkspace};

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The model: a function of the request alone, so a call asked again after a crash
/// gets the same answer. It decides by cues (`CUE:…`) in the text rather than by counting
/// turns, so it goes on right after a compaction replaced its earlier steps with a
/// summary (the compactor copies every cue it sees into the summary).
fn model(text: &str) -> Turn {
    if let Some(turn) = tree_model(text) {
        return turn;
    }
    if text.contains("Compact the conversation of agent") {
        // (Its own call has the id `s1`; the tools list names `write_summary` anyway.)
        if text.contains("\"id\":\"s1\"") {
            return Turn::text("summarised");
        }
        let mut cues: Vec<&str> = text.match_indices("CUE:").map(|(at, _)| cue_at(&text[at..])).collect();
        if dispatched(text) {
            cues.push("CUE:dispatched");
        }
        // The children's results it summarises away stay as words the parent reads.
        for done in ["kid1 finished", "kid2 finished"] {
            if text.contains(done) {
                cues.push(done);
            }
        }
        cues.sort_unstable();
        cues.dedup();
        return Turn::tool("s1", "write_summary", json!({"content": format!("So far: {}", cues.join(" "))}));
    }
    let kid = ["Kid1", "Kid2"].into_iter().find(|k| text.contains(&format!("Your name is {k}.")));
    match kid {
        Some(kid) => {
            let lower = kid.to_lowercase();
            if !text.contains(&format!("CUE:{lower}-work-1")) {
                // Its git commits too, so kills also land while it is published.
                Turn::bash(
                    "k1",
                    &format!(
                        "echo CUE:{lower}-work-1 >> {lower}.txt; git add -A >/dev/null 2>&1; git commit -qm {lower} >/dev/null 2>&1; echo CUE:{lower}-work-1"
                    ),
                )
            } else if !text.contains(&format!("CUE:{lower}-work-2")) {
                Turn::bash("k2", &format!("echo CUE:{lower}-work-2 >> {lower}.txt; echo CUE:{lower}-work-2"))
            } else if !text.contains(&format!("CUE:{lower}-said")) {
                let content = format!("hello from {lower} CUE:{lower}-said");
                Turn::tool("k3", "message", json!({"to": "Boss", "content": content}))
            } else {
                Turn::text(&format!("{lower} finished"))
            }
        }
        None if !dispatched(text) => Turn {
            calls: vec![
                (
                    "d1".into(),
                    "dispatch".into(),
                    json!({"role": "worker", "goal": "work one", "name": "Kid1"}).to_string(),
                ),
                (
                    "d2".into(),
                    "dispatch".into(),
                    json!({"role": "worker", "goal": "work two", "name": "Kid2"}).to_string(),
                ),
            ],
            input_tokens: 100,
            output_tokens: 20,
            ..Turn::default()
        },
        None if !text.contains("CUE:boss-work") => {
            Turn::bash("b1", "echo CUE:boss-work >> boss.txt; echo CUE:boss-work")
        }
        None if text.contains("kid1 finished") && text.contains("kid2 finished") => Turn::text("all done"),
        None => Turn::text("waiting"),
    }
}

/// How many children a tree scenario's root dispatches.
const TWIGS: usize = 10;

/// The model of the tree scenarios (`Trunk` and its `Twig<n>` children), if the request
/// is theirs.
fn tree_model(text: &str) -> Option<Turn> {
    if let Some(twig) = (0..TWIGS).find(|n| text.contains(&format!("Your name is Twig{n}."))) {
        return Some(if text.contains(&format!("CUE:twig{twig}-work")) {
            Turn::text(&format!("twig{twig} finished"))
        } else {
            Turn::bash("w", &format!("echo CUE:twig{twig}-work > twig{twig}.txt; echo CUE:twig{twig}-work"))
        });
    }
    if !text.contains("Your name is Trunk.") {
        return None;
    }
    if !text.contains("(Twig0)") {
        let calls = (0..TWIGS)
            .map(|n| {
                let input = json!({"role": "worker", "goal": format!("work {n}"), "name": format!("Twig{n}")});
                (format!("t{n}"), "dispatch".to_owned(), input.to_string())
            })
            .collect();
        return Some(Turn { calls, input_tokens: 100, output_tokens: 20, ..Turn::default() });
    }
    let all = (0..TWIGS).all(|n| text.contains(&format!("twig{n} finished")));
    Some(Turn::text(if all { "the tree is done" } else { "waiting" }))
}

/// Whether the parent's children exist, as its context shows it: a dispatch result, a
/// refusal because the name is taken, or a summary's cue.
fn dispatched(text: &str) -> bool {
    text.contains("(Kid1)") || text.contains("CUE:dispatched") || text.contains("`Kid1` is already taken")
}

/// The cue at the start of `text` (`CUE:` and what follows up to a non-name character).
fn cue_at(text: &str) -> &str {
    let end = text[4..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).map_or(text.len(), |e| e + 4);
    &text[..end]
}

/// The pid of the driver holding `id`, if one does (read from its lock file and
/// checked against the process's command line).
fn driver_pid(ws: &Path, id: &str) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(ws.join("locks").join(id)).ok()?.split_whitespace().next()?.parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    (cmdline.contains(" run ") && cmdline.contains(id) && cmdline.contains(ws.to_str()?)).then_some(pid)
}

fn agents_by_name(t: &TestWorkspace) -> Vec<(String, String, String)> {
    t.agents()
        .iter()
        .map(|a| {
            let s = |k: &str| a[k].as_str().unwrap_or_default().to_owned();
            (s("name"), s("id"), s("state"))
        })
        .collect()
}

/// Delivered messages of `name`'s transcript, as their full text (header included).
fn delivered(t: &TestWorkspace, name: &str) -> Vec<String> {
    let log = t.run(&["log", "--json", name]);
    log.ok()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["side"] == "user")
        .map(|e| e["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The summaries compactions landed in `name`'s transcript.
fn summaries(t: &TestWorkspace, name: &str) -> Vec<String> {
    let log = t.run(&["log", "--json", name]);
    log.ok()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["side"] == "compaction")
        .map(|e| e["summary"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Kills up to `kills` drivers of `t` at random moments (sometimes scanning right
/// after, as a user would); how many landed.
fn kill_some(t: &TestWorkspace, kills: usize, rng: &mut Rng) -> usize {
    let mut landed = 0;
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(rng.below(60)));
        let agents = agents_by_name(t);
        let live: Vec<(String, i32)> =
            agents.iter().filter_map(|(_, id, _)| driver_pid(&t.ws, id).map(|p| (id.clone(), p))).collect();
        if live.is_empty() {
            break;
        }
        let (_, pid) = &live[rng.below(live.len() as u64) as usize];
        // kill(1) by pid, as a user's `kill -9` would.
        if std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().is_ok_and(|s| s.success()) {
            landed += 1;
        }
        if rng.below(2) == 0 {
            t.run(&["scan"]);
        }
    }
    landed
}

/// Recovers `t` as a user would: `scan` (relaunches, releases what a dead maker
/// claimed), then `run`, children first (a parent's run waits for them), until every
/// agent is done; then a last scan, after which `doctor` must find nothing.
fn recover(t: &TestWorkspace, round: usize) {
    let deadline = Instant::now() + Duration::from_secs(90);
    t.run(&["scan"]);
    loop {
        let agents = agents_by_name(t);
        if agents.iter().all(|(_, _, state)| state == "done") {
            break;
        }
        assert!(Instant::now() < deadline, "round {round}: agents stuck: {agents:?}");
        let mut pending: Vec<&(String, String, String)> =
            agents.iter().filter(|(_, id, state)| state != "done" && driver_pid(&t.ws, id).is_none()).collect();
        pending.sort_by_key(|(_, id, _)| std::cmp::Reverse(id.len()));
        for (_, id, _) in pending {
            let _ = t.run(&["run", id]);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    t.run(&["scan"]).ok();
    let doctor = t.run(&["doctor"]);
    assert_eq!(doctor.code, 0, "round {round}: doctor:\n{}\n{}", doctor.stdout, doctor.stderr);
}

/// A tree scenario with up to `kills` SIGKILLs from its first moment; how many landed.
fn tree_scenario(round: usize, kills: usize, rng: &mut Rng) -> usize {
    let server = Server::start();
    let mut t = TestWorkspace::new(&format!("fuzz-tree-{round}"));
    t.use_server(&server, Dialect::Anthropic);
    t.set("compaction.trigger", "never");
    server.respond_with(model);
    let root = t.run(&["prompt", "--detach", "--name", "Trunk", "grow ten twigs"]).ok().trim().to_owned();
    let landed = kill_some(&t, kills, rng);
    recover(&t, round);
    let agents = agents_by_name(&t);
    let mut names: Vec<&str> = agents.iter().map(|(n, _, _)| n.as_str()).filter(|n| *n != "Trunk").collect();
    names.sort_unstable();
    let mut want: Vec<String> = (0..TWIGS).map(|n| format!("Twig{n}")).collect();
    want.sort_unstable();
    assert_eq!(names, want, "round {round}: each child exists once: {agents:?}");
    let log: Vec<Value> =
        t.run(&["log", "--json", &root]).ok().lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let listed = t.agents();
    for n in 0..TWIGS {
        let id = &agents.iter().find(|(name, _, _)| *name == format!("Twig{n}")).expect("twig").1;
        let answers: Vec<&Value> =
            log.iter().filter(|e| e["side"] == "tool" && e["result"]["tool_use_id"] == format!("t{n}")).collect();
        assert_eq!(answers.len(), 1, "round {round}: dispatch t{n} answered {} times", answers.len());
        let text = answers[0]["result"]["content"].as_str().unwrap_or_default();
        assert!(text.contains(&format!("started `{id}`")), "round {round}: t{n} answered: {text}");
        // Its result reached the root once. (A `died` notice may come before it: `scan`
        // says an agent died when the driver it relaunched at a commit dies there too —
        // the fuzz's kills can make that so — and the recovery's `run` then revives it,
        // as the notice says; its result follows.)
        let heard: Vec<&str> = log
            .iter()
            .filter(|e| e["side"] == "user" && e["from"] == id.as_str())
            .filter_map(|e| e["text"].as_str())
            .collect();
        let results = heard.iter().filter(|t| t.contains("\nepitaph: final-response\n")).count();
        assert_eq!(results, 1, "round {round}: Twig{n}'s result reached the root {results} times: {heard:?}");
        let died = heard.iter().filter(|t| t.contains("\nepitaph: died\n")).count();
        assert_eq!(heard.len(), results + died, "round {round}: Twig{n} told the root: {heard:?}");
        assert!(died == 0 || heard.last().is_some_and(|t| t.contains("final-response")), "{heard:?}");
        // Its two steps ran (a call a kill cut short is made again: more records, not less work).
        let steps = listed.iter().find(|a| a["id"] == id.as_str()).and_then(|a| a["steps"].as_u64());
        assert!(steps.is_some_and(|s| s >= 2), "round {round}: Twig{n} ran {steps:?} steps");
        let text = heard_text(&log, id);
        assert!(text.contains(&format!("twig{n} finished")), "round {round}: Twig{n} said {text}");
    }
    assert!(t.run(&["log", &root]).ok().contains("the tree is done"), "round {round}");
    landed
}

/// What the transcript entries `log` delivered from `id` say.
fn heard_text(log: &[Value], id: &str) -> String {
    log.iter().filter(|e| e["side"] == "user" && e["from"] == id).filter_map(|e| e["text"].as_str()).collect()
}

/// One scenario with up to `kills` SIGKILLs; returns how many landed, and how many
/// compactions landed in it.
fn scenario(round: usize, kills: usize, rng: &mut Rng) -> (usize, usize) {
    let server = Server::start();
    let mut t = TestWorkspace::new(&format!("fuzz-{round}"));
    t.use_server(&server, Dialect::Anthropic);
    // A compaction every two steps of each agent: they land while drivers are killed.
    t.run(&[
        "config",
        "set",
        "compaction.trigger",
        "every_n_steps",
        "compaction.steps",
        "2",
        "compaction.keep_recent_steps",
        "1",
    ])
    .ok();
    server.respond_with(model);
    t.run(&["prompt", "--detach", "--name", "Boss", "get two things done"]).ok();
    // Kill once both children exist (a kill before a dispatch lands leaves a parent
    // whose model, being a script, would not dispatch again).
    let deadline = Instant::now() + Duration::from_secs(30);
    while agents_by_name(&t).len() < 3 {
        assert!(Instant::now() < deadline, "the children never appeared");
        std::thread::sleep(Duration::from_millis(5));
    }
    let landed = kill_some(&t, kills, rng);
    recover(&t, round);
    let boss = delivered(&t, "Boss");
    // No deposit delivered twice: a result names the child's commit it answers from.
    let mut terminals: Vec<&str> =
        boss.iter().filter_map(|m| m.lines().find(|l| l.starts_with("terminal: "))).collect();
    let all = terminals.len();
    terminals.sort();
    terminals.dedup();
    assert_eq!(terminals.len(), all, "round {round}: a result was delivered twice: {boss:#?}");
    for kid in ["kid1", "kid2"] {
        let results = boss.iter().filter(|m| m.contains(&format!("{kid} finished"))).count();
        let summarised_result = summaries(&t, "Boss").iter().any(|s| s.contains(&format!("{kid} finished")));
        assert!(results >= 1 || summarised_result, "round {round}: {kid}'s result was lost: {boss:#?}");
        let hellos = boss.iter().filter(|m| m.contains(&format!("hello from {kid}"))).count();
        assert!(hellos <= 1, "round {round}: {kid}'s message delivered {hellos} times: {boss:#?}");
        // The child's own record of its message call: sent (a call a kill cut short is
        // run again, never "outcome unknown"), unless a compaction took it away.
        let log = t.run(&["log", "--json", if kid == "kid1" { "Kid1" } else { "Kid2" }]);
        let left_unknown = log.ok().lines().any(|l| l.contains("\"k3\"") && l.contains("outcome unknown"));
        assert!(!left_unknown, "round {round}: {kid}'s message call was left \"outcome unknown\"");
        let sent = log.ok().lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).any(|e| {
            e["side"] == "tool"
                && e["result"]["tool_use_id"] == "k3"
                && !e["result"]["is_error"].as_bool().unwrap_or(false)
                && !e["result"].to_string().contains("interrupted")
        });
        // Delivered, or delivered and then summarised by a compaction (whose summary
        // keeps the message's cue).
        let summarised = summaries(&t, "Boss").iter().any(|s| s.contains(&format!("CUE:{kid}-said")));
        if sent {
            assert!(
                hellos == 1 || summarised,
                "round {round}: {kid}'s message was sent but never delivered: {boss:#?}"
            );
        }
    }
    let boss_log = t.run(&["log", "Boss"]);
    assert!(boss_log.ok().contains("all done"), "round {round}: {}", boss_log.stdout);
    let compactions: usize = ["Boss", "Kid1", "Kid2"]
        .iter()
        .map(|name| t.run(&["log", "--json", name]).stdout.matches("\"side\":\"compaction\"").count())
        .sum();
    (landed, compactions)
}

#[test]
#[expect(clippy::print_stderr, reason = "the seed (to replay a failure) and the tally are the run's report")]
fn drivers_killed_at_random_moments_lose_and_repeat_nothing() {
    let target: usize = std::env::var("OFFSHOOT_FUZZ_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let seed: u64 = std::env::var("OFFSHOOT_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
    });
    eprintln!("crash fuzz: seed {seed}, target {target} kills");
    let mut rng = Rng(seed);
    let (mut kills, mut rounds, mut compactions, mut trees) = (0, 0, 0, 0);
    while kills < target {
        // The first scenario runs without kills: the model, recovery and compactions are
        // shown to work before anything is broken. Every third is a tree.
        if rounds % 3 == 2 {
            kills += tree_scenario(rounds, 6, &mut rng);
            trees += 1;
        } else {
            let (landed, compacted) = scenario(rounds, if rounds == 0 { 0 } else { 4 }, &mut rng);
            kills += landed;
            compactions += compacted;
        }
        rounds += 1;
        assert!(rounds < target * 4 + 8, "too few kills landed ({kills} in {rounds} rounds)");
    }
    assert!(trees > 0, "no tree scenario ran in {rounds} scenarios");
    assert!(compactions > 0, "no compaction landed in {rounds} scenarios: the fuzz would not cover them");
    eprintln!(
        "crash fuzz: {kills} kills over {rounds} scenarios ({trees} trees of {TWIGS} children), {compactions} compactions landed: 0 lost or repeated results, 0 children missing or repeated, 0 doctor findings, 0 stuck agents"
    );
}
