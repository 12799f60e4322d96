//! offshoot: a git-backed harness for LLM agents. Every agent is a branch with its
//! own worktree, every model step a commit, the conversation a directory of
//! numbered files. Four layers, arrows pointing down: `cli` (talks to humans) →
//! `engine` (moves agents) → `domain` (what things are) → `infra` (talks to the world).

pub mod cli;
pub mod domain;
pub mod engine;
pub mod infra;
