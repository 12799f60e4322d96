//! Agents driven by a remote's workers: one handed over (`prompt --on`), a message
//! sent to one there (`send --on`), a stop asked of a tree there (`stop --on`).

use domain::id::AgentId;
use domain::inbox::Header;
use domain::marks::{Mark, Shelf};
use infra::git::remote::{self, Expect, Outcome, Update};
use infra::git::{bundle, mirrors};

use super::*;
use crate::agents::lifecycle;
use crate::store::workspace::Workspace;

/// Hands agent `id`, just made here and never driven, to the workers of `remote`: its
/// branch, name and config lineage go there with its first messages (as inbox refs),
/// in one push, the agent's refs create-only; from then on this workspace never starts
/// a driver for it (`handed/<id>`), and `pull` brings its progress. Nothing is sent if
/// anything is out of place there (a name taken meanwhile); the caller then removes
/// the agent here.
pub fn hand_over(ws: &Workspace, remote: &Remote, id: &AgentId) -> Result<usize> {
    let _turn = super::turn(ws, remote)?;
    // Every update below is create-only or a fast-forward, checked by the remote as it
    // takes the push: nothing fetched first (on a remote of 1,000 agents, fetching it
    // all made a hand-over take 700 ms, and more with every agent).
    let seen = mirrored(ws, remote)?;
    let tip = ws.repo.branch_tip(&id.branch())?.ok_or_else(|| RemoteError::Unknown(id.to_string()))?;
    let facts = crate::store::snapshot::read_facts(&ws.repo, tip)
        .map_err(|e| RemoteError::Write { path: format!("agents/{id}"), reason: e.into() })?;
    let mut updates = Vec::new();
    let branch = format!("refs/heads/{}", id.branch());
    updates.push(Update { local: Some(branch.clone()), remote: branch, expect: Expect::Exactly(None) });
    let lineage = format!("refs/heads/config/{}", facts.lineage);
    updates.push(Update { local: Some(lineage.clone()), remote: lineage, expect: Expect::FastForward });
    ws.repo.set_mark(Mark::Fleet.kind(), id.as_str(), remote.name.as_bytes())?;
    for mark in [Mark::Ids, Mark::Names, Mark::Fleet] {
        let key = match mark {
            Mark::Names => match &facts.name {
                Some(name) => name.clone(),
                None => continue,
            },
            _ => id.to_string(),
        };
        let name = mark.ref_name(&key);
        if ws.repo.mark(mark.kind(), &key)?.is_some() {
            updates.push(Update { local: Some(name.clone()), remote: name, expect: Expect::Exactly(None) });
        }
    }
    let pending = crate::store::inbox::pending(&ws.layout, id)
        .map_err(|e| RemoteError::Write { path: ws.layout.inbox(id).display().to_string(), reason: e.into() })?;
    let mut outgoing = Vec::new();
    for p in &pending {
        let blob = remote::write_blob(&ws.layout.repo(), p.text.as_bytes())?;
        let name = message_name(&p.text, p.number, blob);
        let local = format!("refs/outgoing/{id}/{name}");
        bundle::set_refs(&ws.layout.repo(), &[(local.clone(), blob)])?;
        updates.push(Update {
            local: Some(local.clone()),
            remote: inbox_ref(id, &name),
            expect: Expect::Exactly(None),
        });
        outgoing.push(local);
    }
    let outcomes = remote::push_whole(&ws.layout.repo(), &remote.url, &updates).map_err(|e| unreachable(remote, e))?;
    for local in &outgoing {
        let _ = ws.repo.delete_ref(local);
    }
    if let Some(refused) = refusal(&updates, &outcomes) {
        return Err(refused);
    }
    mark_handed(ws, id)?;
    for p in &pending {
        let _ = std::fs::remove_file(&p.path);
    }
    // The project branches it starts from, so a worker can make its directory.
    // (Not fatal: the agent is there; a worker without its branch starts it from `main`.)
    let project = project_updates(ws, &seen, false, None)?;
    let _ = remote::push(&ws.layout.project(), &remote.url, &project);
    Ok(pending.len())
}

/// What this workspace last fetched of `remote` (its mirrors), without asking it: for a
/// command whose pushes are compare-and-swaps anyway, so a fetch of everything the
/// remote holds (its cost growing with every agent ever handed to it) buys nothing.
fn mirrored(ws: &Workspace, remote: &Remote) -> Result<Seen> {
    let r = &remote.name;
    let unmirror = |refs: Vec<(String, Oid)>, from: &str, to: &str| -> BTreeMap<String, Oid> {
        refs.into_iter().filter_map(|(n, o)| n.strip_prefix(from).map(|rest| (format!("{to}{rest}"), o))).collect()
    };
    let repo = unmirror(
        mirrors::refs(&ws.layout.repo(), &format!("refs/mirrors/{r}/"))?,
        &format!("refs/mirrors/{r}/"),
        "refs/",
    );
    let project = unmirror(
        mirrors::refs(&ws.layout.project(), &format!("refs/mirrors/{r}/heads/"))?,
        &format!("refs/mirrors/{r}/heads/"),
        "refs/heads/",
    );
    Ok(Seen { repo, project })
}

/// Drops what this workspace mirrors of remote `name` (when it is removed: a remote
/// added again under that name, elsewhere, must not be taken for what it held).
pub fn forget_mirrors(ws: &Workspace, name: &str) -> Result<()> {
    // (In the remote's turn: a worker's round here would write them again.)
    let _turn = super::turn(ws, &Remote { name: name.to_owned(), url: String::new() })?;
    for git_dir in [ws.layout.repo(), ws.layout.project()] {
        mirrors::forget(&git_dir, name)?;
    }
    Ok(())
}

/// Whether `id`'s tree is driven by a remote's workers (handed over here, or pulled as
/// such): no driver of this workspace may drive it.
pub fn handed(ws: &Workspace, id: &AgentId) -> bool {
    ws.layout.handed(&id.root()).exists()
}

/// The worker that claimed `id`, as this workspace last saw its remote (its mirror of
/// the claim, as of the last fetch): for a tree handed to a remote only.
pub fn claimed_by(ws: &Workspace, id: &AgentId) -> Option<String> {
    if !handed(ws, id) {
        return None;
    }
    // (Under whichever name this workspace knows the remote by.)
    // (By prefix: `claims/<id>` would also find `claims/<id>.1`, its child's.)
    let claim = Shelf::Claims.ref_name(id.as_str());
    let tail = claim.trim_start_matches("refs/");
    let (_, blob) = mirrors::refs(&ws.layout.repo(), &super::repo_mirror("*", &claim))
        .ok()?
        .into_iter()
        .find(|(name, _)| name.ends_with(&format!("/{tail}")))?;
    let lease = ws.repo.read_blob(blob).ok()?;
    crate::fleet::claims::Lease::parse(&String::from_utf8_lossy(&lease)).map(|l| l.worker)
}

/// Whether messages to `id` wait on its remote, as this workspace last saw it: for a
/// tree handed to a remote only.
pub fn mail_waiting(ws: &Workspace, id: &AgentId) -> bool {
    let inbox = super::repo_mirror("*", &super::inbox_prefix(id.as_str()));
    handed(ws, id) && mirrors::refs(&ws.layout.repo(), &inbox).is_ok_and(|r| !r.is_empty())
}

/// The first 14 digits of `text` (a time as `YYYYMMDDhhmmss`, whatever its punctuation).
pub(crate) fn stamp(text: &str) -> String {
    text.chars().filter(char::is_ascii_digit).take(14).collect()
}

/// The line of a stop request, and of the `stopped` mark it sets, saying that its `held`
/// lines are the messages on the remote when the stop was asked (a request without it,
/// from an older offshoot, holds those older than its time).
pub(crate) const INBOX_SEEN: &str = "inbox as seen";

/// Whether the message at inbox ref `name` (whose `blob` the remote holds) revives
/// `id`: one from the user that came after the stop in its `stopped` mark, if a stop
/// asked through the remote set it.
pub(crate) fn revives(ws: &Workspace, id: &AgentId, name: &str, blob: Oid) -> bool {
    let from_user = bundle::blob(&ws.layout.repo(), blob)
        .and_then(|b| Header::parse(&String::from_utf8_lossy(&b)).map(|h| h.from))
        .is_some_and(|from| from == "user");
    if !from_user {
        return false;
    }
    let Some(mark) = ws.repo.mark(lifecycle::STOPPED, id.as_str()).ok().flatten() else { return true };
    let mark = String::from_utf8_lossy(&mark);
    let message = name.rsplit('/').next().unwrap_or("");
    let held = mark.lines().any(|l| l.strip_prefix("held ") == Some(message));
    if mark.lines().any(|l| l == INBOX_SEEN) {
        return !held;
    }
    let asked = mark.lines().find_map(|l| l.strip_prefix("asked ")).map(stamp);
    !held && asked.is_none_or(|asked| stamp(message) >= asked)
}

/// Notes that `id` is driven by a remote's workers: no driver starts for it here.
pub(crate) fn mark_handed(ws: &Workspace, id: &AgentId) -> Result<()> {
    let path = ws.layout.handed(id);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| RemoteError::Write { path: dir.display().to_string(), reason: e.into() })?;
    }
    std::fs::write(&path, b"").map_err(|e| RemoteError::Write { path: path.display().to_string(), reason: e.into() })
}

/// Sends message `text` (a rendered deposit) to agent `to` through `remote`, for
/// whichever worker drives it: a create-only inbox ref there.
pub fn send_to(ws: &Workspace, remote: &Remote, to: &AgentId, text: &str) -> Result<()> {
    let _turn = super::turn(ws, remote)?;
    let seen = fetch(ws, remote)?;
    if !seen.repo.contains_key(&format!("refs/heads/{}", to.branch())) {
        return Err(RemoteError::Refused {
            name: format!("refs/heads/{}", to.branch()),
            why: format!("`{}` has no agent `{to}` (`offshoot pull` shows what it has)", remote.name),
        });
    }
    let blob = remote::write_blob(&ws.layout.repo(), text.as_bytes())?;
    // Two sends of one text within a second are two messages.
    let name = message_name(text, crate::random_u32() % 1_000_000, blob);
    let local = format!("refs/outgoing/{to}/{name}");
    bundle::set_refs(&ws.layout.repo(), &[(local.clone(), blob)])?;
    let mut updates =
        vec![Update { local: Some(local.clone()), remote: inbox_ref(to, &name), expect: Expect::Exactly(None) }];
    // A message revives a stopped agent: a stop still asked of it is withdrawn (whoever
    // drives it would stop it again).
    let request = stop_request(to);
    if let Some(asked) = seen.repo.get(&request) {
        updates.push(Update { local: None, remote: request, expect: Expect::Exactly(Some(*asked)) });
    }
    // Together or not at all; a request withdrawn meanwhile (by the worker that carried
    // it out) leaves the message to go alone.
    let mut outcome = remote::push_whole(&ws.layout.repo(), &remote.url, &updates);
    if updates.len() > 1 && matches!(outcome.as_deref(), Ok([_, Outcome::Moved { .. }])) {
        outcome = remote::push(&ws.layout.repo(), &remote.url, &updates[..1]);
    }
    let outcome = outcome.map_err(|e| unreachable(remote, e));
    let _ = ws.repo.delete_ref(&local);
    // The message is what was asked for: the withdrawal beside it may have gone or not.
    match refusal(&updates[..1], &outcome?[..1]) {
        Some(refused) => Err(refused),
        None => Ok(()),
    }
}

/// Why a push of `updates` did not go through, if one of them did not: the first out of
/// place (moved there, or refused by the server) before one only withheld because of it.
fn refusal(updates: &[Update], outcomes: &[Outcome]) -> Option<RemoteError> {
    let pairs = || updates.iter().zip(outcomes);
    let (update, outcome) = pairs()
        .find(|(_, o)| matches!(o, Outcome::Moved { .. } | Outcome::Refused(_)))
        .or_else(|| pairs().find(|(_, o)| !matches!(o, Outcome::Done(_))))?;
    let why = match outcome {
        Outcome::Moved { found: Some(_) } if update.expect == Expect::Exactly(None) => "it exists there already".into(),
        Outcome::Moved { found: Some(_) } => "it moved there meanwhile; try again".into(),
        Outcome::Moved { found: None } => "it is not there".into(),
        Outcome::Refused(words) => words.clone(),
        Outcome::Done(_) | Outcome::Withheld => "another ref was out of place".into(),
    };
    Some(RemoteError::Refused { name: update.remote.clone(), why })
}

/// The ref that asks whoever drives `id` to stop it.
pub(crate) fn stop_request(id: &AgentId) -> String {
    Shelf::StopRequests.ref_name(id)
}

/// Asks the workers of `remote` to stop `id` and every agent below it the remote has
/// (as `stop` does here): a stop request for each, in one push. Returns the agents asked.
pub fn stop_on(ws: &Workspace, remote: &Remote, id: &AgentId) -> Result<Vec<AgentId>> {
    let _turn = super::turn(ws, remote)?;
    let seen = fetch(ws, remote)?;
    let below = format!("{}.", id.branch());
    let tree: Vec<AgentId> = seen
        .repo
        .keys()
        .filter_map(|n| n.strip_prefix("refs/heads/"))
        .filter(|b| *b == id.branch() || b.starts_with(&below))
        .filter_map(|b| AgentId::parse(b.trim_start_matches("agents/")).ok())
        .collect();
    if tree.is_empty() {
        return Err(RemoteError::NotThere { remote: remote.name.clone(), id: id.to_string() });
    }
    // Only a tree handed to the workers is theirs to stop (one pushed for inspection is
    // driven where it was made).
    let root = id.root();
    if !seen.repo.contains_key(&Mark::Fleet.ref_name(&root)) {
        return Err(RemoteError::NotHanded { remote: remote.name.clone(), id: id.to_string() });
    }
    // With the messages for the tree on the remote as asked: those wait for the agent's
    // next message; one that arrives later revives it after the stop (the later wins).
    let mut asked =
        format!("stop asked at {} ({:08x})\n{INBOX_SEEN}\n", infra::time::Timestamp::now(), crate::random_u32());
    for agent in &tree {
        let prefix = super::inbox_prefix(agent.as_str());
        for (name, _) in seen.under(&prefix) {
            asked.push_str(&format!("held {agent}/{}\n", &name[prefix.len()..]));
        }
    }
    let blob = remote::write_blob(&ws.layout.repo(), asked.as_bytes())?;
    let local = format!("refs/outgoing/stop-{:08x}", crate::random_u32());
    bundle::set_refs(&ws.layout.repo(), &[(local.clone(), blob)])?;
    let updates: Vec<Update> = tree
        .iter()
        .map(|agent| {
            let name = stop_request(agent);
            let expect = Expect::Exactly(seen.repo.get(&name).copied());
            Update { local: Some(local.clone()), remote: name, expect }
        })
        .collect();
    let outcomes = remote::push_whole(&ws.layout.repo(), &remote.url, &updates).map_err(|e| unreachable(remote, e));
    let _ = ws.repo.delete_ref(&local);
    match refusal(&updates, &outcomes?) {
        Some(refused) => Err(refused),
        None => Ok(tree),
    }
}
