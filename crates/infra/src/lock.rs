//! Exclusive per-agent driver locks: open-file-description locks (`F_OFD_SETLK`) on
//! plain files. The holder writes its pid and start time into the file. A probe asks the kernel
//! whether a lock is held (`F_OFD_GETLK`) without ever taking it, so probing can
//! never make a starting driver find the lock busy. The kernel releases a lock when
//! its holder dies.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::process::start_time;

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot open lock file {path}: {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("cannot lock {path}: {source}")]
    Lock { path: PathBuf, source: std::io::Error },
}

/// A held lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct LockGuard {
    file: File,
}

/// What a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Free,
    /// Held by a live process; who, as the holder wrote it (if readable).
    Held(Option<Holder>),
}

/// The process that wrote a lock file: its pid and when it started (clock ticks
/// since boot, `/proc/<pid>/stat`), so a pid used again by another process is
/// never taken for the holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    pub(crate) started: u64,
    /// Held by the process making the agent (not a driver of it: signalling it would
    /// stop whoever is making it).
    pub making: bool,
}

/// The word a maker's lock file ends with.
const MAKING: &str = "making";

impl Holder {
    fn parse(text: &str) -> Option<Holder> {
        let mut words = text.split_whitespace();
        let (pid, started) = (words.next()?.parse().ok()?, words.next()?.parse().ok()?);
        Some(Holder { pid, started, making: words.next() == Some(MAKING) })
    }

    /// Whether the holder is still the process it was (same pid, same start).
    pub fn is_alive(&self) -> bool {
        start_time(self.pid) == Some(self.started)
    }
}

impl LockGuard {
    /// Takes the lock if it is free, writing our pid into the file; `None` if held.
    pub fn try_acquire(path: &Path) -> Result<Option<LockGuard>, LockError> {
        Self::take(path, false)
    }

    /// [`LockGuard::try_acquire`] for the process making the agent: its file says so.
    pub fn try_acquire_making(path: &Path) -> Result<Option<LockGuard>, LockError> {
        Self::take(path, true)
    }

    /// Takes the lock, waiting for its holder to let go (making the file if need be).
    pub fn acquire_waiting(path: &Path) -> Result<LockGuard, LockError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|source| LockError::Open { path: path.to_owned(), source })?;
        loop {
            match ofd_lock(&file, libc::F_OFD_SETLKW, libc::F_WRLCK as libc::c_short) {
                Ok(_) => return Ok(LockGuard { file }),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(LockError::Lock { path: path.to_owned(), source }),
            }
        }
    }

    fn take(path: &Path, making: bool) -> Result<Option<LockGuard>, LockError> {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| LockError::Open { path: path.to_owned(), source })?;
        match ofd_lock(&file, libc::F_OFD_SETLK, libc::F_WRLCK as libc::c_short) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) => return Ok(None),
            Err(source) => return Err(LockError::Lock { path: path.to_owned(), source }),
        }
        let pid = std::process::id();
        let mut holder = format!("{pid} {}", start_time(pid).unwrap_or(0));
        if making {
            holder.push_str(&format!(" {MAKING}"));
        }
        // Who holds it is for `stop`; a failure to write it does not unlock.
        let _ = file.set_len(0).and_then(|()| file.write_all(holder.as_bytes()));
        Ok(Some(LockGuard { file }))
    }

    /// Whether someone holds the lock right now; never takes it.
    pub fn probe(path: &Path) -> Result<Probe, LockError> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Probe::Free),
            Err(source) => return Err(LockError::Open { path: path.to_owned(), source }),
        };
        // Asking about a write lock reports any lock that would conflict with it.
        let held = ofd_lock(&file, libc::F_OFD_GETLK, libc::F_WRLCK as libc::c_short)
            .map_err(|source| LockError::Lock { path: path.to_owned(), source })?;
        if !held {
            return Ok(Probe::Free);
        }
        let holder = std::fs::read_to_string(path).ok().and_then(|t| Holder::parse(&t));
        Ok(Probe::Held(holder))
    }

    /// Whether someone holds the lock right now (see [`LockGuard::probe`]).
    pub fn is_held(path: &Path) -> Result<bool, LockError> {
        Ok(matches!(Self::probe(path)?, Probe::Held(_)))
    }
}

/// One `fcntl` lock command over the whole file. For `F_OFD_GETLK`, returns whether
/// a conflicting lock exists; for `F_OFD_SETLK`, `true` once the lock is held.
#[expect(unsafe_code, reason = "fcntl(2) lock commands take a pointer to a struct we own for the call")]
fn ofd_lock(file: &File, command: libc::c_int, kind: libc::c_short) -> std::io::Result<bool> {
    // SAFETY: an all-zero `flock` is valid (start 0, length 0 = the whole file).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: the descriptor is open for the call and `lock` lives across it.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), command, &mut lock) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(command != libc::F_OFD_GETLK || lock.l_type != libc::F_UNLCK as libc::c_short)
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = ofd_lock(&self.file, libc::F_OFD_SETLK, libc::F_UNLCK as libc::c_short);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_probes_never_take_the_lock() {
        let path = std::env::temp_dir().join(format!("offshoot-lock-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        assert_eq!(LockGuard::probe(&path).expect("probe"), Probe::Free);
        let held = LockGuard::try_acquire(&path).expect("lock").expect("free");
        // A second open file description cannot take it, even in the same process.
        assert!(LockGuard::try_acquire(&path).expect("lock").is_none());
        let me =
            Holder { pid: std::process::id(), started: start_time(std::process::id()).expect("stat"), making: false };
        assert_eq!(LockGuard::probe(&path).expect("probe"), Probe::Held(Some(me)));
        assert!(me.is_alive());
        assert!(!Holder { started: me.started + 1, ..me }.is_alive());
        drop(held);
        // A maker's lock says so (a stop leaves its process alone).
        let making = LockGuard::try_acquire_making(&path).expect("lock").expect("free");
        assert_eq!(LockGuard::probe(&path).expect("probe"), Probe::Held(Some(Holder { making: true, ..me })));
        drop(making);
        // While probes run, a driver can always take a free lock.
        for _ in 0..100 {
            assert_eq!(LockGuard::probe(&path).expect("probe"), Probe::Free);
            let again = LockGuard::try_acquire(&path).expect("lock");
            assert!(again.is_some());
        }
        // A waiter gets the lock once its holder lets go, not before.
        let held = LockGuard::try_acquire(&path).expect("lock").expect("free");
        let waiting = {
            let path = path.clone();
            std::thread::spawn(move || {
                let got = LockGuard::acquire_waiting(&path).expect("wait");
                (std::time::Instant::now(), got)
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        let let_go = std::time::Instant::now();
        drop(held);
        let (got_at, _got) = waiting.join().expect("waiter");
        assert!(got_at >= let_go);
        let _ = std::fs::remove_file(&path);
    }
}
