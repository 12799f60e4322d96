//! How an agent stops: marked stopped, its parent told once, its tree stopped when
//! the budget is out; results deposited exactly once.

use crate::domain::id::AgentId;
use crate::domain::inbox::{Deposit, Header};
use crate::domain::transcript::Entry;
use crate::engine::agents;
use crate::engine::budget;
use crate::engine::inbox;
use crate::engine::interrupt::Reason;
use crate::engine::runtime::Runtime;
use crate::engine::snapshot::Loader;
use crate::engine::workspace::Workspace;
use crate::infra::git::CommitId;
use crate::infra::time::Timestamp;

use super::{Driver, DriverError, EPITAPH_EXHAUSTED, EPITAPH_STOPPED, EXHAUSTED, Result, STOPPED, TOLD};

impl Driver<'_> {
    /// The tree's budget ran out before this agent's next call: every agent of the
    /// tree is marked stopped with what was spent, this one tells its parent, and
    /// every other running driver of the tree is asked to stop (each tells its own
    /// parent as it settles).
    pub(super) fn exhaust(&mut self, spend: &str) -> Result<DriverError> {
        let root = budget::root_of(&self.id);
        let mut tree: Vec<AgentId> = agents::descendants(self.ws, &root)?;
        tree.push(root);
        for agent in &tree {
            self.ws.repo.set_mark(EXHAUSTED, agent.as_str(), spend.as_bytes())?;
        }
        let error = stopped(self.ws, self.runtime, &self.id, self.facts.parent.as_deref(), self.tip()?)?;
        // Asked, not waited for: each settles its calls on its own.
        let others = tree.into_iter().filter(|a| *a != self.id).collect();
        let _ = agents::stop_all(self.ws, self.runtime, others, std::time::Duration::ZERO);
        Ok(error)
    }
}

/// After a stop (by `offshoot stop`, or because the tree's budget ran out): marks the
/// agent stopped at `tip` (results of its children then wait in its inbox instead of
/// waking it; the user's message revives it), tells its parent, and says why it stopped.
pub(super) fn stopped(
    ws: &Workspace,
    rt: &Runtime,
    id: &AgentId,
    parent: Option<&str>,
    tip: CommitId,
) -> Result<DriverError> {
    ws.repo.set_mark(STOPPED, id.as_str(), tip.to_string().as_bytes())?;
    let exhausted = ws.repo.mark(EXHAUSTED, id.as_str())?.map(|b| String::from_utf8_lossy(&b).into_owned());
    if let Some(parent) = parent.and_then(|p| AgentId::parse(p).ok()) {
        let (epitaph, why) = match &exhausted {
            Some(spend) => (EPITAPH_EXHAUSTED, format!("was stopped because the budget is exhausted: {spend}")),
            None => (EPITAPH_STOPPED, "was stopped".to_owned()),
        };
        let body = format!(
            "`{id}` {why}; everything it did until then is on its branch (commit {tip}). A message from the user revives it; yours waits until then."
        );
        deposit_result(ws, rt, id, &parent, epitaph, tip, body)?;
        ws.repo.set_mark(TOLD, id.as_str(), tip.to_string().as_bytes())?;
    }
    Ok(match exhausted {
        Some(spend) => DriverError::Exhausted { id: id.to_string(), spend },
        None => DriverError::Interrupted { id: id.to_string(), reason: Reason::Stopped },
    })
}

/// After `id`'s driver let go because it was stopped: if it ended without telling its
/// parent (a stop during a model call ends the process at once), tells it now, as the
/// driver would have. `told` marks what was told, so it is never told twice.
pub(crate) fn tell_parent_if_untold(ws: &Workspace, rt: &Runtime, id: &AgentId) -> Result<()> {
    let Some(tip) = ws.repo.branch_tip(&id.branch())? else { return Ok(()) };
    if ws.repo.mark(TOLD, id.as_str())?.as_deref() == Some(tip.to_string().as_bytes()) {
        return Ok(());
    }
    let facts = crate::engine::snapshot::read_facts(&ws.repo, tip)
        .map_err(|e| DriverError::Damaged { id: id.to_string(), reason: e.to_string() })?;
    if facts.parent.is_some() {
        stopped(ws, rt, id, facts.parent.as_deref(), tip)?;
    }
    Ok(())
}

/// Ctrl-C stops the agent as `offshoot stop` would: it and every agent below it are
/// marked stopped (their results wait instead of starting anything behind the user's
/// back) and the drivers below are asked to stop; no obituary goes up, the user is
/// here.
pub(super) fn interrupted_by_user(ws: &Workspace, rt: &Runtime, id: &AgentId) -> Result<DriverError> {
    if let Some(tip) = ws.repo.branch_tip(&id.branch())? {
        ws.repo.set_mark(STOPPED, id.as_str(), tip.to_string().as_bytes())?;
    }
    let below = agents::descendants(ws, id)?;
    agents::stop_all(ws, rt, below, std::time::Duration::ZERO)
        .map_err(|e| DriverError::StopBelow { id: id.to_string(), reason: e.to_string() })?;
    Ok(DriverError::Interrupted { id: id.to_string(), reason: Reason::User })
}

/// [`stopped`] for an agent no driver has open.
pub(super) fn stopped_at_tip(ws: &Workspace, rt: &Runtime, id: &AgentId) -> Result<DriverError> {
    let tip = ws.repo.branch_tip(&id.branch())?.ok_or_else(|| DriverError::Unknown(id.to_string()))?;
    let facts = crate::engine::snapshot::read_facts(&ws.repo, tip)
        .map_err(|e| DriverError::Damaged { id: id.to_string(), reason: e.to_string() })?;
    stopped(ws, rt, id, facts.parent.as_deref(), tip)
}

/// Deposits a result (`epitaph`, `terminal`) from `from` with `to` and wakes it,
/// unless it was stopped (then the result waits for it).
pub(crate) fn deposit_result(
    ws: &Workspace,
    rt: &Runtime,
    from: &AgentId,
    to: &AgentId,
    epitaph: &str,
    terminal: CommitId,
    body: String,
) -> Result<()> {
    // A driver killed between depositing and marking the debt paid deposits again when
    // it comes back: a result already in the inbox or the transcript is not sent twice
    // (the inbox first: a delivery commits before it removes the file).
    if !already_received(ws, from, to, epitaph, terminal)? {
        let deposit = Deposit {
            from: from.to_string(),
            at: Timestamp::now().to_string(),
            epitaph: Some(epitaph.into()),
            terminal: Some(terminal.to_string()),
            body,
        };
        inbox::deposit(&ws.layout, to, &deposit)?;
    }
    if ws.repo.mark(STOPPED, to.as_str())?.is_none() {
        rt.wake(to).map_err(|e| DriverError::Wake { id: to.to_string(), reason: e.to_string() })?;
    }
    Ok(())
}

/// Whether `to` already holds `from`'s result of kind `epitaph` made at `terminal`,
/// pending or delivered.
pub(super) fn already_received(
    ws: &Workspace,
    from: &AgentId,
    to: &AgentId,
    epitaph: &str,
    terminal: CommitId,
) -> Result<bool> {
    let terminal = terminal.to_string();
    let ours = |text: &str| {
        Header::parse(text).is_some_and(|h| {
            h.from == from.as_str()
                && h.terminal.as_deref() == Some(terminal.as_str())
                && h.epitaph.as_deref() == Some(epitaph)
        })
    };
    if inbox::pending(&ws.layout, to)?.iter().any(|p| ours(&p.text)) {
        return Ok(true);
    }
    let Some(tip) = ws.repo.branch_tip(&to.branch())? else { return Ok(false) };
    let entries = Loader::default().entries(&ws.repo, tip)?.to_vec();
    Ok(entries.iter().any(|e| matches!(e, Entry::Message { text, .. } if ours(text))))
}
