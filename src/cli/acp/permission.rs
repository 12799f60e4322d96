//! A question of the policy's, asked of the client: `session/request_permission` with
//! allow once, allow always and reject, and the answer given in the queue as `offshoot
//! approve` or `deny` gives it — so a rule an "always" writes, and a "no" the model
//! reads, are the policy's own.

use std::path::PathBuf;

use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};
use serde_json::Value;

use domain::question::Scope;
use engine::ops::approvals::{self, ApprovalError};
use engine::store::workspace::Workspace;

use super::Connection;

const ONCE: &str = "allow_once";
const ALWAYS: &str = "allow_always";
const REJECT: &str = "reject_once";

/// One question to put to the client.
pub(super) struct Ask {
    pub(super) workspace: PathBuf,
    pub(super) session: String,
    /// The tool call it is about: the one the editor shows, when the session's own
    /// agent made it; else the question's id (a child's call).
    pub(super) call: String,
    pub(super) question: String,
    pub(super) agent: String,
    pub(super) tool: String,
    pub(super) input: Value,
    pub(super) why: String,
}

/// Asks the client and answers the question with what it chose. A client that cannot
/// answer gets what a run with no one to ask gets: no, saying why. A cancelled request
/// (the turn's cancel) answers nothing: the stop ends the wait.
pub(super) async fn ask(cx: Connection, ask: Ask) -> Result<(), agent_client_protocol::Error> {
    let title = format!("{} asks to run {}: {}", ask.agent, ask.tool, crate::cli::out::call_gist(&ask.input));
    let call = ToolCallUpdate::new(
        ask.call.clone(),
        ToolCallUpdateFields::new().title(title).status(ToolCallStatus::Pending).raw_input(ask.input.clone()),
    );
    let options = vec![
        PermissionOption::new(ONCE, "Allow once", PermissionOptionKind::AllowOnce),
        PermissionOption::new(ALWAYS, "Always allow", PermissionOptionKind::AllowAlways),
        PermissionOption::new(REJECT, "Reject", PermissionOptionKind::RejectOnce),
    ];
    let request = RequestPermissionRequest::new(ask.session.clone(), call, options);
    let response: Result<RequestPermissionResponse, _> = cx.send_request(request).block_task().await;
    let (yes, scope, reason) = match response {
        Ok(RequestPermissionResponse { outcome: RequestPermissionOutcome::Selected(chosen), .. }) => {
            match &*chosen.option_id.0 {
                ONCE => (true, Scope::Once, None),
                ALWAYS => (true, Scope::Always, None),
                _ => (false, Scope::Once, Some("the user rejected it in the editor".to_owned())),
            }
        }
        Ok(_) => return Ok(()),
        Err(e) => (false, Scope::Once, Some(format!("the editor could not answer ({}): {}", ask.why, e.message))),
    };
    let Ok(ws) = Workspace::open(&ask.workspace) else { return Ok(()) };
    // (An "always" no rule can carry — an ask rule's question, one beyond the sandbox —
    // is the next widest yes: the same call from the tree runs without asking.)
    let answered = match approvals::answer(&ws, &ask.question, yes, scope, reason) {
        Err(ApprovalError::NoRule { .. }) => approvals::answer(&ws, &ask.question, true, Scope::ForTree, None),
        other => other,
    };
    // (Someone else may have answered first, in the chat or with `offshoot approve`:
    // theirs stands.)
    drop(answered);
    Ok(())
}
