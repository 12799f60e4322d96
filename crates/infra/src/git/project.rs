//! The agents' git. Each agent's directory has a git directory of its own
//! (`gits/<id>`, what its `.git` points at): its HEAD, index, config, hooks, refs and
//! the objects it writes, which nothing but that agent (and the harness) reads or
//! writes. Its object store borrows, read-only, from the shared `project.git`, which
//! only the harness writes: every agent's published branch and the objects it needs.
//! `project.git` never borrows from the harness's `repo.git` (whose objects are every
//! agent's transcript): only the harness's own handle on it reads `repo.git` too. An
//! agent sees the others' branches as
//! `agents/<name>` (its `refs/remotes/agents` leads to the shared branches). Whatever
//! an agent does with git acts in its own directory; damage there breaks only that
//! agent, and the harness rebuilds it from what was published.

use std::path::{Path, PathBuf};

use git2::{Index, Oid, Repository, RepositoryInitOptions};

use super::{GitError, Result, branch_ref, commit_tree, configure_libgit2, lib, tracked::write_file};
use crate::door::{Beneath, Kind};

/// Where a worktree's HEAD is: on a branch (whose tip may be unborn), or detached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub branch: Option<String>,
    pub head: Option<Oid>,
}

/// The agents' repositories: the shared one and each agent's own.
pub struct Project {
    repo: Repository,
    path: PathBuf,
    /// The directory holding each agent's own git directory.
    gits: PathBuf,
}

/// How far a directory is still attached to its own git directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attachment {
    Attached,
    /// The git directory is fine; the directory's `.git` is missing or changed.
    DotGitWrong,
    /// The agent's git directory is missing or unreadable.
    Detached,
}

/// The branch every root agent starts from outside project mode.
pub const MAIN: &str = "main";

/// The config of an agent's own git directory (what the harness puts back when the
/// agent changes it: a hook or `core.fsmonitor` there would run in a person's `git`).
/// Submodules are not looked into by `git status` and `git diff`: a nested repository
/// the agent made has a config of its own, which would run there.
const AGENT_CONFIG: &str = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n[diff]\n\tignoreSubmodules = all\n";

/// Files of a git directory that would make git read config from elsewhere (`commondir`
/// names another directory whose config and hooks are used; `config.worktree` is read
/// beside the config): an agent's git directory never has them.
const ELSEWHERE: &[&str] = &["commondir", "config.worktree"];

impl Project {
    /// Creates `path` as a bare repository with one empty commit on `main` and the
    /// harness's directory `harness` excluded everywhere; agents' own git directories
    /// go in `gits`. `harness_objects` is the harness's object store (see
    /// [`Project::open`]).
    pub fn init(path: &Path, gits: &Path, harness: &str, harness_objects: &Path) -> Result<Project> {
        configure_libgit2();
        let mut opts = RepositoryInitOptions::new();
        opts.bare(true).mkpath(true).initial_head(MAIN);
        let repo = Repository::init_opts(path, &opts).map_err(lib(format!("init {}", path.display())))?;
        write_file(path, "info/exclude", format!("/{harness}/\n").as_bytes())?;
        let empty = repo.treebuilder(None).and_then(|b| b.write()).map_err(lib("write the empty tree"))?;
        let first = commit_tree(&repo, empty, &[], "project: an empty beginning")?;
        repo.reference(&branch_ref(MAIN), first, false, "init").map_err(lib("create main"))?;
        std::fs::create_dir_all(gits).map_err(|source| GitError::Io { path: gits.to_owned(), source })?;
        Project::open(path, gits, harness_objects)
    }

    /// Opens the shared repository at `path`. It borrows nothing from the harness's
    /// store `harness_objects` — not even through this handle, so whatever commit an
    /// agent names, only what the agents' git holds can be published or exported. One
    /// made when it did is first given the objects its refs reach from there, then
    /// made to stop.
    pub fn open(path: &Path, gits: &Path, harness_objects: &Path) -> Result<Project> {
        configure_libgit2();
        stop_borrowing(path, harness_objects)?;
        let repo = Repository::open_bare(path).map_err(lib(format!("open {}", path.display())))?;
        Ok(Project { repo, path: path.to_owned(), gits: gits.to_owned() })
    }

    /// Copies the work products' tree `tree` from the harness's repository `from`
    /// (what this store lacks of it), for an export to commit.
    pub fn take_work(&self, from: &super::Repo, tree: Oid) -> Result<usize> {
        super::copy_missing(&from.repo, &self.repo, tree)
    }

    /// Gives the harness's repository `to` commit `commit` and what it reaches (what
    /// `to` lacks of it): an agent's base, which a replayed workspace has here alone.
    pub fn give_commit(&self, to: &super::Repo, commit: Oid) -> Result<usize> {
        super::copy_missing(&self.repo, &to.repo, commit)
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
        super::delete_ref(&self.repo, &branch_ref(branch))
    }

    /// Whether agent `id` has a git directory (whatever state it is in).
    pub fn has_git_dir(&self, id: &str) -> bool {
        self.git_dir(id).is_dir()
    }

    /// Agent `id`'s own git directory.
    fn git_dir(&self, id: &str) -> PathBuf {
        self.gits.join(id)
    }

    /// Makes `dir` agent `id`'s working tree at `at`, with a git directory of its
    /// own made afresh: HEAD, config, `info/exclude`, an object store borrowing from
    /// the shared one, its branch, the other agents' branches as `agents/<name>`, and
    /// an index equal to the HEAD's tree (so `git status` shows the files on disk as
    /// changes against it). Files in `dir` are not touched.
    pub fn attach(&self, id: &str, dir: &Path, at: &Position) -> Result<()> {
        self.detach(id);
        let gits = Beneath::open_kept(&self.gits)?;
        let git = |rel: &str, bytes: &[u8]| -> Result<()> {
            Ok(gits.write(Path::new(&format!("{id}/{rel}")), bytes, None, true)?)
        };
        let head = match (&at.branch, at.head) {
            (Some(branch), _) => format!("ref: refs/heads/{branch}\n"),
            (None, Some(oid)) => format!("{oid}\n"),
            (None, None) => format!("ref: refs/heads/{MAIN}\n"),
        };
        git("config", AGENT_CONFIG.as_bytes())?;
        let exclude = std::fs::read(self.path.join("info/exclude")).unwrap_or_default();
        git("info/exclude", &exclude)?;
        // From `gits/<id>/objects` to `project.git/objects`, relative so a moved
        // workspace keeps working.
        let shared = relative_to(&self.path.join("objects"), &self.gits.join(id).join("objects"));
        git("objects/info/alternates", format!("{}\n", shared.display()).as_bytes())?;
        if let (Some(branch), Some(oid)) = (&at.branch, at.head) {
            git(&format!("refs/heads/{branch}"), format!("{oid}\n").as_bytes())?;
        }
        for made in ["objects/pack", "refs/tags", "hooks"] {
            gits.create_dir_all(Path::new(&format!("{id}/{made}")))?;
        }
        let branches = relative_to(&self.path.join("refs/heads"), &self.gits.join(id).join("refs/remotes"));
        gits.symlink(Path::new(&format!("{id}/refs/remotes/agents")), branches.as_os_str())?;
        let mut index = Index::open(&self.git_dir(id).join("index")).map_err(lib("open the agent's index"))?;
        if let Some(oid) = at.head {
            let tree = self.repo.find_commit(oid).and_then(|c| c.tree()).map_err(lib(format!("tree of {oid}")))?;
            index.read_tree(&tree).map_err(lib("read tree into the agent's index"))?;
        }
        index.write().map_err(lib("write the agent's index"))?;
        // HEAD last: [`Project::attach`] cut short by a kill or a failure leaves no
        // HEAD, which [`Project::attachment`] reads as detached, so it is made again.
        git("HEAD", head.as_bytes())?;
        write_file(dir, ".git", self.dot_git(id).as_bytes())
    }

    /// What the `.git` file of agent `id`'s directory says.
    fn dot_git(&self, id: &str) -> String {
        format!("gitdir: {}\n", self.git_dir(id).display())
    }

    /// How far `dir` is still attached to agent `id`'s git directory (whole once its
    /// HEAD, written last, is there, and what git needs has not gone since). Every file read
    /// here is one the agent can write, so each is read through the door (no link, no
    /// FIFO, a few bytes).
    pub fn attachment(&self, id: &str, dir: &Path) -> Attachment {
        let head = small(&self.gits, &format!("{id}/HEAD"));
        if !head.is_some_and(|h| is_head(&h)) {
            return Attachment::Detached;
        }
        // What git cannot do without (the agent may have removed it): its objects,
        // with the way to the shared ones, and its refs.
        let Ok(git) = Beneath::open_kept(&self.git_dir(id)) else { return Attachment::Detached };
        let is = |rel: &str, kind: fn(&Kind) -> bool| git.kind(Path::new(rel)).ok().flatten().is_some_and(|k| kind(&k));
        if !is("objects/info/alternates", |k| matches!(k, Kind::File { .. })) || !is("refs", |k| *k == Kind::Dir) {
            return Attachment::Detached;
        }
        let right = small(dir, ".git").is_some_and(|g| g == self.dot_git(id));
        if right { Attachment::Attached } else { Attachment::DotGitWrong }
    }

    /// Writes `dir/.git` back as agent `id`'s pointer, replacing whatever is there.
    pub fn restore_dot_git(&self, id: &str, dir: &Path) -> Result<()> {
        write_file(dir, ".git", self.dot_git(id).as_bytes())
    }

    /// Puts back what of agent `id`'s git directory runs code in a person's `git` (its
    /// config and its hooks, and a `commondir` or `config.worktree` that would bring
    /// another's) if the agent changed it; returns what was put back.
    pub fn put_back_config(&self, id: &str) -> Result<Vec<&'static str>> {
        self.tend_config(id, true)
    }

    /// What [`Project::put_back_config`] would put back now, nothing changed.
    pub fn planted(&self, id: &str) -> Result<Vec<&'static str>> {
        self.tend_config(id, false)
    }

    fn tend_config(&self, id: &str, mend: bool) -> Result<Vec<&'static str>> {
        let git = Beneath::open_kept(&self.git_dir(id))?;
        let mut found = Vec::new();
        // A config or hooks directory that is missing runs nothing: an attachment a kill
        // cut short leaves them so, and the agent removing them plants nothing. Mending
        // makes them again all the same, unsaid.
        let config = Path::new("config");
        if git.read(config, 64 << 10).ok().as_deref() != Some(AGENT_CONFIG.as_bytes()) {
            if git.kind(config)?.is_some() {
                found.push("config");
            }
            if mend {
                git.write(config, AGENT_CONFIG.as_bytes(), None, true)?;
            }
        }
        let hooks = Path::new("hooks");
        let kind = git.kind(hooks)?;
        let empty = kind == Some(Kind::Dir)
            && std::fs::read_dir(self.git_dir(id).join("hooks")).is_ok_and(|mut d| d.next().is_none());
        if !empty {
            if mend {
                git.remove_all(hooks)?;
                git.create_dir_all(hooks)?;
            }
            if kind.is_some() {
                found.push("hooks");
            }
        }
        for name in ELSEWHERE {
            if git.kind(Path::new(name))?.is_some() {
                if mend {
                    git.remove_all(Path::new(name))?;
                }
                found.push(name);
            }
        }
        Ok(found)
    }

    /// The exporter's arguments (after the binary) for publishing what agent `id`'s
    /// git holds of `tips` that the shared store lacks.
    pub fn export_args(&self, id: &str, tips: &[Oid]) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec![super::publish::ARG.into()];
        args.push(self.git_dir(id).join("objects").into_os_string());
        args.push(self.path.clone().into_os_string());
        args.extend(tips.iter().map(|t| t.to_string().into()));
        args
    }

    /// The quarantines publications cut short by a kill left (their objects never
    /// reached the shared store).
    pub fn abandoned_quarantines(&self) -> Vec<PathBuf> {
        super::publish::abandoned(&self.path.join(super::publish::QUARANTINE))
    }

    /// Removes what [`Project::abandoned_quarantines`] finds.
    pub fn sweep_quarantines(&self) {
        super::publish::sweep(&self.path.join(super::publish::QUARANTINE));
    }

    /// Takes an exporter's frames into the shared store.
    pub fn importer(&self) -> std::result::Result<super::publish::Importer<'_>, String> {
        super::publish::Importer::new(&self.repo)
    }

    /// Removes the lock file a killed publication of `branch` left (only that agent's
    /// driver writes the shared `branch`).
    pub fn remove_branch_lock(&self, branch: &str) {
        let _ = std::fs::remove_file(self.path.join(format!("{}.lock", branch_ref(branch))));
    }

    /// Points the shared `branch` (an agent's published branch) at `head`.
    pub fn publish_branch(&self, branch: &str, head: Oid) -> Result<()> {
        let name = branch_ref(branch);
        super::with_lock_retries(&self.repo, &name, || self.repo.reference(&name, head, true, "offshoot: published"))
            .map_err(lib(format!("publish {branch}")))?;
        Ok(())
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

    /// Refuses a tree git would refuse among what `tips` reach of the agents' making
    /// (the objects stored here; the user's own history, borrowed, was checked by git).
    pub fn check_sent(&self, tips: &[Oid]) -> Result<()> {
        let own = git2::Odb::new().map_err(lib("open the project's own objects"))?;
        own.add_disk_alternate(&self.path.join("objects").to_string_lossy())
            .map_err(lib("open the project's own objects"))?;
        super::names::check(&self.repo, tips, &|oid| !own.exists(oid))
    }

    /// Whether the project's objects include `commit`.
    pub fn has_commit(&self, commit: Oid) -> bool {
        self.repo.find_commit(commit).is_ok()
    }

    /// Removes agent `id`'s git directory (its files stay where they are), and the
    /// linked-worktree admin entry an agent made before agents had their own.
    pub fn detach(&self, id: &str) {
        if let Ok(gits) = Beneath::open_kept(&self.gits) {
            let _ = gits.remove_all(Path::new(id));
        }
        let _ = std::fs::remove_dir_all(self.path.join("worktrees").join(id));
    }

    /// Where agent `id`'s HEAD is, read from its git directory (never through the
    /// directory's `.git`, which the agent can change). The agent writes these files:
    /// they are read through the door, and the branch's ref is read as a loose ref or
    /// a line of `packed-refs` (libgit2 would block on a FIFO there).
    pub fn position(&self, id: &str) -> Result<Position> {
        let door = Beneath::open_kept(&self.git_dir(id))?;
        let text = door.read(Path::new("HEAD"), SMALL)?;
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

/// Makes the repository at `path` stop borrowing objects from `harness_objects`
/// (workspaces made before agents' git was kept from the harness's store listed it
/// in `objects/info/alternates`): every object its refs reach that only the harness
/// holds is copied in first, then the line goes. Cut short, it is done again whole
/// at the next open.
fn stop_borrowing(path: &Path, harness_objects: &Path) -> Result<()> {
    let objects = path.join("objects");
    let listed = objects.join("info/alternates");
    let Ok(text) = std::fs::read_to_string(&listed) else { return Ok(()) };
    let resolved = std::fs::canonicalize(harness_objects).unwrap_or_else(|_| harness_objects.to_owned());
    let is_harness = |line: &str| std::fs::canonicalize(objects.join(line)).is_ok_and(|p| p == resolved);
    let (theirs, kept): (Vec<&str>, Vec<&str>) = text.lines().partition(|l| is_harness(l));
    if theirs.is_empty() {
        return Ok(());
    }
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| GitError::Io { path, source }
    };
    let full = Repository::open_bare(path).map_err(lib(format!("open {}", path.display())))?;
    let odb = full.odb().map_err(lib("open project.git's objects"))?;
    // What the harness holds, and what project.git borrows from elsewhere (the user's
    // repository, whose objects name none of the harness's). (An object database
    // follows the alternates of what it is given, so "own" cannot be asked.)
    let harness = git2::Odb::new().map_err(lib("open the harness's objects"))?;
    harness.add_disk_alternate(&harness_objects.to_string_lossy()).map_err(lib("open the harness's objects"))?;
    let elsewhere = git2::Odb::new().map_err(lib("open the borrowed objects"))?;
    for line in &kept {
        let _ = elsewhere.add_disk_alternate(&objects.join(line).to_string_lossy());
    }
    // Copies are written in a repository of their own (no alternates: libgit2 skips
    // writing an object any alternate has) and moved in by rename.
    let staging_dir = path.join(super::publish::QUARANTINE).join(format!("{}-borrowed", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging_dir);
    let staging = Repository::init_bare(&staging_dir).map_err(lib("make a place for the copies"))?;
    let staged = staging.odb().map_err(lib("open the copies' objects"))?;
    let mut seen = std::collections::HashSet::new();
    let mut stack: Vec<Oid> =
        full.references().map_err(lib("list project.git's refs"))?.flatten().filter_map(|r| r.target()).collect();
    let mut copied = Vec::new();
    while let Some(oid) = stack.pop() {
        if !seen.insert(oid) || elsewhere.exists(oid) {
            continue;
        }
        let Ok((_, kind)) = odb.read_header(oid) else { continue };
        if harness.exists(oid) {
            let object = odb.read(oid).map_err(lib(format!("read {oid}")))?;
            staged.write(kind, object.data()).map_err(lib(format!("copy {oid}")))?;
            copied.push(oid);
        }
        stack.extend(super::named_by(&full, oid, kind)?);
    }
    // Each object after what it names (found after it): cut short, what moved is whole.
    // (One project.git has too, loose, stays as it is.)
    for oid in copied.iter().rev() {
        let hex = oid.to_string();
        let (dir, file) = hex.split_at(2);
        let target = objects.join(dir).join(file);
        if !target.exists() {
            std::fs::create_dir_all(objects.join(dir)).map_err(io(&objects.join(dir)))?;
            std::fs::rename(staging_dir.join("objects").join(dir).join(file), &target).map_err(io(&target))?;
        }
    }
    let _ = std::fs::remove_dir_all(&staging_dir);
    // Replaced whole (a half-written list would lose the user's repository).
    let rest: String = kept.iter().map(|l| format!("{l}\n")).collect();
    let next = listed.with_extension("new");
    std::fs::write(&next, rest).map_err(io(&next))?;
    std::fs::rename(&next, &listed).map_err(io(&listed))
}

/// What a pointer file of git's may hold (HEAD, a ref, `gitdir`): a few lines.
const SMALL: u64 = 4096;

/// The file `rel` below `root` as text, if it is a small regular file reached
/// without a link.
fn small(root: &Path, rel: &str) -> Option<String> {
    let bytes = Beneath::open_kept(root).ok()?.read(Path::new(rel), SMALL).ok()?;
    String::from_utf8(bytes).ok()
}

/// Whether `head` is a HEAD git takes: `ref:`, any blanks, then a ref under `refs/`
/// (git skips the blanks, so `ref:refs/heads/x` is one), or an object id.
fn is_head(head: &str) -> bool {
    match head.strip_prefix("ref:") {
        Some(target) => target.trim_start().starts_with("refs/"),
        None => Oid::from_str(head.trim()).is_ok(),
    }
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
