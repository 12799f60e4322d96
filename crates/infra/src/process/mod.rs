//! Every child process the harness starts begins here: tool commands, the `command`
//! provider and detached drivers. A child gets exactly the environment it is handed
//! (nothing is inherited), its own process group or session, stdin closed or fed
//! from memory, and optionally a jail (it is then started through the sandbox
//! helper, `infra::sandbox`). While it runs, its output goes to
//! record files in full and only its head and tail stay in memory; a timeout or an
//! idle limit ends it; when it exits, whatever it left running in its group is
//! killed; and it is always reaped.

mod control;
mod gather;

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

#[cfg(test)]
use control::group_members;
pub use control::{
    await_group, become_subreaper, group_carries, harden_self, idle_priority, kill_group, kill_marked, reap_strays,
    running, start_time, terminate,
};
use gather::gather;

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
/// with `args`, then the numbers of the descriptors it inherits (copies of `handed`, for
/// the spawn's length), comma-separated in one argument, then `--` and the command.
pub struct Helper<'a> {
    pub(crate) program: &'a Path,
    pub(crate) args: Vec<OsString>,
    pub(crate) handed: Vec<BorrowedFd<'a>>,
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
    // The jail's rules, as descriptors the helper inherits for the spawn's length.
    let inherited = spec
        .sandbox
        .as_ref()
        .map(|h| h.handed.iter().map(|fd| inheritable(*fd)).collect::<std::io::Result<Vec<_>>>())
        .transpose()
        .map_err(spawn_err)?;
    let mut command = command(spec, inherited.as_deref())?;
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
    let inherited = spec
        .sandbox
        .as_ref()
        .map(|h| h.handed.iter().map(|fd| inheritable(*fd)).collect::<std::io::Result<Vec<_>>>())
        .transpose()
        .map_err(spawn_err)?;
    let mut command = command(spec, inherited.as_deref())?;
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

/// The std command for `spec`; a jailed one runs the helper with the descriptors
/// `handed`, from which the helper builds what it enforces on the real command. A
/// jailed `spec` without them ([`run`] and [`serve`] hand the helper its own) is refused:
/// it would run unconfined.
#[expect(unsafe_code, reason = "pre_exec runs in the forked child; see the SAFETY note")]
fn command(spec: &Spec, handed: Option<&[OwnedFd]>) -> Result<Command, ProcessError> {
    let mut command = match (&spec.sandbox, handed) {
        (Some(helper), Some(fds)) => {
            let numbers: Vec<String> = fds.iter().map(|fd| fd.as_raw_fd().to_string()).collect();
            let mut c = Command::new(helper.program);
            c.args(&helper.args).arg(numbers.join(",")).arg("--").arg(spec.program).args(spec.args);
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

#[cfg(test)]
mod tests;
