//! `cd`: choose the working directory later tool calls run in.

use serde_json::Value;

use super::{ToolEnv, ToolError, ToolOutput, read_path, str_arg};

pub(super) fn run(env: &ToolEnv, input: &Value) -> Result<ToolOutput, ToolError> {
    let path = str_arg(input, "path")?;
    let target = read_path(env, path)?;
    let dir = std::fs::canonicalize(&target).map_err(|e| {
        ToolError::ToModel(format!("cannot change to `{path}`: {e}; the working directory is unchanged"))
    })?;
    if !dir.is_dir() {
        return Err(ToolError::ToModel(format!("`{path}` is not a directory; the working directory is unchanged")));
    }
    let mut out = ToolOutput::summary(format!("the working directory is now {}", dir.display()));
    out.cwd = Some(dir);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn moves_into_existing_directories_only() {
        let dir = std::env::temp_dir().join(format!("offshoot-cd-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).expect("dir");
        std::fs::write(dir.join("file"), "x").expect("file");
        let env = ToolEnv { cwd: dir.clone(), root: dir.clone(), ..Default::default() };
        let out = run(&env, &json!({"path": "sub"})).expect("cd");
        assert_eq!(out.cwd, Some(std::fs::canonicalize(dir.join("sub")).expect("canon")));
        let err = run(&env, &json!({"path": "missing"})).expect_err("missing");
        assert!(err.to_string().starts_with("cannot change to `missing`"), "{err}");
        let err = run(&env, &json!({"path": "file"})).expect_err("file");
        assert_eq!(err.to_string(), "`file` is not a directory; the working directory is unchanged");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
