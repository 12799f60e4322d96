//! Workspaces: creating one (bare repository, skeleton, first config commit),
//! opening one, and reading and writing its config lineages.

use crate::Cause;
use std::path::{Path, PathBuf};

use domain::agent;
use domain::config::{self, Config, ConfigError};
use domain::layout::Layout;
use infra::git::{CommitId, GitError, Project, Repo, TreeEdit, UserRepo};

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("`{0}` is not empty")]
    NotEmpty(PathBuf),
    #[error("`{0}` is not an offshoot workspace (it has no repo.git)")]
    NotAWorkspace(PathBuf),
    #[error("config lineage `{lineage}` does not exist; lineages: {}", known.join(", "))]
    NoLineage { lineage: String, known: Vec<String> },
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot {verb} `{key}` in offshoot.toml: {reason}")]
    ConfigKey {
        verb: &'static str,
        key: String,
        #[source]
        reason: Cause,
    },
    #[error("config lineage `{lineage}` kept moving while this change was made ({tries} tries); nothing was committed")]
    ConfigBusy { lineage: String, tries: u32 },
    #[error("the project of this workspace, {0}, is not a git repository with a working tree any more")]
    ProjectGone(PathBuf),
}

/// What setting config keys did.
#[derive(Debug, Clone, Default)]
pub struct KeysSet {
    /// The commit, or `None` when nothing changed.
    pub commit: Option<CommitId>,
    /// Roles that appeared and got a soul (`souls/<role>.md`, the worker's).
    pub souls_added: Vec<String>,
}

type Result<T> = std::result::Result<T, WorkspaceError>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorkspaceError + '_ {
    move |source| WorkspaceError::Io { path: path.to_owned(), source }
}

/// An open workspace: its layout, the harness's repository and the agents'.
pub struct Workspace {
    pub layout: Layout,
    pub repo: Repo,
    pub(crate) project: Project,
    /// In project mode, the working tree of the user's repository the agents start
    /// from (recorded in `<workspace>/project-source`).
    pub(crate) source: Option<PathBuf>,
}

/// The file of a project workspace naming the user's repository.
const SOURCE: &str = "project-source";

/// A config's skills: name → files (path inside the skill, bytes).
pub(crate) type Skills = std::collections::BTreeMap<String, Vec<(String, Vec<u8>)>>;

/// The files of a config tree: (path, bytes).
pub type ConfigFiles = Vec<(String, Vec<u8>)>;

/// The embedded default config, with any file in `override_dir` replacing the
/// embedded file of the same path (and adding new ones).
pub fn template_files(override_dir: Option<&Path>) -> Result<ConfigFiles> {
    let mut files: ConfigFiles =
        config::DEFAULT_FILES.iter().map(|(p, t)| ((*p).to_owned(), t.as_bytes().to_vec())).collect();
    let Some(dir) = override_dir.filter(|d| d.is_dir()) else {
        return Ok(files);
    };
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(io(&d))? {
            let path = entry.map_err(io(&d))?.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            let bytes = std::fs::read(&path).map_err(io(&path))?;
            files.retain(|(p, _)| *p != rel);
            files.push((rel, bytes));
        }
    }
    files.sort();
    Ok(files)
}

/// Validates a config tree before anything is written.
pub fn validate_files(files: &ConfigFiles) -> std::result::Result<Config, ConfigError> {
    let text = files
        .iter()
        .find(|(p, _)| p == config::FILE)
        .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    Config::parse(&text, &|path| files.iter().any(|(p, _)| p == path))
}

/// How long a lock file in the repositories must have gone unwritten before its writer
/// is taken for dead (a live ref update holds one for microseconds).
const STALE_LOCK: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a temporary object file must have gone unwritten before its writer is taken
/// for dead (a live writer writes on until it renames the file).
const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(10);

impl Workspace {
    /// Removes the lock files and temporary object files a killed process left in the
    /// agents' and the shared repository, once nobody has written them for a while, so
    /// the next write there does not fail and `doctor` has nothing to repair. (`scan`
    /// sweeps as its last act; a worker, which runs no scan, every few seconds.)
    pub(crate) fn sweep_leftovers(&self) {
        for dir in [self.layout.repo(), self.layout.project()] {
            for (path, age) in infra::git::lock_files(&dir) {
                if age >= STALE_LOCK.as_secs() {
                    let _ = std::fs::remove_file(path);
                }
            }
            for (path, age) in infra::git::temp_objects(&dir) {
                if age >= STALE_TEMP.as_secs() {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }

    /// Creates a workspace at `root` (parents too) with `files` as the first commit
    /// of `config/default`. Refuses a non-empty target; validates before writing.
    pub fn create(root: &Path, files: &ConfigFiles) -> Result<Workspace> {
        Self::make(root, files, None)?.ok_or_else(|| WorkspaceError::NotEmpty(root.to_owned()))
    }

    /// Makes a workspace at `root` unless one is there (or another caller's lands there
    /// first: `None`). Makers take turns by a lock file beside it (`.<name>.lock`); one
    /// where nothing is yet is laid out under a hidden name beside it and renamed into
    /// place, so no caller ever opens half of one and a kill leaves nothing at `root`;
    /// an empty directory that is there (the user's, a mount, a link to one) is filled
    /// in place, and emptied again if that fails.
    fn make(root: &Path, files: &ConfigFiles, source: Option<&UserRepo>) -> Result<Option<Workspace>> {
        let Some(name) = root.file_name() else { return Ok(None) };
        let full = |dir: &Path| std::fs::read_dir(dir).map(|mut d| d.next().is_some());
        if root.exists() && full(root).map_err(io(root))? {
            return Ok(None);
        }
        validate_files(files)?;
        let parent = root.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(io(parent))?;
        let name = name.to_string_lossy();
        let turn = take_turn(&parent.join(format!(".{name}.lock")), root)?;
        // What a maker killed mid-way left goes: with the lock held, all of it.
        let prefix = format!(".{name}.making-");
        sweep_abandoned(parent, &prefix, turn.is_some());
        if root.exists() && full(root).map_err(io(root))? {
            return Ok(None);
        }
        let link = |at: &Path| match source {
            Some(source) => link_project(at, source),
            None => Ok(()),
        };
        if root.exists() {
            let laid = Self::lay_out(root, files).and_then(|_| link(root));
            if laid.is_err() {
                unmake(root, true);
            }
            laid?;
            return Self::open(root).map(Some);
        }
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let nth = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let making = parent.join(format!("{prefix}{}-{nth}", std::process::id()));
        // One left by a process that had this pid before.
        let _ = std::fs::remove_dir_all(&making);
        let laid = Self::lay_out(&making, files).and_then(|_| link(&making));
        let placed = laid.and_then(|()| match std::fs::rename(&making, root) {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::DirectoryNotEmpty | std::io::ErrorKind::AlreadyExists) => {
                Ok(false)
            }
            Err(e) => Err(io(root)(e)),
        });
        if !matches!(placed, Ok(true)) {
            let _ = std::fs::remove_dir_all(&making);
        }
        // Opened again: libgit2 reads a store's alternates when it opens it.
        if placed? { Self::open(root).map(Some) } else { Ok(None) }
    }

    /// The skeleton of a workspace at `root` (which must not exist) with empty
    /// repositories and no config lineage: what a replay fills from a bundle.
    pub fn create_bare(root: &Path) -> Result<Workspace> {
        let layout = Layout::new(root);
        for dir in layout.skeleton() {
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        }
        let repo = Repo::init(&layout.repo())?;
        let project = init_project(&layout)?;
        Ok(Workspace { layout, repo, project, source: None })
    }

    fn lay_out(root: &Path, files: &ConfigFiles) -> Result<Workspace> {
        let layout = Layout::new(root);
        for dir in layout.skeleton() {
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        }
        let repo = Repo::init(&layout.repo())?;
        let project = init_project(&layout)?;
        let edits: Vec<TreeEdit> =
            files.iter().map(|(p, b)| TreeEdit::Write { path: p.clone(), bytes: b.clone() }).collect();
        let commit = repo.commit_edits(&[], None, &edits, "config: initial configuration")?;
        repo.create_branch("config/default", commit, "config: initial configuration")?;
        Ok(Workspace { layout, repo, project, source: None })
    }

    /// Creates a workspace at `root` whose agents work on the user's repository at
    /// `source` (its working tree): both repositories read the user's objects, which
    /// are never copied. Refuses like `create`; leaves nothing on failure.
    pub fn create_for_project(root: &Path, files: &ConfigFiles, source: &UserRepo) -> Result<Workspace> {
        Self::make(root, files, Some(source))?.ok_or_else(|| WorkspaceError::NotEmpty(root.to_owned()))
    }

    /// Opens the project workspace at `root` for `source`, creating it first if needed
    /// (safe under any number of concurrent callers).
    /// `true` with it when this call made it.
    pub fn open_or_create_for_project(
        root: &Path,
        files: &ConfigFiles,
        source: &UserRepo,
    ) -> Result<(Workspace, bool)> {
        match Self::make(root, files, Some(source))? {
            Some(ws) => Ok((ws, true)),
            None => Ok((Self::open(root)?, false)),
        }
    }

    /// Whether the harness's repository holds commit `base` (an agent's start), taking
    /// it from the agents' repository when only that one does (a replayed workspace
    /// gets its agents' history there alone).
    pub(crate) fn hold_base(&self, base: CommitId) -> Result<bool> {
        if self.repo.resolve_commit(&base.to_string()).is_some() {
            return Ok(true);
        }
        if !self.project.has_commit(base) {
            return Ok(false);
        }
        self.project.give_commit(&self.repo, base)?;
        Ok(true)
    }

    /// The user's repository of a project workspace (`None` outside project mode).
    pub fn user_repo(&self) -> Result<Option<UserRepo>> {
        let Some(source) = &self.source else { return Ok(None) };
        UserRepo::open(source).map(Some).map_err(|_| WorkspaceError::ProjectGone(source.clone()))
    }

    pub fn open(root: &Path) -> Result<Workspace> {
        let layout = Layout::new(root);
        if !layout.repo().is_dir() {
            return Err(WorkspaceError::NotAWorkspace(root.to_owned()));
        }
        let repo = Repo::open(&layout.repo())?;
        // Workspaces made before agents had their own repository get one now.
        let project = if layout.project().is_dir() {
            Project::open(&layout.project(), &layout.gits(), &layout.repo().join("objects"))?
        } else {
            init_project(&layout)?
        };
        let source = std::fs::read_to_string(root.join(SOURCE)).ok().map(|s| PathBuf::from(s.trim_end_matches('\n')));
        Ok(Workspace { layout, repo, project, source })
    }

    /// Opens `root`, creating it first if it does not exist or is empty (safe under
    /// any number of concurrent callers: one makes it, the others open it).
    /// `true` with it when this call made it.
    pub fn open_or_create(root: &Path, files: &ConfigFiles) -> Result<(Workspace, bool)> {
        match Self::make(root, files, None)? {
            Some(ws) => Ok((ws, true)),
            None => Ok((Self::open(root)?, false)),
        }
    }

    pub fn config_tip(&self, lineage: &str) -> Result<CommitId> {
        match self.repo.branch_tip(&format!("config/{lineage}"))? {
            Some(tip) => Ok(tip),
            None => {
                let known = self.repo.branches("config/")?;
                let known = known.into_iter().map(|(b, _)| b.trim_start_matches("config/").to_owned()).collect();
                Err(WorkspaceError::NoLineage { lineage: lineage.to_owned(), known })
            }
        }
    }

    /// The config of `lineage` at commit `at`, parsed and validated.
    pub fn config_at(&self, at: CommitId) -> Result<Config> {
        let text = self.config_text_at(at)?;
        let has = |path: &str| self.repo.read_file(at, path).ok().flatten().is_some();
        Ok(Config::parse(&text, &has)?)
    }

    /// The config at the tip of `lineage`, with the tip's id.
    pub fn config(&self, lineage: &str) -> Result<(CommitId, Config)> {
        let tip = self.config_tip(lineage)?;
        Ok((tip, self.config_at(tip)?))
    }

    pub fn config_text_at(&self, at: CommitId) -> Result<String> {
        let bytes = self.repo.read_file(at, config::FILE)?.unwrap_or_default();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The skills of the config at `at`: name → files (path inside the skill, bytes).
    pub(crate) fn skills(&self, at: CommitId) -> Result<Skills> {
        let mut skills = Skills::new();
        for (path, oid) in self.repo.list_files(at, "skills")? {
            let Some((name, rel)) = path.strip_prefix("skills/").and_then(|p| p.split_once('/')) else { continue };
            let bytes = self.repo.read_blob(oid)?;
            skills.entry(name.to_owned()).or_default().push((rel.to_owned(), bytes));
        }
        Ok(skills)
    }

    pub fn config_file(&self, at: CommitId, path: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.repo.read_file(at, path)?)
    }

    /// Authors a config commit on `lineage` writing `changes`; validates the result
    /// first. `None` when nothing would change.
    pub fn commit_config(&self, lineage: &str, changes: &ConfigFiles, message: &str) -> Result<Option<CommitId>> {
        let tip = self.config_tip(lineage)?;
        self.commit_config_on(lineage, tip, changes, message)
    }

    /// Sets dotted keys of `offshoot.toml` on `lineage` as one commit. A role that
    /// appears without a soul gets the worker's (`souls/<role>.md`), and the worker's
    /// settings for what the keys leave out. If the lineage moves meanwhile (another
    /// `config set`), the keys are applied again to its new tip.
    pub fn set_config_keys(&self, lineage: &str, pairs: &[(&str, &str)], message: &str) -> Result<KeysSet> {
        self.edit_config_keys(lineage, message, &|before: &str| {
            let mut text = before.to_owned();
            for (key, value) in pairs {
                text = set_key(&text, key, value).map_err(|reason| WorkspaceError::ConfigKey {
                    verb: "set",
                    key: (*key).to_owned(),
                    reason: reason.into(),
                })?;
            }
            Ok(roles_from_worker(before, &text))
        })
    }

    /// Removes dotted keys from `offshoot.toml` on `lineage` as one commit (refused when
    /// one is not set, or the config without them breaks a rule).
    pub fn unset_config_keys(&self, lineage: &str, keys: &[&str], message: &str) -> Result<KeysSet> {
        self.edit_config_keys(lineage, message, &|before: &str| {
            let mut text = before.to_owned();
            for key in keys {
                // The worker is the role a new one is made from, and what `prompt` runs.
                if *key == "roles.worker" {
                    let reason =
                        "the worker is the default role and the one new roles copy; change its keys instead".into();
                    return Err(WorkspaceError::ConfigKey { verb: "unset", key: (*key).to_owned(), reason });
                }
                text = unset_key(&text, key).map_err(|reason| WorkspaceError::ConfigKey {
                    verb: "unset",
                    key: (*key).to_owned(),
                    reason: reason.into(),
                })?;
            }
            Ok(text)
        })
    }

    /// `edit` applied to `offshoot.toml` at `lineage`'s tip and committed, again on the
    /// new tip if the lineage moved meanwhile.
    pub(crate) fn edit_config_keys(
        &self,
        lineage: &str,
        message: &str,
        edit: &dyn Fn(&str) -> Result<String>,
    ) -> Result<KeysSet> {
        const TRIES: u32 = 20;
        for _ in 0..TRIES {
            let tip = self.config_tip(lineage)?;
            let text = edit(&self.config_text_at(tip)?)?;
            let mut changes: ConfigFiles = vec![(config::FILE.to_owned(), text.clone().into_bytes())];
            let mut souls_added = Vec::new();
            let roles = toml::from_str::<toml::Table>(&text)
                .ok()
                .and_then(|t| t.get("roles").and_then(|r| r.as_table()).map(|r| r.keys().cloned().collect::<Vec<_>>()))
                .unwrap_or_default();
            for role in roles {
                let soul = format!("souls/{role}.md");
                if self.repo.read_file(tip, &soul)?.is_none() {
                    let worker = self.repo.read_file(tip, "souls/worker.md")?;
                    let text =
                        worker.unwrap_or_else(|| format!("You are an agent with the role `{role}`.\n").into_bytes());
                    changes.push((soul, text));
                    souls_added.push(role);
                }
            }
            match self.commit_config_on(lineage, tip, &changes, message) {
                Ok(commit) => return Ok(KeysSet { commit, souls_added }),
                Err(WorkspaceError::Git(GitError::Raced { .. })) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(WorkspaceError::ConfigBusy { lineage: lineage.to_owned(), tries: TRIES })
    }

    /// Commits `changes` on `tip` of `lineage` if the result is a valid config;
    /// `Raced` if the lineage moved from `tip`.
    fn commit_config_on(
        &self,
        lineage: &str,
        tip: CommitId,
        changes: &ConfigFiles,
        message: &str,
    ) -> Result<Option<CommitId>> {
        let mut changed = Vec::new();
        for (path, bytes) in changes {
            if self.repo.read_file(tip, path)?.as_deref() != Some(bytes.as_slice()) {
                changed.push(TreeEdit::Write { path: path.clone(), bytes: bytes.clone() });
            }
        }
        if changed.is_empty() {
            return Ok(None);
        }
        let text = match changes.iter().find(|(p, _)| p == config::FILE) {
            Some((_, b)) => String::from_utf8_lossy(b).into_owned(),
            None => self.config_text_at(tip)?,
        };
        let has = |path: &str| {
            changes.iter().any(|(p, _)| p == path) || self.repo.read_file(tip, path).ok().flatten().is_some()
        };
        Config::parse(&text, &has)?.missing_hook_program(&text, &program_exists)?;
        let commit = self.repo.commit_edits(&[tip], Some(tip), &changed, message)?;
        self.repo.move_branch(&format!("config/{lineage}"), commit, tip, message)?;
        Ok(Some(commit))
    }
}

/// Whether `program` (a hook's first word) is there: a path to a file, or a name found
/// on this process's PATH.
fn program_exists(program: &str) -> bool {
    // (The shell's own words are taken as they are; `~/…` is the user's home, which
    // only the shell running the hook knows for sure.)
    const BUILTINS: [&str; 10] = ["exit", "true", "false", "echo", "printf", "test", "[", ":", "cat", "read"];
    if BUILTINS.contains(&program) || program.starts_with("~/") {
        return true;
    }
    if program.starts_with('/') {
        return Path::new(program).is_file();
    }
    match SEARCH_PATH.get() {
        Some(path) => path.split(':').filter(|d| !d.is_empty()).any(|dir| Path::new(dir).join(program).is_file()),
        // (Nobody said where to look: not refused.)
        None => true,
    }
}

/// Where hooks' programs are looked for (the user's `PATH`; the cli says, as only it
/// reads the environment).
static SEARCH_PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets where hook programs named without a path are looked for (`PATH`'s value).
pub fn set_search_path(path: String) {
    let _ = SEARCH_PATH.set(path);
}

/// Removes what was made at `root` (its contents only when it `existed` before).
pub fn unmake(root: &Path, existed: bool) {
    if existed {
        for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
            let _ = std::fs::remove_dir_all(entry.path()).or_else(|_| std::fs::remove_file(entry.path()));
        }
    } else {
        let _ = std::fs::remove_dir_all(root);
    }
}

/// Points the repositories of the workspace at `root` at the user's objects and
/// records where the user's repository is.
fn link_project(root: &Path, source: &UserRepo) -> Result<()> {
    let layout = Layout::new(root);
    Repo::open(&layout.repo())?.add_alternate(&source.objects())?;
    Project::open(&layout.project(), &layout.gits(), &layout.repo().join("objects"))?
        .add_alternate(&source.objects())?;
    let path = root.join(SOURCE);
    std::fs::write(&path, format!("{}\n", source.handle().display())).map_err(io(&path))
}

/// Waits for the turn to make the workspace at `root` (the lock file `lock`); `None`
/// when no lock file can be made there (makers then rely on the rename alone).
fn take_turn(lock: &Path, root: &Path) -> Result<Option<infra::lock::LockGuard>> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        match infra::lock::LockGuard::try_acquire(lock) {
            Ok(Some(guard)) => return Ok(Some(guard)),
            Ok(None) if std::time::Instant::now() < until => std::thread::sleep(std::time::Duration::from_millis(20)),
            Ok(None) => {
                let busy = std::io::Error::other("another process has been making it for two minutes");
                return Err(io(root)(busy));
            }
            Err(_) => return Ok(None),
        }
    }
}

/// Removes workspaces half-made beside `parent` by makers killed mid-way
/// (`<prefix><pid>-<n>`): every one when the makers' lock is held (no maker is at work
/// then), else those whose process is gone.
fn sweep_abandoned(parent: &Path, prefix: &str, locked: bool) {
    for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else { continue };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let gone = pid.is_some_and(|pid| !Path::new("/proc").join(pid.to_string()).exists());
        if locked || gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn init_project(layout: &Layout) -> Result<Project> {
    Ok(Project::init(&layout.project(), &layout.gits(), agent::DIR, &layout.repo().join("objects"))?)
}

/// Sets one dotted key (`roles.worker.model`, `prices."gpt-4.1".input`) in TOML text,
/// keeping comments and layout (the value's own comment too); `value` is TOML if it
/// parses as a TOML value, else a string. Tables on the way are made when missing.
pub fn set_key(text: &str, key: &str, value: &str) -> std::result::Result<String, String> {
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("it does not parse as TOML: {e}"))?;
    let path = toml_edit::Key::parse(key).map_err(|e| format!("`{key}` is not a dotted key: {e}"))?;
    let Some((leaf, tables)) = path.split_last() else { return Err("the key is empty".into()) };
    let mut table = doc.as_table_mut() as &mut dyn toml_edit::TableLike;
    let mut walked = Vec::new();
    for part in tables {
        walked.push(part.get());
        // A table made on the way shows as a header only if it gets keys of its own.
        let mut made = toml_edit::Table::new();
        made.set_implicit(true);
        let item = table.entry(part.get()).or_insert(toml_edit::Item::Table(made));
        table = item
            .as_table_like_mut()
            .ok_or_else(|| format!("`{}` is a value, not a table, so `{key}` cannot be set", walked.join(".")))?;
    }
    let mut new = parse_value(value);
    if let Some(old) = table.get(leaf.get()).and_then(toml_edit::Item::as_value) {
        *new.decor_mut() = old.decor().clone();
    }
    table.insert(leaf.get(), toml_edit::Item::Value(new));
    Ok(doc.to_string())
}

/// `after` with every role it has and `before` had not filled in from `roles.worker`:
/// each key of the worker's that the new role does not set, subtables (its context rules)
/// included.
fn roles_from_worker(before: &str, after: &str) -> String {
    let roles_of = |text: &str| -> Vec<String> {
        toml::from_str::<toml::Table>(text)
            .ok()
            .and_then(|t| t.get("roles").and_then(|r| r.as_table()).map(|r| r.keys().cloned().collect()))
            .unwrap_or_default()
    };
    let old = roles_of(before);
    let new: Vec<String> = roles_of(after).into_iter().filter(|r| !old.contains(r)).collect();
    let Ok(mut doc) = after.parse::<toml_edit::DocumentMut>() else { return after.to_owned() };
    let Some(worker) = doc.get("roles").and_then(|r| r.get("worker")).and_then(|w| w.as_table()).cloned() else {
        return after.to_owned();
    };
    for role in new {
        let Some(table) = doc.get_mut("roles").and_then(|r| r.get_mut(&role)).and_then(|t| t.as_table_mut()) else {
            continue;
        };
        table.set_implicit(false);
        // (The compactor's tools are fixed by the harness: none are copied to it.)
        let skip: &[&str] = if role == domain::grant::COMPACTOR { &["tools"] } else { &[] };
        for (key, item) in worker.iter().filter(|(k, _)| !skip.contains(k)) {
            match (table.get_mut(key), item) {
                (None, item) => {
                    let mut item = item.clone();
                    if let Some(sub) = item.as_table_mut() {
                        sub.set_position(None);
                        sub.decor_mut().clear();
                    }
                    table.insert(key, item);
                }
                // A subtable the command set part of: the rest from the worker's.
                (Some(mine), toml_edit::Item::Table(theirs)) => {
                    if let Some(mine) = mine.as_table_mut() {
                        for (k, v) in theirs.iter() {
                            if !mine.contains_key(k) {
                                mine.insert(k, v.clone());
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    doc.to_string()
}

/// `text` without `key` (dotted); refused when it is not set.
pub(crate) fn unset_key(text: &str, key: &str) -> std::result::Result<String, String> {
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("it does not parse as TOML: {e}"))?;
    let path = toml_edit::Key::parse(key).map_err(|e| format!("`{key}` is not a dotted key: {e}"))?;
    let Some((leaf, tables)) = path.split_last() else { return Err("the key is empty".into()) };
    let mut table = doc.as_table_mut() as &mut dyn toml_edit::TableLike;
    for part in tables {
        table = table
            .get_mut(part.get())
            .and_then(toml_edit::Item::as_table_like_mut)
            .ok_or_else(|| "it is not set".to_owned())?;
    }
    table.remove(leaf.get()).ok_or_else(|| "it is not set".to_owned())?;
    Ok(doc.to_string())
}

/// `value` as a TOML value if it is one (`42`, `true`, `["a"]`), else as a string.
fn parse_value(value: &str) -> toml_edit::Value {
    value.parse::<toml_edit::Value>().unwrap_or_else(|_| toml_edit::Value::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn set_key_edits_in_place_adds_to_tables_and_makes_new_ones() {
        let text = "# top\nversion = 1\n\n[retry]\nmax_attempts = 4 # how often\n\n[tool_output]\nhead_bytes = 1\n";
        let set = |key: &str, value: &str| set_key(text, key, value).expect("set");
        assert_eq!(
            set("retry.max_attempts", "7"),
            "# top\nversion = 1\n\n[retry]\nmax_attempts = 7 # how often\n\n[tool_output]\nhead_bytes = 1\n"
        );
        assert_eq!(
            set("retry.initial_backoff_ms", "10"),
            "# top\nversion = 1\n\n[retry]\nmax_attempts = 4 # how often\ninitial_backoff_ms = 10\n\n[tool_output]\nhead_bytes = 1\n"
        );
        assert_eq!(
            set("providers.x.base_url", "http://h:1"),
            format!("{text}\n[providers.x]\nbase_url = \"http://h:1\"\n")
        );
        assert_eq!(set("tool_output.tail_bytes", "5"), format!("{text}tail_bytes = 5\n"));
        // Quoted parts, arrays over several lines, and values that are not TOML.
        let prices = set("prices.\"gpt-4.1\".input", "2.0");
        assert!(prices.ends_with("[prices.\"gpt-4.1\"]\ninput = 2.0\n"), "{prices}");
        let multi = "[roles.w]\ntools = [\n  \"bash\",\n  \"grep\",\n]\nmodel = \"m\"\n";
        assert_eq!(
            set_key(multi, "roles.w.model", "x").expect("set"),
            "[roles.w]\ntools = [\n  \"bash\",\n  \"grep\",\n]\nmodel = \"x\"\n"
        );
        assert_eq!(
            set_key(multi, "roles.w.tools", "[\"cd\"]").expect("set"),
            "[roles.w]\ntools = [\"cd\"]\nmodel = \"m\"\n"
        );
        assert!(set_key(text, "version.x", "1").is_err_and(|e| e.contains("`version` is a value, not a table")));
        assert!(set_key("[oops", "a", "1").is_err_and(|e| e.contains("does not parse")));
    }
}
