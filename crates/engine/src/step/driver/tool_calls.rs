//! The tool calls of one model output: prepared, run (read-only ones together),
//! reported and committed one by one; calls a crash left open are settled.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::agents::interrupt::Reason;
use crate::step::driver::guard;
use crate::step::events::{Event, Observer};
use crate::step::toolcall::{self, ToolCallError};
use crate::step::tools::{self, AgentContext, ToolContext};
use domain::context;
use domain::grant;
use domain::transcript::{self, Side};
use infra::git::CommitId;
use infra::process;
use infra::provider::Block;
use infra::tools::PathPolicy;
use infra::tools::{Commands, RecordDir, ToolEnv};

use super::{Driver, DriverError, Result};

impl Driver<'_> {
    /// Settles calls a crash left open (of model output entry `number`, `output`), after
    /// killing whatever of theirs still runs (so nothing they do later can land in a
    /// later step). A call whose effect is the harness's own is run again by its key,
    /// which finds and completes what the cut-short run did (a child made once, a
    /// message deposited once); any other is answered "outcome unknown", with the
    /// directory as it left it.
    pub(super) fn settle(
        &mut self,
        tip: CommitId,
        next: u32,
        number: u32,
        output: &infra::provider::Output,
        open: &[(String, String)],
        observer: &mut dyn Observer,
    ) -> Result<()> {
        self.kill_orphans(open);
        // A call that was waiting for a person's yes never ran: it asks again, and
        // finds its place among the question's waiters (and the answer, if one came).
        let waiting: Vec<&str> =
            open.iter().filter(|(id, _)| self.waited_unanswered(id)).map(|(id, _)| id.as_str()).collect();
        let again =
            |id: &str, name: &str| tools::handler(name).is_some_and(|h| h.exactly_once()) || waiting.contains(&id);
        let unknown: Vec<&str> = open.iter().filter(|(id, name)| !again(id, name)).map(|(id, _)| id.as_str()).collect();
        let mut tip = tip;
        let mut next = next;
        if !unknown.is_empty() {
            let text = "interrupted; outcome unknown (the driver stopped while this call ran)";
            tip = self.answer(tip, next, &unknown, text, observer)?;
            next += unknown.len() as u32;
        }
        let calls: Vec<toolcall::Call<'_>> = output
            .tool_uses()
            .filter(|(id, name, _)| again(id, name) && open.iter().any(|(o, _)| o == id))
            .map(|(id, name, input)| toolcall::Call { id, name, input })
            .collect();
        if !calls.is_empty() {
            let step = self.own_steps().max(1);
            self.run_tools(tip, step, number, next, &calls, observer)?;
        }
        Ok(())
    }

    /// Whether the open call `tool_use_id` was put on the queue and had no answer yet
    /// when its driver stopped (its record, in one of the last steps, says so).
    fn waited_unanswered(&self, tool_use_id: &str) -> bool {
        let record = toolcall::record_name(tool_use_id);
        let mut steps = crate::store::step_record::numbers(&self.ws.layout.steps(&self.id));
        steps.reverse();
        steps.iter().take(3).any(|step| {
            crate::store::step_record::StepRecord::open(&self.ws.layout, &self.id, *step).is_some_and(|at| {
                let asked =
                    ["question.json", "asking.json"].iter().any(|f| at.read(&format!("tools/{record}/{f}")).is_some());
                asked && at.read(&format!("tools/{record}/answer.json")).is_none()
            })
        })
    }

    /// Commits one error result `text` for each of `ids`, with the directory as it is.
    pub(super) fn answer(
        &mut self,
        tip: CommitId,
        next: u32,
        ids: &[&str],
        text: &str,
        observer: &mut dyn Observer,
    ) -> Result<CommitId> {
        let mut files = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let block = Block::ToolResult {
                tool_use_id: (*id).to_owned(),
                content: text.to_owned(),
                is_error: true,
                images: Vec::new(),
            };
            let name = transcript::entry_name(next + i as u32, "tool", Side::Tool);
            files.push((name, serde_json::to_vec(&block).unwrap_or_default()));
            observer.event(Event::Settled { tool_use_id: id });
        }
        let refs: Vec<(&str, &[u8])> = files.iter().map(|(p, b)| (p.as_str(), b.as_slice())).collect();
        self.commit(tip, &refs, true, "settle interrupted tool calls")
    }

    /// Kills what a crashed driver's calls left running: each call's recorded process
    /// group, if a running member still carries this agent's marks (a recycled group
    /// number is left alone), then any other process carrying them (one started in
    /// the instant before its group was recorded, or one that left its group).
    pub(super) fn kill_orphans(&self, open: &[(String, String)]) {
        let marks =
            [format!("OFFSHOOT_AGENT={}", self.id), format!("OFFSHOOT_WORKSPACE={}", self.real_workspace.display())];
        let marks: Vec<&str> = marks.iter().map(String::as_str).collect();
        let mut steps = crate::store::step_record::numbers(&self.ws.layout.steps(&self.id));
        steps.reverse();
        for (tool_use_id, _) in open {
            let record = toolcall::record_name(tool_use_id);
            let group = steps.iter().take(3).find_map(|step| {
                let at = crate::store::step_record::StepRecord::open(&self.ws.layout, &self.id, *step)?;
                let text = at.read(&format!("tools/{record}/pgid"))?;
                String::from_utf8_lossy(&text).trim().parse::<u32>().ok()
            });
            if let Some(group) = group
                && process::group_carries(group, &marks)
            {
                process::kill_group(group);
                process::await_group(group, std::time::Duration::from_secs(2));
            }
        }
        process::kill_marked(&marks, std::time::Duration::from_secs(2));
    }

    /// The calls of one model output (entry `output`): each gated by the grant read from
    /// the config at this step, run, recorded, and committed in the order of the calls,
    /// their results numbered from `first`. Several calls that are all read-only (and
    /// none of which acts exactly once) run concurrently.
    pub(super) fn run_tools(
        &mut self,
        mut tip: CommitId,
        step: u32,
        output: u32,
        first: u32,
        calls: &[toolcall::Call<'_>],
        observer: &mut dyn Observer,
    ) -> Result<CommitId> {
        let (config_commit, config) = self.config()?;
        let grant = config.grant(&self.facts.role);
        let limits = &config.tool_output;
        let rules = config.role(&self.facts.role).map(|r| &r.context);
        let (commands, paths, policy) = self.commands(config_commit, &config)?;
        let facts = self.facts.clone();
        let mcp = self.mcp.clone();
        let agent = AgentContext {
            runtime: self.runtime,
            facts: &facts,
            config_commit,
            mcp: Some(&mcp),
            config: Some(&config),
            policy: Some(&policy),
            hooks_jail: if self.in_place { commands.sandbox.as_deref() } else { None },
        };
        let read_only = |c: &toolcall::Call<'_>| {
            (grant::allows(&grant, c.name) && tools::handler(c.name).is_some_and(|h| h.read_only()))
                || mcp.read_only(c.name)
        };
        // (A call that acts exactly once — a dispatch, a message — acts in the order the
        // model wrote it: the children of one step get their ids in call order.)
        let in_order = |c: &toolcall::Call<'_>| tools::handler(c.name).is_some_and(|h| h.exactly_once());
        let interrupt = self.runtime.interrupt().clone();
        if calls.len() > 1 && calls.iter().all(read_only) && !calls.iter().any(in_order) {
            // Read-only calls cannot move the working directory: prepare all at once.
            let prepared: Vec<Prepared> =
                calls.iter().map(|c| self.prepare(step, output, c, &commands, &paths)).collect::<Result<_>>()?;
            self.guard.before_call();
            for c in calls {
                observer.event(Event::ToolStarted { id: c.id, name: c.name, input: c.input });
            }
            let results: Vec<std::result::Result<toolcall::CallResult, ToolCallError>> = std::thread::scope(|scope| {
                let handles: Vec<_> =
                    calls.iter().zip(&prepared).map(|(c, p)| scope.spawn(|| p.run(c, &grant, agent, limits))).collect();
                handles.into_iter().map(|h| h.join().unwrap_or(Err(ToolCallError::Panicked))).collect()
            });
            for ((number, c), result) in (first..).zip(calls).zip(results) {
                tip = self.finish_tool(tip, number, c, result?, rules, observer)?;
            }
        } else {
            // One at a time, each prepared after the one before it (a `cd` moves the next).
            for (i, (number, c)) in (first..).zip(calls).enumerate() {
                if let Some(reason) = interrupt.reason() {
                    // Asked to stop: the calls not yet run are answered, not run.
                    let rest: Vec<&str> = calls[i..].iter().map(|c| c.id).collect();
                    let text = format!("{} before this call ran; nothing ran", reason.words());
                    self.answer(tip, number, &rest, &text, observer)?;
                    return Err(DriverError::Interrupted { id: self.id.clone(), reason });
                }
                let p = self.prepare(step, output, c, &commands, &paths)?;
                self.guard.before_call();
                observer.event(Event::ToolStarted { id: c.id, name: c.name, input: c.input });
                let mut result = p.run(c, &grant, agent, limits)?;
                interrupt.command_ended();
                let mut keep = self.runtime.launched();
                keep.extend(mcp.pids());
                process::reap_strays(&keep);
                if let Some(reason) = interrupt.reason() {
                    cut_short(&mut result, reason);
                }
                tip = self.finish_tool(tip, number, c, result, rules, observer)?;
            }
        }
        if let Some(reason) = interrupt.reason() {
            return Err(DriverError::Interrupted { id: self.id.clone(), reason });
        }
        Ok(tip)
    }

    /// Where a call runs and where its record goes.
    pub(super) fn prepare(
        &self,
        step: u32,
        output: u32,
        call: &toolcall::Call<'_>,
        commands: &Commands,
        paths: &Arc<PathPolicy>,
    ) -> Result<Prepared> {
        let shown = format!("steps/{}/{step:04}/tools/{}", self.id, toolcall::record_name(call.id));
        Ok(Prepared {
            key: toolcall::key(output, call.id),
            env: ToolEnv {
                cwd: self.cwd(),
                root: self.dir.root().to_owned(),
                commands: commands.clone(),
                record: Some(RecordDir { dir: self.ws.layout.root().join(&shown), shown }),
                paths: Some(paths.clone()),
            },
        })
    }

    /// Reports a call's result, applies a `cd`, adds context files not shown yet,
    /// and commits the result (with a worktree scan if the tool can write).
    pub(super) fn finish_tool(
        &mut self,
        tip: CommitId,
        number: u32,
        call: &toolcall::Call<'_>,
        mut result: toolcall::CallResult,
        rules: Option<&domain::config::ContextRules>,
        observer: &mut dyn Observer,
    ) -> Result<CommitId> {
        let output = match &result.block {
            infra::provider::Block::ToolResult { content, .. } => content.as_str(),
            _ => "",
        };
        observer.event(Event::ToolFinished {
            id: call.id,
            name: call.name,
            is_error: result.is_error,
            summary: &result.summary,
            output,
            policy: &result.policy,
        });
        if let Some(dir) = &result.cwd {
            self.set_cwd(dir)?;
        }
        let context = match rules {
            Some(rules) => self.unseen_context_files(tip, rules)?,
            None => Vec::new(),
        };
        let restored = self.guard.after_call(self.ws, &self.id, &self.dir, tip)?;
        let scanned = if result.writes { Some(self.stage()?) } else { None };
        if let Block::ToolResult { content, .. } = &mut result.block {
            if !restored.is_empty() {
                content.push_str(&guard::note(&restored));
            }
            if let Some(scanned) = &scanned {
                content.push_str(&scanned.note());
            }
            for (shown, text) in &context {
                content.push_str(&context::context_file_block(shown, text));
            }
        }
        let entry = transcript::entry_name(number, "tool", Side::Tool);
        let bytes = serde_json::to_vec(&result.block).unwrap_or_default();
        let harness: Vec<(&str, &[u8])> =
            result.harness_files.iter().map(|(p, b)| (p.as_str(), b.as_slice())).collect();
        let message = format!("{entry}: {} result", call.name);
        self.commit_with(tip, &[(&entry, &bytes)], &harness, scanned, &message)
    }

    /// Context files (e.g. AGENTS.md) on the path from the top of the repository
    /// holding the working directory down to it, that the transcript at `tip` has not
    /// shown yet and the role does not pin.
    pub(super) fn unseen_context_files(
        &mut self,
        tip: CommitId,
        rules: &domain::config::ContextRules,
    ) -> Result<Vec<(String, String)>> {
        if rules.context_files.is_empty() {
            return Ok(Vec::new());
        }
        let root = self.real_root.clone();
        let cwd = self.cwd();
        let cwd = if cwd == self.dir.root() { root.clone() } else { std::fs::canonicalize(&cwd).unwrap_or(cwd) };
        let mut found = Vec::new();
        for file in discover_context_files(&cwd, &rules.context_files) {
            let name = match file.strip_prefix(&root) {
                Ok(inside) => inside.to_string_lossy().into_owned(),
                Err(_) => file.to_string_lossy().into_owned(),
            };
            if !rules.pinned.iter().any(|g| domain::glob::matches(g, &name)) {
                found.push((name, file));
            }
        }
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let shown = context::shown_context_files(self.loader.entries(&self.ws.repo, tip)?);
        // Read as the agent's own `read_file` would: an `AGENTS.md` that is a link to
        // a key or another workspace's transcript is not read for it either.
        let Some(paths) = self.tools_setup.as_ref().map(|s| s.paths.clone()) else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for (name, file) in found {
            if shown.contains(&name) {
                continue;
            }
            if let Some(text) = infra::tools::read_text_as_tool(&paths, &cwd, &file) {
                out.push((name, text));
            }
        }
        Ok(out)
    }
}

/// Marks a call that a stop request cut short: an error, saying so before whatever
/// it printed.
pub(super) fn cut_short(result: &mut toolcall::CallResult, reason: Reason) {
    result.is_error = true;
    result.summary = format!("{}; its processes were killed", reason.words());
    if let Block::ToolResult { content, is_error, .. } = &mut result.block {
        *is_error = true;
        *content = format!("{}; its processes were killed. Before that:\n{content}", reason.words());
    }
}

/// One call made ready to run: its environment and where its record goes.
pub(super) struct Prepared {
    env: ToolEnv,
    /// The call's key (see [`ToolContext::key`]).
    key: String,
}

impl Prepared {
    fn run(
        &self,
        call: &toolcall::Call<'_>,
        grant: &[String],
        agent: AgentContext<'_>,
        limits: &domain::config::ToolOutputConfig,
    ) -> std::result::Result<toolcall::CallResult, ToolCallError> {
        let cx = ToolContext { env: self.env.clone(), agent: Some(agent), key: Some(self.key.clone()) };
        toolcall::run(call, grant, &cx, limits)
    }
}

/// Files named `names` in each directory from the top of the git repository that
/// holds `cwd` (or `cwd` alone, outside any) down to `cwd`, top first.
pub(super) fn discover_context_files(cwd: &Path, names: &[String]) -> Vec<PathBuf> {
    let mut dirs: Vec<&Path> = Vec::new();
    let mut at = Some(cwd);
    while let Some(dir) = at {
        dirs.push(dir);
        if dir.join(".git").exists() {
            break;
        }
        at = dir.parent();
        if at.is_none() {
            dirs.truncate(1);
        }
    }
    dirs.reverse();
    // One file under two names (`CLAUDE.md` linked to `AGENTS.md`) is found once.
    let mut seen = std::collections::HashSet::new();
    dirs.iter()
        .flat_map(|d| names.iter().map(|n| d.join(n)))
        .filter(|p| p.is_file())
        .filter(|p| seen.insert(std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())))
        .collect()
}
