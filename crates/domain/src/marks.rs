//! Every mark the harness keeps (`refs/offshoot/<kind>/<key>`, a small blob) and every
//! epitaph a result carries, in one table: what each means, who sets it, who clears it.

/// A kind of mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// `ids/<child>` → `<parent>\n<dispatch call's key>`: a child's id, claimed before
    /// anything of it is written; removed with the agent.
    Ids,
    /// `names/<name>` → the agent's id: a name, claimed create-only.
    Names,
    /// `stopped/<id>` → the tip it stopped at: results and messages wait instead of
    /// waking it, until the user's message or a run revives it.
    Stopped,
    /// `told/<id>` → the tip whose stop its parent was told of (told once).
    Told,
    /// `replied/<id>` → the terminal commit whose answer was deposited (paid once).
    Replied,
    /// `exhausted/<id>` → what was spent, when its tree's budget stopped it.
    Exhausted,
    /// `cwd/<id>` → the agent's working directory.
    Cwd,
    /// `conflicted/<child>` → the child's terminal commit whose work did not merge.
    Conflicted,
    /// `relaunched/<id>` → the tip `scan` relaunched it at (once per tip).
    Relaunched,
    /// `died/<id>` → the tip `scan` reported it dead at (once per tip).
    Died,
    /// `compacting/<id>` → the compactor working for it.
    Compacting,
    /// `compaction-passes/<id>` → `<own steps at the last pass> <passes since the last
    /// landing>`; removed by a landing.
    CompactionPasses,
    /// `fleet/<root>` → the remote it was handed to: the tree is driven by that remote's
    /// workers (`prompt --on`), never by a person's workspace.
    Fleet,
    /// `mirror/<id>` → the commit of the agent whose work was last written into the
    /// user's working tree: the agent works in place (`acp`'s in-place sessions).
    Mirror,
}

impl Mark {
    pub const ALL: [Mark; 14] = [
        Mark::Ids,
        Mark::Names,
        Mark::Stopped,
        Mark::Told,
        Mark::Replied,
        Mark::Exhausted,
        Mark::Cwd,
        Mark::Conflicted,
        Mark::Relaunched,
        Mark::Died,
        Mark::Compacting,
        Mark::CompactionPasses,
        Mark::Fleet,
        Mark::Mirror,
    ];

    /// Whether it travels to a remote with its agent (`push`, `pull`): those saying how
    /// the agent lives do (an obituary, `died`, is once for the whole fleet); not its
    /// working directory (a path of one machine), nor one machine's relaunch,
    /// compactor or mirror into its user's checkout.
    pub const fn travels(self) -> bool {
        !matches!(self, Mark::Cwd | Mark::Relaunched | Mark::Compacting | Mark::Mirror)
    }

    /// Its directory under `refs/offshoot/`.
    pub const fn kind(self) -> &'static str {
        match self {
            Mark::Ids => "ids",
            Mark::Names => "names",
            Mark::Stopped => "stopped",
            Mark::Told => "told",
            Mark::Replied => "replied",
            Mark::Exhausted => "exhausted",
            Mark::Cwd => "cwd",
            Mark::Conflicted => "conflicted",
            Mark::Relaunched => "relaunched",
            Mark::Died => "died",
            Mark::Compacting => "compacting",
            Mark::CompactionPasses => "compaction-passes",
            Mark::Fleet => "fleet",
            Mark::Mirror => "mirror",
        }
    }
}

impl Mark {
    /// The ref holding this mark of `key` (an agent's id, or a name).
    pub fn ref_name(self, key: impl std::fmt::Display) -> String {
        Shelf::Mark(self).ref_name(key)
    }

    /// What the refs of every mark of this kind start with.
    pub fn prefix(self) -> String {
        Shelf::Mark(self).prefix()
    }

    /// The key of ref `name` when it is a mark of this kind.
    pub fn key_of(self, name: &str) -> Option<&str> {
        Shelf::Mark(self).key_of(name)
    }
}

/// A directory of the harness's refs (`refs/offshoot/<dir>/<key>`): an agent's marks,
/// or what the fleet shares through a remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shelf {
    Mark(Mark),
    /// `claims/<id>` → the worker driving the agent, and its lease.
    Claims,
    /// `records/<id>` → a commit of the agent's step records, as its workers sent them.
    Records,
    /// `stop-requests/<id>` → when a stop of the agent was asked, and what waited then.
    StopRequests,
    /// `inbox/<id>/<message>` → a message on its way to the agent.
    Inbox,
    /// `workers/<name>` → a worker's presence, renewed as its claims are: the workers
    /// alive, for each to know whom an agent is preferred by.
    Workers,
}

impl Shelf {
    /// Its directory under `refs/offshoot/`.
    pub const fn dir(self) -> &'static str {
        match self {
            Shelf::Mark(mark) => mark.kind(),
            Shelf::Claims => "claims",
            Shelf::Records => "records",
            Shelf::StopRequests => "stop-requests",
            Shelf::Inbox => "inbox",
            Shelf::Workers => "workers",
        }
    }

    /// The ref of `key` on this shelf.
    pub fn ref_name(self, key: impl std::fmt::Display) -> String {
        infra::git::harness_ref(self.dir(), &key.to_string())
    }

    /// What every ref on this shelf starts with.
    pub fn prefix(self) -> String {
        infra::git::harness_ref(self.dir(), "")
    }

    /// The key of ref `name` when it is on this shelf.
    pub fn key_of(self, name: &str) -> Option<&str> {
        infra::git::harness_ref_parts(name).filter(|(dir, _)| *dir == self.dir()).map(|(_, key)| key)
    }
}

/// What a result deposited with a parent (or prompter) says of how its sender ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epitaph {
    /// Its final answer.
    FinalResponse,
    /// Stopped by `offshoot stop`.
    Stopped,
    /// Stopped because its tree's budget ran out.
    BudgetExhausted,
    /// Its driver died and a relaunch did not get it further (`scan`).
    Died,
}

impl Epitaph {
    pub const fn as_str(self) -> &'static str {
        match self {
            Epitaph::FinalResponse => "final-response",
            Epitaph::Stopped => "stopped",
            Epitaph::BudgetExhausted => "budget-exhausted",
            Epitaph::Died => "died",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_directory_of_its_own() {
        let mut kinds: Vec<&str> = Mark::ALL.iter().map(|m| m.kind()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), Mark::ALL.len());
        assert!(kinds.iter().all(|k| !k.is_empty() && !k.contains('/')));
        for shelf in [Shelf::Claims, Shelf::Records, Shelf::StopRequests, Shelf::Inbox, Shelf::Workers] {
            assert!(!kinds.contains(&shelf.dir()), "{} is a mark's too", shelf.dir());
        }
    }

    #[test]
    fn a_ref_is_named_and_read_back_in_one_place() {
        assert_eq!(Mark::Stopped.ref_name("k7q2mx.3"), "refs/offshoot/stopped/k7q2mx.3");
        assert_eq!(Shelf::Inbox.prefix(), "refs/offshoot/inbox/");
        assert_eq!(Shelf::Records.key_of("refs/offshoot/records/a.1"), Some("a.1"));
        assert_eq!(Shelf::Records.key_of("refs/offshoot/recordsx/a.1"), None);
        assert_eq!(Shelf::Claims.key_of("refs/heads/agents/a"), None);
    }
}
