//! Bad input and refusals: a clear error naming the thing and the rule, exit 2
//! (usage/validation) or 1 (runtime), and nothing changed.

use crate::support::server::{Reply, Turn, error_body};
use crate::support::workspace::{Dialect, TestWorkspace};

fn config_tip(t: &TestWorkspace) -> String {
    t.git(&["rev-parse", "config/default"])
}

#[test]
fn malformed_config_is_refused_with_file_line_and_key() {
    let t = TestWorkspace::new("err-config");
    let before = config_tip(&t);
    let run = t.run(&["config", "set", "retry.max_attempts", "\"four\""]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("error: offshoot.toml:") && run.stderr.contains("`retry.max_attempts`"),
        "{}",
        run.stderr
    );
    let run = t.run(&["config", "set", "roles.worker.provider", "nowhere"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("`roles.worker.provider`: provider `nowhere` is not defined"), "{}", run.stderr);
    assert_eq!(config_tip(&t), before, "a refused edit must author nothing");

    let bad = t.root.join("bad.toml");
    let validate = |text: &str| {
        std::fs::write(&bad, text).expect("write");
        t.run(&["config", "validate", "--file", bad.to_str().expect("utf-8")])
    };
    let run = validate(
        "version = 1\n[providers.p]\nprotocol = \"command\"\ncommand = [\"x\"]\n[roles.worker]\nprovider = \"p\"\nmodel = \"m\"\ntools = [\"teleport\"]\n",
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("offshoot.toml:8: `roles.worker.tools`: tool `teleport` does not exist"),
        "{}",
        run.stderr
    );
    let run = validate("version = 1\n[providers.p]\nprotocol = \"ollama\"\n");
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("offshoot.toml:3: `providers.p.protocol`: unknown variant `ollama`"), "{}", run.stderr);
}

#[test]
fn a_bad_template_creates_no_workspace() {
    let t = TestWorkspace::new("err-template");
    std::fs::create_dir_all(t.home.join("template")).expect("dir");
    std::fs::write(t.home.join("template/offshoot.toml"), "version = 1\n[roles\n").expect("write");
    let target = t.root.join("never");
    let run = t.run_bare(&["new", target.to_str().expect("utf-8")]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("offshoot.toml:2"), "{}", run.stderr);
    assert!(!target.exists());
}

#[test]
fn unknown_role_and_missing_key_create_nothing() {
    let (server, mut t) = TestWorkspace::served("err-role", Dialect::Anthropic);
    let run = t.run(&["prompt", "--role", "wizard", "hi"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("role `wizard` does not exist in config lineage `default`"), "{}", run.stderr);

    t.env("ANTHROPIC_API_KEY", "");
    let run = t.run(&["prompt", "hi"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("needs an API key in `ANTHROPIC_API_KEY`, which is not set"), "{}", run.stderr);
    assert!(t.agents().is_empty());
    assert!(server.requests().is_empty());
}

#[test]
fn unknown_agents_and_path_like_ids_are_refused() {
    let mut t = TestWorkspace::new("err-ids");
    t.env("ANTHROPIC_API_KEY", "k");
    let run = t.run(&["log", "nosuch"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("error: agent `nosuch` does not exist"), "{}", run.stderr);
    assert!(run.stderr.contains("hint: `offshoot ls` lists the agents"), "{}", run.stderr);
    for bad in ["../etc", "a/b", ".."] {
        let run = t.run(&["send", bad, "hi"]);
        assert_eq!(run.code, 2, "{bad}");
        assert!(run.stderr.contains("must not contain `/` or `..`"), "{}", run.stderr);
    }
    let run = t.run(&["prompt", "--name", "evil/name", "hi"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("name `evil/name` must not contain `/` or `..`"), "{}", run.stderr);
    assert!(t.agents().is_empty());
}

#[test]
fn new_refuses_a_non_empty_target() {
    let t = TestWorkspace::new("err-new");
    let target = t.root.join("occupied");
    std::fs::create_dir_all(&target).expect("dir");
    std::fs::write(target.join("keep.txt"), "mine").expect("write");
    let run = t.run_bare(&["new", target.to_str().expect("utf-8")]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("is not empty"), "{}", run.stderr);
    let left: Vec<_> = std::fs::read_dir(&target).expect("ls").flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("keep.txt")]);
}

#[test]
fn unreachable_base_url_fails_and_keeps_nothing() {
    let mut t = TestWorkspace::new("err-unreachable");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = format!("http://127.0.0.1:{}", listener.local_addr().expect("addr").port());
    drop(listener);
    t.set("providers.anthropic.base_url", &dead);
    t.set("retry.max_attempts", "2");
    t.env("ANTHROPIC_API_KEY", "k");
    let run = t.run(&["prompt", "hi"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains(&format!("cannot reach {dead}/v1/messages")), "{}", run.stderr);
    assert!(run.stderr.contains("nothing was kept"), "{}", run.stderr);
    assert!(t.agents().is_empty());
}

#[test]
fn provider_refusals_are_not_retried_and_keep_nothing() {
    for (code, hint) in [(401, "refused the API key"), (400, "refused the request")] {
        let (server, t) = TestWorkspace::served(&format!("err-{code}"), Dialect::Anthropic);
        server.push(Reply::Status {
            code,
            retry_after: None,
            body: error_body("anthropic", "authentication_error", "invalid x-api-key"),
        });
        server.push(Reply::Turn(Turn::text("never reached")));
        let run = t.run(&["prompt", "hi"]);
        assert_eq!(run.code, 1);
        assert!(
            run.stderr.contains(&format!("HTTP {code}")) && run.stderr.contains("invalid x-api-key"),
            "{}",
            run.stderr
        );
        assert!(run.stderr.contains(hint), "{}", run.stderr);
        assert_eq!(server.requests().len(), 1);
        assert!(t.agents().is_empty());
    }
}

#[test]
fn a_broken_edit_is_refused_and_kept_for_fixing() {
    let mut t = TestWorkspace::new("err-edit");
    let before = config_tip(&t);
    let script = t.root.join("break.sh");
    std::fs::write(&script, "#!/bin/sh\nprintf 'version = 1\\n[roles.worker\\n' > \"$1\"\n").expect("script");
    std::process::Command::new("chmod").args(["+x", script.to_str().expect("utf-8")]).status().expect("chmod");
    t.env("EDITOR", script.to_str().expect("utf-8"));
    let run = t.run(&["config", "edit"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("error: offshoot.toml:2:"), "{}", run.stderr);
    assert!(run.stderr.contains("hint: your text is kept in"), "{}", run.stderr);
    assert_eq!(config_tip(&t), before);
    // The next edit opens the kept text (the editor checks it sees it); putting the good text
    // back leaves the tip as it was and the kept file goes.
    let good = t.root.join("good.toml");
    std::fs::write(&good, t.run(&["config", "show"]).stdout).expect("good");
    let fix = t.root.join("fix.sh");
    let body = format!("#!/bin/sh\ngrep -q 'roles.worker$' \"$1\" || exit 7\ncp {} \"$1\"\n", good.display());
    std::fs::write(&fix, body).expect("script");
    std::process::Command::new("chmod").args(["+x", fix.to_str().expect("utf-8")]).status().expect("chmod");
    t.env("EDITOR", fix.to_str().expect("utf-8"));
    let run = t.run(&["config", "edit"]);
    assert!(run.stderr.contains("opening your earlier edit"), "{}", run.stderr);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!t.ws.join("tmp/config-edit-default-offshoot.toml").exists());
    assert_eq!(config_tip(&t), before);
}

#[test]
fn a_config_broken_behind_our_back_stops_every_verb_before_it_acts() {
    let t = TestWorkspace::new("err-broken-lineage");
    // Commit an invalid offshoot.toml with plain git, as a user could.
    let repo = t.ws.join("repo.git");
    let blob = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd {} && b=$(printf 'version = 1\\nunknown = 3\\n' | git --git-dir=. hash-object -w --stdin) && \
             t=$(printf '100644 blob %s\\toffshoot.toml\\n' $b | git --git-dir=. mktree) && \
             c=$(git --git-dir=. -c user.name=u -c user.email=u@x commit-tree $t -p config/default -m broken) && \
             git --git-dir=. update-ref refs/heads/config/default $c",
            repo.display()
        ))
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git");
    assert!(blob.status.success(), "{}", String::from_utf8_lossy(&blob.stderr));
    let run = t.run(&["prompt", "hi"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("offshoot.toml:2: `unknown`: unknown field `unknown`"), "{}", run.stderr);
    assert!(t.agents().is_empty());
}

#[test]
fn verbs_refuse_bad_arguments_by_name() {
    let (server, t) = TestWorkspace::served("err-args", Dialect::Anthropic);
    server.push(Reply::Turn(Turn::text("hi")));
    t.run(&["prompt", "--name", "Solo", "hello"]).ok();
    let cases: &[(&[&str], &str)] = &[
        (&["show", "Solo", "--step", "9"], "has no step 9 (it has 1)"),
        (&["prompt", "   "], "the message is empty"),
        (&["send", "Solo", ""], "the message is empty"),
        (&["fork", "--from", "no-such-ref", "x"], "`no-such-ref` names no commit"),
        (&["fork", "--from", "config/default", "x"], "is not an agent commit"),
        (&["prompt", "--name", "Solo", "again"], "name `Solo` is already taken by agent"),
        (&["config", "set", "retry.max_attempts", "3", "retry.initial_backoff_ms"], "takes KEY VALUE pairs"),
        (&["config", "show", "--lineage", "nope"], "config lineage `nope` does not exist"),
    ];
    for (args, expected) in cases {
        let run = t.run(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{args:?}: {}", run.stderr);
    }
    assert_eq!(t.agents().len(), 1);
}
