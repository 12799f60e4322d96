//! The session table and the requests that change it: new, load, resume, fork, close,
//! list. A session is an agent; until its first prompt it is only an id reserved for
//! the agent that prompt makes (the engine makes an agent with its first message).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_client_protocol::Error;
use agent_client_protocol::v1::schema::{
    CloseSessionRequest, CloseSessionResponse, ForkSessionRequest, ForkSessionResponse, ListSessionsRequest,
    ListSessionsResponse, LoadSessionRequest, LoadSessionResponse, NewSessionRequest, NewSessionResponse,
    ResumeSessionRequest, ResumeSessionResponse, SessionConfigOption, SessionConfigSelectOption, SessionId,
    SessionInfo, SessionNotification, SetSessionConfigOptionRequest, SetSessionConfigOptionResponse,
};

use domain::id::AgentId;
use engine::agents;
use engine::ops::inspect;
use engine::store::workspace::Workspace;

use super::{Connection, Shared, internal, invalid, modes, updates};
use crate::cli::{CliError, Ctx};

/// One session: the agent it is and where its workspace is.
#[derive(Clone)]
pub(super) struct Session {
    pub(super) workspace: PathBuf,
    pub(super) agent: AgentId,
    /// How the agent is to be made at the first prompt; `None` once it exists.
    pub(super) unmade: Option<Unmade>,
    pub(super) working: bool,
    /// What its model calls have cost, in US dollars (those priced).
    pub(super) cost: f64,
    /// Whether its work is written into the project's checkout as it is made.
    pub(super) in_place: bool,
    /// A mode set and not yet sent with a prompt.
    pub(super) mode: Option<domain::config::Mode>,
    /// The MCP servers the editor passed, given to the agent when it is made.
    pub(super) servers: Servers,
}

/// MCP servers as offshoot's, by name.
pub(super) type Servers = std::collections::BTreeMap<String, domain::config::McpServer>;

/// The servers of a request, checked by the rules of `[mcp_servers]`.
fn servers_of(passed: &[agent_client_protocol::v1::schema::McpServer]) -> Result<Servers, Error> {
    let servers = super::servers::taken(passed);
    domain::config::check_servers(&servers, &|key, rule| invalid(format!("MCP server {key}: {rule}")))?;
    Ok(servers)
}

/// An agent not made yet: the random number its id was reserved from, and for a fork
/// the commit it continues.
#[derive(Clone)]
pub(super) struct Unmade {
    pub(super) random: u32,
    pub(super) from: Option<String>,
}

/// The sessions of this connection, by id.
#[derive(Default)]
pub(super) struct Table(Mutex<HashMap<String, Session>>);

impl Table {
    /// Runs `f` on the table.
    pub(super) fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Session>) -> T) -> Result<T, Error> {
        let mut sessions = self.0.lock().map_err(internal)?;
        Ok(f(&mut sessions))
    }

    /// The workspace of session `named`, while it is one.
    pub(super) fn workspace_of(&self, named: &str) -> Option<PathBuf> {
        self.with(|s| s.get(named).map(|s| s.workspace.clone())).ok().flatten()
    }
}

/// The workspace of a session in `cwd`: `-w`'s, the project's when `cwd` is inside a
/// repository, else the default one (made on first use, as `prompt` does).
fn workspace_for(ctx: &Ctx, cwd: &Path, directories: bool) -> Result<Workspace, Error> {
    if !cwd.is_absolute() || !cwd.is_dir() {
        return Err(invalid(format!("cwd `{}` is not an absolute path to a directory", cwd.display())));
    }
    let made = (|| -> Result<Workspace, CliError> {
        if let Some(path) = ctx.explicit_workspace() {
            return Ok(Workspace::open(path)?);
        }
        Ok(match crate::cli::ctx::project_at(cwd, &ctx.git_ceilings())? {
            Some(user) => {
                Workspace::open_or_create_for_project(&ctx.project_workspace(user.root()), &ctx.template()?, &user)?.0
            }
            None if directories => {
                let user = directory_project(ctx, cwd)?;
                Workspace::open_or_create_for_project(&ctx.project_workspace(cwd), &ctx.template()?, &user)?.0
            }
            None => Workspace::open_or_create(&ctx.default_workspace(), &ctx.template()?)?.0,
        })
    })();
    made.map_err(|e| internal(e.message()))
}

fn workspace_in(shared: &Shared, cwd: &Path) -> Result<Workspace, Error> {
    workspace_for(&*shared.ctx.lock().map_err(internal)?, cwd, shared.directories)
}

/// `--directories`: `cwd`, in no repository, as a project of its own — its files
/// taken into a git directory beside its workspace (nothing is written in `cwd`), so
/// its agents start from them and work in place. Never `/` or the home directory:
/// everything under them (keys among it) would enter every agent's directory.
fn directory_project(ctx: &Ctx, cwd: &Path) -> Result<infra::git::UserRepo, CliError> {
    let cwd = cwd.canonicalize().map_err(|e| CliError::usage(format!("cwd `{}`: {e}", cwd.display())))?;
    // (Nor a directory holding either, or offshoot's own data: what the sandbox hides
    // from agents — keys under the home, other workspaces — would be in their trees.)
    let home = ctx.env.get("HOME").map(PathBuf::from);
    let held = [home.as_ref(), Some(&ctx.data_root), Some(&ctx.config_root)]
        .into_iter()
        .flatten()
        .find(|p| p.canonicalize().unwrap_or_else(|_| p.to_path_buf()).starts_with(&cwd));
    if cwd.parent().is_none() || held.is_some() {
        let why = match held {
            Some(held) => format!("it holds {}, which agents must not read", held.display()),
            None => "it is the root of the file system".to_owned(),
        };
        return Err(CliError::usage(format!(
            "cwd `{}` is not taken as a project: {why}; everything under it would be copied into every agent's directory",
            cwd.display()
        )));
    }
    let git_dir = ctx.project_workspace(&cwd).with_extension("git");
    infra::git::for_directory(&git_dir, &cwd).map_err(CliError::runtime_from)
}

/// A session with a new id reserved, its agent made at its first prompt (continuing
/// `from`, for a fork).
fn reserve(
    shared: &Shared,
    ws: &Workspace,
    (from, in_place): (Option<String>, bool),
    mode: Option<domain::config::Mode>,
    servers: Servers,
) -> Result<String, Error> {
    let random = engine::random_u32();
    let agent = AgentId::root_from_random(random);
    let named = agent.to_string();
    let session = Session {
        workspace: ws.layout.root().to_path_buf(),
        agent,
        unmade: Some(Unmade { random, from }),
        working: false,
        cost: 0.0,
        in_place,
        mode,
        servers,
    };
    shared.sessions.with(|s| s.insert(named.clone(), session))?;
    Ok(named)
}

pub(super) fn new(shared: &Shared, request: NewSessionRequest) -> Result<NewSessionResponse, Error> {
    let servers = servers_of(&request.mcp_servers)?;
    let ws = workspace_in(shared, &request.cwd)?;
    super::auth::check(shared, &ws)?;
    let possible = has_project(&ws);
    let in_place = possible && !shared.copy;
    let named = reserve(shared, &ws, (None, in_place), None, servers)?;
    Ok(NewSessionResponse::new(named)
        .config_options(work_option(in_place, possible))
        .modes(modes::state(modes::of_new(&ws))))
}

/// The editor's servers are the agent's (this connection's: none takes away the last
/// one's), from its driver's next run.
pub(super) fn give_servers(ws: &Workspace, agent: &AgentId, servers: &Servers) -> Result<(), Error> {
    agents::set_client_servers(ws, agent, servers).map_err(internal)
}

fn has_project(ws: &Workspace) -> bool {
    ws.user_repo().ok().flatten().is_some()
}

/// The session option saying where the work lands: `in-place` (written into the
/// project's checkout as it is made) or `copy` (the agent's own directory until
/// `offshoot apply`); in-place only where there is a project.
fn work_option(in_place: bool, possible: bool) -> Vec<SessionConfigOption> {
    let mut values = vec![SessionConfigSelectOption::new(COPY, "Copy (apply it when you want it)")];
    if possible {
        values.insert(0, SessionConfigSelectOption::new(IN_PLACE, "In place (edits land in this checkout)"));
    }
    let current = if in_place { IN_PLACE } else { COPY };
    vec![
        SessionConfigOption::select(WORK, "Where the work lands", current, values)
            .description("Chosen before the first prompt; the agent's steps are commits on its own branch either way"),
    ]
}

const WORK: &str = "work";
const IN_PLACE: &str = "in-place";
const COPY: &str = "copy";

/// `session/set_config_option`: where the work lands, before the first prompt.
pub(super) fn set_option(
    shared: &Shared,
    request: SetSessionConfigOptionRequest,
) -> Result<SetSessionConfigOptionResponse, Error> {
    let named = request.session_id.to_string();
    if request.config_id.to_string() != WORK {
        return Err(invalid(format!("no session option `{}` (there is `{WORK}`)", request.config_id)));
    }
    let value = request.value.as_value_id().map(|v| v.to_string()).unwrap_or_default();
    let in_place = match value.as_str() {
        IN_PLACE => true,
        COPY => false,
        other => return Err(invalid(format!("`{other}` is not a value of `{WORK}` (`{IN_PLACE}` or `{COPY}`)"))),
    };
    let workspace = shared.sessions.workspace_of(&named).ok_or_else(|| invalid(format!("no session `{named}`")))?;
    let possible = has_project(&Workspace::open(&workspace).map_err(internal)?);
    if in_place && !possible {
        return Err(invalid(format!(
            "session `{named}` has no project to work in place in: its cwd is in no git repository"
        )));
    }
    shared.sessions.with(|s| match s.get_mut(&named) {
        Some(session) if session.unmade.is_some() && !session.working => {
            session.in_place = in_place;
            Ok(())
        }
        _ => Err(invalid(format!("where the work of session `{named}` lands was settled at its first prompt"))),
    })??;
    Ok(SetSessionConfigOptionResponse::new(work_option(in_place, possible)))
}

/// The agent `named` of the workspace of `cwd`, taken into the table (a root: a child
/// is its parent's to talk to).
fn adopt(shared: &Shared, named: &SessionId, cwd: &Path) -> Result<(Workspace, AgentId), Error> {
    let ws = workspace_in(shared, cwd)?;
    let named = named.to_string();
    let agent = agents::resolve(&ws, &named)
        .ok()
        .filter(|a| a.as_str() == named && a.parent().is_none())
        .ok_or_else(|| invalid(format!("no session `{named}` in the workspace of {}", cwd.display())))?;
    let known = shared.sessions.with(|s| s.contains_key(&named))?;
    if !known {
        let states = inspect::states(&ws).map_err(internal)?;
        let cost = states.iter().find(|s| s.id == named).and_then(|s| s.cost_usd).unwrap_or(0.0);
        let in_place = agents::works_in_place(&ws, &agent).map_err(internal)?;
        if in_place {
            // (What a connection that went away had not written yet.)
            super::agents_of::mirror(&ws, &agent);
        }
        let workspace = ws.layout.root().to_path_buf();
        let servers = Servers::new();
        let session = Session {
            workspace,
            agent: agent.clone(),
            unmade: None,
            working: false,
            cost,
            in_place,
            mode: None,
            servers,
        };
        // (One taken in meanwhile — at work, maybe — stays as it is.)
        shared.sessions.with(|s| {
            s.entry(named).or_insert(session);
        })?;
    }
    Ok((ws, agent))
}

/// `session/load`: the session taken in, its transcript replayed as updates.
pub(super) fn load(
    shared: &Shared,
    request: LoadSessionRequest,
    cx: &Connection,
) -> Result<LoadSessionResponse, Error> {
    let servers = servers_of(&request.mcp_servers)?;
    let (ws, agent) = adopt(shared, &request.session_id, &request.cwd)?;
    give_servers(&ws, &agent, &servers)?;
    let (_, entries) = inspect::transcript(&ws, &agent).map_err(internal)?;
    for update in updates::replay(&entries) {
        cx.send_notification(SessionNotification::new(request.session_id.clone(), update))?;
    }
    Ok(LoadSessionResponse::new().modes(modes::state(modes::of_agent(&ws, &agent, None))))
}

/// `session/resume`: the session taken in, nothing replayed.
pub(super) fn resume(shared: &Shared, request: ResumeSessionRequest) -> Result<ResumeSessionResponse, Error> {
    let servers = servers_of(&request.mcp_servers)?;
    let (ws, agent) = adopt(shared, &request.session_id, &request.cwd)?;
    give_servers(&ws, &agent, &servers)?;
    Ok(ResumeSessionResponse::new().modes(modes::state(modes::of_agent(&ws, &agent, None))))
}

/// `session/fork`: a new session continuing where `session_id` is now (its tip: a fork
/// made later, by `offshoot fork --step`, can go back further). A session with no agent
/// yet forks into another such.
pub(super) fn fork(shared: &Shared, request: ForkSessionRequest) -> Result<ForkSessionResponse, Error> {
    let servers = servers_of(&request.mcp_servers)?;
    let named = request.session_id.to_string();
    let engine = |e: agents::AgentError| internal(CliError::from(e).message());
    let known = shared.sessions.with(|s| s.get(&named).map(|s| (s.workspace.clone(), s.unmade.clone(), s.mode)))?;
    // The workspace, the commit the fork continues, and the mode it runs in (its
    // source's, as `offshoot fork` has it).
    let (ws, from, mode) = match known {
        Some((workspace, Some(unmade), pending)) => {
            let ws = Workspace::open(&workspace).map_err(internal)?;
            let mode = pending.unwrap_or_else(|| modes::of_new(&ws));
            (ws, unmade.from, mode)
        }
        Some((workspace, None, pending)) => {
            let ws = Workspace::open(&workspace).map_err(internal)?;
            let agent = AgentId::parse(&named).map_err(internal)?;
            // (A fork never runs looser than its source: a looser mode set and not sent
            // yet does not go with it.)
            let recorded = modes::of_agent(&ws, &agent, None);
            let mode = pending.map_or(recorded, |p| p.min(recorded));
            let tip = agents::revision(&ws, &named).map_err(engine)?;
            (ws, Some(tip), mode)
        }
        None => {
            let (ws, agent) = adopt(shared, &request.session_id, &request.cwd)?;
            let mode = modes::of_agent(&ws, &agent, None);
            let tip = agents::revision(&ws, agent.as_str()).map_err(engine)?;
            (ws, Some(tip), mode)
        }
    };
    // (A fork keeps its work to itself: two agents writing one checkout would write
    // over each other. The option makes it in place before its first prompt.)
    let possible = has_project(&ws);
    // (The mode shown is the mode it runs in: made with it, as `Start.mode`.)
    let forked = reserve(shared, &ws, (from, false), Some(mode), servers)?;
    Ok(ForkSessionResponse::new(forked).config_options(work_option(false, possible)).modes(modes::state(mode)))
}

/// `session/close`: its work stopped (as a cancel stops it) and the session let go; the
/// agent stays, loadable later.
pub(super) fn close(shared: &Arc<Shared>, request: CloseSessionRequest) -> Result<CloseSessionResponse, Error> {
    let named = request.session_id.to_string();
    let closed = shared.sessions.with(|s| s.remove(&named))?;
    let session = closed.ok_or_else(|| invalid(format!("no session `{named}`: nothing to close")))?;
    if session.working {
        super::agents_of::stop_in_background(shared, session.workspace, session.agent);
    }
    Ok(CloseSessionResponse::new())
}

/// `session/list`: the root agents of the workspace of `cwd` (this process's when none
/// is given).
pub(super) fn list(shared: &Shared, request: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
    let cwd = match &request.cwd {
        Some(cwd) => cwd.clone(),
        None => std::env::current_dir().map_err(internal)?,
    };
    let ws = workspace_in(shared, &cwd)?;
    let listed = agents::list(&ws).map_err(internal)?;
    let sessions = listed
        .into_iter()
        .filter_map(|l| l.facts)
        .filter(|f| f.parent.is_none())
        .map(|f| {
            let title = f.name.clone().unwrap_or_else(|| f.id.clone());
            SessionInfo::new(f.id.clone(), cwd.clone()).title(title).updated_at(f.created.clone())
        })
        .collect();
    Ok(ListSessionsResponse::new(sessions))
}
