//! Watching an agent live, whoever drives it: `log --follow`.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::pty::Pty;
use crate::support::server::{Reply, Turn};
use crate::support::wait::wait_for;
use crate::support::workspace::{Dialect, TestWorkspace};

/// `offshoot` with `args` in a pseudo-terminal of 120x40 in `t`'s workspace.
fn chat_in(t: &TestWorkspace, args: &[&str]) -> Pty {
    chat_sized(t, args, 120, 40)
}

/// Ctrl-D on an empty line: the chat leaves, with 0.
#[track_caller]
fn leaves_with_ctrl_d(mut chat: Pty) {
    chat.type_in("\x04");
    assert!(chat.child.wait().expect("wait").success(), "{}", chat.text());
}

fn chat_sized(t: &TestWorkspace, args: &[&str], cols: u16, rows: u16) -> Pty {
    let mut command = t.command();
    command.env("TERM", "xterm-256color").args(args);
    Pty::spawn(command, cols, rows)
}

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

#[test]
fn the_chat_streams_steps_keeps_one_agent_stops_on_ctrl_c_and_leaves_on_ctrl_d() {
    let (server, t) = TestWorkspace::served("live-chat", Dialect::Anthropic);
    // (The answer carries a sequence that would retitle the terminal: shown, not obeyed.)
    server.push_turns([Turn::bash("s1", "echo step-one"), Turn::text("the first answer\x1b]0;pwned\x07")]);
    let mut chat = chat_in(&t, &[]);
    chat.wait_for("type a goal");
    chat.type_in("do the thing\r");
    chat.wait_for("→ bash echo step-one");
    chat.wait_for("the first answer");
    let raw = chat.raw();
    assert!(!raw.windows(8).any(|w| w == b"\x1b]0;pwned"), "a model's escape sequence reached the terminal");
    chat.wait_for("the first answer\\x1b]0;pwned\\x07");
    // The next message goes to the same agent.
    server.push_turns([Turn::text("the second answer")]);
    chat.type_in("and again\r");
    chat.wait_for("the second answer");
    assert_eq!(t.agents().len(), 1);
    let id = t.only_agent();
    assert!(server.requests().last().expect("a request").body.to_string().contains("and again"));
    // Ctrl-C while it works stops it (as `stop`); the chat stays.
    server.push_turns([Turn::bash("slow", "sleep 30"), Turn::text("never")]);
    chat.type_in("take your time\r");
    chat.wait_for("→ bash sleep 30");
    chat.type_in("\x03");
    chat.wait_for("· stopped;");
    assert_eq!(t.agents()[0]["state"], "stopped");
    let asked = server.requests().len();
    // Ctrl-D leaves with 0; nothing of it is left running.
    chat.type_in("\x04");
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = chat.child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < until, "the chat did not leave: {}", chat.text());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}: {}", chat.text());
    assert_eq!(server.requests().len(), asked, "a request after the stop");
    assert_eq!(t.running_driver(&id), None);
}

#[test]
fn a_terminal_without_rows_is_refused_not_spun_on() {
    let t = TestWorkspace::new("live-chat-tiny");
    let mut chat = chat_sized(&t, &["chat"], 0, 0);
    chat.wait_for("the chat needs a terminal of at least 20 columns and 6 rows; this one says 0x0");
    let status = chat.child.wait().expect("wait");
    assert_eq!(status.code(), Some(2));
}

#[test]
fn continue_chats_with_the_latest_agent_and_text_typed_during_a_step_arrives_once_at_the_next() {
    let (server, t) = TestWorkspace::served("live-chat-continue", Dialect::Anthropic);
    server.push_turns([Turn::text("made")]);
    t.run(&["prompt", "--name", "Earlier", "be there"]).ok();
    let id = t.id_of("Earlier");
    let mut chat = chat_in(&t, &["-c"]);
    chat.wait_for(&format!("chatting with `{id}`"));
    server.push_turns([Turn::bash("slow", "sleep 1; echo slept"), Turn::text("after the steer")]);
    chat.type_in("work slowly\r");
    chat.wait_for("→ bash sleep 1");
    // Typed while the step runs: queued, delivered at the next step boundary, once.
    chat.type_in("steer left\r");
    chat.wait_for("queued");
    chat.wait_for("after the steer");
    let requests = server.requests();
    let carrying: Vec<usize> =
        (0..requests.len()).filter(|&i| requests[i].body.to_string().contains("steer left")).collect();
    assert_eq!(carrying, [requests.len() - 1], "only the request after the running step carries it");
    let log = t.run(&["log", "--json", &id]).ok().to_owned();
    assert_eq!(log.lines().filter(|l| l.contains("\"side\":\"user\"") && l.contains("steer left")).count(), 1);
    leaves_with_ctrl_d(chat);
}

#[test]
fn slash_commands_list_the_tree_switch_agents_and_start_anew() {
    let (server, t) = TestWorkspace::served("live-chat-slash", Dialect::Anthropic);
    let mut chat = chat_in(&t, &[]);
    chat.wait_for("type a goal");
    chat.type_in("/he\t\r");
    chat.wait_for("/attach <agent>");
    server.push_turns([Turn::text("one is here")]);
    chat.type_in("the first\r");
    chat.wait_for("one is here");
    let first = t.only_agent();
    chat.type_in("/tree\r");
    chat.wait_for_screen("── agents: 1 · 0 working");
    chat.wait_for_screen(&format!("> {first} "));
    chat.wait_for_screen("(here)  done");
    chat.type_in("\x1b");
    chat.type_in("/cost\r");
    chat.wait_for("· 1 agent, 110 tok, $");
    // A new agent, then back to the first: what is typed goes where the chat is.
    chat.type_in("/new\r");
    chat.wait_for("your next message starts a new agent");
    server.push_turns([Turn::text("two is here")]);
    chat.type_in("the second\r");
    chat.wait_for("two is here");
    assert_eq!(t.agents().len(), 2);
    chat.type_in(&format!("/attach {first}\r"));
    chat.wait_for(&format!("chatting with `{first}`"));
    server.push_turns([Turn::text("one again")]);
    chat.type_in("back to you\r");
    chat.wait_for("one again");
    assert!(t.run(&["log", &first]).ok().contains("back to you"));
    // `/model` says what it used; with a name, the next message chooses that one.
    chat.type_in("/model\r");
    chat.wait_for("its last step used `");
    chat.type_in("/model no good\r");
    chat.wait_for("`no good` is not a model name");
    chat.type_in("/model claude-picked-2\r");
    chat.wait_for("your next message chooses `claude-picked-2`");
    server.push_turns([Turn::text("on the new model")]);
    chat.type_in("switch\r");
    chat.wait_for("on the new model");
    assert_eq!(server.requests().last().expect("asked").body["model"], "claude-picked-2");
    chat.type_in("/nonsense\r");
    chat.wait_for("no command `/nonsense`");
    chat.type_in("/quit\r");
    assert!(chat.child.wait().expect("wait").success());
}

#[test]
fn a_chat_ended_by_a_signal_stops_what_works_before_it_goes() {
    let (server, t) = TestWorkspace::served("live-chat-signal", Dialect::Anthropic);
    let mut chat = chat_in(&t, &[]);
    chat.wait_for("type a goal");
    server.push_turns([Turn::bash("slow", "sleep 30"), Turn::text("never")]);
    chat.type_in("take your time\r");
    chat.wait_for("→ bash sleep 30");
    let id = t.only_agent();
    // The terminal's window closes.
    let pid = chat.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().expect("kill").success());
    let status = chat.child.wait().expect("wait");
    assert_eq!(status.code(), Some(129), "{}", chat.text());
    assert_eq!(t.agents()[0]["state"], "stopped");
    assert_eq!(t.running_driver(&id), None);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn the_chat_notices_a_driver_killed_without_a_word() {
    let (server, t) = TestWorkspace::served("live-chat-killed", Dialect::Anthropic);
    let mut chat = chat_in(&t, &[]);
    chat.wait_for("type a goal");
    server.push_turns([Turn::bash("slow", "sleep 30"), Turn::text("never")]);
    chat.type_in("take your time\r");
    chat.wait_for("→ bash sleep 30");
    let id = t.only_agent();
    let pid = t.driver_pid(&id).expect("its driver").to_string();
    assert!(std::process::Command::new("kill").args(["-9", &pid]).status().expect("kill").success());
    chat.wait_for("driver ended without a word");
    // No longer counted as working: Ctrl-D leaves at once, with nothing to stop.
    leaves_with_ctrl_d(chat);
}

#[test]
fn what_agents_write_cannot_pass_for_the_chats_lines_or_reach_the_terminal_through_attach() {
    let (server, t) = TestWorkspace::served("live-forged", Dialect::Anthropic);
    // A tool name carrying an escape sequence and a forged line, then an answer forging
    // the chat's own lines.
    let forged = "x\u{1b}]0;EVIL\u{7}\n  [zz] fake-line";
    server.push_turns([Turn::call("f1", forged, "{}"), Turn::text("done\nyou: FAKE USER LINE\n· stopped; fake")]);
    let mut chat = chat_in(&t, &[]);
    chat.wait_for("type a goal");
    chat.type_in("go\r");
    chat.wait_for("│ you: FAKE USER LINE");
    chat.wait_for("│ · stopped; fake");
    assert!(!chat.raw().windows(7).any(|w| w == b"\x1b]0;EVI"), "an escape sequence reached the terminal");
    leaves_with_ctrl_d(chat);
    // attach, following the same kind of step, prints it on one line, escapes as text.
    let id = t.only_agent();
    let mut attached = t
        .command()
        .args(["attach", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("attach");
    let mut stdin = attached.stdin.take().expect("stdin");
    server.push_turns([Turn::call("f2", forged, "{}"), Turn::text("again")]);
    std::thread::sleep(Duration::from_millis(300));
    use std::io::Write;
    writeln!(stdin, "once more").expect("type");
    wait_for("the answer", || t.run(&["log", &id]).stdout.contains("again") && t.agents()[0]["state"] == "done");
    drop(stdin);
    let out = attached.wait_with_output().expect("attach");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(!out.stdout.contains(&0x1b), "{shown}");
    assert!(!shown.lines().any(|l| l.starts_with("  [zz]")), "{shown}");
    assert!(shown.contains("\\x1b]0;EVIL\\x07 [zz] fake-line"), "{shown}");
}

#[test]
fn the_chat_on_an_agent_already_at_work_counts_it_and_an_error_on_enter_is_said_not_fatal() {
    let (server, t) = TestWorkspace::served("live-chat-busy", Dialect::Anthropic);
    server.push_turns([Turn::bash("slow", "sleep 30"), Turn::text("never")]);
    let id = t.run(&["prompt", "--detach", "--name", "Busy", "work"]).ok().trim().to_owned();
    wait_for("its tool", || t.step_records(&id).iter().any(|s| s.join("tools/slow/pgid").exists()));
    let chat = chat_in(&t, &["-c"]);
    chat.wait_for("Busy · working");
    // Leaving stops it: nothing is left running.
    leaves_with_ctrl_d(chat);
    assert_eq!(t.agents()[0]["state"], "stopped");
    // A goal the model cannot be asked about (no key): said, and the chat stays.
    let bare = TestWorkspace::new("live-chat-nokey");
    let mut chat = chat_in(&bare, &[]);
    chat.wait_for("type a goal");
    chat.type_in("a goal\r");
    chat.wait_for("ANTHROPIC_API_KEY");
    chat.type_in("/quit\r");
    assert!(chat.child.wait().expect("wait").success());
}

#[test]
fn a_paste_is_one_edit_its_line_breaks_kept_enter_sends_it_once_and_keys_edit_at_the_cursor() {
    let (server, t) = TestWorkspace::served("live-chat-paste", Dialect::Anthropic);
    server.push_turns([Turn::text("got it all")]);
    let mut chat = chat_in(&t, &[]);
    chat.wait_for("type a goal");
    // As a terminal sends a paste once the chat asked for bracketed paste.
    let long = "x".repeat(3000);
    chat.type_in(&format!("\x1b[200~first line\rsecond line\r{long}\x1b[201~"));
    chat.type_in("\r");
    chat.wait_for("got it all");
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "one message, one request");
    let body = requests[0].body.to_string();
    assert!(body.contains("first line\\nsecond line\\nxxx"), "{}", &body[..body.len().min(400)]);
    assert!(body.contains(&long));
    // Typing happens where the cursor is: Left, then a letter goes in before the last one.
    server.push_turns([Turn::text("edited")]);
    chat.type_in("ab\x1b[Dc\x1b[C!\r");
    chat.wait_for("edited");
    assert!(server.requests()[1].body.to_string().contains("acb!"));
    leaves_with_ctrl_d(chat);
}

#[test]
fn the_answer_streams_as_it_is_written_and_a_resize_draws_only_the_live_area_again() {
    let (server, t) = TestWorkspace::served("live-chat-stream", Dialect::Anthropic);
    // Seven characters an event, an event every 150 ms: the whole takes over two seconds.
    let answer = "the first line of it\nand a second line that takes a while to arrive";
    server.push(Reply::Paced(Turn::text(answer), Duration::from_millis(150)));
    let mut chat = chat_in(&t, &[]);
    chat.wait_for("type a goal");
    chat.type_in("say it slowly\r");
    chat.wait_for("│ the first line of it");
    let late = Instant::now().saturating_duration_since(server.requests()[0].at);
    assert!(late < Duration::from_millis(1500), "the first line came {late:?} after the request: not streamed");
    chat.wait_for("│ and a second line that takes a while to arrive");
    wait_for("the agent to finish", || t.agents()[0]["state"] == "done");
    // The window is made narrower: the live area is drawn again, and nothing of the
    // screen or the scrollback is cleared (tests/cli/terminal.rs checks a real one).
    let before = chat.raw().len();
    chat.resize(60, 30);
    chat.type_in("zq");
    chat.wait_for_screen("zq");
    let after = chat.raw()[before..].to_vec();
    for clear in [&b"\x1b[2J"[..], b"\x1b[3J"] {
        assert!(!after.windows(clear.len()).any(|w| w == clear), "a resize cleared the terminal");
    }
    assert!(chat.screen().contains("and a second line that takes a while to arrive"), "{}", chat.screen());
    chat.type_in("\x7f\x7f");
    leaves_with_ctrl_d(chat);
}

#[test]
fn the_tree_pane_shows_three_children_live_and_attaching_to_one_talks_to_it() {
    let (server, t) = TestWorkspace::served("live-chat-tree", Dialect::Anthropic);
    let three = Turn {
        calls: (1..=3)
            .map(|i| {
                let input =
                    serde_json::json!({"role": "worker", "goal": format!("task {i}"), "name": format!("Kid{i}")});
                (format!("d{i}"), "dispatch".to_owned(), input.to_string())
            })
            .collect(),
        ..Turn::default()
    };
    server.push_turns([three, Turn::text("waiting for my children")]);
    // (The root's answers to its children's results.)
    server.endless_text("noted");
    server.push_for("Kid1", [Turn::text("one done")]);
    server.push_for(
        "Kid2",
        [
            Turn::bash("b1", "sleep 3; echo b-first"),
            Turn::bash("b2", "echo b-second"),
            Turn::text("two done"),
            Turn::text("B read your note"),
        ],
    );
    server.push_for("Kid3", [Turn::bash("c1", "sleep 30"), Turn::text("never")]);
    let mut chat = chat_in(&t, &[]);
    chat.wait_for("type a goal");
    chat.type_in("lead a team\r");
    chat.wait_for("Kid3 started");
    // Ctrl-T shows the pane: every agent, its state and what it does, live.
    chat.type_in("\x14");
    chat.wait_for("── agents: 4 ·");
    chat.wait_for_screen("Kid3  working  → bash sleep 30");
    chat.wait_for_screen("Kid1  done");
    // Down from the root to Kid2's row (children by number), Enter: the chat is
    // attached to Kid2.
    let kid2 = t.id_of("Kid2");
    let number = |id: String| id.rsplit('.').next().and_then(|n| n.parse::<usize>().ok()).expect("a child's id");
    let row = ["Kid1", "Kid2", "Kid3"].iter().filter(|k| number(t.id_of(k)) <= number(kid2.clone())).count();
    for _ in 0..row {
        chat.type_in("\x1b[B");
    }
    chat.wait_for_screen(&format!(">   {kid2} Kid2"));
    chat.type_in("\r");
    chat.wait_for(&format!("chatting with `{kid2}`"));
    assert_eq!(server.requests_for("Kid2").len(), 1, "attached while its first step runs");
    // Its steps show as they happen, and what is typed goes to it.
    chat.wait_for("→ bash echo b-second");
    chat.wait_for("│ two done");
    chat.type_in("a note for you\r");
    chat.wait_for("│ B read your note");
    let asked = server.requests_for("Kid2");
    assert!(asked.last().expect("asked").body.to_string().contains("a note for you"));
    assert!(!server.requests_for("Kid3").iter().any(|r| r.body.to_string().contains("a note for you")));
    // Leaving stops what works (Kid3): nothing is left behind.
    leaves_with_ctrl_d(chat);
    for agent in t.agents() {
        let id = agent["id"].as_str().expect("id").to_owned();
        assert_eq!(t.running_driver(&id), None, "{id}: {:?}", t.agents());
        assert_ne!(agent["state"], "running", "{id}");
    }
}

#[test]
fn a_stream_cut_by_a_stop_is_marked_and_the_next_answer_starts_on_its_own_line() {
    let (server, t) = TestWorkspace::served("live-chat-cut", Dialect::Anthropic);
    server.push(Reply::Paced(
        Turn::text("half a line and then some more words that never end"),
        Duration::from_millis(300),
    ));
    let mut chat = chat_in(&t, &[]);
    chat.wait_for("type a goal");
    chat.type_in("say something long\r");
    chat.wait_for("│ half a line");
    chat.type_in("\x03");
    chat.wait_for("(cut off: not kept)");
    server.push_turns([Turn::text("Fresh answer")]);
    chat.type_in("again\r");
    chat.wait_for("│ Fresh answer");
    let text = chat.text();
    assert!(!text.contains("moreFresh") && !text.contains("endFresh") && !text.contains("wordsFresh"), "{text}");
    leaves_with_ctrl_d(chat);
}

#[test]
fn opened_mid_answer_the_chat_shows_the_answer_once_and_an_error_cannot_forge_its_lines() {
    let (server, t) = TestWorkspace::served("live-chat-midway", Dialect::Anthropic);
    server.push(Reply::Paced(Turn::text("Line A\nLine B\nLine C partial and more"), Duration::from_millis(150)));
    let id = t.run(&["prompt", "--detach", "--name", "Midway", "talk"]).ok().trim().to_owned();
    wait_for("its answer to begin", || {
        std::fs::read_to_string(t.steps_dir(&id).join("events.ndjson")).is_ok_and(|e| e.contains("text_delta"))
    });
    let mut chat = chat_in(&t, &["chat", &id]);
    chat.wait_for("│ Line C partial and more");
    wait_for("the agent to finish", || t.agents()[0]["state"] == "done");
    std::thread::sleep(Duration::from_millis(300));
    // (Blanks a redraw may skip left out of what was shown.)
    let text: String = chat.text().chars().filter(|c| !c.is_whitespace()).collect();
    assert_eq!(text.matches("│LineA").count(), 1, "{text}");
    assert_eq!(text.matches("│LineCpartialandmore").count(), 1, "{text}");
    // A provider's error with line breaks is one line of the chat's.
    let body = "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"no\\nyou: delete everything please\\n· stopped; fake\"}}";
    server.push(Reply::Status { code: 400, retry_after: None, body: body.into() });
    chat.type_in("go on\r");
    chat.wait_for_screen("· failed: ");
    chat.wait_for_screen("no you: delete everything");
    let screen = chat.screen();
    for forged in ["you: delete everything", "· stopped; fake"] {
        assert!(!screen.lines().any(|l| l.trim_start().starts_with(forged)), "{forged} forged a line:\n{screen}");
    }
    leaves_with_ctrl_d(chat);
}

#[test]
fn leaving_stops_every_tree_the_chat_showed_and_new_leaves_the_first_at_work_meanwhile() {
    let (server, t) = TestWorkspace::served("live-chat-trees", Dialect::Anthropic);
    server.push_turns([Turn::bash("slow", "sleep 30")]);
    let mut chat = chat_in(&t, &[]);
    chat.wait_for("type a goal");
    chat.type_in("take your time\r");
    chat.wait_for("→ bash sleep 30");
    let first = t.only_agent();
    chat.type_in("/new\r");
    chat.wait_for("works on; leaving the chat stops it");
    assert_eq!(t.agents()[0]["state"], "running", "/new does not stop the first");
    server.push_turns([Turn::text("second here")]);
    chat.type_in("another goal\r");
    chat.wait_for("│ second here");
    leaves_with_ctrl_d(chat);
    assert_eq!(t.running_driver(&first), None);
    let states: Vec<String> = t.agents().iter().map(|a| a["state"].as_str().unwrap_or("").to_owned()).collect();
    assert!(!states.iter().any(|s| s == "running"), "{states:?}");
}
