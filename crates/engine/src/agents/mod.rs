//! Agents: making them (`create`), what wakes, stops and ends them (`lifecycle`,
//! `runtime`, `interrupt`), what a tree may spend (`budget`) and how its commands are
//! confined (`containment`); here, resolving an id or name and listing them.

pub mod budget;
pub mod containment;
pub mod create;
pub mod interrupt;
pub mod lifecycle;
pub mod runtime;

pub use create::{Child, ProjectStart, Start, create_child, create_root, discard, fork};

use crate::Cause;
use domain::agent::AgentFacts;
use domain::id::{self, AgentId, IdError};
use domain::marks::Mark;
use infra::git::{CommitId, GitError};
use infra::sandbox::SandboxError;

use crate::store::inbox::InboxError;
use crate::store::snapshot::{self, SnapshotError};
use crate::store::workspace::{Workspace, WorkspaceError};

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("agent `{0}` does not exist")]
    Unknown(String),
    #[error("name `{0}` is already taken by agent `{1}`")]
    NameTaken(String, String),
    #[error("name `{0}` is taken: the agents' repository has a branch of that name")]
    BranchTaken(String),
    #[error("cannot stop `{id}`: {reason}")]
    Stop {
        id: AgentId,
        #[source]
        reason: Cause,
    },
    #[error("name `{0}` is an agent's id; names and ids must not be confused")]
    NameIsId(String),
    #[error("name `{name}` is held by several agents: {}", candidates.join(", "))]
    Ambiguous { name: String, candidates: Vec<String> },
    #[error("agent `{parent}` is at depth {depth}; a child would be at {}, over `budgets.max_depth` = {max}", depth + 1)]
    TooDeep { parent: String, depth: u32, max: u32 },
    #[error("no child is dispatched: the budget is exhausted ({0})")]
    Exhausted(String),
    #[error("role `compactor` is started by the harness only (`offshoot compact <agent>`), never dispatched")]
    CompactorRole,
    #[error("role `{role}` does not exist in config lineage `{lineage}`; its roles: {}", known.join(", "))]
    UnknownRole { role: String, lineage: String, known: Vec<String> },
    #[error("the message is empty")]
    EmptyMessage,
    #[error("{0}")]
    BadModel(String),
    #[error("role `{role}` cannot run its tools: {source}; nothing was created")]
    Sandbox { role: String, source: SandboxError },
    #[error("{0}")]
    Looser(String),
    #[error("`{0}` names no commit")]
    UnknownRef(String),
    #[error("cannot make agent `{id}`: {reason}")]
    Making {
        id: AgentId,
        #[source]
        reason: Cause,
    },
    #[error(transparent)]
    Id(#[from] IdError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Inbox(#[from] InboxError),
}

type Result<T> = std::result::Result<T, AgentError>;

/// An agent as `ls` shows it.
#[derive(Debug, Clone)]
pub struct Listing {
    pub id: AgentId,
    /// `None` when the branch's tip is not a valid agent commit (see `damage`).
    pub facts: Option<AgentFacts>,
    pub(crate) tip: CommitId,
    /// Why the tip is not a valid agent commit.
    pub(crate) damage: Option<String>,
}

/// The marks that reserve child ids: `refs/offshoot/ids/<id>` → the parent's id.
/// Set before a child's commit is built, removed with the agent.
pub(crate) const IDS: &str = Mark::Ids.kind();

/// Gives agent `id` the MCP servers an editor passed for its session (none: takes them
/// away), after checking them by the rules of `[mcp_servers]`; its driver adds them to
/// its role's from its next run. Kept in the workspace's internals (owner-only), out of
/// every agent's reach, and replaced whole.
pub fn set_client_servers(
    ws: &Workspace,
    id: &AgentId,
    servers: &std::collections::BTreeMap<String, domain::config::McpServer>,
) -> std::result::Result<(), String> {
    domain::config::check_servers(servers, &|key, rule| format!("{key}: {rule}"))?;
    let path = ws.layout.client_servers(id);
    if servers.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("{}: {e}", path.display())),
            _ => Ok(()),
        };
    }
    let json = serde_json::to_vec(servers).map_err(|e| e.to_string())?;
    let written = (|| -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::create_dir_all(path.parent().unwrap_or(ws.layout.root()))?;
        // (One name: a writer killed mid-way leaves nothing the next write or the
        // agent's removal does not take away.)
        let making = path.with_extension("json.new");
        let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&making)?;
        file.write_all(&json)?;
        std::fs::rename(&making, &path)
    })();
    written.map_err(|e| format!("{}: {e}", path.display()))
}

/// The MCP servers an editor gave agent `id` (none when there are none, or the file
/// does not read).
pub fn client_servers(ws: &Workspace, id: &AgentId) -> std::collections::BTreeMap<String, domain::config::McpServer> {
    std::fs::read(ws.layout.client_servers(id)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

/// Agent `id`'s lock, waited for at most `wait` (a driver ending lets it go soon after
/// its run's end is written); `None` when another still holds it.
pub fn hold_within(ws: &Workspace, id: &AgentId, wait: std::time::Duration) -> Option<infra::lock::LockGuard> {
    let began = std::time::Instant::now();
    loop {
        match infra::lock::LockGuard::try_acquire(&ws.layout.lock(id)) {
            Ok(Some(lock)) => return Some(lock),
            _ if began.elapsed() < wait => std::thread::sleep(std::time::Duration::from_millis(20)),
            _ => return None,
        }
    }
}

/// Whether agent `id` works in place: its work is written into the user's checkout as
/// it is committed (`ops::in_place::mirror`), so its hooks run in its jail.
pub fn works_in_place(ws: &Workspace, id: &AgentId) -> std::result::Result<bool, GitError> {
    Ok(ws.repo.mark(Mark::Mirror.kind(), id.as_str())?.is_some())
}

/// The call of its parent's that dispatched `child` (the `tool_use_id` its id claim
/// names); `None` for a root, or a child not made by a call.
pub fn dispatching_call(ws: &Workspace, child: &AgentId) -> Option<String> {
    let claim = String::from_utf8(ws.repo.mark(IDS, child.as_str()).ok()??).ok()?;
    let (_, key) = claim.split_once('\n')?;
    key.split_once(':').map(|(_, call)| call.to_owned())
}

/// The marks that hold names: `refs/offshoot/names/<name>` → the agent's id.
pub(crate) const NAMES: &str = Mark::Names.kind();

/// Finds an agent by id or name.
pub fn resolve(ws: &Workspace, handle: &str) -> Result<AgentId> {
    if handle.contains('/') || handle.contains("..") {
        return Err(IdError::PathLike(handle.to_owned()).into());
    }
    if let Ok(id) = AgentId::parse(handle)
        && ws.repo.branch_tip(&id.branch())?.is_some()
    {
        return Ok(id);
    }
    if id::validate_name(handle).is_ok()
        && let Some(owner) = ws.repo.mark(NAMES, handle)?
        && let Ok(id) = AgentId::parse(&String::from_utf8_lossy(&owner))
        && ws.repo.branch_tip(&id.branch())?.is_some()
    {
        return Ok(id);
    }
    // Agents made before names were claimed are found by their facts.
    let holders: Vec<AgentId> = list(ws)?
        .into_iter()
        .filter(|l| l.facts.as_ref().and_then(|f| f.name.as_deref()) == Some(handle))
        .map(|l| l.id)
        .collect();
    match holders.as_slice() {
        [] => Err(AgentError::Unknown(handle.to_owned())),
        [one] => Ok(one.clone()),
        many => Err(AgentError::Ambiguous {
            name: handle.to_owned(),
            candidates: many.iter().map(ToString::to_string).collect(),
        }),
    }
}

/// The display name of agent `id`, if it has one.
pub fn name_of(ws: &Workspace, id: &AgentId) -> Option<String> {
    facts_of(ws, &id.branch()).ok()?.name
}

/// The facts of the agent whose commit `rev` names (its branch, a sha).
pub fn facts_of(ws: &Workspace, rev: &str) -> Result<AgentFacts> {
    let commit = ws.repo.resolve_commit(rev).ok_or_else(|| AgentError::UnknownRef(rev.to_owned()))?;
    Ok(snapshot::read_facts(&ws.repo, commit)?)
}

/// A revision with its leading agent id or name (`PeachHollow~2`, `k7q2mx^`) turned
/// into the agent's branch; anything else as given.
pub fn revision(ws: &Workspace, spec: &str) -> Result<String> {
    let cut = spec.find(['~', '^']).unwrap_or(spec.len());
    let (head, rest) = spec.split_at(cut);
    match resolve(ws, head) {
        Ok(id) => Ok(format!("{}{rest}", id.branch())),
        Err(AgentError::Ambiguous { name, candidates }) => Err(AgentError::Ambiguous { name, candidates }),
        Err(_) => Ok(spec.to_owned()),
    }
}

/// Every agent of the workspace, by id.
pub fn list(ws: &Workspace) -> Result<Vec<Listing>> {
    let mut out = Vec::new();
    for (branch, tip) in ws.repo.branches("agents/")? {
        let Ok(id) = AgentId::parse(branch.trim_start_matches("agents/")) else {
            continue;
        };
        let (facts, damage) = match snapshot::read_facts(&ws.repo, tip) {
            Ok(facts) => (Some(facts), None),
            Err(e) => (None, Some(e.to_string())),
        };
        out.push(Listing { id, facts, tip, damage });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
