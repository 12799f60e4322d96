//! What a role's tools run with: how commands start, the sandbox they start in,
//! what file tools may touch, and what the user is warned of; built once per
//! config commit.

use std::sync::Arc;

use crate::agents::containment::{self, Site};
use domain::config::{Config, RoleConfig};
use domain::question::Policy;
use infra::git::CommitId;
use infra::sandbox::{self, Confinement, Jail};
use infra::tools::{Commands, PathPolicy};

use super::{Driver, DriverError, Result};

/// What the tools of one config commit run with.
pub(super) struct ToolsSetup {
    config: CommitId,
    commands: Commands,
    pub(super) paths: Arc<PathPolicy>,
    role: RoleConfig,
    policy: Policy,
}

impl Driver<'_> {
    /// How this step's commands start: the tool environment, output limits and the
    /// secret values hidden from their output; built once per config commit.
    /// With them, how its calls ask (its mode, its run's `--on-ask`, its tree).
    pub(super) fn commands(
        &mut self,
        config_commit: CommitId,
        config: &Config,
    ) -> Result<(Commands, Arc<PathPolicy>, Policy)> {
        if let Some(kept) = &self.tools_setup
            && kept.config == config_commit
        {
            return Ok((kept.commands.clone(), kept.paths.clone(), kept.policy.clone()));
        }
        let (commands, paths, role) = self.build_commands(config)?;
        let (on_ask, root) = containment::tree_policy(&self.ws.repo, &self.facts);
        let policy = Policy { mode: role.mode(), on_ask, root };
        self.tools_setup = Some(ToolsSetup {
            config: config_commit,
            commands: commands.clone(),
            paths: paths.clone(),
            role,
            policy: policy.clone(),
        });
        Ok((commands, paths, policy))
    }

    /// The role this agent runs with under the config of `config_commit` (its own met
    /// with its ancestors'), as [`Driver::commands`] last built it.
    pub(super) fn effective_role(&mut self, config_commit: CommitId, config: &Config) -> Option<RoleConfig> {
        match &self.tools_setup {
            Some(kept) if kept.config == config_commit => Some(kept.role.clone()),
            _ => containment::effective_role(&self.ws.repo, &self.facts, config),
        }
    }

    pub(super) fn build_commands(&mut self, config: &Config) -> Result<(Commands, Arc<PathPolicy>, RoleConfig)> {
        let tmpdir = self.ws.layout.tmp(&self.id);
        std::fs::create_dir_all(&tmpdir).map_err(|source| DriverError::Io { path: tmpdir.clone(), source })?;
        let others = self.runtime.workspaces().and_then(|w| std::fs::canonicalize(w).ok());
        let site = Site {
            layout: &self.ws.layout,
            workspace: &self.real_workspace,
            id: &self.id,
            own: &self.real_root,
            others: others.as_deref(),
        };
        let tools = containment::agent_tools(&site, &self.ws.repo, &self.facts, config, self.runtime.env())
            .ok_or_else(|| self.role_gone())?;
        let sandbox = match tools.confinement {
            None => None,
            Some(c) => Some(self.sandbox(c)?),
        };
        let interrupt = self.runtime.interrupt().clone();
        let commands = Commands {
            on_spawn: Some(Arc::new(move |group| interrupt.command_started(group))),
            sandbox,
            ..tools.commands
        };
        Ok((commands, Arc::new(tools.paths), tools.role))
    }

    /// The jail for `confinement`, built once and kept while the confinement stays
    /// the same.
    pub(super) fn sandbox(&mut self, confinement: Confinement) -> Result<Arc<Jail>> {
        if let Some((built_for, jail)) = &self.sandbox
            && *built_for == confinement
        {
            return Ok(jail.clone());
        }
        let jail = containment::jail(&confinement, self.runtime.exe(), self.runtime.env())
            .map_err(|source| DriverError::Sandbox { role: self.facts.role.clone(), source })?;
        let jail = Arc::new(jail);
        self.sandbox = Some((confinement, jail.clone()));
        Ok(jail)
    }

    /// What an agent about to run commands should be told of their confinement: that
    /// it has none, or what this machine cannot give it.
    pub(super) fn warnings(&mut self) -> Result<Vec<String>> {
        let (_, config) = self.config()?;
        let untrusted: Vec<String> = crate::store::trust::found(self.ws)
            .into_iter()
            .filter(|f| f.standing != crate::store::trust::Standing::Trusted)
            .filter(|f| f.carried.as_ref().is_ok_and(|c| !c.hooks.is_empty() || c.permissions != Default::default()))
            .map(|f| format!("`{}`", f.path))
            .collect();
        let mut said = Vec::new();
        if !untrusted.is_empty() {
            said.push(format!(
                "your project's {} carries hooks or rules you have not trusted as they are: they do not run (`offshoot config trust` lists them)",
                untrusted.join(" and ")
            ));
        }
        let Some(role) = containment::effective_role(&self.ws.repo, &self.facts, &config) else {
            return Ok(said);
        };
        let others = self.runtime.workspaces().and_then(|w| std::fs::canonicalize(w).ok());
        for path in &role.write_paths {
            if containment::holds_internals(std::path::Path::new(path), &self.real_workspace, others.as_deref()) {
                said.push(format!(
                    "role `{}` may write `{path}` (`write_paths`), which holds offshoot's own workspace: it is not writable for its tools; name narrower paths",
                    self.facts.role
                ));
            }
        }
        if !role.tools.iter().any(|t| t == "bash") {
            return Ok(said);
        }
        let name = &self.facts.role;
        if role.sandbox == domain::config::Sandbox::None {
            said.push(format!(
                "role `{name}` runs commands unconfined (`sandbox = \"none\"`): they can read and write whatever you can, your keys and other agents included"
            ));
            return Ok(said);
        }
        let support = containment::support(self.runtime.exe(), self.runtime.env());
        let abi = containment::abi(self.runtime.env());
        said.extend(support.losses(sandbox::running_as_root(), abi));
        Ok(said)
    }

    pub(super) fn role_gone(&self) -> DriverError {
        DriverError::RoleGone {
            id: self.id.clone(),
            role: self.facts.role.clone(),
            lineage: self.facts.lineage.clone(),
        }
    }
}
