//! Compaction from the compacted agent's side: started when due, waited for when
//! the context is full, landed when the compactor's result arrives.

use crate::step::compaction as compaction_engine;
use crate::step::events::{Event, Observer};
use crate::store::inbox;
use domain::compaction;
use domain::inbox::Header;
use domain::transcript::Entry;
use infra::git::CommitId;
use infra::lock::LockGuard;

use crate::agents::lifecycle::FINAL_RESPONSE;
use crate::store::snapshot::next_step;

use super::{Driver, DriverError, Result};

impl Driver<'_> {
    /// The context is full: with a trigger, a compaction is made sure of and waited
    /// for (its landing comes with the next turn); with `never`, or when nothing can be
    /// compacted, the run stops with `full`.
    pub(super) fn await_compaction(&mut self, full: DriverError, observer: &mut dyn Observer) -> Result<()> {
        let (_, config) = self.config()?;
        if config.compaction.trigger == domain::config::Trigger::Never || self.facts.role == domain::grant::COMPACTOR {
            return Err(full);
        }
        let in_flight = compaction_engine::in_flight(self.ws, &self.id)
            .map_err(|e| DriverError::Compaction { id: self.id.clone(), reason: e.into() })?;
        let compactor = match in_flight {
            Some(compactor) => compactor,
            None => match compaction_engine::start(self.ws, self.runtime, &self.id, None, self.runtime.env()) {
                Ok(started) => started.compactor,
                Err(_) => return Err(full),
            },
        };
        let note = format!("{full}; waiting for the compaction to land");
        observer.event(Event::Compaction { compactor: compactor.as_str(), outcome: "waiting", note: &note });
        while !inbox::has_pending(&self.ws.layout, &self.id) {
            if let Some(reason) = self.runtime.interrupt().reason() {
                return Err(DriverError::Interrupted { id: self.id.clone(), reason });
            }
            // A compactor that stopped or died without a word would keep us here.
            if compaction_engine::in_flight(self.ws, &self.id).ok().flatten().is_none()
                || (!LockGuard::is_held(&self.ws.layout.lock(&compactor)).unwrap_or(false)
                    && !inbox::has_pending(&self.ws.layout, &compactor))
            {
                return Err(full);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(())
    }

    /// The model calls this agent made itself (its step records).
    pub(super) fn own_steps(&self) -> u32 {
        self.next_step.unwrap_or_else(|| next_step(&self.ws.layout.steps(&self.id))).saturating_sub(1)
    }

    /// After a tool step: starts a compaction when the config's trigger is due, none is
    /// in flight and this agent is not itself a compactor. A compaction that
    /// cannot start is reported, never fatal to the agent.
    pub(super) fn maybe_compact(&mut self, tip: CommitId, observer: &mut dyn Observer) -> Result<()> {
        if self.facts.role == domain::grant::COMPACTOR {
            return Ok(());
        }
        let (_, config) = self.config()?;
        if config.compaction.trigger == domain::config::Trigger::Never {
            return Ok(());
        }
        let since = match self.landed_steps {
            Some(steps) => steps,
            None => {
                let ledger = self.ws.repo.read_file(tip, compaction::LEDGER)?.unwrap_or_default();
                let landings = compaction::parse_ledger(&String::from_utf8_lossy(&ledger));
                *self.landed_steps.insert(compaction::own_landed_steps(&landings, self.id.as_str()))
            }
        };
        let input = self.loader.entries(&self.ws.repo, tip)?.iter().rev().find_map(|e| match e {
            Entry::Output { output, .. } => output.usage.input,
            _ => None,
        });
        let window = config.role(&self.facts.role).and_then(|r| r.context_window);
        let due = |tried| compaction::due(&config.compaction, self.own_steps(), since, tried, input, window);
        // A pass only ever postpones: its mark is read only for a step the trigger picks.
        if !due(None) {
            return Ok(());
        }
        let tried = compaction_engine::passes(self.ws, &self.id)
            .map_err(|e| DriverError::Compaction { id: self.id.clone(), reason: e.into() })?
            .map(|(at, _)| at);
        if !due(tried)
            || compaction_engine::in_flight(self.ws, &self.id)
                .map_err(|e| DriverError::Compaction { id: self.id.clone(), reason: e.into() })?
                .is_some()
        {
            return Ok(());
        }
        let heard = self.life_hooks("PreCompact", serde_json::json!({"trigger": "auto", "custom_instructions": ""}))?;
        super::life::warn_failed(&heard, observer);
        match compaction_engine::start(self.ws, self.runtime, &self.id, None, self.runtime.env()) {
            Ok(started) => {
                let note = format!("its summary will stand for {} transcript entries", started.entries);
                observer.event(Event::Compaction {
                    compactor: started.compactor.as_str(),
                    outcome: "started",
                    note: &note,
                });
            }
            Err(compaction_engine::CompactionError::Nothing { .. }) => {}
            Err(e) => {
                let note = format!("a due compaction did not start: {e}");
                observer.event(Event::Compaction { compactor: "", outcome: "declined", note: &note });
            }
        }
        Ok(())
    }

    /// Lands compactor `compactor`'s result `text` on `tip` as one commit:
    /// the span's entries and the nominated paths leave (but what this agent changed
    /// since the fork), the summary comes in. A result other than a final response, or
    /// one without a summary, lands nothing. Either way the compaction is over.
    pub(super) fn land(
        &mut self,
        tip: CommitId,
        compactor: &str,
        text: &str,
        observer: &mut dyn Observer,
    ) -> Result<CommitId> {
        let header = Header::parse(text);
        let epitaph = header.as_ref().and_then(|h| h.epitaph.clone()).unwrap_or_default();
        let terminal = header.as_ref().and_then(|h| h.terminal.as_deref()).and_then(|t| CommitId::from_str(t).ok());
        if self.ws.repo.mark(compaction_engine::COMPACTING, self.id.as_str())?.as_deref() == Some(compactor.as_bytes())
        {
            self.ws.repo.delete_mark(compaction_engine::COMPACTING, self.id.as_str())?;
        }
        let (_, config) = self.config()?;
        let plan = match terminal {
            Some(terminal) if epitaph == FINAL_RESPONSE => {
                let passes = compaction_engine::passes(self.ws, &self.id)
                    .map_err(|e| DriverError::Landing { compactor: compactor.to_owned(), reason: e.into() })?
                    .map_or(1, |(_, n)| n);
                compaction_engine::plan_landing(self.ws, tip, compactor, terminal, &config, self.own_steps(), passes)
                    .map_err(|e| DriverError::Landing { compactor: compactor.to_owned(), reason: e.into() })?
            }
            _ => None,
        };
        let Some(plan) = plan else {
            let note = match epitaph.as_str() {
                FINAL_RESPONSE => {
                    "it answered without writing a summary (or had landed already); nothing changed".to_owned()
                }
                other => format!("it ended `{other}`; nothing changed"),
            };
            observer.event(Event::Compaction { compactor, outcome: "declined", note: &note });
            return Ok(tip);
        };
        let Some(landing) = &plan.landing else { return Ok(tip) };
        let files = plan.harness_removed.len() + plan.work_removed.len() - plan.entries_removed;
        let message = format!(
            "compaction {} from {compactor}: {} entries and {files} files out, {} in",
            landing.number, plan.entries_removed, landing.summary
        );
        let commit = self.ws.repo.commit_edits(&[tip], Some(tip), &plan.edits, &message)?;
        self.ws.repo.move_branch(&self.branch, commit, tip, &message)?;
        let written: Vec<&str> = plan.harness_written.iter().map(|(p, _)| p.as_str()).collect();
        self.guard.expect(plan.harness_removed.iter().map(String::as_str).chain(written));
        self.dir.put_harness_files(&plan.harness_removed, &plan.harness_written)?;
        self.dir.checkout_paths(commit, &plan.work_removed)?;
        let kept = match plan.kept.len() {
            0 => String::new(),
            n => format!("; kept {n} nominated files this agent changed meanwhile: {}", plan.kept.join(", ")),
        };
        let passes = match landing.passes {
            1 => String::new(),
            n => format!(" (pass {n} since the last landing)"),
        };
        let note = format!(
            "compaction {} landed{passes}: {} transcript entries and {files} files removed, summary {}{kept}",
            landing.number, plan.entries_removed, landing.summary
        );
        observer.event(Event::Compaction { compactor, outcome: "landed", note: &note });
        let heard = self.life_hooks("PostCompact", serde_json::json!({"compactor": compactor}))?;
        super::life::warn_failed(&heard, observer);
        self.landed_steps = Some(landing.steps);
        self.ws.repo.delete_mark(compaction_engine::PASSES, self.id.as_str())?;
        Ok(commit)
    }
}
