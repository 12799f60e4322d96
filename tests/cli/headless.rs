//! The headless contract: what scripts get from `prompt`, `send` and `run` (the answer
//! alone on stdout; narration, progress and notes on stderr or as `--json` events).

use crate::support::server::Turn;
use crate::support::workspace::{Dialect, TestWorkspace};

#[test]
fn stdout_carries_the_final_answer_alone_and_the_narration_goes_to_stderr() {
    let (server, t) = TestWorkspace::served("headless-answer", Dialect::Anthropic);
    let narrated = |text: &str, id: &str, command: &str| Turn { text: Some(text.into()), ..Turn::bash(id, command) };
    server.push_turns([
        narrated("Running step 1.", "s1", "echo one"),
        narrated("Running step 2.\nStill going.", "s2", "echo two"),
        Turn::text("The answer is 42.\nOn two lines."),
    ]);
    let run = t.run(&["prompt", "find the answer"]);
    assert_eq!(run.ok(), "The answer is 42.\nOn two lines.\n");
    for said in
        ["Running step 1.", "Running step 2.", "Still going.", "· step 3", "· total: 3 model calls and 2 tool calls"]
    {
        assert!(run.stderr.contains(said), "{said} not on stderr:\n{}", run.stderr);
    }
    // `send` and `run` the same.
    let id = t.only_agent();
    server.push_turns([narrated("Checking.", "s3", "echo three"), Turn::text("Still 42.")]);
    let run = t.run(&["send", &id, "check it"]);
    assert_eq!(run.ok(), "Still 42.\n");
    assert!(run.stderr.contains("Checking."), "{}", run.stderr);
}

#[test]
fn a_headless_run_starts_no_process_to_ask_a_terminal_it_has_not_got_its_width() {
    let (server, mut t) = TestWorkspace::served("headless-no-tput", Dialect::Anthropic);
    // A `tput` first on PATH that leaves a mark: crossterm runs it to learn a width when
    // stderr is not a terminal.
    let bin = t.root.join("marking-bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let mark = t.root.join("tput-ran");
    std::fs::write(bin.join("tput"), format!("#!/bin/sh\necho \"$@\" >> {}\necho 80\n", mark.display())).expect("tput");
    std::process::Command::new("chmod").args(["+x", &bin.join("tput").display().to_string()]).status().expect("chmod");
    t.env("PATH", &format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()));
    server.push_turns([Turn::bash("s1", "echo one"), Turn::bash("s2", "echo two"), Turn::text("done")]);
    let run = t.run(&["prompt", "count"]);
    assert_eq!(run.ok(), "done\n");
    assert!(run.stderr.contains("· step 2"), "{}", run.stderr);
    assert!(!mark.exists(), "tput ran: {:?}", std::fs::read_to_string(&mark));
}

#[test]
fn diff_on_a_terminal_colours_its_lines_and_shows_an_escape_in_them_as_text() {
    let (server, t, _repo) = crate::project::project("headless-diff-colour");
    server.push_turns([Turn::bash("c1", "printf 'plain\\n\\033]0;title\\007\\n' >> b.txt"), Turn::text("done")]);
    t.run(&["prompt", "--name", "Painter", "change b"]).ok();
    let mut command = t.command();
    command.env("TERM", "xterm-256color").env_remove("NO_COLOR").args(["diff", "Painter"]);
    let pty = crate::support::pty::Pty::spawn(command, 120, 40);
    pty.wait_for("+plain");
    let raw = String::from_utf8_lossy(&pty.raw()).into_owned();
    // The verb's own styles reach the terminal as styles…
    assert!(raw.contains("\x1b[1m+++ b/b.txt\x1b[0m") && raw.contains("\x1b[32m+plain\x1b[0m"), "{raw:?}");
    // …and what the agent wrote is shown, never obeyed.
    assert!(!raw.contains("\x1b]0;title") && raw.contains("\\x1b]0;title\\x07"), "{raw:?}");
}

#[test]
fn a_runs_totals_count_the_agents_it_dispatched_on_stderr_and_in_the_end_event() {
    let (server, t) = TestWorkspace::served("headless-totals", Dialect::Anthropic);
    let two = Turn {
        calls: ["KidA", "KidB"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let input = serde_json::json!({"role": "worker", "goal": "say hi", "name": name});
                (format!("d{i}"), "dispatch".to_owned(), input.to_string())
            })
            .collect(),
        ..Turn::default()
    };
    server.push_for("Boss", [two, Turn::text("waiting"), Turn::text("one back"), Turn::text("both back")]);
    for kid in ["KidA", "KidB"] {
        server.push_for(kid, [Turn::bash("k1", "echo hi"), Turn::text("hi")]);
    }
    let run = t.run(&["--json", "prompt", "--name", "Boss", "lead"]);
    let end: serde_json::Value = serde_json::from_str(run.ok().lines().last().expect("an end event")).expect("json");
    assert_eq!(end["type"], "end");
    // The same as `tree` says of the whole tree (made by this run alone).
    let tree = t.run(&["--json", "tree"]).ok().to_owned();
    let root: serde_json::Value = serde_json::from_str(tree.lines().next().expect("the root")).expect("json");
    let sum = &root["tree"];
    assert_eq!(end["agents"], 3, "{end}");
    // Two dispatches of the parent's, a command of each child's.
    assert_eq!(end["tool_calls"], 4, "{end}");
    assert_eq!(end["steps"], sum["steps"], "{end} vs {sum}");
    let tokens = end["input_tokens"].as_u64().expect("in") + end["output_tokens"].as_u64().expect("out");
    assert_eq!(serde_json::Value::from(tokens), sum["tokens"], "{end} vs {sum}");
    assert_eq!(end["cost_usd"], sum["cost_usd"], "{end} vs {sum}");
    assert!(end["cached_tokens"].is_u64());
    // In words on stderr too.
    server.push_for("Boss", [Turn::text("again")]);
    let again = t.run(&["send", "Boss", "once more"]);
    assert!(again.stderr.contains("· total: 1 model call, 100 in, 10 out"), "{}", again.stderr);
    assert!(!again.stderr.contains("agents"), "{}", again.stderr);
    let steps = sum["steps"].as_u64().expect("steps");
    let first = t.run(&["log", "Boss"]);
    assert!(first.ok().contains("both back") || first.stdout.contains("one back"));
    assert!(steps >= 6, "{steps}");
}

#[test]
fn every_note_of_a_text_run_is_an_event_in_json_mode() {
    let (server, t, _repo) = crate::project::project("headless-notes");
    server.push_turns([Turn::text("done")]);
    let text = t.run(&["prompt", "--name", "Worded", "go"]);
    let said = "your uncommitted changes are not included (a.txt); `--with-changes` takes them along";
    assert!(!text.ok().contains(said), "{}", text.stdout);
    assert!(text.stderr.contains(said), "{}", text.stderr);
    server.push_turns([Turn::text("done")]);
    let json = t.run(&["--json", "prompt", "--name", "Evented", "go"]);
    let events: Vec<serde_json::Value> = json.ok().lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    let notes: Vec<&serde_json::Value> = events.iter().filter(|e| e["type"] == "note").collect();
    assert_eq!(notes.len(), 1, "{events:?}");
    assert!(notes[0]["text"].as_str().expect("text").ends_with(said), "{}", notes[0]);
    assert!(json.stderr.is_empty(), "{}", json.stderr);
    // Nothing due: said in both.
    let idle = t.run(&["--json", "run", "Evented"]);
    assert!(idle.ok().contains(r#""type":"note""#) && idle.stdout.contains("nothing is due"), "{}", idle.stdout);
}

#[test]
fn a_placeholder_key_is_not_redacted_out_of_ordinary_words() {
    let (server, mut t) = TestWorkspace::served("headless-placeholder", Dialect::Anthropic);
    t.env("ANTHROPIC_API_KEY", "test");
    server.push_turns([Turn::bash("c1", "echo running cargo test: 12 tests"), Turn::text("the tests pass")]);
    let run = t.run(&["prompt", "run the tests"]);
    assert_eq!(run.ok(), "the tests pass\n");
    assert_eq!(server.requests()[0].header("x-api-key"), Some("test"));
    let seen = server.result_text(1);
    assert!(seen.contains("running cargo test: 12 tests"), "{seen}");
    assert!(!seen.contains("redacted"), "{seen}");
}

#[test]
fn export_refuses_branch_names_git_would_misread() {
    let (server, t, repo) = crate::project::project("headless-branch-names");
    server.push_turns([Turn::bash("c1", "echo more >> b.txt"), Turn::text("done")]);
    t.run(&["prompt", "--name", "Named", "change b"]).ok();
    let before = crate::project::git(&repo, &["for-each-ref", "--format=%(refname)"]);
    for bad in ["--force", "-", "HEAD", "refs/heads/main", "a..b"] {
        let run = t.run(&["export", "Named", &format!("--branch={bad}")]);
        assert_eq!(run.code, 2, "{bad}: {}", run.stderr);
        assert!(run.stderr.contains("is not a valid branch name (git's rules for refs"), "{}", run.stderr);
    }
    assert_eq!(crate::project::git(&repo, &["for-each-ref", "--format=%(refname)"]), before);
    t.run(&["export", "Named", "--branch", "review/named"]).ok();
}

#[test]
fn claude_md_is_read_like_agents_md_and_one_file_under_two_names_once() {
    let (server, t, repo) = crate::project::project("headless-claude-md");
    std::fs::write(repo.join("AGENTS.md"), "Use four spaces.\n").expect("agents");
    std::fs::write(repo.join("CLAUDE.md"), "Run the tests before you answer.\n").expect("claude");
    crate::project::git(&repo, &["add", "AGENTS.md", "CLAUDE.md"]);
    crate::project::git(&repo, &["commit", "-q", "-m", "rules"]);
    server.push_turns([Turn::text("read")]);
    t.run(&["prompt", "--name", "Reader", "go"]).ok();
    let first = server.requests()[0].body.to_string();
    assert!(first.contains("Use four spaces.") && first.contains("Run the tests before you answer."), "{first}");
    // A CLAUDE.md that is a link to AGENTS.md: the rules once, never the link's target name.
    std::fs::remove_file(repo.join("CLAUDE.md")).expect("rm");
    std::os::unix::fs::symlink("AGENTS.md", repo.join("CLAUDE.md")).expect("link");
    crate::project::git(&repo, &["add", "CLAUDE.md"]);
    crate::project::git(&repo, &["commit", "-q", "-m", "one file"]);
    server.push_turns([Turn::text("read again")]);
    t.run(&["prompt", "--name", "Linked", "go"]).ok();
    let linked = server.requests().last().expect("asked").body.to_string();
    assert_eq!(linked.matches("Use four spaces.").count(), 1, "{linked}");
    assert!(!linked.contains("CLAUDE.md"), "the link pinned as a file of its own: {linked}");
}

#[test]
fn progress_lines_on_a_terminal_fit_its_width_and_end_with_a_newline() {
    let (server, t) = TestWorkspace::served("headless-width", Dialect::Anthropic);
    let long = format!("echo {}", "word ".repeat(40));
    server.push_turns([Turn::bash("c1", &long), Turn::text("done")]);
    let mut command = t.command();
    command.env("TERM", "xterm-256color").args(["prompt", "say many words"]);
    let mut pty = crate::support::pty::Pty::spawn(command, 60, 30);
    pty.wait_for("· total:");
    let _ = pty.child.wait();
    let screen = pty.screen();
    let call = screen
        .lines()
        .position(|l| l.starts_with("→ bash echo word"))
        .unwrap_or_else(|| panic!("no call line:\n{screen}\nraw: {:?}", String::from_utf8_lossy(&pty.raw())));
    let rows: Vec<&str> = screen.lines().collect();
    assert!(rows[call].ends_with('…') && rows[call].chars().count() <= 60, "{screen}");
    assert!(rows[call + 1].starts_with("  ← exit code 0"), "the call's line wrapped:\n{screen}");
    // Each line ends with a line break (a log of the terminal keeps lines apart).
    let raw = String::from_utf8_lossy(&pty.raw()).into_owned();
    let at = raw.find("→ bash echo word").expect("written");
    let line_end = raw[at..].find('\n').expect("a newline after the call's line");
    assert!(!raw[at..at + line_end].contains("← exit code"), "two lines glued: {:?}", &raw[at..at + line_end]);
    pty.type_in("");
}

#[test]
fn review_findings_nothing_due_stays_a_note_the_worker_stays_and_a_patch_keeps_its_crs() {
    let (server, t, _repo) = crate::project::project("headless-review");
    // A run with nothing due prints no old answer, even with a warning before it.
    t.set("roles.worker.sandbox", "none");
    server.push_turns([Turn::text("the old answer")]);
    t.run(&["prompt", "--name", "Done", "answer once"]).ok();
    let idle = t.run(&["run", "Done"]);
    assert_eq!(idle.ok(), "", "an old answer on stdout");
    assert!(idle.stderr.contains("nothing is due"), "{}", idle.stderr);
    // The worker cannot be unset: it is the default role and the one new roles copy.
    let unset = t.run(&["config", "unset", "roles.worker"]);
    assert_eq!(unset.code, 2, "{}", unset.stderr);
    assert!(unset.stderr.contains("cannot unset `roles.worker`"), "{}", unset.stderr);
    // `diff` into a file is the patch as it is: a CRLF line keeps its CR.
    server.push_turns([Turn::bash("c1", "printf 'crlf\\r\\n' >> b.txt"), Turn::text("done")]);
    t.run(&["prompt", "--name", "Crlf", "add a line"]).ok();
    let diff = t.run(&["diff", "Crlf"]);
    assert!(diff.ok().contains("+crlf\r\n"), "{:?}", diff.stdout);
}
