//! `offshoot rm`: an agent goes for good, with everything that was its; one with agents
//! below it only with `--tree`, a running one only with `--stop`. `offshoot gc`: disk
//! given back without losing anything, a running driver beside it.

use serde_json::json;

use crate::support::server::Turn;
use crate::support::wait::wait_for;
use crate::support::workspace::{Dialect, TestWorkspace};

/// Every path below `dir` whose name holds `needle`.
fn paths_with(dir: &std::path::Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_name().to_string_lossy().contains(needle) {
            found.push(path.display().to_string());
        }
        if path.is_dir() && !path.is_symlink() {
            found.extend(paths_with(&path, needle));
        }
    }
    found
}

#[test]
fn a_removed_agent_leaves_nothing_and_its_name_is_free_again() {
    let (server, t) = TestWorkspace::served("rm-one", Dialect::Anthropic);
    server.push_turns([Turn::bash("c1", "echo work > notes.txt"), Turn::text("done")]);
    t.run(&["prompt", "--name", "Gone", "write notes"]).ok();
    server.push_turns([Turn::text("kept")]);
    t.run(&["prompt", "--name", "Kept", "stay"]).ok();
    let id = t.id_of("Gone");
    let removed = t.run(&["rm", "Gone"]);
    assert!(removed.ok().is_empty());
    assert!(removed.stderr.contains(&format!("removed `Gone` ({id}): 2 steps")), "{}", removed.stderr);
    let ls = t.run(&["ls"]).ok().to_owned();
    assert!(!ls.contains("Gone") && ls.contains("Kept"), "{ls}");
    // No branch, no project branch, no file or directory named after it.
    assert!(!t.git(&["for-each-ref"]).contains(&id));
    assert!(!t.git_in("project.git", &["branch", "--list"]).contains("Gone"));
    assert_eq!(paths_with(&t.ws, &id), Vec::<String>::new());
    t.git(&["fsck", "--strict"]);
    t.run(&["doctor"]).ok();
    // The name can be taken again.
    server.push_turns([Turn::text("again")]);
    t.run(&["prompt", "--name", "Gone", "come back"]).ok();
    let unknown = t.run(&["rm", "Nobody"]);
    assert_eq!(unknown.code, 2, "{}", unknown.stderr);
}

#[test]
fn agents_below_go_only_with_tree_and_a_running_one_only_with_stop() {
    let (server, t) = TestWorkspace::served("rm-tree", Dialect::Anthropic);
    server.push_turns([
        Turn::tool("d1", "dispatch", json!({"role": "worker", "goal": "write kid.txt", "name": "Kid"})),
        Turn::text("dispatched"),
    ]);
    server.push_for("Kid", [Turn::text("kid done")]);
    server.push_turns([Turn::text("parent done")]);
    t.run(&["prompt", "--name", "Parent", "dispatch one"]).ok();
    let (parent, kid) = (t.id_of("Parent"), t.id_of("Kid"));
    let refused = t.run(&["rm", "Parent"]);
    assert_eq!(refused.code, 2);
    assert!(
        refused.stderr.contains("has 1 agent(s) below it") && refused.stderr.contains("--tree"),
        "{}",
        refused.stderr
    );
    assert_eq!(t.agents().len(), 2, "nothing was removed");
    let removed = t.run(&["rm", "Parent", "--tree", "--json"]);
    let gone: Vec<serde_json::Value> = removed.ok().lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    assert_eq!(
        gone.iter().map(|g| g["agent"].as_str().unwrap_or("")).collect::<Vec<_>>(),
        [kid.as_str(), parent.as_str()]
    );
    assert!(t.agents().is_empty());

    // A running agent: refused, then stopped and removed.
    server.push_turns([Turn::bash("c1", "touch started; sleep 60"), Turn::text("never")]);
    let id = t.run(&["prompt", "--detach", "--name", "Busy", "be slow"]).ok().trim().to_owned();
    let dir = t.ws.join("agents").join(&id);
    wait_for("the command to start", || dir.join("started").exists());
    let busy = t.run(&["rm", "Busy"]);
    assert_eq!(busy.code, 2);
    assert!(
        busy.stderr.contains("is running; nothing was removed") && busy.stderr.contains("--stop"),
        "{}",
        busy.stderr
    );
    assert!(dir.exists());
    t.run(&["rm", "Busy", "--stop"]).ok();
    assert!(!dir.exists() && t.agents().is_empty());
}

#[test]
fn gc_beside_a_running_driver_takes_nothing_it_needs() {
    let (server, t) = TestWorkspace::served("gc-race", Dialect::Anthropic);
    server.endless_steps(40);
    t.run(&["prompt", "--name", "Done", "count"]).ok();
    let done = t.id_of("Done");
    // A second agent at work while gc runs: its command waits for a file gc cannot touch.
    let gate = t.root.join("gate");
    server.endless_steps(0);
    server.push_turns([
        Turn::bash(
            "c1",
            &format!("touch started; while [ ! -e {} ]; do sleep 0.05; done; echo passed", gate.display()),
        ),
        Turn::bash("c2", "echo second > second.txt"),
        Turn::text("busy done"),
    ]);
    let busy = t.run(&["prompt", "--detach", "--name", "Busy", "wait"]).ok().trim().to_owned();
    let busy_dir = t.ws.join("agents").join(&busy);
    wait_for("the command to start", || busy_dir.join("started").exists());
    let disk = |id: &str| -> u64 {
        let listed = t.run(&["ls", "--disk", "--json"]).ok().to_owned();
        let agents: Vec<serde_json::Value> = listed.lines().map(|l| serde_json::from_str(l).expect("json")).collect();
        agents.iter().find(|a| a["id"] == id).and_then(|a| a["disk_bytes"].as_u64()).expect("disk_bytes")
    };
    let before = disk(&done);
    // What a gc killed while deleting a directory left (named after a process gone).
    let trash = t.ws.join("tmp/trash-abcdef-4194303999-0");
    std::fs::create_dir_all(trash.join("deep")).expect("trash");
    assert!(t.run(&["ls", "--disk"]).ok().contains("DISK"));
    assert!(t.run(&["tree", "Done", "--disk"]).ok().contains("MiB on disk"));
    let tree: serde_json::Value =
        serde_json::from_str(t.run(&["tree", "Done", "--disk", "--json"]).ok().trim()).expect("json");
    assert_eq!(tree["disk_bytes"].as_u64(), Some(before));
    let collected = t.run(&["gc"]);
    collected.ok();
    assert!(disk(&done) < before, "its directory went: {} of {before} bytes left", disk(&done));
    assert!(collected.stderr.contains("removed the directories of 1 agents"), "{}", collected.stderr);
    assert!(
        collected.stderr.contains(&format!("kept the directory of `{busy}`: it is running")),
        "{}",
        collected.stderr
    );
    assert!(
        collected.stderr.contains("repo.git: ") && collected.stderr.contains("in one pack"),
        "{}",
        collected.stderr
    );
    assert!(!t.ws.join("agents").join(&done).exists() && busy_dir.exists());
    assert!(!trash.exists(), "a cut-short removal's trash is swept");
    let packs = std::fs::read_dir(t.ws.join("repo.git/objects/pack"))
        .expect("packs")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
        .count();
    assert_eq!(packs, 1);
    // The running agent goes on and finishes as if nothing happened.
    std::fs::write(&gate, "").expect("gate");
    wait_for("the busy agent to finish", || t.agents().iter().all(|a| a["state"] != "running"));
    assert_eq!(t.git(&["show", &format!("agents/{busy}:second.txt")]), "second\n");
    // The finished one comes back from its branch when written to.
    server.push_turns([Turn::bash("c3", "cat step 2>/dev/null; ls | head -3; echo back"), Turn::text("back")]);
    t.run(&["send", "Done", "are you there"]).ok();
    assert!(t.ws.join("agents").join(&done).is_dir());
    t.git(&["fsck", "--strict"]);
    t.run(&["doctor"]).ok();
}

#[test]
fn gc_while_a_driver_commits_step_after_step_loses_no_object() {
    let (server, t) = TestWorkspace::served("gc-steps", Dialect::Anthropic);
    server.endless_steps(120);
    // What was there before is old: gc walks and lets go with the least grace while
    // the driver writes objects no ref names yet.
    age_files(&t.ws.join("repo.git/objects"), 30);
    let racer = t.run(&["prompt", "--detach", "--name", "Racer", "count fast"]).ok().trim().to_owned();
    // Merge the packs again and again while the driver writes and packs its own.
    let mut rounds = 0;
    while t.agents().iter().any(|a| a["state"] == "running") || rounds == 0 {
        t.run(&["gc", "--prune-after", "1h"]).ok();
        rounds += 1;
    }
    assert!(rounds >= 2, "gc ran {rounds} times during the run");
    assert!(t.step_records(&racer).len() >= 120);
    t.git(&["fsck", "--strict"]);
    t.run(&["doctor"]).ok();
    let log = t.run(&["log", &racer]).ok().to_owned();
    assert!(log.contains("step 119") || log.lines().count() > 200, "{}", &log[..log.len().min(2000)]);
}

/// Sets the time of every file below `dir` (objects, packs) `days` back.
fn age_files(dir: &std::path::Path, days: u64) {
    let then = std::time::SystemTime::now() - std::time::Duration::from_secs(days * 86_400);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            age_files(&path, days);
        } else if let Ok(file) =
            std::fs::File::options().append(true).open(&path).or_else(|_| std::fs::File::open(&path))
        {
            let _ = file.set_modified(then);
        }
    }
}

#[test]
fn gc_lets_go_of_a_removed_agents_history_once_old_and_keeps_every_other_object() {
    let (server, t) = TestWorkspace::served("gc-prune", Dialect::Anthropic);
    server.push_turns([Turn::bash("c1", "echo only-the-removed-agent-wrote-this > gone.txt"), Turn::text("done")]);
    t.run(&["prompt", "--name", "Gone", "write"]).ok();
    server.push_turns([Turn::bash("c1", "echo kept > kept.txt"), Turn::text("done")]);
    t.run(&["prompt", "--name", "Kept", "write"]).ok();
    let (gone, kept) = (t.id_of("Gone"), t.id_of("Kept"));
    let gone_tip = t.git(&["rev-parse", &format!("agents/{gone}")]).trim().to_owned();
    let gone_blob = t.git(&["rev-parse", &format!("agents/{gone}:gone.txt")]).trim().to_owned();
    t.run(&["rm", "Gone"]).ok();

    // Too short a grace is refused, naming the rule; nothing is touched.
    let short = t.run(&["gc", "--prune-after", "10m"]);
    assert_eq!(short.code, 2, "{}", short.stderr);
    assert!(short.stderr.contains("--prune-after `10m`") && short.stderr.contains("at least 1h"), "{}", short.stderr);
    assert_eq!(t.run(&["gc", "--prune-after", "soon"]).code, 2);

    // Young, the removed agent's objects stay (the default grace is 14 days).
    t.run(&["gc"]).ok();
    t.git(&["cat-file", "-e", &gone_tip]);
    // Old, they go; everything an agent, a record or an index names stays.
    age_files(&t.ws.join("repo.git/objects"), 30);
    let gc = t.run(&["gc"]);
    assert!(gc.ok().is_empty());
    assert!(gc.stderr.contains("that nothing reached for 14d let go"), "{}", gc.stderr);
    for object in [&gone_tip, &gone_blob] {
        let probe = std::process::Command::new("git")
            .args(["--git-dir", &t.ws.join("repo.git").display().to_string(), "cat-file", "-e", object])
            .output()
            .expect("git");
        assert!(!probe.status.success(), "{object} is still there");
    }
    t.git(&["fsck", "--strict", "--no-dangling"]);
    t.run(&["doctor"]).ok();
    let shown = t.run(&["show", &kept, "--step", "2", "--request"]);
    assert_eq!(shown.ok().as_bytes(), &server.requests()[3].raw[..]);
    server.push_turns([Turn::bash("c2", "cat kept.txt"), Turn::text("still here")]);
    assert!(t.run(&["send", "Kept", "look"]).ok().contains("still here"));
    assert!(server.result_text(5).contains("kept"), "{}", server.result_text(5));
    t.git(&["fsck", "--strict"]);
}
