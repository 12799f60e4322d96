//! The driver: the step loop of one agent, under its lock.
//!
//! Each turn of the loop reads the branch tip and does the first thing due:
//! settle calls a crash left without results, deliver the inbox, or — when the
//! transcript ends on the user or tool side — assemble the request from the tip,
//! call the model, commit its output and run its tool calls, one commit each. When
//! nothing is due it releases the lock and re-checks the inbox, so a message that
//! arrived during the release is never stranded. Disk is the truth: a driver killed
//! at any instruction is continued by the next one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use serde_json::{Value, json};

use crate::domain::agent::{self, AgentFacts};
use crate::domain::compaction;
use crate::domain::config::{Config, RoleConfig};
use crate::domain::context;
use crate::domain::grant;
use crate::domain::id::AgentId;
use crate::domain::inbox::{Deposit, Header};
use crate::domain::results::{self, Reply};
use crate::domain::tool_env::{self, Identity, Placement};
use crate::domain::transcript::{self, Entry, Side};
use crate::infra::git::{Additions, CommitId, GitError, Merged, Scan, Staged, Tracked};
use crate::infra::lock::{LockError, LockGuard};
use crate::infra::process;
use crate::infra::provider::transport::{AttemptRecord, Observer as CallObserver};
use crate::infra::provider::{Block, Delta, Output, Usage, sse};
use crate::infra::redact::Redactor;
use crate::infra::sandbox::{self, Confinement, Jail, SandboxError};
use crate::infra::time::Timestamp;
use crate::infra::tools::PathPolicy;
use crate::infra::tools::{Commands, RecordDir, ToolEnv};
use std::sync::Arc;

use super::agents;
use super::budget::{self, Records};
use super::compaction as compaction_engine;
use super::containment::{self, Site};
use super::directory::{self, Repair};
use super::events;
use super::guard::{self, Due, Guard, WorkWatch};
use super::inbox::{self, InboxError};
use super::interrupt::Reason;
use super::model::{self, ModelError};
use super::runtime::Runtime;
use super::scanned::Scanned;
use super::snapshot::{Loader, SnapshotError};
use super::toolcall::{self, ToolCallError};
use super::tools::{self, AgentContext, ToolContext};
use super::workspace::{Workspace, WorkspaceError};

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("agent `{0}` does not exist")]
    Unknown(String),
    #[error("cannot wake agent `{id}`: {reason}")]
    Wake { id: String, reason: String },
    #[error("cannot stop the agents below `{id}`: {reason}")]
    StopBelow { id: String, reason: String },
    #[error("cannot land the compaction of `{compactor}`: {reason}")]
    Landing { compactor: String, reason: String },
    #[error("cannot check the compactions of `{id}`: {reason}")]
    Compaction { id: String, reason: String },
    #[error(
        "agent `{id}`'s context is full: its next request needs about {estimate} tokens plus {output} for the answer, over the {window}-token window of role `{role}`; nothing was sent"
    )]
    ContextFull { id: String, role: String, estimate: u64, output: u32, window: u64 },
    #[error("agent `{id}`'s summary `{path}` holds a merge-conflict marker (`{line}`); it is not sent to the model")]
    Conflicted { id: String, path: String, line: String },
    #[error("agent `{id}` was {}", reason.words())]
    Interrupted { id: String, reason: Reason },
    #[error("agent `{id}` was stopped: its budget is exhausted ({spend})")]
    Exhausted { id: String, spend: String },
    #[error("role `{role}` cannot run its tools: {source}; the agent was not started")]
    Sandbox { role: String, source: SandboxError },
    #[error("agent `{id}` is damaged: {reason}")]
    Damaged { id: String, reason: String },
    #[error("role `{role}` of agent `{id}` no longer exists in config lineage `{lineage}`")]
    RoleGone { id: String, role: String, lineage: String },
    #[error("step {step} of agent `{id}` failed: {source}")]
    Model { id: String, role: String, step: u32, source: ModelError },
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Inbox(#[from] InboxError),
    #[error(transparent)]
    Tool(#[from] ToolCallError),
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

type Result<T> = std::result::Result<T, DriverError>;

/// The mark holding an agent's working directory (`refs/offshoot/cwd/<id>`).
const CWD_MARK: &str = "cwd";
/// The mark holding the terminal commit whose answer was deposited.
pub const REPLIED: &str = "replied";
/// The mark naming a child whose work conflicted (`refs/offshoot/conflicted/<child>`).
const CONFLICTED: &str = "conflicted";
/// The epitaph of a result that is an agent's final response.
const FINAL_RESPONSE: &str = "final-response";
/// The epitaph of an agent that was stopped.
const EPITAPH_STOPPED: &str = "stopped";
/// The epitaph of an agent stopped because its tree's budget ran out.
const EPITAPH_EXHAUSTED: &str = "budget-exhausted";
/// The mark of an agent stopped because its tree's budget ran out
/// (`refs/offshoot/exhausted/<id>`, what was spent); cleared when it is revived.
pub const EXHAUSTED: &str = "exhausted";
/// The mark of the tip whose stop an agent's parent was told of (`refs/offshoot/told/<id>`).
const TOLD: &str = "told";
/// The mark of a stopped agent (`refs/offshoot/stopped/<id>`, the tip it stopped at):
/// results and other agents' messages wait for it instead of waking it, until the
/// user's message or a run revives it.
pub const STOPPED: &str = "stopped";

/// What a driver reports as it works (the cli turns these into output).
#[derive(Debug)]
pub enum Event<'a> {
    Delivered {
        sender: &'a str,
    },
    Settled {
        tool_use_id: &'a str,
    },
    StepStarted {
        step: u32,
        provider: &'a str,
        model: &'a str,
    },
    Delta(&'a Delta),
    /// A model call ended: what it used and, at the configured price, cost.
    Usage {
        step: u32,
        usage: &'a Usage,
        cost_usd: Option<f64>,
    },
    AttemptFailed {
        attempt: u32,
        error: &'a str,
        retry_in_ms: Option<u64>,
    },
    ToolStarted {
        /// The model's id for the call (`tool_use_id`).
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    ToolFinished {
        id: &'a str,
        name: &'a str,
        is_error: bool,
        summary: &'a str,
    },
    /// The agent's directory needed mending before the driver could start.
    Repaired(Repair),
    /// Something the user should know before the agent runs commands (they run
    /// unconfined, or with less confinement than asked for on this machine).
    Warning(&'a str),
    /// A child's work was merged in before its result.
    Transferred {
        child: &'a str,
        files: usize,
    },
    /// A child's work conflicts with this agent's and was not merged.
    Conflicted {
        child: &'a str,
        files: usize,
    },
    /// Nothing is due, but children are still at work: the driver waits for them.
    Waiting {
        children: usize,
    },
    /// A compaction of this agent `started`, `landed`, or ended without landing
    /// (`declined`); `note` says what it did.
    Compaction {
        compactor: &'a str,
        outcome: &'a str,
        note: &'a str,
    },
}

pub trait Observer {
    fn event(&mut self, event: Event<'_>);
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// The agent answered; nothing is due until someone writes to it.
    Answered { text: String },
    /// Another driver holds the lock (it will drain the inbox).
    Busy,
}

enum Turn {
    Again,
    Quiet(RunEnd),
}

/// Runs `id` until nothing is due (and nothing below it is at work). Its events also
/// go to `steps/<id>/events.ndjson`, ending with an `end` event.
pub fn run(ws: &Workspace, rt: &Runtime, id: &AgentId, observer: &mut dyn Observer) -> Result<RunEnd> {
    // Processes a command leaves behind become ours, and are ended after the call.
    process::become_subreaper();
    let lock_path = ws.layout.lock(id);
    let Some(lock) = LockGuard::try_acquire(&lock_path)? else {
        return Ok(RunEnd::Busy);
    };
    // Only this agent's driver writes its branch: a lock file there now was left by a
    // driver killed in the middle of a ref update, and would stop every commit.
    ws.repo.remove_branch_lock(&id.branch());
    let mut index_lock = ws.layout.index(id).into_os_string();
    index_lock.push(".lock");
    let _ = std::fs::remove_file(index_lock);
    let mut logged = events::Logged::new(&ws.layout.steps(id), id.as_str(), observer);
    let mut held = Some(lock);
    let result = run_locked(ws, rt, id, &mut held, &mut logged);
    if let Err(e) = &result {
        logged.end(end_event(Err(e)));
    }
    // (The end is logged before the lock is let go: whoever waits for the lock to be
    // free has all of this driver's events.)
    drop(held);
    result
}

/// The `end` event of a driver's run.
pub fn end_event(result: std::result::Result<&RunEnd, &DriverError>) -> Value {
    match result {
        Ok(RunEnd::Answered { text }) => json!({"type": "end", "outcome": "final-response", "text": text}),
        Ok(RunEnd::Busy) => json!({"type": "end", "outcome": "busy"}),
        Err(DriverError::Exhausted { spend, .. }) => {
            json!({"type": "end", "outcome": "budget-exhausted", "error": spend})
        }
        Err(DriverError::Interrupted { reason, .. }) => {
            json!({"type": "end", "outcome": "interrupted", "reason": reason.words()})
        }
        Err(e) => json!({"type": "end", "outcome": "error", "error": e.to_string()}),
    }
}

/// The rounds of a driver that holds the lock (`lock`, let go and taken again when
/// mail came in between).
fn run_locked(
    ws: &Workspace,
    rt: &Runtime,
    id: &AgentId,
    lock: &mut Option<LockGuard>,
    observer: &mut events::Logged<'_>,
) -> Result<RunEnd> {
    let lock_path = ws.layout.lock(id);
    // A driver that starts is the agent revived. A stop mark set from here on is a
    // stop on its way (its signal may come after mail the stopper sent).
    ws.repo.delete_mark(STOPPED, id.as_str())?;
    ws.repo.delete_mark(EXHAUSTED, id.as_str())?;
    let mut again = false;
    loop {
        if again && ws.repo.mark(STOPPED, id.as_str())?.is_some() {
            return Err(stopped_at_tip(ws, rt, id)?);
        }
        again = true;
        let end = drive(ws, rt, id, observer)?;
        // Children still at work: the agent (and an attached command) stays until
        // they are quiet or one writes to it.
        match wait_for_descendants(ws, rt, id, observer) {
            Ok(true) => continue,
            Ok(false) => {}
            Err(DriverError::Interrupted { reason: Reason::Stopped, .. }) => return Err(stopped_at_tip(ws, rt, id)?),
            Err(DriverError::Interrupted { reason: Reason::User, .. }) => return Err(interrupted_by_user(ws, rt, id)?),
            Err(e) => return Err(e),
        }
        observer.end(end_event(Ok(&end)));
        lock.take();
        // The lost wake-up: a deposit that landed while we held the lock.
        if !inbox::has_pending(&ws.layout, id) {
            return Ok(end);
        }
        match LockGuard::try_acquire(&lock_path)? {
            Some(again) => *lock = Some(again),
            None => return Ok(end),
        }
    }
}

/// Waits while any descendant of `id` is at work and nothing came for `id`;
/// `true` if something came.
fn wait_for_descendants(ws: &Workspace, rt: &Runtime, id: &AgentId, observer: &mut dyn Observer) -> Result<bool> {
    let mut announced = false;
    loop {
        if inbox::has_pending(&ws.layout, id) {
            return Ok(true);
        }
        if let Some(reason) = rt.interrupt().reason() {
            return Err(DriverError::Interrupted { id: id.to_string(), reason });
        }
        let active = active_descendants(ws, id)?;
        if active == 0 {
            return Ok(false);
        }
        if !announced {
            observer.event(Event::Waiting { children: active });
            announced = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
}

/// How many descendants of `id` are at work: a driver holds them, or mail for them
/// is on its way to one (mail left unread for longer than that means their driver
/// did not start; they are not waited for).
fn active_descendants(ws: &Workspace, id: &AgentId) -> Result<usize> {
    const UNREAD_FOR: std::time::Duration = std::time::Duration::from_secs(10);
    let mut active = 0;
    for descendant in agents::descendants(ws, id)? {
        let held = LockGuard::is_held(&ws.layout.lock(&descendant))?;
        let fresh_mail = || {
            inbox::pending(&ws.layout, &descendant).ok().and_then(|p| p.into_iter().next()).is_some_and(|oldest| {
                std::fs::metadata(&oldest.path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age < UNREAD_FOR)
            })
        };
        if held || fresh_mail() {
            active += 1;
        }
    }
    Ok(active)
}

/// Turns the loop under a held lock until nothing is due; leaves the index synced.
fn drive(ws: &Workspace, rt: &Runtime, id: &AgentId, observer: &mut dyn Observer) -> Result<RunEnd> {
    let (mut driver, repairs) = Driver::open(ws, rt, id)?;
    for repair in repairs {
        observer.event(Event::Repaired(repair));
    }
    for warning in driver.warnings()? {
        observer.event(Event::Warning(&warning));
    }
    let result = loop {
        match driver.turn(observer) {
            Ok(Turn::Again) => continue,
            Ok(Turn::Quiet(end)) => break Ok(end),
            Err(e) => break Err(e),
        }
    };
    let synced = driver.tip().and_then(|tip| Ok(driver.dir.save_index(tip)?));
    let result = match result {
        Err(DriverError::Interrupted { reason: Reason::Stopped, .. }) => {
            Err(stopped(ws, rt, id, driver.facts.parent.as_deref(), driver.tip()?)?)
        }
        Err(DriverError::Exhausted { spend, .. }) => Err(driver.exhaust(&spend)?),
        Err(DriverError::Interrupted { reason: Reason::User, .. }) => Err(interrupted_by_user(ws, rt, id)?),
        other => other,
    };
    let end = result?;
    synced?;
    Ok(end)
}

/// Runs an agent just created by a prompt; if its very first model call fails, the
/// agent is removed again so a failed prompt leaves nothing behind.
pub fn run_fresh(ws: &Workspace, rt: &Runtime, id: &AgentId, observer: &mut dyn Observer) -> Result<RunEnd> {
    let result = run(ws, rt, id, observer);
    // An answer cut off at the output limit is kept to look at (`show --step 1`), and the
    // agent goes on once the limit is raised.
    let cut_off = matches!(&result, Err(DriverError::Model { source, .. }) if source.is_truncated());
    if let Err(DriverError::Model { .. }) = &result
        && !cut_off
    {
        let tip = ws.repo.branch_tip(&id.branch()).ok().flatten();
        let progressed = tip
            .and_then(|t| {
                Loader::default().entries(&ws.repo, t).map(|e| e.iter().any(|e| e.side() == Side::Assistant)).ok()
            })
            .unwrap_or(false);
        if !progressed {
            agents::discard(ws, id);
        }
    }
    result
}

struct Driver<'a> {
    ws: &'a Workspace,
    runtime: &'a Runtime,
    id: AgentId,
    branch: String,
    /// The agent's directory, as the harness tracks it.
    dir: Tracked,
    /// Puts back what tools change in `.offshoot/` and `.git`.
    guard: Guard,
    /// Which work products changed since the last scan.
    work: WorkWatch,
    /// `.offshoot/git` as the tip has it (where the agent's own git stands).
    position: String,
    loader: Loader,
    client: model::Client,
    /// The next step record number, read from disk once (we hold the lock).
    next_step: Option<u32>,
    /// `agent.toml`, immutable after dispatch.
    facts: AgentFacts,
    /// The config last parsed, by its commit (config is followed: re-read when the
    /// lineage tip moves), and whether this turn has yet to look at the lineage tip.
    config: Option<(CommitId, Rc<Config>)>,
    config_due: bool,
    /// The worktree's root with symbolic links resolved (tools report resolved paths).
    real_root: PathBuf,
    /// The workspace's root with symbolic links resolved (where git stops looking).
    real_workspace: PathBuf,
    /// The `cwd` mark's content, read once at open (only this driver writes it).
    cwd_mark: Option<String>,
    /// The jail of the role's commands, by the confinement it was built for.
    sandbox: Option<(Confinement, Arc<Jail>)>,
    /// The tree's step records read so far (for its budgets).
    records: Records,
    /// The last call's reported prompt tokens and request bytes (read from the step
    /// records once, then kept): what the next request's size is measured by.
    last_call: Option<Option<(u64, u64)>>,
    /// The agent's own step count at its last landing (from the ledger, read once).
    landed_steps: Option<u32>,
    /// Its git's last publication failed: it is tried again after the next call.
    publish_due: bool,
    /// How commands start and what file tools may touch, for the config last used.
    tools_setup: Option<ToolsSetup>,
}

/// What the tools of one config commit run with.
struct ToolsSetup {
    config: CommitId,
    commands: Commands,
    paths: Arc<PathPolicy>,
    role: RoleConfig,
}

impl<'a> Driver<'a> {
    fn open(ws: &'a Workspace, runtime: &'a Runtime, id: &AgentId) -> Result<(Driver<'a>, Vec<Repair>)> {
        let branch = id.branch();
        let tip = ws.repo.branch_tip(&branch)?.ok_or_else(|| DriverError::Unknown(id.to_string()))?;
        let facts = super::snapshot::read_facts(&ws.repo, tip)
            .map_err(|e| DriverError::Damaged { id: id.to_string(), reason: e.to_string() })?;
        // A sandbox this kernel cannot enforce stops the agent before anything runs.
        let (config_tip, config) = ws.config(&facts.lineage)?;
        if let Some(role) = config.role(&facts.role) {
            containment::check(role, runtime.env())
                .map_err(|source| DriverError::Sandbox { role: facts.role.clone(), source })?;
        }
        // Only this driver publishes the agent's shared branch: a lock file there was
        // left by a driver killed while publishing.
        ws.project.remove_branch_lock(&facts.project_branch());
        let (dir, repairs) = directory::open(ws, id, &facts, tip)?;
        let root = dir.root().to_owned();
        let position = ws.repo.read_file(tip, agent::GIT)?.unwrap_or_default();
        let guard = Guard::new(&dir);
        let work = WorkWatch::new(&dir);
        let driver = Driver {
            ws,
            runtime,
            id: id.clone(),
            branch,
            dir,
            guard,
            work,
            position: String::from_utf8_lossy(&position).into_owned(),
            loader: Loader::default(),
            client: Default::default(),
            next_step: None,
            facts,
            config: Some((config_tip, Rc::new(config))),
            config_due: false,
            real_root: std::fs::canonicalize(&root).unwrap_or_else(|_| root.clone()),
            real_workspace: std::fs::canonicalize(ws.layout.root()).unwrap_or_else(|_| ws.layout.root().to_owned()),
            cwd_mark: ws.repo.mark(CWD_MARK, id.as_str())?.map(|m| String::from_utf8_lossy(&m).into_owned()),
            sandbox: None,
            records: Records::default(),
            last_call: None,
            landed_steps: None,
            publish_due: false,
            tools_setup: None,
        };
        driver.recover(tip)?;
        Ok((driver, repairs))
    }

    /// Makes the index match the tip (work products on disk stay for the next scan;
    /// opening the directory already put `.offshoot/` back as the tip has it).
    fn recover(&self, tip: CommitId) -> Result<()> {
        self.dir.reset_index(tip)?;
        Ok(())
    }

    fn tip(&self) -> Result<CommitId> {
        self.ws.repo.branch_tip(&self.branch)?.ok_or_else(|| DriverError::Unknown(self.id.to_string()))
    }

    fn turn(&mut self, observer: &mut dyn Observer) -> Result<Turn> {
        if let Some(reason) = self.runtime.interrupt().reason() {
            return Err(DriverError::Interrupted { id: self.id.to_string(), reason });
        }
        self.config_due = true;
        let mut tip = self.tip()?;
        let entries = self.loader.entries(&self.ws.repo, tip)?;
        let mut next = transcript::next_number(entries.iter().map(Entry::number));
        let open = transcript::unanswered_calls(entries);
        // Each delivery is committed, then its inbox file removed; a crash between the
        // two leaves the oldest pending message as the transcript's last entry.
        let last_message = match entries.last() {
            Some(Entry::Message { text, .. }) => Some(text.clone()),
            _ => None,
        };

        if !open.is_empty() {
            self.settle(tip, next, &open, observer)?;
            return Ok(Turn::Again);
        }
        let mut pending = inbox::pending(&self.ws.layout, &self.id)?;
        if entries.is_empty() && pending.is_empty() {
            // Made, but its first message never deposited (its maker was killed between
            // the two): the goal the dispatch commit holds is that message.
            let goal = self.ws.repo.read_file(tip, agent::GOAL)?.unwrap_or_default();
            let from = self.facts.parent.clone().unwrap_or_else(|| "user".to_owned());
            let first = crate::domain::inbox::Deposit::new(&from, Timestamp::now(), &String::from_utf8_lossy(&goal));
            inbox::deposit(&self.ws.layout, &self.id, &first)?;
            pending = inbox::pending(&self.ws.layout, &self.id)?;
        }
        if !pending.is_empty() && !transcript::warrants_call(entries) {
            // An answer whose reply a crash cut off is owed before new mail buries it
            // (`reply` pays a debt once: the mark says which answer was paid).
            self.reply(tip)?;
        }
        if !pending.is_empty() {
            // A step boundary: what is pending now is delivered; what arrives from
            // here on waits for the next one, so a steady stream of messages cannot
            // keep the model from being called.
            (tip, next) = self.deliver(tip, next, last_message, pending, observer)?;
        }
        let entries = self.loader.entries(&self.ws.repo, tip)?;
        let warrants = transcript::warrants_call(entries);
        let final_text = transcript::final_text(entries).unwrap_or_default();
        if !warrants {
            // (Already done after the model call, unless a crash came between.)
            self.reply(tip)?;
            return Ok(Turn::Quiet(RunEnd::Answered { text: final_text }));
        }
        if let Some(spend) = self.over_budget()? {
            return Err(DriverError::Exhausted { id: self.id.to_string(), spend });
        }
        let (step, output_name, output) = match self.call(tip, next, observer) {
            Err(full @ DriverError::ContextFull { .. }) => {
                self.await_compaction(full, observer)?;
                return Ok(Turn::Again);
            }
            other => other?,
        };
        let bytes = serde_json::to_vec(&output).unwrap_or_default();
        let tip = self.commit(tip, &[(&output_name, &bytes)], false, &format!("{output_name}: model output"))?;
        let calls: Vec<toolcall::Call<'_>> =
            output.tool_uses().map(|(id, name, input)| toolcall::Call { id, name, input }).collect();
        if calls.is_empty() {
            // A final response: the answer goes to whoever it is owed to, now.
            self.reply(tip)?;
        }
        let tip = self.run_tools(tip, step, next + 1, &calls, observer)?;
        if !calls.is_empty() {
            self.maybe_compact(tip, observer)?;
        }
        Ok(Turn::Again)
    }

    /// The prompt tokens the latest of this agent's recent calls before `step` reported,
    /// with the size of the request it sent: what the next request is measured by.
    fn last_reported(&self, step: u32) -> Option<(u64, u64)> {
        (step.saturating_sub(5).max(1)..step).rev().find_map(|n| {
            let dir = self.ws.layout.step(&self.id, n);
            let meta: Value = serde_json::from_slice(&std::fs::read(dir.join("meta.json")).ok()?).ok()?;
            let tokens = meta.get("usage")?.get("input")?.as_u64()?;
            Some((tokens, std::fs::metadata(dir.join("request.json")).ok()?.len()))
        })
    }

    /// The context is full: with a trigger, a compaction is made sure of and waited
    /// for (its landing comes with the next turn); with `never`, or when nothing can be
    /// compacted, the run stops with `full`.
    fn await_compaction(&mut self, full: DriverError, observer: &mut dyn Observer) -> Result<()> {
        let (_, config) = self.config()?;
        if config.compaction.trigger == crate::domain::config::Trigger::Never || self.facts.role == compaction::ROLE {
            return Err(full);
        }
        let in_flight = compaction_engine::in_flight(self.ws, &self.id)
            .map_err(|e| DriverError::Compaction { id: self.id.to_string(), reason: e.to_string() })?;
        let compactor = match in_flight {
            Some(compactor) => compactor,
            None => match compaction_engine::start(self.ws, self.runtime, &self.id, None, self.runtime.env()) {
                Ok(started) => started.compactor,
                Err(_) => return Err(full),
            },
        };
        let note = format!("{full}; waiting for the compaction to land");
        observer.event(Event::Compaction { compactor: compactor.as_str(), outcome: "waiting", note: &note });
        while !inbox::has_pending(&self.ws.layout, &self.id) {
            if let Some(reason) = self.runtime.interrupt().reason() {
                return Err(DriverError::Interrupted { id: self.id.to_string(), reason });
            }
            // A compactor that stopped or died without a word would keep us here.
            if compaction_engine::in_flight(self.ws, &self.id).ok().flatten().is_none()
                || (!LockGuard::is_held(&self.ws.layout.lock(&compactor)).unwrap_or(false)
                    && !inbox::has_pending(&self.ws.layout, &compactor))
            {
                return Err(full);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(())
    }

    /// The model calls this agent made itself (its step records).
    fn own_steps(&self) -> u32 {
        self.next_step.unwrap_or_else(|| next_step(&self.ws.layout.steps(&self.id))).saturating_sub(1)
    }

    /// After a tool step: starts a compaction when the config's trigger is due, none is
    /// in flight and this agent is not itself a compactor (§10.1). A compaction that
    /// cannot start is reported, never fatal to the agent.
    fn maybe_compact(&mut self, tip: CommitId, observer: &mut dyn Observer) -> Result<()> {
        if self.facts.role == compaction::ROLE {
            return Ok(());
        }
        let (_, config) = self.config()?;
        if config.compaction.trigger == crate::domain::config::Trigger::Never {
            return Ok(());
        }
        let since = match self.landed_steps {
            Some(steps) => steps,
            None => {
                let ledger = self.ws.repo.read_file(tip, compaction::LEDGER)?.unwrap_or_default();
                let steps = compaction::parse_ledger(&String::from_utf8_lossy(&ledger)).last().map(|l| l.steps);
                *self.landed_steps.insert(steps.unwrap_or(0))
            }
        };
        let input = self.loader.entries(&self.ws.repo, tip)?.iter().rev().find_map(|e| match e {
            Entry::Output { output, .. } => output.usage.input,
            _ => None,
        });
        let window = config.role(&self.facts.role).and_then(|r| r.context_window);
        if !compaction::due(&config.compaction, self.own_steps(), since, input, window)
            || compaction_engine::in_flight(self.ws, &self.id)
                .map_err(|e| DriverError::Compaction { id: self.id.to_string(), reason: e.to_string() })?
                .is_some()
        {
            return Ok(());
        }
        match compaction_engine::start(self.ws, self.runtime, &self.id, None, self.runtime.env()) {
            Ok(started) => {
                let note = format!("its summary will stand for {} transcript entries", started.entries);
                observer.event(Event::Compaction {
                    compactor: started.compactor.as_str(),
                    outcome: "started",
                    note: &note,
                });
            }
            Err(compaction_engine::CompactionError::Nothing { .. }) => {}
            Err(e) => {
                let note = format!("a due compaction did not start: {e}");
                observer.event(Event::Compaction { compactor: "", outcome: "declined", note: &note });
            }
        }
        Ok(())
    }

    /// Where tools run: the `cwd` mark (relative to the worktree, or absolute
    /// outside it), or the worktree's root when unset or gone.
    fn cwd(&self) -> PathBuf {
        let root = self.dir.root().to_owned();
        match &self.cwd_mark {
            Some(rel) if root.join(rel).is_dir() => root.join(rel),
            _ => root,
        }
    }

    fn set_cwd(&mut self, dir: &Path) -> Result<()> {
        let shown = match dir.strip_prefix(&self.real_root) {
            Ok(inside) => inside.to_string_lossy().into_owned(),
            Err(_) => dir.to_string_lossy().into_owned(),
        };
        self.ws.repo.set_mark(CWD_MARK, self.id.as_str(), shown.as_bytes())?;
        self.cwd_mark = Some(shown);
        Ok(())
    }

    /// The config at the agent's lineage tip, parsed once per config commit.
    fn config(&mut self) -> Result<(CommitId, Rc<Config>)> {
        // Read once a turn: within one step every part follows the same config.
        if !std::mem::take(&mut self.config_due)
            && let Some((at, config)) = &self.config
        {
            return Ok((*at, config.clone()));
        }
        let tip = self.ws.config_tip(&self.facts.lineage)?;
        if let Some((at, config)) = &self.config
            && *at == tip
        {
            return Ok((tip, config.clone()));
        }
        let config = Rc::new(self.ws.config_at(tip)?);
        self.config = Some((tip, config.clone()));
        Ok((tip, config))
    }

    /// Answers calls a crash left open, with the directory as the tools left it,
    /// after killing whatever of theirs still runs (so nothing they do later can land
    /// in a later step).
    fn settle(
        &mut self,
        tip: CommitId,
        next: u32,
        open: &[(String, String)],
        observer: &mut dyn Observer,
    ) -> Result<()> {
        self.kill_orphans(open);
        let text = "interrupted; outcome unknown (the driver stopped while this call ran)";
        let ids: Vec<&str> = open.iter().map(|(id, _)| id.as_str()).collect();
        self.answer(tip, next, &ids, text, observer)?;
        Ok(())
    }

    /// Commits one error result `text` for each of `ids`, with the directory as it is.
    fn answer(
        &mut self,
        tip: CommitId,
        next: u32,
        ids: &[&str],
        text: &str,
        observer: &mut dyn Observer,
    ) -> Result<CommitId> {
        let mut files = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let block = Block::ToolResult { tool_use_id: (*id).to_owned(), content: text.to_owned(), is_error: true };
            let name = transcript::entry_name(next + i as u32, "tool", Side::Tool);
            files.push((name, serde_json::to_vec(&block).unwrap_or_default()));
            observer.event(Event::Settled { tool_use_id: id });
        }
        let refs: Vec<(&str, &[u8])> = files.iter().map(|(p, b)| (p.as_str(), b.as_slice())).collect();
        self.commit(tip, &refs, true, "settle interrupted tool calls")
    }

    /// Kills what a crashed driver's calls left running: each call's recorded process
    /// group, if a running member still carries this agent's marks (a recycled group
    /// number is left alone), then any other process carrying them (one started in
    /// the instant before its group was recorded, or one that left its group).
    fn kill_orphans(&self, open: &[(String, String)]) {
        let marks =
            [format!("OFFSHOOT_AGENT={}", self.id), format!("OFFSHOOT_WORKSPACE={}", self.real_workspace.display())];
        let marks: Vec<&str> = marks.iter().map(String::as_str).collect();
        let mut steps: Vec<u32> = std::fs::read_dir(self.ws.layout.steps(&self.id))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
            .collect();
        steps.sort_unstable_by(|a, b| b.cmp(a));
        for (tool_use_id, _) in open {
            let record = toolcall::record_name(tool_use_id);
            let group = steps.iter().take(3).find_map(|step| {
                let path = self.ws.layout.step(&self.id, *step).join("tools").join(&record).join("pgid");
                std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse::<u32>().ok())
            });
            if let Some(group) = group
                && process::group_carries(group, &marks)
            {
                process::kill_group(group);
                process::await_group(group, std::time::Duration::from_secs(2));
            }
        }
        process::kill_marked(&marks, std::time::Duration::from_secs(2));
    }

    /// Moves each inbox message into the transcript, oldest first, one commit each;
    /// returns the new tip and the next entry number.
    fn deliver(
        &mut self,
        mut tip: CommitId,
        mut next: u32,
        last_message: Option<String>,
        pending: Vec<inbox::Pending>,
        observer: &mut dyn Observer,
    ) -> Result<(CommitId, u32)> {
        for (i, p) in pending.into_iter().enumerate() {
            // Only the oldest can have been committed before a crash kept its file
            // (with a transfer's note after it, for a child's result).
            let delivered = i == 0 && last_message.as_deref().is_some_and(|m| m.starts_with(p.text.as_str()));
            if !delivered && self.is_compactor(&p.sender)? {
                // A compactor's result is landed (or let go), never delivered.
                tip = self.land(tip, &p.sender, &p.text, observer)?;
            } else if !delivered {
                let mut text = p.text.clone();
                // A child's final result brings its work: merged in just before it.
                if let Some(header) = Header::parse(&p.text)
                    && header.epitaph.as_deref() == Some(FINAL_RESPONSE)
                    && results::is_child(self.id.as_str(), &p.sender)
                {
                    let (after, note) = self.transfer(tip, &p.sender, header.terminal.as_deref(), observer)?;
                    tip = after;
                    text.push_str(&note);
                }
                let name = transcript::entry_name(next, &p.sender, Side::User);
                tip = self.commit(tip, &[(&name, text.as_bytes())], false, &format!("{name}: delivered"))?;
                next += 1;
                observer.event(Event::Delivered { sender: &p.sender });
            }
            std::fs::remove_file(&p.path).map_err(|source| DriverError::Io { path: p.path.clone(), source })?;
        }
        Ok((tip, next))
    }

    /// Whether `sender` is a compactor working for this agent.
    fn is_compactor(&self, sender: &str) -> Result<bool> {
        if !results::is_child(self.id.as_str(), sender) {
            return Ok(false);
        }
        let Ok(child) = AgentId::parse(sender) else { return Ok(false) };
        let Some(tip) = self.ws.repo.branch_tip(&child.branch())? else { return Ok(false) };
        Ok(super::snapshot::read_facts(&self.ws.repo, tip).is_ok_and(|f| f.role == compaction::ROLE))
    }

    /// Lands compactor `compactor`'s result `text` on `tip` as one commit (§10.4):
    /// the span's entries and the nominated paths leave (but what this agent changed
    /// since the fork), the summary comes in. A result other than a final response, or
    /// one without a summary, lands nothing. Either way the compaction is over.
    fn land(&mut self, tip: CommitId, compactor: &str, text: &str, observer: &mut dyn Observer) -> Result<CommitId> {
        let header = Header::parse(text);
        let epitaph = header.as_ref().and_then(|h| h.epitaph.clone()).unwrap_or_default();
        let terminal = header.as_ref().and_then(|h| h.terminal.as_deref()).and_then(|t| CommitId::from_str(t).ok());
        if self.ws.repo.mark(compaction_engine::COMPACTING, self.id.as_str())?.as_deref() == Some(compactor.as_bytes())
        {
            self.ws.repo.delete_mark(compaction_engine::COMPACTING, self.id.as_str())?;
        }
        let (_, config) = self.config()?;
        let plan = match terminal {
            Some(terminal) if epitaph == FINAL_RESPONSE => {
                compaction_engine::plan_landing(self.ws, tip, compactor, terminal, &config, self.own_steps())
                    .map_err(|e| DriverError::Landing { compactor: compactor.to_owned(), reason: e.to_string() })?
            }
            _ => None,
        };
        let Some(plan) = plan else {
            let note = match epitaph.as_str() {
                FINAL_RESPONSE => {
                    "it answered without writing a summary (or had landed already); nothing changed".to_owned()
                }
                other => format!("it ended `{other}`; nothing changed"),
            };
            observer.event(Event::Compaction { compactor, outcome: "declined", note: &note });
            return Ok(tip);
        };
        let Some(landing) = &plan.landing else { return Ok(tip) };
        let files = plan.harness_removed.len() + plan.work_removed.len() - plan.entries_removed;
        let message = format!(
            "compaction {} from {compactor}: {} entries and {files} files out, {} in",
            landing.number, plan.entries_removed, landing.summary
        );
        let commit = self.ws.repo.commit_edits(&[tip], Some(tip), &plan.edits, &message)?;
        self.ws.repo.move_branch(&self.branch, commit, tip, &message)?;
        let written: Vec<&str> = plan.harness_written.iter().map(|(p, _)| p.as_str()).collect();
        self.guard.expect(plan.harness_removed.iter().map(String::as_str).chain(written));
        self.dir.put_harness_files(&plan.harness_removed, &plan.harness_written)?;
        self.dir.checkout_paths(commit, &plan.work_removed)?;
        let kept = match plan.kept.len() {
            0 => String::new(),
            n => format!("; kept {n} nominated files this agent changed meanwhile: {}", plan.kept.join(", ")),
        };
        let note = format!(
            "compaction {} landed: {} transcript entries and {files} files removed, summary {}{kept}",
            landing.number, plan.entries_removed, landing.summary
        );
        observer.event(Event::Compaction { compactor, outcome: "landed", note: &note });
        self.landed_steps = Some(landing.steps);
        Ok(commit)
    }

    /// Merges child `child`'s work (its changes from its fork point to `terminal`,
    /// `.offshoot/` aside) into this agent's tree as one commit. A conflict is not
    /// forced: the child is marked `refs/offshoot/conflicted/<child>` and the note
    /// (appended to its delivered result) says so. Returns the new tip and the note.
    fn transfer(
        &mut self,
        tip: CommitId,
        child: &str,
        terminal: Option<&str>,
        observer: &mut dyn Observer,
    ) -> Result<(CommitId, String)> {
        let Some(terminal) = terminal.and_then(|t| CommitId::from_str(t).ok()) else {
            return Ok((tip, String::new()));
        };
        let base = super::snapshot::read_facts(&self.ws.repo, terminal)
            .ok()
            .and_then(|f| f.forked_from)
            .and_then(|f| CommitId::from_str(&f).ok());
        let Some(base) = base else { return Ok((tip, String::new())) };
        match self.ws.repo.merge_into(tip, base, terminal, agent::DIR)? {
            Merged::Nothing => Ok((tip, String::new())),
            Merged::Clean { tree, paths } => {
                let message = format!("transfer from {child}: {} files", paths.len());
                let commit = self.ws.repo.commit_tree_on(&self.branch, tip, tree, &message)?;
                self.dir.checkout_paths(commit, &paths)?;
                observer.event(Event::Transferred { child, files: paths.len() });
                let shown = paths.iter().take(20).map(String::as_str).collect::<Vec<_>>().join(", ");
                let more = if paths.len() > 20 { format!(" and {} more", paths.len() - 20) } else { String::new() };
                Ok((
                    commit,
                    format!("\n\n[offshoot: `{child}`'s changes were merged into your directory: {shown}{more}]"),
                ))
            }
            Merged::Conflicts(paths) => {
                self.ws.repo.set_mark(CONFLICTED, child, terminal.to_string().as_bytes())?;
                observer.event(Event::Conflicted { child, files: paths.len() });
                Ok((
                    tip,
                    format!(
                        "\n\n[offshoot: `{child}`'s changes conflict with yours in {}; nothing of them was merged. They are in its branch (commit {terminal}); merge them by hand (`git merge agents/<its name>`) or ask it to redo them]",
                        paths.join(", ")
                    ),
                ))
            }
        }
    }

    /// The whole-tree limit reached, with what was spent, if any budget is set and
    /// reached.
    fn over_budget(&mut self) -> Result<Option<String>> {
        let (_, config) = self.config()?;
        if !crate::domain::budget::any_set(&config.budgets) {
            return Ok(None);
        }
        let root = budget::root_of(&self.id);
        let (_, reached) = budget::check(&mut self.records, &self.ws.layout, &root, &config);
        Ok(reached.map(|r| format!("the tree of `{root}` {r}")))
    }

    /// The tree's budget ran out before this agent's next call: every agent of the
    /// tree is marked stopped with what was spent, this one tells its parent, and
    /// every other running driver of the tree is asked to stop (each tells its own
    /// parent as it settles).
    fn exhaust(&mut self, spend: &str) -> Result<DriverError> {
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

    /// Deposits the final response that ends the transcript at `tip` with whoever it
    /// is owed to (its last prompter, or its parent), once: the mark
    /// `refs/offshoot/replied/<id>` says which terminal commit was answered.
    fn reply(&mut self, tip: CommitId) -> Result<()> {
        let answered = self.ws.repo.mark(REPLIED, self.id.as_str())?;
        if answered.as_deref() == Some(tip.to_string().as_bytes()) {
            return Ok(());
        }
        let entries = self.loader.entries(&self.ws.repo, tip)?;
        let Some(text) = transcript::final_text(entries) else { return Ok(()) };
        if let Reply::To(recipient) = results::reply(entries, self.id.as_str(), self.facts.parent.as_deref())
            && let Ok(to) = AgentId::parse(&recipient)
        {
            deposit_result(self.ws, self.runtime, &self.id, &to, FINAL_RESPONSE, tip, text)?;
        }
        self.ws.repo.set_mark(REPLIED, self.id.as_str(), tip.to_string().as_bytes())?;
        Ok(())
    }

    /// One model call: assemble from `tip`, record, call. Commits nothing; returns
    /// the step number, the entry name for the output, and the output.
    fn call(&mut self, tip: CommitId, next: u32, observer: &mut dyn Observer) -> Result<(u32, String, Output)> {
        let facts = self.facts.clone();
        let (config_commit, config) = self.config()?;
        let role = config.role(&facts.role).ok_or_else(|| DriverError::RoleGone {
            id: self.id.to_string(),
            role: facts.role.clone(),
            lineage: facts.lineage.clone(),
        })?;
        let step = self.next_step.unwrap_or_else(|| next_step(&self.ws.layout.steps(&self.id)));
        let fail =
            |source: ModelError| DriverError::Model { id: self.id.to_string(), role: facts.role.clone(), step, source };
        let plan = model::plan(&config, &facts.lineage, &facts.role, self.runtime.env()).map_err(fail)?;
        let (_, snapshot) = self.loader.snapshot(&self.ws.repo, tip, &role.context)?;
        // A summary left with merge-conflict markers is never sent (§6.1).
        let summaries = format!("{}/", agent::SUMMARIES);
        for (path, text) in snapshot.composed.iter().filter(|(p, _)| p.starts_with(&summaries)) {
            if let Some(line) = compaction::conflict_marker(text) {
                return Err(DriverError::Conflicted {
                    id: self.id.to_string(),
                    path: path.clone(),
                    line: line.to_owned(),
                });
            }
        }
        let request = context::assemble(&snapshot, &plan.model, role.max_output_tokens, &role.context);
        let bytes = request_json(&request);
        // A request past the role's window is never sent (§10).
        if let Some(window) = role.context_window {
            let last = match self.last_call {
                Some(known) => known,
                None => self.last_reported(step),
            };
            let estimate = context::request_tokens(bytes.len() as u64, last);
            if estimate + u64::from(role.max_output_tokens) > window {
                return Err(DriverError::ContextFull {
                    id: self.id.to_string(),
                    role: facts.role.clone(),
                    estimate,
                    output: role.max_output_tokens,
                    window,
                });
            }
        }
        self.next_step = Some(step + 1);
        let dir = self.ws.layout.step(&self.id, step);
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| DriverError::Io { path, source }
        };
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let request_path = dir.join("request.json");
        std::fs::write(&request_path, &bytes).map_err(io(&request_path))?;
        let started = Timestamp::now();
        let meta_path = dir.join("meta.json");
        // On record before the call, so a step cut short by a crash still shows.
        let mut meta = json!({
            "step": step,
            "commit": tip.to_string(),
            "config": config_commit.to_string(),
            "agent": self.id.as_str(),
            "provider": plan.provider,
            "protocol": plan.config.protocol.name(),
            "model": plan.model,
            "started": started.to_string(),
            "outcome": "running",
        });
        write_atomically(&meta_path, &serde_json::to_vec_pretty(&meta).unwrap_or_default()).map_err(io(&meta_path))?;
        observer.event(Event::StepStarted { step, provider: &plan.provider, model: &plan.model });

        let response_path = dir.join("response.ndjson");
        let file = std::fs::File::create(&response_path).map_err(io(&response_path))?;
        let mut recorder = Recorder { out: std::io::BufWriter::new(file), attempts: Vec::new(), observer };
        // A call commits nothing, so a request that comes during it ends the process
        // (the receiver does that); one that came before stops here.
        let interrupt = self.runtime.interrupt();
        if !interrupt.enter_call() {
            let reason = interrupt.reason().unwrap_or(Reason::User);
            return Err(DriverError::Interrupted { id: self.id.to_string(), reason });
        }
        let result = self.client.call(self.ws, config_commit, &plan, &request, &mut recorder);
        interrupt.leave_call();
        let _ = recorder.out.flush();
        let ended = Timestamp::now();
        let entry = transcript::entry_name(next, &transcript::model_origin(&plan.model), Side::Assistant);
        let (outcome, usage, error) = match &result {
            Ok(output) => ("ok", output.usage.clone(), None),
            Err(e) => ("error", Usage::default(), Some(e.to_string())),
        };
        for (key, value) in [
            ("ended", json!(ended.to_string())),
            ("millis", json!(ended.millis_since(started))),
            ("attempts", json!(recorder.attempts)),
            ("usage", json!(usage)),
            ("outcome", json!(outcome)),
            ("error", json!(error)),
            ("entry", json!(result.as_ref().ok().map(|_| entry.clone()))),
        ] {
            meta[key] = value;
        }
        write_atomically(&meta_path, &serde_json::to_vec_pretty(&meta).unwrap_or_default()).map_err(io(&meta_path))?;
        if let Ok(output) = &result {
            if let Some(input) = output.usage.input {
                self.last_call = Some(Some((input, bytes.len() as u64)));
            }
            let cost_usd = config.prices.get(&plan.model).map(|p| crate::domain::budget::cost(&output.usage, p));
            recorder.observer.event(Event::Usage { step, usage: &output.usage, cost_usd });
        }
        result.map(|output| (step, entry, output)).map_err(fail)
    }

    /// The calls of one model output: each gated by the grant read from the config at
    /// this step, run, recorded, and committed in the order of the calls. Several calls
    /// that are all read-only run concurrently.
    fn run_tools(
        &mut self,
        mut tip: CommitId,
        step: u32,
        first: u32,
        calls: &[toolcall::Call<'_>],
        observer: &mut dyn Observer,
    ) -> Result<CommitId> {
        let (config_commit, config) = self.config()?;
        let grant = config.grant(&self.facts.role);
        let limits = &config.tool_output;
        let rules = config.role(&self.facts.role).map(|r| &r.context);
        let (commands, paths) = self.commands(config_commit, &config)?;
        let facts = self.facts.clone();
        let agent = AgentContext { runtime: self.runtime, facts: &facts, config: &config, config_commit };
        let read_only = |c: &toolcall::Call<'_>| {
            grant::allows(&grant, c.name) && tools::handler(c.name).is_some_and(|h| h.read_only())
        };
        let interrupt = self.runtime.interrupt().clone();
        if calls.len() > 1 && calls.iter().all(read_only) {
            // Read-only calls cannot move the working directory: prepare all at once.
            let prepared: Vec<Prepared> =
                calls.iter().map(|c| self.prepare(step, c, &commands, &paths)).collect::<Result<_>>()?;
            self.guard.before_call();
            for c in calls {
                observer.event(Event::ToolStarted { id: c.id, name: c.name, input: c.input });
            }
            let results: Vec<std::result::Result<toolcall::CallResult, ToolCallError>> = std::thread::scope(|scope| {
                let handles: Vec<_> =
                    calls.iter().zip(&prepared).map(|(c, p)| scope.spawn(|| p.run(c, &grant, agent, limits))).collect();
                handles.into_iter().map(|h| h.join().unwrap_or(Err(ToolCallError::Panicked))).collect()
            });
            for ((number, c), result) in (first..).zip(calls).zip(results) {
                tip = self.finish_tool(tip, number, c, result?, rules, observer)?;
            }
        } else {
            // One at a time, each prepared after the one before it (a `cd` moves the next).
            for (i, (number, c)) in (first..).zip(calls).enumerate() {
                if let Some(reason) = interrupt.reason() {
                    // Asked to stop: the calls not yet run are answered, not run.
                    let rest: Vec<&str> = calls[i..].iter().map(|c| c.id).collect();
                    let text = format!("{} before this call ran; nothing ran", reason.words());
                    self.answer(tip, number, &rest, &text, observer)?;
                    return Err(DriverError::Interrupted { id: self.id.to_string(), reason });
                }
                let p = self.prepare(step, c, &commands, &paths)?;
                self.guard.before_call();
                observer.event(Event::ToolStarted { id: c.id, name: c.name, input: c.input });
                let mut result = p.run(c, &grant, agent, limits)?;
                interrupt.command_ended();
                process::reap_strays(&self.runtime.launched());
                if let Some(reason) = interrupt.reason() {
                    cut_short(&mut result, reason);
                }
                tip = self.finish_tool(tip, number, c, result, rules, observer)?;
            }
        }
        if let Some(reason) = interrupt.reason() {
            return Err(DriverError::Interrupted { id: self.id.to_string(), reason });
        }
        Ok(tip)
    }

    /// How this step's commands start: the tool environment, output limits and the
    /// secret values hidden from their output; built once per config commit.
    fn commands(&mut self, config_commit: CommitId, config: &Config) -> Result<(Commands, Arc<PathPolicy>)> {
        if let Some(kept) = &self.tools_setup
            && kept.config == config_commit
        {
            return Ok((kept.commands.clone(), kept.paths.clone()));
        }
        let (commands, paths, role) = self.build_commands(config)?;
        self.tools_setup =
            Some(ToolsSetup { config: config_commit, commands: commands.clone(), paths: paths.clone(), role });
        Ok((commands, paths))
    }

    /// The role this agent runs with under the config of `config_commit` (its own met
    /// with its ancestors'), as [`Driver::commands`] last built it.
    fn effective_role(&mut self, config_commit: CommitId, config: &Config) -> Option<RoleConfig> {
        match &self.tools_setup {
            Some(kept) if kept.config == config_commit => Some(kept.role.clone()),
            _ => containment::effective_role(&self.ws.repo, &self.facts, config),
        }
    }

    fn build_commands(&mut self, config: &Config) -> Result<(Commands, Arc<PathPolicy>, RoleConfig)> {
        let tmpdir = self.ws.layout.tmp(&self.id);
        std::fs::create_dir_all(&tmpdir).map_err(|source| DriverError::Io { path: tmpdir.clone(), source })?;
        let name = self.facts.name.clone().unwrap_or_else(|| self.id.to_string());
        let identity = Identity::for_agent(config, &name);
        let placement = Placement {
            workspace: &self.real_workspace,
            agent: self.id.as_str(),
            identity: &identity,
            tmpdir: &tmpdir,
        };
        let vars = self.runtime.env();
        let redactor = Redactor::new(tool_env::secret_values(vars.vars(), config));
        let role = containment::effective_role(&self.ws.repo, &self.facts, config).ok_or_else(|| self.role_gone())?;
        let others = self.runtime.workspaces().and_then(|w| std::fs::canonicalize(w).ok());
        let site = Site {
            layout: &self.ws.layout,
            workspace: &self.real_workspace,
            id: &self.id,
            own: &self.real_root,
            others: others.as_deref(),
        };
        let paths = Arc::new(containment::path_policy(&site, &role));
        let confinement = containment::confinement(&site, &role);
        let env = tool_env::environment(vars.vars(), config, &placement);
        let sandbox = match confinement {
            None => None,
            Some(c) => Some(self.sandbox(c)?),
        };
        let interrupt = self.runtime.interrupt().clone();
        let commands = Commands {
            env,
            on_spawn: Some(Arc::new(move |group| interrupt.command_started(group))),
            head_bytes: config.tool_output.head_bytes,
            tail_bytes: config.tool_output.tail_bytes,
            redactor: Some(Arc::new(redactor)),
            sandbox,
            ..Commands::default()
        };
        Ok((commands, paths, role))
    }

    /// The jail for `confinement`, built once and kept while the confinement stays
    /// the same.
    fn sandbox(&mut self, confinement: Confinement) -> Result<Arc<Jail>> {
        if let Some((built_for, jail)) = &self.sandbox
            && *built_for == confinement
        {
            return Ok(jail.clone());
        }
        let abi = containment::abi(self.runtime.env());
        let support = containment::support(self.runtime.exe(), self.runtime.env());
        let landlock = sandbox::ruleset(&confinement, abi, support.namespaces.is_ok())
            .map_err(|source| DriverError::Sandbox { role: self.facts.role.clone(), source })?;
        let jail = Arc::new(Jail {
            helper: self.runtime.exe().to_owned(),
            landlock,
            namespaces: support.namespaces.is_ok(),
            network: confinement.network,
            processes: confinement.processes,
            file_bytes: confinement.file_bytes,
            read_only_but: (support.namespaces.is_ok() && support.read_only).then(|| confinement.read_write.clone()),
        });
        self.sandbox = Some((confinement, jail.clone()));
        Ok(jail)
    }

    /// What an agent about to run commands should be told of their confinement: that
    /// it has none, or what this machine cannot give it.
    fn warnings(&mut self) -> Result<Vec<String>> {
        let (_, config) = self.config()?;
        let Some(role) = containment::effective_role(&self.ws.repo, &self.facts, &config) else {
            return Ok(Vec::new());
        };
        if !role.tools.iter().any(|t| t == "bash") {
            return Ok(Vec::new());
        }
        let name = &self.facts.role;
        if role.sandbox == crate::domain::config::Sandbox::None {
            return Ok(vec![format!(
                "role `{name}` runs commands unconfined (`sandbox = \"none\"`): they can read and write whatever you can, your keys and other agents included"
            )]);
        }
        let support = containment::support(self.runtime.exe(), self.runtime.env());
        let abi = containment::abi(self.runtime.env());
        Ok(support.losses(sandbox::running_as_root(), abi).into_iter().collect())
    }

    fn role_gone(&self) -> DriverError {
        DriverError::RoleGone {
            id: self.id.to_string(),
            role: self.facts.role.clone(),
            lineage: self.facts.lineage.clone(),
        }
    }

    /// Where a call runs and where its record goes.
    fn prepare(
        &self,
        step: u32,
        call: &toolcall::Call<'_>,
        commands: &Commands,
        paths: &Arc<PathPolicy>,
    ) -> Result<Prepared> {
        let shown = format!("steps/{}/{step:04}/tools/{}", self.id, toolcall::record_name(call.id));
        Ok(Prepared {
            env: ToolEnv {
                cwd: self.cwd(),
                root: self.dir.root().to_owned(),
                commands: commands.clone(),
                record: Some(RecordDir { dir: self.ws.layout.root().join(&shown), shown }),
                paths: Some(paths.clone()),
            },
        })
    }

    /// Reports a call's result, applies a `cd`, adds context files not shown yet,
    /// and commits the result (with a worktree scan if the tool can write).
    fn finish_tool(
        &mut self,
        tip: CommitId,
        number: u32,
        call: &toolcall::Call<'_>,
        mut result: toolcall::CallResult,
        rules: Option<&crate::domain::config::ContextRules>,
        observer: &mut dyn Observer,
    ) -> Result<CommitId> {
        observer.event(Event::ToolFinished {
            id: call.id,
            name: call.name,
            is_error: result.is_error,
            summary: &result.summary,
        });
        if let Some(dir) = &result.cwd {
            self.set_cwd(dir)?;
        }
        let context = match rules {
            Some(rules) => self.unseen_context_files(tip, rules)?,
            None => Vec::new(),
        };
        let restored = self.guard.after_call(self.ws, &self.id, &self.dir, tip)?;
        let scanned = if result.writes { Some(self.stage()?) } else { None };
        if let Block::ToolResult { content, .. } = &mut result.block {
            if !restored.is_empty() {
                content.push_str(&guard::note(&restored));
            }
            if let Some(scanned) = &scanned {
                content.push_str(&scanned.note());
            }
            for (shown, text) in &context {
                content.push_str(&context::context_file_block(shown, text));
            }
        }
        let entry = transcript::entry_name(number, "tool", Side::Tool);
        let bytes = serde_json::to_vec(&result.block).unwrap_or_default();
        let harness: Vec<(&str, &[u8])> =
            result.harness_files.iter().map(|(p, b)| (p.as_str(), b.as_slice())).collect();
        let message = format!("{entry}: {} result", call.name);
        self.commit_with(tip, &[(&entry, &bytes)], &harness, scanned, &message)
    }

    /// Stages what changed in the directory since the last scan, first removing the
    /// rule files libgit2 would read that are not files (a FIFO would hold us) and
    /// leaving out files over the role's `max_commit_file_bytes`; puts back the
    /// agent's git config and hooks if it changed them; and when its git moved,
    /// publishes it to the shared repository.
    fn stage(&mut self) -> Result<Scanned> {
        let (config_commit, config) = self.config()?;
        let role = self.effective_role(config_commit, &config);
        let limit = role.as_ref().map_or(u64::MAX, |r| r.max_commit_file_bytes);
        let due = self.work.due();
        let scan = match &due {
            Due::Everything => Scan::All,
            Due::Paths(paths) => Scan::Paths(paths),
        };
        // What the agent did to its own files must not stop its driver: a check that
        // cannot be made is said, not fatal.
        let mut unchecked = Vec::new();
        let cleared = self.dir.clear_rule_files(scan).unwrap_or_else(|e| {
            unchecked.push(format!("its `.gitignore` and `.gitattributes` files ({e})"));
            Vec::new()
        });
        let staged = self.dir.stage(scan, limit)?;
        let put_back = self.ws.project.put_back_config(self.id.as_str()).unwrap_or_else(|e| {
            unchecked.push(format!("your git's config and hooks ({e})"));
            Vec::new()
        });
        let moved = self.moved_position();
        let mut unpublished = None;
        // Published when its git moved, and again after a publication that failed.
        let publish = match &moved {
            Some(text) => Some(text.as_str()),
            None if self.publish_due => Some(self.position.as_str()),
            None => None,
        };
        if let Some(position) = publish.and_then(agent::parse_position) {
            // The exporter runs in the agent's jail (made now if no command ran yet).
            let jail = match role.as_ref().map(|r| r.sandbox) {
                Some(crate::domain::config::Sandbox::WorkspaceWrite) => {
                    self.commands(config_commit, &config)?.0.sandbox
                }
                _ => None,
            };
            let own = self.facts.project_branch();
            if let Err(why) =
                directory::publish(self.ws, self.runtime.exe(), jail.as_deref(), &self.id, &position, &own)
            {
                unpublished = Some(why);
            }
            self.publish_due = unpublished.is_some();
        }
        Ok(Scanned { staged, cleared, limit, put_back, moved, unpublished, unchecked })
    }

    /// Commits transcript `entries` on top of `tip`. With `scan`, the directory's
    /// changes go in too, and where the agent's own git now stands if that moved.
    fn commit(&mut self, tip: CommitId, entries: &[(&str, &[u8])], scan: bool, message: &str) -> Result<CommitId> {
        let scanned = if scan { Some(self.stage()?) } else { None };
        self.commit_with(tip, entries, &[], scanned, message)
    }

    /// [`Driver::commit`] with other harness files (under `.offshoot/`) as well, and
    /// the directory's changes when `scanned`.
    fn commit_with(
        &mut self,
        tip: CommitId,
        entries: &[(&str, &[u8])],
        files: &[(&str, &[u8])],
        scanned: Option<Scanned>,
        message: &str,
    ) -> Result<CommitId> {
        let (staged, moved) = match scanned {
            Some(s) => (Some(s.staged), s.moved),
            None => (None, None),
        };
        let mut harness: Vec<(&str, &[u8])> = files.to_vec();
        harness.extend(moved.iter().map(|p| (agent::GIT, p.as_bytes())));
        let written: Vec<String> = entries.iter().map(|(name, _)| format!("{}/{name}", agent::MESSAGES)).collect();
        self.guard.expect(written.iter().map(String::as_str).chain(harness.iter().map(|(p, _)| *p)));
        let additions = Additions { entries, harness: &harness };
        let nothing = Staged::default();
        let commit = self.dir.commit(&self.branch, tip, &additions, staged.as_ref().unwrap_or(&nothing), message)?;
        if staged.is_some() {
            self.work.scanned();
        }
        if let Some(position) = moved {
            self.position = position;
        }
        self.loader.record(tip, commit, entries)?;
        Ok(commit)
    }

    /// `.offshoot/git` for where the agent's own git stands now, if that differs from
    /// the tip's (an admin entry the agent removed leaves the last one recorded).
    fn moved_position(&self) -> Option<String> {
        let now = agent::position_text(&self.ws.project.position(self.id.as_str()).ok()?);
        (now != self.position).then_some(now)
    }

    /// Context files (e.g. AGENTS.md) on the path from the top of the repository
    /// holding the working directory down to it, that the transcript at `tip` has not
    /// shown yet and the role does not pin.
    fn unseen_context_files(
        &mut self,
        tip: CommitId,
        rules: &crate::domain::config::ContextRules,
    ) -> Result<Vec<(String, String)>> {
        if rules.context_files.is_empty() {
            return Ok(Vec::new());
        }
        let root = self.real_root.clone();
        let cwd = self.cwd();
        let cwd = if cwd == self.dir.root() { root.clone() } else { std::fs::canonicalize(&cwd).unwrap_or(cwd) };
        let mut found = Vec::new();
        for file in discover_context_files(&cwd, &rules.context_files) {
            let name = match file.strip_prefix(&root) {
                Ok(inside) => inside.to_string_lossy().into_owned(),
                Err(_) => file.to_string_lossy().into_owned(),
            };
            if !rules.pinned.iter().any(|g| crate::domain::glob::matches(g, &name)) {
                found.push((name, file));
            }
        }
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let shown = context::shown_context_files(self.loader.entries(&self.ws.repo, tip)?);
        let mut out = Vec::new();
        for (name, file) in found {
            if shown.contains(&name) {
                continue;
            }
            if let Ok(text) = std::fs::read_to_string(&file) {
                out.push((name, text));
            }
        }
        Ok(out)
    }
}

/// Marks a call that a stop request cut short: an error, saying so before whatever
/// it printed.
fn cut_short(result: &mut toolcall::CallResult, reason: Reason) {
    result.is_error = true;
    result.summary = format!("{}; its processes were killed", reason.words());
    if let Block::ToolResult { content, is_error, .. } = &mut result.block {
        *is_error = true;
        *content = format!("{}; its processes were killed. Before that:\n{content}", reason.words());
    }
}

/// One call made ready to run: its environment and where its record goes.
struct Prepared {
    env: ToolEnv,
}

impl Prepared {
    fn run(
        &self,
        call: &toolcall::Call<'_>,
        grant: &[String],
        agent: AgentContext<'_>,
        limits: &crate::domain::config::ToolOutputConfig,
    ) -> std::result::Result<toolcall::CallResult, ToolCallError> {
        let cx = ToolContext { env: self.env.clone(), agent: Some(agent) };
        toolcall::run(call, grant, &cx, limits)
    }
}

/// Files named `names` in each directory from the top of the git repository that
/// holds `cwd` (or `cwd` alone, outside any) down to `cwd`, top first.
fn discover_context_files(cwd: &Path, names: &[String]) -> Vec<PathBuf> {
    let mut dirs: Vec<&Path> = Vec::new();
    let mut at = Some(cwd);
    while let Some(dir) = at {
        dirs.push(dir);
        if dir.join(".git").exists() {
            break;
        }
        at = dir.parent();
        if at.is_none() {
            dirs.truncate(1);
        }
    }
    dirs.reverse();
    dirs.iter().flat_map(|d| names.iter().map(|n| d.join(n))).filter(|p| p.is_file()).collect()
}

/// The canonical request as `request.json` holds it (and `show --request` prints).
pub fn request_json(request: &crate::infra::provider::Request) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(request).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// Writes `bytes` to a temporary name beside `path`, then renames it into place, so
/// a reader sees the old file or the new one, never half of one.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, bytes)?;
    std::fs::rename(&temp, path)
}

/// The next step record number: one past the highest under `steps/<id>/`.
fn next_step(dir: &Path) -> u32 {
    let names = std::fs::read_dir(dir).into_iter().flatten().flatten();
    names.filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok()).max().unwrap_or(0) + 1
}

/// Writes every raw event to `response.ndjson` and passes deltas on.
struct Recorder<'o> {
    out: std::io::BufWriter<std::fs::File>,
    attempts: Vec<AttemptRecord>,
    observer: &'o mut dyn Observer,
}

impl CallObserver for Recorder<'_> {
    fn attempt_started(&mut self, attempt: u32) {
        let _ = writeln!(self.out, "{}", json!({"attempt": attempt, "started": Timestamp::now().to_string()}));
    }

    fn raw(&mut self, attempt: u32, event: &sse::Event) {
        let _ = writeln!(self.out, "{}", json!({"attempt": attempt, "event": event.event, "data": event.data}));
    }

    fn delta(&mut self, delta: &Delta) {
        self.observer.event(Event::Delta(delta));
    }

    fn attempt_ended(&mut self, record: &AttemptRecord) {
        let _ = writeln!(self.out, "{}", json!({"attempt": record.attempt, "ended": record}));
        if record.error.is_some() {
            self.observer.event(Event::AttemptFailed {
                attempt: record.attempt,
                error: record.error.as_deref().unwrap_or(""),
                retry_in_ms: record.retry_after_ms,
            });
        }
        self.attempts.push(record.clone());
    }
}

/// After a stop (by `offshoot stop`, or because the tree's budget ran out): marks the
/// agent stopped at `tip` (results of its children then wait in its inbox instead of
/// waking it; the user's message revives it), tells its parent, and says why it stopped.
fn stopped(ws: &Workspace, rt: &Runtime, id: &AgentId, parent: Option<&str>, tip: CommitId) -> Result<DriverError> {
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
    let facts = super::snapshot::read_facts(&ws.repo, tip)
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
fn interrupted_by_user(ws: &Workspace, rt: &Runtime, id: &AgentId) -> Result<DriverError> {
    if let Some(tip) = ws.repo.branch_tip(&id.branch())? {
        ws.repo.set_mark(STOPPED, id.as_str(), tip.to_string().as_bytes())?;
    }
    let below = agents::descendants(ws, id)?;
    agents::stop_all(ws, rt, below, std::time::Duration::ZERO)
        .map_err(|e| DriverError::StopBelow { id: id.to_string(), reason: e.to_string() })?;
    Ok(DriverError::Interrupted { id: id.to_string(), reason: Reason::User })
}

/// [`stopped`] for an agent no driver has open.
fn stopped_at_tip(ws: &Workspace, rt: &Runtime, id: &AgentId) -> Result<DriverError> {
    let tip = ws.repo.branch_tip(&id.branch())?.ok_or_else(|| DriverError::Unknown(id.to_string()))?;
    let facts = super::snapshot::read_facts(&ws.repo, tip)
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
fn already_received(ws: &Workspace, from: &AgentId, to: &AgentId, epitaph: &str, terminal: CommitId) -> Result<bool> {
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
