//! Compaction: a compactor inherits the transcript, writes a summary and nominates
//! files; the agent lands it as one commit; `uncompact` brings it all back.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::server::{Reply, Server, Turn};
use crate::support::wait::wait_for;
use crate::support::workspace::{Dialect, TestWorkspace};

/// Every compactor's goal starts so; its requests hold it.
const COMPACTOR: &str = "Compact the conversation of agent";

/// The files of `dir` in the agent's branch tip.
fn listed(t: &TestWorkspace, id: &str, dir: &str) -> Vec<String> {
    let out = t.git(&["ls-tree", "--name-only", &format!("agents/{id}:{dir}")]);
    out.lines().map(str::to_owned).collect()
}

fn landed(t: &TestWorkspace, id: &str) -> bool {
    listed(t, id, ".offshoot").iter().any(|n| n == "compactions")
}

/// An agent that took four model calls: three `bash` steps and an answer.
pub(crate) fn long_agent(server: &Server, t: &TestWorkspace) -> String {
    server.push_for(
        "Long",
        [
            Turn::bash("b1", "echo draft > notes.md"),
            Turn::bash("b2", "mkdir -p old && echo two > old/two.txt"),
            Turn::bash("b3", "echo three"),
            Turn::text("done for now"),
        ],
    );
    t.run(&["prompt", "--name", "Long", "do three things"]).ok();
    t.id_of("Long")
}

fn summary_turn(id: &str, content: &str) -> Turn {
    Turn::tool(id, "write_summary", json!({ "content": content }))
}

fn mark(id: &str, path: &str) -> Turn {
    Turn::tool(id, "mark_for_deletion", json!({ "path": path }))
}

/// The tool results of a request, in order: (text, is_error).
fn results(body: &Value) -> Vec<(String, bool)> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| (b["content"].as_str().unwrap_or_default().to_owned(), b["is_error"].as_bool().unwrap_or(false)))
        .collect()
}

#[test]
fn a_compaction_lands_one_commit_with_the_summary_and_uncompact_brings_everything_back() {
    let (server, t) = TestWorkspace::served("compact-land", Dialect::Anthropic);
    let id = long_agent(&server, &t);
    let before = listed(&t, &id, ".offshoot/messages");
    assert_eq!(before.len(), 8, "{before:?}");
    server.push_matching(
        COMPACTOR,
        [
            Turn::bash("c0", "touch ran.txt"),
            mark("c1", ".offshoot/messages/0001-user.md"),
            mark("c2", ".offshoot/goal.md"),
            mark("c3", "no/such/file"),
            summary_turn("c4", "Wrote notes.md (a draft), then echoed two and three."),
            mark("c5", ".offshoot/summary/0001.md"),
            mark("c6", "notes.md"),
            Turn::text("kept the facts, dropped the draft"),
        ],
    );
    let run = t.run(&["compact", "Long"]);
    let compactor = run.ok().trim().to_owned();
    assert_eq!(compactor, format!("{id}.1"));
    assert!(run.stderr.contains("in place of 4 transcript entries"), "{}", run.stderr);
    wait_for("the landing", || landed(&t, &id) && t.agents().iter().all(|a| a["state"] == "done"));

    // The compactor inherited the transcript up to the fork (two steps kept back) and
    // its first request was accepted as it stood.
    let asks = server.requests_matching(COMPACTOR);
    assert_eq!(asks.len(), 8);
    let first = &asks[0].body;
    let tools: Vec<&str> =
        first["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(tools.contains(&"write_summary") && tools.contains(&"mark_for_deletion") && tools.contains(&"bash"));
    assert_eq!(results(first).len(), 2, "the two tool steps before the fork");
    // Each refusal is in-band and names its rule; `bash` ran nothing.
    let seen = results(&asks[7].body);
    let said: Vec<&str> = seen.iter().skip(2).map(|(text, _)| text.as_str()).collect();
    assert!(seen[2].1 && said[0].contains("not available to you; nothing ran"), "{said:?}");
    assert!(!t.ws.join("agents").join(&compactor).join("ran.txt").exists());
    assert!(said[1].contains("dispatch entry") && seen[3].1, "{said:?}");
    assert!(said[2].contains("system slot") && seen[4].1, "{said:?}");
    assert!(said[3].contains("does not exist") && seen[5].1, "{said:?}");
    assert!(said[4].starts_with("wrote `.offshoot/summary/0001.md`") && !seen[6].1, "{said:?}");
    assert!(said[5].contains("this compaction wrote it") && seen[7].1, "{said:?}");
    assert!(said[6].starts_with("marked `notes.md`") && !seen[8].1, "{said:?}");
    // The declined calls changed nothing: only the draft was nominated.
    assert_eq!(t.git(&["show", &format!("agents/{compactor}:.offshoot/nominated")]), "notes.md\n");

    // One landing commit: the span's entries out (but the opening one), the draft out,
    // the summary in.
    let subject = t.git(&["log", "-1", "--format=%s", &format!("agents/{id}")]);
    assert!(subject.starts_with(&format!("compaction 1 from {compactor}: 4 entries and 1 files out")), "{subject}");
    let after = listed(&t, &id, ".offshoot/messages");
    assert_eq!(after, ["0001-user.md", &before[5], &before[6], &before[7]], "{after:?}");
    assert_eq!(listed(&t, &id, ".offshoot/summary"), ["0001.md"]);
    assert!(listed(&t, &id, ".offshoot").contains(&"goal.md".to_owned()));
    let dir = t.ws.join("agents").join(&id);
    assert!(!dir.join("notes.md").exists() && dir.join(".offshoot/summary/0001.md").is_file());
    assert!(!dir.join(".offshoot/messages/0002-claude-sonnet-4-5.json").exists());

    // `log` shows where the compaction stood; `show --compaction` what it removed.
    let log = t.run(&["log", "Long"]).ok().to_owned();
    let mark_at = log.find("══ compaction 1 by").expect("marker in the log");
    assert!(log[..mark_at].contains("── 0001 user") && log[mark_at..].contains(&format!("── {}", &before[5][..4])));
    assert!(log[mark_at..].contains("4 entries and 1 files removed") && log.contains("Wrote notes.md (a draft)"));
    let shown = t.run(&["show", "Long", "--compaction", "1"]).ok().to_owned();
    for removed in before[1..5].iter().map(|n| format!("  - .offshoot/messages/{n}")).chain(["  - notes.md".into()]) {
        assert!(shown.contains(&removed), "{removed} in {shown}");
    }
    assert!(shown.contains("summary `.offshoot/summary/0001.md`:\nWrote notes.md"), "{shown}");
    let missing = t.run(&["show", "Long", "--compaction", "2"]);
    assert!(missing.stderr.contains("has no compaction 2; it has 1 compaction"), "{}", missing.stderr);

    // The next request is smaller, carries the summary and is accepted.
    let last_before =
        server.requests_for("Long").last().expect("request").body["messages"].as_array().expect("m").len();
    server.push_for("Long", [Turn::text("continuing from the summary")]);
    assert!(t.run(&["send", "Long", "go on"]).ok().contains("continuing from the summary"));
    let next = server.requests_for("Long").last().expect("request").body.clone();
    assert!(next["messages"].as_array().expect("m").len() < last_before, "{next}");
    assert!(next.to_string().contains("Wrote notes.md (a draft)"), "{next}");

    // Undone: exactly what left comes back; the summary stays.
    let run = t.run(&["uncompact", "Long"]);
    assert!(run.stderr.contains("compaction 1 of"), "{}", run.stderr);
    // Undoing it again is refused: there is nothing left to bring back.
    let again = t.run(&["uncompact", "Long"]);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(again.stderr.contains("is undone already"), "{}", again.stderr);
    let restored = listed(&t, &id, ".offshoot/messages");
    for name in &before {
        assert!(restored.contains(name), "{name} not restored: {restored:?}");
    }
    assert_eq!(restored.len(), before.len() + 2, "the send's two entries as well: {restored:?}");
    assert_eq!(std::fs::read_to_string(dir.join("notes.md")).expect("notes"), "draft\n");
    assert_eq!(listed(&t, &id, ".offshoot/summary"), ["0001.md"]);
    t.git(&["fsck", "--strict"]);
}

#[test]
fn a_file_the_agent_changes_while_the_compactor_works_is_kept_and_the_rest_lands() {
    let (server, t) = TestWorkspace::served("compact-live", Dialect::Anthropic);
    let id = long_agent(&server, &t);
    // The compactor nominates the draft; meanwhile the agent edits it.
    server.push_matching(
        COMPACTOR,
        [
            mark("c1", "notes.md"),
            mark("c2", "old"),
            summary_turn("c3", "The draft is in notes.md."),
            Turn::text("done"),
        ],
    );
    server.push_for("Long", [Turn::bash("e1", "sleep 2; echo more >> notes.md"), Turn::text("edited")]);
    t.run(&["compact", "Long", "--focus", "what the draft says"]).ok();
    let run = t.run(&["send", "Long", "edit the draft"]);
    assert!(run.ok().contains("edited"), "{}", run.stderr);
    wait_for("the landing", || landed(&t, &id));
    assert!(run.stderr.contains("kept 1 nominated files this agent changed meanwhile: notes.md"), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(t.ws.join("agents").join(&id).join("notes.md")).expect("kept"), "draft\nmore\n");
    // A nominated directory leaves whole, from the branch and the disk, and stays gone.
    assert!(!t.ws.join("agents").join(&id).join("old").exists());
    assert!(!t.git(&["ls-tree", "--name-only", &format!("agents/{id}")]).lines().any(|l| l == "old"));
    server.push_for("Long", [Turn::bash("e2", "true"), Turn::text("still gone")]);
    t.run(&["send", "Long", "one more step"]).ok();
    assert!(!t.git(&["ls-tree", "--name-only", &format!("agents/{id}")]).lines().any(|l| l == "old"));
    assert_eq!(listed(&t, &id, ".offshoot/summary"), ["0001.md"]);
    // The focus was given to the compactor with its goal.
    assert!(
        server.requests_matching(COMPACTOR)[0].body.to_string().contains("Focus the summary on: what the draft says")
    );
}

#[test]
fn a_stopped_compactor_lands_nothing_and_another_compaction_may_start() {
    let (server, t) = TestWorkspace::served("compact-stopped", Dialect::Anthropic);
    let id = long_agent(&server, &t);
    let tip = t.git(&["rev-parse", &format!("agents/{id}")]);
    // The compactor's first call hangs until it is stopped.
    server.push_replies_matching(COMPACTOR, [Reply::Stall(summary_turn("w", "never"), Duration::from_secs(20))]);
    let compactor = t.run(&["compact", "Long"]).ok().trim().to_owned();
    wait_for("the compactor's call", || !server.requests_matching(COMPACTOR).is_empty());
    let run = t.run(&["stop", &compactor]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The agent hears of it (the compactor's obituary), lands nothing and goes on; a
    // new compaction may start.
    wait_for("the agent to let the compaction go", || {
        t.git(&["for-each-ref", "refs/offshoot/compacting/"]).is_empty()
            && t.agents().iter().all(|a| a["state"] != "running")
    });
    assert_eq!(t.git(&["rev-parse", &format!("agents/{id}")]), tip);
    server.push_for("Long", [Turn::text("still here")]);
    assert!(t.run(&["send", "Long", "are you there"]).ok().contains("still here"));
    assert!(!landed(&t, &id));
    server.push_matching(COMPACTOR, [summary_turn("w", "second try"), Turn::text("done")]);
    let second = t.run(&["compact", "Long"]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    wait_for("the second compaction to land", || landed(&t, &id));
}

#[test]
fn a_compactor_that_fails_lands_nothing_and_a_refused_compaction_says_why() {
    let (server, t) = TestWorkspace::served("compact-fail", Dialect::Anthropic);
    // Nothing to compact on a fresh agent.
    server.push_for("Short", [Turn::text("hi")]);
    t.run(&["prompt", "--name", "Short", "hello"]).ok();
    let run = t.run(&["compact", "Short"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("has nothing to compact yet"), "{}", run.stderr);
    assert_eq!(t.agents().len(), 1, "nothing was started");
    // A compactor whose calls are all refused (no script): it never lands.
    let id = long_agent(&server, &t);
    let tip = t.git(&["rev-parse", &format!("agents/{id}")]);
    let compactor = t.run(&["compact", "Long"]).ok().trim().to_owned();
    wait_for("the compactor to fail", || {
        t.agents().iter().any(|a| a["id"] == compactor.as_str() && a["state"] == "failed")
    });
    // A second compaction is refused while this one is in flight.
    let again = t.run(&["compact", "Long"]);
    assert!(again.stderr.contains("already has a compaction in flight"), "{}", again.stderr);
    // Scan relaunches it once, then reports it dead: the agent lets it go.
    t.run(&["scan"]).ok();
    wait_for("the relaunch to fail", || server.requests_matching(COMPACTOR).len() == 2);
    wait_for("the compactor to fail again", || {
        t.agents().iter().any(|a| a["id"] == compactor.as_str() && a["state"] == "failed")
    });
    t.run(&["scan"]).ok();
    wait_for("the agent to let it go", || t.git(&["for-each-ref", "refs/offshoot/compacting/"]).is_empty());
    assert_eq!(t.git(&["rev-parse", &format!("agents/{id}")]), tip, "nothing landed");
    // The compactor role cannot be dispatched or prompted.
    let run = t.run(&["dispatch", "Long", "--role", "compactor", "--goal", "x"]);
    assert!(run.stderr.contains("started by the harness only"), "{}", run.stderr);
}

#[test]
fn every_n_steps_counts_own_steps_lands_at_most_one_per_n_and_never_compacts_a_compactor() {
    let (server, t) = TestWorkspace::served("compact-every", Dialect::Anthropic);
    t.run(&["config", "set", "compaction.steps", "20", "compaction.trigger", "every_n_steps"]).ok();
    let mut turns: Vec<Turn> = (0..199).map(|i| Turn::bash(&format!("s{i}"), "true")).collect();
    turns.push(Turn::text("two hundred steps"));
    server.push_for("Solo", turns);
    // Each compactor supersedes the summary before it.
    for k in 1..=12u32 {
        let mut script = vec![summary_turn("w", &format!("summary number {k}"))];
        if k > 1 {
            script.push(mark("m", &format!(".offshoot/summary/{:04}.md", k - 1)));
        }
        script.push(Turn::text("done"));
        server.push_matching(COMPACTOR, script);
    }
    let run = t.run(&["--json", "prompt", "--name", "Solo", "take two hundred steps"]);
    let events: Vec<Value> = run.ok().lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    let id = t.id_of("Solo");
    let of = |outcome: &str| events.iter().filter(|e| e["type"] == "compaction" && e["outcome"] == outcome).count();
    let ledger = t.git(&["show", &format!("agents/{id}:.offshoot/compactions")]);
    let landings = ledger.lines().count();
    assert!((1..=10).contains(&landings), "{ledger}");
    assert_eq!(of("landed"), landings, "{events:?}");
    assert!(of("started") >= landings && of("started") <= 10, "{events:?}");
    // One summary is left, the newest; no compactor ever got a compactor of its own.
    assert_eq!(listed(&t, &id, ".offshoot/summary"), [format!("{landings:04}.md")]);
    let text = t.git(&["show", &format!("agents/{id}:.offshoot/summary/{landings:04}.md")]);
    assert_eq!(text.trim(), format!("summary number {landings}"));
    let agents = t.agents();
    assert!(agents.iter().all(|a| a["id"].as_str().expect("id").matches('.').count() <= 1), "{agents:?}");
    assert_eq!(agents.len(), 1 + of("started"));
    // Counted from its own steps: a fork of it starts counting from zero.
    assert_eq!(agents.iter().find(|a| a["id"] == id.as_str()).expect("solo")["steps"], 200);
}

#[test]
fn context_percent_starts_a_compaction_after_the_step_that_crossed_it() {
    let (server, t) = TestWorkspace::served("compact-percent", Dialect::Anthropic);
    // The third call reports 150,000 prompt tokens: after its tool step, two steps can
    // be kept back and the first compacted.
    let mut big = Turn::bash("b3", "echo big");
    big.input_tokens = 150_000;
    let turns = [Turn::bash("b1", "echo one"), Turn::bash("b2", "echo two"), big, Turn::bash("b4", "echo four")];
    server.push_for("Full", turns.into_iter().chain([Turn::text("end")]));
    server.push_matching(COMPACTOR, [summary_turn("w", "one, big, three"), Turn::text("done")]);
    let run = t.run(&["prompt", "--name", "Full", "fill the window"]);
    assert!(run.stderr.contains("compacting:"), "{}", run.stderr);
    assert!(run.stderr.contains("compaction 1 landed"), "{}", run.stderr);
    let id = t.id_of("Full");
    assert_eq!(listed(&t, &id, ".offshoot/summary"), ["0001.md"]);
    // 150,000 of the worker's 200,000 tokens is past the default 70%: one compaction.
    assert_eq!(server.requests_matching(COMPACTOR).len(), 2);
    // `ls` shows how full the context was at the last call (100 prompt tokens).
    let full = t.agents().into_iter().find(|a| a["id"] == id.as_str()).expect("agent");
    assert_eq!((full["context_tokens"].as_u64(), full["context_window"].as_u64()), (Some(100), Some(200_000)));
    assert!(t.run(&["ls"]).ok().lines().nth(1).is_some_and(|l| l.contains(" 0%  ")));
}

#[test]
fn a_summary_with_conflict_markers_is_never_sent() {
    let (server, t) = TestWorkspace::served("compact-markers", Dialect::Anthropic);
    server.push_for("Marked", [Turn::text("first")]);
    t.run(&["prompt", "--name", "Marked", "hello"]).ok();
    let id = t.id_of("Marked");
    // Only a commit made by hand can bring one: write_summary refuses markers.
    let tip = t.git(&["rev-parse", &format!("agents/{id}")]).trim().to_owned();
    let index = t.ws.join("hand-index");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .env("GIT_DIR", t.ws.join("repo.git"))
            .env("GIT_INDEX_FILE", &index)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "hand")
            .env("GIT_AUTHOR_EMAIL", "hand@example.invalid")
            .env("GIT_COMMITTER_NAME", "hand")
            .env("GIT_COMMITTER_EMAIL", "hand@example.invalid")
            .args(args)
            .output()
            .expect("git");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    git(&["read-tree", &tip]);
    let blob = {
        let file = t.ws.join("conflicted.md");
        std::fs::write(&file, "ours\n<<<<<<< HEAD\na\n=======\nb\n>>>>>>> other\n").expect("write");
        git(&["hash-object", "-w", &file.to_string_lossy()])
    };
    git(&["update-index", "--add", "--cacheinfo", &format!("100644,{blob},.offshoot/summary/0001.md")]);
    let tree = git(&["write-tree"]);
    let commit = git(&["commit-tree", &tree, "-p", &tip, "-m", "a summary by hand"]);
    git(&["update-ref", &format!("refs/heads/agents/{id}"), &commit]);
    let sent = server.requests_for("Marked").len();
    let run = t.run(&["send", "Marked", "again"]);
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("holds a merge-conflict marker (`<<<<<<< HEAD`)"), "{}", run.stderr);
    assert_eq!(server.requests_for("Marked").len(), sent, "nothing was sent");
}

/// A bash turn that reports `input` prompt tokens.
fn reporting(id: &str, input: u64) -> Turn {
    let mut turn = Turn::bash(id, "echo step");
    turn.input_tokens = input;
    turn
}

#[test]
fn a_full_context_is_never_sent_with_never_the_run_stops_and_says_what_to_do() {
    let (server, t) = TestWorkspace::served("compact-full-never", Dialect::Anthropic);
    t.run(&[
        "config",
        "set",
        "compaction.trigger",
        "never",
        "roles.worker.context_window",
        "5000",
        "roles.worker.max_output_tokens",
        "100",
    ])
    .ok();
    server.push_for("Tight", [reporting("r1", 1_000), reporting("r2", 4_850), Turn::text("never reached")]);
    let run = t.run(&["prompt", "--name", "Tight", "fill it"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("context is full"), "{}", run.stderr);
    assert!(run.stderr.contains("over the 5000-token window of role `worker`; nothing was sent"), "{}", run.stderr);
    assert!(run.stderr.contains("offshoot compact"), "{}", run.stderr);
    assert_eq!(server.requests_for("Tight").len(), 2, "the third request was never sent");
    // No step record was made for it either.
    let id = t.id_of("Tight");
    assert_eq!(t.step_records(&id).len(), 2);
}

#[test]
fn with_a_trigger_a_full_context_waits_for_the_compaction_to_land_then_goes_on() {
    let (server, t) = TestWorkspace::served("compact-full-wait", Dialect::Anthropic);
    t.run(&["config", "set", "roles.worker.context_window", "5000", "roles.worker.max_output_tokens", "100"]).ok();
    // The fourth call reports 4,850 of 5,000 tokens: past 70% (a compaction starts after
    // its tool step) and too full for the fifth call to go out before it lands.
    server.push_for(
        "Waits",
        [
            reporting("r1", 1_000),
            reporting("r2", 1_000),
            reporting("r3", 1_000),
            reporting("r4", 4_850),
            Turn::text("after"),
        ],
    );
    server.push_matching(COMPACTOR, [summary_turn("w", "four steps of echo"), Turn::text("done")]);
    let run = t.run(&["prompt", "--name", "Waits", "fill it"]);
    assert!(run.ok().contains("after"), "{}", run.stderr);
    assert!(run.stderr.contains("waiting for the compaction to land"), "{}", run.stderr);
    let landed_at = run.stderr.find("compaction 1 landed").expect("landed");
    let fifth = run.stderr.find("· step 5 ").expect("a fifth step");
    assert!(landed_at < fifth, "{}", run.stderr);
    // The fifth request went out with the summary in place of the compacted steps.
    let requests = server.requests_for("Waits");
    assert_eq!(requests.len(), 5);
    assert!(requests[4].body.to_string().contains("four steps of echo"));
    assert!(requests[4].raw.len() < requests[3].raw.len());
}

#[test]
fn a_compaction_started_late_forks_further_back_so_the_compactor_fits_its_window() {
    let (server, t) = TestWorkspace::served("compact-late", Dialect::Anthropic);
    // The compactor's window holds its 4,000-token allowance, a 1,000-token answer and
    // about 1,000 tokens (3,000 bytes) of inherited transcript.
    t.run(&["config", "set", "roles.compactor.context_window", "6000", "roles.compactor.max_output_tokens", "1000"])
        .ok();
    // Each step's result is about 1,200 bytes.
    let wide = |i: usize| Turn::bash(&format!("w{i}"), "printf '%01200d\\n' 0");
    server.push_for("Wide", (0..6).map(wide).chain([Turn::text("wide enough")]));
    t.run(&["prompt", "--name", "Wide", "print a lot"]).ok();
    let id = t.id_of("Wide");
    server.push_matching(COMPACTOR, [summary_turn("w", "lots of x"), Turn::text("done")]);
    let run = t.run(&["compact", "Wide"]);
    // Keeping two steps back would compact 10 entries; only what fits is compacted.
    let entries: usize = run
        .stderr
        .split("in place of ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", run.stderr));
    assert!((1..10).contains(&entries), "{}", run.stderr);
    wait_for("the landing", || landed(&t, &id));
    let first = &server.requests_matching(COMPACTOR)[0];
    assert!(first.raw.len() < 6_000 * 3, "{} bytes", first.raw.len());
}

#[test]
fn a_compactor_that_never_writes_a_summary_is_tried_once_per_interval() {
    let (server, t) = TestWorkspace::served("compact-futile", Dialect::Anthropic);
    t.run(&["config", "set", "compaction.steps", "10", "compaction.trigger", "every_n_steps"]).ok();
    let mut turns: Vec<Turn> = (0..29).map(|i| Turn::bash(&format!("s{i}"), "true")).collect();
    turns.push(Turn::text("thirty steps"));
    server.push_for("Futile", turns);
    for _ in 0..15 {
        server.push_matching(COMPACTOR, [Turn::text("I would rather not summarise")]);
    }
    let run = t.run(&["--json", "prompt", "--name", "Futile", "take thirty steps"]);
    let events: Vec<Value> = run.ok().lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    let started = events.iter().filter(|e| e["type"] == "compaction" && e["outcome"] == "started").count();
    assert!((1..=3).contains(&started), "{started} compactors started in 30 steps");
    let id = t.id_of("Futile");
    assert!(!landed(&t, &id));
    // Every pass is a compactor the tree shows; no more were made than were started.
    assert_eq!(t.agents().len(), 1 + started);
}

#[test]
fn one_landing_of_one_pass_is_said_in_the_singular() {
    let (server, t) = TestWorkspace::served("compact-one-pass", Dialect::Anthropic);
    t.run(&["config", "set", "compaction.steps", "10", "compaction.trigger", "every_n_steps"]).ok();
    let mut turns: Vec<Turn> = (0..14).map(|i| Turn::bash(&format!("s{i}"), "true")).collect();
    turns.push(Turn::text("fifteen steps"));
    server.push_for("Quick", turns);
    server.push_matching(COMPACTOR, [summary_turn("w", "the gist"), Turn::text("done")]);
    t.run(&["prompt", "--name", "Quick", "take fifteen steps"]).ok();
    let tree = t.run(&["tree", "Quick"]);
    assert!(tree.ok().contains(", 1 compaction (1 pass)"), "{}", tree.stdout);
}

#[test]
fn a_landing_says_how_many_passes_it_took_in_its_event_and_in_tree() {
    let (server, t) = TestWorkspace::served("compact-passes", Dialect::Anthropic);
    t.run(&["config", "set", "compaction.steps", "10", "compaction.trigger", "every_n_steps"]).ok();
    let mut turns: Vec<Turn> = (0..29).map(|i| Turn::bash(&format!("s{i}"), "true")).collect();
    turns.push(Turn::text("thirty steps"));
    server.push_for("Patient", turns);
    // The first pass writes nothing; the second lands.
    server.push_matching(COMPACTOR, [Turn::text("not now")]);
    server.push_matching(COMPACTOR, [summary_turn("w", "the gist"), Turn::text("done")]);
    let run = t.run(&["prompt", "--name", "Patient", "take thirty steps"]);
    assert!(run.stderr.contains("compaction 1 landed (pass 2 since the last landing)"), "{}", run.stderr);
    let tree = t.run(&["tree", "Patient"]);
    assert!(tree.ok().contains(", 1 compaction (2 passes)"), "{}", tree.stdout);
    let json = t.run(&["--json", "tree", "Patient"]);
    let root: Value = serde_json::from_str(json.ok().lines().next().expect("a line")).expect("json");
    assert_eq!(root["compactions"], json!([2]));
}

#[test]
fn compact_wait_says_whether_the_summary_landed_or_was_declined() {
    let (server, t) = TestWorkspace::served("compact-wait", Dialect::Anthropic);
    let id = long_agent(&server, &t);
    // A compactor that answers without writing a summary: declined, and said so.
    server.push_matching(COMPACTOR, [Turn::text("nothing worth summarising")]);
    let declined = t.run(&["compact", "Long", "--wait"]);
    assert_eq!(declined.code, 1, "{}", declined.stderr);
    assert!(
        declined.stderr.contains("· compaction of `") && declined.stderr.contains(" declined: "),
        "{}",
        declined.stderr
    );
    assert!(declined.stderr.contains(&format!("the compaction of `{id}` was declined")), "{}", declined.stderr);
    wait_for("the agent to be done", || t.agents().iter().all(|a| a["state"] != "running"));
    // One that writes it: landed.
    server.push_matching(COMPACTOR, [summary_turn("c1", "Wrote notes.md, echoed two and three."), Turn::text("done")]);
    let landed_run = t.run(&["compact", "Long", "--wait"]);
    assert!(landed_run.ok().trim().starts_with(&format!("{id}.")), "{}", landed_run.stdout);
    assert!(landed_run.stderr.contains(" landed: "), "{}", landed_run.stderr);
    assert!(landed(&t, &id));
}
