//! `TestWorkspace`: a temp home and workspace, and the real `offshoot` binary run
//! with a clean environment (no git identity, no API keys unless a test sets them).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::server::Server;

pub struct TestWorkspace {
    pub root: PathBuf,
    pub home: PathBuf,
    pub ws: PathBuf,
    env: Vec<(String, String)>,
    /// The user offshoot runs as, when not the tests' own.
    user: Option<u32>,
}

/// Who runs offshoot in a test: the tests' own user, or an unprivileged one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum User {
    Own,
    /// `nobody` (65534) when the tests run as root; else the tests' own user, which
    /// is unprivileged already.
    Unprivileged,
}

/// The user that [`User::Unprivileged`] runs offshoot as, when the tests run as root.
pub const NOBODY: u32 = 65534;

/// Whether the tests run as root.
pub fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

/// A finished command: exit code and both streams as text.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// Asserts success and returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "command failed\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        &self.stdout
    }
}

/// Which wire dialect a test's worker speaks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dialect {
    Anthropic,
    Chat,
    Responses,
}

pub const DIALECTS: [Dialect; 3] = [Dialect::Anthropic, Dialect::Chat, Dialect::Responses];

impl TestWorkspace {
    /// A fresh home with a workspace made by `offshoot new`.
    pub fn new(name: &str) -> TestWorkspace {
        TestWorkspace::new_as(name, User::Own)
    }

    /// [`TestWorkspace::new`] with offshoot run as `user`.
    pub fn new_as(name: &str, user: User) -> TestWorkspace {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("temp root");
        let user = (user == User::Unprivileged && running_as_root()).then_some(NOBODY);
        if let Some(uid) = user {
            std::os::unix::fs::chown(&root, Some(uid), Some(uid)).expect("chown the test root");
        }
        let home = root.join("home");
        let ws = root.join("ws");
        let t = TestWorkspace { root, home, ws, env: Vec::new(), user };
        t.run_bare(&["new", t.ws.to_str().expect("utf-8")]).ok();
        t.set("retry.initial_backoff_ms", "5");
        t.set("retry.max_backoff_ms", "20");
        t
    }

    pub fn env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.into(), value.into()));
    }

    /// The binary with the test environment, not yet pointed at the workspace.
    pub fn command_bare(&self) -> Command {
        use std::os::unix::process::CommandExt;
        let mut c = super::clean::offshoot(&self.home, &self.root);
        if let Some(uid) = self.user {
            c.uid(uid).gid(uid);
        }
        c.env("NO_COLOR", "1")
            // The tests run inside offshoot's own repository: from here, no project is found
            // above the test's directory (tests of project mode make their own below it).
            .env("GIT_CEILING_DIRECTORIES", self.root.parent().unwrap_or(&self.root));
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    pub fn command(&self) -> Command {
        let mut c = self.command_bare();
        c.arg("-w").arg(&self.ws);
        c
    }

    /// Runs `args` with `input` on standard input.
    pub fn run_with_input(&self, args: &[&str], input: &[u8]) -> Run {
        use std::io::Write;
        let mut child = self
            .command()
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn offshoot");
        let mut stdin = child.stdin.take().expect("stdin");
        let input = input.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().expect("wait");
        let _ = writer.join();
        Run::from(out)
    }

    pub fn run_bare(&self, args: &[&str]) -> Run {
        Run::from(self.command_bare().args(args).output().expect("run offshoot"))
    }

    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.command().args(args).output().expect("run offshoot"))
    }

    /// `eval run` of `suite` with each of `configs` laid over, its report at `out`, and
    /// `extra` arguments, without `-w` (an eval makes workspaces of its own).
    pub fn eval_run(&self, suite: &Path, configs: &[&Path], out: &Path, extra: &[&str]) -> Run {
        let mut c = self.command_bare();
        c.args(["eval", "run", "--suite"]).arg(suite);
        for config in configs {
            c.arg("--config").arg(config);
        }
        c.arg("--out").arg(out).args(extra);
        Run::from(c.output().expect("run offshoot"))
    }

    pub fn set(&self, key: &str, value: &str) {
        self.run(&["config", "set", key, value]).ok();
    }

    /// Points the worker role at `server` speaking `dialect`, with a test key.
    pub fn use_server(&mut self, server: &Server, dialect: Dialect) {
        let (provider, url, var) = match dialect {
            Dialect::Anthropic => ("anthropic", server.url(), "ANTHROPIC_API_KEY"),
            Dialect::Chat => ("openai", format!("{}/v1", server.url()), "OPENAI_API_KEY"),
            Dialect::Responses => ("openai-responses", format!("{}/v1", server.url()), "OPENAI_API_KEY"),
        };
        self.set(&format!("providers.{provider}.base_url"), &url);
        self.set("roles.worker.provider", provider);
        self.env(var, "test-key");
    }

    /// Plain git on the harness's repository; its stdout.
    pub fn git(&self, args: &[&str]) -> String {
        self.git_in("repo.git", args)
    }

    /// Plain git on the harness's repository with `input` on its stdin; its stdout.
    pub fn git_with_input(&self, args: &[&str], input: &[u8]) -> String {
        use std::io::Write;
        let mut child = self
            .git_command("repo.git", &[])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("git");
        child.stdin.take().expect("stdin").write_all(input).expect("write");
        let o = child.wait_with_output().expect("git");
        assert!(o.status.success(), "git {args:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Plain git on the harness's repository with `vars` set; its stdout.
    pub fn git_env(&self, vars: &[(&str, &str)], args: &[&str]) -> String {
        let o = self.git_command("repo.git", vars).args(args).output().expect("git");
        assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn git_command(&self, name: &str, vars: &[(&str, &str)]) -> Command {
        let mut c = Command::new("git");
        c.env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "Mallory")
            .env("GIT_AUTHOR_EMAIL", "m@example.com")
            .env("GIT_COMMITTER_NAME", "Mallory")
            .env("GIT_COMMITTER_EMAIL", "m@example.com")
            .envs(vars.iter().copied())
            .args(["-c", "safe.directory=*"])
            .arg("--git-dir")
            .arg(self.ws.join(name));
        c
    }

    /// Plain git on the workspace's repository `name` (`repo.git`, `project.git`).
    pub fn git_in(&self, name: &str, args: &[&str]) -> String {
        let o = Command::new("git")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            // The workspace may belong to the test's unprivileged user.
            .args(["-c", "safe.directory=*"])
            .arg("--git-dir")
            .arg(self.ws.join(name))
            .args(args)
            .output()
            .expect("git");
        assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// A fresh workspace whose worker talks to a fresh scripted server in `dialect`.
    pub fn served(name: &str, dialect: Dialect) -> (Server, TestWorkspace) {
        TestWorkspace::served_as(name, dialect, User::Own)
    }

    /// [`TestWorkspace::served`] with offshoot run as `user`.
    pub fn served_as(name: &str, dialect: Dialect, user: User) -> (Server, TestWorkspace) {
        let server = Server::start();
        let mut t = TestWorkspace::new_as(name, user);
        t.use_server(&server, dialect);
        (server, t)
    }

    /// Whether offshoot runs as root here.
    pub fn as_root(&self) -> bool {
        self.user.is_none() && running_as_root()
    }

    /// The id of the first agent `ls` lists (the only one, in most tests).
    pub fn only_agent(&self) -> String {
        self.agents()[0]["id"].as_str().expect("an agent id").to_owned()
    }

    /// The id of the agent named `name`.
    pub fn id_of(&self, name: &str) -> String {
        let agents = self.agents();
        agents.iter().find(|a| a["name"] == name).expect("agent")["id"].as_str().expect("id").to_owned()
    }

    /// Every agent as `ls --json` describes it.
    pub fn agents(&self) -> Vec<serde_json::Value> {
        let out = self.run(&["ls", "--json"]);
        out.ok().lines().map(|l| serde_json::from_str(l).expect("json line")).collect()
    }

    /// The pid of the driver holding agent `id`, as its lock file names it.
    pub fn driver_pid(&self, id: &str) -> Option<u32> {
        let text = std::fs::read_to_string(self.ws.join("locks").join(id)).ok()?;
        text.split_whitespace().next()?.parse().ok()
    }

    /// [`TestWorkspace::driver_pid`] while that process runs (a zombie left for init to
    /// reap has ended).
    pub fn running_driver(&self, id: &str) -> Option<u32> {
        self.driver_pid(id).filter(|&p| running(p))
    }

    pub fn steps_dir(&self, id: &str) -> PathBuf {
        self.ws.join("steps").join(id)
    }

    /// Step records of an agent, in order: a directory `NNNN/` for a step under way,
    /// one file `NNNN.json` for one folded when it was over.
    pub fn step_records(&self, id: &str) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.steps_dir(id))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".json").unwrap_or(&name).parse::<u32>().is_ok()
            })
            .map(|e| e.path())
            .collect();
        v.sort();
        v
    }

    /// File `name` (`meta.json`, `tools/<call>/output.json`) of step `step`'s record,
    /// in whichever form the record is.
    pub fn step_file(&self, id: &str, step: usize, name: &str) -> Option<Vec<u8>> {
        let dir = self.steps_dir(id).join(format!("{step:04}"));
        if let Ok(text) = std::fs::read(dir.with_extension("json")) {
            let folded: serde_json::Value = serde_json::from_slice(&text).expect("a folded record is JSON");
            return match &folded["files"][name] {
                serde_json::Value::Null => None,
                serde_json::Value::String(s) => Some(s.clone().into_bytes()),
                other => Some(other.to_string().into_bytes()),
            };
        }
        std::fs::read(dir.join(name)).ok()
    }

    /// A JSON file of step `step`'s record (see [`TestWorkspace::step_file`]).
    pub fn step_json(&self, id: &str, step: usize, name: &str) -> serde_json::Value {
        let bytes = self.step_file(id, step, name).unwrap_or_else(|| panic!("step {step} of {id} has no {name}"));
        serde_json::from_slice(&bytes).expect("json")
    }
}

impl Drop for TestWorkspace {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// Whether `pid` is a running process (not gone, not a zombie).
pub fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
}
