//! Merges and diffs of trees: a child's work merged into its parent's, one file's
//! texts merged line by line, and what changed between two trees as text or as files.

use std::path::Path;

use git2::build::TreeUpdateBuilder;
use git2::{FileMode, Oid, Repository};

use super::{Repo, Result, lib, without};

/// What [`Repo::merge_into`] came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merged {
    /// The other side changed nothing.
    Nothing,
    /// The merged tree and the paths it changes against ours.
    Clean { tree: Oid, paths: Vec<String> },
    /// These paths changed on both sides in ways that do not merge.
    Conflicts(Vec<String>),
}

/// The file paths that differ between two trees.
fn changed_paths(repo: &Repository, from: &git2::Tree<'_>, to: &git2::Tree<'_>) -> Result<Vec<String>> {
    let diff = repo.diff_tree_to_tree(Some(from), Some(to), None).map_err(lib("diff trees"))?;
    Ok(diff
        .deltas()
        .filter_map(|d| d.new_file().path().or(d.old_file().path()).map(|p| p.to_string_lossy().into_owned()))
        .collect())
}

impl Repo {
    /// Merges what changed from `base` to `theirs` into `ours`, all of it but the
    /// directory `keep` (always taken from `ours`): the merged tree, or the paths
    /// that conflict. Writes no commit and moves no ref.
    pub fn merge_into(&self, ours: Oid, base: Oid, theirs: Oid, keep: &str) -> Result<Merged> {
        let (ours_tree, base_tree, theirs_tree) = (self.tree_of(ours)?, self.tree_of(base)?, self.tree_of(theirs)?);
        // The three trees without `keep`, which is never merged.
        let bare = |t: &git2::Tree<'_>| -> Result<git2::Tree<'_>> {
            let id = without(&self.repo, t, keep)?;
            self.repo.find_tree(id).map_err(lib("find tree"))
        };
        let (ours_bare, base_bare, theirs_bare) = (bare(&ours_tree)?, bare(&base_tree)?, bare(&theirs_tree)?);
        if base_bare.id() == theirs_bare.id() {
            return Ok(Merged::Nothing);
        }
        let mut index =
            self.repo.merge_trees(&base_bare, &ours_bare, &theirs_bare, None).map_err(lib("merge trees"))?;
        if index.has_conflicts() {
            let mut paths: Vec<String> = index
                .conflicts()
                .map_err(lib("read conflicts"))?
                .flatten()
                .filter_map(|c| c.our.or(c.their).or(c.ancestor))
                .map(|e| String::from_utf8_lossy(&e.path).into_owned())
                .collect();
            paths.sort();
            paths.dedup();
            return Ok(Merged::Conflicts(paths));
        }
        let merged = index.write_tree_to(&self.repo).map_err(lib("write merged tree"))?;
        let merged = self.repo.find_tree(merged).map_err(lib("find merged tree"))?;
        let paths = changed_paths(&self.repo, &ours_bare, &merged)?;
        // The harness's directory stays exactly ours.
        let mut update = TreeUpdateBuilder::new();
        if let Ok(entry) = ours_tree.get_path(Path::new(keep)) {
            update.upsert(keep, entry.id(), FileMode::Tree);
        }
        let tree = update.create_updated(&self.repo, &merged).map_err(lib("keep our harness tree"))?;
        Ok(Merged::Clean { tree, paths })
    }

    /// The change from `base`'s tree to `tree` as a unified diff, or with `stat` as a
    /// summary of files and lines.
    pub fn diff_text(&self, base: Oid, tree: Oid, stat: bool) -> Result<String> {
        let from = self.tree_of(base)?.id();
        self.trees_diff_text(from, tree, stat)
    }

    /// [`Repo::diff_text`] from tree `from` to tree `tree`.
    pub fn trees_diff_text(&self, from: Oid, tree: Oid, stat: bool) -> Result<String> {
        let from = self.repo.find_tree(from).map_err(lib(format!("find tree {from}")))?;
        let to = self.repo.find_tree(tree).map_err(lib(format!("find tree {tree}")))?;
        let mut opts = git2::DiffOptions::new();
        opts.id_abbrev(12);
        let mut diff =
            self.repo.diff_tree_to_tree(Some(&from), Some(&to), Some(&mut opts)).map_err(lib("diff trees"))?;
        diff.find_similar(None).map_err(lib("find renames"))?;
        if stat {
            let stats = diff.stats().map_err(lib("diff stats"))?;
            let buf = stats.to_buf(git2::DiffStatsFormat::FULL, 80).map_err(lib("diff stats"))?;
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        let mut text = Vec::new();
        diff.print(git2::DiffFormat::Patch, |_, _, line| {
            if matches!(line.origin(), '+' | '-' | ' ') {
                text.push(line.origin() as u8);
            }
            text.extend_from_slice(line.content());
            true
        })
        .map_err(lib("print diff"))?;
        Ok(String::from_utf8_lossy(&text).into_owned())
    }

    /// The files that differ from `base`'s tree to `tree`: (path, before, after), each
    /// side a blob and whether it is executable, `None` where the file is absent.
    pub fn file_changes(&self, base: Oid, tree: Oid) -> Result<Vec<FileChange>> {
        let from = self.tree_of(base)?.id();
        self.tree_changes(from, tree)
    }

    /// [`Repo::file_changes`] from tree `from` to tree `tree`.
    pub fn tree_changes(&self, from: Oid, tree: Oid) -> Result<Vec<FileChange>> {
        let from = self.repo.find_tree(from).map_err(lib(format!("find tree {from}")))?;
        let to = self.repo.find_tree(tree).map_err(lib(format!("find tree {tree}")))?;
        let diff = self.repo.diff_tree_to_tree(Some(&from), Some(&to), None).map_err(lib("diff trees"))?;
        let side = |f: git2::DiffFile<'_>| {
            let mode = f.mode();
            (!f.id().is_zero() && matches!(mode, FileMode::Blob | FileMode::BlobExecutable))
                .then(|| (f.id(), mode == FileMode::BlobExecutable))
        };
        Ok(diff
            .deltas()
            .filter_map(|d| {
                let path = d.new_file().path().or(d.old_file().path())?.to_string_lossy().into_owned();
                Some(FileChange { path, before: side(d.old_file()), after: side(d.new_file()) })
            })
            .collect())
    }

    /// A line-level three-way merge of one file's texts: the result, or `None` when
    /// the two changes conflict.
    pub fn merge_texts(&self, base: &[u8], ours: &[u8], theirs: &[u8]) -> Result<Option<Vec<u8>>> {
        let entry = |bytes: &[u8]| -> Result<git2::IndexEntry> {
            let id = self.repo.blob(bytes).map_err(lib("write blob"))?;
            Ok(git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: 0o100644,
                uid: 0,
                gid: 0,
                file_size: bytes.len() as u32,
                id,
                flags: 0,
                flags_extended: 0,
                path: b"file".to_vec(),
            })
        };
        let (b, o, t) = (entry(base)?, entry(ours)?, entry(theirs)?);
        let merged = self.repo.merge_file_from_index(&b, &o, &t, None).map_err(lib("merge file"))?;
        Ok(merged.is_automergeable().then(|| merged.content().to_vec()))
    }
}

/// A file that differs between two trees.
#[derive(Debug, Clone)]
pub struct FileChange {
    pub path: String,
    pub before: Option<(Oid, bool)>,
    pub after: Option<(Oid, bool)>,
}
