//! `offshoot doctor`: every invariant of a workspace checked, each fault said with what
//! repairs it. Safe repairs (stray temporary files, stale lock files, marks of agents
//! that do not exist) are made by `repair`; the rest name the command or the file.

use std::path::PathBuf;

use domain::id::AgentId;
use domain::inbox;
use domain::transcript;
use infra::git::{self, GitError};
use infra::lock::LockGuard;

use crate::agents::{self, AgentError};
use crate::store::snapshot::Loader;
use crate::store::workspace::Workspace;

/// How long a temporary or lock file must have been left before it counts as stray: a
/// live process holds one for milliseconds.
const STALE_SECS: u64 = 30;

/// One broken invariant.
#[derive(Debug, Clone)]
pub struct Finding {
    /// What is wrong, naming the agent, file or ref.
    pub what: String,
    pub fix: Fix,
}

/// How a finding is repaired.
#[derive(Debug, Clone)]
pub enum Fix {
    /// `repair` removes this file.
    RemoveFile(PathBuf),
    /// `repair` deletes this ref.
    DeleteRef(String),
    /// `repair` removes this directory and what is in it.
    RemoveDir(PathBuf),
    /// `repair` puts back what this agent planted in its git.
    PutBackGit(AgentId),
    /// `repair` gives the harness's repository this commit (an agent's base) from the
    /// agents' repository, which holds it.
    TakeBase(git::CommitId),
    /// A person's step, in words (a command where there is one).
    Manual(String),
}

/// What was checked, for the closing line.
#[derive(Debug, Default, Clone)]
pub struct Checked {
    pub agents: usize,
    pub entries: usize,
    pub inbox_files: usize,
    pub commits: usize,
    pub objects: usize,
    /// Trace spans the agents' runs could not send (not a finding: nothing to repair).
    pub spans_dropped: u64,
}

/// Checks every invariant; the findings, and what was checked.
pub fn check(ws: &Workspace) -> Result<(Vec<Finding>, Checked), AgentError> {
    let mut findings = Vec::new();
    let mut checked = Checked::default();
    let listed = agents::list(ws)?;
    let ids: Vec<AgentId> = listed.iter().map(|l| l.id.clone()).collect();
    let mut loader = Loader::default();
    for l in &listed {
        checked.agents += 1;
        let id = &l.id;
        checked.spans_dropped += crate::step::telemetry::dropped(&ws.layout.steps(id));
        if let Some(damage) = &l.damage {
            findings.push(Finding {
                what: format!("agent `{id}`'s branch is damaged: {damage}"),
                fix: Fix::Manual(format!("put `agents/{id}` back to a commit of the harness (`git reflog` is off in repo.git; its commits are the history), or leave it: nothing else depends on it")),
            });
            continue;
        }
        let entries = match loader.entries(&ws.repo, l.tip) {
            Ok(e) => e.to_vec(),
            Err(e) => {
                findings.push(Finding {
                    what: format!("agent `{id}`'s transcript does not load: {e}"),
                    fix: Fix::Manual(format!("look at `offshoot log {id}`")),
                });
                continue;
            }
        };
        checked.entries += entries.len();
        for fault in transcript::wire_faults(&entries) {
            findings.push(Finding {
                what: format!("agent `{id}`: {fault}"),
                fix: Fix::Manual(format!(
                    "fork a sound point: `offshoot fork --from {id}~1 …` (see `offshoot log {id}`)"
                )),
            });
        }
        let running = LockGuard::is_held(&ws.layout.lock(id)).unwrap_or(false);
        let unanswered = transcript::unanswered_calls(&entries);
        if !running && !unanswered.is_empty() {
            let calls: Vec<String> = unanswered.iter().map(|(call, name)| format!("{name} {call}")).collect();
            findings.push(Finding {
                what: format!("agent `{id}` has calls without results and no driver: {}", calls.join(", ")),
                fix: Fix::Manual(format!("`offshoot run {id}` settles them (or `offshoot scan` for every agent)")),
            });
        }
        match dispatch_of(ws, id, l.tip)? {
            None => findings.push(Finding {
                what: format!("agent `{id}`'s history has no dispatch commit"),
                fix: Fix::Manual(format!("its branch `agents/{id}` was rewritten by hand")),
            }),
            // A dispatch starts with no transcript (but a compactor's, which reads the
            // one it compacts): an entry there came with the tree it started from (a
            // project's commit), not from the harness.
            Some((commit, false)) if l.facts.as_ref().is_some_and(|f| f.role != domain::grant::COMPACTOR) => {
                let planted = ws.repo.list_dir(commit, domain::agent::MESSAGES)?;
                if !planted.is_empty() {
                    let names: Vec<&str> = planted.iter().map(|e| e.name.as_str()).collect();
                    findings.push(Finding {
                        what: format!(
                            "agent `{id}`'s transcript holds entries the harness did not write ({}): they came with the commit it started from",
                            names.join(", ")
                        ),
                        fix: Fix::Manual(format!(
                            "`offshoot rm {id}` and start it again: what those entries say was sent to the model as the user's words"
                        )),
                    });
                }
            }
            Some(_) => {}
        }
        check_base(ws, l, &mut findings);
    }
    check_inboxes(ws, &ids, &mut findings, &mut checked);
    check_step_temps(ws, &ids, &mut findings);
    check_marks(ws, &ids, &mut findings)?;
    check_locks(ws, &mut findings);
    check_object_temps(ws, &mut findings);
    check_quarantines(ws, &mut findings);
    check_planted(ws, &ids, &mut findings);
    let connectivity = ws.repo.connectivity()?;
    checked.commits = connectivity.commits;
    checked.objects = connectivity.objects;
    for (oid, reached) in connectivity.missing {
        findings.push(Finding {
            what: format!("object {oid} (reached from `{reached}`) is missing from repo.git"),
            fix: Fix::Manual("restore repo.git's objects from a backup; in project mode, check that the project's history was not pruned".into()),
        });
    }
    Ok((findings, checked))
}

/// A project agent's base must be in the harness's repository: `diff` and `export`
/// read it there.
fn check_base(ws: &Workspace, l: &agents::Listing, findings: &mut Vec<Finding>) {
    let Some(base) = l.facts.as_ref().and_then(|f| f.base.as_deref()) else { return };
    let Ok(commit) = <git::CommitId as std::str::FromStr>::from_str(base) else { return };
    if ws.repo.resolve_commit(base).is_some() {
        return;
    }
    let id = &l.id;
    let fix = match ws.project.has_commit(commit) {
        true => Fix::TakeBase(commit),
        false => {
            Fix::Manual(format!("`offshoot rm {id}`: what it started from is gone, so its change cannot be shown"))
        }
    };
    findings.push(Finding {
        what: format!(
            "agent `{id}` starts from commit {base}, which repo.git does not hold: `diff` and `export` cannot read it"
        ),
        fix,
    });
}

/// The commit that made agent `id`, in the first-parent history of `tip`, and whether it
/// is a fork (which carries its origin's transcript); `None` when there is none.
fn dispatch_of(ws: &Workspace, id: &AgentId, tip: git::CommitId) -> Result<Option<(git::CommitId, bool)>, GitError> {
    let (dispatch, fork) = (format!("dispatch {id}:"), format!("fork {id} from"));
    let mut at = Some(tip);
    while let Some(commit) = at {
        let subject = ws.repo.subject(commit)?;
        if subject.starts_with(&dispatch) || subject.starts_with(&fork) {
            return Ok(Some((commit, subject.starts_with(&fork))));
        }
        at = ws.repo.first_parent(commit)?;
    }
    Ok(None)
}

fn check_inboxes(ws: &Workspace, ids: &[AgentId], findings: &mut Vec<Finding>, checked: &mut Checked) {
    let root = ws.layout.root().join("inbox");
    for dir in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        let path = dir.path();
        if !ids.iter().any(|i| i.as_str() == name) {
            findings.push(Finding {
                what: format!("inbox {} belongs to no agent", path.display()),
                fix: Fix::Manual(format!("read what is in it, then remove {}", path.display())),
            });
            continue;
        }
        for file in std::fs::read_dir(&path).into_iter().flatten().flatten() {
            let file_name = file.file_name().to_string_lossy().into_owned();
            let full = file.path();
            checked.inbox_files += 1;
            if file_name.starts_with(".tmp-") {
                if age_secs(&full) >= STALE_SECS {
                    findings.push(Finding {
                        what: format!("stray temporary file {} (a deposit that was cut short)", full.display()),
                        fix: Fix::RemoveFile(full),
                    });
                }
                continue;
            }
            if inbox::parse_name(&file_name).is_none() {
                findings.push(Finding {
                    what: format!(
                        "{} is not an inbox file (`NNNN-<sender>.md`) and is never delivered",
                        full.display()
                    ),
                    fix: Fix::Manual(format!("move it out of {}", path.display())),
                });
                continue;
            }
            let text = std::fs::read_to_string(&full).unwrap_or_default();
            if inbox::Header::parse(&text).is_none() {
                findings.push(Finding {
                    what: format!("{} has no valid header (`---`, `from: <sender>`, `---`)", full.display()),
                    fix: Fix::Manual(format!(
                        "give it a header or remove it; `offshoot send {name} -` delivers text properly"
                    )),
                });
            }
        }
    }
}

/// Marks keyed by an agent id must name an existing agent; name claims must point at one.
fn check_marks(ws: &Workspace, ids: &[AgentId], findings: &mut Vec<Finding>) -> Result<(), GitError> {
    let exists = |id: &str| ids.iter().any(|i| i.as_str() == id);
    for (name, _) in ws.repo.all_refs()? {
        let Some(rest) = name.strip_prefix(infra::git::HARNESS_REFS) else { continue };
        let Some((kind, key)) = rest.split_once('/') else { continue };
        let owner = if kind == domain::marks::Mark::Names.kind() {
            let content = ws.repo.mark(kind, key)?.unwrap_or_default();
            String::from_utf8_lossy(&content).into_owned()
        } else {
            key.to_owned()
        };
        // (A root being made holds its lock from before its name is claimed.)
        let being_made =
            || AgentId::parse(&owner).is_ok_and(|o| LockGuard::is_held(&ws.layout.lock(&o)).unwrap_or(false));
        if !exists(&owner) && !exists(key) && !being_made() {
            findings.push(Finding {
                what: format!("mark `{name}` names agent `{owner}`, which does not exist"),
                fix: Fix::DeleteRef(name.clone()),
            });
        }
    }
    Ok(())
}

/// `*.tmp` files a record's atomic rewrite (or fold) leaves when its writer is killed in
/// between.
fn check_step_temps(ws: &Workspace, ids: &[AgentId], findings: &mut Vec<Finding>) {
    for id in ids {
        for step in std::fs::read_dir(ws.layout.steps(id)).into_iter().flatten().flatten() {
            // A fold's temporary file sits beside the records, a rewrite's in one.
            let beside = std::iter::once(step.path());
            let within = std::fs::read_dir(step.path()).into_iter().flatten().flatten().map(|f| f.path());
            for path in beside.chain(within) {
                if path.extension().is_some_and(|e| e == "tmp") && age_secs(&path) >= STALE_SECS {
                    findings.push(Finding {
                        what: format!("stray temporary file {} (a record rewrite that was cut short)", path.display()),
                        fix: Fix::RemoveFile(path),
                    });
                }
            }
        }
    }
}

fn check_locks(ws: &Workspace, findings: &mut Vec<Finding>) {
    let mut locks = ws.repo.lock_files();
    locks.extend(git::lock_files(&ws.layout.project()));
    locks.extend(git::lock_files(&ws.layout.root().join("index")));
    for (path, age) in locks {
        if age >= STALE_SECS {
            findings.push(Finding {
                what: format!("stale lock file {} ({age} s old): the next write there would fail", path.display()),
                fix: Fix::RemoveFile(path),
            });
        }
    }
}

/// What agents whose driver is not running (killed during a call) planted in their
/// git for a person's `git` to run.
fn check_planted(ws: &Workspace, ids: &[AgentId], findings: &mut Vec<Finding>) {
    for id in ids {
        if LockGuard::is_held(&ws.layout.lock(id)).unwrap_or(true) {
            continue;
        }
        let planted = crate::store::directory::planted(ws, id);
        if !planted.is_empty() {
            findings.push(Finding {
                what: format!(
                    "agent `{id}`'s git has {} of the agent's making, which a person's `git` in its directory would run",
                    planted.join(", ")
                ),
                fix: Fix::PutBackGit(id.clone()),
            });
        }
    }
}

/// Quarantines of publications a kill cut short: objects that never reached the shared
/// store (the next driver or `scan` removes them too).
fn check_quarantines(ws: &Workspace, findings: &mut Vec<Finding>) {
    for dir in ws.project.abandoned_quarantines() {
        findings.push(Finding {
            what: format!("{} holds the objects of a publication a kill cut short", dir.display()),
            fix: Fix::RemoveDir(dir),
        });
    }
}

/// Object files a killed write left half made in `repo.git` or `project.git` (never
/// read: an object is only found under its final name).
fn check_object_temps(ws: &Workspace, findings: &mut Vec<Finding>) {
    let mut temps = ws.repo.temp_objects();
    temps.extend(git::temp_objects(&ws.layout.project()));
    for (path, age) in temps {
        if age >= STALE_SECS {
            findings.push(Finding {
                what: format!("stray temporary file {} (an object write that was cut short)", path.display()),
                fix: Fix::RemoveFile(path),
            });
        }
    }
}

fn age_secs(path: &std::path::Path) -> u64 {
    git::file_age(path).map_or(0, |a| a.as_secs())
}

/// Makes the safe repairs among `findings`; what it did, in words.
pub fn repair(ws: &Workspace, findings: &[Finding]) -> Vec<String> {
    let mut done = Vec::new();
    for f in findings {
        match &f.fix {
            Fix::RemoveFile(path) => {
                if std::fs::remove_file(path).is_ok() {
                    done.push(format!("removed {}", path.display()));
                }
            }
            Fix::RemoveDir(path) => {
                if std::fs::remove_dir_all(path).is_ok() {
                    done.push(format!("removed {}", path.display()));
                }
            }
            Fix::PutBackGit(id) => {
                if let Ok(put_back) = crate::store::directory::put_back(ws, id) {
                    done.push(format!("put back agent `{id}`'s {}", put_back.join(", ")));
                }
            }
            Fix::TakeBase(commit) => {
                if ws.hold_base(*commit).unwrap_or(false) {
                    done.push(format!("gave repo.git commit {commit} (an agent's base)"));
                }
            }
            Fix::DeleteRef(name) => {
                if ws.repo.delete_ref(name).is_ok() {
                    done.push(format!("deleted {name}"));
                }
            }
            Fix::Manual(_) => {}
        }
    }
    done
}
