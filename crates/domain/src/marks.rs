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
}

impl Mark {
    pub const ALL: [Mark; 13] = [
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
    ];

    /// Whether it travels to a remote with its agent (`push`, `pull`): those saying how
    /// the agent lives do (an obituary, `died`, is once for the whole fleet); not its
    /// working directory (a path of one machine), nor one machine's relaunch or
    /// compactor.
    pub const fn travels(self) -> bool {
        !matches!(self, Mark::Cwd | Mark::Relaunched | Mark::Compacting)
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
        }
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
    }
}
