//! Packing as the harness goes: the loose objects of a repository (a step writes a
//! handful, the transcript tree among them, stored uncompressed for speed) become one
//! pack, deltas found among them, and the loose files it holds are removed. Meant for
//! a thread of its own, off the step's critical path; one packer at a time per
//! repository (a lock file beside the packs), and nothing is removed before the pack
//! that holds it is whole on disk (libgit2 writes the pack, then its index, each by
//! rename). A reader that misses a loose object just removed finds it in the new pack
//! (libgit2 and git both look at the packs again on a miss).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use git2::{Oid, Repository};

use super::{GitError, Result, lib};

/// A lock older than this was left by a packer that died: it is taken over.
const STALE: Duration = Duration::from_secs(600);

/// The lock file beside the packs that one packer at a time holds (its pid inside).
const LOCK: &str = "offshoot-packing.lock";

/// How a packing went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packing {
    Done(Packed),
    /// Nothing to pack.
    Nothing,
    /// Another packer holds the lock.
    Busy,
}

/// What one packing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    pub objects: usize,
    /// Objects left out, which nothing reached.
    pub pruned: usize,
    /// Bytes of the loose files removed, and of the pack written.
    pub loose_bytes: u64,
    pub pack_bytes: u64,
}

/// The loose objects of the object store `objects`: their ids and file sizes.
pub(crate) fn loose_objects(objects: &Path) -> Vec<(Oid, PathBuf, u64)> {
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
/// `at_least`, unless another packer is at work.
pub fn pack_loose(git_dir: &Path, at_least: usize) -> Result<Packing> {
    let objects = git_dir.join("objects");
    // Only what was written lately (a driver's own): an older loose object may be one
    // `consolidate` kept out of its pack so that it ages, which a new pack would hide.
    let lately = SystemTime::now() - Duration::from_secs(3600);
    let loose: Vec<(Oid, PathBuf, u64)> =
        loose_objects(&objects).into_iter().filter(|(_, path, _)| modified(path) >= lately).collect();
    if loose.len() < at_least.max(1) {
        return Ok(Packing::Nothing);
    }
    let packs = objects.join("pack");
    std::fs::create_dir_all(&packs).map_err(|source| GitError::Io { path: packs.clone(), source })?;
    let Some(_lock) = PackLock::take(&packs.join(LOCK)) else { return Ok(Packing::Busy) };
    sweep_unfinished(&packs);
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
        return Ok(Packing::Nothing);
    }
    let pack_bytes = write_pack(&mut builder, &packs)?.bytes;
    // Every inserted object is in the pack now, which is whole: the loose copies go.
    let mut loose_bytes = 0;
    for (path, size) in &inserted {
        if std::fs::remove_file(path).is_ok() {
            loose_bytes += size;
        }
    }
    Ok(Packing::Done(Packed { objects: inserted.len(), pruned: 0, loose_bytes, pack_bytes }))
}

/// What a merge of packs may leave out: the objects of the repository itself that
/// nothing reaches — not a ref, a reflog entry, one of `roots`, nor an object written
/// after `before` (a driver writes its objects before its branch names them) — and
/// that were themselves written before `before`.
pub struct Prune {
    pub roots: Vec<Oid>,
    pub before: SystemTime,
}

/// Makes every object of the bare repository `git_dir` — its packs' and its loose
/// ones — one pack, then removes the packs and loose files it replaced (each only
/// once the new pack is whole). With `prune`, the objects it lets go are left out;
/// without, nothing is.
pub fn consolidate(git_dir: &Path, prune: Option<&Prune>) -> Result<Packing> {
    let objects = git_dir.join("objects");
    let packs = objects.join("pack");
    std::fs::create_dir_all(&packs).map_err(|source| GitError::Io { path: packs.clone(), source })?;
    let Some(_lock) = PackLock::take(&packs.join(LOCK)) else { return Ok(Packing::Busy) };
    sweep_unfinished(&packs);
    let old_packs = pack_files(&packs);
    let loose = loose_objects(&objects);
    // Only this repository's own objects: not those its alternates (the user's
    // repository in project mode) lend it.
    let own = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    // Each object of the repository's own, with when it was last written (its file's
    // time, or its pack's: libgit2 and git touch the file again when they write an
    // object it already holds).
    let mut written_at: HashMap<Oid, SystemTime> = HashMap::new();
    let mut note = |oid: Oid, at: SystemTime| {
        let slot = written_at.entry(oid).or_insert(at);
        *slot = (*slot).max(at);
    };
    let mut pack_ids = HashMap::new();
    for pack in old_packs.iter().filter(|p| p.extension().is_some_and(|e| e == "idx")) {
        let at = modified(&pack.with_extension("pack"));
        let ids = idx_ids(pack).map_err(|source| GitError::Io { path: pack.clone(), source })?;
        for oid in &ids {
            note(*oid, at);
        }
        pack_ids.insert(pack.with_extension("pack"), (at, ids));
    }
    for (oid, path, _) in &loose {
        note(*oid, modified(path));
    }
    // What goes in the pack; what stays loose, as old as it was (reached only from
    // objects younger than the grace: packed, it would look written now and never
    // age); what is let go.
    let (keep, young) = match prune {
        Some(prune) => reached(&own, &written_at, prune),
        None => (written_at.keys().copied().collect(), HashSet::new()),
    };
    let pruned = written_at.len() - keep.len() - young.len();
    let loose_ids: HashSet<Oid> = loose.iter().map(|(oid, _, _)| *oid).collect();
    let young_in_packs = young.iter().any(|oid| !loose_ids.contains(oid));
    let loose_to_pack = loose.iter().any(|(oid, _, _)| keep.contains(oid));
    if old_packs.len() <= 2 && !loose_to_pack && pruned == 0 && !young_in_packs {
        return Ok(Packing::Nothing);
    }
    let mut builder = own.packbuilder().map_err(lib("start a pack"))?;
    builder.set_threads(1);
    for oid in &keep {
        // One that cannot be read is not packed, and the pack or file holding it stays.
        let _ = builder.insert_object(*oid, None);
    }
    let objects_packed = builder.object_count();
    let before_bytes: u64 = old_packs.iter().map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)).sum();
    let loose_bytes: u64 = loose.iter().map(|(_, _, size)| size).sum();
    let written = write_pack(&mut builder, &packs)?;
    let mut unpacked = young.iter().filter(|oid| !loose_ids.contains(oid));
    let loosened = unpacked.all(|oid| loosen(&own, &objects, *oid, written_at[oid]));
    if objects_packed < keep.len() || !loosened {
        // Something was not packed or written out: nothing is removed.
        return Ok(Packing::Done(Packed {
            objects: objects_packed,
            pruned: 0,
            loose_bytes: 0,
            pack_bytes: written.bytes,
        }));
    }
    // A file holding an object let go that was written again since it was listed
    // holds an object a writer has just used (it found the object there, wrote
    // nothing and touched the file): it stays.
    let untouched = |path: &Path, listed: SystemTime| modified(path) <= listed;
    let lets_go = |pack: &Path| {
        pack_ids.get(&pack.with_extension("pack")).is_none_or(|(listed, ids)| {
            ids.iter().all(|oid| keep.contains(oid) || young.contains(oid))
                || untouched(&pack.with_extension("pack"), *listed)
        })
    };
    // The old packs go — never the one just written, which has the same name when it
    // holds the same objects — each index before its pack (a reader never finds an
    // index without its pack), then the loose copies of what was packed and of what
    // was let go.
    let mut old: Vec<&PathBuf> =
        old_packs.iter().filter(|p| !written.files.contains(p)).filter(|p| lets_go(p)).collect();
    old.sort_by_key(|p| p.extension().is_some_and(|e| e == "pack"));
    for path in old {
        let _ = std::fs::remove_file(path);
    }
    for (oid, path, _) in &loose {
        let goes = keep.contains(oid)
            || (!young.contains(oid)
                && untouched(path, written_at.get(oid).copied().unwrap_or(SystemTime::UNIX_EPOCH)));
        if goes {
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(Packing::Done(Packed {
        objects: objects_packed,
        pruned,
        loose_bytes: loose_bytes + before_bytes,
        pack_bytes: written.bytes,
    }))
}

/// Writes object `oid` of `own` as a loose file of `objects` dated `at` (when it was
/// last written), so it ages from then; whether it is there.
fn loosen(own: &Repository, objects: &Path, oid: Oid, at: SystemTime) -> bool {
    let Ok(odb) = own.odb() else { return false };
    let Ok(object) = odb.read(oid) else { return false };
    let Ok(written) = super::loose::write_stored(objects, object.kind().str(), object.data()) else { return false };
    let hex = written.to_string();
    let path = objects.join(&hex[..2]).join(&hex[2..]);
    written == oid && std::fs::File::open(&path).and_then(|f| f.set_modified(at)).is_ok()
}

fn modified(path: &Path) -> SystemTime {
    std::fs::metadata(path).and_then(|m| m.modified()).unwrap_or_else(|_| SystemTime::now())
}

/// The objects of `own` (`written_at` lists them) that `prune` keeps: those reached
/// from its refs and reflogs and its roots, and apart, those reached only from the
/// objects written since its `before`. The walk stops at objects the repository does
/// not hold itself (an alternate's: what they reach is theirs too).
fn reached(own: &Repository, written_at: &HashMap<Oid, SystemTime>, prune: &Prune) -> (HashSet<Oid>, HashSet<Oid>) {
    let mut todo: Vec<Oid> = prune.roots.clone();
    if let Ok(references) = own.references() {
        for reference in references.flatten() {
            todo.extend(reference.target());
            let Ok(name) = reference.name() else { continue };
            if let Ok(log) = own.reflog(name) {
                for entry in log.iter() {
                    todo.extend([entry.id_old(), entry.id_new()].into_iter().filter(|o| !o.is_zero()));
                }
            }
        }
    }
    let mut rooted = HashSet::new();
    walk(own, written_at, todo, &mut rooted);
    let young: Vec<Oid> = written_at.iter().filter(|(_, at)| **at >= prune.before).map(|(oid, _)| *oid).collect();
    let mut from_young = rooted.clone();
    walk(own, written_at, young, &mut from_young);
    let young = from_young.difference(&rooted).copied().collect();
    (rooted, young)
}

/// Adds to `seen` every object of `written_at` reached from `todo`.
fn walk(own: &Repository, written_at: &HashMap<Oid, SystemTime>, mut todo: Vec<Oid>, seen: &mut HashSet<Oid>) {
    while let Some(oid) = todo.pop() {
        if !written_at.contains_key(&oid) || !seen.insert(oid) {
            continue;
        }
        let Ok(object) = own.find_object(oid, None) else { continue };
        let Some(kind) = object.kind() else { continue };
        todo.extend(super::named_by(own, oid, kind).unwrap_or_default());
    }
}

/// The blobs an index file names (the harness's stat cache of an agent's directory:
/// what its next commit may use without writing them again).
pub fn index_blobs(index: &Path) -> Vec<Oid> {
    git2::Index::open(index).map(|i| i.iter().map(|e| e.id).collect()).unwrap_or_default()
}

/// The pack a builder wrote: its two files, by the name libgit2 gave it.
struct Written {
    files: Vec<PathBuf>,
    bytes: u64,
}

/// Writes `builder`'s pack into `packs` and names its files (`pack-<name>.pack` and
/// `.idx`); a pack whose name cannot be known is an error, so nothing is removed for it.
fn write_pack(builder: &mut git2::PackBuilder<'_>, packs: &Path) -> Result<Written> {
    builder.write(packs, 0o444).map_err(lib("write a pack"))?;
    let name = builder.name().ok().flatten().map(str::to_owned).ok_or_else(|| GitError::Io {
        path: packs.to_owned(),
        source: std::io::Error::other("the pack just written has no name"),
    })?;
    let files: Vec<PathBuf> = ["pack", "idx"].iter().map(|ext| packs.join(format!("pack-{name}.{ext}"))).collect();
    if !files.iter().all(|f| f.is_file()) {
        return Err(GitError::Io {
            path: files[0].clone(),
            source: std::io::Error::other("the pack just written is not there"),
        });
    }
    let bytes = files.iter().map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)).sum();
    Ok(Written { files, bytes })
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

/// Removes the temporary files of packs a packer killed mid-write left
/// (`pack_git2_…`, libgit2's); called with the lock held, so no packer is writing one.
fn sweep_unfinished(packs: &Path) {
    for entry in std::fs::read_dir(packs).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with("pack_git2_") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
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
        use std::io::Write;
        for _ in 0..2 {
            match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
                Ok(mut file) => {
                    let _ = write!(file, "{}", std::process::id());
                    return Some(PackLock(path.to_owned()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    // Left by a packer that died (its process is gone), or so old it must have.
                    let holder = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse::<u32>().ok());
                    let gone = holder.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
                    let age = std::fs::metadata(path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| SystemTime::now().duration_since(t).ok());
                    if !gone && age.is_none_or(|a| a < STALE) {
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
        assert_eq!(pack_loose(&dir, 1_000).expect("pack"), Packing::Nothing, "fewer than asked for: nothing done");
        let Packing::Done(packed) = pack_loose(&dir, 10).expect("pack") else { panic!("not packed") };
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
        assert!(matches!(pack_loose(&dir, 10).expect("pack"), Packing::Done(_)));
        let late = repo.blob(b"late").expect("blob");
        let Packing::Done(merged) = consolidate(&dir, None).expect("merge") else { panic!("not merged") };
        assert_eq!(merged.objects, 701);
        assert_eq!(pack_files(&dir.join("objects/pack")).len(), 2, "one pack and its index");
        assert!(loose_objects(&dir.join("objects")).is_empty());
        let reopened = Repository::open_bare(&dir).expect("open");
        reopened.find_object(late, None).expect("the loose one is in the pack");
        // A lock another packer holds: this one leaves everything as it is.
        repo.blob(b"later").expect("blob");
        let _held = PackLock::take(&dir.join("objects/pack/offshoot-packing.lock")).expect("lock");
        assert_eq!(pack_loose(&dir, 1).expect("pack"), Packing::Busy);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_merge_lets_go_of_old_objects_nothing_reaches_and_keeps_the_rest() {
        let dir = std::env::temp_dir().join(format!("offshoot-pack-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let repo = Repository::init_bare(&dir).expect("init");
        let sig = git2::Signature::now("t", "t@t").expect("sig");
        let commit = |blob_text: &str, parents: &[&git2::Commit<'_>]| {
            let blob = repo.blob(blob_text.as_bytes()).expect("blob");
            let mut tree = repo.treebuilder(None).expect("tree");
            tree.insert("f", blob, 0o100644).expect("insert");
            let tree = repo.find_tree(tree.write().expect("tree")).expect("tree");
            repo.commit(None, &sig, &sig, "m", &tree, parents).expect("commit")
        };
        let first = commit("kept by the branch", &[]);
        let parent = repo.find_commit(first).expect("first");
        let tip = commit("kept by the branch too", &[&parent]);
        repo.reference("refs/heads/agents/a", tip, false, "made").expect("branch");
        let dropped_branch = commit("a removed agent's", &[]);
        let rooted = repo.blob(b"named by a record").expect("blob");
        let old_unreached = repo.blob(b"nothing names this").expect("blob");
        // An old tree nothing reached, until a commit written just now (a driver's,
        // before its branch moves) named it.
        let reused_blob = repo.blob(b"an old file used again").expect("blob");
        let mut tree = repo.treebuilder(None).expect("tree");
        tree.insert("g", reused_blob, 0o100644).expect("insert");
        let reused_tree = tree.write().expect("tree");
        let long_ago = SystemTime::now() - Duration::from_secs(30 * 86_400);
        for (_, path, _) in loose_objects(&dir.join("objects")) {
            std::fs::File::options().write(true).open(&path).and_then(|f| f.set_modified(long_ago)).expect("age");
        }
        let young = repo.blob(b"written a moment ago").expect("blob");
        let in_flight = repo
            .commit(None, &sig, &sig, "in flight", &repo.find_tree(reused_tree).expect("tree"), &[])
            .expect("commit");
        let prune = Prune { roots: vec![rooted], before: SystemTime::now() - Duration::from_secs(3600) };
        let Packing::Done(done) = consolidate(&dir, Some(&prune)).expect("merge") else { panic!("not merged") };
        let reopened = Repository::open_bare(&dir).expect("open");
        let has = |oid: Oid| reopened.find_object(oid, None).is_ok();
        for kept in [first, tip, rooted, young, in_flight, reused_tree, reused_blob] {
            assert!(has(kept), "{kept} was kept");
        }
        for gone in [dropped_branch, old_unreached] {
            assert!(!has(gone), "{gone} went");
        }
        // The removed agent's commit, its tree and blob, and the lone blob.
        assert_eq!(done.pruned, 4, "{done:?}");
        // What only young objects reach stays loose, as old as it was, so it ages.
        let loose: Vec<Oid> = loose_objects(&dir.join("objects")).iter().map(|(oid, _, _)| *oid).collect();
        for young in [young, in_flight, reused_tree, reused_blob] {
            assert!(loose.contains(&young), "{young} stays loose");
        }
        let age = |oid: Oid| {
            let hex = oid.to_string();
            modified(&dir.join("objects").join(&hex[..2]).join(&hex[2..])).elapsed().unwrap_or_default()
        };
        assert!(age(reused_blob) > Duration::from_secs(29 * 86_400), "its time is kept");
        assert_eq!(consolidate(&dir, Some(&prune)).expect("again"), Packing::Nothing, "nothing left to let go");
        // A young object in a pack comes out of it dated as its pack, and goes once old.
        let packed = repo.blob(b"packed a while ago, reached by nothing").expect("blob");
        assert!(matches!(pack_loose(&dir, 1).expect("pack"), Packing::Done(_)));
        let two_days_ago = SystemTime::now() - Duration::from_secs(2 * 86_400);
        for pack in pack_files(&dir.join("objects/pack")) {
            std::fs::File::options().append(true).open(&pack).and_then(|f| f.set_modified(two_days_ago)).expect("age");
        }
        let week = Prune { roots: vec![rooted], before: SystemTime::now() - Duration::from_secs(7 * 86_400) };
        consolidate(&dir, Some(&week)).expect("merge");
        let loose: Vec<Oid> = loose_objects(&dir.join("objects")).iter().map(|(oid, _, _)| *oid).collect();
        assert!(loose.contains(&packed), "out of the pack");
        assert!(age(packed) > Duration::from_secs(86_400), "dated as its pack");
        let Packing::Done(done) = consolidate(&dir, Some(&prune)).expect("merge") else { panic!("not merged") };
        assert!(done.pruned >= 1, "{done:?}");
        assert!(Repository::open_bare(&dir).expect("open").find_object(packed, None).is_err(), "gone once old");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_merge_that_writes_the_pack_already_there_keeps_it() {
        let dir = std::env::temp_dir().join(format!("offshoot-pack-same-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let repo = Repository::init_bare(&dir).expect("init");
        let ids: Vec<Oid> = (0..50).map(|n| repo.blob(format!("object {n}").as_bytes()).expect("blob")).collect();
        let objects = dir.join("objects");
        let copy = dir.join("loose-copy");
        std::fs::create_dir_all(&copy).expect("copy");
        for (oid, path, _) in loose_objects(&objects) {
            std::fs::copy(&path, copy.join(oid.to_string())).expect("keep a copy");
        }
        let put_back = || {
            for entry in std::fs::read_dir(&copy).expect("copies").flatten() {
                let hex = entry.file_name().to_string_lossy().into_owned();
                let at = objects.join(&hex[..2]);
                std::fs::create_dir_all(&at).expect("dir");
                let _ = std::fs::copy(entry.path(), at.join(&hex[2..]));
            }
        };
        assert!(matches!(consolidate(&dir, None).expect("merge"), Packing::Done(_) | Packing::Nothing));
        assert!(matches!(pack_loose(&dir, 1).expect("pack"), Packing::Done(_) | Packing::Nothing));
        // As a merge cut short while it removed the loose copies leaves them: twice.
        for _ in 0..2 {
            put_back();
            consolidate(&dir, None).expect("merge");
            let reopened = Repository::open_bare(&dir).expect("open");
            for id in &ids {
                reopened.find_object(*id, None).expect("every object survives a merge that rebuilds its pack");
            }
        }
        // A lock whose holder is gone is taken over at once, and what its pack left goes.
        std::fs::write(dir.join("objects/pack/offshoot-packing.lock"), "4194303999").expect("stale lock");
        let unfinished = dir.join("objects/pack/pack_git2_0123456789abcdef");
        std::fs::write(&unfinished, b"half a pack").expect("unfinished");
        put_back();
        assert!(matches!(consolidate(&dir, None).expect("merge"), Packing::Done(_)));
        assert!(!unfinished.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
