//! What a new user meets first: the workspace made on first use, by any number of
//! callers at once, and nothing made when the first prompt is refused.

use crate::support::workspace::{Dialect, TestWorkspace};

/// A test whose user has no workspace yet: the template points at `server`'s model.
fn fresh_home(name: &str) -> (crate::support::server::Server, TestWorkspace) {
    let (server, t) = TestWorkspace::served(name, Dialect::Anthropic);
    let config = t.git(&["show", "config/default:offshoot.toml"]);
    std::fs::create_dir_all(t.home.join("template")).expect("template");
    std::fs::write(t.home.join("template/offshoot.toml"), config).expect("template");
    (server, t)
}

#[test]
fn ten_first_prompts_at_once_all_succeed_in_one_workspace() {
    let (server, t) = fresh_home("first-use-concurrent");
    server.endless_text("done");
    let workspaces = t.home.join("workspaces");
    assert!(!workspaces.exists());
    let children: Vec<_> = (0..10)
        .map(|i| {
            t.command_bare()
                .args(["prompt", &format!("r{i}")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn offshoot")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "a first prompt failed: {stderr}");
    }
    assert_eq!(workspaces_in(&workspaces), ["default"], "one workspace and nothing beside it");
    let ls = t.run_bare(&["ls", "--json"]);
    let agents: Vec<serde_json::Value> = ls.ok().lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    assert_eq!(agents.len(), 10, "{}", ls.stdout);
    let config_commits = t.git_in("../home/workspaces/default/repo.git", &["rev-list", "--count", "config/default"]);
    assert_eq!(config_commits.trim(), "1", "one initial config, not one per caller");
}

/// The workspaces under the test's home, by name, and anything else there but the
/// makers' lock files (`.<name>.lock`, hidden).
pub(crate) fn workspaces_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !(n.starts_with('.') && n.ends_with(".lock")))
        .collect();
    names.sort();
    names
}

fn workspaces(t: &TestWorkspace) -> Vec<String> {
    workspaces_in(&t.home.join("workspaces"))
}

#[test]
fn a_refused_first_prompt_makes_no_workspace() {
    let t = TestWorkspace::new("first-use-refused");
    // No key for the default provider.
    let run = t.run_bare(&["prompt", "hello"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("ANTHROPIC_API_KEY"), "{}", run.stderr);
    assert_eq!(workspaces(&t), Vec::<String>::new(), "a missing key made a workspace");

    // A lineage a new workspace does not have, a role it does not have.
    let keyed = |args: &[&str]| {
        let o = t.command_bare().env("ANTHROPIC_API_KEY", "k").args(args).output().expect("run");
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (code, stderr) = keyed(&["prompt", "--lineage", "nope", "hello"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("`nope`"), "{stderr}");
    let (code, stderr) = keyed(&["prompt", "--role", "nobody", "hello"]);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("nobody"), "{stderr}");
    assert_eq!(workspaces(&t), Vec::<String>::new(), "a refused prompt made a workspace");

    // A repository with no commits yet.
    let empty = t.root.join("empty");
    std::fs::create_dir_all(&empty).expect("empty");
    let init = std::process::Command::new("git").args(["init", "-q"]).current_dir(&empty).output().expect("git");
    assert!(init.status.success());
    let o = t.command_bare().current_dir(&empty).env("ANTHROPIC_API_KEY", "k").args(["prompt", "hi"]).output();
    let o = o.expect("run");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("has no commits yet"), "{stderr}");
    assert_eq!(workspaces(&t), Vec::<String>::new(), "a repository with no commits got a workspace");
}

#[test]
fn a_broken_template_is_named_by_its_path_stops_everything_and_config_edit_opens_it() {
    let (server, mut t) = fresh_home("first-use-broken-template");
    server.endless_text("hi");
    let template = t.home.join("template/offshoot.toml");
    let good = std::fs::read_to_string(&template).expect("template");
    std::fs::write(&template, format!("x ]]\n{good}")).expect("break it");
    let shown = template.display().to_string();
    let said_broken = |run: &crate::support::workspace::Run| {
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(run.stderr.contains(&format!("{shown}:1")), "the template's own path: {}", run.stderr);
        assert!(run.stderr.contains("`offshoot config edit --template`"), "{}", run.stderr);
    };

    said_broken(&t.run_bare(&["prompt", "hello"]));
    let elsewhere = t.root.join("elsewhere");
    said_broken(&t.run_bare(&["new", elsewhere.to_str().expect("utf-8")]));
    assert!(!elsewhere.exists(), "`new` made its directory from a broken template");
    let suite = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/eval");
    let report = t.root.join("report.json");
    let eval = t.eval_run(&suite, &[], &report, &[]);
    said_broken(&eval);
    assert!(!report.exists(), "eval ran on a broken template");
    assert_eq!(workspaces(&t), Vec::<String>::new());

    // `config edit`, as the hint says and as a user would type it first: the editor
    // (here one that drops the broken first line) gets the template itself.
    t.env("EDITOR", "sed -i 1d");
    let edited = t.run_bare(&["config", "edit"]);
    edited.ok();
    assert!(edited.stderr.contains(&shown), "{}", edited.stderr);
    assert_eq!(std::fs::read_to_string(&template).expect("template"), good);
    t.run_bare(&["prompt", "hello"]).ok();
    assert_eq!(workspaces(&t), ["default"]);
}

#[test]
fn workspace_hints_name_what_is_there_and_first_use_says_it_made_one() {
    let t = TestWorkspace::new("first-use-hints");
    let file = t.root.join("a-file");
    std::fs::write(&file, "not a workspace").expect("file");
    let f = file.to_str().expect("utf-8");
    let run = t.run_bare(&["-w", f, "ls"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("is a file, not a workspace"), "{}", run.stderr);
    assert!(!run.stderr.contains("offshoot new"), "no hint to make a workspace on a file: {}", run.stderr);
    let run = t.command_bare().env("OFFSHOOT_HOME", &file).args(["ls"]).output().expect("run");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("OFFSHOOT_HOME") && stderr.contains("is not a directory"), "{stderr}");

    // First use says so, whichever verb makes the workspace.
    let set = t.run_bare(&["config", "set", "retry.max_attempts", "2"]);
    set.ok();
    assert!(set.stderr.contains("made the workspace"), "{}", set.stderr);
    assert_eq!(workspaces(&t), ["default"]);
    // `new` where a workspace is: said, with no `-w` in the hint that was never given.
    let again = t.run_bare(&["new"]);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(again.stderr.contains("there is a workspace at"), "{}", again.stderr);
    assert!(again.stderr.contains("`offshoot ls` lists its agents"), "{}", again.stderr);
    assert!(!again.stderr.contains("`-w` out"), "{}", again.stderr);
    let onto_file = t.run_bare(&["new", f]);
    assert_eq!(onto_file.code, 2, "{}", onto_file.stderr);
    assert!(onto_file.stderr.contains("is a file"), "{}", onto_file.stderr);
}

#[test]
fn a_first_use_killed_at_any_moment_leaves_nothing_the_next_cannot_use() {
    let (server, t) = fresh_home("first-use-killed");
    server.endless_text("done");
    let made = t.home.join("workspaces");
    // Killed sooner or later while the workspace is made (a few moments into it each).
    for (i, delay) in [2u64, 5, 10, 20, 40].into_iter().enumerate() {
        let _ = std::fs::remove_dir_all(&made);
        let mut first = t.command_bare().args(["prompt", "first"]).spawn().expect("spawn");
        std::thread::sleep(std::time::Duration::from_millis(delay));
        let _ = first.kill();
        let _ = first.wait();
        let next = t.run_bare(&["prompt", &format!("next {i}")]);
        next.ok();
        assert_eq!(workspaces(&t), ["default"], "after a kill {delay} ms in");
        t.run_bare(&["doctor"]).ok();
    }
}
