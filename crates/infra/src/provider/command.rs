//! An external adapter: the canonical request as JSON on its stdin; on its stdout
//! one JSON object per line, `{"type":"text","text":…}` deltas and finally
//! `{"type":"output", "content":[…], "usage":{…}, "stop":…}`. Its input is fed while
//! its output is read, silence longer than the idle limit ends it, and it is always
//! reaped.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::transport::{AttemptRecord, CallError, Observer};
use super::{Delta, Output, Request, Stop, sse};
use crate::process::{self, Ended, Group, Io, Limits, Spec};

/// Where and how the adapter program runs.
pub struct Program<'a> {
    pub argv: &'a [String],
    pub cwd: &'a Path,
    /// Its whole environment.
    pub env: &'a [(String, String)],
    /// How long its stdout may stay silent.
    pub idle: Duration,
}

/// What the adapter reads on its stdin: the canonical request as JSON.
pub fn body(req: &Request) -> Vec<u8> {
    serde_json::to_vec(req).unwrap_or_default()
}

pub fn call(program: &Program, req: &Request, observer: &mut dyn Observer) -> Result<Output, CallError> {
    let Some((name, args)) = program.argv.split_first() else {
        return Err(CallError::Other("the command provider has an empty `command`".into()));
    };
    observer.attempt_started(1);
    let started = std::time::Instant::now();
    let body = body(req);
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let spec = Spec {
        program: Path::new(name),
        args: &args,
        cwd: program.cwd,
        env: program.env,
        group: Group::Own,
        stdin: Some(&body),
        sandbox: None,
        pgid_record: None,
    };
    let limits = Limits { head: 4096, tail: 4096, record_max: 0, timeout: None, idle: Some(program.idle) };
    let mut lines = Lines { pending: Vec::new(), output: None, streamed: false, error: None };
    let mut on_stdout = |bytes: &[u8]| lines.feed(bytes, name, observer);
    let io = Io { on_stdout: Some(&mut on_stdout), ..Io::default() };
    let done = process::run(&spec, &limits, io);
    let mut record = AttemptRecord {
        attempt: 1,
        status: None,
        error: None,
        retry_after_ms: None,
        millis: started.elapsed().as_millis() as u64,
    };
    let done = match done {
        Ok(done) => done,
        Err(e) => {
            let said = e.to_string();
            record.error = Some(said.clone());
            observer.attempt_ended(&record);
            return Err(CallError::Other(said));
        }
    };
    if lines.error.is_none() && done.ended == Ended::Exited && !lines.pending.is_empty() {
        // A last line without a newline.
        let rest = std::mem::take(&mut lines.pending);
        lines.line(&rest, name, observer);
    }
    let failure = if let Some(e) = lines.error.take() {
        Some(e)
    } else if done.ended == Ended::Idle {
        Some(format!("`{name}` printed nothing for {} s and was stopped", program.idle.as_secs()))
    } else if !done.exit.success() {
        let stderr = String::from_utf8_lossy(&[done.stderr.head.as_slice(), done.stderr.tail.as_slice()].concat())
            .trim()
            .to_owned();
        Some(format!("`{name}` failed ({}): {stderr}", done.exit))
    } else {
        None
    };
    if let Some(message) = failure {
        record.error = Some(message.clone());
        observer.attempt_ended(&record);
        return Err(CallError::Other(message));
    }
    observer.attempt_ended(&record);
    let output = lines.output.ok_or_else(|| CallError::Other(format!("`{name}` printed no `output` line")))?;
    if !lines.streamed {
        // An adapter that does not stream still shows its answer.
        observer.delta(&Delta::Text(output.text()));
    }
    if output.stop == Stop::MaxTokens {
        return Err(CallError::Truncated { output_tokens: output.usage.output });
    }
    Ok(output)
}

/// Splits the adapter's stdout into lines and acts on each.
struct Lines {
    pending: Vec<u8>,
    output: Option<Output>,
    streamed: bool,
    error: Option<String>,
}

impl Lines {
    /// Takes a chunk of stdout; `false` once a line was unusable (the adapter is stopped).
    fn feed(&mut self, bytes: &[u8], program: &str, observer: &mut dyn Observer) -> bool {
        self.pending.extend_from_slice(bytes);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            self.line(&line, program, observer);
            if self.error.is_some() {
                return false;
            }
        }
        true
    }

    fn line(&mut self, raw: &[u8], program: &str, observer: &mut dyn Observer) {
        let line = String::from_utf8_lossy(raw).trim().to_owned();
        if line.is_empty() {
            return;
        }
        observer.raw(1, &sse::Event { event: "command".into(), data: line.clone() });
        let v: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                self.error = Some(format!("`{program}` printed a line that is not JSON ({e}): {line}"));
                return;
            }
        };
        match v.get("type").and_then(Value::as_str) {
            Some("text") => {
                self.streamed = true;
                observer.delta(&Delta::Text(v["text"].as_str().unwrap_or("").to_owned()));
            }
            Some("output") => match serde_json::from_value::<Output>(v) {
                Ok(output) => self.output = Some(output),
                Err(e) => self.error = Some(format!("`{program}` printed an output that does not parse: {e}")),
            },
            _ => {}
        }
    }
}
