//! `--json` prints JSON lines and nothing else, and what it prints is what
//! `docs/json.md` lists: every event type and object with exactly its fields.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::support::server::{Reply, Turn, error_body};
use crate::support::workspace::{Dialect, Run, TestWorkspace};

/// A documented shape: required and optional fields (the type itself left out).
#[derive(Debug, Default)]
struct Shape {
    required: BTreeSet<String>,
    optional: BTreeSet<String>,
}

/// The bullets of a section of docs/json.md: "- `name`: `field`, `field?` — words".
fn documented(section: &str) -> BTreeMap<String, Shape> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/json.md")).expect("docs/json.md");
    let body = doc.split("\n## ").find(|s| s.starts_with(section)).expect("section");
    let mut bullets: Vec<String> = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("- ") {
            bullets.push(rest.to_owned());
        } else if let (Some(last), true) = (bullets.last_mut(), line.starts_with("  ")) {
            last.push(' ');
            last.push_str(line.trim());
        }
    }
    let mut shapes = BTreeMap::new();
    for bullet in bullets {
        let Some((head, fields)) = bullet.split_once("`: ") else { continue };
        let fields = fields.split(" — ").next().unwrap_or("");
        // "`config set`, `config edit`: …" documents both.
        for name in head.trim_start_matches('`').split("`, `") {
            let mut shape = Shape::default();
            for (i, field) in fields.split('`').enumerate() {
                if i % 2 == 1 {
                    match field.strip_suffix('?') {
                        Some(f) => shape.optional.insert(f.to_owned()),
                        None => shape.required.insert(field.to_owned()),
                    };
                }
            }
            shapes.insert(name.to_owned(), shape);
        }
    }
    shapes
}

/// Every stdout line of `run`, each of which must be one JSON object.
fn lines(run: &Run) -> Vec<Value> {
    run.stdout
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{}", run.stderr));
            assert!(v.is_object(), "not an object: {l}");
            v
        })
        .collect()
}

#[track_caller]
fn conforms(value: &Value, name: &str, shapes: &BTreeMap<String, Shape>) {
    let shape = shapes.get(name).unwrap_or_else(|| panic!("`{name}` is not documented: {value}"));
    let keys: BTreeSet<String> = value.as_object().expect("object").keys().filter(|k| *k != "type").cloned().collect();
    let missing: Vec<_> = shape.required.difference(&keys).collect();
    assert!(missing.is_empty(), "`{name}` lacks documented {missing:?}: {value}");
    let extra: Vec<_> = keys.iter().filter(|k| !shape.required.contains(*k) && !shape.optional.contains(*k)).collect();
    assert!(extra.is_empty(), "`{name}` has undocumented {extra:?}: {value}");
}

fn events_of(run: &Run, shapes: &BTreeMap<String, Shape>) -> Vec<Value> {
    let events = lines(run);
    for e in &events {
        conforms(e, e["type"].as_str().expect("every event has a type"), shapes);
    }
    events
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap_or("")).collect()
}

#[test]
fn a_run_streams_the_documented_events_and_ends_with_end() {
    let shapes = documented("Events of a run");
    let (server, t) = TestWorkspace::served("json-run", Dialect::Chat);
    server.push(Reply::Status { code: 500, retry_after: None, body: error_body("openai", "server_error", "boom") });
    server.push(Reply::Turn(Turn::bash("call_7", "echo hi")));
    server.push(Reply::Turn(Turn::text("all done here")));
    let run = t.run(&["--json", "prompt", "--name", "Jay", "go"]);
    run.ok();
    let events = events_of(&run, &shapes);
    let seen = types(&events);
    assert_eq!(seen[0], "agent", "the new agent is announced first: {seen:?}");
    assert_eq!(seen.last(), Some(&"end"));
    for expected in ["step", "attempt_failed", "text", "usage", "tool_call", "tool_result"] {
        assert!(seen.contains(&expected), "no `{expected}` in {seen:?}");
    }
    let id = t.only_agent();
    assert!(events.iter().all(|e| e["agent"] == id.as_str() || e["type"] == "agent"));
    assert_eq!(events[0]["id"], id.as_str());
    // Each step ends with its usage, before the next starts.
    let steps: Vec<usize> = (0..seen.len()).filter(|&i| seen[i] == "step").collect();
    for (n, &at) in steps.iter().enumerate() {
        let next = steps.get(n + 1).copied().unwrap_or(seen.len());
        assert!(seen[at..next].contains(&"usage"), "step at {at} has no usage: {seen:?}");
    }
    // Calls and results carry the model's id.
    let call = events.iter().find(|e| e["type"] == "tool_call").expect("tool_call");
    let result = events.iter().find(|e| e["type"] == "tool_result").expect("tool_result");
    assert_eq!((call["tool_use_id"].as_str(), result["tool_use_id"].as_str()), (Some("call_7"), Some("call_7")));
    // No empty text deltas (the Chat stream opens with an empty `content`).
    let texts: Vec<&str> = events.iter().filter(|e| e["type"] == "text").filter_map(|e| e["text"].as_str()).collect();
    assert!(texts.iter().all(|t| !t.is_empty()), "{texts:?}");
    assert_eq!(texts.concat(), "all done here");
    let end = events.last().expect("end");
    assert_eq!((end["outcome"].as_str(), end["text"].as_str()), (Some("final-response"), Some("all done here")));
}

#[test]
fn a_failed_run_ends_with_an_end_event_and_never_announces_a_removed_agent() {
    let shapes = documented("Events of a run");
    let (server, t) = TestWorkspace::served("json-fail", Dialect::Anthropic);
    server.push(Reply::Status {
        code: 400,
        retry_after: None,
        body: error_body("anthropic", "invalid_request_error", "bad"),
    });
    let run = t.run(&["--json", "prompt", "go"]);
    assert_eq!(run.code, 1);
    let events = events_of(&run, &shapes);
    assert!(!types(&events).contains(&"agent"), "{}", run.stdout);
    let end = events.last().expect("an end event");
    assert_eq!((end["type"].as_str(), end["outcome"].as_str()), (Some("end"), Some("error")), "{end}");
    assert!(end["error"].as_str().is_some_and(|e| e.contains("HTTP 400")), "{end}");
    assert_eq!(end["kept"], false);
    assert!(t.agents().is_empty());

    // Failing before there is an agent: an `end` all the same.
    t.run(&["config", "set", "roles.worker.provider", "openai"]).ok();
    let run = t.run(&["--json", "prompt", "go"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let events = events_of(&run, &shapes);
    assert_eq!(types(&events), ["end"], "{}", run.stdout);
    assert_eq!(events[0]["agent"], Value::Null);
    assert_eq!(events[0]["exit_code"], 2);

    // Any other verb: an `error` object.
    let run = t.run(&["--json", "log", "nobody"]);
    assert_eq!(run.code, 2);
    let events = events_of(&run, &shapes);
    assert_eq!(types(&events), ["error"]);
    assert_eq!(events[0]["hints"][0], "`offshoot ls` lists the agents of this workspace");
}

#[test]
fn every_verb_prints_json_lines_of_its_documented_objects() {
    let objects = documented("Objects of the other verbs");
    let events = documented("Events of a run");
    let (server, t) = TestWorkspace::served("json-verbs", Dialect::Anthropic);
    server.push(Reply::Turn(Turn::bash("call_1", "echo hi")));
    server.push(Reply::Turn(Turn::text("done")));
    t.run(&["prompt", "--name", "Kim", "go"]).ok();

    let check = |args: &[&str], name: &str| {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let run = t.run(&full);
        assert!(run.code == 0 || name == "config validate", "{args:?}: {}", run.stderr);
        let values = lines(&run);
        assert!(!values.is_empty(), "{args:?} printed nothing");
        // Costs to the nano-dollar, never with a sum's binary noise.
        for cost in run.stdout.split("\"cost_usd\":").skip(1) {
            let number: String = cost.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            let decimals = number.split_once('.').map_or(0, |(_, d)| d.len());
            assert!(decimals <= 9, "{args:?}: cost {number}");
        }
        for v in &values {
            conforms(v, name, &objects);
        }
        values
    };
    assert!(check(&["ls"], "ls").iter().all(|v| v["type"] == "ls"));
    assert!(check(&["tree"], "tree").iter().all(|v| v["type"] == "tree"));
    let log = check(&["log", "Kim"], "log");
    assert_eq!(
        log.iter().map(|e| e["side"].as_str().unwrap_or("")).collect::<Vec<_>>(),
        ["user", "assistant", "tool", "assistant"]
    );
    let shown = check(&["config", "show"], "config show");
    assert_eq!(shown[0]["config"]["roles"]["worker"]["provider"], "anthropic");
    check(&["config", "set", "retry.max_attempts", "3"], "config set");
    let unchanged = check(&["config", "set", "retry.max_attempts", "3"], "config set");
    assert_eq!((&unchanged[0]["changed"], &unchanged[0]["commit"]), (&Value::Bool(false), &Value::Null));
    assert_eq!(check(&["config", "validate"], "config validate")[0]["valid"], true);
    let bad = t.root.join("bad.toml");
    std::fs::write(&bad, "version = 1\n[retry]\nmax_attempts = 0\n").expect("bad");
    let invalid = t.run(&["--json", "config", "validate", "--file", bad.to_str().expect("utf-8")]);
    assert_eq!(invalid.code, 2);
    let v = lines(&invalid);
    assert_eq!(v.len(), 1, "one result object, no error object after it: {}", invalid.stdout);
    conforms(&v[0], "config validate", &objects);
    assert_eq!(
        (&v[0]["valid"], &v[0]["error"]["key"], &v[0]["error"]["line"]),
        (&Value::Bool(false), &Value::from("retry.max_attempts"), &Value::from(3))
    );
    let made = t.root.join("another");
    let new = t.run_bare(&["--json", "new", made.to_str().expect("utf-8")]);
    conforms(&lines(&new)[0], "new", &objects);

    // `show` prints its record and its request on one line each.
    for args in [&["show", "Kim", "--step", "1"][..], &["show", "Kim", "--step", "1", "--request"][..]] {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let run = t.run(&full);
        assert_eq!(lines(&run).len(), 1, "{args:?}: {}", run.stdout);
    }
    // `send --detach` and `stop`.
    server.push(Reply::Turn(Turn::text("again")));
    let sent = t.run(&["--json", "send", "--detach", "Kim", "more"]);
    let sent = lines(&sent);
    conforms(&sent[0], "sent", &events);
    // Once the detached driver has answered, there is nothing to stop.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while t.agents()[0]["state"] != "done" || !t.run(&["log", "Kim"]).ok().contains("again") {
        assert!(std::time::Instant::now() < deadline, "the detached driver did not answer");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let stopped = check(&["stop", "Kim"], "stop");
    assert_eq!(stopped[0]["outcome"], "not-running");
    let refused = t.run(&["--json", "completions", "bash"]);
    assert_eq!(refused.code, 2);
    assert!(refused.stderr.contains("`--json` does not apply"), "{}", refused.stderr);
}
