//! A session's children as the editor sees them: each dispatched child is the `dispatch`
//! tool call that made it, whose updates carry the child's state — its steps while it
//! works, its answer or how it ended. To a client that takes sub-sessions (the
//! protocol's unstable subagents), each child — and each of theirs — is also a session
//! of its own: announced on its parent's session (`subagent_update`, its state running,
//! then idle with how it stopped), its messages, thinking and calls streamed under its
//! id, and its dispatch call naming it.

use std::collections::HashMap;

use agent_client_protocol::v1::schema::{
    ContentBlock, ErrorStopReason, IdleStateUpdate, IdleStopReason, RunningStateUpdate, SessionNotification,
    SessionReference, SessionUpdate, StateUpdate, SubagentUpdate, TextContent, ToolCallContent, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields,
};

use domain::id::AgentId;
use engine::agents;
use engine::step::events::{End, Record};
use engine::store::workspace::Workspace;

use super::updates;

/// The dispatch call of each child seen so far (`None`: a child no call made), and,
/// when the client takes sub-sessions, those announced.
pub(super) struct Children {
    calls: HashMap<String, Option<String>>,
    sessions: Option<HashMap<String, Sub>>,
}

/// An announced sub-session: the text it streamed since its last whole text, and
/// whether the client was last told it is idle (a message may wake it again).
#[derive(Default)]
struct Sub {
    streamed: String,
    idle: bool,
}

impl Children {
    /// `subagents`: the client said at `initialize` that it takes sub-sessions.
    pub(super) fn new(subagents: bool) -> Self {
        Children { calls: HashMap::new(), sessions: subagents.then(HashMap::new) }
    }

    /// Whether a child was seen this turn.
    pub(super) fn is_empty(&self) -> bool {
        self.calls.is_empty() && self.sessions.as_ref().is_none_or(HashMap::is_empty)
    }

    /// What `record` of `agent`, below `session`'s agent, is to the client, in order:
    /// the sub-sessions it announces, the update of the call that dispatched a child,
    /// the record under the child's own session.
    pub(super) fn updates(
        &mut self,
        ws: &Workspace,
        session: &str,
        agent: &str,
        record: &Record,
    ) -> Vec<SessionNotification> {
        let Ok(id) = AgentId::parse(agent) else { return Vec::new() };
        if !agent.strip_prefix(session).is_some_and(|rest| rest.starts_with('.')) {
            return Vec::new();
        }
        let mut out = self.announce(ws, session, &id);
        let parent = id.parent().map(|p| p.to_string()).unwrap_or_default();
        // (The call that dispatched it is shown on its parent's session: the session's
        // own, or a sub-session.)
        let shown = parent == session || self.sessions.as_ref().is_some_and(|s| s.contains_key(&parent));
        if shown && let Some(update) = self.call_update(ws, agent, &id, record) {
            out.push(SessionNotification::new(parent.clone(), update));
        }
        if let Some(sub) = self.sessions.as_mut().and_then(|s| s.get_mut(agent)) {
            let state = match record {
                Record::End(end) => {
                    sub.idle = true;
                    Some(StateUpdate::Idle(IdleStateUpdate::new().stop_reason(stop_of(end))))
                }
                Record::Step { .. } if sub.idle => {
                    sub.idle = false;
                    Some(StateUpdate::Running(RunningStateUpdate::new()))
                }
                _ => None,
            };
            if let Some(state) = state {
                let update = SubagentUpdate::new(agent.to_owned()).state(state);
                out.push(SessionNotification::new(parent, SessionUpdate::SubagentUpdate(update)));
            }
            if let Some(update) = updates::of_record(record, &mut sub.streamed) {
                out.push(SessionNotification::new(agent.to_owned(), update));
            }
        }
        out
    }

    /// The announcements `id` needs before its first traffic: itself and any ancestor
    /// below `session` not yet announced, each on its parent's session, running.
    fn announce(&mut self, ws: &Workspace, session: &str, id: &AgentId) -> Vec<SessionNotification> {
        let Some(sessions) = self.sessions.as_mut() else { return Vec::new() };
        let mut chain = Vec::new();
        let mut at = Some(id.clone());
        while let Some(agent) = at.filter(|a| a.as_str() != session && !sessions.contains_key(a.as_str())) {
            at = agent.parent();
            chain.push(agent);
        }
        chain
            .into_iter()
            .rev()
            .map(|agent| {
                sessions.insert(agent.to_string(), Sub::default());
                let facts = agents::facts_of(ws, &agent.branch()).ok();
                let title = facts.as_ref().and_then(|f| f.name.clone()).unwrap_or_else(|| agent.to_string());
                let mut update = SubagentUpdate::new(agent.to_string())
                    .title(title)
                    .state(StateUpdate::Running(RunningStateUpdate::new()));
                if let Some(facts) = facts {
                    update = update.description(format!("`{}`, role {}", facts.id, facts.role));
                }
                let parent = agent.parent().map(|p| p.to_string()).unwrap_or_default();
                SessionNotification::new(parent, SessionUpdate::SubagentUpdate(update))
            })
            .collect()
    }

    /// The update of the call that dispatched child `agent`: its state in a line, and
    /// its session when the client takes sub-sessions.
    fn call_update(&mut self, ws: &Workspace, agent: &str, id: &AgentId, record: &Record) -> Option<SessionUpdate> {
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
        let call = self.calls.entry(agent.to_owned()).or_insert_with(|| agents::dispatching_call(ws, id)).clone()?;
        let mut content = vec![ToolCallContent::from(ContentBlock::Text(TextContent::new(said)))];
        if self.sessions.is_some() {
            content.push(ToolCallContent::from(SessionReference::new(agent.to_owned())));
        }
        Some(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            call,
            ToolCallUpdateFields::new().status(status).content(content),
        )))
    }
}

/// How a child's run ended, as a sub-session's idle state says it.
fn stop_of(end: &End) -> IdleStopReason {
    match end {
        End::FinalResponse { refused: true, .. } => IdleStopReason::Refusal,
        End::FinalResponse { .. } | End::Busy => IdleStopReason::EndTurn,
        End::BudgetExhausted { .. } => IdleStopReason::MaxTurnRequests,
        End::Interrupted { .. } => IdleStopReason::Cancelled,
        End::Error { cut_off: true, .. } => IdleStopReason::MaxTokens,
        End::Error { error, .. } => {
            let failure = agent_client_protocol::v1::schema::Error::new(
                i32::from(agent_client_protocol::ErrorCode::INTERNAL_ERROR),
                format!("the agent's run failed: {error}"),
            );
            IdleStopReason::Error(ErrorStopReason::new().error(failure))
        }
    }
}
