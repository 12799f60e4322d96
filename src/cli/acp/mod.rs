//! `offshoot acp`: an Agent Client Protocol agent on stdin/stdout, for editors (Zed,
//! JetBrains, Neovim, Emacs) and harnesses that drive agents through it. The only
//! module that knows the `agent-client-protocol` crate. A client of the drivers, as the
//! chat is: a session is an agent (its id is the agent's id), a prompt is the agent's
//! first message or one left in its inbox, and what the agent does comes back from its
//! events file as session updates.

mod permission;
mod updates;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, EmbeddedResourceResource, Implementation, InitializeRequest,
    InitializeResponse, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest, LoadSessionResponse,
    NewSessionRequest, NewSessionResponse, PromptCapabilities, PromptRequest, PromptResponse, SessionCapabilities,
    SessionInfo, SessionListCapabilities, SessionNotification, StopReason,
};
use agent_client_protocol::{Agent, Client, Error, Stdio};

use domain::id::AgentId;
use engine::agents::{self, Start};
use engine::ops::{inspect, project};
use engine::step::events::{End, Record};
use engine::store::workspace::Workspace;
use infra::time::Timestamp;

use super::follow::{Follower, View};
use super::{CliError, Ctx};

type Connection = agent_client_protocol::v1::ConnectionTo<Client>;

/// How long a cancel waits for the drivers it stops.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// One session: the agent it is, where its workspace is, and whether it exists yet
/// (a new session's agent is made at its first prompt, with the id reserved for it).
struct Session {
    workspace: PathBuf,
    agent: AgentId,
    random: u32,
    made: bool,
    working: bool,
}

struct Shared {
    /// (Behind a lock: the context's output is not to be shared between threads.)
    ctx: Mutex<Ctx>,
    /// `--on-ask`: `None` puts each question to the client.
    on_ask: Option<domain::question::OnAsk>,
    sessions: Mutex<HashMap<String, Session>>,
}

impl Shared {
    /// The workspace of session `named`, while it is one.
    fn workspace_of(&self, named: &str) -> Option<PathBuf> {
        self.sessions.lock().ok()?.get(named).map(|s| s.workspace.clone())
    }
}

/// Serves ACP on stdin/stdout until the client closes it; what still works then is
/// stopped, committed as a stop leaves it, and loadable later.
pub(crate) fn serve(ctx: Ctx, on_ask: Option<domain::question::OnAsk>) -> Result<(), CliError> {
    let shared = Arc::new(Shared { ctx: Mutex::new(ctx), on_ask, sessions: Mutex::new(HashMap::new()) });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| CliError::runtime(format!("cannot start the ACP runtime: {e}")))?;
    let served = runtime.block_on(connect(shared.clone()));
    stop_all(&shared);
    served.map_err(|e| CliError::runtime(format!("the ACP connection failed: {e}")))
}

async fn connect(shared: Arc<Shared>) -> Result<(), Error> {
    let (s1, s2, s3, s4, s5, s6) =
        (shared.clone(), shared.clone(), shared.clone(), shared.clone(), shared.clone(), shared.clone());
    Agent
        .v1()
        .name("offshoot")
        .on_receive_request(
            async move |request: InitializeRequest, responder, _cx| {
                let _ = &s1;
                responder.respond(initialized(request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest, responder, _cx| {
                responder.respond_with_result(new_session(&s2, request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: LoadSessionRequest, responder, cx| {
                responder.respond_with_result(load_session(&s3, request, &cx))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ListSessionsRequest, responder, _cx| {
                responder.respond_with_result(list_sessions(&s4, request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder, cx: Connection| {
                let follower = match begin_turn(&s5, &request) {
                    Ok(follower) => follower,
                    Err(e) => return responder.respond_with_error(e),
                };
                let shared = s5.clone();
                cx.spawn({
                    let cx = cx.clone();
                    async move {
                        let reason = follow_turn(&shared, &request.session_id.to_string(), follower, &cx).await;
                        responder.respond(PromptResponse::new(reason))
                    }
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |cancel: CancelNotification, _cx| {
                cancel_turn(&s6, &cancel.session_id.to_string());
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(Stdio::new())
        .await
}

fn initialized(request: InitializeRequest) -> InitializeResponse {
    let capabilities = AgentCapabilities::new()
        .load_session(true)
        .prompt_capabilities(PromptCapabilities::new().embedded_context(true))
        .session_capabilities(SessionCapabilities::new().list(SessionListCapabilities::new()));
    InitializeResponse::new(request.protocol_version)
        .agent_capabilities(capabilities)
        .agent_info(Implementation::new("offshoot", env!("CARGO_PKG_VERSION")))
}

/// A JSON-RPC "invalid params" error saying `message`.
fn invalid(message: impl Into<String>) -> Error {
    Error::new(agent_client_protocol::ErrorCode::INVALID_PARAMS, message.into())
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::new(agent_client_protocol::ErrorCode::INTERNAL_ERROR, e.to_string())
}

/// The workspace of a session in `cwd`: `-w`'s, the project's when `cwd` is inside a
/// repository, else the default one (made on first use, as `prompt` does).
fn workspace_for(ctx: &Ctx, cwd: &Path) -> Result<Workspace, Error> {
    if !cwd.is_absolute() || !cwd.is_dir() {
        return Err(invalid(format!("cwd `{}` is not an absolute path to a directory", cwd.display())));
    }
    let made = (|| -> Result<Workspace, CliError> {
        if let Some(path) = ctx.explicit_workspace() {
            return Ok(Workspace::open(path)?);
        }
        Ok(match super::ctx::project_at(cwd, &ctx.git_ceilings())? {
            Some(user) => {
                Workspace::open_or_create_for_project(&ctx.project_workspace(user.root()), &ctx.template()?, &user)?.0
            }
            None => Workspace::open_or_create(&ctx.default_workspace(), &ctx.template()?)?.0,
        })
    })();
    made.map_err(|e| internal(e.message()))
}

fn new_session(shared: &Shared, request: NewSessionRequest) -> Result<NewSessionResponse, Error> {
    let ws = workspace_for(&*shared.ctx.lock().map_err(internal)?, &request.cwd)?;
    let random = engine::random_u32();
    let agent = AgentId::root_from_random(random);
    let session = Session {
        workspace: ws.layout.root().to_path_buf(),
        agent: agent.clone(),
        random,
        made: false,
        working: false,
    };
    shared.sessions.lock().map_err(internal)?.insert(agent.to_string(), session);
    Ok(NewSessionResponse::new(agent.to_string()))
}

fn load_session(shared: &Shared, request: LoadSessionRequest, cx: &Connection) -> Result<LoadSessionResponse, Error> {
    let ws = workspace_for(&*shared.ctx.lock().map_err(internal)?, &request.cwd)?;
    let named = request.session_id.to_string();
    let agent = agents::resolve(&ws, &named)
        .ok()
        .filter(|a| a.as_str() == named)
        .ok_or_else(|| invalid(format!("no session `{named}` in the workspace of {}", request.cwd.display())))?;
    let (_, entries) = inspect::transcript(&ws, &agent).map_err(internal)?;
    for update in updates::replay(&entries) {
        cx.send_notification(SessionNotification::new(named.clone(), update))?;
    }
    let session = Session { workspace: ws.layout.root().to_path_buf(), agent, random: 0, made: true, working: false };
    shared.sessions.lock().map_err(internal)?.insert(named, session);
    Ok(LoadSessionResponse::new())
}

fn list_sessions(shared: &Shared, request: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
    let cwd = match &request.cwd {
        Some(cwd) => cwd.clone(),
        None => std::env::current_dir().map_err(internal)?,
    };
    let ws = workspace_for(&*shared.ctx.lock().map_err(internal)?, &cwd)?;
    let listed = agents::list(&ws).map_err(internal)?;
    let sessions = listed
        .into_iter()
        .filter_map(|l| l.facts)
        .filter(|f| f.parent.is_none())
        .map(|f| {
            let title = f.name.clone().unwrap_or_else(|| f.id.clone());
            SessionInfo::new(f.id.clone(), cwd.clone()).title(title).updated_at(f.created.clone())
        })
        .collect();
    Ok(ListSessionsResponse::new(sessions))
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
fn begin_turn(
    shared: &Shared,
    request: &PromptRequest,
) -> Result<(Follower, tokio::sync::mpsc::UnboundedReceiver<(String, Record)>), Error> {
    let named = request.session_id.to_string();
    let text = message_of(&request.prompt)?;
    let mut sessions = shared.sessions.lock().map_err(internal)?;
    let session = sessions
        .get_mut(&named)
        .ok_or_else(|| invalid(format!("no session `{named}`: session/new or session/load it first")))?;
    if session.working {
        return Err(invalid(format!(
            "session `{named}` is working on a prompt; session/cancel it or wait for its end"
        )));
    }
    let ws = Workspace::open(&session.workspace).map_err(internal)?;
    let ctx = shared.ctx.lock().map_err(internal)?;
    let rt = ctx.runtime(&ws);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let view = View::Each(Arc::new(move |agent: &str, record: &Record| {
        let _ = tx.send((agent.to_owned(), record.clone()));
    }));
    let follower = if session.made {
        let follower = Follower::start_with_itself(ws.layout.root(), &session.agent, view);
        rt.deposit_choosing(&session.agent, "user", &text, None, None).map_err(internal)?;
        rt.wake(&session.agent).map_err(internal)?;
        follower
    } else {
        // In a project, the agent starts from the checkout as it is, uncommitted changes and all.
        let user = ws.user_repo().map_err(internal)?;
        let author = user.as_ref().and_then(|u| u.identity(&ctx.git_config_files()));
        let from = project::start_point(&ws, None, user.is_some(), author.as_ref()).map_err(internal)?;
        let start = Start {
            message: &text,
            name: None,
            now: Timestamp::now(),
            random: session.random,
            env: &ctx.env,
            project: from.as_ref().map(|(s, _)| s),
            model: None,
            reasoning: None,
            copy_ignored: &[],
            mode: None,
            // (Asking the client, the call waits in the queue for the answer given there.)
            on_ask: Some(shared.on_ask.unwrap_or(domain::question::OnAsk::Wait)),
        };
        let id =
            agents::create_root(&ws, "worker", "default", &start).map_err(|e| internal(CliError::from(e).message()))?;
        if id != session.agent {
            return Err(internal(format!(
                "the agent was made as `{id}`, not as the session's `{named}`; start a new session"
            )));
        }
        session.made = true;
        let follower = Follower::start_from_the_beginning(ws.layout.root(), &id, view);
        rt.launch(&id).map_err(internal)?;
        follower
    };
    session.working = true;
    Ok((follower, rx))
}

/// Streams the session's agent's records as updates until its run ends; the stop
/// reason that end is.
async fn follow_turn(
    shared: &Shared,
    named: &str,
    (follower, mut rx): (Follower, tokio::sync::mpsc::UnboundedReceiver<(String, Record)>),
    cx: &Connection,
) -> StopReason {
    let mut streamed = String::new();
    // The calls the editor was shown, by what they run: where a question points.
    let mut shown: HashMap<(String, String), String> = HashMap::new();
    let reason = loop {
        let Some((agent, record)) = rx.recv().await else { break StopReason::Cancelled };
        if let Record::Asked { question, tool, input, why, .. } = &record
            && shared.on_ask.is_none()
        {
            let call = shown.get(&(tool.clone(), input.to_string())).cloned().unwrap_or_else(|| question.clone());
            let Some(workspace) = shared.workspace_of(named) else { break StopReason::Cancelled };
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
            continue;
        }
        let update = match &record {
            Record::TextDelta { text } => {
                streamed.push_str(text);
                Some(updates::said(text))
            }
            Record::Text { text } => {
                let rest = text.strip_prefix(streamed.as_str()).unwrap_or(text).to_owned();
                streamed.clear();
                (!rest.is_empty()).then(|| updates::said(&rest))
            }
            Record::ToolCall { tool_use_id, name, input } => {
                shown.insert((name.clone(), input.to_string()), tool_use_id.clone());
                Some(updates::call(tool_use_id, name, input))
            }
            Record::ToolResult { tool_use_id, is_error, summary, .. } => {
                Some(updates::result(tool_use_id, *is_error, summary))
            }
            Record::End(end) => {
                break match end {
                    End::FinalResponse { .. } => StopReason::EndTurn,
                    End::BudgetExhausted { .. } => StopReason::MaxTurnRequests,
                    End::Interrupted { .. } => StopReason::Cancelled,
                    End::Busy | End::Error { .. } => StopReason::EndTurn,
                };
            }
            _ => None,
        };
        if let Some(update) = update {
            if cx.send_notification(SessionNotification::new(named.to_owned(), update)).is_err() {
                break StopReason::Cancelled;
            }
        }
    };
    drop(follower);
    if let Ok(mut sessions) = shared.sessions.lock() {
        if let Some(session) = sessions.get_mut(named) {
            session.working = false;
        }
    }
    reason
}

/// `session/cancel`: the session's agent and those below it stopped as `stop` does (on a
/// thread of its own: the connection goes on serving); its turn ends `cancelled`.
fn cancel_turn(shared: &Arc<Shared>, named: &str) {
    let Ok(sessions) = shared.sessions.lock() else { return };
    let Some(session) = sessions.get(named).filter(|s| s.working) else { return };
    let (workspace, agent) = (session.workspace.clone(), session.agent.clone());
    let shared = shared.clone();
    std::thread::spawn(move || {
        if let Ok(ws) = Workspace::open(&workspace) {
            let rt = match shared.ctx.lock() {
                Ok(ctx) => ctx.runtime(&ws),
                Err(_) => return,
            };
            let _ = engine::agents::lifecycle::stop_tree(&ws, &rt, &agent, PATIENCE);
        }
    });
}

/// The client is gone: every session still working is stopped and left loadable.
fn stop_all(shared: &Shared) {
    let Ok(sessions) = shared.sessions.lock() else { return };
    for session in sessions.values().filter(|s| s.working) {
        let (Ok(ws), Ok(ctx)) = (Workspace::open(&session.workspace), shared.ctx.lock()) else { continue };
        let _ = engine::agents::lifecycle::stop_tree(&ws, &ctx.runtime(&ws), &session.agent, PATIENCE);
    }
}
