//! One door for every file the harness reads or writes on an agent's behalf — file
//! tools, transfers into an agent's directory, `apply` into the user's working tree,
//! an agent's git files: a path is resolved beneath a directory handle, never
//! through a symbolic link in any component (a dangling one included), never into a
//! FIFO, device or socket, and what is read is bounded.
//!
//! `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`
//! refuses a link anywhere on the path (ELOOP) and `..` out of the handle (EXDEV);
//! where `openat2` is missing or blocked (old kernels, old container seccomp
//! profiles answer ENOSYS or EPERM), the path is walked one component at a time
//! with `O_NOFOLLOW`. Files open non-blocking (a FIFO never holds the driver) and
//! are checked with `fstat` before a byte moves.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// What stands at a path, looked at without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File {
        size: u64,
    },
    Dir,
    Symlink,
    /// A FIFO, a device or a socket.
    Special,
}

#[derive(Debug, thiserror::Error)]
pub enum DoorError {
    #[error("`{0}` passes through a symbolic link; files are never read or written through one")]
    Symlink(PathBuf),
    #[error("`{0}` is not a regular file (a directory, FIFO, device or socket)")]
    NotRegular(PathBuf),
    #[error("`{0}` cannot be reached: a part of its path is not a directory")]
    NotADirectory(PathBuf),
    #[error("`{path}` is {size} bytes, over the {max} this may read")]
    TooLarge { path: PathBuf, size: u64, max: u64 },
    #[error("`{0}` is not a plain relative path beneath its directory")]
    Escapes(PathBuf),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

impl DoorError {
    /// Whether nothing stands at the path.
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, DoorError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// Whether the path's owner was refused for want of access.
    fn is_denied(&self) -> bool {
        matches!(self, DoorError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied)
    }
}

type Result<T> = std::result::Result<T, DoorError>;

/// A directory under which paths are resolved without following links.
#[derive(Debug)]
pub struct Beneath {
    dir: OwnedFd,
    root: PathBuf,
    /// A directory the harness keeps for an agent (see [`Beneath::open_kept`]).
    kept: bool,
}

/// What a walk to a directory makes on its way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Make {
    /// Nothing: every component must be a directory already.
    Nothing,
    /// Missing directories.
    Missing,
    /// Missing directories, and a directory in place of a link or file in the way.
    Replacing,
}

/// Whether `openat2` was found missing or blocked (then every resolution walks).
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// The `ELOOP` of a symbolic link met where none is followed.
fn is_link_refusal(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP)
}

impl Beneath {
    /// Opens `root` (a directory the harness made or was given: it is trusted as the
    /// starting point, and opened without following a link at its last component).
    pub fn open(root: &Path) -> Result<Beneath> {
        let path = c_path(root)?;
        let fd = sys::open_at(libc::AT_FDCWD, &path, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)
            .map_err(|source| DoorError::Io { path: root.to_owned(), source })?;
        Ok(Beneath { dir: fd, root: root.to_owned(), kept: false })
    }

    /// [`Beneath::open`] for a directory the harness keeps for an agent (its directory,
    /// its git directory): what the agent took of its owner's access there (`chmod`,
    /// which binds a user, not root) is given back on the way to a path an operation
    /// was refused for, and the operation tried again.
    pub fn open_kept(root: &Path) -> Result<Beneath> {
        Ok(Beneath { kept: true, ..Beneath::open(root)? })
    }

    /// Reads the regular file at `rel`, refusing one over `max` bytes.
    pub fn read(&self, rel: &Path, max: u64) -> Result<Vec<u8>> {
        let file = self.open_file(rel)?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        if size > max {
            return Err(DoorError::TooLarge { path: rel.to_owned(), size, max });
        }
        let mut bytes = Vec::with_capacity(size as usize);
        (&file).take(max + 1).read_to_end(&mut bytes).map_err(|source| self.io(rel, source))?;
        if bytes.len() as u64 > max {
            return Err(DoorError::TooLarge { path: rel.to_owned(), size: bytes.len() as u64, max });
        }
        Ok(bytes)
    }

    /// Opens the regular file at `rel` for reading (non-blocking, so a FIFO swapped
    /// in cannot hold the caller; refused anyway by the check that follows).
    pub(crate) fn open_file(&self, rel: &Path) -> Result<File> {
        self.again(rel, || {
            let fd = self.resolve(rel, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY, 0)?;
            let file = File::from(fd);
            let meta = file.metadata().map_err(|source| self.io(rel, source))?;
            if !meta.is_file() {
                return Err(DoorError::NotRegular(rel.to_owned()));
            }
            Ok(file)
        })
    }

    /// What stands at `rel` (`None`: nothing), its last component not followed.
    pub fn kind(&self, rel: &Path) -> Result<Option<Kind>> {
        self.again(rel, || {
            let (parent, name) = match self.parent(rel) {
                Ok(p) => p,
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(e),
            };
            match sys::stat_at(parent.as_raw_fd(), &name) {
                Ok(st) => Ok(Some(kind_of(&st))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(source) => Err(self.io(rel, source)),
            }
        })
    }

    /// Writes `bytes` as the file at `rel`, making its directories. A symbolic link
    /// on the way is refused, or with `replace` (the harness making a directory match
    /// a commit) removed — the link itself, never what it leads to — and a directory or
    /// the file put in its place (a directory standing at `rel` goes too); a file with other names (hard links) is replaced,
    /// never written through. `mode` sets the permission bits (a new file gets 0644).
    pub fn write(&self, rel: &Path, bytes: &[u8], mode: Option<u32>, replace: bool) -> Result<()> {
        self.again(rel, || {
            let (parent, name) = self.parent_of(rel, if replace { Make::Replacing } else { Make::Missing })?;
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;
            let mut fd = None;
            // A file replaced because it had other names keeps its mode.
            let mut kept_mode = None;
            for _ in 0..3 {
                match sys::open_at(parent.as_raw_fd(), &name, flags, mode.unwrap_or(0o644)) {
                    Ok(f) => {
                        let file = File::from(f);
                        let meta = file.metadata().map_err(|source| self.io(rel, source))?;
                        if !meta.is_file() && replace {
                            // A FIFO with a reader, a device: gone, and a file in its place.
                            sys::unlink_at(parent.as_raw_fd(), &name, 0).map_err(|source| self.io(rel, source))?;
                            continue;
                        }
                        if !meta.is_file() {
                            return Err(DoorError::NotRegular(rel.to_owned()));
                        }
                        if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
                            kept_mode = Some(std::os::unix::fs::MetadataExt::mode(&meta) & 0o777);
                            sys::unlink_at(parent.as_raw_fd(), &name, 0).map_err(|source| self.io(rel, source))?;
                            continue;
                        }
                        fd = Some(file);
                        break;
                    }
                    Err(e) if is_link_refusal(&e) && replace => {
                        sys::unlink_at(parent.as_raw_fd(), &name, 0).map_err(|source| self.io(rel, source))?;
                    }
                    // A directory where the file belongs goes, with what is in it; so does a
                    // FIFO nobody reads (ENXIO).
                    Err(e) if e.raw_os_error() == Some(libc::EISDIR) && replace => self.remove_all(rel)?,
                    Err(e) if e.raw_os_error() == Some(libc::ENXIO) && replace => {
                        sys::unlink_at(parent.as_raw_fd(), &name, 0).map_err(|source| self.io(rel, source))?;
                    }
                    Err(e) if is_link_refusal(&e) => return Err(DoorError::Symlink(rel.to_owned())),
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EISDIR) | Some(libc::ENXIO)) => {
                        return Err(DoorError::NotRegular(rel.to_owned()));
                    }
                    Err(source) => return Err(self.io(rel, source)),
                }
            }
            let mut file = fd.ok_or_else(|| DoorError::NotRegular(rel.to_owned()))?;
            file.set_len(0).map_err(|source| self.io(rel, source))?;
            file.write_all(bytes).map_err(|source| self.io(rel, source))?;
            if let Some(mode) = mode.or(kept_mode) {
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(std::fs::Permissions::from_mode(mode & 0o777))
                    .map_err(|source| self.io(rel, source))?;
            }
            Ok(())
        })
    }

    /// Puts `bytes` at `rel` whole or not at all: written to a file of no name (or, where
    /// the file system has none, a new one beside it), named beside `rel`, then renamed
    /// over it, so a reader (an editor, a verifier) or a crash never meets half of it,
    /// and a file with other names is replaced, never written through. A link or a
    /// directory standing at `rel` (or on the way) is refused, as is a file its owner
    /// may not write; `mode` sets the bits.
    pub fn replace_whole(&self, rel: &Path, bytes: &[u8], mode: u32) -> Result<()> {
        self.again(rel, || {
            let (parent, name) = self.parent_of(rel, Make::Missing)?;
            let dir = parent.as_raw_fd();
            if let Ok(st) = sys::stat_at(dir, &name) {
                match kind_of(&st) {
                    Kind::Symlink => return Err(DoorError::Symlink(rel.to_owned())),
                    Kind::Dir | Kind::Special => return Err(DoorError::NotRegular(rel.to_owned())),
                    // (A file its owner made read-only stays so, as a write to it would.)
                    Kind::File { .. } => sys::writable_at(dir, &name).map_err(|e| self.io(rel, e))?,
                }
            }
            // (Short, whatever the name's length; only a kill between the last two calls
            // leaves one behind.)
            static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let temp = c_name(OsStr::new(&format!(".offshoot-{}-{n}.new", std::process::id())), rel)?;
            // The bytes in a file named `temp`: made with no name and linked when the file
            // system can, so that a crash while writing leaves nothing.
            let stage = |unnamed: bool| -> std::io::Result<()> {
                let flags = match unnamed {
                    true => libc::O_TMPFILE | libc::O_WRONLY,
                    false => libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NOCTTY,
                };
                let at = if unnamed { CString::from(c".") } else { temp.clone() };
                let mut file = File::from(sys::open_at(dir, &at, flags, mode & 0o777)?);
                file.write_all(bytes)?;
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(std::fs::Permissions::from_mode(mode & 0o777))?;
                if unnamed { sys::link_fd_at(file.as_raw_fd(), dir, &temp) } else { Ok(()) }
            };
            let linked = stage(true).or_else(|_| {
                let _ = sys::unlink_at(dir, &temp, 0);
                stage(false)
            });
            let placed = linked.and_then(|()| sys::rename_at(dir, &temp, &name));
            if let Err(source) = placed {
                let _ = sys::unlink_at(dir, &temp, 0);
                return Err(self.io(rel, source));
            }
            Ok(())
        })
    }

    /// Makes the symbolic link `rel` → `target` (a link the agent's tree holds); what
    /// stands there is replaced unless it is a directory.
    pub(crate) fn symlink(&self, rel: &Path, target: &OsStr) -> Result<()> {
        self.again(rel, || {
            let (parent, name) = self.parent_of(rel, Make::Replacing)?;
            let target = CString::new(target.as_bytes()).map_err(|_| DoorError::Escapes(rel.to_owned()))?;
            match sys::stat_at(parent.as_raw_fd(), &name) {
                Ok(st) if kind_of(&st) == Kind::Dir => return Err(DoorError::NotRegular(rel.to_owned())),
                Ok(_) => sys::unlink_at(parent.as_raw_fd(), &name, 0).map_err(|source| self.io(rel, source))?,
                Err(_) => {}
            }
            sys::symlink_at(&target, parent.as_raw_fd(), &name).map_err(|source| self.io(rel, source))
        })
    }

    /// Makes a new regular file at `rel` (its directories made; a link on the way, or
    /// anything standing at `rel`, refused) and opens it for writing.
    pub(crate) fn create_new(&self, rel: &Path, mode: u32) -> Result<File> {
        self.again(rel, || {
            let (parent, name) = self.parent_of(rel, Make::Missing)?;
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NOCTTY;
            let fd =
                sys::open_at(parent.as_raw_fd(), &name, flags, mode & 0o777).map_err(|source| self.io(rel, source))?;
            Ok(File::from(fd))
        })
    }

    /// Makes the directory `rel` and those above it; a link in the way is refused.
    pub(crate) fn create_dir_all(&self, rel: &Path) -> Result<()> {
        self.again(rel, || self.walk_dirs(rel, Make::Missing).map(drop))
    }

    /// Removes what stands at `rel` and, for a directory, everything in it, never
    /// following a link (one is removed as itself); nothing there is fine.
    pub fn remove_all(&self, rel: &Path) -> Result<()> {
        self.again(rel, || {
            let (parent, name) = match self.parent(rel) {
                Ok(p) => p,
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e),
            };
            match sys::stat_at(parent.as_raw_fd(), &name).map(|st| kind_of(&st)) {
                Ok(Kind::Dir) => {
                    // Through the parent's descriptor, so no link above `rel` is followed;
                    // std's removal opens each directory below without following links.
                    let at = PathBuf::from(format!("/proc/self/fd/{}", parent.as_raw_fd()))
                        .join(OsStr::from_bytes(name.as_bytes()));
                    std::fs::remove_dir_all(at).map_err(|source| self.io(rel, source))
                }
                Ok(_) => self.remove(rel),
                Err(_) => Ok(()),
            }
        })
    }

    /// Removes what stands at `rel` (a file, a link — never what it leads to — or an
    /// empty directory); nothing there is fine.
    pub fn remove(&self, rel: &Path) -> Result<()> {
        self.again(rel, || {
            let (parent, name) = match self.parent(rel) {
                Ok(p) => p,
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e),
            };
            let flags = match sys::stat_at(parent.as_raw_fd(), &name) {
                Ok(st) if kind_of(&st) == Kind::Dir => libc::AT_REMOVEDIR,
                Ok(_) => 0,
                Err(_) => return Ok(()),
            };
            match sys::unlink_at(parent.as_raw_fd(), &name, flags) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(source) => Err(self.io(rel, source)),
            }
        })
    }

    /// The directory holding `rel`'s last component, and that component's name.
    fn parent(&self, rel: &Path) -> Result<(OwnedFd, CString)> {
        self.parent_of(rel, Make::Nothing)
    }

    fn parent_of(&self, rel: &Path, make: Make) -> Result<(OwnedFd, CString)> {
        let parts = components(rel)?;
        let Some((name, dirs)) = parts.split_last() else {
            return Err(DoorError::Escapes(rel.to_owned()));
        };
        let dir: PathBuf = dirs.iter().collect();
        let fd = self.walk_dirs(&dir, make)?;
        Ok((fd, c_name(name, rel)?))
    }

    /// Opens directory `rel` (empty: the handle itself), making what `make` says.
    fn walk_dirs(&self, rel: &Path, make: Make) -> Result<OwnedFd> {
        let parts = components(rel)?;
        if parts.is_empty() {
            return sys::dup(self.dir.as_raw_fd()).map_err(|source| self.io(rel, source));
        }
        if make == Make::Nothing {
            return self.resolve(rel, libc::O_PATH | libc::O_DIRECTORY, 0);
        }
        // One component at a time: each made if missing (a link or file in the way
        // removed first when replacing), then opened without following a link.
        let mut at = sys::dup(self.dir.as_raw_fd()).map_err(|source| self.io(rel, source))?;
        let mut walked = PathBuf::new();
        for part in parts {
            walked.push(part);
            let name = c_name(part, rel)?;
            if make == Make::Replacing
                && let Ok(st) = sys::stat_at(at.as_raw_fd(), &name)
                && kind_of(&st) != Kind::Dir
            {
                sys::unlink_at(at.as_raw_fd(), &name, 0).map_err(|source| self.io(&walked, source))?;
            }
            match sys::mkdir_at(at.as_raw_fd(), &name, 0o755) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => return Err(self.io(&walked, source)),
            }
            at = self.enter(&at, &name, &walked)?;
        }
        Ok(at)
    }

    /// Opens directory `name` in `at` without following a link (`walked`: the path
    /// so far, for the error).
    fn enter(&self, at: &OwnedFd, name: &CString, walked: &Path) -> Result<OwnedFd> {
        sys::open_at(at.as_raw_fd(), name, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0).map_err(|e| {
            match sys::stat_at(at.as_raw_fd(), name).map(|st| kind_of(&st)) {
                Ok(Kind::Symlink) => DoorError::Symlink(walked.to_owned()),
                _ => self.refusal(walked, e),
            }
        })
    }

    /// Opens `rel` with `flags`, no link followed anywhere on the way.
    fn resolve(&self, rel: &Path, flags: libc::c_int, mode: u32) -> Result<OwnedFd> {
        let parts = components(rel)?;
        let path = c_path(&parts.iter().collect::<PathBuf>())?;
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            let resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
            match sys::openat2(self.dir.as_raw_fd(), &path, flags | libc::O_CLOEXEC, mode, resolve) {
                Ok(fd) => return Ok(fd),
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(self.refusal(rel, e)),
            }
        }
        // The walk: every directory opened with O_NOFOLLOW, then the last component.
        let Some((last, dirs)) = parts.split_last() else {
            return sys::dup(self.dir.as_raw_fd()).map_err(|source| self.io(rel, source));
        };
        let mut at = sys::dup(self.dir.as_raw_fd()).map_err(|source| self.io(rel, source))?;
        let mut walked = PathBuf::new();
        for part in dirs {
            walked.push(part);
            at = self.enter(&at, &c_name(part, rel)?, &walked)?;
        }
        sys::open_at(at.as_raw_fd(), &c_name(last, rel)?, flags | libc::O_NOFOLLOW, mode)
            .map_err(|e| self.refusal(rel, e))
    }

    /// An error of resolving `rel`: a link met is named as such.
    fn refusal(&self, rel: &Path, e: std::io::Error) -> DoorError {
        if is_link_refusal(&e) {
            DoorError::Symlink(rel.to_owned())
        } else if e.raw_os_error() == Some(libc::EXDEV) {
            DoorError::Escapes(rel.to_owned())
        } else if e.raw_os_error() == Some(libc::ENOTDIR) {
            DoorError::NotADirectory(rel.to_owned())
        } else {
            self.io(rel, e)
        }
    }

    /// Runs `op`; refused for want of access in a kept directory, gives the owner's
    /// access back along `rel` and runs it again.
    fn again<T>(&self, rel: &Path, mut op: impl FnMut() -> Result<T>) -> Result<T> {
        match op() {
            Err(e) if self.kept && e.is_denied() => {
                self.give_back(rel);
                op()
            }
            other => other,
        }
    }

    /// Gives the owner read, write and search access back to this directory, each
    /// directory on the way to `rel`, `rel` itself and, when it is a directory,
    /// everything in it; never through a link.
    fn give_back(&self, rel: &Path) {
        let Ok(parts) = components(rel) else { return };
        let Ok(mut at) = sys::dup(self.dir.as_raw_fd()) else { return };
        grant(&at, Kind::Dir);
        for (i, part) in parts.iter().enumerate() {
            let Ok(name) = c_name(part, rel) else { return };
            let kind = match sys::stat_at(at.as_raw_fd(), &name) {
                Ok(st) => kind_of(&st),
                Err(_) => return,
            };
            let dir = libc::O_PATH | libc::O_NOFOLLOW | if kind == Kind::Dir { libc::O_DIRECTORY } else { 0 };
            let Ok(next) = sys::open_at(at.as_raw_fd(), &name, dir, 0) else { return };
            match kind {
                Kind::Dir if i + 1 == parts.len() => grant_below(&next, GRANT_DEPTH),
                Kind::Dir => grant(&next, kind),
                Kind::File { .. } => return grant(&next, kind),
                Kind::Symlink | Kind::Special => return,
            }
            at = next;
        }
    }

    fn io(&self, rel: &Path, source: std::io::Error) -> DoorError {
        DoorError::Io { path: self.root.join(rel), source }
    }
}

/// Adds the owner's read and write (and for a directory, search) access to what
/// `fd` (opened without following a link) stands for, when it lacks them.
fn grant(fd: &OwnedFd, kind: Kind) {
    use std::os::unix::fs::PermissionsExt;
    let want = if kind == Kind::Dir { 0o700 } else { 0o600 };
    // (Through the descriptor's own name: the object opened, never a path walked again.)
    let at = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    if let Ok(meta) = std::fs::metadata(&at)
        && meta.permissions().mode() & want != want
    {
        let _ = std::fs::set_permissions(&at, std::fs::Permissions::from_mode(meta.permissions().mode() | want));
    }
}

/// How many levels below a directory [`grant_below`] goes (each holds two
/// descriptors; an agent can nest directories thousands deep).
const GRANT_DEPTH: usize = 128;

/// [`grant`] for the directory `dir` and everything in it `depth` levels down, links
/// left alone.
fn grant_below(dir: &OwnedFd, depth: usize) {
    grant(dir, Kind::Dir);
    if depth == 0 {
        return;
    }
    let listed = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    for entry in listed.into_iter().flatten().flatten() {
        let Ok(name) = CString::new(entry.file_name().as_bytes()) else { continue };
        let Ok(st) = sys::stat_at(dir.as_raw_fd(), &name) else { continue };
        let kind = kind_of(&st);
        let flags = libc::O_PATH | libc::O_NOFOLLOW;
        match kind {
            Kind::Dir => {
                if let Ok(below) = sys::open_at(dir.as_raw_fd(), &name, flags | libc::O_DIRECTORY, 0) {
                    grant_below(&below, depth - 1);
                }
            }
            Kind::File { .. } => {
                if let Ok(file) = sys::open_at(dir.as_raw_fd(), &name, flags, 0) {
                    grant(&file, kind);
                }
            }
            Kind::Symlink | Kind::Special => {}
        }
    }
}

/// The plain components of `rel`; `..`, a root or a prefix is refused.
fn components(rel: &Path) -> Result<Vec<&OsStr>> {
    rel.components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(DoorError::Escapes(rel.to_owned())),
        })
        .collect()
}

fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| DoorError::Escapes(path.to_owned()))
}

fn c_name(name: &OsStr, rel: &Path) -> Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| DoorError::Escapes(rel.to_owned()))
}

fn kind_of(st: &libc::stat) -> Kind {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File { size: st.st_size as u64 },
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Special,
    }
}

/// The system calls, each wrapped once.
mod sys {
    use super::*;

    #[expect(unsafe_code, reason = "taking ownership of a descriptor the kernel returned")]
    fn fd_or_error(rc: libc::c_long) -> std::io::Result<OwnedFd> {
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) })
    }

    fn ok(rc: libc::c_int) -> std::io::Result<()> {
        if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
    }

    /// `struct open_how` of openat2(2).
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }

    #[expect(unsafe_code, reason = "openat2(2) with a C string and an open_how on our stack")]
    pub(crate) fn openat2(
        dir: RawFd,
        path: &CString,
        flags: libc::c_int,
        mode: u32,
        resolve: u64,
    ) -> std::io::Result<OwnedFd> {
        let how = OpenHow { flags: flags as u64, mode: u64::from(mode), resolve };
        // SAFETY: `path` and `how` outlive the call; the size is the struct's.
        fd_or_error(unsafe {
            libc::syscall(libc::SYS_openat2, dir, path.as_ptr(), &how as *const OpenHow, size_of::<OpenHow>())
        })
    }

    #[expect(unsafe_code, reason = "openat(2) with a C string")]
    pub(crate) fn open_at(dir: RawFd, path: &CString, flags: libc::c_int, mode: u32) -> std::io::Result<OwnedFd> {
        // SAFETY: `path` outlives the call.
        fd_or_error(unsafe { libc::openat(dir, path.as_ptr(), flags | libc::O_CLOEXEC, mode) }.into())
    }

    #[expect(unsafe_code, reason = "fstatat(2) into a stat on our stack")]
    pub(crate) fn stat_at(dir: RawFd, name: &CString) -> std::io::Result<libc::stat> {
        // SAFETY: an all-zero stat is valid; `name` and `st` outlive the call.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        ok(unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
        Ok(st)
    }

    #[expect(unsafe_code, reason = "mkdirat(2) with a C string")]
    pub(crate) fn mkdir_at(dir: RawFd, name: &CString, mode: u32) -> std::io::Result<()> {
        // SAFETY: `name` outlives the call.
        ok(unsafe { libc::mkdirat(dir, name.as_ptr(), mode) })
    }

    #[expect(unsafe_code, reason = "unlinkat(2) with a C string")]
    pub(crate) fn unlink_at(dir: RawFd, name: &CString, flags: libc::c_int) -> std::io::Result<()> {
        // SAFETY: `name` outlives the call.
        ok(unsafe { libc::unlinkat(dir, name.as_ptr(), flags) })
    }

    #[expect(unsafe_code, reason = "faccessat(2) with a C string")]
    pub(crate) fn writable_at(dir: RawFd, name: &CString) -> std::io::Result<()> {
        // SAFETY: `name` outlives the call.
        ok(unsafe { libc::faccessat(dir, name.as_ptr(), libc::W_OK, libc::AT_EACCESS) })
    }

    /// Gives the open file `fd` (made with `O_TMPFILE`) the name `name` in `dir`.
    #[expect(unsafe_code, reason = "linkat(2) with two C strings")]
    pub(crate) fn link_fd_at(fd: RawFd, dir: RawFd, name: &CString) -> std::io::Result<()> {
        let path = CString::new(format!("/proc/self/fd/{fd}")).map_err(std::io::Error::other)?;
        // SAFETY: both strings outlive the call.
        ok(unsafe { libc::linkat(libc::AT_FDCWD, path.as_ptr(), dir, name.as_ptr(), libc::AT_SYMLINK_FOLLOW) })
    }

    #[expect(unsafe_code, reason = "renameat(2) with two C strings")]
    pub(crate) fn rename_at(dir: RawFd, from: &CString, to: &CString) -> std::io::Result<()> {
        // SAFETY: both strings outlive the call.
        ok(unsafe { libc::renameat(dir, from.as_ptr(), dir, to.as_ptr()) })
    }

    #[expect(unsafe_code, reason = "symlinkat(2) with two C strings")]
    pub(crate) fn symlink_at(target: &CString, dir: RawFd, name: &CString) -> std::io::Result<()> {
        // SAFETY: both strings outlive the call.
        ok(unsafe { libc::symlinkat(target.as_ptr(), dir, name.as_ptr()) })
    }

    #[expect(unsafe_code, reason = "syncfs(2) on a descriptor we own")]
    pub(crate) fn syncfs(fd: RawFd) -> std::io::Result<()> {
        // SAFETY: an integer only.
        ok(unsafe { libc::syncfs(fd) })
    }

    #[expect(unsafe_code, reason = "fcntl(F_DUPFD_CLOEXEC) on a descriptor we own")]
    pub(crate) fn dup(fd: RawFd) -> std::io::Result<OwnedFd> {
        // SAFETY: integers only.
        fd_or_error(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) }.into())
    }
}

/// Writes to disk everything written to the file system holding `dir` (`syncfs`): a
/// step's records are written without waiting for the disk, and the files that replace
/// them must be there before they go.
pub fn sync_filesystem(dir: &Path) -> std::io::Result<()> {
    let file = File::open(dir)?;
    sys::syncfs(file.as_raw_fd())
}

mod copy;
pub use copy::Copied;

#[cfg(test)]
mod tests;
