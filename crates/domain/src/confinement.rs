//! No escalation through dispatch: a child is at least as confined as its parent,
//! whatever its own role says. A role's confinement is its sandbox, network, write
//! paths and limits; the confinement an agent runs with is its role's met with every
//! ancestor's (the stricter of each), and a dispatch whose role would be looser than
//! its parent's is refused, naming what.

use std::path::Path;

use super::config::{RoleConfig, Sandbox};

/// `child`'s role tightened by `parent`'s: the stricter sandbox, no network unless
/// both have it, only the write paths that lie inside one of the parent's, the
/// smaller limits.
pub fn meet(child: &RoleConfig, parent: &RoleConfig) -> RoleConfig {
    let mut met = child.clone().in_mode(child.mode().min(parent.mode()));
    met.sandbox = child.sandbox.max(parent.sandbox);
    met.network = child.network && parent.network;
    // An unconfined parent confines nothing.
    if parent.sandbox == Sandbox::WorkspaceWrite {
        met.write_paths.retain(|p| within(p, &parent.write_paths));
        met.max_processes = child.max_processes.min(parent.max_processes);
        met.max_file_bytes = child.max_file_bytes.min(parent.max_file_bytes);
        met.max_commit_file_bytes = child.max_commit_file_bytes.min(parent.max_commit_file_bytes);
    }
    met
}

/// Why a child of role `child_name` would be less confined than its parent, if it
/// would: the first rule it breaks, in words.
pub fn looser(child_name: &str, child: &RoleConfig, parent: &RoleConfig) -> Option<String> {
    let rule = "a child may not be less confined than its parent";
    if child.sandbox < parent.sandbox {
        return Some(format!(
            "role `{child_name}` runs commands unconfined (`sandbox = \"none\"`) and you are sandboxed; {rule}"
        ));
    }
    if parent.sandbox == Sandbox::None {
        return None;
    }
    if child.network && !parent.network {
        return Some(format!("role `{child_name}` may use the network and you may not; {rule}"));
    }
    if let Some(path) = child.write_paths.iter().find(|p| !within(p, &parent.write_paths)) {
        return Some(format!("role `{child_name}` may write `{path}` and you may not; {rule}"));
    }
    for (field, c, p) in [
        ("max_processes", child.max_processes, parent.max_processes),
        ("max_file_bytes", child.max_file_bytes, parent.max_file_bytes),
        ("max_commit_file_bytes", child.max_commit_file_bytes, parent.max_commit_file_bytes),
    ] {
        if c > p {
            return Some(format!("role `{child_name}` has `{field} = {c}` and you have {p}; {rule}"));
        }
    }
    None
}

fn within(path: &str, roots: &[String]) -> bool {
    roots.iter().any(|r| Path::new(path).starts_with(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, DEFAULT_FILES};
    use pretty_assertions::assert_eq;

    fn role(extra: &str) -> RoleConfig {
        let text = format!("{}\n[roles.r]\nprovider = \"anthropic\"\nmodel = \"m\"\n{extra}\n", DEFAULT_FILES[0].1);
        let config = Config::parse(&text, &|_| true).expect("config");
        config.role("r").expect("role").clone()
    }

    #[test]
    fn a_child_is_held_to_its_parents_confinement() {
        let parent = role("network = false\nwrite_paths = [\"/data\"]\nmax_processes = 100");
        let open = role("sandbox = \"none\"\nwrite_paths = [\"/data/x\", \"/etc\"]");
        assert_eq!(
            looser("open", &open, &parent).as_deref(),
            Some(
                "role `open` runs commands unconfined (`sandbox = \"none\"`) and you are sandboxed; a child may not be less confined than its parent"
            )
        );
        let networked = role("");
        assert_eq!(
            looser("w", &networked, &parent).as_deref(),
            Some("role `w` may use the network and you may not; a child may not be less confined than its parent")
        );
        let writer = role("network = false\nwrite_paths = [\"/data/x\", \"/etc\"]\nmax_processes = 50");
        assert_eq!(
            looser("w", &writer, &parent).as_deref(),
            Some("role `w` may write `/etc` and you may not; a child may not be less confined than its parent")
        );
        let busy = role("network = false");
        assert!(looser("b", &busy, &parent).is_some_and(|r| r.contains("`max_processes = 1024` and you have 100")));
        let met = meet(&open, &parent);
        assert_eq!(met.sandbox, Sandbox::WorkspaceWrite);
        assert!(!met.network);
        assert_eq!(met.write_paths, vec!["/data/x".to_owned()]);
        assert_eq!(met.max_processes, 100);
        let strict = role("network = false\nmax_processes = 100\nwrite_paths = [\"/data/y\"]");
        assert_eq!(looser("s", &strict, &parent), None);
        // An unconfined parent may have any child.
        assert_eq!(looser("w", &writer, &open), None);
        // A child runs in the most confined mode of the two; `full` is no sandbox.
        let asking = role("mode = \"ask\"");
        assert_eq!(meet(&networked, &asking).mode(), crate::config::Mode::Ask);
        assert_eq!(meet(&asking, &open).mode(), crate::config::Mode::Ask);
        let full = role("mode = \"full\"").in_mode(crate::config::Mode::Full);
        assert_eq!((full.sandbox, meet(&full, &networked).sandbox), (Sandbox::None, Sandbox::WorkspaceWrite));
    }
}
