//! The routes of `offshoot serve` (docs/serve.md): what the CLI's `ls --json`, `log
//! --json`, `show --step N --request` and `pending --json` print, as JSON; the event
//! stream; and the writes, each doing what its verb does. Every body that leaves is
//! passed through the redactor.

use std::io::Write;

use serde_json::{Map, Value, json};

use domain::id::AgentId;
use domain::question::OnAsk;
use domain::question::Scope;
use engine::agents::lifecycle;
use engine::agents::runtime::Chosen;
use engine::ops::prompt::Prompt;
use engine::ops::{approvals, inspect};
use engine::store::workspace::Workspace;

use super::feed::Next;
use super::http::{Request, Response};
use super::{Server, Site, page};

pub(super) fn route(server: &Server, request: &Request) -> Response {
    let segments: Vec<&str> = request.segments.iter().map(String::as_str).collect();
    let response = match (request.method.as_str(), segments.as_slice()) {
        ("GET", []) => page::index(&server.token),
        ("GET", [asset]) => page::asset(asset).unwrap_or_else(|| Response::error(404, format!("no page `/{asset}`"))),
        ("GET", ["api", "workspaces"]) => respond(workspaces(server)),
        ("GET", ["api", "agents"]) => with_ws(server, request, agents_of),
        ("GET", ["api", "agents", id, "transcript"]) => with_agent(server, request, id, transcript),
        ("GET", ["api", "agents", id, "steps", step]) => {
            with_agent(server, request, id, |ws, id| step_whole(ws, id, step))
        }
        ("GET", ["api", "agents", id, "steps", step, "request"]) => {
            with_agent(server, request, id, |ws, id| step_request(ws, id, step))
        }
        ("GET", ["api", "agents", id, "steps", step, "diff"]) => {
            with_agent(server, request, id, |ws, id| step_diff(ws, id, step))
        }
        ("GET", ["api", "agents", id, "diff"]) => with_agent(server, request, id, diff),
        ("GET", ["api", "agents", id, "compactions"]) => with_agent(server, request, id, compactions),
        ("GET", ["api", "agents", id, "forks"]) => {
            with_ws(server, request, |site, ws| forks(site, ws, &known(ws, id)?))
        }
        ("GET", ["api", "questions"]) => {
            with_ws(server, request, |_, ws| Ok(json!({"questions": approvals::pending(ws)})))
        }
        ("POST", ["api", "agents"]) => write(server, request, prompt),
        ("POST", ["api", "agents", id, "messages"]) => write(server, request, |s, ws, body| message(s, ws, id, body)),
        ("POST", ["api", "agents", id, "stop"]) => write(server, request, |s, ws, _| stop(s, ws, id)),
        ("POST", ["api", "agents", id, "forks"]) => write(server, request, |s, ws, body| fork(s, ws, id, body)),
        ("POST", ["api", "questions", q, verdict @ ("approve" | "deny")]) => {
            write(server, request, |_, ws, body| answer(ws, q, *verdict == "approve", body))
        }
        (method @ ("GET" | "POST"), _) => Response::error(404, format!("no route `{method} /{}`", segments.join("/"))),
        (method, _) => Response::error(405, format!("`{method}` is not taken here (GET and POST are)")),
    };
    redacted(server, response)
}

/// The response with every secret value the redactor knows hidden (a page or an answer
/// never carries a key, even one an agent printed).
fn redacted(server: &Server, mut response: Response) -> Response {
    if response.content_type == "application/json" {
        response.body = server.redact.redact(&String::from_utf8_lossy(&response.body)).into_bytes();
    }
    response
}

/// An error of the engine, as a status and its words.
pub(super) struct Failed(pub(super) u16, pub(super) String);

impl<E: std::fmt::Display> From<E> for Failed {
    fn from(e: E) -> Failed {
        Failed(500, e.to_string())
    }
}

fn respond(result: Result<Value, Failed>) -> Response {
    match result {
        Ok(value) => Response::json(200, &value),
        Err(Failed(status, why)) => Response::error(status, why),
    }
}

/// The workspace a request names (`?ws=KEY`; none: the first served); a 404 naming
/// those there are.
pub(super) fn site_of<'s>(server: &'s Server, request: &Request) -> Result<&'s Site, Failed> {
    let Some(key) = request.param("ws") else {
        return server.sites.first().ok_or_else(|| Failed(500, "no workspace is served".into()));
    };
    server.sites.iter().find(|s| s.key == key).ok_or_else(|| {
        let keys: Vec<&str> = server.sites.iter().map(|s| s.key.as_str()).collect();
        Failed(404, format!("no workspace `{key}` is served here (`ws` is one of: {})", keys.join(", ")))
    })
}

/// The workspace a request names, opened.
fn open<'s>(server: &'s Server, request: &Request) -> Result<(&'s Site, Workspace), Failed> {
    let site = site_of(server, request)?;
    Ok((site, Workspace::open(&site.root)?))
}

fn with_ws(server: &Server, request: &Request, f: impl FnOnce(&Site, &Workspace) -> Result<Value, Failed>) -> Response {
    respond(open(server, request).and_then(|(site, ws)| f(site, &ws)))
}

fn with_agent(
    server: &Server,
    request: &Request,
    id: &str,
    f: impl FnOnce(&Workspace, &AgentId) -> Result<Value, Failed>,
) -> Response {
    with_ws(server, request, |_, ws| f(ws, &known(ws, id)?))
}

/// `GET /api/workspaces`: each workspace served, first the one a request that names
/// none means: its key, where it is, and how many agents it has, are at work, and wait
/// on you.
fn workspaces(server: &Server) -> Result<Value, Failed> {
    let mut list = Vec::new();
    for site in &server.sites {
        let ws = Workspace::open(&site.root)?;
        let all = agents_of(site, &ws)?;
        let agents = all["agents"].as_array().map_or(&[][..], Vec::as_slice);
        list.push(json!({
            "key": site.key,
            "path": site.root,
            "agents": agents.len(),
            "running": agents.iter().filter(|a| a["state"] == "running").count(),
            "questions": all["questions"].as_array().map_or(0, Vec::len),
        }));
    }
    Ok(json!({"workspaces": list}))
}

/// The agent of `id` (an id, not a name: URLs name agents by id), if it exists.
pub(super) fn known(ws: &Workspace, id: &str) -> Result<AgentId, Failed> {
    let unknown = || Failed(404, format!("no agent `{id}` in this workspace"));
    let agent = AgentId::parse(id).map_err(|_| unknown())?;
    match ws.repo.branch_tip(&agent.branch()) {
        Ok(Some(_)) => Ok(agent),
        _ => Err(unknown()),
    }
}

/// Every agent as `ls --json` has it, and the questions waiting (which agents they
/// hold: the ones that need you). Each agent's state is kept between requests and read
/// again when what it is made of changed (`inspect::states_kept`).
fn agents_of(site: &Site, ws: &Workspace) -> Result<Value, Failed> {
    let mut kept = site.states.lock().map_err(|_| Failed(500, "the kept states are poisoned".into()))?;
    let mut states = inspect::states_kept(ws, &mut kept)?;
    drop(kept);
    states.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
    Ok(json!({"agents": states, "questions": approvals::pending(ws)}))
}

/// An agent's transcript, entries as `log --json` prints them, and its step count.
fn transcript(ws: &Workspace, id: &AgentId) -> Result<Value, Failed> {
    let (_, entries) = inspect::transcript(ws, id)?;
    let entries: Vec<Value> = entries.iter().map(crate::cli::out::entry_json).collect();
    Ok(json!({"agent": id.as_str(), "steps": inspect::step_count(ws, id), "entries": entries}))
}

/// The agent's change against where it started in the project, as `diff --json` has it
/// (`{"agent", "diff"}`); a 409 for an agent that did not start from a project.
fn diff(ws: &Workspace, id: &AgentId) -> Result<Value, Failed> {
    match engine::ops::project::diff(ws, id, false) {
        Ok(text) => Ok(json!({"agent": id.as_str(), "diff": text})),
        Err(e @ (engine::ops::project::ProjectError::NoBase(_) | engine::ops::project::ProjectError::NotProject)) => {
            Err(Failed(409, e.to_string()))
        }
        Err(e) => Err(e.into()),
    }
}

/// The number of a step of `id`'s that is on record; a 404 naming what it has.
fn step_number(ws: &Workspace, id: &AgentId, step: &str) -> Result<u32, Failed> {
    let count = inspect::step_count(ws, id);
    let number = step.parse::<u32>().ok().filter(|n| (1..=count).contains(n));
    number.ok_or_else(|| Failed(404, format!("agent `{id}` has no step `{step}` (its steps are 1 to {count})")))
}

/// Step `step`'s record: its meta and what the gate decided (as `show --step N --json`
/// prints them), what the response stream said, and each tool call's record.
fn step_whole(ws: &Workspace, id: &AgentId, step: &str) -> Result<Value, Failed> {
    let number = step_number(ws, id, step)?;
    let mut meta = serde_json::to_value(inspect::step_meta(ws, id, number)?)?;
    let policy = inspect::decisions(ws, id, number)?;
    if !policy.is_empty() {
        meta["policy"] = serde_json::to_value(&policy)?;
    }
    let files = inspect::step_files(ws, id, number)?;
    Ok(json!({"agent": id.as_str(), "step": number, "meta": meta, "response": files.response, "tools": files.tools}))
}

/// What step `step` changed in the agent's files (`{"agent", "step", "diff"}`).
fn step_diff(ws: &Workspace, id: &AgentId, step: &str) -> Result<Value, Failed> {
    let number = step_number(ws, id, step)?;
    let diff = inspect::step_diff(ws, id, number).map_err(|e| match e {
        // (A record that does not say where its step began: nothing to diff, as a fork
        // from it has nowhere to start.)
        e @ inspect::InspectError::BadRecord { .. } => Failed(409, e.to_string()),
        e => e.into(),
    })?;
    Ok(json!({"agent": id.as_str(), "step": number, "diff": diff}))
}

/// The agent's landed compactions, oldest first, each as `show --compaction N --json`.
fn compactions(ws: &Workspace, id: &AgentId) -> Result<Value, Failed> {
    let landed = engine::step::compaction::landed(ws, id)?;
    let list: Vec<Value> = landed.iter().map(crate::cli::out::compaction_json).collect();
    Ok(json!({"agent": id.as_str(), "compactions": list}))
}

/// The agents forked from `id`'s commits, as `/api/agents` has them.
fn forks(site: &Site, ws: &Workspace, id: &AgentId) -> Result<Value, Failed> {
    let all = agents_of(site, ws)?;
    let forks: Vec<&Value> =
        all["agents"].as_array().into_iter().flatten().filter(|a| a["origin"] == id.as_str()).collect();
    Ok(json!({"agent": id.as_str(), "forks": forks}))
}

/// Step `step`'s request body as the provider received it (`show --step N --request`).
fn step_request(ws: &Workspace, id: &AgentId, step: &str) -> Result<Value, Failed> {
    let number = step_number(ws, id, step)?;
    let resent = inspect::resend(ws, id, number)?;
    let bytes = resent.body.unwrap_or_else(|| engine::step::driver::request_json(&resent.request));
    serde_json::from_slice(&bytes).map_err(Failed::from)
}

/// A body's JSON object; a 400 naming what is wrong with it.
pub(super) fn body_of(request: &Request) -> Result<serde_json::Map<String, Value>, Failed> {
    if request.body.is_empty() {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice(&request.body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Failed(400, "the body is not a JSON object".into())),
        Err(e) => Err(Failed(400, format!("the body is not JSON: {e}"))),
    }
}

/// A write: its body read, the workspace opened, `f` run; 200 with what it returns.
fn write(
    server: &Server,
    request: &Request,
    f: impl FnOnce(&Server, &Workspace, serde_json::Map<String, Value>) -> Result<Value, Failed>,
) -> Response {
    respond(body_of(request).and_then(|body| {
        let (_, ws) = open(server, request)?;
        f(server, &ws, body)
    }))
}

/// `approve` (`scope`: `once`, `tree`, `always`) or `deny` (`reason`) question `q`.
fn answer(ws: &Workspace, q: &str, yes: bool, body: serde_json::Map<String, Value>) -> Result<Value, Failed> {
    let scope = match body.get("scope").and_then(Value::as_str).unwrap_or("once") {
        "once" => Scope::Once,
        "tree" if yes => Scope::ForTree,
        "always" if yes => Scope::Always,
        other => return Err(Failed(400, format!("`{other}` is not a scope (`once`, `tree` or `always`, for a yes)"))),
    };
    let reason = body.get("reason").and_then(Value::as_str).map(str::to_owned);
    match approvals::answer(ws, q, yes, scope, reason) {
        Ok(entry) => Ok(json!({"answered": entry})),
        Err(e @ approvals::ApprovalError::Queue(engine::store::queue::QueueError::Unknown(_))) => {
            Err(Failed(404, e.to_string()))
        }
        Err(e) => Err(Failed(409, e.to_string())),
    }
}

/// `GET /events` (`?ws=KEY` for one workspace's, `?agent=ID` for one agent's and those
/// below it, in `ws` or the first served): Server-Sent Events, each an events-file line
/// (`--json`'s shapes, with the `workspace`) with an id to resume from
/// (`Last-Event-ID`). A client that comes back after what is kept gets a `reset`.
pub(super) fn events(server: &Server, request: &Request, out: &mut impl Write) {
    let below = request.param("agent").map(str::to_owned);
    let named = (request.param("ws").is_some() || below.is_some()).then(|| site_of(server, request));
    let site = match named {
        None => None,
        Some(Err(Failed(status, why))) => {
            let _ = super::http::write_response(out, &Response::error(status, why));
            return;
        }
        Some(Ok(site)) => Some(server.sites.iter().position(|s| std::ptr::eq(s, site)).unwrap_or(0)),
    };
    if let (Some(agent), Ok((_, ws))) = (&below, open(server, request))
        && let Err(Failed(status, why)) = known(&ws, agent)
    {
        let _ = super::http::write_response(out, &Response::error(status, why));
        return;
    }
    let resume = request.header("last-event-id").or(request.param("last_event_id"));
    // (An id of another run of the server, or not one: the client reads the state again.)
    let (mut from, reset) = match resume.map(|last| server.feed.after(last)) {
        Some(Some(next)) => (next, false),
        Some(None) => (server.feed.now(), true),
        None => (server.feed.now(), false),
    };
    if super::http::write_stream_head(out).is_err() {
        return;
    }
    if reset && write!(out, "event: reset\ndata: {{}}\n\n").and_then(|()| out.flush()).is_err() {
        return;
    }
    let ours = |event: &super::feed::Event| {
        site.is_none_or(|s| event.site == s)
            && below.as_deref().is_none_or(|b| event.agent == b || event.agent.starts_with(&format!("{b}.")))
    };
    loop {
        let sent = match server.feed.from(from, super::feed::KEEPALIVE) {
            Next::Gap => {
                from = server.feed.now();
                write!(out, "event: reset\ndata: {{}}\n\n")
            }
            Next::Quiet => write!(out, ": still here\n\n"),
            Next::Events(events) => {
                let mut text = String::new();
                for event in events {
                    from = event.seq + 1;
                    if ours(&event) {
                        text.push_str(&format!("id: {}-{}\ndata: {}\n\n", server.feed.epoch, event.seq, event.line));
                    }
                }
                out.write_all(text.as_bytes())
            }
        };
        if sent.and_then(|()| out.flush()).is_err() {
            return;
        }
    }
}

// The writes, each what its verb does: `prompt --detach` (a new agent, its driver
// launched), `send --detach` (a message left and the agent woken), `stop` (it and those
// below it).

/// The text of `field`, which must be there and not blank.
fn text<'a>(body: &'a Map<String, Value>, field: &str) -> Result<&'a str, Failed> {
    match body.get(field) {
        Some(Value::String(t)) if !t.trim().is_empty() => Ok(t),
        Some(Value::String(_)) => Err(Failed(400, format!("`{field}` is empty"))),
        Some(_) => Err(Failed(400, format!("`{field}` must be a string"))),
        None => Err(Failed(400, format!("the body has no `{field}`"))),
    }
}

fn optional<'a>(body: &'a Map<String, Value>, field: &str) -> Result<Option<&'a str>, Failed> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(t)) => Ok(Some(t)),
        Some(_) => Err(Failed(400, format!("`{field}` must be a string"))),
    }
}

/// `POST /api/agents` `{"goal", "name"?, "role"?}`: a new root agent, driven at once.
/// Its questions wait for an answer (here, or `offshoot approve`).
pub(super) fn prompt(server: &Server, ws: &Workspace, body: Map<String, Value>) -> Result<Value, Failed> {
    let goal = text(&body, "goal")?;
    let ctx = server.ctx.lock().map_err(|_| Failed(500, "the server's context is poisoned".into()))?;
    let git_config = ctx.git_config_files();
    let asked = Prompt {
        message: goal,
        name: optional(&body, "name")?,
        role: optional(&body, "role")?.unwrap_or("worker"),
        lineage: "default",
        base: None,
        with_changes: false,
        git_config: &git_config,
        copy_ignored: &[],
        model: None,
        reasoning: None,
        mode: None,
        on_ask: Some(OnAsk::Wait),
        on: None,
        env: &ctx.env,
    };
    let started = engine::ops::prompt::start(ws, &asked).map_err(|e| Failed(400, e.to_string()))?;
    ctx.runtime(ws).launch(&started.id).map_err(|e| Failed(500, e.to_string()))?;
    Ok(json!({"agent": started.id.as_str()}))
}

/// `POST /api/agents/ID/messages` `{"text"}`: left in its inbox as the user's, and the
/// agent woken.
pub(super) fn message(server: &Server, ws: &Workspace, id: &str, body: Map<String, Value>) -> Result<Value, Failed> {
    let id = known(ws, id)?;
    let message = text(&body, "text")?;
    if engine::fleet::remote::handed(ws, &id) {
        return Err(Failed(409, format!("agent `{id}` is driven by the workers of a remote, not here")));
    }
    let ctx = server.ctx.lock().map_err(|_| Failed(500, "the server's context is poisoned".into()))?;
    let rt = ctx.runtime(ws);
    rt.deposit_choosing(&id, "user", message, &Chosen::default())?;
    rt.wake(&id)?;
    Ok(json!({"agent": id.as_str(), "sent": true}))
}

/// `POST /api/agents/ID/stop`: it and those below it, as `offshoot stop` does (a 500
/// naming the drivers that did not stop in time, as `stop` fails then).
pub(super) fn stop(server: &Server, ws: &Workspace, id: &str) -> Result<Value, Failed> {
    let id = known(ws, id)?;
    if engine::fleet::remote::handed(ws, &id) {
        return Err(Failed(409, format!("agent `{id}` is driven by the workers of a remote, not here")));
    }
    let rt = server.ctx.lock().map_err(|_| Failed(500, "the server's context is poisoned".into()))?.runtime(ws);
    let outcomes = lifecycle::stop_tree(ws, &rt, &id, std::time::Duration::from_secs(10))?;
    let stuck: Vec<String> = outcomes
        .iter()
        .filter_map(|(agent, outcome)| match outcome {
            engine::agents::runtime::Stopped::Signalled(pid) => Some(format!("`{agent}` (pid {pid})")),
            _ => None,
        })
        .collect();
    if !stuck.is_empty() {
        return Err(Failed(500, format!("signalled but still running after 10 s: {}", stuck.join(", "))));
    }
    Ok(json!({"agent": id.as_str(), "stopped": outcomes.len()}))
}

/// `POST /api/agents/ID/forks` `{"message", "step"?, "name"?}`: a new agent continuing
/// `id` (from before step `step`, or from its tip) with `message`, driven at once, as
/// `offshoot fork --detach` does.
pub(super) fn fork(server: &Server, ws: &Workspace, id: &str, body: Map<String, Value>) -> Result<Value, Failed> {
    let id = known(ws, id)?;
    let message = text(&body, "message")?;
    let from = match body.get("step") {
        None | Some(Value::Null) => engine::agents::revision(ws, id.as_str())?,
        Some(Value::Number(n)) => {
            let Some(step) = n.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0) else {
                return Err(Failed(400, format!("`step` must be a step number (1 or more), not `{n}`")));
            };
            let number = step_number(ws, &id, &step.to_string())?;
            let meta = inspect::step_meta(ws, &id, number)?;
            if meta.commit.is_empty() {
                return Err(Failed(409, format!("step {number} of `{id}` does not record where it began")));
            }
            meta.commit
        }
        Some(_) => return Err(Failed(400, "`step` must be a step number (1 or more)".into())),
    };
    let ctx = server.ctx.lock().map_err(|_| Failed(500, "the server's context is poisoned".into()))?;
    let start = engine::agents::Start {
        message,
        name: optional(&body, "name")?,
        now: infra::time::Timestamp::now(),
        random: engine::random_u32(),
        env: &ctx.env,
        project: None,
        model: None,
        reasoning: None,
        copy_ignored: &[],
        mode: None,
        on_ask: Some(OnAsk::Wait),
    };
    let made = engine::agents::fork(ws, &from, &start).map_err(|e| Failed(400, e.to_string()))?;
    ctx.runtime(ws).launch(&made).map_err(|e| Failed(500, e.to_string()))?;
    Ok(json!({"agent": made.as_str(), "from": from}))
}
