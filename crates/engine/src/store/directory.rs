//! An agent's directory is a cache of its branch. It has a git directory of its own
//! (`gits/<id>`, on the project branch its `.offshoot/git` records, borrowing from the
//! shared `project.git`) and is tracked by the harness from `repo.git` with an index
//! of its own. Opening it for a driver mends what is broken: a missing directory is
//! rebuilt from the tip, a `.git` that no longer points at its git directory is put
//! back, and a git directory that is gone or unreadable is made again at the recorded
//! position. What the agent commits with its git is published to the shared
//! repository by an exporter in its sandbox.

use crate::Cause;
use domain::agent::{self, AgentFacts};
use domain::id::AgentId;
use infra::git::{Attachment, CommitId, GitError, MAIN, Position, Tracked};
use infra::process::{self, Group, Io, Limits, Spec};
use infra::sandbox::Jail;

use crate::store::workspace::Workspace;

/// How long the exporter may take to hand over an agent's new objects.
const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// What opening a directory had to mend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repair {
    /// The directory was missing (or empty of everything but mending) and was
    /// rebuilt from the branch tip.
    Rebuilt,
    /// The directory's `.git` was missing or changed and was put back.
    DotGit,
    /// The agent's own git directory was gone or unreadable (or half made) and was
    /// made again at its recorded position.
    Reattached,
    /// This many files of `.offshoot/` differed from the branch and were put back.
    HarnessFiles(usize),
    /// Ignored paths of the user's checkout were copied in (a warm start).
    Warmed(crate::store::warm::Warmed),
    /// The warm start's copy failed part way; the agent starts with what was copied.
    NotWarmed,
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
    let warm_patterns = crate::store::warm::patterns(ws, facts);
    crate::store::warm::keep_out(ws, &tracked, &warm_patterns);
    if rebuild {
        tracked.checkout(tip)?;
        // Before the index is saved, so the stat cache has the times the warming set.
        match crate::store::warm::warm(ws, &tracked, &warm_patterns) {
            Ok(Some(warmed)) => repairs.push(Repair::Warmed(warmed)),
            Ok(None) => {}
            Err(_) => repairs.push(Repair::NotWarmed),
        }
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

/// Where directories being removed go first (`<workspace>/tmp/trash-…`): out of
/// `agents/` in one rename, so a removal cut short by a kill leaves the agent's
/// directory whole or gone — never half, which the next scan would commit as the
/// agent deleting files — and leaves only trash, which [`sweep_trash`] takes.
const TRASH: &str = "trash-";

/// Removes agent `id`'s directory: renamed out of `agents/` at once, then deleted
/// through the door (which gives access back along the way: a `chmod 000` the agent
/// made does not keep it). A directory that is not there is fine.
pub(crate) fn drop_directory(ws: &Workspace, id: &AgentId) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SERIAL: AtomicU32 = AtomicU32::new(0);
    let tmp = ws.layout.root().join("tmp");
    std::fs::create_dir_all(&tmp)?;
    let trash = format!("{TRASH}{id}-{}-{}", std::process::id(), SERIAL.fetch_add(1, Ordering::Relaxed));
    match std::fs::rename(ws.layout.worktree(id), tmp.join(&trash)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    }
    infra::door::Beneath::open_kept(&tmp)
        .and_then(|door| door.remove_all(std::path::Path::new(&trash)))
        .map_err(std::io::Error::other)
}

/// Deletes what removals cut short left in the trash (each named after the process
/// that made it: only those whose process is gone).
pub(crate) fn sweep_trash(ws: &Workspace) {
    let tmp = ws.layout.root().join("tmp");
    let Ok(door) = infra::door::Beneath::open_kept(&tmp) else { return };
    for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(TRASH) else { continue };
        let pid = rest.rsplit('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| p != std::process::id() && !process::running(p)) {
            let _ = door.remove_all(std::path::Path::new(&name));
        }
    }
}

/// What of agent `id`'s git a person's `git` in its directory would run that the agent
/// put there — its git's config or hooks, a `.git` of its own — for when no driver of
/// it runs to put it back (one killed during a call). A git directory that is gone
/// runs nothing (the next run makes it again).
pub fn planted(ws: &Workspace, id: &AgentId) -> Vec<&'static str> {
    tend(ws, id, false).unwrap_or_default()
}

/// Puts back what [`planted`] finds; what it put back.
pub(crate) fn put_back(ws: &Workspace, id: &AgentId) -> Result<Vec<&'static str>, GitError> {
    tend(ws, id, true)
}

fn tend(ws: &Workspace, id: &AgentId, mend: bool) -> Result<Vec<&'static str>, GitError> {
    let dir = ws.layout.worktree(id);
    if !ws.project.has_git_dir(id.as_str()) {
        return Ok(Vec::new());
    }
    // A git directory judged detached (its HEAD in a form this does not take, a part
    // removed) may still be one a person's git would use: its config is tended all the same.
    let dot_git = dir.is_dir() && ws.project.attachment(id.as_str(), &dir) == Attachment::DotGitWrong;
    let mut found = if mend { ws.project.put_back_config(id.as_str())? } else { ws.project.planted(id.as_str())? };
    if dot_git {
        // One that is missing (an attachment a kill cut short before writing it) runs nothing.
        if dir.join(".git").symlink_metadata().is_ok() {
            found.push(".git");
        }
        if mend {
            ws.project.restore_dot_git(id.as_str(), &dir)?;
        }
    }
    Ok(found)
}
/// Where the agent's git stood at `tip`, with its project branch made to exist:
/// recreated at the recorded head if it is gone. An agent from before positions were
/// recorded works on a branch named after it, from `main`.
pub(crate) fn recorded_position(ws: &Workspace, facts: &AgentFacts, tip: CommitId) -> Result<Position, GitError> {
    let recorded =
        ws.repo.read_file(tip, agent::GIT)?.and_then(|b| agent::parse_position(&String::from_utf8_lossy(&b)));
    let main = ws.project.branch_tip(MAIN)?;
    let own = facts.project_branch();
    let mut position = recorded.unwrap_or_else(|| Position { branch: Some(own.clone()), head: main });
    if position.head.is_some_and(|h| !ws.project.has_commit(h)) {
        position.head = main;
    }
    // Only the agent's own name is a shared branch (whatever else its git was on is
    // its own business: made shared, it would take names and clutter `agents/`).
    if let Some(branch) = &position.branch
        && *branch == own
        && ws.project.branch_tip(branch)?.is_none()
        && let Some(head) = position.head
    {
        ws.project.create_branch(branch, head)?;
    }
    Ok(position)
}

/// Publishes agent `id`'s git at `position`: the objects of its head the shared store
/// lacks are exported by `exe` (this binary) in the agent's `jail` and taken in as
/// data, and the shared branch named `own` (the agent's name) follows the head when
/// the agent is on it. Another branch of the agent's is not published (only its own
/// name is a shared branch). Says why when it could not be done.
pub(crate) fn publish(
    ws: &Workspace,
    exe: &std::path::Path,
    jail: Option<&Jail>,
    id: &AgentId,
    position: &Position,
    own: &str,
) -> Result<(), Cause> {
    let Some(head) = position.head else { return Ok(()) };
    if !ws.project.has_commit(head) {
        let args = ws.project.export_args(id.as_str(), &[head]);
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let spec = Spec {
            program: exe,
            args: &args,
            cwd: ws.layout.root(),
            env: &[],
            group: Group::Own,
            stdin: None,
            sandbox: jail.map(Jail::helper),
            pgid_record: None,
        };
        let limits = Limits { head: 0, tail: 4096, record_max: 0, timeout: Some(EXPORT_TIMEOUT), idle: None };
        let mut importer = ws.project.importer()?;
        let mut take = |bytes: &[u8]| importer.feed(bytes);
        let done = process::run(&spec, &limits, Io { on_stdout: Some(&mut take), ..Io::default() })?;
        if let Some(why) = importer.refused() {
            return Err(why.to_owned().into());
        }
        if done.ended == process::Ended::TimedOut {
            return Err(format!("reading its objects took over {} s", EXPORT_TIMEOUT.as_secs()).into());
        }
        if !done.exit.success() {
            let said = String::from_utf8_lossy(&done.stderr.tail).trim().to_owned();
            return Err(format!(
                "its objects could not be read ({}{})",
                done.exit,
                if said.is_empty() { String::new() } else { format!(": {said}") }
            )
            .into());
        }
        importer.finish()?;
        if !ws.project.has_commit(head) {
            return Err(format!("commit {head} did not come").into());
        }
    }
    if position.branch.as_deref() == Some(own) {
        ws.project.publish_branch(own, head)?;
    }
    Ok(())
}
