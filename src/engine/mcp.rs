//! An agent's MCP servers, as its driver keeps them: which the role uses under the
//! config of the step, their tools as the agent's tree records them
//! (`.offshoot/mcp/<server>.json`, so requests stay the same from step to step), the
//! servers started (lazily: a server is started to list its tools when the tree has
//! no record of them, or at its first call) and the calls themselves. A stdio server
//! runs in the agent's sandbox with the tool environment, like `bash`; an HTTP server
//! is reached from the driver. A server that times out, crashes or cannot be reached
//! is an in-band error naming it, and is started again at the next call. Everything
//! started dies with the driver (see `infra::mcp`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;

use crate::domain::config::McpServer;
use crate::domain::mcp::{self, Listed, Offered, Record};
use crate::infra::git::{CommitId, Repo};
use crate::infra::mcp::{Client, HttpTarget, McpError, Program, Session};
use crate::infra::provider::Picture;
use crate::infra::redact::Redactor;
use crate::infra::sandbox::Jail;
use crate::infra::tools::{Stream, ToolError, ToolOutput};

use super::Env;
use super::workspace::{self, KeysSet, Workspace, WorkspaceError};
use crate::domain::config::Config;
use crate::domain::tool_env::{self, Identity, Placement};

/// How servers start for this agent: what its commands start with.
#[derive(Clone)]
pub struct Place {
    /// The tool environment (keys withheld).
    pub env: Vec<(String, String)>,
    pub sandbox: Option<Arc<Jail>>,
    /// The agent's directory: where a server runs unless its `cwd` says otherwise.
    pub root: PathBuf,
    /// Where the servers' stderr goes (`steps/<id>/mcp/`, the harness's).
    pub logs: PathBuf,
    /// Where each server's last start is noted (`<workspace>/mcp/`, for `mcp list`).
    pub states: PathBuf,
    /// The agent, as the notes name it.
    pub agent: String,
    /// The variables the cli read: bearer tokens come from here.
    pub vars: Env,
    pub redactor: Option<Arc<Redactor>>,
}

/// What the tree's records should become: files to write and to remove, and what to
/// tell the user.
#[derive(Debug, Default)]
pub struct Refresh {
    pub write: Vec<(String, Vec<u8>)>,
    pub remove: Vec<String>,
    /// What changed, for the commit's message.
    pub said: Vec<String>,
    /// Servers that could not be started, in words.
    pub warnings: Vec<String>,
}

impl Refresh {
    pub fn changes(&self) -> bool {
        !self.write.is_empty() || !self.remove.is_empty()
    }
}

/// One driver's servers.
#[derive(Default)]
pub struct Servers {
    client: OnceLock<Result<Client, String>>,
    /// The servers the role uses, under the config last configured.
    chosen: BTreeMap<String, McpServer>,
    place: Option<Place>,
    /// The tools the tip's records offer, by the name the model calls them.
    offered: BTreeMap<String, (String, Offered)>,
    live: Mutex<BTreeMap<String, Arc<Session>>>,
    /// Lists servers gave when started by this driver, not yet compared with the tree.
    fresh: Mutex<BTreeMap<String, Vec<Listed>>>,
    /// Servers that could not be started to list their tools during this run: not
    /// tried again before each step (a broken server would cost its timeout each time).
    failed: BTreeSet<String>,
}

impl Servers {
    /// Whether nothing of MCP concerns this driver: no server chosen, none recorded.
    pub fn idle(&self) -> bool {
        self.chosen.is_empty() && self.offered.is_empty()
    }

    /// Takes the role's servers under a config (those whose settings changed are
    /// stopped, to start again as they now say).
    pub fn configure(&mut self, chosen: BTreeMap<String, McpServer>, place: Place) {
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
    }

    /// Compares the tip's records with the servers chosen: a server with no record is
    /// started to list its tools; a list a server gave since the last record replaces
    /// it when it differs; the record of a server no longer chosen goes. `go_on` says
    /// whether to keep waiting for a server (false once the user interrupts).
    pub fn refresh(&mut self, repo: &Repo, tip: CommitId, go_on: &dyn Fn() -> bool) -> Result<Refresh, String> {
        let mut refresh = Refresh::default();
        let mut recorded: BTreeMap<String, Record> = BTreeMap::new();
        for entry in repo.list_dir(tip, mcp::DIR).map_err(|e| e.to_string())? {
            let Some(server) = entry.name.strip_suffix(".json") else { continue };
            let bytes = repo.read_blob(entry.oid).map_err(|e| e.to_string())?;
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
            let fresh = self.fresh.lock().ok().and_then(|mut f| f.remove(&name));
            let listed = match fresh {
                Some(listed) => listed,
                None if recorded.contains_key(&name) || self.failed.contains(&name) => continue,
                None => match self.start(&name, &server, go_on) {
                    Ok(_) => match self.fresh.lock().ok().and_then(|mut f| f.remove(&name)) {
                        Some(listed) => listed,
                        None => continue,
                    },
                    Err(e) => {
                        self.failed.insert(name.clone());
                        refresh.warnings.push(format!(
                            "MCP server `{name}` {e}; its tools are not offered (its stderr: {})",
                            self.place
                                .as_ref()
                                .map(|p| p.logs.join(format!("{name}.log")).display().to_string())
                                .unwrap_or_default()
                        ));
                        continue;
                    }
                },
            };
            let record = Record::of(&name, &listed, server.enabled_tools.as_deref(), &server.disabled_tools);
            if recorded.get(&name) != Some(&record) {
                refresh.said.push(format!("MCP server `{name}` offers {} tools", record.tools.len()));
                refresh.write.push((mcp::record_path(&name), record.to_bytes()));
                recorded.insert(name, record);
            }
        }
        refresh.remove.sort();
        refresh.remove.dedup();
        recorded.retain(|server, _| self.chosen.contains_key(server));
        self.offered = recorded
            .into_iter()
            .flat_map(|(server, record)| record.tools.into_iter().map(move |t| (t.name.clone(), (server.clone(), t))))
            .collect();
        Ok(refresh)
    }

    /// The tool the model calls `name`, if one of the servers offers it.
    pub fn offers(&self, name: &str) -> Option<&Offered> {
        self.offered.get(name).map(|(_, t)| t)
    }

    /// Whether a call of `name` only reads (the server says so).
    pub fn read_only(&self, name: &str) -> bool {
        self.offers(name).is_some_and(|t| t.read_only)
    }

    /// Whether a call of `name` may change the agent's directory: a stdio server runs
    /// in it, unless the tool says it only reads.
    pub fn writes(&self, name: &str) -> bool {
        self.offered
            .get(name)
            .is_some_and(|(server, t)| !t.read_only && self.chosen.get(server).is_some_and(|s| s.url.is_none()))
    }

    /// The processes of the servers running now (the driver's children to keep).
    pub fn pids(&self) -> Vec<u32> {
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
        let Some((server, tool)) = self.offered.get(name) else {
            return Err(ToolError::ToModel(format!("tool `{name}` is not available to you; nothing ran")));
        };
        let Some(config) = self.chosen.get(server) else {
            return Err(ToolError::ToModel(format!("MCP server `{server}` is no longer configured; nothing ran")));
        };
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
            if let Some(picture) = picture(item).filter(|p| image_bytes + p.data.len() <= MAX_IMAGE_BYTES) {
                image_bytes += picture.data.len();
                images.push(picture);
            }
        }
        if parts.is_empty()
            && let Some(structured) = result.get("structuredContent")
        {
            parts.push(serde_json::to_string_pretty(structured).unwrap_or_default());
        }
        let mut text = parts.join("\n");
        if let Some(redactor) = self.place.as_ref().and_then(|p| p.redactor.as_ref()) {
            text = redactor.redact(&text);
        }
        let summary = match is_error {
            true => format!("MCP server `{server}` says the call failed"),
            false => format!("MCP server `{server}` answered"),
        };
        ToolOutput { summary, streams: vec![Stream::whole("result", text)], is_error, images, ..ToolOutput::default() }
    }

    /// `value` with the secret values the tool environment hides hidden (for records).
    pub fn redacted(&self, value: &Value) -> Value {
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
        if let Some(session) = self.live.lock().ok().and_then(|l| l.get(server).cloned()) {
            return Ok(session);
        }
        self.start(server, config, go_on)
    }

    /// Starts `server`, lists its tools (kept in `fresh` until the next refresh) and
    /// keeps the session.
    fn start(&self, server: &str, config: &McpServer, go_on: &dyn Fn() -> bool) -> Result<Arc<Session>, String> {
        let started = self.start_listing(server, config, go_on);
        if let Some(place) = &self.place {
            let state = match &started {
                Ok((_, tools)) => McpState { ok: true, tools: tools.len(), error: None },
                Err(e) => McpState { ok: false, tools: 0, error: Some(e.clone()) },
            };
            note_state(place, server, &state);
        }
        let (session, tools) = started?;
        let session = Arc::new(session);
        if let Ok(mut fresh) = self.fresh.lock() {
            fresh.insert(server.to_owned(), tools);
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
    ) -> Result<(Session, Vec<Listed>), String> {
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
        Ok((session, mcp::listed_from_wire(&tools)))
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
    pub fn stop(&mut self) {
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

/// The base64 bytes of images one call's result may send the model (providers refuse
/// images over about 5 MB); images past it stay in the call's record only.
const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// An image content piece (`image/png`, `image/jpeg`, `image/gif`, `image/webp`: what
/// the providers take) as an image for the model.
fn picture(item: &Value) -> Option<Picture> {
    if item.get("type")?.as_str()? != "image" {
        return None;
    }
    let media_type = item.get("mimeType")?.as_str()?;
    if !["image/png", "image/jpeg", "image/gif", "image/webp"].contains(&media_type) {
        return None;
    }
    let data = item.get("data")?.as_str()?;
    Some(Picture { media_type: media_type.to_owned(), data: data.to_owned() })
}

/// One piece of a result's content as text.
fn content_text(item: &Value) -> String {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
    let str_of = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => str_of("text").to_owned(),
        "image" | "audio" => format!(
            "[{kind} content, {}, {} bytes of base64; the whole result is in this call's record]",
            str_of("mimeType"),
            str_of("data").len()
        ),
        "resource" => {
            let resource = item.get("resource").cloned().unwrap_or(Value::Null);
            let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("");
            match resource.get("text").and_then(Value::as_str) {
                Some(text) => format!("<resource uri=\"{uri}\">\n{text}\n</resource>"),
                None => format!("[resource {uri}: binary, in this call's record]"),
            }
        }
        "resource_link" => format!("[resource link: {} {}]", str_of("uri"), str_of("name")).trim_end().to_owned(),
        other => format!("[content of type `{other}`: in this call's record]"),
    }
}

/// Where a driver's servers write their stderr.
pub fn logs(steps: &Path) -> PathBuf {
    steps.join("mcp")
}

/// How a server's last start went, as `<workspace>/mcp/<server>.json` keeps it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct McpState {
    pub ok: bool,
    pub tools: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A server's last start, with when and for which agent it was, as `mcp list` reads it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Noted {
    pub at: String,
    pub agent: String,
    #[serde(flatten)]
    pub state: McpState,
}

fn note_state(place: &Place, server: &str, state: &McpState) {
    let noted = Noted {
        at: crate::infra::time::Timestamp::now().to_string(),
        agent: place.agent.clone(),
        state: state.clone(),
    };
    let _ = std::fs::create_dir_all(&place.states);
    let path = place.states.join(format!("{server}.json"));
    let tmp = place.states.join(format!(".{server}.json.{}", std::process::id()));
    if std::fs::write(&tmp, serde_json::to_vec(&noted).unwrap_or_default()).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

/// The last start of each server a driver noted in workspace `states`, by name.
pub fn last_starts(states: &Path) -> BTreeMap<String, Noted> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(states).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(server) = name.strip_suffix(".json").filter(|s| !s.starts_with('.')) else { continue };
        if let Ok(noted) =
            std::fs::read(entry.path()).map_err(|_| ()).and_then(|b| serde_json::from_slice(&b).map_err(|_| ()))
        {
            out.insert(server.to_owned(), noted);
        }
    }
    out
}

/// A server to add with `offshoot mcp add`: its name and its settings.
pub struct NewServer<'a> {
    pub name: &'a str,
    pub server: &'a McpServer,
}

/// Adds `new` to `lineage`'s config as one commit (refused when the name is taken or
/// the result breaks a rule).
pub fn add(ws: &Workspace, lineage: &str, new: &NewServer) -> Result<KeysSet, WorkspaceError> {
    let NewServer { name, server } = new;
    let base = format!("mcp_servers.{name}");
    let value = toml::Value::try_from(server).map_err(|e| WorkspaceError::ConfigKey {
        verb: "set",
        key: base.clone(),
        reason: e.to_string(),
    })?;
    let message = format!("config: add MCP server `{name}`");
    ws.edit_config_keys(lineage, &message, &|before: &str| {
        let table: toml::Table = toml::from_str(before).unwrap_or_default();
        if table.get("mcp_servers").and_then(|m| m.get(*name)).is_some() {
            return Err(WorkspaceError::ConfigKey {
                verb: "add",
                key: base.clone(),
                reason: format!("MCP server `{name}` already exists; `offshoot mcp remove {name}` first"),
            });
        }
        let mut text = before.to_owned();
        use crate::domain::config::{STARTUP_TIMEOUT_SECS, TOOL_TIMEOUT_SECS};
        let defaults = [("startup_timeout_secs", STARTUP_TIMEOUT_SECS), ("tool_timeout_secs", TOOL_TIMEOUT_SECS)];
        let settings = value.as_table().into_iter().flatten().filter(|(key, value)| {
            !defaults.iter().any(|(k, d)| k == key && value.as_integer() == i64::try_from(*d).ok())
        });
        for (key, value) in settings {
            text = workspace::set_key(&text, &format!("{base}.{key}"), &value.to_string())
                .map_err(|reason| WorkspaceError::ConfigKey { verb: "set", key: format!("{base}.{key}"), reason })?;
        }
        Ok(text)
    })
}

/// Removes server `name` from `lineage`'s config, and from every role's
/// `mcp_servers` that names it, as one commit; returns the commit and those roles.
pub fn remove(ws: &Workspace, lineage: &str, name: &str) -> Result<(KeysSet, Vec<String>), WorkspaceError> {
    let roles = std::cell::RefCell::new(Vec::new());
    let message = format!("config: remove MCP server `{name}`");
    let set = ws.edit_config_keys(lineage, &message, &|before: &str| {
        let key = format!("mcp_servers.{name}");
        let mut text = workspace::unset_key(before, &key).map_err(|reason| WorkspaceError::ConfigKey {
            verb: "remove",
            key: key.clone(),
            reason,
        })?;
        let table: toml::Table = toml::from_str(before).unwrap_or_default();
        let mut named = Vec::new();
        for (role, settings) in table.get("roles").and_then(|r| r.as_table()).into_iter().flatten() {
            let Some(chosen) = settings.get("mcp_servers").and_then(|m| m.as_array()) else { continue };
            if !chosen.iter().any(|s| s.as_str() == Some(name)) {
                continue;
            }
            let kept: Vec<toml::Value> = chosen.iter().filter(|s| s.as_str() != Some(name)).cloned().collect();
            let key = format!("roles.{role}.mcp_servers");
            text = workspace::set_key(&text, &key, &toml::Value::Array(kept).to_string())
                .map_err(|reason| WorkspaceError::ConfigKey { verb: "set", key: key.clone(), reason })?;
            named.push(role.clone());
        }
        *roles.borrow_mut() = named;
        Ok(text)
    })?;
    Ok((set, roles.into_inner()))
}

/// Starts server `name` of `config` now and lists its tools as an agent would be
/// given them. It runs as the user who asked (`offshoot mcp tools`), not in a
/// sandbox, with the tool environment (keys withheld), in the workspace's
/// `tmp/mcp-tools/` unless its `cwd` says otherwise; it is stopped before this returns.
pub fn probe(ws: &Workspace, config: &Config, name: &str, vars: &Env) -> Result<Record, String> {
    let server = config.mcp_servers.get(name).ok_or_else(|| format!("MCP server `{name}` is not configured"))?;
    let dir = ws.layout.root().join("tmp").join("mcp-tools");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let identity = Identity::for_agent(config, "mcp-tools");
    let placement = Placement { workspace: ws.layout.root(), agent: "mcp-tools", identity: &identity, tmpdir: &dir };
    let place = Place {
        env: tool_env::environment(vars.vars(), config, &placement),
        sandbox: None,
        root: dir.clone(),
        logs: dir.clone(),
        states: ws.layout.root().join("mcp"),
        agent: "`offshoot mcp tools`".into(),
        vars: vars.clone(),
        redactor: None,
    };
    let mut servers = Servers::default();
    servers.configure(BTreeMap::from([(name.to_owned(), server.clone())]), place);
    servers.start(name, server, &|| true).map_err(|e| format!("MCP server `{name}` {e}"))?;
    let listed = servers.fresh.lock().ok().and_then(|mut f| f.remove(name)).unwrap_or_default();
    Ok(Record::of(name, &listed, server.enabled_tools.as_deref(), &server.disabled_tools))
}
