//! Grants: which tools a role may run. The names here are every tool a role can be
//! granted; the engine's registry has a handler for each.

/// Every grantable tool, in the order `offshoot tool --list` shows them.
pub const TOOLS: &[&str] = &[
    "bash",
    "read_file",
    "write_file",
    "edit_file",
    "apply_patch",
    "grep",
    "glob",
    "cd",
    "dispatch",
    "message",
    "load_skill",
];

/// Whether `grant` lets a role run `tool`.
pub fn allows(grant: &[String], tool: &str) -> bool {
    grant.iter().any(|g| g == tool)
}
