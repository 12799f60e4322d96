//! A scripted model server on loopback for end-to-end tests and benchmarks. It
//! speaks the three wire dialects the way the real APIs stream them (SSE over
//! chunked HTTP/1.1, keep-alive), checks each request the way the real APIs would,
//! records every request, and injects faults on demand.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// One model turn, in dialect-neutral terms.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    pub thinking: Option<(String, String)>,
    pub text: Option<String>,
    /// (id, name, raw argument text — may be deliberately malformed)
    pub calls: Vec<(String, String, String)>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    /// A refusal: Chat Completions streams it in `delta.refusal`, Anthropic as a text
    /// block with the stop reason `refusal` (Responses leaves it out).
    pub refusal: Option<String>,
    /// Responses: the message's `phase`.
    pub phase: Option<String>,
    /// Anthropic: a first block of a type offshoot does not know, (type, text), its
    /// text streamed as `<type>_delta` `content` pieces.
    pub unknown_block: Option<(String, String)>,
}

impl Turn {
    pub fn text(text: &str) -> Turn {
        Turn { text: Some(text.into()), input_tokens: 100, output_tokens: 10, ..Default::default() }
    }

    pub fn bash(id: &str, command: &str) -> Turn {
        let args = json!({"command": command}).to_string();
        Turn {
            calls: vec![(id.into(), "bash".into(), args)],
            input_tokens: 100,
            output_tokens: 20,
            ..Default::default()
        }
    }

    /// A call of `name` with `input` as its arguments.
    pub fn tool(id: &str, name: &str, input: Value) -> Turn {
        Turn::call(id, name, &input.to_string())
    }

    pub fn call(id: &str, name: &str, args: &str) -> Turn {
        Turn {
            calls: vec![(id.into(), name.into(), args.into())],
            input_tokens: 100,
            output_tokens: 20,
            ..Default::default()
        }
    }
}

/// What the server does with the next request.
#[derive(Debug, Clone)]
pub enum Reply {
    Turn(Turn),
    /// An HTTP error status with an optional `retry-after` and a body.
    Status {
        code: u16,
        retry_after: Option<String>,
        body: String,
    },
    /// Streams the first half of the turn's events, then resets the connection.
    ResetMidStream(Turn),
    /// Streams the first event, then goes silent for this long.
    Stall(Turn, Duration),
    /// The turn, cut off by the output limit.
    Truncated(Turn),
    /// The turn, each event sent this long after the one before (a model writing slowly).
    Paced(Turn, Duration),
    /// This body, byte for byte, as a `200` event stream (sent in small chunks, so the
    /// client's parser meets events split across reads).
    Raw(Vec<u8>),
}

#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    pub raw: Vec<u8>,
    /// When it was received.
    pub at: std::time::Instant,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    /// Scripts for one agent each, by its name (found in the request's system prompt
    /// as "Your name is NAME."), used before the shared script.
    scripts: Vec<(String, VecDeque<Reply>)>,
    requests: Vec<Recorded>,
    /// Replies for when the script is empty (benchmarks): a `bash echo` turn forever.
    endless_echo: bool,
    /// Replies for when the script is empty (stress tests): this text forever.
    endless_text: Option<String>,
    /// Replies for when the script is empty (benchmarks): a `bash echo` turn while the
    /// request holds fewer than this many model outputs, then a final text.
    endless_steps: Option<usize>,
    /// Replies for when the script is empty: a function of the request's text (so a
    /// request asked again after a crash gets the same answer).
    responder: Option<Responder>,
    /// How long each reply waits before it starts (a model's time to first token).
    latency: Duration,
    served: u64,
}

pub type Responder = std::sync::Arc<dyn Fn(&str) -> Turn + Send + Sync>;

pub struct Server {
    pub port: u16,
    state: Arc<Mutex<State>>,
    /// Keep request bodies (tests) or only count them (benchmarks).
    record: bool,
}

impl Server {
    pub fn start() -> Server {
        Self::start_with(true)
    }

    pub fn start_with(record: bool) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let state = shared.clone();
                std::thread::spawn(move || serve(stream, state, record));
            }
        });
        Server { port, state, record }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn push(&self, reply: Reply) {
        self.state.lock().expect("state").script.push_back(reply);
    }

    /// Turns for the agent named `name` only (several agents at once take their
    /// turns from their own scripts, whatever order their requests come in).
    pub fn push_for(&self, name: &str, turns: impl IntoIterator<Item = Turn>) {
        self.push_matching(&format!("Your name is {name}."), turns);
    }

    /// Turns for requests holding `key` anywhere (e.g. the goal a compactor is given),
    /// checked after the per-name scripts that were pushed before it.
    pub fn push_matching(&self, key: &str, turns: impl IntoIterator<Item = Turn>) {
        self.push_replies_matching(key, turns.into_iter().map(Reply::Turn));
    }

    /// Replies (any kind) for requests holding `key`, as [`Server::push_matching`].
    pub fn push_replies_matching(&self, key: &str, replies: impl IntoIterator<Item = Reply>) {
        let mut s = self.state.lock().expect("state");
        let replies = replies.into_iter();
        match s.scripts.iter_mut().find(|(k, _)| k == key) {
            Some((_, script)) => script.extend(replies),
            None => s.scripts.push((key.to_owned(), replies.collect())),
        }
    }

    /// The requests holding `key` anywhere.
    pub fn requests_matching(&self, key: &str) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| String::from_utf8_lossy(&r.raw).contains(key)).collect()
    }

    /// The requests made by the agent named `name`.
    pub fn requests_for(&self, name: &str) -> Vec<Recorded> {
        self.requests_matching(&format!("Your name is {name}."))
    }

    pub fn push_turns(&self, turns: impl IntoIterator<Item = Turn>) {
        for t in turns {
            self.push(Reply::Turn(t));
        }
    }

    pub fn endless_echo(&self) {
        self.state.lock().expect("state").endless_echo = true;
    }

    /// Once the script is empty, every agent takes `steps` `bash echo` turns, then
    /// answers.
    pub fn endless_steps(&self, steps: usize) {
        self.state.lock().expect("state").endless_steps = Some(steps);
    }

    /// Makes every reply wait `latency` before it starts (each connection on its own).
    pub fn latency(&self, latency: Duration) {
        self.state.lock().expect("state").latency = latency;
    }

    /// Answers every request with `f` of its text once the script is empty.
    pub fn respond_with(&self, f: impl Fn(&str) -> Turn + Send + Sync + 'static) {
        self.state.lock().expect("state").responder = Some(std::sync::Arc::new(f));
    }

    /// Answers `text` to every request once the script is empty.
    pub fn endless_text(&self, text: &str) {
        self.state.lock().expect("state").endless_text = Some(text.to_owned());
    }

    /// The text of the last tool result in request `n` (Anthropic's dialect): what
    /// the model was told of the call before it.
    pub fn result_text(&self, n: usize) -> String {
        let body = &self.requests()[n].body;
        let last = body["messages"].as_array().expect("messages").last().expect("last").clone();
        last["content"][0]["content"].as_str().unwrap_or_default().to_owned()
    }

    /// The tool result text the `n`th request of agent `name` carries last.
    pub fn result_text_for(&self, name: &str, n: usize) -> String {
        let body = &self.requests_for(name)[n].body;
        let last = body["messages"].as_array().expect("messages").last().expect("last").clone();
        last["content"][0]["content"].as_str().unwrap_or_default().to_owned()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().expect("state").requests.clone()
    }

    pub fn served(&self) -> u64 {
        self.state.lock().expect("state").served
    }

    pub fn remaining(&self) -> usize {
        self.state.lock().expect("state").script.len()
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Dialect {
    Anthropic,
    Chat,
    Responses,
}

fn serve(stream: TcpStream, state: Arc<Mutex<State>>, record: bool) {
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream;
    loop {
        let Some((path, headers, raw)) = read_request(&mut reader) else {
            return;
        };
        let received = std::time::Instant::now();
        let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        let dialect = if path.ends_with("/v1/messages") {
            Dialect::Anthropic
        } else if path.ends_with("/chat/completions") {
            Dialect::Chat
        } else if path.ends_with("/responses") {
            Dialect::Responses
        } else {
            let _ = respond_status(
                &mut writer,
                404,
                None,
                &json!({"error": {"message": format!("no route {path}")}}).to_string(),
            );
            continue;
        };
        let reply = {
            let mut s = state.lock().expect("state");
            s.served += 1;
            // (Borrowed, and the body moved into the record below, not copied: at a
            // thousand steps a request is hundreds of kilobytes, and this server's own
            // copies were counted in every step a bench measured.)
            let text = String::from_utf8_lossy(&raw);
            let own =
                s.scripts.iter_mut().find(|(key, _)| text.contains(key.as_str())).and_then(|(_, q)| q.pop_front());
            match own.or_else(|| s.script.pop_front()) {
                Some(r) => r,
                None if s.responder.is_some() => {
                    Reply::Turn(s.responder.as_ref().map(|f| f(&text)).unwrap_or_default())
                }
                None if s.endless_echo => {
                    let n = s.served;
                    Reply::Turn(Turn::bash(&format!("call_{n}"), "echo step"))
                }
                None if s.endless_text.is_some() => Reply::Turn(Turn::text(s.endless_text.as_deref().unwrap_or(""))),
                None if s.endless_steps.is_some() => {
                    let outputs = text.matches("\"role\":\"assistant\"").count();
                    if outputs < s.endless_steps.unwrap_or(0) {
                        Reply::Turn(Turn::bash(&format!("call_{outputs}"), "echo step"))
                    } else {
                        Reply::Turn(Turn::text("done"))
                    }
                }
                None => Reply::Status {
                    code: 400,
                    retry_after: None,
                    body: error_body(dialect, "invalid_request_error", "the scripted server has no reply left"),
                },
            }
        };
        let checked = check_request(dialect, &body);
        let latency = {
            let mut s = state.lock().expect("state");
            if record {
                s.requests.push(Recorded { path, headers, body, raw, at: received });
            }
            s.latency
        };
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
        if let Err(problem) = checked {
            let _ = respond_status(&mut writer, 400, None, &error_body(dialect, "invalid_request_error", &problem));
            continue;
        }
        let ok = match reply {
            Reply::Status { code, retry_after, body } => {
                respond_status(&mut writer, code, retry_after.as_deref(), &body)
            }
            Reply::Turn(turn) => respond_stream(&mut writer, &events(dialect, &turn, false), None),
            Reply::Truncated(turn) => respond_stream(&mut writer, &events(dialect, &turn, true), None),
            Reply::ResetMidStream(turn) => {
                let all = events(dialect, &turn, false);
                let _ = respond_stream(&mut writer, &all[..all.len() / 2], Some(Duration::ZERO));
                let _ = writer.shutdown(Shutdown::Both);
                return;
            }
            Reply::Raw(body) => respond_raw(&mut writer, &body),
            Reply::Paced(turn, pause) => {
                let all = events(dialect, &turn, false);
                respond_paced(&mut writer, &all, pause)
            }
            Reply::Stall(turn, wait) => {
                let all = events(dialect, &turn, false);
                let _ = respond_stream(&mut writer, &all[..1], Some(wait));
                let _ = writer.shutdown(Shutdown::Both);
                return;
            }
        };
        if ok.is_err() {
            return;
        }
    }
}

/// A request's path, lower-cased headers and body.
type RawRequest = (String, Vec<(String, String)>, Vec<u8>);

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<RawRequest> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let path = line.split_whitespace().nth(1)?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_lowercase(), v.trim().to_owned()));
        }
    }
    let get = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let mut body = Vec::new();
    if let Some(len) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(len, 0);
        reader.read_exact(&mut body).ok()?;
    } else if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim(), 16).ok()?;
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    Some((path, headers, body))
}

fn respond_status(w: &mut TcpStream, code: u16, retry_after: Option<&str>, body: &str) -> std::io::Result<()> {
    let mut head =
        format!("HTTP/1.1 {code} Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\n", body.len());
    if let Some(ra) = retry_after {
        head.push_str(&format!("retry-after: {ra}\r\n"));
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())?;
    w.write_all(body.as_bytes())?;
    w.flush()
}

/// Writes an SSE response in chunks; with `cut`, stops after the given events
/// (sleeping `cut` first) without the closing chunk.
fn respond_raw(w: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    w.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")?;
    for chunk in body.chunks(97) {
        w.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())?;
        w.write_all(chunk)?;
        w.write_all(b"\r\n")?;
    }
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

const STREAM_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";

/// One SSE event as one chunk of a chunked body.
fn chunk(event: &str, data: &str) -> String {
    let frame =
        if event.is_empty() { format!("data: {data}\n\n") } else { format!("event: {event}\ndata: {data}\n\n") };
    format!("{:x}\r\n{frame}\r\n", frame.len())
}

fn respond_stream(w: &mut TcpStream, events: &[(String, String)], cut: Option<Duration>) -> std::io::Result<()> {
    w.write_all(STREAM_HEAD)?;
    for (event, data) in events {
        w.write_all(chunk(event, data).as_bytes())?;
    }
    w.flush()?;
    if let Some(wait) = cut {
        std::thread::sleep(wait);
        return Ok(());
    }
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

/// [`respond_stream`] with `pause` before every event but the first.
fn respond_paced(w: &mut TcpStream, events: &[(String, String)], pause: Duration) -> std::io::Result<()> {
    w.write_all(STREAM_HEAD)?;
    for (at, (event, data)) in events.iter().enumerate() {
        if at > 0 {
            std::thread::sleep(pause);
        }
        w.write_all(chunk(event, data).as_bytes())?;
        w.flush()?;
    }
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

pub fn error_body(dialect_path: impl Into<DialectName>, kind: &str, message: &str) -> String {
    match dialect_path.into().0 {
        Dialect::Anthropic => json!({"type": "error", "error": {"type": kind, "message": message}}).to_string(),
        _ => json!({"error": {"type": kind, "message": message, "code": null}}).to_string(),
    }
}

pub struct DialectName(Dialect);
impl From<Dialect> for DialectName {
    fn from(d: Dialect) -> Self {
        DialectName(d)
    }
}
impl From<&str> for DialectName {
    fn from(d: &str) -> Self {
        DialectName(match d {
            "anthropic" => Dialect::Anthropic,
            "responses" => Dialect::Responses,
            _ => Dialect::Chat,
        })
    }
}

/// Splits text into small pieces, as real streams do.
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(7).map(|c| c.iter().collect()).collect()
}

fn events(dialect: Dialect, t: &Turn, truncated: bool) -> Vec<(String, String)> {
    match dialect {
        Dialect::Anthropic => anthropic_events(t, truncated),
        Dialect::Chat => chat_events(t, truncated),
        Dialect::Responses => responses_events(t, truncated),
    }
}

fn anthropic_events(t: &Turn, truncated: bool) -> Vec<(String, String)> {
    let mut ev = Vec::new();
    let mut push = |name: &str, v: Value| ev.push((name.to_owned(), v.to_string()));
    push(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_01", "type": "message", "role": "assistant",
        "model": "scripted", "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": t.input_tokens, "cache_creation_input_tokens": t.cache_write,
                  "cache_read_input_tokens": t.cache_read, "output_tokens": 1}}}),
    );
    let mut index = 0;
    if let Some((kind, text)) = &t.unknown_block {
        push(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": kind, "content": null}}),
        );
        for p in pieces(text) {
            push(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": format!("{kind}_delta"), "content": p}}),
            );
        }
        push("content_block_stop", json!({"type": "content_block_stop", "index": index}));
        index += 1;
    }
    if let Some((thinking, signature)) = &t.thinking {
        push(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        );
        for p in pieces(thinking) {
            push(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": p}}),
            );
        }
        push(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": signature}}),
        );
        push("content_block_stop", json!({"type": "content_block_stop", "index": index}));
        index += 1;
    }
    if let Some(text) = &t.text {
        push(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        );
        push("ping", json!({"type": "ping"}));
        for p in pieces(text) {
            push(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}}),
            );
        }
        push("content_block_stop", json!({"type": "content_block_stop", "index": index}));
        index += 1;
    }
    if let Some(refusal) = &t.refusal {
        push(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        );
        push(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": refusal}}),
        );
        push("content_block_stop", json!({"type": "content_block_stop", "index": index}));
        index += 1;
    }
    for (id, name, args) in &t.calls {
        push(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        );
        for p in pieces(args) {
            push(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": p}}),
            );
        }
        push("content_block_stop", json!({"type": "content_block_stop", "index": index}));
        index += 1;
    }
    let stop = if truncated {
        "max_tokens"
    } else if t.refusal.is_some() {
        "refusal"
    } else if t.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    push(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": t.output_tokens}}),
    );
    push("message_stop", json!({"type": "message_stop"}));
    ev
}

fn chat_events(t: &Turn, truncated: bool) -> Vec<(String, String)> {
    let chunk = |delta: Value, finish: Value| {
        (
            "".to_owned(),
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "scripted",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            .to_string(),
        )
    };
    let mut ev = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    if let Some((thinking, _)) = &t.thinking {
        for p in pieces(thinking) {
            ev.push(chunk(json!({"reasoning_content": p}), Value::Null));
        }
    }
    if let Some(text) = &t.text {
        for p in pieces(text) {
            ev.push(chunk(json!({"content": p}), Value::Null));
        }
    }
    if let Some(refusal) = &t.refusal {
        ev.push(chunk(json!({"content": null, "refusal": ""}), Value::Null));
        for p in pieces(refusal) {
            ev.push(chunk(json!({"refusal": p}), Value::Null));
        }
    }
    for (i, (id, name, args)) in t.calls.iter().enumerate() {
        ev.push(chunk(json!({"tool_calls": [{"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}), Value::Null));
        for p in pieces(args) {
            ev.push(chunk(json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}), Value::Null));
        }
    }
    let finish = if truncated {
        "length"
    } else if t.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    ev.push(chunk(json!({}), json!(finish)));
    ev.push(("".into(), json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "scripted", "choices": [],
        "usage": {"prompt_tokens": t.input_tokens, "completion_tokens": t.output_tokens, "total_tokens": t.input_tokens + t.output_tokens,
                  "prompt_tokens_details": {"cached_tokens": t.cache_read}}}).to_string()));
    ev.push(("".into(), "[DONE]".into()));
    ev
}

fn responses_events(t: &Turn, truncated: bool) -> Vec<(String, String)> {
    let mut ev = Vec::new();
    let mut seq = 0;
    let mut push = |name: &str, mut v: Value| {
        v["type"] = json!(name);
        v["sequence_number"] = json!(seq);
        seq += 1;
        ev.push((name.to_owned(), v.to_string()));
    };
    push(
        "response.created",
        json!({"response": {"id": "resp_1", "object": "response", "status": "in_progress", "model": "scripted", "output": []}}),
    );
    let mut output = Vec::new();
    if let Some((thinking, signature)) = &t.thinking {
        let i = output.len();
        let item = json!({"id": format!("rs_{i}"), "type": "reasoning", "summary": [{"type": "summary_text", "text": thinking}], "encrypted_content": signature});
        push(
            "response.output_item.added",
            json!({"output_index": i, "item": {"id": format!("rs_{i}"), "type": "reasoning", "summary": []}}),
        );
        push("response.output_item.done", json!({"output_index": i, "item": item}));
        output.push(item);
    }
    if let Some(text) = &t.text {
        let i = output.len();
        let id = format!("msg_{i}");
        push(
            "response.output_item.added",
            json!({"output_index": i, "item": {"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
        );
        for p in pieces(text) {
            push(
                "response.output_text.delta",
                json!({"item_id": id, "output_index": i, "content_index": 0, "delta": p}),
            );
        }
        push("response.output_text.done", json!({"item_id": id, "output_index": i, "content_index": 0, "text": text}));
        let mut item = json!({"id": id, "type": "message", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]});
        if let Some(phase) = &t.phase {
            item["phase"] = json!(phase);
        }
        push("response.output_item.done", json!({"output_index": i, "item": item}));
        output.push(item);
    }
    for (call_id, name, args) in &t.calls {
        let i = output.len();
        let id = format!("fc_{i}");
        push(
            "response.output_item.added",
            json!({"output_index": i, "item": {"id": id, "type": "function_call", "status": "in_progress", "call_id": call_id, "name": name, "arguments": ""}}),
        );
        for p in pieces(args) {
            push("response.function_call_arguments.delta", json!({"item_id": id, "output_index": i, "delta": p}));
        }
        push("response.function_call_arguments.done", json!({"item_id": id, "output_index": i, "arguments": args}));
        let item = json!({"id": id, "type": "function_call", "status": "completed", "call_id": call_id, "name": name, "arguments": args});
        push("response.output_item.done", json!({"output_index": i, "item": item}));
        output.push(item);
    }
    let usage = json!({"input_tokens": t.input_tokens, "input_tokens_details": {"cached_tokens": t.cache_read},
        "output_tokens": t.output_tokens, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": t.input_tokens + t.output_tokens});
    if truncated {
        push(
            "response.incomplete",
            json!({"response": {"id": "resp_1", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": output, "usage": usage}}),
        );
    } else {
        push(
            "response.completed",
            json!({"response": {"id": "resp_1", "status": "completed", "model": "scripted", "incomplete_details": null, "output": output, "usage": usage}}),
        );
    }
    ev
}

/// The checks the real APIs make that a harness most often fails.
fn check_request(dialect: Dialect, body: &Value) -> Result<(), String> {
    if body.is_null() {
        return Err("the body is not JSON".into());
    }
    if body["stream"] != json!(true) {
        return Err("`stream` must be true".into());
    }
    if body["model"].as_str().is_none_or(str::is_empty) {
        return Err("`model` is required".into());
    }
    let declared: Vec<String> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().or(t["function"]["name"].as_str()).map(str::to_owned))
        .collect();
    let check_declared = |name: &str| {
        if declared.iter().any(|d| d == name) {
            Ok(())
        } else {
            Err(format!("tool `{name}` is used in the history but not declared in `tools`"))
        }
    };
    match dialect {
        Dialect::Anthropic => {
            if body["max_tokens"].as_u64().is_none() {
                return Err("`max_tokens` is required".into());
            }
            let messages = body["messages"].as_array().ok_or("`messages` must be an array")?;
            if messages.first().is_none_or(|m| m["role"] != "user") {
                return Err("the first message must be `user`".into());
            }
            for (i, m) in messages.iter().enumerate() {
                let content = m["content"].as_array().ok_or(format!("messages.{i}.content must be an array"))?;
                if content.is_empty() {
                    return Err(format!("messages.{i}: content must not be empty"));
                }
                if m["role"] == "assistant" {
                    let uses: Vec<&str> =
                        content.iter().filter(|b| b["type"] == "tool_use").filter_map(|b| b["id"].as_str()).collect();
                    for b in content.iter().filter(|b| b["type"] == "tool_use") {
                        check_declared(b["name"].as_str().unwrap_or(""))?;
                        if !b["input"].is_object() {
                            return Err(format!("messages.{i}: tool_use.input must be an object"));
                        }
                    }
                    if !uses.is_empty() {
                        let next = messages.get(i + 1).ok_or(format!(
                            "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after"
                        ))?;
                        let results: Vec<&str> = next["content"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter(|b| b["type"] == "tool_result")
                            .filter_map(|b| b["tool_use_id"].as_str())
                            .collect();
                        if uses.iter().any(|u| !results.contains(u)) {
                            return Err(format!(
                                "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately after",
                                i
                            ));
                        }
                    }
                }
                if i > 0 && messages[i - 1]["role"] == m["role"] {
                    return Err(format!("messages.{i}: roles must alternate"));
                }
            }
        }
        Dialect::Chat => {
            let messages = body["messages"].as_array().ok_or("`messages` must be an array")?;
            let mut open: Vec<String> = Vec::new();
            for (i, m) in messages.iter().enumerate() {
                let role = m["role"].as_str().unwrap_or("");
                if role != "tool" && !open.is_empty() {
                    return Err(format!(
                        "messages.{i}: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'"
                    ));
                }
                match role {
                    "assistant" => {
                        let no_calls = m["tool_calls"].as_array().is_none_or(|c| c.is_empty());
                        if m["content"].is_null() && no_calls {
                            return Err(format!(
                                "messages.{i}: an assistant message must have `content` unless it has `tool_calls`"
                            ));
                        }
                        for c in m["tool_calls"].as_array().into_iter().flatten() {
                            check_declared(c["function"]["name"].as_str().unwrap_or(""))?;
                            if !c["function"]["arguments"].is_string() {
                                return Err(format!("messages.{i}: tool_calls arguments must be a string"));
                            }
                            open.push(c["id"].as_str().unwrap_or("").to_owned());
                        }
                    }
                    "tool" => {
                        let id = m["tool_call_id"].as_str().unwrap_or("");
                        let Some(pos) = open.iter().position(|o| o == id) else {
                            return Err(format!("messages.{i}: tool message for unknown tool_call_id `{id}`"));
                        };
                        open.remove(pos);
                    }
                    "system" | "user" => {}
                    other => return Err(format!("messages.{i}: unknown role `{other}`")),
                }
            }
            if !open.is_empty() {
                return Err("an assistant message with 'tool_calls' must be followed by tool messages".into());
            }
        }
        Dialect::Responses => {
            let input = body["input"].as_array().ok_or("`input` must be an array")?;
            let mut calls = Vec::new();
            let mut outputs = Vec::new();
            for item in input {
                match item["type"].as_str() {
                    Some("function_call") => {
                        check_declared(item["name"].as_str().unwrap_or(""))?;
                        calls.push(item["call_id"].as_str().unwrap_or("").to_owned());
                    }
                    Some("function_call_output") => outputs.push(item["call_id"].as_str().unwrap_or("").to_owned()),
                    Some("reasoning") if item["encrypted_content"].as_str().is_none() => {
                        return Err("reasoning items must carry their encrypted_content when store is false".into());
                    }
                    _ => {}
                }
            }
            if let Some(missing) = calls.iter().find(|c| !outputs.contains(c)) {
                return Err(format!("No tool output found for function call {missing}."));
            }
        }
    }
    Ok(())
}
