use std::cell::Cell;
use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;

use super::*;

const SH: &str = "/bin/sh";

fn limits() -> Limits {
    Limits { head: 16, tail: 16, record_max: u64::MAX, timeout: Some(Duration::from_secs(20)), idle: None }
}

fn sh(command: &str, limits: &Limits, io: Io) -> Finished {
    let args = [OsStr::new("-c"), OsStr::new(command)];
    let env = [("PATH".to_owned(), "/usr/bin:/bin".to_owned()), ("ONLY".to_owned(), "this".to_owned())];
    let spec = Spec {
        program: Path::new(SH),
        args: &args,
        cwd: Path::new("/"),
        env: &env,
        group: Group::Own,
        stdin: None,
        sandbox: None,
        pgid_record: None,
    };
    run(&spec, limits, io).expect("runs")
}

fn text(k: &Kept) -> String {
    String::from_utf8_lossy(&[k.head.as_slice(), k.tail.as_slice()].concat()).into_owned()
}

#[test]
fn the_child_sees_exactly_the_environment_it_is_given() {
    let done = sh("env | sort; echo err >&2; exit 3", &Limits { head: 4096, ..limits() }, Io::default());
    assert_eq!(done.exit, Exit::Code(3));
    // sh itself adds PWD (and some shells SHLVL); nothing of ours leaks in.
    let names: Vec<String> =
        text(&done.stdout).lines().filter_map(|l| l.split('=').next()).map(str::to_owned).collect();
    assert!(names.contains(&"ONLY".to_owned()) && names.contains(&"PATH".to_owned()), "{names:?}");
    assert!(!names.iter().any(|n| n == "HOME" || n == "CARGO"), "{names:?}");
    assert_eq!(text(&done.stderr), "err\n");
    assert_eq!(done.ended, Ended::Exited);
}

#[test]
fn output_is_kept_as_head_and_tail_and_recorded_in_full() {
    let dir = std::env::temp_dir().join(format!("offshoot-process-big-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut file = File::create(dir.join("stdout")).expect("record");
    let io = Io { stdout_record: Some(&mut file), ..Io::default() };
    let done = sh("seq 1 200000", &limits(), io);
    assert_eq!(done.stdout.total, std::fs::metadata(dir.join("stdout")).expect("meta").len());
    assert_eq!(done.stdout.line_breaks, 200_000);
    assert_eq!(String::from_utf8_lossy(&done.stdout.head), "1\n2\n3\n4\n5\n6\n7\n8\n");
    assert_eq!(String::from_utf8_lossy(&done.stdout.tail), "8\n199999\n200000\n");
    assert!(!done.stdout.is_whole());
    // The record stops at its cap; the count goes on.
    let mut capped = File::create(dir.join("capped")).expect("record");
    let io = Io { stdout_record: Some(&mut capped), ..Io::default() };
    let done = sh("seq 1 1000", &Limits { record_max: 10, ..limits() }, io);
    assert_eq!((done.stdout.recorded, done.stdout.total), (10, 3893));
    assert_eq!(std::fs::read_to_string(dir.join("capped")).expect("read"), "1\n2\n3\n4\n5\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_timeout_kills_the_whole_group() {
    let started = Instant::now();
    let done =
        sh("sleep 30 & sleep 30", &Limits { timeout: Some(Duration::from_millis(300)), ..limits() }, Io::default());
    assert_eq!(done.ended, Ended::TimedOut);
    assert_eq!(done.exit, Exit::Signal(libc::SIGKILL));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[test]
fn a_process_that_left_the_group_cannot_hold_the_call_open() {
    let started = Instant::now();
    // The grandchild starts its own session, keeps stdout open and outlives the shell.
    let done = sh("setsid sleep 3 & sleep 0.3; echo started", &limits(), Io::default());
    assert_eq!(done.exit, Exit::Code(0));
    assert_eq!(text(&done.stdout), "started\n");
    assert!(done.lingering);
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}

#[test]
fn silence_past_the_idle_limit_ends_the_run() {
    let limits = Limits { idle: Some(Duration::from_millis(200)), ..limits() };
    let done = sh("echo one; sleep 10", &limits, Io::default());
    assert_eq!((done.ended, text(&done.stdout)), (Ended::Idle, "one\n".to_owned()));
}

#[test]
fn stdin_is_fed_while_output_is_read() {
    // More than a pipe holds in both directions: writing all input before reading
    // would deadlock.
    let input = "x".repeat(1 << 20);
    let args = [OsStr::new("-c"), OsStr::new("cat")];
    let spec = Spec {
        program: Path::new(SH),
        args: &args,
        cwd: Path::new("/"),
        env: &[],
        group: Group::Own,
        stdin: Some(input.as_bytes()),
        sandbox: None,
        pgid_record: None,
    };
    let done = run(&spec, &limits(), Io::default()).expect("runs");
    assert_eq!((done.exit, done.stdout.total), (Exit::Code(0), 1 << 20));
}

#[test]
fn stdout_can_stop_the_child_and_its_group_is_on_record() {
    let dir = std::env::temp_dir().join(format!("offshoot-process-pgid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let record = File::create(dir.join("pgid")).expect("record");
    let spawned = Cell::new(0u32);
    let on_spawn = |pid: u32| spawned.set(pid);
    let mut seen = Vec::new();
    let mut on_stdout = |bytes: &[u8]| {
        seen.extend_from_slice(bytes);
        !seen.contains(&b'!')
    };
    let args = [OsStr::new("-c"), OsStr::new("cat pgid_file 2>/dev/null; echo 'stop!'; sleep 30")];
    let spec = Spec {
        program: Path::new(SH),
        args: &args,
        cwd: &dir,
        env: &[],
        group: Group::Own,
        stdin: None,
        sandbox: None,
        pgid_record: Some(&record),
    };
    let io = Io { on_spawn: Some(&on_spawn), on_stdout: Some(&mut on_stdout), ..Io::default() };
    let started = Instant::now();
    let done = run(&spec, &limits(), io).expect("runs");
    assert_eq!(done.ended, Ended::Stopped);
    assert!(started.elapsed() < Duration::from_secs(5));
    let written = std::fs::read_to_string(dir.join("pgid")).expect("pgid");
    assert_eq!(written, format!("{}\n", spawned.get()));
    // Killed with the group: gone a moment later (a SIGKILLed grandchild takes that
    // moment to die, more of it on a loaded machine).
    let until = Instant::now() + Duration::from_secs(2);
    while !group_members(spawned.get()).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(group_members(spawned.get()), Vec::<u32>::new());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn decimals_are_written_without_allocating() {
    let mut buf = [0u8; 24];
    assert_eq!(decimal(0, &mut buf), b"0\n");
    assert_eq!(decimal(4_194_304, &mut buf), b"4194304\n");
    assert_eq!(decimal(u64::MAX, &mut buf), b"18446744073709551615\n");
}

#[test]
fn a_served_child_keeps_a_bounded_log_talks_on_its_pipes_and_dies_when_dropped() {
    let dir = std::env::temp_dir().join(format!("offshoot-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let log = dir.join("server.log");
    // 20 MB on stderr, then an echo server on stdin/stdout.
    let args = [OsStr::new("-c"), OsStr::new("head -c 20000000 /dev/zero >&2; echo started >&2; cat")];
    let env = [("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
    let spec = Spec {
        program: Path::new(SH),
        args: &args,
        cwd: Path::new("/"),
        env: &env,
        group: Group::Own,
        stdin: None,
        sandbox: None,
        pgid_record: None,
    };
    let mut served = serve(&spec, Some(&log)).expect("serves");
    let pid = served.pid();
    let (stdin, stdout) = served.pipes().expect("pipes");
    let mut writer = File::from(stdin);
    let mut reader = std::io::BufReader::new(File::from(stdout));
    writer.write_all(b"ping\n").expect("write");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut reader, &mut line).expect("read");
    assert_eq!(line, "ping\n");
    assert_eq!(std::fs::metadata(&log).expect("log").len(), SERVED_LOG_MAX);
    drop(served);
    assert!(!running(pid), "the child is killed and reaped with its handle");
    let _ = std::fs::remove_dir_all(&dir);
}
