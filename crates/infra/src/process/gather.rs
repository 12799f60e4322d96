//! The poll loop of a running child: feeds its stdin, drains both outputs into what is
//! kept and recorded, watches its exit and the deadlines.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use std::time::{Duration, Instant};

use super::{Ended, GRACE, Io, Kept, Limits, kill_group};

/// A child's pipes and clocks while its output is gathered.
struct Gathering<'a> {
    child: &'a mut Child,
    limits: &'a Limits,
    input: &'a [u8],
    written: usize,
    stdin: Option<ChildStdin>,
    out_pipe: Option<ChildStdout>,
    err_pipe: Option<ChildStderr>,
    stdout: Kept,
    stderr: Kept,
    exit_fd: Option<OwnedFd>,
    started: Instant,
    last_output: Instant,
    ended: Ended,
    exited: bool,
    /// Once the child is over (or being ended): when to stop waiting for its output.
    grace: Option<Instant>,
}

/// Returns the kept streams, how it ended and whether output was still held open by a
/// process outside the group at the end.
pub(super) fn gather(child: &mut Child, input: &[u8], limits: &Limits, mut io: Io) -> (Kept, Kept, Ended, bool) {
    let started = Instant::now();
    let stdin = child.stdin.take().filter(|_| !input.is_empty());
    let (out_pipe, err_pipe) = (child.stdout.take(), child.stderr.take());
    let fds = [stdin.as_ref().map(AsRawFd::as_raw_fd), out_pipe.as_ref().map(AsRawFd::as_raw_fd)];
    for fd in fds.into_iter().chain([err_pipe.as_ref().map(AsRawFd::as_raw_fd)]).flatten() {
        set_nonblocking(fd);
    }
    let exit_fd = pidfd(child.id());
    let mut g = Gathering {
        child,
        limits,
        input,
        written: 0,
        stdin,
        out_pipe,
        err_pipe,
        stdout: Kept::new(limits.head, limits.tail),
        stderr: Kept::new(limits.head, limits.tail),
        exit_fd,
        started,
        last_output: started,
        ended: Ended::Exited,
        exited: false,
        grace: None,
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let open_outputs = g.out_pipe.is_some() || g.err_pipe.is_some();
        if g.exited && !open_outputs {
            return (g.stdout, g.stderr, g.ended, false);
        }
        let now = Instant::now();
        if g.grace.is_some_and(|grace| now >= grace) {
            return (g.stdout, g.stderr, g.ended, open_outputs);
        }
        g.end_past_deadlines(now);
        g.wait_and_serve(now, &mut buf, &mut io);
    }
}

impl Gathering<'_> {
    /// Ends the child's group when its timeout or idle limit passed.
    fn end_past_deadlines(&mut self, now: Instant) {
        if self.grace.is_some() {
            return;
        }
        let passed = |limit: Option<Duration>, since: Instant| limit.is_some_and(|l| now >= since + l);
        let reason = if passed(self.limits.timeout, self.started) {
            Some(Ended::TimedOut)
        } else if passed(self.limits.idle, self.last_output) {
            Some(Ended::Idle)
        } else {
            None
        };
        if let Some(reason) = reason {
            self.end(reason, now);
        }
    }

    fn end(&mut self, reason: Ended, now: Instant) {
        self.ended = reason;
        kill_group(self.child.id());
        self.grace = Some(now + GRACE);
    }

    /// How long poll may sleep, in milliseconds (-1: until something happens): until
    /// the nearest deadline.
    fn sleep_ms(&self, now: Instant) -> i32 {
        let mut wake: Option<Instant> = self.grace;
        if self.grace.is_none() {
            let limits = self.limits;
            for candidate in [limits.timeout.map(|t| self.started + t), limits.idle.map(|t| self.last_output + t)] {
                wake = match (wake, candidate) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        if self.exit_fd.is_none() && !self.exited {
            // Without a pidfd the exit is noticed by looking every few milliseconds.
            let soon = now + Duration::from_millis(5);
            wake = Some(wake.map_or(soon, |w| w.min(soon)));
        }
        wake.map_or(-1, |w| w.saturating_duration_since(now).as_millis().min(60_000) as i32)
    }

    /// One wait on every open pipe and the exit, then whatever is ready served.
    fn wait_and_serve(&mut self, now: Instant, buf: &mut [u8], io: &mut Io) {
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(4);
        let slot = |fds: &mut Vec<libc::pollfd>, fd: Option<RawFd>, events: libc::c_short| {
            fd.map(|fd| {
                fds.push(libc::pollfd { fd, events, revents: 0 });
                fds.len() - 1
            })
        };
        let in_slot = slot(&mut fds, self.stdin.as_ref().map(AsRawFd::as_raw_fd), libc::POLLOUT);
        let out_slot = slot(&mut fds, self.out_pipe.as_ref().map(AsRawFd::as_raw_fd), libc::POLLIN);
        let err_slot = slot(&mut fds, self.err_pipe.as_ref().map(AsRawFd::as_raw_fd), libc::POLLIN);
        let exit = self.exit_fd.as_ref().filter(|_| !self.exited).map(AsRawFd::as_raw_fd);
        let exit_slot = slot(&mut fds, exit, libc::POLLIN);
        poll(&mut fds, self.sleep_ms(now));
        let ready = |s: Option<usize>| s.is_some_and(|i| fds[i].revents != 0);
        if ready(in_slot) {
            self.feed_stdin();
        }
        if ready(out_slot) {
            self.read_stdout(buf, io);
        }
        if ready(err_slot) {
            let (stderr, record_max) = (&mut self.stderr, self.limits.record_max);
            let got = drain(&mut self.err_pipe, buf, |bytes| {
                stderr.push(bytes);
                record(&mut io.stderr_record, &mut stderr.recorded, record_max, bytes);
            });
            if got {
                self.last_output = Instant::now();
            }
        }
        let exit_ready = self.exit_fd.is_none() || ready(exit_slot);
        if !self.exited && exit_ready && matches!(self.child.try_wait(), Ok(Some(_)) | Err(_)) {
            self.exited = true;
            // The command is over; whatever it left running in its group goes with it.
            kill_group(self.child.id());
            self.grace.get_or_insert(Instant::now() + GRACE);
        }
    }

    fn feed_stdin(&mut self) {
        let Some(pipe) = self.stdin.as_mut() else { return };
        match pipe.write(&self.input[self.written..]) {
            Ok(n) => self.written += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            // A child that stops reading (or exits) before taking all its input.
            Err(_) => self.written = self.input.len(),
        }
        if self.written >= self.input.len() {
            self.stdin = None;
        }
    }

    fn read_stdout(&mut self, buf: &mut [u8], io: &mut Io) {
        let mut stop = false;
        let (stdout, record_max) = (&mut self.stdout, self.limits.record_max);
        let got = drain(&mut self.out_pipe, buf, |bytes| {
            stdout.push(bytes);
            record(&mut io.stdout_record, &mut stdout.recorded, record_max, bytes);
            if let Some(on_stdout) = io.on_stdout.as_mut()
                && !on_stdout(bytes)
            {
                stop = true;
            }
        });
        if got {
            self.last_output = Instant::now();
        }
        if stop && self.grace.is_none() {
            self.end(Ended::Stopped, Instant::now());
        }
    }
}

/// Reads what is available from `pipe`, handing each chunk to `sink`; closes
/// the pipe at end of file. Returns whether any bytes came.
fn drain<R: Read>(pipe: &mut Option<R>, buf: &mut [u8], mut sink: impl FnMut(&[u8])) -> bool {
    let mut got = false;
    // A bounded number of reads per wake-up, so a writer that never pauses cannot
    // keep the loop from its deadlines.
    for _ in 0..32 {
        let Some(p) = pipe.as_mut() else { break };
        match p.read(buf) {
            Ok(0) => *pipe = None,
            Ok(n) => {
                got = true;
                sink(&buf[..n]);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(_) => *pipe = None,
        }
    }
    got
}

fn record(file: &mut Option<&mut dyn Write>, recorded: &mut u64, max: u64, bytes: &[u8]) {
    let Some(f) = file.as_mut() else { return };
    let room = max.saturating_sub(*recorded).min(bytes.len() as u64) as usize;
    if room == 0 {
        return;
    }
    match f.write_all(&bytes[..room]) {
        Ok(()) => *recorded += room as u64,
        // A record that cannot be written (disk full) stops growing; memory keeps going.
        Err(_) => *file = None,
    }
}

#[expect(unsafe_code, reason = "fcntl(2) on a descriptor we own; no memory is shared")]
fn set_nonblocking(fd: RawFd) {
    // SAFETY: F_GETFL/F_SETFL only read and set flags of an open descriptor.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

#[expect(unsafe_code, reason = "poll(2) over a slice we own for the length of the call")]
fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) {
    // SAFETY: the pointer and length describe `fds`, which outlives the call.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms);
    }
}

/// A descriptor that becomes readable when `pid` exits (Linux 5.3+), if available.
#[expect(unsafe_code, reason = "pidfd_open(2) has no wrapper in std or libc")]
fn pidfd(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes two integers and returns a new descriptor we then own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}
