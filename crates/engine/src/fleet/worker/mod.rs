//! `offshoot worker`: drives agents of a remote from this workspace (one made by `new
//! --from`), with as many other workers on other machines as there are.
//!
//! Each round it fetches; takes every other agent as the remote has it; delivers the
//! messages the remote holds for its agents; starts drivers; lets go of its agents that
//! have no work and claims agents with work. Then one push carries the round: the agents
//! its drivers made, the messages its agents sent whose cause is in that push, and each
//! of its agents' records, marks and branch (all or nothing; the branch only from the
//! tip it last pushed, so a worker that lost the agent writes nothing); the deletions of
//! the messages delivered; its releases and its claims (each on its own). The drivers of
//! the agents it has just claimed start at once. Its claims are renewed by a thread of
//! their own (one lost is let go at once: its driver killed, nothing of it sent again).
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
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use domain::id::AgentId;
use domain::marks::{Epitaph, Mark};
use infra::git::remote as wire;
use infra::git::{CommitId as Oid, GitError, bundle};
use infra::lock::{LockGuard, Probe};

use crate::agents::runtime::Runtime;
use crate::fleet::claims::{Claims, Renewal};
use crate::fleet::remote::{self, Remote, RemoteError, Seen, inbox_prefix};
use crate::store::snapshot::Loader;
use crate::store::workspace::Workspace;
use crate::{agents::lifecycle, store::inbox};

mod claiming;
mod inbound;
mod leases;
mod publish;
mod stops;

use leases::{Leases, driven_here, drop_inbox, kill_driver, lease_keeper};

/// Where outgoing messages are named here before they go (never under `refs/offshoot/`).
const OUTGOING: &str = "refs/outgoing/";

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("{0}")]
    Local(#[source] crate::Cause),
    #[error("{0}")]
    Busy(String),
}

type Result<T> = std::result::Result<T, WorkerError>;

fn local(e: impl std::error::Error + Send + Sync + 'static) -> WorkerError {
    WorkerError::Local(Box::new(e))
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
    Claimed {
        agent: String,
        took_over: bool,
    },
    Lost {
        agent: String,
    },
    /// Let go because its claim went unrenewed for half a lease at two renewals in a row
    /// (a remote too slow or out of reach): its driver here killed, the agent free for
    /// any worker.
    Dropped {
        agent: String,
    },
    Released {
        agent: String,
    },
    Pushed {
        agent: String,
        tip: String,
    },
    Forwarded {
        to: String,
        from: String,
    },
    Delivered {
        agent: String,
        from: String,
    },
    Started {
        agent: String,
    },
    Died {
        agent: String,
    },
    /// Its driver ended because its provider stayed down past the retries: started
    /// again after a lease, and not counted towards its death.
    Paused {
        agent: String,
        why: String,
    },
    /// Stopped as asked through the remote (`stop --on`).
    Stopped {
        agent: String,
    },
}

/// What a worker did, counted.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Tally {
    pub(crate) rounds: u64,
    pub claimed: u64,
    pub took_over: u64,
    pub lost: u64,
    /// Claims let go because they could not be renewed within half a lease.
    pub dropped: u64,
    pub(crate) released: u64,
    pub steps_pushed: u64,
    /// Claims another worker moved first, and pushes refused because a ref had moved.
    pub conflicts: u64,
    pub delivered: u64,
    pub sent: u64,
    pub(crate) stopped: u64,
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
    /// The agent's newest step record when the last one started: a newer one is its.
    records_before: Option<u32>,
    /// Not started again before this: its last driver ended on an outage.
    paused_until: Option<Instant>,
    /// How many times it was paused at this tip (each pause twice the one before).
    pauses: u32,
}

impl Launched {
    /// Whether its last driver is still alive (perhaps still starting: no lock yet).
    fn alive(&self) -> bool {
        self.driver.is_some_and(|(pid, started)| {
            infra::process::running(pid) && infra::process::start_time(pid) == Some(started)
        })
    }
}

/// How many drivers started at one tip must end without moving it before the agent is
/// reported dead (the first may meet a driver still letting go, or be killed).
const LAUNCHES_BEFORE_DEATH: u32 = 3;

/// The longest an agent is paused for an outage before its driver is tried again.
const LONGEST_PAUSE: Duration = Duration::from_secs(600);

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
    /// Agents with work it has not claimed: since when it has seen each waiting.
    waiting: HashMap<AgentId, Instant>,
    /// What `work_left` said of agents it does not drive, by tip and `replied` mark.
    work_seen: HashMap<AgentId, (LookedAt, Option<&'static str>)>,
    /// Config lineages as taken in: the remote's commit, and the commit made of it here.
    rebased: HashMap<String, (Oid, Oid)>,
    /// What its last take-in saw (`None`: the next looks at everything).
    took_in: Option<inbound::TookIn>,
    /// Its claims, renewed by a thread of their own (see [`lease_keeper`]).
    leases: Arc<Leases>,
    /// Agents it stopped as asked, with the request carried out (withdrawn once what the
    /// stop wrote is on the remote).
    stopping: HashMap<AgentId, stops::Stopping>,
    /// When it last swept what killed processes left in its repositories.
    swept: Option<Instant>,
    /// Its lock on the workspace (`Layout::worker_lock`): its claim files count only
    /// while it lives.
    _held: LockGuard,
    pub tally: Tally,
}

/// How often a worker sweeps what killed processes (a worker or driver killed here
/// before it) left in its repositories.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

impl<'w> Worker<'w> {
    /// A worker of `remote` in `ws`, which from now on starts drivers only for the
    /// agents it claims. Claims a previous worker here held are not its own.
    pub fn new(ws: &'w Workspace, rt: &'w Runtime, remote: Remote, options: Options) -> Result<Worker<'w>> {
        std::fs::create_dir_all(ws.layout.worker()).map_err(local)?;
        // One worker a workspace: the claims and drivers here are its alone.
        let Some(held) = LockGuard::try_acquire(&ws.layout.worker_lock()).map_err(local)? else {
            let by = match LockGuard::probe(&ws.layout.worker_lock()) {
                Ok(Probe::Held(Some(holder))) => format!(" (pid {})", holder.pid),
                _ => String::new(),
            };
            return Err(WorkerError::Busy(format!("another worker{by} already drives this workspace")));
        };
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
        // (And those of the pushes a kill cut short, in the repository pushes go from.)
        let _ = std::fs::remove_dir_all(wire::pushing(&ws.layout.repo()).join(OUTGOING));
        let mut claims = Claims::new(&ws.layout.repo(), &remote.url, &options.name, options.lease);
        claims.set_capacity(options.max_agents);
        // Known to the other workers before it reaches for any agent (out of reach: its
        // lease keeper says so later).
        let _ = claims.announce(Instant::now());

        let leases = Arc::new(Leases { claims: Mutex::new(claims), gone: Mutex::new(Renewal::default()) });
        lease_keeper(ws.layout.clone(), Arc::downgrade(&leases), options.lease);
        Ok(Worker {
            ws,
            rt,
            remote,
            options,
            owned: HashMap::new(),
            unstarted: HashMap::new(),
            waiting: HashMap::new(),
            rebased: HashMap::new(),
            took_in: None,
            work_seen: HashMap::new(),
            leases,
            stopping: HashMap::new(),
            swept: None,
            _held: held,
            tally: Tally::default(),
        })
    }

    /// One round (see the module's words). An error (the remote out of reach) leaves
    /// every claim as it was; the next round tries again, and a claim not renewed for
    /// half a lease has its driver killed first.
    pub fn round(&mut self, on: &mut dyn FnMut(Event)) -> Result<()> {
        self.tally.rounds += 1;
        if self.swept.is_none_or(|at| at.elapsed() >= SWEEP_EVERY) {
            self.ws.sweep_leftovers();
            self.swept = Some(Instant::now());
        }
        let gone: Renewal = std::mem::take(
            &mut *self.leases.gone.lock().map_err(|_| WorkerError::Local("the lease keeper panicked".into()))?,
        );
        for (id, dropped) in gone.lost.iter().map(|id| (id, false)).chain(gone.dropped.iter().map(|id| (id, true))) {
            if let Ok(id) = AgentId::parse(id) {
                self.lose(&id, dropped, on);
            }
        }
        // (A command of the user's in this workspace waits for the round, and it for that.)
        let _turn = remote::turn(self.ws, &self.remote)?;
        let seen = remote::fetch(self.ws, &self.remote)?;
        let listed: Vec<(String, Oid)> = seen.repo.iter().map(|(n, o)| (n.clone(), *o)).collect();
        // Seen now, after the fetch (which may have taken long): a value is only as old
        // as this worker knows it to be.
        self.claims()?.observe(&listed, Instant::now());
        self.take_in(&seen)?;
        self.stop_asked(&seen, on)?;
        let delivered = self.deliver(&seen, None, on)?;
        self.drive(&seen, on)?;
        // (Made ready close to the push: only agents whose claims are fresh now are sent.)
        let publishing = self.publishing(&seen)?;
        // (Let go of first: the claims made in the same push may take their places.)
        let mut swaps = self.let_go_of_idle(&seen, &publishing.dirty, on)?;
        let releases = swaps.len();
        let claiming = self.claim_work(&seen)?;
        swaps.extend_from_slice(claiming.swaps());
        // Everything the round sends, in one push: a ref out of place in one part holds
        // back no other.
        // (Seeing of the remote's refs only those it moves, and the branches its new
        // agents were made from.)
        let forked = publish::forked_from(&publishing.updates);
        let repo = self.ws.layout.repo();
        let mut went =
            wire::push_parts(&repo, &self.remote.url, &publishing.updates, &delivered, &swaps, Some(&forked))
                .map_err(|e| remote::unreachable(&self.remote, e))?;
        // (The claims first: they are the remote's now, whatever the pushes after do.)
        let claimed = went.swaps.split_off(releases);
        let claimed = self.claimed(claiming, claimed, on)?;
        self.published(&seen, publishing, &went.whole, on)?;
        // The messages that are its new agents' work, delivered and their drivers
        // started now rather than a round later (what else they have, `drive` starts
        // next round).
        if !claimed.is_empty() {
            self.deliver(&seen, Some(&claimed), on)?;
        }
        Ok(())
    }

    /// Its claims (the lease keeper renews them meanwhile, between these uses).
    fn claims(&self) -> Result<std::sync::MutexGuard<'_, Claims>> {
        self.leases.claims.lock().map_err(|_| WorkerError::Local("the lease keeper panicked".into()))
    }

    /// Whether it holds `id` and may write it now.
    fn fresh(&self, id: &AgentId) -> bool {
        self.claims().is_ok_and(|c| c.fresh(id.as_str(), Instant::now()))
    }

    /// Kills every driver, sends what they committed, lets go of every claim, and leaves
    /// the workspace as it was before it was a worker's.
    pub fn shut_down(&mut self, on: &mut dyn FnMut(Event)) -> Result<()> {
        // Each driver, holding its agent or still starting.
        for id in self.owned.keys() {
            self.end_driver(id);
        }
        let settled = Instant::now() + Duration::from_secs(5);
        while self.owned.keys().any(|id| driven_here(self.ws, id)) && Instant::now() < settled {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _turn = remote::turn(self.ws, &self.remote)?;
        let seen = remote::fetch(self.ws, &self.remote)?;
        self.publish(&seen, on)?;
        let all: Vec<AgentId> = self.owned.keys().cloned().collect();
        let names: Vec<String> = all.iter().map(|id| id.to_string()).collect();
        // Fenced here first; then its claims and its presence, in one push.
        self.let_go_here(&all, on);
        self.claims()?.leave(&names)?;
        self.owned.clear();
        // An ordinary workspace again: its agents' drivers may start here (a tree handed
        // to the fleet still never does).
        let _ = std::fs::remove_dir_all(self.ws.layout.worker());
        Ok(())
    }

    /// Stops driving `id`: another worker took its claim over, or (`dropped`) this one
    /// let it go, unable to keep it fresh.
    fn lose(&mut self, id: &AgentId, dropped: bool, on: &mut dyn FnMut(Event)) {
        kill_driver(self.ws, id);
        if let Ok(mut claims) = self.claims() {
            claims.forget(id.as_str());
        }
        drop_inbox(self.ws, id);
        let _ = std::fs::remove_file(self.ws.layout.worker_claim(id));
        self.owned.remove(id);
        self.stopping.remove(id);
        if dropped {
            self.tally.dropped += 1;
            on(Event::Dropped { agent: id.to_string() });
        } else {
            self.tally.lost += 1;
            on(Event::Lost { agent: id.to_string() });
        }
    }

    /// Starts a driver for `id` (unless one runs), counting those started at its tip.
    fn start(&mut self, id: &AgentId, on: &mut dyn FnMut(Event)) -> Result<()> {
        let tip = self.ws.repo.branch_tip(&id.branch())?;
        // Before it starts: a record its driver writes at once is newer.
        let records_before = newest_record(self.ws, id);
        // A driver that holds it drains its inbox before it lets go: nothing started.
        let crate::agents::runtime::Woken::Launched(pid) = self.rt.wake(id).map_err(local)? else { return Ok(()) };
        on(Event::Started { agent: id.to_string() });
        let driver = infra::process::start_time(pid).map(|s| (pid, s));
        if let (Some(owned), Some(tip)) = (self.owned.get_mut(id), tip) {
            let (times, pauses) = match owned.launched {
                Some(l) if l.tip == tip => (l.times + 1, l.pauses),
                _ => (1, 0),
            };
            owned.launched = Some(Launched { tip, times, driver, records_before, paused_until: None, pauses });
        }
        Ok(())
    }

    /// Its agents with work and no driver get one; one whose drivers all ended at the tip
    /// they were started at, three times, is reported to its parent as dead (once for the fleet:
    /// the `died` mark travels) and left alone.
    fn drive(&mut self, seen: &Seen, on: &mut dyn FnMut(Event)) -> Result<()> {
        let ws = self.ws;
        let mut loader = Loader::default();
        let asked: HashSet<AgentId> = stops::asked(seen).into_iter().map(|(id, _)| id).collect();
        for id in self.owned.keys().cloned().collect::<Vec<_>>() {
            // One being stopped is not started (its stop is carried out first).
            if !self.fresh(&id) || driven_here(ws, &id) || asked.contains(&id) || self.stopping.contains_key(&id) {
                continue;
            }
            let Some(tip) = ws.repo.branch_tip(&id.branch())? else { continue };
            if ws.repo.mark(Mark::Died.kind(), id.as_str())?.as_deref() == Some(tip.to_string().as_bytes()) {
                continue;
            }
            // A stopped one starts again for a message of the user's sent after its stop
            // (its driver clears the mark): tried each round until one has it.
            if ws.repo.mark(lifecycle::STOPPED, id.as_str())?.is_some() {
                if stops::user_mail(ws, seen, &id) && inbox::has_pending(&ws.layout, &id) {
                    self.start_counted(&id, tip, on)?;
                }
                continue;
            }
            let parent = id.parent().map(|p| p.to_string());
            // An agent whose branch does not read has nothing a driver could do.
            if lifecycle::work_left(ws, &mut loader, &id, tip, parent.as_deref()).ok().flatten().is_none() {
                continue;
            }
            self.start_counted(&id, tip, on)?;
        }
        Ok(())
    }

    /// Starts a driver for `id` at `tip` unless its last one still runs there; one whose
    /// drivers all ended at `tip`, three times, is reported to its parent as dead (once
    /// for the fleet: the `died` mark travels) instead.
    fn start_counted(&mut self, id: &AgentId, tip: Oid, on: &mut dyn FnMut(Event)) -> Result<()> {
        let ws = self.ws;
        let launched = self.owned[id].launched.filter(|l| l.tip == tip);
        let alive = launched.is_some_and(|l| l.alive());
        // Why its last driver ended, when its provider's outage ended it (read once).
        let outage = launched
            .filter(|l| !alive && l.paused_until.is_none())
            .and_then(|l| outage_since(ws, id, l.records_before));
        match launched {
            Some(_) if alive => {}
            Some(l) if l.paused_until.is_some_and(|until| Instant::now() < until) => {}
            Some(l) if outage.is_some() => {
                // Its provider was down past the retries: nothing wrong with the agent.
                // Paused for a lease, twice that the next time, up to ten minutes.
                let why = outage.unwrap_or_default();
                let pause = self.options.lease.saturating_mul(1 << l.pauses.min(16)).min(LONGEST_PAUSE);
                if let Some(owned) = self.owned.get_mut(id) {
                    owned.launched = Some(Launched {
                        times: l.times.saturating_sub(1),
                        paused_until: Some(Instant::now() + pause),
                        pauses: l.pauses + 1,
                        ..l
                    });
                }
                on(Event::Paused { agent: id.to_string(), why });
            }
            Some(l) if l.times >= LAUNCHES_BEFORE_DEATH => {
                // Started at this tip time and again, and gone without moving it.
                ws.repo.set_mark(Mark::Died.kind(), id.as_str(), tip.to_string().as_bytes())?;
                if let Some(parent) = id.parent() {
                    let body = format!(
                        "`{id}` stopped working and a new driver did not get it further; everything it did is on its branch (commit {tip}). `offshoot log {id}` shows its last step; a message to it tries again."
                    );
                    lifecycle::deposit_result(ws, self.rt, id, &parent, Epitaph::Died.as_str(), tip, body)
                        .map_err(local)?;
                }
                on(Event::Died { agent: id.to_string() });
            }
            _ => self.start(id, on)?,
        }
        Ok(())
    }
}

/// The number of `id`'s newest step record here.
fn newest_record(ws: &Workspace, id: &AgentId) -> Option<u32> {
    crate::store::step_record::numbers(&ws.layout.steps(id)).into_iter().max()
}

/// What the call of `id`'s newest step record said, when that record is newer than
/// `before` and its call ended on an outage (its provider down past the retries).
fn outage_since(ws: &Workspace, id: &AgentId, before: Option<u32>) -> Option<String> {
    let newest = newest_record(ws, id).filter(|n| Some(*n) > before)?;
    let record = crate::store::step_record::StepRecord::open(&ws.layout, id, newest)?;
    let meta: domain::step::StepMeta = serde_json::from_slice(&record.read("meta.json")?).ok()?;
    meta.outage.then(|| meta.error.unwrap_or_default())
}
