//! Stopping what the chat's trees do: Ctrl-C, `/stop`, leaving; and noticing a driver
//! killed without a word.

use super::*;

/// How often, while agents work, the chat checks that their drivers still run (one
/// killed with SIGKILL writes no end).
pub(super) const RECHECK: Duration = Duration::from_secs(2);

impl Chat<'_> {
    /// Forgets agents counted as working whose driver is gone without a word (killed):
    /// not running at two looks in a row (a driver just launched takes a moment to start).
    pub(super) fn recheck(&mut self) {
        let layout = &self.ws.layout;
        let idle: std::collections::BTreeSet<String> = self
            .tree
            .working()
            .filter(|a| {
                AgentId::parse(a).is_ok_and(|id| !infra::lock::LockGuard::is_held(&layout.lock(&id)).unwrap_or(true))
            })
            .map(str::to_owned)
            .collect();
        let gone: Vec<String> = idle.intersection(&self.suspects).cloned().collect();
        self.suspects = idle;
        for agent in gone {
            self.suspects.remove(&agent);
            self.tree.set(&agent, State::NeedsYou, "its driver ended without a word");
            self.pending
                .push(format!("· `{agent}`'s driver ended without a word (killed?); `offshoot scan` looks at it"));
        }
    }

    /// Stops the tree until nothing of it runs or is about to, for at most 2 s: the
    /// chat's view may be behind (an agent woken by a result a moment ago), and a driver
    /// launched by a child's result just before a stop revives its agent when it starts.
    pub(super) fn leave_nothing_working(&mut self) {
        let until = Instant::now() + Duration::from_secs(2);
        while self.tree.any_working() || self.roots.iter().any(|r| self.busy(r)) {
            self.stop_all();
            if Instant::now() > until {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether a driver of `root`'s tree runs, or an agent of it has mail and is not
    /// stopped (a driver is on its way).
    pub(super) fn busy(&self, root: &AgentId) -> bool {
        let mut tree = lifecycle::descendants(self.ws, root).unwrap_or_default();
        tree.push(root.clone());
        tree.iter().any(|id| {
            infra::lock::LockGuard::is_held(&self.ws.layout.lock(id)).unwrap_or(true)
                || (engine::store::inbox::has_pending(&self.ws.layout, id)
                    && self.ws.repo.mark(lifecycle::STOPPED, id.as_str()).map_or(true, |m| m.is_none()))
        })
    }

    /// Stops everything at work in the trees of this chat (Ctrl-C, leaving): the one
    /// shown, and those it showed before (`/new`, `/attach` to another tree) that still
    /// work.
    pub(super) fn stop_all(&mut self) {
        let shown = AgentId::parse(self.tree.root()).ok();
        let roots: Vec<AgentId> = self.roots.clone();
        for root in roots {
            if Some(&root) == shown.as_ref() || self.busy(&root) {
                self.stop(&root);
            }
        }
    }

    /// Stops `id` and every agent below it, as `offshoot stop` does.
    pub(super) fn stop(&mut self, id: &AgentId) {
        // The attached agent's answer cut short is shown before the stop is said; its
        // driver's own "stopped" then says nothing new.
        let below = format!("{id}.");
        let working: Vec<String> =
            self.tree.working().filter(|a| *a == id.as_str() || a.starts_with(&below)).map(str::to_owned).collect();
        if self.id.as_ref().is_some_and(|a| working.iter().any(|w| w == a.as_str())) {
            self.cut_stream("cut off: not kept");
            self.stop_said = true;
        }
        self.pending.push(format!("· stopping `{id}` and the agents below it"));
        match lifecycle::stop_tree(self.ws, self.rt, id, Duration::from_secs(10)) {
            Ok(_) => {
                for agent in working {
                    self.tree.set(&agent, State::Stopped, "stopped");
                }
                self.pending.push(format!("· stopped; a message continues `{id}`"));
            }
            Err(e) => self.pending.push(format!("· could not stop: {e}")),
        }
    }
}
