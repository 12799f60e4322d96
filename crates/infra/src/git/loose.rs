//! Large trees written as loose objects without compression.
//!
//! A transcript tree grows by two entries a step and is rewritten at each of the
//! step's two commits: at a thousand steps it is ~100 KB of names and ids, and
//! libgit2 spends ~1.4 ms writing it (collision-detecting SHA-1 and deflate; the
//! ids, a fifth of the bytes, do not compress). Written here, the object is the same
//! loose object git reads, its zlib stream made of stored blocks, hashed with plain
//! SHA-1: a tenth of the time for about twice the bytes on disk until the user's git
//! packs them. Crash safety is libgit2's: a temporary file in `objects/`, renamed
//! into place whole.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use git2::Oid;

use super::{GitError, Result};

/// The largest stored block deflate allows.
const STORED_MAX: usize = 0xffff;

/// Writes `body` as a loose object of `kind` ("tree", "blob", …) into the object
/// store `objects`, unless it is already there loose, and returns its id.
pub(super) fn write_stored(objects: &Path, kind: &str, body: &[u8]) -> Result<Oid> {
    let header = format!("{kind} {}\0", body.len());
    let mut sha = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    sha.update(header.as_bytes());
    sha.update(body);
    let oid = Oid::from_bytes(sha.finish().as_ref()).map_err(super::lib("make an object id"))?;
    let hex = oid.to_string();
    let dir = objects.join(&hex[..2]);
    let path = dir.join(&hex[2..]);
    if std::fs::symlink_metadata(&path).is_ok() {
        // Used again: its time says so (gc lets go only of objects unused for long).
        if let Ok(file) = std::fs::File::open(&path) {
            let _ = file.set_modified(std::time::SystemTime::now());
        }
        return Ok(oid);
    }
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| GitError::Io { path, source }
    };
    match std::fs::create_dir(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(io(&dir)(e)),
        _ => {}
    }
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let temp =
        objects.join(format!("tmp_object_offshoot_{}_{}", std::process::id(), SERIAL.fetch_add(1, Ordering::Relaxed)));
    let written = (|| {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o444).open(&temp)?;
        file.write_all(&zlib_stored(&[header.as_bytes(), body]))?;
        std::fs::rename(&temp, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written.map_err(io(&path))?;
    Ok(oid)
}

/// A zlib stream of `parts`, one after the other, in stored (uncompressed) blocks.
fn zlib_stored(parts: &[&[u8]]) -> Vec<u8> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = Vec::with_capacity(total + total / STORED_MAX * 5 + 16);
    // CMF: deflate with a 32 KiB window; FLG: no dictionary, check bits making the
    // pair a multiple of 31.
    out.extend_from_slice(&[0x78, 0x01]);
    let mut joined = parts.iter().flat_map(|p| p.chunks(STORED_MAX)).peekable();
    let mut block = Vec::with_capacity(STORED_MAX);
    let mut adler = Adler32::default();
    // Blocks are cut at STORED_MAX across part boundaries.
    loop {
        while block.len() < STORED_MAX {
            let Some(chunk) = joined.peek_mut() else { break };
            let take = chunk.len().min(STORED_MAX - block.len());
            block.extend_from_slice(&chunk[..take]);
            *chunk = &chunk[take..];
            if chunk.is_empty() {
                joined.next();
            }
        }
        let last = joined.peek().is_none();
        adler.update(&block);
        let len = block.len() as u16;
        out.push(u8::from(last));
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(&block);
        block.clear();
        if last {
            break;
        }
    }
    out.extend_from_slice(&adler.value().to_be_bytes());
    out
}

/// The Adler-32 checksum zlib ends a stream with.
struct Adler32 {
    a: u32,
    b: u32,
}

impl Default for Adler32 {
    fn default() -> Adler32 {
        Adler32 { a: 1, b: 0 }
    }
}

impl Adler32 {
    const MOD: u32 = 65521;
    /// The most bytes summed before `b` could overflow a u32.
    const RUN: usize = 5552;

    fn update(&mut self, bytes: &[u8]) {
        for run in bytes.chunks(Self::RUN) {
            for &byte in run {
                self.a += u32::from(byte);
                self.b += self.a;
            }
            self.a %= Self::MOD;
            self.b %= Self::MOD;
        }
    }

    fn value(&self) -> u32 {
        (self.b << 16) | self.a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("offshoot-loose-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn inflate_with_git(repo: &Path, oid: Oid) -> Vec<u8> {
        let out = std::process::Command::new("git")
            .args(["--git-dir", &repo.display().to_string(), "cat-file", "-p", &oid.to_string()])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("git");
        assert!(out.status.success(), "git cat-file: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    }

    #[test]
    fn a_stored_object_is_the_object_libgit2_and_git_read() {
        let dir = temp_dir("blob");
        let repo = git2::Repository::init_bare(&dir).expect("init");
        let objects = dir.join("objects");
        // Empty, small, and past several stored blocks (which split mid-part).
        for body in [Vec::new(), b"hello".to_vec(), (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect()] {
            let oid = write_stored(&objects, "blob", &body).expect("write");
            assert_eq!(oid, Oid::hash_object(git2::ObjectType::Blob, &body).expect("hash"));
            assert_eq!(repo.find_blob(oid).expect("libgit2 reads it").content(), &body[..]);
            assert_eq!(inflate_with_git(&dir, oid), body);
            // Written again: the same id, nothing else.
            assert_eq!(write_stored(&objects, "blob", &body).expect("again"), oid);
        }
        let leftovers: Vec<_> = std::fs::read_dir(&objects)
            .expect("objects")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("tmp_object"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stored_tree_is_a_tree() {
        let dir = temp_dir("tree");
        let repo = git2::Repository::init_bare(&dir).expect("init");
        let blob = repo.blob(b"x").expect("blob");
        let mut raw = b"100644 a.json\0".to_vec();
        raw.extend_from_slice(blob.as_bytes());
        let oid = write_stored(&dir.join("objects"), "tree", &raw).expect("write");
        let tree = repo.find_tree(oid).expect("tree");
        assert_eq!(tree.get_name("a.json").map(|e| e.id()), Some(blob));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn adler32_matches_known_values() {
        let mut a = Adler32::default();
        a.update(b"Wikipedia");
        assert_eq!(a.value(), 0x11E6_0398);
        let mut long = Adler32::default();
        long.update(&vec![0xff; 100_000]);
        let mut naive = (1u32, 0u32);
        for _ in 0..100_000 {
            naive.0 = (naive.0 + 0xff) % 65521;
            naive.1 = (naive.1 + naive.0) % 65521;
        }
        assert_eq!(long.value(), (naive.1 << 16) | naive.0);
    }
}
