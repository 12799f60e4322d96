//! The README walked as a new user would: every `offshoot` command of its shell blocks,
//! in order, on a fresh home (no identity, no key but the one the README exports), the
//! scripted server standing in for the model. Placeholders are filled the way a reader
//! would (`<agent>` with the agent just made, `…` with words); the chat (`offshoot`,
//! `offshoot -c`) has end-to-end tests of its own in a terminal (live.rs), and the
//! commands that never end (`log -f`, `attach`) are run for a moment and must not fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::server::{Server, Turn};
use crate::support::workspace::TestWorkspace;

/// The README's shell lines, in order: continuations joined, comments dropped.
fn readme_lines() -> Vec<String> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README");
    let mut lines = Vec::new();
    let mut inside = false;
    let mut joined = String::new();
    for line in text.lines() {
        if line.starts_with("```") {
            inside = line == "```sh";
            continue;
        }
        if !inside || line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        // A comment starts at two or more blanks and `#` (never inside the commands here).
        let command = line.split("  #").next().unwrap_or(line).trim_end();
        match command.strip_suffix('\\') {
            Some(part) => joined.push_str(part),
            None => {
                joined.push_str(command);
                lines.push(std::mem::take(&mut joined).trim().to_owned());
            }
        }
    }
    lines
}

/// The newest agent of the workspace `cwd` selects: its name and id.
fn newest(run: &dyn Fn(&str) -> std::process::Output) -> (String, String) {
    let ls = run("offshoot --json ls");
    let last = String::from_utf8_lossy(&ls.stdout).lines().last().map(str::to_owned).unwrap_or_default();
    let agent: serde_json::Value = serde_json::from_str(&last).unwrap_or_default();
    (agent["name"].as_str().unwrap_or_default().to_owned(), agent["id"].as_str().unwrap_or_default().to_owned())
}

#[test]
fn the_readmes_commands_work_as_printed_in_order_on_a_fresh_machine() {
    let t = TestWorkspace::new("readme-walk");
    let server = Server::start();
    // Two commands and an answer for every conversation: enough steps for `show --step 3`.
    server.respond_with(|text| match text.matches("\"tool_use_id\"").count() {
        0 => Turn::bash("c1", "echo one > one.txt"),
        1 => Turn::bash("c2", "echo two"),
        _ => Turn::text("done"),
    });
    let project = t.root.join("src").join("project");
    std::fs::create_dir_all(&project).expect("project");
    crate::project::git(&project, &["init", "-q", "-b", "main"]);
    std::fs::write(project.join("parser.rs"), "fn parse() {}\n// TODO: tests\n").expect("file");
    // Build output, ignored, as a user's checkout has it (`prompt --copy-ignored target`).
    std::fs::write(project.join(".gitignore"), "/target\n").expect("ignore");
    std::fs::create_dir_all(project.join("target/debug")).expect("target");
    std::fs::write(project.join("target/debug/parser"), "built").expect("output");
    crate::project::git(&project, &["add", "."]);
    crate::project::git(&project, &["commit", "-q", "-m", "start"]);
    let bin = t.root.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    // The reader's own guard, which the README's hook names: it lets everything pass.
    std::fs::create_dir_all(t.home.join("bin")).expect("home bin");
    std::fs::write(t.home.join("bin/guard.sh"), "#!/bin/sh\ncat > /dev/null\nexit 0\n").expect("guard");
    Command::new("chmod").args(["+x"]).arg(t.home.join("bin/guard.sh")).status().expect("chmod");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_offshoot"), bin.join("offshoot")).expect("link");

    let mut cwd: PathBuf = t.root.clone();
    let mut key = String::new();
    let (mut agent, mut id) = (String::new(), String::new());
    let mut walked = 0;
    for line in readme_lines() {
        // Building and testing offshoot itself (the tests are what runs this).
        if line.starts_with("cargo ") || line.starts_with(".ci/") {
            continue;
        }
        if let Some(assignment) = line.strip_prefix("export ") {
            let (name, _) = assignment.split_once('=').expect("NAME=value");
            assert_eq!(name, "ANTHROPIC_API_KEY", "{line}");
            key = "test-key".into();
            continue;
        }
        if let Some(dir) = line.strip_prefix("cd ") {
            assert_eq!(dir, "~/src/project", "{line}");
            cwd = project.clone();
            continue;
        }
        // The chat needs a terminal: live.rs drives it in one.
        if line == "offshoot" || line == "offshoot -c" {
            continue;
        }
        let command = line
            .replace("<agent>", &agent)
            .replace("agents/<id>", &format!("agents/{id}"))
            .replace('…', "a few words")
            .replace("~/src/project", &project.display().to_string());
        let run_in = |dir: &Path, command: &str| {
            let mut c = Command::new("sh");
            c.args(["-c", command])
                .current_dir(dir)
                .env_clear()
                .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
                .env("HOME", &t.home)
                .env("OFFSHOOT_HOME", &t.home)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CEILING_DIRECTORIES", t.root.parent().unwrap_or(&t.root))
                .env("ANTHROPIC_BASE_URL", server.url())
                .env("NO_COLOR", "1");
            if !key.is_empty() {
                c.env("ANTHROPIC_API_KEY", &key);
            }
            c
        };
        // Commands that follow until interrupted: a moment, then Ctrl-C.
        if command.contains(" log -f ") || command.starts_with("offshoot attach ") {
            let mut child = run_in(&cwd, &command)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn");
            std::thread::sleep(Duration::from_millis(800));
            assert!(child.try_wait().expect("wait").is_none(), "`{command}` ended at once");
            let _ = child.kill();
            let _ = child.wait();
            walked += 1;
            continue;
        }
        let out = run_in(&cwd, &command).output().expect("run");
        assert!(
            out.status.success(),
            "`{command}` (README: `{line}`) failed in {}:\nstdout: {}\nstderr: {}",
            cwd.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        walked += 1;
        if command.starts_with("offshoot prompt") || command.starts_with("offshoot fork") {
            (agent, id) = newest(&|c: &str| run_in(&cwd, c).output().expect("ls"));
            assert!(!agent.is_empty(), "no agent after `{command}`");
        }
    }
    assert!(walked >= 20, "only {walked} commands walked: the README's blocks were not found");
}
