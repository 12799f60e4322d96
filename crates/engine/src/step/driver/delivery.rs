//! The inbox into the transcript: messages delivered, a child's work merged in
//! with its result, and the agent's own answer deposited with whoever is owed it.

use crate::step::events::{Event, Observer};
use crate::store::inbox;
use domain::agent;
use domain::id::AgentId;
use domain::inbox::Header;
use domain::results::{self, Reply};
use domain::transcript::{self, Side};
use infra::git::{CommitId, Merged};

use crate::agents::lifecycle::{FINAL_RESPONSE, REPLIED, deposit_result};

use super::{CONFLICTED, Driver, DriverError, Result};

impl Driver<'_> {
    /// Moves each inbox message into the transcript, oldest first, one commit each;
    /// returns the new tip and the next entry number.
    pub(super) fn deliver(
        &mut self,
        mut tip: CommitId,
        mut next: u32,
        last_message: Option<String>,
        pending: Vec<inbox::Pending>,
        observer: &mut dyn Observer,
    ) -> Result<(CommitId, u32)> {
        for (i, p) in pending.into_iter().enumerate() {
            // Only the oldest can have been committed before a crash kept its file
            // (with a transfer's note after it, for a child's result).
            let delivered = i == 0 && last_message.as_deref().is_some_and(|m| m.starts_with(p.text.as_str()));
            if !delivered && self.is_compactor(&p.sender)? {
                // A compactor's result is landed (or let go), never delivered.
                tip = self.land(tip, &p.sender, &p.text, observer)?;
            } else if !delivered {
                let mut text = p.text.clone();
                // The user's words pass the `UserPromptSubmit` hooks first: one may keep
                // them from the model, or add context to them.
                if p.sender == "user" {
                    match self.prompt_hooks(&p.text, observer)? {
                        Some(context) => text.push_str(&context),
                        None => {
                            std::fs::remove_file(&p.path)
                                .map_err(|source| DriverError::Io { path: p.path.clone(), source })?;
                            continue;
                        }
                    }
                }
                let answer = Header::parse(&p.text).is_some_and(|h| h.epitaph.as_deref() == Some(FINAL_RESPONSE));
                // A child's final result brings its work: merged in just before it.
                if let Some(header) = Header::parse(&p.text).filter(|_| answer)
                    && results::is_child(self.id.as_str(), &p.sender)
                {
                    let (after, note) = self.transfer(tip, &p.sender, header.terminal.as_deref(), observer)?;
                    tip = after;
                    text.push_str(&note);
                }
                let name = transcript::entry_name(next, &p.sender, Side::User);
                // A model the user chose with the message is the agent's from this commit on.
                // (The inbox file's sender too: a header of a message that came over a
                // remote says only what whoever pushed it wrote.)
                let header = Header::parse(&p.text).filter(|h| h.from == "user" && p.sender == "user");
                let chosen = header.as_ref().and_then(|h| h.model.clone()).filter(|m| agent::check_model(m).is_ok());
                // (And the mode set with it — `acp`'s `session/set_mode` — likewise.)
                let mode = header
                    .as_ref()
                    .and_then(|h| h.mode.as_deref())
                    .and_then(|m| domain::config::Mode::parse(m).ok())
                    .map(|m| m.word());
                // (And the thinking asked for, likewise; a line that is not one is ignored.)
                let reasoning = header
                    .and_then(|h| h.reasoning)
                    .and_then(|r| agent::parse_reasoning(&r))
                    .map(|r| agent::reasoning_text(&r));
                let mut files: Vec<(&str, &[u8])> = chosen.iter().map(|m| (agent::MODEL, m.as_bytes())).collect();
                files.extend(reasoning.iter().map(|r| (agent::REASONING, r.as_bytes())));
                files.extend(mode.iter().map(|m| (agent::MODE, m.as_bytes())));
                let entry: &[(&str, &[u8])] = &[(&name, text.as_bytes())];
                tip = self.commit_with(tip, entry, &files, None, &format!("{name}: delivered"))?;
                next += 1;
                observer.event(Event::Delivered { sender: &p.sender, answer });
            }
            std::fs::remove_file(&p.path).map_err(|source| DriverError::Io { path: p.path.clone(), source })?;
        }
        Ok((tip, next))
    }

    /// Runs the `UserPromptSubmit` hooks on a message of the user's (`text`, its header
    /// and body): `None` when one blocks it (the model never reads it; the user is told),
    /// else what they add, as `<hook>` elements to put after it. A hook that fails is
    /// passed over: only a guard of a tool call fails closed.
    fn prompt_hooks(&mut self, text: &str, observer: &mut dyn Observer) -> Result<Option<String>> {
        let body = text.split_once("\n---\n").map_or(text, |(_, body)| body);
        let heard = self.life_hooks("UserPromptSubmit", serde_json::json!({"prompt": body}))?;
        if let Some(block) = heard.iter().find(|r| r.outcome == crate::step::hooks::Outcome::Block) {
            let said = format!("your message was kept from the model by the hook `{}`: {}", block.command, block.said);
            observer.event(Event::Warning(&said));
            return Ok(None);
        }
        let added: String = heard
            .iter()
            .filter(|r| r.outcome != crate::step::hooks::Outcome::Failed && !r.said.is_empty())
            .map(|r| format!("\n\n<hook>\n{}\n</hook>", r.said))
            .collect();
        Ok(Some(added))
    }

    /// Whether `sender` is a compactor working for this agent.
    pub(super) fn is_compactor(&self, sender: &str) -> Result<bool> {
        if !results::is_child(self.id.as_str(), sender) {
            return Ok(false);
        }
        let Ok(child) = AgentId::parse(sender) else { return Ok(false) };
        let Some(tip) = self.ws.repo.branch_tip(&child.branch())? else { return Ok(false) };
        Ok(crate::store::snapshot::read_facts(&self.ws.repo, tip).is_ok_and(|f| f.role == domain::grant::COMPACTOR))
    }

    /// Merges child `child`'s work (its changes from its fork point to `terminal`,
    /// `.offshoot/` aside) into this agent's tree as one commit. A conflict is not
    /// forced: the child is marked `refs/offshoot/conflicted/<child>` and the note
    /// (appended to its delivered result) says so. Returns the new tip and the note.
    pub(super) fn transfer(
        &mut self,
        tip: CommitId,
        child: &str,
        terminal: Option<&str>,
        observer: &mut dyn Observer,
    ) -> Result<(CommitId, String)> {
        let Some(terminal) = terminal.and_then(|t| CommitId::from_str(t).ok()) else {
            return Ok((tip, String::new()));
        };
        let base = crate::store::snapshot::read_facts(&self.ws.repo, terminal)
            .ok()
            .and_then(|f| f.forked_from)
            .and_then(|f| CommitId::from_str(&f).ok());
        let Some(base) = base else { return Ok((tip, String::new())) };
        match self.ws.repo.merge_into(tip, base, terminal, agent::DIR)? {
            Merged::Nothing => Ok((tip, String::new())),
            Merged::Clean { tree, paths } => {
                let message = format!("transfer from {child}: {} files", paths.len());
                let commit = self.ws.repo.commit_tree_on(&self.branch, tip, tree, &message)?;
                self.dir.checkout_paths(commit, &paths)?;
                observer.event(Event::Transferred { child, files: paths.len() });
                let shown = paths.iter().take(20).map(String::as_str).collect::<Vec<_>>().join(", ");
                let more = if paths.len() > 20 { format!(" and {} more", paths.len() - 20) } else { String::new() };
                Ok((
                    commit,
                    format!("\n\n[offshoot: `{child}`'s changes were merged into your directory: {shown}{more}]"),
                ))
            }
            Merged::Conflicts(paths) => {
                self.ws.repo.set_mark(CONFLICTED, child, terminal.to_string().as_bytes())?;
                observer.event(Event::Conflicted { child, files: paths.len() });
                Ok((
                    tip,
                    format!(
                        "\n\n[offshoot: `{child}`'s changes conflict with yours in {}; nothing of them was merged. They are in its branch (commit {terminal}); merge them by hand (`git merge agents/<its name>`) or ask it to redo them]",
                        paths.join(", ")
                    ),
                ))
            }
        }
    }

    /// Deposits the final response that ends the transcript at `tip` with whoever it
    /// is owed to (its last prompter, or its parent), once: the mark
    /// `refs/offshoot/replied/<id>` says which terminal commit was answered.
    pub(super) fn reply(&mut self, tip: CommitId) -> Result<()> {
        let answered = self.ws.repo.mark(REPLIED, self.id.as_str())?;
        if answered.as_deref() == Some(tip.to_string().as_bytes()) {
            return Ok(());
        }
        let entries = self.loader.entries(&self.ws.repo, tip)?;
        let Some(text) = transcript::final_text(entries) else { return Ok(()) };
        if let Reply::To(recipient) = results::reply(entries, self.id.as_str(), self.facts.parent.as_deref())
            && let Ok(to) = AgentId::parse(&recipient)
        {
            deposit_result(self.ws, self.runtime, &self.id, &to, FINAL_RESPONSE, tip, text)?;
        }
        self.ws.repo.set_mark(REPLIED, self.id.as_str(), tip.to_string().as_bytes())?;
        Ok(())
    }
}
