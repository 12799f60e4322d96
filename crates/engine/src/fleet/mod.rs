//! Across workspaces and machines: bundles, git remotes, claims and workers.

pub mod bundle;
pub mod claims;
pub(crate) mod rebase;
pub mod remote;
pub mod worker;
