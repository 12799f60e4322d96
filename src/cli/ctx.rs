//! `Ctx`: everything a verb needs, built once from the command line and the
//! environment: where the workspace and the harness roots are, the environment
//! variables the engine may use, and the output.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use crate::engine::Env;
use crate::engine::interrupt::Interrupt;
use crate::engine::runtime::Runtime;
use crate::engine::workspace::{self, ConfigFiles, Workspace};

use super::error::CliError;
use super::out::Out;

pub struct Ctx {
    pub env: Env,
    pub out: Out,
    /// Where workspaces live (`OFFSHOOT_HOME`, else `$XDG_DATA_HOME/offshoot`).
    pub data_root: PathBuf,
    /// Where user config and templates live (`OFFSHOOT_HOME`, else `$XDG_CONFIG_HOME/offshoot`).
    pub config_root: PathBuf,
    workspace: Option<PathBuf>,
    /// This binary, for the drivers the runtime launches.
    exe: PathBuf,
    /// Stop requests (Ctrl-C, SIGTERM) for a driver this command runs.
    pub interrupt: Interrupt,
    /// The agent this command drives, once known (for what a signal prints).
    pub driving: Arc<OnceLock<String>>,
}

impl Ctx {
    pub fn from_env(workspace: Option<PathBuf>, json: bool) -> Ctx {
        let env = Env::new(std::env::vars());
        let home = env.get("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
        let (data_root, config_root) = match env.get("OFFSHOOT_HOME") {
            Some(root) => (PathBuf::from(root), PathBuf::from(root)),
            None => (
                env.get("XDG_DATA_HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| home.join(".local/share"))
                    .join("offshoot"),
                env.get("XDG_CONFIG_HOME").map(PathBuf::from).unwrap_or_else(|| home.join(".config")).join("offshoot"),
            ),
        };
        let out = Out::new(json, env.get("NO_COLOR").is_some());
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("offshoot"));
        Ctx {
            env,
            out,
            data_root,
            config_root,
            workspace,
            exe,
            interrupt: Interrupt::default(),
            driving: Arc::new(OnceLock::new()),
        }
    }

    pub fn default_workspace(&self) -> PathBuf {
        self.data_root.join("workspaces").join("default")
    }

    pub fn workspace_path(&self) -> PathBuf {
        self.workspace.clone().unwrap_or_else(|| self.default_workspace())
    }

    pub fn explicit_workspace(&self) -> Option<&PathBuf> {
        self.workspace.as_ref()
    }

    /// The config a new workspace starts with: embedded defaults, overridden by
    /// files in `<config-root>/template/`.
    pub fn template(&self) -> Result<ConfigFiles, CliError> {
        Ok(workspace::template_files(Some(&self.config_root.join("template")))?)
    }

    /// The agent runtime of `ws`: deposits, wake-ups, launches and stops.
    pub fn runtime(&self, ws: &Workspace) -> Runtime {
        Runtime::new(ws.layout.clone(), self.exe.clone(), self.env.clone(), self.interrupt.clone())
    }

    /// Opens the workspace; the default one is created on first use.
    pub fn workspace(&self) -> Result<Workspace, CliError> {
        match &self.workspace {
            Some(path) => Ok(Workspace::open(path)?),
            None => Ok(Workspace::open_or_create(&self.default_workspace(), &self.template()?)?),
        }
    }
}
