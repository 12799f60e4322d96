//! `offshoot doctor`: a healthy workspace passes; each kind of damage is found, named,
//! and repaired where that is safe.

use std::process::Command;

use crate::support::server::Turn;
use crate::support::workspace::{Dialect, TestWorkspace};

/// Plain git on the workspace's repo.git, with `script` run in it by sh.
fn sh_in_repo(t: &TestWorkspace, script: &str) -> String {
    let o = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(t.ws.join("repo.git"))
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_DIR", ".")
        .output()
        .expect("sh");
    assert!(o.status.success(), "{script}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn age(path: &std::path::Path) {
    let o = Command::new("touch").args(["-d", "1 hour ago"]).arg(path).status().expect("touch");
    assert!(o.success());
}

#[test]
fn a_workspace_after_real_work_is_healthy() {
    let (server, t) = TestWorkspace::served("doctor-healthy", Dialect::Anthropic);
    server.push_for(
        "Boss",
        [
            Turn::tool("d1", "dispatch", serde_json::json!({"role": "worker", "goal": "write", "name": "Kid"})),
            Turn::text("waiting"),
            Turn::text("done"),
        ],
    );
    server.push_for("Kid", [Turn::bash("k1", "echo a > a.txt"), Turn::text("wrote")]);
    t.run(&["prompt", "--name", "Boss", "go"]).ok();
    let run = t.run(&["doctor"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("· healthy: checked 2 agents"), "{}", run.stderr);
}

#[test]
fn each_kind_of_damage_is_found_and_the_safe_ones_repaired() {
    let (server, t) = TestWorkspace::served("doctor-damage", Dialect::Anthropic);
    server.push_turns([Turn::bash("c1", "echo hi"), Turn::text("done")]);
    t.run(&["prompt", "--name", "Ada", "go"]).ok();
    let id = t.only_agent();
    let inbox = t.ws.join("inbox").join(&id);
    std::fs::create_dir_all(&inbox).expect("inbox");
    // Safe to repair: a stray temporary deposit, a stale ref lock, a mark of no agent.
    let tmp = inbox.join(".tmp-1-2");
    std::fs::write(&tmp, "half").expect("tmp");
    age(&tmp);
    let meta_tmp = t.ws.join("steps").join(&id).join("0001").join("meta.tmp");
    std::fs::write(&meta_tmp, "{").expect("meta tmp");
    age(&meta_tmp);
    sh_in_repo(&t, "b=$(printf x | git hash-object -w --stdin) && git update-ref refs/offshoot/stopped/zzzzzz $b");
    // Needs a person: a bad header, a stray file, an answer given twice, a lost object.
    std::fs::write(inbox.join("0007-user.md"), "no header here\n").expect("bad header");
    std::fs::write(inbox.join("notes.txt"), "mine\n").expect("stray");
    sh_in_repo(
        &t,
        &format!(
            "export GIT_INDEX_FILE=$(mktemp -u) && git read-tree agents/{id} && \
             b=$(git rev-parse agents/{id}:.offshoot/messages/0003-tool.json) && \
             git update-index --add --cacheinfo 100644,$b,.offshoot/messages/0005-tool.json && \
             tr=$(git write-tree) && c=$(git -c user.name=u -c user.email=u@x commit-tree $tr -p agents/{id} -m forged) && \
             git update-ref refs/heads/agents/{id} $c && rm -f $GIT_INDEX_FILE"
        ),
    );
    let lock = t.ws.join(format!("repo.git/refs/heads/agents/{id}.lock"));
    std::fs::write(&lock, "0000").expect("lock");
    age(&lock);
    let object_tmp = t.ws.join("repo.git/objects/tmp_object_offshoot_1_0");
    std::fs::write(&object_tmp, "x").expect("object tmp");
    age(&object_tmp);
    let goal = sh_in_repo(&t, &format!("git rev-parse agents/{id}:.offshoot/goal.md"));
    let goal = goal.trim();
    std::fs::remove_file(t.ws.join(format!("repo.git/objects/{}/{}", &goal[..2], &goal[2..]))).expect("rm object");

    let run = t.run(&["doctor"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let out = &run.stdout;
    for expected in [
        &format!("stray temporary file {}", tmp.display()),
        &format!("stray temporary file {} (a record rewrite", meta_tmp.display()),
        &format!("stale lock file {}", lock.display()),
        &format!("stray temporary file {} (an object write that was cut short)", object_tmp.display()),
        &"mark `refs/offshoot/stopped/zzzzzz` names agent `zzzzzz`, which does not exist".to_owned(),
        &format!("{} has no valid header", inbox.join("0007-user.md").display()),
        &format!("{} is not an inbox file", inbox.join("notes.txt").display()),
        &format!("agent `{id}`: entry 0005 answers call `c1` a second time"),
        &format!("object {goal} (reached from `refs/heads/agents/{id}`) is missing"),
    ] {
        assert!(out.contains(expected.as_str()), "missing `{expected}` in:\n{out}");
    }
    assert!(run.stderr.contains("9 findings"), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("`offshoot doctor --repair` makes the 5 safe repairs"), "{}", run.stderr);

    let repaired = t.run(&["doctor", "--repair"]);
    assert_eq!(repaired.code, 1, "the rest needs a person: {}", repaired.stderr);
    assert!(repaired.stderr.contains(&format!("· removed {}", tmp.display())), "{}", repaired.stderr);
    assert!(repaired.stderr.contains("· deleted refs/offshoot/stopped/zzzzzz"), "{}", repaired.stderr);
    assert!(repaired.stderr.contains("4 findings"), "{}", repaired.stderr);
    assert!(!tmp.exists() && !lock.exists() && !meta_tmp.exists() && !object_tmp.exists());
    assert!(!repaired.stdout.contains("stale lock") && repaired.stdout.contains("second time"), "{}", repaired.stdout);
}

#[test]
fn a_lock_left_by_a_killed_driver_does_not_stop_the_next() {
    let (server, t) = TestWorkspace::served("doctor-lock", Dialect::Anthropic);
    server.push_turns([Turn::text("one")]);
    t.run(&["prompt", "--name", "Ada", "go"]).ok();
    let id = t.only_agent();
    std::fs::write(t.ws.join(format!("repo.git/refs/heads/agents/{id}.lock")), "0000").expect("lock");
    let mut index_lock = t.ws.join("index").join(&id).into_os_string();
    index_lock.push(".lock");
    std::fs::write(&index_lock, "x").expect("index lock");
    server.push_turns([Turn::bash("c1", "echo x > x.txt"), Turn::text("two")]);
    let run = t.run(&["send", "Ada", "again"]);
    assert!(run.ok().contains("two"), "{}", run.stderr);
    t.run(&["doctor"]).ok();
}

#[test]
fn an_agents_git_a_kill_left_half_made_is_no_finding_and_the_next_run_makes_it_whole() {
    let (server, t) = TestWorkspace::served("doctor-half-git", Dialect::Anthropic);
    server.push_turns([
        Turn::bash("c1", "echo hi"),
        Turn::text("done"),
        Turn::bash("c2", "echo again"),
        Turn::text("again"),
    ]);
    t.run(&["prompt", "--name", "Ada", "go"]).ok();
    let id = t.only_agent();
    // What a kill during the attachment leaves: no hooks directory, no config, no `.git`.
    let git = t.ws.join("gits").join(&id);
    std::fs::remove_dir(git.join("hooks")).expect("hooks");
    std::fs::remove_file(git.join("config")).expect("config");
    let dot_git = t.ws.join("agents").join(&id).join(".git");
    std::fs::remove_file(&dot_git).expect(".git");
    let run = t.run(&["doctor"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let sent = t.run(&["send", "Ada", "again"]);
    assert_eq!(sent.code, 0, "{}", sent.stderr);
    for made in [git.join("hooks"), git.join("config"), dot_git.clone()] {
        assert!(made.exists(), "{} was not made again", made.display());
    }
    assert_eq!(t.run(&["doctor"]).code, 0);
}
