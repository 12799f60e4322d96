//! What each adapter keeps and sends back, against the scripted server speaking the
//! wire facts real APIs showed (see docs/architecture.md's adapter table).

use serde_json::Value;

use crate::support::server::{Reply, Server, Turn};
use crate::support::workspace::{Dialect, TestWorkspace};

/// The request the next message makes, after `first` was the answer to a prompt.
fn next_request(server: &Server, t: &TestWorkspace, first: Turn) -> (String, Value, String) {
    server.push_turns([first, Turn::text("the tool step's answer")]);
    let run = t.run(&["--json", "prompt", "--name", "Wire", "go"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let answer = run
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "end")
        .and_then(|e| e["text"].as_str().map(str::to_owned))
        .unwrap_or_default();
    server.push_turns([Turn::text("again")]);
    t.run(&["send", "Wire", "again"]).ok();
    let last = server.requests().last().expect("request").clone();
    (answer, last.body, String::from_utf8_lossy(&last.raw).into_owned())
}

/// The first assistant message (Anthropic, Chat) of a request.
fn assistant(body: &Value) -> Value {
    body["messages"].as_array().into_iter().flatten().find(|m| m["role"] == "assistant").cloned().unwrap_or(Value::Null)
}

#[test]
fn a_chat_refusal_is_the_answer_and_goes_back_as_text() {
    let (server, t) = TestWorkspace::served("wire-refusal", Dialect::Chat);
    let refusal = Turn { refusal: Some("I'm sorry, I can't help with that.".into()), ..Turn::default() };
    let (answer, body, _) = next_request(&server, &t, refusal);
    assert_eq!(answer, "I'm sorry, I can't help with that.");
    // Never a null content without tool calls (the server refuses that, as the API does).
    assert_eq!(assistant(&body)["content"], "I'm sorry, I can't help with that.");
}

#[test]
fn chat_reasoning_goes_back_in_the_field_it_came_in_and_only_then() {
    let (server, t) = TestWorkspace::served("wire-reasoning", Dialect::Chat);
    let mut thinking = Turn::bash("c1", "true");
    thinking.thinking = Some(("first I list files".into(), String::new()));
    let (_, body, _) = next_request(&server, &t, thinking);
    let message = assistant(&body);
    assert_eq!(message["reasoning_content"], "first I list files", "{message}");
    assert!(message["tool_calls"].is_array());
    // A model that sends none (OpenAI) gets none back.
    let (server, t) = TestWorkspace::served("wire-no-reasoning", Dialect::Chat);
    let (_, body, _) = next_request(&server, &t, Turn::bash("c1", "true"));
    assert!(assistant(&body).get("reasoning_content").is_none());
}

#[test]
fn tool_arguments_go_back_as_the_model_wrote_them() {
    let written = r#"{"command": "true",  "timeout_secs": 5}"#;
    for dialect in [Dialect::Chat, Dialect::Responses] {
        let (server, t) = TestWorkspace::served(&format!("wire-args-{dialect:?}"), dialect);
        let (_, body, _) = next_request(&server, &t, Turn::call("c1", "bash", written));
        let message = assistant(&body);
        let sent: Vec<&str> = match dialect {
            Dialect::Chat => message["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["function"]["arguments"].as_str())
                .collect(),
            _ => body["input"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|i| i["type"] == "function_call")
                .filter_map(|i| i["arguments"].as_str())
                .collect(),
        };
        assert_eq!(sent, [written], "{dialect:?}");
    }
    // Anthropic takes an object: its keys keep the model's order.
    let (server, t) = TestWorkspace::served("wire-args-anthropic", Dialect::Anthropic);
    let (_, _, raw) = next_request(&server, &t, Turn::call("c1", "bash", r#"{"timeout_secs": 5, "command": "true"}"#));
    assert!(raw.contains(r#""input":{"timeout_secs":5,"command":"true"}"#), "{raw}");
}

#[test]
fn a_responses_message_phase_goes_back_with_it() {
    let (server, t) = TestWorkspace::served("wire-phase", Dialect::Responses);
    let mut turn = Turn::bash("c1", "true");
    turn.text = Some("Checking first.".into());
    turn.phase = Some("commentary".into());
    let (_, body, _) = next_request(&server, &t, turn);
    let message = body["input"].as_array().into_iter().flatten().find(|i| i["type"] == "message").cloned();
    assert_eq!(message.map(|m| m["phase"].clone()), Some(Value::from("commentary")));
}

#[test]
fn an_anthropic_block_of_an_unknown_type_is_kept_and_sent_back() {
    let (server, t) = TestWorkspace::served("wire-unknown", Dialect::Anthropic);
    let mut turn = Turn::text("Hello!");
    turn.unknown_block = Some(("compaction".into(), "The user wants a greeting.".into()));
    let (answer, body, _) = next_request(&server, &t, turn);
    assert_eq!(answer, "Hello!");
    let content = assistant(&body)["content"].clone();
    assert_eq!(content[0]["type"], "compaction", "{content}");
    assert_eq!(content[0]["content"], "The user wants a greeting.");
    assert_eq!(content[1]["text"], "Hello!");
}

#[test]
fn a_first_answer_cut_off_at_the_limit_keeps_the_agent_to_look_at_and_go_on() {
    for dialect in [Dialect::Anthropic, Dialect::Chat, Dialect::Responses] {
        let (server, t) = TestWorkspace::served(&format!("wire-cut-{dialect:?}"), dialect);
        server.push(Reply::Truncated(Turn::text("half an ans")));
        let run = t.run(&["prompt", "--name", "Cut", "write a lot"]);
        assert_eq!(run.code, 1);
        assert!(run.stderr.contains("cut off at the output limit"), "{}", run.stderr);
        assert!(!run.stderr.contains("Some("), "{}", run.stderr);
        assert!(run.stderr.contains("offshoot config set roles.worker.max_output_tokens 20`"), "{}", run.stderr);
        assert!(!run.stderr.contains("removed again"), "{}", run.stderr);
        assert_eq!(run.stderr.matches("offshoot run").count(), 1, "one way on, said once: {}", run.stderr);
        // The cut-off answer's record is there, and the agent goes on.
        let id = t.only_agent();
        let shown = t.run(&["show", "Cut", "--step", "1"]);
        assert!(shown.ok().contains("\"outcome\": \"error\""), "{}", shown.stdout);
        assert!(
            std::fs::read_to_string(t.steps_dir(&id).join("0001/response.ndjson")).is_ok_and(|r| r.contains("half"))
        );
        t.set("roles.worker.max_output_tokens", "32000");
        server.push_turns([Turn::text("the whole answer")]);
        assert!(t.run(&["run", "Cut"]).ok().contains("the whole answer"), "{dialect:?}");
    }
}
