//! All output goes through `Out`: stdout is the product (answers, ids, JSON events),
//! stderr carries progress, warnings and errors.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::io::{IsTerminal, Write};

use indicatif::MultiProgress;

use serde_json::Value;

use super::error::CliError;

/// `text` safe to show on a terminal: control characters other than newline and tab
/// (an ANSI escape in a goal, say) are written out as `\x1b`, never sent as they are.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `text` whole, on one line, as a person must see what they approve: a JSON string
/// (quotes, line breaks and control characters escaped), with the characters that
/// reorder or hide text (bidirectional controls, zero-width ones) written `\u{…}`.
pub(crate) fn literal(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    let hides = |c: char| {
        matches!(c, '\u{00ad}' | '\u{061c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}')
    };
    quoted
        .chars()
        .map(|c| if hides(c) || c.is_control() { format!("\\u{{{:04x}}}", c as u32) } else { c.to_string() })
        .collect()
}

pub(crate) struct Out {
    pub(crate) json: bool,
    color: bool,
    /// Whether stdout is in the middle of a streamed line.
    open_line: Cell<bool>,
    /// The live display of the agents below an attached one, while it is shown:
    /// progress lines go above it and stdout waits while it is drawn.
    live: RefCell<Option<MultiProgress>>,
    /// Streamed text not yet written (the end of a line, under a live display).
    held: RefCell<String>,
    /// Narration not yet written (the end of a line).
    narrated: RefCell<String>,
    /// Whether the command's `end` event is out (see `ended`).
    ended: Cell<bool>,
}

impl Out {
    pub(crate) fn new(json: bool, no_color: bool) -> Out {
        Out {
            json,
            color: !no_color && std::io::stderr().is_terminal(),
            open_line: Cell::new(false),
            live: RefCell::new(None),
            held: RefCell::new(String::new()),
            narrated: RefCell::new(String::new()),
            ended: Cell::new(false),
        }
    }

    /// Starts a live display on stderr, when stderr is a terminal and output is not JSON.
    pub(crate) fn start_live(&self) -> Option<MultiProgress> {
        if self.json || !std::io::stderr().is_terminal() {
            return None;
        }
        let multi = MultiProgress::new();
        *self.live.borrow_mut() = Some(multi.clone());
        Some(multi)
    }

    /// Ends the live display (its finished lines stay on the screen), after any
    /// streamed text it held back.
    pub(crate) fn end_live(&self) {
        self.end_stream();
        self.live.borrow_mut().take();
    }

    /// Runs `write` with the live display out of the way when both go to the terminal.
    fn around_live(&self, write: impl FnOnce()) {
        match self.live.borrow().as_ref() {
            Some(multi) if std::io::stdout().is_terminal() => multi.suspend(write),
            _ => write(),
        }
    }

    /// Part of the answer, as it streams. Under a live display on the same terminal
    /// it goes out a whole line at a time (a partial line would carry the display).
    pub(crate) fn stream(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        // Shown on a terminal, never obeyed there; into a file or a pipe, as it is (a
        // patch of a CRLF file must keep its CRs).
        let shown = if std::io::stdout().is_terminal() { printable(text) } else { std::borrow::Cow::Borrowed(text) };
        let text = &*shown;
        let write = |bytes: &str| {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(bytes.as_bytes());
            let _ = out.flush();
        };
        if self.shares_terminal() {
            let mut held = self.held.borrow_mut();
            held.push_str(text);
            if let Some(end) = held.rfind('\n') {
                let lines: String = held.drain(..=end).collect();
                self.around_live(|| write(&lines));
            }
        } else {
            write(text);
        }
        self.open_line.set(!text.ends_with('\n'));
    }

    /// A model's text as it streams. On a terminal it is the answer, streamed on
    /// stdout; otherwise stdout is kept for the final answer alone ([`Out::answer`]) and
    /// the text is narration, a whole line at a time on stderr.
    pub(crate) fn narrate(&self, text: &str) {
        if std::io::stdout().is_terminal() {
            return self.stream(text);
        }
        let lines = {
            let mut held = self.narrated.borrow_mut();
            held.push_str(text);
            match held.rfind('\n') {
                Some(end) => held.drain(..=end).collect::<String>(),
                None => return,
            }
        };
        self.narration(&lines);
    }

    /// Lines of narration on stderr, above a live display if one is shown.
    fn narration(&self, lines: &str) {
        for line in printable(lines).lines() {
            match self.live.borrow().as_ref() {
                Some(multi) => above(multi, line),
                None => {
                    let _ = writeln!(std::io::stderr(), "{line}");
                }
            }
        }
    }

    /// A run's final answer: on stdout when it was not streamed there (stdout is not a
    /// terminal), so `offshoot prompt … > answer.txt` captures it and nothing else.
    pub(crate) fn answer(&self, text: &str) {
        self.end_narration();
        if self.json || std::io::stdout().is_terminal() || text.trim().is_empty() {
            return;
        }
        // (Not a terminal: the answer as the model wrote it, for the script to use.)
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", text.trim_end_matches('\n'));
    }

    /// Ends narration with what is left of its last line.
    fn end_narration(&self) {
        let rest = std::mem::take(&mut *self.narrated.borrow_mut());
        if !rest.is_empty() {
            self.narration(&rest);
        }
    }

    /// One line of product on stdout in the terminal's style `code` (an SGR parameter:
    /// `1` bold, `31` red…): the style is the verb's own, the line's text is shown as
    /// text (an escape sequence in it is written out, never sent).
    pub(crate) fn styled_line(&self, code: &str, line: &str) {
        let text = printable(line);
        self.end_stream();
        self.around_live(|| {
            let _ = writeln!(std::io::stdout(), "\x1b[{code}m{text}\x1b[0m");
        });
    }

    /// Ends a streamed answer with a newline if it lacks one.
    pub(crate) fn end_stream(&self) {
        self.end_narration();
        let held = std::mem::take(&mut *self.held.borrow_mut());
        if self.open_line.replace(false) {
            self.around_live(|| {
                let _ = writeln!(std::io::stdout(), "{held}");
            });
        }
    }

    /// Whether a live display and stdout share the terminal.
    fn shares_terminal(&self) -> bool {
        self.live.borrow().is_some() && std::io::stdout().is_terminal()
    }

    /// One line of product on stdout.
    pub(crate) fn line(&self, text: &str) {
        let text = printable(text);
        self.end_stream();
        self.around_live(|| {
            let _ = writeln!(std::io::stdout(), "{text}");
        });
    }

    /// One JSON event on stdout.
    pub(crate) fn event(&self, value: &Value) {
        let _ = writeln!(std::io::stdout().lock(), "{value}");
    }

    /// Marks that the command's closing JSON (its `end` event) is out: an error after
    /// it adds no `error` object.
    pub(crate) fn ended(&self) {
        self.ended.set(true);
    }

    /// How many columns a line of progress may take: the terminal's width when stderr is
    /// one (a line cut to it never wraps), else 100. The terminal is asked only when
    /// there is one: off a terminal, crossterm falls back to running `tput` twice, each
    /// a walk of `PATH` — four processes a step for every headless run.
    pub(crate) fn width(&self) -> usize {
        if !std::io::stderr().is_terminal() {
            return 100;
        }
        match ratatui::crossterm::terminal::size() {
            Ok((cols, _)) => usize::from(cols).max(20),
            _ => 100,
        }
    }

    /// One line of progress on stderr.
    pub(crate) fn progress(&self, text: &str) {
        self.end_stream();
        let text = printable(text);
        let text = if self.color { format!("\x1b[2m{text}\x1b[0m") } else { text.into_owned() };
        match self.live.borrow().as_ref() {
            Some(multi) => above(multi, &text),
            None => {
                let _ = writeln!(std::io::stderr(), "{text}");
            }
        }
    }

    /// A note about a run for the user (what was left out of it, why nothing happened):
    /// a progress line, or with `--json` a `note` event, so a script sees every note a
    /// person would.
    pub(crate) fn note(&self, agent: Option<&str>, text: &str) {
        if self.json {
            self.event(&serde_json::json!({"type": "note", "agent": agent, "text": text}));
        } else {
            self.progress(&format!("· {text}"));
        }
    }

    /// One line for the user from any thread (a signal's watcher), on stderr; with
    /// `--json`, `event` on stdout instead.
    pub(crate) fn from_any_thread(json: bool, line: &str, event: &Value) {
        if json {
            let _ = writeln!(std::io::stdout().lock(), "{event}");
        } else {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }

    /// Says what failed on stderr; with `--json` also as the last object on stdout: an
    /// `end` event for a command that runs an agent (`runs`), else an `error` object.
    pub(crate) fn error(&self, e: &CliError, runs: bool) {
        self.end_live();
        self.end_stream();
        let causes = e.causes();
        if self.json && !self.ended.get() {
            let mut v = serde_json::json!({"type": "error", "error": e.message(), "hints": e.hints,
                "exit_code": e.exit_code()});
            if !causes.is_empty() {
                v["causes"] = causes.clone().into();
            }
            if runs {
                v["type"] = "end".into();
                v["outcome"] = "error".into();
                v["agent"] = Value::Null;
            }
            self.event(&v);
        }
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "error: {}", printable(&e.message()));
        for cause in &causes {
            let _ = writeln!(err, "caused by: {}", printable(cause));
        }
        for hint in &e.hints {
            let _ = writeln!(err, "hint: {}", printable(hint));
        }
    }
}

/// A line on stderr above the live display: the display is taken away, the line written
/// with its line break, the display drawn again. (indicatif's own `println` pads a line
/// to the terminal's width and ends it with no line break, leaning on the terminal's
/// wrapping: a log of the terminal, or a copy of its text, glued the lines together.)
pub(crate) fn above(multi: &MultiProgress, line: &str) {
    multi.suspend(|| {
        let _ = writeln!(std::io::stderr(), "{line}");
    });
}

/// The argument that says most about a call (its command, pattern, path or name),
/// else the whole input.
pub(crate) fn call_gist(input: &serde_json::Value) -> String {
    ["command", "pattern", "path", "name"]
        .iter()
        .find_map(|k| input.get(*k).and_then(|v| v.as_str()))
        .map(str::to_owned)
        .unwrap_or_else(|| input.to_string())
}

/// A transcript entry as `log --json` prints it (and `serve` answers it).
pub(crate) fn entry_json(entry: &domain::transcript::Entry) -> serde_json::Value {
    use domain::transcript::Entry;
    use serde_json::json;
    match entry {
        Entry::Message { number, sender, text } => json!({"n": number, "side": "user", "from": sender, "text": text}),
        Entry::Output { number, model, output } => {
            json!({"n": number, "side": "assistant", "model": model, "output": output})
        }
        Entry::ToolResult { number, block } => json!({"n": number, "side": "tool", "result": block}),
    }
}

/// A landed compaction as `show --compaction N --json` prints it (and `serve` answers it).
pub(crate) fn compaction_json(landed: &engine::step::compaction::Landed) -> serde_json::Value {
    serde_json::json!({"compaction": landed.landing.number, "compactor": landed.landing.compactor,
        "commit": landed.commit.to_string(), "removed": landed.removed,
        "summary_path": landed.landing.summary, "summary": landed.summary})
}
