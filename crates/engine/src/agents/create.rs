//! Making an agent: the dispatch commit that starts a root, a fork or a child, its
//! claims (id, name), and discarding an agent that never got going.

use domain::agent::{self, AgentFacts};
use domain::compaction;
use domain::id::{self, AgentId};
use domain::inbox::Deposit;
use domain::transcript;
use infra::git::{CommitId, MAIN, Position, TreeEdit};
use infra::time::Timestamp;
use infra::words::first_line;

use crate::Env;
use crate::agents::containment;
use crate::store::directory;
use crate::store::inbox::{self};
use crate::store::snapshot::{self, Loader};
use crate::store::workspace::Workspace;

use super::{AgentError, IDS, NAMES, revision};

type Result<T> = std::result::Result<T, AgentError>;

/// Where a root agent starts in project mode: a commit of the user's repository (with
/// `--with-changes`, the commit of their uncommitted work made on their HEAD) and the
/// changes that commit took along (path, bytes and executable bit, or `None` for a
/// deletion), listed for the note that says so.
#[derive(Debug, Clone)]
pub struct ProjectStart {
    pub base: CommitId,
    pub changes: Vec<infra::git::Change>,
}

/// What every new agent is started with.
pub struct Start<'a> {
    /// Its first message (for a root, also its goal).
    pub message: &'a str,
    pub name: Option<&'a str>,
    pub now: Timestamp,
    pub random: u32,
    /// The environment the cli read (whether the role's sandbox can be enforced).
    pub env: &'a Env,
    /// In project mode, where a root starts (forks and children start where their
    /// origin stood).
    pub project: Option<&'a ProjectStart>,
    /// A model chosen for it in place of its role's (sent with its first message; a
    /// fork without one keeps its origin's choice).
    pub model: Option<&'a str>,
    /// Thinking asked for it in place of its role's (sent with its first message).
    pub reasoning: Option<&'a infra::provider::Reasoning>,
    /// In project mode, ignored paths of the user's checkout to copy into its
    /// directory (a fork keeps its origin's too).
    pub copy_ignored: &'a [String],
    /// The permission mode a root runs in, in place of its role's (`--mode`).
    pub mode: Option<domain::config::Mode>,
    /// What a root's run does when a call needs a yes (`--on-ask`); its tree follows.
    pub on_ask: Option<domain::question::OnAsk>,
}

/// `a`'s patterns, then those of `b` it has not.
fn union(a: &[String], b: &[String]) -> Vec<String> {
    let mut all = a.to_vec();
    all.extend(b.iter().filter(|p| !a.contains(p)).cloned());
    all
}

/// The first message of a root or a fork: the user's, with the model chosen, if one was.
fn first_message(spawn: &Start) -> Result<Deposit> {
    if let Some(model) = spawn.model {
        domain::agent::check_model(model).map_err(AgentError::BadModel)?;
    }
    Ok(Deposit {
        model: spawn.model.map(str::to_owned),
        reasoning: spawn.reasoning.map(agent::reasoning_text),
        ..Deposit::new("user", spawn.now, spawn.message)
    })
}

/// Starts a root agent: dispatch commit on the lineage head, worktree, goal deposit.
pub fn create_root(ws: &Workspace, role: &str, lineage: &str, spawn: &Start) -> Result<AgentId> {
    let (config_tip, config) = ws.config(lineage)?;
    check_spawn(role, lineage, spawn.message, spawn.env, &config, false)?;
    let id = fresh_id(ws, spawn.random)?;
    let mut claims = Claims::new(ws);
    claims.hold(&id)?;
    let name = claims.name(&id, spawn.name, spawn.random)?;
    let facts = AgentFacts {
        id: id.to_string(),
        role: role.to_owned(),
        lineage: lineage.to_owned(),
        parent: None,
        name: Some(name.clone()),
        created: spawn.now.to_string(),
        forked_from: None,
        base: spawn.project.map(|p| p.base.to_string()),
        copy_ignored: spawn.copy_ignored.to_vec(),
    };
    // In project mode the directory starts as the base commit's tree (with the changes
    // taken along) and the agent's git at that commit; else empty, on `main`.
    let head = match spawn.project {
        Some(p) => Some(p.base),
        None => ws.project.branch_tip(MAIN)?,
    };
    // (Uncommitted work taken along is in the base already: a commit of the user's.)
    // A project's own `.offshoot/` never becomes harness state (a transcript entry
    // committed there would be sent as the user's words): the harness writes its own.
    let mut edits = match spawn.project {
        Some(p) if ws.repo.entry_id(p.base, agent::DIR)?.is_some() => {
            vec![TreeEdit::Remove { path: agent::DIR.into() }]
        }
        _ => Vec::new(),
    };
    // How it asks, as its run chose: harness files the agent cannot change.
    let chosen = domain::question::run_files(spawn.mode, spawn.on_ask);
    edits.extend(chosen.into_iter().map(|(path, bytes)| TreeEdit::Write { path: path.into(), bytes }));
    make(
        ws,
        Plan {
            subject: format!("dispatch {id}: {}", first_line(spawn.message, 60)),
            id,
            position: Position { branch: Some(name), head },
            facts,
            on: config_tip,
            base: spawn.project.map(|p| p.base),
            edits,
            goal: Some(spawn.message),
            first: first_message(spawn)?,
            config: (config_tip, &config),
        },
        claims,
    )
}

/// Starts an agent that continues the conversation at `from` (any commit of any
/// agent), with `message` as its next prompt.
pub fn fork(ws: &Workspace, from: &str, spawn: &Start) -> Result<AgentId> {
    let source = ws.repo.resolve_commit(from).ok_or_else(|| AgentError::UnknownRef(from.to_owned()))?;
    let source_facts = snapshot::read_facts(&ws.repo, source)?;
    let (config_tip, config) = ws.config(&source_facts.lineage)?;
    let role = source_facts.role.as_str();
    check_spawn(role, &source_facts.lineage, spawn.message, spawn.env, &config, false)?;
    let id = fresh_id(ws, spawn.random)?;
    let mut claims = Claims::new(ws);
    claims.hold(&id)?;
    let name = claims.name(&id, spawn.name, spawn.random)?;
    let facts = AgentFacts {
        id: id.to_string(),
        role: role.to_owned(),
        lineage: source_facts.lineage.clone(),
        parent: None,
        name: Some(name.clone()),
        created: spawn.now.to_string(),
        forked_from: Some(source.to_string()),
        base: source_facts.base.clone(),
        copy_ignored: union(&source_facts.copy_ignored, spawn.copy_ignored),
    };
    // The fork's own git starts where the source's stood, on a branch of its own.
    let head = directory::recorded_position(ws, &source_facts, source)?.head;
    let mut edits = vec![TreeEdit::Remove { path: agent::TOOLS.into() }];
    // A root now: it runs in its source's mode (a stricter one if asked), and asks as
    // its own run says.
    let mode = containment::effective_role(&ws.repo, &source_facts, &config).map(|r| r.mode());
    let mode = [mode, spawn.mode].into_iter().flatten().min();
    let chosen = domain::question::run_files(mode, spawn.on_ask);
    edits.extend(chosen.into_iter().map(|(path, bytes)| TreeEdit::Write { path: path.into(), bytes }));
    // A transcript ending in calls without results is cut before those calls.
    let mut loader = Loader::default();
    let entries = loader.entries(&ws.repo, source)?;
    for e in &entries[transcript::paired_len(entries)..] {
        let name = ws
            .repo
            .list_dir(source, agent::MESSAGES)?
            .into_iter()
            .find(|d| transcript::parse_name(&d.name).is_ok_and(|(n, _, _)| n == e.number()))
            .map(|d| d.name);
        if let Some(name) = name {
            edits.push(TreeEdit::Remove { path: format!("{}/{name}", agent::MESSAGES) });
        }
    }
    make(
        ws,
        Plan {
            subject: format!("fork {id} from {}: {}", &source.to_string()[..12], first_line(spawn.message, 60)),
            id,
            position: Position { branch: Some(name), head },
            facts,
            on: source,
            base: Some(source),
            edits,
            goal: None,
            first: first_message(spawn)?,
            config: (config_tip, &config),
        },
        claims,
    )
}

/// One new agent with everything decided, for [`make`]: its dispatch commit goes on
/// `on`, starting from `base`'s tree with `edits`, a rebuilt `.offshoot/` and its goal.
struct Plan<'a> {
    id: AgentId,
    facts: AgentFacts,
    position: Position,
    on: CommitId,
    base: Option<CommitId>,
    /// What changes besides `.offshoot/` (removals, a project's uncommitted changes).
    edits: Vec<TreeEdit>,
    /// Written as `.offshoot/goal.md` (a fork keeps its source's).
    goal: Option<&'a str>,
    subject: String,
    /// Its first message.
    first: Deposit,
    /// The config commit of its lineage, and that config.
    config: (CommitId, &'a domain::config::Config),
}

/// What a spawn claimed (a child's id, a name): given back when dropped, unless the
/// agent was made. Every way out of a spawn that fails lets go of them.
struct Claims<'a> {
    ws: &'a Workspace,
    id: Option<AgentId>,
    name: Option<String>,
    /// A root's lock, held from before its name is claimed until it is made: a name
    /// whose agent is not there and whose lock no one holds was left by a maker killed
    /// mid-way ([`sweep_abandoned_names`]).
    making: Option<(AgentId, infra::lock::LockGuard)>,
}

impl<'a> Claims<'a> {
    fn new(ws: &'a Workspace) -> Claims<'a> {
        Claims { ws, id: None, name: None, making: None }
    }

    /// Takes `id`'s lock for its making, after letting go of names killed makers left.
    fn hold(&mut self, id: &AgentId) -> Result<()> {
        sweep_abandoned_names(self.ws)?;
        self.making = Some((id.clone(), making(self.ws, id)?));
        Ok(())
    }

    /// Claims a name for `id` ([`claim_name`]), held until the agent is made.
    fn name(&mut self, id: &AgentId, asked: Option<&str>, random: u32) -> Result<String> {
        let name = claim_name(self.ws, id, asked, random)?;
        self.name = Some(name.clone());
        Ok(name)
    }

    /// The agent was made: its claims are its own for good.
    fn keep(mut self) {
        self.id = None;
        self.name = None;
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        if let Some(name) = &self.name {
            let _ = self.ws.repo.delete_mark(NAMES, name);
        }
        if let Some(id) = &self.id {
            let _ = self.ws.repo.delete_mark(IDS, id.as_str());
        }
        // A root that was not made: its lock file goes too.
        if let Some((id, guard)) = self.making.take() {
            drop(guard);
            let _ = std::fs::remove_file(self.ws.layout.lock(&id));
        }
    }
}

/// Makes the agent `plan` describes (dispatch commit, branch, directory, first message),
/// keeping `claims` when it was made.
fn make(ws: &Workspace, plan: Plan<'_>, mut claims: Claims<'_>) -> Result<AgentId> {
    let Plan { id, facts, position, on, base, mut edits, goal, subject, first, config } = plan;
    edits.extend(dispatch_files(ws, config.0, config.1, &facts, &position)?);
    if let Some(goal) = goal {
        edits.push(TreeEdit::Write { path: agent::GOAL.into(), bytes: goal.as_bytes().to_vec() });
    }
    let commit = ws.repo.commit_edits(&[on], base, &edits, &subject)?;
    let held = claims.making.take().map(|(_, guard)| guard);
    start(ws, &id, &facts, commit, &position, &first, held)?;
    claims.keep();
    Ok(id)
}

/// What a child is dispatched with.
pub struct Child<'a> {
    pub role: &'a str,
    pub goal: &'a str,
    pub name: Option<&'a str>,
    /// The commit to fork from (any revision); the parent's tip if `None`.
    pub from: Option<&'a str>,
    pub now: Timestamp,
    pub random: u32,
    pub env: &'a Env,
    /// A compactor: the one child that inherits the transcript (summaries and skills
    /// too), and the only way a `compactor` is started.
    pub compactor: bool,
    /// The key of the `dispatch` call making it (the model output's entry number and the
    /// call's id): a call run again after a crash finds the child the first run made, by
    /// its claim.
    pub key: Option<&'a str>,
}

/// Starts a child of `parent`: id `<parent>.<n>`, a fresh `.offshoot/` (its own
/// goal, soul and tools; no transcript, summaries or skills) over the fork point's
/// work products, a project branch at the fork point's git position, and the goal
/// deposited by the parent as its first message. Everything is checked before
/// anything is made.
pub fn create_child(ws: &Workspace, parent: &AgentId, child: &Child) -> Result<AgentId> {
    let parent_tip = ws.repo.branch_tip(&parent.branch())?.ok_or_else(|| AgentError::Unknown(parent.to_string()))?;
    // The same call, run again after a crash: the child it made is the answer (its
    // driver delivers its goal and makes what a kill left unmade); a claim without a
    // child is let go and the child made now.
    let claim = match child.key {
        Some(key) => format!("{parent}\n{key}"),
        None => parent.to_string(),
    };
    if child.key.is_some()
        && let Some(id) = claimed_with(ws, parent, &claim)?
    {
        if ws.repo.branch_tip(&id.branch())?.is_some() {
            return Ok(id);
        }
        release_claim(ws, &id)?;
    }
    let parent_facts = snapshot::read_facts(&ws.repo, parent_tip)?;
    let (config_tip, config) = ws.config(&parent_facts.lineage)?;
    check_spawn(child.role, &parent_facts.lineage, child.goal, child.env, &config, child.compactor)?;
    // No escalation through dispatch: the child's role may not be looser than what
    // its parent runs with.
    let parent_role = containment::effective_role(&ws.repo, &parent_facts, &config).ok_or_else(|| {
        AgentError::Looser(format!(
            "the confinement `{parent}` runs with cannot be read (its role is gone or an ancestor is damaged)"
        ))
    })?;
    if let Some(child_role) = config.role(child.role).map(containment::resolved)
        && let Some(rule) = domain::confinement::looser(child.role, &child_role, &parent_role)
    {
        return Err(AgentError::Looser(rule));
    }
    // Nor around its role's permission rules (a compactor runs no tool a rule names).
    if !child.compactor {
        rules_held(&config, &parent_facts.role, child.role)?;
    }
    // A compactor dispatches nothing, so it cannot deepen a tree: depth does not bar it.
    if !child.compactor && parent.depth() + 1 > config.budgets.max_depth {
        return Err(AgentError::TooDeep {
            parent: parent.to_string(),
            depth: parent.depth(),
            max: config.budgets.max_depth,
        });
    }
    if domain::budget::any_set(&config.budgets) {
        let root = parent.root();
        let (_, reached) = crate::agents::budget::check(&mut Default::default(), &ws.layout, &root, &config);
        if let Some(reached) = reached {
            return Err(AgentError::Exhausted(format!("the tree of `{root}` {reached}")));
        }
        // Stopped before a call that could have gone past a limit: nothing is added to
        // the tree until it is revived (a message or `run` after the limit is raised).
        // (A compaction is let through: making the next call smaller is how a tree gets
        // under its limit again.)
        if let Some(spend) = ws.repo.mark(crate::agents::lifecycle::EXHAUSTED, parent.as_str())?
            && !child.compactor
        {
            return Err(AgentError::Exhausted(String::from_utf8_lossy(&spend).into_owned()));
        }
    }
    let fork_point = match child.from {
        Some(spec) => {
            let spec = revision(ws, spec)?;
            ws.repo.resolve_commit(&spec).ok_or(AgentError::UnknownRef(spec))?
        }
        None => parent_tip,
    };
    let fork_facts = snapshot::read_facts(&ws.repo, fork_point)?;
    let head = directory::recorded_position(ws, &fork_facts, fork_point)?.head;
    // A bad or taken name is refused before an id is claimed (the claim itself is
    // what settles a race for the name).
    if let Some(name) = child.name {
        id::validate_name(name)?;
        if let Some(holder) = ws.repo.mark(NAMES, name)? {
            return Err(AgentError::NameTaken(name.to_owned(), String::from_utf8_lossy(&holder).into_owned()));
        }
    }
    let id = claim_child_id(ws, parent, &claim)?;
    let mut claims = Claims { ws, id: Some(id.clone()), name: None, making: None };
    let name = claims.name(&id, child.name, child.random)?;
    let facts = AgentFacts {
        id: id.to_string(),
        role: child.role.to_owned(),
        lineage: parent_facts.lineage.clone(),
        parent: Some(parent.to_string()),
        name: Some(name.clone()),
        created: child.now.to_string(),
        forked_from: Some(fork_point.to_string()),
        base: fork_facts.base.clone(),
        // Its role's `copy_ignored` is its own; its parent's choices are not.
        copy_ignored: Vec::new(),
    };
    let first = Deposit::first_of(&facts, child.goal);
    // A compactor keeps the transcript, summaries and skills it compacts.
    let edits = match child.compactor {
        false => vec![TreeEdit::Remove { path: agent::DIR.into() }],
        true => [agent::TOOLS, domain::mcp::DIR, compaction::NOMINATED, agent::MODEL, agent::REASONING]
            .into_iter()
            .filter(|p| ws.repo.entry_id(fork_point, p).ok().flatten().is_some())
            .map(|p| TreeEdit::Remove { path: p.into() })
            .collect(),
    };
    make(
        ws,
        Plan {
            subject: format!("dispatch {id}: {}", first_line(child.goal, 60)),
            id,
            position: Position { branch: Some(name), head },
            facts,
            on: fork_point,
            base: Some(fork_point),
            edits,
            goal: Some(child.goal),
            first,
            config: (config_tip, &config),
        },
        claims,
    )
}

/// Claims the next free child id of `parent` with a create-only mark holding `claim`
/// (the parent's id, and the dispatch call's key), before any object is written:
/// parallel dispatches (a parent's calls run side by side) each get their own number
/// at the price of a ref, not of a whole commit.
fn claim_child_id(ws: &Workspace, parent: &AgentId, claim: &str) -> Result<AgentId> {
    let mut n = next_child_number(ws, parent)?;
    loop {
        let id = parent.child(n);
        if ws.repo.claim_mark(IDS, id.as_str(), claim.as_bytes())? {
            return Ok(id);
        }
        n = (n + 1).max(next_child_number(ws, parent)?);
    }
}

/// The child of `parent` whose id claim holds `claim` (a dispatch call's), if any.
fn claimed_with(ws: &Workspace, parent: &AgentId, claim: &str) -> Result<Option<AgentId>> {
    for name in ws.repo.marks(IDS, &format!("{parent}."))? {
        if ws.repo.mark(IDS, &name)?.as_deref() == Some(claim.as_bytes()) {
            return Ok(AgentId::parse(&name).ok());
        }
    }
    Ok(None)
}

/// Lets go of the claims of `id` (its id, and the name it held), made by a dispatch a
/// crash cut short before the child existed.
fn release_claim(ws: &Workspace, id: &AgentId) -> Result<()> {
    for name in ws.repo.marks(NAMES, "")? {
        if ws.repo.mark(NAMES, &name)?.as_deref() == Some(id.as_str().as_bytes()) {
            ws.repo.delete_mark(NAMES, &name)?;
        }
    }
    ws.repo.delete_mark(IDS, id.as_str())?;
    Ok(())
}

/// One past the highest child number `parent` has or has claimed.
fn next_child_number(ws: &Workspace, parent: &AgentId) -> Result<u32> {
    let number = |rest: &str| (!rest.contains('.')).then(|| rest.parse::<u32>().ok()).flatten();
    let prefix = format!("{}.", parent.branch());
    let branches = ws.repo.branches(&prefix)?;
    let from_branches = branches.iter().filter_map(|(branch, _)| number(branch.strip_prefix(&prefix)?));
    let claims = ws.repo.marks(IDS, &format!("{parent}."))?;
    let from_claims = claims.iter().filter_map(|key| number(key.strip_prefix(&format!("{parent}."))?));
    Ok(from_branches.chain(from_claims).max().unwrap_or(0) + 1)
}

/// Checks what every spawn needs before anything is written: a message, a role
/// that exists (`compactor` only for a compaction, and a compaction only as one), a
/// sandbox this kernel can enforce.
fn check_spawn(
    role: &str,
    lineage: &str,
    message: &str,
    env: &Env,
    config: &domain::config::Config,
    compactor: bool,
) -> Result<()> {
    if message.trim().is_empty() {
        return Err(AgentError::EmptyMessage);
    }
    if (role == domain::grant::COMPACTOR) != compactor {
        return Err(AgentError::CompactorRole);
    }
    let Some(role_config) = config.role(role) else {
        return Err(AgentError::UnknownRole {
            role: role.to_owned(),
            lineage: lineage.to_owned(),
            known: config.roles.keys().filter(|r| *r != domain::grant::COMPACTOR).cloned().collect(),
        });
    };
    containment::check(role_config, env).map_err(|source| AgentError::Sandbox { role: role.to_owned(), source })
}

/// Claims a name for `id`: the one `asked` for, or a fresh two-word one. A claim is
/// a create-only ref, so parallel spawns never get the same name and no spawn lists
/// every agent. A name is also the agent's project branch (which must be new) and
/// never an agent's id.
fn claim_name(ws: &Workspace, id: &AgentId, asked: Option<&str>, random: u32) -> Result<String> {
    let usable = |name: &str| -> Result<bool> {
        let is_id = AgentId::parse(name).is_ok_and(|i| ws.repo.branch_tip(&i.branch()).ok().flatten().is_some());
        Ok(!is_id && ws.project.branch_tip(name)?.is_none())
    };
    if let Some(name) = asked {
        id::validate_name(name)?;
        let taken = |holder: Option<Vec<u8>>| {
            AgentError::NameTaken(
                name.to_owned(),
                holder.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default(),
            )
        };
        if let Some(holder) = ws.repo.mark(NAMES, name)? {
            return Err(taken(Some(holder)));
        }
        if AgentId::parse(name).is_ok_and(|i| ws.repo.branch_tip(&i.branch()).ok().flatten().is_some()) {
            return Err(AgentError::NameIsId(name.to_owned()));
        }
        if ws.project.branch_tip(name)?.is_some() {
            return Err(AgentError::BranchTaken(name.to_owned()));
        }
        if !ws.repo.claim_mark(NAMES, name, id.as_str().as_bytes())? {
            return Err(taken(ws.repo.mark(NAMES, name)?));
        }
        return Ok(name.to_owned());
    }
    // Two words first; after 64 collisions a number makes it unique.
    let mut r = random.rotate_left(7);
    let mut attempt = 0u32;
    loop {
        let mut name = id::mint_name(r);
        if attempt >= 64 {
            name.push_str(&attempt.to_string());
        }
        if usable(&name)? && ws.repo.claim_mark(NAMES, &name, id.as_str().as_bytes())? {
            return Ok(name);
        }
        r = r.wrapping_mul(2_654_435_761).wrapping_add(attempt);
        attempt += 1;
    }
}

fn fresh_id(ws: &Workspace, random: u32) -> Result<AgentId> {
    let mut r = random;
    loop {
        let id = AgentId::root_from_random(r);
        // An id may not be a name in use either.
        if ws.repo.branch_tip(&id.branch())?.is_none() && ws.repo.mark(NAMES, id.as_str())?.is_none() {
            return Ok(id);
        }
        r = r.wrapping_mul(2_654_435_761).wrapping_add(1);
    }
}

/// `.offshoot/` as dispatch rebuilds it: facts, soul and the granted tool schemas,
/// all derived from the config (never from a parent's tree).
fn dispatch_files(
    ws: &Workspace,
    config_tip: CommitId,
    config: &domain::config::Config,
    facts: &AgentFacts,
    position: &Position,
) -> Result<Vec<TreeEdit>> {
    let soul_path = format!("souls/{}.md", facts.role);
    let soul = ws.config_file(config_tip, &soul_path)?.unwrap_or_default();
    let mut edits = vec![
        TreeEdit::Write { path: agent::FACTS.into(), bytes: facts.to_toml().into_bytes() },
        TreeEdit::Write { path: agent::SOUL.into(), bytes: soul },
        TreeEdit::Write { path: agent::GIT.into(), bytes: agent::position_text(position).into_bytes() },
    ];
    for name in config.grant(&facts.role) {
        if let Some(spec) = domain::grant::tool(&name).map(domain::grant::Tool::spec) {
            let spec = serde_json::to_vec_pretty(&spec).unwrap_or_default();
            edits.push(TreeEdit::Write { path: format!("{}/{name}.json", agent::TOOLS), bytes: spec });
        }
    }
    Ok(edits)
}

/// Branch, project branch, directory, then the first message; undoes what it made
/// if a later part fails. The agent's lock is held throughout: once its branch exists,
/// `scan` or `run` would otherwise start a driver that rebuilds the directory this is
/// still making (a driver finds it held and leaves it to its maker).
fn start(
    ws: &Workspace,
    id: &AgentId,
    facts: &AgentFacts,
    commit: CommitId,
    position: &Position,
    first: &Deposit,
    held: Option<infra::lock::LockGuard>,
) -> Result<()> {
    let _making = match held {
        Some(guard) => guard,
        None => making(ws, id)?,
    };
    ws.repo.create_branch(&id.branch(), commit, "dispatch")?;
    let made = (|| -> Result<()> {
        if let (Some(branch), Some(head)) = (&position.branch, position.head) {
            ws.project.create_branch(branch, head)?;
        }
        directory::open(ws, id, facts, commit)?;
        inbox::deposit(&ws.layout, id, first)?;
        Ok(())
    })();
    if made.is_err() {
        discard(ws, id);
    }
    made
}

/// Refuses a child role `child` that lacks a deny or ask rule of its parent's role
/// `parent` (held as a deny, or in the same list): a child never holds more.
fn rules_held(config: &domain::config::Config, parent: &str, child: &str) -> Result<()> {
    let (Some(mine), Some(theirs)) = (config.role(parent), config.role(child)) else { return Ok(()) };
    match domain::permissions::lacking(&mine.permissions, &theirs.permissions) {
        Some(rule) => Err(AgentError::Looser(format!(
            "role `{child}` lacks the rule `{rule}` of `roles.{parent}.permissions` that its parent runs under; a child never holds more than its parent"
        ))),
        None => Ok(()),
    }
}

/// `id`'s lock, taken by the process making it.
fn making(ws: &Workspace, id: &AgentId) -> Result<infra::lock::LockGuard> {
    infra::lock::LockGuard::try_acquire_making(&ws.layout.lock(id))
        .map_err(|e| AgentError::Making { id: id.clone(), reason: e.into() })?
        .ok_or_else(|| AgentError::Making { id: id.clone(), reason: "another process holds its lock".into() })
}

/// Lets go of names of roots whose maker was killed before making it: no branch, and no
/// one holds its lock (looked for again after the lock: a maker lets go once it is made).
fn sweep_abandoned_names(ws: &Workspace) -> Result<()> {
    // (A worker's workspace holds the claims of roots made elsewhere.)
    if ws.layout.worker().exists() {
        return Ok(());
    }
    for name in ws.repo.marks(NAMES, "")? {
        let Some(owner) = ws.repo.mark(NAMES, &name)? else { continue };
        let Ok(owner) = AgentId::parse(&String::from_utf8_lossy(&owner)) else { continue };
        let made = || ws.repo.branch_tip(&owner.branch()).ok().flatten().is_some();
        if owner.parent().is_some() || made() {
            continue;
        }
        let held = infra::lock::LockGuard::is_held(&ws.layout.lock(&owner)).unwrap_or(true);
        if !held && !made() {
            ws.repo.delete_mark_if(NAMES, &name, owner.as_str().as_bytes())?;
        }
    }
    Ok(())
}

/// Removes every trace of an agent: directory, its git, index, inbox, steps, temporary
/// files, MCP logs, then marks, project branch, name and — last, so a removal cut short
/// still finds the agent to finish — its branch; the lock file goes with it. Returns
/// what could not be removed.
pub fn discard(ws: &Workspace, id: &AgentId) -> Vec<String> {
    let mut left = Vec::new();
    let mut gone = |what: String, done: bool| {
        if !done {
            left.push(what);
        }
    };
    let name = ws
        .repo
        .branch_tip(&id.branch())
        .ok()
        .flatten()
        .and_then(|t| snapshot::read_facts(&ws.repo, t).ok())
        .and_then(|f| f.name);
    let directory = ws.layout.worktree(id);
    gone(directory.display().to_string(), directory::drop_directory(ws, id).is_ok());
    ws.project.detach(id.as_str());
    let servers = ws.layout.client_servers(id);
    let files = [ws.layout.index(id), ws.layout.lock(id), servers.with_extension("json.new"), servers];
    let dirs = [ws.layout.mcp_logs(id.as_str()), ws.layout.inbox(id), ws.layout.steps(id), ws.layout.tmp(id)];
    let absent = |r: std::io::Result<()>| r.is_ok() || r.is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
    for dir in dirs {
        gone(dir.display().to_string(), absent(std::fs::remove_dir_all(&dir)));
    }
    gone(format!("marks of `{id}`"), ws.repo.delete_marks(id.as_str()).is_ok());
    if let Some(name) = name {
        gone(format!("project branch `{name}`"), ws.project.delete_branch(&name).is_ok());
        gone(format!("name `{name}`"), ws.repo.delete_mark(NAMES, &name).is_ok());
    }
    gone(format!("branch `{}`", id.branch()), ws.repo.delete_branch(&id.branch()).is_ok());
    // (The lock file last: a removal holds the lock until now.)
    gone(files[0].display().to_string(), absent(std::fs::remove_file(&files[0])));
    let _ = std::fs::remove_file(&files[1]);
    left
}
