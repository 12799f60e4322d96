//! Noticing changes under a directory without scanning it: inotify watches on one
//! subtree (every directory in it) and on the root for a few names. Reading what
//! was touched is one non-blocking read; nothing touched costs nothing.

use std::collections::{BTreeSet, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Events watched, on the subtree and on the root alike (for the root, only the
/// names asked for are reported).
const EVENTS: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_CLOSE_WRITE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF;

/// What was touched since the last look.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Touched {
    /// Paths relative to the root (a directory's own path when it went away).
    pub paths: BTreeSet<String>,
    /// Events were lost (the kernel's queue overflowed), or the root itself went
    /// away: anything may have changed.
    pub everything: bool,
}

impl Touched {
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.paths.is_empty() && !self.everything
    }
}

/// Watches `subtree` (relative to `root`) and the names `at_root` in `root`; or, made
/// with [`Watch::tree`], the whole tree but the names `at_root`.
pub struct Watch {
    fd: OwnedFd,
    root: PathBuf,
    subtree: String,
    at_root: Vec<String>,
    /// Watch descriptor → the directory it watches, relative to the root ("" is the root).
    dirs: HashMap<i32, String>,
    /// The whole tree is watched, and `at_root` names what is left out.
    whole: bool,
    /// Every directory that should be watched is (a watch can fail: the user's limit).
    complete: bool,
}

impl Watch {
    /// Starts watching; fails if inotify is unavailable (e.g. out of instances).
    pub fn new(root: &Path, subtree: &str, at_root: &[&str]) -> std::io::Result<Watch> {
        let fd = inotify_init()?;
        let mut watch = Watch {
            fd,
            root: root.to_owned(),
            subtree: subtree.to_owned(),
            at_root: at_root.iter().map(|s| (*s).to_owned()).collect(),
            dirs: HashMap::new(),
            whole: false,
            complete: true,
        };
        watch.add("", EVENTS)?;
        watch.add_subtree();
        Ok(watch)
    }

    /// Watches every directory under `root` but the top-level names `skip`.
    pub fn tree(root: &Path, skip: &[&str]) -> std::io::Result<Watch> {
        let mut watch = Watch {
            fd: inotify_init()?,
            root: root.to_owned(),
            subtree: String::new(),
            at_root: skip.iter().map(|s| (*s).to_owned()).collect(),
            dirs: HashMap::new(),
            whole: true,
            complete: true,
        };
        watch.add("", EVENTS)?;
        for entry in std::fs::read_dir(root)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().is_ok_and(|t| t.is_dir()) && !watch.at_root.contains(&name) {
                watch.add_below(name);
            }
        }
        Ok(watch)
    }

    /// Watches every directory of the subtree as it is now (after it was rebuilt).
    pub fn rewatch(&mut self) -> std::io::Result<()> {
        let (root, subtree, at_root) = (self.root.clone(), self.subtree.clone(), self.at_root.clone());
        let names: Vec<&str> = at_root.iter().map(String::as_str).collect();
        *self = if self.whole { Watch::tree(&root, &names)? } else { Watch::new(&root, &subtree, &names)? };
        Ok(())
    }

    fn add_subtree(&mut self) {
        self.add_below(self.subtree.clone());
    }

    /// Watches `rel` and every directory below it.
    fn add_below(&mut self, rel: String) {
        let mut stack = vec![rel];
        while let Some(rel) = stack.pop() {
            let full = self.root.join(&rel);
            // Only real directories: a symlink planted here is not followed.
            if !std::fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            if self.add(&rel, EVENTS).is_err() {
                self.complete = false;
                continue;
            }
            for entry in std::fs::read_dir(&full).into_iter().flatten().flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(format!("{rel}/{}", entry.file_name().to_string_lossy()));
                }
            }
        }
    }

    fn add(&mut self, rel: &str, mask: u32) -> std::io::Result<()> {
        let wd = add_watch(&self.fd, &self.root.join(rel), mask | libc::IN_DONT_FOLLOW | libc::IN_ONLYDIR)?;
        self.dirs.insert(wd, rel.to_owned());
        Ok(())
    }

    /// Everything touched since the last call.
    pub fn take(&mut self) -> Touched {
        let mut touched = Touched { everything: !self.complete, ..Touched::default() };
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match read(&self.fd, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut at = 0;
            // struct inotify_event { int wd; uint32_t mask, cookie, len; char name[len]; }
            while at + 16 <= n {
                let field =
                    |i: usize| u32::from_ne_bytes([buf[at + i], buf[at + i + 1], buf[at + i + 2], buf[at + i + 3]]);
                let (wd, mask, len) = (field(0) as i32, field(4), field(12) as usize);
                let name_bytes = &buf[at + 16..(at + 16 + len).min(n)];
                let name = String::from_utf8_lossy(name_bytes).trim_end_matches('\0').to_owned();
                at += 16 + len;
                if mask & libc::IN_Q_OVERFLOW != 0 {
                    touched.everything = true;
                    continue;
                }
                let Some(dir) = self.dirs.get(&wd).cloned() else { continue };
                // In a whole tree, a directory that moved leaves watches named for where it
                // was: anything may have changed, and the tree is watched afresh.
                let moved_dir = mask & libc::IN_ISDIR != 0 && mask & libc::IN_MOVED_FROM != 0;
                if self.whole && (moved_dir || (mask & libc::IN_MOVE_SELF != 0 && !dir.is_empty())) {
                    touched.everything = true;
                    self.complete = false;
                    continue;
                }
                if mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED) != 0 {
                    if dir.is_empty() {
                        touched.everything = true;
                    } else {
                        touched.paths.insert(dir);
                    }
                    continue;
                }
                let path = if dir.is_empty() {
                    let wanted = match self.whole {
                        true => !self.at_root.contains(&name),
                        false => self.at_root.contains(&name) || name == self.subtree,
                    };
                    if !wanted {
                        continue;
                    }
                    name
                } else if name.is_empty() {
                    continue;
                } else {
                    format!("{dir}/{name}")
                };
                // A directory that appears in the subtree is watched from now on.
                let new_dir = mask & libc::IN_ISDIR != 0 && mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0;
                if new_dir && (self.whole || path == self.subtree || path.starts_with(&format!("{}/", self.subtree))) {
                    self.add_below(path.clone());
                    touched.everything |= !self.complete;
                }
                touched.paths.insert(path);
            }
        }
        touched
    }
}

/// Watches one directory and each directory directly in it, not deeper: which files
/// of which of them were written, and which directories appeared (watched from then
/// on). For following files that grow in a directory each (`steps/<agent>/…`) without
/// a watch on every directory below them. Waiting blocks in `poll(2)`: nothing touched
/// costs nothing.
pub struct Shallow {
    fd: OwnedFd,
    root: PathBuf,
    /// Watch descriptor → the directory's name ("" is the root).
    dirs: HashMap<i32, String>,
}

/// What a [`Shallow`] saw: (directory, file name) pairs written or made, the
/// directories that appeared, and whether events were lost.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Seen {
    pub files: BTreeSet<(String, String)>,
    pub dirs: BTreeSet<String>,
    pub everything: bool,
}

const SHALLOW: u32 = libc::IN_CREATE | libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_MOVED_TO;

impl Shallow {
    /// Starts watching `root` (which must exist) and every directory in it.
    pub fn new(root: &Path) -> std::io::Result<Shallow> {
        let mut shallow = Shallow { fd: inotify_init()?, root: root.to_owned(), dirs: HashMap::new() };
        shallow.add("")?;
        for entry in std::fs::read_dir(root)?.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = shallow.add(&entry.file_name().to_string_lossy());
            }
        }
        Ok(shallow)
    }

    fn add(&mut self, name: &str) -> std::io::Result<()> {
        let mask = SHALLOW | libc::IN_DONT_FOLLOW | libc::IN_ONLYDIR;
        let wd = add_watch(&self.fd, &self.root.join(name), mask)?;
        self.dirs.insert(wd, name.to_owned());
        Ok(())
    }

    /// Waits up to `timeout` (for ever with `None`) for something to be touched, and
    /// returns what was; empty when the time ran out.
    pub fn wait(&mut self, timeout: Option<std::time::Duration>) -> std::io::Result<Seen> {
        let ms = timeout.map_or(-1, |t| i32::try_from(t.as_millis()).unwrap_or(i32::MAX));
        poll_in(&self.fd, ms)?;
        Ok(self.take())
    }

    fn take(&mut self) -> Seen {
        let mut seen = Seen::default();
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = read(&self.fd, &mut buf) {
            let mut at = 0;
            while at + 16 <= n {
                let field =
                    |i: usize| u32::from_ne_bytes([buf[at + i], buf[at + i + 1], buf[at + i + 2], buf[at + i + 3]]);
                let (wd, mask, len) = (field(0) as i32, field(4), field(12) as usize);
                let name =
                    String::from_utf8_lossy(&buf[at + 16..(at + 16 + len).min(n)]).trim_end_matches('\0').to_owned();
                at += 16 + len;
                if mask & libc::IN_Q_OVERFLOW != 0 {
                    seen.everything = true;
                    continue;
                }
                let Some(dir) = self.dirs.get(&wd).cloned() else { continue };
                match (dir.is_empty(), mask & libc::IN_ISDIR != 0) {
                    (true, true) => {
                        // (A directory that cannot be watched is looked at whole each time.)
                        seen.everything |= self.add(&name).is_err();
                        seen.dirs.insert(name);
                    }
                    (false, false) if !name.is_empty() => {
                        seen.files.insert((dir, name));
                    }
                    _ => {}
                }
            }
        }
        seen
    }
}

#[expect(unsafe_code, reason = "poll(2) on one descriptor we own, with a pollfd on our stack")]
fn poll_in(fd: &OwnedFd, ms: i32) -> std::io::Result<()> {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the call's length.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    match rc < 0 {
        true => match std::io::Error::last_os_error() {
            e if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            e => Err(e),
        },
        false => Ok(()),
    }
}

#[expect(unsafe_code, reason = "inotify_init1(2) returns a new descriptor we then own")]
fn inotify_init() -> std::io::Result<OwnedFd> {
    // SAFETY: takes flags only; a non-negative result is a descriptor nobody else owns.
    let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[expect(unsafe_code, reason = "inotify_add_watch(2) reads a NUL-terminated path we own for the call")]
fn add_watch(fd: &OwnedFd, path: &Path, mask: u32) -> std::io::Result<i32> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid C string that outlives the call.
    let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask) };
    if wd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(wd)
}

#[expect(unsafe_code, reason = "read(2) into a buffer we own for the call")]
fn read(fd: &OwnedFd, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: the pointer and length describe `buf`, which outlives the call.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_whole_tree_reports_work_paths_and_leaves_out_the_skipped_names() {
        let root = std::env::temp_dir().join(format!("offshoot-watch-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("src/deep")).expect("dirs");
        std::fs::create_dir_all(root.join(".h")).expect("dirs");
        let mut w = Watch::tree(&root, &[".h", ".git"]).expect("watch");
        assert!(w.take().is_empty());
        std::fs::write(root.join("src/deep/a.rs"), "x").expect("write");
        std::fs::write(root.join(".h/x"), "x").expect("write");
        std::fs::write(root.join(".git"), "x").expect("write");
        std::fs::create_dir_all(root.join("new/inner")).expect("mkdir");
        std::fs::write(root.join("new/inner/b.rs"), "y").expect("write");
        let touched = w.take();
        assert!(!touched.everything);
        assert!(touched.paths.contains("src/deep/a.rs") && touched.paths.contains("new"), "{touched:?}");
        assert!(!touched.paths.iter().any(|p| p.starts_with(".h") || p == ".git"), "{touched:?}");
        std::fs::write(root.join("new/inner/c.rs"), "z").expect("write");
        assert!(w.take().paths.contains("new/inner/c.rs"));
        // A directory moved within the tree: everything, once, then watched afresh.
        std::fs::rename(root.join("src/deep"), root.join("moved")).expect("mv");
        assert!(w.take().everything);
        w.rewatch().expect("rewatch");
        std::fs::write(root.join("moved/d.rs"), "d").expect("write");
        assert_eq!(w.take().paths.into_iter().collect::<Vec<_>>(), ["moved/d.rs"]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn reports_touched_paths_and_only_watched_names_at_the_root() {
        let root = std::env::temp_dir().join(format!("offshoot-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join(".h/messages")).expect("dirs");
        std::fs::write(root.join(".h/messages/0001"), "a").expect("write");
        let mut w = Watch::new(&root, ".h", &[".git"]).expect("watch");
        assert!(w.take().is_empty());
        std::fs::write(root.join("work.txt"), "x").expect("write");
        std::fs::write(root.join(".git"), "gitdir: x").expect("write");
        std::fs::write(root.join(".h/messages/0001"), "forged").expect("write");
        std::fs::write(root.join(".h/new"), "n").expect("write");
        let touched = w.take();
        let paths: Vec<&str> = touched.paths.iter().map(String::as_str).collect();
        assert_eq!(paths, vec![".git", ".h/messages/0001", ".h/new"]);
        // A directory made after the watch began is watched too.
        std::fs::create_dir_all(root.join(".h/skills/s")).expect("mkdir");
        assert!(w.take().paths.contains(".h/skills"));
        std::fs::write(root.join(".h/skills/s/SKILL.md"), "x").expect("write");
        assert!(w.take().paths.contains(".h/skills/s/SKILL.md"));
        std::fs::remove_dir_all(root.join(".h/messages")).expect("rm");
        let touched = w.take();
        assert!(touched.paths.contains(".h/messages"), "{touched:?}");
        std::fs::remove_dir_all(root.join(".h")).expect("rm");
        assert!(w.take().paths.contains(".h"));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_shallow_watch_sees_files_written_in_each_directory_and_new_directories() {
        let root = std::env::temp_dir().join(format!("offshoot-watch-shallow-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("a/0001")).expect("dirs");
        let mut w = Shallow::new(&root).expect("watch");
        let quick = Some(std::time::Duration::from_millis(10));
        assert_eq!(w.wait(quick).expect("wait"), Seen::default(), "nothing touched, nothing seen");
        std::fs::write(root.join("a/events.ndjson"), "x").expect("write");
        std::fs::write(root.join("a/0001/deep"), "x").expect("write");
        std::fs::create_dir(root.join("b")).expect("mkdir");
        let seen = w.wait(None).expect("wait");
        assert!(seen.files.contains(&("a".to_owned(), "events.ndjson".to_owned())), "{seen:?}");
        assert!(!seen.files.iter().any(|(_, n)| n == "deep"), "not deeper: {seen:?}");
        // (The directory's creation may come in a later read than the first file's.)
        let mut dirs = seen.dirs;
        if !dirs.contains("b") {
            dirs = w.wait(None).expect("wait").dirs;
        }
        assert!(dirs.contains("b"));
        std::fs::write(root.join("b/events.ndjson"), "y").expect("write");
        assert!(w.wait(None).expect("wait").files.contains(&("b".to_owned(), "events.ndjson".to_owned())));
        let _ = std::fs::remove_dir_all(&root);
    }
}
