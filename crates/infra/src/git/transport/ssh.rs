//! ssh remotes: the user's `ssh` (or `GIT_SSH_COMMAND` / `GIT_SSH`) run as git runs it,
//! its pipes the connection.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::Duration;

use git2::transport::{Service, SmartSubtransport, SmartSubtransportStream};

use super::{
    IO_MS, SCP, bound, environment, host_and_port, net_error, percent_decode, plain, service_name, shown, var,
};
use crate::process::{self, Group, Served, Spec};

/// Where an ssh remote is: `[user@]host`, a port, and the path as the remote command
/// gets it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SshTarget {
    pub(super) host: String,
    pub(super) port: Option<u16>,
    pub(super) path: String,
}

impl SshTarget {
    pub(super) fn parse(url: &str) -> Result<SshTarget, String> {
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
        let (host, port) = host_and_port(hostport)?;
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
    pub(super) fn command(&self, service: Service) -> String {
        let quoted = self.path.replace('\'', "'\\''").replace('!', "'\\!'");
        format!("{} '{quoted}'", service_name(service))
    }
}

pub(super) struct Ssh;

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
        let stream = SshStream { served, input: input.into(), output: output.into(), host: target.host };
        Ok(super::narrow::narrowed(service, Box::new(stream)))
    }

    fn close(&self) -> Result<(), git2::Error> {
        Ok(())
    }
}

/// One ssh connection: the process's stdin and stdout (it is killed when dropped).
pub(super) struct SshStream {
    pub(super) served: Served,
    pub(super) input: std::fs::File,
    pub(super) output: std::fs::File,
    pub(super) host: String,
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
