//! The workspaces' events as drivers write them: a thread per workspace follows every
//! agent's events file (`steps/<id>/events.ndjson`) through inotify, a shallow watch of
//! `steps/` and each agent's directory in it, and all keep the latest lines in one log,
//! in order, each with an id; event streams wait on it. Nothing is polled: with no
//! driver writing, the threads sleep in `poll(2)` and so does every stream, but for a
//! comment each [`KEEPALIVE`] to learn whether its client is still there.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use engine::step::events;

/// How many events are kept for a client that comes back (`Last-Event-ID`), and how
/// many bytes of them at most.
const KEPT: usize = 20_000;
const KEPT_BYTES: usize = 64 << 20;
/// A line longer than this is sent as its type and agent only (`"cut": true`): the
/// client reads the rest from the API.
const LINE_MAX: usize = 1 << 20;
/// The most events one answer of [`Feed::from`] carries.
const BATCH: usize = 1_000;
/// How often a quiet stream sends a comment.
pub(super) const KEEPALIVE: Duration = Duration::from_secs(25);

/// One event: its number, the workspace (its place among those served) and agent it is
/// of, and its JSON line (redacted).
#[derive(Clone)]
pub(super) struct Event {
    pub(super) seq: u64,
    pub(super) site: usize,
    pub(super) agent: String,
    pub(super) line: Arc<str>,
}

#[derive(Default)]
struct Log {
    /// The number the next event takes.
    next: u64,
    events: VecDeque<Event>,
    /// The bytes of the lines kept.
    bytes: usize,
}

/// What a stream is to send next.
pub(super) enum Next {
    Events(Vec<Event>),
    /// The events after the one asked for are no longer kept (or it is of another
    /// run of the server): the client must read the state again.
    Gap,
    /// Nothing came in the time given.
    Quiet,
}

#[derive(Clone)]
pub(super) struct Feed {
    shared: Arc<(Mutex<Log>, Condvar)>,
    /// This run of the server: event ids are `<epoch>-<seq>`, so an id of another run is
    /// known for what it is.
    pub(super) epoch: u32,
}

impl Feed {
    /// Starts following the events files under each workspace's `steps` directory (made
    /// if missing; its key tags its events), each file from its end as it is now;
    /// `redact` hides secret values in every line.
    pub(super) fn start(sources: Vec<(String, PathBuf)>, redact: infra::redact::Redactor) -> std::io::Result<Feed> {
        let feed = Feed { shared: Arc::default(), epoch: engine::random_u32() };
        for (site, (key, steps)) in sources.into_iter().enumerate() {
            feed.follow(site, key, steps, redact.clone())?;
        }
        Ok(feed)
    }

    /// One thread following one workspace's events files.
    fn follow(&self, site: usize, key: String, steps: PathBuf, redact: infra::redact::Redactor) -> std::io::Result<()> {
        std::fs::create_dir_all(&steps)?;
        let mut watch = infra::watch::Shallow::new(&steps)?;
        let mut offsets: HashMap<String, u64> = HashMap::new();
        for entry in std::fs::read_dir(&steps)?.flatten() {
            let agent = entry.file_name().to_string_lossy().into_owned();
            if !agent_dir(&steps, &agent) {
                continue;
            }
            let len = std::fs::metadata(entry.path().join(events::FILE)).map_or(0, |m| m.len());
            offsets.insert(agent, len);
        }
        let writer = self.clone();
        std::thread::Builder::new().name("serve-feed".into()).spawn(move || {
            let mut clean = Clean::new(redact, key);
            while let Ok(seen) = watch.wait(None) {
                let mut lines = Vec::new();
                // (Only agents' directories, real ones: a name that is no agent id, or a
                // link, is passed over.)
                let dirs: Vec<String> = seen.dirs.into_iter().filter(|d| agent_dir(&steps, d)).collect();
                for agent in &dirs {
                    // (A new agent: its file is read from the start, and its coming said.)
                    offsets.entry(agent.clone()).or_insert(0);
                    lines.push((agent.clone(), clean.tagged(serde_json::json!({"type": "agent", "agent": agent}))));
                }
                let touched: Vec<String> = match seen.everything {
                    true => offsets.keys().cloned().collect(),
                    false => {
                        seen.files.into_iter().filter(|(_, name)| name == events::FILE).map(|(dir, _)| dir).collect()
                    }
                };
                for agent in touched.into_iter().chain(dirs).filter(|a| agent_dir(&steps, a)) {
                    let offset = offsets.entry(agent.clone()).or_insert(0);
                    for line in read_new(&steps.join(&agent).join(events::FILE), offset) {
                        lines.extend(clean.line(&agent, &line).into_iter().map(|l| (agent.clone(), l)));
                    }
                }
                writer.push(site, lines.into_iter());
            }
        })?;
        Ok(())
    }

    fn push(&self, site: usize, lines: impl Iterator<Item = (String, String)>) {
        let (lock, cvar) = &*self.shared;
        let Ok(mut log) = lock.lock() else { return };
        for (agent, line) in lines {
            let seq = log.next;
            log.next += 1;
            log.bytes += line.len();
            log.events.push_back(Event { seq, site, agent, line: line.into() });
            while log.events.len() > KEPT || log.bytes > KEPT_BYTES {
                let Some(gone) = log.events.pop_front() else { break };
                log.bytes -= gone.line.len();
            }
        }
        cvar.notify_all();
    }

    /// The number the next event will take: where a stream that starts now begins.
    pub(super) fn now(&self) -> u64 {
        self.shared.0.lock().map(|l| l.next).unwrap_or(0)
    }

    /// The events from number `from` on, waiting up to `wait` for one.
    pub(super) fn from(&self, from: u64, wait: Duration) -> Next {
        let (lock, cvar) = &*self.shared;
        let Ok(log) = lock.lock() else { return Next::Quiet };
        let Ok((log, _)) = cvar.wait_timeout_while(log, wait, |log| log.next <= from) else { return Next::Quiet };
        let first = log.events.front().map_or(log.next, |e| e.seq);
        if from < first {
            return Next::Gap;
        }
        let fresh: Vec<Event> = log.events.iter().skip((from - first) as usize).take(BATCH).cloned().collect();
        if fresh.is_empty() { Next::Quiet } else { Next::Events(fresh) }
    }

    /// Where a stream resumes after the event of id `last` (`<epoch>-<seq>`): `None`
    /// for an id of another run of the server, or not one.
    pub(super) fn after(&self, last: &str) -> Option<u64> {
        let (epoch, seq) = last.split_once('-')?;
        (epoch.parse::<u32>().ok()? == self.epoch).then_some(())?;
        seq.parse::<u64>().ok()?.checked_add(1)
    }
}

/// The complete lines of `path` after `offset`, moving it past them (a line still
/// being written waits for its end; a file cut shorter is read again from its start).
fn read_new(path: &Path, offset: &mut u64) -> Vec<String> {
    // (Never through a link, never blocked on a FIFO: only a regular file is read.)
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let Ok(mut file) = opened else { return Vec::new() };
    let Some(len) = file.metadata().ok().filter(|m| m.is_file()).map(|m| m.len()) else { return Vec::new() };
    if len < *offset {
        *offset = 0;
    }
    if file.seek(SeekFrom::Start(*offset)).is_err() {
        return Vec::new();
    }
    let mut bytes = Vec::new();
    if file.take(len - *offset).read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else { return Vec::new() };
    *offset += end as u64 + 1;
    String::from_utf8_lossy(&bytes[..end]).lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect()
}

/// Whether `name` in `steps` is an agent's directory: an agent id, and a directory
/// (not a link to one).
fn agent_dir(steps: &Path, name: &str) -> bool {
    domain::id::AgentId::parse(name).is_ok()
        && std::fs::symlink_metadata(steps.join(name)).is_ok_and(|m| m.file_type().is_dir())
}

/// Lines made fit to send: only events lines (what drivers write) go, written again by
/// serde (nothing of a line but its JSON reaches a client) with the workspace's key,
/// with every secret value hidden — in streamed text too, where a key can come split
/// across two deltas: each agent's delta text is redacted as one stream, its tail held
/// back until the next piece shows it is no secret.
struct Clean {
    redact: infra::redact::Redactor,
    /// The key of the workspace its lines are of.
    workspace: String,
    /// Per agent, the text and thinking deltas held back.
    held: HashMap<String, (String, String)>,
}

impl Clean {
    fn new(redact: infra::redact::Redactor, workspace: String) -> Clean {
        Clean { redact, workspace, held: HashMap::new() }
    }

    /// `value` with its workspace, as a line.
    fn tagged(&self, mut value: serde_json::Value) -> String {
        value["workspace"] = serde_json::Value::String(self.workspace.clone());
        value.to_string()
    }

    fn line(&mut self, agent: &str, line: &str) -> Vec<String> {
        let Some(mut parsed) = events::Line::parse(line.as_bytes()) else { return Vec::new() };
        let held = self.held.entry(agent.to_owned()).or_default();
        let mut out = Vec::new();
        let workspace = self.workspace.clone();
        let delta = |record: events::Record| {
            let mut value = events::Line { record, agent: agent.to_owned() }.to_value();
            value["workspace"] = serde_json::Value::String(workspace.clone());
            value.to_string()
        };
        match &mut parsed.record {
            events::Record::TextDelta { text } => {
                *text = self.redact.redact_piece(&mut held.0, text);
                if text.is_empty() {
                    return out;
                }
            }
            events::Record::ThinkingDelta { text } => {
                *text = self.redact.redact_piece(&mut held.1, text);
                if text.is_empty() {
                    return out;
                }
            }
            // Anything else ends what streamed: what was held back goes first.
            _ => {
                for (text, thinking) in [(true, &mut held.0), (false, &mut held.1)] {
                    let rest = self.redact.release(thinking);
                    if !rest.is_empty() {
                        out.push(delta(match text {
                            true => events::Record::TextDelta { text: rest },
                            false => events::Record::ThinkingDelta { text: rest },
                        }));
                    }
                }
            }
        }
        let mut text = self.redact.redact(&self.tagged(parsed.to_value()));
        if text.len() > LINE_MAX {
            let kind = parsed.to_value()["type"].clone();
            text = self.tagged(serde_json::json!({"type": kind, "agent": agent, "cut": true}));
        }
        out.push(text);
        out
    }
}
