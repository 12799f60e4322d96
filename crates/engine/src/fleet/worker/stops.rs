//! Stops asked through the remote (`stop --on`): a request ref per agent, which the
//! worker holding the agent carries out as `stop` does on one machine, and withdraws once
//! what the stop wrote (its mark, the commits of the driver it stopped) is on the remote.
//!
//! A stop carried out here says in the agent's `stopped` mark, after the tip, when it
//! was asked (`asked <digits>`) and which messages were on the remote for the agent then
//! when it was asked (`held <name>`: the request lists them, as `stop --on` saw them), so a
//! message from the user revives the agent only if it reached the remote after the stop
//! was asked: one there before waits for the next, as it would in a stopped agent's
//! inbox on one machine. A message and a stop that race: the later wins (a message there
//! first waits; a stop there first is withdrawn by the message's push, or, carried out,
//! the message revives the agent after it), and `send --on` says a stop may hold it.

use domain::marks::Shelf;
use std::time::{Duration, Instant};

use domain::id::AgentId;
use domain::marks::Mark;
use infra::git::remote::{self as wire, Expect, Update};
use infra::git::{CommitId as Oid, bundle};

use super::leases::{driven_here, kill_driver};
use super::{Event, Result, Worker, Workspace, inbox_prefix, local};
use crate::agents::lifecycle;
use crate::fleet::remote::{self, Seen};
use crate::store::snapshot::Loader;

/// How long a stopped driver may take to settle (as `stop` waits).
const PATIENCE: Duration = Duration::from_secs(10);

/// The agents a stop was asked of on the remote, with the request's value.
pub(super) fn asked(seen: &Seen) -> Vec<(AgentId, Oid)> {
    let prefix = Shelf::StopRequests.prefix();
    seen.under(&prefix).filter_map(|(n, o)| Some((AgentId::parse(n.strip_prefix(&prefix)?).ok()?, o))).collect()
}

/// Whether the remote holds a message that revives `id` (see [`revives`]).
pub(super) fn user_mail(ws: &Workspace, seen: &Seen, id: &AgentId) -> bool {
    let prefix = inbox_prefix(id.as_str());
    seen.under(&prefix).any(|(n, blob)| remote::revives(ws, id, n, blob))
}

/// A stop this worker carried out, until its request is withdrawn.
#[derive(Debug, Clone)]
pub(super) struct Stopping {
    /// The request's value.
    pub(super) asked: Oid,
    /// What its `stopped` mark says after the tip, when the stop marked it.
    mark: Option<String>,
    /// The agents below it then (those made later are asked when it is withdrawn).
    below: std::collections::HashSet<AgentId>,
    /// Whether its driver had to be killed (its parent is then told here).
    killed: bool,
}

impl Worker<'_> {
    /// Whether a driver this worker started for `id` is alive but not holding it yet.
    fn starting(&self, id: &AgentId) -> bool {
        !driven_here(self.ws, id) && self.owned.get(id).and_then(|o| o.launched).is_some_and(|l| l.alive())
    }

    /// Kills `id`'s driver, holding it or still starting.
    pub(super) fn end_driver(&self, id: &AgentId) {
        kill_driver(self.ws, id);
        if let Some((pid, _)) =
            self.owned.get(id).and_then(|o| o.launched).and_then(|l| l.alive().then_some(l.driver)?)
        {
            infra::process::kill_group(pid);
        }
    }

    /// Whether something `id` sent still waits in the outbox.
    pub(super) fn sending(&self, id: &AgentId) -> bool {
        std::fs::read_dir(self.ws.layout.worker().join("outbox"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| super::inbox::pending_in(&d.path()).is_ok_and(|p| p.iter().any(|m| m.sender == id.as_str())))
    }

    /// Carries out the stops asked of agents it holds: each is marked stopped if it, or
    /// an agent below it, is at work (so results wait instead of waking it), its driver is
    /// stopped and its parent told. A request is withdrawn in a later round, once the agent
    /// is not driven here and its branch and mark are as the remote has them — in the same
    /// push as requests for agents below it made meanwhile (its driver may have dispatched
    /// them just before it stopped). One for an agent nobody holds that the remote has
    /// marked stopped (with no message to revive it) or dead is withdrawn by any worker. The
    /// rest wait for [`Worker::claim_work`] to claim their agents. One agent that cannot be
    /// stopped is passed over, not the round's failure.
    pub(super) fn stop_asked(&mut self, seen: &Seen, on: &mut dyn FnMut(Event)) -> Result<()> {
        let ws = self.ws;
        let all = asked(seen);
        // A request gone (withdrawn by a message, asked again) ends what was carried out.
        self.stopping.retain(|id, stopping| all.contains(&(id.clone(), stopping.asked)));
        let mut updates = Vec::new();
        let mut made = Vec::new();
        for (id, asked) in &all {
            // One that fails is passed over: tried again next round.
            if let Ok(Some(mut more)) = self.carry_out(seen, id, *asked, &all, on) {
                made.extend(more.iter().filter_map(|u| u.local.clone()));
                updates.append(&mut more);
            }
        }
        if !updates.is_empty() {
            let outcomes = wire::push(&ws.layout.repo(), &self.remote.url, &updates);
            for name in made {
                let _ = ws.repo.delete_ref(&name);
            }
            let outcomes = outcomes.map_err(|e| remote::unreachable(&self.remote, e))?;
            // Withdrawn, or asked again meanwhile (that one is carried out next round).
            let prefix = Shelf::StopRequests.prefix();
            for (update, _) in updates.iter().zip(outcomes) {
                if update.local.is_none()
                    && let Some(id) = update.remote.strip_prefix(&prefix).and_then(|k| AgentId::parse(k).ok())
                {
                    self.stopping.remove(&id);
                }
            }
        }
        Ok(())
    }

    /// What the request `asked` for `id` calls for this round: the updates to push (its
    /// withdrawal, with requests for agents below it), if any.
    fn carry_out(
        &mut self,
        seen: &Seen,
        id: &AgentId,
        asked: Oid,
        all: &[(AgentId, Oid)],
        on: &mut dyn FnMut(Event),
    ) -> Result<Option<Vec<Update>>> {
        let ws = self.ws;
        let stopped_ref = Mark::Stopped.ref_name(id);
        let withdraw = Update { local: None, remote: remote::stop_request(id), expect: Expect::Exactly(Some(asked)) };
        let Some(tip) = ws.repo.branch_tip(&id.branch())? else { return Ok(None) };
        if !self.owned.contains_key(id) {
            let died = seen
                .repo
                .get(&Mark::Died.ref_name(id))
                .is_some_and(|d| bundle::blob(&ws.layout.repo(), *d).is_some_and(|b| b == tip.to_string().as_bytes()));
            let settled = (seen.repo.contains_key(&stopped_ref) && !user_mail(ws, seen, id)) || died;
            let held = self.claims()?.busy(id.as_str(), Instant::now());
            return Ok((settled && !held).then(|| vec![withdraw]));
        }
        if !self.fresh(id) {
            return Ok(None);
        }
        if let Some(stopping) = self.stopping.get(id).filter(|s| s.asked == asked).cloned() {
            if driven_here(ws, id) || self.starting(id) {
                // Asked and signalled a round ago, and still going (or starting): ended now.
                self.end_driver(id);
                if let Some(s) = self.stopping.get_mut(id) {
                    s.killed = true;
                }
                return Ok(None);
            }
            // The mark as the stop set it: a driver that settled late wrote its bare tip.
            if let Some(words) = &stopping.mark {
                let mark = ws.repo.mark(lifecycle::STOPPED, id.as_str())?;
                let kept = mark.as_deref().map(String::from_utf8_lossy);
                if kept.as_deref().and_then(|m| m.split_once('\n')).map(|(_, rest)| rest) != Some(words.as_str()) {
                    ws.repo.set_mark(lifecycle::STOPPED, id.as_str(), format!("{tip}\n{words}").as_bytes())?;
                    return Ok(None);
                }
            }
            // A driver killed here told its parent nothing: told now, as it would have.
            if stopping.killed {
                lifecycle::tell_parent_if_untold(ws, self.rt, id).map_err(local)?;
            }
            let here = ws.repo.ref_target(&stopped_ref)?;
            if tip != self.owned[id].pushed || here != seen.repo.get(&stopped_ref).copied() || self.sending(id) {
                return Ok(None);
            }
            let mut updates = vec![withdraw];
            // Agents below it made since the stop was carried out (its driver may have
            // dispatched them just before it stopped), as the remote has them.
            let local = format!("refs/outgoing/stop/{id}");
            for below in lifecycle::descendants(ws, id)? {
                let request = remote::stop_request(&below);
                if stopping.below.contains(&below)
                    || all.iter().any(|(a, _)| *a == below)
                    || seen.repo.contains_key(&request)
                    || !seen.repo.contains_key(&format!("refs/heads/{}", below.branch()))
                {
                    continue;
                }
                bundle::set_refs(&ws.layout.repo(), &[(local.clone(), asked)])?;
                updates.push(Update { local: Some(local.clone()), remote: request, expect: Expect::Exactly(None) });
            }
            return Ok(Some(updates));
        }
        let parent = id.parent().map(|p| p.to_string());
        let mut loader = Loader::default();
        let prefix = inbox_prefix(id.as_str());
        let mail = seen.under(&prefix).next().is_some();
        let starting = self.starting(id);
        let at_work = driven_here(ws, id)
            || starting
            || mail
            || lifecycle::work_left(ws, &mut loader, id, tip, parent.as_deref()).map_or(true, |w| w.is_some())
            || self.below_at_work(seen, id, &mut loader)?;
        let request = bundle::blob(&ws.layout.repo(), asked).map(|b| String::from_utf8_lossy(&b).into_owned());
        let when = request.as_deref().map(remote::stamp);
        // Held: the messages the remote had for it when the stop was asked (the request
        // lists them). One that arrived later (racing the stop, or on its way when it was
        // carried out) revives the agent after the stop, as a message after a stop does
        // on one machine. (An older request, listing none: those sent before its time.)
        let listed = request.as_deref().filter(|r| r.lines().any(|l| l == remote::INBOX_SEEN));
        let held: String = seen
            .under(&prefix)
            .filter_map(|(n, _)| n.strip_prefix(&prefix))
            .filter(|m| match listed {
                Some(request) => request.lines().any(|l| l.strip_prefix("held ") == Some(&format!("{id}/{m}"))),
                None => when.as_ref().is_none_or(|when| remote::stamp(m) < *when),
            })
            .map(|m| format!("held {m}\n"))
            .collect();
        let seen_line = if listed.is_some() { format!("{}\n", remote::INBOX_SEEN) } else { String::new() };
        let words = when.map(|when| format!("asked {when}\n{seen_line}{held}"));
        let mark = |tip: Oid| match &words {
            Some(words) => format!("{tip}\n{words}"),
            None => tip.to_string(),
        };
        if at_work {
            ws.repo.set_mark(lifecycle::STOPPED, id.as_str(), mark(tip).as_bytes())?;
        }
        if starting {
            // Not holding it yet: nothing of its to settle.
            self.end_driver(id);
        }
        lifecycle::stop_driver(ws, self.rt, id, PATIENCE).map_err(local)?;
        // The stopped driver marks it at its last commit: the mark says when it was asked.
        if at_work && let Some(tip) = ws.repo.branch_tip(&id.branch())? {
            ws.repo.set_mark(lifecycle::STOPPED, id.as_str(), mark(tip).as_bytes())?;
        }
        let below = lifecycle::descendants(ws, id)?.into_iter().collect();
        let mark = if at_work { words } else { None };
        self.stopping.insert(id.clone(), Stopping { asked, mark, below, killed: false });
        self.tally.stopped += 1;
        on(Event::Stopped { agent: id.to_string() });
        Ok(None)
    }

    /// Whether an agent below `id` is at work, or was stopped (its result would wake
    /// `id`), as far as this worker knows: marked stopped, held by another worker, driven
    /// here, with mail on the remote or work left. (One machine's `stop` marks the whole
    /// tree before it stops any driver; here each agent is stopped where it is held, so
    /// what is stopped below counts as at work.)
    fn below_at_work(&self, seen: &Seen, id: &AgentId, loader: &mut Loader) -> Result<bool> {
        let ws = self.ws;
        for (branch, tip) in ws.repo.branches(&format!("{}.", id.branch()))? {
            let Ok(below) = AgentId::parse(branch.trim_start_matches("agents/")) else { continue };
            let parent = below.parent().map(|p| p.to_string());
            if ws.repo.mark(lifecycle::STOPPED, below.as_str())?.is_some()
                || self.claims()?.busy(below.as_str(), Instant::now())
                || driven_here(ws, &below)
                || seen.under(&inbox_prefix(below.as_str())).next().is_some()
                || lifecycle::work_left(ws, loader, &below, tip, parent.as_deref()).map_or(true, |w| w.is_some())
            {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
