//! Reads what assembly needs from an agent's tree at one commit. Transcript entries
//! are immutable, so parsed entries are kept by blob id across steps.

use crate::Cause;
use domain::agent::{self, AgentFacts};
use domain::config::ContextRules;
use domain::context::{self, Snapshot};
use domain::transcript::{self, Entry, TranscriptError};
use infra::git::{CommitId, GitError, Repo};
use infra::provider::ToolSpec;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Transcript(#[from] TranscriptError),
    #[error("commit {commit} is not an agent commit: it has no `{path}`")]
    NotAgent { commit: String, path: &'static str },
    #[error("`{path}` at {commit} does not parse: {reason}")]
    Bad {
        commit: String,
        path: String,
        #[source]
        reason: Cause,
    },
}

type Result<T> = std::result::Result<T, SnapshotError>;

/// Reads snapshots. Entries are immutable, so the transcript last read is kept and
/// a later read parses only what is new (a step's read costs one tree listing).
#[derive(Default)]
pub struct Loader {
    commit: Option<CommitId>,
    listing: Vec<(String, infra::git::ObjectId)>,
    parsed: Vec<Entry>,
}

impl Loader {
    /// The transcript at `commit`, in numeric order.
    pub fn entries(&mut self, repo: &Repo, commit: CommitId) -> Result<&[Entry]> {
        if self.commit == Some(commit) {
            return Ok(&self.parsed);
        }
        self.commit = None;
        let mut listed: Vec<(u32, String, infra::git::ObjectId)> = Vec::new();
        for e in repo.list_dir(commit, agent::MESSAGES)? {
            if !e.is_dir {
                let (number, _, _) = transcript::parse_name(&e.name)?;
                listed.push((number, e.name, e.oid));
            }
        }
        listed.sort_by_key(|(n, _, _)| *n);
        let kept = self
            .listing
            .iter()
            .zip(&listed)
            .take_while(|((name, oid), (_, new_name, new_oid))| name == new_name && oid == new_oid)
            .count();
        self.listing.truncate(kept);
        self.parsed.truncate(kept);
        for (_, name, oid) in listed.into_iter().skip(kept) {
            self.parsed.push(Entry::parse(&name, &repo.read_blob(oid)?)?);
            self.listing.push((name, oid));
        }
        self.commit = Some(commit);
        Ok(&self.parsed)
    }

    /// Notes that `commit` is `parent` plus the transcript entries `files` (name,
    /// bytes), so reading `commit` next costs no tree listing. If the last read was not
    /// `parent`, the next read lists the tree as usual.
    pub(crate) fn record(&mut self, parent: CommitId, commit: CommitId, files: &[(&str, &[u8])]) -> Result<()> {
        if self.commit != Some(parent) {
            self.commit = None;
            return Ok(());
        }
        for (name, bytes) in files {
            let entry = Entry::parse(name, bytes)?;
            // The blob id is not known here; a later full listing re-reads from this entry on.
            self.listing.push(((*name).to_owned(), infra::git::ObjectId::ZERO_SHA1));
            self.parsed.push(entry);
        }
        self.commit = Some(commit);
        Ok(())
    }

    /// Everything assembly reads at `commit`, under `rules`.
    pub(crate) fn snapshot(
        &mut self,
        repo: &Repo,
        commit: CommitId,
        rules: &ContextRules,
    ) -> Result<(AgentFacts, Snapshot<'_>)> {
        let facts = read_facts(repo, commit)?;
        let text = |path: &'static str| -> Result<String> {
            let bytes =
                repo.read_file(commit, path)?.ok_or(SnapshotError::NotAgent { commit: commit.to_string(), path })?;
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        };
        let mut tools = Vec::new();
        for e in repo.list_dir(commit, agent::TOOLS)? {
            let bytes = repo.read_blob(e.oid)?;
            let spec: ToolSpec = serde_json::from_slice(&bytes).map_err(|err| SnapshotError::Bad {
                commit: commit.to_string(),
                path: format!("{}/{}", agent::TOOLS, e.name),
                reason: err.into(),
            })?;
            tools.push(spec);
        }
        // Then the MCP servers' tools, server by server, each in its server's order, as
        // many as a request takes.
        let mut records = Vec::new();
        for e in repo.list_dir(commit, domain::mcp::DIR)? {
            let bytes = repo.read_blob(e.oid)?;
            let record = domain::mcp::Record::parse(&bytes).map_err(|reason| SnapshotError::Bad {
                commit: commit.to_string(),
                path: format!("{}/{}", domain::mcp::DIR, e.name),
                reason: reason.into(),
            })?;
            records.push(record);
        }
        let offered = domain::mcp::within_request(tools.len(), &records);
        tools.extend(offered.into_iter().map(domain::mcp::Offered::spec));
        let mut candidates = Vec::new();
        for pattern in rules.pinned.iter().chain(&rules.order) {
            for (path, _) in repo.list_files(commit, static_prefix(pattern))? {
                candidates.push(path);
            }
        }
        let mut composed: Vec<(String, String)> = Vec::new();
        for path in context::composed_paths(&candidates, rules) {
            // A link's blob is where it points, not what is there (a `CLAUDE.md` linked
            // to `AGENTS.md` is the one file, pinned once).
            if repo.is_symlink(commit, &path)? {
                continue;
            }
            if let Some(bytes) = repo.read_file(commit, &path)? {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                // (The same words twice in one directory, as a copied `CLAUDE.md`, once.)
                let dir = |p: &str| p.rsplit_once('/').map(|(d, _)| d.to_owned()).unwrap_or_default();
                if composed.iter().any(|(p, t)| *t == text && dir(p) == dir(&path)) {
                    continue;
                }
                composed.push((path, text));
            }
        }
        let snapshot = Snapshot {
            goal: text(agent::GOAL)?,
            soul: text(agent::SOUL)?,
            name: facts.name.clone(),
            tools,
            entries: self.entries(repo, commit)?,
            composed,
        };
        Ok((facts, snapshot))
    }
}

pub(crate) fn read_facts(repo: &Repo, commit: CommitId) -> Result<AgentFacts> {
    let bytes = repo
        .read_file(commit, agent::FACTS)?
        .ok_or(SnapshotError::NotAgent { commit: commit.to_string(), path: agent::FACTS })?;
    AgentFacts::parse(&String::from_utf8_lossy(&bytes)).map_err(|reason| SnapshotError::Bad {
        commit: commit.to_string(),
        path: agent::FACTS.into(),
        reason: reason.into(),
    })
}

/// The directory part of a glob before its first wildcard (where to start walking).
fn static_prefix(pattern: &str) -> &str {
    let cut = pattern.find(['*', '?', '[']).unwrap_or(pattern.len());
    match pattern[..cut].rfind('/') {
        Some(slash) if cut < pattern.len() => &pattern[..slash],
        _ if cut < pattern.len() => "",
        _ => pattern,
    }
}

/// The number the next step record of an agent whose records are in `dir` gets (one
/// past the highest; 1 when there are none).
pub(crate) fn next_step(dir: &std::path::Path) -> u32 {
    let names = std::fs::read_dir(dir).into_iter().flatten().flatten();
    names
        .filter_map(|e| crate::store::step_record::number_of(&e.file_name().to_string_lossy()))
        .max()
        .unwrap_or(0)
        .saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::static_prefix;

    #[test]
    fn walks_start_below_the_wildcards() {
        assert_eq!(static_prefix("AGENTS.md"), "AGENTS.md");
        assert_eq!(static_prefix(".offshoot/summary/**"), ".offshoot/summary");
        assert_eq!(static_prefix("**/AGENTS.md"), "");
        assert_eq!(static_prefix("docs/*.md"), "docs");
    }
}
