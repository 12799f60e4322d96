//! Each agent's git is its own: no agent writes another's git state, hooks or config,
//! nor the shared repository; hooks and config an agent plants are put back after
//! its call, so a person's `git` in its directory runs nothing of them; damage to an
//! agent's git breaks only that agent, and its next run rebuilds it; what an agent
//! commits is published for the others (`agents/<name>`) and for `export`.

use std::process::Command;

use serde_json::json;

use crate::project::person_git;
use crate::support::server::Turn;
use crate::support::workspace::{Dialect, TestWorkspace, User};

#[test]
fn no_agent_writes_another_agents_git_as_root() {
    no_agent_writes_another_agents_git_and_what_it_plants_in_its_own_is_put_back("git-own", User::Own);
}

#[test]
fn no_agent_writes_another_agents_git_as_an_unprivileged_user() {
    no_agent_writes_another_agents_git_and_what_it_plants_in_its_own_is_put_back("git-own-user", User::Unprivileged);
}

fn no_agent_writes_another_agents_git_and_what_it_plants_in_its_own_is_put_back(name: &str, user: User) {
    let (server, t) = TestWorkspace::served_as(name, Dialect::Anthropic, user);
    server.push_for("Calm", [Turn::text("idle")]);
    t.run(&["prompt", "--name", "Calm", "wait"]).ok();
    let ran = t.root.join("ran");
    let planted = format!("#!/bin/sh\ntouch {}\n", ran.display());
    let hook = format!(
        "printf '{}' > $(sed 's/gitdir: //' .git)/hooks/post-commit; chmod +x $(sed 's/gitdir: //' .git)/hooks/post-commit",
        planted.replace('\n', "\\n")
    );
    server.push_for(
        "Vandal",
        [
            // The shared repository: read-only.
            Turn::bash("s1", &format!("printf '{}' > ../../project.git/hooks/post-commit", planted.replace('\n', "\\n"))),
            Turn::bash("s2", "git config --file ../../project.git/config core.fsmonitor 'touch /tmp/x'; git --git-dir=../../project.git update-ref refs/heads/Calm HEAD"),
            Turn::bash("s3", "rm -rf ../../project.git/objects ../../project.git/refs"),
            // Another agent's git: not even readable.
            Turn::bash("s4", &format!("ls ../../gits/{}", "$(ls ../../gits | grep -v $(basename $(sed 's/gitdir: //' .git)) | head -1)")),
            // Its own: allowed, and put back after the call.
            // (Locked against its owner: that binds a user, and the harness all the same.)
            Turn::bash(
                "o1",
                &format!(
                    "{hook}; git config core.fsmonitor 'touch {}'; g=$(sed 's/gitdir: //' .git); chmod 444 $g/config; chmod 555 $g/hooks",
                    ran.display()
                ),
            ),
            Turn::text("planted"),
        ],
    );
    t.run(&["prompt", "--name", "Vandal", "plant hooks"]).ok();
    let r = |n: usize| server.result_text_for("Vandal", n);
    for n in 1..=4 {
        assert!(!r(n).starts_with("exit code 0\n"), "{n}: {}", r(n));
        assert!(r(n).contains("denied") || r(n).contains("Read-only") || r(n).contains("unable"), "{n}: {}", r(n));
    }
    assert!(
        r(5).contains("[offshoot: your git's `config`, `hooks` put back: they are the harness's (a person's `git` in your directory would run them)]"),
        "{}",
        r(5)
    );
    // A person's git in the vandal's directory, and the other agent's commits, run nothing.
    let vandal = t.ws.join("agents").join(t.id_of("Vandal"));
    assert!(person_git(&vandal, &["status"]).status.success());
    server.push_for(
        "Calm",
        [
            Turn::bash("c1", "echo x > f && git add f && git commit -qm mine && git log --format=%s -1"),
            Turn::text("done"),
        ],
    );
    assert!(t.run(&["send", "Calm", "commit something"]).ok().contains("done"));
    assert_eq!(server.result_text_for("Calm", 2), "exit code 0\n<stdout>\nmine\n</stdout>");
    assert!(!ran.exists(), "a planted hook or fsmonitor ran");
    // The shared repository is as the harness keeps it.
    let shared = t.ws.join("project.git");
    assert!(
        std::fs::read_dir(shared.join("hooks"))
            .map(|d| d.filter_map(Result::ok).all(|e| e.file_name().to_string_lossy().ends_with(".sample")))
            .unwrap_or(true)
    );
    assert!(!std::fs::read_to_string(shared.join("config")).expect("config").contains("fsmonitor"));
}

#[test]
fn an_agent_that_wrecks_its_git_breaks_only_itself_and_its_next_run_rebuilds_it() {
    let (server, t) = TestWorkspace::served("git-wreck", Dialect::Anthropic);
    server.push_for(
        "Wrecker",
        [
            Turn::bash("w1", "echo a > a && git add a && git commit -qm kept && git log --format=%s -1"),
            Turn::bash(
                "w2",
                "g=$(sed 's/gitdir: //' .git) && rm $g/HEAD && mkfifo $g/HEAD && rm -rf $g/objects && echo wrecked",
            ),
            Turn::text("wrecked"),
        ],
    );
    t.run(&["prompt", "--name", "Wrecker", "wreck your git"]).ok();
    // A sibling works on meanwhile.
    server.push_for(
        "Sibling",
        [
            Turn::bash("s1", "echo s > s && git add s && git commit -qm sib && git log --format=%s -1"),
            Turn::text("fine"),
        ],
    );
    assert!(t.run(&["prompt", "--name", "Sibling", "work"]).ok().contains("fine"));
    assert_eq!(server.result_text_for("Sibling", 1), "exit code 0\n<stdout>\nsib\n</stdout>");
    // The next run makes the wrecked git again from what it published.
    server.push_for(
        "Wrecker",
        [Turn::bash("w3", "git log --format=%s -1 && git status --porcelain"), Turn::text("back")],
    );
    let run = t.run(&["send", "Wrecker", "look again"]);
    assert!(run.ok().contains("back"), "{}", run.stderr);
    assert!(run.stderr.contains("its git directory was gone or unreadable; it was made again"), "{}", run.stderr);
    assert_eq!(server.result_text_for("Wrecker", 4), "exit code 0\n<stdout>\nkept\n</stdout>");
    t.run(&["doctor"]).ok();
}

#[test]
fn what_an_agent_commits_is_published_for_the_others_and_for_export() {
    let (server, t) = TestWorkspace::served("git-publish", Dialect::Anthropic);
    server.push_for(
        "Lead",
        [
            Turn::tool("d1", "dispatch", json!({"role": "worker", "goal": "commit notes", "name": "Scribe"})),
            Turn::text("waiting"),
            Turn::bash("m1", "git log --format=%s -1 agents/Scribe && git show agents/Scribe:notes"),
            Turn::text("merged"),
        ],
    );
    server.push_for(
        "Scribe",
        [
            Turn::bash("s1", "echo noted > notes && git add notes && git commit -qm 'scribe: notes'"),
            Turn::text("committed"),
        ],
    );
    t.run(&["prompt", "--name", "Lead", "get notes"]).ok();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while server.requests_for("Lead").len() < 4 {
        assert!(std::time::Instant::now() < until, "the lead never merged");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let merged = server.result_text_for("Lead", 3);
    assert!(merged.contains("scribe: notes") && merged.contains("noted"), "{merged}");
    let shared = t.git_in("project.git", &["log", "--format=%s", "-1", "Scribe"]);
    assert_eq!(shared.trim(), "scribe: notes");
}

#[test]
fn a_person_s_git_in_an_agents_directory_runs_nothing_it_planted() {
    let (server, t) = TestWorkspace::served("git-person", Dialect::Anthropic);
    let ran = t.root.join("ran");
    let touch = format!("touch {}; true", ran.display());
    // A config of its own brought in through `commondir`, and a nested repository
    // (registered as a submodule) whose config has an fsmonitor.
    let commondir = format!(
        "g=$(sed 's/gitdir: //' .git) && mkdir -p .cfg && cp -r $g/objects $g/refs $g/HEAD .cfg/ && printf '[core]\\n\\tfsmonitor = \"{touch}\"\\n' > .cfg/config && echo $PWD/.cfg > $g/commondir && echo planted"
    );
    let nested = format!(
        "mkdir sub && cd sub && git init -q && git commit --allow-empty -qm s && git config core.fsmonitor \"{touch}\" && cd .. && git add sub && echo nested"
    );
    server.push_turns([Turn::bash("c1", &commondir), Turn::bash("n1", &nested), Turn::text("planted")]);
    t.run(&["prompt", "plant config"]).ok();
    assert!(server.result_text(1).contains("`commondir`"), "{}", server.result_text(1));
    let dir = t.ws.join("agents").join(t.only_agent());
    for args in [&["status"][..], &["diff"], &["log", "-1"]] {
        let out = person_git(&dir, args);
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(!ran.exists(), "a person's git ran what the agent planted");
}

#[test]
fn an_incomplete_commit_is_never_published_and_no_agent_makes_shared_branches() {
    let (server, t) = TestWorkspace::served("git-bogus", Dialect::Anthropic);
    let bogus = "T=$(printf 'tree 1111111111111111111111111111111111111111\\nauthor a <a@b> 0 +0000\\ncommitter a <a@b> 0 +0000\\n\\nbogus\\n' | git hash-object -t commit -w --literally --stdin) && git update-ref refs/heads/$(git branch --show-current) $T && echo $T > bogus.id";
    server.push_for(
        "Forger",
        [
            Turn::bash("b1", bogus),
            Turn::bash("b2", "git update-ref refs/heads/$(git branch --show-current) agents/main"),
            Turn::bash("b3", "git update-ref refs/heads/$(git branch --show-current) $(cat bogus.id)"),
            Turn::bash(
                "b4",
                "git update-ref refs/heads/$(git branch --show-current) agents/main && git checkout -q -b Squat",
            ),
            Turn::tool("d1", "dispatch", json!({"role": "worker", "goal": "nothing", "name": "Heir"})),
            Turn::text("done"),
            Turn::text("heard"),
        ],
    );
    server.push_for("Heir", [Turn::text("born")]);
    t.run(&["prompt", "--name", "Forger", "forge"]).ok();
    let first = server.result_text_for("Forger", 1);
    assert!(first.contains("were not published"), "{first}");
    let bogus_id = std::fs::read_to_string(t.ws.join("agents").join(t.id_of("Forger")).join("bogus.id")).expect("id");
    let missing = Command::new("git")
        .args(["--git-dir", t.ws.join("project.git").to_str().expect("utf-8"), "cat-file", "-e", bogus_id.trim()])
        .status()
        .expect("git");
    assert!(!missing.success(), "the incomplete commit reached the shared store");
    assert!(
        server.result_text_for("Forger", 3).contains("were not published"),
        "{}",
        server.result_text_for("Forger", 3)
    );
    let branches = t.git_in("project.git", &["for-each-ref", "--format=%(refname)"]);
    assert!(!branches.contains("Squat"), "{branches}");
    assert!(server.result_text_for("Forger", 5).starts_with("started"), "{}", server.result_text_for("Forger", 5));
    let fsck = t.git_in("project.git", &["fsck", "--connectivity-only"]);
    assert!(!fsck.contains("missing") && !fsck.contains("broken"), "{fsck}");
}

#[test]
fn an_agents_git_reads_nothing_of_the_harnesss_store_even_once_it_is_packed() {
    let (server, t) = TestWorkspace::served("git-harness-store", Dialect::Anthropic);
    server.push_for(
        "Keeper",
        [Turn::bash("k1", "echo kept > k && git add k && git commit -qm keep && echo ok"), Turn::text("kept")],
    );
    t.run(&["prompt", "--name", "Keeper", "remember TOPSECRET-4711"]).ok();
    // The user packs the harness's repository, as git's own upkeep would.
    let packed = person_git(&t.ws.join("repo.git"), &["gc", "-q"]);
    assert!(packed.status.success(), "{}", String::from_utf8_lossy(&packed.stderr));
    server.push_for(
        "Snoop",
        [
            Turn::bash("s1", "git cat-file --batch-all-objects --batch | grep -c TOPSECRET-4711"),
            Turn::bash(
                "s2",
                "echo mine > m && git add m && git commit -qm mine && git log --format=%s -1 agents/Keeper",
            ),
            Turn::text("done"),
        ],
    );
    t.run(&["prompt", "--name", "Snoop", "look around"]).ok();
    assert!(
        server.result_text_for("Snoop", 1).contains("<stdout>\n0\n</stdout>"),
        "{}",
        server.result_text_for("Snoop", 1)
    );
    assert_eq!(server.result_text_for("Snoop", 2), "exit code 0\n<stdout>\nkeep\n</stdout>");
    // The others' work is whole in the shared store, as a person's git sees it.
    let shared = person_git(&t.ws.join("project.git"), &["fsck", "--connectivity-only", "--no-dangling"]);
    assert!(shared.status.success(), "{}", String::from_utf8_lossy(&shared.stderr));
}

#[test]
fn a_workspace_named_by_a_relative_path_gives_its_agents_absolute_ones() {
    let (server, t) = TestWorkspace::served("git-relative", Dialect::Anthropic);
    server.push_turns([
        Turn::bash("r1", "git status --porcelain >/dev/null && touch \"$TMPDIR/t\" && echo fine"),
        Turn::text("done"),
    ]);
    // (The test's commands run in the directory holding `ws`.)
    let run = t.run_bare(&["-w", "ws", "prompt", "look"]);
    assert!(run.ok().contains("done"), "{}", run.stderr);
    assert_eq!(server.result_text(1), "exit code 0\n<stdout>\nfine\n</stdout>");
}

#[test]
fn a_publication_cut_short_by_a_kill_is_said_by_doctor_and_swept_by_scan() {
    let t = TestWorkspace::new("git-quarantine");
    let quarantines = t.ws.join("project.git/quarantine");
    // One whose maker is gone (no pid goes this high), one whose maker runs (this test).
    let gone = quarantines.join("4194305-0");
    let live = quarantines.join(format!("{}-0", std::process::id()));
    for dir in [&gone, &live] {
        std::fs::create_dir_all(dir.join("objects/ab")).expect("quarantine");
        std::fs::write(dir.join("objects/ab/cdef"), "half").expect("object");
    }
    let doctor = t.run(&["doctor"]);
    assert_ne!(doctor.code, 0);
    assert!(
        doctor.stdout.contains("4194305-0 holds the objects of a publication a kill cut short"),
        "{}",
        doctor.stdout
    );
    assert!(!doctor.stdout.contains(&live.display().to_string()), "{}", doctor.stdout);
    t.run(&["scan"]).ok();
    assert!(!gone.exists() && live.exists());
    std::fs::remove_dir_all(&live).expect("remove");
    assert_eq!(t.run(&["doctor"]).code, 0);
}

#[test]
fn an_agent_that_points_its_git_at_a_harness_commit_publishes_nothing_of_it() {
    let (server, t) = TestWorkspace::served("git-harness-commit", Dialect::Anthropic);
    // The commit its first step was made on: a harness commit, its id in the step record.
    let point = "x=$(python3 -c 'import json,os; print(json.load(open(os.environ[\"OFFSHOOT_WORKSPACE\"]+\"/steps/\"+os.environ[\"OFFSHOOT_AGENT\"]+\"/0001/meta.json\"))[\"commit\"])') && g=$(sed 's/gitdir: //' .git) && echo $x > $g/refs/heads/$(git branch --show-current) && echo $x";
    server.push_turns([Turn::bash("h1", point), Turn::text("done")]);
    t.run(&["prompt", "--name", "Pointer", "point"]).ok();
    let result = server.result_text(1);
    let harness_commit = result.lines().nth(2).expect("the commit").to_owned();
    assert_eq!(harness_commit.len(), 40, "{result}");
    let shared = t.ws.join("project.git");
    let has = person_git(&shared, &["cat-file", "-e", &harness_commit]);
    assert!(!has.status.success(), "the harness commit reached project.git");
    let branch = person_git(&shared, &["rev-parse", "refs/heads/Pointer"]);
    assert_ne!(String::from_utf8_lossy(&branch.stdout).trim(), harness_commit);
    assert!(result.contains("not published"), "{result}");
    assert_eq!(t.run(&["doctor"]).code, 0);
}

#[test]
fn a_directory_git_cannot_walk_stops_neither_the_agent_nor_the_config_put_back() {
    let (server, t) = TestWorkspace::served("git-deep", Dialect::Anthropic);
    let ran = t.root.join("ran");
    // Deeper than libgit2 walks (it stops at 100 levels), with a config planted in the
    // same command.
    let deep = format!(
        "d=$(python3 -c 'print(\"/\".join([\"n\"] * 120))') && mkdir -p $d && echo x > $d/f && git config core.fsmonitor 'touch {}; true' && echo deep",
        ran.display()
    );
    server.push_turns([
        Turn::bash("d1", &deep),
        Turn::bash("d2", "rm -rf n && echo shallow > kept.txt && echo shallow"),
        Turn::text("done"),
    ]);
    let out = t.run(&["prompt", "--name", "Deep", "nest"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let first = server.result_text(1);
    assert!(first.contains("`config` put back"), "{first}");
    assert!(first.contains("not recorded in this step"), "{first}");
    // The next command's changes are recorded: nothing was lost of the directory.
    let id = t.only_agent();
    let files = t.git(&["ls-tree", "-r", "--name-only", &format!("agents/{id}")]);
    assert!(files.lines().any(|f| f == "kept.txt"), "{files}");
    assert!(!files.contains("n/n/"), "{files}");
    assert!(person_git(&t.ws.join("agents").join(&id), &["status"]).status.success());
    assert!(!ran.exists(), "a person's git ran what the agent planted");
    assert_eq!(t.run(&["doctor"]).code, 0);
}
