//! An agent in one file. `offshoot bundle <agent> <file>` writes a tar
//! archive: `manifest.json`; `repo.bundle`, a git bundle of the harness's refs for the
//! agent, the agents below it (and with `--with-origin` the agent it was forked from),
//! the config lineages they ran on, and their marks; `project.bundle`, their branches
//! of the agents' own git; and their step records and undelivered messages under
//! `steps/<id>/` and `inbox/<id>/`. No secret goes in: before anything is written,
//! every object, record and message bundled is searched for every secret the harness
//! knows of (the keys in the environment, secret-named variables, MCP header and
//! environment values of every config commit bundled), and a bundle holding one is
//! refused naming where it is.
//!
//! `offshoot replay <file>` makes a new workspace from it: the repositories' refs and
//! objects from the git bundles (a project agent's base given to the harness's too), the
//! records and messages through the door, and on each config lineage a last commit giving
//! it the replaying user's providers, MCP servers and sandbox ([`rebase_config`]). It is
//! built under a temporary name beside its place and renamed into place whole.

use crate::Cause;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use domain::id::AgentId;
use domain::marks::Mark;
use infra::door::Beneath;
use infra::git::{CommitId, GitError, bundle};

use super::rebase::{config_differences, rebase_config};
use crate::agents::{self, Listing};
use crate::store::workspace::Workspace;

/// The format a bundle's manifest names.
const FORMAT: &str = "offshoot-bundle";
const VERSION: u32 = 1;

/// What a bundle or replay being made is called until it is whole (then `<pid>`): what
/// one killed mid-way left is swept by the next.
const PARTIAL: &str = ".offshoot-partial-";

/// The most a bundle's record or message file may be when replayed.
const FILE_AT_MOST: u64 = 1 << 30;
/// The most a bundle's manifest and each of its two git bundles may take, and how many
/// files it may hold.
const MANIFEST_AT_MOST: u64 = 16 << 20;
const GIT_BUNDLE_AT_MOST: u64 = 16 << 30;
const FILES_AT_MOST: usize = 1_000_000;

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("there is no agent `{0}` in this workspace")]
    Unknown(String),
    #[error("`{0}` exists already; give a path where nothing is")]
    Exists(PathBuf),
    #[error(
        "not bundled: the value of {what} is in {place}; a bundle carries no secret (remove it, or bundle an agent whose history does not hold it)"
    )]
    Secret { what: String, place: String },
    #[error("{path} is not an offshoot bundle: {reason}")]
    Corrupt {
        path: PathBuf,
        #[source]
        reason: Cause,
    },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Agents(#[from] agents::AgentError),
    #[error(transparent)]
    Workspace(#[from] crate::store::workspace::WorkspaceError),
}

type Result<T> = std::result::Result<T, BundleError>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BundleError + '_ {
    move |source| BundleError::Io { path: path.to_owned(), source }
}

/// What a bundle says of itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub(crate) format: String,
    pub(crate) version: u32,
    /// The agent bundled, and every agent in the bundle (it first).
    pub agent: String,
    pub agents: Vec<String>,
    pub lineages: Vec<String>,
    pub made_by: String,
    /// The secrets looked for and not found, by the variable or setting they come from.
    pub secrets_looked_for: Vec<String>,
}

/// What `make` wrote.
#[derive(Debug)]
pub struct Bundled {
    pub manifest: Manifest,
    pub records: usize,
    pub bytes: u64,
}

/// The agents a bundle of `id` holds: it, the agents below it, and with `with_origin`
/// the agent whose branch holds the commit it was forked from.
fn members(listings: &[Listing], id: &AgentId, with_origin: bool, ws: &Workspace) -> Result<Vec<Listing>> {
    let me = listings.iter().find(|l| l.id == *id).ok_or_else(|| BundleError::Unknown(id.to_string()))?;
    let below = format!("{id}.");
    let mut chosen: Vec<Listing> = vec![me.clone()];
    chosen.extend(listings.iter().filter(|l| l.id.as_str().starts_with(&below)).cloned());
    if with_origin && let Some(from) = me.facts.as_ref().and_then(|f| f.forked_from.as_deref()) {
        // The agent whose commit it is: its facts say.
        let owner = infra::git::ObjectId::from_str(from)
            .ok()
            .and_then(|f| crate::store::snapshot::read_facts(&ws.repo, f).ok());
        let origin = owner.and_then(|o| listings.iter().find(|l| l.id.as_str() == o.id && l.id != *id));
        if let Some(origin) = origin.filter(|o| !chosen.iter().any(|c| c.id == o.id)) {
            chosen.push(origin.clone());
        }
    }
    Ok(chosen)
}

/// The secrets to look for, each with the name it is known by: those of the
/// environment, and those every config the bundled refs reach sets (a header or
/// environment value set once stays in the history agents descend from, on a lineage's
/// branch or not).
fn secrets(ws: &Workspace, refs: &[(String, infra::git::ObjectId)], env: &crate::Env) -> Result<Vec<(String, String)>> {
    let mut found: Vec<(String, String)> = Vec::new();
    let mut add = |config: &domain::config::Config| {
        for (name, value) in domain::tool_env::secret_values(env.vars(), config) {
            if !found.iter().any(|(_, v)| *v == value) {
                found.push((name, value));
            }
        }
    };
    let configs = bundle::configs_below(&ws.layout.repo(), refs, domain::config::FILE, domain::agent::DIR)?;
    for (_, text) in configs {
        let text = String::from_utf8_lossy(&text);
        if let Ok(config) = domain::config::Config::parse(&text, &|_| true) {
            add(&config);
        }
    }
    Ok(found)
}

/// Writes the bundle of agent `id` to `out`, which must not exist.
pub fn make(ws: &Workspace, id: &AgentId, with_origin: bool, env: &crate::Env, out: &Path) -> Result<Bundled> {
    if std::fs::symlink_metadata(out).is_ok() {
        return Err(BundleError::Exists(out.to_owned()));
    }
    if let Some(dir) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        crate::sweep_left_by_dead(dir, |n| crate::pid_after(n, ".", PARTIAL));
    }
    let listings = agents::list(ws)?;
    let chosen = members(&listings, id, with_origin, ws)?;
    let lineages: Vec<String> = chosen
        .iter()
        .filter_map(|l| l.facts.as_ref().map(|f| f.lineage.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut repo_globs: Vec<String> = lineages.iter().map(|l| format!("refs/heads/config/{l}")).collect();
    let mut project_globs = vec![format!("refs/heads/{}", infra::git::MAIN)];
    for member in &chosen {
        repo_globs.push(format!("refs/heads/{}", member.id.branch()));
        // Not the working directory: a path of this machine.
        for mark in Mark::ALL.iter().filter(|m| !matches!(m, Mark::Names | Mark::Cwd)) {
            repo_globs.push(mark.ref_name(&member.id));
        }
        if let Some(facts) = &member.facts {
            if let Some(name) = &facts.name {
                repo_globs.push(Mark::Names.ref_name(name));
            }
            project_globs.push(format!("refs/heads/{}", facts.project_branch()));
        }
    }
    let repo_refs = bundle::refs(&ws.layout.repo(), &repo_globs)?;
    let project_refs = bundle::refs(&ws.layout.project(), &project_globs)?;
    let files = record_files(ws, &chosen)?;

    // No secret goes in.
    let secrets = secrets(ws, &repo_refs, env)?;
    let needles: Vec<&str> = secrets.iter().map(|(_, v)| v.as_str()).collect();
    let named = |i: usize| secrets[i].0.clone();
    for (git_dir, refs) in [(ws.layout.repo(), &repo_refs), (ws.layout.project(), &project_refs)] {
        if let Some((i, place)) = bundle::find_in_objects(&git_dir, refs, &needles)? {
            return Err(BundleError::Secret { what: named(i), place });
        }
    }
    for (path, bytes) in &files {
        if let Some(i) = needles.iter().position(|n| bundle::contains(bytes, n.as_bytes())) {
            return Err(BundleError::Secret { what: named(i), place: format!("`{path}`") });
        }
    }

    let manifest = Manifest {
        format: FORMAT.into(),
        version: VERSION,
        agent: id.to_string(),
        agents: chosen.iter().map(|l| l.id.to_string()).collect(),
        lineages,
        made_by: format!("offshoot {}", env!("CARGO_PKG_VERSION")),
        secrets_looked_for: secrets.iter().map(|(name, _)| name.clone()).collect(),
    };
    let repo_bundle = bundle::write(&ws.layout.repo(), &repo_refs)?;
    // Nothing of an agent's making goes out with a tree git refuses.
    ws.project.check_sent(&project_refs.iter().map(|(_, o)| *o).collect::<Vec<_>>())?;
    let project_bundle = bundle::write(&ws.layout.project(), &project_refs)?;
    let temp = out.with_file_name(format!(
        ".{}{PARTIAL}{}",
        out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id()
    ));
    let written = (|| -> std::io::Result<()> {
        let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&temp)?;
        let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
        let manifest_json = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
        append(&mut tar, "manifest.json", &manifest_json)?;
        append(&mut tar, "repo.bundle", &repo_bundle)?;
        append(&mut tar, "project.bundle", &project_bundle)?;
        for (path, bytes) in &files {
            append(&mut tar, path, bytes)?;
        }
        tar.into_inner()?.flush()?;
        // Not `rename`: a file made at `out` meanwhile is not replaced.
        std::fs::hard_link(&temp, out)?;
        std::fs::remove_file(&temp)
    })();
    if let Err(source) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(BundleError::Io { path: out.to_owned(), source });
    }
    let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    Ok(Bundled { manifest, records: files.len(), bytes })
}

fn append(tar: &mut tar::Builder<impl Write>, path: &str, bytes: &[u8]) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut header, path, bytes)
}

/// The step records (either form; not the driver's log or its event log) and
/// undelivered messages of `chosen`, by their path in the bundle.
fn record_files(ws: &Workspace, chosen: &[Listing]) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    for member in chosen {
        let steps = step_files(ws, &member.id)?;
        files.extend(steps.into_iter().map(|(path, bytes)| (format!("steps/{}/{path}", member.id), bytes)));
        let inbox = ws.layout.inbox(&member.id);
        for entry in std::fs::read_dir(&inbox).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') && entry.file_type().is_ok_and(|t| t.is_file()) {
                let path = entry.path();
                files.push((format!("inbox/{}/{name}", member.id), std::fs::read(&path).map_err(io(&path))?));
            }
        }
    }
    Ok(files)
}

/// The step records of `id` (either form), by their path below its `steps/` directory.
pub(super) fn step_files(ws: &Workspace, id: &AgentId) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(ws.layout.steps(id)).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if crate::store::step_record::number_of(&name).is_some() {
            walk_files(&entry.path(), &name, &mut files)?;
        }
    }
    Ok(files)
}

/// The regular files at and below `path` (links and the like left out).
fn walk_files(path: &Path, shown: &str, files: &mut Vec<(String, Vec<u8>)>) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).map_err(io(path))?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).map_err(io(path))?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            walk_files(&entry.path(), &format!("{shown}/{name}"), files)?;
        }
    } else if meta.is_file() && !shown.ends_with(".tmp") {
        files.push((shown.to_owned(), std::fs::read(path).map_err(io(path))?));
    }
    Ok(())
}

/// What `replay` made.
pub struct Replayed {
    pub manifest: Manifest,
    pub workspace: Workspace,
    /// Per lineage, the settings where the bundle's differed from this user's: kept as
    /// this user's, or (trusted) taken as the bundle's.
    pub config: Vec<(String, Vec<String>)>,
}

/// Makes a new workspace at `dest` (which must not exist) from the bundle `file`; each
/// bundled lineage gets a last commit with [`rebase_config`] over `mine`.
pub fn replay(file: &Path, dest: &Path, mine: &str, trust: bool) -> Result<Replayed> {
    if std::fs::symlink_metadata(dest).is_ok() {
        return Err(BundleError::Exists(dest.to_owned()));
    }
    let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // What a replay killed mid-way left here goes first.
    crate::sweep_left_by_dead(parent, |n| crate::pid_after(n, ".", PARTIAL));
    let staging = parent.join(format!(".{name}{PARTIAL}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let made = fill(file, &staging, mine, trust).and_then(|(manifest, config)| {
        std::fs::rename(&staging, dest).map_err(io(dest))?;
        Ok(Replayed { manifest, workspace: Workspace::open(dest)?, config })
    });
    if made.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    made
}

/// Per lineage, the settings where a bundle's config differed from this user's (as
/// [`Replayed::config`] has them).
type Differing = Vec<(String, Vec<String>)>;

/// Reads the bundle `file` into a workspace made at `root` as it comes (one part at a
/// time, each within its size); its manifest. The parts must come in the order
/// `bundle` writes them: the manifest, `repo.bundle`, `project.bundle`, then records
/// and messages.
fn fill(file: &Path, root: &Path, mine: &str, trust: bool) -> Result<(Manifest, Differing)> {
    let corrupt = |reason: String| BundleError::Corrupt { path: file.to_owned(), reason: reason.into() };
    let opened = std::fs::File::open(file).map_err(io(file))?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(opened));
    let mut entries = archive.entries().map_err(|e| corrupt(format!("not a tar archive ({e})")))?;
    let mut names = BTreeSet::new();
    let mut next = |want: Option<&str>| -> Result<Option<(String, tar::Entry<'_, _>)>> {
        let Some(entry) = entries.next() else {
            return match want {
                Some(name) => Err(corrupt(format!("it has no {name}"))),
                None => Ok(None),
            };
        };
        let entry = entry.map_err(|e| corrupt(format!("an entry cannot be read ({e})")))?;
        let path = entry.path().map_err(|e| corrupt(format!("an entry's name cannot be read ({e})")))?;
        let path = path.to_string_lossy().into_owned();
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(corrupt(format!("`{path}` is not a regular file")));
        }
        if let Some(name) = want.filter(|name| path != *name) {
            return Err(corrupt(format!(
                "`{path}` comes where its {name} should (the parts come in the order `offshoot bundle` writes them)"
            )));
        }
        if !names.insert(path.clone()) {
            return Err(corrupt(format!("it holds `{path}` twice")));
        }
        if names.len() > FILES_AT_MOST {
            return Err(corrupt(format!("it holds over {FILES_AT_MOST} files")));
        }
        Ok(Some((path, entry)))
    };
    let (_, mut entry) = next(Some("manifest.json"))?.ok_or_else(|| corrupt("it has no manifest.json".into()))?;
    let manifest = read_manifest(&mut entry).map_err(corrupt)?;
    let agents: Vec<AgentId> = manifest
        .agents
        .iter()
        .map(|a| AgentId::parse(a).map_err(|_| corrupt(format!("its manifest names `{a}`, which is not an agent id"))))
        .collect::<Result<_>>()?;
    if manifest.agents.first() != Some(&manifest.agent) {
        return Err(corrupt("its manifest's agent is not the first of its agents".into()));
    }
    let ws = Workspace::create_bare(root)?;
    let (repo_dir, project_dir) = (ws.layout.repo(), ws.layout.project());
    let mut unpacked = Vec::new();
    for (name, dir) in [("repo.bundle", &repo_dir), ("project.bundle", &project_dir)] {
        let (_, entry) = next(Some(name))?.ok_or_else(|| corrupt(format!("it has no {name}")))?;
        if entry.size() > GIT_BUNDLE_AT_MOST {
            return Err(corrupt(format!("its {name} is {} bytes, over {GIT_BUNDLE_AT_MOST}", entry.size())));
        }
        let refs =
            bundle::unpack_from(dir, entry, GIT_BUNDLE_AT_MOST).map_err(|e| corrupt(format!("its {name}: {e}")))?;
        unpacked.push(refs);
    }
    let [repo_refs, project_refs] = <[_; 2]>::try_from(unpacked).unwrap_or_default();
    for id in &agents {
        let branch = format!("refs/heads/{}", id.branch());
        if !repo_refs.iter().any(|(name, _)| *name == branch) {
            return Err(corrupt(format!("its repo.bundle has no branch for agent `{id}`")));
        }
    }
    // Every other file must be a record or message of an agent the manifest names,
    // each within its size; written as it comes.
    let door = Beneath::open(root).map_err(|e| corrupt(e.to_string()))?;
    while let Some((path, mut entry)) = next(None)? {
        if !domain::layout::is_record_or_message(&path, &agents) {
            return Err(corrupt(format!("it holds `{path}`, which is no agent's record or message")));
        }
        if entry.size() > FILE_AT_MOST {
            return Err(corrupt(format!("`{path}` is {} bytes", entry.size())));
        }
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut bytes).map_err(|e| corrupt(format!("`{path}` is cut short ({e})")))?;
        door.write(Path::new(&path), &bytes, None, false).map_err(|e| corrupt(format!("`{path}`: {e}")))?;
    }
    check_repo_refs(&repo_dir, &repo_refs, &agents, &manifest, &corrupt)?;
    if let Some((name, _)) = project_refs.iter().find(|(n, _)| !n.starts_with("refs/heads/")) {
        return Err(corrupt(format!("its project.bundle holds `{name}`, which is not a branch")));
    }
    for (dir, refs) in [(&repo_dir, &repo_refs), (&project_dir, &project_refs)] {
        for (name, oid) in refs.iter() {
            if let Some(missing) = bundle::missing_below(dir, *oid)? {
                return Err(corrupt(format!("`{name}` reaches object {missing}, which it does not hold")));
            }
        }
        bundle::set_refs(dir, refs)?;
    }
    for id in &agents {
        let tip = ws.repo.branch_tip(&id.branch())?.ok_or_else(|| corrupt(format!("no branch for `{id}`")))?;
        let facts = crate::store::snapshot::read_facts(&ws.repo, tip)
            .map_err(|e| corrupt(format!("agent `{id}` does not read ({e})")))?;
        if !manifest.lineages.contains(&facts.lineage) {
            return Err(corrupt(format!(
                "agent `{id}` runs on lineage `{}`, which its manifest does not name",
                facts.lineage
            )));
        }
        // A project agent's base came in its git's history (`diff` and `export` read it).
        if let Some(base) = facts.base.as_deref().and_then(|b| CommitId::from_str(b).ok())
            && !ws.hold_base(base)?
        {
            return Err(corrupt(format!("agent `{id}` starts from commit {base}, which it does not hold")));
        }
    }
    let config = rebase_lineages(&ws, &manifest.lineages, mine, trust, &corrupt)?;
    Ok((manifest, config))
}

/// A bundle's manifest, read from `entry` (at most [`MANIFEST_AT_MOST`] bytes) and of a
/// format this offshoot reads; else what is wrong.
fn read_manifest(entry: &mut impl Read) -> std::result::Result<Manifest, String> {
    let mut bytes = Vec::new();
    entry
        .take(MANIFEST_AT_MOST + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("its manifest.json is cut short ({e})"))?;
    if bytes.len() as u64 > MANIFEST_AT_MOST {
        return Err(format!("its manifest.json is over {MANIFEST_AT_MOST} bytes"));
    }
    let read: Manifest =
        serde_json::from_slice(&bytes).map_err(|e| format!("its manifest.json does not read ({e})"))?;
    if read.format != FORMAT || read.version != VERSION {
        return Err(format!(
            "its manifest says {} version {}; this offshoot reads {FORMAT} version {VERSION}",
            read.format, read.version
        ));
    }
    Ok(read)
}

/// Whether every ref of a bundle's `repo.bundle` is of an agent or lineage its manifest
/// names (another's would run on a config nobody rebased); the first that is not, said.
fn check_repo_refs(
    repo_dir: &Path,
    refs: &[(String, infra::git::ObjectId)],
    agents: &[AgentId],
    manifest: &Manifest,
    corrupt: &dyn Fn(String) -> BundleError,
) -> Result<()> {
    let ids: Vec<&str> = agents.iter().map(AgentId::as_str).collect();
    let names_kind = Mark::Names.prefix();
    for (name, oid) in refs {
        let allowed = if let Some(agent) = name.strip_prefix("refs/heads/agents/") {
            ids.contains(&agent)
        } else if let Some(lineage) = name.strip_prefix("refs/heads/config/") {
            manifest.lineages.iter().any(|l| l == lineage)
        } else if name.starts_with(&names_kind) {
            // A name claim holds the id it names.
            bundle::blob(repo_dir, *oid).is_some_and(|b| ids.contains(&String::from_utf8_lossy(&b).trim()))
        } else if let Some((kind, key)) = infra::git::harness_ref_parts(name) {
            // A working directory is a path of the machine that made the bundle: not carried.
            kind != Mark::Cwd.kind() && Mark::ALL.iter().any(|m| m.kind() == kind) && ids.contains(&key)
        } else {
            false
        };
        if !allowed {
            return Err(corrupt(format!(
                "its repo.bundle holds `{name}`, which is not of an agent or lineage it names"
            )));
        }
    }
    Ok(())
}

/// Each of `lineages` read, then rebased onto this user's providers, MCP servers and
/// sandbox (`mine`); the first that does not, said.
fn rebase_lineages(
    ws: &Workspace,
    lineages: &[String],
    mine: &str,
    trust: bool,
    corrupt: &dyn Fn(String) -> BundleError,
) -> Result<Vec<(String, Vec<String>)>> {
    let mut differ = Vec::new();
    for lineage in lineages {
        let tip = ws.config_tip(lineage).map_err(|e| corrupt(format!("config lineage `{lineage}`: {e}")))?;
        ws.config_at(tip).map_err(|e| corrupt(format!("config lineage `{lineage}`: {e}")))?;
        let theirs =
            String::from_utf8_lossy(&ws.repo.read_file(tip, domain::config::FILE)?.unwrap_or_default()).into_owned();
        let rebased = rebase_config(&theirs, mine);
        if trust {
            // Trusted, the bundle's stays: what it takes over this user's is said.
            let yours = rebased.unwrap_or_else(|_| mine.to_owned());
            differ.push((lineage.clone(), config_differences(&theirs, &yours)));
            continue;
        }
        let rebased = rebased.map_err(|e| corrupt(format!("config lineage `{lineage}`: {e}")))?;
        differ.push((lineage.clone(), config_differences(&theirs, &rebased)));
        let changes = vec![(domain::config::FILE.to_owned(), rebased.into_bytes())];
        ws.commit_config(
            lineage,
            &changes,
            "config: replayed here, with this user's providers, MCP servers and sandbox",
        )
        .map_err(|e| corrupt(format!("config lineage `{lineage}` with your providers and sandbox: {e}")))?;
    }
    Ok(differ)
}

#[cfg(test)]
mod tests {
    use super::PARTIAL;

    #[test]
    fn what_a_killed_bundle_or_replay_left_is_swept_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("offshoot-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // A pid above any pid_max: its process is gone.
        let dead = format!(".a.offshoot{PARTIAL}4194999");
        let mine = format!(".b.offshoot{PARTIAL}{}", std::process::id());
        for name in [dead.as_str(), mine.as_str(), ".c.partial-4194999", "d.offshoot"] {
            std::fs::create_dir_all(dir.join(name)).expect("entry");
        }
        crate::sweep_left_by_dead(&dir, |n| crate::pid_after(n, ".", PARTIAL));
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [mine, ".c.partial-4194999".to_owned(), "d.offshoot".to_owned()]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
