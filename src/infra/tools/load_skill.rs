//! `load_skill`: copies a skill's files from the governing config into
//! `.offshoot/skills/<name>/` of the agent's tree.

use serde_json::Value;

use super::{ToolEnv, ToolError, ToolOutput, str_arg};

pub(super) fn run(env: &ToolEnv, input: &Value) -> Result<ToolOutput, ToolError> {
    let name = str_arg(input, "name")?;
    let skills = env.skills.clone().unwrap_or_default();
    let known: Vec<&str> = skills.files.keys().map(String::as_str).collect();
    let Some(files) = skills.files.get(name).filter(|_| !name.contains('/') && !name.contains("..")) else {
        let list =
            if known.is_empty() { "none are configured".to_owned() } else { format!("skills: {}", known.join(", ")) };
        return Err(ToolError::ToModel(format!("skill `{name}` does not exist; {list}")));
    };
    let dir = env.root.join(".offshoot/skills").join(name);
    for (rel, bytes) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| ToolError::Fatal(format!("cannot create {}: {e}", parent.display())))?;
        }
        std::fs::write(&path, bytes).map_err(|e| ToolError::Fatal(format!("cannot write {}: {e}", path.display())))?;
    }
    let shown: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    Ok(ToolOutput::summary(format!(
        "loaded skill `{name}` into .offshoot/skills/{name}/ ({}); it is part of your context from the next step",
        shown.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::tools::Skills;
    use serde_json::json;

    #[test]
    fn copies_known_skills_and_lists_them_when_unknown() {
        let dir = std::env::temp_dir().join(format!("offshoot-skill-{}", std::process::id()));
        let mut skills = Skills::default();
        skills.files.insert(
            "rust".into(),
            vec![("SKILL.md".into(), b"use clippy".to_vec()), ("ref/x.md".into(), b"x".to_vec())],
        );
        let env = ToolEnv { cwd: dir.join("sub"), root: dir.clone(), skills: Some(skills), ..Default::default() };
        let out = run(&env, &json!({"name": "rust"})).expect("loads");
        assert!(out.summary.starts_with("loaded skill `rust` into .offshoot/skills/rust/ (SKILL.md, ref/x.md)"));
        assert_eq!(std::fs::read_to_string(dir.join(".offshoot/skills/rust/SKILL.md")).expect("read"), "use clippy");
        let err = run(&env, &json!({"name": "go"})).expect_err("unknown");
        assert_eq!(err.to_string(), "skill `go` does not exist; skills: rust");
        let err = run(&env, &json!({"name": "../rust"})).expect_err("path-like");
        assert!(err.to_string().starts_with("skill `../rust` does not exist"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
