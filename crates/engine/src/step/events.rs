//! A driver's events as JSON lines: what `--json` prints, and what every driver
//! appends to `steps/<id>/events.ndjson` so whoever is attached to an ancestor can
//! follow it (each line carries its `agent`).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use infra::provider::{Delta, Usage};

use crate::store::directory::Repair;

/// What a driver reports as it works (the cli turns these into output).
#[derive(Debug)]
pub enum Event<'a> {
    Delivered {
        sender: &'a str,
        /// The message is the sender's final response (it has ended its run).
        answer: bool,
    },
    Settled {
        tool_use_id: &'a str,
    },
    StepStarted {
        step: u32,
        provider: &'a str,
        model: &'a str,
        /// The commit its request was made from.
        commit: &'a str,
        /// What the request gives the model: its system prompt and messages (for
        /// observers that show content; the events log does not).
        system: &'a str,
        messages: &'a [infra::provider::Message],
    },
    Delta(&'a Delta),
    /// A model call ended: what it used and, at the configured price, cost.
    Usage {
        step: u32,
        usage: &'a Usage,
        cost_usd: Option<f64>,
        /// Why the model stopped.
        stop: &'a infra::provider::Stop,
        /// The model that answered, as the provider named it.
        model: Option<&'a str>,
    },
    AttemptFailed {
        attempt: u32,
        error: &'a str,
        retry_in_ms: Option<u64>,
    },
    ToolStarted {
        /// The model's id for the call (`tool_use_id`).
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    ToolFinished {
        id: &'a str,
        name: &'a str,
        is_error: bool,
        summary: &'a str,
        /// What the model is given back (its text).
        output: &'a str,
        /// What the policy made of the call.
        policy: &'a Policy,
    },
    /// The agent's directory needed mending before the driver could start.
    Repaired(Repair),
    /// Something the user should know before the agent runs commands (they run
    /// unconfined, or with less confinement than asked for on this machine).
    Warning(&'a str),
    /// A child's work was merged in before its result.
    Transferred {
        child: &'a str,
        files: usize,
    },
    /// A child's work conflicts with this agent's and was not merged.
    Conflicted {
        child: &'a str,
        files: usize,
    },
    /// Nothing is due, but children are still at work: the driver waits for them.
    Waiting {
        children: usize,
    },
    /// A compaction of this agent `started`, `landed`, or ended without landing
    /// (`declined`); `note` says what it did.
    Compaction {
        compactor: &'a str,
        outcome: &'a str,
        note: &'a str,
    },
}

pub trait Observer {
    fn event(&mut self, event: Event<'_>);
}

/// What the policy made of a tool call — the rules and the mode, the user's
/// `PreToolUse` hooks, a question's answer — for observers that show decisions (traces;
/// the call's record keeps them in full).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    /// The verdict of the rule or mode that applied (`allow`, `ask`, `deny`), the rule,
    /// and the key that holds it.
    pub rule: Option<(&'static str, String, String)>,
    /// What each `PreToolUse` hook that decided something said, and its command.
    pub hooks: Vec<(&'static str, String)>,
    /// A yes was needed, and who gave it (`None`: the answer was no).
    pub asked: Option<Option<String>>,
    /// It was refused before it ran.
    pub refused: bool,
}

impl Policy {
    /// Whether nothing of the policy bore on the call.
    pub fn is_empty(&self) -> bool {
        self.rule.is_none() && self.hooks.is_empty() && self.asked.is_none() && !self.refused
    }
}

/// The file a driver's events are appended to, in the agent's step records.
pub const FILE: &str = "events.ndjson";

/// One line of an events file, and of a run's `--json` output, as it is written, read
/// back (by whoever follows the agent, by `ls` for why a run ended) and described: one
/// type for all three.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    Text {
        text: String,
    },
    /// Text of a model output not yet ended, written to the events file as it streams
    /// (at most every [`DELTA_EVERY`]): what came since the last such line. The whole
    /// text follows as one `text` when the output ends.
    TextDelta {
        text: String,
    },
    /// Thinking of a model output not yet ended, as it streams (at most every
    /// [`DELTA_EVERY`]): what came since the last such line. The whole of it is in the
    /// step's output (the transcript), not in another line.
    ThinkingDelta {
        text: String,
    },
    Delivered {
        from: String,
    },
    Settled {
        tool_use_id: String,
    },
    Step {
        step: u32,
        provider: String,
        model: String,
    },
    Usage {
        step: u32,
        usage: Usage,
        cost_usd: Option<f64>,
    },
    AttemptFailed {
        attempt: u32,
        error: String,
        retry_in_ms: Option<u64>,
    },
    ToolCall {
        tool_use_id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        name: String,
        is_error: bool,
        summary: String,
        /// What the model was given back, at most [`OUTPUT_SHOWN`] bytes of it: its start
        /// and its end (a command's last lines say how it ended).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        output: String,
    },
    Repaired {
        what: String,
    },
    Warning {
        text: String,
    },
    Transfer {
        child: String,
        files: usize,
    },
    Conflict {
        child: String,
        files: usize,
    },
    Waiting {
        children: usize,
    },
    Compaction {
        outcome: String,
        compactor: String,
        note: String,
    },
    /// A call waits for a person's yes (the question is in the queue, `offshoot
    /// pending`): the first agent to ask it, and every one waiting on it.
    Asked {
        question: String,
        tool: String,
        input: Value,
        why: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        escalation: Option<String>,
        waiters: Vec<String>,
    },
    /// The question was answered.
    Answered {
        question: String,
        yes: bool,
        by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A run's end: the last line of it.
    End(End),
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum End {
    FinalResponse {
        text: String,
        /// The model declined: `text` is its refusal (ACP's `refusal` stop).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        refused: bool,
    },
    /// Another driver held the agent.
    Busy,
    BudgetExhausted {
        error: String,
    },
    /// Stopped: `reason` in the words a stop is said in.
    Interrupted {
        reason: String,
    },
    Error {
        error: String,
        /// The model's answer was cut off at its output limit (ACP's `max_tokens`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cut_off: bool,
    },
}

/// A record with the agent it is of: what one line holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    #[serde(flatten)]
    pub record: Record,
    pub agent: String,
}

impl Line {
    /// The line as JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// A line of an events file, if it is one.
    pub fn parse(text: &[u8]) -> Option<Line> {
        serde_json::from_slice(text).ok()
    }
}

/// `event` as a record; `None` for deltas other than text.
pub(crate) fn record(event: &Event<'_>) -> Option<Record> {
    let owned = |s: &str| s.to_owned();
    Some(match event {
        Event::Delta(Delta::Text(text)) if text.is_empty() => return None,
        Event::Delta(Delta::Text(text)) => Record::Text { text: text.clone() },
        Event::Delta(_) => return None,
        Event::Delivered { sender, .. } => Record::Delivered { from: owned(sender) },
        Event::Settled { tool_use_id } => Record::Settled { tool_use_id: owned(tool_use_id) },
        Event::StepStarted { step, provider, model, .. } => {
            Record::Step { step: *step, provider: owned(provider), model: owned(model) }
        }
        Event::Usage { step, usage, cost_usd, .. } => {
            Record::Usage { step: *step, usage: (*usage).clone(), cost_usd: cost_usd.map(domain::budget::usd) }
        }
        Event::AttemptFailed { attempt, error, retry_in_ms } => {
            Record::AttemptFailed { attempt: *attempt, error: owned(error), retry_in_ms: *retry_in_ms }
        }
        Event::ToolStarted { id, name, input } => {
            Record::ToolCall { tool_use_id: owned(id), name: owned(name), input: (*input).clone() }
        }
        Event::ToolFinished { id, name, is_error, summary, output, .. } => Record::ToolResult {
            tool_use_id: owned(id),
            name: owned(name),
            is_error: *is_error,
            summary: owned(summary),
            output: shown(output),
        },
        Event::Repaired(repair) => Record::Repaired { what: repaired(*repair) },
        Event::Warning(text) => Record::Warning { text: owned(text) },
        Event::Transferred { child, files } => Record::Transfer { child: owned(child), files: *files },
        Event::Conflicted { child, files } => Record::Conflict { child: owned(child), files: *files },
        Event::Waiting { children } => Record::Waiting { children: *children },
        Event::Compaction { compactor, outcome, note } => {
            Record::Compaction { outcome: owned(outcome), compactor: owned(compactor), note: owned(note) }
        }
    })
}

/// How much of a tool's output its `tool_result` record carries.
pub const OUTPUT_SHOWN: usize = 8 * 1024;

/// `output` as a record carries it: whole when short, else its first and last halves of
/// [`OUTPUT_SHOWN`] around a line saying how much was left out.
fn shown(output: &str) -> String {
    if output.len() <= OUTPUT_SHOWN {
        return output.to_owned();
    }
    let half = OUTPUT_SHOWN / 2;
    let head = output.floor_char_boundary(half);
    let tail = output.ceil_char_boundary(output.len() - half);
    format!("{}\n[… {} bytes left out …]\n{}", &output[..head], tail - head, &output[tail..])
}

/// `event` as one JSON object tagged with `agent`; `None` for deltas other than text.
pub fn to_json(agent: &str, event: &Event<'_>) -> Option<Value> {
    record(event).map(|record| Line { record, agent: agent.to_owned() }.to_value())
}

/// What a repair did, in words.
pub fn repaired(repair: Repair) -> String {
    match repair {
        Repair::Rebuilt => "the agent's directory was missing; it was rebuilt from its branch".into(),
        Repair::DotGit => "the directory's `.git` was changed; it points at the agent's repository again".into(),
        Repair::Reattached => "its git directory was gone or unreadable; it was made again where its git stood".into(),
        Repair::HarnessFiles(n) => format!("{n} files of `.offshoot/` differed from the branch and were put back"),
        Repair::Warmed(w) => format!(
            "{} ignored paths of your checkout were copied in ({} files, {:.1} MiB, {} shared with the originals); {} files took your checkout's times",
            w.paths,
            w.copied.files,
            w.copied.bytes as f64 / 1_048_576.0,
            w.copied.cloned,
            w.timed
        ),
        Repair::NotWarmed => {
            "copying ignored paths of your checkout in failed; the agent starts without the rest".into()
        }
    }
}

/// How often, at most, text still streaming is written to the events file.
pub(crate) const DELTA_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// Passes every event on to `inner` and appends it to the agent's events file; the
/// text of a model output is written as it streams, in `text_delta` lines at most every
/// [`DELTA_EVERY`] (one write per line, however many deltas the provider sent), and
/// whole as one `text` event when the output ends; its thinking, in `thinking_delta`
/// lines as often.
pub(crate) struct Logged<'a> {
    agent: String,
    path: PathBuf,
    /// The file, opened for appending at the first event.
    file: Option<std::fs::File>,
    text: String,
    /// How much of `text` its `text_delta` lines carry, and when the last was written.
    streamed: usize,
    streamed_at: Option<std::time::Instant>,
    /// Thinking not yet written, and when the last `thinking_delta` was.
    thinking: String,
    thought_at: Option<std::time::Instant>,
    inner: &'a mut dyn Observer,
}

impl<'a> Logged<'a> {
    pub fn new(steps_dir: &Path, agent: &str, inner: &'a mut dyn Observer) -> Logged<'a> {
        Logged {
            agent: agent.to_owned(),
            path: steps_dir.join(FILE),
            file: None,
            text: String::new(),
            streamed: 0,
            streamed_at: None,
            thinking: String::new(),
            thought_at: None,
            inner,
        }
    }

    /// Thinking came: a `thinking_delta` line of what is new, unless one was written
    /// within [`DELTA_EVERY`].
    fn think(&mut self, text: &str) {
        self.thinking.push_str(text);
        if self.thought_at.is_none_or(|at| at.elapsed() >= DELTA_EVERY) {
            self.write_thinking();
        }
    }

    /// The thinking not yet written, as one `thinking_delta` line.
    fn write_thinking(&mut self) {
        if self.thinking.is_empty() {
            return;
        }
        self.thought_at = Some(std::time::Instant::now());
        let text = std::mem::take(&mut self.thinking);
        let line = Line { record: Record::ThinkingDelta { text }, agent: self.agent.clone() };
        self.write(&format!("{}\n", line.to_value()));
    }

    /// Text came: a `text_delta` line of what is new, unless one was written within
    /// [`DELTA_EVERY`].
    fn stream(&mut self, text: &str) {
        // (What the model thought before it spoke comes first.)
        self.write_thinking();
        self.text.push_str(text);
        if self.streamed_at.is_some_and(|at| at.elapsed() < DELTA_EVERY) {
            return;
        }
        let fresh = self.text[self.streamed..].to_owned();
        self.streamed = self.text.len();
        self.streamed_at = Some(std::time::Instant::now());
        let line = Line { record: Record::TextDelta { text: fresh }, agent: self.agent.clone() };
        self.write(&format!("{}\n", line.to_value()));
    }

    /// Appends one event (and any text gathered before it). A write that fails costs
    /// only the followers a line; the driver goes on.
    pub(crate) fn append(&mut self, value: &Value) {
        self.write_thinking();
        self.thought_at = None;
        let mut lines = String::new();
        if !self.text.is_empty() {
            let text =
                Line { record: Record::Text { text: std::mem::take(&mut self.text) }, agent: self.agent.clone() };
            lines.push_str(&format!("{}\n", text.to_value()));
        }
        (self.streamed, self.streamed_at) = (0, None);
        lines.push_str(&format!("{value}\n"));
        self.write(&lines);
    }

    fn write(&mut self, lines: &str) {
        if self.file.is_none() {
            if let Some(dir) = self.path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            self.file = std::fs::OpenOptions::new().create(true).append(true).open(&self.path).ok();
        }
        // One write per batch of lines: appends from one driver never interleave.
        if let Some(file) = &mut self.file {
            let _ = file.write_all(lines.as_bytes());
        }
    }

    /// Ends the log of this run with `end`.
    pub(crate) fn end(&mut self, end: End) {
        let line = Line { record: Record::End(end), agent: self.agent.clone() };
        self.append(&line.to_value());
    }
}

/// Ends the events file of `agent` (in `steps_dir`) with `end`, from outside its driver's
/// run (a process about to end at once records how its run ended).
pub(crate) fn log_end(steps_dir: &Path, agent: &str, end: End) {
    struct Nobody;
    impl Observer for Nobody {
        fn event(&mut self, _: Event<'_>) {}
    }
    Logged::new(steps_dir, agent, &mut Nobody).end(end);
}

impl Observer for Logged<'_> {
    fn event(&mut self, event: Event<'_>) {
        match &event {
            Event::Delta(Delta::Text(text)) => self.stream(text),
            Event::Delta(Delta::Thinking(text)) => self.think(text),
            Event::Delta(_) => {}
            // The attempt's text is not an answer: the next attempt streams its own.
            Event::AttemptFailed { .. } => {
                self.text.clear();
                self.thinking.clear();
                if let Some(value) = to_json(&self.agent, &event) {
                    self.append(&value);
                }
            }
            other => {
                if let Some(value) = to_json(&self.agent, other) {
                    self.append(&value);
                }
            }
        }
        self.inner.event(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_streams_as_deltas_and_a_failed_attempts_text_is_never_logged_as_an_answer() {
        struct Nobody;
        impl Observer for Nobody {
            fn event(&mut self, _: Event<'_>) {}
        }
        let dir = std::env::temp_dir().join(format!("offshoot-events-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut nobody = Nobody;
        let mut logged = Logged::new(&dir, "a", &mut nobody);
        logged.event(Event::StepStarted { step: 1, provider: "p", model: "m", commit: "c", system: "", messages: &[] });
        logged.event(Event::Delta(&Delta::Text("half an ans".into())));
        logged.event(Event::AttemptFailed { attempt: 1, error: "reset", retry_in_ms: Some(10) });
        for piece in ["The ", "answer."] {
            logged.event(Event::Delta(&Delta::Text(piece.into())));
        }
        logged.end(End::FinalResponse { text: "The answer.".into(), refused: false });
        let text = std::fs::read_to_string(dir.join(FILE)).expect("events");
        let records: Vec<Record> = text.lines().filter_map(|l| Line::parse(l.as_bytes())).map(|l| l.record).collect();
        let texts: Vec<&str> = records
            .iter()
            .filter_map(|r| match r {
                Record::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["The answer."], "{text}");
        // The first piece of each attempt is written at once (later ones within 50 ms wait
        // for the whole).
        let deltas: Vec<&str> = records
            .iter()
            .filter_map(|r| match r {
                Record::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, ["half an ans", "The "], "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn thinking_streams_as_deltas_before_the_text_it_led_to() {
        struct Nobody;
        impl Observer for Nobody {
            fn event(&mut self, _: Event<'_>) {}
        }
        let dir = std::env::temp_dir().join(format!("offshoot-thinking-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut nobody = Nobody;
        let mut logged = Logged::new(&dir, "a", &mut nobody);
        logged.event(Event::StepStarted { step: 1, provider: "p", model: "m", commit: "c", system: "", messages: &[] });
        for piece in ["Which ", "file?"] {
            logged.event(Event::Delta(&Delta::Thinking(piece.into())));
        }
        logged.event(Event::Delta(&Delta::Text("lib.rs".into())));
        logged.end(End::FinalResponse { text: "lib.rs".into(), refused: false });
        let text = std::fs::read_to_string(dir.join(FILE)).expect("events");
        let kinds: Vec<(&str, String)> = text
            .lines()
            .filter_map(|l| Line::parse(l.as_bytes()))
            .filter_map(|l| match l.record {
                Record::ThinkingDelta { text } => Some(("thinking", text)),
                Record::TextDelta { text } => Some(("text", text)),
                _ => None,
            })
            .collect();
        // The first piece at once, the rest (within 50 ms) when the text begins.
        let want = [("thinking", "Which ".to_owned()), ("thinking", "file?".to_owned()), ("text", "lib.rs".to_owned())];
        assert_eq!(kinds, want, "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_long_output_keeps_its_start_and_its_end_on_character_boundaries() {
        assert_eq!(shown("short"), "short");
        let long = format!("first line\n{}\nexit: the last line", "é".repeat(6_000));
        let kept = shown(&long);
        assert!(kept.len() < OUTPUT_SHOWN + 64, "{}", kept.len());
        assert!(kept.starts_with("first line\n") && kept.ends_with("\nexit: the last line"));
        // (What is left out, and what is kept, are the whole.)
        let gone: usize = kept.split("[… ").nth(1).and_then(|r| r.split(' ').next()?.parse().ok()).expect("a count");
        let marker = format!("\n[… {gone} bytes left out …]\n");
        assert_eq!(kept.len() - marker.len() + gone, long.len());
    }

    #[test]
    fn a_line_reads_back_as_it_was_written_with_its_type_first_and_its_agent_last() {
        let usage = Usage { input: Some(100), output: Some(20), ..Usage::default() };
        let input = serde_json::json!({"command": "ls"});
        let events = [
            Event::StepStarted { step: 2, provider: "anthropic", model: "m", commit: "c", system: "s", messages: &[] },
            Event::Usage {
                step: 2,
                usage: &usage,
                cost_usd: Some(0.5),
                stop: &infra::provider::Stop::EndTurn,
                model: Some("m-1"),
            },
            Event::ToolStarted { id: "t1", name: "bash", input: &input },
            Event::ToolFinished {
                id: "t1",
                name: "bash",
                is_error: false,
                summary: "exit code 0",
                output: "ok",
                policy: &Policy::default(),
            },
            Event::Waiting { children: 3 },
            Event::Compaction { compactor: "k7q2mx.1", outcome: "landed", note: "n" },
        ];
        for event in &events {
            let value = to_json("k7q2mx", event).expect("a line");
            let text = value.to_string();
            let line = Line::parse(text.as_bytes()).expect("parses");
            assert_eq!(line.record, record(event).expect("record"));
            assert!(text.starts_with("{\"type\":") && text.ends_with(",\"agent\":\"k7q2mx\"}"), "{text}");
        }
        let end = Line { record: Record::End(End::Interrupted { reason: "stopped".into() }), agent: "a".into() };
        let text = end.to_value().to_string();
        assert_eq!(text, r#"{"type":"end","outcome":"interrupted","reason":"stopped","agent":"a"}"#);
        assert_eq!(Line::parse(text.as_bytes()), Some(end));
        // A line of a type this version does not know is not a record (a follower skips it).
        assert_eq!(Line::parse(br#"{"type":"novel","agent":"a"}"#), None);
    }
}
