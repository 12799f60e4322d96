//! What a session does to its agent outside a prompt's stream: its work written into
//! the checkout (in place), its tree stopped (cancel, close, a client gone).

use std::path::PathBuf;
use std::sync::Arc;

use domain::id::AgentId;
use engine::agents;
use engine::ops::in_place;
use engine::store::workspace::Workspace;

use super::Shared;

/// How long a stop waits for the drivers it stops.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// Writes what the agent's work gained into the project's checkout; what could not be
/// written is said on stderr (the editor's log of the agent).
pub(super) fn mirror(ws: &Workspace, agent: &AgentId) {
    match in_place::mirror(ws, agent) {
        Ok(mirrored) if !mirrored.kept.is_empty() => super::log(&format!(
            "left as they are in the checkout (changed there too, and the agent's change does not merge): {}",
            mirrored.kept.join(", ")
        )),
        Ok(_) => {}
        Err(e) => super::log(&format!("the agent's work could not be written into the checkout: {e}")),
    }
}

/// Stops `agent`'s tree on a thread of its own: the connection goes on serving.
pub(super) fn stop_in_background(shared: &Arc<Shared>, workspace: PathBuf, agent: AgentId) {
    let shared = shared.clone();
    std::thread::spawn(move || {
        let Ok(ws) = Workspace::open(&workspace) else { return };
        let rt = match shared.ctx.lock() {
            Ok(ctx) => ctx.runtime(&ws),
            Err(_) => return,
        };
        let _ = agents::lifecycle::stop_tree(&ws, &rt, &agent, PATIENCE);
    });
}

/// The client is gone: every session still working is stopped and left loadable.
pub(super) fn stop_all(shared: &Shared) {
    let working: Vec<(PathBuf, AgentId)> = shared
        .sessions
        .with(|s| s.values().filter(|s| s.working).map(|s| (s.workspace.clone(), s.agent.clone())).collect())
        .unwrap_or_default();
    for (workspace, agent) in working {
        let (Ok(ws), Ok(ctx)) = (Workspace::open(&workspace), shared.ctx.lock()) else { continue };
        let _ = agents::lifecycle::stop_tree(&ws, &ctx.runtime(&ws), &agent, PATIENCE);
    }
}
