//! What a workspace last saw of each remote: the refs a fetch mirrors
//! (`refs/mirrors/<remote>/X` for the remote's `refs/X`), the expected values of the
//! next push, kept in a store of their own beside the repository's refs.
//!
//! A remote holding every agent ever handed to it has tens of thousands of refs, almost
//! all of them settled. As refs of the repository, they were in every ref operation of
//! it: libgit2 reads every loose file of a directory it lists, parses all of
//! `packed-refs` for each repository it opens and each iterator it makes, and compares a
//! new ref's name with every packed one. So mirror `refs/mirrors/<r>/<rest>` is the file
//! `mirrors/<r>/<rest>` of the git directory (no ref of git's: `git for-each-ref` does
//! not list it), written and read here: a fetch writes only the mirrors that changed,
//! and once [`PACK_AT`] loose ones accumulate it folds them into the remote's packed file
//! (`mirrors/<r>/.packed`, a name no ref can have: git refuses a component starting with
//! `.`) in one rewrite. The mirrors of work in flight (`hot`: claims, inboxes, stop
//! requests, presence), which come and go every round, stay loose, so a round's
//! removals never rewrite the packed file. Mirrors the remote no longer has go in the
//! same rewrite.
//!
//! Only the holder of the remote's turn (`remote::turn`) writes a remote's mirrors.
//! Files are replaced whole (written aside, renamed in), and a changed mirror's loose
//! file says its new value before a rewrite, so a reader in another process, or the
//! next writer after a kill, sees each mirror at its old value or its new one.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use git2::Oid;

use super::{GitError, Result};

/// What every mirror's name starts with.
pub const ROOT: &str = "refs/mirrors/";

/// Loose mirrors of a remote (not counting hot ones) that make a fetch fold them into
/// its packed file: the rewrite costs a line per packed mirror, so it comes once per
/// this many changed ones.
pub const PACK_AT: usize = 512;

/// The mirrors under a prefix, where they are stored.
#[derive(Debug, Default)]
struct Stored {
    /// Loose files, by full name (over any packed line of the same name).
    loose: BTreeMap<String, Oid>,
    /// Lines of the packed file under the prefix.
    packed: BTreeMap<String, Oid>,
}

impl Stored {
    fn value(&self, name: &str) -> Option<Oid> {
        self.loose.get(name).or_else(|| self.packed.get(name)).copied()
    }
}

/// What [`mirror`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Mirrored {
    /// Mirrors written or moved.
    pub written: usize,
    /// Mirrors removed (the remote no longer has them).
    pub removed: usize,
    /// Whether the packed file was rewritten.
    pub packed: bool,
}

/// Where mirror `name` (`refs/mirrors/<r>/<rest>`) is kept loose.
fn path_of(git_dir: &Path, name: &str) -> PathBuf {
    git_dir.join(name.strip_prefix("refs/").unwrap_or(name))
}

/// The remote `prefix` (`refs/mirrors/<r>/...`) is of.
fn remote_of(prefix: &str) -> Result<&str> {
    prefix
        .strip_prefix(ROOT)
        .and_then(|rest| rest.split('/').next())
        .filter(|r| !r.is_empty() && !r.starts_with('.') && *r != "*")
        .ok_or_else(|| GitError::Outside { path: prefix.to_owned(), dir: ROOT.to_owned() })
}

/// The packed file of remote `remote`.
fn packed_path(git_dir: &Path, remote: &str) -> PathBuf {
    git_dir.join("mirrors").join(remote).join(".packed")
}

/// Makes the mirrors under `prefix` (`refs/mirrors/<r>/...`) of the repository at
/// `git_dir` exactly `wanted` (full names, each under `prefix`): those that differ are
/// written, the others removed. `fetch` is called once, before anything is written,
/// when something is to be written (to bring the objects), with the values those had
/// (what this repository holds of them already). Mirrors under any of `hot`
/// stay loose; the rest are folded into the packed file once [`PACK_AT`] of them are
/// loose. The caller holds the remote's turn.
pub fn mirror(
    git_dir: &Path,
    prefix: &str,
    wanted: &BTreeMap<String, Oid>,
    hot: &[String],
    fetch: &mut dyn FnMut(&[Oid]) -> Result<()>,
) -> Result<Mirrored> {
    let remote = remote_of(prefix)?;
    drop_legacy(git_dir, remote)?;
    let is_hot = |name: &str| hot.iter().any(|h| name.starts_with(h.as_str()));
    let stored = read(git_dir, prefix)?;
    let gone: BTreeSet<&str> = stored
        .loose
        .keys()
        .chain(stored.packed.keys())
        .map(String::as_str)
        .filter(|n| !wanted.contains_key(*n))
        .collect();
    let mut writes: Vec<(&str, Oid)> =
        wanted.iter().filter(|(n, o)| stored.value(n) != Some(**o)).map(|(n, o)| (n.as_str(), *o)).collect();
    let mut done = Mirrored { written: writes.len(), removed: gone.len(), packed: false };
    if !writes.is_empty() {
        let had: Vec<Oid> = writes.iter().filter_map(|(n, _)| stored.value(n)).filter(|o| !o.is_zero()).collect();
        fetch(&had)?;
    }
    let cold_loose = wanted
        .keys()
        .filter(|n| {
            !is_hot(n) && (stored.loose.contains_key(n.as_str()) || stored.value(n) != wanted.get(n.as_str()).copied())
        })
        .count();
    let rewriting = gone.iter().any(|n| stored.packed.contains_key(*n)) || cold_loose >= PACK_AT;
    if !rewriting {
        // Gone loose files before any write: a name the remote now has refs below (`x`
        // then `x/y`).
        for name in gone.iter().filter(|n| stored.loose.contains_key(**n)) {
            remove_loose(git_dir, remote, name)?;
        }
    } else {
        // One rewrite: every cold mirror under the prefix at its wanted value (a changed
        // one straight into the file), nothing that is gone; then no loose file of a
        // cold mirror, and every hot one loose.
        let cold: BTreeMap<&str, Oid> =
            wanted.iter().filter(|(n, _)| !is_hot(n)).map(|(n, o)| (n.as_str(), *o)).collect();
        // (A loose file of a changed mirror says its new value first: killed between
        // the rewrite and the removals, no old value stands over a new line.)
        for (name, oid) in writes.iter().filter(|(n, _)| stored.loose.contains_key(*n) && !is_hot(n)) {
            write_loose(git_dir, name, *oid)?;
        }
        rewrite(git_dir, remote, prefix, &cold)?;
        // (Then the loose files: a gone one's packed line is gone first, so no older
        // value shows while it goes.)
        for name in stored.loose.keys().filter(|n| cold.contains_key(n.as_str()) || gone.contains(n.as_str())) {
            remove_loose(git_dir, remote, name)?;
        }
        writes = wanted
            .iter()
            .filter(|(n, o)| is_hot(n) && stored.loose.get(n.as_str()) != Some(*o))
            .map(|(n, o)| (n.as_str(), *o))
            .collect();
        done.packed = true;
    }
    for (name, oid) in writes {
        write_loose(git_dir, name, oid)?;
    }
    Ok(done)
}

/// Sets or removes (`None`) mirrors `refs`, each under `prefix` (what a push just did
/// there): loose writes, and one rewrite of the packed file when a packed one goes.
pub fn set(git_dir: &Path, prefix: &str, refs: &[(String, Option<Oid>)]) -> Result<()> {
    let remote = remote_of(prefix)?;
    let stored = read(git_dir, prefix)?;
    let refs: Vec<&(String, Option<Oid>)> = refs.iter().filter(|(n, _)| n.starts_with(prefix)).collect();
    let gone: BTreeSet<&str> = refs.iter().filter(|(_, v)| v.is_none()).map(|(n, _)| n.as_str()).collect();
    // A packed line goes first, then the loose file: no older value shows meanwhile.
    if gone.iter().any(|n| stored.packed.contains_key(*n)) {
        let kept: BTreeMap<&str, Oid> =
            stored.packed.iter().filter(|(n, _)| !gone.contains(n.as_str())).map(|(n, o)| (n.as_str(), *o)).collect();
        rewrite(git_dir, remote, prefix, &kept)?;
    }
    for name in gone.iter().filter(|n| stored.loose.contains_key(**n)) {
        remove_loose(git_dir, remote, name)?;
    }
    for (name, value) in refs {
        if let Some(oid) = value
            && stored.value(name) != Some(*oid)
        {
            write_loose(git_dir, name, *oid)?;
        }
    }
    Ok(())
}

/// Removes every mirror of remote `remote`.
pub fn forget(git_dir: &Path, remote: &str) -> Result<()> {
    let prefix = format!("{ROOT}{remote}/");
    remote_of(&prefix)?;
    drop_legacy(git_dir, remote)?;
    let dir = git_dir.join("mirrors").join(remote);
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&dir)(e)),
        _ => Ok(()),
    }
}

/// The mirrors whose names start with `prefix` (`refs/mirrors/<r>/...`, or
/// `refs/mirrors/*/...` for every remote's), sorted by name.
pub fn refs(git_dir: &Path, prefix: &str) -> Result<Vec<(String, Oid)>> {
    let remotes: Vec<String> = match prefix.strip_prefix(ROOT).and_then(|r| r.strip_prefix("*/")) {
        Some(_) => match std::fs::read_dir(git_dir.join("mirrors")) {
            Ok(entries) => entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|r| !r.starts_with('.'))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io(&git_dir.join("mirrors"))(e)),
        },
        None => vec![remote_of(prefix)?.to_owned()],
    };
    let mut out = BTreeMap::new();
    for remote in remotes {
        let prefix = match prefix.strip_prefix(&format!("{ROOT}*/")) {
            Some(rest) => format!("{ROOT}{remote}/{rest}"),
            None => prefix.to_owned(),
        };
        let stored = read(git_dir, &prefix)?;
        out.extend(stored.packed);
        out.extend(stored.loose.into_iter().filter(|(_, o)| !o.is_zero()));
    }
    Ok(out.into_iter().collect())
}

/// Mirrors a version before this one kept as refs of the repository (`refs/mirrors/<r>/`):
/// removed once, through libgit2, when the remote's mirrors are next written.
fn drop_legacy(git_dir: &Path, remote: &str) -> Result<()> {
    let dir = git_dir.join("refs/mirrors").join(remote);
    if !dir.exists() {
        return Ok(());
    }
    let repo = git2::Repository::open_bare(git_dir).map_err(super::lib(format!("open {}", git_dir.display())))?;
    let names: Vec<String> = repo
        .references_glob(&format!("{ROOT}{remote}/*"))
        .map_err(super::lib("list the old mirrors"))?
        .flatten()
        .filter_map(|r| r.name().ok().map(str::to_owned))
        .collect();
    for name in names {
        super::delete_ref(&repo, &name)?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Writes loose mirror `name` whole: its lock file made, written, renamed over it.
fn write_loose(git_dir: &Path, name: &str, oid: Oid) -> Result<()> {
    let path = path_of(git_dir, name);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut lock_name = path.clone().into_os_string();
    lock_name.push(".lock");
    let lock = PathBuf::from(lock_name);
    let mut file = take_lock(&lock)?;
    let written =
        file.write_all(format!("{oid}\n").as_bytes()).and_then(|()| std::fs::rename(&lock, &path)).map_err(io(&path));
    if written.is_err() {
        let _ = std::fs::remove_file(&lock);
    }
    written
}

/// The names of the refs of the repository at `git_dir` that start with `prefix` (any
/// text: `refs/heads/agents/a.`), loose or packed, from one listing of the directory
/// the prefix ends in: no file is opened or stat'ed but those that match (libgit2's
/// iterator stats every file of the directory and copies the whole packed list).
pub(super) fn names_under(git_dir: &Path, prefix: &str) -> Result<BTreeSet<String>> {
    let (dir, start) = prefix.rsplit_once('/').map_or(("", prefix), |(d, s)| (d, s));
    let mut names = BTreeSet::new();
    let path = git_dir.join(dir);
    match std::fs::read_dir(&path) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(io(&path))?;
                let Ok(file) = entry.file_name().into_string() else { continue };
                if !file.starts_with(start) || file.ends_with(".lock") {
                    continue;
                }
                let kind = entry.file_type().map_err(io(&entry.path()))?;
                if kind.is_dir() {
                    let mut below = BTreeMap::new();
                    walk_loose(&entry.path(), &format!("{dir}/{file}/"), &mut below)?;
                    names.extend(below.into_keys());
                } else if kind.is_file() {
                    names.insert(format!("{dir}/{file}"));
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&path)(e)),
    }
    names.extend(
        read_packed(&git_dir.join("packed-refs"))?
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(|(n, _)| n.starts_with(prefix))
            .map(|(n, _)| n.clone()),
    );
    Ok(names)
}

/// The loose files and packed lines under `prefix`.
fn read(git_dir: &Path, prefix: &str) -> Result<Stored> {
    let mut stored = Stored::default();
    // (From the directory the prefix ends in, names filtered by the rest of it.)
    let dir = prefix.rsplit_once('/').map_or("", |(d, _)| d);
    let mut loose = BTreeMap::new();
    walk_loose(&path_of(git_dir, &format!("{dir}/")), &format!("{dir}/"), &mut loose)?;
    stored.loose = loose.into_iter().filter(|(n, _)| n.starts_with(prefix)).collect();
    stored.packed = read_packed(&packed_path(git_dir, remote_of(prefix)?))?
        .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
        .take_while(|(n, _)| n.starts_with(prefix))
        .map(|(n, l)| (n.clone(), l.oid))
        .collect();
    Ok(stored)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> GitError + '_ {
    move |source| GitError::Io { path: path.to_owned(), source }
}

/// Every loose ref file below `dir` (whose name is `name`), by full name. One that is
/// no ref (cut, or a symbolic ref) is there as the zero id: removed or written over,
/// never left to stand in a name's way.
fn walk_loose(dir: &Path, name: &str, into: &mut BTreeMap<String, Oid>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.kind() == std::io::ErrorKind::NotADirectory => {
            return Ok(());
        }
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let Ok(file) = entry.file_name().into_string() else { continue };
        if file.starts_with('.') || file.ends_with(".lock") {
            continue;
        }
        let path = entry.path();
        let kind = entry.file_type().map_err(io(&path))?;
        if kind.is_dir() {
            walk_loose(&path, &format!("{name}{file}/"), into)?;
        } else if kind.is_file() {
            // A file another process is replacing reads whole either way (renamed in).
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(&path)(e)),
            };
            into.insert(format!("{name}{file}"), Oid::from_str(text.trim_end()).unwrap_or(Oid::ZERO_SHA1));
        }
    }
    Ok(())
}

/// One line of a packed file: the ref's value and what it peels to, when the line after
/// it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Line {
    oid: Oid,
    peeled: Option<Oid>,
}

/// The packed file at `path`, parsed, by ref name. A packed file is never changed in
/// place (git, libgit2 and [`rewrite`] rename a new one in), so a parse is reused while
/// the file's inode, size and time stay those it was read at: a worker's round reads a
/// packed file of thousands of settled mirrors once per rewrite, not once a round.
fn read_packed(path: &Path) -> Result<std::sync::Arc<BTreeMap<String, Line>>> {
    use std::os::unix::fs::MetadataExt;
    type Parsed = (PathBuf, (u64, u64, i64, i64), std::sync::Arc<BTreeMap<String, Line>>);
    static LAST: std::sync::Mutex<Vec<Parsed>> = std::sync::Mutex::new(Vec::new());
    let stamp = match std::fs::metadata(path) {
        Ok(m) => (m.ino(), m.size(), m.mtime(), m.mtime_nsec()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(io(path)(e)),
    };
    let mut last = LAST.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, _, parsed)) = last.iter().find(|(p, s, _)| p == path && *s == stamp) {
        return Ok(parsed.clone());
    }
    let parsed = std::sync::Arc::new(parse_packed(&read_text(path)?));
    last.retain(|(p, _, _)| p != path);
    // (A process mirrors a remote or two into a repository or two.)
    if last.len() >= 8 {
        last.remove(0);
    }
    last.push((path.to_owned(), stamp, parsed.clone()));
    Ok(parsed)
}

/// A file's text; empty when there is no file.
fn read_text(path: &Path) -> Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(io(path)(e)),
    }
}

fn parse_packed(text: &str) -> BTreeMap<String, Line> {
    let mut lines = BTreeMap::new();
    let mut last: Option<String> = None;
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(peeled) = line.strip_prefix('^') {
            if let (Some(name), Ok(peeled)) = (&last, Oid::from_str(peeled)) {
                lines.entry(name.clone()).and_modify(|l: &mut Line| l.peeled = Some(peeled));
            }
            continue;
        }
        let Some((hex, name)) = line.split_once(' ') else { continue };
        let Ok(oid) = Oid::from_str(hex) else { continue };
        lines.insert(name.to_owned(), Line { oid, peeled: None });
        last = Some(name.to_owned());
    }
    lines
}

/// Rewrites remote `remote`'s packed file (read again from disk, not the kept parse):
/// its lines under `prefix` become `refs`, every other line stays as it was.
fn rewrite(git_dir: &Path, remote: &str, prefix: &str, refs: &BTreeMap<&str, Oid>) -> Result<()> {
    let path = packed_path(git_dir, remote);
    let mut lines = parse_packed(&read_text(&path)?);
    lines.retain(|name, _| !name.starts_with(prefix));
    for (name, oid) in refs {
        lines.insert((*name).to_owned(), Line { oid: *oid, peeled: None });
    }
    // Sorted by bytes, as git sorts ref names (the format is `packed-refs`').
    let mut text = String::with_capacity(lines.len() * 100 + 32);
    text.push_str("# pack-refs with: sorted \n");
    for (name, line) in &lines {
        text.push_str(&format!("{} {name}\n", line.oid));
        if let Some(peeled) = line.peeled {
            text.push_str(&format!("^{peeled}\n"));
        }
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let aside = path.with_file_name(".packed.new");
    let written =
        std::fs::write(&aside, text.as_bytes()).and_then(|()| std::fs::rename(&aside, &path)).map_err(io(&path));
    if written.is_err() {
        let _ = std::fs::remove_file(&aside);
    }
    written
}

/// Creates `path` (git's lock protocol: whoever creates it holds it), waiting a while
/// for a live holder and taking over from one a dead process left (older than 2 s: a
/// live write holds it for microseconds).
fn take_lock(path: &Path) -> Result<std::fs::File> {
    let started = std::time::Instant::now();
    loop {
        match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
            Ok(file) => return Ok(file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if super::file_age(path).is_some_and(|age| age >= Duration::from_secs(2)) {
                    let _ = std::fs::remove_file(path);
                    continue;
                }
                if started.elapsed() > Duration::from_secs(5) {
                    return Err(io(path)(e));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(io(path)(e)),
        }
    }
}

/// Removes loose mirror `name` of `remote` and the directories it leaves empty.
fn remove_loose(git_dir: &Path, remote: &str, name: &str) -> Result<()> {
    let path = path_of(git_dir, name);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&path)(e)),
    }
    let top = git_dir.join("mirrors").join(remote);
    let mut dir = path.parent();
    while let Some(d) = dir.filter(|d| d.starts_with(&top) && *d != top) {
        // Not empty (another mirror below it): stops here.
        if std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use git2::Repository;

    /// A bare repository of its own, with two blobs.
    fn repo(name: &str) -> (PathBuf, Repository, Oid, Oid) {
        let dir = std::env::temp_dir().join(format!("offshoot-mirrors-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let repo = Repository::init_bare(&dir).expect("test repository");
        let (a, b) = (repo.blob(b"a").expect("test repository"), repo.blob(b"b").expect("test repository"));
        (dir, repo, a, b)
    }

    const P: &str = "refs/mirrors/o/";

    fn m(dir: &Path, want: &BTreeMap<String, Oid>, hot: &[String]) -> Result<Mirrored> {
        mirror(dir, P, want, hot, &mut |_| Ok(()))
    }

    fn all(dir: &Path) -> BTreeMap<String, Oid> {
        refs(dir, P).expect("test repository").into_iter().collect()
    }

    fn many(n: usize, oid: Oid) -> BTreeMap<String, Oid> {
        (0..n).map(|i| (format!("{P}heads/agents/x{i:04}"), oid)).collect()
    }

    #[test]
    fn many_cold_mirrors_are_packed_hot_ones_stay_loose_and_git_sees_none_of_them() {
        let (dir, repo, a, b) = repo("packed");
        repo.reference("refs/heads/mine", a, true, "").expect("test repository");
        let mut want = many(PACK_AT, a);
        want.insert(format!("{P}offshoot/claims/x0001"), b);
        let hot = [format!("{P}offshoot/claims/")];
        assert_eq!(
            m(&dir, &want, &hot).expect("test repository"),
            Mirrored { written: PACK_AT + 1, removed: 0, packed: true }
        );
        assert!(!dir.join("mirrors/o/heads/agents/x0001").exists());
        assert!(dir.join("mirrors/o/offshoot/claims/x0001").is_file());
        assert_eq!(all(&dir), want);
        // The repository's own refs are its own: the mirrors are not among them.
        let names: Vec<String> = repo
            .references()
            .expect("test repository")
            .flatten()
            .map(|r| r.name().expect("test repository").to_owned())
            .collect();
        assert_eq!(names, ["refs/heads/mine"]);
        // Nothing changed: nothing written, nothing rewritten.
        assert_eq!(m(&dir, &want, &hot).expect("test repository"), Mirrored::default());
        // Every remote's, by a prefix with `*` for the remote; one name exactly.
        let claims = refs(&dir, "refs/mirrors/*/offshoot/claims/x0001").expect("test repository");
        assert_eq!(claims, [(format!("{P}offshoot/claims/x0001"), b)]);
    }

    #[test]
    fn a_moved_mirror_goes_loose_over_its_line_a_gone_one_leaves_both_and_a_push_settles_in_one_go() {
        let (dir, _repo, a, b) = repo("moved");
        let mut want = many(PACK_AT, a);
        m(&dir, &want, &[]).expect("test repository");
        want.insert(format!("{P}heads/agents/x0000"), b);
        want.remove(&format!("{P}heads/agents/x0001"));
        assert_eq!(m(&dir, &want, &[]).expect("test repository"), Mirrored { written: 1, removed: 1, packed: true });
        assert_eq!(all(&dir), want);
        set(&dir, P, &[(format!("{P}heads/agents/x0003"), None), (format!("{P}heads/agents/x0004"), Some(b))])
            .expect("test repository");
        want.remove(&format!("{P}heads/agents/x0003"));
        want.insert(format!("{P}heads/agents/x0004"), b);
        assert_eq!(all(&dir), want);
        // A name that had mirrors below it comes back as one, and the other way round.
        let below: BTreeMap<String, Oid> = [(format!("{P}heads/d/e"), a)].into();
        m(&dir, &below, &[]).expect("test repository");
        let flat: BTreeMap<String, Oid> = [(format!("{P}heads/d"), b)].into();
        m(&dir, &flat, &[]).expect("test repository");
        assert_eq!(all(&dir), flat);
        m(&dir, &below, &[]).expect("test repository");
        assert_eq!(all(&dir), below);
        forget(&dir, "o").expect("test repository");
        assert!(all(&dir).is_empty());
        assert!(!dir.join("mirrors/o").exists());
    }

    #[test]
    fn a_loose_file_a_kill_left_is_set_right_and_old_mirrors_among_the_refs_are_dropped() {
        let (dir, repo, a, b) = repo("killed");
        // Mirrors as an older version kept them: refs of the repository.
        repo.reference(&format!("{P}heads/agents/old"), a, true, "").expect("test repository");
        let want = many(PACK_AT, a);
        m(&dir, &want, &[]).expect("test repository");
        assert!(repo.find_reference(&format!("{P}heads/agents/old")).is_err());
        assert!(!dir.join("refs/mirrors/o").exists());
        // A rewrite killed before it removed the loose files it folded, and a cut file.
        std::fs::create_dir_all(dir.join("mirrors/o/heads/agents")).expect("test repository");
        std::fs::write(dir.join("mirrors/o/heads/agents/x0007"), format!("{b}\n")).expect("test repository");
        std::fs::write(dir.join("mirrors/o/heads/agents/x0008"), "").expect("test repository");
        assert_eq!(all(&dir).get(&format!("{P}heads/agents/x0007")), Some(&b));
        assert_eq!(m(&dir, &want, &[]).expect("test repository").written, 2);
        assert_eq!(all(&dir), want);
        // A name the server sends that is no ref never gets here (see `fetch`); a
        // prefix outside the mirrors is refused.
        assert!(mirror(&dir, "refs/heads/", &BTreeMap::new(), &[], &mut |_| Ok(())).is_err());
        assert!(forget(&dir, "..").is_err());
    }

    #[test]
    fn branch_names_are_listed_by_any_prefix_loose_or_packed() {
        let (dir, repo, a, _) = repo("names");
        for n in ["a.1", "a.2", "a.10", "ab", "a.1.1"] {
            repo.reference(&format!("refs/heads/agents/{n}"), a, true, "").expect("test repository");
        }
        std::fs::write(dir.join("packed-refs"), format!("# pack-refs with: sorted \n{a} refs/heads/agents/a.3\n"))
            .expect("test repository");
        std::fs::write(dir.join("refs/heads/agents/a.9.lock"), "").expect("test repository");
        let names = names_under(&dir, "refs/heads/agents/a.").expect("test repository");
        let expected: BTreeSet<String> =
            ["a.1", "a.1.1", "a.10", "a.2", "a.3"].iter().map(|n| format!("refs/heads/agents/{n}")).collect();
        assert_eq!(names, expected);
    }
}
