//! What an agent's tools may touch: the path rules of its file tools and, with
//! `sandbox = "workspace-write"`, the Landlock confinement of its commands, both
//! derived from the workspace's layout and the role's config.

use std::path::{Path, PathBuf};

use crate::domain::agent;
use crate::domain::config::{RoleConfig, Sandbox};
use crate::domain::id::AgentId;
use crate::domain::layout::Layout;
use crate::infra::sandbox::{self, Confinement, SandboxError};
use crate::infra::tools::{PathPolicy, Place};

use super::Env;

/// Lowers the Landlock ABI offshoot believes the kernel has (to test an older or a
/// missing Landlock; it never raises it).
pub const ABI_CAP_VARIABLE: &str = "OFFSHOOT_LANDLOCK_ABI";

/// The workspace, the agent's directory and its paths, all resolved.
pub struct Site<'a> {
    pub layout: &'a Layout,
    /// The workspace root with symlinks resolved.
    pub workspace: &'a Path,
    pub id: &'a AgentId,
    /// The agent's directory with symlinks resolved.
    pub own: &'a Path,
}

impl Site<'_> {
    fn inside(&self, path: PathBuf) -> PathBuf {
        // The layout's paths start at the root as given; rebase them on the resolved one.
        match path.strip_prefix(self.layout.root()) {
            Ok(rel) => self.workspace.join(rel),
            Err(_) => path,
        }
    }

    fn write_paths(&self, role: &RoleConfig) -> Vec<PathBuf> {
        role.write_paths.iter().map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| PathBuf::from(p))).collect()
    }

    fn own_tmp(&self) -> PathBuf {
        self.inside(self.layout.tmp(self.id))
    }

    fn own_steps(&self) -> PathBuf {
        self.inside(self.layout.steps(self.id))
    }
}

/// The file tools' rules: read anywhere but the workspace's internals and other
/// agents' directories (the agent's own records excepted); write only in the
/// agent's directory, its temporary directory and the role's `write_paths`, never
/// into `.offshoot/` or `.git`.
pub fn path_policy(at: &Site, role: &RoleConfig) -> PathPolicy {
    let internals = "the workspace's internals";
    let ws = at.workspace;
    let mut writable = vec![at.own.to_owned(), at.own_tmp()];
    writable.extend(at.write_paths(role));
    PathPolicy {
        writable,
        reserved: vec![
            Place::new(at.own.join(agent::DIR), "the harness's directory `.offshoot/`"),
            Place::new(at.own.join(".git"), "`.git`, the harness's pointer to your repository"),
        ],
        unreadable: vec![
            Place::new(ws.join("repo.git"), internals),
            Place::new(ws.join("index"), internals),
            Place::new(ws.join("inbox"), internals),
            Place::new(ws.join("steps"), internals),
            Place::new(ws.join("locks"), internals),
            Place::new(ws.join("tmp"), internals),
            Place::new(ws.join("agents"), "another agent's directory"),
        ],
        readable: vec![at.own.to_owned(), at.own_steps(), at.own_tmp()],
    }
}

/// The Landlock confinement of the role's commands, if it has one.
pub fn confinement(at: &Site, role: &RoleConfig) -> Option<Confinement> {
    if role.sandbox != Sandbox::WorkspaceWrite {
        return None;
    }
    let ws = at.workspace;
    let mut read_write = vec![at.own.to_owned(), ws.join("project.git"), at.own_tmp()];
    read_write.extend(at.write_paths(role));
    Some(Confinement {
        read_write,
        // The agents' git reads the harness's objects through its alternates (files
        // by name, never a listing) and looks for packs.
        read: vec![at.own_steps(), ws.join("repo.git/objects/pack")],
        read_files: vec![ws.join("repo.git/objects")],
        hidden: ws.to_owned(),
        network: role.network,
    })
}

/// The Landlock ABI to plan with: the kernel's, lowered by [`ABI_CAP_VARIABLE`].
pub fn abi(env: &Env) -> i32 {
    sandbox::abi(env.get(ABI_CAP_VARIABLE).and_then(|v| v.parse().ok()))
}

/// Refuses a role whose sandbox this kernel cannot enforce, before anything runs.
pub fn check(role: &RoleConfig, env: &Env) -> Result<(), SandboxError> {
    if role.sandbox != Sandbox::WorkspaceWrite {
        return Ok(());
    }
    let abi = abi(env);
    if abi < 1 {
        return Err(SandboxError::Unsupported);
    }
    if !role.network && abi < 4 {
        return Err(SandboxError::NoNetworkRules(abi));
    }
    Ok(())
}
