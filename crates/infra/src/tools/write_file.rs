//! `write_file`: create or overwrite one file with the given content.

use serde_json::Value;

use super::{Kind, Target, ToolEnv, ToolError, ToolOutput, str_arg};

pub(super) fn run(env: &ToolEnv, input: &Value) -> Result<ToolOutput, ToolError> {
    let path = str_arg(input, "path")?;
    let content = str_arg(input, "content")?;
    let target = Target::to_write(env, path)?;
    let existed = match target.kind() {
        Ok(Some(Kind::Dir)) => return Err(ToolError::ToModel(format!("`{path}` is a directory; give a file path"))),
        Ok(found) => found.is_some(),
        // A link above it: the write says so.
        Err(_) => false,
    };
    target.write(content.as_bytes())?;
    let verb = if existed { "overwrote" } else { "created" };
    let lines = crate::words::count(content.lines().count() as u64, "line", "lines");
    let bytes = crate::words::count(content.len() as u64, "byte", "bytes");
    Ok(ToolOutput::summary(format!("{verb} `{path}` ({bytes}, {lines})")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn creates_parents_then_overwrites() {
        let dir = std::env::temp_dir().join(format!("offshoot-write-{}", std::process::id()));
        let env = ToolEnv { cwd: dir.clone(), root: dir.clone(), ..Default::default() };
        let out = run(&env, &json!({"path": "a/b.txt", "content": "one\ntwo\n"})).expect("writes");
        assert_eq!(out.summary, "created `a/b.txt` (8 bytes, 2 lines)");
        let out = run(&env, &json!({"path": "a/b.txt", "content": "x"})).expect("writes");
        assert_eq!(out.summary, "overwrote `a/b.txt` (1 byte, 1 line)");
        assert_eq!(std::fs::read_to_string(dir.join("a/b.txt")).expect("read"), "x");
        let err = run(&env, &json!({"path": "a", "content": "x"})).expect_err("a directory");
        assert_eq!(err.to_string(), "`a` is a directory; give a file path");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
