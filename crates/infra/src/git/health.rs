//! What a repository holds and what a killed process left in it: the objects its refs
//! reach, lock files and temporary object files (what `doctor` checks and `scan`
//! sweeps).

use std::path::{Path, PathBuf};

use git2::{ObjectType, Oid};

use super::{Repo, Result, branch_ref, lib};

/// What a walk of every object the refs reach found.
#[derive(Debug, Default, Clone)]
pub struct Connectivity {
    pub commits: usize,
    pub objects: usize,
    /// Objects that are referenced but cannot be found: (object, the ref it is reached from).
    pub missing: Vec<(Oid, String)>,
}

impl Repo {
    /// Every ref and what it points at.
    pub fn all_refs(&self) -> Result<Vec<(String, Oid)>> {
        let refs = self.repo.references().map_err(lib("list refs"))?;
        Ok(refs.flatten().filter_map(|r| Some((r.name().ok()?.to_owned(), r.target()?))).collect())
    }

    /// Walks every object every ref reaches (each once) and names those missing: what
    /// `git fsck --connectivity-only` checks, through libgit2.
    pub fn connectivity(&self) -> Result<Connectivity> {
        let odb = self.repo.odb().map_err(lib("open odb"))?;
        let mut seen = std::collections::HashSet::new();
        let mut out = Connectivity::default();
        for (name, target) in self.all_refs()? {
            let mut stack = vec![target];
            while let Some(oid) = stack.pop() {
                if !seen.insert(oid) {
                    continue;
                }
                let Ok((_, kind)) = odb.read_header(oid) else {
                    out.missing.push((oid, name.clone()));
                    continue;
                };
                out.objects += 1;
                out.commits += usize::from(kind == ObjectType::Commit);
                stack.extend(super::named_by(&self.repo, oid, kind)?);
            }
        }
        Ok(out)
    }

    /// The first line of `commit`'s message.
    pub fn subject(&self, commit: Oid) -> Result<String> {
        let c = self.repo.find_commit(commit).map_err(lib(format!("find commit {commit}")))?;
        Ok(c.summary().ok().flatten().unwrap_or_default().to_owned())
    }

    /// Deletes the ref `name` (one that is gone is fine).
    pub fn delete_ref(&self, name: &str) -> Result<()> {
        super::delete_ref(&self.repo, name)
    }

    /// Lock files left in the repository (a process killed while it updated a ref or
    /// the config), with their age in seconds.
    pub fn lock_files(&self) -> Vec<(PathBuf, u64)> {
        lock_files(self.repo.path())
    }

    /// Temporary object files left in `objects/`, with their age in seconds.
    pub fn temp_objects(&self) -> Vec<(PathBuf, u64)> {
        temp_objects(self.repo.path())
    }

    /// Removes the lock file of `branch`, left by a process that died updating it. Only
    /// for a caller that knows nobody else writes the branch now.
    pub fn remove_branch_lock(&self, branch: &str) {
        let _ = std::fs::remove_file(self.repo.path().join(format!("{}.lock", branch_ref(branch))));
    }
}

/// How long ago the file at `path` was last written (`None` when it is gone).
pub fn file_age(path: &Path) -> Option<std::time::Duration> {
    let modified = std::fs::symlink_metadata(path).and_then(|m| m.modified()).ok()?;
    std::time::SystemTime::now().duration_since(modified).ok()
}

/// `*.lock` files under `dir` (not following symlinks), with their age in seconds.
pub fn lock_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            let path = entry.path();
            if kind.is_dir() {
                // Object directories hold no locks worth a walk of thousands of files.
                if entry.file_name() != "objects" {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "lock") {
                let age = file_age(&path).map_or(0, |a| a.as_secs());
                out.push((path, age));
            }
        }
    }
    out.sort();
    out
}

/// Temporary object files in the object store of the repository at `git_dir` (an
/// object write, libgit2's or offshoot's, cut short by a kill), with their age in
/// seconds.
pub fn temp_objects(git_dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out: Vec<(PathBuf, u64)> = std::fs::read_dir(git_dir.join("objects"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("tmp_object_"))
        .map(|e| {
            let path = e.path();
            let age = file_age(&path).map_or(0, |a| a.as_secs());
            (path, age)
        })
        .collect();
    out.sort();
    out
}
