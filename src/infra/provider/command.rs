//! An external adapter: the canonical request as JSON on its stdin; on its stdout
//! one JSON object per line, `{"type":"text","text":…}` deltas and finally
//! `{"type":"output", "content":[…], "usage":{…}, "stop":…}`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::transport::{AttemptRecord, CallError, Observer};
use super::{Delta, Output, Request, Stop, sse};

pub fn call(argv: &[String], req: &Request, observer: &mut dyn Observer) -> Result<Output, CallError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(CallError::Other("the command provider has an empty `command`".into()));
    };
    observer.attempt_started(1);
    let started = std::time::Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CallError::Other(format!("cannot start `{program}`: {e}")))?;
    let body = serde_json::to_vec(req).map_err(|e| CallError::Other(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A program that exits without reading its input is reported by its exit status.
        let _ = stdin.write_all(&body);
    }
    let mut output = None;
    let mut streamed = false;
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|e| CallError::Other(format!("reading `{program}`: {e}")))?;
            if line.trim().is_empty() {
                continue;
            }
            observer.raw(1, &sse::Event { event: "command".into(), data: line.clone() });
            let v: Value = serde_json::from_str(&line)
                .map_err(|e| CallError::Other(format!("`{program}` printed a line that is not JSON ({e}): {line}")))?;
            match v.get("type").and_then(Value::as_str) {
                Some("text") => {
                    streamed = true;
                    observer.delta(&Delta::Text(v["text"].as_str().unwrap_or("").to_owned()));
                }
                Some("output") => {
                    output = Some(serde_json::from_value::<Output>(v).map_err(|e| {
                        CallError::Other(format!("`{program}` printed an output that does not parse: {e}"))
                    })?);
                }
                _ => {}
            }
        }
    }
    let result = child.wait_with_output().map_err(|e| CallError::Other(format!("waiting for `{program}`: {e}")))?;
    let mut record = AttemptRecord {
        attempt: 1,
        status: None,
        error: None,
        retry_after_ms: None,
        millis: started.elapsed().as_millis() as u64,
    };
    if !result.status.success() {
        let stderr = String::from_utf8_lossy(&result.stderr).trim().to_owned();
        record.error = Some(format!("{} {stderr}", result.status));
        observer.attempt_ended(&record);
        return Err(CallError::Other(format!("`{program}` failed ({}): {stderr}", result.status)));
    }
    observer.attempt_ended(&record);
    let output = output.ok_or_else(|| CallError::Other(format!("`{program}` printed no `output` line")))?;
    if !streamed {
        // An adapter that does not stream still shows its answer.
        observer.delta(&Delta::Text(output.text()));
    }
    if output.stop == Stop::MaxTokens {
        return Err(CallError::Truncated { output_tokens: output.usage.output });
    }
    Ok(output)
}
