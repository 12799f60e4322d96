//! `offshoot fleet status`: what a remote's fleet holds right now, as an autoscaler
//! reads it — the queue (agents with work no worker claims) and how long its oldest has
//! waited, the claims and the workers holding them. One fetch; nothing is written but
//! the mirrors.

use std::collections::{BTreeMap, HashMap, HashSet};

use domain::id::AgentId;
use domain::marks::{Mark, Shelf};

use super::{Remote, Result, Seen, fetch, inbox_prefix, turn};
use crate::agents::lifecycle;
use crate::fleet::claims::Lease;
use crate::store::snapshot::Loader;
use crate::store::workspace::Workspace;

/// A remote's fleet, as one look saw it.
#[derive(Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FleetStatus {
    pub remote: String,
    /// Trees handed to the fleet (`prompt --on`).
    pub trees: usize,
    /// Agents of those trees.
    pub agents: usize,
    /// Agents with work that no worker claims: the queue.
    pub waiting: usize,
    /// How long the oldest of them has waited, in seconds: since its oldest message on
    /// the remote, or else since its last commit.
    pub oldest_waiting_secs: Option<u64>,
    /// Agents with work that some worker claims (each worker's lease, as the remote holds
    /// it; whether a lease is still renewed only its watchers can tell, over a lease). A
    /// claim on an agent with nothing to do is not counted: a killed worker's stays.
    pub claimed: usize,
    /// The workers holding those claims, and those present on the remote with none (a
    /// worker renews its presence every quarter lease; a killed one's is swept by the
    /// others after ten leases), by name, with how many each.
    pub workers: Vec<WorkerClaims>,
}

#[derive(Debug, PartialEq, Eq, serde::Serialize)]
pub struct WorkerClaims {
    pub name: String,
    pub claims: usize,
}

/// Looks at `remote` once: what its fleet holds now.
pub fn status(ws: &Workspace, remote: &Remote) -> Result<FleetStatus> {
    let _turn = turn(ws, remote)?;
    let seen = fetch(ws, remote)?;
    let now = infra::time::Timestamp::now().unix_seconds();
    let fleet = Mark::Fleet.prefix();
    let roots: HashSet<&str> = seen.under(&fleet).filter_map(|(n, _)| n.strip_prefix(&fleet)).collect();
    let mut status = FleetStatus { remote: remote.name.clone(), trees: roots.len(), ..FleetStatus::default() };
    let in_fleet = |id: &AgentId| roots.contains(id.root().as_str());
    // Claims of the fleet's agents (a remote's other refs under that name say nothing),
    // with the worker each lease names.
    let claims = Shelf::Claims.prefix();
    let mut claimed: HashMap<AgentId, String> = HashMap::new();
    for (name, blob) in seen.under(&claims) {
        let Some(id) = name.strip_prefix(&claims).and_then(|k| AgentId::parse(k).ok()).filter(in_fleet) else {
            continue;
        };
        // (A lease is a few lines: a larger blob is not read.)
        let small = ws.repo.blob_len(blob).is_ok_and(|n| n <= 4096);
        let lease = small.then(|| ws.repo.read_blob(blob).ok()).flatten();
        let worker = lease.and_then(|b| Lease::parse(&String::from_utf8_lossy(&b))).map(|l| l.worker);
        claimed.insert(id, worker.unwrap_or_else(|| "(unreadable lease)".to_owned()));
    }
    let present = Shelf::Workers.prefix();
    let mut by_worker: BTreeMap<String, usize> =
        seen.under(&present).filter_map(|(n, _)| n.strip_prefix(&present)).map(|w| (w.to_owned(), 0)).collect();
    let mut loader = Loader::default();
    let mut oldest: Option<u64> = None;
    for (name, tip) in seen.under("refs/heads/agents/") {
        let Some(id) = name.strip_prefix("refs/heads/agents/").and_then(|k| AgentId::parse(k).ok()) else { continue };
        if !in_fleet(&id) {
            continue;
        }
        status.agents += 1;
        let Some(since) = waiting_since(ws, &seen, &mut loader, &id, tip)? else {
            // Nothing to do: a claim on it says nothing (a killed worker's stays).
            continue;
        };
        match claimed.get(&id) {
            Some(worker) => {
                status.claimed += 1;
                *by_worker.entry(worker.clone()).or_default() += 1;
            }
            None => {
                status.waiting += 1;
                oldest = Some(oldest.map_or(since, |o| o.min(since)));
            }
        }
    }
    status.workers = by_worker.into_iter().map(|(name, claims)| WorkerClaims { name, claims }).collect();
    status.oldest_waiting_secs = oldest.map(|since| now.saturating_sub(since));
    Ok(status)
}

/// When the work `id` has at `tip` began to wait (seconds since the epoch), if it has
/// any a worker would take: mail on the remote (for a stopped agent, only mail that
/// revives it), or what its transcript leaves for a driver. One dead at its tip has none.
fn waiting_since(
    ws: &Workspace,
    seen: &Seen,
    loader: &mut Loader,
    id: &AgentId,
    tip: infra::git::CommitId,
) -> Result<Option<u64>> {
    // (Marks compared by their blob's id: a remote's blob is not read for it.)
    let is = |m: Mark, value: &str| {
        seen.repo.get(&m.ref_name(id)).is_some_and(|o| infra::git::blob_id(value.as_bytes()) == Some(*o))
    };
    if is(Mark::Died, &tip.to_string()) {
        return Ok(None);
    }
    let tip_time = || ws.repo.commit_time(tip).map(|t| t.max(0) as u64);
    // Mail: from the oldest message's time, which its name begins with (the tip's time
    // for one without).
    let stopped = seen.repo.contains_key(&Mark::Stopped.ref_name(id));
    let mail: Vec<Option<u64>> = seen
        .under(&inbox_prefix(id.as_str()))
        .filter(|(n, blob)| !stopped || super::revives(ws, id, n, *blob))
        .map(|(n, _)| stamp_seconds(n.rsplit('/').next().unwrap_or("")))
        .collect();
    if !mail.is_empty() {
        return Ok(Some(match mail.iter().flatten().min() {
            Some(at) => *at,
            None => tip_time()?,
        }));
    }
    if stopped {
        return Ok(None);
    }
    let parent = id.parent().map(|p| p.to_string());
    // One whose transcript does not read is passed over, as workers pass it over.
    let Ok(entries) = loader.entries(&ws.repo, tip) else { return Ok(None) };
    let replied =
        || -> Result<Option<Vec<u8>>> { Ok(is(Mark::Replied, &tip.to_string()).then(|| tip.to_string().into_bytes())) };
    if lifecycle::work_in(entries, id, tip, parent.as_deref(), replied)?.is_none() {
        return Ok(None);
    }
    Ok(Some(tip_time()?))
}

/// The time a message's ref name begins with (`YYYYMMDDhhmmss`, UTC), in seconds since
/// the epoch (by the sender's clock).
fn stamp_seconds(name: &str) -> Option<u64> {
    let d = name.get(..14).filter(|d| d.bytes().all(|b| b.is_ascii_digit()))?;
    let text = format!("{}-{}-{}T{}:{}:{}Z", &d[..4], &d[4..6], &d[6..8], &d[8..10], &d[10..12], &d[12..14]);
    infra::time::parse_unix_seconds(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_messages_stamp_is_its_time_and_a_bad_one_none() {
        assert_eq!(stamp_seconds("19700101000000-000001-abc"), Some(0));
        assert_eq!(stamp_seconds("20261207123456-000001-abc"), Some(1_796_646_896));
        assert_eq!(stamp_seconds("20000229000000-x"), Some(951_782_400));
        assert_eq!(stamp_seconds("00000000000000-x"), None);
        assert_eq!(stamp_seconds("20261207993456-x"), None);
        assert_eq!(stamp_seconds("2026120712345"), None);
        assert_eq!(stamp_seconds("2026x207123456-x"), None);
    }
}
