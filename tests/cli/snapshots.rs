//! Where output is the product — `ls`, `tree`, `log`, errors with their hints — it is
//! compared whole against a reviewed snapshot (`tests/cli/snapshots/`), with what
//! changes from run to run (ids, shas, times, paths, ports) put in brackets.
//! `cargo insta review` (or `INSTA_UPDATE=always`) accepts a change on purpose.

use serde_json::json;

use crate::support::server::{Reply, Turn, error_body};
use crate::support::workspace::{Dialect, Run, TestWorkspace};

/// `text` with every agent's id replaced by `<Name>`, the test's directory by
/// `[ROOT]` (shas, times, ports and durations go by the settings' filters).
fn normalised(t: &TestWorkspace, text: &str) -> String {
    replaced(t, text, false)
}

/// A table's `text`, each id's placeholder padded to the id's width so that columns
/// stay aligned as the user sees them.
fn table(t: &TestWorkspace, text: &str) -> String {
    replaced(t, text, true)
}

fn replaced(t: &TestWorkspace, text: &str, pad: bool) -> String {
    let mut text = text.replace(t.root.to_str().expect("utf-8"), "[ROOT]");
    let mut agents: Vec<(String, String)> = t
        .agents()
        .iter()
        .map(|a| (a["id"].as_str().unwrap_or("").to_owned(), a["name"].as_str().unwrap_or("").to_owned()))
        .collect();
    // Longest first: a child's id begins with its parent's.
    agents.sort_by_key(|(id, _)| std::cmp::Reverse(id.len()));
    for (id, name) in agents {
        let mut placeholder = format!("<{name}>");
        if pad {
            placeholder = format!("{placeholder:<width$}", width = id.len());
        }
        text = text.replace(&id, &placeholder);
    }
    text
}

fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_prepend_module_to_snapshot(false);
    s.add_filter(r"\b[0-9a-f]{40}\b", "[SHA]");
    s.add_filter(r"\b[0-9a-f]{7,12}\b", "[SHORT-SHA]");
    s.add_filter(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "[TIME]");
    s.add_filter(r"127\.0\.0\.1:\d+", "[ADDR]");
    s.add_filter(r"\b\d+(\.\d+)? ?(ms|s)\b", "[DURATION]");
    s.add_filter(r"pid \d+", "pid [PID]");
    s
}

/// Both streams of a finished command, as a user reads them.
fn seen(t: &TestWorkspace, run: &Run) -> String {
    normalised(t, &format!("exit {}\n--- stdout\n{}--- stderr\n{}", run.code, run.stdout, run.stderr))
}

#[test]
fn ls_tree_and_log_of_a_parent_and_its_child() {
    let (server, t) = TestWorkspace::served("snap-tree", Dialect::Anthropic);
    server.push_for(
        "Boss",
        [
            Turn::tool("d1", "dispatch", json!({"role": "worker", "goal": "write a.txt", "name": "Kid"})),
            Turn::text("waiting for Kid"),
            Turn::text("Kid wrote a.txt; done"),
        ],
    );
    server.push_for("Kid", [Turn::bash("k1", "echo A > a.txt"), Turn::text("wrote a.txt")]);
    t.run(&["prompt", "--name", "Boss", "get a.txt written"]).ok();
    let settings = settings();
    settings.bind(|| {
        insta::assert_snapshot!("ls", table(&t, t.run(&["ls"]).ok()));
        insta::assert_snapshot!("tree", normalised(&t, t.run(&["tree"]).ok()));
        insta::assert_snapshot!("log", normalised(&t, t.run(&["log", "Boss"]).ok()));
    });
}

#[test]
fn errors_and_their_hints() {
    let (server, t) = TestWorkspace::served("snap-errors", Dialect::Anthropic);
    server.push(Reply::Turn(Turn::text("hi")));
    t.run(&["prompt", "--name", "Solo", "hello"]).ok();
    // A step that fails on every attempt leaves the agent `failed`, and `ls` says why.
    t.set("retry.max_attempts", "4");
    for _ in 0..4 {
        server.push(Reply::Status {
            code: 529,
            retry_after: None,
            body: error_body("anthropic", "overloaded_error", "Overloaded"),
        });
    }
    let overloaded = t.run(&["send", "Solo", "more"]);
    let cases: Vec<(&str, Run)> = vec![
        ("overloaded", overloaded),
        ("no step", t.run(&["show", "Solo", "--step", "9"])),
        ("no agent", t.run(&["log", "Nobody"])),
        ("empty message", t.run(&["send", "Solo", " "])),
        ("no commit", t.run(&["fork", "--from", "no-such-ref", "x"])),
        ("not an agent commit", t.run(&["fork", "--from", "config/default", "x"])),
        ("name taken", t.run(&["prompt", "--name", "Solo", "again"])),
        ("odd pairs", t.run(&["config", "set", "retry.max_attempts", "3", "retry.initial_backoff_ms"])),
        ("no lineage", t.run(&["config", "show", "--lineage", "nope"])),
        ("bad value", t.run(&["config", "set", "roles.worker.context_window", "0"])),
        ("unknown key", t.run(&["config", "set", "retry.bogus", "1"])),
    ];
    let mut all = String::new();
    for (what, run) in &cases {
        all.push_str(&format!("=== {what}\n{}\n", seen(&t, run)));
    }
    let settings = settings();
    settings.bind(|| {
        insta::assert_snapshot!("errors", all);
        insta::assert_snapshot!("ls-failed", table(&t, t.run(&["ls"]).ok()));
    });
}

#[test]
fn what_a_script_and_a_new_user_read() {
    let (server, t) = TestWorkspace::served("snap-headless", Dialect::Anthropic);
    let narrated = Turn { text: Some("Running step 1.".into()), ..Turn::bash("c1", "echo one") };
    server.push_for(
        "Boss",
        [
            Turn {
                calls: vec![(
                    "d1".into(),
                    "dispatch".into(),
                    json!({"role": "worker", "goal": "say hi", "name": "Kid"}).to_string(),
                )],
                ..narrated
            },
            Turn::text("waiting for Kid"),
            Turn::text("Kid said hi; done"),
        ],
    );
    server.push_for("Kid", [Turn::text("hi")]);
    // A run as a script sees it: the answer alone on stdout, the rest on stderr, totals
    // of the whole tree.
    let run = t.run(&["prompt", "--name", "Boss", "get a greeting"]);
    // (Made in the next second: `ls` lists by `created`, which counts seconds.)
    std::thread::sleep(std::time::Duration::from_millis(1100));
    server.push_for("Fork", [Turn::text("forked")]);
    t.run(&["fork", "--from", "Boss", "--step", "2", "--name", "Fork", "try it without Kid"]).ok();
    let settings = settings();
    settings.bind(|| {
        // (The lines of agents below come from another thread, when they come, and the
        // parent waits for its child only if the child is not done yet: said apart from
        // the snapshot.)
        assert!(run.stderr.contains("  [") && run.stderr.contains(" Kid] answered: hi"), "{}", run.stderr);
        let timed = |l: &str| l.starts_with("  [") || l.starts_with("· waiting for ");
        let own: String = run.stderr.lines().filter(|l| !timed(l)).map(|l| format!("{l}\n")).collect();
        let run = Run { stderr: own, ..run };
        insta::assert_snapshot!("prompt-streams", seen(&t, &run));
        // Forks under their origin, with their own message; steps counted in words.
        insta::assert_snapshot!("tree-forks", normalised(&t, t.run(&["tree"]).ok()));
        insta::assert_snapshot!("ls-forks", table(&t, t.run(&["ls"]).ok()));
        // What a new user meets first.
        let errors = [
            t.run(&["prompt", "--role", "reviewer", "x"]),
            t.run(&["config", "unset", "budgets.max_steps"]),
            t.run(&["prompt", "--with-changes", "x"]),
            t.run(&["show", "Boss", "--compaction", "1"]),
        ];
        let all: Vec<String> = errors.iter().map(|r| seen(&t, r)).collect();
        insta::assert_snapshot!("first-minutes", all.join("\n"));
    });
}

#[test]
fn what_a_new_user_trips_over_reads_plainly() {
    let (server, t) = TestWorkspace::served("snap-new-user", Dialect::Anthropic);
    let file = t.root.join("a-file");
    std::fs::write(&file, "").expect("file");
    let f = file.to_str().expect("utf-8");
    // A template broken by a stray line, on a home with no workspace yet.
    let template = t.home.join("template/offshoot.toml");
    std::fs::create_dir_all(template.parent().expect("dir")).expect("template");
    std::fs::write(&template, "x ]]\n").expect("template");
    let broken = t.run_bare(&["prompt", "hello"]);
    std::fs::remove_file(&template).expect("template");
    let mut answer = Turn::text("done");
    (answer.input_tokens, answer.output_tokens) = (26_954, 1_329);
    server.push(Reply::Turn(answer));
    t.run(&["prompt", "--name", "Solo", "hello"]).ok();
    t.set("retry.max_attempts", "1");
    server.push(Reply::Raw(b"<html><body>Welcome to the proxy</body></html>".to_vec()));
    let cases: Vec<(&str, Run)> = vec![
        ("broken template", broken),
        ("-w a file", t.run_bare(&["-w", f, "ls"])),
        ("OFFSHOOT_HOME a file", {
            let o = t.command_bare().env("OFFSHOOT_HOME", &file).arg("ls").output().expect("run");
            Run {
                code: o.status.code().unwrap_or(-1),
                stdout: String::from_utf8_lossy(&o.stdout).into(),
                stderr: String::from_utf8_lossy(&o.stderr).into(),
            }
        }),
        ("new where one is", t.run_bare(&["new", t.ws.to_str().expect("utf-8")])),
        ("unpriced model under a cost cap", {
            t.set("budgets.max_cost_usd", "5");
            t.run(&["prompt", "--model", "claude-unpriced-9", "x"])
        }),
        ("a config change", t.run(&["config", "unset", "budgets.max_cost_usd"])),
        ("uncompact with none", t.run(&["uncompact", "Solo"])),
        ("a 200 that is a web page", t.run(&["send", "Solo", "again"])),
    ];
    let mut all = String::new();
    for (what, run) in &cases {
        all.push_str(&format!("=== {what}\n{}\n", seen(&t, run)));
    }
    let settings = settings();
    settings.bind(|| {
        insta::assert_snapshot!("new-user-trips", all);
        insta::assert_snapshot!("tree-thousands", normalised(&t, t.run(&["tree"]).ok()));
    });
}
