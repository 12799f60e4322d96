//! All output goes through `Out`: stdout is the product (answers, ids, JSON events),
//! stderr carries progress, warnings and errors.

use std::cell::Cell;
use std::io::{IsTerminal, Write};

use serde_json::Value;

use super::error::CliError;

pub struct Out {
    pub json: bool,
    color: bool,
    /// Whether stdout is in the middle of a streamed line.
    open_line: Cell<bool>,
}

impl Out {
    pub fn new(json: bool, no_color: bool) -> Out {
        Out { json, color: !no_color && std::io::stderr().is_terminal(), open_line: Cell::new(false) }
    }

    /// Part of the answer, as it streams.
    pub fn stream(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
        if !text.is_empty() {
            self.open_line.set(!text.ends_with('\n'));
        }
    }

    /// Ends a streamed answer with a newline if it lacks one.
    pub fn end_stream(&self) {
        if self.open_line.replace(false) {
            let _ = writeln!(std::io::stdout());
        }
    }

    /// One line of product on stdout.
    pub fn line(&self, text: &str) {
        self.end_stream();
        let _ = writeln!(std::io::stdout(), "{text}");
    }

    /// One JSON event on stdout.
    pub fn event(&self, value: &Value) {
        let _ = writeln!(std::io::stdout(), "{value}");
    }

    /// One line of progress on stderr.
    pub fn progress(&self, text: &str) {
        self.end_stream();
        let text = if self.color { format!("\x1b[2m{text}\x1b[0m") } else { text.to_owned() };
        let _ = writeln!(std::io::stderr(), "{text}");
    }

    /// One line for the user from any thread (a signal's watcher), on stderr; with
    /// `--json`, `event` on stdout instead.
    pub fn from_any_thread(json: bool, line: &str, event: &Value) {
        if json {
            let _ = writeln!(std::io::stdout(), "{event}");
        } else {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }

    pub fn error(&self, e: &CliError) {
        self.end_stream();
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "error: {}", e.message);
        for hint in &e.hints {
            let _ = writeln!(err, "hint: {hint}");
        }
    }
}
