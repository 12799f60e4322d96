//! Project mode: where a root agent starts in the user's repository, and taking an
//! agent's work back — as a diff, as a branch of the user's repository (`export`), or
//! as uncommitted changes in its working tree (`apply`). Nothing here touches the
//! user's HEAD, index or other refs; `apply` writes only the files it names.

use domain::agent::{self, AgentFacts};
use domain::id::AgentId;
use infra::git::{CommitId, GitError, TreeEdit, UserRepo, WorkFile};

use crate::agents::{AgentError, ProjectStart};
use crate::store::snapshot::{self, SnapshotError};
use crate::store::workspace::{Workspace, WorkspaceError};

#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    #[error(
        "this workspace has no project: agents start in an empty directory here (run offshoot inside a git repository, or `offshoot new PATH --project DIR`)"
    )]
    NotProject,
    #[error("the repository at {0} has no commits yet, and an agent starts from one")]
    NoCommits(String),
    #[error("`{0}` names no commit of the project")]
    UnknownBase(String),
    #[error(
        "agent `{0}` did not start from a project: its workspace has none (made with `-w` or outside a git repository), or it was made before it had one"
    )]
    NoBase(String),
    #[error("`{0}` is not a valid branch name (git's rules for refs; not `HEAD`, not starting with `-` or `refs/`)")]
    BadBranch(String),
    #[error("branch `{0}` is checked out in the project; export to another with `--branch`")]
    CheckedOut(String),
    #[error("branch `{branch}` of the project is at {tip}, which the agent's work does not build on")]
    NotFastForward { branch: String, tip: String },
    #[error("the agent's change does not apply cleanly to the project's working tree: {}", files.join(", "))]
    Conflicts { files: Vec<String> },
    #[error("the agent's change holds `{path}`, which git refuses ({why}); nothing was written")]
    Refused { path: String, why: &'static str },
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

pub(super) type Result<T> = std::result::Result<T, ProjectError>;

pub(super) fn user(ws: &Workspace) -> Result<UserRepo> {
    ws.user_repo()?.ok_or(ProjectError::NotProject)
}

/// Where a new root agent starts: `base` (a revision of the user's repository, HEAD
/// when `None`) and, with `with_changes`, the uncommitted changes of its working tree.
/// Also the paths of the changes left out (when `with_changes` is off), to say so.
/// `None` outside project mode.
pub fn start_point(
    ws: &Workspace,
    base: Option<&str>,
    with_changes: bool,
    author: Option<&(String, String)>,
) -> Result<Option<(ProjectStart, Vec<String>)>> {
    let Some(user) = ws.user_repo()? else {
        // (`--base` and `--with-changes` say where in a project to start: without one,
        // neither means anything, and is refused rather than ignored.)
        return match base.is_some() || with_changes {
            true => Err(ProjectError::NotProject),
            false => Ok(None),
        };
    };
    let commit = match base {
        Some(rev) => user.resolve(rev).ok_or_else(|| ProjectError::UnknownBase(rev.to_owned()))?,
        None => user.head()?.ok_or_else(|| ProjectError::NoCommits(user.root().display().to_string()))?,
    };
    let changes = user.changes()?;
    if !with_changes || changes.is_empty() {
        let left = changes.into_iter().map(|(path, _)| path).collect();
        return Ok(Some((ProjectStart { base: commit, changes: Vec::new() }, left)));
    }
    // The user's work taken along is a commit of its own, the user's: the agent starts
    // on it, so `diff` shows the agent's work alone and `export` keeps the two apart.
    let edits: Vec<TreeEdit> = changes
        .iter()
        .map(|(path, content)| match content {
            Some((bytes, true)) => TreeEdit::Executable { path: path.clone(), bytes: bytes.clone() },
            Some((bytes, false)) => TreeEdit::Write { path: path.clone(), bytes: bytes.clone() },
            None => TreeEdit::Remove { path: path.clone() },
        })
        .collect();
    let message = "Uncommitted work, taken along by `offshoot prompt --with-changes`\n";
    let yours = ws.repo.commit_edits_by(&[commit], Some(commit), &edits, author, message)?;
    // Changes that come to nothing in the tree (staged, then undone in the working tree)
    // make no commit.
    if ws.repo.tree_id(yours)? == ws.repo.tree_id(commit)? {
        return Ok(Some((ProjectStart { base: commit, changes: Vec::new() }, Vec::new())));
    }
    // (Written in the harness's repository; the agents' shared one takes it too, as their
    // gits start on it.)
    ws.project.take_work(&ws.repo, yours)?;
    Ok(Some((ProjectStart { base: yours, changes }, Vec::new())))
}

/// The agent's tip, its facts and the base it started from.
pub(super) fn agent_base(ws: &Workspace, id: &AgentId) -> Result<(CommitId, AgentFacts, CommitId)> {
    let tip = ws.repo.branch_tip(&id.branch())?.ok_or_else(|| AgentError::Unknown(id.to_string()))?;
    let facts = snapshot::read_facts(&ws.repo, tip)?;
    let base = facts
        .base
        .as_deref()
        .and_then(|b| CommitId::from_str(b).ok())
        .ok_or_else(|| ProjectError::NoBase(id.to_string()))?;
    Ok((tip, facts, base))
}

/// The agent's change against its base — committed with its git or not — as a
/// unified diff, or with `stat` as a summary.
pub fn diff(ws: &Workspace, id: &AgentId, stat: bool) -> Result<String> {
    let (tip, _, base) = agent_base(ws, id)?;
    let work = ws.repo.work_tree(tip, agent::DIR, Some(base))?;
    Ok(ws.repo.diff_text(base, work, stat)?)
}

/// What `export` did.
#[derive(Debug, Clone)]
pub struct Exported {
    pub branch: String,
    pub commit: CommitId,
    /// Whether a commit of the agent's uncommitted work was added on top of its git's.
    pub uncommitted: bool,
    /// The branch's earlier tip, if it existed (a fast-forward, or with `force` a reset).
    pub previous: Option<CommitId>,
    pub base: CommitId,
}

/// Creates or fast-forwards `branch` (default `offshoot/<name>`) of the user's
/// repository with the agent's commits plus one commit of its uncommitted work, if
/// any, authored by `author` (else the harness). A branch that the work does not build
/// on is refused unless `force`; a checked-out branch always.
pub fn export(
    ws: &Workspace,
    id: &AgentId,
    branch: Option<&str>,
    force: bool,
    author: Option<&(String, String)>,
) -> Result<Exported> {
    let user = user(ws)?;
    let (tip, facts, base) = agent_base(ws, id)?;
    let name = facts.project_branch();
    let branch = branch.map(str::to_owned).unwrap_or_else(|| format!("offshoot/{name}"));
    if !infra::git::valid_branch_name(&branch) {
        return Err(ProjectError::BadBranch(branch));
    }
    if user.checked_out(&branch) {
        return Err(ProjectError::CheckedOut(branch));
    }
    // The agent's git position as the tip records it (read, never mended here).
    let recorded = ws.repo.read_file(tip, agent::GIT)?;
    let head = recorded
        .and_then(|b| agent::parse_position(&String::from_utf8_lossy(&b)))
        .and_then(|p| p.head)
        .filter(|h| ws.project.has_commit(*h))
        .unwrap_or(base);
    let work = ws.repo.work_tree(tip, agent::DIR, Some(base))?;
    let previous = user.branch_tip(&branch);
    let marker = format!("Written by offshoot agent `{id}`");
    // Build on an earlier export of this agent when there is one to build on, so a
    // second export after more work fast-forwards: on it directly while the agent's git
    // has not moved past it, else as a second parent next to the agent's new commits.
    let parents = match previous {
        Some(old) if ws.project.descends(old, head) => vec![old],
        Some(old)
            if ws.project.commit_info(old).is_some_and(|(message, first)| {
                message.contains(&marker) && first.is_some_and(|f| ws.project.descends(head, f))
            }) =>
        {
            vec![head, old]
        }
        _ => vec![head],
    };
    let (commit, uncommitted) = match parents[..] {
        [only] if ws.project.tree_id(only)? == work => (only, false),
        _ => {
            let message = format!("{name}: uncommitted work\n\n{marker}; not committed by its git.");
            ws.project.take_work(&ws.repo, work)?;
            (ws.project.commit_work(&parents, work, author, &message)?, true)
        }
    };
    // Refused before anything is copied: project.git reads the user's objects too.
    if let Some(old) = previous
        && !force
        && !ws.project.descends(commit, old)
    {
        return Err(ProjectError::NotFastForward { branch, tip: old.to_string() });
    }
    ws.project.send_to(&user, commit)?;
    if previous != Some(commit) {
        user.set_branch(&branch, commit, previous, &format!("offshoot export {id}"))?;
    }
    Ok(Exported { branch, commit, uncommitted, previous, base })
}

/// Writes the agent's net change (base → its directory) into the user's working tree
/// as uncommitted changes: a file the user has not touched takes the agent's version,
/// one both changed is merged line by line. When any file cannot be merged, nothing is
/// written and the files are named. Returns the paths written.
pub fn apply(ws: &Workspace, id: &AgentId) -> Result<Vec<String>> {
    let user = user(ws)?;
    let (tip, _, base) = agent_base(ws, id)?;
    let work = ws.repo.work_tree(tip, agent::DIR, Some(base))?;
    let base_tree = ws.repo.tree_id(base)?;
    let (plan, conflicts) = plan_writes(ws, &user, base_tree, work)?;
    if !conflicts.is_empty() {
        return Err(ProjectError::Conflicts { files: conflicts });
    }
    if let Some((path, why)) = refused(&plan) {
        return Err(ProjectError::Refused { path, why });
    }
    write_plan(&user, &plan)?;
    Ok(plan.into_iter().map(|(p, _)| p).collect())
}

/// The writes that take the user's working tree from tree `before` to tree `after` where the
/// user left a file as `before` has it (merged line by line where both changed it),
/// and the files that cannot be merged.
pub(super) fn plan_writes(
    ws: &Workspace,
    user: &UserRepo,
    before: CommitId,
    after: CommitId,
) -> Result<(Vec<infra::git::Change>, Vec<String>)> {
    let blob = |side: Option<(CommitId, bool)>| -> Result<Option<(Vec<u8>, bool)>> {
        side.map(|(oid, exec)| ws.repo.read_blob(oid).map(|b| (b, exec))).transpose().map_err(Into::into)
    };
    let mut plan: Vec<infra::git::Change> = Vec::new();
    let mut conflicts = Vec::new();
    for change in ws.repo.tree_changes(before, after)? {
        let (before, after) = (blob(change.before)?, blob(change.after)?);
        let (ours, in_the_way) = match user.work_file(&change.path) {
            WorkFile::File(bytes) => (Some(bytes), false),
            WorkFile::Missing => (None, false),
            WorkFile::InTheWay => (None, true),
        };
        let text = |side: &Option<(Vec<u8>, bool)>| side.as_ref().map(|(b, _)| b.clone());
        if in_the_way {
            conflicts.push(change.path);
        } else if ours == text(&after) {
            // Already so.
        } else if ours == text(&before) {
            plan.push((change.path, after));
        } else if let (Some(b), Some(o), Some((t, exec))) = (text(&before), &ours, &after) {
            match ws.repo.merge_texts(&b, o, t)? {
                Some(merged) => plan.push((change.path, Some((merged, *exec)))),
                None => conflicts.push(change.path),
            }
        } else {
            conflicts.push(change.path);
        }
    }
    Ok((plan, conflicts))
}

/// A path of `plan` git would refuse (`.GIT/hooks/…` is `.git` on a case-insensitive
/// disk): never written into the user's working tree.
pub(super) fn refused(plan: &[infra::git::Change]) -> Option<(String, &'static str)> {
    plan.iter().find_map(|(p, _)| infra::git::refused_path(p).map(|why| (p.clone(), why)))
}

pub(super) fn write_plan(user: &UserRepo, plan: &[infra::git::Change]) -> Result<()> {
    for (path, content) in plan {
        match content {
            Some((bytes, exec)) => user.write_work_file(path, Some(bytes), *exec)?,
            None => user.write_work_file(path, None, false)?,
        }
    }
    Ok(())
}
