//! The one door to the repository: libgit2 for reads at a commit, tree edits,
//! per-step commits of a worktree, worktree creation and compare-and-swap ref updates.
//! Callers speak of branches, paths and commits, never of argv.

use std::path::{Path, PathBuf};

use git2::{
    FileMode, ObjectType, Oid, Repository, RepositoryInitOptions, Signature, TreeWalkMode, TreeWalkResult,
    WorktreeAddOptions, build::TreeUpdateBuilder,
};

/// A commit id, printed as 40 hex digits.
pub type CommitId = Oid;

/// The identity every harness commit is made with (never the user's git config).
const AUTHOR_NAME: &str = "offshoot";
const AUTHOR_EMAIL: &str = "offshoot@localhost";

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("git: {what}: {source}")]
    Lib { what: String, source: git2::Error },
    #[error("branch `{branch}` moved while we wrote (expected {expected}, found {found})")]
    Raced { branch: String, expected: String, found: String },
    #[error("branch `{branch}` already exists")]
    BranchExists { branch: String },
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{path}` is not in {dir}")]
    Outside { path: String, dir: String },
}

type Result<T> = std::result::Result<T, GitError>;

fn lib(what: impl Into<String>) -> impl FnOnce(git2::Error) -> GitError {
    let what = what.into();
    move |source| GitError::Lib { what, source }
}

/// One change to a tree: write a file's bytes, or remove a path (file or directory).
#[derive(Debug, Clone)]
pub enum TreeEdit {
    Write { path: String, bytes: Vec<u8> },
    Remove { path: String },
}

/// One entry of a directory in a commit's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub oid: Oid,
    pub is_dir: bool,
}

/// The workspace's bare repository.
pub struct Repo {
    repo: Repository,
}

fn branch_ref(branch: &str) -> String {
    format!("refs/heads/{branch}")
}

/// Sets libgit2's process-wide options once, before any repository is opened:
/// - strict object creation off: it re-reads every entry of each tree being written
///   to check it exists; our trees only name objects we just wrote or read, and the
///   check made each commit's cost grow with the transcript's length;
/// - no system, global or XDG git config: the harness never depends on the user's git
///   settings (identity, filters, autocrlf), and libgit2 stops re-checking those files
///   on every operation.
#[expect(unsafe_code, reason = "git2 marks search-path changes unsafe: they race other libgit2 calls")]
fn configure_libgit2() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        git2::opts::strict_object_creation(false);
        for level in [git2::ConfigLevel::System, git2::ConfigLevel::Global, git2::ConfigLevel::XDG] {
            // SAFETY: runs once, inside call_once, before this process opens any
            // repository, so no other libgit2 call can race it.
            let _ = unsafe { git2::opts::set_search_path(level, "") };
        }
    });
}

/// The harness's signature at the current time, in UTC (no time-zone lookups).
fn signature() -> Result<Signature<'static>> {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let when = git2::Time::new(i64::try_from(secs).unwrap_or(i64::MAX), 0);
    Signature::new(AUTHOR_NAME, AUTHOR_EMAIL, &when).map_err(lib("make signature"))
}

fn cas_update(repo: &Repository, refname: &str, new: Oid, expected: Oid, msg: &str) -> Result<()> {
    repo.reference_matching(refname, new, true, expected, msg).map_err(|source| {
        let found = repo.refname_to_id(refname).map(|id| id.to_string()).unwrap_or_else(|_| "nothing".into());
        if found != expected.to_string() {
            GitError::Raced { branch: refname.to_owned(), expected: expected.to_string(), found }
        } else {
            GitError::Lib { what: format!("update {refname}"), source }
        }
    })?;
    Ok(())
}

fn commit_tree(repo: &Repository, tree: Oid, parents: &[Oid], message: &str) -> Result<Oid> {
    let sig = signature()?;
    let tree = repo.find_tree(tree).map_err(lib("find tree"))?;
    let parents = parents
        .iter()
        .map(|p| repo.find_commit(*p).map_err(lib(format!("find commit {p}"))))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&git2::Commit<'_>> = parents.iter().collect();
    repo.commit(None, &sig, &sig, message, &tree, &refs).map_err(lib("write commit"))
}

impl Repo {
    /// Creates a new bare repository at `path`.
    pub fn init(path: &Path) -> Result<Repo> {
        configure_libgit2();
        let mut opts = RepositoryInitOptions::new();
        opts.bare(true).mkpath(true).initial_head("config/default");
        let repo = Repository::init_opts(path, &opts).map_err(lib(format!("init {}", path.display())))?;
        // History is the commits themselves (append-only, moved by compare-and-swap);
        // reflogs in every worktree would double each ref update's writes.
        let mut config = repo.config().map_err(lib("open repository config"))?;
        config.set_bool("core.logAllRefUpdates", false).map_err(lib("configure reflogs"))?;
        Ok(Repo { repo })
    }

    pub fn open(path: &Path) -> Result<Repo> {
        configure_libgit2();
        let repo = Repository::open_bare(path).map_err(lib(format!("open {}", path.display())))?;
        Ok(Repo { repo })
    }

    /// The commit a revision names (`agents/x`, a sha, `agents/x~3`), if any.
    pub fn resolve_commit(&self, spec: &str) -> Option<Oid> {
        let object = self.repo.revparse_single(spec).ok()?;
        object.peel_to_commit().ok().map(|c| c.id())
    }

    /// The tip of `refs/heads/<branch>`, if the branch exists.
    pub fn branch_tip(&self, branch: &str) -> Result<Option<Oid>> {
        match self.repo.refname_to_id(&branch_ref(branch)) {
            Ok(id) => Ok(Some(id)),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(source) => Err(GitError::Lib { what: format!("read branch {branch}"), source }),
        }
    }

    /// Branches under `prefix` (e.g. `agents/`), with their tips.
    pub fn branches(&self, prefix: &str) -> Result<Vec<(String, Oid)>> {
        let glob = format!("refs/heads/{prefix}*");
        let refs = self.repo.references_glob(&glob).map_err(lib("list branches"))?;
        let mut out = Vec::new();
        for r in refs {
            let r = r.map_err(lib("read branch"))?;
            if let (Ok(name), Some(id)) = (r.name(), r.target()) {
                out.push((name.trim_start_matches("refs/heads/").to_owned(), id));
            }
        }
        out.sort();
        Ok(out)
    }

    /// Creates `refs/heads/<branch>` at `commit`; refuses if it exists.
    pub fn create_branch(&self, branch: &str, commit: Oid, msg: &str) -> Result<()> {
        let name = branch_ref(branch);
        if self.repo.refname_to_id(&name).is_ok() {
            return Err(GitError::BranchExists { branch: branch.to_owned() });
        }
        self.repo.reference(&name, commit, false, msg).map_err(lib(format!("create {name}")))?;
        Ok(())
    }

    /// Moves a branch from `expected` to `new`, failing if it is elsewhere.
    pub fn move_branch(&self, branch: &str, new: Oid, expected: Oid, msg: &str) -> Result<()> {
        cas_update(&self.repo, &branch_ref(branch), new, expected, msg)
    }

    /// The content of the mark `refs/offshoot/<kind>/<id>`, if it is set.
    pub fn mark(&self, kind: &str, id: &str) -> Result<Option<Vec<u8>>> {
        let name = format!("refs/offshoot/{kind}/{id}");
        match self.repo.refname_to_id(&name) {
            Ok(oid) => Ok(Some(self.read_blob(oid)?)),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(source) => Err(GitError::Lib { what: format!("read {name}"), source }),
        }
    }

    /// Sets the mark `refs/offshoot/<kind>/<id>` to a blob of `content`.
    pub fn set_mark(&self, kind: &str, id: &str, content: &[u8]) -> Result<()> {
        let name = format!("refs/offshoot/{kind}/{id}");
        let blob = self.repo.blob(content).map_err(lib(format!("write {name}")))?;
        self.repo.reference(&name, blob, true, "mark").map_err(lib(format!("set {name}")))?;
        Ok(())
    }

    pub fn delete_marks(&self, id: &str) -> Result<()> {
        let refs = self.repo.references_glob(&format!("refs/offshoot/*/{id}")).map_err(lib("list marks"))?;
        let names: Vec<String> = refs.flatten().filter_map(|r| r.name().ok().map(str::to_owned)).collect();
        for name in names {
            if let Ok(mut r) = self.repo.find_reference(&name) {
                r.delete().map_err(lib(format!("delete {name}")))?;
            }
        }
        Ok(())
    }

    pub fn delete_branch(&self, branch: &str) -> Result<()> {
        let name = branch_ref(branch);
        match self.repo.find_reference(&name) {
            Ok(mut r) => r.delete().map_err(lib(format!("delete {name}"))),
            Err(_) => Ok(()),
        }
    }

    /// The bytes of the file at `path` in `commit`, or `None` if there is no such file.
    pub fn read_file(&self, commit: Oid, path: &str) -> Result<Option<Vec<u8>>> {
        let tree = self.tree_of(commit)?;
        let entry = match tree.get_path(Path::new(path)) {
            Ok(e) => e,
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
            Err(source) => {
                return Err(GitError::Lib { what: format!("read {path}"), source });
            }
        };
        if entry.kind() != Some(ObjectType::Blob) {
            return Ok(None);
        }
        self.read_blob(entry.id()).map(Some)
    }

    pub fn read_blob(&self, oid: Oid) -> Result<Vec<u8>> {
        let blob = self.repo.find_blob(oid).map_err(lib(format!("read blob {oid}")))?;
        Ok(blob.content().to_vec())
    }

    /// The entries of directory `dir` in `commit` (empty if it does not exist).
    pub fn list_dir(&self, commit: Oid, dir: &str) -> Result<Vec<DirEntry>> {
        let tree = self.tree_of(commit)?;
        let sub = if dir.is_empty() {
            tree
        } else {
            match tree.get_path(Path::new(dir)) {
                Ok(e) if e.kind() == Some(ObjectType::Tree) => {
                    self.repo.find_tree(e.id()).map_err(lib(format!("read {dir}")))?
                }
                _ => return Ok(Vec::new()),
            }
        };
        Ok(sub
            .iter()
            .map(|e| DirEntry {
                name: e.name().unwrap_or_default().to_owned(),
                oid: e.id(),
                is_dir: e.kind() == Some(ObjectType::Tree),
            })
            .collect())
    }

    /// Every file path in `commit` at or below `prefix` ("" for all), with its blob
    /// id, in tree order.
    pub fn list_files(&self, commit: Oid, prefix: &str) -> Result<Vec<(String, Oid)>> {
        let tree = self.tree_of(commit)?;
        let prefix = prefix.trim_end_matches('/');
        let (tree, root) = if prefix.is_empty() {
            (tree, String::new())
        } else {
            match tree.get_path(Path::new(prefix)) {
                Ok(e) if e.kind() == Some(ObjectType::Tree) => {
                    (self.repo.find_tree(e.id()).map_err(lib(format!("read {prefix}")))?, format!("{prefix}/"))
                }
                Ok(e) if e.kind() == Some(ObjectType::Blob) => {
                    return Ok(vec![(prefix.to_owned(), e.id())]);
                }
                _ => return Ok(Vec::new()),
            }
        };
        let mut out = Vec::new();
        tree.walk(TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() == Some(ObjectType::Blob) {
                out.push((format!("{root}{dir}{}", entry.name().unwrap_or_default()), entry.id()));
            }
            TreeWalkResult::Ok
        })
        .map_err(lib("walk tree"))?;
        Ok(out)
    }

    /// Writes a commit whose tree is `base`'s tree (or empty) with `edits` applied.
    /// Moves no ref.
    pub fn commit_edits(&self, parents: &[Oid], base: Option<Oid>, edits: &[TreeEdit], message: &str) -> Result<Oid> {
        let Some(base) = base else {
            let tree = self.build_tree(edits)?;
            return commit_tree(&self.repo, tree, parents, message);
        };
        let base_tree = self.tree_of(base)?;
        let mut update = TreeUpdateBuilder::new();
        for edit in edits {
            match edit {
                TreeEdit::Write { path, bytes } => {
                    let blob = self.repo.blob(bytes).map_err(lib(format!("write blob {path}")))?;
                    update.upsert(path.as_str(), blob, FileMode::Blob);
                }
                TreeEdit::Remove { path } => {
                    update.remove(path.as_str());
                }
            }
        }
        let tree = update.create_updated(&self.repo, &base_tree).map_err(lib("edit tree"))?;
        commit_tree(&self.repo, tree, parents, message)
    }

    /// Writes a tree holding exactly the files `edits` write (removals are moot).
    fn build_tree(&self, edits: &[TreeEdit]) -> Result<Oid> {
        #[derive(Default)]
        struct Dir {
            files: std::collections::BTreeMap<String, Oid>,
            dirs: std::collections::BTreeMap<String, Dir>,
        }
        fn write(repo: &Repository, dir: &Dir) -> Result<Oid> {
            let mut builder = repo.treebuilder(None).map_err(lib("tree builder"))?;
            for (name, sub) in &dir.dirs {
                let id = write(repo, sub)?;
                builder.insert(name, id, FileMode::Tree.into()).map_err(lib(format!("add {name}")))?;
            }
            for (name, blob) in &dir.files {
                builder.insert(name, *blob, FileMode::Blob.into()).map_err(lib(format!("add {name}")))?;
            }
            builder.write().map_err(lib("write tree"))
        }
        let mut root = Dir::default();
        for edit in edits {
            if let TreeEdit::Write { path, bytes } = edit {
                let blob = self.repo.blob(bytes).map_err(lib(format!("write blob {path}")))?;
                let mut parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
                let Some(file) = parts.pop() else { continue };
                let dir = parts.into_iter().fold(&mut root, |d, p| d.dirs.entry(p.to_owned()).or_default());
                dir.files.insert(file.to_owned(), blob);
            }
        }
        write(&self.repo, &root)
    }

    /// Creates a linked worktree named `name` at `path`, checked out on `branch`.
    pub fn add_worktree(&self, name: &str, path: &Path, branch: &str) -> Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| GitError::Io { path: parent.to_owned(), source })?;
        }
        let reference = self.repo.find_reference(&branch_ref(branch)).map_err(lib(format!("find branch {branch}")))?;
        let mut opts = WorktreeAddOptions::new();
        opts.reference(Some(&reference));
        self.repo.worktree(name, path, Some(&opts)).map_err(lib(format!("add worktree {name}")))?;
        Ok(())
    }

    fn tree_of(&self, commit: Oid) -> Result<git2::Tree<'_>> {
        let c = self.repo.find_commit(commit).map_err(lib(format!("find commit {commit}")))?;
        c.tree().map_err(lib(format!("tree of {commit}")))
    }
}

/// An agent's linked worktree, through which each step's commit is made.
///
/// One directory of it (the transcript) is written only by the harness: its files
/// go in through [`Worktree::commit_files`] and [`Worktree::commit_all`], its tree is
/// extended from the parent's raw tree bytes (no parse, no sort, no index), and it
/// is kept out of the index and out of the scan. The index serves as the stat cache
/// of the work products; it lives in memory while a driver holds the lock and is
/// written by [`Worktree::sync_index`] (with the transcript added back, so plain
/// git sees a clean tree). A driver that starts resets it from the tip.
pub struct Worktree {
    repo: Repository,
    root: PathBuf,
    /// The harness-owned directory, relative to the root (`.offshoot/messages`).
    owned: String,
    /// The raw bytes of the owned directory's tree last written, by its id.
    owned_tree: std::cell::RefCell<Option<(Oid, Vec<u8>)>>,
}

impl Worktree {
    pub fn open(path: &Path, owned: &str) -> Result<Worktree> {
        configure_libgit2();
        let repo = Repository::open(path).map_err(lib(format!("open worktree {}", path.display())))?;
        Ok(Worktree {
            repo,
            root: path.to_owned(),
            owned: owned.trim_end_matches('/').to_owned(),
            owned_tree: Default::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Makes the in-memory index equal to `commit`'s tree less the owned directory,
    /// keeping the files on disk as they are.
    pub fn reset_index(&self, commit: Oid) -> Result<()> {
        let tree = self.repo.find_commit(commit).and_then(|c| c.tree()).map_err(lib(format!("tree of {commit}")))?;
        let mut index = self.repo.index().map_err(lib("open index"))?;
        index.read_tree(&tree).map_err(lib("read tree into index"))?;
        index.remove_dir(Path::new(&self.owned), 0).map_err(lib("unstage the owned directory"))?;
        Ok(())
    }

    /// Writes `files` (all in the owned directory) and commits exactly them on top of
    /// `parent`: no scan, no index.
    pub fn commit_files(&self, branch: &str, parent: Oid, files: &[(&str, &[u8])], message: &str) -> Result<Oid> {
        let base = self.repo.find_commit(parent).and_then(|c| c.tree()).map_err(lib(format!("tree of {parent}")))?;
        let owned = self.extend_owned(&base, files)?;
        let mut update = TreeUpdateBuilder::new();
        update.upsert(self.owned.as_str(), owned, FileMode::Tree);
        let tree = update.create_updated(&self.repo, &base).map_err(lib("edit tree"))?;
        self.finish(tree, branch, parent, message)
    }

    /// Writes `files` (all in the owned directory), then commits them with every
    /// change to the rest of the worktree: additions, modifications and deletions,
    /// honouring .gitignore.
    pub fn commit_all(&self, branch: &str, parent: Oid, files: &[(&str, &[u8])], message: &str) -> Result<Oid> {
        let base = self.repo.find_commit(parent).and_then(|c| c.tree()).map_err(lib(format!("tree of {parent}")))?;
        let owned = self.extend_owned(&base, files)?;
        let mut index = self.repo.index().map_err(lib("open index"))?;
        let roots = self.scan_roots(&index);
        let changed = !roots.is_empty() && self.stage_changes(&mut index, &roots)?;
        // Unchanged work products: the parent's tree is the index's tree.
        let scanned = if changed {
            let id = index.write_tree().map_err(lib("write tree"))?;
            self.repo.find_tree(id).map_err(lib("find tree"))?
        } else {
            base
        };
        let mut update = TreeUpdateBuilder::new();
        update.upsert(self.owned.as_str(), owned, FileMode::Tree);
        let tree = update.create_updated(&self.repo, &scanned).map_err(lib("edit tree"))?;
        self.finish(tree, branch, parent, message)
    }

    /// Writes the index to disk with the owned directory's files staged as well.
    pub fn sync_index(&self, tip: Oid) -> Result<()> {
        let mut index = self.repo.index().map_err(lib("open index"))?;
        let tree = self.repo.find_commit(tip).and_then(|c| c.tree()).map_err(lib(format!("tree of {tip}")))?;
        if let Ok(entry) = tree.get_path(Path::new(&self.owned)) {
            let owned = self.repo.find_tree(entry.id()).map_err(lib("read owned tree"))?;
            for e in owned.iter() {
                let path = format!("{}/{}", self.owned, e.name().unwrap_or_default());
                // A file a tool removed from disk is put back as committed.
                if !self.root.join(&path).is_file() {
                    let blob = self.repo.find_blob(e.id()).map_err(lib(format!("read {path}")))?;
                    write_file(&self.root.join(&path), blob.content())?;
                }
                index.add_path(Path::new(&path)).map_err(lib(format!("stage {path}")))?;
            }
        }
        index.write().map_err(lib("write index"))?;
        index.remove_dir(Path::new(&self.owned), 0).map_err(lib("unstage the owned directory"))
    }

    /// Writes `files` to disk and returns the owned directory's tree with them added.
    fn extend_owned(&self, base: &git2::Tree<'_>, files: &[(&str, &[u8])]) -> Result<Oid> {
        let prefix = format!("{}/", self.owned);
        let mut added = Vec::with_capacity(files.len());
        for (path, bytes) in files {
            let Some(name) = path.strip_prefix(&prefix).filter(|n| !n.is_empty() && !n.contains('/')) else {
                return Err(GitError::Outside { path: (*path).to_owned(), dir: self.owned.clone() });
            };
            write_file(&self.root.join(path), bytes)?;
            let blob = self.repo.blob(bytes).map_err(lib(format!("write blob {path}")))?;
            added.push((name.as_bytes(), blob));
        }
        let current = base.get_path(Path::new(&self.owned)).ok().map(|e| e.id());
        let mut cache = self.owned_tree.borrow_mut();
        let raw = match (current, cache.take()) {
            (Some(id), Some((cached, bytes))) if cached == id => bytes,
            (Some(id), _) => {
                let odb = self.repo.odb().map_err(lib("open odb"))?;
                let object = odb.read(id).map_err(lib(format!("read tree {id}")))?;
                object.data().to_vec()
            }
            (None, _) => Vec::new(),
        };
        let bytes = raw_tree_with(&raw, &mut added)
            .ok_or_else(|| GitError::Outside { path: self.owned.clone(), dir: "a directory of files only".into() })?;
        let odb = self.repo.odb().map_err(lib("open odb"))?;
        let id = odb.write(ObjectType::Tree, &bytes).map_err(lib("write tree"))?;
        *cache = Some((id, bytes));
        Ok(id)
    }

    fn finish(&self, tree: Oid, branch: &str, parent: Oid, message: &str) -> Result<Oid> {
        let commit = commit_tree(&self.repo, tree, &[parent], message)?;
        cas_update(&self.repo, &branch_ref(branch), commit, parent, message)?;
        Ok(commit)
    }

    /// Stages every addition, change and deletion below `roots` (taken as literal
    /// paths, so libgit2 walks only those subtrees).
    fn stage_changes(&self, index: &mut git2::Index, roots: &[String]) -> Result<bool> {
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
            if deleted {
                index.remove_path(&path).map_err(lib(format!("unstage {}", path.display())))?;
            } else {
                index.add_path(&path).map_err(lib(format!("stage {}", path.display())))?;
            }
        }
        Ok(any)
    }

    /// The paths to scan: every top-level entry on disk or in the index, with the
    /// ancestors of the owned directory replaced by their other children.
    fn scan_roots(&self, index: &git2::Index) -> Vec<String> {
        let tracked: Vec<String> = index.iter().map(|e| String::from_utf8_lossy(&e.path).into_owned()).collect();
        let children = |dir: &str| -> std::collections::BTreeSet<String> {
            let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
            let mut names = std::collections::BTreeSet::new();
            for entry in std::fs::read_dir(self.root.join(dir)).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if !(dir.is_empty() && name == ".git") {
                    names.insert(format!("{prefix}{name}"));
                }
            }
            for path in tracked.iter().filter_map(|p| p.strip_prefix(&prefix)) {
                let first = path.split('/').next().unwrap_or(path);
                names.insert(format!("{prefix}{first}"));
            }
            names
        };
        let mut out = Vec::new();
        let mut pending: Vec<String> = children("").into_iter().collect();
        while let Some(path) = pending.pop() {
            if path == self.owned {
                continue;
            }
            if self.owned.starts_with(&format!("{path}/")) {
                pending.extend(children(&path));
            } else {
                out.push(path);
            }
        }
        out.sort();
        out
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

fn write_file(full: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = full.parent() {
        std::fs::create_dir_all(dir).map_err(|source| GitError::Io { path: dir.to_owned(), source })?;
    }
    std::fs::write(full, bytes).map_err(|source| GitError::Io { path: full.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("offshoot-git-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn edits_commit_and_worktree_steps_share_one_history() {
        let dir = temp_dir("steps");
        let repo = Repo::init(&dir.join("repo.git")).expect("init");
        let edits = [TreeEdit::Write { path: ".offshoot/goal.md".into(), bytes: b"goal".to_vec() }];
        let first = repo.commit_edits(&[], None, &edits, "dispatch").expect("commit");
        repo.create_branch("agents/a", first, "dispatch").expect("branch");
        assert!(matches!(repo.create_branch("agents/a", first, "again"), Err(GitError::BranchExists { .. })));
        repo.add_worktree("a", &dir.join("agents/a"), "agents/a").expect("worktree");

        let wt = Worktree::open(&dir.join("agents/a"), ".offshoot/messages").expect("open worktree");
        let second = wt
            .commit_files("agents/a", first, &[(".offshoot/messages/0001-user.md", b"hi")], "deliver")
            .expect("append");
        std::fs::write(dir.join("agents/a/work.txt"), "product").expect("write");
        std::fs::write(dir.join("agents/a/.offshoot/messages/stray"), "x").expect("write");
        let third =
            wt.commit_all("agents/a", second, &[(".offshoot/messages/0002-tool.json", b"{}")], "tool").expect("scan");

        assert_eq!(repo.branch_tip("agents/a").expect("tip"), Some(third));
        assert_eq!(repo.read_file(third, "work.txt").expect("read"), Some(b"product".to_vec()));
        assert_eq!(repo.read_file(third, ".offshoot/messages/stray").expect("read"), None);
        assert_eq!(repo.read_file(third, ".offshoot/messages/0001-user.md").expect("read"), Some(b"hi".to_vec()));
        let names: Vec<_> = repo.list_dir(third, ".offshoot").expect("ls").into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec!["goal.md", "messages"]);
        // A stale parent is refused: one writer per branch.
        let late = [(".offshoot/messages/0003-x.md", &b"x"[..])];
        let err = wt.commit_files("agents/a", second, &late, "late").expect_err("must race");
        assert!(matches!(err, GitError::Raced { .. }), "{err}");
        let err = wt.commit_files("agents/a", third, &[("elsewhere.txt", b"x")], "outside").expect_err("outside");
        assert!(matches!(err, GitError::Outside { .. }), "{err}");
        // The raw-extended tree is exactly what git itself would write.
        let listed: Vec<_> =
            repo.list_dir(third, ".offshoot/messages").expect("ls").into_iter().map(|e| e.name).collect();
        assert_eq!(listed, vec!["0001-user.md", "0002-tool.json"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn raw_tree_insertion_keeps_git_order() {
        let id = |b: u8| Oid::from_bytes(&[b; 20]).expect("oid");
        let mut first = [(&b"0002-b.json"[..], id(2)), (&b"0001-a.md"[..], id(1))];
        let raw = raw_tree_with(&[], &mut first).expect("tree");
        let mut more = [(&b"10000-z.md"[..], id(4)), (&b"0003-c.md"[..], id(3)), (&b"0001-a.md"[..], id(5))];
        let raw = raw_tree_with(&raw, &mut more).expect("tree");
        let mut names = Vec::new();
        let mut at = 0;
        while at < raw.len() {
            let nul = at + raw[at..].iter().position(|&b| b == 0).expect("nul");
            names.push(String::from_utf8_lossy(&raw[at + 7..nul]).into_owned());
            at = nul + 21;
        }
        assert_eq!(names, vec!["0001-a.md", "0002-b.json", "0003-c.md", "10000-z.md"]);
        let mut with_dir = Vec::from(&b"40000 sub\0"[..]);
        with_dir.extend_from_slice(id(9).as_bytes());
        assert!(raw_tree_with(&with_dir, &mut []).is_none());
    }
}
