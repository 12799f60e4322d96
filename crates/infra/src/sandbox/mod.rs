//! Confinement for tool commands. A confined command is started through the sandbox
//! helper — this same binary, run as `offshoot __sandbox …` — which puts it in a
//! user and PID namespace of its own (and a network namespace without network),
//! limits its processes and file sizes, enforces the Landlock ruleset the driver
//! built and, without network, a seccomp filter, and then execs it. The command is
//! PID 1 of its namespace: when it ends, or when the driver dies, everything it
//! started dies with it. Where the kernel refuses user namespaces the helper runs
//! the command with what still holds (no capabilities, Landlock, seccomp), and the
//! driver says so once.

mod enforce;
pub mod helper;
mod landlock;
pub(crate) mod seccomp;

use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use super::process::Helper;

pub use landlock::{Rules, rules};

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("this kernel does not support Landlock, which `sandbox = \"workspace-write\"` needs")]
    Unsupported,
    #[error("cannot open {} for the Landlock ruleset: {source}", path.display())]
    Path { path: PathBuf, source: std::io::Error },
}

/// What a confined command may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    /// Read, write, create and remove below these.
    pub read_write: Vec<PathBuf>,
    /// Read below these.
    pub read: Vec<PathBuf>,
    /// Nothing inside these directories is readable but what the lists above allow;
    /// everything outside them is.
    pub hidden: Vec<PathBuf>,
    /// Whether the command may reach the network.
    pub network: bool,
    /// At most this many processes at once in the command's tree.
    pub processes: u64,
    /// No file the command writes may grow past this many bytes.
    pub file_bytes: u64,
}

/// The Landlock ABI of this kernel (0 without Landlock). `cap` lowers it (to test
/// older or missing support); it never raises it.
pub fn abi(cap: Option<i32>) -> i32 {
    let found = kernel_abi();
    cap.map_or(found, |c| found.min(c))
}

#[expect(unsafe_code, reason = "landlock_create_ruleset(2) asked only for its version: no pointer is read")]
fn kernel_abi() -> i32 {
    // SAFETY: with a null attribute, size 0 and LANDLOCK_CREATE_RULESET_VERSION the
    // call reads no memory and returns the ABI version (or an error).
    let version = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) };
    i32::try_from(version).unwrap_or(0).max(0)
}

/// What this machine lets the helper do, found by running it once ([`probe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// User, PID, IPC, mount and network namespaces; else why not.
    pub namespaces: Result<(), String>,
    /// A process limit inside a PID namespace (`pid_max` per namespace, Linux 6.14).
    pub(crate) process_limit: bool,
    /// Every mount made read-only but the writable places (`mount_setattr`, 5.12).
    pub read_only: bool,
}

impl Support {
    /// As on a machine without user namespaces (for tests).
    pub fn without_namespaces(why: &str) -> Support {
        Support { namespaces: Err(why.to_owned()), process_limit: false, read_only: false }
    }

    /// What the command loses here, in words, if anything (`abi`: Landlock's).
    pub fn losses(&self, running_as_root: bool, abi: i32) -> Option<String> {
        let mut lost: Vec<String> = Vec::new();
        if let Err(why) = &self.namespaces {
            lost.push(format!("user namespaces are unavailable ({why}): commands run without namespaces of their own (with all capabilities dropped), so a process a command leaves behind can outlive a killed driver, commands share System V IPC with your processes, no process limit holds, and `network = false` refuses every socket but socket pairs"));
            if abi < 6 {
                lost.push(format!(
                    "with Landlock ABI {abi} (6 scopes signals) commands can signal your processes, the driver included"
                ));
            }
        } else if !self.process_limit && running_as_root {
            lost.push(
                "this kernel cannot limit processes per PID namespace (Linux 6.14): as root, a command's processes are not limited".into(),
            );
        }
        if !self.read_only {
            lost.push("the filesystem cannot be made read-only around commands (it needs a mount namespace and Linux 5.12): they can change the modes and owners of files they can reach, yours included".into());
        }
        (!lost.is_empty()).then(|| lost.join("; "))
    }
}

/// A confinement ready to be applied to every command: its Landlock rules, opened
/// once, and how the helper is to be run.
#[derive(Debug)]
pub struct Jail {
    /// This binary, which runs as the helper.
    pub helper: PathBuf,
    pub rules: Rules,
    pub namespaces: bool,
    pub network: bool,
    pub processes: u64,
    pub file_bytes: u64,
    /// With a read-only filesystem around the command: the places it may write.
    pub read_only_but: Option<Vec<PathBuf>>,
}

impl Jail {
    /// How the helper starts a command in this jail: its arguments up to the rules'
    /// descriptors, which it is handed.
    pub fn helper(&self) -> Helper<'_> {
        self.helper_lending(false)
    }

    /// [`Jail::helper`], the network lent to this one command when `network` says so
    /// (a person's yes to an escalation; see [`Jail::can_lend_network`]).
    pub fn helper_lending(&self, network: bool) -> Helper<'_> {
        let mut args: Vec<OsString> = vec![helper::ARG.into()];
        if self.namespaces {
            args.push("--namespaces".into());
        }
        if !self.network && !network {
            args.push("--no-network".into());
        }
        args.extend(["--processes".into(), self.processes.to_string().into()]);
        args.extend(["--file-bytes".into(), self.file_bytes.to_string().into()]);
        args.extend(["--parent".into(), std::process::id().to_string().into()]);
        if let Some(writable) = &self.read_only_but {
            args.push("--read-only".into());
            for path in writable {
                args.extend(["--writable".into(), path.as_os_str().to_owned()]);
            }
        }
        let [fs, net, scoped] = self.rules.handled;
        args.extend(["--landlock".into(), format!("{fs},{net},{scoped},{}", self.rules.read).into()]);
        let access: Vec<String> = self.rules.beneath.iter().map(|(_, a)| a.to_string()).collect();
        args.extend(["--beneath".into(), access.join(",").into(), "--beneath-fds".into()]);
        Helper { program: &self.helper, args, handed: self.rules.beneath.iter().map(|(fd, _)| fd.as_fd()).collect() }
    }
}

impl Jail {
    /// Whether one command may be given the network this jail denies: only when a
    /// network namespace is what denies it (Landlock's own network rules, without
    /// namespaces, are fixed when the jail is built).
    pub fn can_lend_network(&self) -> bool {
        self.namespaces && self.rules.handled[1] == 0
    }
}

/// Whether this process runs as root (then a command's process limit needs the
/// PID namespace's own limit, and without user namespaces its capabilities go).
pub fn running_as_root() -> bool {
    helper::effective_uid() == 0
}

/// The arguments that make the helper report what this machine supports.
fn probe_args() -> Vec<OsString> {
    vec![helper::ARG.into(), helper::PROBE.into()]
}

/// Reads what the helper's probe printed.
fn parse_probe(output: &str) -> Support {
    let mut support = Support::without_namespaces("the sandbox helper did not answer");
    for line in output.lines() {
        match line.split_once(' ') {
            Some(("namespaces", "yes")) => support.namespaces = Ok(()),
            Some(("namespaces", why)) => support.namespaces = Err(why.trim_start_matches("no ").to_owned()),
            Some(("pid_max", answer)) => support.process_limit = answer == "yes",
            Some(("read_only", answer)) => support.read_only = answer == "yes",
            _ => {}
        }
    }
    support
}

/// The name of the helper's own binary, installed beside `offshoot`.
pub const HELPER_BINARY: &str = "offshoot-sandbox";

/// The program that runs as the sandbox helper of the offshoot binary `exe`: the
/// [`HELPER_BINARY`] beside it when there is one of the same build (a command's start
/// then loads a small program, not the whole harness) that this user or root owns and
/// nobody else may write, else `exe` itself. Asked once per process.
pub fn helper_program(exe: &Path) -> PathBuf {
    static CHOSEN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    CHOSEN.get_or_init(|| choose_helper(exe)).clone()
}

/// [`helper_program`], asked again.
fn choose_helper(exe: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let beside = exe.with_file_name(HELPER_BINARY);
    // Never one found from a working directory, nor one another user could have put
    // or changed there.
    let trusted = exe.is_absolute()
        && std::fs::symlink_metadata(&beside).is_ok_and(|m| {
            m.is_file() && (m.uid() == helper::effective_uid() || m.uid() == 0) && m.mode() & 0o022 == 0
        });
    let args = [OsStr::new(helper::ARG), OsStr::new(helper::VERSION)];
    let same = trusted && ask(&beside, &args).is_ok_and(|said| said.trim() == helper::BUILD);
    if same { beside } else { exe.to_owned() }
}

/// Runs the helper's probe (`helper` is this binary) and reads its answer.
pub fn probe(helper: &Path) -> Support {
    let args = probe_args();
    let args: Vec<&OsStr> = args.iter().map(OsString::as_os_str).collect();
    match ask(helper, &args) {
        Ok(said) => parse_probe(&said),
        Err(e) => Support::without_namespaces(&format!("the sandbox helper did not start: {e}")),
    }
}

/// What `program` with `args` printed, run unconfined with nothing of ours, within
/// ten seconds.
fn ask(program: &Path, args: &[&OsStr]) -> Result<String, String> {
    if !std::fs::metadata(program).is_ok_and(|m| m.is_file()) {
        return Err(format!("{} is not a file", program.display()));
    }
    let spec = super::process::Spec {
        program,
        args,
        cwd: Path::new("/"),
        env: &[],
        group: super::process::Group::Own,
        stdin: None,
        sandbox: None,
        pgid_record: None,
    };
    let limits = super::process::Limits {
        head: 4096,
        tail: 0,
        record_max: 0,
        timeout: Some(std::time::Duration::from_secs(10)),
        idle: None,
    };
    let done = super::process::run(&spec, &limits, super::process::Io::default()).map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&done.stdout.head).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A directory of its own under the temporary one, made empty.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("offshoot-helper-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch");
        dir
    }

    /// A program beside `exe` named as the helper, printing `said` when asked.
    fn beside(exe: &Path, said: &str) {
        let path = exe.with_file_name(HELPER_BINARY);
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, format!("#!/bin/sh\n[ \"$1 $2\" = \"__sandbox --version\" ] && echo {said}\n"))
            .expect("helper");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("mode");
    }

    /// [`choose_helper`], asked again for a moment while it does not answer `want`: a
    /// script just written cannot be run while a process another test thread forked
    /// still holds it open for writing (ETXTBSY), which reads as no helper.
    fn settled_choice(exe: &Path, want: &Path) -> PathBuf {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let chosen = choose_helper(exe);
            if chosen == want || std::time::Instant::now() > until {
                return chosen;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    #[test]
    fn the_helper_beside_is_used_only_when_it_is_this_build_and_only_ours_to_write() {
        let dir = scratch("choose");
        let exe = dir.join("offshoot");
        let helper = dir.join(HELPER_BINARY);
        // None beside: this binary.
        assert_eq!(choose_helper(&exe), exe);
        // Another version beside (an upgrade that replaced only `offshoot`), or this
        // version of another build (`cargo run` rebuilt only `offshoot`): this binary.
        beside(&exe, "0.0.0-other");
        assert_eq!(choose_helper(&exe), exe);
        beside(&exe, env!("CARGO_PKG_VERSION"));
        assert_eq!(choose_helper(&exe), exe);
        // A directory by that name: this binary.
        std::fs::remove_file(&helper).expect("remove");
        std::fs::create_dir(&helper).expect("dir");
        assert_eq!(choose_helper(&exe), exe);
        std::fs::remove_dir(&helper).expect("remove");
        // This build beside: the helper.
        beside(&exe, helper::BUILD);
        assert_eq!(settled_choice(&exe, &helper), helper);
        // The same, but others may write it, or named from a relative path: this binary.
        std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o777)).expect("mode");
        assert_eq!(choose_helper(&exe), exe);
        std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).expect("mode");
        let relative = Path::new("offshoot");
        assert_eq!(choose_helper(relative), relative);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
