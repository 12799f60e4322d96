//! Packing as the harness goes: the loose objects of a repository (a step writes a
//! handful, the transcript tree among them, stored uncompressed for speed) become one
//! pack, deltas found among them, and the loose files it holds are removed. Meant for
//! a thread of its own, off the step's critical path; one packer at a time per
//! repository (a lock file beside the packs), and nothing is removed before the pack
//! that holds it is whole on disk (libgit2 writes the pack, then its index, each by
//! rename). A reader that misses a loose object just removed finds it in the new pack
//! (libgit2 and git both look at the packs again on a miss).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use git2::{Oid, Repository};

use super::{GitError, Result, lib};

/// A lock older than this was left by a packer that died: it is taken over.
const STALE: Duration = Duration::from_secs(600);

/// What one packing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    pub objects: usize,
    /// Bytes of the loose files removed, and of the pack written.
    pub loose_bytes: u64,
    pub pack_bytes: u64,
}

/// The loose objects of the object store `objects`: their ids and file sizes.
pub fn loose_objects(objects: &Path) -> Vec<(Oid, PathBuf, u64)> {
    let mut found = Vec::new();
    for dir in std::fs::read_dir(objects).into_iter().flatten().flatten() {
        let name = dir.file_name();
        let Some(prefix) = name.to_str().filter(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit())) else {
            continue;
        };
        for file in std::fs::read_dir(dir.path()).into_iter().flatten().flatten() {
            let rest = file.file_name();
            let Some(rest) = rest.to_str().filter(|r| r.len() == 38) else { continue };
            if let Ok(oid) = Oid::from_str(&format!("{prefix}{rest}")) {
                let size = file.metadata().map(|m| m.len()).unwrap_or(0);
                found.push((oid, file.path(), size));
            }
        }
    }
    found
}

/// Packs the loose objects of the bare repository `git_dir` when there are at least
/// `at_least`, unless another packer is at work; `None` when nothing was done.
pub fn pack_loose(git_dir: &Path, at_least: usize) -> Result<Option<Packed>> {
    let objects = git_dir.join("objects");
    let loose = loose_objects(&objects);
    if loose.len() < at_least.max(1) {
        return Ok(None);
    }
    let packs = objects.join("pack");
    std::fs::create_dir_all(&packs).map_err(|source| GitError::Io { path: packs.clone(), source })?;
    let Some(_lock) = PackLock::take(&packs.join("offshoot-packing.lock")) else { return Ok(None) };
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    let mut builder = repo.packbuilder().map_err(lib("start a pack"))?;
    builder.set_threads(1);
    let mut inserted = Vec::with_capacity(loose.len());
    for (oid, path, size) in loose {
        // One removed meanwhile (another packer, a `git gc`) is simply not packed here.
        if builder.insert_object(oid, None).is_ok() {
            inserted.push((path, size));
        }
    }
    if inserted.is_empty() {
        return Ok(None);
    }
    let before: std::collections::BTreeSet<PathBuf> = pack_files(&packs).into_iter().collect();
    builder.write(&packs, 0o444).map_err(lib("write a pack"))?;
    let pack_bytes = pack_files(&packs)
        .into_iter()
        .filter(|p| !before.contains(p))
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    // Every inserted object is in the pack now, which is whole: the loose copies go.
    let mut loose_bytes = 0;
    for (path, size) in &inserted {
        if std::fs::remove_file(path).is_ok() {
            loose_bytes += size;
        }
    }
    Ok(Some(Packed { objects: inserted.len(), loose_bytes, pack_bytes }))
}

/// Makes every object of the bare repository `git_dir` — its packs' and its loose
/// ones — one pack, then removes the packs and loose files it replaced (each only
/// once the new pack is whole). Nothing is pruned: an object no ref reaches yet (a
/// driver's commit before its branch moves) is kept like any other. `None` when another
/// packer is at work or there was nothing to merge.
pub fn consolidate(git_dir: &Path) -> Result<Option<Packed>> {
    let objects = git_dir.join("objects");
    let packs = objects.join("pack");
    std::fs::create_dir_all(&packs).map_err(|source| GitError::Io { path: packs.clone(), source })?;
    let Some(_lock) = PackLock::take(&packs.join("offshoot-packing.lock")) else { return Ok(None) };
    let old_packs = pack_files(&packs);
    let loose = loose_objects(&objects);
    if old_packs.len() <= 2 && loose.is_empty() {
        return Ok(None);
    }
    // Only this repository's own objects: not those its alternates (the user's
    // repository in project mode) lend it.
    let own = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    let mut ids = Vec::new();
    for pack in old_packs.iter().filter(|p| p.extension().is_some_and(|e| e == "idx")) {
        ids.extend(idx_ids(pack).map_err(|source| GitError::Io { path: pack.clone(), source })?);
    }
    ids.extend(loose.iter().map(|(oid, _, _)| *oid));
    let mut builder = own.packbuilder().map_err(lib("start a pack"))?;
    builder.set_threads(1);
    let mut count = 0;
    for oid in &ids {
        if builder.insert_object(*oid, None).is_ok() {
            count += 1;
        }
    }
    let before_bytes: u64 = old_packs.iter().map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)).sum();
    let loose_bytes: u64 = loose.iter().map(|(_, _, size)| size).sum();
    builder.write(&packs, 0o444).map_err(lib("write a pack"))?;
    let written: Vec<PathBuf> = pack_files(&packs).into_iter().filter(|p| !old_packs.contains(p)).collect();
    let pack_bytes = written.iter().map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)).sum();
    // The old packs go, each index before its pack (a reader never finds an index
    // without its pack), then the loose copies.
    let mut old = old_packs.clone();
    old.sort_by_key(|p| p.extension().is_some_and(|e| e == "pack"));
    for path in old.iter().filter(|p| !written.contains(p)) {
        let _ = std::fs::remove_file(path);
    }
    for (_, path, _) in &loose {
        let _ = std::fs::remove_file(path);
    }
    Ok(Some(Packed { objects: count, loose_bytes: loose_bytes + before_bytes, pack_bytes }))
}

/// The object ids a pack index (version 2) lists.
fn idx_ids(idx: &Path) -> std::io::Result<Vec<Oid>> {
    let bytes = std::fs::read(idx)?;
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not a version 2 pack index");
    if bytes.len() < 8 + 256 * 4 || bytes[..4] != [0xff, b't', b'O', b'c'] || bytes[4..8] != [0, 0, 0, 2] {
        return Err(bad());
    }
    let fanout = 8 + 255 * 4;
    let count = u32::from_be_bytes(bytes[fanout..fanout + 4].try_into().map_err(|_| bad())?) as usize;
    let start = 8 + 256 * 4;
    let end = start + count * 20;
    if bytes.len() < end {
        return Err(bad());
    }
    bytes[start..end].chunks(20).map(|c| Oid::from_bytes(c).map_err(|_| bad())).collect()
}

/// The `.pack` and `.idx` files in `packs`.
fn pack_files(packs: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(packs)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "pack" || e == "idx"))
        .collect()
}

/// The one packer of a repository: a file made exclusively, removed when dropped.
struct PackLock(PathBuf);

impl PackLock {
    fn take(path: &Path) -> Option<PackLock> {
        for _ in 0..2 {
            match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
                Ok(_) => return Some(PackLock(path.to_owned())),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let age = std::fs::metadata(path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| SystemTime::now().duration_since(t).ok());
                    if age.is_none_or(|a| a < STALE) {
                        return None;
                    }
                    let _ = std::fs::remove_file(path);
                }
                Err(_) => return None,
            }
        }
        None
    }
}

impl Drop for PackLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_objects_become_one_pack_and_every_object_still_reads() {
        let dir = std::env::temp_dir().join(format!("offshoot-pack-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let repo = Repository::init_bare(&dir).expect("init");
        // Trees that grow by an entry each, like a transcript's.
        let mut ids = Vec::new();
        let mut builder = repo.treebuilder(None).expect("builder");
        for n in 0..200 {
            let blob = repo.blob(format!("entry {n}\n").as_bytes()).expect("blob");
            builder.insert(format!("{n:04}-entry.json"), blob, 0o100644).expect("insert");
            ids.push(builder.write().expect("tree"));
            ids.push(blob);
        }
        let loose = loose_objects(&dir.join("objects")).len();
        assert_eq!(loose, 400);
        assert_eq!(pack_loose(&dir, 1_000).expect("pack"), None, "fewer than asked for: nothing done");
        let packed = pack_loose(&dir, 10).expect("pack").expect("packed");
        assert_eq!(packed.objects, 400);
        assert!(packed.pack_bytes < packed.loose_bytes / 4, "{packed:?}");
        assert!(loose_objects(&dir.join("objects")).is_empty());
        let reopened = Repository::open_bare(&dir).expect("open");
        for id in ids {
            reopened.find_object(id, None).expect("every object reads from the pack");
        }
        // Two packs and loose objects become one pack; every object still reads.
        for n in 0..300 {
            repo.blob(format!("more {n}").as_bytes()).expect("blob");
        }
        pack_loose(&dir, 10).expect("pack").expect("second pack");
        let late = repo.blob(b"late").expect("blob");
        let merged = consolidate(&dir).expect("merge").expect("merged");
        assert_eq!(merged.objects, 701);
        assert_eq!(pack_files(&dir.join("objects/pack")).len(), 2, "one pack and its index");
        assert!(loose_objects(&dir.join("objects")).is_empty());
        let reopened = Repository::open_bare(&dir).expect("open");
        reopened.find_object(late, None).expect("the loose one is in the pack");
        // A lock another packer holds: this one leaves everything as it is.
        repo.blob(b"later").expect("blob");
        let _held = PackLock::take(&dir.join("objects/pack/offshoot-packing.lock")).expect("lock");
        assert_eq!(pack_loose(&dir, 1).expect("pack"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
