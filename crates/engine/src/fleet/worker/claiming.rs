//! What a worker reaches for and lets go of: claims of agents with work, and of agents
//! with nothing left, let go; both in the round's one push.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use domain::id::AgentId;
use domain::marks::{Mark, Shelf};
use infra::git::CommitId as Oid;

use super::leases::{driven_here, drop_inbox};
use super::{Event, Owned, Result, Worker, stops};
use crate::agents::lifecycle;
use crate::fleet::claims::{self, ClaimPlan, Claimed, Swap3};
use crate::fleet::remote::{self, Seen, inbox_prefix};
use crate::store::inbox;
use crate::store::snapshot::Loader;
use infra::git::remote::Swap;

/// Where worker `worker` ranks agent `id` (FNV-1a of both): the worker ranking an agent
/// highest among those alive is its preferred holder.
fn rank(worker: &str, id: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in worker.bytes().chain([0]).chain(id.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The claims a round reaches for (see [`Worker::claim_work`]).
#[derive(Default)]
pub(super) struct Claiming {
    chosen: Vec<(AgentId, Oid)>,
    /// The claims' compare-and-swaps, and when they were planned.
    plan: Option<(ClaimPlan, Instant)>,
}

impl Claiming {
    /// Its compare-and-swaps, to push.
    pub(super) fn swaps(&self) -> &[Swap3] {
        self.plan.as_ref().map_or(&[], |(plan, _)| &plan.swaps)
    }
}

impl Worker<'_> {
    /// Claims agents with work nobody drives, up to `max_agents`, all in one push. First
    /// those this worker is the preferred holder of among the workers it knows to be
    /// alive (rendezvous hashing: workers that know the same workers prefer the same one
    /// for each agent, so workers reaching at once seldom reach for the same agents);
    /// then any other left waiting for an eighth of a lease (its preferred worker is full,
    /// or gone).
    ///
    /// What it reaches for, to be pushed with the round's other updates; [`Worker::claimed`]
    /// takes in how that went.
    pub(super) fn claim_work(&mut self, seen: &Seen) -> Result<Claiming> {
        let ws = self.ws;
        let free = self.options.max_agents.saturating_sub(self.owned.len());
        // (Its first round only looks: the workers that came up with it have said so by
        // the next, and it knows whom each agent is preferred by.)
        if free == 0 || self.tally.rounds < 2 {
            return Ok(Claiming::default());
        }
        let mut loader = Loader::default();
        let candidates: Vec<(AgentId, Oid)> = seen
            .repo
            .iter()
            .filter_map(|(n, o)| Some((AgentId::parse(n.strip_prefix("refs/heads/agents/")?).ok()?, *o)))
            .filter(|(id, _)| !self.owned.contains_key(id))
            .collect();
        let inbox = Shelf::Inbox.prefix();
        let with_mail: HashSet<&str> =
            seen.under(&inbox).filter_map(|(n, _)| n.strip_prefix(&inbox)?.split('/').next()).collect();
        let replied = |id: &AgentId| seen.repo.get(&Mark::Replied.ref_name(id)).copied();
        let asked: HashSet<AgentId> = stops::asked(seen).into_iter().map(|(id, _)| id).collect();
        let mut wanted: Vec<(AgentId, Oid)> = Vec::new();
        for (id, tip) in candidates {
            let mail = with_mail.contains(id.as_str());
            // What its transcript says is known for this tip (and answer paid) already.
            let key = (tip, replied(&id));
            let known = self.work_seen.get(&id).filter(|(at, _)| *at == key).map(|(_, left)| *left);
            // Settled, as far as this worker has seen (most agents of a long-lived
            // remote): a map lookup, not a look at its refs.
            if !mail && !asked.contains(&id) && known == Some(None) {
                continue;
            }
            // Held by another worker, as far as this one has seen: not even looked at.
            if self.claims()?.busy(id.as_str(), Instant::now()) {
                continue;
            }
            let root = id.root();
            let fleet = seen.repo.contains_key(&Mark::Fleet.ref_name(&root));
            if !fleet || driven_here(ws, &id) || ws.repo.branch_tip(&id.branch())? != Some(tip) {
                continue;
            }
            // A stopped agent waits (a child's result with it) until the user writes to it.
            let stopped = ws.repo.mark(lifecycle::STOPPED, id.as_str())?.is_some() && !stops::user_mail(ws, seen, &id);
            // (While a stop is asked of it, only carrying it out is work.)
            let revived = stopped && !asked.contains(&id) && stops::user_mail(ws, seen, &id);
            if (stopped && !revived)
                || ws.repo.mark(Mark::Died.kind(), id.as_str())?.as_deref() == Some(tip.to_string().as_bytes())
            {
                continue;
            }
            let parent = id.parent().map(|p| p.to_string());
            let left = match known {
                Some(left) => left,
                None => {
                    // One that does not read is passed over, not the round's failure.
                    let left = lifecycle::work_left(ws, &mut loader, &id, tip, parent.as_deref()).ok().flatten();
                    self.work_seen.insert(id.clone(), (key, left));
                    left
                }
            };
            // A stop asked of it is carried out by whoever holds it.
            let work = revived
                || asked.contains(&id)
                || match (mail, left) {
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
            let lineage = crate::store::snapshot::read_facts(&ws.repo, tip).map(|f| f.lineage).unwrap_or_default();
            if self.rebased.contains_key(&lineage) {
                wanted.push((id, tip));
            }
        }
        let chosen = self.choose(wanted, free)?;
        let ids: Vec<String> = chosen.iter().map(|(id, _)| id.to_string()).collect();
        // (The push without its claims locked: the lease keeper goes on meanwhile.)
        // (Each lease counted from before its push: a watcher's clock starts later.)
        let now = Instant::now();
        let plan = self.claims()?.plan(&ids, now)?;
        Ok(Claiming { chosen, plan: Some((plan, now)) })
    }

    /// Takes in how the claims of `claiming` went (`swapped`, in order); returns the
    /// agents it holds now.
    pub(super) fn claimed(
        &mut self,
        claiming: Claiming,
        swapped: Vec<Swap>,
        on: &mut dyn FnMut(Event),
    ) -> Result<Vec<AgentId>> {
        let ws = self.ws;
        let Claiming { chosen, plan: Some((plan, now)) } = claiming else { return Ok(Vec::new()) };
        let mut mine = Vec::new();
        let claimed = self.claims()?.settle(plan, swapped, now);
        let mut unkept = Vec::new();
        for ((id, tip), claimed) in chosen.into_iter().zip(claimed) {
            match claimed {
                Claimed::Mine { took_over } => {
                    // Its tree is the fleet's: once this worker has let go, no driver
                    // starts for it here (`drivable_here`).
                    let handed = remote::mark_handed(ws, &id.root()).is_ok();
                    if !handed || std::fs::write(ws.layout.worker_claim(&id), self.options.name.as_bytes()).is_err() {
                        // Not drivable here without it: let go again.
                        unkept.push(id.to_string());
                        continue;
                    }
                    self.owned.insert(id.clone(), Owned { pushed: tip, launched: None, records_at: None });
                    self.waiting.remove(&id);
                    self.tally.claimed += 1;
                    if took_over {
                        self.tally.took_over += 1;
                    }
                    on(Event::Claimed { agent: id.to_string(), took_over });
                    mine.push(id);
                }
                Claimed::Lost => self.tally.conflicts += 1,
                Claimed::Busy { .. } => {}
            }
        }
        let swaps = self.claims()?.release_swaps(&unkept);
        claims::push(&ws.layout.repo(), &self.remote.url, &swaps)?;
        Ok(mine)
    }

    /// Of the agents with work `wanted`, those this worker reaches for now, at most
    /// `free`: the ones it is the preferred holder of, then those waiting longest.
    fn choose(&mut self, wanted: Vec<(AgentId, Oid)>, free: usize) -> Result<Vec<(AgentId, Oid)>> {
        let now = Instant::now();
        let workers = self.claims()?.workers(now);
        let me = self.options.name.clone();
        let keep: HashSet<&AgentId> = wanted.iter().map(|(id, _)| id).collect();
        self.waiting.retain(|id, _| keep.contains(id));
        let patience = self.options.lease / 8;
        // Whether each worker has room, as far as this one has seen.
        let rooms: HashMap<&String, bool> = {
            let claims = self.claims()?;
            workers.iter().map(|w| (w, claims.room(w, now))).collect()
        };
        // Its own first, longest waiting first; then others' left waiting while their
        // preferred worker is full (or says nothing), newest first: the other end of the
        // order that worker takes them in once it has room.
        let mut ranked: Vec<(bool, u128, u64, (AgentId, Oid))> = Vec::new();
        for (id, tip) in wanted {
            let since = *self.waiting.entry(id.clone()).or_insert(now);
            let waited = now.duration_since(since);
            let owner = workers.iter().max_by_key(|w| rank(w, id.as_str()));
            if owner.is_none_or(|w| *w == me) {
                ranked.push((false, u128::MAX - waited.as_nanos(), 0, (id, tip)));
            } else if waited >= patience && owner.is_some_and(|w| !rooms.get(w).copied().unwrap_or(false)) {
                ranked.push((true, waited.as_nanos(), u64::MAX - rank(&me, id.as_str()), (id, tip)));
            }
        }
        ranked.sort_by_key(|r| (r.0, r.1, r.2));
        Ok(ranked.into_iter().take(free).map(|(_, _, _, chosen)| chosen).collect())
    }

    /// Lets go of its agents with nothing left to do and nothing left to send: here at
    /// once; their claims' deletions are returned, for the round's push.
    pub(super) fn let_go_of_idle(
        &mut self,
        seen: &Seen,
        dirty: &HashSet<AgentId>,
        on: &mut dyn FnMut(Event),
    ) -> Result<Vec<Swap3>> {
        let ws = self.ws;
        let mut loader = Loader::default();
        // A stop asked of it is carried out, and withdrawn, by it first.
        let asked: HashSet<AgentId> = stops::asked(seen).into_iter().map(|(id, _)| id).collect();
        let mut idle = Vec::new();
        for id in self.owned.keys().cloned().collect::<Vec<_>>() {
            if dirty.contains(&id) || driven_here(ws, &id) || self.stopping.contains_key(&id) || asked.contains(&id) {
                continue;
            }
            let Some(tip) = ws.repo.branch_tip(&id.branch())? else { continue };
            let owned = &self.owned[&id];
            let starting = owned.launched.is_some_and(|l| l.alive());
            // A stopped agent's mail waits for it on the remote, not held here (a message of
            // the user's that revives it has it claimed again).
            let stopped = ws.repo.mark(lifecycle::STOPPED, id.as_str())?.is_some() && !stops::user_mail(ws, seen, &id);
            if tip != owned.pushed || starting || (!stopped && inbox::has_pending(&ws.layout, &id)) {
                continue;
            }
            if !stopped && seen.under(&inbox_prefix(id.as_str())).next().is_some() {
                continue;
            }
            // A mark not yet there (`died`, `replied` set this round) goes first.
            let mut unsent = false;
            for mark in remote::travelling().filter(|m| !matches!(m, Mark::Ids | Mark::Names)) {
                let name = mark.ref_name(&id);
                unsent |= ws.repo.ref_target(&name)?.as_ref() != seen.repo.get(&name);
            }
            if unsent {
                continue;
            }
            if self.sending(&id) {
                continue;
            }
            let parent = id.parent().map(|p| p.to_string());
            let stopped = ws.repo.mark(lifecycle::STOPPED, id.as_str())?.is_some()
                || ws.repo.mark(Mark::Died.kind(), id.as_str())?.as_deref() == Some(tip.to_string().as_bytes());
            if !stopped && lifecycle::work_left(ws, &mut loader, &id, tip, parent.as_deref()).ok().flatten().is_some() {
                continue;
            }
            idle.push(id);
        }
        // Here first (no driver may start for them once their files are gone); a claim
        // the push does not delete expires with its lease.
        self.let_go_here(&idle, on);
        let names: Vec<String> = idle.iter().map(|id| id.to_string()).collect();
        Ok(self.claims()?.release_swaps(&names))
    }

    /// Lets go of `ids` here: their claim files, inboxes and bookkeeping.
    pub(super) fn let_go_here(&mut self, ids: &[AgentId], on: &mut dyn FnMut(Event)) {
        for id in ids {
            let _ = std::fs::remove_file(self.ws.layout.worker_claim(id));
            drop_inbox(self.ws, id);
            self.owned.remove(id);
            self.tally.released += 1;
            on(Event::Released { agent: id.to_string() });
        }
    }
}
