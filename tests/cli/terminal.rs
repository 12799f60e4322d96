//! The chat in a real terminal (tmux): its scrollback, a resize, leaving it, coming
//! back — what a person sees scrolling up through their window.

use crate::support::server::{Reply, Turn};
use crate::support::tmux::Tmux;
use crate::support::wait::wait_for;
use crate::support::workspace::{Dialect, TestWorkspace};

/// The user's shell in a `cols` x `rows` window: `lines` lines of its own output, then
/// `offshoot` with `args` on `t`'s workspace, then `shell again` when it has left.
fn shell_then_chat(t: &TestWorkspace, cols: u16, rows: u16, lines: usize, args: &[&str]) -> Tmux {
    let mut c = t.command();
    c.args(args);
    let env: Vec<(String, String)> =
        c.get_envs().filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.to_owned()))).collect();
    let quoted: Vec<String> = std::iter::once(c.get_program())
        .chain(c.get_args())
        .map(|a| format!("'{}'", a.to_str().expect("utf-8").replace('\'', r"'\''")))
        .collect();
    let script = format!("seq -f 'shell line %g' 1 {lines}; {}; echo 'shell again'", quoted.join(" "));
    Tmux::start(&t.root, &env, cols, rows, &script)
}

/// Waits until the screen stays the same for a while: the chat has drawn what it had to.
fn settled(chat: &crate::support::tmux::Tmux) {
    let mut last = chat.screen();
    wait_for("the chat to be at rest", || {
        std::thread::sleep(std::time::Duration::from_millis(150));
        let now = chat.screen();
        std::mem::replace(&mut last, now) == last
    });
}

/// How many times `what` is in `text`.
fn count(text: &str, what: &str) -> usize {
    text.matches(what).count()
}

#[test]
fn a_resize_keeps_the_whole_scrollback_and_draws_only_the_live_area_again() {
    let (server, t) = TestWorkspace::served("term-resize", Dialect::Anthropic);
    server.push(Reply::Turn(Turn::text("the answer, kept above")));
    let chat = shell_then_chat(&t, 100, 20, 40, &[]);
    chat.wait_for_screen("type a goal");
    chat.type_in("/help", true);
    chat.wait_for_screen("this list");
    chat.type_in("say something", true);
    chat.wait_for_screen("the answer, kept above");
    wait_for("the agent to finish", || t.agents().first().is_some_and(|a| a["state"] == "done"));
    let kept = ["shell line 1\n", "shell line 40\n", "this list", "the answer, kept above"];
    let before = chat.history_size();
    let held = chat.everything();
    for line in kept {
        assert_eq!(count(&held, line), 1, "`{line}` before the resize:\n{held}");
    }

    // A resize lands between frames, not in the middle of one: a frame drawn for the old
    // size and written after the terminal took the new one lands in the wrong rows, in
    // any terminal. The test resizes a chat at rest, as a person would: its agent shown
    // done, what was typed drawn.
    chat.wait_for_screen(" · done · ");
    for (cols, rows) in [(70, 20), (120, 30)] {
        settled(&chat);
        chat.resize(cols, rows);
        // The live area is drawn again at the new size: what is typed shows there.
        chat.type_in("zq", false);
        chat.wait_for_screen("zq");
        chat.key("BSpace");
        chat.key("BSpace");
        let held = chat.everything();
        assert!(
            chat.history_size() + 20 >= before,
            "the scrollback was cleared ({before} lines before, {} after):\n{held}",
            chat.history_size()
        );
        for line in kept {
            let n = count(&held, line);
            assert_eq!(
                n,
                1,
                "`{line}` {n} times after a resize to {cols}x{rows}:\n{held}\nthe screen:\n{}",
                chat.screen()
            );
        }
    }

    // Leaving puts the shell's prompt at the start of a line of its own.
    chat.key("C-d");
    wait_for("the chat to leave", || chat.screen().contains("shell again"));
    let screen = chat.screen();
    assert!(screen.lines().any(|l| l == "shell again"), "the shell's next line is indented:\n{screen}");
}

#[test]
fn a_first_call_that_fails_shows_each_attempt_removes_the_agent_and_gives_the_goal_back() {
    use crate::support::server::error_body;
    let (server, t) = TestWorkspace::served("term-first-fails", Dialect::Anthropic);
    t.set("retry.max_attempts", "2");
    for _ in 0..2 {
        let body = error_body("anthropic", "api_error", "the provider is down");
        server.push(Reply::Status { code: 500, retry_after: None, body });
    }
    let chat = shell_then_chat(&t, 120, 30, 0, &[]);
    chat.wait_for_screen("type a goal");
    chat.type_in("write the report", true);
    chat.wait_for_screen("the new agent was removed again");
    let screen = chat.screen();
    assert!(screen.contains("· attempt 1 failed:") && screen.contains("the provider is down"), "{screen}");
    assert!(screen.contains("· attempt 2 failed:"), "{screen}");
    assert!(t.agents().is_empty(), "as `prompt` does, nothing of it is kept");
    // The goal is back in the input: Enter sends it again, and now it is answered.
    server.push(Reply::Turn(Turn::text("here is the report")));
    chat.type_in("", true);
    chat.wait_for_screen("here is the report");
    assert_eq!(t.agents().len(), 1);
    chat.key("C-d");
    wait_for("the chat to leave", || chat.screen().contains("shell again"));
}

#[test]
fn in_a_project_the_chat_says_what_stays_behind_and_takes_it_along_when_asked() {
    let (server, t, _repo) = crate::project::project("term-project");
    server.endless_text("noted");
    let chat = shell_then_chat(&t, 140, 30, 0, &[]);
    chat.wait_for_screen("type a goal");
    chat.type_in("look at a", true);
    chat.wait_for_screen("your uncommitted changes are not included (a.txt); `/with-changes` takes them along");
    chat.wait_for_screen("noted");
    let first = t.only_agent();
    assert!(!t.run(&["diff", &first]).ok().contains("mine, not committed"));
    chat.type_in("/with-changes", true);
    chat.wait_for_screen("takes your uncommitted changes along");
    chat.type_in("/new", true);
    chat.type_in("look again", true);
    chat.wait_for_screen("with your uncommitted changes: a.txt");
    wait_for("the second agent", || t.agents().len() == 2);
    chat.key("C-d");
    wait_for("the chat to leave", || chat.screen().contains("shell again"));
}

#[test]
fn continuing_shows_the_conversation_so_far() {
    let (server, t) = TestWorkspace::served("term-continue", Dialect::Anthropic);
    server.push(Reply::Turn(Turn::text("the earlier answer")));
    t.run(&["prompt", "the earlier question"]).ok();
    let chat = shell_then_chat(&t, 120, 30, 0, &["-c"]);
    chat.wait_for_screen("chatting with");
    let screen = chat.screen();
    assert!(screen.contains("you: the earlier question"), "{screen}");
    assert!(screen.contains("│ the earlier answer"), "{screen}");
    chat.key("C-d");
    wait_for("the chat to leave", || chat.screen().contains("shell again"));
}

#[test]
fn ctrl_c_mid_answer_shows_the_cut_answer_first_and_says_stopped_once() {
    let (server, t) = TestWorkspace::served("term-stop", Dialect::Anthropic);
    let slow = Turn::text("the first words of an answer that goes on and on for a long while yet");
    server.push(Reply::Paced(slow, std::time::Duration::from_millis(300)));
    let chat = shell_then_chat(&t, 120, 30, 0, &[]);
    chat.wait_for_screen("type a goal");
    chat.type_in("talk slowly", true);
    chat.wait_for_screen("│ the first");
    chat.key("C-c");
    chat.wait_for_screen("a message continues");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let screen = chat.screen();
    let at = |what: &str| screen.find(what).unwrap_or_else(|| panic!("`{what}` not shown:\n{screen}"));
    assert!(at("(cut off: not kept)") < at("· stopping `"), "the cut answer comes before the stop:\n{screen}");
    assert!(!screen.lines().any(|l| l.trim() == "· stopped"), "said stopped twice:\n{screen}");
    chat.key("C-d");
    wait_for("the chat to leave", || chat.screen().contains("shell again"));
}

#[test]
fn an_ask_rule_in_the_chat_shows_the_question_and_y_runs_the_command() {
    let (server, t) = TestWorkspace::served("term-ask", Dialect::Anthropic);
    t.set("permissions.ask", r#"["Bash(touch:*)"]"#);
    server.push_turns([Turn::bash("c1", "touch approved.txt"), Turn::text("made it after the yes")]);
    let chat = shell_then_chat(&t, 110, 24, 3, &[]);
    chat.wait_for_screen("type a goal");
    chat.type_in("make the file", true);
    chat.wait_for_screen("y: yes · n: no · a: always");
    let screen = chat.screen();
    assert!(screen.contains("asks to run bash \"touch approved.txt\""), "{screen}");
    assert!(screen.contains("because \"the rule `Bash(touch:*)` (permissions.ask)\""), "{screen}");
    let id = t.only_agent();
    assert!(!t.ws.join("agents").join(&id).join("approved.txt").exists(), "it ran before the yes");
    chat.type_in("y", false);
    chat.wait_for_screen("made it after the yes");
    assert!(chat.everything().contains("user said yes to"), "{}", chat.everything());
    assert!(t.ws.join("agents").join(&id).join("approved.txt").exists());
    assert!(server.result_text(1).contains("[this call ran on a yes from user (question"), "{}", server.result_text(1));
}
