//! What a worker takes in: every agent it does not drive as the remote has it, config
//! lineages rebased onto its own template, and the messages the remote holds for the
//! agents it drives.

use crate::Cause;
use domain::marks::Shelf;
use std::collections::{HashMap, HashSet};

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

impl Worker<'_> {
    /// Every agent this worker does not drive, as the remote has it: branch, config
    /// lineages, travelling marks, records, `project.git`'s branches.
    pub(super) fn take_in(&mut self, seen: &Seen) -> Result<()> {
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
        let door = infra::door::Beneath::open(ws.layout.root()).map_err(local)?;
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
                let name = mark.ref_name(&id);
                match (seen.repo.get(&name), here.get(&name)) {
                    (Some(theirs), ours) if ours != Some(theirs) => sets.push((name, *theirs)),
                    (None, Some(_)) => deletes.push(name),
                    _ => {}
                }
            }
            let records = Shelf::Records.ref_name(&id);
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
        let names = Mark::Names.prefix();
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
                && let Ok(facts) = crate::store::snapshot::read_facts(&ws.repo, tip)
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
    /// of the same identity is held (pending here, or in the transcript); deleted there
    /// once the transcript the remote has holds it.
    pub(super) fn deliver(&mut self, seen: &Seen, on: &mut dyn FnMut(Event)) -> Result<()> {
        let ws = self.ws;
        let mut settled = Vec::new();
        let mut woken = HashSet::new();
        // (A stopped one, or one a stop is asked of, is not started here: `drive` revives
        // a stopped one for a message of the user's sent after its stop.)
        let asked: HashSet<AgentId> = super::stops::asked(seen).into_iter().map(|(id, _)| id).collect();
        for id in self.owned.keys().cloned().collect::<Vec<_>>() {
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
        if !settled.is_empty() {
            wire::push(&ws.layout.repo(), &self.remote.url, &settled)
                .map_err(|e| remote::unreachable(&self.remote, e))?;
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
        Ok(())
    }
}
