//! tmux as the terminal a person runs offshoot in: a scrollback that keeps (and
//! reflows) what scrolled off, a window that is resized, keys typed, and what it holds
//! read back as the person would scroll through it. `.ci/tools` provides tmux where
//! the machine has none.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Tmux {
    socket: PathBuf,
    program: PathBuf,
}

/// tmux on `PATH`, else the one `.ci/tools` unpacked.
fn program() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("tmux"))
        .find(|p| p.is_file());
    let unpacked = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-tools/bin/tmux");
    on_path
        .or_else(|| unpacked.is_file().then_some(unpacked))
        .unwrap_or_else(|| panic!("these tests need tmux (a real terminal with a scrollback): `.ci/tools` installs it"))
}

impl Tmux {
    /// A window of `cols` x `rows` running `script` (sh) with `env` and nothing else of
    /// the tests' environment but `PATH`.
    pub fn start(dir: &Path, env: &[(String, String)], cols: u16, rows: u16, script: &str) -> Tmux {
        let tmux = Tmux { socket: dir.join("tmux.sock"), program: program() };
        let mut c = tmux.command();
        c.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).env("TERM", "xterm-256color");
        for (k, v) in env {
            c.env(k, v);
        }
        let size = [cols.to_string(), rows.to_string()];
        // A scrollback long enough for every test, and the window kept when its program
        // ends (to read what it left).
        c.args(["set-option", "-g", "history-limit", "50000", ";", "set-option", "-g", "remain-on-exit", "on", ";"]);
        c.args(["new-session", "-d", "-s", "t", "-x", &size[0], "-y", &size[1], "sh", "-c", script]);
        let o = c.current_dir(dir).output().expect("start tmux");
        assert!(o.status.success(), "tmux new-session: {}", String::from_utf8_lossy(&o.stderr));
        tmux
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.arg("-S").arg(&self.socket).args(["-f", "/dev/null"]);
        c
    }

    /// A tmux command's standard output; it must succeed.
    pub fn run(&self, args: &[&str]) -> String {
        let o = self.command().args(args).output().expect("tmux");
        assert!(o.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Types `text` literally, then Enter if `enter`.
    pub fn type_in(&self, text: &str, enter: bool) {
        if !text.is_empty() {
            self.run(&["send-keys", "-t", "t", "-l", text]);
        }
        if enter {
            self.run(&["send-keys", "-t", "t", "Enter"]);
        }
    }

    /// Sends a key by tmux's name for it (`C-d`, `C-c`).
    pub fn key(&self, name: &str) {
        self.run(&["send-keys", "-t", "t", name]);
    }

    /// Everything the window holds: its history, oldest first, then the screen, wrapped
    /// lines joined.
    pub fn everything(&self) -> String {
        self.run(&["capture-pane", "-p", "-J", "-t", "t", "-S", "-", "-E", "-"])
    }

    /// The screen alone.
    pub fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "t"])
    }

    /// How many lines have scrolled into the history.
    pub fn history_size(&self) -> usize {
        self.run(&["display-message", "-p", "-t", "t", "#{history_size}"]).trim().parse().expect("a number")
    }

    pub fn resize(&self, cols: u16, rows: u16) {
        self.run(&["resize-window", "-t", "t", "-x", &cols.to_string(), "-y", &rows.to_string()]);
    }

    /// Waits up to 20 s for `what` to be on the screen; the screen if it does not come.
    #[track_caller]
    pub fn wait_for_screen(&self, what: &str) {
        let until = Instant::now() + Duration::from_secs(20);
        while !self.screen().contains(what) {
            assert!(Instant::now() < until, "`{what}` never on the screen:\n{}", self.screen());
            std::thread::sleep(Duration::from_millis(30));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").output();
    }
}
