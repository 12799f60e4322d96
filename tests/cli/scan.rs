//! `offshoot scan`: a child whose driver died is relaunched once and finishes; one that
//! stays dead is reported to its parent once.

use std::time::Duration;

use serde_json::json;

use crate::support::server::Turn;
use crate::support::wait::wait_for;
use crate::support::workspace::{Dialect, TestWorkspace};

fn state(t: &TestWorkspace, id: &str) -> String {
    t.agents()
        .iter()
        .find(|a| a["id"] == id)
        .map(|a| a["state"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default()
}

/// The messages delivered to `name` from `from`.
fn results_from(t: &TestWorkspace, name: &str, from: &str) -> Vec<String> {
    let log = t.run(&["log", "--json", name]);
    log.ok()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .filter(|e| e["side"] == "user" && e["from"] == from)
        .map(|e| e["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn dispatch(name: &str) -> Turn {
    Turn::tool("d1", "dispatch", json!({"role": "worker", "goal": "work", "name": name}))
}

#[test]
fn a_child_whose_driver_was_killed_is_relaunched_once_and_its_result_arrives_once() {
    let (server, t) = TestWorkspace::served("scan-relaunch", Dialect::Anthropic);
    server.push_for("Home", [dispatch("Crasher"), Turn::text("waiting"), Turn::text("Crasher is back")]);
    server.push_for(
        "Crasher",
        [Turn::bash("c1", "echo $$ > started; sleep 30; echo late > late.txt"), Turn::text("done after relaunch")],
    );
    let home = t.run(&["prompt", "--detach", "--name", "Home", "dispatch a crasher"]).ok().trim().to_owned();
    let child = format!("{home}.1");
    let dir = t.ws.join("agents").join(&child);
    wait_for("the child's tool to start", || {
        std::fs::read_to_string(dir.join("started")).is_ok_and(|s| s.ends_with('\n'))
    });
    let pid = t.driver_pid(&child).expect("the driver's pid").to_string();
    assert!(std::process::Command::new("kill").args(["-9", &pid]).status().expect("kill").success());
    wait_for("the child's driver to let go", || state(&t, &child) != "running");
    wait_for("the parent to go quiet", || state(&t, &home) == "done");
    assert_eq!(state(&t, &child), "failed");

    let scan = t.run(&["scan"]);
    let out = scan.ok();
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with(&format!("relaunched {child} (tool calls cut short")), "{out}");
    wait_for("the parent to hear from the child", || {
        state(&t, &home) == "done" && !results_from(&t, &home, &child).is_empty()
    });
    let results = results_from(&t, &home, &child);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("done after relaunch"), "{results:?}");
    // The killed command was ended by the relaunched driver before it settled the call.
    assert!(!dir.join("late.txt").exists());
    // Nothing is left to do: a second scan does nothing.
    let again = t.run(&["scan"]);
    assert!(again.ok().is_empty(), "{}", again.stdout);
    assert!(again.stderr.contains("nothing to do"), "{}", again.stderr);
}

#[test]
fn a_child_that_stays_dead_is_reported_to_its_parent_exactly_once() {
    let (server, t) = TestWorkspace::served("scan-died", Dialect::Anthropic);
    // "Doomed" has no script: every call it makes is refused (400).
    server.push_for("Home", [dispatch("Doomed"), Turn::text("waiting"), Turn::text("Doomed is dead")]);
    let home = t.run(&["prompt", "--detach", "--name", "Home", "dispatch a doomed child"]).ok().trim().to_owned();
    let child = format!("{home}.1");
    wait_for("the child to fail", || state(&t, &child) == "failed" && state(&t, &home) == "done");
    assert_eq!(server.requests_for("Doomed").len(), 1);

    let first = t.run(&["--json", "scan"]);
    let found: serde_json::Value = serde_json::from_str(first.ok().trim()).expect("one finding");
    assert_eq!((found["action"].as_str(), found["agent"].as_str()), (Some("relaunched"), Some(child.as_str())));
    assert_eq!(found["why"], "a model call due");
    wait_for("the relaunch to fail too", || server.requests_for("Doomed").len() == 2 && state(&t, &child) == "failed");
    // Until the relaunched driver's process is gone, it may still be starting: no verdict.
    let pid = found["pid"].as_u64().expect("the relaunched driver's pid");
    wait_for("the relaunched driver to exit", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
    });

    let second = t.run(&["scan"]);
    assert_eq!(
        second.ok().trim(),
        format!("died {child} (a model call due; dead again after a relaunch): its parent {home} was told")
    );
    wait_for("the parent to answer the obituary", || {
        server.requests_for("Home").len() == 3 && state(&t, &home) == "done"
    });
    let told = results_from(&t, &home, &child);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].contains("epitaph: died"), "{told:?}");
    // Reported once: further scans neither relaunch nor tell again.
    for _ in 0..2 {
        let again = t.run(&["scan"]);
        assert!(again.ok().is_empty(), "{}", again.stdout);
    }
    assert_eq!(server.requests_for("Doomed").len(), 2);
    assert_eq!(results_from(&t, &home, &child).len(), 1);
}

#[test]
fn locks_and_temporary_objects_a_killed_process_left_are_swept_by_scan() {
    let t = TestWorkspace::new("scan-leftovers");
    let old = std::time::SystemTime::now() - Duration::from_secs(120);
    let plant = |path: std::path::PathBuf| {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        let file = std::fs::File::create(&path).expect("plant");
        file.set_modified(old).expect("age it");
        path
    };
    let left = [
        plant(t.ws.join("project.git/refs/heads/Someone.lock")),
        plant(t.ws.join("repo.git/refs/offshoot/names/Someone.lock")),
        plant(t.ws.join("repo.git/objects/tmp_object_git2_a1b2c3")),
        plant(t.ws.join("project.git/objects/tmp_object_git2_d4e5f6")),
    ];
    // A fresh lock is somebody's at work: left alone.
    let fresh = t.ws.join("repo.git/refs/heads/busy.lock");
    std::fs::write(&fresh, "").expect("fresh");
    let doctor = t.run(&["doctor"]);
    assert_ne!(doctor.code, 0);
    assert!(doctor.stdout.contains("Someone.lock"), "{}", doctor.stdout);
    t.run(&["scan"]).ok();
    for path in &left {
        assert!(!path.exists(), "{} is still there", path.display());
    }
    assert!(fresh.exists());
    std::fs::remove_file(&fresh).expect("remove");
    let doctor = t.run(&["doctor"]);
    assert_eq!(doctor.code, 0, "{}", doctor.stdout);
}
