//! What an agent's tools may touch: the path rules of its file tools and, with
//! `sandbox = "workspace-write"` (the default), the confinement of its commands,
//! both derived from the workspace's layout and the agent's role met with its
//! ancestors' (a child is never less confined than its parent).

use crate::Cause;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use domain::agent::{self, AgentFacts};
use domain::config::{Config, Mode, RoleConfig, Sandbox};
use domain::confinement;
use domain::id::AgentId;
use domain::layout::Layout;
use domain::question::OnAsk;
use infra::git::Repo;
use infra::sandbox::{self, Confinement, Jail, SandboxError, Support};
use infra::tools::{PathPolicy, Place};

use crate::Env;
use crate::store::snapshot;

/// Lowers the Landlock ABI offshoot believes the kernel has (to test an older or a
/// missing Landlock; it never raises it).
pub(crate) const ABI_CAP_VARIABLE: &str = "OFFSHOOT_LANDLOCK_ABI";

/// Set to `1`, offshoot behaves as on a machine without user namespaces (to test the
/// fallback; it never adds support).
pub(crate) const NO_NAMESPACES_VARIABLE: &str = "OFFSHOOT_NO_NAMESPACES";

/// The workspace, the agent's directory and its paths, all resolved.
pub struct Site<'a> {
    pub layout: &'a Layout,
    /// The workspace root with symlinks resolved.
    pub workspace: &'a Path,
    pub id: &'a AgentId,
    /// The agent's directory with symlinks resolved.
    pub own: &'a Path,
    /// Where other workspaces live (the data root's `workspaces/`), resolved: hidden
    /// from sandboxed commands like this workspace's internals.
    pub others: Option<&'a Path>,
}

impl Site<'_> {
    fn inside(&self, path: PathBuf) -> PathBuf {
        // The layout's paths start at the root as given; rebase them on the resolved one.
        match path.strip_prefix(self.layout.root()) {
            Ok(rel) => self.workspace.join(rel),
            Err(_) => path,
        }
    }

    /// The role's write paths, resolved, but one that holds this workspace or the
    /// others (a tool writing there could write the harness's internals: the queue's
    /// answers, other agents' inboxes).
    fn write_paths(&self, role: &RoleConfig) -> Vec<PathBuf> {
        let resolved = role.write_paths.iter().map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| PathBuf::from(p)));
        resolved.filter(|p| !holds_internals(p, self.workspace, self.others)).collect()
    }

    fn own_tmp(&self) -> PathBuf {
        self.inside(self.layout.tmp(self.id))
    }

    fn own_steps(&self) -> PathBuf {
        self.inside(self.layout.steps(self.id))
    }
}

/// Whether a tool writing under `path` (resolved) could write the internals of the
/// workspace at `workspace`, or of the other workspaces under `others`: it holds one,
/// or lies inside one.
pub(crate) fn holds_internals(path: &Path, workspace: &Path, others: Option<&Path>) -> bool {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let either = |w: &Path| w.starts_with(&path) || path.starts_with(w);
    either(workspace) || others.is_some_and(either)
}

/// What an agent's tools run with, but the jail (built by the caller, who may keep it):
/// how commands start (the tool environment, output limits, the secrets hidden from
/// their output), the file tools' rules, the role met with its ancestors', and the
/// confinement its commands need (none for `sandbox = "none"`).
pub(crate) struct AgentTools {
    pub(crate) commands: infra::tools::Commands,
    pub(crate) paths: PathPolicy,
    pub(crate) role: RoleConfig,
    pub(crate) confinement: Option<Confinement>,
}

/// [`AgentTools`] of the agent at `at` (`facts` its facts) under `config`, with the
/// user's environment `vars`; `None` when its role cannot be read.
pub(crate) fn agent_tools(
    at: &Site,
    repo: &Repo,
    facts: &AgentFacts,
    config: &Config,
    vars: &Env,
) -> Option<AgentTools> {
    let tmpdir = at.own_tmp();
    let name = facts.name.clone().unwrap_or_else(|| facts.id.clone());
    let identity = domain::tool_env::Identity::for_agent(config, &name);
    let placement = domain::tool_env::Placement {
        workspace: at.workspace,
        agent: at.id.as_str(),
        identity: &identity,
        tmpdir: &tmpdir,
    };
    let redactor = infra::redact::Redactor::new(domain::tool_env::secret_values(vars.vars(), config));
    let role = effective_role(repo, facts, config)?;
    let commands = infra::tools::Commands {
        env: domain::tool_env::environment(vars.vars(), config, &placement),
        head_bytes: config.tool_output.head_bytes,
        tail_bytes: config.tool_output.tail_bytes,
        redactor: Some(std::sync::Arc::new(redactor)),
        ..Default::default()
    };
    let stores = credential_stores(config, &role, vars);
    Some(AgentTools {
        commands,
        paths: path_policy(at, &role, &stores),
        confinement: confinement(at, &role, &stores),
        role,
    })
}

/// The credential stores `config` keeps from tools (`tool_env.hidden_paths`, `~` the home
/// the user's environment names), each as given and as it resolves, but those the role
/// reads (`read_paths`); and the paths the role reads there.
pub struct Stores {
    pub hidden: Vec<PathBuf>,
    pub read: Vec<PathBuf>,
}

pub fn credential_stores(config: &Config, role: &RoleConfig, vars: &Env) -> Stores {
    let home = vars.get("HOME").map(PathBuf::from);
    let expand = |p: &String| -> Option<PathBuf> {
        match p.strip_prefix("~/") {
            Some(rest) => Some(home.as_ref()?.join(rest)),
            None => Some(PathBuf::from(p)),
        }
    };
    let with_real = |path: PathBuf| -> Vec<PathBuf> {
        match std::fs::canonicalize(&path) {
            Ok(real) if real != path => vec![path, real],
            _ => vec![path],
        }
    };
    let read: Vec<PathBuf> = role.read_paths.iter().filter_map(expand).flat_map(with_real).collect();
    let hidden = config
        .tool_env
        .hidden_paths
        .iter()
        .filter_map(expand)
        .flat_map(with_real)
        // (One that is not there hides nothing, and would keep its directory from being
        // listed: a rule grants a directory whole or entry by entry.)
        .filter(|store| std::fs::symlink_metadata(store).is_ok())
        .filter(|store| !read.iter().any(|r| store.starts_with(r)))
        .collect();
    Stores { hidden, read }
}

/// How agent `id` of `ws` runs commands, its jail built (`helper`, this binary, is the
/// sandbox helper; `others`, where other workspaces are, hidden): for running something
/// as its bash would, outside its driver (an eval's check).
pub(crate) fn commands_for(
    ws: &crate::store::workspace::Workspace,
    id: &AgentId,
    helper: &std::path::Path,
    vars: &Env,
    others: Option<&std::path::Path>,
    also_read: &[PathBuf],
) -> Result<infra::tools::Commands, Cause> {
    let tip = ws.repo.branch_tip(&id.branch())?.ok_or("the agent has no branch")?;
    let facts = snapshot::read_facts(&ws.repo, tip)?;
    let (_, config) = ws.config(&facts.lineage)?;
    let workspace = std::fs::canonicalize(ws.layout.root())?;
    let own = std::fs::canonicalize(ws.layout.worktree(id))?;
    std::fs::create_dir_all(ws.layout.tmp(id))?;
    let others = others.and_then(|o| std::fs::canonicalize(o).ok());
    let site = Site { layout: &ws.layout, workspace: &workspace, id, own: &own, others: others.as_deref() };
    let tools = agent_tools(&site, &ws.repo, &facts, &config, vars).ok_or("its role cannot be read")?;
    let sandbox = match tools.confinement {
        Some(mut c) => {
            c.read.extend(also_read.iter().cloned());
            Some(std::sync::Arc::new(jail(&c, helper, vars)?))
        }
        None => None,
    };
    Ok(infra::tools::Commands { sandbox, ..tools.commands })
}

/// The file tools' rules: read anywhere but the workspace's internals, other
/// agents' directories and other workspaces (the agent's own records excepted), as
/// its commands may; write only in the
/// agent's directory, its temporary directory and the role's `write_paths`, never
/// into `.offshoot/` or `.git`.
pub(crate) fn path_policy(at: &Site, role: &RoleConfig, stores: &Stores) -> PathPolicy {
    let internals = "the workspace's internals";
    let ws = at.workspace;
    let mut writable = vec![at.own_tmp()];
    // (The file tools never write the agent's git directory: only its git does.)
    if role.mode() != Mode::ReadOnly {
        writable.push(at.own.to_owned());
        writable.extend(at.write_paths(role));
    }
    let mut policy = PathPolicy {
        writable,
        reserved: [
            Place::new(at.own.join(agent::DIR), "the harness's directory `.offshoot/`"),
            Place::new(at.own.join(".git"), "`.git`, the harness's pointer to your repository"),
        ]
        .into_iter()
        // (Never written, whatever a role's `write_paths` say.)
        .chain(
            ["repo.git", "project.git", "index", "inbox", "steps", "locks", "queue", "trust", "mcp", "worker"]
                .map(|d| Place::new(ws.join(d), internals)),
        )
        .collect(),
        unreadable: vec![
            Place::new(ws.join("repo.git"), internals),
            Place::new(ws.join("index"), internals),
            Place::new(ws.join("inbox"), internals),
            // (A worker's outbox holds the mail of every tree it drives.)
            Place::new(ws.join("worker"), internals),
            Place::new(ws.join("steps"), internals),
            Place::new(ws.join("locks"), internals),
            Place::new(ws.join("tmp"), internals),
            // (The attention queue: no agent answers its own question.)
            Place::new(ws.join("queue"), internals),
            Place::new(ws.join("trust"), internals),
            // (MCP servers' stderr and last starts.)
            Place::new(ws.join("mcp"), internals),
            Place::new(ws.join("gits"), "another agent's git"),
            Place::new(ws.join("agents"), "another agent's directory"),
        ],
        readable: vec![at.own.to_owned(), at.own_steps(), at.own_tmp(), at.inside(at.layout.git_dir(at.id))],
    };
    if let Some(others) = at.others {
        policy.unreadable.push(Place::new(others, "another workspace"));
        policy.readable.push(ws.to_owned());
    }
    let store = "a credential store (`tool_env.hidden_paths`; a role reads one it lists in `read_paths`)";
    policy.unreadable.extend(stores.hidden.iter().map(|p| Place::new(p, store)));
    policy.readable.extend(stores.read.iter().cloned());
    policy
}

/// The confinement of the role's commands, if it has one.
pub fn confinement(at: &Site, role: &RoleConfig, stores: &Stores) -> Option<Confinement> {
    if role.sandbox != Sandbox::WorkspaceWrite {
        return None;
    }
    let ws = at.workspace;
    // Its own git directory; the shared one (every agent's published branch) only
    // read.
    let own_git = at.inside(at.layout.git_dir(at.id));
    let mut read_write = vec![at.own_tmp()];
    let mut read = vec![at.own_steps(), ws.join("project.git")];
    // Read-only: its directory and its git are only read.
    match role.mode() {
        Mode::ReadOnly => read.extend([at.own.to_owned(), own_git]),
        _ => {
            read_write.extend([at.own.to_owned(), own_git]);
            read_write.extend(at.write_paths(role));
        }
    }
    // Every other workspace is hidden too (those made elsewhere with `new PATH`
    // cannot be known, and are not).
    let mut hidden = vec![ws.to_owned()];
    hidden.extend(at.others.map(Path::to_owned));
    // And the credential stores of the user's home, but those the role reads.
    hidden.extend(stores.hidden.iter().cloned());
    read.extend(stores.read.iter().filter(|p| p.exists()).cloned());
    Some(Confinement {
        read_write,
        // (The agents' git reads the shared one; nothing of the harness's `repo.git`.)
        read,
        hidden,
        network: role.network,
        processes: role.max_processes,
        file_bytes: role.max_file_bytes,
    })
}

/// The jail that enforces `confinement` on commands started through the sandbox
/// helper of `exe` (this binary; see [`sandbox::helper_program`]), as this machine can.
pub(crate) fn jail(confinement: &Confinement, exe: &Path, env: &Env) -> Result<Jail, SandboxError> {
    let support = support(exe, env);
    let rules = sandbox::rules(confinement, abi(env), support.namespaces.is_ok())?;
    Ok(Jail {
        helper: sandbox::helper_program(exe),
        rules,
        namespaces: support.namespaces.is_ok(),
        network: confinement.network,
        processes: confinement.processes,
        file_bytes: confinement.file_bytes,
        read_only_but: (support.namespaces.is_ok() && support.read_only).then(|| confinement.read_write.clone()),
    })
}

/// The role `facts`' agent runs with: its own met with every ancestor's (a role an
/// ancestor no longer has, or an ancestor removed, confines nothing more; an ancestor
/// whose facts cannot be read confines everything: the agent runs nothing), each in
/// the mode its agent was run in (`--mode`), if one was. Write paths are compared as
/// the sandbox will see them, resolved.
pub(crate) fn effective_role(repo: &Repo, facts: &AgentFacts, config: &Config) -> Option<RoleConfig> {
    let own = AgentId::parse(&facts.id).ok().and_then(|id| repo.branch_tip(&id.branch()).ok().flatten());
    let mut role = as_run(repo, own, config.role(&facts.role)?);
    let mut parent = facts.parent.clone();
    while let Some(id) = parent {
        let id = AgentId::parse(&id).ok()?;
        let Some(tip) = repo.branch_tip(&id.branch()).ok()? else { break };
        let above = snapshot::read_facts(repo, tip).ok()?;
        match config.role(&above.role) {
            Some(theirs) => role = confinement::meet(&role, &as_run(repo, Some(tip), theirs)),
            // (A role gone from the config confines nothing more; the mode its run
            // chose still does.)
            None => {
                if let Some(mode) = recorded_mode(repo, tip) {
                    role = role.clone().in_mode(role.mode().min(mode));
                }
            }
        }
        parent = above.parent;
    }
    Some(role)
}

/// The mode agent `id` runs in by its own choice: the one its run recorded, else its
/// role's (its ancestors may confine it further); `None` when it cannot be read.
pub fn own_mode(ws: &crate::store::workspace::Workspace, id: &AgentId) -> Option<Mode> {
    let tip = ws.repo.branch_tip(&id.branch()).ok()??;
    if let Some(mode) = recorded_mode(&ws.repo, tip) {
        return Some(mode);
    }
    let facts = crate::store::snapshot::read_facts(&ws.repo, tip).ok()?;
    let (_, config) = ws.config(&facts.lineage).ok()?;
    Some(config.role(&facts.role)?.mode())
}

/// The mode the run of the agent whose branch stands at `tip` chose, if it chose one (one
/// that cannot be read is the most confined).
fn recorded_mode(repo: &Repo, tip: infra::git::CommitId) -> Option<Mode> {
    let bytes = repo.read_file(tip, agent::MODE).ok().flatten()?;
    Some(Mode::parse(&String::from_utf8_lossy(&bytes)).unwrap_or(Mode::ReadOnly))
}

/// `role` as the agent whose branch stands at `tip` runs it: resolved, in the mode
/// its run chose (one that cannot be read is the most confined).
fn as_run(repo: &Repo, tip: Option<infra::git::CommitId>, role: &RoleConfig) -> RoleConfig {
    let mode = tip.and_then(|tip| recorded_mode(repo, tip)).unwrap_or_else(|| role.mode());
    resolved(role).in_mode(mode)
}

/// What the agent's run does when a call needs a yes, and the top of its tree: its
/// own `--on-ask`, else its nearest ancestor's, else `deny` (no one was said to listen).
pub(crate) fn tree_policy(repo: &Repo, facts: &AgentFacts) -> (OnAsk, String) {
    let read = |id: &str| {
        let id = AgentId::parse(id).ok()?;
        let tip = repo.branch_tip(&id.branch()).ok()??;
        let on_ask = repo.read_file(tip, agent::ON_ASK).ok().flatten();
        let on_ask = on_ask.map(|b| OnAsk::parse(&String::from_utf8_lossy(&b)).unwrap_or(OnAsk::Deny));
        Some((on_ask, snapshot::read_facts(repo, tip).ok()?.parent))
    };
    let (mut on_ask, mut root) = (None, facts.id.clone());
    let mut next = Some(facts.id.clone());
    while let Some(id) = next.take() {
        let Some((said, parent)) = read(&id) else { break };
        root = id;
        on_ask = on_ask.or(said);
        next = parent;
    }
    (on_ask.unwrap_or(OnAsk::Deny), root)
}

/// `role` with its write paths resolved through the filesystem (`..` and links).
pub(crate) fn resolved(role: &RoleConfig) -> RoleConfig {
    let mut role = role.clone();
    for path in &mut role.write_paths {
        if let Ok(real) = std::fs::canonicalize(&*path) {
            *path = real.display().to_string();
        }
    }
    role
}

/// What this machine lets the sandbox helper do, found once per process by running
/// the helper of `exe` (this binary); [`NO_NAMESPACES_VARIABLE`] pretends there are no
/// user namespaces.
pub(crate) fn support(exe: &Path, env: &Env) -> Support {
    static FOUND: OnceLock<Support> = OnceLock::new();
    if env.get(NO_NAMESPACES_VARIABLE) == Some("1") {
        return Support::without_namespaces(&format!("{NO_NAMESPACES_VARIABLE}=1"));
    }
    FOUND.get_or_init(|| sandbox::probe(&sandbox::helper_program(exe))).clone()
}

/// The Landlock ABI to plan with: the kernel's, lowered by [`ABI_CAP_VARIABLE`].
pub fn abi(env: &Env) -> i32 {
    sandbox::abi(env.get(ABI_CAP_VARIABLE).and_then(|v| v.parse().ok()))
}

/// Refuses a role whose sandbox this kernel cannot enforce, before anything runs.
pub fn check(role: &RoleConfig, env: &Env) -> Result<(), SandboxError> {
    if role.sandbox == Sandbox::WorkspaceWrite && abi(env) < 1 {
        return Err(SandboxError::Unsupported);
    }
    Ok(())
}
