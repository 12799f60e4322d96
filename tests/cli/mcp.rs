//! MCP servers' tools, end to end: `offshoot mcp add` over stdio and streamable HTTP,
//! the tools offered with their schemas, calls answered through the scripted MCP
//! server (`support/mcp_server.py`), failures in band, and no server left behind.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::server::Turn;
use crate::support::wait::{wait_for, wait_for_within};
use crate::support::workspace::{Dialect, TestWorkspace};

fn script() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cli/support/mcp_server.py").to_owned()
}

/// The scripted MCP server over HTTP, on a loopback port of its own; killed when dropped.
struct HttpServer {
    child: Child,
    url: String,
    log: PathBuf,
}

impl HttpServer {
    fn start(dir: &Path, extra: &[&str]) -> HttpServer {
        let log = dir.join("http-mcp.log");
        let mut child = Command::new("python3")
            .arg(script())
            .arg("http")
            .arg("--log")
            .arg(&log)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the HTTP MCP server");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("its port");
        let port = line.trim().strip_prefix("PORT ").expect("PORT line").to_owned();
        HttpServer { child, url: format!("http://127.0.0.1:{port}/mcp"), log }
    }

    /// The messages it received.
    fn received(&self) -> Vec<Value> {
        messages(&std::fs::read_to_string(&self.log).unwrap_or_default())
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The messages of a server's log (one JSON line each, with its pid).
fn messages(log: &str) -> Vec<Value> {
    log.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
}

/// The stdio server's log of agent `id` (its stderr, kept by the harness where no agent
/// reads).
fn stdio_log(t: &TestWorkspace, id: &str, server: &str) -> String {
    std::fs::read_to_string(t.ws.join("mcp/logs").join(id).join(format!("{server}.log"))).unwrap_or_default()
}

fn add_stdio(t: &TestWorkspace, name: &str, extra: &[&str]) {
    let script = script();
    let mut args = vec!["mcp", "add", name];
    args.extend_from_slice(extra);
    args.extend(["--", "python3", script.as_str(), "stdio"]);
    t.run(&args).ok();
}

/// Fails if any file below `dir` holds `needle`.
fn assert_nowhere(dir: &Path, needle: &str) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            assert_nowhere(&path, needle);
        } else if let Ok(bytes) = std::fs::read(&path) {
            assert!(!String::from_utf8_lossy(&bytes).contains(needle), "{} holds `{needle}`", path.display());
        }
    }
}

/// The names of the MCP tools a recorded request offers, in its order.
fn mcp_names(request: &Value) -> Vec<String> {
    let tools = request["tools"].as_array().into_iter().flatten();
    tools.filter_map(|t| t["name"].as_str()).filter(|n| n.starts_with("mcp__")).map(str::to_owned).collect()
}

/// The tool named `name` in a recorded request's `tools`.
fn offered(request: &Value, name: &str) -> Option<Value> {
    request["tools"].as_array()?.iter().find(|t| t["name"] == name).cloned()
}

#[test]
fn tools_of_a_stdio_and_an_http_server_reach_the_model_and_the_records() {
    let (server, mut t) = TestWorkspace::served("mcp-both", Dialect::Anthropic);
    let http = HttpServer::start(&t.root, &[]);
    // A name that does not look secret: it is withheld from tools because a server's
    // token is read from it.
    t.env("TRACKER_PAT", "tok-5d0c-bearer-7f1a");
    add_stdio(&t, "files", &[]);
    let added = t.run(&[
        "mcp",
        "add",
        "web",
        "--url",
        &http.url,
        "--header",
        "X-Scripted=yes",
        "--bearer-token-env-var",
        "TRACKER_PAT",
    ]);
    assert!(added.stderr.contains("added MCP server `web`"), "{}", added.stderr);
    server.push_turns([
        Turn::tool("c1", "mcp__files__echo", json!({"text": "over stdio"})),
        Turn::tool("c2", "mcp__web__add", json!({"a": 2, "b": 3})),
        Turn::bash("c3", "echo \"pat=$TRACKER_PAT\""),
        Turn::tool("c4", "mcp__files__env", json!({"name": "TRACKER_PAT"})),
        Turn::text("both answered"),
    ]);
    let run = t.run(&["prompt", "--name", "Both", "use the servers"]);
    assert!(run.ok().contains("both answered"), "{}", run.stderr);

    // Offered with the schemas the servers gave, in every request the same way.
    let requests = server.requests();
    let echo = offered(&requests[0].body, "mcp__files__echo").expect("echo offered");
    assert_eq!(echo["description"], "Echoes the text back.");
    assert_eq!(echo["input_schema"]["required"], json!(["text"]));
    assert!(offered(&requests[0].body, "mcp__web__add").is_some());
    assert_eq!(requests[0].body["tools"], requests[4].body["tools"], "the tools stay the same from step to step");
    // The results reached the model.
    assert!(server.result_text(1).contains("echo: over stdio"), "{}", server.result_text(1));
    assert!(server.result_text(2).contains("\n5\n"), "{}", server.result_text(2));
    // The HTTP server got the header and the token; the token is stored nowhere.
    let call = http.received().into_iter().find(|m| m["message"]["method"] == "tools/call").expect("a call");
    assert_eq!(call["message"]["_authorization"], "Bearer tok-5d0c-bearer-7f1a");
    assert_eq!(call["message"]["_header"], "yes");
    // Neither the agent's commands nor its stdio servers see it; no file holds it.
    assert!(server.result_text(3).contains("pat=\n"), "{}", server.result_text(3));
    assert!(server.result_text(4).contains("(unset)"), "{}", server.result_text(4));
    assert!(!t.run(&["config", "show"]).ok().contains("tok-5d0c"));
    assert_nowhere(&t.ws, "tok-5d0c");
    // The step records hold each call and what the server sent.
    let id = t.only_agent();
    let record = t.steps_dir(&id).join("0001/tools/c1");
    let input: Value = serde_json::from_slice(&std::fs::read(record.join("input.json")).expect("input")).expect("json");
    assert_eq!(input["name"], "mcp__files__echo");
    let raw: Value = serde_json::from_slice(&std::fs::read(record.join("mcp.json")).expect("mcp.json")).expect("json");
    assert_eq!(raw["content"][0]["text"], "echo: over stdio");
    // The tree records the lists; `log` shows the calls; doctor finds nothing wrong.
    let listed = t.git(&["show", &format!("agents/{id}:.offshoot/mcp/files.json")]);
    assert!(listed.contains("\"tool\": \"echo\""), "{listed}");
    let log = t.run(&["log", &id]).ok().to_owned();
    assert!(log.contains("mcp__web__add"), "{log}");
    t.run(&["doctor"]).ok();
    // `mcp list` says how each last started.
    let list = t.run(&["mcp", "list"]).ok().to_owned();
    assert!(list.contains("files\tstdio\tpython3") && list.contains("7 tools"), "{list}");
    assert!(list.contains(&format!("web\thttp\t{}", http.url)), "{list}");
}

#[test]
fn a_server_killed_mid_call_is_an_in_band_error_and_the_next_call_starts_it_again() {
    let (server, t) = TestWorkspace::served("mcp-crash", Dialect::Anthropic);
    add_stdio(&t, "s", &[]);
    server.push_turns([
        Turn::tool("c1", "mcp__s__crash", json!({})),
        Turn::tool("c2", "mcp__s__echo", json!({"text": "again"})),
        Turn::tool("c3", "mcp__s__fail", json!({})),
        Turn::text("done"),
    ]);
    t.run(&["prompt", "--name", "Crash", "crash it"]).ok();
    let crashed = server.result_text(1);
    assert!(crashed.contains("MCP server `s`") && crashed.contains("started again at the next call"), "{crashed}");
    assert!(server.result_text(2).contains("echo: again"), "{}", server.result_text(2));
    // The server's own error is the model's error, in the server's words.
    let body = &server.requests()[3].body;
    let last = body["messages"].as_array().expect("messages").last().expect("last").clone();
    assert_eq!(last["content"][0]["is_error"], true);
    assert!(server.result_text(3).contains("the tool failed on purpose"), "{}", server.result_text(3));
    // Two processes served: the one that crashed and the one started after it.
    let id = t.only_agent();
    let log = stdio_log(&t, &id, "s");
    let starts = messages(&log).iter().filter(|m| m["message"]["method"] == "initialize").count();
    assert_eq!(starts, 2, "{log}");
}

/// The host pids of processes whose command line holds `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).replace('\0', " ").contains(needle)
            && crate::support::workspace::running(pid)
        {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn no_server_survives_its_driver_killed_with_sigkill() {
    no_server_survives("mcp-orphans", "workspace-write");
}

#[test]
fn no_unconfined_server_survives_its_driver_killed_with_sigkill() {
    no_server_survives("mcp-orphans-none", "none");
}

fn no_server_survives(name: &str, sandbox: &str) {
    let (server, t) = TestWorkspace::served(name, Dialect::Anthropic);
    t.run(&["config", "set", "roles.worker.sandbox", sandbox]).ok();
    let tag = format!("tag-{}", std::process::id());
    add_stdio(&t, "s", &["--env", &format!("TAG={tag}")]);
    // The server's command line carries the tag too, so its processes can be found.
    t.run(&["config", "set", "mcp_servers.s.args", &format!("[\"{}\", \"stdio\", \"--tag\", \"{tag}\"]", script())])
        .ok();
    server.push_turns([Turn::tool("c1", "mcp__s__slow", json!({"secs": 60})), Turn::text("never")]);
    let id = t.run(&["prompt", "--detach", "--name", "Orphan", "be slow"]).ok().trim().to_owned();
    wait_for("the slow call to reach the server", || stdio_log(&t, &id, "s").contains("\"slow\""));
    assert!(!processes_with(&tag).is_empty(), "the server runs");
    let driver = t.driver_pid(&id).expect("driver").to_string();
    assert!(Command::new("kill").args(["-9", &driver]).status().expect("kill").success());
    wait_for_within("the server to die with its driver", Duration::from_secs(10), || processes_with(&tag).is_empty());
    // Recovery finds nothing of it either, and leaves nothing running.
    server.push_turns([Turn::text("after the crash")]);
    t.run(&["scan"]).ok();
    wait_for("the relaunched driver to finish", || t.agents()[0]["state"] != "running");
    // Its server ends as the driver lets go (moments after the agent reads as settled).
    wait_for_within("the relaunched driver's server to end", Duration::from_secs(10), || {
        processes_with(&tag).is_empty()
    });
}

#[test]
fn timeouts_failures_to_start_and_unreachable_urls_are_said_and_named() {
    let (server, t) = TestWorkspace::served("mcp-errors", Dialect::Anthropic);
    add_stdio(&t, "quick", &["--tool-timeout", "1"]);
    // A server slower to start than its timeout, and a URL nothing listens on.
    let script = script();
    t.run(&["mcp", "add", "sleepy", "--startup-timeout", "1", "--", "python3", &script, "stdio", "--start-delay", "5"])
        .ok();
    t.run(&["mcp", "add", "nowhere", "--url", "http://127.0.0.1:9/mcp", "--startup-timeout", "2"]).ok();
    // A command that is not there.
    t.run(&["mcp", "add", "ghost", "--", "/nonexistent/mcp-server"]).ok();
    server.push_turns([
        Turn::tool("c1", "mcp__quick__slow", json!({"secs": 5})),
        Turn::tool("c2", "no_such_tool", json!({})),
        Turn::text("done"),
    ]);
    let run = t.run(&["prompt", "--name", "Errors", "try them"]);
    run.ok();
    assert!(run.stderr.contains("MCP server `sleepy` did not start within 1 s"), "{}", run.stderr);
    // What failed, in words: no Rust type names.
    assert!(
        run.stderr.contains("MCP server `nowhere` did not start: cannot reach http://127.0.0.1:9/mcp: "),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("rmcp::") && !run.stderr.contains("WorkerTransport"), "{}", run.stderr);
    assert!(
        run.stderr.contains("its command `/nonexistent/mcp-server` was not found (exit code 127); its tools are not offered (its stderr: "),
        "{}",
        run.stderr
    );
    let timed_out = server.result_text(1);
    assert!(timed_out.contains("MCP server `quick` did not answer within 1 s"), "{timed_out}");
    // A tool nobody offers: the list names the MCP tools offered too.
    let unknown = server.result_text(2);
    assert!(unknown.contains("tool `no_such_tool` is not available to you"), "{unknown}");
    assert!(unknown.contains("mcp__quick__slow"), "{unknown}");
    // Only the server that started offers tools.
    let tools = mcp_names(&server.requests()[0].body);
    assert!(tools.iter().all(|n| n.starts_with("mcp__quick__")) && tools.len() == 7, "{tools:?}");
    let list = t.run(&["mcp", "list"]).ok().to_owned();
    assert!(list.contains("sleepy\tstdio") && list.contains("failed"), "{list}");
}

#[test]
fn names_are_made_safe_and_a_changed_list_is_a_new_tools_commit() {
    let (server, t) = TestWorkspace::served("mcp-names", Dialect::Anthropic);
    let tools_file = t.root.join("tools.json");
    let long = "x".repeat(70);
    let first = json!([
        {"name": "get.page", "inputSchema": {"type": "object", "properties": {"url": {"type": "string"}}}},
        {"name": "get page", "inputSchema": {"type": "object"}},
        {"name": long, "description": "A long name.", "inputSchema": {"type": "object"}},
    ]);
    std::fs::write(&tools_file, first.to_string()).expect("tools");
    let file = tools_file.display().to_string();
    add_stdio(&t, "odd", &[]);
    t.run(&[
        "config",
        "set",
        "mcp_servers.odd.args",
        &format!("[\"{}\", \"stdio\", \"--tools\", \"{file}\"]", script()),
    ])
    .ok();
    server.push_turns([Turn::tool("c1", "mcp__odd__get_page", json!({"url": "u"})), Turn::text("first")]);
    t.run(&["prompt", "--name", "Odd", "look"]).ok();
    let names = mcp_names(&server.requests()[0].body);
    assert_eq!(names[0], "mcp__odd__get_page");
    assert!(names[1].starts_with("mcp__odd__get_page_") && names[1].len() == 27, "{names:?}");
    assert_eq!(names[2].len(), 64, "{names:?}");
    for n in &names {
        assert!(n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{n}");
    }
    // The call reached the tool by the server's own name.
    assert!(server.result_text(1).contains("\"tool\": \"get.page\""), "{}", server.result_text(1));

    // The server's list changes; the next driver that starts it records the new one.
    let second = json!([{"name": "search", "description": "Searches.", "inputSchema": {"type": "object"}}]);
    std::fs::write(&tools_file, second.to_string()).expect("tools");
    server.push_turns([Turn::tool("c2", "mcp__odd__get_page", json!({"url": "v"})), Turn::text("second")]);
    t.run(&["send", "Odd", "again"]).ok();
    let after = &server.requests()[3].body;
    assert!(offered(after, "mcp__odd__search").is_some(), "{}", after["tools"]);
    assert!(offered(after, "mcp__odd__get_page").is_some(), "the history's tools stay declared");
    let id = t.only_agent();
    let history = t.git(&["log", "--format=%s", &format!("agents/{id}")]);
    assert!(history.contains("tools: MCP server `odd` offers 1 tools"), "{history}");
}

#[test]
fn stdio_servers_run_in_the_sandbox_without_keys() {
    let (server, t) = TestWorkspace::served("mcp-contained", Dialect::Anthropic);
    add_stdio(&t, "s", &["--env", "GREETING=hello"]);
    server.push_turns([
        Turn::tool("c1", "mcp__s__env", json!({"name": "ANTHROPIC_API_KEY"})),
        Turn::tool("c2", "mcp__s__env", json!({"name": "GREETING"})),
        Turn::text("done"),
    ]);
    t.run(&["prompt", "--name", "Kept", "look around"]).ok();
    assert!(server.result_text(1).contains("(unset)"), "{}", server.result_text(1));
    assert!(server.result_text(2).contains("hello"), "{}", server.result_text(2));
    // The servers' stderr (which may carry what their env holds) is out of the agent's reach.
    let id = t.only_agent();
    let log = t.ws.join("mcp/logs").join(&id).join("s.log");
    assert!(std::fs::read_to_string(&log).is_ok_and(|l| l.contains("initialize")));
    let shown = log.display().to_string();
    server.push_turns([
        Turn::tool("c3", "read_file", json!({"path": shown})),
        Turn::bash("c4", &format!("cat {shown} || echo unreadable")),
        Turn::text("done"),
    ]);
    t.run(&["send", "Kept", "read the log"]).ok();
    assert!(server.result_text(4).contains("internals"), "{}", server.result_text(4));
    assert!(
        server.result_text(5).contains("unreadable") && !server.result_text(5).contains("initialize"),
        "{}",
        server.result_text(5)
    );
}

#[test]
fn roles_choose_servers_and_the_verbs_check_what_they_are_given() {
    let (server, t) = TestWorkspace::served("mcp-verbs", Dialect::Anthropic);
    add_stdio(&t, "a", &[]);
    add_stdio(&t, "b", &[]);
    t.run(&["config", "set", "roles.worker.mcp_servers", "[\"b\"]"]).ok();
    server.push_turns([Turn::text("only b")]);
    t.run(&["prompt", "--name", "Chooser", "which"]).ok();
    let tools = server.requests()[0].body["tools"].to_string();
    assert!(tools.contains("mcp__b__echo") && !tools.contains("mcp__a__"), "{tools}");

    // Errors name the thing and the rule, and change nothing.
    let before = t.run(&["config", "show"]).ok().to_owned();
    for (args, rule) in [
        (&["mcp", "add", "a", "--", "true"][..], "MCP server `a` already exists"),
        (&["mcp", "add", "a__b", "--", "true"], "`a__b` cannot name an MCP server"),
        (&["mcp", "add", "a_", "--", "true"], "cannot name an MCP server"),
        (&["mcp", "add", "c", "--url", "http://x", "--", "true"], "cannot be used with"),
        (&["mcp", "add", "c", "--url", "ftp://x"], "must start with http:// or https://"),
        (&["mcp", "add", "c", "--url", "https://user:pass@example.com/mcp"], "a URL with credentials"),
        (
            &["mcp", "add", "c", "--url", "https://example.com/mcp", "--header", "X=bad\nvalue"],
            "holds a control character",
        ),
    ] {
        let refused = t.run(args);
        assert_eq!(refused.code, 2, "{args:?}");
        assert!(refused.stderr.contains(rule), "{args:?}: {}", refused.stderr);
    }
    let unknown = t.run(&["mcp", "remove", "zzz"]);
    assert_eq!(unknown.code, 2);
    assert!(unknown.stderr.contains("MCP server `zzz` is not configured"), "{}", unknown.stderr);
    let role = t.run(&["config", "set", "roles.worker.mcp_servers", "[\"zzz\"]"]);
    assert_eq!(role.code, 2);
    assert!(role.stderr.contains("MCP server `zzz` is not defined"), "{}", role.stderr);
    assert_eq!(t.run(&["config", "show"]).ok(), before);

    // Removing a server takes it out of the roles that name it, in the same commit.
    let removed = t.run(&["mcp", "remove", "b"]);
    assert!(removed.stderr.contains("role `worker` no longer names it"), "{}", removed.stderr);
    let config = t.run(&["config", "show"]).ok().to_owned();
    assert!(!config.contains("[mcp_servers.b]") && config.contains("mcp_servers = []"), "{config}");
    // And the agent's next step no longer offers its tools (its record goes).
    server.push_turns([Turn::text("none now")]);
    t.run(&["send", "Chooser", "and now"]).ok();
    let tools = server.requests()[1].body["tools"].to_string();
    assert!(!tools.contains("mcp__"), "{tools}");
    let id = t.only_agent();
    let listed = t.git(&["ls-tree", "-r", "--name-only", &format!("agents/{id}")]);
    assert!(!listed.contains(".offshoot/mcp/"), "{listed}");

    // `mcp tools` shows a server's tools as the model sees them.
    let tools = t.run(&["mcp", "tools", "a"]);
    assert!(tools.ok().contains("mcp__a__add (read-only)\n  Adds two numbers."), "{}", tools.stdout);
}

#[test]
fn read_only_calls_of_one_step_run_together() {
    let (server, t) = TestWorkspace::served("mcp-parallel", Dialect::Anthropic);
    add_stdio(&t, "s", &[]);
    server.push_turns([Turn::text("listed")]);
    t.run(&["prompt", "--name", "Par", "list them"]).ok();
    // A new driver, the tools recorded: two read-only calls in one output start the
    // server once between them.
    let mut both = Turn::tool("c1", "mcp__s__add", json!({"a": 1, "b": 1}));
    both.calls.push(("c2".into(), "mcp__s__add".into(), json!({"a": 2, "b": 2}).to_string()));
    server.push_turns([both, Turn::text("done")]);
    t.run(&["send", "Par", "add twice"]).ok();
    let log = stdio_log(&t, &t.only_agent(), "s");
    let starts = messages(&log).iter().filter(|m| m["message"]["method"] == "initialize").count();
    assert_eq!(starts, 2, "one start to list, one for the two calls: {log}");
    let body = &server.requests()[2].body;
    let last = body["messages"].as_array().expect("messages").last().expect("last").clone();
    let results: Vec<String> = last["content"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["content"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(results[0].contains("\n2\n") && results[1].contains("\n4\n"), "{results:?}");
}

#[test]
fn images_go_to_the_model_as_images_in_every_dialect() {
    for dialect in [Dialect::Anthropic, Dialect::Chat, Dialect::Responses] {
        let (server, t) = TestWorkspace::served("mcp-image", dialect);
        add_stdio(&t, "s", &[]);
        server.push_turns([Turn::tool("c1", "mcp__s__image", json!({})), Turn::text("seen")]);
        t.run(&["prompt", "--name", "Eyes", "look at it"]).ok();
        let body = server.requests()[1].body.clone();
        let url = "data:image/png;base64,iVBORw0KGgo=";
        let found = match dialect {
            Dialect::Anthropic => {
                let last = body["messages"].as_array().expect("messages").last().expect("last").clone();
                let content = &last["content"][0]["content"];
                content[0]["text"].as_str().is_some_and(|t| t.contains("a red dot:"))
                    && content[1]["source"]["data"] == "iVBORw0KGgo="
                    && content[1]["source"]["media_type"] == "image/png"
            }
            Dialect::Chat => {
                let messages = body["messages"].as_array().expect("messages");
                let tool = messages.iter().position(|m| m["role"] == "tool").expect("a tool message");
                messages[tool]["content"].as_str().is_some_and(|t| t.contains("a red dot:"))
                    && messages[tool + 1]["role"] == "user"
                    && messages[tool + 1]["content"][0]["image_url"]["url"] == url
            }
            Dialect::Responses => {
                let input = body["input"].as_array().expect("input");
                let output = &input.iter().find(|i| i["type"] == "function_call_output").expect("output")["output"];
                output[0]["text"].as_str().is_some_and(|t| t.contains("a red dot:")) && output[1]["image_url"] == url
            }
        };
        assert!(found, "{dialect:?}: {body}");
    }
}

#[test]
fn allow_and_deny_lists_apply_from_the_next_step() {
    let (server, t) = TestWorkspace::served("mcp-filters", Dialect::Anthropic);
    add_stdio(&t, "s", &[]);
    server.push_turns([Turn::text("seven")]);
    t.run(&["prompt", "--name", "Filtered", "list"]).ok();
    assert!(mcp_names(&server.requests()[0].body).contains(&"mcp__s__echo".to_owned()));
    // Denied: gone from the next request, and a call of it runs nothing.
    t.run(&["config", "set", "mcp_servers.s.disabled_tools", "[\"echo\"]"]).ok();
    server.push_turns([Turn::tool("c1", "mcp__s__echo", json!({"text": "denied"})), Turn::text("done")]);
    t.run(&["send", "Filtered", "again"]).ok();
    let names = mcp_names(&server.requests()[1].body);
    assert!(!names.contains(&"mcp__s__echo".to_owned()) && names.len() == 6, "{names:?}");
    assert!(server.result_text(2).contains("is not available to you; nothing ran"), "{}", server.result_text(2));
    let id = t.only_agent();
    assert!(!stdio_log(&t, &id, "s").contains("denied"));
    // Allowed again: offered again.
    t.run(&["config", "unset", "mcp_servers.s.disabled_tools"]).ok();
    server.push_turns([Turn::text("back")]);
    t.run(&["send", "Filtered", "and now"]).ok();
    assert_eq!(mcp_names(&server.requests()[3].body).len(), 7);
}

#[test]
fn secrets_a_server_holds_are_hidden_from_results_errors_and_descriptions() {
    let (server, t) = TestWorkspace::served("mcp-secrets", Dialect::Anthropic);
    let tools_file = t.root.join("tools.json");
    let tools = json!([
        {"name": "env", "description": "Uses the token Zx9qLm2Pw7Rt5Kv3 for you.", "inputSchema": {"type": "object"}},
    ]);
    std::fs::write(&tools_file, tools.to_string()).expect("tools");
    add_stdio(&t, "s", &["--env", "API_TOKEN=Zx9qLm2Pw7Rt5Kv3"]);
    let args = format!("[\"{}\", \"stdio\", \"--tools\", \"{}\"]", script(), tools_file.display());
    t.run(&["config", "set", "mcp_servers.s.args", &args]).ok();
    server.push_turns([Turn::tool("c1", "mcp__s__env", json!({"name": "API_TOKEN"})), Turn::text("done")]);
    t.run(&["prompt", "--name", "Quiet", "look"]).ok();
    let first = server.requests()[0].body.to_string();
    assert!(first.contains("Uses the token") && !first.contains("Zx9qLm2Pw7Rt5Kv3"), "{first}");
    let result = server.result_text(1);
    assert!(!result.contains("Zx9qLm2Pw7Rt5Kv3") && result.contains("API_TOKEN"), "{result}");
    assert_nowhere(&t.ws.join("steps"), "Zx9qLm2Pw7Rt5Kv3");
}

#[test]
fn a_server_whose_settings_change_is_listed_again_and_a_request_holds_at_most_128_tools() {
    let (server, t) = TestWorkspace::served("mcp-relist", Dialect::Anthropic);
    let empty = t.root.join("empty.json");
    std::fs::write(&empty, "[]").expect("tools");
    add_stdio(&t, "s", &[]);
    let args = format!("[\"{}\", \"stdio\", \"--tools\", \"{}\"]", script(), empty.display());
    t.run(&["config", "set", "mcp_servers.s.args", &args]).ok();
    server.push_turns([Turn::text("none yet")]);
    t.run(&["prompt", "--name", "Relisted", "list"]).ok();
    assert!(mcp_names(&server.requests()[0].body).is_empty());
    // Fixed by the user: the next driver lists it again without waiting for a call.
    let many = t.root.join("many.json");
    let tools: Vec<Value> =
        (0..200).map(|n| json!({"name": format!("t{n}"), "inputSchema": {"type": "object"}})).collect();
    std::fs::write(&many, Value::Array(tools).to_string()).expect("tools");
    let args = format!("[\"{}\", \"stdio\", \"--tools\", \"{}\"]", script(), many.display());
    t.run(&["config", "set", "mcp_servers.s.args", &args]).ok();
    server.push_turns([Turn::text("many")]);
    let run = t.run(&["send", "Relisted", "again"]);
    run.ok();
    let request = &server.requests()[1].body;
    assert_eq!(request["tools"].as_array().expect("tools").len(), 128, "{}", run.stderr);
    assert!(run.stderr.contains("a request holds at most 128"), "{}", run.stderr);
}
