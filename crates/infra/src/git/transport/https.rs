//! https remotes: each exchange one request through ureq (rustls), credentials from the
//! URL or from `git credential`.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use git2::transport::{Service, SmartSubtransport, SmartSubtransportStream};

use super::{
    ADVERTISEMENT_MAX, CONNECT_MS, IO_MS, bound, environment, net_error, percent_decode, plain, service_name, shown,
    var,
};
use crate::process::{self, Group, Spec};

/// An https remote: its URL without credentials, and those the URL carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HttpsTarget {
    pub(super) base: String,
    pub(super) host: String,
    pub(super) path: String,
    pub(super) user: Option<(String, String)>,
}

impl HttpsTarget {
    pub(super) fn parse(url: &str) -> Result<HttpsTarget, String> {
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
pub(super) struct Credential {
    pub(super) user: String,
    pub(super) password: String,
    /// From `git credential fill`: told `approve` or `reject`.
    pub(super) helped: bool,
    /// Told `approve` already.
    pub(super) approved: bool,
}

impl Credential {
    fn header(&self) -> String {
        format!("Basic {}", base64(format!("{}:{}", self.user, self.password).as_bytes()))
    }
}

/// One connection's https: its credentials and its client, whose connections the
/// exchanges of one fetch or push reuse (one TLS handshake, not one a request).
pub(super) struct Https {
    pub(super) credential: Arc<Mutex<Option<Credential>>>,
    pub(super) agent: ureq::Agent,
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
                exchange.advertise().map_err(net_error)?;
                Ok(super::narrow::narrowed(service, Box::new(exchange)))
            }
            Service::UploadPack | Service::ReceivePack => Ok(Box::new(exchange)),
        }
    }

    fn close(&self) -> Result<(), git2::Error> {
        Ok(())
    }
}

pub(super) fn agent() -> Result<ureq::Agent, String> {
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
pub(super) struct Exchange {
    pub(super) agent: ureq::Agent,
    pub(super) target: HttpsTarget,
    pub(super) service: &'static str,
    pub(super) credential: Arc<Mutex<Option<Credential>>>,
    pub(super) sent: Vec<u8>,
    pub(super) reply: Option<ureq::BodyReader<'static>>,
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

pub(super) fn base64(bytes: &[u8]) -> String {
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
