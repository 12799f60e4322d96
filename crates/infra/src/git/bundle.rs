//! Git bundles (`git bundle`'s v2 format: a header naming refs, then one pack), written
//! and read with libgit2's pack builder and pack writer (libgit2 has no bundle API).
//! A bundle written here has no prerequisites: it holds every object its refs reach,
//! so `git bundle verify` and `git clone` accept it on their own.

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

/// The most a bundle's header (its list of refs) may take.
const HEADER_AT_MOST: u64 = 64 << 20;

/// Reads a bundle from `reader` into the repository at `git_dir` as it comes: its header
/// (the refs it holds, at most [`HEADER_AT_MOST`] bytes), then its pack, streamed into
/// the object store (indexed and checked whole by libgit2's pack writer), at most `max`
/// bytes. No ref is written. A prerequisite (a bundle that needs objects it does not
/// hold), a part over its size or anything not in the format is refused, saying what.
pub fn unpack_from(git_dir: &Path, reader: impl std::io::Read, max: u64) -> Result<Vec<(String, Oid)>> {
    use std::io::{BufRead, Read};
    let bad = |why: String| GitError::NotABundle(why);
    let io = |source| GitError::Io { path: git_dir.join("objects/pack"), source };
    let mut reader = std::io::BufReader::new(reader.take(HEADER_AT_MOST.saturating_add(max)));
    let mut header = (&mut reader).take(HEADER_AT_MOST);
    let mut line = Vec::new();
    header.read_until(b'\n', &mut line).map_err(io)?;
    if line != HEADER.as_bytes() {
        return Err(bad("it does not start as a v2 git bundle".into()));
    }
    let mut refs = Vec::new();
    loop {
        line.clear();
        header.read_until(b'\n', &mut line).map_err(io)?;
        let Some(text) = line.strip_suffix(b"\n") else {
            return Err(bad(format!("its list of refs does not end within {HEADER_AT_MOST} bytes")));
        };
        let text = std::str::from_utf8(text).map_err(|_| bad("a ref line is not text".into()))?;
        if text.is_empty() {
            break;
        }
        if text.starts_with('-') {
            return Err(bad("it needs objects it does not hold (a prerequisite)".into()));
        }
        let (hex, name) = text.split_once(' ').ok_or_else(|| bad(format!("ref line `{text}` is not `<id> <name>`")))?;
        let oid = Oid::from_str(hex).map_err(|_| bad(format!("ref line `{text}` has no object id")))?;
        if !name.starts_with("refs/") || !git2::Reference::is_valid_name(name) {
            return Err(bad(format!("`{name}` is not a ref name")));
        }
        refs.push((name.to_owned(), oid));
    }
    if !reader.fill_buf().map_err(io)?.starts_with(b"PACK") {
        return Err(bad("no pack follows its refs".into()));
    }
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    let odb = repo.odb().map_err(lib("open the object database"))?;
    let mut writer = odb.packwriter().map_err(lib("start reading a pack"))?;
    let copied = std::io::copy(&mut (&mut reader).take(max.saturating_add(1)), &mut writer).map_err(io)?;
    if copied > max {
        return Err(bad(format!("its pack is over {max} bytes")));
    }
    writer.commit().map_err(lib("index the bundled pack"))?;
    Ok(refs)
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

/// The values of refs `names` (each exact: `None` when there is none, or it cannot be
/// read — whoever wants it written writes it over), looked up one by one: for a few
/// names among many refs, where a glob would list them all.
pub fn ref_targets(git_dir: &Path, names: &[String]) -> Result<Vec<Option<Oid>>> {
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    Ok(names.iter().map(|name| repo.refname_to_id(name).ok()).collect())
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
        let read_back = unpack_from(&to, &bytes[..], bytes.len() as u64).expect("unpack");
        assert_eq!(read_back, refs);
        assert_eq!(missing_below(&to, second).expect("walk"), None);
        assert!(
            missing_below(&to, Oid::from_str("0123456789012345678901234567890123456789").expect("id"))
                .expect("walk")
                .is_some()
        );
        set_refs(&to, &read_back).expect("refs");
        let to = Repository::open_bare(&to).expect("open");
        assert_eq!(to.refname_to_id("refs/heads/agents/a").expect("ref"), second);
        assert_eq!(to.find_commit(second).expect("commit").parent_id(0).expect("parent"), first);
        assert_eq!(to.find_blob(mark).expect("mark").content(), b"a mark");

        let pack_bytes = bytes.len() as u64 - bytes.windows(4).position(|w| w == b"PACK").expect("pack") as u64;
        let other = base.join("other.git");
        Repository::init_bare(&other).expect("init");
        for (bad, max, said) in [
            (&b"not a bundle"[..], 1 << 20, "v2 git bundle"),
            (&b"# v2 git bundle\n-0123456789012345678901234567890123456789 x\n\nPACK"[..], 1 << 20, "prerequisite"),
            (&b"# v2 git bundle\nzz refs/heads/x\n\nPACK"[..], 1 << 20, "no object id"),
            (&b"# v2 git bundle\n\nnot a pack"[..], 1 << 20, "no pack"),
            (&b"# v2 git bundle\nunended"[..], 1 << 20, "does not end"),
            (&bytes[..], pack_bytes - 1, "over"),
        ] {
            let err = unpack_from(&other, bad, max).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(said), "{err}");
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}
