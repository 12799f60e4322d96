//! `offshoot acp` driven by a real ACP client: the `agent-client-protocol` package from
//! PyPI (installed by `.ci/tools` under target/test-tools/py), speaking to it over its
//! stdin and stdout as an editor does.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::server::Turn;
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
    let mut command = vec![agent.get_program().to_string_lossy().into_owned()];
    command.extend(agent.get_args().map(|a| a.to_string_lossy().into_owned()));
    let env: serde_json::Map<String, Value> = agent
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_string_lossy().into_owned(), json!(v?.to_string_lossy()))))
        .collect();
    let plan =
        json!({"command": command, "env": env, "cwd": cwd, "session": session, "steps": steps, "answers": answers});
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
