//! A `git daemon` on loopback serving bare repositories, writable: the remote of the
//! scale-out tests and benchmark (git's own smart protocol server, not ours).

use std::path::Path;
use std::process::{Child, Command};

/// A `git daemon` serving the bare repositories under `base`, writable; killed on drop.
pub struct Daemon {
    child: Child,
    port: u16,
}

impl Daemon {
    pub fn start(base: &Path) -> Daemon {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
        use std::os::unix::process::CommandExt;
        let child = Command::new("git")
            .process_group(0)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            // (No cap on connections: git's default of 32 resets the fetches of a loaded
            // fleet test's workers and laptop once all run at once.)
            .args([
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--enable=receive-pack",
                "--listen=127.0.0.1",
                "--max-connections=0",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", base.display()))
            .arg(base)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .spawn()
            .expect("git daemon");
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < std::time::Duration::from_secs(10), "git daemon did not listen");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Daemon { child, port }
    }

    pub fn url(&self, repo: &str) -> String {
        format!("git://127.0.0.1:{}/{repo}", self.port)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // The daemon and the upload-pack and receive-pack it started: its whole group.
        let _ = Command::new("kill").args(["-TERM", "--", &format!("-{}", self.child.id())]).status();
        let _ = self.child.wait();
    }
}
