//! Every child process the harness starts begins here: tool commands, the `command`
//! provider and detached drivers. A child gets exactly the environment it is handed
//! (nothing is inherited), its own process group or session, stdin closed or fed
//! from memory, and optionally a jail (it is then started through the sandbox
//! helper, `infra::sandbox`). While it runs, its output goes to
//! record files in full and only its head and tail stay in memory; a timeout or an
//! idle limit ends it; when it exits, whatever it left running in its group is
//! killed; and it is always reaped.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long output may keep flowing after the child exited and its group was killed
/// (a process that left the group can hold the pipes open forever).
const GRACE: Duration = Duration::from_millis(300);

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("cannot start `{program}`: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error("lost track of `{program}`: {source}")]
    Wait { program: String, source: std::io::Error },
}

/// Where a child lives among processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// A new process group in our session (killed as a group; no terminal signals).
    Own,
    /// A new session (`setsid`): for detached drivers that outlive us.
    Session,
    /// Our own group, so it can read the terminal: only for the user's own programs.
    Terminal,
}

/// What to start and how.
pub struct Spec<'a> {
    pub program: &'a Path,
    pub args: &'a [&'a OsStr],
    pub cwd: &'a Path,
    /// The child's whole environment.
    pub env: &'a [(String, String)],
    pub group: Group,
    /// Bytes for the child's stdin; `None` connects it to /dev/null.
    pub stdin: Option<&'a [u8]>,
    /// The helper that starts the child confined, in its place.
    pub sandbox: Option<Helper<'a>>,
    /// A file to hold the child's process group id: written by the child before it
    /// execs when it runs code there anyway (a new session), else by us the moment
    /// the spawn returns (sparing the fork that running code in the child needs).
    pub pgid_record: Option<&'a File>,
}

/// A program that starts a command confined, in its place (the sandbox helper): it runs
/// with `args`, then the number of a descriptor it inherits (a copy of `handed`, for
/// the spawn's length), then `--` and the command.
pub struct Helper<'a> {
    pub(crate) program: &'a Path,
    pub(crate) args: Vec<OsString>,
    pub(crate) handed: BorrowedFd<'a>,
}

/// How much of the output to keep and how long to wait.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes kept in memory from the start and from the end of each stream.
    pub head: usize,
    pub tail: usize,
    /// Bytes of each stream written to its record file; the rest is only counted.
    pub record_max: u64,
    /// The whole run; the group is killed when it passes.
    pub timeout: Option<Duration>,
    /// Silence on both output streams; the group is killed when it passes.
    pub idle: Option<Duration>,
}

/// Sees a chunk of output; returns whether the child may go on.
pub(crate) type OnOutput<'a> = dyn FnMut(&[u8]) -> bool + 'a;

/// What the running child's output is given to, besides memory.
#[derive(Default)]
pub struct Io<'a> {
    /// Told the child's process group id as soon as it exists.
    pub on_spawn: Option<&'a dyn Fn(u32)>,
    /// Sees stdout as it arrives; returning `false` kills the child.
    pub on_stdout: Option<&'a mut OnOutput<'a>>,
    pub stdout_record: Option<&'a mut dyn Write>,
    pub stderr_record: Option<&'a mut dyn Write>,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited,
    TimedOut,
    Idle,
    /// `on_stdout` asked to stop.
    Stopped,
}

/// How the child itself ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    fn of(status: ExitStatus) -> Exit {
        match status.code() {
            Some(code) => Exit::Code(code),
            None => Exit::Signal(status.signal().unwrap_or(0)),
        }
    }

    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exit code {code}"),
            Exit::Signal(signal) => write!(f, "killed by signal {signal}"),
        }
    }
}

/// One output stream: its first and last bytes, and what passed in between.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    pub head: Vec<u8>,
    pub tail: Vec<u8>,
    /// Every byte the stream carried.
    pub(crate) total: u64,
    pub(crate) line_breaks: u64,
    /// Bytes written to the record file.
    pub(crate) recorded: u64,
    head_cap: usize,
    tail_cap: usize,
}

impl Kept {
    fn new(head_cap: usize, tail_cap: usize) -> Kept {
        Kept { head_cap, tail_cap, ..Default::default() }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        self.line_breaks += bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        let room = self.head_cap.saturating_sub(self.head.len()).min(bytes.len());
        self.head.extend_from_slice(&bytes[..room]);
        self.tail.extend_from_slice(&bytes[room..]);
        if self.tail.len() > 2 * self.tail_cap.max(4096) {
            self.tail.drain(..self.tail.len() - self.tail_cap);
        }
    }

    fn finish(&mut self) {
        if self.tail.len() > self.tail_cap {
            self.tail.drain(..self.tail.len() - self.tail_cap);
        }
    }

    /// Whether head and tail together are the whole stream.
    pub(crate) fn is_whole(&self) -> bool {
        (self.head.len() + self.tail.len()) as u64 == self.total
    }
}

/// A run that came to an end.
#[derive(Debug)]
pub struct Finished {
    pub exit: Exit,
    pub ended: Ended,
    pub stdout: Kept,
    pub stderr: Kept,
    /// A process outside the child's group still held its output open at the end.
    pub(crate) lingering: bool,
}

/// Starts `spec` and waits for it, feeding stdin and gathering output as it goes.
pub fn run(spec: &Spec, limits: &Limits, io: Io) -> Result<Finished, ProcessError> {
    let program = spec.program.display().to_string();
    let spawn_err = |source| ProcessError::Spawn { program: program.clone(), source };
    // The jail's ruleset, as a descriptor the helper inherits for the spawn's length.
    let inherited = spec.sandbox.as_ref().map(|h| inheritable(h.handed)).transpose().map_err(spawn_err)?;
    let mut command = command(spec, inherited.as_ref().map(AsRawFd::as_raw_fd))?;
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    command.stdin(if spec.stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = command.spawn().map_err(spawn_err)?;
    drop(inherited);
    if let Some(mut record) = spec.pgid_record.filter(|_| !runs_code_in_child(spec)) {
        let _ = writeln!(record, "{}", child.id());
    }
    if let Some(on_spawn) = io.on_spawn {
        on_spawn(child.id());
    }
    let gathered = gather(&mut child, spec.stdin.unwrap_or_default(), limits, io);
    // Whatever happened while gathering, the child does not outlive this call.
    kill_group(child.id());
    let status = child.wait().map_err(|source| ProcessError::Wait { program, source });
    let (mut stdout, mut stderr, ended, lingering) = gathered;
    stdout.finish();
    stderr.finish();
    Ok(Finished { exit: Exit::of(status?), ended, stdout, stderr, lingering })
}

/// A child that serves over its stdin and stdout for as long as it is kept (an MCP
/// server); dropping it kills its group and reaps it.
pub(crate) struct Served {
    child: Child,
}

impl Served {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child's stdin and stdout, once.
    pub(crate) fn pipes(&mut self) -> Option<(OwnedFd, OwnedFd)> {
        let stdin = self.child.stdin.take()?;
        let stdout = self.child.stdout.take()?;
        Some((OwnedFd::from(stdin), OwnedFd::from(stdout)))
    }

    /// How the child ended, if it has.
    pub(crate) fn exited(&mut self) -> Option<Exit> {
        self.child.try_wait().ok().flatten().map(Exit::of)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        kill_group(self.child.id());
        // One in our own group ([`Group::Terminal`]) is not a group's leader.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Makes the child get SIGKILL when the thread that started it ends (a jailed child
/// gets this from the sandbox helper): a server started by a driver that is killed
/// does not outlive it. Costs a fork instead of `posix_spawn`, once per server.
#[expect(unsafe_code, reason = "pre_exec runs in the forked child; see the SAFETY note")]
fn dies_with_parent(command: &mut Command) {
    // SAFETY: the closure runs between fork and exec; prctl(2) with integers is
    // async-signal-safe and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The most of a served child's stderr its log keeps (the rest is read and dropped, so
/// a server that never stops writing neither blocks nor fills the disk).
pub(crate) const SERVED_LOG_MAX: u64 = 8 * 1024 * 1024;

/// Starts `spec` with pipes for its stdin and stdout and its stderr appended to `log`
/// (at most [`SERVED_LOG_MAX`] bytes of it, by a thread that ends with the pipe) or, with
/// no log, shown on ours (a user's own program speaking to the user: ssh), and leaves it
/// running.
pub(crate) fn serve(spec: &Spec, log: Option<&Path>) -> Result<Served, ProcessError> {
    let program = spec.program.display().to_string();
    let spawn_err = |source| ProcessError::Spawn { program: program.clone(), source };
    let inherited = spec.sandbox.as_ref().map(|h| inheritable(h.handed)).transpose().map_err(spawn_err)?;
    let mut command = command(spec, inherited.as_ref().map(AsRawFd::as_raw_fd))?;
    let file = match log {
        Some(log) => {
            let file = std::fs::OpenOptions::new().create(true).append(true).open(log).map_err(spawn_err)?;
            // A log that reached its size starts over: what this start says is kept.
            if file.metadata().is_ok_and(|m| m.len() >= SERVED_LOG_MAX) {
                let _ = file.set_len(0);
            }
            Some(file)
        }
        None => None,
    };
    command.stdin(Stdio::piped()).stdout(Stdio::piped());
    command.stderr(if file.is_some() { Stdio::piped() } else { Stdio::inherit() });
    if spec.sandbox.is_none() {
        dies_with_parent(&mut command);
    }
    let mut child = command.spawn().map_err(spawn_err)?;
    drop(inherited);
    if let (Some(mut stderr), Some(mut file)) = (child.stderr.take(), file) {
        let mut room = SERVED_LOG_MAX.saturating_sub(file.metadata().map(|m| m.len()).unwrap_or(0));
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match stderr.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let keep = (n as u64).min(room) as usize;
                        if keep > 0 && file.write_all(&buf[..keep]).is_ok() {
                            room -= keep as u64;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        });
    }
    Ok(Served { child })
}

/// Runs `spec` on our terminal (stdin, stdout and stderr inherited) and waits for
/// it: for the user's editor, which should use [`Group::Terminal`].
pub fn run_attached(spec: &Spec) -> Result<Exit, ProcessError> {
    let program = spec.program.display().to_string();
    let status = command(spec, None)?.status().map_err(|source| ProcessError::Spawn { program, source })?;
    Ok(Exit::of(status))
}

/// Starts `spec` detached in its own session with its output appended to `log`,
/// and returns its pid; a thread reaps it if it ends while we still run.
pub fn launch(spec: &Spec, log: &Path) -> Result<u32, ProcessError> {
    let program = spec.program.display().to_string();
    let mut command = command(spec, None)?;
    let spawn_err = |source| ProcessError::Spawn { program: program.clone(), source };
    let out = std::fs::OpenOptions::new().create(true).append(true).open(log).map_err(spawn_err)?;
    let err = out.try_clone().map_err(spawn_err)?;
    command.stdin(Stdio::null()).stdout(out).stderr(err);
    let mut child = command.spawn().map_err(spawn_err)?;
    let pid = child.id();
    std::thread::spawn(move || child.wait());
    Ok(pid)
}

/// A copy of `fd` that a child inherits (closed on drop).
#[expect(unsafe_code, reason = "dup(2) of a descriptor we hold; the copy is owned by the result")]
fn inheritable(fd: BorrowedFd) -> std::io::Result<OwnedFd> {
    // SAFETY: dup takes an integer; a copy made by dup has no close-on-exec flag.
    let copy = unsafe { libc::dup(fd.as_raw_fd()) };
    if copy < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

/// The std command for `spec`; a jailed one runs the helper with the ruleset as
/// descriptor `ruleset`, which the helper then enforces on the real command. A
/// jailed `spec` without its ruleset ([`run`] and [`serve`] hand the helper one) is refused:
/// it would run unconfined.
#[expect(unsafe_code, reason = "pre_exec runs in the forked child; see the SAFETY note")]
fn command(spec: &Spec, ruleset: Option<RawFd>) -> Result<Command, ProcessError> {
    let mut command = match (&spec.sandbox, ruleset) {
        (Some(helper), Some(fd)) => {
            let mut c = Command::new(helper.program);
            c.args(&helper.args).arg(fd.to_string()).arg("--").arg(spec.program).args(spec.args);
            c
        }
        (None, _) => {
            let mut c = Command::new(spec.program);
            c.args(spec.args);
            c
        }
        (Some(_), None) => {
            return Err(ProcessError::Spawn {
                program: spec.program.display().to_string(),
                source: std::io::Error::other(
                    "a sandboxed command is started only by `process::run` or `process::serve`",
                ),
            });
        }
    };
    command.current_dir(spec.cwd).env_clear();
    for (k, v) in spec.env {
        command.env(k, v);
    }
    if spec.group == Group::Own {
        command.process_group(0);
    }
    if runs_code_in_child(spec) {
        let record = spec.pgid_record.map(AsRawFd::as_raw_fd);
        // SAFETY: the closure runs in the child between fork and exec. It allocates
        // nothing and calls only async-signal-safe functions (setsid, getpid, write)
        // on a descriptor the parent keeps open until spawn returns.
        unsafe {
            command.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(fd) = record {
                    let mut digits = [0u8; 24];
                    let text = decimal(libc::getpid() as u64, &mut digits);
                    libc::write(fd, text.as_ptr().cast(), text.len());
                }
                Ok(())
            });
        }
    }
    Ok(command)
}

/// Whether the child must run code of ours between fork and exec (which makes std
/// fork instead of using the much cheaper `posix_spawn`, whose cost does not grow with
/// the parent's memory): only a new session does. A jailed command's namespaces and
/// rules are the helper's work, after a `posix_spawn` of it.
fn runs_code_in_child(spec: &Spec) -> bool {
    spec.group == Group::Session
}

/// `n` in decimal with a trailing newline, written into `buf` without allocating.
fn decimal(mut n: u64, buf: &mut [u8; 24]) -> &[u8] {
    let mut at = buf.len() - 1;
    buf[at] = b'\n';
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

/// The poll loop: feeds stdin, drains both outputs, watches the child's exit and
/// the deadlines. Returns the kept streams, how it ended and whether output was
/// still held open by a process outside the group at the end.
fn gather(child: &mut Child, input: &[u8], limits: &Limits, mut io: Io) -> (Kept, Kept, Ended, bool) {
    let mut stdout = Kept::new(limits.head, limits.tail);
    let mut stderr = Kept::new(limits.head, limits.tail);
    let mut stdin = child.stdin.take();
    let mut out_pipe = child.stdout.take();
    let mut err_pipe = child.stderr.take();
    for fd in [stdin.as_ref().map(AsRawFd::as_raw_fd), out_pipe.as_ref().map(AsRawFd::as_raw_fd)]
        .into_iter()
        .chain([err_pipe.as_ref().map(AsRawFd::as_raw_fd)])
        .flatten()
    {
        set_nonblocking(fd);
    }
    let exit_fd = pidfd(child.id());
    let started = Instant::now();
    let mut last_output = started;
    let mut written = 0usize;
    let mut ended = Ended::Exited;
    let mut exited = false;
    let mut grace: Option<Instant> = None;
    let mut buf = vec![0u8; 64 * 1024];
    if stdin.is_some() && input.is_empty() {
        stdin = None;
    }
    loop {
        let open_outputs = out_pipe.is_some() || err_pipe.is_some();
        if exited && !open_outputs {
            return (stdout, stderr, ended, false);
        }
        let now = Instant::now();
        if let Some(g) = grace
            && now >= g
        {
            return (stdout, stderr, ended, open_outputs);
        }
        if grace.is_none() {
            let limit_passed = |limit: Option<Duration>, since: Instant| limit.is_some_and(|l| now >= since + l);
            let reason = if limit_passed(limits.timeout, started) {
                Some(Ended::TimedOut)
            } else if limit_passed(limits.idle, last_output) {
                Some(Ended::Idle)
            } else {
                None
            };
            if let Some(reason) = reason {
                ended = reason;
                kill_group(child.id());
                grace = Some(now + GRACE);
            }
        }
        // How long poll may sleep: until the nearest deadline.
        let mut wake: Option<Instant> = grace;
        if grace.is_none() {
            for candidate in [limits.timeout.map(|t| started + t), limits.idle.map(|t| last_output + t)] {
                wake = match (wake, candidate) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        if exit_fd.is_none() && !exited {
            // Without a pidfd the exit is noticed by looking every few milliseconds.
            let soon = now + Duration::from_millis(5);
            wake = Some(wake.map_or(soon, |w| w.min(soon)));
        }
        let timeout_ms = wake.map_or(-1, |w| w.saturating_duration_since(now).as_millis().min(60_000) as i32);
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(4);
        let slot = |fds: &mut Vec<libc::pollfd>, fd: Option<RawFd>, events: libc::c_short| {
            fd.map(|fd| {
                fds.push(libc::pollfd { fd, events, revents: 0 });
                fds.len() - 1
            })
        };
        let in_slot = slot(&mut fds, stdin.as_ref().map(AsRawFd::as_raw_fd), libc::POLLOUT);
        let out_slot = slot(&mut fds, out_pipe.as_ref().map(AsRawFd::as_raw_fd), libc::POLLIN);
        let err_slot = slot(&mut fds, err_pipe.as_ref().map(AsRawFd::as_raw_fd), libc::POLLIN);
        let exit_slot = slot(&mut fds, exit_fd.as_ref().filter(|_| !exited).map(AsRawFd::as_raw_fd), libc::POLLIN);
        poll(&mut fds, timeout_ms);
        let ready = |s: Option<usize>| s.is_some_and(|i| fds[i].revents != 0);

        if ready(in_slot)
            && let Some(pipe) = stdin.as_mut()
        {
            match pipe.write(&input[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
                // A child that stops reading (or exits) before taking all its input.
                Err(_) => written = input.len(),
            }
            if written >= input.len() {
                stdin = None;
            }
        }
        if ready(out_slot) {
            let mut stop = false;
            let got = drain(&mut out_pipe, &mut buf, |bytes| {
                stdout.push(bytes);
                record(&mut io.stdout_record, &mut stdout.recorded, limits.record_max, bytes);
                if let Some(on_stdout) = io.on_stdout.as_mut()
                    && !on_stdout(bytes)
                {
                    stop = true;
                }
            });
            if got {
                last_output = Instant::now();
            }
            if stop && grace.is_none() {
                ended = Ended::Stopped;
                kill_group(child.id());
                grace = Some(Instant::now() + GRACE);
            }
        }
        if ready(err_slot) {
            let got = drain(&mut err_pipe, &mut buf, |bytes| {
                stderr.push(bytes);
                record(&mut io.stderr_record, &mut stderr.recorded, limits.record_max, bytes);
            });
            if got {
                last_output = Instant::now();
            }
        }
        if !exited && (exit_fd.is_none() || ready(exit_slot)) && matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
            exited = true;
            // The command is over; whatever it left running in its group goes with it.
            kill_group(child.id());
            grace.get_or_insert(Instant::now() + GRACE);
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

/// Sends SIGKILL to the process group `pgid` (a group that is gone is fine).
#[expect(unsafe_code, reason = "kill(2) has no wrapper in std; it takes two integers and touches no memory")]
pub fn kill_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else { return };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) reads no memory of ours; a group that is gone only yields ESRCH.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// Asks process `pid` to end (SIGTERM).
#[expect(unsafe_code, reason = "kill(2) has no wrapper in std; it takes two integers and touches no memory")]
pub fn terminate(pid: u32) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| std::io::Error::from(ErrorKind::InvalidInput))?;
    // SAFETY: kill(2) reads no memory of ours.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes this process unreadable to others of the same user: not dumpable (so its
/// `/proc/<pid>/environ` and memory need CAP_SYS_PTRACE over its namespace, which a
/// sandboxed command never has) and with no core file. The driver holds API keys.
#[expect(unsafe_code, reason = "prctl and setrlimit(2) with integers and a struct on our stack")]
pub fn harden_self() {
    let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: integers, and `none` lives across the call.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::setrlimit(libc::RLIMIT_CORE, &none);
    }
}

/// Makes the calling thread run only when a CPU would otherwise be idle
/// (`SCHED_IDLE`): for work that must never slow a step, such as packing objects.
#[expect(unsafe_code, reason = "sched_setscheduler(2) with a struct on our stack")]
pub fn idle_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` lives across the call.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
    }
}

/// Makes this process the reaper of its orphaned descendants: a process a command
/// left behind (by leaving its group and outliving its parent) becomes our child,
/// where [`reap_strays`] finds it.
#[expect(unsafe_code, reason = "prctl(2) with integer arguments only")]
pub fn become_subreaper() {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes integers and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// Kills and reaps every child of ours but `keep` (a child here is a process a
/// command left behind, adopted because we are its subreaper), with its group when
/// it leads one.
pub fn reap_strays(keep: &[u32]) {
    let mut strays = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        strays.extend(children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).filter(|p| !keep.contains(p)));
    }
    for pid in strays {
        kill_stray(pid);
    }
}

#[expect(unsafe_code, reason = "getpgid, kill and waitpid take integers and a status we own")]
fn kill_stray(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: plain process syscalls on a child of ours; `status` lives across the call.
    unsafe {
        if libc::getpgid(pid) == pid {
            libc::kill(-pid, libc::SIGKILL);
        }
        libc::kill(pid, libc::SIGKILL);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
    }
}

/// Kills every running process (with its group, when it leads one) whose environment
/// holds every one of `marks` (`NAME=value`), and waits up to `patience` for them to
/// go; returns how many there were. For what a crashed driver's commands left behind,
/// whether or not their group made it into a record.
pub fn kill_marked(marks: &[&str], patience: Duration) -> usize {
    let own = std::process::id();
    let marked: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|&pid| pid != own && running(pid) && carries(pid, marks))
        .collect();
    for &pid in &marked {
        kill_stray(pid);
    }
    let until = Instant::now() + patience;
    while Instant::now() < until && marked.iter().any(|&pid| running(pid)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    marked.len()
}

fn carries(pid: u32, marks: &[&str]) -> bool {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let vars: Vec<&[u8]> = environ.split(|&b| b == 0).collect();
    marks.iter().all(|m| vars.contains(&m.as_bytes()))
}

/// The fields of `/proc/<pid>/stat` after the command name (`state ppid pgrp …`; the
/// name may hold spaces and parentheses), if the process exists.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Whether `pid` is a running process (not gone, not a zombie).
pub fn running(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|state| state != "Z"))
}

/// When process `pid` started, in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`, readable for any process): with its pid, what names it.
pub fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Whether some running member of group `pgid` has every one of `marks`
/// (`NAME=value`) in its environment: the group is the one that was recorded, not a
/// later one that got the same number.
pub fn group_carries(pgid: u32, marks: &[&str]) -> bool {
    group_members(pgid).into_iter().any(|pid| carries(pid, marks))
}

/// Waits until no process of group `pgid` runs, or `patience` passes.
pub fn await_group(pgid: u32, patience: Duration) {
    let until = Instant::now() + patience;
    while Instant::now() < until && !group_members(pgid).is_empty() {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The processes of group `pgid` that are still running (zombies, which only wait
/// to be reaped, are not counted), read from /proc.
pub(crate) fn group_members(pgid: u32) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Some(fields) = stat_fields(pid) else { continue };
        if fields.first().is_some_and(|s| s != "Z") && fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid) {
            members.push(pid);
        }
    }
    members
}

#[cfg(test)]
mod tests;
