//! Putting part of an agent's directory back as a commit has it (the harness's own
//! files), never following a link, and saying what differed.

use std::path::Path;

use git2::{ObjectType, Oid};

use super::{Tracked, remove_entry, write_file};
use crate::git::{Result, lib};

impl Tracked {
    /// Makes `prefix` (a file or directory below the root) on disk exactly what
    /// `commit` has there, never following a symlink, and says what differed.
    pub fn restore(&self, commit: Oid, prefix: &str) -> Result<Vec<Restored>> {
        let tree = self.repo.find_commit(commit).and_then(|c| c.tree()).map_err(lib(format!("tree of {commit}")))?;
        let committed: std::collections::BTreeMap<String, Oid> =
            crate::git::files_under(&self.repo, &tree, prefix)?.into_iter().collect();
        let on_disk = disk_entries(&self.root, prefix);
        let mut restored = Vec::new();
        // Entries the commit does not have, deepest first (a directory after its contents).
        for (path, kind) in on_disk.iter().rev() {
            let keep = match kind {
                Kind::Dir => committed.keys().any(|c| c.starts_with(&format!("{path}/"))),
                _ => committed.contains_key(path),
            };
            if !keep {
                remove_entry(&self.root, path)?;
                if *kind != Kind::Dir || !restored.iter().any(|r: &Restored| r.path.starts_with(&format!("{path}/"))) {
                    restored.push(Restored { path: path.clone(), difference: Difference::Extra });
                }
            }
        }
        for (path, oid) in &committed {
            let difference = match on_disk.get(path) {
                Some(Kind::File) if Oid::hash_file(ObjectType::Blob, self.root.join(path)).ok() == Some(*oid) => {
                    continue;
                }
                Some(_) => Difference::Changed,
                None => Difference::Missing,
            };
            let blob = self.repo.find_blob(*oid).map_err(lib(format!("read {path}")))?;
            write_file(&self.root, path, blob.content())?;
            restored.push(Restored { path: path.clone(), difference });
        }
        restored.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(restored)
    }
}

/// How a file on disk differed from the commit it was restored to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Difference {
    /// It had other content, or was not a plain file.
    Changed,
    /// It was gone.
    Missing,
    /// The commit has no such path; it was removed.
    Extra,
}

/// One path put back by [`Tracked::restore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    pub path: String,
    pub difference: Difference,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    /// A symlink, pipe, socket or device: never a harness file.
    Other,
}

/// Every entry at or below `root/prefix`, by path relative to `root`, without
/// following symlinks.
fn disk_entries(root: &Path, prefix: &str) -> std::collections::BTreeMap<String, Kind> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![prefix.trim_end_matches('/').to_owned()];
    while let Some(rel) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(root.join(&rel)) else { continue };
        let kind = if meta.is_dir() {
            Kind::Dir
        } else if meta.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        if kind == Kind::Dir {
            for entry in std::fs::read_dir(root.join(&rel)).into_iter().flatten().flatten() {
                stack.push(format!("{rel}/{}", entry.file_name().to_string_lossy()));
            }
        }
        out.insert(rel, kind);
    }
    out
}
