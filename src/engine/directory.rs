//! An agent's directory is a cache of its branch. It is a linked worktree of the
//! agents' repository (`project.git`, on the project branch its `.offshoot/git`
//! records) and is tracked by the harness from `repo.git` with an index of its own.
//! Opening it for a driver mends what is broken: a missing directory is rebuilt from
//! the tip (a stale admin entry pruned first), a `.git` that no longer points at its
//! worktree is put back.

use crate::domain::agent::{self, AgentFacts};
use crate::domain::id::AgentId;
use crate::infra::git::{Attachment, CommitId, GitError, MAIN, Position, Tracked};

use super::workspace::Workspace;

/// What opening a directory had to mend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repair {
    /// The directory was missing (or empty of everything but mending) and was
    /// rebuilt from the branch tip.
    Rebuilt,
    /// The directory's `.git` was missing or changed and was put back.
    DotGit,
    /// The directory was no longer a worktree of the agents' repository and was
    /// attached again at its recorded position.
    Reattached,
    /// This many files of `.offshoot/` differed from the branch and were put back.
    HarnessFiles(usize),
}

/// Opens `id`'s directory for a driver, mending it first; `tip` is the branch tip.
pub fn open(
    ws: &Workspace,
    id: &AgentId,
    facts: &AgentFacts,
    tip: CommitId,
) -> Result<(Tracked, Vec<Repair>), GitError> {
    let dir = ws.layout.worktree(id);
    let mut repairs = Vec::new();
    let rebuild = !dir.is_dir();
    if rebuild {
        // A directory removed by hand leaves its admin entry behind.
        ws.project.detach(id.as_str());
        std::fs::create_dir_all(&dir).map_err(|source| GitError::Io { path: dir.clone(), source })?;
    }
    match ws.project.attachment(id.as_str(), &dir) {
        Attachment::Attached => {}
        Attachment::DotGitWrong => {
            ws.project.restore_dot_git(id.as_str(), &dir)?;
            repairs.push(Repair::DotGit);
        }
        Attachment::Detached => {
            let position = recorded_position(ws, facts, tip)?;
            ws.project.attach(id.as_str(), &dir, &position)?;
            if !rebuild {
                repairs.push(Repair::Reattached);
            }
        }
    }
    let tracked = Tracked::open(&ws.layout.repo(), &dir, &ws.layout.index(id), agent::DIR, agent::MESSAGES)?;
    if rebuild {
        tracked.checkout(tip)?;
        tracked.save_index(tip)?;
        repairs.insert(0, Repair::Rebuilt);
    } else {
        // Whatever happened while no driver watched (a crash between writing a
        // transcript file and committing it, a process left behind, a person): the
        // index the last driver saved says which files changed since, else all are
        // checked.
        let restored = match tracked.harness_changes(tip)? {
            Some(paths) => {
                let mut restored = Vec::new();
                for path in paths {
                    restored.extend(tracked.restore(tip, &path)?);
                }
                restored
            }
            None => tracked.restore(tip, agent::DIR)?,
        };
        if !restored.is_empty() {
            repairs.push(Repair::HarnessFiles(restored.len()));
        }
    }
    Ok((tracked, repairs))
}

/// Where the agent's git stood at `tip`, with its project branch made to exist:
/// recreated at the recorded head if it is gone. An agent from before positions were
/// recorded works on a branch named after it, from `main`.
pub fn recorded_position(ws: &Workspace, facts: &AgentFacts, tip: CommitId) -> Result<Position, GitError> {
    let recorded =
        ws.repo.read_file(tip, agent::GIT)?.and_then(|b| agent::parse_position(&String::from_utf8_lossy(&b)));
    let main = ws.project.branch_tip(MAIN)?;
    let mut position = recorded.unwrap_or_else(|| Position {
        branch: Some(facts.name.clone().unwrap_or_else(|| facts.id.clone())),
        head: main,
    });
    if position.head.is_some_and(|h| !ws.project.has_commit(h)) {
        position.head = main;
    }
    if let Some(branch) = &position.branch
        && ws.project.branch_tip(branch)?.is_none()
        && let Some(head) = position.head
    {
        ws.project.create_branch(branch, head)?;
    }
    Ok(position)
}
