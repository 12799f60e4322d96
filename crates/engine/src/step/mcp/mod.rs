//! An agent's MCP servers, as its driver keeps them: which the role uses under the
//! config of the step, their tools as the agent's tree records them
//! (`.offshoot/mcp/<server>.json`, so requests stay the same from step to step), the
//! servers started (lazily: a server is started to list its tools when the tree has
//! no record of them, or at its first call) and the calls themselves. A stdio server
//! runs in the agent's sandbox with the tool environment, like `bash`; an HTTP server
//! is reached from the driver. A server that times out, crashes or cannot be reached
//! is an in-band error naming it, and is started again at the next call. Everything
//! started dies with the driver (see `infra::mcp`).

mod result;
mod settings;

pub use settings::{McpState, NewServer, Noted, add, last_starts, probe, remove};

use result::{MAX_IMAGE_BYTES, MAX_IMAGES, content_text, picture};
use settings::note_state;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;

use domain::config::McpServer;
use domain::mcp::{self, Listed, Offered, Record};
use infra::git::{CommitId, Repo};
use infra::mcp::{Client, HttpTarget, McpError, Program, Session};
use infra::redact::Redactor;
use infra::sandbox::Jail;
use infra::tools::{Stream, ToolError, ToolOutput};

use crate::Env;

/// How servers start for this agent: what its commands start with.
#[derive(Clone)]
pub struct Place {
    /// The tool environment (keys withheld).
    pub(crate) env: Vec<(String, String)>,
    pub(crate) sandbox: Option<Arc<Jail>>,
    /// The agent's directory: where a server runs unless its `cwd` says otherwise.
    pub(crate) root: PathBuf,
    /// Where the servers' stderr goes (see [`logs`]).
    pub(crate) logs: PathBuf,
    /// Where each server's last start is noted (`<workspace>/mcp/`, for `mcp list`).
    pub(crate) states: PathBuf,
    /// The agent, as the notes name it.
    pub(crate) agent: String,
    /// The variables the cli read: bearer tokens come from here.
    pub(crate) vars: Env,
    pub(crate) redactor: Option<Arc<Redactor>>,
}

/// What the tree's records should become: files to write and to remove, and what to
/// tell the user.
#[derive(Debug, Default)]
pub(crate) struct Refresh {
    pub(crate) write: Vec<(String, Vec<u8>)>,
    pub(crate) remove: Vec<String>,
    /// What changed, for the commit's message.
    pub(crate) said: Vec<String>,
    /// Servers that could not be started, in words.
    pub(crate) warnings: Vec<String>,
}

impl Refresh {
    pub fn changes(&self) -> bool {
        !self.write.is_empty() || !self.remove.is_empty()
    }
}

/// What a server listed when it started: the tools a provider takes, and the names of
/// those it does not.
#[derive(Debug, Default)]
struct Listing {
    tools: Vec<Listed>,
    refused: Vec<String>,
}

/// One driver's servers.
#[derive(Default)]
pub(crate) struct Servers {
    client: OnceLock<Result<Client, String>>,
    /// The servers the role uses, under the config last configured.
    chosen: BTreeMap<String, McpServer>,
    place: Option<Place>,
    /// The tools the tip's records offer, by the name the model calls them.
    offered: BTreeMap<String, (String, Offered)>,
    live: Mutex<BTreeMap<String, Arc<Session>>>,
    /// Lists servers gave when started by this driver, not yet compared with the tree.
    fresh: Mutex<BTreeMap<String, Listing>>,
    /// Held while a server starts, so calls that run together start it once; and the
    /// last start that failed, by server, so those waiting for it hear of it.
    starting: Mutex<()>,
    start_failed: Mutex<BTreeMap<String, (std::time::Instant, String)>>,
    /// Whether the request's tool limit was said this run.
    said_cap: bool,
    /// The tip's `.offshoot/mcp` and `.offshoot/tools` trees when the records last
    /// agreed with the servers: a step whose tip has the same, under the same config
    /// and with no new listing, has nothing to compare (no record read again).
    settled: Option<(Option<infra::git::ObjectId>, Option<infra::git::ObjectId>)>,
    /// Servers that could not be started to list their tools during this run: not
    /// tried again before each step (a broken server would cost its timeout each time).
    failed: BTreeSet<String>,
}

impl Servers {
    /// Whether nothing of MCP concerns this driver: no server chosen, none recorded.
    pub(crate) fn idle(&self) -> bool {
        self.chosen.is_empty() && self.offered.is_empty()
    }

    /// Takes the role's servers under a config (those whose settings changed are
    /// stopped, to start again as they now say).
    pub(crate) fn configure(&mut self, chosen: BTreeMap<String, McpServer>, place: Place) {
        let changed: Vec<String> = self
            .chosen
            .iter()
            .filter(|(name, server)| chosen.get(*name) != Some(*server))
            .map(|(name, _)| name.clone())
            .collect();
        if let Ok(mut live) = self.live.lock() {
            for name in &changed {
                live.remove(name);
            }
        }
        if let Ok(mut fresh) = self.fresh.lock() {
            for name in &changed {
                fresh.remove(name);
            }
        }
        self.failed.retain(|name| !changed.contains(name));
        self.chosen = chosen;
        self.place = Some(place);
        self.settled = None;
    }

    /// Compares the tip's records with the servers chosen: a server with no record is
    /// started to list its tools; a list a server gave since the last record replaces
    /// it when it differs; the record of a server no longer chosen goes. `go_on` says
    /// whether to keep waiting for a server (false once the user interrupts).
    pub(crate) fn refresh(
        &mut self,
        repo: &Repo,
        tip: CommitId,
        go_on: &dyn Fn() -> bool,
    ) -> Result<Refresh, infra::git::GitError> {
        let trees = (repo.entry_id(tip, mcp::DIR)?, repo.entry_id(tip, domain::agent::TOOLS)?);
        let listed_since = self.fresh.lock().map(|f| !f.is_empty()).unwrap_or(true);
        if self.settled == Some(trees) && !listed_since {
            return Ok(Refresh::default());
        }
        let refreshed = self.refresh_records(repo, tip, go_on)?;
        // Settled when nothing is to be written: the next step's tip has the same trees.
        self.settled = (!refreshed.changes()).then_some(trees);
        Ok(refreshed)
    }

    fn refresh_records(
        &mut self,
        repo: &Repo,
        tip: CommitId,
        go_on: &dyn Fn() -> bool,
    ) -> Result<Refresh, infra::git::GitError> {
        let mut refresh = Refresh::default();
        let mut recorded: BTreeMap<String, Record> = BTreeMap::new();
        for entry in repo.list_dir(tip, mcp::DIR)? {
            let Some(server) = entry.name.strip_suffix(".json") else { continue };
            let bytes = repo.read_blob(entry.oid)?;
            match Record::parse(&bytes) {
                Ok(record) => {
                    recorded.insert(server.to_owned(), record);
                }
                // A record that does not parse is replaced (or removed below).
                Err(_) => {
                    refresh.remove.push(mcp::record_path(server));
                    refresh.said.push(format!("the unreadable record of `{server}` removed"));
                }
            }
        }
        for server in recorded.keys() {
            if !self.chosen.contains_key(server) {
                refresh.remove.push(mcp::record_path(server));
                refresh.said.push(format!("MCP server `{server}` no longer used"));
            }
        }
        let chosen: Vec<(String, McpServer)> = self.chosen.iter().map(|(n, s)| (n.clone(), s.clone())).collect();
        for (name, server) in chosen {
            let (enabled, disabled) = (server.enabled_tools.as_deref(), server.disabled_tools.as_slice());
            let current = recorded.get(&name);
            let fresh = self.fresh.lock().ok().and_then(|mut f| f.remove(&name));
            // Without a new list, a record made under other settings (or empty, or only
            // narrowed) is made again: from a new list, or — the server not starting —
            // from itself, narrowed by the lists of now, and still to be listed again.
            let mut narrowed = fresh.is_none();
            let listing = match fresh {
                Some(listing) => listing,
                None if current.is_some_and(|r| r.listed_under(&server.fingerprint())) => continue,
                None if self.failed.contains(&name) => match current {
                    Some(record) => Listing { tools: record.as_listed(), refused: Vec::new() },
                    None => continue,
                },
                None => match self.start(&name, &server, go_on) {
                    Ok(_) => {
                        narrowed = false;
                        self.fresh.lock().ok().and_then(|mut f| f.remove(&name)).unwrap_or_default()
                    }
                    Err(e) => {
                        self.failed.insert(name.clone());
                        let log = match (&server.command, &self.place) {
                            (Some(_), Some(place)) => {
                                format!(" (its stderr: {})", place.logs.join(format!("{name}.log")).display())
                            }
                            _ => String::new(),
                        };
                        let e = self.redact(&e);
                        refresh.warnings.push(format!("MCP server `{name}` {e}; its tools are not offered{log}"));
                        match current {
                            Some(record) => Listing { tools: record.as_listed(), refused: Vec::new() },
                            None => continue,
                        }
                    }
                },
            };
            if !listing.refused.is_empty() {
                refresh.warnings.push(format!(
                    "MCP server `{name}` lists tools no provider takes (no name, or an input schema that is not an object's), left out: {}",
                    listing.refused.join(", ")
                ));
            }
            let listed = listing.tools;
            let wanted =
                listed.iter().filter(|t| enabled.is_none_or(|e| e.contains(&t.name)) && !disabled.contains(&t.name));
            let wanted = wanted.count();
            if wanted > mcp::MAX_TOOLS {
                refresh.warnings.push(format!(
                    "MCP server `{name}` offers {wanted} tools; its first {} are offered (`enabled_tools` chooses)",
                    mcp::MAX_TOOLS
                ));
            }
            let mut record = Record::of(&name, &listed, &server);
            if narrowed {
                record.settings = None;
            }
            if recorded.get(&name) != Some(&record) {
                refresh.said.push(format!("MCP server `{name}` offers {} tools", record.tools.len()));
                refresh.write.push((mcp::record_path(&name), record.to_bytes()));
                recorded.insert(name, record);
            }
        }
        refresh.remove.sort();
        refresh.remove.dedup();
        recorded.retain(|server, _| self.chosen.contains_key(server));
        // What the request will offer (context assembly takes the same ones).
        let builtins = repo.list_dir(tip, domain::agent::TOOLS)?.len();
        let all: usize = recorded.values().map(|r| r.tools.len()).sum();
        let offered = mcp::within_request(builtins, recorded.values());
        if offered.len() < all && !std::mem::replace(&mut self.said_cap, true) {
            refresh.warnings.push(format!(
                "the MCP servers offer {all} tools; with the {builtins} built-in ones a request holds at most {}: the first {} are offered (`enabled_tools` chooses)",
                mcp::MAX_TOOLS,
                offered.len()
            ));
        }
        self.offered = offered
            .into_iter()
            .map(|t| (t.name.clone(), (mcp::server_of(&t.name).unwrap_or_default().to_owned(), t.clone())))
            .collect();
        Ok(refresh)
    }

    /// The tool the model calls `name`, if one of the servers offers it.
    pub(crate) fn offers(&self, name: &str) -> Option<&Offered> {
        self.offered.get(name).map(|(_, t)| t)
    }

    /// The names the model calls the offered tools by.
    pub(crate) fn offered_names(&self) -> impl Iterator<Item = &str> {
        self.offered.keys().map(String::as_str)
    }

    /// Whether a call of `name` only reads (the server says so).
    pub(crate) fn read_only(&self, name: &str) -> bool {
        self.offers(name).is_some_and(|t| t.read_only)
    }

    /// Whether a call of `name` may change the agent's directory: a stdio server runs
    /// in it, unless the tool says it only reads.
    pub(crate) fn writes(&self, name: &str) -> bool {
        self.offered
            .get(name)
            .is_some_and(|(server, t)| !t.read_only && self.chosen.get(server).is_some_and(|s| s.url.is_none()))
    }

    /// The processes of the servers running now (the driver's children to keep).
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.live.lock().map(|l| l.values().filter_map(|s| s.pid()).collect()).unwrap_or_default()
    }

    /// Calls tool `name` with `input`, starting its server if it is not running. The
    /// whole result as the server sent it comes back beside the output, for the record.
    pub fn call(
        &self,
        name: &str,
        input: &Value,
        go_on: &dyn Fn() -> bool,
    ) -> Result<(ToolOutput, Option<Value>), ToolError> {
        // What a failure says may quote a secret (a server echoing its token).
        self.call_unredacted(name, input, go_on).map_err(|e| match e {
            ToolError::ToModel(text) => ToolError::ToModel(self.redact(&text)),
            ToolError::Fatal(text) => ToolError::Fatal(self.redact(&text)),
        })
    }

    fn call_unredacted(
        &self,
        name: &str,
        input: &Value,
        go_on: &dyn Fn() -> bool,
    ) -> Result<(ToolOutput, Option<Value>), ToolError> {
        let Some((server, tool)) = self.offered.get(name) else {
            return Err(ToolError::ToModel(format!("tool `{name}` is not available to you; nothing ran")));
        };
        let Some(config) = self.chosen.get(server) else {
            return Err(ToolError::ToModel(format!("MCP server `{server}` is no longer configured; nothing ran")));
        };
        if !(input.is_object() || input.is_null()) {
            return Err(ToolError::ToModel(format!("the arguments of `{name}` must be a JSON object; nothing ran")));
        }
        let session = self.session(server, config, go_on).map_err(|e| {
            ToolError::ToModel(format!("MCP server `{server}` {e}; nothing ran. It is started again at the next call"))
        })?;
        let client = self.client().map_err(ToolError::ToModel)?;
        let limit = Duration::from_secs(config.tool_timeout_secs);
        match client.call(&session, &tool.tool, input, limit, go_on) {
            Ok(result) => Ok((self.output(server, &result), Some(result))),
            Err(e) => {
                let again = if e.ends_session() {
                    self.forget(server, &session);
                    ". It is started again at the next call"
                } else {
                    ""
                };
                Err(ToolError::ToModel(format!("MCP server `{server}` {}{again}", error_words(&e))))
            }
        }
    }

    /// A call's result as the model reads it: the text of each piece of content (an
    /// embedded text resource with its address), other content named by its kind and
    /// size, structured content as JSON when there is nothing else; `isError` makes it
    /// an error.
    fn output(&self, server: &str, result: &Value) -> ToolOutput {
        let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
        let mut parts: Vec<String> = Vec::new();
        let mut images = Vec::new();
        let mut image_bytes = 0;
        for item in result.get("content").and_then(Value::as_array).into_iter().flatten() {
            parts.push(content_text(item));
            // Images go to the model as images, up to what one request should carry.
            if let Some(picture) =
                picture(item).filter(|p| images.len() < MAX_IMAGES && image_bytes + p.data.len() <= MAX_IMAGE_BYTES)
            {
                image_bytes += picture.data.len();
                images.push(picture);
            }
        }
        if parts.is_empty()
            && let Some(structured) = result.get("structuredContent")
        {
            parts.push(serde_json::to_string_pretty(structured).unwrap_or_default());
        }
        let text = self.redact(&parts.join("\n"));
        let summary = match is_error {
            true => format!("MCP server `{server}` says the call failed"),
            false => format!("MCP server `{server}` answered"),
        };
        ToolOutput { summary, streams: vec![Stream::whole("result", text)], is_error, images, ..ToolOutput::default() }
    }

    /// `text` with the secret values the tool environment hides hidden.
    fn redact(&self, text: &str) -> String {
        match self.place.as_ref().and_then(|p| p.redactor.as_ref()) {
            Some(redactor) => redactor.redact(text),
            None => text.to_owned(),
        }
    }

    /// `value` with the secret values the tool environment hides hidden (for records).
    pub(crate) fn redacted(&self, value: &Value) -> Value {
        let Some(redactor) = self.place.as_ref().and_then(|p| p.redactor.as_ref()) else { return value.clone() };
        let text = redactor.redact(&value.to_string());
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }

    fn client(&self) -> Result<&Client, String> {
        self.client
            .get_or_init(|| Client::new().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| format!("MCP is unavailable: {e}"))
    }

    /// The running session of `server`, started (and its tools listed) if there is none.
    fn session(&self, server: &str, config: &McpServer, go_on: &dyn Fn() -> bool) -> Result<Arc<Session>, String> {
        let running = || self.live.lock().ok().and_then(|l| l.get(server).cloned());
        if let Some(session) = running() {
            return Ok(session);
        }
        // One start at a time: calls that run together wait for the one that starts it,
        // and share its failure rather than each trying (and timing out) again.
        let asked = std::time::Instant::now();
        let _one = self.starting.lock();
        if let Some(session) = running() {
            return Ok(session);
        }
        let failed = self.start_failed.lock().ok().and_then(|f| f.get(server).cloned());
        if let Some((_, error)) = failed.filter(|(at, _)| *at >= asked) {
            return Err(error);
        }
        let started = self.start(server, config, go_on);
        if let (Err(error), Ok(mut failed)) = (&started, self.start_failed.lock()) {
            failed.insert(server.to_owned(), (std::time::Instant::now(), error.clone()));
        }
        started
    }

    /// Starts `server`, lists its tools (kept in `fresh` until the next refresh) and
    /// keeps the session.
    fn start(&self, server: &str, config: &McpServer, go_on: &dyn Fn() -> bool) -> Result<Arc<Session>, String> {
        let started = self.start_listing(server, config, go_on);
        if let Some(place) = &self.place {
            let state = match &started {
                Ok((_, listing)) => {
                    let offered = Record::of(server, &listing.tools, config);
                    McpState { ok: true, tools: offered.tools.len(), error: None }
                }
                Err(e) => McpState { ok: false, tools: 0, error: Some(e.clone()) },
            };
            note_state(place, server, &state);
        }
        let (session, listing) = started?;
        let session = Arc::new(session);
        if let Ok(mut fresh) = self.fresh.lock() {
            fresh.insert(server.to_owned(), listing);
        }
        if let Ok(mut live) = self.live.lock() {
            live.insert(server.to_owned(), session.clone());
        }
        Ok(session)
    }

    fn start_listing(
        &self,
        server: &str,
        config: &McpServer,
        go_on: &dyn Fn() -> bool,
    ) -> Result<(Session, Listing), String> {
        let client = self.client()?;
        let place = self.place.as_ref().ok_or("is not set up")?;
        let startup = Duration::from_secs(config.startup_timeout_secs);
        let session = match (&config.command, &config.url) {
            (Some(command), _) => {
                let _ = std::fs::create_dir_all(&place.logs);
                let mut env = place.env.clone();
                for (k, v) in &config.env {
                    env.retain(|(name, _)| name != k);
                    env.push((k.clone(), v.clone()));
                }
                let cwd = match &config.cwd {
                    Some(dir) => place.root.join(dir),
                    None => place.root.clone(),
                };
                let program = Program {
                    program: PathBuf::from(command),
                    args: config.args.iter().map(Into::into).collect(),
                    cwd,
                    env,
                    sandbox: place.sandbox.clone(),
                    log: place.logs.join(format!("{server}.log")),
                };
                client.stdio(program, startup, go_on)
            }
            (None, Some(url)) => {
                let bearer = match &config.bearer_token_env_var {
                    Some(var) => Some(
                        place
                            .vars
                            .get(var)
                            .ok_or_else(|| format!("needs a token in `{var}`, which is not set"))?
                            .to_owned(),
                    ),
                    None => None,
                };
                let headers = config.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                client.http(HttpTarget { url: url.clone(), headers, bearer }, startup, go_on)
            }
            (None, None) => return Err("has neither `command` nor `url`".into()),
        }
        .map_err(|e| error_words(&e))?;
        let tools = client
            .list_tools(&session, startup, go_on)
            .map_err(|e| format!("could not list its tools: {}", error_words(&e)))?;
        // What a server lists goes into the agent's tree and every request: a secret it
        // quotes (its token in a description) is hidden first.
        let tools: Vec<Value> = tools.iter().map(|t| self.redacted(t)).collect();
        let (tools, refused) = mcp::listed_from_wire(&tools);
        Ok((session, Listing { tools, refused }))
    }

    /// Drops `session` of `server` if it is still the one kept (its process is killed).
    fn forget(&self, server: &str, session: &Arc<Session>) {
        let gone = self.live.lock().ok().and_then(|mut live| match live.get(server) {
            Some(kept) if Arc::ptr_eq(kept, session) => live.remove(server),
            _ => None,
        });
        drop(gone);
    }

    /// Stops every server.
    pub(crate) fn stop(&mut self) {
        if let Ok(mut live) = self.live.lock() {
            live.clear();
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        // Sessions first: the client's thread must outlive them.
        self.stop();
    }
}

/// An MCP failure in the words that follow a server's name.
fn error_words(e: &McpError) -> String {
    match e {
        McpError::Failed(text) => format!("answered with an error: {text}"),
        other => other.to_string(),
    }
}
