//! `apply_patch`: the `*** Begin Patch` … `*** End Patch` envelope (Add, Delete and
//! Update File, Move to, `@@` hunks, `*** End of File`). All or nothing: every file's
//! new content is computed in memory first; one hunk that does not match uniquely
//! names itself and no file is touched.

use serde_json::Value;

use super::{Kind, MAX_FILE_BYTES, Target, ToolEnv, ToolError, ToolOutput, str_arg};

#[derive(Debug, Clone, PartialEq)]
enum Line {
    Context(String),
    Remove(String),
    Add(String),
}

#[derive(Debug, Clone, PartialEq)]
struct Hunk {
    anchor: Option<String>,
    lines: Vec<Line>,
    end_of_file: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Add { path: String, lines: Vec<String> },
    Delete { path: String },
    Update { path: String, move_to: Option<String>, hunks: Vec<Hunk> },
}

/// Parses the envelope; errors name the line.
fn parse(patch: &str) -> Result<Vec<Op>, String> {
    let lines: Vec<&str> = patch.trim().lines().collect();
    if lines.first().map(|l| l.trim()) != Some("*** Begin Patch") {
        return Err("the patch must start with `*** Begin Patch`".into());
    }
    if lines.last().map(|l| l.trim()) != Some("*** End Patch") {
        return Err("the patch must end with `*** End Patch`".into());
    }
    let body = &lines[1..lines.len() - 1];
    let mut ops: Vec<Op> = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line = body[i];
        let at = i + 2;
        if let Some(path) = line.strip_prefix("*** Add File: ") {
            let mut content = Vec::new();
            i += 1;
            while i < body.len() && !body[i].starts_with("*** ") {
                let Some(text) = body[i].strip_prefix('+') else {
                    return Err(format!("line {}: every line of an added file starts with `+`", i + 2));
                };
                content.push(text.to_owned());
                i += 1;
            }
            ops.push(Op::Add { path: path.trim().to_owned(), lines: content });
        } else if let Some(path) = line.strip_prefix("*** Delete File: ") {
            ops.push(Op::Delete { path: path.trim().to_owned() });
            i += 1;
        } else if let Some(path) = line.strip_prefix("*** Update File: ") {
            i += 1;
            let mut move_to = None;
            if let Some(to) = body.get(i).and_then(|l| l.strip_prefix("*** Move to: ")) {
                move_to = Some(to.trim().to_owned());
                i += 1;
            }
            let mut hunks: Vec<Hunk> = Vec::new();
            while i < body.len() {
                let l = body[i];
                if l.trim() == "*** End of File" {
                    let Some(last) = hunks.last_mut() else {
                        return Err(format!("line {}: `*** End of File` before any hunk", i + 2));
                    };
                    last.end_of_file = true;
                    i += 1;
                    continue;
                }
                if l.starts_with("*** ") {
                    break;
                }
                if let Some(anchor) = l.strip_prefix("@@") {
                    let anchor = anchor.trim();
                    hunks.push(Hunk {
                        anchor: (!anchor.is_empty()).then(|| anchor.to_owned()),
                        lines: Vec::new(),
                        end_of_file: false,
                    });
                    i += 1;
                    continue;
                }
                let parsed = match l.chars().next() {
                    Some(' ') => Line::Context(l[1..].to_owned()),
                    Some('-') => Line::Remove(l[1..].to_owned()),
                    Some('+') => Line::Add(l[1..].to_owned()),
                    // Models often drop the space that marks a blank context line.
                    None => Line::Context(String::new()),
                    Some(_) => {
                        return Err(format!("line {}: a hunk line starts with ` `, `-` or `+`, not `{l}`", i + 2));
                    }
                };
                if hunks.is_empty() {
                    hunks.push(Hunk { anchor: None, lines: Vec::new(), end_of_file: false });
                }
                if let Some(h) = hunks.last_mut() {
                    h.lines.push(parsed);
                }
                i += 1;
            }
            if hunks.is_empty() && move_to.is_none() {
                return Err(format!("line {at}: `*** Update File: {}` has no hunks", path.trim()));
            }
            ops.push(Op::Update { path: path.trim().to_owned(), move_to, hunks });
        } else if line.trim().is_empty() {
            i += 1;
        } else {
            return Err(format!(
                "line {at}: expected `*** Add File:`, `*** Delete File:` or `*** Update File:`, found `{line}`"
            ));
        }
    }
    if ops.is_empty() {
        return Err("the patch changes no file".into());
    }
    Ok(ops)
}

/// Where the old side of `hunk` matches in `lines` at or after `from`, trying an
/// exact match, then ignoring trailing whitespace, then ignoring all surrounding
/// whitespace.
fn find(lines: &[String], old: &[&str], from: usize, end_of_file: bool) -> Vec<usize> {
    let fits = |eq: &dyn Fn(&str, &str) -> bool| -> Vec<usize> {
        if old.len() > lines.len() {
            return Vec::new();
        }
        let last = lines.len() - old.len();
        let starts: Vec<usize> = if end_of_file { vec![last] } else { (from.min(last + 1)..=last).collect() };
        starts.into_iter().filter(|&s| s >= from && old.iter().enumerate().all(|(k, o)| eq(&lines[s + k], o))).collect()
    };
    let exact = fits(&|a, b| a == b);
    if !exact.is_empty() {
        return exact;
    }
    let trailing = fits(&|a, b| a.trim_end() == b.trim_end());
    if !trailing.is_empty() {
        return trailing;
    }
    fits(&|a, b| a.trim() == b.trim())
}

/// The file's new text after `hunks`, or why hunk N failed.
fn apply_hunks(path: &str, text: &str, hunks: &[Hunk]) -> Result<String, String> {
    let trailing_newline = text.ends_with('\n');
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut cursor = 0;
    for (n, hunk) in hunks.iter().enumerate() {
        let name = match &hunk.anchor {
            Some(a) => format!("hunk {} of `{path}` (@@ {a})", n + 1),
            None => format!("hunk {} of `{path}`", n + 1),
        };
        if let Some(anchor) = &hunk.anchor {
            let found = lines.iter().enumerate().skip(cursor).find(|(_, l)| l.trim() == anchor.trim()).map(|(i, _)| i);
            match found {
                Some(i) => cursor = i,
                None => return Err(format!("{name}: the line `{anchor}` was not found")),
            }
        }
        let old: Vec<&str> = hunk
            .lines
            .iter()
            .filter_map(|l| match l {
                Line::Context(s) | Line::Remove(s) => Some(s.as_str()),
                Line::Add(_) => None,
            })
            .collect();
        let new: Vec<String> = hunk
            .lines
            .iter()
            .filter_map(|l| match l {
                Line::Context(s) | Line::Add(s) => Some(s.clone()),
                Line::Remove(_) => None,
            })
            .collect();
        let at = if old.is_empty() {
            if hunk.end_of_file || hunk.anchor.is_none() { lines.len() } else { cursor + 1 }
        } else {
            let matches = find(&lines, &old, cursor, hunk.end_of_file);
            match matches.as_slice() {
                [one] => *one,
                [] => {
                    let first = old.first().copied().unwrap_or("");
                    return Err(format!(
                        "{name} does not match the file: no place has its {} old lines (starting `{first}`)",
                        old.len()
                    ));
                }
                many => {
                    let at: Vec<String> = many.iter().map(|m| (m + 1).to_string()).collect();
                    return Err(format!(
                        "{name} matches {} places (lines {}); add context lines or an @@ line to pick one",
                        many.len(),
                        at.join(", ")
                    ));
                }
            }
        };
        let len = new.len();
        lines.splice(at..at + old.len(), new);
        cursor = at + len;
    }
    let mut out = lines.join("\n");
    if trailing_newline || (text.is_empty() && !out.is_empty()) {
        out.push('\n');
    }
    Ok(out)
}

/// One file change, computed before anything is written.
enum Change {
    Write { target: Target, text: String },
    Remove { target: Target },
}

pub(super) fn run(env: &ToolEnv, input: &Value) -> Result<ToolOutput, ToolError> {
    let patch = str_arg(input, "patch")?;
    let refuse = |why: String| ToolError::ToModel(format!("patch not applied, no file changed: {why}"));
    let refused = |e: ToolError| refuse(e.to_string());
    let ops = parse(patch).map_err(refuse)?;
    let mut changes = Vec::new();
    let mut report = Vec::new();
    for op in &ops {
        match op {
            Op::Add { path, lines } => {
                let target = Target::to_write(env, path).map_err(refused)?;
                if target.kind().map_err(refused)?.is_some() {
                    return Err(refuse(format!("`{path}` already exists; use `*** Update File:`")));
                }
                let mut text = lines.join("\n");
                text.push('\n');
                changes.push(Change::Write { target, text });
                report.push(format!("A {path}"));
            }
            Op::Delete { path } => {
                let target = Target::to_write(env, path).map_err(refused)?;
                match target.kind().map_err(refused)? {
                    Some(Kind::File { size, .. }) if size > MAX_FILE_BYTES => {
                        // Undone, it could not be put back.
                        return Err(refuse(format!(
                            "`{path}` is {size} bytes, over the {MAX_FILE_BYTES}-byte limit of a patch; delete it with `bash`"
                        )));
                    }
                    Some(Kind::File { .. }) => {}
                    _ => return Err(refuse(format!("`{path}` cannot be deleted: there is no such file"))),
                }
                changes.push(Change::Remove { target });
                report.push(format!("D {path}"));
            }
            Op::Update { path, move_to, hunks } => {
                let target = Target::to_write(env, path).map_err(refused)?;
                let bytes = target.read(MAX_FILE_BYTES).map_err(refused)?;
                let text = String::from_utf8(bytes).map_err(|_| refuse(format!("`{path}` is not UTF-8 text")))?;
                let updated = apply_hunks(path, &text, hunks).map_err(refuse)?;
                match move_to {
                    Some(to) => {
                        let dest = Target::to_write(env, to).map_err(refused)?;
                        if dest.kind().map_err(refused)?.is_some() {
                            return Err(refuse(format!("cannot move `{path}` to `{to}`: it already exists")));
                        }
                        changes.push(Change::Write { target: dest, text: updated });
                        changes.push(Change::Remove { target });
                        report.push(format!("R {path} -> {to}"));
                    }
                    None => {
                        changes.push(Change::Write { target, text: updated });
                        report.push(format!("M {path}"));
                    }
                }
            }
        }
    }
    write_all(&changes).map_err(refused)?;
    Ok(ToolOutput::summary(format!("applied: {}", report.join(", "))))
}

/// Writes every change; if one fails, restores what was already changed (the
/// failing one included: it may have been done in part).
fn write_all(changes: &[Change]) -> Result<(), ToolError> {
    let mut undo: Vec<(&Target, Option<Vec<u8>>)> = Vec::new();
    for change in changes {
        let target = match change {
            Change::Write { target, .. } | Change::Remove { target } => target,
        };
        undo.push((target, target.read(MAX_FILE_BYTES).ok()));
        let result = match change {
            Change::Write { target, text } => target.write(text.as_bytes()),
            Change::Remove { target } => target.remove(),
        };
        if let Err(e) = result {
            for (t, before) in undo.into_iter().rev() {
                let _ = match before {
                    Some(bytes) => t.write(&bytes),
                    None => t.remove(),
                };
            }
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn setup(name: &str, files: &[(&str, &str)]) -> (ToolEnv, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("offshoot-patch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (p, t) in files {
            let full = dir.join(p);
            std::fs::create_dir_all(full.parent().expect("parent")).expect("dir");
            std::fs::write(full, t).expect("write");
        }
        (ToolEnv { cwd: dir.clone(), root: dir.clone(), ..Default::default() }, dir)
    }

    fn read(dir: &std::path::Path, p: &str) -> String {
        std::fs::read_to_string(dir.join(p)).unwrap_or_else(|_| "<missing>".into())
    }

    #[test]
    fn adds_deletes_updates_and_moves() {
        let (env, dir) = setup(
            "ok",
            &[("src/a.rs", "fn a() {\n    1\n}\n\nfn b() {\n    2\n}\n"), ("old.txt", "bye\n"), ("m.txt", "x\ny\n")],
        );
        let patch = "*** Begin Patch\n*** Add File: new/n.txt\n+hello\n+world\n*** Delete File: old.txt\n\
                     *** Update File: src/a.rs\n@@ fn b() {\n-    2\n+    20\n*** Update File: m.txt\n*** Move to: moved.txt\n@@\n x\n-y\n+z\n*** End of File\n*** End Patch";
        let out = run(&env, &json!({"patch": patch})).expect("applies");
        assert_eq!(out.summary, "applied: A new/n.txt, D old.txt, M src/a.rs, R m.txt -> moved.txt");
        assert_eq!(read(&dir, "new/n.txt"), "hello\nworld\n");
        assert_eq!(read(&dir, "old.txt"), "<missing>");
        assert_eq!(read(&dir, "src/a.rs"), "fn a() {\n    1\n}\n\nfn b() {\n    20\n}\n");
        assert_eq!(read(&dir, "moved.txt"), "x\nz\n");
        assert_eq!(read(&dir, "m.txt"), "<missing>");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn one_bad_hunk_among_several_files_changes_nothing_and_names_itself() {
        let (env, dir) = setup("bad", &[("a.txt", "one\ntwo\n"), ("b.txt", "three\nfour\n")]);
        let patch = "*** Begin Patch\n*** Update File: a.txt\n-one\n+ONE\n*** Add File: c.txt\n+new\n\
                     *** Update File: b.txt\n@@\n three\n-five\n+FIVE\n*** End Patch";
        let err = run(&env, &json!({"patch": patch})).expect_err("refused");
        assert_eq!(
            err.to_string(),
            "patch not applied, no file changed: hunk 1 of `b.txt` does not match the file: no place has its 2 old lines (starting `three`)"
        );
        assert_eq!(
            (read(&dir, "a.txt"), read(&dir, "b.txt"), read(&dir, "c.txt")),
            ("one\ntwo\n".into(), "three\nfour\n".into(), "<missing>".into())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_ambiguous_hunk_is_refused_until_an_anchor_picks_one() {
        let (env, dir) = setup("twice", &[("t.txt", "fn a\n  x\nfn b\n  x\n")]);
        let patch = "*** Begin Patch\n*** Update File: t.txt\n-  x\n+  y\n*** End Patch";
        let err = run(&env, &json!({"patch": patch})).expect_err("ambiguous");
        assert!(err.to_string().contains("hunk 1 of `t.txt` matches 2 places (lines 2, 4)"), "{err}");
        let patch = "*** Begin Patch\n*** Update File: t.txt\n@@ fn b\n-  x\n+  y\n*** End Patch";
        run(&env, &json!({"patch": patch})).expect("anchored");
        assert_eq!(read(&dir, "t.txt"), "fn a\n  x\nfn b\n  y\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn malformed_envelopes_name_the_line() {
        assert_eq!(parse("hello").expect_err("no begin"), "the patch must start with `*** Begin Patch`");
        let err = parse("*** Begin Patch\n*** Frobnicate: x\n*** End Patch").expect_err("bad op");
        assert_eq!(
            err,
            "line 2: expected `*** Add File:`, `*** Delete File:` or `*** Update File:`, found `*** Frobnicate: x`"
        );
        let err = parse("*** Begin Patch\n*** Add File: x\nnot plus\n*** End Patch").expect_err("bad add");
        assert_eq!(err, "line 3: every line of an added file starts with `+`");
    }
}
