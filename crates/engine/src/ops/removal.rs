//! Removing agents (`offshoot rm`): an agent and, with `tree`, every agent below it —
//! branch, name, project branch, directory, its git, index, inbox, step records,
//! temporary files, marks and MCP logs. A running agent is refused unless `stop` says
//! to stop it first; the agents' locks are held while they go, so no driver (`scan`,
//! a message's wake-up) starts on what is half removed.

use std::time::Duration;

use domain::id::AgentId;
use infra::lock::LockGuard;

use crate::agents::runtime::Runtime;
use crate::agents::{self, AgentError};
use crate::store::workspace::Workspace;
use crate::{agents::lifecycle, ops::inspect, store::snapshot};

/// How long a stop before a removal waits for drivers to let go.
const PATIENCE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum RemovalError {
    #[error("agent `{id}` has {count} agent(s) below it (`{first}`…)")]
    Below { id: AgentId, count: usize, first: String },
    #[error("agent `{id}` is running")]
    Running { id: AgentId },
    #[error("agent `{id}` is removed but these could not be: {}", left.join(", "))]
    Left { id: AgentId, left: Vec<String> },
    #[error(transparent)]
    Agent(#[from] AgentError),
}

impl From<infra::git::GitError> for RemovalError {
    fn from(e: infra::git::GitError) -> Self {
        RemovalError::Agent(e.into())
    }
}

/// Every target's lock, or the first target whose lock is held.
fn take_locks(ws: &Workspace, targets: &[AgentId]) -> Result<Result<Vec<LockGuard>, AgentId>, RemovalError> {
    let mut held = Vec::new();
    for target in targets {
        let lock = LockGuard::try_acquire(&ws.layout.lock(target))
            .map_err(|e| AgentError::Stop { id: target.clone(), reason: e.into() })?;
        match lock {
            Some(lock) => held.push(lock),
            None => return Ok(Err(target.clone())),
        }
    }
    Ok(Ok(held))
}

/// What went with one agent.
#[derive(Debug, Clone)]
pub struct Gone {
    pub id: AgentId,
    pub name: Option<String>,
    /// Its model calls (step records).
    pub steps: u32,
}

/// Removes `id` (and with `tree` every agent below it), stopping them first when
/// `stop` says so; returns what went, the deepest first.
pub fn remove(ws: &Workspace, rt: &Runtime, id: &AgentId, tree: bool, stop: bool) -> Result<Vec<Gone>, RemovalError> {
    let mut below = lifecycle::descendants(ws, id)?;
    if !below.is_empty() && !tree {
        return Err(RemovalError::Below { id: id.clone(), count: below.len(), first: below[0].to_string() });
    }
    // The deepest first: a child goes before its parent.
    below.sort_by_key(|b| std::cmp::Reverse(b.as_str().matches('.').count()));
    let targets: Vec<AgentId> = below.into_iter().chain(std::iter::once(id.clone())).collect();
    // Stopped, a tree can still have a driver starting (one launched a moment before,
    // a compactor's): it is stopped again, a few times, before the removal gives up.
    let mut tries = if stop { 3 } else { 1 };
    let held = loop {
        tries -= 1;
        if stop {
            lifecycle::stop_tree(ws, rt, id, PATIENCE)
                .map_err(|e| AgentError::Stop { id: id.clone(), reason: e.into() })?;
        }
        match take_locks(ws, &targets)? {
            Ok(held) => break held,
            Err(busy) if tries == 0 => return Err(RemovalError::Running { id: busy.clone() }),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let mut gone = Vec::new();
    for target in &targets {
        let facts = ws.repo.branch_tip(&target.branch())?.and_then(|tip| snapshot::read_facts(&ws.repo, tip).ok());
        let steps = inspect::step_count(ws, target);
        // Its branch goes last: a removal cut short (or refused a part) is run again.
        let left = agents::discard(ws, target);
        if !left.is_empty() {
            return Err(RemovalError::Left { id: target.clone(), left });
        }
        gone.push(Gone { id: target.clone(), name: facts.and_then(|f| f.name), steps });
    }
    drop(held);
    Ok(gone)
}
