//! The built-in tools through a scripted conversation over real HTTP, and through
//! `offshoot tool`.

use std::io::Write;
use std::process::Stdio;

use serde_json::json;

use crate::support::server::{Server, Turn};
use crate::support::workspace::{Dialect, TestWorkspace};

fn call(id: &str, name: &str, input: serde_json::Value) -> Turn {
    Turn::call(id, name, &input.to_string())
}

/// The text of the tool result the model got for call `n` (1-based) of the run.
fn result_text(server: &Server, n: usize) -> String {
    let body = &server.requests()[n].body;
    let last = body["messages"].as_array().expect("messages").last().expect("last").clone();
    last["content"][0]["content"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn write_edit_and_patch_through_a_conversation() {
    let server = Server::start();
    let mut t = TestWorkspace::new("tools-files");
    t.use_server(&server, Dialect::Anthropic);
    let patch = "*** Begin Patch\n*** Update File: notes.md\n@@\n # Notes\n-draft\n+final\n*** Add File: todo.md\n+- ship\n*** End Patch";
    let bad_patch =
        "*** Begin Patch\n*** Update File: notes.md\n-nothing like this\n+x\n*** Delete File: todo.md\n*** End Patch";
    server.push_turns([
        call("c1", "write_file", json!({"path": "notes.md", "content": "# Notes\ndraft\ndraft\n"})),
        call("c2", "edit_file", json!({"path": "notes.md", "old_string": "draft", "new_string": "x"})),
        call("c3", "edit_file", json!({"path": "notes.md", "old_string": "draft\ndraft", "new_string": "draft"})),
        call("c4", "apply_patch", json!({"patch": patch})),
        call("c5", "apply_patch", json!({"patch": bad_patch})),
        Turn::text("files done"),
    ]);
    let run = t.run(&["prompt", "--name", "Files", "edit some files"]);
    assert!(run.ok().contains("files done"));
    assert_eq!(result_text(&server, 1), "created `notes.md` (20 bytes, 3 lines)");
    assert!(
        result_text(&server, 2).contains("occurs 2 times in `notes.md` (at lines 2, 3)"),
        "{}",
        result_text(&server, 2)
    );
    assert_eq!(result_text(&server, 3), "replaced 1 occurrence in `notes.md` (at line 2)");
    assert_eq!(result_text(&server, 4), "applied: M notes.md, A todo.md");
    assert!(result_text(&server, 5).starts_with("patch not applied, no file changed: hunk 1 of `notes.md`"));
    // Each change is in the agent's branch; the refused patch deleted nothing.
    let id = t.agents()[0]["id"].as_str().expect("id").to_owned();
    assert_eq!(t.git(&["show", &format!("agents/{id}:notes.md")]), "# Notes\nfinal\n");
    assert_eq!(t.git(&["show", &format!("agents/{id}:todo.md")]), "- ship\n");
}

#[test]
fn offshoot_tool_runs_a_builtin_on_stdin_json() {
    let t = TestWorkspace::new("tool-verb");
    let dir = t.root.join("play");
    std::fs::create_dir_all(&dir).expect("dir");
    let run = |name: &str, input: &str| {
        let mut child = t
            .command()
            .args(["tool", name])
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
        let out = child.wait_with_output().expect("wait");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, _) = run("write_file", r#"{"path": "x.txt", "content": "a\nb\n"}"#);
    assert_eq!((code, stdout.as_str()), (Some(0), "created `x.txt` (4 bytes, 2 lines)\n"));
    let (code, stdout, _) = run("read_file", r#"{"path": "x.txt"}"#);
    assert_eq!(code, Some(0));
    assert_eq!(stdout, "`x.txt`: lines 1-2 of 2\n<content>\n     1\ta\n     2\tb\n</content>\n");
    let (code, _, stderr) = run("edit_file", r#"{"path": "x.txt", "old_string": "zzz", "new_string": "y"}"#);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("`old_string` was not found in `x.txt`"), "{stderr}");
    let (code, _, stderr) = run("teleport", "{}");
    assert_eq!(code, Some(2));
    assert!(stderr.contains("tool `teleport` does not exist") && stderr.contains("hint: tools: bash"), "{stderr}");
    let (code, _, stderr) = run("bash", "not json");
    assert_eq!(code, Some(2));
    assert!(stderr.contains("the input on stdin is not JSON"), "{stderr}");
    let list = t.run(&["tool", "--list"]);
    for name in ["bash", "read_file", "write_file", "edit_file", "apply_patch"] {
        assert!(list.ok().contains(&format!("{name}\n")), "{name} missing from --list");
    }
}
