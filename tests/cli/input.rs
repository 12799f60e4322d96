//! Messages from standard input, text that is not UTF-8, and control characters shown
//! escaped.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::support::server::Turn;
use crate::support::workspace::{Dialect, TestWorkspace};

#[test]
fn a_goal_of_megabytes_comes_from_stdin_and_reaches_the_model_whole() {
    let (server, t) = TestWorkspace::served("input-stdin", Dialect::Anthropic);
    // Room in the window for it (the guard would rightly refuse it otherwise).
    t.run(&["config", "set", "roles.worker.context_window", "100000000"]).ok();
    server.push_turns([Turn::text("read it all"), Turn::text("and the second")]);
    let goal: String =
        (0..5 * 1024 * 1024 / 64).map(|i| format!("line {i:08} of a long goal, all of it kept....\n")).collect();
    let run = t.run_with_input(&["prompt", "--name", "Big", "-"], goal.as_bytes());
    assert!(run.ok().contains("read it all"), "{}", run.stderr);
    let sent = &server.requests()[0].body;
    let first = sent["messages"][0]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        first.trim_end().ends_with(goal.trim_end()),
        "{} bytes: {:?}",
        first.len(),
        &first[first.len().saturating_sub(80)..]
    );
    // `send -` too.
    let run = t.run_with_input(&["send", "Big", "-"], b"more from a pipe\n");
    assert!(run.ok().contains("and the second"), "{}", run.stderr);
    assert!(server.requests()[1].raw.windows(16).any(|w| w == b"more from a pipe"));
}

#[test]
fn text_that_is_not_utf8_is_refused_saying_so() {
    let (_server, t) = TestWorkspace::served("input-bytes", Dialect::Anthropic);
    let bad = OsStr::from_bytes(b"caf\xe9");
    let out = t.command().arg("prompt").arg(bad).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("error: the goal is not UTF-8 text"), "{stderr}");
    let run = t.run_with_input(&["prompt", "-"], b"caf\xe9 au lait");
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("the goal read from standard input is not UTF-8 text (the bytes at offset 3"),
        "{}",
        run.stderr
    );
    assert!(t.agents().is_empty(), "nothing was created");
}

#[test]
fn control_characters_in_a_goal_are_shown_escaped() {
    let (server, t) = TestWorkspace::served("input-ansi", Dialect::Anthropic);
    server.push_turns([Turn::text("fine")]);
    t.run(&["prompt", "--name", "Loud", "\u{1b}[31mred\u{1b}[0m and a bell\u{7}"]).ok();
    for args in [&["ls"][..], &["log", "Loud"][..]] {
        let run = t.run(args);
        assert!(!run.stdout.contains('\u{1b}') && !run.stdout.contains('\u{7}'), "{args:?}: {:?}", run.stdout);
        assert!(run.stdout.contains("\\x1b[31mred\\x1b[0m and a bell\\x07"), "{args:?}: {}", run.stdout);
    }
    // JSON keeps the text as it is (escaped the JSON way).
    assert_eq!(t.agents()[0]["goal"], "\u{1b}[31mred\u{1b}[0m and a bell\u{7}");
}
