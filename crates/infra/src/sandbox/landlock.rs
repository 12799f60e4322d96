//! The Landlock rules of a confinement. They are opened once in the driver (a
//! descriptor for each path the command may reach, with its access) and handed to the
//! sandbox helper, which builds the ruleset from them in the command's own mount
//! namespace — there it adds the command's own `/proc`, a mount no driver can open — and
//! enforces it just before the command execs, so the command and everything it starts
//! can write only where the confinement says, read nothing inside the hidden
//! directories but what it allows, use no TCP without network, and signal or reach the
//! abstract sockets of no process outside the sandbox.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use super::{Confinement, SandboxError};

use landlock::{ABI, Access, AccessFs, AccessNet, Scope};

/// The ABI whose rights we ask for; newer kernels enforce them all, older ones as
/// many as they know (what an older kernel cannot enforce is said at the driver's
/// start, or held by the namespaces and the seccomp filter instead).
const TARGET: ABI = ABI::V6;

/// What a ruleset handles and the paths it grants, each opened (`O_PATH`) with the
/// access it is granted; read-only rights are `read`.
#[derive(Debug)]
pub struct Rules {
    /// Handled filesystem, network and scope rights (`landlock_ruleset_attr`).
    pub handled: [u64; 3],
    /// The rights that only read, of those handled (the command's own `/proc` gets them).
    pub read: u64,
    pub beneath: Vec<(OwnedFd, u64)>,
}

/// The rules for `c` on a kernel with Landlock ABI `abi` (capped, for tests of older
/// kernels: it decides the network and scope rights; the filesystem rights are those
/// this kernel knows, as the Landlock crate's best effort would ask). `own_network`:
/// the command will run in a network namespace of its own (whose loopback it may then
/// use freely).
pub fn rules(c: &Confinement, abi: i32, own_network: bool) -> Result<Rules, SandboxError> {
    if abi < 1 {
        return Err(SandboxError::Unsupported);
    }
    let known = AccessFs::from_all(TARGET) & AccessFs::from_all(ABI::from(super::abi(None)));
    let handled_fs = known.bits();
    // Without a network namespace, besides the seccomp filter: no TCP at all.
    let handled_net = match !c.network && !own_network && abi >= 4 {
        true => (AccessNet::BindTcp | AccessNet::ConnectTcp).bits(),
        false => 0,
    };
    let scoped = if abi >= 6 { (Scope::Signal | Scope::AbstractUnixSocket).bits() } else { 0 };
    let read = AccessFs::from_read(TARGET).bits() & handled_fs;
    let mut beneath = Vec::new();
    // A file (not a directory) takes only the rights a file can have.
    let file_rights = AccessFs::from_file(TARGET).bits();
    // `listed`: found by walking the directories around the hidden ones, where an
    // entry may vanish, or become a link, before it is opened: it is then left out
    // (the rules grant less, never more, than the walk saw).
    let mut grant = |path: &Path, access: u64, listed: bool| -> Result<(), SandboxError> {
        let opened = named(path, listed).map_err(|source| SandboxError::Path { path: path.to_owned(), source })?;
        if let Some((fd, is_dir)) = opened {
            beneath.push((fd, if is_dir { access } else { access & file_rights }));
        }
        Ok(())
    };
    for path in outside(&c.hidden) {
        grant(&path, read, true)?;
    }
    for path in &c.read {
        grant(path, read, false)?;
    }
    for path in c.read_write.iter().map(PathBuf::as_path).chain([Path::new("/dev/null")]) {
        grant(path, handled_fs, false)?;
    }
    Ok(Rules { handled: [handled_fs, handled_net, scoped], read, beneath })
}

/// `path`, opened to name it in a rule, and whether it is a directory; `None` for an
/// entry the walk `listed` that is gone or is a link by now.
fn named(path: &Path, listed: bool) -> std::io::Result<Option<(OwnedFd, bool)>> {
    let fd = match open_path(path, !listed) {
        Err(e) if listed && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        opened => opened?,
    };
    let kind = std::fs::File::from(fd.try_clone()?).metadata()?.file_type();
    Ok((!kind.is_symlink()).then_some((fd, kind.is_dir())))
}

/// `path`, opened to name it in a rule (no access to its content); a link at its end
/// is followed only when `follow`.
fn open_path(path: &Path, follow: bool) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = libc::O_PATH | libc::O_CLOEXEC | if follow { 0 } else { libc::O_NOFOLLOW };
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path)?;
    Ok(file.into())
}

/// Every path beside the ancestors of the `hidden` directories, from the root down:
/// together they are everything outside them and their ancestors' own entries
/// (Landlock grants by hierarchy, so "all but these directories" is spelled out
/// this way).
fn outside(hidden: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    // A directory that holds a hidden one somewhere below it is opened up entry by
    // entry; any other entry is granted whole.
    let holds_hidden = |p: &Path| hidden.iter().any(|h| h.starts_with(p) && h != p);
    let mut open = vec![PathBuf::from("/")];
    while let Some(dir) = open.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            // A link is granted by what it leads to (and may lead to what no rule can
            // hold, as `/dev/stdin` to a pipe).
            if hidden.contains(&path) || entry.file_type().is_ok_and(|t| t.is_symlink()) {
                continue;
            }
            if holds_hidden(&path) {
                open.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_entry_gone_or_turned_link_is_left_out_and_a_configured_one_is_an_error() {
        let root = std::env::temp_dir().join(format!("offshoot-named-{}", std::process::id()));
        std::fs::create_dir_all(root.join("dir")).expect("dirs");
        let _ = std::os::unix::fs::symlink(root.join("dir"), root.join("link"));
        assert!(named(&root.join("gone"), true).expect("gone").is_none());
        assert!(named(&root.join("link"), true).expect("link").is_none());
        assert!(named(&root.join("dir"), true).expect("dir").is_some_and(|(_, dir)| dir));
        assert!(named(&root.join("gone"), false).is_err(), "a configured path that is missing is an error");
        assert!(named(&root.join("link"), false).expect("followed").is_some_and(|(_, dir)| dir));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn everything_outside_the_hidden_directory_is_listed_once() {
        let root = std::env::temp_dir().join(format!("offshoot-sandbox-{}", std::process::id()));
        std::fs::create_dir_all(root.join("ws/agents")).expect("dirs");
        std::fs::create_dir_all(root.join("beside")).expect("dirs");
        std::fs::create_dir_all(root.join("data/workspaces/other")).expect("dirs");
        std::fs::create_dir_all(root.join("data/template")).expect("dirs");
        let _ = std::os::unix::fs::symlink("/proc/self/fd/0", root.join("stdin"));
        let listed = outside(&[root.join("ws"), root.join("data/workspaces")]);
        assert!(listed.contains(&root.join("beside")));
        assert!(listed.contains(&root.join("data/template")));
        assert!(!listed.contains(&root.join("stdin")), "a link is granted by where it leads");
        assert!(!listed.iter().any(|p| p.starts_with(root.join("ws"))));
        assert!(!listed.iter().any(|p| p.starts_with(root.join("data/workspaces"))));
        assert!(!listed.contains(&root) && !listed.contains(&root.join("data")));
        assert!(listed.contains(&PathBuf::from("/etc")));
        assert_eq!(listed.iter().filter(|p| p.as_path() == Path::new("/etc")).count(), 1);
        let _ = std::fs::remove_dir_all(&root);
    }
}
