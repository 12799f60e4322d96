//! A model chosen for an agent in place of its role's: `--model` on `prompt`, `send`,
//! `fork` and `chat`, and the chat's `/model`.

use serde_json::json;

use crate::support::server::Turn;
use crate::support::workspace::{Dialect, TestWorkspace};

fn model_of(request: &crate::support::server::Recorded) -> String {
    request.body["model"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_chosen_model_is_used_from_its_message_on_kept_by_forks_and_never_inherited_by_children() {
    let (server, t) = TestWorkspace::served("model-chosen", Dialect::Anthropic);
    let role_model = {
        server.push_turns([Turn::text("plain")]);
        t.run(&["prompt", "--name", "Plain", "use the role's model"]).ok();
        model_of(&server.requests()[0])
    };
    assert!(!role_model.is_empty() && role_model != "claude-chosen-1");
    // Chosen at the start: every request of the agent asks for it.
    let kid = json!({"role": "worker", "goal": "help", "name": "Kid"});
    server.push_for("Chooser", [Turn::tool("d1", "dispatch", kid), Turn::text("asked"), Turn::text("done")]);
    server.push_for("Kid", [Turn::text("kid here")]);
    t.run(&["prompt", "--name", "Chooser", "--model", "claude-chosen-1", "lead"]).ok();
    let chooser = server.requests_for("Chooser");
    assert!(chooser.len() >= 2);
    assert!(
        chooser.iter().all(|r| model_of(r) == "claude-chosen-1"),
        "{:?}",
        chooser.iter().map(model_of).collect::<Vec<_>>()
    );
    // Its child asks for its own role's model.
    assert_eq!(server.requests_for("Kid").iter().map(model_of).collect::<Vec<_>>(), [role_model.as_str()]);
    // Recorded in its tree, by the commit that delivered the message choosing it.
    let id = t.id_of("Chooser");
    let git = |args: &[&str]| t.git(args);
    assert_eq!(git(&["show", &format!("agents/{id}:.offshoot/model")]).trim(), "claude-chosen-1");
    let kid_id = t.id_of("Kid");
    let harness = git(&["ls-tree", "--name-only", &format!("agents/{kid_id}"), ".offshoot/"]);
    assert!(harness.contains(".offshoot/soul.md") && !harness.contains(".offshoot/model"), "{harness}");

    // `send --model` changes it from that message on, and it stays.
    server.push_for("Plain", [Turn::text("switched"), Turn::text("still switched")]);
    t.run(&["send", "Plain", "--model", "gpt-4.1-mini", "switch"]).ok();
    t.run(&["send", "Plain", "stay"]).ok();
    let plain: Vec<String> = server.requests_for("Plain").iter().map(model_of).collect();
    assert_eq!(plain, [role_model.clone(), "gpt-4.1-mini".into(), "gpt-4.1-mini".into()]);
    // `show --request` prints what the step sent: the model chosen.
    let shown = t.run(&["show", "Plain", "--step", "3", "--request"]).ok().to_owned();
    assert!(shown.contains("gpt-4.1-mini"), "{shown}");

    // A fork keeps its origin's choice, or takes its own.
    server.push_for("Twin", [Turn::text("twin")]);
    server.push_for("Other", [Turn::text("other")]);
    t.run(&["fork", "--from", "Plain", "--name", "Twin", "go on"]).ok();
    t.run(&["fork", "--from", "Plain", "--name", "Other", "--model", "qwen2.5:7b", "go on"]).ok();
    assert_eq!(model_of(&server.requests_for("Twin")[0]), "gpt-4.1-mini");
    assert_eq!(model_of(&server.requests_for("Other")[0]), "qwen2.5:7b");
}

#[test]
fn a_model_name_that_cannot_be_one_is_refused_naming_the_rule_and_nothing_is_made() {
    let (server, t) = TestWorkspace::served("model-bad", Dialect::Anthropic);
    for bad in ["", "two words", "a\nmodel: x", &"m".repeat(201)] {
        let run = t.run_bare(&["prompt", "--model", bad, "go"]);
        assert_eq!(run.code, 2, "{bad:?}: {}", run.stderr);
        assert!(run.stderr.contains("is not a model name: 1 to 200 letters, digits and `._:/@+-`"), "{}", run.stderr);
    }
    assert!(t.agents().is_empty());
    assert!(server.requests().is_empty());
    server.push_turns([Turn::text("made")]);
    t.run(&["prompt", "--name", "Here", "be here"]).ok();
    let run = t.run_bare(&["send", "Here", "--model", "x y", "again"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert_eq!(server.requests().len(), 1, "nothing was sent");
}

#[test]
fn thinking_settings_reach_each_provider_in_its_own_terms_and_a_mismatch_is_refused() {
    // Anthropic: extended thinking with a budget.
    let (server, t) = TestWorkspace::served("model-thinking", Dialect::Anthropic);
    t.run(&["config", "set", "roles.worker.thinking_budget", "2048"]).ok();
    server.push_turns([Turn::text("thought")]);
    t.run(&["prompt", "think first"]).ok();
    assert_eq!(server.requests()[0].body["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
    let shown = t.run(&["show", &t.only_agent(), "--request"]).ok().to_owned();
    assert_eq!(shown.as_bytes(), &server.requests()[0].raw[..]);
    // …checked against the provider and the output limit.
    for (key, value, rule) in [
        ("roles.worker.thinking_budget", "100", "must be 1024 or more"),
        ("roles.worker.reasoning_effort", "low", "is OpenAI's reasoning effort"),
    ] {
        let run = t.run(&["config", "set", key, value]);
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(run.stderr.contains(rule), "{}", run.stderr);
    }
    // OpenAI, both protocols: the effort.
    for (dialect, field) in [(Dialect::Chat, "/reasoning_effort"), (Dialect::Responses, "/reasoning/effort")] {
        let (server, t) = TestWorkspace::served("model-effort", dialect);
        t.run(&["config", "set", "roles.worker.reasoning_effort", "low"]).ok();
        let refused = t.run(&["config", "set", "roles.worker.reasoning_effort", "extreme"]);
        assert!(refused.stderr.contains("`extreme` is not one of minimal, low, medium, high"), "{}", refused.stderr);
        let wrong = t.run(&["config", "set", "roles.worker.thinking_budget", "2048"]);
        assert!(wrong.stderr.contains("is Anthropic's extended thinking"), "{}", wrong.stderr);
        server.push_turns([Turn::text("reasoned")]);
        t.run(&["prompt", "reason first"]).ok();
        assert_eq!(server.requests()[0].body.pointer(field), Some(&json!("low")), "{dialect:?}");
    }
}

#[test]
fn thinking_asked_for_one_agent_is_its_own_from_that_message_on_and_checked_against_its_provider() {
    let (server, t) = TestWorkspace::served("model-thinking-flag", Dialect::Anthropic);
    server.push_for("Deep", [Turn::text("thought"), Turn::text("thought again")]);
    t.run(&["prompt", "--name", "Deep", "--thinking", "4096", "think"]).ok();
    t.run(&["send", "Deep", "and again"]).ok();
    for asked in server.requests_for("Deep") {
        assert_eq!(asked.body["thinking"], json!({"type": "enabled", "budget_tokens": 4096}));
    }
    // Another agent of the same role asks as its role does: nothing.
    server.push_for("Plain", [Turn::text("plain")]);
    t.run(&["prompt", "--name", "Plain", "answer"]).ok();
    assert!(server.requests_for("Plain")[0].body.get("thinking").is_none());
    // What the provider does not speak, or a budget out of bounds, is refused before anything.
    let before = server.requests().len();
    for (args, rule) in [
        (&["prompt", "--effort", "high", "x"][..], "--effort: is OpenAI's reasoning effort"),
        (&["prompt", "--thinking", "100", "x"], "--thinking: must be 1024 or more"),
        (&["send", "Deep", "--effort", "low", "x"], "--effort: is OpenAI's reasoning effort"),
    ] {
        let run = t.run(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(rule), "{args:?}: {}", run.stderr);
    }
    assert_eq!(server.requests().len(), before);
    assert_eq!(t.agents().len(), 2);
}

#[test]
fn an_agent_cannot_choose_its_own_model_or_thinking() {
    let (server, t) = TestWorkspace::served("model-agent-tries", Dialect::Anthropic);
    let plant = "echo gpt-evil > .offshoot/model; echo 'thinking_budget 9999' > .offshoot/reasoning; \
                 mkdir -p .offshoot && ln -sf /dev/null .offshoot/model.lnk; echo done";
    server.push_for("Tries", [Turn::bash("c1", plant), Turn::text("tried"), Turn::text("again")]);
    t.run(&["prompt", "--name", "Tries", "pick your own model"]).ok();
    t.run(&["send", "Tries", "go on"]).ok();
    let asked = server.requests_for("Tries");
    let role_model = model_of(&asked[0]);
    for request in &asked {
        assert_eq!(model_of(request), role_model, "the agent's file chose the model");
        assert!(request.body.get("thinking").is_none(), "the agent's file chose thinking");
    }
    let id = t.id_of("Tries");
    let tree = t.git(&["ls-tree", "--name-only", &format!("agents/{id}"), ".offshoot/"]);
    assert!(!tree.contains(".offshoot/model") && !tree.contains(".offshoot/reasoning"), "{tree}");
}
