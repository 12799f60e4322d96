//! What each tool is, as the model reads it (its description and input schema):
//! the built-in tools' and the engine's, by name. A leaf, so that what makes an agent
//! (its `.offshoot/tools/`) needs nothing of what runs the tools.

use crate::infra::provider::ToolSpec;
use crate::infra::tools;

/// The engine's tools: name, description, input schema.
const ENGINE: &[(&str, &str, &str)] = &[
    (
        "load_skill",
        include_str!("../../templates/tools/load_skill.md"),
        include_str!("../../templates/tools/load_skill.json"),
    ),
    (
        "dispatch",
        include_str!("../../templates/tools/dispatch.md"),
        include_str!("../../templates/tools/dispatch.json"),
    ),
    ("message", include_str!("../../templates/tools/message.md"), include_str!("../../templates/tools/message.json")),
    (
        "write_summary",
        include_str!("../../templates/tools/write_summary.md"),
        include_str!("../../templates/tools/write_summary.json"),
    ),
    (
        "mark_for_deletion",
        include_str!("../../templates/tools/mark_for_deletion.md"),
        include_str!("../../templates/tools/mark_for_deletion.json"),
    ),
];

/// The spec of tool `name`, if there is such a tool.
pub fn spec(name: &str) -> Option<ToolSpec> {
    if let Some(builtin) = tools::builtin(name) {
        return Some(builtin.spec());
    }
    ENGINE.iter().find(|(n, _, _)| *n == name).map(|(n, description, schema)| tools::spec(n, description, schema))
}
