//! `offshoot scan`: agents whose driver died with work left (mail undelivered, a call
//! due or cut short, an answer never deposited) are relaunched once; one still dead at
//! the same commit after that is reported to its parent with a `died` obituary, once.
//! First, what an agent whose driver is gone planted in its git for a person's `git` to
//! run is put back; last, quarantines of publications a kill cut short are removed.

use crate::domain::id::AgentId;
use crate::domain::marks::{Epitaph, Mark};
use crate::infra::git::{self as git, CommitId, GitError};
use crate::infra::lock::{LockError, LockGuard};

use super::agents::{self, AgentError};
use super::driver::DriverError;
use super::lifecycle::{self, LifecycleError};
use super::runtime::{Runtime, Woken};
use super::snapshot::{Loader, SnapshotError};
use super::workspace::Workspace;

/// The mark of an agent scan relaunched (`refs/offshoot/relaunched/<id>`, the tip it
/// was dead at).
const RELAUNCHED: &str = Mark::Relaunched.kind();
/// The mark of an agent scan reported dead (`refs/offshoot/died/<id>`, the tip).
const DIED: &str = Mark::Died.kind();
/// The epitaph of an agent whose driver died and a relaunch did not move.
const EPITAPH_DIED: &str = Epitaph::Died.as_str();

/// What scan did about one agent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Finding {
    /// A new driver was started (`pid`), or one had just started (`None`).
    Relaunched { agent: String, why: &'static str, pid: Option<u32> },
    /// Dead again at the same commit: its parent (if any) was told.
    Died { agent: String, why: &'static str, told: Option<String> },
    /// An agent that was being made when its maker died: its id (and name) claims were
    /// released.
    Released { agent: String, name: Option<String> },
}

/// How old a root's name claim must be before scan takes its maker for dead (a root is
/// made by a command, which holds no lock scan could ask).
const ROOT_CLAIM_STALE: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Driver(#[from] Box<DriverError>),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    #[error("cannot relaunch `{id}`: {reason}")]
    Launch { id: String, reason: String },
}

type Result<T> = std::result::Result<T, ScanError>;

impl From<DriverError> for ScanError {
    fn from(e: DriverError) -> Self {
        ScanError::Driver(Box::new(e))
    }
}

pub fn scan(ws: &Workspace, rt: &Runtime) -> Result<Vec<Finding>> {
    let mut loader = Loader::default();
    let mut found = Vec::new();
    let listed = agents::list(ws)?;
    // What agents killed during a call planted in their git for a person's to run.
    for l in &listed {
        if !LockGuard::is_held(&ws.layout.lock(&l.id)).unwrap_or(true) {
            let _ = super::directory::put_back(ws, &l.id);
        }
    }
    for l in listed {
        let Some(facts) = &l.facts else { continue };
        let Some(why) = left_undone(ws, &mut loader, &l.id, l.tip, facts.parent.as_deref())? else { continue };
        let tip = l.tip.to_string();
        let at =
            |kind: &str| -> Result<bool> { Ok(ws.repo.mark(kind, l.id.as_str())?.as_deref() == Some(tip.as_bytes())) };
        if at(DIED)? {
            continue;
        }
        if !at(RELAUNCHED)? {
            ws.repo.set_mark(RELAUNCHED, l.id.as_str(), tip.as_bytes())?;
            let pid = match rt.wake(&l.id) {
                Ok(Woken::Launched(pid)) => Some(pid),
                Ok(Woken::Running) => None,
                Err(e) => return Err(ScanError::Launch { id: l.id.to_string(), reason: e.to_string() }),
            };
            found.push(Finding::Relaunched { agent: l.id.to_string(), why, pid });
            continue;
        }
        // Relaunched at this very commit and dead again: a claim makes the report one
        // even when two scans race.
        let _ = ws.repo.delete_mark(DIED, l.id.as_str());
        if !ws.repo.claim_mark(DIED, l.id.as_str(), tip.as_bytes())? {
            continue;
        }
        let parent = facts.parent.as_deref().and_then(|p| AgentId::parse(p).ok());
        if let Some(parent) = &parent {
            let body = format!(
                "`{}` stopped working ({why}) and a relaunch did not get it further; everything it did is on its branch (commit {tip}). `offshoot log {}` shows its last step; a message to it tries again.",
                l.id, l.id
            );
            lifecycle::deposit_result(ws, rt, &l.id, parent, EPITAPH_DIED, l.tip, body)?;
        }
        found.push(Finding::Died { agent: l.id.to_string(), why, told: parent.map(|p| p.to_string()) });
    }
    found.extend(release_dead_claims(ws)?);
    // What publications cut short by a kill left (never part of the shared store).
    ws.project.sweep_quarantines();
    sweep_leftovers(ws);
    Ok(found)
}

/// How long a lock file in the repositories must have gone unwritten before scan takes
/// its writer for dead (a live ref update holds one for microseconds).
const STALE_LOCK: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a temporary object file must have gone unwritten before scan takes its
/// writer for dead (a live writer writes on until it renames the file).
const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(10);

/// Lock files and temporary object files a killed process left in the agents' and the
/// shared repository: removed once nobody has written them for a while, so the next
/// write there does not fail and `doctor` has nothing to repair.
fn sweep_leftovers(ws: &Workspace) {
    let repos = [ws.layout.repo(), ws.layout.project()];
    for dir in &repos {
        for (path, age) in git::lock_files(dir) {
            if age >= STALE_LOCK.as_secs() {
                let _ = std::fs::remove_file(path);
            }
        }
        for (path, age) in git::temp_objects(dir) {
            if age >= STALE_TEMP.as_secs() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// Claims of ids and names for agents that were never made because their maker died in
/// between (a SIGKILL during a dispatch): a child's when its parent's driver is gone, a
/// root's when the claim is older than `ROOT_CLAIM_STALE`.
fn release_dead_claims(ws: &Workspace) -> Result<Vec<Finding>> {
    let mut claimed: Vec<(String, Option<String>)> =
        ws.repo.marks(agents::IDS, "")?.into_iter().map(|id| (id, None)).collect();
    for name in ws.repo.marks(agents::NAMES, "")? {
        let id = String::from_utf8_lossy(&ws.repo.mark(agents::NAMES, &name)?.unwrap_or_default()).into_owned();
        match claimed.iter_mut().find(|(i, _)| *i == id) {
            Some(entry) => entry.1 = Some(name),
            None => claimed.push((id, Some(name))),
        }
    }
    let mut released = Vec::new();
    for (id, name) in claimed {
        let Ok(agent) = AgentId::parse(&id) else { continue };
        if ws.repo.branch_tip(&agent.branch())?.is_some() {
            continue;
        }
        let maker_gone = match agent.parent() {
            // A parent with calls cut short settles them itself: its dispatch, run again,
            // finds its claim by the call's key (and lets it go, or makes the child).
            Some(parent) => !LockGuard::is_held(&ws.layout.lock(&parent))? && !has_open_calls(ws, &parent)?,
            None => {
                name.as_deref().and_then(|n| ws.repo.mark_age(agents::NAMES, n)).is_some_and(|a| a >= ROOT_CLAIM_STALE)
            }
        };
        if !maker_gone {
            continue;
        }
        ws.repo.delete_mark(agents::IDS, &id)?;
        if let Some(name) = &name {
            ws.repo.delete_mark(agents::NAMES, name)?;
        }
        released.push(Finding::Released { agent: id, name });
    }
    Ok(released)
}

/// Whether `id`'s transcript ends in calls without results.
fn has_open_calls(ws: &Workspace, id: &AgentId) -> Result<bool> {
    let Some(tip) = ws.repo.branch_tip(&id.branch())? else { return Ok(false) };
    let mut loader = Loader::default();
    Ok(!crate::domain::transcript::unanswered_calls(loader.entries(&ws.repo, tip)?).is_empty())
}

/// Why an agent no driver holds still has work, if it does; stopped agents wait for a
/// message by design.
fn left_undone(
    ws: &Workspace,
    loader: &mut Loader,
    id: &AgentId,
    tip: CommitId,
    parent: Option<&str>,
) -> Result<Option<&'static str>> {
    if LockGuard::is_held(&ws.layout.lock(id))? || ws.repo.mark(lifecycle::STOPPED, id.as_str())?.is_some() {
        return Ok(None);
    }
    Ok(lifecycle::work_left(ws, loader, id, tip, parent)?)
}
