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

use crate::domain::agent::AgentFacts;
use crate::domain::config::Config;
use crate::domain::grant;
use crate::infra::git::CommitId;
use crate::infra::provider::ToolSpec;
use crate::infra::tools::{self, Builtin, ToolEnv, ToolError, ToolOutput};

use super::runtime::Runtime;

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

/// The agent a call belongs to, and the config of its step.
#[derive(Clone, Copy)]
pub struct AgentContext<'a> {
    pub runtime: &'a Runtime,
    pub facts: &'a AgentFacts,
    pub config: &'a Config,
    pub config_commit: CommitId,
    /// The agent's MCP servers (its driver's), whose tools are called through them.
    pub mcp: Option<&'a crate::engine::mcp::Servers>,
}

/// One tool.
pub trait Handler: Sync {
    fn name(&self) -> &'static str;
    /// What the model reads of it.
    fn spec(&self) -> ToolSpec {
        super::specs::spec(self.name()).unwrap_or_else(|| panic!("tool `{}` has no spec", self.name()))
    }
    /// Whether it only reads (may run beside other read-only calls).
    fn read_only(&self) -> bool;
    /// Whether it may change files in the agent's directory.
    fn writes(&self) -> bool;
    /// Whether a call of it cut short by a crash is run again, by its key, instead of
    /// being answered "outcome unknown": its effect is the harness's own, and a second
    /// run finds (by [`ToolContext::key`]) and completes what the first did, never doing
    /// it twice.
    fn exactly_once(&self) -> bool {
        false
    }
    fn run(&self, cx: &ToolContext, input: &Value) -> Result<ToolOutput, ToolError>;
}

impl Handler for Builtin {
    fn name(&self) -> &'static str {
        self.name
    }

    fn spec(&self) -> ToolSpec {
        Builtin::spec(self)
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn writes(&self) -> bool {
        self.writes
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
    if let Some(builtin) = tools::builtin(name) {
        return Some(builtin);
    }
    ENGINE_TOOLS.iter().copied().find(|h| h.name() == name)
}

/// Every tool, in the order the grant list names them.
pub fn handlers() -> impl Iterator<Item = &'static dyn Handler> {
    grant::TOOLS.iter().filter_map(|name| handler(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_grantable_tool_has_a_handler_with_a_real_spec() {
        let names: Vec<&str> = handlers().map(|h| h.name()).collect();
        assert_eq!(names, grant::TOOLS);
        for b in tools::BUILTINS {
            assert!(grant::TOOLS.contains(&b.name), "{} is not grantable", b.name);
        }
        for h in handlers() {
            let spec = h.spec();
            assert_eq!(spec.name, h.name());
            assert_eq!(spec.input_schema["type"], "object", "{}", h.name());
            assert!(spec.description.len() > 40, "{} needs a real description", h.name());
        }
    }
}
