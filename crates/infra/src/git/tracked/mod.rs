//! The harness's view of an agent's directory: `repo.git` with the directory as an
//! explicit workdir and an index of its own, so each step's commit holds the files
//! exactly as they are on disk, whatever the agent's own git (a different repository,
//! reached through the directory's `.git`) did.

use std::path::{Path, PathBuf};

use git2::build::{CheckoutBuilder, TreeUpdateBuilder};
use git2::{FileMode, Index, Oid, Repository};

use std::os::unix::ffi::OsStrExt;

use super::{GitError, Result, branch_ref, cas_update, commit_tree, configure_libgit2, lib};
use crate::door::Beneath;

/// The name a directory's pointer to its own repository has; never captured.
mod restore;

pub use restore::{Difference, Restored};

const DOT_GIT: &str = ".git";
/// The files libgit2 reads rules from in each directory it walks.
const RULE_FILES: [&str; 2] = [".gitignore", ".gitattributes"];

/// `name` in the directory `dir` (relative; empty for the root).
fn joined(dir: &str, name: &str) -> String {
    if dir.is_empty() { name.to_owned() } else { format!("{dir}/{name}") }
}

/// An agent's directory as `repo.git` tracks it.
///
/// `.offshoot/` belongs to the harness: its files go into commits only through
/// [`Tracked::commit`] (transcript entries, and a few other harness files), never
/// through the scan, and it is kept out of the index. The transcript directory's tree
/// is extended from the parent's raw tree bytes (no parse, no sort, no index). The
/// index holds only work products and serves as the scan's stat cache; it lives in
/// memory while a driver holds the lock and is written to `index/<id>` by
/// [`Tracked::save_index`].
pub struct Tracked {
    repo: Repository,
    root: PathBuf,
    /// The harness's directory, relative to the root (`.offshoot`).
    harness: String,
    /// The transcript directory, relative to the root (`.offshoot/messages`).
    transcript: String,
    /// The raw bytes of the transcript tree last written, by its id.
    transcript_tree: std::cell::RefCell<Option<(Oid, Vec<u8>)>>,
}

/// Work products staged for a commit, and what was left out.
#[derive(Debug, Default)]
pub struct Staged {
    /// The work products' tree, when anything changed.
    tree: Option<Oid>,
    /// Files left out of the commit.
    pub skipped: Vec<Skipped>,
}

/// A work product left out of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: String,
    pub why: Why,
}

/// Why a work product was left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// Over the size limit: its size.
    Size(u64),
    /// Git refuses the path: what it said.
    Refused(String),
}

/// What a commit scans of the directory for changed work products.
#[derive(Debug, Clone, Copy)]
pub enum Scan<'a> {
    /// Every top-level entry.
    All,
    /// Only these paths (files or directories, relative to the root): the caller knows
    /// nothing else changed since the index was last brought up to date.
    Paths(&'a [String]),
}

/// What one commit adds: transcript entries (file names in the transcript
/// directory) and other harness files (paths under the harness directory).
#[derive(Default)]
pub struct Additions<'a> {
    pub entries: &'a [(&'a str, &'a [u8])],
    pub harness: &'a [(&'a str, &'a [u8])],
    /// Harness files to remove (paths under the harness directory).
    pub removed: &'a [&'a str],
}

impl Tracked {
    /// Opens `repo` (bare) with `root` as its workdir and `index` as its index file
    /// (created on the first save). `transcript` lies inside `harness`.
    pub fn open(repo: &Path, root: &Path, index: &Path, harness: &str, transcript: &str) -> Result<Tracked> {
        configure_libgit2();
        let opened = Repository::open_bare(repo).map_err(lib(format!("open {}", repo.display())))?;
        opened.set_workdir(root, false).map_err(lib(format!("use {} as the workdir", root.display())))?;
        if let Some(dir) = index.parent() {
            std::fs::create_dir_all(dir).map_err(|source| GitError::Io { path: dir.to_owned(), source })?;
        }
        let mut idx = Index::open(index).map_err(lib(format!("open index {}", index.display())))?;
        opened.set_index(&mut idx).map_err(lib("attach the index"))?;
        Ok(Tracked {
            repo: opened,
            root: root.to_owned(),
            harness: harness.trim_end_matches('/').to_owned(),
            transcript: transcript.trim_end_matches('/').to_owned(),
            transcript_tree: Default::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Adds `rule` (a line of `.gitignore`) to what this handle's scans leave out,
    /// whatever the directory's own ignore files say.
    pub fn ignore(&self, rule: &str) {
        let _ = self.repo.add_ignore_rule(rule);
    }

    /// Writes every file of `commit` into the directory (overwriting what is there;
    /// nothing else is removed) and makes the index match it.
    pub fn checkout(&self, commit: Oid) -> Result<()> {
        let tree = self.repo.find_commit(commit).and_then(|c| c.tree()).map_err(lib(format!("tree of {commit}")))?;
        let mut opts = CheckoutBuilder::new();
        opts.force().update_index(true);
        self.repo.checkout_tree(tree.as_object(), Some(&mut opts)).map_err(lib(format!("check out {commit}")))?;
        self.reset_index(commit)
    }

    /// Writes `paths` as `commit` has them (removing those it has not), and their
    /// index entries with them: for a commit made outside the directory (a child's
    /// work merged in). Through the door: a link the agent left where the commit has
    /// a directory or file (one its `.gitignore` hides, say) is replaced, never
    /// followed.
    pub fn checkout_paths(&self, commit: Oid, paths: &[String]) -> Result<()> {
        if paths.is_empty() {
            return Ok(());
        }
        let tree = self.repo.find_commit(commit).and_then(|c| c.tree()).map_err(lib(format!("tree of {commit}")))?;
        let door = Beneath::open_kept(&self.root)?;
        let mut index = self.repo.index().map_err(lib("open index"))?;
        for path in paths {
            let rel = Path::new(path);
            let Ok(entry) = tree.get_path(rel) else {
                door.remove_all(rel)?;
                index.remove_path(rel).map_err(lib(format!("unstage {path}")))?;
                continue;
            };
            let mode = entry.filemode();
            let blob = match entry.to_object(&self.repo).map(|o| o.into_blob()) {
                Ok(Ok(blob)) => blob,
                // A submodule's commit, or a directory: nothing to write as a file.
                _ => continue,
            };
            if mode == i32::from(FileMode::Link) {
                door.symlink(rel, std::ffi::OsStr::from_bytes(blob.content()))?;
            } else {
                let exec = mode == i32::from(FileMode::BlobExecutable);
                door.write(rel, blob.content(), Some(if exec { 0o755 } else { 0o644 }), true)?;
            }
            let full = self.root.join(path);
            let meta = std::fs::symlink_metadata(&full).map_err(|source| GitError::Io { path: full, source })?;
            let mut stat = stat_entry(path, entry.id(), &meta);
            stat.mode = mode as u32;
            index.add(&stat).map_err(lib(format!("stage {path}")))?;
        }
        Ok(())
    }

    /// Brings the harness's files on disk in line with a commit made outside
    /// [`Tracked::commit`]: `removed` leave, `written` are written. Nothing is followed
    /// through a symlink: a path with one on the way is left (the guard puts the
    /// directory back before the next call).
    pub fn put_harness_files(&self, removed: &[String], written: &[(String, Vec<u8>)]) -> Result<()> {
        for rel in removed {
            let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
            let mut dir = self.root.clone();
            let real = parts.split_last().is_some_and(|(_, ancestors)| {
                ancestors.iter().all(|p| {
                    dir.push(p);
                    std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir())
                })
            });
            if real {
                remove_entry(&self.root, rel)?;
            }
        }
        for (rel, bytes) in written {
            write_file(&self.root, rel, bytes)?;
        }
        Ok(())
    }

    /// Removes every `.gitignore` and `.gitattributes` the coming `scan` would have
    /// libgit2 read that is not a regular file (a FIFO would hold the driver, a link
    /// to `/dev/zero` fill its memory; the agent made them), and returns their paths.
    /// Those of each directory above a scanned path are looked at through the door;
    /// below, every directory the scan walks is listed (top first, so the rules that
    /// say what is ignored are safe to read by the time a directory is asked about).
    /// An ignored directory with nothing tracked in it is not walked, by libgit2 nor
    /// here (a `node_modules/` is not listed at every call).
    pub fn clear_rule_files(&self, scan: Scan<'_>) -> Result<Vec<String>> {
        let door = Beneath::open_kept(&self.root)?;
        let mut cleared = Vec::new();
        let mut walk: Vec<String> = Vec::new();
        let mut above: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        match scan {
            Scan::All => walk.push(String::new()),
            Scan::Paths(paths) => {
                for path in paths.iter().filter(|p| self.is_work(p)) {
                    let mut dir = String::new();
                    above.insert(String::new());
                    for part in path.split('/').filter(|p| !p.is_empty()) {
                        if !dir.is_empty() {
                            dir.push('/');
                        }
                        dir.push_str(part);
                        above.insert(dir.clone());
                    }
                    walk.push(path.clone());
                }
            }
        }
        // (A parent sorts before its children.)
        for dir in &above {
            for name in RULE_FILES {
                let rel = joined(dir, name);
                // A link on the way (`Err`): libgit2 does not walk into the path either.
                if let Ok(Some(kind)) = door.kind(Path::new(&rel))
                    && !matches!(kind, crate::door::Kind::File { .. })
                {
                    door.remove_all(Path::new(&rel))?;
                    cleared.push(rel);
                }
            }
        }
        let index = self.repo.index().map_err(lib("open index"))?;
        // Each directory below the walked paths, links not followed.
        while let Some(rel) = walk.pop() {
            let full = if rel.is_empty() { self.root.clone() } else { self.root.join(&rel) };
            if !std::fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            let mut dirs = Vec::new();
            for entry in std::fs::read_dir(&full).into_iter().flatten().flatten() {
                let Ok(kind) = entry.file_type() else { continue };
                let name = entry.file_name().to_string_lossy().into_owned();
                let child = joined(&rel, &name);
                if RULE_FILES.contains(&name.as_str()) && !kind.is_file() {
                    door.remove_all(Path::new(&child))?;
                    cleared.push(child);
                } else if kind.is_dir() && self.is_work(&child) {
                    dirs.push(child);
                }
            }
            for dir in dirs {
                let ignored = self.repo.is_path_ignored(&dir).unwrap_or(false)
                    && index.find_prefix(format!("{dir}/").as_str()).is_err();
                if !ignored {
                    walk.push(dir);
                }
            }
        }
        Ok(cleared)
    }

    /// Makes the in-memory index equal to `commit`'s tree less the harness's
    /// directory, keeping the stat data of entries that did not change.
    pub fn reset_index(&self, commit: Oid) -> Result<()> {
        let tree = self.repo.find_commit(commit).and_then(|c| c.tree()).map_err(lib(format!("tree of {commit}")))?;
        let mut index = self.repo.index().map_err(lib("open index"))?;
        index.read_tree(&tree).map_err(lib("read tree into index"))?;
        index.remove_dir(Path::new(&self.harness), 0).map_err(lib("unstage the harness's directory"))?;
        Ok(())
    }

    /// Gives each file of the directory whose content is that of the same file in
    /// `from` (the user's checkout) that file's modification time, and the index the
    /// new stat data: build tools that compare times (cargo, make) then see the
    /// sources as old as the outputs copied from there, and a file that differs keeps
    /// the time it was written, so what depends on it is built again. Returns how
    /// many files took their time.
    pub fn take_times(&self, from: &Path) -> Result<usize> {
        let door = Beneath::open_kept(&self.root)?;
        let mut index = self.repo.index().map_err(lib("open index"))?;
        let entries: Vec<git2::IndexEntry> =
            index.iter().filter(|e| e.mode == 0o100644 || e.mode == 0o100755).collect();
        let mut taken = 0;
        for entry in entries {
            let Ok(path) = std::str::from_utf8(&entry.path) else { continue };
            let theirs = from.join(path);
            let Ok(meta) = std::fs::symlink_metadata(&theirs) else { continue };
            if !meta.is_file() || meta.len() != u64::from(entry.file_size) {
                continue;
            }
            if Oid::hash_file(git2::ObjectType::Blob, &theirs).ok() != Some(entry.id) {
                continue;
            }
            let (Ok(file), Ok(modified)) = (door.open_file(Path::new(path)), meta.modified()) else { continue };
            if file.set_modified(modified).is_err() {
                continue;
            }
            let Ok(ours) = file.metadata() else { continue };
            let mut fresh = stat_entry(path, entry.id, &ours);
            fresh.mode = entry.mode;
            index.add(&fresh).map_err(lib(format!("record {path}")))?;
            taken += 1;
        }
        Ok(taken)
    }

    /// Writes the index to its file: the stat cache the next driver starts from.
    /// The harness's files of `tip` go in too, with their stat data as on disk (the
    /// guard has just made them so), so the next driver can tell which of them
    /// changed meanwhile without hashing them all ([`Tracked::harness_changes`]).
    pub fn save_index(&self, tip: Oid) -> Result<()> {
        let mut index = self.repo.index().map_err(lib("open index"))?;
        let tree = self.repo.find_commit(tip).and_then(|c| c.tree()).map_err(lib(format!("tree of {tip}")))?;
        for (path, oid) in super::files_under(&self.repo, &tree, &self.harness)? {
            let Ok(meta) = std::fs::symlink_metadata(self.root.join(&path)) else { continue };
            if meta.is_file() {
                index.add(&stat_entry(&path, oid, &meta)).map_err(lib(format!("record {path}")))?;
            }
        }
        index.write().map_err(lib("write index"))?;
        index.remove_dir(Path::new(&self.harness), 0).map_err(lib("unstage the harness's directory"))
    }

    /// The harness's files on disk that may differ from `commit`'s, told by the stat
    /// data the saved index holds for them; `None` when the index does not describe
    /// exactly `commit`'s harness files (everything must then be checked).
    pub fn harness_changes(&self, commit: Oid) -> Result<Option<Vec<String>>> {
        let mut index = self.repo.index().map_err(lib("open index"))?;
        let prefix = format!("{}/", self.harness);
        if !index.iter().any(|e| e.path.starts_with(prefix.as_bytes())) {
            return Ok(None);
        }
        let described = index.write_tree().map_err(lib("write tree"))?;
        let described = self.repo.find_tree(described).map_err(lib("find tree"))?;
        let tree = self.repo.find_commit(commit).and_then(|c| c.tree()).map_err(lib(format!("tree of {commit}")))?;
        let subtree = |t: &git2::Tree<'_>| t.get_path(Path::new(&self.harness)).ok().map(|e| e.id());
        if subtree(&described) != subtree(&tree) {
            return Ok(None);
        }
        let mut opts = git2::DiffOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .disable_pathspec_match(true)
            .include_typechange(true)
            .pathspec(&self.harness);
        let diff = self.repo.diff_index_to_workdir(Some(&index), Some(&mut opts)).map_err(lib("scan .offshoot"))?;
        let changed = diff
            .deltas()
            .filter_map(|d| d.new_file().path().or(d.old_file().path()).map(|p| p.to_string_lossy().into_owned()))
            .collect();
        Ok(Some(changed))
    }

    /// Stages the work products `scan` covers into the in-memory index, leaving out
    /// files over `max_file_bytes` (they stay on disk, out of history; an earlier
    /// version of such a file leaves the index too), for [`Tracked::commit`].
    pub fn stage(&self, scan: Scan<'_>, max_file_bytes: u64) -> Result<Staged> {
        let mut staged = Staged::default();
        let mut index = self.repo.index().map_err(lib("open index"))?;
        let roots = match scan {
            Scan::Paths(paths) => paths.iter().filter(|p| self.is_work(p)).cloned().collect(),
            Scan::All => self.scan_roots(&index),
        };
        if roots.is_empty() {
            return Ok(staged);
        }
        let mut changed = self.stage_changes(&mut index, &roots, max_file_bytes, &mut staged.skipped);
        if changed.is_err() {
            // A directory or file the agent took its owner's access from (`chmod 000`)
            // stops the scan: the owner's access is given back, and it runs again.
            grant_owner_access(&self.root, &self.harness);
            staged.skipped.clear();
            changed = self.stage_changes(&mut index, &roots, max_file_bytes, &mut staged.skipped);
        }
        if changed? {
            staged.tree = Some(index.write_tree().map_err(lib("write tree"))?);
        }
        Ok(staged)
    }

    /// Commits the harness's additions and what [`Tracked::stage`] staged (nothing
    /// staged, or no scan: the parent's work products) as one commit on `branch` after
    /// `parent`.
    pub fn commit(
        &self,
        branch: &str,
        parent: Oid,
        add: &Additions,
        staged: Option<&Staged>,
        message: &str,
    ) -> Result<Oid> {
        let base = self.repo.find_commit(parent).and_then(|c| c.tree()).map_err(lib(format!("tree of {parent}")))?;
        let harness = self.harness_tree(&base, add)?;
        // Unchanged work products: the parent's tree is the index's tree.
        let work = match staged.and_then(|s| s.tree) {
            Some(id) => self.repo.find_tree(id).map_err(lib("find tree"))?,
            None => base,
        };
        let mut update = TreeUpdateBuilder::new();
        update.upsert(self.harness.as_str(), harness, FileMode::Tree);
        let tree = update.create_updated(&self.repo, &work).map_err(lib("edit tree"))?;
        let commit = commit_tree(&self.repo, tree, &[parent], message)?;
        cas_update(&self.repo, &branch_ref(branch), commit, parent, message)?;
        Ok(commit)
    }

    /// The harness's directory as `base` has it, with `add` written in.
    fn harness_tree(&self, base: &git2::Tree<'_>, add: &Additions) -> Result<Oid> {
        let current = base.get_path(Path::new(&self.harness)).map_err(lib(format!("read {}", self.harness)))?;
        let current = self.repo.find_tree(current.id()).map_err(lib(format!("read {}", self.harness)))?;
        let transcript_rel = self.transcript.strip_prefix(&format!("{}/", self.harness)).unwrap_or(&self.transcript);
        let mut update = TreeUpdateBuilder::new();
        if !add.entries.is_empty() {
            let transcript = self.extend_transcript(&current, transcript_rel, add.entries)?;
            update.upsert(transcript_rel, transcript, FileMode::Tree);
        }
        let prefix = format!("{}/", self.harness);
        for (path, bytes) in add.harness {
            let Some(rel) = path.strip_prefix(&prefix).filter(|r| !r.is_empty()) else {
                return Err(GitError::Outside { path: (*path).to_owned(), dir: self.harness.clone() });
            };
            write_file(&self.root, path, bytes)?;
            let blob = self.repo.blob(bytes).map_err(lib(format!("write blob {path}")))?;
            update.upsert(rel, blob, FileMode::Blob);
        }
        for path in add.removed {
            let Some(rel) = path.strip_prefix(&prefix).filter(|r| !r.is_empty()) else {
                return Err(GitError::Outside { path: (*path).to_owned(), dir: self.harness.clone() });
            };
            update.remove(rel);
        }
        if !add.removed.is_empty() {
            let removed: Vec<String> = add.removed.iter().map(|p| (*p).to_owned()).collect();
            self.put_harness_files(&removed, &[])?;
        }
        update.create_updated(&self.repo, &current).map_err(lib("edit the harness's tree"))
    }

    /// Writes transcript `entries` to disk and returns the transcript tree with them
    /// added, extended from the raw bytes of the current one.
    fn extend_transcript(&self, harness: &git2::Tree<'_>, rel: &str, entries: &[(&str, &[u8])]) -> Result<Oid> {
        let mut added = Vec::with_capacity(entries.len());
        for (name, bytes) in entries {
            if name.is_empty() || name.contains('/') {
                return Err(GitError::Outside { path: (*name).to_owned(), dir: self.transcript.clone() });
            }
            write_file(&self.root, &format!("{}/{name}", self.transcript), bytes)?;
            let blob = self.repo.blob(bytes).map_err(lib(format!("write blob {name}")))?;
            added.push((name.as_bytes(), blob));
        }
        let current = harness.get_path(Path::new(rel)).ok().map(|e| e.id());
        let mut cache = self.transcript_tree.borrow_mut();
        let raw = match (current, cache.take()) {
            (Some(id), Some((cached, bytes))) if cached == id => bytes,
            (Some(id), _) => {
                let odb = self.repo.odb().map_err(lib("open odb"))?;
                let object = odb.read(id).map_err(lib(format!("read tree {id}")))?;
                object.data().to_vec()
            }
            (None, _) => Vec::new(),
        };
        let bytes = raw_tree_with(&raw, &mut added).ok_or_else(|| GitError::Outside {
            path: self.transcript.clone(),
            dir: "a directory of files only".into(),
        })?;
        // It grows with the conversation and is written twice a step (see `loose`).
        let id = super::loose::write_stored(&self.repo.path().join("objects"), "tree", &bytes)?;
        *cache = Some((id, bytes));
        Ok(id)
    }

    /// Stages every addition, change and deletion below `roots` (taken as literal
    /// paths, so libgit2 walks only those subtrees).
    fn stage_changes(
        &self,
        index: &mut git2::Index,
        roots: &[String],
        max_bytes: u64,
        skipped: &mut Vec<Skipped>,
    ) -> Result<bool> {
        let mut opts = git2::DiffOptions::new();
        opts.include_untracked(true).recurse_untracked_dirs(true).disable_pathspec_match(true).include_typechange(true);
        for r in roots {
            opts.pathspec(r);
        }
        let diff = self.repo.diff_index_to_workdir(Some(index), Some(&mut opts)).map_err(lib("scan worktree"))?;
        let mut changed = Vec::new();
        for delta in diff.deltas() {
            let Some(path) = delta.new_file().path().or(delta.old_file().path()) else { continue };
            changed.push((path.to_owned(), delta.status() == git2::Delta::Deleted));
        }
        let any = !changed.is_empty();
        for (path, deleted) in changed {
            let size = std::fs::symlink_metadata(self.root.join(&path)).map(|m| m.len()).unwrap_or(0);
            if deleted || size > max_bytes {
                index.remove_path(&path).map_err(lib(format!("unstage {}", path.display())))?;
                if !deleted {
                    skipped.push(Skipped { path: path.to_string_lossy().into_owned(), why: Why::Size(size) });
                }
            } else if let Err(e) = index.add_path(&path) {
                // A path git refuses (a `.gitmodules` that is a link, say) stays out of
                // history; it must not stop every later commit of the agent.
                let _ = index.remove_path(&path);
                skipped.push(Skipped {
                    path: path.to_string_lossy().into_owned(),
                    why: Why::Refused(e.message().to_owned()),
                });
            }
        }
        Ok(any)
    }

    /// Whether `path` (relative to the root) is a work product's: not the harness's
    /// directory or `.git`, nor anything under them.
    fn is_work(&self, path: &str) -> bool {
        let top = path.split('/').next().unwrap_or(path);
        !path.is_empty() && top != self.harness && top != ".git"
    }

    /// The paths to scan: every top-level entry on disk or in the index but the
    /// harness's directory and `.git`.
    fn scan_roots(&self, index: &git2::Index) -> Vec<String> {
        let mut names = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir(&self.root).into_iter().flatten().flatten() {
            names.insert(entry.file_name().to_string_lossy().into_owned());
        }
        for e in index.iter() {
            let path = String::from_utf8_lossy(&e.path).into_owned();
            names.insert(path.split('/').next().unwrap_or(&path).to_owned());
        }
        names.into_iter().filter(|n| *n != self.harness && n != DOT_GIT).collect()
    }
}

/// An index entry for `path` holding `oid`, with `meta`'s stat data.
fn stat_entry(path: &str, oid: Oid, meta: &std::fs::Metadata) -> git2::IndexEntry {
    use std::os::unix::fs::MetadataExt;
    let time = |secs: i64, nanos: i64| git2::IndexTime::new(secs as i32, nanos as u32);
    git2::IndexEntry {
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        dev: meta.dev() as u32,
        ino: meta.ino() as u32,
        mode: 0o100644,
        uid: meta.uid(),
        gid: meta.gid(),
        file_size: meta.size() as u32,
        id: oid,
        flags: (path.len().min(0xfff)) as u16,
        flags_extended: 0,
        path: path.as_bytes().to_vec(),
    }
}

/// A raw tree (git's binary format) with blob entries `added` inserted in git's
/// order, replacing entries of the same name; `None` if the tree holds anything but
/// plain files (whose order rules differ).
fn raw_tree_with(raw: &[u8], added: &mut [(&[u8], Oid)]) -> Option<Vec<u8>> {
    added.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::with_capacity(raw.len() + added.len() * 64);
    let mut next = added.iter().peekable();
    let mut at = 0;
    while at < raw.len() {
        let space = at + raw[at..].iter().position(|&b| b == b' ')?;
        let nul = space + raw[space..].iter().position(|&b| b == 0)?;
        let end = nul + 21;
        if end > raw.len() || &raw[at..space] != b"100644" && &raw[at..space] != b"100755" {
            return None;
        }
        let name = &raw[space + 1..nul];
        while let Some((n, id)) = next.next_if(|(new, _)| *new < name) {
            push_blob_entry(&mut out, n, *id);
        }
        match next.next_if(|(new, _)| *new == name) {
            Some((n, id)) => push_blob_entry(&mut out, n, *id),
            None => out.extend_from_slice(&raw[at..end]),
        }
        at = end;
    }
    for (n, id) in next {
        push_blob_entry(&mut out, n, *id);
    }
    Some(out)
}

fn push_blob_entry(out: &mut Vec<u8>, name: &[u8], id: Oid) {
    out.extend_from_slice(b"100644 ");
    out.extend_from_slice(name);
    out.push(0);
    out.extend_from_slice(id.as_bytes());
}

/// Writes `bytes` to `root/rel` through the door: no symlink below `root` is ever
/// followed; a link or file standing where a directory should be, or whatever stands
/// at the path, is replaced. (An agent can plant a symlink where the harness is about
/// to write.)
pub(super) fn write_file(root: &Path, rel: &str, bytes: &[u8]) -> Result<()> {
    Ok(Beneath::open_kept(root)?.write(Path::new(rel), bytes, None, true)?)
}

/// Gives the owner read, write and (for directories) search access back to
/// everything below `root` but `skip` and `.git`, never following a link.
fn grant_owner_access(root: &Path, skip: &str) {
    use std::os::unix::fs::PermissionsExt;
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&dir) else { continue };
        let mode = meta.permissions().mode();
        if mode & 0o700 != 0o700 {
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode | 0o700));
        }
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let top = dir == root && (entry.file_name() == skip || entry.file_name() == DOT_GIT);
            match entry.file_type() {
                Ok(t) if t.is_dir() && !top => stack.push(path),
                Ok(t) if t.is_file() => {
                    if let Ok(m) = entry.metadata()
                        && m.permissions().mode() & 0o600 != 0o600
                    {
                        let _ = std::fs::set_permissions(
                            &path,
                            std::fs::Permissions::from_mode(m.permissions().mode() | 0o600),
                        );
                    }
                }
                _ => {}
            }
        }
    }
}

/// Removes whatever stands at `root/rel` (a directory with its contents; a symlink
/// itself, never its target), through the door.
fn remove_entry(root: &Path, rel: &str) -> Result<()> {
    Ok(Beneath::open_kept(root)?.remove_all(Path::new(rel))?)
}

#[cfg(test)]
mod tests;
