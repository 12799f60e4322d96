//! `offshoot scan`: agents whose driver died with work left (mail undelivered, a call
//! due or cut short, an answer never deposited) are relaunched once; one still dead at
//! the same commit after that is reported to its parent with a `died` obituary, once.
//! First, what an agent whose driver is gone planted in its git for a person's `git` to
//! run is put back; last, quarantines of publications a kill cut short are removed.

use crate::Cause;
use domain::id::AgentId;
use domain::marks::{Epitaph, Mark};
use infra::git::{CommitId, GitError};
use infra::lock::{LockError, LockGuard};

use crate::agents::lifecycle::{self, LifecycleError};
use crate::agents::runtime::{Runtime, Woken};
use crate::agents::{self, AgentError};
use crate::step::driver::DriverError;
use crate::store::snapshot::{Loader, SnapshotError};
use crate::store::workspace::Workspace;

/// The mark of an agent scan relaunched (`refs/offshoot/relaunched/<id>`, the tip it
/// was dead at).
const RELAUNCHED: &str = Mark::Relaunched.kind();
/// The mark of an agent scan reported dead (`refs/offshoot/died/<id>`, the tip).
const DIED: &str = Mark::Died.kind();
/// The epitaph of an agent whose driver died and a relaunch did not move.
const EPITAPH_DIED: &str = Epitaph::Died.as_str();

/// What scan did about one agent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Finding {
    /// A new driver was started (`pid`), or one had just started (`None`).
    Relaunched { agent: String, why: &'static str, pid: Option<u32> },
    /// Dead again at the same commit: its parent (if any) was told.
    Died { agent: String, why: &'static str, told: Option<String> },
    /// Left alone in a worker's workspace: the fleet's workers drive it, and only a
    /// running worker here starts drivers, for the agents it claimed.
    Fleet { agent: String, why: &'static str },
    /// An agent that was being made when its maker died: its id (and name) claims were
    /// released.
    Released { agent: String, name: Option<String> },
}

/// What the `relaunched` mark holds: the tip the agent was relaunched at, and the driver
/// process started for it (pid and start time), when one was.
struct Relaunch {
    tip: String,
    driver: Option<(u32, u64)>,
}

impl Relaunch {
    fn parse(text: &str) -> Option<Relaunch> {
        let mut words = text.split_whitespace();
        let tip = words.next()?.to_owned();
        let driver = words.next().and_then(|p| p.parse().ok()).zip(words.next().and_then(|s| s.parse().ok()));
        Some(Relaunch { tip, driver })
    }
}

impl std::fmt::Display for Relaunch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.tip)?;
        if let Some((pid, started)) = self.driver {
            write!(f, " {pid} {started}")?;
        }
        Ok(())
    }
}

/// How old a root's name claim must be before scan takes its maker for dead (a root is
/// made by a command, which holds no lock scan could ask).
const ROOT_CLAIM_STALE: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Driver(#[from] Box<DriverError>),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    #[error("cannot relaunch `{id}`: {reason}")]
    Launch {
        id: AgentId,
        #[source]
        reason: Cause,
    },
}

type Result<T> = std::result::Result<T, ScanError>;

impl From<DriverError> for ScanError {
    fn from(e: DriverError) -> Self {
        ScanError::Driver(Box::new(e))
    }
}

pub fn scan(ws: &Workspace, rt: &Runtime) -> Result<Vec<Finding>> {
    let mut loader = Loader::default();
    let mut found = Vec::new();
    let listed = agents::list(ws)?;
    // What agents killed during a call planted in their git for a person's to run.
    for l in &listed {
        if !LockGuard::is_held(&ws.layout.lock(&l.id)).unwrap_or(true) {
            let _ = crate::store::directory::put_back(ws, &l.id);
        }
    }
    for l in listed {
        let Some(facts) = &l.facts else { continue };
        let Some(why) = left_undone(ws, &mut loader, &l.id, l.tip, facts.parent.as_deref())? else { continue };
        let tip = l.tip.to_string();
        if ws.repo.mark(DIED, l.id.as_str())?.as_deref() == Some(tip.as_bytes()) {
            continue;
        }
        // (Neither relaunched nor reported dead: its worker, or another, decides.)
        if ws.layout.worker().exists() {
            found.push(Finding::Fleet { agent: l.id.to_string(), why });
            continue;
        }
        let relaunched = ws.repo.mark(RELAUNCHED, l.id.as_str())?.map(|m| String::from_utf8_lossy(&m).into_owned());
        let relaunched = relaunched.as_deref().and_then(Relaunch::parse).filter(|r| r.tip == tip);
        let Some(relaunched) = relaunched else {
            let pid = match rt.wake(&l.id) {
                Ok(Woken::Launched(pid)) => Some(pid),
                Ok(Woken::Running | Woken::Deferred) => None,
                Err(e) => return Err(ScanError::Launch { id: l.id.clone(), reason: e.into() }),
            };
            // With the process started, so a scan soon after does not take one that is
            // still starting (it holds no lock yet) for dead. (A scan killed before this
            // write leaves no mark: the next relaunches again, which a running driver's
            // lock makes harmless.)
            let driver = pid.and_then(|p| infra::process::start_time(p).map(|s| (p, s)));
            let mark = Relaunch { tip: tip.clone(), driver }.to_string();
            ws.repo.set_mark(RELAUNCHED, l.id.as_str(), mark.as_bytes())?;
            found.push(Finding::Relaunched { agent: l.id.to_string(), why, pid });
            continue;
        };
        let alive = |(pid, started): (u32, u64)| {
            infra::process::running(pid) && infra::process::start_time(pid) == Some(started)
        };
        if relaunched.driver.is_some_and(alive) {
            // Its relaunched driver is still starting (or running without the lock yet).
            continue;
        }
        // Relaunched at this very commit and dead again: a claim makes the report one
        // even when two scans race.
        let _ = ws.repo.delete_mark(DIED, l.id.as_str());
        if !ws.repo.claim_mark(DIED, l.id.as_str(), tip.as_bytes())? {
            continue;
        }
        let parent = facts.parent.as_deref().and_then(|p| AgentId::parse(p).ok());
        if let Some(parent) = &parent {
            let body = format!(
                "`{}` stopped working ({why}) and a relaunch did not get it further; everything it did is on its branch (commit {tip}). `offshoot log {}` shows its last step; a message to it tries again.",
                l.id, l.id
            );
            lifecycle::deposit_result(ws, rt, &l.id, parent, EPITAPH_DIED, l.tip, body)?;
        }
        found.push(Finding::Died { agent: l.id.to_string(), why, told: parent.map(|p| p.to_string()) });
    }
    found.extend(release_dead_claims(ws)?);
    // What publications cut short by a kill left (never part of the shared store).
    ws.project.sweep_quarantines();
    ws.sweep_leftovers();
    Ok(found)
}

/// Claims of ids and names for agents that were never made because their maker died in
/// between (a SIGKILL during a dispatch): a child's when its parent's driver is gone, a
/// root's when the claim is older than `ROOT_CLAIM_STALE`.
fn release_dead_claims(ws: &Workspace) -> Result<Vec<Finding>> {
    let mut claimed: Vec<(String, Option<String>)> =
        ws.repo.marks(agents::IDS, "")?.into_iter().map(|id| (id, None)).collect();
    for name in ws.repo.marks(agents::NAMES, "")? {
        let id = String::from_utf8_lossy(&ws.repo.mark(agents::NAMES, &name)?.unwrap_or_default()).into_owned();
        match claimed.iter_mut().find(|(i, _)| *i == id) {
            Some(entry) => entry.1 = Some(name),
            None => claimed.push((id, Some(name))),
        }
    }
    let mut released = Vec::new();
    for (id, name) in claimed {
        let Ok(agent) = AgentId::parse(&id) else { continue };
        if ws.repo.branch_tip(&agent.branch())?.is_some() {
            continue;
        }
        let maker_gone = match agent.parent() {
            // A parent with calls cut short settles them itself: its dispatch, run again,
            // finds its claim by the call's key (and lets it go, or makes the child).
            Some(parent) => !LockGuard::is_held(&ws.layout.lock(&parent))? && !has_open_calls(ws, &parent)?,
            None => {
                name.as_deref().and_then(|n| ws.repo.mark_age(agents::NAMES, n)).is_some_and(|a| a >= ROOT_CLAIM_STALE)
            }
        };
        if !maker_gone {
            continue;
        }
        ws.repo.delete_mark(agents::IDS, &id)?;
        if let Some(name) = &name {
            ws.repo.delete_mark(agents::NAMES, name)?;
        }
        released.push(Finding::Released { agent: id, name });
    }
    Ok(released)
}

/// Whether `id`'s transcript ends in calls without results.
fn has_open_calls(ws: &Workspace, id: &AgentId) -> Result<bool> {
    let Some(tip) = ws.repo.branch_tip(&id.branch())? else { return Ok(false) };
    let mut loader = Loader::default();
    Ok(!domain::transcript::unanswered_calls(loader.entries(&ws.repo, tip)?).is_empty())
}

/// Why an agent no driver holds still has work, if it does; stopped agents wait for a
/// message by design.
fn left_undone(
    ws: &Workspace,
    loader: &mut Loader,
    id: &AgentId,
    tip: CommitId,
    parent: Option<&str>,
) -> Result<Option<&'static str>> {
    if LockGuard::is_held(&ws.layout.lock(id))? || ws.repo.mark(lifecycle::STOPPED, id.as_str())?.is_some() {
        return Ok(None);
    }
    Ok(lifecycle::work_left(ws, loader, id, tip, parent)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Env;
    use crate::agents::Start;
    use crate::store::workspace::template_files;
    use infra::time::Timestamp;

    #[test]
    fn an_agent_whose_relaunched_driver_is_still_starting_is_not_reported_dead() {
        let dir = std::env::temp_dir().join(format!("offshoot-scan-starting-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ws = Workspace::create(&dir.join("ws"), &template_files(None).expect("template")).expect("workspace");
        let env = Env::default();
        let start = Start {
            message: "go",
            name: None,
            now: Timestamp::now(),
            random: 9,
            env: &env,
            project: None,
            model: None,
            reasoning: None,
            copy_ignored: &[],
            mode: None,
            on_ask: None,
        };
        let id = agents::create_root(&ws, "worker", "default", &start).expect("root");
        let rt = Runtime::new(ws.layout.clone(), std::path::PathBuf::from("/nonexistent"), env, Default::default());
        // Relaunched at its tip, the driver started for it (this very process, alive)
        // holding no lock yet: not dead, whatever scans come meanwhile.
        let tip = ws.repo.branch_tip(&id.branch()).expect("tip").expect("branch");
        let me = std::process::id();
        let started = infra::process::start_time(me).expect("stat");
        let mark = format!("{tip} {me} {started}");
        ws.repo.set_mark(RELAUNCHED, id.as_str(), mark.as_bytes()).expect("mark");
        assert_eq!(scan(&ws, &rt).expect("scan"), Vec::<Finding>::new());
        // Once that process is gone (another start time: not this process), it is.
        let gone = format!("{tip} {me} {}", started + 1);
        ws.repo.set_mark(RELAUNCHED, id.as_str(), gone.as_bytes()).expect("mark");
        let found = scan(&ws, &rt).expect("scan");
        assert!(matches!(found.as_slice(), [Finding::Died { .. }]), "{found:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
