//! Landlock confinement for tool commands. A ruleset is built once in the parent
//! and enforced by each child on itself just before it execs (`infra::process`), so
//! the command and everything it starts can write only where the confinement says,
//! read nothing inside the hidden directory but what it allows, optionally use no
//! TCP, and signal no process outside the sandbox.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
    path_beneath_rules,
};

/// The ABI whose rights we ask for; newer kernels enforce them all, older ones as
/// many as they know (the checks below refuse what would be silently lost).
const TARGET: ABI = ABI::V6;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("this kernel does not support Landlock, which `sandbox = \"workspace-write\"` needs")]
    Unsupported,
    #[error("`network = false` needs Landlock ABI 4 (Linux 6.7); this kernel has ABI {0}")]
    NoNetworkRules(i32),
    #[error("cannot build the Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
}

/// What a confined command may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    /// Read, write, create and remove below these.
    pub read_write: Vec<PathBuf>,
    /// Read below these.
    pub read: Vec<PathBuf>,
    /// Read files below these, but not list them.
    pub read_files: Vec<PathBuf>,
    /// Nothing inside this directory is readable but what the lists above allow;
    /// everything outside it is.
    pub hidden: PathBuf,
    /// Whether TCP may be used.
    pub network: bool,
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

/// Builds the ruleset for `c` on a kernel with Landlock ABI `abi`; the descriptor is
/// what children enforce before they exec.
pub fn ruleset(c: &Confinement, abi: i32) -> Result<OwnedFd, SandboxError> {
    if abi < 1 {
        return Err(SandboxError::Unsupported);
    }
    if !c.network && abi < 4 {
        return Err(SandboxError::NoNetworkRules(abi));
    }
    let mut ruleset = Ruleset::default().handle_access(AccessFs::from_all(TARGET))?;
    if !c.network {
        ruleset = ruleset
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?
            .set_compatibility(CompatLevel::BestEffort);
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
        .add_rules(path_beneath_rules(&c.read_files, AccessFs::ReadFile))?
        .add_rules(path_beneath_rules(&c.read_write, all))?
        .add_rules(path_beneath_rules(["/dev/null"], all))?;
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or(SandboxError::Unsupported)
}

/// Every path beside the ancestors of `hidden`, from the root down: together they
/// are everything outside `hidden` and its ancestors' own entries (Landlock grants
/// by hierarchy, so "all but this directory" is spelled out this way).
fn outside(hidden: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let ancestors: Vec<&Path> = hidden.ancestors().collect();
    for pair in ancestors.windows(2) {
        let (inner, dir) = (pair[0], pair[1]);
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.path() != inner {
                out.push(entry.path());
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
        let listed = outside(&root.join("ws"));
        assert!(listed.contains(&root.join("beside")));
        assert!(!listed.iter().any(|p| p.starts_with(root.join("ws"))));
        assert!(!listed.contains(&root));
        assert!(listed.contains(&PathBuf::from("/etc")));
        let _ = std::fs::remove_dir_all(&root);
    }
}
