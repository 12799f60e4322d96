//! `offshoot serve`: the workspace over HTTP on one port, for a browser (the web view,
//! embedded here) or a script. It reads what the drivers write — refs, transcripts, step
//! records, events files — and does what the CLI's verbs do for its writes, so drivers
//! need no server and a crash of it loses nothing. Every request carries the token
//! kept in the data root; a write must come from the page's own origin.

mod api;
mod feed;
mod http;
mod page;

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{CliError, Ctx};
use engine::store::workspace::Workspace;
use http::{Refused, Request, Response};

/// The most connections served at once (an event stream holds one while it is open).
const CONNECTIONS_MAX: usize = 128;
/// How long a request may take to arrive, all of it.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an answer (an event stream's too) may wait for its client to read it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// What the handlers share.
pub(super) struct Server {
    /// (Behind a lock: a write makes a runtime from it, one at a time.)
    ctx: Mutex<Ctx>,
    /// The workspaces served, the first the one a request that names none means.
    sites: Vec<Site>,
    token: String,
    /// The address served, and whether it is a loopback one (then the `Host` a request
    /// names must be one too: a page of another site cannot reach it by a DNS name).
    addr: SocketAddr,
    feed: feed::Feed,
    redact: infra::redact::Redactor,
}

/// One workspace served: the key requests name it by (`?ws=KEY`), where it is, and its
/// agents' states, kept between requests.
pub(super) struct Site {
    key: String,
    root: PathBuf,
    states: Mutex<engine::ops::inspect::StatesKept>,
}

/// How `serve` was asked to run.
pub(crate) struct Options {
    pub(crate) listen: SocketAddr,
    pub(crate) print_token: bool,
    pub(crate) rotate_token: bool,
    /// Every `-w` given: with more than one, those are served.
    pub(crate) workspaces: Vec<PathBuf>,
    /// Every workspace under the data root.
    pub(crate) all: bool,
}

pub(crate) fn run(ctx: Ctx, options: Options) -> Result<(), CliError> {
    let token_file = ctx.data_root.join("serve-token");
    if options.print_token && !options.rotate_token {
        ctx.out.line(&token(&token_file, false)?);
        return Ok(());
    }
    let served = served(&ctx, &options)?;
    let token = token(&token_file, options.rotate_token)?;
    // Every secret value any of their configs names is hidden from every answer.
    let mut secrets = Vec::new();
    for (_, ws) in &served {
        let (_, config) = ws.config("default").map_err(CliError::from)?;
        secrets.extend(domain::tool_env::secret_values(ctx.env.vars(), &config));
    }
    let redact = infra::redact::Redactor::new(secrets);
    let sources: Vec<(String, PathBuf)> =
        served.iter().map(|(key, ws)| (key.clone(), ws.layout.root().join("steps"))).collect();
    let feed = feed::Feed::start(sources, redact.clone())
        .map_err(|e| CliError::runtime(format!("cannot watch the workspace's events: {e}")))?;
    let listener = TcpListener::bind(options.listen)
        .map_err(|e| CliError::usage(format!("cannot listen on {}: {e}", options.listen)))?;
    let addr = listener.local_addr().map_err(|e| CliError::runtime(format!("the listening socket: {e}")))?;
    let url = format!("http://{addr}/?token={token}");
    ctx.out.line(&url);
    let roots: Vec<String> = served.iter().map(|(_, ws)| ws.layout.root().display().to_string()).collect();
    ctx.out.progress(&format!(
        "· serving {} on {addr}; the token is in {} (`offshoot serve --token` prints it again)",
        roots.join(", "),
        token_file.display()
    ));
    let sites = served
        .into_iter()
        .map(|(key, ws)| Site { key, root: ws.layout.root().to_owned(), states: Mutex::default() })
        .collect();
    let server = Arc::new(Server { sites, ctx: Mutex::new(ctx), token, addr, feed, redact });
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        if open.load(Ordering::Relaxed) >= CONNECTIONS_MAX {
            let _ = http::write_response(&mut stream, &Response::error(503, "too many connections at once"));
            continue;
        }
        let (server, slot) = (server.clone(), Slot::take(&open));
        // (The slot goes back when the thread ends, a panic included, or was not made.)
        let _ = std::thread::Builder::new().name("serve-conn".into()).spawn(move || {
            let _slot = slot;
            serve_one(&server, stream);
        });
    }
    Ok(())
}

/// The workspaces to serve, each with its key: every one under the data root (`--all`),
/// those `-w` names when it is given more than once, else the one the context selects
/// (made if it is the default and missing). A key is the directory's name (made unique
/// with `-2`, `-3`… when two share one).
fn served(ctx: &Ctx, options: &Options) -> Result<Vec<(String, Workspace)>, CliError> {
    let roots: Vec<PathBuf> = if options.all {
        let under = ctx.data_root.join("workspaces");
        let mut roots: Vec<PathBuf> = std::fs::read_dir(&under)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| ctx.looks_made(p))
            .collect();
        roots.sort();
        roots
    } else if options.workspaces.len() > 1 {
        // (Absolute, as every `-w` is taken: the drivers it starts run elsewhere.)
        options.workspaces.iter().cloned().map(crate::cli::ctx::real).collect()
    } else {
        let ws = ctx.workspace_making()?;
        return Ok(vec![(key_of(ws.layout.root(), &[]), ws)]);
    };
    let mut served: Vec<(String, Workspace)> = Vec::new();
    for root in roots {
        if served.iter().any(|(_, ws)| ws.layout.root() == root) {
            continue;
        }
        let ws = match Workspace::open(&root) {
            Ok(ws) => ws,
            // (With `--all`, one that does not open is passed over, not the end of all.)
            Err(e) if options.all => {
                ctx.out.progress(&format!("· not served: {} ({e})", root.display()));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let taken: Vec<&str> = served.iter().map(|(k, _)| k.as_str()).collect();
        served.push((key_of(ws.layout.root(), &taken), ws));
    }
    if served.is_empty() {
        let under = ctx.data_root.join("workspaces");
        return Err(CliError::usage(format!("`--all`: there is no workspace under {} to serve", under.display()))
            .hint("the first `offshoot prompt \"…\"` makes one"));
    }
    Ok(served)
}

/// The key of the workspace at `root`: its directory's name, made unique among `taken`.
fn key_of(root: &Path, taken: &[&str]) -> String {
    let name = root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "workspace".into());
    let name: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    let mut key = name.clone();
    let mut n = 1;
    while taken.contains(&key.as_str()) {
        n += 1;
        key = format!("{name}-{n}");
    }
    key
}

/// One of the [`CONNECTIONS_MAX`] connections, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(open: &Arc<AtomicUsize>) -> Slot {
        open.fetch_add(1, Ordering::Relaxed);
        Slot(open.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The token in `file`, made (32 random bytes, hex) when there is none or with `rotate`.
fn token(file: &Path, rotate: bool) -> Result<String, CliError> {
    if !rotate && let Ok(text) = std::fs::read_to_string(file) {
        let text = text.trim();
        if text.len() >= 32 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            // (Kept the owner's alone, whoever made it otherwise.)
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600));
            return Ok(text.to_owned());
        }
    }
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(|e| CliError::runtime(format!("no random bytes for a token: {e}")))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let written = file.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| {
        use std::os::unix::fs::OpenOptionsExt;
        let new = file.with_extension("new");
        let _ = std::fs::remove_file(&new);
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&new)?;
        f.write_all(format!("{token}\n").as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&new, file)
    });
    written.map_err(|e| CliError::runtime(format!("cannot keep the token in {}: {e}", file.display())))?;
    Ok(token)
}

fn serve_one(server: &Server, stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let Ok(mut out) = stream.try_clone() else { return };
    let mut input = BufReader::new(http::Deadline { stream, until: std::time::Instant::now() + READ_TIMEOUT });
    let response = match http::read_request(&mut input) {
        Ok(None) => return,
        Err(Refused(status, why)) => Response::error(status, why),
        // (The token is asked for before a body is read.)
        Ok(Some(mut request)) => match checked(server, &request).and_then(|()| {
            http::read_body(&mut input, &mut request).map_err(|Refused(status, why)| Response::error(status, why))
        }) {
            Err(refused) => refused,
            Ok(()) if request.segments.first().map(String::as_str) == Some("events") => {
                return api::events(server, &request, &mut out);
            }
            Ok(()) => api::route(server, &request),
        },
    };
    let _ = http::write_response(&mut out, &response);
}

/// What every request must pass: a `Host` this server answers to (a loopback name when
/// it listens on loopback), the token, and for a write an `Origin` (when a browser
/// sends one) that is this server.
fn checked(server: &Server, request: &Request) -> Result<(), Response> {
    let host = request.header("host").unwrap_or_default();
    if server.addr.ip().is_loopback() && !loopback_host(host, server.addr) {
        return Err(Response::error(
            421,
            format!("`Host: {host}` is not this server (127.0.0.1:{})", server.addr.port()),
        ));
    }
    let bearer = request.header("authorization").and_then(|a| a.strip_prefix("Bearer "));
    let given = bearer.or(request.param("token")).unwrap_or_default();
    if !same(given.as_bytes(), server.token.as_bytes()) {
        return Err(Response::error(
            401,
            "a token is needed: `Authorization: Bearer …` or `?token=…` (`offshoot serve --token` prints it)",
        ));
    }
    if request.method != "GET"
        && let Some(origin) = request.header("origin")
        && origin != format!("http://{host}")
    {
        return Err(Response::error(
            403,
            format!("a write from `{origin}` is refused: only this server's own page writes"),
        ));
    }
    Ok(())
}

/// Whether `host` names the loopback server at `addr` (a browser leaves port 80 out).
fn loopback_host(host: &str, addr: SocketAddr) -> bool {
    let own = match addr.ip() {
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    let port = addr.port();
    ["127.0.0.1", "localhost", "[::1]", own.as_str()]
        .iter()
        .any(|name| host == format!("{name}:{port}") || (port == 80 && host == *name))
}

/// Compares in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
