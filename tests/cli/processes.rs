//! Child processes under stress: pipes that would deadlock, adapters that hang,
//! output that never ends, processes that escape their group.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::server::Turn;
use crate::support::workspace::{Dialect, TestWorkspace};

fn use_adapter(t: &mut TestWorkspace, script: &str) {
    let adapter = t.root.join("adapter.py");
    std::fs::write(&adapter, script).expect("adapter");
    let command = format!("[\"python3\", \"{}\"]", adapter.display());
    t.run(&["config", "set", "providers.ext.protocol", "command", "providers.ext.command", &command]).ok();
    t.set("providers.ext.idle_timeout_secs", "1");
    t.set("roles.worker.provider", "ext");
}

#[test]
fn an_adapter_that_writes_before_it_reads_does_not_deadlock() {
    let mut t = TestWorkspace::new("proc-adapter-pipes");
    // 300 KB of deltas before reading a 200 KB request: more than a pipe holds in
    // each direction.
    use_adapter(
        &mut t,
        r#"import json, sys
for i in range(3000):
    print(json.dumps({"type": "text", "text": "x" * 100}))
sys.stdout.flush()
req = json.load(sys.stdin)
said = "read %d bytes of goal" % len(req["system"])
print(json.dumps({"type": "text", "text": said}))
print(json.dumps({"type": "output", "content": [{"type": "text", "text": said}], "usage": {}, "stop": "end_turn"}))
"#,
    );
    let goal = "g".repeat(100_000);
    let started = Instant::now();
    let run = t.run(&["prompt", &goal]);
    let out = run.ok();
    // The answer alone on stdout; what streamed before it is narration, on stderr.
    assert_eq!(out, "read 100000 bytes of goal\n".replace("100000", &out[5..out.find(" bytes").unwrap_or(5)]));
    assert!(run.stderr.contains(&"x".repeat(300_000)), "{}", &run.stderr[..run.stderr.len().min(300)]);
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn a_silent_adapter_is_stopped_at_its_idle_limit_and_reaped() {
    let mut t = TestWorkspace::new("proc-adapter-idle");
    let pid_file = t.root.join("adapter.pid");
    use_adapter(
        &mut t,
        &format!(
            "import os, time\nopen({:?}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n",
            pid_file.display().to_string()
        ),
    );
    let started = Instant::now();
    let run = t.run(&["prompt", "wait for me"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("printed nothing for 1 s and was stopped"), "{}", run.stderr);
    assert!(started.elapsed() < Duration::from_secs(20));
    let pid = std::fs::read_to_string(&pid_file).expect("pid");
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "adapter {pid} still exists");
}

#[test]
fn a_process_that_escapes_the_group_with_the_output_open_cannot_hang_a_call() {
    // Unconfined (in the sandbox it is PID 1's and dies with the command).
    let (server, t) = TestWorkspace::served("proc-escape", Dialect::Anthropic);
    t.set("roles.worker.sandbox", "none");
    server.push_turns([
        Turn::call("c1", "bash", &json!({"command": "setsid sleep 5 & sleep 0.3; echo done"}).to_string()),
        Turn::text("ok"),
    ]);
    let started = Instant::now();
    t.run(&["prompt", "escape"]).ok();
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    let seen = server.result_text(1);
    assert!(seen.starts_with("exit code 0; a process that left the command's process group"), "{seen}");
    assert!(seen.contains("<stdout>\ndone\n</stdout>"), "{seen}");
}

#[test]
fn output_past_the_record_cap_is_counted_not_stored() {
    let (server, t) = TestWorkspace::served("proc-record-cap", Dialect::Anthropic);
    server.push_turns([Turn::bash("big", "head -c 70000000 /dev/zero | tr '\\0' b; echo end"), Turn::text("ok")]);
    t.run(&["prompt", "print more than the record keeps"]).ok();
    let id = t.only_agent();
    let seen = server.result_text(1);
    assert!(
        seen.contains(&format!(
            "of 70000004 bytes in 1 line; its first 67108864 bytes are in steps/{id}/0001/tools/big/stdout"
        )),
        "{seen}"
    );
    assert!(seen.ends_with("bbbend\n</stdout>"), "{seen}");
    let record = t.steps_dir(&id).join("0001/tools/big/stdout");
    assert_eq!(std::fs::metadata(record).expect("record").len(), 64 << 20);
}
