//! Across workspaces and machines: bundles, git remotes, claims and workers.

pub mod bundle;
pub mod claims;
pub mod remote;
pub mod worker;
