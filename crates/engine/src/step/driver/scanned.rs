//! What a scanning commit after a tool call found and did in the agent's directory
//! and git, and what the model is told of it: work products left out of history, rule
//! files removed, the agent's git config put back, its git left unpublished.

use infra::git::{Skipped, Staged, Why};

/// What a scan of the directory found and did, for the commit after a call.
pub(crate) struct Scanned {
    /// `None` when the directory could not be scanned (said in `unchecked`).
    pub(crate) staged: Option<Staged>,
    /// Rule files removed: not regular files.
    pub(crate) cleared: Vec<String>,
    /// `max_commit_file_bytes`.
    pub(crate) limit: u64,
    /// What of the agent's git directory was put back (its config, its hooks).
    pub(crate) put_back: Vec<&'static str>,
    /// `.offshoot/git` for where the agent's git stands now, if that moved.
    pub(crate) moved: Option<String>,
    /// Why its git could not be published, if it could not.
    pub(crate) unpublished: Option<String>,
    /// What could not be checked, and why.
    pub(crate) unchecked: Vec<String>,
}

impl Scanned {
    /// What the model is told of it: work that stayed out of its history (rule files
    /// that were not files, removed; files over the size limit, left on disk), its
    /// git's config or hooks put back, and its git left unpublished.
    pub(crate) fn note(&self) -> String {
        let mut note = left_out_note(&self.cleared, self.staged.as_ref().map_or(&[], |s| &s.skipped), self.limit);
        if !self.put_back.is_empty() {
            note.push_str(&format!(
                "\n[offshoot: your git's {} put back: they are the harness's (a person's `git` in your directory would run them)]",
                self.put_back.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
            ));
        }
        for what in &self.unchecked {
            note.push_str(&format!("\n[offshoot: could not check {what}]"));
        }
        if let Some(why) = &self.unpublished {
            note.push_str(&format!(
                "\n[offshoot: your git's new commits were not published to the other agents or `export`: {why}]"
            ));
        }
        note
    }
}

/// What the model is told of work that stayed out of its history: rule files that
/// were not files (removed), files over the size limit and paths git refuses (left
/// on disk).
fn left_out_note(cleared: &[String], skipped: &[Skipped], limit: u64) -> String {
    let mut note = String::new();
    if !cleared.is_empty() {
        note.push_str(&format!(
            "\n[offshoot: removed {}: git reads these, and they were not regular files (a FIFO, a device or a link)]",
            cleared.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    let too_big: Vec<String> = skipped
        .iter()
        .filter_map(|s| match s.why {
            Why::Size(size) => Some(format!("`{}` ({size} bytes)", s.path)),
            Why::Refused(_) => None,
        })
        .collect();
    if !too_big.is_empty() {
        note.push_str(&format!(
            "\n[offshoot: not recorded in your history, over the {limit}-byte limit of `max_commit_file_bytes`: {} (they stay on disk)]",
            too_big.join(", ")
        ));
    }
    for s in skipped {
        if let Why::Refused(said) = &s.why {
            note.push_str(&format!(
                "\n[offshoot: `{}` is not recorded in your history: git refuses it ({said})]",
                s.path
            ));
        }
    }
    note
}
