//! `.offshoot/` belongs to the harness, and so does the directory's `.git`. After
//! every tool call the guard puts back whatever the call changed there, as the tip
//! has it, and says what it put back; nothing an agent does there is ever committed
//! or read. inotify says where to look, so a call that touched neither costs one
//! read; without inotify every call checks everything.

use std::collections::{BTreeSet, HashSet};

use domain::agent;
use domain::id::AgentId;
use infra::git::{Attachment, CommitId, Difference, GitError, Restored, Tracked};
use infra::watch::Watch;

use crate::store::workspace::Workspace;

/// The directory's pointer to the agent's own repository.
const DOT_GIT: &str = ".git";

/// Watches one agent's directory for changes to what belongs to the harness.
pub(crate) struct Guard {
    watch: Option<Watch>,
    /// Paths touched and not yet checked.
    pending: BTreeSet<String>,
    /// Everything must be checked (events were lost, or the directory went away).
    everything: bool,
    /// Paths the driver itself wrote since the last look.
    expected: HashSet<String>,
}

impl Guard {
    pub fn new(dir: &Tracked) -> Guard {
        let watch = Watch::new(dir.root(), agent::DIR, &[DOT_GIT]).ok();
        Guard { watch, pending: BTreeSet::new(), everything: false, expected: HashSet::new() }
    }

    /// Notes files the driver writes itself (and their directories), whose events
    /// are not the agent's doing.
    pub(crate) fn expect<'p>(&mut self, paths: impl IntoIterator<Item = &'p str>) {
        for path in paths {
            let mut at = path;
            self.expected.insert(at.to_owned());
            while let Some((parent, _)) = at.rsplit_once('/') {
                self.expected.insert(parent.to_owned());
                at = parent;
            }
        }
    }

    fn absorb(&mut self) {
        let Some(watch) = self.watch.as_mut() else { return };
        let touched = watch.take();
        self.everything |= touched.everything;
        self.pending.extend(touched.paths.into_iter().filter(|p| !self.expected.contains(p)));
    }

    /// Before a call runs: the driver's own writes since the last check are seen
    /// and set aside (anything else stays pending).
    pub(crate) fn before_call(&mut self) {
        self.absorb();
        self.expected.clear();
    }

    /// After a call: puts back, as `tip` has them, the harness's files the call
    /// changed, and the directory's `.git`. Returns what was put back.
    pub(crate) fn after_call(
        &mut self,
        ws: &Workspace,
        id: &AgentId,
        dir: &Tracked,
        tip: CommitId,
    ) -> Result<Vec<Restored>, GitError> {
        self.absorb();
        let everything = std::mem::take(&mut self.everything) || self.watch.is_none();
        let pending = std::mem::take(&mut self.pending);
        if !everything && pending.is_empty() {
            return Ok(Vec::new());
        }
        let root = dir.root();
        if !root.is_dir() {
            std::fs::create_dir_all(root).map_err(|source| GitError::Io { path: root.to_owned(), source })?;
        }
        let mut restored = Vec::new();
        if (everything || pending.contains(DOT_GIT)) && ws.project.attachment(id.as_str(), root) != Attachment::Attached
        {
            ws.project.restore_dot_git(id.as_str(), root)?;
            restored.push(Restored { path: DOT_GIT.into(), difference: Difference::Changed });
        }
        let under = format!("{}/", agent::DIR);
        let mut prefixes: Vec<&str> = if everything {
            vec![agent::DIR]
        } else {
            pending.iter().map(String::as_str).filter(|p| *p == agent::DIR || p.starts_with(&under)).collect()
        };
        // A path below another pending one is checked with it.
        prefixes.sort();
        prefixes.dedup_by(|later, earlier| later.starts_with(&format!("{earlier}/")));
        for prefix in prefixes {
            restored.extend(dir.restore(tip, prefix)?);
        }
        if !restored.is_empty() {
            // The guard's own repairs are not the agent's doing, and may have
            // recreated directories.
            if let Some(watch) = self.watch.as_mut()
                && watch.rewatch().is_err()
            {
                self.watch = None;
            }
        }
        Ok(restored)
    }
}

/// What the model is told when the guard put something back.
pub(crate) fn note(restored: &[Restored]) -> String {
    const SHOWN: usize = 10;
    let mut parts: Vec<String> = restored
        .iter()
        .take(SHOWN)
        .map(|r| {
            let how = match (r.path.as_str(), r.difference) {
                (DOT_GIT, _) => "it points at your repository again",
                (_, Difference::Changed) => "your change was undone",
                (_, Difference::Missing) => "it was deleted and is back",
                (_, Difference::Extra) => "removed: not the harness's",
            };
            format!("`{}` ({how})", r.path)
        })
        .collect();
    if restored.len() > SHOWN {
        parts.push(format!("and {} more", restored.len() - SHOWN));
    }
    format!(
        "\n[`.offshoot/` and `.git` belong to the harness, so changes to them are never kept; put back: {}]",
        parts.join(", ")
    )
}

/// Which work products changed since the directory's last scan, so a commit scans only
/// those: inotify on the whole tree but `.offshoot/` and `.git`. The first scan of a
/// driver, one after lost events or a directory moved, and every scan where inotify
/// cannot watch the tree (the user's watch limit, no inotify) look at everything.
pub(crate) struct WorkWatch {
    watch: Option<Watch>,
    pending: BTreeSet<String>,
    /// The next scan must look at everything.
    everything: bool,
    /// The watch lost track (events lost, a directory moved, a watch refused): it is
    /// made afresh after the next whole scan.
    lost: bool,
}

/// What the next scan must look at.
pub(crate) enum Due {
    Everything,
    Paths(Vec<String>),
}

impl WorkWatch {
    pub fn new(dir: &Tracked) -> WorkWatch {
        let watch = Watch::tree(dir.root(), &[agent::DIR, DOT_GIT]).ok();
        // What changed while no driver watched is not known: the first scan is whole.
        WorkWatch { watch, pending: BTreeSet::new(), everything: true, lost: false }
    }

    /// What the next scan must cover.
    pub fn due(&mut self) -> Due {
        match self.watch.as_mut() {
            Some(watch) => {
                let touched = watch.take();
                self.everything |= touched.everything;
                self.lost |= touched.everything;
                self.pending.extend(touched.paths);
            }
            None => self.everything = true,
        }
        if self.everything { Due::Everything } else { Due::Paths(self.pending.iter().cloned().collect()) }
    }

    /// The scan `due` asked for was committed: nothing is pending. After a whole scan
    /// that was due to lost track, the tree is watched afresh (not after the first one:
    /// the watch made at start has not lost anything).
    pub(crate) fn scanned(&mut self) {
        if std::mem::take(&mut self.lost)
            && let Some(watch) = self.watch.as_mut()
            && watch.rewatch().is_err()
        {
            self.watch = None;
        }
        self.pending.clear();
        self.everything = self.watch.is_none();
    }
}
