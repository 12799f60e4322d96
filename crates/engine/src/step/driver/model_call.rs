//! One model call: the request assembled from the tip and measured against the
//! window, the step record written around it, the tree's budget checked before it.

use std::io::Write;
use std::path::Path;

use serde_json::json;

use crate::agents::budget;
use crate::agents::interrupt::Reason;
use crate::step::events::{Event, Observer};
use crate::step::model::{self, ModelError};
use crate::store::step_record::StepRecord;
use domain::agent;
use domain::compaction;
use domain::config::RoleConfig;
use domain::context;
use domain::step::{StepMeta, StepOutcome};
use domain::transcript::{self, Side};
use infra::git::CommitId;
use infra::provider::transport::{AttemptRecord, Observer as CallObserver};
use infra::provider::{Delta, Output, Usage, sse};
use infra::time::Timestamp;

use super::{Driver, DriverError, Result};

impl Driver<'_> {
    /// The prompt tokens the latest of this agent's recent calls before `step` reported,
    /// with the measured size of the request it sent: what the next request is measured by.
    pub(super) fn last_reported(&self, step: u32) -> Option<(u64, u64)> {
        (step.saturating_sub(5).max(1)..step).rev().find_map(|n| {
            let record = StepRecord::open(&self.ws.layout, &self.id, n)?;
            let meta: StepMeta = serde_json::from_slice(&record.read("meta.json")?).ok()?;
            let tokens = meta.usage?.input?;
            if let Some(bytes) = meta.measured_bytes {
                return Some((tokens, bytes));
            }
            // A record from before requests were stored once: its `request.json`.
            let json = record.read("request.json")?;
            let request: infra::provider::Request = serde_json::from_slice(&json).ok()?;
            Some((tokens, context::measured_bytes(&request, json.len() as u64)))
        })
    }

    /// The whole-tree limit reached, with what was spent, if any budget is set and
    /// reached.
    pub(super) fn over_budget(&mut self) -> Result<Option<String>> {
        let (_, config) = self.config()?;
        if !domain::budget::any_set(&config.budgets) {
            return Ok(None);
        }
        let root = self.id.root();
        let (_, reached) = budget::check(&mut self.records, &self.ws.layout, &root, &config);
        Ok(reached.map(|r| format!("the tree of `{root}` {r}")))
    }

    /// The whole-tree limit the next call (its request `measured` bytes, to `model`)
    /// could pass at its largest, said with what was spent; `None` when there is room.
    fn next_call_over_budget(
        &mut self,
        config: &domain::config::Config,
        model: &str,
        measured: u64,
        step: u32,
        max_output_tokens: u32,
    ) -> Option<String> {
        if !domain::budget::any_set(&config.budgets) {
            return None;
        }
        let root = self.id.root();
        let (spend, _) = budget::check(&mut self.records, &self.ws.layout, &root, config);
        let last = match self.last_call {
            Some(known) => known,
            None => self.last_reported(step),
        };
        let next = domain::budget::NextCall {
            model,
            input_tokens: context::request_tokens(measured, last),
            max_output_tokens,
        };
        domain::budget::would_pass(&config.budgets, &spend, &next, config.prices.get(model))
            .map(|reached| format!("the tree of `{root}` {reached}"))
    }

    /// The request of step `step` from `tip`, and its measured size: refused when a
    /// summary holds conflict markers or the request would not fit the role's window.
    fn request(
        &mut self,
        tip: CommitId,
        step: u32,
        role_name: &str,
        role: &RoleConfig,
        model: &str,
    ) -> Result<(infra::provider::Request, u64)> {
        let (_, snapshot) = self.loader.snapshot(&self.ws.repo, tip, &role.context)?;
        // A summary left with merge-conflict markers is never sent.
        let summaries = format!("{}/", agent::SUMMARIES);
        for (path, text) in snapshot.composed.iter().filter(|(p, _)| p.starts_with(&summaries)) {
            if let Some(line) = compaction::conflict_marker(text) {
                return Err(DriverError::Conflicted { id: self.id.clone(), path: path.clone(), line: line.to_owned() });
            }
        }
        let mut request = context::assemble(&snapshot, model, role.max_output_tokens, &role.context);
        request.reasoning = crate::step::model::reasoning_at(&self.ws.repo, tip, role)?;
        let measured = context::measured_bytes(&request, request_json_len(&request));
        // A request past the role's window is never sent.
        if let Some(window) = role.context_window {
            let last = match self.last_call {
                Some(known) => known,
                None => self.last_reported(step),
            };
            let estimate = context::request_tokens(measured, last);
            if estimate + u64::from(role.max_output_tokens) > window {
                return Err(DriverError::ContextFull {
                    id: self.id.clone(),
                    role: role_name.to_owned(),
                    estimate,
                    output: role.max_output_tokens,
                    window,
                });
            }
        }
        Ok((request, measured))
    }

    /// One model call: assemble from `tip`, record, call. Commits nothing; returns
    /// the step number, the entry name for the output, and the output.
    pub(super) fn call(
        &mut self,
        tip: CommitId,
        next: u32,
        observer: &mut dyn Observer,
    ) -> Result<(u32, String, Output)> {
        let facts = self.facts.clone();
        let (config_commit, config) = self.config()?;
        let role = config.role(&facts.role).ok_or_else(|| DriverError::RoleGone {
            id: self.id.clone(),
            role: facts.role.clone(),
            lineage: facts.lineage.clone(),
        })?;
        let step = self.next_step.unwrap_or_else(|| crate::store::snapshot::next_step(&self.ws.layout.steps(&self.id)));
        let id = self.id.clone();
        let fail = |source: ModelError| DriverError::Model { id: id.clone(), role: facts.role.clone(), step, source };
        let mut plan = model::plan(&config, &facts.lineage, &facts.role, self.runtime.env()).map_err(fail)?;
        // The model the user chose for this agent, if one was (`--model`, `/model`).
        if let Some(chosen) = self.ws.repo.read_file(tip, agent::MODEL)? {
            plan.model = String::from_utf8_lossy(&chosen).trim().to_owned();
        }
        let (request, measured) = self.request(tip, step, &facts.role, role, &plan.model)?;
        // Stopped before a call that could go past a limit, not after it went.
        if let Some(spend) = self.next_call_over_budget(&config, &plan.model, measured, step, role.max_output_tokens) {
            return Err(DriverError::Exhausted { id: self.id.clone(), spend });
        }
        self.next_step = Some(step + 1);
        let dir = self.ws.layout.step(&self.id, step);
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| DriverError::Io { path, source }
        };
        // The request is not stored: it is a function of the commit and the config the
        // record names (`show --request` assembles it again and checks it against the
        // digest of what was sent).
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let started = Timestamp::now();
        let meta_path = dir.join("meta.json");
        // On record before the call, so a step cut short by a crash still shows.
        let mut meta = StepMeta {
            step,
            commit: tip.to_string(),
            config: config_commit.to_string(),
            agent: self.id.to_string(),
            provider: plan.provider.clone(),
            protocol: plan.config.protocol.name().to_owned(),
            model: plan.model.clone(),
            started: started.to_string(),
            measured_bytes: Some(measured),
            version: Some(env!("CARGO_PKG_VERSION").to_owned()),
            ..StepMeta::unwritten()
        };
        write_atomically(&meta_path, &serde_json::to_vec_pretty(&meta).unwrap_or_default()).map_err(io(&meta_path))?;
        observer.event(Event::StepStarted {
            step,
            provider: &plan.provider,
            model: &plan.model,
            commit: &meta.commit,
            system: &request.system,
            messages: &request.messages,
        });

        let response_path = dir.join("response.ndjson");
        let file = std::fs::File::create(&response_path).map_err(io(&response_path))?;
        let mut recorder = Recorder { out: std::io::BufWriter::new(file), attempts: Vec::new(), observer };
        // A call commits nothing, so a request that comes during it ends the process
        // (the receiver does that); one that came before stops here.
        let interrupt = self.runtime.interrupt();
        if !interrupt.enter_call() {
            let reason = interrupt.reason().unwrap_or(Reason::User);
            return Err(DriverError::Interrupted { id: self.id.clone(), reason });
        }
        let mut sent = None;
        let result = self.client.call(self.ws, config_commit, &plan, &request, &mut recorder, &mut sent);
        interrupt.leave_call();
        let _ = recorder.out.flush();
        let ended = Timestamp::now();
        let entry = transcript::entry_name(next, &transcript::model_origin(&plan.model), Side::Assistant);
        let (outcome, usage, error) = match &result {
            Ok(output) => (StepOutcome::Ok, output.usage.clone(), None),
            Err(e) => (StepOutcome::Error, Usage::default(), Some(e.to_string())),
        };
        meta.ended = Some(ended.to_string());
        meta.millis = Some(ended.millis_since(started));
        meta.attempts = std::mem::take(&mut recorder.attempts);
        meta.usage = Some(usage);
        meta.outcome = outcome;
        meta.error = error;
        meta.outage = result.as_ref().err().is_some_and(ModelError::is_outage);
        meta.entry = result.as_ref().ok().map(|_| entry.clone());
        meta.sent = sent;
        write_atomically(&meta_path, &serde_json::to_vec_pretty(&meta).unwrap_or_default()).map_err(io(&meta_path))?;
        if let Ok(output) = &result {
            if let Some(input) = output.usage.input {
                self.last_call = Some(Some((input, measured)));
            }
            let cost_usd = config.prices.get(&plan.model).map(|p| domain::budget::cost(&output.usage, p));
            recorder.observer.event(Event::Usage {
                step,
                usage: &output.usage,
                cost_usd,
                stop: &output.stop,
                model: output.response_model.as_deref(),
            });
        }
        result.map(|output| (step, entry, output)).map_err(fail)
    }
}

/// The canonical request as compact JSON (`show --request --canonical` prints it; its
/// size is what the window check measures).
pub fn request_json(request: &infra::provider::Request) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(request).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// The length of [`request_json`], counted as it is written rather than kept (at a
/// thousand steps the request is hundreds of kilobytes, and the window check needs
/// only its size).
fn request_json_len(request: &infra::provider::Request) -> u64 {
    struct Counter(u64);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len() as u64;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    match serde_json::to_writer(&mut counter, request) {
        Ok(()) => counter.0 + 1,
        Err(_) => 1,
    }
}

/// Writes `bytes` to a temporary name beside `path`, then renames it into place, so
/// a reader sees the old file or the new one, never half of one.
pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, bytes)?;
    std::fs::rename(&temp, path)
}

/// Writes every raw event to `response.ndjson` and passes deltas on.
pub(super) struct Recorder<'o> {
    out: std::io::BufWriter<std::fs::File>,
    attempts: Vec<AttemptRecord>,
    observer: &'o mut dyn Observer,
}

impl CallObserver for Recorder<'_> {
    fn attempt_started(&mut self, attempt: u32) {
        let _ = writeln!(self.out, "{}", json!({"attempt": attempt, "started": Timestamp::now().to_string()}));
    }

    fn raw(&mut self, attempt: u32, event: &sse::Event) {
        let _ = writeln!(self.out, "{}", json!({"attempt": attempt, "event": event.event, "data": event.data}));
    }

    fn delta(&mut self, delta: &Delta) {
        self.observer.event(Event::Delta(delta));
    }

    fn attempt_ended(&mut self, record: &AttemptRecord) {
        let _ = writeln!(self.out, "{}", json!({"attempt": record.attempt, "ended": record}));
        if record.error.is_some() {
            self.observer.event(Event::AttemptFailed {
                attempt: record.attempt,
                error: record.error.as_deref().unwrap_or(""),
                retry_in_ms: record.retry_after_ms,
            });
        }
        self.attempts.push(record.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infra::provider::{Block, Message, Request, Role};

    #[test]
    fn the_counted_length_is_the_written_ones() {
        let request = Request {
            model: "m".into(),
            max_output_tokens: 10,
            system: "say \"hi\"\n\tand go — ünïcode".into(),
            tools: Vec::new(),
            messages: vec![Message { role: Role::User, content: vec![Block::text("a \\ b \u{1} c")] }],
            reasoning: None,
        };
        assert_eq!(request_json_len(&request), request_json(&request).len() as u64);
    }
}
