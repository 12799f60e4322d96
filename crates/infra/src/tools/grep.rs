//! `grep`: regex search over files, on ripgrep's crates: .gitignore honoured,
//! hidden and binary files skipped, results sorted and capped with a count of the rest.

use std::path::Path;
use std::sync::{Arc, Mutex};

use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::overrides::OverrideBuilder;
use ignore::{WalkBuilder, WalkState};
use serde_json::Value;

use super::{Beneath, Kind, PathPolicy, Stream, ToolEnv, ToolError, ToolOutput, read_path, str_arg};

/// Matches shown to the model; the rest are counted.
const SHOWN: usize = 200;
/// Matches kept in memory for sorting; beyond this only the count grows.
const KEPT: usize = 20_000;
/// Longest matching line shown, in characters.
const LINE_CHARS: usize = 300;

#[derive(Default)]
struct Found {
    hits: Vec<(String, u64, String)>,
    total: usize,
    files: std::collections::BTreeSet<String>,
}

pub(super) fn run(env: &ToolEnv, input: &Value) -> Result<ToolOutput, ToolError> {
    let pattern = str_arg(input, "pattern")?;
    let path = input.get("path").and_then(Value::as_str).unwrap_or(".");
    let glob = input.get("glob").and_then(Value::as_str);
    let ignore_case = input.get("ignore_case").and_then(Value::as_bool).unwrap_or(false);
    let root = read_path(env, path)?;
    if !root.exists() {
        return Err(ToolError::ToModel(format!("`{path}` does not exist")));
    }
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(ignore_case)
        .build(pattern)
        .map_err(|e| ToolError::ToModel(format!("`{pattern}` is not a valid regex: {e}")))?;
    let walker = walker(&root, glob, env.paths.clone())?;
    let found = Mutex::new(Found::default());
    let door = everywhere()?;
    walker.build_parallel().run(|| {
        let matcher = matcher.clone();
        let found = &found;
        let root = root.clone();
        let door = door.clone();
        let mut searcher = SearcherBuilder::new().binary_detection(BinaryDetection::quit(0)).line_number(true).build();
        Box::new(move |entry| {
            let Ok(entry) = entry else { return WalkState::Continue };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            // Through the door: a link swapped in since the walk saw the file is refused.
            let Ok(file) =
                entry.path().strip_prefix("/").map_err(drop).and_then(|rel| door.open_file(rel).map_err(drop))
            else {
                return WalkState::Continue;
            };
            let shown = relative(&root, entry.path());
            let mut local = Vec::new();
            let _ = searcher.search_file(
                &matcher,
                &file,
                Lossy(|line, text| {
                    let text: String = text.trim_end_matches(['\n', '\r']).chars().take(LINE_CHARS).collect();
                    local.push((shown.clone(), line, text));
                    Ok(true)
                }),
            );
            if !local.is_empty()
                && let Ok(mut f) = found.lock()
            {
                f.total += local.len();
                f.files.insert(shown);
                let room = KEPT.saturating_sub(f.hits.len());
                f.hits.extend(local.into_iter().take(room));
            }
            WalkState::Continue
        })
    });
    let mut found = found.into_inner().unwrap_or_default();
    found.hits.sort();
    let mut text = String::new();
    for (file, line, hit) in found.hits.iter().take(SHOWN) {
        text.push_str(&format!("{file}:{line}:{hit}\n"));
    }
    let files = found.files.len();
    let mut summary = format!(
        "{} in {}",
        crate::words::count(found.total as u64, "match", "matches"),
        crate::words::count(files as u64, "file", "files")
    );
    if found.total > SHOWN {
        summary.push_str(&format!(
            "; showing the first {SHOWN} by path, {} more left out (narrow the pattern, `path` or `glob`)",
            found.total - SHOWN
        ));
    }
    if found.total == 0 {
        summary = format!("no matches for `{pattern}`");
    }
    Ok(ToolOutput { summary, streams: vec![Stream::whole("matches", text)], ..ToolOutput::default() })
}

/// The filesystem's root as a door, for the walks' reads (their paths are resolved).
fn everywhere() -> Result<Arc<Beneath>, ToolError> {
    Beneath::open(Path::new("/")).map(Arc::new).map_err(|e| ToolError::ToModel(format!("cannot search: {e}")))
}

/// Whether directory `dir` keeps ignore files the walker can read as files (a FIFO
/// or a link there would make it block or read elsewhere; such a directory is not
/// searched). Only places the agent can write are looked at: elsewhere the ignore
/// files are the user's.
fn plain_ignore_files(door: &Beneath, dir: &Path, paths: Option<&PathPolicy>) -> bool {
    if !paths.is_some_and(|p| p.writable.iter().any(|w| dir.starts_with(w))) {
        return true;
    }
    let Ok(dir) = dir.strip_prefix("/") else { return false };
    [".gitignore", ".ignore", ".rgignore"]
        .iter()
        .all(|name| matches!(door.kind(&dir.join(name)), Ok(None) | Ok(Some(Kind::File { .. }))))
}

/// A .gitignore-aware walker over `root`, restricted to `glob` when given, that
/// never enters what `paths` forbids reading, nor a directory of the agent's whose
/// ignore files are not plain files. (`.git/info/exclude` is not read: the agent
/// writes its git directory.)
pub(super) fn walker(
    root: &Path,
    glob: Option<&str>,
    paths: Option<Arc<PathPolicy>>,
) -> Result<WalkBuilder, ToolError> {
    let door = everywhere()?;
    // The walker reads the ignore files of the root's ancestors too.
    if let Some(blocked) = root.ancestors().find(|d| !plain_ignore_files(&door, d, paths.as_deref())) {
        return Err(ToolError::ToModel(format!(
            "{} holds an ignore file that is not a regular file (a FIFO or a link); nothing was searched",
            blocked.display()
        )));
    }
    let mut builder = WalkBuilder::new(root);
    builder
        .require_git(false)
        .git_exclude(false)
        .threads(std::thread::available_parallelism().map_or(2, |n| n.get().min(8)));
    builder.filter_entry(move |entry| {
        let policy = paths.as_deref();
        policy.is_none_or(|p| p.may_read(entry.path()))
            && (!entry.file_type().is_some_and(|t| t.is_dir()) || plain_ignore_files(&door, entry.path(), policy))
    });
    if let Some(glob) = glob {
        let mut overrides = OverrideBuilder::new(root);
        overrides.add(glob).map_err(|e| ToolError::ToModel(format!("`{glob}` is not a valid glob: {e}")))?;
        let built = overrides.build().map_err(|e| ToolError::ToModel(format!("`{glob}` is not a valid glob: {e}")))?;
        builder.overrides(built);
    }
    Ok(builder)
}

/// `path` shown relative to the search root (the root itself when they are equal).
pub(super) fn relative(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
        _ => path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn searches_honouring_gitignore_and_skipping_binaries() {
        let dir = std::env::temp_dir().join(format!("offshoot-grep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("src")).expect("dir");
        std::fs::write(dir.join(".gitignore"), "target/\n").expect("write");
        std::fs::create_dir_all(dir.join("target")).expect("dir");
        std::fs::write(dir.join("target/out.txt"), "needle in build output\n").expect("write");
        std::fs::write(dir.join("src/a.rs"), "fn main() {\n    let needle = 1;\n}\n").expect("write");
        std::fs::write(dir.join("src/b.md"), "A Needle here\n").expect("write");
        std::fs::write(dir.join("blob.bin"), b"needle\x00\x01\x02").expect("write");
        let env = ToolEnv { cwd: dir.clone(), root: dir.clone(), ..Default::default() };
        let out = run(&env, &json!({"pattern": "needle"})).expect("grep");
        assert_eq!(out.summary, "1 match in 1 file");
        assert_eq!(out.streams[0].text, "src/a.rs:2:    let needle = 1;\n");
        let out = run(&env, &json!({"pattern": "needle", "ignore_case": true, "glob": "*.md"})).expect("grep");
        assert_eq!(out.streams[0].text, "src/b.md:1:A Needle here\n");
        let err = run(&env, &json!({"pattern": "("})).expect_err("bad regex");
        assert!(err.to_string().starts_with("`(` is not a valid regex"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn caps_results_and_counts_the_rest() {
        let dir = std::env::temp_dir().join(format!("offshoot-grep-cap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("many.txt"), "hit\n".repeat(250)).expect("write");
        let env = ToolEnv { cwd: dir.clone(), root: dir.clone(), ..Default::default() };
        let out = run(&env, &json!({"pattern": "hit"})).expect("grep");
        assert_eq!(
            out.summary,
            "250 matches in 1 file; showing the first 200 by path, 50 more left out (narrow the pattern, `path` or `glob`)"
        );
        assert_eq!(out.streams[0].text.lines().count(), 200);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
