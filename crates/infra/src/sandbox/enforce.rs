//! The Landlock ruleset the sandbox helper enforces: built in the command's own mount
//! namespace from the rules the driver opened and handed over, with the command's own
//! `/proc` added (a mount only that namespace has).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// The Landlock ruleset to build and enforce: its handled rights
/// (`landlock_ruleset_attr`), the rights that only read, and each granted path as a
/// descriptor the helper inherited with the access it is granted.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Landlock {
    pub(super) handled: [u64; 3],
    pub(super) read: u64,
    pub(super) beneath: Vec<(RawFd, u64)>,
}

/// Builds the ruleset from the rules handed over — and, in the sandbox's own mount
/// namespace, one for its own `/proc` (read only) — and enforces it on this process.
pub(super) fn enforce(landlock: &Landlock, own_proc: bool) -> std::io::Result<()> {
    let ruleset = create_ruleset(&landlock.handled)?;
    let granted = landlock.beneath.iter().try_for_each(|(fd, access)| add_rule(&ruleset, *fd, *access));
    let proc_granted = match own_proc {
        true => std::fs::File::open("/proc").and_then(|proc| add_rule(&ruleset, proc.as_raw_fd(), landlock.read)),
        false => Ok(()),
    };
    granted.and(proc_granted).and_then(|()| restrict_self(ruleset.as_raw_fd()))
}

/// A new Landlock ruleset handling `handled` (filesystem, network, scope rights).
#[expect(unsafe_code, reason = "landlock_create_ruleset(2) with a struct on our stack; the result is a new descriptor")]
fn create_ruleset(handled: &[u64; 3]) -> std::io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    // The struct grew a field per ABI: its size says which the kernel is asked to read.
    let size = match handled {
        [_, _, scoped] if *scoped != 0 => 24usize,
        [_, net, _] if *net != 0 => 16,
        _ => 8,
    };
    // SAFETY: the pointer and size describe `handled`, which outlives the call.
    let fd = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, handled.as_ptr(), size, 0u32) };
    check(fd)?;
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Grants `access` beneath the directory (or file) `parent` in `ruleset`.
#[expect(unsafe_code, reason = "landlock_add_rule(2) with a packed struct on our stack")]
fn add_rule(ruleset: &OwnedFd, parent: RawFd, access: u64) -> std::io::Result<()> {
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    const RULE_PATH_BENEATH: libc::c_int = 1;
    if access == 0 {
        return Ok(());
    }
    let attr = PathBeneath { allowed_access: access, parent_fd: parent };
    // SAFETY: `attr` outlives the call; the kernel reads the packed struct's 12 bytes.
    check(unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &attr as *const PathBeneath,
            0u32,
        )
    })
}

#[expect(unsafe_code, reason = "landlock_restrict_self(2) takes a descriptor and flags")]
fn restrict_self(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: integers only.
    check(unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) })
}

fn check(rc: libc::c_long) -> std::io::Result<()> {
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}
