//! Commits of the step loop: the directory staged (rule files cleared, the agent's
//! git config put back and its git published), transcript entries and harness
//! files added.

use crate::step::driver::guard::Due;
use crate::step::driver::scanned::Scanned;
use crate::store::directory;
use domain::agent;
use infra::git::{Additions, CommitId, Scan};

use super::{Driver, Result};

impl Driver<'_> {
    /// Stages what changed in the directory since the last scan, first removing the
    /// rule files libgit2 would read that are not files (a FIFO would hold us) and
    /// leaving out files over the role's `max_commit_file_bytes`; puts back the
    /// agent's git config and hooks if it changed them; and when its git moved,
    /// publishes it to the shared repository.
    pub(super) fn stage(&mut self) -> Result<Scanned> {
        let (config_commit, config) = self.config()?;
        let role = self.effective_role(config_commit, &config);
        let limit = role.as_ref().map_or(u64::MAX, |r| r.max_commit_file_bytes);
        let due = self.work.due();
        let scan = match &due {
            Due::Everything => Scan::All,
            Due::Paths(paths) => Scan::Paths(paths),
        };
        // What the agent did to its own files must not stop its driver: a check that
        // cannot be made is said, not fatal.
        // Its git's config first: whatever stops the rest, a person's `git` runs nothing
        // of the agent's.
        let mut unchecked = Vec::new();
        let put_back = self.ws.project.put_back_config(self.id.as_str()).unwrap_or_else(|e| {
            unchecked.push(format!("your git's config and hooks ({e})"));
            Vec::new()
        });
        let cleared = self.dir.clear_rule_files(scan).unwrap_or_else(|e| {
            unchecked.push(format!("its `.gitignore` and `.gitattributes` files ({e})"));
            Vec::new()
        });
        // A directory git cannot walk (nested past libgit2's limit, say) keeps the last
        // recorded work products; it is scanned again after the next command.
        let staged = self
            .dir
            .stage(scan, limit)
            .map_err(|e| unchecked.push(format!("your directory's changes, not recorded in this step ({e})")))
            .ok();
        let moved = self.moved_position();
        let mut unpublished = None;
        // Published when its git moved, and again after a publication that failed.
        let publish = match &moved {
            Some(text) => Some(text.as_str()),
            None if self.publish_due => Some(self.position.as_str()),
            None => None,
        };
        if let Some(position) = publish.and_then(agent::parse_position) {
            // The exporter runs in the agent's jail (made now if no command ran yet).
            let jail = match role.as_ref().map(|r| r.sandbox) {
                Some(domain::config::Sandbox::WorkspaceWrite) => self.commands(config_commit, &config)?.0.sandbox,
                _ => None,
            };
            let own = self.facts.project_branch();
            if let Err(why) =
                directory::publish(self.ws, self.runtime.exe(), jail.as_deref(), &self.id, &position, &own)
            {
                unpublished = Some(why.to_string());
            }
            self.publish_due = unpublished.is_some();
        }
        Ok(Scanned { staged, cleared, limit, put_back, moved, unpublished, unchecked })
    }

    /// Commits transcript `entries` on top of `tip`. With `scan`, the directory's
    /// changes go in too, and where the agent's own git now stands if that moved.
    pub(super) fn commit(
        &mut self,
        tip: CommitId,
        entries: &[(&str, &[u8])],
        scan: bool,
        message: &str,
    ) -> Result<CommitId> {
        let scanned = if scan { Some(self.stage()?) } else { None };
        self.commit_with(tip, entries, &[], scanned, message)
    }

    /// [`Driver::commit`] with other harness files (under `.offshoot/`) as well, and
    /// the directory's changes when `scanned`.
    pub(super) fn commit_with(
        &mut self,
        tip: CommitId,
        entries: &[(&str, &[u8])],
        files: &[(&str, &[u8])],
        scanned: Option<Scanned>,
        message: &str,
    ) -> Result<CommitId> {
        self.commit_changes(tip, entries, files, &[], scanned, message)
    }

    /// [`Driver::commit_with`] that also removes harness files `removed`.
    pub(super) fn commit_changes(
        &mut self,
        tip: CommitId,
        entries: &[(&str, &[u8])],
        files: &[(&str, &[u8])],
        removed: &[&str],
        scanned: Option<Scanned>,
        message: &str,
    ) -> Result<CommitId> {
        let (staged, moved) = match scanned {
            Some(s) => (s.staged, s.moved),
            None => (None, None),
        };
        let mut harness: Vec<(&str, &[u8])> = files.to_vec();
        harness.extend(moved.iter().map(|p| (agent::GIT, p.as_bytes())));
        let written: Vec<String> = entries.iter().map(|(name, _)| format!("{}/{name}", agent::MESSAGES)).collect();
        self.guard.expect(
            written.iter().map(String::as_str).chain(harness.iter().map(|(p, _)| *p)).chain(removed.iter().copied()),
        );
        let additions = Additions { entries, harness: &harness, removed };
        let commit = self.dir.commit(&self.branch, tip, &additions, staged.as_ref(), message)?;
        if staged.is_some() {
            self.work.scanned();
        }
        if let Some(position) = moved {
            self.position = position;
        }
        self.loader.record(tip, commit, entries)?;
        Ok(commit)
    }

    /// `.offshoot/git` for where the agent's own git stands now, if that differs from
    /// the tip's (an admin entry the agent removed leaves the last one recorded).
    pub(super) fn moved_position(&self) -> Option<String> {
        let now = agent::position_text(&self.ws.project.position(self.id.as_str()).ok()?);
        (now != self.position).then_some(now)
    }
}

/// How often a driver looks whether `repo.git` has loose objects to pack, in model
/// calls, and how many make a packing worth it (a step writes about four).
const PACK_EVERY: u32 = 32;
const PACK_AT_LEAST: usize = 256;

/// Packs the workspace's `repo.git` as a driver goes, and folds the agent's finished
/// step records into one file each: every [`PACK_EVERY`] model calls, on a thread of
/// its own (never in the step's path), when no packing of this driver is still at
/// work; another process's packing makes this one skip.
#[derive(Default)]
pub(super) struct Packer {
    calls: u32,
    running: Option<std::thread::JoinHandle<()>>,
}

impl Packer {
    /// Model call `step` of the agent whose records are in `steps_dir` was made.
    pub(super) fn step(&mut self, git_dir: &std::path::Path, steps_dir: &std::path::Path, step: u32) {
        self.calls += 1;
        if !self.calls.is_multiple_of(PACK_EVERY) || self.running.as_ref().is_some_and(|r| !r.is_finished()) {
            return;
        }
        self.finish();
        let git_dir = git_dir.to_owned();
        let steps_dir = steps_dir.to_owned();
        self.running = std::thread::Builder::new()
            .name("packer".into())
            .spawn(move || {
                // Only on what the steps leave idle.
                infra::process::idle_priority();
                // The steps before this one are over; what cannot be folded now waits.
                crate::store::step_record::fold_finished(&steps_dir, step);
                // A failure leaves the loose objects where they were: the next try packs them.
                let _ = infra::git::pack::pack_loose(&git_dir, PACK_AT_LEAST);
            })
            .ok();
    }

    /// Waits for a packing under way.
    pub(super) fn finish(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = running.join();
        }
    }
}
