//! `offshoot fleet status`: what a remote's fleet holds right now, as an autoscaler
//! reads it — the queue (agents with work no worker claims) and how long its oldest has
//! waited, the claims and the workers holding them. One fetch; nothing is written but
//! the mirrors.

use std::collections::BTreeMap;

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
    /// Agents some worker claims (each worker's lease, as the remote holds it; whether a
    /// lease is still renewed only its watchers can tell, over a lease).
    pub claimed: usize,
    /// The workers holding claims, by name, with how many each.
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
    let roots: Vec<&str> = seen.under(&fleet).filter_map(|(n, _)| n.strip_prefix(&fleet)).collect();
    let mut status = FleetStatus { remote: remote.name.clone(), trees: roots.len(), ..FleetStatus::default() };
    let claims = Shelf::Claims.prefix();
    let mut by_worker: BTreeMap<String, usize> = BTreeMap::new();
    let mut claimed: Vec<&str> = Vec::new();
    for (name, blob) in seen.under(&claims) {
        let Some(id) = name.strip_prefix(&claims) else { continue };
        claimed.push(id);
        let lease = ws.repo.read_blob(blob).ok().and_then(|b| Lease::parse(&String::from_utf8_lossy(&b)));
        *by_worker.entry(lease.map_or_else(|| "(unreadable lease)".to_owned(), |l| l.worker)).or_default() += 1;
    }
    status.claimed = claimed.len();
    status.workers = by_worker.into_iter().map(|(name, claims)| WorkerClaims { name, claims }).collect();
    let mut loader = Loader::default();
    let mut oldest: Option<u64> = None;
    for (name, tip) in seen.under("refs/heads/agents/") {
        let Some(id) = name.strip_prefix("refs/heads/agents/").and_then(|k| AgentId::parse(k).ok()) else { continue };
        if !roots.contains(&id.root().as_str()) {
            continue;
        }
        status.agents += 1;
        if claimed.contains(&id.as_str()) {
            continue;
        }
        if let Some(since) = waiting_since(ws, &seen, &mut loader, &id, tip)? {
            status.waiting += 1;
            oldest = Some(oldest.map_or(since, |o| o.min(since)));
        }
    }
    status.oldest_waiting_secs = oldest.map(|since| now.saturating_sub(since));
    Ok(status)
}

/// When the work `id` has at `tip` began to wait (seconds since the epoch), if it has
/// any a worker would take: mail on the remote, or what its transcript leaves for a
/// driver. One dead at its tip, or stopped with no mail, has none.
fn waiting_since(
    ws: &Workspace,
    seen: &Seen,
    loader: &mut Loader,
    id: &AgentId,
    tip: infra::git::CommitId,
) -> Result<Option<u64>> {
    let mark = |m: Mark| seen.repo.get(&m.ref_name(id)).and_then(|o| ws.repo.read_blob(*o).ok());
    if mark(Mark::Died).is_some_and(|b| b == tip.to_string().as_bytes()) {
        return Ok(None);
    }
    // Mail: from the oldest message's time, which its name begins with.
    let first_mail =
        seen.under(&inbox_prefix(id.as_str())).filter_map(|(n, _)| stamp_seconds(n.rsplit('/').next()?)).min();
    if let Some(at) = first_mail {
        return Ok(Some(at));
    }
    if mark(Mark::Stopped).is_some() {
        return Ok(None);
    }
    let parent = id.parent().map(|p| p.to_string());
    // One whose transcript does not read is passed over, as workers pass it over.
    let Ok(entries) = loader.entries(&ws.repo, tip) else { return Ok(None) };
    let replied = mark(Mark::Replied);
    if lifecycle::work_in(entries, id, tip, parent.as_deref(), replied.as_deref()).is_none() {
        return Ok(None);
    }
    Ok(Some(ws.repo.commit_time(tip)?.max(0) as u64))
}

/// The time a message's ref name begins with (`YYYYMMDDhhmmss`, UTC), in seconds since
/// the epoch.
fn stamp_seconds(name: &str) -> Option<u64> {
    let digits = name.get(..14).filter(|d| d.bytes().all(|b| b.is_ascii_digit()))?;
    let n = |r: std::ops::Range<usize>| digits[r].parse::<u64>().ok();
    let (year, month, day) = (n(0..4)?, n(4..6)?, n(6..8)?);
    let (hour, minute, second) = (n(8..10)?, n(10..12)?, n(12..14)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || year < 1970 {
        return None;
    }
    // Days since the epoch of a proleptic Gregorian date (civil-from-days, reversed).
    let (y, m) = if month <= 2 { (year - 1, month + 9) } else { (year, month - 3) };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second)
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
        assert_eq!(stamp_seconds("2026120712345"), None);
        assert_eq!(stamp_seconds("2026x207123456-x"), None);
    }
}
