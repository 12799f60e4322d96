//! Where everything of one workspace lives on disk.

use std::path::{Path, PathBuf};

use super::id::AgentId;

/// The paths of one workspace directory.
#[derive(Debug, Clone)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn repo(&self) -> PathBuf {
        self.root.join("repo.git")
    }

    /// The agents' shared repository: every agent's published branch and objects,
    /// written only by the harness.
    pub fn project(&self) -> PathBuf {
        self.root.join("project.git")
    }

    /// Where each agent's own git directory is (`gits/<id>`).
    pub fn gits(&self) -> PathBuf {
        self.root.join("gits")
    }

    /// Agent `id`'s own git directory: what its directory's `.git` points at.
    pub fn git_dir(&self, id: &AgentId) -> PathBuf {
        self.gits().join(id.as_str())
    }

    /// The harness's index of an agent's directory (its stat cache).
    pub fn index(&self, id: &AgentId) -> PathBuf {
        self.root.join("index").join(id.as_str())
    }

    pub fn worktree(&self, id: &AgentId) -> PathBuf {
        self.root.join("agents").join(id.as_str())
    }

    pub fn steps(&self, id: &AgentId) -> PathBuf {
        self.root.join("steps").join(id.as_str())
    }

    pub fn step(&self, id: &AgentId, number: u32) -> PathBuf {
        self.steps(id).join(format!("{number:04}"))
    }

    pub fn inbox(&self, id: &AgentId) -> PathBuf {
        self.root.join("inbox").join(id.as_str())
    }

    pub fn lock(&self, id: &AgentId) -> PathBuf {
        self.root.join("locks").join(id.as_str())
    }

    /// The agent's private temporary directory (its commands' `TMPDIR`).
    pub fn tmp(&self, id: &AgentId) -> PathBuf {
        self.root.join("tmp").join(id.as_str())
    }

    /// The lock a command holds while it moves this workspace's mirrors of remote
    /// `name` (a fetch, a push's own updates): commands of one workspace take turns.
    pub fn mirrors_lock(&self, name: &str) -> PathBuf {
        self.root.join("tmp").join(format!("mirrors-{name}.lock"))
    }

    /// Present when `offshoot worker` drives this workspace's agents: only those it
    /// claimed (`worker/claims/<id>`) get a driver here.
    pub fn worker(&self) -> PathBuf {
        self.root.join("worker")
    }

    /// Where a worker's workspace keeps what its agents send `id` until the worker has
    /// put it on the remote (every message travels through the remote there).
    pub fn outbox(&self, id: &AgentId) -> PathBuf {
        self.worker().join("outbox").join(id.as_str())
    }

    /// Present when `id` was handed to a remote's workers (`prompt --on`): no driver
    /// starts for it here.
    pub fn handed(&self, id: &AgentId) -> PathBuf {
        self.root.join("handed").join(id.as_str())
    }

    /// The file saying this workspace's worker holds the claim of `id`.
    pub fn worker_claim(&self, id: &AgentId) -> PathBuf {
        self.worker().join("claims").join(id.as_str())
    }

    /// The lock a running `offshoot worker` holds on this workspace for its whole life:
    /// its claim files mean something only while it is held.
    pub fn worker_lock(&self) -> PathBuf {
        self.worker().join("lock")
    }

    /// Where the stderr of the MCP servers of agent `agent` (or of `mcp tools`) goes:
    /// inside the workspace's internals, which no agent reads (a server's stderr may carry
    /// what its `env` holds).
    pub fn mcp_logs(&self, agent: &str) -> PathBuf {
        self.root.join("mcp").join("logs").join(agent)
    }

    /// The MCP servers an editor gave agent `id`'s session (`acp`), as JSON: inside the
    /// workspace's internals, which no agent reads (a server's `env` may hold a key).
    pub fn client_servers(&self, id: &AgentId) -> PathBuf {
        self.root.join("client-mcp").join(format!("{id}.json"))
    }

    /// The attention queue: questions for a person, their waiters and answers
    /// (`queue/<id>/`), and the standing yeses of `approve --for-tree` (`queue/grants/`).
    pub fn queue(&self) -> PathBuf {
        self.root.join("queue")
    }

    /// The project files the user trusted, each by the digest of the content trusted.
    pub fn trust(&self) -> PathBuf {
        self.root.join("trust")
    }

    pub fn driver_log(&self, id: &AgentId) -> PathBuf {
        self.steps(id).join("driver.log")
    }

    /// Every directory a workspace has from birth.
    pub fn skeleton(&self) -> [PathBuf; 7] {
        ["agents", "gits", "steps", "inbox", "locks", "index", "tmp"].map(|d| self.root.join(d))
    }
}

/// Whether `path` (relative to a workspace, `/`-separated: a bundle's) is a step record
/// or an inbox message of one of `agents`.
pub fn is_record_or_message(path: &str, agents: &[AgentId]) -> bool {
    let mut parts = path.split('/');
    let (kind, id) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let rest: Vec<&str> = parts.collect();
    let plain = !rest.is_empty() && rest.iter().all(|p| !p.is_empty() && *p != "." && *p != "..");
    matches!(kind, "steps" | "inbox") && agents.iter().any(|a| a.as_str() == id) && plain
}
