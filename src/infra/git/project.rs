//! The agents' own repository, `project.git`: a bare repository whose linked
//! worktrees are the agents' directories. Whatever an agent does with git acts
//! here; the harness only makes and mends the worktrees, creates and removes
//! branches, and reads where each worktree's HEAD is.

use std::path::{Path, PathBuf};

use git2::{Index, Oid, Repository, RepositoryInitOptions};

use super::{GitError, Result, branch_ref, commit_tree, configure_libgit2, lib, tracked::write_file};
use crate::infra::door::Beneath;

/// Where a worktree's HEAD is: on a branch (whose tip may be unborn), or detached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub branch: Option<String>,
    pub head: Option<Oid>,
}

/// The agents' repository.
pub struct Project {
    repo: Repository,
    path: PathBuf,
}

/// How far a directory is still the linked worktree the harness made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attachment {
    Attached,
    /// The admin directory is fine; the directory's `.git` is missing or changed.
    DotGitWrong,
    /// No admin directory points at this directory.
    Detached,
}

/// The branch every root agent starts from outside project mode.
pub const MAIN: &str = "main";

impl Project {
    /// Creates `path` as a bare repository with one empty commit on `main`, the
    /// harness's directory `harness` excluded everywhere, and `objects` (the
    /// harness's object store) as an alternate, so content the harness already
    /// stored is not stored again by the agents' git.
    pub fn init(path: &Path, harness: &str, objects: &Path) -> Result<Project> {
        configure_libgit2();
        let mut opts = RepositoryInitOptions::new();
        opts.bare(true).mkpath(true).initial_head(MAIN);
        let repo = Repository::init_opts(path, &opts).map_err(lib(format!("init {}", path.display())))?;
        let mut config = repo.config().map_err(lib("open project config"))?;
        // Agents may want their reflog to undo a reset.
        config.set_bool("core.logAllRefUpdates", true).map_err(lib("configure reflogs"))?;
        write_file(path, "info/exclude", format!("/{harness}/\n").as_bytes())?;
        let alternate = relative_to(objects, &path.join("objects"));
        write_file(path, "objects/info/alternates", format!("{}\n", alternate.display()).as_bytes())?;
        let empty = repo.treebuilder(None).and_then(|b| b.write()).map_err(lib("write the empty tree"))?;
        let first = commit_tree(&repo, empty, &[], "project: an empty beginning")?;
        repo.reference(&branch_ref(MAIN), first, false, "init").map_err(lib("create main"))?;
        Ok(Project { repo, path: path.to_owned() })
    }

    pub fn open(path: &Path) -> Result<Project> {
        configure_libgit2();
        let repo = Repository::open_bare(path).map_err(lib(format!("open {}", path.display())))?;
        Ok(Project { repo, path: path.to_owned() })
    }

    pub fn branch_tip(&self, branch: &str) -> Result<Option<Oid>> {
        match self.repo.refname_to_id(&branch_ref(branch)) {
            Ok(id) => Ok(Some(id)),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(source) => Err(GitError::Lib { what: format!("read project branch {branch}"), source }),
        }
    }

    /// Creates `branch` at `at`; refuses if it exists.
    pub fn create_branch(&self, branch: &str, at: Oid) -> Result<()> {
        if self.branch_tip(branch)?.is_some() {
            return Err(GitError::BranchExists { branch: branch.to_owned() });
        }
        let name = branch_ref(branch);
        super::with_lock_retries(&self.repo, &name, || self.repo.reference(&name, at, false, "offshoot: new agent"))
            .map_err(lib(format!("create {branch}")))?;
        Ok(())
    }

    pub fn delete_branch(&self, branch: &str) -> Result<()> {
        match self.repo.find_reference(&branch_ref(branch)) {
            Ok(mut r) => r.delete().map_err(lib(format!("delete project branch {branch}"))),
            Err(_) => Ok(()),
        }
    }

    fn admin(&self, id: &str) -> PathBuf {
        self.path.join("worktrees").join(id)
    }

    /// Makes `dir` the linked worktree `id` at `at`: its `.git` file, the admin
    /// directory, and an index equal to the HEAD's tree (so `git status` shows the
    /// files on disk as changes against it). Files in `dir` are not touched.
    pub fn attach(&self, id: &str, dir: &Path, at: &Position) -> Result<()> {
        let admin = self.admin(id);
        let _ = std::fs::remove_dir_all(&admin);
        let head = match (&at.branch, at.head) {
            (Some(branch), _) => format!("ref: refs/heads/{branch}\n"),
            (None, Some(oid)) => format!("{oid}\n"),
            (None, None) => format!("ref: refs/heads/{MAIN}\n"),
        };
        let rel = format!("worktrees/{id}");
        write_file(&self.path, &format!("{rel}/HEAD"), head.as_bytes())?;
        write_file(&self.path, &format!("{rel}/commondir"), b"../..\n")?;
        write_file(&self.path, &format!("{rel}/gitdir"), format!("{}\n", dir.join(".git").display()).as_bytes())?;
        let mut index = Index::open(&admin.join("index")).map_err(lib("open the worktree's index"))?;
        if let Some(oid) = at.head {
            let tree = self.repo.find_commit(oid).and_then(|c| c.tree()).map_err(lib(format!("tree of {oid}")))?;
            index.read_tree(&tree).map_err(lib("read tree into the worktree's index"))?;
        }
        index.write().map_err(lib("write the worktree's index"))?;
        write_file(dir, ".git", self.dot_git(id).as_bytes())
    }

    /// What the `.git` file of worktree `id` says.
    fn dot_git(&self, id: &str) -> String {
        format!("gitdir: {}\n", self.admin(id).display())
    }

    /// How far `dir` is still worktree `id`. Every file read here is one an agent can
    /// write, so each is read through the door (no link, no FIFO, a few bytes).
    pub fn attachment(&self, id: &str, dir: &Path) -> Attachment {
        let admin = format!("worktrees/{id}");
        let points_back =
            small(&self.path, &format!("{admin}/gitdir")).is_some_and(|g| Path::new(g.trim()) == dir.join(".git"));
        if !points_back || small(&self.path, &format!("{admin}/HEAD")).is_none() {
            return Attachment::Detached;
        }
        let right = small(dir, ".git").is_some_and(|g| g == self.dot_git(id));
        if right { Attachment::Attached } else { Attachment::DotGitWrong }
    }

    /// Writes `dir/.git` back as worktree `id`'s pointer, replacing whatever is there.
    pub fn restore_dot_git(&self, id: &str, dir: &Path) -> Result<()> {
        write_file(dir, ".git", self.dot_git(id).as_bytes())
    }

    /// Reads objects from `objects` (the user's repository's store) too.
    pub fn add_alternate(&self, objects: &Path) -> Result<()> {
        super::add_alternate(&self.path, objects)
    }

    /// Writes a commit of `tree` on `parent`, authored by `author` (name, email) or
    /// the harness; moves no ref.
    pub fn commit_work(
        &self,
        parents: &[Oid],
        tree: Oid,
        author: Option<&(String, String)>,
        message: &str,
    ) -> Result<Oid> {
        let harness = super::signature()?;
        let when = harness.when();
        let author = match author {
            Some((name, email)) => git2::Signature::new(name, email, &when).map_err(lib("make the author"))?,
            None => harness.clone(),
        };
        let tree = self.repo.find_tree(tree).map_err(lib(format!("find tree {tree}")))?;
        let parents = parents
            .iter()
            .map(|p| self.repo.find_commit(*p).map_err(lib(format!("find commit {p}"))))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&git2::Commit<'_>> = parents.iter().collect();
        self.repo.commit(None, &author, &harness, message, &tree, &refs).map_err(lib("write commit"))
    }

    /// Whether `descendant` has `ancestor` in its history (or is it).
    pub fn descends(&self, descendant: Oid, ancestor: Oid) -> bool {
        descendant == ancestor || self.repo.graph_descendant_of(descendant, ancestor).unwrap_or(false)
    }

    /// A commit's message and first parent, if it can be read.
    pub fn commit_info(&self, commit: Oid) -> Option<(String, Option<Oid>)> {
        let c = self.repo.find_commit(commit).ok()?;
        Some((c.message().unwrap_or_default().to_owned(), c.parent_id(0).ok()))
    }

    /// The tree id of `commit`.
    pub fn tree_id(&self, commit: Oid) -> Result<Oid> {
        self.repo.find_commit(commit).map(|c| c.tree_id()).map_err(lib(format!("read commit {commit}")))
    }

    /// Copies `commit` and its history into the user's repository (what it lacks).
    pub fn send_to(&self, user: &super::UserRepo, commit: Oid) -> Result<usize> {
        user.receive(&self.repo, commit)
    }

    /// Whether the project's objects include `commit`.
    pub fn has_commit(&self, commit: Oid) -> bool {
        self.repo.find_commit(commit).is_ok()
    }

    /// Removes worktree `id`'s admin directory (its files stay where they are).
    pub fn detach(&self, id: &str) {
        let _ = std::fs::remove_dir_all(self.admin(id));
    }

    /// Where worktree `id`'s HEAD is, read from its admin directory (never through
    /// the directory's `.git`, which the agent can change). The agent can write these
    /// files too: they are read through the door, and the branch's ref is read as a
    /// loose ref or a line of `packed-refs` (libgit2 would block on a FIFO there).
    pub fn position(&self, id: &str) -> Result<Position> {
        let door = Beneath::open(&self.path)?;
        let text = door.read(Path::new(&format!("worktrees/{id}/HEAD")), SMALL)?;
        let text = String::from_utf8_lossy(&text);
        let text = text.trim();
        if let Some(reference) = text.strip_prefix("ref:") {
            let reference = reference.trim();
            let branch = reference.strip_prefix("refs/heads/").unwrap_or(reference).to_owned();
            return Ok(Position { branch: Some(branch), head: read_ref(&door, reference) });
        }
        Ok(Position { branch: None, head: Oid::from_str(text).ok() })
    }
}

/// What a pointer file of git's may hold (HEAD, a ref, `gitdir`): a few lines.
const SMALL: u64 = 4096;

/// The file `rel` below `root` as text, if it is a small regular file reached
/// without a link.
fn small(root: &Path, rel: &str) -> Option<String> {
    let bytes = Beneath::open(root).ok()?.read(Path::new(rel), SMALL).ok()?;
    String::from_utf8(bytes).ok()
}

/// What ref `name` (`refs/…`) points at in the repository `door` stands for: its
/// loose file, else its line in `packed-refs`; `None` when it is neither, or is not
/// a plain object id (a symbolic ref is not followed).
fn read_ref(door: &Beneath, name: &str) -> Option<Oid> {
    if !name.starts_with("refs/") || name.split('/').any(|p| p.is_empty() || p == "..") {
        return None;
    }
    match door.read(Path::new(name), SMALL) {
        Ok(bytes) => return Oid::from_str(String::from_utf8_lossy(&bytes).trim()).ok(),
        Err(e) if !e.is_not_found() => return None,
        Err(_) => {}
    }
    let packed = door.read(Path::new("packed-refs"), 256 << 20).ok()?;
    String::from_utf8_lossy(&packed).lines().find_map(|line| {
        let (oid, refname) = line.split_once(' ')?;
        (refname == name).then(|| Oid::from_str(oid).ok()).flatten()
    })
}

/// `target` as a path relative to `from` (both absolute or both relative to the
/// same place), for links that survive moving the workspace.
fn relative_to(target: &Path, from: &Path) -> PathBuf {
    let t: Vec<_> = target.components().collect();
    let f: Vec<_> = from.components().collect();
    let common = t.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for part in &t[common..] {
        out.push(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_links_climb_to_the_common_parent() {
        assert_eq!(
            relative_to(Path::new("/ws/repo.git/objects"), Path::new("/ws/project.git/objects")),
            PathBuf::from("../../repo.git/objects")
        );
    }
}
