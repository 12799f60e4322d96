//! `dispatch`: starts a child agent and returns its id at once.

use serde_json::Value;

use domain::id::AgentId;
use infra::time::Timestamp;
use infra::tools::{self, ToolError, ToolOutput, str_arg};

use super::{Handler, ToolContext};
use crate::agents::lifecycle;
use crate::agents::{self, Child};
use crate::random_u32;

pub(crate) struct Dispatch;

impl Handler for Dispatch {
    fn name(&self) -> &'static str {
        "dispatch"
    }

    fn run(&self, cx: &ToolContext, input: &Value) -> Result<ToolOutput, ToolError> {
        tools::require_object(self.name(), input)?;
        let role = str_arg(input, "role")?;
        let goal = str_arg(input, "goal")?;
        let name = input.get("name").and_then(Value::as_str);
        let Some(agent) = &cx.agent else {
            return Err(ToolError::ToModel(
                "`dispatch` starts a child of an agent; it runs only in an agent's step".into(),
            ));
        };
        let refused = |e: &dyn std::fmt::Display| ToolError::ToModel(format!("no child was started: {e}"));
        let ws = agent.workspace().map_err(|e| refused(&e))?;
        let parent = AgentId::parse(&agent.facts.id).map_err(|e| refused(&e))?;
        let child = Child {
            role,
            goal,
            name,
            from: None,
            now: Timestamp::now(),
            random: random_u32(),
            env: agent.runtime.env(),
            compactor: false,
            key: cx.key.as_deref(),
        };
        let id = agents::create_child(&ws, &parent, &child).map_err(|e| refused(&e))?;
        let named = agents::name_of(&ws, &id).map(|n| format!(" ({n})")).unwrap_or_default();
        // Stopped by the user while it was made (or before this call ran again after a
        // crash): it waits for the user, as any stopped agent does.
        if ws.repo.mark(lifecycle::STOPPED, id.as_str()).ok().flatten().is_some() {
            return Ok(ToolOutput::summary(format!(
                "started `{id}`{named} as `{role}`, but the user stopped it: it waits until the user sends it a message or runs it; its result will arrive as a message from `{id}`"
            )));
        }
        match agent.runtime.launch(&id) {
            Ok(_) => Ok(ToolOutput::summary(format!(
                "started `{id}`{named} as `{role}`; it works on its own, and its result will arrive as a message from `{id}`"
            ))),
            Err(e) => Err(ToolError::ToModel(format!(
                "`{id}`{named} was made but its driver did not start ({e}); a message to it will start it"
            ))),
        }
    }
}
