//! `bash`: one non-interactive `sh -c` in its own process group, killed on timeout.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use super::{Stream, ToolEnv, ToolError, ToolOutput, str_arg, u64_arg};

const DEFAULT_TIMEOUT_SECS: u64 = 120;

pub(super) fn run(env: &ToolEnv, input: &Value) -> Result<ToolOutput, ToolError> {
    let command = str_arg(input, "command")?;
    let timeout = Duration::from_secs(u64_arg(input, "timeout_secs")?.unwrap_or(DEFAULT_TIMEOUT_SECS).clamp(1, 3600));
    if !env.cwd.is_dir() {
        return Err(ToolError::ToModel(format!("the working directory {} does not exist", env.cwd.display())));
    }
    // POSIX puts sh at /bin/sh; naming it saves searching PATH on every call.
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .current_dir(&env.cwd)
        .env("OFFSHOOT_WORKSPACE", &env.workspace)
        .env("OFFSHOOT_AGENT", &env.agent)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| ToolError::Fatal(format!("cannot start `/bin/sh`: {e}")))?;
    let pid = child.id();
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let (status, timed_out) = match rx.recv_timeout(timeout) {
        Ok(status) => (Some(status), false),
        Err(_) => {
            kill_group(pid);
            (rx.recv_timeout(Duration::from_secs(5)).ok(), true)
        }
    };
    // Background processes the command left behind would hold the pipes open: the
    // call is stateless, so its whole process group ends with it.
    kill_group(pid);
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let code = status.and_then(|s| s.ok()).and_then(|s| s.code());
    let summary = match (timed_out, code) {
        (true, _) => format!("timed out after {} s; the command and its processes were killed", timeout.as_secs()),
        (false, Some(code)) => format!("exit code {code}"),
        (false, None) => "killed by a signal".to_owned(),
    };
    Ok(ToolOutput {
        summary,
        streams: vec![Stream { name: "stdout", text: stdout }, Stream { name: "stderr", text: stderr }],
        is_error: timed_out || code != Some(0),
        cwd: None,
    })
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Sends SIGKILL to the process group `pgid` (the shell and all it started).
#[expect(unsafe_code, reason = "kill(2) has no wrapper in std; it takes two integers and touches no memory")]
fn kill_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else { return };
    // SAFETY: kill(2) reads no memory of ours; a group that is gone only yields ESRCH.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env() -> ToolEnv {
        ToolEnv { cwd: std::env::temp_dir(), workspace: "/ws".into(), agent: "abc".into(), ..Default::default() }
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
}
