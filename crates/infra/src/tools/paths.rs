//! Where file tools may read and write. A path is resolved first — against the
//! working directory, through every symlink and `..` — and the resolved path is
//! checked: reads anywhere but the places marked unreadable (with exceptions inside
//! them); writes only below the writable roots, never into the places reserved for
//! the harness. A refusal names the rule.

use std::path::{Component, Path, PathBuf};

/// A place and what it is called when a refusal names it.
#[derive(Debug, Clone)]
pub struct Place {
    pub(crate) path: PathBuf,
    pub(crate) what: String,
}

impl Place {
    pub fn new(path: impl Into<PathBuf>, what: impl Into<String>) -> Place {
        Place { path: path.into(), what: what.into() }
    }
}

/// The rules for one agent's file tools. All paths are absolute and resolved.
#[derive(Debug, Clone, Default)]
pub struct PathPolicy {
    /// Where writes may go (the agent's directory, its temp dir, the role's `write_paths`).
    pub writable: Vec<PathBuf>,
    /// Inside the writable roots, what only the harness writes (`.offshoot/`, `.git`).
    pub reserved: Vec<Place>,
    /// What may not be read (the workspace's internals, other agents' directories,
    /// other workspaces).
    pub unreadable: Vec<Place>,
    /// Exceptions inside `unreadable` (the agent's own directory and records, its
    /// workspace among the others). The deepest place a path is in decides.
    pub readable: Vec<PathBuf>,
}

impl PathPolicy {
    /// The resolved path if it may be read, else why not.
    pub fn read(&self, cwd: &Path, path: &str) -> Result<PathBuf, String> {
        let resolved = resolve(cwd, path);
        if is_process_files(&resolved) {
            return Err(format!(
                "`{path}` is a process's files under /proc ({}), which agents may not read",
                resolved.display()
            ));
        }
        if self.may_read(&resolved) {
            return Ok(resolved);
        }
        match self.unreadable.iter().filter(|u| resolved.starts_with(&u.path)).max_by_key(|u| depth(&u.path)) {
            Some(place) => {
                Err(format!("`{path}` is in {} ({}), which agents may not read", place.what, resolved.display()))
            }
            None => Ok(resolved),
        }
    }

    /// Whether an already resolved path may be read (for walks that do not follow
    /// symlinks).
    pub(crate) fn may_read(&self, resolved: &Path) -> bool {
        if is_process_files(resolved) {
            return false;
        }
        let deepest = |places: &mut dyn Iterator<Item = &PathBuf>| {
            places.filter(|p| resolved.starts_with(p)).map(|p| depth(p)).max()
        };
        match deepest(&mut self.unreadable.iter().map(|u| &u.path)) {
            None => true,
            Some(unreadable) => deepest(&mut self.readable.iter()).is_some_and(|readable| readable >= unreadable),
        }
    }

    /// The resolved path if it may be written, else why not.
    pub fn write(&self, cwd: &Path, path: &str) -> Result<PathBuf, String> {
        let resolved = resolve(cwd, path);
        if let Some(place) = self.reserved.iter().find(|r| resolved.starts_with(&r.path)) {
            return Err(format!("`{path}` is in {}, which only the harness writes; nothing was written", place.what));
        }
        if !self.writable.iter().any(|w| resolved.starts_with(w)) {
            let roots: Vec<String> = self.writable.iter().map(|w| w.display().to_string()).collect();
            return Err(format!(
                "`{path}` resolves to {}, outside where you may write ({}); nothing was written",
                resolved.display(),
                roots.join(", ")
            ));
        }
        Ok(resolved)
    }
}

/// How many components deep `path` is.
fn depth(path: &Path) -> usize {
    path.components().count()
}

/// Whether `resolved` is inside a process's own directory under /proc
/// (`/proc/<pid>`, `/proc/self`, `/proc/thread-self`): the file tools run in the
/// driver, whose environment holds the API keys.
fn is_process_files(resolved: &Path) -> bool {
    let mut parts = resolved.components().skip(1);
    parts.next() == Some(Component::Normal("proc".as_ref()))
        && parts.next().is_some_and(|c| {
            let c = c.as_os_str().to_string_lossy();
            c == "self" || c == "thread-self" || (!c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// `path` made absolute against `cwd`, with every symlink and `..` resolved: the
/// longest existing prefix through the filesystem, the rest (which cannot hold a
/// symlink, since it does not exist) lexically.
pub fn resolve(cwd: &Path, path: impl AsRef<Path>) -> PathBuf {
    let joined = cwd.join(path);
    let parts: Vec<Component> = joined.components().collect();
    // The longest prefix that exists, resolved by the filesystem.
    let mut split = parts.len();
    let mut base = None;
    while split > 0 {
        let prefix: PathBuf = parts[..split].iter().collect();
        if let Ok(real) = std::fs::canonicalize(&prefix) {
            base = Some(real);
            break;
        }
        split -= 1;
    }
    let mut out = base.unwrap_or_else(|| PathBuf::from("/"));
    for part in &parts[split..] {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_deepest_place_a_path_is_in_decides_whether_it_may_be_read() {
        let others = PathBuf::from("/data/workspaces");
        let ws = others.join("mine");
        let own = ws.join("agents/me");
        let policy = PathPolicy {
            unreadable: vec![
                Place::new(&others, "another workspace"),
                Place::new(ws.join("repo.git"), "the workspace's internals"),
                Place::new(ws.join("agents"), "another agent's directory"),
            ],
            readable: vec![own.clone(), ws.clone()],
            ..PathPolicy::default()
        };
        assert_eq!(policy.read(&own, "../../project.git/HEAD"), Ok(ws.join("project.git/HEAD")));
        assert_eq!(policy.read(&own, "notes.txt"), Ok(own.join("notes.txt")));
        let refused = |path: &str| policy.read(&own, path).expect_err(path);
        assert!(refused("/data/workspaces/theirs/repo.git/HEAD").contains("is in another workspace"));
        assert!(refused("/data/workspaces").contains("is in another workspace"));
        assert!(refused("../../repo.git/HEAD").contains("is in the workspace's internals"));
        assert!(refused("../other/f").contains("is in another agent's directory"));
        assert!(!policy.may_read(Path::new("/data/workspaces/mine/agents/other")));
        assert!(policy.may_read(Path::new("/data/workspaces/mine/agents/me/sub")));
    }

    #[test]
    fn paths_resolve_through_symlinks_and_dots_before_the_rules_apply() {
        let root = std::env::temp_dir().join(format!("offshoot-paths-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let ws = root.join("ws");
        let own = ws.join("agents/me");
        std::fs::create_dir_all(own.join("sub")).expect("dirs");
        std::fs::create_dir_all(ws.join("agents/other")).expect("dirs");
        std::fs::create_dir_all(ws.join("repo.git")).expect("dirs");
        std::os::unix::fs::symlink("/etc", own.join("out")).expect("symlink");
        let ws = std::fs::canonicalize(&ws).expect("canon");
        let own = ws.join("agents/me");
        let policy = PathPolicy {
            writable: vec![own.clone()],
            reserved: vec![Place::new(own.join(".offshoot"), "the harness's directory `.offshoot/`")],
            unreadable: vec![
                Place::new(ws.join("repo.git"), "the workspace's internals"),
                Place::new(ws.join("agents"), "another agent's directory"),
            ],
            readable: vec![own.clone()],
        };
        assert_eq!(policy.write(&own, "sub/../new/file.txt"), Ok(own.join("new/file.txt")));
        assert_eq!(policy.read(&own.join("sub"), "../x"), Ok(own.join("x")));
        assert_eq!(policy.read(&own, "/etc/hostname"), Ok(PathBuf::from("/etc/hostname")));
        for path in ["../x", "/tmp/x", "out/passwd", "new/../../other/f", "nowhere/../../../x"] {
            let err = policy.write(&own, path).expect_err(path);
            assert!(err.contains("outside where you may write"), "{path}: {err}");
        }
        let err = policy.write(&own, ".offshoot/soul.md").expect_err("reserved");
        assert_eq!(
            err,
            "`.offshoot/soul.md` is in the harness's directory `.offshoot/`, which only the harness writes; nothing was written"
        );
        let err = policy.read(&own, "../other/f").expect_err("other agent");
        assert!(err.starts_with("`../other/f` is in another agent's directory"), "{err}");
        for proc in ["/proc/self/environ", "/proc/1/environ", "/proc/thread-self/environ", "/proc/self/task"] {
            let err = policy.read(&own, proc).expect_err(proc);
            assert!(err.contains("a process's files under /proc"), "{proc}: {err}");
            assert!(!policy.may_read(&resolve(&own, proc)), "{proc}");
        }
        assert!(policy.read(&own, "/proc/cpuinfo").is_ok());
        let err = policy.read(&own, "../../repo.git/HEAD").expect_err("internals");
        assert!(err.starts_with("`../../repo.git/HEAD` is in the workspace's internals"), "{err}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
