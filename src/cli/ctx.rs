//! `Ctx`: everything a verb needs, built once from the command line and the
//! environment: where the workspace and the harness roots are, the environment
//! variables the engine may use, and the output.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use domain::id::AgentId;
use engine::Env;
use engine::agents::interrupt::Interrupt;
use engine::agents::runtime::Runtime;
use engine::store::workspace::{self, ConfigFiles, Workspace};
use infra::git::{Discovered, UserRepo};

use super::error::CliError;
use super::out::Out;

pub(crate) struct Ctx {
    pub(crate) env: Env,
    pub(crate) out: Out,
    /// Where workspaces live (`OFFSHOOT_HOME`, else `$XDG_DATA_HOME/offshoot`).
    pub(crate) data_root: PathBuf,
    /// Where user config and templates live (`OFFSHOOT_HOME`, else `$XDG_CONFIG_HOME/offshoot`).
    pub(crate) config_root: PathBuf,
    workspace: Option<PathBuf>,
    /// This binary, for the drivers the runtime launches.
    pub(crate) exe: PathBuf,
    /// Stop requests (Ctrl-C, SIGTERM) for a driver this command runs.
    pub(crate) interrupt: Interrupt,
    /// The agent this command drives, once known (for what a signal prints).
    pub(crate) driving: Arc<OnceLock<String>>,
}

/// The current user's home directory as `/etc/passwd` says it.
fn passwd_home() -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    home_in(&std::fs::read_to_string("/etc/passwd").ok()?, uid)
}

/// The home directory of `uid` in `passwd` (the password file's lines), if absolute.
fn home_in(passwd: &str, uid: u32) -> Option<PathBuf> {
    let uid = uid.to_string();
    let fields = passwd.lines().map(|l| l.split(':').collect::<Vec<_>>()).find(|f| f.len() > 5 && f[2] == uid)?;
    Some(PathBuf::from(fields[5])).filter(|h| h.is_absolute())
}

/// `path` made absolute and real, once, as the CLI takes it: a workspace's paths reach
/// agents (`.git`'s `gitdir:`, `TMPDIR`), who run elsewhere, and are compared with the
/// real paths an agent's file tools resolve (a link or `..` in `-w` would miss).
pub(crate) fn real(path: PathBuf) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    infra::tools::resolve(&cwd, path)
}

impl Ctx {
    pub(crate) fn from_env(workspace: Option<PathBuf>, json: bool) -> Ctx {
        let env = Env::new(std::env::vars());
        // The user's own programs a remote is reached through (ssh, credential helpers),
        // without the model providers' keys, which none of them needs.
        infra::git::transport::set_environment(
            env.vars().filter(|(k, _)| !k.ends_with("_API_KEY")).map(|(k, v)| (k.to_owned(), v.to_owned())).collect(),
        );
        engine::store::workspace::set_search_path(env.get("PATH").unwrap_or_default().to_owned());
        // (With no HOME — a container's process started with an empty environment — the
        // password file's home: the current directory would put the data root inside
        // whatever directory offshoot was started in.)
        let home = env.get("HOME").map(PathBuf::from).or_else(passwd_home).unwrap_or_else(|| PathBuf::from("."));
        let (data_root, config_root) = match env.get("OFFSHOOT_HOME") {
            Some(root) => (PathBuf::from(root), PathBuf::from(root)),
            None => (
                env.get("XDG_DATA_HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| home.join(".local/share"))
                    .join("offshoot"),
                env.get("XDG_CONFIG_HOME").map(PathBuf::from).unwrap_or_else(|| home.join(".config")).join("offshoot"),
            ),
        };
        let (data_root, config_root) = (real(data_root), real(config_root));
        let workspace = workspace.map(real);
        let out = Out::new(json, env.get("NO_COLOR").is_some());
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("offshoot"));
        Ctx {
            env,
            out,
            data_root,
            config_root,
            workspace,
            exe,
            interrupt: Interrupt::default(),
            driving: Arc::new(OnceLock::new()),
        }
    }

    pub(crate) fn default_workspace(&self) -> PathBuf {
        self.data_root.join("workspaces").join("default")
    }

    pub(crate) fn workspace_path(&self) -> PathBuf {
        self.workspace.clone().unwrap_or_else(|| self.default_workspace())
    }

    pub(crate) fn explicit_workspace(&self) -> Option<&PathBuf> {
        self.workspace.as_ref()
    }

    /// Whether a workspace is at `path` (its repository is there).
    pub(crate) fn looks_made(&self, path: &Path) -> bool {
        path.join("repo.git").is_dir()
    }

    /// The agent `named` (an id or a name), or else the one whose directory the current
    /// directory is in.
    pub(crate) fn agent_named(&self, ws: &Workspace, named: Option<&str>) -> Result<AgentId, CliError> {
        if let Some(named) = named {
            return Ok(engine::agents::resolve(ws, named)?);
        }
        self.agent_here(ws).ok_or_else(|| {
            CliError::usage("name an agent (its id or name)")
                .hint("inside an agent's directory that agent is the default; `offshoot ls` lists them")
        })
    }

    /// The agent whose directory (`<workspace>/agents/<id>/`) holds the current directory.
    fn agent_here(&self, ws: &Workspace) -> Option<AgentId> {
        let cwd = std::fs::canonicalize(std::env::current_dir().ok()?).ok()?;
        let agents = std::fs::canonicalize(ws.layout.root().join("agents")).ok()?;
        let first = cwd.strip_prefix(&agents).ok()?.components().next()?;
        let id = AgentId::parse(&first.as_os_str().to_string_lossy()).ok()?;
        ws.repo.branch_tip(&id.branch()).ok().flatten().map(|_| id)
    }

    /// Says there is no workspace here yet (for `ls` and `tree`, which make nothing), and
    /// where the demo's agents are if one ran.
    pub(crate) fn no_workspace(&self) {
        let at = self.unmade_workspace().unwrap_or_else(|_| self.default_workspace());
        self.out.progress(&format!("· no workspace at {} yet: no agents", at.display()));
        if let Some(demo) = self.latest_demo(&at) {
            self.out.progress(&format!(
                "· the demo's are in its own workspace: `export OFFSHOOT_WORKSPACE={}`",
                demo.display()
            ));
        }
    }

    /// The newest demo workspace, other than `not`.
    fn latest_demo(&self, not: &Path) -> Option<PathBuf> {
        std::fs::read_dir(self.data_root.join("workspaces"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("demo-"))
            .map(|e| e.path())
            .filter(|p| p != not)
            .max()
    }

    /// Says there are no agents in `ws`, and where the demo's are when one ran (its
    /// workspace is its own, made under the data root).
    pub(crate) fn no_agents(&self, ws: &Workspace) {
        let line = match self.latest_demo(ws.layout.root()) {
            Some(demo) => format!(
                "· no agents yet in {}; the demo's are in its own workspace: `export OFFSHOOT_WORKSPACE={}`",
                ws.layout.root().display(),
                demo.display()
            ),
            None => "· no agents yet; start one with `offshoot prompt \"…\"`, or `offshoot` for a chat".to_owned(),
        };
        self.out.progress(&line);
    }

    /// The config a new workspace starts with: embedded defaults, overridden by
    /// files in `<config-root>/template/`.
    /// Nothing goes ahead on a broken one: the error names its file.
    pub(crate) fn template(&self) -> Result<ConfigFiles, CliError> {
        let files = workspace::template_files(Some(&self.template_dir()))?;
        match workspace::validate_files(&files) {
            Ok(_) => Ok(files),
            Err(e) => {
                let own = self.template_dir().join(domain::config::FILE);
                let e = e.in_file(&own);
                Err(CliError::usage_error(
                    format!("your template, which new workspaces start from, is not valid: {e}"),
                    e,
                )
                .hint("`offshoot config edit --template` opens it to fix"))
            }
        }
    }

    /// The directory of files every new workspace's config starts from.
    pub(crate) fn template_dir(&self) -> PathBuf {
        self.config_root.join("template")
    }

    /// The template's `offshoot.toml`: this user's providers, MCP servers and sandbox,
    /// which a replayed bundle's configs and a worker's remote configs run with.
    pub(crate) fn template_config(&self) -> Result<String, CliError> {
        let template = self.template()?;
        Ok(template
            .iter()
            .find(|(p, _)| p == domain::config::FILE)
            .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default())
    }

    /// The agent runtime of `ws`: deposits, wake-ups, launches and stops.
    pub(crate) fn runtime(&self, ws: &Workspace) -> Runtime {
        Runtime::new(ws.layout.clone(), self.exe.clone(), self.env.clone(), self.interrupt.clone())
            .hiding_workspaces(self.data_root.join("workspaces"))
    }

    /// Opens the workspace for a verb that makes agents or config (`prompt`, the chat,
    /// `config set`): `-w`'s, the one the current directory is in (an agent's directory
    /// included), the project's inside a repository, else the default one — the last two
    /// made on first use.
    pub(crate) fn workspace_making(&self) -> Result<Workspace, CliError> {
        if let Some(ws) = self.selected()? {
            return Ok(ws);
        }
        let (ws, made) = match self.project_here()? {
            Some(user) => {
                Workspace::open_or_create_for_project(&self.project_workspace(user.root()), &self.template()?, &user)?
            }
            None => Workspace::open_or_create(&self.default_workspace(), &self.template()?)?,
        };
        if made {
            self.out.note(None, &format!("made the workspace {} (its first use)", ws.layout.root().display()));
        }
        Ok(ws)
    }

    /// Where offshoot keeps its data and config must be directories (or not exist yet).
    pub(crate) fn roots_problem(&self) -> Option<CliError> {
        let named = if self.env.get("OFFSHOOT_HOME").is_some() { "OFFSHOOT_HOME" } else { "the data root" };
        [&self.data_root, &self.config_root].into_iter().find(|p| p.exists() && !p.is_dir()).map(|p| {
            CliError::usage(format!("{named} ({}) is not a directory", p.display()))
                .hint("it names the directory offshoot keeps its workspaces and config in")
        })
    }

    /// Opens the workspace as [`Ctx::workspace_making`] selects it, for every other verb:
    /// one that does not exist yet is said, never made.
    pub(crate) fn workspace(&self) -> Result<Workspace, CliError> {
        match self.existing_workspace()? {
            Some(ws) => Ok(ws),
            None => {
                Err(CliError::usage(format!("there is no workspace at {} yet", self.unmade_workspace()?.display()))
                    .hint("the first `offshoot prompt \"…\"` (or `offshoot` for a chat) makes it"))
            }
        }
    }

    /// The workspace as [`Ctx::workspace_making`] selects it, if it exists.
    pub(crate) fn existing_workspace(&self) -> Result<Option<Workspace>, CliError> {
        if let Some(ws) = self.selected()? {
            return Ok(Some(ws));
        }
        let path = self.unmade_workspace()?;
        match self.looks_made(&path) {
            true => Ok(Some(Workspace::open(&path)?)),
            false => Ok(None),
        }
    }

    /// Where the workspace would be when neither `-w` nor the current directory names one.
    pub(crate) fn unmade_workspace(&self) -> Result<PathBuf, CliError> {
        Ok(match self.project_here()? {
            Some(user) => self.project_workspace(user.root()),
            None => self.default_workspace(),
        })
    }

    /// The workspace `-w` names, or the one the current directory is in (a workspace's
    /// directory, or an agent's below it: not a project of its own).
    fn selected(&self) -> Result<Option<Workspace>, CliError> {
        if let Some(path) = &self.workspace {
            return Ok(Some(Workspace::open(path)?));
        }
        let cwd = std::env::current_dir()
            .map_err(|e| CliError::runtime(format!("cannot read the current directory: {e}")))?;
        // The outermost workspace above: an agent's directory is inside its workspace,
        // and what an agent makes there (a workspace of its own, its config pointing
        // its provider at a server of the agent's choosing) must never be taken for the
        // user's. A directory that only looks like one (no config lineage) is passed over.
        // Nor is one inside a repository's working tree (planted in a project, and come
        // back with an agent's work): that directory is the project's.
        let ceilings = self.git_ceilings();
        let found = cwd
            .ancestors()
            .filter(|dir| looks_like_workspace(dir))
            .last()
            .filter(|dir| matches!(project_at(dir, &ceilings), Ok(None)));
        match found {
            Some(dir) => match Workspace::open(dir) {
                Ok(ws) if ws.config_tip("default").is_ok() => Ok(Some(ws)),
                _ => Ok(None),
            },
            None => Ok(None),
        }
    }

    /// The repository holding the current directory, if any; a bare one is refused.
    pub(crate) fn project_here(&self) -> Result<Option<UserRepo>, CliError> {
        let cwd = std::env::current_dir()
            .map_err(|e| CliError::runtime(format!("cannot read the current directory: {e}")))?;
        project_at(&cwd, &self.git_ceilings())
    }

    /// `GIT_CEILING_DIRECTORIES`, honoured as git does when looking for the project.
    pub(crate) fn git_ceilings(&self) -> Vec<PathBuf> {
        let list = self.env.get("GIT_CEILING_DIRECTORIES").unwrap_or_default();
        list.split(':').filter(|p| !p.is_empty()).map(PathBuf::from).collect()
    }

    /// `<data-root>/workspaces/<dir name>-<hash of the path>`: the workspace of the
    /// project whose working tree is `root`.
    pub(crate) fn project_workspace(&self, root: &Path) -> PathBuf {
        let name = root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "project".into());
        let name: String =
            name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
        self.data_root
            .join("workspaces")
            .join(format!("{name}-{:08x}", domain::id::fnv1a(root.as_os_str().as_encoded_bytes()) as u32))
    }

    /// Where a git identity may be set for the user (`~/.gitconfig`, then the XDG one).
    pub(crate) fn git_config_files(&self) -> Vec<PathBuf> {
        let home = self.env.get("HOME").map(PathBuf::from);
        let xdg =
            self.env.get("XDG_CONFIG_HOME").map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(".config")));
        let mut files = Vec::new();
        if let Some(home) = home {
            files.push(home.join(".gitconfig"));
        }
        if let Some(xdg) = xdg {
            files.push(xdg.join("git/config"));
        }
        files
    }
}

/// The repository whose working tree holds `dir`, if any; a bare one is refused.
pub(crate) fn project_at(dir: &Path, ceilings: &[PathBuf]) -> Result<Option<UserRepo>, CliError> {
    match infra::git::discover(dir, ceilings).map_err(CliError::runtime_from)? {
        Discovered::Repo(user) => Ok(Some(user)),
        Discovered::Bare(path) => Err(CliError::usage(format!(
            "{} is a bare repository: agents need a working tree to start from and to give their work back to",
            path.display()
        ))
        .hint("run offshoot in a clone or worktree of it, or give `-w` for a workspace of its own")),
        Discovered::None => Ok(None),
    }
}

/// Whether `dir` has a workspace's layout (`repo.git`, `agents/`, `steps/`).
fn looks_like_workspace(dir: &Path) -> bool {
    dir.join("repo.git").is_dir() && dir.join("agents").is_dir() && dir.join("steps").is_dir()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_home_comes_from_the_users_line_of_the_password_file() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nkit:x:1000:1000::/home/kit:/bin/sh\nodd:x:7:7::rel:/bin/sh\n";
        assert_eq!(super::home_in(passwd, 1000), Some("/home/kit".into()));
        assert_eq!(super::home_in(passwd, 0), Some("/root".into()));
        assert_eq!(super::home_in(passwd, 7), None, "a relative home is none");
        assert_eq!(super::home_in(passwd, 42), None);
    }
}
