//! The default config contains a hostile agent, as root and as an unprivileged
//! user: its commands cannot read the driver's keys or trace or signal it, cannot
//! write outside their agent, cannot read other workspaces, reach nothing outside
//! without network, and cannot start a child less confined than themselves.

use serde_json::json;

use crate::support::server::{Server, Turn};
use crate::support::workspace::{Dialect, TestWorkspace, User};

const SECRET: &str = "sk-ant-test-0123456789-SECRET";

/// The ways `secret` can appear in base64, whatever the bytes before it: its
/// encoding at each of the three alignments, less the characters the neighbours
/// change.
fn base64_forms(secret: &str) -> Vec<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let encode = |bytes: &[u8]| -> String {
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    };
    (0..3)
        .map(|pad| {
            let mut bytes = vec![b'='; pad];
            bytes.extend_from_slice(secret.as_bytes());
            let text = encode(&bytes);
            // Drop the characters that also encode the padding, and the last two.
            text[(pad * 4).div_ceil(3)..text.len() - 2].to_owned()
        })
        .collect()
}

/// Fails if any of `needles` is in a request the model got or in any file under
/// `dir` (the workspace, the home, records, logs), git objects aside.
pub fn assert_nowhere(dir: &std::path::Path, server: &Server, needles: &[String]) {
    for r in server.requests() {
        let raw = String::from_utf8_lossy(&r.raw);
        for n in needles {
            assert!(!raw.contains(n.as_str()), "a request holds `{n}`");
        }
    }
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("ls").flatten() {
            let path = entry.path();
            if entry.file_type().expect("type").is_dir() {
                if !path.ends_with("objects") {
                    stack.push(path);
                }
            } else {
                let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
                for n in needles {
                    assert!(!text.contains(n.as_str()), "{} holds `{n}`", path.display());
                }
            }
        }
    }
}

/// Every process's environment, read and base64'd; how many hold the key; a
/// ptrace attach and, with `kill`, a SIGKILL at the driver of workspace `t` (found
/// by its command line, `offshoot -w <workspace> …`).
fn key_hunt(t: &TestWorkspace, kill: bool) -> Vec<Turn> {
    let ws = t.ws.display().to_string();
    let ptrace = format!(
        r#"python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for p in os.listdir("/proc"):
    try:
        words = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")
    except OSError:
        continue
    if words[0].endswith(b"offs" + b"hoot") and words[1:3] == [b"-w", b"{ws}"]:
        r = libc.ptrace(0x4206, int(p), 0, 0)
        print("attach", "refused" if r else "ATTACHED")
'"#
    );
    let kill_it = format!(
        "for p in /proc/[0-9]*; do case \"$(tr '\\0' ' ' 2>/dev/null < $p/cmdline)\" in *offs\"\"hoot\\ -w\\ {ws}\\ *) kill -9 ${{p#/proc/}} 2>&1 | sed 's/.*kill/kill/';; esac; done; echo tried"
    );
    let mut turns = vec![
        Turn::bash("env", "env | grep -c 0123456789-SECRET; echo \"key=$ANTHROPIC_API_KEY\""),
        Turn::bash("count", "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c 0123456789-SECRET"),
        Turn::bash("b64", "for p in /proc/[0-9]*; do base64 -w0 $p/environ 2>/dev/null && echo; done | wc -l"),
        Turn::bash(
            "mem",
            "for p in /proc/[0-9]*; do head -c 64 $p/mem 2>/dev/null | wc -c; done | sort -u | tr '\\n' ' '",
        ),
        Turn::bash("trace", &ptrace),
    ];
    if kill {
        turns.push(Turn::bash("kill", &kill_it));
    }
    turns.push(Turn::text("nothing found"));
    turns
}

fn hunt_for_keys(name: &str, user: User, extra: &[(&str, &str)]) {
    let (server, mut t) = TestWorkspace::served_as(name, Dialect::Anthropic, user);
    t.env("ANTHROPIC_API_KEY", SECRET);
    for (k, v) in extra {
        t.set(k, v);
    }
    let unconfined = extra.contains(&("roles.worker.sandbox", "none"));
    server.push_turns(key_hunt(&t, !unconfined));
    let run = t.run(&["prompt", "find the key"]);
    assert!(run.ok().contains("nothing found"), "the driver survived: {}", run.stderr);
    let r = |n: usize| server.result_text(n);
    assert_eq!(r(1), "exit code 0\n<stdout>\n0\nkey=\n</stdout>");
    // No environment holding the key could be read.
    assert_eq!(r(2), "exit code 1\n<stdout>\n0\n</stdout>", "as {user:?}");
    assert!(r(3).starts_with("exit code 0"), "{}", r(3));
    // Nothing of any process's memory could be read.
    assert_eq!(r(4), "exit code 0\n<stdout>\n0 \n</stdout>");
    // In its own PID namespace the sandbox's `/proc` holds no driver to attach to;
    // where one is seen (unconfined), the attach is refused.
    let attach = if unconfined { "exit code 0\n<stdout>\nattach refused\n</stdout>" } else { "exit code 0" };
    assert_eq!(r(5), attach);
    if !unconfined {
        // In its PID namespace the driver is not even seen (its own `/proc`); without
        // one, Landlock refuses the signal.
        let refused = ["kill: No such process", "kill: Operation not permitted"];
        let tried = r(6);
        assert!(tried.ends_with("tried\n</stdout>") && !tried.contains("Killed"), "{tried:?}");
        assert!(
            tried == "exit code 0\n<stdout>\ntried\n</stdout>" || refused.iter().any(|w| tried.contains(w)),
            "{tried:?}"
        );
    }
    assert_eq!(server.requests()[0].header("x-api-key"), Some(SECRET));
    let mut needles = base64_forms(SECRET);
    needles.push(SECRET.to_owned());
    assert_nowhere(&t.root, &server, &needles);
}

#[test]
fn the_keys_are_out_of_reach_of_commands_as_root() {
    hunt_for_keys("sandbox-keys-root", User::Own, &[]);
}

#[test]
fn the_keys_are_out_of_reach_of_commands_as_an_unprivileged_user() {
    hunt_for_keys("sandbox-keys-user", User::Unprivileged, &[]);
}

#[test]
fn unconfined_commands_of_an_unprivileged_user_cannot_read_the_driver_either() {
    // `sandbox = "none"` is full access; still, the driver is not dumpable.
    hunt_for_keys("sandbox-keys-user-unconfined", User::Unprivileged, &[("roles.worker.sandbox", "none")]);
}

#[test]
fn base64_forms_are_found_whatever_comes_before() {
    for prefix in ["", "a", "ab", "KEY=", "ANTHROPIC_API_KEY="] {
        let text = base64_of(&format!("{prefix}{SECRET}\0HOME=/root"));
        assert!(base64_forms(SECRET).iter().any(|f| text.contains(f.as_str())), "{prefix}: {text}");
    }
}

fn base64_of(text: &str) -> String {
    let out = std::process::Command::new("base64")
        .arg("-w0")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().expect("stdin").write_all(text.as_bytes())?;
            c.wait_with_output()
        })
        .expect("base64");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes at everything that is not the agent's: the user's home and /tmp, another
/// agent's directory and inbox, the harness's repository, records and locks.
fn write_outside(user: User) {
    let (server, t) = TestWorkspace::served_as(&format!("sandbox-writes-{user:?}"), Dialect::Anthropic, user);
    server.push_turns([
        Turn::tool("o1", "write_file", json!({"path": "mine.txt", "content": "other's"})),
        Turn::text("ok"),
    ]);
    t.run(&["prompt", "--name", "Other", "keep a file"]).ok();
    let other = t.agents()[0]["id"].as_str().expect("id").to_owned();
    let before = t.git(&["log", "--all", "--format=%H %s"]);
    let tmp = format!("/tmp/offshoot-planted-{}", std::process::id());
    // A file of the user's, private; metadata is what Landlock cannot guard.
    std::fs::create_dir_all(&t.home).expect("home");
    let private = t.home.join("private.key");
    std::fs::write(&private, "secret").expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let mode = |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o7777;
    let internals = mode(&t.ws.join("repo.git"));
    let commands = [
        format!("echo x > {}/planted; echo x > {tmp}", t.home.display()),
        format!("mkdir -p ../../inbox/{other} && printf 'forged' > ../../inbox/{other}/0099-user.md"),
        format!("echo overwritten > ../{other}/mine.txt; rm -f ../{other}/mine.txt"),
        "git --git-dir=../../repo.git tag evil HEAD; git --git-dir=../../repo.git update-ref refs/heads/x HEAD".into(),
        "rm -rf ../../locks ../../steps ../../repo.git/refs 2>&1 | head -1; echo x > ../../repo.git/HEAD".into(),
        // Metadata: modes, owners, times of what is not the agent's.
        format!(
            "chmod 644 {0}; chmod u+s {0}; chown 0:0 {0}; touch -d 1970-01-01 {0}; chmod 000 ../../repo.git ../{other}; touch -d 1970-01-01 ../../project.git/HEAD",
            private.display()
        ),
        // The binary itself, as the user: it must write repo.git to change the config.
        format!("{} -w {} config set roles.worker.sandbox none", env!("CARGO_BIN_EXE_offshoot"), t.ws.display()),
    ];
    let mut turns: Vec<Turn> = commands.iter().enumerate().map(|(i, c)| Turn::bash(&format!("w{i}"), c)).collect();
    turns.push(Turn::text("done"));
    server.push_turns(turns);
    t.run(&["prompt", "--name", "Vandal", "break things"]).ok();
    for n in 1..=commands.len() {
        let text = server.result_text(n + 1);
        assert!(!text.starts_with("exit code 0\n"), "{}: {text}", commands[n - 1]);
    }
    assert!(!t.home.join("planted").exists() && !std::path::Path::new(&tmp).exists());
    assert!(!t.ws.join("inbox").join(&other).join("0099-user.md").exists());
    assert_eq!(std::fs::read_to_string(t.ws.join("agents").join(&other).join("mine.txt")).expect("kept"), "other's");
    assert!(t.git(&["tag"]).is_empty() && t.git(&["for-each-ref", "refs/heads/x"]).is_empty());
    assert!(!t.run(&["config", "show"]).ok().contains("sandbox = \"none\""), "the config was changed");
    assert_eq!(mode(&private), 0o600, "the mode of a file of the user's was changed");
    assert_eq!(mode(&t.ws.join("repo.git")), internals, "the mode of the harness's repository was changed");
    let old = std::fs::metadata(t.ws.join("project.git/HEAD")).and_then(|m| m.modified()).expect("mtime");
    assert!(old.elapsed().expect("age") < std::time::Duration::from_secs(3600), "a time was changed");
    // Its own files it may change as it likes.
    server.push_turns([Turn::bash("own", "touch x && chmod 755 x && test -x x && echo mine"), Turn::text("ok")]);
    t.run(&["send", "Vandal", "your own"]).ok();
    let last = server.result_text(server.requests().len() - 1);
    assert_eq!(last, "exit code 0\n<stdout>\nmine\n</stdout>");
    let after = t.git(&["log", "--all", "--format=%H %s"]);
    assert!(before.lines().all(|l| after.contains(l)), "history was lost:\n{before}\n---\n{after}");
    // Every verb still works, and the other agent goes on.
    assert_eq!(t.agents().len(), 2);
    server.push_turns([Turn::text("still here")]);
    assert!(t.run(&["send", "Other", "are you there?"]).ok().contains("still here"));
    t.run(&["doctor"]).ok();
}

#[test]
fn commands_write_nothing_outside_their_agent_as_root() {
    write_outside(User::Own);
}

#[test]
fn commands_write_nothing_outside_their_agent_as_an_unprivileged_user() {
    write_outside(User::Unprivileged);
}

#[test]
fn other_workspaces_and_this_ones_internals_are_unreadable() {
    let (server, t) = TestWorkspace::served("sandbox-reads", Dialect::Anthropic);
    let other = t.home.join("workspaces").join("other");
    t.run_bare(&["new", other.to_str().expect("utf-8")]).ok();
    server.push_turns([
        Turn::bash("r1", &format!("cat {}/repo.git/HEAD; ls {}", other.display(), t.home.join("workspaces").display())),
        Turn::bash("r2", "cat ../../repo.git/HEAD; ls ../../steps ../../inbox ../../locks"),
        Turn::bash("r3", "cat /etc/hostname > /dev/null && echo system-readable"),
        // The file tools follow the same rules.
        Turn::tool("f1", "read_file", json!({"path": other.join("repo.git/HEAD")})),
        Turn::tool("f2", "grep", json!({"pattern": "ref", "path": other})),
        Turn::tool("f3", "glob", json!({"pattern": "**/HEAD", "path": t.home.join("workspaces")})),
        Turn::tool("f4", "read_file", json!({"path": "../../repo.git/HEAD"})),
        Turn::tool("f5", "read_file", json!({"path": "../../project.git/HEAD"})),
        Turn::text("done"),
    ]);
    t.run(&["prompt", "look around"]).ok();
    let r = |n: usize| server.result_text(n);
    assert!(r(1).matches("Permission denied").count() == 2, "{}", r(1));
    assert!(r(2).matches("Permission denied").count() == 4, "{}", r(2));
    assert_eq!(r(3), "exit code 0\n<stdout>\nsystem-readable\n</stdout>");
    assert!(r(4).contains("is in another workspace") && r(4).contains("which agents may not read"), "{}", r(4));
    assert!(r(5).contains("is in another workspace"), "{}", r(5));
    assert!(r(6).contains("is in another workspace") && !r(6).contains("repo.git"), "{}", r(6));
    assert!(r(7).contains("is in the workspace's internals"), "{}", r(7));
    assert!(r(8).contains("ref: refs/heads/main"), "{}", r(8));
}

#[test]
fn without_network_no_socket_reaches_outside_as_root() {
    without_network_no_socket_reaches_outside("sandbox-net", User::Own);
}

#[test]
fn without_network_no_socket_reaches_outside_as_an_unprivileged_user() {
    without_network_no_socket_reaches_outside("sandbox-net-user", User::Unprivileged);
}

fn without_network_no_socket_reaches_outside(name: &str, user: User) {
    let (server, mut t) = TestWorkspace::served_as(name, Dialect::Anthropic, user);
    t.set("roles.worker.network", "false");
    // A UDP socket, a UNIX socket standing in for an ssh agent, and the model server
    // itself: all outside the sandbox.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    udp.set_nonblocking(true).expect("nonblocking");
    let sock = t.root.join("agent.sock");
    let unix = std::os::unix::net::UnixListener::bind(&sock).expect("unix");
    unix.set_nonblocking(true).expect("nonblocking");
    t.env("SSH_AUTH_SOCK", sock.to_str().expect("utf-8"));
    let probe = format!(
        r#"python3 -c '
import socket
def attempt(name, f):
    try:
        f(); print(name, "REACHED")
    except OSError as e:
        print(name, "refused")
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", {udp})))
attempt("route", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).connect(("8.8.8.8", 53)))
attempt("unix", lambda: socket.socket(socket.AF_UNIX).connect("{sock}"))
attempt("abstract", lambda: socket.socket(socket.AF_UNIX).connect("\0offshoot-test"))
a, b = socket.socketpair(); a.send(b"pair"); print("pair", b.recv(4).decode())
'"#,
        port = server.port,
        udp = udp.local_addr().expect("addr").port(),
        sock = sock.display()
    );
    server.push_turns([
        Turn::bash("env", "echo \"ssh=$SSH_AUTH_SOCK\""),
        Turn::bash("net", &probe),
        Turn::bash("local", "python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 & sleep 0.5; python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:8765/\").status)'"),
        Turn::text("done"),
    ]);
    t.run(&["prompt", "phone home"]).ok();
    assert_eq!(server.result_text(1), "exit code 0\n<stdout>\nssh=\n</stdout>");
    let net = server.result_text(2);
    for line in ["tcp refused", "route refused", "unix refused", "abstract refused", "pair pair"] {
        assert!(net.contains(line), "{line}: {net}");
    }
    let mut buf = [0u8; 8];
    assert!(udp.recv_from(&mut buf).is_err(), "a datagram left the sandbox");
    assert!(unix.accept().is_err(), "the ssh agent's socket was reached");
    // Inside, its own loopback works.
    assert_eq!(server.result_text(3), "exit code 0\n<stdout>\n200\n</stdout>");
}

#[test]
fn an_ssh_agent_is_not_handed_to_commands_unless_kept_nor_reached_with_network() {
    let (server, mut t) = TestWorkspace::served("sandbox-ssh", Dialect::Anthropic);
    // A socket standing in for the user's ssh agent, found the way an agent would.
    let sock = t.root.join("agent.sock");
    let unix = std::os::unix::net::UnixListener::bind(&sock).expect("unix");
    unix.set_nonblocking(true).expect("nonblocking");
    t.env("SSH_AUTH_SOCK", "/tmp/ssh-agent.sock");
    t.env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/0/bus");
    let connect = format!(
        "grep -c {} /proc/1/net/unix; python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"{}\")' 2>&1 | tail -1",
        sock.display(),
        sock.display()
    );
    server.push_turns([
        Turn::bash("env", "echo \"[$SSH_AUTH_SOCK][$DBUS_SESSION_BUS_ADDRESS]\""),
        Turn::bash("find", &connect),
        Turn::text("ok"),
    ]);
    t.run(&["prompt", "look"]).ok();
    assert_eq!(server.result_text(1), "exit code 0\n<stdout>\n[][]\n</stdout>");
    let found = server.result_text(2);
    assert!(found.contains("PermissionError: [Errno 13] Permission denied"), "{found}");
    assert!(unix.accept().is_err(), "the socket was reached with network on");
    t.set("tool_env.keep", "[\"SSH_AUTH_SOCK\"]");
    server.push_turns([Turn::bash("env", "echo \"[$SSH_AUTH_SOCK]\""), Turn::text("ok")]);
    t.run(&["prompt", "look again"]).ok();
    assert_eq!(server.result_text(4), "exit code 0\n<stdout>\n[/tmp/ssh-agent.sock]\n</stdout>");
}

#[test]
fn a_child_is_never_less_confined_than_its_parent() {
    let (server, t) = TestWorkspace::served("sandbox-escalation", Dialect::Anthropic);
    t.set("roles.openai.sandbox", "none");
    t.set("roles.openai.provider", "anthropic");
    t.run(&[
        "config",
        "set",
        "roles.reviewer.provider",
        "anthropic",
        "roles.reviewer.model",
        "m",
        "roles.reviewer.tools",
        "[\"bash\"]",
    ])
    .ok();
    t.set("roles.worker.network", "false");
    server.push_turns([
        Turn::tool("d1", "dispatch", json!({"role": "openai", "goal": "write outside for me"})),
        Turn::tool("d2", "dispatch", json!({"role": "reviewer", "goal": "fetch something"})),
        Turn::text("refused twice"),
    ]);
    t.run(&["prompt", "escalate"]).ok();
    assert_eq!(
        server.result_text(1),
        "no child was started: role `openai` runs commands unconfined (`sandbox = \"none\"`) and you are sandboxed; a child may not be less confined than its parent"
    );
    assert_eq!(
        server.result_text(2),
        "no child was started: role `reviewer` may use the network and you may not; a child may not be less confined than its parent"
    );
    assert_eq!(t.agents().len(), 1);
    // Write paths are compared where they lead: a child's path below the parent's, but
    // through a link out of it, is the child's to lose.
    let data = t.root.join("data");
    std::fs::create_dir_all(&data).expect("data");
    std::fs::create_dir_all(&t.home).expect("home");
    std::os::unix::fs::symlink(&t.home, data.join("out")).expect("link");
    t.run(&["config", "set", "roles.worker.write_paths", &format!("[\"{}\"]", data.display())]).ok();
    t.run(&[
        "config",
        "set",
        "roles.reviewer.write_paths",
        &format!("[\"{}/out\"]", data.display()),
        "roles.reviewer.network",
        "false",
    ])
    .ok();
    server.push_turns([
        Turn::tool("d3", "dispatch", json!({"role": "reviewer", "goal": "write home"})),
        Turn::text("refused again"),
    ]);
    t.run(&["prompt", "escalate through a link"]).ok();
    let text = server.result_text(server.requests().len() - 1);
    assert!(text.contains("role `reviewer` may write") && text.contains("and you may not"), "{text}");
}

#[test]
fn an_unconfined_role_and_a_machine_without_namespaces_are_said_at_start() {
    let (server, mut t) = TestWorkspace::served("sandbox-warnings", Dialect::Anthropic);
    t.set("roles.worker.sandbox", "none");
    server.push_turns([Turn::text("ok")]);
    let run = t.run(&["prompt", "hello"]);
    assert!(
        run.stderr.contains("warning: role `worker` runs commands unconfined (`sandbox = \"none\"`): they can read and write whatever you can, your keys and other agents included"),
        "{}",
        run.stderr
    );
    t.set("roles.worker.sandbox", "workspace-write");
    t.env("OFFSHOOT_NO_NAMESPACES", "1");
    t.env("ANTHROPIC_API_KEY", SECRET);
    server.push_turns(key_hunt(&t, true));
    let run = t.run(&["prompt", "--json", "find the key"]);
    assert!(run.stdout.contains("\"type\":\"warning\""), "{}", run.stdout);
    assert!(run.stdout.contains("user namespaces are unavailable (OFFSHOOT_NO_NAMESPACES=1)"), "{}", run.stdout);
    // What still holds without them: the key, the driver's memory, tracing, signals.
    let first = 1;
    let r = |n: usize| server.result_text(first + n);
    assert_eq!(r(2), "exit code 1\n<stdout>\n0\n</stdout>");
    assert_eq!(r(4), "exit code 0\n<stdout>\n0 \n</stdout>");
    assert_eq!(r(5), "exit code 0\n<stdout>\nattach refused\n</stdout>");
    assert!(run.stdout.contains("nothing found"), "{}", run.stdout);
}

/// Limits of a role, each met by a command and named in what the model is told.
fn limits_are_held_and_named(name: &str, user: User) {
    let (server, t) = TestWorkspace::served_as(name, Dialect::Anthropic, user);
    t.run(&[
        "config",
        "set",
        "roles.worker.max_processes",
        "300",
        "roles.worker.max_file_bytes",
        "1000000",
        "roles.worker.max_commit_file_bytes",
        "4096",
    ])
    .ok();
    server.push_turns([
        Turn::bash("procs", "i=0; while [ $i -lt 400 ]; do sleep 30 & i=$((i+1)); done; echo all started"),
        // `exec`: the writer is the command itself (it must not be PID 1, which the
        // kernel spares the SIGXFSZ).
        Turn::bash("size", "exec head -c 2000000 /dev/zero > big.bin"),
        Turn::bash(
            "commit",
            "head -c 5000 /dev/zero > blob.bin && echo small > small.txt && ls -l big.bin | cut -d' ' -f5",
        ),
        Turn::text("done"),
    ]);
    t.run(&["prompt", "go past the limits"]).ok();
    let procs = server.result_text(1);
    assert!(
        procs.contains("a process could not start: commands may run at most 300 processes at once (`max_processes`)"),
        "{procs}"
    );
    assert!(procs.contains("Cannot fork"), "{procs}");
    let size = server.result_text(2);
    assert!(size.contains("a file reached the 1000000-byte limit of `max_file_bytes`"), "{size}");
    let commit = server.result_text(3);
    assert!(commit.contains("1000000"), "the file stopped at the limit: {commit}");
    assert!(
        size.contains("not recorded in your history, over the 4096-byte limit of `max_commit_file_bytes`: `big.bin` (1000000 bytes) (they stay on disk)"),
        "{size}"
    );
    assert!(commit.contains("`max_commit_file_bytes`: `blob.bin` (5000 bytes)"), "{commit}");
    let id = t.only_agent();
    let tree = t.git(&["ls-tree", "--name-only", &format!("agents/{id}")]);
    assert!(tree.contains("small.txt") && !tree.contains("big.bin") && !tree.contains("blob.bin"), "{tree}");
    assert!(t.ws.join("agents").join(&id).join("blob.bin").is_file());
}

#[test]
fn limits_hold_and_are_named_as_root() {
    limits_are_held_and_named("sandbox-limits-root", User::Own);
}

#[test]
fn limits_hold_and_are_named_as_an_unprivileged_user() {
    limits_are_held_and_named("sandbox-limits-user", User::Unprivileged);
}

/// The host's System V shared memory segments, as `ipcs -m` lists them.
fn host_segments() -> String {
    let out = std::process::Command::new("ipcs").arg("-m").output().expect("ipcs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn system_v_ipc_stays_inside_the_sandbox() {
    let (server, t) = TestWorkspace::served("sandbox-ipc", Dialect::Anthropic);
    let made = std::process::Command::new("ipcmk").args(["-M", "4096"]).output().expect("ipcmk");
    let id = String::from_utf8_lossy(&made.stdout).split_whitespace().last().expect("an id").to_owned();
    let before = host_segments();
    server.push_turns([
        Turn::bash("i1", &format!("ipcs -m | grep -c ' {id} ' ; ipcmk -M 1048576 >/dev/null && ipcs -m | grep -c 0x")),
        Turn::text("done"),
    ]);
    t.run(&["prompt", "share memory"]).ok();
    let seen = server.result_text(1);
    let _ = std::process::Command::new("ipcrm").args(["-m", &id]).status();
    // The host's segment was not there; the agent's own was, and went with it.
    assert_eq!(seen, "exit code 0\n<stdout>\n0\n1\n</stdout>");
    let after = host_segments();
    assert_eq!(after.lines().count() + 1, before.lines().count(), "{before}\n---\n{after}");
}

#[test]
fn a_workspace_named_through_a_link_is_known_by_its_real_place() {
    let (server, t) = TestWorkspace::served("sandbox-linked", Dialect::Anthropic);
    // Named relative to the current directory, through a link: the file tools resolve
    // the agent's paths to real ones, so the workspace's must be real too.
    std::os::unix::fs::symlink(&t.ws, t.root.join("via")).expect("link");
    server.push_turns([
        Turn::tool("f1", "read_file", json!({"path": "../../repo.git/HEAD"})),
        Turn::tool("f2", "grep", json!({"pattern": "ref", "path": "../../steps"})),
        Turn::text("done"),
    ]);
    let out = t.command_bare().args(["-w", "via", "prompt", "look"]).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(server.result_text(1).contains("is in the workspace's internals"), "{}", server.result_text(1));
    assert!(server.result_text(2).contains("is in the workspace's internals"), "{}", server.result_text(2));
    assert!(!server.result_text(1).contains("refs/heads"), "{}", server.result_text(1));
    // What reaches the agent names the real place: the link may go.
    let dot_git = std::fs::read_to_string(t.ws.join("agents").join(t.only_agent()).join(".git")).expect(".git");
    let real = std::fs::canonicalize(&t.ws).expect("real");
    assert_eq!(dot_git.trim(), format!("gitdir: {}/gits/{}", real.display(), t.only_agent()));
}

/// The pid and name (`comm`) of each process whose parent is `parent`.
fn children_of(parent: u32) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid …`: the name may hold anything but ends at the last `)`.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let ppid = stat[close + 1..].split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            found.push((pid, stat[open + 1..close].to_owned()));
        }
    }
    found
}

#[test]
fn commands_start_through_the_helpers_own_small_binary() {
    let (server, t) = TestWorkspace::served("sandbox-small-helper", Dialect::Anthropic);
    server.push_turns([Turn::bash("s1", "touch started && sleep 2 && echo slept"), Turn::text("done")]);
    let mut prompt = t.command().args(["prompt", "wait a little"]).spawn().expect("prompt");
    // While the command sleeps, the driver's child that started it is the helper's own
    // binary, not a second copy of the whole harness.
    let started = std::time::Instant::now();
    let agents = t.ws.join("agents");
    let begun =
        || std::fs::read_dir(&agents).into_iter().flatten().flatten().any(|a| a.path().join("started").exists());
    while !begun() && started.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let helpers = children_of(prompt.id());
    assert!(prompt.wait().expect("prompt").success());
    assert!(begun(), "the command never began");
    // (`comm` is the name cut to 15 bytes.)
    assert!(helpers.iter().any(|(_, name)| name == "offshoot-sandbo"), "{helpers:?}");
    assert!(!helpers.iter().any(|(_, name)| name == "offshoot"), "{helpers:?}");
    assert_eq!(server.result_text(1), "exit code 0\n<stdout>\nslept\n</stdout>");
}
