//! ssh and https remotes. libgit2 is built here without libssh2 and without TLS (no C
//! library to build or install for either), so both are subtransports of ours under its
//! smart protocol: libgit2 speaks git's protocol, these only carry its bytes.
//!
//! - ssh runs the user's `ssh` as git does — `ssh [-p port] [user@]host "git-upload-pack
//!   '<path>'"`, or `GIT_SSH_COMMAND` / `GIT_SSH` when set — with the user's keys, agent,
//!   known hosts and config, and its words on our stderr; the connection is its pipes.
//! - https is stateless: each exchange is one request through ureq (rustls): `GET
//!   <url>/info/refs?service=…` for the advertisement, then `POST <url>/git-upload-pack`
//!   (or `git-receive-pack`) carrying what libgit2 wrote, whose reply is what libgit2
//!   reads. Credentials come from the URL, else from `git credential` (the user's
//!   helpers, which are told whether they worked). The roots trusted are Mozilla's, or
//!   those in `GIT_SSL_CAINFO` / `SSL_CERT_FILE` when set.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use git2::transport::{Service, SmartSubtransport, SmartSubtransportStream, Transport};

use crate::process::{self, Group, Served, Spec};

/// The scheme scp-like addresses (`host:path`) are handed to libgit2 under: the path
/// after the first `/` is sent as written (relative to the login's home, or absolute).
const SCP_SCHEME: &str = "ssh+scp";
const SCP: &str = "ssh+scp://";

/// The user's environment, which their `ssh` and `git credential` run with (handed over by
/// the cli, which alone reads it).
static ENVIRONMENT: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

/// Hands over the user's environment for ssh, credential helpers and the roots to trust
/// (the first call counts).
pub fn set_environment(vars: Vec<(String, String)>) {
    let _ = ENVIRONMENT.set(vars);
}

fn environment() -> &'static [(String, String)] {
    ENVIRONMENT.get().map_or(&[], Vec::as_slice)
}

/// A variable of the user's environment, if set and not empty.
fn var(name: &str) -> Option<&'static str> {
    environment().iter().find(|(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.as_str())
}

/// The most of a ref advertisement read over https (a thousand agents' refs are a few
/// megabytes).
const ADVERTISEMENT_MAX: u64 = 256 << 20;

static CONNECT_MS: AtomicU64 = AtomicU64::new(0);
static IO_MS: AtomicU64 = AtomicU64::new(0);

/// Bounds how long ssh and https wait to connect and for each read or write (none
/// until set).
pub(crate) fn set_timeouts(connect: Duration, io: Duration) {
    CONNECT_MS.store(connect.as_millis().max(1) as u64, Ordering::Relaxed);
    IO_MS.store(io.as_millis().max(1) as u64, Ordering::Relaxed);
}

fn bound(ms: &AtomicU64) -> Option<Duration> {
    match ms.load(Ordering::Relaxed) {
        0 => None,
        ms => Some(Duration::from_millis(ms)),
    }
}

/// Makes ssh and https reachable: called before every connection (registers once);
/// why they cannot be, if libgit2 refused them.
#[expect(unsafe_code, reason = "libgit2's transport registry is a C global without a lock")]
pub(crate) fn register() -> Result<(), String> {
    static REGISTERED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            // SAFETY: the registry is written here only, once, and read when a remote
            // connects; every connection of ours calls this first, so none reads while it is
            // written (`get_or_init` blocks them until it returns). libgit2 takes schemes
            // (it adds the `://`).
            unsafe {
                for scheme in ["ssh", SCP_SCHEME] {
                    git2::transport::register(scheme, |remote| Transport::smart(remote, false, Ssh))
                        .map_err(|e| format!("register {scheme}: {}", e.message()))?;
                }
                git2::transport::register("https", |remote| {
                    let agent = agent().map_err(net_error)?;
                    Transport::smart(remote, true, Https { credential: Arc::default(), agent })
                })
                .map_err(|e| format!("register https: {}", e.message()))
            }
        })
        .clone()
}

/// An scp-like `url` (`[user@]host:path`, `[user@][v6 address]:path`: no scheme, no path
/// before the colon) split at the colon that ends its host.
fn scp_parts(url: &str) -> Option<(&str, &str)> {
    if url.contains("://") || url.starts_with('/') || url.starts_with('.') {
        return None;
    }
    let (host, path) = match url.find("]:") {
        Some(i) if url[..i].contains('[') => (&url[..=i], &url[i + 2..]),
        _ => url.split_once(':')?,
    };
    (!host.is_empty() && !host.contains('/')).then_some((host, path))
}

/// Whether `url` is scp-like (`[user@]host:path`).
pub(crate) fn is_scp_like(url: &str) -> bool {
    scp_parts(url).is_some()
}

/// The URL libgit2 is handed for `url`: an scp-like one in a form it finds our ssh by.
pub(crate) fn wire_url(url: &str) -> String {
    match scp_parts(url) {
        Some((host, path)) => format!("{SCP}{host}/{path}"),
        None => url.to_owned(),
    }
}

/// Why `url`, an ssh (`ssh://`, scp-like) or https one, cannot be reached as written, if
/// it cannot: a host ssh would read as an option, a port that is no number, no path, a
/// control character.
pub fn problem(url: &str) -> Option<String> {
    let wire = wire_url(url);
    if wire.starts_with("ssh://") || wire.starts_with(SCP) {
        return SshTarget::parse(&wire).err();
    }
    wire.starts_with("https://").then(|| HttpsTarget::parse(&wire).err()).flatten()
}

/// `url` fit to show: a password in it is left out, and a user name that could be a
/// token (`https://ghp_…@host`).
pub fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority = rest.split('/').next().unwrap_or(rest);
    let Some((userinfo, host)) = authority.rsplit_once('@') else { return url.to_owned() };
    let user = userinfo.split(':').next().unwrap_or("");
    let user = if crate::redact::could_be_secret(user) { "***" } else { user };
    let password = if userinfo.contains(':') { ":***" } else { "" };
    format!("{scheme}://{user}{password}@{host}{}", &rest[authority.len()..])
}

/// Refuses a control character (a line break would add lines to what a credential
/// helper is told; a NUL would cut an argument short) in `what` of an address.
fn plain(what: &str, text: &str) -> Result<(), String> {
    match text.chars().any(char::is_control) {
        true => Err(format!("its {what} holds a control character")),
        false => Ok(()),
    }
}

fn net_error(message: impl std::fmt::Display) -> git2::Error {
    git2::Error::new(git2::ErrorCode::GenericError, git2::ErrorClass::Net, message.to_string())
}

fn service_name(service: Service) -> &'static str {
    match service {
        Service::UploadPackLs | Service::UploadPack => "git-upload-pack",
        Service::ReceivePackLs | Service::ReceivePack => "git-receive-pack",
    }
}

/// Where an ssh remote is: `[user@]host`, a port, and the path as the remote command
/// gets it.
#[derive(Debug, PartialEq, Eq)]
struct SshTarget {
    host: String,
    port: Option<u16>,
    path: String,
}

impl SshTarget {
    fn parse(url: &str) -> Result<SshTarget, String> {
        let (authority, path) = if let Some(rest) = url.strip_prefix(SCP) {
            let (host, path) = rest.split_once('/').ok_or("no path")?;
            (host, path.to_owned())
        } else if let Some(rest) = url.strip_prefix("ssh://") {
            let (authority, path) = rest.split_once('/').ok_or("no path")?;
            let path = percent_decode(path)?;
            // `ssh://host/~/x` and `ssh://host/~user/x` are relative to a home, as in git.
            let path = if path.starts_with('~') { path } else { format!("/{path}") };
            (authority, path)
        } else {
            return Err("not an ssh URL".into());
        };
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((user, hostport)) => (Some(user), hostport),
            None => (None, authority),
        };
        let (host, port) = match hostport.strip_prefix('[') {
            Some(bracketed) => {
                let (inside, after) = bracketed.split_once(']').ok_or("a `[` without its `]`")?;
                match after {
                    "" => (inside, None),
                    after => (inside, Some(after.strip_prefix(':').ok_or("something after the `]`")?)),
                }
            }
            None => match hostport.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (hostport, None),
            },
        };
        let port = port.map(|p| p.parse::<u16>().map_err(|_| "its port is not a number".to_owned())).transpose()?;
        plain("host", authority)?;
        plain("path", &path)?;
        // What `ssh` would read as an option, and a path the remote git would (git
        // refuses both too).
        if host.is_empty() || host.starts_with('-') || user.is_some_and(|u| u.is_empty() || u.starts_with('-')) {
            return Err(format!("host `{hostport}` is not one ssh may be given"));
        }
        if path.is_empty() {
            return Err("no path".into());
        }
        if path.starts_with('-') {
            return Err(format!("path `{path}` would read as an option"));
        }
        let host = match user {
            Some(user) => format!("{user}@{host}"),
            None => host.to_owned(),
        };
        Ok(SshTarget { host, port, path })
    }

    /// The command run on the remote host: the service, the path single-quoted for its
    /// shell (`'` and `!` outside the quotes, as git quotes them, for csh's history too).
    fn command(&self, service: Service) -> String {
        let quoted = self.path.replace('\'', "'\\''").replace('!', "'\\!'");
        format!("{} '{quoted}'", service_name(service))
    }
}

fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).ok_or("a `%` without two hex digits")?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| format!("`%{hex}` is no escape"))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 once decoded".into())
}

struct Ssh;

impl SmartSubtransport for Ssh {
    fn action(&self, url: &str, service: Service) -> Result<Box<dyn SmartSubtransportStream>, git2::Error> {
        let target = SshTarget::parse(url).map_err(|e| net_error(format!("{}: {e}", shown(url))))?;
        let mut args: Vec<String> = Vec::new();
        if let Some(port) = target.port {
            args.extend(["-p".into(), port.to_string()]);
        }
        args.extend([target.host.clone(), target.command(service)]);
        // As git: `GIT_SSH_COMMAND` through the shell, `GIT_SSH` as a program, else `ssh`.
        let program = match (var("GIT_SSH_COMMAND"), var("GIT_SSH")) {
            (Some(command), _) => {
                let mut shell = vec!["-c".to_owned(), format!("{command} \"$@\""), "ssh".to_owned()];
                shell.append(&mut args);
                args = shell;
                "sh".to_owned()
            }
            (None, Some(program)) => program.to_owned(),
            (None, None) => "ssh".to_owned(),
        };
        let argv: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
        let spec = Spec {
            program: std::path::Path::new(&program),
            args: &argv,
            cwd: std::path::Path::new("/"),
            env: environment(),
            // Ours when the user is at a terminal, so a passphrase prompt can read it;
            // else a group of its own, all of it killed with the connection
            // (`GIT_SSH_COMMAND`'s shell may leave ssh a child of its own).
            group: if at_terminal() { Group::Terminal } else { Group::Own },
            stdin: None,
            sandbox: None,
            pgid_record: None,
        };
        let mut served = process::serve(&spec, None).map_err(net_error)?;
        let (input, output) = served.pipes().ok_or_else(|| net_error("ssh has no pipes"))?;
        Ok(Box::new(SshStream { served, input: input.into(), output: output.into(), host: target.host }))
    }

    fn close(&self) -> Result<(), git2::Error> {
        Ok(())
    }
}

/// One ssh connection: the process's stdin and stdout (it is killed when dropped).
struct SshStream {
    served: Served,
    input: std::fs::File,
    output: std::fs::File,
    host: String,
}

impl Read for SshStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        ready(&self.output, libc::POLLIN, &self.host)?;
        let n = self.output.read(buf)?;
        if n == 0 {
            // Ended before libgit2 had what it wanted: say how ssh ended (its words are
            // on stderr already).
            for _ in 0..50 {
                if let Some(exit) = self.served.exited() {
                    if !exit.success() {
                        return Err(std::io::Error::other(format!("ssh to {} ended with {exit}", self.host)));
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(n)
    }
}

impl Write for SshStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        ready(&self.input, libc::POLLOUT, &self.host)?;
        self.input.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.input.flush()
    }
}

/// Whether our stdin is a terminal (a user who can answer ssh's prompts).
#[expect(unsafe_code, reason = "isatty(3) on descriptor 0 reads no memory of ours")]
fn at_terminal() -> bool {
    // SAFETY: isatty takes an integer and only asks the kernel about it.
    unsafe { libc::isatty(0) == 1 }
}

/// Waits until `file` can be read or written (`events`), at most the io bound.
#[expect(unsafe_code, reason = "poll(2) on one descriptor we own, with a pollfd on our stack")]
fn ready(file: &impl AsRawFd, events: libc::c_short, host: &str) -> std::io::Result<()> {
    let Some(bound) = bound(&IO_MS) else { return Ok(()) };
    let mut fd = libc::pollfd { fd: file.as_raw_fd(), events, revents: 0 };
    let ms = libc::c_int::try_from(bound.as_millis()).unwrap_or(libc::c_int::MAX);
    loop {
        // SAFETY: one valid pollfd, alive for the call.
        let n = unsafe { libc::poll(&mut fd, 1, ms) };
        match n {
            0 => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("ssh to {host} was silent for {} ms", bound.as_millis()),
                ));
            }
            n if n > 0 => return Ok(()),
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// An https remote: its URL without credentials, and those the URL carried.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HttpsTarget {
    base: String,
    host: String,
    path: String,
    user: Option<(String, String)>,
}

impl HttpsTarget {
    fn parse(url: &str) -> Result<HttpsTarget, String> {
        let rest = url.strip_prefix("https://").ok_or("not an https URL")?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        plain("address", rest)?;
        let (user, host) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => {
                let (name, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                let (name, password) = (percent_decode(name)?, percent_decode(password)?);
                plain("user name", &name)?;
                plain("password", &password)?;
                (Some((name, password)), host)
            }
            None => (None, authority),
        };
        if host.is_empty() {
            return Err("no host".into());
        }
        let path = path.trim_end_matches('/').to_owned();
        Ok(HttpsTarget { base: format!("https://{host}/{path}"), host: host.to_owned(), path, user })
    }
}

/// Credentials in use for one remote, and where they came from.
#[derive(Clone)]
struct Credential {
    user: String,
    password: String,
    /// From `git credential fill`: told `approve` or `reject`.
    helped: bool,
    /// Told `approve` already.
    approved: bool,
}

impl Credential {
    fn header(&self) -> String {
        format!("Basic {}", base64(format!("{}:{}", self.user, self.password).as_bytes()))
    }
}

/// One connection's https: its credentials and its client, whose connections the
/// exchanges of one fetch or push reuse (one TLS handshake, not one a request).
struct Https {
    credential: Arc<Mutex<Option<Credential>>>,
    agent: ureq::Agent,
}

impl SmartSubtransport for Https {
    fn action(&self, url: &str, service: Service) -> Result<Box<dyn SmartSubtransportStream>, git2::Error> {
        let target = HttpsTarget::parse(url).map_err(|e| net_error(format!("{}: {e}", shown(url))))?;
        let exchange = Exchange {
            agent: self.agent.clone(),
            target,
            service: service_name(service),
            credential: self.credential.clone(),
            sent: Vec::new(),
            reply: None,
        };
        match service {
            Service::UploadPackLs | Service::ReceivePackLs => {
                let mut exchange = exchange;
                exchange.advertise().map_err(|e| net_error(e.to_string()))?;
                Ok(Box::new(exchange))
            }
            Service::UploadPack | Service::ReceivePack => Ok(Box::new(exchange)),
        }
    }

    fn close(&self) -> Result<(), git2::Error> {
        Ok(())
    }
}

fn agent() -> Result<ureq::Agent, String> {
    let roots = match var("GIT_SSL_CAINFO").or_else(|| var("SSL_CERT_FILE")).map(std::path::Path::new) {
        Some(file) => {
            let pem = std::fs::read(file).map_err(|e| format!("read the roots in {}: {e}", file.display()))?;
            let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(cert)) => Some(cert),
                    _ => None,
                })
                .collect();
            if certs.is_empty() {
                return Err(format!("{} holds no certificate", file.display()));
            }
            ureq::tls::RootCerts::new_with_certs(&certs)
        }
        _ => ureq::tls::RootCerts::WebPki,
    };
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        // A redirect never leaves https (nor is followed by credentials: ureq drops them).
        .https_only(true)
        .timeout_connect(bound(&CONNECT_MS))
        .timeout_per_read(bound(&IO_MS))
        .timeout_per_write(bound(&IO_MS))
        .user_agent(concat!("git/2.0 (offshoot ", env!("CARGO_PKG_VERSION"), ")"))
        .tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build())
        .build();
    Ok(config.into())
}

/// One request and its reply: an advertisement (sent at once) or an exchange of what
/// libgit2 writes (sent at its first read).
struct Exchange {
    agent: ureq::Agent,
    target: HttpsTarget,
    service: &'static str,
    credential: Arc<Mutex<Option<Credential>>>,
    sent: Vec<u8>,
    reply: Option<ureq::BodyReader<'static>>,
}

impl Exchange {
    fn advertise(&mut self) -> std::io::Result<()> {
        let url = format!("{}/info/refs?service={}", self.target.base, self.service);
        let agent = self.agent.clone();
        let body = self.request(&url, &format!("application/x-{}-advertisement", self.service), |auth| {
            let mut request = agent.get(&url);
            if let Some(auth) = auth {
                request = request.header("Authorization", auth);
            }
            request.call()
        })?;
        self.reply = Some(body);
        Ok(())
    }

    fn post(&mut self) -> std::io::Result<()> {
        let url = format!("{}/{}", self.target.base, self.service);
        let agent = self.agent.clone();
        let sent = std::mem::take(&mut self.sent);
        let kind = format!("application/x-{}-request", self.service);
        let accept = format!("application/x-{}-result", self.service);
        let body = self.request(&url, &accept, |auth| {
            let mut request = agent.post(&url).header("Content-Type", &kind).header("Accept", &accept);
            if let Some(auth) = auth {
                request = request.header("Authorization", auth);
            }
            request.send(&sent[..])
        })?;
        self.reply = Some(body);
        Ok(())
    }

    /// Sends `send` (with the credentials in use, if any), and once more with
    /// credentials when the server asks for them; the reply's body once it is `expected`.
    fn request(
        &self,
        url: &str,
        expected: &str,
        send: impl Fn(Option<&str>) -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> std::io::Result<ureq::BodyReader<'static>> {
        let shown_url = shown(url);
        let failed = |e: ureq::Error| {
            let e = e.to_string();
            let hint = if e.contains("UnknownIssuer") {
                " (no trusted root vouches for the server: GIT_SSL_CAINFO or SSL_CERT_FILE names a file of roots to trust)"
            } else {
                ""
            };
            std::io::Error::other(format!("{shown_url}: {e}{hint}"))
        };
        let mut credential = self.credential.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut response = send(credential.as_ref().map(Credential::header).as_deref()).map_err(failed)?;
        if response.status() == 401 && credential.is_none() {
            let found = match &self.target.user {
                Some((user, password)) if !password.is_empty() => {
                    Some(Credential { user: user.clone(), password: password.clone(), helped: false, approved: false })
                }
                user => fill(&self.target, user.as_ref().map(|(u, _)| u.as_str())),
            };
            if let Some(found) = found {
                response = send(Some(&found.header())).map_err(failed)?;
                *credential = Some(found);
            }
        }
        let status = response.status().as_u16();
        if status == 401 {
            if let Some(refused) = credential.take() {
                if refused.helped {
                    tell(&self.target, &refused, "reject");
                }
                return Err(std::io::Error::other(format!("{shown_url} refused the credentials")));
            }
            return Err(std::io::Error::other(format!(
                "{shown_url} asks for credentials, and no git credential helper gave any (`git config --global credential.helper …`)"
            )));
        }
        if !(200..300).contains(&status) {
            return Err(std::io::Error::other(format!("{shown_url} answered {}", response.status())));
        }
        let kind = response.body().mime_type().unwrap_or("").to_owned();
        if kind != expected {
            return Err(std::io::Error::other(format!(
                "{shown_url} is no git server speaking the smart protocol (it sent `{kind}`, not `{expected}`)"
            )));
        }
        // The helper hears its credentials worked once they brought what git asked for.
        if let Some(used) = credential.as_mut().filter(|c| c.helped && !c.approved) {
            tell(&self.target, used, "approve");
            used.approved = true;
        }
        // An advertisement is a list of refs: one without end is cut off, not kept.
        let limit = if expected.ends_with("-advertisement") { ADVERTISEMENT_MAX } else { u64::MAX };
        Ok(response.into_body().into_with_config().limit(limit).reader())
    }
}

impl Read for Exchange {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.reply.is_none() {
            self.post()?;
        }
        self.reply.as_mut().expect("a reply once sent").read(buf)
    }
}

impl Write for Exchange {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.sent.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `git credential <verb>` is told of `target` (and of `credential`, when given).
fn credential_input(target: &HttpsTarget, user: Option<&str>, credential: Option<&Credential>) -> String {
    let mut input = format!("protocol=https\nhost={}\npath={}\n", target.host, target.path);
    if let Some(user) = credential.map(|c| c.user.as_str()).or(user) {
        input.push_str(&format!("username={user}\n"));
    }
    if let Some(credential) = credential {
        input.push_str(&format!("password={}\n", credential.password));
    }
    input.push('\n');
    input
}

/// Runs `git credential <verb>` on `input`; its stdout when it succeeded.
fn git_credential(verb: &str, input: &str) -> Option<Vec<u8>> {
    let args = [std::ffi::OsStr::new("credential"), std::ffi::OsStr::new(verb)];
    let spec = Spec {
        program: std::path::Path::new("git"),
        args: &args,
        cwd: std::path::Path::new("/"),
        env: environment(),
        // Ours, so a helper's prompt can read the terminal.
        group: Group::Terminal,
        stdin: Some(input.as_bytes()),
        sandbox: None,
        pgid_record: None,
    };
    let limits =
        process::Limits { head: 64 << 10, tail: 0, record_max: 0, timeout: Some(Duration::from_secs(300)), idle: None };
    let done = process::run(&spec, &limits, process::Io::default()).ok()?;
    done.exit.success().then_some(done.stdout.head)
}

/// Credentials for `target` from the user's git credential helpers.
fn fill(target: &HttpsTarget, user: Option<&str>) -> Option<Credential> {
    let out = git_credential("fill", &credential_input(target, user, None))?;
    let out = String::from_utf8_lossy(&out);
    let field = |name: &str| out.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix('=')).map(str::to_owned);
    Some(Credential { user: field("username")?, password: field("password")?, helped: true, approved: false })
}

/// Tells the helpers whether the credentials they gave worked.
fn tell(target: &HttpsTarget, credential: &Credential, verb: &str) {
    let _ = git_credential(verb, &credential_input(target, None, Some(credential)));
}

fn base64(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(DIGITS[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_addresses_are_read_as_git_reads_them() {
        let parse = |url: &str| SshTarget::parse(&wire_url(url));
        let target =
            |host: &str, port: Option<u16>, path: &str| Ok(SshTarget { host: host.into(), port, path: path.into() });
        assert_eq!(parse("git@example.com:team/fleet.git"), target("git@example.com", None, "team/fleet.git"));
        assert_eq!(parse("host:/srv/fleet.git"), target("host", None, "/srv/fleet.git"));
        assert_eq!(parse("ssh://me@host:2222/srv/fleet.git"), target("me@host", Some(2222), "/srv/fleet.git"));
        assert_eq!(parse("ssh://host/~/fleet.git"), target("host", None, "~/fleet.git"));
        assert_eq!(parse("ssh://host/a%20b.git"), target("host", None, "/a b.git"));
        assert_eq!(parse("ssh://[::1]:22/x"), target("::1", Some(22), "/x"));
        assert_eq!(parse("ssh://[::1]/x"), target("::1", None, "/x"));
        assert_eq!(parse("ssh://me@[::1]:2222/x"), target("me@::1", Some(2222), "/x"));
        assert_eq!(parse("[::1]:team/x.git"), target("::1", None, "team/x.git"));
        assert_eq!(parse("me@[::1]:x.git"), target("me@::1", None, "x.git"));
        for refused in [
            "ssh://-oProxyCommand=touch%20x/x",
            "-oProxyCommand=x:path",
            "ssh://me@-oProxyCommand=x/x",
            "ssh://host:port/x",
            "ssh://h:22:33/y",
            "host:--upload-pack=touch x",
            "ssh://host/x%0ay",
            "ssh://[::1/x",
        ] {
            assert!(parse(refused).is_err(), "{refused}");
        }
        let quoted = SshTarget::parse("ssh://h/it's!").expect("parse").command(Service::UploadPackLs);
        assert_eq!(quoted, "git-upload-pack '/it'\\''s'\\!''");
        assert!(!is_scp_like("/abs/path") && !is_scp_like("./rel:x") && !is_scp_like("https://h/x"));
    }

    #[test]
    fn https_addresses_keep_their_credentials_apart_and_unshown() {
        let target = HttpsTarget::parse("https://me:s%40cret@example.com:8443/team/fleet.git/").expect("parse");
        assert_eq!(target.base, "https://example.com:8443/team/fleet.git");
        assert_eq!(target.user, Some(("me".into(), "s@cret".into())));
        assert_eq!(shown("https://me:s3cret@example.com/x"), "https://me:***@example.com/x");
        assert_eq!(shown("https://example.com/x"), "https://example.com/x");
        assert_eq!(shown("https://ghp_0123456789abcdef@example.com/x"), "https://***@example.com/x");
        assert_eq!(shown("ssh://git@example.com/x"), "ssh://git@example.com/x");
        // A line break in what a credential helper is told would add a line of its own.
        assert!(problem("https://x%0aurl=https%3a%2f%2fgithub.com@127.0.0.1/x.git").is_some());
        assert!(problem("https://me@example.com/fleet.git").is_none());
        assert_eq!(base64(b"me:s3cret"), "bWU6czNjcmV0");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"a"), "YQ==");
    }
}
