//! Project mode: agents start from the user's repository, never write it, and give
//! their work back through `diff`, `export` and `apply`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::server::{Server, Turn};
use crate::support::workspace::{Dialect, TestWorkspace};

/// Plain git in `dir`, with an identity and no user config; its stdout.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let o = person_git(dir, args);
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Plain git in `dir` as a person would run it: no config of theirs, an identity of
/// the test's, any owner's directory trusted (it may be the test's unprivileged user's).
pub(crate) fn person_git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "User")
        .env("GIT_AUTHOR_EMAIL", "user@example.com")
        .env("GIT_COMMITTER_NAME", "User")
        .env("GIT_COMMITTER_EMAIL", "user@example.com")
        .args(["-c", "safe.directory=*"])
        .args(args)
        .output()
        .expect("git")
}

/// A repository with three commits (a.txt, b.txt, c.txt) and `a.txt` changed but not
/// committed, and a workspace for it made with `new --project`.
pub(crate) fn project(name: &str) -> (Server, TestWorkspace, PathBuf) {
    let server = Server::start();
    let mut t = TestWorkspace::new(name);
    let repo = t.root.join("project");
    std::fs::create_dir_all(&repo).expect("repo dir");
    git(&repo, &["init", "-q", "-b", "main"]);
    for (i, file) in ["a.txt", "b.txt", "c.txt"].iter().enumerate() {
        std::fs::write(repo.join(file), format!("line {i}\n")).expect("write");
        git(&repo, &["add", file]);
        git(&repo, &["commit", "-q", "-m", &format!("add {file}")]);
    }
    std::fs::write(repo.join("a.txt"), "line 0\nmine, not committed\n").expect("dirty");
    // The workspace made by `TestWorkspace::new` is replaced by a project one.
    std::fs::remove_dir_all(&t.ws).expect("rm ws");
    t.run_bare(&["new", t.ws.to_str().expect("utf-8"), "--project", repo.to_str().expect("utf-8")]).ok();
    t.set("retry.initial_backoff_ms", "5");
    t.set("retry.max_backoff_ms", "20");
    t.use_server(&server, Dialect::Anthropic);
    (server, t, repo)
}

/// Every file of the repository — `.git` (objects aside) and working tree — by path.
pub(crate) fn state(repo: &Path, skip: &[&str]) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![repo.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(repo).expect("inside").to_string_lossy().into_owned();
            if rel == ".git/objects" || skip.iter().any(|s| rel.starts_with(s)) {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(rel, std::fs::read(&path).expect("read"));
            }
        }
    }
    out
}

fn agent_dir(t: &TestWorkspace, name: &str) -> PathBuf {
    let id = t.agents().iter().find(|a| a["name"] == name).expect("agent")["id"].as_str().expect("id").to_owned();
    t.ws.join("agents").join(id)
}

#[test]
fn an_agent_works_on_the_project_without_writing_it_and_its_work_comes_back_by_export() {
    let (server, t, repo) = project("project-export");
    let before = state(&repo, &[]);
    server.push_turns([
        Turn::bash("c1", "echo changed >> b.txt && git commit -qam 'agent: change b'"),
        Turn::bash("c2", "echo new > d.txt"),
        Turn::text("done"),
    ]);
    let run = t.run(&["prompt", "--name", "Ada", "change b and add d"]);
    run.ok();
    assert!(run.stderr.contains("your uncommitted changes are not included (a.txt)"), "{}", run.stderr);
    assert_eq!(state(&repo, &[]), before, "the user's repository changed");

    // The agent's git shows the real history and its own commit.
    let dir = agent_dir(&t, "Ada");
    let log = git(&dir, &["log", "--format=%s"]);
    assert_eq!(log.lines().collect::<Vec<_>>(), ["agent: change b", "add c.txt", "add b.txt", "add a.txt"]);
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).expect("a"), "line 0\n", "the dirty change stayed behind");

    // `diff` shows both changes, and nothing else.
    let diff = t.run(&["diff", "Ada"]).ok().to_owned();
    assert!(diff.contains("+++ b/b.txt") && diff.contains("+changed"), "{diff}");
    assert!(diff.contains("+++ b/d.txt") && diff.contains("+new"), "{diff}");
    assert!(!diff.contains("a.txt"), "{diff}");
    let stat = t.run(&["diff", "Ada", "--stat"]).ok().to_owned();
    assert!(stat.contains("2 files changed"), "{stat}");

    // `export` makes offshoot/Ada on top of the user's HEAD: the agent's commit and one
    // of its uncommitted work; nothing else of the repository changes.
    let head = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    t.run(&["export", "Ada"]).ok();
    let chain = git(&repo, &["rev-list", "--first-parent", "offshoot/Ada"]);
    assert!(chain.lines().any(|l| l == head), "{chain}");
    let subjects = git(&repo, &["log", "--format=%s", "HEAD..offshoot/Ada"]);
    assert_eq!(subjects.lines().collect::<Vec<_>>(), ["Ada: uncommitted work", "agent: change b"]);
    assert_eq!(git(&repo, &["show", "offshoot/Ada:d.txt"]), "new\n");
    let skip = [".git/refs/heads/offshoot", ".git/logs/refs/heads/offshoot"];
    assert_eq!(state(&repo, &skip), state_without(&before, &skip));

    // More work: the second export fast-forwards.
    let first = git(&repo, &["rev-parse", "offshoot/Ada"]).trim().to_owned();
    server.push_turns([Turn::bash("c3", "echo more >> d.txt"), Turn::text("more done")]);
    t.run(&["send", "Ada", "more"]).ok();
    t.run(&["export", "Ada"]).ok();
    let second = git(&repo, &["rev-parse", "offshoot/Ada"]).trim().to_owned();
    assert_ne!(first, second);
    git(&repo, &["merge-base", "--is-ancestor", &first, &second]);
    assert_eq!(git(&repo, &["show", "offshoot/Ada:d.txt"]), "new\nmore\n");

    // Its git history rewritten: refused without --force, moved with it.
    server.push_turns([
        Turn::bash(
            "c4",
            "git reset -q --hard HEAD~1 && echo other > e.txt && git add e.txt && git commit -qm 'agent: other'",
        ),
        Turn::text("rewrote"),
    ]);
    t.run(&["send", "Ada", "start over"]).ok();
    let objects_before = count_objects(&repo);
    let refused = t.run(&["export", "Ada"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert_eq!(count_objects(&repo), objects_before, "a refused export copied objects");
    assert!(refused.stderr.contains("does not build on"), "{}", refused.stderr);
    assert!(refused.stderr.contains("--force"), "{}", refused.stderr);
    assert_eq!(git(&repo, &["rev-parse", "offshoot/Ada"]).trim(), second);
    t.run(&["export", "Ada", "--force"]).ok();
    assert_eq!(git(&repo, &["log", "-1", "--format=%s", "offshoot/Ada~1"]).trim(), "agent: other");
    // The user's own branch, HEAD and files never moved.
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]).trim(), head);
    assert_eq!(std::fs::read_to_string(repo.join("a.txt")).expect("a"), "line 0\nmine, not committed\n");
}

fn state_without(state: &BTreeMap<String, Vec<u8>>, skip: &[&str]) -> BTreeMap<String, Vec<u8>> {
    state.iter().filter(|(k, _)| !skip.iter().any(|s| k.starts_with(s))).map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[test]
fn apply_writes_the_change_as_uncommitted_work_or_refuses_changing_nothing() {
    let (server, t, repo) = project("project-apply");
    git(&repo, &["checkout", "-q", "--", "a.txt"]);
    server.push_turns([
        Turn::bash("c1", "printf 'line 1\\nfrom the agent\\n' > b.txt && echo new > d.txt && rm c.txt"),
        Turn::text("done"),
    ]);
    t.run(&["prompt", "--name", "Bo", "edit"]).ok();
    // A conflicting change of the user's to b.txt: refused, nothing written.
    std::fs::write(repo.join("b.txt"), "line 1\nfrom the user\n").expect("user change");
    let before = state(&repo, &[]);
    let refused = t.run(&["apply", "Bo"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("does not apply cleanly") && refused.stderr.contains("b.txt"),
        "{}",
        refused.stderr
    );
    assert_eq!(state(&repo, &[]), before);

    // On a clean tree it applies as uncommitted changes; HEAD and the index stay.
    git(&repo, &["checkout", "-q", "--", "b.txt"]);
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let index = std::fs::read(repo.join(".git/index")).expect("index");
    let run = t.run(&["apply", "Bo"]);
    run.ok();
    assert_eq!(std::fs::read_to_string(repo.join("b.txt")).expect("b"), "line 1\nfrom the agent\n");
    assert_eq!(std::fs::read_to_string(repo.join("d.txt")).expect("d"), "new\n");
    assert!(!repo.join("c.txt").exists());
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);
    assert_eq!(std::fs::read(repo.join(".git/index")).expect("index"), index);
    let status = git(&repo, &["status", "--porcelain"]);
    assert_eq!(status.lines().collect::<Vec<_>>(), [" M b.txt", " D c.txt", "?? d.txt"]);
}

#[test]
fn an_agent_using_git_cannot_change_the_users_repository() {
    let (server, t, repo) = project("project-git");
    let before = state(&repo, &[]);
    server.push_turns([
        Turn::bash(
            "c1",
            "git checkout -q main; git branch -D Rex; git checkout -q -b other; git reset -q --hard HEAD~2; \
             git push origin main 2>&1; git push --all 2>&1; git gc -q --prune=now; echo done",
        ),
        Turn::text("tried"),
    ]);
    t.run(&["prompt", "--name", "Rex", "break things"]).ok();
    assert_eq!(state(&repo, &[]), before);
    assert_eq!(git(&repo, &["log", "--format=%s"]).lines().count(), 3);
    git(&repo, &["fsck", "--no-progress"]);
}

#[test]
fn two_agents_see_only_their_own_work_and_a_child_inherits_and_returns_its_parents() {
    let (server, t, _repo) = project("project-many");
    server.push_for("One", [Turn::bash("o1", "echo one > one.txt"), Turn::text("one done")]);
    server.push_for("Two", [Turn::bash("t1", "ls; echo two > two.txt"), Turn::text("two done")]);
    t.run(&["prompt", "--name", "One", "write one"]).ok();
    t.run(&["prompt", "--name", "Two", "write two"]).ok();
    assert!(!server.result_text_for("Two", 1).contains("one.txt"), "{}", server.result_text_for("Two", 1));
    // A child of One starts with One's uncommitted work, and its own comes back.
    server.push_for(
        "One",
        [
            Turn::tool("d1", "dispatch", serde_json::json!({"role": "worker", "goal": "add to one", "name": "Kid"})),
            Turn::text("waiting"),
            Turn::text("kid is back"),
        ],
    );
    server.push_for("Kid", [Turn::bash("k1", "cat one.txt && echo kid > kid.txt"), Turn::text("kid done")]);
    t.run(&["send", "One", "get help"]).ok();
    assert!(server.result_text_for("Kid", 1).contains("one"), "{}", server.result_text_for("Kid", 1));
    let one = agent_dir(&t, "One");
    assert_eq!(std::fs::read_to_string(one.join("kid.txt")).expect("kid's work"), "kid\n");
    assert!(!agent_dir(&t, "Two").join("one.txt").exists());
    let diff = t.run(&["diff", "One"]).ok().to_owned();
    assert!(diff.contains("+++ b/kid.txt") && diff.contains("+++ b/one.txt") && !diff.contains("two.txt"), "{diff}");
}

#[test]
fn inside_a_repository_offshoot_uses_its_project_workspace() {
    let server = Server::start();
    let t = TestWorkspace::new("project-cwd");
    let repo = t.root.join("here");
    std::fs::create_dir_all(repo.join("sub")).expect("repo");
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("sub/f.txt"), "f\n").expect("f");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    let run = |args: &[&str]| {
        let mut c = t.command_bare();
        c.current_dir(repo.join("sub")).env("ANTHROPIC_BASE_URL", server.url()).env("ANTHROPIC_API_KEY", "k");
        let o = c.args(args).output().expect("run");
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    server.push_turns([Turn::bash("c1", "cat sub/f.txt"), Turn::text("read it")]);
    let (code, _, stderr) = run(&["prompt", "--name", "Here", "read f"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(server.result_text(1).contains('f'), "{}", server.result_text(1));
    let workspaces = crate::first_use::workspaces_in(&t.home.join("workspaces"));
    assert_eq!(workspaces.len(), 1, "{workspaces:?}");
    assert!(workspaces[0].starts_with("here-"), "{workspaces:?}");
    let (code, stdout, _) = run(&["ls"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("Here"), "{stdout}");

    // A repository with no commits, and a bare one, get a clear answer.
    let empty = t.root.join("empty");
    std::fs::create_dir_all(&empty).expect("empty");
    git(&empty, &["init", "-q"]);
    let o = t
        .command_bare()
        .current_dir(&empty)
        .env("ANTHROPIC_API_KEY", "k")
        .args(["prompt", "hi"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("has no commits yet"), "{stderr}");
    let bare = t.root.join("bare.git");
    git(&t.root, &["init", "-q", "--bare", bare.to_str().expect("utf-8")]);
    let o = t.command_bare().current_dir(&bare).args(["ls"]).output().expect("run");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is a bare repository"), "{stderr}");
}

#[test]
fn with_changes_takes_the_uncommitted_work_along_and_gitignored_output_stays_out_of_history() {
    let (server, t, repo) = project("project-changes");
    std::fs::write(repo.join(".gitignore"), "target/\n").expect("ignore");
    std::fs::write(repo.join("new.txt"), "untracked\n").expect("untracked");
    std::fs::remove_file(repo.join("c.txt")).expect("a deletion taken along too");
    // (The user's identity, as git would find it: the work taken along is authored so.)
    git(&repo, &["config", "user.name", "User"]);
    git(&repo, &["config", "user.email", "user@example.com"]);
    server.push_turns([
        Turn::bash("c1", "mkdir -p target && echo built > target/out.bin && cat a.txt new.txt && echo agent >> b.txt"),
        Turn::text("built"),
    ]);
    let run = t.run(&["prompt", "--name", "Cy", "--with-changes", "build"]);
    run.ok();
    assert!(run.stderr.contains("with your uncommitted changes"), "{}", run.stderr);
    let seen = server.result_text(1);
    assert!(seen.contains("mine, not committed") && seen.contains("untracked"), "{seen}");
    // The work taken along is a commit of its own, the user's: the agent starts on it.
    let dir = agent_dir(&t, "Cy");
    assert_eq!(
        git(&dir, &["log", "-1", "--format=%an|%s"]).trim(),
        "User|Uncommitted work, taken along by `offshoot prompt --with-changes`"
    );
    let status = git(&dir, &["status", "--porcelain"]);
    assert_eq!(status.trim(), "M b.txt", "only the agent's own change is uncommitted: {status}");
    // `diff` shows the agent's work alone; `export` keeps the two apart.
    let stat = t.run(&["diff", "Cy", "--stat"]).ok().to_owned();
    assert!(stat.contains("b.txt") && !stat.contains("a.txt") && !stat.contains("new.txt"), "{stat}");
    assert!(!dir.join("c.txt").exists(), "the deletion was taken along");
    t.run(&["export", "Cy"]).ok();
    let authors = git(&repo, &["log", "--format=%an|%s", "-2", "offshoot/Cy"]);
    let authors: Vec<&str> = authors.lines().collect();
    assert_eq!(authors[1], "User|Uncommitted work, taken along by `offshoot prompt --with-changes`", "{authors:?}");
    assert!(!authors[0].contains("Uncommitted work, taken along"), "{authors:?}");
    // target/ is ignored: on disk, never in the harness's history.
    let id = t.agents()[0]["id"].as_str().expect("id").to_owned();
    assert!(agent_dir(&t, "Cy").join("target/out.bin").exists());
    let files = t.git(&["ls-tree", "-r", "--name-only", &format!("agents/{id}")]);
    assert!(!files.contains("target/"), "{files}");
    assert!(files.lines().any(|l| l == "new.txt"), "{files}");
}

#[test]
fn a_linked_worktree_and_a_submodule_are_projects_and_agents_md_reaches_the_model() {
    let server = Server::start();
    let t = TestWorkspace::new("project-kinds");
    let main = t.root.join("main");
    std::fs::create_dir_all(&main).expect("main");
    git(&main, &["init", "-q", "-b", "main"]);
    std::fs::write(main.join("AGENTS.md"), "Use four spaces.\n").expect("agents.md");
    git(&main, &["add", "."]);
    git(&main, &["commit", "-q", "-m", "first"]);
    let wt = t.root.join("wt");
    git(&main, &["worktree", "add", "-q", "-b", "feature", wt.to_str().expect("utf-8")]);
    let run_in = |dir: &Path, args: &[&str]| {
        let o = t
            .command_bare()
            .current_dir(dir)
            .env("ANTHROPIC_BASE_URL", server.url())
            .env("ANTHROPIC_API_KEY", "k")
            .args(args)
            .output()
            .expect("run");
        (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    server.push_turns([Turn::bash("c1", "echo wt > wt.txt"), Turn::text("done")]);
    let (code, stderr) = run_in(&wt, &["prompt", "--name", "Wt", "work in the worktree"]);
    assert_eq!(code, 0, "{stderr}");
    let first = server.requests()[0].body.to_string();
    assert!(first.contains("Use four spaces."), "AGENTS.md is not in the first request: {first}");
    // The branch goes to the common repository; the worktree's own branch is refused.
    let (code, stderr) = run_in(&wt, &["export", "Wt", "--branch", "feature"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("is checked out"), "{stderr}");
    let (code, stderr) = run_in(&wt, &["export", "Wt"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(git(&main, &["show", "offshoot/Wt:wt.txt"]), "wt\n");

    // A submodule is the project when offshoot runs inside it.
    let lib = t.root.join("lib");
    std::fs::create_dir_all(&lib).expect("lib");
    git(&lib, &["init", "-q", "-b", "main"]);
    std::fs::write(lib.join("lib.txt"), "the library\n").expect("lib.txt");
    git(&lib, &["add", "."]);
    git(&lib, &["commit", "-q", "-m", "lib"]);
    git(&main, &["-c", "protocol.file.allow=always", "submodule", "add", "-q", lib.to_str().expect("utf-8"), "lib"]);
    server.push_turns([Turn::bash("c2", "cat lib.txt"), Turn::text("read")]);
    let (code, stderr) = run_in(&main.join("lib"), &["prompt", "--name", "Sub", "read the library"]);
    assert_eq!(code, 0, "{stderr}");
    let last = server.requests().len() - 1;
    assert!(server.result_text(last).contains("the library"), "{}", server.result_text(last));
}

#[test]
fn base_picks_the_start_forks_keep_it_and_the_export_is_authored_by_the_user() {
    let (server, t, repo) = project("project-base");
    git(&repo, &["config", "user.name", "Una User"]);
    git(&repo, &["config", "user.email", "una@example.com"]);
    server.push_turns([Turn::bash("c1", "ls; echo b > new.txt"), Turn::text("done")]);
    t.run(&["prompt", "--name", "Old", "--base", "HEAD~1", "start earlier"]).ok();
    let listing = server.result_text(1);
    assert!(listing.contains("b.txt") && !listing.contains("c.txt"), "{listing}");
    let dir = agent_dir(&t, "Old");
    assert_eq!(git(&dir, &["log", "--format=%s"]).lines().collect::<Vec<_>>(), ["add b.txt", "add a.txt"]);
    t.run(&["export", "Old"]).ok();
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%an <%ae> / %cn", "offshoot/Old"]).trim(),
        "Una User <una@example.com> / offshoot"
    );
    assert_eq!(git(&repo, &["rev-parse", "offshoot/Old~1"]), git(&repo, &["rev-parse", "HEAD~1"]));

    // A fork keeps the base: its diff is against the same commit.
    server.push_turns([Turn::bash("f1", "echo f > fork.txt"), Turn::text("forked")]);
    t.run(&["fork", "--from", "Old", "--name", "Forked", "and more"]).ok();
    let diff = t.run(&["diff", "Forked", "--stat"]).ok().to_owned();
    assert!(diff.contains("fork.txt") && diff.contains("new.txt") && diff.contains("2 files changed"), "{diff}");

    // A revision that names nothing is refused before anything is made.
    let run = t.run(&["prompt", "--base", "no-such-rev", "x"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("`no-such-rev` names no commit of the project"), "{}", run.stderr);
    assert_eq!(t.agents().len(), 2);
}

/// How many objects the repository's store holds (loose and packed).
fn count_objects(repo: &Path) -> String {
    git(repo, &["count-objects", "-v"])
        .lines()
        .filter(|l| l.starts_with("count:") || l.starts_with("in-pack:"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `cargo` and `rustc` of the toolchain that builds these tests, called by path (no
/// rustup proxy, which needs a HOME the sandbox does not give).
fn toolchain() -> (PathBuf, PathBuf) {
    let cargo = PathBuf::from(env!("CARGO"));
    let rustc = cargo.with_file_name("rustc");
    assert!(rustc.is_file(), "no rustc beside {}", cargo.display());
    (cargo, rustc)
}

/// A crate with a path dependency in the project, built once by the user.
fn small_crate(repo: &Path, cargo_home: &Path) {
    std::fs::create_dir_all(repo.join("src")).expect("src");
    std::fs::create_dir_all(repo.join("helper/src")).expect("helper");
    std::fs::write(
        repo.join("Cargo.toml"),
        "[package]\nname = \"warm\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nhelper = { path = \"helper\" }\n",
    )
    .expect("manifest");
    std::fs::write(repo.join("src/main.rs"), "fn main() { println!(\"{}\", helper::value()); }\n").expect("main");
    std::fs::write(
        repo.join("helper/Cargo.toml"),
        "[package]\nname = \"helper\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .expect("helper manifest");
    std::fs::write(repo.join("helper/src/lib.rs"), "pub fn value() -> u32 { 7 }\n").expect("lib");
    std::fs::write(repo.join(".gitignore"), "/target\n").expect("ignore");
    let (cargo, rustc) = toolchain();
    let built = Command::new(&cargo)
        .current_dir(repo)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", cargo_home)
        .env("CARGO_HOME", cargo_home)
        .env("RUSTC", &rustc)
        .args(["build", "--offline"])
        .output()
        .expect("cargo");
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "a small crate"]);
}

#[test]
fn an_agent_with_target_copied_builds_warm_and_never_records_the_copy() {
    let (server, t, repo) = project("project-warm");
    let cargo_home = t.root.join("cargo-home");
    small_crate(&repo, &cargo_home);
    let (cargo, rustc) = toolchain();
    let build = format!(
        "export CARGO_HOME=$TMPDIR/cargo-home RUSTC={} && {} build --offline -v 2>&1 | grep -E 'Compiling|Fresh|Finished|error'",
        rustc.display(),
        cargo.display()
    );
    // The agent builds, then un-ignores target/ and writes there, as an agent might.
    server.push_turns([
        Turn::bash("b1", &build),
        Turn::bash(
            "b2",
            "echo '# nothing ignored' > .gitignore && ls target && echo more > target/extra.txt && echo new > newwork.rs",
        ),
        Turn::text("built"),
    ]);
    let run = t.run(&["prompt", "--name", "Warm", "--copy-ignored", "target", "build it"]);
    run.ok();
    assert!(run.stderr.contains("copying target from your checkout"), "{}", run.stderr);
    let built = server.result_text(1);
    assert!(built.contains("Fresh warm") && built.contains("Fresh helper"), "{built}");
    assert!(!built.contains("Compiling"), "the second build compiles nothing: {built}");
    assert!(server.result_text(2).contains("debug"), "{}", server.result_text(2));
    let dir = agent_dir(&t, "Warm");
    assert!(dir.join("target/debug").is_dir());
    // Not in its history, even with its .gitignore emptied.
    let id = t.id_of("Warm");
    let tree = t.git(&["ls-tree", "-r", "--name-only", &format!("agents/{id}")]);
    assert!(!tree.contains("target/"), "{tree}");
    assert!(tree.contains(".gitignore") && tree.contains("helper/src/lib.rs"), "{tree}");
    assert!(tree.contains("newwork.rs"), "only the copied path is kept out: {tree}");
    // The user's checkout is as it was.
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    // A source that differs from the user's is built again, with what depends on it.
    server.push_turns([
        Turn::bash("b3", &format!("echo 'pub fn value() -> u32 {{ 8 }}' > helper/src/lib.rs && {build}")),
        Turn::text("rebuilt"),
    ]);
    t.run(&["send", "Warm", "change it"]).ok();
    let rebuilt = server.result_text(4);
    assert!(rebuilt.contains("Compiling helper") && rebuilt.contains("Compiling warm"), "{rebuilt}");
}

#[test]
fn copy_ignored_patterns_are_checked_before_anything_is_made() {
    let (_server, t, repo) = project("project-warm-refused");
    std::fs::write(repo.join(".gitignore"), "/build\n").expect("ignore");
    std::fs::create_dir_all(repo.join("build")).expect("build");
    std::fs::write(repo.join("build/out.o"), "object").expect("out");
    // A workspace kept inside the checkout, ignored: never copied.
    std::fs::create_dir_all(repo.join("build/inner-ws/repo.git")).expect("inner repo.git");
    std::fs::create_dir_all(repo.join("build/inner-ws/agents")).expect("inner agents");
    let refusals = [
        ("../outside", "plain path components"),
        ("/abs", "must be relative"),
        (".git", "`.git`"),
        ("*", "must be a plain path"),
        ("target", "`target` is not in your checkout"),
        ("a.txt", "`a.txt` is not ignored in your checkout"),
        ("build", "`build` holds or lies in an offshoot workspace"),
        ("build/inner-ws/agents", "holds or lies in an offshoot workspace"),
    ];
    for (pattern, said) in refusals {
        let run = t.run(&["prompt", "--copy-ignored", pattern, "go"]);
        assert_eq!(run.code, 2, "{pattern}: {}", run.stderr);
        assert!(run.stderr.contains(said), "{pattern}: {}", run.stderr);
    }
    assert!(t.agents().is_empty(), "nothing was made");
    // A role's setting is checked by config.
    let bad = t.run(&["config", "set", "roles.worker.copy_ignored", "[\"a/../b\"]"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("roles.worker.copy_ignored"), "{}", bad.stderr);
}
