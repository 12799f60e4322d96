//! Session modes: the policy's permission modes (`read-only`, `ask`, `workspace-write`,
//! `full`) as ACP's. A mode set before the first prompt is the agent's from its start
//! (as `prompt --mode`); one set later goes with the next prompt and is the agent's from
//! that message's delivery on.

use agent_client_protocol::Error;
use agent_client_protocol::v1::schema::{SessionMode, SessionModeState, SetSessionModeRequest, SetSessionModeResponse};

use domain::config::Mode;
use domain::id::AgentId;
use engine::agents::containment;
use engine::store::workspace::Workspace;

use super::{Shared, invalid};

/// What each mode means, as the editor's menu says it.
fn described(mode: Mode) -> (&'static str, &'static str) {
    match mode {
        Mode::ReadOnly => ("Read only", "Reads and searches; no file writes, commands write nothing"),
        Mode::Ask => ("Ask", "Asks before every command and file write no rule allows"),
        Mode::WorkspaceWrite => ("Workspace write", "Works freely inside its sandbox"),
        Mode::Full => ("Full access", "No sandbox: commands run as you"),
    }
}

/// The modes offered, `current` the one in force.
pub(super) fn state(current: Mode) -> SessionModeState {
    let modes = Mode::ALL
        .into_iter()
        .map(|m| {
            let (name, description) = described(m);
            SessionMode::new(m.word(), name).description(description)
        })
        .collect();
    SessionModeState::new(current.word(), modes)
}

/// The mode a new session's agent would run in: its role's.
pub(super) fn of_new(ws: &Workspace) -> Mode {
    ws.config("default")
        .ok()
        .and_then(|(_, config)| config.role("worker").map(|r| r.mode()))
        .unwrap_or(Mode::WorkspaceWrite)
}

/// The mode agent `id` runs in by its own choice (a mode set and not yet sent wins).
pub(super) fn of_agent(ws: &Workspace, id: &AgentId, pending: Option<Mode>) -> Mode {
    pending.or_else(|| containment::own_mode(ws, id)).unwrap_or(Mode::ReadOnly)
}

/// `session/set_mode`: kept with the session until its next prompt carries it.
pub(super) fn set(shared: &Shared, request: SetSessionModeRequest) -> Result<SetSessionModeResponse, Error> {
    let named = request.session_id.to_string();
    let mode = Mode::parse(&request.mode_id.to_string()).map_err(invalid)?;
    shared.sessions.with(|s| match s.get_mut(&named) {
        Some(session) => {
            session.mode = Some(mode);
            Ok(())
        }
        None => Err(invalid(format!("no session `{named}`: session/new or session/load it first"))),
    })??;
    Ok(SetSessionModeResponse::new())
}
