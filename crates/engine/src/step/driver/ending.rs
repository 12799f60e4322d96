//! How a driver's run ends when its agent is stopped: the lifecycle's stop, said as
//! the driver's error; the tree stopped when the budget is out.

use crate::agents::interrupt::Reason;
use crate::agents::lifecycle::{self, EXHAUSTED, Ended};
use crate::agents::runtime::Runtime;
use crate::store::workspace::Workspace;
use domain::id::AgentId;
use infra::git::CommitId;

use super::{Driver, DriverError, Result};

impl Driver<'_> {
    /// The tree's budget ran out before this agent's next call: every agent of the
    /// tree is marked stopped with what was spent, this one tells its parent, and
    /// every other running driver of the tree is asked to stop (each tells its own
    /// parent as it settles).
    pub(super) fn exhaust(&mut self, spend: &str) -> Result<DriverError> {
        let root = self.id.root();
        let mut tree: Vec<AgentId> = lifecycle::descendants(self.ws, &root)?;
        tree.push(root);
        for agent in &tree {
            self.ws.repo.set_mark(EXHAUSTED, agent.as_str(), spend.as_bytes())?;
        }
        let error = stopped(self.ws, self.runtime, &self.id, self.facts.parent.as_deref(), self.tip()?)?;
        // Asked, not waited for: each settles its calls on its own.
        let others = tree.into_iter().filter(|a| *a != self.id).collect();
        let _ = lifecycle::stop_all(self.ws, self.runtime, others, std::time::Duration::ZERO);
        Ok(error)
    }
}

/// The error a run ends with when its agent `ended` so.
fn said(id: &AgentId, ended: Ended) -> DriverError {
    match ended {
        Ended::Exhausted(spend) => DriverError::Exhausted { id: id.clone(), spend },
        Ended::Stopped => DriverError::Interrupted { id: id.clone(), reason: Reason::Stopped },
    }
}

/// [`lifecycle::stopped`], said as the driver's error.
pub(super) fn stopped(
    ws: &Workspace,
    rt: &Runtime,
    id: &AgentId,
    parent: Option<&str>,
    tip: CommitId,
) -> Result<DriverError> {
    Ok(said(id, lifecycle::stopped(ws, rt, id, parent, tip)?))
}

/// [`lifecycle::stopped_at_tip`], said as the driver's error.
pub(super) fn stopped_at_tip(ws: &Workspace, rt: &Runtime, id: &AgentId) -> Result<DriverError> {
    Ok(said(id, lifecycle::stopped_at_tip(ws, rt, id)?))
}

/// [`lifecycle::interrupted_by_user`], said as the driver's error.
pub(super) fn interrupted_by_user(ws: &Workspace, rt: &Runtime, id: &AgentId) -> Result<DriverError> {
    lifecycle::interrupted_by_user(ws, rt, id)
        .map_err(|e| DriverError::StopBelow { id: id.clone(), reason: e.into() })?;
    Ok(DriverError::Interrupted { id: id.clone(), reason: Reason::User })
}
