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

    // A workspace replayed before the base came along (its commit taken out here): doctor
    // finds it and repairs it from the agents' repository.
    let base = other.run_bare(&["-w", w, "--json", "ls"]);
    let id = serde_json::from_str::<serde_json::Value>(base.ok().lines().next().expect("a line")).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let facts = std::process::Command::new("git")
        .args(["--git-dir", &format!("{w}/repo.git"), "show", &format!("agents/{id}:.offshoot/agent.toml")])
        .output()
        .expect("git");
    let facts = String::from_utf8_lossy(&facts.stdout).into_owned();
    let base =
        facts.lines().find_map(|l| l.strip_prefix("base = \"")).expect("a base").trim_end_matches('"').to_owned();
    let object = place.join("repo.git/objects").join(&base[..2]).join(&base[2..]);
    std::fs::remove_file(&object).expect("the base is a loose object of repo.git");
    assert_ne!(other.run_bare(&["-w", w, "diff", "Maker"]).code, 0);
    let found = other.run_bare(&["-w", w, "doctor"]);
    assert_eq!(found.code, 1, "{}", found.stderr);
    assert!(
        found.stdout.contains(&format!("starts from commit {base}, which repo.git does not hold")),
        "{}",
        found.stdout
    );
    other.run_bare(&["-w", w, "doctor", "--repair"]);
    assert_eq!(other.run_bare(&["-w", w, "diff", "Maker"]).ok(), diff);
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
    // A driver launched for it (a wake that lost the race) leaves at once: it follows nothing.
    t.run(&["run", "--launched", &id]).ok();
    assert!(t.running_driver(&id).is_some(), "a second driver waited for the first to end");
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

#[test]
fn children_dispatched_in_one_step_get_their_ids_in_call_order() {
    let (server, t) = TestWorkspace::served("newuser-child-order", Dialect::Anthropic);
    let many = Turn {
        calls: (1..=6)
            .map(|i| {
                let input =
                    serde_json::json!({"role": "worker", "goal": format!("child task {i}"), "name": format!("Kid{i}")});
                (format!("d{i}"), "dispatch".to_owned(), input.to_string())
            })
            .collect(),
        ..Turn::text("")
    };
    server.push_for("Lead", [many, Turn::text("dispatched")]);
    server.endless_text("done");
    t.run(&["prompt", "--detach", "--name", "Lead", "lead"]).ok();
    crate::support::wait::wait_for("six children", || t.agents().len() == 7);
    let lead = t.id_of("Lead");
    for i in 1..=6 {
        assert_eq!(t.id_of(&format!("Kid{i}")), format!("{lead}.{i}"), "the {i}th call's child");
    }
}

#[test]
fn a_childs_answer_is_shown_before_the_parent_hears_of_it() {
    let (server, t) = TestWorkspace::served("newuser-answer-order", Dialect::Anthropic);
    let dispatch = serde_json::json!({"role": "worker", "goal": "say hi", "name": "Kid"});
    server.push_for("Boss", [Turn::tool("d1", "dispatch", dispatch), Turn::text("waiting"), Turn::text("all done")]);
    server.push_for("Kid", [Turn::text("hi from the kid")]);
    let run = t.run(&["prompt", "--name", "Boss", "delegate"]);
    run.ok();
    let at = |what: &str| run.stderr.find(what).unwrap_or_else(|| panic!("`{what}` not said:\n{}", run.stderr));
    assert!(at("answered: hi from the kid") < at("· message from `"), "{}", run.stderr);
}

#[test]
fn ls_counts_the_steps_kept_not_a_call_cut_off() {
    use crate::support::server::Reply;
    let (server, t) = TestWorkspace::served("newuser-steps", Dialect::Anthropic);
    server.push(Reply::Paced(
        Turn::text("a long answer that is stopped before it ends"),
        std::time::Duration::from_millis(400),
    ));
    let id = t.run(&["prompt", "--detach", "--name", "Cut", "talk"]).ok().trim().to_owned();
    crate::support::wait::wait_for("its call to stream", || {
        std::fs::read_to_string(t.steps_dir(&id).join("events.ndjson")).is_ok_and(|e| e.contains("text_delta"))
    });
    t.run(&["stop", &id]).ok();
    assert_eq!(t.agents()[0]["steps"], 0, "a call cut off is no step: {}", t.agents()[0]);
    server.push(Reply::Turn(Turn::text("done now")));
    t.run(&["run", &id]).ok();
    assert_eq!(t.agents()[0]["steps"], 1, "{}", t.agents()[0]);
}

#[test]
fn config_changes_say_their_commit_in_words_and_mcp_remove_says_what_stops() {
    let t = TestWorkspace::new("newuser-config-words");
    let set = t.run(&["config", "set", "retry.max_attempts", "2"]);
    assert!(set.ok().is_empty(), "no bare sha on stdout: {}", set.stdout);
    assert!(set.stderr.contains("· committed ") && set.stderr.contains(" to config/default"), "{}", set.stderr);
    let added = t.run(&["mcp", "add", "tools", "--", "true"]);
    assert!(added.ok().is_empty(), "{}", added.stdout);
    assert!(added.stderr.contains("added MCP server `tools`") && added.stderr.contains("commit "), "{}", added.stderr);
    let removed = t.run(&["mcp", "remove", "tools"]);
    removed.ok();
    assert!(removed.stderr.contains("agents stop using it at their next step"), "{}", removed.stderr);
    assert!(!removed.stderr.contains("agents use it"), "{}", removed.stderr);
}

#[test]
fn help_and_usage_show_what_a_user_can_type() {
    let mut t = TestWorkspace::new("newuser-usage");
    let ws = t.ws.to_str().expect("utf-8").to_owned();
    t.env("OFFSHOOT_WORKSPACE", &ws);
    let bad = t.run_bare(&["ls", "--bogus"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(!bad.stderr.contains("--workspace <WORKSPACE>"), "-w shown as required: {}", bad.stderr);
    // The variable still chooses the workspace.
    t.run_bare(&["ls"]).ok();
    let help = t.run_bare(&["ls", "--help"]);
    assert!(!help.ok().contains("--version"), "{}", help.stdout);
    assert!(t.run_bare(&["--version"]).ok().starts_with("offshoot "));
}

#[test]
fn errors_say_what_happened_uncompact_a_non_stream_answer_and_an_eval_config_typo() {
    use crate::support::server::Reply;
    let (server, t) = TestWorkspace::served("newuser-errors", Dialect::Anthropic);
    server.push(Reply::Turn(Turn::text("hi")));
    t.run(&["prompt", "--name", "Plain", "hello"]).ok();
    let undo = t.run(&["uncompact", "Plain"]);
    assert_eq!(undo.code, 2, "{}", undo.stderr);
    assert!(undo.stderr.contains("has no compaction: nothing has been compacted"), "{}", undo.stderr);
    assert!(!undo.stderr.contains("compaction 0"), "{}", undo.stderr);

    // A 200 whose body is a web page, not events.
    t.set("retry.max_attempts", "1");
    server.push(Reply::Raw(b"<html><body>Welcome to the proxy</body></html>".to_vec()));
    let odd = t.run(&["send", "Plain", "again"]);
    assert_eq!(odd.code, 1, "{}", odd.stderr);
    assert!(odd.stderr.contains("not with a stream of events"), "{}", odd.stderr);
    assert!(odd.stderr.contains("Welcome to the proxy"), "{}", odd.stderr);
    assert!(!odd.stderr.contains("stream ended before the response was complete"), "{}", odd.stderr);

    // A typo in an eval's config file is cited in that file, at its line.
    let config = t.root.join("mine.toml");
    std::fs::write(&config, "# my settings\n\n[retry]\nmax_attempts = 2\nmax_attemps = 3\n").expect("config");
    let suite = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/eval");
    let report = t.root.join("r.json");
    let run = t.eval_run(&suite, &[&config], &report, &[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains(&format!("{}:5", config.display())), "{}", run.stderr);
    assert!(!run.stderr.contains("offshoot.toml:"), "{}", run.stderr);
}
