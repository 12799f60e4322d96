//! `.offshoot/agent.toml`: the immutable facts of an agent, written at dispatch.

use serde::{Deserialize, Serialize};

/// Paths of the agent's own files inside its tree.
pub const DIR: &str = ".offshoot";
pub const FACTS: &str = ".offshoot/agent.toml";
pub const GOAL: &str = ".offshoot/goal.md";
pub const SOUL: &str = ".offshoot/soul.md";
pub const TOOLS: &str = ".offshoot/tools";
pub const MESSAGES: &str = ".offshoot/messages";
pub const SUMMARIES: &str = ".offshoot/summary";
pub const SKILLS: &str = ".offshoot/skills";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFacts {
    pub id: String,
    pub role: String,
    pub lineage: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub created: String,
    /// The commit a `fork` continued from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
}

impl AgentFacts {
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    pub fn parse(text: &str) -> Result<AgentFacts, String> {
        toml::from_str(text).map_err(|e| e.message().to_owned())
    }
}
