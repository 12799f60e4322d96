//! Compaction: starting a compactor for an agent, planning the landing of its
//! summary on the agent's branch, and undoing a landing. The agent's own driver
//! applies a landing (it owns the branch and the directory); everything here only
//! reads, or writes through the runtime and a child's dispatch.

use crate::Cause;
use std::collections::BTreeSet;

use domain::agent;
use domain::compaction::{self, Landing};
use domain::config::Config;
use domain::id::AgentId;
use domain::marks::Mark;
use domain::transcript::{self, Entry};
use infra::git::{CommitId, GitError, TreeEdit};
use infra::lock::LockGuard;
use infra::time::Timestamp;

use crate::Env;
use crate::agents::runtime::Runtime;
use crate::agents::{self, AgentError, Child};
use crate::store::snapshot::{self, Loader, SnapshotError};
use crate::store::workspace::{Workspace, WorkspaceError};

/// The mark of an agent with a compaction in flight (`refs/offshoot/compacting/<id>`,
/// the compactor's id); removed when its result is landed or let go.
pub(crate) const COMPACTING: &str = Mark::Compacting.kind();

/// The mark of the passes started since an agent's last landing
/// (`refs/offshoot/compaction-passes/<id>`: `<its own steps when the last started>
/// <how many>`); a landing records the count in the ledger and removes the mark.
pub(crate) const PASSES: &str = Mark::CompactionPasses.kind();

/// The passes started for `id` since its last landing: its own steps when the last one
/// started, and how many there were.
pub(crate) fn passes(ws: &Workspace, id: &AgentId) -> Result<Option<(u32, u32)>> {
    let Some(mark) = ws.repo.mark(PASSES, id.as_str())? else { return Ok(None) };
    let text = String::from_utf8_lossy(&mark).into_owned();
    let mut parts = text.split_whitespace().map(str::parse::<u32>);
    Ok(match (parts.next(), parts.next()) {
        (Some(Ok(steps)), Some(Ok(count))) => Some((steps, count)),
        _ => None,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    #[error("compaction {number} of `{agent}` is undone already: everything it removed is back")]
    Undone { agent: String, number: u32 },
    #[error("agent `{0}` does not exist")]
    Unknown(String),
    #[error("`{0}` is a compactor; compactors are never compacted")]
    OfCompactor(String),
    #[error("agent `{agent}` already has a compaction in flight (`{compactor}`)")]
    InFlight { agent: String, compactor: String },
    #[error("agent `{agent}` has nothing to compact yet: {why}")]
    Nothing { agent: String, why: String },
    #[error("agent `{agent}` {}", no_landing(*number, *have))]
    NoLanding { agent: String, number: u32, have: usize },
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("agent `{agent}` cannot be changed now: {reason}")]
    Busy {
        agent: String,
        #[source]
        reason: Cause,
    },
    #[error("cannot start compactor `{id}`: {reason}")]
    Launch {
        id: AgentId,
        #[source]
        reason: Cause,
    },
}

/// Which compaction an agent lacks, said for what it has: none at all, or how many.
fn no_landing(number: u32, have: usize) -> String {
    match have {
        0 => "has no compaction: nothing has been compacted to undo or show".to_owned(),
        _ => format!(
            "has no compaction {number}; it has {}",
            infra::words::count(have as u64, "compaction", "compactions")
        ),
    }
}

type Result<T> = std::result::Result<T, CompactionError>;

/// A compaction that was started.
#[derive(Debug, Clone)]
pub struct Started {
    pub compactor: AgentId,
    /// The transcript entries its landing would remove.
    pub entries: usize,
}

/// Starts a compactor for `id`, forked at the newest step boundary that leaves
/// `keep_recent_steps` model outputs after it (never before the agent's own dispatch
/// or its last landing), and launches it.
pub fn start(ws: &Workspace, rt: &Runtime, id: &AgentId, focus: Option<&str>, env: &Env) -> Result<Started> {
    let tip = ws.repo.branch_tip(&id.branch())?.ok_or_else(|| CompactionError::Unknown(id.to_string()))?;
    let facts = snapshot::read_facts(&ws.repo, tip)?;
    if facts.role == domain::grant::COMPACTOR {
        return Err(CompactionError::OfCompactor(id.to_string()));
    }
    if let Some(compactor) = in_flight(ws, id)? {
        return Err(CompactionError::InFlight { agent: id.to_string(), compactor: compactor.to_string() });
    }
    let (_, config) = ws.config(&facts.lineage)?;
    let fits = compactor_fits(&config);
    let fork = fork_point(ws, id, tip, config.compaction.keep_recent_steps, &fits)?;
    let names: Vec<String> = ws.repo.list_dir(fork, agent::MESSAGES)?.into_iter().map(|e| e.name).collect();
    let entries = compaction::span_removals(names.iter().map(String::as_str), keep_user(&config)).len();
    if entries == 0 {
        let why = "the span before the steps it keeps holds only what is never removed".to_owned();
        return Err(CompactionError::Nothing { agent: id.to_string(), why });
    }
    let own_goal = ws.repo.read_file(tip, agent::GOAL)?.unwrap_or_default();
    let goal = compaction::goal(id.as_str(), facts.name.as_deref(), &String::from_utf8_lossy(&own_goal), focus);
    let from = fork.to_string();
    let child = Child {
        role: domain::grant::COMPACTOR,
        goal: &goal,
        name: None,
        from: Some(&from),
        now: Timestamp::now(),
        random: crate::random_u32(),
        env,
        compactor: true,
        key: None,
    };
    let compactor = agents::create_child(ws, id, &child)?;
    ws.repo.set_mark(COMPACTING, id.as_str(), compactor.as_str().as_bytes())?;
    // One more pass since the last landing, started at this many steps of the agent's.
    let steps = snapshot::next_step(&ws.layout.steps(id)).saturating_sub(1);
    let landed = landed_steps(ws, id, tip)?;
    let before = passes(ws, id)?.filter(|(at, _)| *at >= landed).map_or(0, |(_, n)| n);
    ws.repo.set_mark(PASSES, id.as_str(), format!("{steps} {}", before + 1).as_bytes())?;
    // (Stopped while it was made, it waits like any stopped agent; in_flight lets it go.)
    if ws.repo.mark(crate::agents::lifecycle::STOPPED, compactor.as_str())?.is_none() {
        rt.wake(&compactor).map_err(|e| CompactionError::Launch { id: compactor.clone(), reason: e.into() })?;
    }
    Ok(Started { compactor, entries })
}

/// Agent `id`'s own steps at its own last landing on `tip` (0 before any).
fn landed_steps(ws: &Workspace, id: &AgentId, tip: CommitId) -> Result<u32> {
    let ledger = ws.repo.read_file(tip, compaction::LEDGER)?.unwrap_or_default();
    Ok(compaction::own_landed_steps(&compaction::parse_ledger(&String::from_utf8_lossy(&ledger)), id.as_str()))
}

/// The compactor working for `id`, if one is: its mark names an agent that exists
/// and was not stopped (a stopped compactor lands nothing unless a message revives
/// it; a new compaction may start meanwhile).
pub fn in_flight(ws: &Workspace, id: &AgentId) -> Result<Option<AgentId>> {
    let Some(mark) = ws.repo.mark(COMPACTING, id.as_str())? else { return Ok(None) };
    let Ok(compactor) = AgentId::parse(&String::from_utf8_lossy(&mark)) else { return Ok(None) };
    let stopped = ws.repo.mark(crate::agents::lifecycle::STOPPED, compactor.as_str())?.is_some();
    Ok(ws.repo.branch_tip(&compactor.branch())?.filter(|_| !stopped).map(|_| compactor))
}

/// Whether the user's own messages stay through a landing.
fn keep_user(config: &Config) -> bool {
    !config.compaction.drop_user_messages
}

/// Whether a compactor's request holding a transcript of that many bytes fits the
/// compactor role's window, with room for its goal, soul and tools and its answer.
fn compactor_fits(config: &Config) -> impl Fn(u64) -> bool + use<> {
    /// What a compactor's request holds besides the inherited transcript, in tokens.
    const OVERHEAD: u64 = 4_000;
    let role = config.role(domain::grant::COMPACTOR);
    let window = role.and_then(|r| r.context_window);
    let answer = role.map(|r| u64::from(r.max_output_tokens)).unwrap_or(0);
    move |bytes| window.is_none_or(|w| domain::context::request_tokens(bytes, None) + OVERHEAD + answer <= w)
}

/// The newest commit of `id`'s own history (first parents, not below its dispatch
/// commit or its last landing) at a step boundary with `keep` model outputs after it,
/// whose transcript a compactor's request can hold (`fits`, by its size in bytes): a
/// compaction started late forks further back and compacts less, never fails for it.
fn fork_point(ws: &Workspace, id: &AgentId, tip: CommitId, keep: u32, fits: &dyn Fn(u64) -> bool) -> Result<CommitId> {
    let nothing = |why: &str| CompactionError::Nothing { agent: id.to_string(), why: why.to_owned() };
    let mut loader = Loader::default();
    let mut sizes = std::collections::HashMap::new();
    let outputs = |entries: &[Entry]| entries.iter().filter(|e| matches!(e, Entry::Output { .. })).count();
    let total = outputs(loader.entries(&ws.repo, tip)?);
    let mut at = tip;
    loop {
        let entries = loader.entries(&ws.repo, at)?;
        if transcript::unanswered_calls(entries).is_empty() && total - outputs(entries) >= keep as usize {
            let mut bytes = 0;
            for e in ws.repo.list_dir(at, agent::MESSAGES)? {
                bytes += match sizes.get(&e.oid) {
                    Some(len) => *len,
                    None => *sizes.entry(e.oid).or_insert(ws.repo.blob_len(e.oid)?),
                };
            }
            if fits(bytes) {
                return Ok(at);
            }
        }
        let Some(parent) = ws.repo.first_parent(at)? else {
            return Err(nothing("its whole history is within the steps it keeps"));
        };
        // Its own dispatch commit, or a landing: the span may not reach below.
        let changed =
            |path: &str| -> Result<bool> { Ok(ws.repo.entry_id(at, path)? != ws.repo.entry_id(parent, path)?) };
        if changed(agent::FACTS)? || changed(compaction::LEDGER)? {
            return Err(nothing("everything since its start or its last compaction is within the steps it keeps"));
        }
        at = parent;
    }
}

/// What landing a compactor's result changes on the agent's branch.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    /// The tree edits, applied in one commit on the tip.
    pub(crate) edits: Vec<TreeEdit>,
    /// Files under `.offshoot/` that leave, and that are written.
    pub(crate) harness_removed: Vec<String>,
    pub(crate) harness_written: Files,
    /// Work products that leave (checked out from the landing commit).
    pub(crate) work_removed: Vec<String>,
    /// Nominated paths kept because the agent changed them after the fork.
    pub(crate) kept: Vec<String>,
    pub(crate) landing: Option<Landing>,
    pub(crate) entries_removed: usize,
}

/// Plans landing the result of `compactor` (ended at `terminal`) on `tip`: `None`
/// when it lands nothing (it wrote no summary, or this compactor already landed).
pub(crate) fn plan_landing(
    ws: &Workspace,
    tip: CommitId,
    compactor: &str,
    terminal: CommitId,
    config: &Config,
    steps: u32,
    passes: u32,
) -> Result<Option<Plan>> {
    let ledger = String::from_utf8_lossy(&ws.repo.read_file(tip, compaction::LEDGER)?.unwrap_or_default()).into_owned();
    let landed = compaction::parse_ledger(&ledger);
    if landed.iter().any(|l| l.compactor == compactor) {
        return Ok(None);
    }
    let facts = snapshot::read_facts(&ws.repo, terminal)?;
    let Some(fork) = facts.forked_from.as_deref().and_then(|f| CommitId::from_str(f).ok()) else { return Ok(None) };
    let at_fork: BTreeSet<String> = ws
        .repo
        .list_dir(fork, agent::SUMMARIES)?
        .into_iter()
        .map(|e| format!("{}/{}", agent::SUMMARIES, e.name))
        .collect();
    let summary = ws
        .repo
        .list_dir(terminal, agent::SUMMARIES)?
        .into_iter()
        .map(|e| format!("{}/{}", agent::SUMMARIES, e.name))
        .find(|p| !at_fork.contains(p));
    let Some(summary) = summary else { return Ok(None) };
    let text = ws.repo.read_file(terminal, &summary)?.unwrap_or_default();
    let mut plan = Plan::default();
    // The span: the transcript the compactor inherited, less what always stays.
    let names: Vec<String> = ws.repo.list_dir(fork, agent::MESSAGES)?.into_iter().map(|e| e.name).collect();
    for name in compaction::span_removals(names.iter().map(String::as_str), keep_user(config)) {
        let path = format!("{}/{name}", agent::MESSAGES);
        if ws.repo.entry_id(tip, &path)?.is_some() {
            plan.edits.push(TreeEdit::Remove { path: path.clone() });
            plan.harness_removed.push(path);
            plan.entries_removed += 1;
        }
    }
    // The nominations, less what the live branch changed since the fork.
    let nominated = ws.repo.read_file(terminal, compaction::NOMINATED)?.unwrap_or_default();
    for path in String::from_utf8_lossy(&nominated).lines().filter(|l| !l.is_empty()) {
        let now = ws.repo.entry_id(tip, path)?;
        if now.is_none() || path == summary {
            continue;
        }
        if now != ws.repo.entry_id(fork, path)? {
            plan.kept.push(path.to_owned());
            continue;
        }
        plan.edits.push(TreeEdit::Remove { path: path.to_owned() });
        if path.starts_with(&format!("{}/", agent::DIR)) {
            plan.harness_removed.push(path.to_owned());
        } else {
            plan.work_removed.push(path.to_owned());
        }
    }
    // The summary keeps its number unless the branch already has one by that name.
    let summary = if ws.repo.entry_id(tip, &summary)?.is_some() {
        let taken = ws.repo.list_dir(tip, agent::SUMMARIES)?;
        let last = taken.iter().filter_map(|e| e.name.strip_suffix(".md")?.parse::<u32>().ok()).max().unwrap_or(0);
        format!("{}/{:04}.md", agent::SUMMARIES, last + 1)
    } else {
        summary
    };
    let landing = Landing {
        number: landed.len() as u32 + 1,
        compactor: compactor.to_owned(),
        summary: summary.clone(),
        steps,
        passes,
    };
    let ledger = compaction::append_ledger(&ledger, &landing);
    for (path, bytes) in [(summary, text), (compaction::LEDGER.to_owned(), ledger.into_bytes())] {
        plan.edits.push(TreeEdit::Write { path: path.clone(), bytes: bytes.clone() });
        plan.harness_written.push((path, bytes));
    }
    plan.landing = Some(landing);
    Ok(Some(plan))
}

/// Files as (path, bytes).
type Files = Vec<(String, Vec<u8>)>;

/// A landed compaction as the branch's history tells it.
#[derive(Debug, Clone)]
pub struct Landed {
    pub landing: Landing,
    /// Its commit, and the commit before it.
    pub commit: CommitId,
    pub(crate) before: CommitId,
    /// The paths it removed (transcript entries first, by number), and the summary's text.
    pub removed: Vec<String>,
    pub summary: String,
}

/// Every landing of `id`'s ledger, oldest first, with what it removed.
pub fn landed(ws: &Workspace, id: &AgentId) -> Result<Vec<Landed>> {
    let tip = ws.repo.branch_tip(&id.branch())?.ok_or_else(|| CompactionError::Unknown(id.to_string()))?;
    let ledger = ws.repo.read_file(tip, compaction::LEDGER)?.unwrap_or_default();
    let mut out = Vec::new();
    for landing in compaction::parse_ledger(&String::from_utf8_lossy(&ledger)) {
        let Some((commit, before)) = landing_commit(ws, tip, landing.number)? else { continue };
        let mut removed = Vec::new();
        for (path, _) in ws.repo.list_files(before, "")? {
            if ws.repo.entry_id(commit, &path)?.is_none() {
                removed.push(path);
            }
        }
        let summary = ws.repo.read_file(commit, &landing.summary)?.unwrap_or_default();
        out.push(Landed { landing, commit, before, removed, summary: String::from_utf8_lossy(&summary).into_owned() });
    }
    Ok(out)
}

/// The commit that landed compaction `number` (the first, walking back from `tip`,
/// whose ledger holds it) and the commit before it.
fn landing_commit(ws: &Workspace, tip: CommitId, number: u32) -> Result<Option<(CommitId, CommitId)>> {
    let holds = |commit: CommitId| -> Result<bool> {
        let text = ws.repo.read_file(commit, compaction::LEDGER)?.unwrap_or_default();
        Ok(compaction::parse_ledger(&String::from_utf8_lossy(&text)).iter().any(|l| l.number == number))
    };
    if !holds(tip)? {
        return Ok(None);
    }
    let mut at = tip;
    loop {
        let Some(parent) = ws.repo.first_parent(at)? else { return Ok(None) };
        if !holds(parent)? {
            return Ok(Some((at, parent)));
        }
        at = parent;
    }
}

/// What undoing landing `number` (the last when `None`) of `id` restores: the files it
/// removed, as the commit before it had them (those present again since are left).
pub(crate) fn plan_uncompact(ws: &Workspace, id: &AgentId, number: Option<u32>) -> Result<(Landing, Files)> {
    let tip = ws.repo.branch_tip(&id.branch())?.ok_or_else(|| CompactionError::Unknown(id.to_string()))?;
    let all = landed(ws, id)?;
    let wanted = number.unwrap_or(all.len() as u32);
    let Some(landed) = all.iter().find(|l| l.landing.number == wanted) else {
        return Err(CompactionError::NoLanding { agent: id.to_string(), number: wanted, have: all.len() });
    };
    let mut restored = Vec::new();
    for path in &landed.removed {
        if ws.repo.entry_id(tip, path)?.is_none()
            && let Some(bytes) = ws.repo.read_file(landed.before, path)?
        {
            restored.push((path.clone(), bytes));
        }
    }
    Ok((landed.landing.clone(), restored))
}

/// Undoes landing `number` (the last when `None`) of `id`: what it removed comes back
/// in one new commit (the summary stays). Holds the agent's lock meanwhile, so it is
/// refused while a driver runs the agent.
pub fn uncompact(ws: &Workspace, id: &AgentId, number: Option<u32>) -> Result<(Landing, usize)> {
    let Some(_lock) = LockGuard::try_acquire(&ws.layout.lock(id))
        .map_err(|e| CompactionError::Busy { agent: id.to_string(), reason: e.into() })?
    else {
        return Err(CompactionError::Busy { agent: id.to_string(), reason: "a driver is running it".into() });
    };
    let (landing, restored) = plan_uncompact(ws, id, number)?;
    let tip = ws.repo.branch_tip(&id.branch())?.ok_or_else(|| CompactionError::Unknown(id.to_string()))?;
    if restored.is_empty() {
        return Err(CompactionError::Undone { agent: id.to_string(), number: landing.number });
    }
    let edits: Vec<TreeEdit> =
        restored.iter().map(|(path, bytes)| TreeEdit::Write { path: path.clone(), bytes: bytes.clone() }).collect();
    let message = format!("uncompact {}: {} files back", landing.number, restored.len());
    let commit = ws.repo.commit_edits(&[tip], Some(tip), &edits, &message)?;
    ws.repo.move_branch(&id.branch(), commit, tip, &message)?;
    let facts = snapshot::read_facts(&ws.repo, commit)?;
    let (dir, _) = crate::store::directory::open(ws, id, &facts, commit)?;
    let harness = format!("{}/", agent::DIR);
    let (inside, outside): (Vec<_>, Vec<_>) = restored.iter().cloned().partition(|(p, _)| p.starts_with(&harness));
    dir.put_harness_files(&[], &inside)?;
    dir.checkout_paths(commit, &outside.into_iter().map(|(p, _)| p).collect::<Vec<_>>())?;
    dir.reset_index(commit)?;
    dir.save_index(commit)?;
    Ok((landing, restored.len()))
}
