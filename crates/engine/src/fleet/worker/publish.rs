//! What a worker sends (`publish`): in one push, the agents its drivers made, the
//! messages whose cause goes with it, and its agents' records, marks and branches; then
//! the project branches of the agents it holds.

use domain::marks::Shelf;
use std::collections::{HashMap, HashSet};

use domain::id::AgentId;
use domain::inbox::Header;
use domain::marks::Mark;
use domain::transcript::Entry;
use infra::git::remote::{self as wire, Expect, Outcome, Update};
use infra::git::{CommitId as Oid, bundle};

use super::{Event, OUTGOING, Outgoing, Result, Worker, driven_here, inbox_prefix, local};
use crate::fleet::remote::{self, Seen};
use crate::store::inbox;
use crate::store::snapshot::Loader;
use crate::store::workspace::Workspace;

/// What a round sends of its own agents, made ready by [`Worker::publishing`] and taken
/// back in by [`Worker::published`] once its push has gone.
pub(super) struct Publishing {
    /// All or nothing: the agents made here, the messages going with their cause, its
    /// agents' records, marks and branches.
    pub(super) updates: Vec<Update>,
    /// The names of the agents made here, sent once they are there.
    names: Vec<(AgentId, Update)>,
    outgoing: Vec<Outgoing>,
    /// The agents something is sent for.
    pub(super) dirty: HashSet<AgentId>,
}

impl Worker<'_> {
    /// Sends, in one push, what [`Worker::publishing`] makes ready, and takes in how it
    /// went. Returns the agents something was sent for, or was to be.
    pub(super) fn publish(&mut self, seen: &Seen, on: &mut dyn FnMut(Event)) -> Result<HashSet<AgentId>> {
        let publishing = self.publishing(seen)?;
        let outcomes = wire::push_whole(&self.ws.layout.repo(), &self.remote.url, &publishing.updates)
            .map_err(|e| remote::unreachable(&self.remote, e))?;
        let dirty = publishing.dirty.clone();
        self.published(seen, publishing, &outcomes, on)?;
        Ok(dirty)
    }

    /// What to send, all or nothing: agents made here by agents it drives (create-only),
    /// the messages whose cause goes with them, and its agents' records, marks and
    /// branches (each branch from the tip last pushed).
    pub(super) fn publishing(&mut self, seen: &Seen) -> Result<Publishing> {
        let ws = self.ws;
        let mine: Vec<AgentId> = self.owned.keys().filter(|id| self.fresh(id)).cloned().collect();
        let mut tips: HashMap<AgentId, Oid> = HashMap::new();
        for id in &mine {
            if let Some(tip) = ws.repo.branch_tip(&id.branch())? {
                tips.insert(id.clone(), tip);
            }
        }
        let (mut updates, names) = made_here(ws, seen, &mine)?;
        // Messages: each with the step that sent it.
        let outgoing = self.outgoing(seen, &tips)?;
        for message in &outgoing {
            updates.push(Update {
                local: Some(message.local_ref.clone()),
                remote: message.remote_ref.clone(),
                expect: Expect::Exactly(None),
            });
        }
        let mut dirty = HashSet::new();
        for id in &mine {
            let Some(tip) = tips.get(id).copied() else { continue };
            let before = updates.len();
            self.own_updates(id, tip, seen, &mut updates)?;
            if updates.len() > before {
                dirty.insert(id.clone());
            }
        }
        Ok(Publishing { updates, names, outgoing, dirty })
    }

    /// Takes in how `publishing`'s updates went (`outcomes`, in order); then sends the
    /// names of the agents made here that are there now, and the project branches of the
    /// agents it holds.
    pub(super) fn published(
        &mut self,
        seen: &Seen,
        publishing: Publishing,
        outcomes: &[Outcome],
        on: &mut dyn FnMut(Event),
    ) -> Result<()> {
        let ws = self.ws;
        let Publishing { updates, names, outgoing, .. } = publishing;
        let there = |id: &AgentId| seen.repo.contains_key(&format!("refs/heads/{}", id.branch()));
        if updates.is_empty() {
            // (Names of children there already, that did not go with them.)
            let late: Vec<Update> = names.into_iter().filter(|(id, _)| there(id)).map(|(_, u)| u).collect();
            if !late.is_empty() {
                wire::push(&ws.layout.repo(), &self.remote.url, &late)
                    .map_err(|e| remote::unreachable(&self.remote, e))?;
            }
            return self.push_project(seen);
        }
        self.settle(&updates, outcomes, on);
        // The names of the agents there now: made there by this push, or before it.
        let made: Vec<Update> = names
            .into_iter()
            .filter(|(id, _)| {
                let branch = format!("refs/heads/{}", id.branch());
                there(id)
                    || updates.iter().zip(outcomes).any(|(u, o)| u.remote == branch && matches!(o, Outcome::Done(_)))
            })
            .map(|(_, update)| update)
            .collect();
        if !made.is_empty() {
            wire::push(&ws.layout.repo(), &self.remote.url, &made).map_err(|e| remote::unreachable(&self.remote, e))?;
        }
        self.settle_messages(&outgoing, &updates, outcomes, on)?;
        self.push_project(seen)
    }

    /// What agent `id` of its own (at `tip`) has to send: its records, its marks, its
    /// branch.
    fn own_updates(&mut self, id: &AgentId, tip: Oid, seen: &Seen, updates: &mut Vec<Update>) -> Result<()> {
        let ws = self.ws;
        let records = Shelf::Records.ref_name(id);
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
        } else if let Some(value) = ws.repo.ref_target(&records)?
            && seen.repo.get(&records) != Some(&value)
        {
            updates.push(Update { local: Some(records.clone()), remote: records, expect: Expect::FastForward });
        }
        for mark in remote::travelling().filter(|m| !matches!(m, Mark::Ids | Mark::Names)) {
            let name = mark.ref_name(id);
            let (ours, there) = (ws.repo.ref_target(&name)?, seen.repo.get(&name).copied());
            if ours != there {
                let local = ours.map(|_| name.clone());
                updates.push(Update { local, remote: name, expect: Expect::Exactly(there) });
            }
        }
        let pushed = self.owned[id].pushed;
        if tip != pushed {
            // Sent from the tip read before the children were listed, pinned under a
            // ref of its own: the branch itself is read only when the push runs, and by
            // then its driver may have committed a dispatch whose child this push does
            // not carry (a worker killed after it would leave the remote naming a child
            // it never gets, and the next driver would give that child's id to another).
            let pinned = format!("{OUTGOING}tips/{}", id.branch());
            bundle::set_refs(&self.ws.layout.repo(), &[(pinned.clone(), tip)])?;
            let name = format!("refs/heads/{}", id.branch());
            updates.push(Update { local: Some(pinned), remote: name, expect: Expect::Exactly(Some(pushed)) });
        }
        Ok(())
    }

    /// What the push came to for its own agents: a branch that went is pushed, one
    /// refused or moved there is lost to whoever moved it.
    fn settle(&mut self, updates: &[Update], outcomes: &[Outcome], on: &mut dyn FnMut(Event)) {
        let mut moved = false;
        for (update, outcome) in updates.iter().zip(outcomes) {
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
                    self.lose(&id, false, on);
                }
                (Outcome::Moved { .. }, None) => {
                    moved = true;
                    // Records moved there: gathered again on the new base next round.
                    if let Some(owned) = Shelf::Records
                        .key_of(&update.remote)
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
    }

    /// The messages that went (or had gone before a crash): forgotten here.
    fn settle_messages(
        &mut self,
        outgoing: &[Outgoing],
        updates: &[Update],
        outcomes: &[Outcome],
        on: &mut dyn FnMut(Event),
    ) -> Result<()> {
        let ws = self.ws;
        for message in outgoing {
            let Some(i) = updates.iter().position(|u| u.remote == message.remote_ref) else { continue };
            let ours = ws.repo.ref_target(&message.local_ref)?;
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
        Ok(())
    }

    /// The project branches of the agents it holds and may write, moved on here: forward
    /// only. (Any other's is its holder's to send.)
    fn push_project(&self, seen: &Seen) -> Result<()> {
        let mut own = HashSet::new();
        for id in self.owned.keys().filter(|id| self.fresh(id)) {
            if let Some(tip) = self.ws.repo.branch_tip(&id.branch())?
                && let Ok(facts) = crate::store::snapshot::read_facts(&self.ws.repo, tip)
            {
                own.insert(format!("refs/heads/{}", facts.project_branch()));
            }
        }
        let own: Vec<String> = own.into_iter().collect();
        let updates = remote::project_updates(self.ws, seen, true, Some(&own))?;
        let names: Vec<String> = updates.iter().filter_map(|u| u.local.clone()).collect();
        let tips: Vec<Oid> = bundle::ref_targets(&self.ws.layout.project(), &names)?.into_iter().flatten().collect();
        self.ws.project.check_sent(&tips)?;
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
            Entry::ToolResult { block: infra::provider::Block::ToolResult { tool_use_id, .. }, .. }
                if crate::step::toolcall::key(output, tool_use_id) == key =>
            {
                return Ok(true);
            }
            _ => {}
        }
    }
    Ok(false)
}

/// The branches on the remote the agent branches of `updates` were made from: each
/// one's ancestors' (a child starts at its parent's tip), so that a push seeing only the
/// refs it moves and these still sends a new child only what its parent's branch there
/// does not hold.
pub(super) fn forked_from(updates: &[Update]) -> Vec<String> {
    let mut forked = Vec::new();
    for update in updates {
        let Some(id) = update.remote.strip_prefix("refs/heads/agents/").and_then(|a| AgentId::parse(a).ok()) else {
            continue;
        };
        let mut parent = id.parent();
        while let Some(id) = parent {
            forked.push(format!("refs/heads/{}", id.branch()));
            parent = id.parent();
        }
    }
    forked
}

/// What [`made_here`] publishes: the updates, and the name claims that go after them.
type MadeHere = (Vec<Update>, Vec<(AgentId, Update)>);

/// The agents its drivers made that the remote does not have yet (they exist there
/// before the step that made them), with their id claims; and their names, which go on
/// their own after (a name taken there meanwhile must not hold back the rest).
fn made_here(ws: &Workspace, seen: &Seen, mine: &[AgentId]) -> Result<MadeHere> {
    let mut updates = Vec::new();
    let mut names = Vec::new();
    for parent in mine {
        for (branch, tip) in ws.repo.branches(&format!("{}.", parent.branch()))? {
            let name = format!("refs/heads/{branch}");
            let Ok(id) = AgentId::parse(branch.trim_start_matches("agents/")) else { continue };
            if id.parent().as_ref() != Some(parent) {
                continue;
            }
            // (A child already there may still lack its name there: a worker killed between
            // a round's two pushes sent the branch and not the name. It goes now.)
            if !seen.repo.contains_key(&name) {
                // (From the tip listed now, pinned: see `own_updates`.)
                let pinned = format!("{OUTGOING}tips/{branch}");
                bundle::set_refs(&ws.layout.repo(), &[(pinned.clone(), tip)])?;
                updates.push(Update { local: Some(pinned), remote: name, expect: Expect::Exactly(None) });
                let ids = Mark::Ids.ref_name(&id);
                if ws.repo.ref_target(&ids)?.is_some() && !seen.repo.contains_key(&ids) {
                    updates.push(Update { local: Some(ids.clone()), remote: ids, expect: Expect::Exactly(None) });
                }
            }
            // Its name, claimed here for it and not there yet.
            let Some(name) = crate::store::snapshot::read_facts(&ws.repo, tip).ok().and_then(|f| f.name) else {
                continue;
            };
            let mark = Mark::Names.ref_name(&name);
            let claimed = match seen.repo.contains_key(&mark) {
                true => None,
                false => ws.repo.ref_target(&mark)?,
            };
            if claimed.is_some_and(|v| ws.repo.read_blob(v).is_ok_and(|b| b == id.as_str().as_bytes())) {
                names.push((
                    id.clone(),
                    Update { local: Some(mark.clone()), remote: mark, expect: Expect::Exactly(None) },
                ));
            }
        }
    }
    Ok((updates, names))
}
