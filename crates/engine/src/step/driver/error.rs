//! What stops a driver.

use crate::Cause;
use domain::id::AgentId;
use std::path::PathBuf;

use crate::agents::interrupt::Reason;
use crate::agents::lifecycle::LifecycleError;
use crate::step::model::ModelError;
use crate::step::toolcall::ToolCallError;
use crate::store::inbox::InboxError;
use crate::store::snapshot::SnapshotError;
use crate::store::workspace::WorkspaceError;
use infra::git::GitError;
use infra::lock::LockError;
use infra::sandbox::SandboxError;

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("agent `{0}` does not exist")]
    Unknown(String),
    #[error(
        "agent `{id}` belongs to the fleet: in a worker's workspace only a running `offshoot worker` drives an agent, one whose claim it holds on the remote"
    )]
    NotClaimed { id: AgentId },
    #[error("cannot wake agent `{id}`: {reason}")]
    Wake {
        id: AgentId,
        #[source]
        reason: Cause,
    },
    #[error("cannot stop the agents below `{id}`: {reason}")]
    StopBelow {
        id: AgentId,
        #[source]
        reason: Cause,
    },
    #[error("cannot land the compaction of `{compactor}`: {reason}")]
    Landing {
        compactor: String,
        #[source]
        reason: Cause,
    },
    #[error("cannot check the compactions of `{id}`: {reason}")]
    Compaction {
        id: AgentId,
        #[source]
        reason: Cause,
    },
    #[error(
        "agent `{id}`'s context is full: its next request needs about {estimate} tokens plus {output} for the answer, over the {window}-token window of role `{role}`; nothing was sent"
    )]
    ContextFull { id: AgentId, role: String, estimate: u64, output: u32, window: u64 },
    #[error("agent `{id}`'s summary `{path}` holds a merge-conflict marker (`{line}`); it is not sent to the model")]
    Conflicted { id: AgentId, path: String, line: String },
    #[error("agent `{id}` was {}", reason.words())]
    Interrupted { id: AgentId, reason: Reason },
    #[error("agent `{id}` was stopped: its budget is exhausted ({spend})")]
    Exhausted { id: AgentId, spend: String },
    #[error("role `{role}` cannot run its tools: {source}; the agent was not started")]
    Sandbox { role: String, source: SandboxError },
    #[error("agent `{id}` is damaged: {reason}")]
    Damaged {
        id: AgentId,
        #[source]
        reason: Cause,
    },
    #[error("role `{role}` of agent `{id}` no longer exists in config lineage `{lineage}`")]
    RoleGone { id: AgentId, role: String, lineage: String },
    #[error("step {step} of agent `{id}` failed: {source}")]
    Model { id: AgentId, role: String, step: u32, source: ModelError },
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Inbox(#[from] InboxError),
    #[error(transparent)]
    Tool(#[from] ToolCallError),
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}
