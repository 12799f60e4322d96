//! One ref's compare-and-swap on a remote repository over git's smart protocol (issue
//! 24's building block: claims, leases, agents' branches moved by the worker that owns
//! them).
//!
//! libgit2 pushes what the server advertised as the ref's old value, not a value the
//! caller chose, so a push alone is no compare-and-swap. Two checks make it one: the
//! `push_negotiation` callback sees the advertised value and cancels the push unless it
//! is the expected one (none, for create-only), and the server's `receive-pack` refuses
//! the update if the ref moved between its advertisement and the update (it compares
//! old values under its ref lock). Either way the caller learns the ref was elsewhere.

use std::cell::RefCell;
use std::path::Path;

use git2::{Oid, PushOptions, RemoteCallbacks, Repository};

use super::{Result, lib};

/// How a compare-and-swap went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Swap {
    /// The remote ref now points at the new value.
    Done,
    /// The remote ref was not at the expected value: where it was (`None`: absent), as
    /// the server advertised it.
    Moved { found: Option<Oid> },
    /// The server refused the update (the ref moved after it was advertised, or a rule of
    /// the server's): its words.
    Refused(String),
}

/// Points `refname` of the repository at `url` at `new` (an object of the repository at
/// `git_dir`, sent with what it reaches) if, and only if, it points at `expected` now
/// (`None`: if it does not exist).
pub fn compare_and_swap(git_dir: &Path, url: &str, refname: &str, expected: Option<Oid>, new: Oid) -> Result<Swap> {
    let mut swapped = compare_and_swap_each(git_dir, url, &[(refname.to_owned(), expected, Some(new))])?;
    Ok(swapped.pop().unwrap_or_else(|| Swap::Refused("the server said nothing of the ref".into())))
}

/// [`compare_and_swap`] of many refs in one push (one connection, however many): each
/// `(ref, expected, new)` — `new` `None` deletes it — goes through or not on its own.
/// Returns how each went, in order.
pub fn compare_and_swap_each(
    git_dir: &Path,
    url: &str,
    swaps: &[(String, Option<Oid>, Option<Oid>)],
) -> Result<Vec<Swap>> {
    Ok(push_parts(git_dir, url, &[], &[], swaps, Some(&[]))?.swaps)
}

/// How each part of a [`push_parts`] went, in the order each was given.
#[derive(Debug, Default)]
pub struct Parts {
    pub whole: Vec<Outcome>,
    pub each: Vec<Outcome>,
    pub swaps: Vec<Swap>,
}

/// One push (one connection unless a ref is out of place) of three parts: `whole`, all
/// or nothing as [`push_whole`]'s; `each`, each update on its own as [`push`]'s; and
/// `swaps`, compare-and-swaps of values not named here (`(ref, expected, new)`, as
/// [`compare_and_swap_each`]'s). A ref out of place in one part holds back no other part.
///
/// With `narrow`, the push sees of the remote's refs only those it moves and those
/// `narrow` names (over git://, ssh and https; a local path shows it all): what it sends
/// is what the new values reach beyond the old values of those, so `narrow` should name
/// the refs whose history a new ref continues (an agent's parent's branch for a child
/// made from it). Without, libgit2 reads every commit the remote advertises that this
/// repository holds, and its tree, at every push.
pub fn push_parts(
    git_dir: &Path,
    url: &str,
    whole: &[Update],
    each: &[Update],
    swaps: &[(String, Option<Oid>, Option<Oid>)],
    narrow: Option<&[String]>,
) -> Result<Parts> {
    if whole.is_empty() && each.is_empty() && swaps.is_empty() {
        return Ok(Parts::default());
    }
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    let pusher = pusher(git_dir)?;
    // libgit2 pushes local refs: a temporary one of the pusher's names each new value.
    let mut temps = Vec::new();
    let mut updates = Vec::new();
    let mut made = || -> Result<()> {
        let given = whole.iter().chain(each).map(|u| {
            let new = u.local.as_ref().map(|l| repo.refname_to_id(l).map_err(lib(format!("read {l}")))).transpose();
            new.map(|new| (u.remote.clone(), u.expect, new))
        });
        let swapped =
            swaps.iter().map(|(remote, expected, new)| Ok((remote.clone(), Expect::Exactly(*expected), *new)));
        for update in given.chain(swapped) {
            let (remote, expect, new) = update?;
            let local = match new {
                Some(new) => {
                    let temp = temp_ref("push");
                    pusher.reference(&temp, new, true, "push").map_err(lib(format!("write {temp}")))?;
                    temps.push(temp.clone());
                    Some(temp)
                }
                None => None,
            };
            updates.push(Update { local, remote, expect });
        }
        Ok(())
    };
    let wholly: Vec<bool> = (0..whole.len() + each.len() + swaps.len()).map(|i| i < whole.len()).collect();
    let _narrowing = super::transport::narrowing(narrow.map(|also| {
        let moved = whole.iter().chain(each).map(|u| u.remote.clone()).chain(swaps.iter().map(|s| s.0.clone()));
        moved.chain(also.iter().cloned()).collect()
    }));
    // (The temporary refs go whatever happens, those made before a failure too.)
    let pushed = made().and_then(|()| push_with(&pusher, url, &updates, &wholly));
    for temp in &temps {
        let _ = pusher.find_reference(temp).and_then(|mut r| r.delete());
    }
    let mut outcomes = pushed?;
    let swapped = outcomes.split_off(whole.len() + each.len());
    let each_went = outcomes.split_off(whole.len());
    Ok(Parts {
        whole: outcomes,
        each: each_went,
        swaps: swapped
            .into_iter()
            .map(|outcome| match outcome {
                Outcome::Done(_) => Swap::Done,
                Outcome::Moved { found } => Swap::Moved { found },
                Outcome::Refused(words) => Swap::Refused(words),
                Outcome::Withheld => Swap::Refused("the server said nothing of the ref".into()),
            })
            .collect(),
    })
}

/// What a pushed ref must be on the remote for its update to go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Exactly this value (`None`: absent).
    Exactly(Option<Oid>),
    /// Absent, or an ancestor of the pushed value that this repository holds: the
    /// update only adds history.
    FastForward,
}

/// One ref to move on the remote: to the value of local ref `local` (`None`: delete it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    pub local: Option<String>,
    pub remote: String,
    pub expect: Expect,
}

/// How one [`Update`] went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The remote ref is now this value (`None`: deleted).
    Done(Option<Oid>),
    /// The remote ref was not as expected: where it was (`None`: absent).
    Moved { found: Option<Oid> },
    /// The server refused the update: its words.
    Refused(String),
    /// Not sent: another ref of the same [`push_whole`] was out of place.
    Withheld,
}

/// Moves the remote refs of `updates` on the repository at `url`, each only as its
/// [`Expect`] allows, in as few connections as it takes: a push in which some ref is not
/// as expected is cancelled whole (libgit2 decides before sending anything) and pushed
/// again without it. Returns an outcome per update, in order.
pub fn push(git_dir: &Path, url: &str, updates: &[Update]) -> Result<Vec<Outcome>> {
    Ok(push_parts(git_dir, url, &[], updates, &[], None)?.each)
}

/// [`push`], all or nothing as far as the client decides: when one ref is not as
/// expected nothing is sent and the others are [`Outcome::Withheld`]. (The server may
/// still refuse one ref and take the rest, as git's `receive-pack` does without the
/// `atomic` capability, which libgit2 does not ask for.)
pub fn push_whole(git_dir: &Path, url: &str, updates: &[Update]) -> Result<Vec<Outcome>> {
    Ok(push_parts(git_dir, url, updates, &[], &[], None)?.whole)
}

/// Pushes `updates` from `repo`, those marked in `whole` all or nothing
/// among themselves, the rest each on its own (see [`push_parts`]).
fn push_with(repo: &Repository, url: &str, updates: &[Update], whole: &[bool]) -> Result<Vec<Outcome>> {
    let shown = super::transport::shown(url);
    let mut outcomes: Vec<Option<Outcome>> = vec![None; updates.len()];
    loop {
        let pending: Vec<usize> = (0..updates.len()).filter(|i| outcomes[*i].is_none()).collect();
        if pending.is_empty() {
            break;
        }
        let moved = RefCell::new(Vec::new());
        let statuses = RefCell::new(Vec::new());
        let proposed = RefCell::new(Vec::new());
        let pushed = {
            let mut callbacks = RemoteCallbacks::new();
            callbacks.push_negotiation(|proposals| {
                for p in proposals {
                    let Ok(refname) = p.dst_refname() else { continue };
                    let Some(i) = pending.iter().copied().find(|i| updates[*i].remote == refname) else { continue };
                    let advertised = Some(p.src()).filter(|o| !o.is_zero());
                    let new = Some(p.dst()).filter(|o| !o.is_zero());
                    proposed.borrow_mut().push((i, new));
                    let fits = match updates[i].expect {
                        Expect::Exactly(expected) => advertised == expected,
                        Expect::FastForward => match (advertised, new) {
                            (None, _) => true,
                            (Some(old), Some(new)) => old == new || repo.graph_descendant_of(new, old).unwrap_or(false),
                            (Some(_), None) => false,
                        },
                    };
                    if !fits {
                        moved.borrow_mut().push((i, advertised));
                    }
                }
                if moved.borrow().is_empty() {
                    Ok(())
                } else {
                    Err(git2::Error::from_str("a ref is not where it was expected"))
                }
            });
            callbacks.push_update_reference(|refname, status| {
                statuses.borrow_mut().push((refname.to_owned(), status.map(str::to_owned)));
                Ok(())
            });
            let mut options = PushOptions::new();
            options.remote_callbacks(callbacks);
            let mut remote = anonymous(repo, url)?;
            // Forced as far as libgit2 goes: the checks above are the compare.
            let specs: Vec<String> = pending
                .iter()
                .map(|i| match &updates[*i].local {
                    Some(local) => format!("+{local}:{}", updates[*i].remote),
                    None => format!(":{}", updates[*i].remote),
                })
                .collect();
            remote.push(&specs, Some(&mut options))
        };
        let moved = moved.into_inner();
        let moved_whole = moved.iter().any(|(i, _)| whole[*i]);
        if !moved.is_empty() {
            for (i, found) in moved {
                outcomes[i] = Some(Outcome::Moved { found });
            }
            if moved_whole {
                for (outcome, _) in outcomes.iter_mut().zip(whole).filter(|(o, w)| o.is_none() && **w) {
                    *outcome = Some(Outcome::Withheld);
                }
            }
            continue;
        }
        pushed.map_err(lib(format!("push to {shown}")))?;
        let proposed = proposed.into_inner();
        let statuses = statuses.into_inner();
        for i in pending {
            let status = statuses.iter().find(|(r, _)| *r == updates[i].remote).map(|(_, s)| s.clone());
            outcomes[i] = Some(match status {
                Some(Some(words)) => Outcome::Refused(words),
                // Sent and taken, or already there (libgit2 proposes nothing for a ref
                // already at its value).
                _ => Outcome::Done(match proposed.iter().find(|(p, _)| *p == i) {
                    Some((_, new)) => *new,
                    None => match &updates[i].local {
                        Some(local) => Some(repo.refname_to_id(local).map_err(lib(format!("read {local}")))?),
                        None => None,
                    },
                }),
            });
        }
    }
    Ok(outcomes.into_iter().map(|o| o.expect("every update has an outcome")).collect())
}

/// Fetches from the repository at `url` what `refspecs` (`+src:dst`, each source a
/// prefix ending in `*`) name, in one connection, and makes the local refs under each
/// `dst` exactly what the remote has under its `src` ([`super::mirrors::mirror`]: only
/// what changed is written; refs under `hot`, local names, stay loose, the others are
/// packed as they accumulate). Returns every ref the remote advertised, by name.
pub fn fetch(git_dir: &Path, url: &str, refspecs: &[String], hot: &[String]) -> Result<Vec<(String, Oid)>> {
    let shown = super::transport::shown(url);
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    let mut remote = anonymous(&repo, url)?;
    remote.connect(git2::Direction::Fetch).map_err(lib(format!("connect to {shown}")))?;
    let listed: Vec<(String, Oid)> = remote
        .list()
        .map_err(lib(format!("list the refs of {shown}")))?
        .iter()
        // Only names git allows (what the server says is not trusted: `refs/heads/../x`
        // would be a path out of the repository, `x^{}` a peeled value, not a ref).
        .filter(|h| h.name().starts_with("refs/") && git2::Reference::is_valid_name(h.name()))
        .map(|h| (h.name().to_owned(), h.oid()))
        .collect();
    let mut downloaded = false;
    let mut download = |had: &[Oid]| -> Result<()> {
        if std::mem::replace(&mut downloaded, true) {
            return Ok(());
        }
        // What the mirrors about to move held, named for the while as refs: libgit2 says
        // it has only what refs reach, and the mirrors are none (see `mirrors`).
        let haves = Haves::name(&repo, had);
        let mut options = git2::FetchOptions::new();
        options.download_tags(git2::AutotagOption::None);
        // A fetch killed while it wrote the shallow roots leaves their lock behind.
        let mut got = remote.download(refspecs, Some(&mut options));
        if got.as_ref().is_err_and(|e| e.code() == git2::ErrorCode::Locked) {
            sweep_stale_locks(git_dir, &["shallow.lock"]);
            got = remote.download(refspecs, Some(&mut options));
        }
        drop(haves);
        got.map_err(lib(format!("fetch from {shown}")))
    };
    for spec in refspecs {
        let Some((src, dst)) = spec.trim_start_matches('+').split_once(':') else { continue };
        let (Some(src), Some(dst)) = (src.strip_suffix('*'), dst.strip_suffix('*')) else { continue };
        let wanted: std::collections::BTreeMap<String, Oid> =
            listed.iter().filter_map(|(n, o)| n.strip_prefix(src).map(|rest| (format!("{dst}{rest}"), *o))).collect();
        super::mirrors::mirror(git_dir, dst, &wanted, hot, &mut download)?;
    }
    let _ = remote.disconnect();
    Ok(listed)
}

/// Where the repository the pushes from `git_dir` are made from is ([`pusher`]).
pub fn pushing(git_dir: &Path) -> std::path::PathBuf {
    git_dir.join("pushing")
}

/// The repository the pushes from `git_dir` are made from, made the first time:
/// `<git_dir>/pushing`, holding only the temporary refs of the pushes under way, and
/// reading `git_dir`'s objects as its alternates. libgit2 lists every ref of the
/// repository it pushes from at each push (its pack writer looks for tags among them),
/// and `git_dir`'s name every agent ever seen here.
fn pusher(git_dir: &Path) -> Result<Repository> {
    let dir = pushing(git_dir);
    let open = || Repository::open_bare(&dir).map_err(lib(format!("open {}", dir.display())));
    if dir.join("HEAD").is_file() {
        return open();
    }
    // Made aside and put in place whole (two processes may make it at once).
    let aside = git_dir.join(format!("{}.{}", temp_ref("pushing").replace('/', "-"), "new"));
    let made = (|| -> std::io::Result<()> {
        std::fs::create_dir_all(aside.join("refs"))?;
        std::fs::create_dir_all(aside.join("objects/info"))?;
        std::fs::write(aside.join("HEAD"), "ref: refs/heads/main\n")?;
        // (Relative to its own objects directory.)
        std::fs::write(aside.join("objects/info/alternates"), "../../objects\n")?;
        std::fs::rename(&aside, &dir)
    })();
    if made.is_err() {
        let _ = std::fs::remove_dir_all(&aside);
    }
    open()
}

/// A name for a temporary ref of this process, `refs/outgoing/<kind>/<pid>-<n>`: not
/// under `refs/offshoot/` (marks). One a kill leaves (in the git directory, or in its
/// `pushing/`) is swept by the next worker started in the workspace (elsewhere it
/// stays, naming an object the repository has).
fn temp_ref(kind: &str) -> String {
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("refs/outgoing/{kind}/{}-{serial}", std::process::id())
}

/// Temporary refs ([`temp_ref`]) naming commits this repository has, removed when it goes.
struct Haves<'r> {
    repo: &'r Repository,
    names: Vec<String>,
}

impl<'r> Haves<'r> {
    /// (At most 64: libgit2 offers its first 256 haves by date, and these are the
    /// newest a fetch needs.)
    fn name(repo: &'r Repository, oids: &[Oid]) -> Haves<'r> {
        let mut names = Vec::new();
        for oid in oids.iter().filter(|o| repo.find_commit(**o).is_ok()).take(64) {
            let name = temp_ref("haves");
            if repo.reference(&name, *oid, true, "fetch").is_ok() {
                names.push(name);
            }
        }
        Haves { repo, names }
    }
}

impl Drop for Haves<'_> {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = super::delete_ref(self.repo, name);
        }
    }
}

/// A connection-to-be to `url`, ssh and https made reachable first.
fn anonymous<'r>(repo: &'r Repository, url: &str) -> Result<git2::Remote<'r>> {
    super::transport::register()
        .map_err(|e| git2::Error::from_str(&e))
        .map_err(lib(format!("reach {}", super::transport::shown(url))))?;
    repo.remote_anonymous(&super::transport::wire_url(url))
        .map_err(lib(format!("reach {}", super::transport::shown(url))))
}

/// Whether `new` descends from `old` in the repository at `git_dir` (false when either is
/// not held there).
pub fn descends(git_dir: &Path, new: Oid, old: Oid) -> Result<bool> {
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    Ok(repo.graph_descendant_of(new, old).unwrap_or(false))
}

/// Deletes ref `name` of the repository at `git_dir`, if it exists.
pub fn delete_ref(git_dir: &Path, name: &str) -> Result<()> {
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    super::delete_ref(&repo, name)
}

/// Writes `bytes` as a blob of the repository at `git_dir`; its id.
pub fn write_blob(git_dir: &Path, bytes: &[u8]) -> Result<Oid> {
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    repo.blob(bytes).map_err(lib("write a blob"))
}

/// Whether `oid` is a commit the repository at `git_dir` holds.
pub fn is_commit(git_dir: &Path, oid: Oid) -> bool {
    Repository::open_bare(git_dir).is_ok_and(|r| r.find_commit(oid).is_ok())
}

/// How many commits the first-parent history of `commit` has (itself included), up to
/// `limit`.
pub fn first_parent_len(git_dir: &Path, commit: Oid, limit: usize) -> Result<usize> {
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    let mut walk = repo.revwalk().map_err(lib("walk history"))?;
    walk.push(commit).map_err(lib("walk history"))?;
    walk.simplify_first_parent().map_err(lib("walk history"))?;
    Ok(walk.take(limit).count())
}

/// Bounds how long libgit2 waits to connect to a remote and for each read or write on
/// the connection (git://, http), so a worker's round never hangs on a dead one for longer
/// than its lease allows. Process-wide; call before any thread starts.
#[expect(unsafe_code, reason = "libgit2's global options: set once, before other threads exist")]
pub fn set_timeouts(connect: std::time::Duration, io: std::time::Duration) {
    let ms = |d: std::time::Duration| i32::try_from(d.as_millis()).unwrap_or(i32::MAX).max(1);
    // SAFETY: both write a C global of libgit2's without synchronisation; the caller calls
    // this before starting any thread (the worker's first act), so nothing races it.
    unsafe {
        let _ = git2::opts::set_server_connect_timeout_in_milliseconds(ms(connect));
        let _ = git2::opts::set_server_timeout_in_milliseconds(ms(io));
    }
    super::transport::set_timeouts(connect, io);
}

/// Removes the lock files below `dirs` (refs a fetch writes, which only fetches write; a
/// `….lock` file itself) once they are 2 s old, waiting up to 3 s for them to be: a live
/// writer holds one for microseconds, so an older one is a killed fetch's.
fn sweep_stale_locks(git_dir: &Path, dirs: &[&str]) {
    const STALE: std::time::Duration = std::time::Duration::from_secs(2);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let locks: Vec<std::path::PathBuf> = dirs
            .iter()
            .flat_map(|d| match d.ends_with(".lock") {
                true => vec![git_dir.join(d)],
                false => super::lock_files(&git_dir.join(d)).into_iter().map(|(path, _)| path).collect(),
            })
            .collect();
        let mut young = false;
        for lock in locks {
            match super::file_age(&lock) {
                Some(age) if age >= STALE => {
                    let _ = std::fs::remove_file(&lock);
                }
                Some(_) => young = true,
                None => {}
            }
        }
        if !young || std::time::Instant::now() >= until {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `url` fit to show (no password, no token as a user name).
pub fn shown_url(url: &str) -> String {
    super::transport::shown(url)
}

/// Why `url` cannot be a remote of agents here, if it cannot: a path or `file://` goes
/// through libgit2's local transport, which writes refs without comparing their old
/// values (no compare-and-swap: two workers could both win a claim) and cannot fetch refs
/// that point at blobs (every mark). ssh and https are ours ([`super::transport`]);
/// `git://` and `http://` are libgit2's.
pub fn unsupported(url: &str) -> Option<&'static str> {
    match url.split_once("://").map(|(s, _)| s) {
        Some("file") => Some("a path (`file://`)"),
        None if !super::transport::is_scp_like(url) => Some("a path"),
        _ => None,
    }
}
