//! Agents that work in place (`offshoot acp` in a project): the user's checkout is the
//! agent's tree both ways. Each commit of the agent is written into the checkout as it
//! is made ([`mirror`]); before each prompt, what the user changed there is taken into
//! the agent's work ([`take_users_edits`]). The user's HEAD, index and refs are never
//! touched; only the working files named are written, through the door.

use std::collections::BTreeSet;
use std::time::Duration;

use domain::agent;
use domain::id::AgentId;
use infra::git::{CommitId, EntryAt, Repo, TreeEdit, WorkFile};
use serde::{Deserialize, Serialize};

use super::project::{Result, agent_base, plan_writes, refused, user, write_plan};
use crate::agents::AgentError;
use crate::store::workspace::Workspace;

const MIRROR: &str = domain::marks::Mark::Mirror.kind();

/// What the mark `mirror/<id>` holds: the agent commit last written into the checkout,
/// and the files of the agent's a write failed for (the user's, read-only, say), which
/// are not the user's changes to take back.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Mark {
    commit: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    unwritten: BTreeSet<String>,
}

impl Mark {
    fn read(ws: &Workspace, id: &AgentId) -> Result<Option<Mark>> {
        let Some(bytes) = ws.repo.mark(MIRROR, id.as_str())? else { return Ok(None) };
        // (Marks written before the list were the commit alone; one naming no commit —
        // only by hand — starts over from the base.)
        let text = String::from_utf8_lossy(&bytes);
        Ok(Some(
            serde_json::from_str(&text)
                .unwrap_or_else(|_| Mark { commit: Some(text.trim().to_owned()), ..Mark::default() }),
        ))
    }

    fn commit(&self) -> Option<CommitId> {
        self.commit.as_deref().and_then(|c| CommitId::from_str(c).ok())
    }

    fn write(&self, ws: &Workspace, id: &AgentId) -> Result<()> {
        ws.repo.set_mark(MIRROR, id.as_str(), serde_json::to_string(self).unwrap_or_default().as_bytes())?;
        Ok(())
    }
}

/// Makes `id` work in place: from now on [`mirror`] writes its work into the user's
/// working tree as it is committed, starting from where it stands now (its first
/// commit holds the checkout as it was, uncommitted changes included).
pub fn work_in_place(ws: &Workspace, id: &AgentId) -> Result<()> {
    user(ws)?;
    let tip = ws.repo.branch_tip(&id.branch())?.ok_or_else(|| AgentError::Unknown(id.to_string()))?;
    Mark { commit: Some(tip.to_string()), ..Mark::default() }.write(ws, id)
}

/// What [`mirror`] did.
#[derive(Debug, Clone, Default)]
pub struct Mirrored {
    /// The files written (or removed) in the user's working tree.
    pub written: Vec<String>,
    /// Files the user changed too in a way that does not merge: left as the user has them.
    pub kept: Vec<String>,
}

/// For an agent working in place, writes what its work gained since the last mirror
/// into the user's working tree: a file the user left alone takes the agent's version,
/// one both changed is merged, one that does not merge is left as the user has it (and
/// named). Nothing for an agent that does not work in place. A crash between the
/// writes and the mark leaves them to be found already so next time.
pub fn mirror(ws: &Workspace, id: &AgentId) -> Result<Mirrored> {
    let Some(mut mark) = Mark::read(ws, id)? else { return Ok(Mirrored::default()) };
    let last = mark.commit();
    // (Asked after every record of the agent's: nothing more than two ref reads when
    // nothing was committed since.)
    if last.is_some() && last == ws.repo.branch_tip(&id.branch())? {
        return Ok(Mirrored::default());
    }
    let user = user(ws)?;
    let (tip, _, base) = agent_base(ws, id)?;
    let before = match last {
        Some(last) => ws.repo.work_tree(last, agent::DIR, Some(base))?,
        None => ws.repo.tree_id(base)?,
    };
    let after = ws.repo.work_tree(tip, agent::DIR, Some(base))?;
    let (mut plan, mut kept) = plan_writes(ws, &user, before, after)?;
    while let Some((path, _)) = refused(&plan) {
        plan.retain(|(p, _)| *p != path);
        kept.push(path);
    }
    // (A file that cannot be written — the user's, read-only — is kept as it is, named,
    // and the rest goes on: one file must not hold back every later mirror.)
    let mut written = Vec::new();
    for change in plan {
        match write_plan(&user, std::slice::from_ref(&change)) {
            Ok(()) => {
                mark.unwritten.remove(&change.0);
                written.push(change.0);
            }
            Err(e) => {
                kept.push(format!("{} ({e})", change.0));
                mark.unwritten.insert(change.0);
            }
        }
    }
    mark.commit = Some(tip.to_string());
    mark.write(ws, id)?;
    Ok(Mirrored { written, kept })
}

/// For an agent working in place, takes what the user changed in the checkout since the
/// last mirror into the agent's work, as one commit of its own, so that its next run
/// sees the files as the user has them: a file both changed is the user's. Returns the
/// paths taken; none while another holds the agent past `wait` (its driver still
/// ending: they are taken at the next prompt).
pub fn take_users_edits(ws: &Workspace, id: &AgentId, wait: Duration) -> Result<Vec<String>> {
    if Mark::read(ws, id)?.is_none() {
        return Ok(Vec::new());
    }
    let Some(_lock) = crate::agents::hold_within(ws, id, wait) else { return Ok(Vec::new()) };
    // (What the agent did last is in the checkout first.)
    mirror(ws, id)?;
    let mark = Mark::read(ws, id)?.unwrap_or_default();
    let user = user(ws)?;
    let (tip, facts, base) = agent_base(ws, id)?;
    let work = ws.repo.work_tree(tip, agent::DIR, Some(base))?;
    // Where the checkout can differ from the agent's work: what differs from HEAD, what
    // the agent changed, and what the user committed since the agent started.
    let mut paths: BTreeSet<String> = user.changed_paths()?.into_iter().collect();
    paths.extend(ws.repo.tree_changes(ws.repo.tree_id(base)?, work)?.into_iter().map(|c| c.path));
    // (A base holding the user's uncommitted work is the harness's commit: its parent,
    // the HEAD it was made on, is the user's.)
    let mut since = Some(base);
    while let Some(commit) = since {
        if let Some(changed) = user.changed_since(commit) {
            paths.extend(changed);
            break;
        }
        since = ws.repo.first_parent(commit)?.filter(|_| commit == base);
    }
    let (_, config) = ws.config(&facts.lineage)?;
    let limit = config.role(&facts.role).map_or(u64::MAX, |r| r.max_commit_file_bytes);
    let mut edits = Vec::new();
    for path in paths.into_iter().filter(|p| takeable(p, &mark)) {
        if let Some(edit) = users_edit(&ws.repo, tip, &user, path, limit)? {
            edits.push(edit);
        }
    }
    if edits.is_empty() {
        return Ok(Vec::new());
    }
    let taken: Vec<String> = edits.iter().map(|e| edit_path(e).to_owned()).collect();
    let message = "Your edits in the checkout, taken in before the next prompt\n";
    let commit = ws.repo.commit_edits(&[tip], Some(tip), &edits, message)?;
    // The agent's directory first, its branch last: a crash between leaves the
    // directory ahead, and its next step records the same files as its own change.
    let (dir, _) = crate::store::directory::open(ws, id, &facts, tip)?;
    dir.checkout_paths(commit, &taken)?;
    dir.reset_index(commit)?;
    dir.save_index(commit)?;
    ws.repo.move_branch(&id.branch(), commit, tip, message)?;
    Mark { commit: Some(commit.to_string()), unwritten: mark.unwritten }.write(ws, id)?;
    Ok(taken)
}

/// Whether the checkout's `path` may be taken into the agent's work: not the harness's
/// (`.offshoot/`), not a path git refuses, not a file a mirror failed to write, not a
/// [`infra::door`] write's leftover.
fn takeable(path: &str, mark: &Mark) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let leftover = name.starts_with(".offshoot-") && name.ends_with(".new");
    path != agent::DIR
        && !path.starts_with(&format!("{}/", agent::DIR))
        && infra::git::refused_path(path).is_none()
        && !mark.unwritten.contains(path)
        && !leftover
}

/// The edit making the agent's `path` (at `tip`) what the checkout has, if they differ.
/// Only regular files on both sides: a link, directory or submodule of the agent's (the
/// mirror writes none), or a file of its standing where the path's directory would be,
/// is passed over, as is a file over `limit` bytes (kept out of history as a step would).
fn users_edit(
    repo: &Repo,
    tip: CommitId,
    user: &infra::git::UserRepo,
    path: String,
    limit: u64,
) -> Result<Option<TreeEdit>> {
    let theirs = repo.entry_at(tip, &path)?;
    if theirs == EntryAt::Other {
        return Ok(None);
    }
    let mut dirs = path.match_indices('/').map(|(i, _)| &path[..i]);
    if dirs.try_fold((), |(), dir| match repo.entry_at(tip, dir) {
        Ok(EntryAt::File { .. }) => Err(()),
        _ => Ok(()),
    }) == Err(())
    {
        return Ok(None);
    }
    Ok(match user.work_file_and_mode(&path) {
        (WorkFile::File(bytes), executable) if bytes.len() as u64 <= limit => {
            let blob = Repo::blob_id(&bytes)?;
            match theirs == (EntryAt::File { blob, executable }) {
                true => None,
                false if executable => Some(TreeEdit::Executable { path, bytes }),
                false => Some(TreeEdit::Write { path, bytes }),
            }
        }
        (WorkFile::Missing, _) if matches!(theirs, EntryAt::File { .. }) => Some(TreeEdit::Remove { path }),
        _ => None,
    })
}

fn edit_path(edit: &TreeEdit) -> &str {
    match edit {
        TreeEdit::Write { path, .. } | TreeEdit::Executable { path, .. } | TreeEdit::Remove { path } => path,
    }
}
