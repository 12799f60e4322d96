//! The built-in tools through a scripted conversation over real HTTP, and through
//! `offshoot tool`.

use std::io::Write;
use std::process::Stdio;

use serde_json::json;

use crate::support::server::{Server, Turn};
use crate::support::workspace::{Dialect, TestWorkspace};

#[test]
fn write_edit_and_patch_through_a_conversation() {
    let (server, t) = TestWorkspace::served("tools-files", Dialect::Anthropic);
    let patch = "*** Begin Patch\n*** Update File: notes.md\n@@\n # Notes\n-draft\n+final\n*** Add File: todo.md\n+- ship\n*** End Patch";
    let bad_patch =
        "*** Begin Patch\n*** Update File: notes.md\n-nothing like this\n+x\n*** Delete File: todo.md\n*** End Patch";
    server.push_turns([
        Turn::tool("c1", "write_file", json!({"path": "notes.md", "content": "# Notes\ndraft\ndraft\n"})),
        Turn::tool("c2", "edit_file", json!({"path": "notes.md", "old_string": "draft", "new_string": "x"})),
        Turn::tool("c3", "edit_file", json!({"path": "notes.md", "old_string": "draft\ndraft", "new_string": "draft"})),
        Turn::tool("c4", "apply_patch", json!({"patch": patch})),
        Turn::tool("c5", "apply_patch", json!({"patch": bad_patch})),
        Turn::text("files done"),
    ]);
    let run = t.run(&["prompt", "--name", "Files", "edit some files"]);
    assert!(run.ok().contains("files done"));
    assert_eq!(server.result_text(1), "created `notes.md` (20 bytes, 3 lines)");
    assert!(
        server.result_text(2).contains("occurs 2 times in `notes.md` (at lines 2, 3)"),
        "{}",
        server.result_text(2)
    );
    assert_eq!(server.result_text(3), "replaced 1 occurrence in `notes.md` (at line 2)");
    assert_eq!(server.result_text(4), "applied: M notes.md, A todo.md");
    assert!(server.result_text(5).starts_with("patch not applied, no file changed: hunk 1 of `notes.md`"));
    // Each change is in the agent's branch; the refused patch deleted nothing.
    let id = t.only_agent();
    assert_eq!(t.git(&["show", &format!("agents/{id}:notes.md")]), "# Notes\nfinal\n");
    assert_eq!(t.git(&["show", &format!("agents/{id}:todo.md")]), "- ship\n");
}

#[test]
fn offshoot_tool_runs_a_builtin_on_stdin_json() {
    let t = TestWorkspace::new("tool-verb");
    let dir = t.root.join("play");
    std::fs::create_dir_all(&dir).expect("dir");
    let run = |name: &str, input: &str| {
        let mut child = t
            .command()
            .args(["tool", name])
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        // A refused call may exit before reading its input; a broken pipe is fine then.
        let _ = child.stdin.take().expect("stdin").write_all(input.as_bytes());
        let out = child.wait_with_output().expect("wait");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, _) = run("write_file", r#"{"path": "x.txt", "content": "a\nb\n"}"#);
    assert_eq!((code, stdout.as_str()), (Some(0), "created `x.txt` (4 bytes, 2 lines)\n"));
    let (code, stdout, _) = run("read_file", r#"{"path": "x.txt"}"#);
    assert_eq!(code, Some(0));
    assert_eq!(stdout, "`x.txt`: lines 1-2 of 2\n<content>\n     1\ta\n     2\tb\n</content>\n");
    let (code, _, stderr) = run("edit_file", r#"{"path": "x.txt", "old_string": "zzz", "new_string": "y"}"#);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("`old_string` was not found in `x.txt`"), "{stderr}");
    let (code, _, stderr) = run("teleport", "{}");
    assert_eq!(code, Some(2));
    assert!(stderr.contains("tool `teleport` does not exist") && stderr.contains("hint: tools: bash"), "{stderr}");
    let (code, _, stderr) = run("bash", "not json");
    assert_eq!(code, Some(2));
    assert!(stderr.contains("the input on stdin is not JSON"), "{stderr}");
    let list = t.run(&["tool", "--list"]);
    for name in ["bash", "read_file", "write_file", "edit_file", "apply_patch"] {
        assert!(list.ok().contains(&format!("{name}\n")), "{name} missing from --list");
    }
}

#[test]
fn a_tool_outside_the_grant_runs_nothing_but_stays_declared() {
    let (server, t) = TestWorkspace::served("tools-grant", Dialect::Chat);
    t.set("roles.worker.tools", "[\"read_file\"]");
    server.push_turns([Turn::bash("c1", "touch MARKER"), Turn::text("ok")]);
    t.run(&["prompt", "try bash"]).ok();
    assert_eq!(
        result_text_chat(&server, 1),
        "tool `bash` is not available to you; nothing ran. Allowed tools: read_file"
    );
    let id = t.only_agent();
    assert!(!t.ws.join("agents").join(&id).join("MARKER").exists());
    // The history names bash, so the next request declares it (providers require it).
    let names: Vec<String> = server.requests()[1].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(names, vec!["read_file", "bash"]);
}

fn result_text_chat(server: &Server, n: usize) -> String {
    let body = &server.requests()[n].body;
    let tool = body["messages"].as_array().expect("messages").iter().rev().find(|m| m["role"] == "tool").cloned();
    tool.map(|m| m["content"].as_str().unwrap_or_default().to_owned()).unwrap_or_default()
}

#[test]
fn ten_megabytes_of_output_are_bounded_in_memory_and_the_transcript_and_whole_in_the_record() {
    let (server, t) = TestWorkspace::served("tools-bounded", Dialect::Anthropic);
    server.push_turns([
        Turn::bash("big", "head -c 10000000 /dev/zero | tr '\\0' a; echo; echo tail-marker"),
        Turn::text("ok"),
    ]);
    t.run(&["prompt", "print a lot"]).ok();
    let seen = server.result_text(1);
    assert!(seen.len() < 5000, "the model saw {} bytes", seen.len());
    assert!(seen.starts_with("exit code 0\n<stdout>\naaaa"), "{}", &seen[..100]);
    assert!(seen.contains("bytes left out (0 line breaks) of 10000013 bytes in 2 lines"), "{seen}");
    let id = t.only_agent();
    assert!(seen.contains(&format!("the full output is in steps/{id}/0001/tools/big/stdout")), "{seen}");
    assert!(seen.ends_with("\ntail-marker\n</stdout>"), "{seen}");
    // The whole stream is in the record; output.json keeps only what was shown.
    let record = t.steps_dir(&id).join("0001/tools/big");
    let stdout = std::fs::read(record.join("stdout")).expect("record");
    assert_eq!(stdout.len(), 10_000_013);
    assert!(stdout.ends_with(b"a\ntail-marker\n"));
    let output = std::fs::metadata(record.join("output.json")).expect("output.json").len();
    assert!(output < 10_000, "output.json is {output} bytes");
    // The committed transcript entry is the bounded one.
    let entry = t.git(&["show", &format!("agents/{id}:.offshoot/messages/0003-tool.json")]);
    assert!(entry.len() < 6000, "{} bytes committed", entry.len());
}

#[test]
fn cd_moves_later_tools_and_is_refused_for_missing_directories() {
    let (server, t) = TestWorkspace::served("tools-cd", Dialect::Anthropic);
    server.push_turns([
        Turn::tool("c1", "bash", json!({"command": "mkdir -p sub/deeper"})),
        Turn::tool("c2", "cd", json!({"path": "nowhere"})),
        Turn::tool("c3", "cd", json!({"path": "sub"})),
        Turn::tool("c4", "bash", json!({"command": "pwd; echo here > made.txt"})),
        Turn::tool("c5", "write_file", json!({"path": "deeper/w.txt", "content": "w"})),
        Turn::text("moved"),
    ]);
    t.run(&["prompt", "--name", "Mover", "move around"]).ok();
    assert!(server.result_text(2).starts_with("cannot change to `nowhere`"), "{}", server.result_text(2));
    let id = t.only_agent();
    assert!(server.result_text(4).contains(&format!("agents/{id}/sub\n")), "{}", server.result_text(4));
    assert_eq!(t.git(&["show", &format!("agents/{id}:sub/made.txt")]), "here\n");
    assert_eq!(t.git(&["show", &format!("agents/{id}:sub/deeper/w.txt")]), "w");
    // The mark is plain git: a ref holding the directory, relative to the worktree.
    assert_eq!(t.git(&["cat-file", "-p", &format!("refs/offshoot/cwd/{id}")]), "sub");
    // A fork does not inherit it: its tools start at its own worktree's root.
    server.push_turns([Turn::tool("f1", "bash", json!({"command": "pwd"})), Turn::text("forked")]);
    t.run(&["fork", "--from", "Mover", "where am I?"]).ok();
    let fork_pwd = server.result_text(7);
    assert!(!fork_pwd.contains("/sub\n"), "{fork_pwd}");
}

#[test]
fn grep_and_glob_through_a_conversation() {
    let (server, t) = TestWorkspace::served("tools-search", Dialect::Responses);
    server.push_turns([
        Turn::tool("c1", "bash", json!({"command": "mkdir -p src out && echo 'fn find_me() {}' > src/lib.rs && echo find_me > out/x && echo out/ > .gitignore"})),
        Turn::tool("c2", "grep", json!({"pattern": "find_me"})),
        Turn::tool("c3", "glob", json!({"pattern": "*.rs"})),
        Turn::tool("c4", "grep", json!({"pattern": "[unclosed"})),
        Turn::text("searched"),
    ]);
    t.run(&["prompt", "search"]).ok();
    let outputs: Vec<String> = server.requests()[4].body["input"]
        .as_array()
        .expect("input")
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| i["output"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(outputs[1], "1 match in 1 file\n<matches>\nsrc/lib.rs:1:fn find_me() {}\n</matches>");
    assert_eq!(outputs[2], "1 paths match\n<paths>\nsrc/lib.rs\n</paths>");
    assert!(outputs[3].starts_with("`[unclosed` is not a valid regex"), "{}", outputs[3]);
}

#[test]
fn load_skill_copies_from_the_config_and_joins_the_context() {
    let (server, t) = TestWorkspace::served("tools-skill", Dialect::Anthropic);
    server.push_turns([
        Turn::tool("c1", "load_skill", json!({"name": "nonesuch"})),
        Turn::tool("c2", "load_skill", json!({"name": "offshoot"})),
        Turn::text("learned"),
    ]);
    t.run(&["prompt", "learn"]).ok();
    assert_eq!(server.result_text(1), "skill `nonesuch` does not exist; skills: offshoot");
    assert!(server.result_text(2).starts_with("loaded skill `offshoot` into .offshoot/skills/offshoot/ (SKILL.md)"));
    let id = t.only_agent();
    let skill = t.git(&["show", &format!("agents/{id}:.offshoot/skills/offshoot/SKILL.md")]);
    assert!(skill.starts_with("# Working inside offshoot"));
    // The role's context order composes loaded skills at the head of the conversation.
    let first = &server.requests()[2].body["messages"][0]["content"][0]["text"];
    assert!(first.as_str().expect("text").starts_with("<file path=\".offshoot/skills/offshoot/SKILL.md\">"), "{first}");
}

#[test]
fn read_only_calls_of_one_step_run_together_and_commit_in_order() {
    let (server, t) = TestWorkspace::served("tools-parallel", Dialect::Anthropic);
    let turn = Turn {
        calls: vec![
            ("p1".into(), "glob".into(), json!({"pattern": "*.md"}).to_string()),
            ("p2".into(), "grep".into(), json!({"pattern": "zebra"}).to_string()),
            ("p3".into(), "read_file".into(), json!({"path": "zoo.md"}).to_string()),
        ],
        ..Turn::default()
    };
    server.push_turns([
        Turn::tool("w", "write_file", json!({"path": "zoo.md", "content": "a zebra\n"})),
        turn,
        Turn::text("looked"),
    ]);
    t.run(&["prompt", "look around"]).ok();
    let id = t.only_agent();
    let entries = t.git(&["ls-tree", "--name-only", &format!("agents/{id}"), ".offshoot/messages/"]);
    let names: Vec<&str> = entries.lines().map(|l| l.rsplit('/').next().unwrap_or(l)).collect();
    assert_eq!(names[4..8], ["0005-tool.json", "0006-tool.json", "0007-tool.json", "0008-claude-sonnet-4-5.json"]);
    let order: Vec<String> = (5..=7)
        .map(|n| t.git(&["show", &format!("agents/{id}:.offshoot/messages/{n:04}-tool.json")]))
        .map(|j| {
            serde_json::from_str::<serde_json::Value>(&j).expect("json")["tool_use_id"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(order, ["p1", "p2", "p3"]);
}

/// Opens the FIFO at `path` for writing once a reader has it open (retrying until
/// `deadline`), then closes it: the reader sees an empty file. False if no reader came.
fn feed_when_read(path: &std::path::Path, deadline: std::time::Instant) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    while std::time::Instant::now() < deadline {
        // Without a reader, a non-blocking open for writing fails (ENXIO).
        if std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(path).is_ok() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    false
}

#[test]
fn read_only_calls_of_one_step_overlap() {
    // Each `grep` reads its directory's `.gitignore`, here a FIFO: reading it waits until
    // the test writes to it. The test feeds the second call's FIFO only once it is being
    // read, and the first's only after that, so the step ends only if the second call
    // started while the first was still running.
    let (server, t) = TestWorkspace::served("tools-overlap", Dialect::Anthropic);
    let dirs = [t.root.join("first"), t.root.join("second")];
    for dir in &dirs {
        std::fs::create_dir_all(dir).expect("dir");
        std::fs::write(dir.join("notes.txt"), "zebra\n").expect("notes");
        let made = std::process::Command::new("mkfifo").arg(dir.join(".gitignore")).status().expect("mkfifo");
        assert!(made.success());
    }
    let grep = |id: &str, dir: &std::path::Path| {
        (id.to_owned(), "grep".to_owned(), json!({"pattern": "zebra", "path": dir}).to_string())
    };
    server.push_turns([
        Turn { calls: vec![grep("g1", &dirs[0]), grep("g2", &dirs[1])], ..Turn::default() },
        Turn::text("both found"),
    ]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (first, second) = (dirs[0].join(".gitignore"), dirs[1].join(".gitignore"));
    let feeder = std::thread::spawn(move || {
        let overlapped = feed_when_read(&second, deadline);
        // Either way the first call is let go, so a failing run still ends.
        feed_when_read(&first, deadline + std::time::Duration::from_secs(5));
        if !overlapped {
            feed_when_read(&second, deadline + std::time::Duration::from_secs(10));
        }
        overlapped
    });
    let run = t.run(&["prompt", "find the zebras"]);
    let overlapped = feeder.join().expect("feeder");
    run.ok();
    assert!(overlapped, "the second read-only call did not start while the first was running");
    assert!(server.result_text(1).contains("zebra"), "{}", server.result_text(1));
}

#[test]
fn agents_md_on_the_way_to_the_cwd_is_shown_once() {
    let (server, t) = TestWorkspace::served("tools-agents-md", Dialect::Anthropic);
    server.push_turns([
        Turn::tool("c1", "bash", json!({"command": "mkdir -p pkg && printf 'Use tabs in pkg.\\n' > pkg/AGENTS.md"})),
        Turn::tool("c2", "cd", json!({"path": "pkg"})),
        Turn::tool("c3", "bash", json!({"command": "true"})),
        Turn::text("done"),
    ]);
    t.run(&["prompt", "go to pkg"]).ok();
    assert!(!server.result_text(1).contains("<context-file"), "{}", server.result_text(1));
    let cd = server.result_text(2);
    assert!(cd.ends_with("\n\n<context-file path=\"pkg/AGENTS.md\">\nUse tabs in pkg.\n</context-file>"), "{cd}");
    assert_eq!(server.result_text(3), "exit code 0");
}

#[test]
fn a_tool_cannot_edit_or_delete_the_transcript() {
    let (server, t) = TestWorkspace::served("tools-transcript", Dialect::Anthropic);
    server.push_turns([
        Turn::tool("c1", "bash", json!({"command": "echo forged > .offshoot/messages/0001-user.md; rm .offshoot/messages/0002-*.json; echo ok"})),
        Turn::text("tried"),
    ]);
    t.run(&["prompt", "--name", "Tamper", "the real goal"]).ok();
    let id = t.only_agent();
    let first = t.git(&["show", &format!("agents/{id}:.offshoot/messages/0001-user.md")]);
    assert!(first.ends_with("the real goal"), "{first}");
    let names = t.git(&["ls-tree", "--name-only", &format!("agents/{id}"), ".offshoot/messages/"]);
    assert_eq!(names.lines().count(), 4, "{names}");
    // The deleted entry is back on disk after the run; the worktree matches the branch.
    let tree = t.ws.join("agents").join(&id);
    assert!(std::fs::read_dir(tree.join(".offshoot/messages")).expect("ls").count() == 4);
}

#[test]
fn a_cd_applies_to_the_calls_after_it_in_the_same_step() {
    let (server, t) = TestWorkspace::served("tools-cd-same-step", Dialect::Anthropic);
    let turn = Turn {
        calls: vec![
            ("s1".into(), "bash".into(), json!({"command": "mkdir -p inner"}).to_string()),
            ("s2".into(), "cd".into(), json!({"path": "inner"}).to_string()),
            ("s3".into(), "bash".into(), json!({"command": "pwd"}).to_string()),
        ],
        ..Turn::default()
    };
    server.push_turns([turn, Turn::text("done")]);
    t.run(&["prompt", "cd then pwd"]).ok();
    let body = &server.requests()[1].body;
    let results = body["messages"][2]["content"].as_array().expect("results");
    let pwd = results[2]["content"].as_str().expect("text");
    assert!(pwd.contains("/inner\n"), "{pwd}");
}

#[test]
fn every_change_a_step_makes_is_committed_whatever_the_watch_saw() {
    // Commits scan only what inotify saw change; new directories, moves and deletions
    // must all land, and a later step's edit inside a moved directory too.
    let (server, t) = TestWorkspace::served("tools-watched", Dialect::Anthropic);
    server.push_turns([
        Turn::bash("c1", "mkdir -p a/b && echo 1 > a/b/x && echo 2 > top.txt"),
        Turn::bash("c2", "mv a/b c && rm top.txt && echo 3 > c/y"),
        Turn::bash("c3", "echo 4 >> c/x && mkdir -p d/e/f && echo 5 > d/e/f/z"),
        Turn::text("done"),
    ]);
    t.run(&["prompt", "shuffle files"]).ok();
    let id = t.only_agent();
    let files = t.git(&["ls-tree", "-r", "--name-only", &format!("agents/{id}")]);
    let work: Vec<&str> = files.lines().filter(|l| !l.starts_with(".offshoot/")).collect();
    assert_eq!(work, ["c/x", "c/y", "d/e/f/z"]);
    assert_eq!(t.git(&["show", &format!("agents/{id}:c/x")]), "1\n4\n");
    // Each step's commit holds that step's state: after c2, top.txt is gone.
    let log = t.git(&["log", "--format=%H %s", &format!("agents/{id}")]);
    let after_c2 = log.lines().find(|l| l.contains("bash result") && l.contains("0005")).expect("c2's commit");
    let c2 = after_c2.split(' ').next().expect("sha");
    let at_c2 = t.git(&["ls-tree", "-r", "--name-only", c2]);
    assert!(!at_c2.contains("top.txt") && at_c2.contains("c/y") && !at_c2.contains("a/b/x"), "{at_c2}");
}
