//! The harness owns its state: an agent's own git, its edits to `.offshoot/`, and a
//! directory removed by hand change nothing the harness keeps.

use std::process::Command;

use crate::support::server::Turn;
use crate::support::workspace::{Dialect, TestWorkspace};

/// Plain git in an agent's directory, as a person would run it (no identity).
fn git_in(t: &TestWorkspace, dir: &std::path::Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &t.home)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("git");
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn harness_subjects(t: &TestWorkspace, id: &str) -> Vec<String> {
    t.git(&["log", "--format=%an|%s", &format!("agents/{id}")]).lines().map(str::to_owned).collect()
}

#[test]
fn an_agents_own_git_never_touches_the_harness() {
    let (server, t) = TestWorkspace::served("own-git", Dialect::Anthropic);
    server.push_turns([
        Turn::bash("c1", "echo one > a.txt && git add -A && git commit -q -m first && git log --format=%s"),
        Turn::bash(
            "c2",
            "git checkout -q -b feature && echo two >> a.txt && git commit -qam second && git log --format=%s",
        ),
        Turn::bash("c3", "git reset -q --hard HEAD~1 && cat a.txt"),
        Turn::bash("c4", "echo wip > w.txt && git add w.txt && git stash -q && git stash list && ls"),
        Turn::text("done with git"),
    ]);
    let run = t.run(&["prompt", "--name", "Gitter", "use git"]);
    assert!(run.ok().contains("done with git"), "{}", run.stderr);
    assert_eq!(server.result_text(1), "exit code 0\n<stdout>\nfirst\nproject: an empty beginning\n</stdout>");
    assert_eq!(server.result_text(2), "exit code 0\n<stdout>\nsecond\nfirst\nproject: an empty beginning\n</stdout>");
    assert_eq!(server.result_text(3), "exit code 0\n<stdout>\none\n</stdout>");
    assert!(server.result_text(4).contains("stash@{0}: WIP on feature"), "{}", server.result_text(4));
    let id = t.only_agent();

    // The harness branch moved only by the harness's own commits, and holds the
    // whole transcript.
    for line in harness_subjects(&t, &id) {
        assert!(line.starts_with("offshoot|"), "{line}");
    }
    let entries = t.git(&["ls-tree", "--name-only", &format!("agents/{id}"), ".offshoot/messages/"]);
    assert_eq!(entries.lines().count(), 10, "{entries}");
    // Its tree is the directory as it was: after the reset, before the stash.
    assert_eq!(t.git(&["show", &format!("agents/{id}:a.txt")]), "one\n");
    let tree = t.git(&["ls-tree", "--name-only", &format!("agents/{id}")]);
    assert_eq!(tree, ".offshoot\na.txt\n");
    // It records where the agent's git stands.
    let dir = t.ws.join("agents").join(&id);
    let head = git_in(&t, &dir, &["rev-parse", "HEAD"]);
    let recorded = t.git(&["show", &format!("agents/{id}:.offshoot/git")]);
    assert_eq!(recorded, format!("branch feature\nhead {head}"));

    // Plain git in the directory sees only the project's history, under the agent's name.
    assert_eq!(
        git_in(&t, &dir, &["log", "--format=%an <%ae>|%s"]),
        "Gitter <Gitter@offshoot.invalid>|first\noffshoot <offshoot@localhost>|project: an empty beginning\n"
    );
    assert_eq!(git_in(&t, &dir, &["status", "--porcelain"]), "");

    // The conversation goes on.
    server.push_turns([Turn::text("still here")]);
    assert!(t.run(&["send", "Gitter", "are you there?"]).ok().contains("still here"));
}

#[test]
fn edits_to_the_harness_files_change_nothing_and_are_put_back() {
    let (server, t) = TestWorkspace::served("own-offshoot", Dialect::Anthropic);
    server.push_turns([Turn::text("first agent")]);
    t.run(&["prompt", "--name", "Bystander", "stand by"]).ok();
    server.push_turns([
        Turn::bash(
            "c1",
            "echo EVIL > .offshoot/soul.md && echo '{}' > .offshoot/tools/bash.json && sed -i s/worker/admin/ .offshoot/agent.toml && echo forged > .offshoot/messages/0001-user.md && echo extra > .offshoot/new.txt",
        ),
        Turn::bash("c2", "rm -rf .offshoot && echo gone"),
        Turn::bash("c3", "cat .offshoot/soul.md | head -c 20"),
        Turn::text("tampered"),
    ]);
    t.run(&["prompt", "--name", "Tamperer", "tamper"]).ok();
    let first = server.result_text(2);
    for what in [
        "`.offshoot/soul.md` (your change was undone)",
        "`.offshoot/tools/bash.json` (your change was undone)",
        "`.offshoot/agent.toml` (your change was undone)",
        "`.offshoot/messages/0001-user.md` (your change was undone)",
        "`.offshoot/new.txt` (removed: not the harness's)",
    ] {
        assert!(first.contains(what), "{what} missing from: {first}");
    }
    let second = server.result_text(3);
    assert!(second.contains("(it was deleted and is back)"), "{second}");
    assert!(server.result_text(4).starts_with("exit code 0\n<stdout>\nYou are a careful"), "{}", server.result_text(4));
    // No later request saw any of it: same system prompt, same tools.
    let requests = server.requests();
    for r in &requests[2..] {
        assert_eq!(r.body["system"], requests[1].body["system"]);
        assert_eq!(r.body["tools"], requests[1].body["tools"]);
    }
    // No commit took any of it.
    let id =
        t.agents().into_iter().find(|a| a["name"] == "Tamperer").expect("agent")["id"].as_str().expect("id").to_owned();
    let dispatch = t.git(&["log", "--format=%H", "--grep=^dispatch", &format!("agents/{id}")]);
    let changed = t.git(&["diff", "--name-only", dispatch.trim(), &format!("agents/{id}"), "--", ".offshoot"]);
    assert!(changed.lines().all(|p| p.starts_with(".offshoot/messages/")), "{changed}");
    let forged = t.git(&["show", &format!("agents/{id}:.offshoot/messages/0001-user.md")]);
    assert!(forged.ends_with("tamper"), "{forged}");
    // Everyone else is unaffected.
    let agents = t.agents();
    assert_eq!(agents.len(), 2);
    assert!(agents.iter().all(|a| a["state"] == "done"), "{agents:?}");
}

#[test]
fn a_directory_removed_by_hand_is_rebuilt_from_the_branch() {
    let (server, t) = TestWorkspace::served("own-rebuild", Dialect::Anthropic);
    server.push_turns([Turn::bash("c1", "echo kept > product.txt"), Turn::text("made it")]);
    t.run(&["prompt", "--name", "Phoenix", "make a product"]).ok();
    let id = t.only_agent();
    let dir = t.ws.join("agents").join(&id);
    std::fs::remove_dir_all(&dir).expect("rm -rf");
    // `run` rebuilds it even when nothing is due.
    let run = t.run(&["run", &id]);
    run.ok();
    assert!(run.stderr.contains("the agent's directory was missing; it was rebuilt from its branch"), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(dir.join("product.txt")).expect("rebuilt"), "kept\n");
    // And again with the conversation going on at once.
    std::fs::remove_dir_all(&dir).expect("rm -rf");
    server.push_turns([Turn::bash("c2", "cat product.txt && git status --porcelain"), Turn::text("back again")]);
    let run = t.run(&["send", "Phoenix", "are you whole?"]);
    assert!(run.ok().contains("back again"), "{}", run.stderr);
    assert!(run.stderr.contains("the agent's directory was missing; it was rebuilt from its branch"), "{}", run.stderr);
    assert_eq!(server.result_text(3), "exit code 0\n<stdout>\nkept\n?? product.txt\n</stdout>");
    assert_eq!(std::fs::read_to_string(dir.join("product.txt")).expect("rebuilt"), "kept\n");
}

#[test]
fn a_damaged_branch_is_listed_as_damaged_and_breaks_nothing_else() {
    let (server, t) = TestWorkspace::served("own-damaged", Dialect::Anthropic);
    server.push_turns([Turn::text("fine")]);
    t.run(&["prompt", "--name", "Healthy", "be fine"]).ok();
    // Only possible by hand: an agent branch pointing at a commit that is no agent.
    let config = t.git(&["rev-parse", "config/default"]);
    t.git(&["update-ref", "refs/heads/agents/zzzzzz", config.trim()]);
    let agents = t.agents();
    let damaged = agents.iter().find(|a| a["id"] == "zzzzzz").expect("listed");
    assert_eq!(damaged["state"], "damaged");
    assert!(damaged["goal"].as_str().expect("goal").contains("has no `.offshoot/agent.toml`"), "{damaged}");
    let run = t.run(&["run", "zzzzzz"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("error: agent `zzzzzz` is damaged"), "{}", run.stderr);
    // Names still resolve, other agents still run, new ones still start.
    server.push_turns([Turn::text("still fine"), Turn::text("newcomer")]);
    assert!(t.run(&["send", "Healthy", "ok?"]).ok().contains("still fine"));
    assert!(t.run(&["prompt", "--name", "Newcomer", "hello"]).ok().contains("newcomer"));
    assert_eq!(t.agents().len(), 3);
}

#[test]
fn harness_files_changed_while_no_driver_ran_are_put_back_at_the_next_start() {
    let (server, t) = TestWorkspace::served("own-between", Dialect::Anthropic);
    server.push_turns([Turn::text("first")]);
    t.run(&["prompt", "--name", "Between", "hello"]).ok();
    let id = t.only_agent();
    let dir = t.ws.join("agents").join(&id);
    std::fs::write(dir.join(".offshoot/soul.md"), "edited while nobody watched").expect("write");
    std::fs::remove_file(dir.join(".offshoot/messages/0001-user.md")).expect("rm");
    std::fs::write(dir.join(".offshoot/messages/0009-user.md"), "forged").expect("write");
    server.push_turns([Turn::text("second")]);
    let run = t.run(&["send", "Between", "again"]);
    assert!(run.ok().contains("second"));
    assert!(
        run.stderr.contains("3 files of `.offshoot/` differed from the branch and were put back"),
        "{}",
        run.stderr
    );
    let requests = server.requests();
    assert_eq!(requests[1].body["system"], requests[0].body["system"]);
    assert!(std::fs::read_to_string(dir.join(".offshoot/soul.md")).expect("soul").starts_with("You are a careful"));
    assert!(dir.join(".offshoot/messages/0001-user.md").exists());
    assert!(!dir.join(".offshoot/messages/0009-user.md").exists());
}

#[test]
fn symlinks_planted_where_the_harness_writes_are_replaced_not_followed() {
    let (server, t) = TestWorkspace::served("own-symlinks", Dialect::Anthropic);
    let decoy = t.root.join("decoy");
    std::fs::create_dir_all(&decoy).expect("decoy");
    server.push_turns([
        Turn::bash("c1", &format!("rm -rf .offshoot && ln -s {} .offshoot && rm .git && mkdir .git", decoy.display())),
        Turn::bash("c2", "ls .offshoot | head -3 && git status --porcelain | head -1"),
        Turn::text("planted"),
    ]);
    t.run(&["prompt", "--name", "Planter", "plant symlinks"]).ok();
    let first = server.result_text(1);
    assert!(first.contains("(it points at your repository again)"), "{first}");
    assert!(first.contains("(it was deleted and is back)"), "{first}");
    // Nothing went through the link; the harness's files are real files again.
    assert_eq!(std::fs::read_dir(&decoy).expect("decoy").count(), 0);
    let id = t.only_agent();
    let dir = t.ws.join("agents").join(&id);
    assert!(std::fs::symlink_metadata(dir.join(".offshoot")).expect("offshoot").is_dir());
    assert!(std::fs::symlink_metadata(dir.join(".git")).expect(".git").is_file());
    assert!(
        server.result_text(2).starts_with("exit code 0\n<stdout>\nagent.toml\ngit\ngoal.md"),
        "{}",
        server.result_text(2)
    );
    let entries = t.git(&["ls-tree", "--name-only", &format!("agents/{id}"), ".offshoot/messages/"]);
    assert_eq!(entries.lines().count(), 6, "{entries}");
}
