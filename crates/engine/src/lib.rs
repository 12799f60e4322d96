//! Moves agents: workspaces and config lineages, agent creation and forks, the
//! inbox, the step loop (driver), model calls and tool calls, inspection. The only
//! layer where decisions meet side effects; never prints, never reads the
//! environment (the cli passes what it read).

pub mod agents;
pub mod fleet;
pub mod ops;
pub mod step;
pub mod store;

use std::collections::BTreeMap;

/// An error kept as the cause of another: whatever failed, with its own causes.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// The environment variables the cli read, passed down (API keys, base URLs).
#[derive(Debug, Clone, Default)]
pub struct Env {
    vars: BTreeMap<String, String>,
}

impl Env {
    pub fn new(vars: impl IntoIterator<Item = (String, String)>) -> Env {
        Env { vars: vars.into_iter().collect() }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// Every variable, by name.
    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Removes what processes killed mid-way left in `dir` (a bundle's or replay's
/// `.…partial-<pid>`, an eval's scratch): each entry `pid_of` names a process of, when
/// that process is gone (a running one, its number reused or not, is left alone).
pub fn sweep_left_by_dead(dir: &std::path::Path, pid_of: impl Fn(&str) -> Option<u32>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Some(pid) = pid_of(&entry.file_name().to_string_lossy()) else { continue };
        if pid == std::process::id() || infra::process::running(pid) {
            continue;
        }
        let path = entry.path();
        let _ = match entry.file_type().is_ok_and(|t| t.is_dir()) {
            true => std::fs::remove_dir_all(&path),
            false => std::fs::remove_file(&path),
        };
    }
}

/// The pid in `name` after `marker` (`.x.partial-123` with `.partial-`), up to a `-` or
/// the end, when `name` starts with `starts`.
pub fn pid_after(name: &str, starts: &str, marker: &str) -> Option<u32> {
    if !name.starts_with(starts) {
        return None;
    }
    let rest = &name[name.rfind(marker)? + marker.len()..];
    rest.split('-').next()?.parse().ok()
}

/// Random bits for ids and names, from the OS.
pub fn random_u32() -> u32 {
    use std::io::Read;
    let mut bytes = [0u8; 4];
    let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).is_ok();
    if filled {
        u32::from_le_bytes(bytes)
    } else {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        t.subsec_nanos() ^ std::process::id().rotate_left(16)
    }
}
