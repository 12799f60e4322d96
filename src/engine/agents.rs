//! Agents: the dispatch commit that starts one (root or fork), resolving an id or
//! name, listing, and discarding an agent that never got going.

use crate::domain::agent::{self, AgentFacts};
use crate::domain::id::{self, AgentId, IdError};
use crate::domain::inbox::Deposit;
use crate::domain::transcript;
use crate::infra::git::{CommitId, GitError, MAIN, Position, TreeEdit};
use crate::infra::sandbox::SandboxError;
use crate::infra::time::Timestamp;

use super::Env;
use super::containment;
use super::directory;
use super::inbox::{self, InboxError};
use super::snapshot::{self, Loader, SnapshotError};
use super::tools;
use super::workspace::{Workspace, WorkspaceError};

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("agent `{0}` does not exist")]
    Unknown(String),
    #[error("name `{0}` is already taken by agent `{1}`")]
    NameTaken(String, String),
    #[error("name `{0}` is taken: the agents' repository has a branch of that name")]
    BranchTaken(String),
    #[error("role `{role}` does not exist in config lineage `{lineage}`")]
    UnknownRole { role: String, lineage: String },
    #[error("the message is empty")]
    EmptyMessage,
    #[error("role `{role}` cannot run its tools: {source}; nothing was created")]
    Sandbox { role: String, source: SandboxError },
    #[error("`{0}` names no commit")]
    UnknownRef(String),
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

/// What every new agent is started with.
pub struct Start<'a> {
    /// Its first message (for a root, also its goal).
    pub message: &'a str,
    pub name: Option<&'a str>,
    pub now: Timestamp,
    pub random: u32,
    /// The environment the cli read (whether the role's sandbox can be enforced).
    pub env: &'a Env,
}

/// An agent as `ls` shows it.
#[derive(Debug, Clone)]
pub struct Listing {
    pub id: AgentId,
    /// `None` when the branch's tip is not a valid agent commit (see `damage`).
    pub facts: Option<AgentFacts>,
    pub tip: CommitId,
    /// Why the tip is not a valid agent commit.
    pub damage: Option<String>,
}

/// Starts a root agent: dispatch commit on the lineage head, worktree, goal deposit.
pub fn create_root(ws: &Workspace, role: &str, lineage: &str, spawn: &Start) -> Result<AgentId> {
    let (config_tip, config) = ws.config(lineage)?;
    let name = check_spawn(ws, role, lineage, spawn, &config)?;
    let id = fresh_id(ws, spawn.random)?;
    let facts = AgentFacts {
        id: id.to_string(),
        role: role.to_owned(),
        lineage: lineage.to_owned(),
        parent: None,
        name: Some(name),
        created: spawn.now.to_string(),
        forked_from: None,
    };
    let position = Position { branch: facts.name.clone(), head: ws.project.branch_tip(MAIN)? };
    let mut edits = dispatch_files(ws, config_tip, &config, &facts, &position)?;
    edits.push(TreeEdit::Write { path: agent::GOAL.into(), bytes: spawn.message.as_bytes().to_vec() });
    let subject = format!("dispatch {id}: {}", first_line(spawn.message));
    let commit = ws.repo.commit_edits(&[config_tip], None, &edits, &subject)?;
    start(ws, &id, &facts, commit, &position, spawn)?;
    Ok(id)
}

/// Starts an agent that continues the conversation at `from` (any commit of any
/// agent), with `message` as its next prompt.
pub fn fork(ws: &Workspace, from: &str, spawn: &Start) -> Result<AgentId> {
    let source = ws.repo.resolve_commit(from).ok_or_else(|| AgentError::UnknownRef(from.to_owned()))?;
    let source_facts = snapshot::read_facts(&ws.repo, source)?;
    let (config_tip, config) = ws.config(&source_facts.lineage)?;
    let role = source_facts.role.as_str();
    let name = check_spawn(ws, role, &source_facts.lineage, spawn, &config)?;
    let id = fresh_id(ws, spawn.random)?;
    let facts = AgentFacts {
        id: id.to_string(),
        role: role.to_owned(),
        lineage: source_facts.lineage.clone(),
        parent: None,
        name: Some(name),
        created: spawn.now.to_string(),
        forked_from: Some(source.to_string()),
    };
    // The fork's own git starts where the source's stood, on a branch of its own.
    let head = directory::recorded_position(ws, &source_facts, source)?.head;
    let position = Position { branch: facts.name.clone(), head };
    let mut edits = vec![TreeEdit::Remove { path: agent::TOOLS.into() }];
    edits.extend(dispatch_files(ws, config_tip, &config, &facts, &position)?);
    // A transcript ending in calls without results is cut before those calls.
    let mut loader = Loader::default();
    let entries = loader.entries(&ws.repo, source)?;
    for e in &entries[transcript::paired_len(entries)..] {
        let name = ws
            .repo
            .list_dir(source, agent::MESSAGES)?
            .into_iter()
            .find(|d| transcript::parse_name(&d.name).is_ok_and(|(n, _, _)| n == e.number()))
            .map(|d| d.name);
        if let Some(name) = name {
            edits.push(TreeEdit::Remove { path: format!("{}/{name}", agent::MESSAGES) });
        }
    }
    let subject = format!("fork {id} from {}: {}", &source.to_string()[..12], first_line(spawn.message));
    let commit = ws.repo.commit_edits(&[source], Some(source), &edits, &subject)?;
    start(ws, &id, &facts, commit, &position, spawn)?;
    Ok(id)
}

/// Validates a spawn before anything is written; returns the agent's name (the
/// one asked for, or a fresh two-word one).
fn check_spawn(
    ws: &Workspace,
    role: &str,
    lineage: &str,
    spawn: &Start,
    config: &crate::domain::config::Config,
) -> Result<String> {
    if spawn.message.trim().is_empty() {
        return Err(AgentError::EmptyMessage);
    }
    let Some(role_config) = config.role(role) else {
        return Err(AgentError::UnknownRole { role: role.to_owned(), lineage: lineage.to_owned() });
    };
    containment::check(role_config, spawn.env)
        .map_err(|source| AgentError::Sandbox { role: role.to_owned(), source })?;
    let taken: Vec<(String, String)> =
        list(ws)?.into_iter().filter_map(|l| l.facts.and_then(|f| f.name).map(|n| (n, l.id.to_string()))).collect();
    // A name is also the agent's project branch, which must be new.
    let branch_free = |name: &str| ws.project.branch_tip(name).map(|t| t.is_none());
    if let Some(name) = spawn.name {
        id::validate_name(name)?;
        if let Some((_, holder)) = taken.iter().find(|(n, _)| n == name) {
            return Err(AgentError::NameTaken(name.to_owned(), holder.clone()));
        }
        if !branch_free(name)? {
            return Err(AgentError::BranchTaken(name.to_owned()));
        }
        return Ok(name.to_owned());
    }
    // Two words first; after 64 collisions a number makes it unique.
    let mut r = spawn.random.rotate_left(7);
    let mut attempt = 0u32;
    loop {
        let mut name = id::mint_name(r);
        if attempt >= 64 {
            name.push_str(&attempt.to_string());
        }
        if !taken.iter().any(|(n, _)| *n == name) && branch_free(&name)? {
            return Ok(name);
        }
        r = r.wrapping_mul(2_654_435_761).wrapping_add(attempt);
        attempt += 1;
    }
}

fn fresh_id(ws: &Workspace, random: u32) -> Result<AgentId> {
    let mut r = random;
    loop {
        let id = AgentId::root_from_random(r);
        if ws.repo.branch_tip(&id.branch())?.is_none() {
            return Ok(id);
        }
        r = r.wrapping_mul(2_654_435_761).wrapping_add(1);
    }
}

/// `.offshoot/` as dispatch rebuilds it: facts, soul and the granted tool schemas,
/// all derived from the config (never from a parent's tree).
fn dispatch_files(
    ws: &Workspace,
    config_tip: CommitId,
    config: &crate::domain::config::Config,
    facts: &AgentFacts,
    position: &Position,
) -> Result<Vec<TreeEdit>> {
    let soul_path = format!("souls/{}.md", facts.role);
    let soul = ws.config_file(config_tip, &soul_path)?.unwrap_or_default();
    let mut edits = vec![
        TreeEdit::Write { path: agent::FACTS.into(), bytes: facts.to_toml().into_bytes() },
        TreeEdit::Write { path: agent::SOUL.into(), bytes: soul },
        TreeEdit::Write { path: agent::GIT.into(), bytes: agent::position_text(position).into_bytes() },
    ];
    let grant = config.role(&facts.role).map(|r| r.tools.clone()).unwrap_or_default();
    for name in grant {
        if let Some(handler) = tools::handler(&name) {
            let spec = serde_json::to_vec_pretty(&handler.spec()).unwrap_or_default();
            edits.push(TreeEdit::Write { path: format!("{}/{name}.json", agent::TOOLS), bytes: spec });
        }
    }
    Ok(edits)
}

/// Branch, project branch, directory, then the first message; undoes what it made
/// if a later part fails.
fn start(
    ws: &Workspace,
    id: &AgentId,
    facts: &AgentFacts,
    commit: CommitId,
    position: &Position,
    spawn: &Start,
) -> Result<()> {
    ws.repo.create_branch(&id.branch(), commit, "dispatch")?;
    let made = (|| -> Result<()> {
        if let (Some(branch), Some(head)) = (&position.branch, position.head) {
            ws.project.create_branch(branch, head)?;
        }
        directory::open(ws, id, facts, commit)?;
        inbox::deposit(&ws.layout, id, &Deposit::new("user", spawn.now, spawn.message))?;
        Ok(())
    })();
    if made.is_err() {
        discard(ws, id);
    }
    made
}

/// Removes every trace of an agent: branch, marks, project branch, directory,
/// index, inbox, steps, lock, temporary files.
pub fn discard(ws: &Workspace, id: &AgentId) {
    if let Some(name) = ws
        .repo
        .branch_tip(&id.branch())
        .ok()
        .flatten()
        .and_then(|t| snapshot::read_facts(&ws.repo, t).ok())
        .and_then(|f| f.name)
    {
        let _ = ws.project.delete_branch(&name);
    }
    let _ = ws.repo.delete_branch(&id.branch());
    let _ = ws.repo.delete_marks(id.as_str());
    ws.project.detach(id.as_str());
    let _ = std::fs::remove_dir_all(ws.layout.worktree(id));
    let _ = std::fs::remove_file(ws.layout.index(id));
    let _ = std::fs::remove_dir_all(ws.layout.inbox(id));
    let _ = std::fs::remove_dir_all(ws.layout.steps(id));
    let _ = std::fs::remove_dir_all(ws.layout.tmp(id));
    let _ = std::fs::remove_file(ws.layout.lock(id));
}

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
    list(ws)?
        .into_iter()
        .find(|l| l.facts.as_ref().and_then(|f| f.name.as_deref()) == Some(handle))
        .map(|l| l.id)
        .ok_or_else(|| AgentError::Unknown(handle.to_owned()))
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

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    if line.chars().count() > 60 {
        format!("{}…", line.chars().take(60).collect::<String>())
    } else {
        line.to_owned()
    }
}
