//! The sandbox helper: what `offshoot __sandbox [FLAGS] -- PROGRAM ARGS…` does. It
//! runs single-threaded, straight from `main`, before anything else.
//!
//! It dies with the driver (parent-death signal). With `--namespaces` it enters a
//! user namespace mapping only its own user and group (so no capability it holds
//! there reaches the driver's namespace), a PID and an IPC namespace, and without
//! network a network namespace whose loopback is up and leads nowhere. It then forks the
//! command's first process, which is PID 1 of the new namespace (so when it ends,
//! every process it left behind is killed by the kernel), dies with the helper,
//! leads a session of its own (no terminal to type into), limits its processes and
//! file sizes, enforces the Landlock ruleset, closes every other descriptor, installs
//! the seccomp filter, and execs the command. The helper waits for
//! it and exits as it did.

use std::ffi::{CString, OsStr, OsString};
use std::io::Write;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;

use super::enforce::{Landlock, enforce};
use super::seccomp;

/// The first argument that makes `offshoot` the sandbox helper.
pub const ARG: &str = "__sandbox";
/// The helper's argument that asks what this machine supports.
pub(crate) const PROBE: &str = "--probe";
/// The helper's argument that asks which offshoot it belongs to.
pub(crate) const VERSION: &str = "--version";

/// Which build of the helper this is: the package's version and a hash of the
/// sandbox's own source, so a helper left from another build of the same version (a
/// `cargo run` that rebuilt only `offshoot`, a copy beside an older one) is told apart.
pub(crate) const BUILD: &str = const_format_build();

/// FNV-1a over the sandbox's source files.
const SOURCE_HASH: u64 = {
    let parts: [&[u8]; 5] = [
        include_bytes!("helper.rs"),
        include_bytes!("enforce.rs"),
        include_bytes!("seccomp.rs"),
        include_bytes!("landlock.rs"),
        include_bytes!("mod.rs"),
    ];
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut p = 0;
    while p < parts.len() {
        let mut i = 0;
        while i < parts[p].len() {
            hash ^= parts[p][i] as u64;
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            i += 1;
        }
        p += 1;
    }
    hash
};

/// `<version> <hash as 16 hex digits>`, made at compile time.
const fn const_format_build() -> &'static str {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    const VERSION_BYTES: &[u8] = env!("CARGO_PKG_VERSION").as_bytes();
    const LEN: usize = VERSION_BYTES.len() + 1 + 16;
    const BYTES: [u8; LEN] = {
        let mut out = [0u8; LEN];
        let mut i = 0;
        while i < VERSION_BYTES.len() {
            out[i] = VERSION_BYTES[i];
            i += 1;
        }
        out[i] = b' ';
        let mut d = 0;
        while d < 16 {
            out[i + 1 + d] = HEX[((SOURCE_HASH >> (60 - 4 * d)) & 0xf) as usize];
            d += 1;
        }
        out
    };
    match std::str::from_utf8(&BYTES) {
        Ok(s) => s,
        Err(_) => "",
    }
}

/// What the helper was asked to do.
#[derive(Debug, Default, PartialEq)]
struct Plan {
    landlock: Landlock,
    namespaces: bool,
    network: bool,
    processes: Option<u64>,
    file_bytes: Option<u64>,
    parent: Option<i32>,
    /// Make every mount read-only but these (the command's writable places).
    read_only_but: Option<Vec<OsString>>,
    command: Vec<OsString>,
}

fn parse(args: Vec<OsString>) -> Result<Plan, String> {
    let mut plan = Plan { network: true, ..Plan::default() };
    let (mut landlock, mut access, mut fds) = (None, None, None);
    let mut it = args.into_iter();
    let number = |v: Option<OsString>, flag: &str| -> Result<u64, String> {
        v.and_then(|v| v.to_str().and_then(|s| s.parse().ok())).ok_or_else(|| format!("`{flag}` needs a number"))
    };
    let numbers = |v: Option<OsString>, flag: &str| -> Result<Vec<u64>, String> {
        let text = v.and_then(|v| v.into_string().ok()).ok_or_else(|| format!("`{flag}` needs numbers"))?;
        let parsed: Option<Vec<u64>> = text.split(',').filter(|n| !n.is_empty()).map(|n| n.parse().ok()).collect();
        parsed.ok_or_else(|| format!("`{flag}` needs numbers separated by commas"))
    };
    while let Some(arg) = it.next() {
        match arg.to_str() {
            Some("--landlock") => landlock = Some(numbers(it.next(), "--landlock")?),
            Some("--beneath") => access = Some(numbers(it.next(), "--beneath")?),
            Some("--beneath-fds") => fds = Some(numbers(it.next(), "--beneath-fds")?),
            Some("--namespaces") => plan.namespaces = true,
            Some("--no-network") => plan.network = false,
            Some("--processes") => plan.processes = Some(number(it.next(), "--processes")?),
            Some("--file-bytes") => plan.file_bytes = Some(number(it.next(), "--file-bytes")?),
            Some("--parent") => plan.parent = Some(number(it.next(), "--parent")? as i32),
            Some("--read-only") => plan.read_only_but = Some(Vec::new()),
            Some("--writable") => {
                let path = it.next().ok_or("`--writable` needs a path")?;
                plan.read_only_but.get_or_insert_with(Vec::new).push(path);
            }
            Some("--") => {
                plan.command = it.collect();
                break;
            }
            _ => return Err(format!("unknown argument `{}`", arg.to_string_lossy())),
        }
    }
    if plan.command.is_empty() {
        return Err("no command after `--`".into());
    }
    let Some([fs, net, scoped, read]) = landlock.and_then(|l| <[u64; 4]>::try_from(l).ok()) else {
        return Err("no Landlock ruleset (`--landlock FS,NET,SCOPED,READ`)".into());
    };
    let (access, fds) = (access.unwrap_or_default(), fds.unwrap_or_default());
    if access.len() != fds.len() {
        return Err(format!("{} rules' access for {} descriptors", access.len(), fds.len()));
    }
    let beneath = fds.into_iter().map(|fd| fd as RawFd).zip(access).collect();
    plan.landlock = Landlock { handled: [fs, net, scoped], read, beneath };
    Ok(plan)
}

/// Runs the helper with the arguments after [`ARG`]; never returns.
pub fn main(args: Vec<OsString>) -> ! {
    if args.first().is_some_and(|a| a == PROBE) {
        probe()
    }
    if args.first().is_some_and(|a| a == VERSION) {
        let _ = std::io::stdout().write_all(format!("{BUILD}\n").as_bytes());
        exit_now(0)
    }
    match parse(args) {
        Ok(plan) => run(&plan),
        Err(e) => fail(&format!("bad arguments: {e}"), 125),
    }
}

fn run(plan: &Plan) -> ! {
    if let Err(e) = die_with_parent(plan.parent) {
        fail(&format!("cannot follow the driver: {e}"), 125);
    }
    let (uid, gid) = (effective_uid(), effective_gid());
    if plan.namespaces
        && let Err(e) = enter_namespaces(uid, gid, plan.network)
    {
        fail(&format!("cannot enter the sandbox's namespaces: {e}"), 125);
    }
    let (alive_read, alive_write) = match pipe() {
        Ok(ends) => ends,
        Err(e) => fail(&format!("cannot make a pipe: {e}"), 125),
    };
    match fork() {
        Err(e) => fail(&format!("cannot start the command: {e}"), 125),
        Ok(0) => {
            close(alive_write);
            first_process(plan, uid, alive_read)
        }
        Ok(child) => {
            close(alive_read);
            // The command's output must end when the command's processes end.
            for fd in 0..3 {
                close(fd);
            }
            exit_as(wait(child))
        }
    }
}

/// The command's first process: PID 1 of the namespace when there is one.
fn first_process(plan: &Plan, uid: u32, alive: RawFd) -> ! {
    if set_parent_death_signal().is_err() || parent_gone(alive) {
        exit_now(125);
    }
    close(alive);
    let step = |what: &str, r: std::io::Result<()>| {
        if let Err(e) = r {
            fail(&format!("cannot {what}: {e}"), 125);
        }
    };
    step("lead a session of its own", new_session());
    if plan.namespaces {
        step("mount the sandbox's own /proc", own_proc());
    }
    if plan.namespaces && !plan.network {
        step("bring the sandbox's loopback up", loopback_up());
    }
    // Per PID namespace (Linux 6.14+; root is exempt from RLIMIT_NPROC) and per user
    // namespace (RLIMIT_NPROC counts the processes of the uid in it). Without
    // namespaces RLIMIT_NPROC would count every process of the user's, so none is set.
    if let (Some(n), true) = (plan.processes, plan.namespaces) {
        // The kernel refuses values below 301; the probe told the driver what holds.
        let _ = std::fs::write("/proc/sys/kernel/pid_max", (n + 1).max(301).to_string());
        step("limit processes", set_limit(libc::RLIMIT_NPROC, n));
    }
    if let Some(writable) = &plan.read_only_but {
        step("make the filesystem read-only", read_only_but(writable));
    }
    if let Some(n) = plan.file_bytes {
        step("limit file sizes", set_limit(libc::RLIMIT_FSIZE, n));
    }
    step("turn off core dumps", set_limit(libc::RLIMIT_CORE, 0));
    step("set no_new_privs", no_new_privs());
    if !plan.namespaces && uid == 0 {
        step("drop capabilities", drop_capabilities());
    }
    step("enforce the Landlock ruleset", enforce(&plan.landlock, plan.namespaces));
    close_from(3);
    step("install the seccomp filter", seccomp::install(&seccomp::filter(plan.network, plan.namespaces)));
    if !plan.namespaces {
        exec(&plan.command)
    }
    // PID 1 of the namespace stays a minimal init: the kernel spares PID 1 the
    // signals it has no handler for (a writer past the file size limit would get
    // EFBIG instead of SIGXFSZ, a pipe's reader SIGPIPE never), and orphans are
    // reaped here. When the command ends, this ends, and the namespace with it.
    match fork() {
        Err(e) => fail(&format!("cannot start the command: {e}"), 125),
        Ok(0) => exec(&plan.command),
        Ok(command) => {
            for fd in 0..3 {
                close(fd);
            }
            exit_as(reap_until(command))
        }
    }
}

/// Every mount read-only (chmod, chown and the like reach what Landlock cannot stop:
/// a file's metadata), but the `writable` places, each bound on itself first. Needs a
/// mount namespace of our own and `mount_setattr` (Linux 5.12).
fn read_only_but(writable: &[OsString]) -> std::io::Result<()> {
    // The working directory is entered again after: held from before, it would stay
    // on the mount under the bind.
    let cwd = std::fs::read_link("/proc/self/cwd")?;
    mount(None, "/", libc::MS_REC | libc::MS_PRIVATE)?;
    let mut bound = Vec::new();
    for path in writable {
        // A place that does not exist cannot be written anyway.
        if mount(Some(path.as_os_str()), path.as_os_str(), libc::MS_BIND | libc::MS_REC).is_ok() {
            bound.push(path);
        }
    }
    set_read_only(OsStr::new("/"), true)?;
    for path in bound {
        set_read_only(path, false)?;
    }
    change_dir(&cwd)
}

/// What `--probe` prints: whether namespaces can be entered here, and whether a
/// PID namespace can limit its processes.
fn probe() -> ! {
    let mut out = String::new();
    match enter_namespaces(effective_uid(), effective_gid(), false) {
        Err(e) => out.push_str(&format!("namespaces no {e}\npid_max no\nread_only no\n")),
        Ok(()) => match fork() {
            Ok(0) => {
                let now = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap_or_default();
                let limit = std::fs::write("/proc/sys/kernel/pid_max", now.trim()).is_ok();
                let read_only = read_only_but(&[]).is_ok();
                exit_now(i32::from(limit) | (i32::from(read_only) << 1))
            }
            Ok(child) => {
                let found = match wait(child) {
                    Status::Exited(code) => code,
                    Status::Signalled(_) => 0,
                };
                let yes = |bit: i32| if found & bit != 0 { "yes" } else { "no" };
                out.push_str(&format!("namespaces yes\npid_max {}\nread_only {}\n", yes(1), yes(2)));
            }
            Err(e) => out.push_str(&format!("namespaces no cannot fork in them: {e}\npid_max no\nread_only no\n")),
        },
    }
    let _ = std::io::stdout().write_all(out.as_bytes());
    exit_now(0)
}

fn fail(what: &str, code: i32) -> ! {
    let _ = writeln!(std::io::stderr(), "offshoot sandbox: {what}");
    exit_now(code)
}

fn enter_namespaces(uid: u32, gid: u32, network: bool) -> std::io::Result<()> {
    // System V IPC (shared memory, queues, semaphores) is per IPC namespace: without
    // one a command could read and write the host's segments, and leave its own.
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWNS;
    if !network {
        flags |= libc::CLONE_NEWNET;
    }
    unshare(flags)?;
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    Ok(())
}

enum Status {
    Exited(i32),
    Signalled(i32),
}

fn exit_as(status: Status) -> ! {
    match status {
        Status::Exited(code) => exit_now(code),
        Status::Signalled(signal) => {
            raise_default(signal);
            exit_now(128 + signal)
        }
    }
}

fn to_c(arg: &OsString) -> CString {
    CString::new(arg.as_bytes()).unwrap_or_default()
}

fn exec(command: &[OsString]) -> ! {
    let args: Vec<CString> = command.iter().map(to_c).collect();
    let err = execvp(&args);
    let name = command.first().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
    fail(&format!("cannot run `{name}`: {err}"), if err.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 })
}

// The system calls, each wrapped once.

fn check(rc: libc::c_long) -> std::io::Result<()> {
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

#[expect(unsafe_code, reason = "geteuid(2) takes nothing and cannot fail")]
pub(super) fn effective_uid() -> u32 {
    // SAFETY: no arguments, no memory.
    unsafe { libc::geteuid() }
}

#[expect(unsafe_code, reason = "getegid(2) takes nothing and cannot fail")]
fn effective_gid() -> u32 {
    // SAFETY: no arguments, no memory.
    unsafe { libc::getegid() }
}

#[expect(unsafe_code, reason = "unshare(2) takes flags only")]
fn unshare(flags: libc::c_int) -> std::io::Result<()> {
    // SAFETY: integer argument; affects only this single-threaded process.
    check(unsafe { libc::unshare(flags) }.into())
}

#[expect(unsafe_code, reason = "prctl and getppid take integers only")]
fn die_with_parent(parent: Option<i32>) -> std::io::Result<()> {
    set_parent_death_signal()?;
    // The driver may have died before the signal was asked for.
    // SAFETY: no arguments.
    if parent.is_some_and(|p| unsafe { libc::getppid() } != p) {
        return Err(std::io::Error::other("the driver is gone"));
    }
    Ok(())
}

#[expect(unsafe_code, reason = "prctl(2) with integer arguments")]
fn set_parent_death_signal() -> std::io::Result<()> {
    // SAFETY: integers only.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) }.into())
}

#[expect(unsafe_code, reason = "poll(2) on one descriptor we own, with a struct on our stack")]
fn parent_gone(alive: RawFd) -> bool {
    let mut fd = libc::pollfd { fd: alive, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd that lives across the call; zero timeout.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    n > 0 && fd.revents & (libc::POLLHUP | libc::POLLIN) != 0
}

#[expect(unsafe_code, reason = "pipe2(2) writes two integers into an array we own")]
fn pipe() -> std::io::Result<(RawFd, RawFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: the array has room for the two descriptors.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }.into())?;
    Ok((fds[0], fds[1]))
}

#[expect(unsafe_code, reason = "fork(2) in a single-threaded process")]
fn fork() -> std::io::Result<libc::pid_t> {
    // SAFETY: the helper has one thread, so the child may run ordinary code.
    let pid = unsafe { libc::fork() };
    check(pid.into())?;
    Ok(pid)
}

#[expect(unsafe_code, reason = "waitpid(2) with a status integer we own")]
fn wait(child: libc::pid_t) -> Status {
    let mut status = 0;
    loop {
        // SAFETY: `status` lives across the call.
        let rc = unsafe { libc::waitpid(child, &mut status, 0) };
        if rc == child {
            break;
        }
        if rc < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return Status::Exited(125);
        }
    }
    decoded(status)
}

/// What a wait status says of how a process ended.
fn decoded(status: libc::c_int) -> Status {
    if libc::WIFSIGNALED(status) {
        Status::Signalled(libc::WTERMSIG(status))
    } else {
        Status::Exited(libc::WEXITSTATUS(status))
    }
}

#[expect(unsafe_code, reason = "close(2) on a descriptor number")]
fn close(fd: RawFd) {
    // SAFETY: closing a number we were handed or made; nothing else uses it here.
    unsafe {
        libc::close(fd);
    }
}

#[expect(unsafe_code, reason = "close_range(2) takes integers")]
fn close_from(first: u32) {
    // SAFETY: integers only; the descriptors above `first` are not used again.
    unsafe {
        libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32);
    }
}

#[expect(unsafe_code, reason = "mount(2) with C strings we own for the call")]
fn mount(source: Option<&OsStr>, target: impl AsRef<OsStr>, flags: libc::c_ulong) -> std::io::Result<()> {
    let target =
        CString::new(target.as_ref().as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let source = source
        .map(|s| CString::new(s.as_bytes()))
        .transpose()
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let source_ptr = source.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: the strings outlive the call; a null type and data are allowed for binds
    // and propagation changes.
    check(unsafe { libc::mount(source_ptr, target.as_ptr(), std::ptr::null(), flags, std::ptr::null()) }.into())
}

/// A `proc` of the sandbox's own PID namespace over `/proc`: the command sees its own
/// processes, never the host's (their command lines and environments). The mount
/// namespace is ours, its mounts made private first so nothing of this reaches the host.
#[expect(unsafe_code, reason = "mount(2) with static C strings")]
fn own_proc() -> std::io::Result<()> {
    mount(None, "/", libc::MS_REC | libc::MS_PRIVATE)?;
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: the strings are static and NUL-terminated; proc takes no data.
    check(unsafe { libc::mount(c"proc".as_ptr(), c"/proc".as_ptr(), c"proc".as_ptr(), flags, std::ptr::null()) }.into())
}

/// Sets (or clears) read-only on the mount at `path` and every mount below it.
#[expect(unsafe_code, reason = "mount_setattr(2) with a C string and a struct on our stack")]
fn set_read_only(path: &OsStr, read_only: bool) -> std::io::Result<()> {
    #[repr(C)]
    struct MountAttr {
        set: u64,
        clear: u64,
        propagation: u64,
        userns_fd: u64,
    }
    const RDONLY: u64 = 1;
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    let (set, clear) = if read_only { (RDONLY, 0) } else { (0, RDONLY) };
    let attr = MountAttr { set, clear, propagation: 0, userns_fd: 0 };
    let path = CString::new(path.as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `path` and `attr` outlive the call; the size is the struct's.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            AT_RECURSIVE,
            &attr as *const MountAttr,
            size_of::<MountAttr>(),
        )
    })
}

/// Reaps every process that ends (PID 1 adopts orphans) until `command` does; its
/// status.
#[expect(unsafe_code, reason = "waitpid(2) with a status integer we own")]
fn reap_until(command: libc::pid_t) -> Status {
    loop {
        let mut status = 0;
        // SAFETY: `status` lives across the call.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid == command {
            return decoded(status);
        }
        if pid < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return Status::Exited(125);
        }
    }
}

#[expect(unsafe_code, reason = "chdir(2) with a C string we own for the call")]
fn change_dir(path: &std::path::Path) -> std::io::Result<()> {
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: the string outlives the call.
    check(unsafe { libc::chdir(path.as_ptr()) }.into())
}

#[expect(unsafe_code, reason = "setsid(2) takes nothing")]
fn new_session() -> std::io::Result<()> {
    // SAFETY: no arguments.
    check(unsafe { libc::setsid() }.into())
}

#[expect(unsafe_code, reason = "setrlimit(2) reads a struct on our stack")]
fn set_limit(resource: libc::__rlimit_resource_t, value: u64) -> std::io::Result<()> {
    let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
    // SAFETY: `limit` lives across the call.
    check(unsafe { libc::setrlimit(resource, &limit) }.into())
}

#[expect(unsafe_code, reason = "prctl(2) with integer arguments")]
fn no_new_privs() -> std::io::Result<()> {
    // SAFETY: integers only.
    check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }.into())
}

/// Root without a user namespace of its own: every capability goes (bounding,
/// ambient, effective, permitted, inheritable), so it cannot trace or read the
/// driver, nor raise a limit.
#[expect(unsafe_code, reason = "prctl and capset(2) with structs on our stack")]
fn drop_capabilities() -> std::io::Result<()> {
    for cap in 0..64 {
        // SAFETY: integers only; capabilities this kernel does not know answer EINVAL.
        unsafe {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
    }
    // SAFETY: integers only.
    check(unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) }.into())?;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let header = Header { version: VERSION_3, pid: 0 };
    let data = [Data { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: both structs live across the call and have the kernel's layout.
    check(unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) })
}

/// Brings `lo` up in the sandbox's network namespace (so local servers work).
#[expect(unsafe_code, reason = "socket and ioctl(2) with an ifreq on our stack")]
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: integers only.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    check(sock.into())?;
    // SAFETY: an all-zero ifreq is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in req.ifr_name.iter_mut().zip(b"lo") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: `req` lives across both calls; the kernel reads and writes only it.
    let result = unsafe {
        check(libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req).into()).and_then(|()| {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            check(libc::ioctl(sock, libc::SIOCSIFFLAGS, &req).into())
        })
    };
    close(sock);
    result
}

#[expect(unsafe_code, reason = "execvp(3) with a null-terminated array of C strings we own")]
fn execvp(args: &[CString]) -> std::io::Error {
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    reset_signals();
    // SAFETY: every pointer is to a live C string, the array ends with null.
    unsafe {
        libc::execvp(argv[0], argv.as_ptr());
    }
    std::io::Error::last_os_error()
}

/// The command starts with default signal handling: Rust ignores SIGPIPE, and an
/// ignored signal stays ignored across exec.
#[expect(unsafe_code, reason = "signal and sigprocmask(2) with a set on our stack")]
fn reset_signals() {
    // SAFETY: integers and a sigset we own.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

#[expect(unsafe_code, reason = "signal and raise(3) with integers")]
fn raise_default(signal: i32) {
    reset_signals();
    // SAFETY: integers only.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

fn exit_now(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_is_read_from_the_arguments_the_driver_builds() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let plan = parse(args(&[
            "--landlock",
            "7,3,0,12",
            "--beneath",
            "12,15",
            "--beneath-fds",
            "5,6",
            "--namespaces",
            "--no-network",
            "--processes",
            "1024",
            "--file-bytes",
            "99",
            "--parent",
            "42",
            "--writable",
            "/w",
            "--writable",
            "/v",
            "--",
            "sh",
            "-c",
            "echo --namespaces",
        ]))
        .expect("parses");
        assert_eq!(
            plan,
            Plan {
                landlock: Landlock { handled: [7, 3, 0], read: 12, beneath: vec![(5, 12), (6, 15)] },
                namespaces: true,
                network: false,
                processes: Some(1024),
                file_bytes: Some(99),
                parent: Some(42),
                read_only_but: Some(vec!["/w".into(), "/v".into()]),
                command: args(&["sh", "-c", "echo --namespaces"]),
            }
        );
        assert_eq!(parse(args(&["--landlock", "3"])), Err("no command after `--`".into()));
        assert_eq!(parse(args(&["--", "sh"])), Err("no Landlock ruleset (`--landlock FS,NET,SCOPED,READ`)".into()));
        let unpaired = parse(args(&["--landlock", "1,0,0,1", "--beneath", "1", "--beneath-fds", "3,4", "--", "sh"]));
        assert_eq!(unpaired, Err("1 rules' access for 2 descriptors".into()));
        assert_eq!(parse(args(&["--bogus"])), Err("unknown argument `--bogus`".into()));
    }
}
