//! A TCP relay that holds each new connection back before it reaches the server behind
//! it: a remote far away, or behind a slow handshake (what ssh or https costs per
//! connection), for a `git daemon` on loopback.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub struct SlowProxy {
    port: u16,
    delay_ms: Arc<AtomicU64>,
    connections: Arc<AtomicU64>,
}

impl SlowProxy {
    /// Relays to the `git daemon` serving `url` (`git://127.0.0.1:<port>/…`), each
    /// connection held back `delay` first.
    pub fn in_front_of(url: &str, delay: Duration) -> SlowProxy {
        let port = url.strip_prefix("git://127.0.0.1:").and_then(|rest| rest.split('/').next());
        SlowProxy::start(port.and_then(|p| p.parse().ok()).expect("a daemon's port"), delay)
    }

    /// Relays to `127.0.0.1:upstream`, each connection held back `delay` first.
    pub fn start(upstream: u16, delay: Duration) -> SlowProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let delay_ms = Arc::new(AtomicU64::new(delay.as_millis() as u64));
        let connections = Arc::new(AtomicU64::new(0));
        let (delay, count) = (delay_ms.clone(), connections.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let held = Duration::from_millis(delay.load(Ordering::SeqCst));
                std::thread::spawn(move || {
                    std::thread::sleep(held);
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { return };
                    let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else { return };
                    std::thread::spawn(move || pipe(client2, server2));
                    pipe(server, client);
                });
            }
        });
        SlowProxy { port, delay_ms, connections }
    }

    /// Each connection from now on is held back `delay`.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// The URL of repository `repo` of the `git daemon` behind it.
    pub fn url(&self, repo: &str) -> String {
        format!("git://127.0.0.1:{}/{repo}", self.port)
    }

    /// How many connections it has taken.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

/// Copies `from` to `to` until either end closes.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
