//! What agents spent, read from their step records (their `meta.json`):
//! each agent's own calls (a fork's inherited history has no records of its own), a
//! tree's totals for its budgets, and the check made before every model call and
//! dispatch.

use std::collections::HashMap;

use crate::store::step_record::StepRecord;
use domain::budget::{self, Spend, StepSpend};
use domain::config::Config;
use domain::id::AgentId;
use domain::layout::Layout;
use domain::step::{StepMeta, StepOutcome};
use infra::lock::LockGuard;
use infra::time::{Timestamp, parse_unix_seconds};

/// Step records read so far: a finished step's record never changes, so each is
/// read once.
#[derive(Debug, Default)]
pub struct Records {
    done: HashMap<(String, u32), StepSpend>,
}

/// One agent's calls, in order, and until when it is busy with tools.
#[derive(Debug, Clone)]
pub struct AgentSteps {
    pub id: String,
    pub steps: Vec<StepSpend>,
    busy_until: Option<u64>,
}

impl AgentSteps {
    /// What this agent's own calls spent.
    pub fn spend(&self, config: &Config) -> Spend {
        budget::spend([(&self.steps[..], self.busy_until)], &|m| config.prices.get(m).cloned())
    }
}

impl Records {
    /// The steps of `root` and every agent below it, by id.
    pub fn tree(&mut self, layout: &Layout, root: &AgentId) -> Vec<AgentSteps> {
        let base = layout.steps(root);
        let Some(dir) = base.parent() else { return Vec::new() };
        let below = format!("{root}.");
        let mut ids: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n == root.as_str() || n.starts_with(&below))
            .collect();
        ids.sort();
        ids.iter().filter_map(|id| AgentId::parse(id).ok()).map(|id| self.agent(layout, &id)).collect()
    }

    /// The steps of one agent.
    pub fn agent(&mut self, layout: &Layout, id: &AgentId) -> AgentSteps {
        let numbers = crate::store::step_record::numbers(&layout.steps(id));
        let now = Timestamp::now().unix_seconds();
        let mut live = None;
        let mut is_live = || *live.get_or_insert_with(|| LockGuard::is_held(&layout.lock(id)).unwrap_or(false));
        let mut steps = Vec::with_capacity(numbers.len());
        for (i, &n) in numbers.iter().enumerate() {
            let key = (id.to_string(), n);
            let record = || StepRecord::open(layout, id, n);
            let mut step = match self.done.get(&key) {
                Some(step) => step.clone(),
                None => {
                    let (step, finished) = read_step(record().as_ref(), now, &mut is_live);
                    if finished {
                        self.done.insert(key, step.clone());
                    }
                    step
                }
            };
            if i + 1 == numbers.len() {
                // Tools of the last step may have started since it was read.
                step.tool_calls = record().map_or(0, |r| r.tools().len() as u32);
                step.tools = step.tool_calls > 0;
            }
            steps.push(step);
        }
        let busy_until = match steps.last() {
            Some(last) if last.tools && is_live() => Some(now),
            _ => None,
        };
        AgentSteps { id: id.to_string(), steps, busy_until }
    }
}

/// What the tree rooted at `root` spent, and the limit it reached, if any.
pub fn check(records: &mut Records, layout: &Layout, root: &AgentId, config: &Config) -> (Spend, Option<String>) {
    let tree = records.tree(layout, root);
    let spend = budget::spend(tree.iter().map(|a| (&a.steps[..], a.busy_until)), &|m| config.prices.get(m).cloned());
    let reached = budget::exhausted(&config.budgets, &spend);
    (spend, reached)
}

/// A step's record; `true` when it is final (the call ended, or no driver is left to
/// end it).
/// How many tool calls of a step began is the number of call records under `tools/`.
fn read_step(record: Option<&StepRecord>, now: u64, is_live: &mut dyn FnMut() -> bool) -> (StepSpend, bool) {
    let meta: Option<StepMeta> = record.and_then(|r| r.read("meta.json")).and_then(|b| serde_json::from_slice(&b).ok());
    // A record not written yet (its directory comes first) is a call about to start.
    let running = meta.as_ref().is_none_or(|m| m.outcome == StepOutcome::Running) && is_live();
    let meta = meta.unwrap_or_else(StepMeta::unwritten);
    let started = parse_unix_seconds(&meta.started);
    let ended = if running { Some(now) } else { meta.ended.as_deref().and_then(parse_unix_seconds).or(started) };
    let answered = meta.outcome == StepOutcome::Ok;
    let tool_calls = record.map_or(0, |r| r.tools().len() as u32);
    let step = StepSpend {
        model: meta.model,
        usage: meta.usage.unwrap_or_default(),
        started,
        ended,
        tools: tool_calls > 0,
        answered,
        tool_calls,
    };
    (step, !running)
}
