//! The user's repository in project mode. Read for where agents start (HEAD, a
//! revision, uncommitted changes); written only by `export` (objects and one branch
//! that is not checked out) — never its HEAD, index, working tree or other refs.

use std::path::{Path, PathBuf};

use git2::{Oid, Repository, Status, StatusOptions};

use super::{GitError, Result, configure_libgit2, lib};
use crate::door::Beneath;

/// What a directory is, as a project.
pub enum Discovered {
    /// A repository with a working tree (a linked worktree or submodule included).
    Repo(UserRepo),
    /// A bare repository: there is no working tree to start from or apply to.
    Bare(PathBuf),
    /// No repository holds the directory.
    None,
}

/// The user's repository.
pub struct UserRepo {
    repo: Repository,
    root: PathBuf,
}

/// One uncommitted change of the user's working tree: the file's bytes and whether it
/// is executable, or `None` when it was deleted.
pub type Change = (String, Option<(Vec<u8>, bool)>);

/// Finds the repository holding `dir` (itself or a parent), never looking in or above
/// a directory of `ceilings` (as git's `GIT_CEILING_DIRECTORIES`).
pub fn discover(dir: &Path, ceilings: &[PathBuf]) -> Result<Discovered> {
    configure_libgit2();
    let repo = match Repository::open_ext(dir, git2::RepositoryOpenFlags::empty(), ceilings) {
        Ok(r) => r,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(Discovered::None),
        Err(source) => {
            return Err(GitError::Lib { what: format!("look for a repository at {}", dir.display()), source });
        }
    };
    match repo.workdir() {
        Some(root) => {
            let root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
            Ok(Discovered::Repo(UserRepo { repo, root }))
        }
        None => Ok(Discovered::Bare(repo.path().to_owned())),
    }
}

/// A repository of the harness's own for `dir`, a directory in no repository: its git
/// directory is `git_dir` (never inside `dir`, which is left as it is: no `.git` is
/// written there), its working tree `dir`, and its first commit what `dir` holds when
/// it is made (what `.gitignore` files there leave out stays out). One already made is
/// opened; two makers at once make one (the git directory is moved into place whole).
pub fn for_directory(git_dir: &Path, dir: &Path) -> Result<UserRepo> {
    configure_libgit2();
    if !git_dir.join("HEAD").exists() {
        let made = git_dir.with_extension(format!("making-{}", std::process::id()));
        // (What makers killed mid-way left: theirs, whose process is gone.)
        sweep_makings(git_dir);
        let _ = std::fs::remove_dir_all(&made);
        snapshot_into(&made, dir)?;
        if std::fs::rename(&made, git_dir).is_err() {
            // (Another maker's came first: theirs stands.)
            let _ = std::fs::remove_dir_all(&made);
        }
    }
    UserRepo::open(git_dir)
}

/// Removes `<git_dir>.making-<pid>` directories whose maker is gone.
fn sweep_makings(git_dir: &Path) {
    let (Some(parent), Some(stem)) = (git_dir.parent(), git_dir.file_stem().and_then(|s| s.to_str())) else { return };
    let prefix = format!("{stem}.making-");
    for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else { continue };
        if pid.parse::<u32>().is_ok_and(|pid| !Path::new("/proc").join(pid.to_string()).exists()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Makes the repository of [`for_directory`] at `git_dir`.
fn snapshot_into(git_dir: &Path, dir: &Path) -> Result<()> {
    let what = |w: &str| format!("{w} for {}", dir.display());
    let repo = Repository::init_opts(git_dir, git2::RepositoryInitOptions::new().bare(true).initial_head("main"))
        .map_err(lib(what("make a repository")))?;
    let mut config = repo.config().map_err(lib(what("read the config")))?;
    config.set_bool("core.bare", false).map_err(lib(what("set core.bare")))?;
    config.set_str("core.worktree", &dir.display().to_string()).map_err(lib(what("set core.worktree")))?;
    drop(repo);
    let repo = Repository::open(git_dir).map_err(lib(what("open the repository")))?;
    let mut index = repo.index().map_err(lib(what("read the index")))?;
    index.add_all(["*"], git2::IndexAddOption::DEFAULT, None).map_err(lib(what("take in the files")))?;
    index.write().map_err(lib(what("write the index")))?;
    let tree = index.write_tree().map_err(lib(what("write the tree")))?;
    let tree = repo.find_tree(tree).map_err(lib(what("find the tree")))?;
    let signature = super::signature()?;
    let message = "the directory as offshoot first found it";
    repo.commit(Some("HEAD"), &signature, &signature, message, &tree, &[]).map_err(lib(what("commit")))?;
    Ok(())
}

impl UserRepo {
    /// What opens it again ([`UserRepo::open`]): its working tree, or for a directory
    /// in no repository the git directory the harness made for it.
    pub fn handle(&self) -> PathBuf {
        match std::fs::symlink_metadata(self.root.join(".git")) {
            Ok(_) => self.root.clone(),
            Err(_) => self.repo.path().to_owned(),
        }
    }

    /// Opens the repository whose working tree is `root`.
    pub fn open(root: &Path) -> Result<UserRepo> {
        configure_libgit2();
        let repo = Repository::open(root).map_err(lib(format!("open the project repository {}", root.display())))?;
        let root = repo.workdir().map(Path::to_owned).unwrap_or_else(|| root.to_owned());
        Ok(UserRepo { repo, root })
    }

    /// The top of its working tree.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Its object store (the common one, for a linked worktree).
    pub fn objects(&self) -> PathBuf {
        self.repo.commondir().join("objects")
    }

    /// The commit HEAD is at; `None` before the first commit.
    pub fn head(&self) -> Result<Option<Oid>> {
        match self.repo.head() {
            Ok(h) => Ok(h.target()),
            Err(e) if matches!(e.code(), git2::ErrorCode::UnbornBranch | git2::ErrorCode::NotFound) => Ok(None),
            Err(source) => Err(GitError::Lib { what: "read the project's HEAD".into(), source }),
        }
    }

    /// The commit `rev` names, if any.
    pub fn resolve(&self, rev: &str) -> Option<Oid> {
        self.repo.revparse_single(rev).and_then(|o| o.peel_to_commit()).map(|c| c.id()).ok()
    }

    /// Uncommitted changes of the working tree against HEAD: tracked files changed or
    /// deleted, and untracked files that are not ignored (submodules left out).
    pub fn changes(&self) -> Result<Vec<Change>> {
        let mut out = Vec::new();
        for path in self.changed_paths()? {
            let full = self.root.join(&path);
            let meta = std::fs::symlink_metadata(&full).ok();
            let content = match meta {
                Some(m) if m.is_file() => {
                    use std::os::unix::fs::PermissionsExt;
                    let bytes = std::fs::read(&full).map_err(|source| GitError::Io { path: full.clone(), source })?;
                    Some((bytes, m.permissions().mode() & 0o111 != 0))
                }
                // A symlink or anything else is left out, like a deletion would not be.
                Some(_) => continue,
                None => None,
            };
            out.push((path, content));
        }
        Ok(out)
    }

    /// The paths of [`UserRepo::changes`], sorted, their files not read.
    pub fn changed_paths(&self) -> Result<Vec<String>> {
        let mut opts = StatusOptions::new();
        opts.include_untracked(true).recurse_untracked_dirs(true).include_ignored(false).exclude_submodules(true);
        let statuses = self.repo.statuses(Some(&mut opts)).map_err(lib("read the project's status"))?;
        let mut out: Vec<String> = statuses
            .iter()
            .filter(|e| !e.status().is_empty() && !e.status().contains(Status::IGNORED))
            .filter_map(|e| e.path().ok().map(str::to_owned))
            .collect();
        out.sort();
        Ok(out)
    }

    /// The ignored paths of the working tree as `git status --ignored` shows them: a
    /// directory that is ignored whole is one path (`target`), not its files.
    pub fn ignored_paths(&self) -> Result<Vec<String>> {
        let mut opts = StatusOptions::new();
        opts.include_untracked(false).include_ignored(true).recurse_ignored_dirs(false).exclude_submodules(true);
        let statuses = self.repo.statuses(Some(&mut opts)).map_err(lib("read the project's ignored files"))?;
        let mut out: Vec<String> = statuses
            .iter()
            .filter(|e| e.status().contains(Status::IGNORED))
            .filter_map(|e| e.path().ok().map(|p| p.trim_end_matches('/').to_owned()))
            .collect();
        out.sort();
        Ok(out)
    }

    /// The branch its HEAD is on, if any.
    pub(crate) fn current_branch(&self) -> Option<String> {
        let head = self.repo.find_reference("HEAD").ok()?;
        head.symbolic_target().ok().flatten().and_then(|t| t.strip_prefix("refs/heads/")).map(str::to_owned)
    }

    /// Whether `branch` is the branch HEAD is on here or in any linked worktree.
    pub fn checked_out(&self, branch: &str) -> bool {
        if self.current_branch().as_deref() == Some(branch) {
            return true;
        }
        let worktrees = self.repo.worktrees().ok();
        worktrees.iter().flat_map(|w| w.iter().flatten().flatten()).any(|name| {
            let head = self.repo.commondir().join("worktrees").join(name).join("HEAD");
            std::fs::read_to_string(head).is_ok_and(|h| h.trim() == format!("ref: refs/heads/{branch}"))
        })
    }

    pub fn branch_tip(&self, branch: &str) -> Option<Oid> {
        self.repo.refname_to_id(&format!("refs/heads/{branch}")).ok()
    }

    /// Copies into this repository every object of `commit`'s history that it lacks,
    /// read from `from` (unchanged subtrees are not walked: an object here has all its
    /// own below it).
    pub(crate) fn receive(&self, from: &Repository, commit: Oid) -> Result<usize> {
        // Nothing of an agent's making enters the user's repository unchecked: a tree
        // naming `.git` or `..` would make the user's `fsck` (and a server's) refuse it.
        let ours = self.repo.odb().map_err(lib("open the project's objects"))?;
        super::names::check(from, &[commit], &|oid| ours.exists(oid))?;
        super::copy_missing(from, &self.repo, commit)
    }

    /// Points `branch` at `commit` (which must be here), if it is still at `expected`.
    pub fn set_branch(&self, branch: &str, commit: Oid, expected: Option<Oid>, message: &str) -> Result<()> {
        let name = format!("refs/heads/{branch}");
        let done = match expected {
            Some(old) => self.repo.reference_matching(&name, commit, true, old, message).map(|_| ()),
            None => self.repo.reference(&name, commit, false, message).map(|_| ()),
        };
        done.map_err(lib(format!("set {branch} in the project")))
    }

    /// The identity the user commits with (`user.name`/`user.email` of the
    /// repository's config, else of `global` files), if one is set.
    pub fn identity(&self, global: &[PathBuf]) -> Option<(String, String)> {
        let mut config = git2::Config::new().ok()?;
        for (level, path) in global.iter().enumerate().filter(|(_, p)| p.is_file()) {
            let level = if level == 0 { git2::ConfigLevel::Global } else { git2::ConfigLevel::XDG };
            config.add_file(path, level, false).ok()?;
        }
        let local = self.repo.commondir().join("config");
        if local.is_file() {
            config.add_file(&local, git2::ConfigLevel::Local, false).ok()?;
        }
        let name = config.get_string("user.name").ok()?;
        let email = config.get_string("user.email").ok()?;
        Some((name, email))
    }

    /// What stands at `path` in the working tree, looked at through the door: a
    /// symbolic link anywhere on the way (an untracked `data -> /elsewhere`, say), a
    /// directory, FIFO or device is in the way of a file.
    pub fn work_file(&self, path: &str) -> WorkFile {
        self.work_file_and_mode(path).0
    }

    /// [`UserRepo::work_file`], and whether the file is executable.
    pub fn work_file_and_mode(&self, path: &str) -> (WorkFile, bool) {
        use std::io::Read;
        let Ok(door) = Beneath::open(&self.root) else { return (WorkFile::InTheWay, false) };
        let file = match door.open_file(Path::new(path)) {
            Ok(file) => file,
            Err(e) if e.is_not_found() => return (WorkFile::Missing, false),
            Err(_) => return (WorkFile::InTheWay, false),
        };
        let Some(meta) = file.metadata().ok().filter(|m| m.is_file() && m.len() <= WORK_FILE_MAX) else {
            return (WorkFile::InTheWay, false);
        };
        let mut bytes = Vec::new();
        match (&file).take(WORK_FILE_MAX).read_to_end(&mut bytes) {
            Ok(_) => (WorkFile::File(bytes), std::os::unix::fs::MetadataExt::mode(&meta) & 0o111 != 0),
            Err(_) => (WorkFile::InTheWay, false),
        }
    }

    /// The paths whose content differs between commit `since` and HEAD (the user
    /// committed since an agent started from `since`); `None` when the repository does
    /// not have `since`.
    pub fn changed_since(&self, since: Oid) -> Option<Vec<String>> {
        let then = self.repo.find_commit(since).and_then(|c| c.tree()).ok()?;
        let Ok(now) = self.repo.head().and_then(|h| h.peel_to_tree()) else { return Some(Vec::new()) };
        let Ok(diff) = self.repo.diff_tree_to_tree(Some(&then), Some(&now), None) else { return Some(Vec::new()) };
        let paths = diff.deltas().filter_map(|d| d.new_file().path().or(d.old_file().path()));
        Some(paths.map(|p| p.to_string_lossy().into_owned()).collect())
    }

    /// Writes (or with `None` removes) `path` in the working tree, through the door:
    /// a link on the way is refused, never followed.
    pub fn write_work_file(&self, path: &str, bytes: Option<&[u8]>, executable: bool) -> Result<()> {
        let door = Beneath::open(&self.root)?;
        let rel = Path::new(path);
        // A file the user has keeps its permission bits (a 0600 file stays private);
        // only the executable bits follow the agent's version.
        let had = door.open_file(rel).ok().and_then(|f| f.metadata().ok()).filter(|m| m.is_file());
        let mode = match had.map(|m| std::os::unix::fs::MetadataExt::mode(&m) & 0o777) {
            Some(old) if executable => old | ((old & 0o444) >> 2),
            Some(old) => old & !0o111,
            None if executable => 0o755,
            None => 0o644,
        };
        // (Whole or not at all: an editor showing the file, or a crash, never meets half.)
        match bytes {
            Some(bytes) => Ok(door.replace_whole(rel, bytes, mode)?),
            None => Ok(door.remove(rel)?),
        }
    }
}

/// The largest file of the user's working tree `apply` reads to merge.
const WORK_FILE_MAX: u64 = 1 << 30;

/// What stands at a path of the user's working tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkFile {
    Missing,
    File(Vec<u8>),
    /// A link on the way, or something other than a regular file.
    InTheWay,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_taken_in_without_a_git_in_it_and_a_killed_makers_leftover_goes() {
        let root = std::env::temp_dir().join(format!("offshoot-for-directory-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("app");
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("main.py"), "print(1)\n").expect("file");
        let git_dir = root.join("app-1.git");
        // A maker killed mid-way (a process id no process has).
        let left = root.join("app-1.making-4000000000");
        std::fs::create_dir_all(&left).expect("leftover");
        let user = for_directory(&git_dir, &dir).expect("made");
        assert_eq!(user.root().canonicalize().expect("root"), dir.canonicalize().expect("dir"));
        assert_eq!(user.handle(), user.repo.path().to_owned(), "opened by its git directory");
        assert!(!dir.join(".git").exists() && !left.exists());
        assert!(user.head().expect("head").is_some(), "the first commit holds the directory");
        let _ = std::fs::remove_dir_all(&root);
    }
}
