//! Warm starts in project mode: ignored paths of the user's checkout — build
//! output such as `target/` or `node_modules/` — copied into a new agent's directory,
//! so its first build reuses the user's. What is copied is named by plain paths (the
//! role's `copy_ignored` and `prompt --copy-ignored`), each ignored in the user's
//! checkout; never an offshoot workspace or anything in one. Copies go through the door (a link the agent's tree holds is
//! never followed), as reflinks where the file system shares blocks, keeping their
//! times; the directory's files whose content is the user's take the user's times, so
//! a build tool that compares times rebuilds exactly what differs. None of it is ever
//! recorded: each copied path is ignored by the harness's scan of that agent whatever
//! its `.gitignore` says.

use crate::Cause;
use domain::agent::AgentFacts;
use infra::door::{Beneath, Copied};
use infra::git::{GitError, Tracked, UserRepo};

use crate::store::workspace::Workspace;

/// What a warm start copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Warmed {
    /// Ignored paths copied (each a file or a whole directory).
    pub(crate) paths: usize,
    pub(crate) copied: Copied,
    /// Files of the directory that took the user's times.
    pub(crate) timed: usize,
}

/// The paths to copy, and those refused with the reason.
pub(crate) type Selection = (Vec<String>, Vec<(String, &'static str)>);

/// Which of `paths` (plain relative paths, [`domain::agent::copy_ignored_problem`])
/// can be copied from the user's checkout: each must be there, be ignored (listed by
/// `git status --ignored`, or inside a directory that is), and neither be, hold nor lie
/// inside an offshoot workspace (its internals are kept from agents). The rest come
/// back with the reason.
pub fn select(user: &UserRepo, paths: &[String]) -> Result<Selection, GitError> {
    let ignored = user.ignored_paths()?;
    let mut chosen: Vec<String> = Vec::new();
    let mut refused = Vec::new();
    for path in paths {
        let plain = path.trim_end_matches('/').to_owned();
        let full = user.root().join(&plain);
        let is_ignored = ignored.iter().any(|p| *p == plain || plain.starts_with(&format!("{p}/")));
        let why = if std::fs::symlink_metadata(&full).is_err() {
            Some("is not in your checkout")
        } else if !is_ignored {
            Some("is not ignored in your checkout (only ignored files are copied: the rest is in the agent's tree)")
        } else if full.ancestors().take_while(|a| a.starts_with(user.root())).any(is_workspace)
            || holds_workspace(&full)
        {
            Some("holds or lies in an offshoot workspace, whose internals are kept from agents")
        } else {
            None
        };
        match why {
            Some(why) => refused.push((path.clone(), why)),
            None => chosen.push(plain),
        }
    }
    chosen.sort();
    chosen.dedup();
    // A path inside another chosen one comes with it.
    let nested = |p: &String| chosen.iter().any(|q| p.starts_with(&format!("{q}/")));
    let outer: Vec<String> = chosen.iter().filter(|p| !nested(p)).cloned().collect();
    Ok((outer, refused))
}

/// Whether `dir` is an offshoot workspace (its repository and agents' directories).
fn is_workspace(dir: &std::path::Path) -> bool {
    dir.join("repo.git").is_dir() && dir.join("agents").is_dir()
}

/// Whether a workspace is anywhere below `dir` (links not followed).
fn holds_workspace(dir: &std::path::Path) -> bool {
    if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return false;
    }
    is_workspace(dir)
        || std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_type().is_ok_and(|t| t.is_dir()) && holds_workspace(&e.path()))
}

/// The patterns agent `facts` is warmed by: its own, then its role's (read from its
/// lineage's config now).
pub(crate) fn patterns(ws: &Workspace, facts: &AgentFacts) -> Vec<String> {
    let mut all = facts.copy_ignored.clone();
    if let Ok((_, config)) = ws.config(&facts.lineage)
        && let Some(role) = config.role(&facts.role)
    {
        all.extend(role.copy_ignored.iter().filter(|p| !facts.copy_ignored.contains(p)).cloned());
    }
    all
}

/// Makes the scan of `tracked` leave the copied paths out, whatever the directory's
/// `.gitignore` files say: each path (plain, so it reads as itself) anchored at the
/// root. Only in a project: elsewhere nothing is copied.
pub(crate) fn keep_out(ws: &Workspace, tracked: &Tracked, paths: &[String]) {
    if ws.source.is_none() {
        return;
    }
    for path in paths.iter().filter(|p| domain::agent::copy_ignored_problem(p).is_none()) {
        tracked.ignore(&format!("/{}", path.trim_end_matches('/')));
    }
}

/// Warms the directory `tracked` (just made, nothing of the agent's run in it yet) from
/// the user's checkout: `None` when there is nothing to do (not a project, no
/// patterns).
pub(crate) fn warm(ws: &Workspace, tracked: &Tracked, patterns: &[String]) -> Result<Option<Warmed>, Cause> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let Some(user) = ws.user_repo()? else { return Ok(None) };
    let (chosen, _) = select(&user, patterns)?;
    if chosen.is_empty() {
        return Ok(None);
    }
    let door = Beneath::open_kept(tracked.root())?;
    let mut warmed = Warmed::default();
    for path in &chosen {
        let rel = std::path::Path::new(path);
        // The agent's tree has a file of that name: its own, left as it is.
        if door.kind(rel)?.is_some() {
            continue;
        }
        let copied = door.copy_in(rel, &user.root().join(path), &is_workspace)?;
        warmed.paths += 1;
        warmed.copied.files += copied.files;
        warmed.copied.bytes += copied.bytes;
        warmed.copied.cloned += copied.cloned;
        warmed.copied.skipped += copied.skipped;
    }
    warmed.timed = tracked.take_times(user.root())?;
    Ok(Some(warmed))
}
