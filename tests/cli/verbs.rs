//! The verbs as a user meets them.

use serde_json::Value;

use crate::support::server::{Reply, Server, Turn};
use crate::support::workspace::{Dialect, TestWorkspace};

#[test]
fn demo_runs_with_no_identity_and_no_key() {
    let t = TestWorkspace::new("demo");
    let run = t.run_bare(&["demo"]);
    assert!(run.ok().contains("REPORT.md is written"), "{}", run.stdout);
    assert!(
        run.stderr.contains("Where to look (") && run.stderr.contains("export OFFSHOOT_WORKSPACE="),
        "{}",
        run.stderr
    );
    let demos = crate::first_use::workspaces_in(&t.home.join("workspaces"));
    assert_eq!(demos.len(), 1, "{demos:?}");
    let ws = t.home.join("workspaces").join(&demos[0]);
    let mut agents: Vec<String> = std::fs::read_dir(ws.join("agents"))
        .expect("agents")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    agents.sort();
    // The parent, the two helpers it dispatched and the compactor of its first steps.
    assert_eq!(agents.len(), 4, "{agents:?}");
    assert_eq!(agents[1..], [format!("{}.1", agents[0]), format!("{}.2", agents[0]), format!("{}.3", agents[0])]);
    let agent = ws.join("agents").join(&agents[0]);
    let report = std::fs::read_to_string(agent.join("REPORT.md")).expect("the demo writes a report");
    assert!(report.starts_with("# Machine report\n\nEach line below was read"), "{report}");
    // The helpers' lines came from their branches, and their files were merged in.
    for line in ["- System: ", "- Processor: ", "- Cores: ", "- Memory: "] {
        assert!(report.contains(line), "{report}");
    }
    for (file, helper) in [("CPU.md", "CpuScout"), ("MEMORY.md", "MemScout")] {
        assert!(agent.join(file).is_file(), "{file} from {helper} was not merged in");
    }
    assert!(agent.join("CHECK.md").is_file(), "the recorded patch adds CHECK.md");
    let tree = t.run_bare(&["-w", &ws.to_string_lossy(), "tree"]);
    assert!(
        tree.ok().contains("CpuScout [cpu-scout] done") && tree.ok().contains("MemScout [memory-scout] done"),
        "{}",
        tree.stdout
    );
    assert!(tree.ok().contains("[compactor] done"), "{}", tree.stdout);
    // The compaction landed: a summary stands for the first steps, announced on stderr.
    assert!(run.stderr.contains("compaction 1 landed"), "{}", run.stderr);
    let summary = std::fs::read_to_string(agent.join(".offshoot/summary/0001.md")).expect("summary");
    assert!(summary.contains("CpuScout") && summary.contains("MemScout"), "{summary}");

    // Its hints run as printed, in one shell, with `offshoot` on the PATH.
    let bin = t.root.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_offshoot"), bin.join("offshoot")).expect("link");
    let hints: Vec<&str> = run.stderr.lines().skip_while(|l| !l.starts_with("Try")).skip(1).map(str::trim).collect();
    assert!(hints[0].starts_with("export OFFSHOOT_WORKSPACE=") && hints.len() >= 8, "{hints:?}");
    // (Only the first line carries the workspace's path.)
    assert!(hints[1..].iter().all(|h| h.chars().count() <= 100 && !h.contains("/workspaces/")), "{hints:?}");
    for hint in &hints[1..] {
        let script = format!("{}\n{hint}", hints[0]);
        let o = std::process::Command::new("sh")
            .args(["-c", &script])
            .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
            .env("OFFSHOOT_HOME", &t.home)
            .env("HOME", &t.home)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .current_dir(&t.root)
            .output()
            .expect("sh");
        assert!(o.status.success(), "{hint}: {}", String::from_utf8_lossy(&o.stderr));
    }
    // `ls` in the default workspace says where the demo's agents are.
    let ls = t.run_bare(&["ls"]);
    assert!(
        ls.stderr
            .contains(&format!("the demo's are in its own workspace: `export OFFSHOOT_WORKSPACE={}`", ws.display())),
        "{}",
        ls.stderr
    );
}

#[test]
fn reading_makes_no_workspace_the_first_change_makes_the_default_one_and_inside_a_workspace_it_is_that_one() {
    let t = TestWorkspace::new("default-ws");
    let default = t.home.join("workspaces/default");
    // Read-only verbs make nothing: they say there is nothing yet.
    let ls = t.run_bare(&["ls"]);
    assert_eq!(ls.code, 0, "{}", ls.stderr);
    assert!(ls.stderr.contains(&format!("no workspace at {} yet", default.display())), "{}", ls.stderr);
    for args in [&["config", "show"][..], &["log", "Nobody"], &["doctor"]] {
        let run = t.run_bare(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains("there is no workspace at"), "{args:?}: {}", run.stderr);
    }
    assert!(!default.exists(), "a read-only verb made the workspace");
    // The first change makes it.
    t.run_bare(&["config", "set", "retry.max_attempts", "3"]).ok();
    assert!(default.join("repo.git").is_dir());
    assert!(t.run_bare(&["config", "show"]).ok().contains("[roles.worker]"));

    // Inside a workspace's directory, or an agent's, that workspace: no other is made.
    let server = Server::start();
    let mut other = TestWorkspace::new("inside-ws");
    other.use_server(&server, Dialect::Anthropic);
    server.push_turns([Turn::text("here")]);
    other.run(&["prompt", "--name", "Inside", "be here"]).ok();
    let id = other.id_of("Inside");
    let made_before = std::fs::read_dir(other.home.join("workspaces")).map(|d| d.count()).unwrap_or(0);
    for dir in [other.ws.clone(), other.ws.join("agents").join(&id), other.ws.join("steps")] {
        let ls = other.command_bare().current_dir(&dir).args(["ls"]).output().expect("ls");
        let out = String::from_utf8_lossy(&ls.stdout);
        assert!(ls.status.success() && out.contains(&id) && out.contains("Inside"), "in {}: {out}", dir.display());
    }
    let made_after = std::fs::read_dir(other.home.join("workspaces")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(made_before, made_after, "a workspace was made inside one");
    // Inside an agent's directory, that agent is the default for verbs that take one.
    let inside = other.ws.join("agents").join(&id);
    let log = other.command_bare().current_dir(&inside).args(["log"]).output().expect("log");
    assert!(log.status.success() && String::from_utf8_lossy(&log.stdout).contains("be here"), "{log:?}");
    let outside = other.run(&["log"]);
    assert_eq!(outside.code, 2, "{}", outside.stderr);
    assert!(outside.stderr.contains("name an agent"), "{}", outside.stderr);
}

#[test]
fn send_continues_a_finished_agent_and_json_events_describe_the_run() {
    let (server, t) = TestWorkspace::served("send", Dialect::Chat);
    server.push_turns([Turn::text("first"), Turn::bash("call_1", "echo second"), Turn::text("second done")]);
    let run = t.run(&["prompt", "--json", "--name", "Chatty", "one"]);
    let events: Vec<Value> = run.ok().lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    assert_eq!(events[0]["type"], "agent");
    assert_eq!(events[0]["name"], "Chatty");
    assert!(events.iter().any(|e| e["type"] == "text"));
    assert_eq!(events.last().expect("end")["type"], "end");
    assert_eq!(events.last().expect("end")["text"], "first");

    let run = t.run(&["send", "--json", "Chatty", "two"]);
    let events: Vec<Value> = run.ok().lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(kinds.contains(&"tool_call") && kinds.contains(&"tool_result"), "{kinds:?}");
    assert_eq!(events.last().expect("end")["text"], "second done");
    // One branch, continued: the third request carries the whole conversation.
    let third = &server.requests()[2].body;
    let contents: Vec<&str> =
        third["messages"].as_array().expect("m").iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(contents.iter().any(|c| c.ends_with("one")) && contents.iter().any(|c| c.ends_with("two")), "{contents:?}");
    assert_eq!(t.agents().len(), 1);
}

#[test]
fn fork_continues_from_an_earlier_commit_and_cuts_unpaired_calls() {
    let (server, t) = TestWorkspace::served("fork", Dialect::Anthropic);
    server.push_turns([Turn::bash("call_1", "echo one > one.txt"), Turn::text("made one")]);
    t.run(&["prompt", "--name", "Origin", "make one"]).ok();
    let origin = t.only_agent();

    // agents/<id>~2 ends in the model output whose call has no result yet.
    server.push(Reply::Turn(Turn::text("forked answer")));
    let run = t.run(&["fork", "--from", &format!("agents/{origin}~2"), "--name", "Branchy", "try again"]);
    assert!(run.ok().contains("forked answer"), "{}", run.stderr);
    let fork_req = &server.requests()[2].body;
    let messages = fork_req["messages"].as_array().expect("messages");
    // The unpaired call was cut: the goal entry, then the new prompt, merged as one user turn.
    assert_eq!(messages.len(), 1, "{fork_req}");
    assert!(!fork_req.to_string().contains("call_1"));
    let ids: Vec<String> = t.agents().iter().map(|a| a["id"].as_str().expect("id").to_owned()).collect();
    assert_eq!(ids.len(), 2);
    let fork = ids.iter().find(|i| **i != origin).expect("fork id");
    let facts = t.git(&["show", &format!("agents/{fork}:.offshoot/agent.toml")]);
    assert!(facts.contains("forked_from") && facts.contains("name = \"Branchy\""), "{facts}");
    // The origin is untouched; the fork kept its work product state at the fork point.
    assert_eq!(t.git(&["show", &format!("agents/{origin}:one.txt")]), "one\n");
    // `<name>~N` and `<id>~N` name the same commit as `agents/<id>~N`.
    for from in ["Origin~2", &format!("{origin}~2")] {
        server.push(Reply::Turn(Turn::text("forked again")));
        let run = t.run(&["fork", "--from", from, "try once more"]);
        assert!(run.ok().contains("forked again"), "{from}: {}", run.stderr);
        let last = server.requests().last().expect("request").body.clone();
        assert_eq!(last["messages"].as_array().map(Vec::len), Some(1), "{from}");
    }
    // A name that is an agent's id is refused: it could never be reached. (An id that
    // starts with a digit is no valid name anyway; make agents until one starts with a
    // letter, as 26 of 32 do.)
    let mut id = origin.clone();
    for n in 0..12 {
        if id.starts_with(|c: char| c.is_ascii_lowercase()) {
            break;
        }
        server.push(Reply::Turn(Turn::text("another")));
        t.run(&["prompt", "--name", &format!("Extra{n}"), "one more"]).ok();
        id = t.agents().iter().find(|a| a["name"] == format!("Extra{n}")).expect("extra")["id"]
            .as_str()
            .expect("id")
            .to_owned();
    }
    let run = t.run(&["prompt", "--name", &id, "a confusing name"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("is an agent's id"), "{id}: {}", run.stderr);
}

#[test]
fn config_edit_commits_changes_and_says_when_nothing_changed() {
    let mut t = TestWorkspace::new("config-edit");
    let before = t.git(&["rev-parse", "config/default"]);
    t.env("EDITOR", "true");
    let run = t.run(&["config", "edit"]);
    assert!(run.stderr.contains("nothing changed; nothing was committed"), "{}", run.stderr);
    assert_eq!(t.git(&["rev-parse", "config/default"]), before);

    let script = t.root.join("edit.sh");
    std::fs::write(&script, "#!/bin/sh\nsed -i 's/^max_attempts = .*/max_attempts = 9/' \"$1\"\n").expect("script");
    std::process::Command::new("chmod").args(["+x", script.to_str().expect("utf-8")]).status().expect("chmod");
    t.env("EDITOR", script.to_str().expect("utf-8"));
    let run = t.run(&["config", "edit"]);
    assert!(run.ok().is_empty(), "{}", run.stdout);
    let commit = t.git(&["rev-parse", "config/default"]).trim().to_owned();
    assert_ne!(commit, before.trim());
    assert!(run.stderr.contains(&format!("· committed {} to config/default", &commit[..12])), "{}", run.stderr);
    assert!(t.run(&["config", "show"]).ok().contains("max_attempts = 9"));

    let run = t.run(&["config", "set", "retry.max_attempts", "9"]);
    assert!(run.stderr.contains("nothing changed"), "{}", run.stderr);
}

#[test]
fn completions_complete_verbs_flags_and_the_workspaces_agents_in_bash() {
    let (server, t) = TestWorkspace::served("completions", Dialect::Anthropic);
    server.push_turns([Turn::text("one"), Turn::text("two")]);
    t.run(&["prompt", "--name", "Ada", "first"]).ok();
    t.run(&["prompt", "--name", "Adam", "second"]).ok();
    let ids: Vec<String> = t.agents().iter().map(|a| a["id"].as_str().expect("id").to_owned()).collect();
    let script = t.root.join("complete.bash");
    std::fs::write(&script, t.run(&["completions", "bash"]).ok()).expect("script");
    // Real bash: load the script and ask its function, as <Tab> would.
    let complete = |words: &[&str]| -> Vec<String> {
        let ws = t.ws.to_str().expect("utf-8");
        let mut all = vec!["offshoot", "-w", ws];
        all.extend_from_slice(words);
        let quoted: Vec<String> = all.iter().map(|w| format!("'{w}'")).collect();
        let body = format!(
            "source {}\nCOMP_WORDS=({})\nCOMP_CWORD={}\n_clap_complete_offshoot offshoot '{}' '{}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display(),
            quoted.join(" "),
            all.len() - 1,
            all[all.len() - 1],
            all[all.len() - 2]
        );
        // The test's clean environment, for bash and the binary it calls.
        let mut bash = std::process::Command::new("bash");
        bash.env_clear();
        for (k, v) in t.command_bare().get_envs() {
            if let Some(v) = v {
                bash.env(k, v);
            }
        }
        let o = bash.arg("-c").arg(&body).output().expect("bash");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mut got: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(str::to_owned).collect();
        got.sort();
        got
    };
    assert_eq!(complete(&["sen"]), ["send"]);
    assert_eq!(complete(&["send", "Ad"]), ["Ada", "Adam"]);
    let prefix = &ids[0][..3];
    let matching: Vec<&String> = ids.iter().filter(|id| id.starts_with(prefix)).collect();
    assert_eq!(complete(&["log", prefix]).len(), matching.len());
    assert_eq!(complete(&["stop", "Adam"]), ["Adam"]);
    assert!(complete(&["show", "Ada", "--st"]).contains(&"--step".to_owned()));
}

#[test]
fn base_url_comes_from_the_standard_variable_and_ollama_needs_no_key() {
    let server = Server::start();
    let mut t = TestWorkspace::new("base-url-env");
    t.env("ANTHROPIC_BASE_URL", &server.url());
    t.env("ANTHROPIC_API_KEY", "from-env");
    server.push(Reply::Turn(Turn::text("via the variable")));
    assert!(t.run(&["prompt", "hi"]).ok().contains("via the variable"));
    assert_eq!(server.requests()[0].header("x-api-key"), Some("from-env"));

    t.set("providers.ollama.base_url", &format!("{}/v1", server.url()));
    t.set("roles.worker.provider", "ollama");
    t.set("roles.worker.model", "llama3.2:3b");
    t.env("ANTHROPIC_API_KEY", "");
    server.push(Reply::Turn(Turn::text("local model")));
    assert!(t.run(&["prompt", "hi"]).ok().contains("local model"));
    let req = &server.requests()[1];
    assert_eq!(req.header("authorization"), None);
    assert_eq!(req.body["max_tokens"], 16000);
    assert_eq!(req.body["model"], "llama3.2:3b");
    // The model id is made safe as the transcript entry's origin.
    let mut names = String::new();
    for a in t.agents() {
        let branch = format!("agents/{}", a["id"].as_str().expect("id"));
        names.push_str(&t.git(&["ls-tree", "--name-only", &branch, ".offshoot/messages/"]));
    }
    assert!(names.contains("0002-llama3.2_3b.json") && names.contains("0002-claude-sonnet-4-5.json"), "{names}");
}

#[test]
fn the_command_protocol_runs_an_external_adapter() {
    let t = TestWorkspace::new("command-provider");
    let adapter = t.root.join("adapter.py");
    std::fs::write(
        &adapter,
        r#"import json, sys
req = json.load(sys.stdin)
n = sum(1 for m in req["messages"] if m["role"] == "assistant")
if n == 0:
    print(json.dumps({"type": "output", "content": [{"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": "echo from-tool"}}], "usage": {"input": 5}, "stop": "tool_use"}))
else:
    result = req["messages"][-1]["content"][0]["content"]
    print(json.dumps({"type": "output", "content": [{"type": "text", "text": "saw: " + result.split()[-2]}], "usage": {}, "stop": "end_turn"}))
"#,
    )
    .expect("adapter");
    let command = format!("[\"python3\", \"{}\"]", adapter.display());
    let run = t.run(&["config", "set", "providers.ext.protocol", "command", "providers.ext.command", &command]);
    run.ok();
    t.set("roles.worker.provider", "ext");
    let run = t.run(&["prompt", "use the adapter"]);
    assert_eq!(run.ok(), "saw: from-tool\n");
}

#[test]
fn each_step_line_says_what_it_used_and_cost_and_the_run_ends_with_totals() {
    let (server, t) = TestWorkspace::served("verbs-spend", Dialect::Chat);
    server.push_turns([
        Turn { input_tokens: 2000, cache_read: 1000, output_tokens: 100, ..Turn::bash("call_1", "true") },
        Turn { input_tokens: 1000, output_tokens: 200, ..Turn::text("done") },
    ]);
    let run = t.run(&["prompt", "go"]);
    run.ok();
    // claude-sonnet-4-5 at 3 / 15 / 0.30 per million: 1,000 fresh + 1,000 cached + 100 out.
    assert!(run.stderr.contains("· step 1 done: 2,000 in (1,000 cached), 100 out, $0.0048"), "{}", run.stderr);
    assert!(run.stderr.contains("· step 2 done: 1,000 in, 200 out, $0.0060"), "{}", run.stderr);
    assert!(
        run.stderr.contains("· total: 2 model calls and 1 tool call, 3,000 in (1,000 cached), 300 out, $0.0108"),
        "{}",
        run.stderr
    );

    // A model with no price: tokens, and no made-up cost.
    t.set("roles.worker.model", "unpriced-model");
    server.push_turns([Turn { input_tokens: 10, output_tokens: 5, ..Turn::text("hi") }]);
    let run = t.run(&["prompt", "again"]);
    run.ok();
    assert!(run.stderr.contains("· step 1 done: 10 in, 5 out\n"), "{}", run.stderr);
    assert!(run.stderr.contains("· total: 1 model call, 10 in, 5 out\n"), "{}", run.stderr);
}

#[test]
fn ls_says_why_an_agent_needs_a_run() {
    let (server, t) = TestWorkspace::served("verbs-why", Dialect::Anthropic);
    server.push(Reply::Turn(Turn::text("hi")));
    t.run(&["prompt", "--name", "Ada", "hello"]).ok();
    t.set("retry.max_attempts", "4");
    for _ in 0..4 {
        server.push(Reply::Status {
            code: 529,
            retry_after: None,
            body: "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}".into(),
        });
    }
    let failed = t.run(&["send", "Ada", "more"]);
    assert_eq!(failed.code, 1, "{}", failed.stderr);
    let agent = &t.agents()[0];
    assert_eq!(agent["state"], "failed");
    let why = agent["why"].as_str().expect("why");
    assert!(why.starts_with("step 2 of agent") && why.contains("HTTP 529") && why.contains("Overloaded"), "{why}");
    let ls = t.run(&["ls"]);
    let lines: Vec<&str> = ls.ok().lines().collect();
    assert_eq!(lines.len(), 3, "{}", ls.stdout);
    assert!(lines[2].trim_start().starts_with("↳ step 2 of agent"), "{}", ls.stdout);
    // Once it has run again, nothing is said.
    server.push(Reply::Turn(Turn::text("fine now")));
    t.run(&["run", "Ada"]).ok();
    assert!(t.agents()[0].get("why").is_none());
    assert_eq!(t.run(&["ls"]).ok().lines().count(), 2);
}

#[test]
fn rough_edges_of_the_first_minutes_are_smoothed() {
    let (server, t) = TestWorkspace::served("rough-edges", Dialect::Anthropic);
    server.push_turns([Turn::bash("c1", "echo one"), Turn::text("first")]);
    t.run(&["prompt", "--name", "Zed", "go first"]).ok();
    // (Made in the next second: `created` counts seconds.)
    std::thread::sleep(std::time::Duration::from_millis(1100));
    server.push_turns([Turn::text("second")]);
    t.run(&["prompt", "--name", "Abe", "go second"]).ok();
    // `show` without `--step`: the latest, said so.
    let show = t.run(&["show", "Zed"]);
    assert!(show.ok().contains("\"step\": 2"), "{}", show.stdout);
    assert!(show.stderr.contains("step 2, its latest"), "{}", show.stderr);
    // `ls` oldest first (not by id); `tree` says "1 step".
    let ls = t.run(&["ls"]).ok().to_owned();
    let (zed, abe) = (ls.find("Zed").expect("Zed"), ls.find("Abe").expect("Abe"));
    assert!(zed < abe, "{ls}");
    assert!(t.run(&["tree"]).ok().contains(" 1 step, "), "tree");
    // An unknown role lists the roles there are.
    let role = t.run(&["prompt", "--role", "nobody", "go"]);
    assert_eq!(role.code, 2);
    assert!(role.stderr.contains("its roles: ") && role.stderr.contains("worker"), "{}", role.stderr);
    assert!(!role.stderr.contains("compactor"), "{}", role.stderr);
    // `diff` of an agent without a project says why in words that fit a `-w` workspace.
    let diff = t.run(&["diff", "Zed"]);
    assert_eq!(diff.code, 2, "{}", diff.stderr);
    assert!(diff.stderr.contains("did not start from a project: its workspace has none"), "{}", diff.stderr);
    // `--with-changes` where there is no project is refused, as `--base` is.
    let changes = t.run(&["prompt", "--with-changes", "go"]);
    assert_eq!(changes.code, 2, "{}", changes.stderr);
    assert!(changes.stderr.contains("this workspace has no project"), "{}", changes.stderr);
    // A model without a price: ls says how to price it.
    t.set("roles.worker.model", "unpriced-model-1");
    server.push_turns([Turn::text("third")]);
    t.run(&["prompt", "--name", "Cheap", "go"]).ok();
    let ls = t.run(&["ls"]);
    assert!(ls.stderr.contains("offshoot config set prices.<model>.input"), "{}", ls.stderr);
}

#[test]
fn forks_show_under_their_origin_with_their_own_message_and_fork_counts_steps_with_step() {
    let (server, t) = TestWorkspace::served("forks-shown", Dialect::Anthropic);
    server.push_for("Origin", [Turn::bash("c1", "echo one"), Turn::bash("c2", "echo two"), Turn::text("origin done")]);
    t.run(&["prompt", "--name", "Origin", "do three things"]).ok();
    server.push_for("Branch", [Turn::text("branched")]);
    t.run(&["fork", "--from", "Origin", "--step", "2", "--name", "Branch", "try another way"]).ok();
    server.push_for("Twin", [Turn::text("twinned")]);
    t.run(&["fork", "--from", "Origin", "--name", "Twin", "once more"]).ok();
    // From before step 2: its first request holds the first call and not the second.
    let asked = server.requests_for("Branch")[0].body.to_string();
    assert!(asked.contains("echo one") && !asked.contains("echo two"), "{asked}");
    assert!(asked.contains("try another way"), "{asked}");
    // `tree`: the forks under their origin, marked; no fork is a root of its own.
    let tree = t.run(&["tree"]).ok().to_owned();
    let lines: Vec<&str> = tree.lines().collect();
    assert!(lines[0].contains("Origin"), "{tree}");
    for fork in ["Branch", "Twin"] {
        assert!(lines.iter().any(|l| l.contains("⑂ ") && l.contains(fork)), "{tree}");
        assert!(!lines.iter().any(|l| l.split_whitespace().nth(1) == Some(fork)), "{fork} is a root: {tree}");
    }
    // `ls`: a fork's goal is its own message, not its origin's.
    let ls = t.run(&["--json", "ls"]).ok().to_owned();
    let agents: Vec<serde_json::Value> = ls.lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    let of = |name: &str| agents.iter().find(|a| a["name"] == name).expect("listed").clone();
    assert_eq!(of("Branch")["goal"], "try another way");
    assert_eq!(of("Twin")["goal"], "once more");
    assert_eq!(of("Branch")["origin"], of("Origin")["id"]);
    assert_eq!(of("Origin")["goal"], "do three things");
}

#[test]
fn log_cuts_long_tool_output_says_how_to_see_it_all_and_full_shows_it() {
    let (server, t) = TestWorkspace::served("log-full", Dialect::Anthropic);
    server.push_turns([Turn::bash("c1", "seq 1 30"), Turn::text("counted")]);
    t.run(&["prompt", "--name", "Counter", "count"]).ok();
    let cut = t.run(&["log", "Counter"]).ok().to_owned();
    assert!(cut.contains("more lines; `--full` shows them") && !cut.contains("\n  30\n"), "{cut}");
    let full = t.run(&["log", "Counter", "--full"]).ok().to_owned();
    assert!(full.contains("  29\n  30") && !full.contains("more lines"), "{full}");
}
