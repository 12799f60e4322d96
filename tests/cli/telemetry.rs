//! OpenTelemetry traces: offshoot's drivers send OTLP/HTTP protobuf to a real receiver on
//! loopback (tests/otel/receiver.py), which decodes each request with the official
//! OpenTelemetry proto definitions (PyPI's opentelemetry-proto, installed by `.ci/tools`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::support::server::Turn;
use crate::support::wait::wait_for;
use crate::support::workspace::{Dialect, TestWorkspace};

/// A running OTLP receiver: its process, port, and the file its spans go to.
struct Receiver {
    child: Child,
    port: u16,
    spans: PathBuf,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Receiver {
    fn start(dir: &Path) -> Receiver {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let spans = dir.join("spans.ndjson");
        let _ = std::fs::remove_file(&spans);
        let mut child = Command::new("python3")
            .arg(root.join("tests/otel/receiver.py"))
            .arg(&spans)
            .env("PYTHONPATH", root.join("target/test-tools/py"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("the port");
        Receiver { child, port: line.trim().parse().expect("a port"), spans }
    }

    /// Every span received so far.
    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.spans)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

/// `t` sending its traces to `receiver`.
fn traced(t: &mut TestWorkspace, receiver: &Receiver) {
    t.env("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("http://127.0.0.1:{}", receiver.port));
    t.env("OTEL_EXPORTER_OTLP_HEADERS", "x-team=agents%20lab");
    t.env("OTEL_SERVICE_NAME", "offshoot-test");
}

fn of<'a>(spans: &'a [Value], operation: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["attributes"]["gen_ai.operation.name"] == operation).collect()
}

#[test]
fn a_fan_out_and_a_compaction_are_one_trace_of_agent_call_and_tool_spans_with_the_genai_attributes() {
    let (server, mut t) = TestWorkspace::served("otel-fan-out", Dialect::Anthropic);
    let receiver = Receiver::start(&t.root);
    traced(&mut t, &receiver);
    let mut fan_out = Turn::text("");
    fan_out.calls = ["Alpha", "Beta", "Gamma"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let input = json!({"role": "worker", "goal": format!("the part of {name}"), "name": name});
            (format!("d{i}"), "dispatch".to_owned(), input.to_string())
        })
        .collect();
    // (Its results may come one by one or together: a turn for each way.)
    let noted = (0..3).map(|i| Turn::text(&format!("noted {i}")));
    server.push_for("Lead", [fan_out, Turn::text("waiting")].into_iter().chain(noted));
    for name in ["Alpha", "Beta"] {
        server.push_for(name, [Turn::bash(&format!("{name}-b"), "echo part > part.txt"), Turn::text("my part done")]);
    }
    // Gamma's command fails, saying what is no trace's to carry.
    server.push_for("Gamma", [Turn::bash("Gamma-b", "echo not-for-traces >&2; exit 3"), Turn::text("mine failed")]);
    t.run(&["prompt", "--name", "Lead", "split the work in three"]).ok();
    // Each driver sends its last spans before its run's end is logged.
    wait_for("every agent's span", || of(&receiver.spans(), "invoke_agent").len() == 4);
    let spans = receiver.spans();
    let traces: std::collections::BTreeSet<&str> = spans.iter().filter_map(|s| s["trace_id"].as_str()).collect();
    assert_eq!(traces.len(), 1, "one trace for the tree: {traces:?}");
    let agents = t.agents();
    let tree: Vec<Value> =
        t.run(&["tree", "--json"]).ok().lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    let span_of = |id: &str| {
        of(&spans, "invoke_agent")
            .into_iter()
            .find(|s| s["attributes"]["gen_ai.agent.id"] == id)
            .cloned()
            .expect("span")
    };
    let lead = t.id_of("Lead");
    let lead_span = span_of(&lead);
    assert_eq!(lead_span["parent_span_id"], "", "the root's span is the trace's root");
    assert_eq!(lead_span["name"], "invoke_agent Lead");
    for agent in &agents {
        let id = agent["id"].as_str().expect("id");
        let span = span_of(id);
        // Under its parent agent's span.
        if let Some(parent) = agent["parent"].as_str() {
            assert_eq!(span["parent_span_id"], span_of(parent)["span_id"], "{id}'s parent");
        }
        assert_eq!(span["attributes"]["gen_ai.agent.name"], agent["name"]);
        assert_eq!(span["attributes"]["offshoot.end"], "final_response");
        // Its calls, each under it, as many as its steps, their tokens what `tree` counts.
        let calls: Vec<&Value> =
            of(&spans, "chat").into_iter().filter(|s| s["parent_span_id"] == span["span_id"]).collect();
        assert_eq!(calls.len() as u64, agent["steps"].as_u64().expect("steps"), "{id}'s calls");
        let tokens: i64 = calls
            .iter()
            .map(|c| {
                c["attributes"]["gen_ai.usage.input_tokens"].as_i64().expect("input")
                    + c["attributes"]["gen_ai.usage.output_tokens"].as_i64().expect("output")
            })
            .sum();
        let counted = tree.iter().find(|a| a["id"] == id).and_then(|a| a["tokens"].as_i64()).expect("tree tokens");
        assert_eq!(tokens, counted, "{id}'s tokens");
        assert_eq!(
            span["attributes"]["gen_ai.usage.input_tokens"].as_i64().unwrap_or(0)
                + span["attributes"]["gen_ai.usage.output_tokens"].as_i64().unwrap_or(0),
            counted
        );
        for call in &calls {
            let a = &call["attributes"];
            assert_eq!(a["gen_ai.provider.name"], "anthropic", "{call}");
            assert_eq!(a["gen_ai.request.model"], "claude-sonnet-4-5", "{call}");
            // (What the server said answered: the scripted server names itself.)
            assert_eq!(a["gen_ai.response.model"], "scripted", "{call}");
            assert_eq!(a["gen_ai.agent.id"], id);
            assert_eq!(call["kind"], 3, "a client span: {call}");
            assert!(a["gen_ai.response.finish_reasons"].as_array().is_some_and(|r| r.len() == 1), "{call}");
            // The commit its request was made from, in the workspace's repository.
            let commit = a["offshoot.commit"].as_str().expect("commit");
            assert_eq!(t.git(&["cat-file", "-t", commit]).trim(), "commit", "{commit}");
            assert_eq!(a["offshoot.workspace"], t.ws.display().to_string());
        }
    }
    // The tool calls: Lead's three dispatches, each child's bash.
    let tools = of(&spans, "execute_tool");
    let named = |name: &str| tools.iter().filter(|s| s["attributes"]["gen_ai.tool.name"] == name).count();
    assert_eq!((named("dispatch"), named("bash")), (3, 3), "{tools:?}");
    for tool in &tools {
        let failed = tool["attributes"]["gen_ai.tool.call.id"] == "Gamma-b";
        assert_eq!(tool["attributes"]["offshoot.tool.outcome"], if failed { "error" } else { "ok" }, "{tool}");
        assert_eq!(tool["status"]["code"], if failed { 2 } else { 1 }, "{tool}");
        assert!(tool["attributes"]["gen_ai.tool.call.id"].as_str().is_some_and(|c| !c.is_empty()), "{tool}");
    }
    let raw = std::fs::read_to_string(&receiver.spans).expect("spans");
    assert!(!raw.contains("not-for-traces"), "a tool's output is content: not sent unless asked");
    // No content unless asked for.
    assert!(spans.iter().all(|s| s["attributes"].get("gen_ai.tool.call.arguments").is_none()), "{:?}", tools[0]);
    // What the variables said: the service's name, the headers.
    assert!(spans.iter().all(|s| s["service"] == "offshoot-test"), "{:?}", spans[0]);
    assert!(spans.iter().all(|s| s["headers"]["x-team"] == "agents lab"), "{:?}", spans[0]);
    // Then Lead's conversation compacted: the compactor's span under Lead's, in the same
    // trace, and the landing an event of Lead's span.
    server.push_matching(
        "Compact the conversation of agent",
        [
            Turn::tool("c1", "write_summary", json!({"content": "Split the work in three; all three are done."})),
            Turn::text("kept the facts"),
        ],
    );
    let compactor = t.run(&["compact", "Lead"]).ok().trim().to_owned();
    let landed = |spans: &[Value]| {
        of(spans, "invoke_agent").into_iter().any(|s| {
            s["events"].as_array().into_iter().flatten().any(|e| {
                e["name"] == "compaction"
                    && e["attributes"]["offshoot.compaction.outcome"] == "landed"
                    && e["attributes"]["offshoot.compaction.compactor"] == compactor.as_str()
            })
        })
    };
    wait_for("the landing's event", || landed(&receiver.spans()));
    let spans = receiver.spans();
    let worker = span_in(&spans, &compactor);
    assert_eq!(worker["parent_span_id"], lead_span["span_id"], "the compactor under Lead");
    assert_eq!(worker["trace_id"], lead_span["trace_id"], "in the tree's trace");
    assert_eq!(worker["attributes"]["offshoot.role"], "compactor");
}

/// The `invoke_agent` span of agent `id` among `spans`.
fn span_in(spans: &[Value], id: &str) -> Value {
    of(spans, "invoke_agent").into_iter().find(|s| s["attributes"]["gen_ai.agent.id"] == id).cloned().expect("span")
}

#[test]
fn a_driver_killed_and_relaunched_continues_the_same_trace_under_the_same_agent_span() {
    let (server, mut t) = TestWorkspace::served("otel-crash", Dialect::Anthropic);
    let receiver = Receiver::start(&t.root);
    traced(&mut t, &receiver);
    server.push_turns([Turn::bash("call_1", "echo $$ > started; sleep 30"), Turn::text("finished after the crash")]);
    let id = t.run(&["prompt", "--detach", "--name", "Crashy", "do slow work"]).ok().trim().to_owned();
    let tree = t.ws.join("agents").join(&id);
    wait_for("the tool to start", || std::fs::read_to_string(tree.join("started")).is_ok_and(|s| s.ends_with('\n')));
    // The first call's span is sent while the tool runs.
    wait_for("the first call's span", || !of(&receiver.spans(), "chat").is_empty());
    let driver_pid = t.driver_pid(&id).expect("the driver's pid").to_string();
    assert!(Command::new("kill").args(["-9", &driver_pid]).status().expect("kill").success());
    wait_for("the driver to let go", || t.agents()[0]["state"] != "running");
    assert!(t.run(&["run", &id]).ok().contains("finished after the crash"));
    wait_for("the agent's span", || of(&receiver.spans(), "invoke_agent").len() == 1);
    let spans = receiver.spans();
    let agent = of(&spans, "invoke_agent")[0].clone();
    let calls = of(&spans, "chat");
    assert_eq!(calls.len(), 2, "both calls, one from each driver: {calls:?}");
    for span in &spans {
        assert_eq!(span["trace_id"], agent["trace_id"], "one trace: {span}");
    }
    for call in &calls {
        assert_eq!(call["parent_span_id"], agent["span_id"], "under the agent's one span: {call}");
    }
    let steps: Vec<i64> = calls.iter().filter_map(|c| c["attributes"]["offshoot.step"].as_i64()).collect();
    assert_eq!(steps, [1, 2]);
}

#[test]
fn with_the_collector_down_a_run_goes_on_as_ever_and_says_so_once() {
    let (server, mut t) = TestWorkspace::served("otel-down", Dialect::Anthropic);
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    t.env("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("http://127.0.0.1:{closed}"));
    // The collector's key, in its headers: never a tool's to read.
    t.env("OTEL_EXPORTER_OTLP_HEADERS", "x-honeycomb-team=hcik_01collectorkey");
    server.push_turns([Turn::bash("b1", "env"), Turn::bash("b2", "echo two"), Turn::text("done anyway")]);
    let run = t.run(&["prompt", "--name", "Unseen", "work"]);
    assert!(run.ok().contains("done anyway"), "{}", run.stdout);
    let id = t.id_of("Unseen");
    let events = std::fs::read_to_string(t.steps_dir(&id).join("events.ndjson")).expect("events");
    let warnings: Vec<&str> = events.lines().filter(|l| l.contains("traces could not be sent")).collect();
    assert_eq!(warnings.len(), 1, "one warning: {events}");
    assert_eq!(t.agents()[0]["state"], "done");
    let env = server.result_text_for("Unseen", 1);
    assert!(env.contains("PATH=") && !env.contains("hcik_01collectorkey"), "{env}");
    // What was lost is counted; `doctor` says so, and finds nothing wrong.
    let doctor = t.run(&["doctor"]);
    assert_eq!(doctor.code, 0, "{}", doctor.stderr);
    assert!(doctor.stderr.contains("spans were not sent to the trace collector"), "{}", doctor.stderr);
}

#[test]
fn content_goes_into_spans_only_when_asked_and_never_a_key() {
    let (server, mut t) = TestWorkspace::served("otel-content", Dialect::Anthropic);
    let receiver = Receiver::start(&t.root);
    traced(&mut t, &receiver);
    t.env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
    let key = "sk-ant-api03-Zq8xVb2LmN4pR7tYw";
    t.env("ANTHROPIC_API_KEY", key);
    // (A tool named with the key: a word the model chose, which names a span.)
    server.push_turns([
        Turn::tool("t0", key, json!({})),
        Turn::bash("b1", "echo hello from the tool"),
        Turn::text(&format!("the key is {key}, as asked")),
    ]);
    t.run(&["prompt", "--name", "Talker", "talk"]).ok();
    wait_for("the agent's span", || of(&receiver.spans(), "invoke_agent").len() == 1);
    let spans = receiver.spans();
    let tool = of(&spans, "execute_tool")
        .into_iter()
        .find(|s| s["attributes"]["gen_ai.tool.name"] == "bash")
        .cloned()
        .expect("the bash call's span");
    let arguments = tool["attributes"]["gen_ai.tool.call.arguments"].as_str().unwrap_or_default();
    assert!(arguments.contains("echo hello from the tool"), "{tool}");
    let result = tool["attributes"]["gen_ai.tool.call.result"].as_str().unwrap_or_default();
    assert!(result.contains("hello from the tool"), "{tool}");
    let answer = of(&spans, "chat")
        .iter()
        .find(|c| c["attributes"]["offshoot.step"] == 3)
        .and_then(|c| c["attributes"]["gen_ai.output.messages"].as_str().map(str::to_owned))
        .expect("the answer's content");
    assert!(answer.contains("the key is [redacted") && !answer.contains(key), "{answer}");
    let raw = std::fs::read_to_string(&receiver.spans).expect("spans");
    assert!(!raw.contains(key), "no span carries the key");
}

#[test]
fn a_compaction_is_its_compactors_span_under_the_agent_and_a_landing_event_on_the_agents() {
    let (server, mut t) = TestWorkspace::served("otel-compact", Dialect::Anthropic);
    let receiver = Receiver::start(&t.root);
    traced(&mut t, &receiver);
    let id = crate::compaction::long_agent(&server, &t);
    server.push_matching(
        "Compact the conversation of agent",
        [
            Turn::tool("c1", "write_summary", json!({"content": "Wrote notes.md, echoed two and three."})),
            Turn::text("kept the facts"),
        ],
    );
    let compactor = t.run(&["compact", "Long"]).ok().trim().to_owned();
    let landed =
        |spans: &[Value]| {
            of(spans, "invoke_agent").into_iter().any(|s| {
                s["attributes"]["gen_ai.agent.id"] == id.as_str()
                    && s["events"].as_array().into_iter().flatten().any(|e| {
                        e["name"] == "compaction" && e["attributes"]["offshoot.compaction.outcome"] == "landed"
                    })
            })
        };
    wait_for("the landing's event", || landed(&receiver.spans()));
    let spans = receiver.spans();
    let agent =
        of(&spans, "invoke_agent").into_iter().find(|s| s["attributes"]["gen_ai.agent.id"] == id.as_str()).cloned();
    let agent = agent.expect("the agent's span");
    let worker = of(&spans, "invoke_agent")
        .into_iter()
        .find(|s| s["attributes"]["gen_ai.agent.id"] == compactor.as_str())
        .cloned()
        .expect("the compactor's span");
    assert_eq!(worker["parent_span_id"], agent["span_id"], "the compactor under its agent");
    assert_eq!(worker["attributes"]["offshoot.role"], "compactor");
    assert!(spans.iter().all(|s| s["trace_id"] == agent["trace_id"]), "one trace");
    let landed_event = spans
        .iter()
        .flat_map(|s| s["events"].as_array().into_iter().flatten())
        .find(|e| e["attributes"]["offshoot.compaction.outcome"] == "landed")
        .cloned()
        .expect("landed");
    assert_eq!(landed_event["attributes"]["offshoot.compaction.compactor"], compactor.as_str(), "{landed_event}");
}

#[test]
fn agents_a_worker_drives_on_another_machine_land_in_their_trees_one_trace() {
    let (_daemon, root, _server, laptop, url) = crate::remote::fleet("otel-fleet", 2);
    let receiver = Receiver::start(&root);
    let endpoint = format!("http://127.0.0.1:{}", receiver.port);
    let w =
        crate::remote::machine_with("otel-fleet-worker", &url, &laptop, &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]);
    let worker = crate::remote::spawn_worker(&w, "w1", 3_000);
    laptop.run(&["prompt", "--on", "origin", "--name", "Lead", "lead the kids"]).ok();
    crate::support::wait::wait_for_within("the tree done", std::time::Duration::from_secs(60), || {
        crate::remote::tree_done(&laptop, 2)
    });
    crate::remote::stop_worker(worker);
    let lead = laptop.id_of("Lead");
    wait_for("each agent's span", || {
        let spans = receiver.spans();
        let ids: std::collections::BTreeSet<String> = of(&spans, "invoke_agent")
            .iter()
            .filter_map(|s| s["attributes"]["gen_ai.agent.id"].as_str().map(str::to_owned))
            .collect();
        ids.len() == 3
    });
    let spans = receiver.spans();
    assert!(spans.iter().all(|s| s["trace_id"] == spans[0]["trace_id"]), "one trace");
    let lead_span = of(&spans, "invoke_agent")
        .into_iter()
        .find(|s| s["attributes"]["gen_ai.agent.id"] == lead.as_str())
        .cloned()
        .expect("Lead's span");
    for kid in of(&spans, "invoke_agent").into_iter().filter(|s| s["attributes"]["gen_ai.agent.id"] != lead.as_str()) {
        assert_eq!(kid["parent_span_id"], lead_span["span_id"], "{kid}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_config_alone_sends_traces_with_each_policy_decision_and_the_requests_content() {
    let (server, t) = TestWorkspace::served("otel-config", Dialect::Anthropic);
    let receiver = Receiver::start(&t.root);
    // No OTEL_* variable: the config says where traces go, and that content goes too.
    t.set("telemetry.endpoint", &format!("http://127.0.0.1:{}", receiver.port));
    t.set("telemetry.capture_content", "true");
    t.set("permissions.deny", r#"["Bash(git push:*)"]"#);
    t.set("permissions.allow", r#"["Bash(echo:*)"]"#);
    t.set("roles.worker.permissions.ask", r#"["bash(rm:*)"]"#);
    let guard = t.root.join("guard.sh");
    std::fs::write(&guard, "grep -q forbidden && { echo 'not that' >&2; exit 2; }; exit 0\n").expect("guard");
    t.set("hooks.PreToolUse", &format!(r#"[{{ matcher = "Bash", command = "sh {}" }}]"#, guard.display()));
    server.push_turns([
        Turn::bash("b1", "git push origin main"),
        Turn::bash("b2", "echo allowed"),
        Turn::bash("b3", "rm -f nothing-here"),
        Turn::bash("b4", "true"),
        Turn::bash("b5", "echo forbidden"),
        Turn::text("done"),
    ]);
    t.run(&["prompt", "--name", "Ruled", "push it all"]).ok();
    wait_for("the agent's span", || of(&receiver.spans(), "invoke_agent").len() == 1);
    let spans = receiver.spans();
    let decision = |call: &str| -> Option<Value> {
        let span = of(&spans, "execute_tool").into_iter().find(|s| s["attributes"]["gen_ai.tool.call.id"] == call)?;
        let events = span["events"].as_array()?;
        events.iter().find(|e| e["name"] == "policy_decision").map(|e| e["attributes"].clone())
    };
    let refused = decision("b1").expect("b1's decision");
    assert_eq!(refused["offshoot.policy.outcome"], "refused", "{refused}");
    assert_eq!(refused["offshoot.policy.verdict"], "deny", "{refused}");
    assert_eq!(refused["offshoot.policy.rule"], "Bash(git push:*)", "{refused}");
    assert_eq!(refused["offshoot.policy.key"], "permissions.deny", "{refused}");
    let allowed = decision("b2").expect("b2's decision");
    assert_eq!(
        (&allowed["offshoot.policy.outcome"], &allowed["offshoot.policy.verdict"]),
        (&json!("ran"), &json!("allow"))
    );
    // An ask with no one to answer: asked, and the answer was no.
    let asked = decision("b3").expect("b3's decision");
    assert_eq!((&asked["offshoot.policy.verdict"], &asked["offshoot.policy.answer"]), (&json!("ask"), &json!("no")));
    assert_eq!(asked["offshoot.policy.outcome"], "refused", "{asked}");
    // A call no rule, mode or hook bore on carries no decision.
    assert_eq!(decision("b4"), None);
    // One the rules allow and a hook blocks: the hook's word.
    let blocked = decision("b5").expect("b5's decision");
    assert_eq!(blocked["offshoot.policy.outcome"], "refused", "{blocked}");
    assert_eq!(blocked["offshoot.policy.hooks"], json!(["block"]), "{blocked}");
    // (Its command, which may hold a token, only as content is captured here.)
    assert_eq!(blocked["offshoot.policy.hook_commands"], json!([format!("sh {}", guard.display())]), "{blocked}");
    // The requests' content: the system prompt, and the messages up to each call.
    let second = of(&spans, "chat").into_iter().find(|c| c["attributes"]["offshoot.step"] == 2).expect("step 2");
    let input: Value = serde_json::from_str(second["attributes"]["gen_ai.input.messages"].as_str().expect("input"))
        .expect("input messages are JSON");
    let parts: Vec<&Value> =
        input.as_array().expect("messages").iter().flat_map(|m| m["parts"].as_array().expect("parts")).collect();
    assert_eq!(input[0]["role"], "user", "{input}");
    assert!(
        parts.iter().any(|p| p["type"] == "text" && p["content"].as_str().unwrap_or("").contains("push it all")),
        "{input}"
    );
    assert!(parts.iter().any(|p| p["type"] == "tool_call" && p["id"] == "b1"), "{input}");
    assert!(parts.iter().any(|p| p["type"] == "tool_call_response" && p["id"] == "b1"), "{input}");
    let system = second["attributes"]["gen_ai.system_instructions"].as_str().expect("system instructions");
    assert!(
        serde_json::from_str::<Value>(system).is_ok_and(|s| s[0]["content"].as_str().is_some_and(|c| !c.is_empty())),
        "{system}"
    );
}
