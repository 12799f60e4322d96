//! The hooks of an agent's life outside its tool calls: `SessionStart` and `SessionEnd`
//! around each run of its driver, `SubagentStart` before a child's first step, `Stop`
//! (a root) or `SubagentStop` (a child) when it answers — where a hook that blocks with
//! a reason has it go on, the reason its next message, as in Claude Code — and the
//! `UserPromptSubmit` of a message, run from delivery.

use serde_json::{Value, json};

use crate::step::events::{Event, Observer};
use crate::step::hooks::{self, Outcome, Ran};

use super::{Driver, Result};

/// How many times in a row `Stop` hooks may send an agent back to work in one run.
const MAX_STOP_CONTINUES: u32 = 3;

impl Driver<'_> {
    /// Runs the hooks of `event` (no tool) with `extra` in the payload; none configured
    /// costs nothing.
    pub(super) fn life_hooks(&mut self, event: &str, extra: Value) -> Result<Vec<Ran>> {
        let (config_commit, config) = self.config()?;
        if !config.hooks.contains_key(event) {
            return Ok(Vec::new());
        }
        let env = self.hook_env(&config);
        // (Working in place, its hooks run in its jail: see `hooks::Who::jail`.)
        let jail = match self.in_place {
            true => self.commands(config_commit, &config)?.0.sandbox,
            false => None,
        };
        let root = self.dir.root().to_owned();
        let mode = self.effective_role(config_commit, &config).map_or(domain::config::Mode::ReadOnly, |r| r.mode());
        let who = hooks::Who {
            agent: self.id.as_str(),
            parent: self.facts.parent.as_deref(),
            mode,
            cwd: &root,
            dir: &root,
            workspace: self.ws.layout.root(),
            env: &env,
            jail: jail.as_deref(),
        };
        Ok(hooks::run(&config, event, None, extra, &who))
    }

    /// `SessionStart` (`startup` before its first step, else `resume`), and for a child
    /// before its first step `SubagentStart`. What they say is theirs to log: a failure
    /// is said as a warning, nothing more.
    pub(super) fn start_hooks(&mut self, observer: &mut dyn Observer) -> Result<()> {
        let first = self.own_steps() == 0;
        let mut heard = self.life_hooks("SessionStart", json!({"source": if first { "startup" } else { "resume" }}))?;
        if first && self.facts.parent.is_some() {
            let role = self.facts.role.clone();
            heard.extend(self.life_hooks("SubagentStart", json!({"agent_type": role}))?);
        }
        warn_failed(&heard, observer);
        Ok(())
    }

    /// `Stop` (`SubagentStop` for a child) once the agent answered: `true` when a hook
    /// blocked with a reason, which is left as its next message (from `hook`) so the
    /// run goes on — at most [`MAX_STOP_CONTINUES`] times in a row.
    pub(super) fn stop_hooks(&mut self, answer: &str, continued: u32, observer: &mut dyn Observer) -> Result<bool> {
        let event = if self.facts.parent.is_some() { "SubagentStop" } else { "Stop" };
        let extra = json!({"stop_hook_active": continued > 0, "last_assistant_message": answer});
        let heard = self.life_hooks(event, extra)?;
        warn_failed(&heard, observer);
        // (A child's answer is on its way to its parent by now: its hooks only hear it.)
        if self.facts.parent.is_some() {
            return Ok(false);
        }
        let Some(block) = heard.iter().find(|r| r.outcome == Outcome::Block && !r.said.is_empty()) else {
            return Ok(false);
        };
        if continued >= MAX_STOP_CONTINUES {
            let said = format!(
                "the hook `{}` would send the agent back to work a {}th time in a row; the run ends here",
                block.command,
                continued + 1
            );
            observer.event(Event::Warning(&said));
            return Ok(false);
        }
        let body = format!("A `{event}` hook (`{}`) asks you to go on:\n\n{}", block.command, block.said);
        // (Into its own inbox, even in a worker's workspace: it is this driver's to deliver.)
        let deposit = domain::inbox::Deposit::new(domain::hooks::SENDER, infra::time::Timestamp::now(), &body);
        crate::store::inbox::deposit_text(&self.ws.layout, &self.id, domain::hooks::SENDER, &deposit.render())?;
        Ok(true)
    }

    /// `SessionEnd`, as the run lets go (`reason`: `exit`, `stopped`, `error`).
    pub(super) fn end_hooks(&mut self, reason: &str, observer: &mut dyn Observer) {
        if let Ok(heard) = self.life_hooks("SessionEnd", json!({"reason": reason})) {
            warn_failed(&heard, observer);
        }
    }
}

/// Says what hooks failed, as warnings.
pub(super) fn warn_failed(heard: &[Ran], observer: &mut dyn Observer) {
    for ran in heard.iter().filter(|r| r.outcome == Outcome::Failed) {
        observer.event(Event::Warning(&format!("the `{}` hook `{}` failed: {}", ran.event, ran.command, ran.said)));
    }
}
