//! Fault injection: retries, broken and silent streams, truncation, bad arguments.

use std::time::Duration;

use serde_json::Value;

use crate::support::server::{Reply, Turn, error_body};
use crate::support::workspace::{Dialect, TestWorkspace};

fn meta(t: &TestWorkspace, id: &str, step: usize) -> Value {
    let path = t.step_records(id)[step - 1].join("meta.json");
    serde_json::from_slice(&std::fs::read(path).expect("meta")).expect("json")
}

#[test]
fn rate_limit_with_retry_after_is_honoured_and_recorded() {
    let (server, t) = TestWorkspace::served("fault-429", Dialect::Anthropic);
    server.push(Reply::Status {
        code: 429,
        retry_after: Some("1".into()),
        body: error_body("anthropic", "rate_limit_error", "slow down"),
    });
    server.push(Reply::Turn(Turn::text("after the wait")));
    let started = std::time::Instant::now();
    let run = t.run(&["prompt", "hello"]);
    assert!(run.ok().contains("after the wait"));
    assert!(started.elapsed() >= Duration::from_secs(1), "retry-after was not honoured");
    let id = t.only_agent();
    let m = meta(&t, &id, 1);
    assert_eq!(m["attempts"].as_array().expect("attempts").len(), 2);
    assert_eq!(m["attempts"][0]["status"], 429);
    assert_eq!(m["attempts"][0]["retry_after_ms"], 1000);
    let raw = std::fs::read_to_string(t.step_records(&id)[0].join("response.ndjson")).expect("ndjson");
    assert!(raw.contains("slow down") && raw.contains("message_stop"), "{raw}");
}

#[test]
fn server_errors_and_broken_streams_are_retried() {
    for dialect in [Dialect::Anthropic, Dialect::Chat, Dialect::Responses] {
        let (server, t) = TestWorkspace::served(&format!("fault-5xx-{dialect:?}"), dialect);
        t.set(&format!("providers.{}.idle_timeout_secs", provider(dialect)), "1");
        server.push(Reply::Status { code: 500, retry_after: None, body: "{}".into() });
        server.push(Reply::ResetMidStream(Turn::text("this answer breaks off halfway through the stream")));
        server.push(Reply::Stall(Turn::text("this one goes silent"), Duration::from_secs(5)));
        server.push(Reply::Turn(Turn::text("whole at last")));
        let run = t.run(&["prompt", "hello"]);
        assert!(run.ok().ends_with("whole at last\n"), "{dialect:?}: {}", run.stdout);
        let m = meta(&t, &t.only_agent(), 1);
        let attempts = m["attempts"].as_array().expect("attempts");
        assert_eq!(attempts.len(), 4, "{dialect:?}: {m}");
        assert_eq!(attempts[0]["status"], 500);
        assert!(attempts[1]["error"].as_str().expect("error").contains("stream"), "{}", attempts[1]);
        assert!(attempts[2]["error"].as_str().expect("error").to_lowercase().contains("timeout"), "{}", attempts[2]);
        // Only the complete answer was committed.
        let log = t.run(&["log", &t.only_agent()]);
        assert!(!log.ok().contains("breaks off"), "{}", log.stdout);
    }
}

fn provider(d: Dialect) -> &'static str {
    match d {
        Dialect::Anthropic => "anthropic",
        Dialect::Chat => "openai",
        Dialect::Responses => "openai-responses",
    }
}

#[test]
fn overloaded_past_max_attempts_fails_and_keeps_nothing() {
    let (server, t) = TestWorkspace::served("fault-529", Dialect::Anthropic);
    t.set("retry.max_attempts", "3");
    for _ in 0..3 {
        server.push(Reply::Status {
            code: 529,
            retry_after: None,
            body: error_body("anthropic", "overloaded_error", "Overloaded"),
        });
    }
    let run = t.run(&["prompt", "hello"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("HTTP 529") && run.stderr.contains("Overloaded"), "{}", run.stderr);
    assert!(run.stderr.contains("gave up after 3 attempts"), "{}", run.stderr);
    assert_eq!(server.requests().len(), 3);
    assert!(t.agents().is_empty());
    assert_eq!(t.git(&["branch", "--list", "agents/*"]), "");
}

#[test]
fn truncated_output_is_refused_and_never_executed() {
    for dialect in [Dialect::Anthropic, Dialect::Chat, Dialect::Responses] {
        let (server, t) = TestWorkspace::served(&format!("fault-trunc-{dialect:?}"), dialect);
        server.push(Reply::Turn(Turn::text("first answer")));
        t.run(&["prompt", "--name", "Cut", "hello"]).ok();
        let id = t.only_agent();
        let before = t.git(&["rev-parse", &format!("agents/{id}")]);
        server.push(Reply::Truncated(Turn::bash("call_9", "touch EXECUTED")));
        let run = t.run(&["send", "Cut", "now do something"]);
        assert_eq!(run.code, 1, "{dialect:?}: {}", run.stderr);
        assert!(run.stderr.contains("cut off at the output limit"), "{}", run.stderr);
        assert!(run.stderr.contains("offshoot config set roles.worker.max_output_tokens"), "{}", run.stderr);
        assert!(!t.ws.join("agents").join(&id).join("EXECUTED").exists());
        // The delivered message is committed; the truncated output is not.
        let after = t.git(&["rev-list", &format!("{}..agents/{id}", before.trim())]);
        assert_eq!(after.lines().count(), 1);
        let tip_files = t.git(&["ls-tree", "--name-only", &format!("agents/{id}"), ".offshoot/messages/"]);
        assert_eq!(tip_files.lines().last(), Some(".offshoot/messages/0003-user.md"));
    }
}

#[test]
fn malformed_tool_arguments_get_an_error_result_and_the_conversation_goes_on() {
    for dialect in [Dialect::Anthropic, Dialect::Chat, Dialect::Responses] {
        let (server, t) = TestWorkspace::served(&format!("fault-args-{dialect:?}"), dialect);
        server.push(Reply::Turn(Turn::call("call_1", "bash", "{\"command\": \"echo hi")));
        server.push(Reply::Turn(Turn::text("recovered")));
        t.run(&["prompt", "go"]).ok();
        let second = server.requests()[1].body.to_string();
        assert!(second.contains("not a JSON object, so nothing ran"), "{dialect:?}: {second}");
    }
}
