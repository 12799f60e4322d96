//! ssh, https and git:// remotes. libgit2 is built here without libssh2 and without TLS
//! (no C library to build or install for either), so both are subtransports of ours under
//! its smart protocol: libgit2 speaks git's protocol, these only carry its bytes. git://
//! is ours too, so that every one of them can narrow a push's ref advertisement
//! ([`narrowing`]).
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

mod daemon;
mod https;
mod narrow;
mod ssh;

pub(crate) use narrow::narrowing;

use daemon::Daemon;
use https::{Https, HttpsTarget, agent};
use ssh::{Ssh, SshTarget};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use git2::transport::{Service, Transport};

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
                git2::transport::register("git", |remote| Transport::smart(remote, false, Daemon))
                    .map_err(|e| format!("register git: {}", e.message()))?;
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

/// `host[:port]` or `[v6 address][:port]` split into the host and the port as written
/// (ssh's and git://'s addresses alike).
fn host_and_port(hostport: &str) -> Result<(&str, Option<&str>), String> {
    match hostport.strip_prefix('[') {
        Some(bracketed) => {
            let (inside, after) = bracketed.split_once(']').ok_or("a `[` without its `]`")?;
            match after {
                "" => Ok((inside, None)),
                after => Ok((inside, Some(after.strip_prefix(':').ok_or("something after the `]`")?))),
            }
        }
        None => Ok(hostport.split_once(':').map_or((hostport, None), |(host, port)| (host, Some(port)))),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use https::base64;

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
