//! git:// remotes (`git daemon`): a TCP connection carrying libgit2's bytes, ours so
//! that a push's ref advertisement can be narrowed ([`super::narrow`]).

use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};

use git2::transport::{Service, SmartSubtransport, SmartSubtransportStream};

use super::{CONNECT_MS, IO_MS, bound, host_and_port, net_error, plain, service_name, shown};

/// git's own port for git://.
const PORT: u16 = 9418;

/// Where a git:// remote is: its `host[:port]` as written, and the path asked for.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct DaemonTarget {
    pub(super) authority: String,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) path: String,
}

impl DaemonTarget {
    pub(super) fn parse(url: &str) -> Result<DaemonTarget, String> {
        let rest = url.strip_prefix("git://").ok_or("not a git:// URL")?;
        let (authority, path) = rest.split_once('/').ok_or("no path")?;
        plain("host", authority)?;
        plain("path", path)?;
        let (host, port) = host_and_port(authority)?;
        let port = match port.filter(|p| !p.is_empty()) {
            Some(port) => port.parse::<u16>().map_err(|_| "its port is not a number".to_owned())?,
            None => PORT,
        };
        if host.is_empty() || path.is_empty() {
            return Err("no host or no path".into());
        }
        Ok(DaemonTarget { authority: authority.to_owned(), host: host.to_owned(), port, path: format!("/{path}") })
    }
}

pub(super) struct Daemon;

impl SmartSubtransport for Daemon {
    fn action(&self, url: &str, service: Service) -> Result<Box<dyn SmartSubtransportStream>, git2::Error> {
        let target = DaemonTarget::parse(url).map_err(|e| net_error(format!("{}: {e}", shown(url))))?;
        let unreachable = |e: std::io::Error| net_error(format!("cannot reach {}: {e}", shown(url)));
        let addresses = (target.host.as_str(), target.port).to_socket_addrs().map_err(unreachable)?;
        let mut last = std::io::Error::other("the host has no address");
        let mut stream = None;
        for address in addresses {
            let connected = match bound(&CONNECT_MS) {
                Some(within) => TcpStream::connect_timeout(&address, within),
                None => TcpStream::connect(address),
            };
            match connected {
                Ok(connected) => {
                    stream = Some(connected);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let mut stream = stream.ok_or_else(|| unreachable(last))?;
        stream.set_read_timeout(bound(&IO_MS)).map_err(unreachable)?;
        stream.set_write_timeout(bound(&IO_MS)).map_err(unreachable)?;
        let _ = stream.set_nodelay(true);
        // The request: `<service> <path>\0host=<host[:port]>\0`, one pkt-line.
        let request = format!("{} {}\0host={}\0", service_name(service), target.path, target.authority);
        let mut line = format!("{:04x}", request.len() + 4).into_bytes();
        line.extend_from_slice(request.as_bytes());
        stream.write_all(&line).map_err(unreachable)?;
        Ok(super::narrow::narrowed(service, Box::new(stream)))
    }

    fn close(&self) -> Result<(), git2::Error> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_addresses_are_read_as_git_reads_them() {
        let target = |authority: &str, host: &str, port: u16, path: &str| {
            Ok(DaemonTarget { authority: authority.into(), host: host.into(), port, path: path.into() })
        };
        assert_eq!(DaemonTarget::parse("git://h/r.git"), target("h", "h", 9418, "/r.git"));
        assert_eq!(
            DaemonTarget::parse("git://127.0.0.1:9555/a/r.git"),
            target("127.0.0.1:9555", "127.0.0.1", 9555, "/a/r.git")
        );
        assert_eq!(DaemonTarget::parse("git://[::1]:9/r"), target("[::1]:9", "::1", 9, "/r"));
        assert_eq!(DaemonTarget::parse("git://h:/r"), target("h:", "h", 9418, "/r"));
        for refused in ["git://h", "git://h:port/x", "git:///x", "git://h/x\ny", "https://h/x", "git://[::1]junk/r"] {
            assert!(DaemonTarget::parse(refused).is_err(), "{refused}");
        }
    }
}
