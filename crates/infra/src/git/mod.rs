//! The one door to the repositories: libgit2 for reads at a commit, tree edits,
//! compare-and-swap ref updates (`Repo`, the harness's `repo.git`), per-step commits
//! of an agent's directory (`Tracked`), and the agents' own `project.git` and its
//! worktrees (`Project`). Callers speak of branches, paths and commits, never of argv.

use std::path::{Path, PathBuf};

use git2::{
    FileMode, ObjectType, Oid, Repository, RepositoryInitOptions, Signature, TreeWalkMode, TreeWalkResult,
    build::TreeUpdateBuilder,
};

pub mod bundle;
mod health;
mod loose;
mod marks;
mod merge;
pub mod mirrors;
mod names;
pub mod pack;
mod project;
pub mod publish;
pub mod remote;
mod tracked;
pub mod transport;
mod user;

pub use health::{Connectivity, file_age, lock_files, temp_objects};
pub use marks::{HARNESS_REFS, harness_ref, harness_ref_parts};
pub use merge::{FileChange, Merged};
pub use names::refused_path;
pub use project::{Attachment, MAIN, Position, Project};
pub use user::{Change, Discovered, UserRepo, WorkFile, discover, for_directory};

pub use tracked::{Additions, Difference, Restored, Scan, Skipped, Staged, Tracked, Why};

/// A commit id, printed as 40 hex digits.
pub type CommitId = Oid;

/// Any object's id (a blob's, a tree's), printed as 40 hex digits.
pub type ObjectId = Oid;

/// The id a blob of `bytes` has (whether or not it is stored anywhere).
pub fn blob_id(bytes: &[u8]) -> Option<ObjectId> {
    Oid::hash_object(git2::ObjectType::Blob, bytes).ok()
}

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
    #[error(transparent)]
    Door(#[from] crate::door::DoorError),
    #[error("{0}")]
    NotABundle(String),
    #[error("commit {commit} holds `{path}`, which git refuses ({why}); nothing of it was sent")]
    RefusedPath { commit: String, path: String, why: &'static str },
}

type Result<T> = std::result::Result<T, GitError>;

fn lib(what: impl Into<String>) -> impl FnOnce(git2::Error) -> GitError {
    let what = what.into();
    move |source| GitError::Lib { what, source }
}

/// One change to a tree: write a file's bytes, or remove a path (file or directory).
#[derive(Debug, Clone)]
pub enum TreeEdit {
    Write {
        path: String,
        bytes: Vec<u8>,
    },
    /// Write an executable file.
    Executable {
        path: String,
        bytes: Vec<u8>,
    },
    Remove {
        path: String,
    },
}

/// What stands at a path of a commit's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryAt {
    Nothing,
    /// A regular file: its blob, and whether it is executable.
    File {
        blob: Oid,
        executable: bool,
    },
    /// A link, a directory or a submodule.
    Other,
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
/// - strict hash verification off: libgit2 hashed every object it read again, with
///   collision-detecting SHA-1 (a thousand-step transcript's tree is ~100 KB, read
///   each step, and every object again when packed). Git itself does not verify on
///   read; what comes from elsewhere (a fetch, a bundle) is hashed by the indexer as it
///   arrives, and what we write is hashed as it is written;
/// - no system, global or XDG git config: the harness never depends on the user's git
///   settings (identity, filters, autocrlf), and libgit2 stops re-checking those files
///   on every operation.
#[expect(unsafe_code, reason = "git2 marks search-path changes unsafe: they race other libgit2 calls")]
fn configure_libgit2() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        git2::opts::strict_object_creation(false);
        git2::opts::strict_hash_verification(false);
        for level in [git2::ConfigLevel::System, git2::ConfigLevel::Global, git2::ConfigLevel::XDG] {
            // SAFETY: runs once, inside call_once, before this process opens any
            // repository, so no other libgit2 call can race it.
            let _ = unsafe { git2::opts::set_search_path(level, "") };
        }
    });
}

/// Every file path of `tree` at or below `prefix` ("" for all), with its blob id, in
/// tree order.
fn files_under(repo: &Repository, tree: &git2::Tree<'_>, prefix: &str) -> Result<Vec<(String, Oid)>> {
    let prefix = prefix.trim_end_matches('/');
    let (tree, root) = if prefix.is_empty() {
        (tree.clone(), String::new())
    } else {
        match tree.get_path(Path::new(prefix)) {
            Ok(e) if e.kind() == Some(ObjectType::Tree) => {
                (repo.find_tree(e.id()).map_err(lib(format!("read {prefix}")))?, format!("{prefix}/"))
            }
            Ok(e) if e.kind() == Some(ObjectType::Blob) => return Ok(vec![(prefix.to_owned(), e.id())]),
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

/// Creates `refname` at `target` unless it exists; `false` if it does (or another
/// process is creating it this instant). libgit2's own create-only mode checks for
/// the ref before it takes the ref's lock, so two creators can both "succeed"; an
/// expected old value of zero is checked under the lock instead.
fn create_only(repo: &Repository, refname: &str, target: Oid, msg: &str) -> Result<bool> {
    // Taken already: no need to touch its lock (its owner may be updating it).
    if repo.refname_to_id(refname).is_ok() {
        return Ok(false);
    }
    // A lock held for a moment is waited for (then the ref exists, or not); one a killed
    // claimer left is removed (else the name or id would stay unclaimable for good).
    match with_lock_retries(repo, refname, || repo.reference_matching(refname, target, true, Oid::ZERO_SHA1, msg)) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.code(), git2::ErrorCode::Modified | git2::ErrorCode::Exists | git2::ErrorCode::Locked) => {
            Ok(false)
        }
        Err(source) => Err(GitError::Lib { what: format!("create {refname}"), source }),
    }
}

/// `tree`'s id with the top-level entry `name` left out.
fn without(repo: &Repository, tree: &git2::Tree<'_>, name: &str) -> Result<Oid> {
    let mut update = TreeUpdateBuilder::new();
    update.remove(name);
    update.create_updated(repo, tree).map_err(lib("edit tree"))
}

/// The harness's signature at the current time, in UTC (no time-zone lookups).
fn signature() -> Result<Signature<'static>> {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let when = git2::Time::new(i64::try_from(secs).unwrap_or(i64::MAX), 0);
    Signature::new(AUTHOR_NAME, AUTHOR_EMAIL, &when).map_err(lib("make signature"))
}

fn cas_update(repo: &Repository, refname: &str, new: Oid, expected: Oid, msg: &str) -> Result<()> {
    let result =
        with_lock_retries(repo, refname, || repo.reference_matching(refname, new, true, expected, msg).map(|_| ()));
    result.map_err(|source| {
        let found = repo.refname_to_id(refname).map(|id| id.to_string()).unwrap_or_else(|_| "nothing".into());
        if found != expected.to_string() {
            GitError::Raced { branch: refname.to_owned(), expected: expected.to_string(), found }
        } else {
            GitError::Lib { what: format!("update {refname}"), source }
        }
    })
}

/// Runs a ref update again while another process holds the ref's lock file for a
/// moment (a creator checking a name, a person's `git` command): up to ~3 s. A lock
/// file older than `STALE_LOCK` is a dead process's (a live update holds one for
/// microseconds; a driver killed in the middle of one leaves it for good): it is
/// removed and the update tried again.
pub(super) fn with_lock_retries<T>(
    repo: &Repository,
    refname: &str,
    mut update: impl FnMut() -> std::result::Result<T, git2::Error>,
) -> std::result::Result<T, git2::Error> {
    const STALE_LOCK: std::time::Duration = std::time::Duration::from_secs(2);
    let lock = repo.path().join(format!("{refname}.lock"));
    let mut tries = 0;
    loop {
        match update() {
            Err(e) if e.code() == git2::ErrorCode::Locked && tries < 300 => {
                tries += 1;
                if file_age(&lock).is_some_and(|a| a >= STALE_LOCK) {
                    let _ = std::fs::remove_file(&lock);
                    continue;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

fn commit_tree(repo: &Repository, tree: Oid, parents: &[Oid], message: &str) -> Result<Oid> {
    commit_tree_by(repo, tree, parents, None, message)
}

/// A commit of `tree` on `parents`, committed by the harness and authored by `author`
/// (the harness when `None`).
fn commit_tree_by(
    repo: &Repository,
    tree: Oid,
    parents: &[Oid],
    author: Option<&(String, String)>,
    message: &str,
) -> Result<Oid> {
    let sig = signature()?;
    let author = match author {
        Some((name, email)) => Signature::new(name, email, &sig.when()).map_err(lib("make the author"))?,
        None => sig.clone(),
    };
    let tree = repo.find_tree(tree).map_err(lib("find tree"))?;
    let parents = parents
        .iter()
        .map(|p| repo.find_commit(*p).map_err(lib(format!("find commit {p}"))))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&git2::Commit<'_>> = parents.iter().collect();
    repo.commit(None, &author, &sig, message, &tree, &refs).map_err(lib("write commit"))
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
    /// (Listed from the names, each looked up: see `mirrors::names_under`.)
    pub fn branches(&self, prefix: &str) -> Result<Vec<(String, Oid)>> {
        let mut out = Vec::new();
        for name in mirrors::names_under(self.repo.path(), &format!("refs/heads/{prefix}"))? {
            // (One that cannot be read — cut, an invalid name — is passed over, as
            // libgit2's iterator did.)
            if let Ok(Some(id)) = self.ref_target(&name) {
                out.push((name["refs/heads/".len()..].to_owned(), id));
            }
        }
        Ok(out)
    }

    /// The value of ref `name` (a full name), if it exists.
    pub fn ref_target(&self, name: &str) -> Result<Option<Oid>> {
        match self.repo.refname_to_id(name) {
            Ok(id) => Ok(Some(id)),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(source) => Err(GitError::Lib { what: format!("read {name}"), source }),
        }
    }

    /// Creates `refs/heads/<branch>` at `commit`; refuses if it exists.
    pub fn create_branch(&self, branch: &str, commit: Oid, msg: &str) -> Result<()> {
        if create_only(&self.repo, &branch_ref(branch), commit, msg)? {
            Ok(())
        } else {
            Err(GitError::BranchExists { branch: branch.to_owned() })
        }
    }

    /// Moves a branch from `expected` to `new`, failing if it is elsewhere.
    pub fn move_branch(&self, branch: &str, new: Oid, expected: Oid, msg: &str) -> Result<()> {
        cas_update(&self.repo, &branch_ref(branch), new, expected, msg)
    }

    pub fn delete_branch(&self, branch: &str) -> Result<()> {
        delete_ref(&self.repo, &branch_ref(branch))
    }

    /// The size in bytes of blob `oid` (read from its header, not its content).
    pub fn blob_len(&self, oid: Oid) -> Result<u64> {
        let odb = self.repo.odb().map_err(lib("open the object database"))?;
        let (len, _) = odb.read_header(oid).map_err(lib(format!("read the header of {oid}")))?;
        Ok(len as u64)
    }

    /// The first parent of `commit`, if it has one.
    pub fn first_parent(&self, commit: Oid) -> Result<Option<Oid>> {
        let c = self.repo.find_commit(commit).map_err(lib(format!("read commit {commit}")))?;
        Ok(c.parent_id(0).ok())
    }

    /// When `commit` was made, as its committer says (seconds since the epoch).
    pub fn commit_time(&self, commit: Oid) -> Result<i64> {
        let c = self.repo.find_commit(commit).map_err(lib(format!("read commit {commit}")))?;
        Ok(c.time().seconds())
    }

    /// The id of what is at `path` in `commit` (a blob or a tree), if anything is.
    pub fn entry_id(&self, commit: Oid, path: &str) -> Result<Option<Oid>> {
        let tree = self.tree_of(commit)?;
        match tree.get_path(Path::new(path)) {
            Ok(e) => Ok(Some(e.id())),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(source) => Err(GitError::Lib { what: format!("read {path}"), source }),
        }
    }

    /// The id of `commit`'s tree.
    pub fn tree_id(&self, commit: Oid) -> Result<Oid> {
        Ok(self.tree_of(commit)?.id())
    }

    /// What stands at `path` in `commit`.
    pub fn entry_at(&self, commit: Oid, path: &str) -> Result<EntryAt> {
        let tree = self.tree_of(commit)?;
        match tree.get_path(Path::new(path)) {
            Ok(e) if e.filemode() == i32::from(FileMode::Blob) => Ok(EntryAt::File { blob: e.id(), executable: false }),
            Ok(e) if e.filemode() == i32::from(FileMode::BlobExecutable) => {
                Ok(EntryAt::File { blob: e.id(), executable: true })
            }
            Ok(_) => Ok(EntryAt::Other),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(EntryAt::Nothing),
            Err(source) => Err(GitError::Lib { what: format!("read {path}"), source }),
        }
    }

    /// The id `bytes` have as a blob (nothing is written).
    pub fn blob_id(bytes: &[u8]) -> Result<Oid> {
        Oid::hash_object(git2::ObjectType::Blob, bytes).map_err(lib("hash a blob"))
    }

    /// Whether `path` in `commit` is a symbolic link.
    pub fn is_symlink(&self, commit: Oid, path: &str) -> Result<bool> {
        let tree = self.tree_of(commit)?;
        match tree.get_path(Path::new(path)) {
            Ok(e) => Ok(e.filemode() == i32::from(FileMode::Link)),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(false),
            Err(source) => Err(GitError::Lib { what: format!("read {path}"), source }),
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
        files_under(&self.repo, &self.tree_of(commit)?, prefix)
    }

    /// Writes a commit whose tree is `base`'s tree (or empty) with `edits` applied.
    /// Moves no ref.
    pub fn commit_edits(&self, parents: &[Oid], base: Option<Oid>, edits: &[TreeEdit], message: &str) -> Result<Oid> {
        self.commit_edits_by(parents, base, edits, None, message)
    }

    /// [`Repo::commit_edits`] authored by `author` (name, email) instead of the harness
    /// (which commits it).
    pub fn commit_edits_by(
        &self,
        parents: &[Oid],
        base: Option<Oid>,
        edits: &[TreeEdit],
        author: Option<&(String, String)>,
        message: &str,
    ) -> Result<Oid> {
        let Some(base) = base else {
            let tree = self.build_tree(edits)?;
            return commit_tree_by(&self.repo, tree, parents, author, message);
        };
        // Removals first, in a pass of their own: a directory removed and then written
        // into must lose everything it had (one pass would write into the old one).
        let mut tree = self.tree_of(base)?;
        let removals: Vec<&str> = edits
            .iter()
            .filter_map(|e| match e {
                TreeEdit::Remove { path } => Some(path.as_str()),
                TreeEdit::Write { .. } | TreeEdit::Executable { .. } => None,
            })
            .collect();
        if !removals.is_empty() {
            let mut update = TreeUpdateBuilder::new();
            for path in removals {
                update.remove(path);
            }
            let id = update.create_updated(&self.repo, &tree).map_err(lib("edit tree"))?;
            tree = self.repo.find_tree(id).map_err(lib("find tree"))?;
        }
        let mut update = TreeUpdateBuilder::new();
        for edit in edits {
            let (path, bytes, mode) = match edit {
                TreeEdit::Write { path, bytes } => (path, bytes, FileMode::Blob),
                TreeEdit::Executable { path, bytes } => (path, bytes, FileMode::BlobExecutable),
                TreeEdit::Remove { .. } => continue,
            };
            let blob = self.repo.blob(bytes).map_err(lib(format!("write blob {path}")))?;
            update.upsert(path.as_str(), blob, mode);
        }
        let tree = update.create_updated(&self.repo, &tree).map_err(lib("edit tree"))?;
        commit_tree_by(&self.repo, tree, parents, author, message)
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
            if let TreeEdit::Write { path, bytes } | TreeEdit::Executable { path, bytes } = edit {
                let blob = self.repo.blob(bytes).map_err(lib(format!("write blob {path}")))?;
                let mut parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
                let Some(file) = parts.pop() else { continue };
                let dir = parts.into_iter().fold(&mut root, |d, p| d.dirs.entry(p.to_owned()).or_default());
                dir.files.insert(file.to_owned(), blob);
            }
        }
        write(&self.repo, &root)
    }

    /// Commits `tree` on top of `parent` and moves `branch` there (compare-and-swap).
    pub fn commit_tree_on(&self, branch: &str, parent: Oid, tree: Oid, message: &str) -> Result<Oid> {
        let commit = commit_tree(&self.repo, tree, &[parent], message)?;
        cas_update(&self.repo, &branch_ref(branch), commit, parent, message)?;
        Ok(commit)
    }

    fn tree_of(&self, commit: Oid) -> Result<git2::Tree<'_>> {
        let c = self.repo.find_commit(commit).map_err(lib(format!("find commit {commit}")))?;
        c.tree().map_err(lib(format!("tree of {commit}")))
    }

    /// The remotes of this repository: name and URL, by name.
    pub fn remotes(&self) -> Result<Vec<(String, String)>> {
        let names = self.repo.remotes().map_err(lib("list remotes"))?;
        let mut out = Vec::new();
        for name in (0..names.len()).filter_map(|i| names.get(i).ok().flatten()) {
            let remote = self.repo.find_remote(name).map_err(lib(format!("read remote {name}")))?;
            out.push((name.to_owned(), remote.url().unwrap_or_default().to_owned()));
        }
        out.sort();
        Ok(out)
    }

    /// Adds remote `name` at `url` (refused by libgit2 when the name is taken).
    pub fn add_remote(&self, name: &str, url: &str) -> Result<()> {
        self.repo.remote(name, url).map(drop).map_err(lib(format!("add remote {name}")))
    }

    /// Removes remote `name`.
    pub fn remove_remote(&self, name: &str) -> Result<()> {
        self.repo.remote_delete(name).map_err(lib(format!("remove remote {name}")))
    }

    /// Reads objects from `objects` (another repository's store) too.
    pub fn add_alternate(&self, objects: &Path) -> Result<()> {
        add_alternate(self.repo.path(), objects)
    }

    /// The tree of `commit` with the directory `harness` as `base` has it (absent when
    /// it has none): the agent's work, over the project it started from.
    pub fn work_tree(&self, commit: Oid, harness: &str, base: Option<Oid>) -> Result<Oid> {
        let work = without(&self.repo, &self.tree_of(commit)?, harness)?;
        let theirs = match base {
            Some(base) => self.tree_of(base)?.get_path(Path::new(harness)).ok().map(|e| (e.id(), e.filemode())),
            None => None,
        };
        let Some((id, mode)) = theirs else { return Ok(work) };
        let work = self.repo.find_tree(work).map_err(lib("find tree"))?;
        let mut update = TreeUpdateBuilder::new();
        let mode = [FileMode::Tree, FileMode::BlobExecutable, FileMode::Link, FileMode::Commit]
            .into_iter()
            .find(|m| i32::from(*m) == mode)
            .unwrap_or(FileMode::Blob);
        update.upsert(harness, id, mode);
        update.create_updated(&self.repo, &work).map_err(lib("keep the project's own harness directory"))
    }
}

/// Whether git takes `name` as a remote's name.
/// (No `/`: a remote's mirrors are one directory named after it.)
pub fn valid_remote_name(name: &str) -> bool {
    git2::Remote::is_valid_name(name) && !name.starts_with('-') && !name.contains('/')
}

/// Whether `name` can be a branch (`refs/heads/<name>` is a valid reference name).
/// Whether `name` can be a branch as git's own commands take it: a valid ref name
/// under `refs/heads/` that is not `HEAD`, does not start with `-` (it would be read as
/// an option) and does not itself start with `refs/` (it would shadow another ref).
pub fn valid_branch_name(name: &str) -> bool {
    git2::Reference::is_valid_name(&format!("refs/heads/{name}"))
        && name != "HEAD"
        && !name.starts_with('-')
        && !name.starts_with("refs/")
}

/// The objects `oid` (of `kind`) names: a commit its tree and parents, a tree its
/// entries (a submodule's commit aside: it is another repository's), a tag its target.
fn named_by(repo: &Repository, oid: Oid, kind: ObjectType) -> Result<Vec<Oid>> {
    Ok(match kind {
        ObjectType::Commit => {
            let c = repo.find_commit(oid).map_err(lib(format!("read commit {oid}")))?;
            std::iter::once(c.tree_id()).chain(c.parent_ids()).collect()
        }
        ObjectType::Tree => {
            let t = repo.find_tree(oid).map_err(lib(format!("read tree {oid}")))?;
            t.iter().filter(|e| e.kind() != Some(ObjectType::Commit)).map(|e| e.id()).collect()
        }
        ObjectType::Tag => vec![repo.find_tag(oid).map_err(lib(format!("read tag {oid}")))?.target_id()],
        _ => Vec::new(),
    })
}

/// Copies into `to` every object `root` reaches that `to` lacks, read from `from`
/// (what `to` has, it has all below: those are not walked); how many were copied.
fn copy_missing(from: &Repository, to: &Repository, root: Oid) -> Result<usize> {
    let ours = to.odb().map_err(lib("open the receiving objects"))?;
    let theirs = from.odb().map_err(lib("open the giving objects"))?;
    let mut stack = vec![root];
    let mut copied = 0;
    while let Some(oid) = stack.pop() {
        if ours.exists(oid) {
            continue;
        }
        let object = theirs.read(oid).map_err(lib(format!("read object {oid}")))?;
        stack.extend(named_by(from, oid, object.kind())?);
        ours.write(object.kind(), object.data()).map_err(lib(format!("write object {oid}")))?;
        copied += 1;
    }
    Ok(copied)
}

/// Deletes the ref `name` (one that is gone is fine), past a lock file a killed
/// process left on it.
fn delete_ref(repo: &Repository, name: &str) -> Result<()> {
    with_lock_retries(repo, name, || match repo.find_reference(name) {
        Ok(mut r) => r.delete(),
        Err(_) => Ok(()),
    })
    .map_err(lib(format!("delete {name}")))
}

/// Adds `objects` to the alternates of the repository at `git_dir` (once).
fn add_alternate(git_dir: &Path, objects: &Path) -> Result<()> {
    let path = git_dir.join("objects/info/alternates");
    let existing = std::fs::read_to_string(&path).unwrap_or_default();
    let line = objects.display().to_string();
    if existing.lines().any(|l| l == line) {
        return Ok(());
    }
    let text = format!("{existing}{}{line}\n", if existing.is_empty() || existing.ends_with('\n') { "" } else { "\n" });
    tracked::write_file(git_dir, "objects/info/alternates", text.as_bytes())
}
