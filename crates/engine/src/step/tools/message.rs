//! `message`: leaves a message in another agent's inbox and wakes it.

use serde_json::Value;

use infra::tools::{self, ToolError, ToolOutput, str_arg};

use domain::id::AgentId;

use super::{Handler, ToolContext};
use crate::agents;
use crate::agents::lifecycle::{self, STOPPED};
use crate::agents::runtime::Woken;
use crate::store::inbox;
use domain::inbox::Deposit;
use infra::time::Timestamp;

pub struct Message;

impl Handler for Message {
    fn name(&self) -> &'static str {
        "message"
    }

    fn run(&self, cx: &ToolContext, input: &Value) -> Result<ToolOutput, ToolError> {
        tools::require_object(self.name(), input)?;
        let to = str_arg(input, "to")?;
        let content = str_arg(input, "content")?;
        let Some(agent) = &cx.agent else {
            return Err(ToolError::ToModel("`message` sends as an agent; it runs only in an agent's step".into()));
        };
        if content.trim().is_empty() {
            return Err(ToolError::ToModel("`content` is empty; nothing was sent".into()));
        }
        let not_sent = |e: &dyn std::fmt::Display| ToolError::ToModel(format!("nothing was sent: {e}"));
        let ws = agent.workspace().map_err(|e| not_sent(&e))?;
        let recipient = agents::resolve(&ws, to).map_err(|e| not_sent(&e))?;
        let sender = AgentId::parse(&agent.facts.id).map_err(|e| not_sent(&e))?;
        // Agents talk within the tree of one prompt, never to another's.
        let root = sender.root();
        if recipient.root() != root {
            return Err(not_sent(&format_args!(
                "`{to}` is not in your tree; agents message only the agents started from `{root}` (it and those below it)"
            )));
        }
        // The sender is who runs this step, whatever the model says. Sent once: the same
        // call run again after a crash finds what it sent by its key.
        let key = cx.key.as_ref().map(|k| format!("{sender}:{k}"));
        let sent = match &key {
            Some(key) => lifecycle::received_key(&ws, &recipient, key).map_err(|e| not_sent(&e))?,
            None => false,
        };
        if !sent {
            let deposit = Deposit { key, ..Deposit::new(&agent.facts.id, Timestamp::now(), content) };
            inbox::deposit(agent.runtime.layout(), &recipient, &deposit).map_err(|e| not_sent(&e))?;
        }
        // What the user stopped stays stopped until the user sends it something.
        if ws.repo.mark(STOPPED, recipient.as_str()).ok().flatten().is_some() {
            return Ok(ToolOutput::summary(format!(
                "left in `{recipient}`'s inbox; it was stopped, and reads it when the user sends it a message or runs it"
            )));
        }
        let woken = agent.runtime.wake(&recipient).map_err(|e| {
            ToolError::ToModel(format!("left in `{recipient}`'s inbox, but it could not be woken: {e}"))
        })?;
        let how = match woken {
            Woken::Running => "it is working and will see it at its next step",
            Woken::Launched(_) => "it was idle and has been started",
            Woken::Deferred => "a worker of the fleet will start it",
        };
        Ok(ToolOutput::summary(format!("delivered to `{recipient}`; {how}")))
    }
}
