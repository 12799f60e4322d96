//! Reads what assembly needs from an agent's tree at one commit. Transcript entries
//! are immutable, so parsed entries are kept by blob id across steps.

use std::collections::HashMap;

use crate::domain::agent::{self, AgentFacts};
use crate::domain::config::ContextRules;
use crate::domain::context::{self, Snapshot};
use crate::domain::transcript::{Entry, TranscriptError};
use crate::infra::git::{CommitId, GitError, Repo};
use crate::infra::provider::ToolSpec;

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
        reason: String,
    },
}

type Result<T> = std::result::Result<T, SnapshotError>;

/// Reads snapshots, remembering parsed transcript entries by blob id.
#[derive(Default)]
pub struct Loader {
    entries: HashMap<git2::Oid, Entry>,
}

impl Loader {
    /// The transcript at `commit`, in numeric order.
    pub fn entries(&mut self, repo: &Repo, commit: CommitId) -> Result<Vec<Entry>> {
        let mut listed = repo.list_dir(commit, agent::MESSAGES)?;
        listed.retain(|e| !e.is_dir);
        let mut out = Vec::with_capacity(listed.len());
        for e in listed {
            let entry = match self.entries.get(&e.oid) {
                Some(entry) if entry_name_matches(entry, &e.name) => entry.clone(),
                _ => {
                    let parsed = Entry::parse(&e.name, &repo.read_blob(e.oid)?)?;
                    self.entries.insert(e.oid, parsed.clone());
                    parsed
                }
            };
            out.push(entry);
        }
        out.sort_by_key(Entry::number);
        Ok(out)
    }

    /// Everything assembly reads at `commit`, under `rules`.
    pub fn snapshot(
        &mut self,
        repo: &Repo,
        commit: CommitId,
        rules: &ContextRules,
    ) -> Result<(AgentFacts, Snapshot)> {
        let facts = read_facts(repo, commit)?;
        let text = |path: &'static str| -> Result<String> {
            let bytes = repo
                .read_file(commit, path)?
                .ok_or(SnapshotError::NotAgent {
                    commit: commit.to_string(),
                    path,
                })?;
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        };
        let mut tools = Vec::new();
        for e in repo.list_dir(commit, agent::TOOLS)? {
            let bytes = repo.read_blob(e.oid)?;
            let spec: ToolSpec =
                serde_json::from_slice(&bytes).map_err(|err| SnapshotError::Bad {
                    commit: commit.to_string(),
                    path: format!("{}/{}", agent::TOOLS, e.name),
                    reason: err.to_string(),
                })?;
            tools.push(spec);
        }
        let mut candidates = Vec::new();
        for pattern in rules.pinned.iter().chain(&rules.order) {
            for (path, _) in repo.list_files(commit, static_prefix(pattern))? {
                candidates.push(path);
            }
        }
        let mut composed = Vec::new();
        for path in context::composed_paths(&candidates, rules) {
            if let Some(bytes) = repo.read_file(commit, &path)? {
                composed.push((path, String::from_utf8_lossy(&bytes).into_owned()));
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

fn entry_name_matches(entry: &Entry, name: &str) -> bool {
    crate::domain::transcript::parse_name(name)
        .is_ok_and(|(n, _, side)| n == entry.number() && side == entry.side())
}

pub fn read_facts(repo: &Repo, commit: CommitId) -> Result<AgentFacts> {
    let bytes = repo
        .read_file(commit, agent::FACTS)?
        .ok_or(SnapshotError::NotAgent {
            commit: commit.to_string(),
            path: agent::FACTS,
        })?;
    AgentFacts::parse(&String::from_utf8_lossy(&bytes)).map_err(|reason| SnapshotError::Bad {
        commit: commit.to_string(),
        path: agent::FACTS.into(),
        reason,
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
