//! Policy: permission rules on tool calls (allow / ask / deny, in Claude Code's
//! syntax), what the model is told when one refuses, and what is recorded.

use crate::support::server::Turn;
use crate::support::workspace::{Dialect, TestWorkspace};

#[test]
fn a_deny_rule_refuses_a_push_however_it_is_chained_and_names_itself() {
    let (server, t) = TestWorkspace::served("policy-deny", Dialect::Anthropic);
    t.set("permissions.deny", r#"["Bash(git push:*)"]"#);
    server.push_turns([
        Turn::bash("c1", "touch ran.txt && git push origin main"),
        Turn::bash("c2", "echo allowed > fine.txt"),
        Turn::text("done"),
    ]);
    let run = t.run(&["prompt", "--name", "Pusher", "push it"]);
    run.ok();
    let refused = server.result_text(1);
    assert!(refused.contains("refused by the rule `Bash(git push:*)` (permissions.deny); nothing ran"), "{refused}");
    let id = t.only_agent();
    let dir = t.ws.join("agents").join(&id);
    assert!(!dir.join("ran.txt").exists(), "a refused call ran part of its command");
    assert!(dir.join("fine.txt").exists(), "a call no rule names runs");
    // The decision is in the call's record.
    let record = t.step_records(&id).into_iter().next().expect("step 1").join("tools");
    let call = std::fs::read_dir(&record).expect("tools").flatten().next().expect("a call").path();
    let decision: serde_json::Value =
        serde_json::from_slice(&std::fs::read(call.join("decision.json")).expect("decision")).expect("json");
    assert_eq!(decision["verdict"], "deny");
    assert_eq!(decision["rule"], "Bash(git push:*)");
    assert_eq!(decision["key"], "permissions.deny");
    // And `show --step` says it.
    let shown = t.run(&["show", &id, "--step", "1"]);
    assert!(shown.ok().contains("deny by the rule `Bash(git push:*)` (permissions.deny)"), "{}", shown.stdout);
}

#[test]
fn an_ask_rule_with_no_one_to_answer_refuses_at_once_and_the_run_goes_on() {
    let (server, t) = TestWorkspace::served("policy-ask", Dialect::Anthropic);
    t.set("roles.worker.permissions.ask", r#"["bash(rm:*)"]"#);
    std::fs::write(t.root.join("keep.txt"), "mine").expect("file");
    let keep = t.root.join("keep.txt");
    server.push_turns([Turn::bash("c1", &format!("rm -f {}", keep.display())), Turn::text("could not remove it")]);
    let run = t.run(&["prompt", "--name", "Asker", "remove it"]);
    run.ok();
    let said = server.result_text(1);
    assert!(said.contains("asks for a person's yes first, and no one is here to answer: refused"), "{said}");
    assert!(said.contains("(roles.worker.permissions.ask)"), "{said}");
    assert!(keep.exists());
    assert!(run.stdout.contains("could not remove it"), "{}", run.stdout);
}

#[test]
fn a_rule_that_does_not_read_is_refused_at_config_set_naming_the_key_and_nothing_is_written() {
    let t = TestWorkspace::new("policy-bad-rule");
    let before = t.git(&["rev-parse", "config/default"]);
    for (key, value, says) in [
        ("permissions.deny", r#"["Bash(git push"]"#, "does not close"),
        ("permissions.allow", r#"["Shell(ls)"]"#, "names no tool offshoot has"),
        ("roles.worker.permissions.ask", r#"["bash()"]"#, "empty pattern"),
    ] {
        let run = t.run(&["config", "set", key, value]);
        assert_eq!(run.code, 2, "{key}: {}", run.stderr);
        assert!(run.stderr.contains(&format!("`{key}`")) && run.stderr.contains(says), "{key}: {}", run.stderr);
    }
    assert_eq!(t.git(&["rev-parse", "config/default"]), before, "nothing was committed");
}

/// A guard as people write them for Claude Code: the call's JSON on stdin, exit 2 with
/// a reason on stderr to block.
fn guard(t: &TestWorkspace) -> String {
    let path = t.root.join("guard.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in\n  *'\"tool_name\":\"Bash\"'*'rm -rf'*) echo 'rm -rf is not for agents' >&2; exit 2;;\nesac\nexit 0\n",
    )
    .expect("guard");
    std::process::Command::new("chmod").args(["+x", path.to_str().expect("utf-8")]).status().expect("chmod");
    path.display().to_string()
}

#[test]
fn a_claude_code_guard_hook_blocks_a_grandchild_and_failing_guards_block_too() {
    let (server, t) = TestWorkspace::served("policy-hook", Dialect::Anthropic);
    let guard = guard(&t);
    t.set("hooks.PreToolUse", &format!(r#"[{{ matcher = "Bash", command = "{guard}" }}]"#));
    let dispatch = |name: &str| {
        Turn::tool("d1", "dispatch", serde_json::json!({"role": "worker", "goal": format!("be {name}"), "name": name}))
    };
    server.push_for("Lead", [dispatch("Kid"), Turn::text("waiting"), Turn::text("noted"), Turn::text("lead done")]);
    server.push_for("Kid", [dispatch("Grandkid"), Turn::text("waiting"), Turn::text("kid done")]);
    server.push_for("Grandkid", [Turn::bash("c1", "mkdir x && rm -rf x && touch ran.txt"), Turn::text("blocked")]);
    t.run(&["prompt", "--name", "Lead", "lead"]).ok();
    let said = server.result_text_for("Grandkid", 1);
    assert!(said.contains(&format!("refused by the hook `{guard}`: rm -rf is not for agents; nothing ran")), "{said}");
    let grandkid = t.id_of("Grandkid");
    assert!(!t.ws.join("agents").join(&grandkid).join("ran.txt").exists());

    // A guard that fails (exit 1) or runs past its timeout refuses: guards fail closed.
    let (server, t) = TestWorkspace::served("policy-hook-fails", Dialect::Anthropic);
    t.set(
        "hooks.PreToolUse",
        r#"[{ command = "exit 1" }, { matcher = "write_file", command = "sleep 5", timeout = 1 }]"#,
    );
    server.push_turns([
        Turn::bash("c1", "touch one.txt"),
        Turn::tool("c2", "write_file", serde_json::json!({"path": "two.txt", "content": "x"})),
        Turn::text("done"),
    ]);
    t.run(&["prompt", "--name", "Guarded", "try"]).ok();
    let (first, second) = (server.result_text(1), server.result_text(2));
    assert!(first.contains("the hook `exit 1` failed (it ended (exit code 1))"), "{first}");
    assert!(second.contains("the hook `exit 1` failed"), "every tool's guard runs first: {second}");
    let id = t.only_agent();
    assert!(!t.ws.join("agents").join(&id).join("one.txt").exists());
}

#[test]
fn a_post_tool_use_hook_sees_the_response_and_its_words_reach_the_model() {
    let (server, t) = TestWorkspace::served("policy-post-hook", Dialect::Anthropic);
    let seen = t.root.join("seen.json");
    let hook = t.root.join("post.sh");
    std::fs::write(&hook, format!("#!/bin/sh\ncat > '{}'\necho 'the linter is happy' >&2\nexit 2\n", seen.display()))
        .expect("hook");
    std::process::Command::new("chmod").args(["+x", hook.to_str().expect("utf-8")]).status().expect("chmod");
    t.set("hooks.PostToolUse", &format!(r#"[{{ matcher = "Bash", command = "{}" }}]"#, hook.display()));
    server.push_turns([Turn::bash("c1", "echo the-output"), Turn::text("done")]);
    t.run(&["prompt", "--name", "Post", "run it"]).ok();
    let heard: serde_json::Value = serde_json::from_slice(&std::fs::read(&seen).expect("the hook ran")).expect("json");
    assert_eq!(heard["hook_event_name"], "PostToolUse");
    assert_eq!(heard["tool_name"], "Bash");
    assert_eq!(heard["tool_input"]["command"], "echo the-output");
    assert!(heard["tool_response"]["content"].as_str().is_some_and(|c| c.contains("the-output")), "{heard}");
    assert_eq!(heard["agent_id"], t.only_agent().as_str());
    let said = server.result_text(1);
    assert!(said.contains("the-output") && said.contains("<hook>\nthe linter is happy\n</hook>"), "{said}");
}

#[test]
fn a_hook_that_cannot_run_or_an_event_that_is_none_is_refused_at_config_set() {
    let t = TestWorkspace::new("policy-bad-hook");
    let before = t.git(&["rev-parse", "config/default"]);
    for (key, value, says) in [
        ("hooks.PreToolUse", r#"[{ command = "/nonexistent/guard.sh" }]"#, "which is not found"),
        ("hooks.PreToolUse", r#"[{ command = "no-such-program-anywhere --x" }]"#, "which is not found"),
        ("hooks.BeforeTool", r#"[{ command = "true" }]"#, "is no hook event"),
        ("hooks.PreToolUse", r#"[{ command = "./guard.sh" }]"#, "a relative path"),
        ("hooks.PreToolUse", r#"[{ matcher = "(Bash", command = "true" }]"#, "is not a regex"),
    ] {
        let run = t.run(&["config", "set", key, value]);
        assert_eq!(run.code, 2, "{key}: {}", run.stderr);
        assert!(run.stderr.contains(&format!("`{key}`")) && run.stderr.contains(says), "{key}: {}", run.stderr);
    }
    assert_eq!(t.git(&["rev-parse", "config/default"]), before, "nothing was committed");
    // A program where an agent may write is refused too.
    let shared = t.root.join("shared");
    std::fs::create_dir_all(&shared).expect("dir");
    std::fs::write(shared.join("guard.sh"), "#!/bin/sh\nexit 0\n").expect("guard");
    t.set("roles.worker.write_paths", &format!("[\"{}\"]", shared.display()));
    let before = t.git(&["rev-parse", "config/default"]);
    let value = format!("[{{ command = \"sh {}\" }}]", shared.join("guard.sh").display());
    let run = t.run(&["config", "set", "hooks.PreToolUse", &value]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("which role `worker` may write (`write_paths`)"), "{}", run.stderr);
    assert_eq!(t.git(&["rev-parse", "config/default"]), before, "nothing was committed");
}

#[test]
fn a_hook_never_runs_a_file_the_model_planted_in_its_directory() {
    let (server, t) = TestWorkspace::served("policy-hook-planted", Dialect::Anthropic);
    // A guard named relative to where it runs: it runs in the workspace, where no agent
    // writes, so the agent's own `allow.sh` is not it — the guard cannot run it, and
    // refuses.
    t.set("hooks.PreToolUse", r#"[{ matcher = "Bash", command = "sh allow.sh" }]"#);
    server.push_turns([
        Turn::tool("w1", "write_file", serde_json::json!({"path": "allow.sh", "content": "exit 0\n"})),
        Turn::bash("c1", "touch escaped.txt"),
        Turn::text("done"),
    ]);
    t.run(&["prompt", "--name", "Planter", "plant"]).ok();
    let said = server.result_text(2);
    assert!(said.contains("the hook `sh allow.sh`") && said.contains("nothing ran"), "{said}");
    let id = t.only_agent();
    assert!(t.ws.join("agents").join(&id).join("allow.sh").exists());
    assert!(!t.ws.join("agents").join(&id).join("escaped.txt").exists());
}

#[test]
fn a_child_never_runs_under_a_role_without_its_parents_rules() {
    let (server, t) = TestWorkspace::served("policy-child-role", Dialect::Anthropic);
    t.set("roles.worker.permissions.deny", r#"["Bash(git push:*)"]"#);
    t.set("roles.helper.model", "claude-sonnet-4-5");
    t.set("roles.helper.permissions.deny", "[]");
    server.push_turns([Turn::text("hi")]);
    t.run(&["prompt", "--name", "Boss", "hello"]).ok();
    let refused = t.run(&["dispatch", "Boss", "--role", "helper", "--goal", "push for me"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("role `helper` lacks the rule `Bash(git push:*)`"), "{}", refused.stderr);
    assert_eq!(t.agents().len(), 1, "nothing was made");
    // Holding it (as a deny), the child may be made.
    t.set("roles.helper.permissions.deny", r#"["Bash(git push:*)"]"#);
    server.endless_text("done");
    t.run(&["dispatch", "Boss", "--role", "helper", "--goal", "help"]).ok();
}

#[test]
fn user_prompt_submit_hooks_add_context_or_keep_a_message_from_the_model() {
    let (server, t) = TestWorkspace::served("policy-prompt-hook", Dialect::Anthropic);
    let hook = t.root.join("prompt.sh");
    std::fs::write(
        &hook,
        "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in\n  *secret*) echo 'no secrets to the model' >&2; exit 2;;\nesac\nprintf '%s' '{\"hookSpecificOutput\": {\"hookEventName\": \"UserPromptSubmit\", \"additionalContext\": \"the build is red\"}}'\n",
    )
    .expect("hook");
    std::process::Command::new("chmod").args(["+x", hook.to_str().expect("utf-8")]).status().expect("chmod");
    t.set("hooks.UserPromptSubmit", &format!(r#"[{{ command = "{}" }}]"#, hook.display()));
    server.push_turns([Turn::text("noted")]);
    t.run(&["prompt", "--name", "Heard", "fix the build"]).ok();
    let first = server.requests()[0].body.to_string();
    assert!(first.contains("fix the build") && first.contains("the build is red"), "{first}");
    // Kept from the model: never sent, and the user is told why.
    let asked = server.requests().len();
    let kept = t.run(&["send", "Heard", "the secret is 42"]);
    assert!(
        kept.stderr.contains("kept from the model by the hook") && kept.stderr.contains("no secrets to the model"),
        "{}",
        kept.stderr
    );
    assert_eq!(server.requests().len(), asked);
    let log = t.run(&["log", "Heard"]).ok().to_owned();
    assert!(!log.contains("secret is 42"), "{log}");
}

#[test]
fn a_hook_left_running_by_a_killed_driver_is_ended_by_the_next() {
    let (server, t) = TestWorkspace::served("policy-hook-killed", Dialect::Anthropic);
    let pid_file = t.root.join("hook.pid");
    let command = format!("echo $$ > '{}'; exec sleep 300", pid_file.display());
    t.set("hooks.PreToolUse", &format!(r#"[{{ command = "{command}", timeout = 600 }}]"#));
    server.push_turns([Turn::bash("c1", "true")]);
    let id = t.run(&["prompt", "--detach", "--name", "Hooked", "go"]).ok().trim().to_owned();
    crate::support::wait::wait_for("the hook to run", || {
        pid_file.exists() && std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n'))
    });
    let hook: u32 = std::fs::read_to_string(&pid_file).expect("pid").trim().parse().expect("a pid");
    let driver = t.running_driver(&id).expect("the driver");
    assert!(std::process::Command::new("kill").args(["-9", &driver.to_string()]).status().expect("kill").success());
    // Gone with all it held: a killed process shows as a zombie while another of its
    // threads still exits, and its files (the agent's lock among them) close only then —
    // a `run` meanwhile finds the agent busy and only follows it.
    let fds = format!("/proc/{driver}/fd");
    crate::support::wait::wait_for("the driver to go", || {
        t.running_driver(&id).is_none() && std::fs::read_dir(&fds).map_or(true, |mut d| d.next().is_none())
    });
    assert!(crate::support::workspace::running(hook), "the hook outlives its driver until the next one");
    t.set("hooks.PreToolUse", "[]");
    server.push_turns([Turn::text("done")]);
    t.run(&["run", &id]).ok();
    // (Killed by the next driver as it starts; on a loaded machine its end may show a
    // moment after the run's.)
    crate::support::wait::wait_for_within(
        "the next driver to end the hook",
        std::time::Duration::from_secs(10),
        || !crate::support::workspace::running(hook),
    );
}

#[test]
fn a_projects_claude_code_hook_runs_only_once_trusted_and_not_after_it_changes() {
    let (server, t, repo) = crate::project::project("policy-trust");
    let log = t.root.join("ran.log");
    std::fs::create_dir_all(repo.join(".claude/hooks")).expect("dir");
    let script = repo.join(".claude/hooks/mark.sh");
    std::fs::write(&script, format!("#!/bin/sh\necho ran >> '{}'\n", log.display())).expect("script");
    std::process::Command::new("chmod").args(["+x", script.to_str().expect("utf-8")]).status().expect("chmod");
    let settings = r#"{"hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/mark.sh"}]}]}}"#;
    std::fs::write(repo.join(".claude/settings.json"), settings).expect("settings");
    let runs = |n: usize| {
        server.push_turns([Turn::bash("c1", "echo hi"), Turn::text("done")]);
        let run = t.run(&["prompt", &format!("run {n}")]);
        run.ok();
        run
    };
    let ran = || std::fs::read_to_string(&log).map(|l| l.lines().count()).unwrap_or(0);

    let first = runs(1);
    assert_eq!(ran(), 0, "an untrusted project hook ran");
    assert!(
        first.stderr.contains("`.claude/settings.json` carries hooks or rules you have not trusted"),
        "{}",
        first.stderr
    );
    let listed = t.run(&["config", "trust"]);
    assert!(listed.ok().contains(".claude/settings.json  not trusted: does not run"), "{}", listed.stdout);
    assert!(listed.stdout.contains("runs: \".claude/hooks/mark.sh\""), "{}", listed.stdout);
    assert!(
        listed.stdout.contains("hook PostToolUse: \"\\\"$CLAUDE_PROJECT_DIR\\\"/.claude/hooks/mark.sh\""),
        "{}",
        listed.stdout
    );
    t.run(&["config", "trust", "--accept"]).ok();
    runs(2);
    assert_eq!(ran(), 1, "the trusted hook runs");

    // Changed (the settings, or the script they run): not run until trusted again.
    std::fs::write(repo.join(".claude/settings.json"), format!("{settings}\n")).expect("settings");
    runs(3);
    assert_eq!(ran(), 1, "a changed settings file's hook ran");
    t.run(&["config", "trust", "--accept"]).ok();
    runs(4);
    assert_eq!(ran(), 2);
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho ran >> '{}'\necho changed >> '{}'\n", log.display(), log.display()),
    )
    .expect("script");
    runs(5);
    assert_eq!(ran(), 2, "a changed script ran on its old trust");
    assert!(t.run(&["config", "trust"]).ok().contains("changed since you trusted it"));
}

#[test]
fn life_hooks_hear_sessions_children_and_stops_and_a_stop_hook_sends_the_root_back_to_work() {
    let (server, t) = TestWorkspace::served("policy-life", Dialect::Anthropic);
    let log = t.root.join("events.log");
    let marker = t.root.join("stopped-once");
    let hook = t.root.join("life.sh");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ninput=$(cat)\necho \"$input\" >> '{log}'\ncase \"$input\" in\n  *'\"hook_event_name\":\"Stop\"'*)\n    [ -e '{marker}' ] && exit 0\n    touch '{marker}'; echo 'run the tests too' >&2; exit 2;;\nesac\nexit 0\n",
            log = log.display(),
            marker = marker.display()
        ),
    )
    .expect("hook");
    std::process::Command::new("chmod").args(["+x", hook.to_str().expect("utf-8")]).status().expect("chmod");
    let every = ["SessionStart", "SubagentStart", "SubagentStop", "Stop", "SessionEnd"]
        .map(|e| format!("hooks.{e} [{{ command = \"{}\" }}]", hook.display()));
    for pair in &every {
        let (key, value) = pair.split_once(' ').expect("pair");
        t.set(key, value);
    }
    let dispatch = Turn::tool("d1", "dispatch", serde_json::json!({"role": "worker", "goal": "be kid", "name": "Kid"}));
    server.push_for("Lead", [dispatch, Turn::text("waiting"), Turn::text("lead done"), Turn::text("tests ran too")]);
    server.push_for("Kid", [Turn::text("kid done")]);
    // (Whether the child's answer comes before or after the hook's message is timing.)
    t.run(&["prompt", "--name", "Lead", "lead"]).ok();
    let heard: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .expect("the hooks ran")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let (lead, kid) = (t.id_of("Lead"), t.id_of("Kid"));
    let of = |agent: &str| -> Vec<String> {
        heard
            .iter()
            .filter(|h| h["agent_id"] == agent)
            .map(|h| h["hook_event_name"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    // (Said first, short: a CI log cuts long messages, and once this failed with the
    // kid's `SubagentStop` missing and the reason cut off.)
    let kid_end = heard.iter().find(|h| h["agent_id"] == kid.as_str() && h["hook_event_name"] == "SessionEnd");
    let why = format!("the kid's run ended {:?}; ls: {}", kid_end.map(|h| &h["reason"]), t.run(&["ls"]).stdout);
    assert_eq!(of(&kid), ["SessionStart", "SubagentStart", "SubagentStop", "SessionEnd"], "{why}\n{heard:?}");
    let lead_heard = of(&lead);
    assert_eq!(lead_heard.first().map(String::as_str), Some("SessionStart"), "{lead_heard:?}");
    assert_eq!(lead_heard.last().map(String::as_str), Some("SessionEnd"), "{lead_heard:?}");
    let count = |what: &str| lead_heard.iter().filter(|e| *e == what).count();
    assert_eq!(count("SessionStart"), count("SessionEnd"), "{lead_heard:?}");
    // (Each answer of the root is a stop: the first one's hook sent it back to work.)
    let stops: Vec<&serde_json::Value> = heard.iter().filter(|h| h["hook_event_name"] == "Stop").collect();
    assert!(stops.len() >= 2, "{lead_heard:?}");
    assert_eq!(
        (stops[0]["stop_hook_active"].as_bool(), stops[1]["stop_hook_active"].as_bool()),
        (Some(false), Some(true))
    );
    // The hook's reason was the root's next message.
    let asked = server.requests_for("Lead").last().expect("a request").raw.clone();
    assert!(String::from_utf8_lossy(&asked).contains("run the tests too"), "the reason did not reach the model");
}

#[test]
fn a_claude_code_settings_file_is_imported_as_one_config_commit_and_its_guard_runs() {
    let (server, t) = TestWorkspace::served("policy-import", Dialect::Anthropic);
    let guard = guard(&t);
    let settings = t.root.join("settings.json");
    let json = serde_json::json!({
        "permissions": {"deny": ["Bash(git push:*)"], "defaultMode": "acceptEdits"},
        "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": guard, "timeout": 10}]}]}
    });
    std::fs::write(&settings, json.to_string()).expect("settings");
    let before = t.git(&["rev-parse", "config/default"]);
    t.run(&["config", "import", settings.to_str().expect("utf-8")]).ok();
    assert_ne!(t.git(&["rev-parse", "config/default"]), before);
    assert!(t.git(&["log", "-1", "--format=%s", "config/default"]).contains("import hooks and rules"));
    let again = t.run(&["config", "import", settings.to_str().expect("utf-8")]);
    assert!(again.ok().contains("adds no hook or rule"), "{}", again.stdout);
    server.push_turns([Turn::bash("c1", "mkdir x && rm -rf x"), Turn::bash("c2", "git push"), Turn::text("done")]);
    t.run(&["prompt", "try"]).ok();
    assert!(server.result_text(1).contains("rm -rf is not for agents"), "{}", server.result_text(1));
    assert!(server.result_text(2).contains("refused by the rule `Bash(git push:*)`"), "{}", server.result_text(2));
    // A file that is not Claude Code's settings: named, nothing written.
    std::fs::write(&settings, r#"{"hooks": {"AfterEverything": []}}"#).expect("settings");
    let bad = t.run(&["config", "import", settings.to_str().expect("utf-8")]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("`AfterEverything` is no hook event"), "{}", bad.stderr);
}
