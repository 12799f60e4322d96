//! `load_skill`: copies a skill's files from the config the agent follows into
//! `.offshoot/skills/<name>/` of its tree.

use serde_json::Value;

use domain::agent;
use infra::tools::{self, ToolError, ToolOutput, str_arg};

use super::{Handler, ToolContext};

pub(crate) struct LoadSkill;

impl Handler for LoadSkill {
    fn name(&self) -> &'static str {
        "load_skill"
    }

    fn run(&self, cx: &ToolContext, input: &Value) -> Result<ToolOutput, ToolError> {
        tools::require_object(self.name(), input)?;
        let name = str_arg(input, "name")?;
        let Some(agent) = &cx.agent else {
            return Err(ToolError::ToModel(
                "`load_skill` loads into an agent's tree; it runs only in an agent's step".into(),
            ));
        };
        let fatal = |e: &dyn std::fmt::Display| ToolError::Fatal(format!("cannot read the config's skills: {e}"));
        let ws = agent.workspace().map_err(|e| fatal(&e))?;
        let skills = ws.skills(agent.config_commit).map_err(|e| fatal(&e))?;
        let known: Vec<&str> = skills.keys().map(String::as_str).collect();
        let Some(files) = skills.get(name).filter(|_| !name.contains('/') && !name.contains("..")) else {
            let list = if known.is_empty() {
                "none are configured".to_owned()
            } else {
                format!("skills: {}", known.join(", "))
            };
            return Err(ToolError::ToModel(format!("skill `{name}` does not exist; {list}")));
        };
        let shown: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        let mut output = ToolOutput::summary(format!(
            "loaded skill `{name}` into .offshoot/skills/{name}/ ({}); it is part of your context from the next step",
            shown.join(", ")
        ));
        // `.offshoot/` is the harness's: the driver writes and commits these.
        output.harness_files =
            files.iter().map(|(rel, bytes)| (format!("{}/{name}/{rel}", agent::SKILLS), bytes.clone())).collect();
        Ok(output)
    }
}
