//! Claims: which worker drives an agent, decided on the remote. A claim is one
//! ref, `refs/offshoot/claims/<id>`, holding a lease blob (`worker <name>\nserial <n>\n`);
//! every change is a compare-and-swap of that ref over the smart protocol: made
//! create-only, renewed from the holder's own last value, taken over from a value that
//! has not changed for a whole lease, let go (deleted) from the holder's value.
//!
//! No clock is compared between machines. A lease expires in the eyes of whoever watches
//! it: a value one watcher has seen unchanged for `lease` (its own monotonic clock) is
//! taken for abandoned. The holder stops writing the agent's branch once `lease / 2` has
//! passed since its last renewal the remote took (`Held::fresh`), so by the time any
//! watcher can take over it has stopped: this holds as long as clocks *run* at about the
//! same rate, whatever they read. A partitioned holder therefore fences itself, and its
//! branch pushes (each a compare-and-swap from the tip it last pushed) would fail anyway
//! once the new holder has moved the branch.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use infra::git::CommitId as Oid;
use infra::git::GitError;
use infra::git::remote::{self, Swap};

/// The ref of `id`'s claim.
pub fn claim_ref(id: &str) -> String {
    domain::marks::Shelf::Claims.ref_name(id)
}

/// The ref of worker `name`'s presence.
fn presence_ref(name: &str) -> String {
    domain::marks::Shelf::Workers.ref_name(name)
}

/// How many leases a presence unchanged lives before any worker removes it (a worker
/// killed never removes its own).
const PRESENCE_LEFT_FOR: u32 = 10;

/// A lease as its blob says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lease {
    pub(crate) worker: String,
    pub(crate) serial: u64,
    /// Random: no two leases are the same blob, so a watcher's compare-and-swap from a
    /// value it saw long ago never matches a newer lease that happens to read alike.
    pub(crate) nonce: u32,
}

impl Lease {
    pub fn render(&self) -> String {
        format!("worker {}\nserial {}\nnonce {:08x}\n", self.worker, self.serial, self.nonce)
    }

    pub fn parse(text: &str) -> Option<Lease> {
        let (mut worker, mut serial, mut nonce) = (None, None, 0);
        for line in text.lines() {
            match line.split_once(' ') {
                Some(("worker", w)) if !w.is_empty() => worker = Some(w.to_owned()),
                Some(("serial", n)) => serial = n.parse().ok(),
                Some(("nonce", n)) => nonce = u32::from_str_radix(n, 16).unwrap_or(0),
                _ => {}
            }
        }
        Some(Lease { worker: worker?, serial: serial?, nonce })
    }
}

/// A claim this worker holds.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// The value of the claim ref, as this worker last wrote it.
    pub(crate) value: Oid,
    pub(crate) serial: u64,
    /// When the remote last took a write of it.
    pub(crate) renewed: Instant,
    /// Whether its last renewal came after it had gone stale (its driver fenced): one
    /// stale again at the next is one this worker cannot keep fresh, and is let go.
    pub(crate) late: bool,
}

/// Claims to make in one push, as [`Claims::plan`] decided them.
pub struct ClaimPlan {
    /// Each id's outcome when decided without the remote (held already, or busy).
    decided: Vec<Option<Claimed>>,
    /// The rest: (id, value expected there, value written, serial), in order.
    leases: Vec<(String, Option<Oid>, Oid, u64)>,
    /// Their compare-and-swaps, for [`push`].
    pub swaps: Vec<Swap3>,
}

/// Pushes `swaps` to the remote at `url`, objects from `git_dir`, in one push; how each
/// went, in order. (Without a worker's claims locked: its lease keeper goes on meanwhile.)
pub fn push(git_dir: &Path, url: &str, swaps: &[Swap3]) -> Result<Vec<Swap>, GitError> {
    if swaps.is_empty() {
        return Ok(Vec::new());
    }
    remote::compare_and_swap_each(git_dir, url, swaps)
}

/// One ref's compare-and-swap: (ref, expected, new; `None` deletes).
pub type Swap3 = (String, Option<Oid>, Option<Oid>);

/// A swap of a lease ref, with the value it writes and its serial.
type Written = (Swap3, (Oid, u64));

/// What a renewal pass came to.
#[derive(Debug, Default)]
pub struct Renewal {
    /// Claims another worker took over: stop driving them.
    pub lost: Vec<String>,
    /// Claims not renewed within half a lease, let go instead of renewed.
    pub dropped: Vec<String>,
}

/// What trying to claim an agent came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// This worker holds it now (`took_over`: from a lease left to expire).
    Mine { took_over: bool },
    /// Another worker's lease, still live as far as this worker has seen.
    Busy { holder: String },
    /// Another worker moved the claim first.
    Lost,
}

/// A worker's view of the claims on one remote.
pub struct Claims {
    git_dir: std::path::PathBuf,
    url: String,
    worker: String,
    lease: Duration,
    /// Each other claim's value, and since when this worker has seen it unchanged.
    watched: HashMap<String, (Oid, Instant)>,
    /// The worker each lease value seen names (read once per value).
    holders: HashMap<Oid, Option<String>>,
    /// Other workers' presences: value, since when seen unchanged, and the most agents
    /// it says it drives at once.
    present: HashMap<String, (Oid, Instant, Option<usize>)>,
    /// The most agents this worker drives at once, said in its presence.
    capacity: Option<usize>,
    /// Its own presence as last written (value, serial, when), if the remote took it.
    presence: Option<(Oid, u64, Instant)>,
    /// Set by [`Claims::leave`]: no presence is written again.
    left: bool,
    held: HashMap<String, Held>,
    /// The values the last renewal that failed tried to write, by claim (and their
    /// serials): its push may have reached the remote before the error came back, so a
    /// claim found at one of them is still this worker's.
    unsure: HashMap<String, (Oid, u64)>,
}

impl Claims {
    /// Claims on the remote at `url` by `worker`, objects written in `git_dir`.
    pub fn new(git_dir: &Path, url: &str, worker: &str, lease: Duration) -> Claims {
        Claims {
            git_dir: git_dir.to_owned(),
            url: url.to_owned(),
            worker: worker.to_owned(),
            lease,
            watched: HashMap::new(),
            holders: HashMap::new(),
            present: HashMap::new(),
            capacity: None,
            presence: None,
            left: false,
            held: HashMap::new(),
            unsure: HashMap::new(),
        }
    }

    pub(crate) fn held(&self) -> impl Iterator<Item = (&String, &Held)> {
        self.held.iter()
    }

    pub fn holds(&self, id: &str) -> bool {
        self.held.contains_key(id)
    }

    /// Whether this worker's claim of `id` was renewed recently enough that no other
    /// worker can have taken it over: only then may it write the agent's branch.
    pub fn fresh(&self, id: &str, now: Instant) -> bool {
        self.held.get(id).is_some_and(|h| now.duration_since(h.renewed) < self.lease / 2)
    }

    /// Whether another worker holds `id`'s claim, as far as this one has seen: a lease
    /// it watched change within the last lease.
    pub(crate) fn busy(&self, id: &str, now: Instant) -> bool {
        !self.held.contains_key(id)
            && self.watched.get(id).is_some_and(|(_, since)| now.duration_since(*since) < self.lease)
    }

    /// Notes the claims the remote holds now (`id` → value), from a fetch's listing.
    pub fn observe(&mut self, listed: &[(String, Oid)], now: Instant) {
        let workers = presence_ref("");
        let current: HashMap<&str, Oid> =
            listed.iter().filter_map(|(n, o)| n.strip_prefix(&workers).map(|w| (w, *o))).collect();
        self.present.retain(|w, _| current.contains_key(w.as_str()));
        for (worker, value) in current.into_iter().filter(|(w, _)| *w != self.worker) {
            if self.present.get(worker).is_none_or(|(seen, _, _)| *seen != value) {
                let blob = infra::git::bundle::blob(&self.git_dir, value).unwrap_or_default();
                let max = String::from_utf8_lossy(&blob).lines().find_map(|l| l.strip_prefix("max ")?.parse().ok());
                self.present.insert(worker.to_owned(), (value, now, max));
            }
        }
        let prefix = claim_ref("");
        let current: HashMap<&str, Oid> =
            listed.iter().filter_map(|(n, o)| n.strip_prefix(&prefix).map(|id| (id, *o))).collect();
        self.watched.retain(|id, _| current.contains_key(id.as_str()));
        for (id, value) in current {
            match self.watched.get(id) {
                Some((seen, _)) if *seen == value => {}
                _ => {
                    self.watched.insert(id.to_owned(), (value, now));
                }
            }
        }
        let values: std::collections::HashSet<Oid> = self.watched.values().map(|(v, _)| *v).collect();
        self.holders.retain(|v, _| values.contains(v));
        for value in values {
            if !self.holders.contains_key(&value) {
                let holder = infra::git::bundle::blob(&self.git_dir, value)
                    .and_then(|b| Lease::parse(&String::from_utf8_lossy(&b)))
                    .map(|l| l.worker);
                self.holders.insert(value, holder);
            }
        }
    }

    /// The workers whose leases this worker has seen change within the last lease, and
    /// itself: those alive, as far as it knows.
    pub(crate) fn workers(&self, now: Instant) -> Vec<String> {
        let mut workers: Vec<String> = self
            .watched
            .values()
            .filter(|(_, since)| now.duration_since(*since) < self.lease)
            .filter_map(|(value, _)| self.holders.get(value).cloned().flatten())
            .chain(
                self.present
                    .iter()
                    .filter(|(_, (_, since, _))| now.duration_since(*since) < self.lease)
                    .map(|(w, _)| w.clone()),
            )
            .chain([self.worker.clone()])
            .collect();
        workers.sort();
        workers.dedup();
        workers
    }

    fn blob(&self, lease: &Lease) -> Result<Oid, GitError> {
        remote::write_blob(&self.git_dir, lease.render().as_bytes())
    }

    /// Tries to claim `id`: create-only when nobody holds it, a takeover when the lease
    /// seen has not changed for a whole lease.
    pub fn claim(&mut self, id: &str, now: Instant) -> Result<Claimed, GitError> {
        let mut claimed = self.claim_each(&[id.to_owned()], now)?;
        Ok(claimed.pop().unwrap_or(Claimed::Lost))
    }

    /// [`Claims::claim`] of each of `ids`, all in one push (each going through or not on
    /// its own); how each went, in order.
    pub fn claim_each(&mut self, ids: &[String], now: Instant) -> Result<Vec<Claimed>, GitError> {
        let plan = self.plan(ids, now)?;
        let swapped = push(&self.git_dir, &self.url, &plan.swaps)?;
        Ok(self.settle(plan, swapped, now))
    }

    /// What claiming each of `ids` takes: the compare-and-swaps to push, with what is
    /// known without the remote.
    pub fn plan(&mut self, ids: &[String], now: Instant) -> Result<ClaimPlan, GitError> {
        let mut plan = ClaimPlan { decided: Vec::new(), leases: Vec::new(), swaps: Vec::new() };
        for id in ids {
            if self.held.contains_key(id) {
                plan.decided.push(Some(Claimed::Mine { took_over: false }));
                continue;
            }
            let expected = match self.watched.get(id) {
                None => None,
                Some((value, since)) if now.duration_since(*since) < self.lease => {
                    let holder = self.holders.get(value).cloned().flatten();
                    let holder = holder.unwrap_or_else(|| "another worker".into());
                    plan.decided.push(Some(Claimed::Busy { holder }));
                    continue;
                }
                Some((value, _)) => Some(*value),
            };
            let serial = expected
                .and_then(|v| infra::git::bundle::blob(&self.git_dir, v))
                .and_then(|b| Lease::parse(&String::from_utf8_lossy(&b)))
                .map_or(0, |l| l.serial + 1);
            let lease = Lease { worker: self.worker.clone(), serial, nonce: crate::random_u32() };
            let value = self.blob(&lease)?;
            plan.swaps.push((claim_ref(id), expected, Some(value)));
            plan.leases.push((id.clone(), expected, value, serial));
            plan.decided.push(None);
        }
        Ok(plan)
    }

    /// Takes in how `plan`'s push went (`swapped`, in order): how each claim came out.
    pub fn settle(&mut self, plan: ClaimPlan, swapped: Vec<Swap>, now: Instant) -> Vec<Claimed> {
        let mut outcomes = plan.leases.into_iter().zip(swapped);
        let mut claimed = Vec::new();
        for decision in plan.decided {
            if let Some(decision) = decision {
                claimed.push(decision);
                continue;
            }
            let Some(((id, expected, value, serial), swap)) = outcomes.next() else { break };
            claimed.push(match swap {
                Swap::Done => {
                    self.watched.remove(&id);
                    self.held.insert(id, Held { value, serial, renewed: now, late: false });
                    Claimed::Mine { took_over: expected.is_some() }
                }
                Swap::Moved { found } => {
                    if let Some(found) = found {
                        self.watched.insert(id, (found, now));
                    }
                    Claimed::Lost
                }
                Swap::Refused(_) => Claimed::Lost,
            });
        }
        claimed
    }

    /// Renews every claim held whose last renewal is older than `every`, all in one
    /// push, however many (one push a claim made a worker holding many claims on a slow
    /// remote renew each too late, for ever). A claim stale (not renewed within half a
    /// lease: its driver fenced) is renewed once; stale again at the next renewal, it is
    /// one this worker cannot keep fresh, and is let go in that push instead, after
    /// `before_drop` has fenced it here: renewing it would keep from the fleet an agent
    /// this worker may not drive, for as long as it stays too slow.
    pub fn renew(
        &mut self,
        every: Duration,
        now: Instant,
        before_drop: &mut dyn FnMut(&str),
    ) -> Result<Renewal, GitError> {
        let mut due: Vec<(String, Held)> = self
            .held
            .iter()
            .filter(|(_, h)| now.duration_since(h.renewed) >= every)
            .map(|(id, h)| (id.clone(), h.clone()))
            .collect();
        due.sort_by(|a, b| a.0.cmp(&b.0));
        let mut swaps = Vec::new();
        // Each due claim's new value and serial, and whether it was stale; `None`: let go.
        let mut renewed = Vec::new();
        for (id, held) in &due {
            let stale = !self.fresh(id, now);
            if stale && held.late {
                // Fenced here before anyone may take it: its driver gone, its file too.
                before_drop(id);
                swaps.push((claim_ref(id), Some(held.value), None));
                renewed.push(None);
                continue;
            }
            let lease = Lease { worker: self.worker.clone(), serial: held.serial + 1, nonce: crate::random_u32() };
            let value = self.blob(&lease)?;
            swaps.push((claim_ref(id), Some(held.value), Some(value)));
            renewed.push(Some((value, lease.serial, stale)));
        }
        // Its presence (when due), and others' long silent, in the same push.
        let presence = self.presence_swap(every, now)?;
        let extra = presence.iter().cloned().chain(self.sweep_swaps(now)).collect::<Vec<_>>();
        let first_extra = swaps.len();
        swaps.extend(extra.iter().map(|(swap, _)| swap.clone()));
        if swaps.is_empty() {
            return Ok(Renewal::default());
        }
        let swapped = match remote::compare_and_swap_each(&self.git_dir, &self.url, &swaps) {
            Ok(mut swapped) => {
                let tail = swapped.split_off(first_extra.min(swapped.len()));
                if let (Some((_, written)), Some(outcome)) = (presence, tail.first()) {
                    self.presence_written(written, outcome, now);
                }
                swapped
            }
            Err(e) => {
                let tried = due.iter().zip(&renewed).filter_map(|((id, _), r)| r.map(|(v, s, _)| (id.clone(), (v, s))));
                self.unsure = tried.collect();
                return Err(e);
            }
        };
        let unsure = std::mem::take(&mut self.unsure);
        let mut renewal = Renewal::default();
        for (((id, held), renewed), swap) in due.into_iter().zip(renewed).zip(swapped) {
            // A failed renewal that did reach the remote: still this worker's, with that value.
            let ours = |found: &Option<Oid>| unsure.get(&id).filter(|(v, _)| Some(*v) == *found).copied();
            let Some((value, serial, stale)) = renewed else {
                match swap {
                    Swap::Done => {
                        self.held.remove(&id);
                        renewal.dropped.push(id);
                    }
                    // Its value is the lost renewal's: let go at the next pass.
                    Swap::Moved { found } if ours(&found).is_some() => {
                        let (value, serial) = ours(&found).unwrap_or((held.value, held.serial));
                        self.held.insert(id, Held { value, serial, ..held });
                    }
                    Swap::Moved { .. } | Swap::Refused(_) => {
                        self.held.remove(&id);
                        renewal.lost.push(id);
                    }
                }
                continue;
            };
            match swap {
                Swap::Done => {
                    self.held.insert(id, Held { value, serial, renewed: now, late: stale });
                }
                // (When exactly it was renewed is not known: as of before it, still due.)
                Swap::Moved { found } if ours(&found).is_some() => {
                    let (value, serial) = ours(&found).unwrap_or((value, serial));
                    self.held.insert(id, Held { value, serial, ..held });
                }
                Swap::Moved { .. } | Swap::Refused(_) => {
                    self.held.remove(&id);
                    renewal.lost.push(id);
                }
            }
        }
        Ok(renewal)
    }

    /// Says in its presence that it drives at most `max` agents at once.
    pub fn set_capacity(&mut self, max: usize) {
        self.capacity = Some(max);
    }

    /// Whether `worker` has room for another agent, as far as this one has seen: fewer
    /// live claims than the most its presence says it drives. One that says nothing has
    /// none (others then take what it is preferred for, once it has waited).
    pub(crate) fn room(&self, worker: &str, now: Instant) -> bool {
        if worker == self.worker {
            return self.capacity.is_some_and(|max| self.held.len() < max);
        }
        let Some(max) = self.present.get(worker).and_then(|(_, _, max)| *max) else { return false };
        let holds = self
            .watched
            .values()
            .filter(|(value, since)| {
                now.duration_since(*since) < self.lease
                    && self.holders.get(value).is_some_and(|h| h.as_deref() == Some(worker))
            })
            .count();
        holds < max
    }

    /// Its presence's update, when one is due: (the swap, what it writes and its serial).
    fn presence_swap(&mut self, every: Duration, now: Instant) -> Result<Option<Written>, GitError> {
        if self.left || self.presence.is_some_and(|(_, _, at)| now.duration_since(at) < every) {
            return Ok(None);
        }
        let (expected, serial) = self.presence.map_or((None, 0), |(v, s, _)| (Some(v), s + 1));
        let lease = Lease { worker: self.worker.clone(), serial, nonce: crate::random_u32() };
        let mut text = lease.render();
        if let Some(max) = self.capacity {
            text.push_str(&format!("max {max}\n"));
        }
        let value = remote::write_blob(&self.git_dir, text.as_bytes())?;
        Ok(Some(((presence_ref(&self.worker), expected, Some(value)), (value, serial))))
    }

    fn presence_written(&mut self, (value, serial): (Oid, u64), outcome: &Swap, now: Instant) {
        self.presence = match outcome {
            Swap::Done => Some((value, serial, now)),
            // A write of its own whose answer was lost: taken as it is.
            Swap::Moved { found: Some(found) } => Some((*found, serial, now)),
            // Removed (swept as long silent): made afresh next time.
            Swap::Moved { found: None } | Swap::Refused(_) => None,
        };
    }

    /// Removals of presences silent for [`PRESENCE_LEFT_FOR`] leases (a few a push).
    fn sweep_swaps(&self, now: Instant) -> Vec<Written> {
        self.present
            .iter()
            .filter(|(_, (_, since, _))| now.duration_since(*since) >= self.lease * PRESENCE_LEFT_FOR)
            .take(8)
            .map(|(w, (v, _, _))| ((presence_ref(w), Some(*v), None), (*v, 0)))
            .collect()
    }

    /// Says on the remote that this worker is alive (its presence), at once: other
    /// workers count it when they choose which agents to reach for.
    pub fn announce(&mut self, now: Instant) -> Result<(), GitError> {
        let Some((swap, written)) = self.presence_swap(Duration::ZERO, now)? else { return Ok(()) };
        let outcome = remote::compare_and_swap_each(&self.git_dir, &self.url, &[swap])?;
        if let Some(outcome) = outcome.first() {
            self.presence_written(written, outcome, now);
        }
        Ok(())
    }

    /// Lets every claim of `ids` go and withdraws its presence, all in one push.
    pub fn leave(&mut self, ids: &[String]) -> Result<(), GitError> {
        self.left = true;
        let mut swaps = self.release_swaps(ids);
        if let Some((value, _, _)) = self.presence.take() {
            swaps.push((presence_ref(&self.worker), Some(value), None));
        }
        if swaps.is_empty() {
            return Ok(());
        }
        remote::compare_and_swap_each(&self.git_dir, &self.url, &swaps).map(|_| ())
    }

    /// Stops counting `id` as held (another worker moved its branch: the claim is
    /// theirs whatever the ref says), without touching the remote.
    pub(crate) fn forget(&mut self, id: &str) {
        self.held.remove(id);
    }

    /// Lets `id` go: its claim is deleted if it is still this worker's.
    pub fn release(&mut self, id: &str) -> Result<(), GitError> {
        self.release_each(&[id.to_owned()])
    }

    /// Lets each of `ids` go, all in one push: each claim is deleted if it is still this
    /// worker's (one another took over stays theirs). Counted as let go whatever the
    /// push came to: one not deleted expires with its lease.
    pub fn release_each(&mut self, ids: &[String]) -> Result<(), GitError> {
        let deletes = self.release_swaps(ids);
        if deletes.is_empty() {
            return Ok(());
        }
        remote::compare_and_swap_each(&self.git_dir, &self.url, &deletes).map(|_| ())
    }

    /// The deletions of the claims of `ids` this worker holds, no longer counted held.
    pub(crate) fn release_swaps(&mut self, ids: &[String]) -> Vec<Swap3> {
        ids.iter().filter_map(|id| self.held.remove(id).map(|held| (claim_ref(id), Some(held.value), None))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Lease;

    #[test]
    fn a_lease_reads_back_as_written_and_nonsense_is_no_lease() {
        let lease = Lease { worker: "w1-host".into(), serial: 7, nonce: 0xdead };
        assert_eq!(Lease::parse(&lease.render()), Some(lease));
        assert_eq!(Lease::parse("worker \nserial 1\n"), None);
        assert_eq!(Lease::parse("worker a\nserial x\n"), None);
    }
}
