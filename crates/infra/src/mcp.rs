//! A client of Model Context Protocol servers, on the official SDK (`rmcp`): over the
//! stdin and stdout of a process [`process::serve`] started (in the sandbox, when it
//! has one), or over streamable HTTP. rmcp needs tokio; its runtime lives here and
//! nowhere else: one current-thread runtime per [`Client`], each call blocking on it,
//! so the rest of offshoot stays blocking. Several threads may call at once (tokio's
//! current-thread runtime lets them take turns driving it). What comes back is the
//! protocol's JSON (a tool list, a call's result), read by `domain::mcp`.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;
use tokio::sync::mpsc;

use super::process::{self, Exit, Group, Served, Spec};
use super::sandbox::Jail;

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("cannot start the MCP client's thread: {0}")]
    Runtime(std::io::Error),
    #[error("did not start within {secs} s")]
    StartTimedOut { secs: u64 },
    #[error("did not start: {0}")]
    Start(String),
    #[error("did not start: {0}")]
    Spawn(#[source] super::process::ProcessError),
    #[error("did not start: {0}")]
    Handshake(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("did not answer within {secs} s")]
    TimedOut { secs: u64 },
    #[error("closed the connection (it exited or crashed)")]
    Closed,
    #[error("was interrupted")]
    Interrupted,
    #[error("{0}")]
    Failed(String),
}

impl McpError {
    /// Whether the session is of no more use (the server is to be started again).
    pub fn ends_session(&self) -> bool {
        !matches!(self, McpError::Failed(_))
    }
}

/// A stdio server to start: the program, where and with what, in which jail, and
/// the file its stderr goes to.
pub struct Program {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub sandbox: Option<Arc<Jail>>,
    pub log: PathBuf,
}

/// Where a server's requests go over HTTP.
pub struct HttpTarget {
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// A bearer token, sent as `Authorization: Bearer …`.
    pub bearer: Option<String>,
}

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A thread of its own running a current-thread tokio runtime, on which every
/// session's work happens: servers are started there (a sandboxed server dies with
/// the thread that started it), and callers on any thread wait for the answers.
pub struct Client {
    jobs: Option<mpsc::UnboundedSender<Job>>,
    handle: tokio::runtime::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// One started server: the protocol session and, for stdio, the process it talks to
/// (killed with its group when the session is dropped).
pub struct Session {
    handle: tokio::runtime::Handle,
    service: Option<RunningService<RoleClient, ClientConfig>>,
    process: Option<Served>,
}

impl Session {
    /// The process serving this session, for a stdio server.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Served::pid)
    }

    fn peer(&self) -> Result<rmcp::Peer<RoleClient>, McpError> {
        self.service.as_ref().map(|s| s.peer().clone()).ok_or(McpError::Closed)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _entered = self.handle.enter();
        self.service.take();
        self.process.take();
    }
}

fn client_config() -> ClientConfig {
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("offshoot", env!("CARGO_PKG_VERSION")))
}

/// How often a waiting caller asks whether it should go on waiting.
const POLL: Duration = Duration::from_millis(50);

impl Client {
    pub fn new() -> Result<Client, McpError> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(McpError::Runtime)?;
        let handle = rt.handle().clone();
        let (jobs, mut queue) = mpsc::unbounded_channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("mcp".into())
            .spawn(move || {
                rt.block_on(async move {
                    while let Some(job) = queue.recv().await {
                        tokio::spawn(job);
                    }
                });
            })
            .map_err(McpError::Runtime)?;
        Ok(Client { jobs: Some(jobs), handle, thread: Some(thread) })
    }

    /// Runs `work` on the client's thread and waits for its answer while `go_on()`
    /// says to (an interrupted caller returns at once; the work ends on its own).
    fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
        go_on: &dyn Fn() -> bool,
    ) -> Result<T, McpError> {
        let (answer, answered) = std::sync::mpsc::channel();
        let job: Job = Box::pin(async move {
            let _ = answer.send(work.await);
        });
        self.jobs.as_ref().and_then(|j| j.send(job).ok()).ok_or(McpError::Closed)?;
        loop {
            match answered.recv_timeout(POLL) {
                Ok(value) => return Ok(value),
                Err(RecvTimeoutError::Timeout) if go_on() => {}
                Err(RecvTimeoutError::Timeout) => return Err(McpError::Interrupted),
                Err(RecvTimeoutError::Disconnected) => return Err(McpError::Closed),
            }
        }
    }

    /// Starts `program` and speaks MCP over its stdin and stdout: the handshake,
    /// within `startup`.
    pub fn stdio(&self, program: Program, startup: Duration, go_on: &dyn Fn() -> bool) -> Result<Session, McpError> {
        let handle = self.handle.clone();
        let work = async move {
            let args: Vec<&OsStr> = program.args.iter().map(OsString::as_os_str).collect();
            let spec = Spec {
                program: &program.program,
                args: &args,
                cwd: &program.cwd,
                env: &program.env,
                group: Group::Own,
                stdin: None,
                sandbox: program.sandbox.as_deref().map(Jail::helper),
                pgid_record: None,
            };
            let mut process = process::serve(&spec, Some(&program.log)).map_err(McpError::Spawn)?;
            let (stdin, stdout) = process.pipes().ok_or_else(|| McpError::Start("its pipes are gone".into()))?;
            let pipes = (|| -> std::io::Result<_> {
                let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout)?;
                let writer = tokio::net::unix::pipe::Sender::from_owned_fd(stdin)?;
                Ok((reader, writer))
            })()
            .map_err(|e| McpError::Start(format!("cannot use its pipes: {e}")))?;
            let service = match tokio::time::timeout(startup, client_config().serve(pipes)).await {
                Err(_) => return Err(McpError::StartTimedOut { secs: startup.as_secs() }),
                Ok(Err(e)) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let command = program.program.display();
                    return Err(match process.exited() {
                        Some(Exit::Code(127)) => {
                            McpError::Start(format!("its command `{command}` was not found (exit code 127)"))
                        }
                        Some(Exit::Code(126)) => McpError::Start(format!(
                            "its command `{command}` cannot be run (exit code 126: not executable)"
                        )),
                        Some(exit) => McpError::Start(format!("it ended ({exit}) before the handshake finished")),
                        None => McpError::Handshake(Box::new(e)),
                    });
                }
                Ok(Ok(service)) => service,
            };
            Ok(Session { handle, service: Some(service), process: Some(process) })
        };
        self.run(work, go_on)?
    }

    /// Speaks MCP to `target` over streamable HTTP: the handshake, within `startup`.
    pub fn http(&self, target: HttpTarget, startup: Duration, go_on: &dyn Fn() -> bool) -> Result<Session, McpError> {
        install_crypto();
        let url = target.url.clone();
        let mut headers = HashMap::new();
        for (name, value) in &target.headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| McpError::Start(format!("`{name}` is not a header's name")))?;
            let value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|_| McpError::Start(format!("the value of header `{name}` cannot be sent")))?;
            headers.insert(name, value);
        }
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| McpError::Start(format!("cannot make an HTTP client: {e}")))?;
        let mut config = StreamableHttpClientTransportConfig::with_uri(target.url).custom_headers(headers);
        if let Some(token) = target.bearer {
            config = config.auth_header(token);
        }
        let handle = self.handle.clone();
        let work = async move {
            let transport = StreamableHttpClientTransport::with_client(http, config);
            match tokio::time::timeout(startup, client_config().serve(transport)).await {
                Err(_) => Err(McpError::StartTimedOut { secs: startup.as_secs() }),
                // (The transport's own words name its Rust types: what went wrong is
                // at the bottom of the chain.)
                Ok(Err(e)) => Err(McpError::Start(format!("cannot reach {url}: {}", unwrapped(&e)))),
                Ok(Ok(service)) => Ok(Session { handle, service: Some(service), process: None }),
            }
        };
        self.run(work, go_on)?
    }

    /// Every tool the server lists (each page), as the protocol's JSON.
    pub fn list_tools(
        &self,
        session: &Session,
        limit: Duration,
        go_on: &dyn Fn() -> bool,
    ) -> Result<Vec<Value>, McpError> {
        let peer = session.peer()?;
        let work = async move { tokio::time::timeout(limit, peer.list_all_tools()).await };
        match self.run(work, go_on)? {
            Err(_) => Err(McpError::StartTimedOut { secs: limit.as_secs() }),
            Ok(Err(e)) => Err(service_error(e)),
            Ok(Ok(tools)) => Ok(tools.iter().map(|t| serde_json::to_value(t).unwrap_or(Value::Null)).collect()),
        }
    }

    /// Calls tool `tool` with `arguments` (a JSON object) and returns the result as
    /// the protocol's JSON (`content`, `structuredContent`, `isError`).
    pub fn call(
        &self,
        session: &Session,
        tool: &str,
        arguments: &Value,
        limit: Duration,
        go_on: &dyn Fn() -> bool,
    ) -> Result<Value, McpError> {
        let peer = session.peer()?;
        let mut params = CallToolRequestParams::new(tool.to_owned());
        match arguments {
            Value::Object(map) => params.arguments = Some(map.clone()),
            Value::Null => {}
            other => return Err(McpError::Failed(format!("the arguments must be a JSON object, not `{other}`"))),
        }
        let work = async move { tokio::time::timeout(limit, peer.call_tool(params)).await };
        match self.run(work, go_on)? {
            Err(_) => Err(McpError::TimedOut { secs: limit.as_secs() }),
            Ok(Err(e)) => Err(service_error(e)),
            Ok(Ok(result)) => Ok(serde_json::to_value(&result).unwrap_or(Value::Null)),
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // The queue closes, the thread's loop ends, and its runtime drops what is left.
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What actually failed in a handshake (a refused connection, an HTTP status): the
/// deepest cause of the transport's error, whose own words name its Rust types.
fn unwrapped(e: &rmcp::service::ClientInitializeError) -> String {
    let mut deepest: &(dyn std::error::Error + 'static) = match e {
        rmcp::service::ClientInitializeError::TransportError { error, .. } => &*error.error,
        other => other,
    };
    while let Some(next) = deepest.source() {
        deepest = next;
    }
    deepest.to_string()
}

fn service_error(e: rmcp::ServiceError) -> McpError {
    match e {
        rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_) => McpError::Closed,
        rmcp::ServiceError::Timeout { timeout } => McpError::TimedOut { secs: timeout.as_secs() },
        rmcp::ServiceError::McpError(data) => McpError::Failed(format!("error {}: {}", data.code.0, data.message)),
        other => McpError::Failed(other.to_string()),
    }
}

/// reqwest's TLS takes the process's rustls provider: ring, already built for ureq.
fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
