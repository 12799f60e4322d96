//! The tool registry: one handler per tool. A handler declares its spec, whether it
//! only reads (several such calls of one step may run together) and whether it can
//! change the agent's directory (its result then commits a scan), and runs with a
//! context the engine builds. The driver knows no tool by name; the grant gate
//! stands in front of the registry, in `toolcall`.

mod compactor;
mod dispatch;
mod load_skill;
mod message;

use serde_json::Value;

use domain::agent::AgentFacts;
use domain::grant::{self, Holder, Runs, Tool};
use infra::git::CommitId;
use infra::provider::ToolSpec;
use infra::tools::{self, Builtin, ToolEnv, ToolError, ToolOutput};

use crate::agents::runtime::Runtime;
use crate::store::workspace::{Workspace, WorkspaceError};

/// Everything a call may use.
pub struct ToolContext<'a> {
    /// Where it runs, how it starts commands, where its record goes.
    pub env: ToolEnv,
    /// The agent it belongs to; absent when a user runs a tool by hand.
    pub agent: Option<AgentContext<'a>>,
    /// What names this call for good (`<the model output's entry number>:<tool_use_id>`):
    /// a tool whose effect is the harness's own finds by it what a run of the same call
    /// cut short by a crash already did.
    pub key: Option<String>,
}

/// The agent a call belongs to, and the config commit of its step.
#[derive(Clone, Copy)]
pub struct AgentContext<'a> {
    pub(crate) runtime: &'a Runtime,
    pub(crate) facts: &'a AgentFacts,
    pub(crate) config_commit: CommitId,
    /// The agent's MCP servers (its driver's), whose tools are called through them.
    pub(crate) mcp: Option<&'a crate::step::mcp::Servers>,
    /// The config of its step: the permission rules its calls are held to.
    pub(crate) config: Option<&'a domain::config::Config>,
    /// Its mode, and how its run answers a call that needs a yes.
    pub(crate) policy: Option<&'a domain::question::Policy>,
    /// The jail its hooks run in (see `hooks::Who::jail`).
    pub(crate) hooks_jail: Option<&'a infra::sandbox::Jail>,
}

impl AgentContext<'_> {
    /// The agent's workspace, opened for this call (a repository handle is not shared
    /// between threads, and calls that only read run side by side).
    pub(crate) fn workspace(&self) -> Result<Workspace, WorkspaceError> {
        Workspace::open(self.runtime.layout().root())
    }
}

/// One tool's implementation; what it is (spec, how its calls may run) comes from its
/// row in the domain's tool table.
pub trait Handler: Sync {
    fn name(&self) -> &'static str;
    fn run(&self, cx: &ToolContext, input: &Value) -> Result<ToolOutput, ToolError>;
    /// Its row in the tool table.
    fn tool(&self) -> &'static Tool {
        grant::tool(self.name()).unwrap_or_else(|| panic!("tool `{}` is not in the tool table", self.name()))
    }
    /// What the model reads of it.
    fn spec(&self) -> ToolSpec {
        self.tool().spec()
    }
    /// Whether it only reads (may run beside other read-only calls).
    fn read_only(&self) -> bool {
        self.tool().read_only
    }
    /// Whether it may change files in the agent's directory.
    fn writes(&self) -> bool {
        self.tool().writes
    }
    /// Whether a call of it cut short by a crash is run again, by its key (see
    /// [`ToolContext::key`]), instead of being answered "outcome unknown".
    fn exactly_once(&self) -> bool {
        self.tool().exactly_once
    }
}

impl Handler for Builtin {
    fn name(&self) -> &'static str {
        self.name
    }

    fn run(&self, cx: &ToolContext, input: &Value) -> Result<ToolOutput, ToolError> {
        Builtin::run(self, &cx.env, input)
    }
}

/// The tools that need the engine (the config, the runtime).
static ENGINE_TOOLS: &[&dyn Handler] = &[
    &load_skill::LoadSkill,
    &dispatch::Dispatch,
    &message::Message,
    &compactor::WriteSummary,
    &compactor::MarkForDeletion,
];

/// The handler of tool `name`, if there is such a tool.
pub fn handler(name: &str) -> Option<&'static dyn Handler> {
    match grant::tool(name)?.runs {
        Runs::Directory => tools::builtin(name).map(|b| b as &dyn Handler),
        Runs::Engine => ENGINE_TOOLS.iter().copied().find(|h| h.name() == name),
    }
}

/// Every tool a role can be granted, in the table's order.
pub fn handlers() -> impl Iterator<Item = &'static dyn Handler> {
    grant::held_by(Holder::Role).filter_map(|t| handler(t.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_of_the_table_has_one_handler() {
        for t in grant::TOOLS {
            let h = handler(t.name).unwrap_or_else(|| panic!("{} has no handler", t.name));
            assert_eq!(h.name(), t.name);
        }
        for b in tools::BUILTINS {
            assert!(grant::tool(b.name).is_some_and(|t| t.runs == Runs::Directory), "{} is not in the table", b.name);
        }
        for h in ENGINE_TOOLS {
            assert!(grant::tool(h.name()).is_some_and(|t| t.runs == Runs::Engine), "{} is not in the table", h.name());
        }
    }
}
