//! Fault injection: retries, broken and silent streams, truncation, bad arguments.

use std::time::Duration;

use serde_json::Value;

use crate::support::server::{Reply, Turn, error_body};
use crate::support::workspace::{Dialect, TestWorkspace};

fn meta(t: &TestWorkspace, id: &str, step: usize) -> Value {
    t.step_json(id, step, "meta.json")
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
    let raw = String::from_utf8(t.step_file(&id, 1, "response.ndjson").expect("ndjson")).expect("text");
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
fn a_provider_down_past_the_patience_ends_the_call_in_about_that_time_and_is_called_an_outage() {
    let (server, t) = TestWorkspace::served("fault-patience", Dialect::Anthropic);
    // Attempts without number, every one refused with 503: patience alone ends the call.
    t.set("retry.max_attempts", "100000");
    t.set("retry.patience_secs", "1");
    server.push(Reply::Turn(Turn::bash("b1", "echo one")));
    for _ in 0..1000 {
        server.push(Reply::Status {
            code: 503,
            retry_after: None,
            body: error_body("anthropic", "api_error", "down for maintenance"),
        });
    }
    let started = std::time::Instant::now();
    let run = t.run(&["prompt", "hello"]);
    let took = started.elapsed();
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("HTTP 503") && run.stderr.contains("retry.patience_secs"), "{}", run.stderr);
    // (Backoff of 5 to 20 ms: a second's patience is tens of attempts.)
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(20), "{took:?}");
    let m = meta(&t, &t.only_agent(), 2);
    assert!(m["attempts"].as_array().expect("attempts").len() > 5, "{m}");
    assert_eq!(m["outage"], true, "{m}");
    // A refusal of the request is not an outage.
    let (server, t) = TestWorkspace::served("fault-refused", Dialect::Anthropic);
    server.push(Reply::Turn(Turn::bash("b1", "echo one")));
    server.push(Reply::Status {
        code: 400,
        retry_after: None,
        body: error_body("anthropic", "invalid_request_error", "no"),
    });
    assert_eq!(t.run(&["prompt", "hello"]).code, 1);
    assert_eq!(meta(&t, &t.only_agent(), 2).get("outage"), None);
}

#[test]
fn an_attempt_past_the_call_timeout_is_cut_and_retried_however_steadily_it_streams() {
    let (server, t) = TestWorkspace::served("fault-call-timeout", Dialect::Anthropic);
    t.set("providers.anthropic.call_timeout_secs", "1");
    // Every event in time for the idle timeout, the whole far past the call's.
    server.push(Reply::Paced(Turn::text("an answer that never ends in time"), Duration::from_millis(400)));
    server.push(Reply::Turn(Turn::text("in time")));
    let run = t.run(&["prompt", "hello"]);
    assert!(run.ok().ends_with("in time\n"), "{}", run.stdout);
    let m = meta(&t, &t.only_agent(), 1);
    let attempts = m["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2, "{m}");
    assert!(attempts[0]["error"].as_str().expect("error").to_lowercase().contains("timeout"), "{}", attempts[0]);
    let log = t.run(&["log", &t.only_agent()]);
    assert!(!log.ok().contains("never ends"), "{}", log.stdout);
    // Answers that keep running past the deadline are not an outage: a worker would
    // count the launch towards the agent's death rather than pay for it again forever.
    t.set("retry.max_attempts", "2");
    for _ in 0..2 {
        server.push(Reply::Paced(Turn::text("an answer that never ends in time"), Duration::from_millis(400)));
    }
    assert_eq!(t.run(&["send", &t.only_agent(), "again"]).code, 1);
    let m = meta(&t, &t.only_agent(), 2);
    assert_eq!(m["attempts"].as_array().map(Vec::len), Some(2), "{m}");
    assert_eq!(m.get("outage"), None, "{m}");
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

#[test]
fn connection_refused_is_retried_recorded_and_said() {
    let (server, mut t) = TestWorkspace::served("fault-refused", Dialect::Anthropic);
    server.push(Reply::Turn(Turn::text("first")));
    t.run(&["prompt", "--name", "Ada", "hello"]).ok();
    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    t.set("providers.anthropic.base_url", &format!("http://127.0.0.1:{closed}"));
    t.set("retry.max_attempts", "3");
    t.env("ANTHROPIC_API_KEY", "test-key");
    let run = t.run(&["send", "Ada", "again"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("gave up after 3 attempts"), "{}", run.stderr);
    assert!(run.stderr.to_lowercase().contains("connect"), "{}", run.stderr);
    let m = meta(&t, &t.only_agent(), 2);
    assert_eq!(m["outcome"], "error", "{m}");
    let attempts = m["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 3, "{m}");
    assert!(attempts.iter().all(|a| a["error"].as_str().is_some_and(|e| !e.is_empty())), "{m}");
    // Nothing of the failed step was committed: the tip ends with the delivered message.
    let tip_files = t.git(&["ls-tree", "--name-only", &format!("agents/{}", t.only_agent()), ".offshoot/messages/"]);
    assert_eq!(tip_files.lines().last(), Some(".offshoot/messages/0003-user.md"));
}

#[test]
fn a_malformed_event_stream_is_refused_recorded_and_commits_nothing() {
    // The transport retries connection errors and retryable statuses; a server that does not speak
    // the protocol is not helped by asking again.
    for dialect in [Dialect::Anthropic, Dialect::Chat, Dialect::Responses] {
        let (server, t) = TestWorkspace::served(&format!("fault-sse-{dialect:?}"), dialect);
        server.push(Reply::Turn(Turn::text("first")));
        t.run(&["prompt", "--name", "Ada", "hello"]).ok();
        server.push(Reply::Raw(b"event: message_start\ndata: {this is not json\n\n".to_vec()));
        server.push(Reply::Turn(Turn::text("never asked for")));
        let run = t.run(&["send", "Ada", "again"]);
        assert_eq!(run.code, 1, "{dialect:?}: {}", run.stderr);
        assert!(run.stderr.contains("malformed stream"), "{dialect:?}: {}", run.stderr);
        assert!(run.stderr.contains("does not speak the provider's protocol"), "{dialect:?}: {}", run.stderr);
        let m = meta(&t, &t.only_agent(), 2);
        assert_eq!(m["attempts"].as_array().map(Vec::len), Some(1), "{dialect:?}: {m}");
        assert_eq!(server.remaining(), 1, "not retried");
        let tip_files =
            t.git(&["ls-tree", "--name-only", &format!("agents/{}", t.only_agent()), ".offshoot/messages/"]);
        assert_eq!(tip_files.lines().last(), Some(".offshoot/messages/0003-user.md"));
    }
}

#[test]
fn a_call_of_a_tool_that_does_not_exist_is_answered_as_an_error() {
    let (server, t) = TestWorkspace::served("fault-unknown-tool", Dialect::Anthropic);
    server.push(Reply::Turn(Turn::tool("call_1", "teleport", serde_json::json!({"to": "mars"}))));
    server.push(Reply::Turn(Turn::text("fine, staying")));
    let run = t.run(&["prompt", "go"]);
    assert!(run.ok().contains("fine, staying"), "{}", run.stderr);
    let result = server.result_text(1);
    assert!(result.contains("teleport"), "{result}");
    let body = &server.requests()[1].body;
    let last = body["messages"].as_array().expect("messages").last().expect("last").clone();
    assert_eq!(last["content"][0]["is_error"], true, "{last}");
}

#[test]
fn a_model_that_answers_with_nothing_ends_the_turn_saying_so() {
    for dialect in [Dialect::Anthropic, Dialect::Chat, Dialect::Responses] {
        let (server, t) = TestWorkspace::served(&format!("fault-empty-{dialect:?}"), dialect);
        server.push(Reply::Turn(Turn { input_tokens: 10, output_tokens: 0, ..Turn::default() }));
        let run = t.run(&["prompt", "say nothing"]);
        assert_eq!(run.code, 0, "{dialect:?}: {}", run.stderr);
        assert!(run.stderr.contains("answered with no content"), "{dialect:?}: {}", run.stderr);
        assert_eq!(t.agents()[0]["state"], "done");
        t.run(&["doctor"]).ok();
    }
}
