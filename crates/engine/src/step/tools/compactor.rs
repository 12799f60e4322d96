//! The compactor's two tools: `write_summary` and `mark_for_deletion`. Both
//! write only the compactor's own `.offshoot/` (through the driver, like every harness
//! file): the summary, and the list of nominated paths. Nothing is removed until the
//! parent lands the compaction.

use std::path::{Component, Path};

use serde_json::Value;

use domain::agent;
use domain::compaction;
use infra::git::CommitId;
use infra::tools::{self, ToolError, ToolOutput, str_arg};

use super::{AgentContext, Handler, ToolContext};
use crate::store::workspace::Workspace;

pub(crate) struct WriteSummary;
pub(crate) struct MarkForDeletion;

/// The compactor's fork point (what it inherited), and its workspace.
fn inherited(cx: &ToolContext, tool: &str) -> Result<(Workspace, CommitId), ToolError> {
    let agent: &AgentContext =
        cx.agent.as_ref().filter(|a| a.facts.role == domain::grant::COMPACTOR).ok_or_else(|| {
            ToolError::ToModel(format!("`{tool}` is a compactor's tool; it runs only in a compaction"))
        })?;
    let fatal = |e: &dyn std::fmt::Display| ToolError::Fatal(format!("cannot read what the compactor inherited: {e}"));
    let ws = agent.workspace().map_err(|e| fatal(&e))?;
    let fork = agent.facts.forked_from.as_deref().and_then(|f| CommitId::from_str(f).ok());
    let fork = fork.ok_or_else(|| fatal(&"it has no fork point"))?;
    Ok((ws, fork))
}

/// Summaries on disk in the compactor's directory that its fork point does not have:
/// the one this pass wrote.
fn own_summaries(cx: &ToolContext, ws: &Workspace, fork: CommitId) -> Result<Vec<String>, ToolError> {
    let fatal = |e: &dyn std::fmt::Display| ToolError::Fatal(format!("cannot list summaries: {e}"));
    let inherited: Vec<String> =
        ws.repo.list_dir(fork, agent::SUMMARIES).map_err(|e| fatal(&e))?.into_iter().map(|e| e.name).collect();
    let mut own: Vec<String> = std::fs::read_dir(cx.env.root.join(agent::SUMMARIES))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !inherited.contains(n))
        .map(|n| format!("{}/{n}", agent::SUMMARIES))
        .collect();
    own.sort();
    Ok(own)
}

impl Handler for WriteSummary {
    fn name(&self) -> &'static str {
        "write_summary"
    }

    fn run(&self, cx: &ToolContext, input: &Value) -> Result<ToolOutput, ToolError> {
        tools::require_object(self.name(), input)?;
        let content = str_arg(input, "content")?;
        let (ws, fork) = inherited(cx, self.name())?;
        if content.trim().is_empty() {
            return Err(ToolError::ToModel("the summary is empty; nothing was written".into()));
        }
        if let Some(line) = compaction::conflict_marker(content) {
            return Err(ToolError::ToModel(format!(
                "the summary holds a conflict marker (`{line}`); a summary with one is never assembled, so write it without"
            )));
        }
        // One summary per pass: a second call replaces the first.
        let path = match own_summaries(cx, &ws, fork)?.into_iter().next() {
            Some(path) => path,
            None => {
                let fatal = |e: &dyn std::fmt::Display| ToolError::Fatal(format!("cannot list summaries: {e}"));
                let names = ws.repo.list_dir(fork, agent::SUMMARIES).map_err(|e| fatal(&e))?;
                let last = names.iter().filter_map(|e| e.name.strip_suffix(".md")?.parse::<u32>().ok()).max();
                format!("{}/{:04}.md", agent::SUMMARIES, last.unwrap_or(0) + 1)
            }
        };
        let mut text = content.to_owned();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        let mut output = ToolOutput::summary(format!(
            "wrote `{path}` ({} bytes); it lands, replacing the compacted entries, when you answer",
            text.len()
        ));
        output.harness_files = vec![(path, text.into_bytes())];
        Ok(output)
    }
}

impl Handler for MarkForDeletion {
    fn name(&self) -> &'static str {
        "mark_for_deletion"
    }

    fn run(&self, cx: &ToolContext, input: &Value) -> Result<ToolOutput, ToolError> {
        tools::require_object(self.name(), input)?;
        let asked = str_arg(input, "path")?;
        let (ws, fork) = inherited(cx, self.name())?;
        let Some(path) = relative(&cx.env.root, asked) else {
            return Err(ToolError::ToModel(format!(
                "`{asked}` is not inside the agent's directory; give a path relative to it"
            )));
        };
        let own = own_summaries(cx, &ws, fork)?.contains(&path);
        let fatal = |e: &dyn std::fmt::Display| ToolError::Fatal(format!("cannot read the fork point: {e}"));
        let exists = ws.repo.entry_id(fork, &path).map_err(|e| fatal(&e))?.is_some();
        if let Some(rule) = compaction::decline(&path, own, exists) {
            return Err(ToolError::ToModel(format!("`{path}` is not marked: {rule}")));
        }
        let listed = std::fs::read_to_string(cx.env.root.join(compaction::NOMINATED)).unwrap_or_default();
        if listed.lines().any(|l| l == path) {
            return Ok(ToolOutput::summary(format!("`{path}` is already marked")));
        }
        let mut output = ToolOutput::summary(format!(
            "marked `{path}`; it is removed when the compaction lands, unless the agent changed it meanwhile"
        ));
        output.harness_files = vec![(compaction::NOMINATED.to_owned(), format!("{listed}{path}\n").into_bytes())];
        Ok(output)
    }
}

/// `asked` as a normalised path relative to `root`, if it lies inside it (`..` and
/// absolute paths outside are refused; nothing is resolved on disk).
fn relative(root: &Path, asked: &str) -> Option<String> {
    let asked = Path::new(asked);
    let rel = if asked.is_absolute() { asked.strip_prefix(root).ok()? } else { asked };
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str()?.to_owned()),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}
