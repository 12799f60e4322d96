//! Provider conformance on real traffic: every response body in
//! `../shared/fixtures/provider-streams/` (what real APIs sent; its SOURCES.md says
//! where each came from) is served byte for byte as the first answer of a
//! conversation, through the real binary. What was committed, what the user saw and
//! what the next request sent back are checked. The recordings are read in place,
//! never copied into the project; without the directory the test says it skipped.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::server::{Reply, Server, Turn};
use crate::support::workspace::{Dialect, TestWorkspace};

/// Where the recordings are: `OFFSHOOT_PROVIDER_STREAMS`, else beside the project.
fn recordings() -> Option<PathBuf> {
    let dir = std::env::var_os("OFFSHOOT_PROVIDER_STREAMS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/provider-streams"));
    dir.is_dir().then_some(dir)
}

/// One recording's run: the prompt's JSON events and exit, the agent, and the
/// request sent after the recorded answer (by a second message, when the first run
/// ended well).
struct Seen {
    code: i32,
    stderr: String,
    events: Vec<Value>,
    id: String,
    next: Option<Value>,
}

impl Seen {
    fn answer(&self) -> String {
        self.events.iter().rev().find(|e| e["type"] == "end").and_then(|e| e["text"].as_str()).unwrap_or("").to_owned()
    }

    /// The assistant message (Anthropic, Chat) or assistant items (Responses) the next
    /// request sent back for the recorded answer.
    fn echoed(&self) -> Vec<Value> {
        let Some(next) = &self.next else { return Vec::new() };
        if let Some(input) = next["input"].as_array() {
            return input
                .iter()
                .filter(|i| i["role"] != "user" && i["type"] != "function_call_output")
                .cloned()
                .collect();
        }
        let messages = next["messages"].as_array().cloned().unwrap_or_default();
        messages.into_iter().filter(|m| m["role"] == "assistant").take(1).collect()
    }
}

fn run(server: &Server, t: &TestWorkspace, body: Vec<u8>) -> Seen {
    server.push(Reply::Raw(body));
    // A mid-stream error is retried: this answers the retry, or the tool results.
    server.push_turns([Turn::text("second answer")]);
    let run = t.run(&["--json", "prompt", "--name", "Conf", "go"]);
    let events: Vec<Value> = run.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let id = events.iter().find(|e| e["type"] == "agent").and_then(|e| e["id"].as_str()).unwrap_or("").to_owned();
    let mut next = None;
    if run.code == 0 {
        server.push_turns([Turn::text("third answer")]);
        let again = t.run(&["send", "Conf", "again"]);
        if again.code == 0 {
            next = server.requests().last().map(|r| r.body.clone());
        }
    }
    Seen { code: run.code, stderr: run.stderr, events, id, next }
}

/// What the recording `sub/name` must give; each failed expectation is a line.
fn check(sub: &str, name: &str, body: &str, seen: &Seen, t: &TestWorkspace) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut expect = |ok: bool, what: &str| {
        if !ok {
            wrong.push(format!("{sub}/{name}: {what}"));
        }
    };
    expect(!seen.stderr.contains("panicked"), "panicked");
    let failing = ["error-insufficient-quota.sse", "finish-length.sse", "max-tokens-partial-tool-json.sse"];
    if failing.contains(&name) {
        expect(seen.code == 1, &format!("exit {} (want 1): {}", seen.code, seen.stderr));
        expect(!seen.stderr.contains("Some("), &format!("unreadable message: {}", seen.stderr));
        if name == "error-insufficient-quota.sse" {
            expect(seen.stderr.contains("insufficient_quota"), &seen.stderr);
            expect(seen.stderr.contains("check its plan and billing"), &format!("no working hint: {}", seen.stderr));
        } else {
            let fix = "offshoot config set roles.worker.max_output_tokens";
            expect(seen.stderr.contains("output limit") && seen.stderr.contains(fix), &seen.stderr);
            // The cut-off answer stays inspectable and the agent can go on.
            let shown = t.run(&["show", &seen.id, "--step", "1"]);
            expect(shown.code == 0 && shown.stdout.contains("\"outcome\""), &format!("show: {}", shown.stderr));
        }
        return wrong;
    }
    expect(seen.code == 0, &format!("exit {}: {}", seen.code, seen.stderr));
    expect(seen.next.is_some(), "the next request was not sent or not accepted");
    // The model that answered, as the provider named it, is kept with the answer (a
    // recording that fails mid-stream is answered by the retry, not by it).
    if let Some(model) = recorded_model(body).filter(|_| !name.starts_with("midstream")) {
        let branch = format!("agents/{}", seen.id);
        let files = t.git(&["ls-tree", "-r", "--name-only", &branch, ".offshoot/messages"]);
        let kept = files.lines().filter(|f| f.ends_with(".json")).any(|f| {
            let entry: Value = serde_json::from_str(&t.git(&["show", &format!("{branch}:{f}")])).unwrap_or_default();
            entry.pointer("/response_model").and_then(Value::as_str) == Some(model.as_str())
        });
        expect(kept, &format!("answering model {model} not kept with the answer"));
    }
    let echoed = seen.echoed();
    let blocks: Vec<&Value> = echoed.iter().flat_map(|m| m["content"].as_array().into_iter().flatten()).collect();
    let has_block = |kind: &str| blocks.iter().any(|b| b["type"] == kind);
    match (sub, name) {
        ("anthropic", n) if n.starts_with("thinking") || n.starts_with("adaptive") => {
            let signed = blocks
                .iter()
                .any(|b| b["type"] == "thinking" && b["signature"].as_str().is_some_and(|s| !s.is_empty()));
            expect(signed, "thinking not echoed with its signature");
        }
        ("anthropic", "redacted-thinking.sse") => {
            expect(has_block("redacted_thinking"), "redacted thinking not echoed")
        }
        ("anthropic", "compaction-block-cache-read.sse") => {
            let kept = blocks
                .iter()
                .any(|b| b["type"] == "compaction" && b["content"].as_str().is_some_and(|c| c.contains("say hello")));
            expect(kept, "the unknown `compaction` block was not kept and echoed");
            expect(seen.answer().contains("Hello!"), "the answer after the unknown block is missing");
        }
        ("openai-chat", "refusal.sse") => {
            expect(
                seen.answer().contains("I'm sorry, I can't assist with that request"),
                "the refusal is not the answer",
            );
            let content = echoed.first().map(|m| m["content"].clone()).unwrap_or(Value::Null);
            expect(content.as_str().is_some_and(|c| c.contains("I'm sorry")), "the refusal was not sent back as text");
        }
        ("openai-chat", "deepseek-reasoning-tool-cached.sse") => {
            let sent = echoed.first().and_then(|m| m["reasoning_content"].as_str()).is_some_and(|r| !r.is_empty());
            expect(sent, "reasoning_content not sent back with the tool calls");
        }
        ("openai-responses", "phase-messages-cached-tokens.sse") => {
            let phased = echoed.iter().filter(|i| i["type"] == "message" && i["phase"].is_string()).count();
            expect(phased >= 2, "message `phase` not sent back");
            expect(seen.answer().contains("\n\n"), "two messages joined with no separator");
        }
        ("openai-responses", "reasoning-message-function-call.sse") => {
            expect(echoed.iter().any(|i| i["phase"].is_string()), "message `phase` not sent back");
        }
        _ => {}
    }
    // Tool-call arguments go back as the model wrote them (key order included).
    for raw in recorded_arguments(sub, body) {
        let sent: Vec<String> = echoed
            .iter()
            .flat_map(|m| {
                let calls = m["tool_calls"].as_array().cloned().unwrap_or_default();
                let from_chat =
                    calls.into_iter().filter_map(|c| c["function"]["arguments"].as_str().map(str::to_owned));
                let from_responses = m["arguments"].as_str().map(str::to_owned);
                from_chat.chain(from_responses).collect::<Vec<_>>()
            })
            .collect();
        expect(sent.contains(&raw), &format!("arguments {raw:?} not sent back as written (sent {sent:?})"));
    }
    wrong
}

/// The model a recording says answered (the first `"model"` of its events).
fn recorded_model(body: &str) -> Option<String> {
    let at = body.find("\"model\":\"")? + "\"model\":\"".len();
    body[at..].split('"').next().map(str::to_owned)
}

/// The arguments text of each tool call a Chat or Responses recording carries, as the
/// model wrote it (Chat: its pieces joined; Responses: the finished item's).
fn recorded_arguments(sub: &str, body: &str) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    for data in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let Ok(v) = serde_json::from_str::<Value>(data) else { continue };
        match sub {
            "openai-chat" => {
                for c in v["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
                    let i = c["index"].as_u64().unwrap_or(0) as usize;
                    while pieces.len() <= i {
                        pieces.push(String::new());
                    }
                    pieces[i].push_str(c["function"]["arguments"].as_str().unwrap_or(""));
                }
            }
            "openai-responses" if v["type"] == "response.output_item.done" && v["item"]["type"] == "function_call" => {
                pieces.push(v["item"]["arguments"].as_str().unwrap_or("").to_owned());
            }
            _ => {}
        }
    }
    pieces.into_iter().filter(|p| !p.trim().is_empty() && p.trim() != "{}").collect()
}

#[test]
fn every_recorded_provider_stream_is_handled_right() {
    let Some(dir) = recordings() else {
        let _ = writeln!(std::io::stderr(), "skipped: no recordings at ../shared/fixtures/provider-streams");
        return;
    };
    let mut wrong = Vec::new();
    let mut count = 0;
    for (sub, dialect) in
        [("anthropic", Dialect::Anthropic), ("openai-chat", Dialect::Chat), ("openai-responses", Dialect::Responses)]
    {
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(dir.join(sub)).into_iter().flatten().flatten().map(|e| e.path()).collect();
        files.sort();
        for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "sse")) {
            let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
            let body = std::fs::read(file).expect("recording");
            let (server, t) = TestWorkspace::served(&format!("conf-{sub}-{}", name.trim_end_matches(".sse")), dialect);
            let seen = run(&server, &t, body.clone());
            wrong.extend(check(sub, &name, &String::from_utf8_lossy(&body), &seen, &t));
            count += 1;
        }
    }
    assert!(count >= 28, "only {count} recordings found in {}", dir.display());
    assert!(wrong.is_empty(), "{} of {count} recordings not handled right:\n{}", wrong.len(), wrong.join("\n"));
}
