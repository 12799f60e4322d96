//! What a new user trips over, each as they met it: replayed diffs, eval reports,
//! budgets, refused runs and the words of errors.

use std::path::PathBuf;

use crate::support::server::Turn;
use crate::support::workspace::{Dialect, TestWorkspace};

#[test]
fn a_replayed_project_agent_shows_its_diff_and_doctor_agrees() {
    let (server, t, _repo) = crate::project::project("newuser-replay-diff");
    server.push_turns([Turn::bash("b1", "echo made here > d.txt && echo more >> b.txt"), Turn::text("done")]);
    t.run(&["prompt", "--name", "Maker", "make d"]).ok();
    let diff = t.run(&["diff", "Maker"]).ok().to_owned();
    assert!(diff.contains("+made here") && diff.contains("+more"), "{diff}");
    let file = t.root.join("maker.offshoot");
    t.run(&["bundle", "Maker", file.to_str().expect("utf-8")]).ok();

    let other = TestWorkspace::new("newuser-replay-diff-other");
    let place = PathBuf::from(other.run_bare(&["replay", file.to_str().expect("utf-8")]).ok().trim());
    let w = place.to_str().expect("utf-8");
    assert_eq!(other.run_bare(&["-w", w, "diff", "Maker"]).ok(), diff, "the same change, replayed");
    let stat = other.run_bare(&["-w", w, "diff", "--stat", "Maker"]);
    assert!(stat.ok().contains("d.txt"), "{}", stat.stdout);
    other.run_bare(&["-w", w, "doctor"]).ok();
}

#[test]
fn a_cost_budget_is_never_overshot_and_an_unpriced_model_makes_no_call() {
    let (server, t) = TestWorkspace::served("newuser-budget", Dialect::Anthropic);
    // Each call: 100 prompt tokens at $3 and 100 output at $15 per million, $0.0018; a
    // call may answer 100 tokens at most.
    t.set("roles.worker.max_output_tokens", "100");
    t.set("budgets.max_cost_usd", "0.02");
    let turns: Vec<Turn> = (0..30)
        .map(|i| {
            let mut turn = Turn::bash(&format!("c{i}"), "true");
            (turn.input_tokens, turn.output_tokens) = (100, 100);
            turn
        })
        .collect();
    server.push_turns(turns);
    let run = t.run(&["prompt", "--name", "Thrifty", "work"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let calls = server.requests().len();
    let spent = calls as f64 * 0.0018;
    assert!(spent <= 0.02, "{calls} calls spent ${spent:.4}, past the $0.02 limit");
    assert!(spent + 2.0 * 0.0018 > 0.02, "stopped early: {calls} calls, ${spent:.4}");
    assert!(run.stderr.contains(&format!("spent ${spent:.4} of max_cost_usd $0.02")), "{}", run.stderr);
    assert!(run.stderr.contains("its next call could bring that to $"), "{}", run.stderr);

    // A model with no price is refused before anything is made or sent.
    let asked = server.requests().len();
    let agents = t.agents().len();
    let refused = t.run(&["prompt", "--model", "claude-unpriced-9", "work more"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("model `claude-unpriced-9` has no price"), "{}", refused.stderr);
    assert!(refused.stderr.contains("prices.\"claude-unpriced-9\".input"), "{}", refused.stderr);
    assert_eq!((server.requests().len(), t.agents().len()), (asked, agents));
}

#[test]
fn json_shows_the_failed_attempts_of_a_first_call_and_names_no_removed_agent() {
    use crate::support::server::{Reply, error_body};
    let (server, t) = TestWorkspace::served("newuser-json-first", Dialect::Anthropic);
    t.set("retry.max_attempts", "2");
    for _ in 0..2 {
        let body = error_body("anthropic", "api_error", "overloaded here");
        server.push(Reply::Status { code: 500, retry_after: None, body });
    }
    let run = t.run(&["prompt", "--json", "--name", "Gone", "hello"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let events: Vec<serde_json::Value> =
        run.stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let of = |kind: &str| events.iter().filter(|e| e["type"] == kind).collect::<Vec<_>>();
    assert!(of("agent").is_empty(), "a removed agent is never announced: {}", run.stdout);
    assert_eq!(of("step").len(), 1, "{}", run.stdout);
    let failed = of("attempt_failed");
    assert_eq!(failed.len(), 2, "{}", run.stdout);
    assert!(failed[0]["error"].as_str().is_some_and(|e| e.contains("overloaded here")), "{}", run.stdout);
    let end = events.last().expect("an end");
    assert_eq!(end["type"], "end");
    assert_eq!(end["kept"], false);
    for event in &events {
        assert!(event["agent"].is_null(), "names an agent that is not there: {event}");
    }
    assert!(t.agents().is_empty());
}

#[test]
fn send_and_run_on_an_agent_another_process_drives_follow_it_until_it_lets_go() {
    let (server, t) = TestWorkspace::served("newuser-busy", Dialect::Anthropic);
    server.push_for("Busy", [Turn::bash("b1", "sleep 2"), Turn::text("first done"), Turn::text("read your note")]);
    t.run(&["prompt", "--detach", "--name", "Busy", "work a while"]).ok();
    let id = t.id_of("Busy");
    crate::support::wait::wait_for("its driver to be at work", || t.running_driver(&id).is_some());
    let sent = t.run(&["send", "Busy", "a note for you"]);
    sent.ok();
    assert!(sent.stderr.contains("is being driven by another process"), "{}", sent.stderr);
    assert!(t.running_driver(&id).is_none(), "send came back while the agent still worked");
    let log = t.run(&["log", &id]).ok().to_owned();
    assert!(log.contains("a note for you"), "the note was delivered by the other driver: {log}");
    // Nothing is due now: `run` says so rather than promising a pick-up.
    let again = t.run(&["run", "Busy"]);
    again.ok();
    assert!(!again.stderr.contains("will pick this up"), "{}", again.stderr);
}

#[test]
fn counts_read_in_the_singular_for_one_and_tokens_with_thousands_apart() {
    let (server, t) = TestWorkspace::served("newuser-counts", Dialect::Anthropic);
    let mut answer = Turn::text("done");
    (answer.input_tokens, answer.output_tokens) = (26_954, 1_329);
    server.push(crate::support::server::Reply::Turn(answer));
    let goal = "a goal long enough that a narrow terminal cannot show it whole in one row of ls, not at all";
    t.run(&["prompt", "--name", "Counted", goal]).ok();
    let doctor = t.run(&["doctor"]);
    doctor.ok();
    assert!(doctor.stderr.contains("checked 1 agent, "), "{}", doctor.stderr);
    let tree = t.run(&["tree"]);
    assert!(tree.ok().contains("28,283 tokens"), "the same form as `26,954 in`: {}", tree.stdout);
    let ls = t.run(&["ls"]);
    assert!(ls.ok().contains("26,954") && ls.stdout.contains("1,329"), "{}", ls.stdout);
    assert!(ls.stdout.contains(goal), "piped, the goal is whole: {}", ls.stdout);
    let file = t.root.join("counted.offshoot");
    let bundled = t.run(&["bundle", "Counted", file.to_str().expect("utf-8")]);
    bundled.ok();
    assert!(bundled.stderr.contains("· bundled 1 agent ("), "{}", bundled.stderr);
    let replayed = t.run_bare(&["replay", file.to_str().expect("utf-8")]);
    replayed.ok();
    assert!(replayed.stderr.contains("· 1 agent from"), "{}", replayed.stderr);

    // On a terminal of 100 columns, every row of `ls` fits it (the goal is cut).
    let mut ls = t.command();
    ls.arg("ls").env("TERM", "xterm-256color");
    let shown = crate::support::pty::Pty::spawn(ls, 100, 20);
    let mut shown = shown;
    let _ = shown.child.wait();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let text = shown.text();
    assert!(text.contains("Counted") && text.contains('…'), "{text}");
    for line in text.lines() {
        assert!(line.trim_end().chars().count() <= 100, "a row past 100 columns: {line:?}");
    }
}
