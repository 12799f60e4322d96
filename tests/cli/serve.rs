//! `offshoot serve`: the HTTP API and event stream spoken to over a socket, and the web
//! view driven by a real browser (Debian's headless Chromium, unpacked by `.ci/tools`,
//! over the DevTools protocol).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::server::Turn;
use crate::support::wait::wait_for;
use crate::support::workspace::{Dialect, TestWorkspace};

/// A running `offshoot serve`: its process, port and token.
struct Served {
    child: Child,
    port: u16,
    token: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(t: &TestWorkspace) -> Served {
    serve_with(t.command(), &[])
}

/// `offshoot serve` as `command` runs it, with `options` after the verb.
fn serve_with(mut command: Command, options: &[&str]) -> Served {
    let mut child = command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(options)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("the URL");
    let url = line.trim().strip_prefix("http://127.0.0.1:").unwrap_or_else(|| panic!("not a URL: {line:?}"));
    let (port, token) = url.split_once("/?token=").expect("a token in the URL");
    Served { child, port: port.parse().expect("port"), token: token.to_owned() }
}

/// One request; its status and body.
fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut head = format!("{method} {path} HTTP/1.1\r\nContent-Length: {}\r\n", body.len());
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    stream.write_all(format!("{head}\r\n{body}").as_bytes()).expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

impl Served {
    fn get(&self, path: &str) -> (u16, Value) {
        let auth = format!("Bearer {}", self.token);
        let (status, body) = request(self.port, "GET", path, &[("Authorization", &auth)], "");
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    fn post(&self, path: &str, body: &str) -> (u16, Value) {
        let auth = format!("Bearer {}", self.token);
        let (status, body) = request(self.port, "POST", path, &[("Authorization", &auth)], body);
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }
}

#[test]
fn without_the_token_every_route_is_401_and_a_write_from_another_origin_is_refused() {
    let (server, t) = TestWorkspace::served("serve-auth", Dialect::Anthropic);
    server.push_turns([Turn::text("done")]);
    t.run(&["prompt", "--name", "One", "hello"]).ok();
    let served = serve(&t);
    let id = t.id_of("One");
    for path in ["/", "/app.js", "/api/agents", &format!("/api/agents/{id}/transcript"), "/events", "/nothing"] {
        let (status, body) = request(served.port, "GET", path, &[], "");
        assert_eq!(status, 401, "{path}: {body}");
        let (status, _) = request(served.port, "GET", &format!("{path}?token=not-it"), &[], "");
        assert_eq!(status, 401, "{path} with a wrong token");
    }
    let (status, _) = request(served.port, "POST", "/api/agents", &[], r#"{"goal":"x"}"#);
    assert_eq!(status, 401);
    // With it: the page, the agents, a transcript.
    let (status, page) = request(served.port, "GET", &format!("/?token={}", served.token), &[], "");
    let script = format!("<script src=\"app.js?token={}\">", served.token);
    assert!(status == 200 && page.contains(&script), "{status} {page}");
    let (status, agents) = served.get("/api/agents");
    assert_eq!((status, &agents["agents"][0]["id"]), (200, &json!(id)), "{agents}");
    let (status, transcript) = served.get(&format!("/api/agents/{id}/transcript"));
    assert_eq!(status, 200, "{transcript}");
    assert_eq!(transcript["entries"][1]["output"]["content"][0]["text"], "done", "{transcript}");
    // A page of another site cannot write, nor reach it by another name.
    let auth = format!("Bearer {}", served.token);
    let (status, body) = request(
        served.port,
        "POST",
        &format!("/api/agents/{id}/messages"),
        &[("Authorization", &auth), ("Origin", "http://evil.example")],
        r#"{"text":"rm -rf"}"#,
    );
    assert_eq!(status, 403, "{body}");
    let evil = [("Authorization", auth.as_str()), ("Host", "evil.example:80")];
    assert_eq!(request(served.port, "GET", "/api/agents", &evil, "").0, 421);
    assert_eq!(server.requests().len(), 1, "nothing was sent to the agent");
}

#[test]
fn bad_input_is_a_4xx_naming_the_thing_and_nothing_is_written() {
    let (server, t) = TestWorkspace::served("serve-bad", Dialect::Anthropic);
    server.push_turns([Turn::text("done")]);
    t.run(&["prompt", "--name", "One", "hello"]).ok();
    let id = t.id_of("One");
    let served = serve(&t);
    let (status, body) = served.get("/api/agents/zzzzzz/transcript");
    assert_eq!(status, 404);
    assert!(body["error"].as_str().is_some_and(|e| e.contains("no agent `zzzzzz`")), "{body}");
    let (status, body) = served.get(&format!("/api/agents/{id}/diff"));
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("did not start from a project")), "{body}");
    let (status, body) = served.get(&format!("/api/agents/{id}/steps/9/request"));
    assert_eq!(status, 404);
    assert!(body["error"].as_str().is_some_and(|e| e.contains("no step `9` (its steps are 1 to 1)")), "{body}");
    for (path, body, says) in [
        (format!("/api/agents/{id}/messages"), "{not json", "not JSON"),
        (format!("/api/agents/{id}/messages"), "[1]", "not a JSON object"),
        (format!("/api/agents/{id}/messages"), r#"{"text":"  "}"#, "`text` is empty"),
        ("/api/agents".to_owned(), r#"{"goal":7}"#, "`goal` must be a string"),
        ("/api/questions/q-nope/approve".to_owned(), "{}", "q-nope"),
    ] {
        let (status, answer) = served.post(&path, body);
        assert!((400..500).contains(&status), "{path} {body}: {status} {answer}");
        assert!(answer["error"].as_str().is_some_and(|e| e.contains(says)), "{path} {body}: {answer}");
    }
    assert_eq!(t.agents().len(), 1, "no agent was made");
    assert!(std::fs::read_dir(t.ws.join("inbox").join(&id)).map_or(true, |d| d.count() == 0), "no message was left");
    assert_eq!(server.requests().len(), 1);
}

/// An event stream of `served` (resuming after `last` when given), read as it comes.
fn stream(served: &Served, last: Option<&str>) -> BufReader<TcpStream> {
    stream_of(served, "/events", last)
}

/// [`stream`] of the events at `path` (`/events?ws=…`).
fn stream_of(served: &Served, path: &str, last: Option<&str>) -> BufReader<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", served.port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let resume = last.map(|l| format!("Last-Event-ID: {l}\r\n")).unwrap_or_default();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {}\r\n{resume}\r\n",
        served.port, served.token
    );
    s.write_all(head.as_bytes()).expect("send");
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    while reader.read_line(&mut line).expect("head") > 2 {
        line.clear();
    }
    reader
}

/// The next event of a stream: its id and data (comments passed over).
fn next_event(reader: &mut BufReader<TcpStream>) -> (String, String) {
    let (mut id, mut data) = (String::new(), String::new());
    loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).expect("an event") > 0, "the stream ended");
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() && !data.is_empty() {
            return (id, data);
        }
        if let Some(v) = line.strip_prefix("id: ") {
            id = v.to_owned();
        } else if let Some(v) = line.strip_prefix("data: ") {
            data = v.to_owned();
        }
    }
}

#[test]
fn events_come_as_drivers_write_them_and_a_client_that_comes_back_misses_none() {
    let (server, t) = TestWorkspace::served("serve-events", Dialect::Anthropic);
    server.latency(Duration::from_millis(100));
    server.push_turns((0..6).map(|i| Turn::bash(&format!("b{i}"), "echo step")).chain([Turn::text("all done")]));
    let served = serve(&t);
    // A FIFO where an agent's events file would be, and a link for an agent's directory:
    // passed over, never waited on or followed.
    let planted = t.ws.join("steps/zzzzzz");
    std::fs::create_dir_all(&planted).expect("dir");
    assert!(Command::new("mkfifo").arg(planted.join("events.ndjson")).status().expect("mkfifo").success());
    std::os::unix::fs::symlink(&planted, t.ws.join("steps/yyyyyy")).expect("link");
    let mut first = stream(&served, None);
    let mut run =
        t.command().args(["prompt", "--name", "Six", "six steps"]).stdout(Stdio::null()).spawn().expect("run");
    let mut seen = Vec::new();
    let mut last = String::new();
    while seen.len() < 6 {
        let (id, data) = next_event(&mut first);
        last = id;
        seen.push(data);
    }
    // Gone while the agent works on; back with the last id it had.
    drop(first);
    std::thread::sleep(Duration::from_millis(500));
    let mut second = stream(&served, Some(&last));
    loop {
        let (_, data) = next_event(&mut second);
        let end = data.contains(r#""type":"end""#);
        seen.push(data);
        if end {
            break;
        }
    }
    assert!(run.wait().expect("run").success());
    let id = t.id_of("Six");
    let written = std::fs::read_to_string(t.steps_dir(&id).join("events.ndjson")).expect("events");
    // Each the line written, with the workspace it is of.
    let seen: Vec<Value> = seen
        .iter()
        .map(|d| {
            let mut v: Value = serde_json::from_str(d).expect("JSON");
            assert_eq!(v["workspace"], "ws", "{d}");
            v.as_object_mut().expect("object").remove("workspace");
            v
        })
        .collect();
    let records: Vec<&Value> = seen.iter().filter(|v| v["type"] != "agent").collect();
    let written: Vec<Value> = written.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    assert_eq!(records, written.iter().collect::<Vec<_>>(), "every line once, in order");
    assert_eq!(seen[0], json!({"type": "agent", "agent": id}), "its coming first");
}

/// The browser on `url` through `steps` (see tests/serve/browser.py); what it saw.
fn browse(url: &str, steps: Value) -> Vec<Value> {
    let browser = crate::support::browser::unpacked().unwrap_or_else(|| "chromium-headless-shell".into());
    crate::support::browser::browse(&browser, url, steps)
}

#[test]
fn in_a_browser_the_tree_shows_a_fan_out_a_childs_step_request_is_shows_and_a_question_is_approved() {
    let (server, t) = TestWorkspace::served("serve-browser", Dialect::Anthropic);
    t.set("roles.worker.permissions.ask", r#"["bash(rm:*)"]"#);
    let mut fan_out = Turn::text("");
    fan_out.calls = ["Alpha", "Beta"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let input = json!({"role": "worker", "goal": format!("the part of {name}"), "name": name});
            (format!("d{i}"), "dispatch".to_owned(), input.to_string())
        })
        .collect();
    server.push_for("Lead", [fan_out, Turn::text("waiting"), Turn::text("noted"), Turn::text("both done")]);
    server.push_for("Alpha", [Turn::bash("a1", "echo alpha > a.txt"), Turn::text("alpha done")]);
    server.push_for("Beta", [Turn::bash("b1", "rm -f old.txt"), Turn::text("beta done")]);
    let served = serve(&t);
    let mut lead = t
        .command()
        .args(["prompt", "--on-ask", "wait", "--name", "Lead", "split the work"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prompt");
    wait_for("Alpha to finish and Beta to ask", || {
        let agents = t.agents();
        agents.iter().any(|a| a["name"] == "Alpha" && a["state"] == "done")
            && !t.run(&["pending", "--json"]).stdout.is_empty()
    });
    let alpha = t.id_of("Alpha");
    let artifact = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts/serve-tree.png");
    let phone = artifact.with_file_name("serve-phone.png");
    let _ = std::fs::remove_file(&artifact);
    let url = format!("http://127.0.0.1:{}/?token={}", served.port, served.token);
    let seen = browse(
        &url,
        json!([
            [
                "wait",
                "document.querySelectorAll('.agent').length === 3 && document.querySelectorAll('.agent .badge').length === 1",
                20
            ],
            ["wait", "document.querySelector('.question .approve') !== null", 10],
            ["screenshot", artifact],
            ["click", format!("[data-agent='{alpha}']")],
            [
                "wait",
                "[...document.querySelectorAll('.entry.user .text')].some(e => e.textContent.includes('the part of Alpha'))",
                10
            ],
            ["click", "#show-request"],
            [
                "wait",
                "!document.querySelector('#request').hidden && document.querySelector('#request').textContent",
                10
            ],
            // Its first step's change, coloured.
            ["eval", "document.querySelector('#steps').value = '1'"],
            ["click", "#show-step-diff"],
            [
                "wait",
                "!document.querySelector('#diff').hidden && document.querySelector('#diff .add') && document.querySelector('#diff').textContent",
                10
            ],
            ["click", ".question .approve"],
            ["wait", "document.querySelectorAll('.question').length === 0", 20],
            ["wait", "[...document.querySelectorAll('.agent')].every(e => e.classList.contains('state-done'))", 30],
            // On a phone's screen: the tree above the conversation, nothing wider than it.
            ["viewport", 390, 844],
            [
                "wait",
                "document.querySelector('#side').getBoundingClientRect().bottom <= document.querySelector('#detail').getBoundingClientRect().top + 1 && document.documentElement.scrollWidth <= 390",
                10
            ],
            ["screenshot", phone]
        ]),
    );
    let values: Vec<&Value> = seen.iter().map(|s| &s["value"]).collect();
    assert_eq!(values[0], &json!(true), "the tree of three, one needing you: {seen:?}");
    assert_eq!(values[1], &json!(true), "the question with its buttons: {seen:?}");
    assert!(artifact.exists(), "the screenshot");
    assert_eq!(seen[3]["clicked"], true, "{seen:?}");
    assert_eq!(values[4], &json!(true), "Alpha's conversation: {seen:?}");
    // The step's request on the page is the one `show --step N --request` prints.
    let shown: Value = serde_json::from_str(values[6].as_str().expect("the request's text")).expect("JSON");
    let steps = t.agents().iter().find(|a| a["id"] == alpha.as_str()).map(|a| a["steps"].clone()).expect("alpha");
    let cli = t.run(&["show", &alpha, "--step", &steps.to_string(), "--request"]);
    assert_eq!(shown, serde_json::from_str::<Value>(cli.ok()).expect("JSON"));
    let change = values[9].as_str().unwrap_or_default();
    assert!(change.contains("a.txt") && change.contains("+alpha"), "the step's change: {seen:?}");
    assert_eq!(values[11], &json!(true), "the question answered from the page: {seen:?}");
    assert_eq!(values[12], &json!(true), "every agent done: {seen:?}");
    assert_eq!(values[14], &json!(true), "the page on a phone's screen: {seen:?}");
    assert!(phone.exists(), "the phone's screenshot");
    assert!(lead.wait().expect("lead").success());
    assert!(
        server.result_text_for("Beta", 1).contains("ran on a yes from user"),
        "{}",
        server.result_text_for("Beta", 1)
    );
}

#[test]
fn no_answer_or_event_carries_the_providers_key_even_when_the_model_says_it() {
    let (server, t) = TestWorkspace::served("serve-secret", Dialect::Anthropic);
    let key = "sk-ant-api03-Zq8xVb2LmN4pR7tYw";
    // (Paced: the answer streams in pieces of seven characters, the key split among them.)
    let said = Turn::text(&format!("the key is {key}, as asked"));
    server.push(crate::support::server::Reply::Paced(said, Duration::from_millis(60)));
    let mut command = t.command();
    command.env("ANTHROPIC_API_KEY", key);
    let served = serve_with(command, &[]);
    let mut events = stream(&served, None);
    let ran = t.command().env("ANTHROPIC_API_KEY", key).args(["prompt", "--name", "Leaky", "say the key"]).output();
    assert!(ran.expect("prompt").status.success());
    let mut seen = Vec::new();
    while !seen.last().is_some_and(|d: &String| d.contains(r#""type":"end""#)) {
        seen.push(next_event(&mut events).1);
    }
    assert!(seen.iter().any(|d| d.contains("the key is [redacted")), "{seen:?}");
    // Not whole, nor in pieces: no part of it goes out as it streams.
    assert!(!seen.iter().any(|d| d.contains(key) || d.contains(&key[8..16])), "{seen:?}");
    let streamed: String = seen
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|v| v["type"] == "text_delta")
        .filter_map(|v| v["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(streamed, "the key is [redacted: the value of ANTHROPIC_API_KEY], as asked", "{seen:?}");
    let id = t.id_of("Leaky");
    let auth = format!("Bearer {}", served.token);
    let (_, transcript) =
        request(served.port, "GET", &format!("/api/agents/{id}/transcript"), &[("Authorization", &auth)], "");
    assert!(transcript.contains("the key is [redacted") && !transcript.contains(key), "{transcript}");
    // (The model was told it: what is on disk holds it; what is served does not.)
    assert!(std::fs::read_to_string(t.steps_dir(&id).join("events.ndjson")).expect("events").contains(key));
}

#[test]
fn an_agents_change_to_the_project_is_the_diff_that_offshoot_diff_prints() {
    let (server, t, repo) = crate::project::project("serve-diff");
    server.push_turns([
        Turn::tool("w1", "write_file", json!({"path": "b.txt", "content": "line 1\nand a new one\n"})),
        Turn::text("changed b"),
    ]);
    let mut prompt = t.command();
    prompt.current_dir(&repo).args(["prompt", "--name", "Changer", "change b"]);
    assert!(prompt.output().expect("prompt").status.success());
    let id = t.id_of("Changer");
    let served = serve(&t);
    let (status, body) = served.get(&format!("/api/agents/{id}/diff"));
    assert_eq!(status, 200, "{body}");
    assert!(body["diff"].as_str().is_some_and(|d| d.contains("+and a new one")), "{body}");
    let cli: Value = serde_json::from_str(t.run(&["--json", "diff", &id]).ok()).expect("json");
    assert_eq!(body, cli);
}

#[test]
fn a_steps_record_and_change_and_a_fork_made_here_are_what_the_cli_has() {
    let (server, t) = TestWorkspace::served("serve-steps", Dialect::Anthropic);
    server.push_turns([
        Turn::tool("w1", "write_file", json!({"path": "a.txt", "content": "one\n"})),
        Turn::text("wrote a"),
    ]);
    t.run(&["prompt", "--name", "Writer", "write a"]).ok();
    let id = t.id_of("Writer");
    let served = serve(&t);
    // A step's record: its meta as `show --step N --json` prints it, the streamed
    // response, and its tool call's input and output.
    let (status, step) = served.get(&format!("/api/agents/{id}/steps/1"));
    assert_eq!(status, 200, "{step}");
    let cli: Value = serde_json::from_str(t.run(&["--json", "show", &id, "--step", "1"]).ok()).expect("json");
    assert_eq!(step["meta"], cli);
    // The tree says which model the agent's last call went to.
    let model = step["meta"]["model"].as_str().filter(|m| !m.is_empty()).expect("a model");
    assert_eq!(served.get("/api/agents").1["agents"][0]["model"], model);
    assert!(step["response"].as_array().is_some_and(|r| !r.is_empty()), "{step}");
    assert_eq!(step["tools"][0]["input"]["name"], "write_file", "{step}");
    assert!(step["tools"][0]["output"].is_object(), "{step}");
    // Its change: the file it wrote; the step after it changed nothing.
    let (status, change) = served.get(&format!("/api/agents/{id}/steps/1/diff"));
    assert_eq!(status, 200, "{change}");
    let diff = change["diff"].as_str().unwrap_or_default();
    assert!(diff.contains("a.txt") && diff.contains("+one") && !diff.contains(".offshoot"), "{change}");
    assert_eq!(served.get(&format!("/api/agents/{id}/steps/2/diff")).1["diff"], "");
    assert_eq!(served.get(&format!("/api/agents/{id}/steps/3")).0, 404);
    assert_eq!(served.get(&format!("/api/agents/{id}/compactions")).1["compactions"], json!([]));
    // A fork from before step 2, with another message: made and driven as `fork` does.
    for (body, status, says) in [
        (r#"{"message":" "}"#, 400, "`message` is empty"),
        (r#"{"message":"x","step":9}"#, 404, "no step `9`"),
        (r#"{"message":"x","step":"2"}"#, 400, "`step` must be a step number"),
        (r#"{"message":"x","step":-3}"#, 400, "not `-3`"),
    ] {
        let (got, answer) = served.post(&format!("/api/agents/{id}/forks"), body);
        assert_eq!(got, status, "{body}: {answer}");
        assert!(answer["error"].as_str().is_some_and(|e| e.contains(says)), "{body}: {answer}");
    }
    assert_eq!(t.agents().len(), 1, "no fork was made");
    server.push_turns([Turn::text("wrote it otherwise")]);
    let (status, made) = served.post(&format!("/api/agents/{id}/forks"), r#"{"message":"say it otherwise","step":2}"#);
    assert_eq!(status, 200, "{made}");
    let fork = made["agent"].as_str().expect("id").to_owned();
    wait_for("the fork answered", || t.agents().iter().any(|a| a["id"] == fork.as_str() && a["state"] == "done"));
    let listed = t.agents().into_iter().find(|a| a["id"] == fork.as_str()).expect("listed");
    assert_eq!(listed["origin"], id.as_str(), "{listed}");
    let (_, forks) = served.get(&format!("/api/agents/{id}/forks"));
    assert_eq!(forks["forks"][0]["id"], fork.as_str(), "{forks}");
    let log = t.run(&["log", &fork]).ok().to_owned();
    assert!(log.contains("say it otherwise") && log.contains("wrote it otherwise"), "{log}");
}

#[test]
fn several_workspaces_are_served_at_once_each_named_by_its_key() {
    let (server_a, a) = TestWorkspace::served("serve-many-a", Dialect::Anthropic);
    let (server_b, b) = TestWorkspace::served("serve-many-b", Dialect::Anthropic);
    server_a.push_turns([Turn::text("a done")]);
    server_b.push_turns([Turn::text("b done")]);
    a.run(&["prompt", "--name", "InA", "hello a"]).ok();
    b.run(&["prompt", "--name", "InB", "hello b"]).ok();
    // `-w` twice is for `serve` alone, before the verb or after it.
    for words in [["-w", &b.ws.display().to_string(), "ls"], ["ls", "-w", &b.ws.display().to_string()]] {
        let twice = a.run(&words);
        assert_eq!(twice.code, 2, "{words:?}: {}", twice.stderr);
        assert!(twice.stderr.contains("only `offshoot serve` takes several"), "{}", twice.stderr);
    }
    // B named after the verb, relative to where serve runs (the drivers it starts for
    // B's writes run elsewhere).
    let b_root = b.ws.parent().and_then(|r| r.file_name()).expect("B's root").to_string_lossy().into_owned();
    let relative = format!("../{b_root}/ws");
    let served = serve_with(a.command(), &["-w", &relative]);
    // Both directories are named `ws`: the second's key is made unique.
    let (status, listed) = served.get("/api/workspaces");
    assert_eq!(status, 200, "{listed}");
    let keys: Vec<&str> =
        listed["workspaces"].as_array().expect("list").iter().filter_map(|w| w["key"].as_str()).collect();
    assert_eq!(keys, ["ws", "ws-2"], "{listed}");
    assert_eq!(listed["workspaces"][1]["agents"], 1, "{listed}");
    assert_eq!(served.get("/api/agents").1["agents"][0]["name"], "InA");
    assert_eq!(served.get("/api/agents?ws=ws-2").1["agents"][0]["name"], "InB");
    let (status, body) = served.get("/api/agents?ws=nope");
    assert_eq!(status, 404, "{body}");
    assert!(
        body["error"].as_str().is_some_and(|e| e.contains("no workspace `nope`") && e.contains("ws, ws-2")),
        "{body}"
    );
    // B's events: on its own stream and on the one of all, each with its workspace; never
    // on A's.
    let mut of_a = stream_of(&served, "/events?ws=ws", None);
    let mut of_b = stream_of(&served, "/events?ws=ws-2", None);
    let mut of_all = stream(&served, None);
    server_b.push_turns([Turn::text("b again")]);
    let (status, sent) =
        served.post(&format!("/api/agents/{}/messages?ws=ws-2", b.id_of("InB")), r#"{"text":"again"}"#);
    assert_eq!(status, 200, "{sent}");
    for reader in [&mut of_b, &mut of_all] {
        let (_, data) = next_event(reader);
        let event: Value = serde_json::from_str(&data).expect("JSON");
        assert_eq!(
            (event["workspace"].as_str(), event["agent"].as_str()),
            (Some("ws-2"), Some(b.id_of("InB").as_str()))
        );
    }
    wait_for("B's answer", || b.run(&["log", "InB"]).stdout.contains("b again"));
    server_a.push_turns([Turn::text("a again")]);
    a.run(&["send", "InA", "again"]).ok();
    let (_, data) = next_event(&mut of_a);
    assert!(data.contains(r#""workspace":"ws""#), "{data}");
    assert_eq!(server_a.requests().len(), 2, "A's model was asked only for A");
    // On the page: a picker of both; the second picked, its tree.
    let url = format!("http://127.0.0.1:{}/?token={}", served.port, served.token);
    let seen = browse(
        &url,
        json!([
            [
                "wait",
                "!document.querySelector('#workspace').hidden && document.querySelector('#workspace').options.length === 2 && document.querySelectorAll('.agent').length === 1",
                20
            ],
            [
                "eval",
                "const p = document.querySelector('#workspace'); p.value = 'ws-2'; p.dispatchEvent(new Event('change')); true"
            ],
            [
                "wait",
                "(t => t.includes('InB') && t)([...document.querySelectorAll('.agent .who')].map(e => e.textContent).join())",
                10
            ]
        ]),
    );
    assert_eq!(seen[0]["value"], json!(true), "the picker: {seen:?}");
    let tree = seen[2]["value"].as_str().unwrap_or_default();
    assert!(tree.contains("InB") && !tree.contains("InA"), "the second workspace's tree: {seen:?}");
}

#[test]
fn all_serves_every_workspace_under_the_data_root_and_says_so_when_there_is_none() {
    let t = TestWorkspace::new("serve-all");
    let none = t.command_bare().args(["serve", "--all", "--listen", "127.0.0.1:0"]).output().expect("serve");
    let said = String::from_utf8_lossy(&none.stderr);
    assert_eq!(none.status.code(), Some(2), "{said}");
    assert!(said.contains("`--all`: there is no workspace under"), "{said}");
    let both = t.run(&["serve", "--all", "--listen", "127.0.0.1:0"]);
    assert_eq!(both.code, 2, "{}", both.stderr);
    assert!(both.stderr.contains("it takes no `-w`"), "{}", both.stderr);
    // The default workspace made under the data root (a `config set` makes it).
    let made = t.command_bare().args(["config", "set", "budgets.max_depth", "3"]).output().expect("config");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    // One a first use killed half-way left: passed over, not the end of all.
    std::fs::create_dir_all(t.home.join("workspaces/broken/repo.git")).expect("broken");
    let served = serve_with(t.command_bare(), &["--all"]);
    let (status, listed) = served.get("/api/workspaces");
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["workspaces"].as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed["workspaces"][0]["key"], "default", "{listed}");
}
