//! The config verbs as a user drives them: adding a role, editing any file of the config
//! tree, values that cannot work, concurrent changes, and the ready OpenAI role.

use crate::support::server::{Server, Turn};
use crate::support::workspace::{Dialect, TestWorkspace};

fn config_tip(t: &TestWorkspace) -> String {
    t.git(&["rev-parse", "config/default"])
}

/// An `$EDITOR` that runs `body` (a shell script; `$1` is the file).
fn editor(t: &mut TestWorkspace, name: &str, body: &str) {
    let path = t.root.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("editor script");
    std::process::Command::new("chmod").arg("+x").arg(&path).status().expect("chmod");
    t.env("EDITOR", path.to_str().expect("utf-8"));
}

#[test]
fn config_set_adds_a_role_with_a_soul_that_config_edit_changes() {
    let server = Server::start();
    let mut t = TestWorkspace::new("config-role");
    t.use_server(&server, Dialect::Anthropic);
    let run = t.run(&[
        "config",
        "set",
        "roles.reviewer.provider",
        "anthropic",
        "roles.reviewer.model",
        "claude-haiku-4-5",
        "roles.reviewer.tools",
        r#"["read_file", "grep"]"#,
    ]);
    run.ok();
    assert!(run.stderr.contains("new role `reviewer` got the worker's soul as souls/reviewer.md"), "{}", run.stderr);
    assert_eq!(
        t.git(&["show", "config/default:souls/reviewer.md"]),
        t.git(&["show", "config/default:souls/worker.md"])
    );

    editor(&mut t, "soul.sh", "printf 'You review code and never change it.\\n' > \"$1\"");
    t.run(&["config", "edit", "souls/reviewer.md"]).ok();
    assert_eq!(t.git(&["show", "config/default:souls/reviewer.md"]), "You review code and never change it.\n");

    server.push_turns([Turn::text("looks fine")]);
    t.run(&["prompt", "--role", "reviewer", "review this"]).ok();
    let request = &server.requests()[0];
    assert_eq!(request.body["model"], "claude-haiku-4-5");
    assert!(request.body["system"].to_string().contains("You review code and never change it."), "{}", request.body);
    let mut tools: Vec<&str> =
        request.body["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
    tools.sort();
    assert_eq!(tools, ["grep", "read_file"]);
}

#[test]
fn config_edit_refuses_a_path_outside_the_config_tree() {
    let mut t = TestWorkspace::new("config-edit-path");
    editor(&mut t, "touch.sh", "echo x > \"$1\"");
    let before = config_tip(&t);
    for path in ["../escape.md", "/etc/passwd", "souls//x.md"] {
        let run = t.run(&["config", "edit", path]);
        assert_eq!(run.code, 2, "{path}: {}", run.stderr);
        assert!(run.stderr.contains(&format!("`{path}` is not a path inside the config tree")), "{}", run.stderr);
    }
    assert_eq!(config_tip(&t), before);
}

#[test]
fn values_that_cannot_work_are_refused_naming_line_and_key() {
    let t = TestWorkspace::new("config-values");
    let before = config_tip(&t);
    let cases: &[(&[&str], &str)] = &[
        (&["roles.worker.context_window", "0"], "`roles.worker.context_window`: must be at least 1"),
        (
            &["roles.worker.max_output_tokens", "900000"],
            "`roles.worker.max_output_tokens`: 900000 is more than the context window",
        ),
        (
            &["retry.initial_backoff_ms", "40000"],
            "`retry.initial_backoff_ms`: 40000 is more than `max_backoff_ms` (20)",
        ),
        (&["roles.worker.model", ""], "`roles.worker.model`: must name a model"),
        (&["providers.openai.api_key_env", ""], "`providers.openai.api_key_env`: must name an environment variable"),
        (&["budgets.max_tokens", "0"], "`budgets.max_tokens`: must be at least 1"),
        (&["budgets.max_cost_usd", "-2.5"], "`budgets.max_cost_usd`: must be more than 0"),
    ];
    let text = t.run(&["config", "show"]).stdout;
    for (pair, expected) in cases {
        let run = t.run(&["config", "set", pair[0], pair[1]]);
        assert_eq!(run.code, 2, "{pair:?}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{pair:?}: {}", run.stderr);
        // A key already in the file is named at its line.
        if let Some(line) = line_of(&text, pair[0]) {
            assert!(run.stderr.contains(&format!("offshoot.toml:{line}:")), "{pair:?}: {}", run.stderr);
        }
    }
    assert_eq!(config_tip(&t), before);
}

/// The line setting `key` under its table header, if the text sets it.
fn line_of(text: &str, key: &str) -> Option<usize> {
    let (table, leaf) = key.rsplit_once('.')?;
    let lines: Vec<&str> = text.lines().collect();
    let header = lines.iter().position(|l| *l == format!("[{table}]"))?;
    let rest = &lines[header + 1..];
    let end = rest.iter().position(|l| l.starts_with('[')).unwrap_or(rest.len());
    rest[..end].iter().position(|l| l.starts_with(&format!("{leaf} ="))).map(|i| header + i + 2)
}

#[test]
fn config_set_keeps_comments_and_handles_quoted_dotted_keys() {
    let t = TestWorkspace::new("config-layout");
    t.run(&["config", "set", r#"prices."gpt-4.1-mini".input"#, "0.5", "roles.worker.tools", r#"["bash"]"#]).ok();
    let text = t.run(&["config", "show"]).stdout;
    assert!(text.contains("# OpenAI bills no cache writes: they cost what input does."), "{text}");
    assert!(text.contains("# Optional whole-tree limits"), "{text}");
    assert!(text.contains("[prices.\"gpt-4.1-mini\"]\ninput = 0.5\noutput = 1.60"), "{text}");
    assert!(text.contains("model = \"claude-sonnet-4-5\"\ncontext_window = 200000"), "{text}");
    assert!(text.contains("tools = [\"bash\"]\n\n[roles.worker.context]"), "{text}");
    let run = t.run(&["config", "set", "roles..model", "x"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("`roles..model`"), "{}", run.stderr);
}

#[test]
fn concurrent_config_sets_all_land() {
    let t = TestWorkspace::new("config-race");
    let children: Vec<_> = (0..8)
        .map(|i| {
            t.command()
                .args(["config", "set", &format!("tool_env.set.VAR_{i}"), &format!("value {i}")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(!stderr.contains(".lock"), "{stderr}");
    }
    let text = t.run(&["config", "show"]).stdout;
    for i in 0..8 {
        assert!(text.contains(&format!("VAR_{i} = \"value {i}\"")), "VAR_{i} missing:\n{text}");
    }
}

#[test]
fn the_default_openai_role_talks_chat_completions() {
    let server = Server::start();
    let mut t = TestWorkspace::new("config-openai");
    t.set("providers.openai.base_url", &format!("{}/v1", server.url()));
    t.env("OPENAI_API_KEY", "test-key");
    server.push_turns([Turn::text("hello from gpt")]);
    let run = t.run(&["prompt", "--role", "openai", "say hello"]);
    run.ok();
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.body["model"], "gpt-4.1-mini");
    assert_eq!(request.header("authorization"), Some("Bearer test-key"));
    let id = t.only_agent();
    assert!(t.run(&["log", &id]).ok().contains("hello from gpt"));
}

#[test]
fn a_role_added_by_one_command_works_and_keys_can_be_unset() {
    let (server, t) = TestWorkspace::served("config-new-role", Dialect::Anthropic);
    t.run(&["config", "set", "roles.reviewer.model", "claude-haiku-4-5"]).ok();
    let shown = t.run(&["--json", "config", "show"]).ok().to_owned();
    let config: serde_json::Value = serde_json::from_str(shown.trim()).expect("json");
    let (reviewer, worker) = (&config["config"]["roles"]["reviewer"], &config["config"]["roles"]["worker"]);
    assert_eq!(reviewer["model"], "claude-haiku-4-5");
    for key in ["provider", "tools", "context_window", "max_output_tokens", "context"] {
        assert_eq!(reviewer[key], worker[key], "{key} not taken from the worker: {reviewer}");
    }
    server.push_turns([Turn::bash("r1", "echo reviewing"), Turn::text("reviewed")]);
    assert_eq!(t.run(&["prompt", "--role", "reviewer", "review this"]).ok(), "reviewed\n");
    let first = &server.requests()[0].body;
    assert_eq!(first["model"], "claude-haiku-4-5");
    assert!(first["tools"].as_array().is_some_and(|tools| tools.iter().any(|t| t["name"] == "bash")), "{first}");

    // A limit set, then unset; unsetting what is not set, or what the config needs, is
    // refused naming the key and changes nothing.
    t.run(&["config", "set", "budgets.max_steps", "50"]).ok();
    t.run(&["config", "unset", "budgets.max_steps"]).ok();
    let text = t.run(&["config", "show"]).ok().to_owned();
    assert!(!text.contains("max_steps = 50\n"), "{text}");
    let again = t.run(&["config", "unset", "budgets.max_steps"]);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(again.stderr.contains("budgets.max_steps") && again.stderr.contains("it is not set"), "{}", again.stderr);
    let needed = t.run(&["config", "unset", "roles.worker.provider"]);
    assert_eq!(needed.code, 2, "{}", needed.stderr);
    assert!(needed.stderr.contains("nothing was committed"), "{}", needed.stderr);
    assert_eq!(t.run(&["config", "show"]).ok(), text);
}
