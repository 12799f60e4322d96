//! `glob`: paths matching a pattern, .gitignore honoured, sorted and capped.

use std::sync::Mutex;

use globset::GlobBuilder;
use ignore::WalkState;
use serde_json::Value;

use super::grep::{relative, walker};
use super::{Stream, ToolEnv, ToolError, ToolOutput, read_path, str_arg};

/// Paths shown to the model; the rest are counted.
const SHOWN: usize = 500;

pub(super) fn run(env: &ToolEnv, input: &Value) -> Result<ToolOutput, ToolError> {
    let pattern = str_arg(input, "pattern")?;
    let path = input.get("path").and_then(Value::as_str).unwrap_or(".");
    let root = read_path(env, path)?;
    if !root.is_dir() {
        return Err(ToolError::ToModel(format!("`{path}` is not a directory")));
    }
    // A pattern without `/` matches file names anywhere; with one, whole paths.
    let whole_path = pattern.contains('/');
    let glob = GlobBuilder::new(pattern)
        .literal_separator(whole_path)
        .build()
        .map_err(|e| ToolError::ToModel(format!("`{pattern}` is not a valid glob: {e}")))?
        .compile_matcher();
    let found = Mutex::new(Vec::new());
    walker(&root, None, env.paths.clone())?.build_parallel().run(|| {
        let glob = glob.clone();
        let found = &found;
        let root = root.clone();
        Box::new(move |entry| {
            let Ok(entry) = entry else { return WalkState::Continue };
            if entry.depth() == 0 {
                return WalkState::Continue;
            }
            let rel = relative(&root, entry.path());
            let hit = if whole_path { glob.is_match(&rel) } else { glob.is_match(entry.file_name()) };
            if hit && let Ok(mut f) = found.lock() {
                let dir = entry.file_type().is_some_and(|t| t.is_dir());
                f.push(if dir { format!("{rel}/") } else { rel });
            }
            WalkState::Continue
        })
    });
    let mut found = found.into_inner().unwrap_or_default();
    found.sort();
    let total = found.len();
    let text: String = found.iter().take(SHOWN).map(|p| format!("{p}\n")).collect();
    let summary = match total {
        0 => format!("no paths match `{pattern}`"),
        n if n > SHOWN => format!("{n} paths match; showing the first {SHOWN}, {} more left out", n - SHOWN),
        n => format!("{n} paths match"),
    };
    Ok(ToolOutput { summary, streams: vec![Stream::whole("paths", text)], ..ToolOutput::default() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_anywhere_or_whole_paths() {
        let dir = std::env::temp_dir().join(format!("offshoot-glob-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("src/deep")).expect("dir");
        std::fs::create_dir_all(dir.join("ignored")).expect("dir");
        std::fs::write(dir.join(".gitignore"), "ignored/\n").expect("write");
        for f in ["src/a.rs", "src/deep/b.rs", "ignored/c.rs", "top.rs", "README.md"] {
            std::fs::write(dir.join(f), "x").expect("write");
        }
        let env = ToolEnv { cwd: dir.clone(), root: dir.clone(), ..Default::default() };
        let out = run(&env, &json!({"pattern": "*.rs"})).expect("glob");
        assert_eq!(out.summary, "3 paths match");
        assert_eq!(out.streams[0].text, "src/a.rs\nsrc/deep/b.rs\ntop.rs\n");
        let out = run(&env, &json!({"pattern": "src/*.rs"})).expect("glob");
        assert_eq!(out.streams[0].text, "src/a.rs\n");
        let out = run(&env, &json!({"pattern": "src/**/*.rs"})).expect("glob");
        assert_eq!(out.streams[0].text, "src/a.rs\nsrc/deep/b.rs\n");
        let out = run(&env, &json!({"pattern": "*.py"})).expect("glob");
        assert_eq!(out.summary, "no paths match `*.py`");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
