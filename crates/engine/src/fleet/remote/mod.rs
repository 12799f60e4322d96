//! Workspaces sharing one git remote: `push` sends what this workspace holds
//! of its agents — branches, config lineages, the marks that say how they live, their
//! step records — and `pull` takes what the remote holds, each ref moving only forward.
//!
//! On the remote, `repo.git`'s refs keep their names (`refs/heads/agents/<id>`,
//! `refs/heads/config/<lineage>`, `refs/offshoot/<kind>/<key>`), step records are a
//! commit per agent on `refs/offshoot/records/<id>`, and `project.git`'s branches are
//! `refs/project/heads/<branch>`. What was last seen there is kept under
//! `refs/mirrors/<remote>/` of each repository: the expected values of the next push.

mod handover;
mod status;

use crate::Cause;
use std::collections::BTreeMap;
use std::path::Path;

use domain::id::AgentId;
use domain::marks::Mark;
use infra::door::Beneath;
use infra::git::remote::{self, Expect, Outcome, Update};
use infra::git::{CommitId as Oid, GitError, TreeEdit, bundle};
use infra::lock::LockGuard;

use crate::store::workspace::Workspace;
use domain::marks::Shelf;

pub(crate) use handover::mark_handed;
pub(crate) use handover::stop_request;
pub(crate) use handover::{INBOX_SEEN, revives, stamp};
pub use handover::{claimed_by, forget_mirrors, hand_over, handed, mail_waiting, send_to, stop_on};
pub use status::{FleetStatus, WorkerClaims, status};

/// The marks that travel with their agents ([`Mark::travels`]).
pub(super) fn travelling() -> impl Iterator<Item = Mark> {
    Mark::ALL.into_iter().filter(|m| m.travels())
}

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error(
        "there is no remote `{0}` (`offshoot remote list` shows them; `offshoot remote add <name> <url>` adds one)"
    )]
    Unknown(String),
    #[error("which remote? this workspace has {0}; name one")]
    Which(String),
    #[error("this workspace has no remote; `offshoot remote add <name> <url>` adds one")]
    None,
    #[error(
        "remote `{name}` ({url}) cannot share agents: this offshoot reaches remotes over ssh, https, git:// and http://, not {what}, whose transport cannot compare-and-swap a ref; reach the repository over ssh (`host:path`), https or `git daemon --enable=receive-pack`"
    )]
    Unsupported { name: String, url: String, what: &'static str },
    #[error("`{remote}` has no agent `{id}` (`offshoot pull {remote}` shows what it has)")]
    NotThere { remote: String, id: String },
    #[error(
        "agent `{id}` is not driven by the workers of `{remote}` (it was pushed, not handed over with `prompt --on`): `offshoot stop` stops it where it runs"
    )]
    NotHanded { remote: String, id: String },
    #[error("cannot reach remote `{name}` ({url}): {reason}")]
    Unreachable {
        name: String,
        url: String,
        #[source]
        reason: Cause,
    },
    #[error("the remote's `{name}` reaches object {missing}, which it did not send")]
    Missing { name: String, missing: Oid },
    #[error("`{name}` was not sent: {why}; nothing was sent")]
    Refused { name: String, why: String },
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("cannot write {path}: {reason}")]
    Write {
        path: String,
        #[source]
        reason: Cause,
    },
}

type Result<T> = std::result::Result<T, RemoteError>;

/// A remote of the workspace.
#[derive(Debug, Clone)]
pub struct Remote {
    pub name: String,
    pub url: String,
}

/// The remote called `name`; without a name, the only one (or `origin` among several).
pub fn resolve(ws: &Workspace, name: Option<&str>) -> Result<Remote> {
    let remotes = ws.repo.remotes()?;
    let found = match name {
        Some(name) => remotes.into_iter().find(|(n, _)| n == name).ok_or_else(|| RemoteError::Unknown(name.into()))?,
        None => match remotes.len() {
            0 => return Err(RemoteError::None),
            1 => remotes.into_iter().next().expect("one"),
            _ => match remotes.iter().position(|(n, _)| n == "origin") {
                Some(i) => remotes.into_iter().nth(i).expect("origin"),
                None => {
                    let names: Vec<String> = remotes.iter().map(|(n, _)| format!("`{n}`")).collect();
                    return Err(RemoteError::Which(names.join(", ")));
                }
            },
        },
    };
    if let Some(what) = remote::unsupported(&found.1) {
        return Err(RemoteError::Unsupported { name: found.0, url: remote::shown_url(&found.1), what });
    }
    Ok(Remote { name: found.0, url: found.1 })
}

/// Where a ref of the remote is mirrored in `repo.git` (`refs/X` → `refs/mirrors/<r>/X`).
pub(super) fn repo_mirror(remote: &str, name: &str) -> String {
    format!("refs/mirrors/{remote}/{}", name.trim_start_matches("refs/"))
}

/// The remote's name of `project.git`'s branch ref `refs/heads/<b>`.
pub(super) fn project_remote(local: &str) -> String {
    format!("refs/project/{}", local.trim_start_matches("refs/"))
}

/// Where `project.git` mirrors the remote's `refs/project/heads/<b>`.
fn project_mirror(remote: &str, local: &str) -> String {
    format!("refs/mirrors/{remote}/{}", local.trim_start_matches("refs/"))
}

/// Whether `name` (a full ref of `repo.git`) is one that travels.
pub(super) fn travels(name: &str) -> bool {
    if name.starts_with("refs/heads/agents/") || name.starts_with("refs/heads/config/") {
        return true;
    }
    let Some((kind, _)) = infra::git::harness_ref_parts(name) else { return false };
    kind == Shelf::Records.dir() || travelling().any(|m| m.kind() == kind)
}

/// The remote's refs and what this workspace mirrors of them, after a fetch.
pub(super) struct Seen {
    /// `repo.git`'s refs on the remote, by their name there.
    pub(super) repo: BTreeMap<String, Oid>,
    /// `project.git`'s branches on the remote, by their local name (`refs/heads/<b>`).
    pub(super) project: BTreeMap<String, Oid>,
}

impl Seen {
    /// `repo.git`'s refs there whose names start with `prefix`: a range of the sorted
    /// names, not a walk over all of them (a worker asks this per agent, every round).
    pub(super) fn under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, Oid)> + 'a {
        self.repo
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(move |(n, _)| n.starts_with(prefix))
            .map(|(n, o)| (n.as_str(), *o))
    }
}

/// Waits for this workspace's other commands to be done with `remote`, then holds it
/// until the guard goes: a command's fetch into the mirrors, what it takes in from them
/// and its pushes are one turn (two at once collide on git's ref locks and on the
/// branches they take in). Taken once per command, never nested.
pub(crate) fn turn(ws: &Workspace, remote: &Remote) -> Result<LockGuard> {
    let path = ws.layout.mirrors_lock(&remote.name);
    let fail = |reason: Cause| RemoteError::Write { path: path.display().to_string(), reason };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| fail(e.into()))?;
    }
    LockGuard::acquire_waiting(&path).map_err(|e| fail(e.into()))
}

/// Fetches everything of the remote into the mirrors, dropping mirrored refs it no
/// longer has; the caller holds its [`turn`].
pub(super) fn fetch(ws: &Workspace, remote: &Remote) -> Result<Seen> {
    let unreachable = |e: GitError| unreachable(remote, e);
    let r = &remote.name;
    let repo_specs = vec![
        format!("+refs/heads/*:refs/mirrors/{r}/heads/*"),
        format!("+{}*:refs/mirrors/{r}/offshoot/*", infra::git::HARNESS_REFS),
    ];
    // Work in flight comes and goes every round: never packed.
    let hot: Vec<String> = [Shelf::Claims, Shelf::Inbox, Shelf::StopRequests, Shelf::Workers]
        .iter()
        .map(|shelf| repo_mirror(r, &shelf.prefix()))
        .collect();
    let listed = remote::fetch(&ws.layout.repo(), &remote.url, &repo_specs, &hot).map_err(unreachable)?;
    let repo: BTreeMap<String, Oid> = listed
        .iter()
        .filter(|(n, _)| n.starts_with("refs/heads/") || n.starts_with(infra::git::HARNESS_REFS))
        .cloned()
        .collect();
    let project_specs = vec![format!("+refs/project/heads/*:refs/mirrors/{r}/heads/*")];
    let listed = remote::fetch(&ws.layout.project(), &remote.url, &project_specs, &[]).map_err(unreachable)?;
    let project: BTreeMap<String, Oid> =
        listed.iter().filter_map(|(n, o)| n.strip_prefix("refs/project/").map(|l| (format!("refs/{l}"), *o))).collect();
    Ok(Seen { repo, project })
}

/// What a push did.
#[derive(Debug, Default, serde::Serialize)]
pub struct Pushed {
    /// Refs moved on the remote (by their name there).
    pub sent: Vec<String>,
    /// Refs the remote has moved on (or past) since this workspace last pulled: not
    /// sent; `pull` first.
    pub behind: Vec<String>,
    /// Refs the server refused, with its words.
    pub refused: Vec<(String, String)>,
}

/// Sends every agent, config lineage, travelling mark and step record of the workspace
/// to `remote`: branches and records only forward, a mark only from the value last seen
/// there (a mark this workspace removed since is removed there).
pub fn push(ws: &Workspace, remote: &Remote) -> Result<Pushed> {
    let _turn = turn(ws, remote)?;
    // What was last seen there, before this fetch: a mark is this workspace's to send
    // only when it changed here since.
    let mirrors = format!("refs/mirrors/{}/", remote.name);
    let before: BTreeMap<String, Oid> = infra::git::mirrors::refs(&ws.layout.repo(), &mirrors)?
        .into_iter()
        .map(|(n, o)| (format!("refs/{}", &n[mirrors.len()..]), o))
        .collect();
    let seen = fetch(ws, remote)?;
    // Nothing of an agents' making leaves with a tree git refuses (checked before any
    // ref goes: the agents' branches are sent before their project branches).
    let tips: Vec<Oid> =
        bundle::refs(&ws.layout.project(), &["refs/heads/*".to_owned()])?.into_iter().map(|(_, o)| o).collect();
    ws.project.check_sent(&tips)?;
    // Trees handed to the fleet are its workers' to write: this workspace only reads them.
    let names = Mark::Names.prefix();
    let ours = |name: &str| -> bool {
        // A name's claim is its agent's (the id it holds, here or as last seen there).
        if name.starts_with(&names) {
            let holder = |oid: Option<&Oid>| {
                oid.and_then(|o| ws.repo.read_blob(*o).ok())
                    .and_then(|b| AgentId::parse(String::from_utf8_lossy(&b).trim()).ok())
            };
            let here =
                bundle::refs(&ws.layout.repo(), &[name.to_owned()]).ok().and_then(|r| r.first().map(|(_, o)| *o));
            let owner = holder(here.as_ref()).or_else(|| holder(before.get(name)));
            return !owner.is_some_and(|id| handed(ws, &id));
        }
        let key =
            name.strip_prefix("refs/heads/agents/").or_else(|| infra::git::harness_ref_parts(name).map(|(_, k)| k));
        !key.and_then(|k| AgentId::parse(k).ok()).is_some_and(|id| handed(ws, &id))
    };
    let agents: Vec<AgentId> = ws
        .repo
        .branches("agents/")?
        .into_iter()
        .filter_map(|(b, _)| AgentId::parse(b.trim_start_matches("agents/")).ok())
        .filter(|id| !handed(ws, id))
        .collect();
    for id in &agents {
        let driven = LockGuard::is_held(&ws.layout.lock(id)).unwrap_or(true);
        let base = seen.repo.get(&Shelf::Records.ref_name(id)).copied();
        commit_records(ws, id, base, !driven)?;
    }
    let mine: BTreeMap<String, Oid> = ws.repo.all_refs()?.into_iter().filter(|(n, _)| travels(n) && ours(n)).collect();
    let is_mark =
        |name: &str| name.starts_with(infra::git::HARNESS_REFS) && !name.starts_with(&Shelf::Records.prefix());
    let mut updates = Vec::new();
    for (name, oid) in &mine {
        if seen.repo.get(name) == Some(oid) {
            continue;
        }
        let expect = match is_mark(name) {
            // Changed here since it was last seen there, from what was seen.
            true if before.get(name) != Some(oid) => Expect::Exactly(before.get(name).copied()),
            true => continue,
            false => Expect::FastForward,
        };
        updates.push(Update { local: Some(name.clone()), remote: name.clone(), expect });
    }
    // A mark last seen there that this workspace has removed since is removed there.
    for (name, oid) in &before {
        if is_mark(name) && travels(name) && ours(name) && !mine.contains_key(name) && seen.repo.contains_key(name) {
            updates.push(Update { local: None, remote: name.clone(), expect: Expect::Exactly(Some(*oid)) });
        }
    }
    let mut pushed = Pushed::default();
    let outcomes = remote::push(&ws.layout.repo(), &remote.url, &updates).map_err(|e| unreachable(remote, e))?;
    let mirrors = format!("refs/mirrors/{}/", remote.name);
    let mut moved = Vec::new();
    settle(&mut pushed, &updates, outcomes, |name, value| moved.push((repo_mirror(&remote.name, name), value)));
    infra::git::mirrors::set(&ws.layout.repo(), &mirrors, &moved)?;

    let updates = project_updates(ws, &seen, false, None)?;
    let outcomes = remote::push(&ws.layout.project(), &remote.url, &updates).map_err(|e| unreachable(remote, e))?;
    let mut moved = Vec::new();
    settle(&mut pushed, &updates, outcomes, |name, value| {
        let local = format!("refs/{}", name.trim_start_matches("refs/project/"));
        moved.push((project_mirror(&remote.name, &local), value));
    });
    infra::git::mirrors::set(&ws.layout.project(), &mirrors, &moved)?;
    Ok(pushed)
}

/// `project.git`'s branches that differ from the remote's, each to be sent forward only
/// (`only_ahead`: only those whose remote value is behind them here).
/// With `only`, of those branches alone (looked up, not listed).
pub(super) fn project_updates(
    ws: &Workspace,
    seen: &Seen,
    only_ahead: bool,
    only: Option<&[String]>,
) -> Result<Vec<Update>> {
    let project = ws.layout.project();
    let mut updates = Vec::new();
    let branches: Vec<(String, Oid)> = match only {
        None => bundle::refs(&project, &["refs/heads/*".to_owned()])?,
        Some(names) => names
            .iter()
            .cloned()
            .zip(bundle::ref_targets(&project, names)?)
            .filter_map(|(n, o)| Some((n, o?)))
            .collect(),
    };
    for (name, oid) in branches {
        let theirs = seen.project.get(&name).copied();
        if theirs == Some(oid)
            || (only_ahead && theirs.is_some_and(|t| !remote::descends(&project, oid, t).unwrap_or(false)))
        {
            continue;
        }
        updates.push(Update { local: Some(name.clone()), remote: project_remote(&name), expect: Expect::FastForward });
    }
    Ok(updates)
}

/// `e` met on the way to `remote` (every remote here passed [`resolve`]'s or `new --from`'s
/// check of its URL).
pub(super) fn unreachable(remote: &Remote, e: GitError) -> RemoteError {
    RemoteError::Unreachable { name: remote.name.clone(), url: remote::shown_url(&remote.url), reason: e.into() }
}

/// Files each outcome of `updates` in `pushed`, and mirrors what was sent.
fn settle(pushed: &mut Pushed, updates: &[Update], outcomes: Vec<Outcome>, mut mirror: impl FnMut(&str, Option<Oid>)) {
    for (update, outcome) in updates.iter().zip(outcomes) {
        match outcome {
            Outcome::Done(value) => {
                mirror(&update.remote, value);
                pushed.sent.push(update.remote.clone());
            }
            Outcome::Moved { .. } => pushed.behind.push(update.remote.clone()),
            Outcome::Refused(words) => pushed.refused.push((update.remote.clone(), words)),
            Outcome::Withheld => pushed.behind.push(update.remote.clone()),
        }
    }
}

/// Points `refs/offshoot/records/<id>` at a commit of `id`'s step records (`base`'s,
/// the remote's, with this workspace's on top), unless it holds them already; returns
/// where it points. A record
/// still being written (the newest of an agent a driver holds) waits for the next push.
pub(super) fn commit_records(ws: &Workspace, id: &AgentId, base: Option<Oid>, newest_too: bool) -> Result<Option<Oid>> {
    let name = Shelf::Records.ref_name(id);
    let mut files = crate::fleet::bundle::step_files(ws, id)
        .map_err(|e| RemoteError::Write { path: ws.layout.steps(id).display().to_string(), reason: e.into() })?;
    if !newest_too {
        let newest = files.iter().filter_map(|(p, _)| crate::store::step_record::number_of(top(p))).max();
        files.retain(|(p, _)| crate::store::step_record::number_of(top(p)) != newest);
    }
    let mine = ws.repo.ref_target(&name)?;
    // Forward from what the remote has, else from what was made here before.
    let parent = base.or(mine);
    let known = match parent {
        Some(p) => ws.repo.list_files(p, "")?,
        None => Vec::new(),
    };
    let edits: Vec<TreeEdit> = files
        .into_iter()
        .filter(|(path, bytes)| !known.iter().any(|(k, oid)| k == path && infra::git::blob_id(bytes) == Some(*oid)))
        .map(|(path, bytes)| TreeEdit::Write { path, bytes })
        .collect();
    if edits.is_empty() {
        if let (Some(parent), true) = (parent, mine != parent) {
            bundle::set_refs(&ws.layout.repo(), &[(name, parent)])?;
        }
        return Ok(parent);
    }
    let parents: Vec<Oid> = parent.into_iter().collect();
    let commit = ws.repo.commit_edits(&parents, parent, &edits, &format!("records of {id}"))?;
    bundle::set_refs(&ws.layout.repo(), &[(name, commit)])?;
    Ok(Some(commit))
}

/// The first component of a record's path (`0003.json`, `0004`).
fn top(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

/// What a pull did.
#[derive(Debug, Default, serde::Serialize)]
pub struct Pulled {
    /// Agents made or moved forward here.
    pub agents: Vec<String>,
    /// Config lineages made or moved forward here.
    pub lineages: Vec<String>,
    /// Per lineage taken, the settings that stayed this user's where the remote's
    /// differed (or, trusted, the remote's taken over this user's).
    pub config: Vec<(String, Vec<String>)>,
    /// Refs kept as they are here, and why (ahead of the remote, gone another way, an
    /// agent being driven here).
    pub kept: Vec<(String, String)>,
    /// Step records written here.
    pub records: usize,
}

/// Whose settings a config lineage taken from a remote runs with. Untrusted (the
/// default), this user's: providers, MCP servers, the tool environment, budgets, prices,
/// retries and each role's sandbox keys stay what this workspace's lineage has (a
/// lineage new here: what `template`, the user's template config, has), so whoever can
/// push to the remote cannot send this user's keys to a server of theirs, start a
/// program of theirs or loosen the sandbox. Trusted (`--trust-config`), the remote's as
/// pushed.
#[derive(Debug, Clone, Copy)]
pub struct ConfigFrom<'a> {
    pub template: &'a str,
    pub trust: bool,
}

/// Takes what `remote` holds: agents and config lineages made or moved forward (never
/// back, never one a driver here holds; a lineage with this user's settings unless
/// `config` trusts the remote's), their travelling marks, their step records, and
/// `project.git`'s branches. `fresh`: the workspace was just made to be the remote's
/// (`new --from`), so its own beginnings (`project.git`'s `main`) give way.
pub fn pull(ws: &Workspace, remote: &Remote, fresh: bool, config: ConfigFrom) -> Result<Pulled> {
    let _turn = turn(ws, remote)?;
    let seen = fetch(ws, remote)?;
    let mut pulled = Pulled::default();
    let door = Beneath::open(ws.layout.root())
        .map_err(|e| RemoteError::Write { path: ws.layout.root().display().to_string(), reason: e.into() })?;
    let mut settled: Vec<AgentId> = Vec::new();
    for (name, theirs) in &seen.repo {
        let (agent, lineage) = (name.strip_prefix("refs/heads/agents/"), name.strip_prefix("refs/heads/config/"));
        let id = match agent.map(AgentId::parse) {
            Some(Ok(id)) => Some(id),
            Some(Err(_)) => {
                pulled.kept.push((name.clone(), "not an agent id".into()));
                continue;
            }
            None if lineage.is_some() => None,
            None => continue,
        };
        if id.as_ref().is_some_and(|id| LockGuard::is_held(&ws.layout.lock(id)).unwrap_or(true)) {
            pulled.kept.push((name.clone(), "its driver runs here".into()));
            continue;
        }
        if let Some(lineage) = lineage {
            match take_lineage(ws, lineage, *theirs, config)? {
                Taken::Same => {}
                Taken::Kept(why) => pulled.kept.push((name.clone(), why)),
                Taken::Moved(kept) => {
                    pulled.lineages.push(lineage.to_owned());
                    pulled.config.push((lineage.to_owned(), kept));
                }
            }
            continue;
        }
        match forward(&ws.layout.repo(), name, *theirs, false)? {
            Forward::Moved => {
                if let Some(id) = &id {
                    pulled.agents.push(id.to_string());
                }
            }
            Forward::Same => {}
            Forward::Kept(why) => {
                pulled.kept.push((name.clone(), why.into()));
                continue;
            }
        }
        if let Some(id) = id {
            settled.push(id);
        }
    }
    // The marks of every agent here as it is there are the remote's.
    for (name, theirs) in &seen.repo {
        let Some((kind, key)) = infra::git::harness_ref_parts(name) else { continue };
        let Some(mark) = travelling().find(|m| m.kind() == kind) else { continue };
        let owner = match mark {
            Mark::Names => String::from_utf8_lossy(&ws.repo.read_blob(*theirs)?).trim().to_owned(),
            _ => key.to_owned(),
        };
        let claim = matches!(mark, Mark::Names | Mark::Ids);
        let ours = ws.repo.mark(kind, key)?;
        if claim && ours.is_some() {
            // A claim here is never replaced: it names what this workspace made.
            if ours.as_deref() != Some(&ws.repo.read_blob(*theirs)?[..]) {
                pulled.kept.push((name.clone(), "claimed here for another agent".into()));
            }
            continue;
        }
        let exists = AgentId::parse(&owner).is_ok_and(|o| ws.repo.branch_tip(&o.branch()).ok().flatten().is_some());
        if (claim && exists && !key.contains('/')) || settled.iter().any(|s| s.as_str() == owner) {
            bundle::set_refs(&ws.layout.repo(), &[(name.clone(), *theirs)])?;
        }
    }
    // Trees the remote's workers drive are never driven here.
    for id in &settled {
        if seen.repo.contains_key(&Mark::Fleet.ref_name(id)) {
            mark_handed(ws, id)?;
        }
    }
    for id in &settled {
        for mark in travelling().filter(|m| !matches!(m, Mark::Names | Mark::Ids)) {
            let name = mark.ref_name(id);
            if !seen.repo.contains_key(&name) {
                ws.repo.delete_ref(&name)?;
            }
        }
        let records = Shelf::Records.ref_name(id);
        if let Some(commit) = seen.repo.get(&records) {
            pulled.records += write_records(ws, &door, id, *commit)?;
            bundle::set_refs(&ws.layout.repo(), &[(records, *commit)])?;
        }
    }
    for (name, theirs) in &seen.project {
        if let Forward::Kept(why) = forward(&ws.layout.project(), name, *theirs, fresh)? {
            pulled.kept.push((project_remote(name), why.into()));
        }
    }
    Ok(pulled)
}

/// What became of a config lineage taken from a remote.
enum Taken {
    Same,
    /// Moved on to the remote's lineage; the settings where the remote's differed from
    /// this user's (kept, or, trusted, taken over).
    Moved(Vec<String>),
    Kept(String),
}

/// Takes lineage `lineage` of the remote at `theirs`: a commit on top of both (this
/// workspace's tip, if it has the lineage, and `theirs`) holding the remote's files with
/// `offshoot.toml` rebased on this user's (its tip's, else the template's), or, trusted,
/// as the remote has it (then `theirs` itself when the tip is behind it). Nothing moves
/// when the tip already holds `theirs`.
fn take_lineage(ws: &Workspace, lineage: &str, theirs: Oid, config: ConfigFrom) -> Result<Taken> {
    let repo = ws.layout.repo();
    let name = format!("refs/heads/config/{lineage}");
    let ours = bundle::refs(&repo, std::slice::from_ref(&name))?.first().map(|(_, o)| *o);
    let holds = |o: Oid| remote::descends(&repo, o, theirs).unwrap_or(false);
    // (Trusted, a tip that holds theirs with this user's settings takes theirs too.)
    let same_tree = |o: Oid| ws.repo.tree_id(o).ok() == ws.repo.tree_id(theirs).ok();
    if ours == Some(theirs) || ours.is_some_and(|o| holds(o) && (!config.trust || same_tree(o))) {
        return Ok(Taken::Same);
    }
    if !remote::is_commit(&repo, theirs) {
        return Ok(Taken::Kept("not a commit there".into()));
    }
    if let Some(missing) = bundle::missing_below(&repo, theirs)? {
        return Err(RemoteError::Missing { name, missing });
    }
    let file = domain::config::FILE;
    let text = |commit: Oid| -> Result<String> {
        Ok(String::from_utf8_lossy(&ws.repo.read_file(commit, file)?.unwrap_or_default()).into_owned())
    };
    let mine = match ours {
        Some(ours) => text(ours)?,
        None => config.template.to_owned(),
    };
    let theirs_text = text(theirs)?;
    let rebased = crate::fleet::rebase::rebase_config(&theirs_text, &mine);
    if config.trust {
        // What trusting takes over: where the remote's differs from what would be kept.
        let yours = rebased.unwrap_or(mine);
        let taken = crate::fleet::rebase::config_differences(&theirs_text, &yours);
        if ours.is_none_or(|o| remote::descends(&repo, theirs, o).unwrap_or(false)) {
            bundle::set_refs(&repo, &[(name, theirs)])?;
            return Ok(Taken::Moved(taken));
        }
        let message = "config: taken from a remote as it was pushed (--trust-config)";
        let commit = ws.repo.commit_edits(&[ours.unwrap_or(theirs), theirs], Some(theirs), &[], message)?;
        ws.repo.move_branch(&format!("config/{lineage}"), commit, ours.unwrap_or(theirs), message)?;
        return Ok(Taken::Moved(taken));
    }
    let rebased = match rebased {
        Ok(rebased) => rebased,
        Err(why) => return Ok(Taken::Kept(format!("its config cannot take your settings: {why}"))),
    };
    let kept = crate::fleet::rebase::config_differences(&theirs_text, &rebased);
    let parents: Vec<Oid> = ours.into_iter().chain([theirs]).collect();
    let edits = [TreeEdit::Write { path: file.to_owned(), bytes: rebased.into_bytes() }];
    let message = "config: taken from a remote, with this user's providers, MCP servers, tool environment and sandbox";
    let commit = ws.repo.commit_edits(&parents, Some(theirs), &edits, message)?;
    match ours {
        Some(ours) => ws.repo.move_branch(&format!("config/{lineage}"), commit, ours, message)?,
        None => ws.repo.create_branch(&format!("config/{lineage}"), commit, message)?,
    }
    Ok(Taken::Moved(kept))
}

enum Forward {
    Moved,
    Same,
    Kept(&'static str),
}

/// Moves `name` of the repository at `git_dir` to `theirs` if that only adds history
/// (or whatever it does, when `anyway`).
fn forward(git_dir: &Path, name: &str, theirs: Oid, anyway: bool) -> Result<Forward> {
    let ours = bundle::refs(git_dir, &[name.to_owned()])?.first().map(|(_, o)| *o);
    let step = match ours {
        Some(ours) if ours == theirs => return Ok(Forward::Same),
        Some(_) if anyway => Forward::Moved,
        Some(ours) if remote::descends(git_dir, ours, theirs)? => Forward::Kept("ahead of the remote: push it"),
        Some(ours) if !remote::descends(git_dir, theirs, ours)? => {
            Forward::Kept("gone another way here than there: neither is behind the other")
        }
        _ => Forward::Moved,
    };
    if let Forward::Moved = step {
        if !remote::is_commit(git_dir, theirs) {
            return Ok(Forward::Kept("not a commit there"));
        }
        if let Some(missing) = bundle::missing_below(git_dir, theirs)? {
            return Err(RemoteError::Missing { name: name.to_owned(), missing });
        }
        bundle::set_refs(git_dir, &[(name.to_owned(), theirs)])?;
    }
    Ok(step)
}

/// Writes the step records of `commit` that `id` has no record of here; how many.
/// Only records of steps the agent's branch can have made are written: no more than
/// its first-parent history has commits (each step makes at least one); a records ref
/// that is not a commit is passed over.
pub(super) fn write_records(ws: &Workspace, door: &Beneath, id: &AgentId, commit: Oid) -> Result<usize> {
    let repo = ws.layout.repo();
    let Some(tip) = ws.repo.branch_tip(&id.branch())? else { return Ok(0) };
    if !remote::is_commit(&repo, commit) {
        return Ok(0);
    }
    let bound = remote::first_parent_len(&repo, tip, 1 << 20)? as u32 + 1;
    let have = crate::store::step_record::numbers(&ws.layout.steps(id));
    let mut written = std::collections::BTreeSet::new();
    for (path, blob) in ws.repo.list_files(commit, "")? {
        let Some(number) = crate::store::step_record::number_of(top(&path)) else { continue };
        let plain = path.split('/').all(|p| !p.is_empty() && p != "." && p != "..");
        if have.contains(&number) || !plain || number > bound {
            continue;
        }
        let rel = format!("steps/{id}/{path}");
        let bytes = ws.repo.read_blob(blob)?;
        // One that cannot be written here (a name too long, a place taken) is passed over.
        if door.write(Path::new(&rel), &bytes, None, false).is_ok() {
            written.insert(number);
        }
    }
    Ok(written.len())
}

/// Where messages to agent `to` wait on a remote (`refs/offshoot/inbox/<to>/<name>`).
pub(crate) fn inbox_ref(to: &AgentId, name: &str) -> String {
    format!("{}{name}", inbox_prefix(to.as_str()))
}

/// Where messages to agent `to` wait on a remote: the prefix of their refs.
pub(super) fn inbox_prefix(to: &str) -> String {
    format!("{}/", Shelf::Inbox.ref_name(to))
}

/// A name for message `text` on a remote: its time (for the order of delivery), `n`,
/// and its content's id (so sending it again after a crash names the same ref).
pub(crate) fn message_name(text: &str, n: u32, blob: Oid) -> String {
    let at: String =
        text.lines().find_map(|l| l.strip_prefix("at: ")).unwrap_or("").chars().filter(char::is_ascii_digit).collect();
    format!("{at:0>14}-{n:06}-{}", &blob.to_string()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_under_a_prefix_are_those_and_only_those() {
        let oid = |n: u8| Oid::from_bytes(&[n; 20]).expect("oid");
        let names = [
            "refs/offshoot/inbox/a.1/m",
            "refs/offshoot/inbox/a/m1",
            "refs/offshoot/inbox/a/m2",
            "refs/offshoot/inbox/ab/m",
        ];
        let repo = names.iter().enumerate().map(|(i, n)| ((*n).to_owned(), oid(i as u8))).collect();
        let seen = Seen { repo, project: BTreeMap::new() };
        let prefix = inbox_prefix("a");
        let under: Vec<(&str, Oid)> = seen.under(&prefix).collect();
        assert_eq!(under, [("refs/offshoot/inbox/a/m1", oid(1)), ("refs/offshoot/inbox/a/m2", oid(2))]);
        assert_eq!(seen.under("refs/heads/").count(), 0);
    }
}
