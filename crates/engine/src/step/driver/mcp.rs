//! The agent's MCP servers before each model call: set up for the config of the
//! step, and their tools' records in the tree brought in line with what the servers
//! list (one commit when anything changed).

use std::collections::BTreeMap;
use std::rc::Rc;

use crate::step::events::{Event, Observer};
use crate::step::mcp::Place;
use infra::git::CommitId;

use super::{Driver, DriverError, Result};

impl Driver<'_> {
    /// The tip, or a commit on it whose `.offshoot/mcp/` records the tools of the
    /// servers the role uses now.
    pub(super) fn mcp_tools(&mut self, tip: CommitId, observer: &mut dyn Observer) -> Result<CommitId> {
        let (config_commit, config) = self.config()?;
        let mut chosen: BTreeMap<_, _> = config
            .mcp_servers_of(&self.facts.role)
            .into_iter()
            .filter_map(|name| config.mcp_servers.get(&name).map(|s| (name, s.clone())))
            .collect();
        // An editor's servers for its session (`acp`), beside the role's; a name the
        // config uses stays the config's.
        for (name, server) in &self.client_servers {
            chosen.entry(name.clone()).or_insert_with(|| server.clone());
        }
        if chosen.is_empty() && self.mcp.idle() {
            let none = match self.mcp_none {
                Some(none) => none,
                None => self.ws.repo.list_dir(tip, domain::mcp::DIR)?.is_empty(),
            };
            self.mcp_none = Some(none);
            if none {
                return Ok(tip);
            }
        }
        let id = self.id.clone();
        let gone = |reason: &str| DriverError::Damaged { id: id.clone(), reason: reason.into() };
        if self.mcp_config != Some(config_commit) {
            let (commands, ..) = self.commands(config_commit, &config)?;
            let place = Place {
                env: commands.env.clone(),
                sandbox: commands.sandbox.clone(),
                root: self.dir.root().to_owned(),
                logs: self.ws.layout.mcp_logs(self.id.as_str()),
                states: self.ws.layout.root().join("mcp"),
                agent: self.id.to_string(),
                vars: self.runtime.env().clone(),
                redactor: commands.redactor.clone(),
            };
            Rc::get_mut(&mut self.mcp).ok_or_else(|| gone("its MCP servers are in use"))?.configure(chosen, place);
            self.mcp_config = Some(config_commit);
        }
        let interrupt = self.runtime.interrupt().clone();
        let go_on = move || interrupt.reason().is_none();
        let servers = Rc::get_mut(&mut self.mcp).ok_or_else(|| gone("its MCP servers are in use"))?;
        let refresh = servers
            .refresh(&self.ws.repo, tip, &go_on)
            .map_err(|e| DriverError::Damaged { id: id.clone(), reason: e.into() })?;
        for warning in &refresh.warnings {
            observer.event(Event::Warning(warning));
        }
        if let Some(reason) = self.runtime.interrupt().reason() {
            return Err(DriverError::Interrupted { id: self.id.clone(), reason });
        }
        if !refresh.changes() {
            return Ok(tip);
        }
        self.mcp_none = Some(false);
        let files: Vec<(&str, &[u8])> = refresh.write.iter().map(|(p, b)| (p.as_str(), b.as_slice())).collect();
        let removed: Vec<&str> = refresh.remove.iter().map(String::as_str).collect();
        let message = format!("tools: {}", refresh.said.join("; "));
        self.commit_changes(tip, &[], &files, &removed, None, &message)
    }
}
