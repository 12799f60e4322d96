//! Warm starts in project mode (issue 22): ignored paths of the user's checkout — build
//! output such as `target/` or `node_modules/` — copied into a new agent's directory,
//! so its first build reuses the user's. What is copied is chosen by patterns (the
//! role's `copy_ignored` and `prompt --copy-ignored`) matched against what `git status
//! --ignored` lists. Copies go through the door (a link the agent's tree holds is
//! never followed), as reflinks where the file system shares blocks, keeping their
//! times; the directory's files whose content is the user's take the user's times, so
//! a build tool that compares times rebuilds exactly what differs. None of it is ever
//! recorded: each copied path is ignored by the harness's scan of that agent whatever
//! its `.gitignore` says.

use crate::domain::agent::AgentFacts;
use crate::domain::glob;
use crate::infra::door::{Beneath, Copied};
use crate::infra::git::{GitError, Tracked, UserRepo};

use super::workspace::Workspace;

/// What a warm start copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Warmed {
    /// Ignored paths copied (each a file or a whole directory).
    pub paths: usize,
    pub copied: Copied,
    /// Files of the directory that took the user's times.
    pub timed: usize,
}

/// The ignored paths of the user's checkout that `patterns` choose, and the patterns
/// that chose nothing. A pattern matches a listed path (`target`, `web/node_modules`,
/// `*/node_modules`) or names a path inside one (`target/debug`).
pub fn select(user: &UserRepo, patterns: &[String]) -> Result<(Vec<String>, Vec<String>), GitError> {
    let ignored = user.ignored_paths()?;
    let mut chosen: Vec<String> = Vec::new();
    let mut idle = Vec::new();
    for pattern in patterns {
        let plain = pattern.trim_end_matches('/');
        let mut found: Vec<String> = ignored.iter().filter(|p| glob::matches(plain, p)).cloned().collect();
        let inside = ignored.iter().any(|p| plain.starts_with(&format!("{p}/")));
        if found.is_empty() && inside && std::fs::symlink_metadata(user.root().join(plain)).is_ok() {
            found.push(plain.to_owned());
        }
        if found.is_empty() {
            idle.push(pattern.clone());
        }
        chosen.extend(found);
    }
    chosen.sort();
    chosen.dedup();
    // A path inside another chosen one comes with it.
    let nested = |p: &String| chosen.iter().any(|q| p.starts_with(&format!("{q}/")));
    let outer: Vec<String> = chosen.iter().filter(|p| !nested(p)).cloned().collect();
    Ok((outer, idle))
}

/// The patterns agent `facts` is warmed by: its own, then its role's (read from its
/// lineage's config now).
pub fn patterns(ws: &Workspace, facts: &AgentFacts) -> Vec<String> {
    let mut all = facts.copy_ignored.clone();
    if let Ok((_, config)) = ws.config(&facts.lineage)
        && let Some(role) = config.role(&facts.role)
    {
        all.extend(role.copy_ignored.iter().filter(|p| !facts.copy_ignored.contains(p)).cloned());
    }
    all
}

/// Makes the scan of `tracked` leave `patterns`' paths out, whatever the directory's
/// `.gitignore` files say.
pub fn keep_out(tracked: &Tracked, patterns: &[String]) {
    for pattern in patterns {
        tracked.ignore(&format!("/{}", pattern.trim_end_matches('/')));
    }
}

/// Warms the directory `tracked` (just made, nothing of the agent's run in it yet) from
/// the user's checkout: `None` when there is nothing to do (not a project, no
/// patterns).
pub fn warm(ws: &Workspace, tracked: &Tracked, patterns: &[String]) -> Result<Option<Warmed>, String> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let Some(user) = ws.user_repo().map_err(|e| e.to_string())? else { return Ok(None) };
    let (chosen, _) = select(&user, patterns).map_err(|e| e.to_string())?;
    let door = Beneath::open_kept(tracked.root()).map_err(|e| e.to_string())?;
    let mut warmed = Warmed::default();
    for path in &chosen {
        let rel = std::path::Path::new(path);
        // The agent's tree has a file of that name: its own, left as it is.
        if door.kind(rel).map_err(|e| e.to_string())?.is_some() {
            continue;
        }
        let copied = door.copy_in(rel, &user.root().join(path)).map_err(|e| e.to_string())?;
        warmed.paths += 1;
        warmed.copied.files += copied.files;
        warmed.copied.bytes += copied.bytes;
        warmed.copied.cloned += copied.cloned;
        warmed.copied.skipped += copied.skipped;
    }
    warmed.timed = tracked.take_times(user.root()).map_err(|e| e.to_string())?;
    Ok(Some(warmed))
}
