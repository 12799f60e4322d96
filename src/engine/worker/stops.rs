//! Stops asked through the remote (`stop --on`): a request ref per agent, which the
//! worker holding the agent carries out as `stop` does on one machine, and withdraws once
//! what the stop wrote (its mark, the commits of the driver it stopped) is on the remote.

use std::time::{Duration, Instant};

use crate::domain::id::AgentId;
use crate::domain::inbox::Header;
use crate::domain::marks::Mark;
use crate::infra::git::remote::{self as wire, Expect, Update};
use crate::infra::git::{CommitId as Oid, bundle};

use super::super::lifecycle;
use super::super::remote::{self, Seen};
use super::super::snapshot::Loader;
use super::leases::driven_here;
use super::{Event, Result, Worker, local};

/// How long a stopped driver may take to settle (as `stop` waits).
const PATIENCE: Duration = Duration::from_secs(10);

/// The agents a stop was asked of on the remote, with the request's value.
pub(super) fn asked(seen: &Seen) -> Vec<(AgentId, Oid)> {
    let prefix = format!("refs/offshoot/{}/", remote::STOP_REQUESTS);
    seen.repo.iter().filter_map(|(n, o)| Some((AgentId::parse(n.strip_prefix(&prefix)?).ok()?, *o))).collect()
}

/// Whether the remote holds a message from the user for `id` (which revives a stopped
/// agent, where a child's result would wait).
pub(super) fn user_mail(ws: &super::Workspace, seen: &Seen, id: &AgentId) -> bool {
    let prefix = super::inbox_prefix(id.as_str());
    seen.repo.iter().filter(|(n, _)| n.starts_with(&prefix)).any(|(_, blob)| {
        bundle::blob(&ws.layout.repo(), *blob)
            .and_then(|b| Header::parse(&String::from_utf8_lossy(&b)).map(|h| h.from))
            .is_some_and(|from| from == "user")
    })
}

impl Worker<'_> {
    /// Carries out the stops asked of agents it holds: each is marked stopped if it, or
    /// an agent below it, is at work (so results wait instead of waking it), its driver is
    /// stopped and its parent told. A request is withdrawn in a later round, once the agent
    /// is not driven here and its branch and mark are as the remote has them; one for an
    /// agent the remote has marked stopped and nobody holds is withdrawn by any worker.
    /// The rest wait for [`Worker::claim_work`] to claim their agents.
    pub(super) fn stop_asked(&mut self, seen: &Seen, on: &mut dyn FnMut(Event)) -> Result<()> {
        let ws = self.ws;
        let stopped_ref = |id: &AgentId| format!("refs/offshoot/{}/{id}", Mark::Stopped.kind());
        let mut withdrawals = Vec::new();
        let mut loader = Loader::default();
        let all = asked(seen);
        for (id, asked) in all.clone() {
            let request = remote::stop_request(&id);
            let withdraw = Update { local: None, remote: request, expect: Expect::Exactly(Some(asked)) };
            if !self.owned.contains_key(&id) {
                if seen.repo.contains_key(&stopped_ref(&id)) && !self.claims()?.busy(id.as_str(), Instant::now()) {
                    withdrawals.push(withdraw);
                }
                continue;
            }
            if !self.fresh(&id) {
                continue;
            }
            let Some(tip) = ws.repo.branch_tip(&id.branch())? else { continue };
            if self.stopping.get(&id) == Some(&asked) {
                let here = bundle::refs(&ws.layout.repo(), &[stopped_ref(&id)])?.first().map(|(_, o)| *o);
                let sent = tip == self.owned[&id].pushed && here == seen.repo.get(&stopped_ref(&id)).copied();
                if sent && !driven_here(ws, &id) {
                    withdrawals.push(withdraw);
                }
                continue;
            }
            let parent = id.parent().map(|p| p.to_string());
            let at_work = driven_here(ws, &id)
                || lifecycle::work_left(ws, &mut loader, &id, tip, parent.as_deref()).map_or(true, |w| w.is_some())
                || self.below_at_work(&id, &all, &mut loader)?;
            if at_work {
                ws.repo.set_mark(lifecycle::STOPPED, id.as_str(), tip.to_string().as_bytes())?;
            }
            lifecycle::stop_driver(ws, self.rt, &id, PATIENCE).map_err(local)?;
            self.stopping.insert(id.clone(), asked);
            self.tally.stopped += 1;
            on(Event::Stopped { agent: id.to_string() });
        }
        if !withdrawals.is_empty() {
            let outcomes = wire::push(&ws.layout.repo(), &self.remote.url, &withdrawals)
                .map_err(|e| remote::unreachable(&self.remote, e))?;
            // Withdrawn, or asked again meanwhile (that one is carried out next round).
            for (update, _) in withdrawals.iter().zip(outcomes) {
                let prefix = format!("refs/offshoot/{}/", remote::STOP_REQUESTS);
                if let Some(id) = update.remote.strip_prefix(&prefix).and_then(|k| AgentId::parse(k).ok()) {
                    self.stopping.remove(&id);
                }
            }
        }
        Ok(())
    }

    /// Whether an agent below `id` is at work, or stopped or being stopped (its result
    /// would wake `id`), as far as this worker knows: asked to stop, marked stopped, held
    /// by another worker, driven here, or with work left. (One machine's `stop` marks the
    /// whole tree before it stops any driver; here each agent is stopped where it is held,
    /// so what is stopped below counts as at work.)
    fn below_at_work(&self, id: &AgentId, asked: &[(AgentId, Oid)], loader: &mut Loader) -> Result<bool> {
        let ws = self.ws;
        for (branch, tip) in ws.repo.branches(&format!("{}.", id.branch()))? {
            let Ok(below) = AgentId::parse(branch.trim_start_matches("agents/")) else { continue };
            let parent = below.parent().map(|p| p.to_string());
            if asked.iter().any(|(a, _)| *a == below)
                || ws.repo.mark(lifecycle::STOPPED, below.as_str())?.is_some()
                || self.claims()?.busy(below.as_str(), Instant::now())
                || driven_here(ws, &below)
                || lifecycle::work_left(ws, loader, &below, tip, parent.as_deref()).map_or(true, |w| w.is_some())
            {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
