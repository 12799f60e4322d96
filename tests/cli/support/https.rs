//! `git http-backend` over https on loopback (`git_https.py`: TLS with the test CA's
//! certificate under `tls/`, Basic authentication): the https remote of the transport
//! tests and benchmark (git's own smart HTTP server, not ours).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The server, serving the bare repositories under a directory, asking for
/// `user:password`; killed on drop.
pub struct HttpsGit {
    child: Child,
    pub port: u16,
}

/// This directory (the server's script and the TLS material).
fn support() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/support")
}

/// The test CA's certificate (for `GIT_SSL_CAINFO`).
pub fn ca() -> PathBuf {
    support().join("tls/ca.pem")
}

impl HttpsGit {
    pub fn start(base: &Path, credentials: &str) -> HttpsGit {
        let mut child = Command::new("python3")
            .arg(support().join("git_https.py"))
            .arg(base)
            .arg(support().join("tls/server.pem"))
            .arg(support().join("tls/server.key"))
            .arg(credentials)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("port");
        HttpsGit { port: line.trim().parse().expect("a port"), child }
    }

    pub fn url(&self, repo: &str) -> String {
        format!("https://127.0.0.1:{}/{repo}", self.port)
    }
}

impl Drop for HttpsGit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
