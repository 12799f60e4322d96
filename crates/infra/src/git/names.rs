//! Which tree entries git refuses (what `git fsck` reports as `hasDot`, `hasDotdot`,
//! `hasDotgit`, `badFilemode` and the like): an agent can write any tree object it likes,
//! and nothing of its making leaves for the user's repository, a remote or a bundle
//! before its trees are checked here.

use std::collections::HashSet;

use git2::{ObjectType, Oid, Repository};

use super::{GitError, Result, lib};

/// Why git refuses an entry named `name` with mode `mode`, if it does.
pub fn refused(name: &[u8], mode: i32) -> Option<&'static str> {
    if !matches!(mode, 0o040000 | 0o100644 | 0o100755 | 0o120000 | 0o160000) {
        return Some("its mode is none git keeps");
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Some("it is no file name");
    }
    if name == b"." || name == b".." {
        return Some("`.` and `..` name no file of a tree");
    }
    let text = String::from_utf8_lossy(name);
    // What git compares: case folded, the characters some filesystems ignore left out,
    // and the trailing dots and spaces Windows drops.
    let plain: String = text.chars().filter(|c| !ignorable(*c)).collect::<String>().to_lowercase();
    let trimmed = plain.trim_end_matches(['.', ' ']);
    if trimmed == ".git" || trimmed == "git~1" {
        return Some("`.git` is git's own, never a tree's");
    }
    if trimmed == ".gitmodules" && mode == 0o120000 {
        return Some("`.gitmodules` may not be a link");
    }
    None
}

/// Why git refuses the path `path` (components separated by `/`), if it does.
pub fn refused_path(path: &str) -> Option<&'static str> {
    path.split('/').find_map(|part| refused(part.as_bytes(), 0o100644))
}

/// Characters HFS+ ignores in names (so `.g\u{200c}it` is `.git` there).
fn ignorable(c: char) -> bool {
    matches!(c, '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}')
}

/// Refuses the first entry git would refuse in the trees `roots` (commits, trees or
/// tags) reach in `repo`, naming its path and the commit it came with. Trees for which
/// `known` is true (the receiver has them, so checked before) are not walked.
pub(crate) fn check(repo: &Repository, roots: &[Oid], known: &dyn Fn(Oid) -> bool) -> Result<()> {
    let mut seen: HashSet<Oid> = HashSet::new();
    // (object, its path when it is a tree, the commit it came with)
    let mut stack: Vec<(Oid, String, Oid)> = roots.iter().map(|r| (*r, String::new(), *r)).collect();
    while let Some((oid, path, commit)) = stack.pop() {
        if !seen.insert(oid) || known(oid) {
            continue;
        }
        let object = repo.find_object(oid, None).map_err(lib(format!("read object {oid}")))?;
        match object.kind() {
            Some(ObjectType::Commit) => {
                let c = object.peel_to_commit().map_err(lib(format!("read commit {oid}")))?;
                stack.push((c.tree_id(), String::new(), oid));
                stack.extend(c.parent_ids().map(|p| (p, String::new(), p)));
            }
            Some(ObjectType::Tag) => {
                let t = object.peel_to_tag().map_err(lib(format!("read tag {oid}")))?;
                stack.push((t.target_id(), String::new(), t.target_id()));
            }
            Some(ObjectType::Tree) => {
                let tree = object.peel_to_tree().map_err(lib(format!("read tree {oid}")))?;
                for entry in tree.iter() {
                    let name = entry.name_bytes();
                    let full = format!("{path}{}", String::from_utf8_lossy(name));
                    if let Some(why) = refused(name, entry.filemode_raw()) {
                        return Err(GitError::RefusedPath { commit: commit.to_string(), path: full, why });
                    }
                    if entry.kind() == Some(ObjectType::Tree) {
                        stack.push((entry.id(), format!("{full}/"), commit));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_git_fsck_refuses_is_refused() {
        for name in [".git", ".GIT", ".Git.", ".git ", "git~1", ".g\u{200c}it", ".", "..", "a/b", ""] {
            assert!(refused(name.as_bytes(), 0o040000).is_some(), "{name:?}");
        }
        assert!(refused(b".gitmodules", 0o120000).is_some());
        assert!(refused(b"file", 0o100664).is_some(), "a mode git does not keep");
        for name in [".gitignore", ".github", "git", "x.git", ".gitmodules", "..a", "dir"] {
            assert_eq!(refused(name.as_bytes(), 0o100644), None, "{name:?}");
        }
        assert!(refused_path("src/.GIT/hooks/x").is_some());
        assert!(refused_path("a/../b").is_some());
        assert_eq!(refused_path("src/lib.rs"), None);
    }
}
