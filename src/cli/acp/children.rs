//! A session's children as the editor sees them: each dispatched child is the `dispatch`
//! tool call that made it, whose updates carry the child's state — its steps while it
//! works, its answer or how it ended.

use std::collections::HashMap;

use agent_client_protocol::v1::schema::{
    ContentBlock, SessionUpdate, TextContent, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};

use domain::id::AgentId;
use engine::agents;
use engine::step::events::{End, Record};
use engine::store::workspace::Workspace;

/// The dispatch call of each child seen so far (`None`: a child no call made).
#[derive(Default)]
pub(super) struct Children(HashMap<String, Option<String>>);

impl Children {
    /// Whether a child was seen this turn.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// What `record` of `agent` says of a child of `session`'s agent, as an update of
    /// the call that dispatched it; `None` for anything else.
    pub(super) fn update(
        &mut self,
        ws: &Workspace,
        session: &str,
        agent: &str,
        record: &Record,
    ) -> Option<SessionUpdate> {
        let child = AgentId::parse(agent).ok()?;
        if child.parent().map(|p| p.to_string()).as_deref() != Some(session) {
            return None;
        }
        let (status, said) = match record {
            Record::Step { step, .. } => (ToolCallStatus::InProgress, format!("`{agent}` is at work: step {step}")),
            Record::End(End::FinalResponse { text, .. }) => {
                (ToolCallStatus::Completed, format!("`{agent}` answered: {text}"))
            }
            Record::End(End::Interrupted { reason }) => (ToolCallStatus::Failed, format!("`{agent}`: {reason}")),
            Record::End(End::BudgetExhausted { error }) => (ToolCallStatus::Failed, format!("`{agent}`: {error}")),
            Record::End(End::Error { error, .. }) => (ToolCallStatus::Failed, format!("`{agent}` failed: {error}")),
            _ => return None,
        };
        let call = self.0.entry(agent.to_owned()).or_insert_with(|| agents::dispatching_call(ws, &child)).clone()?;
        let text = ToolCallContent::from(ContentBlock::Text(TextContent::new(said)));
        Some(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            call,
            ToolCallUpdateFields::new().status(status).content(vec![text]),
        )))
    }
}
