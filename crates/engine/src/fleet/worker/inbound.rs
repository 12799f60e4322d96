//! What a worker takes in: every agent it does not drive as the remote has it, config
//! lineages rebased onto its own template, and the messages the remote holds for the
//! agents it drives.

use crate::Cause;
use domain::marks::Shelf;
use std::collections::{BTreeMap, HashMap, HashSet};

use domain::id::AgentId;
use domain::inbox::{self as messages, Header};
use domain::marks::Mark;
use domain::transcript::Entry;
use infra::git::remote::{self as wire, Expect, Update};
use infra::git::{CommitId as Oid, bundle};

use super::{Event, Result, Worker, driven_here, inbox_prefix, local};
use crate::fleet::remote::{self, Seen};
use crate::store::snapshot::Loader;
use crate::{agents::lifecycle, store::inbox};

/// What the last whole take-in saw of the remote: the next looks only at what changed
/// since (a round's cost is the work in flight, not every agent the remote ever held).
#[derive(Debug)]
pub(super) struct TookIn {
    /// When its last whole pass was.
    since: std::time::Instant,
    repo: BTreeMap<String, Oid>,
    project: BTreeMap<String, Oid>,
    /// Agents not taken in then (driven here, or their objects not all here yet), and
    /// project branches likewise: looked at again every round until they are.
    again: HashSet<AgentId>,
    project_again: HashSet<String>,
    /// Agents it drove then, and their project branches: its own to move then, to take
    /// in as the remote has them once it lets go.
    owned: HashSet<AgentId>,
    own_project: HashSet<String>,
}

/// How often a take-in looks at every agent again, whatever changed.
const WHOLE_PASS_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Names whose values differ between two sorted maps (in either, or in both unequal).
fn changed<'a>(before: &'a BTreeMap<String, Oid>, now: &'a BTreeMap<String, Oid>) -> Vec<&'a str> {
    let (mut a, mut b) = (before.iter().peekable(), now.iter().peekable());
    let mut out = Vec::new();
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => return out,
            (Some((n, _)), None) => {
                out.push(n.as_str());
                a.next();
            }
            (None, Some((n, _))) => {
                out.push(n.as_str());
                b.next();
            }
            (Some((na, oa)), Some((nb, ob))) => match na.cmp(nb) {
                std::cmp::Ordering::Less => {
                    out.push(na.as_str());
                    a.next();
                }
                std::cmp::Ordering::Greater => {
                    out.push(nb.as_str());
                    b.next();
                }
                std::cmp::Ordering::Equal => {
                    if oa != ob {
                        out.push(nb.as_str());
                    }
                    a.next();
                    b.next();
                }
            },
        }
    }
}

/// The agent a ref of `repo.git` is of (its branch, a mark or its records).
fn agent_of(name: &str) -> Option<AgentId> {
    let key =
        name.strip_prefix("refs/heads/agents/").or_else(|| infra::git::harness_ref_parts(name).map(|(_, k)| k))?;
    AgentId::parse(key).ok()
}

impl Worker<'_> {
    /// Every agent this worker does not drive, as the remote has it: branch, config
    /// lineages, travelling marks, records, `project.git`'s branches. After one whole
    /// pass, only what changed on the remote since, what was left for later, and what it
    /// let go of are looked at.
    pub(super) fn take_in(&mut self, seen: &Seen) -> Result<()> {
        // (A whole pass now and then: what else wrote here — a command of the user's in
        // this workspace — is set right within a minute.)
        let last = self.took_in.take().filter(|last| last.since.elapsed() < WHOLE_PASS_EVERY);
        let since = match &last {
            Some(last) => last.since,
            None => std::time::Instant::now(),
        };
        for (name, theirs) in seen.under("refs/heads/config/") {
            self.rebase(&name["refs/heads/config/".len()..], theirs);
        }
        let mut now = TookIn {
            since,
            owned: self.owned.keys().cloned().collect(),
            repo: BTreeMap::new(),
            project: BTreeMap::new(),
            again: HashSet::new(),
            project_again: HashSet::new(),
            own_project: HashSet::new(),
        };
        let agents: Vec<AgentId> = match &last {
            None => seen.under("refs/heads/agents/").filter_map(|(n, _)| agent_of(n)).collect(),
            Some(last) => {
                let mut ids: HashSet<AgentId> =
                    changed(&last.repo, &seen.repo).into_iter().filter_map(agent_of).collect();
                ids.extend(last.again.iter().cloned());
                ids.extend(last.owned.iter().filter(|id| !self.owned.contains_key(*id)).cloned());
                let mut ids: Vec<AgentId> = ids.into_iter().collect();
                ids.sort();
                ids
            }
        };
        let names: Vec<String> = match &last {
            None => seen.under(&Mark::Names.prefix()).map(|(n, _)| n.to_owned()).collect(),
            Some(last) => changed(&last.repo, &seen.repo)
                .into_iter()
                .filter(|n| n.starts_with(&Mark::Names.prefix()))
                .map(str::to_owned)
                .collect(),
        };
        self.take_in_agents(seen, &agents, &names, last.is_none(), &mut now)?;
        self.take_in_project(seen, last.as_ref(), &mut now)?;
        now.repo = seen.repo.clone();
        now.project = seen.project.clone();
        self.took_in = Some(now);
        Ok(())
    }

    /// [`Self::take_in`] of `agents` (those of them it does not drive) and of name marks
    /// `names`.
    fn take_in_agents(
        &mut self,
        seen: &Seen,
        agents: &[AgentId],
        names: &[String],
        whole: bool,
        now: &mut TookIn,
    ) -> Result<()> {
        let ws = self.ws;
        let repo = ws.layout.repo();
        // Those it does not drive (one lock probe each).
        let others: HashSet<&AgentId> =
            agents.iter().filter(|id| !self.owned.contains_key(*id) && !driven_here(ws, id)).collect();
        // What is here of them, read once: only what differs is written. (A whole pass
        // lists every ref at once; otherwise each is looked up.)
        let here: HashMap<String, Oid> = match whole {
            true => ws.repo.all_refs()?.into_iter().collect(),
            false => {
                let mut wanted: Vec<String> = names.to_vec();
                for id in &others {
                    wanted.push(format!("refs/heads/{}", id.branch()));
                    wanted.extend(remote::travelling().filter(|m| !matches!(m, Mark::Names)).map(|m| m.ref_name(id)));
                    wanted.push(Shelf::Records.ref_name(id));
                }
                bundle::ref_targets(&repo, &wanted)?
                    .into_iter()
                    .zip(wanted)
                    .filter_map(|(oid, name)| Some((name, oid?)))
                    .collect()
            }
        };
        let mut sets: Vec<(String, Oid)> = Vec::new();
        let mut deletes: Vec<String> = Vec::new();
        let door = infra::door::Beneath::open(ws.layout.root()).map_err(local)?;
        for id in agents {
            let name = format!("refs/heads/{}", id.branch());
            let Some(theirs) = seen.repo.get(&name) else { continue };
            if !others.contains(id) {
                if !self.owned.contains_key(id) {
                    now.again.insert(id.clone());
                }
                continue;
            }
            if here.get(&name) != Some(theirs) {
                if !wire::is_commit(&repo, *theirs) || bundle::missing_below(&repo, *theirs)?.is_some() {
                    now.again.insert(id.clone());
                    continue;
                }
                sets.push((name.clone(), *theirs));
            }
            for mark in remote::travelling().filter(|m| !matches!(m, Mark::Names)) {
                let name = mark.ref_name(id);
                match (seen.repo.get(&name), here.get(&name)) {
                    (Some(theirs), ours) if ours != Some(theirs) => sets.push((name, *theirs)),
                    (None, Some(_)) => deletes.push(name),
                    _ => {}
                }
            }
            let records = Shelf::Records.ref_name(id);
            if let Some(theirs) = seen.repo.get(&records)
                && here.get(&records) != Some(theirs)
            {
                // The branch first: records are written up to what it can have made.
                bundle::set_refs(&repo, &sets)?;
                sets.clear();
                remote::write_records(ws, &door, id, *theirs)?;
                sets.push((records, *theirs));
            }
        }
        // Names: the remote's claims stand (a child made here whose name was taken there
        // keeps it in its facts, without the fleet's claim of it).
        let prefix = Mark::Names.prefix();
        for name in names {
            if let Some(theirs) = seen.repo.get(name)
                && name.strip_prefix(&prefix).is_some_and(|k| !k.contains('/'))
                && here.get(name) != Some(theirs)
            {
                sets.push((name.clone(), *theirs));
            }
        }
        bundle::set_refs(&repo, &sets)?;
        for name in deletes {
            ws.repo.delete_ref(&name)?;
        }
        Ok(())
    }

    /// [`Self::take_in`] of `project.git`'s branches: those of agents it drives are its
    /// own to move.
    fn take_in_project(&mut self, seen: &Seen, last: Option<&TookIn>, now: &mut TookIn) -> Result<()> {
        let ws = self.ws;
        for id in self.owned.keys() {
            if let Some(tip) = ws.repo.branch_tip(&id.branch())?
                && let Ok(facts) = crate::store::snapshot::read_facts(&ws.repo, tip)
            {
                now.own_project.insert(format!("refs/heads/{}", facts.project_branch()));
            }
        }
        let names: Vec<String> = match last {
            None => seen.project.keys().cloned().collect(),
            Some(last) => {
                let mut names: HashSet<&str> = changed(&last.project, &seen.project).into_iter().collect();
                names.extend(last.project_again.iter().map(String::as_str));
                names.extend(last.own_project.iter().filter(|b| !now.own_project.contains(*b)).map(String::as_str));
                names.into_iter().map(str::to_owned).collect()
            }
        };
        let project = ws.layout.project();
        let ours = bundle::ref_targets(&project, &names)?;
        let mut sets = Vec::new();
        for (name, ours) in names.iter().zip(ours) {
            let Some(theirs) = seen.project.get(name) else { continue };
            if now.own_project.contains(name) || ours == Some(*theirs) {
                continue;
            }
            if !wire::is_commit(&project, *theirs) || bundle::missing_below(&project, *theirs)?.is_some() {
                now.project_again.insert(name.clone());
                continue;
            }
            sets.push((name.clone(), *theirs));
        }
        bundle::set_refs(&project, &sets)?;
        Ok(())
    }

    /// Takes config lineage `lineage` at the remote's commit `theirs` as a commit on top of
    /// it whose `offshoot.toml` has this worker's providers, MCP servers, hooks, rules,
    /// tool environment, budgets, prices, retry, telemetry and each role's confinement
    /// (`rebase::rebase_config`), never the remote's: a config is code here (a `command`
    /// provider runs a program, a hook runs as this user, a base URL receives the key). One that cannot be made so (a role whose provider this
    /// worker lacks, with no worker role to fall back on) is left as it was here.
    fn rebase(&mut self, lineage: &str, theirs: Oid) {
        let ws = self.ws;
        let branch = format!("config/{lineage}");
        let here = ws.repo.branch_tip(&branch).ok().flatten();
        if self.rebased.get(lineage).is_some_and(|(t, made)| *t == theirs && Some(*made) == here) {
            return;
        }
        let made = (|| -> std::result::Result<Oid, Cause> {
            if !wire::is_commit(&ws.layout.repo(), theirs) {
                return Err("not a commit".into());
            }
            let file = domain::config::FILE;
            let text = ws.repo.read_file(theirs, file)?.unwrap_or_default();
            let rebased = crate::fleet::rebase::rebase_config(&String::from_utf8_lossy(&text), &self.options.mine)?;
            let edits = [infra::git::TreeEdit::Write { path: file.to_owned(), bytes: rebased.into_bytes() }];
            let commit = ws.repo.commit_edits(
                &[theirs],
                Some(theirs),
                &edits,
                "config: the remote's, with this worker's providers, MCP servers and sandbox",
            )?;
            ws.config_at(commit)?;
            bundle::set_refs(&ws.layout.repo(), &[(format!("refs/heads/{branch}"), commit)])?;
            Ok(commit)
        })();
        if let Ok(commit) = made {
            self.rebased.insert(lineage.to_owned(), (theirs, commit));
        }
    }

    /// Messages the remote holds for agents it drives: each delivered here unless one
    /// of the same identity is held (pending here, or in the transcript). Returns the
    /// deletions, for the round's push, of those the transcript the remote has holds.
    /// (`only`: of those agents alone.)
    pub(super) fn deliver(
        &mut self,
        seen: &Seen,
        only: Option<&[AgentId]>,
        on: &mut dyn FnMut(Event),
    ) -> Result<Vec<Update>> {
        let ws = self.ws;
        let mut settled = Vec::new();
        let mut woken = HashSet::new();
        // (A stopped one, or one a stop is asked of, is not started here: `drive` revives
        // a stopped one for a message of the user's sent after its stop.)
        let asked: HashSet<AgentId> = super::stops::asked(seen).into_iter().map(|(id, _)| id).collect();
        let ids: Vec<AgentId> = match only {
            Some(only) => only.iter().filter(|id| self.owned.contains_key(*id)).cloned().collect(),
            None => self.owned.keys().cloned().collect(),
        };
        for id in ids {
            let prefix = inbox_prefix(id.as_str());
            let waiting: Vec<(&str, Oid)> = seen.under(&prefix).collect();
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
                let Some(bytes) = bundle::blob(&ws.layout.repo(), value) else { continue };
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let identity = messages::identity(&text);
                let from = Header::parse(&text).map(|h| h.from);
                let from_ok = from.as_deref().is_some_and(|f| f == "user" || AgentId::parse(f).is_ok());
                if !from_ok || on_remote.contains(&identity) {
                    // Delivered, or no message (no sender one could be): gone there.
                    settled.push(Update { local: None, remote: name.to_owned(), expect: Expect::Exactly(Some(value)) });
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
        for id in woken {
            if self.fresh(&id)
                && !asked.contains(&id)
                && !self.stopping.contains_key(&id)
                && ws.repo.mark(lifecycle::STOPPED, id.as_str())?.is_none()
            {
                self.start(&id, on)?;
            }
        }
        Ok(settled)
    }
}
