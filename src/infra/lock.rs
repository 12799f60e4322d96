//! Exclusive per-agent driver locks on plain files (`flock` through `std::fs::File`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

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

impl LockGuard {
    /// Takes the lock if it is free, writing our pid into the file; `None` if held.
    pub fn try_acquire(path: &Path) -> Result<Option<LockGuard>, LockError> {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| LockError::Open { path: path.to_owned(), source })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(LockError::Lock { path: path.to_owned(), source });
            }
        }
        let pid = std::process::id().to_string();
        // The pid is informational (for `stop`); a failure to write it does not unlock.
        let _ = file.set_len(0).and_then(|()| file.write_all(pid.as_bytes()));
        Ok(Some(LockGuard { file }))
    }

    /// Whether someone holds the lock right now (probes without keeping it).
    pub fn is_held(path: &Path) -> Result<bool, LockError> {
        if !path.exists() {
            return Ok(false);
        }
        let file = File::open(path).map_err(|source| LockError::Open { path: path.to_owned(), source })?;
        match file.try_lock_shared() {
            Ok(()) => Ok(false),
            Err(std::fs::TryLockError::WouldBlock) => Ok(true),
            Err(std::fs::TryLockError::Error(source)) => Err(LockError::Lock { path: path.to_owned(), source }),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}
