//! MCP servers in the config and the workspace: `offshoot mcp add` and `remove` as
//! config commits, `mcp tools` (a server started there and then), where servers'
//! stderr goes and how each last started (`mcp list`).

use crate::Cause;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::{Place, Servers};
use crate::store::workspace::{self, KeysSet, Workspace, WorkspaceError};
use domain::config::{Config, McpServer};
use domain::mcp::Record;
use domain::tool_env::{self, Identity, Placement};

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

pub(super) fn note_state(place: &Place, server: &str, state: &McpState) {
    let noted =
        Noted { at: infra::time::Timestamp::now().to_string(), agent: place.agent.clone(), state: state.clone() };
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
        reason: e.into(),
    })?;
    let message = format!("config: add MCP server `{name}`");
    ws.edit_config_keys(lineage, &message, &|before: &str| {
        let table: toml::Table = toml::from_str(before).unwrap_or_default();
        if table.get("mcp_servers").and_then(|m| m.get(*name)).is_some() {
            return Err(WorkspaceError::ConfigKey {
                verb: "add",
                key: base.clone(),
                reason: format!("MCP server `{name}` already exists; `offshoot mcp remove {name}` first").into(),
            });
        }
        let mut text = before.to_owned();
        use domain::config::{STARTUP_TIMEOUT_SECS, TOOL_TIMEOUT_SECS};
        let defaults = [("startup_timeout_secs", STARTUP_TIMEOUT_SECS), ("tool_timeout_secs", TOOL_TIMEOUT_SECS)];
        let settings = value.as_table().into_iter().flatten().filter(|(key, value)| {
            !defaults.iter().any(|(k, d)| k == key && value.as_integer() == i64::try_from(*d).ok())
        });
        for (key, value) in settings {
            text = workspace::set_key(&text, &format!("{base}.{key}"), &value.to_string()).map_err(|reason| {
                WorkspaceError::ConfigKey { verb: "set", key: format!("{base}.{key}"), reason: reason.into() }
            })?;
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
            reason: reason.into(),
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
                .map_err(|reason| WorkspaceError::ConfigKey { verb: "set", key: key.clone(), reason: reason.into() })?;
            named.push(role.clone());
        }
        *roles.borrow_mut() = named;
        Ok(text)
    })?;
    Ok((set, roles.into_inner()))
}

/// Starts server `name` of `config` now and lists its tools as an agent would be
/// given them (`offshoot mcp tools`). A stdio server runs as an agent's would: with the
/// tool environment (keys withheld), in the sandbox of a role that uses it (the
/// worker's if it does) with the workspace's `tmp/mcp-tools/` as the one place it may
/// write and its working directory unless its `cwd` says otherwise; `helper` is this
/// binary, the sandbox helper. It is stopped before this returns.
pub fn probe(
    ws: &Workspace,
    config: &Config,
    name: &str,
    rt: &crate::agents::runtime::Runtime,
) -> Result<Record, Cause> {
    let (vars, helper) = (rt.env(), rt.exe());
    let server = config.mcp_servers.get(name).ok_or_else(|| format!("MCP server `{name}` is not configured"))?;
    let dir = ws.layout.root().join("tmp").join("mcp-tools");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let uses = |role: &str| config.mcp_servers_of(role).iter().any(|s| s == name);
    let role = match uses("worker") {
        true => config.role("worker"),
        false => config.roles.iter().find(|(r, _)| uses(r)).map(|(_, role)| role).or_else(|| config.role("worker")),
    };
    let sandbox = match role.filter(|r| r.sandbox == domain::config::Sandbox::WorkspaceWrite) {
        None => None,
        Some(role) => {
            crate::agents::containment::check(role, vars)?;
            let workspace = std::fs::canonicalize(ws.layout.root()).unwrap_or_else(|_| ws.layout.root().to_owned());
            let confinement = infra::sandbox::Confinement {
                read_write: vec![dir.clone()],
                read: Vec::new(),
                // This workspace, and the others under the data root, as for an agent.
                hidden: std::iter::once(workspace)
                    .chain(rt.workspaces().and_then(|w| std::fs::canonicalize(w).ok()))
                    .collect(),
                network: role.network,
                processes: role.max_processes,
                file_bytes: role.max_file_bytes,
            };
            Some(Arc::new(crate::agents::containment::jail(&confinement, helper, vars)?))
        }
    };
    let identity = Identity::for_agent(config, "mcp-tools");
    let placement = Placement { workspace: ws.layout.root(), agent: "mcp-tools", identity: &identity, tmpdir: &dir };
    let place = Place {
        env: tool_env::environment(vars.vars(), config, &placement),
        sandbox,
        root: dir.clone(),
        logs: ws.layout.mcp_logs("mcp-tools"),
        states: ws.layout.root().join("mcp"),
        agent: "`offshoot mcp tools`".into(),
        vars: vars.clone(),
        redactor: None,
    };
    let mut servers = Servers::default();
    servers.configure(BTreeMap::from([(name.to_owned(), server.clone())]), place);
    servers.start(name, server, &|| true).map_err(|e| format!("MCP server `{name}` {e}"))?;
    let listing = servers.fresh.lock().ok().and_then(|mut f| f.remove(name)).unwrap_or_default();
    Ok(Record::of(name, &listing.tools, server))
}
