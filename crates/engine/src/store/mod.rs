//! On disk, no decisions: the workspace, step records, snapshots of an agent's commit,
//! inboxes, agents' directories and warm starts.

pub(crate) mod directory;
pub mod inbox;
pub mod queue;
pub mod snapshot;
pub(crate) mod step_record;
pub mod trust;
pub mod warm;
pub mod workspace;
