//! `offshoot worker`: drives agents of a remote from this workspace (one made by `new
//! --from`), with as many other workers on other machines as there are (issue 24).
//!
//! Each round it fetches; renews its claims (one lost is let go at once: its driver
//! killed, nothing of it sent again); sends, in one push, the agents its drivers made,
//! the messages its agents sent whose cause is in that push, and each of its agents'
//! records, marks and branch — the branch only from the tip it last pushed, so a worker
//! that lost the agent writes nothing; takes every other agent as the remote has it;
//! delivers the messages the remote holds for its agents; starts drivers; claims agents
//! with work; lets go of its agents that have none.
//!
//! Every message between agents travels through the remote here (the workspace's
//! `worker/` directory turns deposits into outbox files): a message is put on the
//! remote only with the step that sent it (a result with its terminal commit), so a
//! worker's death never leaves a message whose cause is lost; on the remote it is a
//! create-only ref `refs/offshoot/inbox/<to>/<at>-<n>-<hash>`, named by its content, which
//! the recipient's worker delivers unless the recipient holds a message of the same
//! identity (`inbox::identity`: a result made again after a crash is the same result),
//! and deletes once the recipient's pushed transcript holds it.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::domain::id::AgentId;
use crate::domain::inbox::{self as messages, Header};
use crate::domain::layout::Layout;
use crate::domain::marks::{Epitaph, Mark};
use crate::domain::transcript::Entry;
use crate::infra::git::remote::{self as wire, Expect, Outcome, Update};
use crate::infra::git::{CommitId as Oid, GitError, bundle};
use crate::infra::lock::{LockGuard, Probe};

use super::claims::{Claimed, Claims, claim_ref};
use super::remote::{self, Remote, RemoteError, Seen};
use super::runtime::Runtime;
use super::snapshot::Loader;
use super::workspace::Workspace;
use super::{inbox, lifecycle};

/// Where messages to `to` wait on a remote.
fn inbox_prefix(to: &str) -> String {
    format!("refs/offshoot/inbox/{to}/")
}

/// Where outgoing messages are named here before they go (never under `refs/offshoot/`).
const OUTGOING: &str = "refs/outgoing/";

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("{0}")]
    Local(String),
}

type Result<T> = std::result::Result<T, WorkerError>;

fn local(e: impl std::fmt::Display) -> WorkerError {
    WorkerError::Local(e.to_string())
}

/// How a worker works.
#[derive(Debug, Clone)]
pub struct Options {
    /// Its name in its leases (unique among the workers of a remote).
    pub name: String,
    /// How many agents it drives at once.
    pub max_agents: usize,
    /// How long a lease lives unrenewed in the eyes of other workers.
    pub lease: Duration,
    /// This worker's own `offshoot.toml` (its template's): the providers, MCP servers,
    /// tool environment, budgets, prices, retry and sandbox every config lineage from
    /// the remote runs with here.
    pub mine: String,
}

/// What a worker did, for its log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Event {
    Claimed { agent: String, took_over: bool },
    Lost { agent: String },
    Released { agent: String },
    Pushed { agent: String, tip: String },
    Forwarded { to: String, from: String },
    Delivered { agent: String, from: String },
    Started { agent: String },
    Died { agent: String },
}

/// What a worker did, counted.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Tally {
    pub rounds: u64,
    pub claimed: u64,
    pub took_over: u64,
    pub lost: u64,
    pub released: u64,
    pub steps_pushed: u64,
    /// Claims another worker moved first, and pushes refused because a ref had moved.
    pub conflicts: u64,
    pub delivered: u64,
    pub sent: u64,
}

/// An agent's tip and `replied` mark, as last looked at.
type LookedAt = (Oid, Option<Oid>);

/// A message on its way to the remote.
struct Outgoing {
    /// Its name here (under `refs/outgoing/`), holding its blob.
    local_ref: String,
    /// Its name there (`refs/offshoot/inbox/<to>/…`).
    remote_ref: String,
    /// Its outbox file.
    file: PathBuf,
    to: String,
    from: String,
}

/// The drivers started for an agent at one tip.
#[derive(Debug, Clone, Copy)]
struct Launched {
    tip: Oid,
    /// How many were started there.
    times: u32,
    /// The last one (pid, start time).
    driver: Option<(u32, u64)>,
}

impl Launched {
    /// Whether its last driver is still alive (perhaps still starting: no lock yet).
    fn alive(&self) -> bool {
        self.driver.is_some_and(|(pid, started)| {
            crate::infra::process::running(pid) && crate::infra::process::start_time(pid) == Some(started)
        })
    }
}

/// How many drivers started at one tip must end without moving it before the agent is
/// reported dead (the first may meet a driver still letting go, or be killed).
const LAUNCHES_BEFORE_DEATH: u32 = 3;

/// An agent this worker drives.
struct Owned {
    /// The branch tip the remote has (as claimed, or as last pushed).
    pushed: Oid,
    /// The drivers started at its current tip.
    launched: Option<Launched>,
    /// The tip its records were last gathered at, and whether the newest was in.
    records_at: Option<(Oid, bool)>,
}

pub struct Worker<'w> {
    ws: &'w Workspace,
    rt: &'w Runtime,
    remote: Remote,
    options: Options,
    owned: HashMap<AgentId, Owned>,
    /// Agents with an empty transcript and no mail: when this worker first saw each so.
    /// Its maker's worker sends its first message with, or just after, the agent; only
    /// one still without it a whole lease later has lost it with a dead worker, and gets
    /// it from its dispatch commit.
    unstarted: HashMap<AgentId, Instant>,
    /// What `work_left` said of agents it does not drive, by tip and `replied` mark.
    work_seen: HashMap<AgentId, (LookedAt, Option<&'static str>)>,
    /// Config lineages as taken in: the remote's commit, and the commit made of it here.
    rebased: HashMap<String, (Oid, Oid)>,
    /// Its claims, renewed by a thread of their own (see [`lease_keeper`]).
    leases: Arc<Leases>,
    pub tally: Tally,
}

impl<'w> Worker<'w> {
    /// A worker of `remote` in `ws`, which from now on starts drivers only for the
    /// agents it claims. Claims a previous worker here held are not its own.
    pub fn new(ws: &'w Workspace, rt: &'w Runtime, remote: Remote, options: Options) -> Result<Worker<'w>> {
        let claims_dir = ws.layout.worker().join("claims");
        let _ = std::fs::remove_dir_all(&claims_dir);
        std::fs::create_dir_all(&claims_dir).map_err(local)?;
        // Messages a worker killed here had taken in for agents it drove: they are still
        // on the remote, for whoever drives those agents now.
        // Drivers a worker killed here left running drive what it no longer holds.
        for (branch, _) in ws.repo.branches("agents/")? {
            if let Ok(id) = AgentId::parse(branch.trim_start_matches("agents/")) {
                kill_driver(ws, &id);
                drop_inbox(ws, &id);
            }
        }
        for (name, _) in bundle::refs(&ws.layout.repo(), &[format!("{OUTGOING}*")])? {
            ws.repo.delete_ref(&name)?;
        }
        let claims = Claims::new(&ws.layout.repo(), &remote.url, &options.name, options.lease);

        let leases = Arc::new(Leases { claims: Mutex::new(claims), lost: Mutex::new(Vec::new()) });
        lease_keeper(ws.layout.clone(), Arc::downgrade(&leases), options.lease);
        Ok(Worker {
            ws,
            rt,
            remote,
            options,
            owned: HashMap::new(),
            unstarted: HashMap::new(),
            rebased: HashMap::new(),
            work_seen: HashMap::new(),
            leases,
            tally: Tally::default(),
        })
    }

    /// The agents it drives now.
    pub fn driving(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.owned.keys().map(|a| a.to_string()).collect();
        ids.sort();
        ids
    }

    /// One round (see the module's words). An error (the remote out of reach) leaves
    /// every claim as it was; the next round tries again, and a claim not renewed for
    /// half a lease has its driver killed first.
    pub fn round(&mut self, on: &mut dyn FnMut(Event)) -> Result<()> {
        self.tally.rounds += 1;
        let lost: Vec<String> = std::mem::take(&mut *self.leases.lost.lock().map_err(local)?);
        for id in lost {
            if let Ok(id) = AgentId::parse(&id) {
                self.lose(&id, on);
            }
        }
        let seen = remote::fetch(self.ws, &self.remote)?;
        let listed: Vec<(String, Oid)> = seen.repo.iter().map(|(n, o)| (n.clone(), *o)).collect();
        // Seen now, after the fetch (which may have taken long): a value is only as old
        // as this worker knows it to be.
        self.claims()?.observe(&listed, Instant::now());
        let dirty = self.publish(&seen, on)?;
        self.take_in(&seen)?;
        self.deliver(&seen, on)?;
        self.drive(on)?;
        self.claim_work(&seen, on)?;
        self.let_go_of_idle(&seen, &dirty, on)?;
        Ok(())
    }

    /// Its claims (the lease keeper renews them meanwhile, between these uses).
    fn claims(&self) -> Result<std::sync::MutexGuard<'_, Claims>> {
        self.leases.claims.lock().map_err(local)
    }

    /// Whether it holds `id` and may write it now.
    fn fresh(&self, id: &AgentId) -> bool {
        self.claims().is_ok_and(|c| c.fresh(id.as_str(), Instant::now()))
    }

    /// Kills every driver, sends what they committed, lets go of every claim, and leaves
    /// the workspace as it was before it was a worker's.
    pub fn shut_down(&mut self, on: &mut dyn FnMut(Event)) -> Result<()> {
        for id in self.owned.keys() {
            kill_driver(self.ws, id);
        }
        let settled = Instant::now() + Duration::from_secs(5);
        while self.owned.keys().any(|id| driven_here(self.ws, id)) && Instant::now() < settled {
            std::thread::sleep(Duration::from_millis(20));
        }
        let seen = remote::fetch(self.ws, &self.remote)?;
        self.publish(&seen, on)?;
        for id in self.owned.keys().cloned().collect::<Vec<_>>() {
            self.claims()?.release(id.as_str())?;
            let _ = std::fs::remove_file(self.ws.layout.worker_claim(&id));
            drop_inbox(self.ws, &id);
            on(Event::Released { agent: id.to_string() });
        }
        self.owned.clear();
        // An ordinary workspace again: its agents' drivers may start here (a tree handed
        // to the fleet still never does).
        let _ = std::fs::remove_dir_all(self.ws.layout.worker());
        Ok(())
    }

    fn lose(&mut self, id: &AgentId, on: &mut dyn FnMut(Event)) {
        kill_driver(self.ws, id);
        if let Ok(mut claims) = self.claims() {
            claims.forget(id.as_str());
        }
        drop_inbox(self.ws, id);
        let _ = std::fs::remove_file(self.ws.layout.worker_claim(id));
        self.owned.remove(id);
        self.tally.lost += 1;
        on(Event::Lost { agent: id.to_string() });
    }

    /// Sends, in one push: agents made here by agents it drives (create-only), the
    /// messages whose cause goes with it, and its agents' records, marks and branches
    /// (each branch from the tip last pushed). Returns the agents something was sent
    /// for, or was to be.
    fn publish(&mut self, seen: &Seen, on: &mut dyn FnMut(Event)) -> Result<HashSet<AgentId>> {
        let ws = self.ws;
        let mut updates: Vec<Update> = Vec::new();
        let mut dirty = HashSet::new();
        let mine: Vec<AgentId> = self.owned.keys().filter(|id| self.fresh(id)).cloned().collect();
        let mut tips: HashMap<AgentId, Oid> = HashMap::new();
        for id in &mine {
            if let Some(tip) = ws.repo.branch_tip(&id.branch())? {
                tips.insert(id.clone(), tip);
            }
        }
        let mut names = Vec::new();
        // What is here, read once.
        let here: HashMap<String, Oid> = ws.repo.all_refs()?.into_iter().collect();
        let name_claims: Vec<(&String, &Oid)> =
            here.iter().filter(|(n, _)| n.starts_with(&format!("refs/offshoot/{}/", Mark::Names.kind()))).collect();
        // Agents its drivers made: they exist there before the step that made them.
        for (branch, _) in ws.repo.branches("agents/")? {
            let name = format!("refs/heads/{branch}");
            let Ok(id) = AgentId::parse(branch.trim_start_matches("agents/")) else { continue };
            let made_by_mine = id.parent().is_some_and(|p| mine.contains(&p));
            if seen.repo.contains_key(&name) || !made_by_mine {
                continue;
            }
            updates.push(Update {
                local: Some(name),
                remote: format!("refs/heads/{branch}"),
                expect: Expect::Exactly(None),
            });
            let ids = format!("refs/offshoot/{}/{id}", Mark::Ids.kind());
            if here.contains_key(&ids) && !seen.repo.contains_key(&ids) {
                updates.push(Update { local: Some(ids.clone()), remote: ids, expect: Expect::Exactly(None) });
            }
            // Its name goes on its own (below): a name taken there meanwhile must not
            // hold back the rest.
            for (mark, value) in &name_claims {
                if !seen.repo.contains_key(*mark)
                    && ws.repo.read_blob(**value).is_ok_and(|b| b == id.as_str().as_bytes())
                {
                    names.push((
                        id.clone(),
                        Update { local: Some((*mark).clone()), remote: (*mark).clone(), expect: Expect::Exactly(None) },
                    ));
                }
            }
        }
        // Messages: each with the step that sent it.
        let outgoing = self.outgoing(seen, &tips)?;
        for message in &outgoing {
            updates.push(Update {
                local: Some(message.local_ref.clone()),
                remote: message.remote_ref.clone(),
                expect: Expect::Exactly(None),
            });
        }
        // Its agents: records, marks, branch.
        for id in &mine {
            let Some(tip) = tips.get(id).copied() else { continue };
            let records = format!("refs/offshoot/{}/{id}", remote::RECORDS);
            let before = updates.len();
            // Records are gathered again only when the agent moved on, or its newest one
            // was held back (still being written) the last time.
            let driven = driven_here(ws, id);
            let owned = &self.owned[id];
            let gathered = match owned.records_at {
                Some((at, newest)) if at == tip => newest || driven,
                _ => false,
            };
            if !gathered {
                let base = seen.repo.get(&records).copied();
                let value = remote::commit_records(ws, id, base, !driven)?;
                if let Some(owned) = self.owned.get_mut(id) {
                    owned.records_at = Some((tip, !driven));
                }
                if value.is_some() && value != base {
                    updates.push(Update { local: Some(records.clone()), remote: records, expect: Expect::FastForward });
                }
            } else if let Some(value) = here.get(&records)
                && seen.repo.get(&records) != Some(value)
            {
                updates.push(Update { local: Some(records.clone()), remote: records, expect: Expect::FastForward });
            }
            for mark in remote::travelling().filter(|m| !matches!(m, Mark::Ids | Mark::Names)) {
                let name = format!("refs/offshoot/{}/{id}", mark.kind());
                let (ours, there) = (here.get(&name).copied(), seen.repo.get(&name).copied());
                if ours != there {
                    let local = ours.map(|_| name.clone());
                    updates.push(Update { local, remote: name, expect: Expect::Exactly(there) });
                }
            }
            let pushed = self.owned[id].pushed;
            if tip != pushed {
                let name = format!("refs/heads/{}", id.branch());
                updates.push(Update { local: Some(name.clone()), remote: name, expect: Expect::Exactly(Some(pushed)) });
            }
            if updates.len() > before {
                dirty.insert(id.clone());
            }
        }
        if updates.is_empty() {
            self.push_project(seen)?;
            return Ok(dirty);
        }
        let outcomes = wire::push_whole(&ws.layout.repo(), &self.remote.url, &updates)
            .map_err(|e| remote::unreachable(&self.remote, e))?;
        let mut moved = false;
        for (update, outcome) in updates.iter().zip(&outcomes) {
            let branch_of_mine = update
                .remote
                .strip_prefix("refs/heads/agents/")
                .and_then(|a| AgentId::parse(a).ok())
                .filter(|a| self.owned.contains_key(a));
            match (outcome, branch_of_mine) {
                (Outcome::Done(Some(value)), Some(id)) => {
                    if let Some(owned) = self.owned.get_mut(&id) {
                        owned.pushed = *value;
                    }
                    self.tally.steps_pushed += 1;
                    on(Event::Pushed { agent: id.to_string(), tip: value.to_string() });
                }
                (Outcome::Moved { .. } | Outcome::Refused(_), Some(id)) => {
                    moved = true;
                    self.lose(&id, on);
                }
                (Outcome::Moved { .. }, None) => {
                    moved = true;
                    // Records moved there: gathered again on the new base next round.
                    let records = format!("refs/offshoot/{}/", remote::RECORDS);
                    if let Some(owned) = update
                        .remote
                        .strip_prefix(&records)
                        .and_then(|a| AgentId::parse(a).ok())
                        .and_then(|a| self.owned.get_mut(&a))
                    {
                        owned.records_at = None;
                    }
                }
                _ => {}
            }
        }
        if moved {
            self.tally.conflicts += 1;
        }
        // The names of the agents made there now.
        let made: Vec<Update> = names
            .into_iter()
            .filter(|(id, _)| {
                let branch = format!("refs/heads/{}", id.branch());
                updates.iter().zip(&outcomes).any(|(u, o)| u.remote == branch && matches!(o, Outcome::Done(_)))
            })
            .map(|(_, update)| update)
            .collect();
        if !made.is_empty() {
            wire::push(&ws.layout.repo(), &self.remote.url, &made).map_err(|e| remote::unreachable(&self.remote, e))?;
        }
        for message in &outgoing {
            let Some(i) = updates.iter().position(|u| u.remote == message.remote_ref) else { continue };
            let ours =
                bundle::refs(&ws.layout.repo(), std::slice::from_ref(&message.local_ref))?.first().map(|(_, o)| *o);
            let sent = match &outcomes[i] {
                Outcome::Done(_) => true,
                // The same message (its name is its content), sent before a crash cut a
                // worker here short.
                Outcome::Moved { found } => *found == ours,
                _ => false,
            };
            if sent {
                let _ = std::fs::remove_file(&message.file);
                let _ = ws.repo.delete_ref(&message.local_ref);
                self.tally.sent += 1;
                on(Event::Forwarded { to: message.to.clone(), from: message.from.clone() });
            }
        }
        self.push_project(seen)?;
        Ok(dirty)
    }

    /// The project branches of the agents it holds and may write, moved on here: forward
    /// only. (Any other's is its holder's to send.)
    fn push_project(&self, seen: &Seen) -> Result<()> {
        let mut own = HashSet::new();
        for id in self.owned.keys().filter(|id| self.fresh(id)) {
            if let Some(tip) = self.ws.repo.branch_tip(&id.branch())?
                && let Ok(facts) = super::snapshot::read_facts(&self.ws.repo, tip)
            {
                own.insert(format!("refs/heads/{}", facts.project_branch()));
            }
        }
        let mut updates = remote::project_updates(self.ws, seen, true)?;
        updates.retain(|u| u.local.as_ref().is_some_and(|l| own.contains(l)));
        if !updates.is_empty() {
            wire::push(&self.ws.layout.project(), &self.remote.url, &updates)
                .map_err(|e| remote::unreachable(&self.remote, e))?;
        }
        Ok(())
    }

    /// The outbox messages that may go now, each named here and there. A message goes
    /// with its cause: a result once the sender's branch sent reaches its terminal
    /// commit; a call's message (and a child's first message, whose call its `ids`
    /// claim names) once that branch holds the call's result. For an agent it drives,
    /// the branch is the one being sent now (`tips`); for any other (one it lost, or one
    /// a worker killed here drove), the remote's: a message whose cause is there goes,
    /// one whose cause is not is dropped with the steps that made it.
    fn outgoing(&mut self, seen: &Seen, tips: &HashMap<AgentId, Oid>) -> Result<Vec<Outgoing>> {
        let ws = self.ws;
        let mut out = Vec::new();
        let outbox = ws.layout.worker().join("outbox");
        for dir in std::fs::read_dir(&outbox).into_iter().flatten().flatten() {
            let to = dir.file_name().to_string_lossy().into_owned();
            let Ok(recipient) = AgentId::parse(&to) else { continue };
            for p in inbox::pending_in(&dir.path()).map_err(local)? {
                let ready = match AgentId::parse(&p.sender) {
                    // The user's (a `send` in this workspace): nothing to wait for.
                    Err(_) => true,
                    Ok(sender) => {
                        let mine = self.owned.contains_key(&sender);
                        let tip = match mine {
                            true => tips.get(&sender).copied(),
                            false => seen.repo.get(&format!("refs/heads/{}", sender.branch())).copied(),
                        };
                        let caused = match tip {
                            // A branch that does not read holds no cause.
                            Some(tip) => caused(ws, &p.text, &sender, &recipient, tip).unwrap_or(false),
                            None => false,
                        };
                        if !caused && !mine {
                            let _ = std::fs::remove_file(&p.path);
                        }
                        caused
                    }
                };
                if !ready {
                    continue;
                }
                let blob = wire::write_blob(&ws.layout.repo(), p.text.as_bytes())?;
                let name = remote::message_name(&p.text, p.number, blob);
                let local_ref = format!("{OUTGOING}{to}/{name}");
                bundle::set_refs(&ws.layout.repo(), &[(local_ref.clone(), blob)])?;
                out.push(Outgoing {
                    local_ref,
                    remote_ref: format!("{}{name}", inbox_prefix(&to)),
                    file: p.path.clone(),
                    to: to.clone(),
                    from: p.sender.clone(),
                });
            }
        }
        Ok(out)
    }

    /// Every agent this worker does not drive, as the remote has it: branch, config
    /// lineages, travelling marks, records, `project.git`'s branches.
    fn take_in(&mut self, seen: &Seen) -> Result<()> {
        let ws = self.ws;
        let repo = ws.layout.repo();
        for (name, theirs) in &seen.repo {
            if let Some(lineage) = name.strip_prefix("refs/heads/config/") {
                self.rebase(lineage, *theirs);
            }
        }
        // What is here, read once: only what differs is written.
        let here: HashMap<String, Oid> = ws.repo.all_refs()?.into_iter().collect();
        let others = |id: &AgentId| !self.owned.contains_key(id) && !driven_here(ws, id);
        let mut sets: Vec<(String, Oid)> = Vec::new();
        let mut deletes: Vec<String> = Vec::new();
        let door = crate::infra::door::Beneath::open(ws.layout.root()).map_err(local)?;
        for (name, theirs) in &seen.repo {
            let Some(id) = name.strip_prefix("refs/heads/agents/").and_then(|a| AgentId::parse(a).ok()) else {
                continue;
            };
            if !others(&id) {
                continue;
            }
            if here.get(name) != Some(theirs) {
                if !wire::is_commit(&repo, *theirs) || bundle::missing_below(&repo, *theirs)?.is_some() {
                    continue;
                }
                sets.push((name.clone(), *theirs));
            }
            for mark in remote::travelling().filter(|m| !matches!(m, Mark::Names)) {
                let name = format!("refs/offshoot/{}/{id}", mark.kind());
                match (seen.repo.get(&name), here.get(&name)) {
                    (Some(theirs), ours) if ours != Some(theirs) => sets.push((name, *theirs)),
                    (None, Some(_)) => deletes.push(name),
                    _ => {}
                }
            }
            let records = format!("refs/offshoot/{}/{id}", remote::RECORDS);
            if let Some(theirs) = seen.repo.get(&records)
                && here.get(&records) != Some(theirs)
            {
                // The branch first: records are written up to what it can have made.
                bundle::set_refs(&repo, &sets)?;
                sets.clear();
                remote::write_records(ws, &door, &id, *theirs)?;
                sets.push((records, *theirs));
            }
        }
        // Names: the remote's claims stand (a child made here whose name was taken there
        // keeps it in its facts, without the fleet's claim of it).
        let names = format!("refs/offshoot/{}/", Mark::Names.kind());
        for (name, theirs) in &seen.repo {
            if name.strip_prefix(&names).is_some_and(|k| !k.contains('/')) && here.get(name) != Some(theirs) {
                sets.push((name.clone(), *theirs));
            }
        }
        bundle::set_refs(&repo, &sets)?;
        for name in deletes {
            ws.repo.delete_ref(&name)?;
        }
        // Project branches: those of agents it drives are its own to move.
        let mut own_branches = HashSet::new();
        for id in self.owned.keys() {
            if let Some(tip) = ws.repo.branch_tip(&id.branch())?
                && let Ok(facts) = super::snapshot::read_facts(&ws.repo, tip)
            {
                own_branches.insert(format!("refs/heads/{}", facts.project_branch()));
            }
        }
        let project = ws.layout.project();
        let ours: HashMap<String, Oid> = bundle::refs(&project, &["refs/heads/*".to_owned()])?.into_iter().collect();
        let mut sets = Vec::new();
        for (name, theirs) in &seen.project {
            if own_branches.contains(name)
                || ours.get(name) == Some(theirs)
                || !wire::is_commit(&project, *theirs)
                || bundle::missing_below(&project, *theirs)?.is_some()
            {
                continue;
            }
            sets.push((name.clone(), *theirs));
        }
        bundle::set_refs(&project, &sets)?;
        Ok(())
    }

    /// Takes config lineage `lineage` at the remote's commit `theirs` as a commit on top of
    /// it whose `offshoot.toml` has this worker's providers, MCP servers, tool
    /// environment, budgets, prices, retry and sandbox (`bundle::rebase_config`), never
    /// the remote's: a config is code here (a `command` provider runs a program, a base
    /// URL receives the key). One that cannot be made so (a role whose provider this
    /// worker lacks, with no worker role to fall back on) is left as it was here.
    fn rebase(&mut self, lineage: &str, theirs: Oid) {
        let ws = self.ws;
        let branch = format!("config/{lineage}");
        let here = ws.repo.branch_tip(&branch).ok().flatten();
        if self.rebased.get(lineage).is_some_and(|(t, made)| *t == theirs && Some(*made) == here) {
            return;
        }
        let made = (|| -> std::result::Result<Oid, String> {
            if !wire::is_commit(&ws.layout.repo(), theirs) {
                return Err("not a commit".into());
            }
            let file = crate::domain::config::FILE;
            let text = ws.repo.read_file(theirs, file).map_err(|e| e.to_string())?.unwrap_or_default();
            let rebased = super::bundle::rebase_config(&String::from_utf8_lossy(&text), &self.options.mine)?;
            let edits = [crate::infra::git::TreeEdit::Write { path: file.to_owned(), bytes: rebased.into_bytes() }];
            let commit = ws
                .repo
                .commit_edits(
                    &[theirs],
                    Some(theirs),
                    &edits,
                    "config: the remote's, with this worker's providers, MCP servers and sandbox",
                )
                .map_err(|e| e.to_string())?;
            ws.config_at(commit).map_err(|e| e.to_string())?;
            bundle::set_refs(&ws.layout.repo(), &[(format!("refs/heads/{branch}"), commit)])
                .map_err(|e| e.to_string())?;
            Ok(commit)
        })();
        if let Ok(commit) = made {
            self.rebased.insert(lineage.to_owned(), (theirs, commit));
        }
    }

    /// Messages the remote holds for agents it drives: each delivered here unless one
    /// of the same identity is held (pending here, or in the transcript); deleted there
    /// once the transcript the remote has holds it.
    fn deliver(&mut self, seen: &Seen, on: &mut dyn FnMut(Event)) -> Result<()> {
        let ws = self.ws;
        let mut settled = Vec::new();
        let mut woken = HashSet::new();
        for id in self.owned.keys().cloned().collect::<Vec<_>>() {
            let prefix = inbox_prefix(id.as_str());
            let waiting: Vec<(&String, &Oid)> = seen.repo.iter().filter(|(n, _)| n.starts_with(&prefix)).collect();
            if waiting.is_empty() {
                continue;
            }
            let identities = |commit: Option<Oid>| -> Result<HashSet<String>> {
                let Some(commit) = commit else { return Ok(HashSet::new()) };
                let entries = Loader::default().entries(&ws.repo, commit).map_err(local)?.to_vec();
                Ok(entries
                    .iter()
                    .filter_map(|e| match e {
                        Entry::Message { text, .. } => Some(messages::identity(text)),
                        _ => None,
                    })
                    .collect())
            };
            let Ok(on_remote) = identities(Some(self.owned[&id].pushed)) else { continue };
            // The inbox first, then the transcript: a delivery commits before it removes
            // the file, so a message being delivered meanwhile is seen in one of them.
            let pending = inbox::pending(&ws.layout, &id).map_err(local)?;
            let mut here: HashSet<String> = pending.iter().map(|p| messages::identity(&p.text)).collect();
            let Ok(held) = identities(ws.repo.branch_tip(&id.branch())?) else { continue };
            here.extend(held);
            for (name, value) in waiting {
                let Some(bytes) = bundle::blob(&ws.layout.repo(), *value) else { continue };
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let identity = messages::identity(&text);
                let from = Header::parse(&text).map(|h| h.from);
                let from_ok = from.as_deref().is_some_and(|f| f == "user" || AgentId::parse(f).is_ok());
                if !from_ok || on_remote.contains(&identity) {
                    // Delivered, or no message (no sender one could be): gone there.
                    settled.push(Update { local: None, remote: name.clone(), expect: Expect::Exactly(Some(*value)) });
                } else if !here.contains(&identity) {
                    let from = from.unwrap_or_default();
                    inbox::deposit_text(&ws.layout, &id, &from, &text).map_err(local)?;
                    here.insert(identity);
                    woken.insert(id.clone());
                    self.tally.delivered += 1;
                    on(Event::Delivered { agent: id.to_string(), from });
                }
            }
        }
        if !settled.is_empty() {
            wire::push(&ws.layout.repo(), &self.remote.url, &settled)
                .map_err(|e| remote::unreachable(&self.remote, e))?;
        }
        for id in woken {
            if self.fresh(&id) && ws.repo.mark(lifecycle::STOPPED, id.as_str())?.is_none() {
                self.start(&id, on)?;
            }
        }
        Ok(())
    }

    /// Starts a driver for `id` (unless one runs), counting those started at its tip.
    fn start(&mut self, id: &AgentId, on: &mut dyn FnMut(Event)) -> Result<()> {
        let tip = ws_tip(self.ws, id)?;
        // A driver that holds it drains its inbox before it lets go: nothing started.
        let super::runtime::Woken::Launched(pid) = self.rt.wake(id).map_err(local)? else { return Ok(()) };
        on(Event::Started { agent: id.to_string() });
        let driver = crate::infra::process::start_time(pid).map(|s| (pid, s));
        if let (Some(owned), Some(tip)) = (self.owned.get_mut(id), tip) {
            let times = match owned.launched {
                Some(l) if l.tip == tip => l.times + 1,
                _ => 1,
            };
            owned.launched = Some(Launched { tip, times, driver });
        }
        Ok(())
    }

    /// Its agents with work and no driver get one; one whose drivers all ended at the tip
    /// they were started at, three times, is reported to its parent as dead (once for the fleet:
    /// the `died` mark travels) and left alone.
    fn drive(&mut self, on: &mut dyn FnMut(Event)) -> Result<()> {
        let ws = self.ws;
        let mut loader = Loader::default();
        for id in self.owned.keys().cloned().collect::<Vec<_>>() {
            if !self.fresh(&id) || driven_here(ws, &id) {
                continue;
            }
            let Some(tip) = ws.repo.branch_tip(&id.branch())? else { continue };
            if ws.repo.mark(lifecycle::STOPPED, id.as_str())?.is_some()
                || ws.repo.mark(Mark::Died.kind(), id.as_str())?.as_deref() == Some(tip.to_string().as_bytes())
            {
                continue;
            }
            let parent = id.parent().map(|p| p.to_string());
            // An agent whose branch does not read has nothing a driver could do.
            if lifecycle::work_left(ws, &mut loader, &id, tip, parent.as_deref()).ok().flatten().is_none() {
                continue;
            }
            match self.owned[&id].launched {
                Some(l) if l.tip == tip && l.alive() => continue,
                Some(l) if l.tip == tip && l.times >= LAUNCHES_BEFORE_DEATH => {
                    // Started at this tip time and again, and gone without moving it.
                    ws.repo.set_mark(Mark::Died.kind(), id.as_str(), tip.to_string().as_bytes())?;
                    if let Some(parent) = id.parent() {
                        let body = format!(
                            "`{id}` stopped working and a new driver did not get it further; everything it did is on its branch (commit {tip}). `offshoot log {id}` shows its last step; a message to it tries again."
                        );
                        lifecycle::deposit_result(ws, self.rt, &id, &parent, Epitaph::Died.as_str(), tip, body)
                            .map_err(local)?;
                    }
                    on(Event::Died { agent: id.to_string() });
                }
                _ => self.start(&id, on)?,
            }
        }
        Ok(())
    }

    /// Claims agents with work nobody drives, up to `max_agents`.
    fn claim_work(&mut self, seen: &Seen, on: &mut dyn FnMut(Event)) -> Result<()> {
        let ws = self.ws;
        if self.owned.len() >= self.options.max_agents {
            return Ok(());
        }
        let mut loader = Loader::default();
        let mut candidates: Vec<(AgentId, Oid)> = seen
            .repo
            .iter()
            .filter_map(|(n, o)| Some((AgentId::parse(n.strip_prefix("refs/heads/agents/")?).ok()?, *o)))
            .filter(|(id, _)| !self.owned.contains_key(id))
            .collect();
        // Workers start at different places, so they do not all reach for the same one.
        if !candidates.is_empty() {
            let offset = super::random_u32() as usize % candidates.len();
            candidates.rotate_left(offset);
        }
        let with_mail: HashSet<&str> =
            seen.repo.keys().filter_map(|n| n.strip_prefix("refs/offshoot/inbox/")?.split('/').next()).collect();
        let replied = |id: &AgentId| seen.repo.get(&format!("refs/offshoot/{}/{id}", Mark::Replied.kind())).copied();
        // A few at a time: the next round sees what other workers claimed meanwhile, so
        // workers starting together do not all reach for the same agents.
        let mut budget = (self.options.max_agents / 8).max(2);
        for (id, tip) in candidates {
            if self.owned.len() >= self.options.max_agents || budget == 0 {
                break;
            }
            // Held by another worker, as far as this one has seen: not even looked at.
            if self.claims()?.busy(id.as_str(), Instant::now()) {
                continue;
            }
            let root = id.as_str().split('.').next().unwrap_or("");
            let fleet = seen.repo.contains_key(&format!("refs/offshoot/{}/{root}", Mark::Fleet.kind()));
            if !fleet || driven_here(ws, &id) || ws.repo.branch_tip(&id.branch())? != Some(tip) {
                continue;
            }
            if ws.repo.mark(lifecycle::STOPPED, id.as_str())?.is_some()
                || ws.repo.mark(Mark::Died.kind(), id.as_str())?.as_deref() == Some(tip.to_string().as_bytes())
            {
                continue;
            }
            let mail = with_mail.contains(id.as_str());
            let parent = id.parent().map(|p| p.to_string());
            // What its transcript says is known for this tip (and answer paid) already.
            let key = (tip, replied(&id));
            let left = match self.work_seen.get(&id) {
                Some((at, left)) if *at == key => *left,
                _ => {
                    // One that does not read is passed over, not the round's failure.
                    let left = lifecycle::work_left(ws, &mut loader, &id, tip, parent.as_deref()).ok().flatten();
                    self.work_seen.insert(id.clone(), (key, left));
                    left
                }
            };
            let work = match (mail, left) {
                (true, _) => true,
                (false, Some(lifecycle::GOAL_UNDELIVERED)) => {
                    let since = *self.unstarted.entry(id.clone()).or_insert_with(Instant::now);
                    since.elapsed() >= self.options.lease
                }
                (false, left) => left.is_some(),
            };
            if !work {
                continue;
            }
            self.unstarted.remove(&id);
            // Not on a lineage this worker could not make its own (its drivers would only
            // fail, and report the agent dead for the whole fleet).
            let lineage = super::snapshot::read_facts(&ws.repo, tip).map(|f| f.lineage).unwrap_or_default();
            if !self.rebased.contains_key(&lineage) {
                continue;
            }
            let claimed = self.claims()?.claim(id.as_str(), Instant::now())?;
            match claimed {
                Claimed::Mine { took_over } => {
                    budget -= 1;
                    std::fs::write(ws.layout.worker_claim(&id), self.options.name.as_bytes()).map_err(local)?;
                    self.owned.insert(id.clone(), Owned { pushed: tip, launched: None, records_at: None });
                    self.tally.claimed += 1;
                    if took_over {
                        self.tally.took_over += 1;
                    }
                    on(Event::Claimed { agent: id.to_string(), took_over });
                }
                Claimed::Lost => {
                    budget = budget.saturating_sub(1);
                    self.tally.conflicts += 1;
                }
                Claimed::Busy { .. } => {}
            }
        }
        Ok(())
    }

    /// Lets go of its agents with nothing left to do and nothing left to send.
    fn let_go_of_idle(&mut self, seen: &Seen, dirty: &HashSet<AgentId>, on: &mut dyn FnMut(Event)) -> Result<()> {
        let ws = self.ws;
        let mut loader = Loader::default();
        for id in self.owned.keys().cloned().collect::<Vec<_>>() {
            if dirty.contains(&id) || driven_here(ws, &id) {
                continue;
            }
            let Some(tip) = ws.repo.branch_tip(&id.branch())? else { continue };
            let owned = &self.owned[&id];
            let starting = owned.launched.is_some_and(|l| l.alive());
            if tip != owned.pushed || starting || inbox::has_pending(&ws.layout, &id) {
                continue;
            }
            if seen.repo.keys().any(|n| n.starts_with(&inbox_prefix(id.as_str()))) {
                continue;
            }
            // A mark not yet there (`died`, `replied` set this round) goes first.
            let unsent = remote::travelling().filter(|m| !matches!(m, Mark::Ids | Mark::Names)).any(|m| {
                let name = format!("refs/offshoot/{}/{id}", m.kind());
                let here = bundle::refs(&ws.layout.repo(), std::slice::from_ref(&name))
                    .ok()
                    .and_then(|r| r.first().map(|(_, o)| *o));
                here != seen.repo.get(&name).copied()
            });
            if unsent {
                continue;
            }
            let sending = std::fs::read_dir(ws.layout.worker().join("outbox"))
                .into_iter()
                .flatten()
                .flatten()
                .any(|d| inbox::pending_in(&d.path()).is_ok_and(|p| p.iter().any(|m| m.sender == id.as_str())));
            if sending {
                continue;
            }
            let parent = id.parent().map(|p| p.to_string());
            let stopped = ws.repo.mark(lifecycle::STOPPED, id.as_str())?.is_some()
                || ws.repo.mark(Mark::Died.kind(), id.as_str())?.as_deref() == Some(tip.to_string().as_bytes());
            if !stopped && lifecycle::work_left(ws, &mut loader, &id, tip, parent.as_deref()).ok().flatten().is_some() {
                continue;
            }
            self.claims()?.release(id.as_str())?;
            let _ = std::fs::remove_file(ws.layout.worker_claim(&id));
            self.owned.remove(&id);
            self.tally.released += 1;
            on(Event::Released { agent: id.to_string() });
        }
        Ok(())
    }
}

fn ws_tip(ws: &Workspace, id: &AgentId) -> Result<Option<Oid>> {
    Ok(ws.repo.branch_tip(&id.branch())?)
}

/// Whether the cause of message `text` from `sender` to `to` is in `sender`'s branch at
/// `tip` (see [`Worker::outgoing`]); a message of no known cause has none to wait for.
fn caused(ws: &Workspace, text: &str, sender: &AgentId, to: &AgentId, tip: Oid) -> Result<bool> {
    let header = Header::parse(text);
    if let Some(terminal) = header.as_ref().and_then(|h| h.terminal.as_deref()).and_then(|t| t.parse::<Oid>().ok()) {
        return Ok(tip == terminal || wire::descends(&ws.layout.repo(), tip, terminal)?);
    }
    let key = match header.and_then(|h| h.key) {
        Some(key) => key.strip_prefix(&format!("{sender}:")).map(str::to_owned),
        // A child's first message: the dispatch call its id claim names.
        None if to.parent().as_ref() == Some(sender) => ws
            .repo
            .mark(Mark::Ids.kind(), to.as_str())?
            .and_then(|m| String::from_utf8_lossy(&m).lines().nth(1).map(str::to_owned)),
        None => return Ok(true),
    };
    let Some(key) = key else { return Ok(true) };
    let entries = Loader::default().entries(&ws.repo, tip).map_err(local)?.to_vec();
    let mut output = 0;
    for entry in &entries {
        match entry {
            Entry::Output { number, .. } => output = *number,
            Entry::ToolResult { block: crate::infra::provider::Block::ToolResult { tool_use_id, .. }, .. }
                if super::toolcall::key(output, tool_use_id) == key =>
            {
                return Ok(true);
            }
            _ => {}
        }
    }
    Ok(false)
}

/// A worker's claims, shared between its rounds and its lease keeper.
struct Leases {
    claims: Mutex<Claims>,
    /// Claims the keeper found taken over: the round lets go of their agents.
    lost: Mutex<Vec<String>>,
}

/// The lease keeper, a thread of its own so that no round, however long (a fetch or push
/// waiting on a slow remote, many agents to send), delays a renewal: every eighth of a
/// lease it renews each claim due (a quarter lease old), and kills the driver of each
/// claim not renewed for half a lease (the worker no longer counts itself its holder:
/// another may take it over after a whole lease). It ends with its worker.
fn lease_keeper(layout: Layout, leases: Weak<Leases>, lease: Duration) {
    std::thread::spawn(move || {
        loop {
            std::thread::sleep((lease / 8).max(Duration::from_millis(20)));
            let Some(leases) = leases.upgrade() else { return };
            let Ok(mut claims) = leases.claims.lock() else { return };
            // Out of reach: nothing renewed, and the fence below does its work.
            if let Ok(lost) = claims.renew(lease / 4, Instant::now())
                && let Ok(mut shared) = leases.lost.lock()
            {
                shared.extend(lost);
            }
            let now = Instant::now();
            let stale: Vec<String> =
                claims.held().filter(|(id, _)| !claims.fresh(id, now)).map(|(id, _)| id.clone()).collect();
            drop(claims);
            for id in stale.iter().filter_map(|id| AgentId::parse(id).ok()) {
                kill_driver_at(&layout, &id);
            }
        }
    });
}

/// Removes what `id`'s inbox here holds: copies of messages the remote keeps until the
/// transcript there holds them.
fn drop_inbox(ws: &Workspace, id: &AgentId) {
    for p in inbox::pending(&ws.layout, id).unwrap_or_default() {
        let _ = std::fs::remove_file(&p.path);
    }
}

/// Whether a driver holds `id` here.
fn driven_here(ws: &Workspace, id: &AgentId) -> bool {
    LockGuard::is_held(&ws.layout.lock(id)).unwrap_or(true)
}

/// Kills the driver holding `id` here, with its process group: what it did that the
/// remote does not have is dropped (the remote is the agent).
fn kill_driver(ws: &Workspace, id: &AgentId) {
    kill_driver_at(&ws.layout, id);
}

fn kill_driver_at(layout: &Layout, id: &AgentId) {
    if let Ok(Probe::Held(Some(holder))) = LockGuard::probe(&layout.lock(id))
        && holder.is_alive()
        && !holder.making
    {
        crate::infra::process::kill_group(holder.pid);
    }
}

/// The claim ref of `id` (for tests and `doctor`).
pub fn claim_of(id: &AgentId) -> String {
    claim_ref(id.as_str())
}
