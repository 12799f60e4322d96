//! On disk, no decisions: the workspace, step records, snapshots of an agent's commit,
//! inboxes, agents' directories and warm starts.

pub mod directory;
pub mod inbox;
pub mod snapshot;
pub mod step_record;
pub mod warm;
pub mod workspace;
