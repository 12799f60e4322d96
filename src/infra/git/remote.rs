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
    let repo = Repository::open_bare(git_dir).map_err(lib(format!("open {}", git_dir.display())))?;
    // libgit2 pushes local refs: a temporary one names the new value.
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = format!("refs/offshoot/pushing/{}-{serial}", std::process::id());
    repo.reference(&temp, new, true, "push").map_err(lib(format!("write {temp}")))?;
    let outcome = RefCell::new(None);
    let found = RefCell::new(None);
    let pushed = {
        let mut callbacks = RemoteCallbacks::new();
        callbacks.push_negotiation(|updates| {
            for update in updates {
                let advertised = Some(update.src()).filter(|o| !o.is_zero());
                if advertised != expected {
                    *found.borrow_mut() = Some(advertised);
                    return Err(git2::Error::from_str("the ref is not where it was expected"));
                }
            }
            Ok(())
        });
        callbacks.push_update_reference(|_, status| {
            *outcome.borrow_mut() = Some(status.map(str::to_owned));
            Ok(())
        });
        let mut options = PushOptions::new();
        options.remote_callbacks(callbacks);
        let mut remote = repo.remote_anonymous(url).map_err(lib(format!("reach {url}")))?;
        // Forced as far as libgit2 goes (a lease may move to any value): the two checks
        // above are the compare.
        remote.push(&[format!("+{temp}:{refname}")], Some(&mut options))
    };
    let _ = repo.find_reference(&temp).and_then(|mut r| r.delete());
    if let Some(found) = found.into_inner() {
        return Ok(Swap::Moved { found });
    }
    pushed.map_err(lib(format!("push {refname} to {url}")))?;
    match outcome.into_inner() {
        Some(None) => Ok(Swap::Done),
        Some(Some(status)) => Ok(Swap::Refused(status)),
        None => Ok(Swap::Refused("the server said nothing of the ref".into())),
    }
}
