//! Copies of the user's files into an agent's directory (warm starts: `target/`,
//! `node_modules/`): read from the user's checkout, written through the door, so a link
//! in the agent's directory is never followed. Each file is a reflink where the file
//! system shares blocks (`FICLONE`: btrfs, XFS), else a copy (`copy_file_range`), and
//! keeps its permission bits and its modification time — build tools compare those
//! times with their sources'.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::{Beneath, DoorError, Result};

/// What a copy made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    pub files: u64,
    pub bytes: u64,
    /// Files that share their blocks with the original (reflinks).
    pub cloned: u64,
    /// Things neither file, directory nor link (FIFOs, sockets, devices), and
    /// directories the caller leaves out: not copied.
    pub skipped: u64,
}

impl Beneath {
    /// Copies what stands at `from` (a file, a link or a whole directory, read as the
    /// user's, links not followed) to `rel` beneath this directory, where nothing may
    /// stand yet; a directory `leave_out` says yes to is left out, with what is in it.
    pub fn copy_in(&self, rel: &Path, from: &Path, leave_out: &dyn Fn(&Path) -> bool) -> Result<Copied> {
        let mut copied = Copied::default();
        self.copy_entry(rel, from, leave_out, &mut copied)?;
        Ok(copied)
    }

    fn copy_entry(
        &self,
        rel: &Path,
        from: &Path,
        leave_out: &dyn Fn(&Path) -> bool,
        copied: &mut Copied,
    ) -> Result<()> {
        let outside = |source| DoorError::Io { path: from.to_owned(), source };
        let meta = std::fs::symlink_metadata(from).map_err(outside)?;
        let kind = meta.file_type();
        if kind.is_dir() && leave_out(from) {
            copied.skipped += 1;
        } else if kind.is_dir() {
            self.create_dir_all(rel)?;
            for entry in std::fs::read_dir(from).map_err(outside)? {
                let entry = entry.map_err(outside)?;
                self.copy_entry(&rel.join(entry.file_name()), &entry.path(), leave_out, copied)?;
            }
        } else if kind.is_symlink() {
            let target = std::fs::read_link(from).map_err(outside)?;
            self.symlink(rel, target.as_os_str())?;
        } else if kind.is_file() {
            let mut source = File::open(from).map_err(outside)?;
            let mut file = self.create_new(rel, meta.permissions().mode())?;
            let into = |e| DoorError::Io { path: self.root.join(rel), source: e };
            if clone(&source, &file) {
                copied.cloned += 1;
            } else {
                std::io::copy(&mut source, &mut file).map_err(into)?;
            }
            file.set_permissions(std::fs::Permissions::from_mode(meta.permissions().mode() & 0o777)).map_err(into)?;
            if let Ok(modified) = meta.modified() {
                file.set_modified(modified).map_err(into)?;
            }
            copied.files += 1;
            copied.bytes += meta.len();
        } else {
            copied.skipped += 1;
        }
        Ok(())
    }
}

/// Makes `to` share `from`'s blocks, where the file system can.
#[expect(unsafe_code, reason = "ioctl(2) FICLONE takes the source descriptor as an integer; both are open")]
fn clone(from: &File, to: &File) -> bool {
    unsafe { libc::ioctl(to.as_raw_fd(), libc::FICLONE as _, from.as_raw_fd()) == 0 }
}
