//! `offshoot acp` driven by a real ACP client: the `agent-client-protocol` package from
//! PyPI (installed by `.ci/tools` under target/test-tools/py), speaking to it over its
//! stdin and stdout as an editor does.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::server::{Reply, Turn};
use crate::support::workspace::{Dialect, TestWorkspace};

/// Runs the client on `steps` against `offshoot acp` of `t`, in `cwd`; what it saw.
fn client(t: &TestWorkspace, cwd: &Path, session: Option<&str>, steps: Value) -> Vec<Value> {
    client_answering(t, cwd, session, steps, json!([]), &[])
}

/// [`client`], the user answering permission requests with `answers` in turn, and
/// `offshoot acp` started with `flags`.
fn client_answering(
    t: &TestWorkspace,
    cwd: &Path,
    session: Option<&str>,
    steps: Value,
    answers: Value,
    flags: &[&str],
) -> Vec<Value> {
    let mut agent = t.command();
    agent.arg("acp").args(flags);
    drive(&agent, cwd, session, steps, answers)
}

/// The client on `steps` against `agent` (an `offshoot acp` command), in `cwd`.
fn drive(agent: &Command, cwd: &Path, session: Option<&str>, steps: Value, answers: Value) -> Vec<Value> {
    drive_with(agent, cwd, session, steps, json!({"answers": answers}))
}

/// [`drive`], with more of the plan (`answers`, `mcp_servers`).
fn drive_with(agent: &Command, cwd: &Path, session: Option<&str>, steps: Value, more: Value) -> Vec<Value> {
    let mut command = vec![agent.get_program().to_string_lossy().into_owned()];
    command.extend(agent.get_args().map(|a| a.to_string_lossy().into_owned()));
    let env: serde_json::Map<String, Value> = agent
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_string_lossy().into_owned(), json!(v?.to_string_lossy()))))
        .collect();
    let mut plan = json!({"command": command, "env": env, "cwd": cwd, "session": session, "steps": steps});
    for (key, value) in more.as_object().into_iter().flatten() {
        plan[key] = value.clone();
    }
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-tools/py");
    let mut python = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp/client.py"))
        .env("PYTHONPATH", &tools)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    {
        use std::io::Write;
        let mut stdin = python.stdin.take().expect("stdin");
        stdin.write_all(plan.to_string().as_bytes()).expect("plan");
    }
    let out = python.wait_with_output().expect("client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the client failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

fn events<'a>(seen: &'a [Value], kind: &str) -> Vec<&'a Value> {
    seen.iter().filter(|e| e["event"] == kind).collect()
}

fn texts(seen: &[Value], kind: &str) -> String {
    seen.iter().filter(|e| e["kind"] == kind).filter_map(|e| e["text"].as_str()).collect()
}

#[test]
fn an_editor_makes_a_session_prompts_it_twice_lists_it_and_a_new_process_replays_it() {
    let (server, t) = TestWorkspace::served("acp-session", Dialect::Anthropic);
    server.push_turns([Turn::bash("b1", "echo hi > hi.txt"), Turn::text("first done"), Turn::text("second done")]);
    let seen =
        client(&t, &t.root, None, json!([["new"], ["prompt", "make hi.txt"], ["prompt", "and again"], ["list"]]));
    assert_eq!(events(&seen, "initialized")[0]["load"], true, "{seen:?}");
    let session = events(&seen, "session")[0]["session"].as_str().expect("a session id").to_owned();
    // The session is the agent: the CLI knows it by that id.
    assert_eq!(t.only_agent(), session);
    let stops: Vec<&Value> = events(&seen, "stopped").into_iter().map(|e| &e["reason"]).collect();
    assert_eq!(stops, [&json!("end_turn"), &json!("end_turn")], "{seen:?}");
    let call = seen.iter().find(|e| e["kind"] == "tool_call").expect("a tool call");
    assert_eq!(call["tool_kind"], "execute");
    assert!(call["title"].as_str().is_some_and(|t| t.contains("echo hi > hi.txt")), "{call}");
    let done = seen.iter().find(|e| e["kind"] == "tool_call_update").expect("its end");
    assert_eq!((&done["id"], &done["status"]), (&call["id"], &json!("completed")));
    let said = texts(&seen, "agent_message_chunk");
    assert!(said.contains("first done") && said.contains("second done"), "{said}");
    assert!(events(&seen, "listed")[0]["sessions"].as_array().expect("list").contains(&json!(session)));
    // Every step is a commit on the agent's branch.
    let log = t.run(&["log", "--json", &session]).ok().to_owned();
    assert!(log.lines().count() >= 5, "{log}");

    // Another process, another connection: the transcript comes back as updates.
    let replayed = client(&t, &t.root, Some(&session), json!([["load"]]));
    assert_eq!(events(&replayed, "loaded").len(), 1, "{replayed:?}");
    let heard = texts(&replayed, "user_message_chunk");
    assert!(heard.contains("make hi.txt") && heard.contains("and again"), "{heard}");
    let said = texts(&replayed, "agent_message_chunk");
    assert!(said.contains("first done") && said.contains("second done"), "{said}");
    assert!(replayed.iter().any(|e| e["kind"] == "tool_call" && e["id"] == call["id"]), "{replayed:?}");
}

#[test]
fn bad_requests_get_errors_naming_the_thing_and_the_agent_keeps_serving() {
    let (_server, t) = TestWorkspace::served("acp-bad", Dialect::Anthropic);
    let seen = client(
        &t,
        &t.root,
        Some("nobody"),
        json!([["bad_prompt", "nobody", "hello"], ["load"], ["bad_prompt", "nobody", ""], ["new"]]),
    );
    let errors = events(&seen, "error");
    assert_eq!(errors.len(), 3, "{seen:?}");
    assert!(errors.iter().all(|e| e["code"] == -32602), "{errors:?}");
    assert!(errors[0]["message"].as_str().is_some_and(|m| m.contains("no session `nobody`")), "{errors:?}");
    assert!(errors[1]["message"].as_str().is_some_and(|m| m.contains("no session `nobody`")), "{errors:?}");
    // Still serving: a new session after the errors, and nothing was made by them.
    assert_eq!(events(&seen, "session").len(), 1, "{seen:?}");
    assert!(t.agents().is_empty(), "no agent was made");
}

#[test]
fn the_editor_answers_what_the_policy_asks_and_a_client_that_cannot_gets_the_unattended_no() {
    let (server, t) = TestWorkspace::served("acp-ask", Dialect::Anthropic);
    t.set("roles.worker.permissions.ask", r#"["bash(rm:*)"]"#);
    server.push_turns([
        Turn::bash("c0", "echo 1 > one.txt && echo 2 > two.txt"),
        Turn::bash("c1", "rm -f one.txt"),
        Turn::bash("c2", "rm -f two.txt"),
        Turn::text("one gone, two kept"),
    ]);
    let seen = client_answering(
        &t,
        &t.root,
        None,
        json!([["new"], ["prompt", "make two files, remove both"]]),
        json!(["allow_once", "reject_once"]),
        &[],
    );
    let asked = events(&seen, "permission");
    assert_eq!(asked.len(), 2, "{seen:?}");
    // The editor is asked about the call it was shown, with the choices it has.
    assert_eq!(asked[0]["id"], "c1", "{asked:?}");
    assert_eq!(asked[0]["options"], json!(["allow_once", "allow_always", "reject_once"]));
    assert!(asked[0]["title"].as_str().is_some_and(|t| t.contains("rm -f one.txt")), "{asked:?}");
    let dir = t.ws.join("agents").join(t.only_agent());
    assert!(!dir.join("one.txt").exists(), "allowed once, the call ran");
    assert!(dir.join("two.txt").exists(), "rejected, the call did not run");
    // The model reads the no as a refusal, with the reason.
    let said = server.result_text(3);
    assert!(said.contains("the user rejected it in the editor"), "{said}");
    assert_eq!(events(&seen, "stopped")[0]["reason"], "end_turn");

    // A client whose user cannot be asked: the run's no, at once.
    server.push_turns([Turn::bash("c3", "rm -f x"), Turn::text("kept")]);
    let seen = client_answering(&t, &t.root, None, json!([["new"], ["prompt", "remove x"]]), json!(["error"]), &[]);
    assert_eq!(events(&seen, "permission").len(), 1, "{seen:?}");
    assert!(server.result_text(5).contains("the editor could not answer"), "{}", server.result_text(5));

    // `--on-ask deny`: no question reaches the editor.
    server.push_turns([Turn::bash("c4", "rm -f x"), Turn::text("kept again")]);
    let flags = ["--on-ask", "deny"];
    let seen = client_answering(&t, &t.root, None, json!([["new"], ["prompt", "remove x"]]), json!([]), &flags);
    assert!(events(&seen, "permission").is_empty(), "{seen:?}");
    assert!(server.result_text(7).contains("no one is here to answer"), "{}", server.result_text(7));
}

#[test]
fn a_cancel_stops_the_turn_the_next_prompt_goes_on_and_a_fork_continues_from_there() {
    let (server, t) = TestWorkspace::served("acp-cancel", Dialect::Anthropic);
    server.push_turns([Turn::bash("s1", "sleep 60"), Turn::text("going on"), Turn::text("in the fork")]);
    let seen = client(
        &t,
        &t.root,
        None,
        json!([["new"], ["cancel_after", "wait a minute", 3.0], ["prompt", "go on"], ["fork"], ["prompt", "fork it"]]),
    );
    let stops: Vec<&Value> = events(&seen, "stopped").into_iter().map(|e| &e["reason"]).collect();
    assert_eq!(stops, [&json!("cancelled"), &json!("end_turn"), &json!("end_turn")], "{seen:?}");
    let said = texts(&seen, "agent_message_chunk");
    assert!(said.contains("going on") && said.contains("in the fork"), "{said}");
    // The fork is an agent of its own, forked from the session where it stood.
    let forked = events(&seen, "forked")[0];
    let (origin, fork) = (forked["origin"].as_str().expect("origin"), forked["session"].as_str().expect("fork"));
    assert_ne!(origin, fork);
    let agents = t.agents();
    let of = |id: &str| agents.iter().find(|a| a["id"] == id).unwrap_or_else(|| panic!("{id} in {agents:?}")).clone();
    assert_eq!(of(fork)["origin"], origin, "{agents:?}");
    assert_eq!(of(origin)["state"], "done", "{agents:?}");
    // The fork's model saw the conversation it continues, and only the fork has its message.
    let fork_request = String::from_utf8_lossy(&server.requests().last().expect("a request").raw).into_owned();
    assert!(fork_request.contains("go on") && fork_request.contains("fork it"), "{fork_request}");
    let origin_log = t.run(&["log", origin]).ok().to_owned();
    assert!(!origin_log.contains("fork it"), "{origin_log}");
}

#[test]
fn a_client_that_goes_away_mid_turn_leaves_the_agent_stopped_and_loadable() {
    let (server, t) = TestWorkspace::served("acp-gone", Dialect::Anthropic);
    server.push_turns([Turn::bash("s1", "sleep 60"), Turn::text("back again")]);
    let seen = client(&t, &t.root, None, json!([["new"], ["quit_during", "wait a minute", 3.0]]));
    let session = events(&seen, "session")[0]["session"].as_str().expect("a session").to_owned();
    // Nothing is left running, and the agent says it was stopped.
    assert_eq!(t.running_driver(&session), None, "its driver was left running");
    let agents = t.agents();
    assert_eq!(agents[0]["state"], "stopped", "{agents:?}");
    // Another connection takes it up where it stopped: resumed, then prompted.
    let again = client(&t, &t.root, Some(&session), json!([["resume"], ["prompt", "go on"], ["close"]]));
    assert_eq!(events(&again, "stopped")[0]["reason"], "end_turn", "{again:?}");
    assert!(texts(&again, "agent_message_chunk").contains("back again"), "{again:?}");
    assert_eq!(events(&again, "closed").len(), 1, "{again:?}");
}

#[test]
fn a_second_prompt_while_one_runs_is_refused_and_the_first_goes_on() {
    let (server, t) = TestWorkspace::served("acp-twice", Dialect::Anthropic);
    server.push_turns([Turn::bash("s1", "sleep 3"), Turn::text("slept")]);
    let seen = client(&t, &t.root, None, json!([["new"], ["prompt_twice", "sleep", "hurry", 1.0]]));
    let errors = events(&seen, "error");
    assert_eq!(errors.len(), 1, "{seen:?}");
    assert_eq!(errors[0]["code"], -32602);
    assert!(errors[0]["message"].as_str().is_some_and(|m| m.contains("is working on a prompt")), "{errors:?}");
    assert_eq!(events(&seen, "stopped")[0]["reason"], "end_turn", "{seen:?}");
    // The refused prompt reached no one.
    assert!(server.requests().iter().all(|r| !String::from_utf8_lossy(&r.raw).contains("hurry")));
}

/// Raw lines to `offshoot acp` and the lines it answered, for what no real client sends.
fn raw(t: &TestWorkspace, lines: &[String]) -> Vec<Value> {
    use std::io::{BufRead, BufReader, Write};
    let mut agent = t.command();
    let mut child = agent
        .arg("acp")
        .current_dir(&t.root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("offshoot acp");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut answers = Vec::new();
    for line in lines {
        writeln!(stdin, "{line}").expect("write");
        let mut answer = String::new();
        stdout.read_line(&mut answer).expect("an answer");
        answers.push(serde_json::from_str(&answer).unwrap_or_else(|_| panic!("not JSON: {answer:?}")));
    }
    drop(stdin);
    assert!(child.wait().expect("exit").success());
    answers
}

#[test]
fn malformed_json_an_unknown_method_and_a_missing_cwd_are_json_rpc_errors_and_it_keeps_serving() {
    let (_server, t) = TestWorkspace::served("acp-raw", Dialect::Anthropic);
    let missing = t.root.join("no-such-dir");
    let request = |id: u32, method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    let answers = raw(
        &t,
        &[
            "{this is not json".to_owned(),
            request(1, "initialize", json!({"protocolVersion": 1, "clientCapabilities": {}})),
            request(2, "session/teleport", json!({})),
            request(3, "session/new", json!({"cwd": missing, "mcpServers": []})),
            request(4, "session/new", json!({"cwd": "relative/dir", "mcpServers": []})),
            request(5, "session/new", json!({"cwd": t.root, "mcpServers": []})),
        ],
    );
    assert_eq!(answers[0]["error"]["code"], -32700, "{answers:?}");
    assert_eq!(answers[1]["result"]["protocolVersion"], 1, "{answers:?}");
    assert_eq!(answers[2]["error"]["code"], -32601, "{answers:?}");
    for bad in &answers[3..5] {
        assert_eq!(bad["error"]["code"], -32602, "{answers:?}");
        assert!(bad["error"]["message"].as_str().is_some_and(|m| m.contains("is not an absolute path to a directory")));
    }
    assert!(answers[5]["result"]["sessionId"].is_string(), "{answers:?}");
    assert!(t.agents().is_empty(), "a session with no prompt makes no agent");
}

#[test]
fn in_place_the_edit_lands_in_the_checkout_as_it_is_made_and_the_users_git_is_untouched() {
    let (server, t, repo) = crate::project::project("acp-in-place");
    std::fs::create_dir_all(repo.join("src")).expect("src");
    std::fs::write(repo.join("src/lib.rs"), "pub fn one() -> u32 { 1 }\n").expect("lib.rs");
    crate::project::git(&repo, &["add", "src/lib.rs"]);
    crate::project::git(&repo, &["commit", "-q", "-m", "lib"]);
    let users_git = || {
        let git = |args: &[&str]| crate::project::git(&repo, args);
        (git(&["symbolic-ref", "HEAD"]), git(&["rev-parse", "HEAD"]), git(&["ls-files", "-s", "--debug"]))
    };
    let before = users_git();
    let two = "pub fn one() -> u32 { 1 }\npub fn two() -> u32 { 2 }\n";
    // A file the user keeps private stays private when the agent's change lands.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(repo.join("b.txt"), std::fs::Permissions::from_mode(0o600)).expect("chmod");
    server.push_turns([
        Turn::tool("w0", "write_file", json!({"path": "b.txt", "content": "line 1\nand more\n"})),
        Turn::tool("w1", "write_file", json!({"path": "src/lib.rs", "content": two})),
        Turn::bash("b1", "sleep 2"),
        Turn::text("added two"),
    ]);
    let lib = repo.join("src/lib.rs");
    let seen = client(&t, &repo, None, json!([["new"], ["prompt_watching", "add two", lib, "two()"]]));
    // In place is the default where there is a checkout.
    assert_eq!(events(&seen, "session")[0]["options"], json!({"work": "in-place"}), "{seen:?}");
    assert_eq!(events(&seen, "watched")[0]["seen_before_end"], true, "the edit landed only at the end: {seen:?}");
    assert_eq!(std::fs::read_to_string(&lib).expect("lib.rs"), two);
    let private = std::fs::metadata(repo.join("b.txt")).expect("b.txt").permissions().mode() & 0o777;
    assert_eq!(
        (std::fs::read_to_string(repo.join("b.txt")).expect("b.txt"), private),
        ("line 1\nand more\n".into(), 0o600)
    );
    // The user's uncommitted change is still there, and their branch, HEAD and index are as they were.
    assert_eq!(std::fs::read_to_string(repo.join("a.txt")).expect("a.txt"), "line 0\nmine, not committed\n");
    assert_eq!(users_git(), before);
    // Every step is a commit of the agent's.
    let session = events(&seen, "session")[0]["session"].as_str().expect("session").to_owned();
    let log = t.run(&["log", &session]).ok().to_owned();
    assert!(log.contains("write_file") && log.contains("sleep 2") && log.contains("added two"), "{log}");

    // `copy`, chosen before the first prompt: the checkout is left alone until `apply`.
    server.push_turns([
        Turn::tool("w2", "write_file", json!({"path": "src/lib.rs", "content": "// copied\n"})),
        Turn::text("rewrote it"),
    ]);
    let steps =
        json!([["new"], ["set_option", "work", "copy"], ["prompt", "rewrite"], ["set_option", "work", "in-place"]]);
    let seen = client(&t, &repo, None, steps);
    assert_eq!(events(&seen, "option_set")[0]["options"], json!({"work": "copy"}), "{seen:?}");
    assert_eq!(std::fs::read_to_string(&lib).expect("lib.rs"), two, "a copy session wrote the checkout");
    let refused = events(&seen, "error");
    assert!(refused[0]["message"].as_str().is_some_and(|m| m.contains("was settled at its first prompt")), "{seen:?}");
    assert_eq!(users_git(), before);
}

#[test]
fn killed_mid_turn_in_place_the_work_goes_on_and_reaches_the_checkout_at_the_next_load() {
    let (server, t, repo) = crate::project::project("acp-killed");
    server.push_turns([
        Turn::bash("b1", "sleep 2"),
        Turn::tool("w1", "write_file", json!({"path": "late.txt", "content": "written after the kill\n"})),
        Turn::text("done"),
    ]);
    let seen = client(&t, &repo, None, json!([["new"], ["kill_during", "take your time", 1.0]]));
    let session = events(&seen, "killed")[0]["session"].as_str().expect("killed").to_owned();
    // The agent's driver is a process of its own: the turn is finished and committed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while t.agents()[0]["state"] != "done" {
        assert!(std::time::Instant::now() < deadline, "{:?}", t.agents());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(!repo.join("late.txt").exists(), "no one was there to write it");
    // The next connection that takes the session up writes what was left.
    let again = client(&t, &repo, Some(&session), json!([["load"]]));
    assert_eq!(events(&again, "loaded").len(), 1, "{again:?}");
    assert_eq!(std::fs::read_to_string(repo.join("late.txt")).expect("late.txt"), "written after the kill\n");
}

#[test]
fn modes_are_the_policys_and_one_set_later_holds_from_the_next_prompt() {
    let (server, t) = TestWorkspace::served("acp-modes", Dialect::Anthropic);
    server.push_turns([
        Turn::tool("w1", "write_file", json!({"path": "a.txt", "content": "one"})),
        Turn::text("could not write"),
        Turn::tool("w2", "write_file", json!({"path": "a.txt", "content": "two"})),
        Turn::text("wrote it"),
    ]);
    let steps = json!([
        ["new"],
        ["set_mode", "read-only"],
        ["prompt", "write a.txt"],
        ["set_mode", "workspace-write"],
        ["prompt", "now write it"],
        ["set_mode", "sideways"]
    ]);
    let seen = client(&t, &t.root, None, steps);
    let offered = &events(&seen, "session")[0]["mode"];
    assert_eq!(offered["current"], "workspace-write", "{seen:?}");
    assert_eq!(offered["available"], json!(["read-only", "ask", "workspace-write", "full"]));
    // Read-only from the start: the write is refused by the mode's rule.
    assert!(server.result_text(1).contains("read-only"), "{}", server.result_text(1));
    // Set after the first prompt: the next one carries it, and the write goes through.
    let dir = t.ws.join("agents").join(t.only_agent());
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).expect("a.txt"), "two");
    let errors = events(&seen, "error");
    assert_eq!(errors.len(), 1, "{seen:?}");
    assert!(errors[0]["message"].as_str().is_some_and(|m| m.contains("sideways")), "{errors:?}");
}

#[test]
fn a_turn_the_provider_fails_is_an_error_naming_it_and_the_next_prompt_goes_on() {
    let (server, t) = TestWorkspace::served("acp-fails", Dialect::Anthropic);
    let refused = r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    server.push(Reply::Status { code: 401, retry_after: None, body: refused.into() });
    server.push_turns([Turn::text("working now")]);
    let seen = client(&t, &t.root, None, json!([["new"], ["prompt", "hello"], ["prompt", "again"]]));
    let errors = events(&seen, "error");
    assert_eq!(errors.len(), 1, "{seen:?}");
    let said = errors[0]["message"].as_str().unwrap_or_default();
    assert!(said.contains("401") && said.contains("invalid x-api-key"), "{said}");
    assert_eq!(events(&seen, "stopped")[0]["reason"], "end_turn", "{seen:?}");
    assert!(texts(&seen, "agent_message_chunk").contains("working now"), "{seen:?}");
}

#[test]
fn working_in_place_hooks_run_in_the_agents_jail_so_a_file_it_lands_runs_no_further_than_it() {
    let (server, t, repo) = crate::project::project("acp-hook-jail");
    // The user's hook runs a script of the checkout, as a lint or a Makefile target does.
    let script = repo.join("check.sh");
    std::fs::write(&script, "#!/bin/sh\ncat > /dev/null\nexit 0\n").expect("check.sh");
    crate::project::git(&repo, &["add", "check.sh"]);
    crate::project::git(&repo, &["commit", "-q", "-m", "check"]);
    t.set("hooks.PreToolUse", &format!("[{{ command = \"sh {}\" }}]", script.display()));
    // The agent rewrites the script; working in place, it lands in the checkout, and the
    // hook runs it at a later call.
    let outside = t.root.join("outside.txt");
    let planted = format!("#!/bin/sh\ncat > /dev/null\necho escaped >> '{}'\nexit 0\n", outside.display());
    server.push_turns([
        Turn::tool("w1", "write_file", json!({"path": "check.sh", "content": planted})),
        // (Time for the checkout to catch up before the next call's hook.)
        Turn::bash("b0", "sleep 1"),
        Turn::bash("b1", "echo next"),
        Turn::text("done"),
    ]);
    let seen = client(&t, &repo, None, json!([["new"], ["prompt", "go"]]));
    assert_eq!(events(&seen, "stopped")[0]["reason"], "end_turn", "{seen:?}");
    assert_eq!(std::fs::read_to_string(&script).expect("check.sh"), planted, "it landed in the checkout");
    assert!(!outside.exists(), "a hook ran the agent's file outside its sandbox");
}

#[test]
fn a_fork_runs_in_the_mode_it_shows() {
    let (server, t) = TestWorkspace::served("acp-fork-mode", Dialect::Anthropic);
    server.push_turns([
        Turn::text("made"),
        Turn::tool("w1", "write_file", json!({"path": "a.txt", "content": "one"})),
        Turn::text("could not"),
    ]);
    let steps = json!([["new"], ["prompt", "hello"], ["set_mode", "read-only"], ["fork"], ["prompt", "write a.txt"]]);
    let seen = client(&t, &t.root, None, steps);
    assert_eq!(events(&seen, "forked")[0]["mode"]["current"], "read-only", "{seen:?}");
    assert!(server.result_text(2).contains("read-only"), "the fork wrote: {}", server.result_text(2));
}

#[test]
fn with_directories_a_task_directory_in_no_repository_is_worked_in_place_and_home_is_refused() {
    let (server, t) = TestWorkspace::served("acp-directory", Dialect::Anthropic);
    // A harness's task directory: files, no git.
    let task = t.root.join("app");
    std::fs::create_dir_all(&task).expect("app");
    std::fs::write(task.join("main.py"), "print('hello')\n").expect("main.py");
    server.push_turns([
        Turn::tool("w1", "write_file", json!({"path": "main.py", "content": "print('fixed')\n"})),
        Turn::bash("b1", "cat main.py"),
        Turn::text("fixed"),
    ]);
    // No `-w`: the workspace is the one offshoot picks for the directory.
    let acp = || {
        let mut c = t.command_bare();
        c.args(["acp", "--directories"]).env("ANTHROPIC_BASE_URL", server.url()).env("ANTHROPIC_API_KEY", "k");
        c
    };
    let seen = drive(&acp(), &task, None, json!([["new"], ["prompt", "fix main.py"]]), json!([]));
    assert_eq!(events(&seen, "session")[0]["options"], json!({"work": "in-place"}), "{seen:?}");
    assert_eq!(events(&seen, "stopped")[0]["reason"], "end_turn", "{seen:?}");
    // The agent started from the directory's files and its edit landed there; no `.git` was made in it.
    let read = seen.iter().find(|e| e["kind"] == "tool_call_update" && e["id"] == "b1").expect("b1");
    assert_eq!(read["status"], "completed", "{seen:?}");
    assert_eq!(std::fs::read_to_string(task.join("main.py")).expect("main.py"), "print('fixed')\n");
    assert!(!task.join(".git").exists(), "a .git was made in the task directory");
    // The home directory is never taken whole, nor one holding it (and offshoot's data).
    for held in [&t.home, &t.root] {
        let seen = drive(&acp(), held, None, json!([["new"]]), json!([]));
        let refused = events(&seen, "error");
        let said = refused.first().and_then(|e| e["message"].as_str()).unwrap_or_default();
        assert!(said.contains("is not taken as a project") && said.contains("which agents must not read"), "{seen:?}");
    }
    // (Nothing was made for them: the task directory's git directory is the only one.)
    let made: Vec<String> = std::fs::read_dir(t.home.join("workspaces"))
        .expect("workspaces")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".git"))
        .collect();
    assert!(made.len() == 1 && made[0].starts_with("app-"), "{made:?}");
}

#[test]
fn a_dispatched_child_is_its_dispatch_call_whose_updates_carry_its_state() {
    let (server, t) = TestWorkspace::served("acp-children", Dialect::Anthropic);
    server.push_for("Kid", [Turn::text("kid done")]);
    let dispatch = Turn::tool("d1", "dispatch", json!({"role": "worker", "goal": "be kid", "name": "Kid"}));
    server.push_turns([dispatch, Turn::text("waiting"), Turn::text("lead done")]);
    let seen = client(&t, &t.root, None, json!([["new"], ["prompt", "lead"]]));
    assert_eq!(events(&seen, "stopped")[0]["reason"], "end_turn", "{seen:?}");
    let of_d1: Vec<&Value> = seen.iter().filter(|e| e["kind"] == "tool_call_update" && e["id"] == "d1").collect();
    let kid = t.id_of("Kid");
    let said = |e: &&Value| e["text"].as_str().unwrap_or_default().to_owned();
    assert!(of_d1.iter().any(|e| said(e).contains(&format!("`{kid}` is at work: step 1"))), "{of_d1:?}");
    let last = of_d1.last().expect("updates of d1");
    assert_eq!((said(last), &last["status"]), (format!("`{kid}` answered: kid done"), &json!("completed")));
}

#[test]
fn the_editors_mcp_servers_are_the_sessions_agents_and_a_bad_one_is_refused_at_new() {
    let (server, t) = TestWorkspace::served("acp-mcp", Dialect::Anthropic);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cli/support/mcp_server.py");
    let files = json!({"name": "files", "command": "python3", "args": [script, "stdio"]});
    server.push_turns([Turn::tool("c1", "mcp__files__echo", json!({"text": "over stdio"})), Turn::text("echoed")]);
    let mut acp = t.command();
    acp.arg("acp");
    let seen = drive_with(&acp, &t.root, None, json!([["new"], ["prompt", "echo"]]), json!({"mcp_servers": [files]}));
    assert_eq!(events(&seen, "stopped")[0]["reason"], "end_turn", "{seen:?}");
    // The model was offered the server's tool, and its answer came back.
    let offered =
        server.requests()[0].body["tools"].as_array().expect("tools").iter().any(|t| t["name"] == "mcp__files__echo");
    assert!(offered, "the editor's server was not offered");
    assert!(server.result_text(1).contains("over stdio"), "{}", server.result_text(1));
    // Its env stays out of every agent's reach: kept in the workspace's internals.
    let kept = t.ws.join("client-mcp").join(format!("{}.json", t.only_agent()));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&kept).expect("kept").permissions().mode() & 0o777, 0o600);

    // A server offshoot would refuse in its config is refused at session/new, naming it.
    let bad = json!({"name": "nothing", "command": " ", "args": []});
    let seen = drive_with(&acp, &t.root, None, json!([["new"]]), json!({"mcp_servers": [bad]}));
    let refused = &events(&seen, "error")[0];
    assert!(refused["message"].as_str().is_some_and(|m| m.contains("mcp_servers.nothing.command")), "{seen:?}");
    assert_eq!(t.agents().len(), 1, "the refused session made something");
}

#[test]
fn thinking_streams_as_thought_and_the_stop_reason_says_a_cut_off_answer_or_a_refusal() {
    let (server, t) = TestWorkspace::served("acp-stops", Dialect::Anthropic);
    let thought = "Which file holds it? The one named in the goal.";
    let thinking = Turn { thinking: Some((thought.into(), "sig".into())), ..Turn::text("src/lib.rs holds it") };
    server.push_turns([thinking]);
    server.push(Reply::Truncated(Turn::text("half an ans")));
    server.push_turns([Turn { refusal: Some("I won't help with that.".into()), ..Turn::text("") }]);
    server.push_turns([Turn::text("back at it")]);
    let steps = json!([
        ["new"],
        ["prompt", "where is it?"],
        ["prompt", "write a long essay"],
        ["prompt", "do the bad thing"],
        ["prompt", "something else then"]
    ]);
    let seen = client(&t, &t.root, None, steps);
    let stops: Vec<&Value> = events(&seen, "stopped").into_iter().map(|e| &e["reason"]).collect();
    assert_eq!(stops, [&json!("end_turn"), &json!("max_tokens"), &json!("refusal"), &json!("end_turn")], "{seen:?}");
    // The thinking came as it streamed, before the answer it led to.
    assert_eq!(texts(&seen, "agent_thought_chunk"), thought, "{seen:?}");
    let first_thought = seen.iter().position(|e| e["kind"] == "agent_thought_chunk");
    let first_said = seen.iter().position(|e| e["kind"] == "agent_message_chunk");
    assert!(first_thought < first_said, "{seen:?}");
    let said = texts(&seen, "agent_message_chunk");
    assert!(said.contains("I won't help with that.") && said.contains("back at it"), "{said}");
    // The refused prompt and the refusal are not in the next prompt's context.
    let next = server.requests()[3].body.to_string();
    assert!(next.contains("something else then") && next.contains("where is it?"), "{next}");
    assert!(!next.contains("do the bad thing") && !next.contains("I won't help"), "{next}");
}

#[test]
fn a_client_that_takes_compaction_updates_sees_one_start_and_land_with_its_summary() {
    let (server, t) = TestWorkspace::served("acp-compaction", Dialect::Anthropic);
    t.run(&["config", "set", "roles.worker.context_window", "5000", "roles.worker.max_output_tokens", "100"]).ok();
    // The fourth call reports 4,850 of 5,000 tokens: a compaction starts, and the fifth
    // call waits for it to land.
    let reporting = |id: &str, input: u64| Turn { input_tokens: input, ..Turn::bash(id, "echo step") };
    let full = [reporting("r1", 1_000), reporting("r2", 1_000), reporting("r3", 1_000), reporting("r4", 4_850)];
    server.push_turns(full.into_iter().chain([Turn::text("after")]));
    let summary = Turn::tool("w", "write_summary", json!({"content": "four steps of echo"}));
    server.push_matching("Compact the conversation of agent", [summary, Turn::text("done")]);
    let seen = drive_with(
        t.command().arg("acp"),
        &t.root,
        None,
        json!([["new"], ["prompt", "fill it"]]),
        json!({"compaction": true}),
    );
    assert_eq!(events(&seen, "stopped")[0]["reason"], "end_turn", "{seen:?}");
    let updates = events(&seen, "compaction");
    let statuses: Vec<&Value> = updates.iter().map(|u| &u["status"]).collect();
    assert_eq!(statuses, [&json!("in_progress"), &json!("completed")], "{seen:?}");
    assert_eq!(updates[0]["id"], updates[1]["id"]);
    assert_eq!(updates[1]["summary"].as_str().map(str::trim_end), Some("four steps of echo"), "{seen:?}");
    // The turn went on after the landing.
    assert!(texts(&seen, "agent_message_chunk").contains("after"), "{seen:?}");
}

#[test]
fn with_no_key_in_its_environment_a_new_session_is_refused_auth_required_naming_the_variable() {
    let (_server, t) = TestWorkspace::served("acp-auth", Dialect::Anthropic);
    let steps = json!([
        ["authenticate", "environment"],
        ["new"],
        ["authenticate", "environment"],
        ["authenticate", "password"]
    ]);
    let mut keyless = t.command();
    keyless.arg("acp").env_remove("ANTHROPIC_API_KEY");
    let seen = drive(&keyless, &t.root, None, steps.clone(), json!([]));
    assert_eq!(events(&seen, "initialized")[0]["auth"], json!(["environment"]), "{seen:?}");
    // Before any session, nothing is known to be missing.
    assert_eq!(events(&seen, "authenticated").len(), 1, "{seen:?}");
    let errors = events(&seen, "error");
    let codes: Vec<&Value> = errors.iter().map(|e| &e["code"]).collect();
    assert_eq!(codes, [&json!(-32000), &json!(-32000), &json!(-32602)], "{seen:?}");
    for refused in &errors[..2] {
        assert!(refused["message"].as_str().is_some_and(|m| m.contains("`ANTHROPIC_API_KEY`")), "{refused}");
    }
    assert!(errors[2]["message"].as_str().is_some_and(|m| m.contains("no authentication method `password`")));
    assert!(t.agents().is_empty(), "nothing was made");
    // With the key there, there is nothing to do.
    let seen = client(&t, &t.root, None, json!([["new"], ["authenticate", "environment"]]));
    assert_eq!((events(&seen, "session").len(), events(&seen, "authenticated").len()), (1, 1), "{seen:?}");
}

#[test]
fn in_place_what_the_user_changes_or_commits_between_prompts_is_what_the_agent_sees_next() {
    let (server, t, repo) = crate::project::project("acp-both-ways");
    server.push_turns([
        Turn::tool("w1", "write_file", json!({"path": "notes.md", "content": "agent's line\n"})),
        // (A deletion and a link of the agent's: neither is the user's to undo.)
        Turn::bash("r1", "rm a.txt && ln -s notes.md link.md"),
        Turn::text("wrote notes"),
        Turn::bash("b1", "cat notes.md mine.txt c.txt; test -e b.txt || echo no-b.txt; test -e a.txt || echo no-a.txt; readlink link.md"),
        Turn::text("read them"),
    ]);
    let seen = client(&t, &repo, None, json!([["new"], ["prompt", "write notes"]]));
    let session = events(&seen, "session")[0]["session"].as_str().expect("session").to_owned();
    // Between the prompts the user edits the agent's file, makes one, removes one and
    // commits another change.
    std::fs::write(repo.join("notes.md"), "agent's line\nuser's line\n").expect("notes.md");
    std::fs::write(repo.join("mine.txt"), "user's new file\n").expect("mine.txt");
    std::fs::remove_file(repo.join("b.txt")).expect("b.txt");
    std::fs::write(repo.join("c.txt"), "line 2\ncommitted by the user\n").expect("c.txt");
    crate::project::git(&repo, &["commit", "-q", "-m", "c", "--", "c.txt"]);
    let users_git = || {
        let git = |args: &[&str]| crate::project::git(&repo, args);
        (git(&["rev-parse", "HEAD"]), git(&["ls-files", "-s", "--debug"]), git(&["status", "--porcelain"]))
    };
    let before = users_git();
    let seen = client(&t, &repo, Some(&session), json!([["resume"], ["prompt", "read them"]]));
    assert_eq!(events(&seen, "stopped")[0]["reason"], "end_turn", "{seen:?}");
    let read = server.result_text(4);
    for needle in ["user's line", "user's new file", "committed by the user", "no-b.txt", "no-a.txt", "notes.md\n"] {
        assert!(read.contains(needle), "the agent did not see {needle:?}: {read}");
    }
    // The editor was shown the command's output with its end.
    let shown = seen.iter().find(|e| e["kind"] == "tool_call_update" && e["id"] == "b1").expect("b1's end");
    assert!(shown["text"].as_str().is_some_and(|t| t.contains("user's new file")), "{shown}");
    // The checkout is as the user left it, their git too; the agent's branch says what it took.
    assert_eq!(std::fs::read_to_string(repo.join("notes.md")).expect("notes"), "agent's line\nuser's line\n");
    assert!(!repo.join("b.txt").exists());
    assert_eq!(users_git(), before);
    let log = t.git(&["log", "--format=%s", &format!("agents/{session}")]);
    assert!(log.contains("Your edits in the checkout"), "{log}");
}

#[test]
fn a_refused_first_prompt_leaves_the_context_and_the_agent_goes_on_sound() {
    let (server, t) = TestWorkspace::served("acp-refused-first", Dialect::Anthropic);
    server.push_turns([Turn { refusal: Some("No.".into()), ..Turn::text("") }, Turn::text("glad to")]);
    let steps = json!([["new"], ["prompt", "the bad thing"], ["prompt", "a good thing"]]);
    let seen = client(&t, &t.root, None, steps);
    let stops: Vec<&Value> = events(&seen, "stopped").into_iter().map(|e| &e["reason"]).collect();
    assert_eq!(stops, [&json!("refusal"), &json!("end_turn")], "{seen:?}");
    let second = server.requests()[1].body.to_string();
    assert!(second.contains("a good thing") && !second.contains("the bad thing"), "{second}");
    // The history keeps it; doctor finds nothing wrong with what is left.
    let session = events(&seen, "session")[0]["session"].as_str().expect("session").to_owned();
    assert!(t.git(&["log", "--format=%s", &format!("agents/{session}")]).contains("The refused turn"));
    t.run(&["doctor"]).ok();
}

#[test]
fn to_a_client_that_takes_sub_sessions_each_child_is_one_announced_on_its_parent_with_its_own_stream() {
    let (server, t) = TestWorkspace::served("acp-subagents", Dialect::Anthropic);
    let grandkid = Turn::tool("g1", "dispatch", json!({"role": "worker", "goal": "be grandkid", "name": "Grandkid"}));
    server.push_for("Kid", [grandkid, Turn::text("kid waits"), Turn::text("kid done")]);
    server
        .push_for("Grandkid", [Turn::tool("b1", "bash", json!({"command": "echo deep"})), Turn::text("grandkid done")]);
    let dispatch = Turn::tool("d1", "dispatch", json!({"role": "worker", "goal": "be kid", "name": "Kid"}));
    // (The kid's results — it may say one while its own child works — may come one by
    // one or together: a turn for each way.)
    server.push_turns([dispatch, Turn::text("waiting"), Turn::text("noted"), Turn::text("noted")]);
    let mut agent = t.command();
    agent.arg("acp");
    let seen = drive_with(&agent, &t.root, None, json!([["new"], ["prompt", "lead"]]), json!({"subagents": true}));
    assert_eq!(events(&seen, "stopped").first().map(|e| &e["reason"]), Some(&json!("end_turn")), "{seen:?}");
    let lead = events(&seen, "session")[0]["session"].as_str().expect("session").to_owned();
    let (kid, grandkid) = (t.id_of("Kid"), t.id_of("Grandkid"));
    // Each announced once running, on its own parent's session, before anything of it
    // streams; and idle at its end, saying it ended its turn.
    let position = |f: &dyn Fn(&Value) -> bool| seen.iter().position(f);
    for (child, parent, title) in [(&kid, &lead, "Kid"), (&grandkid, &kid, "Grandkid")] {
        let of: Vec<&Value> = events(&seen, "subagent").into_iter().filter(|e| e["session"] == **child).collect();
        assert!(of.len() == 2 && of.iter().all(|e| e["on"] == **parent), "{child}: {of:?}");
        assert_eq!((&of[0]["title"], &of[0]["state"]["state"]), (&json!(title), &json!("running")), "{of:?}");
        assert_eq!(of[1]["state"]["state"], "idle", "{of:?}");
        assert_eq!(of[1]["state"]["stopReason"], "end_turn", "{of:?}");
        let announced = position(&|e| e["event"] == "subagent" && e["session"] == **child);
        let streamed = position(&|e| e["event"] == "update" && e["session"] == **child);
        assert!(announced < streamed && streamed.is_some(), "{child} streams before it is announced: {seen:?}");
    }
    // Under its own id, each child's words and calls: the grandkid's bash and its answer.
    let under = |id: &str, kind: &str| -> String {
        seen.iter().filter(|e| e["session"] == id && e["kind"] == kind).filter_map(|e| e["text"].as_str()).collect()
    };
    assert_eq!(under(&grandkid, "agent_message_chunk"), "grandkid done");
    assert!(under(&grandkid, "tool_call_update").contains("deep"), "{seen:?}");
    assert_eq!(under(&kid, "agent_message_chunk"), "kid waitskid done");
    // None of a child's stream is the lead's, and the lead's dispatch call names its kid.
    let lead_said = under(&lead, "agent_message_chunk");
    assert!(lead_said.starts_with("waitingnoted") && !lead_said.contains("done"), "{lead_said}");
    let named = events(&seen, "call_names");
    assert!(named.iter().any(|e| e["id"] == "d1" && e["on"] == lead && e["sessions"] == json!([kid])), "{named:?}");
    // (And the kid's call that dispatched the grandkid, on the kid's own session.)
    assert!(named.iter().any(|e| e["id"] == "g1" && e["on"] == kid && e["sessions"] == json!([grandkid])), "{named:?}");
}
