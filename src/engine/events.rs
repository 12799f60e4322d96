//! A driver's events as JSON lines: what `--json` prints, and what every driver
//! appends to `steps/<id>/events.ndjson` so whoever is attached to an ancestor can
//! follow it (each line carries its `agent`).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::infra::provider::{Delta, Usage};

use super::directory::Repair;

/// What a driver reports as it works (the cli turns these into output).
#[derive(Debug)]
pub enum Event<'a> {
    Delivered {
        sender: &'a str,
    },
    Settled {
        tool_use_id: &'a str,
    },
    StepStarted {
        step: u32,
        provider: &'a str,
        model: &'a str,
    },
    Delta(&'a Delta),
    /// A model call ended: what it used and, at the configured price, cost.
    Usage {
        step: u32,
        usage: &'a Usage,
        cost_usd: Option<f64>,
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

/// The file a driver's events are appended to, in the agent's step records.
pub const FILE: &str = "events.ndjson";

/// `event` as one JSON object tagged with `agent`; `None` for deltas other than text.
pub fn to_json(agent: &str, event: &Event<'_>) -> Option<Value> {
    let mut v = match event {
        Event::Delta(Delta::Text(text)) if text.is_empty() => return None,
        Event::Delta(Delta::Text(text)) => json!({"type": "text", "text": text}),
        Event::Delta(_) => return None,
        Event::Delivered { sender } => json!({"type": "delivered", "from": sender}),
        Event::Settled { tool_use_id } => json!({"type": "settled", "tool_use_id": tool_use_id}),
        Event::StepStarted { step, provider, model } => {
            json!({"type": "step", "step": step, "provider": provider, "model": model})
        }
        Event::Usage { step, usage, cost_usd } => {
            json!({"type": "usage", "step": step, "usage": usage, "cost_usd": cost_usd})
        }
        Event::AttemptFailed { attempt, error, retry_in_ms } => {
            json!({"type": "attempt_failed", "attempt": attempt, "error": error, "retry_in_ms": retry_in_ms})
        }
        Event::ToolStarted { id, name, input } => {
            json!({"type": "tool_call", "tool_use_id": id, "name": name, "input": input})
        }
        Event::ToolFinished { id, name, is_error, summary } => {
            json!({"type": "tool_result", "tool_use_id": id, "name": name, "is_error": is_error, "summary": summary})
        }
        Event::Repaired(repair) => json!({"type": "repaired", "what": repaired(*repair)}),
        Event::Warning(text) => json!({"type": "warning", "text": text}),
        Event::Transferred { child, files } => json!({"type": "transfer", "child": child, "files": files}),
        Event::Conflicted { child, files } => json!({"type": "conflict", "child": child, "files": files}),
        Event::Waiting { children } => json!({"type": "waiting", "children": children}),
        Event::Compaction { compactor, outcome, note } => {
            json!({"type": "compaction", "outcome": outcome, "compactor": compactor, "note": note})
        }
    };
    v["agent"] = agent.into();
    Some(v)
}

/// What a repair did, in words.
pub fn repaired(repair: Repair) -> String {
    match repair {
        Repair::Rebuilt => "the agent's directory was missing; it was rebuilt from its branch".into(),
        Repair::DotGit => "the directory's `.git` was changed; it points at the agent's repository again".into(),
        Repair::Reattached => "its git directory was gone or unreadable; it was made again where its git stood".into(),
        Repair::HarnessFiles(n) => format!("{n} files of `.offshoot/` differed from the branch and were put back"),
    }
}

/// Passes every event on to `inner` and appends it to the agent's events file; the
/// text of a model output is written as one `text` event when the output ends (the
/// file is for following an agent, not for replaying its deltas).
pub struct Logged<'a> {
    agent: String,
    path: PathBuf,
    /// The file, opened for appending at the first event.
    file: Option<std::fs::File>,
    text: String,
    inner: &'a mut dyn Observer,
}

impl<'a> Logged<'a> {
    pub fn new(steps_dir: &Path, agent: &str, inner: &'a mut dyn Observer) -> Logged<'a> {
        Logged { agent: agent.to_owned(), path: steps_dir.join(FILE), file: None, text: String::new(), inner }
    }

    /// Appends one event (and any text gathered before it). A write that fails costs
    /// only the followers a line; the driver goes on.
    pub fn append(&mut self, value: &Value) {
        let mut lines = String::new();
        if !self.text.is_empty() {
            let text = json!({"type": "text", "text": std::mem::take(&mut self.text), "agent": self.agent});
            lines.push_str(&format!("{text}\n"));
        }
        lines.push_str(&format!("{value}\n"));
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
    pub fn end(&mut self, end: Value) {
        let mut end = end;
        end["agent"] = self.agent.as_str().into();
        self.append(&end);
    }
}

/// Ends the events file of `agent` (in `steps_dir`) with `end`, from outside its driver's
/// run (a process about to end at once records how its run ended).
pub fn log_end(steps_dir: &Path, agent: &str, end: Value) {
    struct Nobody;
    impl Observer for Nobody {
        fn event(&mut self, _: Event<'_>) {}
    }
    Logged::new(steps_dir, agent, &mut Nobody).end(end);
}

impl Observer for Logged<'_> {
    fn event(&mut self, event: Event<'_>) {
        match &event {
            Event::Delta(Delta::Text(text)) => self.text.push_str(text),
            Event::Delta(_) => {}
            other => {
                if let Some(value) = to_json(&self.agent, other) {
                    self.append(&value);
                }
            }
        }
        self.inner.event(event);
    }
}
