//! Git bundles (`git bundle`'s v2 format: a header naming refs, then one pack), written
//! and read with libgit2's pack builder and pack writer (libgit2 has no bundle API).
//! A bundle written here has no prerequisites: it holds every object its refs reach,
//! so `git bundle verify` and `git clone` accept it on their own.

use std::io::Write;
use std::path::Path;

use git2::{ObjectType, Oid, Repository};

use super::{GitError, Result, lib};

const HEADER: &str = "# v2 git bundle\n";

/// A bundle of the repository at `git_dir` holding `refs` (full names) and everything
/// they reach.
pub fn write(git_dir: &Path, refs: &[(String, Oid)]) -> Result<Vec<u8>> {
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    let mut builder = repo.packbuilder().map_err(lib("start a pack"))?;
    builder.set_threads(1);
    let mut walk = repo.revwalk().map_err(lib("walk history"))?;
    for (name, oid) in refs {
        let kind = repo.find_object(*oid, None).map_err(lib(format!("read {name}")))?.kind();
        match kind {
            Some(ObjectType::Commit) => walk.push(*oid).map_err(lib(format!("walk {name}")))?,
            _ => builder.insert_recursive(*oid, None).map_err(lib(format!("pack {name}")))?,
        }
    }
    builder.insert_walk(&mut walk).map_err(lib("pack the history"))?;
    let mut pack = git2::Buf::new();
    builder.write_buf(&mut pack).map_err(lib("write the pack"))?;
    let mut out = Vec::with_capacity(pack.len() + 64 * refs.len() + HEADER.len() + 1);
    out.extend_from_slice(HEADER.as_bytes());
    for (name, oid) in refs {
        out.extend_from_slice(format!("{oid} {name}\n").as_bytes());
    }
    out.push(b'\n');
    out.extend_from_slice(&pack);
    Ok(out)
}

/// The refs of the repository at `git_dir` matching any of `globs` (`refs/heads/x`,
/// `refs/offshoot/*/a`), each once, by name.
pub fn refs(git_dir: &Path, globs: &[String]) -> Result<Vec<(String, Oid)>> {
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    let mut out = std::collections::BTreeMap::new();
    for glob in globs {
        for reference in repo.references_glob(glob).map_err(lib(format!("list {glob}")))?.flatten() {
            if let (Ok(name), Some(oid)) = (reference.name(), reference.target()) {
                out.insert(name.to_owned(), oid);
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// The first of `needles` found in an object `refs` reach in the repository at
/// `git_dir` (blobs, commit messages, tags; read through its alternates too), with the
/// object's id and, for a blob, a path it has.
pub fn find_in_objects(git_dir: &Path, refs: &[(String, Oid)], needles: &[&str]) -> Result<Option<(usize, String)>> {
    if needles.is_empty() {
        return Ok(None);
    }
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    let mut seen = std::collections::HashSet::new();
    let mut todo: Vec<(Oid, String)> = refs.iter().map(|(name, oid)| (*oid, name.clone())).collect();
    while let Some((oid, place)) = todo.pop() {
        if !seen.insert(oid) {
            continue;
        }
        let Ok(object) = repo.find_object(oid, None) else { continue };
        let found = |bytes: &[u8]| needles.iter().position(|n| contains(bytes, n.as_bytes()));
        if let Some(commit) = object.as_commit() {
            if let Some(i) = found(commit.message_raw_bytes()) {
                return Ok(Some((i, format!("the message of commit {oid}"))));
            }
            // A place is `<commit>:<path>`, as git names a file of a commit.
            todo.push((commit.tree_id(), format!("{oid}:")));
            todo.extend(commit.parent_ids().map(|p| (p, p.to_string())));
        } else if let Some(tree) = object.as_tree() {
            for entry in tree.iter().filter(|e| e.kind() != Some(ObjectType::Commit)) {
                let name = entry.name().unwrap_or("?");
                let slash = if entry.kind() == Some(ObjectType::Tree) { "/" } else { "" };
                todo.push((entry.id(), format!("{place}{name}{slash}")));
            }
        } else if let Some(blob) = object.as_blob() {
            if let Some(i) = found(blob.content()) {
                return Ok(Some((i, format!("`{place}`"))));
            }
        } else if let Some(tag) = object.as_tag() {
            todo.push((tag.target_id(), place));
        }
    }
    Ok(None)
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// What a bundle holds: its refs, and its pack.
pub struct Read<'a> {
    pub refs: Vec<(String, Oid)>,
    pub pack: &'a [u8],
}

/// Reads the header of `bytes`, a bundle; a prerequisite (a bundle that needs objects
/// it does not hold) or anything not in the format is refused, saying what.
pub fn read(bytes: &[u8]) -> std::result::Result<Read<'_>, String> {
    let rest = bytes.strip_prefix(HEADER.as_bytes()).ok_or("it does not start as a v2 git bundle")?;
    let mut refs = Vec::new();
    let mut at = 0;
    loop {
        let end = rest[at..].iter().position(|b| *b == b'\n').ok_or("its list of refs does not end")? + at;
        let line = std::str::from_utf8(&rest[at..end]).map_err(|_| "a ref line is not text")?;
        at = end + 1;
        if line.is_empty() {
            break;
        }
        if line.starts_with('-') {
            return Err("it needs objects it does not hold (a prerequisite)".into());
        }
        let (hex, name) = line.split_once(' ').ok_or_else(|| format!("ref line `{line}` is not `<id> <name>`"))?;
        let oid = Oid::from_str(hex).map_err(|_| format!("ref line `{line}` has no object id"))?;
        if !name.starts_with("refs/") || !git2::Reference::is_valid_name(name) {
            return Err(format!("`{name}` is not a ref name"));
        }
        refs.push((name.to_owned(), oid));
    }
    let pack = &rest[at..];
    if !pack.starts_with(b"PACK") {
        return Err("no pack follows its refs".into());
    }
    Ok(Read { refs, pack })
}

/// Puts `pack`'s objects into the repository at `git_dir` (indexed, checked whole by
/// libgit2's pack writer); no ref is written.
pub fn unpack(git_dir: &Path, pack: &[u8]) -> Result<()> {
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    let odb = repo.odb().map_err(lib("open the object database"))?;
    let mut writer = odb.packwriter().map_err(lib("start reading a pack"))?;
    writer.write_all(pack).map_err(|source| GitError::Io { path: git_dir.join("objects/pack"), source })?;
    writer.commit().map_err(lib("index the bundled pack"))?;
    Ok(())
}

/// The first object `oid` reaches (itself included) that the repository at `git_dir`
/// does not hold, if any: a ref pointing at it would leave history broken.
pub fn missing_below(git_dir: &Path, oid: Oid) -> Result<Option<Oid>> {
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![oid];
    while let Some(oid) = todo.pop() {
        if !seen.insert(oid) {
            continue;
        }
        let Ok(object) = repo.find_object(oid, None) else { return Ok(Some(oid)) };
        let Some(kind) = object.kind() else { continue };
        todo.extend(super::named_by(&repo, oid, kind)?);
    }
    Ok(None)
}

/// Points each of `refs` where it says, in the repository at `git_dir`.
pub fn set_refs(git_dir: &Path, refs: &[(String, Oid)]) -> Result<()> {
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    for (name, oid) in refs {
        // A lock file a killed writer left is taken away once stale.
        super::with_lock_retries(&repo, name, || repo.reference(name, *oid, true, "set").map(drop))
            .map_err(lib(format!("write {name}")))?;
    }
    Ok(())
}

/// The content of blob `oid` of the repository at `git_dir`, if it is one.
pub fn blob(git_dir: &Path, oid: Oid) -> Option<Vec<u8>> {
    let repo = Repository::open_bare(git_dir).ok()?;
    repo.find_blob(oid).ok().map(|b| b.content().to_vec())
}

/// The commits `refs` reach that are configs (an `offshoot.toml` at the root and no
/// `.offshoot/` of an agent), with their `offshoot.toml`.
pub fn configs_below(
    git_dir: &Path,
    refs: &[(String, Oid)],
    file: &str,
    agent_dir: &str,
) -> Result<Vec<(Oid, Vec<u8>)>> {
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    let mut walk = repo.revwalk().map_err(lib("walk history"))?;
    for (_, oid) in refs {
        if repo.find_commit(*oid).is_ok() {
            walk.push(*oid).map_err(lib("walk history"))?;
        }
    }
    let mut out = Vec::new();
    for oid in walk.flatten() {
        let Ok(tree) = repo.find_commit(oid).and_then(|c| c.tree()) else { continue };
        if tree.get_name(agent_dir).is_some() {
            continue;
        }
        if let Some(entry) = tree.get_name(file)
            && let Ok(blob) = repo.find_blob(entry.id())
        {
            out.push((oid, blob.content().to_vec()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_carries_commits_and_blob_refs_and_git_reads_it() {
        let base = std::env::temp_dir().join(format!("offshoot-bundle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let from = Repository::init_bare(base.join("from.git")).expect("init");
        let sig = git2::Signature::now("t", "t@t").expect("sig");
        let blob = from.blob(b"content").expect("blob");
        let mut tree = from.treebuilder(None).expect("tree");
        tree.insert("f", blob, 0o100644).expect("insert");
        let tree = from.find_tree(tree.write().expect("tree")).expect("tree");
        let first = from.commit(None, &sig, &sig, "one", &tree, &[]).expect("commit");
        let parent = from.find_commit(first).expect("first");
        let second = from.commit(None, &sig, &sig, "two", &tree, &[&parent]).expect("commit");
        let mark = from.blob(b"a mark").expect("mark");
        let refs = vec![("refs/heads/agents/a".to_owned(), second), ("refs/offshoot/names/A".to_owned(), mark)];
        let bytes = write(&base.join("from.git"), &refs).expect("bundle");
        let file = base.join("a.bundle");
        std::fs::write(&file, &bytes).expect("write");
        let verified = std::process::Command::new("git")
            .args(["--git-dir", &base.join("from.git").display().to_string(), "bundle", "verify"])
            .arg(&file)
            .output()
            .expect("git");
        assert!(verified.status.success(), "{}", String::from_utf8_lossy(&verified.stderr));

        let to = base.join("to.git");
        Repository::init_bare(&to).expect("init");
        let read_back = read(&bytes).expect("read");
        assert_eq!(read_back.refs, refs);
        unpack(&to, read_back.pack).expect("unpack");
        assert_eq!(missing_below(&to, second).expect("walk"), None);
        assert!(
            missing_below(&to, Oid::from_str("0123456789012345678901234567890123456789").expect("id"))
                .expect("walk")
                .is_some()
        );
        set_refs(&to, &read_back.refs).expect("refs");
        let to = Repository::open_bare(&to).expect("open");
        assert_eq!(to.refname_to_id("refs/heads/agents/a").expect("ref"), second);
        assert_eq!(to.find_commit(second).expect("commit").parent_id(0).expect("parent"), first);
        assert_eq!(to.find_blob(mark).expect("mark").content(), b"a mark");

        for (bad, said) in [
            (&b"not a bundle"[..], "v2 git bundle"),
            (&b"# v2 git bundle\n-0123456789012345678901234567890123456789 x\n\nPACK"[..], "prerequisite"),
            (&b"# v2 git bundle\nzz refs/heads/x\n\nPACK"[..], "no object id"),
            (&b"# v2 git bundle\n\nnot a pack"[..], "no pack"),
        ] {
            let err = read(bad).err().unwrap_or_default();
            assert!(err.contains(said), "{err}");
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}
