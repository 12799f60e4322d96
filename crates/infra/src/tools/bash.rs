//! `bash`: one non-interactive `sh -c` in its own process group, with the
//! environment and sandbox the harness gives it, killed on timeout. Its output is
//! recorded in full beside the call's record; only the head and tail are kept.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::{Cut, Stream, ToolEnv, ToolError, ToolOutput, str_arg, u64_arg};
use crate::process::{self, Ended, Exit, Finished, Group, Io, Kept, Limits, Spec};
use crate::redact::Redacting;
use crate::sandbox::Jail;

const DEFAULT_TIMEOUT_SECS: u64 = 120;

pub(super) fn run(env: &ToolEnv, input: &Value) -> Result<ToolOutput, ToolError> {
    let command = str_arg(input, "command")?;
    let timeout = Duration::from_secs(u64_arg(input, "timeout_secs")?.unwrap_or(DEFAULT_TIMEOUT_SECS).clamp(1, 3600));
    if !env.cwd.is_dir() {
        return Err(ToolError::ToModel(format!("the working directory {} does not exist", env.cwd.display())));
    }
    let commands = &env.commands;
    let fatal =
        |what: &str, path: &Path, e: std::io::Error| ToolError::Fatal(format!("cannot {what} {}: {e}", path.display()));
    let create = |name: &str| -> Result<Option<File>, ToolError> {
        let Some(record) = &env.record else { return Ok(None) };
        let path = record.dir.join(name);
        File::create(&path).map(Some).map_err(|e| fatal("create", &path, e))
    };
    let pgid = create("pgid")?;
    let spill = |name: &str| env.record.as_ref().map(|r| Spill::new(r.dir.join(name)));
    let redactor = commands.redactor.clone().unwrap_or_default();
    let mut stdout_sink = spill("stdout").map(|f| Redacting::new(f, &redactor));
    let mut stderr_sink = spill("stderr").map(|f| Redacting::new(f, &redactor));
    // POSIX puts sh at /bin/sh; naming it saves searching PATH on every call.
    let args = [OsStr::new("-c"), OsStr::new(command)];
    let spec = Spec {
        program: Path::new("/bin/sh"),
        args: &args,
        cwd: &env.cwd,
        env: &commands.env,
        group: Group::Own,
        stdin: None,
        sandbox: commands.sandbox.as_deref().map(|j| j.helper_lending(commands.network_lent)),
        pgid_record: pgid.as_ref(),
    };
    let limits = Limits {
        head: commands.head_bytes,
        tail: commands.tail_bytes,
        record_max: commands.record_max_bytes,
        timeout: Some(timeout),
        idle: None,
    };
    let on_spawn = commands.on_spawn.clone();
    let on_spawn = |pgid: u32| {
        if let Some(f) = &on_spawn {
            f(pgid);
        }
    };
    let io = Io {
        on_spawn: Some(&on_spawn),
        on_stdout: None,
        stdout_record: stdout_sink.as_mut().map(|w| w as &mut dyn std::io::Write),
        stderr_record: stderr_sink.as_mut().map(|w| w as &mut dyn std::io::Write),
    };
    let done = process::run(&spec, &limits, io).map_err(|e| ToolError::Fatal(e.to_string()))?;
    // The group on record is for a crash during the call; it has ended with it (a
    // step's record keeps one file fewer).
    if let (Some(record), Some(file)) = (&env.record, pgid) {
        drop(file);
        let _ = std::fs::remove_file(record.dir.join("pgid"));
    }
    // A stream kept whole in memory needs no record file; a cut one gets its file.
    for (sink, kept) in [(stdout_sink, &done.stdout), (stderr_sink, &done.stderr)] {
        if let Some(sink) = sink {
            let spill = sink.finish().map_err(|e| ToolError::Fatal(format!("cannot write the output record: {e}")))?;
            spill
                .finish(!kept.is_whole())
                .map_err(|e| ToolError::Fatal(format!("cannot write the output record: {e}")))?;
        }
    }
    let mut summary = match (done.ended, done.exit) {
        (Ended::TimedOut, _) => {
            format!("timed out after {} s; the command and its processes were killed", timeout.as_secs())
        }
        (_, Exit::Code(code)) => format!("exit code {code}"),
        (_, Exit::Signal(signal)) => format!("killed by signal {signal}"),
    };
    if done.lingering {
        summary.push_str(
            "; a process that left the command's process group still held its output open, so output after the command ended may be missing",
        );
    }
    if let Some(jail) = commands.sandbox.as_deref() {
        summary.push_str(&limits_met(jail, &done));
    }
    let stream = |name: &'static str, kept: &Kept| {
        let record = env.record.as_ref().map(|r| format!("{}/{name}", r.shown));
        stream(name, kept, record, &redactor)
    };
    Ok(ToolOutput {
        summary,
        streams: vec![stream("stdout", &done.stdout), stream("stderr", &done.stderr)],
        is_error: done.ended == Ended::TimedOut || !done.exit.success(),
        ..ToolOutput::default()
    })
}

/// What the summary says when the command seems to have met a limit of its sandbox
/// (the kernel refuses a fork with EAGAIN, and stops a writer past the file size
/// with SIGXFSZ): the limit, by name.
fn limits_met(jail: &Jail, done: &Finished) -> String {
    let err = String::from_utf8_lossy(&done.stderr.head) + String::from_utf8_lossy(&done.stderr.tail);
    let mut said = String::new();
    let fork_refused = ["Cannot fork", "fork: retry", "fork: Resource temporarily unavailable", "can't fork"];
    if fork_refused.iter().any(|f| err.contains(f)) {
        // A PID namespace holds no fewer than 300 (the kernel's floor for pid_max).
        let floor =
            if jail.namespaces && jail.processes < 300 { " (no fewer than 300 in a PID namespace)" } else { "" };
        said.push_str(&format!(
            "; a process could not start: commands may run at most {} processes at once (`max_processes`){floor}",
            jail.processes
        ));
    }
    let xfsz = libc::SIGXFSZ;
    let stopped = done.exit == Exit::Signal(xfsz) || done.exit == Exit::Code(128 + xfsz);
    if stopped || err.contains("File size limit exceeded") || err.contains("File too large") {
        said.push_str(&format!(
            "; a file reached the {}-byte limit of `max_file_bytes` and the process writing it was stopped",
            jail.file_bytes
        ));
    }
    said
}

/// A record file written only if it is needed: bytes stay in memory up to a limit;
/// past it, or when [`Spill::finish`] is told the stream was cut, they go to the file.
/// (Most commands print little; sparing two file creations a call is measurable.)
struct Spill {
    path: PathBuf,
    held: Vec<u8>,
    file: Option<File>,
}

/// Bytes held in memory before a record file is created anyway.
const SPILL_AT: usize = 64 * 1024;

impl Spill {
    fn new(path: PathBuf) -> Spill {
        Spill { path, held: Vec::new(), file: None }
    }

    fn open(&mut self) -> std::io::Result<&mut File> {
        if self.file.is_none() {
            let mut file = File::create(&self.path)?;
            file.write_all(&std::mem::take(&mut self.held))?;
            self.file = Some(file);
        }
        self.file.as_mut().ok_or_else(|| std::io::Error::other("no record file"))
    }

    /// Writes what is held to the file if the stream was `cut` (the model is told
    /// where the whole is).
    fn finish(mut self, cut: bool) -> std::io::Result<()> {
        if cut {
            self.open()?;
        }
        Ok(())
    }
}

impl Write for Spill {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.file.is_none() && self.held.len() + buf.len() <= SPILL_AT {
            self.held.extend_from_slice(buf);
            return Ok(buf.len());
        }
        self.open()?.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.as_mut().map_or(Ok(()), Write::flush)
    }
}

/// A stream as the model sees it: whole, or its head and tail with what was cut.
fn stream(name: &'static str, kept: &Kept, record: Option<String>, redactor: &crate::redact::Redactor) -> Stream {
    let head = redactor.redact(&String::from_utf8_lossy(&kept.head));
    if kept.is_whole() {
        let tail = redactor.redact(&String::from_utf8_lossy(&kept.tail));
        return Stream { name, text: head + &tail, cut: None };
    }
    let tail = redactor.redact(&String::from_utf8_lossy(&kept.tail));
    let kept_breaks = (kept.head.iter().chain(&kept.tail).filter(|&&b| b == b'\n').count()) as u64;
    let ends_open = kept.tail.last().is_some_and(|&b| b != b'\n');
    Stream {
        name,
        text: head,
        cut: Some(Cut {
            tail,
            omitted_bytes: kept.total - (kept.head.len() + kept.tail.len()) as u64,
            omitted_line_breaks: kept.line_breaks.saturating_sub(kept_breaks),
            total_bytes: kept.total,
            total_lines: kept.line_breaks + u64::from(ends_open),
            record,
            recorded_bytes: kept.recorded,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env() -> ToolEnv {
        let mut env = ToolEnv { cwd: std::env::temp_dir(), ..Default::default() };
        env.commands.env = vec![("OFFSHOOT_AGENT".into(), "abc".into())];
        env.commands.head_bytes = 2048;
        env.commands.tail_bytes = 2048;
        env
    }

    #[test]
    fn reports_exit_code_both_streams_and_environment() {
        let out = run(&env(), &json!({"command": "echo $OFFSHOOT_AGENT; echo oops >&2; exit 3"})).expect("runs");
        assert_eq!(out.summary, "exit code 3");
        assert!(out.is_error);
        assert_eq!(out.streams[0].text, "abc\n");
        assert_eq!(out.streams[1].text, "oops\n");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let started = std::time::Instant::now();
        let out = run(&env(), &json!({"command": "sleep 30 & sleep 30", "timeout_secs": 1})).expect("runs");
        assert!(out.summary.starts_with("timed out after 1 s"), "{}", out.summary);
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn stdin_is_closed() {
        let out = run(&env(), &json!({"command": "cat; echo done"})).expect("runs");
        assert_eq!(out.streams[0].text, "done\n");
    }

    #[test]
    fn only_a_cut_stream_gets_a_record_file() {
        let dir = std::env::temp_dir().join(format!("offshoot-bash-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let mut env = env();
        env.commands.head_bytes = 4;
        env.commands.tail_bytes = 4;
        env.record = Some(crate::tools::RecordDir { dir: dir.clone(), shown: "rec".into() });
        let out = run(&env, &json!({"command": "echo hi >&2; seq 1 1000"})).expect("runs");
        assert_eq!(out.streams[0].cut.as_ref().and_then(|c| c.record.as_deref()), Some("rec/stdout"));
        assert_eq!(std::fs::metadata(dir.join("stdout")).expect("record").len(), 3893);
        assert!(!dir.join("stderr").exists(), "a whole stream needs no record file");
        assert!(!dir.join("pgid").exists(), "the group on record goes with the call");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_says_what_was_cut() {
        let mut env = env();
        env.commands.head_bytes = 4;
        env.commands.tail_bytes = 4;
        let out = run(&env, &json!({"command": "seq 1 1000"})).expect("runs");
        let cut = out.streams[0].cut.as_ref().expect("cut");
        assert_eq!(out.streams[0].text, "1\n2\n");
        assert_eq!(cut.tail, "000\n");
        assert_eq!((cut.total_bytes, cut.total_lines, cut.omitted_bytes), (3893, 1000, 3885));
    }
}
