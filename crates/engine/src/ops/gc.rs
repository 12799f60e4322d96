//! `offshoot gc`: what a workspace can give back without losing anything. The
//! directories of agents with nothing to do are removed (each is made again from its
//! branch when it next runs; its own git directory stays), and `repo.git` and
//! `project.git` are made one pack each. A running agent — its lock held — is left
//! alone, and its lock is taken for as long as its directory goes, so no driver starts
//! on a directory half removed. Idle agents' finished step records are folded into
//! one file each (a running agent's driver does that for its own). Objects of
//! `repo.git` that nothing reaches — a removed agent's history, a crashed step's
//! commit — are let go once older than a grace period.

use std::path::Path;
use std::time::{Duration, SystemTime};

use domain::id::AgentId;
use infra::git::pack::{self, Packing, Prune};
use infra::lock::LockGuard;

use crate::agents::{self, AgentError};
use crate::store::snapshot::Loader;
use crate::store::workspace::Workspace;
use crate::{agents::lifecycle, ops::inspect, store::directory};

/// What a collection did.
#[derive(Debug)]
pub struct Collected {
    /// Agents whose directory went, with its bytes.
    pub dropped: Vec<(AgentId, u64)>,
    /// Agents left as they were, and why.
    pub kept: Vec<(AgentId, &'static str)>,
    /// Step records folded into one file each.
    pub folded: usize,
    pub repo: Packing,
    pub project: Packing,
}

/// Collects workspace `ws`; the directory holding `here` (the user's current
/// directory), if an agent's, is kept. Objects of `repo.git` nothing reaches are let
/// go once older than `prune_after`.
pub fn collect(ws: &Workspace, here: Option<&Path>, prune_after: Duration) -> Result<Collected, AgentError> {
    let mut collected = Collected {
        dropped: Vec::new(),
        kept: Vec::new(),
        folded: 0,
        repo: Packing::Nothing,
        project: Packing::Nothing,
    };
    let mut loader = Loader::default();
    for listing in agents::list(ws)? {
        let id = listing.id;
        let directory = ws.layout.worktree(&id);
        if let Ok(Some(_lock)) = LockGuard::try_acquire(&ws.layout.lock(&id)) {
            // Its records but the newest (which a recovery may still write to): a
            // running agent's driver folds its own.
            let steps = ws.layout.steps(&id);
            let newest = crate::store::step_record::numbers(&steps).last().copied().unwrap_or(0);
            collected.folded += crate::store::step_record::fold_finished(&steps, newest);
        }
        if !directory.exists() {
            continue;
        }
        let Some(facts) = listing.facts else {
            collected.kept.push((id, "its branch is damaged"));
            continue;
        };
        let real = std::fs::canonicalize(&directory).unwrap_or_else(|_| directory.clone());
        if here.is_some_and(|h| h.starts_with(&real)) {
            collected.kept.push((id, "you are in its directory"));
            continue;
        }
        let Ok(Some(_lock)) = LockGuard::try_acquire(&ws.layout.lock(&id)) else {
            collected.kept.push((id, "it is running"));
            continue;
        };
        match lifecycle::work_left(ws, &mut loader, &id, listing.tip, facts.parent.as_deref()) {
            Ok(None) => {}
            Ok(Some(_)) => {
                collected.kept.push((id, "it has work left"));
                continue;
            }
            Err(_) => {
                collected.kept.push((id, "its state could not be read"));
                continue;
            }
        }
        let bytes = inspect::du(&directory);
        match directory::drop_directory(ws, &id) {
            Ok(()) => collected.dropped.push((id, bytes)),
            Err(_) => collected.kept.push((id, "its directory could not be removed")),
        }
    }
    directory::sweep_trash(ws);
    let before = SystemTime::now().checked_sub(prune_after).unwrap_or(SystemTime::UNIX_EPOCH);
    // (Nothing is let go when the mirrors cannot be read: what they reach would be.)
    let prune = roots(ws).map(|roots| Prune { roots, before });
    collected.repo = pack::consolidate(&ws.layout.repo(), prune.as_ref())?;
    // Agents' own gits borrow project.git's objects and keep refs of their own: what
    // they reach is theirs to say, so nothing there is let go.
    collected.project = pack::consolidate(&ws.layout.project(), None)?;
    Ok(collected)
}

/// What `repo.git` must keep beyond what its refs reach: the blobs every agent's index
/// names (a driver reuses them for files it finds unchanged), and the commits every
/// step record names (`show --step N --request` assembles the request from them).
fn roots(ws: &Workspace) -> Option<Vec<infra::git::ObjectId>> {
    // What this workspace last saw of its remotes (kept beside the refs, not among them).
    let mut roots: Vec<infra::git::ObjectId> =
        infra::git::mirrors::refs(&ws.layout.repo(), &format!("{}*/", infra::git::mirrors::ROOT))
            .ok()?
            .into_iter()
            .map(|(_, oid)| oid)
            .collect();
    let index = ws.layout.root().join("index");
    for file in std::fs::read_dir(&index).into_iter().flatten().flatten() {
        roots.extend(pack::index_blobs(&file.path()));
    }
    let steps = ws.layout.root().join("steps");
    for agent in std::fs::read_dir(&steps).into_iter().flatten().flatten() {
        for n in crate::store::step_record::numbers(&agent.path()) {
            let Some(record) = crate::store::step_record::StepRecord::at(&agent.path().join(format!("{n:04}"))) else {
                continue;
            };
            let Some(meta) = record.read("meta.json") else { continue };
            let Ok(meta) = serde_json::from_slice::<domain::step::StepMeta>(&meta) else { continue };
            roots.extend([meta.commit, meta.config].iter().filter_map(|c| infra::git::ObjectId::from_str(c).ok()));
        }
    }
    Some(roots)
}
