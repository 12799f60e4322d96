//! Approvals: calls that need a yes wait on one queue for the whole workspace
//! (`offshoot pending`, `approve`, `deny`), ten askers of one thing are one question,
//! and a question outlives the driver that asked it.

use std::process::Stdio;

use serde_json::{Value, json};

use crate::support::server::Turn;
use crate::support::wait::wait_for;
use crate::support::workspace::{Dialect, TestWorkspace};

/// The questions `pending --json` lists.
fn pending(t: &TestWorkspace) -> Vec<Value> {
    let run = t.run(&["pending", "--json"]);
    run.ok().lines().map(|l| serde_json::from_str::<Value>(l).expect("json")["question"].clone()).collect()
}

fn escalating(id: &str, command: &str) -> Turn {
    Turn::tool(id, "bash", json!({"command": command, "escalate": "network", "reason": "it fetches the crates"}))
}

#[test]
fn ten_children_asking_one_escalation_wait_on_one_question_that_outlives_a_killed_driver() {
    let (server, t) = TestWorkspace::served("approvals-ten", Dialect::Anthropic);
    t.set("roles.worker.network", "false");
    let names: Vec<String> = (0..10).map(|i| format!("Kid{i}")).collect();
    let mut dispatch = Turn::text("");
    dispatch.calls = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let input = json!({"role": "worker", "goal": format!("fetch as {name}"), "name": name});
            (format!("d{i}"), "dispatch".to_owned(), input.to_string())
        })
        .collect();
    let mut lead = vec![dispatch, Turn::text("waiting")];
    lead.extend((0..12).map(|_| Turn::text("noted")));
    server.push_for("Lead", lead);
    for name in &names {
        server.push_for(name, [escalating("e1", "echo fetched > got.txt"), Turn::text("kid done")]);
    }
    let prompt = t
        .command()
        .args(["prompt", "--on-ask", "wait", "--name", "Lead", "lead"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prompt");
    wait_for("ten children on one question", || {
        pending(&t).first().is_some_and(|q| q["waiters"].as_array().is_some_and(|w| w.len() == 10))
    });
    let questions = pending(&t);
    assert_eq!(questions.len(), 1, "{questions:?}");
    let question = &questions[0];
    let id = question["id"].as_str().expect("id").to_owned();
    assert_eq!(question["tool"], "bash");
    assert_eq!(question["escalation"], "network");
    assert!(question["why"].as_str().is_some_and(|w| w.contains("it fetches the crates")), "{question}");
    let listed = t.run(&["pending"]);
    assert!(listed.ok().contains(&id) && listed.stdout.contains("10 agents"), "{}", listed.stdout);
    // Nothing ran yet.
    let kid3 = t.id_of("Kid3");
    assert!(!t.ws.join("agents").join(&kid3).join("got.txt").exists());

    // One driver killed while it waits: the next one takes its place on the question.
    wait_for("Kid3 to note its question", || {
        t.step_records(&kid3).iter().any(|r| r.join("tools/e1/question.json").exists())
    });
    let pid = t.driver_pid(&kid3).expect("Kid3's driver");
    assert!(std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().expect("kill").success());
    // (Its leader shows as a zombie before its last thread has let go of the lock.)
    let state = |t: &TestWorkspace| {
        let agents = t.agents();
        agents.iter().find(|a| a["id"] == kid3.as_str()).map(|a| a["state"].as_str().unwrap_or("").to_owned())
    };
    wait_for("the driver to let go", || {
        t.running_driver(&kid3) != Some(pid) && state(&t).as_deref() != Some("running")
    });
    // (`run` drives it, or follows the driver its parent, waiting on it, started.)
    let resumed = t.command().args(["run", &kid3]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run");
    wait_for("a new driver", || t.running_driver(&kid3).is_some_and(|p| p != pid));
    // It waits again: running, nothing run, still on the one question.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(t.running_driver(&kid3).is_some_and(|p| p != pid), "the new driver did not wait");
    assert!(!t.ws.join("agents").join(&kid3).join("got.txt").exists());
    let again = pending(&t);
    assert_eq!(again.len(), 1, "still one question: {again:?}");
    assert_eq!(again[0]["waiters"].as_array().map(Vec::len), Some(10));

    let approved = t.run(&["approve", &id, "--for-tree"]);
    assert!(approved.ok().contains("the 10 calls waiting on it go on"), "{}", approved.stdout);
    let resumed = resumed.wait_with_output().expect("run");
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let out = prompt.wait_with_output().expect("prompt");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for name in &names {
        let kid = t.id_of(name);
        assert!(t.ws.join("agents").join(&kid).join("got.txt").exists(), "{name} ran its command");
        let said = server.result_text_for(name, 1);
        assert!(said.contains(&format!("[this call ran on a yes from user (question {id})]")), "{name}: {said}");
    }
    assert!(pending(&t).is_empty());
    // The yes stands for the tree: the same call asks no more.
    let again = t.run(&["approve", &id]);
    assert_eq!(again.code, 2);
    assert!(again.stderr.contains(&format!("question `{id}` was answered already (user said yes")), "{}", again.stderr);
}

#[test]
fn a_person_says_no_with_a_reason_and_always_writes_a_rule_as_a_config_commit() {
    let (server, t) = TestWorkspace::served("approvals-no", Dialect::Anthropic);
    t.set("permissions.ask", r#"["Bash(git push:*)"]"#);
    server.push_turns([
        Turn::bash("c1", "git push origin main"),
        Turn::text("told no"),
        Turn::bash("c2", "touch made.txt"),
        Turn::text("made it"),
        Turn::bash("c3", "touch made.txt"),
        Turn::text("made it again"),
    ]);
    let answer = |id_args: &dyn Fn(&str) -> Vec<String>, message: &str| {
        let prompt = t
            .command()
            .args(["prompt", "--json", "--mode", "ask", "--on-ask", "wait", message])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("prompt");
        wait_for("a question", || !pending(&t).is_empty());
        let id = pending(&t)[0]["id"].as_str().expect("id").to_owned();
        let args = id_args(&id);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        t.run(&args).ok();
        let out = prompt.wait_with_output().expect("prompt");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (id, String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (id, events) =
        answer(&|id| vec!["deny".into(), id[..6].into(), "--reason".into(), "not on Fridays".into()], "push");
    // (An ask rule's question takes no `--always`: the allow rule would not stand.)
    // `--json` says the question and its answer, as events of the agent that asked.
    let lines: Vec<Value> = events.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let asked = lines.iter().find(|l| l["type"] == "asked").expect("an asked event");
    assert_eq!((asked["question"].as_str(), asked["tool"].as_str()), (Some(id.as_str()), Some("bash")), "{asked}");
    let answered = lines.iter().find(|l| l["type"] == "answered").expect("an answered event");
    assert_eq!((answered["yes"].as_bool(), answered["reason"].as_str()), (Some(false), Some("not on Fridays")));
    let said = server.result_text(1);
    assert!(
        said.contains(&format!("user said no to this call (question {id}): not on Fridays; nothing ran")),
        "{said}"
    );

    let before = t.git(&["rev-parse", "config/default"]);
    let (id, _) = answer(&|id| vec!["approve".into(), id.into(), "--always".into()], "touch");
    assert_ne!(t.git(&["rev-parse", "config/default"]), before, "the rule is a config commit");
    let message = t.git(&["log", "-1", "--format=%B", "config/default"]);
    assert!(
        message.contains("roles.worker.permissions.allow += bash(touch made.txt)") && message.contains(&id),
        "{message}"
    );
    let allow = t.run(&["config", "show"]);
    assert!(allow.ok().contains("bash(touch made.txt)"), "{}", allow.stdout);
    // From then on the rule answers: no question, the call runs.
    let run = t.run(&["prompt", "--mode", "ask", "--on-ask", "deny", "touch again"]);
    run.ok();
    assert!(!server.result_text(3).contains("no one is here"), "{}", server.result_text(3));
}

#[test]
fn on_ask_fail_ends_the_run_and_modes_confine_what_runs() {
    let (server, t) = TestWorkspace::served("approvals-modes", Dialect::Anthropic);
    server.push_turns([Turn::bash("c1", "touch asked.txt")]);
    let run = t.run(&["prompt", "--mode", "ask", "--on-ask", "fail", "--name", "Failing", "touch"]);
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("needs a person's yes, and this run was told to fail"), "{}", run.stderr);
    assert!(run.stderr.contains("mode = \"ask\""), "{}", run.stderr);

    // Read-only: no file tool writes, and commands write nothing in the agent's directory.
    server.push_turns([
        Turn::tool("w1", "write_file", json!({"path": "a.txt", "content": "x"})),
        Turn::bash("b1", "touch b.txt; echo tried"),
        Turn::bash("r1", "ls"),
        Turn::text("looked"),
    ]);
    t.run(&["prompt", "--mode", "read-only", "--name", "Reader", "look"]).ok();
    let refused = server.result_text(2);
    assert!(refused.contains("refused by the rule `mode = \"read-only\"`"), "{refused}");
    let reader = t.ws.join("agents").join(t.id_of("Reader"));
    assert!(!reader.join("a.txt").exists() && !reader.join("b.txt").exists());
    assert!(server.result_text(3).contains("tried"), "{}", server.result_text(3));

    // A mode that is none, in the config or on the command line: named, nothing written.
    let before = t.git(&["rev-parse", "config/default"]);
    let set = t.run(&["config", "set", "roles.worker.mode", "\"careful\""]);
    assert_eq!(set.code, 2, "{}", set.stderr);
    assert!(set.stderr.contains("`roles.worker.mode`: unknown variant `careful`"), "{}", set.stderr);
    assert_eq!(t.git(&["rev-parse", "config/default"]), before);
    let flag = t.run(&["prompt", "--mode", "careful", "x"]);
    assert_eq!(flag.code, 2);
    assert!(
        flag.stderr.contains("`careful` is not a mode (modes: read-only, ask, workspace-write, full)"),
        "{}",
        flag.stderr
    );
}

#[test]
fn an_agent_cannot_choose_its_own_mode_answer_its_question_or_read_the_queue() {
    let (server, t) = TestWorkspace::served("approvals-forged", Dialect::Anthropic);
    t.set("permissions.ask", r#"["Bash(git push:*)"]"#);
    let outside = t.root.join("outside.txt");
    let queue = t.ws.join("queue");
    std::fs::create_dir_all(queue.join("q-1")).expect("queue");
    std::fs::write(queue.join("q-1/question.json"), "{}").expect("question");
    server.push_turns([
        Turn::bash("c1", "mkdir -p .offshoot && echo full > .offshoot/mode && echo wait > .offshoot/on-ask"),
        Turn::bash("c2", "git push origin main"),
        Turn::bash("c3", &format!("echo out > {}", outside.display())),
        Turn::tool("c4", "read_file", json!({"path": queue.join("q-1/question.json").display().to_string()})),
        Turn::tool(
            "c5",
            "write_file",
            json!({"path": queue.join("q-1/answer.json").display().to_string(), "content": "{}"}),
        ),
        Turn::text("done"),
    ]);
    t.run(&["prompt", "--mode", "workspace-write", "--on-ask", "deny", "--name", "Forger", "forge"]).ok();
    let pushed = server.result_text(2);
    assert!(pushed.contains("no one is here to answer: refused"), "its own `.offshoot/on-ask` was read: {pushed}");
    assert!(!outside.exists(), "its own `.offshoot/mode` took it out of the sandbox");
    let read = server.result_text(4);
    assert!(read.contains("the workspace's internals"), "{read}");
    assert!(!queue.join("q-1/answer.json").exists(), "{}", server.result_text(5));
    let id = t.only_agent();
    assert_eq!(t.git(&["show", &format!("agents/{id}:.offshoot/mode")]), "workspace-write\n");
}

#[test]
fn two_trees_asking_the_same_words_ask_two_questions_and_always_names_only_exactly_the_call() {
    let (server, t) = TestWorkspace::served("approvals-trees", Dialect::Anthropic);
    server.push_for("One", [Turn::bash("c1", "rm -f *.o"), Turn::text("one done")]);
    server.push_for("Two", [Turn::bash("c1", "rm -f *.o"), Turn::text("two done")]);
    for name in ["One", "Two"] {
        t.run(&["prompt", "--detach", "--mode", "ask", "--on-ask", "wait", "--name", name, "clean"]).ok();
    }
    wait_for("two questions", || pending(&t).len() == 2);
    let questions = pending(&t);
    assert!(questions.iter().all(|q| q["waiters"].as_array().map(Vec::len) == Some(1)), "{questions:?}");
    // A glob in the command: a rule would name more than this call.
    let id = questions[0]["id"].as_str().expect("id").to_owned();
    let always = t.run(&["approve", &id, "--always"]);
    assert_eq!(always.code, 2, "{}", always.stdout);
    assert!(always.stderr.contains("no rule says exactly this call and nothing more"), "{}", always.stderr);
    assert_eq!(pending(&t).len(), 2, "a refused --always answered nothing");
    for q in pending(&t) {
        t.run(&["deny", q["id"].as_str().expect("id")]).ok();
    }
    wait_for("both to finish", || t.agents().iter().all(|a| a["state"] == "done"));
}

#[test]
fn a_write_path_holding_the_workspace_never_lets_a_tool_write_the_queue() {
    let (server, t) = TestWorkspace::served("approvals-wide", Dialect::Anthropic);
    t.set("roles.worker.write_paths", &format!("[\"{}\"]", t.root.display()));
    let answer = t.ws.join("queue").join("q-1").join("answer.json");
    server.push_turns([
        Turn::tool("w1", "write_file", json!({"path": answer.display().to_string(), "content": "{}"})),
        Turn::bash(
            "b1",
            &format!("mkdir -p {} && echo yes > {}", answer.parent().expect("dir").display(), answer.display()),
        ),
        Turn::text("done"),
    ]);
    let run = t.run(&["prompt", "--name", "Wide", "try"]);
    run.ok();
    assert!(
        run.stderr.contains("which holds offshoot's own workspace: it is not writable for its tools"),
        "{}",
        run.stderr
    );
    assert!(server.result_text(1).contains("the workspace's internals"), "{}", server.result_text(1));
    assert!(!answer.exists(), "a tool wrote the queue: {}", server.result_text(2));
}
