//! `edit_file`: exact string replacement in one file. No match, or several matches
//! without `replace_all`, is an error that says how many and where; nothing changes.

use serde_json::Value;

use super::{MAX_FILE_BYTES, Target, ToolEnv, ToolError, ToolOutput, str_arg};

pub(super) fn run(env: &ToolEnv, input: &Value) -> Result<ToolOutput, ToolError> {
    let path = str_arg(input, "path")?;
    let old = str_arg(input, "old_string")?;
    let new = str_arg(input, "new_string")?;
    let replace_all = input.get("replace_all").and_then(Value::as_bool).unwrap_or(false);
    if old.is_empty() {
        return Err(ToolError::ToModel("`old_string` is empty; to create a file use `write_file`".into()));
    }
    if old == new {
        return Err(ToolError::ToModel("`old_string` and `new_string` are the same; nothing to change".into()));
    }
    let target = Target::to_write(env, path)?;
    let bytes = target.read(MAX_FILE_BYTES)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| ToolError::ToModel(format!("`{path}` is not UTF-8 text; it was not edited")))?;
    let starts: Vec<usize> = text.match_indices(old).map(|(i, _)| i).collect();
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    match starts.len() {
        0 => {
            return Err(ToolError::ToModel(format!(
                "`old_string` was not found in `{path}`; read the file and copy the text exactly, whitespace included"
            )));
        }
        1 => {}
        n if !replace_all => {
            let lines: Vec<String> = starts.iter().map(|&s| line_of(s).to_string()).collect();
            return Err(ToolError::ToModel(format!(
                "`old_string` occurs {n} times in `{path}` (at lines {}); include more surrounding text to make it unique, or set `replace_all`",
                lines.join(", ")
            )));
        }
        _ => {}
    }
    let replaced = if replace_all { text.replace(old, new) } else { text.replacen(old, new, 1) };
    target.write(replaced.as_bytes())?;
    let lines: Vec<String> = starts.iter().map(|&s| line_of(s).to_string()).collect();
    let count = starts.len();
    let noun = if count == 1 { "occurrence" } else { "occurrences" };
    Ok(ToolOutput::summary(format!("replaced {count} {noun} in `{path}` (at line {})", lines.join(", "))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn setup(name: &str, text: &str) -> (ToolEnv, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("offshoot-edit-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("f.txt"), text).expect("write");
        (ToolEnv { cwd: dir.clone(), root: dir.clone(), ..Default::default() }, dir)
    }

    #[test]
    fn two_matches_change_nothing_and_say_where() {
        let (env, dir) = setup("two", "a = 1\nb = 2\na = 1\n");
        let err =
            run(&env, &json!({"path": "f.txt", "old_string": "a = 1", "new_string": "a = 3"})).expect_err("ambiguous");
        assert_eq!(
            err.to_string(),
            "`old_string` occurs 2 times in `f.txt` (at lines 1, 3); include more surrounding text to make it unique, or set `replace_all`"
        );
        assert_eq!(std::fs::read_to_string(dir.join("f.txt")).expect("read"), "a = 1\nb = 2\na = 1\n");
        let out =
            run(&env, &json!({"path": "f.txt", "old_string": "a = 1", "new_string": "a = 3", "replace_all": true}))
                .expect("all");
        assert_eq!(out.summary, "replaced 2 occurrences in `f.txt` (at line 1, 3)");
        assert_eq!(std::fs::read_to_string(dir.join("f.txt")).expect("read"), "a = 3\nb = 2\na = 3\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_match_is_an_error_and_one_match_is_replaced() {
        let (env, dir) = setup("one", "fn main() {}\n");
        let err = run(&env, &json!({"path": "f.txt", "old_string": "fn  main", "new_string": "x"})).expect_err("none");
        assert!(err.to_string().starts_with("`old_string` was not found in `f.txt`"));
        let out = run(&env, &json!({"path": "f.txt", "old_string": "{}", "new_string": "{ run() }"})).expect("one");
        assert_eq!(out.summary, "replaced 1 occurrence in `f.txt` (at line 1)");
        assert_eq!(std::fs::read_to_string(dir.join("f.txt")).expect("read"), "fn main() { run() }\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
