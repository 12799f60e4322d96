//! `offshoot acp`: an Agent Client Protocol agent on stdin/stdout, for editors (Zed,
//! JetBrains, Neovim, Emacs) and harnesses that drive agents through it. The only
//! module that knows the `agent-client-protocol` crate. A client of the drivers, as the
//! chat is: a session is an agent (its id is the agent's id), a prompt is the agent's
//! first message or one left in its inbox, and what the agent does comes back from its
//! events file as session updates.

mod agents_of;
mod auth;
mod children;
mod modes;
mod permission;
mod servers;
mod sessions;
mod turn;
mod updates;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::{
    AgentCapabilities, AuthenticateRequest, CancelNotification, CloseSessionRequest, ForkSessionRequest,
    Implementation, InitializeRequest, InitializeResponse, ListSessionsRequest, LoadSessionRequest, McpCapabilities,
    NewSessionRequest, PromptCapabilities, PromptRequest, PromptResponse, ResumeSessionRequest, SessionCapabilities,
    SessionCloseCapabilities, SessionForkCapabilities, SessionListCapabilities, SessionResumeCapabilities,
    SetSessionConfigOptionRequest, SetSessionModeRequest,
};
use agent_client_protocol::{Agent, Client, Error, Stdio};

use super::{CliError, Ctx};

type Connection = agent_client_protocol::v1::ConnectionTo<Client>;

struct Shared {
    /// (Behind a lock: the context's output is not to be shared between threads.)
    ctx: Mutex<Ctx>,
    /// `--on-ask`: `None` puts each question to the client.
    on_ask: Option<domain::question::OnAsk>,
    /// `--copy`: sessions keep their work to themselves unless set otherwise.
    copy: bool,
    /// `--directories`: a cwd in no repository is a project of its own.
    directories: bool,
    /// The client takes `compaction_update`s (it said so at `initialize`).
    compaction: AtomicBool,
    /// The client takes sub-sessions (the unstable `subagents` capability).
    subagents: AtomicBool,
    /// Why the last session was refused `auth_required` (a key not set), for
    /// `authenticate` to say again.
    missing_key: Mutex<Option<String>>,
    sessions: sessions::Table,
}

/// How `offshoot acp` was asked to serve (its flags).
pub(crate) struct Options {
    pub(crate) on_ask: Option<domain::question::OnAsk>,
    pub(crate) copy: bool,
    pub(crate) directories: bool,
}

/// Serves ACP on stdin/stdout until the client closes it; what still works then is
/// stopped, committed as a stop leaves it, and loadable later.
pub(crate) fn serve(ctx: Ctx, options: Options) -> Result<(), CliError> {
    let Options { on_ask, copy, directories } = options;
    let shared = Arc::new(Shared {
        ctx: Mutex::new(ctx),
        on_ask,
        copy,
        directories,
        compaction: AtomicBool::new(false),
        subagents: AtomicBool::new(false),
        missing_key: Mutex::new(None),
        sessions: sessions::Table::default(),
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| CliError::runtime(format!("cannot start the ACP runtime: {e}")))?;
    let served = runtime.block_on(connect(shared.clone()));
    agents_of::stop_all(&shared);
    served.map_err(|e| CliError::runtime(format!("the ACP connection failed: {e}")))
}

async fn connect(shared: Arc<Shared>) -> Result<(), Error> {
    let s = || shared.clone();
    let (s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12) =
        (s(), s(), s(), s(), s(), s(), s(), s(), s(), s(), s(), s());
    Agent
        .v1()
        .name("offshoot")
        .on_receive_request(
            async move |request: InitializeRequest, responder, _cx| {
                let compaction = request.client_capabilities.session.as_ref().is_some_and(|s| s.compaction.is_some());
                s1.compaction.store(compaction, Ordering::Relaxed);
                s1.subagents.store(request.client_capabilities.subagents.is_some(), Ordering::Relaxed);
                responder.respond(initialized(request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: AuthenticateRequest, responder, _cx| {
                responder.respond_with_result(auth::authenticate(&s12, &request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest, responder, _cx| {
                responder.respond_with_result(sessions::new(&s2, request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: LoadSessionRequest, responder, cx| {
                responder.respond_with_result(sessions::load(&s3, request, &cx))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ResumeSessionRequest, responder, _cx| {
                responder.respond_with_result(sessions::resume(&s7, request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ForkSessionRequest, responder, _cx| {
                responder.respond_with_result(sessions::fork(&s8, request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: CloseSessionRequest, responder, _cx| {
                responder.respond_with_result(sessions::close(&s9, request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: SetSessionConfigOptionRequest, responder, _cx| {
                responder.respond_with_result(sessions::set_option(&s10, request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: SetSessionModeRequest, responder, _cx| {
                responder.respond_with_result(modes::set(&s11, request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ListSessionsRequest, responder, _cx| {
                responder.respond_with_result(sessions::list(&s4, request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder, cx: Connection| {
                turn::catch_up(&s5, &request.session_id.to_string()).await;
                let turn = match turn::begin(&s5, &request) {
                    Ok(turn) => turn,
                    Err(e) => return responder.respond_with_error(e),
                };
                let shared = s5.clone();
                cx.spawn({
                    let cx = cx.clone();
                    async move {
                        let ended = turn::follow(&shared, &request.session_id.to_string(), turn, &cx).await;
                        responder.respond_with_result(ended.map(PromptResponse::new))
                    }
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |cancel: CancelNotification, _cx| {
                turn::cancel(&s6, &cancel.session_id.to_string());
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
        .mcp_capabilities(McpCapabilities::new().http(true))
        .session_capabilities(
            SessionCapabilities::new()
                .list(SessionListCapabilities::new())
                .resume(SessionResumeCapabilities::new())
                .close(SessionCloseCapabilities::new())
                .fork(SessionForkCapabilities::new()),
        );
    InitializeResponse::new(request.protocol_version)
        .agent_capabilities(capabilities)
        .auth_methods(auth::methods())
        .agent_info(Implementation::new("offshoot", env!("CARGO_PKG_VERSION")))
}

/// A line for the editor's log of the agent: its stderr.
fn log(line: &str) {
    super::out::Out::from_any_thread(false, &format!("offshoot: {line}"), &serde_json::Value::Null);
}

/// A JSON-RPC "invalid params" error saying `message`.
fn invalid(message: impl Into<String>) -> Error {
    Error::new(agent_client_protocol::ErrorCode::INVALID_PARAMS, message.into())
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::new(agent_client_protocol::ErrorCode::INTERNAL_ERROR, e.to_string())
}
