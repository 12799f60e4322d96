//! Ctrl-C and `offshoot stop` while a tool runs: the tool's processes are gone at
//! once, the call is settled, the driver lets go and says how to continue.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::server::Turn;
use crate::support::wait::wait_for_within;
use crate::support::workspace::{Dialect, TestWorkspace, running};

/// The running members of process group `pgid`.
fn group(pgid: u32) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str()) {
            members.push(pid);
        }
    }
    members
}

/// The pgid the call `call` recorded before it started, once it has.
fn recorded_group(t: &TestWorkspace, call: &str) -> (String, u32) {
    let mut found = None;
    wait_for_within("the command to start", Duration::from_secs(30), || {
        for agent in std::fs::read_dir(t.ws.join("steps")).into_iter().flatten().flatten() {
            let path = agent.path().join("0001/tools").join(call).join("pgid");
            if let Some(pgid) = std::fs::read_to_string(&path).ok().and_then(|p| p.trim().parse().ok()) {
                found = Some((agent.file_name().to_string_lossy().into_owned(), pgid));
                return true;
            }
        }
        false
    });
    found.expect("recorded")
}

fn signal(pid: u32, name: &str) {
    assert!(Command::new("kill").args([&format!("-{name}"), &pid.to_string()]).status().expect("kill").success());
}

/// The last tool result of the transcript.
fn last_result(t: &TestWorkspace, id: &str) -> serde_json::Value {
    let log = t.run(&["log", "--json", id]);
    let entries: Vec<serde_json::Value> = log.ok().lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    entries.into_iter().rev().find(|e| e["side"] == "tool").expect("a tool result")["result"].clone()
}

/// What differs between the agent's directory and its branch tip (`.offshoot/`
/// aside), as plain git sees it through the harness's own index: changed tracked
/// files, then untracked ones.
fn harness_status(t: &TestWorkspace, id: &str) -> String {
    let ws: &Path = &t.ws;
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_INDEX_FILE", ws.join("index").join(id))
            .arg("--git-dir")
            .arg(ws.join("repo.git"))
            .arg("--work-tree")
            .arg(ws.join("agents").join(id))
            .args(args)
            .output()
            .expect("git");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let tip = format!("agents/{id}");
    git(&["diff", "--name-status", &tip, "--", ".", ":!.offshoot"])
        + &git(&["ls-files", "--others", "--exclude-standard", "--", ".", ":!.offshoot"])
}

fn slow_turn() -> Turn {
    Turn::bash("slow", "sleep 5 && echo late > late.txt")
}

fn agent_dir(t: &TestWorkspace, id: &str) -> PathBuf {
    t.ws.join("agents").join(id)
}

#[test]
fn ctrl_c_during_a_tool_kills_it_settles_the_call_and_exits_130() {
    let (server, t) = TestWorkspace::served("sig-int", Dialect::Anthropic);
    server.push_turns([slow_turn(), Turn::text("after the interruption")]);
    let child = t
        .command()
        .args(["prompt", "--name", "Sleepy", "take your time"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let (id, pgid) = recorded_group(&t, "slow");
    assert!(!group(pgid).is_empty());
    signal(child.id(), "INT");
    let sent = Instant::now();
    wait_for_within("the tool's processes to go", Duration::from_secs(1), || group(pgid).is_empty());
    let out = child.wait_with_output().expect("wait");
    assert!(sent.elapsed() < Duration::from_secs(3), "{:?}", sent.elapsed());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains(&format!("error: agent `{id}` was interrupted by the user")), "{stderr}");
    assert!(stderr.contains(&format!("`offshoot run {id}` continues it")), "{stderr}");
    let result = last_result(&t, &id);
    assert_eq!(result["is_error"], true);
    assert!(
        result["content"].as_str().expect("text").starts_with("interrupted by the user; its processes were killed")
    );
    // The lock is free, the harness's view is clean, and what the tool would have
    // written later never appears.
    assert_eq!(t.agents()[0]["state"], "stopped");
    assert_eq!(harness_status(&t, &id), "");
    let project = Command::new("git")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .current_dir(agent_dir(&t, &id))
        .args(["status", "--porcelain"])
        .output()
        .expect("git status");
    assert_eq!(String::from_utf8_lossy(&project.stdout), "", "the agent's own git status");
    // Its whole group is gone (asserted above): nothing is left that could write
    // `late.txt` later, so there is no need to wait and see.
    assert!(!agent_dir(&t, &id).join("late.txt").exists());
    // The conversation continues.
    assert!(t.run(&["run", &id]).ok().contains("after the interruption"));
    let second = &server.requests()[1].body;
    let answered = &second["messages"][2]["content"][0];
    assert_eq!((answered["tool_use_id"].as_str(), answered["is_error"].as_bool()), (Some("slow"), Some(true)));
}

#[test]
fn stop_ends_a_detached_driver_and_a_message_revives_it() {
    let (server, t) = TestWorkspace::served("sig-stop", Dialect::Anthropic);
    server.push_turns([slow_turn()]);
    let id = t.run(&["prompt", "--detach", "--name", "Stoppable", "work a while"]).ok().trim().to_owned();
    let (_, pgid) = recorded_group(&t, "slow");
    let run = t.run(&["stop", "Stoppable"]);
    assert!(run.ok().is_empty());
    assert!(run.stderr.contains(&format!("· stopped `{id}`")), "{}", run.stderr);
    assert!(group(pgid).is_empty());
    let result = last_result(&t, &id);
    assert!(result["content"].as_str().expect("text").starts_with("stopped; its processes were killed"), "{result}");
    // The driver prints why it ended just after it lets go of the lock.
    let said = format!("error: agent `{id}` was stopped");
    let log = || std::fs::read_to_string(t.steps_dir(&id).join("driver.log")).unwrap_or_default();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !log().contains(&said) {
        assert!(std::time::Instant::now() < until, "{}", log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(t.run(&["stop", "Stoppable"]).stderr.contains("is not running"));
    server.push_turns([Turn::text("revived")]);
    assert!(t.run(&["send", "Stoppable", "carry on"]).ok().contains("revived"));
    // (Its group was gone when `stop` returned: nothing can write `late.txt` later.)
    assert!(!agent_dir(&t, &id).join("late.txt").exists());
}

/// Running processes whose command line holds `arg` as one of its words.
fn running_with_arg(arg: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if cmdline.split(|&b| b == 0).any(|w| w == arg.as_bytes()) && running(pid) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_process_that_escaped_its_group_is_ended_after_the_call() {
    // Unconfined, the driver adopts it (it is the subreaper) and ends it after the call.
    let (server, t) = TestWorkspace::served("sig-escape", Dialect::Anthropic);
    t.set("roles.worker.sandbox", "none");
    server.push_turns([
        Turn::bash("c1", "setsid sh -c 'echo $$ > escaped.pid; exec sleep 30' > /dev/null 2>&1 & sleep 0.3; echo done"),
        Turn::text("ok"),
    ]);
    t.run(&["prompt", "escape"]).ok();
    let id = t.only_agent();
    let pid: u32 =
        std::fs::read_to_string(agent_dir(&t, &id).join("escaped.pid")).expect("pid").trim().parse().expect("pid");
    wait_for_within("the escaped process to end", Duration::from_secs(2), || !running(pid));
}

#[test]
fn in_the_sandbox_a_daemon_ends_with_its_command_even_deaf_to_signals() {
    let (server, t) = TestWorkspace::served("sig-escape-sandboxed", Dialect::Anthropic);
    let marker = format!("{}.25", 900_000 + std::process::id() % 99_999);
    server.push_turns([
        Turn::bash(
            "c1",
            &format!(
                "setsid sh -c 'trap \"\" INT TERM HUP; exec sleep {marker}' > /dev/null 2>&1 & sleep 0.3; echo done"
            ),
        ),
        Turn::text("ok"),
    ]);
    t.run(&["prompt", "escape"]).ok();
    assert_eq!(server.result_text(1), "exit code 0\n<stdout>\ndone\n</stdout>");
    wait_for_within("the daemon to end", Duration::from_secs(2), || running_with_arg(&marker).is_empty());
}

#[test]
fn in_the_sandbox_a_killed_drivers_commands_die_with_it() {
    let (server, t) = TestWorkspace::served("sig-driver-killed-sandboxed", Dialect::Anthropic);
    let marker = format!("{}.5", 800_000 + std::process::id() % 99_999);
    server.push_turns([Turn::bash(
        "c1",
        &format!("setsid sh -c 'trap \"\" INT TERM HUP; exec sleep {marker}' > /dev/null 2>&1 & sleep {marker}"),
    )]);
    let id = t.run(&["prompt", "--detach", "leave a daemon"]).ok().trim().to_owned();
    wait_for_within("the daemon and the command", Duration::from_secs(30), || running_with_arg(&marker).len() == 2);
    let driver = t.driver_pid(&id).expect("the driver's pid");
    signal(driver, "KILL");
    wait_for_within("every process of the command to end", Duration::from_secs(2), || {
        running_with_arg(&marker).is_empty()
    });
}

#[test]
fn a_killed_drivers_orphans_are_killed_before_the_next_driver_settles() {
    orphans_are_killed("sig-orphan", false);
}

#[test]
fn orphans_whose_group_never_reached_the_record_are_found_by_their_marks() {
    // As if the driver died between starting the command and recording its group.
    orphans_are_killed("sig-orphan-unrecorded", true);
}

/// Unconfined (in the sandbox they die with the driver; see above), a killed
/// driver's commands live on until the next driver settles its calls.
fn orphans_are_killed(name: &str, lose_the_record: bool) {
    let (server, t) = TestWorkspace::served(name, Dialect::Anthropic);
    t.set("roles.worker.sandbox", "none");
    server.push_turns([slow_turn(), Turn::text("settled")]);
    let id = t.run(&["prompt", "--detach", "leave an orphan"]).ok().trim().to_owned();
    let (_, pgid) = recorded_group(&t, "slow");
    let driver = t.driver_pid(&id).expect("the driver's pid");
    signal(driver, "KILL");
    // Its leader shows as a zombie before its last thread has let go of the lock.
    wait_for_within("the driver to die", Duration::from_secs(5), || t.agents()[0]["state"] != "running");
    assert!(!group(pgid).is_empty(), "the orphan outlives its driver");
    if lose_the_record {
        std::fs::remove_file(t.steps_dir(&id).join("0001/tools/slow/pgid")).expect("rm");
    }
    let run = t.run(&["run", &id]);
    assert!(run.ok().contains("settled"), "{}", run.stderr);
    assert!(group(pgid).is_empty());
    // Its whole group is gone (asserted above): nothing is left that could write
    // `late.txt` later, so there is no need to wait and see.
    assert!(!agent_dir(&t, &id).join("late.txt").exists());
    assert!(!t.git(&["log", "--name-only", "--format=", &format!("agents/{id}")]).contains("late.txt"));
}

#[test]
fn ctrl_c_during_a_model_call_stops_the_agent_and_scan_leaves_it_stopped() {
    let (server, t) = TestWorkspace::served("sig-int-call", Dialect::Anthropic);
    server.latency(Duration::from_secs(20));
    server.push_turns([Turn::text("never heard")]);
    let child = t
        .command()
        .args(["prompt", "--name", "Caller", "think hard"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_for_within("the model call", Duration::from_secs(30), || !server.requests().is_empty());
    signal(child.id(), "INT");
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let id = t.id_of("Caller");
    assert!(stderr.contains(&format!("error: agent `{id}` was interrupted by the user")), "{stderr}");
    assert!(stderr.contains(&format!("`offshoot run {id}` continues it")), "{stderr}");
    let agent = &t.agents()[0];
    assert_eq!(agent["state"], "stopped", "{agent}");
    // In the words of any other stop.
    assert_eq!(agent["why"], "it was interrupted by the user", "{agent}");
    // The user stopped it: scan relaunches nothing, and no request is sent.
    let scan = t.run(&["scan", "--json"]);
    assert!(!scan.ok().contains("relaunched"), "{}", scan.stdout);
    assert_eq!(server.requests().len(), 1);
    assert_eq!(t.run(&["doctor"]).code, 0);
}

#[test]
fn stop_from_elsewhere_during_a_model_call_is_a_stop_and_changes_nothing_once_done() {
    let (server, t) = TestWorkspace::served("sig-stop-call", Dialect::Anthropic);
    server.latency(Duration::from_secs(20));
    server.push_turns([Turn::text("never heard")]);
    let child = t
        .command()
        .args(["prompt", "--name", "Attached", "think hard"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_for_within("the model call", Duration::from_secs(30), || !server.requests().is_empty());
    let id = t.id_of("Attached");
    t.run(&["stop", "Attached"]).ok();
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(143));
    let agent = &t.agents()[0];
    assert_eq!(agent["state"], "stopped", "{agent}");
    assert_eq!(agent["why"], "it was stopped", "{agent}");
    assert!(t.run(&["scan", "--json"]).ok().trim().is_empty());
    assert_eq!(server.requests().len(), 1);
    // Revived and finished, a stop changes nothing.
    server.latency(Duration::ZERO);
    server.push_turns([Turn::text("finished")]);
    t.run(&["send", &id, "go on"]).ok();
    assert_eq!(t.agents()[0]["state"], "done");
    let stop = t.run(&["stop", &id]);
    assert!(stop.stderr.contains("nothing to stop"), "{}", stop.stderr);
    assert_eq!(t.agents()[0]["state"], "done");
}

#[test]
fn stopping_a_finished_parent_with_a_child_at_work_keeps_the_parent_from_waking() {
    let (server, t) = TestWorkspace::served("sig-stop-parent", Dialect::Anthropic);
    server.push_for("Done", [Turn::text("finished")]);
    t.run(&["prompt", "--name", "Done", "finish"]).ok();
    assert_eq!(t.agents()[0]["state"], "done");
    server.push_for("Busy", [slow_turn(), Turn::text("never")]);
    t.run(&["dispatch", "Done", "--role", "worker", "--goal", "work a while", "--name", "Busy"]).ok();
    let (_, pgid) = recorded_group(&t, "slow");
    t.run(&["stop", "Done"]).ok();
    assert!(group(pgid).is_empty());
    // The child's obituary waits in the parent's inbox: nothing woke the parent.
    let states: Vec<(String, String)> = t
        .agents()
        .iter()
        .map(|a| {
            (a["name"].as_str().unwrap_or_default().to_owned(), a["state"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    assert!(states.contains(&("Done".into(), "stopped".into())), "{states:?}");
    assert_eq!(server.requests_for("Done").len(), 1);
}
