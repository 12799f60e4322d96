//! The agent runtime: the one service that moves agents from the outside. It
//! deposits messages (create-only), wakes an agent (a probe that never takes the
//! driver lock; a free lock means a detached driver is launched), launches
//! `offshoot run <id>` in its own session with its output in `steps/<id>/driver.log`,
//! and stops a running driver. The cli's verbs and the agent tools all go through
//! it; nothing else starts drivers.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use domain::id::AgentId;
use domain::inbox::Deposit;
use domain::layout::Layout;
use infra::lock::{LockError, LockGuard, Probe};
use infra::process::{self, Group, ProcessError, Spec};
use infra::time::Timestamp;

use std::sync::Mutex;

use crate::Env;
use crate::agents::interrupt::Interrupt;
use crate::store::inbox::{self, InboxError};

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Inbox(#[from] InboxError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("cannot start a driver for `{id}`: {source}")]
    Launch { id: AgentId, source: ProcessError },
    #[error("cannot create {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("cannot signal the driver of `{id}` (pid {pid}): {source}")]
    Signal { id: AgentId, pid: u32, source: std::io::Error },
}

type Result<T> = std::result::Result<T, RuntimeError>;

/// What a wake-up did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// A driver already runs; it drains the inbox before it lets go.
    Running,
    /// A detached driver was started (its pid).
    Launched(u32),
    /// A worker drives this workspace and has not claimed the agent: its claim, by
    /// whichever worker, brings a driver.
    Deferred,
}

/// What a stop did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// No driver was running.
    NotRunning,
    /// The driver (its pid) was told to stop and has let go of the agent.
    Stopped(u32),
    /// The driver was told to stop and still held the agent when we gave up waiting.
    Signalled(u32),
}

/// Moves agents: deposits, wake-ups, launches and stops.
pub struct Runtime {
    layout: Layout,
    /// The offshoot binary detached drivers run.
    exe: PathBuf,
    /// The environment detached drivers get (the user's, keys included).
    env: Env,
    /// Stop requests to a driver running in this process.
    interrupt: Interrupt,
    /// Drivers this process launched (children of ours that are not strays).
    launched: Mutex<Vec<u32>>,
    /// Where workspaces live (the data root's `workspaces/`): hidden from commands.
    workspaces: Option<PathBuf>,
}

/// What a user's message chooses for its agent from its delivery on: a model, the
/// thinking asked for, a permission mode (`acp`'s `session/set_mode`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Chosen<'a> {
    pub model: Option<&'a str>,
    pub reasoning: Option<&'a infra::provider::Reasoning>,
    pub mode: Option<domain::config::Mode>,
}

impl Runtime {
    /// `interrupt` carries stop requests (Ctrl-C, SIGTERM) to a driver run here.
    pub fn new(layout: Layout, exe: PathBuf, env: Env, interrupt: Interrupt) -> Runtime {
        Runtime { layout, exe, env, interrupt, launched: Mutex::new(Vec::new()), workspaces: None }
    }

    /// The same runtime, hiding the workspaces under `dir` from sandboxed commands.
    pub fn hiding_workspaces(mut self, dir: PathBuf) -> Runtime {
        self.workspaces = Some(dir);
        self
    }

    /// The same runtime for another thread, with a stop request of its own (what a
    /// signal's receiver does before the process ends).
    pub(crate) fn sibling(&self) -> Runtime {
        Runtime {
            layout: self.layout.clone(),
            exe: self.exe.clone(),
            env: self.env.clone(),
            interrupt: Interrupt::default(),
            launched: Mutex::new(Vec::new()),
            workspaces: self.workspaces.clone(),
        }
    }

    /// Where workspaces live, if known: hidden from sandboxed commands.
    pub(crate) fn workspaces(&self) -> Option<&std::path::Path> {
        self.workspaces.as_deref()
    }

    /// The offshoot binary: what detached drivers run, and the sandbox helper.
    pub(crate) fn exe(&self) -> &std::path::Path {
        &self.exe
    }

    /// Where a stop request for a driver in this process goes.
    pub fn interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    /// The pids of the drivers this process launched.
    pub(crate) fn launched(&self) -> Vec<u32> {
        self.launched.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The environment the cli read (keys and base URLs for model calls).
    pub(crate) fn env(&self) -> &Env {
        &self.env
    }

    /// Leaves `body` in `to`'s inbox as a message from `from`.
    pub fn deposit(&self, to: &AgentId, from: &str, body: &str) -> Result<PathBuf> {
        self.deposit_choosing(to, from, body, &Chosen::default())
    }

    /// [`Runtime::deposit`], with what the user chose for the agent from this message on
    /// (the caller checked it; the driver takes it only from the user's messages).
    pub fn deposit_choosing(&self, to: &AgentId, from: &str, body: &str, chosen: &Chosen<'_>) -> Result<PathBuf> {
        let deposit = Deposit {
            model: chosen.model.map(str::to_owned),
            reasoning: chosen.reasoning.map(domain::agent::reasoning_text),
            mode: chosen.mode.map(|m| m.word().to_owned()),
            ..Deposit::new(from, Timestamp::now(), body)
        };
        Ok(inbox::deposit(&self.layout, to, &deposit)?)
    }

    /// Makes sure a driver will see `id`'s inbox: a running driver re-checks it
    /// before it lets go; otherwise one is launched. The probe never takes the lock.
    pub fn wake(&self, id: &AgentId) -> Result<Woken> {
        match LockGuard::probe(&self.layout.lock(id))? {
            Probe::Held(_) => Ok(Woken::Running),
            Probe::Free => Ok(self.launch(id)?.map_or(Woken::Deferred, Woken::Launched)),
        }
    }

    /// Starts `offshoot run --launched <id>` detached: its own session, stdin closed, output
    /// appended to `steps/<id>/driver.log`. If a driver already holds the agent, the
    /// new one finds the lock busy and exits quietly. In a worker's workspace, only an
    /// agent its worker claimed gets one (`None`: left to the fleet).
    pub fn launch(&self, id: &AgentId) -> Result<Option<u32>> {
        // A worker's workspace: its running worker's claims decide. Any other: not a
        // tree handed to a remote's workers.
        if !drivable_here(&self.layout, id) {
            return Ok(None);
        }
        let log = self.layout.driver_log(id);
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir).map_err(|source| RuntimeError::Io { path: dir.to_owned(), source })?;
        }
        let env: Vec<(String, String)> = self.env.vars().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        let args = [
            OsStr::new("--workspace"),
            self.layout.root().as_os_str(),
            OsStr::new("run"),
            OsStr::new("--launched"),
            OsStr::new(id.as_str()),
        ];
        let spec = Spec {
            program: &self.exe,
            args: &args,
            cwd: self.layout.root(),
            env: &env,
            group: Group::Session,
            stdin: None,
            sandbox: None,
            pgid_record: None,
        };
        let pid = process::launch(&spec, &log).map_err(|source| RuntimeError::Launch { id: id.clone(), source })?;
        if let Ok(mut launched) = self.launched.lock() {
            launched.push(pid);
        }
        Ok(Some(pid))
    }

    /// Asks `id`'s driver to stop (SIGTERM, after checking that the pid the lock
    /// file names is still the process that wrote it) and waits up to `patience` for
    /// it to settle its calls and let go.
    pub(crate) fn stop(&self, id: &AgentId, patience: Duration) -> Result<Stopped> {
        let lock = self.layout.lock(id);
        let Probe::Held(Some(holder)) = LockGuard::probe(&lock)? else {
            return Ok(Stopped::NotRunning);
        };
        // The pid the lock file names is the process that wrote it (drivers are not
        // dumpable, so which files they hold open cannot be read by others). An agent
        // still being made has no driver: its maker (a parent's driver) is not signalled,
        // and the stop mark keeps the maker from starting it.
        if !holder.is_alive() || holder.making {
            return Ok(Stopped::NotRunning);
        }
        let pid = holder.pid;
        process::terminate(pid).map_err(|source| RuntimeError::Signal { id: id.clone(), pid, source })?;
        let until = Instant::now() + patience;
        while Instant::now() < until {
            if !matches!(LockGuard::probe(&lock)?, Probe::Held(_)) {
                return Ok(Stopped::Stopped(pid));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Stopped::Signalled(pid))
    }
}

/// Whether a driver may drive `id` in the workspace at `layout`. In a worker's
/// workspace, only an agent its running worker holds the claim of (a worker killed -9
/// leaves its claim files; other workers take its agents over, so its workspace's
/// `scan`, `run` or orphaned drivers must not go on with them). In any other, one not
/// in a tree handed to a remote's workers (a worker's workspace once its worker let go
/// is one: a driver it started that outlived it must not go on there).
pub fn drivable_here(layout: &Layout, id: &AgentId) -> bool {
    match layout.worker().exists() {
        true => layout.worker_claim(id).exists() && LockGuard::is_held(&layout.worker_lock()).unwrap_or(false),
        false => !layout.handed(&id.root()).exists(),
    }
}
