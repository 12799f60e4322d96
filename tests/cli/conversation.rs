//! A 20-step tool conversation against a faithful server of each dialect.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::server::Turn;
use crate::support::workspace::{DIALECTS, Dialect, TestWorkspace};

/// Removes Anthropic cache breakpoints, which move forward by design.
fn strip_cache_control(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("cache_control");
            m.values_mut().for_each(strip_cache_control);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_cache_control),
        _ => {}
    }
}

fn twenty_steps(dialect: Dialect) {
    let (server, t) = TestWorkspace::served(&format!("conv-{dialect:?}"), dialect);
    let mut turns: Vec<Turn> = (1..=20).map(|i| Turn::bash(&format!("call_{i}"), &format!("echo step {i}"))).collect();
    turns.push(Turn::text("All twenty steps are done."));
    server.push_turns(turns);

    let run = t.run(&["prompt", "--name", "Twenty", "Run twenty echo steps, one per call."]);
    assert!(run.ok().contains("All twenty steps are done."), "{}", run.stdout);
    let agents = t.agents();
    assert_eq!(agents.len(), 1);
    let id = agents[0]["id"].as_str().expect("id").to_owned();
    assert_eq!(agents[0]["state"], "done");
    assert_eq!(agents[0]["steps"], 21);

    // The branch: one dispatch commit, then one commit per transcript entry.
    let branch = format!("agents/{id}");
    let entries = t.git(&["ls-tree", "--name-only", &branch, ".offshoot/messages/"]);
    assert_eq!(entries.lines().count(), 42, "{entries}");
    let commits = t.git(&["rev-list", &branch, "^config/default"]);
    assert_eq!(commits.lines().count(), 43);
    let dispatch = commits.lines().last().expect("dispatch");
    let dispatch_tree = t.git(&["ls-tree", "-r", "--name-only", dispatch]);
    assert!(!dispatch_tree.contains(".offshoot/messages/"), "{dispatch_tree}");
    assert!(dispatch_tree.contains(".offshoot/goal.md"));
    let last_tool = t.git(&["show", &format!("{branch}:.offshoot/messages/0041-tool.json")]);
    assert!(last_tool.contains("step 20"), "{last_tool}");

    // 21 step records, none holding its request: show assembles each again, byte for
    // byte what the server received, and checks it against the digest the record kept.
    let records = t.step_records(&id);
    assert_eq!(records.len(), 21);
    let wire = server.requests();
    for step in [1, 5, 21] {
        let shown = t.run(&["show", &id, "--step", &step.to_string(), "--request"]);
        assert_eq!(shown.ok().as_bytes(), &wire[step - 1].raw[..], "step {step}");
        assert!(!shown.stderr.contains("differs"), "{}", shown.stderr);
    }
    assert!((1..=21).all(|n| t.step_file(&id, n, "request.json").is_none()));
    let meta = t.step_json(&id, 5, "meta.json");
    assert_eq!(meta["outcome"], "ok");
    assert_eq!(meta["usage"]["input"], 100);
    assert_eq!(meta["sent"]["bytes"], wire[4].raw.len());
    // The canonical form is there too.
    let canonical: Value =
        serde_json::from_str(t.run(&["show", &id, "--step", "5", "--request", "--canonical"]).ok()).expect("json");
    assert!(canonical["max_output_tokens"].is_u64(), "{canonical}");

    // Prefix stability: system, tools and earlier messages never change.
    assert_eq!(wire.len(), 21);
    let list_key = if dialect == Dialect::Responses { "input" } else { "messages" };
    for pair in wire.windows(2) {
        let (mut a, mut b) = (pair[0].body.clone(), pair[1].body.clone());
        strip_cache_control(&mut a);
        strip_cache_control(&mut b);
        let (a_list, b_list) = (a[list_key].as_array().expect("list"), b[list_key].as_array().expect("list"));
        assert_eq!(a_list[..], b_list[..a_list.len()]);
        assert_eq!(a["tools"].to_string(), b["tools"].to_string());
        let system = |v: &Value| v.get("system").or(v.get("instructions")).cloned().unwrap_or(json!(null)).to_string();
        assert_eq!(system(&a), system(&b));
    }
    match dialect {
        Dialect::Anthropic => {
            assert_eq!(wire[0].header("x-api-key"), Some("test-key"));
            assert_eq!(wire[0].header("anthropic-version"), Some("2023-06-01"));
            assert!(wire[0].path.ends_with("/v1/messages"));
        }
        Dialect::Chat | Dialect::Responses => {
            assert_eq!(wire[0].header("authorization"), Some("Bearer test-key"));
        }
    }
    // Nothing secret is ever written.
    let steps_text = String::from_utf8(t.step_file(&id, 1, "meta.json").expect("meta")).expect("text");
    assert!(!steps_text.contains("test-key"));
    t.git(&["fsck", "--strict"]);
    // Plain git in the agent's worktree sees exactly the tip.
    let status = std::process::Command::new("git")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .arg("-C")
        .arg(t.ws.join("agents").join(&id))
        .args(["status", "--porcelain"])
        .output()
        .expect("git status");
    assert_eq!(String::from_utf8_lossy(&status.stdout), "");
}

#[test]
fn twenty_steps_anthropic() {
    twenty_steps(DIALECTS[0]);
}

#[test]
fn twenty_steps_openai_chat() {
    twenty_steps(DIALECTS[1]);
}

#[test]
fn twenty_steps_openai_responses() {
    twenty_steps(DIALECTS[2]);
}

/// Thinking (Anthropic) and reasoning (Responses) blocks go back exactly as received.
#[test]
fn thinking_and_reasoning_round_trip() {
    for dialect in [Dialect::Anthropic, Dialect::Responses] {
        let (server, t) = TestWorkspace::served(&format!("think-{dialect:?}"), dialect);
        let mut first = Turn::bash("call_1", "echo hi");
        first.thinking = Some(("Let me think about this.".into(), "sig-abc123".into()));
        server.push_turns([first, Turn::text("done")]);
        t.run(&["prompt", "think"]).ok();
        let second = &server.requests()[1].body;
        match dialect {
            Dialect::Anthropic => {
                let block = &second["messages"][1]["content"][0];
                assert_eq!(block["type"], "thinking");
                assert_eq!(block["thinking"], "Let me think about this.");
                assert_eq!(block["signature"], "sig-abc123");
            }
            _ => {
                let item = &second["input"][1];
                assert_eq!(item["type"], "reasoning");
                assert_eq!(item["encrypted_content"], "sig-abc123");
                assert_eq!(item["id"], "rs_0");
            }
        }
    }
}
