//! A prompt's turn: the agent made (first prompt) or written to, its records streamed
//! back as session updates until its run ends, and the turn's end as a stop reason;
//! cancel and disconnect stop it as `offshoot stop` does.

use std::collections::HashMap;
use std::sync::Arc;

use agent_client_protocol::Error;
use agent_client_protocol::v1::schema::{
    ContentBlock, Cost, EmbeddedResourceResource, PromptRequest, SessionNotification, SessionUpdate, StopReason,
    UsageUpdate,
};
use tokio::sync::mpsc::UnboundedReceiver;

use domain::id::AgentId;
use engine::agents::{self, Start};
use engine::ops::{in_place, project};
use engine::step::events::{End, Record};
use engine::store::workspace::Workspace;
use infra::time::Timestamp;

use super::sessions::Session;
use super::{Connection, Shared, agents_of, internal, invalid, permission, updates};
use crate::cli::CliError;
use crate::cli::follow::{Follower, View};

/// How long the records of a turn's children are read after its agent's end.
const CATCH_UP: std::time::Duration = std::time::Duration::from_millis(250);

/// A turn under way: what follows the agent, where its records arrive, and the role's
/// context window (for usage updates).
pub(super) struct Turn {
    follower: Follower,
    records: UnboundedReceiver<(String, Record)>,
    window: Option<u64>,
    /// Whether its commits are written into the project's checkout.
    in_place: bool,
}

/// The prompt as one message: its text, a linked resource by its URI, an embedded one
/// with its text.
fn message_of(prompt: &[ContentBlock]) -> Result<String, Error> {
    let mut parts = Vec::new();
    for block in prompt {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::ResourceLink(link) => parts.push(format!("@{}", link.uri)),
            ContentBlock::Resource(embedded) => match &embedded.resource {
                EmbeddedResourceResource::TextResourceContents(r) => {
                    parts.push(format!("{}:\n```\n{}\n```", r.uri, r.text))
                }
                _ => return Err(invalid("a binary embedded resource is not taken in a prompt")),
            },
            _ => return Err(invalid("a prompt may hold text and resources only (no image or audio)")),
        }
    }
    let text = parts.join("\n\n");
    match text.trim().is_empty() {
        true => Err(invalid("the prompt is empty")),
        false => Ok(text),
    }
}

/// Starts a turn: the agent made with the prompt as its goal, or the prompt left in
/// its inbox; the follower of its events started before anything is written.
/// How long a prompt waits for the last turn's driver to let its agent go before the
/// user's edits are taken in (they wait for the next prompt otherwise), and a refused
/// turn for it before it is taken out of the context.
const USERS_EDITS_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Before a prompt to a session's agent that works in place: what the user changed in
/// the checkout since its last turn is taken into its work (the checkout is its tree
/// both ways). On the blocking pool: it may wait for the last turn's driver to end, and
/// reads the changed files.
pub(super) async fn catch_up(shared: &Shared, named: &str) {
    let made = shared.sessions.with(|s| s.get(named).filter(|s| s.unmade.is_none()).map(|s| s.workspace.clone()));
    let (Ok(Some(workspace)), Ok(agent)) = (made, AgentId::parse(named)) else { return };
    let taken = tokio::task::spawn_blocking(move || {
        let ws = Workspace::open(&workspace).map_err(|e| e.to_string())?;
        in_place::take_users_edits(&ws, &agent, USERS_EDITS_WAIT).map_err(|e| e.to_string())
    })
    .await;
    match taken {
        Ok(Ok(taken)) if !taken.is_empty() => super::log(&format!(
            "`{named}` takes {} files you changed in the checkout: {}",
            taken.len(),
            taken.join(", ")
        )),
        Ok(Err(e)) => super::log(&format!("your edits in the checkout could not be taken into `{named}`: {e}")),
        _ => {}
    }
}

pub(super) fn begin(shared: &Shared, request: &PromptRequest) -> Result<Turn, Error> {
    let named = request.session_id.to_string();
    let text = message_of(&request.prompt)?;
    let taken = shared.sessions.with(|s| match s.get_mut(&named) {
        None => Err(invalid(format!("no session `{named}`: session/new or session/load it first"))),
        Some(session) if session.working => {
            Err(invalid(format!("session `{named}` is working on a prompt; session/cancel it or wait for its end")))
        }
        Some(session) => {
            // (Taken before anything is made: a second prompt meanwhile is refused.)
            session.working = true;
            Ok(session.clone())
        }
    })??;
    let begun = begin_taken(shared, &text, &taken);
    // (An agent made by a turn that then failed — its driver not launched, say — is the
    // session's all the same: the next prompt writes to it rather than making another.)
    let exists = || {
        Workspace::open(&taken.workspace)
            .is_ok_and(|ws| ws.repo.branch_tip(&taken.agent.branch()).ok().flatten().is_some())
    };
    let made = begun.is_ok() || (taken.unmade.is_some() && exists());
    shared.sessions.with(|s| {
        if let Some(session) = s.get_mut(&named) {
            session.working = begun.is_ok();
            if made {
                // (The mode went with the prompt.)
                (session.unmade, session.mode) = (None, None);
            }
        }
    })?;
    begun
}

fn begin_taken(shared: &Shared, text: &str, session: &super::sessions::Session) -> Result<Turn, Error> {
    let Session { workspace, agent, in_place, mode, servers, .. } = session;
    let (in_place, mode) = (*in_place, *mode);
    let ws = Workspace::open(workspace).map_err(internal)?;
    let ctx = shared.ctx.lock().map_err(internal)?;
    let rt = ctx.runtime(&ws);
    let (tx, records) = tokio::sync::mpsc::unbounded_channel();
    let view = View::Each(Arc::new(move |agent: &str, record: &Record| {
        let _ = tx.send((agent.to_owned(), record.clone()));
    }));
    let engine = |e: agents::AgentError| internal(CliError::from(e).message());
    let Some(unmade) = &session.unmade else {
        let follower = Follower::start_with_itself(ws.layout.root(), agent, view);
        let chosen = engine::agents::runtime::Chosen { mode, ..Default::default() };
        rt.deposit_choosing(agent, "user", text, &chosen).map_err(internal)?;
        rt.wake(agent).map_err(internal)?;
        return Ok(Turn { follower, records, window: window_of(&ws, agent), in_place });
    };
    let mut start = Start {
        message: text,
        name: None,
        now: Timestamp::now(),
        random: unmade.random,
        env: &ctx.env,
        project: None,
        model: None,
        reasoning: None,
        copy_ignored: &[],
        mode,
        // (Asking the client, the call waits in the queue for the answer given there.)
        on_ask: Some(shared.on_ask.unwrap_or(domain::question::OnAsk::Wait)),
    };
    let id = match &unmade.from {
        Some(from) => agents::fork(&ws, from, &start).map_err(engine)?,
        None => {
            // In a project the agent starts from the checkout as it is, uncommitted
            // changes and all: what the editor shows.
            let user = ws.user_repo().map_err(internal)?;
            let author = user.as_ref().and_then(|u| u.identity(&ctx.git_config_files()));
            let from = project::start_point(&ws, None, user.is_some(), author.as_ref()).map_err(internal)?;
            start.project = from.as_ref().map(|(s, _)| s);
            agents::create_root(&ws, "worker", "default", &start).map_err(engine)?
        }
    };
    if &id != agent {
        // (Only when another agent took the reserved id meanwhile.)
        return Err(internal(format!(
            "the agent was made as `{id}`, not as the session's `{agent}`; start a new session"
        )));
    }
    if in_place {
        // (Before its driver starts: every commit of it is written into the checkout.)
        in_place::work_in_place(&ws, &id).map_err(internal)?;
    }
    super::sessions::give_servers(&ws, &id, servers)?;
    let follower = Follower::start_from_the_beginning(ws.layout.root(), &id, view);
    rt.launch(&id).map_err(internal)?;
    Ok(Turn { follower, records, window: window_of(&ws, &id), in_place })
}

/// The context window the agent's role names, if it names one.
fn window_of(ws: &Workspace, agent: &AgentId) -> Option<u64> {
    let facts = agents::facts_of(ws, agent.as_str()).ok()?;
    let (_, config) = ws.config(&facts.lineage).ok()?;
    config.role(&facts.role)?.context_window
}

/// Streams the session's agent's records as updates until its run ends; the stop
/// reason that end is, or the error that ended it (a provider's, say: the session
/// stays, and the next prompt goes on from there).
pub(super) async fn follow(shared: &Shared, named: &str, turn: Turn, cx: &Connection) -> Result<StopReason, Error> {
    let Turn { follower, mut records, window, in_place } = turn;
    let ws = match shared.sessions.workspace_of(named).map(|w| Workspace::open(&w)) {
        Some(Ok(ws)) => Some(ws),
        _ => None,
    };
    let mut streamed = String::new();
    // The calls the editor was shown, by what they run: where a question points.
    let mut shown: HashMap<(String, String), String> = HashMap::new();
    let mut children = super::children::Children::new(shared.subagents.load(std::sync::atomic::Ordering::Relaxed));
    // (Whether the agent dispatched a child this turn: its records are read after its end.)
    let mut dispatched = false;
    let reason = loop {
        let Some((agent, record)) = records.recv().await else { break Ok(StopReason::Cancelled) };
        if let Record::Asked { question, tool, input, why, .. } = &record
            && shared.on_ask.is_none()
        {
            let call = shown.get(&(tool.clone(), input.to_string())).cloned().unwrap_or_else(|| question.clone());
            let Some(workspace) = shared.sessions.workspace_of(named) else { break Ok(StopReason::Cancelled) };
            let ask = permission::Ask {
                workspace,
                session: named.to_owned(),
                call,
                question: question.clone(),
                agent: agent.clone(),
                tool: tool.clone(),
                input: input.clone(),
                why: why.clone(),
            };
            let _ = cx.spawn(permission::ask(cx.clone(), ask));
        }
        if agent != named {
            let sent = ws.as_ref().map_or_else(Vec::new, |ws| children.updates(ws, named, &agent, &record));
            if sent.into_iter().any(|update| cx.send_notification(update).is_err()) {
                break Ok(StopReason::Cancelled);
            }
            continue;
        }
        // (Each of these comes after a commit of the agent's: the checkout catches up.)
        if in_place
            && matches!(
                record,
                Record::ToolResult { .. } | Record::Step { .. } | Record::Transfer { .. } | Record::End(_)
            )
            && let (Some(ws), Ok(id)) = (&ws, AgentId::parse(named))
        {
            agents_of::mirror(ws, &id);
        }
        if let Record::ToolCall { tool_use_id, name, input } = &record {
            dispatched |= name == "dispatch";
            shown.insert((name.clone(), input.to_string()), tool_use_id.clone());
        }
        let update = match &record {
            Record::Usage { usage, cost_usd, .. } => usage_update(shared, named, usage, *cost_usd, window),
            Record::Compaction { outcome, compactor, note }
                if shared.compaction.load(std::sync::atomic::Ordering::Relaxed) =>
            {
                ws.as_ref().and_then(|ws| updates::compaction(ws, named, outcome, compactor, note))
            }
            Record::End(end) => {
                break match end {
                    End::FinalResponse { refused: true, .. } => {
                        forget_refused(shared, named).await;
                        Ok(StopReason::Refusal)
                    }
                    End::FinalResponse { .. } | End::Busy => Ok(StopReason::EndTurn),
                    End::BudgetExhausted { .. } => Ok(StopReason::MaxTurnRequests),
                    End::Interrupted { .. } => Ok(StopReason::Cancelled),
                    // (What came of the answer was streamed; it is kept, `show --step`.)
                    End::Error { cut_off: true, .. } => Ok(StopReason::MaxTokens),
                    End::Error { error, .. } => Err(internal(format!("the agent's run failed: {error}"))),
                };
            }
            _ => updates::of_record(&record, &mut streamed),
        };
        if let Some(update) = update
            && cx.send_notification(SessionNotification::new(named.to_owned(), update)).is_err()
        {
            break Ok(StopReason::Cancelled);
        }
    };
    // (A child's end is written before its parent's, but the follower may read the
    // parent's file first — in a pass that brings all of a quick child's records after
    // it: what a look or two more brings of the children is shown.)
    while (dispatched || !children.is_empty())
        && let Ok(Some((agent, record))) = tokio::time::timeout(CATCH_UP, records.recv()).await
    {
        for update in ws.as_ref().map_or_else(Vec::new, |ws| children.updates(ws, named, &agent, &record)) {
            let _ = cx.send_notification(update);
        }
    }
    drop(follower);
    let _ = shared.sessions.with(|s| s.get_mut(named).map(|s| s.working = false));
    reason
}

/// A refused turn out of the session's agent's context, as the `refusal` stop says to
/// the client (on the blocking pool: it waits for the driver to let the agent go).
async fn forget_refused(shared: &Shared, named: &str) {
    let (Some(workspace), Ok(agent)) = (shared.sessions.workspace_of(named), AgentId::parse(named)) else { return };
    let forgotten = tokio::task::spawn_blocking(move || {
        let ws = Workspace::open(&workspace).map_err(|e| e.to_string())?;
        engine::ops::refusal::forget_refused_turn(&ws, &agent, USERS_EDITS_WAIT).map_err(|e| e.to_string())
    })
    .await;
    if let Ok(Err(e)) = forgotten {
        super::log(&format!("the refused turn of `{named}` could not be taken out of its context: {e}"));
    }
}

/// A step's usage as the editor shows it: how full the context is (when the role names
/// its window) and what the session has cost so far (this connection's turns).
fn usage_update(
    shared: &Shared,
    named: &str,
    usage: &infra::provider::Usage,
    cost_usd: Option<f64>,
    window: Option<u64>,
) -> Option<SessionUpdate> {
    let spent = shared
        .sessions
        .with(|s| {
            let session = s.get_mut(named)?;
            session.cost += cost_usd.unwrap_or(0.0);
            Some(session.cost)
        })
        .ok()
        .flatten();
    let used = [usage.input, usage.cache_read, usage.cache_write, usage.output].iter().flatten().sum();
    let mut update = UsageUpdate::new(used, window?);
    if let Some(spent) = spent.filter(|_| cost_usd.is_some()) {
        update = update.cost(Cost::new(spent, "USD"));
    }
    Some(SessionUpdate::UsageUpdate(update))
}

/// `session/cancel`: the session's agent and those below it stopped as `stop` does;
/// its turn ends `cancelled`.
pub(super) fn cancel(shared: &Arc<Shared>, named: &str) {
    let working = shared
        .sessions
        .with(|s| s.get(named).filter(|s| s.working).map(|s| (s.workspace.clone(), s.agent.clone())))
        .ok()
        .flatten();
    if let Some((workspace, agent)) = working {
        agents_of::stop_in_background(shared, workspace, agent);
    }
}
