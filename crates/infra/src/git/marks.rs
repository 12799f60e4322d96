//! Marks: small facts the harness keeps about an agent as refs
//! `refs/offshoot/<kind>/<key>` pointing at a blob of their content (set, claimed
//! create-only, read, listed, removed).

use super::{GitError, Repo, Result, create_only, file_age, lib, with_lock_retries};

/// Where every ref of the harness's own lives (marks, and the fleet's claims, records,
/// requests and mail): `refs/offshoot/<kind>/<key>`.
pub const HARNESS_REFS: &str = "refs/offshoot/";

/// The ref `refs/offshoot/<kind>/<key>`: the one place its name is made.
pub fn harness_ref(kind: &str, key: &str) -> String {
    format!("{HARNESS_REFS}{kind}/{key}")
}

/// The kind and key of a ref under `refs/offshoot/`, if `name` is one.
pub fn harness_ref_parts(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix(HARNESS_REFS)?.split_once('/')
}

impl Repo {
    /// The content of the mark `refs/offshoot/<kind>/<id>`, if it is set.
    pub fn mark(&self, kind: &str, id: &str) -> Result<Option<Vec<u8>>> {
        let name = harness_ref(kind, id);
        match self.repo.refname_to_id(&name) {
            Ok(oid) => Ok(Some(self.read_blob(oid)?)),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(source) => Err(GitError::Lib { what: format!("read {name}"), source }),
        }
    }

    /// Sets the mark `refs/offshoot/<kind>/<id>` to a blob of `content`.
    pub fn set_mark(&self, kind: &str, id: &str, content: &[u8]) -> Result<()> {
        let name = harness_ref(kind, id);
        let blob = self.repo.blob(content).map_err(lib(format!("write {name}")))?;
        with_lock_retries(&self.repo, &name, || self.repo.reference(&name, blob, true, "mark").map(|_| ()))
            .map_err(lib(format!("set {name}")))
    }

    /// Sets the mark `refs/offshoot/<kind>/<key>` to a blob of `content` unless it is
    /// already set (create-only, atomic); `false` when it was taken.
    pub fn claim_mark(&self, kind: &str, key: &str, content: &[u8]) -> Result<bool> {
        let name = harness_ref(kind, key);
        let blob = self.repo.blob(content).map_err(lib(format!("write {name}")))?;
        create_only(&self.repo, &name, blob, "claim")
    }

    /// How long ago the mark `refs/offshoot/<kind>/<key>` was set (its file's age; `None`
    /// when it is packed or gone).
    pub fn mark_age(&self, kind: &str, key: &str) -> Option<std::time::Duration> {
        file_age(&self.repo.path().join(harness_ref(kind, key)))
    }

    /// The keys of the marks `refs/offshoot/<kind>/<prefix>*`.
    pub fn marks(&self, kind: &str, prefix: &str) -> Result<Vec<String>> {
        let base = harness_ref(kind, "");
        let refs = self.repo.references_glob(&format!("{base}{prefix}*")).map_err(lib("list marks"))?;
        Ok(refs
            .flatten()
            .filter_map(|r| r.name().ok().and_then(|n| n.strip_prefix(&base)).map(str::to_owned))
            .collect())
    }

    /// Removes the mark `refs/offshoot/<kind>/<key>` (one that is gone is fine).
    pub fn delete_mark(&self, kind: &str, key: &str) -> Result<()> {
        self.delete_ref(&harness_ref(kind, key))
    }

    /// Removes the mark `refs/offshoot/<kind>/<key>` if it still holds `content` (under
    /// the ref's lock, so a claim made again meanwhile stays); whether it was removed.
    pub fn delete_mark_if(&self, kind: &str, key: &str, content: &[u8]) -> Result<bool> {
        let name = harness_ref(kind, key);
        let expected = git2::Oid::hash_object(git2::ObjectType::Blob, content).map_err(lib("hash a mark"))?;
        let mut tx = self.repo.transaction().map_err(lib(format!("lock {name}")))?;
        if tx.lock_ref(&name).is_err() {
            return Ok(false);
        }
        if self.repo.refname_to_id(&name).ok() != Some(expected) {
            return Ok(false);
        }
        tx.remove(&name).map_err(lib(format!("delete {name}")))?;
        tx.commit().map_err(lib(format!("delete {name}")))?;
        Ok(true)
    }

    /// Removes every mark of `id` (`refs/offshoot/*/<id>`).
    pub fn delete_marks(&self, id: &str) -> Result<()> {
        let refs = self.repo.references_glob(&harness_ref("*", id)).map_err(lib("list marks"))?;
        let names: Vec<String> = refs.flatten().filter_map(|r| r.name().ok().map(str::to_owned)).collect();
        names.iter().try_for_each(|name| self.delete_ref(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_removed_past_a_lock_file_a_killed_process_left() {
        let dir = std::env::temp_dir().join(format!("offshoot-marks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let repo = Repo::init(&dir.join("repo.git")).expect("init");
        repo.set_mark("compacting", "a", b"a.1").expect("set");
        let lock = dir.join("repo.git/refs/offshoot/compacting/a.lock");
        let file = std::fs::File::create(&lock).expect("lock");
        let then = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        file.set_modified(then).expect("age the lock");
        repo.delete_mark("compacting", "a").expect("delete past the stale lock");
        assert_eq!(repo.mark("compacting", "a").expect("read"), None);
        assert!(!lock.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_conditional_delete_leaves_a_mark_claimed_again_meanwhile() {
        let dir = std::env::temp_dir().join(format!("offshoot-marks-if-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let repo = Repo::init(&dir.join("repo.git")).expect("init");
        assert!(repo.claim_mark("names", "Ada", b"abc123").expect("claim"));
        // Claimed again by another agent since it was read: not this caller's to delete.
        repo.delete_mark("names", "Ada").expect("delete");
        assert!(repo.claim_mark("names", "Ada", b"def456").expect("claim again"));
        assert!(!repo.delete_mark_if("names", "Ada", b"abc123").expect("compare"));
        assert_eq!(repo.mark("names", "Ada").expect("read").as_deref(), Some(&b"def456"[..]));
        assert!(repo.delete_mark_if("names", "Ada", b"def456").expect("compare"));
        assert_eq!(repo.mark("names", "Ada").expect("read"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
