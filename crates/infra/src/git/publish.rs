//! Publishing what an agent committed with its own git: the objects its git
//! directory holds that the shared store lacks are copied into the shared store.
//! The agent wrote that store, so it is read only by the exporter — this binary run
//! as `offshoot __git-export`, inside the agent's sandbox — which opens nothing but
//! the object files (no config, no hooks) and writes each missing object reachable
//! from the given commits to its stdout as a frame: a type letter, the size in
//! decimal, a newline, the raw content. The harness reads the frames as data: each
//! object is written through libgit2 (which hashes it, so none can pose as another)
//! into a quarantine, and moved into the shared store only if every object the import
//! brought names only objects it brought or the shared store has.

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

use git2::{ObjectType, Odb, Oid, Repository};

/// The first argument that makes `offshoot` the exporter.
pub const ARG: &str = "__git-export";

/// The most an import may bring (beyond it the agent's commit is not published).
pub(crate) const MAX_BYTES: u64 = 2 << 30;

fn letter(kind: ObjectType) -> Option<char> {
    match kind {
        ObjectType::Commit => Some('c'),
        ObjectType::Tree => Some('t'),
        ObjectType::Blob => Some('b'),
        ObjectType::Tag => Some('g'),
        _ => None,
    }
}

fn kind_of(letter: u8) -> Option<ObjectType> {
    match letter {
        b'c' => Some(ObjectType::Commit),
        b't' => Some(ObjectType::Tree),
        b'b' => Some(ObjectType::Blob),
        b'g' => Some(ObjectType::Tag),
        _ => None,
    }
}

/// Runs the exporter with the arguments after [`ARG`] (`OBJECTS SHARED TIP…`: the
/// agent's object directory, the shared repository, the commits to publish); exits
/// 0 when every frame was written.
pub fn export_main(args: Vec<OsString>) -> ! {
    let code = match export_args(&args) {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{e}");
            1
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

fn export_args(args: &[OsString]) -> Result<(), String> {
    let [objects, shared, tips @ ..] = args else {
        return Err("usage: __git-export OBJECTS SHARED TIP…".into());
    };
    let tips: Vec<Oid> = tips
        .iter()
        .map(|t| Oid::from_str(&t.to_string_lossy()).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    export(Path::new(objects), Path::new(shared), &tips, &mut out)?;
    out.flush().map_err(|e| e.to_string())
}

/// Writes a frame for every object reachable from `tips` in the object directory
/// `objects` that the repository `shared` lacks (an object the shared store has is
/// not entered: what it names is there too).
pub fn export(objects: &Path, shared: &Path, tips: &[Oid], out: &mut impl Write) -> Result<(), String> {
    fn err(what: &str) -> impl FnOnce(git2::Error) -> String + '_ {
        move |e| format!("{what}: {}", e.message())
    }
    super::configure_libgit2();
    let theirs = Repository::open_bare(shared).map_err(err("open the shared repository"))?;
    let known = theirs.odb().map_err(err("open the shared objects"))?;
    let odb = Odb::new().map_err(err("make an object database"))?;
    odb.add_disk_alternate(&objects.to_string_lossy()).map_err(err("open the agent's objects"))?;
    let repo = Repository::from_odb(odb).map_err(err("read the agent's objects"))?;
    let odb = repo.odb().map_err(err("read the agent's objects"))?;
    let mut seen = std::collections::HashSet::new();
    let mut stack: Vec<Oid> = tips.to_vec();
    while let Some(oid) = stack.pop() {
        if known.exists(oid) || !seen.insert(oid) {
            continue;
        }
        let object = odb.read(oid).map_err(err(&format!("read {oid}")))?;
        let Some(l) = letter(object.kind()) else { continue };
        stack.extend(super::named_by(&repo, oid, object.kind()).map_err(|e| e.to_string())?);
        writeln!(out, "{l}{}", object.data().len()).map_err(|e| e.to_string())?;
        out.write_all(object.data()).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Reads frames as they arrive and writes each object into a quarantine — a
/// repository of its own beside the shared one, borrowing its objects — so nothing
/// reaches the shared store until the whole import is known to be complete: then the
/// objects are moved in (loose object files renamed, each atomically). A rejected or
/// abandoned import leaves nothing in the shared store.
pub struct Importer<'r> {
    shared: &'r Repository,
    /// The quarantine's directory, and its repository.
    dir: std::path::PathBuf,
    quarantine: Repository,
    buf: Vec<u8>,
    total: u64,
    /// What was written: each object's id and kind.
    written: Vec<(Oid, ObjectType)>,
    error: Option<String>,
}

/// Where quarantines are made, inside the shared repository (same filesystem, so the
/// objects move in by rename; not under `objects/`, so git never sees them).
pub(super) const QUARANTINE: &str = "quarantine";

impl<'r> Importer<'r> {
    pub fn new(shared: &'r Repository) -> Result<Importer<'r>, String> {
        let root = shared.path().join(QUARANTINE);
        sweep(&root);
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = root.join(format!("{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let quarantine = Repository::init_bare(&dir).map_err(|e| format!("make a quarantine: {}", e.message()))?;
        super::add_alternate(&dir, &shared.path().join("objects")).map_err(|e| format!("make a quarantine: {e}"))?;
        // Opened again: libgit2 reads a store's alternates when it opens it.
        let quarantine =
            Repository::open_bare(quarantine.path()).map_err(|e| format!("open the quarantine: {}", e.message()))?;
        Ok(Importer { shared, dir, quarantine, buf: Vec::new(), total: 0, written: Vec::new(), error: None })
    }

    /// Takes the next bytes of the stream; `false` once it went wrong (then the
    /// exporter may be stopped).
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        if self.error.is_some() {
            return false;
        }
        self.total += bytes.len() as u64;
        if self.total > MAX_BYTES {
            self.error = Some(format!("its new objects are over {MAX_BYTES} bytes"));
            return false;
        }
        self.buf.extend_from_slice(bytes);
        while let Some(newline) = self.buf.iter().position(|&b| b == b'\n') {
            let header = &self.buf[..newline];
            let (Some(kind), Some(size)) = (
                header.first().and_then(|l| kind_of(*l)),
                std::str::from_utf8(&header[1..]).ok().and_then(|s| s.parse::<usize>().ok()),
            ) else {
                self.error = Some("the exporter wrote something that is not an object".into());
                return false;
            };
            if self.buf.len() < newline + 1 + size {
                break;
            }
            let data = &self.buf[newline + 1..newline + 1 + size];
            match self.quarantine.odb().and_then(|odb| odb.write(kind, data)) {
                Ok(oid) => self.written.push((oid, kind)),
                Err(e) => {
                    self.error = Some(format!("cannot store an object: {}", e.message()));
                    return false;
                }
            }
            self.buf.drain(..newline + 1 + size);
        }
        true
    }

    /// Why the import went wrong, if it did while feeding.
    pub fn refused(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Once the stream has ended whole and every object it brought names only objects
    /// it brought or the shared store has, moves them into the shared store.
    /// (Dropped unfinished, the quarantine goes with nothing moved.)
    pub fn finish(self) -> Result<(), String> {
        self.check()?;
        self.admit()
    }

    fn check(&self) -> Result<(), String> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if !self.buf.is_empty() {
            return Err("the exporter's output ended inside an object".into());
        }
        let repo = &self.quarantine;
        let odb = repo.odb().map_err(|e| e.message().to_owned())?;
        for (oid, kind) in &self.written {
            let named = super::named_by(repo, *oid, *kind).map_err(|e| e.to_string())?;
            if let Some(gone) = named.into_iter().find(|n| !odb.exists(*n)) {
                return Err(format!("object {gone} is named but was not published"));
            }
        }
        Ok(())
    }

    /// Moves the quarantine's loose objects into the shared store, each after every
    /// object it names (the exporter sends an object before what it names, so in the
    /// reverse order): cut short, what moved is whole.
    fn admit(&self) -> Result<(), String> {
        let from = self.dir.join("objects");
        let to = self.shared.path().join("objects");
        for (oid, _) in self.written.iter().rev() {
            let hex = oid.to_string();
            let (dir, file) = hex.split_at(2);
            let target = to.join(dir).join(file);
            if target.exists() {
                continue;
            }
            std::fs::create_dir_all(to.join(dir)).map_err(|e| format!("{}: {e}", to.join(dir).display()))?;
            std::fs::rename(from.join(dir).join(file), &target).map_err(|e| format!("{}: {e}", target.display()))?;
        }
        Ok(())
    }
}

impl Drop for Importer<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes the quarantines in `root` their makers left (see [`abandoned`]).
pub(super) fn sweep(root: &Path) {
    for dir in abandoned(root) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The quarantines in `root` (each named `<pid>-…` after the process that made it)
/// whose maker is no longer running: a publication cut short by a kill. (A pid used
/// again keeps one until that process is gone too.)
pub(super) fn abandoned(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let maker = name.split('-').next().and_then(|p| p.parse::<u32>().ok());
            maker.is_none_or(|pid| !crate::process::running(pid))
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_travel_as_frames_and_a_broken_stream_is_refused() {
        let dir = std::env::temp_dir().join(format!("offshoot-publish-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let shared = Repository::init_bare(dir.join("shared.git")).expect("shared");
        let agent = Repository::init_bare(dir.join("agent.git")).expect("agent");
        let sig = git2::Signature::now("a", "a@b").expect("sig");
        let blob = agent.blob(b"hello").expect("blob");
        let mut tree = agent.treebuilder(None).expect("builder");
        tree.insert("f", blob, 0o100644).expect("insert");
        let tree = agent.find_tree(tree.write().expect("tree")).expect("tree");
        let commit = agent.commit(None, &sig, &sig, "work", &tree, &[]).expect("commit");
        let mut frames = Vec::new();
        export(&dir.join("agent.git/objects"), &dir.join("shared.git"), &[commit], &mut frames).expect("export");
        // Fed in pieces of every size, the objects arrive whole.
        let mut importer = Importer::new(&shared).expect("importer");
        for chunk in frames.chunks(7) {
            assert!(importer.feed(chunk));
        }
        importer.finish().expect("complete");
        assert!(shared.find_commit(commit).is_ok());
        assert!(shared.find_tree(tree.id()).is_ok() && shared.find_blob(blob).is_ok());
        // Once published, nothing is sent again.
        let mut again = Vec::new();
        export(&dir.join("agent.git/objects"), &dir.join("shared.git"), &[commit], &mut again).expect("export");
        assert!(again.is_empty());
        // A commit whose tree did not come is refused; so is a stream cut short.
        let other = git2::Repository::init_bare(dir.join("other.git")).expect("other");
        let empty = agent.find_tree(agent.treebuilder(None).expect("b").write().expect("t")).expect("t");
        let parent = agent.find_commit(commit).expect("parent");
        let lone = agent.commit(None, &sig, &sig, "lone", &empty, &[&parent]).expect("commit");
        let agent_odb = agent.odb().expect("odb");
        let raw = agent_odb.read(lone).expect("read");
        let mut frame = format!("c{}\n", raw.data().len()).into_bytes();
        frame.extend_from_slice(raw.data());
        let mut importer = Importer::new(&other).expect("importer");
        assert!(importer.feed(&frame));
        assert!(importer.finish().expect_err("incomplete").contains("is named but was not published"));
        assert!(other.find_commit(lone).is_err(), "a refused import left its commit in the store");
        let mut importer = Importer::new(&other).expect("importer");
        assert!(importer.feed(&frame[..frame.len() - 1]));
        assert_eq!(importer.finish().expect_err("cut"), "the exporter's output ended inside an object");
        let mut importer = Importer::new(&other).expect("importer");
        assert!(!importer.feed(b"x12\nnot an object"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
