//! Following the agents below an attached one while its driver runs: their events
//! files (`steps/<id>/events.ndjson`, each line tagged with its `agent`) are tailed and
//! shown — one live line per agent on a terminal (indicatif), a progress line per step,
//! call and end otherwise, and passed through as they are with `--json`.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde_json::Value;

use domain::id::AgentId;
use engine::agents;
use engine::step::events;
use engine::step::events::{End, Line, Record};
use engine::store::workspace::Workspace;

use super::out::call_gist;

/// How often the events files are looked at.
const POLL: Duration = Duration::from_millis(100);

/// How descendants' events are shown.
#[derive(Clone)]
pub(crate) enum View {
    /// JSON lines on stdout, as the drivers wrote them.
    Json,
    /// One line per agent on the terminal, under whatever else is printed.
    Live(MultiProgress),
    /// Progress lines on stderr.
    Lines,
    /// Every event, a line each, on stdout (`attach`).
    All,
    /// Every record, handed to a function with its agent (the chat).
    Each(Arc<Sink>),
}

/// Where [`View::Each`] hands records: the agent, and the record.
pub(crate) type Sink = dyn Fn(&str, &Record) + Send + Sync;

/// A thread tailing the events of every agent below one.
pub(crate) struct Follower {
    done: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    passes: Passes,
}

/// Passes asked of a follower's thread and passes it made: what lets the driving
/// thread show what the agents below wrote before a line of its own that follows from
/// it (a child's answer before the parent's "message from" it).
#[derive(Clone, Default)]
pub(crate) struct Passes(Arc<(std::sync::Mutex<Counts>, std::sync::Condvar)>);

/// Passes asked, passes made, and the agents whose run's end the passes have shown (an
/// agent working again leaves it).
#[derive(Default)]
struct Counts {
    asked: u64,
    made: u64,
    ended: std::collections::HashSet<String>,
}

impl Passes {
    /// Asks for a pass and waits (a moment at most) until one made after the asking.
    pub(crate) fn catch_up(&self) {
        let (lock, cvar) = &*self.0;
        let Ok(mut counts) = lock.lock() else { return };
        counts.asked += 1;
        let asked = counts.asked;
        cvar.notify_all();
        let until = std::time::Instant::now() + Duration::from_millis(500);
        while counts.made < asked {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            match cvar.wait_timeout(counts, left) {
                Ok((next, _)) => counts = next,
                Err(_) => return,
            }
        }
    }

    /// Asks for a pass without waiting for it.
    fn nudge(&self) {
        let (lock, cvar) = &*self.0;
        if let Ok(mut counts) = lock.lock() {
            counts.asked += 1;
            cvar.notify_all();
        }
    }

    /// Catches up until `agent`'s run's end has been shown (its driver writes it a
    /// moment after handing over its answer), for 300 ms at most (an agent that answered
    /// and still waits for agents of its own writes its end later).
    pub(crate) fn catch_up_to_end_of(&self, agent: &str) {
        let until = std::time::Instant::now() + Duration::from_millis(300);
        loop {
            self.catch_up();
            let ended = self.0.0.lock().map(|c| c.ended.contains(agent)).unwrap_or(true);
            if ended || std::time::Instant::now() >= until {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The thread's side: waits up to `poll` for an ask; the asks the next pass answers.
    fn wait(&self, poll: Duration) -> u64 {
        let (lock, cvar) = &*self.0;
        let Ok(counts) = lock.lock() else { return 0 };
        let asked = counts.asked;
        match cvar.wait_timeout_while(counts, poll, |c| c.asked == asked && c.made >= asked) {
            Ok((counts, _)) => counts.asked,
            Err(_) => asked,
        }
    }

    /// A pass answering `asked` was made; `seen` says which agents it saw end (`true`)
    /// or work (`false`).
    fn made(&self, asked: u64, seen: Vec<(String, bool)>) {
        let (lock, cvar) = &*self.0;
        if let Ok(mut counts) = lock.lock() {
            counts.made = counts.made.max(asked);
            for (agent, ended) in seen {
                match ended {
                    true => counts.ended.insert(agent),
                    false => counts.ended.remove(&agent),
                };
            }
            cvar.notify_all();
        }
    }
}

impl Follower {
    /// Starts following the agents below `id` in the workspace at `root`; what they
    /// logged before this is not shown again.
    pub(crate) fn start(root: &Path, id: &AgentId, view: View) -> Follower {
        Self::spawn(root, id, view, false, false)
    }

    /// [`Follower::start`] for `id` itself as well as the agents below it.
    pub(crate) fn start_with_itself(root: &Path, id: &AgentId, view: View) -> Follower {
        Self::spawn(root, id, view, true, false)
    }

    /// [`Follower::start_with_itself`] for an agent just made: everything it logs is
    /// shown, however soon its driver writes.
    pub(crate) fn start_from_the_beginning(root: &Path, id: &AgentId, view: View) -> Follower {
        Self::spawn(root, id, view, true, true)
    }

    fn spawn(root: &Path, id: &AgentId, view: View, itself: bool, from_start: bool) -> Follower {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let passes = Passes::default();
        let asks = passes.clone();
        let (root, id) = (root.to_owned(), id.clone());
        let handle = std::thread::spawn(move || {
            let mut watch = Watch::new(&root, &id, view, itself);
            watch.pass(!from_start);
            while !flag.load(Ordering::Relaxed) {
                let asked = asks.wait(POLL);
                watch.pass(false);
                asks.made(asked, std::mem::take(&mut watch.seen));
            }
            watch.pass(false);
            watch.close();
        });
        Follower { done, handle: Some(handle), passes }
    }

    /// What asks this follower to catch up (see [`Passes`]).
    pub(crate) fn passes(&self) -> Passes {
        self.passes.clone()
    }

    /// Shows what is left to show and stops.
    pub(crate) fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        // Woken now rather than at the end of its wait (a run's end waited up to a
        // poll for nothing).
        self.passes.nudge();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where one events file has been read to.
#[derive(Default)]
struct Tail {
    offset: u64,
    partial: Vec<u8>,
}

struct Watch {
    steps: PathBuf,
    below: String,
    /// The agent itself, when it is followed too.
    itself: Option<String>,
    view: View,
    ws: Option<Workspace>,
    tails: HashMap<String, Tail>,
    bars: HashMap<String, ProgressBar>,
    names: HashMap<String, String>,
    /// Agents seen to end (`true`) or to work (`false`) since last taken.
    seen: Vec<(String, bool)>,
    /// The queue's questions of the followed tree shown asked (`false`) or answered too.
    questions: HashMap<String, bool>,
    queue: engine::store::queue::Queue,
}

impl Watch {
    fn new(root: &Path, id: &AgentId, view: View, itself: bool) -> Watch {
        Watch {
            steps: domain::layout::Layout::new(root).steps(id).parent().map(Path::to_owned).unwrap_or_default(),
            below: format!("{id}."),
            itself: itself.then(|| id.to_string()),
            view,
            ws: Workspace::open(root).ok(),
            tails: HashMap::new(),
            bars: HashMap::new(),
            names: HashMap::new(),
            seen: Vec::new(),
            questions: HashMap::new(),
            queue: engine::store::queue::Queue::new(&domain::layout::Layout::new(root)),
        }
    }

    /// Whether `agent` is followed here.
    fn follows(&self, agent: &str) -> bool {
        agent.starts_with(&self.below) || self.itself.as_deref() == Some(agent)
    }

    /// Shows the questions of the followed agents the queue gained (`asked`), and the
    /// answers they got (`answered`), each once.
    fn questions(&mut self, first_look: bool) {
        for entry in self.queue.list() {
            // (The followed agent's own questions too: they come from the queue alone.)
            let root = self.below.trim_end_matches('.');
            let waiters: Vec<String> =
                entry.waiters.iter().map(|w| w.agent.clone()).filter(|a| self.follows(a) || a == root).collect();
            let Some(first) = waiters.first().cloned() else { continue };
            let shown = self.questions.get(&entry.id).copied();
            let q = &entry.asked.question;
            // (What was answered before this follower looked first is history.)
            if first_look && entry.answer.is_some() {
                self.questions.insert(entry.id.clone(), true);
                continue;
            }
            // (Asked and answered between two looks: both are said, in order.)
            if shown.is_none() {
                let record = Record::Asked {
                    question: entry.id.clone(),
                    tool: q.tool.clone(),
                    input: q.input.clone(),
                    why: q.why.clone(),
                    escalation: q.escalation.map(|e| e.word().to_owned()),
                    waiters,
                };
                self.questions.insert(entry.id.clone(), false);
                self.show_record(&first, record);
            }
            if self.questions.get(&entry.id) == Some(&false)
                && let Some(answer) = &entry.answer
            {
                let record = Record::Answered {
                    question: entry.id.clone(),
                    yes: answer.yes,
                    by: answer.by.clone(),
                    reason: answer.reason.clone(),
                };
                self.questions.insert(entry.id.clone(), true);
                self.show_record(&first, record);
            }
        }
    }

    fn show_record(&mut self, agent: &str, record: Record) {
        let line = Line { record, agent: agent.to_owned() };
        let value = line.to_value();
        self.show(agent, &value, Some(line.record));
    }

    /// Reads what every descendant's events file gained; on the first pass only notes
    /// where the files end.
    fn pass(&mut self, first: bool) {
        let mut agents: Vec<String> = std::fs::read_dir(&self.steps)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| self.follows(n))
            .collect();
        agents.sort();
        for agent in agents {
            let path = self.steps.join(&agent).join(events::FILE);
            let Ok(mut file) = std::fs::File::open(&path) else { continue };
            let tail = self.tails.entry(agent.clone()).or_default();
            if first {
                tail.offset = file.metadata().map(|m| m.len()).unwrap_or(0);
                continue;
            }
            let mut fresh = Vec::new();
            if file.seek(SeekFrom::Start(tail.offset)).is_err() || file.read_to_end(&mut fresh).is_err() {
                continue;
            }
            tail.offset += fresh.len() as u64;
            tail.partial.extend_from_slice(&fresh);
            let Some(end) = tail.partial.iter().rposition(|&b| b == b'\n') else { continue };
            let complete: Vec<u8> = tail.partial.drain(..=end).collect();
            for line in complete.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                if let Ok(event) = serde_json::from_slice::<Value>(line) {
                    let record = Line::parse(line).map(|l| l.record);
                    if let Some(record) = &record {
                        self.seen.push((agent.clone(), matches!(record, Record::End(_))));
                    }
                    self.show(&agent, &event, record);
                }
            }
        }
        self.questions(first);
    }

    fn name(&mut self, agent: &str) -> String {
        if let Some(name) = self.names.get(agent) {
            return name.clone();
        }
        let name = AgentId::parse(agent)
            .ok()
            .and_then(|id| self.ws.as_ref().and_then(|ws| agents::name_of(ws, &id)))
            .map(|n| format!("{agent} {n}"))
            .unwrap_or_else(|| agent.to_owned());
        self.names.insert(agent.to_owned(), name.clone());
        name
    }

    /// Shows one line of `agent`'s events: as it is with `--json`, else described
    /// (`record`, when it is one this version knows).
    fn show(&mut self, agent: &str, event: &Value, record: Option<Record>) {
        if let View::Json = self.view {
            // (Text as it streams is for a live display; the whole text follows.)
            if !matches!(record, Some(Record::TextDelta { .. } | Record::ThinkingDelta { .. })) {
                let _ = writeln!(std::io::stdout().lock(), "{event}");
            }
            return;
        }
        if let (View::Each(each), Some(record)) = (&self.view, &record) {
            each(agent, record);
            return;
        }
        let Some(mut what) = record.as_ref().and_then(describe) else { return };
        // One line, shown and never obeyed: whatever an agent, a model (a tool's name)
        // or a tool wrote, with its line breaks and escape sequences, stays in it.
        what.text = super::out::printable(&what.text.split_whitespace().collect::<Vec<_>>().join(" ")).into_owned();
        let name = self.name(agent);
        match self.view.clone() {
            View::Json | View::Each(_) => {}
            View::All => {
                let _ = writeln!(std::io::stdout().lock(), "  [{name}] {}", what.text);
            }
            View::Lines => {
                if what.notable {
                    let _ = writeln!(std::io::stderr().lock(), "  [{name}] {}", what.text);
                }
            }
            View::Live(multi) => {
                // A driver that ended and is woken again gets a fresh line.
                if self.bars.get(agent).is_some_and(|b| b.is_finished()) && !what.last {
                    self.bars.remove(agent);
                }
                let bar = self.bars.entry(agent.to_owned()).or_insert_with(|| {
                    let bar = multi.add(ProgressBar::new_spinner());
                    let style = ProgressStyle::with_template("{spinner} {prefix} {wide_msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner());
                    bar.set_style(style);
                    bar.set_prefix(name);
                    bar.enable_steady_tick(Duration::from_millis(120));
                    bar
                });
                if what.last {
                    // The end stays in the scrollback; the live line goes.
                    bar.finish_and_clear();
                    super::out::above(&multi, &format!("  [{}] {}", bar.prefix(), what.text));
                } else {
                    bar.set_message(what.text);
                }
            }
        }
    }

    /// Clears the lines of agents still at work when the attached driver ends.
    fn close(&mut self) {
        for bar in self.bars.values() {
            bar.finish_and_clear();
        }
    }
}

/// An event in a few words for the live line or a progress line.
struct Described {
    text: String,
    /// Worth a line of its own when there is no live display.
    notable: bool,
    /// The agent's driver ended.
    last: bool,
}

fn describe(record: &Record) -> Option<Described> {
    let line = |text: String, notable: bool| Some(Described { text, notable, last: false });
    match record {
        Record::Step { step, model, .. } => line(format!("step {step} ({model})"), false),
        Record::Text { text } => line(first_line(text), false),
        Record::ToolCall { name, input, .. } => line(format!("→ {name} {}", first_line(&call_gist(input))), true),
        Record::ToolResult { summary, .. } => line(format!("← {}", first_line(summary)), false),
        Record::Waiting { children } => {
            line(format!("waiting for {} below it", infra::words::count(*children as u64, "agent", "agents")), false)
        }
        Record::Transfer { child, files } => {
            line(format!("merged {} from `{child}`", infra::words::count(*files as u64, "file", "files")), true)
        }
        Record::Conflict { child, files } => {
            line(format!("`{child}`'s work conflicts in {}", infra::words::count(*files as u64, "file", "files")), true)
        }
        Record::AttemptFailed { error, .. } => line(format!("attempt failed: {}", first_line(error)), true),
        Record::Repaired { what } => line(what.clone(), true),
        Record::Compaction { note, .. } => line(note.clone(), true),
        // (Whole: what is approved is what is shown; `offshoot pending` shows every field.)
        Record::Asked { question, tool, input, why, .. } => line(
            format!(
                "waits for your yes: {} {} — {}; `offshoot approve {question}` or `offshoot deny {question}`",
                first_line(tool),
                super::out::literal(
                    &input.get("command").and_then(|c| c.as_str()).map_or_else(|| input.to_string(), str::to_owned)
                ),
                super::out::literal(why)
            ),
            true,
        ),
        Record::Answered { question, yes, by, .. } => {
            line(format!("{by} said {} to {question}", if *yes { "yes" } else { "no" }), true)
        }
        Record::End(end) => {
            let text = match end {
                End::FinalResponse { text, .. } => format!("answered: {}", first_line(text)),
                End::Interrupted { reason } => format!("stopped ({reason})"),
                End::BudgetExhausted { error } => format!("stopped: budget exhausted ({error})"),
                End::Busy => return None,
                End::Error { error, .. } => format!("failed: {}", first_line(error)),
            };
            Some(Described { text, notable: true, last: true })
        }
        Record::Delivered { .. }
        | Record::Settled { .. }
        | Record::Usage { .. }
        | Record::Warning { .. }
        | Record::TextDelta { .. }
        | Record::ThinkingDelta { .. } => None,
    }
}

fn first_line(text: &str) -> String {
    let flat = super::out::printable(text).split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > 80 { format!("{}…", flat.chars().take(80).collect::<String>()) } else { flat }
}
