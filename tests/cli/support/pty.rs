//! A pseudo-terminal to run the binary in, as a person's terminal would: what is
//! written to it gathered, as bytes and as the screen it makes (vt100), keys written to
//! it, and where its cursor is answered when asked.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Pty {
    master: File,
    pub child: Child,
    out: Arc<Mutex<Vec<u8>>>,
    /// The screen as a terminal of this size shows what was written.
    screen: Arc<Mutex<vt100::Parser>>,
}

impl Pty {
    /// Starts `command` with a new terminal of `cols` x `rows` as its standard streams and
    /// controlling terminal.
    #[allow(unsafe_code)]
    pub fn spawn(mut command: Command, cols: u16, rows: u16) -> Pty {
        let (mut master, mut slave) = (0, 0);
        let size = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: openpty writes two descriptors into the integers given; the name and
        // termios pointers may be null, the size is read only.
        let made = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
        assert_eq!(made, 0, "openpty");
        // SAFETY: both descriptors were just opened and are owned by nothing else.
        let (master, slave) = unsafe { (File::from_raw_fd(master), File::from_raw_fd(slave)) };
        let stdio = |f: &File| Stdio::from(f.try_clone().expect("dup"));
        command.stdin(stdio(&slave)).stdout(stdio(&slave)).stderr(stdio(&slave));
        // SAFETY: setsid and ioctl are async-signal-safe; the child makes the terminal on
        // its standard input its controlling one, as a login shell's children have.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                libc::ioctl(0, libc::TIOCSCTTY, 0);
                Ok(())
            });
        }
        let child = command.spawn().expect("spawn in the pty");
        drop(slave);
        let out = Arc::new(Mutex::new(Vec::new()));
        // A terminal that says it has no rows or columns still gets a screen the parser
        // can write on (vt100 overflows on a 1x1 grid): only the bytes matter there.
        let (screen_rows, screen_cols) = if rows == 0 || cols == 0 { (24, 80) } else { (rows, cols) };
        let screen = Arc::new(Mutex::new(vt100::Parser::new(screen_rows, screen_cols, 0)));
        let mut reader = master.try_clone().expect("dup master");
        let mut answer = master.try_clone().expect("dup master");
        let (sink, shown) = (out.clone(), screen.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            // Bytes not yet shown: the start of a question whose end is still to come.
            let mut held: Vec<u8> = Vec::new();
            const ASKED: &[u8] = b"\x1b[6n";
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().expect("out").extend_from_slice(&buf[..n]);
                held.extend_from_slice(&buf[..n]);
                let mut parser = shown.lock().expect("screen");
                // A terminal answers where its cursor is when asked (an inline display
                // asks), as the screen stands when the question comes.
                while let Some(at) = held.windows(ASKED.len()).position(|w| w == ASKED) {
                    parser.process(&held[..at + ASKED.len()]);
                    let (row, col) = parser.screen().cursor_position();
                    let _ = answer.write_all(format!("\x1b[{};{}R", row + 1, col + 1).as_bytes());
                    held.drain(..at + ASKED.len());
                }
                let keep = (1..ASKED.len()).rev().find(|&k| held.ends_with(&ASKED[..k])).unwrap_or(0);
                let upto = held.len() - keep;
                parser.process(&held[..upto]);
                held.drain(..upto);
            }
        });
        Pty { master, child, out, screen }
    }

    /// Makes the terminal `cols` x `rows`, as a person resizing its window does (the
    /// kernel sends the program SIGWINCH).
    #[allow(unsafe_code)]
    pub fn resize(&self, cols: u16, rows: u16) {
        use std::os::fd::AsRawFd;
        let size = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        self.screen.lock().expect("screen").screen_mut().set_size(rows.max(1), cols.max(1));
        // SAFETY: TIOCSWINSZ reads the size given; the descriptor is the open master.
        let done = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
        assert_eq!(done, 0, "TIOCSWINSZ");
    }

    /// What the terminal shows now, a line per row.
    pub fn screen(&self) -> String {
        self.screen.lock().expect("screen").screen().contents()
    }

    /// Waits up to 20 s for `what` to be on the screen (as it is now, not in what was
    /// written before); the screen if it does not come.
    #[track_caller]
    pub fn wait_for_screen(&self, what: &str) {
        let until = Instant::now() + Duration::from_secs(20);
        while !self.screen().contains(what) {
            assert!(Instant::now() < until, "`{what}` never on the screen:\n{}", self.screen());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `bytes` (`\r` is Enter, `\x03` Ctrl-C, `\x04` Ctrl-D).
    pub fn type_in(&mut self, bytes: &str) {
        self.master.write_all(bytes.as_bytes()).expect("type");
    }

    /// Every byte written to the terminal so far.
    pub fn raw(&self) -> Vec<u8> {
        self.out.lock().expect("out").clone()
    }

    /// Everything shown so far, escape sequences left out.
    pub fn text(&self) -> String {
        let raw = self.out.lock().expect("out").clone();
        let mut text = String::new();
        let mut chars = String::from_utf8_lossy(&raw).into_owned().chars().collect::<Vec<_>>().into_iter().peekable();
        while let Some(c) = chars.next() {
            if c != '\x1b' {
                text.push(c);
                continue;
            }
            // CSI: ESC [ parameters, then a final byte in @..~.
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            } else {
                chars.next();
            }
        }
        text
    }

    /// Waits up to 20 s for `what` to be shown; the screen so far if it is not. (A
    /// redraw may move the cursor over blanks instead of writing them: the text is also
    /// matched with every blank left out.)
    #[track_caller]
    pub fn wait_for(&self, what: &str) {
        let until = Instant::now() + Duration::from_secs(20);
        let squeezed = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
        let shown = || {
            let text = self.text();
            text.contains(what) || squeezed(&text).contains(&squeezed(what))
        };
        while !shown() {
            assert!(Instant::now() < until, "`{what}` never shown; the screen:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
