//! The driver: the step loop of one agent, under its lock.
//!
//! Each turn of the loop reads the branch tip and does the first thing due:
//! settle calls a crash left without results, deliver the inbox, or — when the
//! transcript ends on the user or tool side — assemble the request from the tip,
//! call the model, commit its output and run its tool calls, one commit each. When
//! nothing is due it releases the lock and re-checks the inbox, so a message that
//! arrived during the release is never stranded. Disk is the truth: a driver killed
//! at any instruction is continued by the next one.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use domain::agent::{self, AgentFacts};
use domain::config::Config;
use domain::id::AgentId;
use domain::marks::Mark;
use domain::transcript::{self, Entry, Side};
use infra::git::{CommitId, Tracked};
use infra::lock::LockGuard;
use infra::process;
use infra::sandbox::{Confinement, Jail};

use crate::agents;
use crate::agents::budget::Records;
use crate::agents::containment;
use crate::agents::interrupt::Reason;
use crate::agents::runtime::Runtime;
use crate::step::driver::guard::{Guard, WorkWatch};
use crate::step::events::{self, Event, Observer};
use crate::step::model;
use crate::step::toolcall;
use crate::store::directory::{self, Repair};
use crate::store::inbox;
use crate::store::snapshot::Loader;
use crate::store::workspace::Workspace;

mod delivery;
mod ending;
mod error;
pub(crate) mod guard;
mod landing;
mod life;
mod mcp;
mod model_call;
mod record;
mod scanned;
mod setup;
mod tool_calls;

use setup::ToolsSetup;

pub use error::DriverError;
pub use model_call::request_json;

use crate::agents::lifecycle::{self, EXHAUSTED, STOPPED};
use ending::{interrupted_by_user, stopped, stopped_at_tip};

type Result<T> = std::result::Result<T, DriverError>;

/// The mark holding an agent's working directory (`refs/offshoot/cwd/<id>`).
const CWD_MARK: &str = Mark::Cwd.kind();
/// The mark naming a child whose work conflicted (`refs/offshoot/conflicted/<child>`).
const CONFLICTED: &str = Mark::Conflicted.kind();

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// The agent answered; nothing is due until someone writes to it.
    Answered {
        text: String,
        /// The answer is the model's refusal.
        refused: bool,
    },
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
    if !agents::runtime::drivable_here(&ws.layout, id) {
        return Err(DriverError::NotClaimed { id: id.clone() });
    }
    // Only this agent's driver writes its branch: a lock file there now was left by a
    // driver killed in the middle of a ref update, and would stop every commit.
    ws.repo.remove_branch_lock(&id.branch());
    let mut index_lock = ws.layout.index(id).into_os_string();
    index_lock.push(".lock");
    let _ = std::fs::remove_file(index_lock);
    let logged = events::Logged::new(&ws.layout.steps(id), id.as_str(), observer);
    // (Traced when the driver's variables name a collector: `step::telemetry`.)
    let mut logged = crate::step::telemetry::Traced::new(ws, rt.env(), id, logged);
    let mut held = Some(lock);
    rt.interrupt().on_exit(Some(record_stop_on_exit(ws, rt, id)));
    let result = run_locked(ws, rt, id, &mut held, &mut logged);
    rt.interrupt().on_exit(None);
    if let Err(e) = &result {
        logged.end(end_event(Err(e)));
    }
    // (The end is logged before the lock is let go: whoever waits for the lock to be
    // free has all of this driver's events.)
    drop(held);
    result
}

/// What the receiver of a stop request runs before it ends the process at once (a
/// request during a model call, or a second one): the stop recorded as the driver
/// would have (`stopped`, the parent told; Ctrl-C stops the agents below too), so the
/// agent reads `stopped` and `scan` leaves it alone.
fn record_stop_on_exit(ws: &Workspace, rt: &Runtime, id: &AgentId) -> crate::agents::interrupt::ExitHook {
    let (root, rt, id) = (ws.layout.root().to_owned(), rt.sibling(), id.clone());
    Box::new(move |reason, driver_at_work| {
        let Ok(ws) = Workspace::open(&root) else { return };
        let _ = match (reason, driver_at_work) {
            // The driver may be committing and telling its parent itself: only the mark.
            (_, true) => lifecycle::mark_stopped(&ws, &id),
            (Reason::User, false) => lifecycle::interrupted_by_user(&ws, &rt, &id),
            (Reason::Stopped, false) => lifecycle::stopped_at_tip(&ws, &rt, &id).map(|_| ()),
        };
        // The run ends as any stopped run does (`ls` says why, in the same words).
        let end = end_event(Err(&DriverError::Interrupted { id: id.clone(), reason }));
        events::log_end(&ws.layout.steps(&id), id.as_str(), end);
    })
}

/// The `end` event of a driver's run.
pub fn end_event(result: std::result::Result<&RunEnd, &DriverError>) -> events::End {
    use events::End;
    match result {
        Ok(RunEnd::Answered { text, refused }) => End::FinalResponse { text: text.clone(), refused: *refused },
        Ok(RunEnd::Busy) => End::Busy,
        Err(DriverError::Exhausted { spend, .. }) => End::BudgetExhausted { error: spend.clone() },
        Err(DriverError::Interrupted { reason, .. }) => End::Interrupted { reason: reason.words().to_owned() },
        Err(e) => End::Error {
            error: e.to_string(),
            cut_off: matches!(e, DriverError::Model { source, .. } if source.is_truncated()),
        },
    }
}

/// The rounds of a driver that holds the lock (`lock`, let go and taken again when
/// mail came in between).
fn run_locked(
    ws: &Workspace,
    rt: &Runtime,
    id: &AgentId,
    lock: &mut Option<LockGuard>,
    observer: &mut crate::step::telemetry::Traced<'_>,
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
            return Err(DriverError::Interrupted { id: id.clone(), reason });
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
    for descendant in lifecycle::descendants(ws, id)? {
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
    driver.start_hooks(observer)?;
    let mut continued = 0;
    let result = loop {
        match driver.turn(observer) {
            Ok(Turn::Again) => continue,
            // A `Stop` hook may send it back to work, its reason the next message.
            Ok(Turn::Quiet(RunEnd::Answered { text, refused })) => {
                match driver.stop_hooks(&text, continued, observer) {
                    Ok(true) => continued += 1,
                    Ok(false) => break Ok(RunEnd::Answered { text, refused }),
                    Err(e) => break Err(e),
                }
            }
            Ok(Turn::Quiet(end)) => break Ok(end),
            Err(e) => break Err(e),
        }
    };
    let reason = match &result {
        Ok(_) => "exit",
        Err(DriverError::Interrupted { .. }) => "stopped",
        Err(_) => "error",
    };
    driver.end_hooks(reason, observer);
    if result.is_err() {
        // Whatever ended the run, a person's `git` in the directory runs nothing the
        // agent planted since the last step (best effort: scan and doctor look again).
        let _ = directory::put_back(ws, id);
    }
    let synced = driver.tip().and_then(|tip| Ok(driver.dir.save_index(tip)?));
    // The run's MCP servers stop here; what one left behind outside its group (an
    // unconfined server's daemon) became ours, and goes too.
    if !driver.mcp.idle() {
        if let Some(servers) = Rc::get_mut(&mut driver.mcp) {
            servers.stop();
        }
        process::reap_strays(&rt.launched());
    }
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
    /// It works in place (`mirror/<id>` is set): its hooks run in its jail.
    in_place: bool,
    /// The MCP servers an editor gave its session (read once at open).
    client_servers: std::collections::BTreeMap<String, domain::config::McpServer>,
    /// How commands start and what file tools may touch, for the config last used.
    tools_setup: Option<ToolsSetup>,
    /// The agent's MCP servers (shared with the calls of a step while they run), the
    /// config commit they were set up for, and whether the tip was found to record
    /// none (so an agent without servers costs no lookup a step).
    mcp: Rc<crate::step::mcp::Servers>,
    mcp_config: Option<CommitId>,
    mcp_none: Option<bool>,
    /// Packs `repo.git`'s loose objects on a thread of its own, now and then.
    packer: record::Packer,
}

impl Drop for Driver<'_> {
    fn drop(&mut self) {
        // A packing under way finishes (a pack cut short would only leave litter).
        self.packer.finish();
    }
}

impl<'a> Driver<'a> {
    fn open(ws: &'a Workspace, runtime: &'a Runtime, id: &AgentId) -> Result<(Driver<'a>, Vec<Repair>)> {
        let branch = id.branch();
        let tip = ws.repo.branch_tip(&branch)?.ok_or_else(|| DriverError::Unknown(id.to_string()))?;
        let facts = crate::store::snapshot::read_facts(&ws.repo, tip)
            .map_err(|e| DriverError::Damaged { id: id.clone(), reason: e.into() })?;
        // A sandbox this kernel cannot enforce stops the agent before anything runs.
        let (config_tip, config) = ws.config(&facts.lineage)?;
        if let Some(role) = config.role(&facts.role) {
            containment::check(role, runtime.env())
                .map_err(|source| DriverError::Sandbox { role: facts.role.clone(), source })?;
        }
        // Only this driver publishes the agent's shared branch: a lock file there was
        // left by a driver killed while publishing, and so was a quarantine whose
        // maker is gone (any agent's).
        ws.project.remove_branch_lock(&facts.project_branch());
        ws.project.sweep_quarantines();
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
            // (A project's trusted files join at the first read.)
            config_due: ws.source.is_some(),
            real_root: std::fs::canonicalize(&root).unwrap_or_else(|_| root.clone()),
            real_workspace: std::fs::canonicalize(ws.layout.root()).unwrap_or_else(|_| ws.layout.root().to_owned()),
            cwd_mark: ws.repo.mark(CWD_MARK, id.as_str())?.map(|m| String::from_utf8_lossy(&m).into_owned()),
            sandbox: None,
            records: Records::default(),
            last_call: None,
            landed_steps: None,
            publish_due: false,
            in_place: crate::agents::works_in_place(ws, id)?,
            client_servers: crate::agents::client_servers(ws, id),
            tools_setup: None,
            mcp: Rc::default(),
            mcp_config: None,
            mcp_none: None,
            packer: record::Packer::default(),
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
            return Err(DriverError::Interrupted { id: self.id.clone(), reason });
        }
        // Each step, on a worker: its worker still runs and still holds the agent (one
        // killed -9 leaves its drivers behind; the agent is another worker's by now, so
        // at most the call in flight is made twice).
        if !agents::runtime::drivable_here(&self.ws.layout, &self.id) {
            return Err(DriverError::NotClaimed { id: self.id.clone() });
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
            // The model output the open calls belong to: its entry number and the calls' inputs.
            let output = entries.iter().rev().find_map(|e| match e {
                Entry::Output { number, output, .. } => Some((*number, output.clone())),
                _ => None,
            });
            let (number, output) = output.ok_or_else(|| DriverError::Damaged {
                id: self.id.clone(),
                reason: "calls are open but no model output holds them".into(),
            })?;
            self.settle(tip, next, number, &output, &open, observer)?;
            return Ok(Turn::Again);
        }
        let mut pending = inbox::pending(&self.ws.layout, &self.id)?;
        if entries.is_empty() && pending.is_empty() {
            // Made, but its first message never deposited (its maker was killed between
            // the two): the goal the dispatch commit holds is that message.
            // (The very text its maker deposits: a copy of it that comes late is not
            // delivered again.)
            let goal = self.ws.repo.read_file(tip, agent::GOAL)?.unwrap_or_default();
            let first = domain::inbox::Deposit::first_of(&self.facts, &String::from_utf8_lossy(&goal));
            // Its own inbox, worker or not: nothing travels.
            inbox::deposit_text(&self.ws.layout, &self.id, &first.from, &first.render())?;
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
        if !transcript::warrants_call(entries) {
            // (Only for an answer: a step that calls the model again reads neither. The
            // answer is a refusal when the last model output stopped as one.)
            let text = transcript::final_text(entries).unwrap_or_default();
            let refused = entries.iter().rev().find_map(|e| match e {
                Entry::Output { output, .. } => Some(output.stop == infra::provider::Stop::Refusal),
                _ => None,
            });
            // (Already done after the model call, unless a crash came between.)
            self.reply(tip)?;
            return Ok(Turn::Quiet(RunEnd::Answered { text, refused: refused.unwrap_or(false) }));
        }
        if let Some(spend) = self.over_budget()? {
            return Err(DriverError::Exhausted { id: self.id.clone(), spend });
        }
        let tip = self.mcp_tools(tip, observer)?;
        let (step, output_name, output) = match self.call(tip, next, observer) {
            Err(full @ DriverError::ContextFull { .. }) => {
                self.await_compaction(full, observer)?;
                return Ok(Turn::Again);
            }
            other => other?,
        };
        let bytes = serde_json::to_vec(&output).unwrap_or_default();
        let tip = self.commit(tip, &[(&output_name, &bytes)], false, &format!("{output_name}: model output"))?;
        self.packer.step(&self.ws.layout.root().join("repo.git"), &self.ws.layout.steps(&self.id), step);
        let calls: Vec<toolcall::Call<'_>> =
            output.tool_uses().map(|(id, name, input)| toolcall::Call { id, name, input }).collect();
        if calls.is_empty() {
            // A final response: the answer goes to whoever it is owed to, now.
            self.reply(tip)?;
        }
        let tip = self.run_tools(tip, step, next, next + 1, &calls, observer)?;
        if !calls.is_empty() {
            self.maybe_compact(tip, observer)?;
        }
        Ok(Turn::Again)
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
    /// The environment the user's hooks run with (see `gate::hook_env`).
    pub(super) fn hook_env(&self, config: &Config) -> Vec<(String, String)> {
        let workspace = self.real_workspace.display().to_string();
        let marks = [("OFFSHOOT_AGENT", self.id.as_str()), ("OFFSHOOT_WORKSPACE", workspace.as_str())];
        crate::step::gate::hook_env(self.runtime.env(), config, &marks)
    }

    fn config(&mut self) -> Result<(CommitId, Rc<Config>)> {
        // Read once a turn: within one step every part follows the same config.
        if !std::mem::take(&mut self.config_due)
            && let Some((at, config)) = &self.config
        {
            return Ok((*at, config.clone()));
        }
        let tip = self.ws.config_tip(&self.facts.lineage)?;
        // (A project's trusted files are looked at again each turn: one changed since
        // counts no more.)
        if let Some((at, config)) = &self.config
            && *at == tip
            && self.ws.source.is_none()
        {
            return Ok((tip, config.clone()));
        }
        let mut config = self.ws.config_at(tip)?;
        crate::store::trust::apply(self.ws, &mut config);
        let config = Rc::new(config);
        self.config = Some((tip, config.clone()));
        Ok((tip, config))
    }
}
