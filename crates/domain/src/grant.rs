//! The tools and who may run them: one table with every tool's spec (what the model
//! reads), how its calls may run, and whether a role or only the compactor is granted
//! it. The engine's registry has a handler for each, and `infra::tools` runs those that
//! need only a directory.

use serde_json::Value;

use infra::provider::ToolSpec;

/// The role of every compactor; started by the harness only.
pub const COMPACTOR: &str = "compactor";

/// Who may be granted a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Any role, by its `tools`.
    Role,
    /// The compactor alone: its tools are fixed, and no role is granted them.
    Compactor,
}

/// Where a tool's calls run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    /// In a directory, with a way to start commands (`infra::tools`).
    Directory,
    /// In the engine, with the agent's runtime and config.
    Engine,
}

/// One tool.
#[derive(Debug)]
pub struct Tool {
    pub name: &'static str,
    pub(crate) description: &'static str,
    /// Its input's JSON Schema (the text of `templates/tools/<name>.json`).
    pub(crate) schema: &'static str,
    pub(crate) holder: Holder,
    pub runs: Runs,
    /// Whether it only reads (several such calls of one step may run together).
    pub read_only: bool,
    /// Whether it may change files in the agent's directory (its step then commits a
    /// scan of it).
    pub writes: bool,
    /// Whether a call of it cut short by a crash is run again, by its key, instead of
    /// being answered "outcome unknown": its effect is the harness's own, and a second
    /// run finds and completes what the first did, never doing it twice.
    pub exactly_once: bool,
}

impl Tool {
    /// What the model reads of it.
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.to_owned(),
            description: self.description.trim_end().to_owned(),
            input_schema: serde_json::from_str(self.schema).unwrap_or(Value::Null),
        }
    }
}

macro_rules! text {
    ($name:literal, $ext:literal) => {
        include_str!(concat!("../../../templates/tools/", $name, ".", $ext))
    };
}

/// A tool of the table: its texts are `templates/tools/<name>.md` and `.json`.
macro_rules! tool {
    ($name:literal, $holder:ident, $runs:ident, read_only: $ro:literal, writes: $w:literal, exactly_once: $once:literal) => {
        Tool {
            name: $name,
            description: text!($name, "md"),
            schema: text!($name, "json"),
            holder: Holder::$holder,
            runs: Runs::$runs,
            read_only: $ro,
            writes: $w,
            exactly_once: $once,
        }
    };
}

/// Every tool: those a role can be granted first, in the order `offshoot tool --list`
/// shows them, then the compactor's.
pub const TOOLS: &[Tool] = &[
    tool!("bash", Role, Directory, read_only: false, writes: true, exactly_once: false),
    tool!("read_file", Role, Directory, read_only: true, writes: false, exactly_once: false),
    tool!("write_file", Role, Directory, read_only: false, writes: true, exactly_once: false),
    tool!("edit_file", Role, Directory, read_only: false, writes: true, exactly_once: false),
    tool!("apply_patch", Role, Directory, read_only: false, writes: true, exactly_once: false),
    tool!("grep", Role, Directory, read_only: true, writes: false, exactly_once: false),
    tool!("glob", Role, Directory, read_only: true, writes: false, exactly_once: false),
    tool!("cd", Role, Directory, read_only: false, writes: false, exactly_once: false),
    tool!("dispatch", Role, Engine, read_only: true, writes: false, exactly_once: true),
    tool!("message", Role, Engine, read_only: true, writes: false, exactly_once: true),
    tool!("load_skill", Role, Engine, read_only: false, writes: false, exactly_once: true),
    tool!("write_summary", Compactor, Engine, read_only: false, writes: false, exactly_once: true),
    tool!("mark_for_deletion", Compactor, Engine, read_only: false, writes: false, exactly_once: true),
];

/// Tool `name`, if there is such a tool.
pub fn tool(name: &str) -> Option<&'static Tool> {
    TOOLS.iter().find(|t| t.name == name)
}

/// The tools `holder` may be granted, in the table's order.
pub fn held_by(holder: Holder) -> impl Iterator<Item = &'static Tool> {
    TOOLS.iter().filter(move |t| t.holder == holder)
}

/// The names of the tools `holder` may be granted, for messages: `bash, read_file, …`.
pub fn names(holder: Holder) -> String {
    held_by(holder).map(|t| t.name).collect::<Vec<_>>().join(", ")
}

/// Whether `grant` lets a role run `tool`.
pub fn allows(grant: &[String], tool: &str) -> bool {
    grant.iter().any(|g| g == tool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_a_real_spec_and_one_name() {
        for (i, t) in TOOLS.iter().enumerate() {
            let spec = t.spec();
            assert_eq!(spec.name, t.name);
            assert_eq!(spec.input_schema["type"], "object", "{}", t.name);
            assert!(spec.description.len() > 40, "{} needs a real description", t.name);
            assert!(TOOLS[..i].iter().all(|o| o.name != t.name), "{} is in the table twice", t.name);
            assert!(!(t.read_only && t.writes), "{} cannot both only read and write", t.name);
        }
    }

    #[test]
    fn the_compactor_holds_its_two_tools_alone() {
        assert_eq!(names(Holder::Compactor), "write_summary, mark_for_deletion");
        assert_eq!(
            names(Holder::Role),
            "bash, read_file, write_file, edit_file, apply_patch, grep, glob, cd, dispatch, message, load_skill"
        );
    }
}
