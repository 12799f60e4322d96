//! How an agent lives and ends, in one place: the marks that say it (stopped, told,
//! replied, exhausted), stopping a tree, telling a parent once, depositing a result
//! exactly once, and what an agent no driver holds still has to do. The driver, the
//! tools, `stop` and `scan` all go through here; nothing here runs a step.

use crate::Cause;
use domain::id::AgentId;
use domain::inbox::{Deposit, Header};
use domain::marks::{Epitaph, Mark};
use domain::results::{self, Reply};
use domain::transcript::{self, Entry};
use infra::git::{CommitId, GitError};
use infra::lock::{LockError, LockGuard};
use infra::time::Timestamp;

use crate::agents::runtime::{Runtime, Stopped};
use crate::store::inbox::{self, InboxError};
use crate::store::snapshot::{self, Loader, SnapshotError};
use crate::store::workspace::Workspace;

/// The mark holding the terminal commit whose answer was deposited.
pub(crate) const REPLIED: &str = Mark::Replied.kind();
/// The mark of an agent stopped because its tree's budget ran out
/// (`refs/offshoot/exhausted/<id>`, what was spent); cleared when it is revived.
pub(crate) const EXHAUSTED: &str = Mark::Exhausted.kind();
/// The mark of the tip whose stop an agent's parent was told of (`refs/offshoot/told/<id>`).
pub(crate) const TOLD: &str = Mark::Told.kind();
/// The mark of a stopped agent (`refs/offshoot/stopped/<id>`, the tip it stopped at):
/// results and other agents' messages wait for it instead of waking it, until the
/// user's message or a run revives it.
pub const STOPPED: &str = Mark::Stopped.kind();

/// The epitaph of a result that is an agent's final response.
pub(crate) const FINAL_RESPONSE: &str = Epitaph::FinalResponse.as_str();
/// The epitaph of an agent that was stopped.
pub(crate) const EPITAPH_STOPPED: &str = Epitaph::Stopped.as_str();
/// The epitaph of an agent stopped because its tree's budget ran out.
pub(crate) const EPITAPH_EXHAUSTED: &str = Epitaph::BudgetExhausted.as_str();

#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error("agent `{0}` does not exist")]
    Unknown(String),
    #[error("agent `{id}` is damaged: {reason}")]
    Damaged {
        id: AgentId,
        #[source]
        reason: Cause,
    },
    #[error("cannot wake agent `{id}`: {reason}")]
    Wake {
        id: AgentId,
        #[source]
        reason: Cause,
    },
    #[error("cannot stop `{id}`: {reason}")]
    Stop {
        id: AgentId,
        #[source]
        reason: Cause,
    },
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Inbox(#[from] InboxError),
}

type Result<T> = std::result::Result<T, LifecycleError>;

/// How a stop left an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Stopped,
    /// Stopped because its tree's budget ran out: what was spent.
    Exhausted(String),
}

/// Every agent below `id` (children, their children, …), by branch.
pub fn descendants(ws: &Workspace, id: &AgentId) -> std::result::Result<Vec<AgentId>, GitError> {
    Ok(ws
        .repo
        .branches(&format!("{}.", id.branch()))?
        .into_iter()
        .filter_map(|(branch, _)| AgentId::parse(branch.trim_start_matches("agents/")).ok())
        .collect())
}

/// Stops `id` and every agent below it: each is marked stopped (results then wait
/// in its inbox instead of waking it), then each running driver is told to stop,
/// deepest first so parents hear of their children. Returns what happened to each.
pub fn stop_tree(
    ws: &Workspace,
    rt: &Runtime,
    id: &AgentId,
    patience: std::time::Duration,
) -> Result<Vec<(AgentId, Stopped)>> {
    let mut tree = descendants(ws, id)?;
    tree.push(id.clone());
    stop_all(ws, rt, tree, patience)
}

/// Marks every one of `agents` stopped that is at work, has work left, or is above one
/// of them that is (its result would wake it); a finished agent with nothing at work
/// below it is left as it is: stopping it changes nothing. Then stops each running
/// driver, deepest first, waiting up to `patience` for each to settle (zero: asked,
/// not waited for).
pub(crate) fn stop_all(
    ws: &Workspace,
    rt: &Runtime,
    mut agents: Vec<AgentId>,
    patience: std::time::Duration,
) -> Result<Vec<(AgentId, Stopped)>> {
    agents.sort_by_key(|a| std::cmp::Reverse(a.depth()));
    let mut loader = Loader::default();
    let mut tips = Vec::new();
    let mut at_work = Vec::new();
    for agent in &agents {
        let Some(tip) = ws.repo.branch_tip(&agent.branch())? else { continue };
        let parent = agent.parent().map(|p| p.to_string());
        if LockGuard::is_held(&ws.layout.lock(agent))?
            || work_left(ws, &mut loader, agent, tip, parent.as_deref()).map_or(true, |w| w.is_some())
        {
            at_work.push(agent.clone());
        }
        tips.push((agent, tip));
    }
    for (agent, tip) in tips {
        let below = format!("{agent}.");
        if at_work.iter().any(|a| a == agent || a.as_str().starts_with(&below)) {
            ws.repo.set_mark(STOPPED, agent.as_str(), tip.to_string().as_bytes())?;
        }
    }
    let mut out = Vec::new();
    for agent in agents {
        let stopped = stop_driver(ws, rt, &agent, patience)?;
        out.push((agent, stopped));
    }
    Ok(out)
}

/// Stops `agent`'s running driver, waiting up to `patience` for it to settle, and tells
/// its parent if the driver did not (its stop mark, if it needs one, set before).
pub(crate) fn stop_driver(
    ws: &Workspace,
    rt: &Runtime,
    agent: &AgentId,
    patience: std::time::Duration,
) -> Result<Stopped> {
    let stopped = rt.stop(agent, patience).map_err(|e| LifecycleError::Stop { id: agent.clone(), reason: e.into() })?;
    if let Stopped::Stopped(_) = stopped {
        tell_parent_if_untold(ws, rt, agent)?;
    }
    Ok(stopped)
}

/// After a stop (by `offshoot stop`, or because the tree's budget ran out): marks the
/// agent stopped at `tip` (results of its children then wait in its inbox instead of
/// waking it; the user's message revives it), tells its parent, and says how it ended.
pub(crate) fn stopped(
    ws: &Workspace,
    rt: &Runtime,
    id: &AgentId,
    parent: Option<&str>,
    tip: CommitId,
) -> Result<Ended> {
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
        Some(spend) => Ended::Exhausted(spend),
        None => Ended::Stopped,
    })
}

/// [`stopped`] for an agent no driver has open (or one whose process is ending).
pub(crate) fn stopped_at_tip(ws: &Workspace, rt: &Runtime, id: &AgentId) -> Result<Ended> {
    let tip = ws.repo.branch_tip(&id.branch())?.ok_or_else(|| LifecycleError::Unknown(id.to_string()))?;
    let facts = snapshot::read_facts(&ws.repo, tip)
        .map_err(|e| LifecycleError::Damaged { id: id.clone(), reason: e.into() })?;
    stopped(ws, rt, id, facts.parent.as_deref(), tip)
}

/// After `id`'s driver let go because it was stopped: if it ended without telling its
/// parent, tells it now, as the driver would have. `told` marks what was told, so it
/// is never told twice.
pub(crate) fn tell_parent_if_untold(ws: &Workspace, rt: &Runtime, id: &AgentId) -> Result<()> {
    let Some(tip) = ws.repo.branch_tip(&id.branch())? else { return Ok(()) };
    if ws.repo.mark(TOLD, id.as_str())?.as_deref() == Some(tip.to_string().as_bytes()) {
        return Ok(());
    }
    let facts = snapshot::read_facts(&ws.repo, tip)
        .map_err(|e| LifecycleError::Damaged { id: id.clone(), reason: e.into() })?;
    if facts.parent.is_some() {
        stopped(ws, rt, id, facts.parent.as_deref(), tip)?;
    }
    Ok(())
}

/// Marks `id` stopped at its tip, and nothing more.
pub(crate) fn mark_stopped(ws: &Workspace, id: &AgentId) -> Result<()> {
    if let Some(tip) = ws.repo.branch_tip(&id.branch())? {
        ws.repo.set_mark(STOPPED, id.as_str(), tip.to_string().as_bytes())?;
    }
    Ok(())
}

/// Ctrl-C stops the agent as `offshoot stop` would: it and every agent below it are
/// marked stopped (their results wait instead of starting anything behind the user's
/// back) and the drivers below are asked to stop; no obituary goes up, the user is
/// here.
pub(crate) fn interrupted_by_user(ws: &Workspace, rt: &Runtime, id: &AgentId) -> Result<()> {
    mark_stopped(ws, id)?;
    let below = descendants(ws, id)?;
    stop_all(ws, rt, below, std::time::Duration::ZERO)?;
    Ok(())
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
            epitaph: Some(epitaph.into()),
            terminal: Some(terminal.to_string()),
            ..Deposit::new(&from.to_string(), Timestamp::now(), &body)
        };
        inbox::deposit(&ws.layout, to, &deposit)?;
    }
    if ws.repo.mark(STOPPED, to.as_str())?.is_none() {
        rt.wake(to).map_err(|e| LifecycleError::Wake { id: to.clone(), reason: e.into() })?;
    }
    Ok(())
}

/// Whether `to` already holds `from`'s result of kind `epitaph` made at `terminal`,
/// pending or delivered.
fn already_received(ws: &Workspace, from: &AgentId, to: &AgentId, epitaph: &str, terminal: CommitId) -> Result<bool> {
    let terminal = terminal.to_string();
    holds(ws, to, |h| {
        h.from == from.as_str()
            && h.terminal.as_deref() == Some(terminal.as_str())
            && h.epitaph.as_deref() == Some(epitaph)
    })
}

/// Whether `to` already holds the message a call with `key` sent, pending or delivered.
pub(crate) fn received_key(ws: &Workspace, to: &AgentId, key: &str) -> Result<bool> {
    holds(ws, to, |h| h.key.as_deref() == Some(key))
}

/// Whether a message whose header is `ours` is in `to`'s inbox or transcript (the inbox
/// first: a delivery commits before it removes the file).
fn holds(ws: &Workspace, to: &AgentId, ours: impl Fn(&Header) -> bool) -> Result<bool> {
    let ours = |text: &str| Header::parse(text).is_some_and(|h| ours(&h));
    if inbox::pending(&ws.layout, to)?.iter().any(|p| ours(&p.text)) {
        return Ok(true);
    }
    let Some(tip) = ws.repo.branch_tip(&to.branch())? else { return Ok(false) };
    let entries = Loader::default().entries(&ws.repo, tip)?.to_vec();
    Ok(entries.iter().any(|e| matches!(e, Entry::Message { text, .. } if ours(text))))
}

/// What [`work_left`] says of an agent made whose first message was never deposited.
pub(crate) const GOAL_UNDELIVERED: &str = "its goal never delivered";

/// What agent `id` (at `tip`) still has to do when no driver runs it, if anything: mail
/// to deliver, a goal never delivered, calls cut short, a model call due, or an answer
/// never deposited with whoever is owed it.
pub(crate) fn work_left(
    ws: &Workspace,
    loader: &mut Loader,
    id: &AgentId,
    tip: CommitId,
    parent: Option<&str>,
) -> Result<Option<&'static str>> {
    if inbox::has_pending(&ws.layout, id) {
        return Ok(Some("mail undelivered"));
    }
    let entries = loader.entries(&ws.repo, tip)?;
    Ok(work_in(entries, id, tip, parent, || ws.repo.mark(REPLIED, id.as_str()))?)
}

/// What is left for a driver in the transcript `entries` of `id` at `tip` (mail
/// aside); `replied` reads its `replied` mark, only when an answer may be owed.
pub(crate) fn work_in<E>(
    entries: &[Entry],
    id: &AgentId,
    tip: CommitId,
    parent: Option<&str>,
    replied: impl FnOnce() -> std::result::Result<Option<Vec<u8>>, E>,
) -> std::result::Result<Option<&'static str>, E> {
    if entries.is_empty() {
        return Ok(Some(GOAL_UNDELIVERED));
    }
    if !transcript::unanswered_calls(entries).is_empty() {
        return Ok(Some("tool calls cut short"));
    }
    if transcript::warrants_call(entries) {
        return Ok(Some("a model call due"));
    }
    if transcript::final_text(entries).is_some()
        && matches!(results::reply(entries, id.as_str(), parent), Reply::To(_))
        && replied()?.as_deref() != Some(tip.to_string().as_bytes())
    {
        return Ok(Some("an answer never delivered"));
    }
    Ok(None)
}
