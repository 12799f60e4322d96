//! `kill -9` of the driver in the middle of a tool call, then `offshoot run`.

use std::time::{Duration, Instant};

use crate::support::server::Turn;
use crate::support::wait::wait_for;
use crate::support::workspace::{Dialect, TestWorkspace};

#[test]
fn a_killed_driver_is_settled_and_continued_by_the_next() {
    let (server, t) = TestWorkspace::served("crash", Dialect::Anthropic);
    server.push_turns([
        Turn::bash("call_1", "echo $$ > started; echo partial > work.txt; sleep 30"),
        Turn::text("finished after the crash"),
    ]);
    let run = t.run(&["prompt", "--detach", "--name", "Crashy", "do slow work"]);
    let id = run.ok().trim().to_owned();
    let tree = t.ws.join("agents").join(&id);
    wait_for("the tool to start", || std::fs::read_to_string(tree.join("started")).is_ok_and(|s| s.ends_with('\n')));
    let driver_pid = t.driver_pid(&id).expect("the driver's pid").to_string();
    assert!(std::process::Command::new("kill").args(["-9", &driver_pid]).status().expect("kill").success());
    // Its leader shows as a zombie before its last thread has let go of the lock.
    wait_for("the driver to let go", || t.agents()[0]["state"] != "running");
    // The tool it ran is still running; the next driver kills it before settling.

    let run = t.run(&["run", &id]);
    assert!(run.ok().contains("finished after the crash"), "{}", run.stdout);
    assert!(run.stderr.contains("settled interrupted call call_1"), "{}", run.stderr);

    // The interrupted call got an error result, sent to the model with the rest.
    let second = &server.requests()[1].body;
    let result = &second["messages"][2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "call_1");
    assert_eq!(result["is_error"], true);
    assert!(result["content"].as_str().expect("text").starts_with("interrupted; outcome unknown"));
    // What the tool wrote before dying is committed with the settlement.
    assert_eq!(t.git(&["show", &format!("agents/{id}:work.txt")]), "partial\n");
    // Every tool_use has its result.
    let log = t.run(&["log", "--json", &id]);
    let entries: Vec<serde_json::Value> = log.ok().lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    let uses: Vec<&serde_json::Value> = entries
        .iter()
        .flat_map(|e| e["output"]["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_use")
        .map(|b| &b["id"])
        .collect();
    let results: Vec<&serde_json::Value> =
        entries.iter().filter(|e| e["side"] == "tool").map(|e| &e["result"]["tool_use_id"]).collect();
    assert_eq!(uses, results);
    t.git(&["fsck", "--strict"]);
    assert_eq!(t.agents()[0]["state"], "done");
}

#[test]
fn a_delivery_whose_inbox_file_survived_a_crash_is_not_repeated() {
    let (server, t) = TestWorkspace::served("crash-deliver", Dialect::Anthropic);
    server.push_turns([Turn::text("first answer")]);
    t.run(&["prompt", "--name", "Once", "hello"]).ok();
    let id = t.only_agent();
    // A message is delivered, then the provider refuses: the transcript ends with it.
    server.push(crate::support::server::Reply::Status { code: 401, retry_after: None, body: "{}".into() });
    assert_eq!(t.run(&["send", "Once", "same words"]).code, 1);
    let last = t.git(&["show", &format!("agents/{id}:.offshoot/messages/0003-user.md")]);
    // As if the driver died after committing it and before removing its inbox file:
    let inbox = t.ws.join("inbox").join(&id);
    std::fs::create_dir_all(&inbox).expect("inbox");
    std::fs::write(inbox.join("0007-user.md"), &last).expect("deposit");
    // ...and the same words sent again on purpose, twice, in the same batch.
    let again = last.replace("same words", "same words again");
    std::fs::write(inbox.join("0008-user.md"), &again).expect("deposit");
    std::fs::write(inbox.join("0009-user.md"), &again).expect("deposit");
    server.push_turns([Turn::text("answered")]);
    assert!(t.run(&["run", "Once"]).ok().contains("answered"));
    let names = t.git(&["ls-tree", "--name-only", &format!("agents/{id}"), ".offshoot/messages/"]);
    let users: Vec<&str> = names.lines().filter(|n| n.ends_with("-user.md")).collect();
    assert_eq!(users.len(), 4, "{names}");
    assert!(std::fs::read_dir(&inbox).expect("inbox").next().is_none());
}

#[test]
fn a_step_cut_short_by_a_crash_shows_as_interrupted_and_is_not_counted_as_kept() {
    let (server, t) = TestWorkspace::served("crash-mid-call", Dialect::Anthropic);
    server.push(crate::support::server::Reply::Stall(Turn::text("never finished"), Duration::from_secs(30)));
    let id = t.run(&["prompt", "--detach", "slow answer"]).ok().trim().to_owned();
    wait_for("the call to start", || server.requests().len() == 1);
    let driver_pid = t.driver_pid(&id).expect("the driver's pid").to_string();
    assert!(std::process::Command::new("kill").args(["-9", &driver_pid]).status().expect("kill").success());
    wait_for("the driver to let go", || t.agents()[0]["state"] != "running");
    let shown: serde_json::Value = serde_json::from_str(t.run(&["show", &id, "--step", "1"]).ok()).expect("json");
    assert_eq!(shown["outcome"], "interrupted");
    assert_eq!(shown["model"], "claude-sonnet-4-5");
    // (Its record stays to look at; `ls` counts the steps kept.)
    assert_eq!(t.agents()[0]["steps"], 0);
    server.push_turns([Turn::text("done now")]);
    assert!(t.run(&["run", &id]).ok().contains("done now"));
    assert_eq!(t.agents()[0]["steps"], 1);
    let shown: serde_json::Value = serde_json::from_str(t.run(&["show", &id, "--step", "2"]).ok()).expect("json");
    assert_eq!(shown["outcome"], "ok");
}

#[test]
fn what_an_agent_killed_mid_call_planted_in_its_git_is_said_by_doctor_and_put_back_by_scan() {
    let (server, t) = TestWorkspace::served("crash-planted", Dialect::Anthropic);
    let ran = t.root.join("ran");
    let plant = format!(
        "g=$(sed 's/gitdir: //' .git); git config core.fsmonitor 'touch {ran}'; printf '#!/bin/sh\\ntouch {ran}\\n' > $g/hooks/pre-commit; chmod +x $g/hooks/pre-commit; printf 'ref:refs/heads/Planter\\n' > $g/HEAD; echo $$ > started; sleep 30",
        ran = ran.display()
    );
    server.push_turns([Turn::bash("p1", &plant), Turn::text("back")]);
    let id = t.run(&["prompt", "--detach", "--name", "Planter", "plant"]).ok().trim().to_owned();
    let tree = t.ws.join("agents").join(&id);
    wait_for("the tool to start", || std::fs::read_to_string(tree.join("started")).is_ok_and(|s| s.ends_with('\n')));
    let driver_pid = t.driver_pid(&id).expect("the driver's pid").to_string();
    assert!(std::process::Command::new("kill").args(["-9", &driver_pid]).status().expect("kill").success());
    wait_for("the driver to let go", || t.agents()[0]["state"] != "running");
    let doctor = t.run(&["doctor"]);
    assert_ne!(doctor.code, 0);
    let said = format!("agent `{id}`'s git has config, hooks of the agent's making");
    assert!(doctor.stdout.contains(&said), "{}", doctor.stdout);
    // The next scan puts them back before anything else (and relaunches the agent).
    t.run(&["scan"]).ok();
    assert!(crate::project::person_git(&tree, &["status"]).status.success());
    assert!(!ran.exists(), "a planted fsmonitor or hook ran");
    wait_for("the relaunched agent to finish", || t.agents()[0]["state"] == "done");
    let doctor = t.run(&["doctor"]);
    assert_eq!(doctor.code, 0, "{}", doctor.stdout);
}

/// Every entry of agent `name`'s transcript as `log --json` gives it.
fn entries(t: &TestWorkspace, name: &str) -> Vec<serde_json::Value> {
    t.run(&["log", "--json", name]).ok().lines().map(|l| serde_json::from_str(l).expect("json")).collect()
}

#[test]
fn a_root_killed_while_it_dispatches_makes_each_child_once_and_hears_each_result_once() {
    let (server, t) = TestWorkspace::served("crash-dispatch", Dialect::Anthropic);
    let kids: Vec<String> = (0..10).map(|i| format!("Kid{i}")).collect();
    let calls = kids
        .iter()
        .enumerate()
        .map(|(i, kid)| {
            let input = serde_json::json!({"role": "worker", "goal": format!("write {kid}.txt"), "name": kid});
            (format!("d{i}"), "dispatch".to_owned(), input.to_string())
        })
        .collect();
    let fan_out = Turn { calls, input_tokens: 100, output_tokens: 20, ..Turn::default() };
    server.push_for("Root", std::iter::once(fan_out).chain((0..30).map(|_| Turn::text("noted"))));
    for kid in &kids {
        server.push_for(kid, [Turn::bash("w", &format!("echo {kid} > {kid}.txt")), Turn::text(&format!("{kid} done"))]);
    }
    let root = t.run(&["prompt", "--detach", "--name", "Root", "fan out"]).ok().trim().to_owned();
    // Killed the moment its first child exists: the other dispatches are in flight.
    wait_for("the first child", || {
        !t.git(&["for-each-ref", "--format=%(refname)", "refs/heads/agents/"])
            .trim()
            .lines()
            .all(|r| r.ends_with(&format!("/{root}")))
    });
    if let Some(pid) = t.driver_pid(&root) {
        let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    // Scan until nothing is at work and scan finds nothing to do.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < until, "the tree never went quiet: {:?}", t.agents());
        let busy = t.agents().iter().any(|a| a["state"] == "running");
        if !busy && t.run(&["scan", "--json"]).ok().trim().is_empty() {
            let agents = t.agents();
            if agents.iter().all(|a| a["state"] == "done") && agents.len() == 11 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let agents = t.agents();
    let mut names: Vec<&str> = agents.iter().filter_map(|a| a["name"].as_str()).filter(|n| *n != "Root").collect();
    names.sort_unstable();
    let mut want: Vec<&str> = kids.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(names, want, "each child exists once");
    let log = entries(&t, "Root");
    for (i, kid) in kids.iter().enumerate() {
        let id = t.id_of(kid);
        // The dispatch is answered once, with the child's id.
        let answers: Vec<&serde_json::Value> =
            log.iter().filter(|e| e["side"] == "tool" && e["result"]["tool_use_id"] == format!("d{i}")).collect();
        assert_eq!(answers.len(), 1, "{answers:?}");
        let text = answers[0]["result"]["content"].as_str().unwrap_or_default();
        assert!(text.contains(&format!("started `{id}`")), "{text}");
        // Its result reached the root once.
        let heard = log.iter().filter(|e| e["side"] == "user" && e["from"] == id.as_str()).count();
        assert_eq!(heard, 1, "{kid}'s result reached the root {heard} times");
        assert_eq!(agents.iter().find(|a| a["id"] == id.as_str()).expect("kid")["steps"], 2);
    }
    let doctor = t.run(&["doctor"]);
    assert_eq!(doctor.code, 0, "{}", doctor.stdout);
}
