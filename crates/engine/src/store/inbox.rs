//! Deposits into an agent's inbox: lock-free and create-only. A deposit is written
//! to a temporary name, then claimed under its final numbered name with a hard link
//! (which never overwrites); on a collision it takes the next number.

use std::path::{Path, PathBuf};

use domain::id::AgentId;
use domain::inbox::{self, Deposit};
use domain::layout::Layout;

#[derive(Debug, thiserror::Error)]
#[error("cannot deposit into {path}: {source}")]
pub struct InboxError {
    pub(crate) path: PathBuf,
    pub(crate) source: std::io::Error,
}

/// One undelivered message.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub(crate) path: PathBuf,
    pub(crate) number: u32,
    pub(crate) sender: String,
    pub(crate) text: String,
}

/// In a worker's workspace the deposit goes to `id`'s outbox instead: the worker puts it
/// on the remote once what caused it is there, and delivers it from there to whichever
/// workspace drives `id`.
pub fn deposit(layout: &Layout, id: &AgentId, deposit: &Deposit) -> Result<PathBuf, InboxError> {
    let dir = if layout.worker().exists() { layout.outbox(id) } else { layout.inbox(id) };
    deposit_into(&dir, &deposit.from, &deposit.render())
}

/// Deposits `text` (a rendered [`Deposit`], as another workspace wrote it) from `from`
/// into `id`'s inbox.
pub(crate) fn deposit_text(layout: &Layout, id: &AgentId, from: &str, text: &str) -> Result<PathBuf, InboxError> {
    deposit_into(&layout.inbox(id), from, text)
}

fn deposit_into(dir: &Path, from: &str, text: &str) -> Result<PathBuf, InboxError> {
    let dir = dir.to_owned();
    // The sender is part of the file's name: an agent id or `user`, nothing else.
    if !domain::inbox::plain_sender(from) {
        let reason = format!("`{from}` is not a sender's name (an agent id or `user`)");
        return Err(InboxError { path: dir, source: std::io::Error::new(std::io::ErrorKind::InvalidInput, reason) });
    }
    let err = |path: &Path| {
        let path = path.to_owned();
        move |source| InboxError { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(err(&dir))?;
    let temp = dir.join(format!(".tmp-{}-{}", std::process::id(), crate::random_u32()));
    std::fs::write(&temp, text).map_err(err(&temp))?;
    let mut number = next_number(&dir);
    let claimed = loop {
        let target = dir.join(inbox::file_name(number, from));
        match std::fs::hard_link(&temp, &target) {
            Ok(()) => break Ok(target),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => number += 1,
            Err(e) => {
                break Err(InboxError { path: target, source: e });
            }
        }
    };
    let _ = std::fs::remove_file(&temp);
    claimed
}

fn next_number(dir: &Path) -> u32 {
    let names = std::fs::read_dir(dir).into_iter().flatten().flatten();
    names.filter_map(|e| inbox::parse_name(&e.file_name().to_string_lossy()).map(|(n, _)| n)).max().unwrap_or(0) + 1
}

/// The undelivered messages, oldest first.
pub(crate) fn pending(layout: &Layout, id: &AgentId) -> Result<Vec<Pending>, InboxError> {
    pending_in(&layout.inbox(id))
}

/// The messages in inbox (or outbox) directory `dir`, oldest first.
pub(crate) fn pending_in(dir: &Path) -> Result<Vec<Pending>, InboxError> {
    let dir = dir.to_owned();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((number, sender)) = inbox::parse_name(&name) else {
            continue;
        };
        let path = entry.path();
        let text = std::fs::read_to_string(&path).map_err(|source| InboxError { path: path.clone(), source })?;
        out.push(Pending { number, sender: sender.to_owned(), text, path });
    }
    out.sort_by_key(|p| p.number);
    Ok(out)
}

pub fn has_pending(layout: &Layout, id: &AgentId) -> bool {
    pending(layout, id).map(|p| !p.is_empty()).unwrap_or(false)
}
