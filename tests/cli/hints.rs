//! Every hint is a command that works at that moment: each error path here is run, and
//! the commands its hints name are run after it, as a user would paste them.

use crate::support::server::{Reply, Server, Turn, error_body};
use crate::support::workspace::{Dialect, Run, TestWorkspace};

/// The `offshoot …` commands the hints of a failed run name, as argument lists (without
/// the program name).
fn hinted(run: &Run) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    for line in run.stderr.lines().filter(|l| l.starts_with("hint:")) {
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 1
                && let Some(rest) = part.strip_prefix("offshoot ")
            {
                commands.push(rest.split_whitespace().map(str::to_owned).collect());
            }
        }
    }
    commands
}

fn run_hint(t: &TestWorkspace, command: &[String]) -> Run {
    let args: Vec<&str> = command.iter().map(String::as_str).collect();
    t.run(&args)
}

#[test]
fn a_refused_request_hints_its_step_record_only_when_one_was_kept() {
    let (server, t) = TestWorkspace::served("hint-refused", Dialect::Anthropic);
    let refuse = || Reply::Status {
        code: 400,
        retry_after: None,
        body: error_body("anthropic", "invalid_request_error", "messages: bad"),
    };
    // The first call of a new agent: the agent is removed, so no hint may name it.
    server.push(refuse());
    let run = t.run(&["prompt", "--name", "Ada", "hello"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("nothing was kept"), "{}", run.stderr);
    assert!(!run.stderr.contains("offshoot show"), "{}", run.stderr);
    assert!(hinted(&run).is_empty(), "{}", run.stderr);
    assert!(t.agents().is_empty());

    // A later call: its record is kept and the hint names it.
    server.push(Reply::Turn(Turn::text("hi")));
    t.run(&["prompt", "--name", "Ada", "hello"]).ok();
    let id = t.only_agent();
    server.push(refuse());
    let run = t.run(&["send", "Ada", "and now?"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let hints = hinted(&run);
    assert_eq!(
        hints,
        [
            vec!["show".to_owned(), id.clone(), "--step".to_owned(), "2".to_owned(), "--request".to_owned()],
            vec!["run".to_owned(), id.clone()]
        ],
        "{}",
        run.stderr
    );
    let shown = run_hint(&t, &hints[0]);
    assert!(shown.ok().contains("and now?"), "{}", shown.stdout);
    server.push(Reply::Turn(Turn::text("answered at last")));
    let ran = run_hint(&t, &hints[1]);
    ran.ok();
    assert!(t.run(&["log", &id]).ok().contains("answered at last"));
}

#[test]
fn a_cut_off_answer_hints_a_limit_that_validates_and_a_run_that_goes_on() {
    let (server, t) = TestWorkspace::served("hint-truncated", Dialect::Anthropic);
    server.push(Reply::Truncated(Turn::text("half an ans")));
    let run = t.run(&["prompt", "write a lot"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let id = t.only_agent();
    let hints = hinted(&run);
    assert_eq!(hints.len(), 3, "{}", run.stderr);
    assert_eq!(hints[0][..3], ["config", "set", "roles.worker.max_output_tokens"], "{}", run.stderr);
    run_hint(&t, &hints[0]).ok();
    assert_eq!(hints[2], ["show", &id, "--step", "1"]);
    run_hint(&t, &hints[2]).ok();
    server.push(Reply::Turn(Turn::text("the whole answer")));
    assert_eq!(hints[1], ["run", &id]);
    run_hint(&t, &hints[1]).ok();
    assert!(t.run(&["log", &id]).ok().contains("the whole answer"));
}

#[test]
fn an_exhausted_budget_hints_the_limit_to_raise_by_name_and_value() {
    let (server, t) = TestWorkspace::served("hint-budget", Dialect::Anthropic);
    t.set("budgets.max_steps", "1");
    server.push(Reply::Turn(Turn::bash("call_1", "echo one")));
    let run = t.run(&["prompt", "count"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let id = t.only_agent();
    let hints = hinted(&run);
    assert_eq!(hints, [vec!["config", "set", "budgets.max_steps", "2"], vec!["run", id.as_str()]], "{}", run.stderr);
    run_hint(&t, &hints[0]).ok();
    server.push(Reply::Turn(Turn::text("counted")));
    run_hint(&t, &hints[1]).ok();
    assert!(t.run(&["log", &id]).ok().contains("counted"));
}

#[test]
fn a_config_broken_by_hand_hints_the_fix_and_never_a_run_that_fails_the_same_way() {
    let (server, mut t) = TestWorkspace::served("hint-broken", Dialect::Anthropic);
    server.push(Reply::Turn(Turn::text("hi")));
    t.run(&["prompt", "--name", "Ada", "hello"]).ok();
    let good = t.run(&["config", "show"]).stdout;
    let broken = t.root.join("broken.toml");
    std::fs::write(&broken, good.replace("version = 1", "version = 1\nunknown = 3")).expect("broken");
    let repo = t.ws.join("repo.git");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd {} && b=$(git --git-dir=. hash-object -w {}) && \
             t=$( (git --git-dir=. ls-tree config/default | grep -v '\toffshoot.toml$'; printf '100644 blob %s\\toffshoot.toml\\n' $b) | git --git-dir=. mktree) && \
             c=$(git --git-dir=. -c user.name=u -c user.email=u@x commit-tree $t -p config/default -m broken) && \
             git --git-dir=. update-ref refs/heads/config/default $c",
            repo.display(),
            broken.display()
        ))
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let run = t.run(&["send", "Ada", "again"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let hints = hinted(&run);
    assert_eq!(hints, [vec!["config", "edit"], vec!["config", "validate"]], "{}", run.stderr);
    let validate = run_hint(&t, &hints[1]);
    assert_eq!(validate.code, 2, "validate reports the same fault: {}", validate.stderr);
    assert!(validate.stderr.contains("unknown field `unknown`"), "{}", validate.stderr);

    // Saving the broken text unchanged says it is still broken, not "nothing changed".
    t.env("EDITOR", "true");
    let unchanged = run_hint(&t, &hints[0]);
    assert_eq!(unchanged.code, 2, "{}", unchanged.stderr);
    assert!(unchanged.stderr.contains("nothing changed, and the config is still not valid"), "{}", unchanged.stderr);
    std::fs::remove_file(t.ws.join("tmp/config-edit-default-offshoot.toml")).expect("discard the kept text");
    // The editor the hint opens shows the broken text; putting the good text back fixes it.
    let good_path = t.root.join("good.toml");
    std::fs::write(&good_path, &good).expect("good");
    let fix = t.root.join("fix.sh");
    let body = format!("#!/bin/sh\ngrep -q '^unknown = 3$' \"$1\" || exit 7\ncp {} \"$1\"\n", good_path.display());
    std::fs::write(&fix, body).expect("fix");
    std::process::Command::new("chmod").arg("+x").arg(&fix).status().expect("chmod");
    t.env("EDITOR", fix.to_str().expect("utf-8"));
    run_hint(&t, &hints[0]).ok();
    run_hint(&t, &hints[1]).ok();
    server.push(Reply::Turn(Turn::text("back again")));
    t.run(&["send", "Ada", "again"]).ok();
}

#[test]
fn hints_for_a_missing_workspace_lineage_or_agent_work_as_given() {
    let t = TestWorkspace::new("hint-names");
    // An unknown lineage: the hinted option names one that exists.
    let run = t.run(&["config", "show", "--lineage", "nope"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("hint: `--lineage default` uses an existing one"), "{}", run.stderr);
    t.run(&["config", "show", "--lineage", "default"]).ok();

    // An unknown agent.
    let run = t.run(&["log", "nobody"]);
    assert_eq!(run.code, 2);
    let hints = hinted(&run);
    assert_eq!(hints, [vec!["ls"]], "{}", run.stderr);
    run_hint(&t, &hints[0]).ok();

    // A directory that is not a workspace: the hinted `new` makes one there.
    let elsewhere = t.root.join("elsewhere");
    let run = t.run_bare(&["-w", elsewhere.to_str().expect("utf-8"), "ls"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let hints = hinted(&run);
    assert_eq!(hints, [vec!["new".to_owned(), elsewhere.display().to_string()]], "{}", run.stderr);
    let args: Vec<&str> = hints[0].iter().map(String::as_str).collect();
    t.run_bare(&args).ok();
    t.run_bare(&["-w", elsewhere.to_str().expect("utf-8"), "ls"]).ok();

    // The demo into an existing workspace: no `offshoot new`, which would fail the same way.
    let run = t.run_bare(&["demo", "-w", t.ws.to_str().expect("utf-8")]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(hinted(&run).is_empty(), "{}", run.stderr);
    assert!(run.stderr.contains("hint: give a new or empty directory (or leave `-w` out)"), "{}", run.stderr);
}

#[test]
fn a_missing_key_hints_the_variable_to_export() {
    let server = Server::start();
    let mut t = TestWorkspace::new("hint-key");
    t.use_server(&server, Dialect::Chat);
    t.env("OPENAI_API_KEY", "");
    let run = t.run(&["prompt", "hello"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("hint: export OPENAI_API_KEY=… and try again"), "{}", run.stderr);
    assert!(t.agents().is_empty());
    assert_eq!(server.requests().len(), 0);
}
