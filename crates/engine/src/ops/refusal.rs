//! A turn the model refused, taken out of the agent's context. The Agent Client
//! Protocol's `refusal` stop says the prompt and everything after it are not in the
//! next prompt (a refused request left in the context tends to get the next one refused
//! too); the turn stays in the agent's history, one commit back.

use std::time::Duration;

use domain::agent;
use domain::id::AgentId;
use domain::transcript::{self, Entry};
use infra::git::{GitError, TreeEdit};
use infra::provider::Stop;

use crate::agents::AgentError;
use crate::store::snapshot::{Loader, SnapshotError};
use crate::store::workspace::Workspace;

#[derive(Debug, thiserror::Error)]
pub enum RefusalError {
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error("a driver still holds `{0}`; its refused turn stays in its context")]
    Busy(String),
}

/// When `id`'s last model output was a refusal: its transcript from the user's last
/// message on leaves, in one commit, and the entries taken out are returned; nothing
/// otherwise. Refused while another holds the agent past `wait`.
pub fn forget_refused_turn(ws: &Workspace, id: &AgentId, wait: Duration) -> Result<Vec<String>, RefusalError> {
    let _lock = crate::agents::hold_within(ws, id, wait).ok_or_else(|| RefusalError::Busy(id.to_string()))?;
    let tip = ws.repo.branch_tip(&id.branch())?.ok_or_else(|| AgentError::Unknown(id.to_string()))?;
    let mut loader = Loader::default();
    let entries = loader.entries(&ws.repo, tip)?;
    let refused = entries.iter().rev().find_map(|e| match e {
        Entry::Output { output, .. } => Some(output.stop == Stop::Refusal),
        _ => None,
    });
    let asked = entries.iter().rev().find_map(|e| match e {
        Entry::Message { number, sender, .. } if sender == "user" => Some(*number),
        _ => None,
    });
    let (Some(true), Some(from)) = (refused, asked) else { return Ok(Vec::new()) };
    let gone: Vec<String> = ws
        .repo
        .list_dir(tip, agent::MESSAGES)?
        .into_iter()
        .filter(|e| transcript::parse_name(&e.name).is_ok_and(|(n, _, _)| n >= from))
        .map(|e| format!("{}/{}", agent::MESSAGES, e.name))
        .collect();
    let mut edits: Vec<TreeEdit> = gone.iter().map(|path| TreeEdit::Remove { path: path.clone() }).collect();
    // (The first prompt is the agent's goal too, in its system prompt: refused, it goes.)
    let first = entries.iter().map(Entry::number).min() == Some(from);
    if first {
        edits.push(TreeEdit::Write { path: agent::GOAL.into(), bytes: Vec::new() });
    }
    let message = format!("The refused turn (from entry {from}) out of the context; its steps stay in history\n");
    let commit = ws.repo.commit_edits(&[tip], Some(tip), &edits, &message)?;
    // The agent's directory first, its branch last: a crash between leaves files of
    // `.offshoot/` the branch still has, which its next driver puts back.
    let facts = crate::store::snapshot::read_facts(&ws.repo, tip)?;
    let (dir, _) = crate::store::directory::open(ws, id, &facts, tip)?;
    let goal = [(agent::GOAL.to_owned(), Vec::new())];
    dir.put_harness_files(&gone, if first { &goal } else { &[] })?;
    ws.repo.move_branch(&id.branch(), commit, tip, &message)?;
    Ok(gone)
}
