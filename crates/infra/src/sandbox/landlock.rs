//! The Landlock ruleset of a confinement. It is built once in the driver and handed
//! to the sandbox helper, which enforces it on the command just before it execs, so
//! the command and everything it starts can write only where the confinement says,
//! read nothing inside the hidden directories but what it allows, use no TCP
//! without network, and signal or reach the abstract sockets of no process outside
//! the sandbox.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use super::{Confinement, SandboxError};

use landlock::{ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, path_beneath_rules};

/// The ABI whose rights we ask for; newer kernels enforce them all, older ones as
/// many as they know (what an older kernel cannot enforce is said at the driver's
/// start, or held by the namespaces and the seccomp filter instead).
const TARGET: ABI = ABI::V6;

/// Builds the ruleset for `c` on a kernel with Landlock ABI `abi`; the descriptor is
/// what children enforce before they exec. `own_network`: the command will run in a
/// network namespace of its own (whose loopback it may then use freely).
pub fn ruleset(c: &Confinement, abi: i32, own_network: bool) -> Result<OwnedFd, SandboxError> {
    if abi < 1 {
        return Err(SandboxError::Unsupported);
    }
    let mut ruleset = Ruleset::default().handle_access(AccessFs::from_all(TARGET))?;
    if !c.network && !own_network && abi >= 4 {
        // Without a network namespace, besides the seccomp filter: no TCP at all.
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    if abi >= 6 {
        ruleset = ruleset.scope(Scope::Signal | Scope::AbstractUnixSocket)?;
    }
    let read = AccessFs::from_read(TARGET);
    let all = AccessFs::from_all(TARGET);
    let created = ruleset
        .create()?
        .add_rules(path_beneath_rules(outside(&c.hidden), read))?
        .add_rules(path_beneath_rules(&c.read, read))?
        .add_rules(path_beneath_rules(&c.read_write, all))?
        .add_rules(path_beneath_rules(["/dev/null"], all))?;
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or(SandboxError::Unsupported)
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
